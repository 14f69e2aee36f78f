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


AUTO = """
local sluice = require "sluice"
return sluice.range(2000):map(function(s) return s end, {threads = "auto"})
"""


def test_stats_show_auto_threads():
    p = sluice.open_string(AUTO)
    got = [int(np.asarray(s["i"])) for s in p]
    assert got == list(range(2000))
    st = p.stats()
    assert st[0]["name"] == "map" and st[0]["threads_auto"] is True
    assert 1 <= st[0]["threads"] <= st[0]["threads_max"]
    assert st[1]["threads_auto"] is False and "samples_fused" in st[0]


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


# Issue 24 item 10: rank and world given to open_script / open_string reach
# the script's sharded sources as the launcher's RANK and WORLD_SIZE do.
WDS_ENV = """
local pattern, how = ...
local opts = how == "env" and {shard = "env"} or nil
return require("sluice").open(pattern, opts):batch(4)
"""


def keys_of(p):
    from sluice.columns import columns
    return [k for b in p for k in columns(b, np.from_dlpack)["__key__"]]


def rank_keys(tmp_path, how, world=2):
    from wds_shards import write_wds_shards
    pattern = write_wds_shards(str(tmp_path), 4, 3)
    got = []
    for rank in range(world):
        with sluice.open_string(WDS_ENV, pattern, how, rank=rank,
                                world=world) as p:
            got.append(keys_of(p))
    return got


def check_halves(got):
    assert [len(k) for k in got] == [6, 6], got
    assert not set(got[0]) & set(got[1])
    assert sorted(got[0] + got[1]) == sorted(
        "s%d_%d" % (i, j) for i in range(4) for j in range(3))


def test_rank_and_world_reach_the_script_as_the_launchers_do(tmp_path):
    before = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    check_halves(rank_keys(tmp_path, "env"))
    # The environment is the caller's again after opening.
    assert {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")} == before


def test_rank_and_world_reach_sluice_shard_env(script):
    path = script("""
        local sluice = require "sluice"
        local rank, world = sluice.shard_env()
        return sluice.range(world * 10 + rank)
        """)
    assert len(sluice.open_script(path, rank=3, world=5)) == 53
    assert len(sluice.open_script(path)) == 10  # no launcher: 0 of 1


def test_wds_without_shard_option_reads_half_on_each_of_two_ranks(tmp_path):
    check_halves(rank_keys(tmp_path, "plain"))


def test_rank_and_world_are_checked():
    for kw, err in (({"rank": 1}, ValueError), ({"world": 2}, ValueError),
                    ({"rank": 2, "world": 2}, ValueError),
                    ({"rank": -1, "world": 2}, ValueError),
                    ({"rank": 0, "world": 0}, ValueError),
                    ({"rank": "0", "world": 2}, TypeError),
                    ({"rank": True, "world": 2}, TypeError)):
        with pytest.raises(err) as e:
            sluice.open_string(RANGE10, **kw)
        assert "rank" in str(e.value)
    # A bad launcher environment is the script's error, named.
    os.environ["RANK"] = "x"
    os.environ["WORLD_SIZE"] = "2"
    try:
        with pytest.raises(sluice.ELUA) as e:
            sluice.open_string('local sluice = require "sluice"\n'
                               'return sluice.range(select(2, '
                               'sluice.shard_env()))')
        assert "RANK='x'" in e.value.detail
        # Given rank and world stand in for it while opening.
        p = sluice.open_string(RANGE10, rank=0, world=1)
        assert len(p) == 3
        assert os.environ["RANK"] == "x"
    finally:
        del os.environ["RANK"]
        del os.environ["WORLD_SIZE"]


def test_open_string_name_still_names_the_chunk():
    with pytest.raises(sluice.ELUA) as e:
        sluice.open_string("error('x')", name="chunky", rank=0, world=1)
    assert "chunky" in e.value.detail
