/* C tests of every export of include/xce/xce.h: NULL and bad arguments, texts, configuration
 * parsing, the lifecycle against closed and silent ports. No controller needed.
 * Usage: test_api NAME (one test per meson test) or test_api all. */
#include <limits.h>
#include <math.h>
#include <stdbool.h>

#include "util.h"

static const int all_codes[] = {E_XCE_REDIRECT, E_XCE_NOMASTER, E_XCE_NOT_READY,
                                E_XCE_STANDBY,  E_XCE_DUP_JOB,  E_XCE_PROTO,
                                E_XCE_AUTH,     E_XCE_TLS,      E_XCE_INTERNAL,
                                E_XCE_CLOSED,   E_XCE_LOOKUP};

static void test_codes(void) {
    /* protocol.md's values */
    CHECK_EQ(E_XCE_REDIRECT, 2001);
    CHECK_EQ(E_XCE_NOMASTER, 2002);
    CHECK_EQ(E_XCE_NOT_READY, 2003);
    CHECK_EQ(E_XCE_STANDBY, 2004);
    CHECK_EQ(E_XCE_DUP_JOB, 2005);
    CHECK_EQ(E_XCE_PROTO, 2006);
    CHECK_EQ(E_XCE_AUTH, 2007);
    CHECK_EQ(E_XCE_TLS, 2008);
    CHECK_EQ(E_XCE_INTERNAL, 2009);
    CHECK_EQ(E_XCE_CLOSED, 2010);
    CHECK_EQ(E_XCE_LOOKUP, 2011);
}

static void test_strerror(void) {
    for (size_t i = 0; i < sizeof all_codes / sizeof all_codes[0]; i++) {
        const char *pos = xce_strerror(all_codes[i]);
        const char *neg = xce_strerror(-all_codes[i]);
        CHECK(pos != NULL && neg != NULL);
        CHECK(pos == neg); /* static: the very same string */
        CHECK(pos && strlen(pos) > 0 && strcmp(pos, "unknown error") != 0);
        for (size_t j = 0; j < i; j++) /* each code has its own text */
            CHECK(strcmp(pos, xce_strerror(all_codes[j])) != 0);
    }
    CHECK_STR(xce_strerror(-E_XCE_NOT_READY), "cluster not ready");
    CHECK_STR(xce_strerror(E_XCE_NOT_READY), "cluster not ready");
    CHECK_STR(xce_strerror(-E_XCE_LOOKUP), "name lookup failed");
    CHECK_STR(xce_strerror(-ECONNREFUSED), strerror(ECONNREFUSED));
    CHECK_STR(xce_strerror(EINVAL), strerror(EINVAL));
    CHECK_STR(xce_strerror(-EINTR), strerror(EINTR));
    CHECK_STR(xce_strerror(0), "success");
    CHECK(xce_strerror(INT_MIN) != NULL);
    CHECK(xce_strerror(INT_MAX) != NULL);
    CHECK(xce_strerror(-99999) != NULL);
    CHECK(xce_strerror(-E_XCE_NOT_READY) == xce_strerror(-E_XCE_NOT_READY));
}

static void test_version(void) {
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", XCE_VERSION_MAJOR, XCE_VERSION_MINOR,
             XCE_VERSION_PATCH);
    CHECK_STR(xce_version(), want);
}

static bool conf_is_zero(const xce_client_config_t *c) {
    const unsigned char *p = (const unsigned char *)c;
    for (size_t i = 0; i < sizeof *c; i++)
        if (p[i]) return false;
    return true;
}

static void test_config_init(void) {
    xce_client_config_t conf;
    memset(&conf, 0xab, sizeof conf);
    CHECK_EQ(xce_client_config_init(NULL), -EINVAL);
    CHECK_EQ(xce_client_config_init(&conf), 0);
    CHECK(conf_is_zero(&conf));
    CHECK_EQ(N_MAX_MASTERS, 8);
    CHECK_EQ(XCE_MAXHOSTNAME_LEN, 256);
}

