-- 07-map_spec.lua: :map() and :filter(): Lua functions run in worker Lua
-- states on sluice's threads.  Ordering with 1, 2 and 4 threads, shipped
-- upvalues and the promised message for unshippable ones, "module.function"
-- names, errors carried to the consumer with their traceback, reset after an
-- error, closing with busy workers, and the scheduler running while the
-- consumer is busy - measured, not assumed.
local ffi = require "ffi"
local sluice = require "sluice"

local THIS = debug.getinfo(1, "S").short_src

pcall(ffi.cdef, [[
typedef struct sl_spec_timespec { long tv_sec; long tv_nsec; } sl_spec_timespec;
int clock_gettime(int clk, sl_spec_timespec *ts);
int usleep(unsigned int usec);
]])

local TS = ffi.new("sl_spec_timespec")
local function now()
  ffi.C.clock_gettime(1, TS) -- CLOCK_MONOTONIC
  return tonumber(TS.tv_sec) + tonumber(TS.tv_nsec) * 1e-9
end

-- Sleeps `ms` milliseconds; shipped to workers as an upvalue (it only uses
-- `ffi`, itself shipped as require "ffi").
local function sleep_ms(ms)
  if not pcall(function() return ffi.C.usleep end) then
    ffi.cdef "int usleep(unsigned int usec);"
  end
  ffi.C.usleep(ms * 1000)
end

local H = dofile "spec/helper.lua"
local misuse, collect, where = H.misuse_with_line, H.collect, H.where

