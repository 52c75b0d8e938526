/* server_mesh.c - the region's mesh (spec §7): -mesh-with parsed as derper does (each entry a
 * node id with its Host header, TLS name and dial host), and for each other node an outbound
 * DERP client (this server's own key + the mesh key, WatchConns) that lives on shard
 * id % shards for its whole life, so everything it reports travels one bus in order, and
 * redials every 5 s after a failed or lost link. A link whose ServerKey is our own key is this
 * server: dropped for good. Its PeerPresent/PeerGone stream becomes "key K reachable via node
 * id" on K's owner shard (server_peers.c); an update that cannot be handed to the owner (bus
 * full, frame pool empty) closes the link, whose redial replays the node's whole snapshot, so no
 * route stays missing or stale. A packet for a key only the mesh has comes here from the owner
 * shard and leaves once as ForwardPacket(src, dst, packet) on the node's link
 * (packets_forwarded_out; a link that is down or over its send cap drops it,
 * mesh_forward_dropped). A receiving node reads it on the inbound mesh connection
 * (packets_forwarded_in) and routes it with forwarded set: delivered locally or dropped as
 * unknown_dest_on_fwd, never forwarded again; for a disco packet it answers NotHere to the
 * sending node (on its link's connection), which makes it forget the route. Logins with the mesh
 * key are capped per shard (--mesh-conns-max: a region is a handful of nodes). Configuration runs
 * on the main thread at start-up (syntax only); a named node is looked up at each dial
 * (net_resolve_start, off the shard) and its addresses tried in turn before the next lookup, as
 * Go's dialer does (a name that does not resolve only delays that link); the rest runs on the
 * links' shards. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "derp_client.h"
#include "server.h"

/* ---------------------------------------------------------------- -mesh-with */

/* A DNS name: letters, digits, '-', '_' and dots (looked up at each dial, not here). */
static bool valid_name(const char *name)
{
    if (name[0] == '\0' || name[0] == '.' || name[0] == '-')
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return false;
    return true;
}

/* [http://|https://]host[:port][/dialhost]: the URL is <scheme>://host[:port]/derp, dialed at
 * dialhost (or host) on the same port. http:// is hderp's addition (plain-HTTP labs); derper
 * always uses https. */
static int parse_entry(const char *entry, struct srv_mesh_node *n, char *err, size_t err_size)
{
    const char *e = entry;
    n->tls = true;
    if (strncmp(e, "http://", 7) == 0) {
        n->tls = false;
        e += 7;
    } else if (strncmp(e, "https://", 8) == 0) {
        e += 8;
    }
    const char *slash = strchr(e, '/');
    size_t host_len = slash ? (size_t)(slash - e) : strlen(e);
    const char *dial = slash ? slash + 1 : NULL;
    const char *colon = dial ? strchr(dial, ':') : NULL;
    bool dial_port = colon && !strchr(colon + 1, ':'); /* one colon: a port, not IPv6 */
    if (host_len == 0 || (dial && (dial[0] == '\0' || strchr(dial, '/') || dial_port))) {
        snprintf(err, err_size,
                 "\"%s\" is not host[:port][/dialhost] (the port goes on the host, the dial "
                 "host keeps it)",
                 entry);
        return -1;
    }
    char url[SRV_MESH_ENTRY_LEN_MAX + 16];
    snprintf(url, sizeof(url), "%s://%.*s/derp", n->tls ? "https" : "http", (int)host_len, e);
    struct net_url u;
    if (net_url_parse(url, &u) < 0) {
        snprintf(err, err_size, "\"%s\": bad host or port", entry);
        return -1;
    }
    snprintf(n->entry, sizeof(n->entry), "%s", entry);
    memcpy(n->host, u.authority, sizeof(n->host));
    memcpy(n->name, u.host, sizeof(n->name));
    if (dial) { /* the dial host replaces the host, the port stays */
        size_t len = strlen(dial);
        if (dial[0] == '[' && len > 2 && dial[len - 1] == ']')
            dial++, len -= 2;
        if (len >= sizeof(u.host)) {
            snprintf(err, err_size, "\"%s\": dial host too long", entry);
            return -1;
        }
        memcpy(u.host, dial, len);
        u.host[len] = '\0';
    }
    memcpy(n->dial, u.host, sizeof(n->dial));
    n->port = u.port;
    n->numeric = net_url_resolve(&u, true, &n->addr) == 0;
    if (!n->numeric && !valid_name(n->dial)) {
        snprintf(err, err_size, "\"%s\": %s is neither an address nor a host name", entry, n->dial);
        return -1;
    }
    return 0;
}

/* https links verify against the system roots as Go's derper does (SSL_CERT_FILE, SSL_CERT_DIR
 * replace the defaults), so a region can run on a private CA. */
