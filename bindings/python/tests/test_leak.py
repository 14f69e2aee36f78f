"""No leak over 10 000 batches, measured by the process's RSS: every batch
is viewed through numpy (buffer protocol and DLPack), memoryview and its
LoD offsets, then dropped."""
import gc

import numpy as np

import sluice

PIPE = """
local sluice = require "sluice"
return sluice.range(%d):map(function(s)
  local t = sluice.tensor("f32", {8192})
  t.data[0] = s.i
  s.x = t
  return s
end):batch(2, {lod = false})
"""


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def consume(p):
    n = 0
    for b in p:
        x = b["x"]
        a = np.asarray(x)
        d = np.from_dlpack(x)
        m = memoryview(b["i"])
        assert a.ctypes.data == x.data_ptr == d.ctypes.data
        assert x.lod is None and m.shape == (2,)
        n += 1
    return n


def test_no_leak_over_10000_batches():
    p = sluice.open_string(PIPE % 4000)  # 2000 batches of 64 KiB a pass
    assert consume(p) == 2000  # warm-up pass: pools and caches fill
    gc.collect()
    base = rss_kib()
    total = 0
    for _ in range(5):
        total += consume(p)
    gc.collect()
    grown = rss_kib() - base
    p.close()
    assert total == 10000
    # One leaked batch is 64 KiB: 10 000 of them would be 640 MiB.  The
    # bound also catches a leaked Python object per batch (~10 000 x 1 KiB).
    assert grown < 8 * 1024, "RSS grew by %d KiB over 10 000 batches" % grown


def test_no_leak_over_open_close_cycles():
    def cycle():
        with sluice.open_string(PIPE % 20) as p:
            consume(p)
    for _ in range(20):
        cycle()
    gc.collect()
    base = rss_kib()
    for _ in range(200):
        cycle()
    gc.collect()
    grown = rss_kib() - base
    assert grown < 16 * 1024, "RSS grew by %d KiB over 200 pipelines" % grown
