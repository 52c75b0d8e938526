/* region_util.c - the mesh region tests' shared helpers (region_util.h): the node table, node
 * start-up with one -mesh-with list, varz and log checks, raw-client packet assertions. Test
 * thread only (criterion assertions); owns the node table. */
#define _GNU_SOURCE
#include "region_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

struct conf_server region_node[REGION_NODES];
uint16_t region_ports[REGION_NODES];
char region_mesh_list[REGION_NODES * 48];
struct region_gauges region_base[REGION_NODES];

void region_down(void)
{
    for (unsigned i = 0; i < REGION_NODES; i++)
        conf_server_down(&region_node[i]);
    conf_ports_release();
}

void region_hold_ports(uint16_t *out, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        CONF_OK(conf_port_hold(&out[i]));
}

void region_node_start(unsigned i, const char *key_file)
{
    const char *extra[] = {"-mesh-with", region_mesh_list, NULL};
    struct conf_server_opts o = {.mesh_key_hex = REGION_MESH_HEX,
                                 .port = region_ports[i],
                                 .extra = extra,
                                 .key_file = key_file};
    int rc = conf_server_start(&region_node[i], &o);
    cr_assert_eq(rc, 0, "node %u (port %u, -mesh-with %s) did not start: %s", i + 1,
                 region_ports[i], region_mesh_list, strerror(-rc));
}

void region_read_gauges(unsigned i, struct region_gauges *g)
{
    g->total = conf_varz_must(&region_node[i], "derp_clients_total");
    g->local = conf_varz_must(&region_node[i], "derp_clients_local");
    g->remote = conf_varz_must(&region_node[i], "derp_clients_remote");
}

/* Each node's mesh links: every other node. */
void region_wait_links(unsigned i, int64_t want, int timeout_ms)
{
    char what[32];
    snprintf(what, sizeof(what), "node %u", i + 1);
    conf_varz_expect(&region_node[i], what, "derp_mesh_links_ready", want, timeout_ms);
}

/* Waits until node i's clients_* gauges are base + (local, remote) (total follows). */
void region_wait_clients(unsigned i, int64_t local, int64_t remote)
{
    char what[48];
    snprintf(what, sizeof(what), "node %u", i + 1);
    conf_varz_expect(&region_node[i], what, "derp_clients_local", region_base[i].local + local,
                     REGION_LINK_MS);
    conf_varz_expect(&region_node[i], what, "derp_clients_remote", region_base[i].remote + remote,
                     REGION_LINK_MS);
    conf_varz_expect(&region_node[i], what, "derp_clients_total",
                     region_base[i].total + local + remote, REGION_LINK_MS);
}

void region_login(unsigned i, struct conf_raw *r, const struct derp_keypair *kp)
{
    int rc = conf_raw_login(r, &region_node[i], kp, NULL);
    cr_assert_eq(rc, 0, "login to node %u: %s", i + 1, strerror(-rc));
}

void region_send_text(struct conf_raw *r, const struct derp_pubkey *dst, const char *text)
{
    CONF_OK(conf_raw_send_packet(r, dst, text, strlen(text)));
}

/* The next RecvPacket (PeerGone and other frames are skipped) is text from src. */
void region_expect_packet(struct conf_raw *r, const struct derp_pubkey *src, const char *text)
{
    struct derp_pubkey got;
    const uint8_t *data;
    size_t len;
    int rc = conf_raw_read_packet(r, CONF_IO_TIMEOUT_MS, &got, &data, &len);
    cr_assert_eq(rc, 0, "waiting for \"%s\": %s", text, strerror(-rc));
    cr_assert(derp_pubkey_equal(&got, src), "\"%s\" has the wrong source key", text);
    cr_assert(len == strlen(text) && memcmp(data, text, len) == 0, "got \"%.*s\", want \"%s\"",
              (int)len, data, text);
}

/* The next frame (KeepAlives skipped) is PeerGone(peer, Disconnected), within REGION_LINK_MS (a
 * link to notice its node's death, or a watch update to cross a node). */
void region_expect_gone(struct conf_raw *r, const struct derp_pubkey *peer, const char *who)
{
    struct conf_frame f;
    int rc = conf_raw_read_nka(r, REGION_LINK_MS, &f);
    cr_assert_eq(rc, 0, "%s: no PeerGone: %s", who, strerror(-rc));
    cr_assert_eq(f.type, DERP_FRAME_PEER_GONE, "%s: frame type %u, want PeerGone", who, f.type);
    cr_assert_eq(f.len, DERP_PEER_GONE_LEN, "%s: PeerGone length", who);
    cr_assert_eq(memcmp(f.p, peer->bytes, DERP_KEY_LEN), 0, "%s: PeerGone names another key", who);
    cr_assert_eq(f.p[DERP_KEY_LEN], DERP_PEER_GONE_DISCONNECTED, "%s: reason %u", who,
                 f.p[DERP_KEY_LEN]);
}

/* No frame at all but KeepAlives for REGION_QUIET_MS. */
void region_expect_quiet(struct conf_raw *r, const char *who)
{
    struct conf_frame f = {0};
    int rc = conf_raw_expect_silence(r, REGION_QUIET_MS, &f);
    cr_assert_eq(rc, 0, "%s: rc %d, unexpected frame type %u", who, rc, f.type);
}
