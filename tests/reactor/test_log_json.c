/* test_log_json.c - hd_log_set_format(HD_LOG_FORMAT_JSON): every line hd_log_write produces is
 * one JSON object (parsed with jansson) with time, level, shard, event and msg, plus addr and
 * suppressed when the message has them; quotes, backslashes, control bytes, invalid UTF-8 and
 * an over-long message still give a line that parses. stderr is a pipe for the test. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <hd/hd.h>

static int saved = -1, pipe_rd = -1;

static void capture(void)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    saved = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    close(p[1]);
    pipe_rd = p[0];
    hd_log_set_format(HD_LOG_FORMAT_JSON);
}

/* Restore stderr and read what was written (one call's worth: the pipe holds 64 KiB). */
static char *release(void)
{
    hd_log_set_format(HD_LOG_FORMAT_TEXT);
    dup2(saved, STDERR_FILENO);
    close(saved);
    static char buf[65536];
    ssize_t n = read(pipe_rd, buf, sizeof(buf) - 1);
    close(pipe_rd);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static json_t *one_line(const char *text)
{
    const char *nl = strchr(text, '\n');
    cr_assert_not_null(nl, "no newline in %s", text);
    cr_assert_eq(nl[1], '\0', "more than one line: %s", text);
    json_error_t err;
    json_t *o = json_loadb(text, (size_t)(nl - text), 0, &err);
    cr_assert_not_null(o, "not JSON (%s): %s", err.text, text);
    cr_assert(json_is_object(o));
    const char *keys[] = {"time", "level", "shard", "event", "msg"};
    for (size_t i = 0; i < 5; i++)
        cr_assert(json_is_string(json_object_get(o, keys[i])), "no %s in %s", keys[i], text);
    return o;
}

static const char *str(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v ? json_string_value(v) : NULL;
}

Test(log_json, fields)
{
    capture();
    hd_log_write(HD_LOG_WARN, "proxy: connection from %s refused", "192.0.2.7:4431");
    json_t *o = one_line(release());
    cr_assert_str_eq(str(o, "level"), "WARN");
    cr_assert_str_eq(str(o, "shard"), "main");
    cr_assert_str_eq(str(o, "event"), "proxy");
    cr_assert_str_eq(str(o, "addr"), "192.0.2.7:4431");
    cr_assert_str_eq(str(o, "msg"), "proxy: connection from 192.0.2.7:4431 refused");
    cr_assert_eq(strlen(str(o, "time")), strlen("2026-12-03T18:00:00.000Z"));
    json_decref(o);

    capture();
    hd_log_write(HD_LOG_INFO,
                 "tls: [2001:db8::1]:443: handshake failed (%u similar lines "
                 "suppressed)",
                 17u);
    o = one_line(release());
    cr_assert_str_eq(str(o, "event"), "tls");
    cr_assert_str_eq(str(o, "addr"), "[2001:db8::1]:443");
    cr_assert_eq(json_integer_value(json_object_get(o, "suppressed")), 17);
    cr_assert_str_eq(str(o, "msg"), "tls: [2001:db8::1]:443: handshake failed");
    json_decref(o);

    capture();
    hd_log_write(HD_LOG_ERROR, "Started at 10.0.0.1 (no port), version 1.2.3");
    o = one_line(release());
    cr_assert_str_eq(str(o, "event"), "log");
    cr_assert_null(json_object_get(o, "addr"));
    cr_assert_null(json_object_get(o, "suppressed"));
    json_decref(o);
}

Test(log_json, hostile_bytes)
{
    /* what a peer controls (an SNI, a path) may hold anything */
    const char nasty[] = "quote\" back\\ nl\n tab\t bell\a del\x7f bad\xff\xfe ok\xc3\xa9 "
                         "cut\xe2\x82 over\xed\xa0\x80 end";
    capture();
    hd_log_write(HD_LOG_INFO, "tls: SNI \"%s\" refused", nasty);
    json_t *o = one_line(release());
    const char *m = str(o, "msg");
    cr_assert(strstr(m, "quote\" back\\ nl\n tab\t bell\a del\x7f") != NULL, "%s", m);
    cr_assert(strstr(m, "bad\xef\xbf\xbd\xef\xbf\xbd ok\xc3\xa9") != NULL, "%s", m);
    cr_assert(strstr(m, "end\" refused") != NULL, "%s", m);
    json_decref(o);

    /* as long as a message may be, all of it control bytes: cut, still one valid line */
    static char big[HD_LOG_LINE_MAX * 2];
    memset(big, '\x01', sizeof(big) - 1);
    capture();
    hd_log_write(HD_LOG_INFO, "mesh: %s", big);
    o = one_line(release());
    cr_assert_str_eq(str(o, "event"), "mesh");
    cr_assert_gt(strlen(str(o, "msg")), 100);
    json_decref(o);
}
