-- 05-sample_spec.lua: the sample object: reading fields (numbers, strings,
-- views), assignment (copy-on-write, derived schemas), sluice.fields,
-- sluice.release and sluice.totable.
local ffi = require "ffi"
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse = H.misuse

local function one(rows, schema)
  return sluice.from_table(rows, schema):next()
end

describe("sluice sample", function()
  describe("reading", function()
    it("gives numbers for scalar fields of every numeric dtype", function()
      local names = {"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64",
                     "f16", "bf16", "f32", "f64"}
      local schema, row = {}, {}
      for k, dt in ipairs(names) do
        schema[k] = {dt, dt, {}}
        row[dt] = (dt:sub(1, 1) == "i") and -3 or 3
      end
      row.f32, row.f64, row.f16, row.bf16 = 0.5, 0.1, 1.5, 2.5
      local s = one({row}, schema)
      for _, dt in ipairs(names) do
        assert.equal("number", type(s[dt]))
        assert.equal(row[dt], s[dt], dt)
      end
    end)

    it("reads 64-bit integers through a double (exact up to 2^53)", function()
      local s = one({{a = 2^53, b = 2^53 + 2}})
      assert.equal(9007199254740992, s.a)
      assert.equal(9007199254740994, s.b)
    end)

    it("gives booleans for bool scalars and strings for bytes fields", function()
      local s = one({{flag = true, text = "héllo\0x"}})
      assert.is_true(s.flag)
      assert.equal("héllo\0x", s.text)
    end)

    it("gives tensor views for other fields", function()
      local s = one({{v = {1.5, 2.5, 3.5}}})
      local v = s.v
      assert.equal("f64", v.dtype)
      assert.same({3}, v.shape)
      assert.equal(2.5, v[1])
      assert.is_true(ffi.istype("double *", v.data))
      assert.equal(3.5, v.data[2])
    end)

    it("raises for an unknown field, naming it and listing the fields", function()
      local s = one({{a = 1, b = 2}})
      assert.equal("sluice: no field 'c' in this sample (fields: a, b)",
                   misuse(function() local _ = s.c end))
    end)

    it("has a readable tostring", function()
      assert.equal("sluice.sample{i: i64[]}", tostring(sluice.range(1):next()))
    end)
  end)

  describe("views", function()
    it("keep their sample alive", function()
      local p = sluice.from_table {{v = {10, 20, 30}}}
      local v = p:next().v
      p:close()
      collectgarbage()
      collectgarbage()
      assert.same({10, 20, 30}, v:totable())
    end)
  end)

  describe("assignment", function()
    it("replaces a scalar keeping its dtype (s.label = s.label - 1)", function()
      local s = sluice.range(5):skip(3):next()
      s.i = s.i - 1
      assert.equal(2, s.i)
      assert.equal("sluice.sample{i: i64[]}", tostring(s))
      local f = one({{x = 1}}, {{"x", "f32"}})
      f.x = 0.25
      assert.equal(0.25, f.x)
      local b = one({{flag = false}})
      b.flag = true
      assert.is_true(b.flag)
    end)

    it("is copy-on-write: a shared sample is not changed", function()
      -- from_table keeps its rows and replays them: they are shared
      local p = sluice.from_table {{x = 1, t = "a"}}
      local s = p:next()
      s.x = 100
      s.t = "changed"
      assert.same({x = 100, t = "changed"}, sluice.totable(s))
      p:reset()
      assert.same({x = 1, t = "a"}, sluice.totable(p:next()))
    end)

    it("leaves views taken before the assignment unchanged", function()
      local s = one({{v = {1, 2, 3}}})
      local old = s.v
      local t = sluice.tensor("f64", {2})
      t[0], t[1] = 7, 8
      s.v = t
      assert.same({1, 2, 3}, old:totable())
      assert.same({7, 8}, s.v:totable())
    end)

    it("shares an assigned tensor and makes it read-only", function()
      local s = one({{x = 1}})
      local t = sluice.tensor("u8", {2, 2})
      t[3] = 9
      s.img = t
      assert.equal(t.data, s.img.data) -- no copy
      assert.same({{0, 0}, {0, 9}}, s.img:totable())
      assert.equal("sluice: this tensor was assigned to a sample and is now "
                   .. "read-only (clone() it to change it)",
                   misuse(function() t[0] = 1 end))
    end)

    it("adds fields: integral numbers i64, others f64, booleans bool, strings bytes[-1]", function()
      local s = sluice.range(1):next()
      s.n = 3
      s.x = 0.5
      s.b = true
      s.t = "str"
      assert.same({"i", "n", "x", "b", "t"}, sluice.fields(s))
      assert.equal("sluice.sample{i: i64[], n: i64[], x: f64[], b: bool[], "
                   .. "t: bytes[-1]}", tostring(s))
      assert.same({i = 0, n = 3, x = 0.5, b = true, t = "str"}, sluice.totable(s))
    end)

    it("removes a field with nil", function()
      local s = one({{a = 1, b = 2, c = 3}})
      s.b = nil
      assert.same({"a", "c"}, sluice.fields(s))
      assert.same({a = 1, c = 3}, sluice.totable(s))
      s.zzz = nil -- removing an absent field does nothing
      assert.same({"a", "c"}, sluice.fields(s))
    end)

    it("keeps a field's schema entry when the new value fits it", function()
      local p = sluice.from_table {{v = {1, 2}}, {v = {3}}}
      local s = p:next()
      assert.equal("sluice.sample{v: i64[-1]}", tostring(s))
      s.v = sluice.tensor("i64", {5})
      assert.equal("sluice.sample{v: i64[-1]}", tostring(s))
      assert.same({0, 0, 0, 0, 0}, s.v:totable())
    end)

    it("gives a replaced field the new tensor's exact type when it does not fit", function()
      local s = one({{img = {{1, 2}, {3, 4}}, label = 1}}, {{"img", "u8", {2, 2}}, {"label", "i64"}})
      s.img = sluice.tensor("f32", {3, 3})
      assert.equal("sluice.sample{img: f32[3,3], label: i64[]}", tostring(s))
      s.label = "ten"
      assert.equal("sluice.sample{img: f32[3,3], label: bytes[-1]}", tostring(s))
    end)

    it("caches derived schemas: equal changes share one schema", function()
      local p = sluice.from_table {{a = 1}, {a = 2}}
      local x, y = p:next(), p:next()
      x.extra = 1.5
      y.extra = 2.5
      assert.equal(rawget(x, 2), rawget(y, 2)) -- the same schema info
    end)

    it("refuses values that do not fit the field's dtype", function()
      local s = sluice.range(1):next()
      assert.equal("sluice: field 'i': 1.5 is not an integer (dtype i64)",
                   misuse(function() s.i = 1.5 end))
      assert.equal("sluice: field 'i': a boolean cannot be stored as i64",
                   misuse(function() s.i = true end))
      assert.equal("sluice: cannot assign a table to field 'x' (a number, "
                   .. "boolean, string, tensor or nil)",
                   misuse(function() s.x = {1, 2} end))
      assert.equal("sluice: sample field names are strings (got a number)",
                   misuse(function() s[10] = 1 end))
      assert.equal(0, s.i)
    end)

    it("works on batches", function()
      local b = sluice.range(4):batch(2):next()
      local t = b.i:clone()
      t[0] = 42
      b.i = t
      assert.same({42, 1}, b.i:totable())
    end)
  end)
end)

