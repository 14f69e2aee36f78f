-- sluice.tensor: FFI views of tensors, and owned tensors made from Lua.
--
-- A view is a small Lua table over an sl_tensor (include/sluice.h):
--
--   _t  the sl_tensor: a pointer into a sample's field array (a view of a
--       sample field), or an sl_tensor struct of our own (an owned tensor)
--   _o  what keeps the data alive: the sample cdata for a field view (the
--       sample owns the tensor and its buffers); for an owned tensor the
--       release block holding its buffer's reference (buffers up to
--       BUF_SMALL bytes, see sample.lua) or the buffer cdata (ffi.gc'd
--       with sl_buffer_release)
--   _l  the LoD buffer of an owned tensor that has offsets, else false
--   _w  true while the tensor may be written through v[i] = x: owned
--       tensors, until they are assigned to a sample
--   _f  true once an owned tensor was assigned to a sample (frozen)
--
-- Every internal key is present from construction (false rather than nil),
-- so reading or updating one never reaches the metamethods.
--
-- Properties are computed on first use; `data` is cached in the table (a
-- plain field afterwards: the fast path for per-element loops).  Numeric
-- keys are never stored, so v[i] always reaches __index/__newindex, which
-- check bounds and convert values.
local ffi = require "ffi"
local bit = require "bit"
local C = require "sluice.cdef"

local M = {}

local floor, huge, frexp = math.floor, math.huge, math.frexp
local band, rshift = bit.band, bit.rshift
local ffi_cast, ffi_string = ffi.cast, ffi.string
local type, error, tostring, tonumber = type, error, tostring, tonumber
local rawset, setmetatable, getmetatable = rawset, setmetatable, getmetatable

-- --- dtypes -------------------------------------------------------------------
-- Indexed by the sl_dtype value; names and sizes come from the library.

local PTR_CTYPE = {
  bool = "bool *", u8 = "uint8_t *", i8 = "int8_t *", u16 = "uint16_t *",
  i16 = "int16_t *", u32 = "uint32_t *", i32 = "int32_t *",
  u64 = "uint64_t *", i64 = "int64_t *", f16 = "uint16_t *",
  bf16 = "uint16_t *", f32 = "float *", f64 = "double *", bytes = "uint8_t *",
}

local DT_NAME, DT_ID, DT_SIZE, DT_PTR = {}, {}, {}, {}
for id = 1, 63 do
  local name = ffi_string(C.sl_dtype_name(id))
  if name == "invalid" then break end
  DT_NAME[id] = name
  DT_ID[name] = id
  DT_SIZE[id] = tonumber(C.sl_dtype_size(id))
  DT_PTR[id] = ffi.typeof(PTR_CTYPE[name])
end
M.DT_NAME, M.DT_ID, M.DT_SIZE, M.DT_PTR = DT_NAME, DT_ID, DT_SIZE, DT_PTR

local BOOL, U64, I64 = DT_ID.bool, DT_ID.u64, DT_ID.i64
local F16, BF16, F32, F64 = DT_ID.f16, DT_ID.bf16, DT_ID.f32, DT_ID.f64
local BYTES = DT_ID.bytes

-- Integer ranges, for the checked conversions below.
local INT_RANGE = {
  u8 = {0, 255}, i8 = {-128, 127}, u16 = {0, 65535}, i16 = {-32768, 32767},
  u32 = {0, 4294967295}, i32 = {-2147483648, 2147483647},
  u64 = {0, 2^64 - 1}, i64 = {-2^63, 2^63 - 1}, bytes = {0, 255},
}

-- --- f16 and bf16 ----------------------------------------------------------------

local function round_even(y)
  local f = floor(y)
  local d = y - f
  if d > 0.5 or (d == 0.5 and f % 2 == 1) then f = f + 1 end
  return f
end

local function half_to_number(h)
  local e = band(rshift(h, 10), 0x1f)
  local m = band(h, 0x3ff)
  local v
  if e == 0 then
    v = m * 2^-24
  elseif e == 31 then
    v = m == 0 and huge or 0 / 0
  else
    v = (1 + m / 1024) * 2^(e - 15)
  end
  if h >= 0x8000 then v = -v end
  return v
end

local function number_to_half(x)
  if x ~= x then return 0x7e00 end
  local sign = 0
  if x < 0 or (x == 0 and 1 / x < 0) then sign, x = 0x8000, -x end
  if x == huge then return sign + 0x7c00 end
  local m, e = frexp(x) -- x = m * 2^e, 0.5 <= m < 1
  local E = e - 1
  if E < -14 then -- subnormal (rounding may carry into the smallest normal)
    return sign + round_even(x * 2^24)
  end
  local q = round_even((2 * m - 1) * 1024)
  if q == 1024 then q, E = 0, E + 1 end
  if E > 15 then return sign + 0x7c00 end
  return sign + (E + 15) * 1024 + q
