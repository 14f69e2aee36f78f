-- 01-sources_spec.lua: the sources of the DSL that need no worker state:
-- sluice.range, sluice.from_table (schema inference and explicit schemas),
-- sluice.open on SLR files written here through the C writer, and
-- sluice.version.
local ffi = require "ffi"
local sluice = require "sluice"
local C = require "sluice.cdef"

ffi.cdef [[
int sl_sample_alloc(sl_sample *s, int i, int rank, const int64_t *shape,
                    void **data);
]]

local H = dofile "spec/helper.lua"
local misuse, collect = H.misuse, H.collect

local function tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  return dir
end

-- Writes `n` records {label: i64[], text: bytes[-1]} ("rec K") to path,
-- `per_chunk` records per chunk, with metadata source = "spec".
local function write_slr(path, n, per_chunk)
  local sch = ffi.gc(C.sl_schema_new(), C.sl_schema_release)
  local shape = ffi.new("int64_t[1]", -1)
  assert.equal(0, C.sl_schema_add(sch, "label", "SL_I64", 0, nil))
  assert.equal(1, C.sl_schema_add(sch, "text", "SL_BYTES", 1, shape))
  assert.equal(0, C.sl_schema_set_meta(sch, "source", "spec"))
  local opts = ffi.new("sl_slr_writer_opts")
  opts.records_per_chunk = per_chunk
  local w = ffi.new("sl_slr_writer *[1]")
  assert.equal(0, C.sl_slr_writer_open(path, sch, opts, w))
  local data = ffi.new("void *[1]")
  for k = 0, n - 1 do
    local s = ffi.gc(C.sl_sample_new(sch), C.sl_sample_release)
    assert.equal(0, C.sl_sample_alloc(s, 0, 0, nil, data))
    ffi.cast("int64_t *", data[0])[0] = k
    local text = "rec " .. k
    shape[0] = #text
    assert.equal(0, C.sl_sample_alloc(s, 1, 1, shape, data))
    ffi.copy(data[0], text, #text)
    assert.equal(0, C.sl_slr_writer_append(w[0], s))
  end
  assert.equal(0, C.sl_slr_writer_close(w[0]))
end

describe("sluice", function()
  describe(".version()", function()
    it("returns the version of the loaded libsluice", function()
      assert.equal(ffi.string(C.sl_version()), sluice.version())
      assert.matches("^%d+%.%d+%.%d+$", sluice.version())
    end)
  end)

  describe(".range()", function()
    it("yields samples 0 .. n-1 with one i64 field 'i'", function()
      local p = sluice.range(5)
      assert.same({0, 1, 2, 3, 4}, collect(p))
      local sch = sluice.range(1):schema()
      assert.equal(1, #sch)
      assert.same({name = "i", dtype = "i64", shape = {}}, sch[1])
    end)

    it("yields nothing for n = 0", function()
      assert.same({}, collect(sluice.range(0)))
    end)

    it("rejects a negative or fractional n where it is called", function()
      assert.equal("sluice: sluice.range(): n must be an integer >= 0 (got -1)",
                   misuse(function() sluice.range(-1) end))
      assert.equal("sluice: sluice.range(): n must be an integer >= 0 (got 1.5)",
                   misuse(function() sluice.range(1.5) end))
      assert.equal("sluice: sluice.range(): n must be an integer >= 0 (got nil)",
                   misuse(function() sluice.range() end))
    end)
  end)

  describe(".from_table()", function()
    it("infers a schema: sorted names, i64, f64, bytes, bool", function()
      local p = sluice.from_table {
        {label = 1, weight = 0.5, text = "hello", ok = true},
        {label = 2, weight = 2, text = "", ok = false},
      }
      local sch = p:schema()
      assert.same({"label", "ok", "text", "weight"},
                  {sch[1].name, sch[2].name, sch[3].name, sch[4].name})
      assert.same({name = "label", dtype = "i64", shape = {}}, sch.label)
      assert.same({name = "ok", dtype = "bool", shape = {}}, sch.ok)
      assert.same({name = "text", dtype = "bytes", shape = {-1}}, sch.text)
      -- one non-integral value makes the whole field f64
      assert.same({name = "weight", dtype = "f64", shape = {}}, sch.weight)
      local a, b = p:next(), p:next()
      assert.same({label = 1, weight = 0.5, text = "hello", ok = true},
                  sluice.totable(a))
      assert.same({label = 2, weight = 2, text = "", ok = false},
                  sluice.totable(b))
      assert.is_nil(p:next())
    end)

    it("infers array dtypes and variable dims", function()
      local p = sluice.from_table {
        {m = {{1, 2, 3}, {4, 5, 6}}, v = {1.5, 2}, b = {true, false}},
        {m = {{7, 8, 9}}, v = {3, 4}, b = {false, true}},
      }
      local sch = p:schema()
      assert.same({-1, 3}, sch.m.shape)
      assert.equal("i64", sch.m.dtype)
      assert.same({2}, sch.v.shape)
      assert.equal("f64", sch.v.dtype)
      assert.equal("bool", sch.b.dtype)
      local s = p:next()
      assert.same({{1, 2, 3}, {4, 5, 6}}, s.m:totable())
      assert.same({1.5, 2}, s.v:totable())
      assert.same({true, false}, s.b:totable())
      s = p:next()
      assert.same({1, 3}, s.m.shape)
      assert.same({{7, 8, 9}}, s.m:totable())
    end)

    it("takes an explicit schema and converts values to its dtypes", function()
      local p = sluice.from_table({
        {image = {{1, 2}, {3, 4}}, label = 7, name = "a"},
        {image = {{5, 6}, {7, 8}}, label = 9, name = "bc"},
      }, {{"image", "u8", {2, 2}}, {"label", "i32", {}}, {"name", "bytes", {-1}}})
      local sch = p:schema()
      assert.same({"image", "label", "name"}, {sch[1].name, sch[2].name, sch[3].name})
      local s = p:next()
      assert.equal("u8", s.image.dtype)
      assert.same({{1, 2}, {3, 4}}, s.image:totable())
      assert.equal(7, s.label)
      assert.equal("a", s.name)
    end)

    it("accepts {name=, dtype=, shape=} entries, p:schema() output and metadata", function()
      local p = sluice.from_table({{x = 1.25}}, {
        {name = "x", dtype = "f32"}, metadata = {origin = "spec"},
      })
      local sch = p:schema()
      assert.same({name = "x", dtype = "f32", shape = {}}, sch.x)
      assert.same({origin = "spec"}, sch.metadata)
      local q = sluice.from_table({{x = 2}}, sch)
      assert.same(sch, q:schema())
      assert.equal(2, q:next().x)
    end)

    it("accepts tensors as values", function()
      local t = sluice.tensor("f32", {3})
      t[0], t[1], t[2] = 1, 2, 3
      local p = sluice.from_table {{x = t}}
      assert.same({name = "x", dtype = "f32", shape = {3}}, p:schema().x)
      assert.same({1, 2, 3}, p:next().x:totable())
    end)

    it("accepts samples as rows", function()
      local a = sluice.range(3)
      local rows = {a:next(), a:next()}
      assert.same({0, 1}, collect(sluice.from_table(rows)))
    end)

    it("replays its rows on every pass", function()
      local p = sluice.from_table {{i = 1}, {i = 2}}
      assert.same({1, 2}, collect(p))
      p:reset()
      assert.same({1, 2}, collect(p))
    end)

    it("makes an empty source from an explicit schema", function()
      local p = sluice.from_table({}, {{"i", "i64", {}}})
      assert.is_nil(p:next())
      assert.equal("i64", p:schema().i.dtype)
    end)

    it("reports bad rows and schemas where it is called", function()
      assert.equal("sluice: sluice.from_table(): an empty table needs a schema",
                   misuse(function() sluice.from_table {} end))
      assert.equal("sluice: sluice.from_table(): rows must be an array of "
                   .. "tables (got a string)",
                   misuse(function() sluice.from_table "x" end))
      assert.equal("sluice: sluice.from_table(): row 2 has no field 'b'",
                   misuse(function()
                     sluice.from_table {{a = 1, b = 2}, {a = 1}}
                   end))
      assert.equal("sluice: sluice.from_table(): row 2 has an unknown field "
                   .. "'c' (fields: a)",
                   misuse(function() sluice.from_table {{a = 1}, {a = 1, c = 3}} end))
      assert.equal("sluice: sluice.from_table(): row 2, field 'a': a string "
                   .. "where row 1 has a number",
                   misuse(function() sluice.from_table {{a = 1}, {a = "x"}} end))
      assert.equal("sluice: sluice.from_table(): row 1, field 'f': an array "
                   .. "mixes numbers and booleans",
                   misuse(function() sluice.from_table {{f = {1, true}}} end))
      assert.equal("sluice: sluice.from_table(): row 2, field 'm': rank 1 "
                   .. "where row 1 has rank 2",
                   misuse(function()
                     sluice.from_table {{m = {{1}}}, {m = {1}}}
                   end))
      assert.equal("sluice: sluice.from_table(): row 1, field 'x': 1.5 is not "
                   .. "an integer (dtype i64)",
                   misuse(function()
                     sluice.from_table({{x = 1.5}}, {{"x", "i64", {}}})
                   end))
      assert.equal("sluice: sluice.from_table(): row 1, field 'x': 300 is out "
                   .. "of range for u8",
                   misuse(function()
                     sluice.from_table({{x = 300}}, {{"x", "u8", {}}})
                   end))
      assert.equal("sluice: sluice.from_table(): row 1, field 'x': expected "
                   .. "shape [2], got [3]",
                   misuse(function()
                     sluice.from_table({{x = {1, 2, 3}}}, {{"x", "f32", {2}}})
                   end))
      assert.equal("sluice: sluice.from_table(): row 1, field 'x': ragged "
                   .. "nested array (1 elements where 2 were expected at "
                   .. "depth 2)",
                   misuse(function()
                     sluice.from_table({{x = {{1, 2}, {3}}}},
                                       {{"x", "f32", {-1, -1}}})
                   end))
      assert.equal("sluice: sluice.from_table(): schema field 'x': unknown "
                   .. "dtype 'f128'",
                   misuse(function()
                     sluice.from_table({{x = 1}}, {{"x", "f128", {}}})
                   end))
      assert.equal("sluice: sluice.from_table(): schema field 'x': shape[1] "
                   .. "must be an integer >= 0 or -1 (got -2)",
                   misuse(function()
                     sluice.from_table({{x = {1}}}, {{"x", "f32", {-2}}})
                   end))
    end)
  end)

  describe(".open()", function()
    local dir, path

    setup(function()
      dir = tmpdir()
      path = dir .. "/data.slr"
      write_slr(path, 10, 3) -- chunks of 3, 3, 3, 1 records
    end)

    teardown(function()
      os.execute("rm -rf '" .. dir .. "'")
    end)

    it("opens a .slr path and yields its records with the file's schema", function()
      local p = sluice.open(path)
      local sch = p:schema()
      assert.same({name = "label", dtype = "i64", shape = {}}, sch[1])
      assert.same({name = "text", dtype = "bytes", shape = {-1}}, sch[2])
      -- the writer's own keys (sluice.*: set identity, chunk limit) aside
      local meta = {}
      for k, v in pairs(sch.metadata) do
        if not k:match("^sluice%.") then meta[k] = v end
      end
      assert.same({source = "spec"}, meta)
      assert.same({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, collect(p, "label"))
      p:reset()
      local s = p:next()
      assert.equal("rec 0", s.text)
    end)

    it("opens \"slr:path\" whatever the extension", function()
      local other = dir .. "/data.bin"
      os.execute("cp '" .. path .. "' '" .. other .. "'")
      assert.same({0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
                  collect(sluice.open("slr:" .. other), "label"))
    end)

    it("reads a record range with first and count", function()
      assert.same({4, 5, 6}, collect(sluice.open(path, {first = 4, count = 3}),
                                     "label"))
      assert.same({8, 9}, collect(sluice.open(path, {first = 8}), "label"))
    end)

    it("reads a chunk range with chunks = {first, n}", function()
      assert.same({3, 4, 5, 6, 7, 8},
                  collect(sluice.open(path, {chunks = {1, 2}}), "label"))
      assert.same({9}, collect(sluice.open(path, {chunks = {3, 1}}), "label"))
    end)

    it("applies the corruption policy", function()
      -- Flip one byte in the middle of the file: inside a chunk payload.
      local bad = dir .. "/bad.slr"
      local f = assert(io.open(path, "rb"))
      local bytes = f:read("*a")
      f:close()
      local first_chunk_payload = 32 + 40 + 4
      local pos = first_chunk_payload + 1
      bytes = bytes:sub(1, pos - 1)
        .. string.char((bytes:byte(pos) + 1) % 256) .. bytes:sub(pos + 1)
      f = assert(io.open(bad, "wb"))
      f:write(bytes)
      f:close()
      local p = sluice.open(bad)
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.matches("chunk 0", err)
      local q = sluice.open(bad, {policy = "skip_chunk", max_bad_chunks = 1})
      assert.same({3, 4, 5, 6, 7, 8, 9}, collect(q, "label"))
    end)

    it("raises the C message for a missing file", function()
      local ok, err = pcall(sluice.open, dir .. "/missing.slr")
      assert.is_false(ok)
      assert.matches("missing%.slr", err)
    end)

    it("rejects unknown tags, names without a format, and bad options", function()
      local ok, err = pcall(sluice.open, "nope:foo")
      assert.is_false(ok)
      assert.matches("open: unknown format tag 'nope' in 'nope:foo' %(known "
                     .. "tags: csv, idx, image, npy, slr, text, tfrecord, tokens, wds%)", err)
      ok, err = pcall(sluice.open, "foo.unknownext")
      assert.is_false(ok)
      assert.matches("foo%.unknownext", err)
      assert.equal("sluice: sluice.open(): unknown option 'polcy' (known: "
                   .. "buffer, channels, chunks, columns, compression, count, "
                   .. "delimiter, features, field, fields, first, header, "
                   .. "labels, "
                   .. "max_bad, max_bad_chunks, max_chunk_bytes, missing, "
                   .. "mmap, "
                   .. "ordered, parser, parser_options, policy, resize, "
                   .. "schema, seed, shape, shard, shuffle, threads, window)",
                   misuse(function() sluice.open(path, {polcy = "fail"}) end))
      assert.equal("sluice: sluice.open(): option 'policy' must be \"fail\" or "
                   .. "\"skip_chunk\" (got skip)",
                   misuse(function() sluice.open(path, {policy = "skip"}) end))
      assert.equal("sluice: sluice.open(): use either 'chunks' or "
                   .. "'first'/'count'",
                   misuse(function()
                     sluice.open(path, {chunks = {0, 1}, first = 2})
                   end))
      assert.equal("sluice: sluice.open(): options 'first', 'count' and "
                   .. "'chunks' select records of one slr file (got "
                   .. "'text:x.txt')",
                   misuse(function() sluice.open("text:x.txt", {first = 1}) end))
    end)
  end)

  describe(".open_files", function()
    it("is the several-files reader (spec/11-files_spec.lua)", function()
      assert.is_function(sluice.open_files)
    end)
  end)
end)
