/* server_upgrade.c - the zero-downtime upgrade, both roles. The running server, on SIGUSR2,
 * starts its binary again (net_handover_spawn: the file on disk now, the same argv) on a thread
 * of its own, sends it every listening socket (the claims of -a and -http-port, each shard's -a
 * and -http-port listeners and STUN socket) and waits for READY; then it stops, and the kernel
 * queues of the shared sockets carry on in the successor: no connection is refused. A successor
 * that cannot start, exits or stays silent past --upgrade-timeout is killed and the old process
 * serves on. The successor receives the sockets in main, before its runtime (its shards adopt
 * them instead of binding), and says READY once every shard accepts. The protocol is in
 * docs/ARCHITECTURE.md ("Upgrades"). Main thread and the upgrade thread; the slots are written
 * by each shard's shard_init (its own) before the main thread reads them.
 *
 * Old process: --pid-file is written (a temporary name, then a rename) once the shards run; a
 * successor rewrites it, and only the process it names removes it at exit. on_signal (main
 * thread) duplicates the sockets the shards noted when they started (srv_upgrade_note) and the
 * two claims, and starts the upgrade thread (one at a time; a SIGUSR2 meanwhile is logged and
 * ignored), which sends one FD message per socket, then END. READY within --upgrade-timeout
 * (30 s) makes it post to every shard: stop accepting (net_listener_drain: its own descriptors
 * only, and what the kernel had already accepted for it is still served) and stop STUN. Once
 * every shard answered twice it sends STOPPED: io_uring's accepts wait exclusively, so a wake-up
 * the kernel gave an accept the old process then cancelled would leave a connection waiting;
 * the successor re-arms every accept (net_listener_kick) on STOPPED and again when the old
 * process's end of the socket closes. The logged-in clients then move (server_upgrade_live.c);
 * the old process tells systemd MAINPID=<new> (when NOTIFY_SOCKET is set) and stops the runtime.
 * Connections not logged in yet (an HTTP request, a TLS handshake, a DERP login, an admission
 * answer pending) get SRV_UPGRADE_PRELOGIN_GRACE_MS to finish, then are closed by that stop and
 * logged; their clients connect again, to the successor. A successor whose READY lacks bit 1
 * (one that takes sockets only) gets no clients: they are closed at the stop and reconnect, as
 * at a derper restart. Failures leave the old process serving, logged with the reason: the
 * binary cannot be started (posix_spawn), the successor exits before READY (its exit code is
 * logged), or it is silent past --upgrade-timeout (killed by its PID with SIGKILL and reaped).
 * A SIGTERM while the thread waits shuts its socket down, which counts as the successor failing.
 *
 * Successor: main, after the flags and the configuration and before the runtime, finds the
 * inherited socket (net_handover_inherited), receives every socket and takes the claims (so the
 * claim does not refuse our own hand-over: the successor holds the very claim sockets and claims
 * nothing itself). A bad message, another version, a duplicate slot or no END within 10 s makes
 * it exit, and the old process serves on. Each shard's shard_init takes its slot's listener and
 * STUN socket (srv_upgrade_take, then net_listener_adopt / net_udp_adopt; the socket options
 * travel with the socket) or, with more shards than the old process had, binds its own
 * (SO_REUSEPORT joins the group); sockets no shard took are closed and logged (their queued
 * connections are reset). Once hd_runtime_start returned it writes the pid file and says READY. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server.h"
#include "upgrade/server_upgrade_impl.h"

/* The attempt's state changes, each one the table allows (u->lock held). */
static void up_state_set_locked(struct srv_upgrade *u, enum up_state to)
{
#define UP_BIT(st) (1u << UP_##st)
    static const uint8_t allowed[UP_STATES] = {
        [UP_IDLE] = UP_BIT(SPAWNING),
        [UP_SPAWNING] = UP_BIT(SENDING) | UP_BIT(IDLE),
        [UP_SENDING] = UP_BIT(HANDING_OVER) | UP_BIT(IDLE),
        [UP_HANDING_OVER] = UP_BIT(STOPPED),
        [UP_STOPPED] = 0,
    };
#undef UP_BIT
    HD_ASSERT(u->state < UP_STATES && to < UP_STATES);
    HD_ASSERT(allowed[u->state] & (1u << to));
    u->state = to;
}

