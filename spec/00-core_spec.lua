-- 00-core_spec.lua: smoke tests of the C module sluice.core on its own,
-- below the facade: the version, locating libsluice, shipping functions
-- (and the promised message for an upvalue that cannot be shipped),
-- capturing the environment, and building Lua stages from raw reader
-- addresses the way the facade does.
local ffi = require "ffi"
local core = require "sluice.core"

-- Only opaque typedefs and functions: both may be declared again by other
-- modules of the same Lua state (the facade's sluice.cdef) without clashing.
ffi.cdef [[
typedef struct sl_reader sl_reader;
typedef struct sl_sample sl_sample;
typedef struct sl_schema sl_schema;
const char *sl_version(void);
const char *sl_last_error(void);
int sl_reader_range(int64_t n, sl_reader **out);
int sl_reader_next(sl_reader *r, sl_sample **out);
const sl_schema *sl_reader_schema(const sl_reader *r);
void sl_reader_destroy(sl_reader *r);
void sl_sample_release(sl_sample *s);
int sl_schema_nfields(const sl_schema *s);
const char *sl_schema_field_name(const sl_schema *s, int i);
]]

local SL_OK, SL_EOF = 0, -1

local H = dofile "spec/helper.lua"
local where = H.where

-- The library the module uses, through the FFI.
local function lib()
  return ffi.load(core.libpath())
end

-- A range(n) reader as the number the facade passes to core.map.
local function range_addr(n)
  local out = ffi.new("sl_reader *[1]")
  assert(lib().sl_reader_range(n, out) == SL_OK)
  return tonumber(ffi.cast("uintptr_t", out[0]))
end

-- Pulls every sample of the lightuserdata reader `lud`, destroys it, and
-- returns the count and the name of the first schema field.
local function drain(lud)
  local L = lib()
  local r = ffi.cast("sl_reader *", lud)
  local field = ffi.string(L.sl_schema_field_name(L.sl_reader_schema(r), 0))
  local s = ffi.new("sl_sample *[1]")
  local n = 0
  local rc = L.sl_reader_next(r, s)
  while rc == SL_OK do
    n = n + 1
    L.sl_sample_release(s[0])
    rc = L.sl_reader_next(r, s)
  end
  local msg = ffi.string(L.sl_last_error())
  L.sl_reader_destroy(r)
  assert.equal(SL_EOF, rc, msg)
  return n, field
end

describe("sluice.core", function()
  describe("version()", function()
    it("returns the version of the loaded libsluice", function()
      assert.equal("0.1.0", core.version())
      assert.equal("0.1.0", core._VERSION)
    end)
  end)

  describe("libpath()", function()
    it("returns the absolute path of an existing file", function()
      local path = core.libpath()
      assert.equal("/", path:sub(1, 1))
      local f = io.open(path, "rb")
      assert.is_not_nil(f)
      f:close()
    end)

    it("names a library ffi.load can open, of the same version", function()
      assert.equal(core.version(), ffi.string(lib().sl_version()))
    end)
  end)

  describe("ship()", function()
    it("ships a plain function", function()
      local f = core.ship(function(s) return s end, "map")
      assert.equal("userdata", type(f))
      assert.matches("^sluice%.shipped: ", tostring(f))
    end)

    it("ships shippable upvalues", function()
      local n, name, cfg = 3, "x", { scale = 2, tags = { "a", "b" } }
      local function helper(v) return v * cfg.scale end
      local f = core.ship(function(s) return helper(n), name, s end, "map")
      assert.equal("userdata", type(f))
    end)

    it("ships a module.function name", function()
      local f = core.ship("string.upper", "map")
      assert.matches("^sluice%.shipped: ", tostring(f))
    end)

    it("refuses an unshippable upvalue, naming it, its type and the line",
       function()
         -- A userdata no loaded module exports (io.stdout would ship by
         -- name, as the worker's own io.stdout).
         local u = newproxy()
         local function f() return u end
         local ok, err = pcall(core.ship, f, "map")
         assert.is_false(ok)
         assert.equal("map: cannot ship upvalue 'u' (a userdata) of the "
                      .. "function defined at " .. where(f), err)
       end)

    it("names the path of an unshippable value inside a table upvalue",
       function()
         local cfg = { f = coroutine.create(function() end) }
         local function f() return cfg end
         local ok, err = pcall(core.ship, f, "filter")
         assert.is_false(ok)
         assert.equal("filter: cannot ship upvalue 'cfg.f' (a thread) of "
                      .. "the function defined at " .. where(f), err)
       end)

    it("rejects a value that is neither a function nor a string", function()
      assert.has_error(function() core.ship(42, "map") end,
                       "bad argument #1 to 'ship' (function or string "
                       .. "expected, got number)")
    end)

    it("hides its metatable", function()
      local f = core.ship(function() end, "map")
      assert.equal("sluice.shipped", getmetatable(f))
    end)
  end)

  describe("env()", function()
    it("captures the environment as a sluice.env", function()
      local e = core.env()
      assert.equal("userdata", type(e))
      assert.matches("^sluice%.env: ", tostring(e))
    end)
  end)

  describe("map()", function()
    it("runs an identity map over a reader, with 1 and 2 threads", function()
      for _, threads in ipairs({ 1, 2 }) do
        local fn = core.ship(function(s) return s end, "map")
        local r = core.map(range_addr(10), fn, core.env(),
                           { kind = "map", threads = threads }, nil)
        assert.equal("userdata", type(r))
        local n, field = drain(r)
        assert.equal(10, n)
        assert.equal("i", field)
      end
    end)

    it("runs a filter", function()
      local keep = core.ship(function() return true end, "filter")
      local drop = core.ship(function() return false end, "filter")
      local env = core.env()
      assert.equal(5, (drain(core.map(range_addr(5), keep, env,
                                      { kind = "filter" }, nil))))
      assert.equal(0, (drain(core.map(range_addr(5), drop, env,
                                      { kind = "filter", threads = 2,
                                        ordered = false }, nil))))
    end)

    it("rejects bad arguments with argument errors", function()
      local fn, env = core.ship(function(s) return s end, "map"), core.env()
      assert.has_error(function() core.map("x", fn, env, {}, nil) end,
                       "bad argument #1 to 'map' (number expected, got string)")
      -- From here on the reader is taken even though the call fails.
      assert.has_error(function() core.map(range_addr(1), env, env, {}, nil) end,
                       "bad argument #2 to 'map' (sluice.shipped expected, "
                       .. "got userdata)")
      assert.has_error(function()
        core.map(range_addr(1), fn, env, { kind = "reduce" }, nil)
      end, "bad argument #4 to 'map' (opts.kind must be \"map\", \"filter\" or "
            .. "\"parse\")")
      assert.has_error(function()
        core.map(range_addr(1), fn, env, { threads = 0 }, nil)
      end, "bad argument #4 to 'map' (opts.threads must be an integer in "
           .. "[1, 2147483647])")
      -- The upper bound is the stage's (sl__threads_check), not the binding's.
      local ok, err = pcall(core.map, range_addr(1), fn, env,
                            { threads = 100000 }, nil)
      assert.is_false(ok)
      assert.matches("threads = 100000 is more than the limit of", err, 1, true)
      collectgarbage()
    end)
  end)

  describe("reader()", function()
    it("runs a Lua reader creator in a worker state", function()
      local fn = core.ship(function()
        local i = 0
        return function()
          i = i + 1
          if i <= 3 then return { x = i } end
        end
      end, "reader")
      local n, field = drain(core.reader(fn, core.env(), 4, nil))
      assert.equal(3, n)
      assert.equal("x", field)
    end)

    it("rejects a buffer below 1", function()
      local fn = core.ship(function() end, "reader")
      assert.has_error(function() core.reader(fn, core.env(), 0, nil) end,
                       "bad argument #3 to 'reader' (buffer must be >= 1)")
    end)
  end)
end)
