-- spec/34-budget_spec.lua: the pipeline-wide memory budget (issue 27 item
-- 1; C sl_reader_set_budget, src/sync/budget.c).  p:budget(size) takes
-- bytes or a size string, once per pipeline; a multi-threaded Lua map under
-- a prefetch keeps what it holds within the budget and still yields every
-- sample in order; p:stats() has each stage's bytes held and peak and the
-- budget; a budget too small for one sample is an error naming the stage
-- and the bytes; sluice.size() parses sizes and refuses malformed ones.
local sluice = require "sluice"
local H = dofile "spec/helper.lua"

local ITEM = 4096 -- bytes of one sample after the map

-- range(n) -> {i: i64, x: u8[ITEM]} through a Lua map on `threads` workers
-- (with `budget`: set on the source, so the map runs under it from its
-- first sample).
local function wide(n, threads, budget)
  local src = sluice.range(n)
  if budget then src:budget(budget) end
  return src:map(function(s)
    local t = sluice.tensor("u8", {4096})
    t.data[0] = s.i % 256
    s.x = t
    return s
  end, {threads = threads})
end

local row = H.stage_row

describe("sluice.size", function()
  it("parses bytes and units", function()
    assert.equal(512, sluice.size(512))
    assert.equal(512, sluice.size("512"))
    assert.equal(2 * 1024 ^ 3, sluice.size("2GiB"))
    assert.equal(64 * 1024 ^ 2, sluice.size("64 mib"))
    assert.equal(1.5 * 1024 ^ 3, sluice.size("1.5GB")) -- as the CLI's
    assert.equal(3072, sluice.size("3 KB"))
    assert.equal(3072, sluice.size("3k"))
    assert.equal(100, sluice.size("100B"))
  end)

  it("refuses malformed sizes, saying what a size is", function()
    for _, bad in ipairs({"", "abc", "12 parsecs", "-5", "1.5", 0, -1, 2.5,
                          true, "GiB", "1e400 GiB"}) do
      local ok, err = pcall(sluice.size, bad)
      assert.is_false(ok, tostring(bad))
      assert.matches("a size must be a whole number of bytes", err)
    end
  end)
end)

