/* kit.h - the relay kit: small pieces most relays on the framework write again otherwise.
 *   owner-shard routing by key   kit_key_hash, kit_owner_shard, kit_route
 *   fan-out of one frame         kit_fanout_conns (many connections of this shard),
 *                                kit_fanout_shards (every other shard, over the bus)
 *   port 0 on many shards        kit_port_hold (one SO_REUSEPORT port for every shard),
 *                                kit_port_file_write (the ports chosen, for who started it)
 *   a metrics endpoint           kit_metrics_start (GET /metrics from every shard's counters)
 *   command lines                kit_flags_parse / kit_flags_usage (a table of flags),
 *                                kit_duration_parse (durations as Go writes them)
 *   a program's start-up         kit_app_main (flags, logging, runtime, signals, tear-down)
 *   two connections piped        kit_pipe_start (one shard), kit_pipe_join (wherever they live):
 *                                both ways, with backpressure and half closes
 * Library hd_kit (CMake hd::kit, in hd.pc), on top of net/.
 *
 * Threading: as net/ (a shard's own objects on that shard); the flags parser, kit_port_hold and
 * kit_port_file_write on the main thread at start-up. Errors: 0 or -errno. */
#ifndef HD_KIT_H
#define HD_KIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <hd/hd.h>
#include <hd/net.h>

/* ---------------------------------------------------------------- routing by key */

/* FNV-1a, 64 bits: stable across processes and runs (unlike a seeded hash), so a key's owner
 * shard is the same for every shard that computes it. Not for keys an attacker picks to
 * collide on purpose in a hash table; for spreading keys over shards it is enough. */
uint64_t kit_key_hash(const void *key, size_t len);
/* The shard that owns key among shards_count (> 0). */
unsigned kit_owner_shard(const void *key, size_t len, unsigned shards_count);
/* Run m on key's owner shard through hd_bus_send, also when that is s: the message then runs
 * at s's next bus drain, never inside this call (a caller in on_data is not re-entered).
 * Ownership of what m points to moves on success only, as with hd_bus_send.
 * Returns 0 or -EAGAIN (the owner's queue is full: nothing queued). */
int kit_route(struct hd_shard *s, const void *key, size_t len, const struct hd_msg *m);

/* ---------------------------------------------------------------- fan-out */

struct kit_fanout_stats {
    uint64_t sent;    /* connections (or shards) that took the frame */
    uint64_t dropped; /* refused: over a connection's send cap, closing, a full bus */
};
/* Queue f->data[off, off + len) on each of conns[0..count): net_conn_send takes one reference
 * per connection that accepts it; the caller's reference stays the caller's. A connection that
 * refuses (-ENOBUFS over its cap, -EPIPE closing) misses this frame: counted in st->dropped
 * (st may be NULL). Returns how many connections took it. */
unsigned kit_fanout_conns(struct net_conn *const *conns, unsigned count, struct hd_frame *f,
                          uint32_t off, uint32_t len, struct kit_fanout_stats *st);
/* Send {fn, f, u64} to every shard but s, each message carrying one new reference of f that fn
 * (on the destination) must drop with hd_frame_unref. A destination whose bus is full misses
 * the frame (that reference is dropped here, counted). The caller's reference stays its own.
 * Returns how many shards were sent to. */
unsigned kit_fanout_shards(struct hd_shard *s, struct hd_frame *f, hd_msg_fn *fn, uint64_t u64,
                           struct kit_fanout_stats *st);

/* ---------------------------------------------------------------- port 0 on many shards */

/* Every shard opens its own SO_REUSEPORT socket on the same address; with port 0 each would get
 * a different port. Main thread, before hd_runtime_start: binds a SO_REUSEPORT socket of type
 * (SOCK_STREAM or SOCK_DGRAM) to *a and writes the port the kernel chose into *a, so the shards
 * bind that port. Returns the socket (close it once hd_runtime_start returned: a UDP socket in
 * the group would receive its share of datagrams) or -errno (bind's). */
int kit_port_hold(struct net_addr *a, int type);

/* What a program listens on, one line "NAME ADDRESS" per entry (ADDRESS as net_addr_format
 * writes it: "127.0.0.1:41234", "[::1]:41234"), so a test or supervisor that started it on port
 * 0 reads the ports back. Written to path + ".tmp" and renamed over path: a reader sees the
 * whole file or none. Main thread, once every shard listens (after hd_runtime_start). Returns 0
 * or -errno (fopen's, rename's; -ENAMETOOLONG). */
