-- 18-worker_rules_spec.lua: what worker states may not do (os.exit and
-- the other process-wide calls raise, naming the decorator), output fields
-- accepted in any order, a map's inferred schema keeping the variable
-- dimensions upstream declared, and the Lua text parser: LUA.md's example
-- run verbatim, nil skipping a line, variable lengths, a `schema` option,
-- and errors naming the file and the line (issue 13, items 11, 17, 20).
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local where, misuse = H.where, H.misuse
local tmpdir, write = H.tmpdir, H.write


local function raise_at(p)
  local ok, err = pcall(p.next, p)
  assert.is_false(ok)
  return err
end

describe("worker states", function()
  it("turn os.exit in a 2-thread map into an error naming the map", function()
    local fn = function(s)
      if s.i == 5 then os.exit(7) end
      return s
    end
    local p = sluice.range(20):map(fn, {threads = 2})
    for k = 0, 4 do assert.equal(k, p:next().i) end
    local err = raise_at(p)
    assert.matches("^map %(" .. where(fn):gsub("%p", "%%%0") .. "%): ", err)
    assert.matches("os%.exit cannot be called in a worker state of map", err)
    assert.matches("end the whole process", err)
    -- The process is still here, and the pipeline resets cleanly.
    p:reset()
    assert.equal(0, p:next().i)
    p:close()
  end)

  it("also when os.exit is an upvalue, and in filters and readers", function()
    local exit = os.exit
    local p = sluice.range(3):filter(function() exit(3) end)
    assert.matches("os%.exit cannot be called in a worker state of filter",
                   raise_at(p))
    local r = sluice.reader(function()
      return function() os.exit(0) end
    end, {schema = {{"i", "i64"}}})
    assert.matches("os%.exit cannot be called in a worker state of reader",
                   raise_at(r))
  end)

  it("refuse os.execute and os.setlocale, allow io.popen", function()
    local p = sluice.range(1):map(function(s) os.execute("true") return s end)
    assert.matches("os%.execute cannot be called in a worker state of map",
                   raise_at(p))
    p = sluice.range(1):map(function(s) os.setlocale("C") return s end)
    assert.matches("os%.setlocale cannot be called in a worker state of map",
                   raise_at(p))
    p = sluice.range(1):map(function(s)
      local f = assert(io.popen("echo 4"))
      s.i = tonumber(f:read("*l"))
      f:close()
      return s
    end)
    assert.equal(4, p:next().i)
  end)

  it("leave os.exit alone in the declaring state", function()
    assert.equal("function", type(os.exit))
    assert.is_nil(debug.getinfo(os.exit, "S").source:match("sluice"))
  end)
end)

describe("output fields in another order", function()
  it("are reordered to the stage's schema", function()
    local p = sluice.range(4):map(function(s)
      local i = s.i
      s.i = nil
      s.ids, s.mask, s.input = i, i % 2, 10 * i
      return s
    end, {threads = 2, schema = {{"ids", "i64"}, {"input", "i64"},
                                 {"mask", "i64"}}})
    local k = 0
    for s in p:iter() do
      assert.same({"ids", "input", "mask"}, sluice.fields(s))
      assert.same({ids = k, input = 10 * k, mask = k % 2}, sluice.totable(s))
      k = k + 1
    end
    assert.equal(4, k)
    -- and batch, which trusts the schema, stacks them right
    p:reset()
    local b = p:batch(4):next()
    assert.same({0, 10, 20, 30}, b.input:totable())
  end)

  it("are reordered for a Lua reader yielding samples", function()
    local r = sluice.reader(function()
      local n = 0
      return function()
        n = n + 1
        if n > 2 then return nil end
        return sluice.sample({b = n, a = -n}, {{"b", "i64"}, {"a", "i64"}})
      end
    end, {schema = {{"a", "i64"}, {"b", "i64"}}})
    local s = r:next()
    assert.same({"a", "b"}, sluice.fields(s))
    assert.same({a = -1, b = 1}, sluice.totable(s))
  end)

  it("say that any order is accepted when the names differ", function()
    local p = sluice.range(1):map(function(s) s.j = 1 return s end,
                                  {schema = {{"i", "i64"}, {"k", "i64"}}})
    local err = raise_at(p)
    assert.matches("output fields {i: i64%[%], j: i64%[%]} do not match the "
                   .. "stage's {i: i64%[%], k: i64%[%]} %(the same names are "
                   .. "accepted in any order%)", err)
  end)
end)

