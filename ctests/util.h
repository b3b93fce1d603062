/* Small helpers shared by the C tests: checks that report file:line, and loopback listeners. */
#ifndef XCE_CTESTS_UTIL_H
#define XCE_CTESTS_UTIL_H

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <xce/xce.h>

static int g_failures;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            g_failures++;                                                             \
        }                                                                             \
    } while (0)

#define CHECK_EQ(a, b)                                                                   \
    do {                                                                                 \
        long long va_ = (long long)(a), vb_ = (long long)(b);                            \
        if (va_ != vb_) {                                                                \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %lld, %s = %lld\n", __FILE__, \
                    __LINE__, #a, va_, #b, vb_);                                         \
            g_failures++;                                                                \
        }                                                                                \
    } while (0)

#define CHECK_STR(a, b)                                                                    \
    do {                                                                                   \
        const char *sa_ = (a), *sb_ = (b);                                                 \
        if (sa_ == NULL || strcmp(sa_, sb_) != 0) {                                        \
            fprintf(stderr, "%s:%d: CHECK_STR failed: %s = \"%s\", want \"%s\"\n", __FILE__, \
                    __LINE__, #a, sa_ ? sa_ : "(null)", sb_);                              \
            g_failures++;                                                                  \
        }                                                                                  \
    } while (0)

/* A loopback TCP listener on an ephemeral port; returns the fd, port in *port. */
static inline int listen_local(uint16_t *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 512) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A loopback port nothing listens on (bound, then closed). */
static inline uint16_t closed_port(void) {
    uint16_t port = 0;
    int fd = listen_local(&port);
    if (fd >= 0) close(fd);
    return port;
}

/* A listener thread that accepts connections and keeps at most one open, never answering
 * (a silent controller): connects succeed, requests time out. */
struct silent_server {
    int fd;
    uint16_t port;
    pthread_t thread;
};

static inline void *silent_server_main(void *p) {
    struct silent_server *s = (struct silent_server *)p;
    int held = -1;
    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR) continue;
            break; /* listener shut down */
        }
        if (held >= 0) close(held);
        held = c;
    }
    if (held >= 0) close(held);
    return NULL;
}

static inline int silent_server_start(struct silent_server *s) {
    s->fd = listen_local(&s->port);
    if (s->fd < 0) return -1;
    return pthread_create(&s->thread, NULL, silent_server_main, s) == 0 ? 0 : -1;
}

static inline void silent_server_stop(struct silent_server *s) {
    shutdown(s->fd, SHUT_RDWR); /* wakes accept() */
    pthread_join(s->thread, NULL);
    close(s->fd);
}

/* A config with one master 127.0.0.1:port. */
static inline void config_local(xce_client_config_t *conf, uint16_t port) {
    char list[64];
    xce_client_config_init(conf);
    snprintf(list, sizeof list, "127.0.0.1:%u", (unsigned)port);
    xce_client_config_parse_masters(conf, list);
}

#endif
