-- bench_autotune.lua - threads = "auto" against a grid search (issue 27
-- item 3; docs/PERFORMANCE.md, "Autotuning").
--
-- Run from the source root, with a build in build/ and the Fashion-MNIST
-- training set packed (build/data/train.slr: `make demo` or `sluice pack
-- idx`):
--
--   LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;$PWD/build/lua/?.lua;;" \
--   LUA_CPATH="$PWD/build/lua/?.so;;" \
--   luajit bench/bench_autotune.lua [build/data/train.slr] [--passes N]
--
-- The pipeline is the demo's: open -> shuffle(10000) -> Lua map (u8 [28,
-- 28] -> f32 [784] / 255) -> batch(128) -> prefetch.  The grid runs every
-- map thread count in 1..CPUs + 1 with prefetch depths 1, 4 and 16; then
-- the auto pipeline (map threads = "auto", prefetch("auto")).  Each
-- configuration reads --passes passes (default 3, one pipeline, reset in
-- between) and reports its best pass in samples/s; the grid's configurations
-- run in an interleaved order so that a change in the machine's load hits
-- them alike.  For auto it also reports the first pass, the threads the map
-- ran at the end, and the time to settle: when, in the first pass, the
-- tuner last changed the map's running threads.  Output: one JSON object
-- per configuration on stdout, a summary on stderr.
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

local path, passes = "build/data/train.slr", 3
local i = 1
while i <= #arg do
  if arg[i] == "--passes" then
    passes = assert(tonumber(arg[i + 1]), "--passes N")
    i = i + 1
  else
    path = arg[i]
  end
  i = i + 1
end

-- The demo's pipeline (examples/fashion_mnist.lua), with these threads and
-- depth.
local demo = assert(loadfile("examples/fashion_mnist.lua"))
local function build(threads, depth)
  return demo("train", path, 128, 42, threads, depth)
end

-- The map's stats row.
local function map_row(p)
  for _, st in ipairs(p:stats()) do
    if st.name == "map" then return st end
  end
end

-- One pass: samples/s, and (auto) the last time the map's running threads
-- changed since the pass began.
local function pass(p, watch)
  local t0, n, last, settled = now(), 0, 1, 0 -- auto runs 1 at first
  local k = 0
  for b in p:iter() do
    n = n + b.label.shape[1]
    k = k + 1
    if watch and k % 8 == 0 then
      local t = map_row(p).threads
      if t ~= last then settled, last = now() - t0, t end
    end
  end
  return n / (now() - t0), settled
end

local cpus = tonumber(io.popen("nproc"):read("*l")) or 2
local grid = {}
for t = 1, cpus + 1 do
  for _, d in ipairs {1, 4, 16} do grid[#grid + 1] = {t, d} end
end

-- auto last: threads and depth tuned, and threads tuned under the depth
-- the grid found best most often (4), to tell the two tuners apart.
grid[#grid + 1] = {"auto", "auto"}
grid[#grid + 1] = {"auto", 4}
local AUTO = #grid - 1

local best, first, settle = {}, {}, {} -- per configuration
local pipes = {}
for j, c in ipairs(grid) do pipes[j] = build(c[1], c[2]) end
for round = 1, passes do
  for j = 1, #grid do
    local r, s = pass(pipes[j], round == 1 and type(grid[j][1]) == "string")
    if round == 1 then first[j], settle[j] = r, s end
    best[j] = math.max(best[j] or 0, r)
    pipes[j]:reset()
  end
end
local top, topj = 0, 1
for j, c in ipairs(grid) do
  if type(c[1]) == "number" then
    print(('{"bench":"autotune_grid","threads":%d,"depth":%d,'
           .. '"samples_per_s":%.0f}'):format(c[1], c[2], best[j]))
    if best[j] > top then top, topj = best[j], j end
  end
end
for j = AUTO, #grid do
  local row = map_row(pipes[j])
  print(('{"bench":"autotune_auto","depth":"%s","first_pass_samples_per_s":%.0f,'
         .. '"samples_per_s":%.0f,"of_best":%.3f,"settle_s":%.3f,'
         .. '"map_threads":%d,"map_threads_max":%d}')
        :format(tostring(grid[j][2]), first[j], best[j], best[j] / top,
                settle[j], row.threads, row.threads_max))
  io.stderr:write(("auto (depth %s): %.0f samples/s, %.2f of the grid's best "
                   .. "(threads=%d depth=%d, %.0f samples/s); first pass "
                   .. "%.2f; the map ran %d of %d threads, settled %.2f s "
                   .. "into the first pass\n")
                  :format(tostring(grid[j][2]), best[j], best[j] / top,
                          grid[topj][1], grid[topj][2], top, first[j] / top,
                          row.threads, row.threads_max, settle[j]))
end
for j = 1, #grid do pipes[j]:close() end
