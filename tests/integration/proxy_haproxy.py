#!/usr/bin/env python3
"""proxy_haproxy.py BIN WORK plain|tls - hderp-server behind a real haproxy (TCP mode) with
--proxy-protocol-from: haproxy connects from 127.0.0.77 with send-proxy-v2 (one frontend) and
send-proxy (v1, another), clients connect to haproxy from 127.0.0.55 / .56. Checked: two DERP
clients log in through each frontend and exchange packets; admission (-verify-client-url, a
controller in this script) sees the client's address as Source, not haproxy's; /debug/varz through
haproxy is allowed (the client is loopback) and counts the headers; a direct connection from an
untrusted address is refused and logged; from the trusted address, a header sent byte by byte
works and garbage is closed with a named reason in the log. In tls mode hderp terminates TLS
behind haproxy (-certmode manual). Everything on loopback, stopped by PID; bounded waits."""
import json, os, socket, ssl, struct, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from derp_pyclient import frame, keypair, readn, seal  # the tests' own DERP client pieces
from testlib import Server, hold_port, localhost_cert, stop_pid, wait_for

BIN, WORK, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
TLS = MODE == "tls"
PROXY_SRC, CLIENT_V2, CLIENT_V1 = "127.0.0.77", "127.0.0.55", "127.0.0.56"
sources = []  # admission requests' Source fields


