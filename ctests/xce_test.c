/* xce_test: a command-line tool over libxce, the way the cluster's C daemons and tools use it.
 * Installed by scripts/install.sh; its manual is docs/man/xce_test.1 and `xce_test --help`.
 *
 *   xce_test [-e] [-m MASTERS] [-c "CMD; CMD..."] [SCRIPT | -]
 *
 * Commands come from -c, else from SCRIPT, else from stdin (with a prompt on a terminal).
 * Results go to stdout; a failed command prints "CMD[ ARG]: <why>" (e.g. "joblist: cluster not
 * ready", "jobinfo 42: no such job") and the tool goes on, unless -e.
 * Exit status: 0 every command succeeded, 1 a command failed, 2 usage error (bad option,
 * unreadable script). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xce/xce.h>

#define EXIT_USAGE 2
/* Longest command accepted, in bytes. A longer one is refused whole and never cut short: a
 * job command cut at a buffer's end would run as something else. */
#define MAX_LINE 4095

static const char USAGE[] =
    "usage: xce_test [-e] [-m MASTERS] [-c \"CMD; CMD...\"] [--ca F [--cert F --key F]]\n"
    "                [--token T] [SCRIPT | -]\n"
    "       xce_test --help | --version\n"
    "\n"
    "Talks to an xce cluster through libxce. Reads one command per line from SCRIPT, from\n"
    "stdin (\"-\" or no SCRIPT; a prompt when it is a terminal), or from -c (commands\n"
    "separated by \";\"). Blank lines and lines starting with # are skipped.\n"
    "\n"
    "options:\n"
    "  -m, --masters LIST   set masters LIST and connect (like \"set masters LIST\" + \"client\")\n"
    "  -c, --command CMDS   run these commands instead of reading a script\n"
    "  -e, --errexit        stop at the first command that fails\n"
    "      --ca FILE        TLS: trust this CA bundle (PEM)\n"
    "      --cert FILE      TLS: present this client certificate (its name says the role:\n"
    "                       admin, scheduler, worker-HOST, user-NAME); needs --key\n"
    "      --key FILE       its private key\n"
    "      --token TOKEN    an identity token (xce-controller pki token), for a caller\n"
    "                       without a certificate (same as XCE_AUTH_TOKEN)\n"
    "  -h, --help           this text\n"
    "  -V, --version        the tool's and the library's version\n"
    "\n"
    "exit status: 0 every command succeeded, 1 a command failed, 2 usage error\n"
    "\n";

static const char COMMANDS[] =
    "commands:\n"
    "  set masters H:P,H:P,...   controllers to use (up to 8), in the order tried\n"
    "  set retry N               retry budget: N backoff sleeps before \"cluster not ready\"\n"
    "  set option NAME VALUE     connect_timeout_ms | reply_timeout_ms | deadline_ms |\n"
    "                            redirect_any (0/1) | wait_primary (0/1)\n"
    "  client                    connect (to the first reachable master)\n"
    "  hello                     who answered, and who is primary\n"
    "  jobsub NAME CMD...        submit a job; prints its id and a short form %N\n"
    "  joblist                   every job\n"
    "  jobinfo JOB               one job\n"
    "  jobctrl JOB ACTION        ACTION: kill | suspend | resume | requeue\n"
    "  workerlist                the workers and their state\n"
    "  clusterconf               controllers, roles, queues\n"
    "  stats                     this client's failover counters\n"
    "  lasterror                 what the last failed call did (attempts, masters, time)\n"
    "  sleep MS                  pause\n"
    "  stop                      disconnect\n"
    "  help                      this list\n"
    "  quit | exit               end (also end of input)\n"
    "JOB is a job id, a unique prefix of an id this session printed, %N (the N-th job\n"
    "submitted in this session) or %% (the last one).\n";

static xce_client_config_t g_conf;
static xce_retry_config_t g_retry = XCE_RETRY_DEFAULTS;
static int g_retry_set;
static xcecli_ctx_t g_ctx;
static int g_errors;

/* Job ids this session printed, for prefixes and %N (submitted ones, in order). */
#define MAX_SEEN 4096
static uint64_t g_seen[MAX_SEEN];
static size_t g_nseen;
static uint64_t g_submitted[MAX_SEEN];
static size_t g_nsubmitted;

static void remember(uint64_t id) {
    for (size_t i = 0; i < g_nseen; i++)
        if (g_seen[i] == id) return;
    if (g_nseen < MAX_SEEN) g_seen[g_nseen++] = id;
}

static int fail(const char *cmd, int rc) {
    printf("%s: %s\n", cmd, xce_strerror(rc));
    g_errors++;
    return rc;
}

/* A failure about one object ("jobinfo 42: no such job"): the op's own words for the statuses
 * whose errno text would mislead ("No such file or directory"). */
static int fail_on(const char *cmd, const char *arg, int rc) {
    const char *why = xce_strerror(rc);
    if (rc == -ENOENT && strncmp(cmd, "job", 3) == 0) why = "no such job";
    if (rc == -ENOENT && strcmp(cmd, "resval") == 0) why = "no such host";
    printf("%s %s: %s\n", cmd, arg, why);
    g_errors++;
    return rc;
}

