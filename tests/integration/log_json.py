#!/usr/bin/env python3
"""log_json.py BIN WORK - hderp-server --log-format json: every line the server writes while it
runs parses as one JSON object with time, level, shard, event and msg. Two runs on loopback,
stopped by PID: plain with --verbose and --proxy-protocol-from (start-up, a PROXY header and a
DERP login through it, an untrusted source, a bad header, a bad HTTP request, a burst of them
that the rate limit folds into a "suppressed" count, SIGHUP, SIGTERM); TLS with a DNS
-hostname, where handshakes carry hostile SNI bytes (quotes, backslashes, invalid UTF-8)."""
import json, os, signal, socket, ssl, struct, sys

from testlib import Server, localhost_cert, wait_for

BIN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)


def exchange(port, data, src="127.0.0.1"):
    s = socket.socket()
    s.settimeout(5)
    s.bind((src, 0))
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(data)
        out = b""
        while True:
            x = s.recv(65536)
            if not x:
                return out
            out += x
    except OSError:
        return b""
    finally:
        s.close()


def lines_of(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8").splitlines()  # invalid UTF-8 would raise here


def check_lines(path, want_events):
    events, sup = set(), 0
    lines = lines_of(path)
    assert lines, "no log lines"
    for i, line in enumerate(lines):
        try:
            o = json.loads(line)
        except ValueError as e:
            raise AssertionError("line %d is not JSON (%s): %r" % (i + 1, e, line))
        for k in ("time", "level", "shard", "event", "msg"):
            assert isinstance(o.get(k), str), "line %d has no %s: %r" % (i + 1, k, line)
        assert o["level"] in ("ERROR", "WARN", "INFO", "DEBUG"), line
        events.add(o["event"])
        sup += o.get("suppressed", 0)
    missing = set(want_events) - events
    assert not missing, "no %s lines among %s" % (sorted(missing), sorted(events))
    return len(lines), sup


def run(name, args, actions, reloaded=None):
    """Starts the server (WORK/name.log), runs actions(port), SIGHUP, SIGTERM: exit 0.
    reloaded: a text the SIGHUP's reload logs, waited for before the stop (plain mode's reload
    has nothing to reload and logs nothing; the main thread reads SIGHUP before a SIGTERM
    sent after it anyway: same signalfd, lower signal number)."""
    srv = Server(BIN, WORK, name, args).start()
    try:
        actions(srv.port)
        before = srv.log_text().count(reloaded) if reloaded else 0
        srv.proc.send_signal(signal.SIGHUP)
        if reloaded:
            wait_for(lambda: srv.log_text().count(reloaded) > before, "the reload's log line")
        rc = srv.stop()
        assert rc == 0, "exit %s" % rc
    finally:
        srv.kill()


def plain():
    path = WORK + "/plain.log"

    def actions(p):
        hdr = b"PROXY TCP4 192.0.2.10 127.0.0.1 5555 443\r\n"
        wait_for(lambda: exchange(p, hdr + b"GET /derp/probe HTTP/1.1\r\nHost: x\r\n"
                                  b"Connection: close\r\n\r\n", "127.0.0.77")
                 .startswith(b"HTTP/1.1 200"), "the server")
        assert exchange(p, b"GET / HTTP/1.1\r\n\r\n") == b""  # untrusted source
        exchange(p, b"PROXY TCP9 x\r\n", "127.0.0.77")  # a bad header
        for _ in range(40):  # over the limit (5 per 10 s window per call site and shard)
            exchange(p, b"PROXY bogus\r\n", "127.0.0.77")

        def folded():  # the next line let through says how many were held back
            exchange(p, b"PROXY bogus\r\n", "127.0.0.77")
            return "\"suppressed\":" in open(path).read()
        # The count rides on the first line of a later window (HD_LOG_RL_WINDOW_MS, 10 s).
        wait_for(folded, "a line with a suppressed count", 30)
        exchange(p, hdr + b"BREW / HTCPCP/1.0\r\n\r\n", "127.0.0.77")  # a bad request

    run("plain", ["-a", "127.0.0.1:0", "-c", WORK + "/plain.key", "-stun=false", "--shards", "2",
                  "--verbose", "--log-format", "json", "--proxy-protocol-from", "127.0.0.77"],
        actions)
    n, sup = check_lines(path, ["proxy", "log", "http"])
    assert sup > 0, "no rate-limited line carried a suppressed count"
    return n


def tls():
    path = WORK + "/tls.log"
    port = []  # the server's, for hello()
    localhost_cert(WORK)

    def hello(sni):
        s = socket.create_connection(("127.0.0.1", port[0]), timeout=5)
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        try:
            ctx.wrap_socket(s, server_hostname=sni).recv(1)
        except (OSError, ssl.SSLError, ValueError, UnicodeError):
            pass
        finally:
            s.close()

    def actions(p):
        port.append(p)
        wait_for(lambda: "listening" in open(path).read(), "the server")
        for sni in ("evil\"name", "back\\slash", "x" * 200, "nolocal"):
            hello(sni)
        exchange(p, b"\x16\x03\x01\x00\x05garbage")

    run("tls", ["-a", "127.0.0.1:0", "-c", WORK + "/tls.key", "-stun=false", "--shards", "1",
                "-certmode", "manual", "-certdir", WORK, "-hostname", "localhost", "-http-port",
                "-1", "--log-format", "json"], actions, reloaded="reloaded")
    n, _ = check_lines(path, ["tls", "log"])
    return n


a, b = plain(), tls()
print("ok: %d + %d log lines, every one a JSON object with the fields" % (a, b))
