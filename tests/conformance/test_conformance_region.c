/* test_conformance_region.c - spec §7 (issue 6's region tests) against real hderp-server
 * processes meshed with each other on loopback: three plain nodes given the same
 * -mesh-with http://127.0.0.1:P1,...,P3 list (each drops its own entry by key), raw blocking
 * clients on the test thread. Every packet exactly once with the right source across nodes;
 * local delivery wins over the mesh; a client moving between nodes is followed; a node killed
 * with SIGKILL is forgotten everywhere (PeerGone to its clients' correspondents) and re-syncs
 * within 10 s of its restart; one https link verified with SSL_CERT_FILE and a /dialhost, with
 * hderp-echo as the far end. The scripted far end of a node's link (login, ForwardPacket once
 * per packet, one hop, NotHere, the forwarder preference, the 5 s redial) is in
 * test_conformance_region_link.c; the helpers both share are in region_util.c.
 *
 * Mesh-only frames (WatchConns, ClosePeer, ForwardPacket) from a client without the mesh key, and
 * ClosePeer from a mesh peer closing every connection of the key, are node-local behaviour: see
 * test_conformance_mesh.c (mesh_frames_need_the_key, close_peer), not repeated here.
 *
 * Gauges are checked as deltas from a settled region (each node's own key counts too: it is
 * reported back by the other nodes' watch streams, as with derper), so the tests do not depend on
 * how the mesh links themselves are counted. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conf_support.h"
#include "region_util.h"

extern char **environ;

/* Issue 6: a restarted node's clients are reachable again within 10 s. */
#define RESYNC_MS 10000
/* A region is settled when no node's gauges changed for this long. */
#define SETTLE_QUIET_MS 1000
/* One probe's wait for its packet before the next probe is sent. */
#define PROBE_WAIT_MS 200
/* Packets per stream (in rounds of REGION_BATCH). */
#define STREAM 50
/* hderp-echo: its key line, and its exit after SIGTERM. */
#define ECHO_START_MS 15000
#define ECHO_STOP_MS  10000

static pid_t echo_pid;

static void echo_kill(void)
{
    if (echo_pid > 0) {
        kill(echo_pid, SIGKILL);
        waitpid(echo_pid, NULL, 0);
    }
    echo_pid = 0;
}

static struct conf_server tls_x, tls_y, tls_z;

static void down(void)
{
    echo_kill();
    region_down();
    conf_server_down(&tls_x);
    conf_server_down(&tls_y);
    conf_server_down(&tls_z);
}

TestSuite(test_conformance_region, .fini = down, .timeout = 240);

/* ---------------------------------------------------------------- the region */

/* Sum of a labelled series; 0 when it has no series yet. */
static int64_t varz_sum(const struct conf_server *srv, const char *name)
{
    int64_t v = 0;
    int rc = conf_varz(srv, name, true, &v);
    cr_assert(rc == 0 || rc == -ENOENT, "varz %s: %s", name, strerror(-rc));
    return rc == 0 ? v : 0;
}

/* Polls name until it is below limit. */
static void wait_varz_below(const struct conf_server *srv, const char *what, const char *name,
                            int64_t limit, int timeout_ms)
{
    int64_t deadline = conf_now_ms() + timeout_ms, v = -1;
    do {
        if (conf_varz(srv, name, false, &v) == 0 && v < limit)
            return;
        conf_sleep_ms(REGION_SETTLE_STEP_MS);
    } while (conf_now_ms() < deadline);
    cr_assert_fail("%s: %s stays at %lld, want below %lld", what, name, (long long)v,
                   (long long)limit);
}

/* Waits until no node's clients_* gauges changed for SETTLE_QUIET_MS, records them in base. */
static void settle(void)
{
    int64_t deadline = conf_now_ms() + REGION_LINK_MS, quiet_since = conf_now_ms();
    struct region_gauges prev[REGION_NODES] = {0};
    bool first = true;
    for (;;) {
        struct region_gauges cur[REGION_NODES];
        for (unsigned i = 0; i < REGION_NODES; i++)
            region_read_gauges(i, &cur[i]);
        if (first || memcmp(cur, prev, sizeof(cur)) != 0)
            quiet_since = conf_now_ms();
        first = false;
        memcpy(prev, cur, sizeof(cur));
        if (conf_now_ms() - quiet_since >= SETTLE_QUIET_MS)
            break;
        cr_assert_lt(conf_now_ms(), deadline, "the region's clients_* gauges never settled");
        conf_sleep_ms(REGION_SETTLE_STEP_MS);
    }
    memcpy(region_base, prev, sizeof(region_base));
    for (unsigned i = 0; i < REGION_NODES; i++)
        cr_assert_eq(region_base[i].total, region_base[i].local + region_base[i].remote,
                     "node %u: clients_total %lld != local %lld + remote %lld", i + 1,
                     (long long)region_base[i].total, (long long)region_base[i].local,
                     (long long)region_base[i].remote);
}

