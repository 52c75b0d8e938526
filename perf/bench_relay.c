/* bench_relay.c - hderp-bench: a first relay benchmark. K sender->receiver pairs of DERP
 * clients (two connections per pair) push packets through a relay at an offered rate (a token
 * bucket per sender, topped up each 1 ms tick of the generator's shard; 0 = unpaced: each sender
 * keeps its send queue at the high watermark), and count per pair what was sent, received, lost,
 * reordered, duplicated and misrouted over the measured window, the delivered Mbit/s, the
 * one-way latency, and the generator's own CPU (getrusage) so a run says whether the client was
 * the bottleneck. With --relay-pid it samples the relay's utime+stime and VmRSS at the window
 * edges and reports CPU-seconds per GB delivered. A pair file (bench_pairs.c) splits one
 * experiment over several processes; --latency adds a ping/echo pair (bench_latency.c); a
 * progress line goes to stderr once a second when it is a terminal.
 *
 * Output: one "name value unit" line per figure, then a human summary ("#" lines); --json
 * prints one JSON object instead. Plain TCP or TLS (https needs --ca FILE or --insecure;
 * userspace TLS records, or kTLS where the kernel has it).
 *
 * Threads: main parses and reports; the load runs on the generator's shards (bench_relay_gen.c).
 * Exit: 0 figures printed, 1 the run failed (a client could not log in or closed), 2 usage. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hd/kit.h>
#include "bench_relay_impl.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: hderp-bench --server http[s]|ws[s]://HOST:PORT/derp [--server URL]...\n"
            "         [--pairs K | --pair-file F [--instance I]] [--peers P] [--size BYTES]\n"
            "         [--rate-mbps R] [--duration D] [--warmup D] [--start-at T] [--shards N]\n"
            "         [--relay-pid PID] [--relay-cpu N] [--relay-syscalls] [--latency]\n"
            "         [--load batched|client] [--json]\n"
            "         [--insecure | --ca FILE] [--tls-name NAME]\n"
            "       hderp-bench gen-pairs --pairs K --out FILE [--instances N] [--layout L]\n"
            "  --server URL    a relay; repeat it (up to %d) for a mesh: pair i's sender logs in\n"
            "                  to server i %% n and its receiver to server (i+1) %% n, so with\n"
            "                  n > 1 every packet crosses the mesh\n"
            "  --pairs K       sender->receiver pairs, 1..%d (default 4)\n"
            "  --pair-file F   the pairs' keys and which instance runs each side, made by\n"
            "                  gen-pairs (see perf/README.md); several processes or machines\n"
            "                  share one experiment, each with its --instance I (default 0);\n"
            "                  senders count sent, receivers count received/lost/reordered from\n"
            "                  the sequence numbers, so the sides may be in different processes\n"
            "  --peers P       logged-in connections here, 2K..%d (default 2K: a pair's two\n"
            "                  sides; with a pair file, the sides this instance runs); the extra\n"
            "                  ones are idle peers (spread over the servers and shards) that\n"
            "                  send nothing and must stay connected through the run\n"
            "  --size BYTES    payload per packet, %d..%d (default 1400)\n"
            "  --rate-mbps R   offered payload Mbit/s over all senders of the experiment (each\n"
            "                  sender gets R / K); 0 = unpaced (default 0)\n"
            "  --duration D    measured window (default 15s; 500ms, 2m; bare: seconds)\n"
            "  --warmup D      load before the window (default 3s)\n"
            "  --start-at T    unix time (float seconds): connect and log in every peer first,\n"
            "                  then start the warm-up at T (several generators in step); a T\n"
            "                  more than 1 s in the past is refused; if logging in ends after\n"
            "                  T, the warm-up starts at once\n"
            "  --shards N      the generator's own shards, 1..%d (default 1; pinned to the first\n"
            "                  N CPUs this process may use: run it under taskset)\n"
            "  --relay-pid PID sample the relay's CPU time and RSS at the window edges\n"
            "  --relay-cpu N   also sample CPU N's busy time (the relay pinned alone there;\n"
            "                  includes softirq work the process is not charged for)\n"
            "  --relay-syscalls with --relay-pid: count the relay's syscalls and io_uring_enter\n"
            "                  calls over the window (perf_event tracepoints on its threads; a\n"
            "                  little overhead on every relay syscall: use a separate run)\n"
            "  --load L        batched (default): the senders on the generator's shards, frames\n"
            "                  queued per 1 ms tick leave in one sendmsg; client: like\n"
            "                  tailscaled, a thread per sender writing exactly one DERP frame\n"
            "                  per write(2) (one TLS record), evenly paced; receivers read\n"
            "                  what comes. The JSON's client_senders counts frames and writes\n"
            "  --latency       latency under load: a ping/echo pair (two more connections) beside\n"
            "                  the bulk traffic, %d probes/s of %d B; round trips of the probes\n"
            "                  sent in the window: p50/p90/p95/p99/p999/max, count, lost\n"
            "  --json          one JSON object instead of figure lines and a summary\n"
            "  --insecure      https: no certificate checks;  --ca FILE: verify against FILE\n"
            "  --tls-name NAME https: the SNI to send and the name to verify (default: the host)\n",
            BENCH_SERVERS_MAX, BENCH_PAIRS_MAX, BENCH_PEERS_MAX, BENCH_SIZE_MIN, BENCH_SIZE_MAX,
            BENCH_SHARDS_MAX, BENCH_LATENCY_PPS, BENCH_LATENCY_SIZE);
}

/* --duration and --warmup: Go's durations (kit), a bare number in seconds. */
static int parse_num(const char *name, const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    int64_t ns;
    if ((strcmp(name, "duration") == 0 || strcmp(name, "warmup") == 0) && *end != '\0' &&
        kit_duration_parse(v, 1000000000, &ns) == 0)
        x = ns / 1e9, end = (char *)v + strlen(v);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "hderp-bench: --%s %s: expected %g..%g\n", name, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* --server URL: one more relay to spread the peers over. */
static int apply_server(struct bench_config *c, const char *v)
{
    if (c->servers_count == BENCH_SERVERS_MAX) {
        fprintf(stderr, "hderp-bench: --server %s: at most %d servers\n", v, BENCH_SERVERS_MAX);
        return -1;
    }
    if (derp_client_url_parse(v, &c->urls[c->servers_count]) < 0) {
        fprintf(stderr,
                "hderp-bench: --server %s: expected http[s]://HOST[:PORT][/path] (an address "
                "or a name that resolves)\n",
                v);
        return -1;
    }
    c->servers_count++;
    return 0;
}

/* --start-at T: unix seconds, not more than 1 s past nor BENCH_START_AHEAD_MAX_S ahead. */
static int apply_start_at(struct bench_config *c, const char *v)
{
    char *end;
    errno = 0;
    double t = strtod(v, &end), now = bench_unix_now();
    if (errno || end == v || *end || !(t > 0)) {
        fprintf(stderr, "hderp-bench: --start-at %s: expected unix seconds\n", v);
        return -1;
    }
    if (t < now - 1) {
        fprintf(stderr, "hderp-bench: --start-at %s is %.3f s in the past (now %.3f)\n", v, now - t,
                now);
        return -1;
    }
    if (t > now + BENCH_START_AHEAD_MAX_S) {
        fprintf(stderr, "hderp-bench: --start-at %s is more than %d s ahead\n", v,
                BENCH_START_AHEAD_MAX_S);
        return -1;
    }
    c->start_at = t;
    return 0;
}

/* The numeric options, each with its range. */
static int apply_number(struct bench_config *c, const char *name, const char *v)
{
    double x;
    struct {
        const char *name;
        double lo, hi;
    } const nums[] = {{"pairs", 1, BENCH_PAIRS_MAX}, {"size", BENCH_SIZE_MIN, BENCH_SIZE_MAX},
                      {"rate-mbps", 0, 1e6},         {"duration", 0.1, 3600},
                      {"warmup", 0, 3600},           {"shards", 1, BENCH_SHARDS_MAX},
                      {"relay-pid", 1, 1 << 30},     {"relay-cpu", 0, 4095},
                      {"peers", 1, BENCH_PEERS_MAX}, {"instance", 0, BENCH_INSTANCES_MAX - 1}};
    size_t i = 0;
    while (i < HD_ARRAY_SIZE(nums) && strcmp(name, nums[i].name) != 0)
        i++;
    if (i == HD_ARRAY_SIZE(nums)) {
        fprintf(stderr, "hderp-bench: unknown option --%s (see --help)\n", name);
        return -1;
    }
    if (parse_num(name, v, nums[i].lo, nums[i].hi, &x) < 0)
        return -1;
    switch (i) {
    case 0:
        c->pairs_count = (unsigned)x;
        c->pairs_total = 1; /* given: a pair file must not also be */
        break;
    case 1:
        c->size = (unsigned)x;
        break;
    case 2:
        c->rate_mbps = x;
        break;
    case 3:
        c->duration_s = x;
        break;
    case 4:
        c->warmup_s = x;
        break;
    case 5:
        c->shards = (unsigned)x;
        break;
    case 6:
        c->relay_pid = (pid_t)x;
        break;
    case 7:
        c->relay_cpu = (int)x;
        break;
    case 8:
        c->peers_count = (unsigned)x;
        break;
    default:
        c->instance = (unsigned)x;
        c->instances = 1; /* given: needs a pair file */
        break;
    }
    return 0;
}

static int apply(struct bench_config *c, const char *name, const char *v)
{
    if (strcmp(name, "server") == 0)
        return apply_server(c, v);
    if (strcmp(name, "start-at") == 0)
        return apply_start_at(c, v);
    if (strcmp(name, "ca") == 0) {
        c->ca_file = v;
        return 0;
    }
    if (strcmp(name, "tls-name") == 0) {
        c->tls_name = v;
        return 0;
    }
    if (strcmp(name, "pair-file") == 0) {
        c->pair_file = v;
        return 0;
    }
    if (strcmp(name, "load") == 0) {
        if (strcmp(v, "client") != 0 && strcmp(v, "batched") != 0) {
            fprintf(stderr, "hderp-bench: --load %s: expected batched or client\n", v);
            return -1;
        }
        c->client_load = v[0] == 'c';
        return 0;
    }
    return apply_number(c, name, v);
}

/* --pair-file / --instance after the flags: the file says how many pairs this process runs. */
static int pairs_resolve(struct bench_config *c)
{
    if (c->pair_file == NULL) {
        if (c->instances) {
            fprintf(stderr, "hderp-bench: --instance needs --pair-file\n");
            return -1;
        }
        c->instances = 1;
        c->pairs_total = c->pairs_count;
        c->sides_count = 2 * c->pairs_count;
        return 0;
    }
    if (c->pairs_total) {
        fprintf(stderr, "hderp-bench: --pairs and --pair-file: the file says how many pairs\n");
        return -1;
    }
    bool instance_given = c->instances != 0;
    c->instances = 0;
    if (bench_pair_file_load(c) < 0)
        return -1;
    if (c->instances > 1 && !instance_given) {
        fprintf(stderr,
                "hderp-bench: --pair-file %s has %u instances: say which with "
                "--instance I\n",
                c->pair_file, c->instances);
        return -1;
    }
    return 0;
}

/* The options without a value. */
static bool *flag_of(struct bench_config *c, const char *name)
{
    static const struct {
        const char *name;
        size_t off;
    } flags[] = {{"json", offsetof(struct bench_config, json)},
                 {"insecure", offsetof(struct bench_config, insecure)},
                 {"latency", offsetof(struct bench_config, latency)},
                 {"relay-syscalls", offsetof(struct bench_config, relay_syscalls)}};
    for (size_t i = 0; i < HD_ARRAY_SIZE(flags); i++)
        if (strcmp(name, flags[i].name) == 0)
            return (bool *)((char *)c + flags[i].off);
    return NULL;
}

/* Returns 0, 1 (--help printed) or -1 (usage error). */
static int parse_args(int argc, char **argv, struct bench_config *c)
{
    *c = (struct bench_config){.pairs_count = 4,
                               .size = 1400,
                               .duration_s = 15,
                               .warmup_s = 3,
                               .shards = 1,
                               .relay_cpu = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "hderp-bench: unexpected argument %s\n", a);
            return -1;
        }
        char name[32];
        const char *eq = strchr(a + 2, '='), *v = NULL;
        snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - a - 2) : (int)strlen(a + 2), a + 2);
        if (strcmp(name, "help") == 0) {
            usage(stdout);
            return 1;
        }
        bool *flag = flag_of(c, name);
        if (flag) {
            *flag = true;
            continue;
        }
        if (eq) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "hderp-bench: --%s needs a value\n", name);
            return -1;
        }
        if (apply(c, name, v) < 0)
            return -1;
    }
    c->progress = isatty(STDERR_FILENO);
    if (c->servers_count == 0) {
        fprintf(stderr, "hderp-bench: --server is required\n");
        usage(stderr);
        return -1;
    }
    bool tls = false;
    for (unsigned i = 0; i < c->servers_count; i++)
        tls |= c->urls[i].tls;
    if (pairs_resolve(c) < 0)
        return -1;
    if (c->peers_count == 0)
        c->peers_count = c->sides_count;
    if (c->peers_count < c->sides_count) {
        fprintf(stderr,
                "hderp-bench: --peers %u: at least the %u pair connections here (2 per "
                "pair)\n",
                c->peers_count, c->sides_count);
        return -1;
    }
    if (tls) {
        if (!c->insecure && c->ca_file == NULL) {
            fprintf(stderr, "hderp-bench: https needs --ca FILE or --insecure\n");
            return -1;
        }
        struct tls_client_options to = {.ca_file = c->ca_file, .insecure = c->insecure};
        int rc = tls_client_ctx_create(&to, &c->tls);
        if (rc < 0) {
            fprintf(stderr, "hderp-bench: TLS set-up failed: %s\n", strerror(-rc));
            return -1;
        }
    }
    if (c->shards > c->pairs_count)
        c->shards = c->pairs_count; /* a shard without a pair would only idle */
    return 0;
}

