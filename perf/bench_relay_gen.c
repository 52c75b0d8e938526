/* bench_relay_gen.c - hderp-bench's load generator: K pairs of DERP clients (a sender
 * and a receiver, two connections) on the generator's shards, a token bucket per sender topped
 * up on every 1 ms tick of its shard, and per-pair accounting of what arrived (sequence window
 * for duplicates and reordering, a checksum over the whole payload, routing by pair id and
 * source key, one-way latency). After the window each sender sends trailers carrying its
 * window's sequence range, so a receiver in another process (pair files) can count the loss.
 *
 * Threads: bench_run_init/execute/deinit on the main thread; everything else on the shard that
 * owns the pair (local pair i lives on shard i % shards). Cross-shard state is four atomics in
 * struct bench_run (who is ready, when the warm-up started, who drained, the first failure) and
 * the progress line's relaxed per-shard totals (written by their shard, read by shard 0).
 * Shard 0 also samples getrusage and /proc at the window edges (bench_sample.c).
 * Owns: the pairs' buffers and bitmaps (heap, allocated before the runtime starts). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_relay_impl.h"

enum bench_phase { BENCH_CONNECT, BENCH_WARMUP, BENCH_MEASURE, BENCH_DRAIN, BENCH_DONE };

struct bench_gen_shard {
    struct bench_run *r;
    struct hd_shard *s;
    struct hd_timer tick;
    enum bench_phase phase;
    bool measuring, stopping;
    uint64_t start_ns, drain_start_ns, last_tick_ns;
    uint64_t progress_pub_ns, progress_print_ns;     /* last publish / print */
    uint64_t progress_sent_bytes, progress_rx_bytes; /* shard 0: totals at the last print */
    double bytes_per_ns;                             /* per sender */
    double bucket_bytes;
};

/* ---- Set-up (main thread) -------------------------------------------------------------------- */

/* Local pair number index: the pair file's spec, or a fresh pair with both sides here. */
static int pair_init(struct bench_run *r, struct bench_pair *p, unsigned index)
{
    const struct bench_pair_spec *spec = r->cfg.specs ? &r->cfg.specs[index] : NULL;
    p->id = spec ? spec->id : index;
    p->has_tx = spec ? spec->has_tx : true;
    p->has_rx = spec ? spec->has_rx : true;
    p->shard = index % r->cfg.shards;
    p->tx.pair = p;
    p->rx.pair = p;
    if (spec) {
        p->sender_kp = spec->sender_kp;
        p->receiver_kp = spec->receiver_kp;
    } else if (derp_keypair_generate(&p->sender_kp) < 0 ||
               derp_keypair_generate(&p->receiver_kp) < 0) {
        return -EIO;
    }
    p->tx.buf = malloc(r->cfg.size);
    p->rx.seen = calloc(BENCH_SEQ_WINDOW / 64, sizeof(uint64_t));
    if (p->tx.buf == NULL || p->rx.seen == NULL)
        return -ENOMEM;
    /* Filler: xorshift64 seeded by the pair, so pairs' payloads differ. */
    uint64_t x = 0x9e3779b97f4a7c15ull * (p->id + 1);
    for (unsigned i = BENCH_HDR_LEN; i < r->cfg.size; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p->tx.buf[i] = (uint8_t)x;
    }
    memset(p->tx.buf, 0, BENCH_HDR_LEN);
    p->tx.body_hash =
        bench_hash_bytes(BENCH_FNV_OFFSET, p->tx.buf + BENCH_HDR_LEN, r->cfg.size - BENCH_HDR_LEN);
    hd_hist_init(&p->rx.latency_ns);
    return 0;
}

