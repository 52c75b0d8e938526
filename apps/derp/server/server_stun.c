/* server_stun.c - STUN on -stun-port (spec §10): one UDP socket per shard (SO_REUSEPORT) on the
 * IP of -a; Tailscale binding requests get one XOR-MAPPED-ADDRESS reply (family 1 for IPv4
 * clients, as the spec recommends), anything else is counted and ignored. Runs on each shard. */
#include <errno.h>
#include <string.h>

#include "server.h"
#include "upgrade/server_upgrade.h"

static void stun_datagram(struct net_udp *u, const uint8_t *data, size_t len,
                          const struct net_addr *from, void *arg)
{
    struct srv_shard *ds = arg;
    uint8_t txid[DERP_STUN_TXID_LEN];
    if (derp_stun_parse_request(data, len, txid) < 0) {
        ds->ctr.stun_not_stun++;
        return;
    }
    struct derp_addr addr;
    if (derp_addr_from_sockaddr(&addr, &from->sa, from->len) < 0) {
        ds->ctr.stun_not_stun++;
        return;
    }
    if (derp_addr_is_ipv4(&addr))
        ds->ctr.stun_ipv4++;
    else
        ds->ctr.stun_ipv6++;
    uint8_t reply[64];
    ssize_t n = derp_stun_build_response(reply, sizeof(reply), txid, &addr);
    if (n < 0 || net_udp_send(u, reply, (size_t)n, from) < 0) {
        ds->ctr.stun_write_error++;
        return;
    }
    ds->ctr.stun_success++;
}

int srv_stun_start(struct srv_shard *ds)
{
    const struct srv_config *cfg = ds->cfg;
    struct net_addr a = cfg->addr; /* same IP as -a */
    if (a.sa.sa_family == AF_INET)
        a.in4.sin_port = htons((uint16_t)cfg->stun_port);
    else
        a.in6.sin6_port = htons((uint16_t)cfg->stun_port);
    unsigned id = hd_shard_id(ds->s);
    int fd = srv_upgrade_take(cfg, SRV_UP_STUN, id); /* handed over by an upgrade, or -1 */
    int rc = fd >= 0 ? net_udp_adopt(ds->s, fd, stun_datagram, ds, &ds->stun)
                     : net_udp_open(ds->s, &a, stun_datagram, ds, &ds->stun);
    if (rc == 0)
        srv_upgrade_note(cfg, SRV_UP_STUN, id, net_udp_fd(ds->stun));
    if (rc < 0)
        hd_log(HD_LOG_ERROR, "STUN: cannot listen on UDP port %d: %s", cfg->stun_port,
               strerror(-rc));
    return rc;
}

void srv_stun_stop(struct srv_shard *ds)
{
    if (ds->stun)
        net_udp_close(ds->stun);
    ds->stun = NULL;
}
