-- 23-lm_spec.lua: language-model data from Lua (docs/TEXT.md):
-- sluice.open("tokens:..."), :window, :pack, :padded_batch, :bucket_batch,
-- sluice.mix, their statistics and save/restore.
local sluice = require "sluice"
local bit = require "bit"

local H = dofile "spec/helper.lua"

local SCHEMA = {{"ids", "i32", {-1}}}

-- Documents of the given lengths; document d holds d*100 + 1, d*100 + 2...
local function docs(lens)
  local rows = {}
  for d, n in ipairs(lens) do
    local ids = {}
    for i = 1, n do ids[i] = (d - 1) * 100 + i end
    rows[d] = {ids = ids}
  end
  return sluice.from_table(rows, SCHEMA)
end

-- An llm.c shard of n tokens (token i = i % 65536).
local function write_shard(path, n)
  local parts = {}
  local function u32(v)
    return string.char(bit.band(v, 255), bit.band(bit.rshift(v, 8), 255),
                       bit.band(bit.rshift(v, 16), 255),
                       bit.band(bit.rshift(v, 24), 255))
  end
  parts[1] = u32(20240520) .. u32(1) .. u32(n) .. string.rep("\0", 1024 - 12)
  for i = 0, n - 1 do
    local t = i % 65536
    parts[#parts + 1] = string.char(t % 256, math.floor(t / 256))
  end
  H.write(path, table.concat(parts))
end

local function values(t) return t:totable() end

describe("sluice.open(\"tokens:...\")", function()
  local dir
  setup(function()
    dir = H.tmpdir()
    write_shard(dir .. "/a.bin", 1 + 4 * 16)
    write_shard(dir .. "/b.bin", 1 + 2 * 16 + 5)
  end)
  teardown(function() H.rmdir(dir) end)

  it("yields windows of seq_len inputs and targets shifted by one", function()
    local p = sluice.open("tokens:" .. dir .. "/*.bin", {seq_len = 16})
    assert.equal(6, p:length())
    local s = p:next()
    assert.same({16}, s.inputs.shape)
    assert.equal("i32", s.inputs.dtype)
    assert.equal(0, s.inputs[0])
    assert.equal(1, s.targets[0])
    assert.equal(16, s.targets[15])
    p:close()
  end)

  it("splits by rank and block and shuffles reproducibly", function()
    local function firsts(opts)
      opts.seq_len = 16
      local out = {}
      for s in sluice.open("tokens:" .. dir .. "/*.bin", opts):iter() do
        out[#out + 1] = s.inputs[0]
      end
      return out
    end
    assert.same({0, 16, 32, 48, 0, 16}, firsts {})
    assert.same({0, 32, 0}, firsts {rank = 0, world = 2})
    assert.same({16, 48, 16}, firsts {rank = 1, world = 2})
    assert.same({0, 16}, firsts {rank = 0, world = 2, block = 2})
    assert.same({32, 48}, firsts {rank = 1, world = 2, block = 2})
    local a = firsts {shuffle = true, seed = 3}
    assert.same(a, firsts {shuffle = true, seed = 3})
    table.sort(a)
    assert.same({0, 0, 16, 16, 32, 48}, a)
  end)

  it("yields whole blocks as batches with batch = true", function()
    local opts = {seq_len = 16, block = 2, batch = true, rank = 0, world = 1}
    local p = sluice.open("tokens:" .. dir .. "/*.bin", opts)
    assert.equal(3, p:length())
    local b = p:next()
    assert.same({2, 16}, b.inputs.shape)
    assert.equal(16, b.inputs:totable()[2][1])
    assert.equal(17, b.targets:totable()[2][1])
    -- the same as :batch(2) of the windows
    local q = sluice.open("tokens:" .. dir .. "/*.bin",
                          {seq_len = 16, block = 2}):batch(2)
    local c = q:next()
    assert.same(c.inputs:totable(), b.inputs:totable())
    assert.same(c.targets:totable(), b.targets:totable())
    p:close()
    q:close()
  end)

  it("raises with the file named on a bad shard and on bad options", function()
    H.write(dir .. "/bad.bin", string.rep("x", 2000))
    local ok, err = pcall(sluice.open, "tokens:" .. dir .. "/bad.bin",
                          {seq_len = 4})
    assert.is_false(ok)
    assert.matches("bad.bin: bad magic", err, 1, true)
    os.remove(dir .. "/bad.bin")
    assert.has_error(function() sluice.open("tokens:" .. dir .. "/a.bin") end,
                     "sluice: sluice.open(): tokens: option 'seq_len' is "
                     .. "required")
    assert.has_error(function()
      sluice.open("tokens:" .. dir .. "/a.bin", {seq_len = 4, rank = 1})
    end)
  end)
end)

describe(":window()", function()
  it("cuts windows across sample boundaries", function()
    local p = docs({3, 0, 1, 4}):window{size = 3, field = "ids"}
    local got = {}
    for s in p:iter() do got[#got + 1] = values(s.ids) end
    assert.same({{1, 2, 3}, {201, 301, 302}, {303, 304}}, got)
  end)

  it("takes stride and drop_remainder", function()
    local p = docs({5}):window{size = 2, stride = 1, field = "ids",
                               drop_remainder = true}
    local got = {}
    for s in p:iter() do got[#got + 1] = values(s.ids) end
    assert.same({{1, 2}, {2, 3}, {3, 4}, {4, 5}}, got)
  end)

  it("raises on misuse", function()
    assert.has_error(function() docs({1}):window{size = 0, field = "ids"} end)
    assert.has_error(function() docs({1}):window{size = 2} end,
                     "sluice: :window(): option 'field' is required")
  end)
end)

describe(":pack()", function()
  it("packs documents into rows with segment ids and positions", function()
    local p = docs({3, 2, 4}):pack{seq_len = 6, lookahead = 2}
    local rows = {}
    for s in p:iter() do
      rows[#rows + 1] = {values(s.ids), values(s.segment_ids),
                         values(s.positions)}
    end
    assert.same({
      {{1, 2, 3, 101, 102, 0}, {1, 1, 1, 2, 2, 0}, {0, 1, 2, 0, 1, 0}},
      {{201, 202, 203, 204, 0, 0}, {1, 1, 1, 1, 0, 0}, {0, 1, 2, 3, 0, 0}},
    }, rows)
    local st = p:pack_stats()
    assert.equal(2, st.rows)
    assert.equal(9, st.tokens)
    assert.equal(0.75, st.efficiency)
    local stages = p:stats() -- the stage's row carries them too
    assert.equal("pack", stages[1].name)
    assert.equal(0.75, stages[1].efficiency)
    assert.equal(2, stages[1].rows)
  end)

  it("splits or truncates documents longer than a row", function()
    local function count(long)
      local n = 0
      for _ in docs({10}):pack{seq_len = 4, long = long}:iter() do
        n = n + 1
      end
      return n
    end
    assert.equal(3, count("split"))
    assert.equal(1, count("truncate"))
    assert.has_error(function() docs({1}):pack{seq_len = 4, long = "x"} end)
  end)

  it("refuses an eos or pad id that does not fit the i32 rows", function()
    local ok, err = pcall(function()
      return docs({1}):pack{seq_len = 4, eos = 2^31}
    end)
    assert.is_false(ok)
    assert.matches("pack: eos 2147483648 does not fit the rows' i32 tokens",
                   tostring(err), 1, true)
    ok, err = pcall(function() return docs({1}):pack{seq_len = 4, pad = 2^40} end)
    assert.is_false(ok)
    assert.matches("pack: pad 1099511627776 does not fit", tostring(err), 1,
                   true)
    local p = docs({1}):pack{seq_len = 4, eos = 2^31 - 1, pad = -2^31}
    assert.same({1, 2^31 - 1, -2^31, -2^31}, values(p:next().ids))
  end)
end)

describe(":padded_batch()", function()
  it("pads to the longest with the pad value and adds lengths", function()
    local p = docs({2, 0, 3}):padded_batch(2, {pad = {ids = -1}})
    local b = p:next()
    assert.same({{1, 2}, {-1, -1}}, values(b.ids))
    assert.same({2, 0}, values(b.ids_len))
    b = p:next()
    assert.same({{201, 202, 203}}, values(b.ids))
    p:close()
  end)

  it("pads to a fixed length", function()
    local b = docs({1}):padded_batch(1, {to = 3}):next()
    assert.same({{1, 0, 0}}, values(b.ids))
  end)
end)

describe(":bucket_batch()", function()
  it("groups samples of similar length", function()
    local p = docs({1, 5, 2, 6}):bucket_batch{boundaries = {4},
                                              batch_sizes = {2, 2},
                                              length = "ids"}
    local lens = {}
    for b in p:iter() do lens[#lens + 1] = values(b.ids_len) end
    assert.same({{1, 2}, {5, 6}}, lens)
  end)

  it("raises when batch_sizes do not fit the boundaries", function()
    assert.has_error(function()
      docs({1}):bucket_batch{boundaries = {4}, batch_sizes = {2}}
    end)
  end)
end)

describe("sluice.mix()", function()
  it("draws by weight, reproducibly, and reports the shares", function()
    local function run()
      local a = sluice.range(1000)
      local b = sluice.range(1000):map(function(s) s.i = s.i + 10000 return s end)
      local p = sluice.mix({a, b}, {weights = {0.8, 0.2}, seed = 5,
                                    stop = "never"}):take(20000)
      local seq = {}
      for s in p:iter() do seq[#seq + 1] = s.i end
      local mixrow
      for _, st in ipairs(p:stats()) do
        if st.name == "mix" then mixrow = st end
      end
      return seq, p:mix_counts(), mixrow
    end
    local s1, c, row = run()
    local s2 = run()
    assert.same(c.shares, row.shares)
    assert.same(s1, s2)
    assert.equal(20000, c.counts[1] + c.counts[2])
    assert.is_true(math.abs(c.shares[1] - 0.8) < 0.02)
  end)

  it("keeps one order over passes with rerandomize = false, as tf.data",
     function()
    local function passes(opts)
      local b = sluice.range(30):map(function(s) s.i = s.i + 100 return s end)
      local p = sluice.mix({sluice.range(30), b}, opts)
      local out = {}
      for e = 1, 3 do
        local seq = {}
        for s in p:iter() do seq[#seq + 1] = s.i end
        out[e] = table.concat(seq, ",")
        p:reset()
      end
      return out
    end
    local kept = passes({seed = 3, stop = "all", rerandomize = false})
    assert.equal(kept[1], kept[2])
    assert.equal(kept[1], kept[3])
    local drawn = passes({seed = 3, stop = "all"})
    assert.equal(kept[1], drawn[1])
    assert.are_not.equal(drawn[1], drawn[2])
    assert.has_error(function()
      sluice.mix({sluice.range(1)}, {rerandomize = "no"})
    end, "sluice: sluice.mix(): option 'rerandomize' must be a boolean "
         .. "(got a string)")
  end)

  it("stops as asked", function()
    local p = sluice.mix({sluice.range(5), sluice.range(3)}, {stop = "all"})
    assert.equal(8, #H.collect(p))
    assert.has_error(function()
      sluice.mix({sluice.range(1)}, {stop = "sometimes"})
    end)
  end)
end)

describe("save and restore", function()
  it("a pack over a shuffle continues where it was saved", function()
    local function make()
      return docs({3, 1, 4, 1, 5, 9, 2, 6}):shuffle(4, {seed = 1})
        :pack{seq_len = 5}
    end
    local whole = {}
    for s in make():iter() do whole[#whole + 1] = values(s.ids) end
    local p = make()
    p:next()
    p:next()
    local state = p:state()
    local q = make()
    q:restore(state)
    local rest = {}
    for s in q:iter() do rest[#rest + 1] = values(s.ids) end
    assert.same({select(3, unpack(whole))}, rest)
  end)
end)
