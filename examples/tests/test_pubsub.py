"""examples/pubsub over real sockets (plain TCP, or TLS with --tls): subscribers spread over
both shards all get every publish of their topic, in order, and nothing of other topics; a
malformed frame closes its connection; the relay stops cleanly on SIGTERM, having fanned out to
the other shard over the bus. Usage: test_pubsub.py PUBSUB [--tls]"""
import socket
import ssl
import struct
import sys

from example_util import DEADLINE_S, fail, start, stop, total

SUBS_WANTED = 4
CONNECT_MAX = 64  # attempts to get subscribers on both shards (the kernel picks the shard)


def frame(kind, topic, payload=b""):
    body = kind + bytes([len(topic)]) + topic + payload
    return struct.pack(">I", len(body)) + body


class Conn:
    def __init__(self, port, tls):
        s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # the example's certificate is self-signed
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
            s = ctx.wrap_socket(s)
        self.s, self.buf = s, b""

    def send(self, data):
        self.s.sendall(data)

    def read(self):
        """One frame: (type, topic, payload); None when the server closed."""
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    t = body[1]
                    return body[:1], body[2:2 + t], body[2 + t:]
            try:
                more = self.s.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                more = b""
            if not more:
                return None
            self.buf += more


def subscribe(port, tls, topic):
    c = Conn(port, tls)
    c.send(frame(b"S", topic))
    ack = c.read()
    if ack is None or ack[0] != b"A" or len(ack[2]) != 1:
        fail("no subscribe ack: %r" % (ack,))
    return c, ack[2][0]


def main():
    tls = "--tls" in sys.argv[2:]
    p, port, _ = start([sys.argv[1]] + (["-tls"] if tls else []))
    subs, shards = [], set()
    for _ in range(CONNECT_MAX):
        c, shard = subscribe(port, tls, b"news")
        subs.append(c)
        shards.add(shard)
        if len(subs) >= SUBS_WANTED and len(shards) == 2:
            break
    if len(shards) != 2:
        fail("%d connections all landed on shard %s" % (len(subs), shards))
    subs[0].send(frame(b"S", b"news"))  # again: still one copy of each message
    if subs[0].read() is None:
        fail("no ack for a second subscribe")
    other, _ = subscribe(port, tls, b"other")
    pub = Conn(port, tls)
    for i in range(10):
        pub.send(frame(b"P", b"news", b"item %d" % i))
    pub.send(frame(b"P", b"other", b"elsewhere"))
    pub.send(frame(b"P", b"news", b"end"))
    for c in subs:
        got = [c.read() for _ in range(11)]
        want = [(b"M", b"news", b"item %d" % i) for i in range(10)] + [(b"M", b"news", b"end")]
        if got != want:
            fail("a subscriber got %r" % got)
    if other.read() != (b"M", b"other", b"elsewhere"):
        fail("the other topic's subscriber missed its message")
    bad = Conn(port, tls)
    bad.send(struct.pack(">I", 1) + b"P")  # shorter than a frame's header: -EPROTO
    if bad.read() is not None:
        fail("a malformed frame was answered")
    for c in subs + [other, pub]:
        c.s.close()
    st = stop(p)
    if len(st) != 2 or total(st, "to other shards") == 0 or total(st, "protocol errors") != 1:
        fail("summary: %r" % st)
    print("ok: %d subscribers on 2 shards, %s" % (len(subs), "tls" if tls else "tcp"))


main()
