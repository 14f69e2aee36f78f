-- busy_map.lua: an endless-ish pipeline whose 4 Lua workers spin per sample,
-- for closing mid-pass (tests/test_pipeline.c).
local sluice = require "sluice"
return sluice.range(1000000):map(function(s)
  local x = 0
  for k = 1, 20000 do x = x + k % 7 end
  s.i = s.i + x * 0
  return s
end, {threads = 4}):batch(4)