static void test_parse_masters(void) {
    xce_client_config_t conf, before;
    xce_client_config_init(&conf);
    CHECK_EQ(xce_client_config_parse_masters(&conf, "ctl1:7001,ctl2:7002, 10.0.0.3:7003"), 3);
    CHECK_EQ(conf.nmasters, 3);
    CHECK_STR(conf.masters[0], "ctl1");
    CHECK_STR(conf.masters[1], "ctl2");
    CHECK_STR(conf.masters[2], "10.0.0.3");
    CHECK_EQ(conf.ports[0], 7001);
    CHECK_EQ(conf.ports[2], 7003);
    CHECK_EQ(xce_client_config_parse_masters(&conf, "[::1]:7000"), 1);
    CHECK_STR(conf.masters[0], "::1");
    CHECK_EQ(conf.ports[0], 7000);
    CHECK_STR(conf.masters[1], ""); /* previous entries cleared */
    CHECK_EQ(xce_client_config_parse_masters(&conf, "h:1,h:2,h:3,h:4,h:5,h:6,h:7,h:65535"), 8);

    static const char *bad[] = {"",      " ",       ",",       "h:1,",   ",h:1",    "h",
                                "h:",    ":1",      "h:0",     "h:65536", "h:99999", "h:x",
                                "h:-1",  "h:+1",    "h:1x",    "::1:7",   "[::1]7",  "[::1]:",
                                "a b:1", "h:1:2",   "h:1,,h:2", "h\t:1",
                                "h:1,h:2,h:3,h:4,h:5,h:6,h:7,h:8,h:9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(&before, &conf, sizeof conf);
        int rc = xce_client_config_parse_masters(&conf, bad[i]);
        if (rc != -EINVAL) fprintf(stderr, "bad master list \"%s\" gave %d\n", bad[i], rc);
        CHECK_EQ(rc, -EINVAL);
        CHECK(memcmp(&before, &conf, sizeof conf) == 0); /* untouched on error */
    }
    char longhost[300];
    memset(longhost, 'h', 256);
    strcpy(longhost + 256, ":1");
    CHECK_EQ(xce_client_config_parse_masters(&conf, longhost), -EINVAL);
    memset(longhost, 'h', 255);
    strcpy(longhost + 255, ":1");
    CHECK_EQ(xce_client_config_parse_masters(&conf, longhost), 1);
    CHECK_EQ(strlen(conf.masters[0]), 255);
    CHECK_EQ(xce_client_config_parse_masters(&conf, "\xff\xfe:1"), -EINVAL); /* not UTF-8 */
    CHECK_EQ(xce_client_config_parse_masters(NULL, "h:1"), -EINVAL);
    CHECK_EQ(xce_client_config_parse_masters(&conf, NULL), -EINVAL);
}

#define SENTINEL ((xcecli_ctx_t)(uintptr_t)0x5a5a)

static void test_start_bad_args(void) {
    xce_client_config_t conf;
    xcecli_ctx_t ctx = SENTINEL;
    config_local(&conf, 7000);
    CHECK_EQ(xcecli_start(NULL, &ctx), -EINVAL);
    CHECK_EQ(xcecli_start(&conf, NULL), -EINVAL);

    xce_client_config_t c = conf;
    c.nmasters = 0;
    CHECK_EQ(xcecli_start(&c, &ctx), -EINVAL);
    c.nmasters = N_MAX_MASTERS + 1;
    CHECK_EQ(xcecli_start(&c, &ctx), -EINVAL);
    c = conf;
    c.nmasters = 2; /* second master empty */
    CHECK_EQ(xcecli_start(&c, &ctx), -EINVAL);
    c = conf;
    c.ports[0] = 0;
    CHECK_EQ(xcecli_start(&c, &ctx), -EINVAL);
    c = conf;
    memset(c.masters[0], 'h', sizeof c.masters[0]); /* unterminated */
    CHECK_EQ(xcecli_start(&c, &ctx), -EINVAL);
    c = conf;
    strcpy(c.masters[0], "\xff");
    CHECK_EQ(xcecli_start(&c, &ctx), -EINVAL);
    c = conf;
    strcpy(c.tls_cert_file, "/nonexistent/cert.pem"); /* cert without key */
    CHECK_EQ(xcecli_start(&c, &ctx), -EINVAL);
    c = conf;
    memset(c.client_name, 'n', sizeof c.client_name);
    CHECK_EQ(xcecli_start(&c, &ctx), -EINVAL);
    CHECK(ctx == SENTINEL); /* never written on error */
}

