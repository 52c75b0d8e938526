#!/usr/bin/env python3
"""upgrade.py BIN WORK plain|tls - the zero-downtime upgrade's listener hand-over (issue 15
item 1, stage 1) on a real hderp-server started from a copy of the binary (so the test can
replace the file): while a prober opens new connections back to back (/derp/probe, plus STUN
and in TLS mode the -http-port listener), SIGUSR2 with a successor that exits at once, one that
never says it accepts (killed after --upgrade-timeout) and a binary that is gone each leave the
old process serving with its pid file unchanged; then `hderp-server upgrade --pid-file` with the
real binary moves the sockets to a new PID, the old PID exits, the new one upgrades once more
itself, and across all of it no connection was refused or went unanswered; systemd's notify
socket hears READY=1 once and MAINPID= of each successor. A client logged in
to the old process keeps its connection and relays to a client of the new one. Servers are
stopped by PID."""
import os, shutil, signal, socket, ssl, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import derp_pyclient as dc  # the independent DERP client of these tests
import testlib
from testlib import hold_port, pid_gone as gone, read_pid_file, stun_request
BIN, WORK, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
TLS = MODE == "tls"
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
EXE = os.path.join(WORK, "hderp-server")
PIDF = os.path.join(WORK, "hderp.pid")
LOG = os.path.join(WORK, "server.log")
pids = []  # every server PID seen, stopped by PID at the end


# The ports are named in the flags before the server starts (and the successors must get the
# same ones), so they are held (testlib.hold_port): the TCP holds for good, the UDP one until the
# first server's STUN sockets have the port.
(PORT_HOLD, PORT), (STUN_HOLD, STUN) = hold_port(), hold_port(socket.SOCK_DGRAM)
HTTP_HOLD, HTTP = hold_port() if TLS else (None, None)
CTX = ssl.create_default_context()
CTX.check_hostname, CTX.verify_mode = False, ssl.CERT_NONE


def log_text():
    with open(LOG, errors="replace") as f:
        return f.read()


def fail(msg):
    print("FAIL: " + msg + "\n--- server.log\n" + log_text())
    sys.exit(1)


def wait_for(cond, what, timeout=30.0):
    """testlib.wait_for, failing the test the way this script does (with the server's log)."""
    try:
        return testlib.wait_for(cond, what, timeout)
    except testlib.Timeout as e:
        fail(str(e))


def peer_gone(s):
    """The next PeerGone frame's (key, reason) on s, other frames skipped; None on a close."""
    try:
        while True:
            t, p = dc.frame(s)
            if t == 8:
                return p[:32], p[32] if len(p) > 32 else 0
    except (EOFError, OSError):
        return None


def connect(port=None, tls=TLS):
    s = socket.create_connection(("127.0.0.1", port or PORT), timeout=10)
    return CTX.wrap_socket(s, server_hostname="127.0.0.1") if tls else s


def probe(port=None, tls=TLS, path=b"/derp/probe", want=b"HTTP/1.1 200"):
    s = connect(port, tls)
    try:
        s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        d = b""
        while b"\r\n" not in d:
            x = s.recv(4096)
            if not x:
                break
            d += x
        return d.startswith(want)
    finally:
        s.close()


def stun_ok():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(2)
    try:
        for _ in range(5):  # UDP: a datagram may be lost, never refused
            txid, req = stun_request()
            u.sendto(req, ("127.0.0.1", STUN))
            try:
                d, _ = u.recvfrom(1024)
            except socket.timeout:
                continue
            if d[8:20] == txid and d[:2] == b"\x01\x01":
                return True
        return False
    finally:
        u.close()


