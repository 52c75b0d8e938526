/* test_bus_self.c - a message to the own shard behaves as one to another shard (issue 27): it is
 * queued, never run inside hd_bus_send, runs at the next drain in send order, a handler that sends
 * to itself again runs on a later pass, and the queue is bounded (-EAGAIN at exactly the room
 * hd_bus_room reports, counted in bus_full). Before the change, hd_bus_send to the own shard was
 * -EINVAL and kit_route ran the handler inside the caller. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "harness.h"
#include <hd/kit.h>

struct self_ctx {
    struct hd_shard *s;
    bool in_send;      /* true while the body is inside hd_bus_send / kit_route */
    bool ran_inside;   /* a handler ran while in_send was true */
    uint64_t next;     /* order check */
    uint64_t ran;      /* handlers run */
    unsigned accepted; /* sends accepted before -EAGAIN */
    unsigned room;     /* hd_bus_room(self) before the flood */
    int full_rc;
    bool in_handler; /* inside flood_msg */
    bool chained;    /* the message a handler sent itself ran after that handler returned */
};

static struct self_ctx *sc;

static void chain_msg(struct hd_shard *s, const struct hd_msg *m)
{
    (void)m;
    /* Sent by the last flood handler: it must not run inside it. */
    sc->chained = !sc->in_handler;
    hdt_done(s);
}

static void flood_msg(struct hd_shard *s, const struct hd_msg *m)
{
    HDT_CHECK(s == sc->s);
    if (sc->in_send)
        sc->ran_inside = true;
    HDT_CHECK(m->u64[0] == sc->next); /* in send order */
    HDT_CHECK(m->u64[1] == UINT64_C(0x5e1f));
    sc->next++;
    sc->ran++;
    if (sc->ran == sc->accepted + 1) { /* the last one (kit_route's): send to self again */
        sc->in_handler = true;
        struct hd_msg c = {.fn = chain_msg};
        HDT_CHECK(hd_bus_send(s, hd_shard_id(s), &c) == 0);
        sc->in_handler = false;
    }
}

static void self_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    sc->s = s;
    sc->room = hd_bus_room(s, hd_shard_id(s));
    sc->in_send = true;
    struct hd_msg m = {.fn = flood_msg, .u64 = {0, 0x5e1f}};
    int rc;
    while ((rc = hd_bus_send(s, hd_shard_id(s), &m)) == 0) {
        sc->accepted++;
        m.u64[0]++;
    }
    sc->full_rc = rc;
    HDT_CHECK(hd_bus_room(s, hd_shard_id(s)) == 0);
    sc->in_send = false;
    /* kit_route to a key this shard owns (one shard: every key): queued the same way, so it
     * is refused too while the queue is full, and accepted after the drain made room. */
    HDT_CHECK(kit_route(s, "k", 1, &m) == -EAGAIN);
}

static void self_body_after(struct hd_shard *s, void *arg);

static void self_task(void *arg)
{
    self_body_after(arg, NULL);
}

static void self_body_after(struct hd_shard *s, void *arg)
{
    (void)arg;
    /* Runs after the drain that emptied the queue. */
    HDT_CHECK(sc->ran == sc->accepted);
    sc->in_send = true;
    struct hd_msg m = {.fn = flood_msg, .u64 = {sc->accepted, 0x5e1f}};
    HDT_CHECK(kit_route(s, "k", 1, &m) == 0);
    HDT_CHECK(sc->ran == sc->accepted); /* not run inside kit_route */
    sc->in_send = false;
}

static void self_start(struct hd_shard *s, void *arg)
{
    self_body(s, arg);
    /* The body runs as a task, before this tick's drain (which runs the flood); a task it
     * defers runs at the next tick, after that drain. */
    HDT_CHECK(hd_defer(s, self_task, s) == 0);
}

Test(test_reactor_bus_self, own_shard_is_queued_ordered_bounded)
{
    static struct self_ctx c;
    memset(&c, 0, sizeof(c));
    sc = &c;
    struct hdt_options o = {.shards = 1};
    struct hd_runtime *rt;
    cr_assert_eq(hdt_run(&o, self_start, NULL, &rt), 0);
    cr_assert_eq(c.full_rc, -EAGAIN);
    cr_assert_eq(c.accepted, c.room, "accepted %u, room said %u", c.accepted, c.room);
    cr_assert_eq(c.room, HD_BUS_SELF_SIZE - HD_BUS_BULK_RESERVE);
    cr_assert(!c.ran_inside, "a handler ran inside hd_bus_send or kit_route");
    cr_assert_eq(c.ran, (uint64_t)c.accepted + 1);
    cr_assert(c.chained, "a message sent to self from a handler ran in the same pass");
    const struct hd_shard_stats *st = hd_shard_stats(hd_runtime_shard(rt, 0));
    cr_assert_geq(st->bus_full, 2); /* the flood's last send and the refused kit_route */
    cr_assert_eq(st->bus_received, c.ran + 1);
    hd_runtime_destroy(rt);
}
