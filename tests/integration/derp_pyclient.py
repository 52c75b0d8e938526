"""derp_pyclient.py - an independent DERP client for the integration tests (Python + libsodium
through ctypes, TLS through Python's OpenSSL): login (normal or fast start), frames, packets.
Every socket read has a timeout. Used by derp_smoke.py and upgrade.py."""
import ctypes, json, os, socket, struct

sod = ctypes.CDLL("libsodium.so.23")
sod.sodium_init()


def keypair():
    pk = ctypes.create_string_buffer(32)
    sk = ctypes.create_string_buffer(32)
    sod.crypto_box_keypair(pk, sk)
    return pk.raw, sk.raw


def seal(msg, nonce, pk, sk):
    out = ctypes.create_string_buffer(len(msg) + 16)
    assert sod.crypto_box_easy(out, msg, ctypes.c_ulonglong(len(msg)), nonce, pk, sk) == 0
    return out.raw


def open_(ct, nonce, pk, sk):
    out = ctypes.create_string_buffer(len(ct) - 16)
    assert sod.crypto_box_open_easy(out, ct, ctypes.c_ulonglong(len(ct)), nonce, pk, sk) == 0
    return out.raw


def readn(s, n):
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            raise EOFError("closed after %d of %d bytes" % (len(b), n))
        b += d
    return b


def frame(s):
    h = readn(s, 5)
    t, n = h[0], struct.unpack(">I", h[1:])[0]
    return t, readn(s, n)


def connect(port, ctx=None, fast=False):
    """A logged-in client on 127.0.0.1:port (ctx: an ssl.SSLContext for TLS). (socket, key)."""
    pk, sk = keypair()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if ctx:
        s = ctx.wrap_socket(s, server_hostname="localhost")
    req = (b"GET /derp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: DERP\r\n" +
           (b"Derp-Fast-Start: 1\r\n" if fast else b"") + b"\r\n")
    s.sendall(req)
    if not fast:
        resp = b""
        while b"\r\n\r\n" not in resp:
            resp += s.recv(1)
        assert resp.startswith(b"HTTP/1.1 101"), resp
    return login(s, pk, sk), pk


def login(s, pk, sk):
    """ServerKey, then our ClientInfo, then ServerInfo; returns s."""
    t, p = frame(s)
    assert t == 1 and p[:8] == b"DERP\xf0\x9f\x94\x91", (t, p)
    spk = p[8:40]
    nonce = os.urandom(24)
    ci = pk + nonce + seal(b'{"version":2,"CanAckPings":true}', nonce, spk, sk)
    s.sendall(bytes([2]) + struct.pack(">I", len(ci)) + ci)
    t, p = frame(s)
    assert t == 3, t
    info = open_(p[24:], p[:24], spk, sk)
    assert json.loads(info)["version"] == 2
    return s


class WebSocket:
    """DERP over WebSocket (RFC 6455, subprotocol derp): sendall() sends one masked binary
    message, recv() returns bytes of the server's binary messages, so frame() and send() work
    on it as on a socket."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.sendall(b"GET /derp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                       b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                       b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                       b"Sec-WebSocket-Protocol: derp\r\n\r\n")
        resp = b""
        while b"\r\n\r\n" not in resp:
            resp += self.s.recv(1)
        assert resp.startswith(b"HTTP/1.1 101"), resp
        self.buf = b""

    def sendall(self, data):
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x82]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self, n):
        while not self.buf:
            h = readn(self.s, 2)
            ln = h[1] & 0x7f
            if ln == 126:
                ln = struct.unpack(">H", readn(self.s, 2))[0]
            elif ln == 127:
                ln = struct.unpack(">Q", readn(self.s, 8))[0]
            payload = readn(self.s, ln)
            if h[0] & 0x0f == 8:  # close
                return b""
            if h[0] & 0x0f in (0, 2):
                self.buf = payload
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def settimeout(self, t):
        self.s.settimeout(t)


def ws_connect(port):
    """A logged-in DERP client over WebSocket: (WebSocket, key)."""
    pk, sk = keypair()
    return login(WebSocket(port), pk, sk), pk


def send(s, dst, data):
    s.sendall(bytes([4]) + struct.pack(">I", 32 + len(data)) + dst + data)


def recv_packet(s):
    """The next RecvPacket (source key, data), skipping other frames."""
    while True:
        t, p = frame(s)
        if t == 5:
            return p[:32], p[32:]


def closed(s, wait=5.0):
    """True once the server closed s, False when it is still open after wait seconds (other
    frames are skipped)."""
    s.settimeout(wait)
    try:
        while True:
            frame(s)
    except socket.timeout:  # an OSError too: still open
        return False
    except (EOFError, ConnectionError, OSError):
        return True
    finally:
        s.settimeout(10)
