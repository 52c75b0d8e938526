/* pubsub.c - a topic pub/sub relay on the hd framework, over TCP or TLS, one shard per core.
 *
 * Wire format, both ways: frames of [u32 big-endian length L][L bytes], the L bytes being
 * [type][topic length T][topic: T bytes][payload]. A client sends 'S' (subscribe to the topic;
 * answered by an 'A' frame whose payload is the shard's id) and 'P' (publish the payload);
 * every subscriber of the topic, on every shard, gets the frame back as type 'M'.
 *
 * Each shard keeps the subscribers of its own connections. A publish is copied once into a
 * refcounted frame, queued on the local subscribers (kit_fanout_conns) and handed to every other
 * shard over the bus (kit_fanout_shards), which queues it on theirs: one copy in memory however
 * many subscribers. A subscriber too slow to keep up misses frames (over its send cap: counted).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hd/hd.h>
#include <hd/kit.h>
#include <hd/net.h>
#include <hd/tls.h>

#define PS_FRAME_MAX  4096u /* payload + header of one frame: fits the 64 KiB frame class */
#define PS_TOPIC_MAX  64u   /* bytes in a topic name (its length is one byte on the wire) */
#define PS_TOPICS_MAX 64u   /* topics with subscribers, per shard */
#define PS_SUBS_MAX   64u   /* subscribers of one topic on one shard */
#define PS_SEND_MAX   (256u * 1024u) /* a subscriber's send queue cap: beyond it, drops */
#define PS_IDLE_MS    60000u         /* a connection silent this long is closed */

struct ps_topic {
    uint8_t len;
    char name[PS_TOPIC_MAX];
    unsigned subs_count;
    struct net_conn *subs[PS_SUBS_MAX];
};

/* The app's configuration: read-only once the shards run (its address is the module arg). */
struct ps_config {
    struct net_addr listen;
    bool tls;
    struct tls_ctx *tls_ctx;
};

struct ps_shard {
    struct hd_shard *s;
    const struct ps_config *cfg;
    struct net_listener *listener;
    struct ps_topic topics[PS_TOPICS_MAX];
    struct kit_fanout_stats local, remote;
    uint64_t protocol_errors, no_frame;
};

static const struct hd_module ps_module;

static struct ps_topic *topic_find(struct ps_shard *ps, const uint8_t *name, uint8_t len,
                                   bool create)
{
    struct ps_topic *free_slot = NULL;
    for (unsigned i = 0; i < PS_TOPICS_MAX; i++) {
        struct ps_topic *t = &ps->topics[i];
        if (t->subs_count > 0 && t->len == len && memcmp(t->name, name, len) == 0)
            return t;
        if (t->subs_count == 0 && free_slot == NULL)
            free_slot = t;
    }
    if (!create || free_slot == NULL)
        return NULL;
    free_slot->len = len;
    memcpy(free_slot->name, name, len);
    return free_slot;
}

/* A frame's topic (frame = the L bytes after the length word). */
static struct ps_topic *frame_topic(struct ps_shard *ps, const uint8_t *frame, bool create)
{
    return topic_find(ps, frame + 2, frame[1], create);
}

/* Bus handler on every other shard: the frame's local subscribers, then our reference goes. */
static void on_remote_publish(struct hd_shard *s, const struct hd_msg *m)
{
    struct ps_shard *ps = hd_shard_module_state(s, &ps_module);
    struct hd_frame *f = m->ptr;
    struct ps_topic *t = ps ? frame_topic(ps, f->data + 4, false) : NULL;
    if (t)
        kit_fanout_conns(t->subs, t->subs_count, f, 0, f->len, &ps->local);
    hd_frame_unref(s, f);
}

static int publish(struct ps_shard *ps, const uint8_t *wire, size_t len)
{
    struct hd_frame *f = hd_frame_get(ps->s, len);
    if (f == NULL) {
        ps->no_frame++; /* the pool is exhausted: this publish is dropped, counted */
        return 0;
    }
    memcpy(f->data, wire, len);
    f->len = (uint32_t)len;
    f->data[4] = 'M';
    struct ps_topic *t = frame_topic(ps, f->data + 4, false);
    if (t)
        kit_fanout_conns(t->subs, t->subs_count, f, 0, f->len, &ps->local);
    kit_fanout_shards(ps->s, f, on_remote_publish, 0, &ps->remote);
    hd_frame_unref(ps->s, f);
    return 0;
}

static int subscribe(struct ps_shard *ps, struct net_conn *c, const uint8_t *frame)
{
    struct ps_topic *t = frame_topic(ps, frame, true);
    unsigned i = 0;
    while (t && i < t->subs_count && t->subs[i] != c)
        i++; /* subscribing twice is subscribing once */
    if (t == NULL || i == PS_SUBS_MAX)
        return -ENOSPC; /* the table's limits: this subscriber is refused (closed) */
    if (i == t->subs_count)
        t->subs[t->subs_count++] = c;
    uint8_t ack[] = {0, 0, 0, 3, 'A', 0, (uint8_t)hd_shard_id(ps->s)};
    return net_conn_send_copy(c, ack, sizeof(ack));
}

static ssize_t on_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct ps_shard *ps = net_conn_app(c);
    size_t done = 0;
    while (len - done >= 4) {
        const uint8_t *p = data + done;
        uint32_t n = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (n < 2 || n > PS_FRAME_MAX - 4 || p[5] > PS_TOPIC_MAX || p[5] > n - 2) {
            ps->protocol_errors++;
            hd_log_rl(HD_LOG_WARN, "pubsub: bad frame header (length %u)", n);
            return -EPROTO;
        }
        if (len - done < 4 + (size_t)n)
            break; /* the rest of this frame is still on its way */
        int rc = p[4] == 'S'   ? subscribe(ps, c, p + 4)
                 : p[4] == 'P' ? publish(ps, p, 4 + n)
                               : -EPROTO;
        if (rc < 0)
            return rc;
        done += 4 + n;
    }
    return (ssize_t)done;
}

