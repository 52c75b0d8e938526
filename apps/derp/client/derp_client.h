/* derp_client.h - a DERP client on the framework (prefix derp_client_): TCP connect, the HTTP
 * upgrade (or fast start), the login handshake (ServerKey, ClientInfo, ServerInfo) and the frames
 * a client sends and receives after it (spec §1.3, §1.4, §2, §4, §6). Used by the
 * conformance tests, apps/echo, perf/ and the mesh.
 *
 * Threading: a client lives on the shard that connected it; every function and callback runs
 * there. Memory: derp_client_connect allocates the client (a connection set-up, not the data
 * path); it is freed right after on_close returns. Errors: 0 or -errno, listed per function. */
#ifndef DERP_CLIENT_H
#define DERP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "derp_proto.h"
#include <hd/net.h>
#include <hd/tls.h>
#include <hd/net_http.h>

struct derp_client;

/* ---- Limits ---------------------------------------------------------------------------------- */

/* Connect + upgrade + login must finish within this (derp_client_config.login_timeout_ms 0): the
 * server gives each handshake phase DERP_HANDSHAKE_TIMEOUT_MS, so a server slower than that for
 * the whole login is broken or overloaded. */
#define DERP_CLIENT_LOGIN_TIMEOUT_MS_DEFAULT DERP_HANDSHAKE_TIMEOUT_MS
/* After login: derp_client.go Recv uses a 120 s read timeout (servers keep-alive every 60-65 s). */
#define DERP_CLIENT_READ_TIMEOUT_MS_DEFAULT DERP_CLIENT_READ_TIMEOUT_MS
/* derp_client.go ForwardPacket: 5 s write timeout; we apply it to every write. */
#define DERP_CLIENT_WRITE_TIMEOUT_MS_DEFAULT DERP_FORWARD_WRITE_TIMEOUT_MS
/* A timeout field set to this disables that timeout (0 means "the default"). */
#define DERP_CLIENT_TIMEOUT_OFF UINT32_MAX

/* Host header: a URL's authority (a DNS name, ":" and a 5-digit port). */
#define DERP_CLIENT_HOST_LEN_MAX NET_URL_AUTHORITY_LEN_MAX
/* Request path: what a server's parser accepts as a target. */
#define DERP_CLIENT_PATH_LEN_MAX NET_HTTP_TARGET_LEN_MAX
/* Extra request headers (tests, Ideal-Node, User-Agent): a handful is all anyone sends. */
#define DERP_CLIENT_HEADERS_MAX 16
/* The upgrade request: a server refuses a head larger than NET_HTTP_HEAD_SIZE_MAX. */
#define DERP_CLIENT_REQUEST_SIZE_MAX NET_HTTP_HEAD_SIZE_MAX
/* Our ClientInfo frame: header, client key, nonce, tag and the largest JSON we write. */
#define DERP_CLIENT_INFO_FRAME_SIZE_MAX                                                            \
    (DERP_FRAME_HEADER_LEN + DERP_KEY_LEN + DERP_SEALED_OVERHEAD + DERP_CLIENT_INFO_JSON_MAX)
/* A frame that spans receives is copied once into a buffer of its own: from the shard's frame
 * pool up to this size (the largest default frame class, which holds every RecvPacket a server
 * may send), from the heap above it (only ServerInfo/Health/odd frames up to 1 MiB, which no
 * reference server sends). */
#define DERP_CLIENT_POOL_FRAME_SIZE_MAX NET_RX_TAIL_MAX

_Static_assert(DERP_FRAME_HEADER_LEN + DERP_RECV_PACKET_LEN_MAX <= DERP_CLIENT_POOL_FRAME_SIZE_MAX,
               "every legal RecvPacket is assembled in a pool frame, never on the heap");
_Static_assert(NET_HTTP_HEAD_SIZE_MAX + NET_BUF_SIZE <= NET_RX_TAIL_MAX,
               "an incomplete 101 head plus one more receive fits the connection's tail");
_Static_assert(DERP_CLIENT_REQUEST_SIZE_MAX + DERP_CLIENT_INFO_FRAME_SIZE_MAX <= NET_RX_TAIL_MAX,
               "request + ClientInfo (fast start) fit one frame of the largest default class");
_Static_assert(DERP_CLIENT_HEADERS_MAX + 6 <= NET_HTTP_HEADERS_MAX,
               "a server parses them all (+ Host, Connection and 4 WebSocket headers)");

/* ---- Configuration --------------------------------------------------------------------------- */

