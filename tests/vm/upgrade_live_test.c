/* upgrade_live_test: the live upgrade (issue 15 item 1) over kTLS, inside the test VM
 * (run_vm_test.sh), since the host lacks the tls ULP. A real hderp-server in TLS mode (2 shards,
 * a fresh certificate, --pid-file) serves UL_CLIENTS DERP clients over TLS (upgrade_live_clients.c:
 * userspace records, so /proc/net/tls_stat counts the server's kTLS sockets only) that send
 * their partners sequence-numbered packets; then SIGUSR2, and the checks: the successor's PID in
 * the pid file, the old process gone with status 0 (twice: the successor upgrades too), both
 * processes' log lines (`handed over N clients to PID P (C closed: could not move; D packets
 * dropped on the way)`, `took over N clients from PID Q (F failed)`), no client saw a close or a
 * second login, every packet sent after the take-over arrived, the missing ones before it at most
 * D, and the successor really runs kTLS on the moved connections: its
 * hderp_tls_states_loaded{mode="ktls"} is N, it made no handshake of its own, and the kernel still
 * counts N kTLS sockets both ways. Every wait is bounded; the servers are stopped by PID (this
 * process is their subreaper, so the successor is its child once the old process exited). Prints
 * `ok <check>` / `FAIL <check>: why`; exits 1 if a check failed. Threads: main (the test) and the
 * clients' (their runtime). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conf_support.h"
#include "upgrade_live.h"

/* Logins: UL_CLIENTS TLS handshakes under TCG, on a shared host. Generous: only a failure
 * waits it out. */
#define LOGIN_MS 120000
/* Traffic before the upgrade: every client has received this many packets. */
#define WARM_PACKETS 20u
/* Starting the successor (its TLS context, 2 shards), the hand-over, the old process's exit:
 * bounded by the server's own --upgrade-timeout (30 s) and its drain (30 s), plus TCG. */
#define UPGRADE_MS 120000
/* After the take-over: every client has received this many packets sent after it. */
#define AFTER_PACKETS 50u
/* Any phase's traffic goal, and the drain of what is in flight once sending stops. */
#define TRAFFIC_MS 60000
#define POLL_MS    20
/* The successor's line once the old process is gone (it is written as the hand-over ends). */
#define LOG_MS 30000
/* The first process upgrades, then its successor: the second hand-over moves connections
 * whose TLS state was itself loaded (kTLS read back from the kernel again). */
#define UPGRADES 2

static unsigned failures;
static struct ul_state st;
static struct conf_server srv;
static char pid_path[300];
/* The server processes: pids[0] the first, pids[r + 1] the successor of upgrade r; status[i]
 * pids[i]'s wait status once reaped here (-1 before). */
static long pids[UPGRADES + 1];
static int status[UPGRADES + 1];
static unsigned upgrades_done;
/* Where each sender was at upgrade r's SIGUSR2 and at its UL_AFTER mark: a missing packet's
 * window (before the signal, during the hand-over, after the take-over). */
static uint32_t at_signal[UPGRADES][UL_CLIENTS], at_after[UPGRADES][UL_CLIENTS];

