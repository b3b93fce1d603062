/* See cluster.h. */
#define _POSIX_C_SOURCE 200809L
#include "cluster.h"
#include "ports.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cluster_start(struct cluster *c, const char *controller) {
    int pipefd[2];
    unsigned base = pick_base_port(3);
    if (!base) return -1;
    snprintf(c->dir, sizeof c->dir, "/tmp/xce-ctest-%d", (int)getpid());
    if (pipe(pipefd) != 0) return -1;
    fflush(stdout); /* the child must not inherit (and later flush) buffered output */
    c->pid = fork();
    if (c->pid == 0) {
        char portbuf[16];
        snprintf(portbuf, sizeof portbuf, "%u", base);
        dup2(pipefd[1], 1);
        close(pipefd[0]);
        close(pipefd[1]);
        execl(controller, controller, "cluster", "--nodes", "3", "--base-port", portbuf,
              "--data", c->dir, (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    if (c->pid < 0) {
        close(pipefd[0]);
        return -1;
    }
    c->out = fdopen(pipefd[0], "r");
    c->masters[0] = 0;
    c->primary = 0;
    char line[512];
    int nodes = 0;
    double deadline = now_s() + 60;
    while (now_s() < deadline && fgets(line, sizeof line, c->out)) {
        unsigned id, pid, term;
        char addr[128];
        printf("cluster: %s", line);
        if (sscanf(line, "node %u client=%127s pid=%u", &id, addr, &pid) == 3 && id >= 1 &&
            id <= 3) {
            c->node_pid[id] = (int)pid;
            if (c->masters[0]) strcat(c->masters, ",");
            strcat(c->masters, addr);
            nodes++;
        } else if (strstr(line, " exited")) {
            return -1; /* a node died at start (e.g. its port was taken) */
        } else if (sscanf(line, "primary %u term %u", &id, &term) == 2) {
            c->primary = (int)id;
        }
        if (nodes == 3 && c->primary) return 0;
    }
    return -1;
}

int cluster_start_retry(struct cluster *c, const char *controller, int attempts) {
    int up = -1;
    memset(c, 0, sizeof *c);
    for (int attempt = 0; attempt < attempts && up != 0; attempt++) {
        if (attempt) {
            cluster_stop(c);
            memset(c, 0, sizeof *c);
        }
        up = cluster_start(c, controller);
    }
    if (up != 0) {
        cluster_stop(c);
        memset(c, 0, sizeof *c);
    }
    return up;
}

void cluster_stop(struct cluster *c) {
    if (c->pid > 0) {
        kill(c->pid, SIGINT);
        for (int i = 0; i < 100 && waitpid(c->pid, NULL, WNOHANG) == 0; i++) {
            struct timespec ts = {0, 50000000L};
            nanosleep(&ts, NULL);
        }
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        for (int id = 1; id <= 3; id++)
            if (c->node_pid[id] > 0) kill(c->node_pid[id], SIGKILL);
    }
    if (c->out) fclose(c->out);
    c->out = NULL;
    c->pid = 0;
    if (c->dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", c->dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", c->dir);
    }
}

void cluster_kill_all(const struct cluster *c) {
    if (c->pid > 0) kill(c->pid, SIGKILL);
    for (int id = 1; id <= 3; id++)
        if (c->node_pid[id] > 0) kill(c->node_pid[id], SIGKILL);
    if (c->dir[0]) { /* fork, execv and waitpid are async-signal-safe; system() is not */
        pid_t rm = fork();
        if (rm == 0) {
            char *const args[] = {"rm", "-rf", (char *)c->dir, NULL};
            execv("/bin/rm", args);
            _exit(127);
        }
        if (rm > 0) waitpid(rm, NULL, 0);
    }
}
