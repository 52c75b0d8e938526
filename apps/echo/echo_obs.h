/* echo_obs.h - hderp-echo observe: a long-running latency observer of DERP relay paths.
 *
 * A path is a pinger logged in on node `from` and an echo peer logged in on node `to` (the same
 * node for a node path, two nodes of one region for a mesh path). Paths come from --server URLs
 * (node paths) or a DERP map (every node's path, and every ordered pair of nodes in a region,
 * whose packets take the mesh). Both clients live in this process, on one shard, keep their key
 * pairs across reconnects (the pinger always knows the echo peer's key) and reconnect with
 * back-off (ECHO_OBS_BACKOFF_MIN_MS doubling to ECHO_OBS_BACKOFF_MAX_MS, reset by a login). One
 * timer at the probe interval sends a probe (echo_probe.h payload) on every path whose pinger is
 * logged in and whose echo peer has logged in once (while the echo end is away, probes are
 * lost, as a client's packets would be), sweeps probes unanswered after
 * ECHO_OBS_LOSS_TIMEOUT_MS into the loss count, and decides up/down (both ends logged in and an
 * echo within --down-after). Per path: round trips in log-linear histograms (since start, 6 x
 * 10 s for the last minute and the alerts, 60 x 1 min for the hour: fixed rings of time slots,
 * each an hd_hist and loss counts), loss, reordering, late and duplicate echoes (a ring of
 * ECHO_OBS_RING sequence numbers), reconnects, login times. Per node with a STUN port: STUN
 * round trips. Exported over HTTP (echo_obs_http.c: /metrics sums the fine hd_hist buckets into
 * 19 fixed bounds), checked against alert thresholds (echo_obs_stats.c), or printed once
 * (--once). Node names are restricted to characters that need no escaping in labels, JSON or
 * HTML. Memory is fixed per path (about 0.55 MiB: 67 histograms of 976 buckets) and per node;
 * nothing grows with time.
 *
 * Threading: options and the node/path lists are built on the main thread before the runtime
 * starts (echo_obs_opts.c) and read-only after; everything else runs on the one shard; the
 * --once report is printed on the main thread after the runtime stopped. */
#ifndef ECHO_OBS_H
#define ECHO_OBS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "derp_client.h"
#include <hd/hd.h>
#include <hd/net.h>

/* ---- Limits ---------------------------------------------------------------------------------- */

#define ECHO_OBS_NODES_MAX 64u
/* Every node's own path plus every ordered pair inside a region. */
#define ECHO_OBS_PATHS_MAX 512u
#define ECHO_OBS_NAME_MAX  64u
/* Probes waiting for their echo: a ring of this many sequence numbers; a probe is lost when
 * unanswered after the timeout, so rate x timeout must stay below the ring. */
#define ECHO_OBS_RING            4096u
#define ECHO_OBS_LOSS_TIMEOUT_MS 5000u
#define ECHO_OBS_RATE_MAX        500u
#define ECHO_OBS_SIZE_MIN        20u /* ECHO_HEADER_LEN */
#define ECHO_OBS_SIZE_MAX        1400u
#define ECHO_OBS_TICK_MIN_MS     1u
/* Short windows: 10 s slots, 6 of them (the last minute); long: 1 min slots, 60 (the hour). */
#define ECHO_OBS_SHORT_SLOT_MS 10000u
#define ECHO_OBS_SHORT_SLOTS   6u
#define ECHO_OBS_LONG_SLOT_MS  60000u
#define ECHO_OBS_LONG_SLOTS    60u
/* Reconnect back-off: doubles from the minimum after each failed attempt. */
#define ECHO_OBS_BACKOFF_MIN_MS 500u
#define ECHO_OBS_BACKOFF_MAX_MS 30000u
/* STUN: one request per node every second; unanswered when the next one goes. */
#define ECHO_OBS_STUN_INTERVAL_MS 1000u
/* An alert needs at least this many echoes in its window to judge p99. */
#define ECHO_OBS_ALERT_MIN_SAMPLES 10u
/* HTTP endpoint: one request per connection, its head within this many bytes and seconds. */
#define ECHO_OBS_HTTP_IDLE_MS 10000u

_Static_assert((ECHO_OBS_RING & (ECHO_OBS_RING - 1)) == 0, "the ring is indexed by a mask");
_Static_assert(ECHO_OBS_RATE_MAX *ECHO_OBS_LOSS_TIMEOUT_MS / 1000 < ECHO_OBS_RING,
               "every probe still waiting fits the ring at the highest rate");

