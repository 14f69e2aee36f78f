-- 16-length_spec.lua: p:length(), the samples (batches after :batch()) one
-- pass of a pipeline yields (sl_reader_length), or nil and the reason where
-- a stage cannot know before reading.
local sluice = require "sluice"

local H = dofile "spec/helper.lua"

describe("p:length()", function()
  it("is what one pass yields, through decorators", function()
    local cases = {
      {sluice.range(10), 10},
      {sluice.range(10):map(function(s) return s end, {threads = 2}), 10},
      {sluice.range(10):shuffle(4, {seed = 1}):batch(4), 3},
      {sluice.range(10):batch(4, {drop_last = true}), 2},
      {sluice.range(0):batch(4), 0},
      {sluice.from_table({{x = 1}, {x = 2}, {x = 3}}), 3, "x"},
    }
    for i, c in ipairs(cases) do
      local p, want = c[1], c[2]
      assert.equal(want, p:length(), "case " .. i)
      assert.equal(want, #H.collect(p, c[3]), "case " .. i .. " drained")
      p:close()
    end
  end)

  it("is nil with the reason after a filter", function()
    local p = sluice.range(10):filter(function(s) return s.i < 3 end):batch(2)
    local n, why = p:length()
    assert.is_nil(n)
    assert.matches("filter: the number of samples a pass yields is not known",
                   why, 1, true)
    p:close()
  end)

  it("raises on a closed pipeline", function()
    local p = sluice.range(3)
    p:close()
    assert.has_error(function() p:length() end)
  end)
end)
