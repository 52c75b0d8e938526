#!/usr/bin/env python3
"""derp_smoke.py PORT [CA_FILE] - an independent DERP client (Python + libsodium through ctypes,
TLS through Python's OpenSSL) against a running hderp-server: normal and fast-start login,
100 packets A->B in order with the right source key, Ping/Pong, NotHere for disco to an unknown
key limited to 3 of 6, PeerGone(Disconnected) to B when A leaves. Exits non-zero on any
mismatch; every socket read has a timeout."""
import ctypes, socket, struct, os, json, sys, time
sod = ctypes.CDLL("libsodium.so.23"); sod.sodium_init()
def keypair():
    pk = ctypes.create_string_buffer(32); sk = ctypes.create_string_buffer(32)
    sod.crypto_box_keypair(pk, sk); return pk.raw, sk.raw
def seal(msg, nonce, pk, sk):
    out = ctypes.create_string_buffer(len(msg)+16)
    assert sod.crypto_box_easy(out, msg, ctypes.c_ulonglong(len(msg)), nonce, pk, sk) == 0
    return out.raw
def open_(ct, nonce, pk, sk):
    out = ctypes.create_string_buffer(len(ct)-16)
    assert sod.crypto_box_open_easy(out, ct, ctypes.c_ulonglong(len(ct)), nonce, pk, sk) == 0
    return out.raw
def readn(s, n):
    b = b''
    while len(b) < n:
        d = s.recv(n-len(b));
        if not d: raise EOFError
        b += d
    return b
def frame(s):
    h = readn(s, 5); t, l = h[0], struct.unpack('>I', h[1:])[0]; return t, readn(s, l)
def connect(port, fast=False):
    pk, sk = keypair()
    s = socket.create_connection(('127.0.0.1', port), timeout=10)
    if TLS:
        import ssl
        ctx = ssl.create_default_context(cafile=TLS)
        s = ctx.wrap_socket(s, server_hostname='localhost')
    req = b'GET /derp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: DERP\r\n' + (b'Derp-Fast-Start: 1\r\n' if fast else b'') + b'\r\n'
    s.sendall(req)
    if not fast:
        resp = b''
        while b'\r\n\r\n' not in resp: resp += s.recv(1)
        assert resp.startswith(b'HTTP/1.1 101'), resp
    t, p = frame(s); assert t == 1 and p[:8] == b'DERP\xf0\x9f\x94\x91', (t, p)
    spk = p[8:40]
    nonce = os.urandom(24)
    ci = pk + nonce + seal(b'{"version":2,"CanAckPings":true}', nonce, spk, sk)
    s.sendall(bytes([2]) + struct.pack('>I', len(ci)) + ci)
    t, p = frame(s); assert t == 3, t
    info = open_(p[24:], p[:24], spk, sk); assert json.loads(info)['version'] == 2
    return s, pk
def send(s, dst, data): s.sendall(bytes([4]) + struct.pack('>I', 32+len(data)) + dst + data)
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
# disco to unknown -> NotHere
unk = os.urandom(32)
disco = b'TS\xf0\x9f\x92\xac' + b'x'*60
for i in range(6): send(a, unk, disco)
nh = 0; a.settimeout(0.5)
try:
    while True:
        t, p = frame(a)
        if t == 8 and p[32] == 1: nh += 1
except socket.timeout: pass
assert nh == 3, 'NotHere frames: %d (want 3 of 6)' % nh
# peer gone: b received from a; a leaves -> b gets PeerGone(a)
a.close()
b.settimeout(5)
while True:
    t, p = frame(b)
    if t == 8: break
assert p[:32] == apk and p[32] == 0
print('OK')
