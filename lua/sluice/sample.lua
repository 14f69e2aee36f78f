-- sluice.sample: the Lua sample object, schema conversions, and samples
-- built from Lua tables.
--
-- A sample object is a Lua table with four array slots (never string keys,
-- so every field name reaches __index / __newindex):
--
--   [1]  the sl_sample* cdata, or false once released.  The object owns one
--        reference, held in one of two ways:
--          - [4] is false: [1] is ffi.gc'd with sl_sample_release;
--          - [4] is a release block: [1] is a plain pointer also stored in
--            that block, whose one finalizer releases every pointer still in
--            it (see "release blocks" below).
--   [2]  the schema info of that sample's own schema (see info_for)
--   [3]  true once a tensor view of the current sl_sample was handed out:
--        views keep the owner (below) alive and point into its fields, so
--        from then on the object neither changes that sl_sample in place
--        nor releases it eagerly; false otherwise
--   [4]  the release block holding [1]'s reference, or false
--   [5]  true for the objects sluice.worker makes (worker states): their
--        first view moves a small sample's reference into a block (to_block)
--
-- The owner a view keeps alive is [4] when it is a block, else [1].
--
-- Release blocks.  In a consumer loop over small samples the finalizers are
-- a large share of p:next(): each is a separate GC callback into C, run by
-- the interpreter.  So Pipeline:next puts the references of small samples
-- (sl_sample_nbytes <= 1 KiB) into a block of BLOCK pointers with one
-- finalizer, sharing that cost among BLOCK samples, and even that
-- finalizer only queues the block for compiled code to release (see
-- new_block).  The price: such a sample's C memory is freed when every object
-- of its block is unreachable (at most BLOCK - 1 other small samples'
-- worth, under 16 KiB), or at once by sluice.release.  Larger samples,
-- where the finalizer's cost is nothing next to the data's, each get their
-- own finalizer.
--
-- Assignment (s.field = value) is copy-on-write.  The sl_sample is changed
-- in place only when nobody else can see it: no view was handed out and
-- sl_sample_refcount is 1 (the object holds the only reference, which
-- sluice.h allows).  Otherwise a new sl_sample is made that shares every
-- unchanged tensor's buffers, and the object switches to it.  When the new
-- value does not fit the field's schema entry (or a field is added or
-- removed), the sample gets a derived schema; derived schemas are cached by
-- (base schema, change) and deduplicated by signature, so making one is
-- rare.
local ffi = require "ffi"
local C = require "sluice.cdef"
local tensor = require "sluice.tensor"

local M = {}

local ffi_gc, ffi_string, ffi_cast = ffi.gc, ffi.string, ffi.cast
local type, error, pairs, tostring, tonumber = type, error, pairs, tostring, tonumber
local setmetatable, getmetatable, rawget = setmetatable, getmetatable, rawget
local concat, sort = table.concat, table.sort

local DT_NAME, DT_ID, DT_PTR = tensor.DT_NAME, tensor.DT_ID, tensor.DT_PTR
local READ, WRITE, convert = tensor.READ, tensor.WRITE, tensor.convert
local is_view = tensor.is
local BOOL, I64, F64, BYTES = DT_ID.bool, DT_ID.i64, DT_ID.f64, DT_ID.bytes

local sample_release = C.sl_sample_release
local schema_release = C.sl_schema_release

local function c_message(rc)
  local msg = ffi_string(C.sl_last_error())
  if msg == "" then
    msg = "sluice: " .. ffi_string(C.sl_strerror(rc or C.sl_last_error_code()))
  end
  return msg
end
M.c_message = c_message

-- --- schema info -----------------------------------------------------------------
-- Everything the Lua side needs about one sl_schema, computed once: names,
-- the name -> index map, dtypes and shapes, and one getter per field.  An
-- info retains its schema, so the schema's address (the cache key) cannot
-- be reused while the info is cached.

local Sample = {}
M.Sample = Sample

local function scalar_getter(dt)
  local ptr_t, rd = DT_PTR[dt], READ[dt]
  return function(_, p, i, name)
    local t = C.sl_sample_at(p, i)
    if t.nbytes == 0 then
      error(("sluice: field '%s' of this sample is empty"):format(name), 3)
    end
    return rd(ffi_cast(ptr_t, t.data), 0)
  end
end

-- In a worker state (objects made by sluice.worker, [5] true), the first
-- view of a small sample moves its reference into a release block
-- (to_block, below): from then on only the collector can release it, and a
-- finalizer per sample would run in the interpreter and abort the traces
-- being recorded (a map reading s.image per sample).
local to_block

local function view_getter(s, p, i)
  if not s[3] and not s[4] and rawget(s, 5) then to_block(s, p) end
  s[3] = true
  return tensor.view(C.sl_sample_at(p, i), s[4] or p)
