/* F20 and F13 at the C boundary: xcecli_stop while other threads are inside calls and from
 * inside a callback of the context, callback setters that are final when they return, one
 * wakeup that ends every blocked call, call handles cancelled one by one, and wakes and stop
 * requests from signal handlers (F27). Run plain, under
 * ASan/UBSan and under valgrind (scripts/ctest.sh): a use after free is a failure there.
 * No controller needed: silent listeners accept connections and never answer.
 * Usage: test_lifecycle NAME | all */
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE /* syscall(2), SYS_gettid */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>

#include "util.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A context over two silent masters, replies timing out after reply_ms. */
struct rig {
    struct silent_server a, b;
    xcecli_ctx_t ctx;
};

static int rig_start(struct rig *r, long reply_ms) {
    memset(r, 0, sizeof *r);
    if (silent_server_start(&r->a) != 0 || silent_server_start(&r->b) != 0) return -1;
    xce_client_config_t conf;
    char list[64];
    xce_client_config_init(&conf);
    snprintf(list, sizeof list, "127.0.0.1:%u,127.0.0.1:%u", (unsigned)r->a.port,
             (unsigned)r->b.port);
    CHECK_EQ(xce_client_config_parse_masters(&conf, list), 2);
    int rc = xcecli_start(&conf, &r->ctx);
    CHECK_EQ(rc, 0);
    if (rc != 0) return -1;
    CHECK_EQ(xcecli_set_option(r->ctx, XCE_OPT_REPLY_TIMEOUT_MS, reply_ms), 0);
    CHECK_EQ(xcecli_set_option(r->ctx, XCE_OPT_WAIT_PRIMARY, 0), 0);
    return 0;
}

/* The system call thread `tid` of this process is blocked in (the first field of
 * /proc/self/task/TID/syscall), -1 when it runs or cannot be read. */
static long blocked_in(int tid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    long nr = -1;
    if (fscanf(f, "%ld", &nr) != 1) nr = -1;
    fclose(f);
    return nr;
}

/* Bytes that reached the silent server on `port` and lie unread in its accepted socket
 * (rx_queue in /proc/net/tcp): a request arrived there. */
static long unread_at(uint16_t port) {
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL) return 0;
    char line[512];
    long total = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned lport, rport, st;
        unsigned long tx, rx;
        if (sscanf(line, " %*d: %*x:%x %*x:%x %x %lx:%lx", &lport, &rport, &st, &tx, &rx) == 5 &&
            lport == port && st == 1)
            total += (long)rx;
    }
    fclose(f);
    return total;
}

/* Waits (at most 30 s) until a request reached one of the rig's masters: the call that owns
 * the context is in its reply wait. */
static int wait_request_arrived(const struct rig *r) {
    double deadline = now_s() + 30;
    while (unread_at(r->a.port) + unread_at(r->b.port) == 0) {
        if (now_s() > deadline) return -1;
        sleep_ms(1);
    }
    return 0;
}

static void rig_stop_servers(struct rig *r) {
    silent_server_stop(&r->a);
    silent_server_stop(&r->b);
}

/* ---- a call in another thread ------------------------------------------------------- */

struct caller {
    pthread_t thread;
    xcecli_ctx_t ctx;
    atomic_int tid;
    atomic_int started;
    int rc;
    double ended;
};

static void *caller_main(void *p) {
    struct caller *c = (struct caller *)p;
    xce_controller_info_t *info = NULL;
    atomic_store(&c->tid, (int)syscall(SYS_gettid));
    atomic_store(&c->started, 1);
    c->rc = xcecli_hello(c->ctx, &info);
    c->ended = now_s();
    if (c->rc == 0) xce_free_controller_info(info);
    return NULL;
}

/* Waits (at most 30 s) until `want` of the n started callers are parked in a futex wait —
 * queued at the context's gate (F11), the only wait of a call before it owns the context —,
 * seen three times in a row 10 ms apart (a lock taken on the way in is held for microseconds). */
static int wait_parked(struct caller **cs, int n, int want) {
    double deadline = now_s() + 30;
    for (int seen = 0; seen < 3;) {
        if (now_s() > deadline) return -1;
        int parked = 0;
        for (int i = 0; i < n; i++)
            parked += atomic_load(&cs[i]->started) && blocked_in(atomic_load(&cs[i]->tid)) == SYS_futex;
        seen = parked >= want ? seen + 1 : 0;
        sleep_ms(10);
    }
    return 0;
}

