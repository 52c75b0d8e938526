/* test_kit.c - the relay kit's pieces that need no shard: the table-driven flags parser
 * (values, defaults kept, ranges, errors with their reason, help), the key hash (FNV-1a test
 * vectors) and owner shard, kit_port_hold (two SO_REUSEPORT sockets on the port it chose) and
 * kit_port_file_write (the lines, written whole; an unwritable path says why). Single thread. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hd/kit.h>

struct opts {
    bool tls;
    uint32_t shards;
    const char *name;
    struct net_addr listen;
    double rate;
    unsigned servers_count;
    const char *servers[2];
};

/* A repeated flag with its own check: at most two, each starting with "http". */
static int add_server(const char *v, void *dst, char *err, size_t err_size)
{
    struct opts *o = dst;
    if (o->servers_count == 2 || strncmp(v, "http", 4) != 0) {
        snprintf(err, err_size, "-server %s: at most 2, http URLs", v);
        return -EINVAL;
    }
    o->servers[o->servers_count++] = v;
    return 0;
}

#define TABLE(o)                                                                                   \
    {                                                                                              \
        {"tls", KIT_FLAG_BOOL, &(o)->tls, 0, 0, "TLS"},                                            \
            {"shards", KIT_FLAG_U32, &(o)->shards, 1, 64, "shards (default 2)"},                   \
            {"name", KIT_FLAG_STR, &(o)->name, 0, 0, "a name"},                                    \
            {"listen", KIT_FLAG_ADDR, &(o)->listen, 0, 0, "address"},                              \
            {"rate", KIT_FLAG_F64, &(o)->rate, 0.5, 1e6, "rate"},                                  \
            {"server", KIT_FLAG_FN, &(struct kit_flag_call){add_server, (o)}, 0, 0, "URL"},        \
    }

static int parse(struct opts *o, char *err, size_t err_size, int argc, char **argv)
{
    const struct kit_flag flags[] = TABLE(o);
    return kit_flags_parse(flags, 6, argc, argv, err, err_size);
}

Test(kit_flags, values_and_defaults)
{
    struct opts o = {.shards = 2, .name = "dflt"};
    char *argv[] = {"p", "-tls", "--shards", "7", "-listen=127.0.0.1:99", NULL};
    char err[128] = "";
    cr_assert_eq(parse(&o, err, sizeof(err), 5, argv), 0, "%s", err);
    cr_assert(o.tls);
    cr_assert_eq(o.shards, 7);
    cr_assert_str_eq(o.name, "dflt");
    cr_assert_eq(net_addr_port(&o.listen), 99);
    char *argv2[] = {"p", "-tls=false", "-shards=64", "-name", "x", NULL};
    cr_assert_eq(parse(&o, err, sizeof(err), 5, argv2), 0, "%s", err);
    cr_assert(!o.tls);
    cr_assert_eq(o.shards, 64);
    cr_assert_str_eq(o.name, "x");
    char *argv3[] = {"p", "-rate", "2.5", "-server", "http://a", "--server=https://b", NULL};
    cr_assert_eq(parse(&o, err, sizeof(err), 6, argv3), 0, "%s", err);
    cr_assert_float_eq(o.rate, 2.5, 1e-9);
    cr_assert_eq(o.servers_count, 2);
    cr_assert_str_eq(o.servers[1], "https://b");
}

Test(kit_flags, errors_name_the_reason)
{
    struct opts o = {0};
    char err[128];
    struct {
        char *arg, *val, *want;
    } bad[] = {
        {"-shards", "0", "-shards 0: expected 1..64"},
        {"-shards", "65", "expected 1..64"},
        {"-shards", "-1", "expected 1..64"},
        {"-shards", "4x", "expected 1..64"},
        {"-tls=maybe", NULL, "expected true or false"},
        {"-nope", NULL, "unknown flag -nope"},
        {"plain", NULL, "unexpected argument plain"},
        {"-listen", "nothere", "expected HOST:PORT"},
        {"-name", NULL, "-name needs a value"},
        {"-rate", "0.25", "-rate 0.25: expected 0.5..1e+06"},
        {"-rate", "fast", "expected 0.5..1e+06"},
        {"-server", "ftp://x", "-server ftp://x: at most 2, http URLs"},
        {"-shards", "99999999999", "expected 1..64"},
        {"--shards", "0", "--shards 0: expected 1..64"}, /* the dashes as given */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {"p", bad[i].arg, bad[i].val, NULL};
        err[0] = '\0';
        cr_assert_eq(parse(&o, err, sizeof(err), bad[i].val ? 3 : 2, argv), -EINVAL, "%s",
                     bad[i].arg);
        cr_assert(strstr(err, bad[i].want) != NULL, "%s: got '%s'", bad[i].arg, err);
    }
    char *help[] = {"p", "-h", NULL};
    cr_assert_eq(parse(&o, err, sizeof(err), 2, help), -ECANCELED);
    char *help2[] = {"p", "--help", NULL};
    cr_assert_eq(parse(&o, NULL, 0, 2, help2), -ECANCELED);
}

