/* derp_stun.c - STUN Binding Request recognition and Binding Success replies (§10). Runs on
 * whichever shard owns the STUN socket; owns nothing. */
#include "derp_stun.h"

#include <errno.h>
#include <string.h>

/* Binding Request / Binding Success message types (RFC 5389 §6, §18.1). */
#define STUN_BINDING_REQUEST 0x0001
#define STUN_BINDING_SUCCESS 0x0101
/* stun.go attrXorMappedAddressAlt: some servers put it in the comprehension-optional range. */
#define STUN_ATTR_XOR_MAPPED_ALT 0x8020
#define STUN_FAMILY_IPV4         0x01
#define STUN_FAMILY_IPV6         0x02

static uint16_t load_be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void store_be32(uint8_t *p, uint32_t v)
{
    store_be16(p, (uint16_t)(v >> 16));
    store_be16(p + 2, (uint16_t)v);
}

uint32_t derp_stun_crc32(const uint8_t *data, size_t len)
{
    /* Reflected polynomial 0xEDB88320, four bits at a time: 16 entries instead of 256, fast
     * enough for 64 KiB datagrams, and nothing to initialise at run time. */
    static const uint32_t nibble[16] = {
        0x00000000u, 0x1db71064u, 0x3b6e20c8u, 0x26d930acu, 0x76dc4190u, 0x6b6b51f4u,
        0x4db26158u, 0x5005713cu, 0xedb88320u, 0xf00f9344u, 0xd6d6a3e8u, 0xcb61b38cu,
        0x9b64c2b0u, 0x86d3d2d4u, 0xa00ae278u, 0xbdbdf21cu,
    };
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++) {
        crc ^= data[i];
        crc = (crc >> 4) ^ nibble[crc & 0xF];
        crc = (crc >> 4) ^ nibble[crc & 0xF];
    }
    return ~crc;
}

bool derp_stun_is(const uint8_t *pkt, size_t len)
{
    return len >= DERP_STUN_HEADER_LEN && (pkt[0] & 0xC0) == 0 &&
           load_be32(pkt + 4) == DERP_STUN_COOKIE;
}

/* What a walk over the attributes found (stun.go ParseBindingRequest's closure). */
struct attr_scan {
    bool software_ok;
    uint16_t last_type;
    uint32_t fingerprint; /* value of the last 4-byte FINGERPRINT seen */
};

/* stun.go foreachAttr from byte 20 to the end; a truncated attribute is an error. */
static int scan_attrs(const uint8_t *p, size_t len, struct attr_scan *scan)
{
    memset(scan, 0, sizeof(*scan));
    while (len > 0) {
        if (len < DERP_STUN_ATTR_HEADER_LEN)
            return -EPROTO;
        uint16_t type = load_be16(p);
        size_t attr_len = load_be16(p + 2);
        size_t padded = (attr_len + DERP_STUN_ATTR_ALIGN - 1) & ~(size_t)(DERP_STUN_ATTR_ALIGN - 1);
        p += DERP_STUN_ATTR_HEADER_LEN;
        len -= DERP_STUN_ATTR_HEADER_LEN;
        if (padded > len)
            return -EPROTO;
        scan->last_type = type;
        if (type == DERP_STUN_ATTR_SOFTWARE && attr_len == DERP_STUN_SOFTWARE_LEN &&
            memcmp(p, DERP_STUN_SOFTWARE, DERP_STUN_SOFTWARE_LEN) == 0)
            scan->software_ok = true;
        if (type == DERP_STUN_ATTR_FINGERPRINT && attr_len == 4)
            scan->fingerprint = load_be32(p);
        p += padded;
        len -= padded;
    }
    return 0;
}

int derp_stun_parse_request(const uint8_t *pkt, size_t len, uint8_t txid[DERP_STUN_TXID_LEN])
{
    struct attr_scan scan;

    if (!derp_stun_is(pkt, len) || load_be16(pkt) != STUN_BINDING_REQUEST)
        return -EPROTO;
    if (scan_attrs(pkt + DERP_STUN_HEADER_LEN, len - DERP_STUN_HEADER_LEN, &scan) < 0)
        return -EPROTO;
    /* A last attribute exists, so len >= 24 and the CRC range below is in bounds. */
    if (!scan.software_ok || scan.last_type != DERP_STUN_ATTR_FINGERPRINT)
        return -EPROTO;
    uint32_t want =
        derp_stun_crc32(pkt, len - DERP_STUN_FINGERPRINT_LEN) ^ DERP_STUN_FINGERPRINT_XOR;
    if (scan.fingerprint != want)
        return -EPROTO;
    memcpy(txid, pkt + 8, DERP_STUN_TXID_LEN);
    return 0;
}

static void write_header(uint8_t *buf, uint16_t type, uint16_t attrs_len,
                         const uint8_t txid[DERP_STUN_TXID_LEN])
{
    store_be16(buf, type);
    store_be16(buf + 2, attrs_len);
    store_be32(buf + 4, DERP_STUN_COOKIE);
    memcpy(buf + 8, txid, DERP_STUN_TXID_LEN);
}

