/* ktls_probe: checks, inside the test VM (tests/vm/run_vm_test.sh), that the guest kernel's kTLS
 * does what the tls/ layer relies on: TCP_ULP "tls", TLS 1.3 TX/RX key install for AES-128-GCM
 * and ChaCha20-Poly1305, a 1 MiB transfer, non-data records through TLS_SET/GET_RECORD_TYPE
 * cmsgs, the exact wire format (decrypted here with BoringSSL, so key/iv/salt/rec_seq layout and
 * the TLS 1.3 nonce are checked against an independent AEAD), and /proc/net/tls_stat counters.
 * Runs as a child of the VM's /init: the main thread receives, one short-lived thread per bulk
 * transfer sends. Owns only the loopback sockets it opens. Prints `ok <name>`, `skip <name>: why`
 * or `FAIL <name>: why` per check; exits 1 if any check failed. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/aead.h>

#include <hd/hd_base.h>

#ifndef SOL_TLS
#define SOL_TLS 282 /* include/linux/socket.h; older libc headers lack it */
#endif

/* 1 MiB: many full 16 KiB records plus the odd-sized tails the chunk table below produces. */
#define VM_BULK_SIZE (1u << 20)
/* A stuck kTLS socket must fail the check, not hang until the VM's hard timeout. */
#define VM_IO_TIMEOUT_S 30
/* TLS 1.3 record: 5-byte header; ciphertext = plaintext || inner type (1) || 16-byte tag. */
#define VM_TLS_HEADER_SIZE 5
#define VM_TLS_TAG_SIZE    16
#define VM_TLS_IV_SIZE     12
#define VM_RECORD_DATA     23 /* RFC 8446 ContentType application_data */
#define VM_RECORD_ALERT    21 /* RFC 8446 ContentType alert */
/* Room for the wire check's record, which carries at most sizeof(vm_wire_text). */
#define VM_WIRE_RECORD_MAX 128
/* First record sequence number: not 0, so a kernel ignoring rec_seq fails the wire check. */
#define VM_FIRST_SEQ 7u

_Static_assert(VM_BULK_SIZE % 4096 == 0, "bulk size is whole pages");
_Static_assert(TLS_CIPHER_AES_GCM_128_SALT_SIZE + TLS_CIPHER_AES_GCM_128_IV_SIZE == VM_TLS_IV_SIZE,
               "AES-GCM salt || iv is the TLS 1.3 write_iv");
_Static_assert(TLS_CIPHER_CHACHA20_POLY1305_IV_SIZE == VM_TLS_IV_SIZE, "ChaCha iv is write_iv");

struct vm_cipher {
    const char *name;
    uint16_t type;
    size_t key_size;
    const EVP_AEAD *(*aead)(void);
};

static const struct vm_cipher vm_ciphers[] = {
    {"aes128gcm", TLS_CIPHER_AES_GCM_128, TLS_CIPHER_AES_GCM_128_KEY_SIZE, EVP_aead_aes_128_gcm},
    {"chacha20poly1305", TLS_CIPHER_CHACHA20_POLY1305, TLS_CIPHER_CHACHA20_POLY1305_KEY_SIZE,
     EVP_aead_chacha20_poly1305},
};

/* Fixed test secrets: the key is cut to the cipher's size, the iv is the TLS 1.3 write_iv. */
static const uint8_t vm_key[32] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
                                   0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a,
                                   0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0};
static const uint8_t vm_iv[VM_TLS_IV_SIZE] = {0xa0, 0xa1, 0xa2, 0xa3, 0xb0, 0xb1,
                                              0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7};
static const char vm_wire_text[] = "hderp kTLS wire check";

union vm_crypto_info {
    struct tls_crypto_info info;
    struct tls12_crypto_info_aes_gcm_128 aes128;
    struct tls12_crypto_info_chacha20_poly1305 chacha;
};

static int vm_failures;

static void vm_ok(const char *cipher, const char *check)
{
    printf("ok %s_%s\n", cipher, check);
}

static void vm_fail(const char *cipher, const char *check, const char *why, int err)
{
    if (err != 0)
        printf("FAIL %s_%s: %s: %s\n", cipher, check, why, strerror(err));
    else
        printf("FAIL %s_%s: %s\n", cipher, check, why);
    vm_failures++;
}