class Controller(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        sources.append(body.get("Source", ""))
        out = json.dumps({"Allow": True}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):
        pass


def dial(port, src, prefix=b"", split=False):
    """A connection to port from src; prefix (a PROXY header) sent first, byte by byte if split;
    then TLS when in tls mode."""
    s = socket.socket()
    s.settimeout(10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    if split:
        for b in prefix:
            s.sendall(bytes([b]))
            time.sleep(0.002)
    elif prefix:
        s.sendall(prefix)
    if TLS:
        ctx = ssl.create_default_context(cafile=os.path.join(WORK, "localhost.crt"))
        s = ctx.wrap_socket(s, server_hostname="localhost")
    return s


def login(port, src):
    pk, sk = keypair()
    s = dial(port, src)
    s.sendall(b"GET /derp HTTP/1.1\r\nHost: localhost\r\nUpgrade: DERP\r\n"
              b"Connection: Upgrade\r\nDerp-Fast-Start: 1\r\n\r\n")
    t, p = frame(s)
    assert t == 1 and p[:8] == b"DERP\xf0\x9f\x94\x91", (t, p)
    nonce = os.urandom(24)
    ci = pk + nonce + seal(b'{"version":2}', nonce, p[8:40], sk)
    s.sendall(bytes([2]) + struct.pack(">I", len(ci)) + ci)
    t, _ = frame(s)
    assert t == 3, "no ServerInfo (frame type %d)" % t
    return s, pk


def http_get(s, path):
    s.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n" % path).encode())
    d = b""
    try:
        while True:
            x = s.recv(65536)
            if not x:
                break
            d += x
    except (OSError, ssl.SSLError):
        pass
    return d


def relay_through(port, src):
    a, apk = login(port, src)
    b, bpk = login(port, src)
    for i in range(20):
        a.sendall(bytes([4]) + struct.pack(">I", 32 + 8) + bpk + b"pkt %4d" % i)
    for i in range(20):
        while True:
            t, p = frame(b)
            if t == 5:
                break
        assert p[:32] == apk and p[32:] == b"pkt %4d" % i, p
    a.close()
    b.close()


def log_text():
    with open(os.path.join(WORK, "server.log"), errors="replace") as f:
        return f.read()


# tls mode: the v2 frontend routes by SNI as in docs/OPERATING.md (hderp's name to it, the rest elsewhere).
SNI_ROUTE = """    tcp-request inspect-delay 5s
    tcp-request content accept if { req_ssl_hello_type 1 }
    use_backend hderp_v2 if { req_ssl_sni -i localhost }
    default_backend nothing
"""


def start(procs, holds):
    os.makedirs(WORK, exist_ok=True)
    ctl = ThreadingHTTPServer(("127.0.0.1", 0), Controller)
    threading.Thread(target=ctl.serve_forever, daemon=True).start()
    args = ["-a", "127.0.0.1:0", "-c", WORK + "/derper.key",
            "-stun=false", "--shards", "2", "--proxy-protocol-from", PROXY_SRC + "/32,::1",
            "-verify-client-url", "http://127.0.0.1:%d/" % ctl.server_address[1]]
    if TLS:
        localhost_cert(WORK)
        args += ["-certmode", "manual", "-certdir", WORK, "-hostname", "localhost",
                 "-http-port", "-1"]
    srv = Server(BIN, WORK, "server", args)
    procs.append(srv)
    p = srv.start().port
    # haproxy reads its ports from its configuration and cannot say which it bound: they are
    # held (hold_port) for the whole run, and haproxy's listeners (SO_REUSEADDR) bind beside.
    (h2, hp2), (h1, hp1) = hold_port(), hold_port()
    holds += [h2, h1]
    cfg = """global
    maxconn 200
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend v2
    bind 127.0.0.1:%d
%sbackend hderp_v2
    server hderp 127.0.0.1:%d send-proxy-v2 source %s
frontend v1
    bind 127.0.0.1:%d
    default_backend hderp_v1
backend hderp_v1
    server hderp 127.0.0.1:%d send-proxy source %s
backend nothing
""" % (hp2, SNI_ROUTE if TLS else "    default_backend hderp_v2\n", p, PROXY_SRC, hp1, p, PROXY_SRC)
    with open(WORK + "/haproxy.cfg", "w") as f:
        f.write(cfg)
    hlog = open(WORK + "/haproxy.log", "w")
    procs.append(subprocess.Popen(["haproxy", "-db", "-f", WORK + "/haproxy.cfg"], stdout=hlog,
                                  stderr=subprocess.STDOUT))  # stopped by PID below
    return p, hp2, hp1


def answered(port, src, prefix=b"", split=False):
    try:
        return http_get(dial(port, src, prefix, split), "/derp/probe")
    except (OSError, ssl.SSLError):
        return b""


def checks(p, hp2, hp1):
    wait_for(lambda: answered(hp2, CLIENT_V2).startswith(b"HTTP/1.1 200"), "hderp via haproxy")
    for port, src in ((hp2, CLIENT_V2), (hp1, CLIENT_V1)):
        del sources[:]
        relay_through(port, src)
        assert len(sources) == 2 and all(x == src for x in sources), \
            "admission saw Source %s, want the client %s (not haproxy's %s)" % (
                sources, src, PROXY_SRC)
    # /debug is loopback-only: through haproxy the client (127.0.0.55) is what counts
    varz = http_get(dial(hp2, CLIENT_V2), "/debug/varz").decode(errors="replace")
    assert "HTTP/1.1 200" in varz, varz[:200]
    n = [l for l in varz.splitlines() if l.startswith("derp_proxy_headers ")]
    assert n and int(n[0].split()[1]) >= 6, "derp_proxy_headers: %s" % n
    # a direct connection from an address not in --proxy-protocol-from: refused, logged
    assert answered(p, "127.0.0.1") == b"", "an untrusted direct connection was answered"
    wait_for(lambda: "connection from 127.0.0.1:" in log_text() and
             "not in --proxy-protocol-from" in log_text(), "the untrusted-source log line")
    # from the trusted address: a v1 header byte by byte, then the request
    hdr = b"PROXY TCP4 192.0.2.9 127.0.0.1 4444 443\r\n"
    got = answered(p, PROXY_SRC, hdr, split=True)
    assert got.startswith(b"HTTP/1.1 200"), "split v1 header: %r" % got[:80]
    # garbage instead of a header: closed, and the log names why
    assert answered(p, PROXY_SRC, b"PROXY TCP4 999.1.1.1 1.1.1.1 1 2\r\n") == b""
    wait_for(lambda: "bad PROXY header (v1: address does not match the protocol)" in log_text(),
             "the bad-header log line")
    assert answered(p, PROXY_SRC, b"GET / HTTP/1.1\r\n\r\n") == b""
    wait_for(lambda: "bad PROXY header (not a PROXY header)" in log_text(), "garbage log line")
    varz = http_get(dial(hp2, CLIENT_V2), "/debug/varz").decode(errors="replace")
    for name, least in (("derp_proxy_untrusted_refused", 1), ("derp_proxy_bad_headers", 2)):
        n = [l for l in varz.splitlines() if l.startswith(name + " ")]
        assert n and int(n[0].split()[1]) >= least, "%s: %s" % (name, n)


def main():
    if subprocess.run(["sh", "-c", "command -v haproxy"], capture_output=True).returncode:
        sys.exit("haproxy is not installed: it is in GNUmakefile's PKGS (make deps)")
    procs, holds = [], []
    try:
        checks(*start(procs, holds))
        print("ok: hderp behind haproxy (%s): v2 and v1 clients relayed, admission and /debug "
              "saw the client, untrusted and bad headers refused" % MODE)
    except Exception:
        for name in ("server.log", "haproxy.log"):
            print("--- " + name)
            with open(os.path.join(WORK, name), errors="replace") as f:
                print(f.read()[-4000:])
        raise
    finally:
        codes = [x.stop() if isinstance(x, Server) else stop_pid(x, 10) for x in procs]
        for h in holds:
            h.close()
    if codes[0] != 0:
        sys.exit("hderp-server exited %d" % codes[0])


main()
