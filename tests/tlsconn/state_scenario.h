/* state_scenario.h - a live TLS connection handed over through its saved record state
 * (tls_conn_state_save / _load), run by test_tlsconn_state (userspace records, on the host) and
 * by tests/vm/ktls_state_test (kTLS, in the VM). Our TLS echo server runs on one shard, BoringSSL's
 * own client on a thread over a real loopback socket. After some traffic the client sends half
 * of a record; the server saves the connection's state and the raw bytes it kept, duplicates the
 * fd, closes the old connection without a word, adopts the fd as a new connection and loads the
 * state into it (after refusing damaged copies of it), puts the kept bytes back and says READY.
 * The client then sees the new connection speak with the next sequence number, completes its
 * half record, streams more and (when the mode can) rekeys both ways; close_notify both ways
 * ends it. BoringSSL fails the connection on any wrong key or sequence number. Failures inside
 * the shard or client thread abort (HDT_CHECK); the rest is in the result for the caller. */
#ifndef STATE_SCENARIO_H
#define STATE_SCENARIO_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <hd/tls.h>

#define SC_BAD_CASES 8u /* damaged copies of the state the load must refuse */

struct sc_result {
    int run_rc;       /* hdt_run's */
    int busy_rc;      /* save while handshaking */
    int nospc_rc;     /* save into 16 bytes */
    ssize_t blob_len; /* the save */
    size_t kept_len;  /* raw bytes kept at the save (the half record, in userspace mode) */
    int notls_rc;     /* save on a connection without TLS */
    int bad_rc[SC_BAD_CASES];
    bool bad_left_codec; /* a refused load left a codec installed */
    int load_rc, restore_rc;
    const char *codec; /* the codec installed by the load (static name), or NULL */
    int mode;          /* the mode the first handshake reported */
    bool key_updates;  /* the KeyUpdate phases ran (not on a kernel that cannot rekey) */
    int key_update_rc; /* the server's own tls_conn_key_update */
    bool closed;
    int final_reason; /* the new connection's on_close */
    uint64_t echoed, echo_expected;
    struct tls_shard_stats stats;
};

/* Runs the scenario with kTLS (the kernel's tls ULP must be there) or userspace records. */
void sc_run(bool ktls, struct sc_result *out);

#endif
