/* server_metrics_proc.c - the process figures derper's /debug/varz and /debug/vars carry
 * besides the relay's: its descriptors (derp_current_file_descriptors), the process_* series
 * of the Prometheus client's process collector (client_golang, which derper's promvarz
 * handler gathers), tsweb's uptime_sec, process_start_unix_time and node_boot_time_seconds,
 * and the command line (/debug/vars' cmdline). All read from /proc at the scrape: a cold path,
 * a few small files, on the shard that answers. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ops/server_debug.h"

/* The entries of /proc/self/fd (metrics.CurrentFDs), -1 if it cannot be read. */
int64_t srv_proc_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int64_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The machine's boot time, Unix seconds ("btime" of /proc/stat); 0 if unknown. */
int64_t srv_proc_boot_unix(void)
{
    FILE *f = fopen("/proc/stat", "re");
    if (f == NULL)
        return 0;
    char line[256];
    long long v = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %lld", &v) == 1)
            break;
    fclose(f);
    return v;
}

struct proc_stat {
    double cpu_s, start_s; /* user + system CPU; the start, Unix seconds */
    long long vsize, rss_pages;
};

/* /proc/self/stat: fields 14, 15 (utime, stime), 22 (starttime), 23 (vsize), 24 (rss), counted
 * from after the command's closing parenthesis (field 3 on). */
static int read_stat(struct proc_stat *ps)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "re");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return -1;
    unsigned long long ut = 0, st = 0, start = 0, vsize = 0;
    long long rss = 0;
    if (sscanf(p + 2,
               "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
               "%llu %llu %lld",
               &ut, &st, &start, &vsize, &rss) != 5)
        return -1;
    double hz = (double)sysconf(_SC_CLK_TCK);
    ps->cpu_s = (double)(ut + st) / hz;
    ps->start_s = (double)srv_proc_boot_unix() + (double)start / hz;
    ps->vsize = (long long)vsize;
    ps->rss_pages = rss;
    return 0;
}

int64_t srv_proc_start_unix(void)
{
    struct proc_stat ps;
    return read_stat(&ps) == 0 ? (int64_t)ps.start_s : 0;
}

/* The soft limit of one /proc/self/limits row ("Max open files"), -1 for unlimited or unknown. */
static double read_limit(const char *row)
{
    FILE *f = fopen("/proc/self/limits", "re");
    if (f == NULL)
        return -1;
    char line[256];
    double v = -1;
    size_t len = strlen(row);
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, row, len) != 0)
            continue;
        char soft[64];
        if (sscanf(line + len, " %63s", soft) == 1 && strcmp(soft, "unlimited") != 0)
            v = strtod(soft, NULL);
        break;
    }
    fclose(f);
    return v;
}

/* IpExt's InOctets and OutOctets of /proc/self/net/netstat (the network namespace's, as the
 * Prometheus client reads them for process_network_*_bytes_total). */
static int read_net(double *in, double *out)
{
    FILE *f = fopen("/proc/self/net/netstat", "re");
    if (f == NULL)
        return -1;
    char names[4096], values[4096];
    int rc = -1;
    while (fgets(names, sizeof(names), f) && fgets(values, sizeof(values), f)) {
        if (strncmp(names, "IpExt:", 6) != 0)
            continue;
        char *ns = NULL, *vs = NULL;
        char *n = strtok_r(names + 6, " \n", &ns), *v = strtok_r(values + 6, " \n", &vs);
        for (; n && v; n = strtok_r(NULL, " \n", &ns), v = strtok_r(NULL, " \n", &vs)) {
            if (strcmp(n, "InOctets") == 0)
                *in = strtod(v, NULL), rc = 0;
            else if (strcmp(n, "OutOctets") == 0)
                *out = strtod(v, NULL);
        }
        break;
    }
    fclose(f);
    return rc;
}

static void put_g(struct srv_text *o, const char *name, const char *type, double v)
{
    srv_text_put(o, "# TYPE %s %s\n%s %.17g\n", name, type, name, v);
}

/* The Prometheus client's process collector: the series derper's /debug/varz shows under
 * process_ (its Go collector's go_* are Go's runtime: DERPER-PARITY.md). */
void srv_proc_format_varz(struct srv_text *o)
{
    struct proc_stat ps;
    if (read_stat(&ps) == 0) {
        put_g(o, "process_cpu_seconds_total", "counter", ps.cpu_s);
        put_g(o, "process_resident_memory_bytes", "gauge",
              (double)ps.rss_pages * (double)sysconf(_SC_PAGESIZE));
        put_g(o, "process_start_time_seconds", "gauge", ps.start_s);
        put_g(o, "process_virtual_memory_bytes", "gauge", (double)ps.vsize);
    }
    int64_t fds = srv_proc_fds();
    if (fds >= 0)
        put_g(o, "process_open_fds", "gauge", (double)fds);
    double maxfds = read_limit("Max open files"), vmax = read_limit("Max address space");
    if (maxfds >= 0)
        put_g(o, "process_max_fds", "gauge", maxfds);
    /* unlimited: the Prometheus client reports the largest uint64, as a float */
    put_g(o, "process_virtual_memory_max_bytes", "gauge",
          vmax >= 0 ? vmax : 18446744073709551615.0);
    double in = 0, out = 0;
    if (read_net(&in, &out) == 0) {
        put_g(o, "process_network_receive_bytes_total", "counter", in);
        put_g(o, "process_network_transmit_bytes_total", "counter", out);
    }
}

/* /debug/vars' cmdline: the arguments as a JSON array of strings. */
void srv_proc_cmdline_json(struct srv_text *o)
{
    char buf[4096];
    FILE *f = fopen("/proc/self/cmdline", "re");
    size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f)
        fclose(f);
    srv_text_put(o, "[");
    for (size_t i = 0, first = 1; i < n; first = 0) {
        srv_text_put(o, first ? "\"" : ", \"");
        for (; i < n && buf[i]; i++) {
            unsigned char ch = (unsigned char)buf[i];
            if (ch == '"' || ch == '\\')
                srv_text_put(o, "\\%c", ch);
            else if (ch < 0x20 || ch >= 0x7f)
                srv_text_put(o, "\\u%04x", ch);
            else
                srv_text_put(o, "%c", ch);
        }
        srv_text_put(o, "\"");
        i++; /* the NUL */
    }
    srv_text_put(o, "]");
}

/* Seconds since the process started (tsweb's uptime_sec), wall clock. */
int64_t srv_proc_uptime_s(void)
{
    int64_t start = srv_proc_start_unix();
    int64_t now = (int64_t)time(NULL);
    return start > 0 && now > start ? now - start : 0;
}
