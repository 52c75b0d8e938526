/* derp_client.c - the DERP client's life and its sending side: configuration and URL parsing,
 * the upgrade request (plus ClientInfo in the same write for fast start with a known key),
 * connect, the login timer, close, and the frames a client sends. Receiving is in
 * derp_client_recv.c. Runs on the shard that connected the client; owns the client struct (heap,
 * freed after on_close), its login timer and its connection. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "derp_client_impl.h"

#define DERP_CLIENT_PATH_DEFAULT    "/derp"
#define DERP_CLIENT_UPGRADE_DEFAULT "DERP"

_Static_assert(sizeof(((struct derp_client_url *)0)->host) ==
                   sizeof(((struct net_url *)0)->authority),
               "a URL's authority is the client's Host header");

/* 0 = the default, DERP_CLIENT_TIMEOUT_OFF = none (net's 0). */
static uint32_t timeout_pick(uint32_t v, uint32_t def)
{
    if (v == 0)
        return def;
    return v == DERP_CLIENT_TIMEOUT_OFF ? 0 : v;
}

/* ---- URLs ------------------------------------------------------------------------------------ */

int derp_client_url_parse(const char *url, struct derp_client_url *out)
{
    struct net_url u;
    /* ws:// and wss:// are http:// and https:// with the WebSocket carrier. */
    char http[sizeof(out->host) + sizeof(out->path) + 16];
    bool ws = strncmp(url, "ws://", 5) == 0 || strncmp(url, "wss://", 6) == 0;
    memset(out, 0, sizeof(*out));
    if (ws && snprintf(http, sizeof(http), "http%s", url + 2) >= (int)sizeof(http))
        return -EINVAL;
    if (net_url_parse(ws ? http : url, &u) < 0)
        return -EINVAL;
    int rc = net_url_resolve(&u, false, &out->addr);
    if (rc < 0)
        return rc;
    out->tls = u.tls;
    out->websocket = ws;
    memcpy(out->host, u.authority, sizeof(out->host));
    snprintf(out->path, sizeof(out->path), "%s", u.path[0] ? u.path : DERP_CLIENT_PATH_DEFAULT);
    return 0;
}

const char *derp_client_url_scheme(const struct derp_client_url *url)
{
    if (url->websocket)
        return url->tls ? "wss" : "ws";
    return url->tls ? "https" : "http";
}

void derp_client_config_set_url(struct derp_client_config *cfg, const struct derp_client_url *url)
{
    cfg->addr = url->addr;
    cfg->host = url->host;
    cfg->path = url->path;
    cfg->tls = url->tls;
    cfg->websocket = url->websocket;
}

/* ---- The first write: upgrade request [+ ClientInfo] ----------------------------------------- */

static ssize_t seal_info(struct derp_client *k, uint8_t *buf, size_t size)
{
    return derp_client_info_seal(buf, size, &k->keypair, &k->server_key, &k->info, NULL);
}

/* The WebSocket opening handshake's headers (RFC 6455 section 4.1) with a fresh key. */
static size_t ws_headers(struct derp_client *k, struct net_http_hdr *hdrs)
{
    uint8_t nonce[16];
    randombytes_buf(nonce, sizeof(nonce));
    sodium_bin2base64(k->ws_key, sizeof(k->ws_key), nonce, sizeof(nonce),
                      sodium_base64_VARIANT_ORIGINAL);
    hdrs[0] = (struct net_http_hdr){"Upgrade", NET_HTTP_LIT("websocket")};
    hdrs[1] = (struct net_http_hdr){"Sec-WebSocket-Version", NET_HTTP_LIT("13")};
    hdrs[2] = (struct net_http_hdr){"Sec-WebSocket-Key", {k->ws_key, NET_HTTP_WS_KEY_LEN}};
    hdrs[3] = (struct net_http_hdr){"Sec-WebSocket-Protocol", NET_HTTP_LIT("derp")};
    return 4;
}

