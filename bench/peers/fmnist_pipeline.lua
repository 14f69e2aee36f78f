-- bench/peers/fmnist_pipeline.lua SLR MAP - the Fashion-MNIST epoch
-- pipeline of bench/bench_lua.lua (fmnist) as a pipeline script, for the
-- consumers that open scripts: `sluice run` (the C consumer, through
-- sl_pipeline_next) and the Python binding (bench/peers/binding.py).
--
--   open(SLR) -> shuffle(10000, {seed = 1}) -> [MAP] -> batch(128)
--     -> prefetch(4)
--   MAP: none, or norm_t1 / norm_t2: the per-sample Lua normalisation
--        (u8 [28, 28] -> f32 [784] / 255) on 1 or 2 worker threads.
local sluice = require "sluice"

local path, map = ...
assert(path, "usage: fmnist_pipeline.lua SLR none|norm_t1|norm_t2")
map = map or "none"

local function normalise(s)
  local img = s.image
  local out = sluice.tensor("f32", {784})
  local src, dst = img.data, out.data
  for k = 0, 783 do dst[k] = src[k] * (1 / 255) end
  s.image = out
  return s
end

local p = sluice.open(path):shuffle(10000, {seed = 1})
if map == "norm_t1" or map == "norm_t2" then
  p = p:map(normalise, {threads = map == "norm_t1" and 1 or 2})
elseif map ~= "none" then
  error("fmnist_pipeline.lua: MAP must be none, norm_t1 or norm_t2 (got "
        .. map .. ")", 0)
end
return p:batch(128):prefetch(4)
