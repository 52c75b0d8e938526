/* server_live.c - an upgrade's hand-over of logged-in clients, on the shards (server_live.h):
 * the old process freezes and exports them (one record each: the DERP session, then net's
 * blob), the successor imports them on their keys' owner shards, quietly (no PeerPresent to
 * the watchers that came along, no ServerInfo again), and resumes reading once the first batch
 * is in. Control path: it allocates.
 *
 * Freeze (srv_live_freeze): every active client's reading pauses, and from then on the shard
 * sends no presence event (no PeerGone or PeerPresent to watchers or former correspondents: the
 * clients that would hear them move too and already know) and no NotHere. Export, per client on
 * its shard: the Pong and the queued packets go into the connection's send queue (past the
 * watermark: they travel in it); its session is written (key, mesh/prober/ack-pings/not-ideal/
 * preferred/watcher flags, address, age, keep-alive period, rate-limit tokens, the splitter's
 * state, the 64-bit prefixes of the keys it heard from); it leaves the tables quietly
 * (unsettled, unregistered or, as a guest, its owner told); net_conn_export (with
 * tls_conn_state_save in TLS mode) takes its fd, unread bytes and both send queues at the
 * connection's quiet point, and the record ({magic, version, session length}, the session,
 * net's blob) reaches the upgrade thread through a locked queue.
 * Import (srv_live_import, on the key's owner shard): the record is checked whole, the client
 * rebuilt (net_conn_import with tls_conn_state_load: the same record sequence numbers; kTLS keys
 * stay on the socket and are checked), settled (timers, frame account, rate bucket refilled to
 * at most its old tokens, re-check timer), its sources restored into the shard's PeerGone index,
 * and registered marked imported: its PeerPresent goes only to watchers that did not come over
 * (those know the key), and an imported watcher is counted on every shard without a snapshot.
 * Reading stays paused until srv_live_resume offers each client's carried bytes and reads on.
 * Not carried: per-key accounting and quota usage (the successor starts them afresh), the
 * placement of guests (each client lands on its owner shard), which duplicate of a key was
 * active. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "upgrade/server_live.h"
#include <hd/hd_bytes.h>

/* The session's flag bits. */
enum {
    LF_MESH = 1,
    LF_PROBER = 2,
    LF_ACK_PINGS = 4,
    LF_NOT_IDEAL = 8,
    LF_PREFERRED = 16,
    LF_WATCHER = 32,
    LF_RATE_PAID = 64,
    LF_SKIP_DROPPED = 128,
};
#define LF_ALL 255u
/* A record's header (magic, version, session length); a gone key's record is the header with
 * version SRV_LIVE_VERSION | LIVE_GONE and the key. */
#define LIVE_HEADER 12u
#define LIVE_GONE   0x10000u
/* The session's fixed part: key, flags, address (16 + port), age, keep-alive, rate tokens,
 * splitter (mode, skip type, skip length, left), sources count. */
#define LIVE_SESSION_FIXED (DERP_KEY_LEN + 4 + 16 + 4 + 8 + 4 + 8 + 4 * 4 + 4)

/* An export on its way: the session bytes wait for net's blob. */
struct srv_live_out {
    struct srv_client *cl;
    uint8_t *session;
    size_t len;
};

static struct srv_live *live_of(struct srv_shard *ds)
{
    if (ds->live == NULL)
        ds->live = calloc(1, sizeof(*ds->live));
    return ds->live;
}

void srv_live_fini(struct srv_shard *ds)
{
    free(ds->live);
    ds->live = NULL;
}

const uint8_t *srv_live_record_key(const uint8_t *rec, size_t len)
{
    return len >= LIVE_HEADER + DERP_KEY_LEN ? rec + LIVE_HEADER : NULL;
}

/* Every active client of this shard (its own keys and its guests), not already leaving, into
 * *out (malloc'd; NULL: only counted). */
