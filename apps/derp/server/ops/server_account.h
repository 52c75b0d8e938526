/* server_account.h - per-key accounting (server_account.c: the tables; server_account_out.c:
 * the merged view /debug/varz and /debug/keys print); -rate-config's per-key limits and quotas
 * are admission's (admit/server_admit.h). */
#ifndef SERVER_ACCOUNT_H
#define SERVER_ACCOUNT_H

#include "server.h"

/* server_account.c: per-key accounting. Each shard keeps heavy-hitter sketches (Space-Saving,
 * SRV_ACCT_TOP_ENTRIES keys by bytes and by packets) and exact counters for the keys of
 * -account-keys; a connection counts into cl->tally (srv_tally_rx/tx, server.h) and feeds its
 * shard's tables in batches: past SRV_ACCT_FEED_BYTES, at each KeepAlive and at detach. attach /
 * detach: on the shard the connection is on, from srv_client_settle / srv_client_unsettle (so
 * a client placed on another shard detaches from the old one and attaches to the new). */
struct srv_acct;
struct srv_acct_slot;
int srv_acct_configure(struct srv_config *cfg, const char *path, char *err, size_t err_size);
void srv_acct_config_free(struct srv_config *cfg);
int srv_acct_attach_config(struct srv_config *cfg, struct hd_runtime *rt);
void srv_acct_reload(struct srv_config *cfg);
void srv_acct_detach_config(struct srv_config *cfg);
int srv_acct_shard_init(struct srv_shard *ds);
void srv_acct_shard_fini(struct srv_shard *ds);
void srv_acct_attach(struct srv_client *cl);
void srv_acct_detach(struct srv_client *cl);
void srv_acct_feed(struct srv_client *cl);
/* /debug/varz and /debug/keys: a slot per shard (hd_collect), filled on its shard; formatted
 * (merged over the count slots, stride bytes apart) on the shard that got the request. */
void srv_acct_fill(struct srv_shard *ds, struct srv_acct_slot *slot);
struct srv_text {
    char *buf;
    size_t len, cap;
};
__attribute__((format(printf, 2, 3))) void srv_text_put(struct srv_text *o, const char *fmt, ...);
void srv_acct_format_varz(struct srv_text *o, const void *slots, size_t stride, unsigned count);
void srv_acct_format_json(struct srv_text *o, const void *slots, size_t stride, unsigned count);

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
