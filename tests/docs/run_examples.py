#!/usr/bin/env python3
"""run_examples.py - runs the code examples of one Markdown file (CTest
docs.<NAME>, one test per file of README.md and docs/*.md).

Every fenced block with an info string is a code example and runs, in a
scratch folder of its own per Markdown file (the blocks of one file run in
order, sharing that folder), unless an HTML comment right before it marks
it.  A block with no info string is a listing (a synopsis, output, a byte
layout) and never runs.  The convention, documented in docs/ARCHITECTURE.md
("Doc examples are tests"):

  <!-- doctest: skip REASON -->     not run; REASON is required
  <!-- doctest: needs MODULE -->    python: run by the first of this
                                    harness's python and the optional venvs
                                    (OPTIONAL_VENVS: pyarrow's, the peers')
                                    that imports MODULE (e.g. torch); skipped,
                                    saying so, when none does
  <!-- doctest: file NAME -->       write the block to NAME (in the scratch
                                    folder) for later blocks, run nothing
                                    (C: compiled to NAME without .c); a
                                    block of any language can be written
                                    so (a CMakeLists.txt for `run`)
  <!-- doctest: excerpt PATH -->   the block quotes PATH (relative to the
                                    source root): each of its lines, blanks
                                    collapsed (C: comments removed), is a
                                    line of PATH, in order
  <!-- doctest: run COMMAND -->     run COMMAND (bash) instead of the
                                    block's default runner, after writing
                                    the block (with `file`, under NAME;
                                    json: after parsing it, e.g. to compare
                                    it with a command's output)
  <!-- doctest: setup               bash lines run before the block (data
  ...                               the block reads)
  -->
  <!-- doctest: prelude             code prepended to the block, hidden
  ...                               from the reader (a fragment's context)
  -->
  <!-- doctest: prelude-all LANG    code prepended to every later LANG
  ...                               block of the file (standalone: it
  -->                               marks no block; a block's own prelude
                                    comes after it)
  <!-- doctest: after               code appended to the block (e.g. to
  ...                               iterate the pipeline it declares)
  -->
  <!-- doctest: stdout              what the block must print (line by
  ...                               line, runs of blanks as one)
  -->

Several comments may precede one block (blank lines between are fine).

Runners: lua -> luajit (LUA_PATH: the source's lua/, the build's lua/);
c -> cc -std=c11 -Wall -Wextra -Werror against include/sluice.h and the
built libsluice, then run when the block has a main(); sh/bash -> bash -e
with the built `sluice` first on PATH; console -> its `$ ` commands run in
one shell, each must exit 0 (or the status a following `echo $?` shows),
their output is not compared; python -> python3 with the built binding on
PYTHONPATH (skipped, saying so, when it was not built); json -> parsed.
Another language must be marked `skip`, and a block with no language that
holds `$ ` lines (a shell session) must be tagged console or marked.

The scratch folder starts with small Fashion-MNIST fixtures (from the
Debian dataset-fashion-mnist files, the first 1000 training and 200 test
images, 100 records a chunk): train.slr, t10k.slr, data/train.slr,
data/t10k.slr and data/train-0000K-of-00004.slr.  Environment for `setup`/`run`/sh blocks:
SLUICE_SOURCE_DIR, SLUICE_BUILD_DIR, FMNIST (the dataset folder), PYTHON
(this harness's Python, for a setup that writes a binary format).

Exit status: 0 when every unmarked block passed, 1 otherwise (each failure
names FILE:LINE, the command and its output), 2 on a malformed marker.
"""

import argparse
import gzip
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile

RUNNABLE = {"lua", "c", "sh", "bash", "console", "python", "json"}
BLOCK_TIMEOUT = 120
FENCE = re.compile(r"^( {0,3}|\s*)(`{3,}|~{3,})\s*([^`]*)$")
MARKER = re.compile(r"<!--\s*doctest:\s*(\w[\w-]*)(.*?)-->", re.S)
KINDS = {"skip", "needs", "file", "run", "setup", "prelude", "after", "stdout",
         "prelude-all", "excerpt"}


