/* upgrade_live_clients.c - the DERP clients of the live upgrade VM test (upgrade_live.h): one
 * shard of the test's own runtime, UL_CLIENTS clients over TLS (userspace records), each
 * sending its partner a sequence-numbered packet every UL_TICK_MS while the test thread says so,
 * and recording per receiver which sequence numbers arrived (once, in order, from the right
 * key). Every close before UL_CLOSE is counted with its reason: at a live upgrade a client must
 * not see one. Shard thread only, but for the atomics the test thread reads. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "derp_client.h"
#include "harness.h"
#include "upgrade_live.h"

struct payload {
    uint32_t magic, sender, seq;
};

static struct {
    struct ul_state *st;
    struct derp_keypair kp[UL_CLIENTS];
    struct derp_client *k[UL_CLIENTS];
    uint8_t seen[UL_CLIENTS][UL_SEQ_MAX]; /* receiver, sequence number of its partner */
    uint32_t max_seq[UL_CLIENTS];         /* highest seen + 1 */
    struct hd_timer tick;
    struct hd_shard *s;
    bool closing;
    unsigned started; /* clients whose connect was started (in index order) */
    unsigned marked;  /* the epoch of the UL_AFTER last marked */
} g;

static void on_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)k, (void)info;
    atomic_fetch_add(&g.st->ready, 1);
}

static void on_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                      size_t len)
{
    unsigned me = (unsigned)(uintptr_t)derp_client_user(k);
    unsigned from = ul_partner(me);
    struct payload p;
    if (len != sizeof(p)) {
        atomic_fetch_add(&g.st->bad, 1);
        return;
    }
    memcpy(&p, data, sizeof(p));
    if (p.magic != UL_MAGIC || p.sender != from || p.seq >= UL_SEQ_MAX ||
        !derp_pubkey_equal(src, &g.kp[from].pub)) {
        atomic_fetch_add(&g.st->bad, 1);
        return;
    }
    if (g.seen[me][p.seq]++) {
        atomic_fetch_add(&g.st->dups, 1);
        return;
    }
    if (p.seq + 1 < g.max_seq[me]) {
        if (atomic_fetch_add(&g.st->reorders, 1) == 0)
            atomic_store(&g.st->first_reorder_phase, atomic_load(&g.st->phase));
    } else
        g.max_seq[me] = p.seq + 1;
    atomic_fetch_add(&g.st->got[me], 1);
    /* after_from is written on this thread before any packet it covers was sent */
    if (p.seq >= atomic_load(&g.st->after_from[from]))
        atomic_fetch_add(&g.st->got_after[me], 1);
}

static void on_peer_gone(struct derp_client *k, const struct derp_pubkey *peer, uint8_t reason)
{
    (void)k, (void)peer, (void)reason;
    atomic_fetch_add(&g.st->peer_gone, 1);
}

/* A client counted as closed (its on_close ran, or it was never started); the last one stops
 * the runtime. */
static void count_closed(void)
{
    if (atomic_fetch_add(&g.st->closed, 1) + 1 == UL_CLIENTS)
        hd_runtime_stop(hd_shard_runtime(g.s));
}

static void on_close(struct derp_client *k, int reason)
{
    struct ul_state *st = g.st;
    unsigned me = (unsigned)(uintptr_t)derp_client_user(k);
    const struct derp_client_stats *cs = derp_client_stats(k);
    if (cs->server_infos > 1)
        atomic_fetch_add(&st->relogins, 1);
    atomic_fetch_add(&st->frames_skipped, (unsigned)cs->frames_skipped);
    g.k[me] = NULL;
    if (!g.closing || reason != 0) {
        if (atomic_fetch_add(&st->early_closes, 1) == 0) {
            atomic_store(&st->first_close_reason, reason);
            atomic_store(&st->first_close_client, (int)me);
            atomic_store(&st->first_close_phase, atomic_load(&st->phase));
        }
    }
    count_closed();
}

static const struct derp_client_callbacks cb = {
    .on_ready = on_ready,
    .on_packet = on_packet,
    .on_peer_gone = on_peer_gone,
    .on_close = on_close,
};

/* One packet from every client to its partner; a refused send keeps its sequence number. */
static void send_all(void)
{
    for (unsigned i = 0; i < UL_CLIENTS; i++) {
        uint32_t seq = atomic_load(&g.st->sent[i]);
        if (g.k[i] == NULL || seq >= UL_SEQ_MAX)
            continue;
        struct payload p = {UL_MAGIC, i, seq};
        if (derp_client_send(g.k[i], &g.kp[ul_partner(i)].pub, &p, sizeof(p)) == 0)
            atomic_store(&g.st->sent[i], seq + 1);
        else
            atomic_fetch_add(&g.st->send_errors, 1);
    }
}

