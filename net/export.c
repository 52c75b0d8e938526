/* export.c - a live connection as bytes, for another process (an upgrade): the same quiet
 * point as a move between shards (migrate.c: receiving paused, no op in flight), then fd,
 * peer, settings, what is left of the deadline, counters, the codec's state (an opaque blob from
 * the app's save callback: TLS's record state; a connection with a stacked upper codec,
 * WebSocket, cannot be exported yet), the app's and the codec's tails, the bytes received but
 * not offered yet (held buffers and pending frames, in order) and both send queues (entry by
 * entry; wire bytes already encoded go as they are) are written into one heap buffer, and the
 * connection is released without on_close and without closing its fd; done(fd, bytes) gets
 * both. net_conn_import parses the bytes completely first (net_export_parse: magic, version,
 * every length against its bound and the total; anything else is -EPROTO and the fd stays the
 * caller's), then builds the connection from its shard's pools, copies the tails, received bytes
 * and queued entries into pool frames, lets load reinstall the codec and hands it over with
 * receiving paused, so the app can register it first; net_conn_pause_recv(c, false) then offers
 * the carried bytes to on_data and receives again. The queued entries go out at that tick's
 * flush. Runs on the connection's shard; the blob is the caller's once done has it. Control
 * path: it allocates. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net_impl.h"
#include <hd/hd_bytes.h>

#define EXPORT_MAGIC         0x636e6468u /* "hdnc" */
#define EXPORT_VERSION       1u
#define EXPORT_F_SEND_PAUSED 1u

/* ---------------------------------------------------------------- writing */

static size_t queue_size(struct net_sendq *q)
{
    return 4 + (size_t)q->count * 4 + q->bytes;
}

static void put_queue(struct hd_wbuf *w, struct net_sendq *q)
{
    hd_put32(w, q->count);
    for (uint32_t i = 0; i < q->count; i++) {
        struct net_sendq_entry *e = net_sendq_at(q, i);
        hd_put32(w, e->len);
        hd_put(w, e->frame->data + e->off, e->len);
    }
}

static void put_frame(struct hd_wbuf *w, const struct hd_frame *f)
{
    hd_put32(w, f ? f->len : 0);
    if (f)
        hd_put(w, f->data, f->len);
}

struct export_parts {
    const uint8_t *codec;
    size_t codec_len;
    struct hd_frame **chunks; /* received bytes not offered yet, in order */
    uint32_t chunks_count;
    size_t chunks_bytes;
};

static size_t export_size(struct net_conn *c, const struct export_parts *p)
{
    return NET_EXPORT_HEADER_SIZE + p->codec_len + (c->rx_tail ? c->rx_tail->len : 0) +
           (c->codecs[0].tail ? c->codecs[0].tail->len : 0) + p->chunks_bytes +
           queue_size(&c->plain) + queue_size(&c->wire);
}

static void export_write(struct net_conn *c, const struct export_parts *p, struct hd_wbuf *w)
{
    hd_put32(w, EXPORT_MAGIC);
    hd_put32(w, EXPORT_VERSION | ((c->flags & NET_F_SEND_PAUSED) ? EXPORT_F_SEND_PAUSED << 16 : 0));
    uint32_t opt[] = {c->idle_timeout_ms, c->write_timeout_ms, c->send_high,       c->send_low,
                      c->send_max,        c->send_high_frames, c->send_low_frames, c->rx_tail_max};
    hd_put(w, opt, sizeof(opt));
    uint64_t now = hd_now_ms(c->shard);
    hd_put64(w, c->deadline_at_ms == 0 ? 0 : c->deadline_at_ms > now ? c->deadline_at_ms - now : 1);
    hd_put64(w, c->stats.bytes_in);
    hd_put64(w, c->stats.bytes_out);
    hd_put64(w, c->stats.sends);
    hd_put32(w, (uint32_t)c->peer.len);
    uint8_t peer[sizeof(c->peer.ss)] = {0};
    memcpy(peer, &c->peer.ss, c->peer.len <= sizeof(peer) ? c->peer.len : 0);
    hd_put(w, peer, sizeof(peer));
    hd_put32(w, (uint32_t)p->codec_len);
    hd_put(w, p->codec, p->codec_len);
    put_frame(w, c->rx_tail);
    put_frame(w, c->codecs[0].tail);
    hd_put32(w, (uint32_t)p->chunks_bytes);
    for (uint32_t i = 0; i < p->chunks_count; i++)
        hd_put(w, p->chunks[i]->data, p->chunks[i]->len);
    put_queue(w, &c->plain);
    put_queue(w, &c->wire);
}

