/* proxy.c - the PROXY protocol, v1 (text) and v2 (binary), as HAProxy's proxy-protocol.txt
 * defines it: a strict, bounded parser (pure; v2's TLVs must tile their space and a CRC32C TLV
 * must match), CIDR lists for the sources allowed to send a header, and a one-shot codec that
 * reads the header off a fresh connection before any other codec, sets the connection's peer to
 * the client's address (net_conn_set_peer), removes itself and hands the rest of the bytes to
 * whatever the app installed next. Apps call it on the accepting shard. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <hd/net_codec.h>
#include <hd/net_proxy.h>

static const uint8_t v2_sig[NET_PROXY_SIG_LEN] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                                  0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
static const char v1_sig[] = "PROXY ";

/* ---------------------------------------------------------------- v1 */

/* One space-separated field of a v1 line: [p, *end) where *end is the next space or CR. */
static size_t v1_field(const char *p, const char *stop, char *out, size_t size)
{
    size_t n = 0;
    while (p + n < stop && p[n] != ' ' && p[n] != '\r')
        n++;
    if (n == 0 || n >= size)
        return 0;
    memcpy(out, p, n);
    out[n] = '\0';
    return n;
}

static int v1_port(const char *t, uint16_t *out)
{
    unsigned long v = 0;
    if (t[0] == '0' && t[1] != '\0')
        return -1; /* the specification: no leading zeros */
    for (const char *p = t; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > 65535)
            return -1;
    }
    *out = (uint16_t)v;
    return 0;
}

static int v1_addr(int family, const char *ip, uint16_t port, struct net_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (family == AF_INET) {
        out->in4.sin_family = AF_INET;
        out->in4.sin_port = htons(port);
        out->len = sizeof(out->in4);
        return inet_pton(AF_INET, ip, &out->in4.sin_addr) == 1 ? 0 : -1;
    }
    out->in6.sin6_family = AF_INET6;
    out->in6.sin6_port = htons(port);
    out->len = sizeof(out->in6);
    return inet_pton(AF_INET6, ip, &out->in6.sin6_addr) == 1 ? 0 : -1;
}

/* "PROXY TCP4|TCP6 SRC DST SPORT DPORT\r\n" or "PROXY UNKNOWN[ anything]\r\n". */
static ssize_t v1_parse(const uint8_t *buf, size_t len, struct net_proxy_header *h,
                        const char **reason)
{
    const char *s = (const char *)buf;
    size_t cr_max = NET_PROXY_V1_LEN_MAX - 1; /* the CR's index is below this, the LF's too */
    size_t lim = len < cr_max ? len : cr_max;
    const char *cr = memchr(s, '\r', lim);
    if (cr == NULL || (size_t)(cr - s) + 1 >= len) {
        if (cr == NULL && len >= cr_max) {
            *reason = "v1: no CRLF within 107 bytes";
            return -EPROTO;
        }
        return -EAGAIN;
    }
    if (cr[1] != '\n') {
        *reason = "v1: CR without LF";
        return -EPROTO;
    }
    for (const uint8_t *q = buf; q < (const uint8_t *)cr; q++) {
        if (*q < 0x20 || *q > 0x7E) { /* a NUL would end an address early, as a C string */
            *reason = "v1: a byte that is not printable US-ASCII in the line";
            return -EPROTO;
        }
    }
    ssize_t total = (cr - s) + 2;
    h->version = 1;
    const char *p = s + sizeof(v1_sig) - 1;
    if ((size_t)(cr - p) >= 7 && memcmp(p, "UNKNOWN", 7) == 0 && (p[7] == '\r' || p[7] == ' ')) {
        h->local = true; /* the rest of the line is to be ignored (section 2.1) */
        return total;
    }
    char proto[8], src[48], dst[48], sport[8], dport[8];
    char *fields[] = {proto, src, dst, sport, dport};
    size_t sizes[] = {sizeof(proto), sizeof(src), sizeof(dst), sizeof(sport), sizeof(dport)};
    for (size_t i = 0; i < 5; i++) {
        size_t n = v1_field(p, cr, fields[i], sizes[i]);
        if (n == 0 || (i < 4 && p[n] != ' ') || (i == 4 && p + n != cr)) {
            *reason = "v1: malformed line";
            return -EPROTO;
        }
        p += n + 1;
    }
    int family = strcmp(proto, "TCP4") == 0 ? AF_INET : strcmp(proto, "TCP6") == 0 ? AF_INET6 : 0;
    uint16_t sp, dp;
    if (family == 0) {
        *reason = "v1: protocol is not TCP4, TCP6 or UNKNOWN";
        return -EPROTO;
    }
    if (v1_port(sport, &sp) < 0 || v1_port(dport, &dp) < 0) {
        *reason = "v1: bad port";
        return -EPROTO;
    }
    if (v1_addr(family, src, sp, &h->src) < 0 || v1_addr(family, dst, dp, &h->dst) < 0) {
        *reason = "v1: address does not match the protocol";
        return -EPROTO;
    }
    return total;
}

