-- fashion_mnist.lua SPLIT DATA [BATCH] [SEED] - the Fashion-MNIST input
-- pipeline of the C trainer (examples/trainer/trainer.c) and of
-- `sluice run examples/fashion_mnist.lua train build/data`.
--
--   SPLIT  train or test
--   DATA   a directory holding train.slr and t10k.slr, or an .slr file
--   BATCH  training batch size (default 128; test batches are 1000)
--   SEED   shuffle seed (default 42)
--   THREADS, DEPTH  (train; for bench/bench_autotune.lua) the map's threads
--          (default 2) and prefetch's depth (default 4), each a number or
--          "auto"
--
--   train: open(train.slr) -> shuffle(10000, {seed}) -> map(u8 [28, 28] ->
--          f32 [784] / 255, Lua, 2 threads) -> batch(BATCH) -> prefetch(4)
--   test:  open(t10k.slr) -> the same map -> batch(1000)
--
-- Batches are {image: f32 [B, 784], label: i64 [B]}.  Make the .slr files
-- with `sluice pack idx` (`make demo` does).
local sluice = require "sluice"

local split, data, batch, seed, threads, depth = ...
local USAGE = "usage: fashion_mnist.lua train|test DATA [BATCH] [SEED]"

if split ~= "train" and split ~= "test" then
  error(("%s (split: got %s)"):format(USAGE, tostring(split)), 0)
end
if not data or data == "" then
  error(USAGE .. " (no DATA directory or .slr file)", 0)
end

local function whole(s, default, what)
  if s == nil or s == "" then return default end
  local v = tonumber(s)
  if not v or v ~= math.floor(v) or v < 0 then
    error(("fashion_mnist.lua: %s must be a whole number (got %s)"):format(what, s), 0)
  end
  return v
end
batch = whole(batch, 128, "BATCH")
seed = whole(seed, 42, "SEED")
if batch < 1 then error("fashion_mnist.lua: BATCH must be >= 1", 0) end

local path = data
if not data:match("%.slr$") then
  path = data .. "/" .. (split == "train" and "train.slr" or "t10k.slr")
end
local f = io.open(path, "rb")
if not f then
  error(("fashion_mnist.lua: cannot open %s (pack it with `sluice pack idx`" ..
         " from the dataset-fashion-mnist files, or run `make demo`)"):format(path), 0)
end
f:close()

local PIXELS = 28 * 28

-- u8 [28, 28] -> f32 [784] in [0, 1]; the label (i64) is kept as it is.  It
-- runs in worker states, so it captures only shippable values (the sluice
-- module and numbers) and loops over the views' FFI .data pointers.
local function to_f32(s)
  local out = sluice.tensor("f32", {PIXELS})
  local src, dst = s.image.data, out.data
  local scale = 1 / 255
  for k = 0, PIXELS - 1 do dst[k] = src[k] * scale end
  s.image = out
  return s
end

if split == "train" then
  return sluice.open(path)
    :shuffle(10000, {seed = seed})
    :map(to_f32, {threads = threads == "auto" and "auto"
                                or whole(threads, 2, "THREADS")})
    :batch(batch)
    :prefetch(depth == "auto" and "auto" or whole(depth, 4, "DEPTH"))
end
return sluice.open(path)
  :map(to_f32, {threads = 2})
  :batch(1000)
