/* server_upgrade_live.c - the upgrade's second half: the logged-in clients (server_live.c makes
 * and takes their records on the shards). Old process, on its upgrade thread once the
 * successor accepts: freeze every shard, export every client, send each record (one UP_CLIENT
 * with the fd, then UP_DATA pieces) and BATCH; once more for clients that logged in or arrived
 * meanwhile; then DONE, and the successor's TOOK is awaited for a bounded time. The
 * successor, on its watch thread: put each record together and post it to the key's owner
 * shard, resume reading at BATCH, announce the keys that went (UP_GONE) at DONE, answer TOOK.
 * docs/ARCHITECTURE.md ("Upgrades").
 *
 * Order: the freeze is posted to every shard and waited for (srv_live_freeze) before any export
 * is posted (srv_live_export), so no shard reads a packet for a client another shard has already
 * let go. A round exports again and again until no client is active, none is on its way out and
 * none is between shards (login and placement moves are counted on both ends, moves_sent /
 * moves_done; a client that arrives on a frozen shard stops reading there), so the successor
 * never gets BATCH before a client that was moving at the freeze. After DONE it waits at most
 * SRV_LIVE_TOOK_MS for TOOK and logs "upgrade: handed over N clients to PID P (C closed: could
 * not move; D packets dropped on the way)": D counts packets the frozen process had read and
 * could not deliver (on the bus between its shards, or forwarded by a mesh peer, at the
 * instant); bytes in the kernel's socket buffers are not lost, the fd moves. A client that
 * cannot move (a WebSocket: a codec stacked over TLS; a record over 8 MiB; a closed connection)
 * is closed, and its key travels as GONE.
 * The successor posts each record to the key's owner shard under its own keyed hash (owners
 * differ between processes). At BATCH it resumes reading only once every shard has answered a
 * post: a shard runs its posts in order, so by then each has run the imports posted to it (it
 * drains its bus before its posts, so without this wait a packet from a resumed client could
 * reach a shard before its receiver's import); later imports read at once. At DONE the GONE keys
 * get their PeerGone (watchers and former correspondents) unless a connection of the key is
 * present, and it logs "upgrade: took over N clients from PID Q (F failed)" and answers TOOK. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "upgrade/server_upgrade_impl.h"

/* How long the old process waits for its shards' exports to finish (each is one quiet point
 * of a connection: an op in flight returns within a tick or two), and for TOOK. */
#define SRV_LIVE_EXPORT_MS 10000u
#define SRV_LIVE_TOOK_MS   10000u
#define SRV_LIVE_POLL_MS   20u
/* A UP_DATA message's bytes after its header. */
#define SRV_LIVE_PIECE (NET_HANDOVER_MSG_MAX - sizeof(struct up_msg))

