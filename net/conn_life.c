/* conn_life.c - a connection's life as two state machines, each changed in one function that
 * checks every transition against its table (a wrong one is an assertion, in every build):
 * - the state every app sees (enum net_conn_state, net.h): CONNECTING -> OPEN -> CLOSING ->
 *   CLOSED, or CONNECTING -> CLOSING (a connect that failed or timed out), or OPEN -> CLOSED
 *   without CLOSING (moved to another shard or exported to another process: released without
 *   on_close, the fd goes on elsewhere);
 * - while OPEN, what holds the connection away from its steady state (recv, codec, send queue):
 *   enum net_conn_hold, a quiet point a codec asked for (conn_quiet.c), a move to another shard
 *   or an export to another process waiting for its quiet point (migrate.c, export.c), or a move
 *   asked for while quiet, which waits for the quiet point's end first.
 * The data path tests the hold in one mask with its own flags: NET_F_QUIET and NET_F_MIGRATING
 * mirror it and are written here only. Runs on the connection's shard; owns nothing. */
#include "net_impl.h"

#define BIT(x) (1u << (x))

static const uint8_t state_next[] = {
    [NET_CONN_CONNECTING] = BIT(NET_CONN_OPEN) | BIT(NET_CONN_CLOSING),
    [NET_CONN_OPEN] = BIT(NET_CONN_CLOSING) | BIT(NET_CONN_CLOSED),
    [NET_CONN_CLOSING] = BIT(NET_CONN_CLOSED),
    [NET_CONN_CLOSED] = 0,
};

static const uint8_t hold_next[] = {
    [NET_HOLD_NONE] = BIT(NET_HOLD_QUIET) | BIT(NET_HOLD_MOVE),
    /* quiet again: another round (net_conn_quiet_begin inside quiesced) */
    [NET_HOLD_QUIET] = BIT(NET_HOLD_NONE) | BIT(NET_HOLD_QUIET) | BIT(NET_HOLD_QUIET_MOVE),
    /* the quiet point reached (moved, exported, or failed and closed), or closed meanwhile */
    [NET_HOLD_MOVE] = BIT(NET_HOLD_NONE),
    /* the quiet state ended: the move goes on; or closed meanwhile: the move is off */
    [NET_HOLD_QUIET_MOVE] = BIT(NET_HOLD_MOVE) | BIT(NET_HOLD_QUIET),
};

static const uint32_t hold_flags[] = {
    [NET_HOLD_NONE] = 0,
    [NET_HOLD_QUIET] = NET_F_QUIET,
    [NET_HOLD_MOVE] = NET_F_MIGRATING,
    [NET_HOLD_QUIET_MOVE] = NET_F_QUIET | NET_F_MIGRATING,
};

_Static_assert(HD_ARRAY_SIZE(state_next) == NET_CONN_CLOSED + 1, "a row per state");
_Static_assert(HD_ARRAY_SIZE(hold_next) == NET_HOLD_QUIET_MOVE + 1, "a row per hold");
_Static_assert(HD_ARRAY_SIZE(hold_flags) == HD_ARRAY_SIZE(hold_next), "flags per hold");

void net_conn_state_set(struct net_conn *c, enum net_conn_state to)
{
    enum net_conn_state from = c->state;
    HD_ASSERT((unsigned)from < HD_ARRAY_SIZE(state_next) &&
              (unsigned)to < HD_ARRAY_SIZE(state_next));
    HD_ASSERT(state_next[from] & BIT(to));
    /* A move or export is off once the connection closes, done once it went elsewhere. */
    HD_ASSERT(to != NET_CONN_CLOSED || c->hold == NET_HOLD_NONE || c->hold == NET_HOLD_QUIET);
    /* Freed (CLOSED) only once the kernel holds no op of it and no handler of it runs. */
    HD_ASSERT(to != NET_CONN_CLOSED || (c->depth == 0 && !hd_op_busy(&c->recv_op) &&
                                        !hd_op_busy(&c->send_op) && !hd_op_busy(&c->ctl_op)));
    c->state = to;
}

void net_conn_hold_set(struct net_conn *c, enum net_conn_hold to)
{
    enum net_conn_hold from = c->hold;
    HD_ASSERT((unsigned)from < HD_ARRAY_SIZE(hold_next) && (unsigned)to < HD_ARRAY_SIZE(hold_next));
    HD_ASSERT(hold_next[from] & BIT(to));
    HD_ASSERT((c->flags & (NET_F_QUIET | NET_F_MIGRATING)) == hold_flags[from]); /* only here */
    /* Held away from the steady state only while open (a close lets go of moves; a quiet state
     * may end after the close, from the codec). */
    HD_ASSERT(c->state == NET_CONN_OPEN || to == NET_HOLD_NONE || to == NET_HOLD_QUIET);
    /* A move's package exists exactly while it waits (a close frees it, the step sends it). */
    HD_ASSERT((to == NET_HOLD_MOVE || to == NET_HOLD_QUIET_MOVE) == (c->migration != NULL));
    c->hold = (uint8_t)to;
    c->flags = (c->flags & ~(NET_F_QUIET | NET_F_MIGRATING)) | hold_flags[to];
}
