/*
 * bindings.h - what the files of the Lua module `sluice.core` share.
 *
 * The module is the thin C layer under the pure-Lua facade `sluice`
 * (lua/sluice/init.lua).  It only exposes what the LuaJIT FFI cannot do by
 * itself: touching a lua_State (shipping functions, capturing
 * package.path) and building the stages that run Lua code in worker states.
 * Everything else (readers, samples, tensors) the facade reaches through
 * the FFI, with the very libsluice this module is linked against
 * (core.libpath()).
 *
 * One file per exposed type, as luv does: each `slb_<type>_open` creates its
 * metatable in the registry and adds its functions to the module table at
 * the top of the stack; each `slb_check_<type>` is luaL_checkudata plus a
 * check that the object is still alive.
 *
 * Error rule (the "why" behind every function here): a failure coming from
 * libsluice is raised as exactly sl_last_error(), with no position prefix,
 * so the facade can re-raise it with error(msg, 2) at the user's call site
 * without doubling positions.  Misuse of the module itself raises with the
 * usual luaL_argerror "bad argument #n to 'f' (...)" messages.  Nothing
 * raises while holding C memory that no Lua object owns.
 *
 * The module keeps no C global state: luaopen_sluice_core may run in any
 * number of Lua states at once (worker states require "sluice" too).
 */
#ifndef SLUICE_BINDINGS_H
#define SLUICE_BINDINGS_H

#include "script/lua_host.h"
#include "sluice.h"

#include <lauxlib.h>
#include <lua.h>

/* The one symbol the module exports; every other one is hidden by
 * CMAKE_C_VISIBILITY_PRESET. */
#if defined(__GNUC__)
#define SLB_EXPORT __attribute__((visibility("default")))
#else
#define SLB_EXPORT
#endif

/* Metatable names (registry keys), also the prefixes of __tostring. */
#define SLB_SHIPPED_MT "sluice.shipped"
#define SLB_ENV_MT "sluice.env"
#define SLB_GUARD_MT "sluice.reader_guard"

SLB_EXPORT int luaopen_sluice_core(lua_State *L);

/* shipped.c: core.ship(value, what) and the "sluice.shipped" type. */
void slb_shipped_open(lua_State *L);
/* The shipped function of the "sluice.shipped" userdata at `idx`
 * (borrowed: the userdata keeps it alive).  Raises an argument error for any
 * other value. */
sl__shipped *slb_check_shipped(lua_State *L, int idx);

/* env.c: core.env() and the "sluice.env" type. */
void slb_env_open(lua_State *L);
/* Like slb_check_shipped, for "sluice.env". */
sl__lua_env *slb_check_env(lua_State *L, int idx);

/* stage.c: core.map(...) and core.reader(...). */
void slb_stage_open(lua_State *L);

/* core.c: raises sl_last_error() as a bare message (see the error rule
 * above); `code` picks sl_strerror's text when the detail slot is empty, so
 * a failure never reaches Lua as "".  Never returns. */
int slb_raise_last(lua_State *L, int code);

#endif
