-- 28-reshape_spec.lua: reshaping and distributing (issue 19, items 5-7):
-- p:unbatch(), p:rebatch(n), sluice.interleave(sources, {cycle, block,
-- threads}) and p:shard(world, rank, {remainder}), with their lengths and
-- p:state() / p:restore().
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local collect, misuse = H.collect, H.misuse

-- The pass of p as tables of field `f` per sample (each a Lua value, or a
-- table for a tensor).
local function rows(p, f)
  local out = {}
  for s in p:iter() do
    local v = s[f]
    out[#out + 1] = type(v) == "number" and v or v:totable()
  end
  return out
end

-- Reads k samples, saves, builds again, restores: the rest equals the
-- uninterrupted pass (field f).
local function resumes(build, k, f)
  local whole = collect(build(), f)
  local p = build()
  for _ = 1, k do p:next() end
  local state = p:state()
  p:close()
  local q = build()
  q:restore(state)
  local rest = collect(q, f)
  q:close()
  local want = {}
  for i = k + 1, #whole do want[#want + 1] = whole[i] end
  assert.same(want, rest, ("cut %d"):format(k))
end

describe("p:unbatch()", function()
  it("splits batches into their rows", function()
    assert.same({0, 1, 2, 3, 4, 5, 6}, collect(sluice.range(7):batch(3):unbatch()))
    local p = sluice.range(7):batch(3, {drop_last = true}):unbatch()
    assert.equal(6, p:length())
    assert.same({name = "i", dtype = "i64", shape = {}}, p:schema().i)
  end)

  it("splits LoD fields by their offsets, after :batch() without naming them", function()
    local t = {{tok = {1, 2, 3}}, {tok = {4}}, {tok = {}}, {tok = {5, 6}}}
    local src = {{"tok", "i32", {-1}}}
    local p = sluice.from_table(t, src):batch(3):unbatch()
    assert.same({{1, 2, 3}, {4}, {}, {5, 6}}, rows(p, "tok"))
    -- the same, naming them; and naming none is an error naming the field
    p = sluice.from_table(t, src):batch(3):prefetch(2):unbatch{lod = {"tok"}}
    assert.same({{1, 2, 3}, {4}, {}, {5, 6}}, rows(p, "tok"))
    p = sluice.from_table(t, src):batch(3):unbatch{lod = false}
    local ok, err = pcall(p.next, p)
    assert.is_false(ok)
    assert.matches("unbatch: batch 0: field 'tok' carries LoD offsets", err, 1, true)
  end)

  it("refuses bad arguments naming the stage", function()
    assert.matches("unbatch: field 'i' is a scalar",
                   misuse(function() sluice.range(3):unbatch() end), 1, true)
    assert.matches("unbatch: lod field 'x' is not a field",
                   misuse(function() sluice.range(3):batch(2):unbatch{lod = {"x"}} end),
                   1, true)
    assert.equal("sluice: :unbatch(): unknown option 'foo' (known: lod)",
                 misuse(function() sluice.range(3):batch(2):unbatch{foo = 1} end))
  end)

  it("resumes at several cuts", function()
    local function build()
      return sluice.range(17):shuffle(5, {seed = 3}):batch(4):unbatch()
    end
    for _, k in ipairs {0, 1, 3, 4, 5, 9, 16, 17} do resumes(build, k, "i") end
  end)
end)

describe("p:rebatch(n)", function()
  it("re-cuts batches of 4 into batches of 3", function()
    local p = sluice.range(10):batch(4):rebatch(3)
    assert.same({{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}, rows(p, "i"))
    p = sluice.range(10):batch(4, {drop_last = true}):rebatch(3, {drop_last = true})
    assert.equal(2, p:length())
    assert.same({{0, 1, 2}, {3, 4, 5}}, rows(p, "i"))
  end)

  it("keeps LoD fields whole", function()
    local t = {{tok = {1, 2, 3}}, {tok = {4}}, {tok = {}}, {tok = {5, 6}}, {tok = {7}}}
    local p = sluice.from_table(t, {{"tok", "i32", {-1}}}):batch(2):rebatch(3):unbatch()
    assert.same({{1, 2, 3}, {4}, {}, {5, 6}, {7}}, rows(p, "tok"))
  end)

  it("refuses n = 0 and resumes", function()
    assert.equal("sluice: :rebatch(): batch size must be an integer >= 1 (got 0)",
                 misuse(function() sluice.range(3):batch(2):rebatch(0) end))
    local function build() return sluice.range(23):batch(4):rebatch(3) end
    local whole = rows(build(), "i")
    for _, k in ipairs {0, 1, 2, 5, 7} do
      local p = build()
      for _ = 1, k do p:next() end
      local s = p:state()
      local q = build()
      q:restore(s)
      local want = {}
      for i = k + 1, #whole do want[#want + 1] = whole[i] end
      assert.same(want, rows(q, "i"), ("cut %d"):format(k))
    end
  end)
end)

describe("sluice.interleave()", function()
  local function three()
    local function span(first, n)
      local t = {}
      for k = 0, n - 1 do t[#t + 1] = {i = first + k} end
      return sluice.from_table(t)
    end
    return {span(0, 5), span(10, 3), span(20, 4)}
  end

  it("gives tf.data's order for cycle 2, block 2", function()
    -- A = 0..4, B = 10..12, C = 20..23: turns of 2 over slots {A, B}; B ends
    -- after 12 (its slot empties), A after 4, C opens in B's old slot.
    for threads = 0, 2 do
      local p = sluice.interleave(three(), {cycle = 2, block = 2, threads = threads})
      assert.same({0, 1, 10, 11, 2, 3, 12, 4, 20, 21, 22, 23}, collect(p))
      assert.equal(12, p:length())
      p:reset()
      assert.same({0, 1, 10, 11, 2, 3, 12, 4, 20, 21, 22, 23}, collect(p))
    end
  end)

  it("counts its threads against the cycle, not the sources (tf.data)",
     function()
    -- 1100 sources with cycle 10 (more sources than the 1024-thread
    -- ceiling): accepted, and in the order of no threads.
    local function sources()
      local t = {}
      for i = 1, 1100 do
        t[i] = sluice.from_table({{i = 10 * i}, {i = 10 * i + 1}})
      end
      return t
    end
    local plain, ahead = {}, {}
    for s in sluice.interleave(sources(), {cycle = 10}):iter() do
      plain[#plain + 1] = s.i
    end
    for s in sluice.interleave(sources(), {cycle = 10, threads = 1}):iter() do
      ahead[#ahead + 1] = s.i
    end
    assert.equal(2200, #plain)
    assert.same(plain, ahead)
  end)

  it("defaults to every source open, one sample per turn", function()
    local p = sluice.interleave({sluice.range(3), sluice.range(2)})
    assert.same({0, 0, 1, 1, 2}, collect(p))
  end)

  it("opens names lazily", function()
    local dir = H.tmpdir()
    H.write(dir .. "/a.csv", "i\n0\n1\n2\n")
    H.write(dir .. "/b.csv", "i\n10\n11\n")
    local p = sluice.interleave({dir .. "/a.csv", dir .. "/b.csv", dir .. "/a.csv"},
                                {cycle = 2})
    local got = {}
    for s in p:iter() do got[#got + 1] = tonumber(s.i) end
    assert.same({0, 10, 1, 11, 2, 0, 1, 2}, got)
    H.rmdir(dir)
  end)

  it("refuses bad arguments", function()
    assert.equal("sluice: sluice.interleave(): option 'cycle' must be an integer >= 1 (got 0)",
                 misuse(function() sluice.interleave(three(), {cycle = 0}) end))
    assert.equal("sluice: sluice.interleave(): option 'block' must be an integer >= 1 (got 0)",
                 misuse(function() sluice.interleave(three(), {block = 0}) end))
    assert.matches("expects a non%-empty array",
                   misuse(function() sluice.interleave({}) end))
    assert.matches("interleave: reader 1 has schema",
                   misuse(function()
                     sluice.interleave({sluice.range(3), sluice.range(3):batch(2)})
                   end), 1, true)
  end)

  it("resumes at several cuts", function()
    local function build()
      return sluice.interleave(three(), {cycle = 2, block = 2})
    end
    for _, k in ipairs {0, 1, 2, 5, 7, 8, 11, 12} do resumes(build, k, "i") end
  end)
end)

describe("p:shard()", function()
  it("gives sample i to rank i % world", function()
    assert.same({1, 4, 7}, collect(sluice.range(10):shard(3, 1)))
    assert.same({0, 3, 6, 9}, collect(sluice.range(10):shard(3, 0)))
    assert.same({0, 3, 6}, collect(sluice.range(10):shard(3, 0, {remainder = "drop"})))
    assert.same({3, 7, 1}, collect(sluice.range(10):shard(4, 3, {remainder = "pad"})))
    assert.equal(3, sluice.range(10):shard(4, 3, {remainder = "pad"}):length())
  end)

  it("covers the pass over all ranks", function()
    for _, rem in ipairs {"uneven", "drop", "pad"} do
      local count, total = {}, 0
      for r = 0, 3 do
        for _, v in ipairs(collect(sluice.range(10):shard(4, r, {remainder = rem}))) do
          count[v] = (count[v] or 0) + 1
          total = total + 1
        end
      end
      local want = ({uneven = 10, drop = 8, pad = 12})[rem]
      assert.equal(want, total, rem)
      for i = 0, 9 do
        local w = 1
        if rem == "drop" and i >= 8 then w = nil end
        if rem == "pad" and i < 2 then w = 2 end
        assert.equal(w, count[i], rem .. " " .. i)
      end
    end
  end)

  it("takes world and rank from the environment", function()
    local rank, world = sluice.shard_env()
    local p = sluice.range(6):shard()
    local want = {}
    for i = rank, 5, world do want[#want + 1] = i end
    assert.same(want, collect(p))
    assert.same(want, collect(sluice.range(6):shard({remainder = "uneven"})))
  end)

  it("refuses bad arguments", function()
    assert.equal("sluice: :shard(): rank 2 is not in [0, world 2)",
                 misuse(function() sluice.range(3):shard(2, 2) end))
    assert.equal("sluice: :shard(): option 'remainder' must be \"uneven\", \"drop\" or \"pad\" (got odd)",
                 misuse(function() sluice.range(3):shard(2, 0, {remainder = "odd"}) end))
    assert.matches("remainder \"pad\" needs the length",
                   misuse(function()
                     sluice.range(3):filter(function() return true end)
                       :shard(2, 0, {remainder = "pad"})
                   end), 1, true)
  end)

  it("resumes at several cuts", function()
    for _, rem in ipairs {"uneven", "drop", "pad"} do
      local function build()
        return sluice.range(14):shard(4, 3, {remainder = rem})
      end
      for _, k in ipairs {0, 1, 2, 3} do resumes(build, k, "i") end
    end
  end)
end)
