-- sluice.worker: the per-sample protocol between the Lua stages of
-- libsluice (src/script/lua_host.h) and the Lua code they run.  Loaded in
-- every worker state; the stages call these functions under lua_pcall with
-- debug.traceback as the message handler, and prefix any error with
-- "<what> (<source>:<line>): ", so messages raised here need no position
-- (level 0) and name no function.
--
--   worker.map(fn, sample, slot)
--   worker.filter(fn, sample)
--   worker.export(value, slot, schema)
--   worker.parser(fn, line_ptr, line_len, slot, schema)
--   worker.context(fn, seed_hi, seed_lo) -> the ctx variant of map, filter
--       and parser when fn takes a second parameter (ctx), else false
--   worker.map_ctx(fn, sample, slot, index, epoch)
--   worker.filter_ctx(fn, sample, index, epoch)
--   worker.parser_ctx(fn, line_ptr, line_len, slot, schema, index, epoch)
--
-- `sample` is an sl_sample* whose reference is handed to Lua; `slot` an
-- sl_sample** receiving a result with a reference for C; `schema` an
-- sl_schema* or nil.  The stages pass pointers as numbers (the address: a
-- cast from a number is compiled by LuaJIT, one from a light userdata is
-- not and would keep this protocol in the interpreter), or as light
-- userdata where an address is not exact in a double; FFI pointers work
-- too: everything goes through ffi.cast.
--
-- map is the hot path, kept to one table, one cdata and one finalizer per
-- sample: the input is wrapped as a sample object owning its reference;
-- when fn returns that object (the usual case) the reference is moved to C
-- (finalizer removed, no refcount traffic).
local ffi = require "ffi"
local C = require "sluice.cdef"
local sample = require "sluice.sample"

local M = {}

local ffi_gc, ffi_cast = ffi.gc, ffi.cast
local type, error, setmetatable, getmetatable = type, error, setmetatable, getmetatable

local Sample, info_for, drop = sample.Sample, sample.info_for, sample.drop
local take = sample.take
local sample_release, sample_retain = C.sl_sample_release, C.sl_sample_retain
local sample_schema = C.sl_sample_schema
local SAMPLE_PTR = ffi.typeof("sl_sample *")
local SLOT = ffi.typeof("sl_sample **")

-- One-entry schema cache: a stage's inputs nearly always share one schema.
-- (The info retains its schema, so the address cannot be reused while it is
-- cached here.)
local last_sp, last_info

local function wrap(ptr)
  local p = ffi_gc(ffi_cast(SAMPLE_PTR, ptr), sample_release)
  local sp = sample_schema(p)
  local info = last_info
  if sp ~= last_sp then
    info = info_for(sp)
    last_sp, last_info = sp, info
  end
  return setmetatable({p, info, false, false, true}, Sample)
end
M.wrap = wrap

-- Tensors made here (a map's per-sample output) share release blocks of
-- their buffers instead of a finalizer each (sample.lua, tensor.lua), and
-- inside a map fused with the batch after it may be the rows of that batch
-- (tensor.lua, "Rows of a fused batch"): revoked once the call returns.
local tensor_mod = require "sluice.tensor"
tensor_mod.set_buffer_blocks(sample.new_buffer_block, sample.BLOCK)
tensor_mod.enable_grants()
local granted, revoke = tensor_mod.granted, tensor_mod.revoke

local function returned_error(r)
  if r == nil then
    error("map function returned nothing (it must return a sample)", 0)
  end
  error(("map function returned a %s (it must return a sample)")
        :format(type(r)), 0)
end

-- Stores sample object r's sl_sample in *slot with a reference for C, and
-- retires the object (it belongs to the pipeline now).  The object's own
-- reference moves to C (sample.take), unless views of it are out.
local function hand_over(r, slot)
  if not r[1] then
    error("map function returned a released sample", 0)
  end
  ffi_cast(SLOT, slot)[0] = take(r)
end

function M.map(fn, ptr, slot)
  if granted() > 0 then revoke() end -- a call that raised
  local s = wrap(ptr)
  local r = fn(s)
  if getmetatable(r) ~= Sample then returned_error(r) end
  hand_over(r, slot)
  if r ~= s then drop(s) end
  if granted() > 0 then revoke() end
end

function M.filter(fn, ptr)
  local s = wrap(ptr)
  local keep = fn(s)
  drop(s)
  return keep and true or false
end

-- --- ctx: seed, epoch, index and a counter-based generator (sluice.rng) ----
-- A worker state runs one stage, so its one ctx table and generator are
-- reused for every sample (valid during the call only): each call stores
-- the sample's index and epoch, and the generator seeds itself from them
-- on its first draw (docs/LUA.md, "Randomness").
local rng_mod = require "sluice.rng"
local bit = require "bit"
local ctx, ctx_rng, ctx_seed

local function set_ctx(index, epoch)
  local c, r = ctx, ctx_rng
  c.index, c.epoch, c.seed, c.rng = index, epoch, ctx_seed, r
  r._epoch, r._index, r._ready = epoch, index, false
  return c
end

function M.map_ctx(fn, ptr, slot, index, epoch)
  if granted() > 0 then revoke() end
  local s = wrap(ptr)
  local r = fn(s, set_ctx(index, epoch))
  if getmetatable(r) ~= Sample then returned_error(r) end
  hand_over(r, slot)
  if r ~= s then drop(s) end
  if granted() > 0 then revoke() end
end

function M.filter_ctx(fn, ptr, index, epoch)
  local s = wrap(ptr)
  local keep = fn(s, set_ctx(index, epoch))
  drop(s)
  return keep and true or false
end

-- The Lua parser of text files (lua_host.h, SL__LUA_PARSE): fn(line)
-- returns a table of fields, a sample, or nil to skip the line.  `schema`
-- is the stage's once known (every row is built against it, so a row that
-- does not fit is an error at its line); before, the row's own schema is
-- inferred with a variable leading dimension for arrays (later lines may
-- be longer or shorter).  Returns true with a sample in *slot, or false to
-- skip.
local ffi_string = ffi.string
local CHARS = ffi.typeof("const char *")
local SCHEMA_PTR = ffi.typeof("sl_schema *")