/* ---------------------------------------------------------------- v2 */

uint32_t net_proxy_crc32c(const uint8_t *data, size_t len)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++) {
        crc ^= data[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

int net_proxy_tlv_next(const uint8_t *tlvs, size_t len, size_t *off, uint8_t *type,
                       const uint8_t **value, uint16_t *value_len)
{
    if (*off == len)
        return 0;
    if (len - *off < 3)
        return -EPROTO;
    const uint8_t *t = tlvs + *off;
    uint16_t n = (uint16_t)(t[1] << 8 | t[2]);
    if (len - *off - 3 < n)
        return -EPROTO;
    *type = t[0];
    *value = t + 3;
    *value_len = n;
    *off += 3u + n;
    return 1;
}

/* The TLVs must tile their space; a CRC32C TLV must match the header with its value zeroed. */
static int v2_tlvs_check(const uint8_t *buf, size_t total, size_t tlv_off, const char **reason)
{
    size_t off = 0, len = total - tlv_off;
    uint8_t type;
    const uint8_t *v;
    uint16_t vlen;
    int rc;
    while ((rc = net_proxy_tlv_next(buf + tlv_off, len, &off, &type, &v, &vlen)) == 1) {
        if (type != NET_PROXY_TLV_CRC32C)
            continue;
        if (vlen != 4) {
            *reason = "v2: CRC32C TLV is not 4 bytes";
            return -EPROTO;
        }
        uint8_t copy[NET_PROXY_V2_LEN_MAX];
        memcpy(copy, buf, total);
        memset(copy + (v - buf), 0, 4);
        uint32_t want = (uint32_t)v[0] << 24 | (uint32_t)v[1] << 16 | (uint32_t)v[2] << 8 | v[3];
        if (net_proxy_crc32c(copy, total) != want) {
            *reason = "v2: CRC32C mismatch";
            return -EPROTO;
        }
    }
    if (rc < 0)
        *reason = "v2: TLVs overrun the header";
    return rc;
}

static void v2_addrs(const uint8_t *a, int family, struct net_proxy_header *h)
{
    if (family == AF_INET) {
        for (int i = 0; i < 2; i++) {
            struct net_addr *x = i ? &h->dst : &h->src;
            x->in4.sin_family = AF_INET;
            memcpy(&x->in4.sin_addr, a + 4 * i, 4);
            memcpy(&x->in4.sin_port, a + 8 + 2 * i, 2); /* both in network order */
            x->len = sizeof(x->in4);
        }
        return;
    }
    for (int i = 0; i < 2; i++) {
        struct net_addr *x = i ? &h->dst : &h->src;
        x->in6.sin6_family = AF_INET6;
        memcpy(&x->in6.sin6_addr, a + 16 * i, 16);
        memcpy(&x->in6.sin6_port, a + 32 + 2 * i, 2);
        x->len = sizeof(x->in6);
    }
}

static ssize_t v2_parse(const uint8_t *buf, size_t len, struct net_proxy_header *h,
                        const char **reason)
{
    if (len < NET_PROXY_V2_FIXED_LEN)
        return -EAGAIN;
    uint8_t ver = buf[12] >> 4, cmd = buf[12] & 0x0F, fam = buf[13] >> 4, proto = buf[13] & 0x0F;
    size_t body = (size_t)buf[14] << 8 | buf[15], total = NET_PROXY_V2_FIXED_LEN + body;
    if (ver != 2) {
        *reason = "v2: version is not 2";
        return -EPROTO;
    }
    if (cmd > 1) {
        *reason = "v2: command is neither LOCAL nor PROXY";
        return -EPROTO;
    }
    if (fam > 3 || proto > 2) {
        *reason = "v2: unknown address family or transport";
        return -EPROTO;
    }
    if (total > NET_PROXY_V2_LEN_MAX) {
        *reason = "v2: header longer than 2048 bytes";
        return -EPROTO;
    }
    static const size_t alen[4] = {0, 12, 36, 216}; /* UNSPEC, INET, INET6, UNIX */
    if (body < alen[fam]) {
        *reason = "v2: length shorter than the addresses";
        return -EPROTO;
    }
    if (len < total)
        return -EAGAIN;
    h->version = 2;
    /* LOCAL: the proxy's own connection; UNSPEC and UNIX: no address to use. */
    h->local = cmd == 0 || fam == 0 || fam == 3;
    if (!h->local && proto != 1) {
        *reason = "v2: transport is not a stream (TCP)";
        return -EPROTO;
    }
    if (!h->local)
        v2_addrs(buf + NET_PROXY_V2_FIXED_LEN, fam == 1 ? AF_INET : AF_INET6, h);
    h->tlv_off = NET_PROXY_V2_FIXED_LEN + alen[fam];
    h->tlv_len = total - h->tlv_off;
    if (v2_tlvs_check(buf, total, h->tlv_off, reason) < 0)
        return -EPROTO;
    return (ssize_t)total;
}

ssize_t net_proxy_parse(const uint8_t *buf, size_t len, struct net_proxy_header *out,
                        const char **reason)
{
    static const char *unused;
    if (reason == NULL)
        reason = &unused;
    memset(out, 0, sizeof(*out));
    /* Decide on the first bytes: a prefix of neither signature is garbage at once. */
    size_t n1 = len < sizeof(v1_sig) - 1 ? len : sizeof(v1_sig) - 1;
    size_t n2 = len < NET_PROXY_SIG_LEN ? len : NET_PROXY_SIG_LEN;
    if (len == 0)
        return -EAGAIN;
    if (memcmp(buf, v1_sig, n1) == 0)
        return n1 < sizeof(v1_sig) - 1 ? -EAGAIN : v1_parse(buf, len, out, reason);
    if (memcmp(buf, v2_sig, n2) == 0)
        return n2 < NET_PROXY_SIG_LEN ? -EAGAIN : v2_parse(buf, len, out, reason);
    *reason = "not a PROXY header";
    return -EPROTO;
}

/* ---------------------------------------------------------------- CIDR lists */

static int cidr_one(const char *t, size_t n, struct net_cidr *out)
{
    char ip[64];
    const char *slash = memchr(t, '/', n);
    size_t iplen = slash ? (size_t)(slash - t) : n;
    if (iplen == 0 || iplen >= sizeof(ip))
        return -EINVAL;
    memcpy(ip, t, iplen);
    ip[iplen] = '\0';
    memset(out, 0, sizeof(*out));
    out->family = strchr(ip, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(out->family, ip, out->addr) != 1)
        return -EINVAL;
    unsigned maxbits = out->family == AF_INET ? 32 : 128, bits = maxbits;
    if (slash) {
        const char *p = slash + 1, *end = t + n;
        if (p == end || end - p > 3)
            return -EINVAL;
        bits = 0;
        for (; p < end; p++) {
            if (*p < '0' || *p > '9')
                return -EINVAL;
            bits = bits * 10 + (unsigned)(*p - '0');
        }
        if (bits > maxbits)
            return -EINVAL;
    }
    out->bits = (uint8_t)bits;
    for (unsigned i = bits; i < maxbits; i++) /* host bits must be zero */
        if (out->addr[i / 8] & (0x80u >> (i % 8)))
            return -EINVAL;
    return 0;
}

int net_cidr_parse_list(const char *text, struct net_cidr *out, unsigned max, const char **bad)
{
    unsigned count = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        while (n && *p == ' ')
            p++, n--;
        while (n && p[n - 1] == ' ')
            n--;
        if (count == max) {
            *bad = p;
            return -E2BIG;
        }
        if (cidr_one(p, n, &out[count]) < 0) {
            *bad = p;
            return -EINVAL;
        }
        count++;
        if (comma == NULL)
            return (int)count;
        p = comma + 1;
    }
}

static bool prefix_eq(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    if (memcmp(a, b, bits / 8) != 0)
        return false;
    if (bits % 8 == 0)
        return true;
    uint8_t mask = (uint8_t)(0xFFu << (8 - bits % 8));
    return (a[bits / 8] & mask) == (b[bits / 8] & mask);
}

bool net_cidr_match(const struct net_cidr *list, unsigned count, const struct net_addr *addr)
{
    uint8_t v4[4];
    const uint8_t *v6 = NULL;
    bool have4 = false;
    if (addr->sa.sa_family == AF_INET) {
        memcpy(v4, &addr->in4.sin_addr, 4);
        have4 = true;
    } else if (addr->sa.sa_family == AF_INET6) {
        v6 = addr->in6.sin6_addr.s6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&addr->in6.sin6_addr)) {
            memcpy(v4, v6 + 12, 4);
            have4 = true;
        }
    }
    for (unsigned i = 0; i < count; i++) {
        const struct net_cidr *e = &list[i];
        if (e->family == AF_INET && have4 && prefix_eq(v4, e->addr, e->bits))
            return true;
        if (e->family == AF_INET6 && v6 && prefix_eq(v6, e->addr, e->bits))
            return true;
    }
    return false;
}

