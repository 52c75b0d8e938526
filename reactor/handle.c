/* handle.c - generation-checked handles: a per-shard table of slots (object, generation) that
 * grows in chunks of HD_HANDLE_CHUNK (4,096) slots up to HD_HANDLES_MAX and never moves or
 * shrinks while the shard lives, so a stale handle is always safe to look up (its slot's
 * generation moved on). A handle is shard (8 bits), slot (24) and generation (32) in one u64; it
 * crosses the bus in a message's u64. hd_handle_close bumps the slot's generation (never to 0: a
 * zero handle is "none") and puts the slot on a LIFO free list. Deferred tasks on a handle
 * (hd_defer_handle) look the object up when they run; a stale one is dropped and counted
 * (tasks_stale, task.c). net/ opens one per connection (net_conn_handle). Owner shard only
 * (lookups of another shard's handle return NULL). */
#include <errno.h>
#include <stdlib.h>

#include "hd_impl.h"

#define H_SHARD_SHIFT 56
#define H_SLOT_SHIFT  32
#define H_SLOT_MASK   (HD_HANDLES_MAX - 1u)
#define H_CHUNKS_MAX  (HD_HANDLES_MAX / HD_HANDLE_CHUNK)
_Static_assert(HD_HANDLES_MAX <= (1u << 24), "the slot takes 24 bits");
_Static_assert(HD_SHARDS_MAX <= 256, "the shard takes 8 bits");
_Static_assert(HD_HANDLES_MAX % HD_HANDLE_CHUNK == 0, "whole chunks");

struct hd_handle_slot {
    void *obj;          /* NULL: free */
    uint32_t gen;       /* the live handle's generation, or the next one's */
    uint32_t next_free; /* slot + 1 of the next free slot, 0: none */
};

static inline struct hd_handle_slot *slot_at(struct hd_shard *s, uint32_t i)
{
    return &s->handle_chunks[i / HD_HANDLE_CHUNK][i % HD_HANDLE_CHUNK];
}

void hd_handles_fini(struct hd_shard *s)
{
    for (uint32_t c = 0; s->handle_chunks && c < s->handle_chunks_count; c++)
        free(s->handle_chunks[c]);
    free(s->handle_chunks);
    s->handle_chunks = NULL;
    s->handle_chunks_count = 0;
}

static int handles_grow(struct hd_shard *s)
{
    if (s->handle_chunks_count == H_CHUNKS_MAX)
        return -ENOSPC;
    if (s->handle_chunks == NULL) {
        s->handle_chunks = calloc(H_CHUNKS_MAX, sizeof(*s->handle_chunks));
        if (s->handle_chunks == NULL)
            return -ENOMEM;
    }
    struct hd_handle_slot *c = calloc(HD_HANDLE_CHUNK, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    uint32_t base = s->handle_chunks_count * HD_HANDLE_CHUNK;
    s->handle_chunks[s->handle_chunks_count++] = c;
    /* Chain the new slots in order in front of the (empty) free list. */
    for (uint32_t i = 0; i < HD_HANDLE_CHUNK; i++) {
        c[i].gen = 1;
        c[i].next_free = i + 1 < HD_HANDLE_CHUNK ? base + i + 2 : s->handle_free;
    }
    s->handle_free = base + 1;
    return 0;
}

int hd_handle_open(struct hd_shard *s, void *obj, struct hd_handle *out)
{
    HD_ASSERT(obj != NULL);
    HD_ASSERT(hd_shard_current() == s);
    if (s->handle_free == 0) {
        int rc = handles_grow(s);
        if (rc < 0)
            return rc;
    }
    uint32_t i = s->handle_free - 1;
    struct hd_handle_slot *sl = slot_at(s, i);
    HD_ASSERT(sl->obj == NULL);
    s->handle_free = sl->next_free;
    sl->obj = obj;
    sl->next_free = 0;
    s->handles_open++;
    out->v = ((uint64_t)s->id << H_SHARD_SHIFT) | ((uint64_t)i << H_SLOT_SHIFT) | sl->gen;
    return 0;
}

/* The slot h names on s if it is live with h's generation, else NULL. */
static struct hd_handle_slot *slot_live(struct hd_shard *s, struct hd_handle h)
{
    uint32_t i = (uint32_t)(h.v >> H_SLOT_SHIFT) & H_SLOT_MASK;
    if (h.v == 0 || hd_handle_shard(h) != s->id || i / HD_HANDLE_CHUNK >= s->handle_chunks_count)
        return NULL;
    struct hd_handle_slot *sl = slot_at(s, i);
    return sl->obj != NULL && sl->gen == (uint32_t)h.v ? sl : NULL;
}

void *hd_handle_get(struct hd_shard *s, struct hd_handle h)
{
    struct hd_handle_slot *sl = slot_live(s, h);
    return sl ? sl->obj : NULL;
}

int hd_handle_close(struct hd_shard *s, struct hd_handle h)
{
    struct hd_handle_slot *sl = slot_live(s, h);
    if (sl == NULL)
        return -ENOENT;
    uint32_t i = (uint32_t)(h.v >> H_SLOT_SHIFT) & H_SLOT_MASK;
    sl->obj = NULL;
    sl->gen = sl->gen + 1 == 0 ? 1 : sl->gen + 1; /* never 0: a zero handle is "none" */
    sl->next_free = s->handle_free;
    s->handle_free = i + 1;
    HD_ASSERT(s->handles_open > 0);
    s->handles_open--;
    return 0;
}

unsigned hd_shard_handles_open(const struct hd_shard *s)
{
    return s->handles_open;
}

int hd_defer_handle(struct hd_shard *s, hd_handle_task_fn *fn, struct hd_handle h)
{
    HD_ASSERT(fn != NULL);
    if (hd_handle_shard(h) != s->id || h.v == 0)
        return -EINVAL;
    return hd_defer_task(s, (struct hd_task){.hfn = fn, .handle = h.v, .by_handle = true});
}
