/* fuzz_mesh_with.c - libFuzzer target for hderp-server's -mesh-with list parser (srv_mesh_parse
 * in apps/derp/server/relay/server_mesh.c: the syntax, without the https links' TLS context).
 * Input: a flags byte (bit 0: no mesh key configured), then the list as given on the command line.
 * Invariants: an error says why; a list that parses has at most SRV_MESH_NODES_MAX nodes, each
 * with its entry trimmed and comma-free, a port, a Host header, a TLS name and a dial host that is
 * an address (then resolved, with that port) or a plain host name; https unless it says http://;
 * and the entries joined again with commas parse to the same nodes. */
#include <arpa/inet.h>
#include <string.h>

#include "fuzz_util.h"
#include "server.h"

static char list[16384], again[SRV_MESH_NODES_MAX * (SRV_MESH_ENTRY_LEN_MAX + 1) + 1];

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

static uint16_t addr_port(const struct net_addr *a)
{
    return ntohs(a->sa.sa_family == AF_INET6 ? a->in6.sin6_port : a->in4.sin_port);
}

static void check_node(const struct srv_mesh_node *n)
{
    size_t len = strlen(n->entry);
    CHECK(len > 0 && len <= SRV_MESH_ENTRY_LEN_MAX && strchr(n->entry, ',') == NULL);
    CHECK(n->entry[0] != ' ' && n->entry[0] != '\t');
    CHECK(n->entry[len - 1] != ' ' && n->entry[len - 1] != '\t');
    CHECK(n->tls == (strncmp(n->entry, "http://", 7) != 0));
    CHECK(n->port != 0 && n->host[0] && n->name[0] && n->dial[0]);
    if (n->numeric) {
        CHECK(n->addr.len > 0 && addr_port(&n->addr) == n->port);
    } else {
        CHECK(n->dial[0] != '.' && n->dial[0] != '-');
        for (const char *p = n->dial; *p; p++)
            CHECK(name_char(*p));
    }
}

static bool same_node(const struct srv_mesh_node *a, const struct srv_mesh_node *b)
{
    return strcmp(a->entry, b->entry) == 0 && strcmp(a->host, b->host) == 0 &&
           strcmp(a->name, b->name) == 0 && strcmp(a->dial, b->dial) == 0 && a->port == b->port &&
           a->numeric == b->numeric && a->tls == b->tls && a->addr.len == b->addr.len &&
           memcmp(&a->addr.sa, &b->addr.sa, a->addr.len) == 0;
}

/* The parsed entries joined with commas parse to the same nodes. */
static void check_reparse(const struct srv_config *cfg)
{
    size_t n = 0;
    again[0] = '\0';
    for (unsigned i = 0; i < cfg->mesh_count; i++)
        n += (size_t)snprintf(again + n, sizeof(again) - n, "%s%s", i ? "," : "",
                              cfg->mesh[i].entry);
    static struct srv_config cfg2; /* a large struct: not on the stack */
    memset(&cfg2, 0, sizeof(cfg2));
    cfg2.have_mesh_key = true;
    char err[512] = "";
    CHECK(srv_mesh_parse(&cfg2, again, err, sizeof(err)) == 0);
    CHECK(cfg2.mesh_count == cfg->mesh_count);
    for (unsigned i = 0; i < cfg->mesh_count; i++)
        CHECK(same_node(&cfg->mesh[i], &cfg2.mesh[i]));
    srv_mesh_config_free(&cfg2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > sizeof(list))
        return 0;
    memcpy(list, data + 1, size - 1);
    list[size - 1] = '\0'; /* a NUL inside ends the list early, as on a command line */
    static struct srv_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.have_mesh_key = !(data[0] & 1);
    char err[512] = "";
    int rc = srv_mesh_parse(&cfg, list, err, sizeof(err));
    CHECK(rc == 0 || rc == -1);
    if (rc < 0) {
        CHECK(err[0] != '\0');
    } else {
        CHECK(cfg.mesh_count <= SRV_MESH_NODES_MAX);
        CHECK(cfg.have_mesh_key || cfg.mesh_count == 0);
        for (unsigned i = 0; i < cfg.mesh_count; i++)
            check_node(&cfg.mesh[i]);
        check_reparse(&cfg);
    }
    srv_mesh_config_free(&cfg);
    return 0;
}
