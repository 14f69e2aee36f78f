-- spec/helper.lua: helpers shared by the busted specs.  Loaded with
--   local H = dofile "spec/helper.lua"
-- (busted and CTest run the specs from the source root).  dofile runs it in
-- the global environment, not in the spec's, so it takes busted's `assert`
-- (luassert) from require.
local assert = require "luassert"

local H = {}

-- The message of an error raised by f, asserting that it points at a line
-- of the spec file that calls this (misuse is reported where the caller
-- made it); also the line number.
local function check_misuse(f, this)
  local ok, err = pcall(f)
  assert.is_false(ok)
  local file, line, msg = tostring(err):match("^(.-):(%d+): (.*)$")
  assert.equal(this, file)
  return msg, tonumber(line)
end

-- The message of an error raised by f (see check_misuse).
function H.misuse(f)
  local msg = check_misuse(f, debug.getinfo(2, "S").short_src)
  return msg
end

-- The message and the line of an error raised by f (see check_misuse).
function H.misuse_with_line(f)
  local msg, line = check_misuse(f, debug.getinfo(2, "S").short_src)
  return msg, line
end

-- The values of field `field` (default "i") of the rest of p's pass.
function H.collect(p, field)
  local out = {}
  for s in p:iter() do out[#out + 1] = s[field or "i"] end
  return out
end

-- A new empty folder (remove it with H.rmdir).
function H.tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  return dir
end

function H.rmdir(dir)
  os.execute("rm -rf '" .. dir .. "'")
end

-- The build tree: the folder whose lua/sluice/core.so is on package.cpath
-- (hence the CLI, tools/sluice, and the example plugins).
function H.build_dir()
  for entry in package.cpath:gmatch("[^;]+") do
    local dir = entry:match("^(.*)/lua/%?%.so$")
    if dir and io.open(dir .. "/lua/sluice/core.so") then return dir end
  end
  error("cannot find the build tree on package.cpath")
end

-- Writes `text` to the file at `path`.
function H.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- Where a function was defined, as lua_host.h's messages write it.
function H.where(fn)
  local info = debug.getinfo(fn, "S")
  return info.short_src .. ":" .. info.linedefined
end

return H
