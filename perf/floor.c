/* floor.c - derp-floor: the simplest relay that speaks enough DERP for hderp-bench and the
 * ping/echo probe, so a comparison can say how far a relay is from what the kernel charges for
 * the same work. Not a product and not hderp: no io_uring, no batching, no queues, no TLS, no
 * limits beyond a frame size; nothing of apps/derp or the framework.
 *
 * What it does: the HTTP upgrade of GET /derp (101, Derp-Public-Key; or nothing with
 * Derp-Fast-Start: 1), the ServerKey frame, a ClientInfo taken for its key alone (the sealed
 * JSON is not opened), a ServerInfo sealed to that key (the client checks it), then per
 * SendPacket one lookup of the destination key and one sendmsg(2) of the RecvPacket frame to
 * the destination's socket, from the thread that read it, as it arrives; Ping gets its Pong;
 * every other frame is ignored. Any other request gets a 200 (GET /debug/varz: the logged-in
 * connections as derp_current_connections, which perf/compare's idle-memory count reads).
 *
 * Threads: --threads N (default 1) event loops, each on an epoll set of its own; the listening
 * socket is in every set (EPOLLEXCLUSIVE) and an accepted connection stays with the thread that
 * accepted it. Sockets are blocking: a loop reads with MSG_DONTWAIT (level-triggered, it only
 * reads a socket epoll says is readable) and writes with a blocking sendmsg, so a destination
 * whose socket buffer is full stops the loop that sends to it (TCP backpressure, the simplest
 * policy there is). A destination's writes are serialised by its own mutex; the key table is
 * one hash table under a read-write lock, taken for reading per packet.
 *
 * Memory: a connection is one malloc at accept (its read buffer holds one largest frame), freed
 * when it closes. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define KEY_LEN     32
#define NONCE_LEN   24 /* NaCl box nonce */
#define HDR_LEN     5  /* DERP frame header: type (1), big-endian length (4) */
#define MAGIC       "DERP\xF0\x9F\x94\x91"
#define MAGIC_LEN   8
#define PACKET_MAX  (64 * 1024) /* derp: MaxPacketSize */
#define FRAME_MAX   (KEY_LEN + PACKET_MAX)
#define BUF_SIZE    (HDR_LEN + FRAME_MAX + 1) /* + 1: the HTTP head's terminator */
#define HTTP_MAX    8192  /* an upgrade request's head; larger ones are refused */
#define BUCKETS     65536 /* key table buckets (chained): a power of two */
#define THREADS_MAX 64
#define EVENTS_MAX  64
#define SERVER_INFO "{\"version\":2}"

enum frame_type {
    F_SERVER_KEY = 0x01,
    F_CLIENT_INFO = 0x02,
    F_SERVER_INFO = 0x03,
    F_SEND_PACKET = 0x04,
    F_RECV_PACKET = 0x05,
    F_PING = 0x12,
    F_PONG = 0x13,
};

enum conn_state { C_HTTP, C_LOGIN, C_RUN };

struct conn {
    int fd;
    enum conn_state state;
    bool keyed; /* in the key table under key */
    uint8_t key[KEY_LEN];
    struct conn *next;   /* bucket chain */
    pthread_mutex_t wmu; /* one writer at a time on fd */
    size_t have;         /* bytes in buf */
    uint8_t buf[BUF_SIZE];
};

static struct {
    uint8_t pub[KEY_LEN], priv[KEY_LEN];
    char pub_hex[2 * KEY_LEN + 1];
    int lfd;
    pthread_rwlock_t lock; /* the key table */
    struct conn *bucket[BUCKETS];
    atomic_long logged_in;
} g = {.lock = PTHREAD_RWLOCK_INITIALIZER};

static unsigned bucket_of(const uint8_t *key)
{
    uint32_t h;
    memcpy(&h, key, sizeof(h)); /* keys are uniformly random */
    return h & (BUCKETS - 1);
}

/* The connection logged in as key, or NULL; the caller holds g.lock. */
static struct conn *table_find(const uint8_t *key)
{
    for (struct conn *c = g.bucket[bucket_of(key)]; c; c = c->next)
        if (memcmp(c->key, key, KEY_LEN) == 0)
            return c;
    return NULL;
}

