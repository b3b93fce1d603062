/*
 * xce-worker: the worker daemon of an xce cluster, written against libxce's C API.
 *
 *   xce-worker --masters H:P[,H:P...] --host NAME --state-dir DIR
 *              [--ncpus N] [--mem-mb M] [--attr KEY=VALUE]... [--poll-ms 200]
 *              [--heartbeat-ms 1000] [--confirm-ms 500]
 *   (the masters may also come from $XCE_MASTERS)
 *
 * What it does, in one loop:
 *   - joins the cluster as a WORKER with its host attributes, and re-joins from inside the
 *     reconnect handler after every failover (sessions do not survive one, F10);
 *   - sends a heartbeat every --heartbeat-ms and its load as resource values;
 *   - lists the jobs the controller shows RUN on this host and starts each one it has not
 *     started yet as a real process: `/bin/sh -c COMMAND` with the worker's environment plus
 *     XCE_JOBID, XCE_JOB_NAME, XCE_JOB_USER, XCE_JOB_QUEUE and XCE_EXEC_HOST; its output goes
 *     to DIR/output/JOBID.out;
 *   - reports notify_jobstart, and as soon as the job ends notify_jobfinish (exit code 0) or
 *     notify_jobfail (any other code; 128+N for a signal N) followed by update_jusage (CPU
 *     time, max RSS);
 *   - follows job control: a job the controller shows SUSP is stopped (SIGSTOP) and resumed
 *     (SIGCONT) when RUN again; a job that is no longer RUN/SUSP on this host (killed,
 *     requeued) is killed.
 *
 * Never twice, across failovers and its own restarts. A notify that returned 0 is in the
 * context's outbox (F12): the library re-sends it after every reconnect until a primary
 * acknowledges it, exactly once. The worker only sends it again when the outbox is empty and
 * the controller still lists the job RUN/SUSP after --confirm-ms (a worker restarted before
 * its report left), and it keeps its promises in DIR, fsynced, so that a restarted worker
 * neither runs a job again nor forgets to report it:
 *   job-ID.claim  written (with the runner's pid) once the runner holds its lock, before the
 *                 runner may exec;
 *   job-ID.lock   flock-ed by the runner for its whole life (free = the runner is gone);
 *   job-ID.out    written by the runner at the end: "exit CODE CPU_MS MEM_KB", or "norun"
 *                 when the worker died before it gave the go.
 * Each job has a runner process (a fork of the worker, in its own session) that waits for the
 * go byte on a pipe, runs the command and records its outcome, so a job keeps running and its
 * outcome is kept when the worker is killed; the next worker adopts it from its claim. The
 * files of a job are removed once the controller shows it finished.
 *
 * SIGTERM/SIGINT stop the worker after the current round; it flushes the outbox (at most
 * 5 s: xcecli_flush) before stopping its context; running jobs keep running and are adopted by
 * the next worker started on the same state directory. At exit it prints a summary line
 * (reconnects, re-joins, jobs started and reported, notifications left unacknowledged).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xce/xce.h>

/* The filtered, flat job list (xcecli_joblist is the seeds' NULL-terminated form). */
#define XCE_JOBLIST_FILTERED xcecli_joblist_filter

#define MAX_ATTRS 32

enum phase {
    RUNNING,  /* the runner is alive (or not yet known to be gone) */
    FINISHED, /* outcome known, being reported until the controller shows it */
    DROPPED,  /* the controller no longer wants it (killed/requeued): wait for the runner, then forget */
};

struct job {
    uint64_t id;
    pid_t pid;       /* runner pid = process group of the job */
    int own;         /* a child of this worker process (else adopted from a claim) */
    enum phase phase;
    int stopped;     /* SIGSTOPped for a SUSP */
    int exit_code;
    uint64_t cpu_ms, mem_kb;
    int64_t last_notify_ms; /* 0: not sent yet */
    unsigned notifies;
    int seen;        /* listed RUN/SUSP on this host in the current round */
};

