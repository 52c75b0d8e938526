/* test_proxy.c - the PROXY protocol parser (net_proxy_parse): v1 TCP4/TCP6/UNKNOWN, v2 PROXY and
 * LOCAL over IPv4/IPv6/UNIX, TLVs (walked, overrunning, CRC32C right and wrong), every strict
 * prefix of a valid header asking for more bytes, garbage and malformed headers refused with a
 * reason; and the CIDR lists that say who may send one. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include <hd/net_proxy.h>

static const uint8_t sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

static ssize_t parse(const void *buf, size_t len, struct net_proxy_header *h, const char **why)
{
    *why = NULL;
    return net_proxy_parse(buf, len, h, why);
}

/* Every strict prefix of a complete header is -EAGAIN (never an error, never accepted). */
static void prefixes_wait(const uint8_t *buf, size_t total)
{
    struct net_proxy_header h;
    const char *why;
    for (size_t n = 0; n < total; n++)
        cr_assert_eq(parse(buf, n, &h, &why), -EAGAIN, "prefix of %zu bytes (reason %s)", n,
                     why ? why : "-");
}

static const char *fmt(const struct net_addr *a, char *buf)
{
    return net_addr_format(a, buf, 64);
}

Test(net_proxy, v1_tcp4_and_rest)
{
    const char text[] = "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\nGET / HTTP/1.1\r\n";
    size_t hlen = strlen("PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n");
    struct net_proxy_header h;
    const char *why;
    char b[64];
    cr_assert_eq(parse(text, strlen(text), &h, &why), (ssize_t)hlen);
    cr_assert_eq(h.version, 1);
    cr_assert(!h.local);
    cr_assert_str_eq(fmt(&h.src, b), "192.0.2.7:56324");
    cr_assert_str_eq(fmt(&h.dst, b), "198.51.100.1:443");
    prefixes_wait((const uint8_t *)text, hlen);
}

Test(net_proxy, v1_tcp6_longest)
{
    /* The longest TCP6 line (104 bytes), and the longest line at all (UNKNOWN: 107). */
    const char text[] = "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
                        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    const char unk[] = "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
                       "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    cr_assert_eq(strlen(unk), NET_PROXY_V1_LEN_MAX);
    struct net_proxy_header h;
    const char *why;
    char b[64];
    cr_assert_eq(parse(unk, strlen(unk), &h, &why), 107);
    cr_assert(h.local);
    cr_assert_eq(parse(text, strlen(text), &h, &why), 104);
    cr_assert_eq(h.src.sa.sa_family, AF_INET6);
    cr_assert_str_eq(fmt(&h.src, b), "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535");
    const char v6[] = "PROXY TCP6 2001:db8::1 ::1 1 2\r\n";
    cr_assert_eq(parse(v6, strlen(v6), &h, &why), (ssize_t)strlen(v6));
    cr_assert_str_eq(fmt(&h.src, b), "[2001:db8::1]:1");
}

Test(net_proxy, v1_unknown)
{
    struct net_proxy_header h;
    const char *why;
    const char a[] = "PROXY UNKNOWN\r\n";
    cr_assert_eq(parse(a, strlen(a), &h, &why), (ssize_t)strlen(a));
    cr_assert(h.local);
    const char b[] = "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\nrest";
    cr_assert_eq(parse(b, strlen(b), &h, &why), (ssize_t)strlen(b) - 4);
    cr_assert(h.local);
}

