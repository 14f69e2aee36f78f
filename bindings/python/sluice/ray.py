"""sluice.ray: a sluice pipeline script as a Ray Data source
(docs/SCALING.md, docs/PYTHON.md "Ray Data").

    import ray, sluice.ray
    ds = sluice.ray.read("pipeline.lua", "data/train-*.slr",
                         parallelism=8, epoch=3, seed=1234)
    for trainer_shard in ds.streaming_split(2):   # or ds.iter_batches()
        ...

read() returns a ray.data.Dataset with `parallelism` read tasks (Ray
Data's Datasource / ReadTask interface).  Read task i runs the script with
rank i and world `parallelism` - the RANK and WORLD_SIZE a launcher would
set, so the script's sharded sources (open_files, open of shards) read
rank i's share of the one sharded epoch plan (docs/DATA.md) - and yields
one Ray block per sluice batch: a dict of numpy arrays (format="numpy") or
a pyarrow Table made from the batch's __arrow_c_array__ (format="arrow").
`epoch` and `seed` reach the script as the environment's SLUICE_EPOCH and
SLUICE_SEED while it runs (`tonumber(os.getenv "SLUICE_EPOCH")`), so a
script that passes them to its shuffle reshuffles each epoch the same way
on every run.

Importing this module imports ray; `import sluice` alone does not.  The
workers must be able to import sluice (the same package, installed or on
PYTHONPATH) and, for a script given by path, read that path.
"""
import os

import ray
import ray.data
from ray.data.block import BlockAccessor, BlockMetadata
from ray.data.datasource import Datasource, ReadTask

import sluice
from sluice.columns import columns

FORMATS = ("numpy", "arrow")


def _check_int(what, v, low):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("sluice.ray.read: %s must be an int (got %r)"
                        % (what, v))
    if v < low:
        raise ValueError("sluice.ray.read: %s must be >= %d (got %d)"
                         % (what, low, v))
    return v


def _numpy_block(batch):
    """A sluice batch as the Ray block of {name: numpy array}
    (BlockAccessor.batch_to_block: an Arrow table, arrays of more than one
    dimension as Ray's tensor columns): fixed-shape fields from views of
    the batch, ragged ones (LoD) as object arrays of one entry per sample
    (sluice.columns: bytes, str for __key__/__url__, or arrays)."""
    import numpy as np
    out = {}
    for name, value in columns(batch, np.asarray).items():
        if isinstance(value, list):
            arr = np.empty(len(value), dtype=object)
            arr[:] = value
            value = arr
        elif isinstance(value, (bytes, str)):
            arr = np.empty(1, dtype=object)
            arr[0] = value
            value = arr
        out[name] = value
    return BlockAccessor.batch_to_block(out)


def _arrow_block(batch):
    """A sluice batch as a one-batch pyarrow Table (sl_sample_to_arrow
    through __arrow_c_array__: no copy until Ray stores it)."""
    import pyarrow as pa
    return pa.Table.from_batches([pa.record_batch(batch)])


class ReadTaskError(RuntimeError):
    """A sluice error inside a Ray read task, raised there so that it
    reaches the driver (inside Ray's RayTaskError) as plain text: which
    part (rank/world, epoch), the sluice error class and its message,
    which for a Lua error holds the Lua traceback."""


def _read_part(script, code, args, rank, world, epoch, seed, fmt, name):
    """The body of read task `rank`: open the script as rank/world of the
    plan with SLUICE_EPOCH/SLUICE_SEED set, then one block per batch."""
    where = "sluice.ray: read task %d of %d (%s, epoch %d)" % (
        rank, world, name, epoch)
    env = {"SLUICE_EPOCH": str(epoch)}
    if seed is not None:
        env["SLUICE_SEED"] = str(seed)
    to_block = _arrow_block if fmt == "arrow" else _numpy_block
    try:
        if code is not None:
            p = sluice._as_launcher(sluice._sluice.open_string, rank, world,
                                    code, *args, env=env, name=name)
        else:
            p = sluice._as_launcher(sluice._sluice.open_script, rank, world,
                                    script, *args, env=env)
        # the default memory budget, as sluice.open_script gives it
        p = sluice._budgeted(p, None)
    except sluice.Error as e:
        raise ReadTaskError("%s: opening failed: %s: %s"
                            % (where, type(e).__name__, e)) from None
    try:
        while True:
            try:
                batch = next(p)
            except StopIteration:
                return
            except sluice.Error as e:
                raise ReadTaskError("%s: %s: %s"
                                    % (where, type(e).__name__, e)) from None
            yield to_block(batch)
            del batch
    finally:
        p.close()


