/* ktls_state_test: a live kTLS connection handed over through its saved record state, inside
 * the test VM (run_vm_test.sh), since the host lacks the tls ULP. The scenario is
 * tests/tlsconn/state_scenario.h with kTLS on: the save reads the kernel's TLS_TX / TLS_RX back
 * with getsockopt, the old connection's fd is closed while a duplicate keeps the socket (and its
 * kernel keys), the load checks the kernel's state against the saved bytes and installs the
 * kTLS codec, and the stream goes on both ways (the client's half record completes in the
 * kernel) until close_notify both ways. KeyUpdates run only on a kernel that can rekey
 * (tls_ktls_rekey_available; Debian 12's 6.1 cannot). Prints `ok <check>` / `FAIL <check>: why`;
 * exits 1 if a check failed. Threads: main, and the scenario's own (shard, client). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <hd/tls.h>
#include "state_scenario.h"

static unsigned failures;

static void check(bool ok, const char *name, const char *fmt, ...)
{
    if (ok) {
        printf("ok %s\n", name);
        return;
    }
    failures++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!tls_ktls_available()) {
        printf("FAIL ktls: the kernel has no tls ULP\n");
        return 1;
    }
    struct sc_result r;
    sc_run(true, &r);
    check(r.run_rc == 0, "runtime", "%s", strerror(-r.run_rc));
    check(r.mode == TLS_MODE_KTLS, "mode", "the handshake ended in mode %d", r.mode);
    check(r.busy_rc == -EBUSY, "save_handshaking", "%d", r.busy_rc);
    check(r.nospc_rc == -ENOSPC, "save_small", "%d", r.nospc_rc);
    check(r.blob_len > 0 && (size_t)r.blob_len <= TLS_CONN_STATE_MAX, "save", "%zd", r.blob_len);
    check(r.notls_rc == -EINVAL, "save_no_tls", "%d", r.notls_rc);
    for (unsigned i = 0; i < SC_BAD_CASES; i++)
        check(r.bad_rc[i] == -EPROTO, "load_damaged", "case %u: %d", i, r.bad_rc[i]);
    check(!r.bad_left_codec, "load_damaged_nothing_installed", "a codec was left");
    check(r.load_rc == 0, "load", "%s", strerror(-r.load_rc));
    check(r.codec != NULL && strcmp(r.codec, "tls-ktls") == 0, "load_codec", "%s",
          r.codec ? r.codec : "none");
    check(r.restore_rc == 0, "kept_restore", "%d", r.restore_rc);
    check(!r.key_updates || r.key_update_rc == 0, "key_update", "%d", r.key_update_rc);
    check(r.closed && r.final_reason == 0, "close", "closed %d, reason %s", r.closed,
          strerror(-r.final_reason));
    check(r.echo_expected > 0 && r.echoed == r.echo_expected, "echo", "%llu of %llu",
          (unsigned long long)r.echoed, (unsigned long long)r.echo_expected);
    check(r.stats.states_saved == 1 && r.stats.states_loaded == 1, "stats_states",
          "saved %llu loaded %llu", (unsigned long long)r.stats.states_saved,
          (unsigned long long)r.stats.states_loaded);
    check(r.stats.record_errors == 0 && r.stats.close_notify_in == 1, "stats_records",
          "record_errors %llu close_notify_in %llu", (unsigned long long)r.stats.record_errors,
          (unsigned long long)r.stats.close_notify_in);
    printf("key updates %s\n", r.key_updates ? "ran" : "skipped (no kernel rekey)");
    return failures ? 1 : 0;
}
