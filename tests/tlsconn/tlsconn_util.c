/* tlsconn_util.c - see tlsconn_util.h. Test threads only. */
#define _GNU_SOURCE
#include "tlsconn_util.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/base.h>
#ifndef OPENSSL_IS_BORINGSSL
#error "tests/tlsconn need BoringSSL"
#endif
#include <openssl/crypto.h>

#include "tls_keys.h"

extern char **environ;

void tu_check_boringssl(void)
{
    const char *name = OpenSSL_version(OPENSSL_VERSION);
    cr_assert(name && strstr(name, "BoringSSL"),
              "OpenSSL_version() says '%s': symbols bound to the wrong libcrypto", name);
    cr_assert(tls_crypto_is_boringssl());
}

uint16_t tu_port_hold(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    cr_assert_geq(fd, 0);
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port); /* fd stays open: the hold */
}

/* openssl req: its 16 fixed arguments and a few extras. */
#define TU_REQ_ARGV_MAX 32

static char dir[64], cert[96], key[96];

const char *tu_cert_path(void)
{
    return cert;
}

const char *tu_key_path(void)
{
    return key;
}

void tu_openssl_req(const char *key_out, const char *cert_out, const char *subj,
                    const char *const *extra)
{
    const char *argv[TU_REQ_ARGV_MAX] = {"openssl",
                                         "req",
                                         "-x509",
                                         "-newkey",
                                         "ec",
                                         "-pkeyopt",
                                         "ec_paramgen_curve:prime256v1",
                                         "-nodes",
                                         "-keyout",
                                         key_out,
                                         "-out",
                                         cert_out,
                                         "-days",
                                         "2",
                                         "-subj",
                                         subj};
    size_t n = 0;
    while (argv[n])
        n++;
    for (size_t i = 0; extra && extra[i]; i++) {
        cr_assert_lt(n + 1, TU_REQ_ARGV_MAX, "tu_openssl_req: too many arguments");
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    pid_t pid = tu_spawn((char *const *)argv, NULL, NULL);
    int st = tu_wait(pid, 20000);
    if (st < 0)
        tu_stop(pid);
    cr_assert_eq(st, 0, "openssl req failed (%d)", st);
}

const char *tu_make_cert(void)
{
    snprintf(dir, sizeof(dir), "/tmp/hd-tlsconn-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(cert, sizeof(cert), "%s/c.pem", dir);
    snprintf(key, sizeof(key), "%s/k.pem", dir);
    const char *const san[] = {"-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", NULL};
    tu_openssl_req(key, cert, "/CN=localhost", san);
    return dir;
}

void tu_cleanup(void)
{
    if (dir[0] == '\0')
        return;
    unlink(cert);
    unlink(key);
    rmdir(dir);
    dir[0] = '\0';
}

bool tu_have(const char *cmd)
{
    const char *path = getenv("PATH");
    if (path == NULL)
        return false;
    char buf[512];
    for (const char *p = path; *p;) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, cmd);
        if (access(buf, X_OK) == 0)
            return true;
        p += n + (e ? 1 : 0);
    }
    return false;
}

pid_t tu_spawn(char *const argv[], int *in_fd, int *out_fd)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in_fd) {
        cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    } else {
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    }
    if (out_fd) {
        cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    } else {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    }
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(rc, 0, "spawning %s: %s", argv[0], strerror(rc));
    if (in_fd) {
        close(in[0]);
        *in_fd = in[1];
    }
    if (out_fd) {
        close(out[1]);
        *out_fd = out[0];
    }
    return pid;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int tu_wait(pid_t pid, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0 || now_ms() >= end)
            return -1;
        usleep(5000);
    }
}

void tu_stop(pid_t pid)
{
    kill(pid, SIGTERM);
    if (tu_wait(pid, 2000) >= 0)
        return;
    kill(pid, SIGKILL);
    tu_wait(pid, 5000);
}

bool tu_read_until(int fd, char *buf, size_t cap, size_t *len, const char *needle, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    size_t n = *len;
    buf[n] = '\0';
    while (strstr(buf, needle) == NULL) {
        uint64_t now = now_ms();
        if (now >= end || n + 1 >= cap)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(end - now)) <= 0)
            continue;
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        buf[n] = '\0';
    }
    *len = n;
    return strstr(buf, needle) != NULL;
}