struct kit_port_entry {
    const char *name; /* one word, e.g. "relay", "http", "stun" */
    const struct net_addr *addr;
};
int kit_port_file_write(const char *path, const struct kit_port_entry *e, unsigned n);

/* ---------------------------------------------------------------- metrics endpoint */

/* GET /metrics (HEAD too) on a listener of its own answers with text the app writes from every
 * shard's counters: fill runs on each shard (hd_collect) and copies its counters into its slot
 * of slot_size bytes; format then runs on the listener's shard with the slots in shard order
 * and writes the body (e.g. Prometheus text) into buf[0..size), returning the bytes written
 * (at most size). Other paths get 404, other methods 405, a bad request 400; every answer
 * closes its connection. At most KIT_METRICS_CONNS_MAX requests at once per endpoint. */
typedef size_t kit_metrics_format_fn(const void *slots, unsigned count, char *buf, size_t size,
                                     void *arg);
struct kit_metrics_options {
    size_t slot_size;
    hd_collect_fill_fn *fill; /* fill(shard, slot, arg) */
    kit_metrics_format_fn *format;
    void *arg; /* for fill (on every shard: read-only there) and format */
};
#define KIT_METRICS_CONNS_MAX 16u          /* a scrape is rare: a few at once is plenty */
#define KIT_METRICS_BODY_MAX  (48u * 1024) /* answer body: fits one 64 KiB frame with its head */
struct kit_metrics;
/* Listen on addr on shard s (SO_REUSEPORT, so kit_port_hold works for port 0). Start-up
 * (shard_init: allocates). Borrows o's contents until kit_metrics_stop. Returns 0, -ENOMEM or
 * net_listener_start's error. */
int kit_metrics_start(struct hd_shard *s, const struct net_addr *addr,
                      const struct kit_metrics_options *o, struct kit_metrics **out);
/* Stop listening (shard_stop; the app's net_shard_close_all closes what is still open); the
 * memory goes once the last request's connection has closed and its collect has come back. A
 * scrape still collecting when the shard exits is never answered, and the runtime drops its
 * collect without calling back: that request and the endpoint stay allocated (exit only). */
void kit_metrics_stop(struct kit_metrics *m);

/* ---------------------------------------------------------------- flags */

enum kit_flag_type {
    KIT_FLAG_BOOL, /* -name (true), -name=true|false; dst: bool * */
    KIT_FLAG_U32,  /* -name N, -name=N, an integer in [min, max]; dst: uint32_t * */
    KIT_FLAG_F64,  /* -name X, a number in [min, max]; dst: double * */
    KIT_FLAG_STR,  /* -name S; dst: const char ** (points into argv) */
    KIT_FLAG_ADDR, /* -name HOST:PORT (net_addr_parse); dst: struct net_addr * */
    KIT_FLAG_FN,   /* -name V handed to a function; dst: struct kit_flag_call * */
    KIT_FLAG_MS,   /* -name D, a duration (kit_duration_parse; a bare number is milliseconds)
                    * in [min, max] ms; dst: uint32_t * (milliseconds) */
};
/* A KIT_FLAG_FN value (URLs, keys, repeated flags, ...): store it (v points into argv) or
 * return -EINVAL with a reason in err. */
typedef int kit_flag_fn(const char *v, void *arg, char *err, size_t err_size);
struct kit_flag_call {
    kit_flag_fn *fn;
    void *arg;
};
/* One line of a command line's table. "-name" and "--name" are the same flag. */
struct kit_flag {
    const char *name;
    enum kit_flag_type type;
    void *dst;
    double min, max;  /* KIT_FLAG_U32, KIT_FLAG_F64 */
    const char *help; /* one line; the default belongs in it */
};
/* Parse argv[1..argc) against flags[0..count): dst keeps its value (the default) unless the
 * flag is given. Main thread. Returns 0; -ECANCELED for -h, -help or --help (print usage,
 * exit 0); -EINVAL for an unknown flag, a missing or bad value, or a positional argument,
 * with a one-line reason in err (err_size bytes, may be 0). */
int kit_flags_parse(const struct kit_flag *flags, unsigned count, int argc, char **argv, char *err,
                    size_t err_size);
