/* The physical floor for bench/request_path.py: the smallest HTTP/1.1 server that still does
 * what any server must (read a whole request by its Content-Length, answer it, keep the
 * connection), one thread, epoll, no parsing beyond that. Every request gets the same tiny JSON
 * answer; what is left of a round trip to it is the kernel's loopback and the client.
 *
 *   cc -O2 -o floor bench/floor.c && ./floor PORT
 */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>

#define MAX_FDS 4096
#define BUF (4 << 20) /* a 500-name ExtenderArgs is about 16 KB; Nodes mode is not measured here */

static const char ANSWER[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"Error\":\"\"}";

struct conn { char *buf; size_t len; };
static struct conn conns[MAX_FDS];

/* Bytes of the first whole request in c->buf, or 0 while it is incomplete. */
static size_t whole_request(struct conn *c) {
    char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t head = (size_t)(end - c->buf) + 4, body = 0;
    for (char *line = c->buf; line < end; ) {
        char *next = memmem(line, (size_t)(end - line) + 2, "\r\n", 2);
        if (!next) break;
        if ((size_t)(next - line) > 15 && strncasecmp(line, "content-length:", 15) == 0)
            body = strtoul(line + 15, NULL, 10);
        line = next + 2;
    }
    return c->len >= head + body ? head + body : 0;
}

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 8000, one = 1;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) || listen(lfd, 1024)) { perror("listen"); return 1; }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}, events[64];
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    for (;;) {
        int n = epoll_wait(ep, events, 64, -1);
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == lfd) {
                int cfd = accept(lfd, NULL, NULL);
                if (cfd < 0 || cfd >= MAX_FDS) { if (cfd >= 0) close(cfd); continue; }
                setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                if (!conns[cfd].buf) conns[cfd].buf = malloc(BUF);
                conns[cfd].len = 0;
                ev.events = EPOLLIN; ev.data.fd = cfd;
                epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev);
                continue;
            }
            struct conn *c = &conns[fd];
            ssize_t got = read(fd, c->buf + c->len, BUF - c->len);
            if (got <= 0) { epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL); close(fd); continue; }
            c->len += (size_t)got;
            size_t used;
            while ((used = whole_request(c)) > 0) {
                if (write(fd, ANSWER, sizeof ANSWER - 1) < 0) break;
                memmove(c->buf, c->buf + used, c->len - used);
                c->len -= used;
            }
            if (c->len == BUF) { epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL); close(fd); } /* no room: drop it */
        }
    }
}
