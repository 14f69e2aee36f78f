-- luacheck configuration of sluice (CTest test `luacheck`).
std = "luajit"
-- Worker states (src/script/lua_host.h) define the globals `ffi` and
-- `sluice`; functions shipped to them from examples and specs may use them.
files["spec/"] = { std = "+busted", read_globals = { "ffi", "sluice" } }
files["examples/"] = { read_globals = { "ffi", "sluice" } }
