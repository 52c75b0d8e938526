/* test_conformance_region_link.c - spec §7 from the far end of a node's mesh link: a real
 * hderp-server node whose -mesh-with list names itself and one or two scripted nodes, played by
 * the test thread as a derper node would see the link (a listening socket whose port is known
 * before the node starts, the server side of the DERP handshake done by hand, frames both ways
 * on a raw buffer). They pin the link's login (Upgrade, Host, the node's own key, the mesh key,
 * WatchConns), ForwardPacket out once per packet, one hop, NotHere, the forwarder preference of
 * a multiforwarder, forgetting on link loss, and the 5 s redial. The three-node region tests are
 * in test_conformance_region.c; the helpers both share are in region_util.c. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf_support.h"
#include "region_util.h"

TestSuite(test_conformance_region_link, .fini = region_down, .timeout = 240);

/* ---------------------------------------------------------------- a scripted node */

/* The far end of a node's outbound mesh link, played by the test thread (what a derper node
 * would see): a listening socket whose port is known before the node starts, the server side of
 * the DERP handshake done by hand, then frames both ways on a raw buffer. */
struct fake_node {
    int lfd;
    uint16_t port;
    struct derp_keypair kp;
    struct conf_raw link; /* the accepted link: fd and read buffer */
};

#define MESH_JSON "{\"meshKey\":\"" REGION_MESH_HEX "\",\"version\":2}"

static void fake_listen(struct fake_node *f)
{
    memset(f, 0, sizeof(*f));
    f->link.fd = -1;
    CONF_OK(derp_keypair_generate(&f->kp));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(f->lfd, 0);
    cr_assert_eq(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0, "bind: %s", strerror(errno));
    cr_assert_eq(listen(f->lfd, 4), 0);
    cr_assert_eq(getsockname(f->lfd, (struct sockaddr *)&a, &len), 0);
    f->port = ntohs(a.sin_port);
}

static void fake_close(struct fake_node *f)
{
    conf_raw_close(&f->link);
    if (f->lfd >= 0)
        close(f->lfd);
    f->lfd = -1;
}

/* Waits for the node's link (bounded); returns how long it took. */
static int64_t fake_accept(struct fake_node *f, int timeout_ms)
{
    int64_t t0 = conf_now_ms();
    struct pollfd p = {.fd = f->lfd, .events = POLLIN};
    int n = poll(&p, 1, timeout_ms);
    cr_assert_eq(n, 1, "the node did not dial its mesh entry within %d ms", timeout_ms);
    conf_raw_close(&f->link);
    f->link.fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
    cr_assert_geq(f->link.fd, 0, "accept: %s", strerror(errno));
    f->link.buf = malloc(CONF_RAW_BUF_SIZE);
    cr_assert(f->link.buf);
    f->link.off = f->link.len = 0;
    return conf_now_ms() - t0;
}

/* Reads the HTTP request head into link.head; later bytes stay buffered. */
static void fake_read_head(struct fake_node *f)
{
    struct conf_raw *r = &f->link;
    int64_t deadline = conf_now_ms() + CONF_IO_TIMEOUT_MS;
    for (;;) {
        uint8_t *end = memmem(r->buf, r->len, "\r\n\r\n", 4);
        if (end) {
            size_t hl = (size_t)(end + 4 - r->buf);
            cr_assert_lt(hl, sizeof(r->head), "request head too long");
            memcpy(r->head, r->buf, hl);
            r->head[hl] = '\0';
            r->off = hl;
            r->len -= hl;
            return;
        }
        int64_t left = deadline - conf_now_ms();
        struct pollfd p = {.fd = r->fd, .events = POLLIN};
        cr_assert(left > 0 && poll(&p, 1, (int)left) == 1, "no upgrade request from the node");
        ssize_t n = recv(r->fd, r->buf + r->len, 4096, 0);
        cr_assert_gt(n, 0, "the node closed before its upgrade request");
        r->len += (size_t)n;
    }
}

static void fake_write(struct fake_node *f, const void *data, ssize_t len)
{
    cr_assert_gt(len, 0);
    CONF_OK(conf_raw_write(&f->link, data, (size_t)len));
}

