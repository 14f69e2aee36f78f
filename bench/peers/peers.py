#!/usr/bin/env python3
"""peers.py - the Fashion-MNIST epoch pipeline on one peer loader.

Run by bench/peers/run with the peers' virtual environment (bench/peers/setup);
not meant to be run by hand, though it can be:

    ~/.cache/sluice/peers-venv/bin/python bench/peers/peers.py \\
        --peer torch --data /usr/share/datasets/fashion-mnist --epochs 3

Every peer runs the pipeline sluice runs in bench/bench_lua.lua (fmnist):
read all 60 000 training records -> shuffle (10 000-record buffer where the
loader has one; a full permutation for the map-style loaders, which costs
them less) -> [per-sample normalisation: u8 [28, 28] -> f32 [784] / 255]
-> batch 128 (the last batch partial) -> prefetch, and the consumer counts
the samples of each batch.  The records come from the same idx files
`sluice pack idx` packs; they are loaded into memory before any timing
(sluice reads and decompresses its SLR file inside the timed epoch).

For each case: one untimed warm-up epoch, then --epochs timed epochs, each a
fresh iterator over the loader (what a training loop does per epoch).  One
JSON line per timed epoch on stdout:

    {"bench":"peer_epoch","impl":"torch","case":"dataloader_w2",
     "map":"norm","epoch":1,"samples":60000,"seconds":1.23,"cpu_s":2.1}

(cpu_s: the CPU seconds the epoch used in this process and its worker
processes, user + system: on a shared machine the cost per sample, apart
from the cores the loader happened to get.)

plus one {"bench":"peer_env",...} line with the library's version, and
{"bench":"peer_error",...} for a case that failed (the others still run).
Progress and library noise go to stderr.
"""
import argparse
import gzip
import json
import os
import resource
import sys
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

SHUFFLE = 10000
BATCH = 128
SEED = 42
PIXELS = 28 * 28


