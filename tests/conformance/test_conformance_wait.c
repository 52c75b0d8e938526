/* test_conformance_wait.c - senders wait for a backed-up receiver (--sender-wait, issue 25
 * item 4) against a real hderp-server: a client streaming to a receiver that is behind stops
 * being read, so TCP holds it back and nothing is dropped; the wait is bounded (a receiver that
 * never reads costs its sender a bounded wait, then derper's drop-oldest); a sender that spreads
 * its packets is never paused (test_conformance_stall); --sender-wait 0 is derper's policy.
 * Raw blocking clients; the streaming sender writes from a thread of its own. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
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

TestSuite(test_conformance_wait, .fini = down, .timeout = 180);

/* Big packets, many times what the receiver's socket buffers, the relay's send queue and the
 * two 32-packet queues hold together (loopback buffers are a few MB at most). */
#define STREAM_PACKETS 600u
#define PACKET_LEN     (32u * 1024u)

struct streamer {
    struct conf_raw *r;
    const struct derp_pubkey *dst;
    unsigned sent;
    int rc;
    atomic_bool done;
};

/* Packet i carries i in its first four bytes and i's low byte elsewhere. */
static void fill_packet(uint8_t *p, unsigned i)
{
    memset(p, (int)(i & 0xff), PACKET_LEN);
    memcpy(p, &i, sizeof(i));
}

static void *stream_main(void *arg)
{
    struct streamer *st = arg;
    static uint8_t pkt[PACKET_LEN];
    for (st->sent = 0; st->sent < STREAM_PACKETS; st->sent++) {
        fill_packet(pkt, st->sent);
        st->rc = conf_raw_send_packet(st->r, st->dst, pkt, sizeof(pkt));
        if (st->rc < 0)
            break;
    }
    atomic_store(&st->done, true);
    return NULL;
}

/* The sender's writes block while it waits: let them (the test's own bounded waits decide). */
static void long_send_timeout(struct conf_raw *r)
{
    struct timeval tv = {120, 0};
    setsockopt(r->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int64_t varz_sum(const char *name)
{
    int64_t v = -1;
    OK(conf_varz(&srv, name, true, &v));
    return v;
}

/* Polls until counter name is at least want (conf_varz_wait wants it exact): 0 or -ETIMEDOUT. */
static int varz_wait_at_least(const char *name, int64_t want, int timeout_ms, int64_t *last)
{
    int64_t deadline = conf_now_ms() + timeout_ms;
    do {
        if (conf_varz(&srv, name, true, last) == 0 && *last >= want)
            return 0;
        conf_sleep_ms(20);
    } while (conf_now_ms() < deadline);
    return -ETIMEDOUT;
}

/* A streams to B, which reads nothing until the relay has paused A; then B reads everything:
 * every packet, in order, none dropped. Under derper's policy the relay reads A at full speed
 * and drops the oldest of B's queue. */
static void stream_to_a_late_reader(unsigned shards)
{
    const char *extra[] = {"--sender-wait", "10s", "--hash-key", CONF_HASH_KEY_HEX, NULL};
    OK(conf_server_start(&srv, &(struct conf_server_opts){.shards = shards, .extra = extra}));
    struct conf_raw a, b;
    struct derp_keypair ka, kb;
    conf_login_on_shard(&a, &srv, &ka, 0, shards);
    conf_login_on_shard(&b, &srv, &kb, 0, shards);
    long_send_timeout(&a);
    struct streamer st = {.r = &a, .dst = &b.kp.pub};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, stream_main, &st), 0);
    /* B reads once the relay paused A (or A wrote everything: derper's policy reads it all) */
    int64_t waits = -1, deadline = conf_now_ms() + 60000;
    int rc = -ETIMEDOUT;
    while (conf_now_ms() < deadline) {
        if (atomic_load(&st.done) ||
            (conf_varz(&srv, "hderp_sender_waits", true, &waits) == 0 && waits >= 1)) {
            rc = 0;
            break;
        }
        conf_sleep_ms(20);
    }
    static uint8_t want[PACKET_LEN];
    unsigned got = 0;
    while (rc == 0 && got < STREAM_PACKETS) {
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        rc = conf_raw_read_packet(&b, 30000, &src, &data, &len);
        if (rc < 0)
            break;
        fill_packet(want, got);
        cr_assert(derp_pubkey_equal(&src, &a.kp.pub));
        cr_assert(len == PACKET_LEN && memcmp(data, want, len) == 0, "packet %u out of order", got);
        got++;
    }
    pthread_join(t, NULL);
    cr_assert_eq(rc, 0, "hderp_sender_waits %lld, packets read %u of %u: %s", (long long)waits, got,
                 STREAM_PACKETS, strerror(-rc));
    cr_assert_eq(st.rc, 0, "the sender's write failed after %u packets", st.sent);
    cr_assert_eq(varz_sum("derp_packets_dropped"), 0, "packets were dropped");
    cr_assert_gt(varz_sum("hderp_sender_waits"), 0);
    cr_assert_eq(varz_sum("hderp_sender_wait_timeouts"), 0);
    OK(conf_raw_ping_pong(&a, 1, CONF_IO_TIMEOUT_MS));
    OK(conf_raw_ping_pong(&b, 2, CONF_IO_TIMEOUT_MS));
    conf_raw_close(&a);
    conf_raw_close(&b);
    cr_assert_eq(conf_server_stop(&srv), 0);
}

