/* http_path.c - a request path's percent-escapes decoded as Go's net/url does for URL.Path
 * (unescape in encodePath mode): "%" and two hex digits is one byte, anything else after "%" is
 * an invalid escape (Go's server answers 400), "+" stays "+". Pure, any thread. */
#include <errno.h>

#include <hd/net_http.h>

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

ssize_t net_http_path_unescape(struct net_http_str path, char *out, size_t cap, bool keep_slash)
{
    size_t n = 0;
    for (size_t i = 0; i < path.len; i++) {
        char c = path.ptr[i];
        if (c == '%') {
            int hi = i + 2 < path.len ? hex_val(path.ptr[i + 1]) : -1;
            int lo = hi >= 0 ? hex_val(path.ptr[i + 2]) : -1;
            if (lo < 0)
                return -EPROTO;
            char d = (char)(hi << 4 | lo);
            if (d != '/' || !keep_slash) {
                c = d;
                i += 2;
            }
        }
        if (n == cap)
            return -ENOSPC;
        out[n++] = c;
    }
    return (ssize_t)n;
}
