"""sluice.Tensor and sluice.Batch: zero-copy views (buffer protocol and
DLPack), read-only, lifetimes, LoD offsets, dtypes."""
import gc

import numpy as np
import pytest

import sluice
from conftest import fmnist_script

TABLE = """
local sluice = require "sluice"
return sluice.from_table({
  {v = {1, 2, 3}, w = 1.5}, {v = {4, 5}, w = 2.5}, {v = {6}, w = 3.5},
}, {{"v", "%s", {-1}}, {"w", "f32", {}}}):batch(3, {lod = true})
"""


def first_batch(t10k):
    p = sluice.open_script(fmnist_script(), "test", t10k)
    b = next(p)
    return p, b


def test_numpy_asarray_is_zero_copy(t10k):
    p, b = first_batch(t10k)
    t = b["image"]
    a = np.asarray(t)
    assert a.ctypes.data == t.data_ptr
    assert a.shape == t.shape == (1000, 784)
    assert t.dtype == "f32" and t.ndim == 2 and t.nbytes == 1000 * 784 * 4
    assert not a.flags.writeable
    assert b["image"] is t  # one Tensor per field and batch
    p.close()


def test_from_dlpack_is_zero_copy(t10k):
    p, b = first_batch(t10k)
    t = b["label"]
    assert t.__dlpack_device__() == (1, 0)  # kDLCPU
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr
    assert (a == np.asarray(t)).all()
    # An unconsumed capsule frees itself.
    cap = t.__dlpack__()
    del cap
    gc.collect()
    p.close()


def test_memoryview_format_and_readonly(t10k):
    p, b = first_batch(t10k)
    m = memoryview(b["label"])
    assert m.format == "q" and m.itemsize == 8 and m.readonly
    assert m.shape == (1000,) and m.strides == (8,)
    with pytest.raises(TypeError):
        m[0] = 1
    p.close()


def test_arrays_outlive_batch_and_pipeline(t10k):
    p, b = first_batch(t10k)
    want = np.asarray(b["image"]).copy()
    a = np.asarray(b["image"])
    d = np.from_dlpack(b["label"])
    dl = d.copy()
    del b
    p.close()
    del p
    gc.collect()
    # Churn the allocator: freed memory would be reused and overwritten.
    junk = [np.ones(784 * 1000, np.float32) for _ in range(20)]
    del junk
    with sluice.open_script(fmnist_script(), "test", t10k) as q:
        for _ in q:
            pass
    assert (a == want).all()
    assert (d == dl).all()


def test_lod_offsets_are_exposed():
    p = sluice.open_string(TABLE % "i32")
    b = next(p)
    v = b["v"]
    assert np.asarray(v).tolist() == [1, 2, 3, 4, 5, 6]
    lod = v.lod
    assert lod is not None and lod.dtype == "i64"
    assert np.asarray(lod).tolist() == [0, 3, 5, 6]
    assert np.from_dlpack(lod).tolist() == [0, 3, 5, 6]
    assert b["w"].lod is None
    assert lod.lod is None
    p.close()
    del b, v
    gc.collect()
    assert np.asarray(lod).tolist() == [0, 3, 5, 6]  # outlives its batch


@pytest.mark.parametrize("dtype,np_dtype", [
    ("u8", np.uint8), ("i8", np.int8), ("u16", np.uint16),
    ("i16", np.int16), ("u32", np.uint32), ("i32", np.int32),
    ("u64", np.uint64), ("i64", np.int64), ("f16", np.float16),
    ("f32", np.float32), ("f64", np.float64)])
def test_dtypes_map_to_numpy(dtype, np_dtype):
    p = sluice.open_string(TABLE % dtype)
    v = next(p)["v"]
    for a in (np.asarray(v), np.from_dlpack(v)):
        assert a.dtype == np_dtype
        assert a.tolist() == [1, 2, 3, 4, 5, 6]
    p.close()


def test_bf16_has_no_buffer_format_but_dlpacks():
    p = sluice.open_string(TABLE % "bf16")
    v = next(p)["v"]
    with pytest.raises(BufferError, match="__dlpack__"):
        memoryview(v)
    assert v.__dlpack__() is not None
    p.close()


def test_batch_mapping_api(t10k):
    p, b = first_batch(t10k)
    assert len(b) == 2 and "image" in b and "nope" not in b
    assert b.keys() == ["image", "label"]
    assert [k for k, _ in b.items()] == ["image", "label"]
    assert b.values()[1] is b["label"]
    assert b.get("nope") is None and b.get("nope", 3) == 3
    with pytest.raises(KeyError):
        b["nope"]
    assert dict(b)["label"] is b["label"]
    assert "image: f32" in repr(b)
    p.close()


def test_dlpack_refuses_copy_and_other_devices(t10k):
    p, b = first_batch(t10k)
    with pytest.raises(BufferError):
        b["label"].__dlpack__(copy=True)
    with pytest.raises(BufferError):
        b["label"].__dlpack__(dl_device=(2, 0))
    assert b["label"].__dlpack__(dl_device=(1, 0), max_version=(1, 0))
    p.close()


def test_types_cannot_be_instantiated():
    for cls in (sluice.Tensor, sluice.Batch, sluice.Pipeline):
        with pytest.raises(TypeError):
            cls()
