-- args_echo.lua ...: one sample per argument, field "len" = #arg[i],
-- checking `...` against `arg` (tests/test_pipeline.c).
local sluice = require "sluice"
local n = select("#", ...)
local rows = {}
for i = 1, n do
  local v = select(i, ...)
  assert(type(v) == "string", "argument " .. i .. " is not a string")
  assert(arg[i] == v, "arg[" .. i .. "] differs from ...")
  rows[i] = {len = #v, index = i}
end
assert(arg[n + 1] == nil, "arg has more than ... ")
assert(type(arg[0]) == "string" and arg[0]:match("args_echo%.lua$"),
       "arg[0] is not the script path")
if n == 0 then return sluice.range(0) end
return sluice.from_table(rows)
