-- bench_autotune.lua - the default ("auto") threads and depths against a
-- grid search (issue 27 item 3; docs/PERFORMANCE.md, "Autotuning").
--
-- Run from the source root, with a build in build/:
--
--   LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;$PWD/build/lua/?.lua;;" \
--   LUA_CPATH="$PWD/build/lua/?.so;;" \
--   luajit bench/bench_autotune.lua [DATA] [--pipeline P] [--passes N]
--
-- Pipelines (P), each with its DATA:
--   fmnist  (default; DATA build/data/train.slr: `make demo` or `sluice pack
--           idx`) the demo's: open -> shuffle(10000) -> Lua map (u8 [28, 28]
--           -> f32 [784] / 255) -> batch(128) -> prefetch.  Tuned: the map's
--           threads and the prefetch depth.
--   image   (DATA a folder of JPEGs in class folders: `luajit
--           bench/make_jpegs.lua /tmp/sluice_jpegs 1000`, mixed sizes)
--           image: reader (decode, 3 channels) -> random_crop_flip 128 x 128
--           -> shuffle(5000) -> batch(32) -> prefetch.  Tuned: the decoding
--           threads and the prefetch depth.
--   tokens  (DATA a shard pattern: `sluice pack tokens FILE... --shards 4 -o
--           /tmp/sluice_tokens/tok.bin`, then /tmp/sluice_tokens/tok_*.bin)
--           tokens (documents of 1021 tokens) -> pack(2048) -> batch(8) ->
--           prefetch.  No stage has threads: tuned is the prefetch depth.
--
-- The grid runs every thread count in 1..CPUs + 1 (where the pipeline has
-- a threaded stage) with prefetch depths 1, 4 and 16; then the default
-- pipeline (no threads or depth given: "auto" for both) and auto threads
-- under the depth 4.  Each configuration makes --passes runs (default 3)
-- of --epochs passes each (default 4), each run through a pipeline built
-- for it and timed from before it is built (so every run, the defaults'
-- too, starts cold, and no configuration finds work done in the background
-- while another was timed), and reports its best and median steady rate
-- (samples/s over the epochs after the first: the tuners' choices survive
-- a reset) and its best rate over whole runs; the configurations run
-- interleaved so that a change in the machine's load hits them alike.  For
-- the defaults it also reports, for its best run, the threads the tuned
-- stage ran at the end out of those started, the prefetch depth, and the
-- time to settle: when the tuner last changed the stage's running threads.
-- Output: one JSON object per configuration on
-- stdout, a summary on stderr.
local sluice = require "sluice"
local ffi = require "ffi"

pcall(ffi.cdef, "typedef struct sl_ex_timespec { long tv_sec; long tv_nsec; } sl_ex_timespec;")
pcall(ffi.cdef, "int clock_gettime(int clk, sl_ex_timespec *ts);")
local TS = ffi.new("sl_ex_timespec")
local clock_gettime = ffi.cast("int (*)(int, sl_ex_timespec *)",
                               ffi.C.clock_gettime)
local function now()
  clock_gettime(1, TS)
  return tonumber(TS.tv_sec) + tonumber(TS.tv_nsec) * 1e-9
end

local path, passes, which, epochs = nil, 3, "fmnist", 4
local i = 1
while i <= #arg do
  if arg[i] == "--passes" then
    passes = assert(tonumber(arg[i + 1]), "--passes N")
    i = i + 1
  elseif arg[i] == "--epochs" then
    epochs = assert(tonumber(arg[i + 1]), "--epochs N")
    i = i + 1
  elseif arg[i] == "--pipeline" then
    which = assert(arg[i + 1], "--pipeline fmnist|image|tokens")
    i = i + 1
  else
    path = arg[i]
  end
  i = i + 1
end

-- Each pipeline: build(threads, depth) with nil for "not given" (the
-- defaults: auto), the name of its tuned stage's stats row (nil: none),
-- and the samples in a batch.
local PIPELINES = {
  fmnist = {
    data = "build/data/train.slr", row = "map",
    build = function(data, threads, depth)
      -- the demo's pipeline (examples/fashion_mnist.lua)
      local demo = assert(loadfile("examples/fashion_mnist.lua"))
      return demo("train", data, 128, 42, threads or "auto", depth or "auto")
    end,
  },
  image = {
    data = "/tmp/sluice_jpegs", row = "image",
    build = function(data, threads, depth)
      local p = sluice.open("image:" .. data, {threads = threads,
                                               channels = 3})
        :random_crop_flip{size = {128, 128}, seed = 1}
        :shuffle(5000, {seed = 3}):batch(32)
      return p:prefetch(depth)
    end,
  },
  tokens = {
    data = "/tmp/sluice_tokens/tok_*.bin", row = nil,
    build = function(data, _, depth)
      return sluice.open("tokens:" .. data, {seq_len = 1021})
        :pack{seq_len = 2048, fields = "inputs"}:batch(8):prefetch(depth)
    end,
  },
}
local P = assert(PIPELINES[which], "--pipeline fmnist|image|tokens")
path = path or P.data
local function build(threads, depth)
  return P.build(path, threads, depth)
end

-- A stats row by name (the tuned stage's, or prefetch's).
local function row(p, name)
  for _, st in ipairs(p:stats()) do
    if st.name == name then return st end
  end