static void up_state_set(struct srv_upgrade *u, enum up_state to)
{
    pthread_mutex_lock(&u->lock);
    up_state_set_locked(u, to);
    pthread_mutex_unlock(&u->lock);
}

int srv_upgrade_init(struct srv_config *cfg, char **argv, const char *pid_file, uint32_t timeout_ms)
{
    struct srv_upgrade *u = calloc(1, sizeof(*u));
    if (u == NULL)
        return -ENOMEM;
    u->argv = argv;
    u->pid_file = pid_file;
    u->timeout_ms = timeout_ms;
    u->sock = -1;
    u->thread_sock = -1;
    for (unsigned k = 0; k < SRV_UP_KINDS; k++)
        for (unsigned i = 0; i < SRV_UPGRADE_SLOTS; i++)
            u->slots[k][i] = u->got[k][i] = u->dups[k][i] = -1;
    pthread_mutex_init(&u->lock, NULL);
    pthread_cond_init(&u->answered, NULL);
    pthread_cond_init(&u->live_cv, NULL);
    u->live_tail = &u->live_head;
    u->rx_fd = -1;
    cfg->upgrade = u;
    return 0;
}

struct up_msg msg_make(uint8_t type, uint8_t kind, uint32_t index, uint32_t value)
{
    return (struct up_msg){.magic = SRV_UPGRADE_MAGIC,
                           .version = SRV_UPGRADE_VERSION,
                           .type = type,
                           .kind = kind,
                           .index = index,
                           .value = value};
}

/* One message from the predecessor into the slots: 1 (END), 0 (a descriptor), -EPROTO. */
static int receive_one(struct srv_upgrade *u, unsigned *got)
{
    struct up_msg m;
    int fds[NET_HANDOVER_FDS_MAX];
    unsigned n = 0;
    ssize_t len = net_handover_recv(u->sock, &m, sizeof(m), fds, &n, SRV_UPGRADE_RECV_MS);
    if (len < 0)
        return (int)len;
    int rc = 0;
    if ((size_t)len != sizeof(m) || m.magic != SRV_UPGRADE_MAGIC ||
        m.version != SRV_UPGRADE_VERSION)
        rc = -EPROTO;
    else if (m.type == MSG_END)
        rc = n == 0 && m.value == *got ? 1 : -EPROTO;
    else if (m.type != MSG_FD || n != 1 || m.kind >= SRV_UP_KINDS || m.index >= SRV_UPGRADE_SLOTS ||
             u->got[m.kind][m.index] >= 0 || (m.kind == SRV_UP_CLAIM && m.index >= 2))
        rc = -EPROTO;
    if (rc == 0) {
        u->got[m.kind][m.index] = fds[0];
        (*got)++;
        return 0;
    }
    for (unsigned i = 0; i < n; i++)
        close(fds[i]);
    return rc;
}

/* Port 0 in the flags (the kernel picked): the ports are the inherited sockets' (shard 0's), so
 * the start-up line and --port-file name them, as the predecessor's did. */
static void port_of(int fd, struct net_addr *a)
{
    struct net_addr b = {.len = sizeof(b.ss)};
    if (fd >= 0 && getsockname(fd, &b.sa, &b.len) == 0 && b.sa.sa_family == a->sa.sa_family)
        *a = b;
}

static void ports_from_sockets(struct srv_config *cfg, struct srv_upgrade *u)
{
    if (net_addr_port(&cfg->addr) == 0) {
        port_of(u->got[SRV_UP_LISTEN][0], &cfg->addr);
        net_addr_format(&cfg->addr, cfg->addr_text, sizeof(cfg->addr_text));
    }
    if (cfg->tls && cfg->http_port == 0) {
        port_of(u->got[SRV_UP_HTTP][0], &cfg->http_addr);
        cfg->http_port = net_addr_port(&cfg->http_addr);
    }
    if (cfg->stun && cfg->stun_port == 0) {
        struct net_addr a = {.len = sizeof(a.ss)};
        if (u->got[SRV_UP_STUN][0] >= 0 && getsockname(u->got[SRV_UP_STUN][0], &a.sa, &a.len) == 0)
            cfg->stun_port = net_addr_port(&a);
    }
}

