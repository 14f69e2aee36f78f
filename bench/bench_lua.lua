-- bench_lua.lua - the performance targets of the Lua layer (issue 4).
--
-- Run from the source root, with a build in build/ (t10k.slr: `sluice pack
-- idx` of the Fashion-MNIST t10k files, docs/CLI.md):
--
--   LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;;" \
--   LUA_CPATH="$PWD/build/lua/?.so;;" luajit bench/bench_lua.lua [t10k.slr]
--
-- Every figure is the median of --runs runs (default 5), in wall time (the
-- pipelines' own threads do part of the work, so CPU time of this thread
-- would miss it).  Output: one JSON object per result on stdout, then a
-- table on stderr.  Measured:
--
--   1. consumer loop: p:next() over range(N) (target >= 1 M samples/s);
--   2. identity Lua map, one worker: time(range(N):map(identity)) -
--      time(range(N)) per sample (target <= 1 us); the two are measured
--      alternately, run by run, so a change in load hits both;
--   3. a CPU-heavy Lua decorator (FFI float work per sample) with 1 and 2
--      worker threads (target: 2 threads >= 1.8x), reported with nproc and
--      the load average at start and end: a busy machine cannot show it;
--   4. the Fashion-MNIST-like pipeline open -> shuffle(10000) -> batch(128)
--      -> prefetch(4), without and with a Lua normalisation map (u8 -> f32
--      / 255) on 1 and 2 threads, the same map on whole batches (after
--      batch, 1 thread), and with open_files{threads = 2} (two decoding
--      threads) in place of open, if an SLR file is given.
local ffi = require "ffi"
local sluice = require "sluice"

-- A redeclaration is an error in the FFI, and another chunk may have declared
-- clock_gettime with its own timespec: each declaration is tried alone and
-- the function is called through a pointer of our type.
pcall(ffi.cdef, "typedef struct sl_ex_timespec { long tv_sec; long tv_nsec; } sl_ex_timespec;")
pcall(ffi.cdef, "int clock_gettime(int clk, sl_ex_timespec *ts);")

local C = ffi.C

local TS = ffi.new("sl_ex_timespec")
local clock_gettime = ffi.cast("int (*)(int, sl_ex_timespec *)", C.clock_gettime)
local function now()
  clock_gettime(1, TS) -- CLOCK_MONOTONIC
  return tonumber(TS.tv_sec) + tonumber(TS.tv_nsec) * 1e-9
end

local USAGE = [[
usage: luajit bench/bench_lua.lua [SLR] [--runs N] [--n N] [--heavy-n N]
                                  [--work N] [--only LIST] [--help]

  SLR           a Fashion-MNIST SLR file (e.g. t10k.slr) for benchmark 4
  --runs N      runs per figure, the median is reported (default 5)
  --n N         samples for benchmarks 1 and 2 (default 1000000)
  --heavy-n N   samples for benchmark 3 (default 20000)
  --work N      float multiply-adds per sample in benchmark 3 (default 4096)
  --only LIST   comma-separated subset of next,map,heavy,fmnist

Prints one JSON object per result on stdout and a table on stderr.]]

local function parse(argv)
  local o = {runs = 5, n = 1000000, ["heavy-n"] = 20000, work = 4096}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--help" or a == "-h" then
      o.help = true
    elseif a == "--runs" or a == "--n" or a == "--heavy-n" or a == "--work" then
      local v = tonumber(argv[i + 1])
      if not v or v ~= math.floor(v) or v < 1 then
        return nil, ("%s needs an integer >= 1 (got %s)"):format(a, tostring(argv[i + 1]))
      end
      o[a:sub(3)] = v
      i = i + 1
    elseif a == "--only" then
      o.only = {}
      for w in (argv[i + 1] or ""):gmatch("[^,]+") do o.only[w] = true end
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      return nil, "unknown option " .. a
    else
      o.path = a
    end
    i = i + 1
  end
  return o
end

local function median(t)
  local s = {}
  for i = 1, #t do s[i] = t[i] end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

local function loadavg()
  local f = io.open("/proc/loadavg")
  if not f then return "?" end
  local l = f:read("*l")
  f:close()
  return l:match("^(%S+ %S+ %S+)") or l
end

local function nproc()
  local f = io.popen("nproc")
  local n = f and tonumber(f:read("*l"))
  if f then f:close() end
  return n or 0
end

