/* test_tlsconn_roots.c - a client context on the system's roots (tls_client_options.
 * system_roots) against openssl s_server with a leaf certificate from a test CA made here by
 * the openssl CLI: SSL_CERT_FILE or SSL_CERT_DIR naming the CA makes the handshake succeed;
 * another CA, the default system roots (which do not hold the test CA) or a wrong host name make
 * it fail; the options that make no sense are refused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tlsconn_client.h"
#include "tlsconn_server.h"
#include "tlsconn_util.h"

static char dir[64];

/* dir/name, in one of 8 rotating static buffers (callers use it before 8 more calls). */
static const char *path_in(const char *name)
{
    static char bufs[8][128];
    static unsigned next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof(bufs[0]), "%s/%s", dir, name);
    return b;
}

/* A CA (CA:TRUE, keyCertSign) and a leaf for localhost / 127.0.0.1 signed by it. */
static void make_ca(const char *ca, const char *ca_key, const char *cn)
{
    char subj[64];
    snprintf(subj, sizeof(subj), "/CN=%s", cn);
    const char *const extra[] = {"-addext", "basicConstraints=critical,CA:TRUE", "-addext",
                                 "keyUsage=critical,keyCertSign", NULL};
    tu_openssl_req(ca_key, ca, subj, extra);
}

static void suite_init(void)
{
    tu_check_boringssl();
    if (!tu_have("openssl")) {
        fprintf(stderr, "openssl CLI missing: skipping\n");
        exit(77);
    }
    snprintf(dir, sizeof(dir), "/tmp/hd-roots-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    cr_assert_eq(mkdir(path_in("empty"), 0700), 0);
    cr_assert_eq(mkdir(path_in("cadir"), 0700), 0);
    make_ca(path_in("ca.pem"), path_in("ca.key"), "hderp test CA");
    make_ca(path_in("other.pem"), path_in("other.key"), "hderp other CA");
    const char *const leaf[] = {"-CA",     path_in("ca.pem"),
                                "-CAkey",  path_in("ca.key"),
                                "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                                "-addext", "basicConstraints=CA:FALSE",
                                NULL};
    tu_openssl_req(path_in("leaf.key"), path_in("leaf.pem"), "/CN=localhost", leaf);
    /* cadir: a junk file (ignored) and a symlink to the CA outside the directory, as Debian's
     * /etc/ssl/certs/NAME.pem links into /usr/share/ca-certificates (followed). */
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "echo junk > %s && ln -s %s %s", path_in("cadir/junk.txt"),
             path_in("ca.pem"), path_in("cadir/test-ca.pem"));
    cr_assert_eq(system(cmd), 0);
}

static void suite_fini(void)
{
    if (dir[0] == '\0')
        return;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    (void)system(cmd);
}

TestSuite(test_tlsconn_roots, .init = suite_init, .fini = suite_fini, .timeout = 60);

/* ---------------------------------------------------------------- our client, s_server */

static void cl_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    (void)info;
    atomic_fetch_add(&tc.handshakes, 1);
    HDT_CHECK(net_conn_send_copy(c, "hello world\n", 12) == 0);
}

static void cl_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", tc.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    struct net_conn *c;
    HDT_CHECK(net_conn_connect(s, &a, 5000, &tc_handler, NULL, NULL, &c) == 0);
    struct tls_conn_options o = {.server_name = tc.server_name, .on_handshake = cl_handshake};
    int rc = tls_conn_start(c, tc.ctx, &o);
    atomic_store(&tc.start_rc, rc);
    if (rc < 0) {
        net_conn_close(c, rc, true);
        hd_runtime_stop(hd_shard_runtime(s));
    }
}

/* SSL_CERT_FILE / SSL_CERT_DIR as given (NULL: unset), a context on the system roots, and one
 * connection to s_server (leaf from the test CA) for server_name. */