/* migrate.c's quiet point reached for an export: write, let go, hand over. */
void net_export_step(struct net_conn *c, net_codec_save_fn *save, net_export_fn *done, void *arg)
{
    uint8_t codec[NET_EXPORT_CODEC_MAX];
    struct export_parts p = {.codec = codec};
    HD_ASSERT(net_conn_class_count(c, NET_SEND_CLASSES_MAX) == 0); /* drained, none since */
    ssize_t n = c->codecs_n ? save(c, codec, sizeof(codec)) : 0;
    int rc = n < 0 ? (int)n : net_conn_held_take(c, &p.chunks, &p.chunks_count);
    p.codec_len = n > 0 ? (size_t)n : 0;
    for (uint32_t i = 0; rc == 0 && i < p.chunks_count; i++)
        p.chunks_bytes += p.chunks[i]->len;
    struct hd_wbuf w = {0};
    if (rc == 0) {
        w.cap = export_size(c, &p);
        w.p = malloc(w.cap);
        rc = w.p ? 0 : -ENOMEM;
    }
    if (rc == 0)
        export_write(c, &p, &w);
    for (uint32_t i = 0; i < p.chunks_count; i++)
        hd_frame_unref(c->shard, p.chunks[i]);
    free(p.chunks);
    if (rc < 0) {
        hd_log_rl(HD_LOG_WARN, "net: cannot export a connection: %s", strerror(-rc));
        net_conn_close(c, rc, false);
        return;
    }
    HD_ASSERT(w.len == w.cap);
    int fd = c->fd;
    net_conn_state_set(c, NET_CONN_CLOSED); /* released without on_close; fd not closed */
    net_conn_release(c, false);
    done(fd, w.p, w.len, arg);
    free(w.p);
}

int net_conn_export(struct net_conn *c, net_codec_save_fn *save, net_export_fn *done, void *arg)
{
    if (c->codecs_n > 1 || (c->codecs_n == 1 && save == NULL))
        return -EOPNOTSUPP;
    return net_migrate_begin(c, save, done, arg);
}

/* ---------------------------------------------------------------- reading */

static void take_queue(struct hd_rbuf *r, struct net_export_queue *q, uint32_t entry_max)
{
    q->count = hd_take32(r);
    q->at = r->off;
    for (uint32_t i = 0; i < q->count && !r->bad; i++) {
        uint32_t n = hd_take32(r);
        if (n == 0 || n > entry_max)
            r->bad = true;
        hd_take(r, n);
    }
}

int net_export_parse(const uint8_t *blob, size_t len, struct net_export_view *v)
{
    struct hd_rbuf r = {.p = blob, .len = len};
    memset(v, 0, sizeof(*v));
    uint32_t magic = hd_take32(&r), version = hd_take32(&r);
    if (magic != EXPORT_MAGIC || (version & 0xffff) != EXPORT_VERSION ||
        (version >> 16) & ~EXPORT_F_SEND_PAUSED)
        return -EPROTO;
    v->send_paused = (version >> 16) & EXPORT_F_SEND_PAUSED;
    uint32_t opt[8];
    for (unsigned i = 0; i < 8; i++)
        opt[i] = hd_take32(&r);
    v->opt = (struct net_conn_options){.idle_timeout_ms = opt[0],
                                       .write_timeout_ms = opt[1],
                                       .send_high_bytes = opt[2],
                                       .send_low_bytes = opt[3],
                                       .send_max_bytes = opt[4],
                                       .send_high_frames = opt[5],
                                       .send_low_frames = opt[6],
                                       .rx_tail_max = opt[7]};
    v->deadline_left_ms = hd_take64(&r);
    v->stats.bytes_in = hd_take64(&r);
    v->stats.bytes_out = hd_take64(&r);
    v->stats.sends = hd_take64(&r);
    v->peer.len = hd_take32(&r);
    const uint8_t *peer = hd_take(&r, sizeof(v->peer.ss));
    if (peer && v->peer.len <= sizeof(v->peer.ss))
        memcpy(&v->peer.ss, peer, v->peer.len);
    else
        r.bad = true;
    if (opt[7] == 0 || opt[7] > NET_EXPORT_ENTRY_MAX || opt[3] > opt[2])
        r.bad = true;
    hd_take_bytes(&r, NET_EXPORT_CODEC_MAX, &v->codec, &v->codec_len);
    hd_take_bytes(&r, opt[7], &v->rx_tail, &v->rx_tail_len);
    hd_take_bytes(&r, opt[7], &v->raw_tail, &v->raw_tail_len);
    hd_take_bytes(&r, NET_EXPORT_RECEIVED_MAX, &v->received, &v->received_len);
    v->blob = blob;
    take_queue(&r, &v->plain, NET_EXPORT_ENTRY_MAX);
    take_queue(&r, &v->wire, NET_EXPORT_ENTRY_MAX);
    if (r.bad || r.off != len)
        return -EPROTO;
    return 0;
}