Test(test_conformance_wait, stream_to_a_late_reader_loses_nothing)
{
    stream_to_a_late_reader(1);
}

/* Two shards, both keys owned by shard 0: the same on a shard that is not the only one. */
Test(test_conformance_wait, stream_to_a_late_reader_on_two_shards)
{
    stream_to_a_late_reader(2);
}

/* B never reads: A's waits run out (each at most --sender-wait), A is read again between them
 * and gets its Pong, B's packets are dropped as derper drops them. */
Test(test_conformance_wait, a_receiver_that_never_reads_costs_a_bounded_wait)
{
    const char *extra[] = {"--sender-wait", "200ms", NULL};
    OK(conf_server_start(&srv, &(struct conf_server_opts){.shards = 1, .extra = extra}));
    struct conf_raw a, b;
    OK(conf_raw_login(&a, &srv, NULL, NULL));
    OK(conf_raw_login(&b, &srv, NULL, NULL));
    long_send_timeout(&a);
    struct streamer st = {.r = &a, .dst = &b.kp.pub};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, stream_main, &st), 0);
    pthread_join(t, NULL);
    cr_assert_eq(st.rc, 0, "the sender's write failed after %u packets", st.sent);
    int64_t v = -1;
    OK(varz_wait_at_least("hderp_sender_wait_timeouts", 1, 60000, &v));
    OK(conf_raw_ping_pong(&a, 1, 60000));
    cr_assert_gt(varz_sum("derp_packets_dropped"), 0, "B's queue overflowed: drops");
    conf_raw_close(&a);
    conf_raw_close(&b);
    cr_assert_eq(conf_server_stop(&srv), 0);
}

/* --sender-wait 0: derper's policy, the sender is never paused. */
Test(test_conformance_wait, zero_is_derpers_policy)
{
    const char *extra[] = {"--sender-wait", "0", NULL};
    OK(conf_server_start(&srv, &(struct conf_server_opts){.shards = 1, .extra = extra}));
    struct conf_raw a, b;
    OK(conf_raw_login(&a, &srv, NULL, NULL));
    OK(conf_raw_login(&b, &srv, NULL, NULL));
    struct streamer st = {.r = &a, .dst = &b.kp.pub};
    stream_main(&st); /* never blocks for long: the relay reads A whatever B does */
    cr_assert_eq(st.rc, 0, "the sender's write failed after %u packets", st.sent);
    OK(conf_raw_ping_pong(&a, 1, CONF_IO_TIMEOUT_MS));
    cr_assert_eq(varz_sum("hderp_sender_waits"), 0);
    cr_assert_gt(varz_sum("derp_packets_dropped"), 0, "B's queue overflowed: drops");
    conf_raw_close(&a);
    conf_raw_close(&b);
    cr_assert_eq(conf_server_stop(&srv), 0);
}
