#!/usr/bin/env python3
"""debug_endpoints.py BIN WORK - derper v1.102.5's /debug/ pages on a real hderp-server
(docs/DERPER-PARITY.md, "Endpoints"): who may reach them (X-Forwarded-For refused, ?debugkey=
with TS_DEBUG_KEY_PATH let in), the index, /debug -> /debug/, the Go runtime's pages refused by
name (501), /debug/vars (derper's expvar names, the same values as /debug/varz), /debug/check
with clients and a duplicate key, /debug/traffic (a receiver's line with its key and its unique
senders), the metrics added for parity (the mesh-update and buffered-write histograms, the
queue duration, version, uptime, process_*), and in TLS mode derper's TLS listener and TLS
version series. Servers stopped by PID."""
import http.client
import json
import os
import shutil
import socket
import ssl
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import derp_pyclient as dc  # noqa: E402
import testlib  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
MESH = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
STARTED = []

# derper v1.102.5's "derp" expvar set (derpserver.ExpVar without -rate-config), less what is
# Go's own (gauge_memstats_sys0: DERPER-PARITY.md). tests/interop's metric-names scenario holds
# this list against the real derper.
DERP_KEYS = """accepts average_queue_duration_ms bytes_received bytes_sent
counter_buffered_write_frames counter_mesh_update_batch_size counter_mesh_update_loop_count
counter_packets_received_kind counter_tcp_rtt counter_total_dup_client_conns gauge_clients_local
gauge_clients_remote gauge_clients_total gauge_current_connections
gauge_current_dup_client_conns gauge_current_dup_client_keys gauge_current_file_descriptors
gauge_current_home_connections gauge_current_notideal_connections gauge_watchers got_ping
home_moves_in home_moves_out multiforwarder_created multiforwarder_deleted
packet_forwarder_delete_other_value packets_forwarded_in packets_forwarded_out packets_received
packets_sent peer_gone_disconnected_frames peer_gone_not_here_frames sclient_write_timeouts
sent_pong unknown_frames version""".split()


def fail(msg):
    print("FAIL: " + msg)
    for s in STARTED:
        s.kill()
        print("--- %s\n%s" % (s.name, s.log_text()[-3000:]))
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def get(port, path, headers=None, ctx=None):
    """(status, headers, body) of GET path."""
    if ctx:
        c = http.client.HTTPSConnection("localhost", port, timeout=10, context=ctx)
    else:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    out = r.status, dict(r.getheaders()), r.read().decode(errors="replace")
    c.close()
    return out


