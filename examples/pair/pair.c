/* pair.c - a TCP pairing relay on the hd framework: two clients that send the same token are
 * piped into each other, whichever shard the kernel gave each of them.
 *
 * Protocol: a client sends one line "PAIR <token>\n" (token: 1..64 of [A-Za-z0-9_-]) and waits.
 * When a second client sends the same token both get "OK\n" and from then on every byte one
 * sends reaches the other (half closes carried through). A client left alone longer than
 * -wait-ms gets "ERR timeout\n" and is closed; a bad line gets "ERR line\n"; no room gets
 * "ERR busy\n".
 *
 * The framework pieces it shows: a token's owner shard (kit_owner_shard) keeps the table of
 * waiting clients by handle (net_conn_handle), while each client waits where it landed; a line
 * reaches the owner over the bus (kit_route, the token in a frame); the owner pipes a pair with
 * kit_pipe_join, which brings the clients that live elsewhere to it (backpressure both ways);
 * the waiting deadline lets the app write its last line (on_deadline); start-up is kit_app_main.
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

#define PR_TOKEN_MAX   64u
#define PR_LINE_MAX    (5u + PR_TOKEN_MAX + 1u) /* "PAIR " token "\n" */
#define PR_WAITING_MAX 256u                     /* clients waiting for their peer, per owner */
#define PR_PAIRS_MAX   4096u                    /* pairs piped at once, per shard */

struct pr_config {
    struct net_addr listen;
    uint32_t wait_ms;
};

struct pr_waiting {
    struct hd_handle h; /* {0}: free; the client lives on any shard */
    uint8_t len;
    char token[PR_TOKEN_MAX];
};

struct pr_pair {
    struct kit_pipe pipe;
    struct pr_shard *sh;
};

struct pr_shard {
    struct hd_shard *s;
    const struct pr_config *cfg;
    struct net_listener *listener;
    struct hd_slab *pairs;
    struct pr_waiting waiting[PR_WAITING_MAX]; /* of the tokens this shard owns */
    uint64_t paired, moved, timeouts, refused;
};

static const struct hd_module pr_module;
/* A waiting client's app pointer: &pr_owner[its token's owner shard], to tell it when it ends. */
static char pr_owner[HD_SHARDS_MAX];

static struct pr_shard *shard_state(struct hd_shard *s)
{
    return hd_shard_module_state(s, &pr_module);
}

static void refuse(struct pr_shard *sh, struct net_conn *c, const char *line)
{
    sh->refused++;
    net_conn_send_copy(c, line, strlen(line));
    net_conn_close(c, -EPROTO, true);
}

/* The same for a client on any shard (by handle, over the bus; a full bus: it waits for its
 * deadline instead). */
static void refuse_to(struct pr_shard *sh, struct hd_handle h, const char *line)
{
    sh->refused++;
    struct hd_frame *f = hd_frame_get(sh->s, strlen(line));
    if (f) {
        memcpy(f->data, line, strlen(line));
        net_conn_send_to(sh->s, h, f, 0, (uint32_t)strlen(line));
        hd_frame_unref(sh->s, f);
    }
    net_conn_close_to(sh->s, h, -EPROTO, true);
}