static void test_start_closed_port(void) {
    xce_client_config_t conf;
    xcecli_ctx_t ctx = SENTINEL;
    config_local(&conf, closed_port());
    CHECK_EQ(xcecli_start(&conf, &ctx), -ECONNREFUSED); /* F2: the last transport error */
    CHECK(ctx == SENTINEL);
    /* two closed masters: still the transport error, never EINVAL */
    char list[64];
    snprintf(list, sizeof list, "127.0.0.1:%u,127.0.0.1:%u", closed_port(), closed_port());
    CHECK_EQ(xce_client_config_parse_masters(&conf, list), 2);
    CHECK_EQ(xcecli_start(&conf, &ctx), -ECONNREFUSED);
    CHECK(ctx == SENTINEL);
}

static void test_null_ctx(void) {
    xce_controller_info_t *info = NULL;
    xce_job_t *jobs = NULL;
    xce_host_t *hosts = NULL;
    xce_resource_t *res = NULL;
    xce_resval_t *rv = NULL;
    xce_cluster_conf_t *cc = NULL;
    xce_stats_t st;
    xce_last_error_t le;
    xce_usage_t u = {1, 2};
    char buf[16];
    uint64_t id;
    xcecli_stop(NULL); /* NULL-safe */
    CHECK_EQ(xcecli_set_retry_config(NULL, NULL), -EINVAL);
    CHECK_EQ(xcecli_set_option(NULL, XCE_OPT_REPLY_TIMEOUT_MS, 100), -EINVAL);
    CHECK_EQ(xcecli_set_reconnect_handler(NULL, NULL, NULL), -EINVAL);
    CHECK_EQ(xcecli_set_event_handler(NULL, NULL, NULL), -EINVAL);
    CHECK_EQ(xcecli_get_stats(NULL, &st), -EINVAL);
    CHECK_EQ(xcecli_last_error(NULL, &le), -EINVAL);
    CHECK_EQ(xcecli_last_error_text(NULL, buf, sizeof buf), -EINVAL);
    CHECK_EQ(xcecli_get_masters(NULL, buf, sizeof buf), -EINVAL);
    CHECK_EQ(xcecli_hello(NULL, &info), -EINVAL);
    xce_job_t **all = NULL;
    CHECK_EQ(xcecli_joblist(NULL, &all), -EINVAL);
    CHECK_EQ(xcecli_joblist_filter(NULL, NULL, &jobs), -EINVAL);
    CHECK_EQ(xcecli_jobinfo(NULL, 1, &jobs), -EINVAL);
    CHECK_EQ(xcecli_reslist(NULL, &res), -EINVAL);
    CHECK_EQ(xcecli_workerlist(NULL, &hosts), -EINVAL);
    CHECK_EQ(xcecli_clusterconf(NULL, &cc), -EINVAL);
    CHECK_EQ(xcecli_resval(NULL, "h", &rv), -EINVAL);
    CHECK_EQ(xcecli_join(NULL, NULL, NULL), -EINVAL);
    CHECK_EQ(xcecli_jobsubmit(NULL, NULL, &id), -EINVAL);
    CHECK_EQ(xcecli_jobdispatch(NULL, 1, "h"), -EINVAL);
    CHECK_EQ(xcecli_jobctrl(NULL, 1, XCE_JOBCTRL_KILL), -EINVAL);
    CHECK_EQ(xcecli_queuectrl(NULL, "normal", XCE_QUEUE_OPEN), -EINVAL);
    CHECK_EQ(xcecli_hostctrl(NULL, "h", XCE_HOSTCTRL_OPEN), -EINVAL);
    CHECK_EQ(xcecli_update_resvals(NULL, "h", NULL, 0), -EINVAL);
    CHECK_EQ(xcecli_update_jusage(NULL, 1, &u), -EINVAL);
    CHECK_EQ(xcecli_runtask(NULL, "h", "true", &id), -EINVAL);
    CHECK_EQ(xcecli_set_pend_reason(NULL, 1, "r"), -EINVAL);
    CHECK_EQ(xcecli_clear_reason(NULL, 1), -EINVAL);
    CHECK_EQ(xcecli_notify(NULL, XCE_NOTIFY_JOBSTART, 1, 0), -EINVAL);
    CHECK_EQ(xcecli_notify_jobstart(NULL, 1), -EINVAL);
    CHECK_EQ(xcecli_notify_jobfinish(NULL, 1, 0), -EINVAL);
    CHECK_EQ(xcecli_notify_jobfail(NULL, 1, 1), -EINVAL);
    CHECK_EQ(xcecli_notify_jobstop(NULL, 1), -EINVAL);
    CHECK_EQ(xcecli_notify_jobchkpt(NULL, 1), -EINVAL);
    CHECK_EQ(xcecli_heartbeat(NULL, "h"), -EINVAL);
    CHECK_EQ(xcecli_nop(NULL), -EINVAL);
    CHECK_EQ(xcecli_flush(NULL, 0), -EINVAL);
    CHECK_EQ(xcecli_outbox_depth(NULL), -EINVAL);
    CHECK_EQ(xcecli_wakeup(NULL), -EINVAL);
    CHECK_EQ(xcecli_try_wakeup(NULL), -EINVAL);
    CHECK_EQ(xce_new_jobid(NULL), -EINVAL);
    /* nothing written */
    CHECK(info == NULL && jobs == NULL && hosts == NULL && res == NULL && rv == NULL && cc == NULL);
    CHECK(all == NULL);
}

