/* server_account_out.c - per-key accounting as /debug/varz and /debug/keys show it: every shard's
 * sketches merged (Space-Saving's merge: a key a full shard sketch lacks may have had up to that
 * sketch's smallest count there, so that count is added to its estimate and to its error) and
 * ranked, and the -account-keys counters summed over shards. Runs on the shard that got the
 * request, on the slots hd_collect gathered (server_metrics.c); mallocs only there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/server_account.h"

struct merged {
    struct derp_pubkey key;
    struct srv_acct_counts c;
    uint64_t weight, error, mins; /* mins: the present shards' minimums (merge) */
    uint32_t conns, connects;     /* named keys */
};

static const struct srv_acct_slot *slot_at(const void *slots, size_t stride, unsigned i)
{
    return (const struct srv_acct_slot *)((const char *)slots + stride * i);
}

static int by_key(const void *x, const void *y)
{
    return memcmp(((const struct merged *)x)->key.bytes, ((const struct merged *)y)->key.bytes,
                  DERP_KEY_LEN);
}

static int by_weight(const void *x, const void *y)
{
    const struct merged *a = x, *b = y;
    if (a->weight != b->weight)
        return a->weight > b->weight ? -1 : 1;
    return by_key(x, y);
}

static uint64_t sketch_min(const struct srv_acct_sketch *sk)
{
    if (sk->count < SRV_ACCT_TOP_ENTRIES)
        return 0; /* not full: a key it lacks never got here */
    uint64_t m = sk->e[0].weight;
    for (uint32_t i = 1; i < sk->count; i++)
        m = sk->e[i].weight < m ? sk->e[i].weight : m;
    return m;
}

/* Sorted by key, runs of one key summed into its first; returns the number of keys left. */
static uint32_t group(struct merged *m, uint32_t n)
{
    if (n == 0)
        return 0;
    qsort(m, n, sizeof(*m), by_key);
    uint32_t k = 0;
    for (uint32_t i = 1; i < n; i++) {
        struct merged *g = &m[k];
        if (derp_pubkey_equal(&g->key, &m[i].key)) {
            g->c.rx_bytes += m[i].c.rx_bytes;
            g->c.rx_pkts += m[i].c.rx_pkts;
            g->c.tx_bytes += m[i].c.tx_bytes;
            g->c.tx_pkts += m[i].c.tx_pkts;
            g->weight += m[i].weight;
            g->error += m[i].error;
            g->mins += m[i].mins;
            g->conns += m[i].conns;
            g->connects += m[i].connects;
        } else {
            m[++k] = m[i];
        }
    }
    return k + 1;
}

/* The merged sketch of dimension d, ranked; *out malloc'd (NULL and 0 when empty or no memory). */
static uint32_t merge_top(const void *slots, size_t stride, unsigned count, enum srv_acct_dim d,
                          struct merged **out)
{
    uint64_t total = 0, mins = 0;
    for (unsigned i = 0; i < count; i++) {
        total += slot_at(slots, stride, i)->top[d].count;
        mins += sketch_min(&slot_at(slots, stride, i)->top[d]);
    }
    struct merged *m = total ? malloc(total * sizeof(*m)) : NULL;
    *out = m;
    if (m == NULL)
        return 0;
    uint32_t n = 0;
    for (unsigned i = 0; i < count; i++) {
        const struct srv_acct_sketch *sk = &slot_at(slots, stride, i)->top[d];
        uint64_t min = sketch_min(sk);
        for (uint32_t j = 0; j < sk->count; j++)
            m[n++] = (struct merged){.key = sk->e[j].key,
                                     .c = sk->e[j].c,
                                     .weight = sk->e[j].weight,
                                     .error = sk->e[j].error,
                                     .mins = min};
    }
    n = group(m, n);
    for (uint32_t i = 0; i < n; i++) { /* the shards that lacked it: up to their minimum */
        m[i].weight += mins - m[i].mins;
        m[i].error += mins - m[i].mins;
    }
    qsort(m, n, sizeof(*m), by_weight);
    return n;
}

static uint32_t merge_named(const void *slots, size_t stride, unsigned count, struct merged **out)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < count; i++)
        total += slot_at(slots, stride, i)->named_count;
    struct merged *m = total ? malloc(total * sizeof(*m)) : NULL;
    *out = m;
    if (m == NULL)
        return 0;
    uint32_t n = 0;
    for (unsigned i = 0; i < count; i++) {
        const struct srv_acct_slot *s = slot_at(slots, stride, i);
        for (uint32_t j = 0; j < s->named_count; j++)
            m[n++] = (struct merged){.key = s->named[j].key,
                                     .c = s->named[j].c,
                                     .conns = s->named[j].conns,
                                     .connects = s->named[j].connects};
    }
    return group(m, n);
}

#define SUM(field)                                                                                 \
    ({                                                                                             \
        uint64_t s_ = 0;                                                                           \
        for (unsigned i_ = 0; i_ < count; i_++)                                                    \
            s_ += slot_at(slots, stride, i_)->field;                                               \
        s_;                                                                                        \
    })

static const char *const dim_names[SRV_ACCT_DIMS] = {"bytes", "packets"};

