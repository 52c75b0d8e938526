"""examples/udprelay over real UDP sockets: 16 sessions of two parties each get each other's
datagrams (byte for byte, from the relay's address) whichever shard their datagrams land on, a
third address on a session is refused, a datagram too short for a session id is counted; the
relay stops cleanly on SIGTERM, having routed datagrams to their owner shard over the bus. The
counters are read from the relay's GET /metrics (the relay kit's endpoint) before the stop.
Usage: test_udprelay.py UDPRELAY"""
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.request

from example_util import DEADLINE_S, fail, start, stop, total

SESSIONS = 16  # 32 source addresses over 2 shards: some datagrams must cross shards
RETRY_S = 0.05  # pairing: resend this often until the other party hears it (UDP, no ack)


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(DEADLINE_S)
    return s


def pair(relay, sid):
    """Both parties registered: b's hello reached a (a registered first, or b's retries did)."""
    a, b = udp(), udp()
    a.sendto(sid + b"reg", relay)
    end = time.monotonic() + DEADLINE_S
    a.settimeout(RETRY_S)
    while time.monotonic() < end:
        b.sendto(sid + b"hello", relay)
        try:
            data, src = a.recvfrom(2048)
        except socket.timeout:
            continue
        if data == sid + b"hello" and src == relay:
            a.settimeout(DEADLINE_S)
            b.settimeout(RETRY_S)
            try:  # b may have been first and got a's "reg": drop it
                while True:
                    b.recvfrom(2048)
            except socket.timeout:
                pass
            b.settimeout(DEADLINE_S)
            try:  # and a may hold more hellos from the retries
                a.settimeout(RETRY_S)
                while True:
                    a.recvfrom(2048)
            except socket.timeout:
                a.settimeout(DEADLINE_S)
            return a, b
    fail("session %s never paired" % sid.hex())


def owner(sid, shards=2):
    """kit_owner_shard: FNV-1a 64 of the id, modulo the shard count."""
    h = 14695981039346656037
    for byte in sid:
        h = ((h ^ byte) * 1099511628211) % (1 << 64)
    return h % shards


def metrics(port):
    """GET /metrics: the relay's counters summed over its shards."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=DEADLINE_S) as r:
        text = r.read().decode()
    return {k: int(v) for k, v in re.findall(r"^udprelay_(\w+)_total (\d+)$", text, re.M)}


def expect(sock, want, relay):
    data, src = sock.recvfrom(2048)
    if data != want or src != relay:
        fail("got %r from %s, wanted %r" % (data, src, want))


def main():
    p, port, line = start([sys.argv[1], "-metrics", "127.0.0.1:0"])
    relay = ("127.0.0.1", port)
    mport = int(re.search(r"metrics 127\.0\.0\.1:(\d+)", line).group(1))
    sessions = []
    for _ in range(SESSIONS):
        sid = os.urandom(8)
        sessions.append((sid,) + pair(relay, sid))
    for sid, a, b in sessions:
        for i in range(5):
            a.sendto(sid + b"a%d" % i, relay)
            b.sendto(sid + b"b%d" % i + bytes(1000), relay)
        for i in range(5):
            expect(b, sid + b"a%d" % i, relay)
            expect(a, sid + b"b%d" % i + bytes(1000), relay)
    sid, a, b = sessions[0]
    # c and d: a session with the same owner shard as sid's, so what c sends is handled in
    # order (one socket of the relay, then one bus queue) and d hearing c's last datagram means
    # the relay has seen the ones before it.
    sid2 = os.urandom(8)
    while owner(sid2) != owner(sid):
        sid2 = os.urandom(8)
    c, d = pair(relay, sid2)
    c.sendto(sid + b"intruder", relay)  # a third address on sid: refused, reaches nobody
    c.sendto(b"abc", relay)  # no session id: counted as bad
    c.sendto(sid2 + b"after", relay)
    expect(d, sid2 + b"after", relay)
    a.sendto(sid + b"after", relay)  # sid still belongs to a and b
    expect(b, sid + b"after", relay)
    m = metrics(mport)
    if m["relayed"] < SESSIONS * 10 + 2 or m["refused"] != 1 or m["bad"] != 1 \
            or m["routed"] == 0:
        fail("metrics: %r" % m)
    try:
        urllib.request.urlopen("http://127.0.0.1:%d/other" % mport, timeout=DEADLINE_S)
        fail("/other answered")
    except urllib.error.HTTPError as e:
        if e.code != 404:
            fail("/other: %d" % e.code)
    st = stop(p)
    if len(st) != 2 or total(st, "routed") == 0 or total(st, "refused") != 1 \
            or total(st, "bad") != 1:
        fail("summary: %r" % st)
    print("ok: %d sessions, %d datagrams routed between shards" % (SESSIONS, total(st, "routed")))


main()
