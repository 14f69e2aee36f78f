-- 11-files_spec.lua: the file readers behind sluice.open (idx, text with a
-- plugin or a Lua parser, globs), sluice.open_files (ordered, shuffled,
-- sharded, epochs) and sluice.shard_env, on files made here and on the real
-- Fashion-MNIST test set.
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse = H.misuse

local FMNIST = "/usr/share/datasets/fashion-mnist/"
local CLI = os.getenv("SLUICE_CLI")

local function tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  return dir
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end


describe("sluice files", function()
  local dir, build
  setup(function()
    dir = tmpdir()
    build = H.build_dir()
  end)
  teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

  describe(".open() on idx files", function()
    it("reads Fashion-MNIST images with their labels", function()
      assert.truthy(io.open(FMNIST .. "t10k-labels-idx1-ubyte.gz"),
                    "install the dataset-fashion-mnist package")
      local p = sluice.open("idx:" .. FMNIST .. "t10k-images-idx3-ubyte.gz")
      local sch = p:schema()
      assert.same({28, 28}, sch.image.shape)
      assert.equal("u8", sch.image.dtype)
      local n, first = 0, nil
      for s in p:iter() do
        n = n + 1
        first = first or s.label
      end
      assert.equal(10000, n)
      assert.equal(9, first) -- the first t10k label is an ankle boot
    end)
  end)

  describe(".open() on text files", function()
    it("yields lines, the same with mmap and with reads", function()
      local path = dir .. "/lines.txt"
      write(path, "one\r\n\nthree")
      for _, mmap in ipairs({false, true}) do
        local got = {}
        for s in sluice.open("text:" .. path, {mmap = mmap}):iter() do
          got[#got + 1] = s.line
        end
        assert.same({"one", "", "three"}, got)
      end
    end)

    it("runs a Lua parser in worker states, in order", function()
      local path = dir .. "/nums.csv"
      local lines = {}
      for i = 1, 200 do lines[i] = ("%d,%d"):format(i, 2 * i) end
      write(path, table.concat(lines, "\n"))
      local p = sluice.open("text:" .. path, {threads = 2, parser = function(line)
        local a, b = line:match("^(%d+),(%d+)$")
        return {a = tonumber(a), b = tonumber(b)}
      end})
      local k = 0
      for s in p:iter() do
        k = k + 1
        assert.equal(k, s.a)
        assert.equal(2 * k, s.b)
      end
      assert.equal(200, k)
    end)

    it("runs LUA.md's word-lengths parser over empty lines (issue 19, 2)", function()
      -- An empty line's row {lengths = {}} is an empty array with no
      -- dtype of its own; made before the stage learned i64[-1] from the
      -- first line, it takes that dtype instead of failing as f64[0].
      local path = dir .. "/words.txt"
      write(path, "a bb\nccc\n\nd e f\n\n")
      for _, threads in ipairs({1, 2}) do
        local p = sluice.open("text:" .. path, {threads = threads, parser = function(line)
          local t = {}
          for w in line:gmatch("%S+") do t[#t + 1] = #w end
          return {lengths = t}
        end})
        assert.same({-1}, p:schema().lengths.shape)
        local got = {}
        for s in p:iter() do
          assert.equal("i64", s.lengths.dtype)
          got[#got + 1] = s.lengths:numel()
        end
        assert.same({2, 1, 0, 3, 0}, got)
        p:close()
      end
    end)

    it("reports a Lua parser's error with its line's traceback", function()
      local path = dir .. "/bad.txt"
      write(path, "ok\nboom\n")
      local p = sluice.open("text:" .. path, {parser = function(line)
        if line == "boom" then error("cannot parse " .. line) end
        return {n = #line}
      end})
      assert.equal(2, p:next().n)
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.matches("cannot parse boom", err)
      assert.matches("11%-files_spec%.lua:%d+", err)
    end)

    it("loads a parser plugin", function()
      local path = dir .. "/floats.csv"
      write(path, "1,2,3,4\n5,6,7,8\n")
      local so = build .. "/examples/plugins/libcsv_floats.so"
      assert.truthy(io.open(so), "build the example plugins: " .. so)
      local p = sluice.open("text:" .. path, {parser = so,
                                              parser_options = "n=4"})
      local s = p:next()
      assert.same({1, 2, 3, 4}, s.x:totable())
      assert.same({5, 6, 7, 8}, p:next().x:totable())
      assert.is_nil(p:next())
    end)

    it("refuses a Lua parser on a file without lines", function()
      assert.matches("a Lua parser needs a text file",
                     misuse(function()
                       sluice.open("idx:" .. FMNIST
                                   .. "t10k-images-idx3-ubyte.gz",
                                   {parser = function() end})
                     end))
    end)
  end)

  describe(".open_files()", function()
    local files
    setup(function()
      local cli = CLI or (build .. "/tools/sluice")
      files = {}
      -- three small shards of text records, 20 chunks in all
      for k = 1, 3 do
        local txt = dir .. ("/part%d.txt"):format(k)
        local t = {}
        for i = 1, 30 * k do t[i] = ("%d-%d"):format(k, i) end
        write(txt, table.concat(t, "\n"))
        local out = dir .. ("/part%d.slr"):format(k)
        assert(os.execute(("'%s' pack text '%s' -o '%s' --records-per-chunk 9 -q")
                          :format(cli, txt, out)))
        files[k] = out
      end
    end)

    local function read_all(p)
      local out = {}
      for s in p:iter() do out[#out + 1] = s.text end
      return out
    end

    it("reads every record once, in the same order for any thread count", function()
      local base = read_all(sluice.open_files(files, {threads = 1, shuffle = true,
                                                      seed = 5}))
      assert.equal(180, #base)
      local seen = {}
      for _, v in ipairs(base) do
        assert.is_nil(seen[v])
        seen[v] = true
      end
      for _, t in ipairs({2, 4}) do
        assert.same(base, read_all(sluice.open_files(files, {
          threads = t, shuffle = true, seed = 5})))
      end
      -- without shuffle: the files' records in order
      local plain = read_all(sluice.open_files{files[1], files[2], files[3]})
      assert.equal("1-1", plain[1])
      assert.equal("3-90", plain[180])
    end)

    it("moves to the next epoch on reset", function()
      local p = sluice.open_files(files, {shuffle = true, seed = 5, threads = 2})
      local e0 = read_all(p)
      p:reset()
      local e1 = read_all(p)
      assert.are_not.same(e0, e1)
      table.sort(e0)
      table.sort(e1)
      assert.same(e0, e1)
    end)

    it("gives 4 ranks disjoint shares that cover the epoch", function()
      local seen, sizes = {}, {}
      for r = 0, 3 do
        local part = read_all(sluice.open_files(files, {
          shuffle = true, seed = 9, threads = 2,
          shard = {rank = r, world = 4, remainder = "uneven"}}))
        sizes[#sizes + 1] = #part
        for _, v in ipairs(part) do
          assert.is_nil(seen[v])
          seen[v] = true
        end
      end
      local n = 0
      for _ in pairs(seen) do n = n + 1 end
      assert.equal(180, n)
      assert.same({45, 45, 45, 45}, sizes)
    end)

    it("rejects bad options", function()
      assert.equal("sluice: sluice.open_files(): option 'shard' needs both "
                   .. "rank and world (or neither: then they come from the "
                   .. "launcher's environment)",
                   misuse(function()
                     sluice.open_files(files, {shard = {rank = 1}})
                   end))
      assert.equal("sluice: sluice.open_files(): shard.remainder must be "
                   .. "\"pad\", \"drop\" or \"uneven\" (got some)",
                   misuse(function()
                     sluice.open_files(files, {shard = {remainder = "some"}})
                   end))
      assert.equal("sluice: sluice.open_files(): no file names",
                   misuse(function() sluice.open_files({}) end))
    end)
  end)

  describe(".shard_env()", function()
    it("is rank 0 of 1 without a launcher", function()
      if os.getenv("RANK") or os.getenv("OMPI_COMM_WORLD_RANK")
         or os.getenv("PMI_RANK") or os.getenv("PADDLE_TRAINER_ID") then
        pending("run under a launcher: the environment names a rank")
        return
      end
      local r, w = sluice.shard_env()
      assert.equal(0, r)
      assert.equal(1, w)
    end)
  end)
end)
