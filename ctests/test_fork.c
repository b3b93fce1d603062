/* F26 against a real 3-node controller cluster: a context makes a call, the process forks,
 * the child submits job A and kills it through the inherited context (and submits job C on a
 * context of its own), then the parent submits job B and kills it. Every write is applied
 * exactly once: A, B and C exist with their own ids and names, A and B are killed. Before
 * F26 the parent's submit returned 0 with the child's job id (the controller's dedup table
 * answered the parent's request with the child's reply: same client id, same request id) and
 * B never existed. Job ids drawn in the child and the parent after the fork never repeat.
 * Needs the reference controller: test_fork PATH-TO-xce-controller (77: skipped). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cluster.h"
#include "util.h"

#define IDS 2000

struct child_report {
    uint64_t a, c;
    int submit_a, kill_a, submit_c;
    uint64_t ids[IDS];
};

static int write_all(int fd, const void *buf, size_t len) {
    const char *p = (const char *)buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len) {
    char *p = (char *)buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The job's name and state, or -1 when it does not exist. */
static int job_state(xcecli_ctx_t ctx, uint64_t id, char *name, size_t len) {
    xce_job_t *job = NULL;
    int rc = xcecli_jobinfo(ctx, id, &job);
    if (rc != 0) return -1;
    snprintf(name, len, "%s", job->name ? job->name : "");
    int st = job->state;
    xce_free_job(job);
    return st;
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
    xcecli_ctx_t ctx = NULL;
    CHECK_EQ(xcecli_start(&conf, &ctx), 0);
    if (!ctx) {
        cluster_stop(&c);
        return 1;
    }
    /* A write before the fork: the request counter is past 0 in both processes. */
    xce_job_spec_t before = {0, "fork-before", "ctest", NULL, "true", 1, 1};
    uint64_t id0 = 0;
    CHECK_EQ(xcecli_jobsubmit(ctx, &before, &id0), 0);

    int p[2];
    CHECK_EQ(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        alarm(60); /* a hung child is a failure, not a hung test */
        struct child_report rep;
        memset(&rep, 0, sizeof rep);
        xce_job_spec_t a = {0, "fork-child-A", "ctest", NULL, "true", 1, 1};
        rep.submit_a = xcecli_jobsubmit(ctx, &a, &rep.a);
        rep.kill_a = xcecli_jobctrl(ctx, rep.a, XCE_JOBCTRL_KILL);
        xcecli_ctx_t own = NULL;
        rep.submit_c = xcecli_start(&conf, &own);
        if (rep.submit_c == 0) {
            xce_job_spec_t cj = {0, "fork-child-C", "ctest", NULL, "true", 1, 1};
            rep.submit_c = xcecli_jobsubmit(own, &cj, &rep.c);
            xcecli_stop(own);
        }
        for (int i = 0; i < IDS; i++) xce_new_jobid(&rep.ids[i]);
        int ok = write_all(p[1], &rep, sizeof rep) == 0;
        _exit(ok ? 0 : 1);
    }
    CHECK(pid > 0);
    close(p[1]);
    struct child_report rep;
    CHECK_EQ(read_all(p[0], &rep, sizeof rep), 0);
    close(p[0]);
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(rep.submit_a, 0);
    CHECK_EQ(rep.kill_a, 0);
    CHECK_EQ(rep.submit_c, 0);

    /* The parent's writes after the child's. */
    xce_job_spec_t b = {0, "fork-parent-B", "ctest", NULL, "true", 1, 1};
    uint64_t idb = 0;
    CHECK_EQ(xcecli_jobsubmit(ctx, &b, &idb), 0);
    CHECK_EQ(xcecli_jobctrl(ctx, idb, XCE_JOBCTRL_KILL), 0);
    printf("before %llu, child A %llu, child C %llu, parent B %llu\n", (unsigned long long)id0,
           (unsigned long long)rep.a, (unsigned long long)rep.c, (unsigned long long)idb);
    CHECK(idb != rep.a && idb != rep.c && rep.a != rep.c && idb != id0);

    char name[128];
    int sa = job_state(ctx, rep.a, name, sizeof name);
    CHECK(sa >= 0 && strcmp(name, "fork-child-A") == 0);
    CHECK(sa != XCE_JOB_PEND && sa != XCE_JOB_RUN); /* killed */
    int sb_ = job_state(ctx, idb, name, sizeof name);
    printf("job B: state %d, name %s\n", sb_, sb_ >= 0 ? name : "(none)");
    CHECK(sb_ >= 0 && strcmp(name, "fork-parent-B") == 0);
    CHECK(sb_ != XCE_JOB_PEND && sb_ != XCE_JOB_RUN); /* killed by the parent's own jobctrl */
    int sc = job_state(ctx, rep.c, name, sizeof name);
    CHECK(sc >= 0 && strcmp(name, "fork-child-C") == 0);

    /* xce_new_jobid: the parent's draws after the fork never repeat the child's. */
    int repeats = 0;
    for (int i = 0; i < IDS; i++) {
        uint64_t id;
        xce_new_jobid(&id);
        for (int k = 0; k < IDS; k++)
            if (rep.ids[k] == id) repeats++;
    }
    CHECK_EQ(repeats, 0);

    xcecli_stop(ctx);
    cluster_stop(&c);
    printf("fork: %s\n", g_failures ? "FAIL" : "ok");
    return g_failures ? 1 : 0;
}
