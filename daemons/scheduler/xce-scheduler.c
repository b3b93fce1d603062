/*
 * xce-scheduler: the scheduler daemon of an xce cluster, written against libxce's C API.
 *
 *   xce-scheduler --masters H:P[,H:P...] [--name NAME] [--poll-ms 200]
 *   (the masters may also come from $XCE_MASTERS)
 *
 * One loop: list the PEND jobs (oldest first), list the workers, and dispatch each job to an
 * OK worker with enough free CPUs (a worker has NCPUS slots; a job takes max(1, its ncpus);
 * the least loaded worker wins, ties by name). A job no worker fits gets a pend reason saying
 * why (set only when it changes). It joins as a SCHEDULER (dispatch and pend reasons need the
 * session) and re-joins from inside the reconnect handler after every failover (F10).
 *
 * Dispatch is a replicated write: re-sent by the library across a failover, it is applied
 * exactly once (F16), and a job that is no longer PEND (another dispatch won, or it was
 * killed) answers EINVAL, which the scheduler skips. SIGTERM/SIGINT stop it after the current
 * round; it prints a summary line at exit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xce/xce.h>

/* The filtered, flat job list (xcecli_joblist is the seeds' NULL-terminated form). */
#define XCE_JOBLIST_FILTERED xcecli_joblist_filter

struct sched {
    const char *name;
    xce_join_t join;
    xcecli_ctx_t ctx;
    unsigned long reconnects, rejoined, rejoin_failed, dispatched, reasons, rounds;
};

static const char *prog_name = "scheduler";

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ xce-scheduler[%s] %s\n",
            tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000, prog_name, msg);
}

/* F10: the session is gone after a failover; re-join before the interrupted op is re-sent. */
static int on_reconnect(xcecli_ctx_t ctx, void *arg) {
    struct sched *s = arg;
    s->reconnects++;
    uint64_t sid = 0;
    int rc = xcecli_join(ctx, &s->join, &sid);
    if (rc < 0) {
        s->rejoin_failed++;
        logf_("reconnect: re-join failed: %s", xce_strerror(rc));
        return rc;
    }
    s->rejoined++;
    logf_("reconnect: re-joined as SCHEDULER (session %" PRIu64 ")", sid);
    return 0;
}

struct slot {
    const char *name;
    long free; /* CPUs not taken by running jobs */
};

static int by_submit(const void *a, const void *b) {
    const xce_job_t *x = a, *y = b;
    if (x->submit_time != y->submit_time)
        return x->submit_time < y->submit_time ? -1 : 1;
    return x->jobid < y->jobid ? -1 : x->jobid > y->jobid;
}

/* One round. Returns a negative status when the cluster could not be asked. */
static int round_(struct sched *s) {
    xce_job_filter_t f = {NULL, NULL, 1u << XCE_JOB_PEND, 0};
    xce_job_t *jobs = NULL;
    int n = XCE_JOBLIST_FILTERED(s->ctx, &f, &jobs);
    if (n <= 0)
        return n;
    xce_host_t *hosts = NULL;
    int nh = xcecli_workerlist(s->ctx, &hosts);
    if (nh < 0) {
        xce_free_jobs(jobs, (size_t)n);
        return nh;
    }
    struct slot *slots = calloc((size_t)nh + 1, sizeof *slots);
    int nslots = 0;
    for (int i = 0; slots && i < nh; i++) {
        if (hosts[i].state != XCE_HOST_OK)
            continue;
        slots[nslots].name = hosts[i].name;
        slots[nslots].free = (long)hosts[i].ncpus - (long)hosts[i].njobs;
        nslots++;
    }
    qsort(jobs, (size_t)n, sizeof *jobs, by_submit);
    int rc = 0;
    for (int i = 0; i < n && slots; i++) {
        xce_job_t *job = &jobs[i];
        long need = job->ncpus > 0 ? (long)job->ncpus : 1;
        struct slot *best = NULL;
        for (int k = 0; k < nslots; k++) {
            struct slot *sl = &slots[k];
            if (sl->free >= need &&
                (!best || sl->free > best->free || (sl->free == best->free && strcmp(sl->name, best->name) < 0)))
                best = sl;
        }
        if (best) {
            int d = xcecli_jobdispatch(s->ctx, job->jobid, best->name);
            if (d == 0) {
                best->free -= need;
                s->dispatched++;
                logf_("job %" PRIu64 " dispatched to %s", job->jobid, best->name);
            } else if (d == -EINVAL || d == -ENOENT) {
                /* No longer PEND, or the host closed meanwhile: the next round sees. */
                logf_("job %" PRIu64 " not dispatched to %s: %s", job->jobid, best->name, xce_strerror(d));
            } else {
                rc = d;
                break;
            }
            continue;
        }
        char reason[160];
        if (nslots == 0)
            snprintf(reason, sizeof reason, "no OK worker (%d known)", nh);
        else
            snprintf(reason, sizeof reason, "no OK worker has enough free CPUs (needs %ld)", need);
        if (!job->pend_reason || strcmp(job->pend_reason, reason) != 0) {
            int r = xcecli_set_pend_reason(s->ctx, job->jobid, reason);
            if (r == 0) {
                s->reasons++;
                logf_("job %" PRIu64 " pending: %s", job->jobid, reason);
            } else if (r != -EINVAL && r != -ENOENT) {
                rc = r;
                break;
            }
        }
    }
    free(slots);
    xce_free_hosts(hosts, (size_t)nh);
    xce_free_jobs(jobs, (size_t)n);
    return rc;
}

