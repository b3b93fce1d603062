/* The callers' ABI (c-api.md "Signatures the existing callers already use"): a program written
 * against the seeds' design, calling
 *     xce_job_t **out; int n = xcecli_joblist(ctx, &out);
 * then iterating the n jobs (or up to the NULL entry) and releasing everything with one
 * xce_free_joblist(out). Also pins the other fixed signatures at compile time. Runs against a
 * real 3-node cluster: test_oldcaller PATH-TO-xce-controller (exit 77 = skipped when it is not
 * there). Clean under ASan and valgrind (scripts/ctest.sh). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <sys/stat.h>

#include "cluster.h"
#include "util.h"

/* The seeds' signatures, exactly: a different parameter list fails to compile here. */
static int (*const joblist_fn)(xcecli_ctx_t, xce_job_t ***) = xcecli_joblist;
static void (*const free_joblist_fn)(xce_job_t **) = xce_free_joblist;
typedef int (*seeds_reconnect_cb)(xcecli_ctx_t ctx, void *arg);
static int (*const set_handler_fn)(xcecli_ctx_t, seeds_reconnect_cb, void *) =
    xcecli_set_reconnect_handler;
_Static_assert(XCE_MAXHOSTNAME_LEN == 256, "XCE_MAXHOSTNAME_LEN");
_Static_assert(sizeof(((xce_client_config_t *)0)->masters[0]) == 256, "masters[] of 256");

#define NJOBS 3

static int on_reconnect(xcecli_ctx_t ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 0;
}

int main(int argc, char **argv) {
    struct stat sb;
    if (argc < 2 || stat(argv[1], &sb) != 0) {
        printf("SKIP: no xce-controller (%s)\n", argc > 1 ? argv[1] : "none given");
        return 77;
    }
    xce_retry_config_t defaults = XCE_RETRY_DEFAULTS;
    CHECK_EQ(defaults.max_retries, 20);

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
    CHECK_EQ(set_handler_fn(ctx, on_reconnect, NULL), 0);
    CHECK_EQ(xcecli_set_retry_config(ctx, &defaults), 0);

    /* An empty cluster: count 0, and still an array to free (just the NULL entry). */
    xce_job_t **out = NULL;
    int n = joblist_fn(ctx, &out);
    CHECK_EQ(n, 0);
    CHECK(out != NULL && out[0] == NULL);
    free_joblist_fn(out);

    uint64_t ids[NJOBS];
    for (int i = 0; i < NJOBS; i++) {
        char name[32];
        snprintf(name, sizeof name, "old-caller-%d", i);
        /* Job 1 leaves user and queue unset: they come back as "" ("normal" queue). */
        xce_job_spec_t spec = {0, name, i == 1 ? NULL : "alice", NULL, "/bin/true", 1, 64};
        CHECK_EQ(xcecli_jobsubmit(ctx, &spec, &ids[i]), 0);
    }

    /* The old caller's loop, exactly as the seeds' callers write it. */
    out = NULL;
    n = xcecli_joblist(ctx, &out);
    CHECK_EQ(n, NJOBS);
    if (n < 0) fprintf(stderr, "joblist: %d (%s)\n", n, xce_strerror(n));
    int seen = 0;
    for (int i = 0; i < n; i++) {
        xce_job_t *j = out[i];
        CHECK(j != NULL);
        if (!j) continue;
        CHECK(j->name != NULL && j->user != NULL && j->queue != NULL && j->command != NULL &&
              j->pend_reason != NULL && j->exec_host != NULL);
        for (int k = 0; k < NJOBS; k++) {
            char name[32];
            snprintf(name, sizeof name, "old-caller-%d", k);
            if (j->jobid == ids[k]) {
                seen++;
                CHECK_STR(j->name, name);
                CHECK_STR(j->user, k == 1 ? "" : "alice");
                CHECK_STR(j->command, "/bin/true");
            }
        }
        printf("job %" PRIu64 " %s user=\"%s\" queue=%s\n", j->jobid, j->name, j->user, j->queue);
    }
    CHECK_EQ(seen, NJOBS);
    if (n >= 0) {
        /* NULL-terminated: a caller may also walk it without the count. */
        int walked = 0;
        for (xce_job_t **p = out; *p; p++) walked++;
        CHECK_EQ(walked, n);
        xce_free_joblist(out);
    }

    /* The filtered listing is a separate export with its own free function. */
    xce_job_filter_t f = {"alice", NULL, 0, 0};
    xce_job_t *flat = NULL;
    n = xcecli_joblist_filter(ctx, &f, &flat);
    CHECK_EQ(n, NJOBS - 1);
    for (int i = 0; i < n; i++) CHECK_STR(flat[i].user, "alice");
    if (n > 0) xce_free_jobs(flat, (size_t)n);

    /* New callers: the same listing in pages, all from
     * one snapshot; and a limit over the whole listing. The controller keeps 4 KiB of a page
     * for the envelope: 4400 bytes leave room for a job or two per page. */
    for (int limit = 0; limit <= 2; limit += 2) {
        xce_job_filter_t all = {NULL, NULL, 0, (uint32_t)limit};
        xce_joblist_pager *pager = NULL;
        CHECK_EQ(xcecli_joblist_open(ctx, &all, 4400, &pager), 0);
        int total = 0, pages = 0, found = 0;
        for (;;) {
            xce_job_t *page = NULL;
            int m = xcecli_joblist_next(pager, &page);
            if (m == -ESTALE) { /* started over: drop what we have */
                total = found = pages = 0;
                continue;
            }
            if (m < 0) fprintf(stderr, "joblist_next: %d (%s)\n", m, xce_strerror(m));
            CHECK(m >= 0);
            if (m <= 0) break;
            pages++;
            total += m;
            for (int i = 0; i < m; i++)
                for (int k = 0; k < NJOBS; k++) found += page[i].jobid == ids[k];
            xce_free_jobs(page, (size_t)m);
        }
        xcecli_joblist_close(pager);
        int want = limit ? limit : NJOBS;
        CHECK_EQ(total, want);
        CHECK_EQ(found, want);
        CHECK(pages >= 1);
        printf("paged listing (limit %d): %d jobs in %d pages\n", limit, total, pages);
    }
    xcecli_joblist_close(NULL);

    xcecli_stop(ctx);
    cluster_stop(&c);
    if (g_failures) {
        fprintf(stderr, "%d check(s) failed\n", g_failures);
        return 1;
    }
    printf("old caller: xcecli_joblist(ctx, &out) listed %d jobs and freed them\n", NJOBS);
    return 0;
}
