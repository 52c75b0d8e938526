/* bench_relay_impl.h - hderp-bench's private types: the run configuration, the per-pair
 * sender and receiver state, the run-wide results that shard 0 samples at the window edges,
 * and the two halves of the program (bench_relay.c: command line and report; bench_relay_gen.c:
 * the load generator on the shards). perf/README.md is the user's guide.
 *
 * The files: bench_relay.c (flags, output), bench_relay_gen.c (the pairs), bench_pairs.c (pair
 * files), bench_latency.c (the ping/echo pair), bench_sample.c (CPU/RSS/context-switch samples
 * and the syscall counters), bench_payload.c (the payload header and checksum), bench_client.c
 * (the client-like senders). K sender->receiver pairs of DERP clients run on the program's own
 * shards; payloads carry pair id, sequence, send timestamp and a checksum, so each receiver
 * counts lost, reordered, duplicated, misrouted and corrupt packets itself. After the window each
 * sender sends trailer packets with its window's sequence range, so the two sides of a pair may
 * run in different processes (a pair file, --instance) and the receiver still knows what was
 * sent to it. --latency adds one ping/echo pair on shard 0 using apps/echo's probe code (library
 * hd_echo_probe, echo_probe.c) for round trips under load. Two loads: batched (senders on the
 * shards, a tick's frames in one sendmsg) and client (--load client: a thread per sender with a
 * blocking socket and its own synchronous login on the proto library, one SendPacket frame per
 * write(2) or SSL_write through a counting BIO, paced by absolute clock_nanosleep deadlines; such
 * a thread owns its pair's sender state and shares with the shards only atomics: the ready
 * count, t0, the first failure and its done flag; the receivers stay on the shards). At the
 * window edges shard 0 reads the relay's CPU, RSS and context switches (summed over
 * /proc/PID/task) and, with --relay-syscalls, perf_event tracepoint counters it opened on each
 * relay thread. perf/run-bench (python3) is the sweep harness around it. */
#ifndef BENCH_RELAY_IMPL_H
#define BENCH_RELAY_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "derp_client.h"
#include "echo_probe.h"
#include <hd/hd.h>

/* ---- Limits ---------------------------------------------------------------------------------- */

/* Pairs: 2 connections each; one loopback generator saturates long before 256 pairs, and the
 * later load generator (pair files, sweeps) is where thousands of peers belong. */
#define BENCH_PAIRS_MAX 256
/* Payload header: magic, pair, sequence, send time, flags, checksum (see bench_hdr). */
#define BENCH_HDR_LEN 32
/* Smallest payload that carries the header; largest a DERP packet may be. */
#define BENCH_SIZE_MIN BENCH_HDR_LEN
#define BENCH_SIZE_MAX DERP_PACKET_LEN_MAX
/* The generator's pacing tick: the shortest timer the reactor's wheel has. */
#define BENCH_TICK_MS 1
/* Token bucket depth: tokens beyond this much of a sender's rate are forfeited (and counted as
 * the generator falling behind), so a stalled tick does not turn into a burst later. */
#define BENCH_BUCKET_MS 4
/* Unpaced senders fill their send queue up to the client's high watermark each tick; this
 * bounds one fill (256 KiB watermark / 1437-byte frames = 182 packets). */
#define BENCH_FILL_MAX 1024
/* Duplicate detection: a receiver remembers this many sequence numbers behind the highest;
 * TCP through one relay never reorders, so anything older is counted as reordered. */
#define BENCH_SEQ_WINDOW 65536u
/* After the window: senders stop and send trailers (the window's sequence range, so a receiver
 * in another process can count what was lost) every GAP ms, TRAILERS times (fewer when the
 * receiver is local and has its trailer); a shard is done when its senders sent theirs and its
 * receivers got theirs, or after MAX ms whatever happens; then the runtime stops. */
