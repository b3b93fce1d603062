/* S13 (acceptance): a forking, event-loop daemon written against the header, through kill -9
 * of the primary (F21 amended, F26, F27, F16).
 *
 *   test_s13_daemon CONTROLLER [ROUNDS [KILLS [SCALE [MONITOR]]]]
 *
 * The test process starts 3 `xce-controller run` nodes (nodes.h) and forks the daemon, which
 * behaves as a traditional C worker daemon does:
 *  - it probes the cluster once (a context, masters given by host name: localhost:PORT), then
 *    "daemonizes" with closefrom(3) while that context is alive, and builds its own event loop:
 *    an epoll set, eventfds (a few "sentinels" holding known counters it never touches, one its
 *    children signal when done, one its SIGTERM handler signals), a timerfd, a signalfd for
 *    SIGCHLD, a report pipe;
 *  - a second thread of the daemon reads the cluster in a loop on its own context (unless
 *    MONITOR is 0), so children are forked while another thread is inside the library;
 *  - every tick it forks a child per job: even children use the inherited context, odd ones
 *    start their own (host names again); each child submits two jobs and controls them
 *    (suspend; kill one), reports what it was acknowledged through the pipe, signals the
 *    daemon's eventfd and exits; the daemon submits and controls jobs of its own meanwhile;
 *  - its SIGTERM handler sets a flag, writes the stop eventfd and calls xcecli_try_wakeup.
 * Meanwhile the test process kills -9 the primary KILLS times (restarting each killed node in
 * place), then freezes the primary (SIGSTOP) so the daemon's next call blocks, and sends
 * SIGTERM.
 *
 * Checks (in the daemon, exit status to the test process):
 *  - every write of the daemon and of its children applied exactly once: the final listing has
 *    every acknowledged job once, with the name its writer gave it and the state its writer's
 *    acknowledged jobctrl calls left it in; no job nobody submitted; no submit answered with
 *    another job's id; no call failed (other than -EINTR from the stop);
 *  - no child hangs (bounded wait, then SIGKILL and a failure);
 *  - none of the daemon's fds touched: each fd still names what the daemon opened (its
 *    /proc/self/fd link and, for eventfds, the kernel's eventfd-id), the sentinels' counters are
 *    as the daemon left them (read from /proc/self/fdinfo, also in every child), epoll still
 *    delivers events;
 *  - the SIGTERM stop completes promptly (the call in flight is woken).
 * Run by meson (suite cluster) and under valgrind by scripts/ctest.sh (fewer rounds, SCALE
 * stretches the time bounds, MONITOR 0: a child forked while another thread is inside a call
 * holds that thread's heap memory, which only that thread, absent in the child, references —
 * the leak checker would count it). A test that cannot run fails, it never skips. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>

#include "nodes.h"
#include "util.h"

/* ---------------------------------------------------------------- parameters */

static int g_rounds = 40;     /* children forked (one per tick) */
static int g_kills = 3;       /* kill -9 of the primary */
static double g_scale = 1.0;  /* stretches every time bound (valgrind) */
static int g_monitor = 1;     /* run the monitor thread */
#define JOBS_PER_CHILD 2
#define MAX_LIVE_CHILDREN 4
#define MAX_RECS 1024
#define N_SENTINELS 4

/* ---------------------------------------------------------------- the daemon's state */

static char g_masters[256]; /* host names */
static char g_user[32];     /* tags this run's jobs */
static xcecli_ctx_t g_ctx;      /* the daemon's context (children may inherit it) */
static xcecli_ctx_t g_mon_ctx;  /* the monitor thread's context */
static volatile sig_atomic_t g_stop;
static volatile sig_atomic_t g_wake_rc = -1000; /* what try_wakeup said in the handler */
static int g_stop_efd = -1;
static struct timespec g_term_ts;

/* One descriptor of the daemon and what it names. */
struct fdrec {
    int fd;
    const char *what;
    char link[128];
    long long efd_id;    /* eventfd-id from fdinfo, -1 if not an eventfd */
    long long count;     /* sentinels: the counter the daemon left, -1: not checked */
};
static struct fdrec g_fds[16];
static int g_nfds;

/* What a writer was acknowledged. */
struct rec {
    uint64_t id;
    char name[48];
    int state; /* expected XCE_JOB_*, -1: unknown (a control call failed) */
    int acked; /* 1: the submit returned 0; 0: it failed (maybe applied) */
};
static struct rec g_recs[MAX_RECS];
static int g_nrecs;
static int g_errors; /* failed calls that were not the stop's -EINTR */

