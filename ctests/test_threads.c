/* S7 in C: 16 POSIX threads share ONE xcecli_ctx_t while the primary of a real 3-node
 * `xce-controller cluster` is killed with SIGKILL. Half the threads submit jobs (ids from
 * xce_new_jobid), half list jobs (xcecli_joblist_filter, freed with xce_free_jobs), a fixed
 * number of calls each with a short sleep between them; the main thread kills the primary
 * once a quarter of the calls are done, and each thread's last call waits for the kill (so
 * calls meet the failover by construction, whatever the scheduler does).
 * Also prints the ctx's events (F17) to explain the counters.
 * Checks: every call succeeds (>= 0; never -EINVAL), nothing hangs (a SIGALRM watchdog bounds
 * the run), each listing holds every job acknowledged before it started (reads are
 * linearizable, controller.md C3), and afterwards a joblist lists exactly the acknowledged ids,
 * each once. Prints one summary line: calls, failovers (xcecli_get_stats), slowest call.
 * Usage: test_threads PATH-TO-xce-controller (exit 77 = skipped when it is not there). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <sys/stat.h>

#include "cluster.h"
#include "util.h"

#define NTHREADS 16
#define NCALLS 12           /* per thread */
#define PAUSE_MS 20         /* between two calls of a thread */
#define STARTUP_BUDGET_S 120
#ifndef RUN_BUDGET_S
#define RUN_BUDGET_S 60     /* threads + final checks, from the moment they start */
#endif
#define MAX_ACKED (NTHREADS * NCALLS)

static struct cluster g_cluster; /* global so that the watchdog can kill it */