#define BENCH_TRAILER_GAP_MS 20
#define BENCH_TRAILERS       10
#define BENCH_DRAIN_MAX_MS   3000
/* Every client must be logged in by then (a relay slower than this is broken, not slow). */
#define BENCH_LOGIN_WAIT_MS 10000
/* The generator fell behind when it sent less than this share of its offered rate. */
#define BENCH_BEHIND_RATIO 0.97
/* Relays: --server may be repeated (a mesh of relays); a handful covers a regional mesh. */
#define BENCH_SERVERS_MAX 16
/* Logged-in connections in total (pairs + idle peers): each is one fd and one client with its
 * buffers; 4096 stays under the usual 8192 open-file limit with room for the runtime. */
#define BENCH_PEERS_MAX 4096
/* --start-at: a start further ahead than a day is a typo, not a plan. */
#define BENCH_START_AHEAD_MAX_S 86400
/* Generator shards: one per core is the model; the machine has two. */
#define BENCH_SHARDS_MAX 16
/* Pair files: pairs in one experiment (each instance runs at most BENCH_PAIRS_MAX of them), and
 * the longest line ("pair" + 3 numbers + two 72-character keys, with room for spaces). */
#define BENCH_PAIR_FILE_PAIRS_MAX 65536
#define BENCH_PAIR_FILE_LINE_MAX  512
#define BENCH_INSTANCES_MAX       1024

_Static_assert(HD_IS_POW2(BENCH_SEQ_WINDOW), "the window is indexed by a mask");
_Static_assert(BENCH_SIZE_MAX <= DERP_PACKET_LEN_MAX, "a payload is one DERP packet");
_Static_assert(BENCH_TRAILER_GAP_MS *BENCH_TRAILERS < BENCH_DRAIN_MAX_MS,
               "every trailer is sent inside the drain bound");
_Static_assert(BENCH_PEERS_MAX >= 2 * BENCH_PAIRS_MAX, "every pair fits in the peer count");
_Static_assert(BENCH_SHARDS_MAX <= HD_SHARDS_MAX, "the reactor runs that many shards");

/* The live progress line (stderr on a terminal only): shards publish their running totals
 * every PUBLISH ms, shard 0 prints every PRINT ms. */
#define BENCH_PROGRESS_PUBLISH_MS 100
#define BENCH_PROGRESS_PRINT_MS   1000

/* --latency: one ping/echo pair beside the bulk traffic, probes of this size at this rate (a
 * modest load of its own: 100 x 64 B/s), round trips of those sent in the window. The seen
 * bitmap covers the run's probes plus slack for late ticks. */
#define BENCH_LATENCY_PPS   100
#define BENCH_LATENCY_SIZE  64
#define BENCH_LATENCY_BURST 10 /* probes one late tick may send to catch up */
#define BENCH_LATENCY_SLACK 1000

_Static_assert(BENCH_LATENCY_SIZE >= ECHO_HEADER_LEN, "a probe carries its header");

/* "HDBR": tells a benchmark payload from anything else a relay might deliver; the checksum's
 * FNV-1a offset basis. */
#define BENCH_MAGIC      0x52424448u
#define BENCH_FNV_OFFSET 0xcbf29ce484222325ull

/* Payload flags. */
#define BENCH_F_MEASURED 1u /* sent inside the measured window */
#define BENCH_F_TRAILER                                                                            \
    2u /* after the window: seq = one past the last measured packet, send                          \
        * time field = the first measured sequence number */

/* One pair as a pair file gives it, or as generated (bench_pairs.c). A side whose key came as a
 * public key only (nodekey:) cannot be run by this process. */
struct bench_pair_spec {
    unsigned id;         /* the pair's number in the experiment (carried in the payload) */
    bool has_tx, has_rx; /* this instance runs the sender / the receiver */
    struct derp_keypair sender_kp, receiver_kp;
};

/* ---- Configuration --------------------------------------------------------------------------- */

