/* tls_state.c - a finished TLS connection's record state as bytes, for a hand-over to another
 * process (tls_conn_state_save / _load, <hd/tls.h>): the suite, both traffic secrets and
 * sequence numbers, the flags, and in kTLS mode the kernel's record sequence numbers, read back
 * with getsockopt(SOL_TLS) and checked again on the other side. Runs on the connection's shard;
 * owns nothing beyond the stack (secrets on it are wiped), and the pooled struct tls_conn that
 * a load installs as the codec's state. docs/ARCHITECTURE.md ("Saved record state").
 *
 * The format: at most TLS_CONN_STATE_MAX (1024) bytes; version 1, integers big-endian, 120
 * bytes for the SHA-256 suites and 152 for AES-256-GCM-SHA384.
 *   offset  bytes  field
 *   0       4      magic "HDTS"
 *   4       1      version (1)
 *   5       1      mode: 1 userspace records, 2 kTLS
 *   6       1      flags: 1 server, 2 close_notify received, 4 ktls_disable, 8 record_per_frame
 *   7       1      secret length L (Hash.length of the suite: 32 or 48)
 *   8       2      suite (0x1301, 0x1302, 0x1303)
 *   10      2      reserved, 0
 *   12      4      kTLS: records received before the switch still to be opened here
 *   16      8      next receive sequence number of the userspace record state
 *   24      8      next send sequence number of the userspace record state
 *   32      8      kTLS: the kernel's RX record sequence number (getsockopt TLS_RX), else 0
 *   40      8      kTLS: the kernel's TX record sequence number (getsockopt TLS_TX), else 0
 *   48      L      receive traffic secret (current: after any KeyUpdates)
 *   48+L    L      send traffic secret
 *   48+2L   8      the first 8 bytes of SHA-256 over everything before
 * Secrets, not keys: the key and IV follow from them (RFC 8446 §7.3) and so do the next ones
 * (KeyUpdate). A load checks everything before it installs anything (magic, version, suite and
 * L, the exact length, reserved bits and unknown flags, no sequence number at 2^64 - 1, the
 * check bytes; -EPROTO otherwise), then re-keys both EVP_AEAD_CTX from the secrets. In kTLS mode
 * the keys stay in the kernel with the socket: save reads TLS_TX / TLS_RX back and compares them
 * with what the secrets give (a different key is -EPROTO), load reads them again and wants the
 * same keys at the same sequence numbers, then installs the kTLS codec and a quiet round turns
 * receiving into record-typed reads. A save needs the handshake done, no KeyUpdate, switch or
 * close under way and no plaintext held unsealed (-EBUSY); the caller has stopped the
 * connection's reads and sends first, and closes it without flushing after. The raw bytes net
 * holds unconsumed (a partially received record), the app's tail and the send queues are not in
 * the state: the hand-over carries them as net's, and net_conn_kept_restore puts the raw ones in
 * front of the new connection's input once the state is loaded, so the partial record completes
 * there. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/digest.h>
#include <openssl/mem.h>
#include <openssl/sha.h>

#include "tls_impl.h"

#ifndef SOL_TLS
#define SOL_TLS 282 /* include/linux/socket.h */
#endif

/* Layout (integers big-endian): magic "HDTS", version, mode, flags, secret length, suite (2),
 * reserved (2, zero), kTLS records still opened here (4), rx seq, tx seq, kernel rx seq,
 * kernel tx seq (8 each), then the rx and tx secrets, then the first bytes of SHA-256 over all
 * of it. Version 1 is the first; a change of layout or meaning gets a new one. */
#define TLS_STATE_MAGIC      "HDTS"
#define TLS_STATE_VERSION    1u
#define TLS_STATE_HEADER_LEN 48u
/* 64 bits of SHA-256: corruption (a flipped bit in a secret) must not install wrong keys; the
 * bytes travel between two processes of ours, so this is a check, not authentication. */
#define TLS_STATE_CHECK_LEN       8u
#define TLS_STATE_LEN(secret_len) (TLS_STATE_HEADER_LEN + 2u * (secret_len) + TLS_STATE_CHECK_LEN)

enum tls_state_flag {
    TLS_STATE_F_SERVER = 1u << 0,
    TLS_STATE_F_CLOSED_NOTIFY = 1u << 1,
    TLS_STATE_F_KTLS_DISABLE = 1u << 2,
    TLS_STATE_F_RECORD_PER_FRAME = 1u << 3,
    TLS_STATE_F_ALL = (1u << 4) - 1,
};