/* Starts n callers on the rig's context and returns once all are inside: one waiting for a
 * reply (its request arrived), the others queued behind it — events, not a pause. */
static void callers_start(struct caller *cs, int n, struct rig *r) {
    struct caller *ps[8];
    for (int i = 0; i < n; i++) {
        memset(&cs[i], 0, sizeof cs[i]);
        cs[i].ctx = r->ctx;
        ps[i] = &cs[i];
        pthread_create(&cs[i].thread, NULL, caller_main, &cs[i]);
    }
    CHECK_EQ(wait_request_arrived(r), 0);
    CHECK_EQ(wait_parked(ps, n, n - 1), 0);
}

/* ---- stop while calling --------------------------------------------------------------- */

/* The descriptors of this process connected to 127.0.0.1:port_a or :port_b (the library's
 * sockets to the rig's masters; the servers' own accepted sockets have them as local port). */
static int sockets_to(uint16_t port_a, uint16_t port_b) {
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end != '\0' || end == e->d_name) continue;
        struct sockaddr_in peer;
        socklen_t len = sizeof peer;
        if (getpeername((int)fd, (struct sockaddr *)&peer, &len) != 0) continue;
        if (peer.sin_family != AF_INET) continue;
        uint16_t p = ntohs(peer.sin_port);
        if (p == port_a || p == port_b) n++;
    }
    closedir(d);
    return n;
}

/* Four threads are blocked on one context (a reply wait of 10 s, and three queued behind it)
 * when the main thread stops it: every call returns -E_XCE_CLOSED at once, and xcecli_stop
 * returns only after they all left the context — shown by what the last one to leave undoes:
 * when xcecli_stop returns, the context holds no socket any more (F20). (When each thread
 * then reads the clock after its call returned is up to the scheduler, not the library.) */
static void test_stop_while_calling(void) {
    struct rig r;
    if (rig_start(&r, 10000) != 0) return;
    struct caller cs[4];
    callers_start(cs, 4, &r);
    CHECK(sockets_to(r.a.port, r.b.port) >= 1); /* the first call waits on its connection */
    double t0 = now_s();
    xcecli_stop(r.ctx);
    double stopped = now_s();
    CHECK_EQ(sockets_to(r.a.port, r.b.port), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(cs[i].thread, NULL);
        CHECK_EQ(cs[i].rc, -E_XCE_CLOSED);
        CHECK(cs[i].ended - stopped < 2.0); /* woken, not timed out */
    }
    CHECK(stopped - t0 < 5.0);
    rig_stop_servers(&r);
}

/* ---- calls racing the stop ------------------------------------------------------------ */

struct hammer {
    pthread_t thread;
    xcecli_ctx_t ctx;
    atomic_int closed_seen;
    atomic_int calls;
    int other_errors;
};

static void *hammer_main(void *p) {
    struct hammer *h = (struct hammer *)p;
    for (;;) {
        xce_stats_t st;
        xce_controller_info_t *info = NULL;
        int rc = xcecli_get_stats(h->ctx, &st);
        if (rc != 0) h->other_errors++;
        rc = xcecli_hello(h->ctx, &info);
        if (rc == 0) xce_free_controller_info(info);
        atomic_fetch_add(&h->calls, 1);
        if (rc == -E_XCE_CLOSED) {
            atomic_store(&h->closed_seen, 1);
            return NULL;
        }
        if (rc != -ETIMEDOUT && rc != -EINTR) h->other_errors++;
    }
}

/* Threads keep calling on a context while another thread stops it: every call made while the
 * stop is in progress — and the one each thread makes just after it returned, before it saw
 * the -E_XCE_CLOSED — touches no freed memory (ASan and valgrind runs). */
static void test_calls_racing_stop(void) {
    struct rig r;
    if (rig_start(&r, 20) != 0) return;
    CHECK_EQ(xcecli_set_option(r.ctx, XCE_OPT_DEADLINE_MS, 20), 0);
    struct hammer hs[4];
    for (int i = 0; i < 4; i++) {
        memset(&hs[i], 0, sizeof hs[i]);
        hs[i].ctx = r.ctx;
        pthread_create(&hs[i].thread, NULL, hammer_main, &hs[i]);
    }
    /* Every thread is in its loop of calls (each made one) when the stop comes. */
    double deadline = now_s() + 30;
    for (int i = 0; i < 4; i++)
        while (atomic_load(&hs[i].calls) == 0 && now_s() < deadline) sleep_ms(1);
    for (int i = 0; i < 4; i++) CHECK(atomic_load(&hs[i].calls) > 0);
    xcecli_stop(r.ctx);
    for (int i = 0; i < 4; i++) {
        pthread_join(hs[i].thread, NULL);
        CHECK_EQ(atomic_load(&hs[i].closed_seen), 1);
        CHECK_EQ(hs[i].other_errors, 0);
    }
    rig_stop_servers(&r);
}

