"""sluice.open_script / open_string with memory=: one memory budget for the
whole pipeline (sl_reader_set_budget, issue 27 item 1): the pipeline yields
every batch, its stats() carry each stage's bytes held and peak and the
budget; sizes as the CLI's --memory; bad sizes and a budget too small for
one sample are errors naming what is wrong.  Unset: the default budget (50 %
of the memory usable); False or "none": no budget."""
import pytest

import sluice

WIDE = """
local sluice = require "sluice"
local n = tonumber((...)) or 300
return sluice.range(n):map(function(s)
  s.x = sluice.tensor("u8", {1024})
  return s
end, {threads = 2}):batch(4):prefetch(2)
"""


def test_memory_bounds_and_stats():
    p = sluice.open_string(WIDE, 300, memory="64K")
    assert sum(1 for _ in p) == 75
    st = p.stats()
    assert {s["budget_bytes"] for s in st} == {64 * 1024}
    assert all(s["bytes_held"] <= s["bytes_peak"] for s in st)
    assert max(s["bytes_peak"] for s in st) > 0
    p.close()


def test_memory_as_bytes_and_sizes():
    for v, want in [(10 ** 6, 10 ** 6), ("2G", 2 << 30), ("512MiB", 512 << 20),
                    ("64 kb", 64 << 10), ("100", 100)]:
        with sluice.open_string(WIDE, 8, memory=v) as p:
            assert p.stats()[0]["budget_bytes"] == want


@pytest.mark.parametrize("bad", [0, -1, "lots", "1.5G", "", True, 2.0])
def test_bad_memory_is_valueerror(bad):
    with pytest.raises(ValueError, match="memory must be a whole number"):
        sluice.open_string(WIDE, 8, memory=bad)


@pytest.mark.parametrize("off", [False, "none"])
def test_memory_off_no_budget(off):
    with sluice.open_string(WIDE, 8, memory=off) as p:
        list(p)
        assert all(s["budget_bytes"] == 0 for s in p.stats())


def test_without_memory_the_default_budget(monkeypatch):
    # 50 % of the memory usable; SLUICE_MEMORY_LIMIT stands for the
    # container's limit
    monkeypatch.setenv("SLUICE_MEMORY_LIMIT", "512M")
    with sluice.open_string(WIDE, 8) as p:
        assert len(list(p)) == 2
        st = p.stats()
        assert {s["budget_bytes"] for s in st} == {256 << 20}
        assert {s["budget_default_pct"] for s in st} == {50}
        assert {s["memory_usable"] for s in st} == {512 << 20}
    with sluice.open_string(WIDE, 8, memory="1M") as p:
        assert p.stats()[0]["budget_default_pct"] == 0
        assert p.stats()[0]["memory_usable"] == 0


def test_bad_memory_limit_variable(monkeypatch):
    monkeypatch.setenv("SLUICE_MEMORY_LIMIT", "lots")
    with pytest.raises(sluice.Error, match="SLUICE_MEMORY_LIMIT: not a size"):
        sluice.open_string(WIDE, 8)
    # memory= given: the variable is not read
    with sluice.open_string(WIDE, 8, memory=False) as p:
        assert len(list(p)) == 2


def test_too_small_names_stage_and_bytes():
    # the stages' threads start as the script makes them: the first samples
    # may pass before the budget; a later one is the error, met by the map
    # (a sample of 1032 bytes), by the batch (a row of 1032 bytes made
    # before the budget, or, its rows written by the map fused with it,
    # its batch of 4) or by the prefetch (a batch of 4 made before the
    # budget)
    with sluice.open_string(WIDE, 5000, memory=100) as p:
        with pytest.raises(sluice.Error,
                           match="stage '((map|batch)' needs 1032|"
                                 "(prefetch|batch)' needs 4128) bytes for one "
                                 "sample, the budget is 100 bytes"):
            list(p)


def test_script_with_its_own_budget_refuses_memory():
    code = 'return require("sluice").range(10):budget("1MiB"):batch(5)'
    with sluice.open_string(code) as p:
        assert p.stats()[0]["budget_bytes"] == 1 << 20
    with pytest.raises(sluice.ESTATE, match="already has a memory budget"):
        sluice.open_string(code, memory="2M")