Test(kit_flags, usage_lists_every_flag)
{
    struct opts o = {0};
    const struct kit_flag flags[] = TABLE(&o);
    char buf[1024] = "";
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
    kit_flags_usage(f, "prog", flags, 6);
    fclose(f);
    cr_assert(strstr(buf, "usage: prog [flags]") != NULL);
    cr_assert(strstr(buf, "-shards N") != NULL && strstr(buf, "shards (default 2)") != NULL);
    cr_assert(strstr(buf, "-listen HOST:PORT") != NULL && strstr(buf, "-tls ") != NULL);
    cr_assert(strstr(buf, "-rate X") != NULL && strstr(buf, "-server V") != NULL);
}

/* Go's time.ParseDuration spellings, and bare numbers only where a unit is given for them. */
Test(kit_duration, go_style_and_bare_numbers)
{
    static const struct {
        const char *text;
        int64_t bare_unit_ns, want_ns;
    } good[] = {
        {"0", 0, 0},
        {"500ms", 0, 500000000},
        {"10s", 0, 10000000000},
        {"5m", 0, 300000000000},
        {"1h30m", 0, 5400000000000},
        {"1.5s", 0, 1500000000},
        {"250us", 0, 250000},
        {"250\xc2\xb5s", 0, 250000},
        {"7ns", 0, 7},
        {"2h45m30.5s", 0, 9930500000000},
        {".5s", 0, 500000000},
        {"30", 1000000000, 30000000000}, /* a bare number in the flag's old unit */
        {"1.5", 1000000, 1500000},
        {"2562047h", 0, 2562047 * 3600000000000ll},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        int64_t ns = -1;
        cr_assert_eq(kit_duration_parse(good[i].text, good[i].bare_unit_ns, &ns), 0, "%s",
                     good[i].text);
        cr_assert_eq(ns, good[i].want_ns, "%s: %lld", good[i].text, (long long)ns);
    }
    static const char *const bad[] = {"",   "s",    "10",  "10x", "-1s", "1.2.3s", "1s2",
                                      "ms", "1e3s", "inf", "1 s", "5M",  "3d"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t ns;
        cr_assert_eq(kit_duration_parse(bad[i], 0, &ns), -EINVAL, "%s", bad[i]);
    }
    int64_t ns;
    cr_assert_eq(kit_duration_parse("2562048h", 0, &ns), -ERANGE);
    cr_assert_eq(kit_duration_parse("10s", 1000000000, &ns), 0);
    cr_assert_eq(ns, 10000000000);
}