/* ---- Configuration (main thread, then read-only) -------------------------------------------- */

struct echo_obs_node {
    char name[ECHO_OBS_NAME_MAX];   /* DERP map Name, or the URL's host:port */
    char region[ECHO_OBS_NAME_MAX]; /* RegionCode (or RegionID), "" for --server nodes */
    int region_id;
    struct derp_client_url url;
    char sni[256]; /* TLS server name ("" : the URL's host) */
    bool insecure; /* InsecureForTests, or --insecure */
    bool has_stun;
    struct net_addr stun; /* STUN address (the node's address, STUNPort) */
};

struct echo_obs_opts {
    struct echo_obs_node nodes[ECHO_OBS_NODES_MAX];
    unsigned nodes_count;
    double rate_pps;
    uint32_t size;
    const char *metrics_listen;
    struct net_addr metrics_addr;
    double alert_p99_ms;   /* 0: off */
    double alert_loss_pct; /* 0: off */
    uint32_t alert_window_s;
    uint32_t down_after_ms; /* no echo for this long (while pinging): the path is down */
    bool once, json, insecure;
    uint32_t duration_s;
    const char *ca_file;
    bool mesh_paths; /* DERP map: the ordered pairs of each region's nodes too */
    /* --derp-map http[s]://...: fetched on the shard at start (echo_obs_fetch.c), its host
     * resolved here; NULL: a file (read here) or none. */
    const char *map_url;
    struct net_url map_loc;
    struct net_addr map_addr;
    bool map_plain_http; /* --derp-http, for the fetched map's nodes */
};

/* 0 run, 1 help printed, -1 bad flags (message printed). argv[1] is "observe". */
int echo_obs_opts_parse(int argc, char **argv, struct echo_obs_opts *o);
/* The DERP map JSON in text (len bytes) into o->nodes; err names what is wrong. 0 or -EINVAL. */
int echo_obs_derpmap_parse(const char *text, size_t len, bool plain_http, struct echo_obs_opts *o,
                           char *err, size_t err_size);

/* ---- Figures --------------------------------------------------------------------------------- */

struct echo_obs_window {
    struct hd_hist rtt_ns;
    uint64_t sent, received, lost;
    uint64_t slot; /* which slot (time / slot length) this holds; others are stale */
};

/* A window's sums: rtt over the slots still current, with the loss figures. */
struct echo_obs_summary {
    struct hd_hist rtt_ns;
    uint64_t sent, received, lost;
};

struct echo_obs_path;

/* One logged-in client of a path: the pinger or the echo peer. */
struct echo_obs_side {
    struct echo_obs_path *path;
    const struct echo_obs_node *node;
    bool is_echo;
    struct derp_keypair keypair; /* kept across reconnects: the echo's key stays the same */
    struct derp_client *k;       /* NULL: waiting to reconnect */
    bool ready, ever_ready;
    uint64_t connect_ns; /* start of the current attempt */
    uint64_t connects, reconnects, failures;
    double upgrade_ms, login_ms; /* the last successful login's (ms from connect) */
    double tcp_ms, tls_ms;       /* of it: the TCP connect, the TLS handshake after it */
    uint32_t backoff_ms;
    int last_error;
    struct hd_timer retry;
};

enum echo_obs_probe { ECHO_OBS_EMPTY = 0, ECHO_OBS_WAITING, ECHO_OBS_ANSWERED, ECHO_OBS_LOST };

struct echo_obs_path {
    unsigned idx;
    const struct echo_obs_node *from, *to;
    char label[2 * ECHO_OBS_NAME_MAX + 4]; /* "from->to" */
    const char *kind;                      /* "node" or "mesh" */
    struct echo_obs_side pinger, echo;
    /* probes: ring of send times and states by sequence number */
    uint64_t seq, sweep;
    uint64_t sent_ns[ECHO_OBS_RING];
    uint8_t state[ECHO_OBS_RING];
    uint64_t sent, received, lost, late, reordered, duplicated, misrouted, highest;
    uint64_t up_since_ms, last_echo_ms;
    bool up, ever_up;
    bool alert_p99, alert_loss;
    struct hd_hist total_ns;
    struct echo_obs_window short_w[ECHO_OBS_SHORT_SLOTS];
    struct echo_obs_window long_w[ECHO_OBS_LONG_SLOTS];
};

