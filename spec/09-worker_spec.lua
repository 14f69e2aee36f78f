-- 09-worker_spec.lua: sluice.worker, the per-sample protocol of
-- src/script/lua_host.h, called directly in this state (FFI pointers stand
-- in for the lightuserdata the stages pass).  Reference counts show who
-- owns what after each call.
local ffi = require "ffi"
local sluice = require "sluice"
local worker = require "sluice.worker"
local C = require "sluice.cdef"

-- A fresh sl_sample* {i: i64[] = v} with one reference (ours), from a range
-- reader through the C API.
local function raw_sample(v)
  local r = ffi.new("sl_reader *[1]")
  assert.equal(0, C.sl_reader_range(v + 1, r))
  local out = ffi.new("sl_sample *[1]")
  for _ = 0, v do
    if out[0] ~= nil then C.sl_sample_release(out[0]) end
    assert.equal(0, C.sl_reader_next(r[0], out))
  end
  C.sl_reader_destroy(r[0])
  return out[0]
end

local function refs(p)
  return C.sl_sample_refcount(p)
end

-- What a stage passes: a pointer of another type than the caller's cdata
-- (a lightuserdata there), so the worker's cdata is its own.
local function lud(p)
  return ffi.cast("void *", p)
end

local function schema_of(p)
  return ffi.cast("sl_schema *", C.sl_sample_schema(p))
end