/* ---- Report ---------------------------------------------------------------------------------- */

struct bench_totals {
    uint64_t sent, sent_bytes, received, lost, reordered, duplicated, misrouted, corrupt;
    uint64_t expected;                             /* receiver side: what their senders sent */
    unsigned senders, receivers, trailers_missing; /* local sides; receivers without a trailer */
    double offered_mbps;                           /* this process's share of --rate-mbps */
    uint64_t window_bytes, window_packets, forfeited_bytes, full;
    struct hd_hist latency, tick_gap;
    double window_s, sent_mbps, delivered_mbps, loss_pct, gen_cpu_s, relay_cpu_s, core_s;
    bool behind, gen_bound, relay_ok, core_ok;
    uint64_t ctxsw_vol, ctxsw_invol; /* the relay's, over the window (ctxsw_ok) */
    bool ctxsw_ok;
    uint64_t client_frames, client_writes; /* --load client: after login, all senders here */
    struct hd_hist client_late;            /* --load client, paced: lateness after deadlines */
};

/* Receiver side: what its sender sent in the window (trailer) minus what arrived. */
static uint64_t pair_lost(const struct bench_pair *p)
{
    uint64_t want = bench_rx_expected(p);
    return p->has_rx && want > p->rx.received ? want - p->rx.received : 0;
}

