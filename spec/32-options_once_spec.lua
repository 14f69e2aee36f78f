-- Options are validated once, in C: for a bad option that reaches the C
-- constructor, the Lua error is the constructor's sl_last_error, unchanged
-- (docs/LUA.md, "Errors").  Each case builds the stage twice, from Lua and
-- by calling the C constructor through the FFI with what Lua passes, and
-- compares the messages: a Lua check of its own with other words fails here.
-- What the FFI would lose (a fraction, a negative count, a string) is
-- checked in Lua by one helper per kind; those cases say so at the end.
local ffi = require "ffi"
local sluice = require "sluice"
local C = require "sluice.cdef"
local shipper = require "sluice.ship"
local H = dofile "spec/helper.lua"
local misuse = H.misuse

local OUT = ffi.new("sl_reader *[1]")
local SHIPPED = ffi.new("sl__shipped *[1]")

-- The reader a C constructor returned (rc 0), for the next one to take.
local function reader(rc)
  assert.equal(0, rc)
  local r = OUT[0]
  OUT[0] = nil
  return r
end

-- sl_last_error after a C constructor failed with rc (its upstream taken).
local function c_error(rc)
  assert.is_true(rc < 0)
  return ffi.string(C.sl_last_error())
end

local function c_range(n) return reader(C.sl_reader_range(n, OUT)) end

-- A C map or filter (sl__lua_stage) of fn over up with options `o`.
local function c_lua_stage(up, kind, fn, o)
  local at, data, name = shipper.encode(fn, kind)
  assert.equal(0, C.sl__shipped_new(kind, at, data, data and #data or 0, name,
                                    SHIPPED))
  local shipped = ffi.gc(SHIPPED[0], C.sl__shipped_release)
  local env = ffi.gc(C.sl__lua_env_new(nil, nil), C.sl__lua_env_release)
  local opts = ffi.new("sl__lua_stage_opts", {threads = 1, ordered = 1})
  for k, v in pairs(o or {}) do opts[k] = v end
  local KIND = {map = C.SL__LUA_MAP, filter = C.SL__LUA_FILTER}
  return C.sl__lua_stage(up, KIND[kind], shipped, env, opts, nil, OUT)
end

local function id(s) return s end
local function odd(s) return s.i % 2 == 1 end

describe("options validated once, in C", function()
  it("batch: a size too large", function()
    local o = ffi.new("sl_batch_opts")
    assert.equal(c_error(C.sl_batch(c_range(3), 2^62, o, OUT)),
                 misuse(function() sluice.range(3):batch(2^62) end))
  end)

  it("map and filter: threads past the limit, a negative deadline", function()
    assert.equal(c_error(c_lua_stage(c_range(3), "map", id,
                                     {threads = 100000})),
                 misuse(function() sluice.range(3):map(id, {threads = 100000}) end))
    assert.equal(c_error(c_lua_stage(c_range(3), "filter", odd,
                                     {deadline = -1})),
                 misuse(function() sluice.range(3):filter(odd, {deadline = -1}) end))
  end)

  it("prefetch(\"auto\"): max_depth past its range", function()
    local o = ffi.new("sl_prefetch_auto_opts")
    o.size = ffi.sizeof(o)
    o.max_depth = 0xffffffff -- what Lua passes for a larger count
    assert.equal(c_error(C.sl_prefetch_auto(c_range(3), o, OUT)),
                 misuse(function()
                   sluice.range(3):prefetch("auto", {max_depth = 2^40})
                 end))
  end)

  it("shard: remainder pad over an upstream of unknown length", function()
    local o = ffi.new("sl_shard_opts")
    o.size = ffi.sizeof(o)
    o.remainder = C.SL_SHARD_PAD
    local up = reader(c_lua_stage(c_range(5), "filter", odd))
    assert.equal(c_error(C.sl_shard(up, 2, 0, o, OUT)),
                 misuse(function()
                   sluice.range(5):filter(odd):shard(2, 0, {remainder = "pad"})
                 end))
  end)

  it("open_files: a rank outside [0, world)", function()
    local path = "tests/data/golden-v1.slr"
    local names = ffi.new("const char *[1]", {path})
    local o = ffi.new("sl_open_files_opts")
    o.size = ffi.sizeof(o)
    o.threads, o.rank, o.world = 1, 3, 2
    assert.equal(c_error(C.sl_open_files(names, 1, o, OUT)),
                 misuse(function()
                   sluice.open_files({path}, {shard = {rank = 3, world = 2}})
                 end))
  end)

  it("a uint32 option past 2^32 is too large, not wrapped to 0", function()
    -- 2^32 threads would reach C as 0 (the default, 1 thread) and run.
    local path = "tests/data/golden-v1.slr"
    local err = misuse(function()
      sluice.open_files({path}, {threads = 2^32})
    end)
    assert.matches("threads must be at most 1024, got 4294967295", err,
                   1, true)
    err = misuse(function()
      sluice.open_files({path}, {threads = 2^32 + 1})
    end)
    assert.matches("threads must be at most 1024, got 4294967295", err,
                   1, true)
  end)

  it("tokens: seq_len 0", function()
    local dir = H.tmpdir()
    H.write(dir .. "/a.bin", ("\0\0"):rep(64))
    local name = "tokens:" .. dir .. "/a.bin"
    local o = ffi.new("sl_tokens_opts")
    o.size = ffi.sizeof(o)
    local c = c_error(C.sl_tokens_open(name, o, OUT))
    local lua = misuse(function() sluice.open(name, {seq_len = 0}) end)
    H.rmdir(dir)
    assert.matches("seq_len", c, 1, true)
    assert.equal(c, lua)
  end)

  it("leaves to one Lua helper only what the FFI would lose", function()
    -- -2 would wrap around in a uint64_t, 1.5 would be truncated, a string
    -- does not convert: the same words for every stage, naming it.
    assert.equal("sluice: :take(): count (or -1: all) must be an integer >= 0 "
                 .. "(got -2)", misuse(function() sluice.range(3):take(-2) end))
    assert.equal("sluice: :shuffle(): buffer size must be an integer >= 1 "
                 .. "(got 1.5)", misuse(function() sluice.range(3):shuffle(1.5) end))
    assert.equal("sluice: :shard(): world must be an integer >= 1 (got x)",
                 misuse(function() sluice.range(3):shard("x", 0) end))
    assert.equal("sluice: :shuffle(): option 'seed' must be an integer in "
                 .. "[0, 2^64) (got -1)",
                 misuse(function() sluice.range(3):shuffle(2, {seed = -1}) end))
    assert.equal("sluice: :pack(): option 'long' must be \"split\" or "
                 .. "\"truncate\" (got cut)",
                 misuse(function()
                   sluice.range(3):pack{seq_len = 2, long = "cut"}
                 end))
  end)
end)
