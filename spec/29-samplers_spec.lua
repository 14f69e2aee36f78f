-- 29-samplers_spec.lua: PyTorch's samplers and splits (issue 19, item 8):
-- p:weighted_sample (WeightedRandomSampler), p:subset (Subset) and
-- sluice.random_split (random_split), over sources with random access
-- (src/stages/sampler.c).  Positions and indices are 0-based, as
-- sluice's positions and ctx.index.
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local collect, misuse = H.collect, H.misuse
local CLI = os.getenv("SLUICE_CLI")

local function sorted(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  return c
end

-- Two passes of build() read whole, against the same read cut at each of
-- `cuts` samples, saved, closed and restored into a fresh build(): the
-- same samples (field i) in the same order.
local function resumes_exactly(build, cuts)
  local ref, whole = build(), {}
  for _ = 1, 2 do
    for _, v in ipairs(collect(ref)) do whole[#whole + 1] = v end
    ref:reset()
  end
  for _, cut in ipairs(cuts) do
    local p, got = build(), {}
    for _ = 1, cut do
      local s = p:next()
      if not s then p:reset() s = p:next() end
      got[#got + 1] = s.i
    end
    local st = p:state()
    p:close()
    local q = build()
    q:restore(st)
    while #got < #whole do
      local s = q:next()
      if not s then q:reset() s = q:next() end
      got[#got + 1] = s.i
    end
    assert.same(whole, got)
  end
end

describe("p:weighted_sample(weights, opts)", function()
  it("draws index i with probability weights[i] / sum", function()
    local w = {1, 2, 0, 3, 4}
    local p = sluice.range(5):weighted_sample(w, {num_samples = 100000,
                                                  seed = 3})
    assert.equal(100000, p:length())
    local count = {[0] = 0, 0, 0, 0, 0}
    for s in p:iter() do count[s.i] = count[s.i] + 1 end
    assert.equal(0, count[2])
    for i = 0, 4 do
      assert.is_true(math.abs(count[i] / 100000 - w[i + 1] / 10) < 0.01)
    end
  end)

  it("yields the upstream's length by default, with replacement", function()
    local p = sluice.range(6):weighted_sample({1, 1, 1, 1, 1, 1})
    assert.equal(6, p:length())
    assert.equal(6, #collect(p))
  end)

  it("draws each index at most once without replacement", function()
    local w = {}
    for i = 1, 30 do w[i] = i % 3 == 0 and 0 or i end -- 20 nonzero
    local p = sluice.range(30):weighted_sample(w, {replacement = false,
                                                   num_samples = 20,
                                                   seed = 1})
    for _ = 1, 3 do
      local got = collect(p)
      assert.equal(20, #got)
      local seen = {}
      for _, v in ipairs(got) do
        assert.is_nil(seen[v])
        assert.is_true(w[v + 1] > 0)
        seen[v] = true
      end
      p:reset()
    end
  end)

  it("repeats by seed and changes by pass", function()
    local function passes(seed)
      local p = sluice.range(50):weighted_sample(
        (function() local w = {} for i = 1, 50 do w[i] = 1 + i % 7 end
         return w end)(), {seed = seed})
      local a = collect(p)
      p:reset()
      return a, collect(p)
    end
    local a1, b1 = passes(7)
    local a2, b2 = passes(7)
    local a3 = passes(8)
    assert.same(a1, a2)
    assert.same(b1, b2)
    assert.are_not.same(a1, b1)
    assert.are_not.same(a1, a3)
  end)

  it("resets mid-pass into the next pass", function()
    local w = {1, 2, 3, 4, 5, 6, 7, 8}
    local p = sluice.range(8):weighted_sample(w, {num_samples = 20, seed = 2})
    local ref = sluice.range(8):weighted_sample(w, {num_samples = 20, seed = 2})
    p:next(); p:next()
    p:reset()
    collect(ref)
    ref:reset()
    assert.same(collect(ref), collect(p))
  end)

  it("is empty over an empty source", function()
    local p = sluice.range(0):weighted_sample({})
    assert.is_nil(p:next())
    assert.equal(0, p:length())
  end)

  it("refuses bad arguments, naming the stage and the value", function()
    assert.equal("sluice: :weighted_sample(): 3 weights for a pipeline of 4 "
                 .. "samples (one weight per sample)",
                 misuse(function() sluice.range(4):weighted_sample({1, 1, 1}) end))
    assert.equal("sluice: :weighted_sample(): weights must be an array of "
                 .. "numbers (got a nil)",
                 misuse(function() sluice.range(4):weighted_sample() end))
    assert.equal("sluice: :weighted_sample(): entry 2 of weights must be a "
                 .. "number (got a string)",
                 misuse(function() sluice.range(2):weighted_sample({1, "x"}) end))
    assert.matches("weighted_sample: the 2nd weight must be a finite number >= 0 (got -1)",
                   misuse(function() sluice.range(2):weighted_sample({1, -1}) end),
                   1, true)
    assert.matches("the 1st weight must be a finite number >= 0 (got NaN)",
                   misuse(function() sluice.range(2):weighted_sample({0 / 0, 1}) end),
                   1, true)
    assert.matches("weighted_sample: all 3 weights are 0",
                   misuse(function() sluice.range(3):weighted_sample({0, 0, 0}) end),
                   1, true)
    assert.matches("num_samples 3 without replacement needs as many nonzero "
                   .. "weights, there are 2",
                   misuse(function()
                     sluice.range(4):weighted_sample({1, 0, 1, 0},
                       {replacement = false, num_samples = 3})
                   end), 1, true)
    assert.equal("sluice: :weighted_sample(): option 'num_samples' must be an "
                 .. "integer >= 1 (got 0)",
                 misuse(function()
                   sluice.range(2):weighted_sample({1, 1}, {num_samples = 0})
                 end))
    assert.matches("unknown option 'replace'",
                   misuse(function()
                     sluice.range(2):weighted_sample({1, 1}, {replace = false})
                   end), 1, true)
    -- Misuse checked in Lua leaves the pipeline usable.
    local p = sluice.range(3)
    pcall(function() p:weighted_sample({1}) end)
    assert.equal(3, p:length())
  end)

  it("needs random access: a map is refused, a cache gives it", function()
    local msg = misuse(function()
      sluice.range(4):map(function(s) return s end):weighted_sample({1, 1, 1, 1})
    end)
    assert.matches("weighted_sample: its upstream 'map", msg, 1, true)
    assert.matches(":cache()", msg, 1, true)
    local w = {1, 2, 3, 4}
    local a = collect(sluice.range(4):map(function(s) s.i = s.i * 10 return s end)
                        :cache():weighted_sample(w, {num_samples = 30, seed = 4}))
    local b = collect(sluice.range(4):weighted_sample(w, {num_samples = 30,
                                                         seed = 4}))
    for k = 1, 30 do assert.equal(b[k] * 10, a[k]) end
  end)

  it("saves and restores its position at several cuts", function()
    local w = {}
    for i = 1, 20 do w[i] = i % 4 end
    resumes_exactly(function()
      return sluice.range(20):weighted_sample(w, {num_samples = 15, seed = 9})
    end, {0, 1, 7, 14, 15, 16, 29})
  end)
end)

describe("p:subset(indices)", function()
  it("yields the samples at the 0-based indices in their order", function()
    local p = sluice.range(10):subset({7, 0, 3, 3, 9})
    assert.equal(5, p:length())
    assert.same({7, 0, 3, 3, 9}, collect(p))
    p:reset()
    assert.same({7, 0, 3, 3, 9}, collect(p))
    assert.same({}, collect(sluice.range(10):subset({})))
    assert.same({"c", "a"},
                collect(sluice.from_table({{x = "a"}, {x = "b"}, {x = "c"}})
                          :subset({2, 0}), "x"))
  end)

  it("refuses out-of-range and non-integer indices, naming them", function()
    assert.matches("subset: index 10 (the 2nd) is out of range: the upstream "
                   .. "has 10 samples (indices are 0-based)",
                   misuse(function() sluice.range(10):subset({1, 10}) end),
                   1, true)
    assert.equal("sluice: :subset(): entry 1 of indices must be an integer >= 0 "
                 .. "(got -1)",
                 misuse(function() sluice.range(10):subset({-1}) end))
    assert.equal("sluice: :subset(): entry 2 of indices must be an integer >= 0 "
                 .. "(got 1.5)",
                 misuse(function() sluice.range(10):subset({1, 1.5}) end))
  end)

  it("resets and closes mid-pass", function()
    local p = sluice.range(5):subset({4, 3, 2, 1, 0})
    assert.equal(4, p:next().i)
    p:reset()
    assert.same({4, 3, 2, 1, 0}, collect(p))
    p:reset()
    p:next()
    p:close()
    assert.matches("closed", misuse(function() p:next() end), 1, true)
  end)

  it("saves and restores", function()
    local p = sluice.range(10):subset({9, 8, 1, 2})
    p:next()
    local st = p:state()
    local q = sluice.range(10):subset({9, 8, 1, 2})
    q:restore(st)
    assert.same({8, 1, 2}, collect(q))
    local other = sluice.range(10):subset({9, 8, 1, 3})
    assert.matches("subset", misuse(function() other:restore(st) end), 1, true)
  end)
end)

describe("sluice.random_split(source, sizes, opts)", function()
  local function check_partition(parts, n)
    local seen, total = {}, 0
    for _, p in ipairs(parts) do
      for _, v in ipairs(collect(p)) do
        assert.is_nil(seen[v])
        seen[v] = true
        total = total + 1
      end
    end
    assert.equal(n, total)
  end

  it("partitions by PyTorch's rounding: floor, then round-robin", function()
    local a, b, c = sluice.random_split(sluice.range(11), {0.3, 0.3, 0.4})
    assert.same({4, 3, 4}, {a:length(), b:length(), c:length()})
    check_partition({a, b, c}, 11)
    local x, y = sluice.random_split(sluice.range(10), {0.8, 0.2}, {seed = 1})
    assert.same({8, 2}, {x:length(), y:length()})
    check_partition({x, y}, 10)
    local parts = {sluice.random_split(sluice.range(10), {3, 0, 7})}
    assert.equal(3, #parts)
    assert.same({3, 0, 7}, {parts[1]:length(), parts[2]:length(),
                            parts[3]:length()})
    check_partition(parts, 10)
  end)

  it("gives the same split for the same seed, another for another", function()
    local function split(seed)
      local a, b = sluice.random_split(sluice.range(50), {0.5, 0.5},
                                       {seed = seed})
      return collect(a), collect(b)
    end
    local a1, b1 = split(3)
    local a2, b2 = split(3)
    local a3 = split(4)
    assert.same(a1, a2)
    assert.same(b1, b2)
    assert.are_not.same(a1, a3)
    assert.are_not.same(a1, sorted(a1)) -- permuted, not in order
  end)

  it("makes independent pipelines over one source", function()
    local a, b = sluice.random_split(sluice.range(20), {0.5, 0.5}, {seed = 2})
    local all_a = collect(a)
    a:reset()
    local first = a:next().i
    local all_b = collect(b) -- b reads while a is mid-pass
    assert.equal(10, #all_b)
    assert.equal(all_a[1], first)
    b:close()
    local rest = collect(a)
    assert.same({unpack(all_a, 2)}, rest)
    -- A split can be decorated, sampled and batched like any pipeline.
    local ws = a:weighted_sample({1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
                                 {num_samples = 5}):batch(5)
    assert.equal(1, ws:length())
  end)

  it("saves and restores each split", function()
    local function parts()
      return sluice.random_split(sluice.range(12), {0.5, 0.5}, {seed = 5})
    end
    local a = parts()
    local want = collect(a)
    local a2 = parts()
    a2:next(); a2:next()
    local st = a2:state()
    local a3, b3 = parts()
    a3:restore(st)
    assert.same({unpack(want, 3)}, collect(a3))
    assert.matches("random_split", misuse(function() b3:restore(st) end), 1,
                   true)
  end)

  it("refuses bad sizes, naming them", function()
    assert.matches("random_split: sizes sum to 9, the source has 10 samples",
                   misuse(function() sluice.random_split(sluice.range(10), {4, 5}) end),
                   1, true)
    assert.matches("random_split: the 1st size is 0.5",
                   misuse(function()
                     sluice.random_split(sluice.range(10), {0.5, 0.4})
                   end), 1, true)
    assert.equal("sluice: sluice.random_split(): needs at least one size",
                 misuse(function() sluice.random_split(sluice.range(10), {}) end))
    assert.equal("sluice: sluice.random_split(): sizes must be an array of "
                 .. "numbers (got a nil)",
                 misuse(function() sluice.random_split(sluice.range(10)) end))
    assert.matches("unknown option 'sead'",
                   misuse(function()
                     sluice.random_split(sluice.range(10), {1}, {sead = 1})
                   end), 1, true)
  end)

  it("splits an empty source into empty pipelines", function()
    local a, b = sluice.random_split(sluice.range(0), {0.5, 0.5})
    assert.is_nil(a:next())
    assert.is_nil(b:next())
  end)
end)

describe("samplers over an SLR file", function()
  local dir, file
  setup(function()
    dir = H.tmpdir()
    local cli = CLI or (H.build_dir() .. "/tools/sluice")
    local t = {}
    for i = 1, 40 do t[i] = ("r%d"):format(i - 1) end
    H.write(dir .. "/a.txt", table.concat(t, "\n"))
    file = dir .. "/a.slr"
    assert(os.execute(("'%s' pack text '%s' -o '%s' --records-per-chunk 8 -q")
                      :format(cli, dir .. "/a.txt", file)))
  end)
  teardown(function() H.rmdir(dir) end)

  it("weighted_sample keeps what its draws decode, as its cache option says", function()
    local w = {}
    for i = 1, 40 do w[i] = 1 + i % 3 end
    local function draws(opts)
      opts.num_samples, opts.seed = 50, 8
      return collect(sluice.open(file):weighted_sample(w, opts), "text")
    end
    local a = draws({})
    assert.equal(50, #a)
    assert.same(a, draws({cache = false}))
    assert.same(a, draws({cache = "1MiB"}))
    assert.matches(":weighted_sample%(%): cache: a size must be",
                   misuse(function() draws({cache = -1}) end))
  end)

  it("reads records by position", function()
    assert.same({"r39", "r0", "r8"},
                collect(sluice.open(file):subset({39, 0, 8}), "text"))
    local w = {}
    for i = 1, 40 do w[i] = i > 30 and 1 or 0 end
    local got = collect(sluice.open(file):weighted_sample(w,
      {replacement = false, num_samples = 10}), "text")
    local want = {}
    for i = 31, 40 do want[#want + 1] = ("r%d"):format(i - 1) end
    table.sort(want)
    assert.same(want, sorted(got))
    -- The pipeline seed (open_files{seed =}) when none is given.
    local function drawn(seed_opt)
      return collect(sluice.open_files({file}, {seed = 42}):cache()
                       :weighted_sample(w, {seed = seed_opt}), "text")
    end
    assert.same(drawn(42), drawn(nil))
    assert.are_not.same(drawn(41), drawn(nil))
    local tr, va = sluice.random_split(sluice.open(file), {0.75, 0.25})
    assert.equal(30, #collect(tr, "text"))
    assert.equal(10, #collect(va, "text"))
  end)

  it("global_shuffle reads a set of files as one data set", function()
    local cli = CLI or (H.build_dir() .. "/tools/sluice")
    local t = {}
    for i = 1, 25 do t[i] = ("s%d"):format(i - 1) end
    H.write(dir .. "/b.txt", table.concat(t, "\n"))
    assert(os.execute(("'%s' pack text '%s' -o '%s' --records-per-chunk 8 -q")
                      :format(cli, dir .. "/b.txt", dir .. "/b.slr")))
    local p = sluice.open(dir .. "/*.slr"):global_shuffle({seed = 3})
    assert.equal(65, p:length())
    local want = {}
    for i = 1, 40 do want[#want + 1] = ("r%d"):format(i - 1) end
    for i = 1, 25 do want[#want + 1] = ("s%d"):format(i - 1) end
    table.sort(want)
    local a = collect(p, "text")
    assert.same(want, sorted(a))
    p:reset()
    assert.are_not.same(a, collect(p, "text"))
  end)

  it("sluice.open(name, {shuffle = \"global\"}) is :global_shuffle", function()
    local a = collect(sluice.open(dir .. "/*.slr",
                                  {shuffle = "global", seed = 5}), "text")
    assert.same(collect(sluice.open(dir .. "/*.slr")
                          :global_shuffle({seed = 5}), "text"), a)
    local r0 = collect(sluice.open(file, {shuffle = "global", seed = 5,
      shard = {rank = 0, world = 2}}), "text")
    assert.equal(20, #r0)
    assert.matches("rank 2 is not in %[0, 2%)",
                   misuse(function()
                     sluice.open(file, {shuffle = "global",
                                        shard = {rank = 2, world = 2}})
                   end))
    -- the frame cache changes the cost, not the order
    for _, cache in ipairs({false, "64MiB", 1}) do
      assert.same(a, collect(sluice.open(dir .. "/*.slr",
        {shuffle = "global", seed = 5, cache = cache}), "text"))
    end
    -- so do threads: the same samples in the same order
    for _, threads in ipairs({1, 2, "auto"}) do
      assert.same(a, collect(sluice.open(dir .. "/*.slr",
        {shuffle = "global", seed = 5, threads = threads}), "text"))
    end
    assert.matches("global_shuffle%(%): option 'threads' must be",
                   misuse(function()
                     sluice.open(file, {shuffle = "global", threads = "x"})
                   end))
    assert.matches("global_shuffle%(%): cache: a size must be",
                   misuse(function()
                     sluice.open(file, {shuffle = "global", cache = "lots"})
                   end))
    assert.equal("sluice: sluice.open(): unknown option 'shufle' (known: "
                 .. "buffer, channels, chunks, columns, compression, count, "
                 .. "delimiter, features, field, fields, first, header, "
                 .. "labels, max_bad, max_bad_chunks, max_chunk_bytes, "
                 .. "missing, mmap, ordered, parser, parser_options, policy, "
                 .. "resize, schema, seed, shape, shard, shuffle, threads, "
                 .. "window)",
                 misuse(function() sluice.open(file, {shufle = 1}) end))
  end)
end)

describe("p:global_shuffle(opts)", function()
  it("yields every sample once per pass, in a new order each pass", function()
    local p = sluice.range(200):global_shuffle({seed = 4})
    assert.equal(200, p:length())
    local passes = {}
    for pass = 1, 3 do
      passes[pass] = collect(p)
      assert.same(collect(sluice.range(200)), sorted(passes[pass]))
      p:reset()
    end
    local same = 0
    for i = 1, 200 do
      if passes[1][i] == passes[2][i] then same = same + 1 end
    end
    assert.is_true(same < 20)
    -- the same seed, the same passes
    assert.same(passes[1], collect(sluice.range(200):global_shuffle({seed = 4})))
  end)

  it("splits each pass between ranks with equal counts", function()
    local all = {}
    for rank = 0, 2 do
      local p = sluice.range(10):global_shuffle(
        {seed = 1, shard = {rank = rank, world = 3, remainder = "drop"}})
      local got = collect(p)
      assert.equal(3, #got)
      assert.equal(3, p:length())
      for _, v in ipairs(got) do all[#all + 1] = v end
    end
    local seen = {}
    for _, v in ipairs(all) do
      assert.is_nil(seen[v])
      seen[v] = true
    end
  end)

  it("refuses bad options and upstreams without random access", function()
    assert.matches("global_shuffle%(%): unknown option 'sed'",
                   misuse(function()
                     sluice.range(4):global_shuffle({sed = 1})
                   end))
    assert.matches("rank 3 is not in %[0, 3%)",
                   misuse(function()
                     sluice.range(4):global_shuffle(
                       {shard = {rank = 3, world = 3}})
                   end))
    assert.matches("global_shuffle: its upstream 'map' has no random access",
                   misuse(function()
                     sluice.range(4):map(function(s) return s end)
                       :global_shuffle()
                   end))
  end)

  it("saves and restores its position without replay", function()
    resumes_exactly(function()
      return sluice.range(30):global_shuffle({seed = 2})
    end, {0, 1, 13, 29, 30, 31, 45})
    resumes_exactly(function()
      return sluice.range(300):global_shuffle({seed = 2, threads = 2})
    end, {0, 1, 63, 64, 65, 299, 300, 301, 450})
  end)
end)
