/* 1,000 start/stop cycles, for valgrind and LeakSanitizer: against the masters in
 * $XCE_TEST_MASTERS (a running controller) when set, else against a local listener that
 * accepts and drops connections; then against a closed port (start fails) the same number
 * of times. Usage: test_cycles [N] */
#include "util.h"

/* Accepts and closes every connection, so the backlog never fills. */
static void *accept_loop(void *p) {
    int fd = *(int *)p;
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR) continue;
            return NULL;
        }
        close(c);
    }
}

/* Counts log lines instead of printing 1,000 identical warnings (and exercises the C sink). */
static int g_log_lines;
static void count_log(int level, const char *msg, void *arg) {
    (void)level;
    (void)msg;
    (*(int *)arg)++;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    xce_client_config_t conf;
    const char *masters = getenv("XCE_TEST_MASTERS");
    int lfd = -1;
    pthread_t th;
    if (masters && *masters) {
        xce_client_config_init(&conf);
        CHECK(xce_client_config_parse_masters(&conf, masters) > 0);
    } else {
        uint16_t port = 0;
        lfd = listen_local(&port);
        CHECK(lfd >= 0);
        CHECK_EQ(pthread_create(&th, NULL, accept_loop, &lfd), 0);
        config_local(&conf, port);
    }
    int ok = 0;
    for (int i = 0; i < n; i++) {
        xcecli_ctx_t ctx = NULL;
        int rc = xcecli_start(&conf, &ctx);
        if (rc == 0) {
            ok++;
            if (i % 100 == 0) xcecli_nop(ctx); /* some traffic on a few of them */
        }
        xcecli_stop(ctx);
    }
    CHECK_EQ(ok, n);

    CHECK_EQ(xce_set_log_handler(count_log, &g_log_lines), 0);
    xce_client_config_t closed;
    config_local(&closed, closed_port());
    int refused = 0;
    for (int i = 0; i < n; i++) {
        xcecli_ctx_t ctx = NULL;
        if (xcecli_start(&closed, &ctx) == -ECONNREFUSED) refused++;
        xcecli_stop(ctx);
    }
    CHECK_EQ(refused, n);
    CHECK_EQ(xce_set_log_handler(NULL, NULL), 0);
    if (lfd >= 0) {
        shutdown(lfd, SHUT_RDWR);
        pthread_join(th, NULL);
        close(lfd);
    }
    printf("%d start/stop cycles against %s, %d against a closed port (%d log lines): %s\n", n,
           masters && *masters ? masters : "a local listener", n, g_log_lines,
           g_failures ? "FAIL" : "ok");
    return g_failures ? 1 : 0;
}
