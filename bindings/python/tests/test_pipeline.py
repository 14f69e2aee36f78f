"""sluice.open_script / open_string and sluice.Pipeline: passes, reset,
close, with, schema, len, stats, state/restore, errors."""
import collections.abc
import os

import numpy as np
import pytest

import sluice
from conftest import fmnist_script

RANGE10 = 'return require("sluice").range(10):batch(4)'


def values(p):
    return [np.asarray(b["i"]).tolist() for b in p]


def test_open_script_reads_fashion_mnist(t10k):
    with sluice.open_script(fmnist_script(), "test", t10k) as p:
        assert p.schema == {"image": ("f32", (-1, 784)),
                            "label": ("i64", (-1,))}
        n = 0
        for b in p:
            assert isinstance(b, collections.abc.Mapping)
            assert list(b) == ["image", "label"]
            x, y = np.asarray(b["image"]), np.asarray(b["label"])
            assert x.dtype == np.float32 and x.shape == (1000, 784)
            assert y.dtype == np.int64 and y.shape == (1000,)
            assert 0.0 <= x.min() and x.max() <= 1.0
            assert set(np.unique(y)) <= set(range(10))
            n += x.shape[0]
        assert n == 10000


def test_open_script_takes_path_like_and_non_string_args(t10k, script):
    path = script("""
        local n, b = ...
        return require("sluice").range(tonumber(n)):batch(tonumber(b))
        """)
    import pathlib
    p = sluice.open_script(pathlib.Path(path), 5, 2)
    assert [len(np.asarray(b["i"])) for b in p] == [2, 2, 1]


def test_each_for_loop_is_one_pass():
    p = sluice.open_string(RANGE10)
    first = values(p)
    assert first == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert values(p) == first  # a new pass, not an exhausted iterator
    # Stopping early and iterating again starts a new pass.
    for b in p:
        break
    assert values(p) == first
    # iter() of a pass is the pass: the loop goes on with it.
    it = iter(p)
    next(it)
    assert [np.asarray(b["i"]).tolist() for b in it] == first[1:]
    # The end of a pass repeats.
    it = iter(p)
    assert len(list(it)) == 3
    with pytest.raises(StopIteration):
        next(it)


def test_next_reset_and_len():
    p = sluice.open_string(RANGE10)
    assert len(p) == 3
    assert np.asarray(next(p)["i"]).tolist() == [0, 1, 2, 3]
    p.reset()
    assert np.asarray(next(p)["i"]).tolist() == [0, 1, 2, 3]
    assert bool(p)


def test_close_is_idempotent_and_closed_pipeline_raises():
    p = sluice.open_string(RANGE10)
    b = next(p)
    p.close()
    p.close()
    assert p.closed
    with pytest.raises(sluice.ECLOSED) as e:
        next(p)
    assert e.value.code_name == "SL_ECLOSED"
    with pytest.raises(sluice.ECLOSED):
        p.reset()
    with pytest.raises(sluice.ECLOSED):
        iter(p)
    for ask in (lambda: p.schema, lambda: len(p), p.stats, p.state):
        with pytest.raises(sluice.ECLOSED):
            ask()
    assert repr(p) == "<sluice.Pipeline closed>"
    # A batch taken before closing stays valid.
    assert np.asarray(b["i"]).tolist() == [0, 1, 2, 3]


def test_context_manager_closes_even_on_error():
    with pytest.raises(ZeroDivisionError):
        with sluice.open_string(RANGE10) as p:
            next(p)
            1 / 0
    assert p.closed


def test_stats():
    sluice.stats_enable(True)
    try:
        assert sluice.stats_enabled()
        p = sluice.open_string(RANGE10)
        values(p)
        st = p.stats()
        assert [s["name"] for s in st] == ["batch", "range"]
        assert st[0]["samples_out"] == 3 and st[1]["samples_out"] == 10
        assert st[0]["depth"] == 0 and st[1]["downstream"] == 0
        assert set(st[0]) >= {"threads", "samples_in", "next_s", "busy_s",
                              "wait_up_s", "wait_down_s"}
    finally:
        sluice.stats_enable(False)


