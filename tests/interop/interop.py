#!/usr/bin/env python3
"""interop.py BIN GOBIN WORK SCENARIO - hderp-server driven by Tailscale's own code (the Go
programs of tests/interop, built into GOBIN by go_build.sh from the module tailscale.com at the
version go.mod pins). Servers start on port 0 (or a held port where a mesh list must name it
first), with the ports read back from --port-file, and are stopped by PID (testlib, beside the
integration tests).

Scenarios:
  client-plain, client-tls, client-ws, client-wss
      one hderp-server (2 shards, plain HTTP or TLS with a test CA's certificate for localhost;
      -ws: the client's WebSocket carrier); GOBIN/derpclient runs its checks against it
  reference-derper, reference-derper-wss
      the same checks (TLS; TLS WebSocket) against derper itself, the reference: a check that
      fails there tests something other than derper's behaviour (KeepAlive left out: derper's
      period is 60 s and fixed; over WebSocket the 64 KiB packet too: derper writes its frame as
      one message, which Tailscale's WebSocket client refuses (over 32 KiB), closing it)
  derpprobe
      a two-node hderp region (TLS, meshed with -mesh-with and a mesh key); derpprobe --once
      probes TLS, STUN, the mesh and bandwidth (every pair): every probe good, none bad
  mixed
      derper and hderp-server meshed with each other (TLS); derpclient -mixed relays both ways
      across them and checks PeerGone both ways; then derpprobe --once over that region (as for
      derpprobe; derper's STUN is off)
  bootstrap-dns
      derper and hderp-server side by side (plain HTTP) with the same -bootstrap-dns-names and
      -unpublished-bootstrap-dns-names (numeric names, localhost and an empty entry: nothing
      leaves the machine): /bootstrap-dns and ?q= for published, unpublished and unknown names
      answer the same JSON (address lists compared as sets: derper shuffles them), the same
      Content-Type and Connection: close; then only unpublished names (an empty body); derper's
      counter_bootstrap_dns_* in /debug/vars grow alike in both over those requests (and over 501
      distinct names: the queried set emptied past 500)
  bootstrap-dns-txt
      the same in a network and mount namespace of its own (unshare; root) whose resolv.conf
      names a DNS server of the test's on 127.0.0.1:53: names resolved through DNS, and
      NAME/TXTNAME rollout percentages from TXT records (50, 100, 0, not a number, no record),
      asked from 40 client addresses that are not loopback (derper seeds its draw with the
      client's address): every answer the same bytes from both, the counters grown alike
  secrets
      -secrets-url against a real setec server (GOBIN/setecserver: setec's own server and
      database): derper v1.102.5 and hderp-server each fetch the mesh key and cache it, hderp
      accepts it (derpclient's mesh-key checks), the cache is derper's format (0600, directory
      0700); with the setec server gone each starts from the other's cache; a secret missing
      at start is waited for (logged "not found") and taken once stored; an unreachable server
      is logged by name; an empty secret means no mesh key (as derper); a value that is not 64
      hex digits, and a cache path that is a directory, refuse to start with a message naming
      it
  metric-names
      derper and hderp-server side by side with the same flags (TLS, -rate-config): the names
      of derper's /debug/varz series and of its /debug/vars entries must all be hderp's too,
      except those docs/DERPER-PARITY.md lists as not published (between its not-published
      markers); a name listed there that hderp does publish fails too (the list stays true)"""
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from testlib import Server, hold_port, read_port_file, stop_pid, wait_for  # noqa: E402

BIN, GOBIN, WORK, SCENARIO = sys.argv[1:5]
MESH_KEY = "5e" * 32
# A Go program's checks end on their own (each wait is bounded); this bounds a hang.
RUN_S = 600


STARTED = []  # every server started (Server, Derper): their logs go with a failure


def fail(msg, servers=()):
    print("FAIL: %s" % msg)
    for s in servers or STARTED:
        print("--- %s (%s)" % (s.name, s.log))
        print(s.log_text()[-6000:])
    sys.exit(1)


def go_program(name):
    path = os.path.join(GOBIN, name)
    if not os.access(path, os.X_OK):
        fail("%s is not built (the interop_build test builds tests/interop: see its output)" % path)
    return path


def make_ca(work):
    """A test CA and a leaf for localhost (DNS SAN only: 127.0.0.1 must not verify) signed by
    it, valid 30 days (derpprobe's TLS probe wants more than 7 left): work/ca.crt, and
    work/certs/localhost.crt and .key (-certmode manual -certdir work/certs -hostname
    localhost, for hderp-server and derper alike)."""
    certs = os.path.join(work, "certs")
    os.makedirs(certs)
    ca_key, ca = os.path.join(work, "ca.key"), os.path.join(work, "ca.crt")
    key, csr = os.path.join(certs, "localhost.key"), os.path.join(work, "localhost.csr")
    crt, ext = os.path.join(certs, "localhost.crt"), os.path.join(work, "leaf.ext")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run = lambda *a: subprocess.run(["openssl"] + list(a), check=True, capture_output=True)
    run("req", "-x509", *ec, "-days", "30", "-keyout", ca_key, "-out", ca,
        "-subj", "/CN=hderp interop test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=localhost")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days",
        "30", "-extfile", ext, "-out", crt)
    return ca, certs


def tls_args(certs):
    return ["-certmode", "manual", "-certdir", certs, "-hostname", "localhost",
            "-http-port", "-1"]


