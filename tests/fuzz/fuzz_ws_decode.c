/* fuzz_ws_decode.c - libFuzzer target for the WebSocket frame decoder (net/ws_frame.c).
 * Input: one mode byte (bit 0: we are the server, so frames must be masked; bits 1-7: where to
 * split the rest, scaled to its length), then the bytes a peer sent. Beyond "no crash, no
 * sanitizer report" it checks what the decoder promises: a split feed gives exactly the same
 * payload bytes, control frames and verdict as a whole one; no message delivers more than
 * NET_WS_MESSAGE_MAX bytes; control payloads are at most 125 bytes; a failure sets a close
 * status and a reason. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/net_ws.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A digest of what the sink saw, compared between the whole and the split run. */
struct trace {
    uint64_t data_bytes, hash;
    unsigned controls;
};

static void mix(struct trace *t, uint64_t v)
{
    t->hash = (t->hash ^ v) * 0x100000001b3ull;
}

static int t_data(void *arg, const uint8_t *p, size_t len)
{
    struct trace *t = arg;
    CHECK(len > 0);
    for (size_t i = 0; i < len; i++)
        mix(t, p[i]);
    t->data_bytes += len;
    return 0;
}

static int t_control(void *arg, uint8_t op, const uint8_t *p, size_t len)
{
    struct trace *t = arg;
    CHECK(op == NET_WS_OP_CLOSE || op == NET_WS_OP_PING || op == NET_WS_OP_PONG);
    CHECK(len <= NET_WS_CONTROL_MAX);
    mix(t, 0x1000u + op);
    for (size_t i = 0; i < len; i++)
        mix(t, p[i]);
    t->controls++;
    return 0;
}

static const struct net_ws_sink sink = {.data = t_data, .control = t_control};

static int run(bool server, uint8_t *buf, size_t len, size_t cut, struct trace *t,
               struct net_ws_decoder *d)
{
    memset(t, 0, sizeof(*t));
    net_ws_decoder_init(d, server);
    int rc = net_ws_decode(d, buf, cut, &sink, t);
    if (rc == 0)
        rc = net_ws_decode(d, buf + cut, len - cut, &sink, t);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool server = data[0] & 1;
    size_t len = size - 1;
    size_t cut = len * (data[0] >> 1) / 127;
    uint8_t *a = malloc(len + 1), *b = malloc(len + 1); /* decoding unmasks in place */
    CHECK(a && b);
    memcpy(a, data + 1, len);
    memcpy(b, data + 1, len);
    struct trace ta, tb;
    struct net_ws_decoder da, db;
    int ra = run(server, a, len, len, &ta, &da);
    int rb = run(server, b, len, cut, &tb, &db);
    CHECK(ra == rb);
    CHECK(ra == 0 || ra == -EPROTO || ra == -EMSGSIZE);
    CHECK(ta.data_bytes == tb.data_bytes && ta.hash == tb.hash && ta.controls == tb.controls);
    CHECK(da.message_bytes <= NET_WS_MESSAGE_MAX);
    if (ra < 0) {
        CHECK(da.error != NULL && db.error != NULL && strcmp(da.error, db.error) == 0);
        CHECK(da.error_code >= 1000 && da.error_code == db.error_code);
    }
    free(a);
    free(b);
    return 0;
}
