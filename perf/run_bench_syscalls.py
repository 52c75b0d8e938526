"""run_bench_syscalls - the relay's syscalls and io_uring_enter calls over a run's window, for
perf/run-bench's per-point syscall run (--syscall-run, --syscall-method).

Three methods, tried in this order by `auto` until one counts:
  bench   hderp-bench --relay-syscalls: perf_event tracepoint counters (raw_syscalls:sys_enter,
          syscalls:sys_enter_io_uring_enter) opened on each relay thread by the generator at its
          window's start and read at its end. Needs tracefs mounted (/sys/kernel/tracing) and the
          right to count another process (root or perf_event_paranoid <= -1).
  perf    `perf stat -e raw_syscalls:sys_enter,syscalls:sys_enter_io_uring_enter -p PID` for
          the window (the generator is started with --start-at, so the window's start is known
          in advance); perf mounts tracefs itself when it is not mounted, which is why it works
          where `bench` does not on a machine where nothing has mounted it yet.
  strace  `strace -c -f -p PID` (every thread of the relay) for the window: ptrace stops the
          relay at every syscall, so it runs slower and each wait gathers more or fewer
          completions than it would: its per-packet counts are the slowed relay's (2026-12-04,
          client-like 56 Mbit/s, 1 shard: io_uring_enter per packet 0.98 under strace against
          1.97-1.98 by the other two methods). The last resort.
No /proc file counts io_uring_enter calls (/proc/PID/io's syscr/syscw count read and write
calls only), so there is no /proc method.

A window counter counts over [start, start + length], a part of the generator's window; the
per-packet figures divide by the packets the generator saw relayed in that much of its window
(relayed_packets / window_s x counted_s), which holds for a steady load.
"""
import os
import re
import shutil
import signal
import subprocess
import time

METHODS = ("bench", "perf", "strace")
EVENTS = ("raw_syscalls:sys_enter", "syscalls:sys_enter_io_uring_enter")
# The counted part of the window starts this long after the window's start and ends as long
# before its end: the counter's own start-up (perf attaching, strace stopping each thread) and
# the clocks of two processes stay out of it.
WINDOW_MARGIN_S = 0.15
# The generator of a run counted from outside logs in first and starts its warm-up at a
# --start-at this far ahead (at least), so the counter knows when the window starts.
COUNTER_START_AHEAD_S = 2.0
# A generator window that started later than planned by more than this (its log-in outlasted
# --start-at) does not match the counted part: the run is refused.
WINDOW_SLIP_MAX_S = 0.1
NOTE = {"bench": "perf_event counters opened by hderp-bench on the relay's threads",
        "perf": "perf stat -p on the relay for the window",
        "strace": "strace -c on the relay's threads for the window (ptrace slows the relay: "
                  "its counts per packet are the slowed relay's)"}


class CountFailed(Exception):
    """This method could not count: the reason is the message."""


def relay_tids(pid):
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError as e:
        raise CountFailed(f"no threads of the relay {pid}: {e}")


class WindowCounter:
    """An outside counter (perf or strace) over [start_unix, start_unix + length_s]."""

    def __init__(self, method, pid, start_unix, length_s, log_path):
        if method not in ("perf", "strace"):
            raise ValueError(method)
        tool = "perf" if method == "perf" else "strace"
        if not shutil.which(tool):
            raise CountFailed(f"{tool} is not installed")
        self.method, self.pid, self.log_path = method, pid, log_path
        self.start_unix, self.length_s = start_unix, length_s
        self.proc, self.started_unix, self.stopped_unix = None, None, None

    def due(self):
        return self.proc is None and time.time() >= self.start_unix

    def start(self):
        log = open(self.log_path, "w")
        if self.method == "perf":
            argv = ["perf", "stat", "-x", ",", "-e", ",".join(EVENTS), "-p", str(self.pid),
                    "--", "sleep", f"{self.length_s:.3f}"]
        else:
            relay_tids(self.pid)  # still there
            # -f with -p attaches every thread of the process (and any it starts)
            argv = ["strace", "-c", "-f", "-q", "-p", str(self.pid)]
        self.started_unix = time.time()
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        log.close()

    def poll(self):
        """Called from the harness's loop: strace runs until it is told to stop."""
        if self.method == "strace" and self.proc and self.stopped_unix is None and \
                time.time() >= self.started_unix + self.length_s:
            self.stopped_unix = time.time()
            os.kill(self.proc.pid, signal.SIGINT)

    def finish(self):
        """{"syscalls", "io_uring_enter", "counted_s"}; raises CountFailed."""
        if self.proc is None:
            raise CountFailed(f"{self.method}: the run ended before the window")
        self.poll()
        try:
            rc = self.proc.wait(timeout=self.length_s + 10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise CountFailed(f"{self.method} did not finish; see {self.log_path}")
        text = open(self.log_path, errors="replace").read()
        if self.method == "perf":
            counted_s = self.length_s
            counts = parse_perf(text)
        else:
            counted_s = (self.stopped_unix or time.time()) - self.started_unix
            counts = parse_strace(text)
        if counts is None:
            raise CountFailed(f"{self.method} exited {rc} and counted nothing: "
                              f"{text.strip()[-300:]!r}")
        return {"syscalls": counts[0], "io_uring_enter": counts[1], "counted_s": counted_s}


def parse_perf(text):
    """(syscalls, io_uring_enter) from perf stat -x, output, or None."""
    got = {}
    for line in text.splitlines():
        f = line.split(",")
        if len(f) >= 3 and f[2] in EVENTS and f[0].strip().isdigit():
            got[f[2]] = int(f[0])
    return (got[EVENTS[0]], got[EVENTS[1]]) if len(got) == 2 else None


def parse_strace(text):
    """(syscalls, io_uring_enter) from strace -c's table (the calls column), or None."""
    total = uring = None
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and re.fullmatch(r"[0-9.]+", f[0]) and f[3].isdigit():
            if f[-1] == "total":
                total = int(f[3])
            elif f[-1] == "io_uring_enter":
                uring = int(f[3])
    if total is None:
        return None
    return total, uring or 0


def per_packet(res, counts):
    """The relay_syscalls object of a run counted from outside: per packet over the counted
    part of the window."""
    pps = res["relayed_packets"] / res["window_s"] if res.get("window_s") else 0
    pkts = pps * counts["counted_s"]
    if pkts <= 0:
        raise CountFailed("no packets relayed in the window")
    return dict(counts, syscalls_per_packet=round(counts["syscalls"] / pkts, 4),
                io_uring_enter_per_packet=round(counts["io_uring_enter"] / pkts, 4))


def check_window(res, planned_start):
    """The generator's window must have started when planned (its --start-at plus warm-up)."""
    got = res.get("window_start_unix")
    if got is None:
        raise CountFailed("the generator's JSON has no window_start_unix")
    if abs(got - planned_start) > WINDOW_SLIP_MAX_S:
        raise CountFailed(f"the generator's window started {got - planned_start:+.3f} s off "
                          "plan (log-in outlasted --start-ahead?)")
