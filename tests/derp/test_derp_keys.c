/* test_derp_keys.c - node keys (Appendix A public-from-private), text forms, the derper key file
 * (create: 0600 + exact bytes + atomic replace; load: good, malformed, unreadable, missing) and
 * the mesh key (flag-file format, constant-time comparison, admission rule). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "derp_keys.h"
#include "derp_test_util.h"

static char dir[64]; /* "/tmp/test_derp_keys.XXXXXX" */

static void make_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_derp_keys.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_tree(const char *path)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    cr_assert_eq(system(cmd), 0);
}

static void drop_dir(void)
{
    remove_tree(dir);
}

TestSuite(derp_keys, .init = make_dir, .fini = drop_dir);

static void path_in_dir(char *out, const char *name)
{
    snprintf(out, PATH_MAX, "%s/%s", dir, name);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    cr_assert_eq(fclose(f), 0);
}

/* Appendix A: priv bytes 0x01..0x20 (server), 0x40..0x5f (client), clamped. */
static void appendix_priv(struct derp_privkey *k, uint8_t first)
{
    for (int i = 0; i < 32; i++)
        k->bytes[i] = (uint8_t)(first + i);
    derp_privkey_clamp(k);
}

Test(derp_keys, appendix_a_public_from_private)
{
    struct derp_privkey sp, cp;
    struct derp_pubkey pub;
    uint8_t want[32];
    char hex[DERP_KEY_HEX_SIZE];

    appendix_priv(&sp, 0x01);
    derp_key_hex_format(sp.bytes, hex);
    cr_assert_str_eq(hex, "0002030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f60");
    cr_assert_eq(derp_pubkey_from_privkey(&pub, &sp), 0);
    test_hex("07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c", want, 32);
    cr_assert(memcmp(pub.bytes, want, 32) == 0);

    appendix_priv(&cp, 0x40);
    derp_key_hex_format(cp.bytes, hex);
    cr_assert_str_eq(hex, "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f");
    struct derp_keypair kp;
    cr_assert_eq(derp_keypair_from_privkey(&kp, &cp), 0);
    test_hex("79a631eede1bf9c98f12032cdeadd0e7a079398fc786b88cc846ec89af85a51a", want, 32);
    cr_assert(memcmp(kp.pub.bytes, want, 32) == 0);
    /* Aliasing: priv inside the output pair. */
    cr_assert_eq(derp_keypair_from_privkey(&kp, &kp.priv), 0);
    cr_assert(memcmp(kp.pub.bytes, want, 32) == 0 && memcmp(kp.priv.bytes, cp.bytes, 32) == 0);
}

Test(derp_keys, generate_is_clamped_and_random)
{
    struct derp_keypair a, b;
    struct derp_pubkey pub;
    cr_assert_eq(derp_crypto_init(), 0);
    cr_assert_eq(derp_keypair_generate(&a), 0);
    cr_assert_eq(derp_keypair_generate(&b), 0);
    cr_assert((a.priv.bytes[0] & 7) == 0 && (a.priv.bytes[31] & 0xC0) == 0x40);
    cr_assert(memcmp(a.priv.bytes, b.priv.bytes, 32) != 0);
    cr_assert(!derp_pubkey_equal(&a.pub, &b.pub));
    cr_assert_eq(derp_pubkey_from_privkey(&pub, &a.priv), 0);
    cr_assert(derp_pubkey_equal(&pub, &a.pub));
    cr_assert(!derp_key_bytes_is_zero(a.pub.bytes));
    struct derp_privkey zero = {{0}};
    cr_assert(derp_key_bytes_is_zero(zero.bytes));
}