static double mono(void) {
    return nodes_now();
}

static double ts_s(const struct timespec *ts) {
    return (double)ts->tv_sec + (double)ts->tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- fd identity */

/* eventfd-id and eventfd-count of fd from /proc/self/fdinfo (-1 when absent). */
static void efd_info(int fd, long long *id, long long *count) {
    char path[64], buf[512];
    *id = -1;
    *count = -1;
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return;
    ssize_t n = read(f, buf, sizeof buf - 1);
    close(f);
    if (n <= 0) return;
    buf[n] = 0;
    char *p = strstr(buf, "eventfd-count:");
    if (p) *count = strtoll(p + 14, NULL, 16);
    p = strstr(buf, "eventfd-id:");
    if (p) *id = strtoll(p + 11, NULL, 10);
}

static void fd_link(int fd, char *out, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, out, len - 1);
    out[n > 0 ? n : 0] = 0;
}

static void remember_fd(int fd, const char *what, int sentinel) {
    struct fdrec *r = &g_fds[g_nfds++];
    r->fd = fd;
    r->what = what;
    fd_link(fd, r->link, sizeof r->link);
    long long id, count;
    efd_info(fd, &id, &count);
    r->efd_id = id;
    r->count = sentinel ? count : -1;
}

/* Every remembered fd still names what the daemon opened, sentinels hold their counters.
 * Returns the number of differences (printed with `who`). */
static int fds_touched(const char *who) {
    int bad = 0;
    for (int i = 0; i < g_nfds; i++) {
        struct fdrec *r = &g_fds[i];
        char link[128];
        long long id, count;
        if (fcntl(r->fd, F_GETFD) < 0) {
            fprintf(stderr, "%s: the daemon's %s (fd %d) was closed\n", who, r->what, r->fd);
            bad++;
            continue;
        }
        fd_link(r->fd, link, sizeof link);
        efd_info(r->fd, &id, &count);
        if (strcmp(link, r->link) != 0 || id != r->efd_id) {
            fprintf(stderr, "%s: the daemon's %s (fd %d) now names %s (eventfd-id %lld, was %s %lld)\n",
                    who, r->what, r->fd, link, id, r->link, r->efd_id);
            bad++;
        } else if (r->count >= 0 && count != r->count) {
            fprintf(stderr, "%s: the daemon's %s (fd %d) counter is %lld, the daemon left %lld\n",
                    who, r->what, r->fd, count, r->count);
            bad++;
        }
    }
    return bad;
}

/* ---------------------------------------------------------------- writes */

static int write_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Submits job `name` and controls it (suspend; then kill when `kill`), recording what was
 * acknowledged in *r. Reports each failure on stderr as `who`. Returns the number of failed
 * calls (-EINTR during the stop not counted). */
static int do_job(xcecli_ctx_t ctx, const char *who, const char *name, int kill_it,
                  struct rec *r) {
    uint64_t id = 0, got = 0;
    int errs = 0;
    xce_new_jobid(&id);
    xce_job_spec_t spec = {id, name, g_user, NULL, "/bin/true", 1, 16};
    memset(r, 0, sizeof *r);
    r->id = id;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->state = -1;
    int rc = xcecli_jobsubmit(ctx, &spec, &got);
    if (rc != 0) {
        xce_last_error_t le;
        int maybe = xcecli_last_error(ctx, &le) == 0 ? le.maybe_applied : -1;
        fprintf(stderr, "%s: jobsubmit %s: %d (%s), maybe_applied %d\n", who, name, rc,
                xce_strerror(rc), maybe);
        r->acked = 0;
        return (rc == -EINTR && g_stop) ? 0 : 1;
    }
    r->acked = 1;
    r->state = XCE_JOB_PEND;
    if (got != id) {
        fprintf(stderr, "%s: jobsubmit %s returned 0 with job id %" PRIu64
                        ", not its own %" PRIu64 " (another writer's reply)\n",
                who, name, got, id);
        errs++;
    }
    int actions[2] = {XCE_JOBCTRL_SUSPEND, XCE_JOBCTRL_KILL};
    int states[2] = {XCE_JOB_SUSP, XCE_JOB_EXIT};
    for (int a = 0; a < (kill_it ? 2 : 1); a++) {
            rc = xcecli_jobctrl(ctx, id, actions[a]);
            if (rc != 0) {
            fprintf(stderr, "%s: jobctrl %s action %d: %d (%s)\n", who, name, actions[a], rc,
                    xce_strerror(rc));
            r->state = -1;
            return errs + ((rc == -EINTR && g_stop) ? 0 : 1);
        }
        r->state = states[a];
    }
    return errs;
}

