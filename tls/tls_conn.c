/* tls_conn.c - TLS 1.3 records after the handshake, as two net codecs. Userspace: decode opens
 * records in place and delivers their plaintext (application data), handles KeyUpdate (answering
 * update_requested with our own), ignores NewSessionTicket, turns close_notify into a clean
 * close (after our own close_notify) and any other alert or bad record into a logged close;
 * encode takes the connection's queued plaintext frames and seals them, coalesced, into 16 KiB
 * records in pool frames (tls_conn_options.record_per_frame seals one record per frame instead,
 * for benchmarks); about 1.4 KiB of TLS state stays per connection. kTLS: bytes pass through
 * both ways; the records that arrived before the switch are opened here first; control records
 * arrive typed (net's record hook: recvmsg with TLS_GET_RECORD_TYPE) and go to the same
 * KeyUpdate / alert handling, which on kTLS sends its records (TLS_SET_RECORD_TYPE) at quiet
 * points (rekeying the kernel when it can, else closing cleanly: no TLS 1.3 rekey before Linux
 * 6.14, probed once). Either codec moves with its connection as plain secrets and sequence
 * numbers, re-keyed on the new shard. Also the public close_notify / KeyUpdate calls and the
 * kernel rekey probe. Runs on the connection's shard; never allocates beyond pool frames. Owns:
 * the connection's struct tls_conn (keys) until the codec is released. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/mem.h>

#include "tls_impl.h"

#ifndef SOL_TLS
#define SOL_TLS 282 /* include/linux/socket.h */
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

/* Plaintext sealed per output frame: three full records (49,218 bytes on the wire) fit the
 * default 64 KiB frame class; more iovecs than this per batch end the batch early. */
#define TLS_SEAL_RECORDS_PER_FRAME 3u
#define TLS_SEAL_BATCH             (TLS_SEAL_RECORDS_PER_FRAME * TLS_RECORD_PLAINTEXT_MAX)
#define TLS_SEAL_FRAME_SIZE        (TLS_SEAL_RECORDS_PER_FRAME * TLS_RECORD_SIZE_MAX)
#define TLS_SEAL_IOV_MAX           64u
/* A KeyUpdate or alert record: header + 5-byte message + type + tag, rounded up. */
#define TLS_CONTROL_RECORD_SIZE 64u

_Static_assert(TLS_SEAL_FRAME_SIZE <= 65536u, "fits the default large frame class");
_Static_assert(TLS_SEAL_IOV_MAX *TLS_RECORD_OVERHEAD < TLS_SEAL_BATCH,
               "one record per frame still leaves room for plaintext in a batch");
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
    net_conn_encode_request(c); /* sealed at this tick's flush (or by a flush-close) */
    return 0;
}

int tls_wire_send(struct net_conn *c, struct hd_frame *f, uint32_t len)
{
    int rc = net_conn_wire_queue(c, f, 0, len);
    return rc < 0 ? rc : tls_kick(c);
}

void tls_log_closing(struct net_conn *c, const char *what, int reason)
{
    char peer[64];
    net_addr_format(net_conn_peer(c), peer, sizeof(peer));
    hd_log_rl(HD_LOG_WARN, "tls: s%u %s: closing: %s (%s)", hd_shard_id(net_conn_shard(c)), peer,
              what, strerror(-reason));
}

/* ---------------------------------------------------------------- encode */

/* Seal a KeyUpdate, then move the write direction to the next key. kick: from a decode (a
 * flush must follow); encode's caller sends the wire queue anyway. Returns 0 or -errno. */
