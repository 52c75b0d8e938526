/* slab.c - fixed-size object pools. A pool belongs to one shard (its thread gets and puts);
 * it owns its chunks: HD_SLAB_CHUNK_SIZE-aligned blocks whose header points back at the pool, so
 * owner checks are one mask. Objects are carved lazily; freed ones go on an intrusive free list.
 * Growth allocates (start-up and warm-up); steady state never does. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/hd_fault.h>

#include "hd_impl.h"
#include "hd_poison.h"

#define HD_SLAB_MAGIC   0x68647362u /* "hdsb" */
#define HD_SLAB_OBJ_OFF 64u         /* objects start after the chunk header's cache line */

struct hd_slab_chunk {
    uint32_t magic;
    uint32_t carved; /* objects carved from this chunk */
    struct hd_slab *slab;
    struct hd_slab_chunk *next;
};
_Static_assert(sizeof(struct hd_slab_chunk) <= HD_SLAB_OBJ_OFF, "header fits before objects");

struct hd_slab {
    char name[32];
    size_t obj_size;
    uint32_t per_chunk;
    struct hd_shard *shard; /* NULL: a pool outside any shard (tools, tests) */
    struct hd_slab *next_in_shard;
    void *free_list;
    struct hd_slab_chunk *chunks; /* newest first: the one being carved */
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

void hd_slabs_destroy_all(struct hd_shard *s)
{
    while (s->slabs)
        hd_slab_destroy(s->slabs);
}

static struct hd_slab_chunk *slab_grow(struct hd_slab *p)
{
    struct hd_slab_chunk *c = aligned_alloc(HD_SLAB_CHUNK_SIZE, HD_SLAB_CHUNK_SIZE);
    if (c == NULL)
        return NULL;
    *c = (struct hd_slab_chunk){.magic = HD_SLAB_MAGIC, .slab = p, .next = p->chunks};
    p->chunks = c;
    p->st.chunks++;
    HD_POISON((char *)c + HD_SLAB_OBJ_OFF, HD_SLAB_CHUNK_SIZE - HD_SLAB_OBJ_OFF);
    return c;
}

void *hd_slab_get(struct hd_slab *p)
{
    if (hd_fault(HD_FAULT_ALLOC)) { /* as if the pool were at its cap: every caller copes */
        p->st.exhausted++;
        return NULL;
    }
    void *obj = p->free_list;
    if (obj) {
        HD_UNPOISON(obj, p->obj_size);
        memcpy(&p->free_list, obj, sizeof(void *));
    } else {
        if (p->st.capacity >= p->st.cap) {
            p->st.exhausted++;
            return NULL;
        }
        struct hd_slab_chunk *c = p->chunks;
        if (c == NULL || c->carved == p->per_chunk) {
            c = slab_grow(p);
            if (c == NULL) {
                p->st.exhausted++;
                return NULL;
            }
        }
        obj = (char *)c + HD_SLAB_OBJ_OFF + (size_t)c->carved * p->obj_size;
        c->carved++;
        p->st.capacity++;
        HD_UNPOISON(obj, p->obj_size);
    }
    p->st.gets++;
    p->st.in_use++;
    if (p->st.in_use > p->st.high_water)
        p->st.high_water = p->st.in_use;
    return obj;
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

bool hd_slab_owns(const struct hd_slab *p, const void *obj)
{
    const struct hd_slab_chunk *c = chunk_of(obj);
    if (c->magic != HD_SLAB_MAGIC || c->slab != p)
        return false;
    size_t off = (size_t)((const char *)obj - (const char *)c);
    return off >= HD_SLAB_OBJ_OFF && (off - HD_SLAB_OBJ_OFF) % p->obj_size == 0 &&
           (off - HD_SLAB_OBJ_OFF) / p->obj_size < c->carved;
}

void hd_slab_put(struct hd_slab *p, void *obj)
{
    HD_ASSERT(hd_slab_owns(p, obj));
    HD_ASSERT(p->st.in_use > 0);
#ifdef HD_DEBUG
    HD_ASSERT(p->shard == NULL || p->shard == hd_shard_current() || hd_shard_current() == NULL);
#endif
#ifdef HD_POISON_FILL
    memset(obj, 0xdb, p->obj_size);
#endif
    memcpy(obj, &p->free_list, sizeof(void *));
    p->free_list = obj;
    HD_POISON(obj, p->obj_size);
    p->st.puts++;
    p->st.in_use--;
}

void hd_slab_stats(const struct hd_slab *p, struct hd_pool_stats *out)
{
    *out = p->st;
}