/* A connected loopback TCP pair: fds[0] connected, fds[1] accepted. Returns 0 or -errno. */
static int vm_pair_open(int fds[2])
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    struct timeval tv = {.tv_sec = VM_IO_TIMEOUT_S};
    int err = 0;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);

    fds[0] = fds[1] = -1;
    if (lfd < 0)
        return -errno;
    if (bind(lfd, (struct sockaddr *)&addr, len) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&addr, &len) < 0)
        goto fail_errno;
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&addr, len) < 0)
        goto fail_errno;
    fds[1] = accept(lfd, NULL, NULL);
    if (fds[1] < 0)
        goto fail_errno;
    for (int i = 0; i < 2; i++) {
        if (setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
            setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
            goto fail_errno;
    }
    close(lfd);
    return 0;
fail_errno:
    err = -errno;
    for (int i = 0; i < 2; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
    close(lfd);
    return err;
}

static void vm_pair_close(int fds[2])
{
    close(fds[0]);
    close(fds[1]);
}

/* Fills the kernel's crypto_info for TLS 1.3 from write_iv and the first sequence number:
 * AES-GCM takes salt = iv[0..4) and iv = iv[4..12); ChaCha takes the whole 12-byte iv. */
static socklen_t vm_crypto_info_fill(union vm_crypto_info *ci, const struct vm_cipher *c)
{
    uint8_t seq[8];

    for (int i = 0; i < 8; i++)
        seq[i] = (uint8_t)((uint64_t)VM_FIRST_SEQ >> (56 - 8 * i));
    memset(ci, 0, sizeof(*ci));
    ci->info.version = TLS_1_3_VERSION;
    ci->info.cipher_type = c->type;
    if (c->type == TLS_CIPHER_AES_GCM_128) {
        memcpy(ci->aes128.salt, vm_iv, sizeof(ci->aes128.salt));
        memcpy(ci->aes128.iv, vm_iv + sizeof(ci->aes128.salt), sizeof(ci->aes128.iv));
        memcpy(ci->aes128.key, vm_key, sizeof(ci->aes128.key));
        memcpy(ci->aes128.rec_seq, seq, sizeof(seq));
        return sizeof(ci->aes128);
    }
    memcpy(ci->chacha.iv, vm_iv, sizeof(ci->chacha.iv));
    memcpy(ci->chacha.key, vm_key, sizeof(ci->chacha.key));
    memcpy(ci->chacha.rec_seq, seq, sizeof(seq));
    return sizeof(ci->chacha);
}

/* Sets TCP_ULP "tls" and installs the keys in one direction (TLS_TX or TLS_RX). 0 or -errno. */
static int vm_ktls_install(int fd, int dir, const struct vm_cipher *c)
{
    union vm_crypto_info ci;
    socklen_t len = vm_crypto_info_fill(&ci, c);

    if (setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls")) < 0)
        return -errno;
    if (setsockopt(fd, SOL_TLS, dir, &ci, len) < 0)
        return -errno;
    return 0;
}

/* FNV-1a 64: a checksum both ends compute, reported so a mismatch shows which side is off. */
static uint64_t vm_fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

struct vm_sender {
    int fd;
    const uint8_t *buf;
    size_t size;
    int err; /* 0 or -errno, read after join */
};

/* Sends the buffer in chunks of varying size so records start and end at odd offsets. */
static void *vm_sender_run(void *arg)
{
    static const size_t chunks[] = {1, 100, 16384, 65536, 4097, 16385, 300000, 7};
    struct vm_sender *s = arg;
    size_t off = 0;

    for (size_t i = 0; off < s->size; i++) {
        size_t n = chunks[i % HD_ARRAY_SIZE(chunks)];
        if (n > s->size - off)
            n = s->size - off;
        ssize_t w = send(s->fd, s->buf + off, n, MSG_NOSIGNAL);
        if (w < 0) {
            s->err = -errno;
            return NULL;
        }
        off += (size_t)w;
    }
    return NULL;
}

/* Reads exactly n bytes (plain recv: application data only). Returns 0 or -errno/-EPIPE. */
static int vm_recv_all(int fd, uint8_t *buf, size_t n)
{
    size_t off = 0;

    while (off < n) {
        ssize_t r = recv(fd, buf + off, n - off, 0);
        if (r < 0)
            return -errno;
        if (r == 0)
            return -EPIPE;
        off += (size_t)r;
    }
    return 0;
}

/* 1 MiB from tx (kTLS TX) to rx (kTLS RX): same length, same checksum, same bytes. */
static void vm_check_bulk(const struct vm_cipher *c, int tx, int rx)
{
    uint8_t *src = malloc(VM_BULK_SIZE);
    uint8_t *dst = malloc(VM_BULK_SIZE);
    struct vm_sender s = {.fd = tx, .buf = src, .size = VM_BULK_SIZE};
    uint32_t x = 0x9e3779b9u; /* xorshift32 seed: any non-zero value */
    pthread_t thread;
    int err;

    if (src == NULL || dst == NULL) {
        vm_fail(c->name, "bulk_1mib", "malloc", ENOMEM);
        goto out;
    }
    for (size_t i = 0; i < VM_BULK_SIZE; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        src[i] = (uint8_t)x;
    }
    err = pthread_create(&thread, NULL, vm_sender_run, &s);
    if (err != 0) {
        vm_fail(c->name, "bulk_1mib", "pthread_create", err);
        goto out;
    }
    err = vm_recv_all(rx, dst, VM_BULK_SIZE);
    pthread_join(thread, NULL);
    uint64_t sent = vm_fnv1a(src, VM_BULK_SIZE);
    uint64_t got = err == 0 ? vm_fnv1a(dst, VM_BULK_SIZE) : 0;
    if (s.err != 0)
        vm_fail(c->name, "bulk_1mib", "send", -s.err);
    else if (err != 0)
        vm_fail(c->name, "bulk_1mib", "recv", -err);
    else if (sent != got || memcmp(src, dst, VM_BULK_SIZE) != 0)
        vm_fail(c->name, "bulk_1mib", "received bytes differ from sent bytes", 0);
    else
        printf("ok %s_bulk_1mib (fnv1a %016llx)\n", c->name, (unsigned long long)got);
out:
    free(src);
    free(dst);
}

/* One record sent with sendmsg and a TLS_SET_RECORD_TYPE cmsg. Returns 0 or -errno. */
static int vm_send_typed(int fd, uint8_t type, const void *p, size_t n)
{
    union {
        char buf[CMSG_SPACE(sizeof(uint8_t))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = (void *)p, .iov_len = n};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

    memset(&ctl, 0, sizeof(ctl));
    cm->cmsg_level = SOL_TLS;
    cm->cmsg_type = TLS_SET_RECORD_TYPE;
    cm->cmsg_len = CMSG_LEN(sizeof(uint8_t));
    *CMSG_DATA(cm) = type;
    ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0)
        return -errno;
    return (size_t)w == n ? 0 : -EIO;
}

/* One recvmsg with room for a TLS_GET_RECORD_TYPE cmsg: returns the byte count and sets *type
 * (-1 when the kernel gave no such cmsg), or -errno. */
static ssize_t vm_recv_typed(int fd, void *buf, size_t n, int *type)
{
    union {
        char buf[CMSG_SPACE(sizeof(uint8_t))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = n};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf)};

    memset(&ctl, 0, sizeof(ctl));
    *type = -1;
    ssize_t r = recvmsg(fd, &msg, 0);
    if (r < 0)
        return -errno;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level == SOL_TLS && cm->cmsg_type == TLS_GET_RECORD_TYPE)
            *type = *CMSG_DATA(cm);
    }
    return r;
}

