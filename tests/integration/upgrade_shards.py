#!/usr/bin/env python3
"""upgrade_shards.py BIN WORK - an upgrade to a successor with another shard count (its default,
one shard per CPU it may run on: the test narrows and widens the server's CPU affinity, which
the successor inherits): 1 shard -> 2 shards -> 1 shard, with 40 logged-in clients in 20 pairs
that keep their connections (each moves to its key's owner shard in the new process, whatever
the count) and relay before and after each upgrade. Needs 2 CPUs (skipped otherwise). The server
is stopped by PID."""
import os, shutil, signal, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import derp_pyclient as dc
from testlib import Server, stop_pid, wait_for

BIN, WORK = sys.argv[1], sys.argv[2]
PAIRS = 20
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
PIDF = os.path.join(WORK, "hderp.pid")
if len(os.sched_getaffinity(0)) < 2:
    print("SKIP: needs 2 CPUs")
    sys.exit(77)


def pid_file():
    try:
        with open(PIDF) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def exchange(clients, tag):
    for i in range(PAIRS):
        (a, apk), (b, bpk) = clients[2 * i], clients[2 * i + 1]
        dc.send(a, bpk, b"%s %d" % (tag, i))
        dc.send(b, apk, b"%s back %d" % (tag, i))
    for i in range(PAIRS):
        (a, apk), (b, bpk) = clients[2 * i], clients[2 * i + 1]
        if dc.recv_packet(b) != (apk, b"%s %d" % (tag, i)) or \
                dc.recv_packet(a) != (bpk, b"%s back %d" % (tag, i)):
            raise AssertionError("pair %d did not relay %s" % (i, tag))


def upgrade(pid, cpus, shards, log, k):
    """Sets the CPUs of every thread of pid, SIGUSR2, waits for the k-th successor to take the
    clients; checks its shard count; returns its PID."""
    for t in os.listdir("/proc/%d/task" % pid):
        os.sched_setaffinity(int(t), cpus)
    os.kill(pid, signal.SIGUSR2)
    wait_for(lambda: pid_file() not in (None, pid), "the successor's pid file", 30)
    took = "took over %d clients" % (2 * PAIRS)
    wait_for(lambda: log().count(took) >= k, "upgrade %d: '%s'" % (k, took), 30)
    started = [x for x in log().splitlines() if ": listening on " in x]
    if len(started) != k + 1 or (", %d shards," % shards) not in started[-1]:
        raise AssertionError("upgrade %d: the successor does not run %d shards" % (k, shards))
    return pid_file()


def main():
    os.sched_setaffinity(0, {0})  # the first server inherits it: 1 shard
    srv = Server(BIN, WORK, "server", ["-a", "127.0.0.1:0", "-stun-port", "-1", "-c",
                                       os.path.join(WORK, "key"), "--pid-file", PIDF]).start()
    os.sched_setaffinity(0, {0, 1})
    pid, pids = srv.pid, [srv.pid]
    try:
        if ", 1 shards," not in srv.log_text():
            raise AssertionError("the first server does not run 1 shard")
        clients = [dc.connect(srv.port) for _ in range(2 * PAIRS)]
        exchange(clients, b"one")
        new = upgrade(pid, {0, 1}, 2, srv.log_text, 1)
        pids.append(new)
        wait_for(lambda: srv.proc.poll() is not None, "the old process to exit", 30)
        exchange(clients, b"two")
        newer = upgrade(new, {0}, 1, srv.log_text, 2)
        pids.append(newer)
        wait_for(lambda: not os.path.exists("/proc/%d" % new), "PID %d to exit" % new, 30)
        exchange(clients, b"three")
        for s, _ in clients:
            if dc.closed(s, 0.05):
                raise AssertionError("a client's connection was closed")
        print("PASS: 40 clients kept their connections through 1 -> 2 -> 1 shards")
    except AssertionError as e:
        print("FAIL: %s\n--- server.log\n%s" % (e, srv.log_text()))
        sys.exit(1)
    finally:
        for p in pids[1:]:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass
        stop_pid(srv.proc)


main()