/* ---- stop from an event callback ------------------------------------------------------ */

static atomic_int g_events_after_stop;
static atomic_int g_stopped_in_cb;

static void stop_on_rotation(xcecli_ctx_t ctx, const xce_event_t *ev, void *arg) {
    (void)arg;
    if (atomic_load(&g_stopped_in_cb)) {
        atomic_fetch_add(&g_events_after_stop, 1);
        return;
    }
    if (ev->kind == XCE_EVENT_ROTATION) {
        atomic_store(&g_stopped_in_cb, 1);
        xcecli_stop(ctx); /* the context of the running call */
    }
}

/* The event handler stops its own context in the middle of a call: the call ends with
 * -E_XCE_CLOSED, no callback runs afterwards, nothing is touched after it was freed. */
static void test_stop_from_event_callback(void) {
    struct rig r;
    if (rig_start(&r, 100) != 0) return;
    atomic_store(&g_events_after_stop, 0);
    atomic_store(&g_stopped_in_cb, 0);
    CHECK_EQ(xcecli_set_event_handler(r.ctx, stop_on_rotation, NULL), 0);
    xce_controller_info_t *info = NULL;
    int rc = xcecli_hello(r.ctx, &info);
    CHECK_EQ(rc, -E_XCE_CLOSED);
    CHECK(info == NULL);
    CHECK_EQ(atomic_load(&g_stopped_in_cb), 1);
    CHECK_EQ(atomic_load(&g_events_after_stop), 0);
    /* ctx is freed: not used again */
    rig_stop_servers(&r);
}

/* ---- stop from the log sink ----------------------------------------------------------- */

static xcecli_ctx_t g_log_ctx;
static atomic_int g_log_stops;

static void stop_on_log(int level, const char *msg, void *arg) {
    (void)level;
    (void)arg;
    if (strstr(msg, "rotating") && atomic_fetch_add(&g_log_stops, 1) == 0)
        xcecli_stop(g_log_ctx);
}

/* A log sink stops the context whose call logged: same guarantees as from an event. */
static void test_stop_from_log_sink(void) {
    struct rig r;
    if (rig_start(&r, 100) != 0) return;
    g_log_ctx = r.ctx;
    atomic_store(&g_log_stops, 0);
    int old = xce_set_log_level(XCE_LOG_INFO);
    CHECK_EQ(xce_set_log_handler(stop_on_log, NULL), 0);
    xce_controller_info_t *info = NULL;
    CHECK_EQ(xcecli_hello(r.ctx, &info), -E_XCE_CLOSED);
    CHECK_EQ(xce_set_log_handler(NULL, NULL), 0);
    xce_set_log_level(old);
    CHECK_EQ(atomic_load(&g_log_stops), 1);
    rig_stop_servers(&r);
}

/* ---- a cycle of waits across threads (defect 12) ---------------------------------------- */

/* Thread 1 runs an event callback of context A that replaces the log sink, while thread 2
 * runs the log sink (for a line of its own context B) that stops A. Each would wait for the
 * other forever: the setter for the sink run on thread 2, the stop for A's call on thread 1.
 * The library refuses the wait that closes the cycle (the stop is finished by A's last call,
 * or the setter returns -EDEADLK): both threads finish, A's call ends with -E_XCE_CLOSED. */
static xcecli_ctx_t g_cyc_a;
static pthread_t g_cyc_t2;
static atomic_int g_cyc_in_sink, g_cyc_in_cb, g_cyc_set_rc, g_cyc_done;

static void wait_flag(atomic_int *f) {
    for (int i = 0; i < 5000 && !atomic_load(f); i++) sleep_ms(1);
}

static void cyc_sink(int level, const char *msg, void *arg) {
    (void)level;
    (void)msg;
    (void)arg;
    if (!pthread_equal(pthread_self(), g_cyc_t2) || atomic_exchange(&g_cyc_in_sink, 1)) return;
    wait_flag(&g_cyc_in_cb);
    xcecli_stop(g_cyc_a);
}

