-- crop_flip.lua - random crop and horizontal flip of u8 [H, W] images (28x28
-- Fashion-MNIST), a decorator prototype written in Lua and run by sluice's
-- worker threads.
--
-- As a module (examples/lua/ on package.path):
--
--   local crop_flip = require "crop_flip"
--   p = p:map(crop_flip.decorator(seed), {threads = 2})
--   p = p:map("crop_flip.apply", {threads = 2})   -- the same, seed 1
--
-- Each image is padded by 4 zero pixels on every side, a random H x W window
-- of the padded image is kept, and the result is mirrored left-right with
-- probability 1/2.  The image's `label` field (a scalar) must exist.
--
-- Determinism: the random draws are not taken from a generator that advances
-- per call (whose state would depend on which worker thread got which
-- sample, i.e. on thread timing).  They are a counter-based hash of (seed,
-- label, a hash of the image bytes): the same sample always gets the same
-- crop and flip, whatever the thread count or scheduling.  The price: two
-- identical images with the same label get the same augmentation in every
-- epoch; mix an epoch number into the seed (decorator(seed + epoch), a new
-- map per epoch) where that matters.
--
-- As a script it times the decorator with 1 and 2 worker threads over the
-- real t10k set and checks that both give identical output:
--
--   LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;;" \
--   LUA_CPATH="$PWD/build/lua/?.so;;" \
--   luajit examples/lua/crop_flip.lua [T10K.slr] [--passes N] [--runs N]
local ffi = require "ffi"
local bit = require "bit"
local sluice = require "sluice"

-- A redeclaration is an error in the FFI, and another chunk of this state
-- (the other example, a spec) may have declared clock_gettime with its own
-- timespec type: each declaration is tried on its own, and the function is
-- then called through a pointer of our type whichever declaration won.
pcall(ffi.cdef, "typedef struct sl_ex_timespec { long tv_sec; long tv_nsec; } sl_ex_timespec;")
pcall(ffi.cdef, "int clock_gettime(int clk, sl_ex_timespec *ts);")

local C = ffi.C

-- Locals that are fields of loaded modules ship to worker states as those
-- fields; nothing captured below is a cdata or userdata of our own.
local band, bxor, rshift, tobit, rol = bit.band, bit.bxor, bit.rshift, bit.tobit, bit.rol
local cast, floor, max, min = ffi.cast, math.floor, math.max, math.min

local PAD = 4
local DEFAULT_SEED = 1

local M = {PAD = PAD, DEFAULT_SEED = DEFAULT_SEED}

-- --- hashing: exact 32-bit arithmetic on Lua numbers --------------------------------
-- LuaJIT's bit ops work on 32-bit integers held in doubles.  A product of
-- two 32-bit values needs 64 bits, more than a double holds exactly, so
-- fmix32 splits one factor in 16-bit halves (each partial product < 2^49,
-- exact; tobit then wraps mod 2^32).

-- MurmurHash3's finaliser: every input bit affects every output bit.  The
-- split multiplies are written out rather than a mul32 helper: each call
-- inlined into a trace counts towards LuaJIT's limit on one function's
-- repetitions in a trace ("loop unroll limit"), past which the decorator
-- falls back to the interpreter.
local M1, M2 = tobit(0x85ebca6b), tobit(0xc2b2ae35)
local function fmix32(h)
  h = bxor(h, rshift(h, 16))
  h = tobit(tobit(rshift(h, 16) * M1) * 65536 + band(h, 0xffff) * M1)
  h = bxor(h, rshift(h, 13))
  h = tobit(tobit(rshift(h, 16) * M2) * 65536 + band(h, 0xffff) * M2)
  return bxor(h, rshift(h, 16))
end

local GOLDEN = tobit(0x9e3779b9)

local function combine(h, v)
  return fmix32(tobit(bxor(h, v) + GOLDEN))
end

