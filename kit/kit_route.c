/* kit_route.c - the relay kit's routing and fan-out: a key's owner shard, running a message
 * there, one frame queued on many connections or sent to every other shard, and the port hold
 * that lets every shard's SO_REUSEPORT socket share a port the kernel picked. Routing and
 * fan-out run on the calling shard; kit_port_hold on the main thread at start-up. */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hd/kit.h>

#define KIT_FNV_OFFSET 14695981039346656037ull /* FNV-1a 64-bit offset basis */
#define KIT_FNV_PRIME  1099511628211ull        /* FNV-1a 64-bit prime */

uint64_t kit_key_hash(const void *key, size_t len)
{
    const uint8_t *p = key;
    uint64_t h = KIT_FNV_OFFSET;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= KIT_FNV_PRIME;
    }
    return h;
}

unsigned kit_owner_shard(const void *key, size_t len, unsigned shards_count)
{
    HD_ASSERT(shards_count > 0);
    return (unsigned)(kit_key_hash(key, len) % shards_count);
}

int kit_route(struct hd_shard *s, const void *key, size_t len, const struct hd_msg *m)
{
    /* The owner may be this shard: the bus queues it for the next drain all the same, so the
     * handler never runs inside the caller (one semantics wherever the owner lives). */
    return hd_bus_send(s, kit_owner_shard(key, len, hd_shard_count(s)), m);
}

unsigned kit_fanout_conns(struct net_conn *const *conns, unsigned count, struct hd_frame *f,
                          uint32_t off, uint32_t len, struct kit_fanout_stats *st)
{
    unsigned sent = 0;
    for (unsigned i = 0; i < count; i++) {
        if (net_conn_send(conns[i], f, off, len) == 0)
            sent++;
    }
    if (st) {
        st->sent += sent;
        st->dropped += count - sent;
    }
    return sent;
}

unsigned kit_fanout_shards(struct hd_shard *s, struct hd_frame *f, hd_msg_fn *fn, uint64_t u64,
                           struct kit_fanout_stats *st)
{
    unsigned self = hd_shard_id(s), n = hd_shard_count(s), sent = 0;
    struct hd_msg m = {.fn = fn, .ptr = f, .u64 = {u64, 0}};
    for (unsigned dst = 0; dst < n; dst++) {
        if (dst == self)
            continue;
        hd_frame_ref(f); /* the message's reference, dropped by fn on dst */
        if (hd_bus_send(s, dst, &m) == 0) {
            sent++;
        } else {
            hd_frame_unref(s, f);
            if (st)
                st->dropped++;
        }
    }
    if (st)
        st->sent += sent;
    return sent;
}

int kit_port_hold(struct net_addr *a, int type)
{
    int fd = socket(a->sa.sa_family, type | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    socklen_t len = a->len;
    /* UDP: SO_REUSEPORT only after the bind. Linux's UDP port 0 search counts a port whose
     * sockets all have SO_REUSEPORT (same user) as free, so a socket with it set would join
     * another process's group; a plain one gets a port nobody has. TCP's search never joins. */
    bool late = type == SOCK_DGRAM;
    if ((!late && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) ||
        bind(fd, &a->sa, a->len) < 0 ||
        (late && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) ||
        getsockname(fd, &a->sa, &len) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}