def emit(**kv):
    sys.stdout.write(json.dumps(kv, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def log(msg):
    sys.stderr.write("peers.py: %s\n" % msg)
    sys.stderr.flush()


def load_fmnist(data_dir, split="train"):
    """Images u8 [N, 28, 28] and labels i64 [N] from the idx .gz files."""
    def read(name, offset):
        path = os.path.join(data_dir, name)
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)
    x = read("%s-images-idx3-ubyte.gz" % split, 16).reshape(-1, 28, 28)
    y = read("%s-labels-idx1-ubyte.gz" % split, 8).astype(np.int64)
    assert len(x) == len(y)
    return np.ascontiguousarray(x), y


def cpu_seconds():
    """CPU seconds (user + system) used so far by this process (all its
    threads), its live descendant processes (DataLoader and Grain workers,
    read from /proc) and its reaped children."""
    me = os.getpid()
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        rest = st[st.rindex(")") + 2:].split()
        kids.setdefault(int(rest[1]), []).append(
            (int(d), int(rest[11]) + int(rest[12])))
    ticks, stack = 0, [me]
    while stack:
        for child, t in kids.get(stack.pop(), []):
            ticks += t
            stack.append(child)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (time.process_time() + ticks / os.sysconf("SC_CLK_TCK") +
            ru.ru_utime + ru.ru_stime)


def run_case(impl, case, mapname, make_epoch, epochs, expect):
    """make_epoch() iterates one epoch and returns the samples seen."""
    try:
        log("%s %s map=%s: warm-up" % (impl, case, mapname))
        n = make_epoch()
        if n != expect:
            raise RuntimeError("warm-up epoch saw %d samples, want %d"
                               % (n, expect))
        for e in range(1, epochs + 1):
            c0 = cpu_seconds()
            t0 = time.perf_counter()
            n = make_epoch()
            dt = time.perf_counter() - t0
            cpu = cpu_seconds() - c0
            if n != expect:
                raise RuntimeError("epoch %d saw %d samples, want %d"
                                   % (e, n, expect))
            emit(bench="peer_epoch", impl=impl, case=case, map=mapname,
                 epoch=e, samples=n, seconds=round(dt, 6),
                 cpu_s=round(cpu, 4))
            log("%s %s map=%s: %.0f samples/s" % (impl, case, mapname, n / dt))
    except Exception as exc:  # report, and let the other cases run
        traceback.print_exc()
        emit(bench="peer_error", impl=impl, case=case, map=mapname,
             error=("%s: %s" % (type(exc).__name__, exc))[:300])


# --- PyTorch ---------------------------------------------------------------

def peer_torch(x, y, args):
    import torch
    from torch.utils.data import DataLoader, Dataset
    emit(bench="peer_env", impl="torch", version=torch.__version__,
         threads=torch.get_num_threads())
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    class Records(Dataset):
        """The records held in memory as a map-style dataset."""
        def __init__(self, norm):
            self.norm = norm

        def __len__(self):
            return len(ty)

        def __getitem__(self, i):
            img = tx[i]
            if self.norm:
                img = img.reshape(PIXELS).to(torch.float32).div_(255.0)
            return img, ty[i]

    for workers in (0, 2):
        for norm in (False, True):
            g = torch.Generator()
            g.manual_seed(SEED)
            dl = DataLoader(Records(norm), batch_size=BATCH, shuffle=True,
                            num_workers=workers, generator=g,
                            persistent_workers=workers > 0,
                            prefetch_factor=4 if workers else None)

            def epoch(dl=dl):
                n = 0
                for _img, lbl in dl:
                    n += lbl.shape[0]
                return n
            run_case("torch", "dataloader_w%d" % workers,
                     "norm" if norm else "none", epoch, args.epochs, len(y))
            del dl


# --- TensorFlow ------------------------------------------------------------

def tfrecord_path(x, y, work, tf):
    """The records written once as a TFRecord file of tf.train.Example
    {image: bytes (784), label: int64}, uncompressed."""
    path = os.path.join(work, "fmnist-train.tfrecord")
    if os.path.exists(path) and os.path.getsize(path) > 0:
        return path
    os.makedirs(work, exist_ok=True)
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with tf.io.TFRecordWriter(tmp) as w:
        for img, lbl in zip(x, y):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[int(lbl)])),
            }))
            w.write(ex.SerializeToString())
    os.replace(tmp, path)
    return path


def peer_tf(x, y, args):
    import tensorflow as tf
    emit(bench="peer_env", impl="tf", version=tf.__version__)
    AUTO = tf.data.AUTOTUNE
    path = tfrecord_path(x, y, args.work, tf)
    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(rec):
        ex = tf.io.parse_single_example(rec, spec)
        img = tf.reshape(tf.io.decode_raw(ex["image"], tf.uint8), [28, 28])
        return img, ex["label"]

    def norm(img, lbl):
        return tf.reshape(tf.cast(img, tf.float32) / 255.0, [PIXELS]), lbl

    def parse_batch(recs):
        ex = tf.io.parse_example(recs, spec)
        img = tf.reshape(tf.io.decode_raw(ex["image"], tf.uint8), [-1, 28, 28])
        return img, ex["label"]

    def norm_batch(img, lbl):
        return tf.reshape(tf.cast(img, tf.float32) / 255.0, [-1, PIXELS]), lbl

    def tfrecord(use_norm):
        ds = tf.data.TFRecordDataset(path).map(parse, num_parallel_calls=AUTO)
        ds = ds.shuffle(SHUFFLE, seed=SEED)
        if use_norm:
            ds = ds.map(norm, num_parallel_calls=AUTO)
        return ds.batch(BATCH)

    def tfrecord_vectorized(use_norm):
        # The tf.data guide's "vectorized mapping": shuffle the serialized
        # records, batch them, parse (and normalise) whole batches.
        ds = tf.data.TFRecordDataset(path).shuffle(SHUFFLE, seed=SEED)
        ds = ds.batch(BATCH).map(parse_batch, num_parallel_calls=AUTO)
        if use_norm:
            ds = ds.map(norm_batch, num_parallel_calls=AUTO)
        return ds

    def slices(use_norm):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(SHUFFLE,
                                                                seed=SEED)
        if use_norm:
            ds = ds.map(norm, num_parallel_calls=AUTO)
        return ds.batch(BATCH)

    for case, source in (("tfrecord", tfrecord),
                         ("tfrecord_vectorized", tfrecord_vectorized),
                         ("from_tensor_slices", slices)):
        for use_norm in (False, True):
            ds = source(use_norm).prefetch(AUTO)

            def epoch(ds=ds):
                n = 0
                for _img, lbl in ds:
                    n += lbl.shape[0]
                return n
            mapname = "norm" if use_norm else "none"
            if use_norm and case == "tfrecord_vectorized":
                mapname = "norm_batch"  # normalised batch by batch
            run_case("tf", case, mapname, epoch, args.epochs, len(y))


