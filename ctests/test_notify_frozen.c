/* F12 (amended): a notify accepted is a notify delivered, exactly once, through a frozen
 * primary and the election that follows.
 *
 *   test_notify_frozen CONTROLLER [JOBS]
 *
 * 3 real nodes (nodes.h). A scheduler context submits JOBS jobs (default 12) and dispatches
 * them to a worker host, so they are RUN; the worker context (joined as WORKER, re-joining from
 * its reconnect handler as a worker daemon does, F10) reports notify_jobstart for each. Then
 * the primary is frozen (SIGSTOP) and the worker reports notify_jobfinish:
 *  - a third of the jobs at once, into the socket of the frozen primary;
 *  - a third while the others elect a new primary (one every 100 ms);
 *  - then the frozen node is thawed (SIGCONT: it comes back deposed) and the last third is
 *    reported.
 * The worker then goes on as a daemon does (a heartbeat and update_resvals every 200 ms) for
 * at most 20 s. Checks:
 *  - every notify_jobfinish that returned 0 took effect: its job is DONE with the exit code sent
 *    (a notify that returned an error is counted and re-sent once the cluster has a primary, as
 *    a daemon would);
 *  - none took effect twice: every job is then requeued and dispatched again (RUN), the worker
 *    makes calls for 2 s more, and no job leaves RUN (a late re-send of an already applied
 *    notify would finish it).
 * A test that cannot run fails, it never skips. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nodes.h"
#include "util.h"

#define MAXJOBS 64
#define HOST "notify-frozen-host"

static struct nodes g_nodes;

struct session {
    int role;
    const char *host;
    int joins;
};

static int rejoin(xcecli_ctx_t ctx, void *arg) {
    struct session *s = (struct session *)arg;
    xce_join_t j = {s->role, s->host, 64, 65536, NULL, 0};
    int rc = xcecli_join(ctx, &j, NULL);
    if (rc == 0) s->joins++;
    return rc;
}

static xcecli_ctx_t start_joined(struct session *s) {
    xce_client_config_t conf;
    xce_client_config_init(&conf);
    xce_client_config_parse_masters(&conf, g_nodes.masters_host);
    xcecli_ctx_t ctx = NULL;
    if (xcecli_start(&conf, &ctx) != 0) return NULL;
    xcecli_set_reconnect_handler(ctx, rejoin, s);
    if (rejoin(ctx, s) != 0) {
        xcecli_stop(ctx);
        return NULL;
    }
    return ctx;
}

static int job_state(xcecli_ctx_t ctx, uint64_t id, int *exit_code) {
    xce_job_t *j = NULL;
    int rc = xcecli_jobinfo(ctx, id, &j);
    if (rc != 0) return rc;
    int st = j->state;
    if (exit_code) *exit_code = j->exit_code;
    xce_free_job(j);
    return st;
}

/* What a worker daemon does between reports: a heartbeat and its load. */
static void worker_turn(xcecli_ctx_t w) {
    xce_resval_t rv = {"load", "0.1"};
    int rc = xcecli_heartbeat(w, HOST);
    if (rc != 0) fprintf(stderr, "heartbeat: %d (%s)\n", rc, xce_strerror(rc));
    rc = xcecli_update_resvals(w, HOST, &rv, 1);
    if (rc != 0) fprintf(stderr, "update_resvals: %d (%s)\n", rc, xce_strerror(rc));
}

