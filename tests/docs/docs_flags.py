#!/usr/bin/env python3
"""docs_flags.py SRC BIN_DIR - the flags of hderp-server and hderp-echo agree in the three places
an operator reads them: docs/FLAGS.md (the one table), the programs' --help (and their
subcommands'), and the man pages packaging/help2man.sh makes from --help for the .deb.

docs/FLAGS.md: a "## ..." heading that ends in (`PROGRAM [SUBCOMMAND] --help`) starts the
section of that command; each table row whose first cell is a backquoted flag documents it.
Checks, per command: no flag twice in its section; every flag in its section is in its --help;
every flag its --help names is in a section of the same program; hderp-server's parser knows
every documented flag (it does not answer "unknown flag"); the man page build-deb.sh makes holds
every documented flag of its program. Exit 0 when all hold, 1 with every mismatch listed."""
import os
import re
import subprocess
import sys

HEADING = re.compile(r"^##\s.*\(`((hderp-[a-z]+)(?: ([a-z]+))? --help)`\)\s*$")
ROW = re.compile(r"^\|\s*`(--?[a-z][a-z0-9-]*)`\s*\|")
FLAG = re.compile(r"(--?)([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")
# Flags every command takes that are not documented per command.
UNIVERSAL = {"h", "help"}


def flag_names(text):
    """The flag names (without dashes) a help text names anywhere; a token glued to a word
    (re-reads, derper-certs) or a path is not a flag; "[-v2]" (send-proxy[-v2]) is not one."""
    out = set()
    for m in FLAG.finditer(text):
        prev = text[m.start() - 1] if m.start() > 0 else " "
        if prev.isalnum() or prev in "_-/.$" or (prev == "[" and m.group(1) == "-"):
            continue
        out.add(m.group(2))
    return out - UNIVERSAL


def help_text(bin_dir, prog, sub):
    cmd = [os.path.join(bin_dir, prog)] + ([sub] if sub else []) + ["--help"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    text = r.stdout + r.stderr
    if not text.strip():
        raise SystemExit("%s printed nothing" % " ".join(cmd))
    # hderp-server lists derper's flags it refuses after this line: not its flags.
    return text.split("not supported yet")[0]


def read_sections(path):
    """[(program, subcommand or None, [flag names in order])] from docs/FLAGS.md."""
    sections, cur = [], None
    with open(path) as f:
        for line in f:
            m = HEADING.match(line)
            if m:
                cur = (m.group(2), m.group(3), [])
                sections.append(cur)
            elif line.startswith("## "):
                cur = None
            elif cur is not None:
                r = ROW.match(line)
                if r:
                    cur[2].append(r.group(1).lstrip("-"))
    return sections


def man_invocations(src):
    """{program: [subcommands]} as packaging/build-deb.sh runs help2man.sh."""
    with open(os.path.join(src, "packaging", "build-deb.sh")) as f:
        text = f.read().replace("\\\n", " ")
    out = {}
    call = r'help2man\.sh"\s+"\$root/usr/bin/(\S+?)"\s+(\d)\s+"[^"]*"([^|]*)\|'
    for m in re.finditer(call, text):
        out[m.group(1)] = (m.group(2), m.group(3).split())
    return out


def parser_knows(bin_dir, name):
    r = subprocess.run([os.path.join(bin_dir, "hderp-server"), "-%s=x" % name, "-version"],
                       capture_output=True, text=True, timeout=60)
    return "unknown flag" not in r.stderr


def check(src, bin_dir):
    errors = []
    sections = read_sections(os.path.join(src, "docs", "FLAGS.md"))
    if not sections:
        return ["docs/FLAGS.md has no (`PROGRAM --help`) section"]
    documented = {}
    for prog, sub, rows in sections:
        documented.setdefault(prog, set()).update(rows)
    for prog, sub, rows in sections:
        cmd = prog + (" " + sub if sub else "")
        dups = sorted({r for r in rows if rows.count(r) > 1})
        if dups:
            errors.append("docs/FLAGS.md, %s: documented twice: %s" % (cmd, ", ".join(dups)))
        helped = flag_names(help_text(bin_dir, prog, sub))
        for name in sorted(set(rows) - helped):
            errors.append("%s --help does not name -%s, which docs/FLAGS.md documents" % (
                cmd, name))
        for name in sorted(helped - documented[prog]):
            errors.append("%s --help names -%s, which docs/FLAGS.md does not document" % (
                cmd, name))
        if prog == "hderp-server" and sub is None:
            for name in rows:
                if not parser_knows(bin_dir, name):
                    errors.append("hderp-server answers 'unknown flag' to -%s (docs/FLAGS.md)"
                                  % name)
    invocations = man_invocations(src)
    for prog, names in sorted(documented.items()):
        if prog not in invocations:
            errors.append("packaging/build-deb.sh makes no man page for %s with help2man.sh" % prog)
            continue
        msec, subs = invocations[prog]
        for p, sub, _ in sections:
            if p == prog and sub and sub not in subs:
                errors.append("the %s man page leaves out '%s %s --help'" % (prog, prog, sub))
        man = subprocess.run(["bash", os.path.join(src, "packaging", "help2man.sh"),
                              os.path.join(bin_dir, prog), msec, "test"] + subs,
                             capture_output=True, text=True, timeout=60)
        if man.returncode != 0:
            errors.append("help2man.sh %s failed: %s" % (prog, man.stderr.strip()))
            continue
        in_man = flag_names(man.stdout)
        for name in sorted(names - in_man):
            errors.append("man %s does not name -%s, which docs/FLAGS.md documents" % (prog, name))
    return errors


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: docs_flags.py SRC BIN_DIR")
    src, bin_dir = sys.argv[1], sys.argv[2]
    errors = check(src, bin_dir)
    sections = read_sections(os.path.join(src, "docs", "FLAGS.md"))
    total = sum(len(rows) for _, _, rows in sections)
    for e in errors:
        print("FAIL", e)
    print("docs_flags: %d flags in %d sections of docs/FLAGS.md, %d mismatches" % (
        total, len(sections), len(errors)))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
