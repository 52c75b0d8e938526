/* udp_gro.c - UDP GRO on receive: a UDP socket's own provided-buffer ring (buffers large enough
 * for a coalesced datagram, 64 KiB; the shard's ring has 16 KiB buffers and the kernel would cut
 * the rest off), the UDP_GRO cmsg's segment size, and the cut of a coalesced buffer back into
 * its datagrams. */
#include <errno.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "net_impl.h"

#ifndef UDP_GRO
#define UDP_GRO 104 /* linux/udp.h, since Linux 5.0 */
#endif

static void udp_ring_publish(struct hd_flush *f)
{
    struct net_udp_ring *r = hd_container_of(f, struct net_udp_ring, flush);
    io_uring_buf_ring_advance(r->br, r->pending);
    r->pending = 0;
}

int net_udp_ring_init(struct net_shard *ns, struct net_udp_ring *r)
{
    unsigned i = 0;
    while (i < NET_UDP_GRO_GROUPS && ((ns->udp_groups >> i) & 1))
        i++;
    if (i == NET_UDP_GRO_GROUPS)
        return -ENOSPC;
    size_t ring_bytes = NET_UDP_GRO_BUFS * sizeof(struct io_uring_buf);
    *r = (struct net_udp_ring){.bgid = (uint16_t)(NET_UDP_GRO_GROUP_FIRST + i)};
    r->br = aligned_alloc(4096, (ring_bytes + 4095) & ~(size_t)4095);
    r->bufs = aligned_alloc(4096, (size_t)NET_UDP_GRO_BUFS * NET_UDP_GRO_BUF_SIZE);
    int rc = r->br && r->bufs ? 0 : -ENOMEM;
    if (rc == 0) {
        memset(r->br, 0, ring_bytes);
        struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)r->br,
                                       .ring_entries = NET_UDP_GRO_BUFS,
                                       .bgid = r->bgid};
        rc = io_uring_register_buf_ring(hd_shard_ring(ns->shard), &reg, 0);
    }
    if (rc < 0) {
        free(r->br);
        free(r->bufs);
        *r = (struct net_udp_ring){0};
        return rc;
    }
    io_uring_buf_ring_init(r->br);
    int mask = io_uring_buf_ring_mask(NET_UDP_GRO_BUFS);
    for (uint16_t b = 0; b < NET_UDP_GRO_BUFS; b++)
        io_uring_buf_ring_add(r->br, net_udp_ring_addr(r, b), NET_UDP_GRO_BUF_SIZE, b, mask, b);
    io_uring_buf_ring_advance(r->br, NET_UDP_GRO_BUFS);
    r->shard = ns->shard;
    hd_flush_init(&r->flush, udp_ring_publish);
    ns->udp_groups |= UINT64_C(1) << i;
    return 0;
}

void net_udp_ring_fini(struct net_shard *ns, struct net_udp_ring *r)
{
    if (r->br == NULL)
        return;
    hd_flush_cancel(ns->shard, &r->flush);
    io_uring_unregister_buf_ring(hd_shard_ring(ns->shard), r->bgid);
    ns->udp_groups &= ~(UINT64_C(1) << (r->bgid - NET_UDP_GRO_GROUP_FIRST));
    free(r->br);
    free(r->bufs);
    *r = (struct net_udp_ring){0};
}

uint8_t *net_udp_ring_addr(const struct net_udp_ring *r, uint16_t bid)
{
    HD_ASSERT(bid < NET_UDP_GRO_BUFS);
    return r->bufs + (size_t)bid * NET_UDP_GRO_BUF_SIZE;
}

void net_udp_ring_recycle(struct net_udp_ring *r, uint16_t bid)
{
    int mask = io_uring_buf_ring_mask(NET_UDP_GRO_BUFS);
    io_uring_buf_ring_add(r->br, net_udp_ring_addr(r, bid), NET_UDP_GRO_BUF_SIZE, bid, mask,
                          r->pending);
    r->pending++;
    hd_flush_request(r->shard, &r->flush);
}

size_t net_udp_gro_size(const void *control, size_t len)
{
    const uint8_t *p = control;
    size_t off = 0;
    while (len - off >= sizeof(struct cmsghdr)) {
        struct cmsghdr h;
        memcpy(&h, p + off, sizeof(h));
        if (h.cmsg_len < sizeof(struct cmsghdr) || h.cmsg_len > len - off)
            return 0;
        if (h.cmsg_level == SOL_UDP && h.cmsg_type == UDP_GRO &&
            h.cmsg_len >= CMSG_LEN(sizeof(int))) {
            int seg;
            memcpy(&seg, p + off + CMSG_LEN(0), sizeof(seg));
            return seg > 0 ? (size_t)seg : 0;
        }
        size_t step = CMSG_ALIGN(h.cmsg_len);
        if (step > len - off)
            break;
        off += step;
    }
    return 0;
}

unsigned net_udp_gro_split(const uint8_t *data, size_t len, size_t seg, net_udp_segment_fn *fn,
                           void *arg, const bool *stop)
{
    if (seg == 0 || seg >= len) {
        fn(data, len, arg);
        return 1;
    }
    unsigned n = 0;
    for (size_t off = 0; off < len && (n == 0 || !*stop); off += seg, n++)
        fn(data + off, len - off < seg ? len - off : seg, arg);
    return n;
}

int net_udp_gro_set(int fd, bool on)
{
    int v = on;
    return setsockopt(fd, SOL_UDP, UDP_GRO, &v, sizeof(v)) < 0 ? -errno : 0;
}