struct bench_config {
    struct derp_client_url urls[BENCH_SERVERS_MAX];
    unsigned servers_count;
    unsigned pairs_count; /* pairs with a side in this process (all of them without a file) */
    unsigned pairs_total; /* pairs in the experiment (the pair file's, or pairs_count) */
    unsigned peers_count; /* logged-in connections here: the local pair sides + idle ones */
    unsigned sides_count; /* local pair sides: 2 per pair without a pair file */
    const char *pair_file;
    unsigned instance, instances;  /* this process's instance and the file's count (0 of 1) */
    struct bench_pair_spec *specs; /* from the pair file: the pairs_count local pairs, or NULL */
    double start_at;               /* > 0: unix time at which the warm-up starts (after login) */
    unsigned size;                 /* payload bytes per packet */
    double rate_mbps;              /* offered payload rate over all senders; 0 = unpaced */
    double duration_s;             /* measured window */
    double warmup_s;               /* before it */
    unsigned shards;               /* generator shards */
    pid_t relay_pid;               /* > 0: sample its CPU time and RSS at the window edges */
    int relay_cpu;                 /* >= 0: also sample that CPU's busy time (/proc/stat) */
    bool client_load;    /* --load client: one frame per write, paced senders (bench_client.c) */
    bool relay_syscalls; /* --relay-syscalls: count the relay's syscalls over the window */
    bool json;
    bool progress;        /* stderr is a terminal: a live progress line each second */
    bool latency;         /* --latency: the ping/echo pair (bench_latency.c) */
    bool insecure;        /* https without certificate checks */
    const char *ca_file;  /* https: CA to verify the relay against */
    const char *tls_name; /* https: SNI / name to verify (default: the URL's host) */
    struct tls_ctx *tls;  /* made by main for https URLs */
};

/* ---- Per pair -------------------------------------------------------------------------------- */

struct bench_pair;

struct bench_sender {
    struct bench_pair *pair;
    struct derp_client *k;
    uint8_t *buf;       /* the payload: filler fixed per pair, header rewritten per packet */
    uint64_t body_hash; /* checksum state after the filler (the header is hashed last) */
    uint64_t seq;
    double tokens; /* bytes the bucket allows now */
    uint64_t last_ns;
    bool paused; /* send queue over its high watermark */
    /* measured window */
    uint64_t sent, sent_bytes;
    uint64_t forfeited_bytes;    /* tokens the generator could not use */
    uint64_t full;               /* sends refused: queue at its cap or pool empty */
    uint64_t sent_total;         /* every packet, warm-up included */
    uint64_t first_seq, end_seq; /* the window's sequence numbers: [first, end) */
    unsigned trailers_sent;
    uint64_t trailer_last_ns;
    bool done; /* drain: its trailers went out (or its local receiver has one) */
    struct derp_client_stats close_stats; /* its client's, when it closed (the failure report) */
    bool closed;
};

struct bench_receiver {
    struct bench_pair *pair;
    struct derp_client *k;
    uint64_t *seen; /* BENCH_SEQ_WINDOW bits around seq_max */
    uint64_t seq_max;
    bool any;
    uint64_t last_rx_ns;
    /* packets that were sent in the measured window (flag), unique */
    uint64_t received, received_bytes;
    /* payload bytes that arrived while this shard was in the window (throughput) */
    uint64_t window_bytes, window_packets;
    uint64_t reordered, duplicated, misrouted, corrupt; /* any time */
    uint64_t received_total, received_total_bytes;
    uint64_t seq_first; /* lowest sequence number seen at all (the progress line's loss) */
    /* the sender's window, from its trailer; without one, from the measured packets seen */
    bool trailer;
    uint64_t expected; /* trailer: measured packets the sender sent (end - first) */
    uint64_t meas_seq_min, meas_seq_max;
    bool meas_any;
    struct hd_hist latency_ns;            /* measured packets: receive time - send time */
    struct derp_client_stats close_stats; /* as the sender's */
    bool closed;
};

struct bench_gen_shard;
struct bench_csender;

/* An idle peer: logged in, sends nothing, must stay connected through the run. */
struct bench_idle {
    unsigned id;
    unsigned shard;
    struct bench_gen_shard *home;
    struct derp_keypair kp;
    struct derp_client *k;
};

struct bench_pair {
    unsigned id;                  /* in the experiment (the pair file's number) */
    bool has_tx, has_rx;          /* sides this process runs */
    unsigned shard;               /* both clients of a pair live on this generator shard */
    struct bench_gen_shard *home; /* that shard's state (set by it at start) */
    struct derp_keypair sender_kp, receiver_kp;
    struct bench_sender tx;
    struct bench_receiver rx;
};

/* ---- The run --------------------------------------------------------------------------------- */

