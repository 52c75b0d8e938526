#!/usr/bin/env python3
"""upgrade_load.py BIN WORK plain|tls - an upgrade under a real client-like load: hderp-bench
(4 pairs of senders writing one DERP frame per write, 224 Mbit/s, 200 logged-in peers in all)
relays through a 2-shard hderp-server (placement moves pairs between shards while it runs), and
SIGUSR2 comes three times while the packets flow (each successor upgrades in turn). The bench fails if any of its clients is closed; here the
run must also have no reordered, duplicated, misrouted or corrupt packet, the old process must
have handed over all 200 clients each time, and every packet the bench lost must be one a relay
counted as dropped on the way at a hand-over or at a full queue (each old process's totals are
logged at its hand-over, the last one's read from derp_packets_dropped), none for a key the
relay did not know. Servers are stopped by PID."""
import json, os, re, shutil, signal, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import Server, stop_pid, varz, wait_for

BIN, WORK, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
TLS = MODE == "tls"
PEERS = 200
UPGRADES = 3
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
PIDF = os.path.join(WORK, "hderp.pid")


def pid_file():
    try:
        with open(PIDF) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def dropped(port, unknown=True):
    """The sum of a server's derp_packets_dropped series (without unknown=False: those for
    unknown keys, which a relay that moves every client must not have: the bench's receivers
    close a little before its senders stop, so their last packets are dropped that way)."""
    return sum(int(v) for k, v in varz(port).items() if k.startswith("derp_packets_dropped{")
               and (unknown or 'reason="unknown_dest' not in k))


def main():
    args = ["-a", "127.0.0.1:0", "-stun-port", "-1", "-c", os.path.join(WORK, "key"),
            "--shards", "2", "--pid-file", PIDF]
    if TLS:
        args += ["-certmode", "manual", "-hostname", "127.0.0.1", "-certdir",
                 os.path.join(WORK, "certs"), "-http-port", "0"]
    srv = Server(BIN, WORK, "server", args).start()
    varz_port = srv.http if TLS else srv.port
    url = "%s://127.0.0.1:%d/derp" % ("https" if TLS else "http", srv.port)
    bench = subprocess.Popen([os.path.join(BIN, "hderp-bench"), "--server", url, "--pairs", "4",
                              "--peers", str(PEERS), "--rate-mbps", "224", "--duration", "6",
                              "--warmup", "2", "--load", "client", "--json"] +
                             (["--insecure"] if TLS else []),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    new = None
    try:
        old = srv.pid
        for k in range(UPGRADES):  # ~0.5 s into the load, then ~0.1 s after each take-over
            flowed = 10000 if k == 0 else 1000 * (k + 1)  # a new process packs pairs early
            wait_for(lambda: (varz(varz_port, "derp_packets_received") or 0) > flowed,
                     "the bench's packets to flow through PID %d" % old, 60)
            os.kill(old, signal.SIGUSR2)
            wait_for(lambda: pid_file() not in (None, old), "the successor's pid file", 30)
            new = pid_file()
            wait_for(lambda: not os.path.exists("/proc/%d/exe" % old) or
                     (old == srv.pid and srv.proc.poll() is not None),
                     "PID %d to exit after its upgrade" % old, 30)
            old = new
        out, err = bench.communicate(timeout=120)
        if bench.returncode != 0:
            raise AssertionError("hderp-bench failed (%d): %s" % (bench.returncode, err[-2000:]))
        total = json.loads(out)["total"]
        lines = re.findall(r"handed over (\d+) clients to PID \d+ \((\d+) closed: could not "
                           r"move; (\d+) packets dropped on the way\); it took (-?\d+); this "
                           r"process dropped (\d+) packets in all \(derp_packets_dropped\), (\d+) "
                           r"for unknown keys", srv.log_text())
        if len(lines) != UPGRADES:
            raise AssertionError("%d hand-over summaries in the log, expected %d" % (
                len(lines), UPGRADES))
        for handed, closed, on_way, took, _, _ in lines:
            if int(handed) != PEERS or int(took) != PEERS or int(closed) != 0:
                raise AssertionError("handed over %s, taken %s, closed %s of %d clients" % (
                    handed, took, closed, PEERS))
        on_way = sum(int(x[2]) for x in lines)
        old_known = sum(int(x[4]) - int(x[5]) for x in lines)
        new_known = dropped(varz_port, False)
        print("bench: sent %d received %d lost %d reordered %d; %d upgrades of %d clients, %d "
              "packets dropped on the way; dropped for known keys: old processes %d, last %d" % (
                  total["sent"], total["received"], total["lost"], total["reordered"], UPGRADES,
                  PEERS, on_way, old_known, new_known))
        for k in ("reordered", "duplicated", "misrouted", "corrupt"):
            if total.get(k, 0) != 0:
                raise AssertionError("%d packets %s through the upgrade" % (total[k], k))
        # Lost: in flight at a hand-over (on_way), or dropped at a full queue (the bench's
        # receivers fell behind on a busy machine); never for a key the relay lost track of.
        if total["lost"] > on_way + old_known + new_known:
            raise AssertionError("%d packets lost, but only %d dropped on the way and %d + %d "
                                 "dropped for known keys" % (total["lost"], on_way, old_known,
                                                            new_known))
        print("PASS: an upgrade under load (%s): no client closed, every lost packet counted" %
              MODE)
    except AssertionError as e:
        print("FAIL: %s\n--- server.log\n%s" % (e, srv.log_text()[-6000:]))
        sys.exit(1)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        if new:
            try:
                os.kill(new, signal.SIGTERM)
                wait_for(lambda: not os.path.exists("/proc/%d" % new), "PID %d to exit" % new, 30)
            except ProcessLookupError:
                pass
        stop_pid(srv.proc)


main()
