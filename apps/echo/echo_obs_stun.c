/* echo_obs_stun.c - hderp-echo observe's STUN probes: every node with a STUN port (from the DERP
 * map) gets a Binding Request every ECHO_OBS_STUN_INTERVAL_MS from one UDP socket per address
 * family; the transaction ID names the node and the request, so a reply is matched to the one
 * request outstanding (a request unanswered when the next one goes is lost). Runs on the shard. */
#include <errno.h>
#include <string.h>

#include "derp_stun.h"
#include "echo_obs.h"

#define STUN_MAGIC "HDOS"

static struct echo_obs *stun_obs;

static void txid_of(uint8_t txid[DERP_STUN_TXID_LEN], unsigned node, uint32_t seq)
{
    memcpy(txid, STUN_MAGIC, 4);
    for (int i = 0; i < 4; i++) {
        txid[4 + i] = (uint8_t)(node >> (24 - 8 * i));
        txid[8 + i] = (uint8_t)(seq >> (24 - 8 * i));
    }
}

static void on_reply(struct net_udp *u, const uint8_t *data, size_t len,
                     const struct net_addr *from, void *arg)
{
    (void)u, (void)from, (void)arg;
    struct echo_obs *ob = stun_obs;
    uint8_t txid[DERP_STUN_TXID_LEN];
    struct derp_addr mapped;
    if (derp_stun_parse_response(data, len, txid, &mapped) < 0 || memcmp(txid, STUN_MAGIC, 4))
        return;
    unsigned node = 0;
    uint32_t seq = 0;
    for (int i = 0; i < 4; i++) {
        node = node << 8 | txid[4 + i];
        seq = seq << 8 | txid[8 + i];
    }
    if (node >= ob->o->nodes_count)
        return;
    struct echo_obs_stun *st = &ob->stun[node];
    if (st->sent_ns == 0 || seq != st->seq)
        return; /* late (already counted lost) or a duplicate */
    uint64_t now = hd_clock_ns(), rtt = now - st->sent_ns;
    st->sent_ns = 0;
    st->received++;
    hd_hist_record(&st->total_ns, rtt);
    echo_obs_window_note(st->short_w, ECHO_OBS_SHORT_SLOTS, ECHO_OBS_SHORT_SLOT_MS, now / 1000000,
                         ECHO_OBS_NOTE_ECHO, rtt);
}

static void stun_tick(struct hd_timer *t)
{
    struct echo_obs *ob = hd_container_of(t, struct echo_obs, stun_tick);
    uint64_t now = hd_clock_ns();
    for (unsigned i = 0; i < ob->o->nodes_count; i++) {
        struct echo_obs_stun *st = &ob->stun[i];
        const struct echo_obs_node *n = &ob->o->nodes[i];
        if (!n->has_stun)
            continue;
        if (st->sent_ns) {
            st->lost++;
            echo_obs_window_note(st->short_w, ECHO_OBS_SHORT_SLOTS, ECHO_OBS_SHORT_SLOT_MS,
                                 now / 1000000, ECHO_OBS_NOTE_LOST, 0);
        }
        struct net_udp *u = n->stun.sa.sa_family == AF_INET6 ? ob->udp6 : ob->udp4;
        uint8_t req[64], txid[DERP_STUN_TXID_LEN];
        txid_of(txid, i, ++st->seq);
        ssize_t len = derp_stun_build_request(req, sizeof(req), txid);
        st->sent_ns = 0;
        if (u && len > 0 && net_udp_send(u, req, (size_t)len, &n->stun) == 0) {
            st->sent_ns = now;
            st->sent++;
        }
    }
    hd_timer_start(ob->s, t, ECHO_OBS_STUN_INTERVAL_MS);
}

static int open_family(struct echo_obs *ob, int family, struct net_udp **out)
{
    struct net_addr any;
    int rc = net_addr_parse(family == AF_INET ? "0.0.0.0:0" : "[::]:0", &any);
    if (rc == 0)
        rc = net_udp_open(ob->s, &any, on_reply, ob, out);
    if (rc < 0)
        hd_log(HD_LOG_WARN, "observe: no %s STUN socket: %s", family == AF_INET ? "IPv4" : "IPv6",
               strerror(-rc));
    return rc;
}

int echo_obs_stun_start(struct echo_obs *ob)
{
    stun_obs = ob;
    bool v4 = false, v6 = false;
    for (unsigned i = 0; i < ob->o->nodes_count; i++) {
        const struct echo_obs_node *n = &ob->o->nodes[i];
        ob->stun[i].node = n;
        hd_hist_init(&ob->stun[i].total_ns);
        for (unsigned j = 0; j < ECHO_OBS_SHORT_SLOTS; j++)
            hd_hist_init(&ob->stun[i].short_w[j].rtt_ns);
        v4 |= n->has_stun && n->stun.sa.sa_family == AF_INET;
        v6 |= n->has_stun && n->stun.sa.sa_family == AF_INET6;
    }
    if (v4)
        (void)open_family(ob, AF_INET, &ob->udp4);
    if (v6)
        (void)open_family(ob, AF_INET6, &ob->udp6);
    hd_timer_init(&ob->stun_tick, stun_tick);
    if (v4 || v6)
        hd_timer_start(ob->s, &ob->stun_tick, 1);
    return 0;
}

void echo_obs_stun_stop(struct echo_obs *ob)
{
    hd_timer_stop(ob->s, &ob->stun_tick);
    if (ob->udp4)
        net_udp_close(ob->udp4);
    if (ob->udp6)
        net_udp_close(ob->udp6);
    ob->udp4 = ob->udp6 = NULL;
}
