/* udprelay.c - a two-party UDP rendezvous relay on the hd framework, one shard per core.
 *
 * Every datagram starts with an 8-byte session id. The first two source addresses that send
 * with an id are its two parties; after that, what one party sends (the whole datagram) goes
 * to the other. A third address with the same id is refused (counted); a session nobody used
 * for UDPR_SESSION_IDLE_MS is forgotten.
 *
 * Every shard has its own SO_REUSEPORT socket on the relay's port, so the kernel spreads
 * datagrams over the shards by source address; a session's table entry lives on one shard,
 * its owner (kit_owner_shard of the id). A datagram that arrives elsewhere is copied into a
 * frame (its source address in front) and routed to the owner over the bus (kit_route); the
 * owner answers from its own socket, which has the same local address.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hd/hd.h>
#include <hd/kit.h>
#include <hd/net.h>

#define UDPR_ID_LEN          8u     /* session id bytes at the front of every datagram */
#define UDPR_SESSIONS_MAX    4096u  /* sessions a shard owns at once (a power of two) */
#define UDPR_SESSION_IDLE_MS 30000u /* a session silent this long is forgotten */
#define UDPR_SWEEP_MS        1000u  /* how often the owner looks for idle sessions */
#define UDPR_PROBES_MAX      16u    /* open addressing: slots looked at before giving up */
_Static_assert((UDPR_SESSIONS_MAX & (UDPR_SESSIONS_MAX - 1)) == 0, "a mask indexes the table");

struct udpr_session {
    uint8_t id[UDPR_ID_LEN];
    unsigned parties; /* 0: a free slot */
    struct net_addr party[2];
    uint64_t last_ms;
};

struct udpr_stats {
    uint64_t relayed, routed, refused, unpaired, bad, no_frame, table_full;
};
/* Its fields in order, for the metrics endpoint (udprelay_<name>_total). */
static const char *const udpr_stat_names[] = {"relayed", "routed",   "refused",   "unpaired",
                                              "bad",     "no_frame", "table_full"};
_Static_assert(sizeof(struct udpr_stats) == sizeof(udpr_stat_names) / sizeof(char *) * 8,
               "one name per counter");

struct udpr_config {
    struct net_addr listen, metrics; /* metrics.len 0: no metrics endpoint */
};

struct udpr_shard {
    struct hd_shard *s;
    struct net_udp *udp;
    struct kit_metrics *metrics; /* shard 0, with -metrics */
    struct hd_timer sweep;
    struct udpr_stats st;
    struct udpr_session sessions[UDPR_SESSIONS_MAX];
};

static const struct hd_module udpr_module;

static bool addr_eq(const struct net_addr *a, const struct net_addr *b)
{
    return a->len == b->len && memcmp(&a->sa, &b->sa, a->len) == 0;
}

static struct udpr_session *session_find(struct udpr_shard *us, const uint8_t *id)
{
    unsigned h = (unsigned)(kit_key_hash(id, UDPR_ID_LEN) >> 32);
    struct udpr_session *free_slot = NULL;
    for (unsigned i = 0; i < UDPR_PROBES_MAX; i++) {
        struct udpr_session *x = &us->sessions[(h + i) & (UDPR_SESSIONS_MAX - 1)];
        if (x->parties > 0 && memcmp(x->id, id, UDPR_ID_LEN) == 0)
            return x;
        if (x->parties == 0 && free_slot == NULL)
            free_slot = x;
    }
    if (free_slot)
        memcpy(free_slot->id, id, UDPR_ID_LEN);
    return free_slot;
}

