/* bench_sample.c - hderp-bench's CPU and memory samples at the window edges: its own
 * getrusage and VmRSS, the relay's utime+stime, VmRSS and context switches (summed over its
 * threads) from /proc/PID, one CPU's busy time from /proc/stat, and with --relay-syscalls
 * perf_event tracepoint counters of the relay's syscalls and io_uring_enter calls. Called on
 * generator shard 0, twice per run: blocking procfs reads and a few perf_event_open calls,
 * acceptable for a benchmark, not for the relay. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench_relay_impl.h"

/* utime + stime and VmRSS of a process; pid 0: this one. */
struct bench_proc_sample bench_proc_sample(pid_t pid)
{
    struct bench_proc_sample out = {0};
    char path[64], buf[1024];
    if (pid == 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        out.cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
        out.ok = true;
    } else {
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
        unsigned long ut, st;
        /* After ")": state (3) then fields 4..13, utime (14), stime (15). */
        if (p &&
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2) {
            out.cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
            out.ok = true;
        }
    }
    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/status");
    else
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long rss;
    while (f && fgets(buf, sizeof(buf), f))
        if (sscanf(buf, "VmRSS: %lu", &rss) == 1) {
            out.rss_kib = rss;
            break;
        }
    if (f)
        fclose(f);
    return out;
}

/* Busy seconds of one CPU (everything but idle and iowait: user, nice, system, irq, softirq,
 * steal), which counts the softirq work a pinned relay's sends cause; -1 when unreadable. */
static double cpu_busy_s(int cpu)
{
    char want[16], buf[512];
    snprintf(want, sizeof(want), "cpu%d ", cpu);
    FILE *f = fopen("/proc/stat", "r");
    double out = -1;
    unsigned long long v[8];
    while (f && fgets(buf, sizeof(buf), f))
        if (strncmp(buf, want, strlen(want)) == 0 &&
            sscanf(buf + strlen(want), "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
            out = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
            break;
        }
    if (f)
        fclose(f);
    return out;
}

/* voluntary_ctxt_switches + nonvoluntary_ctxt_switches of every thread of pid. A thread that
 * exits between the edges takes its counts with it (a relay's threads live for the run). */
static void ctxsw_sample(pid_t pid, struct bench_proc_sample *out)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *e;
    unsigned long long v;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/status", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        while (f && fgets(buf, sizeof(buf), f)) {
            if (sscanf(buf, "voluntary_ctxt_switches: %llu", &v) == 1)
                out->ctxsw_voluntary += v;
            else if (sscanf(buf, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
                out->ctxsw_involuntary += v;
        }
        out->threads += f != NULL;
        if (f)
            fclose(f);
    }
    out->ctxsw_ok = d != NULL && out->threads > 0;
    if (d)
        closedir(d);
}

void bench_relay_sample(const struct bench_run *r, struct bench_proc_sample *p, double *core_s)
{
    if (r->cfg.relay_pid > 0) {
        *p = bench_proc_sample(r->cfg.relay_pid);
        ctxsw_sample(r->cfg.relay_pid, p);
    }
    *core_s = r->cfg.relay_cpu >= 0 ? cpu_busy_s(r->cfg.relay_cpu) : -1;
}

/* ---- --relay-syscalls -------------------------------------------------------------------------
 */

/* A tracepoint's id from tracefs (mounted at /sys/kernel/tracing, or under debugfs); -1. */
static long tracepoint_id(const char *event)
{
    static const char *const roots[] = {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"};
    for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
        char path[160];
        snprintf(path, sizeof(path), "%s/events/%s/id", roots[i], event);
        FILE *f = fopen(path, "r");
        long id = -1;
        if (f && fscanf(f, "%ld", &id) != 1)
            id = -1;
        if (f)
            fclose(f);
        if (id >= 0)
            return id;
    }
    return -1;
}

static int counter_open(long id, pid_t tid)
{
    struct perf_event_attr a = {.type = PERF_TYPE_TRACEPOINT,
                                .size = sizeof(a),
                                .config = (uint64_t)id,
                                .disabled = 0,
                                .exclude_hv = 1};
    long fd = syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    return fd < 0 ? -errno : (int)fd;
}

void bench_syscalls_open(struct bench_run *r)
{
    struct bench_syscalls *sc = &r->relay_sc;
    static const char *const events[2] = {"raw_syscalls/sys_enter",
                                          "syscalls/sys_enter_io_uring_enter"};
    long ids[2] = {tracepoint_id(events[0]), tracepoint_id(events[1])};
    memset(sc, 0, sizeof(*sc));
    if (r->cfg.relay_pid <= 0) {
        snprintf(sc->error, sizeof(sc->error), "no relay pid (--relay-pid)");
        return;
    }
    if (ids[0] < 0 || ids[1] < 0) {
        /* An empty /sys/kernel/tracing is the mount point with nothing mounted on it (until
         * something mounts tracefs: perf does it by itself, run-bench's perf method). */
        snprintf(sc->error, sizeof(sc->error),
                 "no syscall tracepoints in tracefs (%s; as root: mount -t tracefs nodev "
                 "/sys/kernel/tracing)",
                 access("/sys/kernel/tracing/events", F_OK) == 0 ? "no such events there"
                                                                 : "tracefs is not mounted");
        return;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)r->cfg.relay_pid);
    DIR *d = opendir(path);
    struct dirent *e;
    sc->ok = d != NULL;
    while (sc->ok && (e = readdir(d)) != NULL && sc->threads < BENCH_RELAY_THREADS_MAX) {
        if (e->d_name[0] == '.')
            continue;
        pid_t tid = (pid_t)atoi(e->d_name);
        for (int k = 0; k < 2 && sc->ok; k++) {
            sc->fds[k][sc->threads] = counter_open(ids[k], tid);
            if (sc->fds[k][sc->threads] < 0) {
                snprintf(sc->error, sizeof(sc->error), "perf_event_open %s: %s", events[k],
                         strerror(-sc->fds[k][sc->threads]));
                sc->ok = false;
                if (k == 1)
                    close(sc->fds[0][sc->threads]);
            }
        }
        sc->threads += sc->ok;
    }
    if (d)
        closedir(d);
}

void bench_syscalls_close(struct bench_run *r)
{
    struct bench_syscalls *sc = &r->relay_sc;
    for (unsigned t = 0; t < sc->threads; t++)
        for (int k = 0; k < 2; k++) {
            uint64_t v = 0;
            if (read(sc->fds[k][t], &v, sizeof(v)) != (ssize_t)sizeof(v))
                sc->ok = false;
            *(k ? &sc->uring_enters : &sc->syscalls) += v;
            close(sc->fds[k][t]);
        }
}
