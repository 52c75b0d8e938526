/* shard.c - the socket layer's per-shard state: connection, send-queue and send-context pools
 * and the provided-buffer ring (or the plain-recv fallback when the kernel has no buffer rings);
 * net_shard_close_all. net_module (arg: struct net_shard_options *, e.g. rx_tail_max, the
 * default reassembly tail of 64 KiB): the runtime creates it on each shard's thread before the
 * modules that require net, and destroys it after them (also when a later module's shard_init
 * fails). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net_impl.h"

struct net_shard *net_shard_of(struct hd_shard *s)
{
    struct net_shard *ns = hd_shard_module_state(s, &net_module);
    HD_ASSERT(ns != NULL); /* net_module is not in this runtime (or not before this module) */
    return ns;
}

static int net_shard_init(struct hd_shard *s, void *arg, void **state)
{
    const struct net_shard_options *opt = arg;
    if (hd_shard_module_state(s, &net_module) != NULL)
        return -EEXIST; /* net_module listed twice: one socket layer per shard */
    struct net_shard *ns = calloc(1, sizeof(*ns));
    if (ns == NULL)
        return -ENOMEM;
    ns->shard = s;
    ns->rx_tail_max = opt && opt->rx_tail_max ? opt->rx_tail_max : NET_RX_TAIL_MAX_DEFAULT;
    ns->udp_gro = !(opt && opt->no_udp_gro);
    int rc;
    if ((rc = hd_slab_create(s, "net_conn", sizeof(struct net_conn), NET_CONNS_MAX, &ns->conns)) ||
        (rc = hd_slab_create(s, "net_sendq", sizeof(struct net_sendq_chunk), NET_SENDQ_CHUNKS_MAX,
                             &ns->chunks)) ||
        (rc = hd_slab_create(s, "net_send_ctx", sizeof(struct net_send_ctx), NET_SEND_CTX_MAX,
                             &ns->send_ctxs)) ||
        (rc = hd_slab_create(s, "net_rmsg", sizeof(struct net_recv_msg), NET_CONNS_MAX,
                             &ns->rmsgs)) ||
        (rc = hd_slab_create(s, "net_move", sizeof(struct net_conn_move), NET_CONNS_MAX,
                             &ns->moves)))
        goto fail;
    unsigned id = hd_shard_id(s);
    bool no_ring = opt && (opt->no_buf_ring || (id < 64 && (opt->no_buf_ring_shards >> id) & 1));
    if (!no_ring) {
        rc = net_bufring_init(ns);
        if (rc < 0) {
            /* Kernels before 5.19 have no buffer rings: receive one recv at a time instead. */
            hd_log(HD_LOG_INFO, "net: no provided-buffer ring (%s): plain recv fallback",
                   strerror(-rc));
            net_bufring_fini(ns);
        }
    }
    *state = ns;
    return 0;
fail:
    hd_slab_destroy(ns->conns);
    hd_slab_destroy(ns->chunks);
    hd_slab_destroy(ns->send_ctxs);
    hd_slab_destroy(ns->rmsgs);
    hd_slab_destroy(ns->moves);
    free(ns);
    return rc;
}

static void net_shard_fini(struct hd_shard *s, void *state)
{
    struct net_shard *ns = state;
    if (ns == NULL)
        return;
    net_resolve_shard_fini(s); /* lookups still in DNS never post to this shard */
    net_bufring_fini(ns);
    hd_slab_destroy(ns->conns);
    hd_slab_destroy(ns->chunks);
    hd_slab_destroy(ns->send_ctxs);
    hd_slab_destroy(ns->rmsgs);
    hd_slab_destroy(ns->moves);
    free(ns);
}

const struct hd_module net_module = {
    .abi_version = HD_MODULE_ABI,
    .name = "net",
    .shard_init = net_shard_init,
    .shard_fini = net_shard_fini,
};

bool net_shard_uses_buf_ring(struct hd_shard *s)
{
    return net_shard_of(s)->buf_ring;
}

uint32_t net_conns_count(struct hd_shard *s)
{
    return net_shard_of(s)->conns_count;
}

void net_shard_close_all(struct hd_shard *s, int reason)
{
    struct net_shard *ns = hd_shard_module_state(s, &net_module);
    if (ns == NULL)
        return;
    /* Closing may finish (and unlink) a connection at once: take the next one first. */
    for (struct net_conn *c = ns->all, *next; c; c = next) {
        next = c->all_next;
        net_conn_close(c, reason, true);
    }
}
