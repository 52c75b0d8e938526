/* tls_conn.c - userspace TLS 1.3 records as a net codec, after the handshake: decode opens
 * records in place and delivers their plaintext (application data), handles KeyUpdate (answering
 * update_requested with our own), ignores NewSessionTicket, turns close_notify into a clean
 * close (after our own close_notify) and any other alert or bad record into a logged close;
 * encode takes the connection's queued plaintext frames and seals them, coalesced, into 16 KiB
 * records in pool frames. Runs on the connection's shard; never allocates beyond pool frames.
 * Owns: the connection's struct tls_conn (keys) until the codec is released. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "tls_impl.h"

/* Plaintext sealed per output frame: three full records (49,218 bytes on the wire) fit the
 * default 64 KiB frame class; more iovecs than this per batch end the batch early. */
#define TLS_SEAL_RECORDS_PER_FRAME 3u
#define TLS_SEAL_BATCH             (TLS_SEAL_RECORDS_PER_FRAME * TLS_RECORD_PLAINTEXT_MAX)
#define TLS_SEAL_FRAME_SIZE        (TLS_SEAL_RECORDS_PER_FRAME * TLS_RECORD_SIZE_MAX)
#define TLS_SEAL_IOV_MAX           64u
/* A KeyUpdate or alert record: header + 5-byte message + type + tag, rounded up. */
#define TLS_CONTROL_RECORD_SIZE 64u

_Static_assert(TLS_SEAL_FRAME_SIZE <= 65536u, "fits the default large frame class");
_Static_assert(TLS_RECORD_HEADER_LEN + TLS_HANDSHAKE_HEADER_LEN + 1 + 1 + TLS_AEAD_TAG_LEN <=
                   TLS_CONTROL_RECORD_SIZE,
               "a KeyUpdate record fits a control frame");

void tls_conn_free(struct tls_conn *t)
{
    struct tls_shard *ts = t->ts;
    if (t->hs)
        tls_handshake_free(ts, t->hs);
    if (t->pend)
        hd_frame_unref(ts->shard, t->pend);
    tls_record_state_deinit(&t->rx);
    tls_record_state_deinit(&t->tx);
    hd_slab_put(ts->conns, t);
}

int tls_kick(struct net_conn *c)
{
    struct hd_frame *f = hd_frame_get(net_conn_shard(c), 1);
    if (f == NULL)
        return -ENOBUFS;
    int rc = net_conn_send(c, f, 0, 0);
    hd_frame_unref(net_conn_shard(c), f);
    return rc == -EPIPE ? 0 : rc; /* closing with a flush: the bytes go out anyway */
}

int tls_wire_send(struct net_conn *c, struct hd_frame *f, uint32_t len)
{
    int rc = net_conn_wire_queue(c, f, 0, len);
    return rc < 0 ? rc : tls_kick(c);
}

static void rec_log(struct net_conn *c, const char *what, int reason)
{
    char peer[64];
    net_addr_format(net_conn_peer(c), peer, sizeof(peer));
    hd_log_rl(HD_LOG_WARN, "tls: s%u %s: closing: %s (%s)", hd_shard_id(net_conn_shard(c)), peer,
              what, strerror(-reason));
}

/* ---------------------------------------------------------------- encode */

/* Seal a KeyUpdate, then move the write direction to the next key. kick: from a decode (a
 * flush must follow); encode's caller sends the wire queue anyway. Returns 0 or -errno. */
static int send_key_update(struct net_conn *c, struct tls_conn *t, bool kick)
{
    struct hd_frame *f = hd_frame_get(net_conn_shard(c), TLS_CONTROL_RECORD_SIZE);
    if (f == NULL)
        return -ENOBUFS;
    ssize_t n = tls_record_seal_key_update(&t->tx, false, f->data, f->size);
    int rc = n < 0 ? (int)n : tls_record_state_update(&t->tx);
    if (rc < 0) {
        hd_frame_unref(net_conn_shard(c), f);
        return rc;
    }
    f->len = (uint32_t)n;
    t->ts->stats.key_updates_out++;
    return kick ? tls_wire_send(c, f, f->len) : net_conn_wire_queue(c, f, 0, f->len);
}

/* Sealing order fixes the record order: everything sealed goes straight to the wire queue. */
static int seal_into_frame(struct net_conn *c, struct tls_conn *t, const struct iovec *iov,
                           size_t n, size_t total)
{
    struct hd_frame *f = hd_frame_get(net_conn_shard(c), TLS_SEAL_FRAME_SIZE);
    if (f == NULL)
        return -ENOBUFS; /* frame pool exhausted: this connection cannot progress */
    size_t consumed = 0;
    ssize_t w = tls_record_seal_iov(&t->tx, iov, n, &consumed, f->data, f->size);
    if (w < 0 || consumed != total) {
        hd_frame_unref(net_conn_shard(c), f);
        return w < 0 ? (int)w : -EIO;
    }
    f->len = (uint32_t)w;
    return net_conn_wire_queue(c, f, 0, (uint32_t)w);
}

