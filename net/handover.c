/* handover.c - handing a process's sockets to its successor: start the program's current binary
 * with one end of a unix socketpair inherited (its number in NET_HANDOVER_ENV), and messages with
 * file descriptors (SCM_RIGHTS) over it, both ways. Blocking calls with a deadline: the control
 * path of an upgrade, on a thread of the caller's (never a shard's). Owns nothing past a call.
 *
 * net_handover_spawn(argv) starts the binary /proc/self/exe names now (" (deleted)" cut off:
 * after a package replaced the file, that path holds the new binary) with posix_spawn, every
 * signal unblocked and at its default (the runtime's threads block the ones its signalfd reads),
 * and one end of a SOCK_SEQPACKET socketpair inherited; the successor finds it with
 * net_handover_inherited, which removes the variable, so its own successor gets a fresh one.
 * net_handover_send / recv move one message of at most 64 KiB with up to 64 descriptors
 * (MSG_CMSG_CLOEXEC; a truncated message closes what it carried and is -EPROTO). The app says
 * what the messages mean. The successor's shards take the sockets with net_listener_adopt and
 * net_udp_adopt instead of binding; the kernel's accept queue belongs to the shared socket, so
 * connections waiting in it are accepted by the successor, not refused. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hd/net.h>

extern char **environ;

int net_handover_exe(char *path, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", path, cap - 1);
    if (n < 0)
        return -errno;
    if ((size_t)n >= cap - 1)
        return -ENAMETOOLONG;
    path[n] = '\0';
    /* Replaced on disk (a package upgrade renames the new file over it): the link names the
     * old inode's path with this suffix, and that path now holds the new binary. */
    static const char deleted[] = " (deleted)";
    size_t dl = sizeof(deleted) - 1;
    if ((size_t)n > dl && strcmp(path + n - dl, deleted) == 0)
        path[n - dl] = '\0';
    return 0;
}

/* The environment with NET_HANDOVER_ENV=fd in front and any inherited one left out. */
static char **env_with(int fd, char *var, size_t cap)
{
    size_t n = 0, name_len = strlen(NET_HANDOVER_ENV);
    while (environ && environ[n])
        n++;
    char **env = calloc(n + 2, sizeof(*env));
    if (env == NULL)
        return NULL;
    snprintf(var, cap, "%s=%d", NET_HANDOVER_ENV, fd);
    size_t k = 0;
    env[k++] = var;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], NET_HANDOVER_ENV, name_len) != 0 || environ[i][name_len] != '=')
            env[k++] = environ[i];
    env[k] = NULL;
    return env;
}

/* posix_spawn with every signal unblocked and at its default: the caller's threads block the
 * ones their runtime reads from a signalfd, and a child would inherit that mask. */
static int spawn(const char *path, char *const argv[], char **env, pid_t *pid)
{
    posix_spawnattr_t attr;
    int rc = posix_spawnattr_init(&attr);
    if (rc != 0)
        return -rc;
    sigset_t none, dflt;
    sigemptyset(&none);
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGINT);
    sigaddset(&dflt, SIGTERM);
    sigaddset(&dflt, SIGHUP);
    sigaddset(&dflt, SIGUSR2);
    sigaddset(&dflt, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &dflt);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    rc = posix_spawn(pid, path, NULL, &attr, argv, env);
    posix_spawnattr_destroy(&attr);
    return -rc;
}

int net_handover_spawn(char *const argv[], pid_t *pid, int *sock)
{
    char path[4096];
    int rc = net_handover_exe(path, sizeof(path));
    if (rc < 0)
        return rc;
    /* The child's end without CLOEXEC, so that it survives the exec; ours gets it at once. The
     * process spawns nothing else meanwhile (upgrades are serialised by the caller). */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0)
        return -errno;
    if (fcntl(sv[0], F_SETFD, FD_CLOEXEC) < 0) {
        rc = -errno;
        goto close_both;
    }
    char var[64];
    char **env = env_with(sv[1], var, sizeof(var));
    if (env == NULL) {
        rc = -ENOMEM;
        goto close_both;
    }
    rc = spawn(path, argv, env, pid);
    free(env);
    close(sv[1]);
    if (rc < 0) {
        close(sv[0]);
        return rc;
    }
    *sock = sv[0];
    return 0;
close_both:
    close(sv[0]);
    close(sv[1]);
    return rc;
}

int net_handover_inherited(void)
{
    const char *v = getenv(NET_HANDOVER_ENV);
    if (v == NULL)
        return -ENOENT;
    char *end;
    long fd = strtol(v, &end, 10);
    unsetenv(NET_HANDOVER_ENV); /* not for our own successors: each gets its own */
    if (*v == '\0' || *end != '\0' || fd < 0 || fd > 65535)
        return -EINVAL;
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_SEQPACKET)
        return -EBADF;
    if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) < 0)
        return -errno;
    return (int)fd;
}

int net_handover_send(int sock, const void *msg, size_t len, const int *fds, unsigned fds_count)
{
    if (fds_count > NET_HANDOVER_FDS_MAX || len == 0 || len > NET_HANDOVER_MSG_MAX)
        return -EINVAL;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * NET_HANDOVER_FDS_MAX)];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fds_count > 0) {
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds_count);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * fds_count);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * fds_count);
    }
    ssize_t n;
    do
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == ECONNRESET ? -EPIPE : -errno; /* the peer is gone either way */
    return (size_t)n == len ? 0 : -EIO;
}

/* The descriptors a message carried; every one is closed when the message is refused. */
static int take_fds(struct msghdr *mh, int *fds, unsigned cap, unsigned *count)
{
    *count = 0;
    int rc = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        unsigned n = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (unsigned i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
            if (*count < cap)
                fds[(*count)++] = fd;
            else
                close(fd), rc = -EPROTO;
        }
    }
    if (mh->msg_flags & (MSG_CTRUNC | MSG_TRUNC))
        rc = -EPROTO;
    if (rc < 0)
        while (*count > 0)
            close(fds[--*count]);
    return rc;
}

ssize_t net_handover_recv(int sock, void *msg, size_t cap, int *fds, unsigned *fds_count,
                          int timeout_ms)
{
    struct pollfd p = {.fd = sock, .events = POLLIN};
    int pr;
    do
        pr = poll(&p, 1, timeout_ms);
    while (pr < 0 && errno == EINTR);
    if (pr < 0)
        return -errno;
    if (pr == 0)
        return -ETIMEDOUT;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * NET_HANDOVER_FDS_MAX)];
    } ctl;
    struct iovec iov = {.iov_base = msg, .iov_len = cap};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl)};
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == ECONNRESET ? -EPIPE : -errno; /* it exited with our messages unread */
    if (n == 0)
        return -EPIPE; /* the other side closed (or exited) */
    unsigned got = 0;
    int rc = take_fds(&mh, fds, fds ? NET_HANDOVER_FDS_MAX : 0, &got);
    if (rc < 0)
        return rc;
    if (fds_count)
        *fds_count = got;
    return n;
}
