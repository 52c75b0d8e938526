#!/usr/bin/env python3
"""derpmap.py BIN WORK - hderp-server --print-derpmap: the JSON (Tailscale policy file) and
YAML (Headscale, read with a real YAML parser) entries carry HostName, IPv4/IPv6, DERPPort,
STUNPort and CanPort80 as the flags say, in TLS and plain modes, with and without STUN, and
bad values are refused; then a server started with the very flags that printed a map answers
/derp/probe and STUN at the node's IPv4:DERPPort and STUNPort. Stopped by PID."""
import json, os, socket, subprocess, sys, urllib.request
import yaml

from testlib import Server, hold_port, stun_request

BIN, WORK = sys.argv[1] + "/hderp-server", sys.argv[2]
os.makedirs(WORK, exist_ok=True)


def run(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=30)


def node_json(*args):
    r = run("--print-derpmap", *args)
    assert r.returncode == 0, (args, r.stderr)
    regions = json.loads(r.stdout)["derpMap"]["Regions"]
    assert len(regions) == 1, regions
    (rid, region), = regions.items()
    assert region["RegionID"] == int(rid) and len(region["Nodes"]) == 1, region
    return region, region["Nodes"][0]


def node_yaml(*args):
    r = run("--print-derpmap=yaml", *args)
    assert r.returncode == 0, (args, r.stderr)
    regions = yaml.safe_load(r.stdout)["regions"]
    (rid, region), = regions.items()
    assert region["regionid"] == rid and len(region["nodes"]) == 1, region
    return region, region["nodes"][0]


def static_checks():
    tls = ["-a", "203.0.113.5:443", "-certmode", "manual", "-hostname", "derp.example.com"]
    region, n = node_json(*tls, "--derpmap-region-id", "901", "--derpmap-region-code", "ams")
    assert (region["RegionID"], region["RegionCode"], region["RegionName"]) == (901, "ams", "ams")
    want = {"Name": "901a", "RegionID": 901, "HostName": "derp.example.com",
            "IPv4": "203.0.113.5", "DERPPort": 443, "STUNPort": 3478, "CanPort80": True}
    assert n == want, n
    region, y = node_yaml(*tls, "--derpmap-region-id", "901", "--derpmap-region-code", "ams")
    assert y == {k.lower(): v for k, v in want.items()}, y
    # wildcard -a, an IP hostname, STUN off, no port 80, a name with quotes, IPv6 given
    args = ["-a", ":8443", "-certmode", "manual", "-hostname", "198.51.100.2", "-stun=false",
            "-http-port", "-1", "--derpmap-ipv6", "2001:db8::1", "--derpmap-region-name",
            'My "DERP": one', "--derpmap-node-name", "n1"]
    region, n = node_json(*args)
    assert region["RegionName"] == 'My "DERP": one'
    assert n == {"Name": "n1", "RegionID": 900, "HostName": "198.51.100.2",
                 "IPv4": "198.51.100.2", "IPv6": "2001:db8::1", "DERPPort": 8443,
                 "STUNPort": -1, "CanPort80": False}, n
    region, y = node_yaml(*args)
    assert region["regionname"] == 'My "DERP": one' and y["stunport"] == -1, y
    # a wildcard and a DNS name: no address known, the note says so
    r = run("--print-derpmap", "-a", ":443", "-hostname", "derp.example.com")
    assert r.returncode == 0 and "IPv4" not in r.stdout and "no IPv4/IPv6" in r.stderr, r
    # behind a proxy: -a is the inside address; the map has the proxy's port and no -a address
    _, n = node_json("-a", "127.0.0.1:8443", "-certmode", "manual", "-hostname",
                     "derp.example.com", "--proxy-protocol-from", "127.0.0.1")
    assert n["DERPPort"] == 443 and "IPv4" not in n, n
    _, n = node_json("-a", "127.0.0.1:8443", "-certmode", "manual", "-hostname",
                     "derp.example.com", "--proxy-protocol-from", "127.0.0.1",
                     "--derpmap-port", "8443", "--derpmap-ipv4", "203.0.113.7")
    assert n["DERPPort"] == 8443 and n["IPv4"] == "203.0.113.7", n
    # -dev: plain HTTP on loopback
    _, n = node_json("-dev")
    assert n["HostName"] == "127.0.0.1" and n["DERPPort"] == 3340 and n["InsecureForTests"], n
    for bad in (["--print-derpmap=xml"], ["--print-derpmap", "--derpmap-ipv4", "::1"],
                ["--print-derpmap", "--derpmap-region-id", "0"],
                ["--print-derpmap", "--derpmap-port", "70000"]):
        r = run(*bad)
        assert r.returncode == 2 and r.stdout == "", (bad, r)


def live_check():
    """The map printed for some flags points at the server those flags start. The flags name
    their ports before the server starts, so both are held (testlib.hold_port) until it
    listens; the TCP one for good."""
    (hold, p), (uhold, sp) = hold_port(), hold_port(socket.SOCK_DGRAM)
    flags = ["-a", "127.0.0.1:%d" % p, "-stun-port", str(sp), "-c", WORK + "/derper.key",
             "--shards", "1"]
    _, n = node_json(*flags)
    assert (n["IPv4"], n["DERPPort"], n["STUNPort"]) == ("127.0.0.1", p, sp), n
    srv = Server(sys.argv[1], WORK, "server", flags).start()
    uhold.close()  # the server's STUN sockets have the port; a held one would get datagrams
    try:
        url = "http://%s:%d/derp/probe" % (n["IPv4"], n["DERPPort"])
        assert urllib.request.urlopen(url, timeout=5).status == 200, url
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.settimeout(2)
        txid, req = stun_request()
        for _ in range(10):
            u.sendto(req, (n["IPv4"], n["STUNPort"]))
            try:
                resp = u.recv(1500)
                break
            except socket.timeout:
                continue
        else:
            raise AssertionError("no STUN answer at STUNPort %d" % n["STUNPort"])
        assert resp[:2] == b"\x01\x01" and resp[8:20] == txid, resp.hex()
    finally:
        srv.stop()
        hold.close()


static_checks()
live_check()
print("ok: --print-derpmap JSON and YAML entries match the flags; the printed node answers")
