"""testlib.py - shared pieces of the Python integration tests (as lib.sh is for the scripts): a
bounded wait for a condition, hderp-server started on port 0 with the ports it bound read back
(--port-file), a port held for a program whose port must be known before it starts, stop by
PID, a pid file and whether a PID is gone, /debug/varz, the localhost test certificate.
Imported by the scripts beside it (their own directory is on sys.path)."""
import os
import signal
import socket
import struct
import subprocess
import time
import urllib.request
import zlib

# Start-up of a sanitizer build on a loaded 2-core machine: generous, only a failure waits.
START_S = 15
# SIGTERM to exit: the server flushes and closes every connection (write timeouts 2 s).
STOP_S = 15
POLL_S = 0.05


class Timeout(AssertionError):
    """A wait_for that ran out: what it waited for is the message."""


def wait_for(cond, what, timeout_s=10, step_s=POLL_S):
    """Calls cond() every step_s until it returns something true and returns that; raises
    Timeout naming what after timeout_s (a bound for a hang, not a performance figure)."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise Timeout("timed out (%gs) waiting for %s" % (timeout_s, what))
        time.sleep(step_s)


def hold_port(kind=socket.SOCK_STREAM):
    """A port for a program that must be told its port before it starts (a -mesh-with list naming
    every node, a DERP map or config file written first): 127.0.0.1:0 bound with SO_REUSEADDR,
    never listening. Keep the socket until the program listens (or for good): nothing else is
    given the port meanwhile (the kernel never hands out a bound port for port 0, and a plain
    explicit bind conflicts), while a listener that sets SO_REUSEADDR itself (hderp-server's,
    Go's, haproxy's, http.server's) binds beside it. Close a UDP hold once the program bound the
    port: it would get a share of the datagrams. Returns (socket, port)."""
    s = socket.socket(socket.AF_INET, kind)
    if kind == socket.SOCK_STREAM:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    if kind == socket.SOCK_DGRAM:  # after the bind: UDP's port 0 search would share a port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # with SO_REUSEADDR sockets
    return s, s.getsockname()[1]


def read_port_file(path):
    """{name: port} from an --port-file ("NAME ADDRESS" lines), or None while it is missing."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return None
    return {n: int(a.rsplit(":", 1)[1]) for n, a in (x.split() for x in lines if x)}


class Server:
    """A real hderp-server started with --port-file: give it port 0 (-a 127.0.0.1:0, -stun-port
    0, -http-port 0) or a held port. port (-a), http (-http-port in TLS mode) and stun are the
    ports it bound, None when it has none; log is its output file (a restart appends to it).
    Stopped by PID."""

    def __init__(self, bin_dir, work, name, args, env=None, binary=None):
        self.name, self.log = name, os.path.join(work, name + ".log")
        self.port_file = os.path.join(work, name + ".ports")
        self.binary = binary or os.path.join(bin_dir, "hderp-server")
        self.args, self.env, self.proc = list(args), env, None  # args may change for a restart
        self.port = self.http = self.stun = None

    def start(self, timeout_s=START_S):
        """Starts it and waits until every shard listens; raises AssertionError (with the log's
        tail) if it exits first or does not listen within timeout_s."""
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        with open(self.log, "a" if self.proc else "w") as log:  # a restart: appended
            self.proc = subprocess.Popen([self.binary] + self.args + ["--port-file", self.port_file],
                                         stdout=log, stderr=subprocess.STDOUT, env=self.env)

        def listening():
            if self.proc.poll() is not None:
                raise AssertionError("hderp-server %s exited with %d before it listened:\n%s" % (
                    self.name, self.proc.returncode, self.log_text()[-4000:]))
            return read_port_file(self.port_file)
        try:
            ports = wait_for(listening, "hderp-server %s to listen" % self.name, timeout_s)
        except Timeout:
            self.kill()
            raise
        self.port, self.http, self.stun = ports["derp"], ports.get("http"), ports.get("stun")
        return self

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self, timeout_s=STOP_S):
        """SIGTERM by PID and wait (then SIGKILL); returns the exit status (a signal: -signo)."""
        return stop_pid(self.proc, timeout_s)

    def kill(self):
        """SIGKILL by PID (a crash), reaped."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def varz(self, name=None, port=None):
        """This server's /debug/varz over plain HTTP on port (default: -a's; TLS mode needs the
        http port): see varz()."""
        return varz(port or self.port, name)


def stop_pid(proc, timeout_s=STOP_S):
    """SIGTERM to a subprocess.Popen by its PID, wait up to timeout_s (then SIGKILL); returns its
    exit status (-signo for a signal), None when it was never started."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def read_pid_file(path):
    """The PID a --pid-file names, or None while it is missing or being written."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def pid_gone(pid):
    """True once pid has exited (a zombie not reaped by its parent counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def varz(port, name=None, host="127.0.0.1", ca=None):
    """GET http://host:port/debug/varz (with ca, a CA file: https://localhost:port, verified
    against it): {series: value} (labels are part of a series' name), or the value of the series
    named exactly name (None when there is no such series or no answer)."""
    url, ctx = "http://%s:%d/debug/varz" % (host, port), None
    if ca:
        import ssl
        url, ctx = "https://localhost:%d/debug/varz" % port, ssl.create_default_context(cafile=ca)
    try:
        with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
            text = r.read().decode()
    except OSError:
        return None if name else {}
    series = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#"):
            try:
                series[parts[0]] = int(parts[1])
            except ValueError:
                try:
                    series[parts[0]] = float(parts[1])
                except ValueError:
                    pass  # not a number: not a series
    return series.get(name) if name else series


def localhost_cert(work):
    """The TLS tests' certificate: a self-signed P-256 one for localhost (CN and DNS SAN),
    work/localhost.crt and work/localhost.key (-certmode manual -certdir work -hostname
    localhost). Returns the .crt's path (a client's CA file)."""
    crt = os.path.join(work, "localhost.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-keyout",
                    os.path.join(work, "localhost.key"), "-out", crt, "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    return crt


def stun_request():
    """A STUN binding request as Tailscale's client sends it (RFC 5389: SOFTWARE "tailnode",
    FINGERPRINT): (transaction id, datagram)."""
    txid = os.urandom(12)
    attrs = struct.pack(">HH", 0x8022, 8) + b"tailnode"
    head = struct.pack(">HHI", 0x0001, len(attrs) + 8, 0x2112A442) + txid
    crc = zlib.crc32(head + attrs) ^ 0x5354554E
    return txid, head + attrs + struct.pack(">HHI", 0x8028, 4, crc)
