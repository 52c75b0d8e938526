/* derp_client_impl.h - the DERP client's private state, shared by derp_client.c (life, upgrade
 * request, sending) and derp_client_recv.c (receiving). One client belongs to one shard. */
#ifndef DERP_CLIENT_IMPL_H
#define DERP_CLIENT_IMPL_H

#include "derp_client.h"

/* A frame that spans receives, copied into a buffer of its own until it is whole. */
struct derp_client_asm {
    uint8_t *buf;           /* frame->data, or heap memory when frame is NULL; NULL: idle */
    struct hd_frame *frame; /* pool frame holding buf */
    size_t size;            /* whole frame, header included */
    size_t have;            /* bytes copied so far */
};

struct derp_client {
    struct hd_shard *shard;
    struct net_conn *conn; /* NULL once closed */
    const struct derp_client_callbacks *cb;
    void *user;
    enum derp_client_state state;
    bool in_connect; /* inside derp_client_connect: a close there is the caller's */
    bool fast_start;
    bool manual_login;
    bool can_ack_pings;
    bool watch, preferred;             /* frames to queue right after ClientInfo */
    struct tls_ctx *tls_ctx;           /* TLS: the codec goes on at connect */
    uint64_t started_ns, connected_ns; /* derp_client_connect, TCP connected (stats) */
    char tls_name[DERP_CLIENT_HOST_LEN_MAX + 1];
    bool has_server_key;  /* server_key is known (config or ServerKey frame) */
    bool server_key_seen; /* the ServerKey frame arrived */
    bool info_sent;       /* ClientInfo queued */
    bool ready;           /* the first ServerInfo was opened */
    bool has_upgrade_key;
    bool websocket;                       /* §1.5 carrier: ws_key is our handshake key */
    char ws_key[NET_HTTP_WS_KEY_LEN + 1]; /* Sec-WebSocket-Key, base64 of 16 random bytes */
    uint16_t http_status;
    uint32_t read_timeout_ms, write_timeout_ms; /* for net: 0 = off */
    uint32_t send_max;
    struct derp_keypair keypair;
    struct derp_pubkey server_key;
    struct derp_pubkey upgrade_key; /* 101 Derp-Public-Key */
    struct derp_client_info info;   /* what ClientInfo says */
    struct derp_server_info server_info;
    struct derp_splitter split;
    struct derp_client_asm as;
    struct hd_frame *hello; /* request [+ ClientInfo], until on_connected queues it */
    struct hd_timer login_timer;
    struct derp_client_stats stats;
    struct net_http_resp resp; /* the upgrade response while it is parsed */
};

/* derp_client_recv.c: net_conn_handler.on_data; releases the assembly buffer. */
ssize_t derp_client_on_data(struct net_conn *c, const uint8_t *data, size_t len);
void derp_client_asm_release(struct derp_client *k);

/* derp_client.c, for the receive side. */
int derp_client_send_info(struct derp_client *k); /* ClientInfo + watch/preferred frames */
void derp_client_ready(struct derp_client *k);    /* first ServerInfo: read timeout on */
bool derp_client_closing(const struct derp_client *k);

#endif /* DERP_CLIENT_IMPL_H */
