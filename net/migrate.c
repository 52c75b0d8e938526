/* migrate.c - moving a live connection to another shard (and the quiet point of an export to
 * another process, export.c). net_conn_migrate pauses receiving; the source waits until no op
 * of the connection is in flight, copies held buffers into frames, exports the codec's pooled
 * state (the codec's move_out), packs fd, settings, tails, queued sends and codec into one heap
 * package and sends it over the bus; the destination rebuilds the connection from its own
 * pools, imports the codec (move_in), lets the app adopt it, replays the buffered bytes in
 * arrival order and resumes receiving. The source frees its struct without on_close. Frames
 * cross shards by reference (they return to their owner when freed); pool objects (queue
 * chunks, the struct itself) never do. The package is heap memory because it is made on one
 * shard and freed on another. A connection closed while it waits to move drops the move (its
 * empty package goes with it), a graceful close too (it flushes and closes here); a destination
 * that cannot take the connection (its pool is full) closes the fd and frees the exported codec
 * state with the codec's move_drop. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net_impl.h"

struct net_migration {
    unsigned dst;
    net_adopt_fn *adopt;
    void *arg;
    /* filled when packed */
    int fd;
    const struct net_conn_handler *h;
    void *app;
    /* The codec stack: level 0's state as its move_out made it, the others' as they are. */
    struct net_codec_level codecs[NET_CODECS_MAX];
    uint8_t codecs_n;
    struct hd_frame *rx_tail;
    struct net_addr peer;
    struct net_conn_stats stats;
    struct net_conn_options opt;
    uint64_t deadline_at_ms; /* net_conn_set_deadline's, on the shared monotonic clock; 0: none */
    bool send_paused; /* the app was told to pause (on_send_pressure) and waits for the resume */
    struct net_sendq_entry *plain, *mid[NET_CODECS_MAX - 1], *wire;
    uint32_t plain_count, mid_count[NET_CODECS_MAX - 1], wire_count;
    struct hd_frame **chunks; /* raw bytes that were held in ring buffers, in order */
    uint32_t chunks_count;
    struct hd_timer retry; /* the bus was full: try again */
    struct net_conn *c;
    /* An export to another process (net_migrate_begin): export.c takes over at the step. */
    net_export_fn *export_done;
    net_codec_save_fn *export_save;
    void *export_arg;
};

/* Pause receiving and wait for the quiet point (net_migrate_step). */
static struct net_migration *migrate_start(struct net_conn *c)
{
    if (c->state != NET_CONN_OPEN || (c->flags & (NET_F_MIGRATING | NET_F_FLUSH_CLOSE)))
        return NULL;
    HD_ASSERT(net_conn_migration(c) == NULL);
    struct net_migration *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->c = c;
    return m;
}

/* 0, or -ENOMEM (no move state: m is freed). */
static int migrate_wait(struct net_conn *c, struct net_migration *m)
{
    int rc = net_conn_hold_set(c, c->hold == NET_HOLD_QUIET ? NET_HOLD_QUIET_MOVE : NET_HOLD_MOVE);
    if (rc < 0) {
        free(m);
        return rc;
    }
    c->move->migration = m;
    hd_timer_stop(c->shard, &c->idle_timer);
    hd_timer_stop(c->shard, &c->write_timer);
    hd_timer_stop(c->shard, &c->nobufs_timer);   /* the destination receives afresh */
    hd_timer_stop(c->shard, &c->deadline_timer); /* deadline_at_ms travels; re-armed there */
    net_conn_pause_recv(c, true); /* cancels the recv; its last CQE brings us to the step */
    net_conn_maybe_finish(c);
    return 0;
}

int net_conn_migrate(struct net_conn *c, unsigned dst, net_adopt_fn *adopt, void *arg)
{
    if (dst >= hd_shard_count(c->shard) || dst == hd_shard_id(c->shard))
        return -EINVAL;
    bool busy = c->state != NET_CONN_OPEN || (c->flags & (NET_F_MIGRATING | NET_F_FLUSH_CLOSE));
    if (!busy)
        net_conn_class_drain(c); /* frames in send classes travel in the send queue */
    struct net_migration *m = migrate_start(c);
    if (m == NULL)
        return busy ? -EBUSY : -ENOMEM;
    m->dst = dst;
    m->adopt = adopt;
    m->arg = arg;
    return migrate_wait(c, m);
}