/* One output frame's worth: gather up to TLS_SEAL_BATCH bytes of queued plaintext, seal it.
 * *progress: some entry was taken. Returns 0 or -errno. */
static int encode_batch(struct net_conn *c, struct tls_conn *t, bool *progress)
{
    struct iovec iov[TLS_SEAL_IOV_MAX];
    struct hd_frame *done[TLS_SEAL_IOV_MAX];
    size_t n = 0, done_count = 0, total = 0;
    while (n < TLS_SEAL_IOV_MAX && done_count < TLS_SEAL_IOV_MAX && total < TLS_SEAL_BATCH) {
        if (t->pend == NULL) {
            t->pend = net_conn_plain_take(c, &t->pend_off, &t->pend_len);
            if (t->pend == NULL)
                break;
        }
        size_t take = t->pend_len < TLS_SEAL_BATCH - total ? t->pend_len : TLS_SEAL_BATCH - total;
        if (take > 0) {
            iov[n].iov_base = t->pend->data + t->pend_off;
            iov[n++].iov_len = take;
            total += take;
        }
        if (take == t->pend_len) { /* whole entry: its frame goes once sealed */
            done[done_count++] = t->pend;
            t->pend = NULL;
        } else {
            t->pend_off += (uint32_t)take;
            t->pend_len -= (uint32_t)take;
        }
    }
    *progress = n > 0 || done_count > 0;
    int rc = 0;
    if (total > 0 && tls_record_state_update_due(&t->tx))
        rc = send_key_update(c, t, false); /* AES-GCM's per-key limit (RFC 8446 §5.5) */
    if (rc == 0 && total > 0)
        rc = seal_into_frame(c, t, iov, n, total);
    for (size_t i = 0; i < done_count; i++)
        hd_frame_unref(net_conn_shard(c), done[i]);
    return rc;
}

static int rec_encode(struct net_conn *c, void *state)
{
    struct tls_conn *t = state;
    bool progress = true;
    int rc = 0;
    while (rc == 0 && progress) /* ends when the queue is empty: bounded by send_max_bytes */
        rc = encode_batch(c, t, &progress);
    if (rc < 0)
        rec_log(c, "sealing records", rc);
    return rc;
}

/* ---------------------------------------------------------------- decode */

static int on_post_handshake(struct net_conn *c, struct tls_conn *t, const struct tls_record_in *r)
{
    struct tls_post_handshake ph;
    int rc = tls_post_handshake_parse(r->data, r->data_len, &ph);
    if (rc < 0) {
        rec_log(c, "bad post-handshake message", rc);
        return rc;
    }
    if (!ph.key_update)
        return 0; /* NewSessionTicket: we never resume */
    t->ts->stats.key_updates_in++;
    rc = tls_record_state_update(&t->rx);
    if (rc == 0 && ph.update_requested)
        rc = send_key_update(c, t, true);
    return rc;
}

/* close_notify: seal what the app queued, answer with our own close_notify, close once sent. */
static int on_close_notify(struct net_conn *c, struct tls_conn *t)
{
    t->closed_notify = true;
    int rc = rec_encode(c, t);
    struct hd_frame *f = rc == 0 ? hd_frame_get(net_conn_shard(c), TLS_CONTROL_RECORD_SIZE) : NULL;
    if (f) {
        ssize_t n = tls_record_seal_alert(&t->tx, TLS_ALERT_CLOSE_NOTIFY, f->data, f->size);
        if (n > 0) {
            f->len = (uint32_t)n;
            net_conn_wire_queue(c, f, 0, f->len);
        } else {
            hd_frame_unref(net_conn_shard(c), f);
        }
    }
    tls_kick(c);
    net_conn_close(c, 0, true);
    return 0;
}

static int on_alert(struct net_conn *c, struct tls_conn *t, const struct tls_record_in *r)
{
    uint8_t description = 0;
    int rc = tls_alert_parse(r->data, r->data_len, &description);
    if (rc == 1)
        return 0; /* user_canceled: a close_notify follows */
    if (rc == 0)
        return on_close_notify(c, t);
    char peer[64];
    net_addr_format(net_conn_peer(c), peer, sizeof(peer));
    hd_log_rl(HD_LOG_WARN, "tls: s%u %s: closing: peer sent alert %u",
              hd_shard_id(net_conn_shard(c)), peer, description);
    return rc;
}

