#!/usr/bin/env python3
"""binding.py - the Fashion-MNIST epoch pipeline consumed from Python
through the sluice binding, and the same script consumed by C (`sluice
run`), for bench/peers/run (issue 16's benchmark; docs/PERFORMANCE.md).

    python bench/peers/binding.py --build build --slr build/data/train.slr
        [--epochs E]

The pipeline is bench/peers/fmnist_pipeline.lua (bench_lua.lua's fmnist
pipeline as a script): open -> shuffle(10000) -> [per-sample Lua
normalisation, 2 threads] -> batch(128) -> prefetch(4).

  binding  sluice.open_script(...) in this process; for each batch the
           consumer takes both fields as torch tensors (torch.from_dlpack,
           zero-copy) when torch imports, else as numpy arrays, and counts
           the samples: what a DataLoader's consumer gets;
  c_run    `<build>/tools/sluice run --epochs E+1` on the same script: the
           C consumer (sl_pipeline_next), its per-epoch samples/s.

One untimed warm-up epoch per case, then E timed epochs, each a new pass
(`for batch in p`).  Output: the peer_epoch JSON lines of peers.py
(impl "binding" or "c_run"), cpu_s for the binding only (this process,
all threads: sluice's included).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "fmnist_pipeline.lua")
CASES = [("no_map", "none", "none"), ("lua_map_t2", "norm", "norm_t2")]


def emit(**kv):
    sys.stdout.write(json.dumps(kv, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def consumer():
    """(name, function batch -> samples): torch tensors if torch imports."""
    try:
        import torch
        from_dlpack = torch.from_dlpack

        def take(b):
            from_dlpack(b["image"])
            return from_dlpack(b["label"]).shape[0]
        return "torch.from_dlpack", take
    except ImportError:
        import numpy as np

        def take(b):
            np.asarray(b["image"])
            return np.asarray(b["label"]).shape[0]
        return "numpy.asarray", take


def bench_binding(slr, epochs):
    import sluice
    how, take = consumer()
    emit(bench="peer_env", impl="binding", version=sluice.__version__,
         consumer=how)
    for case, mapname, arg in CASES:
        with sluice.open_script(SCRIPT, slr, arg) as p:
            for e in range(epochs + 1):
                c0 = time.process_time()
                t0 = time.perf_counter()
                n = 0
                for b in p:
                    n += take(b)
                dt = time.perf_counter() - t0
                cpu = time.process_time() - c0
                if e == 0:
                    continue  # warm-up
                emit(bench="peer_epoch", impl="binding", case=case,
                     map=mapname, epoch=e, samples=n, seconds=round(dt, 6),
                     cpu_s=round(cpu, 4))


def bench_c(build, slr, epochs):
    cli = os.path.join(build, "tools", "sluice")
    for case, mapname, arg in CASES:
        p = subprocess.run([cli, "run", "--epochs", str(epochs + 1), SCRIPT,
                            slr, arg], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if p.returncode:
            emit(bench="peer_error", impl="c_run", case=case, map=mapname,
                 error=p.stdout.strip()[-6000:])
            continue
        pat = re.compile(r"^epoch (\d+): \d+ batches, (\d+) samples in "
                         r"([0-9.]+) s")
        for line in p.stdout.splitlines():
            m = pat.match(line)
            if m and int(m.group(1)) > 1:  # epoch 1: warm-up
                emit(bench="peer_epoch", impl="c_run", case=case,
                     map=mapname, epoch=int(m.group(1)) - 1,
                     samples=int(m.group(2)), seconds=float(m.group(3)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--slr", required=True)
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args()
    bench_c(a.build, a.slr, a.epochs)
    bench_binding(a.slr, a.epochs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