describe("sluice.worker", function()
  local slot

  before_each(function()
    slot = ffi.new("sl_sample *[1]")
    collectgarbage()
  end)

  describe(".map()", function()
    it("moves the input's reference to the slot when fn returns it", function()
      local p = raw_sample(3)
      C.sl_sample_retain(p) -- ours, to watch the count; the other is handed over
      worker.map(function(s) return s end, lud(p), slot)
      assert.equal(p, slot[0])
      collectgarbage()
      assert.equal(2, refs(p)) -- ours + C's (the handed one, moved)
      C.sl_sample_release(slot[0])
      C.sl_sample_release(p)
    end)

    it("changes a sole-owner input in place", function()
      local p = raw_sample(3)
      worker.map(function(s) s.i = s.i + 10 return s end, lud(p), slot)
      assert.equal(p, slot[0])
      assert.equal(13, tonumber(ffi.cast("int64_t *", C.sl_sample_at(p, 0).data)[0]))
      C.sl_sample_release(slot[0])
    end)

    it("releases the input when fn returns another sample", function()
      local p = raw_sample(1)
      C.sl_sample_retain(p)
      local other = sluice.range(1):next()
      worker.map(function() return other end, lud(p), slot)
      assert.equal(1, refs(p)) -- only ours is left
      assert.are_not.equal(p, slot[0])
      local _, err = pcall(function() return other.i end)
      assert.matches("sluice: this sample was released$", err)
      C.sl_sample_release(slot[0])
      C.sl_sample_release(p)
    end)

    it("gives C its own reference when views of the result are out", function()
      local p = raw_sample(0)
      C.sl_sample_retain(p)
      local view
      worker.map(function(s)
        s.v = sluice.tensor("f32", {2})
        view = s.v
        return s
      end, lud(p), slot)
      local q = slot[0]
      assert.equal("f32", view.dtype)
      assert.equal(2, refs(q)) -- C's + the view's owner
      view = nil -- luacheck: ignore 311
      -- A small sample whose view was taken shares a release block
      -- (sample.lua) with the next ones: it goes once the block is full
      -- and unreachable.
      coroutine.wrap(function()
        for _ = 1, require("sluice.sample").BLOCK do
          worker.map(function(s)
            s.v = sluice.tensor("f32", {2})
            local v = s.v
            return v and s
          end, lud(raw_sample(1)), slot)
          C.sl_sample_release(slot[0])
        end
      end)()
      collectgarbage()
      collectgarbage()
      require("sluice.sample").flush()
      assert.equal(1, refs(q))
      assert.equal(1, refs(p)) -- the input (copied on write) was released
      C.sl_sample_release(q)
      C.sl_sample_release(p)
    end)

    it("raises when fn returns nothing or a non-sample", function()
      local p = raw_sample(0)
      local ok, err = pcall(worker.map, function() end, lud(p), slot)
      assert.is_false(ok)
      assert.equal("map function returned nothing (it must return a sample)", err)
      ok, err = pcall(worker.map, function() return {i = 1} end, lud(raw_sample(0)), slot)
      assert.is_false(ok)
      assert.equal("map function returned a table (it must return a sample)", err)
      assert.is_nil(slot[0] ~= nil and slot[0] or nil)
    end)

    it("releases the input on an error (through the collector)", function()
      local p = raw_sample(0)
      C.sl_sample_retain(p)
      -- In a coroutine, so that no stale stack slot of this function keeps
      -- the dead sample object reachable.
      coroutine.wrap(function()
        assert.has_error(function()
          worker.map(function() error("x") end, lud(p), slot)
        end)
      end)()
      collectgarbage()
      collectgarbage()
      assert.equal(1, refs(p))
      C.sl_sample_release(p)
    end)
  end)

  describe(".filter()", function()
    it("returns the truthiness of fn and releases the input", function()
      local p = raw_sample(4)
      C.sl_sample_retain(p)
      assert.is_true(worker.filter(function(s) return s.i == 4 end, lud(p)))
      assert.equal(1, refs(p))
      C.sl_sample_retain(p)
      assert.is_false(worker.filter(function() return nil end, lud(p)))
      assert.equal(1, refs(p))
      C.sl_sample_release(p)
    end)
  end)

  describe(".export()", function()
    it("builds a sample from a table row against a given schema", function()
      local model = raw_sample(0)
      worker.export({i = 41}, slot, schema_of(model))
      local q = slot[0]
      assert.equal(C.sl_sample_schema(model), C.sl_sample_schema(q))
      assert.equal(41, tonumber(ffi.cast("int64_t *", C.sl_sample_at(q, 0).data)[0]))
      C.sl_sample_release(q)
      C.sl_sample_release(model)
    end)

    it("infers the schema of a row without one, sharing it between rows", function()
      worker.export({b = "x", a = 1.5}, slot, nil)
      local q1 = slot[0]
      worker.export({b = "yz", a = 2.5}, slot, nil)
      local q2 = slot[0]
      local sch = C.sl_sample_schema(q1)
      assert.equal(sch, C.sl_sample_schema(q2))
      assert.equal("a", ffi.string(C.sl_schema_field_name(sch, 0)))
      assert.equal("bytes", ffi.string(C.sl_dtype_name(C.sl_schema_field_dtype(sch, 1))))
      C.sl_sample_release(q1)
      C.sl_sample_release(q2)
    end)

    it("gives C a new reference to a sample object, which stays usable", function()
      local s = sluice.range(1):next()
      worker.export(s, slot, nil)
      assert.equal(0, s.i)
      assert.equal(2, refs(slot[0]))
      C.sl_sample_release(slot[0])
    end)

    it("raises for values that are not rows, and rows that do not fit", function()
      local ok, err = pcall(worker.export, "row", slot, nil)
      assert.is_false(ok)
      assert.equal("reader yielded a string (it must yield a sample or a table "
                   .. "of fields)", err)
      local model = raw_sample(0)
      ok, err = pcall(worker.export, {j = 1}, slot, schema_of(model))
      assert.is_false(ok)
      assert.equal("reader: the yielded row has no field 'i'", err)
      ok, err = pcall(worker.export, {i = 1, j = 2}, slot, schema_of(model))
      assert.is_false(ok)
      assert.equal("reader: the yielded row has an unknown field 'j' (fields: i)",
                   err)
      C.sl_sample_release(model)
    end)
  end)
end)