struct echo_obs_stun {
    const struct echo_obs_node *node;
    uint32_t seq;
    uint64_t sent_ns; /* 0: nothing outstanding */
    uint64_t sent, received, lost;
    struct hd_hist total_ns;
    struct echo_obs_window short_w[ECHO_OBS_SHORT_SLOTS];
};

/* The observer's state: one per process, on the shard. */
struct echo_obs {
    const struct echo_obs_opts *o;
    struct hd_shard *s;
    struct tls_ctx *tls_verify, *tls_insecure; /* client contexts; NULL when not needed */
    struct echo_obs_path *paths;
    unsigned paths_count;
    struct echo_obs_stun stun[ECHO_OBS_NODES_MAX];
    struct net_udp *udp4, *udp6;
    struct net_listener *http;
    struct hd_timer tick, stun_tick, stop;
    uint32_t tick_ms;
    uint64_t start_ms;
    bool stopping;
};

/* echo_obs_path.c: paths from the options (main thread), then their life on the shard. */
int echo_obs_paths_build(struct echo_obs *ob);
void echo_obs_paths_start(struct echo_obs *ob);
void echo_obs_paths_stop(struct echo_obs *ob);
/* One tick: a probe on every path that is up, losses swept, up/down decided. */
void echo_obs_paths_tick(struct echo_obs *ob, uint64_t now_ms);

/* echo_obs_stats.c: windows, summaries, alerts. */
void echo_obs_window_note(struct echo_obs_window *ring, unsigned slots, uint32_t slot_ms,
                          uint64_t now_ms, int what, uint64_t rtt_ns);
enum { ECHO_OBS_NOTE_SENT, ECHO_OBS_NOTE_ECHO, ECHO_OBS_NOTE_LOST };
/* The last `last_slots` slots of a ring (the current one included) as of now_ms. */
void echo_obs_summarise(const struct echo_obs_window *ring, unsigned slots, uint32_t slot_ms,
                        uint64_t now_ms, unsigned last_slots, struct echo_obs_summary *out);
double echo_obs_loss_pct(uint64_t received, uint64_t lost); /* of the decided probes */
double echo_obs_ms(uint64_t ns);
void echo_obs_alerts_check(struct echo_obs *ob, uint64_t now_ms);

/* echo_obs_stun.c */
int echo_obs_stun_start(struct echo_obs *ob);
void echo_obs_stun_stop(struct echo_obs *ob);

/* echo_obs_http.c: --metrics-listen; the three documents are also used by --once. */
int echo_obs_http_start(struct echo_obs *ob);
void echo_obs_http_stop(struct echo_obs *ob);
struct echo_obs_buf {
    char *p;
    size_t len, cap;
    bool failed; /* out of memory: the document is incomplete */
};
void echo_obs_buf_printf(struct echo_obs_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void echo_obs_write_metrics(struct echo_obs *ob, uint64_t now_ms, struct echo_obs_buf *b);
void echo_obs_write_status(struct echo_obs *ob, uint64_t now_ms, struct echo_obs_buf *b);
void echo_obs_write_page(struct echo_obs *ob, uint64_t now_ms, struct echo_obs_buf *b);

/* echo_obs_fetch.c: --derp-map URL, GET on the shard (https verified like the nodes, or not
 * with --insecure); done(ob, 0) once o's nodes are filled, or done(ob, -errno) with the reason
 * logged. Returns 0 or -errno (nothing started). */
#define ECHO_OBS_MAP_MAX        (1u << 20) /* the largest DERP map read (file or URL) */
#define ECHO_OBS_MAP_TIMEOUT_MS 10000u
typedef void echo_obs_fetched_fn(struct echo_obs *ob, int err);
int echo_obs_fetch_start(struct echo_obs *ob, struct echo_obs_opts *o, echo_obs_fetched_fn *done);
void echo_obs_fetch_cancel(void); /* at stop: a fetch still running is abandoned */

/* echo_obs_main.c: `hderp-echo observe ...`; returns the process exit code. */
int echo_obs_main(int argc, char **argv);
/* --once: the table (or JSON) of every path over the run; returns the exit code. */
int echo_obs_report(struct echo_obs *ob, uint64_t now_ms, FILE *out);

#endif /* ECHO_OBS_H */
