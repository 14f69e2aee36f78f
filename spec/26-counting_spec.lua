-- 26-counting_spec.lua: counting and stepping as tf.data does them (issue
-- 19, operation 9): take(-1) / skip(-1) (all / none), :repeat_forever()
-- (multi_pass(math.huge)), which ends over an empty upstream instead of
-- looping, and :enumerate().
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local collect, misuse = H.collect, H.misuse

describe("p:take(-1) and p:skip(-1)", function()
  it("take every sample and skip every sample, as tf.data's -1", function()
    assert.same({0, 1, 2, 3}, collect(sluice.range(4):take(-1), "i"))
    assert.equal(4, sluice.range(4):take(-1):length())
    assert.same({}, collect(sluice.range(4):skip(-1), "i"))
    assert.equal(0, sluice.range(4):skip(-1):length())
    assert.same({}, collect(sluice.range(0):take(-1), "i"))
  end)

  it("refuse other negative counts", function()
    assert.equal("sluice: :take(): count (or -1: all) must be an integer >= 0 (got -2)",
                 misuse(function() sluice.range(3):take(-2) end))
    assert.equal("sluice: :skip(): count (or -1: all) must be an integer >= 0 (got 1.5)",
                 misuse(function() sluice.range(3):skip(1.5) end))
  end)
end)

describe("p:repeat_forever()", function()
  it("repeats the upstream pass after pass", function()
    local p = sluice.range(3):repeat_forever():take(8)
    assert.same({0, 1, 2, 0, 1, 2, 0, 1}, collect(p, "i"))
    p:reset()
    assert.equal(0, p:next().i)
    p:reset() -- mid-pass
    assert.same({0, 1, 2, 0, 1, 2, 0, 1}, collect(p, "i"))
  end)

  it("ends over an empty upstream instead of spinning", function()
    local p = sluice.range(0):repeat_forever()
    assert.is_nil(p:next())
    assert.equal(0, p:length())
    local f = sluice.range(5):filter(function() return false end):repeat_forever()
    assert.is_nil(f:next())
  end)

  it("is multi_pass(math.huge), of unknown length", function()
    local p = sluice.range(3):multi_pass(math.huge)
    local n, why = p:length()
    assert.is_nil(n)
    assert.matches("repeats 3 samples forever", why, 1, true)
    assert.same({0, 1, 2, 0}, collect(p:take(4), "i"))
  end)
end)

describe("p:enumerate()", function()
  it("adds the position in the pass as an i64 field, restarting each pass", function()
    local p = sluice.range(4):map(function(s) s.i = s.i * 10 return s end)
                 :enumerate()
    assert.equal("i64", p:schema().index.dtype)
    assert.same({0, 1, 2, 3}, collect(p, "index"))
    p:reset()
    assert.same({0, 1, 2, 3}, collect(p, "index"))
    local q = sluice.range(3):enumerate{field = "n", start = 5}
    assert.same({5, 6, 7}, collect(q, "n"))
    assert.same({}, collect(sluice.range(0):enumerate(), "index"))
  end)

  it("counts after a filter, in order whatever the thread count upstream", function()
    for _, threads in ipairs({1, 4}) do
      local p = sluice.range(20):map(function(s) return s end, {threads = threads})
                   :filter(function(s) return s.i % 2 == 0 end):enumerate()
      local got = {}
      for s in p:iter() do got[#got + 1] = s.i .. ":" .. s.index end
      assert.equal("0:0 2:1 4:2 18:9", table.concat({got[1], got[2], got[3], got[10]}, " "))
      p:close()
    end
  end)

  it("refuses bad options and a field that exists", function()
    assert.equal("sluice: :enumerate(): the samples already have a field 'i' "
                 .. "(give another with {field = ...})",
                 misuse(function() sluice.range(3):enumerate{field = "i"} end))
    assert.equal("sluice: :enumerate(): option 'start' must be an integer in "
                 .. "(-2^53, 2^53) (got 0.5)",
                 misuse(function() sluice.range(3):enumerate{start = 0.5} end))
    assert.equal("sluice: :enumerate(): option 'field' must be a non-empty string (got 3)",
                 misuse(function() sluice.range(3):enumerate{field = 3} end))
    assert.equal("sluice: :enumerate(): unknown option 'x' (known: field, start)",
                 misuse(function() sluice.range(3):enumerate{x = 1} end))
  end)
end)
