/* test_derp_split.c - the incremental stream splitter: whole streams fed at once, one byte at a
 * time and in seeded random splits must yield the same frames; skipped payloads never stay
 * buffered; header-time rejection; NEED accounting; garbage never breaks it. Part of
 * test_derp_frame. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "derp_frame.h"
#include "derp_test_util.h"

#define STREAM_MAX (1 << 21)
#define FRAMES_MAX 64

struct seen {
    uint8_t type;
    uint32_t len;
    uint64_t sum; /* FNV-1a of the payload */
};

struct stream {
    uint8_t *bytes;
    size_t len;
    struct seen want[FRAMES_MAX]; /* frames that must be delivered, in order */
    size_t want_count;
    size_t skip_frames, skip_bytes, drop_frames;
};

/* What a connection layer does: append arriving bytes, split until NEED, keep the rest. */
struct sim {
    struct derp_splitter s;
    uint8_t *pending;
    size_t pending_len;
    struct seen got[FRAMES_MAX];
    size_t got_count;
    size_t skip_frames, skip_bytes, drop_frames;
    bool mesh_after_hello;
    int error;
};

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void add(struct stream *st, uint8_t type, const uint8_t *payload, uint32_t len, int expect)
{
    cr_assert(st->len + 5 + len <= STREAM_MAX);
    derp_frame_header_encode(st->bytes + st->len, 5, type, len);
    if (len)
        memcpy(st->bytes + st->len + 5, payload, len);
    st->len += 5 + len;
    if (expect == DERP_FRAME_DELIVER) {
        cr_assert(st->want_count < FRAMES_MAX);
        st->want[st->want_count++] = (struct seen){type, len, fnv(payload, len)};
    } else {
        st->skip_frames++;
        st->skip_bytes += 5 + len;
        st->drop_frames += expect == DERP_FRAME_DROP;
    }
}

static uint8_t *payload_pool(void)
{
    static uint8_t pool[300000];
    static bool filled;
    if (!filled) {
        uint64_t seed = 42;
        test_fill(&seed, pool, sizeof(pool));
        filled = true;
    }
    return pool;
}

static void build_server_stream(struct stream *st)
{
    const uint8_t *p = payload_pool();
    memset(st, 0, sizeof(*st));
    st->bytes = malloc(STREAM_MAX);
    add(st, DERP_FRAME_CLIENT_INFO, p, 104, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_NOTE_PREFERRED, (const uint8_t *)"\x01", 1, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_WATCH_CONNS, NULL, 0, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_SEND_PACKET, p + 1, 32, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_SEND_PACKET, p + 2, 32 + 1400, DERP_FRAME_DELIVER);
    add(st, 0x30, p + 3, 100000, DERP_FRAME_SKIP); /* §14 #13: unknown, large */
    add(st, DERP_FRAME_SEND_PACKET, p + 4, DERP_SEND_PACKET_LEN_MAX, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_PING, p + 5, 20, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_PONG, p + 6, 8, DERP_FRAME_SKIP);
    add(st, DERP_FRAME_KEEP_ALIVE, NULL, 0, DERP_FRAME_SKIP);
    add(st, DERP_FRAME_FORWARD_PACKET, p + 7, 64 + 500, DERP_FRAME_DELIVER);
    add(st, 0x7f, NULL, 0, DERP_FRAME_SKIP);
    add(st, DERP_FRAME_CLOSE_PEER, p + 8, 32, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_SERVER_KEY, p + 9, 40, DERP_FRAME_SKIP);
    add(st, DERP_FRAME_CLIENT_INFO, p + 10, 104, DERP_FRAME_SKIP); /* a second one: ignored */
    add(st, DERP_FRAME_SEND_PACKET, p + 11, 33, DERP_FRAME_DELIVER);
}