local function parsed(row, slot, schema)
  if row == nil then return false end
  if getmetatable(row) == Sample then
    local p = row[1]
    if not p then error("parser returned a released sample", 0) end
    ffi_cast(SLOT, slot)[0] = sample_retain(p)
    return true
  end
  if type(row) ~= "table" then
    error(("parser returned a %s (it must return a table of fields, a "
           .. "sample, or nil to skip the line)"):format(type(row)), 0)
  end
  local sp, why
  if schema ~= nil then
    sp = ffi_cast(SCHEMA_PTR, schema)
  else
    sp, why = sample.inferred_schema({row}, true)
    if not sp then error("parser returned a row without a schema: " .. why, 0) end
  end
  local q
  q, why = sample.build_row(row, info_for(sp), "the returned row")
  if not q then error(why, 0) end
  ffi_cast(SLOT, slot)[0] = ffi_gc(q, nil)
  return true
end

function M.parser(fn, ptr, len, slot, schema)
  return parsed(fn(ffi_string(ffi_cast(CHARS, ptr), len)), slot, schema)
end

function M.parser_ctx(fn, ptr, len, slot, schema, index, epoch)
  return parsed(fn(ffi_string(ffi_cast(CHARS, ptr), len),
                   set_ctx(index, epoch)), slot, schema)
end

-- Whether fn takes ctx: a Lua function declaring a second parameter (or
-- `...`).  If it does, sets this state's seed (two 32-bit halves) and
-- returns the ctx variant of operation `op` ("map", "filter", "parser");
-- else false (the plain operation, which passes nothing more).  A scan's
-- function takes (state, s): ctx is its third parameter.
function M.context(fn, op, seed_hi, seed_lo)
  if type(fn) ~= "function" then return false end
  local info = debug.getinfo(fn, "Su")
  local nparams = op == "scan" and 3 or 2
  if info.what == "C" or not (info.nparams >= nparams or info.isvararg) then
    return false
  end
  local seed = bit.lshift(ffi.new("uint64_t", seed_hi), 32) + seed_lo
  ctx_seed = seed_hi < 2^21 and seed_hi * 2^32 + seed_lo or seed
  ctx_rng = rng_mod.new(seed, 0, 0)
  ctx = {seed = ctx_seed, epoch = 0, index = 0, rng = ctx_rng}
  return M[op .. "_ctx"]
end

-- --- flow stages (src/script/lua_flow.c) -----------------------------------
--   worker.flat_map(fn, sample, slots, cap, schema) -> n
--   worker.flat_map_ctx(fn, sample, slots, cap, schema, index, epoch) -> n
--   worker.flat_map_fill(slots)
--   worker.take_while(fn, sample), worker.take_while_ctx(...): filter's
--   worker.scan(fn, state, sample, slot, schema) -> state
--   worker.scan_ctx(fn, state, sample, slot, schema, index, epoch) -> state
--   worker.scan_init(init) -> a deep copy of init()
-- `slots` is an sl_sample *[cap] the stage zeroed; `schema` the stage's
-- sl_schema* once known, else nil (a table row then gets its own inferred
-- schema, which the stage checks).  Each output gets a reference for C.

-- A new sl_sample* with a reference for C from output `r` (a sample
-- object, which stays usable: it may be returned twice, or be the input;
-- or a table of fields), `label` naming it in messages.
local function output_ptr(r, label, schema, op)
  if getmetatable(r) == Sample then
    local p = r[1]
    if not p then error(label .. " is a released sample", 0) end
    return sample_retain(p)
  end
  if type(r) ~= "table" then
    error(("%s function returned a %s as %s (it must be a sample or a "
           .. "table of fields)"):format(op, type(r), label), 0)
  end
  local sp, why
  if schema ~= nil then
    sp = ffi_cast(SCHEMA_PTR, schema)
  else
    sp, why = sample.inferred_schema({r})
    if not sp then error(label .. ": " .. why, 0) end
  end
  local q
  q, why = sample.build_row(r, info_for(sp), label)
  if not q then error(why, 0) end
  return ffi_gc(q, nil)