static uint32_t clients_here(struct srv_shard *ds, struct srv_client ***out)
{
    struct srv_peer_table *tables[] = {&ds->peers, &ds->guests};
    uint32_t n = 0, cap = 0;
    struct srv_client **v = NULL;
    for (unsigned t = 0; t < 2; t++)
        for (uint32_t i = 0; i < tables[t]->cap; i++)
            for (struct srv_client *cl = tables[t]->slots[i] ? tables[t]->slots[i]->clients : NULL;
                 cl; cl = cl->peer_next) {
                if (cl->phase != SRV_CLIENT_ACTIVE || cl->exporting)
                    continue;
                if (out == NULL) {
                    n++;
                    continue;
                }
                if (n == cap) {
                    cap = cap ? cap * 2 : 64;
                    struct srv_client **nv = realloc(v, cap * sizeof(*v));
                    if (nv == NULL)
                        goto out;
                    v = nv;
                }
                v[n++] = cl;
            }
out:
    if (out)
        *out = v;
    return n;
}

int srv_live_freeze(struct srv_shard *ds, srv_live_sink_fn *sink, void *arg)
{
    struct srv_live *l = live_of(ds);
    if (l == NULL)
        return -ENOMEM;
    ds->handing_over = true;
    l->sink = sink;
    l->sink_arg = arg;
    struct srv_client **v;
    uint32_t n = clients_here(ds, &v);
    for (uint32_t i = 0; i < n; i++)
        net_conn_pause_recv(v[i]->conn, true);
    free(v);
    return 0;
}

/* ---------------------------------------------------------------- the old process */

static uint8_t *header_put(struct hd_wbuf *w, uint32_t version, uint32_t session_len)
{
    hd_put32(w, SRV_LIVE_MAGIC);
    hd_put32(w, version);
    hd_put32(w, session_len);
    return w->p;
}

void srv_live_gone(struct srv_shard *ds, const struct derp_pubkey *key)
{
    struct srv_live *l = ds->live;
    uint8_t *rec = malloc(LIVE_HEADER + DERP_KEY_LEN);
    if (l == NULL || l->sink == NULL || rec == NULL) {
        free(rec);
        return;
    }
    struct hd_wbuf w = {.p = rec, .cap = LIVE_HEADER + DERP_KEY_LEN};
    header_put(&w, SRV_LIVE_VERSION | LIVE_GONE, DERP_KEY_LEN);
    hd_put(&w, key->bytes, DERP_KEY_LEN);
    l->sink(l->sink_arg, -1, rec, w.len);
}

/* The session bytes of cl, before it leaves the tables (the watcher flag goes with them). */
static uint8_t *session_write(struct srv_client *cl, size_t *len)
{
    uint32_t count = cl->sources.count;
    size_t cap = LIVE_SESSION_FIXED + (size_t)count * 8;
    uint8_t *buf = malloc(cap);
    uint64_t *prefixes = count ? malloc((size_t)count * 8) : NULL;
    if (buf == NULL || (count && prefixes == NULL)) {
        free(buf);
        free(prefixes);
        return NULL;
    }
    count = count ? srv_sources_list(cl, prefixes, count) : 0;
    uint32_t flags = (cl->mesh ? LF_MESH : 0) | (cl->prober ? LF_PROBER : 0) |
                     (cl->can_ack_pings ? LF_ACK_PINGS : 0) | (cl->not_ideal ? LF_NOT_IDEAL : 0) |
                     (cl->preferred ? LF_PREFERRED : 0) | (cl->watcher ? LF_WATCHER : 0) |
                     (cl->rate_paid ? LF_RATE_PAID : 0) |
                     (cl->sp.skip_dropped ? LF_SKIP_DROPPED : 0);
    struct hd_wbuf w = {.p = buf, .cap = cap};
    hd_put(&w, cl->key.bytes, DERP_KEY_LEN);
    hd_put32(&w, flags);
    hd_put(&w, cl->remote.ip, 16);
    hd_put32(&w, cl->remote.port);
    hd_put64(&w, hd_now_ms(cl->ds->s) - cl->connected_ms);
    hd_put32(&w, cl->keepalive_ms);
    uint64_t tokens;
    memcpy(&tokens, &cl->rate.tokens, sizeof(tokens));
    hd_put64(&w, tokens);
    uint32_t sp[4] = {(uint32_t)cl->sp.mode, cl->sp.skip_type, cl->sp.skip_len, cl->sp.skip_left};
    hd_put(&w, sp, sizeof(sp));
    hd_put32(&w, count);
    hd_put(&w, prefixes, (size_t)count * 8);
    free(prefixes);
    *len = w.len;
    return buf;
}