describe("p:budget", function()
  it("keeps a threaded Lua map and a prefetch within the budget", function()
    local n = 600
    -- set on the source: the map and the prefetch join it as they are made
    local p = wide(n, 2, "64KiB"):prefetch(32)
    local i = 0
    for s in p:iter() do
      assert.equal(i % 256, s.x.data[0])
      assert.equal(i, s.i)
      i = i + 1
    end
    assert.equal(n, i)
    local st = p:stats()
    for _, s in ipairs(st) do
      assert.equal(64 * 1024, s.budget_bytes)
      assert.is_true(s.bytes_held <= s.bytes_peak)
    end
    -- each threaded stage within the budget, one sample over at most
    -- (what a stage holding nothing may take, docs/LUA.md); a Lua map
    -- learns its schema from its first output before it is made a stage
    -- and joins the budget, so what its workers made by then (its window
    -- of 128 + 16 at most) is counted, not bounded
    assert.is_true(row(st, "map").bytes_peak <= 64 * 1024 + 144 * ITEM)
    assert.is_true(row(st, "prefetch").bytes_peak <= 64 * 1024 + ITEM)
    assert.is_true(row(st, "prefetch").bytes_peak >= ITEM)
    -- the second pass, the same
    p:reset()
    i = 0
    for _ in p:iter() do i = i + 1 end
    assert.equal(n, i)
  end)

  it("set on the source, bounds the stages made over it from the start",
     function()
    local src = sluice.range(3000):budget("2MiB")
    local p = src:shuffle(1000, {seed = 5}):map(function(s)
      local t = sluice.tensor("u8", {1024})
      t.data[0] = s.i % 256
      s.x = t
      return s
    end, {threads = 2}):prefetch(16)
    local seen = 0
    for _ in p:iter() do seen = seen + 1 end
    assert.equal(3000, seen)
    local st = p:stats()
    assert.equal(8000, row(st, "shuffle").bytes_peak) -- 1000 x 8 bytes
    local total = 0
    for _, s in ipairs(st) do total = total + s.bytes_peak end
    assert.is_true(total <= 2 * 1024 ^ 2 + 2 * 1032)
  end)

  it("charges a shuffle's window and names it when it does not fit", function()
    local p = sluice.range(1000):shuffle(100, {seed = 3}):budget(400)
    local ok, err = pcall(function() for _ in p:iter() do end end)
    assert.is_false(ok)
    assert.matches("stage 'shuffle' needs 408 bytes to hold 51 samples, "
                   .. "the budget is 400 bytes", err)
    p = sluice.range(1000):shuffle(100, {seed = 3}):budget("1MiB")
    local seen = 0
    for _ in p:iter() do seen = seen + 1 end
    assert.equal(1000, seen)
    assert.equal(800, row(p:stats(), "shuffle").bytes_peak) -- 100 x 8 bytes
  end)

  it("names the stage whose one sample is larger than the budget", function()
    local p = wide(2000, 2, 1000) -- more than runs before the map is made
    local ok, err = pcall(function() for _ in p:iter() do end end)
    assert.is_false(ok)
    assert.matches("stage 'map' needs 4104 bytes for one sample, the budget "
                   .. "is 1000 bytes", err)
  end)

  it("is set once, with a size", function()
    local p = sluice.range(3)
    assert.equal(p, p:budget(1 * 1024)) -- returns the pipeline
    p = sluice.range(3)
    local ok, err = pcall(p.budget, p, "lots")
    assert.is_false(ok)
    assert.matches("sluice: :budget%(%): a size must be", err)
    p:budget(100)
    ok, err = pcall(p.budget, p, 100)
    assert.is_false(ok)
    assert.matches("already has a memory budget", err)
    p:close()
  end)

  it("leaves stats at 0 with :budget(false)", function()
    local p = wide(10, 2):budget(false)
    for _ in p:iter() do end
    for _, s in ipairs(p:stats()) do
      assert.equal(0, s.budget_bytes)
      assert.equal(0, s.bytes_peak)
    end
  end)

  it("closes while the workers wait for room", function()
    for _ = 1, 5 do
      local p = wide(100000, 3):prefetch(100):budget(8 * ITEM)
      p:next()
      p:close() -- must not hang
    end
  end)
end)

-- The default budget (C sl_reader_default_budget): set before a pipeline's
-- first sample unless it has one or :budget(false) / :budget("none") said
-- none; SLUICE_MEMORY_LIMIT stands for the container's limit here.
local ffi = require "ffi"
pcall(ffi.cdef, [[
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
]])

