/* kit_pipe.c - two connections piped into each other: what one receives is queued on the other,
 * with backpressure (a side whose peer's send queue is above its high watermark stops receiving
 * until it falls under the low one), half closes carried through, and one callback once both
 * have closed. The pipe is the caller's memory (embedded in its session) on one shard, where
 * both connections live while piped: kit_pipe_join brings a connection that lives on another
 * shard there first (net_conn_migrate, asked of its shard over the bus), so the data path is a
 * local one with the connections' own watermarks, never a bus hop per read. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <hd/kit.h>

#define PIPE_RETRY_MS 1 /* a full bus: send the answer again this soon */

static struct kit_pipe *pipe_of(struct net_conn *c, unsigned *side)
{
    struct kit_pipe *p = net_conn_app(c);
    HD_ASSERT(p != NULL && (p->c[0] == c || p->c[1] == c));
    *side = p->c[0] == c ? 0 : 1;
    return p;
}

static bool is_open(const struct net_conn *c)
{
    return c != NULL && net_conn_state(c) == NET_CONN_OPEN;
}

static ssize_t pipe_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    unsigned i;
    struct kit_pipe *p = pipe_of(c, &i);
    if (!p->running) { /* the other side is still on its way: keep the bytes */
        net_conn_pause_recv(c, true);
        return 0;
    }
    struct net_conn *other = p->c[!i];
    if (!is_open(other)) {
        p->stats.dropped += len; /* the other side is gone: this one closes with it */
        return (ssize_t)len;
    }
    int rc = net_conn_send_copy(other, data, len);
    if (rc == -ENOBUFS) { /* over the other's cap (its high mark paused us already): wait */
        net_conn_pause_recv(c, true);
        return 0;
    }
    if (rc < 0)
        return rc;
    p->stats.bytes[i] += len;
    return (ssize_t)len;
}

/* The other side's send queue crossed a watermark: stop or resume this side's receiving. */
static void pipe_pressure(struct net_conn *c, bool paused)
{
    unsigned i;
    struct kit_pipe *p = pipe_of(c, &i);
    struct net_conn *src = p->c[!i];
    if (paused)
        p->stats.pauses++;
    if (p->running && is_open(src))
        net_conn_pause_recv(src, paused); /* resuming offers src's kept bytes, inside this call */
}

/* Side i's peer ended its writing: end the other's, or close both once both ended. */
static void eof_apply(struct kit_pipe *p, unsigned i)
{
    if (p->eof == 3) { /* both directions ended: close both once their queues are sent */
        for (unsigned k = 0; k < 2; k++)
            if (p->c[k])
                net_conn_close(p->c[k], 0, true);
    } else if (p->c[!i]) {
        net_conn_shutdown_write(p->c[!i]); /* after what is queued */
    }
}

static void pipe_eof(struct net_conn *c)
{
    unsigned i;
    struct kit_pipe *p = pipe_of(c, &i);
    p->eof |= (uint8_t)(1u << i);
    if (p->running)
        eof_apply(p, i);
}

static void maybe_done(struct kit_pipe *p)
{
    if (p->c[0] == NULL && p->c[1] == NULL && p->coming == 0 && p->done)
        p->done(p, p->arg); /* both closed: p is the caller's again */
}

/* The pipe cannot run (a side closed, or could not be brought): close what is here (what it
 * has queued goes out first) and whatever still arrives. */
static void pipe_fail(struct kit_pipe *p, int reason)
{
    p->failed = true;
    if (p->reason == 0)
        p->reason = reason;
    for (unsigned k = 0; k < 2; k++)
        if (p->c[k])
            net_conn_close(p->c[k], p->reason, true);
    maybe_done(p);
}

static void pipe_close(struct net_conn *c, int reason)
{
    unsigned i;
    struct kit_pipe *p = pipe_of(c, &i);
    p->c[i] = NULL;
    pipe_fail(p, reason);
}

static const struct net_conn_handler pipe_handler = {
    .on_data = pipe_data,
    .on_send_pressure = pipe_pressure,
    .on_eof = pipe_eof,
    .on_close = pipe_close,
};

/* The pipe's connection from now on (on its shard); one that must wait for the other side to
 * arrive waits with receiving paused (its bytes kept). A deadline it had (the pairing's) ends
 * here. */