describe("sluice", function()
  describe(".fields()", function()
    it("lists the field names in schema order", function()
      assert.same({"b", "a"}, sluice.fields(one({{a = 1, b = 2}},
                                                {{"b", "i64"}, {"a", "i64"}})))
    end)

    it("rejects a non-sample", function()
      assert.equal("sluice: sluice.fields(): expected a sample (got a table)",
                   misuse(function() sluice.fields({}) end))
    end)
  end)

  describe(".release()", function()
    it("drops the sample now; later use raises; twice is fine", function()
      local s = sluice.range(1):next()
      sluice.release(s)
      sluice.release(s)
      assert.equal("sluice: this sample was released",
                   misuse(function() local _ = s.i end))
      assert.equal("sluice: this sample was released",
                   misuse(function() s.i = 1 end))
      assert.equal("sluice.sample (released)", tostring(s))
    end)

    it("leaves views taken before it valid", function()
      local s = one({{v = {4, 5}}})
      local v = s.v
      sluice.release(s)
      collectgarbage()
      assert.same({4, 5}, v:totable())
    end)
  end)

  describe(".totable()", function()
    it("converts every field: numbers, booleans, strings, nested tables", function()
      local s = one({{n = 1, f = 0.5, b = false, t = "x", m = {{1, 2}, {3, 4}}}})
      assert.same({n = 1, f = 0.5, b = false, t = "x", m = {{1, 2}, {3, 4}}},
                  sluice.totable(s))
    end)

    it("pins nothing: the sample can still change in place", function()
      local s = sluice.range(1):next()
      s.v = sluice.tensor("f64", {2})
      sluice.totable(s)
      assert.is_false(rawget(s, 3)) -- no view handed out
    end)
  end)
end)
