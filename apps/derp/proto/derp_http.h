/* derp_http.h - DERP's HTTP upgrade answer (spec §1.3), on net's generic 101 writer. */
#ifndef DERP_HTTP_H
#define DERP_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "derp_limits.h"

/* The exact derper upgrade answer, DERP_HTTP_101_LEN bytes: 101 Switching Protocols,
 * Upgrade: DERP, Connection: Upgrade, Derp-Version: 2, Derp-Public-Key: <64 lowercase hex of
 * server_key>. Never for fast-start clients. Returns DERP_HTTP_101_LEN or -ENOSPC. */
int derp_http_write_101(char *buf, size_t size, const uint8_t server_key[DERP_KEY_LEN]);

#endif /* DERP_HTTP_H */
