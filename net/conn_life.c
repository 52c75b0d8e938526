/* conn_life.c - a connection's life as two state machines, each changed in one function that
 * checks every transition against its table (a wrong one is an assertion, in every build):
 * - the state every app sees (enum net_conn_state, net.h): CONNECTING -> OPEN -> CLOSING ->
 *   CLOSED, or CONNECTING -> CLOSING (a connect that failed or timed out), or OPEN -> CLOSED
 *   without CLOSING (moved to another shard or exported to another process: released without
 *   on_close, the fd goes on elsewhere);
 * - while OPEN, what holds the connection away from its steady state (recv, codec, send queue):
 *   enum net_conn_hold, a quiet point a codec asked for (conn_quiet.c), a move to another shard
 *   or an export to another process waiting for its quiet point (migrate.c, export.c), or a move
 *   asked for while quiet, which waits for the quiet point's end first, or raw bytes carried
 *   from before (a move, an import, a hand-over, a quiet read) that wait for their replay.
 * What only a held connection needs (carried bytes, a move's package) is struct net_conn_move,
 * taken from the shard's pool here as the connection leaves NET_HOLD_NONE and given back as it
 * returns. The data path tests the hold in one mask with its own flags: NET_F_QUIET,
 * NET_F_MIGRATING and NET_F_CARRY mirror it and are written here only. Runs on the connection's
 * shard; owns the move state between those two changes. */
#include <errno.h>

#include "net_impl.h"

#define BIT(x) (1u << (x))

static const uint8_t state_next[] = {
    [NET_CONN_CONNECTING] = BIT(NET_CONN_OPEN) | BIT(NET_CONN_CLOSING),
    [NET_CONN_OPEN] = BIT(NET_CONN_CLOSING) | BIT(NET_CONN_CLOSED),
    [NET_CONN_CLOSING] = BIT(NET_CONN_CLOSED),
    [NET_CONN_CLOSED] = 0,
};

static const uint8_t hold_next[] = {
    [NET_HOLD_NONE] = BIT(NET_HOLD_QUIET) | BIT(NET_HOLD_MOVE) | BIT(NET_HOLD_CARRY),
    /* quiet again: another round (net_conn_quiet_begin inside quiesced); ended with bytes kept
     * that the replay has not delivered yet (paused): they are carried */
    [NET_HOLD_QUIET] =
        BIT(NET_HOLD_NONE) | BIT(NET_HOLD_QUIET) | BIT(NET_HOLD_QUIET_MOVE) | BIT(NET_HOLD_CARRY),
    /* the quiet point reached (moved, exported, or failed and closed), or closed meanwhile;
     * carried bytes it had wait for the step to take them, or for the release */
    [NET_HOLD_MOVE] = BIT(NET_HOLD_NONE) | BIT(NET_HOLD_CARRY),
    /* the quiet state ended: the move goes on; or closed meanwhile: the move is off */
    [NET_HOLD_QUIET_MOVE] = BIT(NET_HOLD_MOVE) | BIT(NET_HOLD_QUIET),
    /* replayed (or released); a quiet point or a move asked for before that */
    [NET_HOLD_CARRY] = BIT(NET_HOLD_NONE) | BIT(NET_HOLD_QUIET) | BIT(NET_HOLD_MOVE),
};

static const uint32_t hold_flags[] = {
    [NET_HOLD_NONE] = 0,
    [NET_HOLD_QUIET] = NET_F_QUIET,
    [NET_HOLD_MOVE] = NET_F_MIGRATING,
    [NET_HOLD_QUIET_MOVE] = NET_F_QUIET | NET_F_MIGRATING,
    [NET_HOLD_CARRY] = NET_F_CARRY,
};
#define HOLD_FLAGS (NET_F_QUIET | NET_F_MIGRATING | NET_F_CARRY)

_Static_assert(HD_ARRAY_SIZE(state_next) == NET_CONN_CLOSED + 1, "a row per state");
_Static_assert(HD_ARRAY_SIZE(hold_next) == NET_HOLD_CARRY + 1, "a row per hold");
_Static_assert(HD_ARRAY_SIZE(hold_flags) == HD_ARRAY_SIZE(hold_next), "flags per hold");

void net_conn_state_set(struct net_conn *c, enum net_conn_state to)
{
    enum net_conn_state from = c->state;
    HD_ASSERT((unsigned)from < HD_ARRAY_SIZE(state_next) &&
              (unsigned)to < HD_ARRAY_SIZE(state_next));
    HD_ASSERT(state_next[from] & BIT(to));
    /* A move or export is off once the connection closes, done once it went elsewhere. */
    HD_ASSERT(to != NET_CONN_CLOSED ||
              (c->hold != NET_HOLD_MOVE && c->hold != NET_HOLD_QUIET_MOVE));
    /* Freed (CLOSED) only once the kernel holds no op of it and no handler of it runs. */
    HD_ASSERT(to != NET_CONN_CLOSED || (c->depth == 0 && !hd_op_busy(&c->recv_op) &&
                                        !hd_op_busy(&c->send_op) && !hd_op_busy(&c->ctl_op)));
    c->state = to;
}

static bool moving(enum net_conn_hold h)
{
    return h == NET_HOLD_MOVE || h == NET_HOLD_QUIET_MOVE;
}

int net_conn_hold_set(struct net_conn *c, enum net_conn_hold to)
{
    enum net_conn_hold from = c->hold;
    HD_ASSERT((unsigned)from < HD_ARRAY_SIZE(hold_next) && (unsigned)to < HD_ARRAY_SIZE(hold_next));
    HD_ASSERT(hold_next[from] & BIT(to));
    HD_ASSERT((c->flags & HOLD_FLAGS) == hold_flags[from]); /* written only here */
    HD_ASSERT((from == NET_HOLD_NONE) == (c->move == NULL));
    /* Held away from the steady state only while open (a close lets go of moves; a quiet state
     * may end after the close, from the codec; carried bytes wait for the release). */
    HD_ASSERT(c->state == NET_CONN_OPEN || !moving(to));
    /* A move's package exists exactly while it waits: set just after the hold enters a move
     * (migrate.c), gone before it leaves one (a close frees it, the step sends it). */
    HD_ASSERT(!moving(from) || moving(to) == (c->move->migration != NULL));
    HD_ASSERT(to != NET_HOLD_CARRY || c->move == NULL || c->move->pending_head != NULL);
    if (from == NET_HOLD_NONE) {
        struct net_conn_move *m = hd_slab_get(c->ns->moves);
        if (m == NULL)
            return -ENOMEM;
        *m = (struct net_conn_move){0};
        c->move = m;
    } else if (to == NET_HOLD_NONE) {
        HD_ASSERT(c->move->pending_head == NULL && c->move->migration == NULL);
        hd_slab_put(c->ns->moves, c->move);
        c->move = NULL;
    }
    c->hold = (uint8_t)to;
    c->flags = (c->flags & ~HOLD_FLAGS) | hold_flags[to];
    return 0;
}
