#!/usr/bin/env python3
"""docs_examples.py SRC BIN_DIR BUILD_DIR WORK - the command blocks of README.md and docs/ work.

Every fenced shell block (sh, bash, shell, console) carries a tag after its language
(docs/CONTRIBUTING.md, "Examples in the docs"):
  run     run with bash -e against a development hderp-server this test started on port 0
          (127.0.0.1:3340 and STUN port 3478 in the text become its ports); must exit 0
  server  starts servers: run with ports 3340 and 3400-3499 replaced by held free ones (STUN on
          port 0); every hderp-server it starts must listen and pass `hderp-server check`
          (mesh links included); then stopped by PID
  domain  needs a public DNS name and certificate: not run; must name example.com
  system  installs or changes the machine, or runs for minutes: not run
Every block, run or not, is also read: each hderp-server / hderp-echo flag must be one
docs/FLAGS.md documents for that command, an hderp-server command line that can be parsed
as it stands must be accepted (hderp-server ARGS --print-derpmap exits 0), `make` targets must
be the GNUmakefile's, `ctest -R/-L` must select tests of this build, perf/run-bench flags must
be in its --help. json and yaml blocks must parse; an untagged block that starts like a command
is an error. The packaged flags file (packaging/deb/hderp-server.default) must parse too, and
every [link](#anchor) in these files must name a heading.
Programs run from this build: BIN_DIR's programs, hderp-server through a wrapper that adds
--port-file (and the port-0 substitutions) so the test knows what each started server bound."""
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import testlib  # noqa: E402  (tests/integration/testlib.py: Server, hold_port, wait_for)

SHELL_LANGS = {"sh", "bash", "shell", "console"}
TAGS = ("run", "server", "domain", "system")
COMMAND_START = re.compile(r"^\s*(\$ |sudo |make |cmake |ctest |curl |\./|hderp-|perf/|apt|"
                           r"systemctl |dpkg )")
FLAGS_HEADING = re.compile(r"^##\s.*\(`(hderp-[a-z]+)(?: ([a-z]+))? --help`\)\s*$")
FLAGS_ROW = re.compile(r"^\|\s*`--?([a-z][a-z0-9-]*)`\s*\|")
SERVER_PORT = re.compile(r"\b(3340|34\d\d)\b")
BLOCK_BOUND_S = 120  # a block that hangs fails after this; a bound, not a figure

WRAPPER = r"""#!/bin/bash
# hderp-server as the docs' examples run it (tests/docs/docs_examples.py): serving, it adds
# -stun-port 0 and --port-file (and -a 127.0.0.1:0 to a bare -dev) so the test finds its ports.
real=%s
case "$1" in check|upgrade) exec "$real" "$@" ;; esac
dev=0 addr=0
for a in "$@"; do
  case "$a" in
    -h|-help|--help|-version|--version|-print-derpmap*|--print-derpmap*) exec "$real" "$@" ;;
    -dev|--dev|-dev=true|--dev=true) dev=1 ;;
    -a|--a|-a=*|--a=*) addr=1 ;;
  esac
done
extra=(-stun-port 0 --port-file "$HD_DOC_RUN/ports.$$")
if [ $dev = 1 ] && [ $addr = 0 ]; then extra+=(-a 127.0.0.1:0); fi
: >"$HD_DOC_RUN/started.$$"
exec "$real" "$@" "${extra[@]}"
"""


class Block:
    def __init__(self, path, line, info, text):
        self.path, self.line, self.text = path, line, text
        words = info.split()
        self.lang = words[0] if words else ""
        self.tags = words[1:]

    def where(self):
        return "%s:%d" % (self.path, self.line)


def doc_files(src):
    files = ["README.md"] + sorted(
        os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs", "**", "*.md"),
                                                   recursive=True))
    return [f for f in files if os.path.exists(os.path.join(src, f))]