-- A hash of the n bytes at p, read as 32-bit words through an int32_t
-- pointer (the tensor buffers are aligned).  Each word step multiplies by an
-- odd constant below 2^20, so the product of a 32-bit value stays below 2^51
-- and tobit's wrap-around is exact without fmix32's split; fmix32 at the end
-- makes up for the small multiplier.  Four independent lanes, because one
-- lane is a chain of dependent multiplies (latency-bound: 3x slower).
local WORD_MUL = 0x5bd1f
local function bytes_hash(p, n)
  local a, b, c, d = tobit(n), 0x3c6ef372, 0x5be0cd19, 0x1f83d9ab
  local w = cast("const int32_t *", p)
  local quads = floor(n / 16)
  for i = 0, quads * 4 - 1, 4 do
    a = rol(tobit(bxor(a, w[i]) * WORD_MUL), 13)
    b = rol(tobit(bxor(b, w[i + 1]) * WORD_MUL), 13)
    c = rol(tobit(bxor(c, w[i + 2]) * WORD_MUL), 13)
    d = rol(tobit(bxor(d, w[i + 3]) * WORD_MUL), 13)
  end
  -- The tail bytes (none for 28x28) behind a guard, not in an empty loop:
  -- a loop that never runs still ends the trace of the one above, and the
  -- rest of the decorator then runs in the interpreter.
  if quads * 16 < n then
    for k = quads * 16, n - 1 do
      a = rol(tobit(bxor(a, p[k]) * WORD_MUL), 13)
    end
  end
  return fmix32(bxor(fmix32(bxor(a, rol(b, 8))), bxor(rol(c, 16), rol(d, 24))))
end

-- The key of a seed (an integer in [0, 2^53)), computed once per decorator.
local function seed_key(seed)
  return combine(combine(0, tobit(seed % 4294967296)),
                 tobit(floor(seed / 4294967296)))
end

-- The draws for one image: offsets dx, dy in [0, 2 * PAD] of the window in
-- the padded image, and whether to flip.  They come from draw 1 of the
-- counter sequence fmix32(key + k * golden) (a counter, not a generator
-- state), one bit field each: 16 bits mod 9 is biased by under 2^-12.
-- Few fmix32 calls per sample on purpose: LuaJIT stops a trace that inlines
-- the same function more than 15 times ("loop unroll limit"), and then the
-- whole decorator runs in the interpreter, several times slower.
local function draws(key, label, p, nbytes)
  key = combine(combine(key, tobit(label)), bytes_hash(p, nbytes))
  local r = fmix32(tobit(key + GOLDEN))
  local span = 2 * PAD + 1
  local dx = band(r, 0xffff) % span
  local dy = band(rshift(r, 16), 0x7fff) % span
  local flip = band(r, 0x80000000) ~= 0
  return dx, dy, flip
end
M.draws = draws
M.seed_key = seed_key

-- Writes the crop of src (h x w) at offsets (dx, dy) of the padded image,
-- mirrored if flip, into dst (zero-filled).  The valid x range of each row is
-- computed once, so the inner loops have no bounds tests: one load and one
-- store per pixel through the FFI pointers.
local function crop_into(dst, src, h, w, dx, dy, flip)
  local ox, oy = dx - PAD, dy - PAD -- source = output + offset
  for y = max(0, -oy), min(h, h - oy) - 1 do
    local drow, srow = y * w, (y + oy) * w
    if flip then
      -- output x reads source column (w - 1 - x) + ox
      local s0 = srow + w - 1 + ox
      for x = max(0, ox), min(w - 1, w - 1 + ox) do dst[drow + x] = src[s0 - x] end
    else
      local s0 = srow + ox
      for x = max(0, -ox), min(w, w - ox) - 1 do dst[drow + x] = src[s0 + x] end
    end
  end
end

M._crop = crop_into

-- The decorator for `seed` (an integer in [0, 2^53)): a function of a sample
-- returning it with `image` replaced by a new u8 [h, w] tensor.
function M.decorator(seed)
  seed = seed or DEFAULT_SEED
  assert(type(seed) == "number" and seed >= 0 and seed == floor(seed),
         "crop_flip.decorator: seed must be an integer >= 0")
  local key = seed_key(seed)
  return function(s)
    local img = s.image
    local shape = img.shape
    local h, w = shape[1], shape[2]
    local src = img.data
    local dx, dy, flip = draws(key, s.label, src, h * w)
    local out = sluice.tensor("u8", {h, w})
    crop_into(out.data, src, h, w, dx, dy, flip)
    s.image = out
    return s
  end
end

-- For map("crop_flip.apply"): a name the worker requires; fixed seed.
M.apply = M.decorator(DEFAULT_SEED)

