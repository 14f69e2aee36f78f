"""sluice.ray on a real local Ray cluster (run by test_ray.py in the venv
that setup_ray makes, with this build's sluice on PYTHONPATH).

The cluster is two node processes on loopback: `ray start --head
--num-cpus=1` and `ray start --address=...` (a second raylet, one CPU),
stopped with `ray stop --force` at the end, also on failure.  The data:
Fashion-MNIST's t10k (10,000 samples) packed by the sluice CLI as 4 SLR
shards, and written by tarfile as 4 WebDataset shards (the CLI writes
WebDataset only from image folders).
"""
import collections
import gzip
import hashlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import threading
import time

import numpy as np
import pytest
import ray

import sluice
import sluice.ray

FMNIST = os.environ.get("SLUICE_FMNIST", "/usr/share/datasets/fashion-mnist")
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
SHARDS = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cmd(args, env):
    r = subprocess.run([RAY] + args, env=env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, "ray %s failed:\n%s\n%s" % (
        " ".join(args), r.stdout[-3000:], r.stderr[-3000:])


@pytest.fixture(scope="module")
def cluster():
    """A head node and a second node process, one CPU each, on 127.0.0.1;
    this process its driver.  The workers inherit the environment the
    nodes start with: PYTHONPATH (this build's sluice) and LUA_PATH."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled",
               RAY_USAGE_STATS_ENABLED="0")
    port = free_port()
    temp = tempfile.mkdtemp(prefix="slray", dir="/tmp")
    store = str(100 * 2**20)
    common = ["--num-cpus=1", "--node-ip-address=127.0.0.1",
              "--object-store-memory=" + store, "--disable-usage-stats"]
    try:
        ray_cmd(["start", "--head", "--port=%d" % port,
                 "--include-dashboard=false", "--temp-dir=" + temp,
                 "--dashboard-agent-listen-port=%d" % free_port()]
                + common, env)
        ray_cmd(["start", "--address=127.0.0.1:%d" % port,
                 "--dashboard-agent-listen-port=%d" % free_port()]
                + common, env)
        os.environ["RAY_AUTH_MODE"] = "disabled"
        ray.init(address="127.0.0.1:%d" % port, log_to_driver=False)
        deadline = time.time() + 60
        while sum(n["Alive"] for n in ray.nodes()) < 2:
            assert time.time() < deadline, "the second node never joined"
            time.sleep(0.5)
        yield port
    finally:
        try:
            ray.shutdown()
        finally:
            subprocess.run([RAY, "stop", "--force"], env=env,
                           capture_output=True, timeout=120)
            shutil.rmtree(temp, ignore_errors=True)  # the session's logs


def idx_samples():
    """t10k as [(image bytes, label)], read straight from the idx files."""
    with gzip.open(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")) as f:
        images = f.read()[16:]
    with gzip.open(os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = f.read()[8:]
    return [(images[i * 784:(i + 1) * 784], labels[i])
            for i in range(len(labels))]


def ident(image, label):
    return hashlib.sha1(bytes(image)).hexdigest()[:16] + ":%d" % int(label)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """{"slr": pattern, "wds": pattern, "expected": Counter of idents}."""
    d = tmp_path_factory.mktemp("fmnist")
    cli = os.environ["SLUICE_CLI"]
    subprocess.run([cli, "pack", "idx", "-q",
                    os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz"),
                    os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz"),
                    "-o", str(d / "fm.slr"), "--shards", str(SHARDS),
                    "--records-per-chunk", "250"], check=True)
    samples = idx_samples()
    per = len(samples) // SHARDS
    for k in range(SHARDS):
        with tarfile.open(str(d / ("fm-%d.tar" % k)), "w",
                          format=tarfile.USTAR_FORMAT) as tar:
            for i in range(k * per, (k + 1) * per):
                image, label = samples[i]
                for ext, blob in (("img", image), ("cls", b"%d" % label)):
                    info = tarfile.TarInfo("%06d.%s" % (i, ext))
                    info.size = len(blob)
                    tar.addfile(info, io.BytesIO(blob))
    return {"slr": str(d / ("fm-*-of-%05d.slr" % SHARDS)),
            "wds": str(d / ("fm-{0..%d}.tar" % (SHARDS - 1))),
            "expected": collections.Counter(ident(*s) for s in samples),
            "dir": str(d)}


# SLUICE_EPOCH and SLUICE_SEED (sluice.ray.read's epoch= and seed=) into
# the shuffle; remainder "uneven": the ranks' shares cover the epoch exactly.
SLR_SCRIPT = """\
local sluice = require "sluice"
local pattern, extra = ...
local epoch = tonumber(os.getenv("SLUICE_EPOCH"))
local seed = tonumber(os.getenv("SLUICE_SEED") or "1")
local p = sluice.open_files{pattern, shuffle = true, seed = seed,
                            epoch = epoch, window = 4, threads = 1,
                            shard = {remainder = "uneven"}}
%s
return p:batch(100)
"""

# WebDataset shards: sl_wds_open has no epoch option, so the epoch goes
# into the seed.
WDS_SCRIPT = """\
local sluice = require "sluice"
local pattern = ...
local epoch = tonumber(os.getenv("SLUICE_EPOCH"))
local seed = tonumber(os.getenv("SLUICE_SEED") or "1")
return sluice.open(pattern, {shuffle = true, seed = seed * 1000 + epoch,
                             fields = {"image=img", "label=cls"},
                             shard = {remainder = "uneven"}})
  :batch(100, {lod = true})
"""


def write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


def consume_split(ds, k=2):
    """Each of ds.streaming_split(k) consumed by its own thread (as k
    trainers would); returns k lists of idents, in the order read."""
    its = ds.streaming_split(k, equal=False)
    out = [[] for _ in range(k)]
    errors = []

    def trainer(i):
        try:
            for b in its[i].iter_batches(batch_size=None):
                images, labels = b["image"], b["label"]
                out[i].extend(ident(images[j], labels[j])
                              for j in range(len(labels)))
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)
    threads = [threading.Thread(target=trainer, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    if errors:
        raise errors[0]
    return out


def test_slr_two_trainers_read_every_sample_once(cluster, data):
    script = write(data["dir"], "slr.lua", SLR_SCRIPT % "")
    ds = sluice.ray.read(script, data["slr"], parallelism=4, epoch=0, seed=7,
                         block_bytes=256 * 1024)
    parts = consume_split(ds, 2)
    assert all(parts), [len(p) for p in parts]
    assert collections.Counter(parts[0] + parts[1]) == data["expected"]


def test_wds_two_trainers_read_every_sample_once(cluster, data):
    script = write(data["dir"], "wds.lua", WDS_SCRIPT)
    ds = sluice.ray.read(script, data["wds"], parallelism=3, epoch=1, seed=7)
    parts = consume_split(ds, 2)
    assert all(parts), [len(p) for p in parts]
    assert collections.Counter(parts[0] + parts[1]) == data["expected"]


def test_same_seed_same_order_and_epochs_reshuffle(cluster, data):
    ctx = ray.data.DataContext.get_current()
    saved = ctx.execution_options.preserve_order
    ctx.execution_options.preserve_order = True
    try:
        script = write(data["dir"], "slr.lua", SLR_SCRIPT % "")
        runs = [consume_split(sluice.ray.read(
            script, data["slr"], parallelism=4, epoch=e, seed=7,
            block_bytes=256 * 1024), 2) for e in (0, 0, 1)]
    finally:
        ctx.execution_options.preserve_order = saved
    assert runs[0] == runs[1]          # per trainer, in order
    assert runs[0] != runs[2]          # epoch 1 is another shuffle
    for run in runs:
        assert collections.Counter(run[0] + run[1]) == data["expected"]


def test_arrow_format_and_schema(cluster, data):
    script = write(data["dir"], "slr.lua", SLR_SCRIPT % "")
    ds = sluice.ray.read(script, data["slr"], parallelism=2, seed=3,
                         format="arrow")
    names = ds.schema().names
    assert names == ["image", "label"], names
    total = collections.Counter()
    for t in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        images = t.column("image").combine_chunks().flatten().flatten()
        raw = np.asarray(images).reshape(-1, 784)
        labels = t.column("label").to_numpy()
        total.update(ident(raw[j], labels[j]) for j in range(len(labels)))
    assert total == data["expected"]


def test_torch_batches(cluster, data):
    torch = pytest.importorskip("torch")
    script = write(data["dir"], "slr.lua", SLR_SCRIPT % "")
    ds = sluice.ray.read(script, data["slr"], parallelism=2, seed=3)
    n = 0
    for b in ds.iter_torch_batches(batch_size=100):
        assert b["image"].dtype == torch.uint8
        assert tuple(b["image"].shape[1:]) == (28, 28)
        assert b["label"].dtype == torch.int64
        n += len(b["label"])
    assert n == 10000


def test_lua_error_reaches_the_driver_with_its_traceback(cluster, data):
    script = write(data["dir"], "failing.lua", SLR_SCRIPT % """\
local n = 0
p = p:map(function(s)
  n = n + 1
  if n == 321 then error("bad sample in a read task") end
  return s
end)""")
    ds = sluice.ray.read(script, data["slr"], parallelism=2, seed=3)
    with pytest.raises(Exception) as info:
        ds.materialize()
    msg = str(info.value)
    assert "bad sample in a read task" in msg, msg
    assert "failing.lua:" in msg, msg            # the script's line
    assert "traceback" in msg, msg               # Lua's traceback
    assert "sluice.ray: read task" in msg, msg   # which part failed


def test_script_error_at_open_reaches_the_driver(cluster, data):
    ds = sluice.ray.read(code='error("no such split")', parallelism=2)
    with pytest.raises(Exception) as info:
        ds.materialize()
    msg = str(info.value)
    assert "no such split" in msg and "opening failed" in msg, msg


def test_damaged_shard_and_missing_script_reach_the_driver(cluster, data):
    """A shard cut short (its index lost) fails the read tasks at open, and
    a script path no node can read fails them too; each names what and
    where."""
    import glob
    bad = tempfile.mkdtemp(prefix="bad", dir=data["dir"])
    for path in sorted(glob.glob(data["slr"])):
        shutil.copy(path, bad)
    victim = sorted(glob.glob(os.path.join(bad, "*.slr")))[1]
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 2)
    script = write(data["dir"], "slr.lua", SLR_SCRIPT % "")
    ds = sluice.ray.read(script, os.path.join(bad, "fm-*.slr"),
                         parallelism=2, seed=3)
    with pytest.raises(Exception) as info:
        ds.materialize()
    msg = str(info.value)
    assert "opening failed" in msg and os.path.basename(victim) in msg, msg
    ds = sluice.ray.read(os.path.join(bad, "no-such.lua"), parallelism=2)
    with pytest.raises(Exception) as info:
        ds.materialize()
    msg = str(info.value)
    assert "no-such.lua" in msg and "opening failed: EIO" in msg, msg


def test_bad_arguments_are_refused_before_ray_runs():
    with pytest.raises(TypeError):
        sluice.ray.read("x.lua", code="return 1", parallelism=1)
    with pytest.raises(ValueError):
        sluice.ray.read("x.lua", parallelism=0)
    with pytest.raises(ValueError):
        sluice.ray.read("x.lua", parallelism=1, format="pandas")
    with pytest.raises(TypeError):
        sluice.ray.read("x.lua", parallelism=1, epoch=1.5)
    with pytest.raises(TypeError):
        sluice.ray.read("x.lua", parallelism=True)
    with pytest.raises(ValueError):
        sluice.ray.read("x.lua", parallelism=1, seed=-1)
    with pytest.raises(TypeError):
        sluice.ray.read(parallelism=1)


# Rank 0 writes its worker's pid once (its first attempt) and a line per
# attempt; every sample takes ~2 ms, so the kill lands mid-epoch.
KILL_EXTRA = """\
local rank = sluice.shard_env()
if rank == 0 then
  local log = assert(io.open(extra .. "/rank0.opens", "a"))
  log:write("open\\n")
  log:close()
  local marker = extra .. "/rank0.pid"
  local f = io.open(marker, "r")
  if f then f:close() else
    local ffi = require "ffi"
    ffi.cdef "int getpid(void);"
    f = assert(io.open(marker .. ".tmp", "w"))
    f:write(tostring(ffi.C.getpid()))
    f:close()
    os.rename(marker .. ".tmp", marker)
  end
end
p = p:map(function(s)
  local ffi = require "ffi"
  if not pcall(function() return ffi.C.usleep end) then
    ffi.cdef "int usleep(unsigned int usec);"
  end
  ffi.C.usleep(2000)
  return s
end)"""


def test_read_task_killed_mid_epoch_still_gives_every_sample(cluster, data):
    marker_dir = tempfile.mkdtemp(prefix="kill", dir=data["dir"])
    script = write(data["dir"], "slow.lua", SLR_SCRIPT % KILL_EXTRA)
    ds = sluice.ray.read(script, data["slr"], marker_dir, parallelism=2,
                         seed=5, block_bytes=256 * 1024)
    seen = []
    killed = None
    marker = os.path.join(marker_dir, "rank0.pid")
    for b in ds.iter_batches(batch_size=None):
        labels = b["label"]
        seen.extend(ident(b["image"][j], labels[j])
                    for j in range(len(labels)))
        if killed is None and os.path.exists(marker) and len(seen) >= 200:
            killed = int(open(marker).read())
            os.kill(killed, signal.SIGKILL)
    assert killed is not None, "rank 0's worker was never seen"
    with open(os.path.join(marker_dir, "rank0.opens")) as f:
        attempts = len(f.readlines())
    assert attempts == 2, "rank 0 ran %d times, not 2 (a retry)" % attempts
    got = collections.Counter(seen)
    assert set(got) == set(data["expected"])            # nothing lost
    repeats = sum(got.values()) - sum(data["expected"].values())
    print("killed worker %d mid-epoch: %d samples delivered twice"
          % (killed, repeats))
    # Ray re-runs the killed task's part from its start and drops the
    # blocks of the re-run that it had already received (a streaming
    # generator's replay): with sluice's ordered, seeded plan the re-run
    # yields the same blocks, so nothing repeats.
    assert got == data["expected"]