struct bench_proc_sample {
    double cpu_s;     /* utime + stime */
    uint64_t rss_kib; /* VmRSS */
    bool ok;
    /* Context switches summed over /proc/PID/task/<tid>/status (the process's own status file
     * counts its main thread only); ctxsw_ok false when unreadable. */
    uint64_t ctxsw_voluntary, ctxsw_involuntary;
    unsigned threads;
    bool ctxsw_ok;
};

/* --relay-syscalls: perf_event tracepoint counters (raw_syscalls:sys_enter and
 * syscalls:sys_enter_io_uring_enter) on each relay thread, opened at the window's start and read
 * at its end. A relay has a thread per shard and a few more. */
#define BENCH_RELAY_THREADS_MAX 64
struct bench_syscalls {
    int fds[2][BENCH_RELAY_THREADS_MAX];
    unsigned threads;
    uint64_t syscalls, uring_enters;
    bool ok;
    char error[160]; /* why not, when !ok */
};

/* --latency: a pinger and an echo client on generator shard 0 (bench_latency.c). */
struct bench_latency {
    struct derp_keypair ping_kp, echo_kp;
    struct derp_client *ping, *echo;
    struct echo_probe_rx rx;
    uint64_t interval_ns, next_ns;
    uint64_t sent, first_seq, end_seq; /* measured probes: [first_seq, end_seq) */
    uint64_t send_failed, echo_dropped;
    bool window_open, window_closed, stopping;
};

/* One shard's running totals since the warm-up, for the progress line (relaxed: a display). */
struct bench_progress {
    _Atomic uint64_t sent_bytes, received_bytes, lost;
};

struct bench_run {
    struct bench_config cfg;
    struct bench_pair *pairs;
    struct bench_idle *idle; /* peers_count - 2 * pairs_count of them */
    unsigned idle_count;
    /* cross-shard: set by any shard, read by all */
    _Atomic unsigned ready_count; /* clients logged in */
    _Atomic uint64_t t0_ns;       /* start of the warm-up; 0 until every client is ready */
    _Atomic unsigned shards_done; /* drained */
    _Atomic int failure;          /* first unexpected close reason or start error (< 0) */
    _Atomic unsigned failed_pair;
    /* written by shard 0 only, read after the runtime stopped */
    uint64_t window_start_ns, window_end_ns;
    double window_start_unix; /* the same edge on CLOCK_REALTIME */
    struct bench_proc_sample gen_start, gen_end, relay_start, relay_end;
    double relay_core_start_s, relay_core_end_s; /* busy seconds of cfg.relay_cpu; < 0: none */
    /* per generator shard, during the window: time between pacing ticks (burstiness) */
    struct hd_hist tick_gap_ns[BENCH_SHARDS_MAX];
    struct bench_progress progress[BENCH_SHARDS_MAX];
    struct bench_latency lat;
    struct bench_syscalls relay_sc;
    /* --load client (bench_client.c): one sender thread per local sender */
    struct bench_csender *clients;
    _Atomic bool client_stop;
    _Atomic uint64_t client_sent_bytes; /* the progress line's sent figure in this mode */
    bool progress_printed;              /* shard 0 printed a line: main ends it with a newline */
};

/* bench_pairs.c */
/* Reads c->pair_file and keeps the pairs with a side on c->instance in c->specs (malloc'd),
 * setting pairs_count, pairs_total, instances and sides_count. Prints one clear error naming the
 * file, line and problem. Returns 0 or -1. */
int bench_pair_file_load(struct bench_config *c);
/* "hderp-bench gen-pairs ...": writes a pair file. Returns the exit code. */
int bench_gen_pairs_main(int argc, char **argv);

/* bench_latency.c: everything on shard 0 but init/deinit (main thread). */
int bench_latency_init(struct bench_run *r); /* 0, -ENOMEM or -EIO (keys) */
void bench_latency_deinit(struct bench_run *r);
int bench_latency_connect(struct bench_run *r, struct hd_shard *s); /* 0 or -errno */
/* Probes due at now while the load runs (warm-up and window). */
void bench_latency_pump(struct bench_run *r, uint64_t now);
/* The window opens (start) or closes: which probes are measured. */
void bench_latency_window(struct bench_run *r, bool start);
/* Every measured probe is back (the rest count as lost when the drain bound passes). */
bool bench_latency_drained(const struct bench_run *r);
void bench_latency_stop(struct bench_run *r);

