/*
 * lua_env.c - the environment worker Lua states start from, the worker
 * states themselves, and the protected call the Lua stages make per sample.
 *
 * Env.  package.path and package.cpath copied out of the declaring state as
 * C strings (a worker state is another lua_State: nothing can be shared
 * with the declaring one, so values travel as bytes), plus what a new
 * worker preloads.  Refcounted with an atomic count; immutable once shared.
 *
 * Worker states.  luaL_newstate (LuaJIT's own allocator: on x64 LuaJIT
 * refuses custom allocators, so Lua memory cannot go through sl__malloc),
 * the standard libraries, package.path/cpath from the env (plus sluice's
 * own Lua folders, last, when that path cannot find sluice: lua_path.c),
 * then
 *   ffi    = require "ffi"       (global)
 *   sluice = require "sluice"    (global; preload mode 1 only)
 *   registry["sluice.worker"] = require "sluice.worker"   (mode 1 only)
 * all inside one lua_cpcall, so a failing require (or a memory error) ends
 * as SL_ELUA/SL_ENOMEM with Lua's message and the state closed, never as a
 * panic.  The registry key is what the stages use to find the per-sample
 * protocol module without going through globals a decorator may overwrite.
 *
 * sl__lua_pcall.  The message handler is a C function that turns the error
 * object into text with tostring's rules where they are safe (strings and
 * numbers as they are, a table with __tostring through it, anything else
 * "(error object is a <type> value)", as lua.c says it) and appends
 * luaL_traceback, so the consumer sees the decorator's source line.  The
 * handler closure is made once per state and kept in the registry under a
 * light-userdata key: creating it allocates, and allocating outside a
 * protected call would turn an out-of-memory into a panic.
 */
#include "core/internal.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>
#include <lualib.h>

#include <stdlib.h>

/* Where sl__lua_worker_new leaves `require "sluice.worker"`. */
#define WORKER_REGISTRY_KEY "sluice.worker"

struct sl__lua_env {
  sl__refcnt ref;
  char *path;      /* package.path; NULL = the worker's own default */
  char *cpath;     /* package.cpath; NULL = the worker's own default */
  int load_sluice; /* 1: require sluice and sluice.worker in workers */
};

/* --- env ------------------------------------------------------------------ */

static void env_free(sl__lua_env *e) {
  SL__FREE(e->path, e->cpath, e);
}

static sl__lua_env *env_alloc(void) {
  sl__lua_env *e = sl__calloc(1, sizeof *e);
  if (!e) return NULL;
  sl__ref_init(&e->ref);
  e->load_sluice = 1;
  return e;
}

sl__lua_env *sl__lua_env_new(const char *path, const char *cpath) {
  sl__lua_env *e = env_alloc();
  if (!e) goto nomem;
  if (path && !(e->path = sl__strdup(path))) goto nomem;
  if (cpath && !(e->cpath = sl__strdup(cpath))) goto nomem;
  return e;
nomem:
  if (e) env_free(e);
  sl_set_error(SL_ENOMEM, "lua env: out of memory copying package paths");
  return NULL;
}

typedef struct capture_ctx {
  char *path, *cpath;
  int nomem;
} capture_ctx;

/* Copies package[field] when it is a string; NULL (the default) otherwise. */
static char *dup_package_field(lua_State *L, const char *field,
                               capture_ctx *c) {
  lua_pushstring(L, field);
  lua_rawget(L, -2);
  char *s = NULL;
  if (lua_type(L, -1) == LUA_TSTRING) {
    size_t n;
    const char *v = lua_tolstring(L, -1, &n);
    s = sl__malloc(n + 1);
    if (s) {
      memcpy(s, v, n + 1);
    } else {
      c->nomem = 1;
    }
  }
  lua_pop(L, 1);
  return s;
}

/* Runs under lua_cpcall: pushing the key strings allocates.  Raw access to
 * the globals, so a strict-mode __index on _G cannot raise here. */
static int capture_cp(lua_State *L) {
  capture_ctx *c = lua_touserdata(L, 1);
  lua_pushliteral(L, "package");
  lua_rawget(L, LUA_GLOBALSINDEX);
  if (!lua_istable(L, -1)) return 0;
  c->path = dup_package_field(L, "path", c);
  c->cpath = dup_package_field(L, "cpath", c);
  return 0;
}

sl__lua_env *sl__lua_env_capture(lua_State *L) {
  capture_ctx c = {NULL, NULL, 0};
  int st = lua_cpcall(L, capture_cp, &c);
  if (st != 0) lua_pop(L, 1); /* only a memory error can get here */
  sl__lua_env *e = NULL;
  if (st == 0 && !c.nomem) e = env_alloc();
  if (!e) {
    sl__free(c.path);
    sl__free(c.cpath);
    sl_set_error(SL_ENOMEM, "lua env: out of memory capturing package.path");
    return NULL;
  }
  e->path = c.path;
  e->cpath = c.cpath;
  return e;
}

int sl__lua_env_set_preload(sl__lua_env *e, int load_sluice) {
  SL_RETURN_ERROR_IF(!e, SL_EINVAL, "lua env: set_preload on a NULL env");
  e->load_sluice = load_sluice != 0;
  return SL_OK;
}

sl__lua_env *sl__lua_env_retain(sl__lua_env *e) {
  if (e) sl__ref_inc(&e->ref);
  return e;
}

void sl__lua_env_release(sl__lua_env *e) {
  if (e && sl__ref_dec(&e->ref)) env_free(e);
}

