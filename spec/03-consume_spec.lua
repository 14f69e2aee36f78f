-- 03-consume_spec.lua: consuming a pipeline: iter, next, has_next, reset,
-- close, and the "decorators take their upstream" rule.
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse, collect = H.misuse, H.collect

describe("sluice.Pipeline", function()
  describe(":iter()", function()
    it("iterates the rest of the current pass", function()
      local p = sluice.range(4)
      assert.equal(0, p:next().i)
      assert.same({1, 2, 3}, collect(p))
    end)

    it("yields nothing more once the pass ended, until reset", function()
      local p = sluice.range(2)
      assert.same({0, 1}, collect(p))
      assert.same({}, collect(p))
      p:reset()
      assert.same({0, 1}, collect(p))
    end)

    it("works with a generic for and break", function()
      local p = sluice.range(100)
      local n = 0
      for s in p:iter() do
        n = n + 1
        if s.i == 9 then break end
      end
      assert.equal(10, n)
      assert.equal(10, p:next().i)
    end)
  end)

  describe(":next()", function()
    it("returns samples, then nil at the end, repeatedly", function()
      local p = sluice.range(1)
      assert.equal(0, p:next().i)
      assert.is_nil(p:next())
      assert.is_nil(p:next())
    end)

    it("raises the C message (no position) on an error, stickily", function()
      local p = sluice.zip(sluice.range(3), sluice.from_table {{x = 1}, {x = 2}})
      assert.equal(0, p:next().i)
      assert.equal(1, p:next().i)
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.equal("zip: reader 1 ended after 2 samples while reader 0 has more",
                   err)
      local ok2, err2 = pcall(p.next, p)
      assert.is_false(ok2)
      assert.equal(err, err2)
    end)
  end)

  describe(":has_next()", function()
    it("peeks without consuming", function()
      local p = sluice.range(2)
      assert.is_true(p:has_next())
      assert.is_true(p:has_next())
      assert.equal(0, p:next().i)
      assert.is_true(p:has_next())
      assert.equal(1, p:next().i)
      assert.is_false(p:has_next())
      assert.is_nil(p:next())
    end)

    it("raises errors like next", function()
      local p = sluice.zip(sluice.range(1), sluice.from_table({}, {{"x", "i64"}}))
      local ok, err = pcall(p.has_next, p)
      assert.is_false(ok)
      assert.equal("zip: reader 1 ended after 0 samples while reader 0 has more",
                   err)
    end)
  end)

  describe(":reset()", function()
    it("restarts mid-pass", function()
      local p = sluice.range(5)
      p:next()
      p:next()
      p:reset()
      assert.same({0, 1, 2, 3, 4}, collect(p))
    end)

    it("drops a peeked sample and clears a sticky error", function()
      local p = sluice.range(3)
      assert.is_true(p:has_next())
      p:reset()
      assert.same({0, 1, 2}, collect(p))
      local z = sluice.zip(sluice.range(2), sluice.from_table {{x = 1}})
      z:next()
      assert.has_error(function() z:next() end)
      z:reset()
      assert.equal(0, z:next().i)
    end)
  end)

  describe(":close()", function()
    it("is idempotent, and later use raises", function()
      local p = sluice.range(3)
      p:next()
      p:close()
      p:close()
      assert.equal("sluice: this pipeline is closed",
                   misuse(function() p:next() end))
      assert.equal("sluice: this pipeline is closed",
                   misuse(function() p:reset() end))
      assert.equal("sluice: this pipeline is closed",
                   misuse(function() p:schema() end))
      assert.equal("sluice: this pipeline is closed",
                   misuse(function() p:shuffle(2) end))
      assert.equal("sluice.pipeline (closed)", tostring(p))
    end)

    it("leaves samples already taken usable", function()
      local p = sluice.from_table {{t = "text", v = {1, 2}}}
      local s = p:next()
      local v = s.v
      p:close()
      collectgarbage()
      assert.equal("text", s.t)
      assert.same({1, 2}, v:totable())
    end)

    it("is also __close", function()
      local p = sluice.range(1)
      getmetatable(p).__close(p)
      assert.equal("sluice.pipeline (closed)", tostring(p))
    end)

    it("closing a prefetching pipeline mid-pass returns", function()
      local p = sluice.range(100000):prefetch(4)
      p:next()
      p:close()
      assert.equal("sluice.pipeline (closed)", tostring(p))
    end)
  end)

  describe("decorators", function()
    it("consume their upstream: later use raises naming the decorator", function()
      local p = sluice.range(10)
      local q = p:shuffle(4)
      assert.equal("sluice: this pipeline was consumed by :shuffle() "
                   .. "(decorators take their upstream; use the returned "
                   .. "pipeline)", misuse(function() p:next() end))
      assert.equal("sluice: this pipeline was consumed by :shuffle() "
                   .. "(decorators take their upstream; use the returned "
                   .. "pipeline)", misuse(function() p:batch(2) end))
      assert.equal(10, #collect(q))
      local a, b = sluice.range(1), sluice.range(1)
      local _ = sluice.chain(a, b)
      assert.equal("sluice: this pipeline was consumed by sluice.chain() "
                   .. "(decorators take their upstream; use the returned "
                   .. "pipeline)", misuse(function() b:has_next() end))
      assert.equal("sluice.pipeline (consumed by sluice.chain())", tostring(a))
    end)

    it("do not consume their upstream on misuse", function()
      local p = sluice.range(3)
      assert.equal("sluice: :batch(): batch size must be an integer >= 1 (got 0)",
                   misuse(function() p:batch(0) end))
      assert.equal("sluice: :batch(): unknown option 'drop' (known: drop_last, "
                   .. "fuse, lod, pad)", misuse(function() p:batch(2, {drop = true}) end))
      assert.same({0, 1, 2}, collect(p))
    end)

    it("must be called with ':'", function()
      local p = sluice.range(3)
      assert.equal("sluice: :take() needs a pipeline (got a number; call it "
                   .. "with ':')", misuse(function() p.take(3) end))
    end)
  end)

  describe("__tostring", function()
    it("names the last stage", function()
      assert.equal("sluice.pipeline (range)", tostring(sluice.range(1)))
      assert.equal("sluice.pipeline (batch)", tostring(sluice.range(1):batch(1)))
    end)
  end)
end)