static void totals_compute(const struct bench_run *r, struct bench_totals *t)
{
    memset(t, 0, sizeof(*t));
    hd_hist_init(&t->latency);
    for (unsigned i = 0; i < r->cfg.pairs_count; i++) {
        const struct bench_pair *p = &r->pairs[i];
        t->sent += p->tx.sent;
        t->sent_bytes += p->tx.sent_bytes;
        t->forfeited_bytes += p->tx.forfeited_bytes;
        t->full += p->tx.full;
        t->received += p->rx.received;
        t->lost += pair_lost(p);
        t->senders += p->has_tx;
        t->receivers += p->has_rx;
        if (p->has_rx) {
            t->expected += bench_rx_expected(p);
            t->trailers_missing += !p->rx.trailer && !p->has_tx; /* lost: a lower bound */
        }
        t->reordered += p->rx.reordered;
        t->duplicated += p->rx.duplicated;
        t->misrouted += p->rx.misrouted;
        t->corrupt += p->rx.corrupt;
        t->window_bytes += p->rx.window_bytes;
        t->window_packets += p->rx.window_packets;
        hd_hist_merge(&t->latency, &p->rx.latency_ns);
    }
    hd_hist_init(&t->tick_gap);
    for (unsigned i = 0; i < r->cfg.shards; i++)
        hd_hist_merge(&t->tick_gap, &r->tick_gap_ns[i]);
    t->window_s = (double)(r->window_end_ns - r->window_start_ns) / 1e9;
    t->sent_mbps = (double)t->sent_bytes * 8 / t->window_s / 1e6;
    t->delivered_mbps = (double)t->window_bytes * 8 / t->window_s / 1e6;
    t->loss_pct = t->expected ? 100.0 * (double)t->lost / (double)t->expected : 0;
    t->gen_cpu_s = r->gen_end.cpu_s - r->gen_start.cpu_s;
    t->offered_mbps = r->cfg.rate_mbps * t->senders / r->cfg.pairs_total;
    t->behind = t->offered_mbps > 0 && t->sent_mbps < BENCH_BEHIND_RATIO * t->offered_mbps;
    /* One shard is one thread: near a full core each (or each CPU it may use), the generator is
     * what limits the run. */
    unsigned cpus = hd_cpus_available();
    unsigned threads = r->cfg.shards < cpus ? r->cfg.shards : cpus;
    t->gen_bound = t->gen_cpu_s / t->window_s > 0.9 * threads;
    t->relay_ok = r->relay_start.ok && r->relay_end.ok;
    t->relay_cpu_s = r->relay_end.cpu_s - r->relay_start.cpu_s;
    t->core_ok = r->cfg.relay_cpu >= 0 && r->relay_core_start_s >= 0 && r->relay_core_end_s >= 0;
    t->core_s = r->relay_core_end_s - r->relay_core_start_s;
    t->ctxsw_ok = t->relay_ok && r->relay_start.ctxsw_ok && r->relay_end.ctxsw_ok;
    t->ctxsw_vol = r->relay_end.ctxsw_voluntary - r->relay_start.ctxsw_voluntary;
    t->ctxsw_invol = r->relay_end.ctxsw_involuntary - r->relay_start.ctxsw_involuntary;
    bench_client_counts(r, &t->client_frames, &t->client_writes, &t->client_late);
}

