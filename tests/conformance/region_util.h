/* region_util.h - helpers shared by the mesh region tests (test_conformance_region.c: three
 * nodes; test_conformance_region_link.c: one node and the scripted far end of its links): up to
 * REGION_NODES hderp-server nodes on loopback given one -mesh-with list and one mesh key, their
 * varz, gauges and logs, and raw-client packet checks. Every check is a criterion assertion.
 * Test thread only; the node table is one test's at a time. */
#ifndef REGION_UTIL_H
#define REGION_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "conf_support.h"

#define REGION_NODES    3
#define REGION_MESH_HEX "8f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
/* Every link logged in: a node started before its peers redials every 5 s (§7), and an ASan
 * build on a loaded machine is slow. A hang guard, not a performance bound. */
#define REGION_LINK_MS        20000
#define REGION_SETTLE_STEP_MS 100
/* Silence long enough for a wrongly sent frame to cross two local servers. */
#define REGION_QUIET_MS 400
/* Streams go in rounds of REGION_BATCH, well under a receiver's queue depth (32). */
#define REGION_BATCH 10

/* The nodes, their main ports and the -mesh-with list each is given (filled by the test). */
extern struct conf_server region_node[REGION_NODES];
extern uint16_t region_ports[REGION_NODES];
extern char region_mesh_list[REGION_NODES * 48];

struct region_gauges {
    int64_t total, local, remote;
};

/* Each node's clients_* gauges when its region settled: the tests check deltas from these. */
extern struct region_gauges region_base[REGION_NODES];

/* Suite fini: stops every node that is still running (conf_server_down). */
void region_down(void);

/* n ports held for nodes that name each other (conf_port_hold), distinct by construction. */
void region_hold_ports(uint16_t *out, unsigned n);
/* Starts node i on region_ports[i] with -mesh-with region_mesh_list and REGION_MESH_HEX
 * (key_file: restart with that key, or NULL). */
void region_node_start(unsigned i, const char *key_file);

void region_read_gauges(unsigned i, struct region_gauges *g);
/* Waits until node i has want mesh links ready. */
void region_wait_links(unsigned i, int64_t want, int timeout_ms);
/* Waits until node i's clients_* gauges are base + (local, remote) (total follows). */
void region_wait_clients(unsigned i, int64_t local, int64_t remote);

/* conf_raw_login to node i (kp NULL: fresh keys). */
void region_login(unsigned i, struct conf_raw *r, const struct derp_keypair *kp);
void region_send_text(struct conf_raw *r, const struct derp_pubkey *dst, const char *text);
/* The next RecvPacket (PeerGone and other frames are skipped) is text from src. */
void region_expect_packet(struct conf_raw *r, const struct derp_pubkey *src, const char *text);
/* The next frame (KeepAlives skipped) is PeerGone(peer, Disconnected), within REGION_LINK_MS (a
 * link to notice its node's death, or a watch update to cross a node). */
void region_expect_gone(struct conf_raw *r, const struct derp_pubkey *peer, const char *who);
/* No frame at all but KeepAlives for REGION_QUIET_MS. */
void region_expect_quiet(struct conf_raw *r, const char *who);

#endif /* REGION_UTIL_H */