end

local U32F = ffi.new("union { float f; uint32_t u; }")

local function bf16_to_number(h)
  U32F.u = h * 65536
  return tonumber(U32F.f)
end

local function number_to_bf16(x)
  if x ~= x then return 0x7fc0 end
  U32F.f = x
  local u = tonumber(U32F.u)
  local r, low = floor(u / 65536), u % 65536
  if low > 0x8000 or (low == 0x8000 and r % 2 == 1) then r = r + 1 end
  return r
end

M.half_to_number, M.number_to_half = half_to_number, number_to_half
M.bf16_to_number, M.number_to_bf16 = bf16_to_number, number_to_bf16

-- --- element access ----------------------------------------------------------------
-- READ[dt](ptr, i) and WRITE[dt](ptr, i, v) on a pointer of type DT_PTR[dt];
-- WRITE expects a value already checked by M.convert.

local function read_plain(p, i) return p[i] end
local function read_64(p, i) return tonumber(p[i]) end
local function write_plain(p, i, v) p[i] = v end

local READ, WRITE = {}, {}
for id = 1, #DT_NAME do
  READ[id], WRITE[id] = read_plain, write_plain
end
READ[I64], READ[U64] = read_64, read_64
READ[F16] = function(p, i) return half_to_number(p[i]) end
READ[BF16] = function(p, i) return bf16_to_number(p[i]) end
WRITE[F16] = function(p, i, v) p[i] = number_to_half(v) end
WRITE[BF16] = function(p, i, v) p[i] = number_to_bf16(v) end
M.READ, M.WRITE = READ, WRITE

-- Checks that Lua value v can be stored in dtype dt.  Returns the value to
-- store, or nil and the reason ("1.5 is not an integer (dtype i64)").
function M.convert(dt, v)
  local tv = type(v)
  if dt == BOOL then
    if tv == "boolean" then return v end
    if tv == "number" then return v ~= 0 end
    return nil, "a " .. tv .. " cannot be stored as bool"
  end
  if tv ~= "number" then
    return nil, "a " .. tv .. " cannot be stored as " .. DT_NAME[dt]
  end
  if dt == F64 or dt == F32 or dt == F16 or dt == BF16 then return v end
  local range = INT_RANGE[DT_NAME[dt]]
  if v ~= floor(v) then
    return nil, tostring(v) .. " is not an integer (dtype " .. DT_NAME[dt]
      .. ")"
  end
  if v < range[1] or v > range[2] then
    return nil, tostring(v) .. " is out of range for " .. DT_NAME[dt]
  end
  return v
end

-- True when v is an integral number that fits an i64.
function M.is_integral(v)
  return v == floor(v) and v >= -2^63 and v < 2^63
end

-- --- views -------------------------------------------------------------------------

local View = {}
M.View = View

local function is_view(x)
  return getmetatable(x) == View
end
M.is = is_view

local function numel(t)
  local n = 1
  for d = 0, t.rank - 1 do n = n * tonumber(t.shape[d]) end
  return n
end
M.numel = numel

local function shape_of(t)
  local shape = {}
  for d = 0, t.rank - 1 do shape[d + 1] = tonumber(t.shape[d]) end
  return shape
end
M.shape_of = shape_of

local function typed_data(v)
  local t = v._t
  local p = ffi_cast(DT_PTR[tonumber(t.dtype)], t.data)
  rawset(v, "data", p)
  return p
end

local DESCRIBE_BUF = ffi.new("char[160]")
local function describe(t)
  return ffi_string(C.sl_tensor_describe(t, DESCRIBE_BUF, 160))
end
M.describe = describe

local PROPS = {}
PROPS.data = typed_data
function PROPS.shape(v) return shape_of(v._t) end
function PROPS.dtype(v) return DT_NAME[tonumber(v._t.dtype)] end
function PROPS.rank(v) return tonumber(v._t.rank) end
function PROPS.nbytes(v) return tonumber(v._t.nbytes) end
function PROPS.lod(v)
  local t = v._t
  if t.lod == nil then return nil end
  local lod = {}
  for k = 0, tonumber(t.lod_len) - 1 do lod[k + 1] = tonumber(t.lod[k]) end
  return lod
end

local METHODS = {}

function METHODS.numel(v)
  if not is_view(v) then error("sluice: numel() needs a tensor (use v:numel())", 2) end
  return numel(v._t)
end