/* A duration as Go's time.ParseDuration writes it, the one way every program of the project
 * takes them: "500ms", "10s", "5m", "1h30m", "1.5s", "250us"; units ns, us (or with a micro sign),
 * ms, s, m, h; "0" alone. No sign. A bare number ("30") means that many bare_unit_ns (for the flags
 * that took bare numbers before); bare_unit_ns 0 refuses it. Returns 0 with *out_ns set, -EINVAL
 * (malformed) or -ERANGE (more than INT64_MAX ns, about 292 years). */
int kit_duration_parse(const char *text, int64_t bare_unit_ns, int64_t *out_ns);
#define KIT_DURATION_HINT "a duration like 500ms, 10s, 5m or 1h30m"

/* "usage: prog [flags]" and one line per flag with its help. */
void kit_flags_usage(FILE *out, const char *prog, const struct kit_flag *flags, unsigned count);

/* ---------------------------------------------------------------- a program's start-up */

/* The block every program's main repeats, as one call: parse the command line (the app's flags
 * and the kit's -shards, -log-level, -log-format), set the logging level and format, run the
 * app's setup (its configuration, TLS contexts, port holds), create and start the runtime with
 * the app's module (after an optional layer such as tls_module), close the port holds once
 * every shard listens, call started (print the address, write a port file), wait for
 * SIGINT/SIGTERM (SIGHUP/SIGUSR2 go to the module's on_signal), then finish and teardown.
 *
 *   static struct kit_app app = {.name = "myrelay", .flags = flags, .flags_count = n,
 *                                .shards_flag = true, .module = &my_module, .module_arg = &cfg,
 *                                .setup = my_setup, .started = my_started};
 *   int main(int argc, char **argv) { return kit_app_main(&app, argc, argv); }
 */
#define KIT_APP_FLAGS_MAX 64 /* the app's own flags */
#define KIT_APP_HOLDS_MAX 8
struct kit_app {
    const char *name; /* for usage and messages: "name: what went wrong" */
    const struct kit_flag *flags;
    unsigned flags_count;
    bool shards_flag; /* add -shards N (into rt.shards_count, whose value is the default) */
    /* A parser of the app's own instead of the flag table (a sub-command, positional words):
     * 0 to go on, > 0 to exit 0 (help printed), < 0 to exit 2 (it printed why). The kit's
     * flags are then not added. */
    int (*parse)(struct kit_app *a, int argc, char **argv);
    /* The runtime's configuration: shards_count, pin, frame classes, ... (modules and
     * handle_signals are set by the kit: signals handled unless no_signals). */
    struct hd_runtime_config rt;
    bool no_signals;
    /* For a program that runs kit_app_main as one step of its own (a self-check that runs a
     * runtime between blocking probes, its own command line parsed before): keep_logging
     * leaves the logging level and format as the program set them (and adds no -log-level,
     * -log-format), quiet prints no error of the kit's own (finish gets rc and reports it). */
    bool keep_logging, quiet;
    const struct hd_module *module; /* the app */
    void *module_arg;
    const struct hd_module *layer; /* listed before the app when set (setup may set it) */
    void *layer_arg;
    /* After the flags, before the runtime: build the configuration, create what is shared,
     * hold ports (kit_app_hold). 0, or -errno having printed why (exit 1). */
    int (*setup)(struct kit_app *a);
    /* Every shard runs (shard_init done) and the holds are closed: announce. 0 or -errno (the
     * runtime is stopped, exit 1). */
    int (*started)(struct kit_app *a, struct hd_runtime *rt);
    /* The runtime has stopped (rc: 0 or the first error, already printed) and is still there
     * (a->runtime: read statistics): the exit code to return. Optional (0 or 1 by rc). */
    int (*finish)(struct kit_app *a, int rc);
    void (*teardown)(struct kit_app *a); /* free what setup made (always after a setup) */
    void *arg;                           /* the app's */
    /* The kit's: */
    int holds[KIT_APP_HOLDS_MAX];
    unsigned holds_count;
    struct hd_runtime *runtime; /* during finish */
};
/* Run the program. Returns the exit code: 0, 1 (set-up or runtime failed), 2 (usage). */
int kit_app_main(struct kit_app *a, int argc, char **argv);
/* In setup: kit_port_hold(addr, type) (*addr gets the port chosen for port 0), closed by the kit
 * once hd_runtime_start returned. Returns 0, -ENOSPC (KIT_APP_HOLDS_MAX), bind's -errno. */
