/* server_client.c - one DERP connection on the server: the login (ServerKey, ClientInfo,
 * the move to the key's owner shard, ServerInfo; spec §4), the reader's frame dispatch (§6.1),
 * the two 32-packet queues with derper's drop policy (§6.3: net's send classes, which also
 * move them into the send queue as derper's writer does, §6.4), Ping/Pong, KeepAlive. Runs on
 * the connection's shard; owns its struct srv_client (heap: born on the accepting shard, freed on
 * the owner). The login has --login-deadline from the upgrade to ClientInfo (an absolute deadline,
 * kept by a move). A ClientInfo over SRV_LOGIN_INLINE_MAX (the spec allows 256 KiB; a DERP
 * connection keeps at most DERP_CONN_TAIL_MAX unconsumed) is gathered in its own heap buffer during
 * the login and split from there; its JSON is read as Go reads it (invalid UTF-8 becomes U+FFFD,
 * nesting up to Go's 10,000: proto/derp_json.c). Logins with the mesh key are capped per shard
 * (--mesh-conns-max; refused past it, mesh_conns_refused). Settling on a shard
 * (srv_client_settle) starts the keep-alive and the frame account there, then the settle hook
 * (quota, rate bucket, accounting, re-checks); srv_client_unsettle undoes both before a move or
 * at close. The keep-alive is derper's period (60 s + the connection's jitter), the first one
 * at a random point of the first period, so peers that log in together do not send theirs
 * together. The queues are the connection's send classes in net (net_conn_send_class): they
 * hold packets only while the connection is backed up, in entries of net's send-queue pool, and
 * before the client leaves the shard srv_client_drain moves them into its connection's send
 * queue, which travels with it: an idle connection costs about 1 KiB of user memory, 2.4 KiB
 * over TLS (perf/run-idle-mem.sh). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <hd/hd_rand.h>
#include <hd/net_class.h>

#include "server.h"

/* ---------------------------------------------------------------- sending */

static void writer_run(struct hd_flush *f);

/* derper's buffered_write_frames (spec §9): the frames handed to a connection in one tick go
 * out in one flush (net's send at the tick's end). A tick's count is observed when the
 * connection's next tick hands it a frame, or when it leaves the shard. */
static void batch_observe(struct srv_client *cl)
{
    if (cl->batch_frames)
        SRV_HIST_OBSERVE(&cl->ds->ctr, write_frames, srv_write_frames_bounds, cl->batch_frames);
    cl->batch_frames = 0;
}

void srv_client_note_frame(struct srv_client *cl)
{
    uint16_t tick = (uint16_t)hd_shard_stats(cl->ds->s)->ticks;
    if (cl->batch_tick != tick) {
        batch_observe(cl);
        cl->batch_tick = tick;
    }
    if (cl->batch_frames < UINT16_MAX)
        cl->batch_frames++;
}

/* derper's mesh_update_batch_size: the notices that go out together (the frames in data). */
void srv_watch_notes_observe(struct srv_client *cl, const uint8_t *data, uint32_t size)
{
    uint64_t n = 0;
    uint8_t type;
    uint32_t len;
    for (uint32_t off = 0;
         off < size && derp_frame_header_decode(data + off, size - off, &type, &len) == 0; n++)
        off += DERP_FRAME_HEADER_LEN + len;
    if (n == 0)
        return; /* derper observes no empty batch either */
    SRV_HIST_OBSERVE(&cl->ds->ctr, mesh_batch, srv_mesh_batch_bounds, n);
    if (cl->notes_batches < UINT8_MAX)
        cl->notes_batches++;
}

/* derper's mesh_update_loop_count: the batches one writer run sent (one, unless a notes frame
 * filled up during the tick and went ahead). */
void srv_watch_notes_loops(struct srv_client *cl)
{
    if (cl->notes_batches)
        SRV_HIST_OBSERVE(&cl->ds->ctr, mesh_loops, srv_mesh_loop_bounds, cl->notes_batches);
    cl->notes_batches = 0;
}

/* A control frame (KeepAlive, Pong, ServerInfo, PeerGone, ...). No frame even in the pool's
 * reserve (-ENOMEM) is the shard's trouble, not this client's: the frame is skipped and counted
 * (a KeepAlive comes again, a lost Pong is a lost Ping). A queue over its cap (-ENOBUFS) is the
 * client's own backlog: then it is closed, as before. Returns 0 or the send's -errno. */
static int ctl_sent(struct srv_client *cl, int rc)
{
    if (rc == -ENOMEM) {
        cl->ds->ctr.ctl_dropped++;
        hd_log_rl(HD_LOG_WARN, "frame pool exhausted: a control frame was not sent");
    } else if (rc < 0) {
        srv_client_close(cl, -ENOBUFS);
    }
    return rc;
}

