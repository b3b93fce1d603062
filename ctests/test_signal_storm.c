/* F27: a storm of signals whose handler calls xcecli_try_wakeup while threads make calls.
 *
 *   test_signal_storm CONTROLLER [SIGNALS [THREADS]]
 *
 * setitimer(ITIMER_REAL) fires SIGALRM every 50 us; only the calling threads accept it, so the
 * handler interrupts them wherever they are, inside the library included. The handler calls
 * xcecli_try_wakeup(ctx) on the context all calling threads share and records what it
 * returned and which calls were in progress around it (each thread publishes the number of
 * the call it is making). Two phases of at least SIGNALS signals each (default 20000):
 *  - "cluster": a real one-node xce-controller, calls (clusterconf) that complete in a few ms;
 *  - "silent": a controller that accepts and never answers, calls that block until woken or
 *    until their 300 ms deadline.
 * Checks:
 *  - nothing hangs: a watchdog thread (signals blocked) fails the test when no call completes
 *    for 15 s, prints every thread's stack (gdb) and exits;
 *  - try_wakeup's return value says exactly what happened (F27): every signal for which it
 *    returned 1 ended a call in progress around it with -EINTR; every call that returned
 *    -EINTR was woken by a signal that returned 1 while it was in progress (no wake is kept to
 *    end a later call);
 *  - no other failure in the cluster phase.
 * A test that cannot run fails, it never skips. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "nodes.h"
#include "util.h"

#define MAXT 4
#define MAXCALLS 400000
#define MAXSIG 400000

static xcecli_ctx_t g_ctx;
static int g_nthreads = 2;
static long g_want_signals = 20000;
static struct nodes g_nodes;

/* Per thread: the number of the call in progress (k > 0), or -k after call k returned. */
static _Atomic long long g_cur[MAXT];
/* Per thread: what each call returned (index = call number). */
static int *g_result[MAXT];
static _Atomic long long g_ncalls[MAXT];
static atomic_long g_completed; /* calls returned, all threads (the watchdog's progress) */
static atomic_int g_run;        /* calling threads go on while set */

/* Per signal: try_wakeup's return and the calls in progress around it. */
struct sigrec {
    int rc;
    long long cand[MAXT][2]; /* per thread: calls [first, last] that overlapped try_wakeup */
};
static struct sigrec *g_sigs;
static atomic_long g_nsig;

static void on_alrm(int sig) {
    (void)sig;
    int saved = errno;
    long long before[MAXT], after[MAXT];
    for (int t = 0; t < g_nthreads; t++) before[t] = atomic_load(&g_cur[t]);
    int rc = xcecli_try_wakeup(g_ctx);
    for (int t = 0; t < g_nthreads; t++) after[t] = atomic_load(&g_cur[t]);
    long i = atomic_fetch_add(&g_nsig, 1);
    if (i < MAXSIG) {
        g_sigs[i].rc = rc;
        for (int t = 0; t < g_nthreads; t++) {
            /* The calls of thread t that overlapped try_wakeup: from the one in progress
             * before (or the next one) to the one in progress after (or the last returned). */
            long long first = before[t] > 0 ? before[t] : -before[t] + 1;
            long long last = after[t] > 0 ? after[t] : -after[t];
            g_sigs[i].cand[t][0] = last >= first ? first : 0;
            g_sigs[i].cand[t][1] = last >= first ? last : -1;
        }
    }
    errno = saved;
}

static void *caller_main(void *arg) {
    int t = (int)(intptr_t)arg;
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
    while (atomic_load(&g_run)) {
        long long k = atomic_load(&g_ncalls[t]) + 1;
        if (k >= MAXCALLS) break;
        atomic_store(&g_cur[t], k);
        xce_cluster_conf_t *cc = NULL;
        int rc = xcecli_clusterconf(g_ctx, &cc);
        atomic_store(&g_cur[t], -k);
        if (rc == 0) xce_free_cluster_conf(cc);
        g_result[t][k] = rc;
        atomic_store(&g_ncalls[t], k);
        atomic_fetch_add(&g_completed, 1);
    }
    pthread_sigmask(SIG_BLOCK, &alrm, NULL);
    return NULL;
}

/* ---------------------------------------------------------------- the watchdog */

static atomic_int g_watch;
static double g_stall_limit = 15;
static const char *g_phase = "";

static void dump_stacks(void) {
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    pid_t p = fork();
    if (p == 0) {
        execlp("timeout", "timeout", "60", "gdb", "-p", pid, "-batch", "-nx", "-ex",
               "thread apply all bt 25", (char *)NULL);
        _exit(127);
    }
    if (p > 0) waitpid(p, NULL, 0);
}