def env_without_ca():
    """This process's environment without SSL_CERT_FILE (Go's programs then trust only what a
    test hands them)."""
    return {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}


def free_port():
    """A loopback port nobody listens on now (held, then let go), for a server that must be
    started on a port named beforehand."""
    hold, port = hold_port()
    hold.close()
    return port


def run_go(args, env_extra, servers, what):
    """Runs a Go program of the suite; its environment has SSL_CERT_FILE only if env_extra sets
    it (derpclient insists: the CA must be needed where it is given)."""
    env = env_without_ca()
    env.update(env_extra)
    print("+ %s" % " ".join(args), flush=True)
    try:
        p = subprocess.run(args, env=env, timeout=RUN_S, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    except subprocess.TimeoutExpired as e:
        print(e.stdout or "")
        fail("%s did not finish within %ds" % (what, RUN_S), servers)
    print(p.stdout, flush=True)
    return p


def client(mode):
    tls = mode in ("tls", "wss")
    args = ["-a", "127.0.0.1:0", "-stun-port", "0", "-c", os.path.join(WORK, "server.key"),
            "-mesh-psk-file", MESH_KEY_FILE, "--shards", "2", "--keepalive-interval", "1s"]
    ca = None
    if tls:
        ca, certs = make_ca(WORK)
        args += tls_args(certs)
    s = Server(BIN, WORK, "hderp", args)
    STARTED.append(s)
    s.start()
    try:
        run_derpclient(mode, s.port, ca, [s])
        if not s.alive():
            fail("hderp-server exited during the checks", [s])
    finally:
        rc = s.stop()
    if rc != 0:
        fail("hderp-server exited %s on SIGTERM" % rc, [s])
    print("PASS: Tailscale's DERP client against hderp-server (%s)" % mode)


def run_derpclient(mode, port, ca, servers, extra=()):
    tls, ws = mode in ("tls", "wss"), mode in ("ws", "wss")
    scheme, host = ("https", "localhost") if tls else ("http", "127.0.0.1")
    cmd = [go_program("derpclient"), "-url", "%s://%s:%d/derp" % (scheme, host, port),
           "-mesh-key-file", MESH_KEY_FILE, "-varz", "%s://%s:%d/debug/varz" % (scheme, host, port)]
    cmd += (["-ca", ca] if tls else []) + (["-ws"] if ws else []) + list(extra)
    # The WebSocket dial verifies with Go's default (system) pool: the CA goes there.
    p = run_go(cmd, {"SSL_CERT_FILE": ca} if mode == "wss" else {}, servers, "derpclient")
    if p.returncode != 0:
        fail("derpclient (%s) exited %d" % (mode, p.returncode), servers)


class LoggedProc:
    """A Go program of the suite started by a subclass into self.proc, its output in self.log;
    stopped by PID."""

    def alive(self):
        return self.proc.poll() is None

    def log_text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self):
        return stop_pid(self.proc)


class Derper(LoggedProc):
    """derper (built from the module) on a held port, TLS with the test CA's certificate; its
    log in WORK/NAME.log. Stopped by PID."""

    def __init__(self, name, port, certs, args, env):
        """certs None: plain HTTP (a port other than 443, -certmode letsencrypt)."""
        self.name, self.port, self.log = name, port, os.path.join(WORK, name + ".log")
        STARTED.append(self)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [go_program("derper"), "-a", "127.0.0.1:%d" % port, "-stun=false", "-c",
                 os.path.join(WORK, name + ".json"), "-mesh-psk-file", MESH_KEY_FILE] +
                (tls_args(certs) if certs else []) + args, stdout=log,
                stderr=subprocess.STDOUT, env=env)

    def wait_up(self, ca):
        def up():
            if self.proc.poll() is not None:
                raise AssertionError("derper exited %d:\n%s" % (self.proc.returncode,
                                                                self.log_text()))
            return derp_probe_ok(self.port, ca)
        wait_for(up, "derper to serve /derp/probe", 30)
        return self


def reference_derper(mode):
    ca, certs = make_ca(WORK)
    hold, port = hold_port()
    d = Derper("derper", port, certs, [], dict(os.environ)).wait_up(ca)
    skip = "^keepalive$" if mode == "tls" else "^(keepalive|packets-edge-sizes)$"
    try:
        run_derpclient(mode, port, ca, [d], ["-skip", skip])
    finally:
        d.stop()
        hold.close()
    print("PASS: derpclient's checks hold against derper v1.102.5 (the reference, %s)" % mode)


def derp_probe_ok(port, ca):
    """ca None: plain HTTP."""
    ctx = ssl.create_default_context(cafile=ca) if ca else None
    url = "%s://localhost:%d/derp/probe" % ("https" if ca else "http", port)
    try:
        with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
            return r.status == 200
    except OSError:
        return False