int srv_client_send_ctl(struct srv_client *cl, const uint8_t *frame, size_t len)
{
    srv_client_note_frame(cl);
    return ctl_sent(cl, net_conn_send_copy(cl->conn, frame, len));
}

/* A Pong or a KeepAlive: small frames first, ahead of the packets queued for the connection and
 * not yet in the kernel's hands (net_conn_send_urgent; packets keep their order). */
static int send_urgent(struct srv_client *cl, const uint8_t *frame, size_t len)
{
    srv_client_note_frame(cl);
    return ctl_sent(cl, net_conn_send_urgent(cl->conn, frame, len));
}

/* Every packet the relay loses is counted here (derper's packets_dropped, bytes_dropped). */
void srv_packet_drop_count(struct srv_shard *ds, enum srv_drop why, enum srv_kind kind,
                           uint64_t bytes)
{
    ds->ctr.packets_dropped[why][kind]++;
    ds->ctr.bytes_dropped[why][kind] += bytes;
}

void srv_packet_drop(struct srv_shard *ds, struct hd_frame *f, enum srv_drop why)
{
    HD_ASSERT(f->len >= SRV_ROUTE_OFF + DERP_FRAME_HEADER_LEN + DERP_KEY_LEN);
    srv_packet_drop_count(ds, why, srv_frame_kind(f),
                          f->len - SRV_ROUTE_OFF - DERP_FRAME_HEADER_LEN - DERP_KEY_LEN);
    hd_frame_unref(ds->s, f);
}

/* A packet went into the connection's send queue (it goes out with this tick's sendmsg) after
 * queued_ms waiting in its class (derper's average_queue_duration_ms, spec §9); len is its
 * RecvPacket frame's. */
static void queue_time(struct srv_shard *ds, uint64_t queued_ms)
{
    ds->queue_avg_ms = 0.1 * (double)queued_ms + 0.9 * ds->queue_avg_ms;
}

static void packet_written(struct srv_client *cl, const struct hd_frame *f, uint32_t len,
                           uint64_t queued_ms)
{
    queue_time(cl->ds, queued_ms);
    cl->ds->ctr.packets_sent++;
    srv_client_note_frame(cl);
    cl->ds->ctr.bytes_sent += len - DERP_FRAME_HEADER_LEN - DERP_KEY_LEN;
    srv_tally_tx(cl, len - DERP_FRAME_HEADER_LEN - DERP_KEY_LEN);
    /* §6.7: the receiver now hears when this source leaves. */
    srv_source_subscribe(cl, f->data + SRV_ROUTE_OFF + DERP_FRAME_HEADER_LEN);
}

/* derper's two 32-packet queues with its policy (§6.3) are the connection's send classes (net,
 * net_conn_send_class): one per kind, up to 3 tries to make room by dropping the oldest, then
 * drop the new one. They fill only while the connection is backed up (its send queue over the
 * high watermark, or packets already waiting); net moves them into the send queue at each
 * flush, one of each kind in turn, up to the watermark (derper's writer, §6.4). */
static void class_dropped(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len,
                          unsigned k, enum net_send_drop why, uint32_t waited_ms)
{
    (void)off;
    struct srv_client *cl = net_conn_app(c);
    static const enum srv_drop as[] = {
        [NET_SEND_DROP_OLDEST] = SRV_DROP_QUEUE_HEAD,
        [NET_SEND_DROP_NEW] = SRV_DROP_QUEUE_TAIL,
        [NET_SEND_DROP_ERROR] = SRV_DROP_WRITE_ERROR,
        [NET_SEND_DROP_CLOSED] = SRV_DROP_GONE_DISCONNECTED,
    };
    HD_ASSERT((unsigned)why < sizeof(as) / sizeof(as[0]) && srv_frame_kind(f) == k);
    srv_packet_drop_count(cl->ds, as[why], (enum srv_kind)k,
                          len - DERP_FRAME_HEADER_LEN - DERP_KEY_LEN);
    if (why == NET_SEND_DROP_OLDEST) /* derper's sendPkt: a head drop's wait counts too */
        queue_time(cl->ds, waited_ms);
}

static void class_taken(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len,
                        unsigned k, uint32_t waited_ms)
{
    (void)off, (void)k;
    packet_written(net_conn_app(c), f, len, waited_ms);
}

static void class_drained(struct net_conn *c)
{
    srv_wait_drained(net_conn_app(c)); /* its waiting senders read again (server_wait.c) */
}

static const struct net_send_classes client_classes = {
    .count = SRV_KINDS,
    .cls = {[SRV_KIND_DISCO] = {.depth = SRV_QUEUE_DEPTH, .tries = SRV_QUEUE_TRIES},
            [SRV_KIND_OTHER] = {.depth = SRV_QUEUE_DEPTH, .tries = SRV_QUEUE_TRIES}},
    .on_drop = class_dropped,
    .on_taken = class_taken,
    .on_drained = class_drained,
};
_Static_assert(SRV_KINDS <= NET_SEND_CLASSES_MAX, "a send class per kind");
_Static_assert(SRV_QUEUE_DEPTH <= UINT16_MAX && SRV_QUEUE_TRIES <= UINT8_MAX, "net's bounds");

