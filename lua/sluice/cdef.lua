-- sluice.cdef: the declarations of include/sluice.h (and of
-- include/sluice/unstable.h, for the facade) for the LuaJIT FFI, and the
-- library namespace to call them through.  The declarations are
-- sluice.header, generated from the headers at build time
-- (tools/gen_cdef.c); spec/20-layouts_spec.lua checks their layouts.
--
-- The FFI is Lua's only bridge to C (docs/ARCHITECTURE.md).  Returns the
-- namespace holding the sl_* symbols, found in this order (docs/LUA.md,
-- "Finding libsluice"):
--   1. ffi.C when the process already exports them (a C trainer linking
--      libsluice, the `sluice` command, a test executable, a worker state
--      inside any of them): never a second copy of the library in one
--      process (it would have its own thread-local error slots, and readers
--      made by one copy would be freed by the other);
--   2. ffi.load(os.getenv "SLUICE_LIBRARY") when that variable is set (an
--      explicit choice: failing to load it is an error, not a fallback);
--   3. ffi.load(require "sluice.library"): a file CMake generates next to
--      the Lua modules - in a build tree, <build>/lua/sluice/library.lua
--      returns the absolute path of the built libsluice; in an installed
--      tree it returns the libsluice of its own prefix, from a path
--      relative to its own location (debug.getinfo), so a prefix can move;
--   4. ffi.load("sluice"), found by the dynamic linker's usual search.
local ffi = require "ffi"

require "sluice.header"

if pcall(function() return ffi.C.sl_version end) then
  return ffi.C
end

local explicit = os.getenv("SLUICE_LIBRARY")
if explicit and explicit ~= "" then
  local ok, lib = pcall(ffi.load, explicit)
  if not ok then
    error("sluice: cannot load SLUICE_LIBRARY=" .. explicit .. ": "
          .. tostring(lib), 0)
  end
  return lib
end

-- sluice.library returns the path (it resolves its own relative path).
local tried = {}
local found, path = pcall(require, "sluice.library")
if found and type(path) == "string" then
  local ok, lib = pcall(ffi.load, path)
  if ok then return lib end
  tried[#tried + 1] = tostring(lib)
else
  tried[#tried + 1] = "sluice.library did not load (" .. tostring(path) .. ")"
end

local ok, lib = pcall(ffi.load, "sluice")
if ok then
  return lib
end
tried[#tried + 1] = tostring(lib)
error("sluice: cannot find libsluice: the process does not export it, "
      .. "SLUICE_LIBRARY is not set, and " .. table.concat(tried, "; "), 0)