class SluiceDatasource(Datasource):
    """The Ray Data Datasource behind read(): `parallelism` read tasks, task
    i the script as rank i of world `parallelism` (whatever parallelism
    Ray asks get_read_tasks for: the world is fixed here, since it decides
    the shares)."""

    def __init__(self, script=None, *args, code=None, parallelism=1,
                 epoch=0, seed=None, format="numpy", name=None):
        if (script is None) == (code is None):
            raise TypeError("sluice.ray.read: give a script path or code= "
                            "(Lua source), not both")
        if format not in FORMATS:
            raise ValueError("sluice.ray.read: format must be one of %s "
                             "(got %r)" % (", ".join(FORMATS), format))
        self.script = None if script is None else os.path.abspath(
            os.fspath(script))
        self.code = code
        self.args = tuple(str(a) for a in args)
        self.world = _check_int("parallelism", parallelism, 1)
        self.epoch = _check_int("epoch", epoch, 0)
        self.seed = None if seed is None else _check_int("seed", seed, 0)
        self.format = format
        self.name = name or (os.path.basename(self.script) if script
                             is not None else "=sluice.ray")

    def get_name(self):
        return "Sluice"

    def estimate_inmemory_data_size(self):
        return None

    def get_read_tasks(self, parallelism, per_task_row_limit=None,
                       data_context=None):
        tasks = []
        for rank in range(self.world):
            params = (self.script, self.code, self.args, rank, self.world,
                      self.epoch, self.seed, self.format, self.name)
            meta = BlockMetadata(num_rows=None, size_bytes=None,
                                 exec_stats=None, input_files=None)
            tasks.append(ReadTask(lambda p=params: _read_part(*p), meta))
        return tasks


def read(script=None, *args, code=None, parallelism=None, epoch=0,
         seed=None, format="numpy", name=None, block_bytes=None, **read_kw):
    """A ray.data.Dataset over the pipeline script `script` (a path; or Lua
    source as code=) run as `parallelism` read tasks (default: the
    cluster's CPUs), task i with rank i, world `parallelism`, and `args`
    as its `...` (each str()).  The script must batch (its last stage a
    batch: every field's first dimension is the rows of the block).  Every
    sample of the epoch is read once
    when the script's sharded source splits it exactly (open_files or
    open of shards with remainder = "uneven"; the default "pad" repeats a
    few so that every rank gets as many: docs/DATA.md).

    epoch, seed: SLUICE_EPOCH and SLUICE_SEED in the environment while the
    script runs (seed only when given).  format: "numpy" (blocks of numpy
    arrays; ragged fields as object arrays of one entry per sample) or
    "arrow" (pyarrow Tables, sluice's Arrow export).  block_bytes: Ray
    Data gathers a read task's batches into blocks of about this many bytes
    before it hands them on (this Dataset's DataContext
    target_max_block_size; default Ray's, 128 MiB): smaller blocks reach
    the trainers sooner.  The other keywords
    go to ray.data.read_datasource (num_cpus=, concurrency=, ...).  A
    sluice error fails the read task (Ray Data retries it only as its
    DataContext's max_map_retries says, 1 attempt by default) and reaches
    the driver with the Lua traceback; a lost worker or node makes Ray
    re-run the task, its part from the start: docs/SCALING.md says what
    that means for exactly-once."""
    if parallelism is None:
        if not ray.is_initialized():
            ray.init()
        parallelism = max(1, int(ray.cluster_resources().get("CPU", 1)))
    ds = SluiceDatasource(script, *args, code=code, parallelism=parallelism,
                          epoch=epoch, seed=seed, format=format, name=name)
    out = ray.data.read_datasource(ds, override_num_blocks=ds.world,
                                   **read_kw)
    if block_bytes is not None:
        # The Dataset's own copy of the DataContext (read_datasource copied
        # the current one), which planning its read reads.
        out.context.target_max_block_size = _check_int(
            "block_bytes", block_bytes, 1)
    return out