RESUMABLE = """
local sluice = require "sluice"
return sluice.range(1000):shuffle(100, {seed = 7}):batch(10):prefetch(2)
"""


def test_state_and_restore_continue_where_saved():
    a = sluice.open_string(RESUMABLE)
    it = iter(a)
    for _ in range(5):
        next(it)
    state = a.state()
    assert isinstance(state, bytes) and state
    want = [np.asarray(b["i"]).tolist() for b in it]
    a.close()
    b = sluice.open_string(RESUMABLE)
    b.restore(bytearray(state))  # any bytes-like object
    got = [np.asarray(x["i"]).tolist() for x in b]  # continues, no reset
    assert len(got) == len(want) == 95
    assert got == want
    # The next pass after a restore is the one after the saved pass.
    a = sluice.open_string(RESUMABLE)
    list(a)
    second = [np.asarray(x["i"]).tolist() for x in a]
    assert [np.asarray(x["i"]).tolist() for x in b] == second
    a.close()
    b.close()


def test_restore_refuses_garbage_and_leaves_pipeline_usable():
    p = sluice.open_string(RANGE10)
    with pytest.raises(sluice.Error) as e:
        p.restore(b"not a state")
    assert e.value.code_name in ("SL_ECORRUPT", "SL_EINVAL")
    assert values(p)[0] == [0, 1, 2, 3]


def test_syntax_error_is_elua_naming_the_line(script):
    path = script("local x = = 1\n")
    with pytest.raises(sluice.ELUA) as e:
        sluice.open_script(path)
    err = e.value
    assert isinstance(err, sluice.Error)
    assert err.code == -10 and err.code_name == "SL_ELUA"
    assert os.path.basename(path) + ":1:" in err.detail
    assert str(err) == err.detail


def test_missing_script_is_eio(tmp_path):
    with pytest.raises(sluice.EIO) as e:
        sluice.open_script(str(tmp_path / "nope.lua"))
    assert "nope.lua" in e.value.detail


def test_script_error_carries_traceback(script):
    path = script("""
        local function f() error("boom in the script") end
        f()
        """)
    with pytest.raises(sluice.ELUA) as e:
        sluice.open_script(path)
    assert "boom in the script" in e.value.detail
    assert "traceback" in e.value.detail


def test_script_returning_no_pipeline_is_einval():
    with pytest.raises(sluice.EINVAL) as e:
        sluice.open_string("return 42", name="answer")
    assert "not a pipeline" in e.value.detail


def test_lua_decorator_error_reaches_next_with_traceback_then_reset(script):
    path = script("""
        local sluice = require "sluice"
        return sluice.range(6):map(function(s)
          if s.i == 3 then error("bad sample " .. s.i) end
          return s
        end):batch(2)
        """)
    p = sluice.open_script(path)
    assert np.asarray(next(p)["i"]).tolist() == [0, 1]
    with pytest.raises(sluice.ELUA) as e:
        next(p)
    assert "bad sample 3" in e.value.detail
    assert os.path.basename(path) in e.value.detail  # the source line
    with pytest.raises(sluice.ELUA):  # sticky until reset
        next(p)
    p.reset()
    assert np.asarray(next(p)["i"]).tolist() == [0, 1]
    p.close()


def test_error_classes_cover_the_codes():
    names = ["ENOMEM", "EINVAL", "EIO", "ECORRUPT", "ESHAPE", "ECLOSED",
             "EKILLED", "EUNSUPPORTED", "ELUA", "ECUDA", "EAGAIN",
             "ENOTFOUND", "ESTATE", "ELENGTH"]
    for n in names:
        cls = getattr(sluice, n)
        assert issubclass(cls, sluice.Error), n
    assert not hasattr(sluice, "EOF")


def test_version():
    assert sluice.__version__ == sluice.libsluice_version
    assert os.path.exists(sluice.library_path())
