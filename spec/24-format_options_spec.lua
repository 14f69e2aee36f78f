-- 24-format_options_spec.lua: the options of tags npy, csv and tfrecord
-- reach their readers from sluice.open (docs/FORMATS.md): a field name for
-- a .npy file, a CSV's columns / delimiter / header, a TFRecord's
-- tf.train.Example features; bad values are refused naming the option.
local sluice = require "sluice"

local DATA = "tests/data/formats/"

local function all(p)
  local out = {}
  for s in p:iter() do out[#out + 1] = s end
  return out
end

describe("sluice.open format options", function()
  it("names a .npy file's field", function()
    local p = sluice.open(DATA .. "labels.npy", {field = "y"})
    local s = all(p)
    assert.equal(5, #s)
    assert.equal(-3, tonumber(s[1].y))
    assert.equal(25, tonumber(s[5].y))
    -- without it the field is the file's stem
    assert.equal(-3, tonumber(all(sluice.open(DATA .. "labels.npy"))[1].labels))
  end)

  it("selects and types a CSV's columns, in the order given", function()
    local s = all(sluice.open(DATA .. "table.csv", {columns = "y:i32,x:f64"}))
    assert.equal(7, tonumber(s[1].y))
    assert.equal(1.5, tonumber(s[1].x))
    local p = sluice.open(DATA .. "table.csv", {columns = {{"name", "bytes"},
                                                           {"y", "i64"}}})
    local t = all(p)
    assert.equal("plain", t[1].name)
    assert.equal(7, tonumber(t[1].y))
    -- a table of name = dtype gives the fields in name order
    local u = all(sluice.open(DATA .. "table.csv", {columns = {y = "i64",
                                                              x = "f32"}}))
    assert.equal(1.5, tonumber(u[1].x))
    assert.equal(7, tonumber(u[1].y))
  end)

  it("reads a tab-separated file and a file without a header", function()
    local s = all(sluice.open("csv:" .. DATA .. "table.tsv",
                              {delimiter = "\t", columns = "x:f32,y:i64"}))
    assert.equal(1.5, tonumber(s[1].x))
    local f = assert(io.open(os.tmpname(), "wb"))
    local path = os.tmpname() .. ".csv"
    f:close()
    f = assert(io.open(path, "wb"))
    f:write("1,2\n3,4\n")
    f:close()
    local r = all(sluice.open(path, {header = false, columns = "a:i64,b:i64"}))
    os.remove(path)
    assert.equal(2, #r)
    assert.equal(1, tonumber(r[1].a))
    assert.equal(4, tonumber(r[2].b))
  end)

  it("decodes a TFRecord's tf.train.Example features", function()
    local ok, p = pcall(sluice.open, DATA .. "ex.tfrecord", {
      features = {image = "bytes", label = "i64", x = {"f32", {3}}}})
    if not ok and tostring(p):find("protobuf") then
      pending("built without protobuf-c: " .. tostring(p))
      return
    end
    assert(ok, p)
    local s = all(p)
    assert.equal(6, #s)
    assert.equal("img0", s[1].image)
    assert.equal(-2, tonumber(s[1].label))
    assert.equal(0.5, tonumber(s[2].x[1]) - 1)
    -- gzip, named
    local g = all(sluice.open("tfrecord:" .. DATA .. "ex.tfrecord.gz", {
      features = "label:i64", compression = "gzip"}))
    assert.equal(3, tonumber(g[6].label))
  end)

  it("refuses bad option values naming the option", function()
    local function fails(opts, pattern, name)
      local ok, err = pcall(sluice.open, name or (DATA .. "table.csv"), opts)
      assert.is_false(ok)
      assert.matches(pattern, tostring(err))
    end
    fails({delimiter = ";;"}, "option 'delimiter' must be one character")
    fails({header = "yes"}, "option 'header' must be a boolean")
    fails({columns = 5}, "option 'columns' must be a string or a table")
    fails({columns = {{"a,b", "i64"}}}, "option 'columns': bad field name")
    fails({compression = "zip"}, "option 'compression' must be",
          DATA .. "ex.tfrecord")
    fails({columns = "nope:i64"}, "nope")
  end)
end)