int bench_run_init(struct bench_run *r)
{
    if (derp_crypto_init() < 0)
        return -EIO;
    r->pairs = calloc(r->cfg.pairs_count, sizeof(*r->pairs));
    if (r->pairs == NULL)
        return -ENOMEM;
    for (unsigned i = 0; i < r->cfg.pairs_count; i++) {
        int rc = pair_init(r, &r->pairs[i], i);
        if (rc < 0)
            return rc;
    }
    r->idle_count = r->cfg.peers_count - r->cfg.sides_count;
    if (r->cfg.client_load) {
        int rc = bench_client_init(r);
        if (rc < 0)
            return rc;
    }
    if (r->cfg.latency) {
        int rc = bench_latency_init(r);
        if (rc < 0)
            return rc;
    }
    r->idle = r->idle_count ? calloc(r->idle_count, sizeof(*r->idle)) : NULL;
    if (r->idle_count && r->idle == NULL)
        return -ENOMEM;
    for (unsigned i = 0; i < r->idle_count; i++) {
        r->idle[i].id = i;
        r->idle[i].shard = i % r->cfg.shards;
        if (derp_keypair_generate(&r->idle[i].kp) < 0)
            return -EIO;
    }
    return 0;
}

void bench_run_deinit(struct bench_run *r)
{
    if (r->clients)
        bench_client_deinit(r);
    for (unsigned i = 0; r->pairs && i < r->cfg.pairs_count; i++) {
        free(r->pairs[i].tx.buf);
        free(r->pairs[i].rx.seen);
    }
    free(r->pairs);
    r->pairs = NULL;
    free(r->idle);
    r->idle = NULL;
    free(r->cfg.specs);
    r->cfg.specs = NULL;
    if (r->cfg.latency)
        bench_latency_deinit(r);
}

uint64_t bench_rx_expected(const struct bench_pair *p)
{
    const struct bench_receiver *rx = &p->rx;
    if (!p->has_rx)
        return 0; /* the receiver runs elsewhere: it counts */
    if (rx->trailer)
        return rx->expected;
    if (p->has_tx) /* no trailer came, but the sender is here: its own count */
        return p->tx.sent;
    return rx->meas_any ? rx->meas_seq_max - rx->meas_seq_min + 1 : 0;
}

double bench_unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Monotonic time of the warm-up's start, once every peer is logged in at monotonic now: now,
 * or --start-at T mapped onto the monotonic clock when T is still ahead. */
static uint64_t start_ns(const struct bench_run *r, uint64_t now)
{
    if (r->cfg.start_at <= 0)
        return now;
    double ahead = r->cfg.start_at - bench_unix_now();
    return ahead > 0 ? now + (uint64_t)(ahead * 1e9) : now;
}

/* ---- Failure and sampling -------------------------------------------------------------------- */

void bench_fail(struct bench_run *r, struct hd_shard *s, unsigned who, int reason)
{
    int none = 0;
    if (atomic_compare_exchange_strong(&r->failure, &none, reason < 0 ? reason : -EPIPE))
        atomic_store(&r->failed_pair, who);
    hd_runtime_stop(hd_shard_runtime(s));
}

static void fail(struct bench_gen_shard *sh, unsigned pair, int reason)
{
    bench_fail(sh->r, sh->s, pair, reason);
}

/* One side's client closed because the length policy refused a frame header: name it. */
static void print_refused(const char *side, const struct derp_client_stats *st)
{
    if (!st->refused)
        return;
    fprintf(stderr,
            "hderp-bench:   the %s's client refused a frame header at DERP stream byte %llu: "
            "type 0x%02x (%s), length %u (%s; no reference relay sends a frame over 64 KiB + "
            "keys, so a length like this is bytes from inside another frame: the relay's stream "
            "lost its frame boundaries, e.g. a short write followed by another frame); %llu "
            "frames before it, the last %s of %u bytes\n",
            side, (unsigned long long)st->refused_at, st->refused_type,
            derp_frame_type_name(st->refused_type), st->refused_len,
            st->refused_len > DERP_CLIENT_RECV_FRAME_LEN_MAX
                ? "over the client's 1 MiB limit, DERP_CLIENT_RECV_FRAME_LEN_MAX"
                : "under the type's minimum or not allowed",
            (unsigned long long)st->frames_in, derp_frame_type_name(st->last_type), st->last_len);
}

void bench_print_failure(const struct bench_run *r, int rc)
{
    unsigned who = atomic_load(&r->failed_pair);
    fprintf(stderr, "hderp-bench: the run failed (pair %u): %s\n", who, strerror(-rc));
    for (unsigned i = 0; r->pairs && i < r->cfg.pairs_count; i++) {
        const struct bench_pair *p = &r->pairs[i];
        if (p->id != who)
            continue;
        if (p->tx.closed)
            print_refused("sender", &p->tx.close_stats);
        if (p->rx.closed)
            print_refused("receiver", &p->rx.close_stats);
    }
}

