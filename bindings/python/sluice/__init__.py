"""sluice: ML input pipelines declared in Lua, run on sluice's own threads,
pulled from Python without a copy (docs/PYTHON.md).

    import sluice, numpy as np
    with sluice.open_script("examples/fashion_mnist.lua", "train", "data") as p:
        for batch in p:                      # one pass (epoch)
            x = np.asarray(batch["image"])   # zero-copy, read-only
            y = np.from_dlpack(batch["label"])

The C extension (sluice._sluice) holds the types; this file finds the Lua
facade shipped with the package and registers Batch as a Mapping.
"""
import collections.abc as _abc
import os as _os

_HERE = _os.path.dirname(_os.path.abspath(__file__))
_LUA_DIR = _os.path.join(_HERE, "share", "lua", "5.1")


def _lua_path():
    """Installed from a wheel, the Lua facade is in sluice/share/lua/5.1.
    libsluice adds that folder to the pipeline's package.path by itself when
    LUA_PATH is unset (src/script/pipeline.c); when LUA_PATH is set, it
    decides alone, so the package's folder is prepended to it here (the
    facade must match the library it drives)."""
    if not _os.path.isdir(_LUA_DIR):
        return  # a build tree: the tests set LUA_PATH themselves
    cur = _os.environ.get("LUA_PATH")
    if cur is None:
        return
    mine = "{0}/?.lua;{0}/?/init.lua".format(_LUA_DIR)
    if not cur.startswith(mine):
        _os.environ["LUA_PATH"] = mine + ";" + cur


_lua_path()

from ._sluice import (  # noqa: E402
    Batch,
    Error,
    Pipeline,
    Tensor,
    library_path,
    libsluice_version,
    stats_enable,
    stats_enabled,
)
from . import _sluice  # noqa: E402
import threading as _threading  # noqa: E402

# One open at a time while a rank/world given to open_* (or sluice.ray's
# variables) are set in the environment, which is the process's.
_ENV_LOCK = _threading.Lock()


