/* conn_codec.c - what a connection's received bytes go through on their way to the app: the
 * codec's decode (and a second codec stacked above it by net_conn_switch_codec, such as WebSocket
 * over TLS), on_data, and the tails that keep what each layer left unconsumed (only a partial
 * tail is ever copied, into a pool frame, and offered again with the next bytes). A codec switch
 * inside on_data hands the rest of the bytes to the new codec. The codecs are a stack of levels
 * (at most NET_CODECS_MAX, level 0 nearest the socket): a switch on a connection that already
 * has a codec puts the new one on top; each level above 0 decodes what the one below delivers
 * (from a copy in its level's tail), and what it encodes goes to a middle queue that the level
 * below takes as its plaintext. What was queued before the switch (a 101) goes below the new
 * codec. Every level and the middle queues move with a migrating connection. Runs on the
 * connection's shard; owns nothing beyond the connection's tails. The recv itself, held buffers and
 * replay are in conn.c. */
#include <errno.h>
#include <string.h>

#include "net_impl.h"

/* Keep data[0..len) as the app's (or codec's) unconsumed tail. */
static int tail_keep(struct net_conn *c, struct hd_frame **tailp, const uint8_t *data, size_t len)
{
    struct hd_frame *t = *tailp;
    if (len > c->rx_tail_max)
        return -EMSGSIZE;
    if (t && len <= t->size) {
        memmove(t->data, data, len);
        t->len = (uint32_t)len;
        return 0;
    }
    struct hd_frame *n = hd_frame_get(c->shard, len);
    if (n == NULL)
        return -ENOBUFS;
    memcpy(n->data, data, len);
    n->len = (uint32_t)len;
    if (t)
        hd_frame_unref(c->shard, t);
    *tailp = n;
    return 0;
}

/* Append data to the tail (growing it into a bigger class when needed). */
static int tail_append(struct net_conn *c, struct hd_frame **tailp, const uint8_t *data, size_t len)
{
    struct hd_frame *t = *tailp;
    size_t total = (size_t)t->len + len;
    if (total > c->rx_tail_max)
        return -EMSGSIZE;
    if (total > t->size) {
        struct hd_frame *n = hd_frame_get(c->shard, total);
        if (n == NULL)
            return -ENOBUFS;
        memcpy(n->data, t->data, t->len);
        n->len = t->len;
        hd_frame_unref(c->shard, t);
        *tailp = t = n;
    }
    memcpy(t->data + t->len, data, len);
    t->len = (uint32_t)total;
    return 0;
}

/* Free a tail (or the recv frame) and forget it. */
void net_conn_tail_drop(struct net_conn *c, struct hd_frame **tailp)
{
    if (*tailp) {
        hd_frame_unref(c->shard, *tailp);
        *tailp = NULL;
    }
}

/* An empty app tail holds no frame: a connection that once had a partial message kept its tail's
 * frame (64 KiB after a straddle) for good, so busy-once connections drained the large class. */
static void tail_release_empty(struct net_conn *c)
{
    if (c->rx_tail && c->rx_tail->len == 0)
        net_conn_tail_drop(c, &c->rx_tail);
}

/* Append data[0..len) to a tail (creating it). */
static int tail_add(struct net_conn *c, struct hd_frame **tailp, const uint8_t *data, size_t len)
{
    if (len == 0)
        return 0;
    return *tailp ? tail_append(c, tailp, data, len) : tail_keep(c, tailp, data, len);
}

/* What the level below delivered, through the codec at level (> 0), which may modify its input,
 * so it decodes a copy in its level's tail. Returns 0 or -errno. */
static int level_input(struct net_conn *c, unsigned level, const uint8_t *data, size_t len)
{
    struct net_codec_level *l = &c->codecs[level];
    HD_ASSERT(level > 0 && level < c->codecs_n);
    int rc = tail_add(c, &l->tail, data, len);
    struct hd_frame *t = l->tail;
    if (rc < 0 || t == NULL || t->len == 0)
        return rc;
    uint8_t at = net_conn_codec_at(c, level);
    ssize_t n = l->codec->decode(c, l->state, t->data, t->len);
    c->codec_at = at;
    if (n < 0)
        return (int)n;
    HD_ASSERT((size_t)n <= t->len && t == l->tail);
    memmove(t->data, t->data + n, t->len - (size_t)n);
    t->len -= (uint32_t)n;
    return 0;
}

