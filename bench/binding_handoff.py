#!/usr/bin/env python3
"""binding_handoff.py - the Python binding's cost per batch on a chain whose
batches are always ready (docs/PERFORMANCE.md, "The puller reads one batch
ahead"): range(1280000):batch(128):prefetch(8), 10 000 batches a pass,
consumed with a bare `for b in p` loop, so the hand-off to the puller
thread is most of what a batch costs.

    python3 bench/binding_handoff.py BINDING_DIR [BINDING_DIR ...] [--runs N]

Each BINDING_DIR is a built binding (<build>/bindings/python, or a copy of
one built otherwise, to compare two); they run in interleaved processes,
N each (default 4).  Per process: 4 passes, the first a warm-up, the median
of the rest.  Prints one JSON line per process and a median per directory:
wall and CPU µs per batch.  LUA_PATH must find the source's lua/ and the
build's generated lua/ (as for bench/peers/binding.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent("""\
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    import sluice
    res = []
    with sluice.open_script(sys.argv[2]) as p:
        for e in range(4):
            t0, c0, n = time.perf_counter(), time.process_time(), 0
            for b in p:
                n += 1
            res.append(((time.perf_counter() - t0) / n * 1e6,
                        (time.process_time() - c0) / n * 1e6))
    res = res[1:]
    print(json.dumps({"bench": "binding_handoff", "binding": sys.argv[1],
                      "wall_us_per_batch": statistics.median(r[0] for r in res),
                      "cpu_us_per_batch": statistics.median(r[1] for r in res)}))
    """).replace("import json, sys, time", "import json, statistics, sys, time")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bindings", nargs="+", help="built binding folders")
    ap.add_argument("--runs", type=int, default=4)
    a = ap.parse_args()
    for d in a.bindings:
        if not os.path.isdir(os.path.join(d, "sluice")):
            sys.exit("binding_handoff: %s: no sluice package there" % d)
    with tempfile.TemporaryDirectory() as t:
        script = os.path.join(t, "range.lua")
        with open(script, "w") as f:
            f.write('return require("sluice").range(1280000):batch(128)'
                    ':prefetch(8)\n')
        got = {d: [] for d in a.bindings}
        for _ in range(a.runs):
            for d in a.bindings:
                out = subprocess.run([sys.executable, "-c", CHILD, d, script],
                                     check=True, capture_output=True,
                                     text=True).stdout
                o = json.loads(out.strip().splitlines()[-1])
                print(json.dumps(o))
                got[d].append(o)
    for d, os_ in got.items():
        sys.stderr.write("%s: median %.1f us wall, %.1f us CPU per batch "
                         "(%d runs)\n" % (
                             d, statistics.median(o["wall_us_per_batch"]
                                                  for o in os_),
                             statistics.median(o["cpu_us_per_batch"]
                                               for o in os_), len(os_)))


if __name__ == "__main__":
    main()
