/* bench_client.c - hderp-bench --load client: senders that load a relay the way tailscaled's
 * DERP client does. Each sender is a thread with a blocking socket (TCP_NODELAY, as Go sets it)
 * that logs in by itself (HTTP upgrade, ServerKey, ClientInfo, ServerInfo) and then writes
 * exactly one SendPacket frame per write(2), evenly paced (an absolute deadline every
 * size / rate, slept for with clock_nanosleep): Go's derp client flushes its bufio.Writer after
 * every packet, so the relay sees one frame per segment, never a batch. Over TLS one frame is one
 * SSL_write: one record, written by a BIO of ours that counts its write(2) calls. The counters
 * (frames written, write calls made) go into the JSON so a run proves the property.
 * Receivers stay on the generator's shards (bench_relay_gen.c): they read what comes.
 *
 * Threads: init/start/join/deinit on the main thread; one thread per local sender. A sender
 * thread owns its pair's struct bench_sender (the shards do not touch it in this mode) and
 * shares with the shards only atomics: the run's ready count, t0, failure, and its done flag. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "bench_relay_impl.h"
#include <hd/net_http.h>

/* Login reads and every write give up after this (a relay that stalls a sender this long is
 * broken; Go's client uses a 5 s write timeout and 10 s for the handshake). */
#define BENCH_CLIENT_IO_TIMEOUT_MS 10000
/* Read buffer of the login: the 101 head plus ServerKey and ServerInfo (all small). */
#define BENCH_CLIENT_RBUF (NET_HTTP_HEAD_SIZE_MAX + 4096)
/* Login frames we keep (ServerKey, ServerInfo); others seen before ServerInfo are skipped. */
#define BENCH_CLIENT_LOGIN_FRAME_MAX 1024
/* One SendPacket frame: header, destination key, payload. */
#define BENCH_CLIENT_FRAME_MAX (DERP_FRAME_HEADER_LEN + DERP_KEY_LEN + BENCH_SIZE_MAX)
/* Token bucket of a sender, as the batched generator's: a late wake-up sends at most this much
 * backlog at once, the rest is forfeited (and counted). */
#define BENCH_CLIENT_BUCKET_NS (BENCH_BUCKET_MS * 1000000ull)
/* At the end, a sender still running this long after the stop is blocked in the kernel. */
#define BENCH_CLIENT_JOIN_WAIT_S 1
/* Waiting for the warm-up to start: polled at this period. */
#define BENCH_CLIENT_POLL_NS 1000000ull

_Static_assert(BENCH_CLIENT_RBUF >= NET_HTTP_HEAD_SIZE_MAX + DERP_FRAME_HEADER_LEN,
               "a whole 101 head and a frame header fit the login buffer");

struct bench_csender {
    struct bench_run *r;
    struct bench_pair *p;
    pthread_t thread;
    bool started;
    int fd;
    SSL *ssl;
    _Atomic bool done;       /* a trailer went out: the shard's drain may end */
    uint64_t frames, writes; /* after login: frames written, write(2) calls made */
    struct hd_hist late_ns;  /* paced, in the window: how long after its deadline a packet went */
    uint8_t rbuf[BENCH_CLIENT_RBUF]; /* login only */
    size_t rlen;
    uint8_t frame[BENCH_CLIENT_FRAME_MAX];
};

static SSL_CTX *client_ssl_ctx;
static BIO_METHOD *count_bio_method;

/* ---- I/O: plain or TLS, every write(2) counted ------------------------------------------------
 */

static int bio_write(BIO *b, const char *buf, int len)
{
    struct bench_csender *c = BIO_get_data(b);
    ssize_t n = write(c->fd, buf, (size_t)len);
    c->writes++;
    BIO_clear_retry_flags(b);
    return n < 0 ? -1 : (int)n;
}

