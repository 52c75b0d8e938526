/* server_frames.c - fair use of a shard's frame pools (issue 16 item 2). A packet's frame comes
 * from its sender's shard and is held until every receiver wrote it, so a sender flooding slow
 * receivers used to drain the pool: everyone else's packets, KeepAlives, Pongs and logins then
 * failed. Each client that sends gets an account of the frames it holds now, and so does its
 * source address (server_frame_addrs.c): charged at the get, released when the frame returns to
 * its pool, through the runtime's frame_release hook (always on the owner shard, which is the
 * sender's). A packet gets a frame only while
 *   - the class keeps its reserve (1/SRV_FRAMES_RESERVE_DIV of the cap) for control frames,
 *     logins and HTTP answers, which take frames without this check,
 *   - the sender holds less than its share: what is free above the reserve divided by
 *     SRV_FRAMES_SHARE_DIV (at least SRV_FRAMES_SHARE_MIN), so one sender converges to a fifth
 *     of the pool and a well-behaved one, whose frames leave at once, is never near its share,
 *   - and its address's connections together hold less than what is free above the reserve
 *     divided by SRV_FRAMES_ADDR_SHARE_DIV (at least SRV_FRAMES_SHARE_MIN): one address with
 *     many flooding connections converges to a third.
 * A refused packet is dropped and counted (the sender's own flood is what is lost). The presence
 * notices a watcher is sent (PeerPresent, PeerGone; server_peers.c) are charged to the watcher
 * on the same terms (issue 24: 1,100 mesh watchers that never read drained the pool); a watcher
 * refused one is closed, as it cannot keep up. A mesh peer's own packets (ForwardPacket) are
 * not charged: they carry its region's traffic, unbounded as in derper. Per packet
 * this is a few loads and compares (the classes' live counters are found once, at start) and
 * two increments, and two decrements at the release. Accounts come from a per-shard slab (no
 * malloc on the data path); a closed client's account lives on until its last frame returns.
 * Refusals are counted as hderp_frames_refused{why=share,addr,reserve}; a control frame
 * (KeepAlive, Pong, ServerInfo, PeerGone to a correspondent) that finds no frame at all is
 * skipped and counted (hderp_ctl_dropped), never a reason to close the client. A client's net
 * queue also pauses at SRV_NET_HIGH_FRAMES (send_high_frames), since small packets hold a whole
 * 2 KiB frame each. --frame-pool-mib (256) sets the pools' memory per shard (srv_frame_classes).
 * Runs on the client's (owner) shard. */
#include <errno.h>

#include "relay/server_frames.h"

int srv_frames_init(struct srv_shard *ds)
{
    struct srv_frames *fr = &ds->frames;
    fr->classes = hd_frame_classes_count(ds->s);
    HD_ASSERT(fr->classes <= HD_FRAME_CLASSES_MAX);
    for (unsigned i = 0; i < fr->classes; i++) {
        fr->size[i] = hd_frame_class_size(ds->s, i);
        fr->pool[i] = hd_frame_class_counters(ds->s, i);
        fr->reserve[i] = fr->pool[i]->cap / SRV_FRAMES_RESERVE_DIV;
    }
    int rc = hd_slab_create(ds->s, "accounts", sizeof(struct srv_account), SRV_ACCOUNTS_MAX,
                            &fr->accounts);
    return rc < 0 ? rc : srv_frame_addrs_init(ds);
}

void srv_frames_fini(struct srv_shard *ds)
{
    srv_frame_addrs_fini(ds);
}

void srv_frames_client_init(struct srv_client *cl)
{
    HD_ASSERT(cl->acct == NULL);
    struct srv_account *a = hd_slab_get(cl->ds->frames.accounts);
    if (a == NULL) { /* SRV_ACCOUNTS_MAX: more than every connection; or injected faults */
        cl->ds->ctr.frames_share_dropped++;
        return;
    }
    *a = (struct srv_account){.addr = srv_frame_addr_enter(cl->ds, net_conn_peer(cl->conn))};
    cl->acct = a;
}

