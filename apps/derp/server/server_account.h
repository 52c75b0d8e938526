/* server_account.h - per-key accounting's tables (server_account.c) and the merged view of them
 * that /debug/varz and /debug/keys print (server_account_out.c). */
#ifndef SERVER_ACCOUNT_H
#define SERVER_ACCOUNT_H

#include "server.h"

/* received: from the key (it sent them to the relay); sent: by the relay to the key. */
struct srv_acct_counts {
    uint64_t rx_bytes, rx_pkts, tx_bytes, tx_pkts;
};

enum srv_acct_dim { SRV_ACCT_BYTES, SRV_ACCT_PACKETS, SRV_ACCT_DIMS };

/* A sketch entry: weight (bytes or packets, received + sent) is an upper bound of the key's
 * total since the shard started, weight - error a lower one; c: what it counted while in the
 * sketch (each field a lower bound). */
struct srv_acct_entry {
    struct derp_pubkey key;
    struct srv_acct_counts c;
    uint64_t weight, error;
};

struct srv_acct_sketch {
    uint32_t count;
    uint64_t evictions;
    struct srv_acct_entry e[SRV_ACCT_TOP_ENTRIES];
};

/* An -account-keys key's exact counters on one shard. conns: its live connections here;
 * connects: connections since the counters (re)started; idle_ms: when conns fell to 0. */
struct srv_acct_named {
    struct derp_pubkey key;
    struct srv_acct_counts c;
    uint32_t conns, connects;
    uint64_t idle_ms;
    bool used;
};

struct srv_acct_slot {
    struct srv_acct_sketch top[SRV_ACCT_DIMS];
    uint64_t feeds, named_full;
    uint32_t named_count;
    struct srv_acct_named named[SRV_ACCT_KEYS_MAX];
};

#endif /* SERVER_ACCOUNT_H */
