"""`pip install ./bindings/python` into a fresh venv (python3 -m venv,
Debian's python3-venv), then, from outside the source tree and without
LUA_PATH or PYTHONPATH, import sluice and read a pipeline: the wheel holds
libsluice and the Lua facade, and finds both by itself.

pip fetches the build backend (scikit-build-core) from PyPI.  Where PyPI
cannot be reached the test is reported as skipped with pip's reason; any
other failure fails."""
import os
import subprocess
import sys

import pytest

from conftest import SOURCE_DIR

NETWORK_SIGNS = ("NewConnectionError", "Max retries exceeded",
                 "Temporary failure in name resolution", "Network is "
                 "unreachable", "Could not fetch URL", "ConnectTimeout",
                 "ReadTimeout", "No matching distribution found for "
                 "scikit-build-core")

READ = r"""
import os, sys
import sluice
assert sluice.__file__.startswith(sys.prefix), sluice.__file__
lib = sluice.library_path()
assert lib.startswith(sys.prefix), lib
n = 0
with sluice.open_script(sys.argv[1], "test", sys.argv[2]) as p:
    for b in p:
        m = memoryview(b["label"])
        assert m.format == "q"
        n += m.shape[0]
        x = memoryview(b["image"])
        assert x.shape[1] == 784 and x.format == "f"
print("read", n, "from", lib)
"""


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("LUA_PATH", "LUA_CPATH", "PYTHONPATH",
                        "SLUICE_LIBRARY", "PYTHONHOME",
                        # the wheel is never instrumented (make asan)
                        "LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS",
                        "TSAN_OPTIONS")}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    return env


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def test_pip_install_into_fresh_venv_then_read(tmp_path, t10k):
    venv = tmp_path / "venv"
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") \
        else sys.executable
    r = run([py, "-m", "venv", str(venv)])
    assert r.returncode == 0, \
        "python3 -m venv failed (apt-get install python3-venv): " + r.stderr
    vpy = str(venv / "bin" / "python")
    env = clean_env()

    # Can PyPI be reached?  (The one reason to skip.)
    r = run([vpy, "-m", "pip", "download", "--no-deps", "-d",
             str(tmp_path / "probe"), "scikit-build-core"], env=env,
            timeout=300)
    if r.returncode != 0:
        out = r.stdout + r.stderr
        if any(s in out for s in NETWORK_SIGNS):
            pytest.skip("PyPI unreachable, the build backend "
                        "(scikit-build-core) cannot be fetched: "
                        + out.strip().splitlines()[-1])
        raise AssertionError("pip download scikit-build-core failed:\n" + out)

    r = run([vpy, "-m", "pip", "install",
             os.path.join(SOURCE_DIR, "bindings", "python")],
            env=env, timeout=1200, cwd=str(tmp_path))
    assert r.returncode == 0, "pip install failed:\n%s\n%s" % (
        r.stdout[-6000:], r.stderr[-6000:])

    script = os.path.join(SOURCE_DIR, "examples", "fashion_mnist.lua")
    r = run([vpy, "-c", READ, script, t10k], env=env, cwd=str(tmp_path),
            timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("read 10000 from " + str(venv)), r.stdout

    # The package's own Lua dir wins over a LUA_PATH pointing elsewhere.
    env2 = dict(env, LUA_PATH="/nonexistent/?.lua;;")
    r = run([vpy, "-c", READ, script, t10k], env=env2, cwd=str(tmp_path),
            timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
