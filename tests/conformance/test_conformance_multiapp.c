/* test_conformance_multiapp.c - several apps in one process: two instances of hderp-server's
 * relay module (each with its own configuration from derper's flags, its own port and key) and
 * a tiny TCP echo app share one runtime of two shards. Real sockets: raw DERP clients log in to
 * both relays with keys owned by either shard (so packets cross the bus to their owner, which
 * must find its own instance), packets are relayed within each relay, each relay's /debug/varz
 * counts only its own clients, and the echo app echoes. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf_support.h"
#include "server.h"
#include "ops/server_flags.h"

#define SHARDS    2
#define RELAYS    2
#define IO_MS     CONF_IO_TIMEOUT_MS
#define ECHO_TEXT "several apps, one runtime"

/* ---------------------------------------------------------------- the echo app */

static struct {
    struct net_listener *listener; /* shard 0 only */
    _Atomic uint16_t port;
} echo;

static ssize_t echo_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    int rc = net_conn_send_copy(c, data, len);
    return rc < 0 ? rc : (ssize_t)len;
}

static void echo_close(struct net_conn *c, int reason)
{
    (void)c, (void)reason;
}

static const struct net_conn_handler echo_handler = {.on_data = echo_data, .on_close = echo_close};

static void echo_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    struct net_conn *c;
    if (net_conn_adopt(net_listener_shard(l), fd, &echo_handler, NULL, NULL, &c) < 0)
        close(fd);
}

static int echo_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg;
    *state = NULL;
    if (hd_shard_id(s) != 0)
        return 0;
    struct net_addr a;
    int rc = net_addr_parse("127.0.0.1:0", &a);
    if (rc == 0)
        rc = net_listener_start(s, &a, NULL, echo_accept, NULL, &echo.listener);
    if (rc == 0)
        atomic_store(&echo.port, net_addr_port(net_listener_addr(echo.listener)));
    return rc;
}

static void echo_stop(struct hd_shard *s, void *state)
{
    (void)state;
    if (hd_shard_id(s) == 0 && echo.listener)
        net_listener_stop(echo.listener);
    echo.listener = NULL;
}

static const struct hd_module *const echo_requires[] = {&net_module, NULL};

static const struct hd_module echo_module = {.abi_version = HD_MODULE_ABI,
                                             .name = "test-echo",
                                             .shard_init = echo_init,
                                             .shard_stop = echo_stop,
                                             .requires = echo_requires};

