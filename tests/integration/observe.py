#!/usr/bin/env python3
"""observe.py BIN_DIR WORK_DIR - hderp-echo observe against real hderp-server processes on
loopback: a two-node meshed region (900: a, b) and a single node (901: c), described by a DERP
map. Checks: every path (a, b, c, a->b, b->a) appears in /metrics with plausible counts and in
/status.json; the page renders in headless Chromium with one row per path; a killed node turns
its paths down and a loss alert fires, and both clear when it is restarted; --once exits 0 on a
healthy region and 1 with a node down. Servers are stopped by PID; every wait is bounded."""
import json
import os
import re
import shutil
import signal
import socket
import ssl
import functools
import http.server
import subprocess
import sys
import threading
import urllib.request

import testlib

BIN, WORK = sys.argv[1], sys.argv[2]
MESH_KEY = "6a1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
procs = []


def fail(msg):
    print("FAIL: " + msg)
    for name in sorted(os.listdir(WORK)):
        if name.endswith(".log"):
            print("--- " + name)
            with open(os.path.join(WORK, name), errors="replace") as f:
                print(f.read()[-4000:])
    sys.exit(1)


def wait_for(what, cond, timeout_s):
    try:
        return testlib.wait_for(cond, what, timeout_s, step_s=0.1)
    except testlib.Timeout as e:
        fail(str(e))


NO_VERIFY = ssl.create_default_context()
NO_VERIFY.check_hostname = False
NO_VERIFY.verify_mode = ssl.CERT_NONE


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5, context=NO_VERIFY) as r:
            return r.read().decode()
    except OSError:
        return None


class Node:
    """One hderp-server. A meshed node's port is held (testlib.hold_port) from before any node
    starts, since the nodes name each other in -mesh-with, and for good (a restart gets it
    back); the others bind port 0. Every port is read back once the node listens."""

    def __init__(self, name, mesh=False, tls=False):
        self.name, self.mesh_with, self.tls = name, None, tls
        self.hold, self.port = testlib.hold_port() if mesh else (None, 0)
        self.stun, self.stun_hold, self.http = 0, None, None
        self.srv = testlib.Server(BIN, WORK, "server-" + name, [])

    def start(self):
        """Starts it (a restart: on the ports it had, its STUN port held since the kill)."""
        args = ["-a", "127.0.0.1:%d" % self.port, "-stun-port", str(self.stun), "--shards", "1",
                "-c", "%s/%s.key" % (WORK, self.name)]
        if self.mesh_with:
            args += ["-mesh-psk-file", WORK + "/mesh.key", "-mesh-with", self.mesh_with]
        if self.tls:  # an IP -hostname: the server makes itself a certificate
            args += ["-certmode", "manual", "-certdir", WORK, "-hostname", "127.0.0.1",
                     "-http-port", str(self.http or 0)]
        self.srv.args = args
        try:
            self.srv.start()
        except AssertionError as e:
            fail(str(e))
        procs.append(self.srv.proc)
        self.port, self.stun, self.http = self.srv.port, self.srv.stun, self.srv.http
        if self.stun_hold:  # the node has its STUN port again
            self.stun_hold.close()
            self.stun_hold = None

    def kill(self):
        """SIGKILL; its STUN port is held first (beside the node's sockets), so that nobody
        else takes it before the restart (its TCP ports are held for good or kept by nothing:
        only meshed nodes are restarted)."""
        self.stun_hold = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.stun_hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.stun_hold.bind(("127.0.0.1", self.stun))
        self.srv.kill()


def mesh_ready(n):
    v = testlib.varz(n.port, "derp_mesh_links_ready")
    return v is not None and v >= 1


def derp_map(nodes):
    regions = {}
    for rid, code, members in ((900, "lab", nodes[:2]), (901, "solo", nodes[2:3])):
        regions[str(rid)] = {"RegionID": rid, "RegionCode": code, "Nodes": [
            {"Name": n.name, "RegionID": rid, "HostName": "127.0.0.1", "IPv4": "127.0.0.1",
             "DERPPort": n.port, "STUNPort": n.stun, "InsecureForTests": True} for n in members]}
    return {"Regions": regions}


def status(base):
    text = get(base + "/status.json")
    return json.loads(text) if text else None


def paths_up(base, want_up):
    st = status(base)
    if st is None:
        return None
    got = {p["path"]: p["up"] for p in st["paths"]}
    return all(got.get(p) == up for p, up in want_up.items()) and st