/* A node dropped its own entry because the far end had its key (not a link left failing). */
#define SELF_LOG "is this server"

/* Three nodes, the same list to each (their own entry included), all links up, settled. */
static void region_up(void)
{
    region_hold_ports(region_ports, REGION_NODES);
    int n = 0;
    for (unsigned i = 0; i < REGION_NODES; i++)
        n += snprintf(region_mesh_list + n, sizeof(region_mesh_list) - (size_t)n,
                      "%shttp://127.0.0.1:%u", i ? "," : "", region_ports[i]);
    for (unsigned i = 0; i < REGION_NODES; i++)
        region_node_start(i, NULL);
    for (unsigned i = 0; i < REGION_NODES; i++)
        region_wait_links(i, REGION_NODES - 1, REGION_LINK_MS);
    settle();
    for (unsigned i = 0; i < REGION_NODES; i++)
        cr_assert(conf_log_has(&region_node[i], SELF_LOG),
                  "node %u: no \"%s\" line for its own entry", i + 1, SELF_LOG);
    for (unsigned i = 0; i < REGION_NODES; i++)
        cr_assert_eq(region_base[i].local, REGION_NODES - 1,
                     "node %u: the other nodes' links are its local "
                     "clients, clients_local %lld",
                     i + 1, (long long)region_base[i].local);
}

static void region_stop_clean(void)
{
    for (unsigned i = 0; i < REGION_NODES; i++)
        conf_server_stop_clean(&region_node[i]);
}

/* ---------------------------------------------------------------- packets */

/* No frame but KeepAlive, PeerGone or PeerPresent: in particular no packet. */
static void expect_no_packet(struct conf_raw *r, const char *who)
{
    int64_t deadline = conf_now_ms() + REGION_QUIET_MS;
    for (;;) {
        struct conf_frame f = {0};
        int64_t left = deadline - conf_now_ms();
        int rc = conf_raw_read_nka(r, left > 0 ? (int)left : 0, &f);
        if (rc == -ETIMEDOUT)
            return;
        cr_assert_eq(rc, 0, "%s: %s", who, strerror(-rc));
        cr_assert_neq(f.type, DERP_FRAME_RECV_PACKET, "%s: an unexpected packet \"%.*s\"", who,
                      (int)(f.len > DERP_KEY_LEN ? f.len - DERP_KEY_LEN : 0), f.p + DERP_KEY_LEN);
    }
}

static bool has_prefix(const uint8_t *data, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(data, prefix, n) == 0;
}

/* from sends "probe N" to `to` (one at a time, PROBE_WAIT_MS apart) until one arrives; a route
 * that is still being learned drops them. Fails after timeout_ms. Returns the probes sent. */
static unsigned probe(struct conf_raw *from, struct conf_raw *to, int timeout_ms, const char *what)
{
    int64_t deadline = conf_now_ms() + timeout_ms;
    char text[32];
    for (unsigned n = 0;; n++) {
        cr_assert_lt(conf_now_ms(), deadline, "%s: no probe arrived in %d ms (%u sent)", what,
                     timeout_ms, n);
        snprintf(text, sizeof(text), "probe %u", n);
        region_send_text(from, &to->kp.pub, text);
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        int rc = conf_raw_read_packet(to, PROBE_WAIT_MS, &src, &data, &len);
        if (rc == -ETIMEDOUT)
            continue;
        cr_assert_eq(rc, 0, "%s: %s", what, strerror(-rc));
        cr_assert(derp_pubkey_equal(&src, &from->kp.pub), "%s: a packet from another key", what);
        cr_assert(has_prefix(data, len, "probe "), "%s: \"%.*s\"", what, (int)len, data);
        return n + 1;
    }
}

/* STREAM packets "<tag> i" from `from` to `to` in rounds of REGION_BATCH: each arrives exactly once
 * and in order (one path), with from's key; late probes (each at most once) are allowed. */