-- The obvious, slow version (a padded Lua table, element by element), to
-- check crop_into against.  Returns a flat Lua array (1-based).
function M.reference(src, h, w, dx, dy, flip)
  local padded = {}
  for y = 0, h + 2 * PAD - 1 do
    for x = 0, w + 2 * PAD - 1 do
      local sy, sx = y - PAD, x - PAD
      local v = 0
      if sy >= 0 and sy < h and sx >= 0 and sx < w then v = src[sy * w + sx] end
      padded[y * (w + 2 * PAD) + x] = v
    end
  end
  local out = {}
  for y = 0, h - 1 do
    for x = 0, w - 1 do
      local cx = flip and (w - 1 - x) or x
      out[#out + 1] = padded[(y + dy) * (w + 2 * PAD) + cx + dx]
    end
  end
  return out
end

-- --- the script: 1 vs 2 threads on real data ----------------------------------------

local TS = ffi.new("sl_ex_timespec")
local clock_gettime = ffi.cast("int (*)(int, sl_ex_timespec *)", C.clock_gettime)
local function now()
  clock_gettime(1, TS) -- CLOCK_MONOTONIC
  return tonumber(TS.tv_sec) + tonumber(TS.tv_nsec) * 1e-9
end

local USAGE = [[
usage: luajit crop_flip.lua [T10K.slr] [--passes N] [--runs N] [--seed N]
                            [--help]

Runs the crop/flip decorator over Fashion-MNIST t10k with 1 and 2 worker
threads, prints the median time of each and the speed-up, and checks that
both give identical output (ordered map) and that the fast crop matches a
plain reference on the first samples.  Exit status 1 if a check fails.

Without T10K.slr the t10k idx files of /usr/share/datasets/fashion-mnist
(package dataset-fashion-mnist) are packed into a temporary directory with
the `sluice` CLI: $SLUICE_CLI, else the build tree's tools/sluice (found from
package.cpath), else `sluice` on PATH.

  --passes N   passes over the file per timed run (default 5)
  --runs N     timed runs per thread count, median reported (default 5)
  --seed N     decorator seed (default 1)]]

local DATA = "/usr/share/datasets/fashion-mnist"

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function find_cli()
  local env = os.getenv("SLUICE_CLI")
  if env and env ~= "" then return env end
  -- LUA_CPATH points at <build>/lua/?.so; the CLI is <build>/tools/sluice.
  for dir in package.cpath:gmatch("([^;]*)/lua/%?%.so") do
    local cand = dir .. "/tools/sluice"
    if exists(cand) then return cand end
  end
  return "sluice"
end

-- Packs t10k into a fresh temporary directory; returns the path and the
-- directory (to remove), or nil and a message.
local function pack_t10k()
  local images = DATA .. "/t10k-images-idx3-ubyte.gz"
  local labels = DATA .. "/t10k-labels-idx1-ubyte.gz"
  if not exists(images) or not exists(labels) then
    return nil, ("no %s: install the dataset-fashion-mnist package, or give "
                 .. "an SLR path"):format(images)
  end
  local dir = os.tmpname()
  os.remove(dir)
  local cli = find_cli()
  local cmd = ("mkdir -p %s && %s pack idx -q %s %s -o %s/t10k.slr")
              :format(shell_quote(dir), shell_quote(cli), shell_quote(images),
                      shell_quote(labels), shell_quote(dir))
  local ok = os.execute(cmd)
  if ok ~= 0 and ok ~= true then
    os.execute("rm -rf " .. shell_quote(dir))
    return nil, "packing failed: " .. cmd
  end
  return dir .. "/t10k.slr", dir
end

local function parse(argv)
  local o = {passes = 5, runs = 5, seed = DEFAULT_SEED}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--help" or a == "-h" then
      o.help = true
    elseif a == "--passes" or a == "--runs" or a == "--seed" then
      local v = tonumber(argv[i + 1])
      if not v or v ~= floor(v) or v < (a == "--seed" and 0 or 1) then
        return nil, ("%s needs an integer (got %s)"):format(a, tostring(argv[i + 1]))
      end
      o[a:sub(3)] = v
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      return nil, "unknown option " .. a
    elseif o.path then
      return nil, "one SLR file only"
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

