/* tls_handshake.c - the handshake as a net codec: raw records are fed to BoringSSL one whole
 * record at a time through a memory BIO (so BoringSSL never reads past the handshake's last
 * record: whatever follows it, such as the client's first request, stays in our byte stream
 * for the record layer, nothing decrypted is stranded inside the SSL object), its output goes
 * to the connection's wire queue, a deadline timer bounds it. On completion the traffic
 * secrets (keylog callback) and sequence numbers key the userspace record layer; for kTLS the
 * connection is then quiesced (our last flight sent, receiving stopped), the bytes that came
 * meanwhile are counted as records (a partial one completed), and the kernel gets both keys at
 * the sequence numbers after them (tls_switch_step). Then the SSL object is freed. The mode is
 * logged per connection and counted per shard (conns_userspace, conns_ktls). TLS 1.3 only
 * (docs/ARCHITECTURE.md says why): a client that offers only TLS 1.2 or older gets BoringSSL's
 * protocol_version alert (Python and OpenSSL print "tlsv1 alert protocol version"), and the
 * server logs at INFO that it refused it. Also the per-shard pools, cap on concurrent
 * handshakes (tls_module) and counters. Runs on the connection's shard. Owns: each
 * connection's struct tls_handshake (and its SSL) until the switch. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/mem.h>
#include <openssl/x509.h>

#include "tls_impl.h"

#ifndef SOL_TLS
#define SOL_TLS 282 /* include/linux/socket.h */
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

/* Handshake output is copied out of the write BIO in pieces of at most this much (a server
 * flight with a certificate chain is a few KiB; 16 KiB fits the default frame classes). */
#define TLS_HS_OUT_CHUNK 16384u

/* ---------------------------------------------------------------- per shard */

struct tls_shard *tls_shard_of(struct hd_shard *s)
{
    return hd_shard_module_state(s, &tls_module);
}

static int tls_shard_init(struct hd_shard *s, void *arg, void **state)
{
    const struct tls_shard_options *o = arg;
    if (tls_shard_of(s) != NULL)
        return -EEXIST; /* tls_module listed twice */
    struct tls_shard *ts = calloc(1, sizeof(*ts));
    if (ts == NULL)
        return -ENOMEM;
    ts->shard = s;
    ts->handshakes_max = o && o->handshakes_max ? o->handshakes_max : TLS_HANDSHAKES_MAX_DEFAULT;
    ts->ktls_disable = o && o->ktls_disable;
    int rc = hd_slab_create(s, "tls_conn", sizeof(struct tls_conn), NET_CONNS_MAX, &ts->conns);
    if (rc == 0)
        rc = hd_slab_create(s, "tls_handshake", sizeof(struct tls_handshake), ts->handshakes_max,
                            &ts->handshakes);
    if (rc < 0) {
        if (ts->conns)
            hd_slab_destroy(ts->conns);
        free(ts);
        return rc;
    }
    if (!ts->ktls_disable)
        tls_ktls_rekey_available(); /* probe now (both), not on the first handshake */
    *state = ts;
    return 0;
}

static void tls_shard_fini(struct hd_shard *s, void *state)
{
    struct tls_shard *ts = state;
    (void)s;
    if (ts == NULL)
        return;
    hd_slab_destroy(ts->handshakes);
    hd_slab_destroy(ts->conns);
    free(ts);
}

static const struct hd_module *const tls_requires[] = {&net_module, NULL};

const struct hd_module tls_module = {
    .abi_version = HD_MODULE_ABI,
    .name = "tls",
    .shard_init = tls_shard_init,
    .shard_fini = tls_shard_fini,
    .requires = tls_requires,
};

const struct tls_shard_stats *tls_shard_stats(struct hd_shard *s)
{
    return &tls_shard_of(s)->stats;
}

size_t tls_conn_state_size(void)
{
    return sizeof(struct tls_conn);
}

void tls_handshake_free(struct tls_shard *ts, struct tls_handshake *hs)
{
    hd_timer_stop(ts->shard, &hs->timer);
    SSL_free(hs->ssl); /* frees both BIOs */
    OPENSSL_cleanse(&hs->client_secret, sizeof(hs->client_secret));
    OPENSSL_cleanse(&hs->server_secret, sizeof(hs->server_secret));
    hd_slab_put(ts->handshakes, hs);
    ts->stats.handshakes_now--;
}