/* The server side of the login (§4): the node must ask for /derp with Upgrade: DERP and
 * Host: 127.0.0.1:<port>, log in with its own server key and the mesh key, then WatchConns. */
static void fake_handshake(struct fake_node *f, const struct conf_server *srv)
{
    fake_read_head(f);
    const char *h = f->link.head;
    char host[64];
    snprintf(host, sizeof(host), "\r\nhost: 127.0.0.1:%u\r\n", f->port);
    cr_assert(strncmp(h, "GET /derp HTTP/1.1\r\n", 20) == 0, "request line: %s", h);
    cr_assert(strcasestr(h, "\r\nupgrade: derp\r\n"), "no Upgrade: DERP in %s", h);
    cr_assert(strcasestr(h, host), "no Host: 127.0.0.1:%u in %s", f->port, h);
    char hex[DERP_KEY_HEX_SIZE], resp[256];
    derp_key_hex_format(f->kp.pub.bytes, hex);
    int n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: DERP\r\nConnection: Upgrade\r\n"
                     "Derp-Version: 2\r\nDerp-Public-Key: %s\r\n\r\n",
                     hex);
    fake_write(f, resp, n);
    uint8_t buf[512];
    fake_write(f, buf, derp_server_key_encode(buf, sizeof(buf), &f->kp.pub));

    struct conf_frame fr;
    CONF_OK(conf_raw_read(&f->link, CONF_IO_TIMEOUT_MS, &fr));
    cr_assert_eq(fr.type, DERP_FRAME_CLIENT_INFO, "frame type %u, want ClientInfo", fr.type);
    struct derp_pubkey client;
    struct derp_client_info info;
    uint8_t scratch[DERP_CLIENT_INFO_PLAIN_MAX];
    CONF_OK(derp_client_info_open(fr.p, fr.len, &f->kp, &client, &info, scratch, sizeof(scratch)));
    cr_assert(derp_pubkey_equal(&client, &srv->key), "the link logs in with the server's key");
    cr_assert(info.has_mesh_key && derp_mesh_key_equal(&info.mesh_key, &srv->mesh_key),
              "the link presents the mesh key");
    fake_write(f, buf, derp_server_info_seal(buf, sizeof(buf), &f->kp, &client, NULL, NULL));
    for (;;) {
        CONF_OK(conf_raw_read_nka(&f->link, CONF_IO_TIMEOUT_MS, &fr));
        if (fr.type == DERP_FRAME_WATCH_CONNS)
            break;
        cr_assert(fr.type == DERP_FRAME_NOTE_PREFERRED || fr.type == DERP_FRAME_PING,
                  "frame type %u before WatchConns", fr.type);
    }
    cr_assert_eq(fr.len, 0, "WatchConns is empty");
}

static void fake_present(struct fake_node *f, const struct derp_pubkey *k)
{
    uint8_t buf[64];
    fake_write(f, buf,
               derp_frame_peer_present_encode(buf, sizeof(buf), k->bytes, NULL,
                                              DERP_PEER_PRESENT_IS_REGULAR));
}

/* The next frames on the link are n ForwardPackets "<tag> i" from src to dst, in order. */
static void fake_expect_forwards(struct fake_node *f, const struct derp_pubkey *src,
                                 const struct derp_pubkey *dst, const char *tag, unsigned n)
{
    char text[48];
    for (unsigned i = 0; i < n; i++) {
        struct conf_frame fr;
        CONF_OK(conf_raw_read_nka(&f->link, CONF_IO_TIMEOUT_MS, &fr));
        cr_assert_eq(fr.type, DERP_FRAME_FORWARD_PACKET, "frame type %u, want ForwardPacket",
                     fr.type);
        struct derp_packet pk;
        CONF_OK(derp_frame_forward_packet_decode(fr.p, fr.len, &pk));
        cr_assert(memcmp(pk.src_key, src->bytes, DERP_KEY_LEN) == 0, "%s: src", tag);
        cr_assert(memcmp(pk.dst_key, dst->bytes, DERP_KEY_LEN) == 0, "%s: dst", tag);
        snprintf(text, sizeof(text), "%s %u", tag, i);
        cr_assert(pk.data_len == strlen(text) && memcmp(pk.data, text, pk.data_len) == 0,
                  "got \"%.*s\", want \"%s\"", (int)pk.data_len, pk.data, text);
    }
}

