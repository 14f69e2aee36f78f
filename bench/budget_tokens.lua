-- budget_tokens.lua [MEMORY] [N] - a token pipeline under the memory budget
-- (issue 27 item 1; docs/PERFORMANCE.md "A memory budget"): N (default
-- 20000) documents of 1..4096 i32 tokens (seeded lengths; made by a Lua map
-- on 2 threads over range) -> pack{seq_len = 2048} -> batch(64) (512 KiB
-- a batch) -> prefetch(256) -> a Lua map spinning 10 ms per batch on 1
-- thread (a consumer slower than the producers, so every window fills).
-- MEMORY: a size ("64MiB") set on the source; "none": no budget at all
-- (not even the default); "default" or nothing: the default budget.
--   /usr/bin/time -v build/tools/sluice run bench/budget_tokens.lua 64MiB
local sluice = require "sluice"
local memory, n = ...
local src = sluice.range(tonumber(n) or 20000)
if memory == "none" then
  src:budget(false)
elseif memory and memory ~= "" and memory ~= "default" then
  src:budget(memory)
end
return src:map(function(s)
  -- a length from the index (reproducible), 1..4096 tokens
  if s.i % 1024 == 0 then collectgarbage() end
  local len = (s.i * 2654435761) % 4096 + 1
  local ids = sluice.tensor("i32", {len})
  ids.data[0] = s.i % 50257
  s.i = nil
  s.ids = ids
  return s
end, {threads = 2, schema = {{"ids", "i32", {-1}}}}):pack{seq_len = 2048, fields = {"ids"}}
  :batch(64):prefetch(256):map(function(b)
    local t = os.clock() + 0.01
    while os.clock() < t do end
    return b
  end, {threads = 1})
