#!/usr/bin/env python3
"""tidy.py - the conventions of docs/CONVENTIONS.md that a program can check, as ctest entries.

Usage: tidy.py RULE [--src DIR] [--build DIR --ctest PATH]
       tidy.py selftest          (each rule must fire on a tree built to break it)

Rules (one ctest entry each, label "tidy"; tests/tidy/CMakeLists.txt):
  file-lines       a .c file has at most FILE_LINES_MAX lines, a .h HEADER_LINES_MAX
  function-lines   a function body has at most FUNCTION_LINES_MAX lines
  columns          a .c/.h line has at most COLUMNS_MAX columns
  layers-no-derp   no file in reactor/, net/, tls/, kit/ or include/ mentions DERP (any case)
  private-headers  a private header is included only from where it may be (PRIVATE_READERS)
  doc-refs         every FOO.md a file names exists; nothing points outside the repository;
                   every "spec §N" names a section of docs/DERP-PROTOCOL.md
  ctest-labels     every ctest entry of the build has a LABELS value
  no-libc-rand     no C file outside tests/ calls libc's rand()/random()/drand48() family:
                   one process-wide generator behind a lock, unseeded; shards use hd_rand.h
  server-layers    apps/derp/server's subsystems call and include only downwards: the root
                   (composition) > upgrade/ > ops/ > admit/ > relay/ (the core hears nothing
                   above it but through cfg->hooks), so no two subsystems form a cycle
  fuzz-targets     every tests/fuzz/fuzz_*.c is an hd_add_fuzz_target, and a list of fuzz
                   targets written out in tests/fuzz (a line naming two or more) names them all
                   (make fuzz once ran 11 of 12: issue 23)
  no-malloc-data-path  no malloc-family call in a data-path file (DATA_PATH: each says why
                   it is on the path of a packet) but in the setup and teardown functions named
                   in DATA_PATH_ALLOC (each with its reason): pools sized from the limits instead
  atomics          _Atomic, atomic_* and __atomic_*/__sync_* appear only in the files of
                   ATOMIC_FILES (each a cross-thread flag, counter, ring or refcount, and why);
                   tests/ and perf/ (drivers that coordinate their own threads) are exempt

Each finding is printed as path:line: rule: what, and the run exits 1 if there was any.
No blanket allowlist: a rule that does not hold is fixed in the code, or the rule is changed
here with its reason (the two lists above name each file or function and why).
"""

import json
import os
import re
import subprocess
import sys
import tempfile

FILE_LINES_MAX = 800  # CONVENTIONS.md: a .c or .h file has at most 800 lines
HEADER_LINES_MAX = 500  # CONVENTIONS.md: a header at most 500
FUNCTION_LINES_MAX = 70  # CONVENTIONS.md: functions <= 70 lines (the lines between the braces)
COLUMNS_MAX = 100  # .clang-format ColumnLimit (clang-format leaves long strings/comments alone)

# The framework (kit/: issue 12's relay kit, once it lands); include/ holds their public headers.
LAYER_DIRS = ("reactor", "net", "tls", "kit")
NO_DERP_DIRS = LAYER_DIRS + ("include",)

# Who may include a layer's private header (a header in reactor/, net/ or tls/ itself, not in
# include/): the layer, its own tests (tests/fuzz/ holds every layer's fuzz targets), and perf/,
# whose microbenchmarks measure internals (hd-microbench, the AEAD floor, the stream benchmark).
# Nothing an app or example is built from.
PRIVATE_READERS = {
    "reactor": ("reactor/", "tests/reactor/", "tests/fuzz/", "perf/"),
    "net": ("net/", "tests/net/", "tests/http/", "tests/fuzz/", "perf/"),
    "tls": ("tls/", "tests/tls/", "tests/tlsconn/", "tests/vm/", "tests/fuzz/", "perf/"),
    "kit": ("kit/", "tests/kit/", "perf/"),
}
# Any other *_impl.h (apps/derp/client, perf/, tests/...) is private to its own directory.