struct up_live_item {
    struct up_live_item *next;
    int fd;
    uint8_t *rec;
    size_t len;
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void item_free(struct up_live_item *it)
{
    if (it->fd >= 0)
        close(it->fd);
    free(it->rec);
    free(it);
}

/* ---------------------------------------------------------------- the old process */

/* A shard's record (its thread): queued for the upgrade thread. */
static void live_sink(void *arg, int fd, uint8_t *rec, size_t len)
{
    struct srv_upgrade *u = arg;
    struct up_live_item *it = malloc(sizeof(*it));
    if (it == NULL) {
        if (fd >= 0)
            close(fd); /* the client is closed: it reconnects */
        free(rec);
        return;
    }
    *it = (struct up_live_item){.fd = fd, .rec = rec, .len = len};
    pthread_mutex_lock(&u->lock);
    *u->live_tail = it;
    u->live_tail = &it->next;
    pthread_cond_signal(&u->live_cv);
    pthread_mutex_unlock(&u->lock);
}

static void freeze_here(struct hd_shard *s, void *arg)
{
    struct srv_upgrade *u = arg;
    struct srv_shard *ds = srv_shard_at(s, u->instance);
    if (ds && srv_live_freeze(ds, live_sink, u) < 0)
        hd_log(HD_LOG_ERROR,
               "upgrade: shard %u cannot hand its clients over (no memory): they "
               "are closed and reconnect",
               hd_shard_id(s));
    count_here(s, arg);
}

static void export_here(struct hd_shard *s, void *arg)
{
    struct srv_upgrade *u = arg;
    struct srv_shard *ds = srv_shard_at(s, u->instance);
    if (ds)
        srv_live_export(ds);
    count_here(s, arg);
}

static void tally_here(struct hd_shard *s, void *arg)
{
    struct srv_upgrade *u = arg;
    struct srv_shard *ds = srv_shard_at(s, u->instance);
    struct srv_live_tally t = {0};
    if (ds)
        srv_live_tally(ds, &t);
    pthread_mutex_lock(&u->lock);
    u->tally.active += t.active;
    u->tally.pending += t.pending;
    u->tally.exported += t.exported;
    u->tally.closed += t.closed;
    u->tally.dropped += t.dropped;
    u->tally.imported += t.imported;
    u->tally.import_failed += t.import_failed;
    u->tally.moves_sent += t.moves_sent;
    u->tally.moves_done += t.moves_done;
    u->tally.dropped_all += t.dropped_all;
    u->tally.dropped_unknown += t.dropped_unknown;
    pthread_mutex_unlock(&u->lock);
    count_here(s, arg);
}

static struct srv_live_tally tally(struct srv_upgrade *u)
{
    pthread_mutex_lock(&u->lock);
    u->tally = (struct srv_live_tally){0};
    pthread_mutex_unlock(&u->lock);
    ask_shards(u, tally_here);
    pthread_mutex_lock(&u->lock);
    struct srv_live_tally t = u->tally;
    pthread_mutex_unlock(&u->lock);
    return t;
}

/* One record: its header (with the fd of a client) and its bytes in pieces. */
static int send_record(int sock, const struct up_live_item *it)
{
    static uint8_t piece[NET_HANDOVER_MSG_MAX]; /* the one upgrade thread's */
    struct up_msg m = msg_make(it->fd >= 0 ? UP_CLIENT : UP_GONE, 0, 0, (uint32_t)it->len);
    int rc =
        net_handover_send(sock, &m, sizeof(m), it->fd >= 0 ? &it->fd : NULL, it->fd >= 0 ? 1 : 0);
    for (size_t off = 0, n; rc == 0 && off < it->len; off += n) {
        n = it->len - off < SRV_LIVE_PIECE ? it->len - off : SRV_LIVE_PIECE;
        m = msg_make(UP_DATA, 0, 0, (uint32_t)n);
        memcpy(piece, &m, sizeof(m));
        memcpy(piece + sizeof(m), it->rec + off, n);
        rc = net_handover_send(sock, piece, sizeof(m) + n, NULL, 0);
    }
    return rc;
}

/* Send what the shards queued; true when something was. */
static bool outbox_send(struct srv_upgrade *u, int sock)
{
    pthread_mutex_lock(&u->lock);
    struct up_live_item *it = u->live_head;
    u->live_head = NULL;
    u->live_tail = &u->live_head;
    pthread_mutex_unlock(&u->lock);
    bool any = it != NULL;
    while (it) {
        struct up_live_item *next = it->next;
        int rc = send_record(sock, it);
        if (rc < 0)
            hd_log_rl(HD_LOG_ERROR, "upgrade: a client could not be sent (%s): it is closed",
                      strerror(-rc));
        else if (it->fd >= 0)
            u->live_sent++;
        item_free(it); /* our copy of the fd: the successor has its own now */
        it = next;
    }
    return any;
}

/* Export whatever is active on the shards and send it, again and again, until no client is
 * active, on its way out, or between shards (a placement or login move: it is exported where it
 * arrives), bounded. */
static void export_round(struct srv_upgrade *u, int sock)
{
    for (uint64_t end = mono_ms() + SRV_LIVE_EXPORT_MS;;) {
        ask_shards(u, export_here);
        outbox_send(u, sock);
        struct srv_live_tally t = tally(u);
        pthread_mutex_lock(&u->lock);
        bool empty = u->live_head == NULL;
        pthread_mutex_unlock(&u->lock);
        bool settled = t.pending == 0 && t.active == 0 && t.moves_sent == t.moves_done;
        if ((settled && empty) || mono_ms() >= end)
            break;
        pthread_mutex_lock(&u->lock);
        if (u->live_head == NULL) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += SRV_LIVE_POLL_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L)
                ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&u->live_cv, &u->lock, &ts);
        }
        pthread_mutex_unlock(&u->lock);
    }
}

void srv_upgrade_live_send(struct srv_upgrade *u, int sock)
{
    ask_shards(u, freeze_here);
    export_round(u, sock);
    struct up_msg m = msg_make(UP_BATCH, 0, 0, u->live_sent);
    net_handover_send(sock, &m, sizeof(m), NULL, 0);
}