/* Read by derp_client_connect only: every pointer is borrowed for that call (copied). */
struct derp_client_config {
    struct net_addr addr; /* where to connect: numeric (no name lookups on a shard) */
    const char *host;     /* Host header; NULL: addr as text ("127.0.0.1:3340", "[::1]:443") */
    const char *path;     /* request target; NULL: "/derp" */
    const char *upgrade;  /* Upgrade value; NULL: "DERP" (tests: "websocket", legacy clients) */
    /* The WebSocket carrier (§1.5): an RFC 6455 upgrade with subprotocol derp, then the DERP
     * stream in masked binary messages (net_ws.h), over TCP or TLS; not with fast_start;
     * upgrade is ignored. A 101 without the right Sec-WebSocket-Accept or without
     * "Sec-WebSocket-Protocol: derp" fails with -ENOPROTOOPT. */
    bool websocket;
    const struct net_http_hdr *headers; /* extra request headers, written after ours */
    size_t headers_count;               /* <= DERP_CLIENT_HEADERS_MAX */
    bool tls;                           /* https: needs tls_ctx, and tls_module in the runtime */
    struct tls_ctx *tls_ctx;     /* tls_client_ctx_create (CA file or insecure); borrowed, must
                                  * outlive the client */
    const char *tls_server_name; /* SNI and the name verified; NULL: host without its port */
    /* Fast start (§1.4): "Derp-Fast-Start: 1", no HTTP response expected. With server_key
     * given, ClientInfo goes in the same write as the request; without it (plain TCP has no meta
     * cert to learn it from) ClientInfo is sent once the ServerKey frame arrived. */
    bool fast_start;
    bool has_server_key;
    struct derp_pubkey server_key;        /* expected key: a different ServerKey closes */
    const struct derp_keypair *keypair;   /* NULL: a fresh random key pair */
    const struct derp_mesh_key *mesh_key; /* NULL or all zero: none */
    const char *app_name;                 /* ClientInfo AppName; <= DERP_APP_NAME_LEN_MAX bytes */
    bool can_ack_pings;                   /* ClientInfo CanAckPings; answer server Pings */
    bool is_prober;                       /* ClientInfo IsProber */
    bool watch;                           /* send WatchConns right after ClientInfo (mesh) */
    bool preferred;                       /* send NotePreferred(true) right after ClientInfo */
    /* Tests: send no ClientInfo; after ServerKey the caller logs in with derp_client_send_raw
     * (derp_client_keypair gives the key to seal with) and may intercept ServerInfo in on_frame. */
    bool manual_login;
    uint32_t login_timeout_ms; /* connect until ServerInfo; 0: default, TIMEOUT_OFF: none */
    uint32_t read_timeout_ms;  /* after login, nothing received; 0: default, TIMEOUT_OFF: none */
    uint32_t write_timeout_ms; /* a send makes no progress; 0: default, TIMEOUT_OFF: none */
    uint32_t send_high_bytes;  /* send queue watermarks and cap (net_conn_options); 0: net's */
    uint32_t send_low_bytes;
    uint32_t send_max_bytes; /* over it the send functions return -ENOBUFS */
};

/* A parsed "http://1.2.3.4:3340/derp" or "https://derp.example.com/derp", with storage for the
 * strings. */
struct derp_client_url {
    struct net_addr addr;
    bool tls;                                /* https or wss */
    bool websocket;                          /* ws or wss: the WebSocket carrier (§1.5) */
    char host[DERP_CLIENT_HOST_LEN_MAX + 1]; /* authority as written (the Host header) */
    char path[DERP_CLIENT_PATH_LEN_MAX + 1]; /* "/derp" when the URL has no path */
};
/* http[s]://host[:port][/path] (net_url_parse), or ws[s]:// for the same over WebSocket: host
 * an IPv4 address, [IPv6] or a DNS name (resolved here with getaddrinfo, which blocks: call it
 * at start-up, never on a shard); port 80/443 by default; path "/derp" when the URL has none.
 * The TLS server name is the host. Returns 0, -EINVAL (syntax, too long) or -ENOENT (the name
 * did not resolve). */
int derp_client_url_parse(const char *url, struct derp_client_url *out);
/* "http", "https", "ws" or "wss": the URL's scheme as it was written. */
const char *derp_client_url_scheme(const struct derp_client_url *url);
/* Points cfg's addr/host/path/tls/websocket at url (which must outlive the connect call). */
void derp_client_config_set_url(struct derp_client_config *cfg, const struct derp_client_url *url);

/* ---- Callbacks ------------------------------------------------------------------------------- */

/* All optional except on_close. They run on the client's shard; borrowed data is valid for the
 * call. A callback may call any function here, including derp_client_close (no callback but
 * on_close follows). */