/* While the connection keeps up, a packet goes straight into its send queue; behind a backlog
 * it waits in its kind's class (derper's policy applies there: class_dropped counts). */
int srv_client_enqueue(struct srv_client *cl, struct hd_frame *f)
{
    if (cl->phase != SRV_CLIENT_ACTIVE) {
        if (cl->exporting) /* on its way to the successor: lost in the hand-over */
            cl->ds->handover_dropped++;
        srv_packet_drop(cl->ds, f, SRV_DROP_GONE_DISCONNECTED);
        return -EPIPE;
    }
    uint32_t len = f->len - SRV_ROUTE_OFF;
    int rc = net_conn_send_class(cl->conn, f, SRV_ROUTE_OFF, len, srv_frame_kind(f));
    if (hd_likely(rc == 0)) {
        packet_written(cl, f, len, 0);
        hd_frame_unref(cl->ds->s, f);
        return 0;
    }
    if (rc > 0 || rc == -ENOSPC) { /* waits in its class, or dropped there (counted) */
        hd_frame_unref(cl->ds->s, f);
        return rc > 0 ? SRV_ENQUEUED_BEHIND : rc;
    }
    /* -EPIPE: the connection is closing (its on_close has not run yet): the receiver is gone,
     * as derper counts a packet for a destination whose context is done. Else (-ENOBUFS: over
     * the send queue's bytes, or no pool entry) a write error. */
    srv_packet_drop(cl->ds, f, rc == -EPIPE ? SRV_DROP_GONE_DISCONNECTED : SRV_DROP_WRITE_ERROR);
    return rc;
}

/* Pong (ahead of the packets queued in net and not yet in the kernel's hands), watchers'
 * notices; the packets waiting in the send classes net moves itself. */
static void writer_write(struct srv_client *cl)
{
    if (cl->phase != SRV_CLIENT_ACTIVE)
        return;
    srv_watch_notes_flush(cl);
    srv_watch_notes_loops(cl);
    if (cl->pong_pending) {
        uint8_t pong[DERP_FRAME_HEADER_LEN + DERP_PING_LEN];
        derp_frame_pong_encode(pong, sizeof(pong), cl->pong);
        cl->pong_pending = false;
        cl->ds->ctr.sent_pong++;
        send_urgent(cl, pong, sizeof(pong));
    }
}

static void writer_run(struct hd_flush *fl) /* end of tick */
{
    writer_write(hd_container_of(fl, struct srv_client, writer));
}

/* Reading paused by rate tokens or a wait (server_wait.c): the timer reads on; whatever paused
 * it checks again with the bytes offered. */
static void read_resume(struct hd_timer *t)
{
    struct srv_client *cl = hd_container_of(t, struct srv_client, read_timer);
    srv_wait_expired(cl);                 /* still waiting: its wait ran out */
    net_conn_pause_recv(cl->conn, false); /* offers the kept bytes again: cl may be gone */
}

void srv_client_read_pause(struct srv_client *cl, uint64_t ms)
{
    net_conn_pause_recv(cl->conn, true);
    hd_timer_start(cl->ds->s, &cl->read_timer, ms);
}

void srv_client_read_resume_soon(struct srv_client *cl)
{
    hd_timer_start(cl->ds->s, &cl->read_timer, 0);
}

void srv_client_drain(struct srv_client *cl)
{
    writer_write(cl);
    if (cl->phase == SRV_CLIENT_ACTIVE)
        net_conn_class_drain(cl->conn); /* past the watermark: a move takes the send queue */
}

static void keepalive_fired(struct hd_timer *t)
{
    struct srv_client *cl = hd_container_of(t, struct srv_client, keepalive);
    uint8_t ka[DERP_FRAME_HEADER_LEN];
    derp_frame_keep_alive_encode(ka, sizeof(ka));
    send_urgent(cl, ka, sizeof(ka));
    cl->ds->cfg->hooks->tally_feed(cl); /* a quiet connection's counts reach the tables */
    if (cl->phase == SRV_CLIENT_ACTIVE)
        hd_timer_start(cl->ds->s, t, cl->keepalive_ms);
}

/* derper's period (§6.4): the interval plus a jitter drawn once per connection. The first
 * KeepAlive comes anywhere in the first period, not at its end: peers that logged in together
 * (a restart, a network coming back) would otherwise send theirs in one burst every minute
 * (4,000 peers: ~800 a second for 5 s). On a placement move the first one is drawn again. */