/* Per relayed packet: the packets delivered to the receivers here in the window. */
static double per_packet(uint64_t n, const struct bench_totals *t)
{
    return t->window_packets ? (double)n / (double)t->window_packets : 0;
}

static double per_gb(double cpu_s, uint64_t bytes)
{
    return bytes ? cpu_s / ((double)bytes / 1e9) : 0;
}

static void line(const char *name, double v, const char *unit)
{
    printf("%s %.*f %s\n", name, v == (double)(uint64_t)v ? 0 : 3, v, unit);
}

/* --latency: probes sent in the window, and those whose echo never came back. */
static uint64_t lat_count(const struct bench_latency *l)
{
    return l->window_closed ? l->end_seq - l->first_seq : 0;
}

static uint64_t lat_lost(const struct bench_latency *l)
{
    uint64_t n = lat_count(l);
    return n > l->rx.received_measured ? n - l->rx.received_measured : 0;
}

static void print_latency_figures(const struct bench_latency *l)
{
    char name[64];
    for (unsigned i = 0; i < ECHO_PROBE_QUANTILES; i++) {
        snprintf(name, sizeof(name), "load_rtt_%s_us", echo_probe_quantile_names[i]);
        line(name, (double)hd_hist_quantile(&l->rx.rtt_ns, echo_probe_quantiles[i]) / 1e3, "us");
    }
    line("load_rtt_mean_us", echo_probe_mean_ns(&l->rx) / 1e3, "us");
    line("load_probes", (double)lat_count(l), "packets");
    line("load_probes_lost", (double)lat_lost(l), "packets");
}

