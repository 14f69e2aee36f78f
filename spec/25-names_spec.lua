-- 25-names_spec.lua: brace patterns in every name given to sluice.open,
-- WebDataset shards read through sl_wds_open's threads, shard shuffle and
-- ranks from sluice.open's options, and sluice.json for the JSON text a
-- shard (or any bytes field) holds (docs/FORMATS.md, docs/DATA.md).
local sluice = require "sluice"

local DATA = "tests/data/formats/"
local SHARDS = DATA .. "wds-{000000..000002}.tar"

-- The sample numbers ("sampleNNNN" keys) of one pass.
local function keys(p)
  local out = {}
  for s in p:iter() do out[#out + 1] = tonumber(s.__key__:sub(7)) end
  return out
end

describe("sluice.open names", function()
  it("expands brace ranges and lists in order, tag from the extension", function()
    assert.same({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
                keys(sluice.open(SHARDS)))
    assert.same({8, 9, 10, 11, 0, 1, 2, 3},
                keys(sluice.open("wds:" .. DATA .. "wds-00000{2,0}.tar")))
  end)

  it("names a bad range and the name it is in", function()
    local ok, err = pcall(sluice.open, DATA .. "wds-{5..1}.tar")
    assert.is_false(ok)
    assert.matches("open: bad range '{5..1}' in", err, 1, true)
  end)
end)

describe("sluice.open WebDataset options", function()
  it("reads the shards with threads, one sample from each thread in turn", function()
    local p = sluice.open(SHARDS, {threads = 3})
    for _ = 1, 2 do
      local k = keys(p)
      assert.equal(12, #k)
      for i = 1, 12 do -- one shard per thread
        assert.equal(((i - 1) % 3) * 4 + math.floor((i - 1) / 3), k[i])
      end
      p:reset()
    end
  end)

  it("splits shards by rank and shuffles them per pass, the same on every rank", function()
    local seen, orders = {}, {}
    for rank = 0, 1 do
      local p = sluice.open(SHARDS, {shuffle = true, seed = 3,
                                     shard = {rank = rank, world = 2}})
      for pass = 1, 3 do
        local k = keys(p)
        assert.equal(6, #k) -- 12 samples, half a shard each (docs/DATA.md)
        for _, v in ipairs(k) do seen[v] = (seen[v] or 0) + 1 end
        orders[rank .. ":" .. pass] = table.concat(k, ",")
        p:reset()
      end
    end
    for v = 0, 11 do assert.equal(3, seen[v]) end -- each sample once a pass
    -- a seed is a reproducible order
    local again = sluice.open(SHARDS, {shuffle = true, seed = 3,
                                       shard = {rank = 0, world = 2}})
    assert.equal(orders["0:1"], table.concat(keys(again), ","))
  end)

  it("gives every rank as many samples, more ranks than shards too", function()
    for _, c in ipairs({{5, "pad", 3}, {5, "drop", 2}, {16, "pad", 1}}) do
      local world, rem, each = c[1], c[2], c[3]
      local seen = {}
      for rank = 0, world - 1 do
        local p = sluice.open(SHARDS, {shuffle = true, seed = 7, shard =
                                       {rank = rank, world = world,
                                        remainder = rem}})
        assert.equal(each, p:length())
        local k = keys(p)
        assert.equal(each, #k)
        for _, v in ipairs(k) do seen[v] = (seen[v] or 0) + 1 end
      end
      for v = 0, 11 do
        if rem == "pad" then assert.is_true((seen[v] or 0) >= 1) end
        if rem == "drop" then assert.is_true((seen[v] or 0) <= 1) end
      end
    end
    local ok, err = pcall(sluice.open, SHARDS, {shard = {remainder = "most"}})
    assert.is_false(ok)
    assert.matches("shard.remainder must be", err, 1, true)
  end)

  it("reads rank and world from the launcher's environment", function()
    -- A child LuaJIT with RANK/WORLD_SIZE set: sluice.open with no option,
    -- and with threads (sl_wds_open), reads its rank's share.
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(([[
      local sluice = require "sluice"
      local a = sluice.open(%q)
      local b = sluice.open(%q, {threads = 2})
      local n = 0
      for _ in a:iter() do n = n + 1 end
      io.write(n, " ", b:length(), " ", a:length())
    ]]):format(SHARDS, SHARDS))
    f:close()
    local cmd = ("RANK=3 WORLD_SIZE=5 LUA_PATH=%q LUA_CPATH=%q %s %s 2>&1")
      :format(package.path, package.cpath, "luajit", script)
    local out = io.popen(cmd):read("*a")
    os.remove(script)
    assert.equal("3 3 3", out)
  end)

  it("knows the length of local shards from their headers", function()
    assert.equal(12, sluice.open(SHARDS):length())
    assert.equal(12, sluice.open(SHARDS, {threads = 3}):length())
  end)

  it("takes field alternatives, named or not, and leaves other members out", function()
    local p = sluice.open(SHARDS, {fields = {"label=cls", "json;txt"}})
    local s = p:next()
    assert.equal(0, s.label)
    assert.equal("caption 0", s["json;txt"])
    assert.is_false(pcall(function() return s["x.npy"] end))
    local ok, err = pcall(sluice.open, SHARDS, {fields = "txt,jpg;png"})
    assert.is_false(ok)
    assert.matches("has no member for field 'jpg;png' (one of jpg;png)", err,
                   1, true)
    ok, err = pcall(sluice.open, SHARDS, {fields = "cls;txt"})
    assert.is_false(ok)
    assert.matches("mixes extensions of different types", err, 1, true)
  end)

  it("saves and restores a threaded shard reader", function()
    local p = sluice.open(SHARDS, {threads = 2, shuffle = true, seed = 1})
    local full = keys(p)
    p:reset()
    for _ = 1, 5 do p:next() end
    local st = p:state()
    local q = sluice.open(SHARDS, {threads = 2, shuffle = true, seed = 1})
    q:restore(st)
    local rest = keys(q)
    assert.equal(#full - 5, #rest)
    for i, v in ipairs(rest) do assert.equal(full[i + 5], v) end
  end)

  it("refuses shard options for another format, and bad values", function()
    local ok, err = pcall(sluice.open, DATA .. "table.csv", {shuffle = true})
    assert.is_false(ok)
    assert.matches("wds options given, but '.-table.csv' is read as format "
                   .. "'csv', not wds", err)
    ok, err = pcall(sluice.open, SHARDS, {shard = {rank = 1}})
    assert.is_false(ok)
    assert.matches("option 'shard' needs both rank and world", err, 1, true)
    ok, err = pcall(sluice.open, SHARDS, {shard = {rank = 2, world = 2}})
    assert.is_false(ok)
    assert.matches("rank 2 is not in [0, world 2)", err, 1, true)
    ok, err = pcall(sluice.open, SHARDS, {shuffle = "yes"})
    assert.is_false(ok)
    assert.matches("shuffle", err, 1, true)
    ok, err = pcall(sluice.open, SHARDS, {threads = 0})
    assert.is_false(ok)
    assert.matches("threads", err, 1, true)
  end)
end)

describe("sluice.json", function()
  it("decodes objects, arrays, escapes and numbers", function()
    local t = sluice.json([=[{"caption": "a \"cat\"\n\u00e9\ud83d\ude00",
                             "boxes": [[1, 2.5], [-3e2, 0]], "ok": true,
                             "none": null, "empty": {}}]=])
    assert.equal('a "cat"\n\195\169\240\159\152\128', t.caption)
    assert.equal(2, t.boxes.n)
    assert.equal(2.5, t.boxes[1][2])
    assert.equal(-300, t.boxes[2][1])
    assert.is_true(t.ok)
    assert.equal(sluice.json.null, t.none)
    assert.same({}, t.empty)
  end)

  it("refuses malformed text naming the offset", function()
    local cases = {
      ["01"] = "offset 0: leading zero in a number",
      ["[1,]"] = "offset 3: unexpected character ']'",
      ['{"a" 1}'] = "offset 5: expected ':'",
      ['"abc'] = "offset 0: unterminated string",
      ["1 2"] = "offset 2: trailing text after the value",
      ['"\\ud800"'] = "offset 1: lone surrogate",
      ["\"a\tb\""] = "offset 2: control character in a string",
      [""] = "offset 0: unexpected end of text",
      [string.rep("[", 600)] = "nested more than 512 deep",
    }
    for text, want in pairs(cases) do
      local ok, err = pcall(sluice.json.decode, text)
      assert.is_false(ok)
      assert.matches(want, err, 1, true)
    end
  end)

  it("runs in a map's worker states on a bytes field", function()
    local p = sluice.from_table({{meta = '{"label": 3}'}, {meta = '{"label": 5}'}})
      :map(function(s)
        local json = require "sluice.json"
        s.label = json.decode(s.meta).label
        return s
      end, {threads = 2})
    local got = {}
    for s in p:iter() do got[#got + 1] = tonumber(s.label) end
    assert.same({3, 5}, got)
  end)
end)
