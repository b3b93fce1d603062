/* See nodes.h. */
#define _GNU_SOURCE
#include "nodes.h"
#include "ports.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <xce/xce.h>

double nodes_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void nodes_sleep(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static pid_t spawn_node(struct nodes *c, int id) {
    char idbuf[16], data[128], log[128];
    snprintf(idbuf, sizeof idbuf, "%d", id);
    snprintf(data, sizeof data, "%s/node-%d", c->dir, id);
    snprintf(log, sizeof log, "%s/log-%d", c->dir, id);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) {
            dup2(nul, 0);
            close(nul);
        }
        /* A fresh process: default signal dispositions and mask (the test may block some). */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execl(c->controller, c->controller, "run", "--id", idbuf, "--cluster", c->spec, "--data",
              data, (char *)NULL);
        _exit(127);
    }
    return pid;
}

int nodes_start(struct nodes *c, const char *controller, int n) {
    memset(c, 0, sizeof *c);
    if (n < 1 || n > NODES_MAX) return -1;
    c->controller = controller;
    c->n = n;
    unsigned base = pick_base_port(n);
    if (!base) return -1;
    snprintf(c->dir, sizeof c->dir, "/tmp/xce-nodes-%d", (int)getpid());
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", c->dir, c->dir);
    if (system(cmd) != 0) return -1;
    for (int id = 1; id <= n; id++) {
        char one[96];
        c->port[id] = base + (unsigned)id - 1;
        snprintf(one, sizeof one, "%s%d=127.0.0.1:%u/127.0.0.1:%u", id > 1 ? "," : "", id,
                 c->port[id], c->port[id] + 1000);
        strcat(c->spec, one);
        snprintf(one, sizeof one, "%s127.0.0.1:%u", id > 1 ? "," : "", c->port[id]);
        strcat(c->masters_ip, one);
        snprintf(one, sizeof one, "%slocalhost:%u", id > 1 ? "," : "", c->port[id]);
        strcat(c->masters_host, one);
    }
    for (int id = 1; id <= n; id++) {
        c->pid[id] = spawn_node(c, id);
        if (c->pid[id] < 0) {
            c->pid[id] = 0;
            return -1;
        }
    }
    return 0;
}

int nodes_restart(struct nodes *c, int id) {
    if (id < 1 || id > c->n || c->pid[id] > 0) return -1;
    c->pid[id] = spawn_node(c, id);
    if (c->pid[id] < 0) {
        c->pid[id] = 0;
        return -1;
    }
    return 0;
}

void nodes_kill(struct nodes *c, int id) {
    if (id < 1 || id > c->n || c->pid[id] <= 0) return;
    kill(c->pid[id], SIGKILL);
    waitpid(c->pid[id], NULL, 0);
    c->pid[id] = 0;
}

int nodes_primary(struct nodes *c, double timeout_s) {
    xce_client_config_t conf;
    xce_client_config_init(&conf);
    if (xce_client_config_parse_masters(&conf, c->masters_ip) != c->n) return 0;
    double deadline = nodes_now() + timeout_s;
    int level = xce_set_log_level(XCE_LOG_ERROR); /* nodes down or starting: no WARN each */
    int found = 0;
    while (!found && nodes_now() < deadline) {
        xcecli_ctx_t ctx = NULL;
        if (xcecli_start(&conf, &ctx) == 0) {
            xcecli_set_option(ctx, XCE_OPT_DEADLINE_MS, 2000);
            xcecli_set_option(ctx, XCE_OPT_REPLY_TIMEOUT_MS, 1000);
            xcecli_set_option(ctx, XCE_OPT_CONNECT_TIMEOUT_MS, 500);
            xce_controller_info_t *info = NULL;
            int id = 0;
            if (xcecli_hello(ctx, &info) == 0) {
                if (info->role == XCE_CTRL_PRIMARY) id = (int)info->id;
                xce_free_controller_info(info);
            }
            xcecli_stop(ctx);
            if (id >= 1 && id <= c->n && c->pid[id] > 0) found = id;
        }
        if (!found) nodes_sleep(0.1);
    }
    xce_set_log_level(level);
    return found;
}

void nodes_stop(struct nodes *c) {
    for (int id = 1; id <= c->n; id++)
        if (c->pid[id] > 0) {
            kill(c->pid[id], SIGCONT);
            kill(c->pid[id], SIGTERM);
        }
    double deadline = nodes_now() + 5;
    for (int id = 1; id <= c->n; id++) {
        while (c->pid[id] > 0 && nodes_now() < deadline) {
            if (waitpid(c->pid[id], NULL, WNOHANG) != 0) c->pid[id] = 0;
            else nodes_sleep(0.02);
        }
        if (c->pid[id] > 0) nodes_kill(c, id);
    }
    if (c->dir[0]) {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "rm -rf %s", c->dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", c->dir);
        c->dir[0] = 0;
    }
}

void nodes_kill_all(const struct nodes *c) {
    for (int id = 1; id <= c->n; id++)
        if (c->pid[id] > 0) {
            kill(c->pid[id], SIGKILL);
        }
}
