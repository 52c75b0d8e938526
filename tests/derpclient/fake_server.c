/* fake_server.c - see fake_server.h. One server per test process, on the test's shard. Input is
 * accumulated in a heap buffer per connection (so frames of any size reassemble without relying
 * on the connection's tail), output goes out at once or dribbled by a 1 ms timer. */
#include "fake_server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hd/net_http.h>

#define FAKE_CONNS_MAX 8
#define FAKE_IN_MAX    (2u << 20)

const uint8_t fake_ping_data[DERP_PING_LEN] = {'s', 'r', 'v', 'p', 'i', 'n', 'g', '!'};
const struct derp_pubkey fake_peer_key = {{0xee, 0x01, 0x02, 0x03, [31] = 0x7f}};

struct fake_conn {
    struct net_conn *c;
    bool upgraded, logged_in;
    struct net_http_req req;
    struct derp_splitter split;
    struct derp_pubkey client_key;
    uint8_t *in;
    size_t in_len;
    uint8_t *out; /* dribble mode: bytes not yet sent */
    size_t out_len, out_off;
    bool dribble_done; /* ServerInfo was dribbled out: later output goes at once */
    uint8_t *later;    /* split_101_and_key: the ServerKey frame, sent by the timer */
    size_t later_len;
    struct hd_timer timer;
};

static struct {
    struct hd_shard *s;
    struct fake_opts o;
    const struct derp_keypair *kp;
    struct fake_stats *st;
    struct net_listener *l;
    struct fake_conn *conns[FAKE_CONNS_MAX];
} srv;

/* ---- output ---------------------------------------------------------------------------------- */

static void send_now(struct fake_conn *fc, const uint8_t *p, size_t len)
{
    while (len > 0) {
        size_t n = len < 65536 ? len : 65536;
        struct hd_frame *f = hd_frame_get(srv.s, n);
        if (f == NULL) {
            fprintf(stderr, "fake server: frame pool empty\n");
            abort();
        }
        memcpy(f->data, p, n);
        f->len = (uint32_t)n;
        if (net_conn_send(fc->c, f, 0, (uint32_t)n) < 0) {
            hd_frame_unref(srv.s, f);
            return; /* closing */
        }
        hd_frame_unref(srv.s, f);
        p += n;
        len -= n;
    }
}

static void timer_fired(struct hd_timer *t)
{
    struct fake_conn *fc = hd_container_of(t, struct fake_conn, timer);
    if (fc->later) {
        send_now(fc, fc->later, fc->later_len);
        free(fc->later);
        fc->later = NULL;
    }
    if (fc->out_off < fc->out_len) {
        size_t n = fc->out_len - fc->out_off;
        if (n > srv.o.dribble)
            n = srv.o.dribble;
        send_now(fc, fc->out + fc->out_off, n);
        fc->out_off += n;
    }
    if (fc->out_off == fc->out_len && fc->logged_in)
        fc->dribble_done = true; /* ServerInfo is out: the rest of the session flows */
    if (fc->out_off < fc->out_len)
        hd_timer_start(srv.s, &fc->timer, 1);
}

static void fake_send(struct fake_conn *fc, const uint8_t *p, size_t len)
{
    if (!srv.o.dribble || fc->dribble_done) {
        send_now(fc, p, len);
        return;
    }
    fc->out = realloc(fc->out, fc->out_len + len);
    memcpy(fc->out + fc->out_len, p, len);
    fc->out_len += len;
    if (!hd_timer_armed(&fc->timer))
        hd_timer_start(srv.s, &fc->timer, 1);
}

/* ---- upgrade ----------------------------------------------------------------------------------
 */

static void copy_str(char *dst, size_t size, struct net_http_str v)
{
    size_t n = v.len < size - 1 ? v.len : size - 1;
    if (v.ptr)
        memcpy(dst, v.ptr, n);
    dst[v.ptr ? n : 0] = '\0';
}