-- Nested Lua tables by shape.  bytes: a string per row (rank 1: one string;
-- with LoD: one string per sequence; rank 2: one string per row).
local function totable(v)
  local t = v._t
  local dt = tonumber(t.dtype)
  local p = v.data
  if dt == BYTES then
    if t.lod ~= nil then
      local out = {}
      for k = 0, tonumber(t.lod_len) - 2 do
        local a, b = tonumber(t.lod[k]), tonumber(t.lod[k + 1])
        out[k + 1] = ffi_string(p + a, b - a)
      end
      return out
    elseif t.rank == 1 then
      return ffi_string(p, t.nbytes)
    elseif t.rank == 2 then
      local out, w = {}, tonumber(t.shape[1])
      for r = 0, tonumber(t.shape[0]) - 1 do
        out[r + 1] = ffi_string(p + r * w, w)
      end
      return out
    end
  end
  local rd = READ[dt]
  local rank = tonumber(t.rank)
  if rank == 0 then return rd(p, 0) end
  local shape = shape_of(t)
  local off = 0
  local function level(d)
    local out = {}
    if d == rank then
      for k = 1, shape[d] do out[k] = rd(p, off); off = off + 1 end
    else
      for k = 1, shape[d] do out[k] = level(d + 1) end
    end
    return out
  end
  return level(1)
end

function METHODS.totable(v)
  if not is_view(v) then error("sluice: totable() needs a tensor (use v:totable())", 2) end
  return totable(v)
end
M.totable = totable

-- Release blocks for small buffers (sluice.worker installs the maker): a
-- map's per-sample output tensor would otherwise bring a finalizer per
-- sample, run in the interpreter.  The view keeps the block alive (_o).
local new_buffer_block, BUF_BLOCK = nil, 16
local BUF_SMALL = 16384
local bblk, bbk = false, 16

function M.set_buffer_blocks(maker, n)
  new_buffer_block, BUF_BLOCK, bbk = maker, n, n
end

-- Rows of a fused batch (src/stages/rows.h, "Grants"; sluice.worker turns
-- them on).  Inside a fused map's call, a new zero-filled tensor may get,
-- as its storage, the row of the batch being built that its field will
-- fill: the output is then written in place, with no buffer of its own and
-- no copy.  Such a tensor is valid during that call only: revoke() (the
-- worker, once the call returned) turns every one granted into a revoked
-- tensor, whose use is an error naming the cause, so none can write into a
-- batch after its row was handed on.
local grants_on = false
local row_grant = C.sl__lua_row_grant
local GRANT_BUF = ffi.new("sl_buffer *[1]")
local granted, ngranted = {}, 0
local Revoked = {}
local function revoked_use()
  error("sluice: this tensor was made inside a map fused with the batch "
        .. "after it (docs/LUA.md, p:batch) and was the row of that batch: "
        .. "it is valid only during the call that made it (clone() it to "
        .. "keep a copy)", 3)
end
Revoked.__index = revoked_use
Revoked.__newindex = revoked_use
Revoked.__tostring = function() return "sluice.tensor(revoked)" end

function M.enable_grants() grants_on = true end

function M.revoke()
  for i = 1, ngranted do
    local v = granted[i]
    granted[i] = nil
    rawset(v, "data", nil)
    v._t, v._o = nil, nil
    setmetatable(v, Revoked)
  end
  ngranted = 0
end

function M.granted() return ngranted end

-- A new owned tensor struct over a zero-filled (or copied) buffer.
-- shape[d + base] is dimension d: a Lua array (base 1) or a C array (base
-- 0).  No closure here: LuaJIT cannot compile closure creation, and a
-- decorator making tensors per sample should stay compiled.
local function new_owned(dt, rank, shape, base, nbytes, zero)
  if zero and grants_on and nbytes > 0 then
    local p = row_grant(dt, nbytes, GRANT_BUF)
    if p ~= nil then
      local t = ffi.new("sl_tensor")
      t.dtype = dt
      t.rank = rank
      for d = 0, rank - 1 do t.shape[d] = shape[d + base] end
      t.data = p
      t.nbytes = nbytes
      t.buf = GRANT_BUF[0] -- borrowed: the grant holds the batch for the call
      local v = setmetatable({_t = t, _o = false, _l = false, _w = true,
                              _f = false}, View)
      ngranted = ngranted + 1
      granted[ngranted] = v
      return v
    end
  end
  -- Pooled (sl__lua_buffer_new): a map's per-sample tensors are released
  -- by the pipeline on another thread.
  local buf = C.sl__lua_buffer_new(nbytes, zero and 1 or 0)
  if buf == nil then
    error(ffi_string(C.sl_last_error()), 3)
  end
  local owner
  if new_buffer_block and nbytes <= BUF_SMALL then
    local b, k = bblk, bbk
    if k >= BUF_BLOCK then
      b, k = new_buffer_block(), 0
      bblk = b
    end
    b[k] = buf
    bbk = k + 1
    owner = b
  else
    owner = ffi.gc(buf, C.sl_buffer_release)
  end
  local t = ffi.new("sl_tensor")
  t.dtype = dt
  t.rank = rank
  for d = 0, rank - 1 do t.shape[d] = shape[d + base] end
  t.data = C.sl_buffer_data(buf)
  t.nbytes = nbytes
  t.buf = buf -- borrowed from what the view keeps in _o (its block or it)
  return setmetatable({_t = t, _o = owner, _l = false, _w = true, _f = false},
                      View)
