/* server_proxy.c - hderp-server behind a TCP proxy (haproxy send-proxy-v2, nginx stream
 * proxy_protocol, Caddy L4): --proxy-protocol-from lists the proxies; their connections to the
 * main listener start with a PROXY v1/v2 header (net_proxy.h), read before TLS and HTTP, and the
 * client address in it becomes the connection's peer, so logs, -accept-connection-limit
 * (checked once the header is read), admission's Source and the /debug loopback check see the
 * client, not the proxy. Connections from anyone else are refused. Main thread (configure) and
 * the accepting shard. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

int srv_proxy_configure(struct srv_config *cfg, const char *list)
{
    const char *bad = list;
    int n = net_cidr_parse_list(list, cfg->proxy_from, NET_CIDR_LIST_MAX, &bad);
    if (n == -E2BIG) {
        fprintf(stderr, "hderp-server: --proxy-protocol-from %s: more than %u entries\n", list,
                NET_CIDR_LIST_MAX);
        return n;
    }
    if (n < 0) {
        size_t len = strcspn(bad, ",");
        fprintf(stderr,
                "hderp-server: --proxy-protocol-from %s: \"%.*s\" is not an address or CIDR "
                "(like 10.0.0.0/8, ::1)\n",
                list, (int)len, bad);
        return n;
    }
    cfg->proxy_from_count = (unsigned)n;
    return 0;
}

static void header_done(struct net_conn *c, int rc, const struct net_proxy_header *h,
                        const char *reason)
{
    struct srv_shard *ds = net_conn_app(c);
    char peer[64];
    net_addr_format(net_conn_peer(c), peer, sizeof(peer)); /* after the header: the client */
    if (rc < 0) { /* net closes the connection (-EPROTO) after this */
        ds->ctr.proxy_bad_headers++;
        hd_log_rl(HD_LOG_INFO, "proxy: %s: bad PROXY header (%s): connection closed", peer, reason);
        return;
    }
    ds->ctr.proxy_headers++;
    /* Counted as not logged in under the proxy's address at accept: from now on the client's
     * (its close leaves that one), and the per-address cap applies to the client. */
    if (!h->local && srv_prelogin_move(ds, &h->via, net_conn_peer(c))) {
        hd_log_rl(HD_LOG_WARN,
                  "accept: %s has too many connections not logged in "
                  "(--prelogin-per-addr-max): closed",
                  peer);
        net_conn_close(c, 0, false);
        return;
    }
    hd_log(HD_LOG_DEBUG, "proxy: PROXY v%u header: client %s%s", (unsigned)h->version, peer,
           h->local ? " (LOCAL: the proxy itself)" : "");
    if (!srv_accept_allowed(ds)) { /* the limit counts clients, so it is checked here */
        ds->ctr.accepts_refused++;
        hd_log_rl(HD_LOG_INFO, "accept: %s over -accept-connection-limit: connection closed", peer);
        net_conn_close(c, 0, false);
        return;
    }
    ds->ctr.listener_accepted++;
    if (ds->cfg->tls)
        srv_http_tls_start(ds, c); /* the bytes after the header are the ClientHello */
}

static const struct net_proxy_step header_step = {.done = header_done};

void srv_proxy_accept(struct srv_shard *ds, int fd, const struct net_addr *peer)
{
    if (!net_cidr_match(ds->cfg->proxy_from, ds->cfg->proxy_from_count, peer)) {
        char text[64];
        ds->ctr.proxy_untrusted++;
        hd_log_rl(HD_LOG_WARN,
                  "proxy: connection from %s refused: not in --proxy-protocol-from (only the "
                  "proxies listed there may connect)",
                  net_addr_format(peer, text, sizeof(text)));
        close(fd);
        return;
    }
    struct net_conn *c = srv_http_adopt(ds, fd, peer);
    if (c == NULL)
        return;
    int rc = net_proxy_start(c, &header_step);
    HD_ASSERT(rc == 0); /* a fresh connection has no codec */
}
