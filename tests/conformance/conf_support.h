/* conf_support.h - conformance-test support (prefix conf_): a real hderp-server process on
 * loopback port 0, the ports it bound read back (spawned from the build's bin/, stopped by PID
 * with SIGTERM, exit 0 required), ports held for servers that must know them beforehand,
 * plain HTTP requests to it (probe, varz), and a blocking raw DERP client for the test thread
 * that speaks the protocol byte by byte, so negative cases (bad frames, bad ClientInfo, stalled
 * readers) are exact. Every wait here is bounded. Test-thread only; nothing here is shared.
 * conf_server.c: the process, ports, HTTP and varz; conf_raw.c: the raw client, keys, payloads;
 * conf_check.c: checks on a running server (varz, log, a login on a shard); conf_load.c: the
 * load driver, the bystanders of an attack and the criterion fixtures. */
#ifndef CONF_SUPPORT_H
#define CONF_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "derp_proto.h"

/* ---- Limits ---------------------------------------------------------------------------------- */

/* Start-up of an ASan build on a loaded 2-core machine: generous, only a failure waits it out. */
#define CONF_START_TIMEOUT_MS 15000
/* SIGTERM to exit: the server flushes and closes every connection (write timeouts 2 s). */
#define CONF_STOP_TIMEOUT_MS 15000
/* One frame or one HTTP answer from a healthy local server. */
#define CONF_IO_TIMEOUT_MS 5000
/* The raw client's receive buffer: the largest frame a server sends us (RecvPacket of 64 KiB)
 * plus slack for what follows it in one read. */
#define CONF_RAW_BUF_SIZE (256 << 10)
/* Replies from /debug/varz (a few hundred series) and other small pages. */
#define CONF_HTTP_RESP_MAX (256 << 10)
/* TLS mode's -hostname: a DNS name, so the server requires it as SNI (spec §1.2). */
#define CONF_TLS_HOSTNAME "localhost"

_Static_assert(CONF_RAW_BUF_SIZE >= 2 * (DERP_FRAME_HEADER_LEN + DERP_RECV_PACKET_LEN_MAX),
               "a whole RecvPacket plus the next one fit the raw buffer");

/* ---- Time ------------------------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in milliseconds (deadlines of the bounded waits). */
int64_t conf_now_ms(void);
void conf_sleep_ms(int ms);

/* ---- The server process ---------------------------------------------------------------------- */

struct conf_server_opts {
    unsigned shards;           /* 0: 2 */
    const char *mesh_key_hex;  /* NULL: no mesh key */
    const char *keepalive;     /* --keepalive-interval, NULL: server default */
    const char *write_timeout; /* -tcp-write-timeout, NULL: server default */
    const char *const *extra;  /* more argv entries, NULL-terminated, or NULL */
    /* TLS on the main port: a fresh self-signed certificate for CONF_TLS_HOSTNAME (openssl
     * CLI) in the work dir, -certmode manual, and -http-port for plain HTTP (probe, varz). */
    bool tls;
    /* TLS: -hostname and the certificate's name instead of CONF_TLS_HOSTNAME. An IP literal
     * (no SNI required) gets a certificate valid for that IP and for DNS:CONF_TLS_HOSTNAME. */
    const char *tls_hostname;
    /* TLS: SSL_CERT_FILE=<its own certificate> in its environment (a node that dials itself
     * over https, e.g. its own entry in a -mesh-with list). */
    bool trust_own_cert;
    /* Several servers whose ports must be known before any starts (a mesh list): the main port
     * and, in TLS mode, the plain HTTP port, each held with conf_port_hold (0: the kernel picks
     * one, read back into struct conf_server). */
    uint16_t port, http_port;
    /* More environment entries ("NAME=value", NULL-terminated, or NULL); they replace inherited
     * entries of the same name. */
    const char *const *env;
    /* Start with a copy of this key file (a restart keeping its key) instead of a fresh key. */
    const char *key_file;
};

/* Most servers one test runs at a time (their PIDs are killed if the test crashes). */
#define CONF_SERVERS_MAX 8

struct conf_server {
    pid_t pid;
    uint16_t port, stun_port;
    uint16_t http_port;            /* plain HTTP (conf_http): port, or -http-port in TLS mode */
    bool tls;                      /* port speaks TLS: the raw client cannot use it */
    char cert_file[300];           /* TLS: the certificate, also the clients' CA file */
    char dir[256];                 /* work dir: key file, server.log */
    char key_file[300];            /* dir/derper.key */
    struct derp_pubkey key;        /* read back from the key file */
    struct derp_mesh_key mesh_key; /* what opts gave, zero if none */
};