static int tcp_connect(uint16_t port)
{
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

static void check_echo(void)
{
    int fd = tcp_connect(atomic_load(&echo.port));
    cr_assert_geq(fd, 0, "echo app: connect: %s", strerror(errno));
    struct timeval tv = {.tv_sec = IO_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    cr_assert_eq(write(fd, ECHO_TEXT, strlen(ECHO_TEXT)), (ssize_t)strlen(ECHO_TEXT));
    char buf[64];
    size_t got = 0;
    while (got < strlen(ECHO_TEXT)) {
        ssize_t n = read(fd, buf + got, sizeof(buf) - got);
        cr_assert_gt(n, 0, "echo app: read: %s", n < 0 ? strerror(errno) : "EOF");
        got += (size_t)n;
    }
    cr_assert(memcmp(buf, ECHO_TEXT, got) == 0);
    close(fd);
}

/* ---------------------------------------------------------------- the relays */

struct relay {
    struct srv_config cfg;
    struct conf_server srv; /* port and key, for the raw client helpers (no process) */
    struct conf_raw a, b;   /* clients whose keys live on shard 0 and shard 1 */
};

static struct relay relays[RELAYS];

static void relay_configure(struct relay *r)
{
    cr_assert_eq(conf_port_hold(&r->srv.port), 0); /* the shards' listeners bind beside it */
    r->srv.http_port = r->srv.port;
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", r->srv.port);
    char *argv[] = {"hderp-server", "-dev", "-a", addr, "-stun=false", NULL};
    struct srv_flags f;
    cr_assert_eq(srv_flags_parse(5, argv, &f), 0);
    cr_assert_eq(srv_configure(&r->cfg, &f), 0);
    r->srv.key = r->cfg.key.pub;
}

/* a (owned by shard 0) and b (shard 1) log in; a packet each way is relayed. */
static void relay_check(struct relay *r, unsigned idx)
{
    struct derp_keypair ka, kb;
    cr_assert_eq(conf_keypair_on_shard(&ka, 0, SHARDS), 0);
    cr_assert_eq(conf_keypair_on_shard(&kb, 1, SHARDS), 0);
    cr_assert_eq(conf_raw_login(&r->a, &r->srv, &ka, NULL), 0, "relay %u: login a", idx);
    cr_assert_eq(conf_raw_login(&r->b, &r->srv, &kb, NULL), 0, "relay %u: login b", idx);
    cr_assert(derp_pubkey_equal(&r->a.server_key, &r->cfg.key.pub), "relay %u: its own key", idx);
    char msg[32];
    snprintf(msg, sizeof(msg), "relay %u", idx);
    struct conf_raw *pairs[2][2] = {{&r->a, &r->b}, {&r->b, &r->a}};
    for (unsigned i = 0; i < 2; i++) {
        struct conf_raw *from = pairs[i][0], *to = pairs[i][1];
        cr_assert_eq(conf_raw_send_packet(from, &to->kp.pub, msg, strlen(msg)), 0);
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        cr_assert_eq(conf_raw_read_packet(to, IO_MS, &src, &data, &len), 0,
                     "relay %u: packet %u not relayed", idx, i);
        cr_assert(derp_pubkey_equal(&src, &from->kp.pub));
        cr_assert(len == strlen(msg) && memcmp(data, msg, len) == 0);
    }
}

Test(test_conformance_multiapp, two_relays_and_an_echo_app_in_one_runtime, .timeout = 120)
{
    memset(relays, 0, sizeof(relays));
    for (unsigned i = 0; i < RELAYS; i++)
        relay_configure(&relays[i]);
    const struct hd_module *const mods[] = {&srv_module, &srv_module, &echo_module};
    void *const args[] = {&relays[0].cfg, &relays[1].cfg, NULL};
    struct hd_frame_class classes[SRV_FRAME_CLASSES];
    cr_assert_eq(srv_frame_classes(SRV_FRAME_POOL_MIB_DEFAULT, classes), 0);
    struct hd_runtime_config rc_cfg = {.shards_count = SHARDS,
                                       .frame_classes = classes,
                                       .frame_classes_count = SRV_FRAME_CLASSES,
                                       .frame_release = srv_frame_release,
                                       .modules = mods,
                                       .modules_args = args,
                                       .modules_count = 3};
    struct hd_runtime *rt;
    cr_assert_eq(hd_runtime_create(&rc_cfg, &rt), 0);
    char err[256];
    for (unsigned i = 0; i < RELAYS; i++)
        cr_assert_eq(srv_attach(&relays[i].cfg, rt, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(hd_runtime_start(rt), 0);

    for (unsigned i = 0; i < RELAYS; i++)
        relay_check(&relays[i], i);
    for (unsigned i = 0; i < RELAYS; i++) { /* each relay counts its own two clients */
        int64_t v = -1;
        cr_assert_eq(conf_varz(&relays[i].srv, "derp_current_connections", false, &v), 0);
        cr_assert_eq(v, 2, "relay %u: derp_current_connections %lld", i, (long long)v);
    }
    check_echo();

    for (unsigned i = 0; i < RELAYS; i++) {
        conf_raw_close(&relays[i].a);
        conf_raw_close(&relays[i].b);
    }
    hd_runtime_stop(rt);
    cr_assert_eq(hd_runtime_wait(rt), 0);
    for (unsigned i = 0; i < RELAYS; i++)
        srv_detach(&relays[i].cfg);
    hd_runtime_destroy(rt);
    for (unsigned i = 0; i < RELAYS; i++)
        srv_config_fini(&relays[i].cfg);
}
