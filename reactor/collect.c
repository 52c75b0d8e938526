/* collect.c - gather per-shard data on one shard (metrics pages, tests). The requester checks
 * that every other shard's ring has room (else -EAGAIN, nothing sent), sends a fill message to
 * each; each fills its slot and counts down an atomic; the requester notices the count reach
 * zero on one of its ticks and runs done(). No reply message, so nothing can be lost to a full
 * bus after the request went out. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hd_impl.h"

struct hd_collect_req {
    struct hd_collect_req *next;
    /* Each filler's release pairs with the requester's acquire: the slots are written first. */
    _Atomic uint32_t remaining;
    unsigned count;
    size_t slot_size;
    hd_collect_fill_fn *fill;
    hd_collect_done_fn *done;
    void *arg;
    _Alignas(16) unsigned char slots[];
};

static void collect_fill_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    struct hd_collect_req *req = m->ptr;
    req->fill(dst, req->slots + req->slot_size * dst->id, req->arg);
    atomic_fetch_sub_explicit(&req->remaining, 1, memory_order_release);
}

int hd_collect(struct hd_shard *s, size_t slot_size, hd_collect_fill_fn *fill,
               hd_collect_done_fn *done, void *arg)
{
    for (unsigned i = 0; i < s->count; i++)
        if (i != s->id && hd_bus_room(s, i) == 0) /* apps' room: the reserve stays free */
            return -EAGAIN;                       /* checked first, so every send below succeeds */
    /* The caller indexes slots by its own slot_size: keep that stride (no rounding). */
    struct hd_collect_req *req = calloc(1, sizeof(*req) + slot_size * s->count);
    if (req == NULL)
        return -ENOMEM;
    req->count = s->count;
    req->slot_size = slot_size;
    req->fill = fill;
    req->done = done;
    req->arg = arg;
    atomic_init(&req->remaining, s->count - 1);
    fill(s, req->slots + slot_size * s->id, arg);
    for (unsigned i = 0; i < s->count; i++) {
        if (i == s->id)
            continue;
        struct hd_msg m = {.fn = collect_fill_msg, .ptr = req};
        int rc = hd_bus_send_internal(s, i, &m);
        HD_ASSERT(rc == 0);
    }
    req->next = s->collects;
    s->collects = req;
    return 0;
}

void hd_collects_poll(struct hd_shard *s)
{
    struct hd_collect_req **pp = &s->collects;
    while (*pp) {
        struct hd_collect_req *req = *pp;
        if (atomic_load_explicit(&req->remaining, memory_order_acquire) != 0) {
            pp = &req->next;
            continue;
        }
        *pp = req->next;
        req->done(s, req->slots, req->count, req->arg);
        free(req);
    }
}

void hd_collects_free(struct hd_shard *s)
{
    while (s->collects) {
        struct hd_collect_req *req = s->collects;
        s->collects = req->next;
        free(req);
    }
}
