#!/usr/bin/env python3
"""A stand-in for tailscaled's LocalAPI for test_conformance_tailscaled (spec section 5,
-verify-clients): only GET /localapi/v0/whois?addr=nodekey:<hex>.

usage: fake_tailscaled.py SOCKET_PATH RULES_FILE
Listens on the unix socket SOCKET_PATH (it exists once we accept). Each request is appended to
RULES_FILE.log as one line "METHOD TARGET HOST TAILSCALE-CAP". The answer depends on the key's
line "nodekey:<hex> MODE" in RULES_FILE (read per request): known (200 with a WhoIsResponse-like
JSON object), old (400 "invalid 'addr' parameter", as an old tailscaled says), 500, junk (200,
not JSON), slow (3 s, then as known); no line: 404 (not in the netmap).
"""
import json
import os
import socketserver
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

SOCKET, RULES = sys.argv[1], sys.argv[2]


def mode_of(key):
    try:
        with open(RULES) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return parts[1]
    except FileNotFoundError:
        pass
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, text):
        out = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(out)
        self.close_connection = True

    def do_GET(self):
        with open(RULES + ".log", "a") as f:
            f.write("GET %s %s %s\n" % (self.path, self.headers.get("Host", "-"),
                                        self.headers.get("Tailscale-Cap", "-")))
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/localapi/v0/whois":
            return self.answer(404, "not found\n")
        addr = urllib.parse.parse_qs(url.query).get("addr", [""])[0]
        if not addr.startswith("nodekey:"):
            return self.answer(400, "invalid 'addr' parameter\n")
        mode = mode_of(addr)
        if mode is None:
            return self.answer(404, "no match for IP:port\n")
        if mode == "slow":
            time.sleep(3)
        if mode in ("known", "slow"):
            return self.answer(200, json.dumps({"Node": {"ID": 1, "Key": addr},
                                                "UserProfile": {"ID": 1}}))
        if mode == "old":
            return self.answer(400, "invalid 'addr' parameter\n")
        if mode == "junk":
            return self.answer(200, "{not json")
        return self.answer(500, "internal error\n")

    def log_message(self, fmt, *args):
        pass


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def orphan_watch(parent):
    while os.getppid() == parent:  # the test crashed without stopping us: go too
        time.sleep(0.5)
    os._exit(0)


threading.Thread(target=orphan_watch, args=(os.getppid(),), daemon=True).start()
tmp = SOCKET + ".tmp"
srv = Server(tmp, Handler)
os.rename(tmp, SOCKET)  # the path appears only when it accepts
srv.serve_forever()
