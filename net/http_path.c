/* http_path.c - a request path's percent-escapes decoded as Go's net/url does for URL.Path
 * (unescape in encodePath mode): "%" and two hex digits is one byte, anything else after "%" is
 * an invalid escape (Go's server answers 400), "+" stays "+". The hex digits themselves
 * (net_hex_digit, net_hex_decode) are here too, for every layer above (tls's keylog lines, the
 * apps). Pure, any thread. */
#include <errno.h>

#include <hd/net_http.h>

int net_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

ssize_t net_hex_decode(const char *hex, size_t hex_len, uint8_t *out, size_t cap)
{
    if (hex_len % 2 != 0)
        return -EINVAL;
    if (hex_len / 2 > cap)
        return -ENOSPC;
    for (size_t i = 0; i < hex_len / 2; i++) {
        int hi = net_hex_digit(hex[2 * i]);
        int lo = net_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return (ssize_t)(hex_len / 2);
}

/* Go's unescape: "%XX" is that byte; mode: keep "%2F" as it is (keep_slash), "+" a space
 * (plus_space: query mode). */
static ssize_t unescape(struct net_http_str in, char *out, size_t cap, bool keep_slash,
                        bool plus_space)
{
    size_t n = 0;
    for (size_t i = 0; i < in.len; i++) {
        char c = in.ptr[i];
        if (c == '%') {
            int hi = i + 2 < in.len ? net_hex_digit(in.ptr[i + 1]) : -1;
            int lo = hi >= 0 ? net_hex_digit(in.ptr[i + 2]) : -1;
            if (lo < 0)
                return -EPROTO;
            char d = (char)(hi << 4 | lo);
            if (d != '/' || !keep_slash) {
                c = d;
                i += 2;
            }
        } else if (c == '+' && plus_space) {
            c = ' ';
        }
        if (n == cap)
            return -ENOSPC;
        out[n++] = c;
    }
    return (ssize_t)n;
}

ssize_t net_http_path_unescape(struct net_http_str path, char *out, size_t cap, bool keep_slash)
{
    return unescape(path, out, cap, keep_slash, false);
}

ssize_t net_http_query_unescape(struct net_http_str s, char *out, size_t cap)
{
    return unescape(s, out, cap, false, true);
}