end

local function bytes_getter(s, p, i)
  local t = C.sl_sample_at(p, i)
  if t.rank == 1 and t.lod == nil then
    return ffi_string(t.data, t.nbytes)
  end
  if not s[3] and not s[4] and rawget(s, 5) then to_block(s, p) end
  s[3] = true
  return tensor.view(t, s[4] or p)
end

local function build_info(sp)
  sp = ffi_gc(C.sl_schema_retain(ffi_cast("sl_schema *", sp)), schema_release)
  local n = C.sl_schema_nfields(sp)
  local info = {
    ptr = sp, n = n, names = {}, index = {}, dtype = {}, rank = {},
    shape = {}, get = {}, derive = {}, meta = nil,
  }
  for i = 0, n - 1 do
    local name = ffi_string(C.sl_schema_field_name(sp, i))
    local dt = tonumber(C.sl_schema_field_dtype(sp, i))
    local rank = C.sl_schema_field_rank(sp, i)
    local dims = C.sl_schema_field_shape(sp, i)
    local shape = {}
    for d = 0, rank - 1 do shape[d + 1] = tonumber(dims[d]) end
    info.names[i + 1] = name
    info.index[name] = i
    info.dtype[i], info.rank[i], info.shape[i] = dt, rank, shape
    if dt == BYTES then
      info.get[i] = bytes_getter
    elseif rank == 0 then
      info.get[i] = scalar_getter(dt)
    else
      info.get[i] = view_getter
    end
  end
  local nmeta = C.sl_schema_meta_count(sp)
  if nmeta > 0 then
    local k, v = ffi.new("const char *[1]"), ffi.new("const char *[1]")
    info.meta = {}
    for j = 0, nmeta - 1 do
      if C.sl_schema_meta_at(sp, j, k, v) == 0 then
        info.meta[ffi_string(k[0])] = ffi_string(v[0])
      end
    end
  end
  return info
end

-- Infos by schema address.  Bounded: when full it starts over (the infos
-- still used by live samples stay valid; only the cache forgets them).
local infos, ninfos = {}, 0
local INFO_CACHE_MAX = 4096

local function info_for(sp)
  local key = tonumber(ffi_cast("uintptr_t", sp))
  local info = infos[key]
  if info then return info end
  info = build_info(sp)
  if ninfos >= INFO_CACHE_MAX then infos, ninfos = {}, 0 end
  infos[key] = info
  ninfos = ninfos + 1
  return info
end
M.info_for = info_for

-- Wraps p (an sl_sample* whose reference the new object takes).
local function wrap(p, info)
  p = ffi_gc(p, sample_release)
  return setmetatable({p, info or info_for(C.sl_sample_schema(p)), false,
                       false}, Sample)
end
M.wrap = wrap

-- --- release blocks (see the top of the file) ---------------------------------------

local BLOCK = 16
local BLOCK_T = ffi.typeof("sl_sample *[16]")
M.BLOCK = BLOCK
M.SMALL_BYTES = 1024

-- A block's finalizer does not release its references itself: finalizers
-- run in the interpreter, where each FFI call costs some 100 ns.  It queues
-- the block (which the queue resurrects: the memory stays valid), and the
-- queue is flushed by compiled code - the next new_block(), or a
-- pipeline's close().  A per-GC-cycle hook flushes what no compiled flush
-- took since the previous cycle (a program that stopped consuming), and a
-- sentinel flushes at lua_close, after which blocks release at once.
--
-- Reentrancy: a flush may be interrupted by the collector (any allocation,
-- even a trace exit boxing a pointer, may run a GC step), whose finalizers
-- then append to the queue.  So the queue is a table that carries its own
-- length (appending is two stores inside a finalizer, which the collector
-- does not interrupt), and a flush first swaps in a fresh queue (allocated
-- before the swap) and then releases the blocks of the old one, which
-- nobody else sees any more.  The cycle hook does not flush while a flush
-- is under way (`in_flush`): two flushes could take the same queue.
-- Finalizers never raise (an error raised in one is rethrown at some
-- unrelated allocation).
local queue = {n = 0}
local in_flush = false -- a flush is under way (the hook must not start one)
local flushed = false  -- a flush ran since the last GC cycle
local closing = false  -- the state is closing: release at once

