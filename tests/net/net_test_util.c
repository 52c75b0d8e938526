/* net_test_util.c - see net_test_util.h. Test threads only. */
#include "net_test_util.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

uint16_t nt_port_hold(void)
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

int nt_loopback_pair(int bufsize, int *net_fd, int *peer_fd)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int p = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fd = -1;
    int rc = l >= 0 && p >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                     listen(l, 1) == 0 && getsockname(l, (struct sockaddr *)&a, &alen) == 0 &&
                     (bufsize <= 0 ||
                      setsockopt(p, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof(bufsize)) == 0) &&
                     connect(p, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                     (fd = accept(l, NULL, NULL)) >= 0 &&
                     (bufsize <= 0 ||
                      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof(bufsize)) == 0)
                 ? 0
                 : -errno;
    if (l >= 0)
        close(l);
    if (rc < 0) {
        if (p >= 0)
            close(p);
        if (fd >= 0)
            close(fd);
        return rc;
    }
    *net_fd = fd;
    *peer_fd = p;
    return 0;
}
