"""Batches in GPU memory (a double_buffer on "cuda:0"): DLPack names the
device, the buffer protocol refuses, torch gets a CUDA tensor without a
copy.  Needs a CUDA device (and, for the torch part, a CUDA-enabled torch):
reported as skipped, with C's reason, on a machine without one."""
import subprocess
import sys

import pytest

import sluice

CUDA = """
return require("sluice").range(256):batch(64):double_buffer{device = "cuda:0"}
"""


def open_cuda():
    try:
        return sluice.open_string(CUDA)
    except sluice.Error as e:
        # SL_ECUDA / SL_EUNSUPPORTED from C, or the script's Lua error
        # carrying that message: no driver, no device, a build without the
        # CUDA engine.
        first = e.detail.splitlines()[0]
        if "cuda" not in first.lower():
            raise
        pytest.skip("no usable CUDA device: " + first)


def test_cuda_batches_export_their_device():
    p = open_cuda()
    seen = 0
    for b in p:
        t = b["i"]
        assert t.device == (2, 0)  # kDLCUDA, device 0
        assert t.__dlpack_device__() == (2, 0)
        with pytest.raises(BufferError, match="device memory"):
            memoryview(t)
        with pytest.raises(BufferError):
            t.__dlpack__(dl_device=(1, 0))  # no copy to the host
        assert t.__dlpack__(dl_device=(2, 0)) is not None
        seen += t.shape[0]
    assert seen == 256
    p.close()


def test_cuda_batches_reach_torch_without_a_copy():
    p = open_cuda()
    from test_torch import torch_python, torch_env  # noqa: F401
    py, env = torch_env()
    code = (
        "import sluice, torch\n"
        "assert torch.cuda.is_available(), 'torch has no CUDA'\n"
        "p = sluice.open_string(%r)\n"
        "n = 0\n"
        "for b in p:\n"
        "    t = torch.from_dlpack(b['i'])\n"
        "    assert t.is_cuda and t.data_ptr() == b['i'].data_ptr\n"
        "    assert t.cpu().tolist() == list(range(n, n + 64))\n"
        "    n += 64\n"
        "print('cuda torch ok', n)\n" % CUDA)
    p.close()
    r = subprocess.run([py, "-c", code], env=env, capture_output=True,
                       text=True, timeout=300)
    if "torch has no CUDA" in r.stderr:
        pytest.skip("torch in %s has no CUDA" % py)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "cuda torch ok 256" in r.stdout