static void print_latency_json(const struct bench_latency *l)
{
    printf("\"latency_under_load\":{\"kind\":\"rtt\",\"rate_pps\":%d,\"size\":%d,\"count\":%llu,"
           "\"received\":%llu,\"lost\":%llu,\"reordered\":%llu,\"duplicated\":%llu,"
           "\"misrouted\":%llu,\"mean_us\":%.3f",
           BENCH_LATENCY_PPS, BENCH_LATENCY_SIZE, (unsigned long long)lat_count(l),
           (unsigned long long)l->rx.received_measured, (unsigned long long)lat_lost(l),
           (unsigned long long)l->rx.reordered, (unsigned long long)l->rx.duplicated,
           (unsigned long long)l->rx.misrouted, echo_probe_mean_ns(&l->rx) / 1e3);
    echo_probe_json_quantiles(stdout, &l->rx);
    printf("},");
}

static void print_figures(const struct bench_run *r, const struct bench_totals *t)
{
    line("offered_mbps", t->offered_mbps, "Mbit/s");
    line("sent_mbps", t->sent_mbps, "Mbit/s");
    line("delivered_mbps", t->delivered_mbps, "Mbit/s");
    line("delivered_pps", (double)t->window_packets / t->window_s, "packets/s");
    line("sent_packets", (double)t->sent, "packets");
    line("received_packets", (double)t->received, "packets");
    line("expected_packets", (double)t->expected, "packets");
    line("lost_packets", (double)t->lost, "packets");
    line("loss_pct", t->loss_pct, "%");
    line("reordered_packets", (double)t->reordered, "packets");
    line("duplicated_packets", (double)t->duplicated, "packets");
    line("misrouted_packets", (double)t->misrouted, "packets");
    line("corrupt_packets", (double)t->corrupt, "packets");
    line("latency_p50_us", (double)hd_hist_quantile(&t->latency, 0.5) / 1e3, "us");
    line("latency_p99_us", (double)hd_hist_quantile(&t->latency, 0.99) / 1e3, "us");
    line("latency_max_us", (double)t->latency.max / 1e3, "us");
    line("window_s", t->window_s, "s");
    line("gen_tick_gap_p99_us", (double)hd_hist_quantile(&t->tick_gap, 0.99) / 1e3, "us");
    line("gen_tick_gap_max_us", (double)t->tick_gap.max / 1e3, "us");
    line("gen_cpu_s", t->gen_cpu_s, "s");
    line("gen_cpu_cores", t->gen_cpu_s / t->window_s, "cores");
    line("gen_cpu_s_per_gb", per_gb(t->gen_cpu_s, t->window_bytes), "CPU-s/GB");
    line("gen_rss_kib", (double)r->gen_end.rss_kib, "KiB");
    line("gen_fell_behind", t->behind, "bool");
    line("gen_cpu_bound", t->gen_bound, "bool");
    if (t->relay_ok) {
        line("relay_cpu_s", t->relay_cpu_s, "s");
        line("relay_cpu_cores", t->relay_cpu_s / t->window_s, "cores");
        line("relay_cpu_s_per_gb", per_gb(t->relay_cpu_s, t->window_bytes), "CPU-s/GB");
        line("relay_rss_start_kib", (double)r->relay_start.rss_kib, "KiB");
        line("relay_rss_end_kib", (double)r->relay_end.rss_kib, "KiB");
    }
    if (t->ctxsw_ok) {
        line("relay_ctxsw_voluntary", (double)t->ctxsw_vol, "switches");
        line("relay_ctxsw_involuntary", (double)t->ctxsw_invol, "switches");
        line("relay_ctxsw_per_packet", per_packet(t->ctxsw_vol + t->ctxsw_invol, t), "switches");
    }
    if (r->relay_sc.ok) {
        line("relay_syscalls_per_packet", per_packet(r->relay_sc.syscalls, t), "syscalls");
        line("relay_io_uring_enter_per_packet", per_packet(r->relay_sc.uring_enters, t), "calls");
    }
    if (r->cfg.client_load)
        line("client_send_syscalls_per_frame",
             t->client_frames ? (double)t->client_writes / (double)t->client_frames : 0, "calls");
    if (t->core_ok) {
        line("relay_core_busy_cores", t->core_s / t->window_s, "cores");
        line("relay_core_s_per_gb", per_gb(t->core_s, t->window_bytes), "CPU-s/GB");
    }
    if (r->cfg.latency)
        print_latency_figures(&r->lat);
}

static void rate_text(const struct bench_config *c, char *out, size_t size)
{
    if (c->rate_mbps > 0 && c->client_load)
        snprintf(out, size,
                 "offered %.0f Mbit/s (client-like: one frame per write, "
                 "evenly paced)",
                 c->rate_mbps);
    else if (c->rate_mbps > 0)
        snprintf(out, size, "offered %.0f Mbit/s (paced per %d ms tick)", c->rate_mbps,
                 BENCH_TICK_MS);
    else
        snprintf(out, size, "unpaced");
}