def read_blocks(src, rel):
    blocks, cur = [], None
    with open(os.path.join(src, rel)) as f:
        for i, line in enumerate(f, 1):
            s = line.strip()
            if cur is None and s.startswith("```"):
                cur = (i, s[3:].strip(), [], len(line) - len(line.lstrip()))
            elif cur is not None and s == "```":
                blocks.append(Block(rel, cur[0], cur[1], "".join(cur[2])))
                cur = None
            elif cur is not None:
                cur[2].append(line[cur[3]:] if line[:cur[3]].strip() == "" else line)
    return blocks


def flag_sections(src):
    """{(program, subcommand or None): {flag names}} from docs/FLAGS.md."""
    out, cur = {}, None
    with open(os.path.join(src, "docs", "FLAGS.md")) as f:
        for line in f:
            m = FLAGS_HEADING.match(line)
            if m:
                cur = out.setdefault((m.group(1), m.group(2)), set())
            elif line.startswith("## "):
                cur = None
            elif cur is not None:
                r = FLAGS_ROW.match(line)
                if r:
                    cur.add(r.group(1))
    return out


def make_targets(src):
    targets = set()
    with open(os.path.join(src, "GNUmakefile")) as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_%. -]+):(?!=)", line)
            if m and not line.startswith("\t"):
                targets.update(m.group(1).split())
            if line.startswith(".PHONY:"):
                targets.update(line.split()[1:])
    return targets


def commands(text):
    """The simple commands of a shell block: lists of words, $(...) and `...` replaced by a
    SUBST word, redirections and their targets dropped."""
    text = re.sub(r"\\\n", " ", text)
    text = re.sub(r"\$\([^()]*\)|`[^`]*`", " SUBST ", text)
    out = []
    for line in text.splitlines():
        try:
            lex = shlex.shlex(line, posix=True, punctuation_chars=True)
            lex.commenters = "#"
            lex.wordchars += "$%{}[]:@,+^!"
            words = list(lex)
        except ValueError:
            continue  # an unbalanced quote in a comment's prose: nothing to check
        cur, skip = [], False
        for w in words + [";"]:
            if skip:
                skip = False
            elif w in ("|", "||", "&&", ";", "&", "(", ")", ";;"):
                if cur:
                    out.append(cur)
                cur = []
            elif w in (">", ">>", "<", "2>", "&>", ">&"):
                skip = True
            else:
                cur.append(w)
    return out


