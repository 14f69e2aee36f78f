-- syntax_error.lua: does not compile (tests/test_pipeline.c).
local sluice = require "sluice"
return sluice.range(3) :batch(
