/*
 * shipped.c - the "sluice.shipped" type: a Lua function (or a
 * "module.function" name) turned into bytes that worker states can rebuild
 * (src/script/lua_host.h, sl__lua_ship).
 *
 *   core.ship(value, what)  value: a Lua function or a "module.function"
 *                           string; what: the decorator's name for messages
 *                           ("map", "filter", "reader").  Returns a
 *                           "sluice.shipped" userdata, or raises exactly
 *                           sl_last_error(), e.g. "map: cannot ship upvalue
 *                           'u' (a userdata) of the function defined at
 *                           x.lua:3".
 *
 * The userdata holds a reference to the refcounted sl__shipped, not the
 * object itself: stages retain it, so it may outlive the userdata while
 * worker threads still use it.  __gc drops the userdata's reference.
 */
#include "bindings.h"

typedef struct slb_shipped {
  sl__shipped *f; /* NULL until shipped, and again once released */
} slb_shipped;

sl__shipped *slb_check_shipped(lua_State *L, int idx) {
  slb_shipped *u = luaL_checkudata(L, idx, SLB_SHIPPED_MT);
  /* Only a failed core.ship leaves f NULL, and that userdata never reaches
   * Lua code; the check keeps a stray one from reaching C as NULL. */
  if (u->f == NULL) luaL_argerror(L, idx, "released " SLB_SHIPPED_MT);
  return u->f;
}

static int shipped_ship(lua_State *L) {
  const int t = lua_type(L, 1);
  if (t != LUA_TFUNCTION && t != LUA_TSTRING)
    return luaL_typerror(L, 1, "function or string");
  const char *what = luaL_checkstring(L, 2);

  /* The userdata comes first, so that once sl__lua_ship has made the object
   * a Lua value already owns it and no allocation can raise in between. */
  slb_shipped *u = lua_newuserdata(L, sizeof *u);
  u->f = NULL;
  luaL_getmetatable(L, SLB_SHIPPED_MT);
  lua_setmetatable(L, -2);

  const int rc = sl__lua_ship(L, 1, what, &u->f);
  if (rc != SL_OK) {
    u->f = NULL;
    return slb_raise_last(L, rc);
  }
  return 1;
}

/* __gc: idempotent (the pointer is cleared) and never raises, even when
 * called by hand through debug.getmetatable with some other value. */
static int shipped_gc(lua_State *L) {
  slb_shipped *u = luaL_testudata(L, 1, SLB_SHIPPED_MT);
  if (u != NULL) {
    sl__shipped_release(u->f);
    u->f = NULL;
  }
  return 0;
}

static int shipped_tostring(lua_State *L) {
  slb_shipped *u = luaL_checkudata(L, 1, SLB_SHIPPED_MT);
  if (u->f == NULL)
    lua_pushliteral(L, SLB_SHIPPED_MT ": released");
  else
    lua_pushfstring(L, SLB_SHIPPED_MT ": %s", sl__shipped_where(u->f));
  return 1;
}

void slb_shipped_open(lua_State *L) {
  static const luaL_Reg meta[] = {
      {"__gc", shipped_gc},
      {"__tostring", shipped_tostring},
      {NULL, NULL},
  };
  static const luaL_Reg funcs[] = {
      {"ship", shipped_ship},
      {NULL, NULL},
  };
  luaL_newmetatable(L, SLB_SHIPPED_MT);
  luaL_setfuncs(L, meta, 0);
  /* Hide the metatable from getmetatable(): Lua code cannot swap __gc and
   * release the object twice. */
  lua_pushliteral(L, SLB_SHIPPED_MT);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
  luaL_setfuncs(L, funcs, 0);
}
