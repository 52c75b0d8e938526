/* server_hooks.c - the composition root's answer to the relay core's events: what admission
 * (admit/), accounting (ops/) and the upgrade's bookkeeping (upgrade/) do when a client logs
 * in, settles on a shard, moves, sends or closes. The core (relay/) calls these through
 * cfg->hooks and nothing above it otherwise (tidy: server-layers), so the policies can call
 * down into the core without a cycle. Runs on the client's shard, inside the core's call. */
#include <errno.h>

#include "server.h"

#include "ops/server_account.h"
#include "upgrade/server_live.h"

/* §5: --allow-keys first (no controller request for a key that is not listed), then the
 * controller or tailscaled; mesh peers skip every check (the core does not ask for them). */
static int admit(struct srv_client *cl)
{
    struct srv_shard *ds = cl->ds;
    if (!srv_allow_admits(ds, &cl->key))
        return -EACCES;
    int rc;
    if (srv_admit_needed(ds->cfg) && (rc = srv_admit_start(cl)) <= 0)
        return rc;
    return srv_client_admitted(cl);
}

static void login_over(struct srv_client *cl)
{
    srv_prelogin_leave(cl->ds, net_conn_peer(cl->conn));
}

/* The key's quota before the bucket (its burst may be the key's own). */
static void settle(struct srv_client *cl)
{
    srv_quota_attach(cl);
    srv_rate_client_init(cl, hd_now_ms(cl->ds->s));
    srv_acct_attach(cl); /* per-key accounting: this shard's tables */
    srv_admit_recheck_start(cl);
}

static void unsettle(struct srv_client *cl)
{
    srv_admit_recheck_stop(cl);
    srv_acct_detach(cl); /* feeds this shard's tables what is left */
}

/* Before the core lets go of a closing client: an export that did not finish, or an active
 * client of a shard that hands over (the successor says it went: the watchers moved). */
static void closing(struct srv_client *cl)
{
    if (cl->exporting)
        srv_live_export_closed(cl);
    else if (cl->phase == SRV_CLIENT_ACTIVE && srv_live_frozen(cl->ds))
        srv_live_gone(cl->ds, &cl->key);
}

const struct srv_relay_hooks srv_hooks = {
    .admit = admit,
    .login_over = login_over,
    .settle = settle,
    .unsettle = unsettle,
    .closing = closing,
    .closed = srv_admit_cancel,
    .move_sent = srv_live_move_sent,
    .move_done = srv_live_move_done,
    .tally_feed = srv_acct_feed,
    .rate_take = srv_rate_take,
    .rate_frame_done = srv_rate_frame_done,
    .quota_take = srv_quota_take,
};
