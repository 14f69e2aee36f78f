-- spec/39-autotune_spec.lua: threads = "auto" (issue 27 item 3; src/sync/
-- tune.c, docs/LUA.md "Threads").  Every threaded stage takes "auto": the
-- stage starts as many workers as the usable CPUs and a tuner chooses how
-- many run.  The samples and their order are those of a fixed count (the
-- tuning changes speed only), p:stats() shows the choice (threads,
-- threads_max, threads_auto), and a bad value names the stage.
local sluice = require "sluice"
local H = dofile "spec/helper.lua"
local misuse = H.misuse

local function values(p, field)
  local out = {}
  for s in p:iter() do out[#out + 1] = s[field or "i"] end
  return out
end

local function work(s)
  local x = 0
  for k = 1, 200 do x = x + k % 7 end
  s.i = s.i * 3 + x % 1
  return s
end

describe("threads = \"auto\"", function()
  it("gives a map the samples and order of a fixed count, over passes",
     function()
    local fixed = sluice.range(5000):map(work, {threads = 1})
    local tuned = sluice.range(5000):map(work, {threads = "auto"})
    for _ = 1, 2 do
      local a, b = values(fixed), values(tuned)
      assert.equal(5000, #a)
      assert.same(a, b)
      fixed:reset()
      tuned:reset()
    end
    local st = tuned:stats()[1]
    assert.is_true(st.threads_auto)
    assert.is_true(st.threads >= 1 and st.threads <= st.threads_max)
    assert.is_true(st.threads_max >= 1)
    local f = fixed:stats()[1]
    assert.is_false(f.threads_auto)
    assert.equal(1, f.threads)
    assert.equal(1, f.threads_max)
  end)

  it("gives filter and flat_map the results of a fixed count", function()
    local keep = function(s) return s.i % 3 ~= 0 end
    assert.same(values(sluice.range(3000):filter(keep, {threads = 1})),
                values(sluice.range(3000):filter(keep, {threads = "auto"})))
    local twice = function(s) return {s, s} end
    assert.same(values(sluice.range(2000):flat_map(twice, {threads = 1})),
                values(sluice.range(2000):flat_map(twice,
                                                   {threads = "auto"})))
  end)

  it("gives open_files the records of a fixed count", function()
    local path = "tests/data/golden-v1.slr"
    local function digest(threads)
      local out = {}
      local p = sluice.open_files({path, path}, {threads = threads,
                                                  shuffle = true, seed = 3})
      for s in p:iter() do out[#out + 1] = tostring(s) end
      return out, p
    end
    local a = digest(1)
    local b, p = digest("auto")
    assert.is_true(#a > 0)
    assert.same(a, b)
    local st = p:stats()
    assert.is_true(st[#st].threads_auto or st[1].threads_auto)
  end)

  it("gives interleave's read-ahead a tuned depth, the order unchanged",
     function()
    local function srcs()
      return {sluice.range(300), sluice.range(301), sluice.range(302)}
    end
    local plain = sluice.interleave(srcs(), {cycle = 2, block = 3})
    local tuned = sluice.interleave(srcs(), {cycle = 2, block = 3,
                                             threads = "auto"})
    assert.same(values(plain), values(tuned))
    local n = 0
    for _, st in ipairs(tuned:stats()) do
      if st.name == "prefetch" then
        n = n + 1
        assert.is_true(st.queue_depth >= 1)
      end
    end
    assert.equal(3, n)
    assert.matches("sluice.interleave%(%): option 'threads' must be a "
                   .. "positive integer or \"auto\" %(got \"x\"%)",
                   misuse(function()
                     sluice.interleave(srcs(), {threads = "x"})
                   end))
  end)

  it("is the default of every stage given no threads", function()
    -- a map, filter and flat_map with no options: tuned, one running at
    -- first, the output that of one thread
    local id = function(s) return s end
    local keep = function(s) return s.i % 2 == 0 end
    local twice = function(s) return {s, s} end
    for _, make in ipairs{
      function(t) return sluice.range(4000):map(work, t) end,
      function(t) return sluice.range(4000):filter(keep, t) end,
      function(t) return sluice.range(1000):flat_map(twice, t) end,
    } do
      local default, one = make(nil), make({threads = 1})
      assert.same(values(one), values(default))
      local st = default:stats()[1]
      assert.is_true(st.threads_auto)
      assert.is_true(st.threads >= 1 and st.threads <= st.threads_max)
      assert.is_false(one:stats()[1].threads_auto)
    end
    -- an empty options table is no number either
    assert.is_true(sluice.range(3):map(id, {}):stats()[1].threads_auto)
    -- open_files with no threads: tuned, same records
    local path = "tests/data/golden-v1.slr"
    local function digest(opts)
      local out = {}
      local p = sluice.open_files({path, path}, opts)
      for s in p:iter() do out[#out + 1] = tostring(s) end
      return out, p
    end
    local a = digest({threads = 1, shuffle = true, seed = 5})
    local b, p = digest({shuffle = true, seed = 5})
    assert.is_true(#a > 0)
    assert.same(a, b)
    local st = p:stats()
    assert.is_true(st[#st].threads_auto or st[1].threads_auto)
    -- decode_image takes the default through its option check (and then
    -- names the missing field, not the threads)
    local ok, err = pcall(function()
      return sluice.range(3):decode_image{}
    end)
    assert.is_false(ok)
    assert.matches("no field 'image'", tostring(err))
  end)

  it("gives :prefetch() with no size the tuned depth", function()
    local p = sluice.range(500):prefetch()
    assert.same(values(sluice.range(500)), values(p))
    local st = p:stats()[1]
    assert.equal("prefetch", st.name)
    assert.is_true(st.queue_depth >= 1)
    -- the same stage as :prefetch("auto"): its options are refused
    -- without the word
    assert.equal("sluice: :prefetch(n): options are for "
                 .. ":prefetch(\"auto\", {max_bytes=, max_depth=})",
                 misuse(function()
                   sluice.range(3):prefetch(nil, {max_depth = 4})
                 end))
    -- a number is still a fixed depth
    assert.equal(8, sluice.range(3):prefetch(8):stats()[1].queue_depth)
  end)

  it("leaves interleave's read-ahead off unless asked", function()
    local plain = sluice.interleave({sluice.range(10), sluice.range(10)})
    for _, st in ipairs(plain:stats()) do
      assert.are_not.equal("prefetch", st.name)
    end
  end)

  it("refuses other values, naming the stage", function()
    local p = sluice.range(3)
    local id = function(s) return s end
    assert.equal("sluice: :map(): option 'threads' must be a positive "
                 .. "integer or \"auto\" (got \"fast\")",
                 misuse(function() p:map(id, {threads = "fast"}) end))
    assert.equal("sluice: :filter(): option 'threads' must be a positive "
                 .. "integer or \"auto\" (got true)",
                 misuse(function() p:filter(id, {threads = true}) end))
    assert.equal("sluice: :flat_map(): option 'threads' must be a positive "
                 .. "integer or \"auto\" (got \"AUTO\")",
                 misuse(function() p:flat_map(id, {threads = "AUTO"}) end))
    assert.matches(":decode_image%(%): option 'threads' must be a positive "
                   .. "integer or \"auto\" %(got \"2\"%)",
                   misuse(function() p:decode_image{threads = "2"} end))
    assert.matches("sluice.open_files%(%): option 'threads' must be a "
                   .. "positive integer or \"auto\" %(got \"all\"%)",
                   misuse(function()
                     sluice.open_files({"tests/data/golden-v1.slr"},
                                       {threads = "all"})
                   end))
    -- numbers keep their messages
    assert.equal("sluice: :map(): option 'threads' must be an integer >= 1 "
                 .. "(got 0)", misuse(function() p:map(id, {threads = 0}) end))
    -- WebDataset lanes decide the order: no "auto" there
    assert.matches("'threads' = \"auto\" is not available for WebDataset",
                   misuse(function()
                     sluice.open("shards-{0..1}.tar", {threads = "auto"})
                   end), 1, true)
  end)

  it("passes decode_image's option check", function()
    local ok, err = pcall(function()
      return sluice.range(3):decode_image{threads = "auto"}
    end)
    assert.is_false(ok)
    assert.matches("no field 'image'", tostring(err))
  end)
end)
