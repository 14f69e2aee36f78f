-- 13-stats_spec.lua: run statistics from Lua: p:stats() lists the chain's
-- stages (last first, sources last) with their counts and times,
-- p:stats_report(wall) is the table `sluice run --stats` prints, and
-- sluice.stats(on) switches stage timing.  The timed case builds a chain
-- whose bottleneck is known (a Lua map that spins) and checks the verdict,
-- not the machine's speed.
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse = H.misuse

local function drain(p)
  local n = 0
  for b in p:iter() do
    n = n + 1
    sluice.release(b)
  end
  return n
end

describe("run statistics", function()
  after_each(function() sluice.stats(false) end)

  it("counts samples in and out per stage, sink first", function()
    sluice.stats(false)
    local p = sluice.range(100):batch(8)
    assert.equal(13, drain(p))
    local st = p:stats()
    assert.equal(2, #st)
    assert.same({"batch", 0, nil, 0, 100, 13},
                {st[1].name, st[1].depth, st[1].downstream, st[1].threads,
                 st[1].samples_in, st[1].samples_out})
    assert.same({"range", 1, 1, 100, 100},
                {st[2].name, st[2].depth, st[2].downstream,
                 st[2].samples_in, st[2].samples_out})
    assert.equal(0, st[1].busy_s) -- timing off
    p:close()
  end)

  it("sluice.stats(on) returns the previous setting", function()
    assert.is_false(sluice.stats(true))
    assert.is_true(sluice.stats(false))
    assert.is_false(sluice.stats())
  end)

  it("names a slow Lua map as the limiting stage", function()
    sluice.stats(true)
    local p = sluice.range(300):map(function(s)
      local t = os.clock() + 0.0003
      while os.clock() < t do end
      return s
    end, {threads = 1}):batch(10):prefetch(2)
    assert.is_true(sluice.stats())
    assert.equal(30, drain(p))
    local st = p:stats()
    assert.equal("prefetch", st[1].name)
    assert.equal("map", st[3].name)
    assert.equal(1, st[3].threads)
    assert.is_true(st[3].busy_s > 0)
    assert.is_true(st[3].busy_s > 10 * st[2].busy_s)
    -- wall: the consumer's wait is (nearly) the whole run here
    local wall = st[1].next_s * 1.02
    local report = p:stats_report(wall)
    assert.truthy(report:find("limiting stage: map", 1, true), report)
    assert.truthy(report:find("\n    map ", 1, true), report)
    p:close()
  end)

  it("rejects a bad wall time and a closed pipeline", function()
    local p = sluice.range(3)
    assert.truthy(misuse(function() p:stats_report(0) end)
                  :find("wall_s must be a number of seconds > 0", 1, true))
    p:close()
    assert.truthy(misuse(function() p:stats() end):find("closed", 1, true))
  end)
end)