end

-- The n outputs of array r into slots[0..n): a slot is written only with
-- a reference for C, so the stage releases what is there after an error.
local function fill_slots(r, n, slots, schema)
  local v = ffi_cast(SLOT, slots)
  for i = 1, n do
    v[i - 1] = output_ptr(r[i], "element " .. i .. " of the returned array",
                          schema, "flat_map")
  end
end

local function is_pipeline(r)
  local s = package.loaded.sluice
  return type(s) == "table" and s.Pipeline ~= nil and
    getmetatable(r) == s.Pipeline
end

-- The number of outputs in fn's result r (an array, or nil for none).
local function flat_count(r)
  if r == nil then return 0 end
  if type(r) ~= "table" or getmetatable(r) == Sample or is_pipeline(r) then
    local what, hint = "a " .. type(r), ""
    if getmetatable(r) == Sample then
      what, hint = "a sample", "; for one sample, return {s}"
    elseif is_pipeline(r) then
      what, hint = "a pipeline", "; a pipeline cannot be returned: it lives "
        .. "in this worker state and cannot be handed over to the stage"
    end
    error(("flat_map function returned %s (it must return an array (a "
           .. "table) of samples or tables of fields, or nil for none%s)")
          :format(what, hint), 0)
  end
  local n = #r
  for k in pairs(r) do
    if type(k) ~= "number" or k < 1 or k > n or k ~= math.floor(k) then
      error(("flat_map function returned a table with the key %s (it must "
             .. "return an array of samples or tables of fields: to return "
             .. "one row, return {row})"):format(
               type(k) == "string" and "'" .. k .. "'" or tostring(k)), 0)
    end
  end
  return n
end

-- What flat_map_fill hands over when fn returned more than `cap` outputs.
local pend_r, pend_s, pend_schema

local function flat_out(r, s, slots, cap, schema)
  local n = flat_count(r)
  if n <= cap then
    fill_slots(r, n, slots, schema)
    drop(s)
  else
    pend_r, pend_s, pend_schema = r, s, schema
  end
  return n
end

function M.flat_map(fn, ptr, slots, cap, schema)
  local s = wrap(ptr)
  return flat_out(fn(s), s, slots, cap, schema)
end

function M.flat_map_ctx(fn, ptr, slots, cap, schema, index, epoch)
  local s = wrap(ptr)
  return flat_out(fn(s, set_ctx(index, epoch)), s, slots, cap, schema)
end

function M.flat_map_fill(slots)
  local r, s, schema = pend_r, pend_s, pend_schema
  pend_r, pend_s, pend_schema = nil, nil, nil
  fill_slots(r, #r, slots, schema)
  drop(s)
end

M.take_while, M.take_while_ctx = M.filter, M.filter_ctx

local function scan_out(state, out, s, slot, schema)
  if out == nil then
    error("scan function returned no output (it must return the new state "
          .. "and a sample or a table of fields)", 0)
  end
  ffi_cast(SLOT, slot)[0] = output_ptr(out, "its output", schema, "scan")
  drop(s)
  return state
end

function M.scan(fn, state, ptr, slot, schema)
  local s = wrap(ptr)
  local st, out = fn(state, s)
  return scan_out(st, out, s, slot, schema)
end

function M.scan_ctx(fn, state, ptr, slot, schema, index, epoch)
  local s = wrap(ptr)
  local st, out = fn(state, s, set_ctx(index, epoch))
  return scan_out(st, out, s, slot, schema)
end

-- A copy of v sharing nothing with it (tables copied, shared and cyclic
-- references kept), so every pass starts from the same state whatever fn
-- did to the last one.
local function deep_copy(v, seen)
  if type(v) ~= "table" then return v end
  local c = seen[v]
  if c then return c end
  c = {}
  seen[v] = c
  for k, x in pairs(v) do c[deep_copy(k, seen)] = deep_copy(x, seen) end
  return setmetatable(c, getmetatable(v))
end

function M.scan_init(init)
  return deep_copy(init(), {})
end

function M.export(value, slot, schema)
  local q, why
  if getmetatable(value) == Sample then
    -- A reader may yield the same object again: give C a new reference
    -- and leave the object usable.
    local p = value[1]
    if not p then error("reader yielded a released sample", 0) end
    ffi_cast(SLOT, slot)[0] = sample_retain(p)
    return
  end
  if type(value) ~= "table" then
    error(("reader yielded a %s (it must yield a sample or a table of "
           .. "fields)"):format(type(value)), 0)
  end
  local sp
  if schema ~= nil then
    sp = ffi_cast("sl_schema *", schema)
  else
    sp, why = sample.inferred_schema({value})
    if not sp then error("reader: " .. why, 0) end
  end
  q, why = sample.build_row(value, info_for(sp), "the yielded row")
  if not q then error("reader: " .. why, 0) end
  ffi_cast(SLOT, slot)[0] = ffi_gc(q, nil)
end

return M