static void stream(struct conf_raw *from, struct conf_raw *to, const char *tag)
{
    char text[48];
    bool probe_seen[64] = {0};
    for (unsigned round = 0; round < STREAM / REGION_BATCH; round++) {
        for (unsigned i = 0; i < REGION_BATCH; i++) {
            snprintf(text, sizeof(text), "%s %u", tag, round * REGION_BATCH + i);
            region_send_text(from, &to->kp.pub, text);
        }
        for (unsigned i = 0; i < REGION_BATCH;) {
            struct derp_pubkey src;
            const uint8_t *data;
            size_t len;
            int rc = conf_raw_read_packet(to, CONF_IO_TIMEOUT_MS, &src, &data, &len);
            cr_assert_eq(rc, 0, "%s: packet %u of %u: %s", tag, round * REGION_BATCH + i, STREAM,
                         strerror(-rc));
            cr_assert(derp_pubkey_equal(&src, &from->kp.pub), "%s: wrong source key", tag);
            if (has_prefix(data, len, "probe ")) {
                unsigned n = (unsigned)strtoul((const char *)data + 6, NULL, 10);
                cr_assert(n < 64 && !probe_seen[n], "%s: probe %u twice", tag, n);
                probe_seen[n] = true;
                continue;
            }
            snprintf(text, sizeof(text), "%s %u", tag, round * REGION_BATCH + i);
            cr_assert(len == strlen(text) && memcmp(data, text, len) == 0,
                      "%s: got \"%.*s\", want \"%s\" (lost, repeated or reordered)", tag, (int)len,
                      data, text);
            i++;
        }
    }
    expect_no_packet(to, tag);
}

struct fwd_counts {
    int64_t out, in;
};

static void read_fwd(struct fwd_counts c[REGION_NODES])
{
    for (unsigned i = 0; i < REGION_NODES; i++) {
        c[i].out = conf_varz_must(&region_node[i], "derp_packets_forwarded_out");
        c[i].in = conf_varz_must(&region_node[i], "derp_packets_forwarded_in");
    }
}

static void wait_fwd(const struct fwd_counts b[REGION_NODES], const int64_t out[REGION_NODES],
                     const int64_t in[REGION_NODES])
{
    for (unsigned i = 0; i < REGION_NODES; i++) {
        char what[32];
        snprintf(what, sizeof(what), "node %u", i + 1);
        conf_varz_expect(&region_node[i], what, "derp_packets_forwarded_out", b[i].out + out[i],
                         CONF_IO_TIMEOUT_MS);
        conf_varz_expect(&region_node[i], what, "derp_packets_forwarded_in", b[i].in + in[i],
                         CONF_IO_TIMEOUT_MS);
    }
}

/* ---------------------------------------------------------------- the tests */

/* A on node 1, B on node 2, C on node 3: A->B, A->C, B->A, C->A exactly once with the right
 * source, then streams; every forwarded packet counted once out (sender's node) and once in
 * (receiver's node); nothing dropped; when they leave, every node forgets them. */
Test(test_conformance_region, three_nodes_exactly_once)
{
    region_up();
    int64_t dropped[REGION_NODES];
    for (unsigned i = 0; i < REGION_NODES; i++)
        dropped[i] = varz_sum(&region_node[i], "derp_packets_dropped");
    struct conf_raw a, b, c;
    region_login(0, &a, NULL);
    region_login(1, &b, NULL);
    region_login(2, &c, NULL);
    for (unsigned i = 0; i < REGION_NODES; i++)
        region_wait_clients(i, 1, 2);
    struct fwd_counts f0[REGION_NODES];
    read_fwd(f0);

    region_send_text(&a, &b.kp.pub, "a->b");
    region_send_text(&a, &c.kp.pub, "a->c");
    region_send_text(&b, &a.kp.pub, "b->a");
    region_send_text(&c, &a.kp.pub, "c->a");
    region_expect_packet(&b, &a.kp.pub, "a->b");
    region_expect_packet(&c, &a.kp.pub, "a->c");
    bool from_b = false, from_c = false;
    for (int n = 0; n < 2; n++) {
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        CONF_OK(conf_raw_read_packet(&a, CONF_IO_TIMEOUT_MS, &src, &data, &len));
        bool is_b = derp_pubkey_equal(&src, &b.kp.pub), is_c = derp_pubkey_equal(&src, &c.kp.pub);
        cr_assert(is_b || is_c, "A: a packet from an unknown key");
        cr_assert(!(is_b ? from_b : from_c), "A: a second packet from %s", is_b ? "B" : "C");
        const char *want = is_b ? "b->a" : "c->a";
        cr_assert(len == 4 && memcmp(data, want, 4) == 0, "A: \"%.*s\" with %s's key", (int)len,
                  data, is_b ? "B" : "C");
        *(is_b ? &from_b : &from_c) = true;
    }
    expect_no_packet(&a, "A");
    expect_no_packet(&b, "B");
    expect_no_packet(&c, "C");
    wait_fwd(f0, (int64_t[]){2, 1, 1}, (int64_t[]){2, 1, 1});

    stream(&a, &b, "a->b");
    stream(&c, &a, "c->a");
    stream(&b, &c, "b->c");
    wait_fwd(f0, (int64_t[]){2 + STREAM, 1 + STREAM, 1 + STREAM},
             (int64_t[]){2 + STREAM, 1 + STREAM, 1 + STREAM});
    for (unsigned i = 0; i < REGION_NODES; i++)
        cr_assert_eq(varz_sum(&region_node[i], "derp_packets_dropped"), dropped[i],
                     "node %u dropped packets", i + 1);

    /* §6.7 across nodes: C sent to A, A to B, B to C. C leaves: A hears of it from node 1 (which
     * learns it from node 3), B does not; A leaves: B hears; B leaves: nobody is left to hear. */
    conf_raw_close(&c);
    region_expect_gone(&a, &c.kp.pub, "A after C left");
    region_expect_quiet(&a, "A: one PeerGone(C)");
    region_expect_quiet(&b, "B after C left (C never sent to B)");
    conf_raw_close(&a);
    region_expect_gone(&b, &a.kp.pub, "B after A left");
    conf_raw_close(&b);
    for (unsigned i = 0; i < REGION_NODES; i++)
        region_wait_clients(i, 0, 0);
    region_stop_clean();
}

