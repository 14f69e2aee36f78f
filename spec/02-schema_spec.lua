-- 02-schema_spec.lua: p:schema() and the schema format accepted by every
-- schema= option (array of {name, dtype, shape} triples).
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse = H.misuse

describe("sluice.Pipeline", function()
  describe(":schema()", function()
    it("lists the fields in order, each also by name", function()
      local p = sluice.from_table({{image = {{1, 2}, {3, 4}}, label = 1}},
                                  {{"image", "u8", {2, 2}}, {"label", "i64", {}}})
      local sch = p:schema()
      assert.equal(2, #sch)
      assert.same({name = "image", dtype = "u8", shape = {2, 2}}, sch[1])
      assert.same({name = "label", dtype = "i64", shape = {}}, sch[2])
      assert.equal(sch[1], sch.image)
      assert.equal("i64", sch.label.dtype)
      assert.is_nil(sch.metadata)
    end)

    it("shows variable dimensions as -1", function()
      local sch = sluice.from_table({{t = "abc"}}):schema()
      assert.same({-1}, sch.t.shape)
    end)

    it("includes metadata when the schema has some", function()
      local p = sluice.from_table({{x = 1}},
                                  {{"x", "i64", {}}, metadata = {a = "1", b = "two"}})
      assert.same({a = "1", b = "two"}, p:schema().metadata)
    end)

    it("returns a fresh table each call", function()
      local p = sluice.range(3)
      local a = p:schema()
      a[1].dtype = "changed"
      assert.equal("i64", p:schema()[1].dtype)
    end)

    it("describes the output of decorators", function()
      local b = sluice.range(10):batch(4)
      assert.same({name = "i", dtype = "i64", shape = {-1}}, b:schema().i)
      local d = sluice.range(10):batch(4, {drop_last = true})
      assert.same({4}, d:schema().i.shape)
      local z = sluice.zip(sluice.range(2), sluice.from_table {{x = 1.5}, {x = 2.5}})
      local sch = z:schema()
      assert.same({"i", "x"}, {sch[1].name, sch[2].name})
    end)
  end)

  describe("schema option format", function()
    it("accepts triples, named entries and a missing shape (a scalar)", function()
      local p = sluice.from_table({{a = 1, b = 2, c = 3}}, {
        {"a", "i32", {}}, {name = "b", dtype = "f64", shape = {}}, {"c", "u16"},
      })
      local sch = p:schema()
      assert.same({"i32", "f64", "u16"}, {sch.a.dtype, sch.b.dtype, sch.c.dtype})
      assert.same({}, sch.c.shape)
    end)

    it("rejects malformed schemas with a message naming the problem", function()
      local row = {{a = 1}}
      assert.equal("sluice: sluice.from_table(): schema must be an array of "
                   .. "{name, dtype, shape} (got a string)",
                   misuse(function() sluice.from_table(row, "a:i64") end))
      assert.equal("sluice: sluice.from_table(): schema has no fields",
                   misuse(function() sluice.from_table(row, {}) end))
      assert.equal("sluice: sluice.from_table(): schema field 1 must be "
                   .. "{name, dtype, shape} (got a string)",
                   misuse(function() sluice.from_table(row, {"a"}) end))
      assert.equal("sluice: sluice.from_table(): schema field 1: the name "
                   .. "must be a string (got a number)",
                   misuse(function() sluice.from_table(row, {{1, "i64"}}) end))
      assert.equal("sluice: sluice.from_table(): schema field 'a': shape must "
                   .. "be an array of at most 8 sizes",
                   misuse(function()
                     sluice.from_table(row, {{"a", "i64", {1, 1, 1, 1, 1, 1, 1, 1, 1}}})
                   end))
      assert.equal("sluice: sluice.from_table(): schema metadata 'k' must map "
                   .. "a string to a string",
                   misuse(function()
                     sluice.from_table(row, {{"a", "i64"}, metadata = {k = {}}})
                   end))
    end)

    it("reports C-side refusals (a duplicate name) with the C message", function()
      local msg = misuse(function()
        sluice.from_table({{a = 1}}, {{"a", "i64"}, {"a", "f64"}})
      end)
      assert.matches("^sluice: sluice.from_table%(%): .*'a'", msg)
    end)
  end)
end)