Test(net_proxy, v1_refused)
{
    static const char *const bad[] = {
        "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",       /* LF without CR */
        "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX",      /* CR without LF */
        "PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",    /* two spaces */
        "PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",       /* a field missing */
        "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",   /* a field too many */
        "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", /* port out of range */
        "PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",    /* leading zero */
        "PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",    /* sign */
        "PROXY TCP4 ::1 ::2 1 2\r\n",             /* family mismatch */
        "PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n",     /* family mismatch */
        "PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n",   /* not an address */
        "PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",     /* not TCP */
        "PROXY \r\n",                             /* empty */
        "PROXY UNKNOWNX\r\n",                     /* not UNKNOWN */
    };
    struct net_proxy_header h;
    const char *why;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        /* a bare LF is only an error once the line is too long: pad those to the limit */
        char buf[256];
        size_t n = strlen(bad[i]);
        memcpy(buf, bad[i], n);
        if (bad[i][n - 1] == '\n' && bad[i][n - 2] != '\r') {
            memset(buf + n, 'x', 120);
            n += 120;
        }
        cr_assert_eq(parse(buf, n, &h, &why), -EPROTO, "accepted: %s", bad[i]);
        cr_assert_not_null(why);
    }
    /* A NUL or another control byte inside the line (issue 24: "1.2.3.4\0junk" passed as
     * 1.2.3.4, inet_pton stopping at the NUL), also in UNKNOWN's ignored rest. */
    static const char nul_in_addr[] = "PROXY TCP4 1.2.3.4\0x 5.6.7.8 1 2\r\n";
    static const char nul_in_port[] = "PROXY TCP4 1.2.3.4 5.6.7.8 1\0 2\r\n";
    static const char tab_in_line[] = "PROXY TCP4 1.2.3.4 5.6.7.8\t1 2\r\n";
    static const char nul_unknown[] = "PROXY UNKNOWN \0\r\n";
    static const char high_byte[] = "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\x80\r\n";
    const char *ctl[] = {nul_in_addr, nul_in_port, tab_in_line, nul_unknown, high_byte};
    size_t ctl_len[] = {sizeof(nul_in_addr) - 1, sizeof(nul_in_port) - 1, sizeof(tab_in_line) - 1,
                        sizeof(nul_unknown) - 1, sizeof(high_byte) - 1};
    for (size_t i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++) {
        cr_assert_eq(parse(ctl[i], ctl_len[i], &h, &why), -EPROTO, "accepted control byte %zu", i);
        cr_assert_str_eq(why, "v1: a byte that is not printable US-ASCII in the line");
    }
    /* No CRLF within 107 bytes. */
    char longline[200] = "PROXY TCP4 ";
    memset(longline + 11, '1', sizeof(longline) - 12);
    longline[sizeof(longline) - 1] = '\0';
    cr_assert_eq(parse(longline, 106, &h, &why), -EPROTO);
    cr_assert_str_eq(why, "v1: no CRLF within 107 bytes");
    cr_assert_eq(parse(longline, 105, &h, &why), -EAGAIN);
}

/* A v2 header: signature, ver/cmd, fam/proto, then body (addresses + TLVs). */
static size_t v2(uint8_t *out, uint8_t vercmd, uint8_t famproto, const void *body, size_t blen)
{
    memcpy(out, sig, 12);
    out[12] = vercmd;
    out[13] = famproto;
    out[14] = (uint8_t)(blen >> 8);
    out[15] = (uint8_t)blen;
    memcpy(out + 16, body, blen);
    return 16 + blen;
}

static size_t v4_body(uint8_t *b, const char *src, uint16_t sp, const char *dst, uint16_t dp)
{
    inet_pton(AF_INET, src, b);
    inet_pton(AF_INET, dst, b + 4);
    b[8] = (uint8_t)(sp >> 8), b[9] = (uint8_t)sp;
    b[10] = (uint8_t)(dp >> 8), b[11] = (uint8_t)dp;
    return 12;
}

Test(net_proxy, v2_tcp4_tcp6)
{
    uint8_t body[64], buf[128];
    struct net_proxy_header h;
    const char *why;
    char s[64];
    size_t n = v2(buf, 0x21, 0x11, body, v4_body(body, "203.0.113.9", 40000, "10.0.0.1", 443));
    memcpy(buf + n, "\x16\x03\x01", 3); /* the app's bytes follow */
    cr_assert_eq(parse(buf, n + 3, &h, &why), (ssize_t)n);
    cr_assert_eq(h.version, 2);
    cr_assert(!h.local);
    cr_assert_str_eq(fmt(&h.src, s), "203.0.113.9:40000");
    cr_assert_str_eq(fmt(&h.dst, s), "10.0.0.1:443");
    cr_assert_eq(h.tlv_len, 0);
    prefixes_wait(buf, n);

    uint8_t b6[36] = {0};
    inet_pton(AF_INET6, "2001:db8::5", b6);
    inet_pton(AF_INET6, "2001:db8::1", b6 + 16);
    b6[32] = 0x12, b6[33] = 0x34, b6[34] = 0x01, b6[35] = 0xBB;
    n = v2(buf, 0x21, 0x21, b6, sizeof(b6));
    cr_assert_eq(parse(buf, n, &h, &why), (ssize_t)n);
    cr_assert_str_eq(fmt(&h.src, s), "[2001:db8::5]:4660");
    cr_assert_str_eq(fmt(&h.dst, s), "[2001:db8::1]:443");
}

Test(net_proxy, v2_local_unspec_unix)
{
    uint8_t body[256] = {0}, buf[300];
    struct net_proxy_header h;
    const char *why;
    size_t n = v2(buf, 0x20, 0x00, body, 0); /* LOCAL, UNSPEC: haproxy's health check */
    cr_assert_eq(parse(buf, n, &h, &why), 16);
    cr_assert(h.local);
    n = v2(buf, 0x20, 0x11, body, 12); /* LOCAL with addresses: ignored */
    cr_assert_eq(parse(buf, n, &h, &why), (ssize_t)n);
    cr_assert(h.local);
    n = v2(buf, 0x21, 0x31, body, 216); /* PROXY over a unix socket: no IP to use */
    cr_assert_eq(parse(buf, n, &h, &why), (ssize_t)n);
    cr_assert(h.local);
}

