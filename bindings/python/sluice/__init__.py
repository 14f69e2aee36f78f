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
    open_script,
    open_string,
    stats_enable,
    stats_enabled,
)
from . import _sluice  # noqa: E402

# The exception classes, one per SL_E* code (sluice.ELUA, sluice.EIO, ...).
_ERRORS = {name: getattr(_sluice, name) for name in dir(_sluice)
           if name.startswith("E") and isinstance(getattr(_sluice, name), type)
           and issubclass(getattr(_sluice, name), Error)}
globals().update(_ERRORS)

_abc.Mapping.register(Batch)

__version__ = libsluice_version

__all__ = ["Batch", "Error", "Pipeline", "Tensor", "library_path",
           "libsluice_version", "open_script", "open_string",
           "stats_enable", "stats_enabled"] + sorted(_ERRORS)