/* ---------------------------------------------------------------- the children */

static int g_rep_w = -1;   /* report pipe, write end */
static int g_done_efd = -1;

static int start_ctx(xcecli_ctx_t *out) {
    xce_client_config_t conf;
    xce_client_config_init(&conf);
    if (xce_client_config_parse_masters(&conf, g_masters) <= 0) return -EINVAL;
    return xcecli_start(&conf, out);
}

/* Exit status: bit 0 a call failed or was answered with another's reply, bit 1 the daemon's
 * fds were touched, bit 2 the done eventfd could not be written, bit 3 no context. */
static int child_main(int k) {
    char who[32];
    snprintf(who, sizeof who, "child %d (pid %d)", k, (int)getpid());
    signal(SIGTERM, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int status = 0;
    if (fds_touched(who)) status |= 2;
    int inherited = (k % 2) == 0;
    xcecli_ctx_t ctx = NULL;
    if (inherited) {
        ctx = g_ctx;
    } else {
        int rc = start_ctx(&ctx);
        if (rc != 0) {
            fprintf(stderr, "%s: xcecli_start: %d (%s)\n", who, rc, xce_strerror(rc));
            status |= 8;
            ctx = NULL;
        }
    }
    for (int j = 0; ctx && j < JOBS_PER_CHILD; j++) {
        char name[48], line[160];
        struct rec r;
        snprintf(name, sizeof name, "c%d-%s-%d", k, inherited ? "inh" : "own", j);
        if (do_job(ctx, who, name, j % 2, &r)) status |= 1;
        int n = snprintf(line, sizeof line, "J %" PRIu64 " %s %d %d\n", r.id, r.name, r.state,
                         r.acked);
        if (write_all(g_rep_w, line, (size_t)n) != 0) status |= 4;
    }
    if (ctx) xcecli_stop(ctx);
    if (fds_touched(who)) status |= 2;
    uint64_t one = 1;
    if (write(g_done_efd, &one, sizeof one) != (ssize_t)sizeof one) {
        fprintf(stderr, "%s: write to the daemon's eventfd: %s\n", who, strerror(errno));
        status |= 4;
    }
    return status;
}

/* ---------------------------------------------------------------- the monitor thread */

static atomic_int g_mon_calls, g_mon_errors;

static void *monitor_main(void *arg) {
    (void)arg;
    while (!g_stop) {
        xce_cluster_conf_t *cc = NULL;
        int rc = xcecli_clusterconf(g_mon_ctx, &cc);
        atomic_fetch_add(&g_mon_calls, 1);
        if (rc == 0) {
            xce_free_cluster_conf(cc);
        } else if (!(g_stop && (rc == -EINTR || rc == -E_XCE_CLOSED))) {
            fprintf(stderr, "monitor: clusterconf: %d (%s)\n", rc, xce_strerror(rc));
            atomic_fetch_add(&g_mon_errors, 1);
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ---------------------------------------------------------------- SIGTERM */

static void on_term(int sig) {
    (void)sig;
    int saved = errno;
    clock_gettime(CLOCK_MONOTONIC, &g_term_ts);
    g_stop = 1;
    uint64_t one = 1;
    ssize_t w = write(g_stop_efd, &one, sizeof one);
    (void)w;
    g_wake_rc = xcecli_try_wakeup(g_ctx);
    xcecli_try_wakeup(g_mon_ctx);
    errno = saved;
}

/* ---------------------------------------------------------------- the daemon */

struct child {
    pid_t pid;
    int k;
    double started;
};

/* Adds one "J id name state acked" line to the records. */
static void parse_report(char *line) {
    struct rec r;
    memset(&r, 0, sizeof r);
    if (sscanf(line, "J %" SCNu64 " %47s %d %d", &r.id, r.name, &r.state, &r.acked) == 4 &&
        g_nrecs < MAX_RECS) {
        g_recs[g_nrecs++] = r;
    } else {
        fprintf(stderr, "daemon: bad report line: %s\n", line);
        g_failures++;
    }
}

static char g_repbuf[65536];
static size_t g_replen;

static void drain_reports(int fd) {
    for (;;) {
        ssize_t n = read(fd, g_repbuf + g_replen, sizeof g_repbuf - 1 - g_replen);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        g_replen += (size_t)n;
        g_repbuf[g_replen] = 0;
        char *start = g_repbuf, *nl;
        while ((nl = strchr(start, '\n')) != NULL) {
            *nl = 0;
            parse_report(start);
            start = nl + 1;
        }
        g_replen = strlen(start);
        memmove(g_repbuf, start, g_replen + 1);
    }
}

/* The final listing against the records. */
static void verify_jobs(void) {
    xcecli_ctx_t v = NULL;
    int rc = -1;
    double deadline = mono() + 30 * g_scale;
    while (rc != 0 && mono() < deadline) {
        rc = start_ctx(&v);
        if (rc != 0) nodes_sleep(0.2);
    }
    CHECK_EQ(rc, 0);
    if (rc != 0) return;
    xce_job_filter_t f = {g_user, NULL, 0, 0};
    xce_job_t *jobs = NULL;
    int n = xcecli_joblist_filter(v, &f, &jobs);
    CHECK(n >= 0);
    if (n < 0) {
        fprintf(stderr, "daemon: final listing: %d (%s)\n", n, xce_strerror(n));
        xcecli_stop(v);
        return;
    }
    int lost = 0, dup = 0, wrong_state = 0, phantom = 0, wrong_name = 0, unknown_applied = 0;
    int acked = 0;
    for (int i = 0; i < g_nrecs; i++) {
        struct rec *r = &g_recs[i];
        int by_id = 0, by_name = 0;
        const xce_job_t *hit = NULL;
        for (int j = 0; j < n; j++) {
            if (jobs[j].jobid == r->id) {
                by_id++;
                hit = &jobs[j];
            }
            if (strcmp(jobs[j].name, r->name) == 0) by_name++;
        }
        if (r->acked) acked++;
        if (by_name > 1) {
            fprintf(stderr, "daemon: job %s listed %d times\n", r->name, by_name);
            dup++;
        }
        if (!r->acked) {
            if (by_id) unknown_applied++;
            continue;
        }
        if (by_id != 1) {
            fprintf(stderr, "daemon: acknowledged job %s (%" PRIu64 ") listed %d times\n",
                    r->name, r->id, by_id);
            lost++;
            continue;
        }
        if (strcmp(hit->name, r->name) != 0) {
            fprintf(stderr, "daemon: job %" PRIu64 " is named %s, its writer submitted %s\n",
                    r->id, hit->name, r->name);
            wrong_name++;
        }
        if (r->state >= 0 && hit->state != r->state) {
            fprintf(stderr, "daemon: job %s is in state %d, its writer's acknowledged calls "
                            "left it in %d\n",
                    r->name, hit->state, r->state);
            wrong_state++;
        }
    }
    for (int j = 0; j < n; j++) {
        int known = 0;
        for (int i = 0; i < g_nrecs && !known; i++) known = g_recs[i].id == jobs[j].jobid;
        if (!known) {
            fprintf(stderr, "daemon: job %" PRIu64 " (%s) was submitted by nobody\n",
                    jobs[j].jobid, jobs[j].name);
            phantom++;
        }
    }
    int repeated = 0; /* F26: xce_new_jobid never repeats, across forks included */
    for (int i = 0; i < g_nrecs; i++)
        for (int j = i + 1; j < g_nrecs; j++)
            if (g_recs[i].id == g_recs[j].id) {
                fprintf(stderr, "daemon: xce_new_jobid gave %" PRIu64 " to %s and to %s\n",
                        g_recs[i].id, g_recs[i].name, g_recs[j].name);
                repeated++;
            }
    CHECK_EQ(repeated, 0);
    printf("jobs: %d records (%d acknowledged, %d failed submits of which %d applied), %d "
           "listed; lost %d, duplicated %d, wrong name %d, wrong state %d, phantom %d\n",
           g_nrecs, acked, g_nrecs - acked, unknown_applied, n, lost, dup, wrong_name,
           wrong_state, phantom);
    CHECK_EQ(lost, 0);
    CHECK_EQ(dup, 0);
    CHECK_EQ(wrong_name, 0);
    CHECK_EQ(wrong_state, 0);
    CHECK_EQ(phantom, 0);
    CHECK(acked > 0);
    if (n > 0) xce_free_jobs(jobs, (size_t)n);
    xcecli_stop(v);
}

static int daemon_main(void) {
    setpgid(0, 0); /* the test can kill the daemon with its children */
    snprintf(g_user, sizeof g_user, "s13-%d", (int)getpid());
    /* 1. Probe the cluster once before daemonizing, as a daemon checks its configuration. */
    int rc = -1;
    double deadline = mono() + 30 * g_scale;
    int level = xce_set_log_level(XCE_LOG_ERROR); /* the nodes are starting: no WARN each */
    while (rc != 0 && mono() < deadline) {
        rc = start_ctx(&g_ctx);
        if (rc != 0) nodes_sleep(0.2);
    }
    xce_set_log_level(level);
    if (rc != 0) {
        fprintf(stderr, "daemon: xcecli_start: %d (%s)\n", rc, xce_strerror(rc));
        return 1;
    }
    xce_controller_info_t *info = NULL;
    rc = xcecli_hello(g_ctx, &info);
    if (rc != 0) {
        fprintf(stderr, "daemon: hello: %d (%s)\n", rc, xce_strerror(rc));
        return 1;
    }
    xce_free_controller_info(info);

    /* 2. Daemonize: close every descriptor above 2, the library's included. */
    closefrom(3);

    /* 3. The daemon's own event loop. Sentinels first: they take the lowest numbers, the ones
     * the library's socket and pooled eventfd had. */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    remember_fd(ep, "epoll", 0);
    int sentinel[N_SENTINELS];
    for (int i = 0; i < N_SENTINELS; i++) {
        sentinel[i] = eventfd((unsigned)(1000 + i), EFD_CLOEXEC | EFD_NONBLOCK);
        remember_fd(sentinel[i], "sentinel eventfd", 1);
    }
    g_done_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    remember_fd(g_done_efd, "children's eventfd", 0);
    g_stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    remember_fd(g_stop_efd, "stop eventfd", 0);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    remember_fd(tfd, "timerfd", 0);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    remember_fd(sfd, "signalfd", 0);
    int rep[2];
    if (pipe2(rep, O_CLOEXEC) != 0) return 1;
    fcntl(rep[0], F_SETFL, O_NONBLOCK);
    g_rep_w = rep[1];
    remember_fd(rep[0], "report pipe", 0);
    remember_fd(rep[1], "report pipe", 0);
    for (int i = 0; i < g_nfds; i++)
        if (g_fds[i].fd < 0) {
            fprintf(stderr, "daemon: could not open its %s\n", g_fds[i].what);
            return 1;
        }
    struct epoll_event ev = {0};
    int watched[] = {tfd, g_done_efd, g_stop_efd, sfd, rep[0]};
    for (size_t i = 0; i < sizeof watched / sizeof watched[0]; i++) {
        ev.events = EPOLLIN;
        ev.data.fd = watched[i];
        CHECK_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, watched[i], &ev), 0);
    }
    struct itimerspec its = {{0, 250 * 1000 * 1000}, {0, 250 * 1000 * 1000}};
    timerfd_settime(tfd, 0, &its, NULL);

    /* 4. SIGTERM: flag, eventfd, try_wakeup. The monitor thread's context. */
    rc = start_ctx(&g_mon_ctx);
    if (rc != 0) {
        fprintf(stderr, "daemon: monitor xcecli_start: %d (%s)\n", rc, xce_strerror(rc));
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    pthread_t mon;
    if (g_monitor && pthread_create(&mon, NULL, monitor_main, NULL) != 0) return 1;

    printf("S13 working: %d rounds, fds:", g_rounds);
    for (int i = 0; i < g_nfds; i++) printf(" %d=%s", g_fds[i].fd, g_fds[i].what);
    printf("\n");
    fflush(stdout);

    /* 5. The loop. */
    struct child kids[MAX_LIVE_CHILDREN];
    int nkids = 0, forked = 0, reaped = 0, hung = 0, bad_children = 0, round = 0;
    uint64_t done_signals = 0, ticks = 0;
    int idle_said = 0;
    int stop_call_rc = 1; /* the result of the call in flight at the stop */
    double child_timeout = 40 * g_scale;
    while (!g_stop) {
        struct epoll_event evs[8];
        int ne = epoll_wait(ep, evs, 8, 1000);
        if (ne < 0 && errno != EINTR) {
            fprintf(stderr, "daemon: epoll_wait: %s\n", strerror(errno));
            g_failures++;
            break;
        }
        int tick = 0;
        for (int i = 0; i < ne; i++) {
            int fd = evs[i].data.fd;
            uint64_t v;
            if (fd == tfd) {
                if (read(tfd, &v, sizeof v) == (ssize_t)sizeof v) tick = 1;
            } else if (fd == g_done_efd) {
                if (read(g_done_efd, &v, sizeof v) == (ssize_t)sizeof v) done_signals += v;
            } else if (fd == sfd) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                }
            } else if (fd == rep[0]) {
                drain_reports(rep[0]);
            }
        }
        /* Reap (SIGCHLD arrives through the signalfd; reap on every turn anyway). */
        for (int i = 0; i < nkids;) {
            int st;
            pid_t p = waitpid(kids[i].pid, &st, WNOHANG);
            if (p == kids[i].pid) {
                reaped++;
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    fprintf(stderr, "daemon: child %d exited with %s %d\n", kids[i].k,
                            WIFEXITED(st) ? "status" : "signal",
                            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                    bad_children++;
                }
                kids[i] = kids[--nkids];
                continue;
            }
            if (mono() - kids[i].started > child_timeout) {
                fprintf(stderr, "daemon: child %d (pid %d) hung for %.0f s: killed\n", kids[i].k,
                        (int)kids[i].pid, child_timeout);
                kill(kids[i].pid, SIGKILL);
                waitpid(kids[i].pid, NULL, 0);
                hung++;
                kids[i] = kids[--nkids];
                continue;
            }
            i++;
        }
        if (!tick || g_stop) continue;
        ticks++;
        if (round < g_rounds) {
            if (nkids < MAX_LIVE_CHILDREN) {
                int k = round;
                fflush(stdout);
                fflush(stderr);
                pid_t p = fork();
                if (p == 0) _exit(child_main(k));
                if (p < 0) {
                    fprintf(stderr, "daemon: fork: %s\n", strerror(errno));
                    g_failures++;
                } else {
                    kids[nkids].pid = p;
                    kids[nkids].k = k;
                    kids[nkids].started = mono();
                    nkids++;
                    forked++;
                }
                /* The daemon writes too, while its child does. */
                char name[48];
                snprintf(name, sizeof name, "p-%d", round);
                if (g_nrecs < MAX_RECS) {
                    g_errors += do_job(g_ctx, "daemon", name, round % 2, &g_recs[g_nrecs]);
                    g_nrecs++;
                }
                round++;
            }
        } else if (nkids == 0) {
            if (!idle_said) {
                printf("S13 idle: %d children forked, %d reaped\n", forked, reaped);
                fflush(stdout);
                idle_said = 1;
            }
            /* Idle: a read every tick, as a daemon polls its cluster. */
            xce_cluster_conf_t *cc = NULL;
            int r = xcecli_clusterconf(g_ctx, &cc);
            if (r == 0) {
                xce_free_cluster_conf(cc);
            } else if (g_stop && r == -EINTR) {
                stop_call_rc = r;
            } else {
                fprintf(stderr, "daemon: idle clusterconf: %d (%s)\n", r, xce_strerror(r));
                g_errors++;
            }
        }
    }
    double stopped = mono();
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, NULL); /* no handler may run once contexts are released */
    double stop_latency = g_stop ? stopped - ts_s(&g_term_ts) : -1;
    printf("stop: the loop ended %.0f ms after SIGTERM; try_wakeup returned %d; the call in "
           "flight returned %d (1: none)\n",
           stop_latency * 1e3, (int)g_wake_rc, stop_call_rc);
    CHECK(g_stop);
    CHECK(stop_latency >= 0 && stop_latency < 5.0 * g_scale);

    /* Remaining children (none should be left: the test stops the daemon when idle). */
    double until = mono() + child_timeout;
    while (nkids > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        for (int i = 0; i < nkids && p > 0; i++)
            if (kids[i].pid == p) {
                reaped++;
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad_children++;
                kids[i] = kids[--nkids];
            }
        if (p <= 0) {
            if (mono() > until) {
                for (int i = 0; i < nkids; i++) {
                    fprintf(stderr, "daemon: child %d hung: killed\n", kids[i].k);
                    kill(kids[i].pid, SIGKILL);
                    waitpid(kids[i].pid, NULL, 0);
                    hung++;
                }
                nkids = 0;
            } else {
                nodes_sleep(0.05);
            }
        }
    }
    if (g_monitor) pthread_join(mon, NULL);
    close(rep[1]);
    g_rep_w = -1;
    fcntl(rep[0], F_SETFL, 0);
    drain_reports(rep[0]);
    for (int i = 0; i < g_nfds; i++)
        if (g_fds[i].fd == rep[1]) g_fds[i] = g_fds[--g_nfds];
    {
        uint64_t v;
        if (read(g_done_efd, &v, sizeof v) == (ssize_t)sizeof v) done_signals += v;
    }

    /* 6. The daemon's fds: untouched, and epoll still works. */
    int touched = fds_touched("daemon");
    uint64_t one = 1;
    CHECK_EQ(write(g_done_efd, &one, sizeof one), (ssize_t)sizeof one);
    int seen = 0;
    for (int turn = 0; turn < 8 && !seen; turn++) {
        struct epoll_event evs[8];
        int ne = epoll_wait(ep, evs, 8, 2000);
        for (int i = 0; i < ne; i++) {
            uint64_t v;
            if (evs[i].data.fd == g_done_efd) seen = 1;
            else if (read(evs[i].data.fd, &v, sizeof v) < 0) { /* drain the others */
            }
        }
        if (ne <= 0) break;
    }
    CHECK(seen); /* epoll still delivers the daemon's events */
    for (int i = 0; i < N_SENTINELS; i++) {
        uint64_t v = 0;
        CHECK_EQ(read(sentinel[i], &v, sizeof v), (ssize_t)sizeof v);
        CHECK_EQ(v, 1000 + i);
    }
    printf("children: %d forked, %d reaped, %d hung, %d failed; done signals %" PRIu64
           " (want %d); monitor calls %d, errors %d; the daemon's fds touched: %d\n",
           forked, reaped, hung, bad_children, done_signals, forked, atomic_load(&g_mon_calls),
           atomic_load(&g_mon_errors), touched);
    CHECK_EQ(hung, 0);
    CHECK_EQ(bad_children, 0);
    CHECK_EQ(forked, g_rounds);
    CHECK_EQ((long long)done_signals, forked);
    CHECK_EQ(touched, 0);
    CHECK_EQ(atomic_load(&g_mon_errors), 0);
    CHECK_EQ(g_errors, 0);

    /* 7. Exactly once. */
    verify_jobs();
    xce_stats_t st;
    if (xcecli_get_stats(g_ctx, &st) == 0)
        printf("daemon context: %" PRIu64 " requests, %" PRIu64 " failovers, %" PRIu64
               " rotations\n",
               st.requests, st.failovers, st.rotations);
    xcecli_stop(g_mon_ctx);
    xcecli_stop(g_ctx);
    g_mon_ctx = g_ctx = NULL;
    for (int i = 0; i < g_nfds; i++) close(g_fds[i].fd);
    printf("S13 result: %s\n", g_failures ? "FAIL" : "ok");
    fflush(stdout);
    return g_failures ? 1 : 0;
}

