-- 10-performance_spec.lua: the performance of the Lua layer (issue 4),
-- measured and printed.  The targets themselves are benchmark figures
-- (bench/bench_lua.lua, medians on a quiet machine, docs/PERFORMANCE.md):
-- a test that asserted them would fail whenever the shared CI machine is
-- busy.  Here each figure is asserted only against a floor 10x below its
-- target, which still catches a pathological regression (a per-sample
-- allocation storm, a lost batching, a sleep per sample).  Tagged #perf;
-- `busted --tags=perf` runs them alone.  Targets:
--
--   * a Lua consumer loop (p:next() over small samples): >= 1 million/s,
--     measured in CPU time of this (single-threaded) loop, so a busy
--     machine's scheduling does not count against it; both over a cached
--     range (the loop's own cost: p:next(), the sample object, its
--     release) and over range(N) itself (each sample also two fresh C
--     allocations, freed when the collector gets to them);
--   * identity Lua map: <= 1 us per sample of overhead with one worker:
--     worker.map's own cost (in this state), and the whole map stage
--     (wall time of range(N):map(identity) minus range(N)).
local ffi = require "ffi"
local sluice = require "sluice"
local worker = require "sluice.worker"
local C = require "sluice.cdef"

pcall(ffi.cdef, [[
typedef struct sl_spec_timespec { long tv_sec; long tv_nsec; } sl_spec_timespec;
int clock_gettime(int clk, sl_spec_timespec *ts);
]])

local TS = ffi.new("sl_spec_timespec")
local function now()
  ffi.C.clock_gettime(1, TS) -- CLOCK_MONOTONIC
  return tonumber(TS.tv_sec) + tonumber(TS.tv_nsec) * 1e-9
end

local function best_of(n, f)
  local best = math.huge
  for _ = 1, n do
    collectgarbage()
    local t = f()
    if t < best then best = t end
  end
  return best
end

-- Timings under a sanitizer measure the sanitizer: such runs mark these
-- tests pending (with the reason) instead of failing or passing them.
local SANITIZED = (os.getenv("LD_PRELOAD") or ""):find("san") ~= nil

describe("sluice performance #perf", function()
  local it = it -- luacheck: ignore 431
  if SANITIZED then
    it = function(name)
      pending(name .. " (timings are meaningless under a sanitizer)")
    end
  end

  it("p:next() over small samples: measured (target 1 M/s, floor 0.1 M/s)", function()
    local N = 1000000
    local p = sluice.range(N):cache()
    while p:next() do end -- the first pass fills the cache
    local t = best_of(3, function()
      p:reset()
      local t0 = os.clock()
      local n = 0
      while p:next() do n = n + 1 end
      local dt = os.clock() - t0
      assert.equal(N, n)
      return dt
    end)
    p:close()
    local fresh = best_of(3, function()
      local q = sluice.range(N)
      local t0 = os.clock()
      while q:next() do end
      local dt = os.clock() - t0
      q:close()
      return dt
    end)
    local rate = N / t
    print(("\n  p:next() over a cached range(%d): %.2f M samples/s (%.0f ns "
           .. "each); over range(%d): %.2f M samples/s (%.0f ns each)")
          :format(N, rate / 1e6, t / N * 1e9, N, N / fresh / 1e6,
                  fresh / N * 1e9))
    assert.is_true(rate >= 1e5, ("%.2f M samples/s"):format(rate / 1e6))
    assert.is_true(N / fresh >= 1e5,
                   ("range: %.2f M samples/s"):format(N / fresh / 1e6))
  end)

  it("reading a scalar field in the loop: measured (floor 0.1 M/s)", function()
    local N = 1000000
    local p = sluice.range(N):cache()
    while p:next() do end
    local t = best_of(3, function()
      p:reset()
      local t0 = os.clock()
      local sum = 0
      for s in p:iter() do sum = sum + s.i end
      local dt = os.clock() - t0
      assert.equal(N * (N - 1) / 2, sum)
      return dt
    end)
    p:close()
    print(("\n  for s in p:iter() do sum = sum + s.i end: %.2f M samples/s")
          :format(N / t / 1e6))
    assert.is_true(N / t >= 1e5, ("%.2f M samples/s"):format(N / t / 1e6))
  end)

  it("worker.map of an identity function: measured (floor 10 us)", function()
    local N = 1000000
    local r = ffi.new("sl_reader *[1]")
    assert.equal(0, C.sl_reader_range(1, r))
    local out = ffi.new("sl_sample *[1]")
    assert.equal(0, C.sl_reader_next(r[0], out))
    C.sl_reader_destroy(r[0])
    local s0 = out[0]
    local lud = ffi.cast("void *", s0)
    local slot = ffi.new("sl_sample *[1]")
    local id = function(s) return s end
    local t = best_of(3, function()
      local t0 = os.clock()
      for _ = 1, N do
        C.sl_sample_retain(s0) -- the reference handed to worker.map
        worker.map(id, lud, slot)
        C.sl_sample_release(slot[0])
      end
      return os.clock() - t0
    end)
    C.sl_sample_release(s0)
    print(("\n  worker.map(identity): %.0f ns per sample"):format(t / N * 1e9))
    assert.is_true(t / N <= 1e-5)
  end)

  -- The target (<= 1 us) is measured by bench/bench_lua.lua with medians on
  -- a quiet machine (docs/PERFORMANCE.md); here a 3x margin only guards
  -- against regressions, since CTest may run other tests beside this one.
  it("an identity map stage, 1 thread: overhead measured (target 1 us, floor 10 us)", function()
    local N = 200000
    local function drain(p)
      local t0 = now()
      while p:next() do end
      local dt = now() - t0
      p:close()
      return dt
    end
    local plain = best_of(3, function() return drain(sluice.range(N)) end)
    local mapped = best_of(3, function()
      return drain(sluice.range(N):map(function(s) return s end))
    end)
    local overhead = (mapped - plain) / N
    print(("\n  range(%d): %.0f ns/sample; with :map(identity): %.0f ns/sample;"
           .. " overhead %.0f ns"):format(N, plain / N * 1e9, mapped / N * 1e9,
                                         overhead * 1e9))
    assert.is_true(overhead <= 1e-5, ("%.2f us per sample"):format(overhead * 1e6))
  end)
end)
