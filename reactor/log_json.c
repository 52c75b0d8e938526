/* log_json.c - a log line as one JSON object (hd_log_set_format(HD_LOG_FORMAT_JSON)), for
 * journald/Loki pipelines: time, level, shard, event (the message's "word:" prefix, else "log"),
 * addr (the first ip:port in the message), suppressed (a rate-limited line's count, taken off
 * the message) and msg. Strings are escaped; bytes that are not valid UTF-8 (a peer's SNI, say)
 * become U+FFFD, so every line parses. Pure; called by hd_log_write on any thread. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hd_impl.h"

/* The longest "word:" prefix taken as the event name ("websocket", "accept", "proxy"). */
#define LOG_EVENT_LEN_MAX 24

struct jbuf {
    char *p;
    size_t len, cap; /* cap leaves room for the closing "\"}\n" */
};

static bool put(struct jbuf *b, const char *s, size_t n)
{
    if (b->len + n > b->cap)
        return false;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return true;
}

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t k;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        k = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if (n < k || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < k; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return k;
}

/* Escaped string contents (no quotes), cut at a character boundary when full. */
static void put_escaped(struct jbuf *b, const char *text, size_t n)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        char esc[8];
        size_t k = 1;
        const char *out = esc;
        size_t outn;
        if (s[i] == '"' || s[i] == '\\') {
            esc[0] = '\\', esc[1] = (char)s[i], outn = 2;
        } else if (s[i] == '\n' || s[i] == '\t' || s[i] == '\r') {
            esc[0] = '\\', esc[1] = s[i] == '\n' ? 'n' : s[i] == '\t' ? 't' : 'r', outn = 2;
        } else if (s[i] < 0x20 || s[i] == 0x7F) {
            outn = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", s[i]);
        } else if (s[i] < 0x80) {
            out = (const char *)s + i, outn = 1;
        } else if ((k = utf8_len(s + i, n - i)) > 0) {
            out = (const char *)s + i, outn = k;
        } else {
            k = 1, memcpy(esc, "\\ufffd", 6), outn = 6;
        }
        if (!put(b, out, outn))
            return;
        i += k;
    }
}

static void put_field(struct jbuf *b, const char *key, const char *v, size_t n)
{
    put(b, ",\"", 2);
    put(b, key, strlen(key));
    put(b, "\":\"", 3);
    put_escaped(b, v, n);
    put(b, "\"", 1);
}

/* "mesh: ..." -> "mesh"; n 0 when the message has no such prefix. */
static size_t event_prefix(const char *msg)
{
    size_t n = 0;
    while (n < LOG_EVENT_LEN_MAX &&
           ((msg[n] >= 'a' && msg[n] <= 'z') || (msg[n] >= '0' && msg[n] <= '9') || msg[n] == '-' ||
            msg[n] == '_'))
        n++;
    return n > 0 && msg[n] == ':' && msg[n + 1] == ' ' ? n : 0;
}

static bool digits(const char *p, size_t *n)
{
    size_t k = 0;
    while (p[k] >= '0' && p[k] <= '9' && k < 6)
        k++;
    *n = k;
    return k > 0 && !(p[k] >= '0' && p[k] <= '9');
}

/* The first "a.b.c.d:port" or "[v6]:port" in msg: its start and length (0: none). */
static size_t find_addr(const char *msg, size_t *at)
{
    for (size_t i = 0; msg[i]; i++) {
        if (i > 0 && (msg[i - 1] == '.' || (msg[i - 1] >= '0' && msg[i - 1] <= '9')))
            continue;
        char ip[64];
        size_t end, pn;
        unsigned char buf[16];
        if (msg[i] == '[') {
            const char *close = strchr(msg + i, ']');
            end = close ? (size_t)(close - msg) : 0;
            if (end == 0 || end - i - 1 >= sizeof(ip) || msg[end + 1] != ':')
                continue;
            memcpy(ip, msg + i + 1, end - i - 1);
            ip[end - i - 1] = '\0';
            if (inet_pton(AF_INET6, ip, buf) == 1 && digits(msg + end + 2, &pn)) {
                *at = i;
                return end + 2 + pn - i;
            }
        } else if (msg[i] >= '0' && msg[i] <= '9') {
            end = i;
            while ((msg[end] >= '0' && msg[end] <= '9') || msg[end] == '.')
                end++;
            if (msg[end] != ':' || end - i >= 16)
                continue;
            memcpy(ip, msg + i, end - i);
            ip[end - i] = '\0';
            if (inet_pton(AF_INET, ip, buf) == 1 && digits(msg + end + 1, &pn)) {
                *at = i;
                return end + 1 + pn - i;
            }
        }
    }
    return 0;
}

/* hd_log_rl's " (N similar lines suppressed)" at the end: N, and the message's length
 * without it (msg_len unchanged and 0 returned when absent). */
static unsigned long suppressed_suffix(const char *msg, size_t *msg_len)
{
    static const char tail[] = " similar lines suppressed)";
    size_t n = *msg_len, t = sizeof(tail) - 1;
    if (n < t + 3 || memcmp(msg + n - t, tail, t) != 0)
        return 0;
    size_t d = n - t;
    while (d > 0 && msg[d - 1] >= '0' && msg[d - 1] <= '9')
        d--;
    if (d < 2 || d == n - t || msg[d - 1] != '(' || msg[d - 2] != ' ')
        return 0;
    unsigned long v = strtoul(msg + d, NULL, 10);
    *msg_len = d - 2;
    return v;
}

size_t hd_log_json_line(char *out, size_t size, const char *time, const char *level,
                        const char *shard, const char *msg)
{
    HD_ASSERT(size >= 256);
    struct jbuf b = {.p = out, .len = 0, .cap = size - 3};
    size_t level_len = strcspn(level, " ");
    put(&b, "{\"time\":\"", 9);
    put(&b, time, strlen(time));
    put(&b, "\"", 1);
    put_field(&b, "level", level, level_len);
    put_field(&b, "shard", shard, strlen(shard));
    size_t ev = event_prefix(msg);
    put_field(&b, "event", ev ? msg : "log", ev ? ev : 3);
    size_t msg_len = strlen(msg), at;
    unsigned long sup = suppressed_suffix(msg, &msg_len);
    size_t alen = find_addr(msg, &at);
    if (alen && at + alen <= msg_len)
        put_field(&b, "addr", msg + at, alen);
    if (sup) {
        char num[32];
        int k = snprintf(num, sizeof(num), ",\"suppressed\":%lu", sup);
        put(&b, num, (size_t)k);
    }
    put(&b, ",\"msg\":\"", 8);
    put_escaped(&b, msg, msg_len);
    memcpy(out + b.len, "\"}\n", 3); /* cap kept these 3 bytes free */
    return b.len + 3;
}
