/* conf_server.c - a real hderp-server for the conformance tests: spawned on loopback port 0 (the
 * ports it bound read back from its --port-file) or on ports held for it, plain or TLS with a
 * fresh certificate, waited for on its probe, stopped by PID (SIGTERM, or SIGKILL for a crash),
 * plain HTTP requests to it and varz; also the blocking socket primitives the raw client
 * (conf_raw.c) shares (conf_support_impl.h). Runs on the test thread only; owns the child
 * processes, their work dirs and the held ports. */
#define _GNU_SOURCE
#include "conf_support.h"
#include "conf_support_impl.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Polling step while waiting for the server to come up or go away. */
#define CONF_POLL_MS 20
/* Ports one test holds at a time (conf_port_hold): a region's nodes, in TLS mode two each. */
#define CONF_HOLDS_MAX 16
/* argv: the fixed flags (about 20 entries) plus the caller's extras. */
#define CONF_ARGV_MAX 48
/* opts.env entries. */
#define CONF_ENV_MAX 16

/* ---------------------------------------------------------------- time, sockets */

int64_t conf_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void conf_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int hold_fds[CONF_HOLDS_MAX];
static unsigned holds_count;

int conf_port_hold(uint16_t *out)
{
    if (holds_count == CONF_HOLDS_MAX)
        return -ENOSPC;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    hold_fds[holds_count++] = fd;
    *out = ntohs(a.sin_port);
    return 0;
}

void conf_ports_release(void)
{
    while (holds_count > 0)
        close(hold_fds[--holds_count]);
}