/* The summary's per-packet kernel lines (context switches, syscalls, client-like writes). */
static void print_summary_kernel(const struct bench_run *r, const struct bench_totals *t)
{
    const struct bench_config *c = &r->cfg;
    if (t->ctxsw_ok)
        printf("#   relay context switches: %llu voluntary + %llu involuntary = %.3f per relayed "
               "packet\n",
               (unsigned long long)t->ctxsw_vol, (unsigned long long)t->ctxsw_invol,
               per_packet(t->ctxsw_vol + t->ctxsw_invol, t));
    if (c->relay_syscalls && r->relay_sc.ok)
        printf("#   relay syscalls: %.3f per relayed packet, io_uring_enter %.3f per packet (%u "
               "threads)\n",
               per_packet(r->relay_sc.syscalls, t), per_packet(r->relay_sc.uring_enters, t),
               r->relay_sc.threads);
    else if (c->relay_syscalls)
        printf("#   relay syscalls: not counted (%s)\n", r->relay_sc.error);
    if (c->client_load)
        printf("#   client-like senders: %llu frames in %llu write calls (one frame per write "
               "when equal); sent after the deadline by p50 %.0f us, p99 %.0f us\n",
               (unsigned long long)t->client_frames, (unsigned long long)t->client_writes,
               (double)hd_hist_quantile(&t->client_late, 0.5) / 1e3,
               (double)hd_hist_quantile(&t->client_late, 0.99) / 1e3);
}

static void print_summary(const struct bench_run *r, const struct bench_totals *t)
{
    const struct bench_config *c = &r->cfg;
    char rate[96];
    rate_text(c, rate, sizeof(rate));
    printf("# hderp-bench: %u pairs x %u B (%u peers) to %s%s%s, %s\n", c->pairs_count, c->size,
           c->peers_count, c->urls[0].host, c->urls[0].path,
           c->servers_count > 1 ? " and more" : "", rate);
    printf("#   window %.2f s after %.2f s warm-up; generator %u shard(s)\n", t->window_s,
           c->warmup_s, c->shards);
    if (c->pair_file)
        printf("#   pair file %s, instance %u of %u: %u of its %u pairs here (%u senders, %u "
               "receivers); sent counts are the senders', received/lost the receivers'%s\n",
               c->pair_file, c->instance, c->instances, c->pairs_count, c->pairs_total, t->senders,
               t->receivers,
               t->trailers_missing ? " (SOME TRAILERS MISSING: lost is a lower bound)" : "");
    printf("#   delivered %.1f Mbit/s (%.1f kpkt/s); loss %.3f %% (%llu of %llu); latency "
           "p50 %.0f us, p99 %.0f us, max %.0f us\n",
           t->delivered_mbps, (double)t->window_packets / t->window_s / 1e3, t->loss_pct,
           (unsigned long long)t->lost, (unsigned long long)t->sent,
           (double)hd_hist_quantile(&t->latency, 0.5) / 1e3,
           (double)hd_hist_quantile(&t->latency, 0.99) / 1e3, (double)t->latency.max / 1e3);
    if (c->latency) {
        printf("#   latency under load (ping/echo round trip, %d x %d B/s, %llu probes in the "
               "window, %llu lost) us:",
               BENCH_LATENCY_PPS, BENCH_LATENCY_SIZE, (unsigned long long)lat_count(&r->lat),
               (unsigned long long)lat_lost(&r->lat));
        echo_probe_text_quantiles(stdout, &r->lat.rx);
        printf("\n");
    }
    if (t->receivers && t->trailers_missing)
        printf("#   %u receiver(s) got no trailer from their sender: their lost counts only the "
               "gaps up to the last packet seen\n",
               t->trailers_missing);
    printf("#   generator: sent %.1f Mbit/s, CPU %.2f cores (%.2f CPU-s/GB), pacing tick gap "
           "p99 %.0f us max %.0f us%s\n",
           t->sent_mbps, t->gen_cpu_s / t->window_s, per_gb(t->gen_cpu_s, t->window_bytes),
           (double)hd_hist_quantile(&t->tick_gap, 0.99) / 1e3, (double)t->tick_gap.max / 1e3,
           t->gen_bound ? ": CPU-BOUND, the generator may be the bottleneck" : "");
    if (t->behind)
        printf("#   GENERATOR FELL BEHIND its offered rate: sent %.1f%% of it (%.1f MB of "
               "tokens forfeited, %llu sends refused by a full queue)\n",
               100 * t->sent_mbps / t->offered_mbps, (double)t->forfeited_bytes / 1e6,
               (unsigned long long)t->full);
    if (t->relay_ok)
        printf("#   relay pid %d: %.2f CPU-s in the window = %.2f cores, %.2f CPU-s/GB "
               "delivered; RSS %llu -> %llu KiB\n",
               (int)c->relay_pid, t->relay_cpu_s, t->relay_cpu_s / t->window_s,
               per_gb(t->relay_cpu_s, t->window_bytes), (unsigned long long)r->relay_start.rss_kib,
               (unsigned long long)r->relay_end.rss_kib);
    else if (c->relay_pid > 0)
        printf("#   relay pid %d: could not read /proc/%d/stat\n", (int)c->relay_pid,
               (int)c->relay_pid);
    print_summary_kernel(r, t);
    if (t->core_ok)
        printf("#   relay CPU %d: busy %.2f cores (%.2f CPU-s/GB, softirq included)\n",
               c->relay_cpu, t->core_s / t->window_s, per_gb(t->core_s, t->window_bytes));
    if (t->reordered || t->duplicated || t->misrouted || t->corrupt)
        printf("#   WARNING: a relay over TCP must not reorder, duplicate, misroute or corrupt\n");
    printf("#   pair       sent   received       lost  reordered duplicated  misrouted\n");
    for (unsigned i = 0; i < c->pairs_count; i++) {
        const struct bench_pair *p = &r->pairs[i];
        printf("#   %4u %10llu %10llu %10llu %10llu %10llu %10llu\n", p->id,
               (unsigned long long)p->tx.sent, (unsigned long long)p->rx.received,
               (unsigned long long)pair_lost(p), (unsigned long long)p->rx.reordered,
               (unsigned long long)p->rx.duplicated, (unsigned long long)p->rx.misrouted);
    }
}

