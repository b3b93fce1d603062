/* Free loopback ports for the test-owned controller nodes (cluster.c, nodes.c). */
#ifndef XCE_CTESTS_PORTS_H
#define XCE_CTESTS_PORTS_H

#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* Can `port` be bound on loopback right now? */
static inline int port_free(unsigned port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* A base port below Linux's ephemeral range (32768+) whose client ports base..base+n-1 and
 * raft ports base+1000.. (the cluster command's layout) are all free; 0 if none was found. */
static inline unsigned pick_base_port(int n) {
    unsigned seed = (unsigned)getpid() * 7919u + (unsigned)time(NULL) * 31u;
    for (int tries = 0; tries < 200; tries++) {
        unsigned base = 20000 + (seed + (unsigned)tries * 137u) % 10000;
        int ok = 1;
        for (unsigned i = 0; i < (unsigned)n && ok; i++)
            ok = port_free(base + i) && port_free(base + 1000 + i);
        if (ok) return base;
    }
    return 0;
}

#endif