static size_t tlv(uint8_t *p, uint8_t type, const void *v, uint16_t len)
{
    p[0] = type, p[1] = (uint8_t)(len >> 8), p[2] = (uint8_t)len;
    memcpy(p + 3, v, len);
    return 3u + len;
}

Test(net_proxy, v2_tlvs)
{
    uint8_t body[256], buf[300];
    size_t b = v4_body(body, "192.0.2.1", 1, "192.0.2.2", 2);
    b += tlv(body + b, NET_PROXY_TLV_ALPN, "h2", 2);
    b += tlv(body + b, NET_PROXY_TLV_AUTHORITY, "derp.example.com", 16);
    b += tlv(body + b, NET_PROXY_TLV_NOOP, "", 0);
    size_t n = v2(buf, 0x21, 0x11, body, b);
    struct net_proxy_header h;
    const char *why;
    cr_assert_eq(parse(buf, n, &h, &why), (ssize_t)n);
    cr_assert_eq(h.tlv_off, 28);
    size_t off = 0;
    uint8_t type;
    const uint8_t *v;
    uint16_t vlen;
    cr_assert_eq(net_proxy_tlv_next(buf + h.tlv_off, h.tlv_len, &off, &type, &v, &vlen), 1);
    cr_assert(type == NET_PROXY_TLV_ALPN && vlen == 2 && memcmp(v, "h2", 2) == 0);
    cr_assert_eq(net_proxy_tlv_next(buf + h.tlv_off, h.tlv_len, &off, &type, &v, &vlen), 1);
    cr_assert(type == NET_PROXY_TLV_AUTHORITY && vlen == 16);
    cr_assert_eq(net_proxy_tlv_next(buf + h.tlv_off, h.tlv_len, &off, &type, &v, &vlen), 1);
    cr_assert(type == NET_PROXY_TLV_NOOP && vlen == 0);
    cr_assert_eq(net_proxy_tlv_next(buf + h.tlv_off, h.tlv_len, &off, &type, &v, &vlen), 0);

    /* A TLV whose length runs past the header; a TLV cut inside its type/length. */
    body[b - 3 + 2] = 5; /* the NOOP now claims 5 bytes */
    n = v2(buf, 0x21, 0x11, body, b);
    cr_assert_eq(parse(buf, n, &h, &why), -EPROTO);
    cr_assert_str_eq(why, "v2: TLVs overrun the header");
    n = v2(buf, 0x21, 0x11, body, 12 + 2);
    cr_assert_eq(parse(buf, n, &h, &why), -EPROTO);
}

Test(net_proxy, v2_crc32c)
{
    /* RFC 3720's check value: CRC32C("123456789") = 0xE3069283. */
    cr_assert_eq(net_proxy_crc32c((const uint8_t *)"123456789", 9), 0xE3069283u);
    uint8_t body[64], buf[128];
    size_t b = v4_body(body, "192.0.2.1", 1, "192.0.2.2", 2);
    size_t crc_at = 16 + b + 3;
    b += tlv(body + b, NET_PROXY_TLV_CRC32C, "\0\0\0\0", 4);
    size_t n = v2(buf, 0x21, 0x11, body, b);
    uint32_t crc = net_proxy_crc32c(buf, n);
    buf[crc_at] = (uint8_t)(crc >> 24), buf[crc_at + 1] = (uint8_t)(crc >> 16);
    buf[crc_at + 2] = (uint8_t)(crc >> 8), buf[crc_at + 3] = (uint8_t)crc;
    struct net_proxy_header h;
    const char *why;
    cr_assert_eq(parse(buf, n, &h, &why), (ssize_t)n);
    buf[17] ^= 1; /* the source address changed in transit */
    cr_assert_eq(parse(buf, n, &h, &why), -EPROTO);
    cr_assert_str_eq(why, "v2: CRC32C mismatch");
}

