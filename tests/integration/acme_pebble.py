#!/usr/bin/env python3
"""acme_pebble.py BIN WORK [gcp|ip] - -certmode letsencrypt (or gcp: pebble then requires an
External Account Binding, given by -acme-eab-kid/-acme-eab-key as for Google's CA; or ip:
-acme-ip-certs with -hostname 127.0.0.1, an IP address certificate in derper's files) against
Debian's pebble (the ACME test CA)
and pebble-challtestsrv (its DNS, answering 127.0.0.1 for every name), all on loopback: hderp
starts with a self-signed stand-in, gets a certificate for derp.test through the http-01
challenge on its -http-port, and serves the issued chain, verified against pebble's root; the
account and certificate keys are 0600, in a -certdir hderp created (0700, with its parent: it
did not exist yet); with a renewal window longer than the certificate's
life it renews every --acme-check-interval and swaps each new certificate in without a restart
while a connection made before stays usable; with pebble stopped, renewal fails, the log says
so and the previous certificate keeps being served; SIGTERM stops it cleanly. Stopped by PID."""
import json, os, re, shutil, socket, ssl, stat, struct, subprocess, sys, time

import testlib
from testlib import Server, hold_port

BIN, WORK = sys.argv[1], sys.argv[2]
GCP = len(sys.argv) > 3 and sys.argv[3] == "gcp"
IP = len(sys.argv) > 3 and sys.argv[3] == "ip"
# pebble's example EAB key (base64url, 48 bytes) under the key id hderp is given.
EAB_KID, EAB_KEY = "kid-1", "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W"
HOST = "127.0.0.1" if IP else "derp.test"
# -certdir does not exist yet: hderp makes it (and its parent) 0700, as derper does.
shutil.rmtree(WORK + "/certs", ignore_errors=True)
os.makedirs(WORK, exist_ok=True)
CERTDIR = WORK + "/certs/acme"


# pebble-challtestsrv starts tried on fresh ports when one lost its DNS port (see start_dns).
DNS_TRIES = 5


def wait_for(cond, what, seconds=60):
    return testlib.wait_for(cond, what, seconds, step_s=0.1)


def sh(*args):
    subprocess.run(args, check=True, capture_output=True)


def make_pebble_tls():
    """A CA of our own and a certificate for pebble's HTTPS API (127.0.0.1, localhost)."""
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
       "-nodes", "-days", "2", "-keyout", WORK + "/ca.key", "-out", WORK + "/ca.crt", "-subj",
       "/CN=hderp test CA")
    sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
       "-keyout", WORK + "/pebble.key", "-out", WORK + "/pebble.csr", "-subj", "/CN=localhost")
    with open(WORK + "/ext.cnf", "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    sh("openssl", "x509", "-req", "-in", WORK + "/pebble.csr", "-CA", WORK + "/ca.crt", "-CAkey",
       WORK + "/ca.key", "-CAcreateserial", "-days", "2", "-extfile", WORK + "/ext.cnf", "-out",
       WORK + "/pebble.crt")


def log_text():
    with open(WORK + "/server.log", errors="replace") as f:
        return f.read()


def served_cert(port, cafile):
    """The leaf hderp serves for HOST, verified against cafile (None: not verified)."""
    ctx = ssl.create_default_context(cafile=cafile) if cafile else ssl._create_unverified_context()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        with ctx.wrap_socket(s, server_hostname=HOST) as t:
            return t.getpeercert(binary_form=True)


def pebble_root(mgmt):
    ctx = ssl.create_default_context(cafile=WORK + "/ca.crt")
    import urllib.request
    pem = urllib.request.urlopen("https://127.0.0.1:%d/roots/0" % mgmt, context=ctx,
                                 timeout=10).read()
    with open(WORK + "/pebble-root.pem", "wb") as f:
        f.write(pem)
    return WORK + "/pebble-root.pem"


def probe_on(t):
    t.sendall(b"GET /derp/probe HTTP/1.1\r\nHost: " + HOST.encode() + b"\r\n\r\n")
    d = b""
    while b"\r\n\r\n" not in d:
        x = t.recv(4096)
        if not x:
            break
        d += x
    return d.startswith(b"HTTP/1.1 200")


def dns_answers(port):
    """Whether a DNS server answers an A query for HOST on UDP 127.0.0.1:port."""
    q = struct.pack(">HHHHHH", 0x4864, 0x0100, 1, 0, 0, 0) + b"\x04derp\x04test\x00\x00\x01\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.settimeout(0.5)
        u.sendto(q, ("127.0.0.1", port))
        try:
            return u.recv(512)[:2] == q[:2]
        except socket.timeout:
            return False


