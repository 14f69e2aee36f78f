-- spec/22-resume_spec.lua: the same samples after a restore (issue 15,
-- docs/RESUME.md).  For every stage reachable from Lua and for the demo's
-- pipeline (examples/fashion_mnist.lua): a pipeline read for `cut` items
-- (across passes, resetting at each end), saved with p:state(), closed, and
-- a fresh one built the same way and restored with p:restore(s) gives
-- exactly the rest of the uninterrupted run - bytes and order, and the pass
-- ends - for several cuts (the start, mid batch, mid pass, at and after a
-- pass end, in a later pass).  Unordered stages (ordered = false) give each
-- remaining sample of every pass exactly once.  At least one case restores
-- in a new process (luajit, and the sluice CLI).  A random map drawing from
-- ctx.rng gives the same output for threads 1, 2 and 4 and after a restore.
-- Foreign and corrupt states are refused, the pipeline left as it was.
local sluice = require "sluice"
local ffi = require "ffi"
local H = dofile "spec/helper.lua"

local FMNIST = "/usr/share/datasets/fashion-mnist/"

-- The digest code, as text: the new-process cases load the same function.
local DIGEST_SRC = [[
local ffi, bit = require "ffi", require "bit"
local sluice = require "sluice"
local u32p, u8p = ffi.typeof("const uint32_t *"), ffi.typeof("const uint8_t *")
local tobit, bxor, rol = bit.tobit, bit.bxor, bit.rol
-- Bytes -> two 32-bit lanes (order-sensitive), as hex.
local function hash(ptr, n)
  local w, b = ffi.cast(u32p, ptr), ffi.cast(u8p, ptr)
  local h1, h2 = 0x12345678, n
  local words = math.floor(n / 4)
  for i = 0, words - 1 do
    local x = w[i]
    h1 = tobit(rol(bxor(h1, x), 7) + 0x3c6ef372)
    h2 = tobit(h2 + bxor(x, rol(h1, 13)))
  end
  for i = words * 4, n - 1 do h1 = tobit(rol(bxor(h1, b[i]), 5) + 1) end
  return bit.tohex(h1) .. bit.tohex(h2)
end
-- Everything a sample holds: each field's name, dtype, shape, LoD, bytes.
return function(s)
  local parts = {}
  for _, name in ipairs(sluice.fields(s)) do
    local v = s[name]
    local t = type(v)
    if t == "number" or t == "boolean" then
      parts[#parts + 1] = name .. "=" .. tostring(v)
    elseif t == "string" then
      parts[#parts + 1] = name .. "=" .. ("%q"):format(v)
    else
      parts[#parts + 1] = ("%s=%s[%s]{%s}%s"):format(name, v.dtype,
        table.concat(v.shape, ","), v.lod and table.concat(v.lod, ",") or "",
        v.nbytes > 0 and hash(v.data, v.nbytes) or "")
    end
  end
  return table.concat(parts, " ")
end
]]
local digest = assert(loadstring(DIGEST_SRC, "=digest"))()

local END = "END"

-- Pulls up to n entries from p (digests, END at each pass end, a reset
-- after it unless that was the last pass) into out; at = {pass = k} is the
-- pass p is in, of `passes`.
local function pull(p, n, at, passes, out)
  local k = 0
  while k < n and at.pass < passes do
    local s = p:next()
    k = k + 1
    if s == nil then
      out[#out + 1] = END
      at.pass = at.pass + 1
      if at.pass < passes then p:reset() end
    else
      out[#out + 1] = digest(s)
    end
  end
  return out
end

-- The entries of each pass, sorted (for unordered stages).
local function by_pass(list)
  local passes, cur = {}, {}
  for _, d in ipairs(list) do
    if d == END then
      table.sort(cur)
      passes[#passes + 1] = cur
      cur = {}
    else
      cur[#cur + 1] = d
    end
  end
  if #cur > 0 then
    table.sort(cur)
    passes[#passes + 1] = cur
  end
  return passes
end

local function first_difference(a, b)
  for i = 1, math.max(#a, #b) do
    if a[i] ~= b[i] then return i, a[i], b[i] end
  end
end

-- A stage whose save/restore support has not landed yet refuses to save
-- naming itself: the case is then pending, saying which stage it waits for
-- (any other error fails it).  True when it made the case pending.
local function waiting(msg)
  local stage = tostring(msg):match("stage '([%w_]+)' cannot save its position")
  if stage then
    pending(("waits for %s support"):format(stage))
    return true
  end
  return false
end

-- The resume contract for build() over `passes` passes at each cut (a
-- count of entries, pass ends included).  o.unordered: each pass's
-- multiset instead of the order.  o.restore_build: the pipeline restored
-- into (default build; e.g. other thread counts).  o.max_state: bytes.
-- Returns the uninterrupted entries.
local function check_resume(build, passes, cuts, o)
  o = o or {}
  local whole = pull(build(), math.huge, {pass = 0}, passes, {})
  assert.is_true(#whole > passes, "the pipeline yields nothing")
  -- prefix (read before the cut, in pass `pass`) and the rest from a
  -- pipeline restored from `state` must be the uninterrupted run.
  local function check_rest(cut, state, prefix, pass)
    local got, at = {}, {pass = pass}
    for i = 1, #prefix do got[i] = prefix[i] end
    local q = (o.restore_build or build)()
    q:restore(state)
    pull(q, math.huge, at, passes, got)
    q:close()
    if o.unordered then
      local want, have = by_pass(whole), by_pass(got)
      assert.equal(#want, #have, ("cut %d: passes"):format(cut))
      for i = 1, #want do
        local j, a, b = first_difference(want[i], have[i])
        assert.is_nil(j, ("cut %d, pass %d: sorted entry %s is %s, "
          .. "uninterrupted %s"):format(cut, i, tostring(j), tostring(b),
                                        tostring(a)))
      end
    else
      local j, a, b = first_difference(whole, got)
      assert.is_nil(j, ("cut %d: entry %s is %s, uninterrupted %s")
                    :format(cut, tostring(j), tostring(b), tostring(a)))
    end
  end
  for _, cut in ipairs(cuts) do
    if cut > #whole then cut = #whole end
    local at = {pass = 0}
    local p = build()
    local prefix = pull(p, cut, at, passes, {})
    local ok, s = pcall(p.state, p)
    if not ok then
      p:close()
      if waiting(s) then return whole end
      error(s, 0)
    end
    assert.is_string(s)
    assert.is_true(#s < (o.max_state or 4096),
                   ("state of %d bytes at cut %d"):format(#s, cut))
    -- A save changes nothing.  A second save at once may still differ in
    -- its bytes where threads went on reading ahead meanwhile (an unordered
    -- filter's dropped samples, a shuffle that has now seen its upstream's
    -- end): then each of the two states must give the rest of the run.
    local again = p:state()
    p:close()
    check_rest(cut, s, prefix, at.pass)
    if again ~= s then check_rest(cut, again, prefix, at.pass) end
  end
  return whole
end

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok == 0 or ok == true, cmd)
end

-- The luajit running this spec (busted's interpreter), for subprocesses.
local function luajit()
  local i = -1
  while arg and arg[i - 1] do i = i - 1 end
  local exe = arg and arg[i]
  if exe and exe:match("luajit") then return exe end
  return "luajit"
end

describe("the same samples after a restore", function()
  local dir, build_dir, cli, data
  setup(function()
    dir = H.tmpdir()
    build_dir = H.build_dir()
    cli = build_dir .. "/tools/sluice"
    -- The demo's data: the build's data/ (tests/trainer/run.sh and `make
    -- demo` pack it), else packed here.
    data = build_dir .. "/data"
    local f = io.open(data .. "/train.slr")
    if f then
      f:close()
    else
      data = dir .. "/data"
      sh(("mkdir -p '%s' && '%s' pack idx -q '%strain-images-idx3-ubyte.gz'"
          .. " '%strain-labels-idx1-ubyte.gz' -o '%s/train.slr'")
         :format(data, cli, FMNIST, FMNIST, data))
    end
    -- The t10k records in three shards, chunks of 100, for open_files.
    sh(("'%s' pack idx -q '%st10k-images-idx3-ubyte.gz'"
        .. " '%st10k-labels-idx1-ubyte.gz' -o '%s/t.slr' --shards 3"
        .. " --records-per-chunk 100"):format(cli, FMNIST, FMNIST, dir))
    H.write(dir .. "/lines.txt", (function()
      local t = {}
      for i = 1, 150 do t[i] = ("line %d,%d"):format(i, i * i % 97) end
      return table.concat(t, "\n") .. "\n"
    end)())
  end)
  teardown(function() H.rmdir(dir) end)

  local function shards()
    local names = {}
    for f in io.popen(("ls '%s'/t*.slr"):format(dir)):lines() do
      names[#names + 1] = f
    end
    assert.equal(3, #names)
    return names
  end

  -- The resume contract across processes: `src` (Lua code returning a
  -- pipeline) read for `cut` entries over 2 passes and saved by one luajit
  -- process, restored by another, gives the rest of the run this process
  -- sees uninterrupted.
  local nproc = 0
  local function new_process_check(src, cuts)
    nproc = nproc + 1
    local build_file = ("%s/build%d.lua"):format(dir, nproc)
    H.write(build_file, src)
    local whole = pull(assert(loadfile(build_file))(), math.huge, {pass = 0},
                       2, {})
    H.write(dir .. "/digest.lua", DIGEST_SRC)
    H.write(dir .. "/piece.lua", ([[
local digest = dofile(%q)
local build_file, mode, cut, file = ...
local p = assert(loadfile(build_file))()
local pass = 0
if mode == "resume" then
  local f = assert(io.open(file, "rb"))
  p:restore(f:read("*a"))
  f:close()
  pass = tonumber(cut)
end
local n = 0
while pass < 2 do
  if mode == "save" and n == tonumber(cut) then
    local f = assert(io.open(file, "wb"))
    f:write(p:state())
    f:close()
    print("PASS " .. pass)
    return
  end
  local s = p:next()
  n = n + 1
  if s == nil then
    print("END")
    pass = pass + 1
    if pass < 2 then p:reset() end
  else
    print(digest(s))
  end
end
]]):format(dir .. "/digest.lua"))
    for _, cut in ipairs(cuts) do
      local file = dir .. "/state.bin"
      os.remove(file)
      local out = {}
      local f = io.popen(("'%s' '%s/piece.lua' '%s' save %d '%s' 2>&1")
                         :format(luajit(), dir, build_file, cut, file))
      local pass
      for line in f:lines() do
        local p = line:match("^PASS (%d+)$")
        if p then pass = p else out[#out + 1] = line end
      end
      f:close()
      if waiting(table.concat(out, "\n")) then return end
      assert.equal(cut, #out, table.concat(out, "\n"):sub(1, 2000))
      f = io.popen(("'%s' '%s/piece.lua' '%s' resume %s '%s' 2>&1")
                   :format(luajit(), dir, build_file, pass, file))
      for line in f:lines() do out[#out + 1] = line end
      f:close()
      local j, a, b = first_difference(whole, out)
      assert.is_nil(j, ("cut %d: entry %s is %s, uninterrupted %s")
                    :format(cut, tostring(j), tostring(b), tostring(a)))
    end
  end

  it("in a new process (luajit): shuffle, a random map on 2 threads, "
     .. "batch, prefetch", function()
    new_process_check([[
      local sluice = require "sluice"
      return sluice.range(500):shuffle(64, {seed = 12})
        :map(function(s, ctx)
          s.u = ctx.rng:random()
          s.k = ctx.rng:random(1, 6)
          return s
        end, {threads = 2})
        :batch(16):prefetch(3)
    ]], {1, 17, 31, 32, 33, 50})
  end)

  -- Cut points for a pipeline of ~n entries a pass over 2 passes.
  local function cuts_for(n)
    return {0, 1, math.floor(n / 3), n - 1, n, n + 1, n + math.floor(n / 2),
            2 * n + 1}
  end

  describe("sources", function()
    it("range", function()
      check_resume(function() return sluice.range(50) end, 2, cuts_for(50))
    end)

    it("from_table", function()
      local rows = {}
      for i = 1, 40 do
        rows[i] = {label = i % 7, text = ("row %d"):format(i),
                   v = {i, i + 1, i * 2}}
      end
      check_resume(function() return sluice.from_table(rows) end, 2,
                   cuts_for(40))
    end)

    it("slr (sluice.open)", function()
      check_resume(function() return sluice.open(dir .. "/t-00001-of-00003.slr") end,
                   2, {0, 1, 99, 100, 101, 555, 3332, 3333, 3334, 5000})
    end)

    for _, threads in ipairs{1, 2, 4} do
      for _, ordered in ipairs{true, false} do
        it(("open_files, %d threads, ordered = %s, shuffle"):format(threads,
                                                                  tostring(ordered)),
           function()
          local function build()
            return sluice.open_files(shards(), {threads = threads,
              ordered = ordered, shuffle = true, seed = 9, window = 4})
          end
          check_resume(build, 2, {0, 1, 2500, 9999, 10000, 10001, 14321},
                       {unordered = not ordered})
        end)
      end
    end

    it("open_files: a state of 4 threads restores into 1, and 1 into 2",
       function()
      local function with(threads)
        return function()
          return sluice.open_files(shards(), {threads = threads,
            shuffle = true, seed = 3, window = 2}):batch(64)
        end
      end
      check_resume(with(4), 2, {3, 157, 200}, {restore_build = with(1)})
      check_resume(with(1), 2, {3, 157, 200}, {restore_build = with(2)})
    end)

    it("idx", function()
      check_resume(function()
        return sluice.open("idx:" .. FMNIST .. "t10k-images-idx3-ubyte.gz"):take(300)
      end, 2, cuts_for(300))
    end)

    it("text, and text with a Lua parser on 2 threads", function()
      check_resume(function() return sluice.open("text:" .. dir .. "/lines.txt") end,
                   2, cuts_for(150))
      check_resume(function()
        return sluice.open("text:" .. dir .. "/lines.txt", {threads = 2,
          parser = function(line)
            local a, b = line:match("line (%d+),(%d+)")
            if tonumber(a) % 5 == 0 then return nil end -- skips some lines
            return {a = tonumber(a), b = tonumber(b)}
          end})
      end, 2, cuts_for(120))
    end)

    it("images (a folder, 2 decoding threads) and decode_image", function()
      local mk = build_dir .. "/tools/sluice_test_mkimages"
      sh(("'%s' '%s/png' 40 png > /dev/null"):format(mk, dir))
      check_resume(function()
        return sluice.open("image:" .. dir .. "/png", {threads = 2})
      end, 2, cuts_for(40))
      sh(("'%s' pack images -q '%s/png' -o '%s/png.slr' --records-per-chunk 8")
         :format(cli, dir, dir))
      check_resume(function()
        return sluice.open(dir .. "/png.slr"):decode_image{}
      end, 2, cuts_for(40))
    end)

    it("a Lua reader", function()
      local function build()
        return sluice.reader(function()
          local i = 0
          return function()
            i = i + 1
            if i > 60 then return nil end
            return {i = i, sq = i * i}
          end
        end)
      end
      check_resume(build, 2, cuts_for(60))
    end)
  end)

  describe("decorators", function()
    local function r(n) return sluice.range(n or 100) end

    it("shuffle (a small and a large window)", function()
      check_resume(function() return r():shuffle(16, {seed = 3}) end, 3,
                   cuts_for(100))
      check_resume(function() return r(3000):shuffle(1000, {seed = 4}) end, 2,
                   {1, 999, 1500, 3001, 4000}, {max_state = 4096 + 8 * 1000})
    end)

    it("batch (a partial last batch, drop_last)", function()
      check_resume(function() return r():batch(8) end, 2, cuts_for(13))
      check_resume(function() return r():shuffle(10, {seed = 1})
        :batch(7, {drop_last = true}) end, 2, cuts_for(14))
    end)

    it("take, skip", function()
      check_resume(function() return r():skip(13):take(50) end, 2, cuts_for(50))
    end)

    it("chain, zip", function()
      check_resume(function()
        return sluice.chain(r(20), r(0), r(30):shuffle(8, {seed = 2}))
      end, 2, cuts_for(50))
      check_resume(function()
        return sluice.zip(r(40), r(40):map(function(s) s.j = s.i * 2 s.i = nil return s end))
      end, 2, cuts_for(40))
    end)

    it("multi_pass, repeat_first, cache", function()
      check_resume(function() return r(30):multi_pass(3) end, 2, cuts_for(90))
      check_resume(function() return r(30):repeat_first(2) end, 2, cuts_for(30))
      check_resume(function() return r(30):shuffle(8, {seed = 5}):cache() end, 3,
                   cuts_for(30))
    end)

    it("prefetch, double_buffer", function()
      check_resume(function() return r():batch(4):prefetch(5) end, 2,
                   cuts_for(25))
      check_resume(function()
        return r():batch(4):double_buffer{device = "cpu", slots = 2}
      end, 2, cuts_for(25))
    end)

    it("random_crop_flip", function()
      check_resume(function()
        return sluice.open("idx:" .. FMNIST .. "t10k-images-idx3-ubyte.gz")
          :take(64):map(function(s)
            local t = sluice.tensor("u8", {28, 28, 1})
            ffi.copy(t.data, s.image.data, 784)
            s.image = t
            return s
          end):random_crop_flip{size = {24, 24}, seed = 7}
      end, 2, cuts_for(64))
    end)

    for _, threads in ipairs{1, 2, 4} do
      it(("map and filter, %d threads, ordered"):format(threads), function()
        check_resume(function()
          return r(200):map(function(s) s.v = s.i * 3 + 1 return s end,
                            {threads = threads})
        end, 2, cuts_for(200))
        check_resume(function()
          return r(200):filter(function(s) return s.i % 3 ~= 0 end,
                               {threads = threads})
        end, 2, cuts_for(133))
        -- Under a shuffle and a batch: the demo's shape.
        check_resume(function()
          return r(200):shuffle(32, {seed = 8})
            :map(function(s) s.v = s.i * 2 return s end,
                 {threads = threads}):batch(16)
        end, 2, cuts_for(13))
      end)

      it(("map and filter, %d threads, unordered: each sample once")
           :format(threads), function()
        check_resume(function()
          return r(200):map(function(s) s.v = s.i + 1 return s end,
                            {threads = threads, ordered = false})
        end, 2, cuts_for(200), {unordered = true})
        check_resume(function()
          return r(200):filter(function(s) return s.i % 4 ~= 1 end,
                               {threads = threads, ordered = false})
        end, 2, cuts_for(150), {unordered = true})
      end)
    end

    it("a state saved with 4 map threads restores into 1 and 2", function()
      local function with(threads)
        return function()
          return r(120):map(function(s) s.v = -s.i return s end,
                            {threads = threads})
        end
      end
      check_resume(with(4), 2, {5, 119, 130}, {restore_build = with(1)})
      check_resume(with(1), 2, {5, 119, 130}, {restore_build = with(2)})
    end)

    it("an unordered map under a shuffle is refused naming it", function()
      local p = r(100):map(function(s) return s end,
                           {threads = 2, ordered = false}):shuffle(8)
      p:next()
      local ok, err = pcall(p.state, p)
      assert.is_false(ok)
      assert.matches("ordered=false", err)
    end)
  end)

  describe("randomness (ctx.rng)", function()
    local function noisy(threads)
      return function()
        return sluice.range(300):map(function(s, ctx)
          s.u, s.n, s.k = ctx.rng:random(), ctx.rng:normal(),
                          ctx.rng:random(1, 1000)
          return s
        end, {threads = threads, seed = 11})
      end
    end

    it("the same draws for threads 1, 2 and 4 and after a restore", function()
      local one = check_resume(noisy(1), 2, {0, 7, 299, 300, 450})
      for _, threads in ipairs{2, 4} do
        local other = check_resume(noisy(threads), 2, {3, 301})
        assert.same(one, other)
      end
      -- Passes differ (ctx.epoch), and so they should.
      assert.are_not.equal(one[1], one[302])
      -- Restoring a state of 4 threads into 1.
      check_resume(noisy(4), 2, {123, 333}, {restore_build = noisy(1)})
    end)
  end)

  describe("the demo's pipeline (examples/fashion_mnist.lua)", function()
    local script = "examples/fashion_mnist.lua"
    local function demo(batch)
      return function()
        return assert(loadfile(script))("train", data, tostring(batch or 128),
                                        "42")
      end
    end

    it("resumes exactly at several cuts over 2 epochs", function()
      -- 469 batches an epoch (the last of 96 samples).
      check_resume(demo(), 2, {0, 1, 200, 468, 469, 470, 700},
                   {max_state = 4096 + 8 * 10000})
    end)

    it("in a new process (luajit)", function()
      new_process_check(([[
        return assert(loadfile(%q))("train", %q, "512", "42")
      ]]):format(script, data), {1, 60, 118, 150})
    end)

    it("in new processes (sluice run --save-state / --resume)", function()
      local function run(opts)
        local f = io.popen(("'%s' run --epochs 2 --digest %s '%s' train '%s' 256 42"
                            .. " 2>&1"):format(cli, opts, script, data))
        local lines = {}
        for line in f:lines() do
          if line:match("^digest ") then lines[#lines + 1] = line end
          if line:match("^sluice: ") then lines.error = line end
        end
        f:close()
        return lines
      end
      local whole = run("")
      assert.is_nil(whole.error)
      assert.equal(2 * 235, #whole)
      local file = dir .. "/run.state"
      os.remove(file)
      local got = {}
      for _, stop in ipairs{1000, 59999, 60000, 70001, ""} do
        local opts = io.open(file) and ("--resume '" .. file .. "' ") or ""
        if stop ~= "" then
          opts = opts .. ("--stop-after %d --save-state '%s'"):format(stop, file)
        end
        local lines = run(opts)
        if lines.error then
          if waiting(lines.error) then return end
          error(lines.error)
        end
        for _, l in ipairs(lines) do got[#got + 1] = l end
      end
      local j, a, b = first_difference(whole, got)
      assert.is_nil(j, ("entry %s is %s, uninterrupted %s")
                    :format(tostring(j), tostring(b), tostring(a)))
    end)
  end)

  describe("refused states", function()
    local function build(seed)
      return sluice.range(100):shuffle(16, {seed = seed or 1}):batch(8)
    end

    it("another pipeline's state names the stage; p is left as it was",
       function()
      local p = build(1)
      for _ = 1, 3 do p:next() end
      local s = p:state()
      local q, ref = build(2), build(2)
      local ok, err = pcall(q.restore, q, s)
      assert.is_false(ok)
      assert.matches("shuffle", err)
      assert.matches("seed=1", err)
      ok, err = pcall(q.restore, q, s:sub(1, #s - 3))
      assert.is_false(ok)
      assert.matches("cut short", err)
      local bad = s:sub(1, 40) .. string.char((s:byte(41) + 1) % 256) .. s:sub(42)
      ok, err = pcall(q.restore, q, bad)
      assert.is_false(ok)
      assert.matches("checksum", err)
      ok, err = pcall(q.restore, q, "not a state")
      assert.is_false(ok)
      assert.matches("not a sluice state", err)
      ok, err = pcall(q.restore, q, 42)
      assert.is_false(ok)
      assert.matches(":restore%(%) needs a state string", err)
      local other = sluice.range(100)
      ok, err = pcall(other.restore, other, s)
      assert.is_false(ok)
      assert.matches("another pipeline: stage 1 from the top %(range%)", err)
      -- q still yields what ref does.
      assert.same(pull(ref, math.huge, {pass = 0}, 1, {}),
                  pull(q, math.huge, {pass = 0}, 1, {}))
    end)

    it("a closed or consumed pipeline raises", function()
      local p = build()
      local s = p:state()
      local q = build()
      q:batch(2)
      assert.matches("consumed", select(2, pcall(q.state, q)))
      assert.matches("consumed", select(2, pcall(q.restore, q, s)))
      p:close()
      assert.matches("closed", select(2, pcall(p.state, p)))
    end)
  end)
end)
