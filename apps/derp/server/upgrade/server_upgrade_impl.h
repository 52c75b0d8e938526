/* server_upgrade_impl.h - the upgrade's state and messages, shared by server_upgrade.c (the
 * sockets) and server_upgrade_live.c (the logged-in clients). Private to those two.
 * Each message is {magic "hdup", version, type, kind, index, value} on the inherited
 * SOCK_SEQPACKET socket (net_handover_send / recv); a successor refuses another version:
 *   FD (kind, index)     old: one descriptor; kind claim (index 0 = -a, 1 = -http-port), listen
 *                        (-a), http (-http-port) or stun, index = the shard
 *   END (count)          old: how many FD came before it (a mismatch is -EPROTO)
 *   READY (pid; kind)    new: every shard accepts on the adopted sockets; kind bit 1: it takes
 *                        logged-in clients
 *   STOPPED              old: its shards have cancelled their accepts (the successor re-arms)
 *   CLIENT (length)      old: one descriptor, a client's connection; its record follows in DATA
 *   GONE (length)        old: the same without a descriptor: a key that closed meanwhile
 *   DATA (length)        old: up to 64 KiB - 16 of the record begun by the last CLIENT / GONE
 *   BATCH                old: every client logged in at the freeze was sent: let them read
 *   DONE (count)         old: no more clients
 *   TOOK (count)         new: the clients its shards imported */
#ifndef SERVER_UPGRADE_IMPL_H
#define SERVER_UPGRADE_IMPL_H

#include <pthread.h>
#include <stdbool.h>

#include "server.h"
#include "upgrade/server_live.h"
#include "upgrade/server_upgrade.h"

/* After the hand-over, the connections not logged in yet (an HTTP request, a TLS handshake, a
 * DERP login) have this long to finish before the old process stops and closes them: enough
 * for a request or a login in flight on a loaded machine, too short for a slow drip to hold
 * the old process (issue 24). How often the shards are asked meanwhile. */
#define SRV_UPGRADE_PRELOGIN_GRACE_MS 1000u
#define SRV_UPGRADE_GRACE_POLL_MS     20u

/* Slots per kind: a shard's index (--shards is at most 64) or the claim's. */
#define SRV_UPGRADE_SLOTS 64u
/* A shard's post inbox is full: try again this often, this many times. */
#define SRV_UPGRADE_POST_RETRY_MS 1
#define SRV_UPGRADE_POST_TRIES    1000
/* How long a successor waits for its predecessor's sockets (they are sent at once). */
#define SRV_UPGRADE_RECV_MS 10000
#define SRV_UPGRADE_MAGIC   0x70756468u /* "hdup" */
/* Bumped when the messages change: a successor refuses another version (and the old serves). */
#define SRV_UPGRADE_VERSION 1u
/* READY's kind bits: the successor takes logged-in clients (UP_CLIENT ...). A predecessor sends
 * them only then, so either side may be a version that knows only the sockets. */
#define UP_READY_TAKES_CLIENTS 1u

enum {
    MSG_FD = 1,
    MSG_END = 2,
    MSG_READY = 3,
    MSG_STOPPED = 4,
    /* the logged-in clients (server_upgrade_live.c), old to new: */
    UP_CLIENT = 5, /* a record of value bytes follows in UP_DATA messages; one fd */
    UP_GONE = 6,   /* the same without a fd: a key that went during the hand-over */
    UP_DATA = 7,   /* after the header, up to NET_HANDOVER_MSG_MAX - 16 bytes of it */
    UP_BATCH = 8,  /* the clients so far are all sent: the successor lets them read */
    UP_DONE = 9,   /* no more (value: the clients sent); new to old: */
    UP_TOOK = 10,  /* value: the clients taken over */
};

/* One message; MSG_FD carries one descriptor (kind, index), MSG_END the count sent, MSG_READY
 * the successor's pid; MSG_STOPPED (old to new) says the old process accepts no more. */
struct up_msg {
    uint32_t magic;
    uint16_t version;
    uint8_t type;
    uint8_t kind;
    uint32_t index;
    uint32_t value;
};