void srv_upgrade_live_finish(struct srv_upgrade *u, int sock, pid_t pid)
{
    export_round(u, sock);
    struct srv_live_tally t = tally(u);
    struct up_msg m = msg_make(UP_DONE, 0, 0, u->live_sent);
    int rc = net_handover_send(sock, &m, sizeof(m), NULL, 0);
    long took = -1;
    for (uint64_t end = mono_ms() + SRV_LIVE_TOOK_MS; rc == 0;) {
        uint64_t now = mono_ms();
        ssize_t n = now < end ? net_handover_recv(sock, &m, sizeof(m), NULL, NULL, (int)(end - now))
                              : -ETIMEDOUT;
        if (n < 0)
            break;
        if ((size_t)n == sizeof(m) && m.magic == SRV_UPGRADE_MAGIC && m.type == UP_TOOK) {
            took = m.value;
            break;
        }
    }
    hd_log(HD_LOG_INFO,
           "upgrade: handed over %u clients to PID %d (%llu closed: could not move; %llu "
           "packets dropped on the way); it took %ld; this process dropped %llu packets in all "
           "(derp_packets_dropped), %llu for unknown keys",
           u->live_sent, (int)pid, (unsigned long long)t.closed, (unsigned long long)t.dropped,
           took, (unsigned long long)t.dropped_all, (unsigned long long)t.dropped_unknown);
}

/* ---------------------------------------------------------------- the successor */

struct up_import {
    struct srv_upgrade *u;
    int fd;
    uint8_t *rec;
    size_t len;
};

static void import_here(struct hd_shard *s, void *arg)
{
    struct up_import *job = arg;
    struct srv_shard *ds = srv_shard_at(s, job->u->instance);
    if (ds)
        srv_live_import(ds, job->fd, job->rec, job->len); /* takes the fd */
    else
        close(job->fd);
    free(job->rec);
    free(job);
}

static void resume_here(struct hd_shard *s, void *arg)
{
    struct srv_upgrade *u = arg;
    struct srv_shard *ds = srv_shard_at(s, u->instance);
    if (ds)
        srv_live_resume(ds);
}

static void gone_here(struct hd_shard *s, void *arg)
{
    struct up_import *job = arg;
    struct srv_shard *ds = srv_shard_at(s, job->u->instance);
    if (ds)
        srv_peer_gone_if_absent(ds, job->rec);
    free(job->rec);
    free(job);
}

/* fn(job) on the owner shard of key (a full inbox is retried); false when it could not. */
static bool post_to_owner(struct srv_upgrade *u, const uint8_t *key, hd_post_fn *fn, void *job)
{
    unsigned shard =
        srv_key_shard(srv_hash_node_key(key), hd_runtime_shards_count(u->rt)); /* keyed */
    for (unsigned t = 0; t < SRV_UPGRADE_POST_TRIES; t++) {
        int rc = hd_runtime_post(u->rt, shard, fn, job);
        if (rc == 0)
            return true;
        if (rc != -EAGAIN)
            break;
        usleep(SRV_UPGRADE_POST_RETRY_MS * 1000);
    }
    return false;
}

/* Every shard resumes its imported clients, once every shard has imported what was posted to
 * it (ask_shards waits for each: a shard's posts run in order). Else a resumed client on one
 * shard could send to a client whose import is still queued on another: unknown, dropped. */
static void resume_all(struct srv_upgrade *u)
{
    ask_shards(u, count_here);
    ask_shards_async(u, resume_here);
}

/* A whole record: a client to its owner shard, or a gone key kept for DONE. */
static void record_done(struct srv_upgrade *u)
{
    uint8_t *rec = u->rx_buf;
    const uint8_t *key = srv_live_record_key(rec, u->rx_len);
    u->rx_buf = NULL;
    struct up_import *job = key ? malloc(sizeof(*job)) : NULL;
    if (u->rx_type == UP_GONE && key && u->gone_count < u->gone_cap) {
        memcpy(u->gone[u->gone_count++], key, DERP_KEY_LEN);
    } else if (u->rx_type == UP_CLIENT && job) {
        *job = (struct up_import){.u = u, .fd = u->rx_fd, .rec = rec, .len = u->rx_len};
        u->live_sent++;
        if (post_to_owner(u, key, import_here, job)) {
            u->rx_fd = -1;
            return;
        }
        hd_log(HD_LOG_ERROR, "upgrade: a client from the old process could not be placed");
    }
    free(job);
    free(rec);
    if (u->rx_fd >= 0)
        close(u->rx_fd);
    u->rx_fd = -1;
}