describe("sluice.Pipeline", function()
  describe(":map()", function()
    it("applies the function to every sample, in order", function()
      local p = sluice.range(100):map(function(s) s.i = s.i * 2 return s end)
      local want = {}
      for k = 0, 99 do want[k + 1] = 2 * k end
      assert.same(want, collect(p))
      p:reset()
      assert.same(want, collect(p))
    end)

    it("runs in a worker state with ffi and sluice, not in the caller's", function()
      local p = sluice.range(3):map(function(s)
        rawset(_G, "spec_marker", true)
        s.has_globals = rawget(_G, "ffi") ~= nil and rawget(_G, "sluice") ~= nil
        return s
      end)
      for s in p:iter() do assert.is_true(s.has_globals) end
      assert.is_nil(rawget(_G, "spec_marker"))
    end)

    it("gives identical ordered output with 1, 2 and 4 threads", function()
      local function work(s)
        local x = s.i
        for _ = 1, (s.i * 7919) % 200 do x = (x * 31 + 7) % 1000003 end
        s.v = x
        return s
      end
      local runs = {}
      for _, threads in ipairs {1, 2, 4} do
        local p = sluice.range(2000):map(work, {threads = threads})
        runs[threads] = collect(p, "v")
      end
      assert.equal(2000, #runs[1])
      assert.same(runs[1], runs[2])
      assert.same(runs[1], runs[4])
    end)

    it("with ordered = false yields the same multiset", function()
      local p = sluice.range(1000):map(function(s)
        if s.i % 10 == 0 then sleep_ms(1) end
        return s
      end, {threads = 4, ordered = false})
      local got = collect(p)
      table.sort(got)
      local want = {}
      for k = 0, 999 do want[k + 1] = k end
      assert.same(want, got)
    end)

    it("ships upvalues: numbers, strings, nested tables, functions, modules", function()
      local K, NAME = 3, "x"
      local CFG = {scale = {by = 2}, list = {1, 2, 3}}
      local function helper(v) return v + CFG.list[3] end
      local p = sluice.range(4):map(function(s)
        local t = sluice.tensor("f32", {2})
        t.data[0] = s.i
        t[1] = K
        s[NAME] = helper(s.i * CFG.scale.by)
        s.t = t
        s.sz = tonumber(ffi.sizeof("int64_t"))
        return s
      end)
      local k = 0
      for s in p:iter() do
        assert.equal(2 * k + 3, s.x)
        assert.same({k, 3}, s.t:totable())
        assert.equal(8, s.sz)
        k = k + 1
      end
      assert.equal(4, k)
    end)

    it("copies upvalue tables: the caller's table is not changed", function()
      local counter = {n = 0}
      local p = sluice.range(5):map(function(s)
        counter.n = counter.n + 1
        s.n = counter.n
        return s
      end)
      assert.same({1, 2, 3, 4, 5}, collect(p, "n"))
      assert.equal(0, counter.n)
    end)

    it("refuses unshippable upvalues where :map() is called, naming them", function()
      local co = coroutine.create(function() end)
      local cd = ffi.new("int[1]")
      local file = io.tmpfile()
      local p = sluice.range(3)
      local f1 = function(s) local _ = co return s end
      local msg, line = misuse(function() p:map(f1) end)
      assert.equal(debug.getinfo(1, "l").currentline - 1, line)
      assert.equal("map: cannot ship upvalue 'co' (a thread) of the function "
                   .. "defined at " .. where(f1), msg)
      local f2 = function(s) local _ = cd return s end
      assert.equal("map: cannot ship upvalue 'cd' (a cdata) of the function "
                   .. "defined at " .. where(f2), misuse(function() p:map(f2) end))
      local f3 = function(s) local _ = file return s end
      assert.equal("map: cannot ship upvalue 'file' (a userdata) of the "
                   .. "function defined at " .. where(f3),
                   misuse(function() p:map(f3) end))
      local cfg = {inner = {co = co}}
      local f4 = function(s) local _ = cfg return s end
      assert.equal("map: cannot ship upvalue 'cfg.inner.co' (a thread) of the "
                   .. "function defined at " .. where(f4),
                   misuse(function() p:map(f4) end))
      file:close()
      -- the pipeline was not consumed by the failed declarations
      assert.same({0, 1, 2}, collect(p))
    end)

    it("accepts a \"module.function\" name, required in the worker", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir -p '" .. dir .. "'"))
      local f = assert(io.open(dir .. "/spec_mapmod.lua", "w"))
      f:write("local M = {}\n",
              "function M.triple(s) s.i = s.i * 3 return s end\n",
              "function M.odd(s) return s.i % 2 == 1 end\n",
              "return M\n")
      f:close()
      local saved = package.path
      package.path = dir .. "/?.lua;" .. package.path
      local p = sluice.range(4):map("spec_mapmod.triple")
      local q = sluice.range(6):filter("spec_mapmod.odd")
      package.path = saved
      assert.same({0, 3, 6, 9}, collect(p))
      assert.same({1, 3, 5}, collect(q))
      os.execute("rm -rf '" .. dir .. "'")
    end)

    it("raises at the sample when the function returns nothing, naming it", function()
      local fn = function(s) if s.i < 2 then return s end end
      local p = sluice.range(5):map(fn)
      assert.same({0, 1}, {p:next().i, p:next().i})
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.equal("map (" .. where(fn) .. "): map function returned nothing "
                   .. "(it must return a sample)",
                   err:match("^[^\n]*"))
      local q = sluice.range(2):map(function() return 42 end)
      local ok2, err2 = pcall(q.next, q)
      assert.is_false(ok2)
      assert.matches("map function returned a number %(it must return a "
                     .. "sample%)", err2)
    end)

    it("carries Lua errors to the consumer at their position with a traceback", function()
      for _, threads in ipairs {1, 2} do
        local fn = function(s)
          if s.i == 5 then error("boom at five") end
          return s
        end
        local line = debug.getinfo(1, "l").currentline - 3
        local p = sluice.range(20):map(fn, {threads = threads})
        for k = 0, 4 do assert.equal(k, p:next().i) end
        local ok, err = pcall(p.next, p)
        assert.is_false(ok)
        assert.equal("map (" .. where(fn) .. "): " .. THIS .. ":" .. line
                     .. ": boom at five", err:match("^[^\n]*"))
        assert.matches("\nstack traceback:\n", err, 1, true)
        assert.matches(THIS .. ":" .. line .. ": in function", err, 1, true)
        -- sticky until reset
        local ok2, err2 = pcall(p.next, p)
        assert.is_false(ok2)
        assert.equal(err, err2)
      end
    end)

    it("starts a clean pass on reset after an error", function()
      -- The worker state survives resets: its global counter makes only
      -- the first pass fail.
      local p = sluice.range(10):map(function(s)
        local calls = (rawget(_G, "spec_calls") or 0) + 1
        rawset(_G, "spec_calls", calls)
        if calls == 4 then error("first pass only") end
        return s
      end)
      assert.same({0, 1, 2}, {p:next().i, p:next().i, p:next().i})
      assert.has_error(function() p:next() end)
      p:reset()
      assert.same({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, collect(p))
    end)

    it("keeps the first output's schema, or the one given", function()
      local p = sluice.range(3):map(function(s) s.sq = s.i * s.i return s end)
      local sch = p:schema()
      assert.same({"i", "sq"}, {sch[1].name, sch[2].name})
      assert.same({0, 1, 4}, collect(p, "sq"))
      local q = sluice.range(4):map(function(s)
        s.v = sluice.tensor("u8", {s.i})
        return s
      end, {schema = {{"i", "i64", {}}, {"v", "u8", {-1}}}})
      assert.same({-1}, q:schema().v.shape)
      local sizes = {}
      for s in q:iter() do sizes[#sizes + 1] = s.v:numel() end
      assert.same({0, 1, 2, 3}, sizes)
    end)

    it("keeps a declared variable dimension through a do-nothing map (issue 19, 2)", function()
      -- The issue's pipeline: a map declaring v: i32[-1], then maps (and
      -- C stages) that declare nothing.  Each must accept i32[1] after
      -- i32[0]: a stage's schema is what upstream declared unless it says
      -- otherwise.
      local function up()
        return sluice.range(4):map(function(s)
          s.v = sluice.tensor("i32", {s.i})
          return s
        end, {schema = {{"i", "i64", {}}, {"v", "i32", {-1}}}})
      end
      local function id(s) return s end
      local cases = {
        up():map(id),
        up():map(id, {threads = 4}),
        up():map(id):map(id),
        up():prefetch(2):map(function(s) s.n = s.v:numel() return s end),
        up():shuffle(2, {seed = 1}):map(id, {threads = 2}),
      }
      for k, p in ipairs(cases) do
        assert.same({-1}, p:schema().v.shape, "case " .. k)
        local sizes = {}
        for s in p:iter() do sizes[#sizes + 1] = s.v:numel() end
        table.sort(sizes)
        assert.same({0, 1, 2, 3}, sizes, "case " .. k)
        p:close()
      end
    end)

    it("reports an output that does not match the schema at its position", function()
      local p = sluice.range(5):map(function(s)
        s.x = s.i < 2 and 1 or 0.5 -- i64 first, then f64
        return s
      end)
      assert.same({1, 1}, {p:next().x, p:next().x})
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.matches("'x'", err)
    end)

    it("closes promptly with busy workers mid-pass", function()
      local p = sluice.range(1000):map(function(s)
        sleep_ms(50)
        return s
      end, {threads = 2})
      assert.equal(0, p:next().i)
      local t0 = now()
      p:close()
      local dt = now() - t0
      assert.is_true(dt < 0.5, ("close took %.3f s"):format(dt))
      -- and a collected pipeline too
      local q = sluice.range(1000):map(function(s) sleep_ms(50) return s end,
                                       {threads = 2})
      q:next()
      q = nil -- luacheck: ignore 311
      t0 = now()
      collectgarbage()
      collectgarbage()
      assert.is_true(now() - t0 < 0.5)
    end)

    it("keeps working while the consumer is busy (measured)", function()
      -- Each sample costs X ms in the worker; the stage may hold N in
      -- flight.  While the consumer sleeps longer than N * X, the workers
      -- must fill the window, so the next N samples arrive at once: far
      -- faster than the N * X a pipeline that waits for the consumer would
      -- take.
      local X, N = 10, 8
      for _, variant in ipairs {"queue", "prefetch"} do
        local p = sluice.range(100):map(function(s)
          sleep_ms(X)
          return s
        end, {threads = 1, queue = variant == "queue" and N or 1})
        if variant == "prefetch" then p = p:prefetch(N) end
        assert.equal(0, p:next().i)
        sleep_ms(3 * N * X)
        local t0 = now()
        for k = 1, N do assert.equal(k, p:next().i) end
        local dt = now() - t0
        print(("\n  consumer busy (%s): %d samples of %d ms each arrived in "
               .. "%.2f ms"):format(variant, N, X, dt * 1000))
        assert.is_true(dt < 0.25 * N * X / 1000,
          ("%s: %d samples took %.1f ms after the consumer slept; "
           .. "producing them takes %d ms"):format(variant, N, dt * 1000, N * X))
        p:close()
      end
    end)

    it("rejects bad functions and options where it is called", function()
      local p = sluice.range(3)
      local id = function(s) return s end
      assert.equal("sluice: :map(): expected a function or a "
                   .. "\"module.function\" name (got a number)",
                   misuse(function() p:map(3) end))
      assert.equal("sluice: :map(): option 'threads' must be an integer >= 1 "
                   .. "(got 0)", misuse(function() p:map(id, {threads = 0}) end))
      assert.equal("sluice: :map(): option 'ordered' must be a boolean (got a "
                   .. "string)", misuse(function() p:map(id, {ordered = "no"}) end))
      assert.equal("sluice: :map(): unknown option 'thread' (known: deadline, "
                   .. "epoch, ignore_errors, ordered, queue, schema, seed, "
                   .. "threads)",
                   misuse(function() p:map(id, {thread = 2}) end))
      assert.equal("sluice: :map(): option 'schema': schema has no fields",
                   misuse(function() p:map(id, {schema = {}}) end))
      assert.equal("sluice: :filter(): unknown option 'schema' (known: "
                   .. "deadline, epoch, ignore_errors, ordered, queue, seed, "
                   .. "threads)",
                   misuse(function() p:filter(id, {schema = {}}) end))
      assert.same({0, 1, 2}, collect(p))
    end)

    it("accepts more threads than the CPUs run well, as tf.data does",
       function()
      -- A script written for a bigger machine (issue 24, item 13): more
      -- than 4 x the CPUs is accepted (one notice on stderr), in order.
      local p = sluice.range(40):map(function(s) s.i = s.i * 2; return s end,
                                     {threads = 36})
      local want = {}
      for i = 0, 39 do want[#want + 1] = 2 * i end
      assert.same(want, collect(p))
    end)

    it("refuses more threads than the limit with the engine's message", function()
      -- The thread count is checked in one place (sync/engine.c,
      -- sl__threads_check): at most 1024, or SLUICE_MAX_THREADS.
      local id = function(s) return s end
      for _, kind in ipairs {"map", "filter"} do
        local p = sluice.range(3)
        local ok, err = pcall(p[kind], p, id, {threads = 10000})
        assert.is_false(ok)
        assert.matches("^" .. kind .. " %(" .. where(id):gsub("%p", "%%%0")
                       .. "%): threads = 10000 is more than the limit of %d+",
                       err)
        assert.matches("SLUICE_MAX_THREADS", err, 1, true)
      end
    end)
  end)

  describe(":filter()", function()
    it("keeps the samples for which the function returns a true value", function()
      local p = sluice.range(20):filter(function(s) return s.i % 3 == 0 end)
      assert.same({0, 3, 6, 9, 12, 15, 18}, collect(p))
      local q = sluice.range(5):filter(function(s) if s.i > 2 then return 1 end end)
      assert.same({3, 4}, collect(q))
    end)

    it("keeps the order with several threads", function()
      local function keep(s) return s.i % 7 ~= 3 end
      local a = collect(sluice.range(3000):filter(keep, {threads = 1}))
      local b = collect(sluice.range(3000):filter(keep, {threads = 4}))
      assert.same(a, b)
    end)

    it("carries errors to the consumer", function()
      local p = sluice.range(4):filter(function(s)
        if s.i == 2 then error("bad filter") end
        return true
      end)
      assert.same({0, 1}, {p:next().i, p:next().i})
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.matches("^filter %(" .. THIS:gsub("%p", "%%%0") .. ":%d+%): ", err)
      assert.matches("bad filter", err, 1, true)
    end)
  end)
end)