/* Expects one recvmsg to return exactly (type, p[0..n)). Returns true when it did. */
static bool vm_expect_typed(const struct vm_cipher *c, int fd, int type, const void *p, size_t n)
{
    uint8_t buf[64];
    int got_type;
    char why[96];
    ssize_t r = vm_recv_typed(fd, buf, sizeof(buf), &got_type);

    if (r < 0) {
        snprintf(why, sizeof(why), "recvmsg for record type %d", type);
        vm_fail(c->name, "record_type", why, (int)-r);
        return false;
    }
    if (got_type != type || (size_t)r != n || memcmp(buf, p, n) != 0) {
        snprintf(why, sizeof(why), "wanted type %d with %zu bytes, got type %d with %zd bytes",
                 type, n, got_type, r);
        vm_fail(c->name, "record_type", why, 0);
        return false;
    }
    return true;
}

/* data "ping", alert {1, 0}, data "pong": the alert must come out of recvmsg with its own type,
 * never merged into the data, and a plain recv() must refuse it with EIO instead of returning
 * its bytes as data. */
static void vm_check_record_type(const struct vm_cipher *c, int tx, int rx)
{
    static const uint8_t alert[2] = {1, 0}; /* warning, close_notify: any two bytes would do */
    uint8_t buf[64];
    int err;

    if (send(tx, "ping", 4, MSG_NOSIGNAL) != 4) {
        vm_fail(c->name, "record_type", "send ping", errno);
        return;
    }
    err = vm_send_typed(tx, VM_RECORD_ALERT, alert, sizeof(alert));
    if (err != 0) {
        vm_fail(c->name, "record_type", "sendmsg alert", -err);
        return;
    }
    if (send(tx, "pong", 4, MSG_NOSIGNAL) != 4) {
        vm_fail(c->name, "record_type", "send pong", errno);
        return;
    }
    if (!vm_expect_typed(c, rx, VM_RECORD_DATA, "ping", 4))
        return;
    ssize_t r = recv(rx, buf, sizeof(buf), 0);
    if (r >= 0 || errno != EIO) {
        vm_fail(c->name, "record_type", "plain recv() did not refuse the alert with EIO",
                r < 0 ? errno : 0);
        return;
    }
    if (!vm_expect_typed(c, rx, VM_RECORD_ALERT, alert, sizeof(alert)) ||
        !vm_expect_typed(c, rx, VM_RECORD_DATA, "pong", 4))
        return;
    vm_ok(c->name, "record_type");
}

