/* F10 / S6 in C: a reconnect handler written in C that calls xcecli_join on the same ctx runs
 * once per failover, before the interrupted call is re-sent, and the new primary lists the
 * daemon as joined. Needs the reference controller: test_reconnect PATH-TO-xce-controller
 * (exit 77 = skipped when it is not there). Starts a 3-node cluster on loopback, kills -9 the
 * primary while a call is pending, and checks the order of events. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <sys/stat.h>

#include "cluster.h"
#include "util.h"

/* What the handler saw. */
struct rejoin {
    xcecli_ctx_t ctx;
    int calls;    /* handler runs */
    int ok_calls; /* runs whose xcecli_join succeeded (reached the new primary) */
    int join_rc;
    int events_before_handler; /* FAILOVER_FINISHED events seen when the handler ran */
    int finished_events;
};

static int on_reconnect(xcecli_ctx_t ctx, void *arg) {
    struct rejoin *r = (struct rejoin *)arg;
    CHECK(ctx == r->ctx);
    r->calls++;
    r->events_before_handler = r->finished_events;
    xce_join_t j = {XCE_ROLE_WORKER, "ctest-worker", 4, 1024, NULL, 0};
    r->join_rc = xcecli_join(ctx, &j, NULL); /* same ctx, from inside the handler */
    if (r->join_rc == 0) r->ok_calls++;
    return r->join_rc;
}

static void on_event(xcecli_ctx_t ctx, const xce_event_t *ev, void *arg) {
    struct rejoin *r = (struct rejoin *)arg;
    (void)ctx;
    if (ev->kind == XCE_EVENT_FAILOVER_FINISHED) r->finished_events++;
}

static int worker_listed(xcecli_ctx_t ctx) {
    xce_host_t *hosts;
    int n = xcecli_workerlist(ctx, &hosts);
    int found = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(hosts[i].name, "ctest-worker") == 0) found = 1;
    if (n > 0) xce_free_hosts(hosts, (size_t)n);
    return found;
}

int main(int argc, char **argv) {
    struct stat sb;
    if (argc < 2 || stat(argv[1], &sb) != 0) {
        printf("SKIP: no xce-controller (%s)\n", argc > 1 ? argv[1] : "none given");
        return 77;
    }
    struct cluster c;
    if (cluster_start_retry(&c, argv[1], 3) != 0) {
        fprintf(stderr, "cluster did not come up\n");
        return 1;
    }
    xce_client_config_t conf;
    xce_client_config_init(&conf);
    CHECK(xce_client_config_parse_masters(&conf, c.masters) == 3);
    struct rejoin r;
    memset(&r, 0, sizeof r);
    CHECK_EQ(xcecli_start(&conf, &r.ctx), 0);
    if (!r.ctx) {
        cluster_stop(&c);
        return 1;
    }
    CHECK_EQ(xcecli_set_reconnect_handler(r.ctx, on_reconnect, &r), 0);
    CHECK_EQ(xcecli_set_event_handler(r.ctx, on_event, &r), 0);
    xce_join_t j = {XCE_ROLE_WORKER, "ctest-worker", 4, 1024, NULL, 0};
    CHECK_EQ(xcecli_join(r.ctx, &j, NULL), 0);
    CHECK_EQ(xcecli_heartbeat(r.ctx, "ctest-worker"), 0);
    CHECK(worker_listed(r.ctx));
    int calls_before = r.calls, ok_before = r.ok_calls;

    /* F29: a context given only the primary learns the other two from it ... */
    char only[64] = "";
    {
        const char *s = c.masters;
        for (int i = 1; i < c.primary && s; i++) {
            s = strchr(s, ',');
            s = s ? s + 1 : NULL;
        }
        CHECK(s != NULL);
        if (s) {
            size_t n = strcspn(s, ",");
            if (n < sizeof only) {
                memcpy(only, s, n);
                only[n] = 0;
            }
        }
    }
    xce_client_config_t one_conf;
    xce_client_config_init(&one_conf);
    CHECK(xce_client_config_parse_masters(&one_conf, only) == 1);
    xcecli_ctx_t one = NULL;
    CHECK_EQ(xcecli_start(&one_conf, &one), 0);
    xce_controller_info_t *info = NULL;
    CHECK_EQ(xcecli_hello(one, &info), 0);
    xce_free_controller_info(info);
    char learned[256];
    int ln = xcecli_get_masters(one, learned, sizeof learned);
    printf("masters of a context given %s: %s\n", only, learned);
    CHECK(ln > 0 && ln < (int)sizeof learned);
    CHECK(strncmp(learned, only, strlen(only)) == 0 && learned[strlen(only)] == ',');
    CHECK(strchr(learned, ',') != strrchr(learned, ',')); /* three masters */

    /* kill -9 the primary, then make a worker-session call: it must fail over, run the
     * handler (which re-joins), and only then be re-sent, so it succeeds with a session. */
    printf("killing primary node %d (pid %d)\n", c.primary, c.node_pid[c.primary]);
    CHECK_EQ(kill(c.node_pid[c.primary], SIGKILL), 0);
    xce_resval_t rv = {"load", "0.5"};
    double t0 = now_s();
    int rc = xcecli_update_resvals(r.ctx, "ctest-worker", &rv, 1);
    printf("update_resvals after failover: %d (%s) in %.3f s\n", rc, xce_strerror(rc),
           now_s() - t0);
    /* update_resvals needs a WORKER session on the new primary's connection: success proves
     * the handler re-joined there before the op was re-sent. */
    CHECK_EQ(rc, 0);
    CHECK_EQ(r.join_rc, 0); /* the last handler run reached the new primary */
    printf("handler runs during the failover: %d (%d reached the new primary)\n",
           r.calls - calls_before, r.ok_calls - ok_before);
    CHECK_EQ(r.ok_calls - ok_before, 1); /* joined exactly once per failover */
    /* S6: the handler runs once per failover — the loop confirms a new connection reaches the
     * primary (one hello) before running it, so standbys met on the way do not run it. */
    CHECK_EQ(r.calls - calls_before, 1);
    int calls_after = r.calls;
    CHECK(worker_listed(r.ctx));
    CHECK_EQ(r.calls, calls_after); /* no further reconnects once failed over */
    xce_stats_t st;
    CHECK_EQ(xcecli_get_stats(r.ctx, &st), 0);
    CHECK(st.failovers >= 1);
    /* ... and, its only configured controller killed, keeps working through them. */
    info = NULL;
    CHECK_EQ(xcecli_hello(one, &info), 0);
    xce_free_controller_info(info);
    CHECK_EQ(xcecli_get_stats(one, &st), 0);
    CHECK(st.current_master >= 1); /* a learned master, past the one configured */
    xcecli_stop(one);
    /* F12: a heartbeat accepted after the failover is acknowledged by the new primary. */
    CHECK_EQ(xcecli_heartbeat(r.ctx, "ctest-worker"), 0);
    CHECK_EQ(xcecli_flush(r.ctx, 10000), 0);
    CHECK_EQ(xcecli_outbox_depth(r.ctx), 0);
    CHECK_EQ(xcecli_flush(r.ctx, -1), -EINVAL);
    xcecli_stop(r.ctx);
    cluster_stop(&c);
    printf("reconnect handler: %s\n", g_failures ? "FAIL" : "ok");
    return g_failures ? 1 : 0;
}
