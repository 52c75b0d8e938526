/* net_ws.h - WebSocket (RFC 6455) as a net codec, server and client role: after the opening
 * handshake (net_http.h writes and checks it), binary messages carry a byte stream. Message
 * boundaries mean nothing to the app: it sees the payloads concatenated in on_data, and what it
 * sends goes out as binary messages of at most 16 KiB (unmasked from a server, masked with
 * random keys from a client; net_limits.h). Pings are answered, a close is answered and closes
 * the connection, a text message or a message over NET_WS_MESSAGE_MAX closes it. No extension
 * is ever negotiated.
 *
 * The frame decoder and header writer are pure functions (any thread; tests use them without
 * sockets). The codec runs on the connection's shard. Errors: 0 or -errno. */
#ifndef NET_WS_H
#define NET_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hd/net.h>

/* RFC 6455 section 5.2 opcodes. */
enum net_ws_opcode {
    NET_WS_OP_CONT = 0x0,
    NET_WS_OP_TEXT = 0x1,
    NET_WS_OP_BINARY = 0x2,
    NET_WS_OP_CLOSE = 0x8,
    NET_WS_OP_PING = 0x9,
    NET_WS_OP_PONG = 0xa,
};

/* RFC 6455 section 7.4.1 close status codes we send. */
#define NET_WS_CLOSE_NORMAL      1000
#define NET_WS_CLOSE_PROTOCOL    1002 /* a malformed frame, a missing or unexpected mask */
#define NET_WS_CLOSE_UNSUPPORTED 1003 /* a text message where only binary is spoken */
#define NET_WS_CLOSE_POLICY      1008 /* e.g. a client that did not ask for our subprotocol */
#define NET_WS_CLOSE_TOO_BIG     1009 /* a message over NET_WS_MESSAGE_MAX */

/* ---------------------------------------------------------------- frames (pure) */

/* Receives a frame stream. Both callbacks return 0 or -errno (which stops the decoder). */
struct net_ws_sink {
    /* Binary message payload bytes, unmasked, in order (a message may come in many calls). */
    int (*data)(void *arg, const uint8_t *data, size_t len);
    /* A whole control frame (close, ping or pong), payload <= NET_WS_CONTROL_MAX bytes. */
    int (*control)(void *arg, uint8_t opcode, const uint8_t *payload, size_t len);
};

/* Streaming decoder state: bytes may arrive split anywhere (a header over several reads too). */
struct net_ws_decoder {
    bool from_client;                    /* frames must be masked (we are the server) */
    uint8_t opcode;                      /* of the frame being read */
    bool fin, masked, in_frame;          /* in_frame: header read, payload follows */
    bool in_message;                     /* a fragmented binary message continues */
    uint8_t header_len;                  /* header bytes gathered so far */
    uint8_t mask_pos;                    /* payload offset mod 4 */
    uint8_t control_len;                 /* control payload gathered so far */
    uint16_t error_code;                 /* after an error: the close status to send */
    uint64_t left;                       /* payload bytes of this frame still to come */
    uint64_t message_bytes;              /* payload bytes of the current message so far */
    const char *error;                   /* after an error: what was wrong (static text) */
    uint8_t header[NET_WS_HEADER_MAX];   /* the header being gathered */
    uint8_t mask[4];                     /* this frame's masking key */
    uint8_t control[NET_WS_CONTROL_MAX]; /* the control payload being gathered */
};

/* from_client: we are the server (every frame must be masked); else the client (none may be). */
void net_ws_decoder_init(struct net_ws_decoder *d, bool from_client);
/* Decode in[0..len) (unmasked in place), calling sink as messages' bytes and control frames
 * complete; everything is consumed. Returns 0, a sink's error, or -EPROTO (malformed frame,
 * wrong masking, reserved bits or opcodes, a fragmented or long control frame, a continuation
 * without a message, a text message) or -EMSGSIZE (a message over NET_WS_MESSAGE_MAX), with
 * d->error_code and d->error set. A decoder that failed must not be used again. */
int net_ws_decode(struct net_ws_decoder *d, uint8_t *in, size_t len, const struct net_ws_sink *sink,
                  void *arg);
/* Header size of a frame of payload len: 2, 4 or 10, plus 4 when masked. */
size_t net_ws_header_size(uint64_t len, bool masked);
/* Write a frame header into out (NET_WS_HEADER_MAX bytes); mask NULL: unmasked. Returns its
 * size. The payload, masked by the caller (net_ws_mask), follows. */
size_t net_ws_header_write(uint8_t *out, uint8_t opcode, bool fin, uint64_t len,
                           const uint8_t mask[4]);
/* XOR data[0..len) with key, starting at key position pos % 4 (masking and unmasking). */
void net_ws_mask(uint8_t *data, size_t len, const uint8_t key[4], size_t pos);

/* ---------------------------------------------------------------- codec */

/* Install the WebSocket codec on c from inside its on_data, right after the handshake: the
 * bytes after what that on_data call consumes are the first WebSocket bytes (a server's first
 * message may share a read with its 101). The caller has already queued (server) or read
 * (client) the HTTP 101; what the app sends from now on goes out in binary messages. server:
 * we answered the upgrade. Over TLS the codec goes above the TLS one (net_conn_switch_codec).
 * The codec's state lives in one pool frame of c's shard.
 * Returns 0, -EBUSY (c has two codecs already), -ENOMEM (frame pool exhausted). */
int net_ws_start(struct net_conn *c, bool server);
/* Queue a close frame (status code, reason <= NET_WS_CLOSE_REASON_MAX bytes, truncated) behind
 * nothing: what the app queued and was not yet framed is dropped. A server then closes c after
 * the flush with reason (e.g. a 1008 refusal); a client reads on (delivering nothing) until
 * the server's close arrives and then closes with reason, or after NET_WS_CLOSE_WAIT_MS with
 * -ETIMEDOUT (RFC 6455 section 7.1.1: the server closes TCP first). Returns 0 or -EINVAL (c has
 * no WebSocket codec). */
int net_ws_close(struct net_conn *c, uint16_t status, const char *text, int reason);
/* True when c runs the WebSocket codec. */
bool net_ws_active(const struct net_conn *c);

struct net_ws_stats {
    uint64_t pings_in;  /* answered with a pong */
    uint64_t closes_in; /* close frames received */
    uint64_t protocol_errors;
};
/* The codec's counters for c, or NULL when c has no WebSocket codec. */
const struct net_ws_stats *net_ws_stats(const struct net_conn *c);

#endif /* NET_WS_H */
