/* tls.h - the TLS layer's public API: server and client contexts (certificate files or a
 * self-signed dev certificate; CA verification or an explicit insecure mode), and TLS on a
 * net_conn: BoringSSL drives the handshake as a net codec over memory BIOs, then the connection
 * switches to kTLS (when the kernel has the tls ULP) or to userspace TLS 1.3 records
 * (tls_record.h), and the SSL object is freed. The app keeps its net_conn handler: it sees only
 * plaintext in on_data, and queues plaintext with net_conn_send as on plain TCP.
 *
 * kTLS: the switch happens at a quiet point (net_conn_quiet_begin) once the handshake's last
 * flight is sent and receiving stopped: bytes that arrived before are whole records opened in
 * userspace (a partial one is completed first), the kernel takes over at the next sequence
 * number, on_handshake then reports the mode. A kTLS socket is read record-typed: close_notify,
 * KeyUpdate and NewSessionTicket arrive as records, never as data.
 *
 * TLS 1.3 only: userspace records and the key extraction are TLS 1.3's (RFC 8446 §7.3); a
 * TLS 1.2 connection could not leave BoringSSL, so 1.2 is refused at the handshake.
 *
 * Threading: contexts are created and destroyed on the main thread (start-up) and are read-only
 * afterwards, shared by every shard. Everything else runs on the connection's shard.
 * Errors: 0 or -errno. */
#ifndef TLS_H
#define TLS_H

#include <stdbool.h>
#include <stdint.h>

#include <hd/net.h>

struct tls_ctx;

/* ---------------------------------------------------------------- limits */

/* A handshake that has not finished after this long is closed with -ETIMEDOUT: a slow or
 * silent client must not hold a BoringSSL object (~10 KiB+) for long. Go's servers default to
 * no handshake deadline, only idle timeouts; 10 s is what nginx's ssl_handshake_timeout style
 * limits use in practice for interactive clients. */
#define TLS_HANDSHAKE_TIMEOUT_MS_DEFAULT 10000u

/* Concurrent handshakes per shard: each holds an SSL object and its buffers (tens of KiB), so
 * this bounds handshake memory per shard to a few tens of MiB under a connection storm. */
#define TLS_HANDSHAKES_MAX_DEFAULT 1024u

/* Longest SNI host name we record (RFC 1035: 253 characters + NUL, rounded). */
#define TLS_SERVER_NAME_MAX 256u

/* Longest ALPN protocol recorded ("http/1.1" is 8). */
#define TLS_ALPN_MAX 16u

_Static_assert(TLS_HANDSHAKES_MAX_DEFAULT <= NET_CONNS_MAX, "no more handshakes than conns");

/* ---------------------------------------------------------------- contexts */

struct tls_server_options {
    /* Manual mode: PEM certificate chain (leaf first) and PEM private key. */
    const char *cert_file;
    const char *key_file;
    /* Dev mode (when cert_file is NULL): a self-signed ECDSA P-256 certificate generated now
     * for this host name or IP literal (SAN dNSName or iPAddress), valid for a year. */
    const char *self_signed_host;
    /* When set, a ClientHello whose SNI is not exactly this name (or has none) fails the
     * handshake with an unrecognized_name alert, logged rate-limited (a relay's manual mode
     * with a DNS host name, as Go's servers do it). Copied. */
    const char *sni_required;
};

/* Creates a server context (TLS 1.3 only, no session tickets, ALPN: http/1.1 if the client
 * offers it, nothing otherwise). Main thread. Returns 0, -EINVAL (no cert and no host, bad
 * host), open(2)'s errno for a file that cannot be read (-ENOENT, -EACCES, ...; -EISDIR),
 * -EBADMSG (PEM does not parse or key does not match), -ENOMEM. */
int tls_server_ctx_create(const struct tls_server_options *o, struct tls_ctx **out);

/* How the client trusts the server: ca_file, system_roots or insecure (ca_file wins over
 * insecure; system_roots goes with neither). */
struct tls_client_options {
    const char *ca_file; /* PEM CA bundle the server's chain must verify against */
    /* Verify against the system's roots, found as Go's crypto/x509 finds them on Linux (what
     * Go programs trust): SSL_CERT_FILE replaces the default bundle file
     * (/etc/ssl/certs/ca-certificates.crt, then the other distributions' paths: the first that
     * reads), SSL_CERT_DIR (colon-separated) replaces the default directories (/etc/ssl/certs,
     * /etc/pki/tls/certs: every file read). Read once, here; finding none is logged and every
     * handshake then fails. Connections on such a context must give a server_name
     * (tls_conn_start: -EINVAL otherwise), which the certificate must match. */
    bool system_roots;
    bool insecure;    /* accept any certificate (tests, dev): must be set explicitly */
    const char *alpn; /* protocol to offer (e.g. "http/1.1"), or NULL for none */
};

