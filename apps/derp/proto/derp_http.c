/* derp_http.c - DERP's 101 (spec §1.3): net_http_write_101 with derper's two fields, in derper's
 * order. Pure code over the caller's buffer; any thread. */
#include "derp_http.h"

#include <hd/hd_base.h>
#include <hd/net_http.h>

#include "derp_keys.h"

#define STR(x)  #x
#define XSTR(x) STR(x)

int derp_http_write_101(char *buf, size_t size, const uint8_t server_key[DERP_KEY_LEN])
{
    char key_hex[DERP_KEY_HEX_SIZE];
    derp_key_hex_format(server_key, key_hex);
    const struct net_http_hdr hdrs[] = {
        {"Derp-Version", NET_HTTP_LIT(XSTR(DERP_PROTOCOL_VERSION))},
        {"Derp-Public-Key", {key_hex, 2 * DERP_KEY_LEN}},
    };
    int n = net_http_write_101(buf, size, NET_HTTP_LIT("DERP"), hdrs, HD_ARRAY_SIZE(hdrs));
    HD_ASSERT(n < 0 || n == DERP_HTTP_101_LEN);
    return n;
}