static int mesh_tls_create(struct srv_config *cfg, char *err, size_t err_size)
{
    struct tls_client_options o = {.system_roots = true};
    int rc = tls_client_ctx_create(&o, &cfg->mesh_tls);
    if (rc < 0) {
        snprintf(err, err_size, "cannot load the system CA roots for https links: %s",
                 strerror(-rc));
        return -1;
    }
    return 0;
}

int srv_mesh_parse(struct srv_config *cfg, const char *list, char *err, size_t err_size)
{
    if (list == NULL || list[0] == '\0')
        return 0;
    if (!cfg->have_mesh_key) {
        snprintf(err, err_size, "needs a mesh key (-mesh-psk-file)");
        return -1;
    }
    cfg->mesh = calloc(SRV_MESH_NODES_MAX, sizeof(*cfg->mesh));
    if (cfg->mesh == NULL) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        const char *next = p[len] ? p + len + 1 : p + len;
        while (len && (*p == ' ' || *p == '\t'))
            p++, len--;
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len == 0) { /* "a,,b" or a trailing comma */
            p = next;
            continue;
        }
        if (len > SRV_MESH_ENTRY_LEN_MAX) {
            snprintf(err, err_size, "an entry is longer than %u bytes", SRV_MESH_ENTRY_LEN_MAX);
            return -1;
        }
        if (cfg->mesh_count == SRV_MESH_NODES_MAX) {
            snprintf(err, err_size, "more than %u nodes", SRV_MESH_NODES_MAX);
            return -1;
        }
        char entry[SRV_MESH_ENTRY_LEN_MAX + 1];
        memcpy(entry, p, len);
        entry[len] = '\0';
        struct srv_mesh_node *n = &cfg->mesh[cfg->mesh_count];
        if (parse_entry(entry, n, err, err_size) < 0)
            return -1;
        cfg->mesh_count++;
        p = next;
    }
    return 0;
}

int srv_mesh_configure(struct srv_config *cfg, const char *list, char *err, size_t err_size)
{
    if (srv_mesh_parse(cfg, list, err, err_size) < 0)
        return -1;
    bool any_tls = false;
    for (unsigned i = 0; i < cfg->mesh_count; i++)
        any_tls |= cfg->mesh[i].tls;
    if (any_tls && mesh_tls_create(cfg, err, err_size) < 0)
        return -1;
    return 0;
}

void srv_mesh_config_free(struct srv_config *cfg)
{
    if (cfg->mesh_tls)
        tls_ctx_destroy(cfg->mesh_tls);
    cfg->mesh_tls = NULL;
    free(cfg->mesh);
    cfg->mesh = NULL;
    cfg->mesh_count = 0;
}

/* ---------------------------------------------------------------- the links */

static const char *why(int reason)
{
    if (reason == 0 || reason == -ESHUTDOWN)
        return "closed by the node";
    if (reason == -EPROTO)
        return "protocol or TLS error (see the tls: line; is the node's certificate trusted?)";
    return strerror(-reason);
}

static void link_dial(struct srv_mesh_link *l);

static struct srv_mesh_link *link_of(struct derp_client *k)
{
    return derp_client_user(k);
}

static void link_server_key(struct derp_client *k, const struct derp_pubkey *key)
{
    struct srv_mesh_link *l = link_of(k);
    if (!derp_pubkey_equal(key, &l->ds->cfg->key.pub))
        return;
    hd_log(HD_LOG_INFO, "mesh: %s is this server (same key): not meshing with it", l->node->entry);
    l->self = true;
    derp_client_abort(k, 0);
}

static void link_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    struct srv_mesh_link *l = link_of(k);
    l->ready = true;
    l->failures = 0;
    l->ds->ctr.mesh_links_ready++;
    hd_log(HD_LOG_INFO, "mesh: linked to %s", l->node->entry);
}

/* The link's owner-shard events: f->data = key, arg = node id. */
static void add_event(struct srv_shard *ds, struct hd_frame *f, uint64_t id)
{
    srv_forwarder_add(ds, f->data, (unsigned)id);
}

static void remove_event(struct srv_shard *ds, struct hd_frame *f, uint64_t id)
{
    srv_forwarder_remove(ds, f->data, (unsigned)id);
}

static void remove_node_event(struct srv_shard *ds, struct hd_frame *f, uint64_t id)
{
    (void)f;
    srv_forwarder_remove_node(ds, (unsigned)id);
}

/* A lost update would leave a route missing or stale until the link redials: so a lost one
 * closes the link, whose redial replays the node's whole snapshot. */