/* Spawns it (on port 0 unless opts names held ports; STUN always on port 0), reads the ports it
 * bound from its --port-file into srv, and waits for /derp/probe to answer 200 (TLS:
 * /generate_204 on the HTTP port). Returns 0 or -errno (-ETIMEDOUT: never listened or answered;
 * -ECHILD: exited early). The log is dumped to stderr on failure. */
int conf_server_start(struct conf_server *srv, const struct conf_server_opts *o);
/* A TCP port on 127.0.0.1 for a server that must be told it before it starts (opts.port: a
 * -mesh-with list naming every node; a relay module in this process): bound with SO_REUSEADDR
 * and never listening, so that no other process is given it (the kernel hands out no bound port
 * for port 0, and a plain bind conflicts), while hderp-server's listeners (SO_REUSEADDR) bind
 * beside it. Held until conf_ports_release (or the test process's exit), so a restarted server
 * gets it back. 0, -ENOSPC (CONF_HOLDS_MAX held) or -errno. */
int conf_port_hold(uint16_t *out);
/* Closes every held port (a suite's fini). */
void conf_ports_release(void);
/* SIGKILL (a crash), reaped; the work dir stays (its key file can restart it: opts.key_file).
 * Returns 0 or -ECHILD (not running). */
int conf_server_kill(struct conf_server *srv);
/* Removes a work dir left by conf_server_kill and its files (once its key file was reused). */
void conf_dir_remove(const char *dir);
/* SIGTERM, wait (bounded), return the exit status (0 = clean) or -ETIMEDOUT (then SIGKILL). A
 * signal death returns 128 + signo. Dumps the log when the status is not 0. */
int conf_server_stop(struct conf_server *srv);
/* conf_server_stop, but the work dir (server.log) stays for the caller to read and remove. */
int conf_server_stop_keep(struct conf_server *srv);
/* Runs argv (a PATH lookup; hderp-server with flags that must refuse to start, or a tool) with
 * stdout and stderr to log (truncated) and waits at most timeout_ms for it to exit. Returns 0
 * with its wait status in *status (may be NULL), -ETIMEDOUT when it was still running (then
 * SIGKILLed and reaped by its PID), or -errno when it could not be spawned. */
int conf_run(const char *const *argv, const char *log, int timeout_ms, int *status);
/* The server's log to stderr (a failing test's context). */
void conf_server_dump_log(const struct conf_server *srv);
/* Is the process still running? */
bool conf_server_alive(const struct conf_server *srv);

/* One HTTP/1.1 exchange on http_port ("Connection: close" is the caller's business): writes req,
 * reads until EOF into resp (NUL-terminated). Returns the bytes read or -errno. */
ssize_t conf_http(const struct conf_server *srv, const char *req, char *resp, size_t size);
/* GET /debug/varz and the value of the series named exactly name (with labels if any, e.g.
 * "derp_packets_dropped{reason=\"queue_head\",kind=\"other\"}"); sum of all series starting
 * with name + "{" when sum_labels. Returns 0 with *out, -ENOENT (no such series), or -errno. */
int conf_varz(const struct conf_server *srv, const char *name, bool sum_labels, int64_t *out);
/* Polls conf_varz until the value equals want (bounded by timeout_ms); returns 0 or the last
 * value's mismatch as -ETIMEDOUT with *last set (last may be NULL). */
int conf_varz_wait(const struct conf_server *srv, const char *name, int64_t want, int timeout_ms,
                   int64_t *last);

/* ---- Checks on a running server (conf_check.c: criterion assertions) ----------------------- */

/* conf_varz's value of name, which must exist (else the test fails). */
int64_t conf_varz_must(const struct conf_server *srv, const char *name);
/* One series (labels included in name); 0 when it does not exist yet. */
int64_t conf_varz_or0(const struct conf_server *srv, const char *name);
/* Waits until name is want (bounded by timeout_ms), else fails the test; what names srv. */
void conf_varz_expect(const struct conf_server *srv, const char *what, const char *name,
                      int64_t want, int timeout_ms);
/* Lines of the server's log (dir/server.log) that contain text. */
unsigned conf_log_count(const struct conf_server *srv, const char *text);
bool conf_log_has(const struct conf_server *srv, const char *text);
/* Polls until a line of the log contains text (logs are written by shards and the main
 * thread): true, or false after timeout_ms. */
bool conf_log_wait(const struct conf_server *srv, const char *text, int timeout_ms);