Test(derp_keys, text_forms)
{
    struct derp_pubkey pub, got;
    struct derp_privkey priv, gotp;
    char text[DERP_PRIVKEY_TEXT_SIZE];
    for (int i = 0; i < 32; i++)
        pub.bytes[i] = priv.bytes[i] = (uint8_t)(0xF0 ^ i);

    derp_pubkey_format(&pub, text);
    cr_assert_str_eq(text,
                     "nodekey:f0f1f2f3f4f5f6f7f8f9fafbfcfdfeffe0e1e2e3e4e5e6e7e8e9eaebecedeeef");
    cr_assert_eq(derp_pubkey_parse(text, strlen(text), &got), 0);
    cr_assert(derp_pubkey_equal(&got, &pub));
    /* Bare hex, and upper case, both accepted. */
    cr_assert_eq(derp_pubkey_parse(text + 8, 64, &got), 0);
    cr_assert(derp_pubkey_equal(&got, &pub));
    const char *upper = "nodekey:F0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFFE0E1E2E3E4E5E6E7E8E9EAEBECEDEEEF";
    cr_assert_eq(derp_pubkey_parse(upper, strlen(upper), &got), 0);
    cr_assert(derp_pubkey_equal(&got, &pub));

    derp_privkey_format(&priv, text);
    cr_assert(strncmp(text, "privkey:f0f1", 12) == 0 && strlen(text) == 72);
    cr_assert_eq(derp_privkey_parse(text, 72, &gotp), 0);
    cr_assert(memcmp(gotp.bytes, priv.bytes, 32) == 0);
    cr_assert_eq(derp_privkey_parse(text + 8, 64, &gotp), 0);

    /* Wrong prefix / case of prefix / lengths / characters. */
    cr_assert_eq(derp_pubkey_parse(text, 72, &got), -EINVAL, "privkey: is not a public key");
    char bad[80];
    snprintf(bad, sizeof(bad), "NODEKEY:%s", text + 8);
    cr_assert_eq(derp_pubkey_parse(bad, 72, &got), -EINVAL);
    cr_assert_eq(derp_pubkey_parse(text + 8, 63, &got), -EINVAL);
    snprintf(bad, sizeof(bad), "%s0", text + 8);
    cr_assert_eq(derp_pubkey_parse(bad, 65, &got), -EINVAL);
    snprintf(bad, sizeof(bad), "%s", text + 8);
    bad[10] = 'g';
    cr_assert_eq(derp_pubkey_parse(bad, 64, &got), -EINVAL);
    bad[10] = '\0';
    cr_assert_eq(derp_pubkey_parse(bad, 64, &got), -EINVAL, "embedded NUL");
    bad[10] = ' ';
    cr_assert_eq(derp_pubkey_parse(bad, 64, &got), -EINVAL);
    cr_assert_eq(derp_pubkey_parse("", 0, &got), -EINVAL);
    cr_assert_eq(derp_pubkey_parse("nodekey:", 8, &got), -EINVAL);
}

/* ---- Key file ------------------------------------------------------------------------------- */

Test(derp_keys, key_file_create_then_load)
{
    char path[PATH_MAX], err[256] = "", want[128], text[DERP_PRIVKEY_TEXT_SIZE];
    struct derp_privkey k, loaded;
    struct stat st;

    path_in_dir(path, "a/b/c/derper.key"); /* parents created */
    cr_assert_eq(derp_key_file_create(path, &k, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0600, "mode %o", st.st_mode & 07777);
    cr_assert(S_ISREG(st.st_mode));

    /* Byte-exact derper format: json.MarshalIndent(config, "", "\t"). */
    derp_privkey_format(&k, text);
    snprintf(want, sizeof(want), "{\n\t\"PrivateKey\": \"%s\"\n}", text);
    char got[256] = "";
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(got, 1, sizeof(got) - 1, f);
    fclose(f);
    cr_assert_eq(n, strlen(want));
    cr_assert_str_eq(got, want);

    cr_assert_eq(derp_key_file_load(path, &loaded, err, sizeof(err)), 0, "%s", err);
    cr_assert(memcmp(loaded.bytes, k.bytes, 32) == 0);
    cr_assert((k.bytes[0] & 7) == 0 && (k.bytes[31] & 0xC0) == 0x40, "clamped");
}

Test(derp_keys, key_file_create_replaces_atomically)
{
    char path[PATH_MAX], err[256];
    struct derp_privkey k1, k2, loaded;
    path_in_dir(path, "derper.key");
    cr_assert_eq(derp_key_file_create(path, &k1, err, sizeof(err)), 0);
    cr_assert_eq(derp_key_file_create(path, &k2, err, sizeof(err)), 0);
    cr_assert(memcmp(k1.bytes, k2.bytes, 32) != 0);
    cr_assert_eq(derp_key_file_load(path, &loaded, err, sizeof(err)), 0);
    cr_assert(memcmp(loaded.bytes, k2.bytes, 32) == 0);
    /* No temporary file left behind. */
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        entries++;
        cr_assert_str_eq(e->d_name, "derper.key");
    }
    closedir(d);
    cr_assert_eq(entries, 1);
}

