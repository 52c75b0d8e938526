#!/usr/bin/env python3
"""derp_smoke.py PORT [CA_FILE] - an independent DERP client (Python + libsodium through ctypes,
TLS through Python's OpenSSL) against a running hderp-server: normal and fast-start login,
100 packets A->B in order with the right source key, Ping/Pong, NotHere for disco to an unknown
key limited to 3 of 6 (the server's derp_peer_gone_not_here_frames agreeing), PeerGone
(Disconnected) to B when A leaves. Exits non-zero on any mismatch; every socket read has a
timeout."""
import os, socket, struct, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import derp_pyclient as dc
import testlib
from derp_pyclient import frame, send
def connect(port, fast=False):
    ctx = None
    if TLS:
        import ssl
        ctx = ssl.create_default_context(cafile=TLS)
    return dc.connect(port, ctx, fast)
port = int(sys.argv[1])
TLS = sys.argv[2] if len(sys.argv) > 2 else None
a, apk = connect(port); b, bpk = connect(port, fast=True)
for i in range(100):
    send(a, bpk, b'hello %d' % i)
for i in range(100):
    while True:
        t, p = frame(b)
        if t == 5: break
    assert p[:32] == apk and p[32:] == b'hello %d' % i, (p[:32].hex(), p[32:])
# ping
a.sendall(bytes([0x12]) + struct.pack('>I', 8) + b'12345678')
while True:
    t, p = frame(a)
    if t == 0x13: break
assert p == b'12345678'
# disco to unknown -> NotHere, per connection a burst of 3 then 1 a second (derper). The 6
# go out at once, but a loaded machine can take the server over a second to handle them all:
# each second of that is one more NotHere, which may come after this client stopped reading
# (0.5 s of silence) while the server counts it. So the bounds follow the time since the first
# send: 3 within a second (as before), 3 + the refills otherwise, for what the client got and
# for the server's count (counted before sent: at least the client's).
unk = os.urandom(32)
disco = b'TS\xf0\x9f\x92\xac' + b'x'*60
t0 = time.monotonic()
for i in range(6): send(a, unk, disco)
nh = 0; a.settimeout(0.5)
try:
    while True:
        t, p = frame(a)
        if t == 8 and p[32] == 1: nh += 1
except socket.timeout: pass
srv = testlib.varz(port, 'derp_peer_gone_not_here_frames', ca=TLS)
took = time.monotonic() - t0
most = min(6, 3 + int(took + 0.01))  # + the server's millisecond clock
assert 3 <= nh <= most, 'NotHere frames: %d in %.2f s (want 3 of 6, at most %d)' % (nh, took, most)
assert srv is not None and nh <= srv <= most, \
    'derp_peer_gone_not_here_frames %s, the client got %d in %.2f s (at most %d)' % (srv, nh, took,
                                                                                   most)
# peer gone: b received from a; a leaves -> b gets PeerGone(a)
a.close()
b.settimeout(5)
while True:
    t, p = frame(b)
    if t == 8: break
assert p[:32] == apk and p[32] == 0
print('OK')