int net_migrate_begin(struct net_conn *c, net_codec_save_fn *save, net_export_fn *done, void *arg)
{
    bool busy = c->state != NET_CONN_OPEN || (c->flags & (NET_F_MIGRATING | NET_F_FLUSH_CLOSE));
    if (!busy)
        net_conn_class_drain(c); /* frames in send classes travel in the send queue */
    struct net_migration *m = migrate_start(c);
    if (m == NULL)
        return busy ? -EBUSY : -ENOMEM;
    m->dst = UINT32_MAX; /* no shard */
    m->export_done = done;
    m->export_save = save;
    m->export_arg = arg;
    return migrate_wait(c, m);
}

static int take_queue(struct net_sendq *q, struct net_sendq_entry **out, uint32_t *count)
{
    *count = q->count;
    if (q->count == 0)
        return 0;
    *out = malloc(sizeof(**out) * q->count);
    if (*out == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < q->count; i++)
        (*out)[i] = *net_sendq_at(q, i);
    return 0;
}

static void migrate_arrive(struct hd_shard *dst, const struct hd_msg *msg);

static void migrate_send(struct net_migration *m, struct hd_shard *s)
{
    struct hd_msg msg = {.fn = migrate_arrive, .ptr = m};
    if (hd_bus_send_control(s, m->dst, &msg) == 0) /* a connection's move: control */
        return;
    hd_timer_start(s, &m->retry, 1); /* full bus: the package waits, the fd stays open */
}

static void migrate_retry(struct hd_timer *t)
{
    struct net_migration *m = hd_container_of(t, struct net_migration, retry);
    migrate_send(m, hd_shard_current());
}

/* Level 0's codec first (only it may have move hooks): if it cannot move, nothing else has been
 * taken apart yet. -ENOMEM: it cannot (move_out released its pooled state either way). */
static int take_codec(struct net_conn *c, struct net_migration *m)
{
    struct net_codec_level *l = &c->codecs[0];
    m->codecs[0].codec = l->codec;
    m->codecs[0].state = l->state;
    if (l->codec && l->codec->move_out) {
        /* NULL: the codec refused (TLS mid-handshake or mid-rekey) or had no memory; its state
         * is still its own, and the close that follows releases it with the level. */
        void *moved = l->codec->move_out(c, l->state);
        if (moved == NULL) {
            m->codecs[0].codec = NULL;
            m->codecs[0].state = NULL;
            return -ENOMEM;
        }
        m->codecs[0].state = moved;
        l->codec = NULL;
        l->state = NULL;
    }
    return 0;
}

/* Held buffers and the three send queues into the package (references and all). */
static int take_buffers(struct net_conn *c, struct net_migration *m)
{
    int rc = net_conn_held_take(c, &m->chunks, &m->chunks_count);
    if (rc == 0)
        rc = take_queue(&c->plain, &m->plain, &m->plain_count);
    for (unsigned i = 0; rc == 0 && i < NET_CODECS_MAX - 1; i++)
        rc = take_queue(&c->mid[i], &m->mid[i], &m->mid_count[i]);
    if (rc == 0)
        rc = take_queue(&c->wire, &m->wire, &m->wire_count);
    return rc;
}

/* take_buffers failed: the codec goes back to c (to be closed), the package is freed. */
static void take_undo(struct net_conn *c, struct net_migration *m)
{
    const struct net_codec *codec = m->codecs[0].codec;
    if (codec && codec->move_out) {
        c->codecs[0].state = codec->move_in(c, m->codecs[0].state);
        c->codecs[0].codec = c->codecs[0].state ? codec : NULL;
    }
    for (uint32_t i = 0; i < m->chunks_count; i++)
        hd_frame_unref(c->shard, m->chunks[i]);
    free(m->chunks);
    free(m->plain);
    for (unsigned i = 0; i < NET_CODECS_MAX - 1; i++)
        free(m->mid[i]);
    free(m->wire);
    free(m);
}

/* The rest of what the destination needs; then c lets go of everything moved (the frames'
 * references now belong to the package). */