Test(derp_keys, key_file_load_or_create)
{
    char path[PATH_MAX], err[256];
    struct derp_privkey k1, k2;
    bool created = false;
    path_in_dir(path, "x/derper.key");
    cr_assert_eq(derp_key_file_load_or_create(path, &k1, &created, err, sizeof(err)), 0);
    cr_assert(created);
    cr_assert_eq(derp_key_file_load_or_create(path, &k2, &created, err, sizeof(err)), 0);
    cr_assert(!created, "restart keeps the key (§14 #39)");
    cr_assert(memcmp(k1.bytes, k2.bytes, 32) == 0);
}

Test(derp_keys, key_file_load_good_variants)
{
    char path[PATH_MAX], err[256];
    struct derp_privkey k;
    const char *hex = "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f";
    char text[256];
    path_in_dir(path, "k");

    /* Case-insensitive key, unknown keys ignored, upper-case hex, whitespace. */
    snprintf(text, sizeof(text),
             "  {\"other\": [1, {\"x\": null}], \"privatekey\": \"privkey:%s\"}\n\n", hex);
    write_text(path, text);
    cr_assert_eq(derp_key_file_load(path, &k, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(k.bytes[0], 0x40);
    cr_assert_eq(k.bytes[31], 0x5f);
    snprintf(text, sizeof(text), "{\"PRIVATEKEY\":\"privkey:%s\"}", hex);
    for (char *p = text + 24; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    write_text(path, text);
    cr_assert_eq(derp_key_file_load(path, &k, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(k.bytes[10], 0x4a);
}

static void expect_malformed(const char *content, int want_rc)
{
    char path[PATH_MAX], err[256] = "";
    struct derp_privkey k = {{0x55}};
    path_in_dir(path, "bad.key");
    write_text(path, content);
    cr_assert_eq(derp_key_file_load(path, &k, err, sizeof(err)), want_rc, "content %s", content);
    cr_assert(strstr(err, path) != NULL, "message names the file: %s", err);
    cr_assert_eq(k.bytes[0], 0x55, "output untouched on failure");
}

Test(derp_keys, key_file_load_malformed)
{
    const char *h = "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f";
    char t[256];
    expect_malformed("", -EINVAL);
    expect_malformed("not json", -EINVAL);
    expect_malformed("[1,2]", -EINVAL);
    expect_malformed("{}", -EINVAL);
    expect_malformed("{\"PrivateKey\": null}", -EINVAL);
    expect_malformed("{\"PrivateKey\": 5}", -EINVAL);
    snprintf(t, sizeof(t), "{\"PrivateKey\": \"%s\"}", h); /* no prefix: derper refuses */
    expect_malformed(t, -EINVAL);
    snprintf(t, sizeof(t), "{\"PrivateKey\": \"nodekey:%s\"}", h);
    expect_malformed(t, -EINVAL);
    snprintf(t, sizeof(t), "{\"PrivateKey\": \"privkey:%.63s\"}", h);
    expect_malformed(t, -EINVAL);
    snprintf(t, sizeof(t), "{\"PrivateKey\": \"privkey:%sff\"}", h);
    expect_malformed(t, -EINVAL);
    snprintf(t, sizeof(t), "{\"PrivateKey\": \"privkey:%s\"} trailing", h);
    expect_malformed(t, -EINVAL);
    snprintf(t, sizeof(t), "{\"PrivateKey\": \"privkey:%064d\"}", 0);
    expect_malformed(t, -EINVAL);
}

Test(derp_keys, key_file_load_missing_too_big_not_regular)
{
    char path[PATH_MAX], err[256] = "";
    struct derp_privkey k;
    path_in_dir(path, "missing.key");
    cr_assert_eq(derp_key_file_load(path, &k, err, sizeof(err)), -ENOENT);
    cr_assert(strstr(err, "missing.key") != NULL);

    path_in_dir(path, "big.key");
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    cr_assert(fd >= 0);
    cr_assert_eq(ftruncate(fd, DERP_KEY_FILE_SIZE_MAX + 1), 0);
    close(fd);
    cr_assert_eq(derp_key_file_load(path, &k, err, sizeof(err)), -EFBIG);

    cr_assert_eq(derp_key_file_load(dir, &k, err, sizeof(err)), -EINVAL, "a directory");
    path_in_dir(path, "fifo.key");
    cr_assert_eq(mkfifo(path, 0600), 0);
    cr_assert_eq(derp_key_file_load(path, &k, err, sizeof(err)), -EINVAL,
                 "a FIFO, without hanging");
    cr_assert_eq(derp_key_file_load(dir, &k, NULL, 0), -EINVAL, "err buffer is optional");
}

/* Unreadable: run the load as an unprivileged user if we are root (root reads anything). */
Test(derp_keys, key_file_load_unreadable)
{
    char path[PATH_MAX];
    struct derp_privkey k;
    path_in_dir(path, "secret.key");
    cr_assert_eq(derp_key_file_create(path, &k, NULL, 0), 0);
    cr_assert_eq(chmod(path, 0), 0);
    cr_assert_eq(chmod(dir, 0755), 0); /* only the file's own mode stands in the way */

    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(2);
        char err[256] = "";
        int rc = derp_key_file_load(path, &k, err, sizeof(err));
        _exit(rc == -EACCES && strstr(err, "cannot open") ? 0 : 1);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}

Test(derp_keys, key_file_create_fails_cleanly)
{
    char path[PATH_MAX], err[256] = "";
    struct derp_privkey k;
    path_in_dir(path, "file");
    write_text(path, "x");
    path_in_dir(path, "file/derper.key"); /* parent is a regular file */
    cr_assert_lt(derp_key_file_create(path, &k, err, sizeof(err)), 0);
    cr_assert(strlen(err) > 0);
}

/* ---- Mesh key ------------------------------------------------------------------------------- */

Test(derp_keys, mesh_key_parse)
{
    struct derp_mesh_key m;
    char hex[DERP_KEY_HEX_SIZE];
    const char *h = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
    char t[128];

    cr_assert_eq(derp_mesh_key_parse(h, 64, &m), 0);
    cr_assert(m.bytes[0] == 0x00 && m.bytes[31] == 0xFF);
    derp_mesh_key_format(&m, hex);
    cr_assert_str_eq(hex, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
    snprintf(t, sizeof(t), " \t%s\r\n\n", h); /* whitespace trimmed */
    cr_assert_eq(derp_mesh_key_parse(t, strlen(t), &m), 0);
    cr_assert_eq(derp_mesh_key_parse(h, 63, &m), -EINVAL);
    snprintf(t, sizeof(t), "%s0", h);
    cr_assert_eq(derp_mesh_key_parse(t, 65, &m), -EINVAL);
    snprintf(t, sizeof(t), "%.32s %.32s", h, h + 32);
    cr_assert_eq(derp_mesh_key_parse(t, 65, &m), -EINVAL, "inner space");
    snprintf(t, sizeof(t), "%.63sz", h);
    cr_assert_eq(derp_mesh_key_parse(t, 64, &m), -EINVAL);
    cr_assert_eq(derp_mesh_key_parse("   ", 3, &m), -EINVAL);
}

Test(derp_keys, mesh_key_file)
{
    char path[PATH_MAX], err[256] = "";
    struct derp_mesh_key m;
    path_in_dir(path, "derp-mesh.key");
    write_text(path, "abababababababababababababababababababababababababababababababab\n");
    cr_assert_eq(derp_mesh_key_load_file(path, &m, err, sizeof(err)), 0, "%s", err);
    cr_assert(m.bytes[0] == 0xab && m.bytes[31] == 0xab);
    write_text(path, "abab\n");
    cr_assert_eq(derp_mesh_key_load_file(path, &m, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "64 hex") != NULL, "%s", err);
    path_in_dir(path, "none");
    cr_assert_eq(derp_mesh_key_load_file(path, &m, err, sizeof(err)), -ENOENT);
}

Test(derp_keys, mesh_key_compare_and_admit)
{
    struct derp_mesh_key server, client, zero = {{0}};
    memset(server.bytes, 0x11, 32);
    client = server;
    cr_assert(derp_mesh_key_equal(&server, &client));
    cr_assert(derp_mesh_key_admits(&server, &client));
    client.bytes[31] ^= 1;
    cr_assert(!derp_mesh_key_equal(&server, &client), "last byte counts");
    cr_assert(!derp_mesh_key_admits(&server, &client));
    client = server;
    client.bytes[0] ^= 0x80;
    cr_assert(!derp_mesh_key_admits(&server, &client), "first byte counts");
    /* Zero = no key: a server without a mesh key admits nobody, not even a zero key. */
    cr_assert(derp_mesh_key_is_zero(&zero));
    cr_assert(!derp_mesh_key_admits(&zero, &zero));
    cr_assert(!derp_mesh_key_admits(&server, &zero));
    cr_assert(!derp_mesh_key_admits(&zero, &server));
}