int conf_tcp_connect(uint16_t port)
{
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct timeval tv = {CONF_IO_TIMEOUT_MS / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

int conf_write_all(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN ? -ETIMEDOUT : -errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int conf_wait_readable(int fd, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - conf_now_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/* ---------------------------------------------------------------- HTTP */

ssize_t conf_http(const struct conf_server *srv, const char *req, char *resp, size_t size)
{
    int fd = conf_tcp_connect(srv->http_port);
    if (fd < 0)
        return fd;
    int rc = conf_write_all(fd, req, strlen(req));
    size_t got = 0;
    int64_t deadline = conf_now_ms() + CONF_IO_TIMEOUT_MS;
    while (rc == 0 && got + 1 < size) {
        rc = conf_wait_readable(fd, deadline);
        if (rc < 0)
            break;
        ssize_t n = recv(fd, resp + got, size - 1 - got, 0);
        if (n == 0)
            break;
        if (n < 0) {
            rc = errno == EINTR ? 0 : -errno;
            continue;
        }
        got += (size_t)n;
    }
    resp[got] = '\0';
    close(fd);
    return rc < 0 ? rc : (ssize_t)got;
}

int conf_varz(const struct conf_server *srv, const char *name, bool sum_labels, int64_t *out)
{
    char *resp = malloc(CONF_HTTP_RESP_MAX);
    if (!resp)
        return -ENOMEM;
    ssize_t n = conf_http(srv, "GET /debug/varz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                          resp, CONF_HTTP_RESP_MAX);
    int rc = n < 0 ? (int)n : -ENOENT;
    if (n > 0 && strncmp(resp, "HTTP/1.1 200", 12) != 0)
        rc = -EACCES;
    size_t nlen = strlen(name);
    int64_t sum = 0;
    for (char *line = n > 0 && rc == -ENOENT ? strchr(resp, '\n') : NULL; line;
         line = strchr(line, '\n')) {
        line++;
        if (strncmp(line, name, nlen) != 0)
            continue;
        char next = line[nlen];
        if (next == ' ' || (sum_labels && next == '{')) {
            char *sp = strchr(line + nlen, ' ');
            if (!sp)
                continue;
            sum += strtoll(sp + 1, NULL, 10);
            rc = 0;
        }
    }
    free(resp);
    if (rc == 0)
        *out = sum;
    return rc;
}

int conf_varz_wait(const struct conf_server *srv, const char *name, int64_t want, int timeout_ms,
                   int64_t *last)
{
    int64_t deadline = conf_now_ms() + timeout_ms, scratch;
    int rc;
    if (last == NULL)
        last = &scratch;
    do {
        rc = conf_varz(srv, name, false, last);
        if (rc == 0 && *last == want)
            return 0;
        conf_sleep_ms(CONF_POLL_MS);
    } while (conf_now_ms() < deadline);
    return rc < 0 ? rc : -ETIMEDOUT;
}

/* ---------------------------------------------------------------- the process */

void conf_server_dump_log(const struct conf_server *srv)
{
    char path[300], line[512];
    snprintf(path, sizeof(path), "%s/server.log", srv->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "---- %s\n", path);
    while (fgets(line, sizeof(line), f))
        fputs(line, stderr);
    fclose(f);
}

bool conf_server_alive(const struct conf_server *srv)
{
    siginfo_t si = {0};
    return srv->pid > 0 && waitid(P_PID, (id_t)srv->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           si.si_pid == 0;
}

/* A test that crashes (abort in a shard thread) must not leave its servers running. */
static pid_t crash_pids[CONF_SERVERS_MAX];

static void on_crash(int sig)
{
    for (size_t i = 0; i < CONF_SERVERS_MAX; i++)
        if (crash_pids[i] > 0)
            kill(crash_pids[i], SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void crash_track(pid_t pid, pid_t replace)
{
    for (size_t i = 0; i < CONF_SERVERS_MAX; i++)
        if (crash_pids[i] == replace) {
            crash_pids[i] = pid;
            return;
        }
}

int conf_run(const char *const *argv, const char *log, int timeout_ms, int *status)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -rc;
    int64_t deadline = conf_now_ms() + timeout_ms;
    int st = 0;
    pid_t p;
    while ((p = waitpid(pid, &st, WNOHANG)) == 0 && conf_now_ms() < deadline)
        conf_sleep_ms(CONF_POLL_MS);
    int e = p < 0 ? errno : 0;
    if (p == 0) { /* still running: stopped by its PID */
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    if (status)
        *status = st;
    return p == 0 ? -ETIMEDOUT : p < 0 ? -e : 0;
}

/* Runs a tool (openssl) to completion: 0 when it exited 0, else -errno or -EIO. */
static int run_tool(const char *const *argv, const char *log)
{
    int status = 0;
    int rc = conf_run(argv, log, CONF_START_TIMEOUT_MS, &status);
    return rc < 0 ? rc : WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

static bool is_ip_literal(const char *name)
{
    struct in6_addr a6;
    struct in_addr a4;
    return inet_pton(AF_INET, name, &a4) == 1 || inet_pton(AF_INET6, name, &a6) == 1;
}

/* TLS mode: <dir>/<name>.crt and .key, an ECDSA P-256 self-signed certificate whose SAN is the
 * host name (what -certmode manual loads, and what clients verify against); an IP name also
 * gets DNS:CONF_TLS_HOSTNAME. */
static int make_cert(struct conf_server *srv, const char *name)
{
    char key[300], log[300], subj[128], san[160];
    snprintf(srv->cert_file, sizeof(srv->cert_file), "%s/%s.crt", srv->dir, name);
    snprintf(key, sizeof(key), "%s/%s.key", srv->dir, name);
    snprintf(log, sizeof(log), "%s/openssl.log", srv->dir);
    snprintf(subj, sizeof(subj), "/CN=%s", name);
    if (is_ip_literal(name))
        snprintf(san, sizeof(san), "subjectAltName=IP:%s,DNS:" CONF_TLS_HOSTNAME, name);
    else
        snprintf(san, sizeof(san), "subjectAltName=DNS:%s", name);
    /* clang-format off */
    const char *argv[] = {"openssl", "req", "-x509", "-newkey", "ec",
                          "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
                          "-keyout", key, "-out", srv->cert_file,
                          "-subj", subj, "-addext", san, NULL};
    /* clang-format on */
    int rc = run_tool(argv, log);
    if (rc < 0)
        fprintf(stderr, "conf_server_start: openssl req failed (%s), see %s\n", strerror(-rc), log);
    return rc;
}

/* Copies the key file src to dst (a restart with the same key). */
static int copy_file(const char *src, const char *dst)
{
    char buf[4096];
    FILE *in = fopen(src, "r");
    if (!in)
        return -errno;
    size_t n = fread(buf, 1, sizeof(buf), in);
    fclose(in);
    int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = write(fd, buf, n) == (ssize_t)n ? 0 : -EIO;
    close(fd);
    return rc;
}

/* environ with o->env's entries replacing the inherited ones of the same name, plus
 * SSL_CERT_FILE for trust_own_cert; NULL-terminated, malloc'd (the strings are borrowed). */
static char **child_env(const struct conf_server *srv, const struct conf_server_opts *o,
                        char *own_ca, size_t own_ca_size)
{
    size_t n_env = 0, n_add = 0;
    while (environ[n_env])
        n_env++;
    while (o->env && o->env[n_add])
        n_add++;
    if (n_add >= CONF_ENV_MAX)
        return NULL;
    char **env = calloc(n_env + n_add + 2, sizeof(*env));
    if (!env)
        return NULL;
    const char *add[CONF_ENV_MAX + 1];
    for (size_t i = 0; i < n_add; i++)
        add[i] = o->env[i];
    if (o->trust_own_cert && srv->tls) {
        snprintf(own_ca, own_ca_size, "SSL_CERT_FILE=%s", srv->cert_file);
        add[n_add++] = own_ca;
    }
    size_t n = 0;
    for (size_t i = 0; i < n_env; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t name_len = eq ? (size_t)(eq - environ[i]) + 1 : strlen(environ[i]);
        bool replaced = false;
        for (size_t j = 0; j < n_add && !replaced; j++)
            replaced = strncmp(environ[i], add[j], name_len) == 0;
        if (!replaced)
            env[n++] = environ[i];
    }
    for (size_t j = 0; j < n_add; j++)
        env[n++] = (char *)add[j];
    env[n] = NULL;
    return env;
}

static int spawn(struct conf_server *srv, const struct conf_server_opts *o)
{
    char addr[32], shards[16], key[300], log[300], mesh[300], http[16], own_ca[340], ports[300];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", srv->port); /* 0: the kernel picks */
    snprintf(shards, sizeof(shards), "%u", o->shards ? o->shards : 2);
    snprintf(ports, sizeof(ports), "%s/ports", srv->dir);
    snprintf(key, sizeof(key), "%s/derper.key", srv->dir);
    snprintf(log, sizeof(log), "%s/server.log", srv->dir);
    if (o->key_file && copy_file(o->key_file, key) < 0) {
        fprintf(stderr, "conf_server_start: cannot copy the key file %s\n", o->key_file);
        return -EIO;
    }
    const char *argv[CONF_ARGV_MAX];
    size_t n = 0;
    argv[n++] = CONF_BIN_DIR "/hderp-server";
    const char *fixed[] = {"-a",          addr, "-stun-port", "0",          "--shards",
                           shards,        "-c", key,          "--hash-key", CONF_HASH_KEY_HEX,
                           "--port-file", ports};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        argv[n++] = fixed[i];
    if (o->mesh_key_hex) {
        snprintf(mesh, sizeof(mesh), "%s/mesh.key", srv->dir);
        FILE *f = fopen(mesh, "w");
        if (!f || fprintf(f, "%s\n", o->mesh_key_hex) < 0 || fclose(f) != 0)
            return -EIO;
        if (derp_mesh_key_parse(o->mesh_key_hex, strlen(o->mesh_key_hex), &srv->mesh_key) != 0)
            return -EINVAL;
        argv[n++] = "-mesh-psk-file";
        argv[n++] = mesh;
    }
    if (o->keepalive) {
        argv[n++] = "--keepalive-interval";
        argv[n++] = o->keepalive;
    }
    if (o->write_timeout) {
        argv[n++] = "-tcp-write-timeout";
        argv[n++] = o->write_timeout;
    }
    if (o->tls) {
        snprintf(http, sizeof(http), "%u", srv->http_port);
        const char *name = o->tls_hostname ? o->tls_hostname : CONF_TLS_HOSTNAME;
        const char *tls[] = {"-certmode", "manual", "-certdir",   srv->dir,
                             "-hostname", name,     "-http-port", http};
        for (size_t i = 0; i < sizeof(tls) / sizeof(tls[0]); i++)
            argv[n++] = tls[i];
    }
    for (size_t i = 0; o->extra && o->extra[i] && n + 1 < CONF_ARGV_MAX; i++)
        argv[n++] = o->extra[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char **env = child_env(srv, o, own_ca, sizeof(own_ca));
    int rc = env ? posix_spawn(&srv->pid, argv[0], &fa, NULL, (char *const *)argv, env) : ENOMEM;
    free(env);
    posix_spawn_file_actions_destroy(&fa);
    if (rc == 0) {
        crash_track(srv->pid, 0);
        signal(SIGABRT, on_crash);
        signal(SIGSEGV, on_crash);
    }
    return -rc;
}

/* The port file once the server listens: "NAME 127.0.0.1:PORT" lines (kit_port_file_write). */
static int read_ports(struct conf_server *srv, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    char name[16];
    unsigned a, b, c, d, port;
    while (fscanf(f, "%15s %u.%u.%u.%u:%u", name, &a, &b, &c, &d, &port) == 6) {
        if (strcmp(name, "derp") == 0)
            srv->port = (uint16_t)port;
        else if (strcmp(name, "http") == 0)
            srv->http_port = (uint16_t)port;
        else if (strcmp(name, "stun") == 0)
            srv->stun_port = (uint16_t)port;
    }
    fclose(f);
    if (!srv->tls)
        srv->http_port = srv->port;
    return srv->port && srv->http_port ? 0 : -EPROTO;
}

/* Every shard listens once the port file exists (written after the start, renamed in whole). */
static int wait_ports(struct conf_server *srv)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/ports", srv->dir);
    int64_t deadline = conf_now_ms() + CONF_START_TIMEOUT_MS;
    while (conf_now_ms() < deadline) {
        if (access(path, R_OK) == 0)
            return read_ports(srv, path);
        if (!conf_server_alive(srv))
            return -ECHILD;
        conf_sleep_ms(CONF_POLL_MS);
    }
    return -ETIMEDOUT;
}

/* The TLS port cannot be probed in plain text, and the HTTP port redirects /derp/probe to https;
 * a shard starts its TLS listener before its HTTP one, so the HTTP port answering is enough. */
static int wait_probe(struct conf_server *srv)
{
    char resp[1024];
    const char *req = srv->tls
                          ? "GET /generate_204 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                          : "GET /derp/probe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    const char *want = srv->tls ? "HTTP/1.1 204" : "HTTP/1.1 200";
    int64_t deadline = conf_now_ms() + CONF_START_TIMEOUT_MS;
    while (conf_now_ms() < deadline) {
        if (!conf_server_alive(srv))
            return -ECHILD;
        ssize_t n = conf_http(srv, req, resp, sizeof(resp));
        if (n > 0 && strncmp(resp, want, 12) == 0)
            return 0;
        conf_sleep_ms(CONF_POLL_MS);
    }
    return -ETIMEDOUT;
}

int conf_server_start(struct conf_server *srv, const struct conf_server_opts *o)
{
    static const struct conf_server_opts none;
    memset(srv, 0, sizeof(*srv));
    if (!o)
        o = &none;
    if (derp_crypto_init() != 0)
        return -EIO;
    mkdir(CONF_WORK_DIR, 0755);
    snprintf(srv->dir, sizeof(srv->dir), "%s/srv-XXXXXX", CONF_WORK_DIR);
    if (!mkdtemp(srv->dir))
        return -errno;
    srv->tls = o->tls;
    snprintf(srv->key_file, sizeof(srv->key_file), "%s/derper.key", srv->dir);
    int rc = 0;
    srv->port = o->port;                        /* 0: the kernel picks, read back */
    srv->http_port = o->tls ? o->http_port : 0; /* likewise */
    if (o->tls)
        rc = make_cert(srv, o->tls_hostname ? o->tls_hostname : CONF_TLS_HOSTNAME);
    if (rc == 0)
        rc = spawn(srv, o);
    if (rc == 0)
        rc = wait_ports(srv);
    if (rc == 0)
        rc = wait_probe(srv);
    char err[128];
    struct derp_privkey priv;
    if (rc == 0 && (derp_key_file_load(srv->key_file, &priv, err, sizeof(err)) != 0 ||
                    derp_pubkey_from_privkey(&srv->key, &priv) != 0))
        rc = -EIO;
    if (rc != 0) {
        fprintf(stderr, "conf_server_start: %s\n", strerror(-rc));
        conf_server_dump_log(srv);
        if (srv->pid > 0)
            conf_server_kill(srv);
    }
    return rc;
}

int conf_server_kill(struct conf_server *srv)
{
    if (srv->pid <= 0)
        return -ECHILD;
    kill(srv->pid, SIGKILL);
    waitpid(srv->pid, NULL, 0);
    crash_track(0, srv->pid);
    srv->pid = 0;
    return 0;
}

/* A clean run leaves nothing behind: every file in the work dir (key, log, certificate), then
 * the dir. */
void conf_dir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[600];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

int conf_server_stop(struct conf_server *srv)
{
    int rc = conf_server_stop_keep(srv);
    if (rc == 0)
        conf_dir_remove(srv->dir);
    return rc;
}

int conf_server_stop_keep(struct conf_server *srv)
{
    if (srv->pid <= 0)
        return -ECHILD;
    kill(srv->pid, SIGTERM);
    int64_t deadline = conf_now_ms() + CONF_STOP_TIMEOUT_MS;
    int status = 0;
    pid_t p;
    while ((p = waitpid(srv->pid, &status, WNOHANG)) == 0 && conf_now_ms() < deadline)
        conf_sleep_ms(CONF_POLL_MS);
    int rc;
    if (p == 0) {
        kill(srv->pid, SIGKILL);
        waitpid(srv->pid, NULL, 0);
        rc = -ETIMEDOUT;
    } else if (p < 0) {
        rc = -errno;
    } else {
        rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    crash_track(0, srv->pid);
    srv->pid = 0;
    if (rc != 0) {
        fprintf(stderr, "conf_server_stop: status %d\n", rc);
        conf_server_dump_log(srv);
        return rc;
    }
    return 0;
}
