-- bench/shuffle_quality.lua - how uniform a shuffle is, by the measure of
-- MosaicML Streaming's shuffle-quality benchmark: the Shannon entropy (in
-- bits) of the differences between neighbouring sample indices in one
-- pass's order.  In order, every difference is 1 (entropy 0); a windowed
-- shuffle keeps neighbours near each other (differences bounded by about
-- the window); a uniform permutation spreads them over [-n, n].
--
--   luajit bench/shuffle_quality.lua [N] [RUNS]
--
-- Over sluice.range(N) (default 100000), each figure the mean of RUNS
-- passes (default 3): in order, :shuffle(1000), :shuffle(10000),
-- :global_shuffle(), and a Fisher-Yates permutation drawn with LuaJIT's
-- math.random (the reference for a true uniform permutation).  Prints one
-- JSON object per case, then a table.
local sluice = require "sluice"

local N = tonumber(arg[1]) or 100000
local RUNS = tonumber(arg[2]) or 3

local function entropy(order)
  local count, total = {}, 0
  for i = 2, #order do
    local d = order[i] - order[i - 1]
    count[d] = (count[d] or 0) + 1
    total = total + 1
  end
  local h = 0
  for _, c in pairs(count) do
    local p = c / total
    h = h - p * math.log(p) / math.log(2)
  end
  return h
end

local function pass_of(p)
  local order = {}
  for s in p:iter() do order[#order + 1] = s.i end
  return order
end

local cases = {
  {"in order", function() return sluice.range(N) end},
  {":shuffle(1000)", function(r)
    return sluice.range(N):shuffle(1000, {seed = r})
  end},
  {":shuffle(10000)", function(r)
    return sluice.range(N):shuffle(10000, {seed = r})
  end},
  {":global_shuffle()", function(r)
    return sluice.range(N):global_shuffle({seed = r})
  end},
}

local rows = {}
for _, c in ipairs(cases) do
  local sum = 0
  for r = 1, RUNS do sum = sum + entropy(pass_of(c[2](r))) end
  rows[#rows + 1] = {c[1], sum / RUNS}
end
local sum = 0
for r = 1, RUNS do
  math.randomseed(r)
  local order = {}
  for i = 1, N do order[i] = i - 1 end
  for i = N, 2, -1 do
    local j = math.random(i)
    order[i], order[j] = order[j], order[i]
  end
  sum = sum + entropy(order)
end
rows[#rows + 1] = {"uniform (Fisher-Yates)", sum / RUNS}
for _, row in ipairs(rows) do
  print(('{"bench":"shuffle_quality","n":%d,"case":"%s","entropy_bits":%.3f}')
        :format(N, row[1], row[2]))
end
io.stderr:write(("\n%-24s %s\n"):format("order (n = " .. N .. ")", "entropy of neighbour differences (bits)"))
for _, row in ipairs(rows) do
  io.stderr:write(("%-24s %.3f\n"):format(row[1], row[2]))
end