static void take(struct kit_pipe *p, unsigned i, struct net_conn *c, bool wait)
{
    p->c[i] = c;
    net_conn_set_deadline(c, 0);
    net_conn_set_app(c, &pipe_handler, p);
    if (wait)
        net_conn_pause_recv(c, true);
}

/* Both sides are here: greet, then let the bytes flow. Bytes the previous handlers kept (what
 * followed a pairing line) go first: a paused side's are offered as it resumes (inside this
 * call), the others' on the next tick. Returns 0 or -EAGAIN (task ring full: the kept bytes
 * wait for new ones). */
static int run(struct kit_pipe *p)
{
    p->running = true;
    for (unsigned i = 0; i < 2 && p->hello; i++)
        if (is_open(p->c[i]))
            net_conn_send_copy(p->c[i], p->hello, p->hello_len);
    for (unsigned i = 0; i < 2; i++)
        if (p->eof & (1u << i))
            eof_apply(p, i);
    int rc = 0;
    for (unsigned i = 0; i < 2; i++) {
        if (is_open(p->c[i]))
            net_conn_pause_recv(p->c[i], false);
        if (is_open(p->c[i]) && net_conn_reoffer(p->c[i]) == -EAGAIN)
            rc = -EAGAIN;
    }
    return rc;
}

int kit_pipe_start(struct kit_pipe *p, struct net_conn *a, struct net_conn *b,
                   kit_pipe_done_fn *done, void *arg)
{
    if (a == b || net_conn_shard(a) != net_conn_shard(b))
        return -EINVAL;
    if (!is_open(a) || !is_open(b))
        return -EPIPE;
    *p = (struct kit_pipe){.shard_id = hd_shard_id(net_conn_shard(a)), .done = done, .arg = arg};
    take(p, 0, a, false);
    take(p, 1, b, false);
    return run(p);
}

/* ---------------------------------------------------------------- bringing a side here */

/* The adopt argument of a move: the pipe with the side in its lowest bit. */
static void *side_tag(struct kit_pipe *p, unsigned i)
{
    _Static_assert(_Alignof(struct kit_pipe) >= 2, "a free low bit");
    return (void *)((uintptr_t)p | i);
}

static struct kit_pipe *untag(void *tag, unsigned *side)
{
    *side = (unsigned)((uintptr_t)tag & 1u);
    return (struct kit_pipe *)((uintptr_t)tag & ~(uintptr_t)1u);
}

/* On the pipe's shard: a side arrived (c), or could not (NULL: its fd was closed). */
static void arrive(struct net_conn *c, void *tag)
{
    unsigned i;
    struct kit_pipe *p = untag(tag, &i);
    p->coming &= (uint8_t) ~(1u << i);
    if (c == NULL) {
        pipe_fail(p, -ENOMEM);
        return;
    }
    p->stats.moved++;
    bool ready = !p->failed && p->c[!i] && p->coming == 0;
    take(p, i, c, !ready);
    if (p->failed)
        net_conn_close(c, p->reason, true);
    else if (ready)
        (void)run(p); /* -EAGAIN: the kept bytes wait for new ones */
}

static void gone_msg(struct hd_shard *s, const struct hd_msg *m)
{
    (void)s;
    unsigned i;
    struct kit_pipe *p = untag(m->ptr, &i);
    p->coming &= (uint8_t) ~(1u << i);
    pipe_fail(p, -EPIPE);
}

/* The answer "that side will not come" must reach the pipe, whose shard waits for it: a full
 * bus is retried (the answer in heap memory: this is the rare path). */
struct gone_retry {
    struct hd_timer t;
    struct hd_msg m;
    unsigned dst;
};

static void gone_retry_fire(struct hd_timer *t)
{
    struct gone_retry *r = hd_container_of(t, struct gone_retry, t);
    struct hd_shard *s = hd_shard_current();
    if (hd_bus_send(s, r->dst, &r->m) == 0)
        free(r);
    else
        hd_timer_start(s, &r->t, PIPE_RETRY_MS);
}