/* ---------------------------------------------------------------- failure */

static void hs_log_fail(struct net_conn *c, const char *what, int reason)
{
    char peer[64], ssl_err[128] = "";
    uint32_t e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, ssl_err, sizeof(ssl_err));
    ERR_clear_error();
    net_addr_format(net_conn_peer(c), peer, sizeof(peer));
    if (ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) == SSL_R_UNSUPPORTED_PROTOCOL) {
        /* The peer's problem, said so: TLS 1.2 is not spoken here (docs/ARCHITECTURE.md). */
        hd_log_rl(HD_LOG_INFO,
                  "tls: s%u %s: refused a peer that offers only TLS 1.2 or older: this side "
                  "speaks TLS 1.3 only (it got a protocol_version alert)",
                  hd_shard_id(net_conn_shard(c)), peer);
        return;
    }
    hd_log_rl(HD_LOG_WARN, "tls: s%u %s: handshake failed: %s (%s) %s",
              hd_shard_id(net_conn_shard(c)), peer, what, strerror(-reason), ssl_err);
}

/* Close after the queued bytes (BoringSSL's alert) went out. */
static void hs_fail(struct net_conn *c, struct tls_conn *t, const char *what, int reason)
{
    t->ts->stats.handshakes_failed++;
    hs_log_fail(c, what, reason);
    net_conn_close(c, reason, true);
}

static void hs_timeout_fired(struct hd_timer *tm)
{
    struct tls_handshake *hs = hd_container_of(tm, struct tls_handshake, timer);
    hs->t->ts->stats.handshakes_failed++;
    hs_log_fail(hs->c, "deadline passed", -ETIMEDOUT);
    net_conn_close(hs->c, -ETIMEDOUT, false); /* do not wait for a peer that reads nothing */
}

/* ---------------------------------------------------------------- output */