# Text files whose FOO.md references must resolve (generated and binary files are skipped).
TEXT_SUFFIXES = (".c", ".h", ".md", ".txt", ".cmake", ".sh", ".py", ".json", ".yml", ".yaml")
TEXT_NAMES = ("CMakeLists.txt", "GNUmakefile", "Makefile", ".clang-format", ".gitignore")
# Paths that would tie the repository to one machine's layout, and names of design notes that
# used to live outside it (now docs/DESIGN.md, docs/CONVENTIONS.md, docs/DERP-PROTOCOL.md).
# (split so that this file itself names no machine path and no outside notes)
FOREIGN_REFS = re.compile(r"\.\./shar" r"ed/|/wor" r"k/|DERP-SPEC|\bSTYLE\.md|MACHINE-FACTS")
MD_REF = re.compile(r"(?<![\w/.-])([\w./-]*[A-Za-z0-9_-]\.md)\b")
# "spec §N" in code and docs means section N of docs/DERP-PROTOCOL.md: it must have one.
SPEC_DOC = "docs/DERP-PROTOCOL.md"
SPEC_REF = re.compile(r"\bspec (?:§\s?([0-9]+(?:\.[0-9]+)*)|Appendix ([A-Z])\b)")
SPEC_HEADING = re.compile(r"^#{2,4} (?:([0-9]+(?:\.[0-9]+)*)\.? |Appendix ([A-Z])\b)")