/* ---- Raw blocking DERP client ---------------------------------------------------------------- */

struct conf_raw {
    int fd;
    struct derp_keypair kp;
    struct derp_pubkey server_key; /* from the ServerKey frame */
    unsigned http_status;
    char head[2048]; /* the upgrade response head, NUL-terminated */
    uint8_t *buf;    /* CONF_RAW_BUF_SIZE */
    size_t off, len; /* unread bytes are buf[off, off + len) */
};

struct conf_frame {
    uint8_t type;
    uint32_t len;
    const uint8_t *p; /* valid until the next read */
};

/* Fresh key pair (or kp), TCP connect (plain servers only). Returns 0 or -errno. */
int conf_raw_open(struct conf_raw *r, const struct conf_server *srv, const struct derp_keypair *kp);
void conf_raw_close(struct conf_raw *r);
/* Hard close (RST): SO_LINGER 0. */
void conf_raw_abort(struct conf_raw *r);
int conf_raw_write(struct conf_raw *r, const void *data, size_t len);
int conf_raw_send_frame(struct conf_raw *r, uint8_t type, const void *payload, size_t len);
/* Writes "GET /derp" with Upgrade: DERP plus extra header lines ("Name: v\r\n"..., or NULL) and
 * reads the response head (status in http_status; bytes after it stay buffered). */
int conf_raw_upgrade(struct conf_raw *r, const char *extra_headers);
/* Reads the next frame within timeout_ms: 0, -ETIMEDOUT, -ESHUTDOWN (EOF), -ECONNRESET, -EMSGSIZE
 * (larger than the buffer). */
int conf_raw_read(struct conf_raw *r, int timeout_ms, struct conf_frame *f);
/* Like conf_raw_read but skips KeepAlive frames. */
int conf_raw_read_nka(struct conf_raw *r, int timeout_ms, struct conf_frame *f);
/* Reads the ServerKey frame (must be first) into server_key. */
int conf_raw_read_server_key(struct conf_raw *r);
/* ClientInfo frame sealing json (NULL: {"version":2,"CanAckPings":false}) to server_key. */
ssize_t conf_raw_client_info(const struct conf_raw *r, const char *json, uint8_t *buf, size_t size);
/* Reads ServerInfo (must be next, KeepAlives not allowed), opens it; version into *version. */
int conf_raw_read_server_info(struct conf_raw *r, int64_t *version);
/* The login up to ClientInfo, not waiting for ServerInfo (a slow admission): open (kp NULL:
 * fresh keys) + upgrade (101 required) + ServerKey + ClientInfo(json) written; *sent_ms (may be
 * NULL) is conf_now_ms() just before that write. r must be closed even when this fails. */
int conf_raw_login_send(struct conf_raw *r, const struct conf_server *srv,
                        const struct derp_keypair *kp, const char *json, int64_t *sent_ms);
/* conf_raw_login_send + ServerInfo. r must be closed (conf_raw_close) even when this fails. */
int conf_raw_login(struct conf_raw *r, const struct conf_server *srv, const struct derp_keypair *kp,
                   const char *json);
/* The whole login (as its steps: upgrade, ServerKey, ClientInfo(json), ServerInfo) from source
 * address src (NULL: the kernel's choice) on a socket whose receive buffer is rcvbuf bytes and
 * MSS mss (0: the defaults; set before connect, so a small window stays small): a stalled
 * receiver, or many clients of one address. Fresh keys. Returns 0 or -errno (socket, bind,
 * connect, a step); r must be closed (conf_raw_close) even when this fails. */
int conf_raw_login_via(struct conf_raw *r, const struct conf_server *srv, const char *src,
                       int rcvbuf, int mss, const char *json);
/* Waits for the server to close: frames are read and discarded. 0 when closed (EOF or RST),
 * -ETIMEDOUT if still open after timeout_ms. */
int conf_raw_wait_closed(struct conf_raw *r, int timeout_ms);
/* No frame but KeepAlives arrives within ms (the connection stays open): 0, or -EEXIST with *f
 * the unexpected frame, or the read error. */
int conf_raw_expect_silence(struct conf_raw *r, int ms, struct conf_frame *f);
/* SendPacket(dst, data). */
int conf_raw_send_packet(struct conf_raw *r, const struct derp_pubkey *dst, const void *data,
                         size_t len);
/* Reads frames (skipping KeepAlives) until a RecvPacket; checks nothing. */
int conf_raw_read_packet(struct conf_raw *r, int timeout_ms, struct derp_pubkey *src,
                         const uint8_t **data, size_t *len);
