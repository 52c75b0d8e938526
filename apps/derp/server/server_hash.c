/* server_hash.c - the keyed hash of the server's tables: SipHash-2-4 (libsodium's
 * crypto_shorthash) under a random key drawn once per process, so a client can neither choose
 * node keys that share a peer-table slot or an owner shard nor source addresses that share a
 * pre-login slot (an unkeyed hash of the key's bytes could be mined: issue 16, 800 colliding
 * keys in 33 s). The main thread sets the key in global_init, before any shard runs; it is
 * read-only afterwards. */
#include <sodium.h>
#include <string.h>

#include "server_hash.h"

_Static_assert(crypto_shorthash_BYTES == sizeof(uint64_t), "SipHash-2-4 gives 64 bits");
_Static_assert(crypto_shorthash_KEYBYTES == SRV_HASH_KEY_LEN, "SipHash-2-4 takes a 16-byte key");

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
    uint8_t out[crypto_shorthash_BYTES];
    crypto_shorthash(out, data, len, hash_key);
    uint64_t h;
    memcpy(&h, out, sizeof(h));
    return h;
}
