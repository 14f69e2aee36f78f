-- sluice-scm-1.rockspec: builds libsluice with CMake and installs it with
-- the pure-Lua facade (lua/sluice/*.lua), which calls it through the FFI.
--
--   luarocks make --local        (from a checkout; needs cmake, a C
--                                 compiler, libzstd, zlib and LuaJIT's
--                                 headers: `make deps`)
--
-- Layout in the rock tree: libsluice.so under the C module dir
-- (lib/lua/5.1/), sluice/*.lua under the Lua dir (share/lua/5.1/);
-- sluice/library.lua names libsluice.so relative to itself
-- (SLUICE_LIBRARY_FROM_LUA_DIR below, as deployed in the tree).
rockspec_format = "3.0"
package = "sluice"
version = "scm-1"

source = {
  url = "git+https://example.invalid/sluice.git",
}

description = {
  summary = "C runtime for machine-learning input pipelines, scripted in LuaJIT",
  detailed = [[
sluice reads training data, shuffles, batches, transforms and prefetches it
on its own threads.  Pipelines are declared in Lua, and custom decorators
written in Lua run in worker Lua states on sluice's threads.]],
}

dependencies = {
  "lua >= 5.1, < 5.2", -- LuaJIT: the modules use the FFI
}

build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    -- libsluice.so goes next to the module dir so LuaRocks deploys it too.
    CMAKE_INSTALL_LIBDIR = "lib",
    SLUICE_INSTALL_LUA_CDIR = "$(LIBDIR)",
    SLUICE_INSTALL_LUA_DIR = "$(LUADIR)",
    -- LuaRocks deploys the rock's lib/ (libsluice.so) into the tree's
    -- lib/lua/5.1 and bin/ into bin/: the command's $ORIGIN RPATH.
    SLUICE_CLI_LIBDIR_FROM_BIN = "../lib/lua/5.1",
    -- share/lua/5.1/sluice/library.lua -> lib/lua/5.1/libsluice.so.
    SLUICE_LIBRARY_FROM_LUA_DIR = "../../../../lib/lua/5.1",
    SLUICE_INSTALL_DEVEL = "OFF",
    SLUICE_BUILD_TESTS = "OFF",
    SLUICE_BUILD_BENCH = "OFF",
    SLUICE_BUILD_EXAMPLES = "OFF",
  },
}
