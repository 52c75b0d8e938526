/* server_wait.c - senders wait for a backed-up receiver instead of losing their packets.
 *
 * derper drops: a receiver whose two 32-packet queues are full loses its oldest packets, and an
 * unpaced sender keeps being read at full speed only for most of what it sends to be dropped
 * (issue 25: 7.5 Gbit/s read, 2 Gbit/s delivered). Here a sender that streams to one receiver
 * on its own shard stops being read while that receiver is backed up: its bytes stay in the
 * kernel, TCP's window holds the sender back, and the CPU goes to the packets that can leave.
 *
 * When a sender waits: its packet went into the receiver's queue behind a backlog (the
 * connection over its net high watermark, or packets already queued), it sent its last
 * SRV_WAIT_RUN_MIN packets to that one receiver (pausing a sender that spreads its packets
 * would hold its traffic to healthy receivers back: that one keeps derper's drop-oldest), and it
 * is an ordinary client (mesh links and watchers never wait; neither does a client on its way
 * to another shard). It waits until the receiver's queues drain (srv_wait_drained, when net
 * says its send classes drained under the watermark) or the receiver leaves the shard, at most
 * --sender-wait-ms; a wait that runs out is counted and the sender then gets derper's policy for
 * SRV_WAIT_OFF_MS, so a receiver that never reads costs its senders one bounded wait a period,
 * never a standstill. A waiting sender's own pings wait with it (they are behind its packets in its
 * TCP stream).
 *
 * Runs on the shard of both connections (the receiver was found in this shard's tables). Owns
 * nothing: the links live in struct srv_client (wait_for, waiters, wait_next, wait_pprev). */
#include "server.h"

static void unlink_waiter(struct srv_client *cl)
{
    HD_ASSERT(cl->wait_for != NULL && cl->wait_pprev != NULL);
    *cl->wait_pprev = cl->wait_next;
    if (cl->wait_next)
        cl->wait_next->wait_pprev = cl->wait_pprev;
    cl->wait_next = NULL;
    cl->wait_pprev = NULL;
    cl->wait_for = NULL;
}

/* The sender's run of packets to one destination (the first 8 bytes of its key). */
static uint32_t run_note(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN])
{
    uint64_t prefix;
    memcpy(&prefix, dst, sizeof(prefix));
    if (prefix != cl->run_dst) {
        cl->run_dst = prefix;
        cl->run_len = 0;
    }
    if (cl->run_len < UINT16_MAX)
        cl->run_len++;
    return cl->run_len;
}

static bool may_wait(const struct srv_client *cl, const struct srv_client *rcv, uint64_t now_ms)
{
    return cl->ds->cfg->sender_wait_ms > 0 && cl != rcv && cl->phase == SRV_CLIENT_ACTIVE &&
           rcv->phase == SRV_CLIENT_ACTIVE && !cl->mesh && !cl->watcher && !cl->placing &&
           !cl->going_home && cl->exporting == NULL && now_ms >= cl->wait_off_ms &&
           net_conn_state(cl->conn) == NET_CONN_OPEN;
}

bool srv_wait_note(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN], struct srv_client *rcv)
{
    uint32_t run = run_note(cl, dst);
    if (rcv == NULL || run < SRV_WAIT_RUN_MIN)
        return false;
    struct srv_shard *ds = cl->ds;
    uint64_t now_ms = hd_now_ms(ds->s);
    if (!may_wait(cl, rcv, now_ms))
        return false;
    HD_ASSERT(rcv->ds == ds && cl->wait_for == NULL);
    cl->wait_for = rcv;
    cl->wait_next = rcv->waiters;
    cl->wait_pprev = &rcv->waiters;
    if (rcv->waiters)
        rcv->waiters->wait_pprev = &cl->wait_next;
    rcv->waiters = cl;
    ds->ctr.sender_waits++;
    srv_client_read_pause(cl, ds->cfg->sender_wait_ms);
    return true;
}

/* Every sender waiting for rcv reads again from the next tick (never from inside net's flush
 * of the receiver: a resumed sender routes packets to it at once). */
static void wake_all(struct srv_client *rcv)
{
    while (rcv->waiters) {
        struct srv_client *w = rcv->waiters;
        HD_ASSERT(w->wait_for == rcv);
        unlink_waiter(w);
        srv_client_read_resume_soon(w);
    }
}

void srv_wait_drained(struct srv_client *rcv)
{
    if (rcv->waiters)
        wake_all(rcv);
}

void srv_wait_expired(struct srv_client *cl)
{
    if (cl->wait_for == NULL)
        return;
    unlink_waiter(cl);
    cl->ds->ctr.sender_wait_timeouts++;
    cl->wait_off_ms = hd_now_ms(cl->ds->s) + SRV_WAIT_OFF_MS;
}

void srv_wait_leave(struct srv_client *cl)
{
    if (cl->wait_for)
        unlink_waiter(cl);
    if (cl->waiters)
        wake_all(cl);
    HD_ASSERT(cl->wait_for == NULL && cl->waiters == NULL);
}
