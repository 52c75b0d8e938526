/* http_chunked.c - the chunked transfer coding of a response body (RFC 9112 section 7.1),
 * decoded as it arrives: chunk data is passed through piece by piece (a chunk of any size needs
 * no buffer of its own), while a chunk-size line and each trailer line are taken only whole, so
 * the caller keeps what was not consumed and feeds it again with the bytes that follow (what a
 * connection does with the bytes its on_data leaves). Pure code, any thread; owns nothing. */
#include <hd/net_http.h>

#include <errno.h>
#include <string.h>

enum {
    CHUNK_SIZE = 0, /* at a chunk-size line */
    CHUNK_DATA,     /* inside chunk data: left bytes to go */
    CHUNK_DATA_END, /* the CRLF after chunk data */
    CHUNK_TRAILER,  /* after the last chunk: trailer lines up to an empty line */
    CHUNK_DONE,
};

void net_http_chunked_init(struct net_http_chunked *c)
{
    *c = (struct net_http_chunked){.state = CHUNK_SIZE};
}

bool net_http_chunked_done(const struct net_http_chunked *c)
{
    return c->state == CHUNK_DONE;
}

/* The line at p (len bytes available): its length with the LF, 0 while its end has not
 * arrived, or -EPROTO once it is longer than max (complete or not, so a split feed decides as
 * the whole would). */
static ssize_t line_len(const uint8_t *p, size_t len, size_t max)
{
    const uint8_t *lf = memchr(p, '\n', len < max ? len : max);
    if (lf)
        return lf - p + 1;
    return len < max ? 0 : -EPROTO;
}

/* chunk-size [ BWS ";" chunk-ext ] CRLF (a bare LF ends it too): up to 16 hex digits, then
 * optional blanks, then the end or a ';' and extensions (not interpreted). */
static int parse_size(const uint8_t *p, size_t n, uint64_t *size)
{
    n -= 1; /* the LF */
    if (n && p[n - 1] == '\r')
        n--;
    size_t i = 0;
    *size = 0;
    for (int v; i < n && (v = net_hex_digit((char)p[i])) >= 0; i++) {
        if (i == 16)
            return -EPROTO; /* more than 64 bits */
        *size = *size << 4 | (uint64_t)v;
    }
    if (i == 0)
        return -EPROTO;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    if (i < n && p[i] != ';')
        return -EPROTO;
    for (; i < n; i++)
        if (p[i] == '\r' || p[i] == '\0')
            return -EPROTO; /* no bare CR or NUL inside a line */
    return 0;
}

/* One step at in[off..len): returns bytes consumed (0: nothing can be done before more bytes
 * arrive) or -errno. */
static ssize_t step(struct net_http_chunked *c, const uint8_t *in, size_t len, uint8_t *out,
                    size_t out_cap, size_t *out_len)
{
    switch (c->state) {
    case CHUNK_SIZE: {
        ssize_t n = line_len(in, len, NET_HTTP_CHUNK_LINE_MAX);
        if (n <= 0)
            return n;
        uint64_t size;
        if (parse_size(in, (size_t)n, &size) < 0)
            return -EPROTO;
        if (size > out_cap - *out_len)
            return -EFBIG;
        c->left = size;
        c->state = size ? CHUNK_DATA : CHUNK_TRAILER;
        return n;
    }
    case CHUNK_DATA: {
        size_t n = len < c->left ? len : (size_t)c->left;
        memcpy(out + *out_len, in, n);
        *out_len += n;
        c->left -= n;
        if (c->left == 0)
            c->state = CHUNK_DATA_END;
        return (ssize_t)n;
    }
    case CHUNK_DATA_END:
        if (in[0] != '\r' || (len >= 2 && in[1] != '\n'))
            return -EPROTO;
        if (len < 2)
            return 0;
        c->state = CHUNK_SIZE;
        return 2;
    case CHUNK_TRAILER: {
        ssize_t n = line_len(in, len, NET_HTTP_HEAD_SIZE_MAX + 2 - c->trailer_bytes);
        if (n <= 0)
            return n;
        if (n == 1 || (n == 2 && in[0] == '\r')) {
            c->state = CHUNK_DONE;
            return n;
        }
        c->trailer_bytes += (uint32_t)n;
        if (c->trailer_bytes > NET_HTTP_HEAD_SIZE_MAX)
            return -EPROTO;
        return n;
    }
    default:
        return 0; /* done: what follows the body is not ours */
    }
}

ssize_t net_http_chunked_decode(struct net_http_chunked *c, const uint8_t *in, size_t len,
                                uint8_t *out, size_t out_cap, size_t *out_len)
{
    size_t off = 0;
    while (off < len && c->state != CHUNK_DONE) {
        ssize_t n = step(c, in + off, len - off, out, out_cap, out_len);
        if (n < 0)
            return n;
        if (n == 0)
            break;
        off += (size_t)n;
    }
    return (ssize_t)off;
}
