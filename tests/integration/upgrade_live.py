#!/usr/bin/env python3
"""upgrade_live.py BIN WORK plain|tls - the zero-downtime upgrade with live clients (issue 15
item 1): 1,000 logged-in clients (PAIRS sender -> receiver pairs, keys of their own) and one
watcher (the mesh key, WatchConns) on a real hderp-server (--shards 2, started from a copy of
the binary, --pid-file; TLS mode with the localhost test certificate, verified) while every
sender sends sequence-numbered packets at a steady rate. Then SIGUSR2, twice (the successor
upgrades again). Each time, through the whole upgrade: no client connection sees a close, a
reset, a TLS error, a ServerKey, ServerInfo, Restarting or PeerGone; the watcher sees no
PeerGone and no second PeerPresent for any key; packets arrive in order; every packet sent after
the new process logged `upgrade: took over N clients from PID Q (F failed)` arrives; the ones
lost before it are at most D of the old process's `upgrade: handed over N clients to PID P (C
closed: could not move; D packets dropped on the way)` (both printed); N is 1,001 in both lines,
C and F are 0, each line is logged once; the old PID exits (the first one, a child of the
test, with 0), the pid file names P, and P relays for every pair. One selector loop (epoll) drives every socket; the sending rate is
RATE_HZ. Servers are stopped by PID, also on failure."""
import os, re, selectors, shutil, signal, ssl, struct, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import derp_pyclient as dc  # the independent DERP client of these tests
from testlib import STOP_S, hold_port, localhost_cert, pid_gone, read_pid_file

BIN, WORK, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
TLS = MODE == "tls"
EXE = os.path.join(WORK, "hderp-server")
PIDF = os.path.join(WORK, "hderp.pid")
LOG = os.path.join(WORK, "server.log")
MESH_KEY = "5b1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"

PAIRS = 500  # 1,000 clients: the figure
# Packets per second per sender: 5,000/s in all. One Python loop sends, receives (and in TLS mode
# encrypts and decrypts) all of them beside a sanitizer-built server on a shared 2-vCPU machine:
# at 10/s its worst backlog (printed) was 10-400 ms as the machine's load varied, at 20/s up to
# 0.6 s on the first try. Lag does not change what is checked (a packet counts as sent when it
# is written), only the load.
RATE_HZ = 10
PAYLOAD = 48  # bytes of a packet: pair index, sequence number, send time, padding
WARM_S = 1.0  # traffic before each upgrade
AFTER_S = 3.0  # traffic after the old process exited
# Bounds for a hang, not figures: a sanitizer build moving 1,001 connections on a loaded box.
LOGIN_S, UPGRADE_S, DRAIN_S = 60, 90, 30
STEP_S, CHECK_S = 0.005, 0.05  # select timeout; how often the log and pid file are read
PROBLEM_GRACE_S = 0.5  # after the first problem, to count the others before failing
EXPECT_N = 2 * PAIRS + 1  # the clients and the watcher

F_SERVER_KEY, F_SERVER_INFO, F_SEND, F_RECV, F_KEEPALIVE = 1, 3, 4, 5, 6
F_PEER_GONE, F_PEER_PRESENT, F_WATCH, F_PING, F_PONG, F_RESTARTING = 8, 9, 0x10, 0x12, 0x13, 0x15
# Frames a client continuing invisibly must never get after its login.
FORBIDDEN = {F_SERVER_KEY: "ServerKey", F_SERVER_INFO: "ServerInfo", F_PEER_GONE: "PeerGone",
             F_RESTARTING: "Restarting"}
TOOK = re.compile(r"upgrade: took over (\d+) clients from PID (\d+) \((\d+) failed\)")
HANDED = re.compile(r"upgrade: handed over (\d+) clients to PID (\d+) \((\d+) closed: could not "
                    r"move; (\d+) packets dropped on the way\)")
STARTED = re.compile(r"upgrade: started .* as PID (\d+)")
pids = []  # every server PID seen, stopped by PID at the end


class Failed(Exception):
    pass


class Log:
    """The servers' shared output file, read on as it grows."""

    def __init__(self, path):
        self.path, self.text, self.off = path, "", 0

    def refresh(self):
        with open(self.path, "rb") as f:
            f.seek(self.off)
            data = f.read()
        self.off += len(data)
        self.text += data.decode(errors="replace")
        return self.text

    def search(self, regex, start):
        return regex.search(self.refresh(), start)


