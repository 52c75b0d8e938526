#!/usr/bin/env python3
"""accept_limit.py BIN WORK: -accept-connection-limit 1 -accept-connection-burst 5 on a real
hderp-server: of a quick burst of 10 connects about 5 are answered, the rest closed unanswered;
after ~2.5 s it answers again; derp_accepts_rate_limited counts the refusals. Stopped by PID."""
import os, socket, sys, time

from testlib import Server

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
    srv.start()
    port = srv.port
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # takes a token
        time.sleep(6)  # the probe connect took a token: let the bucket refill to its burst
        answered = sum(1 for _ in range(10) if get(port).startswith(b"HTTP/1.1"))
        assert 4 <= answered <= 6, "answered %d of 10, expected about 5" % answered
        time.sleep(2.5)
        assert get(port).startswith(b"HTTP/1.1"), "not accepting again after the wait"
        time.sleep(1.5)
        varz = get(port, "/debug/varz").decode()
        line = [l for l in varz.splitlines() if l.startswith("derp_accepts_rate_limited ")]
        assert line and int(line[0].split()[1]) >= 10 - answered, "counter: %s" % line
        print("ok: answered %d of 10; %s" % (answered, line[0]))
    finally:
        srv.stop()

main()