struct derp_client_callbacks {
    /* Normal mode: the upgrade response head (any status), before the client acts on it. */
    void (*on_http_response)(struct derp_client *k, const struct net_http_resp *resp);
    /* The ServerKey frame arrived. ClientInfo (unless manual_login) is already queued, so the
     * send functions work from here ("early frames", §13.4). */
    void (*on_server_key)(struct derp_client *k, const struct derp_pubkey *server_key);
    /* Every whole frame, before the client handles it; return true to take it over (the client
     * then ignores it: taking ServerKey or ServerInfo means doing that part of the login
     * yourself). Skipped frames (unknown types, short known ones) are not seen. */
    bool (*on_frame)(struct derp_client *k, uint8_t type, const uint8_t *payload, size_t len);
    /* The first ServerInfo opened: logged in (later ServerInfos only update the info). */
    void (*on_ready)(struct derp_client *k, const struct derp_server_info *info);
    void (*on_packet)(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                      size_t len);
    void (*on_peer_gone)(struct derp_client *k, const struct derp_pubkey *peer, uint8_t reason);
    /* p->key is the peer; addr and flags are valid when p->has_addr / p->has_flags. */
    void (*on_peer_present)(struct derp_client *k, const struct derp_peer_present *p);
    /* A server Ping; the Pong is already queued when can_ack_pings. */
    void (*on_ping)(struct derp_client *k, const uint8_t data[DERP_PING_LEN]);
    void (*on_pong)(struct derp_client *k, const uint8_t data[DERP_PING_LEN]);
    void (*on_keepalive)(struct derp_client *k);
    void (*on_health)(struct derp_client *k, const char *text, size_t len); /* "" = healthy */
    void (*on_restarting)(struct derp_client *k, uint32_t reconnect_in_ms, uint32_t try_for_ms);
    /* The send queue crossed its high watermark (paused) or fell under the low one. */
    void (*on_send_pressure)(struct derp_client *k, bool paused);
    /* Last call: the client is freed when it returns. reason: 0 after derp_client_close, or
     *   -ECONNREFUSED TCP connect refused      -ENOPROTOOPT  the upgrade answer was not 101
     *   -ETIMEDOUT    connect/login/read/write  -ESHUTDOWN    the server closed (orderly EOF)
     *   -ECONNRESET   reset by the server       -EPROTO       bad HTTP head, bad frame or magic,
     *                 short ServerInfo, bad ServerInfo JSON
     *   -EMSGSIZE     frame > 1 MiB (ServerKey > 1 KiB)   -EBADMSG  ServerInfo box did not open
     *   -EKEYREJECTED ServerKey is not config.server_key  -ENOBUFS/-ENOMEM  pools exhausted
     *   or another socket error. */
    void (*on_close)(struct derp_client *k, int reason);
};

enum derp_client_state {
    DERP_CLIENT_CONNECTING, /* TCP connect in progress */
    DERP_CLIENT_UPGRADING,  /* request sent, waiting for the 101 (normal mode) */
    DERP_CLIENT_SERVER_KEY, /* waiting for the ServerKey frame before sending ClientInfo */
    DERP_CLIENT_LOGIN,      /* ClientInfo sent (or manual login), waiting for ServerInfo */
    DERP_CLIENT_READY,      /* ServerInfo received */
    DERP_CLIENT_CLOSING,    /* closing: on_close follows */
};

struct derp_client_stats {
    uint64_t frames_in;        /* whole frames handled (skipped ones not counted) */
    uint64_t frames_skipped;   /* unknown types (and ServerKey after login), discarded */
    uint64_t frames_dropped;   /* known types too short to use ("dropping short" in Go) */
    uint64_t frames_early;     /* frames other than ServerKey/ServerInfo before ServerInfo: a
                                * server bug (§4: nothing between ServerKey and ServerInfo) */
    uint64_t frames_assembled; /* frames that spanned receives (copied once) */
    uint64_t frames_heap;      /* of those, larger than DERP_CLIENT_POOL_FRAME_SIZE_MAX */
    uint64_t server_infos;
    uint64_t packets_in, packet_bytes_in;   /* RecvPacket, payload bytes */
    uint64_t packets_out, packet_bytes_out; /* SendPacket + ForwardPacket queued */
    uint64_t pongs_sent;                    /* automatic answers to server Pings */
    /* The DERP stream so far (bytes after the 101 head that frames were split from), the last
     * frame handled, and the header that closed the connection when the length policy refused
     * it (on_close -EMSGSIZE / -EPROTO / -EPERM): its type, its length and the stream offset it
     * started at. A length far over DERP_CLIENT_RECV_FRAME_LEN_MAX (1 MiB) from a server whose
     * frames are all smaller means its byte stream lost its frame boundaries. */
    uint64_t stream_bytes;
    uint8_t last_type;
    uint32_t last_len;
    bool refused;
    uint8_t refused_type;
    uint32_t refused_len;
    uint64_t refused_at;
    /* Set-up times, ns from derp_client_connect: the TCP connect, and the TLS handshake on top
     * of it (0 while not done, and for plain connections). */
    uint64_t connect_ns, tls_handshake_ns;
};