/* Ping(8 bytes) and wait for the matching Pong (skipping other frames). */
int conf_raw_ping_pong(struct conf_raw *r, uint64_t value, int timeout_ms);

/* The servers' --hash-key: the tables' SipHash key, so a test knows each key's owner shard. */
#define CONF_HASH_KEY_HEX "000102030405060708090a0b0c0d0e0f"
/* Key pairs whose owner shard (the server's srv_owner: the high 32 bits of SipHash-2-4 of the
 * key under CONF_HASH_KEY_HEX, modulo shards) is shard. */
int conf_keypair_on_shard(struct derp_keypair *kp, unsigned shard, unsigned shards);
unsigned conf_key_shard(const struct derp_pubkey *k, unsigned shards);
/* conf_raw_login to srv with a key pair (into kp, or a scratch one when kp is NULL) whose owner
 * is shard of shards; fails the test on an error. Close r after. */
void conf_login_on_shard(struct conf_raw *r, const struct conf_server *srv, struct derp_keypair *kp,
                         unsigned shard, unsigned shards);
/* A disco-looking payload (TS💬 prefix, >= 62 bytes). */
#define CONF_DISCO_LEN 64
void conf_disco_payload(uint8_t out[CONF_DISCO_LEN]);

/* ---- Criterion fixtures (the caller includes <criterion/criterion.h>) ------------------------ */

/* Asserts that expr returns 0, else fails with the expression, the value and its errno text. */
#define CONF_OK(expr)                                                                              \
    do {                                                                                           \
        int rc_ = (int)(expr);                                                                     \
        cr_assert_eq(rc_, 0, "%s: %d (%s)", #expr, rc_, strerror(rc_ < 0 ? -rc_ : 0));             \
    } while (0)

/* A suite's or test's fini: stops srv if it was started, whatever its exit status (a failing
 * test already said why). */
void conf_server_down(struct conf_server *srv);
/* The end of a passing test: asserts hderp-server exits 0 on SIGTERM. */
void conf_server_stop_clean(struct conf_server *srv);

/* ---- 100 clients x 1,000 packets (conf_load.c) ----------------------------------------------- */

#define CONF_LOAD_CLIENTS 100
#define CONF_LOAD_PACKETS 1000 /* per client */
/* Packets each client sends per round; each receiver gets exactly this many per round, well
 * under the relay's per-client queue depth (32). */
#define CONF_LOAD_BATCH 10

struct tls_ctx;

struct conf_load_opts {
    const struct conf_server *srv; /* running, 2 shards; borrowed */
    struct tls_ctx *tls_ctx;       /* NULL: plain TCP; else TLS verified with it (borrowed) */
    const char *host;              /* with tls_ctx: the Host header, its name also the SNI */
    uint64_t deadline_ms;          /* the whole exchange, from each test shard's start */
    bool websocket_half;           /* odd-numbered clients use the WebSocket carrier (§1.5) */
};

/* Runs CONF_LOAD_CLIENTS DERP clients on 2 test shards (tls_module under them for TLS), each
 * sending CONF_LOAD_PACKETS in paced rounds, and asserts (criterion): no timeout, connect, send
 * or early-close errors, every packet exactly once to the right key with the right source,
 * varz derp_packets_sent == total and derp_packets_dropped == 0, and derp_current_connections
 * back to 0; with TLS also one finished handshake per client, none failed, and 101 to every
 * upgrade. Leaves srv running. Test thread only; one run at a time. */
void conf_load_run(const struct conf_load_opts *o);

/* ---- Bystanders of an attack (conf_load.c) ----------------------------------------------------
 */

/* A bystander pair (a sends b a packet) and a ping client, plain logins, that must be served
 * while an attack (a flood, a churn of logins) runs beside them. */
struct conf_bystanders {
    struct conf_raw a, b, p;
};
/* Logs in a, b, then p (asserted). */
void conf_bystanders_login(struct conf_bystanders *by, const struct conf_server *srv);
/* Round i: one packet a -> b must arrive, whole, and p's Ping (data i) must get its Pong
 * (asserted, naming the round). */
void conf_bystanders_check(struct conf_bystanders *by, int i);
/* The attack's loop: step(i, arg) for i in [0, n), and after every round-th step the check of
 * round i / round. The caller checks once more at the end when it wants to. */
void conf_bystanders_every(struct conf_bystanders *by, int n, int round,
                           void (*step)(int i, void *arg), void *arg);
/* Closes p, b, a. */
void conf_bystanders_close(struct conf_bystanders *by);

#endif /* CONF_SUPPORT_H */