# --- PaddlePaddle ----------------------------------------------------------

def peer_paddle(x, y, args):
    import paddle
    from paddle.io import DataLoader, Dataset
    paddle.set_device("cpu")
    emit(bench="peer_env", impl="paddle", version=paddle.__version__)

    class Records(Dataset):
        def __init__(self, norm):
            super().__init__()
            self.norm = norm

        def __len__(self):
            return len(y)

        def __getitem__(self, i):
            img = x[i]
            if self.norm:
                img = img.reshape(PIXELS).astype(np.float32) / np.float32(255)
            return img, y[i]

    for workers in (0, 2):
        for norm in (False, True):
            dl = DataLoader(Records(norm), batch_size=BATCH, shuffle=True,
                            num_workers=workers, return_list=True,
                            persistent_workers=workers > 0)

            def epoch(dl=dl):
                n = 0
                for _img, lbl in dl:
                    n += lbl.shape[0]
                return n
            run_case("paddle", "dataloader_w%d" % workers,
                     "norm" if norm else "none", epoch, args.epochs, len(y))
            del dl


# --- Grain -----------------------------------------------------------------

class GrainRecords:
    """A random-access source over the in-memory records (module level, so
    Grain's worker processes can unpickle it)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"image": self.x[i], "label": self.y[i]}


def grain_norm(r):
    return {"image": r["image"].reshape(PIXELS).astype(np.float32)
            / np.float32(255), "label": r["label"]}


def peer_grain(x, y, args):
    import grain
    emit(bench="peer_env", impl="grain",
         version=getattr(grain, "__version__", "?"))
    for workers in (0, 2):
        for use_norm in (False, True):
            def make(use_norm=use_norm, workers=workers):
                ds = grain.MapDataset.source(GrainRecords(x, y)).shuffle(
                    seed=SEED)
                if use_norm:
                    ds = ds.map(grain_norm)
                ds = ds.batch(BATCH).to_iter_dataset()
                if workers:
                    ds = ds.mp_prefetch(
                        grain.MultiprocessingOptions(num_workers=workers))
                return ds

            ds = make()

            def epoch(ds=ds):
                n = 0
                for b in ds:
                    n += b["label"].shape[0]
                return n
            run_case("grain", "dataset_w%d" % workers,
                     "norm" if use_norm else "none", epoch, args.epochs,
                     len(y))


PEERS = {"torch": peer_torch, "tf": peer_tf, "paddle": peer_paddle,
         "grain": peer_grain}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer", required=True, choices=sorted(PEERS))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--work", default="/tmp/sluice-peers",
                    help="where the TFRecord copy of the records is kept")
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    x, y = load_fmnist(args.data)
    try:
        PEERS[args.peer](x, y, args)
    except Exception as exc:
        traceback.print_exc()
        emit(bench="peer_error", impl=args.peer, case="*", map="*",
             error=("%s: %s" % (type(exc).__name__, exc))[:300])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
