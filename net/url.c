/* url.c - http[s]://host[:port][/path] split into its parts (net_url_parse, pure) and the host
 * turned into an address (net_url_resolve: numeric at once; a DNS name through getaddrinfo,
 * which blocks, so only at start-up or off the shards). Any thread; owns nothing. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#include <hd/net.h>

#define NET_URL_HTTP_PORT  80
#define NET_URL_HTTPS_PORT 443

static int parse_port(const char *p, size_t len, uint16_t *out)
{
    unsigned long v = 0;
    if (len == 0 || len > 5)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -EINVAL;
        v = v * 10 + (unsigned long)(p[i] - '0');
    }
    if (v == 0 || v > 65535)
        return -EINVAL;
    *out = (uint16_t)v;
    return 0;
}

/* authority = host [":" port], host = name | IPv4 | "[" IPv6 "]" (RFC 3986 section 3.2). */
static int split_authority(struct net_url *u)
{
    const char *a = u->authority, *port = NULL;
    size_t host_len;
    if (a[0] == '[') {
        const char *rb = strchr(a, ']');
        if (rb == NULL || rb == a + 1 || (rb[1] != '\0' && rb[1] != ':'))
            return -EINVAL;
        host_len = (size_t)(rb - a - 1);
        memcpy(u->host, a + 1, host_len);
        port = rb[1] == ':' ? rb + 2 : NULL;
    } else {
        const char *colon = strchr(a, ':');
        if (colon && strchr(colon + 1, ':'))
            return -EINVAL; /* a bare IPv6 address without brackets is ambiguous */
        host_len = colon ? (size_t)(colon - a) : strlen(a);
        if (host_len == 0)
            return -EINVAL;
        memcpy(u->host, a, host_len);
        port = colon ? colon + 1 : NULL;
    }
    u->host[host_len] = '\0';
    if (port == NULL) {
        u->port = u->tls ? NET_URL_HTTPS_PORT : NET_URL_HTTP_PORT;
        return 0;
    }
    return parse_port(port, strlen(port), &u->port);
}

int net_url_parse(const char *url, struct net_url *out)
{
    memset(out, 0, sizeof(*out));
    const char *p;
    if (strncmp(url, "http://", 7) == 0) {
        p = url + 7;
    } else if (strncmp(url, "https://", 8) == 0) {
        p = url + 8;
        out->tls = true;
    } else {
        return -EINVAL;
    }
    size_t auth_len = strcspn(p, "/?#");
    if (auth_len == 0 || auth_len > NET_URL_AUTHORITY_LEN_MAX)
        return -EINVAL;
    memcpy(out->authority, p, auth_len);
    const char *path = p + auth_len;
    size_t query_only = path[0] == '?', path_len = strlen(path); /* "http://h?q" is "/?q" */
    if (strchr(path, '#') || path_len + query_only > NET_HTTP_TARGET_LEN_MAX)
        return -EINVAL;
    out->path[0] = '/';
    memcpy(out->path + query_only, path, path_len + 1);
    return split_authority(out);
}

int net_url_resolve(const struct net_url *u, bool numeric_only, struct net_addr *out)
{
    char text[NET_URL_AUTHORITY_LEN_MAX + 8];
    snprintf(text, sizeof(text), strchr(u->host, ':') ? "[%s]:%u" : "%s:%u", u->host, u->port);
    if (net_addr_parse(text, out) == 0)
        return 0;
    if (numeric_only)
        return -EINVAL;
    char port[8];
    snprintf(port, sizeof(port), "%u", u->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(u->host, port, &hints, &res);
    if (rc != 0 || res == NULL || res->ai_addrlen > sizeof(out->ss)) {
        if (res)
            freeaddrinfo(res);
        return -ENOENT;
    }
    memset(out, 0, sizeof(*out));
    memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
    out->len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}
