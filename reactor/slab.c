/* slab.c - fixed-size object pools. A pool belongs to one shard (its thread gets and puts);
 * it owns its chunks: HD_SLAB_CHUNK_SIZE-aligned (2 MiB) blocks whose header (magic + pool
 * pointer) points back at the pool, so hd_slab_of / hd_slab_owns are one mask. Objects are carved
 * lazily with a bump pointer; freed ones go on their chunk's intrusive free list (with the
 * chunk's in-use count), and gets take from the head of the pool's list of chunks that have
 * something to give. A pool grows chunk by chunk up to its object cap; a get at the cap returns
 * NULL and counts exhausted: there is no malloc fallback. Every HD_SLAB_TRIM_MS the shard frees
 * empty chunks beyond what the pool's peak over that interval needed (plus
 * HD_SLAB_SPARE_CHUNKS), so a pool shrinks after a burst (an idle shard with such chunks wakes
 * for it). Growth allocates (start-up, warm-up, a burst); steady state never does. A put checks
 * in O(1) that the pool owns the object: chunk magic and pool, and that its offset is a whole
 * carved slot (a multiply by the inverse of the object size's odd part, no division).
 * Counters: capacity, cap, in use, high water, exhausted, gets, puts, chunks, chunks freed.
 * Under ASan freed objects are poisoned (hd_poison.h) and, in debug and ASan builds, filled
 * with 0xdb. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/hd_fault.h>

#include "hd_impl.h"
#include "hd_poison.h"

#define HD_SLAB_MAGIC   0x68647362u /* "hdsb" */
#define HD_SLAB_OBJ_OFF 64u         /* objects start after the chunk header's cache line */

/* Each chunk keeps its own free list and count, so a chunk whose objects all came back can be
 * freed: after a burst the pool shrinks back (issue 16: RSS stayed at the burst's peak). The
 * pool keeps up to HD_SLAB_SPARE_CHUNKS empty chunks so a load that hovers at a chunk boundary
 * does not allocate and free one per cycle. */
struct hd_slab_chunk {
    uint32_t magic;
    uint32_t carved; /* objects carved from this chunk */
    uint32_t in_use; /* of them, handed out now */
    uint32_t listed; /* on the pool's avail list */
    struct hd_slab *slab;
    struct hd_slab_chunk *next, *prev; /* every chunk of the pool */
    struct hd_slab_chunk *avail_next;  /* in the pool's list of chunks with something to give */
    void *free_list;
};
_Static_assert(sizeof(struct hd_slab_chunk) <= HD_SLAB_OBJ_OFF, "header fits before objects");

struct hd_slab {
    char name[32];
    size_t obj_size;
    uint32_t per_chunk;
    /* obj_size = odd << size_shift, size_inv = odd's inverse mod 2^64: for an offset x from the
     * first object, rotr(x * size_inv, size_shift) is x / obj_size when obj_size divides x and
     * above UINT64_MAX / obj_size (far above any chunk's count) when not, also for an x that
     * wrapped below the first object: one multiply and one rotate a put, not a division. */
    uint32_t size_shift;
    uint64_t size_inv;
    uint32_t empty_chunks;  /* chunks with in_use 0 */
    uint64_t recent_peak;   /* most objects in use since the last hd_slab_trim */
    struct hd_shard *shard; /* NULL: a pool outside any shard (tools, tests) */
    struct hd_slab *next_in_shard;
    struct hd_slab_chunk *chunks; /* every chunk, newest first */
    struct hd_slab_chunk *avail;  /* chunks with a free object or room to carve, LIFO */
    struct hd_pool_stats st;
};

int hd_slab_create(struct hd_shard *s, const char *name, size_t obj_size, uint64_t cap_objects,
                   struct hd_slab **out)
{
    if (obj_size == 0 || cap_objects == 0)
        return -EINVAL;
    size_t size = (obj_size + 15u) & ~(size_t)15u;
    if (size < HD_SLAB_OBJ_MIN)
        size = HD_SLAB_OBJ_MIN;
    if (size > HD_SLAB_CHUNK_SIZE - HD_SLAB_OBJ_OFF)
        return -EINVAL;
    struct hd_slab *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    snprintf(p->name, sizeof(p->name), "%s", name ? name : "slab");
    p->obj_size = size;
    p->per_chunk = (uint32_t)((HD_SLAB_CHUNK_SIZE - HD_SLAB_OBJ_OFF) / size);
    p->size_shift = (uint32_t)__builtin_ctzll(size);
    uint64_t odd = size >> p->size_shift, inv = odd; /* odd * odd = 1 mod 8: 3 bits right */
    for (int i = 0; i < 5; i++)                      /* Newton: the correct bits double */
        inv *= 2 - odd * inv;
    HD_ASSERT(odd * inv == 1);
    p->size_inv = inv;
    p->shard = s;
    p->st.cap = cap_objects;
    if (s) {
        p->next_in_shard = s->slabs;
        s->slabs = p;
    }
    *out = p;
    return 0;
}