static struct fake_node fake = {.lfd = -1, .link.fd = -1};

/* RFC 6761: never resolves. */
#define UNRESOLVABLE "unresolvable.invalid"

static void fake_down(void)
{
    region_down();
    fake_close(&fake);
}

/* fr is PeerGone(k, NotHere). */
static void expect_not_here(const struct conf_frame *fr, const struct derp_pubkey *k,
                            const char *who)
{
    cr_assert(fr->type == DERP_FRAME_PEER_GONE && fr->len == DERP_PEER_GONE_LEN &&
                  memcmp(fr->p, k->bytes, DERP_KEY_LEN) == 0 &&
                  fr->p[DERP_KEY_LEN] == DERP_PEER_GONE_NOT_HERE,
              "%s: PeerGone(K, NotHere) (frame type %u)", who, fr->type);
}

/* The node, listing itself, the scripted node and a name that does not resolve (which does
 * not stop the node: that link just keeps failing), linked to the scripted node. */
static void start_node_and_link(void)
{
    fake_listen(&fake);
    region_hold_ports(region_ports, 1);
    snprintf(region_mesh_list, sizeof(region_mesh_list),
             "http://127.0.0.1:%u,http://127.0.0.1:%u,http://" UNRESOLVABLE ":3340",
             region_ports[0], fake.port);
    region_node_start(0, NULL);
    fake_accept(&fake, REGION_LINK_MS);
    fake_handshake(&fake, &region_node[0]);
    region_wait_links(0, 1, REGION_LINK_MS);
    int64_t lookup_deadline = conf_now_ms() + REGION_LINK_MS;
    while (!conf_log_has(&region_node[0], "cannot look up " UNRESOLVABLE) &&
           conf_now_ms() < lookup_deadline)
        conf_sleep_ms(REGION_SETTLE_STEP_MS);
    cr_assert(conf_log_has(&region_node[0], "cannot look up " UNRESOLVABLE),
              "no log line for the bad name");
    region_read_gauges(0, &region_base[0]);
}

/* One hop (§7): a packet forwarded into the node (by mesh peer m, logged in here) for key k,
 * which it knows only through the mesh, is dropped there (a disco one earns the forwarder
 * NotHere), never forwarded again. out: the node's derp_packets_forwarded_out before. */
static void forward_is_one_hop(struct conf_raw *m, const struct derp_pubkey *k,
                               const struct derp_pubkey *k2, int64_t out)
{
    CONF_OK(conf_raw_login(m, &region_node[0], NULL, MESH_JSON));
    region_wait_clients(0, 2, 1);
    static const char drop_name[] =
        "derp_packets_dropped{reason=\"unknown_dest_on_fwd\",kind=\"disco\"}";
    int64_t drops = conf_varz_or0(&region_node[0], drop_name);
    uint8_t fwd[2 * DERP_KEY_LEN + CONF_DISCO_LEN];
    memcpy(fwd, k2->bytes, DERP_KEY_LEN);
    memcpy(fwd + DERP_KEY_LEN, k->bytes, DERP_KEY_LEN);
    conf_disco_payload(fwd + 2 * DERP_KEY_LEN);
    CONF_OK(conf_raw_send_frame(m, DERP_FRAME_FORWARD_PACKET, fwd, sizeof(fwd)));
    struct conf_frame fr;
    CONF_OK(conf_raw_read_nka(m, CONF_IO_TIMEOUT_MS, &fr));
    while (fr.type == DERP_FRAME_PEER_PRESENT) /* m is no watcher, but be lenient */
        CONF_OK(conf_raw_read_nka(m, CONF_IO_TIMEOUT_MS, &fr));
    expect_not_here(&fr, k, "the forwarder");
    conf_varz_expect(&region_node[0], "node", drop_name, drops + 1, CONF_IO_TIMEOUT_MS);
    region_expect_quiet(&fake.link, "the link (a forwarded packet is not forwarded again)");
    conf_varz_expect(&region_node[0], "node", "derp_packets_forwarded_out", out + REGION_BATCH,
                     CONF_IO_TIMEOUT_MS);
}