local function main(argv)
  local o, err = parse(argv)
  if not o then
    io.stderr:write("crop_flip: ", err, "\n", USAGE, "\n")
    return 2
  end
  if o.help then print(USAGE) return 0 end

  local path, tmpdir = o.path, nil
  if not path then
    path, tmpdir = pack_t10k()
    if not path then
      io.stderr:write("crop_flip: ", tmpdir, "\n")
      return 1
    end
  elseif not exists(path) then
    io.stderr:write("crop_flip: cannot open ", path, "\n")
    return 1
  end

  -- Worker states get this package.path (captured at :map()), so they can
  -- require "crop_flip" from this script's directory too.
  local here = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./")
  package.path = here .. "?.lua;" .. package.path

  local failures = 0
  local function check(ok, what)
    if not ok then
      failures = failures + 1
      print("CHECK FAILED: " .. what)
    end
  end

  -- 1. The fast crop against the reference, on the first samples.
  local ncheck, nflip, nsame = 200, 0, 0
  local p = sluice.open(path):take(ncheck)
  local dec = M.decorator(o.seed)
  for s in p:iter() do
    local img = s.image
    local h, w = img.shape[1], img.shape[2]
    local dx, dy, flip = draws(seed_key(o.seed), s.label, img.data, h * w)
    if flip then nflip = nflip + 1 end
    local want = M.reference(img.data, h, w, dx, dy, flip)
    local before = ffi.string(img.data, h * w)
    local got = dec(s).image
    local ok = true
    for k = 0, h * w - 1 do
      if got.data[k] ~= want[k + 1] then ok = false break end
    end
    if ffi.string(got.data, h * w) == before then nsame = nsame + 1 end
    check(ok, ("sample: crop (%d, %d) flip %s differs from the reference")
              :format(dx, dy, tostring(flip)))
  end
  p:close()
  print(("reference check: %d samples, %d flipped, %d unchanged"):format(
        ncheck, nflip, nsame))
  check(nflip > ncheck / 4 and nflip < ncheck * 3 / 4,
        "flips are not about half")

  -- 2. Both thread counts: the first pass (untimed, warms the JIT of every
  -- worker state) collects the outputs for the identity check.
  local pipes = {}
  for _, n in ipairs{1, 2} do
    pipes[n] = sluice.open(path):multi_pass(o.passes)
      :map(M.decorator(o.seed), {threads = n})
  end
  local ref, count = {}, 0
  for s in pipes[1]:iter() do
    count = count + 1
    local img = s.image
    ref[count] = ffi.string(img.data, img.nbytes) .. string.char(s.label)
  end
  local same, n2 = 0, 0
  for s in pipes[2]:iter() do
    n2 = n2 + 1
    local img = s.image
    if ref[n2] == ffi.string(img.data, img.nbytes) .. string.char(s.label) then
      same = same + 1
    end
  end
  check(n2 == count and same == count,
        ("1 and 2 threads differ: %d and %d samples, %d identical")
        :format(count, n2, same))
  print(("identity check: %d samples, 1 and 2 threads identical: %s")
        :format(count, tostring(same == count and n2 == count)))
  ref = nil -- luacheck: ignore 311
  collectgarbage()

  -- 3. Timing: runs alternate between the thread counts, so drifting load
  -- from other processes hits both alike.  The clock starts before reset:
  -- reset restarts the workers, which start mapping at once.
  local times = {[1] = {}, [2] = {}}
  for _ = 1, o.runs do
    for _, n in ipairs{1, 2} do
      local q = pipes[n]
      local t0 = now()
      q:reset()
      local k = 0
      for _ in q:iter() do k = k + 1 end
      times[n][#times[n] + 1] = now() - t0
      check(k == count, ("%d threads: %d samples, expected %d"):format(n, k, count))
    end
  end
  pipes[1]:close()
  pipes[2]:close()
  if tmpdir then os.execute("rm -rf " .. shell_quote(tmpdir)) end

  local t1, t2 = median(times[1]), median(times[2])
  local nproc = io.popen("nproc"):read("*l") or "?"
  local f = io.open("/proc/loadavg")
  local load = f and f:read("*l") or "?"
  if f then f:close() end
  print(("%d samples per run (%d passes), median of %d runs:")
        :format(count, o.passes, o.runs))
  print(("  1 thread:  %.3f s  (%.0f samples/s)"):format(t1, count / t1))
  print(("  2 threads: %.3f s  (%.0f samples/s)"):format(t2, count / t2))
  print(("  speed-up:  %.2fx   (nproc %s, loadavg %s)"):format(t1 / t2, nproc, load))

  if failures > 0 then
    print(("%d check(s) failed"):format(failures))
    return 1
  end
  print("all checks passed")
  return 0
end

-- Only as the main script: in worker states (require "crop_flip") and when
-- required by other code this file just returns the module.
local this = debug.getinfo(1, "S").source
if arg and arg[0] and this == "@" .. arg[0] then
  os.exit(main(arg))
end

return M