/* All to all: PER_NODE clients on each node (keys owned by both shards of each), ROUNDS rounds in
 * which every client sends one packet to every other; every packet exactly once, with its
 * source, and the forwarded counters exactly the cross-node packets. */
#define PER_NODE 3
#define CLIENTS  (REGION_NODES * PER_NODE)
#define ROUNDS   10
Test(test_conformance_region, all_to_all_across_nodes)
{
    region_up();
    static struct conf_raw c[CLIENTS];
    for (unsigned i = 0; i < CLIENTS; i++) {
        struct derp_keypair kp;
        CONF_OK(conf_keypair_on_shard(&kp, i % 2, 2));
        region_login(i % REGION_NODES, &c[i], &kp);
    }
    for (unsigned n = 0; n < REGION_NODES; n++)
        region_wait_clients(n, PER_NODE, CLIENTS - PER_NODE);
    struct fwd_counts f0[REGION_NODES];
    read_fwd(f0);
    char text[48];
    for (unsigned round = 0; round < ROUNDS; round++) {
        for (unsigned i = 0; i < CLIENTS; i++)
            for (unsigned j = 0; j < CLIENTS; j++)
                if (i != j) {
                    snprintf(text, sizeof(text), "%u->%u #%u", i, j, round);
                    region_send_text(&c[i], &c[j].kp.pub, text);
                }
        for (unsigned j = 0; j < CLIENTS; j++) {
            bool seen[CLIENTS] = {0};
            for (unsigned n = 0; n + 1 < CLIENTS; n++) {
                struct derp_pubkey src;
                const uint8_t *data;
                size_t len;
                int rc = conf_raw_read_packet(&c[j], CONF_IO_TIMEOUT_MS, &src, &data, &len);
                cr_assert_eq(rc, 0, "round %u: client %u got %u of %u: %s", round, j, n,
                             CLIENTS - 1, strerror(-rc));
                unsigned i = CLIENTS;
                for (unsigned k = 0; k < CLIENTS; k++)
                    if (derp_pubkey_equal(&src, &c[k].kp.pub))
                        i = k;
                cr_assert_lt(i, CLIENTS, "round %u: client %u: unknown source", round, j);
                cr_assert(!seen[i], "round %u: client %u: twice from %u", round, j, i);
                seen[i] = true;
                snprintf(text, sizeof(text), "%u->%u #%u", i, j, round);
                cr_assert(len == strlen(text) && memcmp(data, text, len) == 0,
                          "client %u: \"%.*s\" with %u's key, want \"%s\"", j, (int)len, data, i,
                          text);
            }
        }
    }
    for (unsigned j = 0; j < CLIENTS; j++)
        expect_no_packet(&c[j], "after all rounds");
    /* Each client sends to CLIENTS - PER_NODE clients on other nodes per round. */
    int64_t per_node = (int64_t)PER_NODE * (CLIENTS - PER_NODE) * ROUNDS;
    wait_fwd(f0, (int64_t[]){per_node, per_node, per_node},
             (int64_t[]){per_node, per_node, per_node});
    for (unsigned i = 0; i < CLIENTS; i++)
        conf_raw_close(&c[i]);
    for (unsigned n = 0; n < REGION_NODES; n++)
        region_wait_clients(n, 0, 0);
    region_stop_clean();
}

