-- 20-layouts_spec.lua: the structs the Lua layer declares (ffi.cdef in
-- lua/sluice/*.lua: device.lua by hand, and the generated header.lua) have
-- C's layout.  The C side is
-- tests/layouts.c (sluice_test_layouts, $SLUICE_LAYOUTS): sizeof, alignof
-- and offsetof of every struct of include/sluice/*.h, of sl__lua_pins and
-- sl__lua_stage_opts (src/script/lua_host.h) and of DLPack's
-- DLManagedTensor.  The Lua side is found by reading the sources,
-- so a struct declared in Lua later without a line in layouts.c fails here,
-- named; and every struct and field of sluice.h must be in layouts.c.
local ffi = require "ffi"


local function read(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  return text
end

-- --- a reader of C struct declarations -------------------------------------

local function strip_comments(c)
  return (c:gsub("/%*.-%*/", " "):gsub("//[^\n]*", " "))
end

-- The index of the "}" closing the "{" at `open`.
local function closing(text, open)
  local depth = 0
  for i = open, #text do
    local ch = text:sub(i, i)
    if ch == "{" then
      depth = depth + 1
    elseif ch == "}" then
      depth = depth - 1
      if depth == 0 then return i end
    end
  end
  error("unbalanced braces after: " .. text:sub(open, open + 60))
end

-- `s` cut at the characters of `seps` that are outside (), {} and [].
local function split_top(s, seps)
  local parts, depth, start = {}, 0, 1
  for i = 1, #s do
    local ch = s:sub(i, i)
    if ch:find("[%({%[]") then
      depth = depth + 1
    elseif ch:find("[%)}%]]") then
      depth = depth - 1
    elseif depth == 0 and seps:find(ch, 1, true) then
      parts[#parts + 1] = s:sub(start, i - 1)
      start = i + 1
    end
  end
  parts[#parts + 1] = s:sub(start)
  return parts
end

-- The name a declarator declares: "x", "*x", "x[8]", "(*x)(int, int)".
local function declarator_name(d)
  local fn = d:match("%(%s*%*%s*([%w_]+)%s*%)")
  if fn then return fn end
  d = d:gsub("%b[]", "")
  return d:match("([%w_]+)%s*$")
end

-- The fields of a struct body, in order, as paths: a field of an anonymous
-- nested struct is "outer.inner" (after "outer" itself).
local function fields_of(body, prefix, out)
  out = out or {}
  for _, decl in ipairs(split_top(body, ";")) do
    decl = decl:match("^%s*(.-)%s*$")
    if decl ~= "" then
      local open = decl:match("^struct%s*[%w_]*%s*(){")
      local declarators = decl
      local inner
      if open then
        local close = closing(decl, open)
        inner = decl:sub(open + 1, close - 1)
        declarators = decl:sub(close + 1)
      end
      for i, d in ipairs(split_top(declarators, ",")) do
        if i > 1 or inner or d:find("[%w_]") then
          local name = assert(declarator_name(d), "no field name in: " .. decl)
          out[#out + 1] = prefix .. name
          if inner then fields_of(inner, prefix .. name .. ".", out) end
        end
      end
    end
  end
  return out
end

-- Every struct with a body at the top level of C text `c` (comments already
-- removed): {name = typedef name or tag, fields = {paths}}, in order.
local function structs_of(c)
  local found, pos = {}, 1
  while true do
    local s, tag, open = c:match("()struct%s+([%w_]*)%s*(){", pos)
    local s2, open2 = c:match("()struct%s*(){", pos)
    if s2 and (not s or s2 < s) then s, tag, open = s2, "", open2 end
    if not s then break end
    local close = closing(c, open)
    local typedef_name = c:match("^%s*([%w_]+)%s*;", close + 1)
    local is_typedef = c:sub(1, s - 1):match("typedef%s*$") ~= nil
    local name = is_typedef and typedef_name or tag
    assert(name and name ~= "", "a struct without a name: "
           .. c:sub(s, math.min(close, s + 60)))
    found[#found + 1] = {
      name = name,
      fields = fields_of(c:sub(open + 1, close - 1), ""),
    }
    pos = close + 1
  end
  return found
end

-- --- the C side ------------------------------------------------------------

local function c_layouts()
  -- CTest sets it (CMakeLists.txt); by hand: <build>/sluice_test_layouts.
  local exe = assert(os.getenv("SLUICE_LAYOUTS"),
                     "SLUICE_LAYOUTS: the path of sluice_test_layouts")
  local p = assert(io.popen("'" .. exe .. "'"))
  local out = p:read("*a")
  local ok = p:close()
  assert(ok == true or ok == 0, exe .. " failed")
  local structs = {}
  for line in out:gmatch("[^\n]+") do
    local name, size, align = line:match("^struct ([%w_]+) (%d+) (%d+)$")
    if name then
      structs[name] = {size = tonumber(size), align = tonumber(align),
                       fields = {}, order = {}}
    else
      local sname, field, off = line:match("^field ([%w_]+) ([%w_%.]+) (%d+)$")
      assert(sname and structs[sname], exe .. ": unexpected line: " .. line)
      structs[sname].fields[field] = tonumber(off)
      table.insert(structs[sname].order, field)
    end
  end
  return structs
end

local C = c_layouts()

-- --- the Lua side ----------------------------------------------------------

local lua_dir = assert(package.searchpath("sluice.cdef", package.path),
                       "sluice.cdef not on package.path"):match("^(.*)/[^/]+$")

-- Every struct the Lua sources declare: {name, fields, file, module}.
local function lua_structs()
  local list = {}
  local ls = assert(io.popen("ls '" .. lua_dir .. "'"))
  -- and sluice.header, generated from the headers into the build tree
  local header = assert(package.searchpath("sluice.header", package.path),
                        "sluice.header not on package.path")
  local files = {header:match("[^/]+$")}
  for file in ls:lines() do files[#files + 1] = file end
  ls:close()
  for _, file in ipairs(files) do
    local mod = file:match("^([%w_]+)%.lua$")
    if mod then
      local path = file == "header.lua" and header or lua_dir .. "/" .. file
      -- The C declarations are in long strings ([[ ]] and [=[ ]=]).
      for _, decl in read(path):gmatch("%[(=*)%[(.-)%]%1%]") do
        for _, st in ipairs(structs_of(strip_comments(decl))) do
          st.file = "lua/sluice/" .. file
          st.module = mod == "init" and "sluice" or "sluice." .. mod
          list[#list + 1] = st
        end
      end
    end
  end
  return list
end

-- Offset of field path `path` ("a" or "a.b.c") in a value of ctype `ct`.
local function lua_offset(ct, path)
  local obj = ffi.new(ct)
  local base = ffi.cast("char *", obj)
  local parent, parent_ct = obj, ct
  local names = {}
  for name in path:gmatch("[^%.]+") do names[#names + 1] = name end
  for i = 1, #names - 1 do
    if not ffi.offsetof(parent_ct, names[i]) then return nil end
    parent = parent[names[i]]
    parent_ct = ffi.typeof(parent)
  end
  local off = ffi.offsetof(parent_ct, names[#names])
  if not off then return nil end
  return tonumber(ffi.cast("char *", parent) - base) + off
end

-- The differences between Lua's declaration `st` and C's layout, as lines.
local function compare(st, c)
  local bad = {}
  local where = " (" .. st.file .. ")"
  local ok, ct = pcall(ffi.typeof, st.name)
  if not ok then
    ok, ct = pcall(ffi.typeof, "struct " .. st.name)
  end
  if not ok then
    return {st.name .. ": not known to the FFI after requiring "
            .. st.module .. where}
  end
  if ffi.sizeof(ct) ~= c.size then
    bad[#bad + 1] = ("%s: sizeof %d in Lua%s, %d in C"):format(
      st.name, ffi.sizeof(ct), where, c.size)
  end
  if ffi.alignof(ct) ~= c.align then
    bad[#bad + 1] = ("%s: alignof %d in Lua%s, %d in C"):format(
      st.name, ffi.alignof(ct), where, c.align)
  end
  local in_lua = {}
  for _, f in ipairs(st.fields) do
    in_lua[f] = true
    local off = lua_offset(ct, f)
    if c.fields[f] == nil then
      bad[#bad + 1] = ("%s.%s: declared in Lua%s, not a field in C "
                       .. "(tests/layouts.c)"):format(st.name, f, where)
    elseif off ~= c.fields[f] then
      bad[#bad + 1] = ("%s.%s: offset %s in Lua%s, %d in C"):format(
        st.name, f, tostring(off), where, c.fields[f])
    end
  end
  for _, f in ipairs(c.order) do
    if not in_lua[f] then
      bad[#bad + 1] = ("%s.%s: a field in C (offset %d), not declared in "
                       .. "Lua%s"):format(st.name, f, c.fields[f], where)
    end
  end
  return bad
end

local declared = lua_structs()

describe("struct layouts: Lua against C", function()
  it("finds the structs the Lua sources declare", function()
    local names = {}
    for _, st in ipairs(declared) do names[st.name] = st.file end
    -- The reader of the sources works (else every check below is vacuous).
    assert.equal("lua/sluice/header.lua", names.sl_tensor)
    assert.equal("lua/sluice/header.lua", names.sl_open_files_opts)
    assert.equal("lua/sluice/device.lua", names.DLManagedTensor)
  end)

  it("tests/layouts.c lists every struct and field of include/sluice.h",
     function()
    local bad = {}
    -- sluice.h is its parts, include/sluice/*.h (unstable.h among them).
    local ls = assert(io.popen("ls include/sluice/*.h"))
    local text = {}
    for path in ls:lines() do text[#text + 1] = read(path) end
    ls:close()
    local structs = structs_of(strip_comments(table.concat(text, "\n")))
    assert.is_true(#structs >= 10, "structs read from sluice.h: " .. #structs)
    for _, st in ipairs(structs) do
      local c = C[st.name]
      if not c then
        bad[#bad + 1] = "struct " .. st.name .. " of include/sluice.h has "
                        .. "no S() line in tests/layouts.c"
      else
        for _, f in ipairs(st.fields) do
          if c.fields[f] == nil then
            bad[#bad + 1] = ("field %s.%s of include/sluice.h has no F() "
                             .. "line in tests/layouts.c"):format(st.name, f)
          end
        end
      end
    end
    assert(#bad == 0, table.concat(bad, "\n"))
  end)

  for _, st in ipairs(declared) do
    it(st.name .. " (" .. st.file .. ") has C's size, alignment and "
       .. "field offsets", function()
      require(st.module)
      local c = C[st.name]
      assert(c, "struct " .. st.name .. " is declared in " .. st.file
             .. " but tests/layouts.c has no entry for it: add its S() and "
             .. "F() lines")
      local bad = compare(st, c)
      assert(#bad == 0, table.concat(bad, "\n"))
    end)
  end

  -- The comparison itself: sl_tensor declared with two fields swapped
  -- fails, naming the struct and both fields (and nothing else).
  it("names the struct and the field that differ", function()
    ffi.cdef [[
      typedef struct sl_layouts_probe {
        int32_t rank; sl_dtype dtype; int64_t shape[8];
        void *data; size_t nbytes; sl_buffer *buf; const int64_t *lod;
        int64_t lod_len; sl_buffer *lod_buf;
      } sl_layouts_probe;
    ]]
    local st = structs_of([[
      typedef struct sl_layouts_probe {
        int32_t rank; sl_dtype dtype; int64_t shape[8];
        void *data; size_t nbytes; sl_buffer *buf; const int64_t *lod;
        int64_t lod_len; sl_buffer *lod_buf;
      } sl_layouts_probe;
    ]])[1]
    st.file, st.module = "probe", "ffi"
    local msg = table.concat(compare(st, C.sl_tensor), "\n")
    assert.equal("sl_layouts_probe.rank: offset 0 in Lua (probe), 4 in C\n"
                 .. "sl_layouts_probe.dtype: offset 4 in Lua (probe), 0 in C",
                 msg)
  end)
end)
