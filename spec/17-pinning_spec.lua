-- 17-pinning_spec.lua: what samples pin (issue 13, item 9).  A record read
-- from an SLR file is a view into its decoded chunk, so a small sample
-- keeps megabytes alive; the Lua collector sees none of that C memory.
-- Checked here: Pipeline:next accounts the buffers its samples view and
-- steps the collector by them, so a loop making and closing pipelines stays
-- bounded without a manual full collection; sluice.clone makes a sample
-- that pins only its own bytes; close() frees a pipeline's memory at once.
local ffi = require "ffi"
local sluice = require "sluice"
local C = require "sluice.cdef"

local H = dofile "spec/helper.lua"
local tmpdir = H.tmpdir

pcall(ffi.cdef, [[
int sl_sample_alloc(sl_sample *s, int i, int rank, const int64_t *shape,
                    void **data);
]])


local rss_mb = H.rss_mib -- resident set size, MiB

local RECORD, PER_CHUNK, CHUNKS = 700, 1500, 20 -- ~1 MiB chunks

-- {x: u8[700]} records, PER_CHUNK to a chunk: each record is 0.07% of the
-- chunk it is a view into.
local function write_slr(path)
  local sch = ffi.gc(C.sl_schema_new(), C.sl_schema_release)
  local shape = ffi.new("int64_t[1]", RECORD)
  assert.equal(0, C.sl_schema_add(sch, "x", "SL_U8", 1, shape))
  local opts = ffi.new("sl_slr_writer_opts")
  opts.records_per_chunk = PER_CHUNK
  opts.level = 1
  local w = ffi.new("sl_slr_writer *[1]")
  assert.equal(0, C.sl_slr_writer_open(path, sch, opts, w))
  local data = ffi.new("void *[1]")
  for k = 0, PER_CHUNK * CHUNKS - 1 do
    local s = ffi.gc(C.sl_sample_new(sch), C.sl_sample_release)
    assert.equal(0, C.sl_sample_alloc(s, 0, 1, shape, data))
    ffi.fill(data[0], RECORD, k % 251)
    assert.equal(0, C.sl_slr_writer_append(w[0], s))
  end
  assert.equal(0, C.sl_slr_writer_close(w[0]))
end

-- The bytes of the distinct buffers the samples' fields view.
local function pinned_bytes(samples)
  local seen, total = {}, 0
  for _, s in ipairs(samples) do
    local p = s[1]
    for i = 0, C.sl_sample_nfields(p) - 1 do
      local buf = C.sl_sample_at(p, i).buf
      local key = tonumber(ffi.cast("uintptr_t", buf))
      if buf ~= nil and not seen[key] then
        seen[key] = true
        total = total + tonumber(C.sl_buffer_size(buf))
      end
    end
  end
  return total
end

describe("what samples pin", function()
  local dir, path
  setup(function()
    dir = tmpdir()
    path = dir .. "/small.slr"
    write_slr(path)
  end)
  teardown(function() H.rmdir(dir) end)

  it("stays bounded over 300 open_files pipelines made and closed, "
     .. "without a full GC", function()
    collectgarbage()
    collectgarbage()
    local before = rss_mb()
    local peak = before
    local alive = setmetatable({}, {__mode = "k"}) -- samples not collected
    local most = 0
    for i = 1, 300 do
      local p = sluice.open_files({path}, {shuffle = true, seed = i})
      local s = p:next()
      assert.equal(RECORD, s.x.nbytes)
      alive[s] = true
      p:close()
      -- no collectgarbage() here: the point is what happens without it
      local now, n = rss_mb(), 0
      if now > peak then peak = now end
      for _ in pairs(alive) do n = n + 1 end
      if n > most then most = n end
    end
    -- Each iteration leaves one sample pinning one 1 MiB chunk: 300 MiB
    -- without the accounting.  With it the collector runs about once per
    -- 32 MiB of chunks seen.
    local growth = peak - before
    print(("\n  300 pipelines: at most %d samples not yet collected, RSS "
           .. "grew by %.1f MiB at most"):format(most, growth))
    assert.is_true(most <= 100,
                   ("%d samples (chunks) were held at once"):format(most))
    -- A sanitizer's allocator keeps freed memory in quarantine: RSS says
    -- nothing there.
    local preload = os.getenv("LD_PRELOAD") or ""
    if not preload:match("san") then
      assert.is_true(growth < 96, ("RSS grew by %.1f MiB"):format(growth))
    end
  end)

  it("is what sluice.clone avoids for samples kept beyond the loop", function()
    local p = sluice.open_files({path}, {shuffle = true, seed = 7})
    local viewed, cloned, k = {}, {}, 0
    for s in p:iter() do
      k = k + 1
      if k % 50 == 0 then
        viewed[#viewed + 1] = s
        cloned[#cloned + 1] = sluice.clone(s)
      end
    end
    p:close()
    assert.equal(600, #viewed)
    -- 600 records of 700 bytes viewed in their chunks pin every chunk
    local v, c = pinned_bytes(viewed), pinned_bytes(cloned)
    assert.is_true(v >= CHUNKS * PER_CHUNK * RECORD * 0.9,
                   ("viewed samples pin %d bytes"):format(v))
    -- clones pin their own 700 bytes (one 64-byte aligned buffer each)
    assert.is_true(c <= 600 * 832, ("clones pin %d bytes"):format(c))
    print(("\n  600 samples of %d bytes: %.1f MiB pinned viewed, %.2f MiB "
           .. "cloned"):format(RECORD, v / 2^20, c / 2^20))
    for i = 1, #viewed do
      assert.same(viewed[i].x:totable(), cloned[i].x:totable())
      assert.same(sluice.fields(viewed[i]), sluice.fields(cloned[i]))
    end
  end)

  it("clones LoD fields, strings and scalars", function()
    local b = sluice.from_table({{v = {1, 2}, t = "ab", n = 3},
                                 {v = {3}, t = "c", n = 4}})
      :batch(2):next()
    local c = sluice.clone(b)
    assert.same(b.v.lod, c.v.lod)
    assert.same(b.v:totable(), c.v:totable())
    assert.same(b.t:totable(), c.t:totable())
    assert.same(b.n:totable(), c.n:totable())
    assert.matches("expected a sample %(got a number%)",
                   select(2, pcall(sluice.clone, 5)))
  end)

  it("is freed at close(), not at the next collection", function()
    collectgarbage()
    collectgarbage()
    -- Memory the earlier tests freed stays resident in malloc's heap and
    -- would be reused without RSS growing: give it back first (glibc).
    pcall(ffi.cdef, "int malloc_trim(size_t pad);")
    local function trim() pcall(function() return ffi.C.malloc_trim(0) end) end
    trim()
    local before = rss_mb()
    local p = sluice.open_files({path}, {threads = 2}):cache()
    for s in p:iter() do sluice.release(s) end -- the cache holds every chunk
    local full = rss_mb()
    p:close()
    trim() -- what close() freed, not what malloc keeps for reuse
    local after = rss_mb()
    print(("\n  cache of %d chunks: %.1f MiB held, %.1f MiB after close()")
          :format(CHUNKS, full - before, after - before))
    if not (os.getenv("LD_PRELOAD") or ""):match("san") then
      assert.is_true(full - before > CHUNKS * 0.5)
      assert.is_true(after - before < (full - before) / 4)
    end
  end)
end)