unsigned bench_clients_count(const struct bench_run *r)
{
    return r->cfg.peers_count + (r->cfg.latency ? 2 : 0);
}

/* ---- Sending --------------------------------------------------------------------------------- */

static int send_one(struct bench_gen_shard *sh, struct bench_sender *tx, uint64_t now)
{
    const unsigned size = sh->r->cfg.size;
    bench_payload_stamp(tx, tx->seq, now, sh->measuring ? BENCH_F_MEASURED : 0);
    int rc = derp_client_send(tx->k, &tx->pair->receiver_kp.pub, tx->buf, size);
    if (rc < 0) {
        tx->full += sh->measuring;
        return rc;
    }
    tx->seq++;
    tx->sent_total++;
    if (sh->measuring) {
        tx->sent++;
        tx->sent_bytes += size;
    }
    return 0;
}

/* After the window: the sender's window [first_seq, end_seq) in a trailer packet (same size and
 * checksum as the others) every BENCH_TRAILER_GAP_MS. A full queue just delays it a tick. */
static void send_trailer(struct bench_gen_shard *sh, struct bench_sender *tx, uint64_t now)
{
    const struct bench_pair *p = tx->pair;
    if (tx->done || tx->k == NULL || derp_client_state(tx->k) != DERP_CLIENT_READY)
        return;
    if ((p->has_rx && p->rx.trailer) || tx->trailers_sent == BENCH_TRAILERS) {
        tx->done = true;
        return;
    }
    if (tx->trailers_sent && now - tx->trailer_last_ns < BENCH_TRAILER_GAP_MS * 1000000ull)
        return;
    bench_payload_stamp(tx, tx->end_seq, tx->first_seq, BENCH_F_TRAILER);
    if (derp_client_send(tx->k, &p->receiver_kp.pub, tx->buf, sh->r->cfg.size) == 0) {
        tx->trailers_sent++;
        tx->trailer_last_ns = now;
    }
}

/* One tick's worth: paced senders spend the tokens earned since the last tick; unpaced ones
 * fill their queue to the high watermark (the callback resumes them below it). */
static void pump(struct bench_gen_shard *sh, struct bench_sender *tx, uint64_t now)
{
    if (tx->k == NULL || derp_client_state(tx->k) != DERP_CLIENT_READY)
        return;
    const double size = sh->r->cfg.size;
    if (sh->bytes_per_ns == 0) {
        for (unsigned i = 0; i < BENCH_FILL_MAX && !tx->paused; i++)
            if (send_one(sh, tx, now) < 0)
                break;
        return;
    }
    tx->tokens += (double)(now - tx->last_ns) * sh->bytes_per_ns;
    tx->last_ns = now;
    /* Room for one packet on top of the bucket: a rate below one packet per tick would
     * otherwise forfeit the remainder whenever a tick comes late. */
    double cap = sh->bucket_bytes + size;
    if (tx->tokens > cap) {
        if (sh->measuring)
            tx->forfeited_bytes += (uint64_t)(tx->tokens - cap);
        tx->tokens = cap;
    }
    while (tx->tokens >= size && send_one(sh, tx, now) == 0)
        tx->tokens -= size;
}

/* ---- Receiving ------------------------------------------------------------------------------- */

static bool test_and_set(uint64_t *bits, uint64_t seq)
{
    uint64_t i = seq & (BENCH_SEQ_WINDOW - 1), m = 1ull << (i & 63);
    bool was = bits[i >> 6] & m;
    bits[i >> 6] |= m;
    return was;
}

