/*
 * env.c - the "sluice.env" type: what a worker state copies from the
 * declaring state (package.path and package.cpath, lua_host.h
 * sl__lua_env_capture).
 *
 *   core.env()   captures the calling state's package.path/cpath now and
 *                returns a "sluice.env" userdata; raises sl_last_error() on
 *                failure (out of memory).
 *
 * Captured at declaration time, not when workers start, so a pipeline's
 * workers see the paths that were in force where the pipeline was written.
 * The userdata holds one reference to the refcounted sl__lua_env; stages
 * take their own, so the environment outlives the userdata while workers
 * run.
 */
#include "bindings.h"

typedef struct slb_env {
  sl__lua_env *e; /* NULL until captured, and again once released */
} slb_env;

sl__lua_env *slb_check_env(lua_State *L, int idx) {
  slb_env *u = luaL_checkudata(L, idx, SLB_ENV_MT);
  if (u->e == NULL) luaL_argerror(L, idx, "released " SLB_ENV_MT);
  return u->e;
}

static int env_capture(lua_State *L) {
  /* Userdata first: once captured, the environment is owned by a Lua value
   * and nothing can raise with it unowned. */
  slb_env *u = lua_newuserdata(L, sizeof *u);
  u->e = NULL;
  luaL_getmetatable(L, SLB_ENV_MT);
  lua_setmetatable(L, -2);
  u->e = sl__lua_env_capture(L);
  if (u->e == NULL) return slb_raise_last(L, SL_ENOMEM);
  return 1;
}

/* __gc: idempotent and never raises (see shipped.c). */
static int env_gc(lua_State *L) {
  slb_env *u = luaL_testudata(L, 1, SLB_ENV_MT);
  if (u != NULL) {
    sl__lua_env_release(u->e);
    u->e = NULL;
  }
  return 0;
}

static int env_tostring(lua_State *L) {
  slb_env *u = luaL_checkudata(L, 1, SLB_ENV_MT);
  if (u->e == NULL)
    lua_pushliteral(L, SLB_ENV_MT ": released");
  else
    lua_pushfstring(L, SLB_ENV_MT ": %p", (void *)u->e);
  return 1;
}

void slb_env_open(lua_State *L) {
  static const luaL_Reg meta[] = {
      {"__gc", env_gc},
      {"__tostring", env_tostring},
      {NULL, NULL},
  };
  static const luaL_Reg funcs[] = {
      {"env", env_capture},
      {NULL, NULL},
  };
  luaL_newmetatable(L, SLB_ENV_MT);
  luaL_setfuncs(L, meta, 0);
  lua_pushliteral(L, SLB_ENV_MT);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
  luaL_setfuncs(L, funcs, 0);
}
