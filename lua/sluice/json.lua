-- sluice.json - a JSON decoder (RFC 8259) for the `.json` members of
-- WebDataset shards and other JSON text held in bytes fields.
--
--   local json = require "sluice.json"   -- also sluice.json(text)
--   local t = json.decode(s.json)        -- s.json: a string, or a bytes view
--
-- Objects become Lua tables with string keys, arrays tables with keys 1..n
-- (their length in `n`), strings Lua strings (\uXXXX escapes, surrogate
-- pairs included, as UTF-8), numbers Lua numbers, true/false booleans and
-- null the sentinel json.null (so an array's holes and an object's null
-- members stay visible).  Anything else - trailing text, a bad escape, a
-- control character inside a string, nesting deeper than 512 - raises an
-- error naming the byte offset: "sluice.json: offset 12: expected ':'".
--
-- Pure Lua so that it loads in worker states as well (a map can decode on
-- the stage's threads); the scanner works on string.byte/find, which
-- LuaJIT compiles.  It decodes only: sluice never writes JSON.
local byte, sub, find, char = string.byte, string.sub, string.find, string.char
local tonumber, concat, floor = tonumber, table.concat, math.floor

local json = {}

-- The value of JSON null.
json.null = setmetatable({}, {__tostring = function() return "null" end,
                              __newindex = function()
                                error("sluice.json: json.null is read-only", 2)
                              end})

local MAX_DEPTH = 512

local function fail(pos, what)
  error(("sluice.json: offset %d: %s"):format(pos - 1, what), 0)
end

local function skip_ws(s, pos)
  local _, e = find(s, "^[ \t\r\n]*", pos)
  return e + 1
end

local function utf8(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then
    return char(0xC0 + floor(cp / 0x40), 0x80 + cp % 0x40)
  end
  if cp < 0x10000 then
    return char(0xE0 + floor(cp / 0x1000), 0x80 + floor(cp / 0x40) % 0x40,
                0x80 + cp % 0x40)
  end
  return char(0xF0 + floor(cp / 0x40000), 0x80 + floor(cp / 0x1000) % 0x40,
              0x80 + floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
end

local ESCAPES = {[0x22] = '"', [0x5C] = "\\", [0x2F] = "/", [0x62] = "\b",
                 [0x66] = "\f", [0x6E] = "\n", [0x72] = "\r", [0x74] = "\t"}

local function hex4(s, pos)
  local h = sub(s, pos, pos + 3)
  if not find(h, "^%x%x%x%x$") then fail(pos, "bad \\u escape") end
  return tonumber(h, 16)
end

-- The string starting at s[pos] == '"': its value and the position after.
local function read_string(s, pos)
  local parts, np = nil, 0
  local i = pos + 1
  while true do
    local j = find(s, '["\\%c]', i)
    if not j then fail(pos, "unterminated string") end
    local c = byte(s, j)
    if c == 0x22 then
      if not parts then return sub(s, i, j - 1), j + 1 end
      np = np + 1
      parts[np] = sub(s, i, j - 1)
      return concat(parts, "", 1, np), j + 1
    end
    if c ~= 0x5C then fail(j, "control character in a string") end
    parts = parts or {}
    np = np + 1
    parts[np] = sub(s, i, j - 1)
    local e = byte(s, j + 1)
    if e == 0x75 then -- \uXXXX, maybe a surrogate pair
      local cp = hex4(s, j + 2)
      i = j + 6
      if cp >= 0xD800 and cp <= 0xDBFF then
        if sub(s, i, i + 1) ~= "\\u" then fail(j, "lone surrogate") end
        local lo = hex4(s, i + 2)
        if lo < 0xDC00 or lo > 0xDFFF then fail(i, "bad surrogate pair") end
        cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
        i = i + 6
      elseif cp >= 0xDC00 and cp <= 0xDFFF then
        fail(j, "lone surrogate")
      end
      np = np + 1
      parts[np] = utf8(cp)
    else
      local r = e and ESCAPES[e]
      if not r then fail(j, "bad escape") end
      np = np + 1
      parts[np] = r
      i = j + 2
    end
  end
end

local read_value

local function read_array(s, pos, depth)
  local t, n = {}, 0
  pos = skip_ws(s, pos + 1)
  if byte(s, pos) == 0x5D then t.n = 0 return t, pos + 1 end
  while true do
    local v
    v, pos = read_value(s, pos, depth)
    n = n + 1
    t[n] = v
    pos = skip_ws(s, pos)
    local c = byte(s, pos)
    if c == 0x5D then t.n = n return t, pos + 1 end
    if c ~= 0x2C then fail(pos, "expected ',' or ']'") end
    pos = skip_ws(s, pos + 1)
  end
end

local function read_object(s, pos, depth)
  local t = {}
  pos = skip_ws(s, pos + 1)
  if byte(s, pos) == 0x7D then return t, pos + 1 end
  while true do
    if byte(s, pos) ~= 0x22 then fail(pos, "expected a string key") end
    local k, v
    k, pos = read_string(s, pos)
    pos = skip_ws(s, pos)
    if byte(s, pos) ~= 0x3A then fail(pos, "expected ':'") end
    v, pos = read_value(s, skip_ws(s, pos + 1), depth)
    t[k] = v
    pos = skip_ws(s, pos)
    local c = byte(s, pos)
    if c == 0x7D then return t, pos + 1 end
    if c ~= 0x2C then fail(pos, "expected ',' or '}'") end
    pos = skip_ws(s, pos + 1)
  end
end

local LITERALS = {[0x74] = {"true", true}, [0x66] = {"false", false},
                  [0x6E] = {"null", json.null}}

read_value = function(s, pos, depth)
  local c = byte(s, pos)
  if c == 0x22 then return read_string(s, pos) end
  if c == 0x7B or c == 0x5B then
    if depth >= MAX_DEPTH then
      fail(pos, ("nested more than %d deep"):format(MAX_DEPTH))
    end
    if c == 0x7B then return read_object(s, pos, depth + 1) end
    return read_array(s, pos, depth + 1)
  end
  local lit = c and LITERALS[c]
  if lit then
    if sub(s, pos, pos + #lit[1] - 1) ~= lit[1] then fail(pos, "bad literal") end
    return lit[2], pos + #lit[1]
  end
  -- A number, exactly as RFC 8259's grammar has it (no "+1", ".5", "01").
  local _, e = find(s, "^-?%d+", pos)
  if not e then
    if not c then fail(pos, "unexpected end of text") end
    fail(pos, "unexpected character '" .. char(c) .. "'")
  end
  if find(s, "^-?0%d", pos) then fail(pos, "leading zero in a number") end
  local _, fr = find(s, "^%.%d+", e + 1)
  if fr then e = fr elseif byte(s, e + 1) == 0x2E then fail(e + 1, "bad number") end
  local _, ex = find(s, "^[eE][-+]?%d+", e + 1)
  if ex then e = ex
  elseif byte(s, e + 1) == 0x65 or byte(s, e + 1) == 0x45 then
    fail(e + 1, "bad number")
  end
  return tonumber(sub(s, pos, e)), e + 1
end

-- Decodes JSON text: a Lua string or anything tostring() turns into one
-- (a bytes field read from a sample is a string already).
function json.decode(text)
  if type(text) ~= "string" then
    if text == nil then error("sluice.json: decode(nil): no text", 2) end
    text = tostring(text)
  end
  local pos = skip_ws(text, 1)
  local v
  v, pos = read_value(text, pos, 0)
  pos = skip_ws(text, pos)
  if pos <= #text then fail(pos, "trailing text after the value") end
  return v
end

return setmetatable(json, {__call = function(_, text) return json.decode(text) end})
