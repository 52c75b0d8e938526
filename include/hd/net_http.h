/* net_http.h - HTTP/1.1 message heads without sockets: a strict, bounded, incremental parser for
 * requests and responses (RFC 9110/9112) and writers for response and request heads, canned
 * errors, the 101 of a protocol upgrade and the WebSocket handshake. Nothing here allocates or
 * does I/O; every function is safe on any thread for objects that thread owns.
 *
 * Parsing model: the connection keeps the bytes of the message received so far, contiguous, from
 * the first byte of the head, and calls net_http_req_parse() each time more arrive. The parser
 * resumes where it stopped (it stores offsets, so the buffer may move between calls as long as it
 * holds the same bytes). On success it returns the head size; bytes after the head are the
 * caller's (a body, a pipelined request, or - after an upgrade - the new protocol's stream).
 * Parsed strings are pointer + length into the caller's buffer of the last call: valid while that
 * buffer is. */
#ifndef NET_HTTP_H
#define NET_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hd/http_limits.h>

/* A borrowed byte string (not NUL-terminated). ptr is NULL for "absent". */
struct net_http_str {
    const char *ptr;
    size_t len;
};

/* A NUL-terminated literal or C string as a net_http_str. */
#define NET_HTTP_LIT(s) ((struct net_http_str){(s), sizeof(s) - 1})
struct net_http_str net_http_cstr(const char *s);

/* One header field line: offsets into the head (see net_http_header_at). */
struct net_http_field {
    uint16_t name_off;
    uint16_t name_len;
    uint16_t value_off;
    uint16_t value_len; /* without leading and trailing whitespace */
};

/* Connection header tokens (RFC 9110 section 7.6.1), any of the field lines. */
#define NET_HTTP_CONN_F_CLOSE      0x1u
#define NET_HTTP_CONN_F_KEEP_ALIVE 0x2u
#define NET_HTTP_CONN_F_UPGRADE    0x4u

/* What requests and responses share: fields and framing. Fields below "parser state" are private
 * to http_parse.c. */
struct net_http_head {
    const char *base;         /* caller's buffer of the last parse call */
    uint16_t size;            /* head bytes including the final CRLF, once done */
    uint8_t version_minor;    /* HTTP/1.<minor>: 0 or 1 */
    uint8_t conn_flags;       /* NET_HTTP_CONN_F_* */
    uint16_t fields_count;    /* entries of fields[] */
    uint16_t error_status;    /* after an error: the status a server answers it with */
    const char *error_reason; /* static text naming the broken rule, for logs and counters */
    bool has_content_length;
    uint64_t content_length; /* valid when has_content_length */
    struct net_http_field fields[NET_HTTP_HEADERS_MAX];
    /* parser state */
    int result; /* cached final return value, 0 while running */
    uint8_t state;
    uint16_t off;       /* next byte to examine */
    uint16_t mark;      /* start of the element being scanned */
    uint16_t value_end; /* end of the field value without trailing whitespace */
    uint16_t sp1, sp2;  /* offsets of the start line's first and second SP (0: none) */
    uint16_t line_end;  /* offset of the start line's CR */
};

enum net_http_method {
    NET_HTTP_METHOD_OTHER = 0, /* a valid token we do not know: see method string */
    NET_HTTP_METHOD_GET,
    NET_HTTP_METHOD_HEAD,
    NET_HTTP_METHOD_POST,
    NET_HTTP_METHOD_PUT,
    NET_HTTP_METHOD_DELETE,
    NET_HTTP_METHOD_OPTIONS,
    NET_HTTP_METHOD_CONNECT,
    NET_HTTP_METHOD_TRACE,
    NET_HTTP_METHOD_PATCH,
};

/* RFC 9112 section 3.2. */
enum net_http_target_form {
    NET_HTTP_TARGET_ORIGIN = 0, /* /path?query */
    NET_HTTP_TARGET_ABSOLUTE,   /* http://host/path?query (path may be empty, meaning "/") */
    NET_HTTP_TARGET_AUTHORITY,  /* host:port, CONNECT only */
    NET_HTTP_TARGET_ASTERISK,   /* "*", OPTIONS only */
};