/* On the owner shard: learn the sender, relay to the other party. */
static void relay(struct udpr_shard *us, const uint8_t *data, size_t len,
                  const struct net_addr *from)
{
    struct udpr_session *x = session_find(us, data);
    if (x == NULL) {
        us->st.table_full++;
        return;
    }
    int me = x->parties > 0 && addr_eq(&x->party[0], from)   ? 0
             : x->parties > 1 && addr_eq(&x->party[1], from) ? 1
                                                             : -1;
    if (me < 0) {
        if (x->parties == 2) {
            us->st.refused++; /* a third address for a two-party session */
            return;
        }
        me = (int)x->parties++;
        x->party[me] = *from;
    }
    x->last_ms = hd_now_ms(us->s);
    if (x->parties < 2) {
        us->st.unpaired++; /* registered; nobody to send to yet */
        return;
    }
    if (net_udp_send(us->udp, data, len, &x->party[1 - me]) == 0)
        us->st.relayed++;
}

/* Bus handler on the owner: frame = [struct net_addr][datagram]. */
static void on_routed(struct hd_shard *s, const struct hd_msg *m)
{
    struct udpr_shard *us = hd_shard_module_state(s, &udpr_module);
    struct hd_frame *f = m->ptr;
    struct net_addr from;
    memcpy(&from, f->data, sizeof(from));
    if (us)
        relay(us, f->data + sizeof(from), f->len - sizeof(from), &from);
    hd_frame_unref(s, f);
}

static void on_datagram(struct net_udp *u, const uint8_t *data, size_t len,
                        const struct net_addr *from, void *arg)
{
    (void)u;
    struct udpr_shard *us = arg;
    if (len < UDPR_ID_LEN || len > NET_UDP_SEND_MAX) {
        us->st.bad++;
        return;
    }
    unsigned owner = kit_owner_shard(data, UDPR_ID_LEN, hd_shard_count(us->s));
    if (owner == hd_shard_id(us->s)) {
        relay(us, data, len, from);
        return;
    }
    struct hd_frame *f = hd_frame_get(us->s, sizeof(*from) + len);
    if (f == NULL) {
        us->st.no_frame++;
        return;
    }
    memcpy(f->data, from, sizeof(*from));
    memcpy(f->data + sizeof(*from), data, len);
    f->len = (uint32_t)(sizeof(*from) + len);
    struct hd_msg m = {.fn = on_routed, .ptr = f};
    if (kit_route(us->s, data, UDPR_ID_LEN, &m) == 0)
        us->st.routed++;
    else
        hd_frame_unref(us->s, f); /* the owner's bus is full: dropped, like a full socket */
}

static void on_sweep(struct hd_timer *t)
{
    struct udpr_shard *us = (struct udpr_shard *)((char *)t - offsetof(struct udpr_shard, sweep));
    uint64_t now = hd_now_ms(us->s);
    for (unsigned i = 0; i < UDPR_SESSIONS_MAX; i++) {
        if (us->sessions[i].parties > 0 && now - us->sessions[i].last_ms > UDPR_SESSION_IDLE_MS)
            us->sessions[i].parties = 0;
    }
    hd_timer_start(us->s, &us->sweep, UDPR_SWEEP_MS);
}

/* The metrics endpoint: each shard's counters into its slot, then their sums as text. */
static void metrics_fill(struct hd_shard *s, void *slot, void *arg)
{
    (void)arg;
    struct udpr_shard *us = hd_shard_module_state(s, &udpr_module);
    if (us)
        memcpy(slot, &us->st, sizeof(us->st));
}

static size_t metrics_format(const void *slots, unsigned count, char *buf, size_t size, void *arg)
{
    (void)arg;
    const uint64_t *v = slots;
    size_t n = 0, fields = sizeof(udpr_stat_names) / sizeof(udpr_stat_names[0]);
    for (size_t i = 0; i < fields && n < size; i++) {
        unsigned long long sum = 0;
        for (unsigned j = 0; j < count; j++)
            sum += v[j * fields + i];
        n += (size_t)snprintf(buf + n, size - n, "udprelay_%s_total %llu\n", udpr_stat_names[i],
                              sum);
    }
    return n;
}

