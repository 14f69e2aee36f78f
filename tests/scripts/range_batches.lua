-- range_batches.lua N BATCH: 0..N-1 in batches of BATCH (tests/test_pipeline.c).
local sluice = require "sluice"
local n, b = ...
assert(arg[1] == n and arg[2] == b, "arg and ... disagree")
local p = sluice.range(tonumber(n)):batch(tonumber(b))
return p