/* ---------------------------------------------------------------- the connection step */

static ssize_t step_decode(struct net_conn *c, void *state, uint8_t *in, size_t len);

static int step_encode(struct net_conn *c, void *state)
{
    (void)state; /* nothing is sent before the header; pass through whatever is */
    return net_conn_plain_pass(c);
}

static const struct net_codec step_codec = {
    .name = "proxy",
    .decode = step_decode,
    .encode = step_encode,
};

static ssize_t step_decode(struct net_conn *c, void *state, uint8_t *in, size_t len)
{
    const struct net_proxy_step *step = state;
    struct net_proxy_header h;
    const char *reason = NULL;
    ssize_t n = net_proxy_parse(in, len, &h, &reason);
    if (n == -EAGAIN)
        return 0; /* kept as the codec's tail; the idle timeout bounds the wait */
    net_conn_set_codec(c, NULL, NULL); /* this codec's job ends here either way */
    if (n < 0) {
        step->done(c, (int)n, NULL, reason);
        net_conn_close(c, -EPROTO, false);
        return (ssize_t)len;
    }
    h.via = *net_conn_peer(c);
    if (!h.local)
        net_conn_set_peer(c, &h.src);
    step->done(c, 0, &h, NULL);
    size_t rest = len - (size_t)n;
    if (net_conn_state(c) != NET_CONN_OPEN || rest == 0)
        return (ssize_t)len;
    /* The bytes after the header belong to the next codec (or to the app), now. */
    void *next_state;
    const struct net_codec *next = net_conn_codec(c, &next_state);
    if (next == NULL) {
        int rc = net_conn_deliver(c, in + n, rest);
        return rc < 0 ? rc : (ssize_t)len;
    }
    ssize_t m = next->decode(c, next_state, in + n, rest);
    return m < 0 ? m : n + m;
}

int net_proxy_start(struct net_conn *c, const struct net_proxy_step *step)
{
    void *st;
    if (net_conn_codec(c, &st) != NULL)
        return -EBUSY;
    net_conn_set_codec(c, &step_codec, (void *)step);
    return 0;
}