int srv_upgrade_receive(struct srv_config *cfg)
{
    struct srv_upgrade *u = cfg->upgrade;
    int fd = net_handover_inherited();
    if (fd == -ENOENT)
        return 0;
    if (fd < 0) {
        hd_log(HD_LOG_ERROR, "upgrade: bad %s: %s", NET_HANDOVER_ENV, strerror(-fd));
        return -1;
    }
    u->sock = fd;
    u->inherited = true;
    unsigned got = 0;
    int rc;
    while ((rc = receive_one(u, &got)) == 0)
        ;
    if (rc < 0) {
        hd_log(HD_LOG_ERROR, "upgrade: receiving the sockets from PID %d failed after %u: %s",
               (int)getppid(), got, strerror(-rc));
        return -1;
    }
    hd_log(HD_LOG_INFO, "upgrade: received %u sockets from PID %d", got, (int)getppid());
    ports_from_sockets(cfg, u);
    for (unsigned i = 0; i < 2; i++) { /* the claims are ours now, for our own successor */
        u->slots[SRV_UP_CLAIM][i] = u->got[SRV_UP_CLAIM][i];
        u->got[SRV_UP_CLAIM][i] = -1;
    }
    return 1;
}

void srv_upgrade_claims(struct srv_config *cfg, const int claims[2])
{
    for (unsigned i = 0; i < 2; i++)
        cfg->upgrade->slots[SRV_UP_CLAIM][i] = claims[i];
}

int srv_upgrade_take(const struct srv_config *cfg, enum srv_upgrade_kind kind, unsigned shard)
{
    struct srv_upgrade *u = cfg->upgrade;
    if (u == NULL || shard >= SRV_UPGRADE_SLOTS || !u->inherited)
        return -1;
    int fd = u->got[kind][shard];
    u->got[kind][shard] = -1;
    return fd;
}

void srv_upgrade_note(const struct srv_config *cfg, enum srv_upgrade_kind kind, unsigned shard,
                      int fd)
{
    struct srv_upgrade *u = cfg->upgrade;
    if (u != NULL && shard < SRV_UPGRADE_SLOTS && kind != SRV_UP_CLAIM)
        u->slots[kind][shard] = fd;
}

static void pid_file_write(const struct srv_upgrade *u)
{
    if (u->pid_file == NULL)
        return;
    char tmp[4200], text[32];
    snprintf(tmp, sizeof(tmp), "%s.tmp", u->pid_file);
    int n = snprintf(text, sizeof(text), "%d\n", (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, text, (size_t)n) != n || rename(tmp, u->pid_file) < 0)
        hd_log(HD_LOG_ERROR, "--pid-file %s: cannot write it: %s", u->pid_file, strerror(errno));
    if (fd >= 0)
        close(fd);
}

