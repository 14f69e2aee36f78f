"""sluice.columns (issue 24 item 19): a batch's fields as a DataLoader's
collate gives them - ragged fields one entry per sample (bytes, str for
__key__, array views), fixed-shape fields one array - with numpy as the
array type (sluice.torch uses the same code with torch.from_dlpack)."""
import os

import numpy as np
import pytest

import sluice
from wds_shards import write_wds_shards
from sluice.columns import columns, field, offsets

WDS = """
local pattern, n = ...
return require("sluice").open(pattern):batch(tonumber(n))
"""


def test_wds_keys_and_bytes_fields_are_one_entry_per_sample(tmp_path):
    pattern = write_wds_shards(str(tmp_path), 2, 12)
    p = sluice.open_string(WDS, pattern, 8)
    got = [columns(b, np.from_dlpack) for b in p]
    assert [len(c["__key__"]) for c in got] == [8, 8, 8]
    keys = [k for c in got for k in c["__key__"]]
    assert keys == ["s%d_%d" % (i, j) for i in range(2) for j in range(12)]
    assert all(isinstance(k, str) for k in keys)
    txt = [t for c in got for t in c["txt"]]
    assert txt == [b"t" * (j + 1) for i in range(2) for j in range(12)]
    cls = np.concatenate([c["cls"] for c in got])
    assert isinstance(got[0]["cls"], np.ndarray)
    assert cls.tolist() == [i * 100 + j for i in range(2) for j in range(12)]
    # The flat tensor and its offsets, as the batch holds them.
    b = next(iter(p))
    assert b["__key__"].shape == (sum(len(k) for k in keys[:8]),)
    assert offsets(b["__key__"])[0] == 0
    assert offsets(b["cls"]) is None


RAGGED = """
local sluice = require "sluice"
return sluice.from_table({
  {v = {1, 2, 3}, w = 1.5}, {v = {4, 5}, w = 2.5}, {v = {}, w = 3.5},
  {v = {6}, w = 4.5},
}, {{"v", "i32", {-1}}, {"w", "f32", {}}}):batch(4)
"""


def test_ragged_numeric_field_is_a_list_of_views():
    p = sluice.open_string(RAGGED)
    b = next(p)
    c = columns(b, np.from_dlpack)
    assert [r.tolist() for r in c["v"]] == [[1, 2, 3], [4, 5], [], [6]]
    base = np.from_dlpack(b["v"])
    assert all(r.base is not None for r in c["v"])  # views, not copies
    assert c["v"][1].ctypes.data == base.ctypes.data + 3 * 4
    assert c["w"].tolist() == [1.5, 2.5, 3.5, 4.5]
    p.close()


def test_padded_batch_stays_one_array():
    p = sluice.open_string(RAGGED.replace(":batch(4)",
                                          ":batch(4, {pad = true})"))
    c = columns(next(p), np.from_dlpack)
    assert isinstance(c["v"], np.ndarray) and c["v"].shape == (4, 3)
    assert c["v_len"].tolist() == [3, 2, 0, 1]
    p.close()


def test_unbatched_bytes_field_is_one_value(tmp_path):
    pattern = write_wds_shards(str(tmp_path), 1, 2)
    p = sluice.open_string('return require("sluice").open((...))', pattern)
    c = columns(next(p), np.from_dlpack)
    assert c["__key__"] == "s0_0" and c["txt"] == b"t"
    assert int(c["cls"]) == 0
    p.close()


def test_text_field_with_bad_utf8_keeps_its_bytes(tmp_path):
    import io
    import tarfile
    path = os.path.join(str(tmp_path), "bad.tar")
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT,
                      encoding="latin-1") as tar:
        info = tarfile.TarInfo("k\xe9y.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    p = sluice.open_string('return require("sluice").open((...))', path)
    b = next(p)
    key = field("__key__", b["__key__"], np.from_dlpack)
    assert key.encode("utf-8", "surrogateescape") == b"k\xe9y"
    p.close()


def test_field_refuses_what_is_not_a_tensor():
    with pytest.raises(AttributeError):
        field("x", b"not a tensor", np.asarray)
