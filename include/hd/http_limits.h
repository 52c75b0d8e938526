/* http_limits.h - every bound of the HTTP/1.1 head parser and writer, with the reason for it.
 * Header-only; any thread. The parser never reads past NET_HTTP_HEAD_SIZE_MAX bytes of a head, so
 * these numbers are also the worst case of work and memory one connection can cost before the
 * request is understood. */
#ifndef NET_HTTP_LIMITS_H
#define NET_HTTP_LIMITS_H

#include <stdint.h>

/* Whole head (start line + fields + final CRLF). A protocol upgrade from a program is ~200 bytes,
 * a browser visiting a home page ~1 KiB; 8 KiB is what nginx accepts per buffer by default and
 * keeps the per-connection reassembly buffer small (Go's 1 MiB default is far beyond what small
 * service endpoints need). Exceeding it is 431. */
#define NET_HTTP_HEAD_SIZE_MAX 8192

/* Header field lines per head. Browsers send ~15, Go's HTTP clients in programs 4-6; 64 leaves
 * room for proxies that add forwarding headers. The 65th line is 431. */
#define NET_HTTP_HEADERS_MAX 64

/* request-target bytes. Our endpoints have paths under 32 bytes; 2 KiB accepts long debug
 * queries (?debugkey=...) and matches the classic browser URL limit. Longer is 414. */
#define NET_HTTP_TARGET_LEN_MAX 2048

/* Method bytes. The longest registered method in common use (VERSION-CONTROL) is 15 bytes;
 * longer than any method we implement is 501 (RFC 9112 section 3). */
#define NET_HTTP_METHOD_LEN_MAX 16

/* "HTTP/1.1" - the only version syntax there is (RFC 9112 section 2.3). */
#define NET_HTTP_VERSION_LEN 8

/* Request body bytes announced by Content-Length. No endpoint we serve reads a body; the bound
 * lets small POST endpoints exist without letting a client park megabytes on us. Larger is 413.
 * Response bodies are not bounded here: the client that reads one applies its own cap. */
#define NET_HTTP_BODY_SIZE_MAX 65536

/* One chunk-size line of a chunked body (RFC 9112 section 7.1) with its extensions and line
 * end: Go's net/http reads at most 4096 bytes of one (maxLineLength). Longer is a bad body,
 * whether or not its end has arrived. The trailer section after the last chunk is bounded by
 * NET_HTTP_HEAD_SIZE_MAX, as a head is. */
#define NET_HTTP_CHUNK_LINE_MAX 4096

/* RFC 6455 section 4.2.1: Sec-WebSocket-Key is base64 of 16 bytes = 24 chars; the accept value
 * is base64 of a SHA-1 digest (20 bytes) = 28 chars. */
#define NET_HTTP_WS_KEY_LEN    24
#define NET_HTTP_WS_ACCEPT_LEN 28

/* Offsets into the head are stored as uint16_t to keep struct net_http_head small. */
_Static_assert(NET_HTTP_HEAD_SIZE_MAX <= UINT16_MAX, "head offsets must fit in uint16_t");
_Static_assert(NET_HTTP_HEADERS_MAX <= UINT16_MAX, "fields_count is a uint16_t");
/* 414 must be reachable: the request line with the longest method and target fits in a head. */
_Static_assert(NET_HTTP_METHOD_LEN_MAX + 1 + NET_HTTP_TARGET_LEN_MAX + 1 + NET_HTTP_VERSION_LEN +
                       4 <
                   NET_HTTP_HEAD_SIZE_MAX,
               "the request-line limits must trigger before the head limit");
/* Every field line costs at least 4 bytes ("a:\r\n"): the count limit is reachable in a head. */
_Static_assert(NET_HTTP_HEADERS_MAX * 4 + 32 < NET_HTTP_HEAD_SIZE_MAX,
               "the field count limit must be reachable before the head limit");
_Static_assert(NET_HTTP_WS_ACCEPT_LEN == 4 * ((20 + 2) / 3), "base64 of a SHA-1 digest");

#endif /* NET_HTTP_LIMITS_H */