class Conn:
    __slots__ = ("sock", "key", "name", "inb", "out", "closed", "on_frame", "pair")

    def __init__(self, sock, key, name, on_frame, pair=None):
        self.sock, self.key, self.name, self.on_frame, self.pair = sock, key, name, on_frame, pair
        self.inb, self.out, self.closed = bytearray(), bytearray(), None


class Loop:
    """Every connection non-blocking in one selector; problems are what must never happen."""

    def __init__(self, log):
        self.sel, self.log, self.conns = selectors.DefaultSelector(), log, []
        self.problems, self.first_problem, self.other = [], None, {}
        self.tick = None  # the traffic's sender, called every turn

    def add(self, conn):
        conn.sock.setblocking(False)
        self.sel.register(conn.sock, selectors.EVENT_READ, conn)
        self.conns.append(conn)
        return conn

    def problem(self, conn, text):
        self.problems.append((conn.name, text))
        if self.first_problem is None:
            self.first_problem = time.monotonic()

    def summary(self):
        """How many connections had each problem, and the first ones."""
        kinds = {}
        for _, text in self.problems:
            k = re.sub(r"[0-9a-f]{16,}|\d+", "N", text)
            kinds[k] = kinds.get(k, 0) + 1
        return "%d problems (%s); the first ones:\n  %s" % (
            len(self.problems), "; ".join("%d x %s" % (n, k) for k, n in kinds.items()),
            "\n  ".join("%s: %s" % p for p in self.problems[:12]))

    def close(self, conn, why):
        conn.closed = why
        self.problem(conn, "connection " + why)
        self.sel.unregister(conn.sock)

    def write(self, conn, data):
        """Sends data now or, when the socket is full, once it is writable (in order)."""
        if conn.closed:
            return
        pending = bool(conn.out)
        conn.out += data
        if pending:
            return
        self.flush(conn)
        if conn.out and not conn.closed:
            self.sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)

    def flush(self, conn):
        try:
            n = conn.sock.send(conn.out)  # TLS: all of it or SSLWantWriteError (retried)
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return
        except OSError as e:
            self.close(conn, "failed on send: %r" % e)
            return
        del conn.out[:n]

    def read(self, conn):
        while True:  # until the socket and (TLS) the decrypted buffer are empty
            try:
                d = conn.sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as e:  # a reset, a TLS record that does not decrypt
                self.close(conn, "failed on recv: %r" % e)
                return
            if not d:
                self.close(conn, "closed by the server (EOF)")
                return
            conn.inb += d
        b, i = conn.inb, 0
        while len(b) - i >= 5:
            n = int.from_bytes(b[i + 1:i + 5], "big")
            if len(b) - i - 5 < n:
                break
            conn.on_frame(conn, b[i], bytes(b[i + 5:i + 5 + n]))
            i += 5 + n
        del b[:i]

    def turn(self):
        if self.tick:
            self.tick()
        for k, ev in self.sel.select(STEP_S):
            conn = k.data
            if ev & selectors.EVENT_WRITE and not conn.closed:
                self.flush(conn)
                if not conn.out and not conn.closed:
                    self.sel.modify(conn.sock, selectors.EVENT_READ, conn)
            if ev & selectors.EVENT_READ and not conn.closed:
                self.read(conn)

    def pump(self, cond=None, bound_s=None, what=None, soft=False):
        """Runs the loop until cond() is true (returns it) or for bound_s; a problem fails the
        test (after PROBLEM_GRACE_S), and so does the bound when cond never held (unless
        soft: then None)."""
        deadline = time.monotonic() + bound_s
        next_check = 0.0
        while True:
            self.turn()
            now = time.monotonic()
            if self.first_problem is not None and now - self.first_problem >= PROBLEM_GRACE_S:
                raise Failed("while waiting for %s: %s" % (what, self.summary()))
            if now >= next_check:
                next_check = now + CHECK_S
                v = cond() if cond else None
                if v:
                    return v
            if now >= deadline:
                if cond and not soft:
                    raise Failed("timed out (%gs) waiting for %s" % (bound_s, what))
                return None