# The venvs of the optional Python peers (made outside the tree: bench/peers/
# setup, bindings/python/tests/setup_arrow): a `needs MODULE` block runs
# with the first of this harness's interpreter and these pythons that
# imports MODULE.
OPTIONAL_VENVS = [os.path.expanduser(os.environ.get(var, default)) + "/bin/python"
                  for var, default in (("SLUICE_ARROW_VENV", "~/.cache/sluice/arrow-venv"),
                                       ("SLUICE_PEERS_VENV", "~/.cache/sluice/peers-venv"))]


def python_with(mod, cwd, env):
    """The first interpreter that imports `mod`, or None."""
    for py in [sys.executable] + OPTIONAL_VENVS:
        if os.path.exists(py) and run([py, "-c", f"import {mod}"], cwd, env)[0] == 0:
            return py
    return None


class MarkerError(Exception):
    pass


class Block:
    def __init__(self, line, lang, body):
        self.line, self.lang, self.body = line, lang, body
        self.marks = {}  # kind -> text


def parse(path):
    """The fenced blocks of a Markdown file, with their markers."""
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, pending, i = [], [], 0
    every = {}  # language -> the prelude of every later block (prelude-all)
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("<!--") and "doctest:" in line:
            start = i
            text = line
            while "-->" not in text:
                i += 1
                if i >= len(lines):
                    raise MarkerError(f"{path}:{start + 1}: doctest comment never closed")
                text += "\n" + lines[i]
            m = MARKER.search(text)
            if not m:
                raise MarkerError(f"{path}:{start + 1}: malformed doctest comment")
            kind, arg = m.group(1), m.group(2)
            if kind not in KINDS:
                raise MarkerError(f"{path}:{start + 1}: unknown doctest marker '{kind}' "
                                  f"(known: {', '.join(sorted(KINDS))})")
            if kind == "prelude-all":
                lang, _, code = arg.partition("\n")
                if not lang.strip() or not code.strip():
                    raise MarkerError(f"{path}:{start + 1}: doctest: prelude-all needs a "
                                      "language on its line, then the code")
                every[lang.strip()] = code.rstrip(" ")
                i += 1
                continue
            if kind in ("setup", "prelude", "after", "stdout"):
                arg = arg[1:] if arg.startswith("\n") else arg.strip()
                arg = arg.rstrip(" ")
            else:
                arg = arg.strip()
                if not arg:
                    raise MarkerError(f"{path}:{start + 1}: doctest: {kind} needs an argument")
            pending.append((start + 1, kind, arg))
            i += 1
            continue
        m = FENCE.match(line)
        if m:
            indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
            body, j = [], i + 1
            close = re.compile(r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
            while j < len(lines) and not close.match(lines[j]):
                body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
                j += 1
            b = Block(i + 1, info.split()[0] if info else "", "\n".join(body) + "\n")
            if b.lang in every:
                b.marks["prelude"] = every[b.lang]
            for mline, kind, arg in pending:
                if kind == "prelude" and b.lang in every:
                    b.marks["prelude"] = every[b.lang] + arg
                    continue
                if kind in b.marks:
                    raise MarkerError(f"{path}:{mline}: a second doctest: {kind} for one block")
                b.marks[kind] = arg
            if pending and not b.lang:
                raise MarkerError(f"{path}:{pending[0][0]}: doctest marker before a block "
                                  "with no language (listings never run)")
            pending = []
            blocks.append(b)
            i = j + 1
            continue
        if pending and line.strip():
            raise MarkerError(f"{path}:{pending[0][0]}: doctest marker not followed by a "
                              "code block")
        i += 1
    if pending:
        raise MarkerError(f"{path}:{pending[0][0]}: doctest marker at the end of the file")
    return blocks


def check_links(md, src):
    """Markdown links and names of .md files outside code blocks must lead
    to a file of the repository: the docs stand alone and never go stale."""
    text = open(md, encoding="utf-8").read()
    lines = text.split("\n")
    bad, inside, fence = [], False, None
    for n, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if m and (not inside or line.strip().startswith(fence)):
            inside, fence = (not inside), m.group(2)[:3]
            continue
        if inside:
            continue
        names = [t for t in re.findall(r"\]\(([^)#\s]*)", line) if t]
        names += re.findall(r"(?<![\w./:-])((?:\.\./|\./)?[\w./-]*[\w-]+\.md)\b", line)
        for t in dict.fromkeys(names):
            if re.match(r"^[a-z]+:", t):
                bad.append(f"{n}: a link out of the repository: {t}")
                continue
            hits = [os.path.normpath(os.path.join(b, t))
                    for b in (os.path.dirname(md), src)]
            hits = [h for h in hits if os.path.exists(h)]
            if not hits:
                bad.append(f"{n}: {t}: no such file in the repository")
            elif not any(h == src or h.startswith(src + os.sep) for h in hits):
                bad.append(f"{n}: {t}: outside the repository")
    return bad


def excerpt_mismatch(body, path):
    """None when every line of body (blanks collapsed) is a line of the
    file at path, in order; else the first line that is not."""
    def norm(t):
        return " ".join(t.split())
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        return str(e)
    if path.endswith((".h", ".c")):  # C: compared without comments
        def strip(t):
            return re.sub(r"/\*.*?\*/|//[^\n]*", "", t, flags=re.S)
        text, body = strip(text), strip(body)
    have = [norm(t) for t in text.split("\n")]
    at = 0
    for line in body.split("\n"):
        want = norm(line)
        if not want:
            continue
        try:
            at = have.index(want, at) + 1
        except ValueError:
            return f"'{want}' is not there (after line {at})"
    return None


def console_script(body):
    """A ```console session as a bash script: its `$ ` commands (with their
    backslash continuations) run in order in one shell, the other lines
    (their output) are not compared; a command that exits non-zero fails
    the block, unless the session's next command is `echo $?` and the line
    after it shows that status."""
    lines = body.split("\n")
    cmds, i = [], 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            cmd = lines[i][2:]
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd += "\n" + lines[i]
            shown = (lines[i + 1].strip() if i + 1 < len(lines) else "")
            if cmd.strip() == "echo $?" and cmds and re.fullmatch(r"\d+", shown):
                cmds[-1][1] = int(shown)
            else:
                cmds.append([cmd, 0])
        i += 1
    out = ["set -o pipefail"]
    for cmd, want in cmds:
        first = shlex.quote(cmd.split("\n")[0])
        out += [cmd, f"__rc=$?; if [ $__rc -ne {want} ]; then echo \"doctest: \\$ \"{first}"
                f"\" exited $__rc, not {want}\" >&2; exit 1; fi"]
    return "\n".join(out) + "\n"


def small_idx(src, dst, count):
    """Writes the first `count` items of the gzipped idx file src to dst."""
    with gzip.open(src, "rb") as f:
        head = f.read(4)
        ndim = head[3]
        dims = list(struct.unpack(">" + "I" * ndim, f.read(4 * ndim)))
        item = 1
        for d in dims[1:]:
            item *= d
        data = f.read(item * count)
    dims[0] = count
    with gzip.open(dst, "wb") as f:
        f.write(head + struct.pack(">" + "I" * ndim, *dims) + data)


def fixtures(scratch, sluice, fmnist):
    try:
        make_fixtures(scratch, sluice, fmnist)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"docs: cannot make the Fashion-MNIST fixtures in {scratch}: {e}")