static void export_done(int fd, const uint8_t *blob, size_t len, void *arg)
{
    struct srv_live_out *out = arg;
    struct srv_client *cl = out->cl;
    struct srv_live *l = cl->ds->live;
    size_t total = LIVE_HEADER + out->len + len;
    uint8_t *rec = total <= SRV_LIVE_RECORD_MAX ? malloc(total) : NULL;
    l->pending--;
    if (rec == NULL) { /* too big a backlog, or no memory: closed, it reconnects */
        hd_log_rl(HD_LOG_WARN, "upgrade: a client's state (%zu bytes) cannot move: closed", total);
        close(fd);
        l->closed++;
        srv_live_gone(cl->ds, &cl->key);
    } else {
        struct hd_wbuf w = {.p = rec, .cap = total};
        header_put(&w, SRV_LIVE_VERSION, (uint32_t)out->len);
        hd_put(&w, out->session, out->len);
        hd_put(&w, blob, len);
        l->exported++;
        l->sink(l->sink_arg, fd, rec, total);
    }
    free(out->session);
    free(out);
    free(cl); /* out of every table already; net let go of its connection */
}

void srv_live_export_closed(struct srv_client *cl)
{
    struct srv_live *l = cl->ds->live;
    l->pending--;
    l->closed++;
    srv_live_gone(cl->ds, &cl->key);
    free(cl->exporting->session);
    free(cl->exporting);
    cl->exporting = NULL;
}

static void export_one(struct srv_shard *ds, struct srv_client *cl)
{
    srv_client_drain(cl); /* its Pong and queued packets go with the connection */
    if (cl->phase != SRV_CLIENT_ACTIVE || net_conn_state(cl->conn) != NET_CONN_OPEN)
        return;
    struct srv_live_out *out = calloc(1, sizeof(*out));
    if (out)
        out->session = session_write(cl, &out->len);
    if (out == NULL || out->session == NULL) {
        free(out);
        srv_client_close(cl, -ENOMEM); /* counted as gone by its close */
        return;
    }
    out->cl = cl;
    srv_admit_cancel(cl);
    srv_client_phase_set(cl, SRV_CLIENT_MOVING); /* no more enqueues: they count as dropped */
    srv_client_unsettle(ds, cl);
    if (cl->guest)
        srv_place_closed(cl);
    else
        srv_unregister(ds, cl); /* quiet: the shard is frozen */
    srv_sources_drop(cl);       /* the prefixes are in the session */
    cl->exporting = out;
    ds->live->pending++;
    int rc = net_conn_export(cl->conn, ds->cfg->tls ? tls_conn_state_save : NULL, export_done, out);
    if (rc < 0) { /* a WebSocket (a codec over TLS), or moving already: it reconnects */
        hd_log_rl(HD_LOG_INFO, "upgrade: a client cannot move (%s): closed", strerror(-rc));
        srv_client_close(cl, rc);
    }
}

void srv_live_export(struct srv_shard *ds)
{
    if (ds->live == NULL || ds->live->sink == NULL)
        return; /* not frozen (no memory then): its clients are closed at the stop */
    struct srv_client **v;
    uint32_t n = clients_here(ds, &v);
    for (uint32_t i = 0; i < n; i++)
        if (v[i]->phase == SRV_CLIENT_ACTIVE && !v[i]->exporting)
            export_one(ds, v[i]);
    free(v);
}

void srv_live_move_sent(struct srv_client *cl)
{
    cl->in_move = true;
    cl->ds->ctr.moves_sent++;
}

