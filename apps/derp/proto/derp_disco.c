/* derp_disco.c - disco packet detection for routing decisions (§6.2). Pure; any thread; owns
 * nothing. */
#include "derp_disco.h"

#include <string.h>

#include "derp_limits.h"

bool derp_disco_is_packet(const uint8_t *pkt, size_t len)
{
    return len >= DERP_DISCO_LEN_MIN && memcmp(pkt, DERP_DISCO_MAGIC, DERP_DISCO_MAGIC_LEN) == 0;
}
