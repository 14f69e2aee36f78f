-- 31-rng_jit_spec.lua: sluice.rng (ctx.rng) draws the same numbers in
-- compiled code as in the interpreter and as core/rng.h in C.
--
-- LuaJIT 2.1 before its fix of issue #1079 (Debian 12's 2.1.0-beta3
-- +git20220320 among them) folds (x & k) >> s on 64-bit integers with
-- 32-bit arithmetic.  sluice.rng's 64x64->128-bit multiply used to take
-- its low halves with bit.band, and in a trace where the bound of
-- rng:random(m, n) was a constant power of two the folded mask made the
-- high word wrong: rng(5, 1, 18):random(0, 3) gave 4 in a worker state
-- (lua_flow.flat_map_resumes_at_every_cut failed about 1 run in 40 under
-- load).  Here the bounds are literals inside loops hot enough to be
-- compiled, so the trace sees them as constants; every draw is compared
-- with the interpreter's and, where pinned, with values computed in C by
-- sl__rng_bounded (core/rng.h).
local rng = require "sluice.rng"

-- f(rng) interpreted and then compiled (its traces start afresh).
-- Returns both results; fails if nothing was compiled, so that the
-- comparison cannot pass vacuously with the JIT off.
local function interpreted_and_compiled(src)
  local f = assert(loadstring(src, "=rng_jit_loop"))()
  jit.off(f, true)
  local interpreted = f(rng)
  jit.on(f, true)
  jit.flush()
  local compiled = f(rng)
  assert.is_true(jit.status(), "the JIT is off: nothing to check")
  assert.is_not_nil(require("jit.util").traceinfo(1),
                    "no trace was compiled for the loop")
  return interpreted, compiled
end

-- Computed in C with core/rng.h (key = mix(mix(seed) ^ mix(e + G) ^
-- mix(i + 2G)), xoshiro256** seeded by splitmix64 from the key): 200
-- draws of sl__rng_bounded(4) and of sl__rng_bounded(2) for (5, 1, 18),
-- and the first sl__rng_bounded(4) of (5, 1, i) for i = 0 .. 199.
local C_N4 = "31322203333113130031003112101220031200332021032122120101132120"
  .. "3002300322201032020023332031332131023202223131011331121133012230230"
  .. "1201032132300003320033103332210222003013320323021112030222112020033"
  .. "0233"
local C_N2 = "10111101111001010010001001000110010100111010011011010000011010"
  .. "1001100111100011010011111010111010011101111010000110010011001110110"
  .. "0100011011100001110011001111100111001001110111010001010111001010011"
  .. "0111"
local C_BY_INDEX = "2300103200211111123101310131323021212012331032332013111"
  .. "1202120102222002003133303321100322202312033103020110222001033223111"
  .. "3220021000123122302301021102021110323113022222121323230120220132303"
  .. "12203010032"

describe("sluice.rng under the JIT", function()
  it("draws random(0, 3) and random(0, 1) as core/rng.h does", function()
    assert.equal(200, #C_N4)
    assert.equal(200, #C_N2)
    assert.equal(200, #C_BY_INDEX)
    for _, c in ipairs({{3, C_N4}, {1, C_N2}}) do
      local a, b = interpreted_and_compiled(([[
        return function(rng)
          local r, out = rng.new(5, 1, 18), {}
          for j = 1, 200 do out[j] = r:random(0, %d) end
          return table.concat(out)
        end]]):format(c[1]))
      assert.equal(c[2], a)
      assert.equal(c[2], b)
    end
    -- ctx.rng's way: one generator moved to each sample's index
    local a, b = interpreted_and_compiled([[
      return function(rng)
        local r, out = rng.new(5, 1, 0), {}
        for i = 0, 199 do
          r:_at(1, i)
          out[i + 1] = r:random(0, 3)
        end
        return table.concat(out)
      end]])
    assert.equal(C_BY_INDEX, a)
    assert.equal(C_BY_INDEX, b)
  end)

  it("draws the same for every constant power-of-two bound and its "
     .. "neighbours", function()
    -- k -> the 100th draw of sl__rng_bounded(2^k) for (5, 1, 18), from C
    local pinned = {[1] = 1, [2] = 2, [3] = 4, [16] = 32890,
                    [31] = 1077765735, [32] = 2155531471, [33] = 4311062943,
                    [40] = 551816056811, [52] = 2260238568701376,
                    [53] = 4520477137402752}
    for k = 0, 53 do
      local n = 2 ^ k
      for _, size in ipairs({n - 1, n, n + 1}) do
        for _, m in ipairs({0, -7}) do
          if size >= 1 and size <= 2 ^ 53 then
            local a, b = interpreted_and_compiled(([[
              return function(rng)
                local r, out = rng.new(5, 1, 18), {}
                for j = 1, 100 do out[j] = r:random(%d, %.17g) end
                return out
              end]]):format(m, m + size - 1))
            local what = ("random(%d, %.17g)"):format(m, m + size - 1)
            for j = 1, 100 do
              assert.equal(a[j], b[j], what .. ", draw " .. j)
              assert.is_true(b[j] >= m and b[j] <= m + size - 1,
                             what .. " out of range: " .. tostring(b[j]))
            end
            if size == n and pinned[k] then
              assert.equal(m + pinned[k], b[100], what)
            end
          end
        end
      end
    end
  end)

  it("draws the same floats, normals, raw bits and variable bounds",
     function()
    local a, b = interpreted_and_compiled([[
      return function(rng)
        local r, out = rng.new(11, 2, 0), {}
        for j = 1, 300 do out[#out + 1] = r:random(0, (j * 7919) % 1000003) end
        for j = 1, 300 do out[#out + 1] = r:random(2 ^ (j % 54)) end
        for _ = 1, 200 do out[#out + 1] = r:random() end
        for _ = 1, 200 do out[#out + 1] = r:normal(1, 2) end
        for _ = 1, 200 do out[#out + 1] = tostring(r:bits()) end
        return out
      end]])
    assert.equal(1200, #b)
    for j = 1, #a do assert.equal(a[j], b[j], "value " .. j) end
  end)
end)
