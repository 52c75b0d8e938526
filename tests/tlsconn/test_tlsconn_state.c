/* test_tlsconn_state.c - a live userspace-TLS connection handed over through its saved record
 * state, against BoringSSL's own client (state_scenario.h has the story; tests/vm's
 * ktls_state_test runs it with kTLS). Checks what the scenario recorded: save refuses a
 * handshaking connection, a small buffer and a connection without TLS; the load refuses every
 * damaged copy and installs nothing; after the load the stream goes on both ways (the half
 * record completes on the new connection), KeyUpdates both ways work, close_notify ends it
 * cleanly. Runs on the test thread (Criterion); the scenario's threads are its own. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include <hd/tls.h>
#include "state_scenario.h"
#include "tlsconn_util.h"

static void suite_init(void)
{
    tu_check_boringssl();
}

TestSuite(test_tlsconn_state, .init = suite_init, .timeout = 120);

Test(test_tlsconn_state, save_hand_over_load_continue)
{
    struct sc_result r;
    sc_run(false, &r);
    cr_assert_eq(r.run_rc, 0);
    cr_assert_eq(r.mode, TLS_MODE_USERSPACE);
    cr_assert_eq(r.busy_rc, -EBUSY, "save while handshaking: %d", r.busy_rc);
    cr_assert_eq(r.nospc_rc, -ENOSPC, "save into 16 bytes: %d", r.nospc_rc);
    cr_assert_gt(r.blob_len, 0, "save: %zd", r.blob_len);
    cr_assert_leq((size_t)r.blob_len, (size_t)TLS_CONN_STATE_MAX);
    cr_assert_gt(r.kept_len, 0, "the half record was kept raw");
    cr_assert_eq(r.notls_rc, -EINVAL, "save without TLS: %d", r.notls_rc);
    for (unsigned i = 0; i < SC_BAD_CASES; i++)
        cr_assert_eq(r.bad_rc[i], -EPROTO, "damaged state %u: %d", i, r.bad_rc[i]);
    cr_assert(!r.bad_left_codec, "a refused state left a codec installed");
    cr_assert_eq(r.load_rc, 0, "load: %d", r.load_rc);
    cr_assert(r.codec != NULL && strcmp(r.codec, "tls-records") == 0, "codec after the load");
    cr_assert_eq(r.restore_rc, 0, "kept bytes restore: %d", r.restore_rc);
    cr_assert(r.key_updates);
    cr_assert_eq(r.key_update_rc, 0, "server KeyUpdate: %d", r.key_update_rc);
    cr_assert(r.closed);
    cr_assert_eq(r.final_reason, 0, "the new connection closed with %s", strerror(-r.final_reason));
    cr_assert_gt(r.echo_expected, 0);
    cr_assert_eq(r.echoed, r.echo_expected);
    cr_assert_eq(r.stats.states_saved, 1);
    cr_assert_eq(r.stats.states_loaded, 1);
    cr_assert_eq(r.stats.key_updates_in, 2, "the client's KeyUpdate and its answer to ours");
    cr_assert_eq(r.stats.key_updates_out, 2, "our answer and our own");
    cr_assert_eq(r.stats.record_errors, 0);
    cr_assert_eq(r.stats.close_notify_in, 1);
}
