-- lua_map.lua N THREADS: 0..N-1 doubled by a Lua map on THREADS workers,
-- in batches of 10 (tests/test_pipeline.c).
local sluice = require "sluice"
local n, threads = tonumber((...)), tonumber((select(2, ...)))
return sluice.range(n)
  :map(function(s) s.i = s.i * 2 return s end, {threads = threads})
  :batch(10)