class Checker:
    def __init__(self, src, bin_dir, build):
        self.src, self.bin, self.build = src, bin_dir, build
        self.flags = flag_sections(src)
        self.targets = make_targets(src)
        self.errors, self.parsed = [], 0
        self._runbench = self._wghelp = None

    def err(self, block, msg):
        self.errors.append("%s: %s" % (block.where() if block else "-", msg))

    def check_flags(self, block, key, words):
        known = self.flags.get(key)
        if known is None:
            self.err(block, "docs/FLAGS.md has no section for %s" % " ".join(filter(None, key)))
            return
        for w in words:
            if re.match(r"^--?[a-z]", w):  # not a value like -1
                name = w.lstrip("-").split("=")[0]
                if name not in known and name not in ("h", "help"):
                    self.err(block, "%s: -%s is not a flag docs/FLAGS.md documents for it" % (
                        " ".join(filter(None, key)), name))

    def check_server_line(self, block, args):
        """hderp-server ARGS --print-derpmap: the parser accepts the line as written."""
        if any(a in ("SUBST", "...") or "$" in a or "<" in a for a in args):
            return
        r = subprocess.run([os.path.join(self.bin, "hderp-server")] + args + ["--print-derpmap"],
                           capture_output=True, text=True, timeout=60)
        self.parsed += 1
        if r.returncode != 0:
            self.err(block, "hderp-server %s: refused (%d): %s" % (
                " ".join(args), r.returncode, r.stderr.strip()[-300:]))

    def check_command(self, block, words, run_later):
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]  # VAR=value before the command
        if not words:
            return
        prog, args = os.path.basename(words[0]), words[1:]
        if prog == "hderp-server":
            sub = args[0] if args and args[0] in ("check", "upgrade") else None
            self.check_flags(block, ("hderp-server", sub), args[1:] if sub else args)
            if sub is None and not run_later:
                self.check_server_line(block, [a for a in args if a != "..."])
        elif prog == "hderp-echo":
            sub = "observe" if args and args[0] == "observe" else None
            self.check_flags(block, ("hderp-echo", sub), args[1:])
        elif prog == "hderp-wgrelay":  # its flags as its --help names them
            if self._wghelp is None:
                self._wghelp = subprocess.run(
                    [os.path.join(self.bin, "hderp-wgrelay"), "--help"],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    timeout=60).stdout
            for a in args:  # its --help writes -flag; - or -- are both taken
                if a.startswith("-") and not re.search(
                        r"(^|\s)-%s\b" % re.escape(a.split("=")[0].lstrip("-")), self._wghelp):
                    self.err(block, "hderp-wgrelay --help does not know %s" % a)
        elif prog == "make":
            for a in args:
                if not a.startswith("-") and "=" not in a and a not in self.targets:
                    self.err(block, "make %s: the GNUmakefile has no such target" % a)
        elif prog == "ctest":
            for opt, val in zip(args, args[1:]):
                if opt in ("-R", "-L"):
                    r = subprocess.run(["ctest", "--test-dir", self.build, "-N", opt, val],
                                       capture_output=True, text=True, timeout=120)
                    if not re.search(r"Total Tests: [1-9]", r.stdout):
                        self.err(block, "ctest %s %s selects no test of this build" % (opt, val))
        elif words[0].endswith("perf/run-bench"):
            if self._runbench is None:
                self._runbench = subprocess.run(
                    [sys.executable, os.path.join(self.src, "perf", "run-bench"), "--help"],
                    capture_output=True, text=True, timeout=60).stdout
            for a in args:
                if a.startswith("--") and a.split("=")[0] not in self._runbench:
                    self.err(block, "perf/run-bench --help does not know %s" % a)

    def check_block(self, block):
        if block.lang in SHELL_LANGS:
            if len(block.tags) != 1 or block.tags[0] not in TAGS:
                self.err(block, "a ```%s block needs one tag of %s after the language" % (
                    block.lang, ", ".join(TAGS)))
                return None
            tag = block.tags[0]
            if tag in ("run", "server") and "example.com" in block.text:
                self.err(block, "marked %s but names example.com: mark it domain" % tag)
            if tag == "domain" and "example.com" not in block.text:
                self.err(block, "marked domain but names no example.com domain: make it run")
            for words in commands(block.text):
                self.check_command(block, words, tag in ("run", "server"))
            return tag
        if block.lang == "json":
            try:
                json.loads(block.text)
            except ValueError as e:
                self.err(block, "json does not parse: %s" % e)
        elif block.lang == "yaml":
            import yaml
            try:
                yaml.safe_load(block.text)
            except yaml.YAMLError as e:
                self.err(block, "yaml does not parse: %s" % e)
        elif block.lang == "":
            first = next((ln for ln in block.text.splitlines() if ln.strip()), "")
            if COMMAND_START.match(first):
                self.err(block, "a command block without ```sh and a tag: %r" % first)
        return None

    def check_anchors(self, files):
        """Every [text](#anchor) and [text](OTHER#anchor) (another Markdown file) names a
        heading (GitHub's slugs)."""
        slugs, links = {}, []
        for rel in files:
            with open(os.path.join(self.src, rel)) as f:
                lines = f.read().splitlines()
            found, fence = set(), False
            for i, line in enumerate(lines, 1):
                fence = fence != line.strip().startswith("```")
                if not fence and line.startswith("#"):
                    title = line.lstrip("#").strip().lower()
                    found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
                for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", line):
                    links.append((rel, i, target, anchor))
            slugs[rel] = found
        for rel, i, target, anchor in links:
            doc = os.path.normpath(os.path.join(os.path.dirname(rel), target)) if target else rel
            if doc in slugs and anchor not in slugs[doc]:
                self.errors.append("%s:%d: #%s is no heading of %s" % (rel, i, anchor, doc))

    def check_default_file(self):
        path = os.path.join(self.src, "packaging", "deb", "hderp-server.default")
        with open(path) as f:
            m = re.search(r'^HDERP_FLAGS="([^"]*)"', f.read(), re.M)
        if not m:
            self.err(None, "packaging/deb/hderp-server.default sets no HDERP_FLAGS")
            return
        block = Block("packaging/deb/hderp-server.default", 1, "sh system", "")
        args = shlex.split(m.group(1))
        self.check_flags(block, ("hderp-server", None), args)
        self.check_server_line(block, args)