/* DONE (or the predecessor gone): reading resumes everywhere, the gone keys are announced, the
 * imports are counted. */
static uint64_t live_end(struct srv_upgrade *u)
{
    resume_all(u);
    for (uint32_t i = 0; i < u->gone_count; i++) {
        struct up_import *job = malloc(sizeof(*job));
        uint8_t *key = job ? malloc(DERP_KEY_LEN) : NULL;
        if (key == NULL) {
            free(job);
            continue;
        }
        memcpy(key, u->gone[i], DERP_KEY_LEN);
        *job = (struct up_import){.u = u, .fd = -1, .rec = key};
        if (!post_to_owner(u, key, gone_here, job))
            free(key), free(job);
    }
    u->gone_count = 0;
    struct srv_live_tally t = tally(u);
    hd_log(HD_LOG_INFO, "upgrade: took over %llu clients from PID %d (%llu failed)",
           (unsigned long long)t.imported, (int)getppid(), (unsigned long long)t.import_failed);
    return t.imported;
}

/* A record's header: the previous one (unfinished) is dropped. */
static void record_start(struct srv_upgrade *u, const struct up_msg *m, int *fds, unsigned n)
{
    free(u->rx_buf);
    u->rx_buf = NULL;
    if (u->rx_fd >= 0)
        close(u->rx_fd);
    u->rx_fd = -1;
    bool ok =
        n == (m->type == UP_CLIENT ? 1u : 0u) && m->value > 0 && m->value <= SRV_LIVE_RECORD_MAX;
    if (ok && m->type == UP_GONE && u->gone == NULL) {
        u->gone_cap = SRV_LIVE_GONE_MAX;
        u->gone = malloc(u->gone_cap * sizeof(*u->gone));
    }
    u->rx_buf = ok ? malloc(m->value) : NULL;
    if (u->rx_buf == NULL) {
        for (unsigned i = 0; i < n; i++)
            close(fds[i]);
        return;
    }
    u->rx_type = m->type;
    u->rx_len = m->value;
    u->rx_have = 0;
    u->rx_fd = n ? fds[0] : -1;
}

bool srv_upgrade_live_recv(struct srv_upgrade *u, const uint8_t *buf, size_t len, int *fds,
                           unsigned fds_count)
{
    if (buf == NULL) { /* the predecessor is gone */
        if (u->live_sent > 0 || u->gone_count > 0)
            live_end(u);
        return true;
    }
    struct up_msg m;
    memcpy(&m, buf, sizeof(m));
    if (m.magic != SRV_UPGRADE_MAGIC || m.version != SRV_UPGRADE_VERSION)
        return false;
    switch (m.type) {
    case UP_CLIENT:
    case UP_GONE:
        record_start(u, &m, fds, fds_count);
        return true;
    case UP_DATA:
        if (u->rx_buf == NULL || fds_count || m.value != len - sizeof(m) ||
            m.value > u->rx_len - u->rx_have) {
            for (unsigned i = 0; i < fds_count; i++)
                close(fds[i]);
            return true; /* a piece of a record we dropped (or a bad one): ignored */
        }
        memcpy(u->rx_buf + u->rx_have, buf + sizeof(m), m.value);
        u->rx_have += m.value;
        if (u->rx_have == u->rx_len)
            record_done(u);
        return true;
    case UP_BATCH:
        resume_all(u);
        return true;
    case UP_DONE: {
        uint64_t took = live_end(u);
        u->live_sent = 0;
        struct up_msg r = msg_make(UP_TOOK, 0, 0, (uint32_t)took);
        net_handover_send(u->sock, &r, sizeof(r), NULL, 0);
        return true;
    }
    default:
        return false;
    }
}

void srv_upgrade_live_fini(struct srv_upgrade *u)
{
    struct up_live_item *it = u->live_head;
    while (it) {
        struct up_live_item *next = it->next;
        item_free(it);
        it = next;
    }
    u->live_head = NULL;
    u->live_tail = &u->live_head;
    free(u->rx_buf);
    u->rx_buf = NULL;
    if (u->rx_fd >= 0)
        close(u->rx_fd);
    u->rx_fd = -1;
    free(u->gone);
    u->gone = NULL;
}
