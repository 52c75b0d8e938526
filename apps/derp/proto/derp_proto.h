/* derp_proto.h - the public header of the DERP protocol layer (hd_derp_proto): framing, keys,
 * handshake, STUN, disco detection, limits. Pure over bytes; no sockets, no reactor. */
#ifndef DERP_PROTO_H
#define DERP_PROTO_H

#include "derp_addr.h"
#include "derp_disco.h"
#include "derp_frame.h"
#include "derp_handshake.h"
#include "derp_http.h"
#include "derp_keys.h"
#include "derp_limits.h"
#include "derp_stun.h"

#endif /* DERP_PROTO_H */