def make_fixtures(scratch, sluice, fmnist):
    idx = os.path.join(scratch, ".idx")
    os.makedirs(idx)
    os.makedirs(os.path.join(scratch, "data"))
    for split, n in (("train", 1000), ("t10k", 200)):
        kinds = ("images-idx3", "labels-idx1")
        paths = []
        for k in kinds:
            name = f"{split}-{k}-ubyte.gz"
            src = os.path.join(fmnist, name)
            if not os.path.exists(src):
                sys.exit(f"docs: Fashion-MNIST is missing ({src}): install the Debian "
                         "package dataset-fashion-mnist (make deps)")
            small_idx(src, os.path.join(idx, name), n)
            paths.append(os.path.join(idx, name))
        outs = [[f"{split}.slr"], [f"data/{split}.slr"]]
        if split == "train":
            outs.append(["data/train.slr", "--shards", "4"])
        for out in outs:
            subprocess.run([sluice, "pack", "idx", "-q", "--records-per-chunk", "100",
                            *paths, "-o", *out],
                           cwd=scratch, check=True)


def run(cmd, cwd, env, stdin=None):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace")
        return 124, out + f"\n(timed out after {BLOCK_TIMEOUT} s)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("markdown")
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--sluice", required=True, help="the built sluice command")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--python-binding", default="",
                    help="folder holding the built sluice Python package (empty: not built)")
    ap.add_argument("--fmnist", default=os.environ.get(
        "SLUICE_FMNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--list", action="store_true", help="list the blocks, run nothing")
    a = ap.parse_args()

    src, build = os.path.abspath(a.source), os.path.abspath(a.build)
    sluice = os.path.abspath(a.sluice)
    md = os.path.join(src, a.markdown)
    name = a.markdown
    try:
        blocks = parse(md)
    except MarkerError as e:
        print(f"docs: {e}")
        return 2
    bad_links = check_links(md, src)
    if a.list:
        for b in blocks:
            print(f"{name}:{b.line} [{b.lang}] {sorted(b.marks)}")
        return 0

    scratch = tempfile.mkdtemp(prefix="sluice_docs.")
    env = dict(os.environ)
    env.update({
        "PATH": os.path.dirname(sluice) + os.pathsep + env.get("PATH", ""),
        "LUA_PATH": f"{src}/lua/?.lua;{src}/lua/?/init.lua;{build}/lua/?.lua;;",
        "SLUICE_SOURCE_DIR": src, "SLUICE_BUILD_DIR": build, "FMNIST": a.fmnist,
        "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C", "PYTHON": sys.executable,
    })
    if a.python_binding:
        env["PYTHONPATH"] = a.python_binding
    libdir = os.path.dirname(os.path.realpath(os.path.join(build, "libsluice.so")))
    counts = {"passed": 0, "failed": 0, "skipped": 0, "not built": 0, "listings": 0}
    failures = []
    prepared = False
    try:
        for n, b in enumerate(blocks, 1):
            where = f"{name}:{b.line}"
            if not b.lang:
                if any(t.startswith("$ ") for t in b.body.split("\n")):
                    counts["failed"] += 1
                    failures.append(f"{where}: a shell session in a block with no language: "
                                    "tag it ```console (its $ commands run) or mark it "
                                    "<!-- doctest: skip REASON -->")
                    continue
                counts["listings"] += 1
                continue
            if "skip" in b.marks:
                counts["skipped"] += 1
                print(f"skip   {where} [{b.lang}]: {b.marks['skip']}")
                continue
            lang = "sh" if b.lang == "bash" else b.lang
            if lang not in RUNNABLE and "file" in b.marks:
                lang = "file"  # any language: written for a `run` command (cmake, ...)
            elif lang not in RUNNABLE:
                counts["failed"] += 1
                failures.append(f"{where}: a ```{b.lang} block: no runner for that language; "
                                "mark it <!-- doctest: skip REASON --> or make it one of "
                                f"{', '.join(sorted(RUNNABLE))}")
                continue
            if "needs" in b.marks and lang != "python":
                counts["failed"] += 1
                failures.append(f"{where}: doctest: needs is for python blocks, not {b.lang}")
                continue
            py = sys.executable
            if lang == "python":
                if not a.python_binding:
                    counts["not built"] += 1
                    print(f"skip   {where} [python]: the Python binding was not built")
                    continue
                mod = b.marks.get("needs")
                py = sys.executable
                if mod:
                    py = python_with(mod, scratch, env)
                    if not py:
                        counts["not built"] += 1
                        print(f"skip   {where} [python]: needs {mod}, not installed "
                              f"(in {sys.executable} or {', '.join(OPTIONAL_VENVS)})")
                        continue
            if not prepared and lang not in ("json",) and "excerpt" not in b.marks:
                fixtures(scratch, sluice, a.fmnist)  # made once, when a block first runs
                prepared = True
            if "excerpt" in b.marks:
                bad = excerpt_mismatch(b.body, os.path.join(src, b.marks["excerpt"]))
                if bad:
                    counts["failed"] += 1
                    failures.append(f"{where}: [{b.lang}] not an excerpt of "
                                    f"{b.marks['excerpt']}: {bad}")
                else:
                    counts["passed"] += 1
                    print(f"pass   {where} [{b.lang}] (excerpt of {b.marks['excerpt']})")
                continue
            code = b.marks.get("prelude", "") + b.body + b.marks.get("after", "")
            fname = b.marks.get("file")
            steps = []
            if "setup" in b.marks:
                steps.append(["bash", "-euo", "pipefail", "-c", b.marks["setup"]])
            if lang == "console":
                code = (b.marks.get("prelude", "") + console_script(b.body)
                        + b.marks.get("after", ""))
            ext = {"lua": ".lua", "c": ".c", "sh": ".sh", "console": ".sh", "python": ".py",
                   "json": ".json", "file": ""}[lang]
            path = os.path.join(scratch, fname or f".block{n}{ext}")
            if lang == "json":
                try:
                    json.loads(code)
                except ValueError as e:
                    counts["failed"] += 1
                    failures.append(f"{where}: [json] does not parse: {e}")
                    continue
                if not fname and "run" not in b.marks:
                    counts["passed"] += 1
                    print(f"pass   {where} [json]")
                    continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(code)
            if lang == "c":
                exe = path[:-2]
                has_main = re.search(r"\bint\s+main\s*\(", code) is not None
                cflags = [a.cc, "-std=c11", "-Wall", "-Wextra", "-Werror",
                          "-Wno-unused-parameter", f"-I{src}/include"]
                if has_main:
                    steps.append(cflags + [path, "-o", exe, f"-L{libdir}", "-lsluice",
                                           f"-Wl,--disable-new-dtags,-rpath,{libdir}"])
                else:
                    steps.append(cflags + ["-c", path, "-o", exe + ".o"])
                default = [exe] if has_main and not fname else None
            else:
                default = {"lua": ["luajit", path], "sh": ["bash", "-euo", "pipefail", path],
                           "console": ["bash", path], "python": [py, path],
                           "file": None, "json": None}[lang]
                if fname:
                    default = None
            if "run" in b.marks:
                steps.append(["bash", "-euo", "pipefail", "-c", b.marks["run"]])
            elif default:
                steps.append(default)
            out_all, rc = "", 0
            for cmd in steps:
                rc, out = run(cmd, scratch, env)
                out_all += out
                if rc != 0:
                    break
            ok = rc == 0
            why = f"exit status {rc}"
            if ok and "stdout" in b.marks:
                want = "\n".join(" ".join(s.split())
                                 for s in b.marks["stdout"].strip("\n").split("\n"))
                got = "\n".join(" ".join(s.split()) for s in out.strip("\n").split("\n"))
                if want != got:
                    ok, why = False, f"stdout differs:\n--- expected\n{want}\n--- got\n{got}"
            if ok:
                counts["passed"] += 1
                print(f"pass   {where} [{b.lang}]")
            else:
                counts["failed"] += 1
                shown = " ".join(cmd) if len(" ".join(cmd)) < 300 else " ".join(cmd)[:300] + "..."
                tail = out_all[-3000:]
                failures.append(f"{where}: [{b.lang}] {why}\n  command: {shown}\n"
                                f"  (block written to {path}; rerun with --keep to keep it)\n"
                                + "".join("  | " + s + "\n" for s in tail.rstrip().split("\n")))
    finally:
        if a.keep:
            print(f"docs: scratch folder kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    for f in bad_links:
        failures.append(f"{name}:{f}")
    for f in failures:
        print("FAIL   " + f)
    total = len(blocks)
    print(f"docs: {name}: {total} blocks: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} marked skip, {counts['not built']} not runnable here "
          f"(binding or module missing), {counts['listings']} listings")
    print(f"docs: {name}: links and .md names: {len(bad_links)} broken")
    return 1 if counts["failed"] or bad_links else 0


if __name__ == "__main__":
    sys.exit(main())
