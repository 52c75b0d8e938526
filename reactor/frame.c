/* frame.c - refcounted frame buffers in a few size classes, one slab per class per shard
 * (default 2 KiB x 65,536 and 64 KiB x 1,024; an app with larger messages gives its own classes
 * in hd_runtime_config.frame_classes). A frame is a 32-byte header before the data, born with one
 * reference; hd_frame_ref/unref are atomics because references cross shards. A frame's last
 * reference may die on any shard: the owner frees it at once, any other shard keeps a per-owner
 * list and hands the whole list back in one lazy bus message per tick (kept for the next tick
 * if the bus is full: never lost). Just before a frame whose app_u64 is set goes back to its
 * pool, the owner runs the runtime's frame_release hook (apps account who holds frames);
 * hd_frame_class_of and hd_frame_class_counters (the class's live counters, found once and read
 * before each get) tell a policy how many frames a class can still hand out. */
#include <errno.h>
#include <stdlib.h>

#include "hd_impl.h"

/* Without hd_runtime_config.frame_classes: an app whose messages are larger gives its own. */
static const struct hd_frame_class default_classes[] = {
    {.size = 2048, .cap_count = 65536}, /* MTU-sized packets: 128 MiB at most per shard */
    {.size = 65536, .cap_count = 1024}, /* 64 KiB messages (NET_RX_TAIL_MAX_DEFAULT): 64 MiB */
};

int hd_frames_init(struct hd_shard *s)
{
    const struct hd_runtime_config *cfg = &s->rt->cfg;
    const struct hd_frame_class *cls = cfg->frame_classes ? cfg->frame_classes : default_classes;
    unsigned n = cfg->frame_classes ? cfg->frame_classes_count : HD_ARRAY_SIZE(default_classes);
    if (n == 0 || n > HD_FRAME_CLASSES_MAX)
        return -EINVAL;
    for (unsigned i = 0; i < n; i++) {
        if (i > 0 && cls[i].size <= cls[i - 1].size)
            return -EINVAL; /* classes ascend, so the first that fits is the smallest */
        int rc = hd_slab_create(s, "frames", sizeof(struct hd_frame) + cls[i].size,
                                cls[i].cap_count, &s->frame_pools[i].slab);
        if (rc < 0)
            return rc;
        s->frame_pools[i].size = cls[i].size;
    }
    s->frame_classes_count = n;
    s->frames_back = calloc(s->count, sizeof(*s->frames_back));
    return s->frames_back ? 0 : -ENOMEM;
}

void hd_frames_fini(struct hd_shard *s)
{
    /* Pools are freed with the shard's slabs; lists of other shards' frames die with them. */
    free(s->frames_back);
    s->frames_back = NULL;
}

unsigned hd_frame_classes_count(const struct hd_shard *s)
{
    return s->frame_classes_count;
}

uint32_t hd_frame_class_size(const struct hd_shard *s, unsigned cls)
{
    HD_ASSERT(cls < s->frame_classes_count);
    return s->frame_pools[cls].size;
}

struct hd_frame *hd_frame_get(struct hd_shard *s, size_t size)
{
    for (unsigned i = 0; i < s->frame_classes_count; i++) {
        struct hd_frame_pool *fp = &s->frame_pools[i];
        if (size > fp->size)
            continue;
        struct hd_frame *f = hd_slab_get(fp->slab);
        if (f == NULL)
            return NULL;
        f->next = NULL;
        f->len = 0;
        f->size = fp->size;
        atomic_init(&f->refs, 1);
        f->owner = (uint16_t)s->id;
        f->cls = (uint8_t)i;
        f->app_flags = 0;
        f->app_u64 = 0;
        return f;
    }
    return NULL;
}

static void frame_free_local(struct hd_shard *s, struct hd_frame *f)
{
    if (f->app_u64 && s->rt->cfg.frame_release)
        s->rt->cfg.frame_release(s, f);
    hd_slab_put(s->frame_pools[f->cls].slab, f);
}

void hd_frame_unref(struct hd_shard *s, struct hd_frame *f)
{
    uint32_t before = atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel);
    HD_ASSERT(before > 0);
    if (before != 1)
        return;
    if (f->owner == s->id) {
        frame_free_local(s, f);
        return;
    }
    f->next = s->frames_back[f->owner];
    s->frames_back[f->owner] = f;
    s->frames_back_dirty |= UINT64_C(1) << f->owner;
    s->stats.frames_returned++;
}

/* Bus handler on the owner: a list of its frames that died elsewhere. */
static void frames_return_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    struct hd_frame *f = m->ptr;
    while (f) {
        struct hd_frame *next = f->next;
        HD_ASSERT(f->owner == dst->id);
        frame_free_local(dst, f);
        f = next;
    }
}

void hd_frames_flush_back(struct hd_shard *s)
{
    uint64_t dirty = s->frames_back_dirty;
    while (dirty) {
        unsigned o = (unsigned)__builtin_ctzll(dirty);
        dirty &= dirty - 1;
        struct hd_msg m = {.fn = frames_return_msg, .ptr = s->frames_back[o]};
        /* Full bus: keep the list and try next tick; the frames are never lost. */
        if (hd_bus_send_lazy(s, o, &m) == 0) { /* the owner need not wake for them */
            s->frames_back[o] = NULL;
            s->frames_back_dirty &= ~(UINT64_C(1) << o);
        }
    }
}

int hd_frame_class_of(const struct hd_shard *s, size_t size)
{
    for (unsigned i = 0; i < s->frame_classes_count; i++)
        if (size <= s->frame_pools[i].size)
            return (int)i;
    return -ENOBUFS;
}

const struct hd_pool_stats *hd_frame_class_counters(const struct hd_shard *s, unsigned cls)
{
    HD_ASSERT(cls < s->frame_classes_count);
    return hd_slab_counters(s->frame_pools[cls].slab);
}

void hd_frame_stats(struct hd_shard *s, unsigned cls, struct hd_pool_stats *out)
{
    HD_ASSERT(cls < s->frame_classes_count);
    hd_slab_stats(s->frame_pools[cls].slab, out);
}