static void keepalive_start(struct srv_shard *ds, struct srv_client *cl)
{
    uint32_t jitter = ds->cfg->keepalive_jitter_ms;
    if (cl->keepalive_ms == 0)
        cl->keepalive_ms =
            ds->cfg->keepalive_ms + (jitter ? (uint32_t)hd_rand_below(ds->s, jitter) : 0);
    HD_ASSERT(cl->keepalive_ms > 0);
    hd_timer_init(&cl->keepalive, keepalive_fired);
    hd_timer_start(ds->s, &cl->keepalive, 1 + hd_rand_below(ds->s, cl->keepalive_ms));
}

/* ---------------------------------------------------------------- login */

int srv_client_start(struct srv_shard *ds, struct net_conn *c, bool fast_start, bool not_ideal)
{
    struct srv_client *cl = calloc(1, sizeof(*cl));
    if (cl == NULL)
        return -ENOMEM;
    cl->conn = c;
    cl->ds = ds;
    cl->instance = ds->instance;
    cl->phase = SRV_CLIENT_HANDSHAKE;
    cl->fast_start = fast_start;
    cl->not_ideal = not_ideal;
    const struct net_addr *peer = net_conn_peer(c);
    if (peer->len)
        derp_addr_from_sockaddr(&cl->remote, &peer->sa, peer->len);
    derp_splitter_init(&cl->sp, DERP_READER_SERVER_HELLO);
    net_conn_set_app(c, &srv_client_handler, cl);
    cl->prelogin = true; /* the HTTP phase's count is the client's now */
    ds->ctr.accepts++;   /* derper's accepts: DERP connections (Server.Accept) */
    /* derper's accept(): the ServerKey write and ClientInfo within 10 s, an absolute deadline
     * (no idle timer: one byte a second would keep it alive). */
    net_conn_set_timeouts(c, 0, ds->cfg->write_timeout_ms);
    net_conn_set_deadline(c, ds->cfg->login_deadline_ms);
    /* §1.3 + §4 step 1: the 101 (not for fast start) and the ServerKey frame, in one write. */
    char buf[DERP_HTTP_101_LEN + DERP_FRAME_HEADER_LEN + DERP_SERVER_KEY_LEN];
    int n = 0;
    if (!fast_start)
        n = derp_http_write_101(buf, sizeof(buf), ds->cfg->key.pub.bytes);
    ssize_t k =
        derp_server_key_encode((uint8_t *)buf + n, sizeof(buf) - (size_t)n, &ds->cfg->key.pub);
    HD_ASSERT(n >= 0 && k > 0);
    return net_conn_send_copy(c, buf, (size_t)n + (size_t)k);
}

/* derper's stats loop (derpserver_linux.go): the client's TCP round trip from TCP_INFO every
 * SRV_RTT_INTERVAL_MS into derp_tcp_rtt's buckets (durationToLabel's bounds); a socket that
 * cannot tell at the first look is counted "error" once and not asked again. Off with
 * TS_DERP_DISABLE_RTT_STATS, as derper. */
static unsigned rtt_bucket(uint32_t rtt_us)
{
    static const uint32_t le_ms[SRV_RTT_BUCKETS - 1] = {10, 20, 50, 100, 150, 250, 500};
    unsigned i = 0;
    while (i < SRV_RTT_BUCKETS - 1 && rtt_us > le_ms[i] * 1000u)
        i++;
    return i; /* SRV_RTT_BUCKETS - 1: inf */
}

static int rtt_read(const struct srv_client *cl, uint32_t *rtt_us)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    int fd = net_conn_fd(cl->conn);
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
        len < offsetof(struct tcp_info, tcpi_rtt) + sizeof(ti.tcpi_rtt))
        return -1;
    *rtt_us = ti.tcpi_rtt;
    return 0;
}

static void rtt_fired(struct hd_timer *t)
{
    struct srv_client *cl = hd_container_of(t, struct srv_client, rtt_timer);
    uint32_t us;
    if (rtt_read(cl, &us) == 0)
        cl->ds->ctr.tcp_rtt[rtt_bucket(us)]++;
    hd_timer_start(cl->ds->s, t, SRV_RTT_INTERVAL_MS);
}

static void rtt_start(struct srv_shard *ds, struct srv_client *cl)
{
    uint32_t us;
    hd_timer_init(&cl->rtt_timer, rtt_fired);
    if (ds->cfg->rtt_stats_off)
        return;
    if (!cl->rtt_checked) {
        cl->rtt_checked = true;
        cl->rtt_off = rtt_read(cl, &us) < 0;
        if (cl->rtt_off)
            ds->ctr.tcp_rtt[SRV_RTT_ERROR]++;
    }
    if (!cl->rtt_off)
        hd_timer_start(ds->s, &cl->rtt_timer, SRV_RTT_INTERVAL_MS);
}

