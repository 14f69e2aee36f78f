-- sluice: declare input pipelines in Lua (docs/LUA.md is the reference).
--
--   local sluice = require "sluice"
--   local p = sluice.open("slr:train.slr")
--     :shuffle(8192, {seed = 42})
--     :map(function(s) s.weight = 1.0 return s end, {threads = 2})
--     :batch(128)
--     :prefetch(4)
--   for b in p:iter() do ... end
--
-- A pipeline is a Lua object owning one sl_reader* (ffi.gc'd with
-- sl_reader_destroy).  Sources, decorators and consumption go straight to
-- libsluice through the FFI, the only bridge from Lua to C; Lua functions
-- (map, filter, reader) are turned into bytes for worker states by the
-- pure-Lua encoder sluice.ship.
--
-- Decorators take their upstream, as in C: the upstream object is marked
-- consumed and any later use of it raises.  Misuse (bad arguments) is checked
-- before anything is taken, so it leaves the upstream usable.
local ffi = require "ffi"
local C = require "sluice.cdef"
local tensor = require "sluice.tensor"
local sample = require "sluice.sample"

local sluice = {}

local ffi_gc, ffi_cast, ffi_string = ffi.gc, ffi.cast, ffi.string
local type, error, select, tostring, tonumber = type, error, select, tostring, tonumber
local setmetatable, getmetatable, pairs = setmetatable, getmetatable, pairs
local floor = math.floor

local c_message = sample.c_message
local Sample, info_for = sample.Sample, sample.info_for
local reader_next, sample_schema = C.sl_reader_next, C.sl_sample_schema
local sample_release, reader_destroy = C.sl_sample_release, C.sl_reader_destroy
local account = C.sl__lua_sample_account
local new_block, BLOCK, SMALL = sample.new_block, sample.BLOCK, sample.SMALL_BYTES

local shipper = require "sluice.ship"
local rng = require "sluice.rng"

-- --- argument checks ------------------------------------------------------------------
-- Options are validated by the C constructors, whose messages reach Lua
-- unchanged (made() raises sl_last_error).  These helpers check only what the
-- FFI would lose (a fraction, a negative or too large count for an unsigned
-- field, a string or nil where a number goes, a name for an enum value) and
-- the misuse a decorator must refuse before it takes its upstream
-- (docs/LUA.md, "Errors").

-- An integer in [min, 2^63) (min nil: -2^63, the range left to C).
local function check_int(v, min, where, what, level)
  if type(v) ~= "number" or v ~= floor(v) or v < (min or -2^63)
     or v >= 2^63 then
    error(("sluice: %s: %s must be an integer%s (got %s)")
          :format(where, what, min and " >= " .. min or "", tostring(v)),
          level + 1)
  end
  return v
end

local function check_bool(v, where, what, default, level)
  if v == nil then return default end
  if type(v) ~= "boolean" then
    error(("sluice: %s: option '%s' must be a boolean (got a %s)")
          :format(where, what, type(v)), level + 1)
  end
  return v
end

-- Option `name` of opts: an integer >= min (check_int), `default` if absent;
-- past `max` (a narrower C field), max: the stage then names the value as
-- too large (or takes it as "no bound") instead of the FFI's conversion
-- wrapping it around (2^32 into a uint32_t field would be 0: the default).
local INT_MAX, U32_MAX = 0x7fffffff, 0xffffffff

local function opt_int(opts, name, min, default, where, level, max)
  local v = opts[name]
  if v == nil then return default end
  v = check_int(v, min, where, "option '" .. name .. "'", level + 1)
  return max and v > max and max or v
end

-- Option 'threads' of a threaded stage: an integer >= min (opt_int), or
-- "auto" (the stage tunes its running workers, docs/LUA.md), given as
-- `auto` (the C field's value: -1 for an int, SL_THREADS_AUTO for a
-- uint32_t).  Anything else names the stage and the value.
local function opt_threads(opts, min, default, where, level, max, auto)
  local v = opts.threads
  if v == "auto" or (v == nil and default == "auto") then return auto end
  if v ~= nil and type(v) ~= "number" then
    error(("sluice: %s: option 'threads' must be a positive integer or "
           .. "\"auto\" (got %s)"):format(where, type(v) == "string"
           and ("\"" .. v .. "\"") or tostring(v)), level + 1)
  end
  local n = opt_int(opts, "threads", min, default, where, level + 1, max)
  return n -- not a tail call: the error levels count this frame
end
local THREADS_AUTO_INT = -1           -- SL__THREADS_AUTO (int fields)
local THREADS_AUTO_U32 = 4294967294   -- SL_THREADS_AUTO (uint32_t fields)

-- A seed: an integer in [0, 2^64) or an integer cdata (nil: 0), as a
-- uint64_t cdata.
local function check_seed(v, where, level)
  local s = rng.seed_u64(v == nil and 0 or v)
  if not s then
    error(("sluice: %s: option 'seed' must be an integer in [0, 2^64) (got "
           .. "%s)"):format(where, tostring(v)), level + 1)
  end
  return s
end

-- An enumerated option: a checker giving the value of one of map's names and
-- raising "<what> must be <text> (got ...)" for anything else.
local function enum(text, map)
  return function(v, where, what, level)
    local x = map[v]
    if x == nil then
      error(("sluice: %s: %s must be %s (got %s)")
            :format(where, what, text, tostring(v)), level + 1)
    end
    return x
  end
end

-- Returns opts (or {}), raising on a non-table or an unknown key.
local function check_opts(opts, where, known, level)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error(("sluice: %s: options must be a table (got a %s)")
          :format(where, type(opts)), level + 1)
  end
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for n in pairs(known) do names[#names + 1] = n end
      table.sort(names)
      error(("sluice: %s: unknown option '%s' (known: %s)")
            :format(where, tostring(k), table.concat(names, ", ")), level + 1)
    end
  end
  return opts
end

-- A size in bytes: a whole number, or a string of one with a unit, powers
-- of 1024 as in the CLI's sizes (B; K, KB or KiB; M, MB, MiB; G, GB, GiB;
-- T, TB, TiB; any case, spaces allowed: "2GiB", "1.5 G", "64 mb").  Returns
-- the bytes, or nil and why.
local SIZE_UNITS = {[""] = 1, b = 1}
for i, u in ipairs({"k", "m", "g", "t"}) do
  SIZE_UNITS[u], SIZE_UNITS[u .. "b"], SIZE_UNITS[u .. "ib"] =
    1024 ^ i, 1024 ^ i, 1024 ^ i
end
local function parse_size(v)
  local n, unit
  if type(v) == "number" then
    n, unit = v, ""
  elseif type(v) == "string" then
    local num, u = v:match("^%s*([%d%.]+)%s*(%a*)%s*$")
    n, unit = tonumber(num), u and u:lower()
  end
  local scale = unit and SIZE_UNITS[unit]
  local exact = n and scale and n * scale
  local bytes = exact and floor(exact + 0.5)
  if not bytes or (scale == 1 and exact ~= bytes) or bytes < 1
     or bytes >= 2 ^ 53 then
    return nil, ("a size must be a whole number of bytes >= 1 or a string "
                 .. "such as \"512MiB\", \"2G\" or \"1.5GiB\" (got %s)")
                :format(type(v) == "string" and ("%q"):format(v) or tostring(v))
  end
  return bytes
end

local function set(...)
  local t = {}
  for i = 1, select("#", ...) do t[select(i, ...)] = true end
  return t
end

-- --- pipelines ----------------------------------------------------------------------------

local Pipeline = {}
Pipeline.__index = Pipeline
sluice.Pipeline = Pipeline

local SAMPLE_OUT = ffi.typeof("sl_sample *[1]")
-- Out-parameter of the reader constructors (filled and read back at once).
local OUT = ffi.new("sl_reader *[1]")
local SHIPPED = ffi.new("sl__shipped *[1]")

-- What the samples pin.  Samples are views into buffers that may be far
-- larger than their fields (a decoded chunk of megabytes behind a record of
-- a few bytes), and the collector sees none of that C memory: a loop whose
-- Lua garbage is a few small tables could hold gigabytes before a cycle.
-- So Pipeline:next adds the size of each buffer its samples view, once per
-- buffer (sl__lua_sample_account remembers the last ones per pipeline), to
-- PINNED, shared by every pipeline of the state; every PIN_STEP bytes the
-- collector takes a step sized so that a full cycle runs about once per
-- max(PIN_CYCLE, 4 x the Lua heap) of C memory seen - C memory then weighs
-- like Lua memory, at a discount that keeps the collector's work small
-- (docs/LUA.md, "Lifetime").
local PINS = ffi.typeof("sl__lua_pins")
local PINNED = ffi.new("double[1]")
local PIN_STEP = 4 * 2^20
local PIN_CYCLE_KB = 32 * 1024
local ceil = math.ceil

local function pin_pressure()
  local kb = PINNED[0] / 1024
  PINNED[0] = 0
  local heap = collectgarbage("count")
  local limit = 4 * heap
  if limit < PIN_CYCLE_KB then limit = PIN_CYCLE_KB end
  collectgarbage("step", ceil(kb * heap / limit))
end

-- The pipeline seed and first epoch (_flow = {seed =, epoch =}, or false):
-- set by open_files, passed from each pipeline to the one a decorator
-- makes of it (`from`), and taken by the stages that draw random numbers
-- when they are not given their own (docs/LUA.md, "Randomness").
local function new_pipeline(r, from)
  r = ffi_gc(r, reader_destroy)
  local pins = PINS()
  pins.total = PINNED
  return setmetatable({_r = r, _out = SAMPLE_OUT(), _dead = false,
                       _blk = false, _bk = BLOCK, _pins = pins,
                       _flow = from and from._flow or false}, Pipeline)
end

-- The result of a C constructor: a new pipeline, or a raise with the C
-- message pointing at the declaring line.  Callers never tail-call it (nor
-- anything else that raises with a level): a tail call drops the frame the
-- level counts.
local function made(rc, level, from)
  if rc < 0 then error(c_message(rc), level + 1) end
  local r = OUT[0]
  OUT[0] = nil
  return new_pipeline(r, from)
end

local function is_pipeline(x)
  return getmetatable(x) == Pipeline
end

local function dead_error(p, level)
  if p._dead == "closed" then
    error("sluice: this pipeline is closed", level + 1)
  end
  error(("sluice: this pipeline was consumed by %s (decorators take their "
         .. "upstream; use the returned pipeline)"):format(p._dead), level + 1)
end

-- The reader of pipeline p, raising when p is not a live pipeline.
local function live(p, where, level)
  if not is_pipeline(p) then
    error(("sluice: %s needs a pipeline (got a %s; call it with ':')")
          :format(where, type(p)), level + 1)
  end
  local r = p._r
  if not r then dead_error(p, level + 1) end
  return r
end

-- Takes p's reader for a decorator named `by`: p is consumed from now on.
local function take(p, by)
  local r = p._r
  ffi_gc(r, nil)
  p._r, p._dead, p._blk, p._bk = nil, by, false, BLOCK
  return r
end

