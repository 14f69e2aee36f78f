-- 15-reliability_spec.lua: Lua decorators that fail, seen from the DSL
-- (docs/RELIABILITY.md): the `deadline` option of :map() and :filter()
-- stops a runaway function and reports it at its sample, naming the
-- function, the line it was running and the deadline, and the pipeline is
-- still usable (reset) and closable; errors raised with values that are not
-- strings and running out of memory arrive as errors too.  The C side is
-- tests/test_lua_faults.c.
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse, where = H.misuse, H.where

local THIS = debug.getinfo(1, "S").short_src

describe("sluice.Pipeline", function()
  describe(":map{deadline=}", function()
    it("stops a runaway function at its deadline and names it", function()
      for _, threads in ipairs {1, 2} do
        local fn = function(s)
          if s.i == 3 and rawget(_G, "spec_spun") == nil then
            rawset(_G, "spec_spun", true)
            while true do end
          end
          return s
        end
        local loop = debug.getinfo(1, "l").currentline - 4
        local p = sluice.range(10):map(fn, {threads = threads,
                                            deadline = 0.2})
        local got = {}
        local ok, err
        repeat
          ok, err = pcall(p.next, p)
          if ok then got[#got + 1] = err.i end
        until not ok
        assert.same({0, 1, 2}, got)
        assert.equal("map (" .. where(fn) .. "): deadline of 0.2 s exceeded "
                     .. "(the call was running " .. THIS .. ":" .. loop .. ")",
                     err:match("^[^\n]*"))
        -- The worker state survived: a reset gives a whole pass (the
        -- global that made it spin lives in that state: with one thread,
        -- the same state meets sample 3 again).
        if threads == 1 then
          p:reset()
          local n = 0
          for _ in p:iter() do n = n + 1 end
          assert.equal(10, n)
        end
        p:close()
      end
    end)

    it("applies to filter too", function()
      local p = sluice.range(5):filter(function(s)
        if s.i == 1 then while true do end end
        return true
      end, {deadline = 0.1})
      assert.equal(0, p:next().i)
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.matches("deadline of 0.1 s exceeded", err, 1, true)
    end)

    it("refuses a deadline that is not a number of seconds in [0, 1e6]", function()
      -- The range is checked in one place (sl__lua_stage); 0 is no deadline.
      for _, bad in ipairs {-1, "1", 1e7, 0 / 0} do
        local msg = misuse(function()
          sluice.range(3):map(function(s) return s end, {deadline = bad})
        end)
        assert.matches("option 'deadline' must be a number of seconds", msg,
                       1, true)
      end
      assert.same({0, 1, 2}, H.collect(sluice.range(3):map(function(s)
        return s
      end, {deadline = 0})))
    end)
  end)

  describe(":map() failing", function()
    it("reports error() with a table, nil or a number at its sample", function()
      local values = {
        {function() error({code = 7}) end, "(error object is a table value)"},
        {function() error(nil) end, "(error object is a nil value)"},
        {function() error(42) end, "42"},
      }
      for _, v in ipairs(values) do
        local raise = v[1]
        local p = sluice.range(5):map(function(s)
          if s.i == 2 then raise() end
          return s
        end)
        assert.same({0, 1}, {p:next().i, p:next().i})
        local ok, err = pcall(p.next, p)
        assert.is_false(ok)
        assert.matches(v[2], err, 1, true)
        p:close()
      end
    end)

    it("reports running out of memory and stays usable", function()
      local p = sluice.range(5):map(function(s)
        if s.i == 1 and rawget(_G, "spec_oom") == nil then
          rawset(_G, "spec_oom", true)
          s.n = #string.rep("x", 2^31 - 2)
        end
        return s
      end)
      assert.equal(0, p:next().i)
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.matches("not enough memory", err, 1, true)
      p:reset()
      local n = 0
      for _ in p:iter() do n = n + 1 end
      assert.equal(5, n)
    end)
  end)
end)