/* The length of a good "PAIR <token>\n" line at data, 0 if it is not whole yet, -EPROTO. */
static ssize_t pair_line(const uint8_t *data, size_t len, const char **token, size_t *token_len)
{
    const uint8_t *nl = memchr(data, '\n', len < PR_LINE_MAX ? len : PR_LINE_MAX);
    if (nl == NULL)
        return len < PR_LINE_MAX ? 0 : -EPROTO;
    size_t n = (size_t)(nl - data);
    if (n < 6 || memcmp(data, "PAIR ", 5) != 0)
        return -EPROTO;
    for (size_t i = 5; i < n; i++) {
        char ch = (char)data[i];
        if (!(ch == '-' || ch == '_' || (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
              (ch >= 'A' && ch <= 'Z')))
            return -EPROTO;
    }
    *token = (const char *)data + 5;
    *token_len = n - 5;
    return (ssize_t)n + 1;
}

static void pair_done(struct kit_pipe *p, void *arg)
{
    struct pr_pair *pr = arg;
    pr->sh->moved += p->stats.moved;
    hd_slab_put(pr->sh->pairs, pr);
}

static struct pr_waiting *waiting_find(struct pr_shard *sh, const char *token, size_t len)
{
    for (unsigned i = 0; i < PR_WAITING_MAX; i++) {
        struct pr_waiting *w = &sh->waiting[i];
        if (w->h.v && w->len == len && memcmp(w->token, token, len) == 0)
            return w;
    }
    return NULL;
}

/* Pair the one waiting with h, wherever each lives: the pipe is on this shard. */
static void pair_with(struct pr_shard *sh, struct pr_waiting *w, struct hd_handle h)
{
    struct hd_handle other = w->h;
    w->h = (struct hd_handle){0};
    struct pr_pair *pr = hd_slab_get(sh->pairs);
    if (pr)
        pr->sh = sh; /* before the join: its done may come at any time after */
    int rc = pr ? kit_pipe_join(sh->s, &pr->pipe, other, h, "OK\n", pair_done, pr) : -ENOMEM;
    if (rc < 0) { /* nothing taken: both hear it */
        if (pr)
            hd_slab_put(sh->pairs, pr);
        refuse_to(sh, other, "ERR busy\n");
        refuse_to(sh, h, "ERR busy\n");
        return;
    }
    sh->paired++;
}

/* On the token's owner: a client (h, on any shard) sent its line. The frame holds the token. */
static void on_request(struct hd_shard *s, const struct hd_msg *m)
{
    struct pr_shard *sh = shard_state(s);
    struct hd_frame *f = m->ptr;
    struct hd_handle h = {m->u64[0]};
    struct pr_waiting *w = waiting_find(sh, (const char *)f->data, f->len);
    if (w) {
        pair_with(sh, w, h);
    } else {
        for (unsigned i = 0; w == NULL && i < PR_WAITING_MAX; i++)
            w = sh->waiting[i].h.v == 0 ? &sh->waiting[i] : NULL;
        if (w == NULL) {
            refuse_to(sh, h, "ERR busy\n");
        } else {
            *w = (struct pr_waiting){.h = h, .len = (uint8_t)f->len};
            memcpy(w->token, f->data, f->len);
        }
    }
    hd_frame_unref(s, f);
}

/* On the token's owner: a waiting client ended (its deadline, its peer left). */
static void on_forget(struct hd_shard *s, const struct hd_msg *m)
{
    struct pr_shard *sh = shard_state(s);
    for (unsigned i = 0; i < PR_WAITING_MAX; i++)
        if (sh->waiting[i].h.v == m->u64[0])
            sh->waiting[i].h = (struct hd_handle){0};
}

static ssize_t pr_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct hd_shard *s = net_conn_shard(c);
    struct pr_shard *sh = shard_state(s);
    if (net_conn_app(c) != NULL) { /* waiting: what it sends early is kept for its peer */
        net_conn_pause_recv(c, true);
        return 0;
    }
    const char *token;
    size_t tlen;
    ssize_t line = pair_line(data, len, &token, &tlen);
    if (line < 0) {
        refuse(sh, c, "ERR line\n");
        return (ssize_t)len;
    }
    if (line == 0)
        return 0;
    unsigned owner = kit_owner_shard(token, tlen, hd_shard_count(s));
    struct hd_frame *f = hd_frame_get(s, tlen);
    if (f == NULL) {
        refuse(sh, c, "ERR busy\n");
        return line;
    }
    memcpy(f->data, token, tlen);
    f->len = (uint32_t)tlen;
    struct hd_msg m = {.fn = on_request, .ptr = f, .u64 = {net_conn_handle(c).v}};
    if (kit_route(s, token, tlen, &m) < 0) { /* the owner's bus is full */
        hd_frame_unref(s, f);
        refuse(sh, c, "ERR busy\n");
        return line;
    }
    net_conn_set_app(c, net_conn_app_handler(c), &pr_owner[owner]);
    net_conn_pause_recv(c, true); /* bytes after the line wait here for the peer */
    return line;
}

static void pr_deadline(struct net_conn *c)
{
    shard_state(net_conn_shard(c))->timeouts++;
    net_conn_send_copy(c, "ERR timeout\n", 12); /* then the framework closes it */
}