/* What binds an active client to its shard: writer, keep-alive, rate bucket, the gauges. At
 * activation, and again on the shard a placed client moves to (server_place.c). */
void srv_client_settle(struct srv_shard *ds, struct srv_client *cl)
{
    cl->rate_waiting = false;
    hd_timer_init(&cl->read_timer, read_resume);
    hd_flush_init(&cl->writer, writer_run);
    keepalive_start(ds, cl);
    rtt_start(ds, cl);
    /* A watcher has a client's write deadline (issue 24): it cannot keep up, it is closed. */
    net_conn_set_timeouts(cl->conn, 0,
                          cl->mesh && !cl->watcher ? DERP_MESH_WRITE_TIMEOUT_MS
                                                   : ds->cfg->write_timeout_ms);
    ds->ctr.current_connections++;
    if (cl->mesh)
        ds->ctr.mesh_conns++;
    if (cl->not_ideal)
        ds->ctr.current_notideal_connections++;
    if (cl->preferred)
        ds->ctr.current_home_connections++;
    srv_frames_client_init(cl); /* this shard's frame account (its frames come from here) */
    ds->cfg->hooks->settle(cl); /* quota, rate bucket, accounting, re-checks */
    if (cl->pong_pending)
        hd_flush_request(ds->s, &cl->writer);
}

void srv_client_unsettle(struct srv_shard *ds, struct srv_client *cl)
{
    srv_watch_notes_flush(cl); /* before its account goes (sent, or released if it closes) */
    srv_watch_notes_loops(cl);
    batch_observe(cl);
    hd_flush_cancel(ds->s, &cl->writer);
    hd_timer_stop(ds->s, &cl->keepalive);
    hd_timer_stop(ds->s, &cl->read_timer);
    hd_timer_stop(ds->s, &cl->rtt_timer);
    srv_wait_leave(cl);       /* its wait, and its waiting senders, end with its time here */
    srv_place_tick_leave(cl); /* and this tick's placement decision for it */
    ds->cfg->hooks->unsettle(cl);
    srv_frames_client_fini(cl);
    ds->ctr.current_connections--;
    if (cl->mesh)
        ds->ctr.mesh_conns--;
    if (cl->not_ideal)
        ds->ctr.current_notideal_connections--;
    if (cl->preferred)
        ds->ctr.current_home_connections--;
}

/* On the owner shard: the client is registered and hears ServerInfo (§4 step 7). */
static void client_activate(struct srv_shard *ds, struct srv_client *cl)
{
    cl->ds = ds;
    /* --mesh-conns-max (issue 24): a region is a handful of nodes, each one connection here */
    if (cl->mesh && ds->ctr.mesh_conns >= (int64_t)ds->cfg->mesh_conns_max) {
        ds->ctr.mesh_conns_refused++;
        hd_log_rl(HD_LOG_WARN,
                  "mesh: a login with the mesh key refused: %u mesh-key connections on this "
                  "shard already (--mesh-conns-max)",
                  ds->cfg->mesh_conns_max);
        srv_client_close(cl, -EUSERS);
        return;
    }
    srv_client_phase_set(cl, SRV_CLIENT_ACTIVE);
    cl->connected_ms = hd_now_ms(ds->s);
    hd_tbucket_fill(&cl->not_here, DERP_NOT_HERE_BURST, cl->connected_ms);
    srv_client_settle(ds, cl);
    uint8_t buf[DERP_FRAME_HEADER_LEN + DERP_SERVER_INFO_JSON_MAX + DERP_SEALED_OVERHEAD];
    ssize_t n = derp_server_info_seal(buf, sizeof(buf), &ds->cfg->key, &cl->key, NULL, NULL);
    if (n < 0) {
        srv_client_close(cl, (int)n);
        return;
    }
    srv_register(ds, cl);
    if (srv_client_send_ctl(cl, buf, (size_t)n) == -ENOMEM)
        srv_client_close(cl, -ENOMEM); /* no ServerInfo: the login failed, the client retries */
}

static void client_adopt(struct net_conn *c, void *arg)
{
    struct srv_client *cl = arg;
    if (c == NULL) { /* the owner shard could not take the connection */
        struct srv_shard *here = srv_shard_at(hd_shard_current(), cl->instance);
        here->cfg->hooks->move_done(here, cl, NULL);
        free(cl);
        return;
    }
    cl->conn = c;
    net_conn_set_app(c, &srv_client_handler, cl);
    struct srv_shard *ds = srv_shard_at(net_conn_shard(c), cl->instance);
    HD_ASSERT(ds != NULL); /* moves arrive while the shard loops: between init and fini */
    ds->cfg->hooks->move_done(ds, cl, c);
    client_activate(ds, cl);
}

/* The login is over (admitted, refused or closed): the connection leaves the pre-login count
 * of the accepting shard (where it still is: the move comes after this). */