static void test_free_null(void) {
    xce_free_joblist(NULL);
    xce_free_jobs(NULL, 0);
    xce_free_jobs(NULL, 5);
    xce_free_job(NULL);
    xce_free_hosts(NULL, 3);
    xce_free_resources(NULL, 0);
    xce_free_resvals(NULL, 2);
    xce_free_controller_info(NULL);
    xce_free_cluster_conf(NULL);
}

static void test_retry_defaults(void) {
    xce_retry_config_t d = XCE_RETRY_DEFAULTS; /* F6 */
    CHECK_EQ(d.max_retries, 20);
    CHECK_EQ(d.initial_retry_ms, 50);
    CHECK_EQ(d.max_retry_ms, 5000);
    CHECK(d.backoff_multiplier == 2.0);
}

static void test_jobid(void) {
    uint64_t a = 0, b = 0;
    CHECK_EQ(xce_new_jobid(&a), 0);
    CHECK_EQ(xce_new_jobid(&b), 0);
    CHECK(a != 0 && b != 0 && a != b);
}

static int g_log_lines;
static void count_log(int level, const char *msg, void *arg) {
    (void)level;
    CHECK(msg != NULL);
    CHECK(arg == &g_log_lines);
    g_log_lines++;
}

static void test_log(void) {
    CHECK_EQ(xce_set_log_level(-1), -EINVAL);
    CHECK_EQ(xce_set_log_level(XCE_LOG_DEBUG + 1), -EINVAL);
    int prev = xce_set_log_level(XCE_LOG_INFO);
    CHECK(prev >= XCE_LOG_OFF && prev <= XCE_LOG_DEBUG);
    CHECK_EQ(xce_set_log_level(XCE_LOG_WARN), XCE_LOG_INFO);
    CHECK_EQ(xce_set_log_handler(count_log, &g_log_lines), 0);
    CHECK_EQ(xce_set_log_handler(count_log, &g_log_lines), 0); /* idempotent */
    CHECK_EQ(xce_set_log_handler(NULL, NULL), 0);              /* back to stderr */
    xce_set_log_level(prev);
}

/* Everything that needs a live ctx but no real controller: a silent listener accepts the
 * connection and never answers. */
