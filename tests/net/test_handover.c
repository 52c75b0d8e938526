/* test_handover.c - the process hand-over's messages (net_handover_send / recv) over a real
 * SOCK_SEQPACKET socketpair: descriptors arrive usable and close-on-exec, a message longer than
 * the reader's buffer is -EPROTO with its descriptors closed, descriptors to a reader that
 * takes none are refused, silence is -ETIMEDOUT and a closed peer -EPIPE;
 * net_handover_inherited reads and removes the environment variable; net_handover_spawn starts
 * the binary /proc/self/exe names (this test) and the child finds the socket. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hd/net.h>

static void pair(int sv[2])
{
    cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

Test(handover, descriptors_arrive)
{
    int sv[2], p[2];
    pair(sv);
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(net_handover_send(sv[0], "hello", 5, p, 2), 0);
    char buf[16];
    int fds[NET_HANDOVER_FDS_MAX];
    unsigned n = 0;
    cr_assert_eq(net_handover_recv(sv[1], buf, sizeof(buf), fds, &n, 1000), 5);
    cr_assert(memcmp(buf, "hello", 5) == 0);
    cr_assert_eq(n, 2);
    cr_assert(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
    cr_assert_eq(write(fds[1], "x", 1), 1); /* the pipe's write end, through the message */
    char c = 0;
    cr_assert_eq(read(p[0], &c, 1), 1);
    cr_assert_eq(c, 'x');
    for (int i = 0; i < 2; i++)
        close(fds[i]), close(p[i]);
    close(sv[0]);
    close(sv[1]);
}

Test(handover, refused_and_truncated_close_what_came)
{
    int sv[2], p[2];
    pair(sv);
    cr_assert_eq(pipe(p), 0);
    char buf[4];
    int fds[NET_HANDOVER_FDS_MAX];
    unsigned n = 0;
    cr_assert_eq(net_handover_send(sv[0], "too long", 8, &p[1], 1), 0);
    cr_assert_eq(net_handover_recv(sv[1], buf, sizeof(buf), fds, &n, 1000), -EPROTO);
    cr_assert_eq(net_handover_send(sv[0], "fd", 2, &p[1], 1), 0);
    cr_assert_eq(net_handover_recv(sv[1], buf, sizeof(buf), NULL, NULL, 1000), -EPROTO);
    close(p[1]); /* ours; the copies the messages carried were closed by the reader */
    char c;
    cr_assert_eq(read(p[0], &c, 1), 0, "a carried copy of the write end is still open");
    cr_assert_eq(net_handover_send(sv[0], "x", 0, NULL, 0), -EINVAL);
    cr_assert_eq(net_handover_recv(sv[1], buf, sizeof(buf), fds, &n, 20), -ETIMEDOUT);
    close(sv[0]);
    cr_assert_eq(net_handover_recv(sv[1], buf, sizeof(buf), fds, &n, 1000), -EPIPE);
    close(sv[1]);
    close(p[0]);
}

Test(handover, inherited_reads_and_clears_the_variable)
{
    cr_assert_eq(unsetenv(NET_HANDOVER_ENV), 0);
    cr_assert_eq(net_handover_inherited(), -ENOENT);
    cr_assert_eq(setenv(NET_HANDOVER_ENV, "x1", 1), 0);
    cr_assert_eq(net_handover_inherited(), -EINVAL);
    cr_assert_null(getenv(NET_HANDOVER_ENV));
    int sv[2];
    pair(sv);
    char v[16];
    snprintf(v, sizeof(v), "%d", sv[1]);
    cr_assert_eq(setenv(NET_HANDOVER_ENV, v, 1), 0);
    cr_assert_eq(net_handover_inherited(), sv[1]);
    cr_assert_null(getenv(NET_HANDOVER_ENV));
    cr_assert_eq(setenv(NET_HANDOVER_ENV, "0", 1), 0); /* stdin: not a SEQPACKET socket */
    cr_assert_eq(net_handover_inherited(), -EBADF);
    close(sv[0]);
    close(sv[1]);
}

/* The spawned copy of this binary: main below answers on the inherited socket. */
#define CHILD_ARG "--handover-child"

Test(handover, spawn_starts_this_binary_with_the_socket)
{
    char exe[4096];
    cr_assert_eq(net_handover_exe(exe, sizeof(exe)), 0);
    char *argv[] = {exe, CHILD_ARG, NULL};
    pid_t pid;
    int sock;
    cr_assert_eq(net_handover_spawn(argv, &pid, &sock), 0);
    cr_assert(fcntl(sock, F_GETFD) & FD_CLOEXEC);
    char buf[32];
    ssize_t n = net_handover_recv(sock, buf, sizeof(buf), NULL, NULL, 10000);
    cr_assert_eq(n, 5, "the child said %zd", n);
    cr_assert(memcmp(buf, "ready", 5) == 0);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(sock);
}

/* Criterion's own main, unless this is the child started by the spawn test. */
static int child_main(void)
{
    int fd = net_handover_inherited();
    if (fd < 0 || getenv(NET_HANDOVER_ENV) != NULL)
        return 3;
    return net_handover_send(fd, "ready", 5, NULL, 0) == 0 ? 0 : 4;
}

__attribute__((constructor)) static void maybe_child(void)
{
    FILE *f = fopen("/proc/self/cmdline", "re");
    if (f == NULL)
        return;
    char cmd[4096];
    size_t n = fread(cmd, 1, sizeof(cmd) - 1, f);
    fclose(f);
    cmd[n] = '\0';
    size_t first = strlen(cmd);
    if (first + 1 < n && strcmp(cmd + first + 1, CHILD_ARG) == 0)
        _exit(child_main());
}
