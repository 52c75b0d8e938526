/* derp_disco.h - "is this relayed payload a disco message?" (§6.2, disco/disco.go
 * LooksLikeDiscoWrapper). Disco picks the send queue, makes an unknown destination eligible for
 * PeerGone(NotHere) and labels drop metrics. Pure; any thread. */
#ifndef DERP_DISCO_H
#define DERP_DISCO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True iff len >= 62 (magic || sender key || nonce) and pkt starts with "TS💬"
 * (54 53 F0 9F 92 AC). pkt is the packet inside Send/Recv/ForwardPacket, keys excluded. */
bool derp_disco_is_packet(const uint8_t *pkt, size_t len);

#endif /* DERP_DISCO_H */
