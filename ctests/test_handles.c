/* F20 (amended): handles that cannot dangle. A released handle — a stopped context, a freed
 * call handle — is recognised as such however many handles were created and released since:
 * every use is a clean error code (-E_XCE_CLOSED), never freed memory. Run plain, under
 * ASan/UBSan and under valgrind (scripts/ctest.sh). On the library that kept "the last 64
 * released handles", the first use below was a heap use after free.
 * No controller needed: a silent listener accepts connections and never answers.
 * Build with -DXCE_MAIN_COMPAT to run the context part against a library without call
 * handles. Usage: test_handles NAME | all */
#include <stdint.h>

#include "util.h"

#define RELEASES 10000

static int start_ctx(struct silent_server *s, xcecli_ctx_t *ctx) {
    xce_client_config_t conf;
    char list[64];
    xce_client_config_init(&conf);
    snprintf(list, sizeof list, "127.0.0.1:%u", (unsigned)s->port);
    CHECK_EQ(xce_client_config_parse_masters(&conf, list), 1);
    int rc = xcecli_start(&conf, ctx);
    CHECK_EQ(rc, 0);
    return rc;
}

/* A stopped context, then many contexts started and stopped: the first handle is still a
 * stopped context to every export. */
static void test_stale_context(void) {
    struct silent_server s;
    if (silent_server_start(&s) != 0) {
        CHECK(!"the silent server could not start");
        return;
    }
    xcecli_ctx_t first = NULL;
    if (start_ctx(&s, &first) != 0) return;
    xcecli_stop(first);
    int cycles = getenv("XCE_HANDLE_CYCLES") ? atoi(getenv("XCE_HANDLE_CYCLES")) : 300;
    for (int i = 0; i < cycles; i++) {
        xcecli_ctx_t c = NULL;
        if (start_ctx(&s, &c) != 0) return;
        CHECK(c != first);
        xcecli_stop(c);
    }
    xce_controller_info_t *info = NULL;
    CHECK_EQ(xcecli_hello(first, &info), -E_XCE_CLOSED);
    CHECK_EQ(xcecli_set_option(first, XCE_OPT_REPLY_TIMEOUT_MS, 100), -E_XCE_CLOSED);
    CHECK_EQ(xcecli_wakeup(first), -E_XCE_CLOSED);
    CHECK(xcecli_try_wakeup(first) < 0);
    xce_stats_t st;
    CHECK_EQ(xcecli_get_stats(first, &st), -E_XCE_CLOSED);
    char masters[64];
    CHECK_EQ(xcecli_get_masters(first, masters, sizeof masters), -E_XCE_CLOSED);
    xcecli_stop(first); /* released already: nothing happens */
    silent_server_stop(&s);
}

/* Values that never were handles are refused, not followed. */
static void test_foreign_values(void) {
    int on_stack = 0;
    xce_controller_info_t *info = NULL;
    CHECK_EQ(xcecli_hello(NULL, &info), -EINVAL);
    CHECK_EQ(xcecli_hello((xcecli_ctx_t)(void *)&on_stack, &info), -EINVAL);
    CHECK_EQ(xcecli_hello((xcecli_ctx_t)(void *)(uintptr_t)1, &info), -EINVAL);
    xcecli_stop((xcecli_ctx_t)(void *)&on_stack); /* refused, logged */
}

/* A closed listing pager, then many pagers opened and closed: the first is still "closed". */
static void test_stale_pager(void) {
    struct silent_server s;
    if (silent_server_start(&s) != 0) {
        CHECK(!"the silent server could not start");
        return;
    }
    xcecli_ctx_t ctx = NULL;
    if (start_ctx(&s, &ctx) != 0) return;
    xce_joblist_pager *first = NULL;
    CHECK_EQ(xcecli_joblist_open(ctx, NULL, 0, &first), 0);
    xcecli_joblist_close(first);
    for (int i = 0; i < 1000; i++) {
        xce_joblist_pager *p = NULL;
        CHECK_EQ(xcecli_joblist_open(ctx, NULL, 0, &p), 0);
        xcecli_joblist_close(p);
    }
    xce_job_t *jobs = NULL;
    CHECK_EQ(xcecli_joblist_next(first, &jobs), -E_XCE_CLOSED);
    xcecli_joblist_close(first); /* closed already: nothing happens */
    xcecli_stop(ctx);
    silent_server_stop(&s);
}