_Static_assert(TLS_STATE_LEN(TLS_SECRET_LEN_MAX) <= TLS_CONN_STATE_MAX, "the state fits");
_Static_assert(TLS_STATE_CHECK_LEN <= SHA256_DIGEST_LENGTH, "the check is a digest prefix");

/* The state as parsed (or to be written). */
struct tls_state {
    uint8_t mode, flags, secret_len;
    uint16_t suite;
    uint32_t ktls_rx_left;
    uint64_t rx_seq, tx_seq, kernel_rx_seq, kernel_tx_seq;
    uint8_t rx_secret[TLS_SECRET_LEN_MAX], tx_secret[TLS_SECRET_LEN_MAX];
};

static void put_be(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = n; i-- > 0; v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static void state_check(const uint8_t *p, size_t len, uint8_t out[TLS_STATE_CHECK_LEN])
{
    uint8_t d[SHA256_DIGEST_LENGTH];
    SHA256(p, len, d);
    memcpy(out, d, TLS_STATE_CHECK_LEN);
}

/* Writes st to out (TLS_STATE_LEN(st->secret_len) bytes). */
static size_t state_write(const struct tls_state *st, uint8_t *out)
{
    memcpy(out, TLS_STATE_MAGIC, 4);
    out[4] = TLS_STATE_VERSION;
    out[5] = st->mode;
    out[6] = st->flags;
    out[7] = st->secret_len;
    put_be(out + 8, st->suite, 2);
    put_be(out + 10, 0, 2);
    put_be(out + 12, st->ktls_rx_left, 4);
    put_be(out + 16, st->rx_seq, 8);
    put_be(out + 24, st->tx_seq, 8);
    put_be(out + 32, st->kernel_rx_seq, 8);
    put_be(out + 40, st->kernel_tx_seq, 8);
    memcpy(out + TLS_STATE_HEADER_LEN, st->rx_secret, st->secret_len);
    memcpy(out + TLS_STATE_HEADER_LEN + st->secret_len, st->tx_secret, st->secret_len);
    size_t n = TLS_STATE_HEADER_LEN + 2u * st->secret_len;
    state_check(out, n, out + n);
    return n + TLS_STATE_CHECK_LEN;
}

/* The fields' own consistency (lengths and checksum are checked by state_parse). */
static bool state_fields_ok(const struct tls_state *st)
{
    if (st->mode != TLS_MODE_USERSPACE && st->mode != TLS_MODE_KTLS)
        return false;
    if ((st->flags & ~TLS_STATE_F_ALL) != 0)
        return false;
    /* Sequence number 2^64 - 1 is never used (tls_record.c): a state at it cannot continue. */
    if (st->rx_seq == UINT64_MAX || st->tx_seq == UINT64_MAX)
        return false;
    if (st->mode == TLS_MODE_USERSPACE)
        return st->ktls_rx_left == 0 && st->kernel_rx_seq == 0 && st->kernel_tx_seq == 0;
    return st->kernel_rx_seq != UINT64_MAX && st->kernel_tx_seq != UINT64_MAX;
}

/* Parses and checks buf[0..len) whole. Returns 0 or -EPROTO. */
static int state_parse(const uint8_t *buf, size_t len, struct tls_state *st)
{
    memset(st, 0, sizeof(*st));
    if (len < TLS_STATE_HEADER_LEN + TLS_STATE_CHECK_LEN || memcmp(buf, TLS_STATE_MAGIC, 4) != 0 ||
        buf[4] != TLS_STATE_VERSION)
        return -EPROTO;
    st->suite = (uint16_t)get_be(buf + 8, 2);
    const EVP_MD *md = tls_suite_md(st->suite);
    if (md == NULL || (size_t)buf[7] != EVP_MD_size(md) || len != TLS_STATE_LEN(buf[7]) ||
        get_be(buf + 10, 2) != 0)
        return -EPROTO;
    size_t n = len - TLS_STATE_CHECK_LEN;
    uint8_t check[TLS_STATE_CHECK_LEN];
    state_check(buf, n, check);
    if (CRYPTO_memcmp(check, buf + n, TLS_STATE_CHECK_LEN) != 0)
        return -EPROTO;
    st->mode = buf[5];
    st->flags = buf[6];
    st->secret_len = buf[7];
    st->ktls_rx_left = (uint32_t)get_be(buf + 12, 4);
    st->rx_seq = get_be(buf + 16, 8);
    st->tx_seq = get_be(buf + 24, 8);
    st->kernel_rx_seq = get_be(buf + 32, 8);
    st->kernel_tx_seq = get_be(buf + 40, 8);
    memcpy(st->rx_secret, buf + TLS_STATE_HEADER_LEN, st->secret_len);
    memcpy(st->tx_secret, buf + TLS_STATE_HEADER_LEN + st->secret_len, st->secret_len);
    if (!state_fields_ok(st)) {
        OPENSSL_cleanse(st, sizeof(*st));
        return -EPROTO;
    }
    return 0;
}

/* ---------------------------------------------------------------- kTLS read-back */

/* The record sequence number in a kernel crypto_info of this suite. */
static uint64_t ktls_info_seq(const union tls_ktls_info *info, uint16_t suite)
{
    switch (suite) {
    case TLS_SUITE_AES_128_GCM_SHA256:
        return get_be(info->aes_gcm_128.rec_seq, 8);
    case TLS_SUITE_AES_256_GCM_SHA384:
        return get_be(info->aes_gcm_256.rec_seq, 8);
    default:
        return get_be(info->chacha20_poly1305.rec_seq, 8);
    }
}

/* Reads the kernel's state of direction dir (TLS_TX / TLS_RX) and checks it is the one the
 * traffic secret gives: same version, cipher, key, salt and IV. *seq gets its record sequence
 * number. The kernel answers only an optlen of the cipher's exact size. Returns 0, -errno of
 * getsockopt (ENOPROTOOPT: no tls ULP; EBUSY: no keys that way), -EPROTO (different keys). */
static int ktls_read_back(int fd, int dir, const uint8_t *secret, uint8_t secret_len,
                          uint16_t suite, uint64_t *seq)
{
    struct tls_traffic_keys k;
    union tls_ktls_info want, got;
    int rc = tls_traffic_keys_init(&k, suite, secret, secret_len);
    int len = rc < 0 ? rc : tls_ktls_info_fill(&want, &k, 0); /* the size, for the optlen */
    memset(&got, 0, sizeof(got));
    socklen_t optlen = (socklen_t)(len > 0 ? len : 0);
    if (len < 0)
        rc = -EPROTO;
    else if (getsockopt(fd, SOL_TLS, dir, &got, &optlen) < 0)
        rc = -errno;
    else if (optlen != (socklen_t)len)
        rc = -EPROTO;
    if (rc == 0) {
        *seq = ktls_info_seq(&got, suite);
        /* What the secret gives at the sequence number the kernel is at. */
        if (tls_ktls_info_fill(&want, &k, *seq) != len ||
            CRYPTO_memcmp(&want, &got, (size_t)len) != 0)
            rc = -EPROTO;
    }
    tls_traffic_keys_deinit(&k);
    OPENSSL_cleanse(&want, sizeof(want));
    OPENSSL_cleanse(&got, sizeof(got));
    return rc;
}

/* ---------------------------------------------------------------- save */

static void state_from_conn(const struct tls_conn *t, struct tls_state *st)
{
    memset(st, 0, sizeof(*st));
    st->mode = t->mode;
    st->flags = (uint8_t)((t->server ? TLS_STATE_F_SERVER : 0) |
                          (t->closed_notify ? TLS_STATE_F_CLOSED_NOTIFY : 0) |
                          (t->ktls_disable ? TLS_STATE_F_KTLS_DISABLE : 0) |
                          (t->record_per_frame ? TLS_STATE_F_RECORD_PER_FRAME : 0));
    st->secret_len = t->rx.secret_len;
    st->suite = t->rx.suite;
    st->ktls_rx_left = t->mode == TLS_MODE_KTLS ? t->ktls_rx_left : 0;
    st->rx_seq = t->rx.seq;
    st->tx_seq = t->tx.seq;
    memcpy(st->rx_secret, t->rx.secret, t->rx.secret_len);
    memcpy(st->tx_secret, t->tx.secret, t->tx.secret_len);
}

ssize_t tls_conn_state_save(struct net_conn *c, uint8_t *buf, size_t cap)
{
    if (net_conn_state(c) != NET_CONN_OPEN || net_conn_codec(c, NULL) == &tls_handshake_codec)
        return -EBUSY;
    struct tls_conn *t = tls_conn_of(c);
    if (t == NULL)
        return -EINVAL;
    if (t->hs || t->todo || t->pend)
        return -EBUSY;
    HD_ASSERT(t->rx.suite == t->tx.suite && t->rx.secret_len == t->tx.secret_len);
    if (cap < TLS_STATE_LEN(t->rx.secret_len))
        return -ENOSPC;
    struct tls_state st;
    state_from_conn(t, &st);
    int rc = 0;
    if (t->mode == TLS_MODE_KTLS) {
        int fd = net_conn_fd(c);
        rc = ktls_read_back(fd, TLS_TX, st.tx_secret, st.secret_len, st.suite, &st.kernel_tx_seq);
        if (rc == 0)
            rc = ktls_read_back(fd, TLS_RX, st.rx_secret, st.secret_len, st.suite,
                                &st.kernel_rx_seq);
    }
    size_t n = rc == 0 ? state_write(&st, buf) : 0;
    OPENSSL_cleanse(&st, sizeof(st));
    if (rc < 0)
        return rc;
    t->ts->stats.states_saved++;
    return (ssize_t)n;
}

/* ---------------------------------------------------------------- load */

/* kTLS: the socket must carry exactly the saved keys at the saved sequence numbers. */
static int ktls_verify(struct net_conn *c, const struct tls_state *st)
{
    uint64_t tx = 0, rx = 0;
    int fd = net_conn_fd(c);
    int rc = ktls_read_back(fd, TLS_TX, st->tx_secret, st->secret_len, st->suite, &tx);
    if (rc == 0)
        rc = ktls_read_back(fd, TLS_RX, st->rx_secret, st->secret_len, st->suite, &rx);
    if (rc == 0 && (tx != st->kernel_tx_seq || rx != st->kernel_rx_seq))
        rc = -EPROTO;
    if (rc < 0) {
        char peer[64];
        hd_log_rl(HD_LOG_WARN, "tls: s%u %s: saved kTLS state does not match the socket (%s)",
                  hd_shard_id(net_conn_shard(c)),
                  net_addr_format(net_conn_peer(c), peer, sizeof(peer)), strerror(-rc));
    }
    return rc < 0 ? -EPROTO : 0;
}

/* One direction's record state from a saved secret. */
static int record_from_secret(struct tls_record_state *rs, uint16_t suite, const uint8_t *secret,
                              uint8_t secret_len, uint64_t seq)
{
    struct tls_traffic_keys k;
    int rc = tls_traffic_keys_init(&k, suite, secret, secret_len);
    if (rc == 0)
        rc = tls_record_state_init(rs, &k, seq);
    tls_traffic_keys_deinit(&k);
    return rc < 0 ? -EPROTO : 0;
}

/* A pooled connection state from st. Returns it, or NULL with *err set. */
static struct tls_conn *conn_from_state(struct tls_shard *ts, const struct tls_state *st, int *err)
{
    struct tls_conn *t = hd_slab_get(ts->conns);
    if (t == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    memset(t, 0, sizeof(*t));
    t->ts = ts;
    *err = record_from_secret(&t->rx, st->suite, st->rx_secret, st->secret_len, st->rx_seq);
    if (*err == 0)
        *err = record_from_secret(&t->tx, st->suite, st->tx_secret, st->secret_len, st->tx_seq);
    if (*err < 0) {
        tls_conn_free(t);
        return NULL;
    }
    t->mode = st->mode;
    t->ktls_rx_left = st->ktls_rx_left;
    t->server = (st->flags & TLS_STATE_F_SERVER) != 0;
    t->closed_notify = (st->flags & TLS_STATE_F_CLOSED_NOTIFY) != 0;
    t->ktls_disable = (st->flags & TLS_STATE_F_KTLS_DISABLE) != 0;
    t->record_per_frame = (st->flags & TLS_STATE_F_RECORD_PER_FRAME) != 0;
    return t;
}

int tls_conn_state_load(struct net_conn *c, const uint8_t *buf, size_t len)
{
    if (net_conn_state(c) != NET_CONN_OPEN || net_conn_codec(c, NULL) != NULL)
        return -EBUSY;
    struct tls_shard *ts = tls_shard_of(net_conn_shard(c));
    if (ts == NULL)
        return -EINVAL;
    struct tls_state st;
    int rc = state_parse(buf, len, &st);
    if (rc == 0 && st.mode == TLS_MODE_KTLS)
        rc = ktls_verify(c, &st);
    struct tls_conn *t = rc == 0 ? conn_from_state(ts, &st, &rc) : NULL;
    OPENSSL_cleanse(&st, sizeof(st));
    if (t == NULL)
        return rc;
    bool ktls = t->mode == TLS_MODE_KTLS;
    net_conn_set_codec(c, ktls ? &tls_ktls_codec : &tls_record_codec, t);
    /* kTLS: a quiet round (tls_quiesced ends it at once) re-arms receiving as record-typed
     * reads, replacing the untyped recv the adoption armed. */
    if (ktls && (rc = net_conn_quiet_begin(c)) < 0) {
        net_conn_set_codec(c, NULL, NULL);
        tls_conn_free(t);
        return rc;
    }
    ts->stats.states_loaded++;
    ts->stats.states_loaded_ktls += ktls;
    return 0;
}
