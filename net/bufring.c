/* bufring.c - the shard's provided-buffer ring for multishot recv: NET_BUF_RING_ENTRIES buffers
 * of NET_BUF_SIZE (256 x 16 KiB) registered with the kernel as group NET_BUF_GROUP. A buffer the
 * kernel filled is ours until we give it back; returns are batched and published once per tick.
 * An empty ring makes a recv end with -ENOBUFS (conn.c retries after 1 ms). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net_impl.h"

static void bufring_publish(struct hd_flush *f)
{
    struct net_shard *ns = hd_container_of(f, struct net_shard, br_flush);
    io_uring_buf_ring_advance(ns->br, (int)ns->br_pending);
    ns->br_pending = 0;
}

int net_bufring_init(struct net_shard *ns)
{
    size_t ring_bytes = NET_BUF_RING_ENTRIES * sizeof(struct io_uring_buf);
    ns->br = aligned_alloc(4096, (ring_bytes + 4095) & ~(size_t)4095);
    ns->bufs = aligned_alloc(4096, (size_t)NET_BUF_RING_ENTRIES * NET_BUF_SIZE);
    if (!ns->br || !ns->bufs)
        return -ENOMEM;
    memset(ns->br, 0, ring_bytes);
    struct io_uring_buf_reg reg = {
        .ring_addr = (uint64_t)(uintptr_t)ns->br,
        .ring_entries = NET_BUF_RING_ENTRIES,
        .bgid = NET_BUF_GROUP,
    };
    int rc = io_uring_register_buf_ring(hd_shard_ring(ns->shard), &reg, 0);
    if (rc < 0)
        return rc;
    io_uring_buf_ring_init(ns->br);
    int mask = io_uring_buf_ring_mask(NET_BUF_RING_ENTRIES);
    for (uint16_t i = 0; i < NET_BUF_RING_ENTRIES; i++)
        io_uring_buf_ring_add(ns->br, ns->bufs + (size_t)i * NET_BUF_SIZE, NET_BUF_SIZE, i, mask,
                              i);
    io_uring_buf_ring_advance(ns->br, NET_BUF_RING_ENTRIES);
    hd_flush_init(&ns->br_flush, bufring_publish);
    ns->buf_ring = true;
    return 0;
}

void net_bufring_fini(struct net_shard *ns)
{
    if (ns->buf_ring)
        io_uring_unregister_buf_ring(hd_shard_ring(ns->shard), NET_BUF_GROUP);
    hd_flush_cancel(ns->shard, &ns->br_flush);
    free(ns->br);
    free(ns->bufs);
    ns->br = NULL;
    ns->bufs = NULL;
    ns->buf_ring = false;
}

uint8_t *net_bufring_addr(struct net_shard *ns, uint16_t bid)
{
    HD_ASSERT(bid < NET_BUF_RING_ENTRIES);
    return ns->bufs + (size_t)bid * NET_BUF_SIZE;
}

void net_bufring_recycle(struct net_shard *ns, uint16_t bid)
{
    int mask = io_uring_buf_ring_mask(NET_BUF_RING_ENTRIES);
    io_uring_buf_ring_add(ns->br, net_bufring_addr(ns, bid), NET_BUF_SIZE, bid, mask,
                          (int)ns->br_pending);
    ns->br_pending++;
    hd_flush_request(ns->shard, &ns->br_flush);
}