Test(net_proxy, v2_refused)
{
    uint8_t body[64] = {0}, buf[128];
    struct net_proxy_header h;
    const char *why;
    struct {
        uint8_t vercmd, famproto;
        size_t blen;
        const char *why;
    } bad[] = {
        {0x11, 0x11, 12, "v2: version is not 2"},
        {0x22, 0x11, 12, "v2: command is neither LOCAL nor PROXY"},
        {0x21, 0x41, 12, "v2: unknown address family or transport"},
        {0x21, 0x13, 12, "v2: unknown address family or transport"},
        {0x21, 0x11, 11, "v2: length shorter than the addresses"},
        {0x21, 0x21, 12, "v2: length shorter than the addresses"},
        {0x21, 0x12, 12, "v2: transport is not a stream (TCP)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = v2(buf, bad[i].vercmd, bad[i].famproto, body, bad[i].blen);
        cr_assert_eq(parse(buf, n, &h, &why), -EPROTO, "case %zu", i);
        cr_assert_str_eq(why, bad[i].why, "case %zu", i);
    }
    /* Longer than NET_PROXY_V2_LEN_MAX: refused from the fixed part, without waiting. */
    v2(buf, 0x21, 0x11, body, 12);
    buf[14] = 0x08, buf[15] = 0x00; /* 2048 + 16 */
    cr_assert_eq(parse(buf, 16, &h, &why), -EPROTO);
    cr_assert_str_eq(why, "v2: header longer than 2048 bytes");
}

Test(net_proxy, garbage)
{
    struct net_proxy_header h;
    const char *why;
    static const char *const junk[] = {"GET / HTTP/1.1\r\n", "\x16\x03\x01\x02\x00", "P", "PROXX",
                                       "proxy TCP4",         "\r\n\r\n\x01"};
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        size_t n = strlen(junk[i]);
        if (strcmp(junk[i], "P") == 0) {
            cr_assert_eq(parse(junk[i], n, &h, &why), -EAGAIN); /* could still be PROXY */
            continue;
        }
        cr_assert_eq(parse(junk[i], n, &h, &why), -EPROTO, "accepted %s", junk[i]);
        cr_assert_str_eq(why, "not a PROXY header");
    }
    /* the v2 signature's NUL byte: a prefix up to it waits, a wrong byte after it does not */
    cr_assert_eq(parse(sig, 5, &h, &why), -EAGAIN);
    uint8_t wrong[12];
    memcpy(wrong, sig, 12);
    wrong[11] = 'X';
    cr_assert_eq(parse(wrong, 12, &h, &why), -EPROTO);
    cr_assert_eq(parse("", 0, &h, &why), -EAGAIN);
}

static struct net_addr ip(const char *text)
{
    struct net_addr a;
    cr_assert_eq(net_addr_parse(text, &a), 0, "%s", text);
    return a;
}

Test(net_proxy, cidr)
{
    struct net_cidr l[NET_CIDR_LIST_MAX];
    const char *bad = NULL;
    int n =
        net_cidr_parse_list("127.0.0.0/8, 10.1.2.3,2001:db8::/32,::1", l, NET_CIDR_LIST_MAX, &bad);
    cr_assert_eq(n, 4);
    struct net_addr a = ip("127.9.9.9:1");
    cr_assert(net_cidr_match(l, 4, &a));
    a = ip("10.1.2.3:1");
    cr_assert(net_cidr_match(l, 4, &a));
    a = ip("10.1.2.4:1");
    cr_assert(!net_cidr_match(l, 4, &a));
    a = ip("[2001:db8:ffff::1]:1");
    cr_assert(net_cidr_match(l, 4, &a));
    a = ip("[2001:db9::1]:1");
    cr_assert(!net_cidr_match(l, 4, &a));
    a = ip("[::1]:1");
    cr_assert(net_cidr_match(l, 4, &a));
    a = ip("[::ffff:127.0.0.5]:1"); /* a dual-stack listener's IPv4 client */
    cr_assert(net_cidr_match(l, 4, &a));
    a = ip("[::ffff:11.0.0.5]:1");
    cr_assert(!net_cidr_match(l, 4, &a));
    cr_assert_eq(net_cidr_parse_list("192.168.1.0/23", l, 4, &bad), -EINVAL); /* host bits */
    cr_assert_eq(net_cidr_parse_list("192.168.1.0/24", l, 4, &bad), 1);
    a = ip("192.168.1.200:1");
    cr_assert(net_cidr_match(l, 1, &a));
    cr_assert_eq(net_cidr_parse_list("0.0.0.0/0", l, 4, &bad), 1);
    cr_assert(net_cidr_match(l, 1, &a));
    static const char *const refused[] = {"",        "1.2.3.4/33", "1.2.3.4/24",
                                          "1.2.3",   "x",          "1.2.3.0/24,",
                                          "::1/129", "1.2.3.0/",   "1.2.3.0/2a"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        cr_assert_eq(net_cidr_parse_list(refused[i], l, 4, &bad), -EINVAL, "%s", refused[i]);
    cr_assert_eq(net_cidr_parse_list("1.1.1.1,2.2.2.2,3.3.3.3", l, 2, &bad), -E2BIG);
    cr_assert_str_eq(bad, "3.3.3.3");
}
