-- 27-lua_flow_spec.lua: the Lua flow stages of issue 19 (src/script/
-- lua_flow.c): p:flat_map(fn) (0..n samples per sample, tf.data's flat_map
-- over arrays), p:take_while(fn) and p:scan(init, fn), against tf.data's
-- semantics; their options, errors, resets, thread counts and saved
-- positions.
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local collect, misuse = H.collect, H.misuse

-- k copies of sample k (tf.data: range(5).flat_map(lambda k:
-- repeat(k).take(k))).
local function copies(s)
  local t = {}
  for j = 1, s.i do t[j] = s end
  return t
end

-- Every value of field f of one pass of p, as a string "a,b,c".
local function pass_of(p, f)
  return table.concat(collect(p, f), ",")
end

describe("p:flat_map(fn)", function()
  it("gives each sample's outputs in order, as tf.data's flat_map", function()
    local p = sluice.range(5):flat_map(copies)
    assert.same({1, 2, 2, 3, 3, 3, 4, 4, 4, 4}, collect(p))
    assert.equal("i64", p:schema().i.dtype)
    p:close()
  end)

  it("takes tables of fields, nil and empty arrays", function()
    local p = sluice.range(6):flat_map(function(s)
      if s.i % 3 == 0 then return nil end
      if s.i % 3 == 1 then return {} end
      return {{i = s.i, h = s.i + 0.5}, {i = -s.i, h = 0.25}}
    end)
    assert.same({2, -2, 5, -5}, collect(p))
    p:reset()
    assert.same({2.5, 0.25, 5.5, 0.25}, collect(p, "h"))
    p:close()
  end)

  it("is empty when every sample gives nothing, with upstream's schema",
     function()
    local p = sluice.range(4):flat_map(function() return {} end)
    assert.same({}, collect(p))
    assert.equal("i64", p:schema().i.dtype)
    local q = sluice.range(0):flat_map(copies)
    assert.same({}, collect(q))
    p:close()
    q:close()
  end)

  it("checks outputs against a given schema", function()
    local p = sluice.range(3):flat_map(function(s)
      return {{x = s.i + 0.5}}
    end, {schema = {{"x", "f32", {}}}})
    assert.equal("f32", p:schema().x.dtype)
    assert.same({0.5, 1.5, 2.5}, collect(p, "x"))
    local q = sluice.range(3):flat_map(function(s)
      return {{y = s.i}}
    end, {schema = {{"x", "f32", {}}}})
    local ok, err = pcall(collect, q, "x")
    assert.is_false(ok)
    assert.matches("flat_map (spec/27-lua_flow_spec.lua:", tostring(err), 1,
                   true)
    assert.matches("sample 0: element 1 of the returned array has no field 'x'",
                   tostring(err), 1, true)
    p:close()
    q:close()
  end)

  it("checks the first outputs too, made before the schema was known",
     function()
    for _, threads in ipairs({1, 2, 4}) do
      for round = 1, 5 do
        local p = sluice.range(40):flat_map(function(s)
          if s.i == 5 then return {{y = 1}} end
          return {{x = s.i}, {x = -s.i}}
        end, {threads = threads, queue = 2})
        local got = {}
        local ok, err = pcall(function()
          for q in p:iter() do got[#got + 1] = q.x end
        end)
        assert.is_false(ok, ("threads %d, round %d"):format(threads, round))
        assert.matches("^flat_map %(spec/27%-lua_flow_spec%.lua:%d+%): "
                       .. "[%w ]*sample 5: ", tostring(err))
        assert.equal(10, #got)
        p:close()
      end
    end
  end)

  it("has no known length", function()
    local p = sluice.range(3):flat_map(copies)
    local n, why = p:length()
    assert.is_nil(n)
    assert.matches("flat_map", why, 1, true)
    p:close()
  end)

  it("starts over on a reset mid-pass", function()
    local p = sluice.range(5):flat_map(copies, {threads = 2})
    assert.equal(1, p:next().i)
    assert.equal(2, p:next().i)
    p:reset()
    assert.same({1, 2, 2, 3, 3, 3, 4, 4, 4, 4}, collect(p))
    p:reset()
    assert.same({1, 2, 2, 3, 3, 3, 4, 4, 4, 4}, collect(p))
    p:close()
  end)

  it("is the same for 1, 2 and 4 threads (ctx.rng included)", function()
    local function build(threads)
      return sluice.range(200):flat_map(function(s, ctx)
        local n = ctx.rng:random(0, 3)
        local out = {}
        for j = 1, n do
          out[j] = {i = s.i, r = ctx.rng:random(1, 1000), e = ctx.epoch}
        end
        return out
      end, {threads = threads, seed = 7})
    end
    local want
    for _, threads in ipairs({1, 2, 4}) do
      local p = build(threads)
      local got = pass_of(p, "i") .. "|" .. pass_of(p, "r")
      p:reset()
      got = got .. "|" .. pass_of(p, "r") .. "|" .. pass_of(p, "e")
      if want then
        assert.equal(want, got, "threads = " .. threads)
      else
        want = got
      end
      p:close()
    end
    assert.is_true(#want > 400)
  end)

  it("keeps the multiset with ordered = false", function()
    local p = sluice.range(50):flat_map(copies, {threads = 3, ordered = false})
    local got = collect(p)
    table.sort(got)
    local want = collect(sluice.range(50):flat_map(copies))
    assert.same(want, got)
    p:close()
  end)

  it("handles more outputs than its first guess", function()
    local p = sluice.range(3):flat_map(function(s)
      local t = {}
      for j = 1, 2000 * s.i do t[j] = {j = j} end
      return t
    end, {threads = 2})
    local got = collect(p, "j")
    assert.equal(6000, #got)
    assert.equal(2000, got[2000])
    assert.equal(1, got[2001])
    p:close()
  end)

  it("refuses bad arguments naming the method and the option", function()
    assert.matches(":flat_map%(%): expected a function",
                   misuse(function() sluice.range(3):flat_map(42) end))
    assert.matches(":flat_map%(%): unknown option 'bogus'",
                   misuse(function()
                     sluice.range(3):flat_map(copies, {bogus = 1})
                   end))
    assert.matches(":flat_map%(%): option 'threads' must be an integer >= 1",
                   misuse(function()
                     sluice.range(3):flat_map(copies, {threads = 0})
                   end))
    assert.matches("option 'deadline' must be a number of seconds",
                   misuse(function()
                     sluice.range(3):flat_map(copies, {deadline = -1})
                   end))
  end)

  it("says what it must return when fn returns something else", function()
    local cases = {
      {function() return 3 end, "returned a number"},
      {function(s) return s end, "returned a sample"},
      {function() return {x = 1} end, "returned a table with the key 'x'"},
      {function() return {1, 2} end, "returned a number as element 1"},
      {function()
        local sl = require "sluice"
        return sl.range(2)
      end, "returned a pipeline (it must return an array (a table) of "
        .. "samples or tables of fields, or nil for none; a pipeline cannot "
        .. "be returned"},
    }
    for i, c in ipairs(cases) do
      local p = sluice.range(3):flat_map(c[1], {schema = {{"i", "i64", {}}}})
      local ok, err = pcall(p.next, p)
      assert.is_false(ok, "case " .. i)
      assert.matches("flat_map (spec/27-lua_flow_spec.lua:", tostring(err), 1,
                     true)
      assert.matches("sample 0: flat_map function " .. c[2], tostring(err), 1,
                     true)
      p:close()
    end
  end)

  it("raises fn's error with its message, traceback and the stage", function()
    local p = sluice.range(10):flat_map(function(s)
      if s.i == 3 then error("no three") end
      return {s}
    end, {threads = 2})
    assert.same({0, 1, 2}, {p:next().i, p:next().i, p:next().i})
    local ok, err = pcall(p.next, p)
    assert.is_false(ok)
    err = tostring(err)
    assert.matches("^flat_map %(spec/27%-lua_flow_spec%.lua:%d+%): sample 3: "
                   .. "spec/27%-lua_flow_spec%.lua:%d+: no three", err)
    assert.matches("stack traceback", err, 1, true)
    p:reset() -- errors end the pass; a reset starts a clean one
    assert.equal(0, p:next().i)
    p:close()
  end)

  it("closes mid-pass with outputs in flight", function()
    for _, threads in ipairs({1, 3}) do
      local p = sluice.range(10000):flat_map(copies, {threads = threads,
                                                      queue = 8})
      assert.equal(1, p:next().i)
      p:close()
      assert.has_error(function() p:next() end)
    end
  end)
end)

-- The whole run of `passes` passes of a fresh build(), as "pass:value".
local function run(build, passes, f)
  local p, out = build(), {}
  for pass = 1, passes do
    for s in p:iter() do out[#out + 1] = pass .. ":" .. tostring(s[f]) end
    p:reset()
  end
  p:close()
  return out
end

-- Saves build() after `cut` entries of its run, restores a fresh build()
-- from that state and checks that the rest is the uninterrupted run.
local function check_resume(build, passes, cuts, f)
  local whole = run(build, passes, f)
  assert.is_true(#whole > passes)
  for _, cut in ipairs(cuts) do
    if cut <= #whole then
      local p, got, pass = build(), {}, 1
      while #got < cut do
        local s = p:next()
        if s == nil then
          pass = pass + 1
          p:reset()
        else
          got[#got + 1] = pass .. ":" .. tostring(s[f])
        end
      end
      local state = p:state()
      p:close()
      local q = build()
      q:restore(state)
      while pass <= passes do
        local s = q:next()
        if s == nil then
          pass = pass + 1
          q:reset()
        else
          got[#got + 1] = pass .. ":" .. tostring(s[f])
        end
      end
      q:close()
      assert.same(whole, got, "cut " .. cut)
    end
  end
  return whole
end

describe("saving and restoring flow stages", function()
  it("flat_map resumes inside an item and between items", function()
    for _, threads in ipairs({1, 3}) do
      check_resume(function()
        return sluice.range(7):flat_map(function(s, ctx)
          local out = {}
          for j = 1, s.i % 4 do
            out[j] = {v = s.i * 100 + j + ctx.rng:random(0, 9) * 1000}
          end
          return out
        end, {threads = threads, seed = 3})
      end, 2, {0, 1, 2, 3, 4, 6, 9, 12, 13, 15, 20}, "v")
    end
  end)

  it("flat_map resumes under a prefetch holding samples", function()
    check_resume(function()
      return sluice.range(30):flat_map(copies, {threads = 2}):prefetch(5)
    end, 2, {0, 7, 50, 100, 435, 440}, "i")
  end)

  it("flat_map resumes under a prefetch far ahead of it (a replay)", function()
    check_resume(function()
      return sluice.range(700):flat_map(function(s)
        return {{v = s.i}, {v = -s.i}, {v = 1000 + s.i}}
      end, {threads = 2}):prefetch(1500)
    end, 1, {0, 5, 1600, 2099}, "v")
  end)

  it("take_while and scan resume under a prefetch", function()
    check_resume(function()
      return sluice.range(10):take_while(function(s) return s.i < 6 end)
        :prefetch(3)
    end, 2, {0, 2, 6, 7, 11}, "i")
    check_resume(function()
      return sluice.range(8):scan(0, function(n, s)
        return n + s.i, {sum = n + s.i}
      end):prefetch(3)
    end, 2, {0, 3, 8, 12}, "sum")
  end)

  it("flat_map with ordered = false refuses to save, naming itself", function()
    local p = sluice.range(10):flat_map(copies, {ordered = false, threads = 2})
    p:next()
    local ok, err = pcall(p.state, p)
    assert.is_false(ok)
    assert.matches("flat_map (spec/27-lua_flow_spec.lua:", tostring(err), 1,
                   true)
    assert.matches("ordered=true", tostring(err), 1, true)
    p:close()
  end)

  it("take_while resumes at the upstream position", function()
    check_resume(function()
      return sluice.range(10):take_while(function(s) return s.i < 6 end)
    end, 3, {0, 1, 3, 5, 6, 7, 11, 12, 17}, "i")
  end)

  it("scan replays its pass to restore the state", function()
    check_resume(function()
      return sluice.range(8):scan({sum = 0, n = 0}, function(st, s)
        st.sum, st.n = st.sum + s.i, st.n + 1
        return st, {sum = st.sum, n = st.n}
      end)
    end, 2, {0, 1, 4, 7, 8, 9, 13, 15}, "sum")
  end)
end)

describe("p:take_while(fn)", function()
  it("stops at the first false, even if later samples would pass", function()
    local p = sluice.range(10):take_while(function(s) return s.i ~= 3 end)
    assert.same({0, 1, 2}, collect(p))
    assert.is_nil(p:next())
    p:reset()
    assert.same({0, 1, 2}, collect(p))
    p:close()
    local q = sluice.range(10):take_while(function(s) return s.i % 2 == 0 end)
    assert.same({0}, collect(q))
    q:close()
  end)

  it("reads no upstream sample past the false one", function()
    local q = sluice.reader(function()
      local i = -1
      return function()
        i = i + 1
        if i > 2 then error("read past the stop") end
        return {i = i}
      end
    end):take_while(function(s) return s.i < 2 end)
    assert.same({0, 1}, collect(q))
    q:close()
  end)

  it("keeps upstream's schema and gives every sample when fn holds", function()
    local p = sluice.range(4):take_while(function() return true end)
    assert.equal("i64", p:schema().i.dtype)
    assert.same({0, 1, 2, 3}, collect(p))
    local n = p:length()
    assert.is_nil(n)
    p:close()
  end)

  it("starts over on a reset mid-pass", function()
    local p = sluice.range(10):take_while(function(s) return s.i < 5 end)
    assert.equal(0, p:next().i)
    assert.equal(1, p:next().i)
    p:reset()
    assert.same({0, 1, 2, 3, 4}, collect(p))
    p:close()
  end)

  it("gives ctx an index and an epoch", function()
    local p = sluice.range(10):take_while(function(_, ctx)
      return ctx.index + ctx.epoch < 5
    end, {epoch = 2})
    assert.same({0, 1, 2}, collect(p))
    p:reset()
    assert.same({0, 1}, collect(p))
    p:close()
  end)

  it("refuses bad arguments", function()
    assert.matches(":take_while%(%): expected a function",
                   misuse(function() sluice.range(3):take_while({}) end))
    assert.matches(":take_while%(%): unknown option 'threads'",
                   misuse(function()
                     sluice.range(3):take_while(function() end, {threads = 2})
                   end))
  end)

  it("raises fn's error naming the stage and the sample", function()
    local p = sluice.range(5):take_while(function(s)
      if s.i == 2 then error("bad two") end
      return true
    end)
    assert.equal(0, p:next().i)
    assert.equal(1, p:next().i)
    local ok, err = pcall(p.next, p)
    assert.is_false(ok)
    assert.matches("^take_while %(spec/27%-lua_flow_spec%.lua:%d+%): sample 2: "
                   .. "spec/27%-lua_flow_spec%.lua:%d+: bad two", tostring(err))
    assert.matches("stack traceback", tostring(err), 1, true)
    p:close()
  end)

  it("ends a runaway call at its deadline", function()
    local p = sluice.range(3):take_while(function(s)
      if s.i == 1 then while true do end end
      return true
    end, {deadline = 0.2})
    assert.equal(0, p:next().i)
    local ok, err = pcall(p.next, p)
    assert.is_false(ok)
    assert.matches("deadline", tostring(err), 1, true)
    p:close()
  end)
end)

describe("p:scan(init, fn)", function()
  it("gives running sums, as tf.data's scan", function()
    local p = sluice.range(6):scan(0, function(acc, s)
      acc = acc + s.i
      return acc, {sum = acc}
    end)
    assert.same({0, 1, 3, 6, 10, 15}, collect(p, "sum"))
    assert.equal(6, p:length())
    p:close()
  end)

  it("restarts from init each pass and on a reset mid-pass", function()
    local p = sluice.range(5):scan({total = 0}, function(st, s)
      st.total = st.total + s.i -- changes the table in place
      s.total = st.total
      return st, s
    end)
    assert.same({0, 1, 3, 6, 10}, collect(p, "total"))
    p:reset()
    assert.same({0, 1, 3, 6, 10}, collect(p, "total"))
    p:reset()
    assert.equal(0, p:next().total)
    assert.equal(1, p:next().total)
    p:reset()
    assert.same({0, 1, 3, 6, 10}, collect(p, "total"))
    p:close()
  end)

  it("gives ctx as a third parameter", function()
    local p = sluice.range(4):scan("", function(st, _, ctx)
      st = st .. ctx.index
      return st, {s = st, e = ctx.epoch}
    end, {epoch = 5})
    assert.same({"0", "01", "012", "0123"}, collect(p, "s"))
    p:reset()
    assert.same({6, 6, 6, 6}, collect(p, "e"))
    p:close()
  end)

  it("checks outputs against the first one's schema or the given one",
     function()
    local p = sluice.range(4):scan(0, function(n, s)
      if s.i == 2 then return n, {other = 1} end
      return n, {x = s.i}
    end)
    assert.equal(0, p:next().x)
    assert.equal(1, p:next().x)
    local ok, err = pcall(p.next, p)
    assert.is_false(ok)
    assert.matches("scan (spec/27-lua_flow_spec.lua:", tostring(err), 1, true)
    assert.matches("sample 2: its output has no field 'x'", tostring(err), 1,
                   true)
    p:close()
    local q = sluice.range(2):scan(0, function(n, s)
      return n, {x = s.i}
    end, {schema = {{"x", "f64", {}}}})
    assert.equal("f64", q:schema().x.dtype)
    assert.same({0, 1}, collect(q, "x"))
    q:close()
  end)

  it("refuses bad arguments and an init that cannot be copied", function()
    assert.matches(":scan%(%): expected a function",
                   misuse(function() sluice.range(3):scan(0, 1) end))
    assert.matches(":scan%(%): unknown option 'threads'",
                   misuse(function()
                     sluice.range(3):scan(0, function() end, {threads = 2})
                   end))
    assert.matches(":scan%(%): init must be nil, a boolean, a number, a "
                   .. "string or a table of those %(init.f is a function%)",
                   misuse(function()
                     sluice.range(3):scan({f = print}, function() end)
                   end))
  end)

  it("says what fn must return", function()
    local p = sluice.range(3):scan(0, function(n) return n end,
                                   {schema = {{"i", "i64", {}}}})
    local ok, err = pcall(p.next, p)
    assert.is_false(ok)
    assert.matches("scan (spec/27-lua_flow_spec.lua:", tostring(err), 1, true)
    assert.matches("sample 0: scan function returned no output", tostring(err),
                   1, true)
    p:close()
  end)

  it("raises fn's error on the first sample at its place", function()
    local p = sluice.range(3):scan(0, function() error("first") end)
    local ok, err = pcall(p.next, p)
    assert.is_false(ok)
    assert.matches("^scan %(spec/27%-lua_flow_spec%.lua:%d+%): sample 0: "
                   .. "spec/27%-lua_flow_spec%.lua:%d+: first", tostring(err))
    p:close()
  end)

  it("closes mid-pass", function()
    local p = sluice.range(100):scan(0, function(n, s) return n + 1, s end)
    assert.equal(0, p:next().i)
    p:close()
    assert.has_error(function() p:next() end)
  end)
end)