static void usage(void) {
    fprintf(stderr, "usage: xce-scheduler --masters H:P[,H:P...] [--name NAME] [--poll-ms 200]\n");
    exit(2);
}

int main(int argc, char **argv) {
    struct sched s;
    memset(&s, 0, sizeof s);
    const char *masters = getenv("XCE_MASTERS");
    int poll_ms = 200;
    static char hostname[256];
    if (gethostname(hostname, sizeof hostname - 1) < 0)
        strcpy(hostname, "scheduler");
    s.name = hostname;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "--masters")) masters = argv[i + 1];
        else if (!strcmp(argv[i], "--name")) s.name = argv[i + 1];
        else if (!strcmp(argv[i], "--poll-ms")) poll_ms = atoi(argv[i + 1]);
        else usage();
    }
    if (!masters || poll_ms <= 0)
        usage();
    prog_name = s.name;
    s.join = (xce_join_t){XCE_ROLE_SCHEDULER, s.name, 0, 0, NULL, 0};

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);

    xce_client_config_t conf;
    xce_client_config_init(&conf);
    if (xce_client_config_parse_masters(&conf, masters) < 0) {
        logf_("bad --masters %s", masters);
        return 2;
    }
    snprintf(conf.client_name, sizeof conf.client_name, "xce-scheduler %s", s.name);
    int stopping = 0;
    while (!stopping) {
        int rc = xcecli_start(&conf, &s.ctx);
        if (rc == 0)
            break;
        logf_("start: %s (retrying)", xce_strerror(rc));
        struct timespec t = {1, 0};
        if (sigtimedwait(&mask, NULL, &t) > 0)
            return 0;
    }
    xcecli_set_reconnect_handler(s.ctx, on_reconnect, &s);
    for (;;) {
        uint64_t sid = 0;
        int rc = xcecli_join(s.ctx, &s.join, &sid);
        if (rc == 0) {
            logf_("joined as SCHEDULER (session %" PRIu64 ")", sid);
            break;
        }
        logf_("join: %s (retrying)", xce_strerror(rc));
        struct timespec t = {1, 0};
        if (sigtimedwait(&mask, NULL, &t) > 0) {
            xcecli_stop(s.ctx);
            return 0;
        }
    }

    struct timespec last_err = {0, 0};
    while (!stopping) {
        int rc = round_(&s);
        s.rounds++;
        if (rc < 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - last_err.tv_sec >= 1) {
                logf_("round: %s", xce_strerror(rc));
                last_err = now;
            }
        }
        struct timespec t = {poll_ms / 1000, (long)(poll_ms % 1000) * 1000000L};
        if (sigtimedwait(&mask, NULL, &t) > 0)
            stopping = 1;
    }
    xce_stats_t st;
    memset(&st, 0, sizeof st);
    xcecli_get_stats(s.ctx, &st);
    logf_("summary reconnects=%lu rejoined=%lu rejoin_failed=%lu failovers=%" PRIu64
          " dispatched=%lu reasons=%lu rounds=%lu",
          s.reconnects, s.rejoined, s.rejoin_failed, st.failovers, s.dispatched, s.reasons,
          s.rounds);
    xcecli_stop(s.ctx);
    return 0;
}