/* K connected to node 1 and node 2 at once: a sender on node 1 reaches K locally (nothing
 * forwarded); node 3 has two forwarders for K (a multiforwarder) and delivers once; when node 1's
 * K leaves, node 3 deletes the multiforwarder and reaches K on node 2. */
Test(test_conformance_region, local_wins_and_multiforwarder)
{
    region_up();
    struct derp_keypair k;
    CONF_OK(derp_keypair_generate(&k));
    int64_t created = conf_varz_must(&region_node[2], "derp_multiforwarder_created");
    int64_t deleted = conf_varz_must(&region_node[2], "derp_multiforwarder_deleted");
    struct conf_raw k1, k2, s1, s3;
    region_login(0, &k1, &k);
    region_login(1, &k2, &k);
    region_login(0, &s1, NULL);
    region_login(2, &s3, NULL);
    region_wait_clients(0, 2, 1); /* K, S1 local; S3 */
    region_wait_clients(1, 1, 2); /* K local; S1, S3 */
    region_wait_clients(2, 1, 2); /* S3 local; K (twice), S1 */
    conf_varz_expect(&region_node[2], "node 3", "derp_multiforwarder_created", created + 1,
                     REGION_LINK_MS);
    struct fwd_counts f0[REGION_NODES];
    read_fwd(f0);

    region_send_text(&s1, &k.pub, "local");
    region_expect_packet(&k1, &s1.kp.pub, "local");
    expect_no_packet(&k2, "K on node 2 (local delivery wins on node 1)");

    region_send_text(&s3, &k.pub, "via the mesh");
    struct conf_raw *first = NULL;
    for (int64_t deadline = conf_now_ms() + CONF_IO_TIMEOUT_MS;
         !first && conf_now_ms() < deadline;) {
        struct conf_frame f;
        if (conf_raw_read(&k1, 50, &f) == 0 && f.type == DERP_FRAME_RECV_PACKET)
            first = &k1;
        else if (conf_raw_read(&k2, 50, &f) == 0 && f.type == DERP_FRAME_RECV_PACKET)
            first = &k2;
        if (first) {
            cr_assert(f.len == DERP_KEY_LEN + 12 &&
                          memcmp(f.p, s3.kp.pub.bytes, DERP_KEY_LEN) == 0 &&
                          memcmp(f.p + DERP_KEY_LEN, "via the mesh", 12) == 0,
                      "K got the wrong packet");
        }
    }
    cr_assert(first, "K got nothing from node 3");
    expect_no_packet(&k1, "K on node 1 (one copy)");
    expect_no_packet(&k2, "K on node 2 (one copy)");
    wait_fwd(f0, (int64_t[]){0, 0, 1}, (int64_t[]){first == &k1, first == &k2, 0});

    conf_raw_close(&k1);
    conf_varz_expect(&region_node[2], "node 3", "derp_multiforwarder_deleted", deleted + 1,
                     REGION_LINK_MS);
    region_send_text(&s3, &k.pub, "to node 2");
    region_expect_packet(&k2, &s3.kp.pub, "to node 2");
    /* Node 1 no longer has K locally: it forwards to node 2. */
    int64_t out0 = conf_varz_must(&region_node[0], "derp_packets_forwarded_out");
    region_send_text(&s1, &k.pub, "from node 1");
    region_expect_packet(&k2, &s1.kp.pub, "from node 1");
    conf_varz_expect(&region_node[0], "node 1", "derp_packets_forwarded_out", out0 + 1,
                     CONF_IO_TIMEOUT_MS);
    conf_raw_close(&k2);
    conf_raw_close(&s1);
    conf_raw_close(&s3);
    for (unsigned i = 0; i < REGION_NODES; i++)
        region_wait_clients(i, 0, 0);
    region_stop_clean();
}

/* A on node 1 streams to B on node 2, leaves and comes back with the same key on node `to`; B's
 * packets follow it (after a bounded settle, every one exactly once), and A's reach B again. */