void hd_slab_destroy(struct hd_slab *p)
{
    if (p == NULL)
        return;
    if (p->shard) {
        struct hd_slab **pp = &p->shard->slabs;
        while (*pp && *pp != p)
            pp = &(*pp)->next_in_shard;
        if (*pp)
            *pp = p->next_in_shard;
    }
    struct hd_slab_chunk *c = p->chunks;
    while (c) {
        struct hd_slab_chunk *next = c->next;
        HD_UNPOISON(c, HD_SLAB_CHUNK_SIZE);
        free(c);
        c = next;
    }
    free(p);
}

const struct hd_slab *hd_slab_next_in_shard(const struct hd_slab *p)
{
    return p->next_in_shard;
}

void hd_slabs_destroy_all(struct hd_shard *s)
{
    while (s->slabs)
        hd_slab_destroy(s->slabs);
}

void hd_slabs_trim(struct hd_shard *s)
{
    for (struct hd_slab *p = s->slabs; p; p = p->next_in_shard)
        hd_slab_trim(p);
}

bool hd_slabs_trim_wanted(const struct hd_shard *s)
{
    for (const struct hd_slab *p = s->slabs; p; p = p->next_in_shard)
        if (hd_slab_trim_wanted(p))
            return true;
    return false;
}

static struct hd_slab_chunk *slab_grow(struct hd_slab *p)
{
    struct hd_slab_chunk *c = aligned_alloc(HD_SLAB_CHUNK_SIZE, HD_SLAB_CHUNK_SIZE);
    if (c == NULL)
        return NULL;
    *c = (struct hd_slab_chunk){.magic = HD_SLAB_MAGIC, .slab = p, .next = p->chunks};
    if (p->chunks)
        p->chunks->prev = c;
    p->chunks = c;
    c->avail_next = p->avail;
    c->listed = 1;
    p->avail = c;
    p->empty_chunks++;
    p->st.chunks++;
    HD_POISON((char *)c + HD_SLAB_OBJ_OFF, HD_SLAB_CHUNK_SIZE - HD_SLAB_OBJ_OFF);
    return c;
}

static bool chunk_can_give(const struct hd_slab *p, const struct hd_slab_chunk *c)
{
    return c->free_list != NULL || (c->carved < p->per_chunk && p->st.capacity < p->st.cap);
}

/* Takes c off the avail list (it is the head: gets only look at the head). */
static void avail_pop(struct hd_slab *p, struct hd_slab_chunk *c)
{
    HD_ASSERT(p->avail == c && c->listed);
    p->avail = c->avail_next;
    c->avail_next = NULL;
    c->listed = 0;
}

void *hd_slab_get(struct hd_slab *p)
{
    if (hd_fault(HD_FAULT_ALLOC)) { /* as if the pool were at its cap: every caller copes */
        p->st.exhausted++;
        return NULL;
    }
    struct hd_slab_chunk *c;
    /* Heads that have nothing left to give (full, or carving stopped at the cap) leave the
     * list; a put brings them back. Bounded by the number of chunks. */
    while ((c = p->avail) != NULL && !chunk_can_give(p, c))
        avail_pop(p, c);
    if (c == NULL) {
        if (p->st.capacity >= p->st.cap || (c = slab_grow(p)) == NULL) {
            p->st.exhausted++;
            return NULL;
        }
    }
    void *obj = c->free_list;
    if (obj) {
        HD_UNPOISON(obj, p->obj_size);
        memcpy(&c->free_list, obj, sizeof(void *));
    } else {
        obj = (char *)c + HD_SLAB_OBJ_OFF + (size_t)c->carved * p->obj_size;
        c->carved++;
        p->st.capacity++;
        HD_UNPOISON(obj, p->obj_size);
    }
    if (c->in_use++ == 0) {
        HD_ASSERT(p->empty_chunks > 0);
        p->empty_chunks--;
    }
    if (!chunk_can_give(p, c))
        avail_pop(p, c);
    p->st.gets++;
    p->st.in_use++;
    if (p->st.in_use > p->st.high_water)
        p->st.high_water = p->st.in_use;
    if (p->st.in_use > p->recent_peak)
        p->recent_peak = p->st.in_use;
    return obj;
}

