"""compare_idle - perf/compare's memory section: what an idle logged-in connection costs a relay.

For each transport, relay and count N (0 and --idle-clients) a fresh relay (1 shard), N + 2
logged-in connections held by hderp-bench processes (--pairs 1 --peers K at 0.01 Mbit/s, in
batches of at most BATCH, TLS_BATCH over TLS: one generator opens all its peers at once, hderp
refuses TLS handshakes past 1024 in progress per shard, and on a busy 2-vCPU box 1000 TLS
handshakes at once took longer than hderp-bench waits for a login, against derper and hderp:
2026-12-07), each batch's logins awaited before the next, SETTLE_S
seconds more, then the relay's VmRSS and smaps_rollup Anonymous. KiB per idle connection =
(RSS(N) - RSS(0)) / N. The logins are counted by the relay's /debug/varz
(derp_current_connections: hderp, derper and the floor have it) or, for a relay without it, by
its established TCP connections (/proc/net/tcp), which the result says.
"""
import os
import ssl
import subprocess
import time
import types
import urllib.request

BATCH = 1000
TLS_BATCH = 250
SETTLE_S = 2
LOGIN_WAIT_S = 90  # per batch: 1000 TLS logins take a few seconds; only a failure waits this long


def varz_connections(url):
    """derp_current_connections from url's /debug/varz, or None."""
    try:
        ctx = ssl._create_unverified_context() if url.startswith("https") else None
        with urllib.request.urlopen(url + "/debug/varz", timeout=2, context=ctx) as r:
            for line in r.read().decode(errors="replace").splitlines():
                f = line.split()
                if len(f) == 2 and f[0] in ("derp_current_connections", "current_connections"):
                    return int(float(f[1]))
    except (OSError, ValueError):
        return None
    return None


def tcp_established(port):
    """Established TCP connections whose local port is port (the relay's side)."""
    n = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        n += 1
        except OSError:
            pass
    return n


def anon_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Anonymous:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class Failed(Exception):
    pass


def hold(a, rb, mode, name, cmd, n, out):
    """One sample: a fresh relay with n + 2 idle logged-in connections. Returns a dict."""
    args = types.SimpleNamespace(relay_cpus=None, tls=mode == "tls", out=out, start_timeout=10)
    relay = rb.Relay(name, cmd, args, 1, os.path.join(out, f"relay-{name}-{mode}-{n}.log"))
    benches = []
    try:
        url = relay.start()[: -len("/derp")]
        want, left, batch, by = n + 2, n + 2, 0, None
        while left > 0:
            k = min(left, TLS_BATCH if mode == "tls" else BATCH)
            if left - k == 1:
                k -= 1  # no batch of 1: a pair is 2 peers
            argv = [a.bench, "--server", url + "/derp", "--pairs", "1", "--peers", str(k),
                    "--rate-mbps", "0.01", "--size", "100", "--warmup", "1", "--duration", "600"]
            if mode == "tls":
                argv += ["--ca", os.path.join(out, "127.0.0.1.crt")]
            log = open(os.path.join(out, f"bench-{name}-{mode}-{n}-{batch}.txt"), "w")
            benches.append(subprocess.Popen(argv, stdout=log, stderr=log,
                                            start_new_session=True))
            left -= k
            batch += 1
            deadline = time.monotonic() + LOGIN_WAIT_S
            while True:
                got = varz_connections(url)
                by = "varz" if got is not None else "tcp"
                if got is None:
                    got = tcp_established(relay.port)
                if got >= want - left:
                    break
                if time.monotonic() > deadline or benches[-1].poll() is not None:
                    raise Failed(f"{name} {mode} N={n}: {got} of {want - left} connections "
                                 f"logged in (see bench-{name}-{mode}-{n}-*.txt)")
                time.sleep(0.1)
        time.sleep(SETTLE_S)  # not a wait for a condition: the logins are in; quiet life
        sample = rb.proc_sample(relay.proc.pid)
        if sample is None:
            raise Failed(f"{name} {mode} N={n}: the relay exited")
        return {"relay": name, "mode": mode, "n": n, "rss_kib": sample[1],
                "anon_kib": anon_kib(relay.proc.pid), "counted_by": by}
    finally:
        for b in benches:
            rb.kill_group(b)
        relay.stop()


def run(a, rb, relays_by_mode):
    """The section: {"samples": [...], "per_conn": [...], "failed": [...]}."""
    out = os.path.join(a.out, "idle")
    os.makedirs(out, exist_ok=True)
    rb.make_cert(out)
    res = {"n": a.idle_clients, "samples": [], "per_conn": [], "failed": []}
    print(f"# compare: idle ({a.idle_clients} clients)", flush=True)
    for mode, relays in relays_by_mode.items():
        for name, cmd in relays.items():
            got = {}
            for n in (0, a.idle_clients):
                try:
                    s = hold(a, rb, mode, name, cmd, n, out)
                except (Failed, rb.PointFailed) as e:
                    res["failed"].append(str(e))
                    print(f"#   idle: FAILED: {e}", flush=True)
                    break
                res["samples"].append(s)
                got[n] = s
                print(f"#   idle: {name} {mode} N={n}: RSS {s['rss_kib']} KiB", flush=True)
            if len(got) == 2 and a.idle_clients > 0:
                z, m = got[0], got[a.idle_clients]
                anon = (m["anon_kib"] - z["anon_kib"]) / a.idle_clients \
                    if m["anon_kib"] is not None and z["anon_kib"] is not None else None
                res["per_conn"].append({
                    "relay": name, "mode": mode, "n": a.idle_clients, "rss0_kib": z["rss_kib"],
                    "rss_kib": m["rss_kib"],
                    "kib_per_conn": (m["rss_kib"] - z["rss_kib"]) / a.idle_clients,
                    "anon_kib_per_conn": anon, "counted_by": m["counted_by"]})
    return res