void srv_live_move_done(struct srv_shard *ds, struct srv_client *cl, struct net_conn *c)
{
    if (!cl->in_move)
        return;
    cl->in_move = false;
    ds->ctr.moves_done++;
    if (c && srv_live_frozen(ds) && net_conn_state(c) == NET_CONN_OPEN)
        net_conn_pause_recv(c, true); /* arrived after the freeze: it reads no more here */
}

void srv_live_tally(struct srv_shard *ds, struct srv_live_tally *t)
{
    t->active += clients_here(ds, NULL);
    t->moves_sent += ds->ctr.moves_sent;
    t->moves_done += ds->ctr.moves_done;
    for (unsigned why = 0; why < SRV_DROPS; why++)
        for (unsigned k = 0; k < SRV_KINDS; k++)
            t->dropped_all += ds->ctr.packets_dropped[why][k];
    for (unsigned k = 0; k < SRV_KINDS; k++)
        t->dropped_unknown += ds->ctr.packets_dropped[SRV_DROP_UNKNOWN_DEST][k] +
                              ds->ctr.packets_dropped[SRV_DROP_UNKNOWN_DEST_ON_FWD][k];
    t->dropped += ds->handover_dropped;
    if (ds->live == NULL)
        return;
    t->pending += ds->live->pending;
    t->exported += ds->live->exported;
    t->closed += ds->live->closed;
    t->imported += ds->live->imported;
    t->import_failed += ds->live->import_failed;
}

/* ---------------------------------------------------------------- the successor */

int srv_live_session_parse(const uint8_t *rec, size_t len, struct srv_live_session *ss)
{
    struct hd_rbuf r = {.p = rec, .len = len};
    uint32_t magic = hd_take32(&r), version = hd_take32(&r), session_len = hd_take32(&r);
    size_t start = r.off;
    if (magic != SRV_LIVE_MAGIC || version != SRV_LIVE_VERSION)
        return -EPROTO;
    ss->key = hd_take(&r, DERP_KEY_LEN);
    ss->flags = hd_take32(&r);
    ss->ip = hd_take(&r, 16);
    ss->port = hd_take32(&r);
    ss->age_ms = hd_take64(&r);
    ss->keepalive_ms = hd_take32(&r);
    ss->tokens = hd_take64(&r);
    for (unsigned i = 0; i < 4; i++)
        ss->sp[i] = hd_take32(&r);
    ss->count = hd_take32(&r);
    ss->prefixes = ss->count <= SRV_SOURCES_MAX ? hd_take(&r, (size_t)ss->count * 8) : NULL;
    if (r.bad || ss->prefixes == NULL || r.off - start != session_len || (ss->flags & ~LF_ALL) ||
        ss->port > UINT16_MAX || ss->sp[0] != DERP_READER_SERVER || ss->sp[1] > UINT8_MAX ||
        ss->sp[3] > ss->sp[2])
        return -EPROTO;
    ss->blob = rec + r.off;
    ss->blob_len = len - r.off;
    return 0;
}

/* The DERP half of the client, as it was in the old process. */
static void client_fill(struct srv_shard *ds, struct srv_client *cl,
                        const struct srv_live_session *ss)
{
    cl->ds = ds;
    cl->instance = ds->instance;
    memcpy(cl->key.bytes, ss->key, DERP_KEY_LEN);
    cl->mesh = ss->flags & LF_MESH;
    cl->prober = ss->flags & LF_PROBER;
    cl->can_ack_pings = ss->flags & LF_ACK_PINGS;
    cl->not_ideal = ss->flags & LF_NOT_IDEAL;
    cl->preferred = ss->flags & LF_PREFERRED;
    memcpy(cl->remote.ip, ss->ip, 16);
    cl->remote.port = (uint16_t)ss->port;
    derp_splitter_init(&cl->sp, DERP_READER_SERVER);
    derp_splitter_set_mesh(&cl->sp, cl->mesh);
    cl->sp.skip_type = (uint8_t)ss->sp[1];
    cl->sp.skip_len = ss->sp[2];
    cl->sp.skip_left = ss->sp[3];
    cl->sp.skip_dropped = ss->flags & LF_SKIP_DROPPED;
    cl->keepalive_ms = ss->keepalive_ms;
    uint64_t now = hd_now_ms(ds->s);
    cl->connected_ms = ss->age_ms < now ? now - ss->age_ms : 0;
    cl->imported = true;
}