end
local function map_row(p)
  return P.row and row(p, P.row) or {threads = 0, threads_max = 0}
end

-- Samples in a batch: the first field's leading dimension.
local function batch_size(b)
  return b[sluice.fields(b)[1]].shape[1]
end

-- The value a configuration gives (nil: none, the default).
local function given(v)
  if v == "auto" then return nil end
  if v == 0 then return nil end -- no threaded stage
  return v
end

-- One run: --epochs passes of a pipeline built for it (so that no
-- configuration starts with work done in the background while another was
-- timed: a prefetch or a shuffle window fills as soon as its pipeline
-- exists), timed from before it is built.  Returns samples/s over the whole
-- run and over the epochs after the first (the tuners' choices survive a
-- reset: the steady rate); for the defaults also the last time the tuned
-- stage's running threads changed since the start, and the threads and
-- prefetch depth it ended with.
local function run(c, watch)
  local t0 = now()
  local p = build(given(c[1]), given(c[2]))
  local n, n1, t1, last, settled, k = 0, 0, t0, 1, 0, 0 -- auto: 1 at first
  for e = 1, epochs do
    for b in p:iter() do
      n = n + batch_size(b)
      k = k + 1
      if watch and P.row and k % 8 == 0 then
        local t = map_row(p).threads
        if t ~= last then settled, last = now() - t0, t end
      end
    end
    if e == 1 then n1, t1 = n, now() end
    p:reset()
  end
  local t2 = now()
  local steady = epochs > 1 and (n - n1) / (t2 - t1) or n / (t2 - t0)
  local r = map_row(p)
  local info = {settled = settled, threads = r.threads,
                threads_max = r.threads_max, whole = n / (t2 - t0),
                depth = row(p, "prefetch").queue_depth}
  p:close()
  return steady, info
end

local cpus = tonumber(io.popen("nproc"):read("*l")) or 2
local grid = {}
for t = 1, P.row and cpus + 1 or 1 do
  for _, d in ipairs {1, 4, 16} do
    grid[#grid + 1] = {P.row and t or 0, d}
  end
end

-- The defaults last: nothing given (threads and depth tuned), and threads
-- tuned under depth 4, to tell the two tuners apart.
grid[#grid + 1] = {"auto", "auto"}
if P.row then grid[#grid + 1] = {"auto", 4} end
local AUTO = P.row and #grid - 1 or #grid

local rates, info = {}, {} -- per configuration: each run's steady rate
for round = 1, passes do
  for j = 1, #grid do
    local r, got = run(grid[j], type(grid[j][1]) == "string")
    rates[j] = rates[j] or {}
    rates[j][round] = r
    info[j] = info[j] or {}
    info[j][round] = got
  end
end
-- best and median of a list
local function best_med(list)
  local t = {}
  for k, v in ipairs(list) do t[k] = v end
  table.sort(t)
  return t[#t], t[math.floor((#t + 1) / 2)]
end
local best, med, whole = {}, {}, {}
for j = 1, #grid do
  best[j], med[j] = best_med(rates[j])
  local w = {}
  for k, got in ipairs(info[j]) do w[k] = got.whole end
  whole[j] = best_med(w)
end
local top, topj, topw = 0, 1, 0
for j, c in ipairs(grid) do
  if type(c[1]) == "number" then
    print(('{"bench":"autotune_grid","pipeline":"%s","threads":%d,'
           .. '"depth":%d,"samples_per_s":%.0f,"median_samples_per_s":%.0f,'
           .. '"whole_samples_per_s":%.0f}')
          :format(which, c[1], c[2], best[j], med[j], whole[j]))
    if best[j] > top then top, topj = best[j], j end
    topw = math.max(topw, whole[j])
  end
end
for j = AUTO, #grid do
  -- the run that gave the best rate: its threads, depth and settle time
  local k = 1
  for q = 1, #rates[j] do if rates[j][q] > rates[j][k] then k = q end end
  local r = info[j][k]
  print(('{"bench":"autotune_auto","pipeline":"%s","depth":"%s",'
         .. '"samples_per_s":%.0f,"median_samples_per_s":%.0f,'
         .. '"of_best":%.3f,"median_of_best":%.3f,"whole_of_best":%.3f,'
         .. '"settle_s":%.3f,"threads":%d,"threads_max":%d,'
         .. '"prefetch_depth":%d}')
        :format(which, tostring(grid[j][2]), best[j], med[j], best[j] / top,
                med[j] / top, whole[j] / topw, r.settled, r.threads,
                r.threads_max, r.depth))
  io.stderr:write(("%s, threads auto, depth %s: %.0f samples/s after the "
                   .. "first epoch, %.2f of the grid's best (threads=%d "
                   .. "depth=%d, %.0f samples/s; medians %.2f; whole runs "
                   .. "%.2f); %s ran %d of %d threads, settled %.2f s into "
                   .. "the run; prefetch depth %d\n")
                  :format(which, tostring(grid[j][2]), best[j], best[j] / top,
                          grid[topj][1], grid[topj][2], top, med[j] / top,
                          whole[j] / topw, P.row or "no stage", r.threads,
                          r.threads_max, r.settled, r.depth))
end