static int on_record(struct net_conn *c, struct tls_conn *t, const struct tls_record_in *r)
{
    switch (r->type) {
    case TLS_CONTENT_APPLICATION_DATA:
        return net_conn_deliver(c, r->data, r->data_len);
    case TLS_CONTENT_HANDSHAKE:
        return on_post_handshake(c, t, r);
    case TLS_CONTENT_ALERT:
        return on_alert(c, t, r);
    }
    return -EPROTO; /* tls_record_open lets no other type through */
}

static const char *open_error(int rc)
{
    switch (rc) {
    case -EMSGSIZE:
        return "oversized record";
    case -EBADMSG:
        return "record failed authentication";
    case -EOVERFLOW:
        return "record sequence exhausted";
    default:
        return "malformed record";
    }
}

static ssize_t rec_decode(struct net_conn *c, void *state, uint8_t *in, size_t len)
{
    struct tls_conn *t = state;
    size_t off = 0;
    while (off < len) {
        if (t->closed_notify || net_conn_state(c) != NET_CONN_OPEN)
            return (ssize_t)len; /* nothing after close_notify counts (RFC 8446 §6.1) */
        struct tls_record_in r;
        int rc = tls_record_open(&t->rx, in + off, len - off, &r);
        if (rc == -EAGAIN)
            break; /* net keeps the partial record and offers it again with more bytes */
        if (rc < 0) {
            t->ts->stats.record_errors++;
            rec_log(c, open_error(rc), rc);
            return rc;
        }
        off += r.record_len;
        rc = on_record(c, t, &r);
        if (rc < 0)
            return rc;
    }
    return (ssize_t)off;
}

static void rec_release(struct net_conn *c, void *state)
{
    (void)c;
    tls_conn_free(state);
}

/* Moving a connection to another shard: the record state leaves this shard's pool as plain
 * keys (EVP_AEAD_CTX is re-keyed on arrival, never copied), in heap memory that the
 * destination frees. */
struct tls_moved {
    struct tls_traffic_keys rx, tx;
    uint64_t rx_seq, tx_seq;
    struct hd_frame *pend;
    uint32_t pend_off, pend_len, idle_timeout_ms, write_timeout_ms;
    tls_handshake_fn *on_handshake;
    uint8_t mode;
    bool server, closed_notify;
};

static void *rec_move_out(struct net_conn *c, void *state)
{
    (void)c;
    struct tls_conn *t = state;
    if (t->hs)
        return NULL; /* only finished handshakes move */
    struct tls_moved *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    if (tls_traffic_keys_init(&m->rx, t->rx.suite, t->rx.secret, t->rx.secret_len) < 0 ||
        tls_traffic_keys_init(&m->tx, t->tx.suite, t->tx.secret, t->tx.secret_len) < 0) {
        free(m);
        return NULL;
    }
    m->rx_seq = t->rx.seq;
    m->tx_seq = t->tx.seq;
    m->pend = t->pend;
    m->pend_off = t->pend_off;
    m->pend_len = t->pend_len;
    m->idle_timeout_ms = t->idle_timeout_ms;
    m->write_timeout_ms = t->write_timeout_ms;
    m->on_handshake = t->on_handshake;
    m->mode = t->mode;
    m->server = t->server;
    m->closed_notify = t->closed_notify;
    t->pend = NULL; /* the frame reference moved */
    tls_conn_free(t);
    return m;
}

static void *rec_move_in(struct net_conn *c, void *moved)
{
    struct tls_moved *m = moved;
    struct tls_shard *ts = tls_shard_of(net_conn_shard(c));
    struct tls_conn *t = hd_slab_get(ts->conns);
    if (t != NULL) {
        memset(t, 0, sizeof(*t));
        t->ts = ts;
        if (tls_record_state_init(&t->rx, &m->rx, m->rx_seq) < 0 ||
            tls_record_state_init(&t->tx, &m->tx, m->tx_seq) < 0) {
            tls_conn_free(t);
            t = NULL;
        }
    }
    if (t != NULL) {
        t->pend = m->pend;
        t->pend_off = m->pend_off;
        t->pend_len = m->pend_len;
        t->idle_timeout_ms = m->idle_timeout_ms;
        t->write_timeout_ms = m->write_timeout_ms;
        t->on_handshake = m->on_handshake;
        t->mode = m->mode;
        t->server = m->server;
        t->closed_notify = m->closed_notify;
    } else if (m->pend) {
        hd_frame_unref(net_conn_shard(c), m->pend);
    }
    tls_traffic_keys_deinit(&m->rx);
    tls_traffic_keys_deinit(&m->tx);
    free(m);
    return t;
}

const struct net_codec tls_record_codec = {
    .name = "tls-records",
    .decode = rec_decode,
    .encode = rec_encode,
    .release = rec_release,
    .move_out = rec_move_out,
    .move_in = rec_move_in,
};
