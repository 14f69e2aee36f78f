-- 30-errors_autotune_spec.lua: tf.data's ignore_errors on the Lua map and
-- filter (failing samples skipped and counted, the same ones for any
-- thread count, a cap per pass, the count and the last message in
-- p:stats()), and prefetch("auto") (the depth tuned within a byte bound,
-- visible as the stats row's queue_depth) (issue 19, items 10 and 11).
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local collect, misuse = H.collect, H.misuse

-- Fails on every 7th value from 3 (3, 10, 17, ...).
local function bad(i) return i % 7 == 3 end

local function expected(n, f)
  local out = {}
  for i = 0, n - 1 do
    if not bad(i) then
      local v = f(i)
      if v ~= nil then out[#out + 1] = v end
    end
  end
  return out
end

local function row(p, name)
  for _, s in ipairs(p:stats()) do
    if s.name == name then return s end
  end
end

describe("ignore_errors on :map and :filter", function()
  it("skips failing samples, the same ones for 1, 2 and 4 threads", function()
    local want = expected(300, function(i) return i * 2 end)
    for _, threads in ipairs {1, 2, 4} do
      local p = sluice.range(300):map(function(s)
        if s.i % 7 == 3 then error("bad value " .. tostring(s.i)) end
        s.i = s.i * 2
        return s
      end, {threads = threads, ignore_errors = true})
      assert.same(want, collect(p))
      local st = row(p, "map")
      assert.equal(43, st.errors_ignored)
      assert.matches("bad value 297", st.last_error, 1, true)
      -- Not one-to-one any more: no length.
      local n, why = p:length()
      assert.is_nil(n)
      assert.matches("map", why)
    end
  end)

  it("works on :filter, ordered or not", function()
    local want = expected(200, function(i) return i % 2 == 0 and i or nil end)
    for _, threads in ipairs {1, 4} do
      local p = sluice.range(200):filter(function(s)
        if s.i % 7 == 3 then error("no " .. tostring(s.i)) end
        return s.i % 2 == 0
      end, {threads = threads, ignore_errors = 100})
      assert.same(want, collect(p))
      assert.equal(29, row(p, "filter").errors_ignored)
      local q = sluice.range(200):filter(function(s)
        if s.i % 7 == 3 then error("no " .. tostring(s.i)) end
        return s.i % 2 == 0
      end, {threads = threads, ordered = false, ignore_errors = true})
      local got = collect(q)
      table.sort(got)
      assert.same(want, got)
    end
  end)

  it("ends the pass past the cap with the count, the cap and the last message", function()
    for _, threads in ipairs {1, 2, 4} do
      local p = sluice.range(100):map(function(s)
        if s.i % 7 == 3 then error("bad value " .. tostring(s.i)) end
        return s
      end, {threads = threads, ignore_errors = 2})
      local got = {}
      for _ = 1, 15 do got[#got + 1] = p:next().i end
      assert.same(expected(17, function(i) return i end), got)
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.matches("3 samples failed in this pass, more than ignore_errors (2); the last: ",
                     err, 1, true)
      assert.matches("bad value 17", err, 1, true)
      -- Sticky: a pcall retry repeats the same error, it does not go on.
      local ok2, err2 = pcall(p.next, p)
      assert.is_false(ok2)
      assert.equal(err, err2)
    end
  end)

  it("restarts the count at a reset, mid-pass too", function()
    -- 30 samples hold 4 failing values: a cap of 4 holds per pass.
    local p = sluice.range(30):map(function(s)
      if s.i % 7 == 3 then error("bad") end
      return s
    end, {threads = 2, ignore_errors = 4})
    for _ = 1, 3 do
      for _ = 1, 12 do p:next() end
      p:reset()
      assert.equal(26, #collect(p))
      p:reset()
    end
    -- 2 skipped before each mid-pass reset, 4 in each whole pass.
    assert.equal(3 * 6, row(p, "map").errors_ignored)
  end)

  it("saves and restores over skipped samples", function()
    local function build()
      return sluice.range(40):map(function(s)
        if s.i % 7 == 3 then error("bad") end
        return s
      end, {threads = 2, ignore_errors = true})
    end
    local all = collect(build())
    for _, cut in ipairs {0, 1, 3, 4, 10, 20, 34} do
      local p = build()
      for _ = 1, cut do p:next() end
      local state = p:state()
      p:close()
      local q = build()
      q:restore(state)
      local rest = collect(q)
      local want = {}
      for k = cut + 1, #all do want[#want + 1] = all[k] end
      assert.same(want, rest)
    end
  end)

  it("refuses bad values, naming the stage and the option", function()
    local must = "option 'ignore_errors' must be true, false or an integer "
                 .. ">= 0 (the most failing samples skipped per pass; got "
    assert.equal("sluice: :map(): " .. must .. "-1)",
                 misuse(function()
                   sluice.range(3):map(function(s) return s end, {ignore_errors = -1})
                 end))
    assert.equal("sluice: :filter(): " .. must .. "\"x\")",
                 misuse(function()
                   sluice.range(3):filter(function() return true end, {ignore_errors = "x"})
                 end))
    assert.matches("option 'ignore_errors'", misuse(function()
      sluice.range(3):map(function(s) return s end, {ignore_errors = 1.5})
    end), 1, true)
  end)

  it("leaves errors alone without it (0 and false)", function()
    for _, v in ipairs {0, false} do
      local p = sluice.range(10):map(function(s)
        if s.i == 3 then error("three") end
        return s
      end, {ignore_errors = v})
      for _ = 1, 3 do p:next() end
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.matches("three", err)
      p:reset()
      assert.equal(10, p:length())
    end
  end)
end)

describe("prefetch(\"auto\")", function()
  it("refuses bad arguments, naming the option", function()
    assert.equal("sluice: :prefetch(): buffer size must be an integer >= 1 or \"auto\" (got \"fast\")",
                 misuse(function() sluice.range(3):prefetch("fast") end))
    assert.matches("unknown option 'depth'", misuse(function()
      sluice.range(3):prefetch("auto", {depth = 3})
    end), 1, true)
    assert.matches("option 'max_bytes' must be an integer >= 1", misuse(function()
      sluice.range(3):prefetch("auto", {max_bytes = 0})
    end), 1, true)
    assert.matches("option 'max_depth' must be 1..65536", misuse(function()
      sluice.range(3):prefetch("auto", {max_depth = 100000})
    end), 1, true)
    assert.matches("options are for :prefetch", misuse(function()
      sluice.range(3):prefetch(4, {max_bytes = 10})
    end), 1, true)
  end)

  it("gives every sample in order and shows its depth", function()
    local p = sluice.range(50):prefetch("auto", {max_bytes = 2^20})
    assert.equal(1, row(p, "prefetch").queue_depth)
    assert.equal(50, p:length())
    local got = collect(p)
    assert.equal(50, #got)
    for i = 1, 50 do assert.equal(i - 1, got[i]) end
    p:reset()
    assert.equal(0, p:next().i)
    local q = sluice.range(5):prefetch(3)
    assert.equal(3, row(q, "prefetch").queue_depth) -- prefetch(n) as before
    assert.same({0, 1, 2, 3, 4}, collect(q))
  end)

  it("saves and restores", function()
    local p = sluice.range(20):prefetch("auto")
    for _ = 1, 7 do p:next() end
    local state = p:state()
    local q = sluice.range(20):prefetch("auto")
    q:restore(state)
    assert.equal(7, q:next().i)
  end)
end)