static ssize_t write_request(struct derp_client *k, const struct derp_client_config *cfg, char *buf,
                             size_t size)
{
    struct net_http_hdr hdrs[DERP_CLIENT_HEADERS_MAX + 4];
    size_t n = 0;
    char host[DERP_CLIENT_HOST_LEN_MAX + 8];
    const char *path = cfg->path ? cfg->path : DERP_CLIENT_PATH_DEFAULT;

    if (cfg->headers_count > DERP_CLIENT_HEADERS_MAX || (cfg->headers_count && !cfg->headers) ||
        strlen(path) > DERP_CLIENT_PATH_LEN_MAX)
        return -EINVAL;
    if (cfg->host && strlen(cfg->host) > DERP_CLIENT_HOST_LEN_MAX)
        return -EINVAL;
    const char *h = cfg->host ? cfg->host : net_addr_format(&cfg->addr, host, sizeof(host));
    if (k->websocket)
        n = ws_headers(k, hdrs);
    else
        hdrs[n++] = (struct net_http_hdr){
            "Upgrade", net_http_cstr(cfg->upgrade ? cfg->upgrade : DERP_CLIENT_UPGRADE_DEFAULT)};
    if (cfg->fast_start)
        hdrs[n++] = (struct net_http_hdr){"Derp-Fast-Start", NET_HTTP_LIT("1")};
    for (size_t i = 0; i < cfg->headers_count; i++)
        hdrs[n++] = cfg->headers[i];
    struct net_http_req_spec spec = {
        .method = "GET",
        .target = net_http_cstr(path),
        .host = net_http_cstr(h),
        .headers = hdrs,
        .headers_count = n,
        .content_length = -1,
        .connection = NET_HTTP_CONN_UPGRADE,
    };
    int rc = net_http_write_req(buf, size, &spec);
    return rc == -ENOSPC ? -E2BIG : rc;
}

/* Build the request, and for fast start with a known key the ClientInfo right behind it, into
 * one pool frame: one write, and no HTTP response to wait for. */
static int build_hello(struct derp_client *k, const struct derp_client_config *cfg)
{
    uint8_t buf[DERP_CLIENT_REQUEST_SIZE_MAX + DERP_CLIENT_INFO_FRAME_SIZE_MAX];
    ssize_t n = write_request(k, cfg, (char *)buf, DERP_CLIENT_REQUEST_SIZE_MAX);
    if (n < 0)
        return (int)n;
    size_t len = (size_t)n;
    if (k->fast_start && k->has_server_key && !k->manual_login) {
        n = seal_info(k, buf + len, sizeof(buf) - len);
        if (n < 0)
            return (int)n;
        len += (size_t)n;
        k->info_sent = true;
    }
    k->hello = hd_frame_get(k->shard, len);
    if (k->hello == NULL)
        return -ENOMEM;
    memcpy(k->hello->data, buf, len);
    k->hello->len = (uint32_t)len;
    return 0;
}

static int keys_init(struct derp_client *k, const struct derp_client_config *cfg)
{
    if (cfg->keypair)
        k->keypair = *cfg->keypair;
    else if (derp_keypair_generate(&k->keypair) < 0)
        return -EIO;
    k->has_server_key = cfg->has_server_key;
    k->server_key = cfg->server_key;
    k->info.version = DERP_PROTOCOL_VERSION;
    k->info.can_ack_pings = cfg->can_ack_pings;
    k->info.is_prober = cfg->is_prober;
    if (cfg->mesh_key && !derp_mesh_key_is_zero(cfg->mesh_key)) {
        k->info.has_mesh_key = true;
        k->info.mesh_key = *cfg->mesh_key;
    }
    if (cfg->app_name) {
        if (strlen(cfg->app_name) > DERP_APP_NAME_LEN_MAX)
            return -EINVAL;
        strcpy(k->info.app_name, cfg->app_name);
    }
    return 0;
}

/* ---- Connection callbacks -------------------------------------------------------------------- */

