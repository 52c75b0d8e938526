/* tls_impl.h - the TLS layer's private structures (tls/ only): contexts, the per-shard state,
 * a connection's handshake and record state, and the functions the files share. Everything but
 * struct tls_ctx belongs to one shard and is touched by its thread only. */
#ifndef TLS_IMPL_H
#define TLS_IMPL_H

#include <openssl/ssl.h>

#include <hd/net_codec.h>
#include <hd/tls.h>
#include "tls_keys.h"
#include "tls_record.h"

struct tls_ctx {
    SSL_CTX *ssl_ctx;
    bool server;
    bool needs_name; /* client verifying against system roots: tls_conn_start needs server_name */
};

/* Alive from tls_conn_start until the switch to records (from the shard's capped pool). The
 * SSL's app data points here, for the keylog callback. */
struct tls_handshake {
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl */
    struct tls_conn *t;
    struct net_conn *c;
    struct hd_timer timer; /* the handshake's deadline */
    uint8_t secrets_seen;  /* bit 0: client traffic secret, bit 1: server */
    bool input_seen;       /* a record header came in (a client checks the first: HTTP?) */
    struct tls_keylog_entry client_secret, server_secret;
};

/* What a connection's next quiet point does (tls_conn.todo bits), in this order. */
enum tls_todo {
    TLS_TODO_SWITCH = 1u << 0,     /* install kTLS keys after the handshake */
    TLS_TODO_KEY_UPDATE = 1u << 1, /* kTLS: send a KeyUpdate, then rekey TX */
    TLS_TODO_KU_REQUEST = 1u << 2, /* ... with update_requested */
    TLS_TODO_KU_SENT = 1u << 3,    /* ... the KeyUpdate record is out */
    TLS_TODO_CLOSE = 1u << 4,      /* kTLS: send close_notify, then close */
    TLS_TODO_CLOSE_SENT = 1u << 5, /* ... the close_notify is out */
};

/* A connection's TLS state, the codec's state: from the shard's pool; an idle TLS connection
 * holds exactly this (hs is NULL then). In kTLS mode the record states are kept for their
 * traffic secrets (a kernel rekey derives the next ones) and rx opens the records that arrived
 * before the keys went into the kernel. */
struct tls_conn {
    struct tls_record_state rx, tx;
    struct tls_handshake *hs;
    struct tls_shard *ts;
    struct hd_frame *pend; /* plaintext taken from the conn but not sealed yet */
    uint32_t pend_off, pend_len;
    uint32_t idle_timeout_ms, write_timeout_ms;
    uint32_t ktls_rx_left; /* kTLS: records still opened here (received before the switch) */
    int close_reason;      /* kTLS: on_close's reason once our close_notify is out */
    tls_handshake_fn *on_handshake;
    uint8_t mode; /* enum tls_mode */
    uint8_t todo; /* enum tls_todo bits */
    bool server;
    bool closed_notify;    /* the peer's close_notify arrived */
    bool ktls_disable;     /* tls_conn_options.ktls_disable */
    bool record_per_frame; /* tls_conn_options.record_per_frame */
    bool reply_plain_http; /* tls_conn_options.reply_plain_http, until the first record */
};

struct tls_shard {
    struct hd_shard *shard;
    struct hd_slab *conns, *handshakes;
    uint32_t handshakes_max;
    bool ktls_disable;
    struct tls_shard_stats stats;
};

struct tls_shard *tls_shard_of(struct hd_shard *s);

/* tls_conn.c: the records codecs (after the handshake): userspace records, and kTLS (bytes
 * pass through; control records arrive typed). */
extern const struct net_codec tls_record_codec;
extern const struct net_codec tls_ktls_codec;
/* codec->quiesced of all three codecs: runs the next step of t->todo, or ends the quiet. */
void tls_quiesced(struct net_conn *c, void *state);
/* After a step: another quiet round if t->todo has more, else end the quiet state. */
void tls_quiet_next(struct net_conn *c, struct tls_conn *t);
/* Log a rate-limited "closing" line for c. */
void tls_log_closing(struct net_conn *c, const char *what, int reason);
/* Queue the frame's bytes [0, len) as wire bytes and make sure a send follows this tick, from
 * a decode (net sends wire bytes only when a flush runs). Takes the frame's reference always.
 * Returns 0 or -errno. */
int tls_wire_send(struct net_conn *c, struct hd_frame *f, uint32_t len);
/* Make the connection flush this tick (a zero-length plaintext entry: net requests a flush
 * only when something is queued with net_conn_send). Returns 0 or -errno. */
int tls_kick(struct net_conn *c);
/* Free the connection state (and its handshake, if any). */
void tls_conn_free(struct tls_conn *t);
/* The TLS state of a connection whose handshake is done (record or kTLS codec), or NULL. */
struct tls_conn *tls_conn_of(struct net_conn *c);

/* tls_handshake.c */
extern const struct net_codec tls_handshake_codec;
void tls_handshake_free(struct tls_shard *ts, struct tls_handshake *hs);
/* The quiet point after the handshake: read up to a record boundary, install the kTLS keys (or
 * stay in userspace), finish the handshake (on_handshake). */
void tls_switch_step(struct net_conn *c, struct tls_conn *t);
/* setsockopt(SOL_TLS, dir) with the keys of st's traffic secret at sequence seq. 0 or -errno. */
int tls_ktls_set(int fd, int dir, const struct tls_record_state *st, uint64_t seq);

/* tls_ctx.c */
/* The keylog callback every context installs (the secrets for the record layer). */
void tls_keylog_cb(const SSL *ssl, const char *line);

/* Adds the system's root certificates to st as Go's crypto/x509 finds them on Linux
 * (SSL_CERT_FILE, SSL_CERT_DIR, the distributions' default paths; tls_roots.c), logging what
 * was loaded and why a path could not be read. Main thread. Returns the number of certificates
 * read (0 is logged as a warning: every verification will then fail), or -ENOMEM. */
int tls_roots_load(X509_STORE *st);

#endif /* TLS_IMPL_H */
