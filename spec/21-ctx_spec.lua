-- 21-ctx_spec.lua: randomness a Lua decorator can reproduce (docs/LUA.md,
-- "Randomness"): ctx = {seed, epoch, index, rng} for map, filter and the
-- text parser when the function declares a second parameter; the same
-- outputs for any thread count, ordered or not, after a reset and in a new
-- process; the pipeline seed from open_files; sluice.rng's draws.
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse = H.misuse

local CLI = os.getenv("SLUICE_CLI")

-- A random decorator: four kinds of draws, keyed by the input's i.
local function noisy(s, ctx)
  local r = ctx.rng
  s.u = r:random()
  s.k = r:random(1000)
  s.m = r:random(-5, 5)
  s.n = r:normal()
  s.ix = ctx.index
  s.ep = ctx.epoch
  return s
end

-- {[i] = "u k m n ix ep"} over one pass (%a: the exact bits of a double).
local function by_i(p)
  local out, n = {}, 0
  for s in p:iter() do
    out[tonumber(s.i)] = ("%a %d %d %a %d %d"):format(s.u, s.k, s.m, s.n,
                                                     s.ix, s.ep)
    n = n + 1
  end
  return out, n
end

local N = 500

describe("ctx in Lua decorators", function()
  it("gives the same draws for 1, 2 and 4 threads, ordered or not", function()
    local base, n = by_i(sluice.range(N):map(noisy, {seed = 7}))
    assert.equal(N, n)
    for _, threads in ipairs({1, 2, 4}) do
      for _, ordered in ipairs({true, false}) do
        local got, m = by_i(sluice.range(N):map(noisy, {
          seed = 7, threads = threads, ordered = ordered, queue = 8}))
        assert.equal(N, m)
        assert.same(base, got, ("threads %d ordered %s"):format(threads,
                                                                 tostring(ordered)))
      end
    end
  end)

  it("gives the same draws under a deadline (the decorator interpreted)", function()
    local base = by_i(sluice.range(100):map(noisy, {seed = 7}))
    assert.same(base, by_i(sluice.range(100):map(noisy, {
      seed = 7, threads = 2, deadline = 10})))
  end)

  it("gives ctx.index = the position in the pass and ctx.seed", function()
    local seen = {}
    local p = sluice.range(20):map(function(s, ctx)
      s.ix = ctx.index
      s.sd = ctx.seed
      return s
    end, {seed = 2^40 + 3, threads = 3})
    for s in p:iter() do
      assert.equal(tonumber(s.i), s.ix)
      assert.equal(2^40 + 3, s.sd)
      seen[#seen + 1] = s.ix
    end
    assert.equal(20, #seen)
  end)

  it("differs between epochs and seeds; a reset and a rebuild reproduce", function()
    local p = sluice.range(N):map(noisy, {seed = 7, threads = 2})
    local e0 = by_i(p)
    p:reset()
    local e1 = by_i(p)
    p:reset()
    local e2 = by_i(p)
    local same01, same12 = 0, 0
    for i = 0, N - 1 do
      assert.equal(0, tonumber(e0[i]:match("(%-?%d+)$")))
      assert.equal(1, tonumber(e1[i]:match("(%-?%d+)$")))
      if e0[i]:match("^%S+") == e1[i]:match("^%S+") then same01 = same01 + 1 end
      if e1[i]:match("^%S+") == e2[i]:match("^%S+") then same12 = same12 + 1 end
    end
    assert.equal(0, same01)
    assert.equal(0, same12)
    -- a new pipeline from epoch 1 gives what the first one's second pass gave
    assert.same(e0, by_i(sluice.range(N):map(noisy, {seed = 7, threads = 4})))
    assert.same(e1, by_i(sluice.range(N):map(noisy, {seed = 7, epoch = 1})))
    -- another seed, other draws
    local other = by_i(sluice.range(N):map(noisy, {seed = 8}))
    local same = 0
    for i = 0, N - 1 do
      if other[i]:match("^%S+") == e0[i]:match("^%S+") then same = same + 1 end
    end
    assert.equal(0, same)
  end)

  it("draws what sluice.rng(seed, epoch, index) draws", function()
    local p = sluice.range(50):map(noisy, {seed = 11, epoch = 4, threads = 2})
    for s in p:iter() do
      local r = sluice.rng(11, 4, tonumber(s.i))
      assert.equal(r:random(), s.u)
      assert.equal(r:random(1000), s.k)
      assert.equal(r:random(-5, 5), s.m)
      assert.equal(r:normal(), s.n)
    end
  end)

  it("numbers the samples a stage receives: ctx.index under a filter upstream", function()
    local p = sluice.range(100)
      :filter(function(s) return s.i % 3 == 0 end, {threads = 2})
      :map(function(s, ctx)
        s.ix = ctx.index
        s.u = ctx.rng:random()
        return s
      end, {seed = 3, threads = 4, ordered = false})
    local got = {}
    for s in p:iter() do got[tonumber(s.i)] = {s.ix, s.u} end
    local k = 0
    for i = 0, 99, 3 do
      assert.equal(k, got[i][1])
      assert.equal(sluice.rng(3, 0, k):random(), got[i][2])
      k = k + 1
    end
  end)

  it("keeps the same samples in a random filter for any thread count", function()
    local function kept(threads, ordered)
      local p = sluice.range(N):filter(function(_, ctx)
        return ctx.rng:random() < 0.3
      end, {seed = 5, threads = threads, ordered = ordered})
      local out = {}
      for s in p:iter() do out[#out + 1] = tonumber(s.i) end
      table.sort(out)
      return out
    end
    local base = kept(1, true)
    assert.is_true(#base > 100 and #base < 200)
    assert.same(base, kept(2, true))
    assert.same(base, kept(4, false))
  end)

  it("gives a text parser ctx (index: the line's position in the pass)", function()
    local dir = H.tmpdir()
    H.write(dir .. "/a.txt", "x\ny\nz\n")
    local p = sluice.open("text:" .. dir .. "/a.txt", {parser = function(_, ctx)
      return {ix = ctx.index, u = ctx.rng:random()}
    end})
    local k = 0
    for s in p:iter() do
      assert.equal(k, s.ix)
      assert.equal(sluice.rng(0, 0, k):random(), s.u)
      k = k + 1
    end
    assert.equal(3, k)
    H.rmdir(dir)
  end)

  it("passes nothing to a function with one parameter", function()
    local p = sluice.range(5):map(function(s, ...)
      s.nargs = select("#", ...)
      return s
    end)
    for s in p:iter() do assert.equal(1, s.nargs) end
    p = sluice.range(5):map(function(s)
      s.i = s.i + 1
      return s
    end, {threads = 2})
    assert.same({1, 2, 3, 4, 5}, H.collect(p))
  end)

  it("checks the seed and epoch options before taking the pipeline", function()
    local p = sluice.range(3)
    assert.matches("option 'seed' must be an integer in %[0, 2%^64%)",
                   misuse(function() p:map(noisy, {seed = -1}) end))
    assert.matches("option 'epoch' must be an integer in %[0, 2%^53%)",
                   misuse(function() p:filter(noisy, {epoch = 0.5}) end))
    assert.equal(3, #H.collect(p)) -- still usable
    -- a uint64_t seed beyond 2^53
    local q = sluice.range(2):map(function(s, ctx)
      s.u = ctx.rng:random()
      s.big = ctx.seed == 0xFFFFFFFFFFFFFFFFULL and 1 or 0
      return s
    end, {seed = 0xFFFFFFFFFFFFFFFFULL})
    for s in q:iter() do
      assert.equal(1, s.big)
      assert.equal(sluice.rng(0xFFFFFFFFFFFFFFFFULL, 0, tonumber(s.i)):random(),
                   s.u)
    end
  end)

  it("draws the same in a new process", function()
    local luajit = "luajit"
    for i = -1, -10, -1 do
      if arg and arg[i] and arg[i]:match("luajit") then luajit = arg[i] break end
    end
    local dir = H.tmpdir()
    H.write(dir .. "/draw.lua", [[
local sluice = require "sluice"
local p = sluice.range(200):map(function(s, ctx)
  s.u = ctx.rng:random()
  s.n = ctx.rng:normal()
  return s
end, {seed = 99, threads = tonumber(arg[1]), ordered = false})
local out = {}
for s in p:iter() do out[tonumber(s.i) + 1] = ("%a %a"):format(s.u, s.n) end
io.write(table.concat(out, "\n"))
]])
    local function run(threads)
      local f = assert(io.popen(("'%s' '%s/draw.lua' %d"):format(luajit, dir,
                                                                  threads)))
      local text = f:read("*a")
      assert(f:close())
      return text
    end
    local a, b = run(1), run(4)
    H.rmdir(dir)
    assert.equal(200, select(2, a:gsub("\n", "")) + 1)
    assert.equal(a, b)
    local here = {}
    for i = 0, 199 do
      local r = sluice.rng(99, 0, i)
      here[i + 1] = ("%a %a"):format(r:random(), r:normal())
    end
    assert.equal(table.concat(here, "\n"), a)
  end)

  describe("the pipeline seed", function()
    local dir, files
    setup(function()
      dir = H.tmpdir()
      local cli = CLI or (H.build_dir() .. "/tools/sluice")
      local t = {}
      for i = 1, 40 do t[i] = ("r%d"):format(i) end
      H.write(dir .. "/a.txt", table.concat(t, "\n"))
      files = {dir .. "/a.slr"}
      assert(os.execute(("'%s' pack text '%s' -o '%s' --records-per-chunk 8 -q")
                        :format(cli, dir .. "/a.txt", files[1])))
    end)
    teardown(function() H.rmdir(dir) end)

    local function ctx_of(p)
      local out = {}
      for s in p:iter() do out[#out + 1] = {s.sd, s.ep} end
      return out
    end
    local function note(s, ctx)
      s.sd, s.ep = ctx.seed, ctx.epoch
      return s
    end

    it("flows from open_files{seed =, epoch =} to the stages below", function()
      local p = sluice.open_files(files, {seed = 42, epoch = 3})
        :shuffle(16):map(note, {threads = 2})
      local got = ctx_of(p)
      assert.equal(40, #got)
      assert.same({42, 3}, got[1])
      p:reset()
      assert.same({42, 4}, ctx_of(p)[1])
      -- a stage's own options win
      p = sluice.open_files(files, {seed = 42, epoch = 3})
        :filter(function() return true end):map(note, {seed = 1, epoch = 0})
      assert.same({1, 0}, ctx_of(p)[1])
      -- without a pipeline seed: 0 and 0
      assert.same({0, 0}, ctx_of(sluice.range(2):map(note))[1])
    end)

    it("is shuffle's seed when it has none of its own", function()
      local function order(p)
        local out = {}
        for s in p:iter() do out[#out + 1] = s.text end
        return table.concat(out, " ")
      end
      local a = order(sluice.open_files(files, {seed = 42}):shuffle(16))
      local b = order(sluice.open_files(files, {seed = 42}):shuffle(16, {seed = 42}))
      local c = order(sluice.open_files(files, {seed = 42}):shuffle(16, {seed = 0}))
      assert.equal(a, b)
      assert.not_equal(a, c)
    end)
  end)
end)

describe("sluice.rng", function()
  it("pins the stream of core/rng.h (random_crop_flip's generator)", function()
    -- Computed in C with core/rng.h: key = mix(mix(seed) ^ mix(e + G) ^
    -- mix(i + 2G)), xoshiro256** seeded by splitmix64 from key; the first
    -- output, then sl__rng_bounded(7), then sl__rng_bounded(3000000021).
    local cases = {
      {0, 0, 0, 16862121147060536277ULL, 6, 1220066220},
      {42, 0, 0, 17980937573298872028ULL, 3, 2916756089},
      {42, 1, 2, 7834600172890331304ULL, 0, 2482804505},
      {0xFFFFFFFFFFFFFFFFULL, 1, 2, 7617300618491344300ULL, 3, 2375921091},
    }
    for _, c in ipairs(cases) do
      local r = sluice.rng(c[1], c[2], c[3])
      assert.equal(c[4], r:bits())
      assert.equal(c[5], r:random(0, 6))
      assert.equal(c[6], r:random(0, 3000000020))
    end
  end)

  it("is random_crop_flip's generator: the same draws for the same key", function()
    local HT, W = 8, 10
    local rows = {}
    for k = 1, 30 do
      local t = sluice.tensor("u8", {HT, W, 1})
      for y = 0, HT - 1 do
        for x = 0, W - 1 do t.data[y * W + x] = y * 16 + x end
      end
      rows[k] = {image = t}
    end
    local p = sluice.from_table(rows)
      :random_crop_flip{size = {3, 4}, seed = 9, epoch = 2}
    local i, flips = 0, 0
    for s in p:iter() do
      local r = sluice.rng(9, 2, i)
      local top, left = r:random(0, HT - 3), r:random(0, W - 4)
      local flip = bit.rshift(r:bits(), 63) == 1ULL
      local d = s.image.data
      assert.equal(top * 16 + left + (flip and 3 or 0), d[0])
      assert.equal(top * 16 + left + (flip and 0 or 3), d[3])
      if flip then flips = flips + 1 end
      i = i + 1
    end
    assert.equal(30, i)
    assert.is_true(flips > 5 and flips < 25)
  end)

  it("draws in range and roughly uniformly", function()
    local K, counts = 60000, {}
    local sum, lo, hi = 0, 1, 0
    for i = 0, K - 1 do
      local r = sluice.rng(1, 0, i)
      local u = r:random()
      assert.is_true(u >= 0 and u < 1)
      sum = sum + u
      if u < lo then lo = u end
      if u > hi then hi = u end
      local d = r:random(6)
      counts[d] = (counts[d] or 0) + 1
      local m = r:random(-3, 3)
      assert.is_true(m >= -3 and m <= 3 and m == math.floor(m))
      assert.equal(5, r:random(5, 5))
    end
    assert.is_true(math.abs(sum / K - 0.5) < 0.01)
    assert.is_true(lo < 0.001 and hi > 0.999)
    for d = 1, 6 do assert.is_true(math.abs(counts[d] / K - 1 / 6) < 0.01, d) end
    assert.is_nil(counts[0])
    assert.is_nil(counts[7])
    -- big ranges
    local r = sluice.rng(1, 2, 3)
    for _ = 1, 100 do
      local v = r:random(2^53)
      assert.is_true(v >= 1 and v <= 2^53)
    end
  end)

  it("draws normals with mean 0 and variance 1", function()
    local K, s1, s2 = 40000, 0, 0
    local r = sluice.rng(5, 0, 0)
    for _ = 1, K do
      local z = r:normal()
      s1, s2 = s1 + z, s2 + z * z
    end
    local mean, var = s1 / K, s2 / K - (s1 / K) ^ 2
    assert.is_true(math.abs(mean) < 0.03, mean)
    assert.is_true(math.abs(var - 1) < 0.05, var)
    local z = sluice.rng(5, 0, 1):normal(10, 2)
    assert.equal(10 + 2 * sluice.rng(5, 0, 1):normal(), z)
  end)

  it("refuses empty or non-integer intervals", function()
    local r = sluice.rng(1)
    local function fails(f, pattern)
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    fails(function() r:random(0) end, "rng:random%(%): interval is empty")
    fails(function() r:random(3, 2) end, "rng:random%(%): interval is empty")
    fails(function() r:random(1.5) end, "n must be an integer")
    fails(function() r:random(0, 2^53) end, "interval is too large")
    fails(function() sluice.rng(-1) end, "seed must be an integer")
  end)

  -- issue 19, failure 4: before, every worker state started math.random
  -- from one seed, so a 4-thread map drew the same values over and over.
  it("seeds math.random differently in each worker state", function()
    local draws, seen, dup = {}, {}, 0
    local p = sluice.range(2000):map(function(s)
      s.r = math.random()
      return s
    end, {threads = 4, queue = 8})
    for s in p:iter() do
      local r = s.r
      if seen[r] then dup = dup + 1 end
      seen[r] = true
      draws[#draws + 1] = r
    end
    assert.equal(2000, #draws)
    assert.equal(0, dup)
    -- two stages of one pipeline (other source lines) draw differently too
    local a = sluice.range(1):map(function(s) s.r = math.random() return s end)
    local b = sluice.range(1):map(function(s) s.r = math.random() return s end)
    assert.are_not.equal(a:next().r, b:next().r)
  end)
end)