struct net_http_req {
    struct net_http_head head;
    enum net_http_method method;
    enum net_http_target_form target_form;
    struct net_http_str method_str; /* case-sensitive token, e.g. "GET" */
    struct net_http_str target;     /* the whole request-target as sent */
    struct net_http_str path;       /* not percent-decoded; "*" for asterisk-form */
    struct net_http_str query;      /* after '?', without it; ptr NULL when there is no '?' */
    struct net_http_str host;       /* absolute-form authority, else Host (ptr NULL: no Host) */
    uint64_t body_size;             /* Content-Length, 0 without one (chunked is refused) */
    bool keep_alive;      /* RFC 9112 section 9.3: another request may follow (after body_size) */
    bool upgrade;         /* RFC 9110 7.8: Connection: upgrade and an Upgrade field (a server that
                           * only looks at the Upgrade value uses net_http_header_get for that) */
    bool expect_continue; /* Expect: 100-continue */
};

/* How the response body is delimited (RFC 9112 section 6.3). */
enum net_http_body {
    NET_HTTP_BODY_NONE = 0,    /* 1xx, 204, 304 or a response to HEAD */
    NET_HTTP_BODY_LENGTH,      /* Content-Length bytes */
    NET_HTTP_BODY_CHUNKED,     /* Transfer-Encoding: chunked (decoding is the caller's) */
    NET_HTTP_BODY_UNTIL_CLOSE, /* neither: the body ends when the server closes */
};

struct net_http_resp {
    struct net_http_head head;
    uint16_t status;            /* 100..599 */
    struct net_http_str reason; /* may be empty */
    enum net_http_body body;
    bool keep_alive;
    bool head_request; /* set by init: the request was HEAD, so no body follows */
};

/* Request parsing. init prepares (or resets, for the next request on a kept-alive connection).
 * parse borrows buf[0..len) for the call; buf holds the message from its first byte.
 * Returns the head size (> 0) when the head is complete, -EAGAIN when more bytes are needed, or
 * an error with head.error_status set to the status to answer (then close the connection):
 * -EPROTO 400 bad syntax (also: bare CR or LF, NUL, control bytes, obs-fold, space before a
 *         colon, a missing or doubled Host in HTTP/1.1, bad or disagreeing Content-Length,
 *         Transfer-Encoding in HTTP/1.0), -EFBIG 413 Content-Length > NET_HTTP_BODY_SIZE_MAX,
 * -ENAMETOOLONG 414 target too long, -EMSGSIZE 431 head or field count too large,
 * -EOPNOTSUPP 501 any Transfer-Encoding (chunked requests are not implemented) or a method
 *         longer than NET_HTTP_METHOD_LEN_MAX, -EPROTONOSUPPORT 505 version other than 1.0/1.1.
 * After a final result, further calls return the same result. */
void net_http_req_init(struct net_http_req *req);
int net_http_req_parse(struct net_http_req *req, const char *buf, size_t len);

/* Response parsing, same model and limits. head_request: the request was HEAD (no body).
 * Returns the head size, -EAGAIN, or -EPROTO (bad syntax, bad or disagreeing Content-Length,
 * Content-Length with Transfer-Encoding, Transfer-Encoding in 1.0), -EMSGSIZE (head or field count
 * too large), -EOPNOTSUPP (a transfer coding other than a single "chunked"), -EPROTONOSUPPORT
 * (version), -EFBIG (Content-Length beyond 2^64). A 1xx other than 101 is a complete head: parse
 * again after it for the final response. */
void net_http_resp_init(struct net_http_resp *resp, bool head_request);
int net_http_resp_parse(struct net_http_resp *resp, const char *buf, size_t len);

/* A chunked response body (NET_HTTP_BODY_CHUNKED; RFC 9112 section 7.1), decoded as it arrives
 * (http_chunked.c). Chunk data passes through in whatever pieces it comes; a chunk-size line
 * (at most NET_HTTP_CHUNK_LINE_MAX bytes) and each trailer line (the trailer section at most
 * NET_HTTP_HEAD_SIZE_MAX) are consumed only once whole, so the caller keeps the bytes not
 * consumed and passes them again, with what follows, in the next call. Trailers are skipped. */
