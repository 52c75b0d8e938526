/* tlsconn_client.h - our TLS client's connection state for the tests against openssl s_server
 * -rev (test_tlsconn_peers.c, test_tlsconn_roots.c): the test starts the connection on a shard
 * (net_conn_connect with tc_handler, then tls_conn_start with its own on_handshake), sends a line
 * and reads the reversed line back. One connection at a time. */
#ifndef TLSCONN_CLIENT_H
#define TLSCONN_CLIENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <hd/net.h>
#include <hd/tls.h>

struct tc_state {
    struct tls_ctx *ctx;
    uint16_t port;
    const char *server_name;
    char got[256]; /* what came back, NUL-terminated (truncated to fit) */
    size_t got_len;
    _Atomic int handshakes, reason, closed, start_rc;
};
extern struct tc_state tc;

/* on_data appends to tc.got and closes after the first '\n'; on_close records the reason in
 * tc.reason, sets tc.closed and stops the shard's runtime. */
extern const struct net_conn_handler tc_handler;

#endif
