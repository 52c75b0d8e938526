/* hd_rand.h - a pseudo-random generator per shard for choices that need no secrecy but must
 * not line up across connections or shards: timer jitter, sampling, back-off. xoshiro256**
 * (Blackman and Vigna, "Scrambled linear pseudorandom number generators", 2018), seeded once
 * per shard from getrandom() when the runtime creates the shard. Each shard draws from its own
 * state with no lock and no atomic, where libc's rand() is one generator for the whole process,
 * behind a lock every shard contends for, and unseeded (the same sequence in every run).
 * Not for keys, nonces or anything an attacker must not predict: those come from libsodium or
 * BoringSSL. Owner shard only (like every hd_shard function that says nothing else). */
#ifndef HD_RAND_H
#define HD_RAND_H

#include <stdint.h>

struct hd_shard;

/* 64 uniformly distributed bits from shard s's generator. */
uint64_t hd_rand_u64(struct hd_shard *s);

/* A uniformly distributed integer in [0, n), without the bias of hd_rand_u64() % n (Lemire,
 * "Fast random integer generation in an interval", 2019: a 64x64->128 multiply, rejecting the
 * few low halves that would favour some results). n must be > 0 (asserted: a caller's bug). */
uint64_t hd_rand_below(struct hd_shard *s, uint64_t n);

#endif /* HD_RAND_H */
