/* conf_raw.c - the conformance tests' blocking raw DERP client: speaks the protocol byte by
 * byte on the test thread (upgrade, ServerKey, ClientInfo, frames both ways) so negative cases
 * are exact, plus the key and payload helpers (keys owned by a shard, disco payloads). Every
 * read is bounded. Test thread only; owns each client's socket and buffer. */
#define _GNU_SOURCE
#include "conf_support.h"
#include <hd/hd_siphash.h>
#include "conf_support_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---------------------------------------------------------------- raw client */

int conf_raw_open(struct conf_raw *r, const struct conf_server *srv, const struct derp_keypair *kp)
{
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    if (kp)
        r->kp = *kp;
    else if (derp_keypair_generate(&r->kp) != 0)
        return -EIO;
    r->buf = malloc(CONF_RAW_BUF_SIZE);
    if (!r->buf)
        return -ENOMEM;
    r->fd = conf_tcp_connect(srv->port);
    return r->fd < 0 ? r->fd : 0;
}

void conf_raw_close(struct conf_raw *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    free(r->buf);
    r->buf = NULL;
}

void conf_raw_abort(struct conf_raw *r)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    if (r->fd >= 0)
        setsockopt(r->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    conf_raw_close(r);
}

int conf_raw_write(struct conf_raw *r, const void *data, size_t len)
{
    return conf_write_all(r->fd, data, len);
}

int conf_raw_send_frame(struct conf_raw *r, uint8_t type, const void *payload, size_t len)
{
    uint8_t h[DERP_FRAME_HEADER_LEN] = {type, (uint8_t)(len >> 24), (uint8_t)(len >> 16),
                                        (uint8_t)(len >> 8), (uint8_t)len};
    int rc = conf_write_all(r->fd, h, sizeof(h));
    return rc == 0 && len > 0 ? conf_write_all(r->fd, payload, len) : rc;
}

/* Reads more bytes into the buffer (compacting first). */
static int fill(struct conf_raw *r, int64_t deadline)
{
    if (r->off > 0) {
        memmove(r->buf, r->buf + r->off, r->len);
        r->off = 0;
    }
    if (r->len == CONF_RAW_BUF_SIZE)
        return -EMSGSIZE;
    int rc = conf_wait_readable(r->fd, deadline);
    if (rc < 0)
        return rc;
    ssize_t n = recv(r->fd, r->buf + r->len, CONF_RAW_BUF_SIZE - r->len, MSG_DONTWAIT);
    if (n == 0)
        return -ESHUTDOWN;
    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? 0 : -errno;
    r->len += (size_t)n;
    return 0;
}

int conf_raw_upgrade(struct conf_raw *r, const char *extra_headers)
{
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "GET /derp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
                     "Upgrade: DERP\r\n%s\r\n",
                     extra_headers ? extra_headers : "");
    int rc = conf_write_all(r->fd, req, (size_t)n);
    int64_t deadline = conf_now_ms() + CONF_IO_TIMEOUT_MS;
    while (rc == 0) {
        uint8_t *end = memmem(r->buf + r->off, r->len, "\r\n\r\n", 4);
        if (end) {
            size_t hl = (size_t)(end + 4 - (r->buf + r->off));
            if (hl >= sizeof(r->head))
                return -EMSGSIZE;
            memcpy(r->head, r->buf + r->off, hl);
            r->head[hl] = '\0';
            r->off += hl;
            r->len -= hl;
            r->http_status = (unsigned)strtoul(r->head + 9, NULL, 10);
            return 0;
        }
        rc = fill(r, deadline);
    }
    return rc;
}

int conf_raw_read(struct conf_raw *r, int timeout_ms, struct conf_frame *f)
{
    int64_t deadline = conf_now_ms() + timeout_ms;
    for (;;) {
        if (r->len >= DERP_FRAME_HEADER_LEN) {
            const uint8_t *h = r->buf + r->off;
            uint32_t len = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
            if (len > CONF_RAW_BUF_SIZE - DERP_FRAME_HEADER_LEN)
                return -EMSGSIZE;
            if (r->len >= DERP_FRAME_HEADER_LEN + (size_t)len) {
                f->type = h[0];
                f->len = len;
                f->p = h + DERP_FRAME_HEADER_LEN;
                r->off += DERP_FRAME_HEADER_LEN + len;
                r->len -= DERP_FRAME_HEADER_LEN + len;
                return 0;
            }
        }
        int rc = fill(r, deadline);
        if (rc < 0)
            return rc;
    }
}

