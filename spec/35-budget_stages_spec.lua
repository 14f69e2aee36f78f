-- spec/35-budget_stages_spec.lua: the heaps of the worker Lua states that
-- run on the caller's thread under the pipeline's memory budget (issue 27;
-- src/script/lua_heap.c): a `:take_while`'s and a `:scan`'s one state
-- (src/script/lua_flow.c: a scan's accumulator lives there) and a Lua
-- reader's (`sluice.reader`, src/script/lua_reader.c).  What a function
-- keeps between calls is charged to its stage after each call: p:stats()
-- shows it in the stage's bytes_held, within the budget.  The C stages'
-- own memory (batch's pool, bucket_batch's kept batches, double_buffer's
-- slots, open_files' units): tests/test_budget_stages.c.
local sluice = require "sluice"
local H = dofile "spec/helper.lua"

local row = H.stage_row

-- bytes_held of stage `name` now: at least `least`, within the budget.
local function held_at_least(p, name, least)
  local st = row(p:stats(), name)
  assert.is_true(st.bytes_held >= least,
                 ("%s holds %d bytes, less than %d"):format(name,
                                                            st.bytes_held,
                                                            least))
  assert.is_true(st.bytes_held <= st.budget_bytes)
  assert.is_true(st.bytes_held <= st.bytes_peak)
  return st.bytes_held
end

describe("the heaps of states on the caller's thread under a budget", function()
  it("charges what a take_while's function keeps", function()
    local p = sluice.range(3000):budget("8MiB"):take_while(function(s)
      local keep = rawget(_G, "keep") or {}
      rawset(_G, "keep", keep)
      keep[#keep + 1] = string.rep("x", 1000) .. s.i -- ~1 KiB a call, kept
      return s.i < 2000
    end)
    local n = 0
    for _ in p:iter() do n = n + 1 end
    assert.equal(2000, n)
    -- 2000 KiB kept (the charge moves by 1/4 of 128 KiB steps)
    held_at_least(p, "take_while", 1500 * 1024)
    p:close()
  end)

  it("charges a scan's accumulator as it grows", function()
    local p = sluice.range(2000):budget("8MiB"):scan({}, function(acc, s)
      acc[#acc + 1] = string.rep("y", 1000) .. s.i
      return acc, {n = #acc}
    end)
    local i = 0
    for s in p:iter() do
      i = i + 1
      assert.equal(i, s.n)
      if i == 1000 then held_at_least(p, "scan", 700 * 1024) end
    end
    assert.equal(2000, i)
    held_at_least(p, "scan", 1500 * 1024)
    p:close()
  end)

  it("charges a Lua reader's state, kept rows and all", function()
    local p = sluice.reader(function()
      local seen, i = {}, 0
      return function()
        if i == 2000 then return nil end
        i = i + 1
        seen[i] = string.rep("z", 1000) .. i -- the iterator keeps every row
        return {i = #seen}
      end
    end, {schema = {{"i", "i64"}}, buffer = 4}):budget("8MiB")
    local n = 0
    for s in p:iter() do
      n = n + 1
      assert.equal(n, s.i)
    end
    assert.equal(2000, n)
    held_at_least(p, "reader", 1500 * 1024)
    p:close()
  end)

  it("charges the heap above the state's size once made", function()
    -- a function keeping nothing: the sluice modules and the function
    -- (about half a MiB) are the state's fixed cost, not charged
    for _, kind in ipairs({"take_while", "scan", "reader"}) do
      local src = sluice.range(100):budget("64MiB")
      local p
      if kind == "scan" then
        p = src:scan(0, function(acc, s) return acc + 1, s end)
      elseif kind == "take_while" then
        p = src:take_while(function() return true end)
      else
        p = sluice.reader(function()
          local i = 0
          return function()
            i = i + 1
            if i <= 100 then return {i = i} end
          end
        end, {schema = {{"i", "i64"}}}):budget("64MiB")
      end
      for _ in p:iter() do end
      local st = row(p:stats(), kind)
      assert.is_true(st.bytes_peak < 256 * 1024, tostring(st.bytes_peak))
      p:close()
    end
  end)

  it("stays within the budget: a full one collects the garbage", function()
    -- 2000 KiB of garbage a pass and nothing kept, in a 1 MiB budget (the
    -- state's own collector stopped): charged, it would pass the budget;
    -- collected, what stays is about a step (16 KiB here)
    local p = sluice.range(2000):budget("1MiB"):take_while(function(s)
      collectgarbage("stop")
      local t = string.rep("g", 1000) .. s.i
      return #t > 0
    end)
    local n = 0
    for _ in p:iter() do n = n + 1 end
    assert.equal(2000, n)
    local st = row(p:stats(), "take_while")
    assert.is_true(st.bytes_peak <= 1024 * 1024, tostring(st.bytes_peak))
    assert.is_true(st.bytes_peak >= 16 * 1024, tostring(st.bytes_peak))
    p:close()
  end)
end)

describe("a flat_map's item under a budget", function()
  it("keeps the outputs it has not handed out yet counted", function()
    -- 4 items of 8 outputs of 64 KiB; after the last item's second output
    -- the 6 outputs still to come are the stage's, counted (they used to
    -- leave the count with the item's first output)
    local K = 64 * 1024
    local p = sluice.range(4):budget("16MiB"):flat_map(function(s)
      local out = {}
      for j = 1, 8 do
        out[j] = {x = sluice.tensor("u8", {K}), j = s.i * 8 + j}
      end
      return out
    end, {threads = 1})
    for _ = 1, 3 * 8 + 2 do assert.is_not_nil(p:next()) end
    held_at_least(p, "flat_map", 6 * K)
    for _ = 1, 6 do assert.is_not_nil(p:next()) end
    assert.is_nil(p:next())
    -- all handed out: the rows are gone (a worker heap's charge may stay)
    assert.is_true(row(p:stats(), "flat_map").bytes_held < 2 * K)
    p:close()
  end)
end)