/* One node whose list names itself and a scripted node: the link's login, ForwardPacket out once
 * per packet, NotHere making the node forget the route, the link's drop forgetting everything
 * it reported (PeerGone to a correspondent), and the redial after 5 s. */
Test(test_conformance_region_link, scripted_node_link, .fini = fake_down)
{
    start_node_and_link();
    struct conf_raw a, m;
    region_login(0, &a, NULL);
    struct derp_keypair k, k2;
    CONF_OK(derp_keypair_generate(&k));
    CONF_OK(derp_keypair_generate(&k2));
    fake_present(&fake, &k.pub);
    region_wait_clients(0, 1, 1);
    int64_t out = conf_varz_must(&region_node[0], "derp_packets_forwarded_out");
    char text[32];
    for (unsigned i = 0; i < REGION_BATCH; i++) {
        snprintf(text, sizeof(text), "to K %u", i);
        region_send_text(&a, &k.pub, text);
    }
    fake_expect_forwards(&fake, &a.kp.pub, &k.pub, "to K", REGION_BATCH);
    region_expect_quiet(&fake.link, "the link after the forwards");
    conf_varz_expect(&region_node[0], "node", "derp_packets_forwarded_out", out + REGION_BATCH,
                     CONF_IO_TIMEOUT_MS);

    forward_is_one_hop(&m, &k.pub, &k2.pub, out);

    /* §7: NotHere from the node that was to have K: the route is forgotten. */
    struct conf_frame fr;
    uint8_t buf[64], fwd[2 * DERP_KEY_LEN + CONF_DISCO_LEN];
    fake_write(&fake, buf,
               derp_frame_peer_gone_encode(buf, sizeof(buf), k.pub.bytes, DERP_PEER_GONE_NOT_HERE));
    region_wait_clients(0, 2, 0);
    uint8_t disco[CONF_DISCO_LEN];
    conf_disco_payload(disco);
    CONF_OK(conf_raw_send_packet(&a, &k.pub, disco, sizeof(disco)));
    CONF_OK(conf_raw_read_nka(&a, CONF_IO_TIMEOUT_MS, &fr));
    expect_not_here(&fr, &k.pub, "A, once K is forgotten");
    region_expect_quiet(&fake.link, "the link after NotHere (nothing forwarded)");

    /* A hears from K2 (a packet forwarded into the node by a mesh peer), which only the scripted
     * node reports: when its link drops, A gets PeerGone(K2). */
    fake_present(&fake, &k2.pub);
    region_wait_clients(0, 2, 1);
    memcpy(fwd, k2.pub.bytes, DERP_KEY_LEN);
    memcpy(fwd + DERP_KEY_LEN, a.kp.pub.bytes, DERP_KEY_LEN);
    memcpy(fwd + 2 * DERP_KEY_LEN, "from K2", 7);
    CONF_OK(conf_raw_send_frame(&m, DERP_FRAME_FORWARD_PACKET, fwd, 2 * DERP_KEY_LEN + 7));
    region_expect_packet(&a, &k2.pub, "from K2");
    conf_raw_close(&fake.link);
    region_expect_gone(&a, &k2.pub, "A after the scripted node's link dropped");
    region_wait_links(0, 0, REGION_LINK_MS);
    region_wait_clients(0, 2, 0);

    /* Redialed every 5 s (§7): not at once, and within the hang guard. */
    int64_t waited = fake_accept(&fake, REGION_LINK_MS);
    cr_assert_geq(waited, 4000, "the link was redialed after %lld ms, not ~5 s", (long long)waited);
    fake_handshake(&fake, &region_node[0]);
    region_wait_links(0, 1, REGION_LINK_MS);
    fake_present(&fake, &k.pub);
    region_wait_clients(0, 2, 1);
    region_send_text(&a, &k.pub, "again 0");
    fake_expect_forwards(&fake, &a.kp.pub, &k.pub, "again", 1);
    conf_raw_close(&m);
    conf_raw_close(&a);
    conf_server_stop_clean(&region_node[0]);
}