static void cyc_event(xcecli_ctx_t ctx, const xce_event_t *ev, void *arg) {
    (void)ctx;
    (void)ev;
    (void)arg;
    if (atomic_exchange(&g_cyc_in_cb, 1)) return;
    wait_flag(&g_cyc_in_sink);
    atomic_store(&g_cyc_set_rc, xce_set_log_handler(NULL, NULL));
}

static void *cyc_t2_main(void *p) {
    xcecli_ctx_t b = (xcecli_ctx_t)p;
    xce_controller_info_t *info = NULL;
    (void)xcecli_hello(b, &info); /* times out, rotates: logs on this thread */
    return NULL;
}

static void *cyc_watchdog(void *p) {
    (void)p;
    for (int i = 0; i < 30000 && !atomic_load(&g_cyc_done); i++) sleep_ms(1);
    if (!atomic_load(&g_cyc_done)) {
        fprintf(stderr, "setter_and_stop_in_a_cycle: DEADLOCK (30 s)\n");
        _exit(1);
    }
    return NULL;
}

static void test_setter_and_stop_in_a_cycle(void) {
    struct rig a, b;
    if (rig_start(&a, 100) != 0 || rig_start(&b, 100) != 0) return;
    xce_retry_config_t one = {1, 50, 50, 1.0};
    CHECK_EQ(xcecli_set_retry_config(a.ctx, &one), 0);
    CHECK_EQ(xcecli_set_retry_config(b.ctx, &one), 0);
    g_cyc_a = a.ctx;
    atomic_store(&g_cyc_in_sink, 0);
    atomic_store(&g_cyc_in_cb, 0);
    atomic_store(&g_cyc_set_rc, 1);
    atomic_store(&g_cyc_done, 0);
    pthread_t wd;
    pthread_create(&wd, NULL, cyc_watchdog, NULL);
    int old = xce_set_log_level(XCE_LOG_INFO);
    CHECK_EQ(xcecli_set_event_handler(a.ctx, cyc_event, NULL), 0);
    CHECK_EQ(xce_set_log_handler(cyc_sink, NULL), 0);
    pthread_create(&g_cyc_t2, NULL, cyc_t2_main, b.ctx);
    xce_controller_info_t *info = NULL;
    int rc = xcecli_hello(a.ctx, &info); /* times out, rotates: the event runs here */
    pthread_join(g_cyc_t2, NULL);
    atomic_store(&g_cyc_done, 1);
    pthread_join(wd, NULL);
    int set_rc = atomic_load(&g_cyc_set_rc);
    printf("A's call: %d; the setter in A's callback: %d\n", rc, set_rc);
    CHECK_EQ(rc, -E_XCE_CLOSED);
    CHECK(set_rc == 0 || set_rc == -EDEADLK);
    xce_set_log_handler(NULL, NULL);
    xce_set_log_level(old);
    xcecli_stop(b.ctx);
    rig_stop_servers(&a);
    rig_stop_servers(&b);
}

/* ---- setters are final ---------------------------------------------------------------- */

struct slow_arg {
    unsigned magic;
    atomic_int entered;
    atomic_int finished;
};
#define SLOW_MAGIC 0x5ca1ab1eu

/* A callback that takes its time and then reads its arg: a use after free on a setter that
 * does not wait for it. */
static void slow_callback(void *arg) {
    struct slow_arg *a = (struct slow_arg *)arg;
    atomic_store(&a->entered, 1);
    sleep_ms(300);
    CHECK_EQ(a->magic, SLOW_MAGIC);
    atomic_store(&a->finished, 1);
}

static void slow_event(xcecli_ctx_t ctx, const xce_event_t *ev, void *arg) {
    (void)ctx;
    (void)ev;
    slow_callback(arg);
}

/* While a call runs the event handler on another thread, removing the handler waits for that
 * invocation: when the setter returns the caller frees the handler's arg, safely. */