def connect_as(port, pk, sk, info=None):
    """A logged-in client with the key pair (pk, sk): a duplicate of another connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /derp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: DERP\r\n"
              b"Derp-Fast-Start: 1\r\n\r\n")
    return dc.login(s, pk, sk, info)


def varz_series(port, ctx=None):
    status, _, body = get(port, "/debug/varz", ctx=ctx)
    check(status == 200, "/debug/varz: %d" % status)
    out = {}
    for line in body.splitlines():
        f = line.split()
        if len(f) == 2 and not line.startswith("#"):
            out[f[0]] = float(f[1])
    return out, body


def plain_server():
    keyfile, meshfile = os.path.join(WORK, "debug.key"), os.path.join(WORK, "mesh.key")
    with open(keyfile, "w") as f:
        f.write("  s3cret\n")
    with open(meshfile, "w") as f:
        f.write(MESH + "\n")
    env = dict(os.environ, TS_DEBUG_KEY_PATH=keyfile)
    srv = testlib.Server(BIN, WORK, "plain", [
        "-a", "127.0.0.1:0", "-stun-port", "0", "-c", os.path.join(WORK, "derper.key"),
        "--shards", "2", "-mesh-psk-file", meshfile], env=env)
    STARTED.append(srv)
    return srv.start()


def check_pages(p):
    status, _, body = get(p, "/debug/")
    check(status == 200 and "<h1>hderp-server debug</h1>" in body, "/debug/: %d %s" % (
        status, body[:200]))
    for link in ("vars", "varz", "check", "traffic"):
        check('href="/debug/%s"' % link in body, "/debug/ does not link /debug/%s" % link)
    check("<b>Mesh key:</b> true" in body and "<b>Uptime:</b>" in body, "/debug/: " + body)
    status, hdrs, _ = get(p, "/debug")
    check(status == 301 and hdrs.get("Location") == "/debug/", "/debug: %d %s" % (status, hdrs))
    for path in ("/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=2",
                 "/debug/gc", "/debug/set-mutex-profile-fraction?rate=1"):
        status, _, body = get(p, path)
        page = path.split("?")[0].rstrip("/")
        page = "/debug/pprof" if page.startswith("/debug/pprof") else page
        check(status == 501 and page in body and "not a Go program" in body,
              "%s: %d %s" % (path, status, body))
    status, _, body = get(p, "/debug/nope")
    check(status == 404, "/debug/nope: %d" % status)
    # tsweb's rules: X-Forwarded-For refuses even from loopback, unless ?debugkey= matches the
    # file TS_DEBUG_KEY_PATH names (whitespace trimmed); a wrong key changes nothing.
    xff = {"X-Forwarded-For": "192.0.2.1"}
    status, _, body = get(p, "/debug/varz", xff)
    check(status == 403 and "debug access denied" in body, "X-Forwarded-For: %d" % status)
    status, _, _ = get(p, "/debug/varz?debugkey=s3cret", xff)
    check(status == 200, "?debugkey= with the right key: %d" % status)
    status, _, _ = get(p, "/debug/varz?debugkey=wrong", xff)
    check(status == 403, "?debugkey= with a wrong key: %d" % status)


def check_vars(p, args):
    status, hdrs, body = get(p, "/debug/vars")
    check(status == 200 and "json" in hdrs.get("Content-Type", ""), "/debug/vars: %d" % status)
    v = json.loads(body)
    missing = [k for k in DERP_KEYS if k not in v.get("derp", {})]
    check(not missing, "/debug/vars' derp lacks %s" % missing)
    for k in ("cmdline", "counter_uptime_sec", "derp_bytes_dropped", "derp_packets_dropped",
              "derp_websocket_accepts", "process_start_unix_time", "stun", "version"):
        check(k in v, "/debug/vars lacks %s" % k)
    check(v["cmdline"][1:len(args) + 1] == args, "cmdline %s" % v["cmdline"])
    check(sorted(v["stun"]["counter_requests"]) == ["not_stun", "read_error", "success",
                                                    "write_error"], "stun %s" % v["stun"])
    check("tls_listener" not in v, "tls_listener in plain mode")
    version = testlib.subprocess.run([os.path.join(BIN, "hderp-server"), "-version"],
                                     capture_output=True, text=True).stdout.split()[-1]
    check(v["version"] == version == v["derp"]["version"], "version %s" % v["version"])
    series, _ = varz_series(p)  # nothing moves between the two answers: the same values
    d = v["derp"]
    pairs = [("gauge_current_connections", "derp_current_connections"),
             ("packets_sent", "derp_packets_sent"), ("accepts", "derp_accepts"),
             ("gauge_current_dup_client_keys", "derp_current_dup_client_keys"),
             ("gauge_watchers", "derp_watchers")]
    for key, name in pairs:
        check(d[key] == series[name], "vars %s %s, varz %s %s" % (key, d[key], name,
                                                                  series.get(name)))
    h = d["counter_buffered_write_frames"]
    check(h["count"] == h["+Inf"] == series["derp_buffered_write_frames_count"] > 0,
          "buffered_write_frames %s" % h)
    return v


def check_traffic(p, bpk):
    """/debug/traffic's first look: every connection, b's line with its key and 1 sender."""
    s = socket.create_connection(("127.0.0.1", p), timeout=10)
    s.sendall(b"GET /debug/traffic HTTP/1.1\r\nHost: x\r\n\r\n")
    buf, want = b"", ("nodekey:" + bpk.hex()).encode()
    deadline = time.monotonic() + 20
    while want not in buf and time.monotonic() < deadline:
        try:
            d = s.recv(65536)
        except socket.timeout:
            continue
        if not d:
            break
        buf += d
    s.close()
    check(buf.startswith(b"HTTP/1.1 200"), "/debug/traffic: %r" % buf[:100])
    lines = [json.loads(x) for x in buf.split(b"\r\n\r\n", 1)[1].splitlines() if x.strip()]
    mine = [x for x in lines if x["Key"] == want.decode()]
    check(mine and mine[0]["UniqueSenders"] == 1 and mine[0]["Sent"] > 0 and mine[0]["Recv"] > 0,
          "/debug/traffic: %s" % lines)


def slow_receiver(p):
    """A logged-in client with a 4 KiB receive buffer (fast start): the socket and its key."""
    pk, sk = dc.keypair()
    r = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    r.settimeout(10)
    r.connect(("127.0.0.1", p))
    r.sendall(b"GET /derp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: DERP\r\n"
              b"Derp-Fast-Start: 1\r\n\r\n")
    dc.login(r, pk, sk)
    return r, pk


def check_queue_duration(p):
    """derp_average_queue_duration_ms: a receiver that stops reading (a 4 KiB receive buffer)
    while 160 packets of 60 kB come for it; they back up into its queue and wait there until it
    reads again, 200 ms later (within its 2 s write timeout): the average is above 0 (it is 0
    while every packet goes at once)."""
    before = testlib.varz(p, "derp_average_queue_duration_ms")
    r, pk = slow_receiver(p)
    a, _ = dc.connect(p)
    a.settimeout(30)
    for i in range(160):  # 9.6 MB: past the kernel's buffers and net's 1 MiB high watermark
        dc.send(a, pk, b"%04d" % i + b"x" * 60000)
    time.sleep(0.2)  # the packets wait (a floor for the figure, not a bound on anything)
    r.settimeout(1)
    got = 0
    try:
        while True:
            dc.recv_packet(r)
            got += 1
    except (socket.timeout, EOFError, OSError):
        pass
    check(got > 0, "the slow receiver got nothing")
    after = testlib.varz(p, "derp_average_queue_duration_ms")
    if not (after is not None and after > 0):
        drops = {k: v for k, v in testlib.varz(p).items() if "dropped" in k and v}
        fail("derp_average_queue_duration_ms %s (before %s) after %d packets came to a slow "
             "receiver; drops %s" % (after, before, got, drops))
    a.close()
    r.close()


def check_queue_duration_head_drops():
    """derper's sendPkt averages in the time a packet waited when a full queue drops it at its
    head, not only when it is sent. One shard, a 60 s write deadline: a receiver that never reads
    (a 4 KiB receive buffer) gets 160 packets of 60 kB, which fill its socket, its send queue and
    its 32-packet queue; 0.3 s after the relay read them, 40 more come, and each drops the oldest
    (queue_head), which waited at least that long. No packet is sent after waiting, so without
    the head drops the average stays near 0 (it went up to ~300 ms with them)."""
    srv = testlib.Server(BIN, WORK, "headdrop", [
        "-a", "127.0.0.1:0", "-stun-port", "0", "-c", os.path.join(WORK, "headdrop.key"),
        "--shards", "1", "-tcp-write-timeout", "60s"])
    STARTED.append(srv)
    p = srv.start().port
    r, pk = slow_receiver(p)
    a, _ = dc.connect(p)
    a.settimeout(60)
    base = srv.varz("derp_packets_received") or 0
    for i in range(160):
        dc.send(a, pk, b"%04d" % i + b"x" * 60000)
    testlib.wait_for(lambda: (srv.varz("derp_packets_received") or 0) >= base + 160,
                     "the relay to read the first 160 packets", 60)
    time.sleep(0.3)  # they wait (a floor for the figure, not a bound on anything)
    heads = testlib.varz(p, 'derp_packets_dropped{reason="queue_head",kind="other"}') or 0
    for i in range(40):
        dc.send(a, pk, b"late" + b"y" * 60000)
    testlib.wait_for(lambda: (srv.varz("derp_packets_received") or 0) >= base + 200,
                     "the relay to read the last 40 packets", 60)
    now = testlib.varz(p, 'derp_packets_dropped{reason="queue_head",kind="other"}') or 0
    avg = testlib.varz(p, "derp_average_queue_duration_ms")
    check(now >= heads + 40, "the last 40 packets dropped %d at the queue's head, want 40"
          % (now - heads))
    check(avg is not None and avg >= 100, "derp_average_queue_duration_ms %s after 40 head "
          "drops of packets that waited >= 300 ms (derper averages them in)" % avg)
    a.close()
    r.close()
    check(srv.stop() == 0, "hderp-server exited non-zero")


def plain():
    check_queue_duration_head_drops()
    srv = plain_server()
    p = srv.port
    check_pages(p)
    a, apk = dc.connect(p)
    b, bpk = dc.connect(p)
    # a duplicate of a's key, for /debug/check's dup arithmetic
    pk2, sk2 = dc.keypair()
    d1, d2 = connect_as(p, pk2, sk2), connect_as(p, pk2, sk2)
    w, _ = dc.connect(p, info={"meshKey": MESH})  # a watcher: presence notices in batches
    w.sendall(dc.frame_bytes(0x10))
    testlib.wait_for(lambda: srv.varz("derp_watchers") == 1, "the watcher", 10)
    c, _ = dc.connect(p)  # its arrival is a notice for w
    for i in range(50):
        dc.send(a, bpk, b"packet %d" % i)
    for i in range(50):
        src, data = dc.recv_packet(b)
        check(src == apk and data == b"packet %d" % i, "packet %d" % i)
    testlib.wait_for(lambda: (srv.varz("derp_mesh_update_batch_size_count") or 0) >= 1,
                     "a presence batch", 10)
    status, _, body = get(p, "/debug/check")
    check(status == 200 and body == "derp.Server ConsistencyCheck okay", "/debug/check: %d %s"
          % (status, body))
    v = check_vars(p, srv.args)
    check(v["derp"]["gauge_current_dup_client_keys"] == 1, "dup keys %s" % v["derp"])
    series, text = varz_series(p)
    check(series.get("derp_mesh_update_loop_count_count", 0) >= 1, "mesh_update_loop_count")
    check(series.get('derp_mesh_update_batch_size_bucket{le="+Inf"}', 0) >= 1, "batch +Inf")
    for name in ("derp_average_queue_duration_ms", "uptime_sec", "process_start_unix_time",
                 "process_resident_memory_bytes", "process_open_fds", "process_cpu_seconds_total"):
        check(name in series, "/debug/varz lacks %s" % name)
    check(series["process_resident_memory_bytes"] > 0, "RSS 0")
    check('version{version="%s",binary="hderp-server"} 1' % v["version"] in text, "version")
    check("tls_listener_" not in text and "derper_tls_" not in text, "TLS series in plain mode")
    check_traffic(p, bpk)
    check_queue_duration(p)
    for s in (a, b, d1, d2, w, c):
        s.close()
    check(srv.stop() == 0, "hderp-server exited non-zero")


def tls():
    """-certmode manual; at most 2 connections at start (-accept-connection-burst 2, 1 shard):
    two TLS scrapes are accepted, a third connection rejected; port 80's /debug (not counted
    as TLS, as derper's port-80 mux) tells."""
    crt = testlib.localhost_cert(WORK)
    srv = testlib.Server(BIN, WORK, "tls", [
        "-a", "127.0.0.1:0", "-http-port", "0", "-stun-port", "0", "-certmode", "manual",
        "-hostname", "localhost", "-certdir", WORK, "-c", os.path.join(WORK, "derper.key"),
        "--shards", "1", "-accept-connection-limit", "0.001", "-accept-connection-burst", "2"])
    STARTED.append(srv)
    srv.start()
    ctx = ssl.create_default_context(cafile=crt)
    for i in range(2):
        series, _ = varz_series(srv.port, ctx)
        check(series.get('derper_tls_request_version{version="1.3"}') == i + 1,
              "derper_tls_request_version after %d requests: %s" % (i + 1, series.get(
                  'derper_tls_request_version{version="1.3"}')))
        check(series.get('derper_tls_active_version{version="1.3"}') == 1,
              "derper_tls_active_version while answering a TLS request")
    try:
        get(srv.port, "/derp/probe", ctx=ctx)
        fail("a third connection was not rejected by -accept-connection-burst 2")
    except (OSError, http.client.HTTPException):
        pass
    series, _ = varz_series(srv.http)
    check(series.get("tls_listener_accepted_connections") == 2, "accepted %s" % series.get(
        "tls_listener_accepted_connections"))
    check(series.get("tls_listener_rejected_connections", 0) >= 1, "no rejected connection")
    check(series.get('derper_tls_active_version{version="1.3"}') == 0, "active on port 80")
    status, _, body = get(srv.http, "/debug/vars")
    v = json.loads(body)
    check(v["tls_listener"]["counter_accepted_connections"] == 2 and
          v["derper_tls_request_version"] == {"1.3": 2}, "vars: %s %s" % (
              v.get("tls_listener"), v.get("derper_tls_request_version")))
    check(srv.stop() == 0, "hderp-server (TLS) exited non-zero")


try:
    plain()
    tls()
except (AssertionError, OSError, ValueError, KeyError, struct.error) as e:
    fail("%s: %s" % (type(e).__name__, e))
print("PASS: /debug/ (access, index, Go pages 501, vars, check, traffic) and derper's metrics "
      "added for parity, plain and TLS")
