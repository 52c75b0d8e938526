/* fuzz_derp_info.c - libFuzzer target for the login's sealed JSON (apps/derp/proto/
 * derp_handshake.c): ClientInfo and ServerInfo, as JSON alone and inside the NaCl box. Input: a
 * mode byte, then bytes. Mode 0/1: the bytes are ClientInfo/ServerInfo JSON, parsed; when they
 * parse, formatting the result and parsing that again gives the same fields (the server and
 * client agree with themselves). Mode 2/3: the bytes are that JSON sealed with fixed keys
 * (crypto_box_easy, as a real peer does) and opened through derp_client_info_open /
 * derp_server_info_open: a box that opens decodes exactly as the JSON alone does. Mode 4/5: the
 * bytes are a raw frame payload (a box that will not open, or a short one): only the error
 * codes the functions document. */
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "derp_handshake.h"
#include "derp_keys.h"
#include "fuzz_util.h"

static struct derp_keypair client, server;
static uint8_t scratch[DERP_CLIENT_INFO_PLAIN_MAX > DERP_SERVER_INFO_PLAIN_MAX
                           ? DERP_CLIENT_INFO_PLAIN_MAX
                           : DERP_SERVER_INFO_PLAIN_MAX];

static void keys_once(void)
{
    static bool done;
    if (done)
        return;
    CHECK(derp_crypto_init() == 0);
    struct derp_privkey a, b;
    memset(a.bytes, 0x11, sizeof(a.bytes));
    memset(b.bytes, 0x22, sizeof(b.bytes));
    CHECK(derp_keypair_from_privkey(&client, &a) == 0);
    CHECK(derp_keypair_from_privkey(&server, &b) == 0);
    done = true;
}

static bool ci_equal(const struct derp_client_info *x, const struct derp_client_info *y)
{
    return x->version == y->version && x->can_ack_pings == y->can_ack_pings &&
           x->is_prober == y->is_prober && x->has_mesh_key == y->has_mesh_key &&
           (!x->has_mesh_key || memcmp(&x->mesh_key, &y->mesh_key, sizeof(x->mesh_key)) == 0) &&
           strcmp(x->app_name, y->app_name) == 0;
}

static bool si_equal(const struct derp_server_info *x, const struct derp_server_info *y)
{
    return memcmp(x, y, sizeof(*x)) == 0;
}

static void client_json(const uint8_t *p, size_t len, struct derp_client_info *out, int *rc)
{
    *rc = derp_client_info_parse_json(p, len, out);
    CHECK(*rc == 0 || *rc == -EPROTO);
    if (*rc)
        return;
    CHECK(strlen(out->app_name) <= DERP_APP_NAME_LEN_MAX);
    char again[DERP_CLIENT_INFO_JSON_MAX];
    ssize_t n = derp_client_info_format_json(again, sizeof(again), out);
    CHECK(n > 0); /* whatever we accepted, we can write */
    struct derp_client_info back;
    CHECK(derp_client_info_parse_json((const uint8_t *)again, (size_t)n, &back) == 0);
    CHECK(ci_equal(out, &back));
}

static void server_json(const uint8_t *p, size_t len, struct derp_server_info *out, int *rc)
{
    *rc = derp_server_info_parse_json(p, len, out);
    CHECK(*rc == 0 || *rc == -EPROTO);
    if (*rc)
        return;
    char again[DERP_SERVER_INFO_JSON_MAX];
    ssize_t n = derp_server_info_format_json(again, sizeof(again), out);
    if (n == -ENOSPC)
        return; /* huge numbers: more digits than we ever write */
    CHECK(n > 0);
    struct derp_server_info back;
    CHECK(derp_server_info_parse_json((const uint8_t *)again, (size_t)n, &back) == 0);
    CHECK(si_equal(out, &back));
}

/* The frame payload a peer would send: [clientPub] nonce box(json). */
static size_t seal(bool client_info, const uint8_t *json, size_t len, uint8_t *out)
{
    size_t off = 0;
    if (client_info) {
        memcpy(out, client.pub.bytes, DERP_KEY_LEN);
        off = DERP_KEY_LEN;
    }
    uint8_t *nonce = out + off;
    memset(nonce, 0x5a, DERP_NONCE_LEN);
    const struct derp_keypair *from = client_info ? &client : &server;
    const struct derp_keypair *to = client_info ? &server : &client;
    CHECK(crypto_box_easy(nonce + DERP_NONCE_LEN, json, len, nonce, to->pub.bytes,
                          from->priv.bytes) == 0);
    return off + DERP_SEALED_OVERHEAD + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    keys_once();
    unsigned mode = data[0] % 6;
    const uint8_t *p = data + 1;
    size_t len = size - 1;
    static uint8_t payload[65536 + DERP_KEY_LEN + DERP_SEALED_OVERHEAD];
    struct derp_client_info ci, ci2;
    struct derp_server_info si, si2;
    struct derp_pubkey who;
    int rc, rc2;
    switch (mode) {
    case 0:
        client_json(p, len, &ci, &rc);
        break;
    case 1:
        server_json(p, len, &si, &rc);
        break;
    case 2:
        client_json(p, len, &ci, &rc);
        rc2 = derp_client_info_open(payload, seal(true, p, len, payload), &server, &who, &ci2,
                                    scratch, sizeof(scratch));
        CHECK(rc2 == rc || (rc2 == -EMSGSIZE && len > DERP_CLIENT_INFO_PLAIN_MAX));
        CHECK(rc2 != 0 || (ci_equal(&ci, &ci2) && derp_pubkey_equal(&who, &client.pub)));
        break;
    case 3:
        server_json(p, len, &si, &rc);
        rc2 = derp_server_info_open(payload, seal(false, p, len, payload), &client, &server.pub,
                                    &si2, scratch, sizeof(scratch));
        CHECK(rc2 == rc);
        CHECK(rc2 != 0 || si_equal(&si, &si2));
        break;
    case 4:
        rc = derp_client_info_open(p, len, &server, &who, &ci, scratch, sizeof(scratch));
        CHECK(rc == 0 || rc == -EPROTO || rc == -EMSGSIZE || rc == -EBADMSG);
        break;
    default:
        rc = derp_server_info_open(p, len, &client, &server.pub, &si, scratch, sizeof(scratch));
        CHECK(rc == 0 || rc == -EPROTO || rc == -EMSGSIZE || rc == -EBADMSG);
        break;
    }
    return 0;
}
