-- slow_map.lua N: a Lua map that spins ~0.2 ms per sample on one worker,
-- batched and prefetched: `sluice run --stats` must name the map as the
-- limiting stage (tests/cli/run.sh).
local sluice = require "sluice"
local n = tonumber((...)) or 400
return sluice.range(n)
  :map(function(s)
    local t = os.clock() + 0.0002
    while os.clock() < t do end
    return s
  end, {threads = 1})
  :batch(10)
  :prefetch(2)
