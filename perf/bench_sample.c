/* bench_sample.c - hderp-bench's CPU and memory samples at the window edges: its own
 * getrusage and VmRSS, the relay's utime+stime and VmRSS from /proc/PID, and one CPU's busy
 * time from /proc/stat. Called on generator shard 0, twice per run: a blocking procfs read of a
 * few microseconds, acceptable for a benchmark, not for the relay. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
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

void bench_relay_sample(const struct bench_run *r, struct bench_proc_sample *p, double *core_s)
{
    if (r->cfg.relay_pid > 0)
        *p = bench_proc_sample(r->cfg.relay_pid);
    *core_s = r->cfg.relay_cpu >= 0 ? cpu_busy_s(r->cfg.relay_cpu) : -1;
}
