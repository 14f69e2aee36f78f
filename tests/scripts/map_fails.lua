-- map_fails.lua: a Lua map that raises at sample 5 (tests/test_pipeline.c).
local sluice = require "sluice"
return sluice.range(10):map(function(s)
  if s.i == 5 then error("bad sample " .. tostring(s.i)) end
  return s
end, {threads = 2})
