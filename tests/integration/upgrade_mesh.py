#!/usr/bin/env python3
"""upgrade_mesh.py BIN WORK - an upgrade of one node of a two-node meshed region (hderp-server a
and b, -mesh-with naming both, the same -mesh-psk-file): a client on a and a client on b relay to
each other over the mesh, and a NotePreferred(true) client is counted as home on a; then a is
upgraded (SIGUSR2). Its clients keep their connections, b's watch connection to a moves with
them (b forgets none of a's keys: b's client hears no PeerGone), the successor dials b again for
its own view of b's keys, and packets flow both ways through the new process; the preferred
flag came along (derp_current_home_connections 1 on the successor). Servers are stopped by
PID."""
import os, shutil, signal, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import derp_pyclient as dc
from testlib import Server, hold_port, pid_gone, read_pid_file, stop_pid, varz, wait_for

BIN, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
KEY = os.path.join(WORK, "mesh.key")
with open(KEY, "w") as f:
    f.write("7a" * 32 + "\n")
PIDF = os.path.join(WORK, "a.pid")
F_PEER_GONE, F_NOTE_PREFERRED = 8, 7


def relay(src, dst, dst_key, src_key, tag):
    dc.send(src, dst_key, tag)
    if dc.recv_packet(dst) != (src_key, tag):
        raise AssertionError("%r was not relayed" % tag)


def no_peer_gone(s, what):
    """Reads what s got until it is quiet for a moment: no PeerGone among it."""
    s.settimeout(0.3)
    try:
        while True:
            t, p = dc.frame(s)
            if t == F_PEER_GONE:
                raise AssertionError("%s got a PeerGone for %s" % (what, p[:32].hex()))
    except OSError:  # quiet (a timeout): nothing more
        pass
    finally:
        s.settimeout(10)


def main():
    (hold_a, port_a), (hold_b, port_b) = hold_port(), hold_port()
    mesh = "http://127.0.0.1:%d,http://127.0.0.1:%d" % (port_a, port_b)  # plain nodes
    common = ["-stun-port", "-1", "-mesh-psk-file", KEY, "-mesh-with", mesh, "--shards", "2"]
    a = Server(BIN, WORK, "a", ["-a", "127.0.0.1:%d" % port_a, "-c", os.path.join(WORK, "ka"),
                                "--pid-file", PIDF] + common)
    b = Server(BIN, WORK, "b", ["-a", "127.0.0.1:%d" % port_b, "-c", os.path.join(WORK, "kb")] +
               common)
    a.start(), b.start()
    new = None
    try:
        for n in (a, b):
            wait_for(lambda: (n.varz("derp_mesh_links_ready") or 0) >= 1,
                     "%s's mesh link" % n.name, 30)
        ca, ka = dc.connect(port_a)
        cb, kb = dc.connect(port_b)
        home, _ = dc.connect(port_a)
        home.sendall(bytes([F_NOTE_PREFERRED]) + struct.pack(">I", 1) + b"\x01")
        wait_for(lambda: a.varz("derp_current_home_connections") == 1, "the home client on a")
        # b knows ca once a's watch stream told it: until then a packet to it is dropped.
        wait_for(lambda: (b.varz("derp_clients_remote") or 0) >= 2, "b to hear of a's clients", 30)
        relay(ca, cb, kb, ka, b"a to b before")
        relay(cb, ca, ka, kb, b"b to a before")
        old = a.pid
        os.kill(old, signal.SIGUSR2)
        wait_for(lambda: read_pid_file(PIDF) not in (None, old), "a's successor", 30)
        new = read_pid_file(PIDF)
        wait_for(lambda: a.proc.poll() is not None, "a's old process to exit", 30)
        # ca, home, and b's watch connection to a (a mesh client of a's) came over
        wait_for(lambda: "took over 3 clients" in a.log_text(), "a's successor to take 3 clients")
        wait_for(lambda: (a.varz("derp_mesh_links_ready") or 0) >= 1, "a's new mesh link", 30)
        relay(ca, cb, kb, ka, b"a to b after")
        relay(cb, ca, ka, kb, b"b to a after")
        no_peer_gone(cb, "b's client")
        no_peer_gone(ca, "a's client")
        if a.varz("derp_current_home_connections") != 1:
            raise AssertionError("the successor counts %s home connections, expected 1" %
                                 a.varz("derp_current_home_connections"))
        print("PASS: a meshed node upgraded: both ways relayed, no PeerGone, preferred kept")
    except AssertionError as e:
        print("FAIL: %s\n--- a.log\n%s\n--- b.log\n%s" % (e, a.log_text()[-5000:],
                                                      b.log_text()[-3000:]))
        sys.exit(1)
    finally:
        if new:
            try:
                os.kill(new, signal.SIGTERM)
                wait_for(lambda: pid_gone(new), "PID %d to exit" % new, 30)
            except ProcessLookupError:
                pass
        stop_pid(a.proc)
        b.stop()
        hold_a.close(), hold_b.close()


main()
