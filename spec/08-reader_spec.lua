-- 08-reader_spec.lua: sluice.reader(fn, opts), a source written in Lua
-- (Paddle's reader creator: fn() returns an iterator), run in a worker
-- state.
local ffi = require "ffi"
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse, collect, where = H.misuse, H.collect, H.where

describe("sluice", function()
  describe(".reader()", function()
    it("yields the rows of fn()'s iterator, schema inferred from the first", function()
      local N = 5
      local p = sluice.reader(function()
        local k = 0
        return function()
          k = k + 1
          if k <= N then
            return {id = k, name = "row" .. k, v = {k, k / 2}}
          end
        end
      end)
      local sch = p:schema()
      assert.same({"id", "name", "v"}, {sch[1].name, sch[2].name, sch[3].name})
      assert.same({name = "v", dtype = "f64", shape = {2}}, sch.v)
      assert.same({"row1", "row2", "row3", "row4", "row5"}, collect(p, "name"))
    end)

    it("calls fn() again on reset for a fresh iterator", function()
      local p = sluice.reader(function()
        local k = 0
        return function()
          k = k + 1
          if k <= 3 then return {k = k} end
        end
      end)
      assert.same({1, 2, 3}, collect(p, "k"))
      p:reset()
      assert.same({1, 2, 3}, collect(p, "k"))
      p:next()
      p:reset()
      assert.same({1, 2, 3}, collect(p, "k"))
    end)

    it("checks rows against a given schema", function()
      local p = sluice.reader(function()
        local k = 0
        return function()
          k = k + 1
          if k <= 3 then return {x = k, img = {{k, k}, {k, k}}} end
        end
      end, {schema = {{"x", "f32", {}}, {"img", "u8", {2, 2}}}})
      local sch = p:schema()
      assert.equal("f32", sch.x.dtype)
      local s = p:next()
      assert.equal("u8", s.img.dtype)
      assert.same({{1, 1}, {1, 1}}, s.img:totable())
      local q = sluice.reader(function()
        local k = 0
        return function()
          k = k + 1
          if k == 1 then return {x = 1} end
          if k == 2 then return {y = 2} end
        end
      end, {schema = {{"x", "i64", {}}}})
      assert.equal(1, q:next().x)
      local ok, err = pcall(q.next, q)
      assert.is_false(ok)
      assert.matches("the yielded row has no field 'x'", err, 1, true)
    end)

    it("accepts sample objects from the iterator", function()
      local p = sluice.reader(function()
        local src = sluice.range(4)
        return function()
          local s = src:next()
          if s then s.double = s.i * 2 end
          return s
        end
      end)
      assert.same({0, 2, 4, 6}, collect(p, "double"))
    end)

    it("gives an empty pass for an empty iterator with a schema", function()
      local p = sluice.reader(function() return function() end end,
                              {schema = {{"x", "i64"}}})
      assert.is_nil(p:next())
    end)

    it("carries iterator errors to the consumer after the rows before them", function()
      local fn = function()
        local k = 0
        return function()
          k = k + 1
          if k == 3 then error("no third row") end
          return {k = k}
        end
      end
      local p = sluice.reader(fn)
      assert.same({1, 2}, {p:next().k, p:next().k})
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.equal("reader (" .. where(fn) .. "): ", err:sub(1, #where(fn) + 11))
      assert.matches("no third row", err, 1, true)
      assert.matches("stack traceback", err, 1, true)
    end)

    it("reports a yielded value that is not a row", function()
      local p = sluice.reader(function()
        local k = 0
        return function()
          k = k + 1
          if k == 1 then return {k = 1} end
          if k == 2 then return 7 end
        end
      end)
      assert.equal(1, p:next().k)
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.matches("reader yielded a number (it must yield a sample or a "
                     .. "table of fields)", err, 1, true)
    end)

    it("rejects bad arguments and unshippable upvalues where it is called", function()
      local cd = ffi.new("int[1]")
      local fn = function() local _ = cd return function() end end
      assert.equal("reader: cannot ship upvalue 'cd' (a cdata) of the function "
                   .. "defined at " .. where(fn),
                   misuse(function() sluice.reader(fn) end))
      assert.equal("sluice: sluice.reader(): expected a function or a "
                   .. "\"module.function\" name (got a nil)",
                   misuse(function() sluice.reader() end))
      assert.equal("sluice: sluice.reader(): option 'buffer' must be an "
                   .. "integer >= 1 (got 0)",
                   misuse(function()
                     sluice.reader(function() end, {buffer = 0})
                   end))
      assert.equal("sluice: sluice.reader(): unknown option 'schem' (known: "
                   .. "buffer, schema)",
                   misuse(function() sluice.reader(function() end, {schem = 1}) end))
    end)
  end)
end)