/* ---------------------------------------------------------------- the test process */

static struct nodes g_nodes;
static pid_t g_daemon;

int main(int argc, char **argv) {
    struct stat sb;
    if (argc < 2 || stat(argv[1], &sb) != 0) {
        fprintf(stderr, "FAIL: no xce-controller (%s)\n", argc > 1 ? argv[1] : "none given");
        return 1;
    }
    if (argc > 2) g_rounds = atoi(argv[2]);
    if (argc > 3) g_kills = atoi(argv[3]);
    if (argc > 4) g_scale = atof(argv[4]);
    if (argc > 5) g_monitor = atoi(argv[5]);
    if (g_rounds < 1 || g_rounds * (JOBS_PER_CHILD + 1) > MAX_RECS || g_kills < 0 ||
        g_scale < 1) {
        fprintf(stderr, "usage: %s CONTROLLER [ROUNDS [KILLS [SCALE [MONITOR]]]]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    double t0 = mono();
    if (nodes_start(&g_nodes, argv[1], 3) != 0) {
        fprintf(stderr, "FAIL: could not start the nodes\n");
        nodes_stop(&g_nodes);
        return 1;
    }
    snprintf(g_masters, sizeof g_masters, "%s", g_nodes.masters_host);
    printf("nodes: %s (data %s)\n", g_masters, g_nodes.dir);
    int out[2];
    if (pipe(out) != 0) return 1;
    fflush(stdout);
    fflush(stderr);
    g_daemon = fork();
    if (g_daemon == 0) {
        close(out[0]);
        dup2(out[1], 1);
        close(out[1]);
        _exit(daemon_main());
    }
    close(out[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);

    /* The faults, paced by what the daemon says. */
    int working = 0, idle = 0, kills = 0, killed = 0, frozen = 0, status = -1;
    double next_kill = 0, restart_at = 0, term_at = 0, term_sent = 0;
    double deadline = t0 + 100 * g_scale;
    char buf[4096];
    size_t blen = 0;
    while (status < 0) {
        struct pollfd pfd = {out[0], POLLIN, 0};
        poll(&pfd, 1, 50);
        ssize_t n;
        while ((n = read(out[0], buf + blen, sizeof buf - 1 - blen)) > 0) {
            blen += (size_t)n;
            buf[blen] = 0;
            char *s = buf, *nl;
            while ((nl = strchr(s, '\n')) != NULL) {
                *nl = 0;
                printf("daemon: %s\n", s);
                if (strncmp(s, "S13 working", 11) == 0) {
                    working = 1;
                    next_kill = mono() + 1.5 * g_scale;
                }
                if (strncmp(s, "S13 idle", 8) == 0) idle = 1;
                s = nl + 1;
            }
            blen = strlen(s);
            memmove(buf, s, blen + 1);
        }
        double now = mono();
        if (working && killed && now >= restart_at) {
            CHECK_EQ(nodes_restart(&g_nodes, killed), 0);
            printf("restarted node %d\n", killed);
            killed = 0;
            next_kill = now + 2.2 * g_scale;
        } else if (working && !killed && kills < g_kills && now >= next_kill) {
            int p = nodes_primary(&g_nodes, 10 * g_scale);
            CHECK(p > 0);
            if (p > 0) {
                printf("kill -9 primary node %d (pid %d) at %.1f s\n", p, (int)g_nodes.pid[p],
                       mono() - t0);
                nodes_kill(&g_nodes, p);
                killed = p;
                kills++;
                restart_at = mono() + 0.8 * g_scale;
            }
        } else if (idle && !killed && kills >= g_kills && !frozen && !term_at) {
            /* Freeze the primary, so the daemon's next call waits on it, then SIGTERM. */
            nodes_sleep(0.5 * g_scale);
            int p = nodes_primary(&g_nodes, 10 * g_scale);
            CHECK(p > 0);
            if (p > 0) {
                printf("SIGSTOP primary node %d\n", p);
                kill(g_nodes.pid[p], SIGSTOP);
                frozen = p;
            }
            term_at = mono() + 0.3;
        }
        if (term_at && !term_sent && mono() >= term_at) {
            printf("SIGTERM to the daemon at %.1f s\n", mono() - t0);
            kill(g_daemon, SIGTERM);
            term_sent = mono();
        }
        if (frozen && term_sent && mono() >= term_sent + 1.0 * g_scale) {
            kill(g_nodes.pid[frozen], SIGCONT);
            printf("SIGCONT node %d\n", frozen);
            frozen = 0;
        }
        int st;
        if (waitpid(g_daemon, &st, WNOHANG) == g_daemon) status = st;
        if (status < 0 && mono() > deadline) {
            fprintf(stderr, "FAIL: the daemon did not finish in %.0f s: killed\n",
                    100 * g_scale);
            kill(-g_daemon, SIGKILL);
            kill(g_daemon, SIGKILL);
            waitpid(g_daemon, &st, 0);
            status = 0x7f00; /* exit 127 */
            g_failures++;
        }
    }
    /* The last lines. */
    fcntl(out[0], F_SETFL, 0);
    ssize_t n;
    while ((n = read(out[0], buf + blen, sizeof buf - 1 - blen)) > 0) {
        blen += (size_t)n;
        buf[blen] = 0;
        char *s = buf, *nl;
        while ((nl = strchr(s, '\n')) != NULL) {
            *nl = 0;
            printf("daemon: %s\n", s);
            s = nl + 1;
        }
        blen = strlen(s);
        memmove(buf, s, blen + 1);
    }
    if (blen) printf("daemon: %s\n", buf);
    close(out[0]);
    if (frozen) kill(g_nodes.pid[frozen], SIGCONT);
    nodes_stop(&g_nodes);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(kills, g_kills);
    printf("S13: %s in %.1f s (daemon %s %d)\n", g_failures ? "FAIL" : "ok", mono() - t0,
           WIFEXITED(status) ? "exit" : "signal",
           WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return g_failures ? 1 : 0;
}