describe("the default budget", function()
  after_each(function() ffi.C.unsetenv("SLUICE_MEMORY_LIMIT") end)

  it("is 50 % of the memory limit, set at the first sample", function()
    ffi.C.setenv("SLUICE_MEMORY_LIMIT", "256MiB", 1)
    local p = wide(2000, 2):prefetch(4)
    for _, s in ipairs(p:stats()) do assert.equal(0, s.budget_bytes) end
    local n = 0
    for _ in p:iter() do n = n + 1 end
    assert.equal(2000, n)
    for _, s in ipairs(p:stats()) do
      assert.equal(128 * 1024 * 1024, s.budget_bytes)
      assert.equal(50, s.budget_default_pct)
      assert.equal(256 * 1024 * 1024, s.memory_usable)
    end
    -- charged as a set budget (the map's window, made before the first
    -- sample, may all have been made before the budget: the later ones
    -- pass through the stages under it)
    assert.is_true(row(p:stats(), "map").bytes_peak > 0
                   or row(p:stats(), "prefetch").bytes_peak > 0)
    assert.matches("memory budget: 128.0 MiB %(default: 50 %% of 0.2 GiB "
                   .. "usable%)", p:stats_report(1))
    -- the default is a budget: an explicit one is refused after it
    local ok, err = pcall(p.budget, p, "1MiB")
    assert.is_false(ok)
    assert.matches("already has a memory budget", err)
    p:close()
  end)

  it("leaves an explicit budget alone", function()
    ffi.C.setenv("SLUICE_MEMORY_LIMIT", "256MiB", 1)
    local p = wide(20, 2, "1MiB"):prefetch(2)
    p:next()
    for _, s in ipairs(p:stats()) do
      assert.equal(1024 * 1024, s.budget_bytes)
      assert.equal(0, s.budget_default_pct)
      assert.equal(0, s.memory_usable)
    end
    p:close()
  end)

  it("is off with :budget(false) or :budget('none'), on a source too",
     function()
    ffi.C.setenv("SLUICE_MEMORY_LIMIT", "256MiB", 1)
    for _, off in ipairs({false, "none"}) do
      local p = sluice.range(30):budget(off):batch(5)
      assert.is_true(p:has_next())
      for _ in p:iter() do end
      for _, s in ipairs(p:stats()) do assert.equal(0, s.budget_bytes) end
      assert.is_nil(p:stats_report(1):find("memory budget", 1, true))
      p:close()
    end
    -- a pipeline with a budget refuses "none"
    local p = sluice.range(3):budget(100)
    local ok, err = pcall(p.budget, p, false)
    assert.is_false(ok)
    assert.matches("already has a memory budget", err)
    p:close()
  end)

  it("names a malformed SLUICE_MEMORY_LIMIT at the first sample", function()
    ffi.C.setenv("SLUICE_MEMORY_LIMIT", "lots", 1)
    local p = sluice.range(3)
    local ok, err = pcall(p.next, p)
    assert.is_false(ok)
    assert.matches("SLUICE_MEMORY_LIMIT: not a size >= 1 byte", err)
    assert.matches("'lots'", err)
    p:close()
  end)
end)

-- bucket_batch (C sl_bucket_batch): the rows its buckets hold are charged
-- as they arrive, the batch built from a bucket on top as it goes out.
describe("bucket_batch under a budget", function()
  -- n documents of 1..64 i32 tokens (4..256 bytes), the budget on the source
  local function docs(n, budget)
    local src = sluice.range(n)
    if budget then src:budget(budget) end
    return src:map(function(s)
      local ids = sluice.tensor("i32", {s.i % 64 + 1})
      s.i = nil
      s.ids = ids
      return s
    end, {schema = {{"ids", "i32", {-1}}}})
  end

  it("counts the buckets' rows, within the budget", function()
    local p = docs(2000, "64KiB"):bucket_batch{boundaries = {16, 32},
                                               batch_sizes = {32, 16, 8}}
    local rows = 0
    for b in p:iter() do rows = rows + b.ids.shape[1] end
    assert.equal(2000, rows)
    local s = row(p:stats(), "bucket_batch")
    -- the three buckets hold up to 31 + 15 + 7 rows of 4..256 bytes
    assert.is_true(s.bytes_peak > 256, tostring(s.bytes_peak))
    assert.is_true(s.bytes_peak <= 64 * 1024)
    p:close()
  end)

  it("ends the pass naming it when its buckets need more", function()
    local p = docs(2000, 600):bucket_batch{boundaries = {16},
                                           batch_sizes = {64, 64}}
    local ok, err = pcall(function() for _ in p:iter() do end end)
    assert.is_false(ok)
    local k = err:match("stage 'bucket_batch' needs %d+ bytes to hold (%d+) "
                        .. "samples, the budget is 600 bytes")
    assert.is_not_nil(k, err)
    -- met while a bucket gathers its rows, before any batch of 64 is built
    assert.is_true(tonumber(k) < 64, err)
    p:close()
  end)
end)