/* Log c in under its key; a newer login of the same key takes the older one's place. */
static void table_add(struct conn *c)
{
    pthread_rwlock_wrlock(&g.lock);
    struct conn **pp = &g.bucket[bucket_of(c->key)];
    for (; *pp; pp = &(*pp)->next)
        if (memcmp((*pp)->key, c->key, KEY_LEN) == 0) {
            struct conn *old = *pp;
            *pp = old->next;
            old->keyed = false;
            break;
        }
    c->next = g.bucket[bucket_of(c->key)];
    g.bucket[bucket_of(c->key)] = c;
    c->keyed = true;
    pthread_rwlock_unlock(&g.lock);
}

static void table_remove(struct conn *c)
{
    pthread_rwlock_wrlock(&g.lock);
    if (c->keyed) {
        struct conn **pp = &g.bucket[bucket_of(c->key)];
        while (*pp != c)
            pp = &(*pp)->next;
        *pp = c->next;
        c->keyed = false;
    }
    pthread_rwlock_unlock(&g.lock);
}

/* Write all of iov to c's socket (blocking); 0 or -errno. The caller holds c->wmu. */
static int write_all(struct conn *c, struct iovec *iov, int n)
{
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    while (m.msg_iovlen > 0) {
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        while (m.msg_iovlen > 0 && (size_t)w >= m.msg_iov->iov_len) {
            w -= (ssize_t)m.msg_iov->iov_len;
            m.msg_iov++;
            m.msg_iovlen--;
        }
        if (m.msg_iovlen > 0) {
            m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + w;
            m.msg_iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static void put_hdr(uint8_t *h, uint8_t type, uint32_t len)
{
    h[0] = type;
    h[1] = (uint8_t)(len >> 24);
    h[2] = (uint8_t)(len >> 16);
    h[3] = (uint8_t)(len >> 8);
    h[4] = (uint8_t)len;
}

/* One frame to c: header, then a and b (either may be empty). */
static int send_frame(struct conn *c, uint8_t type, const void *a, size_t alen, const void *b,
                      size_t blen)
{
    uint8_t h[HDR_LEN];
    put_hdr(h, type, (uint32_t)(alen + blen));
    struct iovec iov[3] = {{h, HDR_LEN}, {(void *)a, alen}, {(void *)b, blen}};
    pthread_mutex_lock(&c->wmu);
    int rc = write_all(c, iov, blen ? 3 : alen ? 2 : 1);
    pthread_mutex_unlock(&c->wmu);
    return rc;
}

/* SendPacket from src: RecvPacket (src's key, the payload) to the destination, if logged in.
 * The destination is found and its write lock taken under the table's read lock, so a closing
 * destination (table_remove, then its write lock) is not freed under our write. */
static void relay(struct conn *src, const uint8_t *body, size_t len)
{
    if (len < KEY_LEN)
        return;
    pthread_rwlock_rdlock(&g.lock);
    struct conn *dst = table_find(body);
    if (!dst) {
        pthread_rwlock_unlock(&g.lock);
        return; /* not here: derper would answer PeerGone; the floor drops it */
    }
    pthread_mutex_lock(&dst->wmu);
    pthread_rwlock_unlock(&g.lock);
    uint8_t h[HDR_LEN];
    put_hdr(h, F_RECV_PACKET, (uint32_t)len);
    struct iovec iov[3] = {
        {h, HDR_LEN}, {src->key, KEY_LEN}, {(void *)(body + KEY_LEN), len - KEY_LEN}};
    (void)write_all(dst, iov, 3); /* a dead destination is closed by its own reader */
    pthread_mutex_unlock(&dst->wmu);
}

/* ClientInfo: the client's key (the sealed JSON after it is not opened), then ServerInfo sealed
 * to that key, which the client opens before it counts itself logged in. */
static int login(struct conn *c, const uint8_t *body, size_t len)
{
    if (len < KEY_LEN + NONCE_LEN)
        return -EPROTO;
    memcpy(c->key, body, KEY_LEN);
    uint8_t nonce[NONCE_LEN], sealed[crypto_box_MACBYTES + sizeof(SERVER_INFO) - 1];
    randombytes_buf(nonce, sizeof(nonce));
    if (crypto_box_easy(sealed, (const uint8_t *)SERVER_INFO, sizeof(SERVER_INFO) - 1, nonce,
                        c->key, g.priv) != 0)
        return -EPROTO; /* a low-order key */
    table_add(c);
    c->state = C_RUN;
    atomic_fetch_add(&g.logged_in, 1);
    return send_frame(c, F_SERVER_INFO, nonce, sizeof(nonce), sealed, sizeof(sealed));
}

static int on_frame(struct conn *c, uint8_t type, const uint8_t *body, size_t len)
{
    if (c->state == C_LOGIN)
        return type == F_CLIENT_INFO ? login(c, body, len) : -EPROTO;
    if (type == F_SEND_PACKET)
        relay(c, body, len);
    else if (type == F_PING && len == 8)
        return send_frame(c, F_PONG, body, len, NULL, 0);
    return 0;
}

/* The frames complete in c->buf, each handled as it is found; a partial one moves to the front.
 * 0, or -errno to close. */
static int frames(struct conn *c)
{
    size_t off = 0;
    while (c->have - off >= HDR_LEN) {
        const uint8_t *h = c->buf + off;
        uint32_t len = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
        if (len > FRAME_MAX)
            return -EMSGSIZE;
        if (c->have - off < HDR_LEN + len)
            break;
        int rc = on_frame(c, h[0], h + HDR_LEN, len);
        if (rc < 0)
            return rc;
        off += HDR_LEN + len;
    }
    memmove(c->buf, c->buf + off, c->have - off);
    c->have -= off;
    return 0;
}

static int http_reply(struct conn *c, const char *status, const char *body)
{
    char out[512];
    int n = snprintf(out, sizeof(out),
                     "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     status, strlen(body), body);
    struct iovec iov = {out, (size_t)n};
    pthread_mutex_lock(&c->wmu);
    (void)write_all(c, &iov, 1);
    pthread_mutex_unlock(&c->wmu);
    return -ECONNRESET; /* one request per connection */
}

/* The upgrade: 101 (unless fast start: the client then reads frames at once) and ServerKey. */
static int upgrade(struct conn *c, bool fast_start)
{
    char head[256];
    int n = 0;
    if (!fast_start)
        n = snprintf(head, sizeof(head),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: DERP\r\n"
                     "Connection: Upgrade\r\nDerp-Version: 2\r\nDerp-Public-Key: %s\r\n\r\n",
                     g.pub_hex);
    uint8_t frame[HDR_LEN + MAGIC_LEN + KEY_LEN];
    put_hdr(frame, F_SERVER_KEY, MAGIC_LEN + KEY_LEN);
    memcpy(frame + HDR_LEN, MAGIC, MAGIC_LEN);
    memcpy(frame + HDR_LEN + MAGIC_LEN, g.pub, KEY_LEN);
    struct iovec iov[2] = {{head, (size_t)n}, {frame, sizeof(frame)}};
    pthread_mutex_lock(&c->wmu);
    int rc = write_all(c, n ? iov : iov + 1, n ? 2 : 1);
    pthread_mutex_unlock(&c->wmu);
    c->state = C_LOGIN;
    return rc;
}

/* The request head, once complete: /derp is upgraded (the DERP bytes behind the head stay in
 * buf), anything else answered and closed. 0 (need more or upgraded) or -errno to close. */
static int http(struct conn *c)
{
    c->buf[c->have] = 0; /* on_readable leaves a byte free for it */
    char *end = strstr((char *)c->buf, "\r\n\r\n");
    if (!end)
        return c->have >= HTTP_MAX ? -EMSGSIZE : 0;
    size_t head = (size_t)(end + 4 - (char *)c->buf);
    char *req = (char *)c->buf;
    *end = 0;
    if (strncmp(req, "GET /debug/varz ", 16) == 0) {
        char body[64];
        snprintf(body, sizeof(body), "derp_current_connections %ld\n", atomic_load(&g.logged_in));
        return http_reply(c, "200 OK", body);
    }
    if (strncmp(req, "GET /derp ", 10) != 0 && strncmp(req, "GET /derp?", 10) != 0)
        return http_reply(c, "200 OK", "derp-floor: a measuring relay (perf/floor.c)\n");
    int rc = upgrade(c, strcasestr(req, "\r\nDerp-Fast-Start: 1") != NULL);
    memmove(c->buf, c->buf + head, c->have - head);
    c->have -= head;
    return rc;
}

/* Readable: one read, then whatever it completed. 0, or -errno to close. */
static int on_readable(struct conn *c)
{
    ssize_t r = recv(c->fd, c->buf + c->have, BUF_SIZE - 1 - c->have, MSG_DONTWAIT);
    if (r == 0)
        return -ECONNRESET;
    if (r < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    c->have += (size_t)r;
    if (c->state == C_HTTP) {
        int rc = http(c);
        if (rc < 0 || c->state == C_HTTP)
            return rc;
    }
    return frames(c);
}

static void conn_close(int ep, struct conn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->state == C_RUN)
        atomic_fetch_sub(&g.logged_in, 1);
    table_remove(c);
    pthread_mutex_lock(&c->wmu); /* a sender that found c before it left the table is done */
    pthread_mutex_unlock(&c->wmu);
    close(c->fd);
    pthread_mutex_destroy(&c->wmu);
    free(c);
}

static void on_accept(int ep)
{
    int fd = accept4(g.lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return; /* EAGAIN (another loop took it), or EMFILE: the next one may fit */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct conn *c = malloc(sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    c->fd = fd;
    c->state = C_HTTP;
    c->keyed = false;
    c->next = NULL;
    c->have = 0;
    pthread_mutex_init(&c->wmu, NULL);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        close(fd);
        pthread_mutex_destroy(&c->wmu);
        free(c);
    }
}

static void *loop(void *arg)
{
    int ep = (int)(intptr_t)arg;
    struct epoll_event evs[EVENTS_MAX];
    for (;;) {
        int n = epoll_wait(ep, evs, EVENTS_MAX, -1);
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c)
                on_accept(ep);
            else if (on_readable(c) < 0)
                conn_close(ep, c);
        }
    }
    return NULL;
}

static int listen_on(const char *addr)
{
    char host[64];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof(host))
        return -EINVAL;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host[0] ? host : "0.0.0.0", &sa.sin_addr) != 1)
        return -EINVAL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    /* SO_REUSEADDR: perf/run-bench holds the port (bound, never listening) until we stop */
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4096) < 0)
        return -errno;
    return fd;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: derp-floor [-a ADDR:PORT] [--threads N]\n"
               "  The simplest DERP relay (plain HTTP only), a floor to measure relays against:\n"
               "  per SendPacket one lookup and one sendmsg to the destination, from N epoll\n"
               "  threads (default 1). -a defaults to 127.0.0.1:3340. See perf/README.md.\n");
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1:3340";
    int threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(argv[i], "-a") || !strcmp(argv[i], "--addr")) && i + 1 < argc) {
            addr = argv[++i];
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
            if (threads < 1 || threads > THREADS_MAX) {
                fprintf(stderr, "derp-floor: --threads %s: expected 1..%d\n", argv[i], THREADS_MAX);
                return 2;
            }
        } else {
            fprintf(stderr, "derp-floor: unknown or incomplete argument %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (sodium_init() < 0 || crypto_box_keypair(g.pub, g.priv) != 0)
        return 1;
    sodium_bin2hex(g.pub_hex, sizeof(g.pub_hex), g.pub, KEY_LEN);
    signal(SIGPIPE, SIG_IGN);
    g.lfd = listen_on(addr);
    if (g.lfd < 0) {
        fprintf(stderr, "derp-floor: cannot listen on %s: %s\n", addr, strerror(-g.lfd));
        return 1;
    }
    pthread_t tid[THREADS_MAX];
    for (int i = 0; i < threads; i++) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = NULL};
        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, g.lfd, &ev) < 0 ||
            pthread_create(&tid[i], NULL, loop, (void *)(intptr_t)ep) != 0) {
            fprintf(stderr, "derp-floor: thread %d: %s\n", i, strerror(errno));
            return 1;
        }
    }
    fprintf(stderr, "derp-floor: listening on %s, %d thread(s), key %s\n", addr, threads,
            g.pub_hex);
    pthread_join(tid[0], NULL);
    return 0;
}
