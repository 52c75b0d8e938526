/* test_udp.c - UDP sockets (net_udp) on real loopback sockets, through the shard's buffer ring
 * (multishot recvmsg) and through the one-recvmsg fallback: a burst of datagrams arrives whole,
 * in order, with its source; a burst of sends (more than the old 32 slots) goes out whole; a
 * datagram larger than a ring buffer is counted and dropped without deafening the socket; equal
 * datagrams to one address leave as GSO sends and arrive as the datagrams they were; a
 * socket closed from its own receive callback is freed once, after the callback. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include <hd/net.h>

#define BURST 64u /* fits the default socket receive buffer on loopback */

static struct {
    bool no_buf_ring, close_in_cb, oversize, same_size;
    int peer; /* a plain socket: the other end */
    struct sockaddr_in peer_addr;
    struct net_udp *u;
    struct hd_timer timer;
    struct hd_shard *s;
    unsigned got, bad_order, bad_source, echoed, bad_echo, polls;
    uint64_t truncated, gso_sends;
    bool closed_once;
} g;

static const struct hd_module *const net_layers[] = {&net_module};

static void *const *net_layers_args(void)
{
    static struct net_shard_options opt;
    static void *args[] = {&opt};
    opt = (struct net_shard_options){.no_buf_ring = g.no_buf_ring};
    return args;
}

static size_t size_of(unsigned i)
{
    return g.same_size ? 1000 : 4 + (i * 37) % 500;
}

static void on_datagram(struct net_udp *u, const uint8_t *data, size_t len,
                        const struct net_addr *from, void *arg)
{
    (void)arg;
    if (g.close_in_cb) {
        HDT_CHECK(!g.closed_once);
        g.closed_once = true;
        net_udp_close(u); /* nothing of u may be touched by net/ after this returns */
        g.u = NULL;
        return;
    }
    uint32_t seq;
    memcpy(&seq, data, 4);
    if (seq != g.got || len != size_of(seq))
        g.bad_order++;
    if (from->len != sizeof(struct sockaddr_in) || from->in4.sin_port != g.peer_addr.sin_port)
        g.bad_source++;
    g.got++;
    HDT_CHECK(net_udp_send(u, data, len, from) == 0); /* all sent back in this tick's burst */
}

static void on_timer(struct hd_timer *t)
{
    (void)t;
    uint8_t buf[2048];
    ssize_t n;
    while ((n = recv(g.peer, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
        uint32_t seq;
        memcpy(&seq, buf, 4);
        if (seq != g.echoed || (size_t)n != size_of(seq))
            g.bad_echo++; /* a GSO send must come out as the datagrams that went in */
        g.echoed++;
    }
    bool done = g.close_in_cb ? g.closed_once : g.echoed == BURST;
    if (done || ++g.polls > 20000) { /* a bounded wait: 20 s */
        if (g.u) {
            g.truncated = net_udp_stats(g.u)->truncated;
            g.gso_sends = net_udp_stats(g.u)->gso_sends;
            net_udp_close(g.u);
            g.u = NULL;
        }
        hd_runtime_stop(hd_shard_runtime(g.s));
        return;
    }
    hd_timer_start(g.s, &g.timer, 1);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    g.s = s;
    struct net_addr a;
    HDT_CHECK(net_addr_parse("127.0.0.1:0", &a) == 0);
    HDT_CHECK(net_udp_open(s, &a, on_datagram, NULL, &g.u) == 0);
    struct sockaddr_in me;
    socklen_t len = sizeof(me);
    HDT_CHECK(getsockname(net_udp_fd(g.u), (struct sockaddr *)&me, &len) == 0);
    uint8_t buf[20000] = {0};
    if (g.oversize) /* larger than a ring buffer: counted, the socket keeps reading */
        HDT_CHECK(sendto(g.peer, buf, sizeof(buf), 0, (struct sockaddr *)&me, len) > 0);
    for (uint32_t i = 0; i < (g.close_in_cb ? 3 : BURST); i++) {
        memcpy(buf, &i, 4);
        HDT_CHECK(sendto(g.peer, buf, size_of(i), 0, (struct sockaddr *)&me, len) ==
                  (ssize_t)size_of(i));
    }
    hd_timer_init(&g.timer, on_timer);
    hd_timer_start(s, &g.timer, 1);
}

static void run(bool no_buf_ring, bool close_in_cb, bool oversize)
{
    bool same_size = g.same_size;
    memset(&g, 0, sizeof(g));
    g.same_size = same_size;
    g.no_buf_ring = no_buf_ring, g.close_in_cb = close_in_cb, g.oversize = oversize;
    g.peer = socket(AF_INET, SOCK_DGRAM, 0);
    cr_assert_geq(g.peer, 0);
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(g.peer, (struct sockaddr *)&lo, sizeof(lo)), 0);
    socklen_t len = sizeof(g.peer_addr);
    cr_assert_eq(getsockname(g.peer, (struct sockaddr *)&g.peer_addr, &len), 0);
    struct hdt_options o = {
        .shards = 1, .layers = net_layers, .layers_args = net_layers_args(), .layers_count = 1};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
    close(g.peer);
}

Test(net_udp, burst_through_the_buffer_ring)
{
    run(false, false, false);
    cr_assert_eq(g.got, BURST);
    cr_assert_eq(g.bad_order, 0);
    cr_assert_eq(g.bad_source, 0);
    cr_assert_eq(g.echoed, BURST, "every datagram sent back (more sends at once than 32)");
    cr_assert_eq(g.bad_echo, 0);
}

Test(net_udp, equal_datagrams_to_one_address_go_as_gso_sends)
{
    g.same_size = true;
    run(false, false, false);
    cr_assert_eq(g.got, BURST);
    cr_assert_eq(g.echoed, BURST);
    cr_assert_eq(g.bad_echo, 0, "every datagram whole, in order");
    cr_assert_gt(g.gso_sends, 0, "a tick's run to one address went as one sendmsg");
}

Test(net_udp, burst_through_the_plain_recv)
{
    run(true, false, false);
    cr_assert_eq(g.got, BURST);
    cr_assert_eq(g.bad_order, 0);
    cr_assert_eq(g.bad_source, 0);
    cr_assert_eq(g.echoed, BURST);
}

Test(net_udp, oversize_datagram_counted_and_the_socket_reads_on)
{
    run(false, false, true);
    cr_assert_eq(g.truncated, 1);
    cr_assert_eq(g.got, BURST);
    cr_assert_eq(g.echoed, BURST);
}

Test(net_udp, close_in_the_callback_plain_recv)
{
    run(true, true, false);
    cr_assert(g.closed_once);
}

Test(net_udp, close_in_the_callback_buffer_ring)
{
    run(false, true, false);
    cr_assert(g.closed_once);
}