#ifndef XCE_MAIN_COMPAT
/* A freed call handle, then 10,000 call handles made and freed (the Go package makes one per
 * op): the first one is still "freed" to every export, and its context is unaffected. */
static void test_stale_call_handle(void) {
    struct silent_server s;
    if (silent_server_start(&s) != 0) {
        CHECK(!"the silent server could not start");
        return;
    }
    xcecli_ctx_t ctx = NULL;
    if (start_ctx(&s, &ctx) != 0) return;
    xcecli_call_t first = NULL;
    CHECK_EQ(xcecli_call_new(ctx, 0, &first), 0);
    xcecli_call_free(first);
    for (int i = 0; i < RELEASES; i++) {
        xcecli_call_t h = NULL;
        CHECK_EQ(xcecli_call_new(ctx, 0, &h), 0);
        CHECK(h != first);
        xcecli_call_free(h);
    }
    xce_controller_info_t *info = NULL;
    CHECK_EQ(xcecli_call_cancel(first), -E_XCE_CLOSED);
    CHECK_EQ(xcecli_hello(xcecli_call_ctx(first), &info), -E_XCE_CLOSED);
    xcecli_call_free(first); /* freed already: nothing happens */
    /* a call handle seen as a context is not a context: xcecli_stop refuses it */
    xcecli_call_t live = NULL;
    CHECK_EQ(xcecli_call_new(ctx, 0, &live), 0);
    xcecli_stop(xcecli_call_ctx(live));
    CHECK_EQ(xcecli_set_option(ctx, XCE_OPT_REPLY_TIMEOUT_MS, 100), 0); /* still alive */
    xcecli_stop(ctx);
    CHECK_EQ(xcecli_hello(xcecli_call_ctx(live), &info), -E_XCE_CLOSED);
    xcecli_call_free(live);
    silent_server_stop(&s);
}

/* Threads make calls on a context handle while it is stopped and many other handles are
 * released meanwhile: every call returns a status, none touches freed memory. */
struct racer {
    pthread_t thread;
    xcecli_ctx_t ctx;
    int bad;
};

static void *racer_main(void *p) {
    struct racer *r = (struct racer *)p;
    for (int i = 0; i < 2000; i++) {
        xce_stats_t st;
        int rc = xcecli_get_stats(r->ctx, &st);
        if (rc != 0 && rc != -E_XCE_CLOSED) r->bad++;
    }
    return NULL;
}

static void test_racing_release(void) {
    struct silent_server s;
    if (silent_server_start(&s) != 0) {
        CHECK(!"the silent server could not start");
        return;
    }
    xcecli_ctx_t ctx = NULL;
    if (start_ctx(&s, &ctx) != 0) return;
    struct racer rs[4];
    for (int i = 0; i < 4; i++) {
        memset(&rs[i], 0, sizeof rs[i]);
        rs[i].ctx = ctx;
        pthread_create(&rs[i].thread, NULL, racer_main, &rs[i]);
    }
    xcecli_ctx_t other = NULL;
    if (start_ctx(&s, &other) != 0) return;
    xcecli_stop(ctx);
    for (int i = 0; i < 1000; i++) {
        xcecli_call_t h = NULL;
        CHECK_EQ(xcecli_call_new(other, 0, &h), 0);
        xcecli_call_free(h);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(rs[i].thread, NULL);
        CHECK_EQ(rs[i].bad, 0);
    }
    xcecli_stop(other);
    silent_server_stop(&s);
}
#endif

struct named_test {
    const char *name;
    void (*fn)(void);
};

static const struct named_test tests[] = {
    {"stale_context", test_stale_context},
    {"foreign_values", test_foreign_values},
    {"stale_pager", test_stale_pager},
#ifndef XCE_MAIN_COMPAT
    {"stale_call_handle", test_stale_call_handle},
    {"racing_release", test_racing_release},
#endif
};

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int ran = 0;
    if (getenv("XCE_LOG") == NULL) xce_set_log_level(XCE_LOG_OFF);
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(which, "all") == 0 || strcmp(which, tests[i].name) == 0) {
            int before = g_failures;
            tests[i].fn();
            fprintf(stderr, "%s: %s\n", tests[i].name, g_failures == before ? "ok" : "FAILED");
            ran++;
        }
    }
    if (ran == 0) {
        fprintf(stderr, "unknown test %s\n", which);
        return 2;
    }
    return g_failures == 0 ? 0 : 1;
}