/* Creates a client context (TLS 1.3 only). Main thread. Returns 0, -EINVAL (none of ca_file,
 * system_roots, insecure; system_roots with another; ALPN longer than TLS_ALPN_MAX), -ENOENT /
 * -EBADMSG (CA file), -ENOMEM. */
int tls_client_ctx_create(const struct tls_client_options *o, struct tls_ctx **out);

/* Frees the context. Any thread, once no thread will start a connection on it: connections are
 * started on a context (tls_conn_start) but do not use it after that (a handshake's SSL holds
 * its own reference to the SSL_CTX), so it may go while they run (a certificate reload). */
void tls_ctx_destroy(struct tls_ctx *ctx);
/* Append a self-signed Ed25519 certificate to the server's chain, after its own certificates:
 * subject and issuer CN = common_name (any length, as a PrintableString), the given serial
 * number, valid from validity_s before now to validity_s after, exactly one extension
 * (basicConstraints CA:FALSE, critical). For a protocol that hands its clients a value in the
 * handshake (e.g. the server's public key). Main thread, before connections use ctx.
 * Returns 0, -EINVAL, -ENOMEM. */
int tls_server_ctx_add_extra_cert(struct tls_ctx *ctx, const char *common_name, long serial,
                                  long validity_s);

/* A self-signed ECDSA P-256 certificate for host (a DNS name or an IP literal, in the SAN),
 * valid for a year, written as PEM to cert_path (0644) and its key to key_path (0600), each
 * created new (O_EXCL: an existing file is never overwritten). Main thread. Returns 0, -EINVAL
 * (bad host), -ENOMEM, or open/write's errno (-EEXIST, -EACCES, ...). */
int tls_self_signed_write(const char *host, const char *cert_path, const char *key_path);
/* SHA-256 of the first certificate in the PEM file at path, over its DER bytes (what a pin
 * such as "sha256-raw:<hex>" names). Returns 0, open's errno, or -EBADMSG. */
int tls_cert_file_sha256(const char *path, uint8_t out[32]);

/* ---------------------------------------------------------------- connections */

/* How a connection's records are protected after the handshake. */
enum tls_mode {
    TLS_MODE_HANDSHAKE = 0, /* still handshaking */
    TLS_MODE_USERSPACE,     /* records sealed/opened on the shard (tls_record.h) */
    TLS_MODE_KTLS,          /* the kernel's tls ULP does it; no codec left on the conn */
};
const char *tls_mode_name(enum tls_mode mode);

/* What the handshake settled, handed to on_handshake. */
struct tls_conn_info {
    enum tls_mode mode;
    uint16_t version;                      /* 0x0304 */
    uint16_t suite;                        /* enum tls_suite */
    char server_name[TLS_SERVER_NAME_MAX]; /* SNI the client sent (server) or set (client) */
    char alpn[TLS_ALPN_MAX];               /* "" when none was negotiated */
};

/* The handshake finished (info borrowed for the call). The app may send from here. If it fails,
 * the connection closes instead and on_close reports the reason (-EPROTO, -ETIMEDOUT, ...;
 * -EPROTOTYPE on a client whose server answered in plain HTTP: "HTTP/" where the first record
 * header was due, a plain-HTTP port dialled with TLS). */
typedef void tls_handshake_fn(struct net_conn *c, const struct tls_conn_info *info);

struct tls_conn_options {
    uint32_t handshake_timeout_ms; /* 0: TLS_HANDSHAKE_TIMEOUT_MS_DEFAULT */
    /* The connection's timeouts once the handshake is done (net_conn_set_timeouts): the
     * handshake replaces the idle timeout with its deadline meanwhile. */
    uint32_t idle_timeout_ms;
    uint32_t write_timeout_ms;
    /* Client: the name sent as SNI (not for IP literals, RFC 6066 §3) and verified against the
     * certificate (DNS name or IP). Borrowed for the call. Ignored by servers. */
    const char *server_name;
    tls_handshake_fn *on_handshake; /* optional */
    bool ktls_disable;              /* this connection keeps userspace records */
    /* Userspace records: seal each queued frame as its own record instead of coalescing
     * frames into records of up to 16 KiB (benchmarks; costs a header and tag per frame). */
    bool record_per_frame;
    /* Server: a first record header that reads like a plain HTTP request ("GET /", "HEAD ",
     * "POST ", "PUT /", "OPTIO") gets Go's net/http answer, "HTTP/1.0 400 Bad Request ... Client
     * sent an HTTP request to an HTTPS server.", and the connection closes. */
    bool reply_plain_http;
};