/* c is empty and beyond the spares: back to the allocator (which returns its pages). */
static void chunk_release(struct hd_slab *p, struct hd_slab_chunk *c)
{
    HD_ASSERT(c->in_use == 0 && p->empty_chunks > 0);
    if (c->listed) { /* O(listed chunks): rare, at a burst's end */
        struct hd_slab_chunk **pp = &p->avail;
        while (*pp != c) {
            HD_ASSERT(*pp != NULL);
            pp = &(*pp)->avail_next;
        }
        *pp = c->avail_next;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        p->chunks = c->next;
    if (c->next)
        c->next->prev = c->prev;
    p->st.capacity -= c->carved;
    p->st.chunks--;
    p->st.chunks_freed++;
    p->empty_chunks--;
    c->magic = 0;
    HD_UNPOISON(c, HD_SLAB_CHUNK_SIZE);
    free(c);
}

static inline struct hd_slab_chunk *chunk_of(const void *obj)
{
    return (struct hd_slab_chunk *)((uintptr_t)obj & ~(uintptr_t)(HD_SLAB_CHUNK_SIZE - 1));
}

struct hd_slab *hd_slab_of(const void *obj)
{
    struct hd_slab_chunk *c = chunk_of(obj);
    HD_ASSERT(c->magic == HD_SLAB_MAGIC);
    return c->slab;
}

/* obj is a carved object of c (a chunk of p): O(1), a multiply instead of a division. */
static inline bool chunk_owns(const struct hd_slab *p, const struct hd_slab_chunk *c,
                              const void *obj)
{
    if (c->magic != HD_SLAB_MAGIC || c->slab != p)
        return false;
    uint64_t x = (uint64_t)((const char *)obj - (const char *)c) - HD_SLAB_OBJ_OFF;
    uint64_t y = x * p->size_inv;
    unsigned r = p->size_shift; /* < 64: obj_size > 0 */
    uint64_t index = r ? y >> r | y << (64 - r) : y;
    return index < c->carved;
}

bool hd_slab_owns(const struct hd_slab *p, const void *obj)
{
    return chunk_owns(p, chunk_of(obj), obj);
}

void hd_slab_put(struct hd_slab *p, void *obj)
{
    struct hd_slab_chunk *c = chunk_of(obj);
    HD_ASSERT(chunk_owns(p, c, obj));
    HD_ASSERT(p->st.in_use > 0);
#ifdef HD_DEBUG
    HD_ASSERT(p->shard == NULL || p->shard == hd_shard_current() || hd_shard_current() == NULL);
#endif
#ifdef HD_POISON_FILL
    memset(obj, 0xdb, p->obj_size);
#endif
    HD_ASSERT(c->in_use > 0);
    memcpy(obj, &c->free_list, sizeof(void *));
    c->free_list = obj;
    HD_POISON(obj, p->obj_size);
    if (!c->listed) { /* it had nothing to give: listed again, at the head */
        c->avail_next = p->avail;
        c->listed = 1;
        p->avail = c;
    }
    p->st.puts++;
    p->st.in_use--;
    if (--c->in_use == 0)
        p->empty_chunks++; /* freed by a later trim if the pool stays small (hd_slab_trim) */
}

/* Chunks the pool needs: its peak since the last trim, in whole chunks, and the spares. */
static uint64_t chunks_needed(const struct hd_slab *p)
{
    return (p->recent_peak + p->per_chunk - 1) / p->per_chunk + HD_SLAB_SPARE_CHUNKS;
}

/* Whether trims may free something once the load stays as it is now (the shard then wakes for
 * them; the peak decides what a trim frees). */
bool hd_slab_trim_wanted(const struct hd_slab *p)
{
    uint64_t now_needed = (p->st.in_use + p->per_chunk - 1) / p->per_chunk + HD_SLAB_SPARE_CHUNKS;
    return p->empty_chunks > 0 && p->st.chunks > now_needed;
}

/* Not from put: a load that frees and refills chunks within a trim interval (the steady state)
 * must never allocate; only a pool whose peak over a whole interval stayed below its chunks
 * gives the empty ones back. */
void hd_slab_trim(struct hd_slab *p)
{
    uint64_t need = chunks_needed(p);
    for (struct hd_slab_chunk *c = p->chunks, *next; c && p->st.chunks > need; c = next) {
        next = c->next;
        if (c->in_use == 0)
            chunk_release(p, c);
    }
    p->recent_peak = p->st.in_use;
}

void hd_slab_stats(const struct hd_slab *p, struct hd_pool_stats *out)
{
    *out = p->st;
}

const struct hd_pool_stats *hd_slab_counters(const struct hd_slab *p)
{
    return &p->st;
}