/* The request head is whole: answer like derper (handler.go), 101 and ServerKey in one write. */
static int upgrade(struct fake_conn *fc)
{
    struct fake_stats *st = srv.st;
    st->requests++;
    copy_str(st->path, sizeof(st->path), fc->req.path);
    copy_str(st->host, sizeof(st->host), fc->req.host);
    copy_str(st->upgrade, sizeof(st->upgrade), net_http_header_get(&fc->req.head, "Upgrade"));
    copy_str(st->extra, sizeof(st->extra), net_http_header_get(&fc->req.head, "X-Test"));
    struct net_http_str fs = net_http_header_get(&fc->req.head, "Derp-Fast-Start");
    bool fast = fs.ptr && net_http_str_eq(fs, "1");
    st->fast_start_header = fast;
    if (srv.o.never_answer)
        return 0;
    uint8_t buf[1024];
    size_t n = 0;
    if (srv.o.status) {
        int w = net_http_write_error((char *)buf, sizeof(buf), srv.o.status, false);
        fake_send(fc, buf, (size_t)w);
        net_conn_close(fc->c, 0, true);
        return 0;
    }
    if (!fast || srv.o.send_101_always)
        n = (size_t)net_http_write_derp_101((char *)buf, sizeof(buf), srv.kp->pub.bytes);
    if (srv.o.close_after_101) {
        fake_send(fc, buf, n);
        net_conn_close(fc->c, 0, true);
        return 0;
    }
    ssize_t k = derp_server_key_encode(buf + n, sizeof(buf) - n, &srv.kp->pub);
    srv.st->login_stream_bytes += (uint64_t)k;
    if (srv.o.bad_magic)
        buf[n + DERP_FRAME_HEADER_LEN] ^= 0x01;
    if (srv.o.split_101_and_key) {
        fake_send(fc, buf, n);
        fc->later = malloc((size_t)k);
        memcpy(fc->later, buf + n, (size_t)k);
        fc->later_len = (size_t)k;
        hd_timer_start(srv.s, &fc->timer, 5);
        return 0;
    }
    fake_send(fc, buf, n + (size_t)k);
    return 0;
}

/* ---- frames -----------------------------------------------------------------------------------
 */

static void send_recv_packet(struct fake_conn *fc, const uint8_t *src, const uint8_t *data,
                             size_t len)
{
    uint8_t *b = malloc(DERP_FRAME_HEADER_LEN + DERP_KEY_LEN + len);
    ssize_t n = derp_frame_recv_packet_encode(b, DERP_FRAME_HEADER_LEN + DERP_KEY_LEN + len, src,
                                              data, len);
    fake_send(fc, b, (size_t)n);
    free(b);
}

/* Every S->C frame type a client handles, plus the awkward ones: an unknown 100 kB frame (the
 * client must stream past it), a 200 KiB Health (heap assembly), a 64 KiB RecvPacket (pool
 * assembly), a short PeerGone (dropped), and a server Ping last. */
static void push_extras(struct fake_conn *fc)
{
    size_t cap = FAKE_UNKNOWN_LEN + FAKE_BIG_HEALTH_LEN + 4096;
    uint8_t *b = calloc(1, cap);
    size_t n = 0;
    struct derp_addr a;
    derp_addr_from_ipv4(&a, (const uint8_t[4]){198, 51, 100, 7}, 41641);
    n += (size_t)derp_frame_keep_alive_encode(b + n, cap - n);
    n += (size_t)derp_frame_health_encode(b + n, cap - n, FAKE_HEALTH_TEXT,
                                          strlen(FAKE_HEALTH_TEXT));
    n += (size_t)derp_frame_restarting_encode(b + n, cap - n, FAKE_RESTART_IN_MS,
                                              FAKE_RESTART_TRY_MS);
    n += (size_t)derp_frame_peer_gone_encode(b + n, cap - n, fake_peer_key.bytes,
                                             DERP_PEER_GONE_NOT_HERE);
    n += (size_t)derp_frame_peer_present_encode(b + n, cap - n, fake_peer_key.bytes, &a,
                                                DERP_PEER_PRESENT_IS_PROBER);
    n += (size_t)derp_frame_header_encode(b + n, cap - n, DERP_FRAME_PEER_GONE, 10);
    n += 10; /* short PeerGone: dropped */
    n += (size_t)derp_frame_header_encode(b + n, cap - n, FAKE_UNKNOWN_TYPE, FAKE_UNKNOWN_LEN);
    n += FAKE_UNKNOWN_LEN;
    char *text = malloc(FAKE_BIG_HEALTH_LEN);
    memset(text, 'h', FAKE_BIG_HEALTH_LEN);
    n += (size_t)derp_frame_health_encode(b + n, cap - n, text, FAKE_BIG_HEALTH_LEN);
    free(text);
    n += (size_t)derp_frame_health_encode(b + n, cap - n, "", 0);
    fake_send(fc, b, n);
    free(b);
    uint8_t *pkt = malloc(FAKE_BIG_PACKET_LEN);
    for (size_t i = 0; i < FAKE_BIG_PACKET_LEN; i++)
        pkt[i] = (uint8_t)(i * 7 + 3);
    send_recv_packet(fc, fake_peer_key.bytes, pkt, FAKE_BIG_PACKET_LEN);
    free(pkt);
    uint8_t ping[DERP_FRAME_HEADER_LEN + DERP_PING_LEN];
    fake_send(fc, ping, (size_t)derp_frame_ping_encode(ping, sizeof(ping), fake_ping_data));
}