static void pr_close(struct net_conn *c, int reason)
{
    (void)reason;
    const char *owner = net_conn_app(c);
    if (owner == NULL)
        return;
    /* It was waiting: its entry on the owner goes (a full bus leaves it; a peer that comes
     * then is refused: its pipe finds this side gone). */
    struct hd_msg m = {.fn = on_forget, .u64 = {net_conn_handle(c).v}};
    (void)hd_bus_send(net_conn_shard(c), (unsigned)(owner - pr_owner), &m);
}

static const struct net_conn_handler pr_handler = {
    .on_data = pr_data, .on_close = pr_close, .on_deadline = pr_deadline};

static void pr_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer;
    (void)l;
    struct pr_shard *sh = arg;
    struct net_conn *c;
    if (net_conn_adopt(sh->s, fd, &pr_handler, NULL, NULL, &c) < 0) {
        close(fd);
        return;
    }
    net_conn_set_deadline(c, sh->cfg->wait_ms); /* to be paired; kept across a move */
}

static int pr_shard_init(struct hd_shard *s, void *arg, void **state)
{
    struct pr_shard *sh = calloc(1, sizeof(*sh));
    if (sh == NULL)
        return -ENOMEM;
    sh->s = s;
    sh->cfg = arg;
    int rc = hd_slab_create(s, "pairs", sizeof(struct pr_pair), PR_PAIRS_MAX, &sh->pairs);
    struct net_listener_options lo = {.reuseport = true};
    if (rc == 0)
        rc = net_listener_start(s, &sh->cfg->listen, &lo, pr_accept, sh, &sh->listener);
    if (rc < 0) {
        free(sh);
        return rc;
    }
    *state = sh;
    return 0;
}

static void pr_shard_stop(struct hd_shard *s, void *state)
{
    struct pr_shard *sh = state;
    net_listener_stop(sh->listener);
    net_shard_close_all(s, 0);
}

static void pr_shard_fini(struct hd_shard *s, void *state)
{
    struct pr_shard *sh = state;
    printf("pair: shard %u paired %llu moved %llu timeouts %llu refused %llu\n", hd_shard_id(s),
           (unsigned long long)sh->paired, (unsigned long long)sh->moved,
           (unsigned long long)sh->timeouts, (unsigned long long)sh->refused);
    fflush(stdout);
    free(sh); /* the pool goes with the shard */
}

static const struct hd_module *const pr_requires[] = {&net_module, NULL};
static const struct hd_module pr_module = {.abi_version = HD_MODULE_ABI,
                                           .name = "pair",
                                           .requires = pr_requires,
                                           .shard_init = pr_shard_init,
                                           .shard_stop = pr_shard_stop,
                                           .shard_fini = pr_shard_fini};

static int pr_setup(struct kit_app *a)
{
    struct pr_config *cfg = a->module_arg;
    int rc = kit_app_hold(a, &cfg->listen, SOCK_STREAM); /* port 0: one port for every shard */
    if (rc < 0)
        fprintf(stderr, "pair: cannot bind: %s\n", strerror(-rc));
    return rc;
}

static int pr_started(struct kit_app *a, struct hd_runtime *rt)
{
    (void)rt;
    const struct pr_config *cfg = a->module_arg;
    char buf[64];
    printf("pair: listening on %s\n", net_addr_format(&cfg->listen, buf, sizeof(buf)));
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    static struct pr_config cfg = {.wait_ms = 10000};
    net_addr_parse("127.0.0.1:7600", &cfg.listen);
    const struct kit_flag flags[] = {
        {"listen", KIT_FLAG_ADDR, &cfg.listen, 0, 0, "address (default 127.0.0.1:7600; port 0)"},
        {"wait-ms", KIT_FLAG_U32, &cfg.wait_ms, 1, 3600000, "how long one waits (default 10000)"},
    };
    struct kit_app app = {.name = "pair",
                          .flags = flags,
                          .flags_count = HD_ARRAY_SIZE(flags),
                          .shards_flag = true,
                          .rt = {.shards_count = 2},
                          .module = &pr_module,
                          .module_arg = &cfg,
                          .setup = pr_setup,
                          .started = pr_started};
    return kit_app_main(&app, argc, argv);
}