describe("a map without schema", function()
  it("keeps the variable dimensions its upstream declared", function()
    local p = sluice.range(6):map(function(s)
      local t = sluice.tensor("i32", {s.i % 3 + 1})
      for k = 0, s.i % 3 do t[k] = s.i end
      s.v = t
      s.i = nil
      return s
    end, {schema = {{"v", "i32", {-1}}}})
    -- a do-nothing map after it
    p = p:map(function(s) return s end)
    assert.same({name = "v", dtype = "i32", shape = {-1}}, p:schema()[1])
    local lens = {}
    for s in p:iter() do lens[#lens + 1] = s.v.shape[1] end
    assert.same({1, 2, 3, 1, 2, 3}, lens)
  end)

  it("still takes fixed shapes from its first output", function()
    local p = sluice.range(2):map(function(s)
      s.x = sluice.tensor("f32", {2, 3})
      return s
    end)
    assert.same({2, 3}, p:schema().x.shape)
  end)
end)

describe("the Lua text parser", function()
  local dir
  setup(function() dir = tmpdir() end)
  teardown(function() H.rmdir(dir) end)

  it("runs LUA.md's example verbatim over lines of varying length", function()
    -- The example, cut out of docs/LUA.md (section sluice.open) and run
    -- with its file name pointing here.
    local f = assert(io.open("docs/LUA.md"))
    local doc = f:read("*a")
    f:close()
    local code = doc:match("\n(local toks = sluice%.open%(\"text:corpus%.txt\".-"
                           .. "end, threads = 2%}%))\n")
    assert.truthy(code, "LUA.md lost its text-parser example")
    write(dir .. "/corpus.txt", "a bb ccc dddd\nthe quick brown fox jumps\n"
          .. "x\n")
    code = code:gsub("text:corpus%.txt", "text:" .. dir .. "/corpus.txt")
    local chunk = assert(load(code .. "\nreturn toks", "=LUA.md example"))
    setfenv(chunk, setmetatable({sluice = sluice}, {__index = _G}))
    local toks = chunk()
    assert.same({name = "lengths", dtype = "i64", shape = {-1}},
                toks:schema()[1])
    local got = {}
    for s in toks:iter() do got[#got + 1] = s.lengths:totable() end
    assert.same({{1, 2, 3, 4}, {3, 5, 5, 3, 5}, {1}}, got)
    toks:reset()
    local b = toks:batch(3):next()
    assert.same({0, 4, 9, 10}, b.lengths.lod)
  end)

  it("skips the lines for which it returns nil", function()
    write(dir .. "/skip.txt", "# header\n1\n\n2\n# note\n3\n")
    local p = sluice.open("text:" .. dir .. "/skip.txt", {
      parser = function(line)
        if line == "" or line:sub(1, 1) == "#" then return nil end
        return {n = tonumber(line)}
      end, threads = 2})
    local got = {}
    for s in p:iter() do got[#got + 1] = s.n end
    assert.same({1, 2, 3}, got)
    assert.is_nil(p:length())
  end)

  it("names the file and the line of an error, and the parser", function()
    local path = dir .. "/bad.txt"
    write(path, "1\n2\n\n3\nfour\n5\n")
    local parse = function(line)
      if line == "" then return nil end
      return {n = assert(tonumber(line), "not a number: " .. line)}
    end
    local p = sluice.open("text:" .. path, {parser = parse})
    assert.same({1, 2, 3}, {p:next().n, p:next().n, p:next().n})
    local err = raise_at(p)
    local w = where(parse):gsub("%p", "%%%0")
    assert.matches("^parser %(" .. w .. "%): " .. path:gsub("%p", "%%%0")
                   .. ":5: ", err)
    assert.matches("not a number: four", err)
    assert.is_nil(err:match("init%.lua:%d+: "))
  end)

  it("names the right file of a glob and the line of a row that does not "
     .. "fit", function()
    write(dir .. "/g1.txt", "1\n2\n")
    write(dir .. "/g2.txt", "3\n4.5\n")
    local p = sluice.open("text:" .. dir .. "/g*.txt", {
      parser = function(line) return {x = tonumber(line)} end})
    assert.same({1, 2, 3}, {p:next().x, p:next().x, p:next().x})
    local err = raise_at(p)
    -- Built against the schema of line 1 (once the workers know it): "the
    -- returned row, field 'x': 4.5 is not an integer (dtype i64)"; a row
    -- parsed before that: "sample 3: field 'x': expected i64[], got f64[]".
    assert.matches("g2%.txt:2: .*field 'x': ", err)
    assert.is_nil(err:match("g1%.txt"))
  end)

  it("takes a schema option", function()
    write(dir .. "/f.txt", "1\n2.5\n")
    local p = sluice.open("text:" .. dir .. "/f.txt", {
      parser = function(line) return {x = tonumber(line)} end,
      schema = {{"x", "f32"}}})
    assert.same({name = "x", dtype = "f32", shape = {}}, p:schema()[1])
    assert.same({1, 2.5}, {p:next().x, p:next().x})
    assert.matches("option 'schema' is for a Lua parser",
                   misuse(function()
                     sluice.open("text:" .. dir .. "/f.txt",
                                 {schema = {{"x", "f32"}}})
                   end))
  end)

  it("reports what it returned when it is not a row", function()
    write(dir .. "/n.txt", "1\n")
    local p = sluice.open("text:" .. dir .. "/n.txt",
                          {parser = function() return 5 end})
    assert.matches("n%.txt:1: parser returned a number", raise_at(p))
  end)
end)
