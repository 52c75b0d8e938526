/* server_live.h - logged-in clients moved to a successor at an upgrade (server_live.c, on the
 * shards; server_upgrade_live.c carries them between the processes). The old process freezes
 * every shard (reading paused, presence events silenced), then exports each active client as
 * its fd and one record: the DERP session (key, roles, preferred flag, splitter, rate tokens,
 * the keys it heard from) and net's own blob (net_conn_export: unconsumed bytes, send queues,
 * the TLS state). The successor imports each on the key's owner shard without a presence
 * event and resumes reading once the first batch is in. docs/ARCHITECTURE.md ("Upgrades"). */
#ifndef SERVER_LIVE_H
#define SERVER_LIVE_H

#include "server.h"

/* A record's magic, and the version of the session bytes (a successor refuses another). */
#define SRV_LIVE_MAGIC   0x736c6468u /* "hdls" */
#define SRV_LIVE_VERSION 1u
/* A client whose record would be longer (a huge send backlog) is closed instead: it
 * reconnects. Bounds the old process's outbox and the successor's reassembly. */
#define SRV_LIVE_RECORD_MAX (8u * 1024u * 1024u)
/* Keys of clients that closed during a hand-over, announced by the successor (beyond: their
 * PeerGone is lost, as a watcher's full bus would lose it). */
#define SRV_LIVE_GONE_MAX 65536u

/* Where the old process's records go (on the shard's thread): fd (-1 for a gone key's record)
 * and rec (malloc'd) are the sink's. */
typedef void srv_live_sink_fn(void *arg, int fd, uint8_t *rec, size_t len);

/* Per shard, allocated at the first freeze or import. */
struct srv_live {
    bool resumed;      /* successor: the first batch is in, imports resume at once */
    uint64_t pending;  /* exports started, not yet done or closed */
    uint64_t exported; /* records handed to the sink */
    uint64_t closed;   /* clients that could not move (closed: they reconnect) */
    uint64_t imported, import_failed;
    srv_live_sink_fn *sink;
    void *sink_arg;
};

/* What the old process's thread sums over its shards (srv_live_tally). */
struct srv_live_tally {
    uint64_t active, pending, exported, closed, dropped, imported, import_failed;
    uint64_t moves_sent, moves_done; /* their difference: clients between shards */
    uint64_t dropped_all;            /* every packet the process dropped (derp_packets_dropped) */
    uint64_t dropped_unknown;        /* of those, for keys it did not know (unknown_dest*) */
};

/* Whether this shard is handing its clients over (presence events are not sent: the clients
 * that would hear them move too and already know). */
static inline bool srv_live_frozen(const struct srv_shard *ds)
{
    return ds->handing_over;
}

/* Old process, on each shard. freeze: stop reading every active client, silence presence
 * events; records go to sink from now on (0 or -ENOMEM). export: every active client not
 * already on its way (called again and again: clients that logged in or arrived since), a
 * record each, and the keys of clients that closed meanwhile. tally adds this shard's counts
 * (either process). */
int srv_live_freeze(struct srv_shard *ds, srv_live_sink_fn *sink, void *arg);
void srv_live_export(struct srv_shard *ds);
void srv_live_tally(struct srv_shard *ds, struct srv_live_tally *t);
/* The successor, on the key's owner shard: a client from fd (taken in every case) and its
 * record; 0 or -errno (-EPROTO: a bad record; the fd is closed). */
int srv_live_import(struct srv_shard *ds, int fd, const uint8_t *rec, size_t len);
/* The first batch is in: every imported client reads again, and later ones at once. */
void srv_live_resume(struct srv_shard *ds);
/* A client's record, read: views into it (every length checked), net's part last. */
struct srv_live_session {
    const uint8_t *key, *ip, *prefixes; /* prefixes: count unaligned uint64 */
    uint32_t flags, port, keepalive_ms, sp[4], count;
    uint64_t age_ms, tokens;
    const uint8_t *blob; /* net_conn_export's */
    size_t blob_len;
};
/* 0, or -EPROTO (magic, version, lengths, flags, a splitter state a logged-in client cannot
 * have, more sources than SRV_SOURCES_MAX). Pure. */
int srv_live_session_parse(const uint8_t *rec, size_t len, struct srv_live_session *ss);
/* The key a record names (for the owner shard), or NULL when it is too short. */
const uint8_t *srv_live_record_key(const uint8_t *rec, size_t len);
void srv_live_fini(struct srv_shard *ds);

/* A client move between shards (login, placement, going home) began (on the source; after
 * net_conn_migrate returned 0) / ended (the adopt callback on the destination, c NULL or not;
 * or its close on the source). On a frozen shard an arrival reads no more: it is exported. */
void srv_live_move_sent(struct srv_client *cl);
void srv_live_move_done(struct srv_shard *ds, struct srv_client *cl, struct net_conn *c);

/* The close of a client on its way out (the export did not finish). */
void srv_live_export_closed(struct srv_client *cl);
/* server_live.c: a client active on a frozen shard closed for good: the successor says it went. */
void srv_live_gone(struct srv_shard *ds, const struct derp_pubkey *key);

#endif