int main(int argc, char **argv) {
    struct stat sb;
    if (argc < 2 || stat(argv[1], &sb) != 0) {
        fprintf(stderr, "FAIL: no xce-controller (%s)\n", argc > 1 ? argv[1] : "none given");
        return 1;
    }
    int njobs = argc > 2 ? atoi(argv[2]) : 12;
    if (njobs < 3 || njobs > MAXJOBS) {
        fprintf(stderr, "usage: %s CONTROLLER [JOBS (3..%d)]\n", argv[0], MAXJOBS);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    double t0 = nodes_now();
    if (nodes_start(&g_nodes, argv[1], 3) != 0 || nodes_primary(&g_nodes, 30) == 0) {
        fprintf(stderr, "FAIL: the nodes did not come up\n");
        nodes_stop(&g_nodes);
        return 1;
    }
    struct session sched = {XCE_ROLE_SCHEDULER, "notify-frozen-sched", 0};
    struct session work = {XCE_ROLE_WORKER, HOST, 0};
    xcecli_ctx_t s = start_joined(&sched);
    xcecli_ctx_t w = start_joined(&work);
    CHECK(s != NULL);
    CHECK(w != NULL);
    if (!s || !w) {
        nodes_stop(&g_nodes);
        return 1;
    }

    /* RUN jobs on the worker's host. */
    uint64_t ids[MAXJOBS];
    for (int i = 0; i < njobs; i++) {
        char name[32];
        snprintf(name, sizeof name, "nf-%d", i);
        xce_job_spec_t spec = {0, name, "notify-frozen", NULL, "/bin/true", 1, 16};
        CHECK_EQ(xcecli_jobsubmit(s, &spec, &ids[i]), 0);
        CHECK_EQ(xcecli_jobdispatch(s, ids[i], HOST), 0);
        CHECK_EQ(xcecli_notify_jobstart(w, ids[i]), 0);
    }
    for (int i = 0; i < njobs; i++) CHECK_EQ(job_state(s, ids[i], NULL), XCE_JOB_RUN);
    if (g_failures) {
        nodes_stop(&g_nodes);
        return 1;
    }

    /* Freeze the primary; report finishes into its socket, through the election, after. */
    int frozen = nodes_primary(&g_nodes, 10);
    CHECK(frozen > 0);
    printf("SIGSTOP primary node %d at %.1f s\n", frozen, nodes_now() - t0);
    kill(g_nodes.pid[frozen], SIGSTOP);
    int rcs[MAXJOBS];
    int third = njobs / 3;
    for (int i = 0; i < third; i++) rcs[i] = xcecli_notify_jobfinish(w, ids[i], 0);
    for (int i = third; i < 2 * third; i++) {
        nodes_sleep(0.1);
        rcs[i] = xcecli_notify_jobfinish(w, ids[i], 0);
    }
    /* The others elect a primary (the frozen node is tried too: its reply times out). */
    int p = 0;
    double until = nodes_now() + 20;
    while (nodes_now() < until && (p == 0 || p == frozen)) p = nodes_primary(&g_nodes, 5);
    printf("new primary node %d at %.1f s; SIGCONT node %d\n", p, nodes_now() - t0, frozen);
    CHECK(p > 0 && p != frozen);
    kill(g_nodes.pid[frozen], SIGCONT);
    for (int i = 2 * third; i < njobs; i++) rcs[i] = xcecli_notify_jobfinish(w, ids[i], 0);
    int refused = 0;
    for (int i = 0; i < njobs; i++)
        if (rcs[i] != 0) {
            printf("notify_jobfinish job %d returned %d (%s)\n", i, rcs[i], xce_strerror(rcs[i]));
            refused++;
        }

    /* Go on as a daemon does; re-send what was refused; wait for every finish to show. */
    int resent = 0;
    for (int i = 0; i < njobs; i++)
        if (rcs[i] != 0) {
            int rc = xcecli_notify_jobfinish(w, ids[i], 0);
            if (rc == 0) resent++;
            else printf("re-send for job %d: %d (%s)\n", i, rc, xce_strerror(rc));
        }
    int done = 0, missing = 0;
    until = nodes_now() + 20;
    for (;;) {
        worker_turn(w);
        done = 0;
        for (int i = 0; i < njobs; i++) done += job_state(s, ids[i], NULL) == XCE_JOB_DONE;
        if (done == njobs || nodes_now() > until) break;
        nodes_sleep(0.2);
    }
    for (int i = 0; i < njobs; i++) {
        int code = -1, st = job_state(s, ids[i], &code);
        if (st != XCE_JOB_DONE || code != 0) {
            printf("job %d (%" PRIu64 "): state %d exit %d after notify_jobfinish returned %d "
                   "(%s)\n",
                   i, ids[i], st, code, rcs[i], i < third ? "into the frozen primary"
                                                  : i < 2 * third ? "during the election"
                                                                  : "after the failover");
            missing++;
        }
    }
    printf("finishes: %d jobs, %d DONE at %.1f s, %d missing; %d notifies refused at once "
           "(%d re-sent); worker joins %d\n",
           njobs, done, nodes_now() - t0, missing, refused, resent, work.joins);
    CHECK_EQ(missing, 0);
    /* F12 (amended): a notification is accepted during an election, never refused at once. */
    CHECK_EQ(refused, 0);
    /* Every notification acknowledged before the jobs are run again: a late re-send can only
     * come from the outbox, which is empty now. */
    CHECK_EQ(xcecli_flush(w, 20000), 0);
    CHECK_EQ(xcecli_outbox_depth(w), 0);

    /* Exactly once: run every job again; no late re-send may finish it. */
    for (int i = 0; i < njobs; i++) {
        CHECK_EQ(xcecli_jobctrl(s, ids[i], XCE_JOBCTRL_REQUEUE), 0);
        CHECK_EQ(xcecli_jobdispatch(s, ids[i], HOST), 0);
    }
    double quiet = nodes_now() + 2;
    while (nodes_now() < quiet) {
        worker_turn(w);
        nodes_sleep(0.2);
    }
    int twice = 0;
    for (int i = 0; i < njobs; i++) {
        int st = job_state(s, ids[i], NULL);
        if (st != XCE_JOB_RUN) {
            printf("job %d: state %d after it ran again: a finish applied twice\n", i, st);
            twice++;
        }
    }
    printf("applied twice: %d\n", twice);
    CHECK_EQ(twice, 0);
    xce_stats_t st;
    if (xcecli_get_stats(w, &st) == 0)
        printf("worker context: %" PRIu64 " requests, %" PRIu64 " failovers\n", st.requests,
               st.failovers);
    xcecli_stop(w);
    xcecli_stop(s);
    nodes_stop(&g_nodes);
    printf("notify through a frozen primary: %s in %.1f s\n", g_failures ? "FAIL" : "ok",
           nodes_now() - t0);
    return g_failures ? 1 : 0;
}
