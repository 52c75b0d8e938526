#!/usr/bin/env python3
"""accept_limit.py BIN WORK: -accept-connection-limit 1 -accept-connection-burst 5 on a real
hderp-server: of a quick burst of 10 connects the first 5 are answered (the bucket starts full)
and about as many more as the bucket refilled while the burst lasted (1 a second: the bound
follows the burst's own duration, so a slow machine cannot fail it), the rest are closed
unanswered; later it answers again; derp_accepts_rate_limited counts the refusals. Every wait
polls for its condition with a deadline. Stopped by PID."""
import os, socket, sys, time

from testlib import Server, wait_for

def get(port, path="/"):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        d = b""
        while True:
            x = s.recv(65536)
            if not x:
                return d
            d += x
    except OSError:
        return b""
    finally:
        s.close()

def main():
    work = sys.argv[2]
    os.makedirs(work, exist_ok=True)
    srv = Server(sys.argv[1], work, "server", ["-a", "127.0.0.1:0", "-stun=false", "--shards", "1",
                                               "-accept-connection-limit", "1",
                                               "-accept-connection-burst", "5"])
    srv.start()  # returns once every shard listens: nothing has taken a token yet
    port = srv.port
    try:
        t0 = time.monotonic()
        answered = sum(1 for _ in range(10) if get(port).startswith(b"HTTP/1.1"))
        took_s = time.monotonic() - t0
        # The burst of 5, plus 1 a second refilled while the burst ran (plus one for the
        # shard's clock, read once per tick).
        most = min(10, 5 + int(took_s) + 1)
        assert 5 <= answered <= most, "answered %d of 10 in %.2f s, expected 5 to %d" % (
            answered, took_s, most)
        # Refused connections take nothing: one is answered again once a token came back.
        wait_for(lambda: get(port).startswith(b"HTTP/1.1"), "an answer after the refusals", 20)
        # /debug/varz itself needs a token: asked until one is answered.
        varz = wait_for(lambda: get(port, "/debug/varz").decode(), "/debug/varz answered", 20)
        line = [l for l in varz.splitlines() if l.startswith("derp_accepts_rate_limited ")]
        assert line and int(line[0].split()[1]) >= 10 - answered, "counter: %s" % line
        print("ok: answered %d of 10 in %.2f s; %s" % (answered, took_s, line[0]))
    finally:
        srv.stop()

main()