class Traffic:
    """PAIRS senders each sending RATE_HZ numbered packets a second to their receiver, spread
    evenly; receivers check the source, the order, and note the gaps."""

    def __init__(self, loop, senders, receivers):
        self.loop, self.senders, self.receivers = loop, senders, receivers
        self.next_seq = [0] * PAIRS  # per sender: the next sequence number to send
        self.expect = [0] * PAIRS  # per receiver: the next one it expects
        self.gaps = [[] for _ in range(PAIRS)]  # per receiver: missing [a, b) ranges
        self.sent_at = [[] for _ in range(PAIRS)]  # per sender: when each number was written
        self.n, self.t0, self.flowing, self.backlog = 0, 0.0, False, 0
        self.lat = []  # send-to-receive seconds of the packets of this round
        self.pad = bytes(PAYLOAD - 20)
        loop.tick = self.tick

    def start(self):
        self.t0 = time.monotonic() - self.n / (RATE_HZ * PAIRS)
        self.flowing = True

    def tick(self):
        if not self.flowing:
            return
        due = int((time.monotonic() - self.t0) * RATE_HZ * PAIRS)
        self.backlog = max(self.backlog, due - self.n)
        while self.n < due:
            i = self.n % PAIRS
            seq = self.next_seq[i]
            self.next_seq[i] = seq + 1
            self.n += 1
            now = time.monotonic()
            self.sent_at[i].append(now)
            data = struct.pack(">IQd", i, seq, now) + self.pad
            self.loop.write(self.senders[i], dc.frame_bytes(F_SEND, self.receivers[i].key + data))

    def on_packet(self, conn, p):
        i, seq, sent = struct.unpack(">IQd", p[32:52])
        if i != conn.pair or p[:32] != self.senders[i].key:
            self.loop.problem(conn, "a packet of pair %d from %s" % (i, p[:32].hex()[:16]))
            return
        if seq < self.expect[i]:
            self.loop.problem(conn, "packet %d after %d: out of order or twice" % (
                seq, self.expect[i] - 1))
            return
        if seq > self.expect[i]:
            self.gaps[i].append((self.expect[i], seq))
        self.expect[i] = seq + 1
        self.lat.append(time.monotonic() - sent)

    def drained(self):
        return all(self.expect[i] == self.next_seq[i] for i in range(PAIRS))

    def lost(self, lo, hi, t_sig):
        """Packets never received among the sequence numbers [lo[i], hi[i]) of each pair (the
        tail still missing included): (count, the first ranges as text: pair, numbers, when the
        first was sent relative to t_sig)."""
        total, where = 0, []
        for i in range(PAIRS):
            ranges = self.gaps[i] + [(self.expect[i], self.next_seq[i])]
            for a, b in ranges:
                a, b = max(a, lo[i]), min(b, hi[i])
                if b > a:
                    total += b - a
                    where.append("pair %d #%d-%d (sent %+.3f s)" % (
                        i, a, b - 1, self.sent_at[i][a] - t_sig))
        return total, ", ".join(where[:8]) or "none"


def on_client_frame(loop, traffic):
    def on_frame(conn, t, p):
        if t == F_RECV and conn.pair is not None:
            traffic.on_packet(conn, p)
        elif t == F_PING:
            loop.write(conn, dc.frame_bytes(F_PONG, p[:8]))
        elif t in FORBIDDEN:
            loop.problem(conn, "got %s %s" % (FORBIDDEN[t], p[:33].hex()))
        else:
            loop.other[t] = loop.other.get(t, 0) + 1
    return on_frame


class Watcher:
    """The mesh-key client that sent WatchConns: its snapshot must name every key (itself
    included) once, and after it nothing may come for any of them."""

    def __init__(self, loop, keys):
        self.loop, self.keys, self.present = loop, keys, set()
        self.snapshot = False

    def on_frame(self, conn, t, p):
        k = p[:32]
        if t == F_PEER_PRESENT and not self.snapshot:
            self.present.add(k)
            self.snapshot = self.present >= self.keys
        elif t == F_PEER_PRESENT:
            self.loop.problem(conn, "PeerPresent again for %s %s" % (
                "our key" if k in self.keys else "another key", k.hex()))
        elif t == F_PEER_GONE:
            self.loop.problem(conn, "PeerGone for %s %s" % (
                "our key" if k in self.keys else "another key", p.hex()))
        elif t == F_PING:
            self.loop.write(conn, dc.frame_bytes(F_PONG, p[:8]))
        elif t in FORBIDDEN:
            self.loop.problem(conn, "got %s" % FORBIDDEN[t])
        else:
            self.loop.other[t] = self.loop.other.get(t, 0) + 1


