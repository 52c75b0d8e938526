/* echo_obs_path.c - hderp-echo observe's paths: the list built from the nodes (main thread),
 * then on the shard each path's two DERP clients (pinger on `from`, echo on `to`), reconnecting
 * with back-off, the probes, their accounting (ring of sequence numbers: answered, lost after
 * ECHO_OBS_LOSS_TIMEOUT_MS, late, duplicated, reordered) and the up/down decision. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "echo_obs.h"
#include "echo_probe.h"

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void side_init(struct echo_obs_side *sd, struct echo_obs_path *p,
                      const struct echo_obs_node *n, bool is_echo);

static int add_path(struct echo_obs *ob, const struct echo_obs_node *from,
                    const struct echo_obs_node *to)
{
    struct echo_obs_path *p = &ob->paths[ob->paths_count];
    p->idx = ob->paths_count++;
    p->from = from;
    p->to = to;
    p->kind = from == to ? "node" : "mesh";
    snprintf(p->label, sizeof(p->label), "%s->%s", from->name, to->name);
    /* Every window now, not as the hour fills: the process is at its full size from the start
     * (a flat RSS is what tells an operator nothing grows). */
    hd_hist_init(&p->total_ns);
    for (unsigned i = 0; i < ECHO_OBS_SHORT_SLOTS; i++)
        hd_hist_init(&p->short_w[i].rtt_ns);
    for (unsigned i = 0; i < ECHO_OBS_LONG_SLOTS; i++)
        hd_hist_init(&p->long_w[i].rtt_ns);
    side_init(&p->pinger, p, from, false);
    side_init(&p->echo, p, to, true);
    if (derp_keypair_generate(&p->pinger.keypair) < 0 || derp_keypair_generate(&p->echo.keypair))
        return -EIO;
    return 0;
}

static bool mesh_pair(const struct echo_obs_opts *o, unsigned i, unsigned j)
{
    const struct echo_obs_node *a = &o->nodes[i], *b = &o->nodes[j];
    return o->mesh_paths && i != j && a->region[0] != '\0' && a->region_id == b->region_id;
}

