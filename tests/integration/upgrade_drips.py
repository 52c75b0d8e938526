#!/usr/bin/env python3
"""upgrade_drips.py BIN WORK - an upgrade beside slow drips (issue 24 item 3): DRIPS connections
to a real hderp-server that drip an HTTP request head one byte every DRIP_S (never finishing it;
--http-deadline is set far beyond the test, so no deadline ends them) and PAIRS pairs of
logged-in clients that relay. Then SIGUSR2: the old process must hand its clients over and exit
while every drip is still open (it used to wait until they closed, up to 30 s): its log says
that when it stopped, after the hand-over, DRIPS connections were not logged in yet (the drips:
none had closed), and the drips are closed after (by its stop). The logged-in clients kept their
connections and relay through the successor. The servers are stopped by PID."""
import os, re, shutil, signal, socket, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import derp_pyclient as dc  # the independent DERP client of these tests
from testlib import Server, Timeout, pid_gone, read_pid_file, stop_pid, varz, wait_for

BIN, WORK = sys.argv[1], sys.argv[2]
DRIPS, PAIRS = 100, 20
DRIP_S = 2.0  # one byte per drip connection this often (the "slow drip")
# Bounds for a hang, not figures. The hand-over of 40 clients takes well under a second; the old
# process used to wait for the drips (at most SRV_UPGRADE_DRAIN_MS, 30 s, with this deadline),
# so HANDOVER_S must stay below that for the test to tell.
HANDOVER_S, CLOSED_S = 20, 10
HEAD = b"GET /derp/probe HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 4096
STOPPING = re.compile(r"upgrade: stopping: (\d+) connections not logged in yet are closed")
HANDED = re.compile(r"upgrade: handed over (\d+) clients to PID (\d+) \((\d+) closed")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
PIDF = os.path.join(WORK, "hderp.pid")


class Drips:
    """DRIPS connections, each sending HEAD's next byte every DRIP_S (all at once, so the test
    loop can drip while it waits)."""

    def __init__(self, port):
        self.socks = [socket.create_connection(("127.0.0.1", port), timeout=10)
                      for _ in range(DRIPS)]
        self.sent, self.next_s = 0, 0.0

    def tick(self):
        if time.monotonic() < self.next_s:
            return
        self.next_s = time.monotonic() + DRIP_S
        for s in self.socks:
            try:
                s.send(HEAD[self.sent:self.sent + 1])
            except OSError:
                pass  # closed: the old process's log says whether before its hand-over ended
        self.sent += 1

    def all_closed(self):
        """True once the server closed every one (EOF or reset)."""
        for s in self.socks:
            s.settimeout(CLOSED_S)
            try:
                if s.recv(1):
                    return False  # an answer: the request head was never finished
            except socket.timeout:
                return False
            except OSError:
                pass
        return True


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


def main():
    srv = Server(BIN, WORK, "server", ["-a", "127.0.0.1:0", "-stun-port", "-1", "-c",
                                       os.path.join(WORK, "key"), "--pid-file", PIDF,
                                       "--http-deadline", "600s"]).start()
    pids = [srv.pid]
    try:
        drips = Drips(srv.port)
        drips.tick()
        clients = [dc.connect(srv.port) for _ in range(2 * PAIRS)]
        exchange(clients, b"before")
        # the drips and this varz request are the old process's connections not logged in
        wait_for(lambda: varz(srv.port, "hderp_prelogin_conns") == DRIPS + 1,
                 "%d connections not logged in" % (DRIPS + 1))

        def dripped():
            drips.tick()
            return drips.sent >= 3
        wait_for(dripped, "the drips' first bytes", 30, step_s=0.02)  # they drip a while first
        os.kill(srv.pid, signal.SIGUSR2)

        def old_exited():
            if srv.proc.poll() is not None:
                return True
            drips.tick()  # dripping on while the upgrade runs
            return False
        try:
            wait_for(old_exited, "the old process to exit beside %d drips" % DRIPS, HANDOVER_S,
                     step_s=0.02)
        except Timeout as e:
            raise AssertionError("%s: it waits for connections not logged in" % e)
        if srv.proc.returncode != 0:
            raise AssertionError("the old process exited with %d" % srv.proc.returncode)
        new = read_pid_file(PIDF)
        if new in (None, srv.pid):
            raise AssertionError("the pid file does not name a successor: %r" % new)
        pids.append(new)
        log = srv.log_text()
        m = STOPPING.search(log)
        if not m or int(m.group(1)) != DRIPS:
            raise AssertionError("the old process did not close the %d drips at its stop: %s" % (
                DRIPS, m.group(0) if m else "no 'stopping' line"))
        h = HANDED.search(log)
        if not h or int(h.group(1)) != 2 * PAIRS or int(h.group(3)) != 0:
            raise AssertionError("not every client was handed over: %s" % (
                h.group(0) if h else "no 'handed over' line"))
        if not drips.all_closed():
            raise AssertionError("a drip is still open after the old process exited")
        exchange(clients, b"after")
        for s, _ in clients:
            if dc.closed(s, 0.05):
                raise AssertionError("a client's connection was closed")
        print("PASS: the old process handed %d clients over and exited beside %d open drips "
              "(%d bytes each); they relay through PID %d" % (2 * PAIRS, DRIPS, drips.sent, new))
    except AssertionError as e:
        print("FAIL: %s\n--- server.log\n%s" % (e, srv.log_text()))
        sys.exit(1)
    finally:
        succ = read_pid_file(PIDF)  # also when the test failed before it noted the successor
        if succ not in (None, srv.pid) and succ not in pids:
            pids.append(succ)
        for p in pids[1:]:
            if not pid_gone(p):
                os.kill(p, signal.SIGTERM)
                wait_for(lambda: pid_gone(p), "PID %d to exit" % p, 15)
        stop_pid(srv.proc)


main()