/* The old process's attempt (one at a time; up_state_set asserts each change, under lock):
 *   IDLE -> SPAWNING       SIGUSR2: the upgrade thread starts the new binary
 *   SPAWNING -> SENDING    it runs: the listening sockets go to it, READY awaited
 *   SPAWNING, SENDING -> IDLE   it could not start, or failed before READY: this one serves on
 *   SENDING -> HANDING_OVER     READY: accepts stop, the logged-in clients go over
 *   HANDING_OVER -> STOPPED     the runtime stops (nothing follows, a SIGUSR2 is ignored) */
enum up_state { UP_IDLE, UP_SPAWNING, UP_SENDING, UP_HANDING_OVER, UP_STOPPED, UP_STATES };

struct srv_upgrade {
    char **argv;
    const char *pid_file;
    uint32_t timeout_ms;
    int slots[SRV_UP_KINDS][SRV_UPGRADE_SLOTS]; /* ours: the claims, the shards' (noted) */
    int got[SRV_UP_KINDS][SRV_UPGRADE_SLOTS];   /* inherited, until a shard takes one */
    int sock;                                   /* successor: to the predecessor */
    bool inherited;
    pthread_mutex_t lock; /* thread_sock, state, joinable */
    pthread_t thread;     /* the old process's upgrade thread, or the successor's watch */
    bool joinable;
    enum up_state state; /* the attempt's (the thread has not finished it: not IDLE) */
    int thread_sock;     /* the thread's end while it waits (fini shuts it down) */
    struct hd_runtime *rt;
    unsigned instance; /* the relay's place in the runtime's modules (srv_shard_at) */
    pthread_cond_t answered;
    unsigned answers;                          /* shards that answered the last post (under lock) */
    uint64_t prelogin;                         /* their connections not logged in yet, summed */
    int dups[SRV_UP_KINDS][SRV_UPGRADE_SLOTS]; /* what the thread sends */
    /* server_upgrade_live.c. Old: the shards' records waiting for the thread (under lock,
     * live_cv signalled); tally: the shards' counts (summed under lock by tally_here). */
    struct up_live_item *live_head, **live_tail;
    pthread_cond_t live_cv;
    struct srv_live_tally tally;
    uint32_t live_sent; /* clients sent (both roles: received) */
    bool takes_clients; /* the successor's READY said so */
    /* Successor: the record being put together from UP_DATA, and the gone keys. */
    int rx_fd;
    uint8_t rx_type, *rx_buf;
    size_t rx_len, rx_have;
    uint8_t (*gone)[DERP_KEY_LEN];
    uint32_t gone_count, gone_cap;
};

struct up_msg msg_make(uint8_t type, uint8_t kind, uint32_t index, uint32_t value);
/* Run fn on every shard and wait for each to answer; returns u->prelogin as they left it. */
uint64_t ask_shards(struct srv_upgrade *u, hd_post_fn *fn);
/* fn on every shard, not waiting for it. */
void ask_shards_async(struct srv_upgrade *u, hd_post_fn *fn);
/* The posted function that counts the shards' connections not logged in yet. */
void count_here(struct hd_shard *s, void *arg);

/* server_upgrade_live.c. Old process, upgrade thread, once the successor accepts: freeze every
 * shard, send each logged-in client over sock, say BATCH. */
void srv_upgrade_live_send(struct srv_upgrade *u, int sock);
/* Again, for clients that logged in or arrived since, then DONE and the successor's TOOK
 * (waited for a bounded time); the summary logged. */
void srv_upgrade_live_finish(struct srv_upgrade *u, int sock, pid_t pid);
/* Successor, watch thread: a message of the predecessor's that is about clients (len bytes in
 * buf, fds_count descriptors in fds); false when it is not one. */
bool srv_upgrade_live_recv(struct srv_upgrade *u, const uint8_t *buf, size_t len, int *fds,
                           unsigned fds_count);
/* Either role, at fini: what is left (records not sent, a record half received). */
void srv_upgrade_live_fini(struct srv_upgrade *u);

#endif
