-- sluice.ship: turns a Lua function into the bytes that worker states
-- rebuild it from (bytecode plus upvalues), in pure Lua.
--
-- The one encoder of the project: the facade (sluice.init's ship()) and
-- the C entry point sl__lua_ship (src/script/lua_ship.c, for C callers) both
-- call encode() below.  The byte format, the identity rules (REF, JOIN),
-- the naming rules (MODULE, FIELD, the least (module, field) pair in byte
-- order) and the depth limit are documented at the top of
-- src/script/lua_ship.c, next to the decoder (sl__lua_unship) that reads
-- them; this file writes exactly that, and its error messages are those
-- listed in src/script/lua_host.h.
--
-- It needs nothing but the standard libraries and `ffi` (for the host-order
-- bytes of doubles and u32 lengths), so it runs in any LuaJIT state,
-- including the bare states of the C tests.
--
--   encode(value, what) -> where, data, name
--     value  a Lua function, a C function that a loaded module exports, or
--            a "module.function" string
--     what   the decorator's name for messages ("map", "filter", ...)
--   Returns, for a function, where = "<short_src>:<line>" (or the module's
--   name for a C function) and data = the encoded bytes; for a string,
--   where = name = the string (sl__shipped_new checks and splits it).
--   On failure: nil, message, code ("EINVAL": not a function or string;
--   "ELUA": an upvalue that cannot be shipped).  Never raises except on a
--   memory error.
local ffi = require "ffi"

local M = {}

local type, next, error, pcall = type, next, error, pcall
local byte, char, format, sub = string.byte, string.char, string.format, string.sub
local concat, dump = table.concat, string.dump
local getinfo, getupvalue, upvalueid = debug.getinfo, debug.getupvalue, debug.upvalueid
local getmetatable = debug.getmetatable
local floor = math.floor

local SHIP_MAX_DEPTH = 200
local PATH_CAP = 256
local UPV_SCALE = 256 -- an upvalue cell is remembered as fid * UPV_SCALE + k

local TAG_NIL, TAG_FALSE, TAG_TRUE, TAG_NUMBER, TAG_STRING = 0, 1, 2, 3, 4
local TAG_TABLE, TAG_TABLE_META, TAG_FUNCTION, TAG_MODULE = 5, 6, 7, 8
local TAG_FIELD, TAG_REF, TAG_JOIN, TAG_END = 9, 10, 11, 12

local f64 = ffi.new("double[1]")
local u32 = ffi.new("uint32_t[1]")

local function is_cfunction(f)
  return getinfo(f, "S").what == "C"
end

-- The type name used in messages (lua_ship.c's value_kind).
local function value_kind(v)
  local t = type(v)
  if t == "function" then return is_cfunction(v) and "C function" or "function" end
  return t -- "userdata" covers light userdata too, as in C
end

-- "<short_src>:<linedefined>" of function f.
local function function_where(f)
  local ar = getinfo(f, "S")
  if not ar then return "?" end
  return ar.short_src .. ":" .. ar.linedefined
end

local function varint(v)
  local b = {}
  repeat
    local low = v % 128
    v = floor(v / 128)
    b[#b + 1] = char(v > 0 and low + 128 or low)
  until v == 0
  return concat(b)
end

local KEYWORDS = {}
for w in ("and break do else elseif end false for function if in local nil "
          .. "not or repeat return then true until while"):gmatch("%S+") do
  KEYWORDS[w] = true
end

local function is_identifier(s)
  return s:find("^[%a_][%w_]*$") ~= nil and not KEYWORDS[s]
end

-- A raised failure carries this table; anything else raised is a Lua error.
local Failure = {}

local function is_uncopyable(v)
  local t = type(v)
  return t == "function" or t == "userdata" or t == "cdata"
end

-- loaded_inv[module value] = its least name in package.loaded;
-- field_inv[C function/userdata/cdata] = the least "module\0field" among
-- the string fields of the loaded tables (one level).  LuaJIT compares
-- strings byte by byte, as lua_ship.c's name_less did.
local function build_inverses()
  local loaded_inv, field_inv = {}, {}
  local reg = debug.getregistry()
  local loaded = reg and reg._LOADED
  if type(loaded) ~= "table" then return loaded_inv, field_inv end
  for name, v in next, loaded do
    local t = type(v)
    if type(name) == "string" and (t == "table" or is_uncopyable(v))
       and not name:find("\0", 1, true) then
      local old = loaded_inv[v]
      if old == nil or name < old then loaded_inv[v] = name end
      if t == "table" then
        for k, fv in next, v do
          if type(k) == "string" and is_uncopyable(fv) and
             not (type(fv) == "function" and not is_cfunction(fv)) then
            local key = name .. "\0" .. k
            local o = field_inv[fv]
            if o == nil or key < o then field_inv[fv] = key end
          end
        end
      end
    end
  end
  return loaded_inv, field_inv
end

function M.encode(value, what)
  what = what or "lua"
  local vt = type(value)
  if vt == "string" then
    -- The name reaches C as a C string: an embedded \0 would cut it.
    if value:find("\0", 1, true) then
      return nil, format("%s: '%s' is not a \"module.function\" name", what,
                         value:match("^[^%z]*")), "EINVAL"
    end
    return value, nil, value
  end
  if vt ~= "function" then
    return nil, format("%s: expected a function or a \"module.function\" "
                       .. "name, got a %s", what, value_kind(value)), "EINVAL"
  end

  local out, n = {}, 0
  local memo, upmemo = {}, {}
  local loaded_inv, field_inv = build_inverses()
  local nrefs, depth = 0, 0
  -- For messages: the innermost function being encoded, and the path of
  -- the upvalue being encoded (which starts after pbase bytes of path).
  local fwhere, path, pbase = "?", "", 0
  local failure

  local function put(s)
    n = n + 1
    out[n] = s
  end
  local function lstring(s)
    put(varint(#s))
    put(s)
  end

  -- Appends to the path, cutting it (with "...") at PATH_CAP - 1 bytes as
  -- the C writer's fixed buffer did.
  local function path_add(s)
    if #path >= PATH_CAP - 1 then return end
    if #path + #s >= PATH_CAP - 1 then
      path = sub(path .. s, 1, PATH_CAP - 4) .. "..."
    else
      path = path .. s
    end
  end

  local function fail(msg)
    failure = msg
    error(Failure, 0)
  end

  local function path_key(k)
    local t = type(k)
    if t == "string" then
      if is_identifier(k) then return path_add("." .. k) end
      local b = { '["' }
      for i = 1, #k do
        local c = byte(k, i)
        if c == 34 or c == 92 then
          b[#b + 1] = "\\" .. char(c)
        elseif c >= 32 and c < 127 then
          b[#b + 1] = char(c)
        else
          b[#b + 1] = "\\" .. c
        end
      end
      b[#b + 1] = '"]'
      return path_add(concat(b))
    elseif t == "number" then
      return path_add(format("[%.14g]", k))
    elseif t == "boolean" then
      return path_add(k and "[true]" or "[false]")
    end
    return path_add("[?]")
  end

  local function enter()
    depth = depth + 1
    if depth > SHIP_MAX_DEPTH then
      fail(format("%s: cannot ship upvalue '%s' of the function defined at "
                  .. "%s: nested more than %d tables/functions deep",
                  what, sub(path, pbase + 1), fwhere, SHIP_MAX_DEPTH))
    end
  end

  local function memo_add(v)
    memo[v] = nrefs
    nrefs = nrefs + 1
  end

  -- MODULE or FIELD when v has a name in this state; nil when it has none.
  -- Returns the name ("module" or "module.field").
  local function encode_named(v)
    local name = loaded_inv[v]
    if name then
      memo_add(v)
      put(char(TAG_MODULE))
      lstring(name)
      return name
    end
    local t = type(v)
    if t == "table" or (t == "function" and not is_cfunction(v)) then
      return nil -- copied, not named
    end
    local key = field_inv[v]
    if key then
      local z = key:find("\0", 1, true)
      local m, f = sub(key, 1, z - 1), sub(key, z + 1)
      memo_add(v)
      put(char(TAG_FIELD))
      lstring(m)
      lstring(f)
      return m .. "." .. f
    end
    return nil
  end

  local encode_value

  local function encode_table(t)
    enter()
    memo_add(t)
    local mt = getmetatable(t)
    put(char(mt ~= nil and TAG_TABLE_META or TAG_TABLE))
    local narr, total = #t, 0
    for _ in next, t do total = total + 1 end
    put(varint(narr))
    put(varint(total > narr and total - narr or 0))
    for k, v in next, t do
      local saved = path
      path_key(k)
      encode_value(k)
      encode_value(v)
      path = saved
    end
    put(char(TAG_END))
    if mt ~= nil then
      -- The path becomes getmetatable(<path>).
      local saved = path
      local inner = sub(path, pbase + 1)
      path = sub(path, 1, pbase)
      path_add("getmetatable(" .. inner .. ")")
      encode_value(mt)
      path = saved
    end
    depth = depth - 1
  end

  local function encode_function(f)
    enter()
    local fid = nrefs
    memo_add(f)
    local where = function_where(f)
    put(char(TAG_FUNCTION))
    local ok, code = pcall(dump, f)
    if not ok or #code > 0xFFFFFFFF then
      fail(format("%s: cannot dump the function defined at %s", what, where))
    end
    u32[0] = #code
    put(ffi.string(u32, 4))
    put(code)
    local nups = 0
    while getupvalue(f, nups + 1) ~= nil do nups = nups + 1 end
    put(varint(nups))

    -- Upvalue paths of this function start after the current path, and
    -- messages name this function.
    local saved_fwhere, saved_pbase, saved_path = fwhere, pbase, path
    fwhere, pbase = where, #path
    for k = 1, nups do
      local cell = upvalueid(f, k)
      local code_k = upmemo[cell]
      if code_k then
        -- A cell shared with a closure already written.
        local ofid = floor(code_k / UPV_SCALE)
        put(char(TAG_JOIN))
        put(varint(ofid))
        put(varint(code_k - ofid * UPV_SCALE))
      else
        upmemo[cell] = fid * UPV_SCALE + k
        local name, v = getupvalue(f, k)
        path = sub(path, 1, pbase)
        path_add(name ~= nil and name ~= "" and name or "?")
        encode_value(v)
      end
    end
    fwhere, pbase, path = saved_fwhere, saved_pbase, saved_path
    depth = depth - 1
  end

  function encode_value(v)
    local t = type(v)
    if t == "nil" then
      return put(char(TAG_NIL))
    elseif t == "boolean" then
      return put(char(v and TAG_TRUE or TAG_FALSE))
    elseif t == "number" then
      f64[0] = v
      put(char(TAG_NUMBER))
      return put(ffi.string(f64, 8))
    elseif t == "string" then
      put(char(TAG_STRING))
      return lstring(v)
    end
    local id = memo[v]
    if id then
      put(char(TAG_REF))
      return put(varint(id))
    end
    if t ~= "thread" and encode_named(v) then return end
    if t == "table" then
      return encode_table(v)
    elseif t == "function" and not is_cfunction(v) then
      return encode_function(v)
    end
    fail(format("%s: cannot ship upvalue '%s' (a %s) of the function defined "
                .. "at %s", what, sub(path, pbase + 1), value_kind(v), fwhere))
  end

  local root_where
  local ok, err = pcall(function()
    if is_cfunction(value) then
      -- `map(tostring)`: only a C function with a name can travel.
      root_where = encode_named(value)
      if not root_where then
        fail(format("%s: cannot ship a C function that is not a field of a "
                    .. "loaded module", what))
      end
      return
    end
    root_where = function_where(value)
    fwhere = root_where
    encode_value(value)
  end)
  if not ok then
    if err == Failure then return nil, failure, "ELUA" end
    error(err, 0) -- a memory error: the caller reports it
  end
  return root_where, concat(out, "", 1, n)
end

return M
