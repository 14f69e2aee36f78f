-- 06-tensor_spec.lua: tensor views and owned tensors: sluice.tensor, .data,
-- .shape, .dtype, .lod, :numel(), 0-based indexing, :totable(), :clone(),
-- write protection, f16/bf16 conversion.
local ffi = require "ffi"
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse = H.misuse

describe("sluice", function()
  describe(".tensor()", function()
    it("makes a zero-filled tensor of a dtype and shape", function()
      local t = sluice.tensor("f32", {2, 3})
      assert.equal("f32", t.dtype)
      assert.same({2, 3}, t.shape)
      assert.equal(2, t.rank)
      assert.equal(6, t:numel())
      assert.equal(24, t.nbytes)
      assert.is_nil(t.lod)
      assert.same({{0, 0, 0}, {0, 0, 0}}, t:totable())
      assert.equal("sluice.tensor(f32[2,3])", tostring(t))
    end)

    it("takes a number as a 1-d shape, and {} for a scalar", function()
      assert.same({4}, sluice.tensor("u8", 4).shape)
      local s = sluice.tensor("i64", {})
      assert.equal(1, s:numel())
      s[0] = 5
      assert.equal(5, s:totable())
    end)

    it("is writable through v[i] and .data", function()
      local t = sluice.tensor("i32", {2, 2})
      t[0] = 1
      t.data[3] = 4
      assert.same({{1, 0}, {0, 4}}, t:totable())
      assert.equal(4, t[3])
    end)

    it("types .data by dtype", function()
      local want = {
        bool = "bool *", u8 = "uint8_t *", i8 = "int8_t *",
        u16 = "uint16_t *", i16 = "int16_t *", u32 = "uint32_t *",
        i32 = "int32_t *", u64 = "uint64_t *", i64 = "int64_t *",
        f16 = "uint16_t *", bf16 = "uint16_t *", f32 = "float *",
        f64 = "double *", bytes = "uint8_t *",
      }
      for dt, ct in pairs(want) do
        assert.is_true(ffi.istype(ct, sluice.tensor(dt, {1}).data), dt)
      end
    end)

    it("converts f16 and bf16 elements to and from numbers", function()
      local h = sluice.tensor("f16", {4})
      h[0], h[1], h[2], h[3] = 1.5, -2, 65504, 1e-7
      assert.equal(0x3e00, h.data[0])
      assert.equal(0xc000, h.data[1])
      assert.equal(0x7bff, h.data[2])
      assert.same({1.5, -2, 65504, 2^-24 * 2}, h:totable())
      local b = sluice.tensor("bf16", {2})
      b[0], b[1] = 1.5, -3
      assert.equal(0x3fc0, b.data[0])
      assert.same({1.5, -3}, b:totable())
    end)

    it("checks element values like sample fields", function()
      local t = sluice.tensor("u8", {2})
      assert.equal("sluice: tensor element 0: 256 is out of range for u8",
                   misuse(function() t[0] = 256 end))
      assert.equal("sluice: tensor element 1: 0.5 is not an integer (dtype u8)",
                   misuse(function() t[1] = 0.5 end))
      local b = sluice.tensor("bool", {1})
      b[0] = true
      assert.is_true(b[0])
    end)

    it("rejects bad dtypes and shapes", function()
      assert.equal("sluice: sluice.tensor(): unknown dtype 'float'",
                   misuse(function() sluice.tensor("float", {1}) end))
      assert.equal("sluice: sluice.tensor(): shape[2] must be an integer >= 0 (got -1)",
                   misuse(function() sluice.tensor("u8", {1, -1}) end))
      assert.equal("sluice: sluice.tensor(): shape must be an array of sizes (got a "
                   .. "string)", misuse(function() sluice.tensor("u8", "3") end))
      assert.equal("sluice: sluice.tensor(): rank 9 is more than 8",
                   misuse(function()
                     sluice.tensor("u8", {1, 1, 1, 1, 1, 1, 1, 1, 1})
                   end))
    end)
  end)
end)

describe("sluice tensor view", function()
  local function view()
    local s = sluice.from_table({{m = {{1, 2, 3}, {4, 5, 6}}}},
                                {{"m", "i16", {2, 3}}}):next()
    return s.m
  end

  it("indexes the flat data from 0", function()
    local v = view()
    assert.equal(1, v[0])
    assert.equal(6, v[5])
    assert.equal("sluice: tensor index 6 out of range [0, 6)",
                 misuse(function() local _ = v[6] end))
    assert.equal("sluice: tensor index -1 out of range [0, 6)",
                 misuse(function() local _ = v[-1] end))
  end)

  it("nests :totable() by shape", function()
    assert.same({{1, 2, 3}, {4, 5, 6}}, view():totable())
    local s = sluice.from_table({{c = {{{1}, {2}}, {{3}, {4}}}}}):next()
    assert.same({{{1}, {2}}, {{3}, {4}}}, s.c:totable())
  end)

  it("is read-only", function()
    local v = view()
    assert.equal("sluice: this tensor is a read-only view of a sample "
                 .. "(clone() it, or make one with sluice.tensor)",
                 misuse(function() v[0] = 1 end))
    assert.equal("sluice: cannot set 'shape' on a tensor",
                 misuse(function() v.shape = {6} end))
  end)

  it("clones into a writable tensor with its own data", function()
    local v = view()
    local c = v:clone()
    assert.same(v.shape, c.shape)
    assert.equal("i16", c.dtype)
    c[0] = 100
    assert.equal(100, c[0])
    assert.equal(1, v[0])
    assert.are_not.equal(v.data, c.data)
  end)

  it("exposes and clones LoD offsets", function()
    local b = sluice.from_table({{v = {1, 2}}, {v = {3}}}):batch(2):next()
    assert.same({0, 2, 3}, b.v.lod)
    local c = b.v:clone()
    assert.same({0, 2, 3}, c.lod)
    assert.same({1, 2, 3}, c:totable())
  end)

  it("raises for an unknown property", function()
    assert.equal("sluice: a tensor has no field 'size' (fields: data, dtype, "
                 .. "lod, nbytes, rank, shape; methods: clone, numel, totable)",
                 misuse(function() local _ = view().size end))
  end)
end)
