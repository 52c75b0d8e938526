/* test_tlsconn_peers.c - our TLS server and client against real peers not written here:
 * openssl s_client (echo, SNI, certificate files verified by the peer, KeyUpdate both ways,
 * close_notify), curl (HTTPS GET, ALPN http/1.1), openssl s_server (our client, CA and name
 * verification, session tickets ignored), plus the handshake cap and deadline. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tlsconn_client.h"
#include "tlsconn_server.h"
#include "tlsconn_util.h"

static void suite_init(void)
{
    tu_check_boringssl();
    if (!tu_have("openssl") || !tu_have("curl")) {
        fprintf(stderr, "openssl or curl CLI missing: skipping\n");
        exit(77);
    }
}

static void suite_fini(void)
{
    tu_cleanup();
}

TestSuite(test_tlsconn_peers, .init = suite_init, .fini = suite_fini, .timeout = 60);

static _Atomic int result;

static void addr_text(char *buf, size_t size)
{
    snprintf(buf, size, "127.0.0.1:%u", ts.port);
}

static bool send_line(int fd, const char *line)
{
    size_t n = strlen(line);
    return write(fd, line, n) == (ssize_t)n;
}

/* ---------------------------------------------------------------- s_client echo */

static void drive_s_client_echo(void)
{
    char addr[32], buf[4096];
    size_t len = 0;
    addr_text(addr, sizeof(addr));
    char *argv[] = {"openssl",
                    "s_client",
                    "-connect",
                    addr,
                    "-tls1_3",
                    "-servername",
                    "localhost",
                    "-CAfile",
                    (char *)tu_cert_path(),
                    "-verify_return_error",
                    "-quiet",
                    NULL};
    int in, out;
    pid_t pid = tu_spawn(argv, &in, &out);
    bool ok = send_line(in, "hello tls\n") &&
              tu_read_until(out, buf, sizeof(buf), &len, "hello tls\n", 10000);
    ok = ok && send_line(in, "second line\n") &&
         tu_read_until(out, buf, sizeof(buf), &len, "second line\n", 10000);
    atomic_store(&result, ok ? 1 : -1);
    close(in);
    tu_stop(pid);
    close(out);
}

/* Manual mode (PEM files): s_client verifies our chain against the CA and the name. */
Test(test_tlsconn_peers, s_client_echo_cert_files)
{
    tu_make_cert();
    ts_reset();
    struct tls_server_options so = {.cert_file = tu_cert_path(), .key_file = tu_key_path()};
    cr_assert_eq(tls_server_ctx_create(&so, &ts.ctx), 0);
    atomic_store(&result, 0);
    ts_run(1, drive_s_client_echo, 1);
    tls_ctx_destroy(ts.ctx);
    cr_assert_eq(atomic_load(&result), 1, "echo through s_client failed");
    cr_assert_eq(atomic_load(&ts.handshakes), 1);
    cr_assert_str_eq(ts.sni, "localhost");
    cr_assert_str_eq(ts.alpn, "");
    cr_assert_eq(atomic_load(&ts.mode), TLS_MODE_USERSPACE);
    cr_assert_eq(atomic_load(&ts.closes), 1);
}

/* ---------------------------------------------------------------- KeyUpdate, close_notify */

static _Atomic int sclient_exit;

/* s_client without -quiet reads command letters: "K" sends KeyUpdate(update_requested), "Q"
 * ends the session with close_notify. A command consumes its whole read, so each line waits
 * for the echo of the one before it, and the line after K is retried until it echoes. */
static void drive_key_update(void)
{
    char addr[32], buf[16384];
    size_t len = 0;
    addr_text(addr, sizeof(addr));
    char *argv[] = {"openssl", "s_client",    "-connect",    addr,
                    "-tls1_3", "-servername", "dev.example", NULL};
    int in, out;
    pid_t pid = tu_spawn(argv, &in, &out);
    bool ok = send_line(in, "ping-one\n") &&
              tu_read_until(out, buf, sizeof(buf), &len, "ping-one\n", 10000);
    ok = ok && send_line(in, "K\n");
    bool echoed = false;
    for (int i = 0; ok && i < 10 && !echoed; i++) {
        usleep(100000);
        ok = send_line(in, "ping-two\n");
        echoed = ok && tu_read_until(out, buf, sizeof(buf), &len, "ping-two\n", 1000);
    }
    ok = ok && echoed && send_line(in, "Q\n");
    int st = ok ? tu_wait(pid, 10000) : -1;
    atomic_store(&sclient_exit, st);
    if (st < 0)
        tu_stop(pid);
    atomic_store(&result, ok ? 1 : -1);
    close(in);
    close(out);
}