static void *watchdog_main(void *arg) {
    (void)arg;
    long last = -1;
    double since = nodes_now();
    while (atomic_load(&g_watch)) {
        nodes_sleep(0.1);
        long done = atomic_load(&g_completed);
        if (done != last) {
            last = done;
            since = nodes_now();
            continue;
        }
        if (atomic_load(&g_run) && nodes_now() - since > g_stall_limit) {
            struct itimerval off = {{0, 0}, {0, 0}};
            setitimer(ITIMER_REAL, &off, NULL);
            fprintf(stderr,
                    "FAIL: HANG in phase %s: no call returned for %.0f s after %ld signals and "
                    "%ld calls; calls in progress:",
                    g_phase, g_stall_limit, atomic_load(&g_nsig), done);
            for (int t = 0; t < g_nthreads; t++)
                fprintf(stderr, " thread %d call %lld", t, atomic_load(&g_cur[t]));
            fprintf(stderr, "\n--- stacks (gdb) ---\n");
            dump_stacks();
            nodes_kill_all(&g_nodes);
            nodes_stop(&g_nodes);
            _exit(1);
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- one phase */

/* Runs the storm on `ctx` until `want` signals were sent (at most 60 s); checks the results.
 * `strict`: every call that was not woken must succeed. */
static void storm(const char *phase, xcecli_ctx_t ctx, int strict) {
    g_phase = phase;
    g_ctx = ctx;
    atomic_store(&g_nsig, 0);
    atomic_store(&g_completed, 0);
    for (int t = 0; t < g_nthreads; t++) {
        atomic_store(&g_cur[t], 0);
        atomic_store(&g_ncalls[t], 0);
    }
    atomic_store(&g_run, 1);
    pthread_t th[MAXT];
    for (int t = 0; t < g_nthreads; t++)
        CHECK_EQ(pthread_create(&th[t], NULL, caller_main, (void *)(intptr_t)t), 0);
    double t0 = nodes_now();
    struct itimerval every = {{0, 50}, {0, 50}};
    setitimer(ITIMER_REAL, &every, NULL);
    while (atomic_load(&g_nsig) < g_want_signals && nodes_now() - t0 < 60) nodes_sleep(0.05);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    atomic_store(&g_run, 0);
    for (int t = 0; t < g_nthreads; t++) pthread_join(th[t], NULL);
    double secs = nodes_now() - t0;

    long nsig = atomic_load(&g_nsig);
    if (nsig > MAXSIG) nsig = MAXSIG;
    long ones = 0, zeros = 0, others = 0, said_woken_but_not = 0, no_call_but_one = 0;
    /* woken[t][k]: some signal that returned 1 had call k of thread t in progress */
    unsigned char *woken[MAXT];
    for (int t = 0; t < g_nthreads; t++)
        woken[t] = calloc((size_t)atomic_load(&g_ncalls[t]) + 2, 1);
    for (long i = 0; i < nsig; i++) {
        struct sigrec *s = &g_sigs[i];
        if (s->rc == 0) {
            zeros++;
            continue;
        }
        if (s->rc != 1) {
            others++;
            continue;
        }
        ones++;
        int any = 0, eintr = 0;
        for (int t = 0; t < g_nthreads; t++)
            for (long long k = s->cand[t][0]; k <= s->cand[t][1]; k++) {
                if (k <= 0 || k > atomic_load(&g_ncalls[t])) continue;
                any = 1;
                woken[t][k] = 1;
                if (g_result[t][k] == -EINTR) eintr = 1;
            }
        if (!any) {
            no_call_but_one++;
        } else if (!eintr) {
            if (++said_woken_but_not <= 5) {
                fprintf(stderr, "%s: signal %ld: try_wakeup returned 1; the calls in progress "
                                "returned:", phase, i);
                for (int t = 0; t < g_nthreads; t++)
                    for (long long k = s->cand[t][0]; k <= s->cand[t][1]; k++)
                        if (k > 0 && k <= atomic_load(&g_ncalls[t]))
                            fprintf(stderr, " thread %d call %lld: %d", t, k, g_result[t][k]);
                fprintf(stderr, "\n");
            }
        }
    }
    long calls = 0, ok = 0, eintr = 0, failed = 0, unexplained = 0;
    for (int t = 0; t < g_nthreads; t++) {
        long long n = atomic_load(&g_ncalls[t]);
        for (long long k = 1; k <= n; k++) {
            int rc = g_result[t][k];
            calls++;
            if (rc == 0) ok++;
            else if (rc == -EINTR) {
                eintr++;
                if (!woken[t][k]) unexplained++;
            } else {
                failed++;
                if (strict && failed <= 5)
                    fprintf(stderr, "%s: thread %d call %lld: %d (%s)\n", phase, t, k, rc,
                            xce_strerror(rc));
            }
        }
        free(woken[t]);
    }
    printf("%s: %ld signals in %.1f s, %d threads: try_wakeup 1: %ld, 0: %ld, other: %ld | "
           "%ld calls: %ld ok, %ld -EINTR, %ld other errors\n",
           phase, atomic_load(&g_nsig), secs, g_nthreads, ones, zeros, others, calls, ok, eintr,
           failed);
    printf("%s: try_wakeup said 1 but no call was in progress: %ld; said 1 but none of the "
           "calls in progress returned -EINTR: %ld; -EINTR without a wake that returned 1: "
           "%ld\n",
           phase, no_call_but_one, said_woken_but_not, unexplained);
    CHECK(nsig >= g_want_signals);
    /* The wake must have worked at all: a try_wakeup that did nothing and said 0 would pass
     * every consistency check above. */
    CHECK(ones > 0);
    CHECK(eintr > 0);
    /* Against the silent node every call can only end by a wake (or its reply timeout). */
    if (!strict) CHECK(eintr * 2 > calls);
    CHECK_EQ(others, 0);
    CHECK_EQ(no_call_but_one, 0);
    CHECK_EQ(said_woken_but_not, 0);
    CHECK_EQ(unexplained, 0);
    CHECK(calls > 0);
    if (strict) CHECK_EQ(failed, 0);
}

int main(int argc, char **argv) {
    struct stat sb;
    if (argc < 2 || stat(argv[1], &sb) != 0) {
        fprintf(stderr, "FAIL: no xce-controller (%s)\n", argc > 1 ? argv[1] : "none given");
        return 1;
    }
    if (argc > 2) g_want_signals = atol(argv[2]);
    if (argc > 3) g_nthreads = atoi(argv[3]);
    if (g_want_signals < 1000 || g_want_signals > MAXSIG || g_nthreads < 1 ||
        g_nthreads > MAXT) {
        fprintf(stderr, "usage: %s CONTROLLER [SIGNALS (1000..%d) [THREADS (1..%d)]]\n",
                argv[0], MAXSIG, MAXT);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_sigs = calloc(MAXSIG, sizeof *g_sigs);
    for (int t = 0; t < g_nthreads; t++) g_result[t] = calloc(MAXCALLS, sizeof(int));
    /* Only the calling threads take SIGALRM (they unblock it): this thread, the watchdog and
     * the library's helper threads never do. */
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alrm, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alrm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);

    if (nodes_start(&g_nodes, argv[1], 1) != 0 || nodes_primary(&g_nodes, 30) != 1) {
        fprintf(stderr, "FAIL: the controller did not come up\n");
        nodes_stop(&g_nodes);
        return 1;
    }
    atomic_store(&g_watch, 1);
    pthread_t wd;
    pthread_create(&wd, NULL, watchdog_main, NULL);

    /* Phase 1: a real controller (host name, so the resolver takes part). */
    xce_client_config_t conf;
    xce_client_config_init(&conf);
    CHECK(xce_client_config_parse_masters(&conf, g_nodes.masters_host) == 1);
    xcecli_ctx_t ctx = NULL;
    CHECK_EQ(xcecli_start(&conf, &ctx), 0);
    if (ctx) {
        storm("cluster", ctx, 1);
        xcecli_stop(ctx);
    }

    /* Phase 2: a silent controller: calls block until woken or their deadline. */
    struct silent_server silent;
    CHECK_EQ(silent_server_start(&silent), 0);
    config_local(&conf, silent.port);
    ctx = NULL;
    CHECK_EQ(xcecli_start(&conf, &ctx), 0);
    if (ctx) {
        xcecli_set_option(ctx, XCE_OPT_REPLY_TIMEOUT_MS, 200);
        xcecli_set_option(ctx, XCE_OPT_DEADLINE_MS, 300);
        int level = xce_set_log_level(XCE_LOG_ERROR); /* every call gives up: no WARN each */
        storm("silent", ctx, 0);
        xce_set_log_level(level);
        xcecli_stop(ctx);
    }
    silent_server_stop(&silent);

    atomic_store(&g_watch, 0);
    pthread_join(wd, NULL);
    nodes_stop(&g_nodes);
    free(g_sigs);
    for (int t = 0; t < g_nthreads; t++) free(g_result[t]);
    printf("signal storm: %s\n", g_failures ? "FAIL" : "ok");
    return g_failures ? 1 : 0;
}