static void prelogin_done(struct srv_client *cl)
{
    if (!cl->prelogin)
        return;
    cl->prelogin = false;
    cl->ds->cfg->hooks->login_over(cl);
}

static int on_client_info(struct srv_client *cl, const uint8_t *payload, uint32_t len)
{
    struct srv_shard *ds = cl->ds;
    /* derper clears its deadline after verifyClient, which does no I/O on the connection: the
     * admission wait is bounded by its own timeout (SRV_ADMIT_TIMEOUT_MS), not by this one. */
    net_conn_set_deadline(cl->conn, 0);
    struct derp_client_info info;
    int rc = derp_client_info_open(payload, len, &ds->cfg->key, &cl->key, &info, ds->scratch,
                                   DERP_CLIENT_INFO_PLAIN_MAX);
    if (rc < 0)
        return rc;
    cl->mesh = ds->cfg->have_mesh_key && info.has_mesh_key &&
               derp_mesh_key_admits(&ds->cfg->mesh_key, &info.mesh_key);
    cl->prober = info.is_prober;
    cl->can_ack_pings = info.can_ack_pings;
    derp_splitter_set_mesh(&cl->sp, cl->mesh);
    if (cl->mesh) {
        net_conn_set_limits(cl->conn, SRV_NET_HIGH_BYTES, SRV_NET_LOW_BYTES,
                            SRV_MESH_NET_MAX_BYTES);
        net_conn_set_frame_limits(cl->conn, 0, 0); /* a watch stream: derper's is unbounded */
    }
    /* Admission (§5): mesh peers skip every check. */
    return cl->mesh ? srv_client_admitted(cl) : ds->cfg->hooks->admit(cl);
}

int srv_client_admitted(struct srv_client *cl)
{
    struct srv_shard *ds = cl->ds;
    bool waited = cl->phase == SRV_CLIENT_ADMITTING; /* reading paused: resume it */
    prelogin_done(cl);
    unsigned owner = srv_owner(ds, cl->key.bytes);
    if (owner == hd_shard_id(ds->s)) {
        client_activate(ds, cl);
        if (waited && cl->phase == SRV_CLIENT_ACTIVE && net_conn_state(cl->conn) == NET_CONN_OPEN)
            net_conn_pause_recv(cl->conn, false); /* replays kept bytes: cl may be gone */
        return 0;
    }
    srv_client_phase_set(cl, SRV_CLIENT_MOVING);
    if (waited)
        net_conn_pause_recv(cl->conn, false); /* kept bytes travel with the move */
    int rc = net_conn_migrate(cl->conn, owner, client_adopt, cl);
    if (rc == 0)
        ds->cfg->hooks->move_sent(cl);
    return rc;
}

/* ---------------------------------------------------------------- steady state (§6.1) */

static void on_send_packet(struct srv_client *cl, const uint8_t *payload, uint32_t len,
                           bool forward)
{
    struct srv_shard *ds = cl->ds;
    const uint8_t *src = forward ? payload : cl->key.bytes;
    const uint8_t *dst = forward ? payload + DERP_KEY_LEN : payload;
    const uint8_t *pkt = dst + DERP_KEY_LEN;
    uint32_t pkt_len = len - (uint32_t)(pkt - payload);
    enum srv_kind kind = derp_disco_is_packet(pkt, pkt_len) ? SRV_KIND_DISCO : SRV_KIND_OTHER;
    if (forward) {
        ds->ctr.packets_forwarded_in++;
    } else {
        ds->ctr.packets_received++;
        ds->ctr.bytes_received += pkt_len;
        ds->ctr.packets_received_kind[kind]++;
        srv_tally_rx(cl, pkt_len);
        if (cl->quota && !ds->cfg->hooks->quota_take(cl, pkt_len))
            return; /* over the key's daily or monthly budget: dropped, counted */
    }
    /* The one copy of the packet: into a pool frame laid out as it will leave (RecvPacket). */
    uint32_t out_len = DERP_FRAME_HEADER_LEN + DERP_KEY_LEN + pkt_len;
    struct hd_frame *f = srv_frame_get_data(cl, SRV_ROUTE_OFF + out_len);
    if (f == NULL) { /* the pool's reserve or this sender's share reached (server_frames.c) */
        srv_packet_drop_count(ds, SRV_DROP_QUEUE_TAIL, kind, pkt_len);
        hd_log_rl(HD_LOG_WARN, "frame pool at a sender's share or the reserve: packet dropped");
        return;
    }
    memcpy(f->data, dst, DERP_KEY_LEN);
    memcpy(f->data + SRV_ROUTE_REPLY_OFF, cl->key.bytes, DERP_KEY_LEN);
    derp_frame_recv_packet_prefix_encode(f->data + SRV_ROUTE_OFF,
                                         DERP_FRAME_HEADER_LEN + DERP_KEY_LEN, src, pkt_len);
    memcpy(f->data + SRV_ROUTE_OFF + DERP_FRAME_HEADER_LEN + DERP_KEY_LEN, pkt, pkt_len);
    f->len = SRV_ROUTE_OFF + out_len;
    f->app_flags = (uint8_t)((kind == SRV_KIND_DISCO ? SRV_ROUTE_DISCO : 0) |
                             (forward ? SRV_ROUTE_FORWARDED : 0));
    /* A sender mostly sends to one peer: its last destination's hash is kept with it, so the
     * owner shard and the table slot cost no hash; the hash goes on with the packet. */
    struct srv_routed r = srv_route(ds, f, srv_hash_memo_get(&cl->dst_hash, dst));
    if (forward)
        return;
    if (srv_wait_note(cl, dst, r.behind) || !ds->cfg->placement)
        return; /* waiting: no move now (a backed-up receiver is no reason to go) */
    /* Placement follows a packet that crossed the bus; on the owner, one its connection's guest
     * shard took only with packing (without, a sender on the owner that follows broke the
     * duplicate test). */
    srv_place_count(cl, dst, cl->dst_hash.h, r.to); /* decided at the tick's end */
}