/* After net_conn_switch_codec: data[0..len) arrived as plaintext but is the new codec's input,
 * kept as its tail (decoded by rest_decode). */
static int rest_to_codec(struct net_conn *c, const uint8_t *data, size_t len)
{
    return tail_add(c, &c->codecs[c->codecs_n - 1].tail, data, len);
}

/* The switch is complete: decode what was kept for the new codec (unless paused: replay then). */
static int rest_decode(struct net_conn *c, int rc)
{
    c->flags &= ~NET_F_CODEC_REST;
    if (rc < 0 || c->state != NET_CONN_OPEN || (c->flags & (NET_F_RECV_PAUSED | NET_F_QUIET)))
        return rc;
    if (c->codecs_n > 1) /* the new codec is the top one */
        return level_input(c, c->codecs_n - 1u, NULL, 0);
    if (c->codecs[0].tail && c->codecs[0].tail->len > 0)
        rc = net_conn_input(c, NULL, 0);
    return rc;
}

int net_conn_switch_codec(struct net_conn *c, const struct net_codec *codec, void *state)
{
    unsigned n = c->codecs_n;
    if (n == NET_CODECS_MAX)
        return -EBUSY;
    if (n > 0 && (codec->move_out || codec->move_in || codec->record || codec->quiesced))
        return -EINVAL;
    HD_ASSERT(c->flags & NET_F_IN_DATA); /* only on_data knows where the new protocol starts */
    HD_ASSERT(c->codec_at == 0);         /* the app's call: not from inside a codec's hook */
    if (n > 0) {
        /* Queued before the switch: the top codec's plaintext as it is, now the input of that
         * codec below the new one. */
        HD_ASSERT(c->mid[n - 1].count == 0);
        while (c->plain.count > 0) {
            struct net_sendq_entry e = *net_sendq_at(&c->plain, 0);
            net_sendq_pop(c->ns, c->shard, &c->plain, false);
            if (e.frame == NULL)
                continue; /* dropped (net_conn_drop_oldest) */
            int rc = net_sendq_push(c->ns, &c->mid[n - 1], e.frame, e.off, e.len);
            if (rc < 0) {
                hd_frame_unref(c->shard, e.frame);
                return rc;
            }
        }
    }
    c->codecs[n].codec = codec;
    c->codecs[n].state = state;
    c->codecs_n = (uint8_t)(n + 1);
    c->flags |= NET_F_CODEC_REST;
    return 0;
}

/* Offer bytes to on_data until it consumes nothing more; keep the rest as the tail (or, after
 * a codec switch, as the codec's input). */
static int app_offer(struct net_conn *c, const uint8_t *data, size_t len, bool from_tail)
{
    size_t done = 0;
    while (done < len && c->state == NET_CONN_OPEN && !(c->flags & NET_F_RECV_PAUSED)) {
        uint32_t in_data = c->flags & NET_F_IN_DATA;
        c->flags |= NET_F_IN_DATA;
        /* The app speaks from outside the codecs (a codec's call it makes says its level). */
        uint8_t at = net_conn_codec_at(c, 0);
        ssize_t n = c->h->on_data(c, data + done, len - done);
        c->codec_at = at;
        c->flags = (c->flags & ~NET_F_IN_DATA) | in_data;
        if (n < 0)
            return (int)n;
        HD_ASSERT((size_t)n <= len - done);
        done += (size_t)n;
        if (c->flags & NET_F_CODEC_REST) {
            int rc = rest_to_codec(c, data + done, len - done);
            if (from_tail)
                c->rx_tail->len = 0;
            return rc;
        }
        if (n == 0)
            break;
    }
    if (done == len) {
        if (from_tail)
            c->rx_tail->len = 0;
        return 0;
    }
    return tail_keep(c, &c->rx_tail, data + done, len - done);
}

