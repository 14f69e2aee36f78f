-- ray_scaling.lua PATTERN PASSES [THREADS] - bench/ray_scaling's pipeline:
-- the demo's (examples/fashion_mnist.lua: shuffle, u8 [28, 28] -> f32
-- [784] / 255, batch 128) over SLR shards through open_files, with a
-- CPU-heavy Lua augmentation: PASSES passes of a 3x3 box blur over the
-- image.  Rank and world come from the environment (sluice.ray sets them
-- per read task; in-process there are none: world 1); remainder "uneven",
-- so the ranks read each sample once.  SLUICE_SEED / SLUICE_EPOCH as
-- sluice.ray gives them.
local sluice = require "sluice"

local pattern, passes, threads = ...
passes = tonumber(passes) or 8
threads = tonumber(threads) or 1
local seed = tonumber(os.getenv("SLUICE_SEED") or "42")
local epoch = tonumber(os.getenv("SLUICE_EPOCH") or "0")
local N = 28

local function augment(s)
  local out = sluice.tensor("f32", {N * N})
  local tmp = sluice.tensor("f32", {N * N})
  local src, a, b = s.image.data, out.data, tmp.data
  for k = 0, N * N - 1 do a[k] = src[k] * (1 / 255) end
  for _ = 1, passes do
    for y = 0, N - 1 do
      for x = 0, N - 1 do
        local acc, cnt = 0, 0
        for dy = -1, 1 do
          local yy = y + dy
          if yy >= 0 and yy < N then
            for dx = -1, 1 do
              local xx = x + dx
              if xx >= 0 and xx < N then
                acc = acc + a[yy * N + xx]
                cnt = cnt + 1
              end
            end
          end
        end
        b[y * N + x] = acc / cnt
      end
    end
    a, b = b, a
  end
  if passes % 2 == 1 then s.image = tmp else s.image = out end
  return s
end

return sluice.open_files{pattern, shuffle = true, seed = seed, epoch = epoch,
                         shard = {remainder = "uneven"}}
  :map(augment, {threads = threads})
  :batch(128)