-- The embedding's side of sl_pipeline_open_* (src/script/pipeline.c): takes
-- p, the value a pipeline script returned, for the C program, storing its
-- reader into `slot` (an sl_reader** as light userdata).  Returns nothing
-- then; false when p is not a pipeline; what p is when it is not live
-- ("closed", "consumed by ...").
function sluice._embed(p, slot)
  if not is_pipeline(p) then return false end
  if not p._r then
    return p._dead == "closed" and "closed"
           or "consumed by " .. tostring(p._dead)
  end
  ffi_cast("sl_reader **", slot)[0] = take(p, "the C embedding")
end

-- --- consuming -------------------------------------------------------------------------

-- The hot path: one FFI call for the sample, one cdata, one small table,
-- and for a small sample a slot in a release block instead of a finalizer
-- of its own (sluice.sample explains why); one call to account for what it
-- pins (see PINNED).
-- Before a pipeline's first sample: its default memory budget (C
-- sl_reader_default_budget: 50 % of the memory the process may use),
-- unless it has one or :budget(false) said none.
local function start_budget(p, r)
  local rc = C.sl_reader_default_budget(r)
  if rc < 0 then error(c_message(rc), 3) end
  p._go = true
end

function Pipeline:next()
  local r = self._r
  if not r then live(self, ":next()", 2) end
  if not self._go then start_budget(self, r) end
  local out = self._out
  local rc = reader_next(r, out)
  if rc == 0 then
    local p = out[0]
    local sp = sample_schema(p)
    local info = self._info
    if sp ~= self._sp then
      info = info_for(sp)
      self._sp, self._info = sp, info
    end
    local nb = account(p, self._pins)
    if PINNED[0] >= PIN_STEP then pin_pressure() end
    if nb <= SMALL then
      local b, k = self._blk, self._bk
      if k >= BLOCK then
        b, k = new_block(), 0
        self._blk = b
      end
      b[k] = p
      self._bk = k + 1
      return setmetatable({p, info, false, b}, Sample)
    end
    return setmetatable({ffi_gc(p, sample_release), info, false, false},
                        Sample)
  elseif rc == -1 then
    return nil
  end
  error(c_message(rc), 0)
end

function Pipeline:iter()
  live(self, ":iter()", 2)
  return Pipeline.next, self
end

function Pipeline:has_next()
  local r = live(self, ":has_next()", 2)
  if not self._go then start_budget(self, r) end
  local rc = C.sl_reader_has_next(r)
  if rc < 0 then error(c_message(rc), 0) end
  return rc == 1
end

function Pipeline:reset()
  local rc = C.sl_reader_reset(live(self, ":reset()", 2))
  if rc < 0 then error(c_message(rc), 0) end
end

-- p:length(): the samples (batches, after :batch()) one pass yields, or
-- nil and the reason when the pipeline cannot know before reading (a
-- filter, a Lua reader, text files, a skip policy: sl_reader_length).
-- `#p` is the same where the Lua honours __len on tables (LuaJIT does only
-- when built with Lua 5.2 compatibility; there `#p` is 0: use p:length()).
local LENGTH = ffi.new("uint64_t[1]")
function Pipeline:length()
  local rc = C.sl_reader_length(live(self, ":length()", 2), LENGTH)
  if rc == 0 then return tonumber(LENGTH[0]) end
  if rc == -9 then return nil, c_message(rc) end -- SL_EUNSUPPORTED
  error(c_message(rc), 2)
end

Pipeline.__len = function(p)
  local n, why = Pipeline.length(p)
  if not n then error(why, 2) end
  return n
end

-- p:state(): where p stands, as a Lua string (sl_reader_save: for every
-- stage its name, options and positions, not the samples; docs/RESUME.md).
-- p:restore(s): moves p, a pipeline built the same way (in this process or
-- another), to that position: its next samples, and the passes after a
-- reset, are those the saved pipeline would have given.  Both raise with
-- the C message: a stage that cannot save, a state of another pipeline
-- (naming the first stage that differs; p is left as it was), a corrupt
-- or truncated state.
local STATE, STATE_LEN = ffi.new("void *[1]"), ffi.new("size_t[1]")
function Pipeline:state()
  local r = live(self, ":state()", 2)
  local rc = C.sl_reader_save(r, STATE, STATE_LEN)
  if rc < 0 then error(c_message(rc), 2) end
  local ptr = STATE[0]
  STATE[0] = nil
  -- ffi.string copies; nothing between the save and sl_free raises but an
  -- out-of-memory error, which would leak this one small string.
  local s = ffi_string(ptr, STATE_LEN[0])
  C.sl_free(ptr)
  return s
end

