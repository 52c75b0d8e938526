/* tlsconn_server.h - a TLS echo / HTTP responder on the shards for the tests, driven from a
 * separate test thread (external peers), plus the shard hooks (net + tls per shard). */
#ifndef TLSCONN_SERVER_H
#define TLSCONN_SERVER_H

#include <stdatomic.h>

#include "harness.h"
#include <hd/net.h>
#include <hd/tls.h>

#define TS_SHARDS_MAX 2
#define TS_CLOSES_MAX 16

struct ts_state {
    uint16_t port;
    struct tls_ctx *ctx;
    bool http;               /* answer one HTTP/1.1 request with a fixed 200, else echo */
    uint32_t handshakes_max; /* 0: default */
    uint32_t handshake_timeout_ms;
    struct net_listener *listeners[TS_SHARDS_MAX];
    _Atomic unsigned listening;
    _Atomic(struct hd_runtime *) rt;
    _Atomic unsigned handshakes, closes;
    _Atomic int reasons[TS_CLOSES_MAX]; /* on_close reasons in close order */
    _Atomic int mode;
    char sni[TLS_SERVER_NAME_MAX], alpn[TLS_ALPN_MAX];
    _Atomic uint64_t key_updates_in, key_updates_out, refused, record_errors, early_bytes;
};
extern struct ts_state ts;

/* Resets ts (keeping nothing) with a fresh port. */
void ts_reset(void);
/* hdt_options fields: net_module and tls_module (handshakes_max = ts.handshakes_max, read when
 * the options are built) under the test module. */
extern const struct hd_module *const ts_layers[2];
void *const *ts_layers_args(void);
#define TS_LAYERS .layers = ts_layers, .layers_args = ts_layers_args(), .layers_count = 2
/* hdt hook: listeners stop. */
void ts_shard_stop(struct hd_shard *s);
/* Body: listen on 127.0.0.1:ts.port on this shard. */
void ts_listen_body(struct hd_shard *s, void *arg);

/* Runs the server on `shards` shards while driver() runs on its own thread; once driver
 * returned and the server saw closes_expected closes (bounded: 20 s) the runtime stops. */
void ts_run(unsigned shards, void (*driver)(void), unsigned closes_expected);
/* Same, and body(shard) runs on every shard after its listener started (driver may be NULL). */
void ts_run_with(unsigned shards, void (*driver)(void), hdt_body_fn *body,
                 unsigned closes_expected);

#endif