-- Results: JSON lines now, the table at the end.
local rows = {}
local function emit(name, value, unit, extra, target)
  local parts = {('"bench":"%s"'):format(name), ('"value":%.6g'):format(value),
                 ('"unit":"%s"'):format(unit)}
  for _, kv in ipairs(extra or {}) do
    local v = kv[2]
    parts[#parts + 1] = type(v) == "number" and ('"%s":%.6g'):format(kv[1], v)
                        or ('"%s":"%s"'):format(kv[1], tostring(v))
  end
  io.stdout:write("{", table.concat(parts, ","), "}\n")
  io.stdout:flush()
  rows[#rows + 1] = {name, value, unit, target or ""}
end

-- One pass of p from a reset (the clock starts before reset: reset restarts
-- the stages' threads, which start working at once).  Returns seconds and
-- the sample count.
local function timed_pass(p)
  local t0 = now()
  p:reset()
  local n = 0
  while p:next() do n = n + 1 end
  return now() - t0, n
end

-- Every pipeline gets an untimed first pass: JIT warm-up (here and in the
-- worker states) and first-sample costs stay out of the figures.
local function warm(p)
  while p:next() do end
  return p
end

-- 1 and 2 -------------------------------------------------------------------------

local function bench_next(o)
  local p = warm(sluice.range(o.n))
  local times = {}
  for _ = 1, o.runs do
    collectgarbage()
    local t, n = timed_pass(p)
    assert(n == o.n)
    times[#times + 1] = t
  end
  p:close()
  local t = median(times)
  emit("next_range", o.n / t, "samples/s",
       {{"n", o.n}, {"ns_per_sample", t / o.n * 1e9}, {"runs", o.runs}},
       ">= 1e6")
end

local function bench_map(o)
  local base = warm(sluice.range(o.n))
  local mapped = warm(sluice.range(o.n):map(function(s) return s end,
                                            {threads = 1}))
  local tb, tm, diffs = {}, {}, {}
  for _ = 1, o.runs do
    collectgarbage()
    local a = timed_pass(base)
    collectgarbage()
    local b = timed_pass(mapped)
    tb[#tb + 1], tm[#tm + 1], diffs[#diffs + 1] = a, b, b - a
  end
  base:close()
  mapped:close()
  local over = median(diffs) / o.n
  emit("map_identity_overhead", over * 1e9, "ns/sample",
       {{"n", o.n}, {"range_s", median(tb)}, {"range_map_s", median(tm)},
        {"runs", o.runs}}, "<= 1000")
end

-- 3 ------------------------------------------------------------------------------

-- o.work multiply-adds (rounded down to a multiple of 256) on a f32 buffer
-- of 256 per sample, through the FFI
-- pointer: a stand-in for a real augmentation's pixel loop.  The result goes
-- into the sample, so the work cannot be skipped.  (Captures only numbers
-- and modules: shippable.)
local function heavy_decorator(work)
  return function(s)
    local t = sluice.tensor("f32", {256})
    local d = t.data
    local x = s.i * 1e-6
    for _ = 1, work / 256 do
      for j = 0, 255 do d[j] = d[j] * 0.999 + x end
    end
    s.v = t
    return s
  end
end

local function bench_heavy(o)
  local load0 = loadavg()
  local pipes = {}
  for _, n in ipairs{1, 2} do
    pipes[n] = warm(sluice.range(o["heavy-n"])
      :map(heavy_decorator(o.work), {threads = n}))
  end
  local times = {[1] = {}, [2] = {}}
  for _ = 1, o.runs do
    for _, n in ipairs{1, 2} do
      collectgarbage()
      times[n][#times[n] + 1] = timed_pass(pipes[n])
    end
  end
  pipes[1]:close()
  pipes[2]:close()
  local t1, t2 = median(times[1]), median(times[2])
  local extra = {{"n", o["heavy-n"]}, {"work", o.work}, {"nproc", nproc()},
                 {"loadavg_start", load0}, {"loadavg_end", loadavg()},
                 {"runs", o.runs}}
  emit("heavy_map_t1", o["heavy-n"] / t1, "samples/s", extra)
  emit("heavy_map_t2", o["heavy-n"] / t2, "samples/s", extra)
  emit("heavy_map_speedup", t1 / t2, "x", extra, ">= 1.8")
end

-- 4 ------------------------------------------------------------------------------

local function normalise(s)
  local img = s.image
  local out = sluice.tensor("f32", {784})
  local src, dst = img.data, out.data
  for k = 0, 783 do dst[k] = src[k] * (1 / 255) end
  s.image = out
  return s
end

-- The same normalisation on a whole batch (u8 [B, 28, 28] -> f32 [B, 784]):
-- one Lua call per 128 samples, the way a vectorised decorator runs.
local function normalise_batch(s)
  local img = s.image
  local n = img.shape[1]
  local out = sluice.tensor("f32", {n, 784})
  local src, dst = img.data, out.data
  for k = 0, n * 784 - 1 do dst[k] = src[k] * (1 / 255) end
  s.image = out
  return s
end
local BATCH_SCHEMA = {{"image", "f32", {-1, 784}}, {"label", "i64", {-1}}}

local function bench_fmnist(o)
  local function open(path) return sluice.open(path) end
  local function open2(path) return sluice.open_files({path}, {threads = 2}) end
  -- In memory, like the peers' numpy arrays: the records decoded once into
  -- :cache() (the warm-up pass fills it; later passes replay it).
  local function mem(path) return sluice.open(path):cache() end
  local cases = {
    {"fmnist_no_map", open, function(p) return p end},
    {"fmnist_open_files_t2", open2, function(p) return p end},
    {"fmnist_lua_map_t1", open, function(p) return p:map(normalise, {threads = 1}) end},
    {"fmnist_lua_map_t2", open, function(p) return p:map(normalise, {threads = 2}) end},
    {"fmnist_lua_batch_map_t1", open, function(p) return p end,
     function(p)
       return p:map(normalise_batch, {threads = 1, schema = BATCH_SCHEMA})
     end},
    {"fmnist_mem_no_map", mem, function(p) return p end},
    {"fmnist_mem_lua_map_t2", mem, function(p) return p:map(normalise, {threads = 2}) end},
  }
  local pipes, times = {}, {}
  for i, c in ipairs(cases) do
    local p = c[2](o.path):shuffle(10000, {seed = 1})
    p = c[3](p):batch(128)
    if c[4] then p = c[4](p) end
    pipes[i] = warm(p:prefetch(4))
    times[i] = {}
  end
  local samples
  local cpu = {}
  for i = 1, #cases do cpu[i] = {} end
  for _ = 1, o.runs do
    for i, p in ipairs(pipes) do
      collectgarbage()
      local c0 = os.clock() -- CPU time of the process: every thread
      local t0 = now()
      p:reset()
      local n = 0
      for b in p:iter() do n = n + b.label.shape[1] end
      times[i][#times[i] + 1] = now() - t0
      cpu[i][#cpu[i] + 1] = os.clock() - c0
      samples = n
    end
  end
  for i, c in ipairs(cases) do
    pipes[i]:close()
    local t = median(times[i])
    emit(c[1], samples / t, "samples/s",
         {{"samples", samples}, {"file", o.path}, {"runs", o.runs},
          {"cpu_s", median(cpu[i])}})
  end
end

-- main ---------------------------------------------------------------------------

local function main(argv)
  local o, err = parse(argv)
  if not o then
    io.stderr:write("bench_lua: ", err, "\n", USAGE, "\n")
    return 2
  end
  if o.help then print(USAGE) return 0 end
  local function want(k) return not o.only or o.only[k] end

  local load0 = loadavg()
  io.stderr:write(("bench_lua: nproc %d, loadavg %s, %s\n")
                  :format(nproc(), load0, jit.version))
  if want("next") then bench_next(o) end
  if want("map") then bench_map(o) end
  if want("heavy") then bench_heavy(o) end
  if want("fmnist") then
    if o.path then
      bench_fmnist(o)
    else
      io.stderr:write("bench_lua: no SLR file given: fmnist pipeline skipped\n")
    end
  end
  emit("env", nproc(), "nproc", {{"loadavg_start", load0},
                                 {"loadavg_end", loadavg()}})

  io.stderr:write(("\n%-24s %16s  %-10s %s\n"):format("bench", "median", "unit",
                                                       "target"))
  for _, r in ipairs(rows) do
    if r[1] ~= "env" then
      io.stderr:write(("%-24s %16.6g  %-10s %s\n"):format(r[1], r[2], r[3], r[4]))
    end
  end
  io.stderr:write(("nproc %d; loadavg at start %s, at end %s\n")
                  :format(nproc(), load0, loadavg()))
  return 0
end

os.exit(main(arg))