static void on_alarm(int sig) {
    static const char msg[] = "test_threads: WATCHDOG: still running at the deadline "
                              "(a call hangs or deadlocks); killing the cluster\n";
    (void)sig;
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    cluster_kill_all(&g_cluster);
    _exit(1);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Job ids acknowledged so far, shared by all threads. */
static pthread_mutex_t g_acked_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_acked[MAX_ACKED];
static int g_nacked;

static pthread_barrier_t g_go;
/* Calls finished, all threads; whether the primary was killed. */
static atomic_int g_done;
static atomic_int g_killed;

/* Events of the ctx (F17), kept to explain the stats in the output. The callback runs with the
 * ctx's lock held, on the thread of the call that caused it. */
#define MAX_EVENTS 256
struct event_rec {
    double t;
    int kind, status;
    char from[64], to[64];
    unsigned long long duration_ms;
};
static pthread_mutex_t g_ev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct event_rec g_ev[MAX_EVENTS];
static int g_nev;

static void on_event(xcecli_ctx_t ctx, const xce_event_t *ev, void *arg) {
    (void)ctx;
    (void)arg;
    pthread_mutex_lock(&g_ev_mu);
    if (g_nev < MAX_EVENTS) {
        struct event_rec *r = &g_ev[g_nev++];
        r->t = now_s();
        r->kind = ev->kind;
        r->status = ev->status;
        snprintf(r->from, sizeof r->from, "%s:%u", ev->from_host ? ev->from_host : "?",
                 (unsigned)ev->from_port);
        snprintf(r->to, sizeof r->to, "%s:%u", ev->to_host ? ev->to_host : "?",
                 (unsigned)ev->to_port);
        r->duration_ms = (unsigned long long)ev->duration_ms;
    }
    pthread_mutex_unlock(&g_ev_mu);
}

static void print_events(double t_kill) {
    static const char *const names[] = {"?", "ROTATION", "FAILOVER_STARTED", "FAILOVER_FINISHED",
                                        "NOT_READY"};
    int rotations = 0, self_rotations = 0;
    pthread_mutex_lock(&g_ev_mu);
    for (int i = 0; i < g_nev; i++) {
        const struct event_rec *r = &g_ev[i];
        const char *name = r->kind >= 1 && r->kind <= 4 ? names[r->kind] : names[0];
        if (r->kind == XCE_EVENT_ROTATION) {
            rotations++;
            self_rotations += strcmp(r->from, r->to) == 0;
        }
        printf("event %+8.1f ms %-17s status %d (%s) from %s to %s duration %llu ms\n",
               (r->t - t_kill) * 1e3, name, r->status, xce_strerror(r->status), r->from, r->to,
               r->duration_ms);
    }
    printf("events: %d (%d rotations, %d of them from a master to itself)\n", g_nev, rotations,
           self_rotations);
    pthread_mutex_unlock(&g_ev_mu);
}

struct worker {
    int idx;
    int submitter; /* 1: xcecli_jobsubmit, 0: xcecli_joblist_filter */
    xcecli_ctx_t ctx;
    int calls, ok, failures;
    double slowest_s;
    int slowest_call;
};

/* Reports one failed check of a worker (never from the shared CHECK counter: it is not
 * thread-safe). */
static void worker_fail(struct worker *w, int call, const char *what, int rc) {
    char text[512] = "";
    if (rc < 0 && xcecli_last_error_text(w->ctx, text, sizeof text) < 0) text[0] = 0;
    fprintf(stderr, "thread %d (%s) call %d: %s: rc %d (%s)%s%s%s\n", w->idx,
            w->submitter ? "jobsubmit" : "joblist", call, what, rc, xce_strerror(rc),
            text[0] ? " [" : "", text, text[0] ? "]" : "");
    if (rc == -EINVAL) fprintf(stderr, "  -EINVAL after a failover: the old library's bug\n");
    w->failures++;
}

static void do_submit(struct worker *w, int call) {
    uint64_t id = 0, out = 0;
    if (xce_new_jobid(&id) != 0 || id == 0) {
        worker_fail(w, call, "xce_new_jobid", -1);
        return;
    }
    char name[32];
    snprintf(name, sizeof name, "t%d-%d", w->idx, call);
    xce_job_spec_t spec = {id, name, "ctest", NULL, "sleep 1", 1, 64};
    double t0 = now_s();
    int rc = xcecli_jobsubmit(w->ctx, &spec, &out);
    double dt = now_s() - t0;
    w->calls++;
    if (dt > w->slowest_s) {
        w->slowest_s = dt;
        w->slowest_call = call;
    }
    if (rc < 0) {
        worker_fail(w, call, "xcecli_jobsubmit", rc);
        return;
    }
    if (out != id) {
        fprintf(stderr, "thread %d call %d: jobsubmit wrote id %llu, submitted %llu\n", w->idx,
                call, (unsigned long long)out, (unsigned long long)id);
        w->failures++;
    }
    w->ok++;
    pthread_mutex_lock(&g_acked_mu);
    g_acked[g_nacked++] = id;
    pthread_mutex_unlock(&g_acked_mu);
}

static void do_list(struct worker *w, int call) {
    /* Every job acknowledged before the call starts must be in its answer. */
    uint64_t before[MAX_ACKED];
    pthread_mutex_lock(&g_acked_mu);
    int nbefore = g_nacked;
    memcpy(before, g_acked, (size_t)nbefore * sizeof before[0]);
    pthread_mutex_unlock(&g_acked_mu);

    xce_job_t *jobs = NULL;
    double t0 = now_s();
    int rc = xcecli_joblist_filter(w->ctx, NULL, &jobs);
    double dt = now_s() - t0;
    w->calls++;
    if (dt > w->slowest_s) {
        w->slowest_s = dt;
        w->slowest_call = call;
    }
    if (rc < 0) {
        worker_fail(w, call, "xcecli_joblist_filter", rc);
        return;
    }
    w->ok++;
    if (rc > 0 && jobs == NULL) {
        fprintf(stderr, "thread %d call %d: joblist returned %d jobs and a NULL array\n", w->idx,
                call, rc);
        w->failures++;
        return;
    }
    int missing = 0;
    for (int i = 0; i < nbefore; i++) {
        int found = 0;
        for (int k = 0; k < rc && !found; k++) found = jobs[k].jobid == before[i];
        missing += !found;
    }
    if (missing) {
        fprintf(stderr,
                "thread %d call %d: joblist (%d jobs) misses %d of the %d jobs acknowledged "
                "before it started (stale read)\n",
                w->idx, call, rc, missing, nbefore);
        w->failures++;
    }
    xce_free_jobs(jobs, (size_t)rc);
}

static void *worker_main(void *p) {
    struct worker *w = (struct worker *)p;
    pthread_barrier_wait(&g_go);
    for (int call = 0; call < NCALLS; call++) {
        if (call) sleep_ms(PAUSE_MS);
        /* The last call comes after the kill (the SIGALRM watchdog bounds the wait). */
        while (call == NCALLS - 1 && !atomic_load(&g_killed)) sleep_ms(1);
        if (w->submitter)
            do_submit(w, call);
        else
            do_list(w, call);
        atomic_fetch_add(&g_done, 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    struct stat sb;
    if (argc < 2 || stat(argv[1], &sb) != 0) {
        printf("SKIP: no xce-controller (%s)\n", argc > 1 ? argv[1] : "none given");
        return 77;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);

    alarm(STARTUP_BUDGET_S);
    if (cluster_start_retry(&g_cluster, argv[1], 3) != 0) {
        fprintf(stderr, "cluster did not come up\n");
        return 1;
    }
    xce_client_config_t conf;
    xce_client_config_init(&conf);
    CHECK(xce_client_config_parse_masters(&conf, g_cluster.masters) == 3);
    snprintf(conf.client_name, sizeof conf.client_name, "ctest-threads");
    xcecli_ctx_t ctx = NULL;
    CHECK_EQ(xcecli_start(&conf, &ctx), 0);
    if (!ctx) {
        cluster_stop(&g_cluster);
        return 1;
    }
    CHECK_EQ(xcecli_set_event_handler(ctx, on_event, NULL), 0);
    /* Warm up: the ctx reaches the primary, and the fresh cluster has no jobs. */
    xce_job_t *jobs = NULL;
    int n = xcecli_joblist_filter(ctx, NULL, &jobs);
    CHECK_EQ(n, 0);
    if (n > 0) xce_free_jobs(jobs, (size_t)n);
    xce_stats_t st0;
    CHECK_EQ(xcecli_get_stats(ctx, &st0), 0);
    printf("ctx on master %d (%s:%u); primary is node %d (pid %d)\n", st0.current_master,
           st0.current_master_host, (unsigned)st0.current_master_port, g_cluster.primary,
           g_cluster.node_pid[g_cluster.primary]);

    alarm(RUN_BUDGET_S);
    struct worker w[NTHREADS];
    pthread_t th[NTHREADS];
    CHECK_EQ(pthread_barrier_init(&g_go, NULL, NTHREADS + 1), 0);
    for (int i = 0; i < NTHREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].idx = i;
        w[i].submitter = i % 2 == 0;
        w[i].ctx = ctx;
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            cluster_kill_all(&g_cluster);
            _exit(1); /* the barrier would never open */
        }
    }
    pthread_barrier_wait(&g_go);
    double t_start = now_s();
    /* Traffic is flowing: a quarter of the calls are done (the watchdog bounds the wait). */
    while (atomic_load(&g_done) < NTHREADS * NCALLS / 4) sleep_ms(1);
    int victim = g_cluster.primary;
    printf("kill -9 primary node %d (pid %d) %.0f ms after the threads started, %d calls "
           "done\n",
           victim, g_cluster.node_pid[victim], (now_s() - t_start) * 1e3, atomic_load(&g_done));
    CHECK_EQ(kill(g_cluster.node_pid[victim], SIGKILL), 0);
    atomic_store(&g_killed, 1);
    double t_kill = now_s();
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    double t_done = now_s();
    pthread_barrier_destroy(&g_go);

    int calls = 0, ok = 0, failures = 0, slow_idx = 0;
    for (int i = 0; i < NTHREADS; i++) {
        calls += w[i].calls;
        ok += w[i].ok;
        failures += w[i].failures;
        if (w[i].slowest_s > w[slow_idx].slowest_s) slow_idx = i;
    }
    CHECK_EQ(calls, NTHREADS * NCALLS);
    CHECK_EQ(ok, calls);
    CHECK_EQ(failures, 0);
    CHECK_EQ(g_nacked, (NTHREADS / 2) * NCALLS);

    /* Afterwards the new primary lists exactly the acknowledged ids, each once. */
    jobs = NULL;
    n = xcecli_joblist_filter(ctx, NULL, &jobs);
    if (n < 0) fprintf(stderr, "final joblist: %d (%s)\n", n, xce_strerror(n));
    CHECK_EQ(n, g_nacked);
    for (int i = 0; i < g_nacked && n >= 0; i++) {
        int seen = 0;
        for (int k = 0; k < n; k++) seen += jobs[k].jobid == g_acked[i];
        if (seen != 1) {
            fprintf(stderr, "acknowledged job %llu listed %d times\n",
                    (unsigned long long)g_acked[i], seen);
            g_failures++;
        }
    }
    for (int k = 0; k < n; k++) {
        int known = 0;
        for (int i = 0; i < g_nacked && !known; i++) known = jobs[k].jobid == g_acked[i];
        if (!known) {
            fprintf(stderr, "listed job %llu (%s) was never acknowledged\n",
                    (unsigned long long)jobs[k].jobid, jobs[k].name ? jobs[k].name : "?");
            g_failures++;
        }
    }
    if (n > 0) xce_free_jobs(jobs, (size_t)n);

    xce_stats_t st;
    CHECK_EQ(xcecli_get_stats(ctx, &st), 0);
    /* st0 may already count one: a warm-up call that met a standby first and moved on. */
    CHECK(st.failovers - st0.failovers >= 1);
    printf("S7 threads: %d threads x %d calls = %d calls (%d jobsubmit, %d joblist), %d ok; "
           "%d jobs listed after; failovers %llu through the kill (%llu in all, last %llu ms), rotations %llu, retries %llu, "
           "backoff %llu ms; "
           "slowest call %.3f s (thread %d %s call %d); all done %.3f s after the kill; "
           "now on %s:%u\n",
           NTHREADS, NCALLS, calls, (NTHREADS / 2) * NCALLS, (NTHREADS / 2) * NCALLS, ok, n,
           (unsigned long long)(st.failovers - st0.failovers),
           (unsigned long long)st.failovers, (unsigned long long)st.last_failover_ms,
           (unsigned long long)st.rotations, (unsigned long long)st.retries, (unsigned long long)st.backoff_ms,
           w[slow_idx].slowest_s, slow_idx, w[slow_idx].submitter ? "jobsubmit" : "joblist",
           w[slow_idx].slowest_call, t_done - t_kill, st.current_master_host,
           (unsigned)st.current_master_port);
    print_events(t_kill);
    alarm(0);
    xcecli_stop(ctx);
    cluster_stop(&g_cluster);
    printf("shared context through a kill -9: %s\n", g_failures ? "FAIL" : "ok");
    return g_failures ? 1 : 0;
}