static void to_owner(struct srv_mesh_link *l, const uint8_t key[DERP_KEY_LEN], srv_event_fn *fn)
{
    struct srv_shard *ds = l->ds;
    struct hd_frame *f = srv_key_frame(ds, key, NULL);
    if (f && srv_event_send(ds, srv_owner(ds, key), fn, f, l->id) == 0)
        return;
    hd_log_rl(HD_LOG_WARN, "mesh: an update from %s was lost (%s): relinking to resync",
              l->node->entry, f ? "bus full" : "frame pool exhausted");
    if (l->k)
        derp_client_abort(l->k, -ENOBUFS);
}

static void link_present(struct derp_client *k, const struct derp_peer_present *p)
{
    link_of(k)->reported = true;
    to_owner(link_of(k), p->key, add_event);
}

/* Any reason: Disconnected from its watch stream, or NotHere after a forward (§7). */
static void link_gone(struct derp_client *k, const struct derp_pubkey *peer, uint8_t reason)
{
    (void)reason;
    to_owner(link_of(k), peer->bytes, remove_event);
}

static void link_retry(struct hd_timer *t)
{
    link_dial(hd_container_of(t, struct srv_mesh_link, retry));
}

static void link_closed(struct derp_client *k, int reason)
{
    struct srv_mesh_link *l = link_of(k);
    struct srv_shard *ds = l->ds;
    l->k = NULL;
    bool stopping = hd_shard_stopping(ds->s), was_ready = l->ready;
    if (was_ready) {
        l->ready = false;
        ds->ctr.mesh_links_ready--;
        if (!stopping)
            hd_log(HD_LOG_WARN, "mesh: link to %s lost (%s): forgetting its clients, redial in %ds",
                   l->node->entry, why(reason), DERP_MESH_RETRY_MS / 1000);
    } else if (!l->self && !stopping && l->failures++ % 12 == 0) { /* once a minute */
        hd_log(HD_LOG_WARN, "mesh: cannot link to %s: %s; retrying every %ds", l->node->entry,
               why(reason), DERP_MESH_RETRY_MS / 1000);
    }
    /* Everything it told us, on every shard; after its earlier updates on the same bus. A
     * link that reported nothing (a failed dial) has nothing to forget. */
    struct hd_frame *f = l->reported ? hd_frame_get(ds->s, 1) : NULL;
    l->reported = false;
    if (f)
        srv_event_broadcast(ds, remove_node_event, f, l->id);
    if (l->self || stopping)
        return;
    if (!was_ready && l->addr_next < l->addrs_count) {
        link_dial(l); /* the name's next address at once */
        return;
    }
    l->addrs_count = l->addr_next = 0; /* look the name up again */
    hd_timer_start(ds->s, &l->retry, DERP_MESH_RETRY_MS);
}

static const struct derp_client_callbacks link_callbacks = {
    .on_server_key = link_server_key,
    .on_ready = link_ready,
    .on_peer_present = link_present,
    .on_peer_gone = link_gone,
    .on_close = link_closed,
};

/* Dial one address; on a failure to start, the next one or the 5 s retry. */
static void link_connect(struct srv_mesh_link *l, const struct net_addr *addr)
{
    const struct srv_config *cfg = l->ds->cfg;
    const struct srv_mesh_node *n = l->node;
    struct derp_client_config c = {
        .addr = *addr,
        .host = n->host,
        .path = "/derp",
        .tls = n->tls,
        .tls_ctx = n->tls ? cfg->mesh_tls : NULL,
        .tls_server_name = n->name,
        .keypair = &cfg->key,
        .mesh_key = &cfg->mesh_key,
        .watch = true,
        .send_high_bytes = SRV_NET_HIGH_BYTES,
        .send_low_bytes = SRV_NET_LOW_BYTES,
        .send_max_bytes = SRV_NET_MAX_BYTES, /* like a client: past it forwards drop */
    };
    int rc = derp_client_connect(l->ds->s, &c, &link_callbacks, l, &l->k);
    if (rc == 0)
        return;
    l->k = NULL;
    char text[64];
    if (l->failures++ % 12 == 0)
        hd_log(HD_LOG_WARN, "mesh: cannot dial %s (%s): %s; retrying every %ds", n->entry,
               net_addr_format(addr, text, sizeof(text)), strerror(-rc), DERP_MESH_RETRY_MS / 1000);
    hd_timer_start(l->ds->s, &l->retry, DERP_MESH_RETRY_MS);
}

static void link_resolved(struct hd_shard *s, int rc, const struct net_addr *addrs, unsigned count,
                          void *arg)
{
    (void)s;
    struct srv_mesh_link *l = arg;
    l->resolving = NULL;
    if (rc < 0) {
        if (l->failures++ % 12 == 0)
            hd_log(HD_LOG_WARN, "mesh: cannot look up %s for %s: %s; retrying every %ds",
                   l->node->dial, l->node->entry,
                   rc == -EAGAIN ? "temporary DNS failure" : "no such name",
                   DERP_MESH_RETRY_MS / 1000);
        hd_timer_start(l->ds->s, &l->retry, DERP_MESH_RETRY_MS);
        return;
    }
    memcpy(l->addrs, addrs, count * sizeof(*addrs));
    l->addrs_count = count;
    l->addr_next = 1;
    link_connect(l, &l->addrs[0]);
}