static void on_note_preferred(struct srv_client *cl, const uint8_t *payload)
{
    bool pref = payload[0] != 0;
    if (pref == cl->preferred)
        return;
    struct srv_shard *ds = cl->ds;
    cl->preferred = pref;
    ds->ctr.current_home_connections += pref ? 1 : -1;
    if (hd_now_ms(ds->s) - cl->connected_ms > 5000) {
        if (pref)
            ds->ctr.home_moves_in++;
        else
            ds->ctr.home_moves_out++;
    }
}

static int on_frame(struct srv_client *cl, uint8_t type, const uint8_t *payload, uint32_t len)
{
    struct srv_shard *ds = cl->ds;
    if (cl->phase == SRV_CLIENT_HANDSHAKE)
        return on_client_info(cl, payload, len); /* the splitter allows nothing else first */
    srv_note_activity(ds, cl);
    switch (type) {
    case DERP_FRAME_SEND_PACKET:
        on_send_packet(cl, payload, len, false);
        return 0;
    case DERP_FRAME_FORWARD_PACKET:
        on_send_packet(cl, payload, len, true);
        return 0;
    case DERP_FRAME_NOTE_PREFERRED:
        on_note_preferred(cl, payload);
        return 0;
    case DERP_FRAME_WATCH_CONNS:
        if (!derp_pubkey_equal(&cl->key, &ds->cfg->key.pub))
            srv_watch_start(ds, cl);
        return 0;
    case DERP_FRAME_CLOSE_PEER:
        srv_close_peer(ds, payload);
        return 0;
    case DERP_FRAME_PING:
        ds->ctr.got_ping++;
        if (!cl->pong_pending) { /* one Pong pending at most: further Pings are dropped */
            cl->pong_pending = true;
            memcpy(cl->pong, payload, DERP_PING_LEN);
            hd_flush_request(ds->s, &cl->writer);
        }
        return 0;
    default:
        return 0;
    }
}

/* A big ClientInfo (over SRV_LOGIN_INLINE_MAX): take what is there into cl->login_buf; once the
 * frame is whole, split and dispatch it from there. Returns the bytes of data used, or -errno. */
static ssize_t login_gather(struct srv_client *cl, const uint8_t *data, size_t len)
{
    uint32_t take = cl->login_len - cl->login_have;
    if (take > len)
        take = (uint32_t)len;
    memcpy(cl->login_buf + cl->login_have, data, take);
    cl->login_have += take;
    if (cl->login_have < cl->login_len)
        return take;
    struct derp_split sp;
    int rc = derp_splitter_next(&cl->sp, cl->login_buf, cl->login_len, &sp);
    HD_ASSERT(rc < 0 || (sp.kind == DERP_SPLIT_FRAME && sp.consumed == cl->login_len));
    if (rc == 0)
        rc = on_frame(cl, sp.type, cl->login_buf + sp.payload_offset, sp.len);
    free(cl->login_buf);
    cl->login_buf = NULL;
    if (rc < 0) {
        cl->ds->ctr.handshake_errors++;
        return rc;
    }
    return take;
}

/* The first frame's header says it is a ClientInfo too big for net's tail: start gathering. */
static bool login_gather_start(struct srv_client *cl, const struct derp_split *sp)
{
    size_t whole = DERP_FRAME_HEADER_LEN + (size_t)sp->len;
    if (cl->phase != SRV_CLIENT_HANDSHAKE || sp->kind != DERP_SPLIT_NEED || !sp->header_known ||
        whole <= SRV_LOGIN_INLINE_MAX)
        return false;
    cl->login_buf = malloc(whole); /* bounded by the splitter: DERP_CLIENT_INFO_LEN_MAX */
    if (cl->login_buf == NULL)
        return false; /* then net's tail limit closes it, as before */
    cl->login_len = (uint32_t)whole;
    cl->login_have = 0;
    return true;
}