/* Move what BoringSSL wrote to the connection's wire queue. Returns 0 or -errno. */
static int hs_flush_out(struct net_conn *c, struct tls_handshake *hs)
{
    size_t pending;
    while ((pending = BIO_ctrl_pending(hs->wbio)) > 0) {
        size_t want = pending < TLS_HS_OUT_CHUNK ? pending : TLS_HS_OUT_CHUNK;
        struct hd_frame *f = hd_frame_get(net_conn_shard(c), want);
        if (f == NULL)
            return -ENOBUFS;
        int n = BIO_read(hs->wbio, f->data, (int)want);
        if (n <= 0) {
            hd_frame_unref(net_conn_shard(c), f);
            return -EIO;
        }
        f->len = (uint32_t)n;
        int rc = tls_wire_send(c, f, (uint32_t)n);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- completion */

int tls_ktls_set(int fd, int dir, const struct tls_record_state *st, uint64_t seq)
{
#if defined(SOL_TLS) && defined(TLS_TX)
    struct tls_traffic_keys k;
    union tls_ktls_info info;
    int rc = tls_traffic_keys_init(&k, st->suite, st->secret, st->secret_len);
    int len = rc < 0 ? rc : tls_ktls_info_fill(&info, &k, seq);
    rc = len < 0 ? len : setsockopt(fd, SOL_TLS, dir, &info, (socklen_t)len);
    rc = rc < 0 && len >= 0 ? -errno : rc;
    OPENSSL_cleanse(&info, sizeof(info));
    tls_traffic_keys_deinit(&k);
    return rc;
#else
    (void)fd, (void)dir, (void)st, (void)seq;
    return -ENOTSUP;
#endif
}

/* Hand both directions to the kernel: TX at the next write sequence, RX at the sequence after
 * the records opened in userspace. Returns 0; -errno before anything was installed (stay in
 * userspace); -EPROTO when TX went in but RX did not (the connection must close). */
static int ktls_install(int fd, struct tls_conn *t, uint32_t rx_records)
{
#if defined(SOL_TLS) && defined(TLS_TX)
    if (setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls")) < 0)
        return -errno;
    int rc = tls_ktls_set(fd, TLS_TX, &t->tx, t->tx.seq);
    if (rc < 0)
        return rc; /* a tls ULP without keys passes bytes through unchanged */
    rc = tls_ktls_set(fd, TLS_RX, &t->rx, t->rx.seq + rx_records);
    return rc < 0 ? -EPROTO : 0;
#else
    (void)fd, (void)t, (void)rx_records;
    return -ENOTSUP;
#endif
}

static bool ktls_wanted(const struct tls_conn *t)
{
#if defined(SOL_TLS) && defined(TLS_TX)
    return !t->ts->ktls_disable && !t->ktls_disable && tls_ktls_available();
#else
    (void)t;
    return false;
#endif
}

/* Key both record directions from the keylog secrets. Returns 0 or -errno. */
static int hs_keys(struct tls_conn *t, SSL *ssl, struct tls_traffic_keys *rx,
                   struct tls_traffic_keys *tx, uint16_t *suite)
{
    struct tls_handshake *hs = t->hs;
    if (SSL_version(ssl) != TLS1_3_VERSION || hs->secrets_seen != 3u || SSL_has_pending(ssl))
        return -EPROTO;
    *suite = SSL_CIPHER_get_protocol_id(SSL_get_current_cipher(ssl));
    const struct tls_keylog_entry *in = t->server ? &hs->client_secret : &hs->server_secret;
    const struct tls_keylog_entry *out = t->server ? &hs->server_secret : &hs->client_secret;
    int rc = tls_traffic_keys_init(rx, *suite, in->secret, in->secret_len);
    if (rc == 0)
        rc = tls_traffic_keys_init(tx, *suite, out->secret, out->secret_len);
    return rc;
}

static void hs_info(SSL *ssl, struct tls_conn_info *info)
{
    memset(info, 0, sizeof(*info));
    info->version = (uint16_t)SSL_version(ssl);
    info->suite = SSL_CIPHER_get_protocol_id(SSL_get_current_cipher(ssl));
    const char *sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (sni)
        snprintf(info->server_name, sizeof(info->server_name), "%s", sni);
    const uint8_t *alpn;
    unsigned alpn_len;
    SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
    if (alpn && alpn_len < sizeof(info->alpn))
        memcpy(info->alpn, alpn, alpn_len);
}

/* The handshake is over: free the SSL, install the records codec of the mode, tell the app.
 * Returns 0 or -errno. */
static int hs_done(struct net_conn *c, struct tls_conn *t, bool ktls)
{
    struct tls_handshake *hs = t->hs;
    struct tls_conn_info info;
    hs_info(hs->ssl, &info);
    struct tls_shard *ts = t->ts;
    tls_handshake_free(ts, hs);
    t->hs = NULL;
    ts->stats.handshakes_done++;
    net_conn_set_timeouts(c, t->idle_timeout_ms, t->write_timeout_ms);
    info.mode = ktls ? TLS_MODE_KTLS : TLS_MODE_USERSPACE;
    t->mode = (uint8_t)info.mode;
    int rc = 0;
    if (ktls) {
        ts->stats.conns_ktls++;
        net_conn_set_codec(c, &tls_ktls_codec, t);
    } else {
        ts->stats.conns_userspace++;
        net_conn_set_codec(c, &tls_record_codec, t);
    }
    if (t->pend || net_conn_unsent_count(c) > 0)
        rc = tls_kick(c); /* plaintext queued during the handshake */
    char peer[64];
    net_addr_format(net_conn_peer(c), peer, sizeof(peer));
    hd_log_rl(HD_LOG_INFO, "tls: s%u %s: TLSv1.3 0x%04x sni=%s alpn=%s mode=%s",
              hd_shard_id(net_conn_shard(c)), peer, info.suite,
              info.server_name[0] ? info.server_name : "-", info.alpn[0] ? info.alpn : "-",
              tls_mode_name(info.mode));
    if (t->on_handshake && rc == 0)
        t->on_handshake(c, &info);
    return rc;
}

/* The handshake's last message is processed: key the userspace record states, then either
 * finish in userspace now or quiesce the connection for kTLS (tls_switch_step), keeping the SSL
 * (and the handshake deadline) until then. Returns 0 or -errno. */
static int hs_finish(struct net_conn *c, struct tls_conn *t)
{
    struct tls_handshake *hs = t->hs;
    struct tls_traffic_keys rx, tx;
    uint16_t suite = 0;
    int rc = hs_keys(t, hs->ssl, &rx, &tx, &suite);
    uint64_t rseq = SSL_get_read_sequence(hs->ssl), wseq = SSL_get_write_sequence(hs->ssl);
    if (rc == 0)
        rc = tls_record_state_init(&t->rx, &rx, rseq);
    if (rc == 0)
        rc = tls_record_state_init(&t->tx, &tx, wseq);
    tls_traffic_keys_deinit(&rx);
    tls_traffic_keys_deinit(&tx);
    if (rc < 0)
        return rc;
    if (ktls_wanted(t) && net_conn_quiet_begin(c) == 0) {
        t->todo |= TLS_TODO_SWITCH;
        return 0;
    }
    return hs_done(c, t, false);
}

/* The kept bytes (received after the handshake's last record, not opened yet) as records: how
 * many start there, and how many bytes the last one still misses. Returns 0 or -EMSGSIZE (not
 * records: the userspace record layer reports it). */
static int kept_records(struct net_conn *c, uint32_t *records, size_t *missing)
{
    size_t total = net_conn_kept_bytes(c), off = 0;
    *records = 0;
    *missing = 0;
    while (off < total) {
        uint8_t h[TLS_RECORD_HEADER_LEN];
        size_t got = net_conn_kept_peek(c, off, h, sizeof(h));
        (*records)++;
        if (got < sizeof(h)) {
            *missing = sizeof(h) - got;
            return 0;
        }
        size_t rec = TLS_RECORD_HEADER_LEN + ((size_t)h[3] << 8 | h[4]);
        if (rec > TLS_RECORD_WIRE_MAX)
            return -EMSGSIZE;
        if (rec > total - off) {
            *missing = rec - (total - off);
            return 0;
        }
        off += rec;
    }
    return 0;
}

void tls_switch_step(struct net_conn *c, struct tls_conn *t)
{
    uint32_t records;
    size_t missing;
    int rc = kept_records(c, &records, &missing);
    if (rc == 0 && missing > 0) {
        rc = net_conn_quiet_read(c, missing); /* the kernel must start at a record boundary */
        if (rc == 0)
            return; /* quiesced runs again with the bytes */
    }
    if (rc == 0)
        rc = ktls_install(net_conn_fd(c), t, records);
    t->todo &= (uint8_t)~TLS_TODO_SWITCH;
    if (rc == -EPROTO) { /* the kernel seals our records now: nothing queued can follow */
        t->ts->stats.handshakes_failed++;
        hs_log_fail(c, "kTLS RX keys", rc);
        net_conn_close(c, rc, false);
        return;
    }
    if (rc < 0) {
        char peer[64];
        t->ts->stats.ktls_failed++;
        hd_log_rl(HD_LOG_WARN, "tls: s%u %s: kTLS keys not installed (%s): userspace records",
                  hd_shard_id(net_conn_shard(c)),
                  net_addr_format(net_conn_peer(c), peer, sizeof(peer)), strerror(-rc));
    }
    t->ktls_rx_left = rc == 0 ? records : 0;
    t->ts->stats.early_bytes += net_conn_kept_bytes(c);
    rc = hs_done(c, t, rc == 0);
    if (rc < 0) {
        net_conn_close(c, rc, false);
        return;
    }
    if (net_conn_state(c) == NET_CONN_OPEN)
        tls_quiet_next(c, t); /* what on_handshake asked for, or the end of the quiet */
}

/* ---------------------------------------------------------------- the codec */

/* One SSL_do_handshake step after new input. Returns 1 when the handshake finished (and the
 * connection switched), 0 to wait for more bytes, or -errno (the connection is closing). */
static int hs_step(struct net_conn *c, struct tls_conn *t)
{
    struct tls_handshake *hs = t->hs;
    int r = SSL_do_handshake(hs->ssl);
    int rc = hs_flush_out(c, hs); /* also on failure: BoringSSL's alert goes out */
    if (rc < 0) {
        hs_fail(c, t, "output", rc);
        return rc;
    }
    if (r == 1) {
        rc = hs_finish(c, t);
        if (rc < 0) {
            hs_fail(c, t, "key switch", rc);
            return rc;
        }
        return 1;
    }
    int err = SSL_get_error(hs->ssl, r);
    if (err == SSL_ERROR_WANT_READ)
        return 0;
    hs_fail(c, t, err == SSL_ERROR_SSL ? "protocol" : "internal", -EPROTO);
    return -EPROTO;
}

/* Go's net/http (tlsRecordHeaderLooksLikeHTTP): the first five bytes of a plain request. */
static bool looks_like_http(const uint8_t *h)
{
    static const char *const starts[] = {"GET /", "HEAD ", "POST ", "PUT /", "OPTIO"};
    for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++)
        if (memcmp(h, starts[i], TLS_RECORD_HEADER_LEN) == 0)
            return true;
    return false;
}

/* Go's answer to plain HTTP on a TLS port, in clear text; then close once it is out. */
static void reply_plain_http(struct net_conn *c, struct tls_conn *t)
{
    static const char msg[] = "HTTP/1.0 400 Bad Request\r\n\r\n"
                              "Client sent an HTTP request to an HTTPS server.\n";
    t->ts->stats.handshakes_failed++;
    struct hd_frame *f = hd_frame_get(net_conn_shard(c), sizeof(msg) - 1);
    if (f) {
        memcpy(f->data, msg, sizeof(msg) - 1);
        f->len = sizeof(msg) - 1;
        net_conn_wire_queue(c, f, 0, f->len); /* takes the reference, even on failure */
    }
    net_conn_close(c, -EPROTO, true);
}

static ssize_t hs_decode(struct net_conn *c, void *state, uint8_t *in, size_t len)
{
    struct tls_conn *t = state;
    size_t off = 0;
    while (t->hs && !(t->todo & TLS_TODO_SWITCH)) {
        if (len - off < TLS_RECORD_HEADER_LEN)
            return (ssize_t)off;
        if (t->reply_plain_http) { /* only the very first record header is looked at */
            t->reply_plain_http = false;
            if (looks_like_http(in)) {
                reply_plain_http(c, t);
                return (ssize_t)len;
            }
        }
        bool first = !t->hs->input_seen;
        t->hs->input_seen = true;
        if (first && !SSL_is_server(t->hs->ssl) && memcmp(in, "HTTP/", 5) == 0) {
            /* A client's first bytes are a plain HTTP answer (to the ClientHello) */
            hs_fail(c, t,
                    "the peer answered in plain HTTP where TLS was expected (a plain-HTTP "
                    "port dialled with TLS? dial it with http://)",
                    -EPROTOTYPE);
            return (ssize_t)len;
        }
        size_t rec = TLS_RECORD_HEADER_LEN + ((size_t)in[off + 3] << 8 | in[off + 4]);
        if (rec > TLS_RECORD_WIRE_MAX) {
            hs_fail(c, t, "oversized record", -EMSGSIZE);
            return (ssize_t)len;
        }
        if (len - off < rec)
            return (ssize_t)off;
        if (BIO_write(t->hs->rbio, in + off, (int)rec) != (int)rec) {
            hs_fail(c, t, "input", -ENOMEM);
            return (ssize_t)len;
        }
        off += rec;
        int rc = hs_step(c, t);
        if (rc < 0 || net_conn_state(c) != NET_CONN_OPEN)
            return (ssize_t)len;
        if (rc == 1)
            break;
    }
    /* Switched: what follows the handshake's last record is the record layer's; while switching
     * to kTLS it stays unread (kept) until tls_switch_step counted it. */
    if (off == len || t->mode != TLS_MODE_USERSPACE)
        return (ssize_t)off;
    t->ts->stats.early_bytes += len - off;
    ssize_t n = tls_record_codec.decode(c, t, in + off, len - off);
    return n < 0 ? n : (ssize_t)off + n;
}

/* While handshaking nothing is sealed: zero-length kick entries are dropped, the first real
 * plaintext entry is held for the record layer, the rest waits in the connection's queue. */
static int hs_encode(struct net_conn *c, void *state)
{
    struct tls_conn *t = state;
    while (t->pend == NULL) {
        uint32_t off, len;
        struct hd_frame *f = net_conn_plain_take(c, &off, &len);
        if (f == NULL)
            break;
        if (len == 0) {
            hd_frame_unref(net_conn_shard(c), f);
            continue;
        }
        t->pend = f;
        t->pend_off = off;
        t->pend_len = len;
    }
    return 0;
}

static void hs_release(struct net_conn *c, void *state)
{
    (void)c;
    tls_conn_free(state);
}

const struct net_codec tls_handshake_codec = {
    .name = "tls-handshake",
    .decode = hs_decode,
    .encode = hs_encode,
    .release = hs_release,
    .quiesced = tls_quiesced,
};

/* ---------------------------------------------------------------- start */

/* SNI (DNS names only, RFC 6066 §3) and the name the peer certificate must carry. */
static int hs_client_name(SSL *ssl, const char *name)
{
    if (name == NULL)
        return 0;
    struct in6_addr ip;
    bool literal = inet_pton(AF_INET, name, &ip) == 1 || inet_pton(AF_INET6, name, &ip) == 1;
    X509_VERIFY_PARAM *p = SSL_get0_param(ssl);
    if (literal)
        return X509_VERIFY_PARAM_set1_ip_asc(p, name) ? 0 : -EINVAL;
    if (!SSL_set_tlsext_host_name(ssl, name) || !SSL_set1_host(ssl, name))
        return -EINVAL;
    return 0;
}

static int hs_ssl_new(struct tls_handshake *hs, struct tls_ctx *ctx, const char *name)
{
    hs->ssl = SSL_new(ctx->ssl_ctx);
    hs->rbio = BIO_new(BIO_s_mem());
    hs->wbio = BIO_new(BIO_s_mem());
    if (hs->ssl == NULL || hs->rbio == NULL || hs->wbio == NULL) {
        BIO_free(hs->rbio);
        BIO_free(hs->wbio);
        return -ENOMEM;
    }
    SSL_set_bio(hs->ssl, hs->rbio, hs->wbio);
    SSL_set_app_data(hs->ssl, hs);
    if (ctx->server) {
        SSL_set_accept_state(hs->ssl);
        return 0;
    }
    SSL_set_connect_state(hs->ssl);
    return hs_client_name(hs->ssl, name);
}

int tls_conn_start(struct net_conn *c, struct tls_ctx *ctx, const struct tls_conn_options *o)
{
    struct hd_shard *s = net_conn_shard(c);
    struct tls_shard *ts = tls_shard_of(s);
    HD_ASSERT(ts != NULL); /* tls_module is not in this runtime */
    if (ctx->needs_name && (o == NULL || o->server_name == NULL || o->server_name[0] == '\0'))
        return -EINVAL; /* system roots vouch for names: without one, any site would pass */
    if (ts->stats.handshakes_now >= ts->handshakes_max) {
        char peer[64];
        ts->stats.handshakes_refused++;
        hd_log_rl(HD_LOG_WARN, "tls: s%u %s: handshake refused: %u in progress (cap %u)",
                  hd_shard_id(s), net_addr_format(net_conn_peer(c), peer, sizeof(peer)),
                  ts->stats.handshakes_now, ts->handshakes_max);
        return -EBUSY;
    }
    struct tls_conn *t = hd_slab_get(ts->conns);
    struct tls_handshake *hs = t ? hd_slab_get(ts->handshakes) : NULL;
    if (hs == NULL) {
        if (t)
            hd_slab_put(ts->conns, t);
        return -ENOMEM;
    }
    memset(t, 0, sizeof(*t));
    memset(hs, 0, sizeof(*hs));
    ts->stats.handshakes_now++;
    ts->stats.handshakes_started++;
    t->ts = ts;
    t->hs = hs;
    t->server = ctx->server;
    t->idle_timeout_ms = o ? o->idle_timeout_ms : 0;
    t->write_timeout_ms = o ? o->write_timeout_ms : 0;
    t->on_handshake = o ? o->on_handshake : NULL;
    t->ktls_disable = o && o->ktls_disable;
    t->record_per_frame = o && o->record_per_frame;
    t->reply_plain_http = ctx->server && o && o->reply_plain_http;
    hs->t = t;
    hs->c = c;
    hd_timer_init(&hs->timer, hs_timeout_fired);
    int rc = hs_ssl_new(hs, ctx, o ? o->server_name : NULL);
    if (rc < 0) {
        tls_conn_free(t);
        return rc;
    }
    uint32_t ms =
        o && o->handshake_timeout_ms ? o->handshake_timeout_ms : TLS_HANDSHAKE_TIMEOUT_MS_DEFAULT;
    net_conn_set_codec(c, &tls_handshake_codec, t);
    net_conn_set_timeouts(c, ms, t->write_timeout_ms);
    hd_timer_start(s, &hs->timer, ms);
    if (!t->server) { /* the ClientHello */
        int r = SSL_do_handshake(hs->ssl);
        if (r != -1 || SSL_get_error(hs->ssl, r) != SSL_ERROR_WANT_READ ||
            hs_flush_out(c, hs) < 0) {
            net_conn_set_codec(c, NULL, NULL);
            tls_conn_free(t);
            return -ENOMEM;
        }
    }
    return 0;
}