static struct fake_node fake2 = {.lfd = -1, .link.fd = -1};

static void fakes_down(void)
{
    fake_down();
    fake_close(&fake2);
}

/* §7: K reported by two nodes (a multiforwarder): the first registered is used until it is
 * removed, and re-registering the first does not take the preference back; losing a link hands
 * K to the other node. */
Test(test_conformance_region_link, scripted_multiforwarder_preference, .fini = fakes_down)
{
    fake_listen(&fake);
    fake_listen(&fake2);
    region_hold_ports(region_ports, 1);
    snprintf(region_mesh_list, sizeof(region_mesh_list),
             "http://127.0.0.1:%u,http://127.0.0.1:%u,http://127.0.0.1:%u", region_ports[0],
             fake.port, fake2.port);
    region_node_start(0, NULL);
    fake_accept(&fake, REGION_LINK_MS);
    fake_handshake(&fake, &region_node[0]);
    fake_accept(&fake2, REGION_LINK_MS);
    fake_handshake(&fake2, &region_node[0]);
    region_wait_links(0, 2, REGION_LINK_MS);
    region_read_gauges(0, &region_base[0]);
    int64_t created = conf_varz_must(&region_node[0], "derp_multiforwarder_created");
    int64_t deleted = conf_varz_must(&region_node[0], "derp_multiforwarder_deleted");

    struct conf_raw a;
    region_login(0, &a, NULL);
    struct derp_keypair k;
    CONF_OK(derp_keypair_generate(&k));
    fake_present(&fake, &k.pub);
    region_wait_clients(0, 1, 1);
    fake_present(&fake2, &k.pub);
    conf_varz_expect(&region_node[0], "node", "derp_multiforwarder_created", created + 1,
                     REGION_LINK_MS);
    region_wait_clients(0, 1, 1); /* one key, two routes */
    char text[32];
    for (unsigned i = 0; i < 5; i++) {
        snprintf(text, sizeof(text), "first %u", i);
        region_send_text(&a, &k.pub, text);
    }
    fake_expect_forwards(&fake, &a.kp.pub, &k.pub, "first", 5);
    region_expect_quiet(&fake2.link, "the second node while the first is preferred");

    uint8_t buf[64];
    fake_write(
        &fake, buf,
        derp_frame_peer_gone_encode(buf, sizeof(buf), k.pub.bytes, DERP_PEER_GONE_DISCONNECTED));
    conf_varz_expect(&region_node[0], "node", "derp_multiforwarder_deleted", deleted + 1,
                     REGION_LINK_MS);
    region_send_text(&a, &k.pub, "second 0");
    fake_expect_forwards(&fake2, &a.kp.pub, &k.pub, "second", 1);
    region_expect_quiet(&fake.link, "the first node after its PeerGone(K)");

    fake_present(&fake, &k.pub); /* back, but registered after the second */
    conf_varz_expect(&region_node[0], "node", "derp_multiforwarder_created", created + 2,
                     REGION_LINK_MS);
    region_send_text(&a, &k.pub, "still 0");
    fake_expect_forwards(&fake2, &a.kp.pub, &k.pub, "still", 1);
    region_expect_quiet(&fake.link, "the first node, registered again later");

    conf_raw_close(&fake2.link); /* the preferred node's link drops */
    region_wait_links(0, 1, REGION_LINK_MS);
    conf_varz_expect(&region_node[0], "node", "derp_multiforwarder_deleted", deleted + 2,
                     REGION_LINK_MS);
    region_wait_clients(0, 1, 1);
    region_expect_quiet(&a, "A (never heard from K: no PeerGone)");
    region_send_text(&a, &k.pub, "left 0");
    fake_expect_forwards(&fake, &a.kp.pub, &k.pub, "left", 1);
    conf_raw_close(&a);
    conf_server_stop_clean(&region_node[0]);
}