/* --- worker states -------------------------------------------------------- */

/* require(name), leaving the module on the stack. */
static void require_module(lua_State *L, const char *name) {
  lua_getfield(L, LUA_GLOBALSINDEX, "require");
  lua_pushstring(L, name);
  lua_call(L, 1, 1);
}

static int worker_init_cp(lua_State *L) {
  const sl__lua_env *env = lua_touserdata(L, 1);
  luaL_openlibs(L);
  if (env && (env->path || env->cpath)) {
    lua_getfield(L, LUA_GLOBALSINDEX, "package");
    if (env->path) {
      lua_pushstring(L, env->path);
      lua_setfield(L, -2, "path");
    }
    if (env->cpath) {
      lua_pushstring(L, env->cpath);
      lua_setfield(L, -2, "cpath");
    }
    lua_pop(L, 1);
  }
  /* A worker that loads sluice, on a path that cannot find it (LuaJIT's
   * default, a declaring state that had sluice preloaded), gets sluice's
   * own folders last.  A bare state (preload 0) keeps its caller's path. */
  if (!env || env->load_sluice) sl__lua_add_own_path(L, false);
  require_module(L, "ffi");
  lua_setfield(L, LUA_GLOBALSINDEX, "ffi");
  if (!env || env->load_sluice) {
    require_module(L, "sluice");
    lua_setfield(L, LUA_GLOBALSINDEX, "sluice");
    require_module(L, "sluice.worker");
    lua_setfield(L, LUA_REGISTRYINDEX, WORKER_REGISTRY_KEY);
  }
  return 0;
}

int sl__lua_worker_new(const sl__lua_env *env, lua_State **out) {
  *out = NULL;
  lua_State *W = luaL_newstate();
  SL_RETURN_ERROR_IF(!W, SL_ENOMEM, "lua worker: cannot create a Lua state");
  int st = lua_cpcall(W, worker_init_cp, (void *)env);
  if (st != 0) {
    const char *msg = lua_tostring(W, -1);
    int code = st == LUA_ERRMEM ? SL_ENOMEM : SL_ELUA;
    sl_set_error(code, "lua worker: %s", msg ? msg : "(no message)");
    lua_close(W);
    return code;
  }
  *out = W;
  return SL_OK;
}

/* --- protected calls ------------------------------------------------------ */

/* The text of the error object at `idx` without calling into Lua: what is
 * safe after the handler has run (or when it could not run: memory errors
 * skip it). */
static const char *plain_error_text(lua_State *L, int idx) {
  int t = lua_type(L, idx);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) return lua_tostring(L, idx);
  return NULL;
}

static int traceback_handler(lua_State *L) {
  const char *msg = plain_error_text(L, 1);
  if (!msg) {
    /* luaL_callmeta pushes __tostring(err) when there is one; an error
     * inside it makes the pcall return LUA_ERRERR, which is still a clean
     * failure. */
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) {
      msg = lua_tostring(L, -1);
    } else {
      msg = lua_pushfstring(L, "(error object is a %s value)",
                            luaL_typename(L, 1));
    }
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* The key of the handler in the registry: the address is what matters. */
static const char handler_key;

typedef struct install_ctx {
  const void *key;
  lua_CFunction fn;
} install_ctx;

static int install_cp(lua_State *L) {
  const install_ctx *c = lua_touserdata(L, 1);
  lua_pushlightuserdata(L, (void *)c->key);
  lua_pushcfunction(L, c->fn);
  lua_rawset(L, LUA_REGISTRYINDEX);
  return 0;
}

int sl__lua_push_cached_cfunction(lua_State *L, const void *key,
                                  lua_CFunction fn) {
  lua_pushlightuserdata(L, (void *)key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (lua_type(L, -1) == LUA_TFUNCTION) return 0;
  lua_pop(L, 1);
  install_ctx c = {key, fn};
  if (lua_cpcall(L, install_cp, &c) != 0) {
    lua_pop(L, 1);
    return -1;
  }
  lua_pushlightuserdata(L, (void *)key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  return 0;
}

int sl__lua_pcall(lua_State *W, int nargs, int nres, const char *what,
                  const char *where) {
  if (!what) what = "lua";
  if (!where) where = "?";
  int base = lua_gettop(W) - nargs; /* the function's slot */
  if (!lua_checkstack(W, 2) ||
      sl__lua_push_cached_cfunction(W, &handler_key, traceback_handler) != 0) {
    lua_pop(W, nargs + 1); /* as a failed lua_pcall would leave it */
    return sl_set_error(SL_ENOMEM, "%s (%s): out of memory", what, where);
  }
  lua_insert(W, base);
  void *deadline = sl__lua_deadline_arm(W); /* lua_deadline.c */
  int st = lua_pcall(W, nargs, nres, base);
  sl__lua_deadline_disarm(W, deadline);
  if (st == 0) {
    lua_remove(W, base);
    return SL_OK;
  }
  /* A memory error skips the handler: no traceback, but the code says what
   * happened, as everywhere else in the Lua host. */
  int code = st == LUA_ERRMEM ? SL_ENOMEM : SL_ELUA;
  const char *msg = plain_error_text(W, -1);
  if (msg) {
    sl_set_error(code, "%s (%s): %s", what, where, msg);
  } else {
    sl_set_error(code, "%s (%s): (error object is a %s value)", what, where,
                 luaL_typename(W, -1));
  }
  lua_pop(W, 2); /* the error and the handler */
  return code;
}
