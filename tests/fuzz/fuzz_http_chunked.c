/* fuzz_http_chunked.c - libFuzzer target for the chunked body decoder (net/http_chunked.c, what
 * net/http_client.c reads a chunked response with). Input: a mode byte, a cap byte, then data.
 * Mode bit 0 clear: the data is a body as a peer sent it, decoded whole and again fed in pieces
 * (cut points from the mode byte's other bits), the way a connection feeds it: the bytes left
 * unconsumed come again in front of the next piece. Both must end alike: the same error, or the
 * same bytes consumed, body and end. Mode bit 0 set: the data is a body to encode, in chunks
 * sized by its own bytes, with extensions, upper-case and zero-padded sizes, bare LF line ends
 * and trailers as the other bits say; it must decode to itself exactly, stop at its end, and be
 * refused with -EFBIG when it does not fit. */
#include <errno.h>
#include <string.h>

#include "fuzz_util.h"
#include <hd/net_http.h>

/* Inputs beyond this are cut: the decoder's state is per byte, and long inputs only slow runs. */
#define IN_MAX 32768
/* Encoded: at worst 1-byte chunks of 18 bytes each (padded size, extension, two line ends). */
#define ENC_MAX (20 * IN_MAX + 256)

static uint8_t out_a[IN_MAX], out_b[IN_MAX], enc[ENC_MAX], pending[ENC_MAX];

struct result {
    ssize_t rc; /* the error, or the bytes consumed */
    size_t out_len;
    bool done;
};

static struct result decode_whole(const uint8_t *in, size_t len, uint8_t *out, size_t cap)
{
    struct net_http_chunked c;
    net_http_chunked_init(&c);
    struct result r = {0};
    r.rc = net_http_chunked_decode(&c, in, len, out, cap, &r.out_len);
    CHECK(r.rc < 0 || (size_t)r.rc <= len);
    CHECK(r.out_len <= cap);
    r.done = r.rc >= 0 && net_http_chunked_done(&c);
    if (r.done) /* nothing after the end is taken */
        CHECK(net_http_chunked_decode(&c, in + r.rc, len - (size_t)r.rc, out, cap, &r.out_len) ==
              0);
    return r;
}

/* Pieces of 1 + (seed bits) bytes; unconsumed bytes are kept and fed again. */
static struct result decode_split(const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                                  unsigned seed)
{
    struct net_http_chunked c;
    net_http_chunked_init(&c);
    struct result r = {0};
    size_t kept = 0, total = 0;
    for (size_t off = 0; off < len;) {
        size_t piece = 1 + (seed & 7) * (seed & 8 ? 1 : 97);
        seed = seed * 1103515245u + 12345u;
        if (piece > len - off)
            piece = len - off;
        memcpy(pending + kept, in + off, piece);
        kept += piece;
        off += piece;
        ssize_t n = net_http_chunked_decode(&c, pending, kept, out, cap, &r.out_len);
        if (n < 0) {
            r.rc = n;
            return r;
        }
        CHECK((size_t)n <= kept);
        memmove(pending, pending + n, kept - (size_t)n);
        kept -= (size_t)n;
        total += (size_t)n;
        if (net_http_chunked_done(&c))
            break;
    }
    r.rc = (ssize_t)total;
    r.done = net_http_chunked_done(&c);
    return r;
}

static void raw(const uint8_t *in, size_t len, size_t cap, unsigned seed)
{
    struct result a = decode_whole(in, len, out_a, cap);
    struct result b = decode_split(in, len, out_b, cap, seed);
    CHECK(a.rc == -EPROTO || a.rc == -EFBIG || a.rc >= 0);
    CHECK(a.rc == b.rc);
    if (a.rc < 0)
        return;
    CHECK(a.done == b.done);
    CHECK(a.out_len == b.out_len && memcmp(out_a, out_b, a.out_len) == 0);
}

static size_t put(size_t n, const char *s)
{
    size_t l = strlen(s);
    memcpy(enc + n, s, l);
    return n + l;
}

/* body in chunks of 1 + in[i] bytes (options from flags), then the last chunk and trailers. */
static size_t encode(const uint8_t *body, size_t len, unsigned flags)
{
    const char *eol = flags & 2 ? "\n" : "\r\n";
    size_t n = 0;
    for (size_t off = 0, i = 0; off < len; i++) {
        size_t size = 1 + body[i % len];
        if (size > len - off)
            size = len - off;
        char line[64];
        snprintf(line, sizeof(line), flags & 4 ? "%s%zX%s%s" : "%s%zx%s%s", flags & 8 ? "000" : "",
                 size, flags & 16 ? " ;ext=\"v\"" : "", eol);
        n = put(n, line);
        memcpy(enc + n, body + off, size);
        n += size;
        n = put(n, "\r\n"); /* after data a CRLF, always */
        off += size;
    }
    n = put(n, flags & 16 ? "0;last" : "0");
    n = put(n, eol);
    if (flags & 32) {
        n = put(n, "X-Trailer: 1");
        n = put(n, eol);
    }
    return put(n, eol);
}

static void roundtrip(const uint8_t *body, size_t len, unsigned flags)
{
    size_t n = encode(body, len, flags);
    enc[n] = 'Z'; /* a byte after the body: never consumed */
    struct result a = decode_whole(enc, n + 1, out_a, len);
    CHECK(a.rc == (ssize_t)n && a.done);
    CHECK(a.out_len == len && memcmp(out_a, body, len) == 0);
    struct result b = decode_split(enc, n, out_b, len, flags);
    CHECK(b.rc == (ssize_t)n && b.done && b.out_len == len);
    if (len > 0) /* one byte short of room: refused, never written past */
        CHECK(decode_whole(enc, n, out_a, len - 1).rc == -EFBIG);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned mode = data[0];
    size_t len = size - 2 < IN_MAX ? size - 2 : IN_MAX;
    const uint8_t *p = data + 2;
    if (mode & 1) {
        roundtrip(p, len, mode);
    } else {
        size_t cap = data[1] == 255 ? IN_MAX : (size_t)data[1] * 64; /* 0: an empty body fits */
        raw(p, len, cap, mode >> 1);
    }
    return 0;
}
