/* server_hash.c - the keyed hash of the server's tables: SipHash-1-3 (hd_siphash.h, inline;
 * libsodium's SipHash-2-4 cost ~260 instructions per node key, two keys a relayed packet,
 * perf/RESULTS.md) under a random key drawn once per process, so a client can neither choose
 * node keys that share a peer-table slot or an owner shard nor source addresses that share a
 * pre-login slot (an unkeyed hash of the key's bytes could be mined: issue 16, 800 colliding
 * keys in 33 s). The main thread sets the key in global_init, before any shard runs; it is
 * read-only afterwards. */
#include <sodium.h>
#include <string.h>

#include "relay/server_hash.h"
#include <hd/hd_siphash.h>

_Static_assert(HD_SIPHASH_KEY_LEN == SRV_HASH_KEY_LEN, "SipHash takes a 16-byte key");

static uint8_t hash_key[SRV_HASH_KEY_LEN];

void srv_hash_init(const uint8_t *key)
{
    if (key)
        memcpy(hash_key, key, sizeof(hash_key));
    else
        randombytes_buf(hash_key, sizeof(hash_key));
}

uint64_t srv_hash(const void *data, size_t len)
{
    return hd_siphash13(hash_key, data, len);
}