static void test_set_event_handler_waits(void) {
    struct rig r;
    if (rig_start(&r, 100) != 0) return;
    struct slow_arg *a = calloc(1, sizeof *a);
    a->magic = SLOW_MAGIC;
    CHECK_EQ(xcecli_set_event_handler(r.ctx, slow_event, a), 0);
    struct caller c;
    memset(&c, 0, sizeof c);
    c.ctx = r.ctx;
    pthread_create(&c.thread, NULL, caller_main, &c);
    double deadline = now_s() + 10;
    while (!atomic_load(&a->entered) && now_s() < deadline) sleep_ms(1);
    CHECK(atomic_load(&a->entered));
    CHECK_EQ(xcecli_set_event_handler(r.ctx, NULL, NULL), 0);
    CHECK_EQ(atomic_load(&a->finished), 1);
    a->magic = 0;
    free(a);
    xcecli_wakeup(r.ctx);
    pthread_join(c.thread, NULL);
    xcecli_stop(r.ctx);
    rig_stop_servers(&r);
}

static void slow_log(int level, const char *msg, void *arg) {
    (void)level;
    (void)msg;
    slow_callback(arg);
}

/* The same for the process-wide log sink. */
static void test_set_log_handler_waits(void) {
    struct rig r;
    if (rig_start(&r, 100) != 0) return;
    struct slow_arg *a = calloc(1, sizeof *a);
    a->magic = SLOW_MAGIC;
    int old = xce_set_log_level(XCE_LOG_INFO);
    CHECK_EQ(xce_set_log_handler(slow_log, a), 0);
    struct caller c;
    memset(&c, 0, sizeof c);
    c.ctx = r.ctx;
    pthread_create(&c.thread, NULL, caller_main, &c);
    double deadline = now_s() + 10;
    while (!atomic_load(&a->entered) && now_s() < deadline) sleep_ms(1);
    CHECK(atomic_load(&a->entered));
    CHECK_EQ(xce_set_log_handler(NULL, NULL), 0);
    CHECK_EQ(atomic_load(&a->finished), 1);
    a->magic = 0;
    free(a);
    xce_set_log_level(old);
    xcecli_wakeup(r.ctx);
    pthread_join(c.thread, NULL);
    xcecli_stop(r.ctx);
    rig_stop_servers(&r);
}

/* ---- one wakeup ends every call ------------------------------------------------------- */

/* Four threads blocked on one context (10 s reply timeout): one xcecli_wakeup ends all four
 * with -EINTR, promptly; the context stays usable. */
static void test_wakeup_ends_every_blocked_call(void) {
    struct rig r;
    if (rig_start(&r, 10000) != 0) return;
    struct caller cs[4];
    callers_start(cs, 4, &r);
    double t0 = now_s();
    CHECK_EQ(xcecli_wakeup(r.ctx), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(cs[i].thread, NULL);
        CHECK_EQ(cs[i].rc, -EINTR);
        CHECK(cs[i].ended - t0 < 2.0);
    }
    xcecli_stop(r.ctx);
    rig_stop_servers(&r);
}

/* ---- call handles ---------------------------------------------------------------------- */

/* Cancelling a call handle ends the call made through it (blocked in a reply wait, or queued)
 * with -ECANCELED, and only that call; later calls through it fail at once. */