/* The per-packet kernel figures: the relay's context switches, its syscalls (with
 * --relay-syscalls) and, with --load client, the senders' frames and writes. */
static void print_json_kernel(const struct bench_run *r, const struct bench_totals *t)
{
    printf("\"load\":\"%s\",\"relayed_packets\":%llu,", r->cfg.client_load ? "client" : "batched",
           (unsigned long long)t->window_packets);
    if (t->ctxsw_ok)
        printf("\"relay_ctxsw\":{\"voluntary\":%llu,\"involuntary\":%llu,\"threads\":%u,"
               "\"per_packet\":%.4f},",
               (unsigned long long)t->ctxsw_vol, (unsigned long long)t->ctxsw_invol,
               r->relay_end.threads, per_packet(t->ctxsw_vol + t->ctxsw_invol, t));
    else
        printf("\"relay_ctxsw\":null,");
    const struct bench_syscalls *sc = &r->relay_sc;
    if (r->cfg.relay_syscalls && sc->ok)
        printf("\"relay_syscalls\":{\"syscalls\":%llu,\"io_uring_enter\":%llu,\"threads\":%u,"
               "\"syscalls_per_packet\":%.4f,\"io_uring_enter_per_packet\":%.4f},",
               (unsigned long long)sc->syscalls, (unsigned long long)sc->uring_enters, sc->threads,
               per_packet(sc->syscalls, t), per_packet(sc->uring_enters, t));
    else if (r->cfg.relay_syscalls)
        printf("\"relay_syscalls\":{\"error\":\"%s\"},", sc->error);
    else
        printf("\"relay_syscalls\":null,");
    if (r->cfg.client_load)
        printf("\"client_senders\":{\"frames\":%llu,\"send_syscalls\":%llu,"
               "\"syscalls_per_frame\":%.4f,\"late_p50_us\":%.1f,\"late_p99_us\":%.1f,"
               "\"late_max_us\":%.1f},",
               (unsigned long long)t->client_frames, (unsigned long long)t->client_writes,
               t->client_frames ? (double)t->client_writes / (double)t->client_frames : 0,
               (double)hd_hist_quantile(&t->client_late, 0.5) / 1e3,
               (double)hd_hist_quantile(&t->client_late, 0.99) / 1e3,
               (double)t->client_late.max / 1e3);
    else
        printf("\"client_senders\":null,");
}

/* A JSON string (quotes and backslashes escaped, control characters as '?'), or null. */
static void print_json_string(const char *str)
{
    if (str == NULL) {
        printf("null");
        return;
    }
    putchar('"');
    for (const char *q = str; *q; q++)
        printf(*q == '"' || *q == '\\' ? "\\%c" : (unsigned char)*q < 0x20 ? "?" : "%c", *q);
    putchar('"');
}

/* "per_pair":[...]: one object per pair of this process. */
static void print_pairs_json(const struct bench_run *r)
{
    printf("\"per_pair\":[");
    for (unsigned i = 0; i < r->cfg.pairs_count; i++) {
        const struct bench_pair *p = &r->pairs[i];
        printf("%s{\"pair\":%u,\"sender_here\":%s,\"receiver_here\":%s,\"trailer\":%s,"
               "\"sent\":%llu,\"received\":%llu,\"expected\":%llu,\"lost\":%llu,"
               "\"reordered\":%llu,\"duplicated\":%llu,\"misrouted\":%llu,\"corrupt\":%llu}",
               i ? "," : "", p->id, p->has_tx ? "true" : "false", p->has_rx ? "true" : "false",
               p->rx.trailer ? "true" : "false", (unsigned long long)p->tx.sent,
               (unsigned long long)p->rx.received, (unsigned long long)bench_rx_expected(p),
               (unsigned long long)pair_lost(p), (unsigned long long)p->rx.reordered,
               (unsigned long long)p->rx.duplicated, (unsigned long long)p->rx.misrouted,
               (unsigned long long)p->rx.corrupt);
    }
    printf("]");
}