struct worker {
    const char *host;
    const char *dir;
    int dirfd;
    xce_join_t join;
    xce_kv_t attrs[MAX_ATTRS];
    char *attr_buf[MAX_ATTRS];
    int poll_ms, heartbeat_ms, confirm_ms;
    /* Set by the reconnect handler: the main loop re-sends resource values at once. */
    int resync;
    xcecli_ctx_t ctx;
    struct job *jobs;
    size_t njobs, cap;
    /* counters for the summary */
    unsigned long reconnects, rejoined, rejoin_failed, started, reported, adopted;
};

static volatile sig_atomic_t stopping;
static const char *prog_host = "?";

/* ---------------------------------------------------------------- small utilities */

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One log line on stderr: UTC time with ms, program, host, message. */
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
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ xce-worker[%s] %s\n", tm.tm_year + 1900,
            tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
            prog_host, msg);
}

/* Writes `text` to DIR/name atomically and durably: temp file, fsync, rename, fsync(dir). */
static int write_atomic(int dirfd, const char *name, const char *text) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        off += (size_t)n;
    }
    if (fsync(fd) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    close(fd);
    if (renameat(dirfd, tmp, dirfd, name) < 0)
        return -errno;
    if (fsync(dirfd) < 0)
        return -errno;
    return 0;
}

/* Reads DIR/name into buf (NUL-terminated). Returns the length or -errno. */
static int read_small(int dirfd, const char *name, char *buf, size_t len) {
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, len - 1);
    int e = errno;
    close(fd);
    if (n < 0)
        return -e;
    buf[n] = 0;
    return (int)n;
}

static void job_file(char *out, size_t len, uint64_t id, const char *suffix) {
    snprintf(out, len, "job-%" PRIu64 ".%s", id, suffix);
}

/* ---------------------------------------------------------------- the job table */

static struct job *find_job(struct worker *w, uint64_t id) {
    for (size_t i = 0; i < w->njobs; i++)
        if (w->jobs[i].id == id)
            return &w->jobs[i];
    return NULL;
}

static struct job *add_job(struct worker *w, uint64_t id) {
    if (w->njobs == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        struct job *j = realloc(w->jobs, cap * sizeof *j);
        if (!j)
            return NULL;
        w->jobs = j;
        w->cap = cap;
    }
    struct job *j = &w->jobs[w->njobs++];
    memset(j, 0, sizeof *j);
    j->id = id;
    return j;
}

/* Forgets a job and removes its files (its runner is gone). */
static void forget_job(struct worker *w, struct job *j) {
    char name[64];
    /* The claim first: a crash in between leaves no claim, so nothing is adopted again. */
    const char *suffixes[] = {"claim", "out", "lock"};
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        job_file(name, sizeof name, j->id, suffixes[i]);
        unlinkat(w->dirfd, name, 0);
    }
    fsync(w->dirfd);
    *j = w->jobs[--w->njobs];
}

/* ---------------------------------------------------------------- the runner (a child) */

/* Runs in the forked child: takes the job's lock, says ready, waits for the go byte, runs the
 * job, records the outcome. `go_fd` is its end of a socketpair with the worker. */
