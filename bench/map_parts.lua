-- bench/map_parts.lua SLR PART THREADS - the Fashion-MNIST epoch pipeline
-- (bench/peers/fmnist_pipeline.lua: shuffle, map, batch(128), prefetch(4))
-- with the normalisation map taken apart, to price each step of a
-- per-sample Lua decorator (docs/PERFORMANCE.md, "What a Lua map costs,
-- step by step"):
--
--   none    no map
--   ident   function(s) return s end: the hand-off and the sample object
--   read    + local img = s.image: a view of a field
--   tensor  + sluice.tensor("f32", {784}): a new tensor (fused: the row)
--   assign  tensor, then s.image = out (no read)
--   norm    the whole normalisation (read, tensor, the pixel loop, assign)
--
-- Run with `sluice run --epochs E bench/map_parts.lua SLR PART THREADS`
-- under /usr/bin/time; CPU per sample = (user + sys) / samples.
local sluice = require "sluice"

local path, part, threads = ...
assert(path and part, "usage: map_parts.lua SLR none|ident|read|tensor|assign|norm [THREADS]")
threads = tonumber(threads or 1)
local parts = {
  ident = function(s) return s end,
  read = function(s)
    local img = s.image
    return s, img
  end,
  tensor = function(s)
    local out = sluice.tensor("f32", {784})
    return s, out
  end,
  assign = function(s)
    s.image = sluice.tensor("f32", {784})
    return s
  end,
}
if part == "none" or part == "norm" then -- the pipeline itself
  local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
  local pipeline = assert(loadfile(here .. "peers/fmnist_pipeline.lua"))
  return pipeline(path, part == "none" and "none" or "norm_t" .. threads)
end
local fn = parts[part]
if not fn then error("map_parts.lua: unknown part " .. part, 0) end
return sluice.open(path):shuffle(10000, {seed = 1})
  :map(fn, {threads = threads}):batch(128):prefetch(4)