Test(kit_flags, duration_flag_in_ms)
{
    uint32_t ms = 1000;
    const struct kit_flag flags[] = {{"timeout", KIT_FLAG_MS, &ms, 1, 600000, "wait"}};
    char err[160] = "";
    char *argv[] = {"p", "-timeout", "10s", NULL};
    cr_assert_eq(kit_flags_parse(flags, 1, 3, argv, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ms, 10000);
    char *argv2[] = {"p", "--timeout=250", NULL}; /* bare: milliseconds, as before */
    cr_assert_eq(kit_flags_parse(flags, 1, 2, argv2, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ms, 250);
    char *argv3[] = {"p", "-timeout", "11m", NULL};
    cr_assert_eq(kit_flags_parse(flags, 1, 3, argv3, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "-timeout 11m: expected a duration like 500ms") != NULL, "%s", err);
}

Test(kit_route, hash_vectors_and_owner)
{
    /* FNV-1a 64 reference values (draft-eastlake-fnv: "" and "a"). */
    cr_assert_eq(kit_key_hash("", 0), 0xcbf29ce484222325ull);
    cr_assert_eq(kit_key_hash("a", 1), 0xaf63dc4c8601ec8cull);
    unsigned seen[4] = {0};
    for (unsigned i = 0; i < 400; i++)
        seen[kit_owner_shard(&i, sizeof(i), 4)]++;
    for (unsigned s = 0; s < 4; s++)
        cr_assert(seen[s] > 0, "shard %u owns no key", s);
    cr_assert_eq(kit_owner_shard("k", 1, 1), 0);
}

Test(kit_port, hold_gives_a_shared_port)
{
    for (int type = SOCK_STREAM; type <= SOCK_DGRAM; type++) {
        struct net_addr a;
        cr_assert_eq(net_addr_parse("127.0.0.1:0", &a), 0);
        int fd = kit_port_hold(&a, type);
        cr_assert(fd >= 0, "%s", strerror(-fd));
        cr_assert_neq(net_addr_port(&a), 0);
        /* What a shard does: its own SO_REUSEPORT socket on the held port. */
        int fd2 = socket(AF_INET, type, 0), one = 1;
        cr_assert_eq(setsockopt(fd2, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
        cr_assert_eq(bind(fd2, &a.sa, a.len), 0, "%s", strerror(errno));
        if (type == SOCK_STREAM)
            cr_assert_eq(listen(fd2, 8), 0);
        close(fd2);
        close(fd);
    }
}

/* Many holds at once never share a port. Linux's UDP port 0 search counts a port whose
 * sockets all have SO_REUSEPORT as free, so holds that set it before binding got the same port
 * now and then (about 1 in 11 of 6,000 here); two processes would then share their datagrams. */
#define HOLDS 800 /* enough that a shared port is all but certain when it can happen */
Test(kit_port, holds_never_share_a_port)
{
    for (int type = SOCK_STREAM; type <= SOCK_DGRAM; type++) {
        static int fds[HOLDS];
        static uint16_t ports[HOLDS];
        for (unsigned i = 0; i < HOLDS; i++) {
            struct net_addr a;
            cr_assert_eq(net_addr_parse("127.0.0.1:0", &a), 0);
            fds[i] = kit_port_hold(&a, type);
            cr_assert(fds[i] >= 0, "hold %u: %s", i, strerror(-fds[i]));
            ports[i] = net_addr_port(&a);
            for (unsigned j = 0; j < i; j++)
                cr_assert_neq(ports[j], ports[i], "holds %u and %u share port %u (%s)", j, i,
                              ports[i], type == SOCK_DGRAM ? "UDP" : "TCP");
        }
        for (unsigned i = 0; i < HOLDS; i++)
            close(fds[i]);
    }
}

Test(kit_port, file_has_one_line_per_address_and_no_leftover)
{
    char dir[] = "/tmp/kit_port_file_XXXXXX", path[64], tmp[80], text[128];
    cr_assert_neq(mkdtemp(dir), NULL);
    snprintf(path, sizeof(path), "%s/ports", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    struct net_addr a, b;
    cr_assert_eq(net_addr_parse("127.0.0.1:41234", &a), 0);
    cr_assert_eq(net_addr_parse("[::1]:3478", &b), 0);
    const struct kit_port_entry e[] = {{"derp", &a}, {"stun", &b}};
    cr_assert_eq(kit_port_file_write(path, e, 2), 0);
    FILE *f = fopen(path, "r");
    cr_assert_neq(f, NULL);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    cr_assert_str_eq(text, "derp 127.0.0.1:41234\nstun [::1]:3478\n");
    cr_assert_neq(access(tmp, F_OK), 0, "the temporary file was left behind");
    cr_assert_eq(kit_port_file_write(path, e, 1), 0); /* replaced whole */
    f = fopen(path, "r");
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    cr_assert_str_eq(text, "derp 127.0.0.1:41234\n");
    unlink(path);
    rmdir(dir);
    snprintf(path, sizeof(path), "%s/ports", dir); /* the directory is gone now */
    cr_assert_eq(kit_port_file_write(path, e, 1), -ENOENT);
}