static void gone_send(struct hd_shard *s, unsigned dst, void *tag)
{
    struct hd_msg m = {.fn = gone_msg, .ptr = tag};
    if (hd_bus_send(s, dst, &m) == 0)
        return;
    struct gone_retry *r = malloc(sizeof(*r));
    if (r == NULL) { /* the pipe's other side then waits until its own timeouts close it */
        hd_log_rl(HD_LOG_ERROR, "kit_pipe: out of memory: a pipe never hears its side is gone");
        return;
    }
    *r = (struct gone_retry){.m = m, .dst = dst};
    hd_timer_init(&r->t, gone_retry_fire);
    hd_timer_start(s, &r->t, PIPE_RETRY_MS);
}

/* On the moving side's old shard while it waits to move (or if the move fails there). The
 * pipe's shard_id is the one field read here: written before the fetch was sent (the bus orders
 * it) and never again, and the pipe lives until this answer has come. */
static void transit_close(struct net_conn *c, int reason)
{
    (void)reason;
    void *tag = net_conn_app(c);
    unsigned i;
    gone_send(net_conn_shard(c), untag(tag, &i)->shard_id, tag);
}

static ssize_t transit_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    (void)data, (void)len;
    net_conn_pause_recv(c, true); /* kept: it moves with the connection */
    return 0;
}

static void transit_eof(struct net_conn *c)
{
    (void)c; /* the end is seen again on the pipe's shard (the socket says it again) */
}

static const struct net_conn_handler transit_handler = {
    .on_data = transit_data, .on_eof = transit_eof, .on_close = transit_close};

/* On the shard of a side's connection: send it to the pipe's shard, or say it is gone. Its
 * app hears nothing more of it (as with net_conn_migrate), unless it cannot move: closed,
 * closing, moving elsewhere or no memory leave it as it is. The handler is set first: the move
 * may be packed inside net_conn_migrate already. A deadline is stopped while it moves. */
static void fetch_msg(struct hd_shard *s, const struct hd_msg *m)
{
    struct net_conn *c = net_conn_by_handle(s, (struct hd_handle){m->u64[0]});
    unsigned dst = (unsigned)m->u64[1];
    if (!is_open(c)) {
        gone_send(s, dst, m->ptr);
        return;
    }
    const struct net_conn_handler *h = net_conn_app_handler(c);
    void *app = net_conn_app(c);
    net_conn_set_app(c, &transit_handler, m->ptr); /* travels with it; arrive replaces it */
    if (net_conn_migrate(c, dst, arrive, m->ptr) < 0) {
        net_conn_set_app(c, h, app);
        gone_send(s, dst, m->ptr);
    }
}

int kit_pipe_join(struct hd_shard *s, struct kit_pipe *p, struct hd_handle a, struct hd_handle b,
                  const char *hello, kit_pipe_done_fn *done, void *arg)
{
    struct hd_handle h[2] = {a, b};
    struct net_conn *local[2] = {NULL, NULL};
    unsigned here = hd_shard_id(s), count = hd_shard_count(s);
    if (hd_handle_eq(a, b) || a.v == 0 || b.v == 0 || hd_handle_shard(a) >= count ||
        hd_handle_shard(b) >= count)
        return -EINVAL;
    for (unsigned i = 0; i < 2; i++) {
        if (hd_handle_shard(h[i]) != here)
            continue;
        local[i] = net_conn_by_handle(s, h[i]);
        if (!is_open(local[i]))
            return -EPIPE;
    }
    *p = (struct kit_pipe){.shard_id = here, .done = done, .arg = arg, .hello = hello};
    p->hello_len = hello ? (uint32_t)strlen(hello) : 0;
    int rc = 0;
    for (unsigned i = 0; i < 2; i++) {
        if (local[i])
            continue;
        struct hd_msg m = {.fn = fetch_msg, .ptr = side_tag(p, i), .u64 = {h[i].v, here}};
        rc = hd_bus_send(s, hd_handle_shard(h[i]), &m);
        if (rc < 0 && p->coming == 0)
            return rc; /* nothing asked yet: nothing changed */
        if (rc < 0)
            p->failed = true, p->reason = rc; /* the first side comes, to be closed here */
        else
            p->coming |= (uint8_t)(1u << i);
    }
    for (unsigned i = 0; i < 2; i++)
        if (local[i])
            take(p, i, local[i], p->coming != 0);
    if (p->failed)
        pipe_fail(p, p->reason);
    else if (p->coming == 0)
        (void)run(p);
    return 0;
}
