-- bench/peers/fmnist_pipeline.lua SLR MAP - the Fashion-MNIST epoch
-- pipeline of bench/bench_lua.lua (fmnist) as a pipeline script, for the
-- consumers that open scripts: `sluice run` (the C consumer, through
-- sl_pipeline_next) and the Python binding (bench/peers/binding.py).
--
--   open(SLR) -> shuffle(10000, {seed = 1}) -> [MAP] -> batch(128)
--     -> prefetch(4)
--   MAP: none, or norm_t1 / norm_t2: the per-sample Lua normalisation
--        (u8 [28, 28] -> f32 [784] / 255) on 1 or 2 worker threads;
--        a suffix _unordered (ordered = false) and/or _ignore
--        (ignore_errors = true; nothing fails) runs the map so.
local sluice = require "sluice"

local path, map = ...
assert(path, "usage: fmnist_pipeline.lua SLR none|norm_t1|norm_t2[_unordered][_ignore]")
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
local threads, rest = map:match("^norm_t([12])(.*)$")
local unordered, ignore = rest and rest:find("_unordered", 1, true),
                          rest and rest:find("_ignore", 1, true)
if threads and rest:gsub("_unordered", ""):gsub("_ignore", "") == "" then
  p = p:map(normalise, {threads = tonumber(threads),
                        ordered = not unordered or nil,
                        ignore_errors = ignore and true or nil})
elseif map ~= "none" then
  error("fmnist_pipeline.lua: MAP must be none or norm_t1 / norm_t2 with "
        .. "optional _unordered and _ignore (got " .. map .. ")", 0)
end
return p:batch(128):prefetch(4)
