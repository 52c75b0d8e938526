/* server_test.h - unit tests of the relay's parts (apps/derp/server) on real shards. srvt_run
 * runs the test's body on every shard through the reactor's harness (tests/reactor/harness.h,
 * hdt_run), whose test module's per-shard state is the relay's as server_module.c builds it
 * (the peer and guest tables, the sources' index and pools) without listeners, mesh or
 * admission; the bodies end with srvt_done (the last one stops the runtime). Clients are
 * stand-ins (srvt_client): a relay client's fields with no connection unless a test adopts one.
 * Checks inside shard threads are HDT_CHECK (they abort; Criterion reports the crash), as
 * cr_assert must stay on the test's thread. */
#ifndef SERVER_TEST_H
#define SERVER_TEST_H

#include "harness.h"
#include "server.h"

typedef void srvt_body_fn(struct srv_shard *ds, void *arg);

struct srvt_opts {
    unsigned shards; /* 0: 1 */
    bool net;        /* net_module under the relay (for tests that adopt a socket) */
};

/* The configuration every shard's state points at (hooks: no-ops the tests can count). */
extern struct srv_config srvt_cfg;
struct srvt_hook_counts {
    unsigned settle, unsettle, closing, closed, move_sent, move_done, tally_feed;
};
extern struct srvt_hook_counts srvt_hooks_seen[HD_SHARDS_MAX];

/* Runs body(ds, arg) on every shard; returns hd_runtime_wait's result. */
int srvt_run(const struct srvt_opts *o, srvt_body_fn *body, void *arg);
void srvt_done(struct srv_shard *ds);

/* Key number n (n > 0), deterministic; a key whose owner is shard `owner` (the n-th such). */
void srvt_key(uint32_t n, uint8_t key[DERP_KEY_LEN]);
void srvt_key_owned(const struct srv_shard *ds, unsigned owner, uint32_t n,
                    uint8_t key[DERP_KEY_LEN]);
/* A client of ds with key (phase `phase`, no connection): freed by srvt_client_free. */
struct srv_client *srvt_client(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN],
                               enum srv_client_phase phase);
void srvt_client_free(struct srv_client *cl);
/* A connection handler that takes every byte and does nothing at the close: for a stand-in
 * client's adopted socket. */
extern const struct net_conn_handler srvt_sink_handler;
/* A frame as srv_route takes it: destination key, then a RecvPacket of payload bytes from src. */
struct hd_frame *srvt_route_frame(struct srv_shard *ds, const uint8_t dst[DERP_KEY_LEN],
                                  const uint8_t src[DERP_KEY_LEN], uint32_t payload);

#endif /* SERVER_TEST_H */
