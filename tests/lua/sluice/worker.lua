-- tests/lua/sluice/worker.lua - a test double of `sluice.worker` for the C
-- tests of the Lua stages (tests/test_lua_stage.c).  It implements the
-- per-sample protocol of src/script/lua_host.h with the raw FFI and nothing
-- of the real `sluice` package, so the engine is tested on its own.
--
-- What a decorator sees (a deliberately tiny model):
--   * an input sample is a proxy table: `s.i` reads field "i" (any scalar
--     i64 or f64 field, by name); `s.__ptr` is the sl_sample*;
--   * map returns the proxy itself (identity: the reference is passed on,
--     zero copy) or a table of field -> number, made into a new sample
--     whose schema has the table's fields in sorted order: field "x" (and
--     any name starting with "x") is f64, every other field is i64.  One
--     schema per field set is made per state and reused;
--   * filter returns a truthy value to keep;
--   * a reader's iterator yields such tables (export).
-- The sl_* symbols are taken from ffi.C: the test executable must export
-- them (linked with ENABLE_EXPORTS / -rdynamic).
local ffi = require "ffi"

ffi.cdef [[
typedef struct sl_sample sl_sample;
typedef struct sl_schema sl_schema;
typedef struct sl_buffer sl_buffer;
typedef struct sl_tensor {
  int dtype;
  int32_t rank;
  int64_t shape[8];
  void *data;
  size_t nbytes;
  sl_buffer *buf;
  const int64_t *lod;
  int64_t lod_len;
  sl_buffer *lod_buf;
} sl_tensor;
sl_sample *sl_sample_new(sl_schema *schema);
void sl_sample_release(sl_sample *s);
const sl_schema *sl_sample_schema(const sl_sample *s);
sl_tensor *sl_sample_at(sl_sample *s, int i);
int sl_sample_alloc(sl_sample *s, int i, int rank, const int64_t *shape,
                    void **data);
sl_schema *sl_schema_new(void);
int sl_schema_add(sl_schema *s, const char *name, int dtype, int rank,
                  const int64_t *shape);
void sl_schema_freeze(sl_schema *s);
void sl_schema_release(sl_schema *s);
int sl_schema_nfields(const sl_schema *s);
int sl_schema_find(const sl_schema *s, const char *name);
const char *sl_schema_field_name(const sl_schema *s, int i);
int sl_schema_field_dtype(const sl_schema *s, int i);
]]

local C = ffi.C
local ok, err = pcall(function() return C.sl_sample_new end)
if not ok then
  error("sluice.worker (test double): the sl_* symbols are not exported by "
        .. "the executable (link it with ENABLE_EXPORTS): " .. tostring(err))
end

local I64, F64 = 9, 13
local sample_ptr = ffi.typeof("sl_sample *")
local sample_slot = ffi.typeof("sl_sample **")
local i64p = ffi.typeof("int64_t *")
local f64p = ffi.typeof("double *")
local voidpp = ffi.typeof("void *[1]")

local M = {}

-- Proxies --------------------------------------------------------------------

local proxy_mt = {}
proxy_mt.__index = function(t, k)
  local p = rawget(t, "__ptr")
  local sch = C.sl_sample_schema(p)
  local idx = C.sl_schema_find(sch, k)
  if idx < 0 then return nil end
  local tn = C.sl_sample_at(p, idx)
  if tn.dtype == I64 then return tonumber(ffi.cast(i64p, tn.data)[0]) end
  if tn.dtype == F64 then return tonumber(ffi.cast(f64p, tn.data)[0]) end
  error("test double: field '" .. k .. "' has an unsupported dtype", 2)
end

local function proxy(p)
  return setmetatable({__ptr = p}, proxy_mt)
end

-- Making samples -------------------------------------------------------------

local schemas = {} -- "a,b" -> sl_schema* (one per field set and state)

local function dtype_of(name)
  return name:sub(1, 1) == "x" and F64 or I64
end

local function schema_for(row)
  local names = {}
  for k in pairs(row) do names[#names + 1] = k end
  table.sort(names)
  local key = table.concat(names, ",")
  local s = schemas[key]
  if s then return s end
  s = C.sl_schema_new()
  assert(s ~= nil, "sl_schema_new failed")
  s = ffi.gc(s, C.sl_schema_release) -- released when the state closes
  for _, n in ipairs(names) do
    assert(C.sl_schema_add(s, n, dtype_of(n), 0, nil) >= 0, "schema_add")
  end
  C.sl_schema_freeze(s)
  schemas[key] = s
  return s
end

local function make_sample(row, schema)
  if type(row) ~= "table" then
    error("test double: expected a table of field -> number, got a "
          .. type(row), 3)
  end
  schema = schema or schema_for(row)
  local s = C.sl_sample_new(schema)
  assert(s ~= nil, "sl_sample_new failed")
  local n = C.sl_schema_nfields(schema)
  local data = voidpp()
  for i = 0, n - 1 do
    local name = ffi.string(C.sl_schema_field_name(schema, i))
    local v = row[name]
    if type(v) ~= "number" then
      C.sl_sample_release(s)
      error("test double: field '" .. name .. "' missing or not a number", 3)
    end
    local dt = C.sl_schema_field_dtype(schema, i)
    if C.sl_sample_alloc(s, i, 0, nil, data) < 0 then
      C.sl_sample_release(s)
      error("test double: sl_sample_alloc failed", 3)
    end
    if dt == F64 then
      ffi.cast(f64p, data[0])[0] = v
    else
      ffi.cast(i64p, data[0])[0] = v
    end
  end
  return s
end

-- The protocol ---------------------------------------------------------------

-- worker.map(fn, sample, slot): the sample reference is ours; the result goes
-- to *slot with a reference for C.  On an error the finalizer releases the
-- input when the proxy is collected.
function M.map(fn, s, slot)
  local p = ffi.gc(ffi.cast(sample_ptr, s), C.sl_sample_release)
  local obj = proxy(p)
  local r = fn(obj)
  if r == nil then
    error("map: the function returned nothing", 2)
  end
  local out
  if r == obj then
    out = ffi.gc(p, nil) -- the reference moves to C
  else
    out = make_sample(r, nil)
    C.sl_sample_release(ffi.gc(p, nil))
  end
  ffi.cast(sample_slot, slot)[0] = out
end

-- worker.filter(fn, sample): true to keep; releases the sample reference.
function M.filter(fn, s)
  local p = ffi.gc(ffi.cast(sample_ptr, s), C.sl_sample_release)
  local keep = fn(proxy(p))
  C.sl_sample_release(ffi.gc(p, nil))
  return keep and true or false
end

-- worker.context(fn, op, seed_hi, seed_lo): a function with a second
-- parameter gets ctx = {seed, epoch, index} (the double has no generator):
-- returns map_ctx / filter_ctx, else false.
local ctx
function M.context(fn, op, hi, lo)
  if debug.getinfo(fn, "u").nparams < 2 then return false end
  ctx = {seed = hi * 2^32 + lo}
  return M[op .. "_ctx"]
end

function M.map_ctx(fn, s, slot, index, epoch)
  ctx.index, ctx.epoch = index, epoch
  return M.map(function(x) return fn(x, ctx) end, s, slot)
end

function M.filter_ctx(fn, s, index, epoch)
  ctx.index, ctx.epoch = index, epoch
  return M.filter(function(x) return fn(x, ctx) end, s)
end

-- worker.export(value, slot, schema): a table row -> *slot.
function M.export(v, slot, schema)
  local sch = schema and ffi.cast("sl_schema *", schema) or nil
  ffi.cast(sample_slot, slot)[0] = make_sample(v, sch)
end

return M