int conf_raw_read_nka(struct conf_raw *r, int timeout_ms, struct conf_frame *f)
{
    int64_t deadline = conf_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - conf_now_ms();
        int rc = conf_raw_read(r, left > 0 ? (int)left : 0, f);
        if (rc < 0 || f->type != DERP_FRAME_KEEP_ALIVE)
            return rc;
    }
}

int conf_raw_read_server_key(struct conf_raw *r)
{
    struct conf_frame f;
    int rc = conf_raw_read(r, CONF_IO_TIMEOUT_MS, &f);
    if (rc < 0)
        return rc;
    if (f.type != DERP_FRAME_SERVER_KEY)
        return -EPROTO;
    return derp_server_key_decode(f.p, f.len, &r->server_key);
}

ssize_t conf_raw_client_info(const struct conf_raw *r, const char *json, uint8_t *buf, size_t size)
{
    if (!json)
        json = "{\"version\":2,\"CanAckPings\":false}";
    size_t jl = strlen(json);
    size_t payload = DERP_KEY_LEN + DERP_NONCE_LEN + crypto_box_MACBYTES + jl;
    if (size < DERP_FRAME_HEADER_LEN + payload)
        return -ENOSPC;
    uint8_t *p = buf + DERP_FRAME_HEADER_LEN;
    derp_frame_header_encode(buf, size, DERP_FRAME_CLIENT_INFO, (uint32_t)payload);
    memcpy(p, r->kp.pub.bytes, DERP_KEY_LEN);
    randombytes_buf(p + DERP_KEY_LEN, DERP_NONCE_LEN);
    if (crypto_box_easy(p + DERP_KEY_LEN + DERP_NONCE_LEN, (const uint8_t *)json, jl,
                        p + DERP_KEY_LEN, r->server_key.bytes, r->kp.priv.bytes) != 0)
        return -EIO;
    return (ssize_t)(DERP_FRAME_HEADER_LEN + payload);
}

int conf_raw_read_server_info(struct conf_raw *r, int64_t *version)
{
    struct conf_frame f;
    int rc = conf_raw_read(r, CONF_IO_TIMEOUT_MS, &f);
    if (rc < 0)
        return rc;
    if (f.type != DERP_FRAME_SERVER_INFO)
        return -EPROTO;
    struct derp_server_info info;
    uint8_t scratch[1024];
    rc = derp_server_info_open(f.p, f.len, &r->kp, &r->server_key, &info, scratch, sizeof(scratch));
    if (rc == 0 && version)
        *version = info.version;
    return rc;
}

int conf_raw_login_send(struct conf_raw *r, const struct conf_server *srv,
                        const struct derp_keypair *kp, const char *json, int64_t *sent_ms)
{
    uint8_t ci[2048];
    int rc = conf_raw_open(r, srv, kp);
    if (rc == 0)
        rc = conf_raw_upgrade(r, NULL);
    if (rc == 0 && r->http_status != 101)
        rc = -ENOPROTOOPT;
    if (rc == 0)
        rc = conf_raw_read_server_key(r);
    ssize_t n = rc == 0 ? conf_raw_client_info(r, json, ci, sizeof(ci)) : rc;
    if (n >= 0 && sent_ms)
        *sent_ms = conf_now_ms();
    return n < 0 ? (int)n : conf_raw_write(r, ci, (size_t)n);
}

int conf_raw_login(struct conf_raw *r, const struct conf_server *srv, const struct derp_keypair *kp,
                   const char *json)
{
    int rc = conf_raw_login_send(r, srv, kp, json, NULL);
    return rc == 0 ? conf_raw_read_server_info(r, NULL) : rc;
}

int conf_raw_login_via(struct conf_raw *r, const struct conf_server *srv, const char *src,
                       int rcvbuf, int mss, const char *json)
{
    int rc = conf_raw_open(r, srv, NULL);
    if (rc < 0)
        return rc;
    close(r->fd);
    r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (r->fd < 0)
        return -errno;
    if (rcvbuf)
        setsockopt(r->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (mss)
        setsockopt(r->fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss));
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (src && (inet_pton(AF_INET, src, &a.sin_addr) != 1 ||
                bind(r->fd, (struct sockaddr *)&a, sizeof(a)) != 0))
        return errno ? -errno : -EINVAL;
    struct sockaddr_in d = {.sin_family = AF_INET, .sin_port = htons(srv->port)};
    inet_pton(AF_INET, "127.0.0.1", &d.sin_addr);
    if (connect(r->fd, (struct sockaddr *)&d, sizeof(d)) != 0)
        return -errno;
    if ((rc = conf_raw_upgrade(r, NULL)) < 0 || (rc = conf_raw_read_server_key(r)) < 0)
        return rc;
    uint8_t ci[2048];
    ssize_t n = conf_raw_client_info(r, json, ci, sizeof(ci));
    if (n < 0)
        return (int)n;
    if ((rc = conf_raw_write(r, ci, (size_t)n)) < 0)
        return rc;
    return conf_raw_read_server_info(r, NULL);
}