def run_derpprobe(nodes, ca, servers):
    """derpprobe --once over a one-region DERP map of nodes [(name, port, stun port or -1)],
    with the bandwidth probe too (1 MB between every pair): fails unless it exits 0, reports
    nothing bad and reports good every TLS, STUN (where there is STUN), mesh and bandwidth probe.
    Returns the good lines. derpprobe gives the mesh 100 ms to tell the first node about the
    second node's new client before it sends (prober/derp.go, "pretty arbitrary"): a loaded
    machine may miss that, so a run whose only bad probes cross between two nodes is repeated,
    up to 3 runs; anything else bad fails at once."""
    dm = {"Regions": {"900": {"RegionID": 900, "RegionCode": "hderp", "RegionName": "hderp",
          "Nodes": [{"Name": "900" + name, "RegionID": 900, "HostName": "localhost",
                     "IPv4": "127.0.0.1", "STUNPort": stun, "DERPPort": port}
                    for name, port, stun in nodes]}}}
    dm_file = os.path.join(WORK, "derpmap.json")
    with open(dm_file, "w") as f:
        json.dump(dm, f)
    names = [name for name, _, _ in nodes]
    want = ["derp/hderp/900%s/tls" % x for x in names]
    want += ["derp/hderp/900%s/udp" % x for x, _, stun in nodes if stun != -1]
    want += ["derp/hderp/900%s/900%s/%s" % (x, y, kind) for x in names for y in names
             for kind in ("mesh", "bw")]
    crossing = ["derp/hderp/900%s/900%s/" % (x, y) for x in names for y in names if x != y]
    # A probe's deadline is 0.8 times its interval (--once runs each probe once, at once): 60 s
    # intervals give each probe 48 s, a bound for a hang on a loaded machine.
    intervals = []
    for flag in ("--interval", "--mesh-interval", "--stun-interval", "--tls-interval",
                 "--bw-interval"):
        intervals += [flag, "60s"]
    for attempt in range(1, 4):
        p = run_go([go_program("derpprobe"), "--once", "--spread=false", "--derp-map",
                    "file://" + dm_file, "--mesh-psk-file", MESH_KEY_FILE,
                    "--bw-probe-size-bytes", "1000000"] + intervals, {"SSL_CERT_FILE": ca},
                   servers, "derpprobe")
        good = [l.split("good: ", 1)[1] for l in p.stdout.splitlines() if "good: " in l]
        bad = [l.split("bad: ", 1)[1] for l in p.stdout.splitlines() if "bad: " in l]
        missing = [w for w in want if not any(g.startswith(w + ":") for g in good)]
        if p.returncode == 0 and not bad and not missing:
            return good
        only_crossing = bad and all(any(b.startswith(c) for c in crossing) for b in bad)
        if not only_crossing or attempt == 3:
            fail("derpprobe exited %d (run %d); bad: %s; not reported good: %s" % (
                p.returncode, attempt, bad, missing), servers)
        print("derpprobe run %d: only probes between two nodes bad; again" % attempt)


def derpprobe():
    ca, certs = make_ca(WORK)
    (ha, pa), (hb, pb) = hold_port(), hold_port()
    mesh = "localhost:%d,localhost:%d" % (pa, pb)
    env = dict(os.environ, SSL_CERT_FILE=ca)  # the mesh links verify each other (hderp: Go's)
    nodes = []
    for name, port in (("a", pa), ("b", pb)):
        nodes.append(Server(BIN, WORK, name, [
            "-a", "127.0.0.1:%d" % port, "-stun-port", "0", "-c",
            os.path.join(WORK, name + ".key"), "-mesh-psk-file", MESH_KEY_FILE, "-mesh-with", mesh,
            "--shards", "2"] +
            tls_args(certs), env=env))
    STARTED.extend(nodes)
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            wait_for(lambda: varz_tls(n.port, ca, "derp_mesh_links_ready") == 1,
                     "%s's mesh link to the other node" % n.name, 30)
        good = run_derpprobe([(n.name, n.port, n.stun) for n in nodes], ca, nodes)
        for n in nodes:
            if not n.alive():
                fail("hderp-server %s exited during the probes" % n.name, nodes)
    finally:
        for n in nodes:
            n.stop()
        ha.close(), hb.close()
    print("PASS: derpprobe --once against a two-node hderp region: %d probes good" % len(good))


def varz_tls(port, ca, name):
    ctx = ssl.create_default_context(cafile=ca)
    try:
        with urllib.request.urlopen("https://localhost:%d/debug/varz" % port, timeout=5,
                                    context=ctx) as r:
            for line in r.read().decode().splitlines():
                f = line.split()
                if len(f) == 2 and f[0] == name:
                    return int(float(f[1]))
    except OSError:
        return None
    return None


def mixed():
    ca, certs = make_ca(WORK)
    (hh, ph), (hd, pd) = hold_port(), hold_port()
    mesh = "localhost:%d,localhost:%d" % (ph, pd)  # the same list on both nodes
    env = dict(os.environ, SSL_CERT_FILE=ca)
    h = Server(BIN, WORK, "hderp", [
        "-a", "127.0.0.1:%d" % ph, "-stun-port", "0", "-c", os.path.join(WORK, "hderp.key"),
        "-mesh-psk-file", MESH_KEY_FILE, "-mesh-with", mesh, "--shards", "2"] +
        tls_args(certs), env=env)
    d = None
    STARTED.append(h)
    try:
        h.start()
        d = Derper("derper", pd, certs, ["-mesh-with", mesh], env).wait_up(ca)
        wait_for(lambda: varz_tls(ph, ca, "derp_mesh_links_ready") == 1,
                 "hderp's mesh link to derper", 30)
        p = run_go([go_program("derpclient"), "-mixed", "-url", "https://localhost:%d/derp" % ph,
                    "-url2", "https://localhost:%d/derp" % pd, "-mesh-key-file", MESH_KEY_FILE,
                    "-ca", ca], {}, [h, d], "derpclient -mixed")
        if p.returncode != 0:
            fail("derpclient -mixed exited %d" % p.returncode, [h, d])
        good = run_derpprobe([("h", ph, h.stun), ("d", pd, -1)], ca, [h, d])
        print("derpprobe --once over the mixed region: %d probes good" % len(good))
        if not h.alive() or not d.alive():
            fail("a server exited during the checks", [h, d])
    finally:
        h.stop()
        if d:
            d.stop()
        hh.close(), hd.close()
    print("PASS: a region of derper and hderp-server meshed with each other")