static int send_key_update(struct net_conn *c, struct tls_conn *t, bool kick, bool requested)
{
    struct hd_frame *f = hd_frame_get(net_conn_shard(c), TLS_CONTROL_RECORD_SIZE);
    if (f == NULL)
        return -ENOBUFS;
    ssize_t n = tls_record_seal_key_update(&t->tx, requested, f->data, f->size);
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
    ssize_t w = 0;
    if (t->record_per_frame) { /* one record per iovec (a frame, or a piece of one) */
        for (size_t i = 0; i < n && w >= 0; i++) {
            size_t one = 0;
            ssize_t r =
                tls_record_seal_iov(&t->tx, &iov[i], 1, &one, f->data + w, f->size - (size_t)w);
            w = r < 0 ? r : w + r;
            consumed += one;
        }
    } else {
        w = tls_record_seal_iov(&t->tx, iov, n, &consumed, f->data, f->size);
    }
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
    /* One record per frame adds a header and tag per iovec: leave room for all of them. */
    const size_t batch = t->record_per_frame
                             ? TLS_SEAL_BATCH - TLS_SEAL_IOV_MAX * TLS_RECORD_OVERHEAD
                             : TLS_SEAL_BATCH;
    while (n < TLS_SEAL_IOV_MAX && done_count < TLS_SEAL_IOV_MAX && total < batch) {
        if (t->pend == NULL) {
            t->pend = net_conn_plain_take(c, &t->pend_off, &t->pend_len);
            if (t->pend == NULL)
                break;
        }
        size_t take = t->pend_len < batch - total ? t->pend_len : batch - total;
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
        rc = send_key_update(c, t, false, false); /* AES-GCM's limit (RFC 8446 §5.5) */
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
        tls_log_closing(c, "sealing records", rc);
    return rc;
}

/* ---------------------------------------------------------------- decode */

static int ktls_key_update_in(struct net_conn *c, struct tls_conn *t, bool requested);
static int close_notify_out(struct net_conn *c, struct tls_conn *t, int reason);

static int on_post_handshake(struct net_conn *c, struct tls_conn *t, const struct tls_record_in *r)
{
    struct tls_post_handshake ph;
    int rc = tls_post_handshake_parse(r->data, r->data_len, &ph);
    if (rc < 0) {
        tls_log_closing(c, "bad post-handshake message", rc);
        return rc;
    }
    if (!ph.key_update)
        return 0; /* NewSessionTicket: we never resume */
    t->ts->stats.key_updates_in++;
    if (t->mode == TLS_MODE_KTLS)
        return ktls_key_update_in(c, t, ph.update_requested);
    rc = tls_record_state_update(&t->rx);
    if (rc == 0 && ph.update_requested)
        rc = send_key_update(c, t, true, false);
    return rc;
}

/* The peer's close_notify: answer with ours after what the app queued, then close (0). */
static int on_close_notify(struct net_conn *c, struct tls_conn *t)
{
    t->closed_notify = true;
    t->ts->stats.close_notify_in++;
    return close_notify_out(c, t, 0);
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

/* Open records of in[0..len) and act on them; *budget (if set) bounds how many. Returns the
 * bytes of the records taken, or -errno. */
static ssize_t rec_open_all(struct net_conn *c, struct tls_conn *t, uint8_t *in, size_t len,
                            uint32_t *budget)
{
    size_t off = 0;
    while (off < len && (budget == NULL || *budget > 0)) {
        if (t->closed_notify || (t->todo & TLS_TODO_CLOSE) || net_conn_state(c) != NET_CONN_OPEN)
            return (ssize_t)len; /* nothing after a close_notify counts (RFC 8446 §6.1) */
        struct tls_record_in r;
        int rc = tls_record_open(&t->rx, in + off, len - off, &r);
        if (rc == -EAGAIN)
            break; /* net keeps the partial record and offers it again with more bytes */
        if (rc < 0) {
            t->ts->stats.record_errors++;
            tls_log_closing(c, open_error(rc), rc);
            return rc;
        }
        off += r.record_len;
        if (budget)
            (*budget)--;
        rc = on_record(c, t, &r);
        if (rc < 0)
            return rc;
    }
    return (ssize_t)off;
}

static ssize_t rec_decode(struct net_conn *c, void *state, uint8_t *in, size_t len)
{
    return rec_open_all(c, state, in, len, NULL);
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
    uint32_t pend_off, pend_len, idle_timeout_ms, write_timeout_ms, ktls_rx_left;
    tls_handshake_fn *on_handshake;
    uint8_t mode;
    bool server, closed_notify, ktls_disable, record_per_frame;
};

static void *rec_move_out(struct net_conn *c, void *state)
{
    (void)c;
    struct tls_conn *t = state;
    if (t->hs || t->todo)
        return NULL; /* only finished handshakes move, and none in the middle of a rekey */
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
    m->ktls_rx_left = t->ktls_rx_left;
    m->on_handshake = t->on_handshake;
    m->mode = t->mode;
    m->server = t->server;
    m->closed_notify = t->closed_notify;
    m->ktls_disable = t->ktls_disable;
    m->record_per_frame = t->record_per_frame;
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
        t->ktls_rx_left = m->ktls_rx_left;
        t->on_handshake = m->on_handshake;
        t->mode = m->mode;
        t->server = m->server;
        t->closed_notify = m->closed_notify;
        t->ktls_disable = m->ktls_disable;
        t->record_per_frame = m->record_per_frame;
    } else if (m->pend) {
        hd_frame_unref(net_conn_shard(c), m->pend);
    }
    tls_traffic_keys_deinit(&m->rx);
    tls_traffic_keys_deinit(&m->tx);
    free(m);
    return t;
}

static void rec_move_drop(struct hd_shard *s, void *moved)
{
    struct tls_moved *m = moved;
    if (m->pend)
        hd_frame_unref(s, m->pend);
    tls_traffic_keys_deinit(&m->rx);
    tls_traffic_keys_deinit(&m->tx);
    free(m);
}

/* The app's graceful close (net_conn_close with flush): close_notify after the queued bytes. */
static int tls_codec_close(struct net_conn *c, void *state, int reason)
{
    struct tls_conn *t = state;
    HD_ASSERT(t != NULL);
    if (t->closed_notify || (t->todo & TLS_TODO_CLOSE))
        return -EALREADY; /* ending already: net_conn_close goes on */
    return close_notify_out(c, t, reason);
}

const struct net_codec tls_record_codec = {
    .name = "tls-records",
    .decode = rec_decode,
    .encode = rec_encode,
    .release = rec_release,
    .move_out = rec_move_out,
    .move_in = rec_move_in,
    .move_drop = rec_move_drop,
    .quiesced = tls_quiesced,
    .close = tls_codec_close,
};

/* ---------------------------------------------------------------- kTLS */

/* The records that arrived before the switch are opened here (exactly ktls_rx_left of them:
 * net replays them before the first kTLS read); the kernel's plaintext passes through. */
static ssize_t ktls_decode(struct net_conn *c, void *state, uint8_t *in, size_t len)
{
    struct tls_conn *t = state;
    if (t->ktls_rx_left > 0) {
        ssize_t n = rec_open_all(c, t, in, len, &t->ktls_rx_left);
        if (n >= 0 && t->ktls_rx_left == 0 && (size_t)n < len)
            return -EPROTO; /* bytes past the counted records: cannot be (our invariant) */
        return n;
    }
    if (t->closed_notify || (t->todo & TLS_TODO_CLOSE))
        return (ssize_t)len; /* read before the quiet point took effect: does not count */
    int rc = net_conn_deliver(c, in, len);
    return rc < 0 ? rc : (ssize_t)len;
}

/* Queued plaintext goes to the wire unchanged (the kernel seals it), one sendmsg's worth per
 * flush so the rest stays droppable (net_conn_drop_oldest), except while a quiet point is
 * pending: a KeyUpdate or close_notify must go out first (after a close nothing goes). */
static int ktls_move(struct net_conn *c, struct tls_conn *t, unsigned max)
{
    unsigned moved = 0;
    if (t->pend) {
        int rc = net_conn_wire_queue(c, t->pend, t->pend_off, t->pend_len);
        t->pend = NULL;
        if (rc < 0)
            return rc;
        moved++;
    }
    uint32_t off, len;
    struct hd_frame *f;
    while (moved < max && (f = net_conn_plain_take(c, &off, &len)) != NULL) {
        if (len == 0) {
            hd_frame_unref(net_conn_shard(c), f);
            continue;
        }
        int rc = net_conn_wire_queue(c, f, off, len);
        if (rc < 0)
            return rc;
        moved++;
    }
    return 0;
}

static int ktls_encode(struct net_conn *c, void *state)
{
    struct tls_conn *t = state;
    return t->todo ? 0 : ktls_move(c, t, NET_IOV_MAX);
}

/* A control record the kernel opened (net's record hook): the same handling as in userspace. */
static int ktls_record(struct net_conn *c, void *state, uint8_t type, uint8_t *data, size_t len)
{
    struct tls_conn *t = state;
    if (t->closed_notify || (t->todo & TLS_TODO_CLOSE))
        return 0;
    struct tls_record_in r = {.type = type, .data = data, .data_len = len, .record_len = len};
    return on_record(c, t, &r);
}

const struct net_codec tls_ktls_codec = {
    .name = "tls-ktls",
    .decode = ktls_decode,
    .encode = ktls_encode,
    .release = rec_release,
    .move_out = rec_move_out,
    .move_in = rec_move_in,
    .move_drop = rec_move_drop,
    .record = ktls_record,
    .quiesced = tls_quiesced,
    .close = tls_codec_close,
};

/* Our close_notify: userspace seals it behind what is queued and closes after the flush; kTLS
 * sends it as an alert record at a quiet point (after the queued plaintext). Returns 0. */
static int close_notify_out(struct net_conn *c, struct tls_conn *t, int reason)
{
    if (t->mode == TLS_MODE_KTLS) {
        if (t->todo & TLS_TODO_CLOSE)
            return 0;
        int rc = t->todo ? 0 : ktls_move(c, t, UINT32_MAX); /* what is queued goes first */
        t->todo |= TLS_TODO_CLOSE;
        t->close_reason = reason;
        if (rc == 0)
            rc = net_conn_quiet_begin(c);
        if (rc < 0)
            net_conn_close(c, rc, false);
        return 0;
    }
    if (t->todo & TLS_TODO_CLOSE_SENT)
        return 0;
    t->todo |= TLS_TODO_CLOSE | TLS_TODO_CLOSE_SENT; /* once; and no KeyUpdate after it */
    int rc = rec_encode(c, t);
    struct hd_frame *f = rc == 0 ? hd_frame_get(net_conn_shard(c), TLS_CONTROL_RECORD_SIZE) : NULL;
    if (f) {
        ssize_t n = tls_record_seal_alert(&t->tx, TLS_ALERT_CLOSE_NOTIFY, f->data, f->size);
        if (n > 0) {
            f->len = (uint32_t)n;
            if (net_conn_wire_queue(c, f, 0, f->len) == 0)
                t->ts->stats.close_notify_out++;
        } else {
            hd_frame_unref(net_conn_shard(c), f);
        }
    }
    tls_kick(c);
    net_conn_close(c, reason, true);
    return 0;
}

/* A KeyUpdate arrived on kTLS RX: rekey the kernel's RX if it can (and answer a request), else
 * end cleanly; nothing is read past this record meanwhile (net reads one record at a time and
 * the quiet point stops it). Returns 0 or -errno. */
static int ktls_key_update_in(struct net_conn *c, struct tls_conn *t, bool requested)
{
    int rc = -EOPNOTSUPP;
    if (tls_ktls_rekey_available()) {
        /* The records still opened here (received before the switch) use the new key too:
         * the kernel's first one comes after them. */
        rc = tls_record_state_update(&t->rx);
        if (rc == 0)
            rc = tls_ktls_set(net_conn_fd(c), TLS_RX, &t->rx, t->ktls_rx_left);
        if (rc == 0 && requested)
            rc = tls_conn_key_update(c, false);
        if (rc == 0)
            return 0;
    }
    t->ts->stats.ktls_rekey_closes++;
    tls_log_closing(c, "peer KeyUpdate cannot be followed: kTLS cannot rekey here", rc);
    return close_notify_out(c, t, -EOPNOTSUPP);
}

/* kTLS: send the KeyUpdate record, then rekey the kernel's TX. */
static void ktls_key_update_step(struct net_conn *c, struct tls_conn *t)
{
    int rc = 0;
    if (!(t->todo & TLS_TODO_KU_SENT)) {
        uint8_t type = TLS_CONTENT_HANDSHAKE;
        uint8_t msg[TLS_HANDSHAKE_HEADER_LEN + 1] = {TLS_HANDSHAKE_KEY_UPDATE, 0, 0, 1,
                                                     (t->todo & TLS_TODO_KU_REQUEST) ? 1 : 0};
        rc = net_conn_quiet_sendmsg(c, SOL_TLS, TLS_SET_RECORD_TYPE, &type, 1, msg, sizeof(msg));
        if (rc == 0) {
            t->todo |= TLS_TODO_KU_SENT;
            return; /* quiesced runs again once it is out */
        }
    } else {
        rc = tls_record_state_update(&t->tx);
        if (rc == 0)
            rc = tls_ktls_set(net_conn_fd(c), TLS_TX, &t->tx, 0);
    }
    t->todo &= (uint8_t) ~(TLS_TODO_KEY_UPDATE | TLS_TODO_KU_REQUEST | TLS_TODO_KU_SENT);
    if (rc < 0) { /* the peer expects the next key now: no clean end is possible */
        tls_log_closing(c, "kTLS rekey of TX failed", rc);
        net_conn_close(c, rc, false);
        return;
    }
    t->ts->stats.key_updates_out++;
    tls_quiet_next(c, t);
}

/* kTLS: send close_notify as an alert record, then close. */
static void ktls_close_step(struct net_conn *c, struct tls_conn *t)
{
    if (!(t->todo & TLS_TODO_CLOSE_SENT)) {
        static const uint8_t alert[2] = {1, TLS_ALERT_CLOSE_NOTIFY}; /* warning, close_notify */
        uint8_t type = TLS_CONTENT_ALERT;
        int rc =
            net_conn_quiet_sendmsg(c, SOL_TLS, TLS_SET_RECORD_TYPE, &type, 1, alert, sizeof(alert));
        if (rc == 0) {
            t->todo |= TLS_TODO_CLOSE_SENT;
            t->ts->stats.close_notify_out++;
            return;
        }
        tls_log_closing(c, "cannot send close_notify", rc);
    }
    net_conn_close(c, t->close_reason, false);
}

void tls_quiet_next(struct net_conn *c, struct tls_conn *t)
{
    if (t->todo == 0)
        net_conn_quiet_end(c);
    else if (net_conn_quiet_begin(c) < 0)
        net_conn_close(c, -EBUSY, false);
}

void tls_quiesced(struct net_conn *c, void *state)
{
    struct tls_conn *t = state;
    if (t->todo & TLS_TODO_SWITCH)
        tls_switch_step(c, t);
    else if (t->todo & TLS_TODO_KEY_UPDATE)
        ktls_key_update_step(c, t);
    else if (t->todo & TLS_TODO_CLOSE)
        ktls_close_step(c, t);
    else
        net_conn_quiet_end(c);
}

/* ---------------------------------------------------------------- public */

struct tls_conn *tls_conn_of(struct net_conn *c)
{
    void *state;
    const struct net_codec *k = net_conn_codec(c, &state);
    return k == &tls_record_codec || k == &tls_ktls_codec ? state : NULL;
}

int tls_conn_close_notify(struct net_conn *c)
{
    if (net_conn_state(c) != NET_CONN_OPEN)
        return -EPIPE;
    struct tls_conn *t = tls_conn_of(c);
    if (t == NULL) {
        net_conn_close(c, 0, false);
        return -ENOTCONN;
    }
    /* Through net's graceful close, which reaches close_notify_out by the codec's close hook:
     * under a stacked codec (wss) the upper one frames what the app queued before that. */
    net_conn_close(c, 0, true);
    return 0;
}

int tls_conn_key_update(struct net_conn *c, bool request_peer)
{
    if (net_conn_state(c) != NET_CONN_OPEN)
        return -EPIPE;
    struct tls_conn *t = tls_conn_of(c);
    if (t == NULL)
        return -ENOTCONN;
    if (t->closed_notify || (t->todo & TLS_TODO_CLOSE))
        return -EPIPE;
    if (t->mode == TLS_MODE_USERSPACE)
        return send_key_update(c, t, true, request_peer);
    if (!tls_ktls_rekey_available()) {
        t->ts->stats.ktls_rekey_closes++;
        tls_log_closing(c, "KeyUpdate requested: kTLS cannot rekey here", -EOPNOTSUPP);
        close_notify_out(c, t, -EOPNOTSUPP);
        return -EOPNOTSUPP;
    }
    if (t->todo & TLS_TODO_KEY_UPDATE)
        return 0; /* one is on its way */
    t->todo |= TLS_TODO_KEY_UPDATE | (request_peer ? TLS_TODO_KU_REQUEST : 0);
    int rc = net_conn_quiet_begin(c);
    if (rc < 0) /* no quiet point (a move waits): none is on its way, a later call may try */
        t->todo &= (uint8_t) ~(TLS_TODO_KEY_UPDATE | TLS_TODO_KU_REQUEST);
    return rc;
}

/* ---------------------------------------------------------------- rekey probe */

static pthread_once_t rekey_once = PTHREAD_ONCE_INIT;
static bool rekey_present;

/* A loopback connection with TX keys set twice: Linux before 6.14 answers the second
 * setsockopt with EBUSY (crypto info set only once); later kernels take it as a TLS 1.3 rekey.
 * The key is a dummy: nothing is ever sent. */
static void rekey_probe(void)
{
#if defined(SOL_TLS) && defined(TLS_TX)
    if (!tls_ktls_available())
        return;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct tls12_crypto_info_aes_gcm_128 info = {
        .info = {.version = TLS_1_3_VERSION, .cipher_type = TLS_CIPHER_AES_GCM_128}};
    int err = 0;
    if (l < 0 || fd < 0 || bind(l, (struct sockaddr *)&a, alen) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) < 0 ||
        connect(fd, (struct sockaddr *)&a, alen) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls")) < 0 ||
        setsockopt(fd, SOL_TLS, TLS_TX, &info, sizeof(info)) < 0)
        err = errno;
    else if (setsockopt(fd, SOL_TLS, TLS_TX, &info, sizeof(info)) == 0)
        rekey_present = true;
    else
        err = errno;
    if (l >= 0)
        close(l);
    if (fd >= 0)
        close(fd);
    hd_log(HD_LOG_INFO, "tls: kernel kTLS rekey %s (%s)", rekey_present ? "present" : "absent",
           rekey_present ? "second TLS_TX accepted" : strerror(err));
#endif
}

bool tls_ktls_rekey_available(void)
{
    pthread_once(&rekey_once, rekey_probe);
    return rekey_present;
}