int echo_obs_paths_build(struct echo_obs *ob)
{
    const struct echo_obs_opts *o = ob->o;
    unsigned count = o->nodes_count;
    for (unsigned i = 0; i < o->nodes_count; i++)
        for (unsigned j = 0; j < o->nodes_count; j++)
            count += mesh_pair(o, i, j);
    if (count > ECHO_OBS_PATHS_MAX)
        return -E2BIG;
    ob->paths = calloc(count, sizeof(*ob->paths)); /* ~0.55 MiB each, all resident */
    if (ob->paths == NULL)
        return -ENOMEM;
    for (unsigned i = 0; i < o->nodes_count; i++) {
        int rc = add_path(ob, &o->nodes[i], &o->nodes[i]);
        if (rc < 0)
            return rc;
    }
    for (unsigned i = 0; i < o->nodes_count; i++) {
        for (unsigned j = 0; j < o->nodes_count; j++) {
            if (!mesh_pair(o, i, j))
                continue;
            int rc = add_path(ob, &o->nodes[i], &o->nodes[j]);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- clients */

static struct echo_obs *the_obs; /* the shard's observer (one per process) */

static void side_connect(struct echo_obs_side *sd);

static void side_retry(struct hd_timer *t)
{
    side_connect(hd_container_of(t, struct echo_obs_side, retry));
}

static void side_init(struct echo_obs_side *sd, struct echo_obs_path *p,
                      const struct echo_obs_node *n, bool is_echo)
{
    sd->path = p;
    sd->node = n;
    sd->is_echo = is_echo;
    sd->backoff_ms = ECHO_OBS_BACKOFF_MIN_MS;
    hd_timer_init(&sd->retry, side_retry);
}

static const char *side_name(const struct echo_obs_side *sd)
{
    return sd->is_echo ? "echo" : "pinger";
}

static void side_schedule(struct echo_obs_side *sd)
{
    if (the_obs->stopping)
        return;
    hd_timer_start(the_obs->s, &sd->retry, sd->backoff_ms);
    sd->backoff_ms =
        sd->backoff_ms * 2 > ECHO_OBS_BACKOFF_MAX_MS ? ECHO_OBS_BACKOFF_MAX_MS : sd->backoff_ms * 2;
}

static void on_http_response(struct derp_client *k, const struct net_http_resp *resp)
{
    (void)resp;
    struct echo_obs_side *sd = derp_client_user(k);
    sd->upgrade_ms = echo_obs_ms(hd_clock_ns() - sd->connect_ns);
}

static void on_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    struct echo_obs_side *sd = derp_client_user(k);
    sd->ready = sd->ever_ready = true;
    sd->login_ms = echo_obs_ms(hd_clock_ns() - sd->connect_ns);
    const struct derp_client_stats *st = derp_client_stats(k);
    sd->tcp_ms = echo_obs_ms(st->connect_ns);
    sd->tls_ms = echo_obs_ms(st->tls_handshake_ns);
    sd->backoff_ms = ECHO_OBS_BACKOFF_MIN_MS;
    if (sd->failures || sd->connects > 1)
        hd_log(HD_LOG_INFO, "observe: %s %s logged in to %s (%.1f ms)", sd->path->label,
               side_name(sd), sd->node->name, sd->login_ms);
    sd->failures = 0;
}

static void on_echo_packet(struct derp_client *k, const struct derp_pubkey *src,
                           const uint8_t *data, size_t len)
{
    (void)derp_client_send(k, src, data, len); /* a full queue loses it: the pinger counts */
}

static void probe_answered(struct echo_obs_path *p, const uint8_t *data, size_t len)
{
    uint64_t now = hd_clock_ns(), now_ms = now / 1000000;
    if (len < ECHO_HEADER_LEN || memcmp(data, ECHO_MAGIC, 4) != 0) {
        p->misrouted++;
        return;
    }
    uint64_t seq = get_u64(data + 4), t = get_u64(data + 12);
    if (seq >= p->seq || p->seq - seq > ECHO_OBS_RING) {
        p->misrouted++; /* never sent, or so old its slot was reused */
        return;
    }
    uint8_t *st = &p->state[seq & (ECHO_OBS_RING - 1)];
    if (*st == ECHO_OBS_ANSWERED) {
        p->duplicated++;
        return;
    }
    if (*st == ECHO_OBS_LOST) {
        p->late++; /* counted lost already */
        return;
    }
    *st = ECHO_OBS_ANSWERED;
    if (seq < p->highest)
        p->reordered++;
    else
        p->highest = seq;
    uint64_t rtt = now > t ? now - t : 0;
    p->received++;
    p->last_echo_ms = now_ms;
    hd_hist_record(&p->total_ns, rtt);
    echo_obs_window_note(p->short_w, ECHO_OBS_SHORT_SLOTS, ECHO_OBS_SHORT_SLOT_MS, now_ms,
                         ECHO_OBS_NOTE_ECHO, rtt);
    echo_obs_window_note(p->long_w, ECHO_OBS_LONG_SLOTS, ECHO_OBS_LONG_SLOT_MS, now_ms,
                         ECHO_OBS_NOTE_ECHO, rtt);
}

static void on_pinger_packet(struct derp_client *k, const struct derp_pubkey *src,
                             const uint8_t *data, size_t len)
{
    struct echo_obs_side *sd = derp_client_user(k);
    struct echo_obs_path *p = sd->path;
    if (!derp_pubkey_equal(src, &p->echo.keypair.pub)) {
        p->misrouted++;
        return;
    }
    probe_answered(p, data, len);
}

static void on_close(struct derp_client *k, int reason)
{
    struct echo_obs_side *sd = derp_client_user(k);
    bool was_ready = sd->ready;
    sd->k = NULL;
    sd->ready = false;
    sd->last_error = reason;
    if (the_obs->stopping)
        return;
    if (was_ready)
        sd->reconnects++;
    if (reason == -EPROTOTYPE && sd->failures % 10 == 0) /* tls.h: plain HTTP came back */
        hd_log(HD_LOG_WARN,
               "observe: %s answered in plain HTTP where TLS was expected: is its DERPPort a "
               "plain-HTTP port? Give --derp-http (as TS_DEBUG_USE_DERP_HTTP) or an http:// "
               "--server for it, or serve TLS there",
               sd->node->name);
    if (was_ready || sd->failures++ % 10 == 0)
        hd_log(HD_LOG_WARN, "observe: %s %s on %s: %s; reconnecting in %u ms", sd->path->label,
               side_name(sd), sd->node->name,
               was_ready ? "connection lost" : strerror(reason ? -reason : ECONNABORTED),
               sd->backoff_ms);
    side_schedule(sd);
}

static const struct derp_client_callbacks pinger_cb = {
    .on_http_response = on_http_response,
    .on_ready = on_ready,
    .on_packet = on_pinger_packet,
    .on_close = on_close,
};

static const struct derp_client_callbacks echo_cb = {
    .on_http_response = on_http_response,
    .on_ready = on_ready,
    .on_packet = on_echo_packet,
    .on_close = on_close,
};

static void side_connect(struct echo_obs_side *sd)
{
    const struct echo_obs_node *n = sd->node;
    struct derp_client_config cfg = {.keypair = &sd->keypair,
                                     .can_ack_pings = true,
                                     .app_name = "hderp-echo-observe",
                                     .is_prober = true};
    derp_client_config_set_url(&cfg, &n->url);
    cfg.tls_ctx = n->insecure ? the_obs->tls_insecure : the_obs->tls_verify;
    if (n->sni[0])
        cfg.tls_server_name = n->sni;
    sd->connect_ns = hd_clock_ns();
    sd->connects++;
    int rc = derp_client_connect(the_obs->s, &cfg, sd->is_echo ? &echo_cb : &pinger_cb, sd, &sd->k);
    if (rc < 0) {
        sd->k = NULL;
        sd->last_error = rc;
        if (sd->failures++ % 10 == 0)
            hd_log(HD_LOG_WARN, "observe: %s %s: cannot connect to %s: %s", sd->path->label,
                   side_name(sd), n->name, strerror(-rc));
        side_schedule(sd);
    }
}

void echo_obs_paths_start(struct echo_obs *ob)
{
    the_obs = ob;
    for (unsigned i = 0; i < ob->paths_count; i++) {
        side_connect(&ob->paths[i].echo);
        side_connect(&ob->paths[i].pinger);
    }
}

void echo_obs_paths_stop(struct echo_obs *ob)
{
    for (unsigned i = 0; i < ob->paths_count; i++) {
        struct echo_obs_side *sides[2] = {&ob->paths[i].pinger, &ob->paths[i].echo};
        for (unsigned j = 0; j < 2; j++) {
            hd_timer_stop(ob->s, &sides[j]->retry);
            if (sides[j]->k)
                derp_client_abort(sides[j]->k, 0);
        }
    }
}

/* ---------------------------------------------------------------- probes */

static void sweep(struct echo_obs_path *p, uint64_t now_ns)
{
    uint64_t timeout_ns = (uint64_t)ECHO_OBS_LOSS_TIMEOUT_MS * 1000000;
    for (; p->sweep < p->seq; p->sweep++) {
        uint8_t *st = &p->state[p->sweep & (ECHO_OBS_RING - 1)];
        if (*st == ECHO_OBS_WAITING) {
            if (now_ns - p->sent_ns[p->sweep & (ECHO_OBS_RING - 1)] < timeout_ns)
                break;
            *st = ECHO_OBS_LOST;
            p->lost++;
            uint64_t now_ms = now_ns / 1000000;
            echo_obs_window_note(p->short_w, ECHO_OBS_SHORT_SLOTS, ECHO_OBS_SHORT_SLOT_MS, now_ms,
                                 ECHO_OBS_NOTE_LOST, 0);
            echo_obs_window_note(p->long_w, ECHO_OBS_LONG_SLOTS, ECHO_OBS_LONG_SLOT_MS, now_ms,
                                 ECHO_OBS_NOTE_LOST, 0);
        }
    }
}

static void send_probe(struct echo_obs *ob, struct echo_obs_path *p, uint64_t now_ns)
{
    if (p->seq - p->sweep >= ECHO_OBS_RING)
        return; /* the ring is full of probes still waiting: hold back until they are decided */
    uint8_t buf[ECHO_OBS_SIZE_MAX] = {0};
    echo_probe_fill(buf, p->seq, now_ns);
    if (derp_client_send(p->pinger.k, &p->echo.keypair.pub, buf, ob->o->size) < 0)
        return; /* queue full or closing: not sent, not counted */
    unsigned i = p->seq & (ECHO_OBS_RING - 1);
    p->state[i] = ECHO_OBS_WAITING;
    p->sent_ns[i] = now_ns;
    p->seq++;
    p->sent++;
    uint64_t now_ms = now_ns / 1000000;
    echo_obs_window_note(p->short_w, ECHO_OBS_SHORT_SLOTS, ECHO_OBS_SHORT_SLOT_MS, now_ms,
                         ECHO_OBS_NOTE_SENT, 0);
    echo_obs_window_note(p->long_w, ECHO_OBS_LONG_SLOTS, ECHO_OBS_LONG_SLOT_MS, now_ms,
                         ECHO_OBS_NOTE_SENT, 0);
}

/* Up: both ends logged in, and an echo within down_after (or both have been in for less). */
static void judge_up(struct echo_obs *ob, struct echo_obs_path *p, uint64_t now_ms)
{
    bool both = p->pinger.ready && p->echo.ready;
    if (both && p->up_since_ms == 0)
        p->up_since_ms = now_ms;
    if (!both)
        p->up_since_ms = 0;
    uint64_t last = p->last_echo_ms > p->up_since_ms ? p->last_echo_ms : p->up_since_ms;
    bool up = both && now_ms - last < ob->o->down_after_ms;
    if (up == p->up)
        return;
    p->up = up;
    if (up) {
        p->ever_up = true;
        hd_log(HD_LOG_INFO, "observe: UP %s", p->label);
    } else {
        hd_log(HD_LOG_WARN, "observe: DOWN %s: %s", p->label,
               !p->pinger.ready ? "pinger not logged in"
               : !p->echo.ready ? "echo peer not logged in"
                                : "no echoes");
    }
}

void echo_obs_paths_tick(struct echo_obs *ob, uint64_t now_ms)
{
    uint64_t now_ns = hd_clock_ns();
    for (unsigned i = 0; i < ob->paths_count; i++) {
        struct echo_obs_path *p = &ob->paths[i];
        sweep(p, now_ns);
        /* Once the echo peer was there, probes go whenever the pinger is in: while the echo
         * end is away they are lost, which is what a client on that path would see. */
        if (p->pinger.ready && p->echo.ever_ready)
            send_probe(ob, p, now_ns);
        judge_up(ob, p, now_ms);
    }
}
