/* derp_handshake.h - the DERP login handshake payloads (§4): ServerKey, ClientInfo (client key,
 * NaCl box of JSON) and ServerInfo (NaCl box of JSON), for both the server and the DERP client.
 * Pure over bytes (no sockets); any thread. Opening allocates (jansson, and a plaintext buffer
 * if the caller gives none): it runs once per connection, not on the packet path. */
#ifndef DERP_HANDSHAKE_H
#define DERP_HANDSHAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "derp_keys.h"
#include "derp_limits.h"

/* §4.1 ClientInfo JSON. Keys are matched case-insensitively, unknown keys ignored. */
struct derp_client_info {
    int64_t version;    /* "version"; 0 if absent (the server ignores it) */
    bool can_ack_pings; /* "CanAckPings" */
    bool is_prober;     /* "IsProber" */
    bool has_mesh_key;  /* "meshKey" was present (64 hex digits) */
    struct derp_mesh_key mesh_key;
    /* "AppName", stats only: at most DERP_APP_NAME_LEN_MAX bytes, cut at a UTF-8 boundary
     * (and at an embedded NUL). Empty if absent. */
    char app_name[DERP_APP_NAME_LEN_MAX + 1];
};

/* §4.2 ServerInfo JSON. Zero fields are omitted when sealing. Advertising a non-zero token
 * bucket makes Go clients silently drop excess sends (§13.22). */
struct derp_server_info {
    int64_t version;
    int64_t token_bucket_bytes_per_second;
    int64_t token_bucket_bytes_burst;
};

/* Largest plaintexts we write (ours are tiny: no string but AppName, 63 bytes escaped <= 6x). */
#define DERP_CLIENT_INFO_JSON_MAX 1024
#define DERP_SERVER_INFO_JSON_MAX 128
/* Plaintext space an open may need: the sealed blob minus nonce and tag. */
#define DERP_CLIENT_INFO_PLAIN_MAX (DERP_CLIENT_INFO_LEN_MAX - DERP_KEY_LEN - DERP_SEALED_OVERHEAD)
#define DERP_SERVER_INFO_PLAIN_MAX (DERP_CLIENT_RECV_FRAME_LEN_MAX - DERP_SEALED_OVERHEAD)

/* ---- ServerKey (server sends first, §4 step 1) --------------------------------------------------
 */

/* The whole ServerKey frame (45 bytes). Returns its size or -ENOSPC. */
ssize_t derp_server_key_encode(uint8_t *buf, size_t buf_size, const struct derp_pubkey *server);
/* Client: payload of the first frame -> server key. -EPROTO (short, bad magic), -EMSGSIZE. */
int derp_server_key_decode(const uint8_t *payload, size_t len, struct derp_pubkey *server);

/* ---- ClientInfo (§4 steps 2-3) ------------------------------------------------------------------
 */

/* Client: the whole ClientInfo frame: clientPub || nonce || box(JSON) sealed from client to
 * server. JSON in Go's field order and omissions ({"meshKey":..,"version":2,"CanAckPings":..,
 * "IsProber":true,"AppName":".."}; meshKey only if has_mesh_key and non-zero, version only if
 * non-zero, IsProber only if true, AppName only if non-empty). nonce NULL = random.
 * Returns the frame size, or -ENOSPC, -EINVAL (AppName not UTF-8; the box failed on a
 * degenerate server key), -EIO (libsodium init). */
ssize_t derp_client_info_seal(uint8_t *buf, size_t buf_size, const struct derp_keypair *client,
                              const struct derp_pubkey *server, const struct derp_client_info *info,
                              const uint8_t nonce[DERP_NONCE_LEN]);

/* Server: opens a ClientInfo frame payload with the server's key. *client_key and *info are
 * written only on success. scratch (borrowed, may be NULL = allocate) receives the plaintext;
 * DERP_CLIENT_INFO_PLAIN_MAX always suffices. Returns 0, or
 *   -EPROTO   length below 56 / JSON invalid (syntax, trailing garbage, wrong value types,
 *             meshKey not exactly 64 hex digits - including "" and null - or not an object)
 *   -EMSGSIZE length above 256 KiB
 *   -EBADMSG  the box does not open (wrong key, corrupted, shorter than nonce + tag)
 *   -ENOSPC   scratch_size too small; -ENOMEM; -EIO (libsodium init) */
int derp_client_info_open(const uint8_t *payload, size_t len, const struct derp_keypair *server,
                          struct derp_pubkey *client_key, struct derp_client_info *info,
                          uint8_t *scratch, size_t scratch_size);

/* ---- ServerInfo (§4 step 7) ---------------------------------------------------------------------
 */

/* Server: the whole ServerInfo frame, JSON sealed from server to client. The reference sends
 * {"version":2}; info NULL means exactly that. nonce NULL = random. Returns the frame size,
 * or -ENOSPC, -EINVAL (degenerate client key), -EIO. */
ssize_t derp_server_info_seal(uint8_t *buf, size_t buf_size, const struct derp_keypair *server,
                              const struct derp_pubkey *client_key,
                              const struct derp_server_info *info,
                              const uint8_t nonce[DERP_NONCE_LEN]);

/* Client: opens a ServerInfo frame payload. Same errors and scratch rule as
 * derp_client_info_open (bounds 24..24+1 MiB; DERP_SERVER_INFO_PLAIN_MAX suffices). */
int derp_server_info_open(const uint8_t *payload, size_t len, const struct derp_keypair *client,
                          const struct derp_pubkey *server, struct derp_server_info *info,
                          uint8_t *scratch, size_t scratch_size);

/* ---- JSON alone (exposed for tests and tools) -------------------------------------------------
 */

/* Decode plaintext JSON with the rules above. Return 0 or -EPROTO. */
int derp_client_info_parse_json(const uint8_t *json, size_t len, struct derp_client_info *info);
int derp_server_info_parse_json(const uint8_t *json, size_t len, struct derp_server_info *info);
/* Encode JSON (no NUL). Return the length, -ENOSPC or -EINVAL (AppName not UTF-8). */
ssize_t derp_client_info_format_json(char *buf, size_t buf_size,
                                     const struct derp_client_info *info);
ssize_t derp_server_info_format_json(char *buf, size_t buf_size,
                                     const struct derp_server_info *info);

#endif /* DERP_HANDSHAKE_H */