end

function METHODS.clone(v)
  if not is_view(v) then error("sluice: clone() needs a tensor (use v:clone())", 2) end
  local t = v._t
  local n = tonumber(t.nbytes)
  local c = new_owned(tonumber(t.dtype), tonumber(t.rank), t.shape, 0, n,
                      false)
  if n > 0 then ffi.copy(c._t.data, t.data, n) end
  if t.lod ~= nil then
    local len = tonumber(t.lod_len)
    local lbuf = C.sl_buffer_new(len * 8)
    if lbuf == nil then error(ffi_string(C.sl_last_error()), 2) end
    lbuf = ffi.gc(lbuf, C.sl_buffer_release)
    ffi.copy(C.sl_buffer_data(lbuf), t.lod, len * 8)
    local ct = c._t
    ct.lod = ffi_cast("const int64_t *", C.sl_buffer_data(lbuf))
    ct.lod_len = len
    ct.lod_buf = lbuf
    c._l = lbuf -- keeps the offsets alive
  end
  return c
end

local function index_error(i, n)
  error(("sluice: tensor index %s out of range [0, %d)"):format(tostring(i), n), 3)
end

View.__index = function(v, k)
  if type(k) == "number" then
    local t = v._t
    local n = numel(t)
    if k < 0 or k >= n or k ~= floor(k) then index_error(k, n) end
    return READ[tonumber(t.dtype)](v.data, k)
  end
  local m = METHODS[k]
  if m then return m end
  local prop = PROPS[k]
  if prop then return prop(v) end
  error(("sluice: a tensor has no field '%s' (fields: data, dtype, lod, "
         .. "nbytes, rank, shape; methods: clone, numel, totable)")
        :format(tostring(k)), 2)
end

View.__newindex = function(v, k, x)
  if type(k) ~= "number" then
    error(("sluice: cannot set '%s' on a tensor"):format(tostring(k)), 2)
  end
  if not v._w then
    if v._f then
      error("sluice: this tensor was assigned to a sample and is now "
            .. "read-only (clone() it to change it)", 2)
    end
    error("sluice: this tensor is a read-only view of a sample (clone() it, "
          .. "or make one with sluice.tensor)", 2)
  end
  local t = v._t
  local n = numel(t)
  if k < 0 or k >= n or k ~= floor(k) then index_error(k, n) end
  local dt = tonumber(t.dtype)
  local val, why = M.convert(dt, x)
  if why then error("sluice: tensor element " .. k .. ": " .. why, 2) end
  WRITE[dt](v.data, k, val)
end

View.__tostring = function(v)
  return "sluice.tensor(" .. describe(v._t) .. ")"
end

-- A read-only view of tensor t (an sl_tensor pointer) kept alive by owner.
function M.view(t, owner)
  return setmetatable({_t = t, _o = owner, _l = false, _w = false, _f = false},
                      View)
end

-- Marks an owned tensor read-only: it now backs a sample's field.
function M.freeze(v)
  if v._w then v._w, v._f = false, true end
end

-- sluice.tensor(dtype, shape): a new zero-filled tensor the caller owns.
function M.new(dtype, shape)
  local dt = type(dtype) == "string" and DT_ID[dtype]
  if not dt then
    error(("sluice: sluice.tensor(): unknown dtype '%s'"):format(tostring(dtype)), 2)
  end
  if type(shape) == "number" then shape = {shape} end
  if type(shape) ~= "table" then
    error(("sluice: sluice.tensor(): shape must be an array of sizes (got a %s)")
          :format(type(shape)), 2)
  end
  local rank = #shape
  if rank > 8 then
    error(("sluice: sluice.tensor(): rank %d is more than 8"):format(rank), 2)
  end
  local n = 1
  for d = 1, rank do
    local s = shape[d]
    if type(s) ~= "number" or s < 0 or s ~= floor(s) then
      error(("sluice: sluice.tensor(): shape[%d] must be an integer >= 0 (got %s)")
            :format(d, tostring(s)), 2)
    end
    n = n * s
  end
  local nbytes = n * DT_SIZE[dt]
  if nbytes >= 2^53 then
    error("sluice: sluice.tensor(): size overflow", 2)
  end
  local v = new_owned(dt, rank, shape, 1, nbytes, true)
  return v -- not a tail call: new_owned's error level counts this frame
end

return M
