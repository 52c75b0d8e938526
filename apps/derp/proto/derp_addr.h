/* derp_addr.h - a peer's IP address and port in the form DERP puts on the wire: 16 bytes with
 * IPv4 as v4-mapped ::ffff:a.b.c.d (PeerPresent, §2.1) and a host-order port. Used by PeerPresent,
 * STUN replies and the admission "Source" text. Pure functions; any thread. */
#ifndef DERP_ADDR_H
#define DERP_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define DERP_ADDR_IP_LEN 16
/* INET6_ADDRSTRLEN (46) covers "ffff:...:255.255.255.255"; NUL included. */
#define DERP_ADDR_TEXT_SIZE 46

/* All-zero = unknown (PeerPresent sends zeros when the server has no address). */
struct derp_addr {
    uint8_t ip[DERP_ADDR_IP_LEN];
    uint16_t port;
};

/* Fills *out from an AF_INET or AF_INET6 sockaddr (borrowed). IPv4 becomes v4-mapped.
 * Returns 0, -EINVAL (len too short for its family) or -EAFNOSUPPORT. */
int derp_addr_from_sockaddr(struct derp_addr *out, const struct sockaddr *sa, socklen_t sa_len);

/* Fills *out from 4 IPv4 bytes (network order) and a port. */
void derp_addr_from_ipv4(struct derp_addr *out, const uint8_t ip4[4], uint16_t port);

/* True if the address is v4-mapped (::ffff:0:0/96): STUN answers it with family 1. */
bool derp_addr_is_ipv4(const struct derp_addr *a);

/* True if all 16 address bytes are zero (unknown). */
bool derp_addr_is_unspecified(const struct derp_addr *a);

/* Writes the bare IP text ("198.51.100.7", "2001:db8::1"; v4-mapped printed as IPv4, unknown as
 * "") as admission's "Source" field wants it (§5). Returns the length, or -ENOSPC. */
int derp_addr_format_ip(const struct derp_addr *a, char *buf, size_t buf_size);

#endif /* DERP_ADDR_H */