/* Fast-start client: no hello mode, the ServerKey is skipped. */
static void build_client_stream(struct stream *st, bool hello)
{
    const uint8_t *p = payload_pool();
    memset(st, 0, sizeof(*st));
    st->bytes = malloc(STREAM_MAX);
    uint8_t sk[40];
    memcpy(sk, DERP_MAGIC, 8);
    memcpy(sk + 8, p, 32);
    add(st, DERP_FRAME_SERVER_KEY, sk, 40, hello ? DERP_FRAME_DELIVER : DERP_FRAME_SKIP);
    add(st, DERP_FRAME_SERVER_INFO, p + 1, 53, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_RECV_PACKET, p + 2, 32 + 1400, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_KEEP_ALIVE, NULL, 0, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_PEER_GONE, p + 3, 33, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_PEER_PRESENT, p + 4, 51, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_PING, p + 5, 8, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_PING, p + 6, 4, DERP_FRAME_DROP);
    add(st, DERP_FRAME_HEALTH, p + 7, 1, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_RESTARTING, p + 8, 8, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_RECV_PACKET, p + 9, 31, DERP_FRAME_DROP);
    add(st, 0x42, p + 10, 200000, DERP_FRAME_SKIP);
    add(st, DERP_FRAME_SEND_PACKET, p + 11, 40, DERP_FRAME_SKIP);
    add(st, DERP_FRAME_RECV_PACKET, p + 12, 32 + 65536, DERP_FRAME_DELIVER);
    add(st, DERP_FRAME_PONG, p + 13, 8, DERP_FRAME_DELIVER);
}

static void sim_init(struct sim *sim, enum derp_reader_mode mode)
{
    memset(sim, 0, sizeof(*sim));
    derp_splitter_init(&sim->s, mode);
    sim->pending = malloc(STREAM_MAX);
    sim->mesh_after_hello = true;
}

static void sim_consume(struct sim *sim, size_t n)
{
    memmove(sim->pending, sim->pending + n, sim->pending_len - n);
    sim->pending_len -= n;
}

static void sim_feed(struct sim *sim, const uint8_t *chunk, size_t n)
{
    if (n)
        memcpy(sim->pending + sim->pending_len, chunk, n);
    sim->pending_len += n;
    for (;;) {
        struct derp_split r;
        int rc = derp_splitter_next(&sim->s, sim->pending, sim->pending_len, &r);
        if (rc < 0) {
            sim->error = rc;
            return;
        }
        if (r.kind == DERP_SPLIT_NEED) {
            cr_assert(r.need > 0 && r.consumed == 0);
            /* What stays buffered is a strict prefix of one frame, never a skipped payload. */
            cr_assert(sim->pending_len < derp_splitter_frame_size_max(&sim->s));
            cr_assert(sim->s.skip_left == 0 || sim->pending_len == 0);
            return;
        }
        if (r.kind == DERP_SPLIT_FRAME) {
            cr_assert(sim->got_count < FRAMES_MAX);
            cr_assert_eq(r.payload_offset, 5);
            cr_assert_eq(r.consumed, 5 + (size_t)r.len);
            sim->got[sim->got_count++] =
                (struct seen){r.type, r.len, fnv(sim->pending + r.payload_offset, r.len)};
            if (r.type == DERP_FRAME_CLIENT_INFO && sim->mesh_after_hello)
                derp_splitter_set_mesh(&sim->s, true); /* admission said: mesh peer */
        } else {
            cr_assert(r.consumed > 0 && r.header_known);
            sim->skip_frames += r.frame_start;
            sim->drop_frames += r.frame_start && r.dropped;
            sim->skip_bytes += r.consumed;
        }
        sim_consume(sim, r.consumed);
    }
}

static void sim_check(struct sim *sim, const struct stream *st)
{
    cr_assert_eq(sim->error, 0, "splitter error %d", sim->error);
    cr_assert_eq(sim->pending_len, 0, "%zu bytes left over", sim->pending_len);
    cr_assert_eq(sim->got_count, st->want_count);
    for (size_t i = 0; i < st->want_count; i++) {
        cr_assert_eq(sim->got[i].type, st->want[i].type, "frame %zu", i);
        cr_assert_eq(sim->got[i].len, st->want[i].len, "frame %zu", i);
        cr_assert_eq(sim->got[i].sum, st->want[i].sum, "frame %zu payload", i);
    }
    cr_assert_eq(sim->skip_frames, st->skip_frames);
    cr_assert_eq(sim->skip_bytes, st->skip_bytes);
    cr_assert_eq(sim->drop_frames, st->drop_frames);
}

static void sim_deinit(struct sim *sim)
{
    free(sim->pending);
}