/* bench_sample.c: shard 0 at the window edges. */
/* utime + stime and VmRSS of a process; pid 0: this one (getrusage). ok false: unreadable. */
struct bench_proc_sample bench_proc_sample(pid_t pid);
/* The relay's sample (--relay-pid) and its CPU's busy seconds (--relay-cpu; -1: none). */
void bench_relay_sample(const struct bench_run *r, struct bench_proc_sample *p, double *core_s);

/* bench_sample.c: --relay-syscalls counters around the window (shard 0). */
void bench_syscalls_open(struct bench_run *r);
void bench_syscalls_close(struct bench_run *r);

/* bench_client.c: the client-like senders (--load client); main thread but _done. */
int bench_client_init(struct bench_run *r);  /* after the pairs: 0, -ENOMEM, -ENOENT (CA) */
int bench_client_start(struct bench_run *r); /* a thread per local sender: 0 or -errno */
void bench_client_join(struct bench_run *r); /* stop and join them (idempotent) */
void bench_client_deinit(struct bench_run *r);
/* Shard: the pair's sender sent a trailer (or runs elsewhere). */
bool bench_client_done(const struct bench_run *r, const struct bench_pair *p);
/* After join: frames written and write(2) calls made after login, over all local senders, and
 * how late the paced ones went after their deadlines in the window (the pacing's evenness). */
void bench_client_counts(const struct bench_run *r, uint64_t *frames, uint64_t *writes,
                         struct hd_hist *late);

/* bench_relay_gen.c */
/* Clients this process logs in: its peers, plus the ping/echo pair with --latency. */
unsigned bench_clients_count(const struct bench_run *r);
/* Connects one client with the run's TLS and URL settings to server index % servers. */
int bench_connect(struct bench_run *r, struct hd_shard *s, unsigned server,
                  const struct derp_keypair *kp, const struct derp_client_callbacks *cb, void *user,
                  struct derp_client **out);
/* Main, after a failed run: the reason, and the frame header a client refused if one did. */
void bench_print_failure(const struct bench_run *r, int rc);
/* Records the first failure (who: a pair id, or an idle/latency client) and stops the run. */
void bench_fail(struct bench_run *r, struct hd_shard *s, unsigned who, int reason);
/* Measured packets the sender of p sent, as its receiver knows it: from the sender's trailer;
 * without one, the local sender's count when the sender runs here, else the span of measured
 * sequence numbers the receiver saw (a lower bound: a lost tail is not seen). */
uint64_t bench_rx_expected(const struct bench_pair *p);
/* Allocate the pairs (keys, payload buffers, bitmaps); main thread, before the runtime.
 * Returns 0, -ENOMEM, -EIO (key generation). */
int bench_run_init(struct bench_run *r);
void bench_run_deinit(struct bench_run *r);
/* Run the generator until it drained; main thread. Returns 0 or -errno (a client failed to
 * connect or closed early: r->failure says why). */
int bench_run_execute(struct bench_run *r);

/* CLOCK_REALTIME in seconds (for --start-at). */
double bench_unix_now(void);

/* bench_payload.c: payload helpers. */
uint64_t bench_hash_bytes(uint64_t h, const uint8_t *p, size_t len);
uint64_t bench_hash_header(uint64_t h, const uint8_t *hdr);
/* Writes the header into tx->buf (the filler behind it is fixed): seq, a time (send time, or a
 * trailer's first sequence number) and flags, then the checksum. */
void bench_payload_stamp(struct bench_sender *tx, uint64_t seq, uint64_t t, uint32_t flags);
/* A whole benchmark payload: magic and checksum right. */
bool bench_payload_check(const uint8_t *data, size_t len);

static inline void bench_put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, sizeof(v));
}

static inline void bench_put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, sizeof(v));
}

static inline uint32_t bench_get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint64_t bench_get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

#endif /* BENCH_RELAY_IMPL_H */