static void move(unsigned to)
{
    region_up();
    struct derp_keypair ka;
    CONF_OK(derp_keypair_generate(&ka));
    struct conf_raw a, b;
    region_login(0, &a, &ka);
    region_login(1, &b, NULL);
    region_wait_clients(0, 1, 1);
    region_wait_clients(1, 1, 1);
    stream(&a, &b, "a->b before");
    stream(&b, &a, "b->a before");

    conf_raw_close(&a);
    region_login(to, &a, &ka);
    unsigned probes = probe(&b, &a, RESYNC_MS, "B to A at its new node");
    cr_log_info("A at node %u reached after %u probe(s)", to + 1, probes);
    stream(&b, &a, "b->a after");
    stream(&a, &b, "a->b after");
    /* Node 1 forgot A as a local client and knows it via node `to` (or locally). */
    for (unsigned i = 0; i < REGION_NODES; i++)
        region_wait_clients(i, (i == to) + (i == 1), (i != to) + (i != 1));
    conf_raw_close(&a);
    conf_raw_close(&b);
    for (unsigned i = 0; i < REGION_NODES; i++)
        region_wait_clients(i, 0, 0);
    region_stop_clean();
}

Test(test_conformance_region, client_moves_to_its_peers_node)
{
    move(1);
}

Test(test_conformance_region, client_moves_to_a_third_node)
{
    move(2);
}

/* Node 3 dies (SIGKILL): A, who had a packet from C on node 3, gets PeerGone(C, Disconnected);
 * nodes 1 and 2 forget node 3's clients and lose their link to it. Node 3 restarted on its port
 * with its key: within 10 s a new client there is reachable from A and reaches A. */
Test(test_conformance_region, node_killed_and_restarted)
{
    region_up();
    struct conf_raw a, b, c;
    region_login(0, &a, NULL);
    region_login(1, &b, NULL);
    region_login(2, &c, NULL);
    for (unsigned i = 0; i < REGION_NODES; i++)
        region_wait_clients(i, 1, 2);
    region_send_text(&c, &a.kp.pub, "c->a");
    region_expect_packet(&a, &c.kp.pub, "c->a");
    int64_t remote0 = conf_varz_must(&region_node[0], "derp_clients_remote");
    int64_t remote1 = conf_varz_must(&region_node[1], "derp_clients_remote");

    CONF_OK(conf_server_kill(&region_node[2]));
    conf_raw_close(&c);
    region_expect_gone(&a, &c.kp.pub, "A after node 3 died");
    region_expect_quiet(&a, "A: one PeerGone(C)");
    region_expect_quiet(&b, "B (never heard from C)");
    wait_varz_below(&region_node[0], "node 1 after node 3 died", "derp_clients_remote", remote0,
                    REGION_LINK_MS);
    wait_varz_below(&region_node[1], "node 2 after node 3 died", "derp_clients_remote", remote1,
                    REGION_LINK_MS);
    region_wait_links(0, REGION_NODES - 2, REGION_LINK_MS);
    region_wait_links(1, REGION_NODES - 2, REGION_LINK_MS);
    /* Nodes 1 and 2 still reach each other. */
    region_send_text(&a, &b.kp.pub, "still meshed");
    region_expect_packet(&b, &a.kp.pub, "still meshed");

    char old_dir[sizeof(region_node[2].dir)], key_file[sizeof(region_node[2].key_file)];
    snprintf(old_dir, sizeof(old_dir), "%s", region_node[2].dir);
    snprintf(key_file, sizeof(key_file), "%s", region_node[2].key_file);
    struct derp_pubkey key3 = region_node[2].key;
    region_node_start(2, key_file);
    int64_t t0 = conf_now_ms();
    cr_assert(derp_pubkey_equal(&region_node[2].key, &key3), "node 3 restarted with its key");
    conf_dir_remove(old_dir);
    struct conf_raw c2;
    region_login(2, &c2, NULL);
    int left = RESYNC_MS - (int)(conf_now_ms() - t0);
    unsigned probes = probe(&a, &c2, left > 0 ? left : 1, "A to C' on the restarted node 3");
    cr_log_info("C' reached after %u probe(s), %lld ms after the restart", probes,
                (long long)(conf_now_ms() - t0));
    region_send_text(&c2, &a.kp.pub, "c'->a");
    region_expect_packet(&a, &c2.kp.pub, "c'->a");
    for (unsigned i = 0; i < REGION_NODES; i++)
        region_wait_links(i, REGION_NODES - 1, REGION_LINK_MS);
    stream(&b, &c2, "b->c'");
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_raw_close(&c2);
    region_stop_clean();
}

/* ---------------------------------------------------------------- one https link */

/* Is "localhost" 127.0.0.1 first here? The DERP client dials the first address, and the server
 * listens on 127.0.0.1 only. */
static bool localhost_is_v4(void)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(CONF_TLS_HOSTNAME, "443", &hints, &res) != 0 || res == NULL)
        return false;
    bool v4 = res->ai_family == AF_INET &&
              ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
    freeaddrinfo(res);
    return v4;
}

