/* server_hash.h - the keyed hash of the server's tables (server_hash.c). */
#ifndef SERVER_HASH_H
#define SERVER_HASH_H

#include <stddef.h>
#include <stdint.h>

#define SRV_HASH_KEY_LEN 16

/* The process's key: random (key NULL; sodium_init first), or the given one (tests). Main
 * thread, before the shards start. */
void srv_hash_init(const uint8_t *key);
/* SipHash-2-4 of data under the process key. Any thread. */
uint64_t srv_hash(const void *data, size_t len);

/* A node key's hash: its low bits pick the peer-table slot, its high 32 bits the owner shard,
 * so the two choices are independent. */
static inline uint32_t srv_key_slot(uint64_t h, uint32_t mask)
{
    return (uint32_t)h & mask;
}
static inline unsigned srv_key_shard(uint64_t h, unsigned shards)
{
    return (unsigned)((h >> 32) % shards);
}

#endif /* SERVER_HASH_H */
