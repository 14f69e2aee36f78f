-- budget_rss.lua [MEMORY] [N] - peak RSS against the memory budget (issue
-- 27 item 1; docs/PERFORMANCE.md "A memory budget"): N (default 400)
-- samples of 1 MiB each (u8 [1048576], made by a Lua map on 2 threads over
-- range, which runs a full collection every 4 samples: the worker states'
-- garbage is not counted by the budget), prefetch(64), then a Lua map
-- spinning 2 ms per sample on 1 thread (a consumer slower than the
-- producers, so every window fills), with the budget MEMORY (a size:
-- "64MiB") set on the source, none at all ("none": not even the default
-- budget), or the default ("default" or nothing).
--   /usr/bin/time -v build/tools/sluice run bench/budget_rss.lua 64MiB
local sluice = require "sluice"
local memory, n = ...
local src = sluice.range(tonumber(n) or 400)
if memory == "none" then
  src:budget(false)
elseif memory and memory ~= "" and memory ~= "default" then
  src:budget(memory)
end
return src:map(function(s)
  if s.i % 4 == 0 then collectgarbage() end
  s.x = sluice.tensor("u8", {1048576})
  return s
end, {threads = 2}):prefetch(64):map(function(s)
  local t = os.clock() + 0.002
  while os.clock() < t do end
  return s
end, {threads = 1})