/* Track seq in the window; returns false for a duplicate. *late: arrived after a higher one. */
static bool seq_note(struct bench_receiver *rx, uint64_t seq, bool *late)
{
    *late = false;
    if (!rx->any || seq > rx->seq_max) {
        uint64_t gap = rx->any ? seq - rx->seq_max : BENCH_SEQ_WINDOW;
        if (gap >= BENCH_SEQ_WINDOW)
            memset(rx->seen, 0, BENCH_SEQ_WINDOW / 8);
        else
            for (uint64_t x = rx->seq_max + 1; x < seq; x++) /* lost so far: clear their bits */
                rx->seen[(x & (BENCH_SEQ_WINDOW - 1)) >> 6] &= ~(1ull << (x & 63));
        rx->seen[(seq & (BENCH_SEQ_WINDOW - 1)) >> 6] &= ~(1ull << (seq & 63));
        rx->any = true;
        rx->seq_max = seq;
        test_and_set(rx->seen, seq);
        return true;
    }
    *late = true;
    if (rx->seq_max - seq >= BENCH_SEQ_WINDOW)
        return true; /* too old to tell: counted as reordered, not as a duplicate */
    return !test_and_set(rx->seen, seq);
}

static void rx_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                      size_t len)
{
    struct bench_receiver *rx = derp_client_user(k);
    struct bench_pair *p = rx->pair;
    struct bench_gen_shard *sh = p->home;
    uint64_t now = hd_clock_ns();
    rx->last_rx_ns = now;
    if (!bench_payload_check(data, len)) {
        rx->corrupt++;
        return;
    }
    uint32_t flags = bench_get32(data + 24);
    bool measured = flags & BENCH_F_MEASURED;
    if (bench_get32(data + 4) != p->id || !derp_pubkey_equal(src, &p->sender_kp.pub)) {
        rx->misrouted += measured;
        return;
    }
    uint64_t seq = bench_get64(data + 8);
    if (flags & BENCH_F_TRAILER) {
        uint64_t first = bench_get64(data + 16);
        rx->trailer = true;
        rx->expected = seq >= first ? seq - first : 0;
        return;
    }
    if (!rx->any || seq < rx->seq_first)
        rx->seq_first = seq;
    if (measured) {
        if (!rx->meas_any || seq < rx->meas_seq_min)
            rx->meas_seq_min = seq;
        if (!rx->meas_any || seq > rx->meas_seq_max)
            rx->meas_seq_max = seq;
        rx->meas_any = true;
    }
    bool late;
    bool fresh = seq_note(rx, seq, &late);
    if (measured) {
        rx->duplicated += !fresh;
        rx->reordered += fresh && late;
    }
    if (!fresh)
        return;
    rx->received_total++;
    rx->received_total_bytes += len;
    if (measured) {
        rx->received++;
        rx->received_bytes += len;
        hd_hist_record(&rx->latency_ns, now - bench_get64(data + 16));
    }
    if (sh->measuring) {
        rx->window_bytes += len;
        rx->window_packets++;
    }
}

/* ---- Client callbacks ------------------------------------------------------------------------ */

static void tx_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    struct bench_sender *tx = derp_client_user(k);
    atomic_fetch_add(&tx->pair->home->r->ready_count, 1);
}

static void rx_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    struct bench_receiver *rx = derp_client_user(k);
    atomic_fetch_add(&rx->pair->home->r->ready_count, 1);
}

static void tx_pressure(struct derp_client *k, bool paused)
{
    struct bench_sender *tx = derp_client_user(k);
    struct bench_gen_shard *sh = tx->pair->home;
    tx->paused = paused;
    if (!paused && sh->bytes_per_ns == 0 &&
        (sh->phase == BENCH_WARMUP || sh->phase == BENCH_MEASURE))
        pump(sh, tx, hd_clock_ns());
}

static void closed(struct bench_pair *p, int reason)
{
    if (!p->home->stopping)
        fail(p->home, p->id, reason);
}

static void tx_close(struct derp_client *k, int reason)
{
    struct bench_sender *tx = derp_client_user(k);
    tx->close_stats = *derp_client_stats(k);
    tx->closed = true;
    tx->k = NULL;
    closed(tx->pair, reason);
}

static void rx_close(struct derp_client *k, int reason)
{
    struct bench_receiver *rx = derp_client_user(k);
    rx->close_stats = *derp_client_stats(k);
    rx->closed = true;
    rx->k = NULL;
    closed(rx->pair, reason);
}