/* Reads one raw TLS 1.3 record from fd and opens it with BoringSSL at sequence seq. Checks the
 * outer header (type 23, legacy version 0x0303, length) and the inner content type and text. */
static bool vm_wire_open(const struct vm_cipher *c, int fd, uint64_t seq, uint8_t inner_type)
{
    uint8_t rec[VM_TLS_HEADER_SIZE + VM_WIRE_RECORD_MAX], plain[VM_WIRE_RECORD_MAX];
    uint8_t nonce[VM_TLS_IV_SIZE];
    size_t text_size = sizeof(vm_wire_text) - 1, plain_size = 0;
    size_t body = text_size + 1 + VM_TLS_TAG_SIZE;
    EVP_AEAD_CTX ctx;
    int err = vm_recv_all(fd, rec, VM_TLS_HEADER_SIZE);

    if (err == 0 && (rec[0] != VM_RECORD_DATA || rec[1] != 3 || rec[2] != 3 ||
                     (size_t)(rec[3] << 8 | rec[4]) != body)) {
        vm_fail(c->name, "wire", "outer record header is not 17 03 03 <len>", 0);
        return false;
    }
    if (err == 0)
        err = vm_recv_all(fd, rec + VM_TLS_HEADER_SIZE, body);
    if (err != 0) {
        vm_fail(c->name, "wire", "raw recv", -err);
        return false;
    }
    memcpy(nonce, vm_iv, sizeof(nonce)); /* RFC 8446 5.3: write_iv XOR big-endian seq */
    for (int i = 0; i < 8; i++)
        nonce[VM_TLS_IV_SIZE - 1 - i] ^= (uint8_t)(seq >> (8 * i));
    if (!EVP_AEAD_CTX_init(&ctx, c->aead(), vm_key, c->key_size, VM_TLS_TAG_SIZE, NULL)) {
        vm_fail(c->name, "wire", "EVP_AEAD_CTX_init", 0);
        return false;
    }
    int opened = EVP_AEAD_CTX_open(&ctx, plain, &plain_size, sizeof(plain), nonce, sizeof(nonce),
                                   rec + VM_TLS_HEADER_SIZE, body, rec, VM_TLS_HEADER_SIZE);
    EVP_AEAD_CTX_cleanup(&ctx);
    if (!opened) {
        vm_fail(c->name, "wire", "BoringSSL cannot open the kernel's record", 0);
        return false;
    }
    if (plain_size != text_size + 1 || memcmp(plain, vm_wire_text, text_size) != 0 ||
        plain[text_size] != inner_type) {
        vm_fail(c->name, "wire", "decrypted text or inner content type differ", 0);
        return false;
    }
    return true;
}

/* kTLS TX on tx, no ULP on raw: a data record at VM_FIRST_SEQ and an alert at the next one. */
static void vm_check_wire(const struct vm_cipher *c, int tx, int raw)
{
    size_t n = sizeof(vm_wire_text) - 1;
    int err;

    if (send(tx, vm_wire_text, n, MSG_NOSIGNAL) != (ssize_t)n) {
        vm_fail(c->name, "wire", "send", errno);
        return;
    }
    if (!vm_wire_open(c, raw, VM_FIRST_SEQ, VM_RECORD_DATA))
        return;
    err = vm_send_typed(tx, VM_RECORD_ALERT, vm_wire_text, n);
    if (err != 0) {
        vm_fail(c->name, "wire", "sendmsg alert", -err);
        return;
    }
    if (!vm_wire_open(c, raw, VM_FIRST_SEQ + 1, VM_RECORD_ALERT))
        return;
    vm_ok(c->name, "wire");
}

struct vm_installs {
    int tx;
    int rx;
};