static void on_close(struct net_conn *c, int reason)
{
    (void)reason;
    struct ps_shard *ps = net_conn_app(c);
    for (unsigned i = 0; i < PS_TOPICS_MAX; i++) {
        struct ps_topic *t = &ps->topics[i];
        for (unsigned j = 0; j < t->subs_count; j++) {
            if (t->subs[j] == c)
                t->subs[j--] = t->subs[--t->subs_count];
        }
    }
}

static const struct net_conn_handler ps_handler = {.on_data = on_data, .on_close = on_close};

static void on_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)l, (void)peer;
    struct ps_shard *ps = arg;
    const struct ps_config *cfg = ps->cfg;
    struct net_conn_options o = {.idle_timeout_ms = PS_IDLE_MS,
                                 .send_high_bytes = PS_SEND_MAX / 2,
                                 .send_low_bytes = PS_SEND_MAX / 4,
                                 .send_max_bytes = PS_SEND_MAX};
    struct net_conn *c;
    if (net_conn_adopt(ps->s, fd, &ps_handler, ps, &o, &c) < 0) {
        close(fd); /* the connection pool is full */
        return;
    }
    struct tls_conn_options to = {.idle_timeout_ms = PS_IDLE_MS};
    if (cfg->tls && tls_conn_start(c, cfg->tls_ctx, &to) < 0)
        net_conn_close(c, -ENOMEM, false);
}

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    const struct ps_config *cfg = arg;
    struct ps_shard *ps = calloc(1, sizeof(*ps));
    if (ps == NULL)
        return -ENOMEM;
    ps->s = s;
    ps->cfg = cfg;
    struct net_listener_options lo = {.reuseport = true};
    int rc = net_listener_start(s, &cfg->listen, &lo, on_accept, ps, &ps->listener);
    if (rc < 0) {
        free(ps);
        return rc;
    }
    *state = ps;
    return 0;
}

static void shard_stop(struct hd_shard *s, void *state)
{
    struct ps_shard *ps = state;
    net_listener_stop(ps->listener);
    net_shard_close_all(s, 0);
}

static void shard_fini(struct hd_shard *s, void *state)
{
    struct ps_shard *ps = state;
    printf("pubsub: shard %u delivered %llu dropped %llu; to other shards %llu (missed %llu); "
           "protocol errors %llu\n",
           hd_shard_id(s), (unsigned long long)ps->local.sent,
           (unsigned long long)ps->local.dropped, (unsigned long long)ps->remote.sent,
           (unsigned long long)ps->remote.dropped, (unsigned long long)ps->protocol_errors);
    free(ps);
}

/* net/ on every shard before us (and after us at the end); tls/ is listed by main when -tls. */
static const struct hd_module *const ps_requires[] = {&net_module, NULL};
static const struct hd_module ps_module = {
    .abi_version = HD_MODULE_ABI,
    .requires = ps_requires,
    .name = "pubsub",
    .shard_init = shard_init,
    .shard_stop = shard_stop,
    .shard_fini = shard_fini,
};

static int ps_setup(struct kit_app *a)
{
    struct ps_config *cfg = a->module_arg;
    if (cfg->tls) { /* TLS with a self-signed certificate: tls_module goes before the app */
        struct tls_server_options tso = {.self_signed_host = "127.0.0.1"};
        int rc = tls_server_ctx_create(&tso, &cfg->tls_ctx);
        if (rc < 0) {
            fprintf(stderr, "pubsub: TLS context: %s\n", strerror(-rc));
            return rc;
        }
        a->layer = &tls_module;
    }
    /* Port 0: every shard's listener shares the one port the kernel picks here. */
    int rc = kit_app_hold(a, &cfg->listen, SOCK_STREAM);
    if (rc < 0)
        fprintf(stderr, "pubsub: cannot bind: %s\n", strerror(-rc));
    return rc;
}

static int ps_started(struct kit_app *a, struct hd_runtime *rt)
{
    (void)rt;
    const struct ps_config *cfg = a->module_arg;
    char buf[64];
    printf("pubsub: listening on %s%s\n", net_addr_format(&cfg->listen, buf, sizeof(buf)),
           cfg->tls ? " (tls)" : "");
    fflush(stdout);
    return 0;
}

static void ps_teardown(struct kit_app *a)
{
    struct ps_config *cfg = a->module_arg;
    if (cfg->tls_ctx)
        tls_ctx_destroy(cfg->tls_ctx);
}

int main(int argc, char **argv)
{
    static struct ps_config cfg;
    net_addr_parse("127.0.0.1:7400", &cfg.listen);
    const struct kit_flag flags[] = {
        {"listen", KIT_FLAG_ADDR, &cfg.listen, 0, 0, "address (default 127.0.0.1:7400; port 0)"},
        {"tls", KIT_FLAG_BOOL, &cfg.tls, 0, 0, "TLS with a self-signed certificate"},
    };
    struct kit_app app = {.name = "pubsub",
                          .flags = flags,
                          .flags_count = HD_ARRAY_SIZE(flags),
                          .shards_flag = true,
                          .rt = {.shards_count = 2},
                          .module = &ps_module,
                          .module_arg = &cfg,
                          .setup = ps_setup,
                          .started = ps_started,
                          .teardown = ps_teardown};
    return kit_app_main(&app, argc, argv);
}