function Pipeline:restore(s)
  local r = live(self, ":restore()", 2)
  if type(s) ~= "string" then
    error(("sluice: :restore() needs a state string (from :state(); got a %s)")
          :format(type(s)), 2)
  end
  local rc = C.sl_reader_restore(r, s, #s)
  if rc < 0 then error(c_message(rc), 2) end
end

function Pipeline:close()
  if not is_pipeline(self) then live(self, ":close()", 2) end
  local r = self._r
  if r then
    -- Dropping the current release block lets its samples go as soon as
    -- nothing else refers to them.
    self._r, self._dead, self._blk, self._bk = nil, "closed", false, BLOCK
    ffi_gc(r, nil)
    reader_destroy(r)
    sample.flush()
  end
end
Pipeline.__close = Pipeline.close -- Lua 5.4's to-be-closed; LuaJIT ignores it

function Pipeline:schema()
  return sample.schema_table(C.sl_reader_schema(live(self, ":schema()", 2)))
end

Pipeline.__tostring = function(p)
  if not p._r then
    return "sluice.pipeline (" .. (p._dead == "closed" and "closed" or
                                   "consumed by " .. p._dead) .. ")"
  end
  return "sluice.pipeline (" .. ffi_string(C.sl_reader_name(p._r)) .. ")"
end

-- --- run statistics (docs/PERFORMANCE.md) ------------------------------------

-- The chain's figures (C sl_reader_stats): one table per stage, this
-- pipeline's last stage first and its sources last, with name, depth,
-- downstream (the index of the stage it feeds, nil for the first), threads,
-- samples_in, samples_out, next_s, busy_s, wait_up_s and wait_down_s,
-- errors_ignored, queue_depth and last_error (nil when none).
-- Times stay 0 until sluice.stats(true).
local function stage_stats(p, where)
  local r = live(p, where, 3)
  local n = ffi.new("size_t[1]")
  C.sl_reader_stats(r, nil, 0, n)
  local count = tonumber(n[0])
  local st = ffi.new("sl_stage_stats[?]", count)
  local rc = C.sl_reader_stats(r, st, count, n)
  if rc < 0 then error(c_message(rc), 3) end
  return st, count
end

function Pipeline:stats()
  local st, count = stage_stats(self, ":stats()")
  local out = {}
  for i = 0, count - 1 do
    local s = st[i]
    out[i + 1] = {
      name = ffi_string(s.name), depth = s.depth,
      downstream = s.downstream >= 0 and s.downstream + 1 or nil,
      threads = s.threads,
      samples_in = tonumber(s.samples_in), samples_out = tonumber(s.samples_out),
      next_s = s.next_s, busy_s = s.busy_s,
      wait_up_s = s.wait_up_s, wait_down_s = s.wait_down_s,
      errors_ignored = tonumber(s.errors_ignored),
      queue_depth = tonumber(s.queue_depth),
      samples_fused = tonumber(s.samples_fused),
      threads_auto = s.threads_auto ~= 0, threads_max = s.threads_max,
      bytes_held = tonumber(s.bytes_held), bytes_peak = tonumber(s.bytes_peak),
      budget_bytes = tonumber(s.budget_bytes),
      budget_default_pct = s.budget_default_pct,
      memory_usable = tonumber(s.memory_usable),
      last_error = s.last_error[0] ~= 0 and ffi_string(s.last_error) or nil,
    }
  end
  -- The first pack and mix stages (those :pack_stats() and :mix_counts()
  -- report on: the same order) carry their own figures (docs/TEXT.md).
  local lm = {pack = "pack_stats", mix = "mix_counts"}
  for i = 1, count do
    local s = out[i]
    local method = lm[s.name]
    if method then
      lm[s.name] = nil
      local ok, figures = pcall(self[method], self) -- a reader named so
      if ok then
        for k, v in pairs(figures) do s[k] = v end
      end
    end
  end
  return out
end

-- One memory budget for the whole chain (C sl_reader_set_budget): size in
-- bytes or a string with a unit ("2GiB", parse_size); false or "none": no
-- budget, not even the default (C sl_reader_set_no_budget).  Call it before
-- reading (the first sample sets the default); returns the pipeline (not
-- consumed).
function Pipeline:budget(size)
  local r = live(self, ":budget()", 2)
  if size == false or size == "none" then
    local rc = C.sl_reader_set_no_budget(r)
    if rc < 0 then error(c_message(rc), 2) end
    return self
  end
  local bytes, why = parse_size(size)
  if not bytes then error("sluice: :budget(): " .. why, 2) end
  local rc = C.sl_reader_set_budget(r, bytes)
  if rc < 0 then error(c_message(rc), 2) end
  return self
end

-- The bytes a size names ("2GiB" -> 2147483648; parse_size), raising on a
-- malformed one.
function sluice.size(v)
  local bytes, why = parse_size(v)
  if not bytes then error("sluice.size(): " .. why, 2) end
  return bytes
end

-- The table `sluice run --stats` prints, for a run of wall_s seconds, with
-- its closing verdict (the limiting stage, or the consumer).
function Pipeline:stats_report(wall_s)
  if type(wall_s) ~= "number" or wall_s <= 0 then
    error(":stats_report(wall_s): wall_s must be a number of seconds > 0", 2)
  end
  local st, count = stage_stats(self, ":stats_report()")
  local len = C.sl_stats_format(st, count, wall_s, nil, 0)
  local buf = ffi.new("char[?]", len + 1)
  C.sl_stats_format(st, count, wall_s, buf, len + 1)
  return ffi_string(buf, len)
end

-- Turns stage timing on or off for the whole process (C sl_stats_enable);
-- returns whether it was on.
function sluice.stats(on)
  local was = C.sl_stats_enabled() == 1
  if on ~= nil then C.sl_stats_enable(on and 1 or 0) end
  return was
end

-- --- C decorators -------------------------------------------------------------------------

local SHUFFLE_OPTS = set("seed")
function Pipeline:shuffle(n, opts)
  live(self, ":shuffle()", 2)
  check_int(n, 1, ":shuffle()", "buffer size", 2)
  opts = check_opts(opts, ":shuffle()", SHUFFLE_OPTS, 2)
  local seed = check_seed(opts.seed or (self._flow and self._flow.seed) or 0,
                          ":shuffle()", 2)
  local result = made(C.sl_shuffle(take(self, ":shuffle()"), n, seed, OUT), 2,
                      self)
  return result
end

local BATCH_OPTS = set("drop_last", "pad", "lod", "fuse")
function Pipeline:batch(n, opts)
  live(self, ":batch()", 2)
  check_int(n, 1, ":batch()", "batch size", 2)
  opts = check_opts(opts, ":batch()", BATCH_OPTS, 2)
  local o = ffi.new("sl_batch_opts")
  o.drop_last = check_bool(opts.drop_last, ":batch()", "drop_last", false, 2)
    and 1 or 0
  o.pad = check_bool(opts.pad, ":batch()", "pad", false, 2) and 1 or 0
  o.lod = check_bool(opts.lod, ":batch()", "lod", false, 2) and 1 or 0
  o.no_fuse = check_bool(opts.fuse, ":batch()", "fuse", true, 2) and 0 or 1
  -- The fields batch concatenates with LoD offsets (variable ones, unless
  -- padded), for an :unbatch() or :rebatch() right after.
  local lod
  if o.pad == 0 then
    local s = C.sl_reader_schema(self._r)
    lod = {}
    for i = 0, C.sl_schema_nfields(s) - 1 do
      if C.sl_schema_field_is_var(s, i) ~= 0 then
        lod[#lod + 1] = ffi.string(C.sl_schema_field_name(s, i))
      end
    end
  end
  local result = made(C.sl_batch(take(self, ":batch()"), n, o, OUT), 2, self)
  result._lod = lod
  return result
end

local function count_decorator(name, cfn, min, what)
  local where = ":" .. name .. "()"
  return function(self, n)
    live(self, where, 2)
    check_int(n, min, where, what, 2)
    local result = made(cfn(take(self, where), n, OUT), 2, self)
    return result
  end
end

local multi_pass = count_decorator("multi_pass", C.sl_multi_pass, 1,
                                   "pass count")
-- multi_pass(math.huge) is repeat_forever() (defined below).
function Pipeline:multi_pass(k)
  if k == math.huge then return self:repeat_forever() end
  return multi_pass(self, k)
end
-- take(-1) / skip(-1): tf.data's "all" (every sample) and "none" (every
-- sample skipped: the pass reads upstream through and yields nothing).
local ALL = ffi.new("uint64_t", 0) - 1

local function count_or_all(name, cfn)
  local where = ":" .. name .. "()"
  return function(self, n)
    live(self, where, 2)
    if n ~= -1 then check_int(n, 0, where, "count (or -1: all)", 2) end
    local result = made(cfn(take(self, where), n == -1 and ALL or n, OUT), 2,
                        self)
    return result
  end
end

Pipeline.take = count_or_all("take", C.sl_take)
Pipeline.skip = count_or_all("skip", C.sl_skip)

-- Repeats until an upstream pass yields nothing (which ends the pass):
-- tf.data's repeat() without spinning over an empty source.
function Pipeline:repeat_forever()
  live(self, ":repeat_forever()", 2)
  local result = made(C.sl_multi_pass(take(self, ":repeat_forever()"), ALL,
                                      OUT), 2, self)
  return result
end

Pipeline.repeat_first = count_decorator("repeat_first", C.sl_repeat_first, 0,
                                        "count")
local prefetch_n = count_decorator("prefetch", C.sl_prefetch, 1,
                                   "buffer size")
local PREFETCH_AUTO_OPTS = {max_bytes = true, max_depth = true}
-- :prefetch(n), or :prefetch("auto", {max_bytes=, max_depth=}): the depth
-- tuned while it runs (C sl_prefetch_auto; its ranges are checked there).
-- :prefetch() with no size is :prefetch("auto") (issue 27: "auto" where no
-- number is given); its options still need the word.
function Pipeline:prefetch(n, opts)
  if n == nil and opts == nil then n = "auto" end
  if n ~= "auto" then
    if type(n) == "string" then
      error(("sluice: :prefetch(): buffer size must be an integer >= 1 or "
             .. "\"auto\" (got \"%s\")"):format(n), 2)
    end
    if opts ~= nil then
      error("sluice: :prefetch(n): options are for :prefetch(\"auto\", "
            .. "{max_bytes=, max_depth=})", 2)
    end
    local result = prefetch_n(self, n)
    return result
  end
  local where = ':prefetch("auto")'
  live(self, where, 2)
  opts = check_opts(opts, where, PREFETCH_AUTO_OPTS, 2)
  local o = ffi.new("sl_prefetch_auto_opts")
  o.size = ffi.sizeof(o)
  o.max_bytes = opt_int(opts, "max_bytes", 1, 0, where, 2)
  o.max_depth = opt_int(opts, "max_depth", 1, 0, where, 2, U32_MAX)
  local result = made(C.sl_prefetch_auto(take(self, where), o, OUT), 2, self)
  return result
end

function Pipeline:cache()
  live(self, ":cache()", 2)
  local result = made(C.sl_cache(take(self, ":cache()"), OUT), 2, self)
  return result
end

-- :double_buffer{device=, slots=} (sluice.device; docs/DEVICE.md).
local device = require "sluice.device"
device.install(Pipeline, {live = live, take = take, made = made,
                          check_opts = check_opts, check_int = check_int,
                          OUT = OUT})

-- sluice.chain(a, b, ...) and sluice.zip(a, b, ..., {truncate=}): the
-- pipelines (all taken) as one array of readers.
local function pipelines_arg(where, list, level)
  local n = #list
  if n == 0 then
    error(("sluice: %s: needs at least one pipeline"):format(where), level + 1)
  end
  for i = 1, n do
    local p = list[i]
    if not is_pipeline(p) then
      error(("sluice: %s: argument %d is a %s, not a pipeline")
            :format(where, i, type(p)), level + 1)
    end
    if not p._r then dead_error(p, level + 1) end
    for j = 1, i - 1 do
      if list[j] == p then
        error(("sluice: %s: argument %d is the same pipeline as argument %d")
              :format(where, i, j), level + 1)
      end
    end
  end
  local arr = ffi.new("sl_reader *[?]", n)
  for i = 1, n do arr[i - 1] = take(list[i], where) end
  return arr, n
end

-- The first of `list` that carries a pipeline seed.
local function flow_of(list)
  for i = 1, #list do
    if list[i]._flow then return list[i] end
  end
end

function sluice.chain(...)
  local list = {...}
  local arr, n = pipelines_arg("sluice.chain()", list, 2)
  local result = made(C.sl_chain(arr, n, OUT), 2, flow_of(list))
  return result
end

local ZIP_OPTS = set("truncate")
function sluice.zip(...)
  local list = {...}
  local opts = {}
  local last = list[#list]
  if type(last) == "table" and not is_pipeline(last) then
    opts = check_opts(last, "sluice.zip()", ZIP_OPTS, 2)
    list[#list] = nil
  end
  local truncate = check_bool(opts.truncate, "sluice.zip()", "truncate",
                              false, 2)
  local arr, n = pipelines_arg("sluice.zip()", list, 2)
  local result = made(C.sl_zip(arr, n, truncate and 1 or 0, OUT), 2,
                      flow_of(list))
  return result
end

-- --- Lua decorators (worker states, through sluice.ship and the FFI) ---------------------------

local function schema_option(spec, where, level)
  if spec == nil then return nil end
  local sp, why = sample.schema_from_spec(spec)
  if not sp then
    error(("sluice: %s: option 'schema': %s"):format(where, why), level + 1)
  end
  return sp
end

local function ship(fn, what, where, level)
  if type(fn) ~= "function" and type(fn) ~= "string" then
    error(("sluice: %s: expected a function or a \"module.function\" name "
           .. "(got a %s)"):format(where, type(fn)), level + 1)
  end
  local at, data, name = shipper.encode(fn, what)
  if not at then error(data, level + 1) end
  -- The object is owned by its cdata from the moment it exists; stages
  -- take references of their own.
  local rc = C.sl__shipped_new(what, at, data, data and #data or 0, name,
                               SHIPPED)
  if rc < 0 then error(c_message(rc), level + 1) end
  local shipped = ffi_gc(SHIPPED[0], C.sl__shipped_release)
  SHIPPED[0] = nil
  -- The worker states' package paths: this state's, now (declaration time).
  local path, cpath = package.path, package.cpath
  local env = C.sl__lua_env_new(type(path) == "string" and path or nil,
                                type(cpath) == "string" and cpath or nil)
  if env == nil then error(c_message(), level + 1) end
  return shipped, ffi_gc(env, C.sl__lua_env_release)
end

local KIND = {map = C.SL__LUA_MAP, filter = C.SL__LUA_FILTER,
              parse = C.SL__LUA_PARSE}
local FLOW_KIND = {flat_map = C.SL__LUA_FLAT_MAP,
                   take_while = C.SL__LUA_TAKE_WHILE, scan = C.SL__LUA_SCAN}

-- Runs sl__lua_stage (or, for a FLOW_KIND, sl__lua_flow with scan's
-- shipped `init`) over pipeline `p`'s reader (taken: disowned before the
-- call, which owns it on every path) with options `o` (a table of
-- sl__lua_stage_opts fields; their ranges are the stage's to check, the one
-- place) and the optional schema cdata `sp` (retained by the stage).  The
-- new reader gets its finalizer before anything can raise.
local function new_lua_stage(p, kind, shipped, env, o, sp, where, level, init)
  local opts = ffi.new("sl__lua_stage_opts")
  opts.threads = o.threads or 1
  opts.ordered = o.ordered == false and 0 or 1
  opts.queue = o.queue or 0
  opts.deadline = o.deadline or 0
  opts.seed = o.seed or 0
  opts.epoch = o.epoch or 0
  opts.ignore_errors = o.ignore_errors or 0
  local up = take(p, where)
  local rc
  if FLOW_KIND[kind] then
    rc = C.sl__lua_flow(up, FLOW_KIND[kind], shipped, init, env, opts, sp, OUT)
  else
    rc = C.sl__lua_stage(up, KIND[kind], shipped, env, opts, sp, OUT)
  end
  if rc < 0 then error(c_message(rc), level + 1) end
  local r = OUT[0]
  OUT[0] = nil
  return ffi_gc(r, reader_destroy)
end

local MAP_OPTS = set("threads", "ordered", "queue", "schema", "deadline",
                     "seed", "epoch", "ignore_errors")
local FILTER_OPTS = set("threads", "ordered", "queue", "deadline", "seed",
                        "epoch", "ignore_errors")

-- ignore_errors = N (an integer >= 0: at most N failing samples skipped per
-- pass) or true (no cap) or false (0: errors end the pass); nil is 0.
local IGNORE_ALL = ffi.new("uint64_t", 0) - 1
local function check_ignore_errors(v, where, level)
  if v == nil or v == false then return 0 end
  if v == true then return IGNORE_ALL end
  if type(v) ~= "number" or v ~= floor(v) or v < 0 or v >= 2^53 then
    error(("sluice: %s: option 'ignore_errors' must be true, false or an "
           .. "integer >= 0 (the most failing samples skipped per pass; got "
           .. "%s)"):format(where, type(v) == "string" and ("\"" .. v .. "\"")
                                   or tostring(v)), level + 1)
  end
  return v
end

-- ctx.seed and ctx's first epoch of a Lua stage (docs/LUA.md,
-- "Randomness"): the stage's options, else the pipeline's (_flow), else 0.
-- Into stage options `o` as seed (a uint64_t cdata) and epoch.
local function ctx_options(o, opts, flow, where, level)
  flow = flow or {}
  local seed = opts.seed
  if seed == nil then seed = flow.seed or 0 end
  o.seed = check_seed(seed, where, level + 1)
  local epoch = opts.epoch
  if epoch == nil then epoch = flow.epoch or 0 end
  if type(epoch) ~= "number" or epoch ~= floor(epoch) or epoch < 0 or
     epoch >= 2^53 then
    error(("sluice: %s: option 'epoch' must be an integer in [0, 2^53) "
           .. "(got %s)"):format(where, tostring(epoch)), level + 1)
  end
  o.epoch = epoch
  return o
end

-- deadline = seconds one call of the function may run (docs/RELIABILITY.md).
-- Its range is checked by the stage (sl__lua_stage, the one place); here
-- only that it is a number.
local function check_deadline(v, where, level)
  if v == nil then return nil end
  if type(v) ~= "number" then
    error(("sluice: %s: option 'deadline' must be a number of seconds "
           .. "(got a %s)"):format(where, type(v)), level + 1)
  end
  return v
end

-- The options of a Lua stage over self (those in `allowed`), checked
-- before anything is taken: a table of sl__lua_stage_opts fields for
-- new_lua_stage, and the schema cdata or nil.  `level` is the caller's.
local function stage_options(self, opts, where, allowed, level)
  level = level + 1
  live(self, where, level)
  opts = check_opts(opts, where, allowed, level)
  local o = {
    threads = opt_threads(opts, 1, "auto", where, level, INT_MAX,
                          THREADS_AUTO_INT),
    ordered = check_bool(opts.ordered, where, "ordered", true, level),
    queue = opt_int(opts, "queue", 1, nil, where, level),
    deadline = check_deadline(opts.deadline, where, level),
    ignore_errors = check_ignore_errors(opts.ignore_errors, where, level),
  }
  local sp = schema_option(opts.schema, where, level)
  return ctx_options(o, opts, self._flow, where, level), sp
end

local function lua_stage(self, kind, fn, opts)
  local where = ":" .. kind .. "()"
  local o, sp = stage_options(self, opts, where,
                              kind == "map" and MAP_OPTS or FILTER_OPTS, 3)
  local shipped, env = ship(fn, kind, where, 3)
  local r = new_lua_stage(self, kind, shipped, env, o, sp, where, 3)
  return new_pipeline(r, self)
end

-- (Not tail calls: error levels count the method's frame.)
function Pipeline:map(fn, opts)
  local p = lua_stage(self, "map", fn, opts)
  return p
end

function Pipeline:filter(fn, opts)
  local p = lua_stage(self, "filter", fn, opts)
  return p
end

-- --- flow stages: flat_map, take_while, scan (C sl__lua_flow) ---------------
local FLOW_OPTS = {
  flat_map = set("threads", "ordered", "queue", "schema", "deadline", "seed",
                 "epoch"),
  take_while = set("deadline", "seed", "epoch"),
  scan = set("schema", "deadline", "seed", "epoch"),
}

-- scan's init: nil, a boolean, a number, a string or a table of those
-- (keys too), which the stage copies into each pass.  Returns nil or a
-- message naming the offending part ("init.a[2] is a function").
local function plain_value(v, path, seen)
  local t = type(v)
  if t == "boolean" or t == "number" or t == "string" or t == "nil" then
    return nil
  end
  if t ~= "table" or getmetatable(v) ~= nil then
    return ("%s is a %s"):format(path, t == "table" and "table with a "
                                 .. "metatable (a sample, a tensor or an "
                                 .. "object)" or t)
  end
  if seen[v] then return nil end
  seen[v] = true
  for k, x in pairs(v) do
    local sub = type(k) == "string" and k:match("^[%a_][%w_]*$")
      and path .. "." .. k or path .. "[" .. tostring(k) .. "]"
    local why = plain_value(k, sub .. " (a key)", seen) or
      plain_value(x, sub, seen)
    if why then return why end
  end
  return nil
end

-- The flow stage `kind` over self: fn shipped as a Lua map's, init (scan)
-- shipped as the upvalue of a function returning it.
local function flow_stage(self, kind, fn, opts, init)
  local where = ":" .. kind .. "()"
  local o, sp = stage_options(self, opts, where, FLOW_OPTS[kind], 3)
  local shipped, env = ship(fn, kind, where, 3)
  local shipped_init = nil
  if kind == "scan" then
    local why = plain_value(init, "init", {})
    if why then
      error(("sluice: %s: init must be nil, a boolean, a number, a string "
             .. "or a table of those (%s)"):format(where, why), 3)
    end
    shipped_init = ship(function() return init end, kind, where, 3)
  end
  local r = new_lua_stage(self, kind, shipped, env, o, sp, where, 3,
                          shipped_init)
  return new_pipeline(r, self)
end

-- (Not tail calls: error levels count the method's frame.)
function Pipeline:flat_map(fn, opts)
  local p = flow_stage(self, "flat_map", fn, opts)
  return p
end

function Pipeline:take_while(fn, opts)
  local p = flow_stage(self, "take_while", fn, opts)
  return p
end

function Pipeline:scan(init, fn, opts)
  local p = flow_stage(self, "scan", fn, opts, init)
  return p
end

-- Adds field `field` (default "index"): the sample's position in the pass,
-- from `start` (default 0), as an i64 scalar (tf.data's enumerate(start),
-- restarting each pass as ds.enumerate().repeat() does per epoch).
function Pipeline:enumerate(opts)
  local where = ":enumerate()"
  live(self, where, 2)
  opts = check_opts(opts, where, {field = true, start = true}, 2)
  local field = opts.field or "index"
  if type(field) ~= "string" or field == "" then
    error(("sluice: %s: option 'field' must be a non-empty string (got %s)")
          :format(where, tostring(field)), 2)
  end
  local start = opts.start or 0
  if type(start) ~= "number" or start ~= floor(start) or math.abs(start) >= 2^53 then
    error(("sluice: %s: option 'start' must be an integer in (-2^53, 2^53) (got %s)")
          :format(where, tostring(start)), 2)
  end
  local names = self:schema()
  if names[field] then
    error(("sluice: %s: the samples already have a field '%s' (give another "
           .. "with {field = ...})"):format(where, field), 2)
  end
  local p = lua_stage(self, "map", function(s, ctx)
    s[field] = ctx.index + start
    return s
  end, nil)
  return p
end

-- --- sources ----------------------------------------------------------------------------------

function sluice.range(n)
  check_int(n, 0, "sluice.range()", "n", 2)
  local result = made(C.sl_reader_range(n, OUT), 2)
  return result
end

function sluice.from_table(rows, schema)
  if type(rows) ~= "table" or is_pipeline(rows) then
    error(("sluice: sluice.from_table(): rows must be an array of tables "
           .. "(got a %s)"):format(type(rows)), 2)
  end
  local n = #rows
  local sp, why
  if schema ~= nil then
    sp, why = sample.schema_from_spec(schema)
    if not sp then
      error("sluice: sluice.from_table(): " .. why, 2)
    end
  elseif n == 0 then
    error("sluice: sluice.from_table(): an empty table needs a schema", 2)
  elseif sample.is(rows[1]) then
    local first = rows[1][1]
    if not first then
      error("sluice: sluice.from_table(): row 1 is a released sample", 2)
    end
    sp = sample_schema(first)
  else
    sp, why = sample.inferred_schema(rows)
    if not sp then error("sluice: sluice.from_table(): " .. why, 2) end
  end
  local info = info_for(sp)
  local arr = ffi.new("sl_sample *[?]", n)
  local keep = {}
  for i = 1, n do
    local q
    q, why = sample.build_row(rows[i], info, "row " .. i)
    if not q then error("sluice: sluice.from_table(): " .. why, 2) end
    keep[i], arr[i - 1] = q, q
  end
  local rc = C.sl_reader_from_array(arr, n, ffi_cast("sl_schema *", sp), OUT)
  for i = 1, n do -- the reader holds its own references now
    ffi_gc(keep[i], nil)
    sample_release(keep[i])
  end
  local result = made(rc, 2)
  return result
end

-- sluice.open: "tag:path", or a path whose extension names the format.
local OPENERS = {}

local SLR_OPTS = set("policy", "max_bad_chunks", "max_chunk_bytes", "first",
                     "count", "chunks")
local POLICY = enum('"fail" or "skip_chunk"', {fail = 0, skip_chunk = 1})
local UINT64_MAX = ffi_cast("uint64_t", ffi_cast("int64_t", -1))

-- opts.policy ("fail" / "skip_chunk") into o.policy, when given.
local function policy_option(o, opts, where, level)
  if opts.policy ~= nil then
    o.policy = POLICY(opts.policy, where, "option 'policy'", level + 1)
  end
end

-- The slr options shared by sluice.open and sluice.open_files, into `o`
-- (an sl_slr_open_opts).
local function slr_options(o, opts, where, level)
  policy_option(o, opts, where, level + 1)
  o.max_bad_chunks = opt_int(opts, "max_bad_chunks", 0, 0, where, level + 1, U32_MAX)
  o.max_chunk_bytes = opt_int(opts, "max_chunk_bytes", 0, 0, where, level + 1)
end

function OPENERS.slr(path, opts, level)
  opts = check_opts(opts, "sluice.open()", SLR_OPTS, level + 1)
  local o = ffi.new("sl_slr_open_opts")
  slr_options(o, opts, "sluice.open()", level + 1)
  if opts.chunks ~= nil then
    local ch = opts.chunks
    if opts.first ~= nil or opts.count ~= nil then
      error("sluice: sluice.open(): use either 'chunks' or 'first'/'count'",
            level + 1)
    end
    if type(ch) ~= "table" then
      error("sluice: sluice.open(): option 'chunks' must be {first, n}",
            level + 1)
    end
    local first = check_int(ch[1], 0, "sluice.open()", "chunks[1]", level + 1)
    local nchunks = check_int(ch[2], 0, "sluice.open()", "chunks[2]", level + 1)
    local result = made(C.sl_slr_reader_chunks(path, o, first, nchunks, OUT),
                        level + 1)
    return result
  end
  local first = opt_int(opts, "first", 0, 0, "sluice.open()", level + 1)
  local count = opt_int(opts, "count", 0, UINT64_MAX, "sluice.open()", level + 1)
  local result = made(C.sl_slr_reader(path, o, first, count, OUT), level + 1)
  return result
end

local function check_string(v, where, what, level)
  if v ~= nil and type(v) ~= "string" then
    error(("sluice: %s: option '%s' must be a string (got a %s)")
          :format(where, what, type(v)), level + 1)
  end
  return v
end

-- --- images (docs/IMAGES.md) ---------------------------------------------------------

local FILTER = enum('"nearest" or "bilinear"', {nearest = 1, bilinear = 2})

-- {h, w} of option `what`, checked.
local function size_pair(v, where, what, level)
  if type(v) ~= "table" then
    error(("sluice: %s: option '%s' must be {height, width} (got a %s)")
          :format(where, what, type(v)), level + 1)
  end
  return check_int(v[1], 1, where, what .. "[1]", level + 1),
         check_int(v[2], 1, where, what .. "[2]", level + 1)
end

-- The image options of opts (channels, resize = {h, w[, "nearest"]},
-- shape = {h, w}, threads, ordered, window, policy, max_bad, field) into
-- `o`, an sl_image_opts.
local function image_options(o, opts, where, level)
  o.size = ffi.sizeof("sl_image_opts")
  if opts.channels ~= nil then
    local c = opts.channels
    if c ~= 0 and c ~= 1 and c ~= 3 then
      error(("sluice: %s: option 'channels' must be 1, 3 or 0 (as stored) "
             .. "(got %s)"):format(where, tostring(c)), level + 1)
    end
    o.shape.channels = c
  end
  if opts.resize ~= nil and opts.shape ~= nil then
    error(("sluice: %s: use either 'resize' or 'shape'"):format(where),
          level + 1)
  end
  if opts.resize ~= nil then
    o.shape.height, o.shape.width = size_pair(opts.resize, where, "resize",
                                              level + 1)
    o.shape.resize = FILTER(opts.resize[3] or "bilinear", where,
                            "resize filter", level + 1)
  elseif opts.shape ~= nil then
    o.shape.height, o.shape.width = size_pair(opts.shape, where, "shape",
                                              level + 1)
  end
  o.threads = opt_threads(opts, 1, "auto", where, level + 1, U32_MAX,
                          THREADS_AUTO_U32)
  o.window = opt_int(opts, "window", 1, 0, where, level + 1, U32_MAX)
  o.unordered = check_bool(opts.ordered, where, "ordered", true, level + 1)
    and 0 or 1
  policy_option(o, opts, where, level + 1)
  o.max_bad = opt_int(opts, "max_bad", 0, 0, where, level + 1, U32_MAX)
  if opts.field ~= nil then
    o.field = check_string(opts.field, where, "field", level + 1)
  end
end

local DECODE_OPTS = set("threads", "channels", "resize", "shape", "field",
                        "ordered", "window", "policy", "max_bad")

-- :decode_image{threads=, channels=, resize = {h, w[, filter]},
-- shape = {h, w}, field=, ordered=, window=, policy=, max_bad=}:
-- sl_decode_image.
function Pipeline:decode_image(opts)
  local where = ":decode_image()"
  live(self, where, 2)
  opts = check_opts(opts, where, DECODE_OPTS, 2)
  local o = ffi.new("sl_image_opts")
  image_options(o, opts, where, 2)
  local result = made(C.sl_decode_image(take(self, where), o, OUT), 2, self)
  return result
end

local CROP_OPTS = set("size", "flip", "seed", "epoch", "field")

-- :random_crop_flip{size = {h, w}, flip = true, seed=, epoch=, field=}:
-- sl_random_crop_flip (draws keyed by seed, epoch and sample index).
function Pipeline:random_crop_flip(opts)
  local where = ":random_crop_flip()"
  live(self, where, 2)
  opts = check_opts(opts, where, CROP_OPTS, 2)
  local o = ffi.new("sl_crop_flip_opts")
  o.size = ffi.sizeof("sl_crop_flip_opts")
  if opts.size ~= nil then
    o.height, o.width = size_pair(opts.size, where, "size", 2)
  end
  o.flip = check_bool(opts.flip, where, "flip", true, 2) and 1 or 0
  local flow = self._flow or {}
  o.seed = check_seed(opts.seed == nil and flow.seed or opts.seed, where, 2)
  o.epoch = opt_int(opts, "epoch", 0, flow.epoch or 0, where, 2)
  if opts.field ~= nil then
    o.field = check_string(opts.field, where, "field", 2)
  end
  local result = made(C.sl_random_crop_flip(take(self, where), o, OUT), 2,
                      self)
  return result
end

local OPEN_OPTS = set("policy", "max_bad_chunks", "max_chunk_bytes", "first",
                      "count", "chunks", "labels", "mmap", "parser",
                      "parser_options", "threads", "channels", "resize",
                      "shape", "ordered", "window", "max_bad", "schema",
                      "field", "columns", "delimiter", "header", "features",
                      "compression", "shuffle", "seed", "shard", "buffer",
                      "fields", "missing")

-- "name:spec,..." from a string, an array ({"x:f32", {"y", "i64"}}) or a
-- table of name = spec (in name order); spec(v) turns a value into the
-- text after the colon (nil: the name alone).
local function name_list(v, where, what, spec, level)
  if v == nil or type(v) == "string" then return v end
  if type(v) ~= "table" then
    error(("sluice: %s: option '%s' must be a string or a table (got a %s)")
          :format(where, what, type(v)), level + 1)
  end
  local parts = {}
  local function add(name, s)
    if type(name) ~= "string" or name == "" or name:find("[,:%[%]]") then
      error(("sluice: %s: option '%s': bad field name %s"):format(
        where, what, tostring(name)), level + 1)
    end
    s = spec(s)
    parts[#parts + 1] = s and (name .. ":" .. s) or name
  end
  if #v > 0 then
    for _, e in ipairs(v) do
      if type(e) == "table" then add(e[1], e[2])
      else parts[#parts + 1] = tostring(e) end
    end
  else
    local names = {}
    for k in pairs(v) do names[#names + 1] = k end
    table.sort(names, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(names) do add(k, v[k]) end
  end
  return table.concat(parts, ",")
end

-- tfrecord features: "bytes", "i64", {"f32", {3}} -> "f32[3]".
local function feature_spec(s)
  if type(s) ~= "table" then return s end
  local dims = {}
  for _, d in ipairs(s[2] or {}) do dims[#dims + 1] = tostring(d) end
  return #dims > 0 and (s[1] .. "[" .. table.concat(dims, ",") .. "]") or s[1]
end

local COMPRESSION = enum('"auto", "none" or "gzip"',
                         {auto = 0, none = 1, gzip = 2})

-- The options of tags npy, csv and tfrecord into o (sl_open_opts).  The
-- option structs live as long as `keep` (the caller holds it over sl_open).
local function format_options(o, opts, where, keep, level)
  if opts.field ~= nil then
    local n = ffi.new("sl_npy_opts")
    n.size = ffi.sizeof(n)
    n.field = check_string(opts.field, where, "field", level + 1)
    keep[#keep + 1] = n
    o.npy = n
  end
  if opts.columns ~= nil or opts.delimiter ~= nil or opts.header ~= nil then
    local c = ffi.new("sl_csv_opts")
    c.size = ffi.sizeof(c)
    local cols = name_list(opts.columns, where, "columns",
                           function(s) return s end, level + 1)
    keep[#keep + 1] = cols
    c.columns = cols
    local d = opts.delimiter
    if d ~= nil then
      if type(d) ~= "string" or #d ~= 1 then
        error(("sluice: %s: option 'delimiter' must be one character (got %s)")
              :format(where, tostring(d)), level + 1)
      end
      c.delimiter = d:byte()
    end
    c.no_header = check_bool(opts.header, where, "header", true, level + 1)
      and 0 or 1
    keep[#keep + 1] = c
    o.csv = c
  end
  if opts.features ~= nil or opts.compression ~= nil then
    local t = ffi.new("sl_tfrecord_opts")
    t.size = ffi.sizeof(t)
    local f = name_list(opts.features, where, "features", feature_spec,
                        level + 1)
    keep[#keep + 1] = f
    t.features = f
    if opts.compression ~= nil then
      t.compression = COMPRESSION(opts.compression, where,
                                  "option 'compression'", level + 1)
    end
    keep[#keep + 1] = t
    o.tfrecord = t
  end
end

-- sl_shard_policy's values (open_files' and wds' remainder, :shard()'s).
local SHARD_POLICIES = {pad = 0, drop = 1, uneven = 2}
local REMAINDER = enum('"pad", "drop" or "uneven"', SHARD_POLICIES)
local SHARD_OPTS = set("rank", "world", "remainder")

-- The option shard = {rank =, world =, remainder =} of open_files and of
-- WebDataset shards, into o.rank, o.world, o.remainder (C checks that rank
-- is in [0, world)).
local function shard_option(sh, where, o, level)
  sh = check_opts(sh, where .. " option 'shard'", SHARD_OPTS, level + 1)
  if (sh.rank == nil) ~= (sh.world == nil) then
    error(("sluice: %s: option 'shard' needs both rank and world (or "
           .. "neither: then they come from the launcher's environment)")
          :format(where), level + 1)
  end
  if sh.world ~= nil then
    o.world = check_int(sh.world, 1, where, "shard.world", level + 1)
    o.rank = check_int(sh.rank, 0, where, "shard.rank", level + 1)
  end
  if sh.remainder ~= nil then
    o.remainder = REMAINDER(sh.remainder, where, "shard.remainder", level + 1)
  end
end

-- WebDataset shards through sl_wds_open (sl_open_opts.wds): when the name
-- is wds ("wds:" or ".tar", braces allowed) and threads is given, or when
-- any option only shards have is (shuffle, seed, shard, buffer, fields,
-- missing).
-- Rank and world come from the launcher's environment (sl_shard_env)
-- unless `shard = {rank =, world =}` gives them; `shard.remainder` ("pad",
-- the default, "drop" or "uneven") says what each rank reads of the pass's
-- samples.  `fields`: a list of "EXT", "EXT;EXT" or "NAME=EXT;EXT" (or one
-- comma-separated string).  `missing`: "fail" (default) or "skip" a sample
-- without a member for every field.  The C stage checks that the name is
-- all shards.
local WDS_ONLY = {"shuffle", "seed", "shard", "buffer", "fields", "missing"}
local MISSING = enum('"fail" or "skip"', {fail = 0, skip = 1})
local function wds_options(o, name, opts, where, keep, level)
  local only = false
  for _, k in ipairs(WDS_ONLY) do only = only or opts[k] ~= nil end
  local plain = name:gsub("%b{}", "")
  local wds = name:sub(1, 4) == "wds:" or plain:match("%.tar$") ~= nil
  if not only and not (wds and opts.threads ~= nil) then return end
  local w = ffi.new("sl_wds_opts")
  w.size = ffi.sizeof(w)
  if opts.threads == "auto" then
    -- The lane count is part of the order (wds_open.c): not tunable.
    error(("sluice: %s: option 'threads' = \"auto\" is not available for "
           .. "WebDataset shards (the number of lanes decides the order); "
           .. "give a positive integer"):format(where), level + 1)
  end
  w.threads = opt_int(opts, "threads", 1, 1, where, level + 1, U32_MAX)
  w.shuffle = check_bool(opts.shuffle, where, "shuffle", false, level + 1)
    and 1 or 0
  if opts.seed ~= nil then w.seed = check_seed(opts.seed, where, level + 1) end
  w.buffer = opt_int(opts, "buffer", 1, 0, where, level + 1)
  w.rank, w.world = 0, 0 -- the launcher's environment
  local sh = opts.shard
  if sh ~= nil and sh ~= "env" then shard_option(sh, where, w, level + 1) end
  local f = opts.fields
  if type(f) == "table" then
    for i, v in ipairs(f) do
      if type(v) ~= "string" then
        error(("sluice: %s: fields[%d] must be a string (got a %s)")
              :format(where, i, type(v)), level + 1)
      end
    end
    f = table.concat(f, ",")
  end
  if f ~= nil then
    w.fields = check_string(f, where, "fields", level + 1)
    keep[#keep + 1] = f
  end
  if opts.missing ~= nil then
    w.missing = MISSING(opts.missing, where, "option 'missing'", level + 1)
  end
  keep[#keep + 1] = w
  o.wds = w
end

-- sluice.open: any name sl_open understands ("tag:path", a known extension,
-- braces, a glob); first/count/chunks select records of one slr file.
local global_shuffle -- p:global_shuffle's body, below
-- Option `cache` of a sampler (sl_global_shuffle_opts.cache): a size, false
-- for none, nil for SL_GLOBAL_SHUFFLE_CACHE_AUTO (as the budget allows).
local function cache_option(opts, where, level)
  if opts.cache == false then return 0 end
  if opts.cache == nil then return ffi.new("uint64_t", 0) - 1 end
  local bytes, why = parse_size(opts.cache)
  if not bytes then
    error(("sluice: %s: cache: %s"):format(where, why), level + 1)
  end
  return bytes
end
local GLOBAL_OPTS = set("seed", "shard", "cache", "threads")

local function open_name(name, opts, level)
  local where = "sluice.open()"
  if type(name) ~= "string" then
    error(("sluice: %s: name must be a string (got a %s)")
          :format(where, type(name)), level)
  end
  if name:sub(1, 7) == "tokens:" then -- token shards (docs/TEXT.md)
    local p = OPENERS.tokens(name, opts, level)
    return p
  end
  opts = check_opts(opts, where, OPEN_OPTS, level)
  if opts.first ~= nil or opts.count ~= nil or opts.chunks ~= nil then
    local path = name:match("^slr:(.+)$") or
      (name:match("%.slr$") and name)
    if not path then
      error(("sluice: %s: options 'first', 'count' and 'chunks' select "
             .. "records of one slr file (got '%s')"):format(where, name), level)
    end
    local p = OPENERS.slr(path, opts, level)
    return p
  end
  local o = ffi.new("sl_open_opts")
  o.size = ffi.sizeof("sl_open_opts")
  slr_options(o.slr, opts, where, level)
  o.labels = check_string(opts.labels, where, "labels", level)
  o.text_mmap = check_bool(opts.mmap, where, "mmap", false, level) and 1 or 0
  local keep = {} -- the format option structs and strings, alive over sl_open
  format_options(o, opts, where, keep, level)
  wds_options(o, name, opts, where, keep, level)
  local parse = opts.parser
  if opts.schema ~= nil and type(parse) ~= "function" then
    error(("sluice: %s: option 'schema' is for a Lua parser (for other "
           .. "formats the file declares it)"):format(where), level)
  end
  local parse_sp = schema_option(opts.schema, where, level)
  if type(parse) == "string" then
    o.parser = parse
    o.parser_options = check_string(opts.parser_options, where,
                                    "parser_options", level)
    parse = nil
  elseif parse ~= nil and type(parse) ~= "function" then
    error(("sluice: %s: option 'parser' must be a plugin path or a Lua "
           .. "function (got a %s)"):format(where, type(parse)), level)
  end
  local threads = opt_threads(opts, 1, "auto", where, level, INT_MAX,
                              THREADS_AUTO_INT)
  -- tag image: decoding options (threads, policy, ... shared above).
  local io = ffi.new("sl_image_opts")
  image_options(io, opts, where, level)
  o.image = io
  local shipped, env
  if parse then shipped, env = ship(parse, "parser", where, level) end
  -- keep rides along as an extra (ignored) argument so that the option
  -- structs and strings it holds stay alive until sl_open has copied them.
  local p = made(C.sl_open(name, o, OUT), level, nil, keep)
  if parse then
    if tonumber(C.sl_schema_find(C.sl_reader_schema(p._r), "line")) < 0 then
      p:close()
      error(("sluice: %s: a Lua parser needs a text file (samples with a "
             .. "'line' field): '%s'"):format(where, name), level)
    end
    -- The parser stage (lua_host.h, SL__LUA_PARSE): fn(line) -> row,
    -- sample or nil (skip); errors name the file and line.
    p = new_pipeline(new_lua_stage(p, "parse", shipped, env,
                                   {threads = threads}, parse_sp, where, level))
  end
  return p
end

-- sluice.open(name, opts): open_name, and with shuffle = "global" a
-- :global_shuffle of everything the name opens (a file, or a set of files
-- as one data set), its seed and shard options the shuffle's.
function sluice.open(name, opts)
  if type(opts) == "table" and opts.shuffle == "global" then
    local rest = {}
    for k, v in pairs(opts) do
      if not GLOBAL_OPTS[k] and k ~= "shuffle" then rest[k] = v end
    end
    local p = open_name(name, rest, 3)
    local result = global_shuffle(p, {seed = opts.seed, shard = opts.shard,
                                      cache = opts.cache,
                                      threads = opts.threads}, 3)
    return result
  end
  local p = open_name(name, opts, 3)
  return p
end

local OPEN_FILES_OPTS = set("threads", "buffer", "ordered", "shuffle", "seed",
                            "epoch", "window", "shard", "policy",
                            "max_bad_chunks", "max_chunk_bytes")

-- sluice.open_files{names..., threads=, ordered=, shuffle=, seed=, epoch=,
-- window=, shard = {rank=, world=, remainder=}}: sl_open_files.  Names may
-- also be given as the first argument (a string or an array of strings).
function sluice.open_files(names, opts)
  local where = "sluice.open_files()"
  if type(names) == "string" then names = {names} end
  if type(names) ~= "table" then
    error(("sluice: %s: expected a name or an array of names (got a %s)")
          :format(where, type(names)), 2)
  end
  if opts == nil then -- the one-table form: names in the array part
    opts = {}
    for k, v in pairs(names) do
      if type(k) ~= "number" then opts[k] = v end
    end
  end
  opts = check_opts(opts, where, OPEN_FILES_OPTS, 2)
  local n = #names
  if n == 0 then error(("sluice: %s: no file names"):format(where), 2) end
  local arr = ffi.new("const char *[?]", n)
  for i = 1, n do
    if type(names[i]) ~= "string" then
      error(("sluice: %s: name %d must be a string (got a %s)")
            :format(where, i, type(names[i])), 2)
    end
    arr[i - 1] = names[i]
  end
  local o = ffi.new("sl_open_files_opts")
  o.size = ffi.sizeof("sl_open_files_opts")
  slr_options(o.slr, opts, where, 2)
  o.threads = opt_threads(opts, 1, "auto", where, 2, U32_MAX,
                          THREADS_AUTO_U32)
  o.buffer = opt_int(opts, "buffer", 1, 0, where, 2, U32_MAX)
  o.unordered = check_bool(opts.ordered, where, "ordered", true, 2) and 0 or 1
  o.shuffle = check_bool(opts.shuffle, where, "shuffle", false, 2) and 1 or 0
  if opts.seed ~= nil then
    o.seed = check_seed(opts.seed, where, 2)
  end
  o.epoch = opt_int(opts, "epoch", 0, 0, where, 2)
  o.window = opt_int(opts, "window", 1, 0, where, 2, U32_MAX)
  o.rank, o.world, o.remainder = -1, -1, 0
  if opts.shard ~= nil then shard_option(opts.shard, where, o, 2) end
  local p = made(C.sl_open_files(arr, n, o, OUT), 2)
  p._flow = {seed = o.seed, epoch = tonumber(o.epoch)}
  return p
end

-- This process's rank and world size from the launcher's environment
-- (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, PMI_*, PADDLE_TRAINER_*): two
-- numbers, 0 and 1 when none is set.  Raises on inconsistent variables.
function sluice.shard_env()
  local rw = ffi.new("int[2]")
  local rc = C.sl_shard_env(rw, rw + 1)
  if rc < 0 then error(c_message(rc), 2) end
  return rw[0], rw[1]
end

local READER_OPTS = set("schema", "buffer")
function sluice.reader(fn, opts)
  opts = check_opts(opts, "sluice.reader()", READER_OPTS, 2)
  local buffer = opt_int(opts, "buffer", 1, 64, "sluice.reader()", 2)
  local sp = schema_option(opts.schema, "sluice.reader()", 2)
  local shipped, env = ship(fn, "reader", "sluice.reader()", 2)
  local result = made(C.sl__lua_reader(shipped, env, buffer, sp, OUT), 2)
  return result
end

-- --- samples and tensors ----------------------------------------------------------------------

-- sluice.sample(row, schema?): a sample from a table of fields (as a
-- from_table row; the schema inferred from the row when not given), or the
-- sample itself.
function sluice.sample(row, schema)
  if sample.is(row) then return row end
  local sp, why
  if schema ~= nil then
    sp = schema_option(schema, "sluice.sample()", 2)
  else
    sp, why = sample.inferred_schema({row})
    if not sp then error("sluice: sluice.sample(): " .. why, 2) end
  end
  local q
  q, why = sample.build_row(row, info_for(sp), "the row")
  if not q then error("sluice: sluice.sample(): " .. why, 2) end
  return sample.wrap(ffi_gc(q, nil), nil)
end

sluice.tensor = tensor.new
sluice.fields = sample.fields
sluice.release = sample.release
sluice.totable = sample.totable
sluice.device = device.device
sluice.dlpack = device.dlpack

-- sluice.clone(s): a copy of sample s whose fields live in one new buffer
-- of their own size, pinning nothing of s's (a record viewed in its chunk
-- pins the whole chunk: keep clones of samples held beyond the loop).
function sluice.clone(s)
  if not sample.is(s) then
    error(("sluice: sluice.clone(): expected a sample (got a %s)")
          :format(type(s)), 2)
  end
  local p = s[1]
  if not p then error("sluice: this sample was released", 2) end
  local q = C.sl__lua_sample_clone(p)
  if q == nil then error(c_message(), 2) end
  return sample.wrap(q, s[2])
end

-- --- language-model data (docs/TEXT.md) ---------------------------------------

local TOKENS_OPTS = set("seq_len", "shuffle", "seed", "rank", "world",
                        "block", "batch")

-- A seed option: an integer in [0, 2^64) or a uint64_t cdata.

-- sluice.open("tokens:PATTERN", {seq_len=, shuffle=, seed=, rank=, world=,
-- block=, batch=}): every file of the pattern as one sl_tokens_open reader.
local function open_tokens(name, opts, level)
  local where = "sluice.open()"
  opts = check_opts(opts, where, TOKENS_OPTS, level + 1)
  if opts.seq_len == nil then
    error(("sluice: %s: tokens: option 'seq_len' is required"):format(where),
          level + 1)
  end
  local o = ffi.new("sl_tokens_opts")
  o.size = ffi.sizeof("sl_tokens_opts")
  o.seq_len = check_int(opts.seq_len, nil, where, "option 'seq_len'",
                        level + 1)
  o.shuffle = check_bool(opts.shuffle, where, "shuffle", false, level + 1)
    and 1 or 0
  o.seed = check_seed(opts.seed, where, level + 1)
  if (opts.rank == nil) ~= (opts.world == nil) then
    error(("sluice: %s: tokens: options 'rank' and 'world' go together (or "
           .. "neither: then they come from the launcher's environment)")
          :format(where), level + 1)
  end
  if opts.world ~= nil then
    o.world = check_int(opts.world, 1, where, "option 'world'", level + 1)
    o.rank = check_int(opts.rank, 0, where, "option 'rank'", level + 1)
  end
  o.block = opt_int(opts, "block", 1, 1, where, level + 1)
  o.batch = check_bool(opts.batch, where, "batch", false, level + 1) and 1
    or 0
  local p = made(C.sl_tokens_open(name, o, OUT), level + 1)
  return p
end
OPENERS.tokens = open_tokens

local WINDOW_OPTS = set("size", "stride", "field", "drop_remainder")
-- :window{size = N, stride = S, field = "ids", drop_remainder = false}
function Pipeline:window(opts)
  local where = ":window()"
  live(self, where, 2)
  opts = check_opts(opts, where, WINDOW_OPTS, 2)
  local size = check_int(opts.size, 1, where, "option 'size'", 2)
  local stride = opt_int(opts, "stride", 1, 0, where, 2)
  local field = check_string(opts.field, where, "field", 2)
  if field == nil then
    error(("sluice: %s: option 'field' is required"):format(where), 2)
  end
  local drop = check_bool(opts.drop_remainder, where, "drop_remainder",
                          false, 2) and 1 or 0
  local result = made(C.sl_window(take(self, where), field, size, stride,
                                  drop, OUT), 2, self)
  return result
end

-- An array of strings as a const char *[?] (kept alive by the caller).
local function string_array(t, where, what, level)
  if type(t) == "string" then t = {t} end
  if type(t) ~= "table" or #t == 0 then
    error(("sluice: %s: option '%s' must be a name or an array of names")
          :format(where, what), level + 1)
  end
  local arr = ffi.new("const char *[?]", #t)
  for i = 1, #t do
    if type(t[i]) ~= "string" then
      error(("sluice: %s: option '%s': entry %d must be a string (got a %s)")
            :format(where, what, i, type(t[i])), level + 1)
    end
    arr[i - 1] = t[i]
  end
  return arr, #t
end

local PACK_OPTS = set("seq_len", "fields", "eos", "pad", "lookahead", "long")
local LONG_DOCS = enum('"split" or "truncate"', {split = 0, truncate = 1})
-- :pack{seq_len = T, fields = {"ids"}, eos = id, pad = 0, lookahead = 8,
-- long = "split" | "truncate"}
function Pipeline:pack(opts)
  local where = ":pack()"
  live(self, where, 2)
  opts = check_opts(opts, where, PACK_OPTS, 2)
  local o = ffi.new("sl_pack_opts")
  o.size = ffi.sizeof("sl_pack_opts")
  o.seq_len = check_int(opts.seq_len, 1, where, "option 'seq_len'", 2)
  local names
  if opts.fields ~= nil then
    names, o.nfields = string_array(opts.fields, where, "fields", 2)
    o.fields = names
  end
  if opts.eos ~= nil then
    o.has_eos = 1
    o.eos = check_int(opts.eos, -2^31, where, "option 'eos'", 2)
  end
  o.pad = opt_int(opts, "pad", -2^31, 0, where, 2)
  o.lookahead = opt_int(opts, "lookahead", 1, 0, where, 2)
  if opts.long ~= nil then
    o.truncate = LONG_DOCS(opts.long, where, "option 'long'", 2)
  end
  local result = made(C.sl_pack(take(self, where), o, OUT), 2, self)
  return result
end

-- {rows =, tokens =, efficiency =} of the nearest pack stage of the chain.
function Pipeline:pack_stats()
  local r = live(self, ":pack_stats()", 2)
  local v = ffi.new("uint64_t[2]")
  local e = ffi.new("double[1]")
  local rc = C.sl_pack_stats(r, v, v + 1, e)
  if rc < 0 then error(c_message(rc), 2) end
  return {rows = tonumber(v[0]), tokens = tonumber(v[1]), efficiency = e[0]}
end

-- {field = value, ...} as sl_pad_value[?] (kept alive by the caller).
local function pad_values(t, where, level)
  if t == nil then return nil, 0 end
  if type(t) ~= "table" then
    error(("sluice: %s: option 'pad' must be a table {field = value} (got a "
           .. "%s)"):format(where, type(t)), level + 1)
  end
  local names = {}
  for k, v in pairs(t) do
    if type(k) ~= "string" or type(v) ~= "number" then
      error(("sluice: %s: option 'pad' maps field names to numbers (got %s "
             .. "= %s)"):format(where, tostring(k), tostring(v)), level + 1)
    end
    names[#names + 1] = k
  end
  table.sort(names)
  local arr = ffi.new("sl_pad_value[?]", #names)
  for i, k in ipairs(names) do
    arr[i - 1].field = k
    arr[i - 1].value = t[k]
  end
  return arr, #names, names
end

local PADDED_OPTS = set("pad", "to", "drop_remainder")
-- :padded_batch(n, {pad = {ids = 0}, to = "longest" | T, drop_remainder =})
function Pipeline:padded_batch(n, opts)
  local where = ":padded_batch()"
  live(self, where, 2)
  check_int(n, 1, where, "batch size", 2)
  opts = check_opts(opts, where, PADDED_OPTS, 2)
  local o = ffi.new("sl_padded_batch_opts")
  o.size = ffi.sizeof("sl_padded_batch_opts")
  local pads, npad, keep = pad_values(opts.pad, where, 2)
  o.pad, o.npad = pads, npad
  if opts.to ~= nil and opts.to ~= "longest" then
    o.to = check_int(opts.to, 1, where, "option 'to' (\"longest\" or a length)",
                     2)
  end
  o.drop_remainder = check_bool(opts.drop_remainder, where, "drop_remainder",
                                false, 2) and 1 or 0
  local result = made(C.sl_padded_batch(take(self, where), n, o, OUT), 2,
                      self)
  local _ = keep
  return result
end

local BUCKET_OPTS = set("boundaries", "batch_sizes", "length", "pad",
                        "pad_to_bucket", "drop_remainder")
-- :bucket_batch{boundaries = {64, 128}, batch_sizes = {32, 16, 8},
-- length = "ids", pad = {ids = 0}, pad_to_bucket =, drop_remainder =}
function Pipeline:bucket_batch(opts)
  local where = ":bucket_batch()"
  live(self, where, 2)
  opts = check_opts(opts, where, BUCKET_OPTS, 2)
  local b, s = opts.boundaries or {}, opts.batch_sizes
  if type(b) ~= "table" or type(s) ~= "table" or #s ~= #b + 1 then
    error(("sluice: %s: options 'boundaries' (n lengths) and 'batch_sizes' "
           .. "(n + 1 sizes) are arrays"):format(where), 2)
  end
  local o = ffi.new("sl_bucket_batch_opts")
  o.size = ffi.sizeof("sl_bucket_batch_opts")
  local bounds = ffi.new("int64_t[?]", #b + 1)
  local sizes = ffi.new("size_t[?]", #s)
  for i = 1, #b do
    bounds[i - 1] = check_int(b[i], 0, where, "a boundary", 2)
  end
  for i = 1, #s do
    sizes[i - 1] = check_int(s[i], 1, where, "a batch size", 2)
  end
  o.boundaries, o.nboundaries, o.batch_sizes = bounds, #b, sizes
  o.length = check_string(opts.length, where, "length", 2)
  local pads, npad, keep = pad_values(opts.pad, where, 2)
  o.pad, o.npad = pads, npad
  o.pad_to_bucket = check_bool(opts.pad_to_bucket, where, "pad_to_bucket",
                               false, 2) and 1 or 0
  o.drop_remainder = check_bool(opts.drop_remainder, where, "drop_remainder",
                                false, 2) and 1 or 0
  local result = made(C.sl_bucket_batch(take(self, where), o, OUT), 2, self)
  local _ = keep
  return result
end

local MIX_OPTS = set("weights", "seed", "stop", "rerandomize")
local MIX_STOP = enum('"first", "all" or "never"',
                      {first = 0, all = 1, never = 2})
-- sluice.mix({p1, p2, ...}, {weights = {...}, seed =, stop = "first" |
-- "all" | "never"}): the pipelines (all taken) drawn by weight.
function sluice.mix(list, opts)
  local where = "sluice.mix()"
  if type(list) ~= "table" or is_pipeline(list) then
    error(("sluice: %s: expects an array of pipelines"):format(where), 2)
  end
  opts = check_opts(opts, where, MIX_OPTS, 2)
  local o = ffi.new("sl_mix_opts")
  o.size = ffi.sizeof("sl_mix_opts")
  local w
  if opts.weights ~= nil then
    if type(opts.weights) ~= "table" or #opts.weights ~= #list then
      error(("sluice: %s: option 'weights' needs one number per pipeline "
             .. "(%d)"):format(where, #list), 2)
    end
    w = ffi.new("double[?]", #list)
    for i = 1, #list do
      local x = opts.weights[i]
      if type(x) ~= "number" or x < 0 or x ~= x or x == math.huge then
        error(("sluice: %s: weight %d must be a finite number >= 0 (got %s)")
              :format(where, i, tostring(x)), 2)
      end
      w[i - 1] = x
    end
    o.weights = w
  end
  o.seed = check_seed(opts.seed, where, 2)
  o.keep_order = check_bool(opts.rerandomize, where, "rerandomize", true, 2)
    and 0 or 1
  if opts.stop ~= nil then
    o.stop = MIX_STOP(opts.stop, where, "option 'stop'", 2)
  end
  local arr, n = pipelines_arg(where, list, 2)
  local result = made(C.sl_mix(arr, n, o, OUT), 2, flow_of(list))
  return result
end

-- The nearest mix stage's draws: {counts = {...}, shares = {...}} per input.
function Pipeline:mix_counts()
  local r = live(self, ":mix_counts()", 2)
  local n = ffi.new("size_t[1]")
  local rc = C.sl_mix_counts(r, nil, 0, n)
  if rc < 0 then error(c_message(rc), 2) end
  local k = tonumber(n[0])
  local c = ffi.new("uint64_t[?]", k)
  C.sl_mix_counts(r, c, k, n)
  local counts, shares, total = {}, {}, 0
  for i = 1, k do
    counts[i] = tonumber(c[i - 1])
    total = total + counts[i]
  end
  for i = 1, k do shares[i] = total > 0 and counts[i] / total or 0 end
  return {counts = counts, shares = shares}
end

-- --- reshaping and distributing (src/stages/unbatch.c, interleave.c, shard.c) --

-- The LoD field names for :unbatch() / :rebatch(): opts.lod (a name or an
-- array; false or {} for none), else those of the :batch() right before.
local function lod_option(self, opts, where, level)
  local lod = opts.lod
  if lod == nil then lod = self._lod end
  if not lod or (type(lod) == "table" and #lod == 0) then return nil, 0 end
  return string_array(lod, where, "lod", level + 1)
end

local UNBATCH_OPTS = set("lod")
-- :unbatch{lod = {...}}: each batch split into its rows (tf.data's unbatch).
function Pipeline:unbatch(opts)
  local where = ":unbatch()"
  live(self, where, 2)
  opts = check_opts(opts, where, UNBATCH_OPTS, 2)
  local names, n = lod_option(self, opts, where, 2)
  local result = made(C.sl_unbatch(take(self, where), names, n, OUT), 2, self)
  return result
end

local REBATCH_OPTS = set("drop_last", "lod")
-- :rebatch(n, {drop_last = false, lod = {...}}): rows re-cut into batches
-- of n (tf.data's rebatch: unbatch then batch).
function Pipeline:rebatch(n, opts)
  local where = ":rebatch()"
  live(self, where, 2)
  check_int(n, 1, where, "batch size", 2)
  opts = check_opts(opts, where, REBATCH_OPTS, 2)
  local names, k = lod_option(self, opts, where, 2)
  local lod = opts.lod == nil and self._lod or opts.lod
  local o = ffi.new("sl_batch_opts")
  o.drop_last = check_bool(opts.drop_last, where, "drop_last", false, 2)
    and 1 or 0
  local result = made(C.sl_rebatch(take(self, where), n, o, names, k, OUT), 2,
                      self)
  -- The LoD fields stay LoD fields (batch concatenates their rows again).
  result._lod = type(lod) == "string" and {lod} or lod or nil
  return result
end

local INTERLEAVE_OPTS = set("cycle", "block", "threads")
-- sluice.interleave(sources, {cycle =, block = 1, threads = 0}): tf.data's
-- interleave over pipelines, or over sluice.open names opened lazily.
function sluice.interleave(sources, opts)
  local where = "sluice.interleave()"
  if type(sources) ~= "table" or is_pipeline(sources) or #sources == 0 then
    error(("sluice: %s: expects a non-empty array of pipelines or of "
           .. "source names"):format(where), 2)
  end
  opts = check_opts(opts, where, INTERLEAVE_OPTS, 2)
  local n = #sources
  local o = ffi.new("sl_interleave_opts")
  o.size = ffi.sizeof("sl_interleave_opts")
  local cycle = opt_int(opts, "cycle", 1, n, where, 2, U32_MAX)
  o.cycle = cycle < n and cycle or n
  o.block = opt_int(opts, "block", 1, 1, where, 2)
  local threads = opt_threads(opts, 0, 0, where, 2, U32_MAX, THREADS_AUTO_U32)
  if threads >= 2^31 and threads ~= THREADS_AUTO_U32 then
    error(("sluice: %s: option 'threads' is too large (%s)")
          :format(where, tostring(threads)), 2)
  end
  o.threads = threads
  if type(sources[1]) == "string" then
    local names, k = string_array(sources, where, "sources", 2)
    local result = made(C.sl_interleave_open(names, k, o, OUT), 2)
    return result
  end
  local arr, k = pipelines_arg(where, sources, 2)
  local result = made(C.sl_interleave(arr, k, o, OUT), 2, flow_of(sources))
  return result
end

-- (SHARD_POLICIES, sl_shard_policy's values, is open_files'.)
local STAGE_REMAINDER = enum('"uneven", "drop" or "pad"', SHARD_POLICIES)
local SHARD_STAGE_OPTS = set("remainder")
-- :shard(world, rank, {remainder = "uneven" | "drop" | "pad"}), or
-- :shard({remainder =}) / :shard() with world and rank from the launcher's
-- environment (sluice.shard_env).
function Pipeline:shard(world, rank, opts)
  local where = ":shard()"
  live(self, where, 2)
  if type(world) == "table" and rank == nil and opts == nil then
    world, opts = nil, world
  end
  if world == nil then
    if rank ~= nil then
      error(("sluice: %s: rank given without world"):format(where), 2)
    end
    local rw = ffi.new("int[2]")
    local rc = C.sl_shard_env(rw, rw + 1)
    if rc < 0 then error(c_message(rc), 2) end
    world, rank = rw[1], rw[0]
  else
    check_int(world, 1, where, "world", 2)
    check_int(rank, 0, where, "rank", 2)
    if world >= 2^31 then
      error(("sluice: %s: world %s is too large"):format(where,
            tostring(world)), 2)
    end
    if rank >= world then
      error(("sluice: %s: rank %d is not in [0, world %d)")
            :format(where, rank, world), 2)
    end
  end
  opts = check_opts(opts, where, SHARD_STAGE_OPTS, 2)
  local o = ffi.new("sl_shard_opts")
  o.size = ffi.sizeof("sl_shard_opts")
  o.remainder = SHARD_POLICIES.uneven
  if opts.remainder ~= nil then
    o.remainder = STAGE_REMAINDER(opts.remainder, where, "option 'remainder'",
                                  2)
  end
  local result = made(C.sl_shard(take(self, where), world, rank, o, OUT), 2,
                      self)
  return result
end

-- --- samplers and splits (src/stages/sampler.c) ---------------------------------
-- Positions are 0-based, as sluice's positions and ctx.index are.  Types
-- are checked here; values (ranges, sums, lengths) by C, whose messages
-- count entries in words ("the 2nd weight"), the same from Lua and C.

-- A Lua array of numbers as a C array of `ctype` (room for at least one).
local function number_array(t, ctype, where, what, level)
  if type(t) ~= "table" or is_pipeline(t) then
    error(("sluice: %s: %s must be an array of numbers (got a %s)")
          :format(where, what, type(t)), level + 1)
  end
  local n = #t
  local a = ffi.new(ctype .. "[?]", n > 0 and n or 1)
  for i = 1, n do
    local x = t[i]
    if type(x) ~= "number" then
      error(("sluice: %s: entry %d of %s must be a number (got a %s)")
            :format(where, i, what, type(x)), level + 1)
    end
    if ctype == "uint64_t" and (x ~= floor(x) or x < 0 or x >= 2^53) then
      error(("sluice: %s: entry %d of %s must be an integer >= 0 (got %s)")
            :format(where, i, what, tostring(x)), level + 1)
    end
    a[i - 1] = x
  end
  return a, n
end

local WEIGHTED_OPTS = set("num_samples", "replacement", "seed", "cache")
-- :weighted_sample(weights, {num_samples =, replacement = true, seed =}):
-- PyTorch's WeightedRandomSampler over this pipeline's positions.
function Pipeline:weighted_sample(weights, opts)
  local where = ":weighted_sample()"
  local r = live(self, where, 2)
  local w, n = number_array(weights, "double", where, "weights", 2)
  opts = check_opts(opts, where, WEIGHTED_OPTS, 2)
  local o = ffi.new("sl_weighted_sample_opts")
  o.size = ffi.sizeof("sl_weighted_sample_opts")
  o.num_samples = opt_int(opts, "num_samples", 1, 0, where, 2)
  o.without_replacement = check_bool(opts.replacement, where, "replacement",
                                     true, 2) and 0 or 1
  o.seed = check_seed(opts.seed == nil and self._flow and self._flow.seed
                      or opts.seed, where, 2)
  o.cache = cache_option(opts, where, 2)
  -- One weight per sample: checked before the pipeline is taken.
  if C.sl_reader_length(r, LENGTH) == 0 and tonumber(LENGTH[0]) ~= n then
    error(("sluice: %s: %d weights for a pipeline of %d samples (one "
           .. "weight per sample)"):format(where, n, tonumber(LENGTH[0])), 2)
  end
  local result = made(C.sl_weighted_sample(take(self, where), w, n, o, OUT),
                      2, self)
  return result
end

-- :global_shuffle({seed =, shard = {rank =, world =, remainder =}, cache =,
-- threads =}): every sample of this pipeline (it needs random access and a
-- known length) in a new uniform order each pass, the rank's share of it
-- (sl_global_shuffle; rank and world from the launcher's environment unless
-- `shard` gives them); `cache` the most bytes of decoded chunks kept (a
-- size, false for none; default: as the memory budget allows); `threads`
-- the workers that fetch ahead (0, the default: on the caller's thread).
function global_shuffle(p, opts, level)
  local where = ":global_shuffle()"
  live(p, where, level)
  opts = check_opts(opts, where, GLOBAL_OPTS, level)
  local o = ffi.new("sl_global_shuffle_opts")
  o.size = ffi.sizeof("sl_global_shuffle_opts")
  o.seed = check_seed(opts.seed == nil and p._flow and p._flow.seed
                      or opts.seed, where, level)
  o.rank, o.world, o.remainder = 0, 0, 0
  if opts.shard ~= nil then shard_option(opts.shard, where, o, level) end
  o.threads = opt_threads(opts, 0, 0, where, level, U32_MAX, THREADS_AUTO_U32)
  o.cache = cache_option(opts, where, level)
  local result = made(C.sl_global_shuffle(take(p, where), o, OUT), level, p)
  return result -- not a tail call: the error's level counts this frame
end

function Pipeline:global_shuffle(opts)
  local result = global_shuffle(self, opts, 3)
  return result
end

-- :subset(indices): PyTorch's Subset; indices are 0-based positions.
function Pipeline:subset(indices)
  local where = ":subset()"
  live(self, where, 2)
  local idx, n = number_array(indices, "uint64_t", where, "indices", 2)
  local result = made(C.sl_subset(take(self, where), idx, n, OUT), 2, self)
  return result
end

local SPLIT_OPTS = set("seed")
-- sluice.random_split(source, sizes, {seed =}): PyTorch's random_split;
-- returns one pipeline per size (several values), sharing the source.
function sluice.random_split(source, sizes, opts)
  local where = "sluice.random_split()"
  live(source, where, 2)
  local s, k = number_array(sizes, "double", where, "sizes", 2)
  if k == 0 then
    error(("sluice: %s: needs at least one size"):format(where), 2)
  end
  opts = check_opts(opts, where, SPLIT_OPTS, 2)
  local seed = check_seed(opts.seed == nil and source._flow
                          and source._flow.seed or opts.seed, where, 2)
  local parts = ffi.new("sl_reader *[?]", k)
  local rc = C.sl_random_split(take(source, where), s, k, seed, parts)
  if rc < 0 then error(c_message(rc), 2) end
  local out = {}
  for i = 1, k do out[i] = new_pipeline(parts[i - 1], source) end
  return unpack(out, 1, k)
end

-- sluice.rng(seed, epoch, index): the generator ctx.rng is for sample
-- `index` of epoch `epoch` of a stage with seed `seed` (the same draws,
-- outside the pipeline; sluice.rng and docs/LUA.md, "Randomness").
-- sluice.json(text) / sluice.json.decode(text): JSON text (a .json member
-- of a WebDataset shard, a bytes field) as Lua tables (sluice/json.lua,
-- which worker states can require too).
sluice.json = require "sluice.json"

sluice.rng = function(seed, epoch, index)
  local r = rng.new(seed, epoch, index)
  return r
end

function sluice.version()
  return ffi_string(C.sl_version())
end

return sluice