def start_dns(procs, holds):
    """pebble-challtestsrv, its DNS (UDP and TCP) and management (TCP) ports. Go binds a UDP
    socket without SO_REUSEADDR, so the DNS port cannot stay held while it starts: it is held
    until just before, and a start that lost the port in that moment (it exits: address in use)
    is retried on fresh ports, at most DNS_TRIES times. The management port (a Go TCP listener:
    SO_REUSEADDR) stays held. Returns the DNS port once it answers."""
    for _ in range(DNS_TRIES):
        (dh, dns), (mh, mgmt_c) = hold_port(socket.SOCK_DGRAM), hold_port()
        holds.append(mh)
        dh.close()
        log = WORK + "/challtestsrv.log"
        procs["challtestsrv"] = proc = subprocess.Popen(
            ["pebble-challtestsrv", "-dns01", "127.0.0.1:%d" % dns, "-http01", "", "-https01",
             "", "-tlsalpn01", "", "-management", "127.0.0.1:%d" % mgmt_c, "-defaultIPv4",
             "127.0.0.1", "-defaultIPv6", ""], stdout=open(log, "w"), stderr=subprocess.STDOUT)
        if wait_for(lambda: proc.poll() is not None or dns_answers(dns),
                    "pebble-challtestsrv's DNS", 30) and proc.poll() is None:
            return dns
        with open(log, errors="replace") as f:
            text = f.read()
        if "address already in use" not in text:
            raise AssertionError("pebble-challtestsrv exited %d: %s" % (proc.returncode, text))
    raise AssertionError("pebble-challtestsrv lost its DNS port %d times" % DNS_TRIES)


def start(procs, holds):
    """pebble's API, management and tls-alpn ports and hderp's -http-port (which pebble's
    configuration names first) are held for the whole run (Go's and hderp's listeners bind
    beside them); hderp's -a is port 0, read back."""
    make_pebble_tls()
    dns = start_dns(procs, holds)
    ports = []
    for _ in range(4):
        h, port = hold_port()
        holds.append(h)
        ports.append(port)
    api, mgmt, hp, tp = ports
    cfg = {"pebble": {"listenAddress": "127.0.0.1:%d" % api,
                      "managementListenAddress": "127.0.0.1:%d" % mgmt,
                      "certificate": WORK + "/pebble.crt", "privateKey": WORK + "/pebble.key",
                      "httpPort": hp, "tlsPort": tp, "ocspResponderURL": "",
                      "externalAccountBindingRequired": GCP,
                      "externalAccountMACKeys": {EAB_KID: EAB_KEY} if GCP else {}}}
    with open(WORK + "/pebble.json", "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ, PEBBLE_VA_NOSLEEP="1", PEBBLE_WFE_NONCEREJECT="0")
    procs["pebble"] = subprocess.Popen(
        ["pebble", "-config", WORK + "/pebble.json", "-dnsserver", "127.0.0.1:%d" % dns],
        env=env, stdout=open(WORK + "/pebble.log", "w"), stderr=subprocess.STDOUT)
    wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", api)) == 0, "pebble")
    senv = dict(os.environ, SSL_CERT_FILE=WORK + "/ca.crt")  # hderp trusts pebble's API
    mode = ["-certmode", "gcp", "-acme-eab-kid", EAB_KID, "-acme-eab-key", EAB_KEY] if GCP \
        else ["-certmode", "letsencrypt"] + (["-acme-ip-certs"] if IP else [])
    srv = Server(BIN, WORK, "server", ["-a", "127.0.0.1:0"] + mode + [
        "-acme-directory",
        "https://127.0.0.1:%d/dir" % api, "-acme-email", "ops@derp.test", "-hostname", HOST,
        "-certdir", CERTDIR, "-http-port", str(hp), "-c", WORK + "/derper.key",
        "-stun=false", "--shards", "2", "--acme-renew-before", "1000000h",
        "--acme-check-interval", "2s"], env=senv)
    procs["hderp"] = srv
    return srv.start().port, mgmt


def checks(procs, p, mgmt):
    wait_for(lambda: "new certificate for %s" % HOST in log_text(), "the first certificate")
    assert "self-signed until one is issued" in log_text(), "no self-signed stand-in logged"
    if IP:  # derper's hint: the DERP map node for this address
        hint = '{"Name":"custom","RegionID":900,"HostName":"127.0.0.1"}'
        assert hint in log_text(), "no DERP map line logged for the IP certificate"
    root = pebble_root(mgmt)
    wait_for(lambda: "TLS: reloaded" in log_text(), "the reload")
    first = served_cert(p, root)  # verifies the chain against pebble's root, for HOST
    if IP:  # the leaf names the address (an iPAddress SAN) and nothing else
        der = WORK + "/leaf.der"
        with open(der, "wb") as f:
            f.write(first)
        text = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", der, "-noout",
                               "-ext", "subjectAltName"], capture_output=True, text=True).stdout
        assert "IP Address:127.0.0.1" in text and "DNS:" not in text, text
    for name in ("acme-account.key" if IP else "acme_account+key", HOST + ".key"):
        mode = stat.S_IMODE(os.stat(CERTDIR + "/" + name).st_mode)
        assert mode == 0o600, "%s is %o, not 0600" % (name, mode)
    for d in (WORK + "/certs", CERTDIR):
        mode = stat.S_IMODE(os.stat(d).st_mode)
        assert mode == 0o700, "%s is %o, not 0700" % (d, mode)
    # renewal: a new certificate every check, swapped in; an older connection keeps working
    ctx = ssl.create_default_context(cafile=root)
    old = ctx.wrap_socket(socket.create_connection(("127.0.0.1", p), timeout=5),
                          server_hostname=HOST)
    assert probe_on(old), "no answer on the connection made before the renewal"
    wait_for(lambda: served_cert(p, root) != first, "a renewed certificate served")
    assert probe_on(old), "the renewal broke a live connection"
    old.close()
    # the CA goes away: renewal fails, the previous certificate stays
    procs["pebble"].terminate()
    procs["pebble"].wait(timeout=10)
    failure = re.compile(r"ACME: renewal for " + re.escape(HOST) + r" failed, keeping the previous "
                         r"certificate; next try in \d+s")
    wait_for(lambda: failure.search(log_text()), "the failure")
    current = served_cert(p, root)
    # A wrong swap would come with a renewal attempt: the next failed one (every
    # --acme-check-interval) must leave the same certificate served.
    failed = len(failure.findall(log_text()))
    wait_for(lambda: len(failure.findall(log_text())) > failed, "the next failed renewal")
    assert served_cert(p, root) == current, "the certificate changed with the CA down"
    assert procs["hderp"].alive(), "hderp-server exited with the CA down"
    rc = procs["hderp"].stop(30)
    assert rc == 0, "exit %s" % rc


