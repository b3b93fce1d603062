/* examples/hello.c — the smallest complete libxce client (the README's snippet, checked).
 *
 * Connects to the first reachable controller of MASTERS, asks who answered and who is primary,
 * and stops. Every failure is reported with xce_strerror() and, for a failed call, with the
 * context's last error (attempts, time, what each master said).
 *
 *   cc hello.c $(pkg-config --cflags --libs xce) -o hello
 *   ./hello 127.0.0.1:9991,127.0.0.1:9992,127.0.0.1:9993
 *
 * Exit status: 0 success, 1 the cluster could not be reached or did not answer, 2 bad usage. */
#include <stdio.h>

#include <xce/xce.h>

int main(int argc, char **argv) {
    const char *masters = argc > 1 ? argv[1] : "127.0.0.1:9991,127.0.0.1:9992,127.0.0.1:9993";
    if (argc > 2) {
        fprintf(stderr, "usage: %s [HOST:PORT,HOST:PORT,...]\n", argv[0]);
        return 2;
    }

    xce_client_config_t conf;
    xce_client_config_init(&conf);
    int rc = xce_client_config_parse_masters(&conf, masters);
    if (rc < 0) {
        fprintf(stderr, "bad master list \"%s\": %s\n", masters, xce_strerror(rc));
        return 2;
    }

    xcecli_ctx_t ctx = NULL;
    rc = xcecli_start(&conf, &ctx);
    if (rc < 0) {
        /* No context exists: nothing to stop. rc is the last master's transport error. */
        fprintf(stderr, "no controller reachable: %s\n", xce_strerror(rc));
        return 1;
    }

    xce_controller_info_t *info = NULL;
    rc = xcecli_hello(ctx, &info); /* fails over by itself; < 0 e.g. -E_XCE_NOT_READY */
    if (rc < 0) {
        char why[1024];
        if (xcecli_last_error_text(ctx, why, sizeof why) < 0) why[0] = '\0';
        fprintf(stderr, "hello: %s\n  %s\n", xce_strerror(rc), why);
    } else {
        printf("controller %u answered; primary is %u at %s:%u (term %llu, version %s)\n",
               info->id, info->primary_id, info->primary_host, (unsigned)info->primary_port,
               (unsigned long long)info->term, info->version);
        xce_free_controller_info(info); /* the library's free, never free() */
    }
    xcecli_stop(ctx);
    return rc < 0 ? 1 : 0;
}
