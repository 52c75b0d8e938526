/* hd_bytes.h - writing and reading a flat record of fixed-size fields and byte runs in host
 * order: state one process hands its successor on the same machine (net_conn_export, an app's
 * session), never the wire. The writer's buffer is sized by the caller beforehand (an overrun
 * is our bug: asserted); the reader never reads past its end and remembers the first short
 * read (bad), so a caller takes every field and checks bad once. Header-only; any thread. */
#ifndef HD_BYTES_H
#define HD_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hd_base.h"

struct hd_wbuf {
    uint8_t *p;
    size_t len, cap;
};

static inline void hd_put(struct hd_wbuf *w, const void *data, size_t len)
{
    HD_ASSERT(w->len + len <= w->cap); /* the caller sized the buffer */
    if (len)
        memcpy(w->p + w->len, data, len);
    w->len += len;
}

static inline void hd_put32(struct hd_wbuf *w, uint32_t v)
{
    hd_put(w, &v, sizeof(v));
}

static inline void hd_put64(struct hd_wbuf *w, uint64_t v)
{
    hd_put(w, &v, sizeof(v));
}

struct hd_rbuf {
    const uint8_t *p;
    size_t len, off;
    bool bad; /* a read went past the end (or the caller found a field out of range) */
};

/* The next len bytes (a view into the record), or NULL once bad. */
static inline const uint8_t *hd_take(struct hd_rbuf *r, size_t len)
{
    if (r->bad || len > r->len - r->off) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *at = r->p + r->off;
    r->off += len;
    return at;
}

static inline uint32_t hd_take32(struct hd_rbuf *r)
{
    uint32_t v = 0;
    const uint8_t *at = hd_take(r, sizeof(v));
    if (at)
        memcpy(&v, at, sizeof(v));
    return v;
}

static inline uint64_t hd_take64(struct hd_rbuf *r)
{
    uint64_t v = 0;
    const uint8_t *at = hd_take(r, sizeof(v));
    if (at)
        memcpy(&v, at, sizeof(v));
    return v;
}

/* A section written as a 32-bit length and its bytes: at most max long (else bad). */
static inline void hd_take_bytes(struct hd_rbuf *r, size_t max, const uint8_t **data, size_t *len)
{
    *len = hd_take32(r);
    if (*len > max)
        r->bad = true;
    *data = hd_take(r, *len);
}

#endif /* HD_BYTES_H */
