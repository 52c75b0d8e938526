/* test_conformance_stall.c - spec §14 rows 14, 19 and 20 against a real hderp-server: an
 * idle connection gets KeepAlives repeatedly (with the test flag --keepalive-interval 1s); a
 * receiver that stops reading does not block other flows, and is closed by the write timeout
 * once its socket buffers fill (counted in sclient_write_timeouts). Raw blocking clients. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "conf_support.h"

static struct conf_server srv;

static void down(void)
{
    if (srv.pid > 0)
        conf_server_stop(&srv);
}

#define OK(expr)                                                                                   \
    do {                                                                                           \
        int rc_ = (int)(expr);                                                                     \
        cr_assert_eq(rc_, 0, "%s: %d (%s)", #expr, rc_, strerror(rc_ < 0 ? -rc_ : 0));             \
    } while (0)

TestSuite(test_conformance_stall, .fini = down, .timeout = 120);

/* Row 14: an idle client receives KeepAlive frames, again and again (the interval shortened to
 * 1 s; each one must come within a few intervals). */
Test(test_conformance_stall, keepalive_repeats)
{
    OK(conf_server_start(&srv, &(struct conf_server_opts){.keepalive = "1s"}));
    struct conf_raw r;
    OK(conf_raw_login(&r, &srv, NULL, NULL));
    for (int i = 0; i < 3; i++) {
        struct conf_frame f;
        OK(conf_raw_read(&r, 5000, &f));
        cr_assert_eq(f.type, DERP_FRAME_KEEP_ALIVE, "frame %d is type %u", i, f.type);
        cr_assert_eq(f.len, 0);
    }
    conf_raw_close(&r);
    cr_assert_eq(conf_server_stop(&srv), 0);
}

/* Packets for the stalled receiver: enough to fill its socket buffers and its queues many times
 * over (loopback buffers are a few MB at most). */
#define STALL_PACKETS 400
#define FLOW_PACKETS  200

/* Rows 19, 20 (TestSendFreeze): B stops reading; A keeps sending to B and to C; C gets every
 * packet; B is closed by the write timeout; A and C stay. */
Test(test_conformance_stall, stalled_receiver_no_hol_blocking)
{
    OK(conf_server_start(&srv, &(struct conf_server_opts){.write_timeout = "1s"}));
    struct conf_raw a, b, c;
    OK(conf_raw_login(&a, &srv, NULL, NULL));
    OK(conf_raw_login(&b, &srv, NULL, NULL));
    OK(conf_raw_login(&c, &srv, NULL, NULL));
    static uint8_t big[DERP_PACKET_LEN_MAX];
    memset(big, 0xbb, sizeof(big));
    char text[32];
    unsigned got = 0;
    for (unsigned i = 0; i < STALL_PACKETS; i++) {
        /* A blocking write: if the relay stopped reading A because of B, this times out. */
        OK(conf_raw_send_packet(&a, &b.kp.pub, big, sizeof(big)));
        if (i % 2 == 0 && got < FLOW_PACKETS) {
            snprintf(text, sizeof(text), "c%u", got);
            OK(conf_raw_send_packet(&a, &c.kp.pub, text, strlen(text)));
            struct derp_pubkey src;
            const uint8_t *data;
            size_t len;
            OK(conf_raw_read_packet(&c, CONF_IO_TIMEOUT_MS, &src, &data, &len));
            cr_assert(derp_pubkey_equal(&src, &a.kp.pub));
            cr_assert(len == strlen(text) && memcmp(data, text, len) == 0, "packet %u to C", got);
            got++;
        }
    }
    cr_assert_eq(got, FLOW_PACKETS);
    int64_t v = -1;
    int rc = conf_varz_wait(&srv, "derp_sclient_write_timeouts", 1, 15000, &v);
    cr_assert_eq(rc, 0, "sclient_write_timeouts %lld", (long long)v);
    OK(conf_varz_wait(&srv, "derp_current_connections", 2, CONF_IO_TIMEOUT_MS, &v));
    OK(conf_raw_wait_closed(&b, 15000)); /* what was buffered, then EOF or RST */
    OK(conf_varz(&srv, "derp_packets_dropped", true, &v));
    cr_assert_gt(v, 0, "packets for the stalled receiver were dropped");
    /* §6.3: a full queue drops its oldest packet first (queue_head); what is still queued when
     * the receiver is closed goes as gone_disconnected. A single-threaded enqueue always finds
     * room after one head drop, so queue_tail stays 0 (derper needs it for its racing writer). */
    int64_t head = -1, gone = -1, tail = -1;
    OK(conf_varz(&srv, "derp_packets_dropped{reason=\"queue_head\",kind=\"other\"}", false, &head));
    OK(conf_varz(&srv, "derp_packets_dropped{reason=\"gone_disconnected\",kind=\"other\"}", false,
                 &gone));
    OK(conf_varz(&srv, "derp_packets_dropped{reason=\"queue_tail\",kind=\"other\"}", false, &tail));
    cr_assert_gt(head, 0, "no queue_head drops (%lld)", (long long)head);
    cr_assert_gt(gone, 0, "no gone_disconnected drops (%lld)", (long long)gone);
    cr_assert_eq(tail, 0, "queue_tail drops: %lld", (long long)tail);
    cr_assert_eq(head + gone + tail, v, "every drop has a reason");
    OK(conf_raw_ping_pong(&a, 1, CONF_IO_TIMEOUT_MS));
    OK(conf_raw_ping_pong(&c, 2, CONF_IO_TIMEOUT_MS));
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_raw_close(&c);
    cr_assert_eq(conf_server_stop(&srv), 0);
}