/* Starts TLS on an adopted (server ctx) or connecting/connected (client ctx) connection: installs
 * the handshake codec; the client's ClientHello goes out once the connection is open. Call
 * right after net_conn_adopt / net_conn_connect, before any byte arrived. Borrows ctx (it must
 * outlive the connection) and o.
 * Returns 0, or -EBUSY (the shard's handshake cap is reached: logged), -ENOMEM (pools or
 * BoringSSL), -EINVAL (bad server_name, or none on a system_roots context); on error nothing is
 * installed and the caller closes the connection. */
int tls_conn_start(struct net_conn *c, struct tls_ctx *ctx, const struct tls_conn_options *o);

/* Ends a finished connection cleanly: the plaintext queued so far goes out, then close_notify,
 * then the connection closes (on_close reason 0); the peer sees a clean end of stream. What
 * the app queues afterwards is dropped. An app needs no TLS call for this: net_conn_close(c,
 * reason, true) on a TLS connection does the same (with that reason), through the codec's close
 * hook; net_conn_close(c, reason, false) stays an abrupt close (no close_notify). Returns 0 (also
 * when already ending), -ENOTCONN (the handshake has not finished: the connection is closed at
 * once, without close_notify), -EPIPE (closed or closing). */
int tls_conn_close_notify(struct net_conn *c);

/* KeyUpdate (RFC 8446 §4.6.3): rekeys our sending direction, and asks the peer to rekey its own
 * if request_peer. Userspace records: done in place. kTLS: the record goes out after what is
 * queued and the kernel is rekeyed if it can be (tls_ktls_rekey_available); otherwise the
 * connection ends cleanly instead (close_notify, on_close reason -EOPNOTSUPP, a logged reason).
 * Returns 0, -EOPNOTSUPP (kTLS without kernel rekey: closing), -ENOTCONN (handshake not done),
 * -EPIPE (closing), -ENOBUFS (no frame for the record). */
int tls_conn_key_update(struct net_conn *c, bool request_peer);

/* ---------------------------------------------------------------- hand-over */

/* Handing a live TLS connection to another process (a zero-downtime upgrade): the record state
 * leaves as bytes, the socket goes with SCM_RIGHTS. The bytes are versioned and hold no
 * pointers (format: docs/ARCHITECTURE.md, "Saved record state"): the suite, both directions'
 * traffic secrets and next sequence numbers, the flags (server, close_notify received,
 * ktls_disable, record_per_frame) and, in kTLS mode, the kernel's record sequence numbers read
 * back with getsockopt(SOL_TLS, TLS_TX / TLS_RX) and the records still to be opened here.
 * They are key material: keep them off disk and wipe them after use. A checksum makes any
 * corruption a refusal, never a connection with wrong keys.
 *
 * What they do not hold, because net/ owns it and a hand-over of any connection carries it: the
 * raw bytes received but not consumed by the codec (a partially received record: up to 16 KiB,
 * net_conn_kept_peek to read them, net_conn_kept_restore to put them back after the load), the
 * app's unconsumed plaintext and the queued sends (plaintext not sealed yet; records sealed but
 * unsent). Plaintext the codec took from the queue but did not seal exists only inside a flush,
 * never between ticks, so a save never needs it (-EBUSY if it ever did). */
#define TLS_CONN_STATE_MAX 1024u

/* Saves c's record state into buf[0..cap). c's handshake must be complete and c quiet for
 * hand-over: open, not called from inside one of its callbacks (a decode would go on after
 * the save), receiving paused and no recv or send in flight (as net_conn_migrate waits for),
 * no KeyUpdate, kTLS switch or close_notify under way. After a successful save c must neither
 * receive nor send again: close it without flushing (net_conn_close(c, r, false)) once the fd
 * was duplicated or sent; the socket and its kernel TLS state live on in the other reference.
 * Returns the length (<= TLS_CONN_STATE_MAX), -EBUSY (handshake not complete, a KeyUpdate /
 * switch / close in progress, plaintext held unsealed, c not open), -EINVAL (no TLS on c),
 * -ENOSPC (cap too small), kTLS: -errno of getsockopt, -EPROTO (the kernel's keys are not the
 * ones this connection installed). */