static void test_ctx_bad_args(void) {
    struct silent_server srv;
    xce_client_config_t conf;
    xcecli_ctx_t ctx = NULL;
    CHECK_EQ(silent_server_start(&srv), 0);
    config_local(&conf, srv.port);
    CHECK_EQ(xcecli_start(&conf, &ctx), 0);
    if (!ctx) {
        silent_server_stop(&srv);
        return;
    }
    /* retry config */
    xce_retry_config_t r = XCE_RETRY_DEFAULTS;
    CHECK_EQ(xcecli_set_retry_config(ctx, &r), 0);
    CHECK_EQ(xcecli_set_retry_config(ctx, NULL), 0);
    r.initial_retry_ms = 0;
    CHECK_EQ(xcecli_set_retry_config(ctx, &r), -EINVAL);
    r = (xce_retry_config_t)XCE_RETRY_DEFAULTS;
    r.max_retry_ms = r.initial_retry_ms - 1;
    CHECK_EQ(xcecli_set_retry_config(ctx, &r), -EINVAL);
    r = (xce_retry_config_t)XCE_RETRY_DEFAULTS;
    r.backoff_multiplier = 0.5;
    CHECK_EQ(xcecli_set_retry_config(ctx, &r), -EINVAL);
    r.backoff_multiplier = INFINITY;
    CHECK_EQ(xcecli_set_retry_config(ctx, &r), -EINVAL);
    /* options */
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_CONNECT_TIMEOUT_MS, 200), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_CONNECT_TIMEOUT_MS, 0), -EINVAL);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_REPLY_TIMEOUT_MS, -5), -EINVAL);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_REPLY_TIMEOUT_MS, INT64_MAX), -EINVAL);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_DEADLINE_MS, 0), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_REDIRECT_POLICY, XCE_REDIRECT_ANY), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_REDIRECT_POLICY, XCE_REDIRECT_CONFIGURED), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_REDIRECT_POLICY, 7), -EINVAL);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_WAIT_PRIMARY, 0), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_WAIT_PRIMARY, 2), -EINVAL);
    CHECK_EQ(xcecli_set_option(ctx, 0, 1), -EINVAL);
    CHECK_EQ(xcecli_set_option(ctx, 12345, 1), -EINVAL);
    /* NULL out-pointers and inputs */
    CHECK_EQ(xcecli_hello(ctx, NULL), -EINVAL);
    CHECK_EQ(xcecli_joblist(ctx, NULL), -EINVAL);
    CHECK_EQ(xcecli_joblist_filter(ctx, NULL, NULL), -EINVAL);
    CHECK_EQ(xcecli_jobinfo(ctx, 1, NULL), -EINVAL);
    CHECK_EQ(xcecli_reslist(ctx, NULL), -EINVAL);
    CHECK_EQ(xcecli_workerlist(ctx, NULL), -EINVAL);
    CHECK_EQ(xcecli_clusterconf(ctx, NULL), -EINVAL);
    xce_resval_t *rvout = NULL;
    CHECK_EQ(xcecli_resval(ctx, NULL, &rvout), -EINVAL);
    CHECK_EQ(xcecli_resval(ctx, "h", NULL), -EINVAL);
    CHECK_EQ(xcecli_join(ctx, NULL, NULL), -EINVAL);
    CHECK_EQ(xcecli_jobsubmit(ctx, NULL, NULL), -EINVAL);
    CHECK_EQ(xcecli_jobdispatch(ctx, 1, NULL), -EINVAL);
    CHECK_EQ(xcecli_queuectrl(ctx, NULL, XCE_QUEUE_OPEN), -EINVAL);
    CHECK_EQ(xcecli_hostctrl(ctx, NULL, XCE_HOSTCTRL_OPEN), -EINVAL);
    CHECK_EQ(xcecli_update_resvals(ctx, NULL, NULL, 0), -EINVAL);
    CHECK_EQ(xcecli_update_resvals(ctx, "h", NULL, 3), -EINVAL); /* (NULL, n > 0) */
    CHECK_EQ(xcecli_update_jusage(ctx, 1, NULL), -EINVAL);
    CHECK_EQ(xcecli_runtask(ctx, NULL, "true", NULL), -EINVAL);
    CHECK_EQ(xcecli_runtask(ctx, "h", NULL, NULL), -EINVAL);
    CHECK_EQ(xcecli_set_pend_reason(ctx, 1, NULL), -EINVAL);
    CHECK_EQ(xcecli_heartbeat(ctx, NULL), -EINVAL);
    /* unknown integers */
    CHECK_EQ(xcecli_jobctrl(ctx, 1, -1), -EINVAL);
    CHECK_EQ(xcecli_jobctrl(ctx, 1, XCE_JOBCTRL_REQUEUE + 1), -EINVAL);
    CHECK_EQ(xcecli_queuectrl(ctx, "normal", XCE_QUEUE_INACTIVATE + 1), -EINVAL);
    CHECK_EQ(xcecli_hostctrl(ctx, "h", XCE_HOSTCTRL_CLOSE + 1), -EINVAL);
    CHECK_EQ(xcecli_notify(ctx, XCE_NOTIFY_JOBCHKPT + 1, 1, 0), -EINVAL);
    CHECK_EQ(xcecli_notify(ctx, -1, 1, 0), -EINVAL);
    xce_join_t j = {XCE_ROLE_CLIENT + 1, "h", 1, 1, NULL, 0};
    CHECK_EQ(xcecli_join(ctx, &j, NULL), -EINVAL);
    j.role = XCE_ROLE_WORKER;
    j.host = NULL;
    CHECK_EQ(xcecli_join(ctx, &j, NULL), -EINVAL);
    j.host = "h";
    j.nattrs = 2; /* (NULL, 2) */
    CHECK_EQ(xcecli_join(ctx, &j, NULL), -EINVAL);
    xce_kv_t kv = {NULL, "v"};
    j.attrs = &kv;
    j.nattrs = 1;
    CHECK_EQ(xcecli_join(ctx, &j, NULL), -EINVAL);
    xce_job_filter_t f = {NULL, NULL, 1u << 5, 0};
    xce_job_t *jobs = NULL;
    CHECK_EQ(xcecli_joblist_filter(ctx, &f, &jobs), -EINVAL);
    f.state_mask = 0;
    f.user = "\xc3\x28"; /* invalid UTF-8 */
    CHECK_EQ(xcecli_joblist_filter(ctx, &f, &jobs), -EINVAL);
    CHECK(jobs == NULL);
    xce_job_spec_t spec = {0, NULL, NULL, NULL, "true", 1, 1};
    uint64_t id = 77;
    CHECK_EQ(xcecli_jobsubmit(ctx, &spec, &id), -EINVAL); /* name required */
    spec.name = "n";
    spec.command = NULL;
    CHECK_EQ(xcecli_jobsubmit(ctx, &spec, &id), -EINVAL); /* command required */
    CHECK_EQ(id, 77);
    xce_resval_t rv = {"load", NULL};
    rv.name = "\xff";
    CHECK_EQ(xcecli_update_resvals(ctx, "h", &rv, 1), -EINVAL);
    CHECK_EQ(xcecli_jobdispatch(ctx, 1, "\xfe"), -EINVAL);
    /* handlers, stats, last error, wakeups */
    CHECK_EQ(xcecli_set_reconnect_handler(ctx, NULL, NULL), 0);
    CHECK_EQ(xcecli_set_event_handler(ctx, NULL, NULL), 0);
    xce_stats_t st;
    memset(&st, 0xff, sizeof st);
    CHECK_EQ(xcecli_get_stats(ctx, &st), 0);
    CHECK(st.current_master == -1 || st.current_master == 0);
    CHECK(st.current_master_host[sizeof st.current_master_host - 1] == 0);
    CHECK_EQ(xcecli_get_stats(ctx, NULL), -EINVAL);
    /* F29: the masters in rotation, snprintf-like: measured, copied, truncated */
    char masters[64], cut[4], want[32];
    snprintf(want, sizeof want, "127.0.0.1:%u", (unsigned)srv.port);
    int mn = xcecli_get_masters(ctx, NULL, 0);
    CHECK_EQ(mn, (int)strlen(want));
    CHECK_EQ(xcecli_get_masters(ctx, masters, sizeof masters), mn);
    CHECK(strcmp(masters, want) == 0);
    CHECK_EQ(xcecli_get_masters(ctx, cut, sizeof cut), mn);
    CHECK_EQ(strlen(cut), 3);
    CHECK_EQ(xcecli_get_masters(ctx, NULL, 5), -EINVAL);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_LEARN_MASTERS, 2), -EINVAL);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_LEARN_MASTERS, 0), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_LEARN_MASTERS, 1), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_FORWARD, 2), -EINVAL);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_FORWARD, 0), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_FORWARD, 1), 0);
    xce_last_error_t le;
    CHECK_EQ(xcecli_last_error(ctx, NULL), -EINVAL);
    CHECK_EQ(xcecli_last_error(ctx, &le), -ENOENT); /* no call failed yet */
    CHECK_EQ(xcecli_last_error_text(ctx, NULL, 0), -ENOENT);
    CHECK_EQ(xcecli_last_error_text(ctx, NULL, 5), -EINVAL);
    CHECK_EQ(xcecli_try_wakeup(ctx), 0); /* nobody blocked */
    CHECK_EQ(xcecli_wakeup(ctx), 0);
    xcecli_stop(ctx);
    silent_server_stop(&srv);
}

