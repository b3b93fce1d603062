/* A cluster of real `xce-controller run` nodes on loopback that a test starts, kills (-9),
 * freezes (SIGSTOP/SIGCONT) and restarts in place one by one (S13, the notify test). Unlike
 * cluster.h (the `cluster` supervisor command), every node is a child of the test, so a killed
 * node can be started again on its own data directory. */
#ifndef XCE_CTESTS_NODES_H
#define XCE_CTESTS_NODES_H

#include <sys/types.h>

#define NODES_MAX 3

struct nodes {
    const char *controller;
    int n;
    unsigned port[NODES_MAX + 1];     /* client port by node id 1..n (raft: +1000) */
    pid_t pid[NODES_MAX + 1];         /* 0: not running */
    char dir[96];                     /* data root: dir/node-ID, logs dir/log-ID */
    char spec[512];                   /* ID=CLIENT/RAFT,... for --cluster */
    char masters_ip[256];             /* 127.0.0.1:P,... */
    char masters_host[256];           /* localhost:P,... (host names: the resolver is used) */
};

/* CLOCK_MONOTONIC in seconds. */
double nodes_now(void);

/* Sleeps `s` seconds (restarted after signals). */
void nodes_sleep(double s);

/* Starts n (1..NODES_MAX) nodes on free loopback ports; 0 or -1. Call nodes_stop either way. */
int nodes_start(struct nodes *c, const char *controller, int n);

/* Starts node `id` again on its data directory (after nodes_kill). 0 or -1. */
int nodes_restart(struct nodes *c, int id);

/* kill -9 node `id` and reaps it. */
void nodes_kill(struct nodes *c, int id);

/* The id of the node that says it is primary (clusterconf through a short-lived context on
 * every node), waiting up to `timeout_s`; 0 when none did. Uses the library. */
int nodes_primary(struct nodes *c, double timeout_s);

/* Stops every node (SIGTERM, then SIGKILL) and removes the data root. Safe when half started. */
void nodes_stop(struct nodes *c);

/* Async-signal-safe: SIGKILL every node (for a watchdog). */
void nodes_kill_all(const struct nodes *c);

#endif