struct net_http_chunked {
    uint64_t left;          /* data bytes of the current chunk still to come */
    uint32_t trailer_bytes; /* trailer section so far */
    uint8_t state;          /* private to http_chunked.c */
};
void net_http_chunked_init(struct net_http_chunked *c);
/* Decodes in[0..len): the body bytes are appended at out + *out_len (never beyond out_cap) and
 * *out_len grows. Returns the bytes of in consumed (fewer than len when a line is incomplete or
 * the body ended: bytes after it are not consumed), or -EPROTO (a bad chunk-size line, no CRLF
 * after chunk data, a line or trailer section over its bound) or -EFBIG (a chunk that would
 * take the body past out_cap). After an error the state is undefined. Pure, any thread. */
ssize_t net_http_chunked_decode(struct net_http_chunked *c, const uint8_t *in, size_t len,
                                uint8_t *out, size_t out_cap, size_t *out_len);
/* True once the last chunk and the trailer section's empty line were consumed. */
bool net_http_chunked_done(const struct net_http_chunked *c);

/* Header access, after a successful parse. Names match case-insensitively. */
/* i-th field line (i < fields_count) into *name and *value. Returns false when out of range. */
bool net_http_header_at(const struct net_http_head *head, size_t i, struct net_http_str *name,
                        struct net_http_str *value);
/* Value of the first field line called name; {NULL, 0} when there is none. */
struct net_http_str net_http_header_get(const struct net_http_head *head, const char *name);
/* Number of field lines called name. */
size_t net_http_header_count(const struct net_http_head *head, const char *name);
/* True when a field line called name holds token in its comma-separated list (case-insensitive),
 * e.g. ("Upgrade", "websocket"). */
bool net_http_header_has_token(const struct net_http_head *head, const char *name,
                               const char *token);

/* The path's percent-escapes decoded into out[0..cap) as Go's net/url decodes URL.Path: "%XX"
 * (hex, either case) is that byte, "+" stays. keep_slash: "%2F" stays as it is, so a router
 * that matches segments (Go 1.22's ServeMux) does not take it for a separator. Returns the
 * length (never more than path.len), -EPROTO for "%" without two hex digits after it (Go's
 * server: 400 Bad Request), or -ENOSPC. Pure, any thread. */
ssize_t net_http_path_unescape(struct net_http_str path, char *out, size_t cap, bool keep_slash);
/* A query's key or value decoded as Go's url.QueryUnescape: "+" is a space, "%XX" that byte.
 * Returns the length (never more than s.len), -EPROTO for "%" without two hex digits after it,
 * or -ENOSPC. Pure, any thread. */
ssize_t net_http_query_unescape(struct net_http_str s, char *out, size_t cap);

/* Hex digits, either case (Go's unhex): a digit's value 0..15, or -1 for any other char. */
int net_hex_digit(char c);
/* hex[0..hex_len) as bytes into out[0..cap): returns hex_len / 2, -EINVAL for an odd length or
 * a byte that is not a hex digit (out may hold the bytes before it), -ENOSPC when the bytes do
 * not fit cap. */
ssize_t net_hex_decode(const char *hex, size_t hex_len, uint8_t *out, size_t cap);

/* String helpers. */
bool net_http_str_eq(struct net_http_str s, const char *lit);        /* exact */
bool net_http_str_eq_nocase(struct net_http_str s, const char *lit); /* ASCII case-insensitive */
/* True when the comma-separated list holds token (OWS trimmed, empty elements skipped). */
bool net_http_list_has_token(struct net_http_str list, const char *token);
/* Grammar checks, also used by the writers: token (RFC 9110 section 5.6.2, non-empty); field
 * value bytes (VCHAR, obs-text, SP, HTAB: no CR, LF, NUL or other controls); Host value
 * (uri-host [":" port] characters of RFC 3986 section 3.2.2, empty allowed). */
bool net_http_token_valid(struct net_http_str s);
bool net_http_value_valid(struct net_http_str s);
bool net_http_host_valid(struct net_http_str s);

/* ---- writers (http_write.c). All return bytes written (<= size) or -ENOSPC when buf is too
 * small (buf contents unspecified then), or -EINVAL for a value that would break the message
 * (CR, LF, NUL or other control bytes in a value, a non-token name). Nothing is NUL-terminated. */