-- Blocks of the buffers of tensors made in Lua (tensor.lua's new_owned:
-- a map's per-sample output) work the same way.
local BUF_BLOCK_T = ffi.typeof("sl_buffer *[16]")
local buffer_release = C.sl_buffer_release

local function release_refs(b)
  local release = ffi.istype(BUF_BLOCK_T, b) and buffer_release
                  or sample_release
  for k = 0, BLOCK - 1 do
    local p = b[k]
    if p ~= nil then
      b[k] = nil
      release(p)
    end
  end
end

local function flush()
  in_flush = true
  local fresh = {n = 0} -- allocated first: a GC step here appends to queue
  local q = queue
  queue = fresh
  for j = 1, q.n do
    release_refs(q[j])
  end
  flushed = true
  in_flush = false
end
M.flush = flush

local function block_gc(b)
  if closing then
    release_refs(b)
  else
    local q = queue
    local n = q.n + 1
    q[n] = b
    q.n = n
  end
end

local arm_cycle_hook
local function on_cycle()
  if closing then return end
  if not flushed and not in_flush and queue.n > 0 then flush() end
  flushed = false
  arm_cycle_hook()
end
arm_cycle_hook = function()
  -- An unreachable cdata: its finalizer runs once per GC cycle and re-arms.
  ffi_gc(ffi.new("uint8_t[1]"), function() pcall(on_cycle) end)
end
arm_cycle_hook()

-- Reachable through the module until lua_close runs every finalizer (the
-- program is over: no flush can be under way, except one an error unwound).
M.close_sentinel = ffi_gc(ffi.new("uint8_t[1]"), function()
  closing = true
  pcall(flush)
end)

function M.new_block()
  if queue.n > 0 then flush() end
  return ffi_gc(BLOCK_T(), block_gc)
end

-- Moves object s's reference (p, ffi.gc'd, in no block) into the shared
-- block of late moves when s is small.
local late_blk, late_k = false, BLOCK
local sample_nbytes = C.sl_sample_nbytes
to_block = function(s, p)
  if sample_nbytes(p) > M.SMALL_BYTES then return end
  local b, k = late_blk, late_k
  if k >= BLOCK then
    b, k = M.new_block(), 0
    late_blk = b
  end
  ffi_gc(p, nil)
  b[k] = p
  late_k = k + 1
  s[4] = b
end

-- For tensor.set_buffer_blocks (sluice.worker installs it).
function M.new_buffer_block()
  if queue.n > 0 then flush() end
  return ffi_gc(BUF_BLOCK_T(), block_gc)
end

-- Takes one reference to p out of block b (p may sit in several slots when
-- a reader yields one sample repeatedly; each slot is one reference).
local function unblock(b, p)
  for k = 0, BLOCK - 1 do
    if b[k] == p then
      b[k] = nil
      return
    end
  end
end

local function is_sample(x)
  return getmetatable(x) == Sample
end
M.is = is_sample

-- --- schemas <-> Lua tables ----------------------------------------------------------

-- The Lua description of a schema: an array of {name=, dtype=, shape=}, each
-- entry also under its name, plus `metadata` when the schema has some.
function M.schema_table(sp)
  local info = info_for(sp)
  local out = {}
  for i = 0, info.n - 1 do
    local shape = {}
    for d, v in ipairs(info.shape[i]) do shape[d] = v end
    local e = {name = info.names[i + 1], dtype = DT_NAME[info.dtype[i]],
               shape = shape}
    out[i + 1] = e
    out[e.name] = e
  end
  if info.meta then
    local meta = {}
    for k, v in pairs(info.meta) do meta[k] = v end
    out.metadata = meta
  end
  return out
end

local SHAPE = ffi.new("int64_t[8]")