/* Feeds st in chunks: chunk_max 0 = all at once, 1 = byte by byte, else random 1..chunk_max. */
static void run(const struct stream *st, enum derp_reader_mode mode, size_t chunk_max,
                uint64_t seed)
{
    struct sim sim;
    sim_init(&sim, mode);
    for (size_t off = 0; off < st->len;) {
        size_t n = st->len - off;
        if (chunk_max == 1)
            n = 1;
        else if (chunk_max > 1 && n > 1)
            n = 1 + (size_t)(test_rand(&seed) % (chunk_max < n ? chunk_max : n));
        sim_feed(&sim, st->bytes + off, n);
        off += n;
    }
    sim_feed(&sim, NULL, 0); /* nothing new: must stay NEED, not loop */
    sim_check(&sim, st);
    sim_deinit(&sim);
}

Test(derp_split, server_stream_whole_bytewise_random)
{
    struct stream st;
    build_server_stream(&st);
    run(&st, DERP_READER_SERVER_HELLO, 0, 0);
    run(&st, DERP_READER_SERVER_HELLO, 1, 0);
    for (uint64_t seed = 1; seed <= 20; seed++) {
        run(&st, DERP_READER_SERVER_HELLO, 7, seed);
        run(&st, DERP_READER_SERVER_HELLO, 1500, seed);
        run(&st, DERP_READER_SERVER_HELLO, 70000, seed);
    }
    free(st.bytes);
}

Test(derp_split, client_stream_whole_bytewise_random)
{
    struct stream st;
    for (int hello = 0; hello <= 1; hello++) {
        enum derp_reader_mode m = hello ? DERP_READER_CLIENT_HELLO : DERP_READER_CLIENT;
        build_client_stream(&st, hello);
        run(&st, m, 0, 0);
        run(&st, m, 1, 0);
        for (uint64_t seed = 100; seed < 110; seed++) {
            run(&st, m, 13, seed);
            run(&st, m, 4096, seed);
        }
        free(st.bytes);
    }
}

Test(derp_split, need_accounting)
{
    struct derp_splitter s;
    struct derp_split r;
    uint8_t buf[200] = {DERP_FRAME_SEND_PACKET, 0, 0, 0, 100};

    derp_splitter_init(&s, DERP_READER_SERVER);
    cr_assert_eq(derp_splitter_next(&s, buf, 0, &r), 0);
    cr_assert(r.kind == DERP_SPLIT_NEED && r.need == 5 && !r.header_known);
    cr_assert_eq(derp_splitter_next(&s, buf, 3, &r), 0);
    cr_assert(r.kind == DERP_SPLIT_NEED && r.need == 2);
    cr_assert_eq(derp_splitter_next(&s, buf, 15, &r), 0);
    cr_assert(r.kind == DERP_SPLIT_NEED && r.need == 90 && r.header_known);
    cr_assert(r.type == DERP_FRAME_SEND_PACKET && r.len == 100, "known early, for rate limits");
    cr_assert_eq(derp_splitter_next(&s, buf, 105, &r), 0);
    cr_assert(r.kind == DERP_SPLIT_FRAME && r.consumed == 105 && r.frame_start);
    cr_assert_eq(derp_splitter_next(&s, buf, 200, &r), 0, "extra bytes are the next frame");
    cr_assert(r.kind == DERP_SPLIT_FRAME && r.consumed == 105);
}

Test(derp_split, skip_streams_without_buffering)
{
    struct derp_splitter s;
    struct derp_split r;
    uint8_t buf[64] = {0x30, 0xFF, 0xFF, 0xFF, 0xFF}; /* unknown type, 4 GiB - 1 */

    derp_splitter_init(&s, DERP_READER_SERVER);
    cr_assert_eq(derp_splitter_next(&s, buf, 10, &r), 0);
    cr_assert(r.kind == DERP_SPLIT_SKIP && r.consumed == 10 && r.frame_start && !r.dropped);
    cr_assert(r.type == 0x30 && r.len == 0xFFFFFFFFu);
    cr_assert_eq(derp_splitter_next(&s, buf, 0, &r), 0);
    cr_assert(r.kind == DERP_SPLIT_NEED && r.need == 1, "skipping needs no buffered bytes");
    cr_assert_eq(derp_splitter_next(&s, buf, 64, &r), 0);
    cr_assert(r.kind == DERP_SPLIT_SKIP && r.consumed == 64 && !r.frame_start);
    cr_assert_eq(s.skip_left, 0xFFFFFFFFu - 5 - 64);
    cr_assert_eq(derp_splitter_frame_size_max(&s), DERP_SERVER_FRAME_SIZE_MAX);
}

