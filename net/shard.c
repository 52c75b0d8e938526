/* shard.c - the socket layer's per-shard state: connection, send-queue and send-context pools
 * and the provided-buffer ring (or the plain-recv fallback when the kernel has no buffer rings).
 * Created and destroyed on the shard's thread, from the app's shard hooks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net_impl.h"

struct net_shard *net_shard_of(struct hd_shard *s)
{
    struct net_shard *ns = hd_shard_slot_get(s, HD_SLOT_NET);
    HD_ASSERT(ns != NULL); /* net_shard_init not called on this shard */
    return ns;
}

int net_shard_init(struct hd_shard *s, const struct net_shard_options *opt)
{
    struct net_shard *ns = calloc(1, sizeof(*ns));
    if (ns == NULL)
        return -ENOMEM;
    ns->shard = s;
    int rc;
    if ((rc = hd_slab_create(s, "net_conn", sizeof(struct net_conn), NET_CONNS_MAX, &ns->conns)) ||
        (rc = hd_slab_create(s, "net_sendq", sizeof(struct net_sendq_chunk), NET_SENDQ_CHUNKS_MAX,
                             &ns->chunks)) ||
        (rc = hd_slab_create(s, "net_send_ctx", sizeof(struct net_send_ctx), NET_SEND_CTX_MAX,
                             &ns->send_ctxs)))
        goto fail;
    if (!(opt && opt->no_buf_ring)) {
        rc = net_bufring_init(ns);
        if (rc < 0) {
            /* Kernels before 5.19 have no buffer rings: receive one recv at a time instead. */
            hd_log(HD_LOG_INFO, "net: no provided-buffer ring (%s): plain recv fallback",
                   strerror(-rc));
            net_bufring_fini(ns);
        }
    }
    hd_shard_slot_set(s, HD_SLOT_NET, ns);
    return 0;
fail:
    hd_slab_destroy(ns->conns);
    hd_slab_destroy(ns->chunks);
    hd_slab_destroy(ns->send_ctxs);
    free(ns);
    return rc;
}

void net_shard_fini(struct hd_shard *s)
{
    struct net_shard *ns = hd_shard_slot_get(s, HD_SLOT_NET);
    if (ns == NULL)
        return;
    net_resolve_shard_fini(s); /* lookups still in DNS never post to this shard */
    net_bufring_fini(ns);
    hd_slab_destroy(ns->conns);
    hd_slab_destroy(ns->chunks);
    hd_slab_destroy(ns->send_ctxs);
    free(ns);
    hd_shard_slot_set(s, HD_SLOT_NET, NULL);
}

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
    struct net_shard *ns = hd_shard_slot_get(s, HD_SLOT_NET);
    if (ns == NULL)
        return;
    /* Closing may finish (and unlink) a connection at once: take the next one first. */
    for (struct net_conn *c = ns->all, *next; c; c = next) {
        next = c->all_next;
        net_conn_close(c, reason, true);
    }
}