static const struct kit_metrics_options udpr_metrics = {
    .slot_size = sizeof(struct udpr_stats), .fill = metrics_fill, .format = metrics_format};

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    const struct udpr_config *cfg = arg;
    struct udpr_shard *us = calloc(1, sizeof(*us));
    if (us == NULL)
        return -ENOMEM;
    us->s = s;
    int rc = net_udp_open(s, &cfg->listen, on_datagram, us, &us->udp);
    if (rc == 0 && cfg->metrics.len > 0 && hd_shard_id(s) == 0)
        rc = kit_metrics_start(s, &cfg->metrics, &udpr_metrics, &us->metrics);
    if (rc < 0) {
        if (us->udp)
            net_udp_close(us->udp);
        free(us);
        return rc;
    }
    hd_timer_init(&us->sweep, on_sweep);
    hd_timer_start(s, &us->sweep, UDPR_SWEEP_MS);
    *state = us;
    return 0;
}

static void shard_stop(struct hd_shard *s, void *state)
{
    struct udpr_shard *us = state;
    hd_timer_stop(s, &us->sweep);
    net_udp_close(us->udp);
    if (us->metrics)
        kit_metrics_stop(us->metrics);
    net_shard_close_all(s, 0);
}

static void shard_fini(struct hd_shard *s, void *state)
{
    struct udpr_shard *us = state;
    printf("udprelay: shard %u relayed %llu routed %llu refused %llu unpaired %llu bad %llu\n",
           hd_shard_id(s), (unsigned long long)us->st.relayed, (unsigned long long)us->st.routed,
           (unsigned long long)us->st.refused, (unsigned long long)us->st.unpaired,
           (unsigned long long)us->st.bad);
    free(us);
}

static const struct hd_module *const udpr_requires[] = {&net_module, NULL};
static const struct hd_module udpr_module = {
    .abi_version = HD_MODULE_ABI,
    .requires = udpr_requires,
    .name = "udprelay",
    .shard_init = shard_init,
    .shard_stop = shard_stop,
    .shard_fini = shard_fini,
};

static int udpr_setup(struct kit_app *a)
{
    struct udpr_config *cfg = a->module_arg;
    /* Port 0: every shard's socket shares the port held here (closed before it is announced:
     * the held UDP socket would get its share of datagrams). */
    int rc = kit_app_hold(a, &cfg->listen, SOCK_DGRAM);
    if (rc == 0 && cfg->metrics.len > 0)
        rc = kit_app_hold(a, &cfg->metrics, SOCK_STREAM);
    if (rc < 0)
        fprintf(stderr, "udprelay: cannot bind: %s\n", strerror(-rc));
    return rc;
}

static int udpr_started(struct kit_app *a, struct hd_runtime *rt)
{
    (void)rt;
    const struct udpr_config *cfg = a->module_arg;
    char l[64], m[64] = "";
    if (cfg->metrics.len > 0)
        net_addr_format(&cfg->metrics, m, sizeof(m));
    printf("udprelay: listening on %s%s%s\n", net_addr_format(&cfg->listen, l, sizeof(l)),
           m[0] ? " metrics " : "", m);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    static struct udpr_config cfg;
    net_addr_parse("127.0.0.1:7500", &cfg.listen);
    const struct kit_flag flags[] = {
        {"listen", KIT_FLAG_ADDR, &cfg.listen, 0, 0, "UDP address (default 127.0.0.1:7500)"},
        {"metrics", KIT_FLAG_ADDR, &cfg.metrics, 0, 0, "GET /metrics on this TCP address"},
    };
    struct kit_app app = {.name = "udprelay",
                          .flags = flags,
                          .flags_count = HD_ARRAY_SIZE(flags),
                          .shards_flag = true,
                          .rt = {.shards_count = 2},
                          .module = &udpr_module,
                          .module_arg = &cfg,
                          .setup = udpr_setup,
                          .started = udpr_started};
    return kit_app_main(&app, argc, argv);
}
