/* server_derpmap.c - --print-derpmap: the DERP map region (tailcfg.DERPRegion with one
 * DERPNode) a control server needs for this node, worked out from the flags it would run with:
 * HostName (-hostname), IPv4/IPv6 (--derpmap-ipv4/-ipv6, else the -a address or an IP
 * -hostname when they name one), DERPPort (--derpmap-port, else -a's port; behind a proxy,
 * --proxy-protocol-from, 443 and no address from -a: those are the inside ones), STUNPort
 * (-stun-port; -1 with -stun=false, as derper's map disables STUN), CanPort80 (TLS mode with
 * -http-port 80), InsecureForTests for plain HTTP, and CertName for an IP -hostname's
 * certificate in -certmode manual. As JSON for a Tailscale policy file's
 * "derpMap", or as YAML for a Headscale derp.paths file (its keys are the Go field names in lower
 * case). Main thread, instead of starting. */
#include <arpa/inet.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/net.h>
#include <hd/tls.h>
#include "ops/server_flags.h"

#define DERPMAP_REGION_ID_DEFAULT 900 /* the first of the ids Tailscale leaves to custom maps */

struct node {
    long region_id;
    char region_id_text[16];
    const char *code, *name;
    char node_name[64];
    const char *host;
    char ipv4[INET_ADDRSTRLEN], ipv6[INET6_ADDRSTRLEN];
    int derp_port, stun_port;
    bool can80, insecure;
    char cert_name[80]; /* "sha256-raw:<hex>": an IP -hostname's self-signed certificate */
};

/* The -a address when it names one host (not the wildcard). */
static void listen_ip(const struct net_addr *a, struct node *n)
{
    if (a->sa.sa_family == AF_INET && a->in4.sin_addr.s_addr != htonl(INADDR_ANY))
        inet_ntop(AF_INET, &a->in4.sin_addr, n->ipv4, sizeof(n->ipv4));
    if (a->sa.sa_family == AF_INET6 && !IN6_IS_ADDR_UNSPECIFIED(&a->in6.sin6_addr))
        inet_ntop(AF_INET6, &a->in6.sin6_addr, n->ipv6, sizeof(n->ipv6));
}

static int ip_flag(const char *flag, const char *v, int family, char *out, size_t size)
{
    unsigned char buf[16];
    if (inet_pton(family, v, buf) != 1) {
        fprintf(stderr, "hderp-server: --%s %s: not an IPv%c address\n", flag, v,
                family == AF_INET ? '4' : '6');
        return -1;
    }
    inet_ntop(family, buf, out, (socklen_t)size);
    return 0;
}

/* The CertName that pins an IP -hostname's certificate (derper logs it at start; the server
 * writes a self-signed one on its first start: server_setup.c). */
static void cert_name(const struct srv_flags *f, struct node *n)
{
    char dir[1024], crt[1400], key[1400];
    uint8_t sum[32];
    if (srv_flags_cert_paths(f, dir, crt, key, sizeof(dir)) < 0 ||
        tls_cert_file_sha256(crt, sum) < 0) {
        fprintf(stderr,
                "hderp-server: note: no certificate in %s yet: start the server once "
                "(it writes a self-signed one) and print again for its CertName\n",
                dir);
        return;
    }
    int len = snprintf(n->cert_name, sizeof(n->cert_name), "sha256-raw:");
    for (size_t i = 0; i < sizeof(sum); i++)
        len += snprintf(n->cert_name + len, sizeof(n->cert_name) - (size_t)len, "%02x", sum[i]);
}

static int node_from_flags(const struct srv_flags *f, struct node *n)
{
    struct net_addr a;
    if (net_addr_parse(f->addr, &a) < 0) {
        fprintf(stderr, "hderp-server: -a %s: not a numeric address\n", f->addr);
        return -1;
    }
    memset(n, 0, sizeof(*n));
    n->region_id = f->derpmap_region_id ? f->derpmap_region_id : DERPMAP_REGION_ID_DEFAULT;
    snprintf(n->region_id_text, sizeof(n->region_id_text), "%ld", n->region_id);
    n->code = f->derpmap_region_code ? f->derpmap_region_code : "hderp";
    n->name = f->derpmap_region_name ? f->derpmap_region_name : n->code;
    snprintf(n->node_name, sizeof(n->node_name), "%s",
             f->derpmap_node_name ? f->derpmap_node_name : "");
    if (n->node_name[0] == '\0')
        snprintf(n->node_name, sizeof(n->node_name), "%lda", n->region_id);
    n->host = f->hostname;
    if (f->proxy_from == NULL) /* behind a proxy, -a is the inside address */
        listen_ip(&a, n);
    unsigned char ip[16];
    if (inet_pton(AF_INET, f->hostname, ip) == 1 && n->ipv4[0] == '\0')
        inet_ntop(AF_INET, ip, n->ipv4, sizeof(n->ipv4));
    if (inet_pton(AF_INET6, f->hostname, ip) == 1 && n->ipv6[0] == '\0')
        inet_ntop(AF_INET6, ip, n->ipv6, sizeof(n->ipv6));
    if (f->derpmap_ipv4 &&
        ip_flag("derpmap-ipv4", f->derpmap_ipv4, AF_INET, n->ipv4, sizeof(n->ipv4)) < 0)
        return -1;
    if (f->derpmap_ipv6 &&
        ip_flag("derpmap-ipv6", f->derpmap_ipv6, AF_INET6, n->ipv6, sizeof(n->ipv6)) < 0)
        return -1;
    if (f->dev && strcmp(f->hostname, "derp.tailscale.com") == 0) /* -dev: the address */
        n->host = n->ipv4[0] ? n->ipv4 : n->ipv6[0] ? n->ipv6 : n->host;
    bool tls = srv_flags_tls_mode(f);
    n->derp_port = f->derpmap_port         ? (int)f->derpmap_port
                   : f->proxy_from == NULL ? net_addr_port(&a)
                                           : 443; /* the proxy's port, as a client dials it */
    n->stun_port = f->stun ? f->stun_port : -1;
    n->can80 = tls && f->http_port == 80;
    n->insecure = !tls;
    if (tls && strcmp(f->certmode, "manual") == 0 && (n->ipv4[0] || n->ipv6[0]) &&
        (inet_pton(AF_INET, f->hostname, ip) == 1 || inet_pton(AF_INET6, f->hostname, ip) == 1))
        cert_name(f, n);
    return 0;
}