static void check(bool ok, const char *name, const char *fmt, ...)
{
    if (ok) {
        printf("ok %s\n", name);
        return;
    }
    failures++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* A counter of the kernel's kTLS statistics (this network namespace), or -1. */
static long long tls_stat(const char *name)
{
    FILE *f = fopen("/proc/net/tls_stat", "r");
    if (f == NULL)
        return -1;
    char key[64];
    long long v, found = -1;
    while (fscanf(f, "%63s %lld", key, &v) == 2)
        if (strcmp(key, name) == 0)
            found = v;
    fclose(f);
    return found;
}

static long pid_file_read(void)
{
    FILE *f = fopen(pid_path, "r");
    long pid = -1;
    if (f) {
        if (fscanf(f, "%ld", &pid) != 1)
            pid = -1;
        fclose(f);
    }
    return pid;
}

/* The server log (both processes write it: the successor inherits its stdout), NUL-terminated
 * and malloc'd, or NULL. */
static char *log_read(void)
{
    char path[320];
    snprintf(path, sizeof(path), "%s/server.log", srv.dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    if (buf)
        n = fread(buf, 1, cap, f);
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* How often text occurs in the server log. */
static unsigned log_count(const char *text)
{
    char *log = log_read();
    unsigned n = 0;
    for (const char *p = log; p && (p = strstr(p, text)) != NULL; p += strlen(text))
        n++;
    free(log);
    return n;
}

static unsigned sum(atomic_uint *a)
{
    unsigned s = 0;
    for (unsigned i = 0; i < UL_CLIENTS; i++)
        s += atomic_load(&a[i]);
    return s;
}

/* The fewest of a[i] over the clients. */
static unsigned least(atomic_uint *a)
{
    unsigned m = UINT_MAX;
    for (unsigned i = 0; i < UL_CLIENTS; i++)
        if (atomic_load(&a[i]) < m)
            m = atomic_load(&a[i]);
    return m;
}

/* Polls cond until it holds (true) or ms passed or, when any_close, a client closed (false). */
static bool wait_until(bool (*cond)(void), int ms, bool any_close)
{
    int64_t deadline = conf_now_ms() + ms;
    while (!cond()) {
        if (conf_now_ms() >= deadline || (any_close && atomic_load(&st.early_closes) > 0))
            return false;
        conf_sleep_ms(POLL_MS);
    }
    return true;
}

/* The clients' waits: a close ends them (the test has failed). */
static bool wait_for(bool (*cond)(void), int ms)
{
    return wait_until(cond, ms, true);
}

static unsigned want_epoch, want_least;

static bool phase_acked(void)
{
    return atomic_load(&st.acked) == want_epoch;
}

/* A new phase, in force on the client shard when this returns true. */
static bool set_phase(int phase)
{
    atomic_store(&st.phase, phase);
    want_epoch = atomic_fetch_add(&st.epoch, 1) + 1;
    return wait_for(phase_acked, TRAFFIC_MS);
}

static bool all_ready(void)
{
    return atomic_load(&st.ready) == UL_CLIENTS;
}

static bool got_least(void)
{
    return least(st.got) >= want_least;
}

static bool after_enough(void)
{
    return least(st.got_after) >= AFTER_PACKETS;
}

/* Every packet sent since the last UL_AFTER began arrived (once the senders stopped). */
static bool after_all_arrived(void)
{
    for (unsigned i = 0; i < UL_CLIENTS; i++) {
        unsigned from = ul_partner(i);
        unsigned want = atomic_load(&st.sent[from]) - atomic_load(&st.after_from[from]);
        if (atomic_load(&st.got_after[i]) != want)
            return false;
    }
    return true;
}

static int64_t varz(const char *name)
{
    int64_t v = -1;
    return conf_varz(&srv, name, false, &v) == 0 ? v : -1;
}

/* The server's kTLS sockets: the kernel's TX and RX gauges, and the server's own counter. */
static void check_ktls(const char *when, const char *series, int64_t want)
{
    char name[96];
    long long tx = tls_stat("TlsCurrTxSw"), rx = tls_stat("TlsCurrRxSw");
    printf("%s: kernel TlsCurrTxSw %lld TlsCurrRxSw %lld, %s %lld\n", when, tx, rx, series,
           (long long)varz(series));
    snprintf(name, sizeof(name), "%s_kernel_ktls", when);
    check(tx == UL_CLIENTS && rx == UL_CLIENTS, name, "TlsCurrTxSw %lld TlsCurrRxSw %lld, want %u",
          tx, rx, UL_CLIENTS);
    snprintf(name, sizeof(name), "%s_varz_ktls", when);
    check(varz(series) == want, name, "%s is %lld, want %lld", series, (long long)varz(series),
          (long long)want);
    snprintf(name, sizeof(name), "%s_connections", when);
    check(varz("derp_current_connections") == UL_CLIENTS, name, "derp_current_connections %lld",
          (long long)varz("derp_current_connections"));
}

static void report_closes(void)
{
    unsigned n = atomic_load(&st.early_closes);
    check(n == 0, "no_close", "%u clients closed; the first: client %d in phase %d (%s)", n,
          atomic_load(&st.first_close_client), atomic_load(&st.first_close_phase),
          strerror(-atomic_load(&st.first_close_reason)));
}

/* The server, its certificate, the clients' TLS context; the clients' runtime started. */
static int start(pthread_t *clients)
{
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* a successor becomes ours when its parent exits */
    for (unsigned i = 0; i <= UPGRADES; i++)
        status[i] = -1;
    char parent[sizeof(CONF_WORK_DIR)];
    snprintf(parent, sizeof(parent), "%s", CONF_WORK_DIR);
    for (char *p = parent + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        mkdir(parent, 0755); /* the VM has only the folders the initramfs brought */
        *p = '/';
    }
    mkdir(CONF_WORK_DIR, 0755);
    snprintf(pid_path, sizeof(pid_path), "%s/upgrade_live-%d.pid", CONF_WORK_DIR, (int)getpid());
    const char *extra[] = {"--pid-file", pid_path, NULL};
    /* Ports named in the flags (a successor gets the same argv: port 0 would be a new port for
     * it), held so that no one else is given them meanwhile. */
    struct conf_server_opts o = {.shards = 2, .tls = true, .extra = extra};
    int rc = conf_port_hold(&o.port);
    if (rc == 0)
        rc = conf_port_hold(&o.http_port);
    check(rc == 0, "ports_held", "%s", strerror(-rc));
    if (rc == 0)
        rc = conf_server_start(&srv, &o);
    check(rc == 0, "server_start", "%s", strerror(-rc));
    if (rc != 0)
        return rc;
    pids[0] = srv.pid;
    rc = tls_client_ctx_create(&(struct tls_client_options){.ca_file = srv.cert_file}, &st.tls_ctx);
    check(rc == 0, "client_ctx", "%s", strerror(-rc));
    if (rc != 0)
        return rc;
    st.port = srv.port;
    snprintf(st.host, sizeof(st.host), "%s:%u", CONF_TLS_HOSTNAME, srv.port);
    rc = pthread_create(clients, NULL, ul_clients_thread, &st);
    check(rc == 0, "clients_thread", "%s", strerror(rc));
    return -rc;
}

/* Sending (again), until every client received WARM_PACKETS more. */
static bool traffic(const char *what)
{
    want_least = least(st.got) + WARM_PACKETS;
    bool ok = set_phase(UL_SEND) && wait_for(got_least, TRAFFIC_MS);
    check(ok, what, "the least a client received is %u of %u", least(st.got), want_least);
    return ok;
}

/* Logins, the server's kTLS on every connection, then traffic. */
static bool before_upgrade(void)
{
    bool ok = wait_for(all_ready, LOGIN_MS);
    check(ok, "login", "%u of %u logged in, %u connect errors", atomic_load(&st.ready), UL_CLIENTS,
          atomic_load(&st.connect_errors));
    if (!ok)
        return false;
    check_ktls("before", "hderp_tls_conns{mode=\"ktls\"}", UL_CLIENTS);
    return traffic("traffic");
}

/* The running server's drops by reason: every derp_packets_dropped series that is not 0. */
static void print_drops(const char *who)
{
    static char resp[CONF_HTTP_RESP_MAX];
    ssize_t n = conf_http(&srv, "GET /debug/varz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                          resp, sizeof(resp));
    for (char *line = n > 0 ? strtok(resp, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        const char *v = strrchr(line, ' ');
        if (strncmp(line, "derp_packets_dropped{", 21) == 0 && v && strcmp(v, " 0") != 0)
            printf("%s: %s\n", who, line);
    }
}

/* Upgrade upgrades_done's successor named in the pid file, the old process gone (reaped). */
static bool upgraded(void)
{
    unsigned r = upgrades_done;
    long pid = pid_file_read();
    if (pid > 0 && pid != pids[r])
        pids[r + 1] = pid;
    if (status[r] < 0 && waitpid((pid_t)pids[r], &status[r], WNOHANG) != (pid_t)pids[r])
        status[r] = -1;
    return pids[r + 1] > 0 && status[r] >= 0;
}

static bool took_over_logged(void)
{
    return log_count("upgrade: took over ") > upgrades_done;
}

/* SIGUSR2 to the running server and the take-over, while the packets flow. */
static bool upgrade(void)
{
    unsigned r = upgrades_done;
    char name[32];
    snprintf(name, sizeof(name), "pid_file_%u", r);
    check(pid_file_read() == pids[r], name, "names %ld, not %ld", pid_file_read(), pids[r]);
    unsigned got_before = sum(st.got);
    int64_t dropped = -1;
    conf_varz(&srv, "derp_packets_dropped", true, &dropped);
    printf("upgrade %u: PID %ld has dropped %lld packets so far (derp_packets_dropped)\n", r,
           pids[r], (long long)dropped);
    print_drops("before the signal");
    for (unsigned i = 0; i < UL_CLIENTS; i++)
        at_signal[r][i] = atomic_load(&st.sent[i]);
    int64_t t0 = conf_now_ms();
    check(kill((pid_t)pids[r], SIGUSR2) == 0, "sigusr2", "%s", strerror(errno));
    /* the process change is waited for even when clients closed (the servers are stopped) */
    bool ok = wait_until(upgraded, UPGRADE_MS, false);
    printf("upgrade %u: PID %ld -> %ld in %lld ms; %u packets arrived meanwhile\n", r, pids[r],
           pids[r + 1], (long long)(conf_now_ms() - t0), sum(st.got) - got_before);
    snprintf(name, sizeof(name), "upgraded_%u", r);
    check(ok, name, "new PID %ld, old wait status %d", pids[r + 1], status[r]);
    snprintf(name, sizeof(name), "old_exit_%u", r);
    check(status[r] == 0, name, "wait status %d", status[r]);
    ok = ok && wait_until(took_over_logged, LOG_MS, false);
    snprintf(name, sizeof(name), "took_over_logged_%u", r);
    check(ok, name, "no new 'upgrade: took over' line");
    return ok && atomic_load(&st.early_closes) == 0;
}

/* Traffic after the take-over until every client received AFTER_PACKETS of it; then the
 * senders stop and every one of those packets must arrive; the successor's kTLS. */
static bool after_upgrade(void)
{
    unsigned r = upgrades_done;
    char name[32];
    bool ok = set_phase(UL_AFTER);
    for (unsigned i = 0; i < UL_CLIENTS; i++)
        at_after[r][i] = atomic_load(&st.after_from[i]);
    ok = ok && wait_for(after_enough, TRAFFIC_MS);
    snprintf(name, sizeof(name), "traffic_after_%u", r);
    check(ok, name, "the least a client received after the take-over is %u of %u",
          least(st.got_after), AFTER_PACKETS);
    ok = set_phase(UL_DRAIN) && wait_for(after_all_arrived, TRAFFIC_MS);
    unsigned sent_after = sum(st.sent) - sum(st.after_from);
    snprintf(name, sizeof(name), "after_all_arrived_%u", r);
    check(ok, name, "%u of %u packets sent after the take-over arrived", sum(st.got_after),
          sent_after);
    printf("after take-over %u: %u packets sent, %u arrived\n", r, sent_after, sum(st.got_after));
    snprintf(name, sizeof(name), "after_%u", r);
    check_ktls(name, "hderp_tls_states_loaded{mode=\"ktls\"}", UL_CLIENTS);
    snprintf(name, sizeof(name), "after_%u_no_handshake", r);
    check(varz("hderp_tls_handshakes_done") == 0, name, "the successor made %lld handshakes",
          (long long)varz("hderp_tls_handshakes_done"));
    return ok;
}

/* The n-th (from 0) occurrence of text in log, or NULL. */
static const char *nth(const char *log, const char *text, unsigned n)
{
    const char *p = log;
    for (unsigned i = 0; p && (p = strstr(p, text)) != NULL && i < n; i++)
        p += strlen(text);
    return p;
}

/* Upgrade r's two log lines; its dropped packets (D) into *dropped. */
static void check_log_lines(unsigned r, const char *log, unsigned *dropped)
{
    const char *h = nth(log, "upgrade: handed over ", r);
    const char *t = nth(log, "upgrade: took over ", r);
    unsigned hn = 0, closed = 0, tn = 0, failed = 0;
    long to = 0, from = 0;
    bool hok = h && sscanf(h,
                           "upgrade: handed over %u clients to PID %ld (%u closed: could not "
                           "move; %u packets dropped on the way)",
                           &hn, &to, &closed, dropped) == 4;
    bool tok = t && sscanf(t, "upgrade: took over %u clients from PID %ld (%u failed)", &tn, &from,
                           &failed) == 3;
    char name[32];
    snprintf(name, sizeof(name), "log_handed_over_%u", r);
    check(hok, name,
          "no line 'upgrade: handed over N clients to PID P (C closed: could not "
          "move; D packets dropped on the way)'");
    snprintf(name, sizeof(name), "log_took_over_%u", r);
    check(tok, name, "no line 'upgrade: took over N clients from PID Q (F failed)'");
    if (!hok || !tok)
        return;
    printf("upgrade %u logged: handed over %u to %ld (%u closed, %u dropped); took over %u from "
           "%ld (%u failed)\n",
           r, hn, to, closed, *dropped, tn, from, failed);
    snprintf(name, sizeof(name), "handed_over_%u", r);
    check(hn == UL_CLIENTS && closed == 0 && to == pids[r + 1], name,
          "%u clients to %ld, %u closed", hn, to, closed);
    snprintf(name, sizeof(name), "took_over_%u", r);
    check(tn == UL_CLIENTS && failed == 0 && from == pids[r], name,
          "%u clients from %ld, %u failed", tn, from, failed);
}

/* Both upgrades' lines; what the clients missed at most what the servers said they dropped. */
static void check_logs(void)
{
    char *log = log_read();
    unsigned dropped = 0;
    for (unsigned r = 0; r < UPGRADES; r++) {
        unsigned d = 0;
        check_log_lines(r, log, &d);
        dropped += d;
    }
    free(log);
    unsigned missing = sum(st.sent) - sum(st.got);
    printf("missing %u packets of %u sent (D summed over the upgrades: %u)\n", missing,
           sum(st.sent), dropped);
    check(missing <= dropped, "missing_at_most_dropped", "%u missing, %u logged as dropped",
          missing, dropped);
}

static void check_clients(void)
{
    report_closes();
    check(atomic_load(&st.peer_gone) == 0, "no_peer_gone", "%u", atomic_load(&st.peer_gone));
    check(atomic_load(&st.relogins) == 0 && atomic_load(&st.frames_skipped) == 0, "no_relogin",
          "%u clients saw a second ServerInfo, %u frames skipped", atomic_load(&st.relogins),
          atomic_load(&st.frames_skipped));
    check(atomic_load(&st.bad) == 0 && atomic_load(&st.dups) == 0, "packets_right",
          "%u bad, %u duplicates", atomic_load(&st.bad), atomic_load(&st.dups));
    printf("packets out of order: %u (the first in phase %d)\n", atomic_load(&st.reorders),
           atomic_load(&st.first_reorder_phase));
    check(atomic_load(&st.send_errors) == 0, "sends", "%u refused", atomic_load(&st.send_errors));
}

/* The window of sender i's packet seq: "before upgrade r", "in hand-over r", "after". */
static void window(unsigned i, uint32_t seq, char *out, size_t size)
{
    for (unsigned r = 0; r < upgrades_done && r < UPGRADES; r++) {
        if (seq < at_signal[r][i]) {
            snprintf(out, size, "before upgrade %u", r);
            return;
        }
        if (at_after[r][i] == 0 || seq < at_after[r][i]) {
            snprintf(out, size, "in hand-over %u", r);
            return;
        }
    }
    snprintf(out, size, "after the last take-over");
}

/* Which packets never arrived, and when they were sent (the clients' runtime has ended). */
static void report_missing(void)
{
    unsigned shown = 0;
    for (unsigned me = 0; me < UL_CLIENTS; me++) {
        unsigned from = ul_partner(me);
        uint32_t seqs[4];
        unsigned n = ul_missing(me, 0, atomic_load(&st.sent[from]), seqs, 4);
        for (unsigned j = 0; j < n && j < 4 && shown < 20; j++, shown++) {
            char w[32];
            window(from, seqs[j], w, sizeof(w));
            printf("missing: client %u -> %u seq %u (%s)\n", from, me, seqs[j], w);
        }
    }
    int64_t dropped = -1;
    conf_varz(&srv, "derp_packets_dropped", true, &dropped);
    printf("the last PID %ld dropped %lld packets (derp_packets_dropped)\n",
           pids[upgrades_done < UPGRADES ? upgrades_done : UPGRADES], (long long)dropped);
    print_drops("the last process");
}

/* The clients close (their runtime stops), then every server process still running, by PID:
 * the ones not reaped here (ours: started here, or orphaned to this subreaper). */
static void finish(pthread_t clients, bool have_clients)
{
    int rc_join = -1;
    atomic_store(&st.phase, UL_CLOSE);
    atomic_fetch_add(&st.epoch, 1);
    if (have_clients) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += TRAFFIC_MS / 1000;
        void *res = NULL;
        int rc = rc_join = pthread_timedjoin_np(clients, &res, &until);
        check(rc == 0 && res == NULL, "clients_done", "join %s, runtime %ld", strerror(rc),
              (long)(intptr_t)res);
        if (rc != 0)
            st.tls_ctx = NULL; /* the runtime is stuck: exit takes it and its context */
    }
    if (have_clients && rc_join == 0)
        report_missing();
    for (unsigned i = 0; i <= UPGRADES; i++) {
        struct conf_server one = srv;
        one.pid = (pid_t)pids[i];
        if (one.pid > 0 && status[i] < 0)
            check(conf_server_stop_keep(&one) == 0, "server_stop", "PID %d: not a clean exit",
                  (int)one.pid);
    }
    if (failures) {
        fprintf(stderr, "----- server.log\n");
        conf_server_dump_log(&srv);
    }
    conf_dir_remove(srv.dir);
    conf_ports_release();
    unlink(pid_path);
    if (st.tls_ctx)
        tls_ctx_destroy(st.tls_ctx);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!tls_ktls_available()) {
        printf("FAIL ktls: the kernel has no tls ULP\n");
        return 1;
    }
    pthread_t clients;
    bool have_clients = start(&clients) == 0;
    bool ok = have_clients && before_upgrade();
    for (; ok && upgrades_done < UPGRADES; upgrades_done++) {
        ok = upgrade() && after_upgrade();
        if (ok && upgrades_done + 1 < UPGRADES)
            ok = traffic("traffic_again");
    }
    if (have_clients)
        check_logs();
    check_clients();
    finish(clients, have_clients);
    printf("%s: %u checks failed\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