static void print_json(const struct bench_run *r, const struct bench_totals *t)
{
    const struct bench_config *c = &r->cfg;
    const struct derp_client_url *u0 = &c->urls[0];
    printf("{\"server\":\"%s://%s%s\",\"tls\":%s,\"pairs\":%u,\"size\":%u,"
           "\"offered_mbps\":%.3f,\"window_s\":%.4f,\"warmup_s\":%.3f,\"shards\":%u,"
           "\"sent_mbps\":%.3f,\"delivered_mbps\":%.3f,\"loss_pct\":%.5f,"
           "\"latency_us\":{\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f},"
           "\"gen_cpu_s\":%.3f,\"gen_fell_behind\":%s,\"gen_cpu_bound\":%s,",
           derp_client_url_scheme(u0), u0->host, u0->path, u0->tls ? "true" : "false",
           c->pairs_count, c->size, t->offered_mbps, t->window_s, c->warmup_s, c->shards,
           t->sent_mbps, t->delivered_mbps, t->loss_pct,
           (double)hd_hist_quantile(&t->latency, 0.5) / 1e3,
           (double)hd_hist_quantile(&t->latency, 0.99) / 1e3, (double)t->latency.max / 1e3,
           t->gen_cpu_s, t->behind ? "true" : "false", t->gen_bound ? "true" : "false");
    if (t->relay_ok)
        printf("\"relay\":{\"pid\":%d,\"cpu_s\":%.3f,\"cpu_s_per_gb\":%.3f,\"rss_start_kib\":%llu,"
               "\"rss_end_kib\":%llu},",
               (int)c->relay_pid, t->relay_cpu_s, per_gb(t->relay_cpu_s, t->window_bytes),
               (unsigned long long)r->relay_start.rss_kib,
               (unsigned long long)r->relay_end.rss_kib);
    if (t->core_ok)
        printf("\"relay_core\":{\"cpu\":%d,\"busy_s\":%.3f,\"s_per_gb\":%.3f},", c->relay_cpu,
               t->core_s, per_gb(t->core_s, t->window_bytes));
    print_json_kernel(r, t);
    printf("\"servers\":[");
    for (unsigned i = 0; i < c->servers_count; i++)
        printf("%s\"%s://%s%s\"", i ? "," : "", derp_client_url_scheme(&c->urls[i]),
               c->urls[i].host, c->urls[i].path);
    printf("],\"peers\":%u,\"duration_s\":%.3f,\"window_start_unix\":%.3f,", c->peers_count,
           c->duration_s, r->window_start_unix);
    /* Which side counted what: senders know what they sent, receivers (from the sequence
     * numbers and their sender's trailer) what arrived and what was lost. */
    printf("\"experiment_offered_mbps\":%.3f,\"pairs_total\":%u,\"instance\":%u,"
           "\"instances\":%u,\"pair_file\":",
           c->rate_mbps, c->pairs_total, c->instance, c->instances);
    print_json_string(c->pair_file);
    printf(",\"local_senders\":%u,\"local_receivers\":%u,\"trailers_missing\":%u,"
           "\"counted_by\":{\"sender\":[\"sent\",\"sent_mbps\",\"offered_mbps\"],"
           "\"receiver\":[\"received\",\"expected\",\"lost\",\"loss_pct\",\"reordered\","
           "\"duplicated\",\"misrouted\",\"corrupt\",\"delivered_mbps\",\"latency_us\"]},",
           t->senders, t->receivers, t->trailers_missing);
    printf("\"total\":{\"sent\":%llu,\"received\":%llu,\"expected\":%llu,\"lost\":%llu,"
           "\"reordered\":%llu,\"duplicated\":%llu,\"misrouted\":%llu,\"corrupt\":%llu,"
           "\"delivered_mbps\":%.3f,\"offered_mbps\":%.3f,\"sent_mbps\":%.3f},",
           (unsigned long long)t->sent, (unsigned long long)t->received,
           (unsigned long long)t->expected, (unsigned long long)t->lost,
           (unsigned long long)t->reordered, (unsigned long long)t->duplicated,
           (unsigned long long)t->misrouted, (unsigned long long)t->corrupt, t->delivered_mbps,
           t->offered_mbps, t->sent_mbps);
    if (c->latency)
        print_latency_json(&r->lat);
    else
        printf("\"latency_under_load\":null,");
    print_pairs_json(r);
    printf("}\n");
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "gen-pairs") == 0)
        return bench_gen_pairs_main(argc, argv);
    static struct bench_run run;
    int rc = parse_args(argc, argv, &run.cfg);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    rc = bench_run_init(&run);
    if (rc == 0)
        rc = bench_run_execute(&run);
    if (run.progress_printed)
        fputc('\n', stderr); /* end the progress line */
    if (rc < 0) {
        bench_print_failure(&run, rc);
        bench_run_deinit(&run);
        return 1;
    }
    if (run.window_end_ns <= run.window_start_ns) {
        fprintf(stderr, "hderp-bench: the measured window never closed\n");
        bench_run_deinit(&run);
        return 1;
    }
    static struct bench_totals t;
    totals_compute(&run, &t);
    if (run.cfg.json) {
        print_json(&run, &t);
    } else {
        print_figures(&run, &t);
        print_summary(&run, &t);
    }
    bench_run_deinit(&run);
    return 0;
}