def check_metrics(base, labels):
    text = get(base + "/metrics")
    if text is None:
        fail("/metrics did not answer")
    for frm, to, kind in labels:
        sel = 'from="%s",to="%s",path="%s"' % (frm, to, kind)
        vals = {}
        for name in ("sent_total", "received_total", "lost_total", "up"):
            m = re.search(r"^hderp_observe_%s\{[^}]*%s\} (\d+)" % (name, re.escape(sel)), text,
                          re.M)
            if m is None:
                fail("/metrics has no hderp_observe_%s for %s" % (name, sel))
            vals[name] = int(m.group(1))
        count = re.search(r"^hderp_observe_rtt_seconds_count\{[^}]*%s\} (\d+)" % re.escape(sel),
                          text, re.M)
        inf = re.search(r'^hderp_observe_rtt_seconds_bucket\{[^}]*%s,le="\+Inf"\} (\d+)'
                        % re.escape(sel), text, re.M)
        if not count or not inf or count.group(1) != inf.group(1):
            fail("/metrics: histogram count and +Inf bucket differ for %s" % sel)
        if not (0 < vals["received_total"] <= vals["sent_total"] and vals["up"] == 1):
            fail("/metrics: implausible counts for %s: %s" % (sel, vals))
        if int(count.group(1)) != vals["received_total"]:
            fail("/metrics: %s histogram holds %s round trips, received %d"
                 % (sel, count.group(1), vals["received_total"]))
    if "hderp_observe_stun_rtt_seconds_count" not in text:
        fail("/metrics has no STUN round trips")


def check_page(base, want_rows):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        fail("chromium is not installed (make test installs it)")
    out = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-quic", "--no-first-run", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync",
                          "--user-data-dir=" + WORK + "/chromium", "--dump-dom", base + "/"],
                         capture_output=True, text=True, timeout=120)
    rows = [(st, p.replace("&gt;", ">")) for st, p in
            re.findall(r'<tr class="path (up|down)" data-path="([^"]+)"', out.stdout)]
    if sorted(p for _, p in rows) != sorted(want_rows):
        fail("the page's rows %s, want %s (stderr: %s)" % (rows, want_rows, out.stderr[-500:]))
    if out.stdout.count("<svg") != len(want_rows):
        fail("the page has %d charts for %d rows" % (out.stdout.count("<svg"), len(want_rows)))


def log_has(path, pattern, since=0):
    with open(path, errors="replace") as f:
        return re.search(pattern, f.read()[since:], re.M) is not None


def log_size(path):
    with open(path, errors="replace") as f:
        return len(f.read())


def once(map_file, expect_code, want_bad=()):
    """hderp-echo observe --once; its exit code must be expect_code and the paths it judged bad
    exactly want_bad. A busy box (the debug preset beside other tests) can keep a healthy path
    from logging in and echoing within the measurement, so a run that judged more paths bad is
    tried again with twice the duration (3, 6, 12 s); fewer, or the wrong ones, fail at once."""
    want_bad = sorted(want_bad)
    for duration in (3, 6, 12):
        r = subprocess.run([BIN + "/hderp-echo", "observe", "--derp-map", map_file,
                            "--derp-http", "--once", "--duration", str(duration), "--rate", "20",
                            "--json"], capture_output=True, text=True, timeout=60 + 2 * duration)
        out = json.loads(r.stdout) if r.stdout.strip() else None
        bad = sorted(p["path"] for p in out["paths"] if not p["ok"]) if out else None
        if r.returncode == expect_code and bad == want_bad:
            return out
        if bad is None or not set(want_bad) < set(bad):
            break
        print("--once (%d s) judged %s bad, want %s: again, longer" % (duration, bad, want_bad))
    fail("--once exited %d (want %d), bad paths %s (want %s): %s %s" % (
        r.returncode, expect_code, bad, want_bad, r.stdout[-1500:], r.stderr[-1500:]))