-- The worker Lua states' heaps (src/script/lua_heap.c): each state's heap
-- above its size once made is charged to its stage, and collected when the
-- growth does not fit the budget.  The functions stop their state's own
-- collector, so only the budget's collections bound the heap.
describe("worker Lua heaps under a budget", function()
  -- per call: ~100 KiB of garbage (2000 small tables); s.heap: the heap in
  -- KiB after it
  local function garbage(s)
    collectgarbage("stop")
    local t = {}
    for k = 1, 2000 do t[k] = {k} end
    assert(#t == 2000)
    s.heap = math.floor(collectgarbage("count")) -- i64 always
    return s
  end

  for _, kind in ipairs({"map", "filter", "flat_map"}) do
    it("charges a " .. kind .. "'s heaps and keeps them bounded", function()
      local n = 2000
      local src = sluice.range(n):budget("2MiB")
      local p
      if kind == "map" then
        p = src:map(garbage, {threads = 2})
      elseif kind == "filter" then
        p = src:filter(function()
          collectgarbage("stop")
          local t = {}
          for k = 1, 2000 do t[k] = {k} end
          assert(#t == 2000)
          return collectgarbage("count") < 8 * 1024 -- else: dropped
        end, {threads = 2})
      else
        p = src:flat_map(function(s) return {garbage(s)} end, {threads = 2})
      end
      local i, most = 0, 0
      for s in p:iter() do
        i = i + 1
        if kind ~= "filter" then most = math.max(most, s.heap) end
      end
      assert.equal(n, i) -- a filter drops a sample past 8 MiB of heap
      local st = row(p:stats(), kind)
      -- charged: more than the samples' bytes (16 each, a few in flight)
      assert.is_true(st.bytes_peak >= 256 * 1024, tostring(st.bytes_peak))
      assert.is_true(st.bytes_held <= st.bytes_peak)
      -- bounded: ~200 MiB per state if nothing collected it
      assert.is_true(most < 8 * 1024, tostring(most))
      p:close()
    end)
  end

  it("collects a state whose tensors pin their C memory", function()
    -- 256 KiB tensors made in a state whose own collector is stopped: each
    -- stays referenced by its Lua object until a collection, long after its
    -- sample left the pipeline.  Under a budget the state is collected once
    -- it made 4 quanta (budget / 64 each: 1 MiB here) of them, every 4
    -- calls; without that, never in these 400 (the heap grows by far less
    -- than a quantum a call), and all 100 MiB made would stay resident.
    local rss_mib = H.rss_mib
    local n = 400
    local p = sluice.range(n):budget("16MiB"):map(function(s)
      collectgarbage("stop")
      -- a worker-state global: the collections this state has seen
      local heap = collectgarbage("count")
      local last = rawget(_G, "last_heap") or heap
      local seen = (rawget(_G, "collections") or 0) + (heap < last and 1 or 0)
      rawset(_G, "last_heap", heap)
      rawset(_G, "collections", seen)
      local t = sluice.tensor("u8", {256 * 1024})
      t.data[0] = s.i % 256
      s.blob = t
      s.seen = seen
      return s
    end, {threads = 2, schema = {{"i", "i64", {}}, {"blob", "u8", {256 * 1024}},
                                 {"seen", "i64", {}}}})
    local before, i, seen = rss_mib(), 0, 0
    for s in p:iter() do
      assert.equal(i % 256, s.blob.data[0])
      seen = seen + s.seen
      i = i + 1
    end
    local grew = rss_mib() - before
    assert.equal(n, i)
    -- the sum over the samples of the collections seen so far: 0 if never
    assert.is_true(seen >= 1000, ("%d"):format(seen))
    -- A sanitizer's allocator keeps freed memory in quarantine: RSS says
    -- nothing there.
    if not (os.getenv("LD_PRELOAD") or ""):match("san") then
      assert.is_true(grew < 48, ("RSS grew by %.1f MiB"):format(grew))
    end
    p:close()
  end)

  it("charges nothing without a budget, and the heap is the function's",
     function()
    local p = sluice.range(50):budget(false):map(function(s)
      s.heap = math.floor(collectgarbage("count")) -- i64 always
      return s
    end, {threads = 2})
    for _ in p:iter() do end
    assert.equal(0, row(p:stats(), "map").bytes_peak)
    p:close()
  end)
end)
