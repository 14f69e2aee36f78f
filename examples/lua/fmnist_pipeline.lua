-- fmnist_pipeline.lua - a Fashion-MNIST input pipeline declared in Lua.
--
--   sluice.open(train.slr) -> shuffle(10000, {seed}) -> map(u8 -> f32/255,
--   2 worker threads) -> batch(128) -> prefetch(4)
--
-- The consumer iterates one or more epochs and, per epoch, prints the
-- number of batches, samples/s and the mean pixel intensity of each class,
-- then checks the figures against the data set: 10 classes of equal size,
-- means in a plausible range, identical across epochs (shuffling changes the
-- order, never the multiset) and equal to the same means computed straight
-- from the unshuffled u8 records (so the map's scaling is checked too).
--
-- Make the input with the CLI (Debian package dataset-fashion-mnist):
--
--   sluice pack idx /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz \
--     /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz -o train.slr
--
-- and run (from the source root, with a build in build/):
--
--   LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;;" \
--   LUA_CPATH="$PWD/build/lua/?.so;;" \
--   luajit examples/lua/fmnist_pipeline.lua train.slr --epochs 3
--
-- Loaded as a module (require, or loadfile by an embedding program) it runs
-- nothing and returns {build = build}: build(path, opts) is the pipeline.
local ffi = require "ffi"
local sluice = require "sluice"

-- A redeclaration is an error in the FFI, and another chunk of this state
-- (the other example, a spec) may have declared clock_gettime with its own
-- timespec type: each declaration is tried on its own, and the function is
-- then called through a pointer of our type whichever declaration won.
pcall(ffi.cdef, "typedef struct sl_ex_timespec { long tv_sec; long tv_nsec; } sl_ex_timespec;")
pcall(ffi.cdef, "int clock_gettime(int clk, sl_ex_timespec *ts);")

local C = ffi.C

local PIXELS = 28 * 28
local CLASSES = 10

local M = {}

M.defaults = {seed = 42, threads = 2, shuffle = 10000, batch = 128,
              prefetch = 4}

-- The map: u8 [28, 28] -> f32 [784] in [0, 1].  It runs in the worker
-- states, so it captures only shippable values: the `sluice` module (sent as
-- require "sluice") and numbers.  The loop goes through the views' .data
-- pointers: one FFI load and store per pixel, no metamethod per element.
local function to_f32(s)
  local img = s.image
  local out = sluice.tensor("f32", {PIXELS})
  local src, dst = img.data, out.data
  local scale = 1 / 255
  for k = 0, PIXELS - 1 do dst[k] = src[k] * scale end
  s.image = out
  return s
end

-- The pipeline over the SLR file at `path`; opts overrides M.defaults.
function M.build(path, opts)
  local o = {}
  for k, v in pairs(M.defaults) do o[k] = v end
  for k, v in pairs(opts or {}) do
    if M.defaults[k] == nil then
      error(("fmnist_pipeline.build: unknown option '%s'"):format(k), 2)
    end
    o[k] = v
  end
  return sluice.open(path)
    :shuffle(o.shuffle, {seed = o.seed})
    :map(to_f32, {threads = o.threads})
    :batch(o.batch)
    :prefetch(o.prefetch)
end

-- --- the script --------------------------------------------------------------

local TS = ffi.new("sl_ex_timespec")
local clock_gettime = ffi.cast("int (*)(int, sl_ex_timespec *)", C.clock_gettime)
local function now()
  clock_gettime(1, TS) -- CLOCK_MONOTONIC: wall time, immune to clock steps
  return tonumber(TS.tv_sec) + tonumber(TS.tv_nsec) * 1e-9
end

local USAGE = [[
usage: luajit fmnist_pipeline.lua TRAIN.slr [--epochs N] [--seed N]
                                  [--threads N] [--help]

Streams Fashion-MNIST through open -> shuffle(10000) -> map(u8 -> f32/255,
Lua, worker threads) -> batch(128) -> prefetch(4) and prints, per epoch, the
batches, samples/s and the mean pixel intensity of each class, then checks
them (10 equal classes, plausible means, identical across epochs, equal to
the means of the raw records).  Exit status 0 when every check passes.

  --epochs N    passes over the data (default 1)
  --seed N      shuffle seed (default 42)
  --threads N   worker threads of the Lua map (default 2)

Make TRAIN.slr with:
  sluice pack idx /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz \
    /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz -o train.slr
(the t10k files give a 10000-record set that works the same way).]]

-- The class names of Fashion-MNIST, by label.
local NAMES = {[0] = "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
               "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}

local function parse(argv)
  local o = {epochs = 1, seed = M.defaults.seed, threads = M.defaults.threads}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--help" or a == "-h" then
      o.help = true
    elseif a == "--epochs" or a == "--seed" or a == "--threads" then
      local v = tonumber(argv[i + 1])
      if not v or v ~= math.floor(v) or v < (a == "--seed" and 0 or 1) then
        return nil, ("%s needs an integer (got %s)"):format(a, tostring(argv[i + 1]))
      end
      o[a:sub(3)] = v
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      return nil, "unknown option " .. a
    elseif o.path then
      return nil, "one SLR file only (got " .. o.path .. " and " .. a .. ")"
    else
      o.path = a
    end
    i = i + 1
  end
  return o
end

-- Per-class sums of pixel intensity over one pass of `p` (batches of f32
-- images in [0, 1]).  Returns sums[0..9], counts[0..9], batches, samples.
local function epoch_stats(p)
  local sums, counts = {}, {}
  for c = 0, CLASSES - 1 do sums[c], counts[c] = 0, 0 end
  local batches, samples = 0, 0
  for b in p:iter() do
    local x, y = b.image, b.label
    local n = x.shape[1]
    local xp, yp = x.data, y.data
    for i = 0, n - 1 do
      -- i64 loads give boxed int64 cdata; tonumber makes a Lua number.
      local c = tonumber(yp[i])
      local acc, base = 0, i * PIXELS
      for k = base, base + PIXELS - 1 do acc = acc + xp[k] end
      sums[c] = sums[c] + acc
      counts[c] = counts[c] + 1
    end
    batches = batches + 1
    samples = samples + n
  end
  return sums, counts, batches, samples
end

-- The same sums straight from the file's u8 records, in file order, with no
-- shuffle and no map: the reference the pipeline's figures must match.
local function reference_stats(path)
  local sums, counts = {}, {}
  for c = 0, CLASSES - 1 do sums[c], counts[c] = 0, 0 end
  local p = sluice.open(path)
  for s in p:iter() do
    local c, src = s.label, s.image.data
    local acc = 0
    for k = 0, PIXELS - 1 do acc = acc + src[k] end
    sums[c] = sums[c] + acc / 255
    counts[c] = counts[c] + 1
  end
  p:close()
  return sums, counts
end

local function main(argv)
  local o, err = parse(argv)
  if not o then
    io.stderr:write("fmnist_pipeline: ", err, "\n", USAGE, "\n")
    return 2
  end
  if o.help then print(USAGE) return 0 end
  if not o.path then
    io.stderr:write("fmnist_pipeline: no SLR file given\n", USAGE, "\n")
    return 2
  end
  local f = io.open(o.path, "rb")
  if not f then
    io.stderr:write("fmnist_pipeline: cannot open ", o.path, "; make it with\n",
                    USAGE:match("(  sluice pack.-train%.slr)"), "\n")
    return 1
  end
  f:close()

  local failures = 0
  local function check(ok, what)
    if not ok then
      failures = failures + 1
      print("CHECK FAILED: " .. what)
    end
  end

  local t0 = now()
  local p = M.build(o.path, {seed = o.seed, threads = o.threads})
  print(("pipeline: %s -> shuffle(%d, seed %d) -> map(u8 -> f32/255, %d "
         .. "threads) -> batch(%d) -> prefetch(%d)  [built in %.3f s]")
        :format(o.path, M.defaults.shuffle, o.seed, o.threads,
                M.defaults.batch, M.defaults.prefetch, now() - t0))

  local first
  for epoch = 1, o.epochs do
    if epoch > 1 then p:reset() end -- the next pass: a new permutation
    local e0 = now()
    local sums, counts, batches, samples = epoch_stats(p)
    local dt = now() - e0
    print(("epoch %d: %d batches, %d samples in %.3f s, %.0f samples/s")
          :format(epoch, batches, samples, dt, samples / dt))
    local means = {}
    for c = 0, CLASSES - 1 do
      means[c] = counts[c] > 0 and sums[c] / (counts[c] * PIXELS) or 0
      print(("  class %d %-12s %5d samples  mean intensity %.4f")
            :format(c, NAMES[c], counts[c], means[c]))
    end
    check(batches == math.ceil(samples / M.defaults.batch),
          ("epoch %d: %d batches for %d samples"):format(epoch, batches, samples))
    if not first then
      first = {sums = sums, counts = counts, samples = samples}
    else
      for c = 0, CLASSES - 1 do
        check(counts[c] == first.counts[c]
              and math.abs(sums[c] - first.sums[c]) <= 1e-6 * first.sums[c],
              ("epoch %d: class %d differs from epoch 1"):format(epoch, c))
      end
    end
  end
  p:close()

  -- Fashion-MNIST is balanced (6000 per class in train, 1000 in t10k); its
  -- mean intensity is about 0.29 overall, the sandals darkest (~0.12) and
  -- pullovers/coats/bags brightest (~0.4).
  local total, mean_all = 0, 0
  for c = 0, CLASSES - 1 do
    total = total + first.counts[c]
    mean_all = mean_all + first.sums[c]
  end
  mean_all = mean_all / (total * PIXELS)
  check(total == first.samples, "class counts do not add up")
  for c = 0, CLASSES - 1 do
    check(first.counts[c] == total / CLASSES,
          ("class %d has %d samples, expected %d"):format(c, first.counts[c],
                                                          total / CLASSES))
    local m = first.sums[c] / (first.counts[c] * PIXELS)
    check(m > 0.05 and m < 0.6, ("class %d mean %.4f is implausible"):format(c, m))
  end
  check(mean_all > 0.2 and mean_all < 0.4,
        ("overall mean %.4f is implausible"):format(mean_all))

  local rsums, rcounts = reference_stats(o.path)
  local worst = 0
  for c = 0, CLASSES - 1 do
    check(rcounts[c] == first.counts[c],
          ("class %d: %d samples in the file, %d through the pipeline")
          :format(c, rcounts[c], first.counts[c]))
    -- f32 rounding of each pixel (relative 6e-8) bounds the difference.
    local rel = math.abs(rsums[c] - first.sums[c]) / rsums[c]
    if rel > worst then worst = rel end
  end
  check(worst < 1e-6, ("pipeline means differ from the raw records (rel %.2e)")
                      :format(worst))
  print(("overall mean intensity %.4f over %d samples; largest relative "
         .. "difference from the raw records %.1e")
        :format(mean_all, total, worst))

  if failures > 0 then
    print(("%d check(s) failed"):format(failures))
    return 1
  end
  print("all checks passed")
  return 0
end

-- Run as a script (`luajit fmnist_pipeline.lua ...`) only when this chunk is
-- the main script: required or loadfile'd by an embedding program, it just
-- returns the module.
local this = debug.getinfo(1, "S").source
if arg and arg[0] and this == "@" .. arg[0] then
  os.exit(main(arg))
end

return M