/* The four counters of one key as series prefix_bytes / prefix_packets, labels before dir. */
static void varz_counts(struct srv_text *o, const char *prefix, const char *labels,
                        const struct srv_acct_counts *c)
{
    srv_text_put(o, "%s_bytes{%s,dir=\"received\"} %llu\n", prefix, labels,
                 (unsigned long long)c->rx_bytes);
    srv_text_put(o, "%s_bytes{%s,dir=\"sent\"} %llu\n", prefix, labels,
                 (unsigned long long)c->tx_bytes);
    srv_text_put(o, "%s_packets{%s,dir=\"received\"} %llu\n", prefix, labels,
                 (unsigned long long)c->rx_pkts);
    srv_text_put(o, "%s_packets{%s,dir=\"sent\"} %llu\n", prefix, labels,
                 (unsigned long long)c->tx_pkts);
}

void srv_acct_format_varz(struct srv_text *o, const void *slots, size_t stride, unsigned count)
{
    srv_text_put(o, "# TYPE hderp_account_tracked_keys gauge\nhderp_account_tracked_keys %llu\n",
                 (unsigned long long)SUM(top[SRV_ACCT_BYTES].count));
    srv_text_put(o, "# TYPE hderp_account_evictions counter\nhderp_account_evictions %llu\n",
                 (unsigned long long)SUM(top[SRV_ACCT_BYTES].evictions));
    srv_text_put(o, "# TYPE hderp_account_named_full counter\nhderp_account_named_full %llu\n",
                 (unsigned long long)SUM(named_full));
    char key[DERP_PUBKEY_TEXT_SIZE], labels[160];
    struct merged *m;
    /* The top keys by bytes, then by packets (by="..."), each with its four counters. */
    srv_text_put(o, "# TYPE hderp_top_key_bytes gauge\n# TYPE hderp_top_key_packets gauge\n");
    for (unsigned d = 0; d < SRV_ACCT_DIMS; d++) {
        uint32_t n = merge_top(slots, stride, count, d, &m);
        for (uint32_t i = 0; i < n && i < SRV_ACCT_VARZ_TOP; i++) {
            derp_pubkey_format(&m[i].key, key);
            snprintf(labels, sizeof(labels), "by=\"%s\",rank=\"%u\",key=\"%s\"", dim_names[d],
                     i + 1, key);
            varz_counts(o, "hderp_top_key", labels, &m[i].c);
        }
        free(m);
    }
    uint32_t n = merge_named(slots, stride, count, &m);
    srv_text_put(o, "# TYPE hderp_account_bytes counter\n# TYPE hderp_account_packets counter\n"
                    "# TYPE hderp_account_connections gauge\n");
    for (uint32_t i = 0; i < n; i++) {
        derp_pubkey_format(&m[i].key, key);
        snprintf(labels, sizeof(labels), "key=\"%s\"", key);
        varz_counts(o, "hderp_account", labels, &m[i].c);
        srv_text_put(o, "hderp_account_connections{%s} %u\n", labels, m[i].conns);
    }
    free(m);
}

static void json_counts(struct srv_text *o, const struct merged *m)
{
    char key[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&m->key, key);
    srv_text_put(o,
                 "\"key\":\"%s\",\"bytes_received\":%llu,\"bytes_sent\":%llu,"
                 "\"packets_received\":%llu,\"packets_sent\":%llu",
                 key, (unsigned long long)m->c.rx_bytes, (unsigned long long)m->c.tx_bytes,
                 (unsigned long long)m->c.rx_pkts, (unsigned long long)m->c.tx_pkts);
}

void srv_acct_format_json(struct srv_text *o, const void *slots, size_t stride, unsigned count)
{
    srv_text_put(o, "{\"shards\":%u,\"sketch_entries_max\":%u,\"feeds\":%llu,\"tracked\":[", count,
                 SRV_ACCT_TOP_ENTRIES, (unsigned long long)SUM(feeds));
    for (unsigned i = 0; i < count; i++) /* per shard: never over sketch_entries_max */
        srv_text_put(o, "%s%u", i ? "," : "", slot_at(slots, stride, i)->top[SRV_ACCT_BYTES].count);
    srv_text_put(o, "]");
    struct merged *m;
    for (unsigned d = 0; d < SRV_ACCT_DIMS; d++) {
        uint32_t n = merge_top(slots, stride, count, d, &m);
        srv_text_put(o, ",\"top_%s\":[", dim_names[d]);
        for (uint32_t i = 0; i < n && i < SRV_ACCT_JSON_TOP; i++) {
            srv_text_put(o, "%s{\"%s\":%llu,\"error\":%llu,", i ? "," : "", dim_names[d],
                         (unsigned long long)m[i].weight, (unsigned long long)m[i].error);
            json_counts(o, &m[i]);
            srv_text_put(o, "}");
        }
        srv_text_put(o, "]");
        free(m);
    }
    uint32_t n = merge_named(slots, stride, count, &m);
    srv_text_put(o, ",\"named\":[");
    for (uint32_t i = 0; i < n; i++) {
        srv_text_put(o, "%s{", i ? "," : "");
        json_counts(o, &m[i]);
        srv_text_put(o, ",\"connections\":%u,\"connects\":%u}", m[i].conns, m[i].connects);
    }
    free(m);
    srv_text_put(o, "],\"named_full\":%llu}\n", (unsigned long long)SUM(named_full));
}