static int bio_read(BIO *b, char *buf, int len)
{
    struct bench_csender *c = BIO_get_data(b);
    ssize_t n = read(c->fd, buf, (size_t)len);
    BIO_clear_retry_flags(b);
    return n < 0 ? -1 : (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b, (void)num, (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

/* Writes all of buf: a blocking socket takes it in one call unless a signal or the timeout cuts
 * it (every call is counted, so a cut shows as writes > frames). */
static int io_write(struct bench_csender *c, const void *buf, size_t len)
{
    if (c->ssl) {
        int n = SSL_write(c->ssl, buf, (int)len);
        return n == (int)len ? 0 : -EIO;
    }
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write(c->fd, p, len);
        c->writes++;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 && errno == EAGAIN ? -ETIMEDOUT : n < 0 ? -errno : -EPIPE;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads more into the login buffer. */
static int io_fill(struct bench_csender *c)
{
    if (c->rlen == sizeof(c->rbuf))
        return -EMSGSIZE;
    size_t room = sizeof(c->rbuf) - c->rlen;
    ssize_t n = c->ssl ? SSL_read(c->ssl, c->rbuf + c->rlen, (int)room)
                       : read(c->fd, c->rbuf + c->rlen, room);
    if (n == 0)
        return -ESHUTDOWN;
    if (n < 0)
        return c->ssl ? -EIO : errno == EAGAIN ? -ETIMEDOUT : -errno;
    c->rlen += (size_t)n;
    return 0;
}

static void io_consume(struct bench_csender *c, size_t n)
{
    memmove(c->rbuf, c->rbuf + n, c->rlen - n);
    c->rlen -= n;
}

/* ---- Login ------------------------------------------------------------------------------------
 */

static const struct derp_client_url *sender_url(const struct bench_csender *c)
{
    return &c->r->cfg.urls[c->p->id % c->r->cfg.servers_count];
}

/* Main thread, before the sender's thread starts (so the fd never changes under bench_client_join):
 * the socket with Go's options (TCP_NODELAY) and our timeouts. */
static int tcp_socket(struct bench_csender *c)
{
    c->fd = socket(sender_url(c)->addr.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -errno;
    int one = 1;
    struct timeval tv = {.tv_sec = BENCH_CLIENT_IO_TIMEOUT_MS / 1000};
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return 0;
}

/* The name to send and verify: --tls-name, else the URL's host without port or brackets. */
static void tls_host(const struct bench_run *r, const struct derp_client_url *u, char *out,
                     size_t size)
{
    if (r->cfg.tls_name) {
        snprintf(out, size, "%s", r->cfg.tls_name);
        return;
    }
    const char *h = u->host, *end = strrchr(h, ':');
    if (h[0] == '[') {
        h++;
        end = strchr(h, ']');
    } else if (end && strchr(h, ':') != end) {
        end = NULL; /* a bare IPv6 address */
    }
    snprintf(out, size, "%.*s", end ? (int)(end - h) : (int)strlen(h), h);
}

static int tls_connect(struct bench_csender *c, const struct derp_client_url *u)
{
    char host[DERP_CLIENT_HOST_LEN_MAX + 1];
    tls_host(c->r, u, host, sizeof(host));
    c->ssl = SSL_new(client_ssl_ctx);
    BIO *b = c->ssl ? BIO_new(count_bio_method) : NULL;
    if (b == NULL)
        return -ENOMEM;
    BIO_set_data(b, c);
    SSL_set_bio(c->ssl, b, b);
    SSL_set_tlsext_host_name(c->ssl, host);
    if (!c->r->cfg.insecure) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);
        if (!X509_VERIFY_PARAM_set1_ip_asc(vp, host) &&
            !X509_VERIFY_PARAM_set1_host(vp, host, strlen(host)))
            return -EINVAL;
    }
    return SSL_connect(c->ssl) == 1 ? 0 : -ECONNABORTED;
}

/* The upgrade request (derp_client's headers: Upgrade: DERP, Connection: Upgrade), then the 101
 * head; the bytes after it stay in the buffer. */
static int upgrade(struct bench_csender *c, const struct derp_client_url *u)
{
    char req[NET_HTTP_HEAD_SIZE_MAX];
    struct net_http_hdr h = {"Upgrade", NET_HTTP_LIT("DERP")};
    struct net_http_req_spec spec = {.method = "GET",
                                     .target = net_http_cstr(u->path),
                                     .host = net_http_cstr(u->host),
                                     .headers = &h,
                                     .headers_count = 1,
                                     .content_length = -1,
                                     .connection = NET_HTTP_CONN_UPGRADE};
    int n = net_http_write_req(req, sizeof(req), &spec);
    if (n < 0)
        return n;
    int rc = io_write(c, req, (size_t)n);
    struct net_http_resp resp;
    net_http_resp_init(&resp, false);
    while (rc == 0) {
        rc = net_http_resp_parse(&resp, (const char *)c->rbuf, c->rlen);
        if (rc > 0) {
            io_consume(c, (size_t)rc);
            return resp.status == 101 ? 0 : -ENOPROTOOPT;
        }
        rc = rc == -EAGAIN ? io_fill(c) : -EPROTO;
    }
    return rc;
}

/* The next whole frame of the login: *type, payload at c->rbuf + 5 (len bytes), consumed by the
 * caller with io_consume(c, 5 + len). Frames over BENCH_CLIENT_LOGIN_FRAME_MAX are refused. */
static int login_frame(struct bench_csender *c, uint8_t *type, uint32_t *len)
{
    for (;;) {
        if (derp_frame_header_decode(c->rbuf, c->rlen, type, len) == 0) {
            if (*len > BENCH_CLIENT_LOGIN_FRAME_MAX)
                return -EMSGSIZE;
            if (c->rlen >= DERP_FRAME_HEADER_LEN + *len)
                return 0;
        }
        int rc = io_fill(c);
        if (rc < 0)
            return rc;
    }
}

static int login(struct bench_csender *c)
{
    const struct derp_client_url *u = sender_url(c);
    int rc = connect(c->fd, &u->addr.sa, u->addr.len) < 0 ? -errno : 0;
    if (rc == 0 && u->tls)
        rc = tls_connect(c, u);
    if (rc == 0)
        rc = upgrade(c, u);
    uint8_t type;
    uint32_t len;
    if (rc == 0)
        rc = login_frame(c, &type, &len);
    struct derp_pubkey server;
    if (rc == 0 && type != DERP_FRAME_SERVER_KEY)
        rc = -EPROTO;
    if (rc == 0)
        rc = derp_server_key_decode(c->rbuf + DERP_FRAME_HEADER_LEN, len, &server);
    if (rc < 0)
        return rc;
    io_consume(c, DERP_FRAME_HEADER_LEN + len);
    struct derp_client_info info = {.version = DERP_PROTOCOL_VERSION};
    snprintf(info.app_name, sizeof(info.app_name), "hderp-bench-client");
    ssize_t n =
        derp_client_info_seal(c->frame, sizeof(c->frame), &c->p->sender_kp, &server, &info, NULL);
    rc = n < 0 ? (int)n : io_write(c, c->frame, (size_t)n);
    while (rc == 0 && (rc = login_frame(c, &type, &len)) == 0) {
        if (type == DERP_FRAME_SERVER_INFO) {
            struct derp_server_info si;
            uint8_t plain[BENCH_CLIENT_LOGIN_FRAME_MAX];
            return derp_server_info_open(c->rbuf + DERP_FRAME_HEADER_LEN, len, &c->p->sender_kp,
                                         &server, &si, plain, sizeof(plain));
        }
        io_consume(c, DERP_FRAME_HEADER_LEN + len);
    }
    return rc;
}

/* ---- Sending ----------------------------------------------------------------------------------
 */

static bool stopped(const struct bench_run *r)
{
    return atomic_load(&r->client_stop) || atomic_load(&r->failure) < 0;
}

/* One SendPacket frame in one write (one SSL_write over TLS): the prefix was encoded at start,
 * the payload's header is stamped and the payload copied behind it. */
static int send_frame(struct bench_csender *c, uint64_t seq, uint64_t t, uint32_t flags)
{
    struct bench_sender *tx = &c->p->tx;
    const unsigned size = c->r->cfg.size;
    bench_payload_stamp(tx, seq, t, flags);
    memcpy(c->frame + DERP_FRAME_HEADER_LEN + DERP_KEY_LEN, tx->buf, size);
    int rc = io_write(c, c->frame, DERP_FRAME_HEADER_LEN + DERP_KEY_LEN + size);
    if (rc == 0)
        c->frames++;
    return rc;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000000u), .tv_nsec = (long)(t % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* From t0 (the warm-up's start) to the window's end: a packet every interval_ns (0: as fast as
 * writes go), the senders staggered over one interval so they do not fire together. */
static int send_loop(struct bench_csender *c, uint64_t t0, unsigned index)
{
    struct bench_run *r = c->r;
    struct bench_sender *tx = &c->p->tx;
    const unsigned size = r->cfg.size;
    const uint64_t warm_end = t0 + (uint64_t)(r->cfg.warmup_s * 1e9);
    const uint64_t end = warm_end + (uint64_t)(r->cfg.duration_s * 1e9);
    double per_sender_bps = r->cfg.rate_mbps * 1e6 / 8 / r->cfg.pairs_total;
    uint64_t interval = per_sender_bps > 0 ? (uint64_t)(size / per_sender_bps * 1e9) : 0;
    uint64_t next = t0 + interval * index / (r->cfg.pairs_count ? r->cfg.pairs_count : 1);
    bool measuring = false;
    while (!stopped(r)) {
        uint64_t now = hd_clock_ns();
        if (!measuring && now >= warm_end) {
            measuring = true;
            tx->first_seq = tx->seq;
        }
        if (now >= end)
            break;
        if (interval) {
            if (now < next) {
                sleep_until(next < end ? next : end);
                continue;
            }
            if (now - next > BENCH_CLIENT_BUCKET_NS) { /* woke late: forfeit the backlog */
                uint64_t missed = (now - next - BENCH_CLIENT_BUCKET_NS) / interval;
                tx->forfeited_bytes += measuring ? missed * size : 0;
                next += missed * interval;
            }
            if (measuring)
                hd_hist_record(&c->late_ns, now - next);
            next += interval;
        }
        int rc = send_frame(c, tx->seq, now, measuring ? BENCH_F_MEASURED : 0);
        if (rc < 0)
            return rc;
        atomic_fetch_add_explicit(&r->client_sent_bytes, size, memory_order_relaxed);
        tx->seq++;
        tx->sent_total++;
        tx->sent += measuring;
        tx->sent_bytes += measuring ? size : 0;
    }
    if (!measuring)
        tx->first_seq = tx->seq;
    tx->end_seq = tx->seq;
    return 0;
}

/* The window's sequence range, BENCH_TRAILERS times BENCH_TRAILER_GAP_MS apart (the receiver
 * may be in another process); done after the first. */
static int send_trailers(struct bench_csender *c)
{
    struct bench_sender *tx = &c->p->tx;
    for (unsigned i = 0; i < BENCH_TRAILERS && !stopped(c->r); i++) {
        if (i)
            sleep_until(hd_clock_ns() + BENCH_TRAILER_GAP_MS * 1000000ull);
        int rc = send_frame(c, tx->end_seq, tx->first_seq, BENCH_F_TRAILER);
        if (rc < 0)
            return rc;
        tx->trailers_sent++;
        atomic_store(&c->done, true);
    }
    return 0;
}

static void thread_fail(struct bench_csender *c, int rc)
{
    int none = 0;
    if (!atomic_load(&c->r->client_stop) &&
        atomic_compare_exchange_strong(&c->r->failure, &none, rc < 0 ? rc : -EIO))
        atomic_store(&c->r->failed_pair, c->p->id);
}

static void *sender_main(void *arg)
{
    struct bench_csender *c = arg;
    struct bench_run *r = c->r;
    prctl(PR_SET_TIMERSLACK, 1UL); /* pace to the microsecond, not the default 50 us slack */
    int rc = login(c);
    if (rc < 0) {
        thread_fail(c, rc);
        return NULL;
    }
    c->writes = c->frames = 0; /* the login's writes are not packets */
    ssize_t n = derp_frame_send_packet_prefix_encode(c->frame, sizeof(c->frame),
                                                     c->p->receiver_kp.pub.bytes, r->cfg.size);
    HD_ASSERT(n == DERP_FRAME_HEADER_LEN + DERP_KEY_LEN); /* login used the buffer */
    atomic_fetch_add(&r->ready_count, 1);
    uint64_t t0;
    while ((t0 = atomic_load(&r->t0_ns)) == 0 || hd_clock_ns() < t0) {
        if (stopped(r))
            return NULL;
        uint64_t poll = hd_clock_ns() + BENCH_CLIENT_POLL_NS; /* --start-at: may be far */
        sleep_until(t0 && t0 < poll ? t0 : poll);
    }
    rc = send_loop(c, t0, (unsigned)(c - r->clients));
    if (rc == 0)
        rc = send_trailers(c);
    if (rc < 0)
        thread_fail(c, rc);
    return NULL;
}

/* ---- Life (main thread) -----------------------------------------------------------------------
 */

static int ctx_create(const struct bench_config *cfg)
{
    client_ssl_ctx = SSL_CTX_new(TLS_method());
    if (client_ssl_ctx == NULL)
        return -ENOMEM;
    SSL_CTX_set_min_proto_version(client_ssl_ctx, TLS1_3_VERSION);
    if (cfg->insecure) {
        SSL_CTX_set_verify(client_ssl_ctx, SSL_VERIFY_NONE, NULL);
    } else {
        if (!SSL_CTX_load_verify_locations(client_ssl_ctx, cfg->ca_file, NULL))
            return -ENOENT;
        SSL_CTX_set_verify(client_ssl_ctx, SSL_VERIFY_PEER, NULL);
    }
    count_bio_method = BIO_meth_new(BIO_TYPE_SOCKET, "hderp-bench-count");
    if (count_bio_method == NULL)
        return -ENOMEM;
    BIO_meth_set_write(count_bio_method, bio_write);
    BIO_meth_set_read(count_bio_method, bio_read);
    BIO_meth_set_ctrl(count_bio_method, bio_ctrl);
    BIO_meth_set_create(count_bio_method, bio_create);
    return 0;
}

int bench_client_init(struct bench_run *r)
{
    r->clients = calloc(r->cfg.pairs_count, sizeof(*r->clients));
    if (r->clients == NULL)
        return -ENOMEM;
    for (unsigned i = 0; i < r->cfg.pairs_count; i++) {
        struct bench_csender *c = &r->clients[i];
        c->r = r;
        c->p = &r->pairs[i];
        c->fd = -1;
        hd_hist_init(&c->late_ns);
        atomic_store(&c->done, !c->p->has_tx);
    }
    bool tls = false;
    for (unsigned i = 0; i < r->cfg.servers_count; i++)
        tls |= r->cfg.urls[i].tls;
    return tls ? ctx_create(&r->cfg) : 0;
}

int bench_client_start(struct bench_run *r)
{
    signal(SIGPIPE, SIG_IGN); /* a relay that closes a sender is an EPIPE, not a kill */
    for (unsigned i = 0; i < r->cfg.pairs_count; i++) {
        struct bench_csender *c = &r->clients[i];
        if (!c->p->has_tx)
            continue;
        int rc = tcp_socket(c);
        if (rc < 0)
            return rc;
        rc = pthread_create(&c->thread, NULL, sender_main, c);
        if (rc != 0)
            return -rc;
        c->started = true;
    }
    return 0;
}

void bench_client_join(struct bench_run *r)
{
    atomic_store(&r->client_stop, true);
    for (unsigned i = 0; r->clients && i < r->cfg.pairs_count; i++) {
        struct bench_csender *c = &r->clients[i];
        if (!c->started)
            continue;
        /* A sender between trailers sees the stop within a gap; one blocked in a read or a
         * write (a stalled relay) is woken by shutting its socket down. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += BENCH_CLIENT_JOIN_WAIT_S;
        if (pthread_timedjoin_np(c->thread, NULL, &ts) != 0) {
            shutdown(c->fd, SHUT_RDWR);
            pthread_join(c->thread, NULL);
        }
        c->started = false;
    }
}

bool bench_client_done(const struct bench_run *r, const struct bench_pair *p)
{
    return atomic_load(&r->clients[p - r->pairs].done);
}

void bench_client_counts(const struct bench_run *r, uint64_t *frames, uint64_t *writes,
                         struct hd_hist *late)
{
    *frames = *writes = 0;
    hd_hist_init(late);
    for (unsigned i = 0; r->clients && i < r->cfg.pairs_count; i++) {
        *frames += r->clients[i].frames;
        *writes += r->clients[i].writes;
        hd_hist_merge(late, &r->clients[i].late_ns);
    }
}

void bench_client_deinit(struct bench_run *r)
{
    bench_client_join(r);
    for (unsigned i = 0; r->clients && i < r->cfg.pairs_count; i++) {
        SSL_free(r->clients[i].ssl);
        if (r->clients[i].fd >= 0)
            close(r->clients[i].fd);
    }
    free(r->clients);
    r->clients = NULL;
    SSL_CTX_free(client_ssl_ctx);
    client_ssl_ctx = NULL;
    BIO_meth_free(count_bio_method);
    count_bio_method = NULL;
}