def _check_rank_world(rank, world):
    """rank and world as given to open_* or sluice.torch: both or neither,
    integers, 0 <= rank < world.  Returns (rank, world) or (None, None)."""
    if rank is None and world is None:
        return None, None
    if rank is None or world is None:
        raise ValueError("sluice: rank and world go together (got rank=%r, "
                         "world=%r); give neither to read the launcher's "
                         "RANK and WORLD_SIZE" % (rank, world))
    for what, v in (("rank", rank), ("world", world)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError("sluice: %s must be an int (got %r)" % (what, v))
    if world < 1 or not 0 <= rank < world:
        raise ValueError("sluice: rank %d is not in [0, world %d)"
                         % (rank, world))
    return rank, world


def _as_launcher(open_fn, rank, world, *args, env=None, **kw):
    """open_fn(*args, **kw) with rank/world (when given) in the environment
    as a launcher puts them there - RANK and WORLD_SIZE, which every
    sharded source reads (sl_shard_env, sluice.shard_env()) while the script
    runs - and `env` ({name: str}, more variables for the script's
    os.getenv: sluice.ray's SLUICE_EPOCH and SLUICE_SEED) with them; the
    previous values put back after."""
    rank, world = _check_rank_world(rank, world)
    setenv = dict(env or {})
    if rank is not None:
        setenv["RANK"] = str(rank)
        setenv["WORLD_SIZE"] = str(world)
    if not setenv:
        return open_fn(*args, **kw)
    with _ENV_LOCK:
        saved = {k: _os.environ.get(k) for k in setenv}
        _os.environ.update(setenv)
        try:
            return open_fn(*args, **kw)
        finally:
            for k, v in saved.items():
                if v is None:
                    _os.environ.pop(k, None)
                else:
                    _os.environ[k] = v


_SIZE_UNITS = {"": 1, "B": 1}
for _i, _u in enumerate("KMGT", 1):
    _SIZE_UNITS[_u] = _SIZE_UNITS[_u + "B"] = _SIZE_UNITS[_u + "IB"] = 1024 ** _i


def _size(v):
    """Bytes from an int or a size string as the CLI's --memory takes it
    (K, M, G, T: powers of 1024, optional B or iB; "512M", "2GiB")."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v
    if isinstance(v, str):
        s = v.strip().upper()
        num = s.rstrip("KMGTIB ").strip()
        unit = s[len(num):].strip()
        if num.isdigit() and unit in _SIZE_UNITS and int(num) >= 1:
            return int(num) * _SIZE_UNITS[unit]
    raise ValueError("sluice: memory must be a whole number of bytes >= 1 or "
                     "a size such as '512M' or '2GiB' (got %r)" % (v,))


def _budgeted(p, memory):
    """p with its memory budget set (sl_reader_set_budget); None (unset):
    the default budget (sl_reader_default_budget), False or "none": no
    budget (sl_reader_set_no_budget); closed on error."""
    try:
        if memory is None:
            p._default_budget(True)
        elif memory is False or memory == "none":
            p._default_budget(False)
        else:
            p._set_budget(_size(memory))
    except BaseException:
        p.close()
        raise
    return p


def open_script(path, *args, rank=None, world=None, memory=None):
    """Runs the Lua pipeline script `path` (sl_pipeline_open_file); `args`
    reach it as `...` (each str()).  rank and world (both or neither): this
    process's place in a distributed job, given to the script's sharded
    sources as the launcher's RANK and WORLD_SIZE would be.  memory: one
    memory budget for the whole pipeline, bytes or "512M" / "2GiB"
    (sl_reader_set_budget); unset (None): the default, 50 % of the memory
    the process may use; False or "none": no budget (docs/PYTHON.md)."""
    return _budgeted(_as_launcher(_sluice.open_script, rank, world, path,
                                  *args), memory)


def open_string(code, *args, name=None, rank=None, world=None, memory=None):
    """open_script for Lua source text (sl_pipeline_open_string); `name`
    names the chunk in messages."""
    kw = {} if name is None else {"name": name}
    return _budgeted(_as_launcher(_sluice.open_string, rank, world, code,
                                  *args, **kw), memory)


def _arrow_source(obj):
    """obj itself when it speaks the Arrow PyCapsule stream interface (or is
    such a capsule); a pyarrow.dataset Dataset or Scanner, which do not,
    through their record-batch reader."""
    if hasattr(obj, "__arrow_c_stream__") or type(obj).__name__ == "PyCapsule":
        return obj
    if hasattr(obj, "scanner") and hasattr(obj, "files"):  # a Dataset
        return obj.scanner().to_reader()
    if hasattr(obj, "to_reader") and hasattr(obj, "dataset_schema"):  # Scanner
        return obj.to_reader()
    return obj


_ARROW_SEQ = [0]
_ARROW_LOCK = _threading.Lock()


def from_arrow(obj, script=None, *args, code=None, batch=None,
               drop_last=False, name=None, rank=None, world=None):
    """A Pipeline over the rows of an Arrow stream: `obj` is anything with
    __arrow_c_stream__ (a pyarrow Table, RecordBatchReader or Dataset, a
    Polars DataFrame, a DuckDB result, a Hugging Face dataset's Arrow
    table, ...) or such a capsule; a pyarrow.dataset Dataset or Scanner
    (which have no __arrow_c_stream__) is read through its scanner's
    record-batch reader.  One sample per
    row, one field per column (sl_reader_from_arrow_stream: numbers and
    bools are scalars, fixed-size lists fixed shapes, strings bytes[-1],
    lists variable dims; docs/PYTHON.md, "Arrow").  The stream is consumed:
    the pipeline is one pass.

    Without a script: the rows, grouped by `batch` rows (sl_batch;
    drop_last drops a last partial batch) when given.  With `script` (a
    path) or `code` (Lua source): the stream is handed to that pipeline
    script, whose first argument is the name to open it by -
    `local src = ...; return sluice.open(src):map(f):batch(64)` - followed
    by `args`; rank and world as open_script's.  A stream the script
    leaves unopened is released."""
    if script is None and code is None:
        if args:
            raise TypeError("sluice.from_arrow: extra arguments %r are for a "
                            "script (script= or code=)" % (args,))
        return _sluice.arrow_reader(_arrow_source(obj), batch=batch or 0,
                                    drop_last=bool(drop_last), name=name)
    if batch is not None or drop_last:
        raise TypeError("sluice.from_arrow: batch and drop_last are for the "
                        "plain reader; batch in the script instead")
    with _ARROW_LOCK:
        _ARROW_SEQ[0] += 1
        tag = "py%d-%d" % (_os.getpid(), _ARROW_SEQ[0])
    _sluice.arrow_park(_arrow_source(obj), tag)
    try:
        if script is not None:
            return open_script(script, "arrow:" + tag, *args, rank=rank,
                               world=world)
        return open_string(code, "arrow:" + tag, *args, name=name,
                           rank=rank, world=world)
    finally:
        _sluice.arrow_unpark(tag)


# The exception classes, one per SL_E* code (sluice.ELUA, sluice.EIO, ...).
_ERRORS = {name: getattr(_sluice, name) for name in dir(_sluice)
           if name.startswith("E") and isinstance(getattr(_sluice, name), type)
           and issubclass(getattr(_sluice, name), Error)}
globals().update(_ERRORS)

_abc.Mapping.register(Batch)

__version__ = libsluice_version

__all__ = ["Batch", "Error", "Pipeline", "Tensor", "library_path",
           "libsluice_version", "from_arrow", "open_script", "open_string",
           "stats_enable", "stats_enabled"] + sorted(_ERRORS)