describe("sluice sample lifetime", function()
  -- (The work runs in coroutines so that no stale stack slot keeps a dead
  -- object reachable; small samples share release blocks, and the
  -- pipeline holds its current block until it is closed.)

  it("releases every C reference once the objects are collected", function()
    -- from_table keeps one reference to each row: the baseline is 1.
    local rows = {}
    for k = 1, 100 do rows[k] = {i = k} end
    local p = sluice.from_table(rows)
    local ptrs = {}
    coroutine.wrap(function()
      local objs = {}
      for s in p:iter() do
        objs[#objs + 1] = s
        -- a reference of our own, so the counts stay readable after close
        ptrs[#ptrs + 1] = C.sl_sample_retain(rawget(s, 1))
      end
      for _, q in ipairs(ptrs) do assert.equal(3, refs(q)) end
      sluice.release(objs[1])
      assert.equal(2, refs(ptrs[1]))
      assert.equal(2, objs[2].i) -- a number: pins nothing
    end)()
    p:close()
    collectgarbage()
    collectgarbage()
    for _, q in ipairs(ptrs) do assert.equal(1, refs(q)) end
    assert.equal(100, #ptrs)
    for _, q in ipairs(ptrs) do C.sl_sample_release(q) end
  end)

  it("gives large samples a finalizer of their own", function()
    local row = {}
    for k = 1, 1000 do row[k] = k end
    local p = sluice.from_table {{v = row}, {v = row}}
    local q1, q2
    coroutine.wrap(function()
      local s1 = p:next()
      -- new cdata of the address: s1[1] itself carries the finalizer
      q1 = ffi.cast("sl_sample *", ffi.cast("void *", rawget(s1, 1)))
      q2 = ffi.cast("sl_sample *", ffi.cast("void *", rawget(p:next(), 1)))
      assert.is_false(rawget(s1, 4)) -- no release block
    end)()
    collectgarbage()
    collectgarbage()
    -- collected although the pipeline is still open
    assert.equal(1, refs(q1))
    assert.equal(1, refs(q2))
  end)

  it("releases everything under GC pressure (blocks, views, releases, COW)", function()
    local rows = {}
    for k = 1, 500 do rows[k] = {i = k, v = {k, k + 1}} end
    local p = sluice.from_table(rows)
    local mine = {} -- a reference of our own to each row's sample
    coroutine.wrap(function()
      for s in p:iter() do mine[#mine + 1] = C.sl_sample_retain(rawget(s, 1)) end
    end)()
    local seed = 12345
    local function rand(n)
      seed = (seed * 1103515245 + 12345) % 2147483648
      return seed % n
    end
    coroutine.wrap(function()
      local kept, views = {}, {}
      for _ = 1, 20 do
        p:reset()
        for s in p:iter() do
          local r = rand(100)
          if r < 10 then kept[#kept + 1] = s
          elseif r < 15 then views[#views + 1] = s.v -- pins its sample
          elseif r < 17 then
            local v = s.v
            s.i = -1 -- copy-on-write of a pinned sample
            sluice.release(s)
            assert.same({v[0], v[1]}, v:totable())
          elseif r < 20 then sluice.release(s)
          elseif r < 25 then s.i = s.i + 1 -- copy-on-write: the row is shared
          elseif r < 27 then collectgarbage("step", 64)
          end
          if #kept > 50 then kept = {} end
          if #views > 20 then views = {} end
        end
      end
    end)()
    p:close()
    for _ = 1, 3 do collectgarbage() end
    for k, q in ipairs(mine) do
      assert.equal(1, refs(q), "row " .. k)
      C.sl_sample_release(q)
    end
  end)

  it("keeps a sample alive while a view of it is", function()
    local p = sluice.from_table {{v = {1, 2, 3}}}
    local q, view
    coroutine.wrap(function()
      local s = p:next()
      q = C.sl_sample_retain(rawget(s, 1)) -- ours, to read the count
      view = s.v
      sluice.release(s)
    end)()
    p:close()
    collectgarbage()
    assert.equal(2, refs(q)) -- ours + the view's
    assert.same({1, 2, 3}, view:totable())
    view = nil -- luacheck: ignore 311
    collectgarbage()
    collectgarbage()
    assert.equal(1, refs(q))
    C.sl_sample_release(q)
  end)
end)
