/* server_secrets.h - derper's -secrets-url: the mesh key from a setec server (server_secrets.c). */
#ifndef SERVER_SECRETS_H
#define SERVER_SECRETS_H

#include <stddef.h>

#include "derp_proto.h"

#define SRV_SECRETS_PATH_MAX 1024 /* -secrets-url and -secrets-cache-dir, each */

/* The secret "<prefix>/meshkey" of the setec server at url as a mesh key, cached in the file
 * cache_path. Blocks until the server answers (or the cache has it), as derper. 0; 1 when the
 * secret is empty (derper then runs without a mesh key); or -errno with the reason in err (the
 * cache path unusable, the value not a mesh key). Main thread. */
int srv_secrets_mesh_key(const char *url, const char *prefix, const char *cache_path,
                         struct derp_mesh_key *out, char *err, size_t err_size);

#endif /* SERVER_SECRETS_H */