static void take_rest(struct net_conn *c, struct net_migration *m)
{
    HD_ASSERT(c->held_head == NET_BID_NONE && c->move == NULL);    /* all taken */
    HD_ASSERT(net_conn_class_count(c, NET_SEND_CLASSES_MAX) == 0); /* drained, none since */
    m->fd = c->fd;
    m->h = c->h;
    m->app = c->app;
    m->rx_tail = c->rx_tail;
    m->codecs_n = c->codecs_n;
    for (unsigned level = 0; level < NET_CODECS_MAX; level++) {
        if (level > 0) /* no move hooks (net_conn_switch_codec): the state moves as it is */
            m->codecs[level] = c->codecs[level];
        m->codecs[level].tail = c->codecs[level].tail; /* level 0's: also without a codec */
        c->codecs[level] = (struct net_codec_level){0};
    }
    c->codecs_n = 0;
    m->peer = c->peer;
    m->stats = c->stats;
    m->send_paused = (c->flags & NET_F_SEND_PAUSED) != 0;
    m->deadline_at_ms = c->deadline_at_ms;
    m->opt = (struct net_conn_options){.idle_timeout_ms = c->idle_timeout_ms,
                                       .write_timeout_ms = c->write_timeout_ms,
                                       .send_high_bytes = c->send_high,
                                       .send_low_bytes = c->send_low,
                                       .send_max_bytes = c->send_max,
                                       .send_high_frames = c->send_high_frames,
                                       .send_low_frames = c->send_low_frames,
                                       .rx_tail_max = c->rx_tail_max};
    c->rx_tail = NULL;
    while (c->plain.count)
        net_sendq_pop(c->ns, c->shard, &c->plain, false);
    for (unsigned i = 0; i < NET_CODECS_MAX - 1; i++)
        while (c->mid[i].count)
            net_sendq_pop(c->ns, c->shard, &c->mid[i], false);
    while (c->wire.count)
        net_sendq_pop(c->ns, c->shard, &c->wire, false);
}

/* Source side, once nothing of c is in flight. */
void net_migrate_step(struct net_conn *c)
{
    struct net_migration *m = net_conn_migration(c);
    struct hd_shard *s = c->shard;
    /* net_conn_maybe_finish calls this once nothing of c is in flight and it is still open */
    HD_ASSERT(m != NULL && m->c == c && c->hold == NET_HOLD_MOVE);
    HD_ASSERT(c->state == NET_CONN_OPEN && c->depth == 0);
    HD_ASSERT(!hd_op_busy(&c->recv_op) && !hd_op_busy(&c->send_op) && !hd_op_busy(&c->ctl_op));
    HD_ASSERT(c->send_ctx == NULL && m->dst != hd_shard_id(s) && c->codec_at == 0);
    c->move->migration = NULL; /* the package is sent, or freed here */
    /* Carried bytes stay until net_conn_held_take takes them (the last one ends the carry). */
    net_conn_hold_set(c, c->move->pending_head ? NET_HOLD_CARRY : NET_HOLD_NONE);
    if (m->export_done) { /* to another process (export.c) */
        net_export_step(c, m->export_save, m->export_done, m->export_arg);
        free(m);
        return;
    }
    int rc = take_codec(c, m);
    if (rc < 0) {
        hd_log_rl(HD_LOG_WARN, "net: codec %s cannot move a connection", c->codecs[0].codec->name);
        free(m);
    } else if ((rc = take_buffers(c, m)) < 0) {
        take_undo(c, m);
        hd_log_rl(HD_LOG_WARN, "net: cannot move a connection: %s", strerror(-rc));
    }
    if (rc < 0) {
        net_conn_close(c, rc, false);
        return;
    }
    take_rest(c, m);
    net_conn_state_set(c, NET_CONN_CLOSED); /* moved: released without on_close */
    m->c = NULL;
    net_conn_release(c, false);
    hd_timer_init(&m->retry, migrate_retry);
    migrate_send(m, s);
}

static void package_drop(struct hd_shard *s, struct net_migration *m)
{
    for (uint32_t i = 0; i < m->plain_count; i++)
        if (m->plain[i].frame)
            hd_frame_unref(s, m->plain[i].frame);
    for (unsigned q = 0; q < NET_CODECS_MAX - 1; q++)
        for (uint32_t i = 0; i < m->mid_count[q]; i++)
            if (m->mid[q][i].frame)
                hd_frame_unref(s, m->mid[q][i].frame);
    for (uint32_t i = 0; i < m->wire_count; i++)
        if (m->wire[i].frame)
            hd_frame_unref(s, m->wire[i].frame);
    for (uint32_t i = 0; i < m->chunks_count; i++)
        hd_frame_unref(s, m->chunks[i]);
    free(m->chunks);
    if (m->rx_tail)
        hd_frame_unref(s, m->rx_tail);
    for (unsigned level = 0; level < NET_CODECS_MAX; level++) {
        struct net_codec_level *l = &m->codecs[level];
        if (l->tail)
            hd_frame_unref(s, l->tail);
        /* The connection never got it (level 0's moved state: move_drop, by the caller). */
        if (level > 0 && l->codec && l->codec->release)
            l->codec->release(NULL, l->state);
    }
    free(m->plain);
    for (unsigned i = 0; i < NET_CODECS_MAX - 1; i++)
        free(m->mid[i]);
    free(m->wire);
    free(m);
}