static void queue_after_info(struct derp_client *k)
{
    int rc = 0;
    if (k->preferred)
        rc = derp_client_note_preferred(k, true);
    if (rc == 0 && k->watch)
        rc = derp_client_watch_conns(k);
    if (rc < 0)
        derp_client_abort(k, rc);
}

int derp_client_send_info(struct derp_client *k)
{
    uint8_t buf[DERP_CLIENT_INFO_FRAME_SIZE_MAX];
    ssize_t n = seal_info(k, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    int rc = net_conn_send_copy(k->conn, buf, (size_t)n);
    if (rc < 0)
        return rc;
    k->info_sent = true;
    k->state = DERP_CLIENT_LOGIN;
    queue_after_info(k);
    return 0;
}

static void tls_done(struct net_conn *c, const struct tls_conn_info *info)
{
    (void)info;
    struct derp_client *k = net_conn_app(c);
    k->stats.tls_handshake_ns = hd_clock_ns() - k->connected_ns;
}

static void conn_connected(struct net_conn *c, int res)
{
    struct derp_client *k = net_conn_app(c);
    if (res < 0)
        return; /* on_close follows with res */
    k->connected_ns = hd_clock_ns();
    k->stats.connect_ns = k->connected_ns - k->started_ns;
    /* TLS: the codec goes on before anything is queued, so the request goes through it (queued
     * plaintext waits for the handshake). Fast start over TLS learns the server key from the
     * ServerKey frame unless it was configured (the meta certificate is not read). */
    if (k->tls_ctx) {
        struct tls_conn_options to = {.idle_timeout_ms = DERP_CLIENT_TIMEOUT_OFF,
                                      .write_timeout_ms = k->write_timeout_ms,
                                      .server_name = k->tls_name[0] ? k->tls_name : NULL,
                                      .on_handshake = tls_done};
        int trc = tls_conn_start(c, k->tls_ctx, &to);
        if (trc < 0) {
            derp_client_abort(k, trc);
            return;
        }
    }
    int rc = net_conn_send(c, k->hello, 0, k->hello->len);
    hd_frame_unref(k->shard, k->hello);
    k->hello = NULL;
    if (rc < 0) {
        derp_client_abort(k, rc);
        return;
    }
    if (!k->fast_start)
        k->state = DERP_CLIENT_UPGRADING;
    else if (k->info_sent)
        k->state = DERP_CLIENT_LOGIN;
    else
        k->state = DERP_CLIENT_SERVER_KEY;
    if (k->info_sent)
        queue_after_info(k);
}

static void conn_eof(struct net_conn *c)
{
    /* A DERP server never half-closes: its EOF ends the session. */
    net_conn_close(c, -ESHUTDOWN, false);
}

static void conn_pressure(struct net_conn *c, bool paused)
{
    struct derp_client *k = net_conn_app(c);
    if (k->cb->on_send_pressure && k->state != DERP_CLIENT_CLOSING)
        k->cb->on_send_pressure(k, paused);
}

static void client_free(struct derp_client *k)
{
    hd_timer_stop(k->shard, &k->login_timer);
    derp_client_asm_release(k);
    if (k->hello)
        hd_frame_unref(k->shard, k->hello);
    explicit_bzero(k, sizeof(*k)); /* the private key */
    free(k);
}

static void conn_close(struct net_conn *c, int reason)
{
    struct derp_client *k = net_conn_app(c);
    k->conn = NULL;
    k->state = DERP_CLIENT_CLOSING;
    if (k->in_connect)
        return; /* net_conn_connect failed after creating the connection: the caller frees */
    k->cb->on_close(k, reason);
    client_free(k);
}

static const struct net_conn_handler client_handler = {
    .on_data = derp_client_on_data,
    .on_send_pressure = conn_pressure,
    .on_eof = conn_eof,
    .on_connected = conn_connected,
    .on_close = conn_close,
};

static void login_fired(struct hd_timer *t)
{
    struct derp_client *k = hd_container_of(t, struct derp_client, login_timer);
    derp_client_abort(k, -ETIMEDOUT);
}

void derp_client_ready(struct derp_client *k)
{
    k->ready = true;
    k->state = DERP_CLIENT_READY;
    hd_timer_stop(k->shard, &k->login_timer);
    net_conn_set_timeouts(k->conn, k->read_timeout_ms, k->write_timeout_ms);
}

/* ---- Life ------------------------------------------------------------------------------------ */

static int client_setup(struct derp_client *k, const struct derp_client_config *cfg)
{
    k->fast_start = cfg->fast_start;
    k->websocket = cfg->websocket;
    k->manual_login = cfg->manual_login;
    k->can_ack_pings = cfg->can_ack_pings;
    k->watch = cfg->watch;
    k->preferred = cfg->preferred;
    k->read_timeout_ms = timeout_pick(cfg->read_timeout_ms, DERP_CLIENT_READ_TIMEOUT_MS_DEFAULT);
    k->write_timeout_ms = timeout_pick(cfg->write_timeout_ms, DERP_CLIENT_WRITE_TIMEOUT_MS_DEFAULT);
    k->send_max = cfg->send_max_bytes ? cfg->send_max_bytes : NET_SEND_MAX_DEFAULT;
    /* Strict: the first frame must be ServerKey in fast start too (§1.4: a server MUST send
     * it first), so a conformance client notices a server that does not. */
    derp_splitter_init(&k->split, DERP_READER_CLIENT_HELLO);
    net_http_resp_init(&k->resp, false);
    hd_timer_init(&k->login_timer, login_fired);
    int rc = keys_init(k, cfg);
    return rc < 0 ? rc : build_hello(k, cfg);
}

int derp_client_connect(struct hd_shard *s, const struct derp_client_config *cfg,
                        const struct derp_client_callbacks *cb, void *user,
                        struct derp_client **out)
{
    if (cfg == NULL || cb == NULL || cb->on_close == NULL)
        return -EINVAL;
    if (cfg->tls && cfg->tls_ctx == NULL)
        return -EINVAL;
    if (cfg->websocket && cfg->fast_start)
        return -EINVAL; /* §1.5: no fast start on the WebSocket path */
    struct derp_client *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return -ENOMEM;
    if (cfg->tls) {
        k->tls_ctx = cfg->tls_ctx;
        const char *name = cfg->tls_server_name ? cfg->tls_server_name : cfg->host;
        if (name) { /* host[:port] or [v6]:port: the name without its port */
            size_t n = strlen(name);
            const char *colon = strrchr(name, ':');
            if (name[0] == '[') {
                const char *end = strchr(name, ']');
                name++;
                n = end ? (size_t)(end - name) : n - 1;
            } else if (colon && strchr(name, ':') == colon && !cfg->tls_server_name) {
                n = (size_t)(colon - name);
            }
            snprintf(k->tls_name, sizeof(k->tls_name), "%.*s", (int)n, name);
        }
    }
    k->shard = s;
    k->cb = cb;
    k->user = user;
    k->state = DERP_CLIENT_CONNECTING;
    k->started_ns = hd_clock_ns();
    int rc = client_setup(k, cfg);
    if (rc < 0)
        goto fail_free;
    uint32_t login_ms = timeout_pick(cfg->login_timeout_ms, DERP_CLIENT_LOGIN_TIMEOUT_MS_DEFAULT);
    struct net_conn_options opt = {
        .write_timeout_ms = k->write_timeout_ms,
        .send_high_bytes = cfg->send_high_bytes,
        .send_low_bytes = cfg->send_low_bytes,
        .send_max_bytes = cfg->send_max_bytes,
    };
    k->in_connect = true;
    rc = net_conn_connect(s, &cfg->addr, login_ms, &client_handler, k, &opt, &k->conn);
    k->in_connect = false;
    if (rc < 0)
        goto fail_free;
    if (login_ms)
        hd_timer_start(s, &k->login_timer, login_ms);
    *out = k;
    return 0;

fail_free:
    client_free(k);
    return rc;
}

bool derp_client_closing(const struct derp_client *k)
{
    return k->state == DERP_CLIENT_CLOSING || k->conn == NULL;
}

void derp_client_close(struct derp_client *k)
{
    if (derp_client_closing(k))
        return;
    k->state = DERP_CLIENT_CLOSING;
    hd_timer_stop(k->shard, &k->login_timer);
    net_conn_close(k->conn, 0, true);
}

void derp_client_abort(struct derp_client *k, int reason)
{
    if (k->conn == NULL)
        return;
    k->state = DERP_CLIENT_CLOSING;
    hd_timer_stop(k->shard, &k->login_timer);
    net_conn_close(k->conn, reason, false); /* also ends a flush in progress */
}

void derp_client_pause_recv(struct derp_client *k, bool paused)
{
    if (!derp_client_closing(k))
        net_conn_pause_recv(k->conn, paused);
}

/* ---- Sending --------------------------------------------------------------------------------- */

static int send_allowed(const struct derp_client *k)
{
    if (derp_client_closing(k))
        return -EPIPE;
    return k->state == DERP_CLIENT_LOGIN || k->state == DERP_CLIENT_READY ? 0 : -ENOTCONN;
}

/* Packet frames: header + key(s) + data built in one pool frame. */
static int send_packet(struct derp_client *k, const struct derp_pubkey *src,
                       const struct derp_pubkey *dst, const void *data, size_t len)
{
    int rc = send_allowed(k);
    if (rc < 0)
        return rc;
    if (len > DERP_PACKET_LEN_MAX)
        return -EMSGSIZE;
    size_t size = DERP_FRAME_HEADER_LEN + (src ? 2 : 1) * DERP_KEY_LEN + len;
    if (net_conn_queued_bytes(k->conn) + size > k->send_max)
        return -ENOBUFS; /* before copying: net would refuse it */
    struct hd_frame *f = hd_frame_get(k->shard, size);
    if (f == NULL)
        return -ENOMEM;
    ssize_t n =
        src ? derp_frame_forward_packet_encode(f->data, f->size, src->bytes, dst->bytes, data, len)
            : derp_frame_send_packet_encode(f->data, f->size, dst->bytes, data, len);
    HD_ASSERT(n == (ssize_t)size);
    f->len = (uint32_t)n;
    rc = net_conn_send(k->conn, f, 0, f->len);
    hd_frame_unref(k->shard, f);
    if (rc == 0) {
        k->stats.packets_out++;
        k->stats.packet_bytes_out += len;
    }
    return rc;
}

int derp_client_send(struct derp_client *k, const struct derp_pubkey *dst, const void *data,
                     size_t len)
{
    return send_packet(k, NULL, dst, data, len);
}

int derp_client_forward(struct derp_client *k, const struct derp_pubkey *src,
                        const struct derp_pubkey *dst, const void *data, size_t len)
{
    return send_packet(k, src, dst, data, len);
}

int derp_client_send_frame(struct derp_client *k, struct hd_frame *f, uint32_t off, uint32_t len)
{
    int rc = send_allowed(k);
    if (rc < 0)
        return rc;
    uint8_t type = f->data[off];
    uint32_t keys = type == DERP_FRAME_FORWARD_PACKET ? 2 * DERP_KEY_LEN : DERP_KEY_LEN;
    HD_ASSERT(type == DERP_FRAME_SEND_PACKET || type == DERP_FRAME_FORWARD_PACKET);
    HD_ASSERT(len >= DERP_FRAME_HEADER_LEN + keys && off + len <= f->len);
    if (len - DERP_FRAME_HEADER_LEN - keys > DERP_PACKET_LEN_MAX)
        return -EMSGSIZE;
    if (net_conn_queued_bytes(k->conn) + len > k->send_max)
        return -ENOBUFS;
    rc = net_conn_send(k->conn, f, off, len);
    if (rc == 0) {
        k->stats.packets_out++;
        k->stats.packet_bytes_out += len - DERP_FRAME_HEADER_LEN - keys;
    }
    return rc;
}

/* Control frames: encoded on the stack, copied into one small pool frame. */
static int send_small(struct derp_client *k, const uint8_t *frame, ssize_t len)
{
    HD_ASSERT(len > 0);
    int rc = send_allowed(k);
    return rc < 0 ? rc : net_conn_send_copy(k->conn, frame, (size_t)len);
}

int derp_client_ping(struct derp_client *k, const uint8_t data[DERP_PING_LEN])
{
    uint8_t buf[DERP_FRAME_HEADER_LEN + DERP_PING_LEN];
    return send_small(k, buf, derp_frame_ping_encode(buf, sizeof(buf), data));
}

int derp_client_pong(struct derp_client *k, const uint8_t data[DERP_PING_LEN])
{
    uint8_t buf[DERP_FRAME_HEADER_LEN + DERP_PING_LEN];
    return send_small(k, buf, derp_frame_pong_encode(buf, sizeof(buf), data));
}

int derp_client_note_preferred(struct derp_client *k, bool preferred)
{
    uint8_t buf[DERP_FRAME_HEADER_LEN + DERP_NOTE_PREFERRED_LEN];
    return send_small(k, buf, derp_frame_note_preferred_encode(buf, sizeof(buf), preferred));
}

int derp_client_watch_conns(struct derp_client *k)
{
    uint8_t buf[DERP_FRAME_HEADER_LEN + DERP_WATCH_CONNS_LEN];
    return send_small(k, buf, derp_frame_watch_conns_encode(buf, sizeof(buf)));
}

int derp_client_close_peer(struct derp_client *k, const struct derp_pubkey *peer)
{
    uint8_t buf[DERP_FRAME_HEADER_LEN + DERP_CLOSE_PEER_LEN];
    return send_small(k, buf, derp_frame_close_peer_encode(buf, sizeof(buf), peer->bytes));
}

int derp_client_send_raw(struct derp_client *k, const void *data, size_t len)
{
    if (derp_client_closing(k))
        return -EPIPE;
    if (k->state == DERP_CLIENT_CONNECTING)
        return -ENOTCONN; /* the request must go first */
    return net_conn_send_copy(k->conn, data, len);
}

/* ---- Accessors ------------------------------------------------------------------------------- */

enum derp_client_state derp_client_state(const struct derp_client *k)
{
    return k->state;
}

void *derp_client_user(const struct derp_client *k)
{
    return k->user;
}

void derp_client_set_user(struct derp_client *k, void *user)
{
    k->user = user;
}

struct hd_shard *derp_client_shard(const struct derp_client *k)
{
    return k->shard;
}

struct net_conn *derp_client_conn(const struct derp_client *k)
{
    return k->conn;
}

const struct derp_pubkey *derp_client_public_key(const struct derp_client *k)
{
    return &k->keypair.pub;
}

const struct derp_keypair *derp_client_keypair(const struct derp_client *k)
{
    return &k->keypair;
}

const struct derp_pubkey *derp_client_server_key(const struct derp_client *k)
{
    return k->has_server_key ? &k->server_key : NULL;
}

const struct derp_server_info *derp_client_server_info(const struct derp_client *k)
{
    return k->ready ? &k->server_info : NULL;
}

unsigned derp_client_http_status(const struct derp_client *k)
{
    return k->http_status;
}

bool derp_client_upgrade_key(const struct derp_client *k, struct derp_pubkey *out)
{
    if (k->has_upgrade_key)
        *out = k->upgrade_key;
    return k->has_upgrade_key;
}

const struct derp_client_stats *derp_client_stats(const struct derp_client *k)
{
    return &k->stats;
}
