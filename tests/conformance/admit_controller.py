#!/usr/bin/env python3
"""A -verify-client-url controller for test_conformance_admit (spec section 5).

usage: admit_controller.py PORT_FILE RULES_FILE [CERT_FILE KEY_FILE]
Listens on 127.0.0.1, port 0, writes the port to PORT_FILE; with CERT_FILE and KEY_FILE (PEM) it
serves https with that certificate (a client that refuses it is only a failed accept). Each POST body is appended (one line)
to RULES_FILE.log; the answer depends on the NodePublic's line "nodekey:<hex> MODE" in RULES_FILE
(read per request): allow, deny, slow (3 s, then allow), 500, junk; no line: deny. Answers
derper judges from what it reads (the first 4 KiB of a 200's body, encoding/json):
  longno    200 {"Allow": false, "Reason": <5,000 bytes>} (no whole value in 4 KiB: refused)
  hugeno    200 {"Allow": false, "Reason": <4 MiB>}
  hugeyes   200 {"Allow": true} then 4 MiB of spaces (the value fits: admitted)
  chunkedno 200 chunked, {"Allow": false, "Reason": <5,000 bytes>} in 100-byte chunks
  cut       200 Content-Length 100, then {"Allow": fa and the connection closed
  500huge   500 with a 4 MiB body
  bighead   200 with a 10 KiB header field, then {"Allow": true} (our head bound: refused)
  redirect  307 to the same URL (derper follows redirects; hderp refuses them)
  lower     200 {"allow": true} (encoding/json matches keys case-insensitively: admitted)
  101       101 Switching Protocols, then nothing (final for Go's client, a non-200: refused)
"""
import json
import os
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, RULES = sys.argv[1], sys.argv[2]


def mode_of(key):
    try:
        with open(RULES) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return parts[1]
    except FileNotFoundError:
        pass
    return "deny"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        with open(RULES + ".log", "ab") as f:
            f.write(body + b"\n")
        try:
            key = json.loads(body).get("NodePublic", "")
        except ValueError:
            key = ""
        mode = mode_of(key)
        try:
            if self.odd(mode):
                return
        except (BrokenPipeError, ConnectionResetError):  # hderp stops reading at 4 KiB
            self.close_connection = True
            return
        if mode == "slow":
            time.sleep(3)
        status, text = 200, json.dumps({"Allow": mode in ("allow", "slow")})
        if mode == "500":
            status = 500
        elif mode == "junk":
            text = "{not json"
        out = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def raw(self, status, body, headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if not any(name == "Transfer-Encoding" for name, _ in headers):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def odd(self, mode):
        long_reason = json.dumps({"Allow": False, "Reason": "x" * 5000}).encode()
        if mode == "longno":
            self.raw(200, long_reason)
        elif mode == "hugeno":
            self.raw(200, json.dumps({"Allow": False, "Reason": "x" * (4 << 20)}).encode())
        elif mode == "hugeyes":
            self.raw(200, b'{"Allow": true}' + b" " * (4 << 20))
        elif mode == "chunkedno":
            self.protocol_version = "HTTP/1.1"
            self.raw(200, b"", [("Transfer-Encoding", "chunked"), ("Connection", "close")])
            for i in range(0, len(long_reason), 100):
                piece = long_reason[i:i + 100]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        elif mode == "cut":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b'{"Allow": fa')
            self.close_connection = True
        elif mode == "500huge":
            self.raw(500, b"x" * (4 << 20))
        elif mode == "bighead":
            self.raw(200, b'{"Allow": true}', [("X-Big", "b" * 10240)])
        elif mode == "redirect":
            self.raw(307, b"", [("Location", self.path)])
        elif mode == "101":
            self.send_response(101)
            self.end_headers()
            self.wfile.flush()
            time.sleep(6)  # past hderp's 5 s: it must not wait for another response
        elif mode == "lower":
            self.raw(200, b'{"allow": true}')
        else:
            return False
        return True

    def log_message(self, fmt, *args):
        pass


def orphan_watch(parent):
    while os.getppid() == parent:  # the test crashed without stopping us: go too
        time.sleep(0.5)
    os._exit(0)


threading.Thread(target=orphan_watch, args=(os.getppid(),), daemon=True).start()
srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
if len(sys.argv) == 5:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
tmp = PORT_FILE + ".tmp"
with open(tmp, "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(tmp, PORT_FILE)
srv.serve_forever()