/* The node's address, the next one of its name, or a fresh lookup. */
static void link_dial(struct srv_mesh_link *l)
{
    const struct srv_mesh_node *n = l->node;
    if (n->numeric) {
        link_connect(l, &n->addr);
        return;
    }
    if (l->addr_next < l->addrs_count) {
        link_connect(l, &l->addrs[l->addr_next++]);
        return;
    }
    l->addrs_count = l->addr_next = 0;
    int rc = net_resolve_start(l->ds->s, n->dial, n->port, link_resolved, l, &l->resolving);
    if (rc < 0) {
        l->resolving = NULL;
        hd_log_rl(HD_LOG_WARN, "mesh: cannot start a lookup of %s: %s", n->dial, strerror(-rc));
        hd_timer_start(l->ds->s, &l->retry, DERP_MESH_RETRY_MS);
    }
}

int srv_mesh_start(struct srv_shard *ds)
{
    const struct srv_config *cfg = ds->cfg;
    if (cfg->mesh_count == 0)
        return 0;
    ds->links = calloc(cfg->mesh_count, sizeof(*ds->links));
    if (ds->links == NULL)
        return -ENOMEM;
    unsigned here = hd_shard_id(ds->s), shards = hd_shard_count(ds->s);
    for (unsigned i = 0; i < cfg->mesh_count; i++) {
        struct srv_mesh_link *l = &ds->links[i];
        l->ds = ds;
        l->node = &cfg->mesh[i];
        l->id = i;
        hd_timer_init(&l->retry, link_retry);
        if (i % shards == here)
            link_dial(l);
    }
    return 0;
}

void srv_mesh_stop(struct srv_shard *ds)
{
    for (unsigned i = 0; ds->links && i < ds->cfg->mesh_count; i++) {
        struct srv_mesh_link *l = &ds->links[i];
        hd_timer_stop(ds->s, &l->retry);
        if (l->resolving)
            net_resolve_cancel(l->resolving);
        l->resolving = NULL;
        if (l->k)
            derp_client_abort(l->k, 0);
    }
}

void srv_mesh_fini(struct srv_shard *ds)
{
    free(ds->links);
    ds->links = NULL;
}

/* ---------------------------------------------------------------- forwarding */

/* On the link's shard: f is a routed frame (dst, reply key, RecvPacket(src, packet)), ours
 * alone; the ForwardPacket(src, dst, packet) is written over its head, the packet stays put:
 *   [0 dst)[32 reply)[64 hdr)[69 src)[101 packet)  ->  [32 hdr)[37 src)[69 dst)[101 packet) */
#define FWD_OFF                                                                                    \
    (SRV_ROUTE_OFF + DERP_FRAME_HEADER_LEN + 2 * DERP_KEY_LEN -                                    \
     (DERP_FRAME_HEADER_LEN + 2 * DERP_KEY_LEN) - DERP_KEY_LEN)
_Static_assert(FWD_OFF == SRV_ROUTE_REPLY_OFF, "the ForwardPacket starts where the reply key is");

static void forward_event(struct srv_shard *ds, struct hd_frame *f, uint64_t id)
{
    struct srv_mesh_link *l = &ds->links[id];
    uint8_t *d = f->data;
    const uint32_t pkt_off = SRV_ROUTE_OFF + DERP_FRAME_HEADER_LEN + DERP_KEY_LEN;
    size_t len = f->len - pkt_off;
    if (l->ready) {
        uint8_t src[DERP_KEY_LEN], dst[DERP_KEY_LEN];
        memcpy(src, d + SRV_ROUTE_OFF + DERP_FRAME_HEADER_LEN, DERP_KEY_LEN);
        memcpy(dst, d, DERP_KEY_LEN);
        derp_frame_forward_packet_prefix_encode(d + FWD_OFF, pkt_off - FWD_OFF, src, dst, len);
        ds->ctr.packets_forwarded_out++; /* derper counts the attempt */
        if (derp_client_send_frame(l->k, f, FWD_OFF, (uint32_t)(f->len - FWD_OFF)) == 0)
            return;
    }
    /* derper ignores the error (the packet is lost); we count it. */
    ds->ctr.mesh_forward_dropped++;
    hd_log_rl(HD_LOG_INFO, "mesh: link to %s %s: a forwarded packet was dropped", l->node->entry,
              l->ready ? "is full" : "is down");
}

void srv_mesh_forward(struct srv_shard *ds, struct hd_frame *f, unsigned id)
{
    srv_event_send(ds, id % hd_shard_count(ds->s), forward_event, f, id);
}
