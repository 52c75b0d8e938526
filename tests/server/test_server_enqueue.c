/* test_server_enqueue.c - srv_client_enqueue's drop reasons on a real connection: a packet for
 * a client whose connection is closing (net has begun the close, on_close has not run yet) is
 * counted as gone_disconnected, as derper's sendPkt counts a packet for a destination whose
 * context is done; not as a write error. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_test.h"

static struct enqueue_state {
    struct srv_client *cl;
    int peer_fd, rc;
    uint64_t gone, write_error;
    struct hd_timer timer;
} es;

static void after_close(struct hd_timer *t)
{
    (void)t;
    struct srv_shard *ds = es.cl->ds;
    srvt_client_free(es.cl);
    close(es.peer_fd);
    srvt_done(ds);
}

static void closing_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    uint8_t key[DERP_KEY_LEN], src[DERP_KEY_LEN];
    srvt_key(1, key);
    srvt_key(2, src);
    int sv[2];
    HDT_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    struct srv_client *cl = srvt_client(ds, key, SRV_CLIENT_ACTIVE);
    HDT_CHECK(net_conn_adopt(ds->s, sv[0], &srvt_sink_handler, cl, NULL, &cl->conn) == 0);
    es.cl = cl;
    es.peer_fd = sv[1];
    net_conn_close(cl->conn, 0, false); /* on_close comes later, after the fd's close */
    HDT_CHECK(cl->phase == SRV_CLIENT_ACTIVE);
    es.rc = srv_client_enqueue(cl, srvt_route_frame(ds, key, src, 100));
    es.gone = ds->ctr.packets_dropped[SRV_DROP_GONE_DISCONNECTED][SRV_KIND_OTHER];
    es.write_error = ds->ctr.packets_dropped[SRV_DROP_WRITE_ERROR][SRV_KIND_OTHER];
    hd_timer_init(&es.timer, after_close);
    hd_timer_start(ds->s, &es.timer, 10);
}

Test(server_enqueue, a_packet_for_a_closing_connection_is_gone_disconnected)
{
    memset(&es, 0, sizeof(es));
    struct srvt_opts o = {.net = true};
    cr_assert_eq(srvt_run(&o, closing_body, NULL), 0);
    cr_assert_eq(es.rc, -EPIPE, "srv_client_enqueue returned %d", es.rc);
    cr_assert_eq(es.gone, 1, "gone_disconnected %llu", (unsigned long long)es.gone);
    cr_assert_eq(es.write_error, 0, "write_error %llu", (unsigned long long)es.write_error);
}