Test(test_tlsconn_peers, s_client_key_update_and_close_notify)
{
    ts_reset();
    struct tls_server_options so = {.self_signed_host = "dev.example"};
    cr_assert_eq(tls_server_ctx_create(&so, &ts.ctx), 0);
    atomic_store(&result, 0);
    ts_run(1, drive_key_update, 1);
    tls_ctx_destroy(ts.ctx);
    cr_assert_eq(atomic_load(&result), 1, "echo around the KeyUpdate failed");
    cr_assert_eq(atomic_load(&sclient_exit), 0, "s_client did not end cleanly after Q");
    cr_assert_geq(atomic_load(&ts.key_updates_in), 1);
    cr_assert_geq(atomic_load(&ts.key_updates_out), 1, "update_requested was not answered");
    cr_assert_eq(atomic_load(&ts.reasons[0]), 0, "close_notify should close cleanly, got %d",
                 atomic_load(&ts.reasons[0]));
    cr_assert_str_eq(ts.sni, "dev.example");
}

/* ---------------------------------------------------------------- curl */

static void drive_curl(void)
{
    char url[64], buf[4096];
    size_t len = 0;
    snprintf(url, sizeof(url), "https://127.0.0.1:%u/", ts.port);
    char *argv[] = {"curl", "--insecure", "-s", "--max-time", "10", "-o", "-", url, NULL};
    int out;
    pid_t pid = tu_spawn(argv, NULL, &out);
    bool ok = tu_read_until(out, buf, sizeof(buf), &len, "hello from hderp\n", 15000);
    int st = tu_wait(pid, 15000);
    if (st < 0)
        tu_stop(pid);
    atomic_store(&result, ok && st == 0 && strcmp(buf, "hello from hderp\n") == 0 ? 1 : -1);
    close(out);
}

Test(test_tlsconn_peers, curl_https_get)
{
    ts_reset();
    ts.http = true;
    struct tls_server_options so = {.self_signed_host = "127.0.0.1"};
    cr_assert_eq(tls_server_ctx_create(&so, &ts.ctx), 0);
    atomic_store(&result, 0);
    ts_run(1, drive_curl, 1);
    tls_ctx_destroy(ts.ctx);
    cr_assert_eq(atomic_load(&result), 1, "curl did not get the 200 body");
    cr_assert_str_eq(ts.alpn, "http/1.1");
    cr_assert_eq(atomic_load(&ts.reasons[0]), 0);
}

/* net_conn_close(c, 0, true) on a TLS connection ends it with close_notify (issue 27): Python's
 * ssl client, told not to forgive a TCP close without one (suppress_ragged_eofs=False), reads
 * the whole answer and then a clean end of stream. Before, the close was a bare FIN and the
 * peer saw "EOF occurred in violation of protocol". */
static const char py_clean_eof[] =
    "import socket, ssl, sys\n"
    "ctx = ssl.create_default_context()\n"
    "ctx.check_hostname = False\n"
    "ctx.verify_mode = ssl.CERT_NONE\n"
    "s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', int(sys.argv[1])), 10),\n"
    "                    suppress_ragged_eofs=False)\n"
    "s.sendall(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
    "got = b''\n"
    "try:\n"
    "    while True:\n"
    "        b = s.recv(4096)\n"
    "        if not b:\n"
    "            break\n"
    "        got += b\n"
    "    print('CLEAN' if got.endswith(b'hello from hderp\\n') else 'SHORT', flush=True)\n"
    "except ssl.SSLEOFError:\n"
    "    print('RAGGED', flush=True)\n";

static void drive_py_close_notify(void)
{
    char port[16], buf[256];
    size_t len = 0;
    snprintf(port, sizeof(port), "%u", ts.port);
    char *argv[] = {"python3", "-c", (char *)py_clean_eof, port, NULL};
    int out;
    pid_t pid = tu_spawn(argv, NULL, &out);
    bool got = tu_read_until(out, buf, sizeof(buf), &len, "\n", 15000);
    int st = tu_wait(pid, 15000);
    if (st < 0)
        tu_stop(pid);
    atomic_store(&result, got && st == 0 && strcmp(buf, "CLEAN\n") == 0 ? 1 : -1);
    if (atomic_load(&result) != 1)
        fprintf(stderr, "python ssl client said: %.*s (exit %d)\n", (int)len, buf, st);
    close(out);
}

Test(test_tlsconn_peers, graceful_close_sends_close_notify)
{
    if (!tu_have("python3"))
        cr_skip_test("python3 missing");
    ts_reset();
    ts.http = true;
    struct tls_server_options so = {.self_signed_host = "127.0.0.1"};
    cr_assert_eq(tls_server_ctx_create(&so, &ts.ctx), 0);
    atomic_store(&result, 0);
    ts_run(1, drive_py_close_notify, 1);
    tls_ctx_destroy(ts.ctx);
    cr_assert_eq(atomic_load(&result), 1, "the peer did not see close_notify before the end");
    cr_assert_eq(atomic_load(&ts.reasons[0]), 0);
}

