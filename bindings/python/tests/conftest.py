"""Shared fixtures of the binding's pytest suite (CTest python.*).

CTest runs each file with PYTHONPATH=<build>/bindings/python (the module and
the package files), LUA_PATH (the source lua/ and <build>/lua), SLUICE_CLI
(the built `sluice` command) and SLUICE_SOURCE_DIR / SLUICE_BUILD_DIR.
"""
import os
import subprocess
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SLUICE_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(HERE)))
FMNIST = os.environ.get("SLUICE_FMNIST", "/usr/share/datasets/fashion-mnist")

# A Lua helper for slow decorators: sleeps MS milliseconds in a worker
# state (shipped as an upvalue; it only uses require "ffi").
LUA_SLEEP = textwrap.dedent("""\
    local ffi = require "ffi"
    local function sleep_ms(ms)
      if not pcall(function() return ffi.C.usleep end) then
        ffi.cdef "int usleep(unsigned int usec);"
      end
      ffi.C.usleep(ms * 1000)
    end
    """)


@pytest.fixture(scope="session")
def t10k(tmp_path_factory):
    """Fashion-MNIST t10k packed into an .slr file by the built CLI."""
    cli = os.environ.get("SLUICE_CLI")
    assert cli and os.path.exists(cli), \
        "SLUICE_CLI is not set (run the suite through CTest)"
    images = os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")
    labels = os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz")
    assert os.path.exists(images), \
        "%s missing: apt-get install dataset-fashion-mnist (make deps)" % images
    out = tmp_path_factory.mktemp("data") / "t10k.slr"
    subprocess.run([cli, "pack", "idx", "-q", images, labels, "-o", str(out)],
                   check=True)
    return str(out)


@pytest.fixture
def script(tmp_path):
    """script(code) -> the path of a Lua file holding `code`."""
    n = [0]

    def make(code, name=None):
        n[0] += 1
        path = tmp_path / (name or "pipeline%d.lua" % n[0])
        path.write_text(textwrap.dedent(code))
        return str(path)
    return make


def fmnist_script():
    return os.path.join(SOURCE_DIR, "examples", "fashion_mnist.lua")