/* How a written head fills its Connection field. */
enum net_http_conn {
    NET_HTTP_CONN_OMIT = 0,   /* no Connection field (HTTP/1.1 default: keep-alive) */
    NET_HTTP_CONN_KEEP_ALIVE, /* "Connection: keep-alive" (for HTTP/1.0 peers) */
    NET_HTTP_CONN_CLOSE,      /* "Connection: close": the writer's side closes after it */
    NET_HTTP_CONN_UPGRADE,    /* "Connection: Upgrade" */
};

/* An extra header to write: name is a C string (a token), value is any field value. */
struct net_http_hdr {
    const char *name;
    struct net_http_str value;
};

struct net_http_resp_spec {
    uint16_t status;                    /* 100..599 */
    const char *reason;                 /* NULL: net_http_reason(status) */
    const struct net_http_hdr *headers; /* written in order, after the status line */
    size_t headers_count;
    int64_t content_length; /* < 0: no Content-Length field */
    enum net_http_conn connection;
};

/* Standard reason phrase of a status ("Not Found"), "Unknown" for others. */
const char *net_http_reason(unsigned status);

/* "HTTP/1.1 <status> <reason>\r\n" <headers> [Content-Length] [Connection] "\r\n". */
int net_http_write_resp(char *buf, size_t size, const struct net_http_resp_spec *spec);

/* A text/plain response: head (Content-Type: text/plain; charset=utf-8, X-Content-Type-Options:
 * nosniff, Content-Length, Connection per conn) then text unless head_only (response to HEAD). */
int net_http_write_text(char *buf, size_t size, uint16_t status, struct net_http_str text,
                        enum net_http_conn conn, bool head_only);

/* Canned answer to a parse error or any status: net_http_write_text with body "<reason>\n" and
 * Connection: close. */
int net_http_write_error(char *buf, size_t size, uint16_t status, bool head_only);

/* The answer that switches a connection to another protocol (RFC 9110 section 15.2.2):
 * "HTTP/1.1 101 Switching Protocols", "Upgrade: <protocol>", "Connection: Upgrade", then headers
 * in order and the empty line. protocol: non-empty field value (e.g. "websocket"). A protocol on
 * top (e.g. net_http_write_ws_101) adds its fields here. */
int net_http_write_101(char *buf, size_t size, struct net_http_str protocol,
                       const struct net_http_hdr *headers, size_t headers_count);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 section 4.2.2): base64(SHA-1(key ||
 * 258EAFA5-E914-47DA-95CA-C5AB0DC85B11)), written to out with a NUL. Returns 0, or -EINVAL when
 * key is not 24 base64 characters encoding 16 bytes. */
int net_http_ws_accept(struct net_http_str key, char out[NET_HTTP_WS_ACCEPT_LEN + 1]);

/* Checks a request is a WebSocket opening handshake we can accept (RFC 6455 section 4.2.1):
 * GET, HTTP/1.1, Connection: upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13, one valid
 * Sec-WebSocket-Key. Returns 0, or -EPROTO with *status set to the answer: 405 (method), 426
 * (not an upgrade to websocket), 400 (version or key; answer 400 with Sec-WebSocket-Version: 13).
 */
int net_http_ws_check(const struct net_http_req *req, uint16_t *status);

/* The WebSocket 101: Upgrade: websocket, Connection: Upgrade, Sec-WebSocket-Accept, and
 * Sec-WebSocket-Protocol: protocol when protocol.ptr is not NULL. -EINVAL for a bad key. */
int net_http_write_ws_101(char *buf, size_t size, struct net_http_str key,
                          struct net_http_str protocol);

/* A client request head: "<method> <target> HTTP/1.1\r\nHost: <host>\r\n" <headers>
 * [Content-Length] [Connection] "\r\n". The body, if any, is the caller's to send. */
struct net_http_req_spec {
    const char *method;         /* a token, e.g. "GET", "POST" */
    struct net_http_str target; /* origin-form, e.g. "/chat?room=1" */
    struct net_http_str host;   /* host[:port] */
    const struct net_http_hdr *headers;
    size_t headers_count;
    int64_t content_length; /* < 0: no Content-Length field */
    enum net_http_conn connection;
};
int net_http_write_req(char *buf, size_t size, const struct net_http_req_spec *spec);

#endif /* NET_HTTP_H */
