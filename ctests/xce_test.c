/* xce_test: a small C tool over libxce, the way the cluster's C daemons and tools use it.
 * Reads commands from a script file (argument) or stdin (with a prompt on a terminal):
 *
 *   set masters h:p,h:p,h:p   set retry N   set option NAME VALUE   client   hello
 *   jobsub NAME CMD...        joblist       jobinfo ID   jobctrl ID kill|suspend|resume|requeue
 *   workerlist   clusterconf   stats   lasterror   sleep MS   stop   quit
 *
 * Results go to stdout; an error prints "CMD: <xce_strerror text>" (e.g. "joblist: cluster
 * not ready"). Exit status: 0 when every command succeeded, 1 otherwise. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xce/xce.h>

static xce_client_config_t g_conf;
static xce_retry_config_t g_retry = XCE_RETRY_DEFAULTS;
static int g_retry_set;
static xcecli_ctx_t g_ctx;
static int g_errors;

static int fail(const char *cmd, int rc) {
    printf("%s: %s\n", cmd, xce_strerror(rc));
    g_errors++;
    return rc;
}

static int need_ctx(const char *cmd) {
    if (g_ctx) return 1;
    printf("%s: no client (run \"client\" first)\n", cmd);
    g_errors++;
    return 0;
}

static const char *job_state(int s) {
    static const char *names[] = {"PEND", "RUN", "SUSP", "DONE", "EXIT"};
    return s >= 0 && s <= XCE_JOB_EXIT ? names[s] : "?";
}

static const char *ctrl_role(int r) {
    static const char *names[] = {"PRIMARY", "STANDBY", "CANDIDATE", "INITIALIZING"};
    return r >= 0 && r <= XCE_CTRL_INITIALIZING ? names[r] : "?";
}

static void print_job(const xce_job_t *j) {
    printf("%" PRIu64 " %s %s queue=%s user=%s host=%s exit=%d cmd=\"%s\"", j->jobid, j->name,
           job_state(j->state), j->queue, j->user, j->exec_host, j->exit_code, j->command);
    if (j->pend_reason[0]) printf(" reason=\"%s\"", j->pend_reason);
    printf("\n");
}

static int parse_u64(const char *s, uint64_t *out) {
    char *end;
    if (!s || !*s) return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

static void cmd_set(char *args) {
    char *what = strtok(args, " \t");
    char *val = strtok(NULL, "");
    if (what && strcmp(what, "masters") == 0) {
        int rc = xce_client_config_parse_masters(&g_conf, val ? val : "");
        if (rc < 0) {
            fail("set masters", rc);
            return;
        }
        printf("masters: %d\n", rc);
    } else if (what && strcmp(what, "retry") == 0) {
        uint64_t n;
        if (parse_u64(val, &n) != 0 || n > UINT32_MAX) {
            fail("set retry", -EINVAL);
            return;
        }
        g_retry.max_retries = (uint32_t)n;
        g_retry_set = 1;
        if (g_ctx) {
            int rc = xcecli_set_retry_config(g_ctx, &g_retry);
            if (rc < 0) {
                fail("set retry", rc);
                return;
            }
        }
        printf("retry: %u\n", g_retry.max_retries);
    } else if (what && strcmp(what, "option") == 0) {
        static const struct {
            const char *name;
            int opt;
        } opts[] = {{"connect_timeout_ms", XCE_OPT_CONNECT_TIMEOUT_MS},
                    {"reply_timeout_ms", XCE_OPT_REPLY_TIMEOUT_MS},
                    {"deadline_ms", XCE_OPT_DEADLINE_MS},
                    {"redirect_any", XCE_OPT_REDIRECT_POLICY},
                    {"wait_primary", XCE_OPT_WAIT_PRIMARY}};
        char *name = val ? strtok(val, " \t") : NULL;
        char *num = name ? strtok(NULL, " \t") : NULL;
        uint64_t v;
        if (!need_ctx("set option")) return;
        for (size_t i = 0; name && i < sizeof opts / sizeof opts[0]; i++) {
            if (strcmp(name, opts[i].name) == 0 && parse_u64(num, &v) == 0 && v <= INT64_MAX) {
                int rc = xcecli_set_option(g_ctx, opts[i].opt, (int64_t)v);
                if (rc < 0)
                    fail("set option", rc);
                else
                    printf("option %s: %" PRIu64 "\n", name, v);
                return;
            }
        }
        fail("set option", -EINVAL);
    } else {
        fail("set", -EINVAL);
    }
}

static void cmd_client(void) {
    if (g_ctx) {
        xcecli_stop(g_ctx);
        g_ctx = NULL;
    }
    int rc = xcecli_start(&g_conf, &g_ctx);
    if (rc < 0) {
        fail("client", rc);
        return;
    }
    if (g_retry_set && (rc = xcecli_set_retry_config(g_ctx, &g_retry)) < 0) {
        fail("client", rc);
        return;
    }
    printf("client: connected\n");
}

static void cmd_hello(void) {
    xce_controller_info_t *info;
    int rc;
    if (!need_ctx("hello")) return;
    if ((rc = xcecli_hello(g_ctx, &info)) < 0) {
        fail("hello", rc);
        return;
    }
    printf("controller %u %s term %" PRIu64 " primary %u at %s:%u version %s\n", info->id,
           ctrl_role(info->role), info->term, info->primary_id, info->primary_host,
           (unsigned)info->primary_port, info->version);
    xce_free_controller_info(info);
}

static void cmd_jobsub(char *args) {
    char *name = strtok(args, " \t");
    char *command = strtok(NULL, "");
    if (!need_ctx("jobsub")) return;
    if (!name || !command) {
        fail("jobsub", -EINVAL);
        return;
    }
    xce_job_spec_t spec = {0, name, NULL, NULL, command, 1, 0};
    uint64_t id;
    int rc = xcecli_jobsubmit(g_ctx, &spec, &id);
    if (rc < 0) {
        fail("jobsub", rc);
        return;
    }
    printf("job %" PRIu64 " submitted\n", id);
}

static void cmd_joblist(void) {
    xce_job_t **jobs;
    if (!need_ctx("joblist")) return;
    int n = xcecli_joblist(g_ctx, &jobs);
    if (n < 0) {
        fail("joblist", n);
        return;
    }
    for (int i = 0; i < n; i++) print_job(jobs[i]);
    printf("%d job%s\n", n, n == 1 ? "" : "s");
    xce_free_joblist(jobs);
}

static void cmd_jobinfo(char *args) {
    uint64_t id;
    xce_job_t *job;
    if (!need_ctx("jobinfo")) return;
    if (parse_u64(strtok(args, " \t"), &id) != 0) {
        fail("jobinfo", -EINVAL);
        return;
    }
    int rc = xcecli_jobinfo(g_ctx, id, &job);
    if (rc < 0) {
        fail("jobinfo", rc);
        return;
    }
    print_job(job);
    xce_free_job(job);
}

static void cmd_jobctrl(char *args) {
    static const struct {
        const char *name;
        int action;
    } actions[] = {{"kill", XCE_JOBCTRL_KILL},
                   {"suspend", XCE_JOBCTRL_SUSPEND},
                   {"resume", XCE_JOBCTRL_RESUME},
                   {"requeue", XCE_JOBCTRL_REQUEUE}};
    uint64_t id;
    char *ids = strtok(args, " \t");
    char *act = strtok(NULL, " \t");
    int action = -1;
    if (!need_ctx("jobctrl")) return;
    for (size_t i = 0; act && i < sizeof actions / sizeof actions[0]; i++)
        if (strcmp(act, actions[i].name) == 0) action = actions[i].action;
    if (parse_u64(ids, &id) != 0 || action < 0) {
        fail("jobctrl", -EINVAL);
        return;
    }
    int rc = xcecli_jobctrl(g_ctx, id, action);
    if (rc < 0) {
        fail("jobctrl", rc);
        return;
    }
    printf("job %" PRIu64 " %s: ok\n", id, act);
}

static void cmd_workerlist(void) {
    static const char *states[] = {"OK", "CLOSED", "UNAVAIL"};
    xce_host_t *hosts;
    if (!need_ctx("workerlist")) return;
    int n = xcecli_workerlist(g_ctx, &hosts);
    if (n < 0) {
        fail("workerlist", n);
        return;
    }
    for (int i = 0; i < n; i++) {
        const xce_host_t *h = &hosts[i];
        printf("%s %s ncpus=%u mem=%" PRIu64 " njobs=%u", h->name,
               h->state >= 0 && h->state <= 2 ? states[h->state] : "?", h->ncpus, h->mem_mb,
               h->njobs);
        for (size_t k = 0; k < h->nattrs; k++)
            printf(" %s=%s", h->attrs[k].key, h->attrs[k].value);
        printf("\n");
    }
    printf("%d worker%s\n", n, n == 1 ? "" : "s");
    xce_free_hosts(hosts, (size_t)n);
}

static void cmd_clusterconf(void) {
    xce_cluster_conf_t *cc;
    if (!need_ctx("clusterconf")) return;
    int rc = xcecli_clusterconf(g_ctx, &cc);
    if (rc < 0) {
        fail("clusterconf", rc);
        return;
    }
    printf("cluster %s primary %u term %" PRIu64 "\n", cc->cluster_name, cc->primary_id,
           cc->term);
    for (size_t i = 0; i < cc->ncontrollers; i++)
        printf("controller %u %s:%u %s\n", cc->controllers[i].id, cc->controllers[i].host,
               (unsigned)cc->controllers[i].port, ctrl_role(cc->controllers[i].role));
    for (size_t i = 0; i < cc->nqueues; i++)
        printf("queue %s %s %s priority %d\n", cc->queues[i].name,
               cc->queues[i].open ? "OPEN" : "CLOSED",
               cc->queues[i].active ? "ACTIVE" : "INACTIVE", cc->queues[i].priority);
    xce_free_cluster_conf(cc);
}

static void cmd_stats(void) {
    xce_stats_t st;
    if (!need_ctx("stats")) return;
    int rc = xcecli_get_stats(g_ctx, &st);
    if (rc < 0) {
        fail("stats", rc);
        return;
    }
    printf("requests %" PRIu64 " retries %" PRIu64 " rotations %" PRIu64 " failovers %" PRIu64
           " backoff_ms %" PRIu64 " last_failover_ms %" PRIu64 " master %d %s:%u\n",
           st.requests, st.retries, st.rotations, st.failovers, st.backoff_ms,
           st.last_failover_ms, st.current_master, st.current_master_host,
           (unsigned)st.current_master_port);
}

static void cmd_lasterror(void) {
    char buf[1024];
    if (!need_ctx("lasterror")) return;
    int rc = xcecli_last_error_text(g_ctx, buf, sizeof buf);
    if (rc == -ENOENT)
        printf("lasterror: none\n");
    else if (rc < 0)
        fail("lasterror", rc);
    else
        printf("lasterror: %s\n", buf);
}

/* Runs one command line; returns 1 on quit. */
static int run(char *line) {
    line[strcspn(line, "\r\n")] = 0;
    while (*line == ' ' || *line == '\t') line++;
    if (!*line || *line == '#') return 0;
    char *cmd = strtok(line, " \t");
    char *args = strtok(NULL, "");
    if (!args) args = line + strlen(line); /* "" */
    if (strcmp(cmd, "quit") == 0 || strcmp(cmd, "exit") == 0) return 1;
    if (strcmp(cmd, "set") == 0)
        cmd_set(args);
    else if (strcmp(cmd, "client") == 0)
        cmd_client();
    else if (strcmp(cmd, "hello") == 0)
        cmd_hello();
    else if (strcmp(cmd, "jobsub") == 0)
        cmd_jobsub(args);
    else if (strcmp(cmd, "joblist") == 0)
        cmd_joblist();
    else if (strcmp(cmd, "jobinfo") == 0)
        cmd_jobinfo(args);
    else if (strcmp(cmd, "jobctrl") == 0)
        cmd_jobctrl(args);
    else if (strcmp(cmd, "workerlist") == 0)
        cmd_workerlist();
    else if (strcmp(cmd, "clusterconf") == 0)
        cmd_clusterconf();
    else if (strcmp(cmd, "stats") == 0)
        cmd_stats();
    else if (strcmp(cmd, "lasterror") == 0)
        cmd_lasterror();
    else if (strcmp(cmd, "stop") == 0) {
        xcecli_stop(g_ctx);
        g_ctx = NULL;
        printf("client: stopped\n");
    } else if (strcmp(cmd, "sleep") == 0) {
        uint64_t ms;
        if (parse_u64(args, &ms) == 0) {
            struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        } else {
            fail("sleep", -EINVAL);
        }
    } else {
        printf("%s: unknown command\n", cmd);
        g_errors++;
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    FILE *in = stdin;
    if (argc > 2) {
        fprintf(stderr, "usage: %s [SCRIPT]\n", argv[0]);
        return 2;
    }
    if (argc == 2 && !(in = fopen(argv[1], "r"))) {
        perror(argv[1]);
        return 2;
    }
    int prompt = in == stdin && isatty(0);
    char line[4096];
    xce_client_config_init(&g_conf);
    for (;;) {
        if (prompt) {
            printf("xce> ");
            fflush(stdout);
        }
        if (!fgets(line, sizeof line, in)) break;
        if (run(line)) break;
    }
    xcecli_stop(g_ctx);
    if (in != stdin) fclose(in);
    return g_errors ? 1 : 0;
}
