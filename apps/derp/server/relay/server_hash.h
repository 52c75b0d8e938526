/* server_hash.h - the keyed hash of the server's tables (server_hash.c). */
#ifndef SERVER_HASH_H
#define SERVER_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SRV_HASH_KEY_LEN 16

/* The process's key: random (key NULL; sodium_init first), or the given one (tests). Main
 * thread, before the shards start. */
void srv_hash_init(const uint8_t *key);
/* SipHash-1-3 of data under the process key. Any thread. */
uint64_t srv_hash(const void *data, size_t len);

/* A node key's hash: SipHash of its first SRV_HASH_NODE_KEY_BYTES bytes (a Curve25519 public
 * key's bytes are uniform; nobody can make two keys share 16 of them, 2^64 work for a pair, so
 * the rest adds nothing but instructions on the per-packet path). Its low bits pick the
 * peer-table slot, its high 32 bits the owner shard, so the two choices are independent. */
#define SRV_HASH_NODE_KEY_BYTES 16
static inline uint64_t srv_hash_node_key(const uint8_t *key)
{
    return srv_hash(key, SRV_HASH_NODE_KEY_BYTES);
}
/* One node key's hash, remembered: a sender's last destination (struct srv_client.dst_hash). A
 * sender mostly sends to one peer, so its packets' destinations hash nothing; the hash goes to
 * the routing call as an argument (srv_route) and on with the packet. */
struct srv_hash_memo {
    bool valid;
    uint8_t key[SRV_HASH_NODE_KEY_BYTES];
    uint64_t h;
};
static inline uint64_t srv_hash_memo_get(struct srv_hash_memo *m, const uint8_t *key)
{
    if (m->valid && memcmp(m->key, key, SRV_HASH_NODE_KEY_BYTES) == 0)
        return m->h;
    m->h = srv_hash_node_key(key);
    memcpy(m->key, key, SRV_HASH_NODE_KEY_BYTES);
    m->valid = true;
    return m->h;
}
static inline uint32_t srv_key_slot(uint64_t h, uint32_t mask)
{
    return (uint32_t)h & mask;
}
static inline unsigned srv_key_shard(uint64_t h, unsigned shards)
{
    return (unsigned)((h >> 32) % shards);
}

#endif /* SERVER_HASH_H */
