/* hd_fault.h - fault injection for tests: the HD_FAULTS environment variable, read once when the
 * first runtime is created, e.g. HD_FAULTS="seed=7,sqe=0.01,short_send=0.05,reset=0.001,
 * alloc=0.001" (each rate a probability per chance in [0, 1]). Off (unset or empty): every hook
 * is one relaxed load and a predicted-not-taken branch. Faults are armed once every shard ran
 * its init and fall only on shard threads; each shard draws from its own generator seeded from
 * the seed and its id, so a run's faults are reproducible per shard for the same event order. */
#ifndef HD_FAULT_H
#define HD_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <hd/hd_base.h>

enum hd_fault_kind {
    HD_FAULT_SQE,        /* an op's submission fails: its CQE carries -EAGAIN, -ENOMEM or -EBUSY */
    HD_FAULT_SHORT_SEND, /* a sendmsg is cut short: the kernel's partial-write path */
    HD_FAULT_RESET,      /* a receive delivers part of its bytes, then ECONNRESET */
    HD_FAULT_ALLOC,      /* a pool get (hd_slab_get, so every frame pool) returns NULL */
    HD_FAULT_KINDS_COUNT
};

extern atomic_bool hd_faults_armed;

/* Slow path of hd_fault: draws from the calling shard's generator. */
bool hd_fault_roll(enum hd_fault_kind kind);

/* Whether to inject a fault of this kind here (counted when it says yes). */
static inline bool hd_fault(enum hd_fault_kind kind)
{
    return hd_unlikely(atomic_load_explicit(&hd_faults_armed, memory_order_relaxed)) &&
           hd_fault_roll(kind);
}

/* A uniform draw in [0, bound) from the calling shard's generator (bound > 0), for the size of
 * a fault (where a send or a receive is cut). */
uint32_t hd_fault_below(uint32_t bound);

/* Parse a spec ("key=value,..."; NULL or "" = off) into the process's settings, disarmed;
 * -EINVAL (and off) on an unknown key or a rate outside [0, 1]. Called by hd_runtime_create with
 * getenv("HD_FAULTS") once per process; tests of the mechanism itself may call it again while
 * no other shard draws. */
int hd_faults_configure(const char *spec);
/* Arm (true) or disarm: the runtime arms after start-up when a spec set any rate. */
void hd_faults_arm(bool on);
/* Faults injected so far, per kind, over the whole process. */
uint64_t hd_faults_count(enum hd_fault_kind kind);
/* The kind's name in HD_FAULTS ("sqe", "short_send", "reset", "alloc"). */
const char *hd_fault_name(enum hd_fault_kind kind);

#endif /* HD_FAULT_H */
