/* tlsconn_util.h - helpers for the tls/ connection tests: the BoringSSL binding check, free
 * loopback ports, certificates made by the openssl CLI, and external peers (openssl s_client /
 * s_server, curl) started with posix_spawn, read with bounded waits, stopped by PID.
 * Test threads only (never on a shard). */
#ifndef TLSCONN_UTIL_H
#define TLSCONN_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Fails the test unless OpenSSL_version() names BoringSSL (Criterion loads OpenSSL's
 * libcrypto too; a wrong binding would make every result meaningless). Suite .init. */
void tu_check_boringssl(void);

/* A loopback TCP port held for the test's listeners: bound with SO_REUSEADDR and never
 * listening, and kept open until the test process exits, so no other process is given the port
 * (the kernel hands out no bound port for port 0) while net's listeners (SO_REUSEADDR) bind
 * beside it. Test thread; the test fails if none can be had. */
uint16_t tu_port_hold(void);

/* `openssl req -x509` for a fresh P-256 key (key_out) and its certificate (cert_out, 2 days)
 * with subject subj and more arguments (extra, NULL-terminated, or NULL: "-addext" lines, or
 * "-CA" / "-CAkey" to sign it with a CA instead of by itself). Bounded; fails the test. */
void tu_openssl_req(const char *key_out, const char *cert_out, const char *subj,
                    const char *const *extra);
/* A fresh directory under /tmp (removed by tu_cleanup) with c.pem / k.pem: a self-signed P-256
 * certificate for CN localhost, SAN DNS:localhost and IP:127.0.0.1, made by `openssl req`.
 * Returns the directory. */
const char *tu_make_cert(void);
void tu_cleanup(void);
/* Paths inside the directory of tu_make_cert (static buffers). */
const char *tu_cert_path(void);
const char *tu_key_path(void);

/* Start argv[0] (PATH lookup) with stdin and stdout on pipes (in_fd / out_fd may be NULL: then
 * /dev/null) and stderr to /dev/null. Returns the PID; the test fails if spawning fails. */
pid_t tu_spawn(char *const argv[], int *in_fd, int *out_fd);
/* Wait at most timeout_ms for pid to exit. Returns its exit status (0..255), 128 + signal,
 * or -1 on timeout. */
int tu_wait(pid_t pid, int timeout_ms);
/* SIGTERM, up to 2 s, then SIGKILL; always reaped. */
void tu_stop(pid_t pid);
/* Read from fd into buf (NUL-terminated, at most cap - 1 bytes) until needle appears, EOF, or
 * timeout_ms passed. Returns true if needle was seen. */
bool tu_read_until(int fd, char *buf, size_t cap, size_t *len, const char *needle, int timeout_ms);
/* Whether a command is on PATH (tests skip, exit 77, when openssl or curl is missing). */
bool tu_have(const char *cmd);

/* The byte at position i of stream `seed` (recomputed on the receiving side). */
static inline uint8_t tu_stream_byte(uint64_t seed, uint64_t i)
{
    uint64_t x = (i >> 3) * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint8_t)(x >> ((i & 7) * 8));
}

#endif