static const struct derp_client_callbacks tx_cb = {
    .on_ready = tx_ready, .on_send_pressure = tx_pressure, .on_close = tx_close};
static const struct derp_client_callbacks rx_cb = {
    .on_ready = rx_ready, .on_packet = rx_packet, .on_close = rx_close};

static void idle_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    struct bench_idle *d = derp_client_user(k);
    atomic_fetch_add(&d->home->r->ready_count, 1);
}

/* An idle peer closing before the run ends is a failure like any other client's. */
static void idle_close(struct derp_client *k, int reason)
{
    struct bench_idle *d = derp_client_user(k);
    d->k = NULL;
    if (!d->home->stopping)
        fail(d->home, d->home->r->cfg.pairs_count + d->id, reason);
}

static const struct derp_client_callbacks idle_cb = {.on_ready = idle_ready,
                                                     .on_close = idle_close};

/* ---- Progress line ------------------------------------------------------------------------- */

/* This shard's running totals (every packet since the warm-up; lost = sequence gaps so far). */
static void progress_publish(struct bench_gen_shard *sh)
{
    const struct bench_run *r = sh->r;
    uint64_t tx = 0, rxb = 0, lost = 0;
    for (unsigned i = 0; i < r->cfg.pairs_count; i++) {
        const struct bench_pair *p = &r->pairs[i];
        if (p->home != sh)
            continue;
        tx += r->clients ? 0 : p->tx.sent_total * r->cfg.size;
        rxb += p->rx.received_total_bytes;
        uint64_t span = p->rx.any ? p->rx.seq_max + 1 - p->rx.seq_first : 0;
        lost += span > p->rx.received_total ? span - p->rx.received_total : 0;
    }
    if (r->clients && hd_shard_id(sh->s) == 0)
        tx = atomic_load_explicit(&r->client_sent_bytes, memory_order_relaxed);
    struct bench_progress *pr = &sh->r->progress[hd_shard_id(sh->s)];
    atomic_store_explicit(&pr->sent_bytes, tx, memory_order_relaxed);
    atomic_store_explicit(&pr->received_bytes, rxb, memory_order_relaxed);
    atomic_store_explicit(&pr->lost, lost, memory_order_relaxed);
}

/* Shard 0, once a second on a terminal: one line overwritten in place (a blocking write of a
 * few dozen bytes to the terminal once a second: fine for a load generator). */
static void progress_print(struct bench_gen_shard *sh, uint64_t now)
{
    struct bench_run *r = sh->r;
    uint64_t tx = 0, rxb = 0, lost = 0, t0 = atomic_load(&r->t0_ns);
    for (unsigned i = 0; i < r->cfg.shards; i++) {
        tx += atomic_load_explicit(&r->progress[i].sent_bytes, memory_order_relaxed);
        rxb += atomic_load_explicit(&r->progress[i].received_bytes, memory_order_relaxed);
        lost += atomic_load_explicit(&r->progress[i].lost, memory_order_relaxed);
    }
    double dt = (double)(now - sh->progress_print_ns) / 1e9;
    static const char *const names[] = {"logging in", "warm-up", "measuring", "draining", "done"};
    if (sh->phase == BENCH_CONNECT)
        fprintf(stderr, "\rhderp-bench: %s: %u of %u peers ready\033[K",
                t0 ? "waiting for --start-at" : "logging in", atomic_load(&r->ready_count),
                bench_clients_count(r));
    else
        fprintf(stderr,
                "\rhderp-bench: %6.1f s %-10s sent %8.1f Mbit/s  received %8.1f Mbit/s  "
                "lost %llu\033[K",
                (double)(now - t0) / 1e9, names[sh->phase],
                (double)(tx - sh->progress_sent_bytes) * 8 / dt / 1e6,
                (double)(rxb - sh->progress_rx_bytes) * 8 / dt / 1e6, (unsigned long long)lost);
    fflush(stderr);
    r->progress_printed = true;
    sh->progress_sent_bytes = tx;
    sh->progress_rx_bytes = rxb;
    sh->progress_print_ns = now;
}