/* hderp-echo echo --server url --ca ca, its stdout in out; waits for its key line. */
static void echo_start(const char *url, const char *ca, const char *out, const char *log,
                       struct derp_pubkey *key)
{
    const char *argv[] = {CONF_BIN_DIR "/hderp-echo", "echo", "--server", url, "--ca", ca, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = posix_spawn(&echo_pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(rc, 0, "spawn %s: %s", argv[0], strerror(rc));
    char line[128] = "";
    for (int64_t deadline = conf_now_ms() + ECHO_START_MS; conf_now_ms() < deadline;
         conf_sleep_ms(50)) {
        FILE *f = fopen(out, "r");
        bool got = f && fgets(line, sizeof(line), f) && strchr(line, '\n');
        if (f)
            fclose(f);
        if (got)
            break;
        int status;
        cr_assert_eq(waitpid(echo_pid, &status, WNOHANG), 0, "hderp-echo exited early (see %s)",
                     log);
    }
    line[strcspn(line, "\n")] = '\0';
    cr_assert(strncmp(line, "nodekey:", 8) == 0, "hderp-echo printed \"%s\" (see %s)", line, log);
    CONF_OK(derp_pubkey_parse(line, strlen(line), key));
}

static void echo_stop(void)
{
    kill(echo_pid, SIGTERM);
    int status = 0;
    pid_t p = 0;
    for (int64_t deadline = conf_now_ms() + ECHO_STOP_MS; conf_now_ms() < deadline;
         conf_sleep_ms(20))
        if ((p = waitpid(echo_pid, &status, WNOHANG)) != 0)
            break;
    if (p == 0)
        echo_kill();
    else
        echo_pid = 0;
    cr_assert(p > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "hderp-echo exits 0 on SIGTERM (status %d)", p > 0 ? status : -1);
}

/* Probes until the first echo: both nodes must have learned the other's client; then late
 * echoes of earlier probes, if any, are read before the caller counts. */
static void probe_until_echo(struct conf_raw *r, const struct derp_pubkey *echo_key)
{
    int64_t deadline = conf_now_ms() + REGION_LINK_MS;
    char text[32];
    bool back = false;
    for (unsigned n = 0; !back; n++) {
        cr_assert_lt(conf_now_ms(), deadline, "no echo through the mesh (%u probes)", n);
        snprintf(text, sizeof(text), "probe %u", n);
        region_send_text(r, echo_key, text);
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        int rc = conf_raw_read_packet(r, PROBE_WAIT_MS, &src, &data, &len);
        if (rc == -ETIMEDOUT)
            continue;
        cr_assert_eq(rc, 0, "R: %s", strerror(-rc));
        cr_assert(derp_pubkey_equal(&src, echo_key), "an echo from another key");
        back = true;
    }
    for (;;) {
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        if (conf_raw_read_packet(r, REGION_QUIET_MS, &src, &data, &len) != 0)
            break;
        cr_assert(has_prefix(data, len, "probe "), "R: \"%.*s\"", (int)len, data);
    }
}

/* Verification is real: a node trusting only the system bundle never links to X (on port_x). */
static void untrusted_node_never_links(uint16_t port_x)
{
    static const char system_bundle[] = "/etc/ssl/certs/ca-certificates.crt";
    if (access(system_bundle, R_OK) == 0) {
        static const char z_env_ca[] = "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt";
        const char *z_env[] = {z_env_ca, NULL};
        char z_list[64];
        snprintf(z_list, sizeof(z_list), "%s:%u/127.0.0.1", CONF_TLS_HOSTNAME, port_x);
        const char *z_extra[] = {"-mesh-with", z_list, NULL};
        CONF_OK(conf_server_start(
            &tls_z, &(struct conf_server_opts){
                        .mesh_key_hex = REGION_MESH_HEX, .extra = z_extra, .env = z_env}));
        int64_t z_deadline = conf_now_ms() + REGION_LINK_MS;
        while (!conf_log_has(&tls_z, "cannot link to") && conf_now_ms() < z_deadline)
            conf_sleep_ms(REGION_SETTLE_STEP_MS);
        cr_assert(conf_log_has(&tls_z, "cannot link to"), "Z did not report its failing link");
        cr_assert_eq(conf_varz_must(&tls_z, "derp_mesh_links_ready"), 0,
                     "Z linked to an untrusted X");
        conf_server_stop_clean(&tls_z);
    }
}

/* X speaks TLS with a certificate for localhost (no public CA: both nodes get it as
 * SSL_CERT_FILE), Y plain. List: localhost:PX/127.0.0.1 (https, SNI and verification for
 * localhost, dialed at 127.0.0.1 on PX) and http://127.0.0.1:PY. hderp-echo on X, a raw client
 * R on Y: R -> echo goes over Y's https link to X, the echo back over X's http link to Y. */
Test(test_conformance_region, tls_link_with_dialhost)
{
    if (!localhost_is_v4())
        cr_skip_test("\"localhost\" does not resolve to 127.0.0.1 first on this host");
    uint16_t p[2];
    region_hold_ports(p, 2);
    char list[128];
    snprintf(list, sizeof(list), "%s:%u/127.0.0.1,http://127.0.0.1:%u", CONF_TLS_HOSTNAME, p[0],
             p[1]);
    const char *extra[] = {"-mesh-with", list, NULL};
    int rc = conf_server_start(&tls_x, &(struct conf_server_opts){.mesh_key_hex = REGION_MESH_HEX,
                                                                  .tls = true,
                                                                  .trust_own_cert = true,
                                                                  .port = p[0],
                                                                  .extra = extra});
    cr_assert_eq(rc, 0, "X (TLS, -mesh-with %s): %s", list, strerror(-rc));
    char ca_env[sizeof(tls_x.cert_file) + 16];
    snprintf(ca_env, sizeof(ca_env), "SSL_CERT_FILE=%s", tls_x.cert_file);
    const char *env[] = {ca_env, NULL};
    rc = conf_server_start(
        &tls_y, &(struct conf_server_opts){
                    .mesh_key_hex = REGION_MESH_HEX, .port = p[1], .extra = extra, .env = env});
    cr_assert_eq(rc, 0, "Y (plain, -mesh-with %s): %s", list, strerror(-rc));
    conf_varz_expect(&tls_x, "X", "derp_mesh_links_ready", 1, REGION_LINK_MS);
    conf_varz_expect(&tls_y, "Y", "derp_mesh_links_ready", 1, REGION_LINK_MS);
    cr_assert(conf_log_has(&tls_x, SELF_LOG), "X found its own https entry by key");
    cr_assert(conf_log_has(&tls_y, SELF_LOG), "Y found its own http entry by key");

    char url[96], out[300], log[300];
    snprintf(url, sizeof(url), "https://%s:%u/derp", CONF_TLS_HOSTNAME, p[0]);
    snprintf(out, sizeof(out), "%s/echo.out", tls_x.dir);
    snprintf(log, sizeof(log), "%s/echo.log", tls_x.dir);
    struct derp_pubkey echo_key;
    echo_start(url, tls_x.cert_file, out, log, &echo_key);

    struct conf_raw r;
    CONF_OK(conf_raw_login(&r, &tls_y, NULL, NULL));
    probe_until_echo(&r, &echo_key);
    char text[32];
    int64_t y_out = conf_varz_must(&tls_y, "derp_packets_forwarded_out");
    int64_t x_in = conf_varz_must(&tls_x, "derp_packets_forwarded_in");
    int64_t x_out = conf_varz_must(&tls_x, "derp_packets_forwarded_out");
    int64_t y_in = conf_varz_must(&tls_y, "derp_packets_forwarded_in");
    for (unsigned round = 0; round < STREAM / REGION_BATCH; round++) {
        for (unsigned i = 0; i < REGION_BATCH; i++) {
            snprintf(text, sizeof(text), "echo %u", round * REGION_BATCH + i);
            region_send_text(&r, &echo_key, text);
        }
        for (unsigned i = 0; i < REGION_BATCH; i++) {
            snprintf(text, sizeof(text), "echo %u", round * REGION_BATCH + i);
            region_expect_packet(&r, &echo_key, text);
        }
    }
    expect_no_packet(&r, "R after the echoes");
    conf_varz_expect(&tls_y, "Y", "derp_packets_forwarded_out", y_out + STREAM, CONF_IO_TIMEOUT_MS);
    conf_varz_expect(&tls_x, "X", "derp_packets_forwarded_in", x_in + STREAM, CONF_IO_TIMEOUT_MS);
    conf_varz_expect(&tls_x, "X", "derp_packets_forwarded_out", x_out + STREAM, CONF_IO_TIMEOUT_MS);
    conf_varz_expect(&tls_y, "Y", "derp_packets_forwarded_in", y_in + STREAM, CONF_IO_TIMEOUT_MS);
    conf_raw_close(&r);
    echo_stop();

    untrusted_node_never_links(p[0]);
    conf_server_stop_clean(&tls_x);
    conf_server_stop_clean(&tls_y);
}