def source_files(src):
    """Tracked and untracked-but-not-ignored files (so build/ is out), else a walk."""
    try:
        out = subprocess.run(
            ["git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True).stdout.decode()
        files = [f for f in out.split("\0") if f and os.path.isfile(os.path.join(src, f))]
        return sorted(set(files))
    except (OSError, subprocess.CalledProcessError):
        files = []
        for root, dirs, names in os.walk(src):
            dirs[:] = [d for d in dirs if d != ".git" and not d.startswith("build")]
            for n in names:
                files.append(os.path.relpath(os.path.join(root, n), src))
        return sorted(files)


def read_lines(src, path):
    with open(os.path.join(src, path), encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


def c_files(files):
    return [f for f in files if f.endswith((".c", ".h"))]


def rule_file_lines(src, files):
    for f in c_files(files):
        n = len(read_lines(src, f)) - 1
        limit = HEADER_LINES_MAX if f.endswith(".h") else FILE_LINES_MAX
        if n > limit:
            yield f, 1, f"{n} lines (max {limit}): split it along a seam"


def functions(lines):
    """(first line of the signature, body lines) of each function definition. clang-format
    (BreakBeforeBraces: Linux) puts a function's opening brace alone in column 0 and its
    closing brace in column 0; nothing else in this code base does both."""
    start = None
    for i, line in enumerate(lines):
        if line == "{":
            start = i
        elif start is not None and line.startswith("}"):
            sig = start - 1
            while sig > 0 and lines[sig - 1].strip() and not lines[sig - 1].rstrip().endswith(
                    (";", "}", "*/")) and not lines[sig - 1].startswith(("#", "/*", " *")):
                sig -= 1
            yield sig, lines[sig].strip(), i - start - 1
            start = None


def rule_function_lines(src, files):
    for f in c_files(files):
        for sig, text, n in functions(read_lines(src, f)):
            if n > FUNCTION_LINES_MAX:
                yield f, sig + 1, f"{n} lines in {text[:60]!r} (max {FUNCTION_LINES_MAX})"


def rule_columns(src, files):
    for f in c_files(files):
        for i, line in enumerate(read_lines(src, f)):
            if len(line) > COLUMNS_MAX:
                yield f, i + 1, f"{len(line)} columns (max {COLUMNS_MAX})"


def rule_layers_no_derp(src, files):
    for f in files:
        if f.split("/")[0] not in NO_DERP_DIRS:
            continue
        if "derp" in f.lower():
            yield f, 1, "the file's name mentions DERP: the framework knows no app"
        for i, line in enumerate(read_lines(src, f)):
            if "derp" in line.lower():
                yield f, i + 1, f"mentions DERP: {line.strip()[:70]!r}"


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def private_headers(files):
    """basename -> (home directory, readers' path prefixes)."""
    out = {}
    for f in files:
        if not f.endswith(".h"):
            continue
        home, base = os.path.split(f)
        if home in LAYER_DIRS:
            out[base] = (home, PRIVATE_READERS[home])
        elif base.endswith("_impl.h") and not f.startswith("include/"):
            out[base] = (home, (home + "/",))
    return out


def rule_private_headers(src, files):
    private = private_headers(files)
    for f in c_files(files):
        for i, line in enumerate(read_lines(src, f)):
            m = INCLUDE.match(line)
            if not m or os.path.basename(m.group(1)) not in private:
                continue
            home, readers = private[os.path.basename(m.group(1))]
            if not any(f.startswith(r) for r in readers):
                yield f, i + 1, (f"includes {m.group(1)}, private to {home}/ "
                                 f"(readers: {', '.join(readers)})")


def is_text(f):
    return f.endswith(TEXT_SUFFIXES) or os.path.basename(f) in TEXT_NAMES or "/" not in f and (
        f.startswith("README"))


def spec_sections(src, files):
    if SPEC_DOC not in files:
        return None
    out = set()
    for line in read_lines(src, SPEC_DOC):
        m = SPEC_HEADING.match(line)
        if m:
            out.add(m.group(1) or "Appendix " + m.group(2))
    return out


def rule_doc_refs(src, files):
    present = set(files)
    sections = spec_sections(src, files)
    for f in files:
        if not is_text(f) or f.startswith("tests/tidy/"):
            continue
        here = os.path.dirname(f)
        for i, line in enumerate(read_lines(src, f)):
            m = FOREIGN_REFS.search(line)
            if m:
                yield f, i + 1, f"points outside the repository: {m.group(0)!r}"
            for num, app in SPEC_REF.findall(line):
                sec = num or "Appendix " + app
                if sections is not None and sec not in sections:
                    yield f, i + 1, f"cites spec {sec}, which {SPEC_DOC} does not have"
            for ref in MD_REF.findall(line):
                if "://" in line and ("/" + ref) in line.split("://", 1)[1]:
                    continue  # part of a URL
                cands = [os.path.normpath(os.path.join(here, ref)), os.path.normpath(ref),
                         os.path.normpath(os.path.join("docs", ref))]
                if not any(c in present for c in cands):
                    yield f, i + 1, f"names {ref}, which is not in the repository"


# libc's generators (C, POSIX, SVID) and their seeding; a call is the name, then "(".
LIBC_RAND = re.compile(r"(?<![\w.>])(s?rand|s?random|rand_r|[dejlmn]rand48|srand48|seed48|lcong48"
                       r"|initstate|setstate)\s*\(")
C_COMMENT_OR_STRING = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"'
                                 r"|'(?:\\.|[^'\\\n])*'", re.S)


def rule_no_libc_rand(src, files):
    for f in c_files(files):
        if f.startswith("tests/"):
            continue  # a test may use whatever it likes
        with open(os.path.join(src, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        # Comments and strings blanked (newlines kept, so line numbers stay right).
        code = C_COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        for m in LIBC_RAND.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            yield f, line, (f"calls {m.group(1)}(): one locked, unseeded generator for the "
                            "whole process; use hd_rand_u64/hd_rand_below (hd/hd_rand.h)")


# apps/derp/server's subsystems, bottom up: a file may call functions and include headers of
# its own folder and of the folders below it (docs/ARCHITECTURE.md, the server's shape).
SERVER_DIR = "apps/derp/server/"
SERVER_LAYERS = ("relay", "admit", "ops", "upgrade", "")  # "": the root, the composition
C_FUNC_DEF = re.compile(r"^(?:static inline |inline )?[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{]*\)\s*\{",
                        re.M)
C_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
C_INCLUDE = re.compile(r'^#include\s+"(\w+)/', re.M)


def server_layer(f):
    """The layer index of a file under apps/derp/server, or None. The root's headers (server.h
    and the config, counters and limits it includes) are the shared base, below every layer."""
    if not f.startswith(SERVER_DIR) or not f.endswith((".c", ".h")):
        return None
    rest = f[len(SERVER_DIR):]
    if "/" not in rest:
        return -1 if rest.endswith(".h") else SERVER_LAYERS.index("")
    folder = rest.split("/")[0]
    return SERVER_LAYERS.index(folder) if folder in SERVER_LAYERS else None


def rule_server_layers(src, files):
    texts, defined = {}, {}
    for f in files:
        if server_layer(f) is None:
            continue
        with open(os.path.join(src, f), encoding="utf-8", errors="replace") as fh:
            raw = fh.read()
        code = C_COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), raw)
        texts[f] = (raw, code)
        for m in C_FUNC_DEF.finditer(code):
            if f.endswith(".c") and m.group(0).startswith("static"):
                continue  # a .c file's own helpers
            defined.setdefault(m.group(1), f)
    for f, (raw, code) in sorted(texts.items()):
        mine = server_layer(f)
        if mine < 0:
            continue  # server.h gathers every subsystem's declarations for the .c files
        for m in C_INCLUDE.finditer(raw):
            if m.group(1) in SERVER_LAYERS and SERVER_LAYERS.index(m.group(1)) > mine:
                line = raw.count("\n", 0, m.start()) + 1
                yield f, line, (f"includes {m.group(1)}/, a subsystem above its own: pass what "
                                "it needs down, or hear it through cfg->hooks")
        for m in C_CALL.finditer(code if f.endswith(".c") else ""):
            owner = defined.get(m.group(1))
            if owner is None or owner == f or server_layer(owner) <= mine:
                continue
            line = code.count("\n", 0, m.start()) + 1
            yield f, line, (f"calls {m.group(1)} ({owner}), a subsystem above its own: the "
                            "core tells the policies through cfg->hooks; shared helpers move down")


def rule_ctest_labels(build, ctest):
    out = subprocess.run([ctest, "--show-only=json-v1"], cwd=build, check=True,
                         capture_output=True).stdout
    tests = json.loads(out)["tests"]
    if not tests:
        yield build, 1, "ctest lists no test at all (wrong build directory?)"
    for t in tests:
        labels = [p["value"] for p in t.get("properties", []) if p["name"] == "LABELS"]
        if not labels or not any(labels[0]):
            yield "ctest", 1, f"{t['name']} has no LABELS (unit, integration, fuzz, tsan, ...)"


FUZZ_DIR = "tests/fuzz/"
FUZZ_NAME = re.compile(r"\bfuzz_[a-z0-9_]+\b")
FUZZ_REGISTERED = re.compile(r"hd_add_fuzz_target\(\s*(fuzz_[a-z0-9_]+)")


def rule_fuzz_targets(src, files):
    cmake = FUZZ_DIR + "CMakeLists.txt"
    if cmake not in files:
        return
    text = "\n".join(read_lines(src, cmake))
    registered = set(FUZZ_REGISTERED.findall(text))
    for f in files:
        name = os.path.basename(f)
        if f.startswith(FUZZ_DIR) and name.startswith("fuzz_") and name.endswith(".c"):
            if name[:-2] not in registered:
                yield f, 1, f"{name[:-2]} is not registered with hd_add_fuzz_target in {cmake}"
    for f in files:
        if not f.startswith(FUZZ_DIR) or not f.endswith((".txt", ".sh", ".cmake")):
            continue
        listed = {}
        for i, line in enumerate(read_lines(src, f), 1):
            names = set(FUZZ_NAME.findall(line))
            if len(names) >= 2:
                for n in names & registered:
                    listed.setdefault(n, i)
        if listed:
            first = min(listed.values())
            for n in sorted(registered - set(listed)):
                yield f, first, (f"its list of fuzz targets leaves out {n} (take the list "
                                 "hd_add_fuzz_target builds)")


# ---------------------------------------------------------------- no malloc on the data path

# CONVENTIONS.md: "the data path never calls malloc". The files a relayed packet (or a frame read
# or written) runs through, each with why it is on that path. A new file on the path joins here.
DATA_PATH = {
    "apps/derp/server/relay/server_client.c": "the frame reader, packet enqueue and the writer",
    "apps/derp/server/relay/server_frames.c": "a frame per packet, charged to fair shares",
    "apps/derp/server/relay/server_frame_addrs.c": "the per-address share of each packet's frame",
    "apps/derp/server/relay/server_peers.c": "srv_route and delivery, per packet",
    "apps/derp/server/relay/server_place.c": "packets held for and handed on to a guest",
    "apps/derp/server/relay/server_sources.c": "a PeerGone subscription per RecvPacket written",
    "apps/derp/server/relay/server_wait.c": "senders' waits, noted per packet",
    "apps/derp/server/relay/server_pack.c": "packing, noted per packet",
    "apps/derp/server/admit/server_rate.c": "the rate limit, taken per frame",
    "apps/derp/server/admit/server_quota.c": "the byte quotas, charged per packet",
    "net/conn.c": "every read: the recv op, its buffers and the kTLS record state",
    "net/conn_send.c": "every send: the queue, sendmsg and its completion",
    "net/sendq.c": "the send queue's chunks",
    "net/bufring.c": "the provided-buffer ring every read lands in",
    "tls/tls_record.c": "userspace TLS records, sealed and opened per write and read",
    "reactor/bus.c": "every cross-shard packet rides a bus message",
    "reactor/frame.c": "every packet is a frame",
    "reactor/op.c": "every SQE and completion",
}
# Functions of those files that may allocate: set-up and tear-down (a shard's start, a login, a
# move, a reload), never once per packet. Each with why it is off the path.
DATA_PATH_ALLOC = {
    "apps/derp/server/relay/server_client.c": {
        # "function:word": only a call on a line that names word
        "srv_client_start": "a connection's state, once at its start (it migrates with it)",
        "login_gather_start": "a ClientInfo over SRV_LOGIN_INLINE_MAX, once at login",
    },
    "apps/derp/server/relay/server_frame_addrs.c": {
        "srv_frame_addrs_init": "shard start",
        "table_rebuild": "the address table grows when a new address's client activates",
    },
    "apps/derp/server/relay/server_peers.c": {
        "srv_peers_init": "shard start",
        "srv_peers_insert": "the table grows at a registration (a login), not per packet",
        "srv_register": "a key's entry, at its first connection's login",
        "srv_forwarder_add": "a key a mesh node reported (its watch stream, not packets)",
        "srv_watch_start": "the watcher list, at the shard's first WatchConns",
    },
    "apps/derp/server/relay/server_place.c": {
        "place_move": "the held packets' room, once per move",
        "guest_adopt": "the guest entry and its held room, once per move",
        "home_ask_event": "the held packets' room, once per call home",
    },
    "apps/derp/server/relay/server_sources.c": {
        "srv_sources_shard_init": "shard start: the reverse index and the keyset pools",
        "srv_sources_detach": "a move: the keyset leaves the shard's pools for the journey",
    },
    "apps/derp/server/admit/server_rate.c": {
        "snap_new": "main thread: a -rate-config (re)load",
    },
    "apps/derp/server/admit/server_quota.c": {
        "srv_quota_parse": "main thread: a -rate-config (re)load",
        "srv_quota_attach": "the shard's usage table, at the first listed key's login",
    },
    "net/conn.c": {
        "net_conn_held_take": "a migration or export: the bytes held, once per move",
    },
    "net/bufring.c": {"net_bufring_init": "shard start"},
    "reactor/bus.c": {"hd_bus_init": "shard start"},
    "reactor/frame.c": {"hd_frames_init": "shard start"},
}
MALLOC_CALL = re.compile(r"(?<![\w.>])(malloc|calloc|realloc|reallocarray|aligned_alloc"
                         r"|posix_memalign|memalign|valloc|pvalloc|strdup|strndup|asprintf)\s*\(")
FUNC_NAME = re.compile(r"(\w+)\s*\(")


def enclosing_functions(lines):
    """line index -> name of the function whose body holds it (the functions() convention)."""
    out = {}
    for sig, text, n in functions(lines):
        m = FUNC_NAME.search(" ".join(l.strip() for l in lines[sig:sig + 4]))
        name = m.group(1) if m else text
        body = sig
        while lines[body] != "{":
            body += 1
        for k in range(body + 1, body + 1 + n):
            out[k] = name
    return out


def rule_no_malloc_data_path(src, files):
    present = set(files)
    for f, why in sorted(DATA_PATH.items()):
        if f not in present:
            continue  # moved or renamed: the list follows (a stale entry checks nothing)
        with open(os.path.join(src, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        code = C_COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        where = enclosing_functions(code.split("\n"))
        allowed = DATA_PATH_ALLOC.get(f, {})
        for m in MALLOC_CALL.finditer(code):
            line = code.count("\n", 0, m.start())
            fn = where.get(line, "(file scope)")
            text_line = text.split("\n")[line]
            if fn in allowed or any(k.split(":")[0] == fn and k.split(":")[1] in text_line
                                    for k in allowed if ":" in k):
                continue
            yield f, line + 1, (f"{m.group(1)}() in {fn}, on the data path ({why}): take it "
                                "from a pool sized from the limits, or allow the function in "
                                "DATA_PATH_ALLOC with why it is set-up, not per packet")


# ---------------------------------------------------------------- atomics

# CONVENTIONS.md "Atomics": where they may be, each a value another thread reads or writes.
ATOMIC_FILES = {
    "reactor/hd_impl.h": "bus/post ring indices, a shard's sleeping flag, its beat and running fn",
    "reactor/bus.c": "the bus rings (SPSC): head/tail acquire/release, the wake-up's sleeping",
    "reactor/post.c": "the post inbox (MPSC under a lock) and the wake-up's sleeping flag",
    "reactor/snap.c": "snapshot refcounts, dropped on any thread",
    "reactor/frame.c": "frame refcounts, dropped on any shard",
    "include/hd/hd.h": "frame and snapshot refcounts (hd_frame_ref, hd_snap_ref inline)",
    "reactor/shard.c": "the sleeping flag (pairs with bus/post), the stop flag, the beat",
    "reactor/runtime.c": "the stop flag the main thread sets; each shard's sleeping flag's init",
    "reactor/busy.c": "a shard's busy figure, read by any shard's metrics page",
    "reactor/watchdog.c": "the watchdog thread reads each shard's beat; its stall counters",
    "reactor/fault.c": "fault injection: the armed flag and counters, every shard's",
    "include/hd/hd_fault.h": "hd_fault_hit reads the armed flag inline",
    "reactor/collect.c": "a collect's countdown, decremented by every shard",
    "net/resolve.c": "a lookup's cancelled flag, between its shard and the resolver thread",
}
ATOMIC_USE = re.compile(r"\b(_Atomic|atomic_\w+|__atomic_\w+|__sync_\w+|stdatomic\.h)\b")


def rule_atomics(src, files):
    for f in c_files(files):
        if f.startswith(("tests/", "perf/")) or f in ATOMIC_FILES:
            continue
        with open(os.path.join(src, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        code = C_COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        for m in ATOMIC_USE.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            yield f, line, (f"{m.group(1)}: atomics live only in the files of ATOMIC_FILES "
                            "(CONVENTIONS.md: a cross-thread flag or counter, its pairing named); "
                            "keep the state on one shard, or list the file there with why")
            break  # one finding a file


RULES = {
    "file-lines": rule_file_lines,
    "function-lines": rule_function_lines,
    "columns": rule_columns,
    "layers-no-derp": rule_layers_no_derp,
    "private-headers": rule_private_headers,
    "doc-refs": rule_doc_refs,
    "no-libc-rand": rule_no_libc_rand,
    "server-layers": rule_server_layers,
    "fuzz-targets": rule_fuzz_targets,
    "no-malloc-data-path": rule_no_malloc_data_path,
    "atomics": rule_atomics,
}


def run(rule, src, build=None, ctest=None):
    if rule == "ctest-labels":
        findings = list(rule_ctest_labels(build, ctest))
    else:
        findings = list(RULES[rule](src, source_files(src)))
    for path, line, what in findings:
        print(f"{path}:{line}: {rule}: {what}")
    return findings


def selftest():
    """Builds a small tree that breaks every source rule once (and one that breaks none) and
    checks that each rule reports exactly its own break."""
    long_fn = "static int f(void)\n{\n" + "    x++;\n" * (FUNCTION_LINES_MAX + 1) + "}\n"
    ok_fn = "static int g(void)\n{\n" + "    x++;\n" * FUNCTION_LINES_MAX + "}\n"
    bad = {
        "apps/a/big.c": "/* big */\n" * (FILE_LINES_MAX + 1),
        "apps/a/big.h": "/* big */\n" * (HEADER_LINES_MAX + 1),
        "apps/a/fn.c": long_fn + ok_fn,
        "apps/a/wide.c": "int x; /*" + "-" * COLUMNS_MAX + "*/\n",
        "net/conn.c": "/* the DERP 101 */\n",
        "net/net_impl.h": "struct net_conn;\n",
        "apps/a/use.c": '#include "net_impl.h"\n',
        "tests/net/ok.c": '#include "net_impl.h"\n',
        "apps/a/README.md": "See ../" "shared/DESIGN.md and docs/NOWHERE.md.\n",
        "docs/DERP-PROTOCOL.md": "## 1. A\n### 1.2 B\n## Appendix A. C\n",
        "apps/a/cite.c": "/* spec §1.2, spec §1, spec Appendix A; spec §1.3 and spec §2 */\n",
        "apps/a/dice.c": ('/* rand() here is a comment */\nconst char *w = "random(";\n'
                          "int d(void) { return rand() % 6 + hd_rand(0) + x.random(1); }\n"
                          "void s(void) { srandom(1); }\n"),
        "tests/a/dice.c": "int d(void) { return rand(); }\n",
        "apps/derp/server/admit/up.c": "int srv_up(void)\n{\n    return 1;\n}\n",
        "apps/derp/server/relay/core.c": ('#include "admit/up.h"\n'
                                          "int srv_core(void)\n{\n    return srv_up();\n}\n"),
        "tests/fuzz/CMakeLists.txt": ("hd_add_fuzz_target(fuzz_a CORPUS a)\n"
                                      "hd_add_fuzz_target(fuzz_b CORPUS b)\n"),
        "tests/fuzz/fuzz_a.c": "", "tests/fuzz/fuzz_b.c": "", "tests/fuzz/fuzz_c.c": "",
        "tests/fuzz/run.sh": "targets=${T:-\"fuzz_a fuzz_c\"}\n",
        "apps/derp/server/admit/server_rate.c": (
            "static void *snap_new(void)\n{\n    return malloc(8);\n}\n"
            "bool srv_rate_take(void)\n{\n    /* malloc( in a comment */\n"
            "    char *p = calloc(1, 8);\n    return p != 0;\n}\n"),
        "apps/derp/server/relay/server_client.c": (
            "int srv_client_enqueue(void)\n{\n    void *q = realloc(cl->other, 16);\n    return 0;\n}\n"),
        "apps/a/atom.c": "/* _Atomic in a comment */\nstatic _Atomic int x;\natomic_int y;\n",
        "reactor/bus.c": "static _Atomic unsigned head;\n",
        "tests/a/atom.c": "static atomic_bool done;\n",
    }
    expect = {"file-lines": 2, "function-lines": 1, "columns": 1, "layers-no-derp": 1,
              "private-headers": 1, "doc-refs": 5, "no-libc-rand": 2,
              "server-layers": 2, "fuzz-targets": 2, "no-malloc-data-path": 2, "atomics": 1}
    good = {"apps/a/fn.c": ok_fn, "apps/a/ok.h": "/* ok */\n" * HEADER_LINES_MAX, "docs/DESIGN.md": "# d\n", "README.md": "docs/DESIGN.md\n",
            "net/net_impl.h": "struct net_conn;\n", "net/conn.c": '#include "net_impl.h"\n',
            "apps/derp/server/relay/core.c": "int srv_core(void)\n{\n    return 1;\n}\n",
            "apps/derp/server/admit/up.c": ('#include "relay/core.h"\n'
                                            "int srv_up(void)\n{\n    return srv_core();\n}\n"),
            "tests/fuzz/CMakeLists.txt": "hd_add_fuzz_target(fuzz_a CORPUS a)\n",
            "tests/fuzz/fuzz_a.c": "", "tests/fuzz/run.sh": "t=${T:-$*}  # fuzz_a\n",
            "apps/derp/server/admit/server_rate.c": (
                "static void *snap_new(void)\n{\n    return malloc(8);\n}\n"
                "bool srv_rate_take(void)\n{\n    return hd_slab_get(p) != 0;\n}\n"),
            "reactor/bus.c": "static _Atomic unsigned head;\n"}
    failed = False
    for tree, want in ((bad, expect), (good, {r: 0 for r in RULES})):
        with tempfile.TemporaryDirectory() as d:
            for path, text in tree.items():
                os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(d, path), "w", encoding="utf-8") as f:
                    f.write(text)
            for rule, n in want.items():
                got = list(RULES[rule](d, source_files(d)))
                if len(got) != n:
                    print(f"selftest: {rule}: {len(got)} findings, expected {n}: {got}")
                    failed = True
    with tempfile.TemporaryDirectory() as d:  # ctest-labels, against a stand-in for ctest
        fake = os.path.join(d, "ctest")
        listing = {"tests": [{"name": "a", "properties": [{"name": "LABELS", "value": ["unit"]}]},
                             {"name": "b", "properties": [{"name": "TIMEOUT", "value": 9}]},
                             {"name": "c", "properties": [{"name": "LABELS", "value": [""]}]}]}
        with open(fake, "w", encoding="utf-8") as f:
            f.write("#!/bin/sh\ncat <<'EOF'\n" + json.dumps(listing) + "\nEOF\n")
        os.chmod(fake, 0o755)
        got = [w for _, _, w in rule_ctest_labels(d, fake)]
        if len(got) != 2 or not got[0].startswith("b ") or not got[1].startswith("c "):
            print(f"selftest: ctest-labels: {got}, expected b and c")
            failed = True
    print("selftest:", "FAILED" if failed else "every rule fires on its break, and only there")
    return 1 if failed else 0


def main(argv):
    args = argv[1:]
    if not args or args[0] not in list(RULES) + ["ctest-labels", "selftest"]:
        print(__doc__)
        return 2
    if args[0] == "selftest":
        return selftest()
    opts = dict(zip(args[1::2], args[2::2]))
    src = opts.get("--src", os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    findings = run(args[0], src, opts.get("--build"), opts.get("--ctest", "ctest"))
    if findings:
        print(f"tidy {args[0]}: {len(findings)} finding(s)")
        return 1
    print(f"tidy {args[0]}: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