def map_over_http(map_file):
    """Serves WORK over HTTP on a port of its own (bound to 0); returns the map's URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=WORK)
    handler.log_message = lambda *args: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return "http://127.0.0.1:%d/%s" % (srv.server_address[1], os.path.basename(map_file)), srv


def check_map_url(map_file):
    url, srv = map_over_http(map_file)
    try:
        r = once(url, 0)
        if len(r["paths"]) != 5:
            fail("--derp-map %s: %d paths, want 5" % (url, len(r["paths"])))
        bad = subprocess.run([BIN + "/hderp-echo", "observe", "--derp-map", url + ".missing",
                              "--derp-http", "--once", "--duration", "2"],
                             capture_output=True, text=True, timeout=60)
        if bad.returncode == 0 or "HTTP 404" not in bad.stderr:
            fail("a missing map URL: exit %d, stderr %s" % (bad.returncode, bad.stderr[-500:]))
    finally:
        srv.shutdown()


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    with open(WORK + "/mesh.key", "w") as f:
        f.write(MESH_KEY + "\n")
    a, b, c, d = Node("a", mesh=True), Node("b", mesh=True), Node("c"), Node("d", tls=True)
    mesh = "http://127.0.0.1:%d,http://127.0.0.1:%d" % (a.port, b.port)
    a.mesh_with = b.mesh_with = mesh
    try:
        for n in (a, b, c, d):
            n.start()
        # Probes on the mesh paths need a's and b's links (a retries every 5 s).
        wait_for("the mesh links", lambda: mesh_ready(a) and mesh_ready(b), 20)
        map_file = WORK + "/derpmap.json"
        with open(map_file, "w") as f:
            json.dump(derp_map([a, b, c]), f)
        dn = "127.0.0.1:%d" % d.port  # d: an https --server beside the map's plain nodes
        want = {"a->a": True, "b->b": True, "c->c": True, "a->b": True, "b->a": True,
                dn + "->" + dn: True}
        obs_log = WORK + "/observe.log"
        log = open(obs_log, "w")
        obs = subprocess.Popen([BIN + "/hderp-echo", "observe", "--derp-map", map_file,
                                "--derp-http", "--metrics-listen", "127.0.0.1:0", "--rate", "20",
                                "--down-after", "1500", "--alert-loss-pct", "5",
                                "--alert-window", "10", "--server",
                                "https://%s/derp" % dn, "--insecure"], stdout=log, stderr=log)
        procs.append(obs)
        m = wait_for("the metrics address in the log", lambda: re.search(
            r"metrics on (http://127\.0\.0\.1:\d+)/", open(obs_log).read()), 10)
        base = m.group(1)
        wait_for("every path up", lambda: paths_up(base, want), 30)
        # Mesh paths need both nodes' links: give every path a few echoes, then check counts.
        wait_for("echoes on every path", lambda: all(
            p["received"] >= 10 for p in status(base)["paths"]), 30)
        check_metrics(base, [("a", "a", "node"), ("b", "b", "node"), ("c", "c", "node"),
                             ("a", "b", "mesh"), ("b", "a", "mesh"), (dn, dn, "node")])
        tls = re.search(r'^hderp_observe_tls_handshake_seconds\{[^}]*from="%s"[^}]*side="pinger"\} '
                        r'([0-9.]+)' % re.escape(dn), get(base + "/metrics"), re.M)
        if tls is None or float(tls.group(1)) <= 0:
            fail("no TLS handshake time for the https node")
        check_page(base, list(want))
        once(map_file, 0)
        check_map_url(map_file)
        print("healthy region: every path up, counts plausible, page has a row per path, "
              "the map also read from a URL")

        mark = log_size(obs_log)
        b.kill()
        down = dict(want, **{"b->b": False, "a->b": False, "b->a": False})
        wait_for("b's paths down, a's and c's up", lambda: paths_up(base, down), 20)
        wait_for("a DOWN line for b->b", lambda: log_has(obs_log, r"observe: DOWN b->b", mark), 10)
        wait_for("a loss alert for a->b", lambda: log_has(
            obs_log, r"observe: ALERT a->b: loss", mark), 30)
        once(map_file, 1, ["a->b", "b->a", "b->b"])
        print("node b killed: its paths down, loss alert fired, --once exits 1")

        mark = log_size(obs_log)
        b.start()
        wait_for("every path up again", lambda: paths_up(base, want), 40)
        wait_for("the loss alert on a->b cleared", lambda: log_has(
            obs_log, r"observe: RECOVERED a->b: loss", mark), 40)
        st = status(base)
        recon = {p["path"]: p["reconnects"] for p in st["paths"]}
        if recon["b->b"] < 1 or recon["c->c"] != 0:
            fail("reconnects %s: b's path should have reconnected, c's not" % recon)
        print("node b restarted: paths up, alert cleared, reconnects counted")

        obs.send_signal(signal.SIGTERM)
        if obs.wait(timeout=30) != 0:
            fail("observe exited %d on SIGTERM" % obs.returncode)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    print("observe: all checks passed")


main()