def ip_refusals():
    """derper's rules for -acme-ip-certs and an IP -hostname (cert.go): each combination it
    refuses is refused at start-up (exit 1) with its reason."""
    base = [os.path.join(BIN, "hderp-server"), "-a", "127.0.0.1:0", "-stun=false", "-c",
            WORK + "/refused.key", "-certdir", WORK + "/refused", "-http-port", "-1",
            "-acme-directory", "https://127.0.0.1:1/dir"]
    for args, want in [
            (["-hostname", "127.0.0.1"], "-hostname 127.0.0.1 is an IP address; use -certmode "
             "manual for a self-signed cert, or set -acme-ip-certs"),
            (["-hostname", "127.0.0.1", "-acme-ip-certs", "-certmode", "manual"],
             "-acme-ip-certs requires -certmode letsencrypt"),
            (["-hostname", "derp.test", "-acme-ip-certs"],
             "-acme-ip-certs: a DNS -hostname (derp.test) with IP address certificates beside it "
             "is not supported")]:
        p = subprocess.run(base + args, capture_output=True, text=True, timeout=60)
        assert p.returncode == 1 and want in p.stderr, (args, p.returncode, p.stderr)
    print("ok: -acme-ip-certs refused where derper refuses it, and with a DNS -hostname")


def main():
    for prog in ("pebble", "pebble-challtestsrv"):
        if subprocess.run(["sh", "-c", "command -v " + prog], capture_output=True).returncode:
            sys.exit(prog + " is not installed: it is in GNUmakefile's TEST_PKGS (make deps-test)")
    procs, holds = {}, []
    try:
        if IP:
            ip_refusals()
        checks(procs, *start(procs, holds))
        print("ok: ACME certificate from pebble issued%s, served, renewed live, kept with the "
              "CA down" % (" with an External Account Binding (-certmode gcp)" if GCP else
                           " for the IP address 127.0.0.1 (-acme-ip-certs)" if IP else ""))
    except Exception:
        for name in ("server.log", "pebble.log"):
            print("--- " + name)
            with open(os.path.join(WORK, name), errors="replace") as f:
                print(f.read()[-5000:])
        raise
    finally:
        for x in procs.values():
            x.stop(10) if isinstance(x, Server) else testlib.stop_pid(x, 10)
        for h in holds:
            h.close()


main()
