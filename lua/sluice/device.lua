-- sluice.device: the double buffer in the DSL and the device side of
-- batches (docs/DEVICE.md).
--
--   local p = sluice.open("slr:train.slr"):batch(256)
--     :double_buffer{device = "cuda:0", slots = 2}
--   -- options: device ("cpu", "cuda", "cuda:N", "auto": the default), slots
--   -- (1..256, default 2), stream (the consumer's cudaStream_t, a cdata),
--   -- release_wait_ms (see sl_double_buffer_opts)
--   for b in p:iter() do
--     local where, ptr = sluice.device(b, "image")  -- "cuda:0", void *
--     ...
--     sluice.release(b)  -- frees b's slot at once (else: when collected)
--   end
--
-- Pipeline:double_buffer wraps sl_double_buffer.  A slot is reused only
-- when every reference to its batch is gone, and a Lua batch lets go of its
-- reference when it is collected (or sluice.release'd) and no tensor view
-- of it is left.  So the pipeline it
-- returns counts the batches it handed out that are still alive, and when
-- they are as many as the slots it runs a full garbage collection before
-- asking C for the next one: a loop that drops each batch never sees the
-- "holds all slots" error, and one that keeps them does, with C's message.
-- Releasing batches explicitly spares that collection.
--
-- The fields of a batch on a CUDA device hold device memory: read them from
-- Lua only through sluice.device (the pointer) or sluice.dlpack, never by
-- indexing (that reads host memory at a device address).
local ffi = require "ffi"
local C = require "sluice.cdef"
local sample = require "sluice.sample"

local function declare(probe, decl)
  if not pcall(ffi.sizeof, probe) or ffi.sizeof(probe) == nil then
    ffi.cdef(decl)
  end
end

-- DLPack's legacy DLManagedTensor (dlpack.h 0.6 and later), enums as ints.
declare("DLManagedTensor", [[
typedef struct DLManagedTensor {
  struct {
    void *data;
    struct { int device_type; int device_id; } device;
    int ndim;
    struct { uint8_t code; uint8_t bits; uint16_t lanes; } dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
  } dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
]])


local M = {}

local type, error, tostring, pairs = type, error, tostring, pairs
local setmetatable, collectgarbage = setmetatable, collectgarbage
local c_message = sample.c_message
local reader_next = C.sl_reader_next

local DEVICE_NAMES = {[1] = "cpu", [2] = "cuda", [3] = "cuda_host"}

-- "cpu", "cuda", "cuda:N" and "auto" are what sl_double_buffer accepts;
-- checked here too so that a typo is a misuse raised before the upstream
-- pipeline is taken.
local function valid_device(d)
  if d == "cpu" or d == "auto" or d == "cuda" then return true end
  local n = d:match("^cuda:(%d+)$")
  return n ~= nil and #n <= 6
end

-- The pipeline's own next and iter.  Batches get a finalizer each (not the
-- release blocks of Pipeline:next, where one live sample would pin fifteen
-- others and their slots), and a full collection runs when the batches
-- handed out that are still alive - or pinned by a tensor view - fill every
-- slot (see the top).
local function reclaiming(p, slots, live)
  local handed = setmetatable({}, {__mode = "k"})
  local function next_batch(self)
    local r = self._r
    if not r then live(self, ":next()", 2) end
    local alive = 0
    for s in pairs(handed) do
      if s[1] or s[3] then alive = alive + 1 end
    end
    if alive >= slots then
      collectgarbage("collect")
      sample.flush()
    end
    local out = self._out
    local rc = reader_next(r, out)
    if rc == 0 then
      local s = sample.wrap(out[0], nil)
      out[0] = nil
      handed[s] = true
      return s
    elseif rc == -1 then
      return nil
    end
    error(c_message(rc), 0)
  end
  p.next = next_batch
  p.iter = function(self)
    live(self, ":iter()", 2)
    return next_batch, self
  end
end

local DB_OPTS = {device = true, slots = true, stream = true,
                 release_wait_ms = true}

-- Adds Pipeline:double_buffer.  `h` holds init.lua's helpers: live, take,
-- made, check_opts, check_int, OUT.
function M.install(Pipeline, h)
  function Pipeline:double_buffer(opts)
    local where = ":double_buffer()"
    h.live(self, where, 2)
    opts = h.check_opts(opts, where, DB_OPTS, 2)
    local device = opts.device
    if device == nil then device = "auto" end
    if type(device) ~= "string" or not valid_device(device) then
      error(("sluice: %s: option 'device' must be \"cpu\", \"cuda\", "
             .. "\"cuda:N\" or \"auto\" (got %s)")
            :format(where, type(device) == "string" and ("\"" .. device .. "\"")
                    or tostring(device)), 2)
    end
    local slots = opts.slots == nil and 2 or
      h.check_int(opts.slots, 1, where, "option 'slots'", 2)
    if slots > 256 then
      error(("sluice: %s: option 'slots' must be at most 256 (got %d)")
            :format(where, slots), 2)
    end
    local stream = opts.stream
    if stream ~= nil and type(stream) ~= "cdata" then
      error(("sluice: %s: option 'stream' must be a cudaStream_t (a cdata "
             .. "pointer; got a %s)"):format(where, type(stream)), 2)
    end
    local wait = opts.release_wait_ms == nil and 0 or
      h.check_int(opts.release_wait_ms, 0, where, "option 'release_wait_ms'",
                  2)
    local o = ffi.new("sl_double_buffer_opts")
    o.size = ffi.sizeof("sl_double_buffer_opts")
    o.device = device
    o.slots = slots
    o.stream = stream and ffi.cast("void *", stream) or nil
    o.release_wait_ms = wait
    local p = h.made(C.sl_double_buffer(h.take(self, where), o, h.OUT), 2,
                     self)
    reclaiming(p, slots, h.live)
    return p
  end
end

-- The raw sl_sample* of a live sample object, raising for anything else.
local function sample_ptr(s, where, level)
  if not sample.is(s) then
    error(("sluice: %s: expected a sample (got a %s)"):format(where, type(s)),
          level + 1)
  end
  local p = s[1]
  if not p then
    error(("sluice: %s: the sample was released"):format(where), level + 1)
  end
  return p
end

local ID = ffi.new("int[1]")

-- sluice.device(s, name): where field `name` of sample s lives ("cpu",
-- "cuda:N", "cuda_host") and its data pointer (a void * valid while s is).
function M.device(s, name)
  local where = "sluice.device()"
  local p = sample_ptr(s, where, 2)
  if type(name) ~= "string" then
    error(("sluice: %s: the field name must be a string (got a %s)")
          :format(where, type(name)), 2)
  end
  local t = C.sl_sample_field(p, name)
  if t == nil then error(c_message(), 2) end
  local ty = tonumber(C.sl_tensor_device(t, ID))
  local d = DEVICE_NAMES[ty] or "unknown"
  if ty == 2 then d = d .. ":" .. ID[0] end
  return d, ffi.cast("void *", t.data)
end

local function delete(m)
  m.deleter(m)
end

-- sluice.dlpack(s, name): field `name` of sample s as a DLManagedTensor*
-- (sl_sample_to_dlpack), holding the batch until its deleter runs.  The
-- cdata runs the deleter when collected; to hand the tensor to a consumer
-- that calls the deleter itself, detach that first: ffi.gc(m, nil).
function M.dlpack(s, name)
  local where = "sluice.dlpack()"
  local p = sample_ptr(s, where, 2)
  if type(name) ~= "string" then
    error(("sluice: %s: the field name must be a string (got a %s)")
          :format(where, type(name)), 2)
  end
  local i = C.sl_sample_index(p, name)
  if i < 0 then error(c_message(i), 2) end
  local out = ffi.new("DLManagedTensor *[1]")
  local rc = C.sl_sample_to_dlpack(p, i, out)
  if rc < 0 then error(c_message(rc), 2) end
  return ffi.gc(out[0], delete)
end

return M