def http_get(port, path, source=None):
    """(status, headers, body) of GET path on 127.0.0.1:port, plain HTTP (from address source:
    default the kernel's choice)."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                   source_address=(source, 0) if source else None)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        c.close()


def bootstrap_answer(port, path, source=None):
    """/bootstrap-dns's answer as (status, Content-Type, Connection, body: parsed JSON with each
    address list sorted; None for an empty body, and the raw body where no list has two
    addresses: then the bytes, derper's indentation included, are the same too)."""
    status, headers, body = http_get(port, path, source)
    h = {k.lower(): v for k, v in headers}
    parsed = None
    if body:
        parsed = json.loads(body)
        if isinstance(parsed, dict):
            parsed = {k: sorted(v) for k, v in parsed.items()}
    one = not isinstance(parsed, dict) or all(len(v) < 2 for v in parsed.values())
    return status, h.get("content-type"), h.get("connection"), parsed, body if one else None


BOOTDNS_COUNTERS = ["counter_bootstrap_dns_" + n for n in (
    "requests", "published_hits", "published_misses", "unpublished_hits", "unpublished_misses",
    "unpublished_percent_misses", "queried_domains")]


def bootdns_counters(port):
    """derper's bootstrap DNS expvars in /debug/vars (plain HTTP, from loopback)."""
    status, _, body = http_get(port, "/debug/vars")
    v = json.loads(body) if status == 200 else {}
    return {n: v.get(n) for n in BOOTDNS_COUNTERS}


def bootdns_compare(before, after, what, requests):
    """The counters' growth over the same requests (queried_domains: its value) from derper and
    hderp-server must be the same; requests must have counted each; the figures (derper's)."""
    grew = {}
    for name in ("derper", "hderp-server"):
        b, a = before[name], after[name]
        if None in a.values() or None in b.values():
            fail("%s: %s's /debug/vars lacks some of %r: %r" % (what, name, BOOTDNS_COUNTERS, a))
        grew[name] = {n: a[n] - (0 if n.endswith("queried_domains") else b[n]) for n in a}
    print("%s: bootstrap DNS counters: derper %r, hderp-server %r" % (
        what, grew["derper"], grew["hderp-server"]))
    if grew["derper"] != grew["hderp-server"]:
        fail("%s: hderp-server's bootstrap DNS counters grew %r, derper's %r" % (
            what, grew["hderp-server"], grew["derper"]))
    if grew["derper"]["counter_bootstrap_dns_requests"] != requests:
        fail("%s: %d requests made, counter_bootstrap_dns_requests grew %r" % (
            what, requests, grew["derper"]["counter_bootstrap_dns_requests"]))
    return grew["derper"]


def bootstrap_dns():
    env = env_without_ca()
    published = "127.0.0.2,::1,localhost,,127.0.0.2"
    unpublished = "127.0.0.3,localhost/,::2"
    configs = [  # flags, a query answered once the names are resolved, the queries
        (["-bootstrap-dns-names", published, "-unpublished-bootstrap-dns-names", unpublished],
         "", ["", "?q=127.0.0.3", "?q=%3A%3A2", "?q=localhost", "?q=127.0.0.2",
              "?q=nothing.example", "?q=127.0.0.3&q=::2", "?x=1&q=127.0.0.3", "?q=127.0.0.3;x",
              "?q=%31%32%37.0.0.%33", "?q=%3a%3A2", "?q=%zz&q=127.0.0.3", "?q=%3&q=localhost",
              "?q=127.0.0.3+", "?q=local+host", "?q=%2B", "?%71=127.0.0.3", "?%7=1&%71=::2",
              "?Q=127.0.0.3", "?q%3D127.0.0.3", "?%71%3d127.0.0.3"]),
        (["-unpublished-bootstrap-dns-names", unpublished],
         "?q=127.0.0.3", ["", "?q=127.0.0.3", "?q=nothing.example"]),
    ]
    for i, (flags, ready, queries) in enumerate(configs):
        port = free_port()
        d = Derper("derper%d" % i, port, None, flags, env).wait_up(None)
        h = Server(BIN, WORK, "hderp%d" % i, ["-a", "127.0.0.1:0", "-stun=false", "-c",
                                              os.path.join(WORK, "server.key")] + flags)
        STARTED.append(h)
        h.start()
        try:
            for name, p in (("derper", d.port), ("hderp-server", h.port)):  # first refresh
                wait_for(lambda: bootstrap_answer(p, "/bootstrap-dns" + ready)[3] is not None,
                         "%s's first bootstrap DNS refresh" % name, 30)
            before = {"derper": bootdns_counters(d.port), "hderp-server": bootdns_counters(h.port)}
            for q in queries:
                path = "/bootstrap-dns" + q
                want, got = bootstrap_answer(d.port, path), bootstrap_answer(h.port, path)
                print("%s: derper %r, hderp-server %r" % (path, want, got))
                if want != got:
                    fail("%s: hderp-server answered %r, derper %r" % (path, got, want))
                if got[0] != 200 or got[1] != "application/json" or got[2] != "close":
                    fail("%s: status %r, Content-Type %r, Connection %r" % (path, *got[:3]))
            after = {"derper": bootdns_counters(d.port), "hderp-server": bootdns_counters(h.port)}
            grew = bootdns_compare(before, after, "configuration %d" % i, len(queries))
            kinds = ["unpublished_hits", "unpublished_misses"] + (["published_hits"] if i == 0
                                                                  else [])
            for k in kinds:  # hits of both lists and misses asked: each counted at least once
                if grew["counter_bootstrap_dns_" + k] < 1:
                    fail("configuration %d: counter_bootstrap_dns_%s did not grow: %r" % (
                        i, k, grew))
            if i == 1:  # derper clears its set of queried names once it holds over 500
                seen = grew["counter_bootstrap_dns_queried_domains"]
                for n in range(501 - seen):
                    for p in (d.port, h.port):
                        http_get(p, "/bootstrap-dns?q=n%d.example" % n)
                http_get(d.port, "/bootstrap-dns?q=last.example")
                http_get(h.port, "/bootstrap-dns?q=last.example")
                cleared = bootdns_compare(after, {"derper": bootdns_counters(d.port),
                                                  "hderp-server": bootdns_counters(h.port)},
                                          "501 names", 502 - seen)
                if cleared["counter_bootstrap_dns_queried_domains"] != 1:
                    fail("501 distinct names then one: queried_domains %r, not 1" % cleared)
        finally:
            h.stop()
            d.stop()
    print("PASS: /bootstrap-dns answers as derper v1.102.5's with the same names")


