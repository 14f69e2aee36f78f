/*
 * core.c - luaopen_sluice_core, the entry point of `require "sluice.core"`,
 * and the module-level functions that belong to no type:
 *
 *   core.version()   "0.1.0": the version of the libsluice actually loaded.
 *   core.libpath()   the absolute path of that libsluice, so the Lua facade
 *                    can ffi.load() the very copy this module is linked
 *                    against instead of whichever libsluice.so the loader
 *                    would find by name (a second copy would have its own
 *                    thread-local error slots, and readers made by one copy
 *                    would be freed by the other).
 */
#include "bindings.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

int slb_raise_last(lua_State *L, int code) {
  const char *msg = sl_last_error();
  if (msg == NULL || msg[0] == '\0') msg = sl_strerror(code);
  /* lua_pushstring copies the thread-local message before anything else
   * can overwrite it. */
  lua_pushstring(L, msg);
  return lua_error(L);
}

static int core_version(lua_State *L) {
  lua_pushstring(L, sl_version());
  return 1;
}

static int core_libpath(lua_State *L) {
  /* dladdr wants a data pointer; going through uintptr_t is the portable
   * way to turn a function address into one on the platforms with dladdr. */
  const void *addr = (const void *)(uintptr_t)&sl_version;
  Dl_info info;
  if (dladdr(addr, &info) == 0 || info.dli_fname == NULL)
    return luaL_error(L, "sluice.core: cannot locate libsluice (dladdr)");
  /* dli_fname is the name the dynamic loader used, which may be relative to
   * the working directory or go through "$ORIGIN/../.."; canonicalise it so
   * the path stays valid after a chdir and reads well in messages. */
  char *real = realpath(info.dli_fname, NULL);
  if (real == NULL) {
    lua_pushstring(L, info.dli_fname);
    return 1;
  }
  /* Copy into Lua before freeing, and free before anything can raise. */
  lua_pushstring(L, real);
  free(real);
  return 1;
}

SLB_EXPORT int luaopen_sluice_core(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"version", core_version},
      {"libpath", core_libpath},
      {NULL, NULL},
  };
  /* A module built against one sluice.h but loaded with another libsluice
   * would misread every struct the FFI shares with C: refuse early. */
  if (sl_version_number() != SL_VERSION_NUMBER)
    return luaL_error(L,
                      "sluice.core: built for libsluice " SL_VERSION_STRING
                      " but loaded libsluice %s",
                      sl_version());
  lua_newtable(L);
  luaL_setfuncs(L, funcs, 0);
  slb_shipped_open(L);
  slb_env_open(L);
  slb_stage_open(L);
  lua_pushliteral(L, SL_VERSION_STRING);
  lua_setfield(L, -2, "_VERSION");
  return 1;
}