static int requeue(struct net_conn *c, struct net_sendq *q, struct net_sendq_entry *e, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        int rc = net_sendq_push(c->ns, q, e[i].frame, e[i].off, e[i].len);
        if (rc < 0)
            return rc;
        e[i].frame = NULL; /* the queue holds the reference now */
    }
    return 0;
}

/* The codec stack and the tails onto the new connection (the package lets go of them): 0, or
 * -ENOMEM when level 0's move_in failed (its level stays empty, to be closed). */
static int codecs_arrive(struct net_conn *c, struct net_migration *m)
{
    int rc = 0;
    c->rx_tail = m->rx_tail;
    m->rx_tail = NULL;
    for (unsigned level = 0; level < NET_CODECS_MAX; level++) {
        c->codecs[level] = m->codecs[level];
        m->codecs[level] = (struct net_codec_level){0};
    }
    c->codecs_n = m->codecs_n;
    struct net_codec_level *l = &c->codecs[0];
    if (l->codec && l->codec->move_in) {
        l->state = l->codec->move_in(c, l->state);
        if (l->state == NULL) {
            l->codec = NULL;
            rc = -ENOMEM;
        }
    }
    return rc;
}

/* Destination side. */
static void migrate_arrive(struct hd_shard *dst, const struct hd_msg *msg)
{
    struct net_migration *m = msg->ptr;
    HD_ASSERT(m->c == NULL && m->dst == hd_shard_id(dst) && m->fd >= 0); /* packed and sent */
    int rc = 0;
    struct net_conn *c = net_conn_new(dst, m->fd, m->h, m->app, &m->opt);
    if (c == NULL) {
        hd_log_rl(HD_LOG_WARN, "net: connection pool full: a moved connection is closed");
        close(m->fd);
        net_adopt_fn *adopt = m->adopt;
        void *arg = m->arg;
        const struct net_codec *codec = m->codecs[0].codec;
        if (codec && codec->move_drop) /* its moved state never arrived */
            codec->move_drop(dst, m->codecs[0].state);
        package_drop(dst, m);
        adopt(NULL, arg); /* the app frees its state */
        return;
    }
    c->peer = m->peer;
    c->stats = m->stats;
    if (m->send_paused) /* on_send_pressure(false) comes only from a queue marked paused */
        c->flags |= NET_F_SEND_PAUSED;
    rc = codecs_arrive(c, m);
    net_conn_state_set(c, NET_CONN_OPEN);
    if (rc == 0)
        rc = requeue(c, &c->plain, m->plain, m->plain_count);
    for (unsigned i = 0; rc == 0 && i < NET_CODECS_MAX - 1; i++)
        rc = requeue(c, &c->mid[i], m->mid[i], m->mid_count[i]);
    if (rc == 0)
        rc = requeue(c, &c->wire, m->wire, m->wire_count);
    c->depth++;
    m->adopt(c, m->arg);
    if (rc < 0)
        net_conn_close(c, rc, false);
    if (c->state == NET_CONN_OPEN) {
        if (c->idle_timeout_ms)
            hd_timer_start(dst, &c->idle_timer, c->idle_timeout_ms);
        if (m->deadline_at_ms) { /* what is left of it; one already past fires at once */
            uint64_t now = hd_now_ms(dst);
            c->deadline_at_ms = m->deadline_at_ms;
            hd_timer_start(dst, &c->deadline_timer,
                           m->deadline_at_ms > now ? m->deadline_at_ms - now : 0);
        }
        uint32_t i = 0; /* references move to the connection; the rest go with the package */
        while (rc == 0 && i < m->chunks_count && (rc = net_conn_pending_add(c, m->chunks[i])) == 0)
            i++;
        if (i > 0) {
            memmove(m->chunks, m->chunks + i, sizeof(*m->chunks) * (m->chunks_count - i));
            m->chunks_count -= i;
        }
        if (rc == 0)
            rc = net_conn_replay(c);
        if (rc < 0)
            net_conn_close(c, rc, false);
    }
    package_drop(dst, m);
    if (c->state == NET_CONN_OPEN) {
        net_conn_recv_arm(c);
        if (!net_conn_queues_empty(c))
            hd_flush_request(dst, &c->flush);
    }
    c->depth--;
    net_conn_maybe_finish(c);
}
