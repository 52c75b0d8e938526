/* derp_addr.c - conversions between sockaddrs, DERP's 16-byte address form and IP text.
 * Pure functions; any thread; owns nothing. */
#include "derp_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

_Static_assert(DERP_ADDR_TEXT_SIZE >= INET6_ADDRSTRLEN, "room for any IPv6 text");

/* RFC 4291 §2.5.5.2: ::ffff:0:0/96 holds IPv4 addresses. */
static const uint8_t v4_mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

void derp_addr_from_ipv4(struct derp_addr *out, const uint8_t ip4[4], uint16_t port)
{
    memcpy(out->ip, v4_mapped_prefix, sizeof(v4_mapped_prefix));
    memcpy(out->ip + sizeof(v4_mapped_prefix), ip4, 4);
    out->port = port;
}

int derp_addr_from_sockaddr(struct derp_addr *out, const struct sockaddr *sa, socklen_t sa_len)
{
    if (sa_len < (socklen_t)sizeof(sa_family_t))
        return -EINVAL;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in sin;
        if (sa_len < (socklen_t)sizeof(sin))
            return -EINVAL;
        memcpy(&sin, sa, sizeof(sin)); /* sa may be unaligned storage */
        derp_addr_from_ipv4(out, (const uint8_t *)&sin.sin_addr, ntohs(sin.sin_port));
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 sin6;
        if (sa_len < (socklen_t)sizeof(sin6))
            return -EINVAL;
        memcpy(&sin6, sa, sizeof(sin6));
        memcpy(out->ip, &sin6.sin6_addr, DERP_ADDR_IP_LEN);
        out->port = ntohs(sin6.sin6_port);
        return 0;
    }
    return -EAFNOSUPPORT;
}

bool derp_addr_is_ipv4(const struct derp_addr *a)
{
    return memcmp(a->ip, v4_mapped_prefix, sizeof(v4_mapped_prefix)) == 0;
}

bool derp_addr_is_unspecified(const struct derp_addr *a)
{
    static const uint8_t zero[DERP_ADDR_IP_LEN];
    return memcmp(a->ip, zero, sizeof(zero)) == 0;
}

int derp_addr_format_ip(const struct derp_addr *a, char *buf, size_t buf_size)
{
    char text[DERP_ADDR_TEXT_SIZE] = "";

    if (!derp_addr_is_unspecified(a)) {
        const char *ok;
        if (derp_addr_is_ipv4(a))
            ok = inet_ntop(AF_INET, a->ip + sizeof(v4_mapped_prefix), text, sizeof(text));
        else
            ok = inet_ntop(AF_INET6, a->ip, text, sizeof(text));
        if (!ok)
            return -ENOSPC; /* cannot happen: text is INET6_ADDRSTRLEN */
    }
    size_t len = strlen(text);
    if (len + 1 > buf_size)
        return -ENOSPC;
    memcpy(buf, text, len + 1);
    return (int)len;
}
