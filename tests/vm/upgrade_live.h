/* upgrade_live.h - the live upgrade over kTLS inside the test VM (upgrade_live_test.c drives a
 * real hderp-server and its upgrade; upgrade_live_clients.c runs the DERP clients on a runtime of
 * their own). The test thread and the client shard share only the atomics below: the test thread
 * moves the phase on, the shard reports what it sent and what arrived. */
#ifndef UPGRADE_LIVE_H
#define UPGRADE_LIVE_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <hd/tls.h>

/* 20 pairs (40 clients): every TLS login costs a P-256 signature and an X25519 exchange under
 * TCG (no KVM) on each side, and each packet two record encryptions and two decryptions, half
 * of them in the emulated kernel; 40 clients at UL_TICK_MS log in within seconds and keep 2,000
 * packets/s flowing through 2 vCPUs that also run both server processes for the hand-over,
 * while still spreading the keys over both of the server's shards. */
#define UL_PAIRS   20u
#define UL_CLIENTS (2u * UL_PAIRS)
/* Logins under way at once: the client shard does every handshake's crypto in turn, and under
 * ASan and TCG 40 at once took it past the server's handshake deadline. */
#define UL_LOGIN_WAVE 4u
/* Each client sends its partner one packet per tick: 50 packets/s each. */
#define UL_TICK_MS 20u
/* The receiver's record of seen sequence numbers: 400 s of sending, far past any phase's
 * deadline (a sender stops at it: the test then fails on the missing packets). */
#define UL_SEQ_MAX 20000u
/* Marks the test's payloads: {magic, sender, seq}. */
#define UL_MAGIC 0x6c697665u /* "live" */

/* The test thread sets a phase, then bumps epoch; the shard acts on the phase at its next tick
 * and then stores that epoch in acked (the test thread waits for it: from then on the phase is
 * in force). A phase may come again (SEND after DRAIN for the next upgrade). */
enum ul_phase {
    UL_CONNECT, /* clients connect and log in */
    UL_SEND,    /* every client sends its partner one packet per tick */
    UL_AFTER,   /* a successor took over: sending goes on, the shard marks where each sender is
                 * (after_from) and counts anew (got_after): what is sent now must all arrive */
    UL_DRAIN,   /* sending stops */
    UL_CLOSE,   /* the clients close; the runtime stops when the last one closed */
};

struct ul_state {
    /* Set by the test thread before the clients start. */
    uint16_t port;
    char host[64]; /* "localhost:PORT": Host header and (without the port) SNI */
    struct tls_ctx *tls_ctx;
    /* The test thread's. */
    atomic_int phase;
    atomic_uint epoch;
    /* The client shard's. */
    atomic_uint acked;        /* the epoch whose phase the shard acted on */
    atomic_uint ready;        /* logged in */
    atomic_uint closed;       /* on_close ran */
    atomic_uint early_closes; /* on_close before UL_CLOSE, or with an error */
    atomic_int first_close_reason, first_close_client, first_close_phase;
    atomic_uint connect_errors, send_errors;
    atomic_uint peer_gone; /* PeerGone frames: none may come (every peer stays) */
    atomic_uint bad;       /* a packet with a wrong size, magic, sender or source key */
    atomic_uint dups;
    /* A packet older than one already received: printed, not checked (what is checked is that
     * every packet arrives once; order across placement moves is not this test's subject) */
    atomic_uint reorders;
    atomic_int first_reorder_phase;     /* the phase of the first one (-1: none) */
    atomic_uint relogins;               /* clients that saw more than one ServerInfo */
    atomic_uint frames_skipped;         /* e.g. a second ServerKey after login */
    atomic_uint sent[UL_CLIENTS];       /* packets client i sent (its next sequence number) */
    atomic_uint after_from[UL_CLIENTS]; /* the first one sent in the last UL_AFTER (UINT_MAX
                                         * before the first) */
    atomic_uint got[UL_CLIENTS];        /* distinct packets client i received from its partner */
    atomic_uint got_after[UL_CLIENTS];  /* ... of them sent since the last UL_AFTER began */
};

/* The partner client i sends to and receives from. */
static inline unsigned ul_partner(unsigned i)
{
    return i ^ 1u;
}

/* Once ul_clients_thread returned: up to max sequence numbers in [from, to) that receiver never
 * got from its partner, into out; returns how many there are in all. */
unsigned ul_missing(unsigned receiver, uint32_t from, uint32_t to, uint32_t *out, unsigned max);

/* pthread body (arg: struct ul_state *): key pairs, a one-shard runtime (net + tls, userspace
 * records: the kernel's kTLS counters then count the server's sockets only), UL_CLIENTS DERP
 * clients over TLS, the phases until UL_CLOSE. Returns hdt_run's result as (intptr_t). */
void *ul_clients_thread(void *arg);

#endif