# bootstrap-dns-txt's DNS: A and AAAA records (one address a name: the answers compare as
# bytes) and TXT records; any other name is NXDOMAIN.
DNS_ADDRS = {"pub.test": ["192.0.2.1"], "pub6.test": ["2001:db8::6"], "u50.test": ["192.0.2.50"],
             "u100.test": ["192.0.2.100"], "u0.test": ["192.0.2.10"], "ubad.test": ["192.0.2.11"],
             "umiss.test": ["192.0.2.12"], "uplain.test": ["192.0.2.13"]}
DNS_TXT = {"pct50.test": ["50"], "pct100.test": ["100"], "pct0.test": ["0"],
           "pctbad.test": ["abc"]}


def dns_answer(q):
    """The answer to one DNS query (RFC 1035): A, AAAA and TXT from the tables above."""
    import socket as so
    import struct
    tid, flags = struct.unpack(">HH", q[:4])
    i, labels = 12, []
    while q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode().lower())
        i += 1 + q[i]
    qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
    name, question = ".".join(labels), q[12:i + 5]
    rdatas = []
    for ip in DNS_ADDRS.get(name, []):
        fam = so.AF_INET6 if ":" in ip else so.AF_INET
        if (qtype, fam) in ((1, so.AF_INET), (28, so.AF_INET6)):
            rdatas.append(so.inet_pton(fam, ip))
    if qtype == 16:
        rdatas += [bytes([len(t)]) + t.encode() for t in DNS_TXT.get(name, [])]
    rcode = 0 if name in DNS_ADDRS or name in DNS_TXT else 3
    out = struct.pack(">HHHHHH", tid, 0x8480 | (flags & 0x0100) | rcode, 1, len(rdatas), 0, 0)
    out += question
    for r in rdatas:
        out += b"\xc0\x0c" + struct.pack(">HHIH", qtype, 1, 60, len(r)) + r
    return out


def dns_serve(sock):
    while True:
        q, peer = sock.recvfrom(4096)
        try:
            sock.sendto(dns_answer(q), peer)
        except (IndexError, UnicodeDecodeError, OSError):
            pass  # not a query this server answers