ssize_t tls_conn_state_save(struct net_conn *c, uint8_t *buf, size_t cap);

/* In the new process, on a net_conn just adopted from the handed-over fd (the socket keeps its
 * TCP_ULP "tls" and kernel keys across SCM_RIGHTS; in userspace mode nothing is on the
 * socket): checks buf[0..len) whole, then installs the record codec with AEAD contexts re-keyed
 * from the saved secrets at the saved sequence numbers; kTLS: the kernel's TLS_TX / TLS_RX
 * state must be exactly what the saved secrets and sequence numbers give (read back with
 * getsockopt), then the kTLS codec goes in and receiving switches to record-typed reads.
 * Call from the callback that adopted c, before its first recv completes (the raw bytes the old
 * process kept go in after this, net_conn_kept_restore); the tls_module must be on c's shard.
 * Returns 0, or with nothing installed: -EPROTO (malformed or inconsistent bytes: magic,
 * version, suite, lengths, flags, checksum; kTLS state missing or different on the socket),
 * -EBUSY (c not open, or a codec is installed already), -EINVAL (no tls_module on the shard),
 * -ENOMEM (the shard's TLS pool is full). */
int tls_conn_state_load(struct net_conn *c, const uint8_t *buf, size_t len);

/* ---------------------------------------------------------------- per shard */

struct tls_shard_options {
    uint32_t handshakes_max; /* 0: TLS_HANDSHAKES_MAX_DEFAULT */
    bool ktls_disable;       /* always use userspace records (tests, benchmarks) */
};

/* The TLS layer as a module (it requires net_module, placed before it): list tls_module (arg:
 * a struct tls_shard_options *, or NULL) in the runtime's modules before the modules that make
 * TLS connections, or put it in their requires. Per shard: the handshake and connection-state
 * pools and the counters below. */
extern const struct hd_module tls_module;

struct tls_shard_stats {
    uint64_t handshakes_started;
    uint64_t handshakes_done;
    uint64_t handshakes_failed;  /* alerts, bad messages, timeouts, peer closes */
    uint64_t handshakes_refused; /* over handshakes_max */
    uint64_t conns_userspace;    /* handshakes that ended in userspace mode */
    uint64_t conns_ktls;         /* ... in kTLS mode */
    uint64_t key_updates_in;     /* KeyUpdates received */
    uint64_t key_updates_out;    /* KeyUpdates sent (answers and our own rekeys) */
    uint64_t record_errors;      /* records that closed a connection (bad MAC, size, type) */
    uint64_t early_bytes;        /* record bytes that came in one read with the handshake's
                                  * last record (e.g. a first request), or before the kTLS keys
                                  * went in: opened here, not lost */
    uint64_t close_notify_in;    /* close_notify alerts received */
    uint64_t close_notify_out;   /* close_notify alerts sent */
    uint64_t ktls_rekey_closes;  /* kTLS connections ended because the kernel cannot rekey */
    uint64_t ktls_failed;        /* kTLS wanted but the keys did not go in (stayed userspace) */
    uint64_t states_saved;       /* tls_conn_state_save successes (hand-over out) */
    uint64_t states_loaded;      /* tls_conn_state_load successes (hand-over in) */
    uint64_t states_loaded_ktls; /* ... of them in kTLS mode (the kernel's state checked) */
    uint32_t handshakes_now;     /* in progress */
};
const struct tls_shard_stats *tls_shard_stats(struct hd_shard *s);

/* Whether the kernel offers the tls ULP (probed once per process: TCP_ULP "tls" on a fresh
 * socket answers ENOENT when the module is absent). Any thread. */
bool tls_ktls_available(void);

/* Whether the kernel can rekey a kTLS socket in place (TLS 1.3 KeyUpdate; Linux 6.14 and
 * later): probed once per process on a throwaway loopback connection, since kernels before
 * that refuse a second TLS_TX with EBUSY. Any thread. */
bool tls_ktls_rekey_available(void);

/* Bytes of tls state an idle userspace-TLS connection holds (not counting the net_conn). */
size_t tls_conn_state_size(void);

#endif /* TLS_H */