/* ---- Life ------------------------------------------------------------------------------------ */

/* Connect on shard s and log in; callbacks report progress (cb is borrowed for the client's
 * life: keep it static). user is the caller's (derp_client_user). On success *out is the client
 * and on_close will run exactly once. Returns 0, or (nothing created, no callback runs):
 *   -EINVAL (missing on_close, bad host/path/header/app name, too many headers, websocket with
 *   fast_start), -E2BIG (request
 *   larger than DERP_CLIENT_REQUEST_SIZE_MAX; tls without tls_ctx), -ENOMEM, -EIO (crypto), or
 *   net_conn_connect's error. */
int derp_client_connect(struct hd_shard *s, const struct derp_client_config *cfg,
                        const struct derp_client_callbacks *cb, void *user,
                        struct derp_client **out);
/* Close after what is queued was sent (bounded by the write timeout); on_close(0) follows
 * (or the error that ended the flush). Idempotent. */
void derp_client_close(struct derp_client *k);
/* Close at once with reason (< 0, or 0) passed to on_close, dropping queued sends. */
void derp_client_abort(struct derp_client *k, int reason);
/* Stop or resume reading (a test's "stalled receiver", or the caller's backpressure). */
void derp_client_pause_recv(struct derp_client *k, bool paused);

/* ---- Sending ----------------------------------------------------------------------------------
 * Allowed from ClientInfo on (state LOGIN or READY; raw bytes from UPGRADING on). Each frame is
 * copied into a pool frame and queued; frames queued in one tick leave in one sendmsg. Errors:
 * -ENOTCONN before that, -EPIPE closing, -ENOBUFS the send queue is over send_max_bytes (pace
 * and retry after on_send_pressure(false)), -ENOMEM frame or queue pool exhausted, -EMSGSIZE
 * packet > DERP_PACKET_LEN_MAX. Keys are borrowed. */
int derp_client_send(struct derp_client *k, const struct derp_pubkey *dst, const void *data,
                     size_t len);
/* Mesh: ForwardPacket(src, dst, data). */
int derp_client_forward(struct derp_client *k, const struct derp_pubkey *src,
                        const struct derp_pubkey *dst, const void *data, size_t len);
/* A SendPacket or ForwardPacket frame the caller encoded at f->data + off (len bytes, e.g. a
 * *_prefix_encode in front of a packet already in the frame): queued without a copy, taking
 * one reference of f on success (the caller keeps its own). */
int derp_client_send_frame(struct derp_client *k, struct hd_frame *f, uint32_t off, uint32_t len);
int derp_client_ping(struct derp_client *k, const uint8_t data[DERP_PING_LEN]);
int derp_client_pong(struct derp_client *k, const uint8_t data[DERP_PING_LEN]);
int derp_client_note_preferred(struct derp_client *k, bool preferred);
int derp_client_watch_conns(struct derp_client *k);                                /* mesh */
int derp_client_close_peer(struct derp_client *k, const struct derp_pubkey *peer); /* mesh */
/* Tests: arbitrary bytes after everything queued so far (a failure part way, -ENOBUFS or
 * -ENOMEM, may leave a prefix queued). Allowed once connected. */
int derp_client_send_raw(struct derp_client *k, const void *data, size_t len);

/* ---- Accessors ------------------------------------------------------------------------------- */

enum derp_client_state derp_client_state(const struct derp_client *k);
void *derp_client_user(const struct derp_client *k);
void derp_client_set_user(struct derp_client *k, void *user);
struct hd_shard *derp_client_shard(const struct derp_client *k);
/* The connection (stats, queued bytes); NULL once closed. */
struct net_conn *derp_client_conn(const struct derp_client *k);
const struct derp_pubkey *derp_client_public_key(const struct derp_client *k);
/* Secret included: for tests that seal their own ClientInfo (manual_login). */
const struct derp_keypair *derp_client_keypair(const struct derp_client *k);
/* From config or the ServerKey frame; NULL while unknown. */
const struct derp_pubkey *derp_client_server_key(const struct derp_client *k);
/* The last ServerInfo; NULL before the first. */
const struct derp_server_info *derp_client_server_info(const struct derp_client *k);
/* Status of the upgrade response (0: none yet, or fast start). */
unsigned derp_client_http_status(const struct derp_client *k);
/* The 101's Derp-Public-Key header as a key; false when absent or not 64 hex digits. */
bool derp_client_upgrade_key(const struct derp_client *k, struct derp_pubkey *out);
const struct derp_client_stats *derp_client_stats(const struct derp_client *k);

#endif /* DERP_CLIENT_H */
