/* derp_stun.h - the STUN subset derper speaks (§10, net/stun/stun.go): recognise a
 * Tailscale-generated RFC 5389 Binding Request and build the Binding Success reply with one
 * XOR-MAPPED-ADDRESS. Also the request builder and reply parser, for tests and probes.
 * Pure over bytes (the UDP socket is the server's); any thread. */
#ifndef DERP_STUN_H
#define DERP_STUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "derp_addr.h"
#include "derp_limits.h"

/* stun.Is: >= 20 bytes, top two bits of byte 0 clear, magic cookie at bytes 4..7. */
bool derp_stun_is(const uint8_t *pkt, size_t len);

/* stun.ParseBindingRequest. Accepts only: a STUN message (derp_stun_is), type 0x0001, attributes
 * walking cleanly from byte 20 to the end of the datagram (the header length field is not
 * consulted), a SOFTWARE attribute equal to "tailnode", and a last attribute FINGERPRINT whose
 * value is CRC-32(datagram minus its last 8 bytes) ^ 0x5354554e. Copies the transaction ID.
 * Returns 0, or -EPROTO for anything else (counted as not_stun; send no reply). */
int derp_stun_parse_request(const uint8_t *pkt, size_t len, uint8_t txid[DERP_STUN_TXID_LEN]);

/* Binding Success for txid reflecting addr: family 1 (IPv4, 32 bytes) for v4-mapped addresses
 * (the spec's recommendation over the reference's family-2 quirk), else family 2 (44 bytes).
 * No SOFTWARE, no FINGERPRINT. Returns the size or -ENOSPC. */
ssize_t derp_stun_build_response(uint8_t *buf, size_t buf_size,
                                 const uint8_t txid[DERP_STUN_TXID_LEN],
                                 const struct derp_addr *addr);

/* stun.Request: the 40-byte request a Tailscale client sends. Returns 40 or -ENOSPC. */
ssize_t derp_stun_build_request(uint8_t *buf, size_t buf_size,
                                const uint8_t txid[DERP_STUN_TXID_LEN]);

/* stun.ParseResponse subset: a Binding Success whose XOR-MAPPED-ADDRESS (0x0020 or 0x8020) gives
 * the address (IPv4 returned v4-mapped). Returns 0 or -EPROTO. */
int derp_stun_parse_response(const uint8_t *pkt, size_t len, uint8_t txid[DERP_STUN_TXID_LEN],
                             struct derp_addr *addr);

/* CRC-32/IEEE (zlib's crc32) of data, as FINGERPRINT uses before its XOR. */
uint32_t derp_stun_crc32(const uint8_t *data, size_t len);

#endif /* DERP_STUN_H */
