-- spec/33-fused_spec.lua: map and batch fused (issue 26; src/stages/rows.h,
-- docs/PERFORMANCE.md "Map and batch fused").  A parallel map right below a
-- batch whose fields all stack writes its outputs straight into the
-- batch's rows.  Fused or not (batch{fuse = false}), a pipeline gives the
-- same batches bit for bit, the same errors at the same places and the
-- same states, for 1, 2 and 4 threads, with ignore_errors too; unordered,
-- every row once; ragged fields are left as they were; p:stats() says
-- which.
local sluice = require "sluice"
local ffi = require "ffi"

-- Every field's dtype, shape and bytes, as one string.
local function digest(s)
  local parts = {}
  for _, name in ipairs(sluice.fields(s)) do
    local v = s[name]
    parts[#parts + 1] = ("%s:%s[%s]=%s"):format(name, v.dtype,
      table.concat(v.shape, ","), ffi.string(v.data, v.nbytes))
  end
  return table.concat(parts, "|")
end

-- Reads up to `max` batches (or the pass); returns the digests and the
-- error that ended it, if any.
local function read(p, max)
  local out = {}
  while #out < (max or math.huge) do
    local ok, s = pcall(p.next, p)
    if not ok then return out, tostring(s) end
    if s == nil then break end
    out[#out + 1] = digest(s)
  end
  return out
end

-- A map making a new f32 [3] field from i, and an i64 copy of it.
local function fn(s)
  local t = sluice.tensor("f32", {3})
  local i = s.i
  t.data[0], t.data[1], t.data[2] = i, i * 0.5, -i
  s.v = t
  s.j = i * 3
  return s
end

local function fused_rows(p)
  local n = 0
  for _, st in ipairs(p:stats()) do n = n + st.samples_fused end
  return n
end

local function build(total, threads, fuse, opts)
  opts = opts or {}
  local mopts = {threads = threads, ordered = opts.ordered,
                 ignore_errors = opts.ignore_errors, schema = opts.schema}
  return sluice.range(total):map(opts.fn or fn, mopts)
    :batch(opts.size or 7, {drop_last = opts.drop_last, fuse = fuse})
end

-- Two passes of 203 samples fused and unfused, side by side: the same
-- batches bit for bit (`count` of them, when given), no error, and rows
-- fused on one side only.
local function same_batches(threads, case, count)
  local a, b = build(203, threads, true, case), build(203, threads, false, case)
  for _ = 1, 2 do
    local x, ex = read(a)
    local y, ey = read(b)
    assert.is_nil(ex)
    assert.is_nil(ey)
    assert.are.same(y, x)
    if count then assert.are.equal(count, #x) end
    a:reset()
    b:reset()
  end
  assert.is_true(fused_rows(a) > 0, "the fused pipeline fused no row")
  assert.are.equal(0, fused_rows(b))
  a:close()
  b:close()
end

describe("map and batch fused", function()
  for _, threads in ipairs({1, 2, 4}) do
    it(("gives the same batches, bit for bit, on %d thread(s)"):format(threads),
       function()
      for _, case in ipairs({{size = 7}, {size = 8, drop_last = true},
                             {size = 1}, {size = 300}}) do
        same_batches(threads, case, case.drop_last and math.floor(203 / case.size)
                                    or math.ceil(203 / case.size))
      end
    end)

    it(("fuses a map with a schema from its first sample on %d thread(s)")
       :format(threads), function()
      local schema = {{"i", "i64", {}}, {"v", "f32", {3}}, {"j", "i64", {}}}
      local a = build(100, threads, true, {schema = schema})
      local b = build(100, threads, false, {schema = schema})
      assert.are.same(read(b), read(a))
      assert.are.equal(100, fused_rows(a))
      a:close()
      b:close()
    end)

    it(("reports an error at the same batch with the same message on %d thread(s)")
       :format(threads), function()
      local function bad(s)
        if s.i == 40 then error("sample forty is bad") end
        return fn(s)
      end
      local a = build(100, threads, true, {fn = bad})
      local b = build(100, threads, false, {fn = bad})
      local x, ex = read(a)
      local y, ey = read(b)
      assert.are.same(y, x)
      assert.are.equal(5, #x) -- batches 0..4 (samples 0..34); 40 is in batch 5
      assert.is_truthy(ex and ex:find("sample forty is bad", 1, true))
      assert.are.equal(ey, ex)
      -- the error is sticky until reset; after a reset the pass is read again
      assert.has_error(function() a:next() end)
      a:reset()
      b:reset()
      x = read(a, 3)
      y = read(b, 3)
      assert.are.same(y, x)
      a:close()
      b:close()
    end)

    it(("reports an output of the wrong shape as the unfused pipeline does on %d thread(s)")
       :format(threads), function()
      local function wrong(s)
        s = fn(s)
        if s.i == 30 then s.v = sluice.tensor("f32", {4}) end
        return s
      end
      local a = build(60, threads, true, {fn = wrong})
      local b = build(60, threads, false, {fn = wrong})
      local x, ex = read(a)
      local y, ey = read(b)
      assert.are.same(y, x)
      assert.is_truthy(ex)
      assert.are.equal(ey, ex)
      a:close()
      b:close()
    end)

    it(("saves and restores the same positions, across fused and unfused, on %d thread(s)")
       :format(threads), function()
      for _, cut in ipairs({0, 1, 5, 28, 29}) do
        local whole = build(203, threads, false)
        local all = read(whole)
        whole:close()
        for _, from_fused in ipairs({true, false}) do
          local a = build(203, threads, from_fused)
          local head = read(a, cut)
          local state = a:state()
          a:close()
          local b = build(203, threads, not from_fused)
          b:restore(state)
          local rest = read(b)
          b:close()
          local got = {}
          for _, d in ipairs(head) do got[#got + 1] = d end
          for _, d in ipairs(rest) do got[#got + 1] = d end
          assert.are.same(all, got)
        end
      end
    end)
  end

  for _, threads in ipairs({1, 2}) do
    it(("gives a new tensor its row, and is right when it is a temporary, on %d thread(s)")
       :format(threads), function()
      -- tmp takes the row of v (same dtype and size) and is not the output:
      -- the real output is copied over it
      local function with_tmp(s)
        local tmp = sluice.tensor("f32", {3})
        tmp.data[0], tmp.data[1], tmp.data[2] = 7, 7, 7
        local t = sluice.tensor("f32", {3})
        t.data[0], t.data[1], t.data[2] = s.i, tmp.data[0] + s.i, -s.i
        s.v = t
        s.j = s.i
        return s
      end
      local schema = {{"i", "i64", {}}, {"v", "f32", {3}}, {"j", "i64", {}}}
      local a = build(97, threads, true, {fn = with_tmp, schema = schema})
      local b = build(97, threads, false, {fn = with_tmp, schema = schema})
      assert.are.same(read(b), read(a))
      assert.are.equal(97, fused_rows(a))
      a:close()
      b:close()
    end)
  end

  it("refuses a row's tensor kept past the call that made it", function()
    local function keeper(s)
      -- a worker-state global: the tensor of the previous call
      local kept = rawget(_G, "kept")
      if kept then local _ = kept.data end
      local t = sluice.tensor("f32", {3})
      rawset(_G, "kept", t)
      s.v = t
      s.j = s.i
      return s
    end
    local schema = {{"i", "i64", {}}, {"v", "f32", {3}}, {"j", "i64", {}}}
    local a = build(20, 1, true, {fn = keeper, schema = schema})
    local _, err = read(a)
    assert.is_truthy(err and err:find("valid only during the call", 1, true), err)
    a:close()
    -- unfused, the tensor is the function's own: keeping it is allowed
    local b = build(20, 1, false, {fn = keeper, schema = schema})
    local got, err2 = read(b)
    assert.is_nil(err2)
    assert.are.equal(3, #got)
    b:close()
  end)

  -- A map that fails (ignore_errors leaves the sample out) on every 5th
  -- sample and on a run of 9: the rows after a skip move up.
  local function flaky(s)
    if s.i % 5 == 2 or (s.i >= 30 and s.i < 39) then error("bad " .. s.i) end
    return fn(s)
  end
  for _, threads in ipairs({1, 2, 4}) do
    it(("fuses an ignore_errors map: the same batches on %d thread(s)"):format(threads),
       function()
      for _, case in ipairs({{size = 7}, {size = 8, drop_last = true}}) do
        case.fn, case.ignore_errors = flaky, true
        same_batches(threads, case)
      end
    end)
  end

  it("restores an ignore_errors map saved fused, unfused and back", function()
    for _, from in ipairs({true, false}) do
      local case = {fn = flaky, ignore_errors = true, size = 6}
      local whole = read(build(120, 2, not from, case))
      local a = build(120, 2, from, case)
      read(a, 5)
      local state = a:state()
      a:close()
      local b = build(120, 2, not from, case)
      b:restore(state)
      local rest = read(b)
      assert.are.same({unpack(whole, 6)}, rest)
      b:close()
    end
  end)

  for _, threads in ipairs({1, 2, 4}) do
    it(("fuses an unordered map: every row once, whole, on %d thread(s)"):format(threads),
       function()
      local schema = {{"i", "i64", {}}, {"v", "f32", {3}}, {"j", "i64", {}}}
      for _, case in ipairs({{ordered = false},
                             {ordered = false, fn = flaky, ignore_errors = true},
                             {ordered = false, schema = schema}}) do
        local p = build(500, threads, true, case)
        for _ = 1, 2 do
          local seen = {}
          for b in p:iter() do
            for r = 0, b.i.shape[1] - 1 do
              local i = tonumber(b.i.data[r])
              assert.is_nil(seen[i], "row " .. i .. " twice")
              seen[i] = true
              assert.are.same({i, i * 0.5, -i, i * 3},
                              {b.v.data[3 * r], b.v.data[3 * r + 1],
                               b.v.data[3 * r + 2], tonumber(b.j.data[r])})
            end
          end
          for i = 0, 499 do
            local skipped = case.fn and (i % 5 == 2 or (i >= 30 and i < 39))
            assert.are.equal(not skipped, seen[i] == true, "row " .. i)
          end
          p:reset()
        end
        assert.is_true(fused_rows(p) > 0, "the unordered map fused no row")
        p:close()
      end
    end)
  end

  it("leaves ragged fields unfused", function()
    local function rows_of(p)
      local n = 0
      for b in p:iter() do n = n + b.i.shape[1] end
      return n, fused_rows(p)
    end
    local n, f
    local ragged = sluice.range(20):map(function(s)
      s.v = sluice.tensor("f32", {s.i % 3 + 1})
      return s
    end, {threads = 2, schema = {{"i", "i64", {}}, {"v", "f32", {-1}}}})
      :batch(4)
    n, f = rows_of(ragged)
    assert.are.same({20, 0}, {n, f})
  end)

  it("names the fused map in the statistics report", function()
    sluice.stats(true)
    local p = build(64, 2, true, {schema = {{"i", "i64", {}}, {"v", "f32", {3}},
                                             {"j", "i64", {}}}})
    for _ in p:iter() do end
    local report = p:stats_report(1)
    sluice.stats(false)
    assert.is_truthy(report:find("fused: map", 1, true), report)
    p:close()
  end)

  it("fuses every row of a map with a schema built long before its batch", function()
    -- A map whose schema is given starts at its first next: a trainer that
    -- does other work between p:map() and p:batch() still gets every row
    -- of the first pass fused (a map that started at once would have made
    -- its first outputs unfused while no batch was there to take them).
    pcall(ffi.cdef, "int usleep(unsigned int usec);")
    local schema = {{"i", "i64", {}}, {"v", "f32", {3}}, {"j", "i64", {}}}
    for _, threads in ipairs({1, 2}) do
      local m = sluice.range(60):map(fn, {threads = threads, schema = schema})
      ffi.C.usleep(50000) -- time enough for the workers to fill their window
      local p = m:batch(6)
      local rows = 0
      for b in p:iter() do rows = rows + b.i.shape[1] end
      assert.are.equal(60, rows)
      assert.are.equal(60, fused_rows(p))
      p:close()
    end
  end)

  it("closes mid-pass with the rows of several batches in flight", function()
    for _, threads in ipairs({1, 2, 4}) do
      local p = build(5000, threads, true, {size = 16})
      assert.is_truthy(p:next())
      p:close()
    end
  end)
end)
