-- 00-core_spec.lua: Lua's one bridge to C, below the Pipeline methods:
-- finding libsluice (sluice.cdef, sluice.library, SLUICE_LIBRARY), the
-- pure-Lua encoder sluice.ship (its bytes, its messages, the value graphs
-- workers rebuild from them), and the FFI calls the facade makes with them
-- (sl__shipped_new, sl__lua_env_new, sl__lua_stage, sl__lua_reader),
-- including who owns what when a call fails.
local ffi = require "ffi"
local C = require "sluice.cdef"
local ship = require "sluice.ship"
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local where = H.where

local SL_OK, SL_EOF = 0, -1

local function last_error()
  return ffi.string(C.sl_last_error())
end

-- A shipped object (cdata, released by the collector) from `fn`.
local function shipped_of(fn, what)
  local at, data, name = ship.encode(fn, what or "map")
  assert(at, data)
  local out = ffi.new("sl__shipped *[1]")
  assert.equal(SL_OK, C.sl__shipped_new(what or "map", at, data,
                                         data and #data or 0, name, out))
  return ffi.gc(out[0], C.sl__shipped_release)
end

local function env_here()
  return ffi.gc(C.sl__lua_env_new(package.path, package.cpath),
                C.sl__lua_env_release)
end

local function range(n)
  local out = ffi.new("sl_reader *[1]")
  assert.equal(SL_OK, C.sl_reader_range(n, out))
  return out[0]
end

-- Pulls every sample of reader r (owned by the caller: destroyed here),
-- returning the count.
local function drain(r)
  local s = ffi.new("sl_sample *[1]")
  local n = 0
  local rc = C.sl_reader_next(r, s)
  while rc == SL_OK do
    n = n + 1
    C.sl_sample_release(s[0])
    rc = C.sl_reader_next(r, s)
  end
  local msg = last_error()
  C.sl_reader_destroy(r)
  assert.equal(SL_EOF, rc, msg)
  return n
end

describe("sluice.cdef", function()
  it("calls the libsluice that sluice.library names", function()
    assert.equal("0.1.0", ffi.string(C.sl_version()))
    local path = require "sluice.library"
    assert.equal("/", path:sub(1, 1))
    local f = assert(io.open(path, "rb"))
    f:close()
    -- One copy of the library in the process, the one named.
    local maps = {}
    for line in io.lines("/proc/self/maps") do
      local p = line:match("%s(/%S*libsluice%.so[%.%d]*)$")
      if p then maps[p] = true end
    end
    local n = 0
    for p in pairs(maps) do
      n = n + 1
      assert.equal(path, p)
    end
    assert.equal(1, n)
  end)

  it("fails, naming it, when SLUICE_LIBRARY names no library", function()
    local cmd = "SLUICE_LIBRARY=/nowhere/libsluice.so luajit -e "
                .. "'require \"sluice.cdef\"' 2>&1"
    local h = assert(io.popen(cmd))
    local out = h:read("*a")
    h:close()
    assert.matches("cannot load SLUICE_LIBRARY=/nowhere/libsluice.so", out,
                   1, true)
  end)
end)

describe("sluice.ship", function()
  describe("encode()", function()
    it("returns the source line and the bytes of a function", function()
      local function f(s) return s end
      local at, data, name = ship.encode(f, "map")
      assert.equal(where(f), at)
      assert.equal("string", type(data))
      assert.is_nil(name)
      -- FUNCTION, then a u32 length of string.dump's bytes.
      assert.equal(7, data:byte(1))
      assert.equal(#string.dump(f), ffi.cast("const uint32_t *",
                                             data:sub(2, 5))[0])
    end)

    it("is deterministic", function()
      local cfg = {a = {1, 2}, b = "x", c = {d = {e = true}}}
      local floor, fmt = math.floor, string.format
      local function f() return cfg, floor, fmt end
      local _, one = ship.encode(f, "map")
      local _, two = ship.encode(f, "map")
      assert.equal(one, two)
    end)

    it("returns a \"module.function\" string as a name", function()
      assert.same({"string.upper", nil, "string.upper"},
                  {ship.encode("string.upper", "map")})
    end)

    it("refuses a name with an embedded \\0", function()
      assert.same({nil, "map: 'a.b' is not a \"module.function\" name",
                   "EINVAL"}, {ship.encode("a.b\0c", "map")})
    end)

    it("names a C function root by its least (module, field) pair", function()
      local at, data = ship.encode(math.floor, "map")
      assert.equal("math.floor", at)
      -- FIELD varint(4) "math" varint(5) "floor"
      assert.equal("\9\4math\5floor", data)
      -- Two more names: "aa.v" is the least in byte order.
      local u = newproxy()
      package.loaded.zz_ship_spec = {u = u}
      package.loaded.aa_ship_spec = {w = u, v = u}
      local function f() return u end
      local _, bytes = ship.encode(f, "map")
      package.loaded.zz_ship_spec, package.loaded.aa_ship_spec = nil, nil
      assert.matches("\9\12aa_ship_spec\1v$", bytes)
    end)

    it("refuses values that are neither a function nor a string", function()
      assert.same({nil, "map: expected a function or a \"module.function\" "
                        .. "name, got a number", "EINVAL"},
                  {ship.encode(42, "map")})
      assert.same({nil, "reader: expected a function or a \"module.function\" "
                        .. "name, got a cdata", "EINVAL"},
                  {ship.encode(ffi.new("int"), "reader")})
    end)

    it("names an unshippable upvalue, its type and the line", function()
      local u = newproxy()
      local function f() return u end
      assert.same({nil, "map: cannot ship upvalue 'u' (a userdata) of the "
                        .. "function defined at " .. where(f), "ELUA"},
                  {ship.encode(f, "map")})
      local cfg = {f = coroutine.create(function() end)}
      local function g() return cfg end
      assert.same({nil, "filter: cannot ship upvalue 'cfg.f' (a thread) of "
                        .. "the function defined at " .. where(g), "ELUA"},
                  {ship.encode(g, "filter")})
      local function h() return tostring(cfg.f) end
      assert.equal("map: cannot ship upvalue 'cfg.f' (a thread) of the "
                   .. "function defined at " .. where(h),
                   select(2, ship.encode(h, "map")))
    end)

    it("refuses a C function no loaded module exports", function()
      local cf = coroutine.wrap(function() end) -- a fresh C closure
      assert.same({nil, "map: cannot ship a C function that is not a field "
                        .. "of a loaded module", "ELUA"},
                  {ship.encode(cf, "map")})
    end)

    it("refuses nesting deeper than 200 tables/functions", function()
      local t = {}
      local cur = t
      for _ = 1, 250 do cur.n = {} cur = cur.n end
      local function f() return t end
      local _, msg = ship.encode(f, "map")
      assert.matches("^map: cannot ship upvalue 't%.n%.n%.n", msg)
      assert.matches("...' of the function defined at " .. where(f)
                     .. ": nested more than 200 tables/functions deep", msg,
                     1, true)
    end)
  end)

  describe("a worker", function()
    it("rebuilds shared and cyclic tables, joined cells, modules and fields",
       function()
         local shared = {n = 5}
         local cyc = {shared = shared}
         cyc.self = cyc
         cyc.list = {shared, shared}
         local obj = setmetatable({}, {__index = shared})
         local count = 0
         local function bump() count = count + 1 return count end
         local function peek() return count end
         local rng = require "sluice.rng"
         local floor, fmt = math.floor, string.format
         local p = sluice.range(3):map(function(s)
           local ok = rawequal(cyc.self, cyc) and rawequal(cyc.list[1], shared)
             and rawequal(cyc.list[2], cyc.shared) and obj.n == 5
             and rawequal(rng, require "sluice.rng")
             and rawequal(floor, math.floor) and rawequal(fmt, string.format)
           bump()
           -- bump and peek share one cell: peek sees bump's count.
           s.ok = ok and peek() == count and 1 or 0
           s.count = peek()
           return s
         end)
         local counts = {}
         for s in p:iter() do
           assert.equal(1, s.ok)
           counts[#counts + 1] = s.count
         end
         assert.same({1, 2, 3}, counts)
         assert.equal(0, count) -- the caller's cell is not the worker's
       end)

    it("sees the declaring state's package.path", function()
      local p = sluice.range(1):map(function(s)
        s.path = package.path
        return s
      end)
      for s in p:iter() do
        assert.equal(package.path, s.path)
      end
    end)
  end)
end)

describe("the FFI calls of the facade", function()
  describe("sl__shipped_new()", function()
    it("refuses a malformed name", function()
      local out = ffi.new("sl__shipped *[1]")
      local rc = C.sl__shipped_new("map", nil, nil, 0, "x.", out)
      assert.equal("SL_EINVAL", ffi.string(C.sl_err_name(rc)))
      assert.equal("map: 'x.' is not a \"module.function\" name", last_error())
      assert.is_true(out[0] == nil)
    end)
  end)

  describe("sl__lua_stage()", function()
    it("runs a map and a filter over a reader", function()
      local opts = ffi.new("sl__lua_stage_opts", {threads = 2, ordered = 1})
      local out = ffi.new("sl_reader *[1]")
      assert.equal(SL_OK, C.sl__lua_stage(range(10), C.SL__LUA_MAP,
                                          shipped_of(function(s) return s end),
                                          env_here(), opts, nil, out))
      assert.equal(10, drain(out[0]))
      assert.equal(SL_OK, C.sl__lua_stage(range(10), C.SL__LUA_FILTER,
                                          shipped_of(function(s)
                                            return s.i % 2 == 0
                                          end, "filter"),
                                          env_here(), opts, nil, out))
      assert.equal(5, drain(out[0]))
    end)

    it("takes its upstream when it fails, with the stage's message", function()
      local opts = ffi.new("sl__lua_stage_opts", {threads = 100000, ordered = 1})
      local out = ffi.new("sl_reader *[1]")
      -- The upstream is not destroyed here: the failed call took it (ASan
      -- builds see a leak or a double free otherwise).
      local rc = C.sl__lua_stage(range(1), C.SL__LUA_MAP,
                                 shipped_of(function(s) return s end),
                                 env_here(), opts, nil, out)
      assert.is_true(rc < 0)
      assert.matches("threads = 100000 is more than the limit of",
                     last_error(), 1, true)
    end)

    it("leaves the pipeline consumed when :map() fails in C", function()
      local p = sluice.range(3)
      local ok, err = pcall(p.map, p, function(s) return s end,
                            {threads = 2^40})
      assert.is_false(ok)
      assert.matches("is more than the limit of", err, 1, true)
      assert.has_error(function() p:next() end)
      collectgarbage()
    end)

    it("leaves the pipeline usable when shipping fails", function()
      local p = sluice.range(2)
      local co = coroutine.create(function() end)
      assert.has_error(function()
        p:map(function() return co end)
      end)
      assert.same({0, 1}, H.collect(p))
    end)
  end)

  describe("sl__lua_reader()", function()
    it("runs a Lua reader creator in a worker state", function()
      local out = ffi.new("sl_reader *[1]")
      assert.equal(SL_OK, C.sl__lua_reader(shipped_of(function()
        local i = 0
        return function()
          i = i + 1
          if i <= 3 then return {x = i} end
        end
      end, "reader"), env_here(), 4, nil, out))
      assert.equal(3, drain(out[0]))
    end)
  end)
end)