-- A new frozen-on-attach sl_schema (ffi.gc'd) from a Lua description:
-- an array of {name, dtype, shape} triples or {name=, dtype=, shape=}
-- tables (shape defaults to {}: a scalar), plus an optional `metadata` table
-- of string keys to string (or number) values.  Returns the schema, or nil
-- and a message.
function M.schema_from_spec(spec)
  if type(spec) ~= "table" then
    return nil, ("schema must be an array of {name, dtype, shape} (got a %s)")
      :format(type(spec))
  end
  if #spec == 0 then
    return nil, "schema has no fields"
  end
  local sp = C.sl_schema_new()
  if sp == nil then return nil, c_message() end
  sp = ffi_gc(sp, schema_release)
  for i, f in ipairs(spec) do
    if type(f) ~= "table" then
      return nil, ("schema field %d must be {name, dtype, shape} (got a %s)")
        :format(i, type(f))
    end
    local name = f.name or f[1]
    local dtname = f.dtype or f[2]
    local shape = f.shape or f[3] or {}
    if type(name) ~= "string" then
      return nil, ("schema field %d: the name must be a string (got a %s)")
        :format(i, type(name))
    end
    local dt = DT_ID[dtname]
    if not dt then
      return nil, ("schema field '%s': unknown dtype '%s'")
        :format(name, tostring(dtname))
    end
    if type(shape) ~= "table" or #shape > 8 then
      return nil, ("schema field '%s': shape must be an array of at most 8 "
                   .. "sizes"):format(name)
    end
    for d = 1, #shape do
      local v = shape[d]
      if type(v) ~= "number" or v < -1 or v ~= math.floor(v) then
        return nil, ("schema field '%s': shape[%d] must be an integer >= 0 "
                     .. "or -1 (got %s)"):format(name, d, tostring(v))
      end
      SHAPE[d - 1] = v
    end
    local rc = C.sl_schema_add(sp, name, dt, #shape, SHAPE)
    if rc < 0 then return nil, c_message(rc) end
  end
  if spec.metadata ~= nil then
    if type(spec.metadata) ~= "table" then
      return nil, "schema metadata must be a table of strings"
    end
    local keys = {}
    for k in pairs(spec.metadata) do keys[#keys + 1] = k end
    sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      local v = spec.metadata[k]
      if type(k) ~= "string" or (type(v) ~= "string" and type(v) ~= "number") then
        return nil, ("schema metadata '%s' must map a string to a string")
          :format(tostring(k))
      end
      local rc = C.sl_schema_set_meta(sp, k, tostring(v))
      if rc < 0 then return nil, c_message(rc) end
    end
  end
  return sp
end

-- --- derived schemas ---------------------------------------------------------------

-- Schemas by signature, so equal derived schemas are one sl_schema (and one
-- info).  Bounded like the info cache.
local by_signature, nsignatures = {}, 0

local function entry_sig(name, dt, shape)
  return name .. ":" .. DT_NAME[dt] .. "[" .. concat(shape, ",") .. "]"
end

-- The frozen sl_schema with these entries ({name, dtype id, shape} each)
-- and metadata (a table or nil), made once per signature.  Returns it, or
-- nil and the C message (a bad name, say).
local function schema_for_entries(entries, meta)
  local parts = {}
  for k, e in ipairs(entries) do parts[k] = entry_sig(e[1], e[2], e[3]) end
  local sig = concat(parts, ";")
  if meta then
    local keys = {}
    for key in pairs(meta) do keys[#keys + 1] = key end
    sort(keys)
    for _, key in ipairs(keys) do
      sig = sig .. "|" .. key .. "=" .. meta[key]
    end
  end
  local sp = by_signature[sig]
  if sp then return sp end
  sp = C.sl_schema_new()
  if sp == nil then return nil, c_message() end
  sp = ffi_gc(sp, schema_release)
  for _, e in ipairs(entries) do
    local shape = e[3]
    for d = 1, #shape do SHAPE[d - 1] = shape[d] end
    local rc = C.sl_schema_add(sp, e[1], e[2], #shape, SHAPE)
    if rc < 0 then return nil, c_message(rc) end
  end
  if meta then
    for key, v in pairs(meta) do C.sl_schema_set_meta(sp, key, v) end
  end
  C.sl_schema_freeze(sp)
  if nsignatures >= INFO_CACHE_MAX then by_signature, nsignatures = {}, 0 end
  by_signature[sig] = sp
  nsignatures = nsignatures + 1
  return sp
end

-- The exact shape of tensor t as a Lua array.
local shape_of = tensor.shape_of

-- True when tensor t fits field i of info (dtype, rank, fixed dims).
local function fits(info, i, t)
  if tonumber(t.dtype) ~= info.dtype[i] or t.rank ~= info.rank[i] then
    return false
  end
  local shape = info.shape[i]
  for d = 0, t.rank - 1 do
    local want = shape[d + 1]
    if want ~= -1 and want ~= tonumber(t.shape[d]) then return false end
  end
  return true
end

-- The derived info for "field `name` becomes tensor t" (t nil: removed),
-- and the map from its field indices to the base's (false: the new value).
-- Returns nil and a message when the schema cannot be made.
local function derive(info, name, t)
  local key, dt, tshape
  if t then
    dt, tshape = tonumber(t.dtype), shape_of(t)
    -- Byte strings vary in length by nature: always bytes[-1], as in
    -- inferred schemas, so that a map setting a string field gives
    -- outputs of one schema.
    if dt == BYTES and #tshape == 1 then tshape = {-1} end
    key = entry_sig(name, dt, tshape)
  else
    key = "-" .. name
  end
  local d = info.derive[key]
  if d then return d end
  local entries, from = {}, {}
  local replaced = false
  for i = 0, info.n - 1 do
    local n = info.names[i + 1]
    if n == name then
      replaced = true
      if t then
        entries[#entries + 1] = {n, dt, tshape}
        from[#entries - 1] = false
      end
    else
      entries[#entries + 1] = {n, info.dtype[i], info.shape[i]}
      from[#entries - 1] = i
    end
  end
  if not replaced then
    entries[#entries + 1] = {name, dt, tshape}
    from[#entries - 1] = false
  end
  local sp, why = schema_for_entries(entries, info.meta)
  if not sp then return nil, why end
  d = {info = info_for(sp), from = from}
  info.derive[key] = d
  return d
end

-- derive() behind a one-entry cache per (info, field): a map that sets a
-- field to a tensor of one dtype and shape per sample (u8 image -> f32)
-- finds its derived info without building the signature string.
local function derive_cached(info, name, t)
  local dc = info.dcache
  if not dc then
    dc = {}
    info.dcache = dc
  end
  local c = dc[name]
  local dt, rank = tonumber(t.dtype), t.rank
  if c and c.dt == dt and c.rank == rank then
    local shape, same = c.shape, true
    for d = 0, rank - 1 do
      if shape[d + 1] ~= tonumber(t.shape[d]) then
        same = false
        break
      end
    end
    if same then return c.d end
  end
  local d, why = derive(info, name, t)
  if d then dc[name] = {dt = dt, rank = rank, shape = shape_of(t), d = d} end
  return d, why
end

-- --- assignment -------------------------------------------------------------------

-- Scratch tensor for values made from Lua numbers and strings: filled by
-- sl_tensor_alloc, then moved into a sample (which zeroes it) or cleared.
local T = ffi.new("sl_tensor")

local function released_error(level)
  error("sluice: this sample was released", level + 1)
end

local function alloc_scalar(dt, v, name, level)
  local val, why = convert(dt, v)
  if why then
    error(("sluice: field '%s': %s"):format(name, why), level + 1)
  end
  local rc = C.sl_tensor_alloc(T, dt, 0, nil)
  if rc < 0 then error(c_message(rc), level + 1) end
  WRITE[dt](ffi_cast(DT_PTR[dt], T.data), 0, val)
end

local function alloc_bytes(str)
  local n = #str
  SHAPE[0] = n
  local rc = C.sl_tensor_alloc(T, BYTES, 1, SHAPE)
  if rc < 0 then return rc end
  if n > 0 then ffi.copy(T.data, str, n) end
  return 0
end

-- The tensor to store for Lua value v in field `name` (index i, or nil for
-- a new field).  Returns the tensor and whether it is the scratch T (whose
-- references are to be moved) rather than someone else's (to be shared).
local function value_tensor(info, i, name, v, level)
  local tv = type(v)
  if tv == "number" or tv == "boolean" then
    local dt = i and info.dtype[i]
    if not dt or dt == BYTES then
      if tv == "boolean" then
        dt = BOOL
      else
        dt = tensor.is_integral(v) and I64 or F64
      end
    end
    alloc_scalar(dt, v, name, level + 1)
    return T, true
  elseif tv == "string" then
    local rc = alloc_bytes(v)
    if rc < 0 then error(c_message(rc), level + 1) end
    return T, true
  elseif is_view(v) then
    tensor.freeze(v)
    return v._t, false
  end
  error(("sluice: cannot assign a %s to field '%s' (a number, boolean, "
         .. "string, tensor or nil)"):format(tv, name), level + 1)
end

-- A new sl_sample of info's schema, field j taken from base field from[j]
-- (sharing buffers) or from src for the changed field.
local function rebuild(p, dinfo, from, src, moved)
  local q = C.sl_sample_new(dinfo.ptr)
  if q == nil then return nil end
  q = ffi_gc(q, sample_release)
  for j = 0, dinfo.n - 1 do
    local b = from[j]
    local rc
    if b then
      rc = C.sl_sample_set(q, j, C.sl_sample_at(p, b))
    elseif moved then
      rc = C.sl_sample_set_move(q, j, src)
    else
      rc = C.sl_sample_set(q, j, src)
    end
    if rc < 0 then return nil end
  end
  return q
end

-- Field j of the new sample from field j of the old, but field i changed:
-- one table per (schema, i), kept in the info (rebuild only reads it).
local function identity_map(info, i)
  local maps = info.idmaps
  if not maps then
    maps = {}
    info.idmaps = maps
  end
  local from = maps[i]
  if from then return from end
  from = {}
  for j = 0, info.n - 1 do from[j] = j end
  from[i] = false
  maps[i] = from
  return from
end

-- Drops object s's reference to its current sl_sample now, unless views
-- of it are out (they keep its owner alive; the collector releases it
-- later).
local function drop(s)
  local p = s[1]
  if p then
    s[1] = false
    if not s[3] then
      local b = s[4]
      if b then
        unblock(b, p)
        s[4] = false
      else
        ffi_gc(p, nil)
      end
      sample_release(p)
    end
  end
end

-- Moves object s's reference into a new plain sl_sample* (for C), and
-- retires the object.  Views of it keep their own.
function M.take(s)
  local p = s[1]
  s[1] = false
  if s[3] then
    return C.sl_sample_retain(p)
  end
  local b = s[4]
  if b then
    unblock(b, p)
    s[4] = false
  else
    ffi_gc(p, nil)
  end
  return p
end

local function set_field(s, name, v)
  local p = s[1]
  if not p then released_error(2) end
  if type(name) ~= "string" then
    error(("sluice: sample field names are strings (got a %s)")
          :format(type(name)), 2)
  end
  local info = s[2]
  local i = info.index[name]
  if v == nil then
    if i == nil then return end
    local d, why = derive(info, name, nil)
    if not d then error(why, 2) end
    local q = rebuild(p, d.info, d.from, nil, false)
    if not q then error(c_message(), 2) end
    drop(s)
    s[1], s[2], s[3], s[4] = q, d.info, false, false
    return
  end
  local src, moved = value_tensor(info, i, name, v, 2)
  local q, qinfo
  if i and fits(info, i, src) then
    if not s[3] and C.sl_sample_refcount(p) == 1 then
      local rc
      if moved then
        rc = C.sl_sample_set_move(p, i, src)
      else
        rc = C.sl_sample_set(p, i, src)
      end
      if rc < 0 then
        if moved then C.sl_tensor_clear(T) end
        error(c_message(rc), 2)
      end
      return
    end
    q, qinfo = rebuild(p, info, identity_map(info, i), src, moved), info
  else
    local d, why = derive_cached(info, name, src)
    if not d then
      if moved then C.sl_tensor_clear(T) end
      error(why, 2)
    end
    q, qinfo = rebuild(p, d.info, d.from, src, moved), d.info
  end
  if not q then
    if moved then C.sl_tensor_clear(T) end
    error(c_message(), 2)
  end
  drop(s)
  s[1], s[2], s[3], s[4] = q, qinfo, false, false
end

-- --- the sample object ----------------------------------------------------------------

local function unknown_field(info, name)
  error(("sluice: no field '%s' in this sample (fields: %s)")
        :format(tostring(name), concat(info.names, ", ")), 3)
end

Sample.__index = function(s, name)
  local p = s[1]
  if not p then released_error(2) end
  local info = s[2]
  local i = info.index[name]
  if i == nil then unknown_field(info, name) end
  local v = info.get[i](s, p, i, name)
  return v -- not a tail call: the getters' error level counts this frame
end

Sample.__newindex = set_field

local DESCRIBE_BUF = ffi.new("char[512]")
Sample.__tostring = function(s)
  if not s[1] then return "sluice.sample (released)" end
  return "sluice.sample" .. ffi_string(
    C.sl_schema_describe(s[2].ptr, DESCRIBE_BUF, 512))
end

local function check_sample(s, fname)
  if not is_sample(s) then
    error(("sluice: %s: expected a sample (got a %s)"):format(fname, type(s)), 3)
  end
end

-- sluice.fields(s): the field names in schema order.
function M.fields(s)
  check_sample(s, "sluice.fields()")
  if not s[1] then released_error(2) end
  local out = {}
  for k, n in ipairs(s[2].names) do out[k] = n end
  return out
end

-- sluice.release(s): drop the object's reference now.  Idempotent.
function M.release(s)
  check_sample(s, "sluice.release()")
  drop(s)
end
M.drop = drop

-- sluice.totable(s): field -> number, boolean, string or nested table.
function M.totable(s)
  check_sample(s, "sluice.totable()")
  local p = s[1]
  if not p then released_error(2) end
  local info = s[2]
  local out = {}
  for i = 0, info.n - 1 do
    local name = info.names[i + 1]
    local get = info.get[i]
    local v
    if get == view_getter or get == bytes_getter then
      -- A transient view, copied out at once: it pins nothing.
      local t = C.sl_sample_at(p, i)
      if get == bytes_getter and t.rank == 1 and t.lod == nil then
        v = ffi_string(t.data, t.nbytes)
      else
        v = tensor.totable(tensor.view(t, p))
      end
    else
      v = get(s, p, i, name)
    end
    out[name] = v
  end
  return out
end

-- --- samples from Lua tables ----------------------------------------------------------

local function fill(ptr, wr, dt, tbl, dims, d, rank, off)
  local n = dims[d]
  if #tbl ~= n then
    return nil, ("ragged nested array (%d elements where %d were expected "
                 .. "at depth %d)"):format(#tbl, n, d)
  end
  if d == rank then
    for k = 1, n do
      local val, why = convert(dt, tbl[k])
      if why then return nil, why end
      wr(ptr, off, val)
      off = off + 1
    end
  else
    for k = 1, n do
      local sub = tbl[k]
      if type(sub) ~= "table" then
        return nil, ("expected a nested array of depth %d"):format(rank)
      end
      local why
      off, why = fill(ptr, wr, dt, sub, dims, d + 1, rank, off)
      if not off then return nil, why end
    end
  end
  return off
end

-- Fills the scratch T with value v for field i of info.  Returns true, or
-- nil and a message (T then holds nothing).
local function row_value(info, i, v)
  local dt, rank, shape = info.dtype[i], info.rank[i], info.shape[i]
  local tv = type(v)
  if rank == 0 and (tv == "number" or tv == "boolean") then
    local val, why = convert(dt, v)
    if why then return nil, why end
    local rc = C.sl_tensor_alloc(T, dt, 0, nil)
    if rc < 0 then return nil, c_message(rc) end
    WRITE[dt](ffi_cast(DT_PTR[dt], T.data), 0, val)
    return true
  elseif tv == "string" then
    if rank ~= 1 or (dt ~= BYTES and dt ~= DT_ID.u8 and dt ~= DT_ID.i8) then
      return nil, ("a string cannot fill a %s field of rank %d")
        :format(DT_NAME[dt], rank)
    end
    if shape[1] ~= -1 and shape[1] ~= #v then
      return nil, ("expected %d bytes, got %d"):format(shape[1], #v)
    end
    SHAPE[0] = #v
    local rc = C.sl_tensor_alloc(T, dt, 1, SHAPE)
    if rc < 0 then return nil, c_message(rc) end
    if #v > 0 then ffi.copy(T.data, v, #v) end
    return true
  elseif tv == "table" and not is_view(v) and not is_sample(v) then
    if rank == 0 then
      return nil, ("expected a %s scalar, got a table"):format(DT_NAME[dt])
    end
    local dims, cur = {}, v
    for d = 1, rank do
      if cur == nil then -- an outer dimension is 0: the schema says the rest
        dims[d] = shape[d] ~= -1 and shape[d] or 0
      elseif type(cur) ~= "table" or is_view(cur) then
        return nil, ("expected a nested array of depth %d"):format(rank)
      else
        dims[d] = #cur
        cur = cur[1]
      end
    end
    for d = 1, rank do
      if shape[d] ~= -1 and shape[d] ~= dims[d] then
        return nil, ("expected shape [%s], got [%s]")
          :format(concat(shape, ","), concat(dims, ","))
      end
      SHAPE[d - 1] = dims[d]
    end
    local rc = C.sl_tensor_alloc(T, dt, rank, SHAPE)
    if rc < 0 then return nil, c_message(rc) end
    local ok, why = fill(ffi_cast(DT_PTR[dt], T.data), WRITE[dt], dt, v, dims,
                         1, rank, 0)
    if not ok then
      C.sl_tensor_clear(T)
      return nil, why
    end
    return true
  elseif is_view(v) then
    C.sl_tensor_copy_ref(T, v._t)
    tensor.freeze(v)
    return true
  end
  return nil, ("cannot make a %s%s field from a %s")
    :format(DT_NAME[dt], "[" .. concat(shape, ",") .. "]", tv)
end

-- A new sl_sample (ffi.gc'd) of info's schema from Lua table `row` (or a
-- new reference to a sample object's sl_sample), or nil and a message
-- naming the row (`label`, e.g. "row 3") and the field.
function M.build_row(row, info, label)
  if is_sample(row) then
    local p = row[1]
    if not p then return nil, label .. " is a released sample" end
    return ffi_gc(C.sl_sample_retain(p), sample_release)
  end
  if type(row) ~= "table" or is_view(row) then
    return nil, ("%s is a %s, not a table"):format(label,
      is_view(row) and "tensor" or type(row))
  end
  local q = C.sl_sample_new(info.ptr)
  if q == nil then return nil, c_message() end
  q = ffi_gc(q, sample_release)
  for i = 0, info.n - 1 do
    local name = info.names[i + 1]
    local v = row[name]
    if v == nil then
      return nil, ("%s has no field '%s'"):format(label, name)
    end
    local ok, why = row_value(info, i, v)
    if not ok then
      return nil, ("%s, field '%s': %s"):format(label, name, why)
    end
    local rc = C.sl_sample_set_move(q, i, T)
    if rc < 0 then
      C.sl_tensor_clear(T)
      return nil, ("%s: %s"):format(label, c_message(rc))
    end
  end
  for k in pairs(row) do
    if type(k) ~= "string" or not info.index[k] then
      return nil, ("%s has an unknown field '%s' (fields: %s)")
        :format(label, tostring(k), concat(info.names, ", "))
    end
  end
  return q
end

-- --- schema inference -------------------------------------------------------------------

-- Walks a nested array: returns its leaf kind ("number", "boolean" or nil
-- when empty), whether every number is integral, or nil and a message.
local function scan_leaves(v, depth, rank, acc)
  for k = 1, #v do
    local x = v[k]
    local tx = type(x)
    if depth < rank then
      if tx ~= "table" then
        return nil, ("expected a nested array of depth %d"):format(rank)
      end
      local ok, why = scan_leaves(x, depth + 1, rank, acc)
      if not ok then return nil, why end
    else
      if tx ~= "number" and tx ~= "boolean" then
        return nil, ("arrays hold numbers or booleans, not a %s"):format(tx)
      end
      if acc.kind and acc.kind ~= tx then
        return nil, "an array mixes numbers and booleans"
      end
      acc.kind = tx
      if tx == "number" and not tensor.is_integral(x) then
        acc.integral = false
      end
    end
  end
  return true
end

local function array_rank(v)
  local rank, cur = 0, v
  while type(cur) == "table" and not is_view(cur) do
    rank = rank + 1
    if #cur == 0 then break end
    cur = cur[1]
  end
  return rank
end

-- Infers a schema description from rows (see docs/LUA.md): fields in sorted
-- name order; integral numbers i64, other numbers f64, strings bytes[-1],
-- booleans bool, arrays by the same rule with the first row's shape and -1
-- where rows differ; tensors keep their dtype.  Returns the description, or
-- nil and a message.
function M.infer(rows)
  local first = rows[1]
  if type(first) ~= "table" or is_view(first) then
    return nil, ("row 1 is a %s, not a table"):format(type(first))
  end
  local names = {}
  for k in pairs(first) do
    if type(k) ~= "string" then
      return nil, ("row 1 has a non-string key '%s'"):format(tostring(k))
    end
    names[#names + 1] = k
  end
  if #names == 0 then return nil, "row 1 has no fields" end
  sort(names)
  local spec = {}
  for f, name in ipairs(names) do
    local kind, dt, rank, dims
    local acc = {kind = nil, integral = true}
    for r = 1, #rows do
      local row = rows[r]
      if type(row) ~= "table" then
        return nil, ("row %d is a %s, not a table"):format(r, type(row))
      end
      local v = row[name]
      if v == nil then
        return nil, ("row %d has no field '%s'"):format(r, name)
      end
      local tv = type(v)
      local vkind, vrank, vdims, vdt
      if tv == "number" or tv == "boolean" then
        vkind, vrank, vdims = tv, 0, {}
        if acc.kind and acc.kind ~= tv then
          return nil, ("field '%s' mixes numbers and booleans"):format(name)
        end
        acc.kind = tv
        if tv == "number" and not tensor.is_integral(v) then
          acc.integral = false
        end
      elseif tv == "string" then
        vkind, vrank, vdims = "string", 1, {-1}
      elseif is_view(v) then
        vkind, vdt = "tensor", tonumber(v._t.dtype)
        vrank, vdims = tonumber(v._t.rank), shape_of(v._t)
      elseif tv == "table" then
        vkind, vrank = "array", array_rank(v)
        vdims = {}
        local cur = v
        for d = 1, vrank do
          vdims[d] = #cur
          cur = cur[1]
        end
        local ok, why = scan_leaves(v, 1, vrank, acc)
        if not ok then
          return nil, ("row %d, field '%s': %s"):format(r, name, why)
        end
      else
        return nil, ("row %d, field '%s': cannot store a %s")
          :format(r, name, tv)
      end
      if kind == nil then
        kind, rank, dims, dt = vkind, vrank, vdims, vdt
      else
        if vkind ~= kind or vdt ~= dt then
          return nil, ("row %d, field '%s': a %s where row 1 has a %s")
            :format(r, name, vkind, kind)
        end
        if vrank ~= rank then
          return nil, ("row %d, field '%s': rank %d where row 1 has rank %d")
            :format(r, name, vrank, rank)
        end
        for d = 1, rank do
          if dims[d] ~= vdims[d] then dims[d] = -1 end
        end
      end
    end
    if kind == "string" then
      dt = BYTES
    elseif kind ~= "tensor" then
      if acc.kind == "boolean" then
        dt = BOOL
      elseif acc.kind == "number" and acc.integral then
        dt = I64
      else
        dt = F64
      end
    end
    spec[f] = {name, DT_NAME[dt], dims, kind}
  end
  return spec
end

-- The schema inferred from rows (see M.infer), shared through the
-- signature cache so that rows of one shape give one sl_schema.  Returns
-- the schema, or nil and a message.
-- With `vary`, the leading dimension of every array (a Lua table made a
-- tensor) is -1: a text parser infers from one line what later lines of
-- other lengths must fit.
function M.inferred_schema(rows, vary)
  local spec, why = M.infer(rows)
  if not spec then return nil, why end
  local entries = {}
  for k, e in ipairs(spec) do
    local dims = e[3]
    if vary and e[4] == "array" and #dims > 0 then dims[1] = -1 end
    entries[k] = {e[1], DT_ID[e[2]], dims}
  end
  return schema_for_entries(entries, nil)
end

return M
