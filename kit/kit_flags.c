/* kit_flags.c - a table-driven command-line parser: each flag is one row (name, type, where the
 * value goes, range, help), so a program's flags, their checks and its usage text are one
 * table. Go-style single-dash flags, double dashes accepted too. kit_duration_parse reads Go's
 * durations ("1m30s"), the one syntax every program on the framework takes. Main thread. */
#include <errno.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <hd/kit.h>

static int fail(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t err_size, const char *fmt, ...)
{
    if (err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static const struct kit_flag *find(const struct kit_flag *flags, unsigned count, const char *name,
                                   size_t len)
{
    for (unsigned i = 0; i < count; i++) {
        if (strlen(flags[i].name) == len && memcmp(flags[i].name, name, len) == 0)
            return &flags[i];
    }
    return NULL;
}

/* "12.5" at *p times unit_ns, added to *total; *p moves past the digits. Exact integer
 * arithmetic as Go's: the whole part times the unit plus the fraction's (up to 18 digits). */
static int number_times(const char **p, int64_t unit_ns, unsigned __int128 *total)
{
    const char *s = *p;
    unsigned __int128 whole = 0, frac = 0, scale = 1;
    bool digits = false;
    for (; *s >= '0' && *s <= '9'; s++, digits = true) {
        whole = whole * 10 + (unsigned)(*s - '0');
        if (whole > INT64_MAX)
            return -ERANGE;
    }
    if (*s == '.') {
        for (s++; *s >= '0' && *s <= '9'; s++, digits = true) {
            if (scale < 1000000000000000000ull) { /* further digits are below 1 ns */
                frac = frac * 10 + (unsigned)(*s - '0');
                scale *= 10;
            }
        }
    }
    if (!digits)
        return -EINVAL;
    *total += whole * (unsigned __int128)unit_ns + frac * (unsigned __int128)unit_ns / scale;
    *p = s;
    return *total > INT64_MAX ? -ERANGE : 0;
}

/* The unit at *p (Go's: ns, us and its two micro signs, ms, s, m, h) in ns, *p past it; 0 if none.
 */
static int64_t unit_ns(const char **p)
{
    static const struct {
        const char *name;
        int64_t ns;
    } units[] = {{"ns", 1},
                 {"us", 1000},
                 {"\xc2\xb5s", 1000}, /* U+00B5 micro sign */
                 {"\xce\xbcs", 1000}, /* U+03BC Greek mu */
                 {"ms", 1000000},
                 {"s", 1000000000},
                 {"m", 60 * 1000000000ll},
                 {"h", 3600 * 1000000000ll}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        size_t len = strlen(units[i].name);
        if (strncmp(*p, units[i].name, len) == 0) {
            *p += len;
            return units[i].ns;
        }
    }
    return 0;
}

int kit_duration_parse(const char *text, int64_t bare_unit_ns, int64_t *out_ns)
{
    unsigned __int128 total = 0;
    const char *p = text;
    int rc;
    if (strcmp(text, "0") == 0) {
        *out_ns = 0;
        return 0;
    }
    if (text[strspn(text, "0123456789.")] == '\0') { /* a bare number */
        if (bare_unit_ns <= 0)
            return -EINVAL;
        if ((rc = number_times(&p, bare_unit_ns, &total)) < 0)
            return rc;
        *out_ns = (int64_t)total;
        return *p == '\0' ? 0 : -EINVAL;
    }
    while (*p != '\0') {
        const char *unit = p + strspn(p, "0123456789."), *next = unit;
        int64_t ns = unit_ns(&next);
        if (ns == 0)
            return -EINVAL; /* every number has its unit */
        if ((rc = number_times(&p, ns, &total)) < 0)
            return rc;
        if (p != unit)
            return -EINVAL; /* "1.2.3s" */
        p = next;
    }
    *out_ns = (int64_t)total;
    return 0;
}

/* dash: "-" or "--", as the flag was given, for the messages. */
static int set_value(const struct kit_flag *f, const char *dash, const char *v, char *err,
                     size_t err_size)
{
    char *end;
    switch (f->type) {
    case KIT_FLAG_BOOL:
        if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
            *(bool *)f->dst = true;
        else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
            *(bool *)f->dst = false;
        else
            return fail(err, err_size, "%s%s=%s: expected true or false", dash, f->name, v);
        return 0;
    case KIT_FLAG_U32: {
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == '\0' || *v == '-' || *end != '\0' || errno != 0 || x > UINT32_MAX ||
            !((double)x >= f->min && (double)x <= f->max))
            return fail(err, err_size, "%s%s %s: expected %.0f..%.0f", dash, f->name, v, f->min,
                        f->max);
        *(uint32_t *)f->dst = (uint32_t)x;
        return 0;
    }
    case KIT_FLAG_F64: {
        errno = 0;
        double x = strtod(v, &end);
        if (*v == '\0' || *end != '\0' || errno != 0 || !(x >= f->min && x <= f->max))
            return fail(err, err_size, "%s%s %s: expected %g..%g", dash, f->name, v, f->min,
                        f->max);
        *(double *)f->dst = x;
        return 0;
    }
    case KIT_FLAG_FN: {
        const struct kit_flag_call *call = f->dst;
        return call->fn(v, call->arg, err, err_size) < 0 ? -EINVAL : 0;
    }
    case KIT_FLAG_MS: {
        int64_t ns;
        if (kit_duration_parse(v, 1000000, &ns) < 0 || !(ns / 1e6 >= f->min && ns / 1e6 <= f->max))
            return fail(err, err_size, "%s%s %s: expected %s, %.0fms..%.0fms", dash, f->name, v,
                        KIT_DURATION_HINT, f->min, f->max);
        *(uint32_t *)f->dst = (uint32_t)(ns / 1000000);
        return 0;
    }
    case KIT_FLAG_STR:
        *(const char **)f->dst = v;
        return 0;
    case KIT_FLAG_ADDR:
        if (net_addr_parse(v, f->dst) < 0)
            return fail(err, err_size, "%s%s %s: expected HOST:PORT (numeric)", dash, f->name, v);
        return 0;
    }
    return fail(err, err_size, "%s%s: bad flag table entry", dash, f->name);
}

int kit_flags_parse(const struct kit_flag *flags, unsigned count, int argc, char **argv, char *err,
                    size_t err_size)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-' || arg[1] == '\0')
            return fail(err, err_size, "unexpected argument %s", arg);
        const char *dash = arg[1] == '-' ? "--" : "-", *name = arg + strlen(dash);
        if (strcmp(name, "h") == 0 || strcmp(name, "help") == 0)
            return -ECANCELED;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct kit_flag *f = find(flags, count, name, len);
        if (f == NULL)
            return fail(err, err_size, "unknown flag %s", arg);
        const char *v = eq ? eq + 1 : NULL;
        if (v == NULL && f->type == KIT_FLAG_BOOL)
            v = "true";
        if (v == NULL) {
            if (i + 1 >= argc)
                return fail(err, err_size, "%s%s needs a value", dash, f->name);
            v = argv[++i];
        }
        int rc = set_value(f, dash, v, err, err_size);
        if (rc < 0)
            return rc;
    }
    return 0;
}

void kit_flags_usage(FILE *out, const char *prog, const struct kit_flag *flags, unsigned count)
{
    static const char *const value[] = {
        [KIT_FLAG_BOOL] = "",  [KIT_FLAG_U32] = " N",          [KIT_FLAG_F64] = " X",
        [KIT_FLAG_STR] = " S", [KIT_FLAG_ADDR] = " HOST:PORT", [KIT_FLAG_FN] = " V",
        [KIT_FLAG_MS] = " D"};
    fprintf(out, "usage: %s [flags]\n", prog);
    for (unsigned i = 0; i < count; i++) {
        char head[64];
        snprintf(head, sizeof(head), "-%s%s", flags[i].name, value[flags[i].type]);
        fprintf(out, "  %-22s %s\n", head, flags[i].help ? flags[i].help : "");
    }
}
