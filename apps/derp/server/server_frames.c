/* server_frames.c - fair use of a shard's frame pools (issue 16 item 2). A packet's frame comes
 * from its sender's shard and is held until every receiver wrote it, so a sender flooding slow
 * receivers used to drain the pool: everyone else's packets, KeepAlives, Pongs and logins then
 * failed. Each client that sends gets an account of the frames it holds now (charged at the
 * get, released when the frame returns to its pool, through the runtime's frame_release hook:
 * always on the owner shard, which is the sender's). A packet gets a frame only while
 *   - the class keeps its reserve (1/SRV_FRAMES_RESERVE_DIV of the cap) for control frames,
 *     logins and HTTP answers, which take frames without this check, and
 *   - the sender holds less than its share: what is free above the reserve divided by
 *     SRV_FRAMES_SHARE_DIV (at least SRV_FRAMES_SHARE_MIN), so one sender converges to a fifth
 *     of the pool and a well-behaved one, whose frames leave at once, is never near its share.
 * A refused packet is dropped and counted (the sender's own flood is what is lost). Accounts
 * come from a per-shard slab (no malloc on the data path); a closed client's account lives on
 * until its last frame returns. Runs on the client's (owner) shard. */
#include <errno.h>

#include "server.h"

struct srv_account {
    struct hd_slab *slab; /* its pool: the release hook needs no shard state */
    uint32_t frames[SRV_FRAME_CLASSES];
    bool orphan; /* the client closed: freed with its last frame */
};

int srv_frames_init(struct srv_shard *ds)
{
    return hd_slab_create(ds->s, "accounts", sizeof(struct srv_account), SRV_ACCOUNTS_MAX,
                          &ds->accounts);
}

void srv_frames_client_init(struct srv_client *cl)
{
    HD_ASSERT(cl->acct == NULL);
    if (cl->mesh) /* a region's own nodes are trusted: derper's watch streams are unbounded */
        return;
    struct srv_account *a = hd_slab_get(cl->ds->accounts);
    if (a == NULL) { /* SRV_ACCOUNTS_MAX: more than every connection: cannot happen */
        cl->ds->ctr.frames_share_dropped++;
        return;
    }
    *a = (struct srv_account){.slab = cl->ds->accounts};
    cl->acct = a;
}

static void account_maybe_free(struct srv_account *a)
{
    for (unsigned i = 0; i < SRV_FRAME_CLASSES; i++)
        if (a->frames[i])
            return;
    hd_slab_put(a->slab, a);
}

void srv_frames_client_fini(struct srv_client *cl)
{
    struct srv_account *a = cl->acct;
    if (a == NULL)
        return;
    cl->acct = NULL;
    HD_ASSERT(!a->orphan);
    a->orphan = true;
    account_maybe_free(a);
}

void srv_frame_release(struct hd_shard *s, struct hd_frame *f)
{
    (void)s;
    struct srv_account *a = (struct srv_account *)(uintptr_t)f->app_u64;
    HD_ASSERT(f->cls < SRV_FRAME_CLASSES && a->frames[f->cls] > 0);
    a->frames[f->cls]--;
    if (a->orphan)
        account_maybe_free(a);
}

struct hd_frame *srv_frame_get_data(struct srv_client *cl, size_t size)
{
    struct srv_shard *ds = cl->ds;
    uint64_t avail, cap;
    int cls = hd_frame_room(ds->s, size, &avail, &cap);
    if (cls < 0)
        return NULL;
    uint64_t reserve = cap / SRV_FRAMES_RESERVE_DIV;
    if (avail <= reserve) {
        ds->ctr.frames_reserve_dropped++;
        return NULL;
    }
    struct srv_account *a = cl->acct;
    if (a) {
        uint64_t share = (avail - reserve) / SRV_FRAMES_SHARE_DIV;
        if (share < SRV_FRAMES_SHARE_MIN)
            share = SRV_FRAMES_SHARE_MIN;
        if (a->frames[cls] >= share) {
            ds->ctr.frames_share_dropped++;
            return NULL;
        }
    }
    struct hd_frame *f = hd_frame_get(ds->s, size);
    if (f == NULL || a == NULL)
        return f;
    HD_ASSERT(f->cls == (unsigned)cls);
    a->frames[cls]++;
    f->app_u64 = (uint64_t)(uintptr_t)a;
    return f;
}

int srv_frame_classes(uint32_t pool_mib, struct hd_frame_class out[SRV_FRAME_CLASSES])
{
    if (pool_mib < SRV_FRAME_POOL_MIB_MIN || pool_mib > SRV_FRAME_POOL_MIB_MAX)
        return -EINVAL;
    /* Half the memory for each class, as the defaults (65,536 x 2 KiB, 2,048 x 64 KiB). */
    uint64_t half = (uint64_t)pool_mib << 19;
    out[0] = (struct hd_frame_class){.size = SRV_FRAME_SMALL, .cap_count = half / SRV_FRAME_SMALL};
    out[1] = (struct hd_frame_class){.size = SRV_FRAME_BIG, .cap_count = half / SRV_FRAME_BIG};
    return 0;
}
