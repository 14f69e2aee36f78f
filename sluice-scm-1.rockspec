-- sluice-scm-1.rockspec: builds libsluice and the Lua module sluice.core with
-- CMake and installs them with the pure-Lua facade (lua/sluice/*.lua).
--
--   luarocks make --local        (from a checkout; needs cmake, a C
--                                 compiler, libzstd, zlib and LuaJIT's
--                                 headers: `make deps`)
--
-- Layout in the rock tree: sluice/core.so and libsluice.so under the C
-- module dir (lib/lua/5.1/), sluice/*.lua under the Lua dir
-- (share/lua/5.1/); core.so finds libsluice.so next to it through its
-- $ORIGIN RPATH, which CMake computes from the two dirs given below.
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
  "lua >= 5.1, < 5.2", -- LuaJIT: the module uses the FFI
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
    SLUICE_INSTALL_DEVEL = "OFF",
    SLUICE_BUILD_TESTS = "OFF",
    SLUICE_BUILD_BENCH = "OFF",
    SLUICE_BUILD_EXAMPLES = "OFF",
  },
}