class Prober(threading.Thread):
    """New connections back to back; every one must be answered."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop, self.ok, self.errors = threading.Event(), 0, []

    def run(self):
        i = 0
        while not self.stop.is_set():
            i += 1
            try:
                good = probe()
                if good and HTTP and i % 10 == 0:
                    good = probe(HTTP, False, b"/generate_204", b"HTTP/1.1 204")
                if good and i % 25 == 0:
                    good = stun_ok()
                if good:
                    self.ok += 1
                else:
                    self.errors.append("probe %d: no answer" % i)
            except OSError as e:
                self.errors.append("probe %d: %r" % (i, e))
            time.sleep(0.002)


def replace_exe(content=None):
    tmp = EXE + ".new"
    if content is None:
        shutil.copy2(os.path.join(BIN, "hderp-server"), tmp)
    else:
        with open(tmp, "w") as f:
            f.write(content)
        os.chmod(tmp, 0o755)
    os.replace(tmp, EXE)


def pid_file():
    return read_pid_file(PIDF)


def failed_attempt(server, content, line):
    before = log_text().count(line)
    if content == "":
        os.unlink(EXE)
    else:
        replace_exe(content)
    os.kill(server.pid, signal.SIGUSR2)
    wait_for(lambda: log_text().count(line) > before, "the log line '%s'" % line)
    if server.poll() is not None:
        fail("the old process exited after a failed upgrade (%s)" % line)
    if pid_file() != server.pid:
        fail("the pid file changed after a failed upgrade: %s" % pid_file())
    if not probe():
        fail("the old process does not answer after a failed upgrade")


def upgrade_cmd():
    r = subprocess.run([os.path.join(BIN, "hderp-server"), "upgrade", "--pid-file", PIDF,
                        "--timeout", "30s"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail("hderp-server upgrade: exit %d: %s%s" % (r.returncode, r.stdout, r.stderr))
    return pid_file()


def main():
    replace_exe()
    args = [EXE, "-a", "127.0.0.1:%d" % PORT, "-c", os.path.join(WORK, "key"), "--shards", "2",
            "-stun-port", str(STUN), "--pid-file", PIDF, "--upgrade-timeout", "2s"]
    if TLS:
        args += ["-certmode", "manual", "-hostname", "127.0.0.1", "-certdir",
                 os.path.join(WORK, "certs"), "-http-port", str(HTTP)]
    logf = open(LOG, "ab")
    # systemd's notify protocol (the packaged unit is Type=notify): READY=1 at start-up, then
    # MAINPID=<successor> from each process that hands over.
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = "hderp-upgrade-test-%d" % os.getpid()
    notify.bind("\0" + name)
    notify.settimeout(10)
    env = dict(os.environ, NOTIFY_SOCKET="@" + name)
    server = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env)
    pids.append(server.pid)
    wait_for(lambda: pid_file() == server.pid and probe_quiet(), "the first server")
    STUN_HOLD.close()  # the server's STUN sockets have the port: a hold would get datagrams
    if notify.recv(256) != b"READY=1":
        fail("no READY=1 for systemd at start-up")
    a, apk = dc.connect(PORT, CTX if TLS else None)
    if not TLS:  # a WebSocket client cannot move: a, which heard from it, must hear it went
        w, wpk = dc.ws_connect(PORT)
        dc.send(w, apk, b"from the websocket")
        if dc.recv_packet(a) != (wpk, b"from the websocket"):
            fail("the WebSocket client's packet did not arrive")
    prober = Prober()
    prober.start()
    failed_attempt(server, "#!/bin/sh\nexit 3\n", "exited before accepting")
    failed_attempt(server, "#!/bin/sh\nexec sleep 30\n", "not accepting within")
    failed_attempt(server, "", "cannot start")
    replace_exe()
    new = upgrade_cmd()
    pids.append(new)
    if new == server.pid:
        fail("the pid file still names the old process")
    try:
        rc = server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        fail("the old process did not exit after the upgrade")
    if rc != 0:
        fail("the old process exited with %d" % rc)
    # The old process's client moved with its connection (upgrade_live.py tests 1,000): it
    # relays to a client of the new process on the same socket; the WebSocket client was
    # closed, and the new process told a so (PeerGone, reason 0: disconnected).
    if not TLS:
        if not dc.closed(w):
            fail("the WebSocket client (it cannot move) was not closed")
        if peer_gone(a) != (wpk, 0):
            fail("no PeerGone for the WebSocket client that could not move")
    b, bpk = dc.connect(PORT, CTX if TLS else None)
    for i in range(50):
        dc.send(a, bpk, b"after %d" % i)
    for i in range(50):
        if dc.recv_packet(b) != (apk, b"after %d" % i):
            fail("packet %d from the new process's client not relayed in order" % i)
    newer = upgrade_cmd()  # the successor upgrades too (it holds the claims now)
    pids.append(newer)
    wait_for(lambda: gone(new), "PID %d to exit after the second upgrade" % new)
    told = [notify.recv(256), notify.recv(256)]
    if told != [b"MAINPID=%d" % new, b"MAINPID=%d" % newer]:
        fail("systemd was told %s, expected MAINPID=%d then %d" % (told, new, newer))
    wait_for(lambda: prober.ok > 200, "the prober's answers after the upgrades")
    prober.stop.set()
    prober.join()
    if prober.errors:
        fail("%d of %d connections not answered: %s" % (len(prober.errors),
             prober.ok + len(prober.errors), prober.errors[:5]))
    if log_text().count("upgrade: received") != 2:
        fail("expected two successors that received the sockets")
    print("ok (%s): %d connections answered through 3 failed upgrades and 2 upgrades, none "
          "refused; PIDs %d -> %d -> %d" % (MODE, prober.ok, server.pid, new, newer))


def probe_quiet():
    try:
        return probe()
    except OSError:
        return False


try:
    main()
finally:
    for pid in pids:
        if pid and not gone(pid):
            os.kill(pid, signal.SIGTERM)
    for pid in pids:
        try:
            testlib.wait_for(lambda: not pid or gone(pid), "PID %s to exit" % pid, 20)
        except testlib.Timeout:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
