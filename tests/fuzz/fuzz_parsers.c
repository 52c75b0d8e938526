/* fuzz_parsers.c - libFuzzer target for the small parsers of configuration and addresses: URLs
 * (net_url_parse: -verify-client-url, hderp-echo/-bench servers), keys (node, private and mesh
 * keys in text), derper's key file, hderp-server's --allow-keys file and -rate-config file (the
 * server's own code, compiled in), and durations (kit_duration_parse: every program's flags).
 * Input: a mode byte, then the text. Files are handed over as /proc/self/fd paths of a memfd, so
 * nothing touches the disk. Invariants: what parses formats and parses back to the same value;
 * errors are the documented ones; a rate that loads has a burst of at least one frame; a duration
 * that parses is >= 0 and reads back in ns the same. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "derp_keys.h"
#include "fuzz_util.h"
#include "ops/server_account.h"
#include <hd/kit.h>
#include <hd/net.h>

static char text[70000];

/* A readable path holding data: a memfd's /proc/self/fd name; fd to close after. */
static int as_file(const uint8_t *data, size_t len, char *path, size_t size)
{
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(write(fd, data, len) == (ssize_t)len);
    snprintf(path, size, "/proc/self/fd/%d", fd);
    return fd;
}

static void url(void)
{
    struct net_url u;
    int rc = net_url_parse(text, &u);
    CHECK(rc == 0 || rc == -EINVAL);
    if (rc == 0) {
        CHECK(u.port != 0 && u.host[0] != '\0');
        CHECK(strlen(u.authority) <= NET_URL_AUTHORITY_LEN_MAX);
        CHECK(u.path[0] == '\0' || u.path[0] == '/');
    }
}

static void keys(size_t len)
{
    struct derp_pubkey pk, pk2;
    if (derp_pubkey_parse(text, len, &pk) == 0) {
        char out[DERP_PUBKEY_TEXT_SIZE];
        derp_pubkey_format(&pk, out);
        CHECK(derp_pubkey_parse(out, strlen(out), &pk2) == 0 && derp_pubkey_equal(&pk, &pk2));
    }
    struct derp_privkey sk;
    int rc = derp_privkey_parse(text, len, &sk);
    CHECK(rc == 0 || rc == -EINVAL);
    struct derp_mesh_key mk;
    rc = derp_mesh_key_parse(text, len, &mk);
    CHECK(rc == 0 || rc == -EINVAL);
}

static void key_file(const uint8_t *data, size_t len)
{
    char path[64], err[256];
    int fd = as_file(data, len, path, sizeof(path));
    struct derp_privkey sk;
    bool created = false;
    int rc = derp_key_file_load_or_create(path, &sk, &created, err, sizeof(err));
    CHECK(!created); /* the file exists: never replaced */
    CHECK(rc == 0 || rc == -EINVAL || rc == -EFBIG || rc == -EPROTO);
    CHECK(rc == 0 || err[0] != '\0');
    close(fd);
}

static void allow_file(const uint8_t *data, size_t len)
{
    char path[64], err[512] = "";
    int fd = as_file(data, len, path, sizeof(path));
    struct srv_config cfg = {0};
    int rc = srv_allow_configure(&cfg, path, err, sizeof(err));
    CHECK(rc == 0 || rc == -EINVAL || rc == -E2BIG);
    CHECK(rc == 0 || strstr(err, path) != NULL); /* the message names the file (and line) */
    srv_allow_config_free(&cfg);
    close(fd);
}

static void rate_file(const uint8_t *data, size_t len)
{
    char path[64], err[512] = "";
    int fd = as_file(data, len, path, sizeof(path));
    struct srv_rate r;
    int rc = srv_rate_load(path, &r, err, sizeof(err));
    CHECK(rc == 0 || rc == -EINVAL);
    CHECK(rc != 0 || r.burst >= DERP_RATE_BURST_MIN);
    CHECK(rc == 0 || err[0] != '\0');
    if (rc == 0)
        srv_rate_free(&r); /* its "Keys" */
    close(fd);
}

static void duration(void)
{
    int64_t ns = -1, again = -1, bare = -1;
    int rc = kit_duration_parse(text, 0, &ns);
    CHECK(rc == 0 || rc == -EINVAL || rc == -ERANGE);
    if (rc == 0) {
        char out[32];
        CHECK(ns >= 0);
        snprintf(out, sizeof(out), "%lldns", (long long)ns);
        CHECK(kit_duration_parse(out, 0, &again) == 0 && again == ns);
        CHECK(kit_duration_parse(text, 1000000, &bare) == 0 && bare == ns); /* had a unit */
    }
    rc = kit_duration_parse(text, 1000000, &bare); /* bare numbers in milliseconds */
    CHECK(rc == 0 || rc == -EINVAL || rc == -ERANGE);
    CHECK(rc != 0 || bare >= 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > sizeof(text) - 1)
        return 0;
    hd_log_set_level(HD_LOG_ERROR); /* unknown rate-config fields are logged: keep runs quiet */
    const uint8_t *p = data + 1;
    size_t len = size - 1;
    memcpy(text, p, len);
    text[len] = '\0';
    switch (data[0] % 6) {
    case 0:
        url();
        break;
    case 1:
        keys(len);
        break;
    case 2:
        key_file(p, len);
        break;
    case 3:
        allow_file(p, len);
        break;
    case 4:
        rate_file(p, len);
        break;
    default:
        duration();
        break;
    }
    return 0;
}