static void progress_tick(struct bench_gen_shard *sh, uint64_t now)
{
    if (now - sh->progress_pub_ns >= BENCH_PROGRESS_PUBLISH_MS * 1000000ull) {
        progress_publish(sh);
        sh->progress_pub_ns = now;
    }
    if (hd_shard_id(sh->s) == 0 &&
        now - sh->progress_print_ns >= BENCH_PROGRESS_PRINT_MS * 1000000ull)
        progress_print(sh, now);
}

/* ---- The tick -------------------------------------------------------------------------------- */

static enum bench_phase phase_at(const struct bench_run *r, uint64_t now)
{
    uint64_t t0 = atomic_load(&r->t0_ns);
    uint64_t warm = (uint64_t)(r->cfg.warmup_s * 1e9), dur = (uint64_t)(r->cfg.duration_s * 1e9);
    if (t0 == 0 || now < t0)
        return BENCH_CONNECT;
    if (now < t0 + warm)
        return BENCH_WARMUP;
    return now < t0 + warm + dur ? BENCH_MEASURE : BENCH_DRAIN;
}

static void enter_phase(struct bench_gen_shard *sh, enum bench_phase p, uint64_t now)
{
    struct bench_run *r = sh->r;
    bool sampler = hd_shard_id(sh->s) == 0;
    sh->phase = p;
    bool own_tx = !r->cfg.client_load; /* client-like senders keep their own books */
    if (p == BENCH_WARMUP) {
        for (unsigned i = 0; own_tx && i < r->cfg.pairs_count; i++)
            if (r->pairs[i].home == sh)
                r->pairs[i].tx.last_ns = now;
    } else if (p == BENCH_MEASURE) {
        sh->measuring = true;
        for (unsigned i = 0; own_tx && i < r->cfg.pairs_count; i++)
            if (r->pairs[i].home == sh)
                r->pairs[i].tx.first_seq = r->pairs[i].tx.seq;
        if (sampler) {
            r->gen_start = bench_proc_sample(0);
            if (r->cfg.relay_syscalls)
                bench_syscalls_open(r);
            bench_relay_sample(r, &r->relay_start, &r->relay_core_start_s);
            r->window_start_ns = hd_clock_ns();
            r->window_start_unix = bench_unix_now();
            if (r->cfg.latency)
                bench_latency_window(r, true);
        }
    } else if (p == BENCH_DRAIN) {
        sh->measuring = false;
        sh->drain_start_ns = now;
        for (unsigned i = 0; own_tx && i < r->cfg.pairs_count; i++)
            if (r->pairs[i].home == sh) {
                r->pairs[i].tx.end_seq = r->pairs[i].tx.seq;
                r->pairs[i].tx.done = !r->pairs[i].has_tx;
            }
        if (sampler) {
            r->window_end_ns = hd_clock_ns();
            if (r->cfg.latency)
                bench_latency_window(r, false);
            r->gen_end = bench_proc_sample(0);
            bench_relay_sample(r, &r->relay_end, &r->relay_core_end_s);
            if (r->cfg.relay_syscalls)
                bench_syscalls_close(r);
        }
    }
}

/* Drained: this shard's senders sent their trailers and its receivers got theirs (the relay
 * keeps a pair's order, so nothing measured is still on its way), or the drain bound passed. */
static bool drained(struct bench_gen_shard *sh, uint64_t now)
{
    if (now - sh->drain_start_ns > BENCH_DRAIN_MAX_MS * 1000000ull)
        return true;
    if (hd_shard_id(sh->s) == 0 && !bench_latency_drained(sh->r))
        return false;
    for (unsigned i = 0; i < sh->r->cfg.pairs_count; i++) {
        const struct bench_pair *p = &sh->r->pairs[i];
        bool tx_done = sh->r->clients ? bench_client_done(sh->r, p) : p->tx.done;
        if (p->home == sh && ((p->has_tx && !tx_done) || (p->has_rx && !p->rx.trailer)))
            return false;
    }
    return true;
}

