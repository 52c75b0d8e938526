/* log.c - leveled log lines to stderr, one write() each (whole lines never interleave), with UTC
 * time, level and the shard id (s0, or main), as text or as JSON objects (log_json.c), and a
 * per-call-site rate limit: hd_log_rl lets a call site write HD_LOG_RL_BURST (5) lines per
 * HD_LOG_RL_WINDOW_MS (10 s) per thread, and the first line of a later window reports how many
 * it suppressed (every line a peer can trigger goes through it). Any thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hd_impl.h"

enum hd_log_level hd_log_level_max = HD_LOG_INFO;
static enum hd_log_format log_format = HD_LOG_FORMAT_TEXT;

static const char *const level_names[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};

void hd_log_set_level(enum hd_log_level level)
{
    hd_log_level_max = level;
}

void hd_log_set_format(enum hd_log_format format)
{
    log_format = format;
}

void hd_log_write(enum hd_log_level level, const char *fmt, ...)
{
    char line[HD_LOG_LINE_MAX];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    struct hd_shard *s = hd_shard_current();
    char who[16];
    if (s)
        snprintf(who, sizeof(who), "s%u", hd_shard_id(s));
    else
        snprintf(who, sizeof(who), "main");
    char when[64];
    snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    va_list ap;
    if (log_format == HD_LOG_FORMAT_JSON) {
        char msg[HD_LOG_LINE_MAX];
        va_start(ap, fmt);
        int k = vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (k < 0)
            return;
        char jl[HD_LOG_JSON_LINE_MAX];
        size_t len = hd_log_json_line(jl, sizeof(jl), when, level_names[level], who, msg);
        ssize_t w = write(STDERR_FILENO, jl, len);
        (void)w;
        return;
    }
    int n = snprintf(line, sizeof(line), "%s %s %-4s ", when, level_names[level], who);
    if (n < 0)
        return;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2; /* truncated: keep the newline */
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

bool hd_log_rl_allow(struct hd_log_rl *rl, uint32_t *suppressed)
{
    return hd_log_rl_allow_at(rl, hd_clock_ms(), suppressed);
}

bool hd_log_rl_allow_at(struct hd_log_rl *rl, uint64_t now, uint32_t *suppressed)
{
    *suppressed = 0;
    if (rl->window_ms == 0 || now - rl->window_ms >= HD_LOG_RL_WINDOW_MS) {
        *suppressed = rl->suppressed;
        rl->window_ms = now;
        rl->lines = 0;
        rl->suppressed = 0;
    }
    if (rl->lines >= HD_LOG_RL_BURST) {
        rl->suppressed++;
        return false;
    }
    rl->lines++;
    return true;
}

void hd_assert_fail(const char *expr, const char *file, int line, const char *func)
{
    hd_log_write(HD_LOG_ERROR, "assertion failed: %s (%s:%d, %s)", expr, file, line, func);
    abort();
}
