/* hd_handle.h - generation-checked handles (handle.c): a way to name an object a shard owns
 * (a connection, a session) that any shard can hold and that goes stale, safely, when the
 * object goes; and deferred tasks on such a handle. Included by <hd/hd.h>. Owner shard only,
 * except hd_handle_shard and hd_handle_eq (pure). */
#ifndef HD_HANDLE_H
#define HD_HANDLE_H

#include <stdbool.h>
#include <stdint.h>

struct hd_shard;

/* A generation-checked handle to an object a shard owns (a connection, a session): shard, slot
 * and generation in 64 bits, so it can travel in a bus message's u64 and be held anywhere.
 * Once the object closes its handle, every copy of it is stale: lookups return NULL, on the
 * owner shard and forever (the generation moved on). {0} is no handle. */
struct hd_handle {
    uint64_t v;
};
static inline unsigned hd_handle_shard(struct hd_handle h)
{
    return (unsigned)(h.v >> 56);
}
static inline bool hd_handle_eq(struct hd_handle a, struct hd_handle b)
{
    return a.v == b.v;
}
/* Register obj (non-NULL) on shard s (its thread). Returns 0 (*out: the handle), -ENOSPC
 * (HD_HANDLES_MAX open on this shard), -ENOMEM (growing the table). */
int hd_handle_open(struct hd_shard *s, void *obj, struct hd_handle *out);
/* The object h names, or NULL: stale (closed), {0}, or another shard's handle. On s. */
void *hd_handle_get(struct hd_shard *s, struct hd_handle h);
/* Make h and every copy of it stale (the object is going away). On s. Returns 0 or -ENOENT
 * (already stale or not this shard's). */
int hd_handle_close(struct hd_shard *s, struct hd_handle h);
/* Handles open on s now (leak checks). */
unsigned hd_shard_handles_open(const struct hd_shard *s);
typedef void hd_handle_task_fn(struct hd_shard *s, void *obj);
/* Like hd_defer, on a handle instead of a bare pointer: when the task runs, fn(s, obj) is called
 * only if h is still live; a task whose object closed meanwhile is dropped and counted
 * (hd_shard_stats.tasks_stale). Returns 0, -EAGAIN (task ring full), -EINVAL (h is {0} or
 * another shard's: send it a message instead). */
int hd_defer_handle(struct hd_shard *s, hd_handle_task_fn *fn, struct hd_handle h);

#endif /* HD_HANDLE_H */
