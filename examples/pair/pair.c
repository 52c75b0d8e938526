/* pair.c - a TCP pairing relay on the hd framework: two clients that send the same token are
 * piped into each other, whichever shard the kernel gave each of them.
 *
 * Protocol: a client sends one line "PAIR <token>\n" (token: 1..64 of [A-Za-z0-9_-]) and waits.
 * When a second client sends the same token both get "OK\n" and from then on every byte one
 * sends reaches the other (half closes carried through). A client left alone longer than
 * -wait-ms gets "ERR timeout\n" and is closed; a bad line gets "ERR line\n"; no room gets
 * "ERR busy\n".
 *
 * The framework pieces it shows: a token's owner shard (kit_owner_shard) holds its waiting
 * client; a client that arrived elsewhere is moved there with its unread bytes
 * (net_conn_migrate); the pair is piped with kit_pipe_start (backpressure both ways); the
 * waiting deadline lets the app write its last line (on_deadline); start-up is kit_app_main.
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
#define PR_WAITING_MAX 256u                     /* clients waiting for their peer, per shard */
#define PR_PAIRS_MAX   4096u                    /* pairs piped at once, per shard */

struct pr_config {
    struct net_addr listen;
    uint32_t wait_ms;
};

struct pr_waiting {
    struct net_conn *c; /* NULL: free */
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
    struct pr_waiting waiting[PR_WAITING_MAX];
    uint64_t paired, moved, timeouts, refused;
};

static const struct hd_module pr_module;
static const struct net_conn_handler pr_handler;
static char pr_waiting_mark; /* a waiting connection's app pointer */

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
    (void)p;
    struct pr_pair *pr = arg;
    hd_slab_put(pr->sh->pairs, pr);
}

/* On the moved connection's new shard (the token's owner): same handler; the line it has not
 * consumed is offered again there. */
static void moved_in(struct net_conn *c, void *arg)
{
    (void)arg;
    if (c)
        net_conn_set_app(c, &pr_handler, NULL);
}

static struct pr_waiting *waiting_find(struct pr_shard *sh, const char *token, size_t len)
{
    for (unsigned i = 0; i < PR_WAITING_MAX; i++) {
        struct pr_waiting *w = &sh->waiting[i];
        if (w->c && w->len == len && memcmp(w->token, token, len) == 0)
            return w;
    }
    return NULL;
}

/* On the token's owner: wait, or pair with the one waiting. Returns on_data's answer. */
static ssize_t pair_here(struct pr_shard *sh, struct net_conn *c, const char *token, size_t tlen,
                         ssize_t line)
{
    struct pr_waiting *w = waiting_find(sh, token, tlen);
    if (w == NULL) {
        for (unsigned i = 0; w == NULL && i < PR_WAITING_MAX; i++)
            w = sh->waiting[i].c == NULL ? &sh->waiting[i] : NULL;
        if (w == NULL) {
            refuse(sh, c, "ERR busy\n");
            return line;
        }
        *w = (struct pr_waiting){.c = c, .len = (uint8_t)tlen};
        memcpy(w->token, token, tlen);
        net_conn_set_app(c, &pr_handler, &pr_waiting_mark);
        return line;
    }
    struct pr_pair *pr = hd_slab_get(sh->pairs);
    if (pr == NULL) {
        refuse(sh, c, "ERR busy\n");
        return line;
    }
    struct net_conn *other = w->c;
    w->c = NULL;
    pr->sh = sh;
    net_conn_set_deadline(other, 0);
    net_conn_set_deadline(c, 0);
    net_conn_send_copy(other, "OK\n", 3);
    net_conn_send_copy(c, "OK\n", 3);
    int rc = kit_pipe_start(&pr->pipe, other, c, pair_done, pr);
    if (rc == -EPIPE || rc == -EINVAL) { /* nothing was taken over (-EAGAIN: piped) */
        hd_slab_put(sh->pairs, pr);
        net_conn_close(other, 0, true);
        return rc;
    }
    sh->paired++;
    return line;
}

static ssize_t pr_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct hd_shard *s = net_conn_shard(c);
    struct pr_shard *sh = shard_state(s);
    if (net_conn_app(c) == &pr_waiting_mark)
        return 0; /* waiting: what it sends early is kept for its peer */
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
    if (owner != hd_shard_id(s)) { /* the line stays unconsumed: it travels and is read there */
        if (net_conn_migrate(c, owner, moved_in, NULL) < 0)
            refuse(sh, c, "ERR busy\n");
        else
            sh->moved++;
        return 0;
    }
    return pair_here(sh, c, token, tlen, line);
}

static void pr_deadline(struct net_conn *c)
{
    shard_state(net_conn_shard(c))->timeouts++;
    net_conn_send_copy(c, "ERR timeout\n", 12); /* then the framework closes it */
}

static void pr_close(struct net_conn *c, int reason)
{
    (void)reason;
    struct pr_shard *sh = shard_state(net_conn_shard(c));
    for (unsigned i = 0; i < PR_WAITING_MAX; i++) {
        if (sh->waiting[i].c == c)
            sh->waiting[i].c = NULL;
    }
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