def group_members(pgid):
    """The live (not zombie) processes of process group pgid, from /proc."""
    out = set()
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.add(int(stat.split("/")[2]))
    return out


class Runner:
    """Runs the run and server blocks with this build's programs."""

    def __init__(self, bin_dir, work):
        self.bin, self.work = os.path.abspath(bin_dir), work
        self.shim = os.path.join(work, "build", "release", "bin")  # ./build/release/bin/ in docs
        os.makedirs(self.shim)
        for p in os.listdir(self.bin):
            if p != "hderp-server":
                os.symlink(os.path.join(self.bin, p), os.path.join(self.shim, p))
        wrapper = os.path.join(self.shim, "hderp-server")
        with open(wrapper, "w") as f:
            f.write(WRAPPER % shlex.quote(os.path.join(self.bin, "hderp-server")))
        os.chmod(wrapper, 0o755)
        self.count = 0
        self.dev = testlib.Server(self.bin, work, "dev", ["-dev", "-a", "127.0.0.1:0",
                                                          "-stun-port", "0"])

    def start(self):
        self.dev.start()

    def stop(self):
        rc = self.dev.stop()
        if rc != 0:
            return ["the development server exited with %s:\n%s" % (
                rc, self.dev.log_text()[-2000:])]
        return []

    def _spawn(self, text):
        self.count += 1
        d = os.path.join(self.work, "block-%d" % self.count)
        os.makedirs(d)
        os.symlink(os.path.join(self.work, "build"), os.path.join(d, "build"))
        script = os.path.join(d, "block.sh")
        with open(script, "w") as f:
            f.write("set -eo pipefail\n" + text)
        env = dict(os.environ, HD_DOC_RUN=d, PATH=self.shim + os.pathsep + os.environ["PATH"])
        log = open(os.path.join(d, "output"), "w")
        proc = subprocess.Popen(["bash", script], cwd=d, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        return d, proc, log

    @staticmethod
    def _end_group(proc):
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the block's own process group
        except ProcessLookupError:
            pass

    @staticmethod
    def _output(d):
        with open(os.path.join(d, "output"), errors="replace") as f:
            return f.read()[-3000:]

    def run(self, block):
        text = block.text.replace("127.0.0.1:3340", "127.0.0.1:%d" % self.dev.port)
        text = re.sub(r"\b3478\b", str(self.dev.stun), text)
        d, proc, log = self._spawn(text)
        try:
            rc = proc.wait(timeout=BLOCK_BOUND_S)
        except subprocess.TimeoutExpired:
            rc = "no exit within %d s" % BLOCK_BOUND_S
        self._end_group(proc)
        proc.wait()
        log.close()
        if rc != 0:
            return ["%s: the run block failed (%s):\n%s" % (block.where(), rc, self._output(d))]
        return []

    def serve(self, block):
        holds, ports = [], {}
        for n in sorted(set(SERVER_PORT.findall(block.text))):
            s, p = testlib.hold_port()
            holds.append(s)
            ports[n] = str(p)
        text = SERVER_PORT.sub(lambda m: ports[m.group(1)], block.text)
        d, proc, log = self._spawn(text)
        errors, pids = [], []
        try:
            errors = self._serve_check(block, d, proc, pids)
        finally:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for pid in pids:
                try:
                    testlib.wait_for(lambda: testlib.pid_gone(pid), "server %d to stop" % pid,
                                     testlib.STOP_S)
                except AssertionError as e:
                    errors.append("%s: %s" % (block.where(), e))
                    os.kill(pid, signal.SIGKILL)
            self._end_group(proc)
            proc.wait()
            log.close()
            for s in holds:
                s.close()
        if errors:
            errors[-1] += "\n" + self._output(d)
        return errors

    def _serve_check(self, block, d, proc, pids):
        def listening():
            """Every process of the block's group but its shell is an hderp-server that listens
            (a loop of `cmd &` may still be forking while its shell has exited)."""
            rc = proc.poll()
            if rc not in (None, 0):
                raise AssertionError("the block exited with %d" % rc)
            started = {int(p.rsplit(".", 1)[1]) for p in glob.glob(os.path.join(d, "started.*"))}
            for pid in started:
                if testlib.pid_gone(pid) and not os.path.exists(os.path.join(d, "ports.%d" % pid)):
                    raise AssertionError("hderp-server %d exited before it listened" % pid)
            members = group_members(proc.pid) - {proc.pid}
            if not members or not members <= started:
                return None
            if not all(os.path.exists(os.path.join(d, "ports.%d" % p)) for p in members):
                return None
            pids[:] = sorted(started)
            return True
        try:
            testlib.wait_for(listening, "the block's servers to listen", BLOCK_BOUND_S)
        except AssertionError as e:
            return ["%s: the server block did not start: %s" % (block.where(), e)]
        errors, deadline = [], time.monotonic() + BLOCK_BOUND_S
        for pid in pids:
            got = testlib.read_port_file(os.path.join(d, "ports.%d" % pid))
            url = "http://127.0.0.1:%d" % got["derp"]
            cmd = [os.path.join(self.bin, "hderp-server"), "check", "--stun-port",
                   str(got.get("stun", 0)), url]
            last = []

            def passes():
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                last[:] = [r.stdout + r.stderr]
                return r.returncode == 0
            try:  # a mesh takes a moment to link: check until it passes, within a bound
                testlib.wait_for(passes, "check %s to pass" % url,
                                 max(1.0, deadline - time.monotonic()), 0.5)
            except AssertionError:
                errors.append("%s: hderp-server check %s failed:\n%s" % (
                    block.where(), url, last[0] if last else ""))
        return errors


def main():
    if len(sys.argv) != 5:
        raise SystemExit("usage: docs_examples.py SRC BIN_DIR BUILD_DIR WORK")
    src, bin_dir, build, work = (os.path.abspath(a) for a in sys.argv[1:])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    checker = Checker(src, bin_dir, build)
    todo, counts = [], {t: 0 for t in TAGS}
    for rel in doc_files(src):
        for block in read_blocks(src, rel):
            tag = checker.check_block(block)
            if tag:
                counts[tag] += 1
            if tag in ("run", "server"):
                todo.append((tag, block))
    checker.check_default_file()
    checker.check_anchors(doc_files(src))
    errors = list(checker.errors)
    runner = Runner(bin_dir, work)
    runner.start()
    try:
        for tag, block in todo:
            errors += runner.run(block) if tag == "run" else runner.serve(block)
    finally:
        errors += runner.stop()
    for e in errors:
        print("FAIL", e)
    print("docs_examples: %s blocks (%d hderp-server lines parsed); %d run and %d server blocks "
          "ran; %d errors" % (", ".join("%d %s" % (counts[t], t) for t in TAGS), checker.parsed,
                              counts["run"], counts["server"], len(errors)))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
