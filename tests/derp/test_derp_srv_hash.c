/* test_derp_srv_hash.c - the server's keyed table hash (apps/derp/server/relay/server_hash.c, issue
 * 16 item 3): node keys an attacker built to collide under the old unkeyed hash (the same bytes
 * 0..16: one owner shard, one peer-table slot) spread over slots and shards now, linear probing
 * over them stays short, and another process key gives other slots. Pure: no sockets. */
#include <criterion/criterion.h>
#include <sodium.h>
#include <string.h>

#include "relay/server_hash.h"
#include <hd/hd_siphash.h>

#define KEYS       800u  /* the mined set */
#define SLOTS      2048u /* the peer table grows at half load: 800 keys sit in 2048 slots */
#define SHARDS     4u
#define PROBES_MAX 24u /* linear probing at < 40 % load: expected ~1.3; 24 is far in the tail */

/* The hash before issue 16: bytes 8..16, multiplicative, no key; the shard from bytes 0..8. */
static uint32_t old_slot(const uint8_t *k, uint32_t mask)
{
    uint64_t h;
    memcpy(&h, k + 8, sizeof(h));
    return (uint32_t)(h * 0x9E3779B97F4A7C15ull >> 32) & mask;
}

/* Keys equal in bytes 0..16 and random after: all in one old slot and one old shard. */
static void colliding_keys(uint8_t keys[KEYS][32])
{
    for (unsigned i = 0; i < KEYS; i++) {
        memset(keys[i], 0x5a, 16);
        randombytes_buf(keys[i] + 16, 16);
    }
}

static uint8_t keys[KEYS][32];

Test(test_derp_srv_hash, old_colliding_keys_spread, .init = (void (*)(void))sodium_init)
{
    srv_hash_init(NULL);
    colliding_keys(keys);
    for (unsigned i = 1; i < KEYS; i++) /* the attack as it was */
        cr_assert_eq(old_slot(keys[i], SLOTS - 1), old_slot(keys[0], SLOTS - 1));
    static uint8_t used[SLOTS];
    memset(used, 0, sizeof(used));
    unsigned per_shard[SHARDS] = {0}, probes_max = 0, probes_sum = 0;
    for (unsigned i = 0; i < KEYS; i++) {
        uint64_t h = srv_hash(keys[i], 32);
        per_shard[srv_key_shard(h, SHARDS)]++;
        unsigned p = 0;
        for (uint32_t s = srv_key_slot(h, SLOTS - 1); used[s]; s = (s + 1) & (SLOTS - 1))
            p++;
        used[(srv_key_slot(h, SLOTS - 1) + p) & (SLOTS - 1)] = 1;
        probes_sum += p;
        if (p > probes_max)
            probes_max = p;
    }
    cr_assert_leq(probes_max, PROBES_MAX, "longest probe %u", probes_max);
    cr_assert_lt(probes_sum, 2 * KEYS, "probes in all %u", probes_sum);
    for (unsigned s = 0; s < SHARDS; s++) /* expected 200 each; a quarter of that is far out */
        cr_assert_gt(per_shard[s], KEYS / SHARDS / 4, "shard %u got %u keys", s, per_shard[s]);
}

/* The key is the secret: the same input under two keys lands on different slots (almost
 * always: at most a few of 800 may agree by chance, 1 in 2048 each). */
Test(test_derp_srv_hash, keyed, .init = (void (*)(void))sodium_init)
{
    colliding_keys(keys);
    static const uint8_t k1[SRV_HASH_KEY_LEN] = {1}, k2[SRV_HASH_KEY_LEN] = {2};
    static uint32_t a[KEYS];
    srv_hash_init(k1);
    for (unsigned i = 0; i < KEYS; i++)
        a[i] = srv_key_slot(srv_hash(keys[i], 32), SLOTS - 1);
    srv_hash_init(k2);
    unsigned same = 0;
    for (unsigned i = 0; i < KEYS; i++)
        same += a[i] == srv_key_slot(srv_hash(keys[i], 32), SLOTS - 1);
    cr_assert_lt(same, 10, "%u of %u keys kept their slot under another key", same, KEYS);
    srv_hash_init(k1); /* and it is a function of (key, input) */
    for (unsigned i = 0; i < KEYS; i++)
        cr_assert_eq(a[i], srv_key_slot(srv_hash(keys[i], 32), SLOTS - 1));
}

/* hd_siphash.h's rounds against libsodium's SipHash-2-4 (the paper's), every length 0..63:
 * the same code with c = 1, d = 3 is what the server's tables use. */
Test(test_derp_srv_hash, siphash_matches_libsodium, .init = (void (*)(void))sodium_init)
{
    uint8_t key[HD_SIPHASH_KEY_LEN], data[64];
    for (unsigned i = 0; i < sizeof(key); i++)
        key[i] = (uint8_t)(i * 7 + 1);
    for (unsigned i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 13 + 5);
    for (size_t len = 0; len <= sizeof(data); len++) {
        uint8_t out[crypto_shorthash_BYTES];
        crypto_shorthash(out, data, len, key);
        uint64_t want;
        memcpy(&want, out, sizeof(want));
        cr_assert_eq(hd_siphash24(key, data, len), want, "length %zu", len);
        cr_assert_neq(hd_siphash13(key, data, len), want, "1-3 is not 2-4 (length %zu)", len);
    }
}