/* Installs keys on a fresh pair. Returns 0, -ENOTSUP when the kernel lacks the cipher (only
 * ChaCha20-Poly1305 may be missing) or another -errno after reporting a failure. */
static int vm_pair_setup(const struct vm_cipher *c, int fds[2], bool rx_too, struct vm_installs *n)
{
    int err = vm_pair_open(fds);

    if (err != 0) {
        vm_fail(c->name, "setup", "loopback pair", -err);
        return err;
    }
    err = vm_ktls_install(fds[0], TLS_TX, c);
    if (err == 0)
        n->tx++;
    if (err == 0 && rx_too) {
        err = vm_ktls_install(fds[1], TLS_RX, c);
        if (err == 0)
            n->rx++;
    }
    if (err == 0)
        return 0;
    vm_pair_close(fds);
    if (c->type == TLS_CIPHER_CHACHA20_POLY1305 && (err == -EINVAL || err == -ENOENT)) {
        printf("skip %s: kernel refuses the cipher: %s\n", c->name, strerror(-err));
        return -ENOTSUP;
    }
    vm_fail(c->name, "setup", "TCP_ULP tls / TLS_TX / TLS_RX", -err);
    return err;
}

static void vm_check_cipher(const struct vm_cipher *c, struct vm_installs *n)
{
    int fds[2];

    if (vm_pair_setup(c, fds, true, n) != 0)
        return;
    vm_ok(c->name, "setup");
    vm_check_bulk(c, fds[0], fds[1]);
    vm_check_record_type(c, fds[0], fds[1]);
    vm_pair_close(fds);
    if (vm_pair_setup(c, fds, false, n) != 0)
        return;
    vm_check_wire(c, fds[0], fds[1]);
    vm_pair_close(fds);
}

struct vm_tls_stat {
    long long tx_sw;
    long long rx_sw;
    long long decrypt_error;
};

/* Parses /proc/net/tls_stat (one "Name value" per line; exists once tls.ko is loaded). */
static int vm_tls_stat_read(struct vm_tls_stat *st)
{
    char name[64];
    long long v;
    int found = 0;
    FILE *f = fopen("/proc/net/tls_stat", "r");

    if (f == NULL)
        return -errno;
    while (fscanf(f, "%63s %lld", name, &v) == 2) {
        if (strcmp(name, "TlsTxSw") == 0)
            st->tx_sw = v, found |= 1;
        else if (strcmp(name, "TlsRxSw") == 0)
            st->rx_sw = v, found |= 2;
        else if (strcmp(name, "TlsDecryptError") == 0)
            st->decrypt_error = v, found |= 4;
    }
    fclose(f);
    return found == 7 ? 0 : -ENOENT;
}

/* Nothing else in the VM uses kTLS, so the counters must rise by exactly our installs. */
static void vm_check_tls_stat(const struct vm_tls_stat *a, const struct vm_tls_stat *b,
                              const struct vm_installs *n)
{
    if (b->tx_sw - a->tx_sw != n->tx || b->rx_sw - a->rx_sw != n->rx ||
        b->decrypt_error != a->decrypt_error) {
        printf("FAIL tls_stat: TlsTxSw %lld->%lld TlsRxSw %lld->%lld (installed tx %d rx %d), "
               "TlsDecryptError %lld->%lld\n",
               a->tx_sw, b->tx_sw, a->rx_sw, b->rx_sw, n->tx, n->rx, a->decrypt_error,
               b->decrypt_error);
        vm_failures++;
        return;
    }
    printf("ok tls_stat (TlsTxSw %lld->%lld, TlsRxSw %lld->%lld)\n", a->tx_sw, b->tx_sw, a->rx_sw,
           b->rx_sw);
}

int main(void)
{
    struct vm_tls_stat before = {0}, after = {0};
    struct vm_installs n = {0};
    int err;

    setvbuf(stdout, NULL, _IOLBF, 0);
    err = vm_tls_stat_read(&before);
    if (err != 0) {
        printf("FAIL tls_stat: /proc/net/tls_stat before: %s\n", strerror(-err));
        return 1;
    }
    for (size_t i = 0; i < HD_ARRAY_SIZE(vm_ciphers); i++)
        vm_check_cipher(&vm_ciphers[i], &n);
    err = vm_tls_stat_read(&after);
    if (err != 0) {
        printf("FAIL tls_stat: /proc/net/tls_stat after: %s\n", strerror(-err));
        vm_failures++;
    } else {
        vm_check_tls_stat(&before, &after, &n);
    }
    printf("ktls_probe: %d check(s) failed\n", vm_failures);
    return vm_failures == 0 ? 0 : 1;
}
