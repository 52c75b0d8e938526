#!/usr/bin/env python3
"""A -verify-client-url controller for test_conformance_admit (spec section 5).

usage: admit_controller.py PORT_FILE RULES_FILE [CERT_FILE KEY_FILE]
Listens on 127.0.0.1, port 0, writes the port to PORT_FILE; with CERT_FILE and KEY_FILE (PEM) it
serves https with that certificate (a client that refuses it is only a failed accept). Each POST body is appended (one line)
to RULES_FILE.log; the answer depends on the NodePublic's line "nodekey:<hex> MODE" in RULES_FILE
(read per request): allow, deny, slow (3 s, then allow), 500, junk; no line: deny.
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