static void runner(struct worker *w, const xce_job_t *job, int go_fd, const sigset_t *orig_mask) {
    setsid(); /* its own session and process group: the worker signals the job as -pid */
    /* Keep only stderr and the go pipe: the library's socket must not stay open here. */
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
        if (devnull > 2)
            close(devnull);
    }
    for (int fd = 3; fd < 1024; fd++)
        if (fd != go_fd && fd != w->dirfd)
            close(fd);

    char name[64], text[128];
    job_file(name, sizeof name, job->jobid, "lock");
    int lock = openat(w->dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    /* Blocks while a runner of a previous worker still holds it (it then writes "norun"). */
    while (lock >= 0 && flock(lock, LOCK_EX) < 0 && errno == EINTR) {
    }
    /* Ready: the lock is held, so from the claim on "lock free" means "runner gone". */
    ssize_t n;
    do
        n = send(go_fd, "r", 1, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    char go = 0;
    do
        n = read(go_fd, &go, 1);
    while (n < 0 && errno == EINTR);
    close(go_fd);
    job_file(name, sizeof name, job->jobid, "out");
    if (n != 1 || go != 'g') {
        /* The worker died before it recorded the claim: this job did not run. */
        write_atomic(w->dirfd, name, "norun\n");
        _exit(0);
    }
    unlinkat(w->dirfd, name, 0);

    char outname[PATH_MAX];
    snprintf(outname, sizeof outname, "output/%" PRIu64 ".out", job->jobid);
    pid_t pid = fork();
    if (pid == 0) {
        int out = openat(w->dirfd, outname, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (out >= 0) {
            dup2(out, 1);
            dup2(out, 2);
        }
        char id[32];
        snprintf(id, sizeof id, "%" PRIu64, job->jobid);
        setenv("XCE_JOBID", id, 1);
        setenv("XCE_JOB_NAME", job->name ? job->name : "", 1);
        setenv("XCE_JOB_USER", job->user ? job->user : "", 1);
        setenv("XCE_JOB_QUEUE", job->queue ? job->queue : "", 1);
        setenv("XCE_EXEC_HOST", w->host, 1);
        sigprocmask(SIG_SETMASK, orig_mask, NULL); /* the worker blocks signals; the job must not */
        execl("/bin/sh", "sh", "-c", job->command, (char *)NULL);
        _exit(127);
    }
    int code;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (pid < 0) {
        code = 127;
    } else {
        int st;
        while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR) {
        }
        code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    uint64_t cpu_ms = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
                      (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
    snprintf(text, sizeof text, "exit %d %" PRIu64 " %ld\n", code, cpu_ms, ru.ru_maxrss);
    write_atomic(w->dirfd, name, text);
    _exit(0);
}

/* Starts job j: fork the runner, wait until it holds the job's lock, record the claim
 * durably, then let it run. */
static int start_job(struct worker *w, const xce_job_t *job, const sigset_t *orig_mask) {
    int go[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) < 0)
        return -errno;
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(go[0]);
        close(go[1]);
        return -e;
    }
    if (pid == 0) {
        close(go[1]);
        runner(w, job, go[0], orig_mask);
        _exit(0);
    }
    close(go[0]);
    char name[64], text[32], ready = 0;
    ssize_t n;
    do
        n = read(go[1], &ready, 1);
    while (n < 0 && errno == EINTR);
    job_file(name, sizeof name, job->jobid, "claim");
    snprintf(text, sizeof text, "%d\n", (int)pid);
    int rc = n == 1 && ready == 'r' ? write_atomic(w->dirfd, name, text) : -EPIPE;
    struct job *j = rc == 0 ? add_job(w, job->jobid) : NULL;
    if (rc < 0 || !j) {
        /* No durable claim: do not run (the runner sees EOF and records "norun"). */
        close(go[1]);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        unlinkat(w->dirfd, name, 0);
        job_file(name, sizeof name, job->jobid, "out");
        unlinkat(w->dirfd, name, 0);
        logf_("job %" PRIu64 " not started: claim: %s", job->jobid, strerror(rc < 0 ? -rc : ENOMEM));
        return rc < 0 ? rc : -ENOMEM;
    }
    j->pid = pid;
    j->own = 1;
    j->phase = RUNNING;
    j->seen = 1;
    do
        n = send(go[1], "g", 1, MSG_NOSIGNAL); /* no SIGPIPE if the runner is gone */
    while (n < 0 && errno == EINTR);
    close(go[1]);
    w->started++;
    logf_("job %" PRIu64 " started pid %d: %s", job->jobid, (int)pid, job->command);
    int src = xcecli_notify_jobstart(w->ctx, job->jobid);
    if (src < 0)
        logf_("job %" PRIu64 " notify_jobstart not sent: %s", job->jobid, xce_strerror(src));
    return 0;
}

/* Reads the runner's outcome for j (its runner has exited). */
static void read_outcome(struct worker *w, struct job *j) {
    char name[64], buf[128];
    job_file(name, sizeof name, j->id, "out");
    int n = read_small(w->dirfd, name, buf, sizeof buf);
    int code;
    uint64_t cpu, mem;
    if (n > 0 && sscanf(buf, "exit %d %" SCNu64 " %" SCNu64, &code, &cpu, &mem) == 3) {
        j->exit_code = code;
        j->cpu_ms = cpu;
        j->mem_kb = mem;
        if (j->phase == RUNNING) {
            j->phase = FINISHED;
            logf_("job %" PRIu64 " exited %d (cpu %" PRIu64 " ms, maxrss %" PRIu64 " KB)", j->id,
                  code, cpu, mem);
        }
    } else if (n > 0 && strncmp(buf, "norun", 5) == 0) {
        /* It never ran: forget the claim; the next listing starts it if it is still ours. */
        logf_("job %" PRIu64 " was never run by the previous worker", j->id);
        forget_job(w, j);
    } else if (j->phase == RUNNING) {
        /* The runner died without an outcome (killed from outside): report, never re-run. */
        j->exit_code = 255;
        j->phase = FINISHED;
        logf_("job %" PRIu64 " lost its runner without an outcome: reporting exit 255", j->id);
    }
}

/* True while the runner of an adopted job holds its lock. */
static int runner_alive(struct worker *w, struct job *j) {
    char name[64];
    job_file(name, sizeof name, j->id, "lock");
    int fd = openat(w->dirfd, name, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int alive = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    close(fd); /* releases the lock if we took it */
    return alive;
}

/* Claims left by a previous worker on this state directory: adopt them. */
static void load_claims(struct worker *w) {
    DIR *d = opendir(w->dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t id;
        char rest[16];
        if (sscanf(e->d_name, "job-%" SCNu64 ".%15s", &id, rest) != 2 || strcmp(rest, "claim") != 0)
            continue;
        char buf[32];
        if (read_small(w->dirfd, e->d_name, buf, sizeof buf) < 0)
            continue;
        struct job *j = add_job(w, id);
        if (!j)
            break;
        j->pid = (pid_t)atoi(buf);
        j->own = 0;
        j->phase = RUNNING;
        w->adopted++;
        logf_("job %" PRIu64 " adopted from the previous worker (runner pid %d)", id, (int)j->pid);
    }
    closedir(d);
}

/* ---------------------------------------------------------------- talking to the cluster */

/* F10: after a failover the session is gone; re-join before the interrupted op is re-sent,
 * and re-sync: a heartbeat at once (it joins the outbox, which the library sends right after
 * this handler, with the notifications not yet acknowledged), resource values next round. */
static int on_reconnect(xcecli_ctx_t ctx, void *arg) {
    struct worker *w = arg;
    w->reconnects++;
    uint64_t sid = 0;
    int rc = xcecli_join(ctx, &w->join, &sid);
    if (rc < 0) {
        w->rejoin_failed++;
        logf_("reconnect: re-join failed: %s", xce_strerror(rc));
        return rc;
    }
    w->rejoined++;
    rc = xcecli_heartbeat(ctx, w->host);
    if (rc < 0)
        logf_("reconnect: heartbeat not accepted: %s", xce_strerror(rc));
    w->resync = 1;
    logf_("reconnect: re-joined as WORKER %s (session %" PRIu64 "), %d notification(s) to resend",
          w->host, sid, xcecli_outbox_depth(ctx));
    return 0;
}

/* Reports a finished job: finish/fail, then its usage. The notify goes first, as soon as the
 * outcome is known, into the context's outbox (F12): delivered exactly once, across failovers.
 * It is sent again only when the outbox is empty and the controller still shows the job
 * running after --confirm-ms (a report a previous worker process never sent). (The controller
 * records usage on a finished job too.) */
static void report(struct worker *w, struct job *j, int64_t now) {
    if (j->last_notify_ms != 0 && xcecli_outbox_depth(w->ctx) > 0)
        return; /* the earlier notify is still on its way */
    int rc = j->exit_code == 0 ? xcecli_notify_jobfinish(w->ctx, j->id, 0)
                               : xcecli_notify_jobfail(w->ctx, j->id, j->exit_code);
    if (rc == -E_XCE_OUTBOX_FULL) {
        logf_("job %" PRIu64 " notify: outbox full, next round", j->id);
        return;
    }
    j->last_notify_ms = now;
    j->notifies++;
    if (rc < 0)
        logf_("job %" PRIu64 " notify not accepted: %s", j->id, xce_strerror(rc));
    else if (j->notifies > 1)
        logf_("job %" PRIu64 " notify re-sent (%u): the controller still shows it running", j->id,
              j->notifies);
    xce_usage_t u = {j->cpu_ms, j->mem_kb};
    rc = xcecli_update_jusage(w->ctx, j->id, &u);
    if (rc < 0 && rc != -ENOENT && rc != -EINVAL)
        logf_("job %" PRIu64 " update_jusage: %s", j->id, xce_strerror(rc));
}

/* The runner of j is gone: read its outcome and, when the job finished, report it at once. */
static void runner_gone(struct worker *w, struct job *j) {
    uint64_t id = j->id;
    size_t before = w->njobs;
    read_outcome(w, j);
    if (w->njobs == before && j->phase == FINISHED && j->last_notify_ms == 0 && j->id == id)
        report(w, j, mono_ms());
}

static void reap(struct worker *w) {
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (size_t i = 0; i < w->njobs; i++) {
            struct job *j = &w->jobs[i];
            if (j->own && j->pid == pid) {
                j->own = 0;
                j->pid = 0;
                if (j->phase == DROPPED)
                    forget_job(w, j);
                else
                    runner_gone(w, j);
                break;
            }
        }
    }
}

static const char *state_name(int s) {
    switch (s) {
    case XCE_JOB_PEND: return "PEND";
    case XCE_JOB_RUN: return "RUN";
    case XCE_JOB_SUSP: return "SUSP";
    case XCE_JOB_DONE: return "DONE";
    case XCE_JOB_EXIT: return "EXIT";
    }
    return "?";
}

/* One round: start what is ours and new, follow control, report and confirm outcomes. */
static int round_(struct worker *w, const sigset_t *orig_mask) {
    int64_t now = mono_ms();
    /* Adopted runners: an outcome appears when their lock is free. */
    for (size_t i = 0; i < w->njobs; i++) {
        struct job *j = &w->jobs[i];
        if (!j->own && j->pid != 0 && !runner_alive(w, j)) {
            j->pid = 0;
            if (j->phase == DROPPED) {
                forget_job(w, j);
                i--;
            } else {
                size_t before = w->njobs;
                runner_gone(w, j);
                if (w->njobs < before)
                    i--;
            }
        }
    }

    xce_job_filter_t f = {NULL, NULL, (1u << XCE_JOB_RUN) | (1u << XCE_JOB_SUSP), 0};
    xce_job_t *jobs = NULL;
    int n = XCE_JOBLIST_FILTERED(w->ctx, &f, &jobs);
    if (n < 0)
        return n;
    for (size_t i = 0; i < w->njobs; i++)
        w->jobs[i].seen = 0;
    for (int i = 0; i < n; i++) {
        const xce_job_t *job = &jobs[i];
        if (!job->exec_host || strcmp(job->exec_host, w->host) != 0)
            continue;
        struct job *j = find_job(w, job->jobid);
        if (!j) {
            if (job->state == XCE_JOB_RUN)
                start_job(w, job, orig_mask);
            continue;
        }
        j->seen = 1;
        if (j->phase == RUNNING && j->pid > 0) {
            if (job->state == XCE_JOB_SUSP && !j->stopped && kill(-j->pid, SIGSTOP) == 0) {
                j->stopped = 1;
                logf_("job %" PRIu64 " suspended", j->id);
            } else if (job->state == XCE_JOB_RUN && j->stopped && kill(-j->pid, SIGCONT) == 0) {
                j->stopped = 0;
                logf_("job %" PRIu64 " resumed", j->id);
            }
        }
        if (j->phase == FINISHED && (j->last_notify_ms == 0 || now - j->last_notify_ms >= w->confirm_ms))
            report(w, j, now);
    }
    xce_free_jobs(jobs, (size_t)n);

    for (size_t i = 0; i < w->njobs; i++) {
        struct job *j = &w->jobs[i];
        if (j->seen)
            continue;
        /* No longer RUN/SUSP on this host. */
        if (j->phase == FINISHED) {
            xce_job_t *info = NULL;
            int rc = xcecli_jobinfo(w->ctx, j->id, &info);
            if (rc < 0 && rc != -ENOENT)
                continue; /* ask again next round */
            if (j->last_notify_ms != 0)
                w->reported++;
            logf_("job %" PRIu64 " confirmed %s by the controller after %u notify", j->id,
                  info ? state_name(info->state) : "gone", j->notifies);
            xce_free_job(info);
            forget_job(w, j);
            i--;
        } else if (j->phase == RUNNING && j->pid > 0) {
            /* Killed or requeued through the controller: stop the job. */
            if (j->own || runner_alive(w, j)) {
                kill(-j->pid, SIGCONT);
                kill(-j->pid, SIGKILL);
            }
            j->phase = DROPPED;
            logf_("job %" PRIu64 " is no longer ours on the controller: killed", j->id);
        } else if (j->phase == RUNNING) {
            forget_job(w, j);
            i--;
        }
    }
    return 0;
}

/* Resource values: the load and free memory, as update_resvals. */
static void send_resvals(struct worker *w) {
    struct sysinfo si;
    if (sysinfo(&si) < 0)
        return;
    char r1m[32], mem[32];
    snprintf(r1m, sizeof r1m, "%.2f", si.loads[0] / 65536.0);
    snprintf(mem, sizeof mem, "%llu", (unsigned long long)si.freeram * si.mem_unit / (1024 * 1024));
    xce_resval_t rv[] = {{"r1m", r1m}, {"mem", mem}};
    int rc = xcecli_update_resvals(w->ctx, w->host, rv, 2);
    if (rc < 0)
        logf_("update_resvals: %s", xce_strerror(rc));
}

/* ---------------------------------------------------------------- main */

static void usage(void) {
    fprintf(stderr,
            "usage: xce-worker --masters H:P[,H:P...] --host NAME --state-dir DIR\n"
            "                  [--ncpus N] [--mem-mb M] [--attr KEY=VALUE]... [--poll-ms 200]\n"
            "                  [--heartbeat-ms 1000] [--confirm-ms 500]\n");
    exit(2);
}

int main(int argc, char **argv) {
    struct worker w;
    memset(&w, 0, sizeof w);
    const char *masters = getenv("XCE_MASTERS");
    w.poll_ms = 200;
    w.heartbeat_ms = 1000;
    w.confirm_ms = 500;
    long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    struct sysinfo si;
    uint64_t mem_mb = sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit / (1024 * 1024) : 0;
    size_t nattrs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(a, "--masters")) masters = v;
        else if (!strcmp(a, "--host")) w.host = v;
        else if (!strcmp(a, "--state-dir")) w.dir = v;
        else if (!strcmp(a, "--ncpus")) ncpus = atol(v);
        else if (!strcmp(a, "--mem-mb")) mem_mb = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--poll-ms")) w.poll_ms = atoi(v);
        else if (!strcmp(a, "--heartbeat-ms")) w.heartbeat_ms = atoi(v);
        else if (!strcmp(a, "--confirm-ms")) w.confirm_ms = atoi(v);
        else if (!strcmp(a, "--attr")) {
            char *kv = strdup(v), *eq = kv ? strchr(kv, '=') : NULL;
            if (!eq || nattrs == MAX_ATTRS - 3)
                usage();
            *eq = 0;
            w.attr_buf[nattrs] = kv;
            w.attrs[nattrs++] = (xce_kv_t){kv, eq + 1};
        } else
            usage();
        i++;
    }
    if (!masters || !w.host || !w.dir || w.poll_ms <= 0 || w.heartbeat_ms <= 0 || ncpus <= 0)
        usage();
    prog_host = w.host;

    /* Host attributes every worker reports, after the ones given. */
    struct utsname un;
    if (uname(&un) == 0) {
        w.attrs[nattrs++] = (xce_kv_t){"arch", un.machine};
        w.attrs[nattrs++] = (xce_kv_t){"os", un.sysname};
        w.attrs[nattrs++] = (xce_kv_t){"kernel", un.release};
    }
    w.join = (xce_join_t){XCE_ROLE_WORKER, w.host, (uint32_t)ncpus, mem_mb, w.attrs, nattrs};

    /* The state directory, locked against a second worker. */
    mkdir(w.dir, 0755);
    w.dirfd = open(w.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w.dirfd < 0) {
        logf_("state dir %s: %s", w.dir, strerror(errno));
        return 1;
    }
    mkdirat(w.dirfd, "output", 0755);
    int lockfd = openat(w.dirfd, "worker.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
        logf_("state dir %s is in use by another worker", w.dir);
        return 1;
    }

    /* Signals are taken synchronously between rounds (sigtimedwait): SIGCHLD ends a wait early. */
    sigset_t mask, orig;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, &orig);

    load_claims(&w);

    xce_client_config_t conf;
    xce_client_config_init(&conf);
    if (xce_client_config_parse_masters(&conf, masters) < 0) {
        logf_("bad --masters %s", masters);
        return 2;
    }
    snprintf(conf.client_name, sizeof conf.client_name, "xce-worker %s", w.host);
    for (;;) {
        int rc = xcecli_start(&conf, &w.ctx);
        if (rc == 0)
            break;
        logf_("start: %s (retrying)", xce_strerror(rc));
        struct timespec t = {1, 0};
        siginfo_t si2;
        int sig = sigtimedwait(&mask, &si2, &t);
        if (sig == SIGTERM || sig == SIGINT)
            return 0;
    }
    xcecli_set_reconnect_handler(w.ctx, on_reconnect, &w);
    for (;;) {
        uint64_t sid = 0;
        int rc = xcecli_join(w.ctx, &w.join, &sid);
        if (rc == 0) {
            logf_("joined as WORKER %s (session %" PRIu64 ", %ld cpus)", w.host, sid, ncpus);
            break;
        }
        logf_("join: %s (retrying)", xce_strerror(rc));
        struct timespec t = {1, 0};
        siginfo_t si2;
        int sig = sigtimedwait(&mask, &si2, &t);
        if (sig == SIGTERM || sig == SIGINT) {
            xcecli_stop(w.ctx);
            return 0;
        }
    }

    int64_t next_hb = 0, next_res = 0, last_err_log = 0;
    while (!stopping) {
        int64_t now = mono_ms();
        if (now >= next_hb) {
            int rc = xcecli_heartbeat(w.ctx, w.host);
            if (rc < 0 && now - last_err_log > 1000)
                logf_("heartbeat not accepted: %s", xce_strerror(rc));
            next_hb = now + w.heartbeat_ms;
        }
        if (now >= next_res || w.resync) {
            w.resync = 0;
            send_resvals(&w);
            next_res = now + 10 * (int64_t)w.heartbeat_ms;
        }
        reap(&w);
        int rc = round_(&w, &orig);
        if (rc < 0 && mono_ms() - last_err_log > 1000) {
            logf_("joblist: %s", xce_strerror(rc));
            last_err_log = mono_ms();
        }
        reap(&w);
        /* Wait for the next round, a child's exit, or a stop signal. */
        struct timespec t = {w.poll_ms / 1000, (long)(w.poll_ms % 1000) * 1000000L};
        siginfo_t info;
        int sig = sigtimedwait(&mask, &info, &t);
        if (sig == SIGTERM || sig == SIGINT)
            stopping = 1;
    }

    /* F12: what the outbox still holds goes out before the context stops (bounded). */
    int frc = xcecli_flush(w.ctx, 5000);
    if (frc < 0)
        logf_("flush: %s; %d notification(s) unacknowledged", xce_strerror(frc),
              xcecli_outbox_depth(w.ctx));
    xce_stats_t st;
    memset(&st, 0, sizeof st);
    xcecli_get_stats(w.ctx, &st);
    size_t running = 0;
    for (size_t i = 0; i < w.njobs; i++)
        running += w.jobs[i].phase == RUNNING;
    logf_("summary reconnects=%lu rejoined=%lu rejoin_failed=%lu failovers=%" PRIu64
          " started=%lu adopted=%lu reported=%lu left_running=%zu unacknowledged=%d",
          w.reconnects, w.rejoined, w.rejoin_failed, st.failovers, w.started, w.adopted,
          w.reported, running, xcecli_outbox_depth(w.ctx));
    xcecli_stop(w.ctx);
    free(w.jobs);
    for (size_t i = 0; i < MAX_ATTRS; i++)
        free(w.attr_buf[i]);
    close(lockfd);
    close(w.dirfd);
    return 0;
}
