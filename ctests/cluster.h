/* A real 3-node `xce-controller cluster` on loopback for the C cluster tests (test_reconnect,
 * test_threads): start it, learn its nodes and primary, kill a node, stop it and clean up. */
#ifndef XCE_CTESTS_CLUSTER_H
#define XCE_CTESTS_CLUSTER_H

#include <stdio.h>
#include <sys/types.h>

struct cluster {
    pid_t pid;                 /* the `xce-controller cluster` supervisor */
    FILE *out;                 /* its stdout */
    char masters[256];         /* "h:p,h:p,h:p" */
    int node_pid[4];           /* by node id 1..3 */
    int primary;               /* node id */
    char dir[64];
};

/* CLOCK_MONOTONIC in seconds. */
double now_s(void);

/* Starts the cluster and reads the supervisor's lines (echoed as "cluster: ...") until the 3
 * nodes and a primary are known. 0 on success, -1 otherwise (then call cluster_stop). */
int cluster_start(struct cluster *c, const char *controller);

/* cluster_start with up to `attempts` tries (a node can lose a port race at start). On
 * failure everything it started is stopped. 0 on success, -1 otherwise. */
int cluster_start_retry(struct cluster *c, const char *controller, int attempts);

/* Stops the supervisor and every node, removes the data directory. Safe on a zeroed or
 * half-started cluster. */
void cluster_stop(struct cluster *c);

/* Async-signal-safe last resort (for a watchdog's signal handler): SIGKILL the supervisor and
 * every node, remove the data directory. */
void cluster_kill_all(const struct cluster *c);

#endif
