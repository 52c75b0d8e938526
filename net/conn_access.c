/* conn_access.c - a connection's accessors and settings. Runs on the connection's shard. */
#include "net_impl.h"
#include <hd/net_proxy.h>

/* ---------------------------------------------------------------- accessors */

void *net_conn_app(const struct net_conn *c)
{
    return c->app;
}

const struct net_conn_handler *net_conn_app_handler(const struct net_conn *c)
{
    return c->h;
}

void net_conn_set_app(struct net_conn *c, const struct net_conn_handler *h, void *app)
{
    c->h = h;
    c->app = app;
}

int net_conn_fd(const struct net_conn *c)
{
    return c->fd;
}

struct hd_shard *net_conn_shard(const struct net_conn *c)
{
    return c->shard;
}

enum net_conn_state net_conn_state(const struct net_conn *c)
{
    return c->state;
}

enum net_conn_timer net_conn_closed_by(const struct net_conn *c)
{
    return (enum net_conn_timer)c->closed_by;
}

const struct net_addr *net_conn_peer(const struct net_conn *c)
{
    return &c->peer;
}

void net_conn_set_peer(struct net_conn *c, const struct net_addr *peer)
{
    c->peer = *peer; /* a PROXY header's client (net_proxy.h) */
}

const struct net_conn_stats *net_conn_stats(const struct net_conn *c)
{
    return &c->stats;
}

void net_conn_set_timeouts(struct net_conn *c, uint32_t idle_timeout_ms, uint32_t write_timeout_ms)
{
    c->idle_timeout_ms = idle_timeout_ms;
    c->write_timeout_ms = write_timeout_ms;
    if (c->state != NET_CONN_OPEN || (c->flags & NET_F_NOBUFS))
        return;
    if (idle_timeout_ms)
        hd_timer_start(c->shard, &c->idle_timer, idle_timeout_ms);
    else
        hd_timer_stop(c->shard, &c->idle_timer);
}

void net_conn_set_deadline(struct net_conn *c, uint32_t ms)
{
    if (ms == 0 || c->state == NET_CONN_CLOSING || c->state == NET_CONN_CLOSED) {
        hd_timer_stop(c->shard, &c->deadline_timer);
        c->deadline_at_ms = 0;
        return;
    }
    c->deadline_at_ms = hd_now_ms(c->shard) + ms;
    hd_timer_start(c->shard, &c->deadline_timer, ms);
}

void net_conn_set_frame_limits(struct net_conn *c, uint32_t high, uint32_t low)
{
    HD_ASSERT(low <= high);
    c->send_high_frames = high;
    c->send_low_frames = low;
}

void net_conn_set_limits(struct net_conn *c, uint32_t high, uint32_t low, uint32_t max)
{
    c->send_high = high;
    c->send_low = low;
    c->send_max = max;
}

void net_conn_timeouts(const struct net_conn *c, uint32_t *idle_timeout_ms,
                       uint32_t *write_timeout_ms)
{
    *idle_timeout_ms = c->idle_timeout_ms;
    *write_timeout_ms = c->write_timeout_ms;
}

const struct net_codec *net_conn_codec(const struct net_conn *c, void **state)
{
    if (state)
        *state = c->codecs[0].state;
    return c->codecs[0].codec;
}

const struct net_codec *net_conn_upper_codec(const struct net_conn *c, void **state)
{
    if (state)
        *state = c->codecs_n > 1 ? c->codecs[1].state : NULL;
    return c->codecs_n > 1 ? c->codecs[1].codec : NULL;
}

unsigned net_conn_codec_enter(struct net_conn *c, const struct net_codec *codec)
{
    unsigned saved = c->codec_at;
    for (unsigned level = c->codecs_n; codec != NULL && level-- > 0;) {
        if (c->codecs[level].codec == codec) { /* the top one of its kind */
            c->codec_at = (uint8_t)level;
            break;
        }
    }
    return saved;
}

void net_conn_codec_leave(struct net_conn *c, unsigned saved)
{
    net_conn_codec_at(c, saved); /* asserts the level exists */
}

/* Level 0's codec: install, replace, or remove (only with none above it). */
void net_conn_set_codec(struct net_conn *c, const struct net_codec *codec, void *state)
{
    HD_ASSERT(codec != NULL || c->codecs_n <= 1);
    c->codecs[0].codec = codec;
    c->codecs[0].state = codec ? state : NULL;
    if (codec == NULL)
        c->codecs_n = 0;
    else if (c->codecs_n == 0)
        c->codecs_n = 1;
}
