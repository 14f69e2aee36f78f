-- 04-decorators_spec.lua: the C decorators as pipeline methods, and
-- sluice.chain / sluice.zip.
local ffi = require "ffi"
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse, collect = H.misuse, H.collect

local function iota(n)
  local t = {}
  for k = 1, n do t[k] = k - 1 end
  return t
end

local function sorted(t)
  local c = {}
  for k, v in ipairs(t) do c[k] = v end
  table.sort(c)
  return c
end

describe("sluice.Pipeline", function()
  describe(":shuffle()", function()
    it("yields a permutation of its input", function()
      local out = collect(sluice.range(1000):shuffle(64, {seed = 7}))
      assert.same(iota(1000), sorted(out))
      assert.are_not.same(iota(1000), out)
    end)

    it("is reproducible for a seed, and differs between seeds", function()
      local a = collect(sluice.range(200):shuffle(50, {seed = 42}))
      local b = collect(sluice.range(200):shuffle(50, {seed = 42}))
      local c = collect(sluice.range(200):shuffle(50, {seed = 43}))
      assert.same(a, b)
      assert.are_not.same(a, c)
    end)

    it("uses seed 0 by default", function()
      assert.same(collect(sluice.range(100):shuffle(10, {seed = 0})),
                  collect(sluice.range(100):shuffle(10)))
    end)

    it("gives each pass its own order, the same for every run", function()
      local p = sluice.range(100):shuffle(100, {seed = 1})
      local first = collect(p)
      p:reset()
      local second = collect(p)
      assert.are_not.same(first, second)
      assert.same(iota(100), sorted(second))
      local q = sluice.range(100):shuffle(100, {seed = 1})
      collect(q)
      q:reset()
      assert.same(second, collect(q))
    end)

    it("accepts a uint64 seed", function()
      local big = ffi.new("uint64_t", 2) ^ 63 + 5
      assert.same(collect(sluice.range(50):shuffle(8, {seed = big})),
                  collect(sluice.range(50):shuffle(8, {seed = big})))
    end)

    it("with a buffer of 1 keeps the order", function()
      assert.same(iota(20), collect(sluice.range(20):shuffle(1, {seed = 3})))
    end)

    it("rejects a bad buffer size or seed", function()
      assert.equal("sluice: :shuffle(): buffer size must be an integer >= 1 "
                   .. "(got 0)", misuse(function() sluice.range(3):shuffle(0) end))
      assert.equal("sluice: :shuffle(): option 'seed' must be an integer in "
                   .. "[0, 2^64) (got -1)",
                   misuse(function() sluice.range(3):shuffle(2, {seed = -1}) end))
    end)
  end)

  describe(":batch()", function()
    it("stacks scalars into a leading dimension", function()
      local p = sluice.range(6):batch(3)
      local b = p:next()
      assert.same({3}, b.i.shape)
      assert.same({0, 1, 2}, b.i:totable())
      assert.same({3, 4, 5}, p:next().i:totable())
      assert.is_nil(p:next())
    end)

    it("with size 1 gives batches of one", function()
      local p = sluice.range(3):batch(1)
      local got = {}
      for b in p:iter() do
        assert.same({1}, b.i.shape)
        got[#got + 1] = b.i[0]
      end
      assert.same({0, 1, 2}, got)
    end)

    it("keeps a partial last batch, or drops it with drop_last", function()
      local p = sluice.range(7):batch(3)
      local sizes = {}
      for b in p:iter() do sizes[#sizes + 1] = b.i:numel() end
      assert.same({3, 3, 1}, sizes)
      local q = sluice.range(7):batch(3, {drop_last = true})
      sizes = {}
      for b in q:iter() do sizes[#sizes + 1] = b.i:numel() end
      assert.same({3, 3}, sizes)
    end)

    it("gives no batch for an empty upstream", function()
      assert.is_nil(sluice.range(0):batch(4):next())
      assert.is_nil(sluice.range(2):batch(4, {drop_last = true}):next())
    end)

    it("stacks fixed-shape fields", function()
      local p = sluice.from_table {{v = {1, 2}}, {v = {3, 4}}, {v = {5, 6}}}
      local b = p:batch(3):next()
      assert.same({3, 2}, b.v.shape)
      assert.same({{1, 2}, {3, 4}, {5, 6}}, b.v:totable())
      assert.is_nil(b.v.lod)
    end)

    it("concatenates ragged fields with LoD offsets", function()
      local p = sluice.from_table {
        {v = {1, 2}, t = "a"}, {v = {3}, t = "bcd"}, {v = {4, 5, 6}, t = ""},
      }
      local sch = p:schema()
      assert.same({-1}, sch.v.shape) -- rows differ in length
      local b = p:batch(3):next()
      assert.same({6}, b.v.shape)
      assert.same({1, 2, 3, 4, 5, 6}, b.v:totable())
      assert.same({0, 2, 3, 6}, b.v.lod)
      -- bytes: a ragged field of 1-byte elements; totable splits by LoD
      assert.same({0, 1, 4, 4}, b.t.lod)
      assert.same({"a", "bcd", ""}, b.t:totable())
      assert.equal(string.byte("b"), b.t[1])
    end)

    it("pads ragged fields and adds <name>_len with pad", function()
      local p = sluice.from_table {{v = {1, 2}}, {v = {3}}, {v = {4, 5, 6}}}
      local b = p:batch(3, {pad = true}):next()
      assert.same({"v", "v_len"}, sluice.fields(b))
      assert.same({3, 3}, b.v.shape)
      assert.same({{1, 2, 0}, {3, 0, 0}, {4, 5, 6}}, b.v:totable())
      assert.same({2, 1, 3}, b.v_len:totable())
    end)

    it("rejects a bad size and options", function()
      assert.equal("sluice: :batch(): option 'pad' must be a boolean (got a "
                   .. "number)",
                   misuse(function() sluice.range(3):batch(2, {pad = 1}) end))
      assert.equal("sluice: :batch(): options must be a table (got a boolean)",
                   misuse(function() sluice.range(3):batch(2, true) end))
    end)
  end)

  describe(":multi_pass()", function()
    it("makes k passes one", function()
      local p = sluice.range(4):multi_pass(3)
      assert.same({0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, collect(p))
      p:reset()
      assert.equal(12, #collect(p))
      assert.same({0, 1}, collect(sluice.range(2):multi_pass(1)))
    end)

    it("rejects k = 0", function()
      assert.equal("sluice: :multi_pass(): pass count must be an integer >= 1 "
                   .. "(got 0)", misuse(function() sluice.range(2):multi_pass(0) end))
    end)
  end)

  describe(":take()", function()
    it("yields the first n samples of each pass", function()
      assert.same({0, 1, 2}, collect(sluice.range(10):take(3)))
      assert.same({}, collect(sluice.range(10):take(0)))
      assert.same({0, 1}, collect(sluice.range(2):take(5)))
      local p = sluice.range(10):take(2)
      collect(p)
      p:reset()
      assert.same({0, 1}, collect(p))
    end)
  end)

  describe(":skip()", function()
    it("drops the first n samples of each pass", function()
      assert.same({7, 8, 9}, collect(sluice.range(10):skip(7)))
      assert.same({}, collect(sluice.range(3):skip(5)))
      assert.same({0, 1}, collect(sluice.range(2):skip(0)))
      assert.equal("sluice: :skip(): count (or -1: all) must be an integer >= 0 (got -2)",
                   misuse(function() sluice.range(2):skip(-2) end))
    end)
  end)

  describe(":cache()", function()
    it("replays the first complete pass instead of reading upstream", function()
      local p = sluice.range(50):shuffle(50, {seed = 9}):cache()
      local first = collect(p)
      p:reset()
      assert.same(first, collect(p)) -- the shuffle alone would differ
      p:reset()
      assert.same(first, collect(p))
    end)
  end)

  describe(":repeat_first()", function()
    it("yields the first sample of each pass n times", function()
      assert.same({3, 3, 3}, collect(sluice.range(5):skip(3):repeat_first(3)))
      assert.same({}, collect(sluice.range(5):repeat_first(0)))
      local p = sluice.range(30):shuffle(30, {seed = 2}):repeat_first(2)
      local a = collect(p)
      assert.equal(a[1], a[2])
    end)
  end)

  describe(":prefetch()", function()
    it("yields the same samples in order, across resets", function()
      local p = sluice.range(1000):prefetch(8)
      assert.same(iota(1000), collect(p))
      p:reset()
      p:next()
      p:reset()
      assert.same(iota(1000), collect(p))
    end)

    it("delivers upstream errors at their position", function()
      local p = sluice.zip(sluice.range(3), sluice.from_table {{x = 0}}):prefetch(4)
      assert.equal(0, p:next().i)
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.equal("zip: reader 1 ended after 1 samples while reader 0 has more",
                   err)
    end)
  end)
end)

describe("sluice", function()
  describe(".chain()", function()
    it("yields the pipelines one after another", function()
      local p = sluice.chain(sluice.range(2), sluice.range(3), sluice.range(1))
      assert.same({0, 1, 0, 1, 2, 0}, collect(p))
      p:reset()
      assert.equal(6, #collect(p))
    end)

    it("raises the C message for schemas that differ", function()
      assert.equal("chain: reader 1 has schema {x: i64[]}, but reader 0 has "
                   .. "{i: i64[]}",
                   misuse(function()
                     sluice.chain(sluice.range(1), sluice.from_table {{x = 1}})
                   end))
    end)

    it("rejects non-pipelines, repeats and consumed pipelines", function()
      local a = sluice.range(1)
      assert.equal("sluice: sluice.chain(): argument 2 is a number, not a "
                   .. "pipeline", misuse(function() sluice.chain(a, 3) end))
      assert.equal("sluice: sluice.chain(): argument 2 is the same pipeline as "
                   .. "argument 1", misuse(function() sluice.chain(a, a) end))
      assert.equal("sluice: sluice.chain(): needs at least one pipeline",
                   misuse(function() sluice.chain() end))
      assert.same({0}, collect(a)) -- still usable
      local _ = a:take(1)
      assert.matches("consumed by :take%(%)",
                     misuse(function() sluice.chain(a) end))
    end)
  end)

  describe(".zip()", function()
    it("puts the fields of its pipelines side by side", function()
      local p = sluice.zip(sluice.range(3),
                           sluice.from_table {{x = "a"}, {x = "b"}, {x = "c"}})
      local s = p:next()
      assert.same({"i", "x"}, sluice.fields(s))
      assert.same({i = 0, x = "a"}, sluice.totable(s))
      assert.same({1, 2}, collect(p))
    end)

    it("raises when the lengths differ, unless truncate", function()
      local p = sluice.zip(sluice.range(5), sluice.from_table {{x = 1}, {x = 2}})
      p:next()
      p:next()
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.equal("zip: reader 1 ended after 2 samples while reader 0 has more",
                   err)
      local q = sluice.zip(sluice.range(5), sluice.from_table {{x = 1}, {x = 2}},
                           {truncate = true})
      assert.same({0, 1}, collect(q))
    end)

    it("rejects duplicate field names and unknown options", function()
      assert.equal("zip: field 'i' appears in reader 0 and reader 1",
                   misuse(function() sluice.zip(sluice.range(1), sluice.range(1)) end))
      assert.equal("sluice: sluice.zip(): unknown option 'trunc' (known: "
                   .. "truncate)",
                   misuse(function()
                     sluice.zip(sluice.range(1), {trunc = true})
                   end))
    end)
  end)
end)