/* Starts logins until UL_LOGIN_WAVE are under way (or every client has started). */
static void connect_more(void)
{
    struct ul_state *st = g.st;
    struct derp_client_config cfg = {.read_timeout_ms = DERP_CLIENT_TIMEOUT_OFF,
                                     .tls = true,
                                     .tls_ctx = st->tls_ctx,
                                     .host = st->host};
    HDT_CHECK(net_addr_parse("127.0.0.1:0", &cfg.addr) == 0);
    cfg.addr.in4.sin_port = htons(st->port);
    while (g.started < UL_CLIENTS &&
           g.started - atomic_load(&st->ready) - atomic_load(&st->closed) < UL_LOGIN_WAVE) {
        unsigned i = g.started++;
        cfg.keypair = &g.kp[i];
        if (derp_client_connect(g.s, &cfg, &cb, (void *)(uintptr_t)i, &g.k[i]) != 0) {
            atomic_fetch_add(&st->connect_errors, 1);
            count_closed();
        }
    }
}

static void close_all(void)
{
    g.closing = true;
    for (; g.started < UL_CLIENTS; g.started++)
        count_closed(); /* a test that ends before every login started */
    for (unsigned i = 0; i < UL_CLIENTS; i++)
        if (g.k[i])
            derp_client_close(g.k[i]);
}

/* A new UL_AFTER: from here on, every packet sent must arrive, counted anew. */
static void mark_after(unsigned epoch)
{
    g.marked = epoch;
    for (unsigned i = 0; i < UL_CLIENTS; i++) {
        atomic_store(&g.st->after_from[i], atomic_load(&g.st->sent[i]));
        atomic_store(&g.st->got_after[i], 0);
    }
}

static void tick(struct hd_timer *t)
{
    (void)t;
    struct ul_state *st = g.st;
    unsigned epoch = atomic_load(&st->epoch); /* first: the phase read next is at least its */
    int phase = atomic_load(&st->phase);
    if (phase == UL_CONNECT)
        connect_more();
    if (phase == UL_CLOSE) {
        close_all();
        atomic_store(&st->acked, epoch);
        return;
    }
    if (phase == UL_AFTER && g.marked != epoch)
        mark_after(epoch);
    if (phase == UL_SEND || phase == UL_AFTER)
        send_all();
    atomic_store(&st->acked, epoch);
    hd_timer_start(g.s, &g.tick, UL_TICK_MS);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    g.s = s;
    connect_more();
    hd_timer_init(&g.tick, tick);
    hd_timer_start(s, &g.tick, UL_TICK_MS);
}

static void shard_stop(struct hd_shard *s)
{
    hd_timer_stop(s, &g.tick);
    for (unsigned i = 0; i < UL_CLIENTS; i++)
        if (g.k[i])
            derp_client_abort(g.k[i], -ECANCELED);
}

unsigned ul_missing(unsigned receiver, uint32_t from, uint32_t to, uint32_t *out, unsigned max)
{
    unsigned n = 0;
    for (uint32_t seq = from; seq < to && seq < UL_SEQ_MAX; seq++)
        if (!g.seen[receiver][seq] && n++ < max)
            out[n - 1] = seq;
    return n;
}

void *ul_clients_thread(void *arg)
{
    memset(&g, 0, sizeof(g));
    g.st = arg;
    atomic_store(&g.st->first_reorder_phase, -1);
    for (unsigned i = 0; i < UL_CLIENTS; i++) {
        atomic_store(&g.st->after_from[i], UINT_MAX);
        HDT_CHECK(derp_keypair_generate(&g.kp[i]) == 0);
    }
    static const struct hd_module *const layers[] = {&net_module, &tls_module};
    /* userspace records on the client side: /proc/net/tls_stat then counts the server's */
    static struct tls_shard_options tls_opts = {.ktls_disable = true};
    void *const layers_args[] = {NULL, &tls_opts};
    struct hdt_options ho = {.frame_classes = derp_client_frame_classes,
                             .frame_classes_count = DERP_CLIENT_FRAME_CLASSES_COUNT,
                             .shards = 1,
                             .layers = layers,
                             .layers_args = layers_args,
                             .layers_count = 2,
                             .shard_stop = shard_stop};
    return (void *)(intptr_t)hdt_run(&ho, body, NULL, NULL);
}