static void account_maybe_free(struct srv_account *a)
{
    for (unsigned i = 0; i < HD_FRAME_CLASSES_MAX; i++)
        if (a->frames[i])
            return;
    srv_frame_addr_leave(a->addr);
    hd_slab_put(hd_slab_of(a), a); /* the release hook has no shard state: the chunk knows */
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
    unsigned cls = f->cls; /* < HD_FRAME_CLASSES_MAX: the reactor's */
    HD_DASSERT(cls < HD_FRAME_CLASSES_MAX);
    uint32_t held = a->frames[cls]--, addr_held = a->addr->frames[cls]--;
    HD_ASSERT(held > 0 && addr_held > 0); /* charged at the get */
    if (hd_unlikely(a->orphan))
        account_maybe_free(a);
}

/* Whether a (holding frames of class cls) may take one more; room: what is free above the
 * reserve. Below SRV_FRAMES_SHARE_MIN frames for its address (the common case: a client whose
 * frames leave at once) neither share can be reached. */
static enum srv_frames_why within_shares(const struct srv_account *a, unsigned cls, uint64_t room)
{
    uint32_t addr_held = a->addr->frames[cls];
    if (hd_likely(addr_held < SRV_FRAMES_SHARE_MIN))
        return SRV_FRAMES_OK;
    uint32_t held = a->frames[cls];
    if (held >= SRV_FRAMES_SHARE_MIN && held >= room / SRV_FRAMES_SHARE_DIV)
        return SRV_FRAMES_SHARE;
    if (addr_held >= room / SRV_FRAMES_ADDR_SHARE_DIV)
        return SRV_FRAMES_ADDR;
    return SRV_FRAMES_OK;
}

/* A frame of size bytes charged to a (NULL: to nobody, unchecked), or NULL with *why. */
static struct hd_frame *frame_get_charged(struct srv_shard *ds, struct srv_account *a, size_t size,
                                          enum srv_frames_why *why)
{
    struct srv_frames *fr = &ds->frames;
    unsigned cls = 0;
    while (cls < fr->classes && size > fr->size[cls])
        cls++;
    *why = SRV_FRAMES_RESERVE;
    if (cls == fr->classes)
        return NULL; /* larger than any class */
    uint64_t avail = fr->pool[cls]->cap - fr->pool[cls]->in_use;
    if (avail <= fr->reserve[cls])
        return NULL;
    if (a && (*why = within_shares(a, cls, avail - fr->reserve[cls])) != SRV_FRAMES_OK)
        return NULL;
    struct hd_frame *f = hd_frame_get(ds->s, size);
    *why = f ? SRV_FRAMES_OK : SRV_FRAMES_RESERVE;
    if (f == NULL || a == NULL)
        return f;
    HD_ASSERT(f->cls == cls);
    a->frames[cls]++;
    a->addr->frames[cls]++;
    f->app_u64 = (uint64_t)(uintptr_t)a;
    return f;
}

struct hd_frame *srv_frame_get_data(struct srv_client *cl, size_t size)
{
    enum srv_frames_why why;
    /* A mesh peer's ForwardPackets carry its region's traffic: unbounded, as in derper. */
    struct hd_frame *f = frame_get_charged(cl->ds, cl->mesh ? NULL : cl->acct, size, &why);
    if (f == NULL && why == SRV_FRAMES_SHARE)
        cl->ds->ctr.frames_share_dropped++;
    else if (f == NULL && why == SRV_FRAMES_ADDR)
        cl->ds->ctr.frames_addr_dropped++;
    else if (f == NULL)
        cl->ds->ctr.frames_reserve_dropped++;
    return f;
}

struct hd_frame *srv_frame_get_notice(struct srv_client *cl, size_t size, enum srv_frames_why *why)
{
    return frame_get_charged(cl->ds, cl->acct, size, why);
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