static void tick_fired(struct hd_timer *t)
{
    struct bench_gen_shard *sh = hd_container_of(t, struct bench_gen_shard, tick);
    struct bench_run *r = sh->r;
    uint64_t now = hd_clock_ns();
    if (sh->stopping || atomic_load(&r->failure) < 0) {
        if (!sh->stopping) /* a client-like sender's thread failed: it cannot stop us itself */
            hd_runtime_stop(hd_shard_runtime(sh->s));
        return;
    }
    if (sh->phase == BENCH_CONNECT) {
        uint64_t zero = 0;
        if (atomic_load(&r->ready_count) == bench_clients_count(r))
            atomic_compare_exchange_strong(&r->t0_ns, &zero, start_ns(r, now));
        else if (now - sh->start_ns > BENCH_LOGIN_WAIT_MS * 1000000ull) {
            fail(sh, 0, -ETIMEDOUT);
            return;
        }
    }
    for (enum bench_phase p = phase_at(r, now); sh->phase < p;)
        enter_phase(sh, (enum bench_phase)(sh->phase + 1), now);
    if (sh->measuring && sh->last_tick_ns)
        hd_hist_record(&r->tick_gap_ns[hd_shard_id(sh->s)], now - sh->last_tick_ns);
    if (r->cfg.progress)
        progress_tick(sh, now);
    sh->last_tick_ns = now;
    if (sh->phase == BENCH_WARMUP || sh->phase == BENCH_MEASURE) {
        for (unsigned i = 0; i < r->cfg.pairs_count; i++)
            if (r->pairs[i].home == sh && r->pairs[i].has_tx)
                pump(sh, &r->pairs[i].tx, now);
        if (r->cfg.latency && hd_shard_id(sh->s) == 0)
            bench_latency_pump(r, now);
    } else if (sh->phase == BENCH_DRAIN) {
        for (unsigned i = 0; i < r->cfg.pairs_count; i++)
            if (r->pairs[i].home == sh && r->pairs[i].has_tx)
                send_trailer(sh, &r->pairs[i].tx, now);
    }
    if (sh->phase == BENCH_DRAIN && drained(sh, now)) {
        sh->phase = BENCH_DONE;
        if (atomic_fetch_add(&r->shards_done, 1) + 1 == r->cfg.shards)
            hd_runtime_stop(hd_shard_runtime(sh->s));
        return;
    }
    hd_timer_start(sh->s, &sh->tick, BENCH_TICK_MS);
}

/* ---- The module ------------------------------------------------------------------------------ */

int bench_connect(struct bench_run *r, struct hd_shard *s, unsigned server,
                  const struct derp_keypair *kp, const struct derp_client_callbacks *cb, void *user,
                  struct derp_client **out)
{
    struct derp_client_config c = {0};
    derp_client_config_set_url(&c, &r->cfg.urls[server % r->cfg.servers_count]);
    c.keypair = kp;
    c.tls_ctx = r->cfg.tls;
    c.tls_server_name = r->cfg.tls_name;
    c.app_name = "hderp-bench";
    c.can_ack_pings = true;
    return derp_client_connect(s, &c, cb, user, out);
}

static int connect_one(struct bench_gen_shard *sh, unsigned server, const struct derp_keypair *kp,
                       const struct derp_client_callbacks *cb, void *user, struct derp_client **out)
{
    return bench_connect(sh->r, sh->s, server, kp, cb, user, out);
}

static void gen_start(void *arg)
{
    struct bench_gen_shard *sh = arg;
    struct bench_run *r = sh->r;
    sh->start_ns = hd_clock_ns();
    sh->progress_print_ns = sh->start_ns;
    for (unsigned i = 0; i < r->cfg.pairs_count; i++) {
        struct bench_pair *p = &r->pairs[i];
        if (p->shard != hd_shard_id(sh->s))
            continue;
        unsigned n = r->cfg.servers_count;
        int rc = 0;
        if (p->has_rx)
            rc = connect_one(sh, n > 1 ? p->id + 1 : p->id, &p->receiver_kp, &rx_cb, &p->rx,
                             &p->rx.k);
        if (rc == 0 && p->has_tx && !r->cfg.client_load)
            rc = connect_one(sh, p->id, &p->sender_kp, &tx_cb, &p->tx, &p->tx.k);
        if (rc < 0) {
            fail(sh, p->id, rc);
            return;
        }
    }
    for (unsigned i = 0; i < r->idle_count; i++) {
        struct bench_idle *d = &r->idle[i];
        if (d->home != sh)
            continue;
        int rc = connect_one(sh, i, &d->kp, &idle_cb, d, &d->k);
        if (rc < 0) {
            fail(sh, r->cfg.pairs_count + i, rc);
            return;
        }
    }
    if (r->cfg.latency && hd_shard_id(sh->s) == 0 && bench_latency_connect(r, sh->s) < 0)
        return;
    hd_timer_start(sh->s, &sh->tick, BENCH_TICK_MS);
}