static void run_client(const char *cert_file, const char *cert_dir, const char *server_name)
{
    ts_reset(); /* TS_LAYERS reads ts.handshakes_max */
    memset(&tc, 0, sizeof(tc));
    tc.port = tu_port_hold();
    tc.server_name = server_name;
    if (cert_file)
        setenv("SSL_CERT_FILE", cert_file, 1);
    else
        unsetenv("SSL_CERT_FILE");
    if (cert_dir)
        setenv("SSL_CERT_DIR", cert_dir, 1);
    else
        unsetenv("SSL_CERT_DIR");
    struct tls_client_options co = {.system_roots = true};
    cr_assert_eq(tls_client_ctx_create(&co, &tc.ctx), 0);
    unsetenv("SSL_CERT_FILE");
    unsetenv("SSL_CERT_DIR");

    char accept_addr[32], buf[4096];
    size_t len = 0;
    snprintf(accept_addr, sizeof(accept_addr), "127.0.0.1:%u", tc.port);
    char *argv[] = {"openssl",  "s_server",
                    "-accept",  accept_addr,
                    "-cert",    (char *)path_in("leaf.pem"),
                    "-key",     (char *)path_in("leaf.key"),
                    "-tls1_3",  "-rev",
                    "-naccept", "1",
                    NULL};
    int out;
    pid_t pid = tu_spawn(argv, NULL, &out);
    cr_assert(tu_read_until(out, buf, sizeof(buf), &len, "ACCEPT", 10000), "s_server not up");
    struct hdt_options o = {.shards = 1, TS_LAYERS};
    int rc = hdt_run(&o, cl_body, NULL, NULL);
    tu_stop(pid);
    close(out);
    tls_ctx_destroy(tc.ctx);
    cr_assert_eq(rc, 0);
}

static void assert_ok(void)
{
    cr_assert_eq(atomic_load(&tc.start_rc), 0);
    cr_assert_eq(atomic_load(&tc.handshakes), 1, "the test CA's certificate was refused");
    cr_assert_str_eq(tc.got, "dlrow olleh\n");
    cr_assert_eq(atomic_load(&tc.reason), 0);
}

static void assert_refused(void)
{
    cr_assert_eq(atomic_load(&tc.start_rc), 0);
    cr_assert_eq(atomic_load(&tc.closed), 1);
    cr_assert_eq(atomic_load(&tc.handshakes), 0, "an untrusted certificate was accepted");
    cr_assert_eq(atomic_load(&tc.reason), -EPROTO);
    cr_assert_eq(tc.got_len, 0);
}

Test(test_tlsconn_roots, cert_file_env_trusts_the_test_ca)
{
    run_client(path_in("ca.pem"), path_in("empty"), "localhost");
    assert_ok();
}

/* SSL_CERT_FILE replaces only the bundle file: the default directories are still read. */
Test(test_tlsconn_roots, cert_file_env_keeps_default_dirs)
{
    run_client(path_in("ca.pem"), NULL, "localhost");
    assert_ok();
}

Test(test_tlsconn_roots, ip_literal_is_verified)
{
    run_client(path_in("ca.pem"), path_in("empty"), "127.0.0.1");
    assert_ok();
}

Test(test_tlsconn_roots, wrong_name_refused)
{
    run_client(path_in("ca.pem"), path_in("empty"), "wrong.example");
    assert_refused();
}

Test(test_tlsconn_roots, other_ca_refused)
{
    run_client(path_in("other.pem"), path_in("empty"), "localhost");
    assert_refused();
}

/* The machine's own roots (Debian's bundle, if any) do not hold the test CA. */
Test(test_tlsconn_roots, default_roots_refuse_the_test_ca)
{
    run_client(NULL, NULL, "localhost");
    assert_refused();
}

/* SSL_CERT_DIR: every entry of every listed directory (missing ones skipped); an absent
 * SSL_CERT_FILE is skipped like a missing default file. */
Test(test_tlsconn_roots, cert_dir_env_trusts_the_test_ca)
{
    char dirs[256];
    snprintf(dirs, sizeof(dirs), "%s:%s", path_in("absent"), path_in("cadir"));
    run_client(path_in("absent.pem"), dirs, "localhost");
    assert_ok();
}

/* SSL_CERT_DIR replaces the default directories: an empty one trusts nothing. */
Test(test_tlsconn_roots, cert_dir_env_replaces_default_dirs)
{
    run_client(path_in("absent.pem"), path_in("empty"), "localhost");
    assert_refused();
}

/* Without a name to check, system roots would vouch for any site: refused at start. */
Test(test_tlsconn_roots, no_server_name_refused)
{
    run_client(path_in("ca.pem"), path_in("empty"), NULL);
    cr_assert_eq(atomic_load(&tc.start_rc), -EINVAL);
    cr_assert_eq(atomic_load(&tc.handshakes), 0);
}

Test(test_tlsconn_roots, options_that_make_no_sense)
{
    struct tls_ctx *c = NULL;
    cr_assert_eq(tls_client_ctx_create(&(struct tls_client_options){0}, &c), -EINVAL);
    cr_assert_eq(tls_client_ctx_create(
                     &(struct tls_client_options){.system_roots = true, .insecure = true}, &c),
                 -EINVAL);
    cr_assert_eq(
        tls_client_ctx_create(
            &(struct tls_client_options){.system_roots = true, .ca_file = path_in("ca.pem")}, &c),
        -EINVAL);
    cr_assert_null(c);
}