/* Ops against a controller that never answers: they fail after the budget with a distinct
 * error (never EINVAL, never a panic), write no out-parameter, and leave a last-error report. */
static void test_ops_silent_controller(void) {
    struct silent_server srv;
    xce_client_config_t conf;
    xcecli_ctx_t ctx = NULL;
    CHECK_EQ(silent_server_start(&srv), 0);
    config_local(&conf, srv.port);
    CHECK_EQ(xcecli_start(&conf, &ctx), 0);
    if (!ctx) {
        silent_server_stop(&srv);
        return;
    }
    xce_retry_config_t r = {1, 1, 2, 2.0};
    CHECK_EQ(xcecli_set_retry_config(ctx, &r), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_REPLY_TIMEOUT_MS, 50), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_CONNECT_TIMEOUT_MS, 50), 0);
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_DEADLINE_MS, 1000), 0);
    xce_job_t **jobs = (xce_job_t **)(uintptr_t)0x1;
    int rc = xcecli_joblist(ctx, &jobs);
    CHECK(rc < 0);
    CHECK(rc != -EINVAL && rc != -E_XCE_INTERNAL);
    CHECK(jobs == (xce_job_t **)(uintptr_t)0x1);
    xce_last_error_t le;
    CHECK_EQ(xcecli_last_error(ctx, &le), 0);
    CHECK_EQ(le.status, rc);
    CHECK(le.attempts >= 1);
    CHECK_EQ(le.nmasters, 1);
    char text[512];
    int n = xcecli_last_error_text(ctx, text, sizeof text);
    CHECK(n > 0);
    CHECK(strstr(text, "joblist") != NULL);
    char tiny[4];
    CHECK_EQ(xcecli_last_error_text(ctx, tiny, sizeof tiny), n); /* truncated, measured */
    CHECK_EQ(strlen(tiny), 3);
    xce_stats_t st;
    CHECK_EQ(xcecli_get_stats(ctx, &st), 0);
    CHECK(st.requests >= 1);
    xcecli_stop(ctx);
    silent_server_stop(&srv);
}

struct test {
    const char *name;
    void (*fn)(void);
};

static const struct test tests[] = {
    {"codes", test_codes},
    {"strerror", test_strerror},
    {"version", test_version},
    {"config_init", test_config_init},
    {"parse_masters", test_parse_masters},
    {"start_bad_args", test_start_bad_args},
    {"start_closed_port", test_start_closed_port},
    {"null_ctx", test_null_ctx},
    {"free_null", test_free_null},
    {"retry_defaults", test_retry_defaults},
    {"jobid", test_jobid},
    {"log", test_log},
    {"ctx_bad_args", test_ctx_bad_args},
    {"ops_silent_controller", test_ops_silent_controller},
};

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int ran = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(which, "all") != 0 && strcmp(which, tests[i].name) != 0) continue;
        int before = g_failures;
        tests[i].fn();
        ran++;
        printf("%s %s\n", g_failures == before ? "ok  " : "FAIL", tests[i].name);
    }
    if (ran == 0) {
        fprintf(stderr, "unknown test %s\n", which);
        return 2;
    }
    return g_failures ? 1 : 0;
}
