/* ktls_layer_impl.h: what the three files of ktls_layer_test share (the rows, the ends, the
 * global state). ktls_layer_test.c holds the rows, the checks and main; ktls_layer_ends.c the
 * runtime side (our clients, our server, the shards); ktls_layer_peers.c the driver thread and the
 * openssl peers it talks to over pipes. See ktls_layer_test.c for what the test does. */
#ifndef KTLS_LAYER_IMPL_H
#define KTLS_LAYER_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"
#include <hd/tls.h>

#define LT_SHARDS          2
#define LT_BULK_BYTES      (16ull << 20) /* x 4 connections = 64 MiB each way */
#define LT_EARLY_BYTES     (1ull << 20)  /* queued before the handshake: rides with Finished */
#define LT_SMALL_BYTES     16ull         /* enough to know the other side is in kTLS mode */
#define LT_PIPE_BYTES      (16ull << 10) /* s_client: well inside a pipe's 64 KiB, no deadlock */
#define LT_EXTERNAL_WAIT_S 30            /* an openssl peer that hangs fails its check */
#define LT_CHUNK           (60u * 1024u) /* fits the 64 KiB frame class */
#define LT_PHASE_TIMEOUT_S 90            /* a stuck phase fails, well inside the VM's timeout */
#define LT_POLL_MS         5
#define LT_MAGIC           0x6b746c73u    /* "ktls" */
#define LT_LOG_MAX         (256u * 1024u) /* ~60 lines are logged; the copy keeps the first */
#define LT_SERVERS_MAX     16

enum lt_phase { LT_IDLE, LT_BULK, LT_SUITES, LT_TICKETS, LT_EARLY, LT_KU_IN, LT_KU_OUT, LT_DONE };
enum lt_action { LT_CLOSE_NOTIFY, LT_KEY_UPDATE };

/* One client per row; the server learns the row from the header the client sends first. */
struct lt_spec {
    enum lt_phase phase;
    unsigned shard;
    bool ktls_disable; /* the client stays in userspace (the server still goes kTLS) */
    uint64_t up, down; /* stream bytes client -> server, server -> client */
    enum lt_action action;
    const char *suite; /* set: the client is `openssl s_client -ciphersuites suite` instead */
    bool s_server;     /* the server is `openssl s_server` (it sends NewSessionTickets) */
};

/* The rows (ktls_layer_test.c); its _Static_assert keeps the count in step with the table. */
#define LT_CLIENTS 10u
extern const struct lt_spec lt_specs[LT_CLIENTS];
_Static_assert(LT_CLIENTS <= LT_SERVERS_MAX, "one server end per client");

struct lt_header {
    uint32_t magic, id;
    uint64_t up, down;
};

/* One end of a connection: what it sends and what it must receive. */
struct lt_end {
    struct hd_shard *s;
    struct net_conn *c;
    int id; /* client row (servers: -1 until the header arrived) */
    uint64_t seed_out, seed_in, out_total, in_total, sent, got, fnv;
    bool paused, bad, handshaken, acted;
    int mode, reason, action_rc;
    uint16_t suite;
    uint8_t hdr[sizeof(struct lt_header)];
    size_t hdr_got;
    _Atomic bool closed;
};

/* Shared by the shards, the driver thread and main (defined in ktls_layer_test.c). */
struct lt_global {
    struct tls_ctx *server_ctx, *client_ctx;
    uint16_t port, s_server_port;
    struct hd_runtime *_Atomic rt;
    _Atomic int phase;
    _Atomic unsigned listening, closes, servers_used;
    struct net_listener *listeners[LT_SHARDS];
    struct lt_end clients[LT_CLIENTS];
    struct lt_end servers[LT_SERVERS_MAX];
    struct tls_shard_stats stats[LT_SHARDS];
    int started[LT_SHARDS];
    bool ring[LT_SHARDS];
    struct hd_timer poll[LT_SHARDS];
    int timed_out_phase;
};
extern struct lt_global g;

/* The byte at position i of stream seed (recomputed by the receiver). */
static inline uint8_t lt_stream_byte(uint64_t seed, uint64_t i)
{
    uint64_t x = (i >> 3) * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint8_t)(x >> ((i & 7) * 8));
}

/* ktls_layer_ends.c: the server end that named client id, or NULL. */
struct lt_end *lt_server_of(unsigned id);
/* ktls_layer_ends.c: e received len bytes of its downstream (checked, hashed). */
void lt_end_take(struct lt_end *e, const uint8_t *data, size_t len);
/* ktls_layer_ends.c: the layers under the test module (net, tls) and the runtime's hooks. */
extern const struct hd_module *const lt_layers[2];
extern void *const lt_layers_args[2];
int lt_shard_init(struct hd_shard *s);
void lt_shard_stop(struct hd_shard *s);
void lt_body(struct hd_shard *s, void *arg);
/* ktls_layer_peers.c: the driver thread (phases, the openssl peers, then stops the runtime). */
void *lt_driver_main(void *arg);

#endif