static void usage_of(const char *cmd, const char *synopsis) {
    printf("%s: usage: %s\n", cmd, synopsis);
    g_errors++;
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

/* Resolves a JOB argument (see COMMANDS). Returns 0, or -1 after printing why. */
static int parse_job(const char *cmd, const char *arg, uint64_t *out) {
    if (!arg || !*arg) return -1;
    if (arg[0] == '%') {
        uint64_t n = 0;
        if (strcmp(arg, "%%") == 0 || strcmp(arg, "%") == 0) n = g_nsubmitted;
        else if (parse_u64(arg + 1, &n) != 0) n = 0;
        if (n == 0 || n > g_nsubmitted) {
            printf("%s %s: no such job in this session (%zu submitted)\n", cmd, arg, g_nsubmitted);
            g_errors++;
            return -2;
        }
        *out = g_submitted[n - 1];
        return 0;
    }
    uint64_t id;
    if (parse_u64(arg, &id) != 0) return -1;
    size_t len = strlen(arg), matches = 0;
    uint64_t match = 0;
    char buf[32];
    for (size_t i = 0; i < g_nseen; i++) {
        snprintf(buf, sizeof buf, "%" PRIu64, g_seen[i]);
        if (strcmp(buf, arg) == 0) { /* an exact id wins over prefixes */
            *out = g_seen[i];
            return 0;
        }
        if (strncmp(buf, arg, len) == 0) {
            matches++;
            match = g_seen[i];
        }
    }
    if (matches > 1) {
        printf("%s %s: ambiguous: a prefix of %zu job ids\n", cmd, arg, matches);
        g_errors++;
        return -2;
    }
    *out = matches == 1 ? match : id;
    return 0;
}

static void cmd_set(char *args) {
    char *what = strtok(args, " \t");
    char *val = strtok(NULL, "");
    if (what && strcmp(what, "masters") == 0) {
        int rc = xce_client_config_parse_masters(&g_conf, val ? val : "");
        if (rc == -EINVAL) {
            usage_of("set masters", "set masters HOST:PORT[,HOST:PORT...] (up to 8)");
            return;
        }
        if (rc < 0) {
            fail("set masters", rc);
            return;
        }
        printf("masters: %d\n", rc);
    } else if (what && strcmp(what, "retry") == 0) {
        uint64_t n;
        if (parse_u64(val, &n) != 0 || n > UINT32_MAX) {
            usage_of("set retry", "set retry N");
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
        usage_of("set option", "set option connect_timeout_ms|reply_timeout_ms|deadline_ms|"
                               "redirect_any|wait_primary VALUE");
    } else {
        usage_of("set", "set masters LIST | set retry N | set option NAME VALUE");
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
        usage_of("jobsub", "jobsub NAME COMMAND...");
        return;
    }
    xce_job_spec_t spec = {0, name, NULL, NULL, command, 1, 0};
    uint64_t id;
    int rc = xcecli_jobsubmit(g_ctx, &spec, &id);
    if (rc < 0) {
        fail("jobsub", rc);
        return;
    }
    remember(id);
    if (g_nsubmitted < MAX_SEEN) g_submitted[g_nsubmitted++] = id;
    printf("job %" PRIu64 " submitted (%%%zu)\n", id, g_nsubmitted);
}

static void cmd_joblist(void) {
    xce_job_t **jobs;
    if (!need_ctx("joblist")) return;
    int n = xcecli_joblist(g_ctx, &jobs);
    if (n < 0) {
        fail("joblist", n);
        return;
    }
    for (int i = 0; i < n; i++) {
        remember(jobs[i]->jobid);
        print_job(jobs[i]);
    }
    printf("%d job%s\n", n, n == 1 ? "" : "s");
    xce_free_joblist(jobs);
}

static void cmd_jobinfo(char *args) {
    uint64_t id;
    xce_job_t *job;
    char *arg = strtok(args, " \t");
    if (!need_ctx("jobinfo")) return;
    int p = parse_job("jobinfo", arg, &id);
    if (p == -1) usage_of("jobinfo", "jobinfo JOB");
    if (p < 0) return;
    int rc = xcecli_jobinfo(g_ctx, id, &job);
    if (rc < 0) {
        fail_on("jobinfo", arg, rc);
        return;
    }
    remember(job->jobid);
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
    if (action < 0) {
        usage_of("jobctrl", "jobctrl JOB kill|suspend|resume|requeue");
        return;
    }
    int p = parse_job("jobctrl", ids, &id);
    if (p == -1) usage_of("jobctrl", "jobctrl JOB kill|suspend|resume|requeue");
    if (p < 0) return;
    int rc = xcecli_jobctrl(g_ctx, id, action);
    if (rc < 0) {
        fail_on("jobctrl", ids, rc);
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
            usage_of("sleep", "sleep MS");
        }
    } else if (strcmp(cmd, "help") == 0 || strcmp(cmd, "?") == 0) {
        fputs(COMMANDS, stdout);
    } else {
        printf("%s: unknown command (\"help\" lists them)\n", cmd);
        g_errors++;
    }
    fflush(stdout);
    return 0;
}

/* An input line or command over MAX_LINE bytes: said, counted as a failed command, not run. */
static void too_long(const char *what, size_t len) {
    printf("%s of %zu bytes refused: longer than %d bytes (not run)\n", what, len, MAX_LINE);
    fflush(stdout);
    g_errors++;
}

/* Runs the commands of one string, separated by ';' (the -c form). Returns 1 on quit. */
static int run_string(const char *cmds, int errexit) {
    char *copy = strdup(cmds), *save = NULL;
    int quit = 0;
    if (!copy) return 1;
    for (char *c = strtok_r(copy, ";", &save); c && !quit; c = strtok_r(NULL, ";", &save)) {
        int before = g_errors;
        if (strlen(c) > MAX_LINE)
            too_long("command", strlen(c));
        else
            quit = run(c);
        if (errexit && g_errors > before) quit = 1;
    }
    free(copy);
    return quit;
}

static int bad_usage(const char *what) {
    fprintf(stderr, "xce_test: %s\n%s", what, USAGE);
    return EXIT_USAGE;
}

int main(int argc, char **argv) {
    const char *masters = NULL, *commands = NULL, *script = NULL;
    const char *ca = NULL, *cert = NULL, *key = NULL;
    int errexit = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            fputs(COMMANDS, stdout);
            return 0;
        } else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
            printf("xce_test (libxce %s)\n", xce_version());
            return 0;
        } else if (strcmp(a, "-e") == 0 || strcmp(a, "--errexit") == 0) {
            errexit = 1;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--masters") == 0) {
            if (++i == argc) return bad_usage("-m needs a list of masters");
            masters = argv[i];
        } else if (strcmp(a, "-c") == 0 || strcmp(a, "--command") == 0) {
            if (++i == argc) return bad_usage("-c needs commands");
            commands = argv[i];
        } else if (strcmp(a, "--ca") == 0) {
            if (++i == argc) return bad_usage("--ca needs a file");
            ca = argv[i];
        } else if (strcmp(a, "--cert") == 0) {
            if (++i == argc) return bad_usage("--cert needs a file");
            cert = argv[i];
        } else if (strcmp(a, "--key") == 0) {
            if (++i == argc) return bad_usage("--key needs a file");
            key = argv[i];
        } else if (strcmp(a, "--token") == 0) {
            if (++i == argc) return bad_usage("--token needs a token");
            /* The library reads it when the context starts (docs/security.md). */
            setenv("XCE_AUTH_TOKEN", argv[i], 1);
        } else if (a[0] == '-' && a[1] != 0) {
            char msg[256];
            snprintf(msg, sizeof msg, "unknown option %s", a);
            return bad_usage(msg);
        } else if (script) {
            return bad_usage("more than one script");
        } else {
            script = a;
        }
    }
    if (commands && script) return bad_usage("-c and a script do not go together");
    if (!cert != !key) return bad_usage("--cert and --key go together");
    if (cert && !ca) return bad_usage("--cert needs --ca");
    FILE *in = stdin;
    if (script && strcmp(script, "-") != 0 && !(in = fopen(script, "r"))) {
        fprintf(stderr, "xce_test: cannot read script %s: %s\n", script, strerror(errno));
        return EXIT_USAGE;
    }
    xce_client_config_init(&g_conf);
    const struct {
        const char *from;
        char *to;
    } files[] = {{ca, g_conf.tls_ca_file}, {cert, g_conf.tls_cert_file}, {key, g_conf.tls_key_file}};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        if (!files[f].from) continue;
        if (strlen(files[f].from) >= XCE_MAXPATH_LEN) return bad_usage("a TLS file name is too long");
        memcpy(files[f].to, files[f].from, strlen(files[f].from) + 1);
    }
    int quit = 0;
    if (masters && strlen(masters) > MAX_LINE - 12) return bad_usage("-m: the list is too long");
    if (masters) {
        char line[MAX_LINE + 1];
        snprintf(line, sizeof line, "set masters %s", masters);
        quit = run(line) || g_errors;
        if (!quit) {
            snprintf(line, sizeof line, "client");
            quit = run(line) || g_errors;
        }
    }
    if (!quit && commands) {
        run_string(commands, errexit);
    } else if (!quit) {
        int prompt = in == stdin && isatty(0);
        char *line = NULL;
        size_t cap = 0;
        for (unsigned long n = 1;; n++) {
            if (prompt) {
                printf("xce> ");
                fflush(stdout);
            }
            ssize_t len = getline(&line, &cap, in);
            if (len < 0) break;
            int before = g_errors;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            if ((size_t)len > MAX_LINE) {
                char what[64];
                snprintf(what, sizeof what, "line %lu", n);
                too_long(what, (size_t)len);
            } else if (run(line)) {
                break;
            }
            if (errexit && g_errors > before) break;
        }
        free(line);
    }
    xcecli_stop(g_ctx);
    if (in != stdin) fclose(in);
    return g_errors ? 1 : 0;
}