int kit_app_hold(struct kit_app *a, struct net_addr *addr, int type);

/* ---------------------------------------------------------------- piping two connections */

/* Two connections piped into each other (a TCP relay's data phase): what one receives is queued
 * on the other (copied into pool frames); a side stops receiving while the other's send queue is
 * above its high watermark (on_send_pressure) and resumes under its low one, so a slow reader
 * holds at most its send_high_bytes plus a read; an EOF on one side shuts the other's write side
 * once its queue is sent, both EOFs close both; a close on one side closes the other after its
 * queue is sent; done(p, arg) runs once both have closed (then p is the caller's again).
 *
 * Both connections live on the pipe's shard while piped: kit_pipe_join brings one that lives on
 * another shard there (net_conn_migrate), so every byte takes the local path with the
 * connections' own watermarks, and the pipe's memory and done stay on the caller's shard.
 * Embed struct kit_pipe in the session; its fields are the kit's (stats may be read). */
struct kit_pipe;
typedef void kit_pipe_done_fn(struct kit_pipe *p, void *arg);
struct kit_pipe_stats {
    uint64_t bytes[2]; /* bytes received on c[i] and queued on the other */
    uint64_t pauses;   /* times a side was paused for the other's send queue */
    uint64_t dropped;  /* bytes received after the other side had gone */
    uint64_t moved;    /* connections kit_pipe_join brought from another shard (0, 1 or 2) */
};
struct kit_pipe {
    struct net_conn *c[2]; /* NULL once that side has closed (or before it arrived) */
    kit_pipe_done_fn *done;
    void *arg;
    unsigned shard_id; /* the pipe's shard */
    const char *hello;
    uint32_t hello_len;
    int reason;     /* the first close's reason */
    uint8_t eof;    /* bit i: c[i]'s peer ended its writing */
    uint8_t coming; /* bit i: c[i] is on its way from another shard */
    bool running;   /* both sides here: bytes flow */
    bool failed;    /* a side closed or could not come: what is left closes */
    struct kit_pipe_stats stats;
};
/* Pipe a and b (open, on the calling shard, not the same connection). Takes over both
 * connections' handlers and app pointers (net_conn_set_app: the old ones get no callback, not
 * even on_close) and clears their deadlines (the pairing's). Bytes either side kept unconsumed
 * flow: a side the caller paused (to keep a fast sender within rx_tail_max while it waited for
 * its peer) is resumed, its kept bytes offered inside this call; the others' are offered on the
 * next tick (net_conn_reoffer). Returns 0, -EINVAL (one connection twice, or two shards), -EPIPE
 * (one is not open: nothing changed), -EAGAIN (the shard's task ring is full: piped, but kept
 * bytes wait for new ones). */
int kit_pipe_start(struct kit_pipe *p, struct net_conn *a, struct net_conn *b,
                   kit_pipe_done_fn *done, void *arg);
/* Pipe the connections a and b name (net_conn_handle), wherever they live, on shard s (the
 * caller's): p is s's memory and done runs on s. A connection on s is taken at once; one on
 * another shard is asked for over the bus and moved to s (net_conn_migrate: its app there hears
 * nothing more of it, not even on_close, so keep it in tables by handle, and only a TLS
 * connection past its handshake may be given). Each side waits with receiving paused (its bytes
 * kept) until both are on s; then hello (a NUL-terminated string that lives as long as the
 * pipe, e.g. "OK\n", or NULL) is queued on each, ahead of any piped byte, and they flow as with
 * kit_pipe_start. A side that is gone (stale handle), closes on the way, or cannot move (already
 * moving or closing, no memory) fails the pipe: the other side is closed once what it has queued
 * is sent, p->reason says why (-EPIPE; -ENOMEM; -EAGAIN when the bus refused the second
 * request), and done runs as usual once nothing is on its way. A connection that could not
 * move is left to its app as it was. Returns 0 (done will run), -EINVAL (a == b, {0}, or a
 * shard out of range), -EPIPE (a connection on s is not open), -EAGAIN (the bus refused the
 * first request): then nothing changed and done will not run. On s. */
int kit_pipe_join(struct hd_shard *s, struct kit_pipe *p, struct hd_handle a, struct hd_handle b,
                  const char *hello, kit_pipe_done_fn *done, void *arg);

#endif /* HD_KIT_H */
