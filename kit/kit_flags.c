/* kit_flags.c - a table-driven command-line parser: each flag is one row (name, type, where the
 * value goes, range, help), so a program's flags, their checks and its usage text are one
 * table. Go-style single-dash flags, double dashes accepted too. Main thread. */
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
        [KIT_FLAG_STR] = " S", [KIT_FLAG_ADDR] = " HOST:PORT", [KIT_FLAG_FN] = " V"};
    fprintf(out, "usage: %s [flags]\n", prog);
    for (unsigned i = 0; i < count; i++) {
        char head[64];
        snprintf(head, sizeof(head), "-%s%s", flags[i].name, value[flags[i].type]);
        fprintf(out, "  %-22s %s\n", head, flags[i].help ? flags[i].help : "");
    }
}