/* interleave_partial: A cut at FAKE_CUT, B whole, the rest of A (one write). */
static void push_interleaved(struct fake_conn *fc)
{
    enum { FRAME = DERP_FRAME_HEADER_LEN + DERP_KEY_LEN + FAKE_DESYNC_LEN };
    uint8_t a[FRAME], b[FRAME], data[FAKE_DESYNC_LEN], out[2 * FRAME];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)i;
    derp_frame_recv_packet_encode(a, sizeof(a), fake_peer_key.bytes, data, sizeof(data));
    memset(data, FAKE_DESYNC_BYTE, sizeof(data));
    derp_frame_recv_packet_encode(b, sizeof(b), fake_peer_key.bytes, data, sizeof(data));
    memcpy(out, a, FAKE_CUT);
    memcpy(out + FAKE_CUT, b, FRAME);
    memcpy(out + FAKE_CUT + FRAME, a + FAKE_CUT, FRAME - FAKE_CUT);
    fake_send(fc, out, sizeof(out));
}

static int login(struct fake_conn *fc, const uint8_t *p, size_t len)
{
    struct fake_stats *st = srv.st;
    int rc = derp_client_info_open(p, len, srv.kp, &fc->client_key, &st->info, NULL, 0);
    if (rc < 0)
        return rc;
    st->got_client_info = true;
    st->client_key = fc->client_key;
    st->mesh = st->info.has_mesh_key && derp_mesh_key_admits(&srv.o.mesh_key, &st->info.mesh_key);
    derp_splitter_set_mesh(&fc->split, st->mesh);
    st->logins++;
    fc->logged_in = true;
    struct derp_keypair other;
    const struct derp_keypair *kp = srv.kp;
    if (srv.o.server_info_wrong_key) {
        derp_keypair_generate(&other);
        kp = &other;
    }
    uint8_t buf[256];
    ssize_t n = derp_server_info_seal(buf, sizeof(buf), kp, &fc->client_key, NULL, NULL);
    fake_send(fc, buf, (size_t)n);
    srv.st->login_stream_bytes += (uint64_t)n;
    if (srv.o.push_extras)
        push_extras(fc);
    if (srv.o.interleave_partial)
        push_interleaved(fc);
    return 0;
}

static int frame(struct fake_conn *fc, uint8_t type, const uint8_t *p, size_t len)
{
    struct fake_stats *st = srv.st;
    struct derp_packet pkt;
    const uint8_t *d;
    uint8_t buf[64];
    switch (type) {
    case DERP_FRAME_CLIENT_INFO:
        return login(fc, p, len);
    case DERP_FRAME_SEND_PACKET:
        derp_frame_send_packet_decode(p, len, &pkt);
        st->packets++;
        send_recv_packet(fc, fc->client_key.bytes, pkt.data, pkt.data_len);
        return 0;
    case DERP_FRAME_FORWARD_PACKET:
        derp_frame_forward_packet_decode(p, len, &pkt);
        st->forwards++;
        send_recv_packet(fc, pkt.src_key, pkt.data, pkt.data_len);
        return 0;
    case DERP_FRAME_PING:
        derp_frame_ping_decode(p, len, &d);
        st->pings++;
        fake_send(fc, buf, (size_t)derp_frame_pong_encode(buf, sizeof(buf), d));
        return 0;
    case DERP_FRAME_NOTE_PREFERRED:
        st->preferred_frames++;
        return derp_frame_note_preferred_decode(p, len, &st->preferred);
    case DERP_FRAME_WATCH_CONNS: {
        st->watches++;
        struct derp_addr a;
        const struct net_addr *peer = net_conn_peer(fc->c);
        derp_addr_from_sockaddr(&a, &peer->sa, peer->len);
        uint8_t flags = derp_peer_present_flags(st->mesh, false, false);
        fake_send(fc, buf,
                  (size_t)derp_frame_peer_present_encode(buf, sizeof(buf), fc->client_key.bytes, &a,
                                                         flags));
        return 0;
    }
    case DERP_FRAME_CLOSE_PEER:
        st->close_peers++;
        memcpy(st->close_peer_key.bytes, p, DERP_KEY_LEN);
        return 0;
    }
    return 0;
}