Test(derp_split, header_time_rejection_is_sticky)
{
    struct derp_splitter s;
    struct derp_split r;
    uint8_t big[5] = {DERP_FRAME_SEND_PACKET, 0, 1, 0, 0x21}; /* 65569: one over */
    uint8_t ok[5] = {DERP_FRAME_KEEP_ALIVE, 0, 0, 0, 0};

    derp_splitter_init(&s, DERP_READER_SERVER);
    cr_assert_eq(derp_splitter_next(&s, big, 5, &r), -EMSGSIZE, "no payload needed to refuse");
    cr_assert_eq(derp_splitter_next(&s, ok, 5, &r), -EMSGSIZE, "sticky");

    derp_splitter_init(&s, DERP_READER_SERVER_HELLO);
    cr_assert_eq(derp_splitter_next(&s, ok, 5, &r), -EPROTO, "first frame must be ClientInfo");

    uint8_t fwd[5] = {DERP_FRAME_FORWARD_PACKET, 0, 0, 0, 64};
    derp_splitter_init(&s, DERP_READER_SERVER);
    cr_assert_eq(derp_splitter_next(&s, fwd, 5, &r), -EPERM, "not mesh: before the payload");
    derp_splitter_init(&s, DERP_READER_SERVER);
    derp_splitter_set_mesh(&s, true);
    cr_assert_eq(derp_splitter_next(&s, fwd, 5, &r), 0);
    cr_assert(r.kind == DERP_SPLIT_NEED && r.need == 64);

    uint8_t huge[5] = {0x42, 0, 0x10, 0, 1}; /* 1 MiB + 1 to a client */
    derp_splitter_init(&s, DERP_READER_CLIENT);
    cr_assert_eq(derp_splitter_next(&s, huge, 5, &r), -EMSGSIZE);
}

Test(derp_split, hello_modes_advance)
{
    struct derp_splitter s;
    struct derp_split r;
    uint8_t f[45];
    uint8_t key[32] = {1};

    derp_splitter_init(&s, DERP_READER_CLIENT_HELLO);
    cr_assert_eq(derp_splitter_frame_size_max(&s), 5 + 1024);
    derp_frame_server_key_encode(f, sizeof(f), key);
    cr_assert(derp_splitter_next(&s, f, 45, &r) == 0 && r.kind == DERP_SPLIT_FRAME);
    cr_assert_eq(s.mode, DERP_READER_CLIENT);
    cr_assert(derp_splitter_next(&s, f, 45, &r) == 0 && r.kind == DERP_SPLIT_SKIP,
              "a second ServerKey is skipped");
    cr_assert_eq(derp_splitter_frame_size_max(&s), DERP_CLIENT_FRAME_SIZE_MAX);

    derp_splitter_init(&s, DERP_READER_SERVER_HELLO);
    cr_assert_eq(derp_splitter_frame_size_max(&s), DERP_SERVER_HELLO_FRAME_SIZE_MAX);
    uint8_t ci[5 + 56] = {DERP_FRAME_CLIENT_INFO, 0, 0, 0, 56};
    cr_assert(derp_splitter_next(&s, ci, sizeof(ci), &r) == 0 && r.kind == DERP_SPLIT_FRAME);
    cr_assert_eq(s.mode, DERP_READER_SERVER);
}

/* Random garbage in random modes and chunks: errors are fine, crashes and over-buffering not. */
Test(derp_split, garbage_never_breaks_it)
{
    static uint8_t junk[1 << 16];
    uint64_t seed = 7;
    for (int round = 0; round < 200; round++) {
        test_fill(&seed, junk, sizeof(junk));
        /* Small lengths so that frames complete now and then. */
        for (size_t i = 1; i + 4 < sizeof(junk); i += 97)
            junk[i] = junk[i + 1] = junk[i + 2] = 0;
        struct sim sim;
        sim_init(&sim, (enum derp_reader_mode)(round % 4));
        sim.mesh_after_hello = round & 1;
        for (size_t off = 0; off < sizeof(junk) && !sim.error;) {
            size_t n = 1 + (size_t)(test_rand(&seed) % 3000);
            if (n > sizeof(junk) - off)
                n = sizeof(junk) - off;
            sim_feed(&sim, junk + off, n);
            off += n;
        }
        cr_assert(sim.error == 0 || sim.error == -EPROTO || sim.error == -EMSGSIZE ||
                  sim.error == -EPERM);
        sim_deinit(&sim);
    }
}
