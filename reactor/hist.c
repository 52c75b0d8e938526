/* hist.c - log-linear histograms: values below 2^SUB are exact, above that each power of two is
 * split into 2^SUB (16) linear buckets, so a bucket's error is at most 6.25%; 976 buckets, O(1)
 * record, mergeable. Plain data, owned by whoever embeds it: struct hd_shard_stats holds two
 * (tick_ns, cqes_per_tick), written only by the shard and read by others through hd_collect (or
 * after the runtime stopped). */
#include <string.h>

#include <hd/hd.h>

#define SUB       HD_HIST_SUB_BITS
#define SUB_COUNT (1u << SUB)

void hd_hist_init(struct hd_hist *h)
{
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

unsigned hd_hist_bucket_of(uint64_t v)
{
    if (v < SUB_COUNT)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* floor(log2 v) >= SUB */
    unsigned sub = (unsigned)(v >> (e - SUB)) & (SUB_COUNT - 1);
    return ((e - SUB + 1) << SUB) + sub;
}

uint64_t hd_hist_bucket_upper(unsigned b)
{
    if (b < SUB_COUNT)
        return b;
    unsigned e = (b >> SUB) + SUB - 1;
    uint64_t sub = b & (SUB_COUNT - 1);
    uint64_t lo = (UINT64_C(1) << e) | (sub << (e - SUB));
    return lo + ((UINT64_C(1) << (e - SUB)) - 1);
}

void hd_hist_record(struct hd_hist *h, uint64_t v)
{
    h->buckets[hd_hist_bucket_of(v)]++;
    h->count++;
    h->sum += v;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

void hd_hist_merge(struct hd_hist *into, const struct hd_hist *from)
{
    for (unsigned i = 0; i < HD_HIST_BUCKETS; i++)
        into->buckets[i] += from->buckets[i];
    into->count += from->count;
    into->sum += from->sum;
    if (from->min < into->min)
        into->min = from->min;
    if (from->max > into->max)
        into->max = from->max;
}

uint64_t hd_hist_quantile(const struct hd_hist *h, double q)
{
    if (h->count == 0)
        return 0;
    if (q <= 0)
        return h->min;
    /* rank = ceil(q * count), at least 1: the smallest value with that many at or below it */
    double want = q * (double)h->count;
    uint64_t rank = (uint64_t)want;
    if ((double)rank < want)
        rank++;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HD_HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t up = hd_hist_bucket_upper(i);
            return up > h->max ? h->max : (up < h->min ? h->min : up);
        }
    }
    return h->max;
}
