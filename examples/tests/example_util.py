"""Shared by the examples' tests: start an example on 127.0.0.1 port 0, read the address it
announces, stop it by PID with SIGTERM and collect its per-shard summary lines."""
import os
import re
import select
import signal
import subprocess
import sys
import time

DEADLINE_S = 30.0  # a bound on every wait, not a timing check


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def start(argv):
    """Returns the process, the port it announced and the whole announcement line."""
    p = subprocess.Popen(argv + ["-listen", "127.0.0.1:0", "-shards", "2"],
                         stdout=subprocess.PIPE, text=True)
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if r:
            line = p.stdout.readline()
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                return p, int(m.group(1)), line
            if line == "":
                break
        if p.poll() is not None:
            break
    p.kill()
    fail("%s did not announce its address" % argv[0])


def stop(p):
    """SIGTERM by PID; returns the summary lines, each as a dict of its counters."""
    os.kill(p.pid, signal.SIGTERM)
    try:
        out, _ = p.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("did not stop on SIGTERM")
    if p.returncode != 0:
        fail("exit status %d" % p.returncode)
    shards = []
    for line in out.splitlines():
        if " shard " in line:
            shards.append({k: int(v) for k, v in re.findall(r"([a-z][a-z ]*?) (\d+)", line)})
    return shards


def total(shards, key):
    return sum(s.get(key, 0) for s in shards)