static json_t *node_json(const struct node *n)
{
    json_t *o = json_object();
    json_object_set_new(o, "Name", json_string(n->node_name));
    json_object_set_new(o, "RegionID", json_integer(n->region_id));
    json_object_set_new(o, "HostName", json_string(n->host));
    if (n->ipv4[0])
        json_object_set_new(o, "IPv4", json_string(n->ipv4));
    if (n->ipv6[0])
        json_object_set_new(o, "IPv6", json_string(n->ipv6));
    json_object_set_new(o, "DERPPort", json_integer(n->derp_port));
    json_object_set_new(o, "STUNPort", json_integer(n->stun_port));
    json_object_set_new(o, "CanPort80", json_boolean(n->can80));
    if (n->cert_name[0])
        json_object_set_new(o, "CertName", json_string(n->cert_name));
    if (n->insecure)
        json_object_set_new(o, "InsecureForTests", json_true());
    return o;
}

static int print_json(const struct node *n, FILE *out)
{
    json_t *region = json_object();
    json_object_set_new(region, "RegionID", json_integer(n->region_id));
    json_object_set_new(region, "RegionCode", json_string(n->code));
    json_object_set_new(region, "RegionName", json_string(n->name));
    json_t *nodes = json_array();
    json_array_append_new(nodes, node_json(n));
    json_object_set_new(region, "Nodes", nodes);
    json_t *regions = json_object();
    json_object_set_new(regions, n->region_id_text, region);
    json_t *map = json_object();
    json_object_set_new(map, "Regions", regions);
    json_t *root = json_object();
    json_object_set_new(root, "derpMap", map);
    int rc = json_dumpf(root, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    fputc('\n', out);
    return rc < 0 ? -1 : 0;
}

/* A YAML double-quoted scalar: JSON's string escapes are valid YAML ones. */
static void yaml_str(FILE *out, const char *key, const char *v, const char *indent)
{
    json_t *s = json_string(v);
    char *q = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    fprintf(out, "%s%s: %s\n", indent, key, q ? q : "\"\"");
    free(q);
    json_decref(s);
}

static int print_yaml(const struct node *n, FILE *out)
{
    fprintf(out, "# Headscale: a file listed in derp.paths (or derp.urls)\nregions:\n");
    fprintf(out, "  %ld:\n    regionid: %ld\n", n->region_id, n->region_id);
    yaml_str(out, "regioncode", n->code, "    ");
    yaml_str(out, "regionname", n->name, "    ");
    fprintf(out, "    nodes:\n");
    yaml_str(out, "- name", n->node_name, "      ");
    fprintf(out, "        regionid: %ld\n", n->region_id);
    yaml_str(out, "hostname", n->host, "        ");
    if (n->ipv4[0])
        yaml_str(out, "ipv4", n->ipv4, "        ");
    if (n->ipv6[0])
        yaml_str(out, "ipv6", n->ipv6, "        ");
    fprintf(out, "        derpport: %d\n        stunport: %d\n        canport80: %s\n",
            n->derp_port, n->stun_port, n->can80 ? "true" : "false");
    if (n->cert_name[0])
        yaml_str(out, "certname", n->cert_name, "        ");
    if (n->insecure)
        fprintf(out, "        insecurefortests: true\n");
    return ferror(out) ? -1 : 0;
}

int srv_derpmap_print(const struct srv_flags *f, FILE *out)
{
    struct node n;
    if (node_from_flags(f, &n) < 0)
        return -1;
    if (strcmp(n.host, "derp.tailscale.com") == 0)
        fprintf(stderr, "hderp-server: note: -hostname is derper's default derp.tailscale.com; "
                        "give this node's own name\n");
    if (n.insecure)
        fprintf(stderr, "hderp-server: note: plain HTTP (not TLS mode): clients need "
                        "TS_DEBUG_USE_DERP_HTTP=1, for tests only\n");
    if (n.ipv4[0] == '\0' && n.ipv6[0] == '\0')
        fprintf(stderr, "hderp-server: note: no IPv4/IPv6 known (a wildcard -a and a DNS "
                        "-hostname): clients resolve HostName; --derpmap-ipv4 sets one\n");
    return f->print_derpmap == 2 ? print_yaml(&n, out) : print_json(&n, out);
}