int net_conn_deliver(struct net_conn *c, const uint8_t *data, size_t len)
{
    if (c->codec_at + 1u < c->codecs_n) /* from a codec with one above it: that one is next */
        return level_input(c, c->codec_at + 1u, data, len);
    /* With a tail, add only what fits under rx_tail_max, offer it, and go on with the rest:
     * a partial frame near the limit plus a whole new buffer must not overflow the tail when the
     * frame completes inside that buffer. */
    int rc = 0;
    while (len > 0 && c->rx_tail && c->rx_tail->len > 0) {
        if (c->state != NET_CONN_OPEN || (c->flags & NET_F_RECV_PAUSED))
            return tail_append(c, &c->rx_tail, data, len); /* offered again on resume */
        struct hd_frame *t = c->rx_tail;
        size_t had = t->len, room = c->rx_tail_max - had;
        if (room == 0)
            return -EMSGSIZE; /* the app's message is larger than any tail may be */
        /* First only what the tail's frame holds: a small message that straddles two reads
         * completes there, and the tail grows into a bigger class only for a message that does
         * not fit (copying a whole new buffer in took a 64 KiB frame for every straddle). */
        size_t take = len < room ? len : room, fit = t->size - had;
        if (fit > 0 && take > fit)
            take = fit;
        rc = tail_append(c, &c->rx_tail, data, take);
        if (rc == 0)
            rc = app_offer(c, c->rx_tail->data, c->rx_tail->len, true);
        if (rc < 0 || (c->flags & NET_F_CODEC_REST)) {
            data += take;
            len -= take;
            break;
        }
        size_t left = c->rx_tail ? c->rx_tail->len : 0, used = had + take - left;
        if (left > 0 && used >= had && c->state == NET_CONN_OPEN &&
            !(c->flags & NET_F_RECV_PAUSED)) {
            /* The app took the old tail and more: what it left came from data, so it is
             * offered from there with the rest (no copy through the tail). */
            c->rx_tail->len = 0;
            data += used - had;
            len -= used - had;
        } else {
            data += take;
            len -= take;
        }
        tail_release_empty(c);
    }
    if (rc == 0 && len > 0 && !(c->flags & NET_F_CODEC_REST)) {
        rc = app_offer(c, data, len, false);
        len = 0;
    }
    if (!(c->flags & NET_F_CODEC_REST))
        return rc;
    if (rc == 0)
        rc = rest_to_codec(c, data, len); /* bytes the tail loop did not offer */
    return rest_decode(c, rc);
}

/* Raw bytes from the socket: through level 0's codec if there is one (in place: only what it
 * leaves is copied, into its tail). */
int net_conn_input(struct net_conn *c, uint8_t *data, size_t len)
{
    c->stats.bytes_in += len;
    if (c->codecs_n == 0)
        return net_conn_deliver(c, data, len);
    struct net_codec_level *l = &c->codecs[0];
    if (l->codec == NULL) /* it failed to move (net_impl.h): the bytes cannot be decoded */
        return -EPROTO;
    if (l->tail && l->tail->len > 0) {
        int rc = len ? tail_append(c, &l->tail, data, len) : 0;
        if (rc < 0)
            return rc;
        data = l->tail->data;
        len = l->tail->len;
    }
    uint8_t at = net_conn_codec_at(c, 0);
    ssize_t n = l->codec->decode(c, l->state, data, len);
    c->codec_at = at;
    if (n < 0)
        return (int)n;
    if (l->tail && data == l->tail->data && (size_t)n == len) {
        l->tail->len = 0;
        return 0;
    }
    return (size_t)n == len ? 0 : tail_keep(c, &l->tail, data + n, len - (size_t)n);
}

/* Offer the tails, in arrival order: the app's, then each codec level's from the top down.
 * Stops where the app pauses (net_conn_replay goes on with pending frames and held buffers). */
int net_conn_tails_replay(struct net_conn *c)
{
    int rc = 0;
    if (c->rx_tail && c->rx_tail->len > 0)
        rc = app_offer(c, c->rx_tail->data, c->rx_tail->len, true);
    tail_release_empty(c);
    c->flags &= ~NET_F_CODEC_REST; /* a switch: its bytes are the codec's tail, decoded next */
    for (unsigned level = c->codecs_n; rc == 0 && level-- > 0;) {
        struct hd_frame *t = c->codecs[level].tail;
        if (t == NULL || t->len == 0 || c->codecs[level].codec == NULL || /* a failed move's */
            (c->flags & (NET_F_RECV_PAUSED | NET_F_QUIET)))
            continue;
        if (level > 0)
            rc = level_input(c, level, NULL, 0);
        else
            rc = net_conn_input(c, NULL, 0);
    }
    return rc;
}
