/* derp_keys.h - DERP keys (§3): Curve25519 node keys and their text forms, the server's private
 * key file (cmd/derper -c, JSON {"PrivateKey": "privkey:<hex>"}), and the mesh pre-shared key
 * (-mesh-psk-file, ClientInfo meshKey). Functions without files are pure and run on any thread;
 * the file functions do blocking I/O and belong to start-up. Crypto is libsodium. */
#ifndef DERP_KEYS_H
#define DERP_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "derp_limits.h"

/* Raw 32-byte keys. Separate types so a private key cannot be passed where a public one goes. */
struct derp_pubkey {
    uint8_t bytes[DERP_KEY_LEN];
};

struct derp_privkey {
    uint8_t bytes[DERP_KEY_LEN];
};

struct derp_keypair {
    struct derp_privkey priv;
    struct derp_pubkey pub;
};

/* types/key/derp.go DERPMesh. All-zero = no mesh key. */
struct derp_mesh_key {
    uint8_t bytes[DERP_MESH_KEY_LEN];
};

/* Initialises libsodium (idempotent, thread-safe) and seeds jansson's hash. Every function here
 * and in derp_handshake that needs randomness or crypto calls it itself; call it once at
 * start-up, before the shards start, to fail early. Returns 0 or -EIO. */
int derp_crypto_init(void);

/* ---- Node keys ------------------------------------------------------------------------------- */

/* §3: k[0] &= 248; k[31] = (k[31] & 127) | 64, as key.NewNode does at generation. */
void derp_privkey_clamp(struct derp_privkey *k);
/* Fresh random clamped key. Returns 0 or -EIO (libsodium failed to initialise). */
int derp_privkey_generate(struct derp_privkey *out);
/* crypto_scalarmult_base. Returns 0, -EIO, or -EINVAL (the key gives the all-zero point). */
int derp_pubkey_from_privkey(struct derp_pubkey *out, const struct derp_privkey *priv);
/* Copies priv and derives pub. Returns 0, -EIO or -EINVAL as derp_pubkey_from_privkey. */
int derp_keypair_from_privkey(struct derp_keypair *kp, const struct derp_privkey *priv);
/* New random key pair. Returns 0 or -EIO. */
int derp_keypair_generate(struct derp_keypair *kp);
/* Public keys are not secret: ordinary comparison. */
bool derp_pubkey_equal(const struct derp_pubkey *a, const struct derp_pubkey *b);
/* True if all 32 bytes are zero. Constant time (also used on private keys). */
bool derp_key_bytes_is_zero(const uint8_t key[DERP_KEY_LEN]);

/* ---- Text forms (§3) ---------------------------------------------------------------------------
 * Output: lowercase hex, NUL-terminated. Input: hex digits in either case (Go's hex.Decode). */

/* Bare 64 hex ("untyped": Derp-Public-Key header, meta-cert CN). */
void derp_key_hex_format(const uint8_t key[DERP_KEY_LEN], char out[DERP_KEY_HEX_SIZE]);
/* "nodekey:<64 hex>". */
void derp_pubkey_format(const struct derp_pubkey *k, char out[DERP_PUBKEY_TEXT_SIZE]);
/* "privkey:<64 hex>". Secret: wipe the buffer (sodium_memzero) when done. */
void derp_privkey_format(const struct derp_privkey *k, char out[DERP_PRIVKEY_TEXT_SIZE]);
/* Exactly 64 hex digits. Returns 0 or -EINVAL. */
int derp_key_hex_parse(const char *text, size_t len, uint8_t out[DERP_KEY_LEN]);
/* "nodekey:<64 hex>" or bare 64 hex (every key argument of our tools accepts both).
 * The prefix is case-sensitive as in types/key. Returns 0 or -EINVAL. */
int derp_pubkey_parse(const char *text, size_t len, struct derp_pubkey *out);
/* "privkey:<64 hex>" or bare 64 hex. Returns 0 or -EINVAL. */
int derp_privkey_parse(const char *text, size_t len, struct derp_privkey *out);

/* ---- Server private key file (cmd/derper loadConfig / writeNewConfig) --------------------------
 * err (may be NULL) receives one human-readable line naming the file and the problem. */

/* Reads path: JSON object whose key matching "PrivateKey" case-insensitively (Go decoding) is a
 * string "privkey:<64 hex>"; other keys ignored. Returns 0, or
 *   -ENOENT missing (the caller may create it), other -errno from open/read (unreadable),
 *   -EFBIG  larger than DERP_KEY_FILE_SIZE_MAX, -EINVAL malformed / no or zero PrivateKey. */
int derp_key_file_load(const char *path, struct derp_privkey *out, char *err, size_t err_size);
/* Generates a new key and writes it as derper does ({\n\t"PrivateKey": "privkey:<hex>"\n}),
 * atomically (temp file in the same directory, fsync, rename, fsync dir) with mode 0600;
 * missing parent directories are created. Replaces an existing file. Returns 0 or -errno. */
int derp_key_file_create(const char *path, struct derp_privkey *out, char *err, size_t err_size);
/* derper's behaviour: load; if missing, create. *created (may be NULL) tells which happened. */
int derp_key_file_load_or_create(const char *path, struct derp_privkey *out, bool *created,
                                 char *err, size_t err_size);

/* ---- Mesh key (§3, §7) -------------------------------------------------------------------------
 */

/* -mesh-psk-file / env format (key.ParseDERPMesh): surrounding whitespace trimmed, then exactly
 * 64 hex digits in either case. Returns 0 or -EINVAL. */
int derp_mesh_key_parse(const char *text, size_t len, struct derp_mesh_key *out);
/* Reads and parses a mesh PSK file. Returns 0, -errno (unreadable), -EFBIG or -EINVAL. */
int derp_mesh_key_load_file(const char *path, struct derp_mesh_key *out, char *err,
                            size_t err_size);
/* Lowercase 64 hex (the JSON form). */
void derp_mesh_key_format(const struct derp_mesh_key *k, char out[DERP_KEY_HEX_SIZE]);
bool derp_mesh_key_is_zero(const struct derp_mesh_key *k);
/* Constant-time over all 32 bytes (sodium_memcmp). */
bool derp_mesh_key_equal(const struct derp_mesh_key *a, const struct derp_mesh_key *b);
/* derpserver.go isMeshPeer: the client presented a non-zero key equal to the server's. A server
 * without a mesh key (all zero) therefore admits nobody. */
bool derp_mesh_key_admits(const struct derp_mesh_key *server, const struct derp_mesh_key *client);

#endif /* DERP_KEYS_H */
