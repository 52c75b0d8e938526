/* net_proxy.h - the PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and 2) on accepted
 * connections: a pure header parser, trusted-source lists (CIDR), and a connection step that
 * reads the header before anything else (TLS, HTTP) sees a byte, and replaces the connection's
 * peer address with the client's. Generic: nothing here knows what the app speaks.
 *
 * Threading: the parser and the CIDR functions are pure (any thread); the step runs on the
 * connection's shard. Errors: 0 or -errno. */
#ifndef NET_PROXY_H
#define NET_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hd/net.h>

/* v1: "PROXY TCP6 " + two IPv6 texts (39 each) + two ports + spaces + CRLF is 107 bytes, the
 * specification's maximum (section 2.1). */
#define NET_PROXY_V1_LEN_MAX 107u
/* v2: the fixed part (16 bytes: signature, version/command, family, length). */
#define NET_PROXY_V2_FIXED_LEN 16u
/* v2: the largest header accepted (fixed part + addresses + TLVs). The format allows 16 + 65535;
 * a proxy's TLVs (ALPN, authority, SSL details, a unique id, CRC) fit in well under 1 KiB, and
 * the connection's reassembly tail must hold the whole header, so more is refused as garbage. */
#define NET_PROXY_V2_LEN_MAX 2048u
/* The bytes needed to tell v1, v2 and garbage apart: v2's 12-byte signature. */
#define NET_PROXY_SIG_LEN 12u

/* v2 TLV types (section 2.2.x) the parser knows. */
#define NET_PROXY_TLV_ALPN      0x01u
#define NET_PROXY_TLV_AUTHORITY 0x02u
#define NET_PROXY_TLV_CRC32C    0x03u
#define NET_PROXY_TLV_NOOP      0x04u
#define NET_PROXY_TLV_UNIQUE_ID 0x05u
#define NET_PROXY_TLV_SSL       0x20u
#define NET_PROXY_TLV_NETNS     0x30u

struct net_proxy_header {
    uint8_t version; /* 1 or 2 */
    /* No client address to use: v2 LOCAL (a proxy's own health check), v1 "UNKNOWN", v2
     * AF_UNSPEC or AF_UNIX. The connection keeps its own peer address. */
    bool local;
    struct net_addr src, dst; /* the client and the address it connected to (local: zeroed) */
    struct net_addr via;      /* the connection's own peer before the header: the proxy */
    /* v2: the TLVs, as offsets into the parsed buffer (tlv_len 0: none). Already checked: they
     * tile the space exactly, and a CRC32C TLV matched the header. */
    size_t tlv_off, tlv_len;
};

/* Parse a header at buf[0..len). Returns its length (> 0; the bytes after it are the app's),
 * -EAGAIN (a valid prefix: more bytes are needed), or -EPROTO with *reason naming what is wrong
 * (a static string: "not a PROXY header", "v1: no CRLF within 107 bytes", ...). */
ssize_t net_proxy_parse(const uint8_t *buf, size_t len, struct net_proxy_header *out,
                        const char **reason);

/* Walk v2 TLVs: tlvs[0..len) from *off (start at 0). Returns 1 with the next TLV's type and
 * value, 0 at the end, -EPROTO (malformed: cannot happen for what net_proxy_parse accepted). */
int net_proxy_tlv_next(const uint8_t *tlvs, size_t len, size_t *off, uint8_t *type,
                       const uint8_t **value, uint16_t *value_len);

/* CRC32C (Castagnoli), as v2's CRC32C TLV uses it. */
uint32_t net_proxy_crc32c(const uint8_t *data, size_t len);

/* ---------------------------------------------------------------- trusted sources */

struct net_cidr {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    uint8_t bits;
};
/* The most entries a list holds (a few proxies, or a few subnets of them). */
#define NET_CIDR_LIST_MAX 32u

/* "10.0.0.0/8,127.0.0.1,::1/128": comma-separated, a bare address is /32 or /128, host bits
 * must be zero. Returns the entry count (>= 1), or -EINVAL with *bad pointing at the entry that
 * failed (-E2BIG: more than max entries). */
int net_cidr_parse_list(const char *text, struct net_cidr *out, unsigned max, const char **bad);
/* Does addr (AF_INET, AF_INET6; an IPv4-mapped IPv6 address matches IPv4 entries) fall in any
 * entry? */
bool net_cidr_match(const struct net_cidr *list, unsigned count, const struct net_addr *addr);

/* ---------------------------------------------------------------- the connection step */

/* What the step reports, on the connection's shard, inside its receive path:
 * rc 0: the header was read (h valid; unless h->local, net_conn_peer(c) is now h->src). The
 *   callback may install a codec (tls_conn_start) or switch handlers; the bytes after the header
 *   go to whatever is installed when it returns. It may also close c.
 * rc -EPROTO: a bad header (reason names it, h NULL); c is closed (-EPROTO) after the call. */
struct net_proxy_step {
    void (*done)(struct net_conn *c, int rc, const struct net_proxy_header *h, const char *reason);
};

/* Read a PROXY header first on c (freshly adopted, no codec yet, nothing received): installs a
 * codec that removes itself once the header is parsed. step must outlive the connection's
 * header phase (a static const). Returns 0, -EBUSY (a codec is installed already). */
int net_proxy_start(struct net_conn *c, const struct net_proxy_step *step);

/* Replace the connection's peer address (what net_conn_peer returns, what a migration carries). */
void net_conn_set_peer(struct net_conn *c, const struct net_addr *peer);

#endif /* NET_PROXY_H */