/* systemd (Type=notify): the service's main process is now pid. Without NOTIFY_SOCKET, nothing. */
static void notify_systemd(const char *text)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || (path[0] != '/' && path[0] != '@') || strlen(path) >= 108)
        return;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path));
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* an abstract socket */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    if (sendto(fd, text, strlen(text), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
        hd_log(HD_LOG_WARN, "systemd notify (%s): %s", text, strerror(errno));
    close(fd);
}

static unsigned srv_instance(const struct srv_config *cfg, struct hd_runtime *rt)
{
    int idx = hd_runtime_module_index(rt, &srv_module, cfg);
    return idx >= 0 ? (unsigned)idx : 0;
}

static void kick_here(struct hd_shard *s, void *arg);

/* The successor: once the old process stopped accepting (STOPPED) and again once it is gone
 * (the socket's end), every listener's accept is armed anew (net_listener_kick). */
static void *watch_thread(void *arg)
{
    struct srv_upgrade *u = arg;
    static uint8_t buf[NET_HANDOVER_MSG_MAX]; /* one watch thread per process */
    for (;;) {
        int fds[NET_HANDOVER_FDS_MAX];
        unsigned fds_count = 0;
        ssize_t n = net_handover_recv(u->sock, buf, sizeof(buf), fds, &fds_count, -1);
        struct up_msg m;
        if (n >= (ssize_t)sizeof(m) &&
            srv_upgrade_live_recv(u, buf, (size_t)n, fds, fds_count)) /* a client's part */
            continue;
        for (unsigned i = 0; i < fds_count; i++)
            close(fds[i]);
        ask_shards_async(u, kick_here);
        if (n >= 0 && (size_t)n == sizeof(m))
            memcpy(&m, buf, sizeof(m));
        if (n < 0 || (size_t)n != sizeof(m) || m.type != MSG_STOPPED)
            break;
    }
    srv_upgrade_live_recv(u, NULL, 0, NULL, 0); /* the predecessor is gone: what it sent */
    return NULL;
}

void srv_upgrade_started(struct srv_config *cfg, struct hd_runtime *rt)
{
    struct srv_upgrade *u = cfg->upgrade;
    if (u == NULL)
        return;
    pid_file_write(u);
    if (!u->inherited) {
        notify_systemd("READY=1");
        return;
    }
    unsigned unused = 0;
    for (unsigned k = 0; k < SRV_UP_KINDS; k++)
        for (unsigned i = 0; i < SRV_UPGRADE_SLOTS; i++)
            if (u->got[k][i] >= 0) {
                close(u->got[k][i]), u->got[k][i] = -1;
                unused++;
            }
    if (unused > 0) /* the old process ran more shards: those sockets' queues are reset */
        hd_log(HD_LOG_WARN, "upgrade: %u sockets of the old process unused (it had more shards)",
               unused);
    struct up_msg m = msg_make(MSG_READY, UP_READY_TAKES_CLIENTS, 0, (uint32_t)getpid());
    int rc = net_handover_send(u->sock, &m, sizeof(m), NULL, 0);
    if (rc < 0) {
        hd_log(HD_LOG_ERROR, "upgrade: cannot tell PID %d we accept: %s", (int)getppid(),
               strerror(-rc));
        close(u->sock);
        u->sock = -1;
        return;
    }
    hd_log(HD_LOG_INFO, "upgrade: accepting; told PID %d to stop", (int)getppid());
    u->rt = rt;
    u->instance = srv_instance(cfg, rt);
    pthread_mutex_lock(&u->lock);
    u->thread_sock = u->sock;
    u->joinable = pthread_create(&u->thread, NULL, watch_thread, u) == 0;
    pthread_mutex_unlock(&u->lock);
}

/* ---------------------------------------------------------------- the predecessor */

static void dups_close(struct srv_upgrade *u)
{
    for (unsigned k = 0; k < SRV_UP_KINDS; k++)
        for (unsigned i = 0; i < SRV_UPGRADE_SLOTS; i++)
            if (u->dups[k][i] >= 0)
                close(u->dups[k][i]), u->dups[k][i] = -1;
}

static int send_all(struct srv_upgrade *u, int sock)
{
    unsigned sent = 0;
    for (unsigned k = 0; k < SRV_UP_KINDS; k++)
        for (unsigned i = 0; i < SRV_UPGRADE_SLOTS; i++) {
            if (u->dups[k][i] < 0)
                continue;
            struct up_msg m = msg_make(MSG_FD, (uint8_t)k, i, 0);
            int rc = net_handover_send(sock, &m, sizeof(m), &u->dups[k][i], 1);
            if (rc < 0)
                return rc;
            sent++;
        }
    struct up_msg end = msg_make(MSG_END, 0, 0, sent);
    int rc = net_handover_send(sock, &end, sizeof(end), NULL, 0);
    return rc < 0 ? rc : (int)sent;
}

/* READY from pid within the timeout: 0, or -errno (-EPIPE: it closed or exited). */
static int wait_ready(struct srv_upgrade *u, int sock, pid_t pid)
{
    struct up_msg m;
    ssize_t n = net_handover_recv(sock, &m, sizeof(m), NULL, NULL, (int)u->timeout_ms);
    if (n < 0)
        return (int)n;
    u->takes_clients = (size_t)n == sizeof(m) && (m.kind & UP_READY_TAKES_CLIENTS);
    if ((size_t)n != sizeof(m) || m.magic != SRV_UPGRADE_MAGIC || m.type != MSG_READY ||
        m.value != (uint32_t)pid)
        return -EPROTO;
    return 0;
}

/* The successor failed: make sure it is gone and say how it ended. */
static void reap_failed(pid_t pid, int rc)
{
    int status = 0;
    kill(pid, SIGKILL); /* our own child, by its pid (unreaped, so never another process) */
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    char how[64];
    if (WIFEXITED(status))
        snprintf(how, sizeof(how), "exit code %d", WEXITSTATUS(status));
    else
        snprintf(how, sizeof(how), "signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    hd_log(HD_LOG_ERROR,
           "upgrade: new process PID %d failed (%s; it ended with %s): this process keeps "
           "serving",
           (int)pid,
           rc == -ETIMEDOUT ? "not accepting within --upgrade-timeout"
           : rc == -EPIPE   ? "it exited before accepting"
                            : strerror(-rc),
           how);
}

/* On each shard: its connections not logged in yet, into the sum the thread waits for. */
void count_here(struct hd_shard *s, void *arg)
{
    struct srv_upgrade *u = arg;
    struct srv_shard *ds = srv_shard_at(s, u->instance);
    pthread_mutex_lock(&u->lock);
    u->prelogin += ds ? ds->prelogin.count : 0;
    u->answers++;
    pthread_cond_signal(&u->answered);
    pthread_mutex_unlock(&u->lock);
}

/* On each shard: stop accepting (what the kernel already took for us is still served: the
 * successor accepts the rest), stop STUN; then say what is left. */
static void quiesce_here(struct hd_shard *s, void *arg)
{
    struct srv_upgrade *u = arg;
    struct srv_shard *ds = srv_shard_at(s, u->instance);
    if (ds && ds->listener)
        net_listener_drain(ds->listener);
    if (ds && ds->http_listener)
        net_listener_drain(ds->http_listener);
    if (ds) {
        ds->listener = ds->http_listener = NULL;
        if (ds->stun) /* as the listeners: the successor has its socket */
            net_udp_close(ds->stun);
        ds->stun = NULL;
    }
    count_here(s, arg);
}

/* Run fn on every shard and wait for each to answer: the shards' pre-login connections. */
uint64_t ask_shards(struct srv_upgrade *u, hd_post_fn *fn)
{
    unsigned n = hd_runtime_shards_count(u->rt), posted = 0;
    pthread_mutex_lock(&u->lock);
    u->answers = 0;
    u->prelogin = 0;
    pthread_mutex_unlock(&u->lock);
    for (unsigned i = 0; i < n; i++)
        for (unsigned t = 0; t < SRV_UPGRADE_POST_TRIES; t++) {
            int rc = hd_runtime_post(u->rt, i, fn, u);
            if (rc == 0)
                posted++;
            if (rc != -EAGAIN) /* posted, or the shard has stopped */
                break;
            usleep(SRV_UPGRADE_POST_RETRY_MS * 1000);
        }
    pthread_mutex_lock(&u->lock);
    while (u->answers < posted)
        pthread_cond_wait(&u->answered, &u->lock);
    uint64_t left = u->prelogin; /* a shard we could not ask has stopped */
    pthread_mutex_unlock(&u->lock);
    return left;
}

static void kick_here(struct hd_shard *s, void *arg)
{
    struct srv_upgrade *u = arg;
    struct srv_shard *ds = srv_shard_at(s, u->instance);
    if (ds && ds->listener)
        net_listener_kick(ds->listener);
    if (ds && ds->http_listener)
        net_listener_kick(ds->http_listener);
}

/* fn on every shard, not waiting for it (a full inbox is retried, a stopped shard skipped). */
void ask_shards_async(struct srv_upgrade *u, hd_post_fn *fn)
{
    for (unsigned i = 0; i < hd_runtime_shards_count(u->rt); i++)
        for (unsigned t = 0; t < SRV_UPGRADE_POST_TRIES; t++) {
            if (hd_runtime_post(u->rt, i, fn, u) != -EAGAIN)
                break;
            usleep(SRV_UPGRADE_POST_RETRY_MS * 1000);
        }
}

/* READY came: stop accepting everywhere, hand the logged-in clients over, then stop. The
 * connections not logged in yet (an HTTP request, a TLS handshake, a DERP login) do not hold the
 * hand-over: they get SRV_UPGRADE_PRELOGIN_GRACE_MS to finish (a request in flight is answered,
 * a login that ends meanwhile is handed over too), then are closed with the stop (issue 24: 300
 * connections dripping an HTTP head kept 2,002 clients' hand-over waiting until their 30 s
 * deadline). Their clients connect again, to the successor, which has been accepting since
 * READY; one caught in the middle of its login retries as after a lost connection. */
static void hand_over_and_stop(struct srv_upgrade *u, int sock, pid_t pid, int sent)
{
    ask_shards(u, quiesce_here);
    /* Asked again: by now every shard has had a tick to see its accepts cancelled. */
    uint64_t left = ask_shards(u, count_here);
    struct up_msg m = msg_make(MSG_STOPPED, 0, 0, 0);
    net_handover_send(sock, &m, sizeof(m), NULL, 0); /* the successor re-arms its accepts */
    hd_log(HD_LOG_INFO,
           "upgrade: PID %d accepts on the %d sockets handed over: this process stopped "
           "accepting; %llu connections of it are not logged in yet",
           (int)pid, sent, (unsigned long long)left);
    if (u->takes_clients)
        srv_upgrade_live_send(u, sock); /* every logged-in client, then BATCH */
    else                                /* an older version: they reconnect, as after a restart */
        hd_log(HD_LOG_WARN,
               "upgrade: PID %d does not take logged-in clients: they are closed "
               "when this process stops and reconnect",
               (int)pid);
    for (unsigned waited = 0; left > 0 && waited < SRV_UPGRADE_PRELOGIN_GRACE_MS;
         waited += SRV_UPGRADE_GRACE_POLL_MS) {
        usleep(SRV_UPGRADE_GRACE_POLL_MS * 1000);
        left = ask_shards(u, count_here);
    }
    if (u->takes_clients)
        srv_upgrade_live_finish(u, sock, pid); /* those that logged in since, DONE, TOOK */
    left = ask_shards(u, count_here);
    hd_log(HD_LOG_INFO,
           "upgrade: stopping: %llu connections not logged in yet are closed (they connect "
           "again, to PID %d)",
           (unsigned long long)left, (int)pid);
    char text[32];
    snprintf(text, sizeof(text), "MAINPID=%d", (int)pid);
    notify_systemd(text);
    hd_runtime_stop(u->rt);
}

static void *upgrade_thread(void *arg)
{
    struct srv_upgrade *u = arg;
    char exe[4096] = "?";
    net_handover_exe(exe, sizeof(exe));
    pid_t pid;
    int sock;
    int rc = net_handover_spawn(u->argv, &pid, &sock);
    if (rc < 0) {
        hd_log(HD_LOG_ERROR, "upgrade: cannot start %s: %s: this process keeps serving", exe,
               strerror(-rc));
        goto done;
    }
    pthread_mutex_lock(&u->lock);
    u->thread_sock = sock;
    up_state_set_locked(u, UP_SENDING);
    pthread_mutex_unlock(&u->lock);
    hd_log(HD_LOG_INFO, "upgrade: started %s as PID %d", exe, (int)pid);
    int sent = send_all(u, sock);
    rc = sent < 0 ? sent : wait_ready(u, sock, pid);
    if (rc < 0) {
        reap_failed(pid, rc);
    } else {
        up_state_set(u, UP_HANDING_OVER);
        hand_over_and_stop(u, sock, pid, sent);
        up_state_set(u, UP_STOPPED);
    }
    pthread_mutex_lock(&u->lock);
    u->thread_sock = -1;
    pthread_mutex_unlock(&u->lock);
    close(sock);
done:
    dups_close(u);
    pthread_mutex_lock(&u->lock);
    if (u->state != UP_STOPPED) /* failed: this process serves on, and may try again */
        up_state_set_locked(u, UP_IDLE);
    pthread_mutex_unlock(&u->lock);
    return NULL;
}

void srv_upgrade_signal(struct srv_config *cfg, struct hd_runtime *rt)
{
    struct srv_upgrade *u = cfg->upgrade;
    if (u == NULL)
        return;
    pthread_mutex_lock(&u->lock);
    if (u->state != UP_IDLE) {
        enum up_state st = u->state;
        pthread_mutex_unlock(&u->lock);
        hd_log(HD_LOG_WARN, "upgrade: SIGUSR2 while %s: ignored",
               st == UP_STOPPED ? "this process stops after an upgrade" : "an upgrade runs");
        return;
    }
    if (u->joinable)
        pthread_join(u->thread, NULL); /* the last attempt's thread, finished */
    u->joinable = false;
    /* Our own copies: the shards keep theirs until the runtime stops. */
    for (unsigned k = 0; k < SRV_UP_KINDS; k++)
        for (unsigned i = 0; i < SRV_UPGRADE_SLOTS; i++)
            u->dups[k][i] = u->slots[k][i] >= 0 ? fcntl(u->slots[k][i], F_DUPFD_CLOEXEC, 3) : -1;
    u->rt = rt;
    u->instance = srv_instance(cfg, rt);
    up_state_set_locked(u, UP_SPAWNING); /* before the thread: it moves on from there */
    int rc = pthread_create(&u->thread, NULL, upgrade_thread, u);
    u->joinable = rc == 0;
    if (rc != 0)
        up_state_set_locked(u, UP_IDLE);
    pthread_mutex_unlock(&u->lock);
    if (rc == 0)
        return;
    hd_log(HD_LOG_ERROR, "upgrade: no thread: %s", strerror(rc));
    dups_close(u);
}

void srv_upgrade_stop(struct srv_config *cfg)
{
    struct srv_upgrade *u = cfg->upgrade;
    if (u == NULL)
        return;
    pthread_mutex_lock(&u->lock);
    if (u->thread_sock >= 0) /* waiting for a successor, or watching a predecessor: give up */
        shutdown(u->thread_sock, SHUT_RDWR);
    bool join = u->joinable;
    u->joinable = false;
    pthread_mutex_unlock(&u->lock);
    if (join)
        pthread_join(u->thread, NULL);
}

void srv_upgrade_fini(struct srv_config *cfg)
{
    struct srv_upgrade *u = cfg->upgrade;
    if (u == NULL)
        return;
    srv_upgrade_stop(cfg);
    for (unsigned i = 0; i < 2; i++)
        if (u->slots[SRV_UP_CLAIM][i] >= 0)
            close(u->slots[SRV_UP_CLAIM][i]);
    for (unsigned k = 0; k < SRV_UP_KINDS; k++) /* inherited, never taken (a failed start) */
        for (unsigned i = 0; i < SRV_UPGRADE_SLOTS; i++)
            if (u->got[k][i] >= 0)
                close(u->got[k][i]);
    if (u->sock >= 0)
        close(u->sock);
    if (u->pid_file && srv_upgrade_pid_read(u->pid_file) == (long)getpid())
        unlink(u->pid_file);
    pthread_cond_destroy(&u->answered);
    pthread_cond_destroy(&u->live_cv);
    srv_upgrade_live_fini(u);
    pthread_mutex_destroy(&u->lock);
    free(u);
    cfg->upgrade = NULL;
}
