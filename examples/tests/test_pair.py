"""examples/pair over real TCP: 12 pairs of clients (their tokens owned by both shards, the
clients landing on either) each get "OK" and then each other's bytes both ways (256 KiB one
way, 64 KiB back, checked byte for byte) with half closes carried through; a client alone gets
"ERR timeout" when its wait ends, a bad line "ERR line"; the relay stops cleanly on SIGTERM,
having moved clients to their token's shard and paired them all.
Usage: test_pair.py PAIR"""
import socket
import sys
import threading

from example_util import DEADLINE_S, fail, start, stop, total

PAIRS = 12
A_TO_B = 256 * 1024
B_TO_A = 64 * 1024


def dial(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
    s.settimeout(DEADLINE_S)
    return s


def read_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            fail("connection ended after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


def read_to_end(s):
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return buf
        buf += chunk


def pattern(seed, n):
    return bytes((i * 31 + seed) & 0xFF for i in range(n))


def run_pair(port, i, errors):
    try:
        token = b"tok-%d" % i
        a, b = dial(port), dial(port)
        a.sendall(b"PAIR " + token + b"\n")
        b.sendall(b"PAIR " + token + b"\n")
        if read_exact(a, 3) != b"OK\n" or read_exact(b, 3) != b"OK\n":
            raise AssertionError("pair %d: no OK" % i)
        sent_a, sent_b = pattern(i, A_TO_B), pattern(i + 100, B_TO_A)
        t = threading.Thread(target=lambda: (a.sendall(sent_a), a.shutdown(socket.SHUT_WR)))
        t.start()
        b.sendall(sent_b)
        b.shutdown(socket.SHUT_WR)
        got_b = read_to_end(b)
        got_a = read_to_end(a)
        t.join()
        if got_b != sent_a or got_a != sent_b:
            raise AssertionError("pair %d: %d/%d and %d/%d bytes, or not the same" %
                                 (i, len(got_b), len(sent_a), len(got_a), len(sent_b)))
        a.close()
        b.close()
    except Exception as e:  # noqa: BLE001 - reported by the main thread
        errors.append(str(e))


def main():
    p, port, _ = start([sys.argv[1], "-wait-ms", "3000"])  # a pairing window, not a test bound
    errors = []
    threads = [threading.Thread(target=run_pair, args=(port, i, errors)) for i in range(PAIRS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        stop(p)
        fail("; ".join(errors))
    alone = dial(port)
    alone.sendall(b"PAIR nobody-comes\n")
    if read_to_end(alone) != b"ERR timeout\n":
        fail("a client left alone did not get ERR timeout before the close")
    bad = dial(port)
    bad.sendall(b"HELLO\n")
    if read_to_end(bad) != b"ERR line\n":
        fail("a bad line did not get ERR line before the close")
    shards = stop(p)
    if len(shards) != 2:
        fail("expected 2 shard summaries, got %d" % len(shards))
    if total(shards, "paired") != PAIRS:
        fail("paired %d, expected %d" % (total(shards, "paired"), PAIRS))
    if total(shards, "moved") == 0:
        fail("no client was moved to its token's shard")
    if total(shards, "timeouts") != 1 or total(shards, "refused") != 1:
        fail("timeouts %d refused %d, expected 1 and 1" %
             (total(shards, "timeouts"), total(shards, "refused")))
    print("ok: %d pairs, %d moves" % (PAIRS, total(shards, "moved")))


main()
