/* addr.c - numeric socket addresses: parse "host:port", "[v6]:port", ":port", "port"; format.
 * Pure functions, any thread. */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/net.h>

static int parse_port(const char *p, uint16_t *out)
{
    if (*p == '\0')
        return -EINVAL;
    unsigned long v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > 65535)
            return -EINVAL;
    }
    *out = (uint16_t)v;
    return 0;
}

int net_addr_parse(const char *text, struct net_addr *out)
{
    char host[64];
    const char *port;
    memset(out, 0, sizeof(*out));
    if (text[0] == '[') {
        const char *end = strchr(text, ']');
        if (!end || end[1] != ':' || (size_t)(end - text - 1) >= sizeof(host))
            return -EINVAL;
        memcpy(host, text + 1, (size_t)(end - text - 1));
        host[end - text - 1] = '\0';
        port = end + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (colon == NULL) {
            host[0] = '\0';
            port = text;
        } else {
            if (strchr(text, ':') != colon || (size_t)(colon - text) >= sizeof(host))
                return -EINVAL; /* bare IPv6 without brackets is ambiguous */
            memcpy(host, text, (size_t)(colon - text));
            host[colon - text] = '\0';
            port = colon + 1;
        }
    }
    uint16_t p;
    if (parse_port(port, &p) < 0)
        return -EINVAL;
    if (host[0] == '\0') { /* every address: IPv6 wildcard, dual-stack */
        out->in6.sin6_family = AF_INET6;
        out->in6.sin6_addr = in6addr_any;
        out->in6.sin6_port = htons(p);
        out->len = sizeof(out->in6);
        return 0;
    }
    if (inet_pton(AF_INET, host, &out->in4.sin_addr) == 1) {
        out->in4.sin_family = AF_INET;
        out->in4.sin_port = htons(p);
        out->len = sizeof(out->in4);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &out->in6.sin6_addr) == 1) {
        out->in6.sin6_family = AF_INET6;
        out->in6.sin6_port = htons(p);
        out->len = sizeof(out->in6);
        return 0;
    }
    return -EINVAL;
}

const char *net_addr_format(const struct net_addr *a, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN];
    if (a->sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &a->in4.sin_addr, host, sizeof(host));
        snprintf(buf, size, "%s:%u", host, ntohs(a->in4.sin_port));
    } else if (a->sa.sa_family == AF_INET6) {
        if (IN6_IS_ADDR_V4MAPPED(&a->in6.sin6_addr))
            inet_ntop(AF_INET, &a->in6.sin6_addr.s6_addr[12], host, sizeof(host));
        else
            inet_ntop(AF_INET6, &a->in6.sin6_addr, host, sizeof(host));
        bool v6 = !IN6_IS_ADDR_V4MAPPED(&a->in6.sin6_addr);
        snprintf(buf, size, v6 ? "[%s]:%u" : "%s:%u", host, ntohs(a->in6.sin6_port));
    } else if (a->sa.sa_family == AF_UNIX) {
        snprintf(buf, size, "unix:%s", a->un.sun_path);
    } else {
        snprintf(buf, size, "?");
    }
    return buf;
}

uint16_t net_addr_port(const struct net_addr *a)
{
    if (a->sa.sa_family == AF_INET)
        return ntohs(a->in4.sin_port);
    if (a->sa.sa_family == AF_INET6)
        return ntohs(a->in6.sin6_port);
    return 0;
}

int net_addr_unix(const char *path, struct net_addr *out)
{
    memset(out, 0, sizeof(*out));
    size_t n = strlen(path);
    if (n == 0)
        return -EINVAL;
    if (n >= sizeof(out->un.sun_path))
        return -ENAMETOOLONG;
    out->un.sun_family = AF_UNIX;
    memcpy(out->un.sun_path, path, n + 1);
    out->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    return 0;
}