int srv_live_import(struct srv_shard *ds, int fd, const uint8_t *rec, size_t len)
{
    struct srv_live *l = live_of(ds);
    struct srv_live_session ss;
    int rc = l ? srv_live_session_parse(rec, len, &ss) : -ENOMEM;
    struct srv_client *cl = rc == 0 ? calloc(1, sizeof(*cl)) : NULL;
    if (rc == 0 && cl == NULL)
        rc = -ENOMEM;
    struct net_conn *c = NULL;
    if (rc == 0) {
        client_fill(ds, cl, &ss);
        rc = net_conn_import(ds->s, fd, ss.blob, ss.blob_len, &srv_client_handler, cl,
                             ds->cfg->tls ? tls_conn_state_load : NULL, &c);
    }
    if (rc < 0) {
        hd_log_rl(HD_LOG_WARN, "upgrade: a client from the old process cannot be taken: %s",
                  strerror(-rc));
        close(fd);
        free(cl);
        if (l)
            l->import_failed++;
        return rc;
    }
    cl->conn = c;
    srv_client_phase_set(cl, SRV_CLIENT_ACTIVE);
    hd_tbucket_fill(&cl->not_here, DERP_NOT_HERE_BURST, hd_now_ms(ds->s));
    srv_client_settle(ds, cl); /* a full rate bucket: no more than the old one had */
    double tokens;
    memcpy(&tokens, &ss.tokens, sizeof(tokens));
    if (tokens >= 0 && tokens < cl->rate.tokens)
        cl->rate.tokens = tokens;
    cl->rate_paid = ss.flags & LF_RATE_PAID;
    uint64_t *prefixes = ss.count ? malloc((size_t)ss.count * 8) : NULL;
    if (prefixes) { /* the record's bytes need not be aligned */
        memcpy(prefixes, ss.prefixes, (size_t)ss.count * 8);
        srv_sources_restore(cl, prefixes, ss.count);
        free(prefixes);
    }
    l->imported++;
    srv_register(ds, cl); /* no PeerPresent for the watchers that came along */
    if (cl->phase == SRV_CLIENT_ACTIVE && (ss.flags & LF_WATCHER))
        srv_watch_start(ds, cl); /* counted on every shard, no snapshot: it has the keys */
    if (l->resumed && cl->phase == SRV_CLIENT_ACTIVE)
        net_conn_pause_recv(c, false);
    else
        cl->live_paused = true;
    return 0;
}

/* The next client of this shard waiting to read, or NULL. From slot *at on: a resume may close
 * clients and move table entries, so the walk starts again after each one. */
static struct srv_client *next_paused(struct srv_shard *ds, uint32_t *at)
{
    for (; *at < ds->peers.cap; (*at)++)
        for (struct srv_client *cl = ds->peers.slots[*at] ? ds->peers.slots[*at]->clients : NULL;
             cl; cl = cl->peer_next)
            if (cl->live_paused)
                return cl;
    return NULL;
}

void srv_live_resume(struct srv_shard *ds)
{
    struct srv_live *l = live_of(ds);
    if (l == NULL || l->resumed)
        return;
    l->resumed = true;
    for (bool again = true; again;) {
        again = false;
        uint32_t at = 0;
        struct srv_client *cl;
        while ((cl = next_paused(ds, &at)) != NULL) {
            cl->live_paused = false;
            again = true; /* entries may have moved behind us: one more pass */
            if (cl->phase == SRV_CLIENT_ACTIVE)
                net_conn_pause_recv(cl->conn, false); /* replays the carried bytes */
        }
    }
}