/* ---------------------------------------------------------------- importing */

/* A copy of data[0..len) in a pool frame (len > 0), or NULL (-ENOBUFS: no class holds it). */
static struct hd_frame *frame_copy(struct hd_shard *s, const uint8_t *data, size_t len)
{
    struct hd_frame *f = hd_frame_get(s, len);
    if (f == NULL)
        return NULL;
    memcpy(f->data, data, len);
    f->len = (uint32_t)len;
    return f;
}

static int import_queue(struct net_conn *c, struct net_sendq *q, const struct net_export_view *v,
                        const struct net_export_queue *eq)
{
    size_t off = eq->at;
    for (uint32_t i = 0; i < eq->count; i++) {
        uint32_t n;
        memcpy(&n, v->blob + off, sizeof(n));
        struct hd_frame *f = frame_copy(c->shard, v->blob + off + 4, n);
        off += 4 + n;
        if (f == NULL)
            return -ENOBUFS;
        int rc = net_sendq_push(c->ns, q, f, 0, n); /* the queue takes f's reference */
        if (rc < 0) {
            hd_frame_unref(c->shard, f);
            return rc;
        }
    }
    return 0;
}

/* Everything but the codec and the replay onto the new connection. */
static int import_state(struct net_conn *c, const struct net_export_view *v)
{
    c->peer = v->peer;
    c->stats = v->stats;
    if (v->send_paused)
        c->flags |= NET_F_SEND_PAUSED;
    if (v->rx_tail_len && !(c->rx_tail = frame_copy(c->shard, v->rx_tail, v->rx_tail_len)))
        return -ENOBUFS;
    if (v->raw_tail_len &&
        !(c->codecs[0].tail = frame_copy(c->shard, v->raw_tail, v->raw_tail_len)))
        return -ENOBUFS;
    for (size_t off = 0; off < v->received_len; off += NET_BUF_SIZE) {
        size_t n = v->received_len - off < NET_BUF_SIZE ? v->received_len - off : NET_BUF_SIZE;
        struct hd_frame *f = frame_copy(c->shard, v->received + off, n);
        if (f == NULL)
            return -ENOBUFS;
        if (net_conn_pending_add(c, f) < 0) { /* untyped bytes (app_flags 0), replayed first */
            hd_frame_unref(c->shard, f);
            return -ENOMEM;
        }
    }
    int rc = import_queue(c, &c->plain, v, &v->plain);
    return rc < 0 ? rc : import_queue(c, &c->wire, v, &v->wire);
}

/* The new connection's timers and queued sends; receiving stays paused until the app resumes
 * it (net_conn_pause_recv offers the carried bytes first). */
static void import_start(struct net_conn *c, const struct net_export_view *v)
{
    struct hd_shard *s = c->shard;
    c->flags |= NET_F_RECV_PAUSED;
    if (c->idle_timeout_ms)
        hd_timer_start(s, &c->idle_timer, c->idle_timeout_ms);
    if (v->deadline_left_ms) {
        c->deadline_at_ms = hd_now_ms(s) + v->deadline_left_ms;
        hd_timer_start(s, &c->deadline_timer, v->deadline_left_ms);
    }
    if (!net_conn_queues_empty(c))
        hd_flush_request(s, &c->flush);
}

int net_conn_import(struct hd_shard *s, int fd, const uint8_t *blob, size_t len,
                    const struct net_conn_handler *h, void *app, net_codec_load_fn *load,
                    struct net_conn **out)
{
    struct net_export_view v;
    int rc = net_export_parse(blob, len, &v);
    if (rc < 0)
        return rc;
    if (v.codec_len > 0 && load == NULL)
        return -EOPNOTSUPP;
    struct net_conn *c = net_conn_new(s, fd, h, app, &v.opt);
    if (c == NULL)
        return -ENOMEM;
    net_conn_state_set(c, NET_CONN_OPEN);
    rc = import_state(c, &v);
    if (rc == 0 && v.codec_len > 0)
        rc = load(c, v.codec, v.codec_len);
    if (rc < 0) { /* let go of everything but the fd, which stays the caller's */
        net_conn_state_set(c, NET_CONN_CLOSED);
        net_conn_release(c, false);
        return rc;
    }
    import_start(c, &v);
    *out = c;
    return 0;
}
