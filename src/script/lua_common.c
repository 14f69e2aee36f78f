/*
 * lua_common.c - what the Lua stages (lua_stage.c) and the Lua reader
 * (lua_reader.c) share: setting up a worker state for their per-sample
 * protocol, and checking a sample they produced against the schema they
 * promised.  Declared in lua_internal.h.
 */
#include "core/internal.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>

#include <string.h>

/* --- setting up a worker state -------------------------------------------- */

typedef struct setup_args {
  const sl__shipped *fn;
  const char *what, *where, *op;
  int *op_ref, *fn_ref;
  int rc;
} setup_args;

/* Runs under lua_cpcall, so a memory error while building the state's
 * registry entries is caught rather than fatal. */
static int setup_state(lua_State *L) {
  setup_args *a = lua_touserdata(L, 1);
  lua_settop(L, 0);
  lua_getfield(L, LUA_REGISTRYINDEX, "sluice.worker");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "sluice.worker");
    if (lua_pcall(L, 1, 1, 0) != 0) {
      a->rc = sl_set_error(SL_ELUA, "%s (%s): cannot load sluice.worker: %s",
                           a->what, a->where,
                           lua_isstring(L, -1) ? lua_tostring(L, -1) : "?");
      return 0;
    }
    if (!lua_istable(L, -1)) {
      a->rc = sl_set_error(SL_ELUA, "%s (%s): sluice.worker is not a table",
                           a->what, a->where);
      return 0;
    }
  }
  lua_getfield(L, -1, a->op);
  if (!lua_isfunction(L, -1)) {
    a->rc = sl_set_error(SL_ELUA, "%s (%s): sluice.worker has no function '%s'",
                         a->what, a->where, a->op);
    return 0;
  }
  *a->op_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(L, 0);
  int rc = sl__lua_unship(L, a->fn);
  if (rc < 0) {
    a->rc = rc;
    return 0;
  }
  *a->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(L, 0);
  a->rc = SL_OK;
  return 0;
}

int sl__lua_worker_setup(const sl__lua_env *env, const sl__shipped *fn,
                         const char *what, const char *where, const char *op,
                         int *op_ref, int *fn_ref, lua_State **out) {
  lua_State *L = NULL;
  int rc = sl__lua_worker_new(env, &L);
  if (rc < 0)
    return sl_wrap_error(rc, "%s (%s): cannot create a worker Lua state", what,
                         where);
  setup_args a = {fn, what, where, op, op_ref, fn_ref, SL_ELUA};
  sl_clear_error();
  if (lua_cpcall(L, setup_state, &a) != 0) {
    rc = sl_set_error(SL_ENOMEM, "%s (%s): cannot set up a worker state: %s",
                      what, where,
                      lua_isstring(L, -1) ? lua_tostring(L, -1) : "?");
    lua_close(L);
    return rc;
  }
  if (a.rc < 0) {
    if (sl_last_error_code() != a.rc || !sl_last_error()[0])
      sl_set_error(a.rc, "%s (%s): cannot set up a worker state", what, where);
    lua_close(L);
    return a.rc;
  }
  *out = L;
  return SL_OK;
}

/* --- checking produced samples -------------------------------------------- */

int sl__lua_check_sample(const sl_schema *want, const sl_sample *s,
                         uint64_t index, const sl__lua_check_words *w) {
  unsigned long long n = (unsigned long long)index;
  const sl_schema *got = sl_sample_schema(s);
  int nf = sl_schema_nfields(want);
  if (got != want) {
    bool same = sl_schema_nfields(got) == nf;
    for (int i = 0; same && i < nf; i++)
      same = strcmp(sl_schema_field_name(got, i),
                    sl_schema_field_name(want, i)) == 0;
    if (!same) {
      char a[256], b[256];
      return sl_set_error(
          SL_ESHAPE, "%s (%s): %s %llu: %s %s do not match %s %s", w->what,
          w->where, w->item, n, w->fields, sl_schema_describe(got, a, sizeof a),
          w->whose, sl_schema_describe(want, b, sizeof b));
    }
  }
  for (int i = 0; i < nf; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    int rc = sl_schema_check(want, i, t);
    if (rc < 0)
      return sl_wrap_error(rc, "%s (%s): %s %llu", w->what, w->where, w->item,
                           n);
    if (w->require_filled && t->nbytes != (size_t)sl_tensor_numel(t) *
                                              sl_dtype_size(sl_tensor_dtype(t)))
      return sl_set_error(
          SL_ESHAPE, "%s (%s): %s %llu: field '%s' was not filled", w->what,
          w->where, w->item, n, sl_schema_field_name(want, i));
  }
  return SL_OK;
}

void sl__lua_push_ptr(lua_State *L, const void *p) {
  uintptr_t u = (uintptr_t)p;
  if (u < ((uintptr_t)1 << 53))
    lua_pushnumber(L, (lua_Number)u);
  else
    lua_pushlightuserdata(L, (void *)p);
}