static int gen_shard_init(struct hd_shard *s, void *arg, void **state)
{
    struct bench_run *r = arg;
    struct bench_gen_shard *sh = calloc(1, sizeof(*sh));
    if (sh == NULL)
        return -ENOMEM;
    sh->r = r;
    sh->s = s;
    /* Offered rate in payload bits/s split evenly over the senders, in bytes per ns. */
    sh->bytes_per_ns = r->cfg.rate_mbps * 1e6 / 8 / 1e9 / r->cfg.pairs_total;
    sh->bucket_bytes = sh->bytes_per_ns * BENCH_BUCKET_MS * 1e6;
    hd_timer_init(&sh->tick, tick_fired);
    hd_hist_init(&r->tick_gap_ns[hd_shard_id(s)]);
    for (unsigned i = 0; i < r->cfg.pairs_count; i++)
        if (r->pairs[i].shard == hd_shard_id(s))
            r->pairs[i].home = sh;
    for (unsigned i = 0; i < r->idle_count; i++)
        if (r->idle[i].shard == hd_shard_id(s))
            r->idle[i].home = sh;
    int rc = hd_defer(s, gen_start, sh);
    if (rc < 0) {
        free(sh);
        return rc;
    }
    *state = sh;
    return 0;
}

static void gen_shard_stop(struct hd_shard *s, void *state)
{
    struct bench_gen_shard *sh = state;
    sh->stopping = true;
    hd_timer_stop(s, &sh->tick);
    if (sh->r->cfg.latency && hd_shard_id(s) == 0)
        bench_latency_stop(sh->r);
    for (unsigned i = 0; i < sh->r->cfg.pairs_count; i++) {
        struct bench_pair *p = &sh->r->pairs[i];
        if (p->home != sh)
            continue;
        if (p->tx.k)
            derp_client_abort(p->tx.k, -ECANCELED);
        if (p->rx.k)
            derp_client_abort(p->rx.k, -ECANCELED);
    }
    for (unsigned i = 0; i < sh->r->idle_count; i++)
        if (sh->r->idle[i].home == sh && sh->r->idle[i].k)
            derp_client_abort(sh->r->idle[i].k, -ECANCELED);
}

static void gen_shard_fini(struct hd_shard *s, void *state)
{
    (void)s;
    free(state);
}

static const struct hd_module *const bench_requires[] = {&net_module, NULL};

static const struct hd_module bench_module = {
    .abi_version = HD_MODULE_ABI,
    .name = "bench-relay",
    .requires = bench_requires,
    .shard_init = gen_shard_init,
    .shard_stop = gen_shard_stop,
    .shard_fini = gen_shard_fini,
};

int bench_run_execute(struct bench_run *r)
{
    /* The layers before the generator: net always (bench_module requires it), tls for -tls. */
    const struct hd_module *const mods[] = {&tls_module, &bench_module};
    void *const args[] = {NULL, r};
    unsigned first = r->cfg.tls ? 0 : 1;
    struct hd_runtime_config cfg = {.shards_count = r->cfg.shards,
                                    .pin = true,
                                    .modules = mods + first,
                                    .modules_args = args + first,
                                    .modules_count = 2 - first};
    struct hd_runtime *rt;
    int rc = hd_runtime_create(&cfg, &rt);
    if (rc < 0)
        return rc;
    if (r->clients && (rc = bench_client_start(r)) < 0)
        atomic_store(&r->failure, rc); /* the first tick stops the runtime */
    rc = hd_runtime_run(rt);
    if (r->clients)
        bench_client_join(r);
    hd_runtime_destroy(rt);
    int f = atomic_load(&r->failure);
    return f < 0 ? f : rc;
}
