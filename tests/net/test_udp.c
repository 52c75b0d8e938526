/* test_udp.c - UDP sockets (net_udp) on real loopback sockets, through the shard's buffer ring
 * (multishot recvmsg) and through the one-recvmsg fallback: a burst of datagrams arrives whole,
 * in order, with its source; a burst of sends (more than the old 32 slots) goes out whole; a
 * datagram larger than a ring buffer is counted and dropped without deafening the socket (or,
 * with GRO's own 64 KiB buffers, arrives whole); equal datagrams to one address leave as GSO
 * sends and arrive as the datagrams they were; datagrams a peer sends with GSO reach the socket
 * coalesced (UDP GRO) and the app gets them one by one, in order, with their sizes; a socket
 * closed from its own receive callback is freed once, after the callback. */
#include <netinet/udp.h>
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include <hd/net.h>

#define BURST     64u /* fits the default socket receive buffer on loopback */
#define GSO_BATCH 16u /* datagrams per GSO send of the peer (gso_in) */
#define BIG       20000u

static struct {
    bool no_buf_ring, close_in_cb, oversize, same_size, gso_in, no_gro;
    int peer; /* a plain socket: the other end */
    struct sockaddr_in peer_addr;
    struct net_udp *u;
    struct hd_timer timer;
    struct hd_shard *s;
    unsigned got, bad_order, bad_source, echoed, bad_echo, polls, big;
    uint64_t truncated, gso_sends, gro_receives;
    bool closed_once;
} g;

static const struct hd_module *const net_layers[] = {&net_module};

static void *const *net_layers_args(void)
{
    static struct net_shard_options opt;
    static void *args[] = {&opt};
    opt = (struct net_shard_options){.no_buf_ring = g.no_buf_ring, .no_udp_gro = g.no_gro};
    return args;
}

static size_t size_of(unsigned i)
{
    if (g.gso_in) /* a GSO send's datagrams: one size, the last one shorter */
        return i % GSO_BATCH == GSO_BATCH - 1 ? 200 + i : 1000;
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
    if (len == BIG) { /* the oversize datagram, where it fits (GRO's own buffers) */
        g.big++;
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
            g.gro_receives = net_udp_stats(g.u)->gro_receives;
            net_udp_close(g.u);
            g.u = NULL;
        }
        hd_runtime_stop(hd_shard_runtime(g.s));
        return;
    }
    hd_timer_start(g.s, &g.timer, 1);
}

/* The peer sends BURST datagrams as BURST / GSO_BATCH sendmsgs with UDP_SEGMENT: on loopback
 * each reaches a UDP_GRO socket as one coalesced buffer (a socket without GRO gets them cut). */
static void send_gso(const struct sockaddr_in *to, socklen_t tolen)
{
    static uint8_t batch[GSO_BATCH * 1000];
    for (uint32_t first = 0; first < BURST; first += GSO_BATCH) {
        size_t off = 0;
        for (uint32_t i = first; i < first + GSO_BATCH; i++) {
            memset(batch + off, (int)i, size_of(i));
            memcpy(batch + off, &i, 4);
            off += size_of(i);
        }
        union {
            char buf[CMSG_SPACE(sizeof(uint16_t))];
            struct cmsghdr align;
        } cm = {0};
        struct iovec iov = {.iov_base = batch, .iov_len = off};
        struct msghdr m = {.msg_name = (void *)to,
                           .msg_namelen = tolen,
                           .msg_iov = &iov,
                           .msg_iovlen = 1,
                           .msg_control = cm.buf,
                           .msg_controllen = sizeof(cm.buf)};
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t seg = 1000;
        memcpy(CMSG_DATA(c), &seg, sizeof(seg));
        HDT_CHECK(sendmsg(g.peer, &m, 0) == (ssize_t)off);
    }
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
    static uint8_t buf[BIG];
    memset(buf, 0, sizeof(buf));
    if (g.oversize) /* larger than a ring buffer: counted, the socket keeps reading */
        HDT_CHECK(sendto(g.peer, buf, sizeof(buf), 0, (struct sockaddr *)&me, len) > 0);
    if (g.gso_in) {
        send_gso(&me, len);
        hd_timer_init(&g.timer, on_timer);
        hd_timer_start(s, &g.timer, 1);
        return;
    }
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
    bool same_size = g.same_size, gso_in = g.gso_in, no_gro = g.no_gro;
    memset(&g, 0, sizeof(g));
    g.same_size = same_size, g.gso_in = gso_in, g.no_gro = no_gro;
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
    g.no_gro = true; /* the shard's ring, 16 KiB buffers */
    run(false, false, true);
    cr_assert_eq(g.truncated, 1);
    cr_assert_eq(g.big, 0);
    cr_assert_eq(g.got, BURST);
    cr_assert_eq(g.echoed, BURST);
}

Test(net_udp, large_datagram_arrives_whole_in_the_gro_buffers)
{
    run(false, false, true);
    cr_assert_eq(g.truncated, 0);
    cr_assert_eq(g.big, 1, "20000 bytes fit a 64 KiB buffer of the socket's own ring");
    cr_assert_eq(g.got, BURST);
    cr_assert_eq(g.echoed, BURST);
}

static void check_gso_in(void)
{
    cr_assert_eq(g.got, BURST);
    cr_assert_eq(g.bad_order, 0, "every datagram cut out whole, in order, with its size");
    cr_assert_eq(g.bad_source, 0);
    cr_assert_eq(g.echoed, BURST);
    cr_assert_eq(g.bad_echo, 0);
}

Test(net_udp, gso_sent_datagrams_arrive_coalesced_and_cut_apart_ring)
{
    g.gso_in = true;
    run(false, false, false);
    check_gso_in();
    cr_assert_gt(g.gro_receives, 0, "the kernel handed over coalesced buffers (UDP GRO)");
}

Test(net_udp, gso_sent_datagrams_arrive_coalesced_and_cut_apart_plain_recv)
{
    g.gso_in = true;
    run(true, false, false);
    check_gso_in();
    cr_assert_gt(g.gro_receives, 0, "the kernel handed over coalesced buffers (UDP GRO)");
}

Test(net_udp, gso_sent_datagrams_without_gro_arrive_cut_by_the_kernel)
{
    g.gso_in = true, g.no_gro = true;
    run(false, false, false);
    check_gso_in();
    cr_assert_eq(g.gro_receives, 0);
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