static void test_call_handles_cancel_one_call(void) {
    struct rig r;
    if (rig_start(&r, 10000) != 0) return;
    xcecli_call_t h1 = NULL, h2 = NULL;
    CHECK_EQ(xcecli_call_new(r.ctx, 0, &h1), 0);
    CHECK_EQ(xcecli_call_new(r.ctx, 0, &h2), 0);
    CHECK_EQ(xcecli_call_new(r.ctx, -1, &h2), -EINVAL);
    /* a context handle is not a call handle (only with a cast: the types differ) */
    CHECK_EQ(xcecli_call_cancel((xcecli_call_t)(void *)r.ctx), -EINVAL);
    struct caller c1, c2, c3;
    memset(&c1, 0, sizeof c1);
    memset(&c2, 0, sizeof c2);
    memset(&c3, 0, sizeof c3);
    c1.ctx = xcecli_call_ctx(h1); /* blocked in the reply wait (first in) */
    pthread_create(&c1.thread, NULL, caller_main, &c1);
    CHECK_EQ(wait_request_arrived(&r), 0);
    c2.ctx = xcecli_call_ctx(h2); /* queued behind it */
    pthread_create(&c2.thread, NULL, caller_main, &c2);
    c3.ctx = r.ctx; /* queued too, on the context's own handle */
    pthread_create(&c3.thread, NULL, caller_main, &c3);
    struct caller *queued[2] = {&c2, &c3};
    CHECK_EQ(wait_parked(queued, 2, 2), 0);
    double t0 = now_s();
    CHECK_EQ(xcecli_call_cancel(h2), 0); /* the queued one */
    pthread_join(c2.thread, NULL);
    CHECK_EQ(c2.rc, -ECANCELED);
    CHECK(c2.ended - t0 < 2.0);
    t0 = now_s();
    CHECK_EQ(xcecli_call_cancel(h1), 0); /* the one in the reply wait */
    pthread_join(c1.thread, NULL);
    CHECK_EQ(c1.rc, -ECANCELED);
    CHECK(c1.ended - t0 < 2.0);
    xce_controller_info_t *info = NULL;
    CHECK_EQ(xcecli_hello(xcecli_call_ctx(h1), &info), -ECANCELED); /* spent */
    /* c3 is not affected: still blocked until the stop */
    sleep_ms(100);
    CHECK(c3.ended == 0);
    xcecli_call_free(h1);
    xcecli_call_free(h2);
    xcecli_call_free(h2); /* freed already: nothing happens */
    CHECK_EQ(xcecli_call_cancel(h2), -E_XCE_CLOSED);
    CHECK_EQ(xcecli_hello(xcecli_call_ctx(h2), &info), -E_XCE_CLOSED);
    xcecli_call_free((xcecli_call_t)(void *)r.ctx); /* not a call handle: left alone (logged) */
    xcecli_stop(r.ctx);
    pthread_join(c3.thread, NULL);
    CHECK_EQ(c3.rc, -E_XCE_CLOSED);
    rig_stop_servers(&r);
}

/* A call handle's deadline bounds its calls; a handle of a stopped context fails at once. */
static void test_call_handle_deadline_and_closed_context(void) {
    struct rig r;
    if (rig_start(&r, 10000) != 0) return;
    xcecli_call_t h = NULL;
    CHECK_EQ(xcecli_call_new(r.ctx, 300, &h), 0);
    xce_controller_info_t *info = NULL;
    double t0 = now_s();
    int rc = xcecli_hello(xcecli_call_ctx(h), &info);
    CHECK(rc < 0 && rc != -EINVAL && rc != -E_XCE_CLOSED);
    CHECK(now_s() - t0 < 5.0);
    xcecli_stop(r.ctx);
    CHECK_EQ(xcecli_hello(xcecli_call_ctx(h), &info), -E_XCE_CLOSED);
    xcecli_stop(xcecli_call_ctx(h)); /* a call handle seen as a context: refused (logged) */
    CHECK_EQ(xcecli_hello(xcecli_call_ctx(h), &info), -E_XCE_CLOSED);
    xcecli_call_free(h);
    rig_stop_servers(&r);
}

/* ---- signals (F27) ----------------------------------------------------------------------- */

static xcecli_ctx_t g_sig_ctx;
static volatile sig_atomic_t g_sig_count, g_sig_woke;

static void on_alarm_request_stop(int sig) {
    (void)sig;
    g_sig_count++;
    xcecli_request_stop(g_sig_ctx); /* async-signal-safe */
}

static void on_alarm_try_wakeup(int sig) {
    (void)sig;
    g_sig_count++;
    if (xcecli_try_wakeup(g_sig_ctx) == 1) g_sig_woke++; /* async-signal-safe */
}

static void arm_timer(long first_us, long every_us) {
    struct itimerval it = {{every_us / 1000000, every_us % 1000000},
                           {first_us / 1000000, first_us % 1000000}};
    setitimer(ITIMER_REAL, &it, NULL);
}

/* A single-threaded daemon: SIGALRM's handler requests a stop. The call blocked when the
 * signal comes ends at once with -E_XCE_STOP_REQUESTED, and so does the next call, however
 * late it starts (the stop is a state, not a wake that could be lost or kept for another
 * call); after xcecli_clear_stop_request calls run again. */