ssize_t derp_stun_build_response(uint8_t *buf, size_t buf_size,
                                 const uint8_t txid[DERP_STUN_TXID_LEN],
                                 const struct derp_addr *addr)
{
    bool v4 = derp_addr_is_ipv4(addr);
    size_t ip_len = v4 ? 4 : DERP_ADDR_IP_LEN;
    const uint8_t *ip = addr->ip + DERP_ADDR_IP_LEN - ip_len;
    size_t value_len = v4 ? DERP_STUN_XOR_MAPPED_V4_LEN : DERP_STUN_XOR_MAPPED_V6_LEN;
    size_t total = v4 ? DERP_STUN_RESPONSE_V4_LEN : DERP_STUN_RESPONSE_V6_LEN;
    uint8_t mask[4 + DERP_STUN_TXID_LEN]; /* cookie || txid, what the address is XORed with */

    if (buf_size < total)
        return -ENOSPC;
    write_header(buf, STUN_BINDING_SUCCESS, (uint16_t)(total - DERP_STUN_HEADER_LEN), txid);
    uint8_t *a = buf + DERP_STUN_HEADER_LEN;
    store_be16(a, DERP_STUN_ATTR_XOR_MAPPED);
    store_be16(a + 2, (uint16_t)value_len);
    a[4] = 0; /* reserved */
    a[5] = v4 ? STUN_FAMILY_IPV4 : STUN_FAMILY_IPV6;
    store_be16(a + 6, (uint16_t)(addr->port ^ (DERP_STUN_COOKIE >> 16)));
    store_be32(mask, DERP_STUN_COOKIE);
    memcpy(mask + 4, txid, DERP_STUN_TXID_LEN);
    for (size_t i = 0; i < ip_len; i++)
        a[8 + i] = ip[i] ^ mask[i];
    return (ssize_t)total;
}

ssize_t derp_stun_build_request(uint8_t *buf, size_t buf_size,
                                const uint8_t txid[DERP_STUN_TXID_LEN])
{
    if (buf_size < DERP_STUN_REQUEST_LEN)
        return -ENOSPC;
    write_header(buf, STUN_BINDING_REQUEST, DERP_STUN_REQUEST_LEN - DERP_STUN_HEADER_LEN, txid);
    uint8_t *a = buf + DERP_STUN_HEADER_LEN;
    store_be16(a, DERP_STUN_ATTR_SOFTWARE);
    store_be16(a + 2, DERP_STUN_SOFTWARE_LEN);
    memcpy(a + 4, DERP_STUN_SOFTWARE, DERP_STUN_SOFTWARE_LEN);
    a += DERP_STUN_ATTR_HEADER_LEN + DERP_STUN_SOFTWARE_LEN;
    size_t covered = (size_t)(a - buf);
    store_be16(a, DERP_STUN_ATTR_FINGERPRINT);
    store_be16(a + 2, 4);
    store_be32(a + 4, derp_stun_crc32(buf, covered) ^ DERP_STUN_FINGERPRINT_XOR);
    return DERP_STUN_REQUEST_LEN;
}

/* stun.go xorMappedAddress. */
static int parse_xor_mapped(const uint8_t *v, size_t len, const uint8_t *pkt,
                            struct derp_addr *addr)
{
    if (len < 4)
        return -EPROTO;
    size_t ip_len = v[1] == STUN_FAMILY_IPV4 ? 4 : v[1] == STUN_FAMILY_IPV6 ? 16 : 0;
    if (ip_len == 0 || len - 4 < ip_len)
        return -EPROTO;
    uint8_t ip[DERP_ADDR_IP_LEN];
    for (size_t i = 0; i < ip_len; i++)
        ip[i] = v[4 + i] ^ pkt[4 + i]; /* pkt[4..20) = cookie || txid */
    uint16_t port = (uint16_t)(load_be16(v + 2) ^ (DERP_STUN_COOKIE >> 16));
    if (ip_len == 4) {
        derp_addr_from_ipv4(addr, ip, port);
    } else {
        memcpy(addr->ip, ip, DERP_ADDR_IP_LEN);
        addr->port = port;
    }
    return 0;
}

int derp_stun_parse_response(const uint8_t *pkt, size_t len, uint8_t txid[DERP_STUN_TXID_LEN],
                             struct derp_addr *addr)
{
    if (!derp_stun_is(pkt, len) || load_be16(pkt) != STUN_BINDING_SUCCESS)
        return -EPROTO;
    size_t attrs_len = load_be16(pkt + 2);
    if (attrs_len > len - DERP_STUN_HEADER_LEN)
        return -EPROTO;
    const uint8_t *p = pkt + DERP_STUN_HEADER_LEN;
    bool found = false;
    while (attrs_len > 0) {
        if (attrs_len < DERP_STUN_ATTR_HEADER_LEN)
            return -EPROTO;
        uint16_t type = load_be16(p);
        size_t a_len = load_be16(p + 2);
        size_t padded = (a_len + 3) & ~(size_t)3;
        if (padded > attrs_len - DERP_STUN_ATTR_HEADER_LEN)
            return -EPROTO;
        if (type == DERP_STUN_ATTR_XOR_MAPPED || type == STUN_ATTR_XOR_MAPPED_ALT) {
            if (parse_xor_mapped(p + 4, a_len, pkt, addr) < 0)
                return -EPROTO;
            found = true;
        }
        p += DERP_STUN_ATTR_HEADER_LEN + padded;
        attrs_len -= DERP_STUN_ATTR_HEADER_LEN + padded;
    }
    if (!found)
        return -EPROTO;
    memcpy(txid, pkt + 8, DERP_STUN_TXID_LEN);
    return 0;
}
