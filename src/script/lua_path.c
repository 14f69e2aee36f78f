/*
 * lua_path.c - where every Lua state libsluice creates finds sluice's own
 * Lua modules, with no LUA_PATH.
 *
 * libsluice knows its Lua folder two ways, both fixed at build time:
 *
 *   - the build tree: when the libsluice this code runs in lies in the
 *     build's library folder (SLUICE_BUILD_LIB_DIR, compared by real path),
 *     the source tree's lua/ (SLUICE_SOURCE_LUA_DIR) and the build's lua/
 *     (SLUICE_BUILD_LUA_DIR: the generated sluice/library.lua);
 *   - an install prefix: otherwise, the installed Lua folder as a path
 *     relative to the folder the library was loaded from
 *     (SLUICE_LUA_DIR_FROM_LIBRARY, e.g. "../share/lua/5.1"), so a prefix
 *     moved with `cmake --install --prefix` still works.
 *
 * The library's own file comes from dladdr() on one of its functions; a
 * copy linked statically into a program answers with the program's path,
 * and the install rule then points next to the program (harmless when
 * nothing is there).
 *
 * Which states get the folders (sl__lua_add_own_path):
 *   - the state of an embedded pipeline script (sl_pipeline_open_*, so also
 *     `sluice run`) with LUA_PATH unset: they come first, so the script
 *     runs the Lua files of the libsluice it is driving, never another
 *     version LuaJIT's default path happens to reach;
 *   - every state (that one with LUA_PATH set, and the worker states of the
 *     Lua stages) where `require "sluice"` would otherwise fail, or
 *     would find sluice.cdef without its generated sluice.header (the
 *     source tree's lua/ alone): they are appended, after everything the
 *     user's path names.
 * Nothing is added twice: a path that already holds the folders is kept.
 */
#include "core/internal.h"
#include "script/lua_internal.h"

#include <lauxlib.h>

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SLUICE_LUA_DIR_FROM_LIBRARY
#define SLUICE_LUA_DIR_FROM_LIBRARY "../share/lua/5.1"
#endif

/* The search patterns of the own Lua folders ("" when unknown). */
static char own_path[3 * PATH_MAX + 64];
static pthread_once_t own_once = PTHREAD_ONCE_INIT;

/* True when `a` and `b` name the same folder (both must exist). */
static bool same_dir(const char *a, const char *b) {
  char ra[PATH_MAX], rb[PATH_MAX];
  return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

static void find_own_path(void) {
  Dl_info info;
  if (!dladdr((void *)sl_version, &info) || !info.dli_fname) return;
  const char *slash = strrchr(info.dli_fname, '/');
  char dir[PATH_MAX];
  int k = slash ? snprintf(dir, sizeof dir, "%.*s",
                           (int)(slash - info.dli_fname), info.dli_fname)
                : snprintf(dir, sizeof dir, ".");
  if (k < 0 || (size_t)k >= sizeof dir) return;
#if defined(SLUICE_BUILD_LIB_DIR) && defined(SLUICE_SOURCE_LUA_DIR) &&         \
    defined(SLUICE_BUILD_LUA_DIR)
  if (same_dir(dir, SLUICE_BUILD_LIB_DIR)) {
    k = snprintf(own_path, sizeof own_path, "%s/?.lua;%s/?/init.lua;%s/?.lua",
                 SLUICE_SOURCE_LUA_DIR, SLUICE_SOURCE_LUA_DIR,
                 SLUICE_BUILD_LUA_DIR);
    if (k < 0 || (size_t)k >= sizeof own_path) own_path[0] = '\0';
    return;
  }
#endif
  k = snprintf(own_path, sizeof own_path, "%s/%s/?.lua;%s/%s/?/init.lua", dir,
               SLUICE_LUA_DIR_FROM_LIBRARY, dir, SLUICE_LUA_DIR_FROM_LIBRARY);
  if (k < 0 || (size_t)k >= sizeof own_path) own_path[0] = '\0';
}

const char *sl__lua_own_path(void) {
  pthread_once(&own_once, find_own_path);
  return own_path;
}

/* True when package.searchpath finds module `name` on package.path.
 * Package table at -1. */
static bool on_path(lua_State *L, const char *name) {
  lua_getfield(L, -1, "searchpath");
  lua_getfield(L, -2, "path");
  if (!lua_isfunction(L, -2) || !lua_isstring(L, -1)) {
    lua_pop(L, 2);
    return false;
  }
  lua_pushstring(L, name);
  lua_insert(L, -2);
  lua_call(L, 2, 1); /* a file name, or nil (and a message, dropped) */
  bool found = lua_isstring(L, -1);
  lua_pop(L, 1);
  return found;
}

/* True when package.loaded or package.preload has "sluice", or
 * package.searchpath finds it on package.path - and, when that sluice is
 * one with sluice.cdef, finds sluice.header too (generated into the build
 * tree: the source tree's lua/ alone lacks it).  Package table at -1. */
static bool sluice_found(lua_State *L) {
  static const char *const tables[] = {"loaded", "preload"};
  for (int i = 0; i < 2; i++) {
    lua_getfield(L, -1, tables[i]);
    bool there = lua_istable(L, -1);
    if (there) {
      lua_getfield(L, -1, "sluice");
      there = !lua_isnil(L, -1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (there) return true;
  }
  return on_path(L, "sluice") &&
         (!on_path(L, "sluice.cdef") || on_path(L, "sluice.header"));
}

void sl__lua_add_own_path(lua_State *L, bool first) {
  const char *own = sl__lua_own_path();
  if (!own[0]) return;
  lua_getfield(L, LUA_GLOBALSINDEX, "package");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_getfield(L, -1, "path");
  const char *path = lua_isstring(L, -1) ? lua_tostring(L, -1) : "";
  bool has = strstr(path, own) != NULL;
  lua_pop(L, 1);
  if (has || (!first && sluice_found(L))) {
    lua_pop(L, 1);
    return;
  }
  lua_getfield(L, -1, "path");
  path = lua_isstring(L, -1) ? lua_tostring(L, -1) : "";
  if (first)
    lua_pushfstring(L, "%s;%s", own, path);
  else
    lua_pushfstring(L, "%s%s%s", path, path[0] ? ";" : "", own);
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);
}