static void test_request_stop_from_signal_handler(void) {
    struct rig r;
    if (rig_start(&r, 10000) != 0) return;
    g_sig_ctx = r.ctx;
    g_sig_count = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm_request_stop;
    sigaction(SIGALRM, &sa, NULL);
    arm_timer(200000, 0);
    double t0 = now_s();
    xce_controller_info_t *info = NULL;
    CHECK_EQ(xcecli_hello(r.ctx, &info), -E_XCE_STOP_REQUESTED);
    CHECK(now_s() - t0 < 3.0);
    CHECK_EQ(g_sig_count, 1);
    t0 = now_s();
    CHECK_EQ(xcecli_hello(r.ctx, &info), -E_XCE_STOP_REQUESTED); /* the next one too, at once */
    CHECK(now_s() - t0 < 0.5);
    CHECK_EQ(xcecli_clear_stop_request(r.ctx), 1);
    CHECK_EQ(xcecli_clear_stop_request(r.ctx), 0);
    CHECK_EQ(xcecli_request_stop(NULL), -EINVAL);
    signal(SIGALRM, SIG_IGN); /* a signal still pending after the disarm is dropped */
    xcecli_stop(r.ctx);
    rig_stop_servers(&r);
}

/* try_wakeup from a handler, 500 signals every 2 ms while one thread makes calls that block
 * (silent masters, 10 s replies): every call ends with -EINTR promptly, and the number of
 * handler returns of 1 covers every call that returned -EINTR; nothing is kept: a call
 * started after the storm runs to its own end (here: its 300 ms reply timeout). */
static void test_try_wakeup_from_signal_handler(void) {
    struct rig r;
    if (rig_start(&r, 10000) != 0) return;
    g_sig_ctx = r.ctx;
    g_sig_count = 0;
    g_sig_woke = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm_try_wakeup;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    arm_timer(2000, 2000);
    int eintr = 0, other = 0;
    double t0 = now_s();
    while (g_sig_count < 500 && now_s() - t0 < 60) {
        xce_controller_info_t *info = NULL;
        int rc = xcecli_hello(r.ctx, &info);
        if (rc == -EINTR)
            eintr++;
        else
            other++;
    }
    arm_timer(0, 0);
    signal(SIGALRM, SIG_IGN); /* a signal still pending after the disarm is dropped */
    printf("signals %d, try_wakeup returned 1: %d, calls -EINTR: %d, other: %d\n",
           (int)g_sig_count, (int)g_sig_woke, eintr, other);
    CHECK(g_sig_count >= 500);
    CHECK(eintr > 0);
    CHECK_EQ(other, 0);           /* every blocked call was ended by a wake */
    CHECK(g_sig_woke >= eintr);   /* each -EINTR call was reported woken at least once */
    /* nothing kept: a call after the storm waits for its own reply timeout */
    CHECK_EQ(xcecli_set_option(r.ctx, XCE_OPT_REPLY_TIMEOUT_MS, 300), 0);
    CHECK_EQ(xcecli_set_retry_config(r.ctx, &(xce_retry_config_t){0, 50, 50, 1.0}), 0);
    t0 = now_s();
    xce_controller_info_t *info = NULL;
    int rc = xcecli_hello(r.ctx, &info);
    CHECK(rc != -EINTR && rc < 0);
    CHECK(now_s() - t0 >= 0.25);
    xcecli_stop(r.ctx);
    rig_stop_servers(&r);
}

struct named_test {
    const char *name;
    void (*fn)(void);
};

static const struct named_test tests[] = {
    {"stop_while_calling", test_stop_while_calling},
    {"calls_racing_stop", test_calls_racing_stop},
    {"stop_from_event_callback", test_stop_from_event_callback},
    {"stop_from_log_sink", test_stop_from_log_sink},
    {"set_event_handler_waits", test_set_event_handler_waits},
    {"set_log_handler_waits", test_set_log_handler_waits},
    {"wakeup_ends_every_blocked_call", test_wakeup_ends_every_blocked_call},
    {"call_handles_cancel_one_call", test_call_handles_cancel_one_call},
    {"call_handle_deadline_and_closed_context", test_call_handle_deadline_and_closed_context},
    {"request_stop_from_signal_handler", test_request_stop_from_signal_handler},
    {"setter_and_stop_in_a_cycle", test_setter_and_stop_in_a_cycle},
    {"try_wakeup_from_signal_handler", test_try_wakeup_from_signal_handler},
};

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int ran = 0;
    if (getenv("XCE_LOG") == NULL) xce_set_log_level(XCE_LOG_OFF);
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(which, "all") == 0 || strcmp(which, tests[i].name) == 0) {
            int before = g_failures;
            tests[i].fn();
            fprintf(stderr, "%s: %s\n", tests[i].name, g_failures == before ? "ok" : "FAILED");
            ran++;
        }
    }
    if (ran == 0) {
        fprintf(stderr, "unknown test %s\n", which);
        return 2;
    }
    return g_failures == 0 ? 0 : 1;
}
