-- raises.lua: raises while declaring (tests/test_pipeline.c).
local sluice = require "sluice"
local function check(n)
  if n < 10 then error("need at least 10 samples, got " .. n) end
end
check(3)
return sluice.range(3)