/* ---- connection ------------------------------------------------------------------------------ */

static int process(struct fake_conn *fc)
{
    size_t off = 0;
    if (!fc->upgraded) {
        int rc = net_http_req_parse(&fc->req, (const char *)fc->in, fc->in_len);
        if (rc == -EAGAIN)
            return 0;
        if (rc < 0)
            return rc;
        fc->upgraded = true;
        off = (size_t)rc;
        srv.st->info_with_request = fc->in_len > off;
        upgrade(fc);
    }
    while (off < fc->in_len && net_conn_state(fc->c) == NET_CONN_OPEN) {
        struct derp_split sp;
        int rc = derp_splitter_next(&fc->split, fc->in + off, fc->in_len - off, &sp);
        if (rc < 0)
            return rc;
        if (sp.kind == DERP_SPLIT_NEED)
            break;
        if (sp.kind == DERP_SPLIT_SKIP) {
            /* The server policy skips Pong: peek at it when it is here whole. */
            if (sp.frame_start && sp.type == DERP_FRAME_PONG && sp.len >= DERP_PING_LEN &&
                sp.consumed == DERP_FRAME_HEADER_LEN + sp.len) {
                srv.st->pongs++;
                memcpy(srv.st->last_pong, fc->in + off + DERP_FRAME_HEADER_LEN, DERP_PING_LEN);
            } else if (sp.frame_start) {
                srv.st->skipped++;
            }
        } else if ((rc = frame(fc, sp.type, fc->in + off + sp.payload_offset, sp.len)) < 0) {
            return rc;
        }
        off += sp.consumed;
    }
    memmove(fc->in, fc->in + off, fc->in_len - off);
    fc->in_len -= off;
    return 0;
}

static ssize_t fc_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct fake_conn *fc = net_conn_app(c);
    if (fc->in_len + len > FAKE_IN_MAX)
        return -EMSGSIZE;
    memcpy(fc->in + fc->in_len, data, len);
    fc->in_len += len;
    int rc = process(fc);
    return rc < 0 ? rc : (ssize_t)len;
}

static void fc_close(struct net_conn *c, int reason)
{
    (void)reason;
    struct fake_conn *fc = net_conn_app(c);
    for (unsigned i = 0; i < FAKE_CONNS_MAX; i++)
        if (srv.conns[i] == fc)
            srv.conns[i] = NULL;
    hd_timer_stop(srv.s, &fc->timer);
    free(fc->in);
    free(fc->out);
    free(fc->later);
    free(fc);
}

static const struct net_conn_handler fc_handler = {.on_data = fc_data, .on_close = fc_close};

static void fake_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)l, (void)peer, (void)arg;
    srv.st->accepts++;
    struct fake_conn *fc = calloc(1, sizeof(*fc));
    fc->in = malloc(FAKE_IN_MAX);
    net_http_req_init(&fc->req);
    derp_splitter_init(&fc->split, DERP_READER_SERVER_HELLO);
    hd_timer_init(&fc->timer, timer_fired);
    if (net_conn_adopt(srv.s, fd, &fc_handler, fc, NULL, &fc->c) < 0) {
        close(fd);
        free(fc->in);
        free(fc);
        return;
    }
    for (unsigned i = 0; i < FAKE_CONNS_MAX; i++) {
        if (srv.conns[i] == NULL) {
            srv.conns[i] = fc;
            break;
        }
    }
    if (srv.o.close_at_accept)
        net_conn_close(fc->c, 0, false);
}

int fake_server_start(struct hd_shard *s, const struct fake_opts *opts,
                      const struct derp_keypair *kp, struct fake_stats *stats)
{
    memset(&srv, 0, sizeof(srv));
    srv.s = s;
    srv.o = *opts;
    srv.kp = kp;
    srv.st = stats;
    struct net_addr a;
    int rc = net_addr_parse("127.0.0.1:0", &a);
    if (rc < 0)
        return rc;
    return net_listener_start(s, &a, NULL, fake_accept, NULL, &srv.l);
}

const struct net_addr *fake_server_addr(void)
{
    return net_listener_addr(srv.l);
}

void fake_server_stop(void)
{
    if (srv.l)
        net_listener_stop(srv.l);
    srv.l = NULL;
    for (unsigned i = 0; i < FAKE_CONNS_MAX; i++)
        if (srv.conns[i])
            net_conn_close(srv.conns[i]->c, 0, false);
}