/* ---------------------------------------------------------------- our client, s_server */

static void cl_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    HDT_CHECK(info->mode == TLS_MODE_USERSPACE && info->version == 0x0304);
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
    HDT_CHECK(tls_conn_start(c, tc.ctx, &o) == 0);
}

/* s_server -rev answers each line reversed; it also sends two session tickets we ignore. */
static void run_client(const char *server_name, bool insecure)
{
    tu_make_cert();
    memset(&tc, 0, sizeof(tc));
    tc.port = tu_port_hold();
    tc.server_name = server_name;
    char accept_addr[32], buf[4096];
    size_t len = 0;
    snprintf(accept_addr, sizeof(accept_addr), "127.0.0.1:%u", tc.port);
    char *argv[] = {"openssl",  "s_server",
                    "-accept",  accept_addr,
                    "-cert",    (char *)tu_cert_path(),
                    "-key",     (char *)tu_key_path(),
                    "-tls1_3",  "-rev",
                    "-naccept", "1",
                    NULL};
    int out;
    pid_t pid = tu_spawn(argv, NULL, &out);
    cr_assert(tu_read_until(out, buf, sizeof(buf), &len, "ACCEPT", 10000), "s_server not up");
    struct tls_client_options co = {.ca_file = insecure ? NULL : tu_cert_path(),
                                    .insecure = insecure};
    cr_assert_eq(tls_client_ctx_create(&co, &tc.ctx), 0);
    struct hdt_options o = {.shards = 1, TS_LAYERS};
    int rc = hdt_run(&o, cl_body, NULL, NULL);
    tu_stop(pid);
    close(out);
    tls_ctx_destroy(tc.ctx);
    cr_assert_eq(rc, 0);
    cr_assert_eq(atomic_load(&tc.closed), 1);
}

Test(test_tlsconn_peers, client_verifies_against_s_server)
{
    ts_reset(); /* TS_LAYERS reads ts.handshakes_max */
    run_client("localhost", false);
    cr_assert_eq(atomic_load(&tc.handshakes), 1);
    cr_assert_str_eq(tc.got, "dlrow olleh\n");
    cr_assert_eq(atomic_load(&tc.reason), 0);
}

Test(test_tlsconn_peers, client_verifies_ip_literal)
{
    ts_reset();
    run_client("127.0.0.1", false);
    cr_assert_eq(atomic_load(&tc.handshakes), 1);
    cr_assert_str_eq(tc.got, "dlrow olleh\n");
}

Test(test_tlsconn_peers, client_insecure_accepts_any_name)
{
    ts_reset();
    run_client("wrong.example", true);
    cr_assert_eq(atomic_load(&tc.handshakes), 1);
    cr_assert_str_eq(tc.got, "dlrow olleh\n");
}

Test(test_tlsconn_peers, client_refuses_wrong_name)
{
    ts_reset();
    run_client("wrong.example", false);
    cr_assert_eq(atomic_load(&tc.handshakes), 0, "a certificate for another name was accepted");
    cr_assert_eq(atomic_load(&tc.reason), -EPROTO);
    cr_assert_eq(tc.got_len, 0);
}

/* ---------------------------------------------------------------- cap and deadline */

static int raw_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(ts.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Two silent clients with a cap of one handshake: one is refused at once, the other is closed
 * by the handshake deadline. Both see EOF from the server (never the 5 s receive timeout). */
static void drive_cap(void)
{
    int a = raw_connect(), b = raw_connect();
    char x;
    bool ok = read(a, &x, 1) == 0 && read(b, &x, 1) == 0;
    atomic_store(&result, ok ? 1 : -1);
    close(a);
    close(b);
}

Test(test_tlsconn_peers, handshake_cap_and_deadline)
{
    ts_reset();
    ts.handshakes_max = 1;
    ts.handshake_timeout_ms = 300;
    struct tls_server_options so = {.self_signed_host = "localhost"};
    cr_assert_eq(tls_server_ctx_create(&so, &ts.ctx), 0);
    atomic_store(&result, 0);
    ts_run(1, drive_cap, 2);
    tls_ctx_destroy(ts.ctx);
    cr_assert_eq(atomic_load(&result), 1, "a silent client was not closed");
    cr_assert_eq(atomic_load(&ts.closes), 2);
    cr_assert_eq(atomic_load(&ts.reasons[0]), -EBUSY, "first close: %d", ts.reasons[0]);
    cr_assert_eq(atomic_load(&ts.reasons[1]), -ETIMEDOUT, "second close: %d", ts.reasons[1]);
    cr_assert_eq(atomic_load(&ts.refused), 1);
    cr_assert_eq(atomic_load(&ts.handshakes), 0);
}
