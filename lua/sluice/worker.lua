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
-- their buffers instead of a finalizer each (sample.lua, tensor.lua).
require("sluice.tensor").set_buffer_blocks(sample.new_buffer_block,
                                           sample.BLOCK)

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
  local s = wrap(ptr)
  local r = fn(s)
  if getmetatable(r) ~= Sample then returned_error(r) end
  hand_over(r, slot)
  if r ~= s then drop(s) end
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
  local s = wrap(ptr)
  local r = fn(s, set_ctx(index, epoch))
  if getmetatable(r) ~= Sample then returned_error(r) end
  hand_over(r, slot)
  if r ~= s then drop(s) end
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
-- else false (the plain operation, which passes nothing more).
function M.context(fn, op, seed_hi, seed_lo)
  if type(fn) ~= "function" then return false end
  local info = debug.getinfo(fn, "Su")
  if info.what == "C" or not (info.nparams >= 2 or info.isvararg) then
    return false
  end
  local seed = bit.lshift(ffi.new("uint64_t", seed_hi), 32) + seed_lo
  ctx_seed = seed_hi < 2^21 and seed_hi * 2^32 + seed_lo or seed
  ctx_rng = rng_mod.new(seed, 0, 0)
  ctx = {seed = ctx_seed, epoch = 0, index = 0, rng = ctx_rng}
  return M[op .. "_ctx"]
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