def start_server():
    shutil.copy2(os.path.join(BIN, "hderp-server"), EXE)
    with open(os.path.join(WORK, "mesh.key"), "w") as f:
        f.write(MESH_KEY + "\n")
    hold, port = hold_port()  # held for good: the successors get the same flags
    args = [EXE, "-a", "127.0.0.1:%d" % port, "-c", os.path.join(WORK, "key"), "--shards", "2",
            "-stun=false", "--pid-file", PIDF, "-mesh-psk-file", os.path.join(WORK, "mesh.key"),
            # No write deadline: one Python loop reads for 1,000 clients, and on a busy box (the
            # debug preset) it fell seconds behind; the relay then rightly closed receivers that
            # had not read for 2 s, which is not what this test is about.
            "-tcp-write-timeout", "0"]
    ctx = None
    if TLS:
        ctx = ssl.create_default_context(cafile=localhost_cert(WORK))
        args += ["-certmode", "manual", "-certdir", WORK, "-hostname", "localhost",
                 "-http-port", "-1"]
    with open(LOG, "ab") as logf:  # the successors inherit it
        server = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT)
    pids.append(server.pid)
    deadline = time.monotonic() + LOGIN_S
    while True:
        if server.poll() is not None:
            raise Failed("hderp-server exited with %d at start-up" % server.returncode)
        if read_pid_file(PIDF) == server.pid:
            try:
                dc.connect(port, ctx)[0].close()  # a client logs in: it serves
                return server, port, ctx, hold
            except (OSError, AssertionError, EOFError):
                pass
        if time.monotonic() > deadline:
            raise Failed("the server did not serve within %ds" % LOGIN_S)
        time.sleep(CHECK_S)


def log_in(loop, port, ctx):
    """The 1,000 clients (sender i and receiver i interleaved), then the watcher, whose
    snapshot is awaited."""
    senders, receivers, t0 = [], [], time.monotonic()
    for i in range(PAIRS):  # frames wait in the sockets until the loop runs
        s, k = dc.connect(port, ctx)
        senders.append(loop.add(Conn(s, k, "sender %d" % i, None)))
        s, k = dc.connect(port, ctx)
        receivers.append(loop.add(Conn(s, k, "receiver %d" % i, None, pair=i)))
    traffic = Traffic(loop, senders, receivers)
    on_frame = on_client_frame(loop, traffic)
    for c in senders + receivers:
        c.on_frame = on_frame
    keys = {c.key for c in senders + receivers}
    s, k = dc.connect(port, ctx, info={"meshKey": MESH_KEY})
    watcher = Watcher(loop, keys | {k})
    s.sendall(dc.frame_bytes(F_WATCH))
    loop.add(Conn(s, k, "watcher", watcher.on_frame))
    logged = time.monotonic() - t0
    loop.pump(lambda: watcher.snapshot, LOGIN_S, "the watcher's snapshot of %d keys" % EXPECT_N)
    print("%d clients and the watcher logged in (%.1f s); the watcher's snapshot has every key"
          % (2 * PAIRS, logged), flush=True)
    return traffic, watcher