def bootstrap_dns_txt():
    if os.environ.get("HD_INTEROP_NETNS") != "1":  # run again inside namespaces of its own
        p = subprocess.run(["unshare", "--net", "--mount", sys.executable,
                            os.path.abspath(__file__)] + sys.argv[1:],
                           env=dict(os.environ, HD_INTEROP_NETNS="1"), timeout=RUN_S)
        if p.returncode != 0:
            fail("bootstrap-dns-txt in its namespaces exited %d (unshare needs root)"
                 % p.returncode, [])
        return
    import socket as so
    import threading
    clients = ["10.9.0.%d" % i for i in range(10, 50)]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for a in clients:
        subprocess.run(["ip", "addr", "add", a + "/32", "dev", "lo"], check=True)
    conf = os.path.join(WORK, "resolv.conf")
    with open(conf, "w") as f:
        f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:2\n")
    subprocess.run(["mount", "--bind", conf, "/etc/resolv.conf"], check=True)
    dns = so.socket(so.AF_INET, so.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 53))
    threading.Thread(target=dns_serve, args=(dns,), daemon=True).start()
    flags = ["-bootstrap-dns-names", "pub.test,pub6.test,nope.test",
             "-unpublished-bootstrap-dns-names",
             "u50.test/pct50.test,u100.test/pct100.test,u0.test/pct0.test,"
             "ubad.test/pctbad.test,umiss.test/nope.test,uplain.test"]
    env = env_without_ca()
    port = free_port()
    d = Derper("derper", port, None, flags, env).wait_up(None)
    h = Server(BIN, WORK, "hderp", ["-a", "127.0.0.1:0", "-stun=false", "-c",
                                    os.path.join(WORK, "server.key")] + flags)
    STARTED.append(h)
    h.start()
    try:
        for name, p in (("derper", d.port), ("hderp-server", h.port)):  # the first refresh
            wait_for(lambda: bootstrap_answer(p, "/bootstrap-dns?q=uplain.test", clients[0])[3]
                     == {"uplain.test": ["192.0.2.13"]}, "%s's bootstrap DNS" % name, 30)
        served = set()
        before = {"derper": bootdns_counters(d.port), "hderp-server": bootdns_counters(h.port)}
        for src in clients:
            for q in ["", "?q=u50.test", "?q=u100.test", "?q=u0.test", "?q=ubad.test",
                      "?q=umiss.test", "?q=pub.test"]:
                path = "/bootstrap-dns" + q
                want = bootstrap_answer(d.port, path, src)
                got = bootstrap_answer(h.port, path, src)
                if want != got:
                    fail("%s from %s: hderp-server answered %r, derper %r" % (path, src, got,
                                                                            want))
                alone = len(got[3] or {}) == 1 and q[3:] in got[3]
                if q == "?q=u50.test":
                    served.add(alone)
                elif alone != (q == "?q=u100.test"):  # 100 %: always; 0, bad, none: never
                    fail("%s from %s: %r (the TXT percentage not applied)" % (path, src, got))
        print("/bootstrap-dns from %d addresses: u50.test (50%%) answered alone to some: %s"
              % (len(clients), sorted(served)))
        after = {"derper": bootdns_counters(d.port), "hderp-server": bootdns_counters(h.port)}
        grew = bootdns_compare(before, after, "TXT rollout", len(clients) * 7)
        if grew["counter_bootstrap_dns_unpublished_percent_misses"] < len(clients) * 3:
            fail("u0, ubad and umiss (0 %%) are percent misses from every client: %r" % grew)
        if served != {True, False}:
            fail("the 50%% rollout answered every client alike (%r): the draw is not exercised"
                 % served)
    finally:
        h.stop()
        d.stop()
    print("PASS: bootstrap DNS through DNS and TXT rollout percentages, as derper v1.102.5")


class Setec(LoggedProc):
    """GOBIN/setecserver on 127.0.0.1 (a kernel-picked port), secrets put at start; stopped by
    PID. url is its base URL."""

    def __init__(self, name, secrets):
        d = os.path.join(WORK, name)
        os.makedirs(d, exist_ok=True)
        self.name, self.log = name, os.path.join(WORK, name + ".log")
        addr_file = os.path.join(d, "addr")
        args = [go_program("setecserver"), "-dir", d, "-addr-file", addr_file]
        for k, v in secrets.items():
            args += ["-put", "%s=%s" % (k, v)]
        STARTED.append(self)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("setecserver exited %d" % self.proc.returncode)
            return os.path.exists(addr_file) and open(addr_file).read().strip()
        self.url = "http://" + wait_for(up, "setecserver to listen", 30)

    def put(self, name, value):
        """setec's own API, as `setec put` calls it."""
        import base64
        body = json.dumps({"Name": name, "Value": base64.b64encode(value.encode()).decode()})
        rq = urllib.request.Request(self.url + "/api/put", data=body.encode(), method="POST",
                                    headers={"Content-Type": "application/json",
                                             "Sec-X-Tailscale-No-Browsers": "setec"})
        with urllib.request.urlopen(rq, timeout=10) as r:
            assert r.status == 200, r.status


def check_cache(path, name):
    """The cache file as setec's FileCache writes it, holding name's value (the mesh key)."""
    import base64
    import stat
    if stat.S_IMODE(os.stat(path).st_mode) != 0o600:
        fail("%s: mode %o, want 600" % (path, stat.S_IMODE(os.stat(path).st_mode)))
    if stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) != 0o700:
        fail("%s's directory: mode %o, want 700" % (path, os.stat(os.path.dirname(path)).st_mode))
    with open(path) as f:
        c = json.load(f)
    e = c.get(name)
    if not e or base64.b64decode(e["secret"]["Value"]).decode() != MESH_KEY or \
            not isinstance(e["secret"]["Version"], int) or not int(e["lastAccess"]):
        fail("%s: no valid entry for %s: %r" % (path, name, c))


def hderp_setec(name, url, cache, extra=()):
    return Server(BIN, WORK, name, ["-a", "127.0.0.1:0", "-stun=false", "-c",
                                    os.path.join(WORK, name + ".key"), "-secrets-url", url,
                                    "-secrets-cache-dir", cache] + list(extra))


def mesh_checks(s, what):
    """derpclient's mesh-key checks (and their refusals without it) against hderp-server s."""
    run_derpclient("plain", s.port, None, [s], ["-run", "mesh-key"])
    print("ok: %s: hderp-server accepts the mesh key" % what)


def start_unready(h):
    """Starts hderp-server h without waiting for it to listen (it waits for its mesh key)."""
    h.proc = subprocess.Popen([h.binary] + h.args + ["--port-file", h.port_file],
                              stdout=open(h.log, "w"), stderr=subprocess.STDOUT)
    STARTED.append(h)


def wait_log(s, text, what):
    wait_for(lambda: text in s.log_text() or (s.proc.poll() is not None and
                                              fail("%s exited:\n%s" % (s.name, s.log_text()))),
             what, 30)