static ssize_t client_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct srv_client *cl = net_conn_app(c);
    size_t done = 0;
    if (cl->login_buf) {
        ssize_t n = login_gather(cl, data, len);
        if (n < 0 || cl->login_buf || net_conn_state(c) != NET_CONN_OPEN)
            return n;
        done = (size_t)n;
    }
    const bool rate_on = cl->ds->cfg->rate_var != NULL; /* -rate-config given (§6.9) */
    while (cl->phase != SRV_CLIENT_MOVING && cl->phase != SRV_CLIENT_ADMITTING) {
        struct derp_split sp;
        bool skipping = derp_splitter_skipping(&cl->sp);
        int rc = derp_splitter_next(&cl->sp, data + done, len - done, &sp);
        if (rc < 0) {
            if (rc == -EPERM)
                cl->ds->ctr.mesh_refused++;
            hd_log_rl(HD_LOG_INFO, "client: bad frame (type 0x%02x): %s", sp.type, strerror(-rc));
            return rc;
        }
        /* §6.1, §6.9: the rate limit applies as soon as a frame's header is known, before its
         * payload, so net keeps at most the header and one read's bytes while paused. (Waiting
         * until the whole frame is buffered would leave net a 64 KiB frame plus the rest of the
         * read, over DERP_CONN_TAIL_MAX: the connection would close; test_conformance_rate*.) */
        if (rate_on && sp.header_known && !skipping && cl->phase == SRV_CLIENT_ACTIVE &&
            !cl->ds->cfg->hooks->rate_take(cl, sp.len))
            break; /* reading paused: this frame is offered again when its tokens are there */
        if (sp.kind == DERP_SPLIT_NEED) {
            if (login_gather_start(cl, &sp)) {
                ssize_t n = login_gather(cl, data + done, len - done);
                if (n < 0)
                    return n;
                done += (size_t)n;
                if (cl->login_buf || net_conn_state(c) != NET_CONN_OPEN)
                    break;
                continue;
            }
            break;
        }
        if (sp.kind == DERP_SPLIT_FRAME) {
            rc = on_frame(cl, sp.type, data + done + sp.payload_offset, sp.len);
            if (rc < 0) {
                if (cl->phase == SRV_CLIENT_HANDSHAKE)
                    cl->ds->ctr.handshake_errors++;
                return rc;
            }
        }
        if (rate_on)
            cl->ds->cfg->hooks->rate_frame_done(cl);
        done += sp.consumed;
        if (net_conn_state(c) != NET_CONN_OPEN || cl->wait_for)
            break; /* closed, or waiting for a backed-up receiver (server_wait.c) */
    }
    return (ssize_t)done;
}

static void client_closed(struct net_conn *c, int reason)
{
    struct srv_client *cl = net_conn_app(c);
    struct srv_shard *ds = cl->ds;
    /* derper counts its write deadline, not the kernel's ETIMEDOUT (TCP_USER_TIMEOUT, keepalive:
     * a peer that vanished while idle); the login deadline is ours. */
    enum net_conn_timer by = reason == -ETIMEDOUT ? net_conn_closed_by(c) : NET_CONN_TIMER_NONE;
    if (by == NET_CONN_TIMER_WRITE && cl->phase == SRV_CLIENT_ACTIVE)
        ds->ctr.sclient_write_timeouts++;
    if (by == NET_CONN_TIMER_DEADLINE && cl->phase == SRV_CLIENT_HANDSHAKE)
        ds->ctr.deadline_closes++;
    prelogin_done(cl);
    ds->cfg->hooks->move_done(ds, cl, NULL); /* closed on its way to another shard */
    ds->cfg->hooks->closing(cl);
    if (cl->phase == SRV_CLIENT_ACTIVE) {
        srv_client_phase_set(cl, SRV_CLIENT_CLOSED); /* no more enqueues */
        srv_client_unsettle(ds, cl);
        if (cl->guest)
            srv_place_closed(cl);
        else
            srv_unregister(ds, cl);
    } else if (cl->placing || cl->going_home) { /* closed on the way to another shard */
        srv_place_closed(cl);
    }
    /* packets still waiting in its send classes: counted by class_dropped just before */
    ds->cfg->hooks->closed(cl); /* a pending admission or re-check request */
    srv_sources_drop(cl);
    free(cl->login_buf);
    free(cl);
}

void srv_client_close(struct srv_client *cl, int reason)
{
    net_conn_close(cl->conn, reason, false);
}

const struct net_conn_handler srv_client_handler = {
    .on_data = client_data,
    .on_close = client_closed,
    .send_classes = &client_classes,
};