def upgrade_round(r, old, first, loop, traffic, log):
    """SIGUSR2 to old while traffic flows; returns the new PID once every check held."""
    lo = list(traffic.next_seq)  # this round's packets: from here (the last one drained)
    traffic.lat, traffic.backlog = [], 0
    loop.pump(None, WARM_S)
    start_off = len(log.refresh())
    t_sig = time.monotonic()
    os.kill(old, signal.SIGUSR2)
    took = loop.pump(lambda: log.search(TOOK, start_off), UPGRADE_S,
                     "upgrade %d: the new process's 'took over' line" % r)
    mark, t_took = list(traffic.next_seq), time.monotonic()

    def handed_over():
        m = log.search(HANDED, start_off)
        return m if m and read_pid_file(PIDF) == int(m[2]) and pid_gone(old) else None
    handed = loop.pump(handed_over, UPGRADE_S, "upgrade %d: the old process's 'handed over' "
                       "line, the pid file naming the new PID and PID %d exiting" % (r, old))
    new = int(handed[2])
    pids.append(new)
    t_gone = time.monotonic()
    loop.pump(None, AFTER_S)
    traffic.flowing = False
    drained = loop.pump(traffic.drained, DRAIN_S, "every packet sent to arrive", soft=True)
    check_round(r, (old, new, first), log.text[start_off:], took, handed, traffic, lo, mark,
                (t_sig, t_took))
    lat = sorted(traffic.lat) or [0.0]
    print("upgrade %d: PID %d -> %d: 'took over' seen %.2f s after SIGUSR2, old PID gone %.2f s "
          "later; latency p50 %.1f ms, max %.0f ms; the sending loop's worst backlog %.0f ms%s"
          % (r, old, new, t_took - t_sig, t_gone - t_took, 1e3 * lat[len(lat) // 2],
             1e3 * lat[-1], 1e3 * traffic.backlog / (RATE_HZ * PAIRS),
             "" if drained else " (not drained)"), flush=True)
    traffic.start()
    return new


def check_round(r, procs, text, took, handed, traffic, lo, mark, times):
    """The log lines' figures and the packets of this round (lo: its first numbers, mark: the
    first ones sent after 'took over' was seen; times: SIGUSR2's and that moment)."""
    (old, new, first), (t_sig, t_took) = procs, times
    what = "upgrade %d (PID %d -> %d)" % (r, old, new)
    errors = []
    n_took, q, failed = int(took[1]), int(took[2]), int(took[3])
    n_handed, closed, dropped = int(handed[1]), int(handed[3]), int(handed[4])
    if (n_took, q, failed) != (EXPECT_N, old, 0):
        errors.append("'%s': want %d clients from PID %d, 0 failed" % (took[0], EXPECT_N, old))
    if (n_handed, closed) != (EXPECT_N, 0):
        errors.append("'%s': want %d clients, 0 closed" % (handed[0], EXPECT_N))
    for regex in (TOOK, HANDED):
        if len(regex.findall(text)) != 1:
            errors.append("%d lines like '%s' (want 1)" % (len(regex.findall(text)),
                                                            regex.pattern[:30]))
    if first is not None and first.wait(STOP_S) != 0:
        errors.append("the old process exited with %s" % first.returncode)
    before, where_b = traffic.lost(lo, mark, t_sig)
    after, where_a = traffic.lost(mark, traffic.next_seq, t_sig)
    sent = sum(traffic.next_seq) - sum(lo)
    print("%s: %d packets sent; lost before 'took over' (seen %.3f s after SIGUSR2): %d (%s); "
          "the old process's D: %d; lost after it: %d (%s)" % (
              what, sent, t_took - t_sig, before, where_b, dropped, after, where_a), flush=True)
    if before > dropped:
        errors.append("%d packets lost before 'took over', more than D = %d" % (before, dropped))
    if after:
        errors.append("%d packets sent after 'took over' never arrived: %s" % (after, where_a))
    silent = [i for i in range(PAIRS) if traffic.expect[i] <= mark[i]]
    if silent:
        errors.append("PID %d relayed nothing for %d pairs (%s...)" % (new, len(silent),
                                                                     silent[:8]))
    if errors:
        raise Failed(what + ":\n  " + "\n  ".join(errors))


def stop_all(server):
    """Every server PID seen (the pid file's, the log's 'started' ones too) by PID: SIGTERM,
    then SIGKILL after STOP_S."""
    seen = pids + [read_pid_file(PIDF)]
    try:
        seen += [int(p) for p in STARTED.findall(Log(LOG).refresh())]
    except OSError:
        pass
    seen = [p for p in dict.fromkeys(seen) if p]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in seen:
            if not pid_gone(pid):
                os.kill(pid, sig)
        deadline = time.monotonic() + STOP_S
        while any(not pid_gone(p) for p in seen) and time.monotonic() < deadline:
            time.sleep(CHECK_S)
    if server is not None:
        server.wait()


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    server, loop = None, None
    try:
        server, port, ctx, hold = start_server()
        log = Log(LOG)
        loop = Loop(log)
        traffic, watcher = log_in(loop, port, ctx)
        traffic.start()
        mid = upgrade_round(1, server.pid, server, loop, traffic, log)
        last = upgrade_round(2, mid, None, loop, traffic, log)
        print("ok (%s): %d clients and a watcher stayed connected through 2 upgrades (PIDs %d "
              "-> %d -> %d), %d packets; other frames seen: %s" % (
                  MODE, 2 * PAIRS, server.pid, mid, last, traffic.n, loop.other or "none"))
        hold.close()
    except Failed as e:
        tail = Log(LOG).refresh()[-6000:] if os.path.exists(LOG) else ""
        print("FAIL (%s): %s\n--- server.log (tail)\n%s" % (MODE, e, tail), flush=True)
        sys.exit(1)
    finally:
        for c in loop.conns if loop else []:
            c.sock.close()
        stop_all(server)


if __name__ == "__main__":
    main()