def secrets():
    env = env_without_ca()
    st = Setec("setec", {"prod/derp/meshkey": MESH_KEY, "interop/r1/meshkey": MESH_KEY,
                         "interop/short/meshkey": "abcd" * 4})
    dcache, hcache = os.path.join(WORK, "dcache", "s"), os.path.join(WORK, "hcache", "d", "s")
    port = free_port()
    d = Derper("derper", port, None, ["-secrets-url", st.url, "-secrets-cache-dir", dcache], env)
    d.wait_up(None)
    d.stop()
    check_cache(dcache, "prod/derp/meshkey")
    h = hderp_setec("hderp", st.url, hcache, ["-secrets-path-prefix", "interop/r1"])
    h.start()
    mesh_checks(h, "the key from setec")
    h.stop()
    check_cache(hcache, "interop/r1/meshkey")
    st.stop()
    # the server gone: each starts from the other's cache
    shutil.copy(dcache, hcache)
    h = hderp_setec("hderp-cached", st.url, hcache)
    h.start()
    mesh_checks(h, "the key from derper's cache, the setec server gone")
    h.stop()
    check_cache(hcache, "prod/derp/meshkey")
    shutil.copy(hcache, dcache)
    d = Derper("derper-cached", port, None, ["-secrets-url", st.url, "-secrets-cache-dir",
                                             dcache], env)
    d.wait_up(None)
    d.stop()
    print("ok: derper and hderp-server start from each other's setec cache")
    # unreachable: logged by name, start-up waits
    h = hderp_setec("hderp-unreachable", st.url, os.path.join(WORK, "c3", "s"))
    start_unready(h)
    wait_log(h, 'error fetching \"prod/derp/meshkey\": connect to %s: Connection refused '
             "(retrying)" % st.url[len("http://"):], "hderp-server to log the refused connection")
    if os.path.exists(h.port_file):
        fail("hderp-server listened without its mesh key")
    h.stop()
    print("ok: an unreachable setec server is logged by name; start-up waits")
    # not found: waited for, taken once stored
    st2 = Setec("setec2", {})
    h = hderp_setec("hderp-notfound", st2.url, os.path.join(WORK, "c4", "s"))
    start_unready(h)
    wait_log(h, 'error fetching \"prod/derp/meshkey\": not found (HTTP 404) (retrying)',
             "hderp-server to log the missing secret")
    st2.put("prod/derp/meshkey", MESH_KEY)
    ports = wait_for(lambda: h.proc.poll() is None and read_port_file(h.port_file),
                     "hderp-server to start once the secret is stored", 30)
    h.port = ports["derp"]
    mesh_checks(h, "a secret stored while hderp-server waited")
    h.stop()
    st2.stop()
    # refused: not a mesh key; a cache path that is a directory
    st3 = Setec("setec3", {"interop/short/meshkey": "abcd" * 4, "interop/empty/meshkey": ""})
    # an empty secret: derper runs without a mesh key ("No mesh key configured"); so does hderp
    h = hderp_setec("hderp-empty", st3.url, os.path.join(WORK, "c8", "s"),
                    ["-secrets-path-prefix", "interop/empty"])
    h.start()
    if "mesh key none" not in h.log_text() or "is empty: no mesh key configured" not in \
            h.log_text():
        fail("an empty setec secret: hderp-server did not run without a mesh key, saying so")
    h.stop()
    port = free_port()
    d = Derper("derper-empty", port, None, ["-secrets-url", st3.url, "-secrets-path-prefix",
                                            "interop/empty", "-secrets-cache-dir",
                                            os.path.join(WORK, "c9", "s")], env).wait_up(None)
    if "No mesh key configured" not in d.log_text():
        fail("derper with an empty setec secret: the reference moved")
    d.stop()
    os.makedirs(os.path.join(WORK, "c6", "dir"))
    for name, args, want in [
            ("short", ["-secrets-path-prefix", "interop/short"],
             'invalid mesh key from setec secret "interop/short/meshkey": must be 64-digit '
             "hexadecimal number (got 16 bytes)"),
            ("cachedir", ["-secrets-cache-dir", os.path.join(WORK, "c6", "dir")],
             "cache path exists and is not a regular file")]:
        cache = os.path.join(WORK, "c5-" + name, "s")
        cmd = [os.path.join(BIN, "hderp-server"), "-a", "127.0.0.1:0", "-stun=false", "-c",
               os.path.join(WORK, name + ".key"), "-secrets-url", st3.url, "-secrets-cache-dir",
               cache] + args
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_S)
        print("+ %s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-300:]))
        if p.returncode == 0 or want not in p.stderr:
            fail("%s: exit %d, want a failure saying %r" % (name, p.returncode, want))
    port = free_port()
    p = subprocess.run([go_program("derper"), "-a", "127.0.0.1:%d" % port, "-stun=false", "-c",
                        os.path.join(WORK, "derper-short.json"), "-secrets-url", st3.url,
                        "-secrets-path-prefix", "interop/short", "-secrets-cache-dir",
                        os.path.join(WORK, "c7", "s")], capture_output=True, text=True,
                       timeout=RUN_S, env=env)
    if p.returncode == 0 or "invalid mesh key" not in p.stderr:
        fail("derper took a 16-byte mesh key from setec (exit %d): the reference moved: %s"
             % (p.returncode, p.stderr[-500:]))
    st3.stop()
    print("PASS: -secrets-url: the mesh key from a setec server and its cache, as derper")


def fetch(port, path, ca):
    ctx = ssl.create_default_context(cafile=ca)
    with urllib.request.urlopen("https://localhost:%d%s" % (port, path), timeout=10,
                                context=ctx) as r:
        return r.read().decode()


def series_names(text):
    """The series names of a Prometheus text answer: every TYPE line's, and every sample's (a
    histogram's or summary's _bucket, _sum and _count under its own name)."""
    typed, names = {}, set()
    for line in text.splitlines():
        f = line.split()
        if line.startswith("# TYPE ") and len(f) >= 4:
            typed[f[2]] = f[3]
            names.add(f[2])
        elif f and not line.startswith("#"):
            name = re.split(r"[{ ]", line, 1)[0]
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            names.add(base if typed.get(base) in ("histogram", "summary") else name)
    return names


def vars_names(text):
    """/debug/vars' top-level names, and "derp.NAME" for the derp set's members."""
    v = json.loads(text)
    return set(v) | {"derp." + k for k in v.get("derp", {})}


def not_published():
    """The names docs/DERPER-PARITY.md lists as derper's and not hderp's: every `name` in the
    first column of the table between its <!-- not-published --> markers (a * ends a prefix)."""
    with open(os.path.join(HERE, "..", "..", "docs", "DERPER-PARITY.md")) as f:
        doc = f.read()
    m = re.search(r"<!-- not-published -->(.*?)<!-- /not-published -->", doc, re.S)
    if not m:
        fail("docs/DERPER-PARITY.md has no <!-- not-published --> list")
    out = set()
    for line in m.group(1).splitlines():
        cells = line.split("|")
        if len(cells) > 2 and not set(cells[1].strip()) <= set("-: "):
            out |= set(re.findall(r"`([^`]+)`", cells[1]))
    return out


def listed(name, names):
    return any(name == n or (n.endswith("*") and name.startswith(n[:-1])) for n in names)


def metric_names():
    ca, certs = make_ca(WORK)
    rate = os.path.join(WORK, "rate.json")
    with open(rate, "w") as f:
        json.dump({"PerClientRateLimitBytesPerSec": 1000000, "PerClientRateBurstBytes": 100000}, f)
    hold, port = hold_port()
    d = Derper("derper", port, certs, ["-rate-config", rate], dict(os.environ)).wait_up(ca)
    h = Server(BIN, WORK, "hderp", ["-a", "127.0.0.1:0", "-stun-port", "0", "-c",
                                    os.path.join(WORK, "hderp.key"), "-mesh-psk-file",
                                    MESH_KEY_FILE, "-rate-config", rate] + tls_args(certs))
    STARTED.append(h)
    try:
        h.start()
        got = {}
        for name, p in (("derper", port), ("hderp", h.port)):
            fetch(p, "/debug/varz", ca)  # a TLS request counted first (derper_tls_*)
            got[name] = (series_names(fetch(p, "/debug/varz", ca)) |
                         {"vars:" + n for n in vars_names(fetch(p, "/debug/vars", ca))})
    finally:
        h.stop()
        d.stop()
        hold.close()
    doc = not_published()
    missing = sorted(n for n in got["derper"] - got["hderp"] if not listed(n, doc))
    wrong = sorted(n for n in doc if "*" not in n and n in got["hderp"])
    unknown = sorted(n for n in doc if "*" not in n and n not in got["derper"])
    if missing:
        fail("derper v1.102.5 publishes %s; hderp-server does not, and docs/DERPER-PARITY.md "
             "does not list them as not published" % missing, [d, h])
    if wrong:
        fail("docs/DERPER-PARITY.md lists %s as not published, but hderp-server publishes "
             "them" % wrong, [d, h])
    if unknown:
        fail("docs/DERPER-PARITY.md lists %s, which derper v1.102.5 does not publish" % unknown,
             [d, h])
    print("%d names of derper's, %d of hderp's; %d listed as not published" % (
        len(got["derper"]), len(got["hderp"]), len(got["derper"] - got["hderp"])))
    print("PASS: every metric and /debug/vars name of derper v1.102.5 is hderp-server's too, "
          "or listed in docs/DERPER-PARITY.md as not published")


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
MESH_KEY_FILE = os.path.join(WORK, "mesh.key")
with open(MESH_KEY_FILE, "w") as f:
    f.write(MESH_KEY + "\n")
SCENARIOS = {"client-plain": lambda: client("plain"), "client-tls": lambda: client("tls"),
             "client-ws": lambda: client("ws"), "client-wss": lambda: client("wss"),
             "reference-derper": lambda: reference_derper("tls"),
             "reference-derper-wss": lambda: reference_derper("wss"),
             "derpprobe": derpprobe, "mixed": mixed, "bootstrap-dns": bootstrap_dns,
             "bootstrap-dns-txt": bootstrap_dns_txt, "secrets": secrets,
             "metric-names": metric_names}
if SCENARIO not in SCENARIOS:
    fail("unknown scenario %r (one of %s)" % (SCENARIO, ", ".join(SCENARIOS)))
try:
    SCENARIOS[SCENARIO]()
except (AssertionError, OSError, subprocess.CalledProcessError) as e:  # a wait ran out, ...
    fail("%s: %s" % (type(e).__name__, e))