int conf_raw_wait_closed(struct conf_raw *r, int timeout_ms)
{
    int64_t deadline = conf_now_ms() + timeout_ms;
    for (;;) {
        r->off = 0;
        r->len = 0; /* discard */
        int rc = fill(r, deadline);
        if (rc == -ESHUTDOWN || rc == -ECONNRESET)
            return 0;
        if (rc < 0)
            return rc;
    }
}

int conf_raw_expect_silence(struct conf_raw *r, int ms, struct conf_frame *f)
{
    int rc = conf_raw_read_nka(r, ms, f);
    if (rc == -ETIMEDOUT)
        return 0;
    return rc == 0 ? -EEXIST : rc;
}

int conf_raw_send_packet(struct conf_raw *r, const struct derp_pubkey *dst, const void *data,
                         size_t len)
{
    uint8_t h[DERP_FRAME_HEADER_LEN + DERP_KEY_LEN];
    derp_frame_header_encode(h, sizeof(h), DERP_FRAME_SEND_PACKET, (uint32_t)(DERP_KEY_LEN + len));
    memcpy(h + DERP_FRAME_HEADER_LEN, dst->bytes, DERP_KEY_LEN);
    int rc = conf_write_all(r->fd, h, sizeof(h));
    return rc == 0 && len > 0 ? conf_write_all(r->fd, data, len) : rc;
}

int conf_raw_read_packet(struct conf_raw *r, int timeout_ms, struct derp_pubkey *src,
                         const uint8_t **data, size_t *len)
{
    struct conf_frame f;
    int64_t deadline = conf_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - conf_now_ms();
        int rc = conf_raw_read(r, left > 0 ? (int)left : 0, &f);
        if (rc < 0)
            return rc;
        if (f.type != DERP_FRAME_RECV_PACKET)
            continue;
        if (f.len < DERP_KEY_LEN)
            return -EPROTO;
        memcpy(src->bytes, f.p, DERP_KEY_LEN);
        *data = f.p + DERP_KEY_LEN;
        *len = f.len - DERP_KEY_LEN;
        return 0;
    }
}

int conf_raw_ping_pong(struct conf_raw *r, uint64_t value, int timeout_ms)
{
    uint8_t d[DERP_PING_LEN];
    memcpy(d, &value, sizeof(d));
    int rc = conf_raw_send_frame(r, DERP_FRAME_PING, d, sizeof(d));
    int64_t deadline = conf_now_ms() + timeout_ms;
    while (rc == 0) {
        struct conf_frame f;
        int64_t left = deadline - conf_now_ms();
        rc = conf_raw_read(r, left > 0 ? (int)left : 0, &f);
        if (rc == 0 && f.type == DERP_FRAME_PONG && f.len == DERP_PING_LEN &&
            memcmp(f.p, d, DERP_PING_LEN) == 0)
            return 0;
    }
    return rc;
}

/* ---------------------------------------------------------------- keys, payloads */

unsigned conf_key_shard(const struct derp_pubkey *k, unsigned shards)
{
    static const uint8_t key[HD_SIPHASH_KEY_LEN] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                    8, 9, 10, 11, 12, 13, 14, 15};
    uint64_t h = hd_siphash13(key, k->bytes, 16); /* server_hash.h's srv_hash_node_key */
    return (unsigned)((h >> 32) % shards);
}

int conf_keypair_on_shard(struct derp_keypair *kp, unsigned shard, unsigned shards)
{
    for (int i = 0; i < 1000; i++) {
        if (derp_keypair_generate(kp) != 0)
            return -EIO;
        if (conf_key_shard(&kp->pub, shards) == shard)
            return 0;
    }
    return -EAGAIN;
}

void conf_disco_payload(uint8_t out[CONF_DISCO_LEN])
{
    static const uint8_t magic[] = {0x54, 0x53, 0xf0, 0x9f, 0x92, 0xac};
    memset(out, 0x5a, CONF_DISCO_LEN);
    memcpy(out, magic, sizeof(magic));
}
