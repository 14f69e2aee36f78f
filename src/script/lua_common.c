/*
 * lua_common.c - what the Lua stages (lua_stage.c: map, filter, parser;
 * lua_flow.c: flat_map, take_while, scan) and the Lua reader (lua_reader.c)
 * share: setting up a worker state for their per-sample protocol (with a
 * stage's deadline, ctx and extra functions), checking a sample they
 * produced against the schema they promised, and a stage constructor's
 * common steps (argument and option checks, label, window, schema, state
 * identity), so both stage files give the same messages.  Declared in
 * lua_internal.h.
 */
#include "core/internal.h"
#include "core/rng.h"
#include "stages/reader_impl.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"
#include "sync/budget.h"

#include <lauxlib.h>

#include <stdarg.h>
#include <string.h>

/* --- setting up a worker state -------------------------------------------- */

typedef struct setup_args {
  const sl__shipped *fn;
  const char *what, *where, *op;
  int *op_ref, *fn_ref;
  int rc;
} setup_args;

/* --- process-wide calls ---------------------------------------------------
 * Worker states run on sluice's threads inside the trainer's process, so
 * the standard library functions whose effect is the whole process are
 * replaced there by functions raising an error that names the decorator
 * (docs/LUA.md, "What a worker state cannot do"):
 *   os.exit       ends the process (the trainer, with no message);
 *   os.execute    system(3): ignores SIGINT/SIGQUIT and blocks SIGCHLD in
 *                 the whole process while the command runs;
 *   os.setlocale  changes the locale of every thread (number formatting
 *                 and parsing in the trainer and the other workers).
 * They are replaced in the `os` table itself before the function is
 * rebuilt, so `local exit = os.exit` shipped as an upvalue gets the
 * replacement too.  (The FFI can still call anything: that is not
 * guarded.) */
static const char *const FORBIDDEN[][2] = {
    {"exit", "it would end the whole process"},
    {"execute", "system() changes signal handling for the whole process"},
    {"setlocale", "the locale is shared by every thread of the process"},
};

static int forbidden_call(lua_State *L) {
  luaL_where(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_concat(L, 2);
  return lua_error(L);
}

static void forbid_process_calls(lua_State *L, const setup_args *a) {
  lua_getfield(L, LUA_GLOBALSINDEX, "os");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  for (size_t i = 0; i < sizeof FORBIDDEN / sizeof FORBIDDEN[0]; i++) {
    lua_pushfstring(L,
                    "os.%s cannot be called in a worker state of %s (%s): "
                    "%s (raise an error instead)",
                    FORBIDDEN[i][0], a->what, a->where, FORBIDDEN[i][1]);
    lua_pushcclosure(L, forbidden_call, 1);
    lua_setfield(L, -2, FORBIDDEN[i][0]);
  }
  lua_pop(L, 1);
}

/* Runs under lua_cpcall, so a memory error while building the state's
 * registry entries is caught rather than fatal. */
static int setup_state(lua_State *L) {
  setup_args *a = lua_touserdata(L, 1);
  lua_settop(L, 0);
  forbid_process_calls(L, a);
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

static int seed_random_cp(lua_State *L) {
  const double *v = lua_touserdata(L, 1);
  lua_getfield(L, LUA_GLOBALSINDEX, "math");
  lua_getfield(L, -1, "randomseed");
  lua_pushnumber(L, *v);
  lua_call(L, 1, 0);
  return 0;
}

int sl__lua_worker_seed_random(lua_State *L, uint64_t seed, const char *where,
                               int worker) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a of where */
  for (const char *p = sl__lua_where_base(where); p && *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  uint64_t z =
      sl__splitmix64_mix(sl__splitmix64_mix(seed) ^ sl__splitmix64_mix(h) ^
                         sl__splitmix64_mix((uint64_t)worker + 1));
  double v = (double)(z >> 11); /* exact in a double */
  if (lua_cpcall(L, seed_random_cp, &v) != 0) {
    int rc = sl_set_error(SL_ELUA, "cannot seed math.random of a worker: %s",
                          lua_isstring(L, -1) ? lua_tostring(L, -1) : "?");
    lua_pop(L, 1);
    return rc;
  }
  return SL_OK;
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

/* When sample s has want's field names in another order, a sample of
 * schema `want` sharing s's tensors (their buffers retained, nothing
 * copied) replaces *sp; s's reference is released.  One sample allocation,
 * made only for such samples; the permutation is found by name, O(n^2) for
 * n fields, without allocating.  Returns 1 when reordered, 0 when the names
 * are not a permutation of want's (nothing changed), or SL_ENOMEM. */
static int reorder(const sl_schema *want, sl_sample **sp) {
  sl_sample *s = *sp;
  const sl_schema *got = sl_sample_schema(s);
  int nf = sl_schema_nfields(want);
  if (sl_schema_nfields(got) != nf) return 0;
  for (int i = 0; i < nf; i++)
    if (sl_schema_find(got, sl_schema_field_name(want, i)) < 0) return 0;
  sl_sample *q = sl_sample_new((sl_schema *)want);
  if (!q) return sl_set_error(SL_ENOMEM, "cannot allocate a sample");
  for (int i = 0; i < nf; i++) {
    int j = sl_schema_find(got, sl_schema_field_name(want, i));
    sl_tensor *t = sl_sample_at(q, i);
    /* Not sl_sample_set: the tensor is checked against want by the caller,
     * with the message naming the field and the sample. */
    sl_tensor_copy_ref(t, sl_sample_at_const(s, j));
  }
  sl_sample_release(s);
  *sp = q;
  return 1;
}

int sl__lua_check_sample(const sl_schema *want, sl_sample **sp, uint64_t index,
                         const sl__lua_check_words *w) {
  unsigned long long n = (unsigned long long)index;
  const sl_schema *got = sl_sample_schema(*sp);
  int nf = sl_schema_nfields(want);
  if (got != want) {
    bool same = sl_schema_nfields(got) == nf;
    for (int i = 0; same && i < nf; i++)
      same = strcmp(sl_schema_field_name(got, i),
                    sl_schema_field_name(want, i)) == 0;
    if (!same) {
      int rc = reorder(want, sp);
      if (rc < 0)
        return sl_wrap_error(rc, "%s (%s): %s %llu: reordering its fields",
                             w->what, w->where, w->item, n);
      if (rc == 0) {
        char a[256], b[256];
        return sl_set_error(SL_ESHAPE,
                            "%s (%s): %s %llu: %s %s do not match %s %s "
                            "(the same names are accepted in any order)",
                            w->what, w->where, w->item, n, w->fields,
                            sl_schema_describe(got, a, sizeof a), w->whose,
                            sl_schema_describe(want, b, sizeof b));
      }
    }
  }
  const sl_sample *s = *sp;
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

int sl__lua_retype_empty(const sl_schema *want, sl_sample **sp) {
  sl_sample *s = *sp;
  const sl_schema *got = sl_sample_schema(s);
  int nf = sl_schema_nfields(want);
  if (got == want || sl_schema_nfields(got) != nf) return 0;
  bool any = false;
  for (int i = 0; i < nf; i++) {
    if (strcmp(sl_schema_field_name(got, i), sl_schema_field_name(want, i)))
      return 0;
    const sl_tensor *t = sl_sample_at_const(s, i);
    if (sl_tensor_numel(t) == 0 && t->dtype != sl_schema_field_dtype(want, i) &&
        t->rank == sl_schema_field_rank(want, i))
      any = true;
  }
  if (!any) return 0;
  sl_sample *q = sl_sample_new((sl_schema *)want);
  if (!q) return sl_set_error(SL_ENOMEM, "cannot allocate a sample");
  for (int i = 0; i < nf; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    sl_tensor *d = sl_sample_at(q, i);
    if (sl_tensor_numel(t) == 0 && t->dtype != sl_schema_field_dtype(want, i) &&
        t->rank == sl_schema_field_rank(want, i)) {
      /* No bytes to reinterpret: a fresh empty tensor of want's dtype. */
      int rc =
          sl_tensor_alloc(d, sl_schema_field_dtype(want, i), t->rank, t->shape);
      if (rc < 0) {
        sl_sample_release(q);
        return sl_set_error(SL_ENOMEM, "cannot allocate a tensor");
      }
    } else {
      sl_tensor_copy_ref(d, t);
    }
  }
  sl_sample_release(s);
  *sp = q;
  return 1;
}

/* The field of `up` named `name` with dtype dt and rank `rank` that tensor
 * t fits, or -1.  A dimension becomes variable where up's is (-1) and the
 * first output's is fixed; nothing else changes. */
static int fitting_field(const sl_schema *up, const char *name, sl_dtype dt,
                         int rank, const sl_tensor *t) {
  if (!up) return -1;
  int j = sl_schema_find(up, name);
  if (j < 0 || sl_schema_field_dtype(up, j) != dt ||
      sl_schema_field_rank(up, j) != rank)
    return -1;
  return sl_schema_check(up, j, t) == SL_OK ? j : -1;
}

int sl__lua_infer_schema(const sl_schema *up, const sl_sample *first,
                         sl_schema **out) {
  const sl_schema *got = sl_sample_schema(first);
  *out = NULL;
  int nf = sl_schema_nfields(got);
  bool widen = false;
  for (int i = 0; i < nf && !widen; i++) {
    int j = fitting_field(
        up, sl_schema_field_name(got, i), sl_schema_field_dtype(got, i),
        sl_schema_field_rank(got, i), sl_sample_at_const(first, i));
    if (j < 0) continue;
    const int64_t *a = sl_schema_field_shape(got, i);
    const int64_t *b = sl_schema_field_shape(up, j);
    for (int d = 0; d < sl_schema_field_rank(got, i); d++)
      if (b[d] == SL_DIM_VAR && a[d] != SL_DIM_VAR) widen = true;
  }
  if (!widen) {
    *out = sl_schema_retain((sl_schema *)got);
    return SL_OK;
  }
  sl_schema *s = sl_schema_new();
  if (!s) return sl_set_error(SL_ENOMEM, "cannot allocate a schema");
  int rc = SL_OK;
  for (int i = 0; i < nf && rc >= 0; i++) {
    const char *name = sl_schema_field_name(got, i);
    sl_dtype dt = sl_schema_field_dtype(got, i);
    int rank = sl_schema_field_rank(got, i);
    int j = fitting_field(up, name, dt, rank, sl_sample_at_const(first, i));
    int64_t shape[SL_MAX_RANK];
    const int64_t *a = sl_schema_field_shape(got, i);
    for (int d = 0; d < rank; d++)
      shape[d] = j >= 0 && sl_schema_field_shape(up, j)[d] == SL_DIM_VAR
                     ? SL_DIM_VAR
                     : a[d];
    rc = sl_schema_add(s, name, dt, rank, shape);
  }
  int nm = sl_schema_meta_count(got);
  for (int k = 0; k < nm && rc >= 0; k++) {
    const char *key, *value;
    if (sl_schema_meta_at(got, k, &key, &value) == SL_OK)
      rc = sl_schema_set_meta(s, key, value);
  }
  if (rc < 0) {
    sl_schema_release(s);
    return rc;
  }
  sl_schema_freeze(s);
  *out = s;
  return SL_OK;
}

void sl__lua_push_ptr(lua_State *L, const void *p) {
  uintptr_t u = (uintptr_t)p;
  if (u < ((uintptr_t)1 << 53))
    lua_pushnumber(L, (lua_Number)u);
  else
    lua_pushlightuserdata(L, (void *)p);
}

void sl__lua_push_ptr_or_nil(lua_State *L, const void *p) {
  if (p)
    sl__lua_push_ptr(L, p);
  else
    lua_pushnil(L);
}

/* --- what the Lua stages share (lua_stage.c, lua_flow.c) ------------------ */

int sl__lua_base_new(size_t size, sl_reader *up, sl_reader **out,
                     const char *what, const char *bad, const sl__shipped *fn,
                     const sl__lua_stage_opts *opts, void **st) {
  if (!out) {
    sl_reader_destroy(up);
    return sl_set_error(SL_EINVAL, "%s: NULL out pointer", what);
  }
  *out = NULL;
  if (!up) return sl_set_error(SL_EINVAL, "%s: NULL upstream reader", what);
  if (bad)
    return sl__fail_with_upstream(up,
                                  sl_set_error(SL_EINVAL, "%s: %s", what, bad));
  /* The options' one check (the Lua facade passes them on unchecked);
   * threads and queue are the engine's. */
  if (!(opts->deadline >= 0 && opts->deadline <= SL__LUA_DEADLINE_MAX))
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL,
                         "%s (%s): option 'deadline' must be a number of "
                         "seconds in [0, %g] (0: none; got %g)",
                         what, sl__shipped_where(fn), SL__LUA_DEADLINE_MAX,
                         opts->deadline));
  if (opts->epoch >= ((uint64_t)1 << 53))
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL,
                         "%s (%s): option 'epoch' must be an integer in "
                         "[0, 2^53) (got %llu)",
                         what, sl__shipped_where(fn),
                         (unsigned long long)opts->epoch));
  const char *where = sl__shipped_where(fn);
  size_t n = strlen(what) + strlen(where) + 4;
  char *label = sl__malloc(n);
  sl__lua_base *b = label ? sl__calloc(1, size) : NULL;
  if (!b) {
    sl__free(label);
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "%s: cannot allocate", what));
  }
  snprintf(label, n, "%s (%s)", what, where);
  b->spec.what = what;
  b->spec.label = label;
  *st = b;
  return SL_OK;
}

size_t sl__lua_stage_window(const sl__lua_stage_opts *opts) {
  long threads = sl__threads_resolve(opts->threads); /* auto: the most */
  size_t dflt = threads > 0 ? (size_t)threads * 32 : (size_t)128;
  return opts->queue ? opts->queue : (dflt > 128 ? dflt : 128);
}

/* lua_cpcall'd in a new worker state: the auxiliary worker function, the
 * init function, and the ctx variant of the operation. */
typedef struct extras_args {
  const sl__lua_stage_worker_spec *spec;
  sl__lua_worker_refs *ref;
  int rc;
} extras_args;

static int extras_cp(lua_State *L) {
  extras_args *a = lua_touserdata(L, 1);
  const sl__lua_stage_worker_spec *sp = a->spec;
  sl__lua_worker_refs *ref = a->ref;
  lua_settop(L, 0);
  /* sl__lua_worker_setup left sluice.worker in one of the two places (the
   * host's registry entry, or package.loaded after its require). */
  lua_getfield(L, LUA_REGISTRYINDEX, "sluice.worker");
  if (!lua_istable(L, -1)) {
    lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
    if (lua_istable(L, -1)) lua_getfield(L, -1, "sluice.worker");
  }
  int wk = lua_gettop(L);
  if (!lua_istable(L, wk)) {
    a->rc = sl_set_error(SL_ELUA, "%s: sluice.worker is not loaded", sp->label);
    return 0;
  }
  if (sp->aux) {
    lua_getfield(L, wk, sp->aux);
    if (!lua_isfunction(L, -1)) {
      a->rc = sl_set_error(SL_ELUA, "%s: sluice.worker has no function '%s'",
                           sp->label, sp->aux);
      return 0;
    }
    ref->aux = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  if (sp->init) {
    int rc = sl__lua_unship(L, sp->init);
    if (rc < 0) {
      a->rc = rc;
      return 0;
    }
    ref->init = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  /* A host's own sluice.worker without `context` gives no ctx. */
  lua_getfield(L, wk, "context");
  if (lua_isfunction(L, -1)) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref->fn);
    lua_pushstring(L, sp->op);
    lua_pushnumber(L, (lua_Number)(sp->seed >> 32));
    lua_pushnumber(L, (lua_Number)(sp->seed & 0xFFFFFFFFu));
    int rc = sl__lua_pcall(L, 4, 1, sp->what, sp->where);
    if (rc < 0) {
      a->rc = rc;
      return 0;
    }
    if (lua_isfunction(L, -1)) {
      luaL_unref(L, LUA_REGISTRYINDEX, ref->op);
      ref->op = luaL_ref(L, LUA_REGISTRYINDEX);
      ref->ctx = true;
    }
  }
  lua_settop(L, 0);
  a->rc = SL_OK;
  return 0;
}

int sl__lua_stage_worker(const sl__lua_stage_worker_spec *sp, int index,
                         const atomic_bool *stop, sl__lua_worker_refs *ref,
                         lua_State **out) {
  lua_State *L = NULL;
  *ref =
      (sl__lua_worker_refs){LUA_NOREF, LUA_NOREF, LUA_NOREF, LUA_NOREF, false};
  int rc = sl__lua_worker_setup(sp->env, sp->fn, sp->what, sp->where, sp->op,
                                &ref->op, &ref->fn, &L);
  if (rc == SL_OK && sp->deadline > 0)
    rc = sl__lua_deadline_set(L, sp->deadline, stop, ref->fn, sp->what,
                              sp->where);
  if (rc == SL_OK) {
    extras_args a = {sp, ref, SL_OK};
    if (lua_cpcall(L, extras_cp, &a) != 0) {
      lua_pop(L, 1);
      rc = sl_set_error(SL_ENOMEM, "%s: cannot set up a worker state",
                        sp->label);
    } else {
      rc = a.rc;
    }
  }
  if (rc == SL_OK)
    rc = sl__lua_worker_seed_random(L, sp->seed, sp->where, index);
  if (rc < 0) {
    if (L) lua_close(L);
    return rc;
  }
  *out = L;
  return SL_OK;
}

/* --- the common part of a stage's state (sl__lua_base) -------------------- */

int sl__lua_base_init(sl__lua_base *b, sl_reader *up, const char *op,
                      const char *aux, sl__shipped *fn, sl__shipped *init,
                      sl__lua_env *env, const sl__lua_stage_opts *opts,
                      sl__engine_stage_cfg *cfg) {
  const char *what = b->spec.what, *label = b->spec.label;
  b->spec = (sl__lua_stage_worker_spec){.env = sl__lua_env_retain(env),
                                        .fn = sl__shipped_retain(fn),
                                        .init = init ? sl__shipped_retain(init)
                                                     : NULL,
                                        .what = what,
                                        .where = sl__shipped_where(fn),
                                        .label = label,
                                        .op = op,
                                        .aux = aux,
                                        .deadline = opts->deadline,
                                        .seed = opts->seed};
  b->epoch0 = opts->epoch;
  atomic_init(&b->check_schema, NULL);
  atomic_init(&b->acct, NULL);
  int nw = cfg ? (int)sl__threads_resolve(opts->threads) : 1;
  if (cfg) {
    cfg->what = cfg->opts.stage = label;
    SL_FORWARD_IF_ERROR(sl__engine_stage_init(&b->run, up, cfg));
  } else {
    b->run.up = up;
    b->run.ordered = true; /* synchronous */
  }
  b->w = nw > 0 ? sl__calloc((size_t)nw, sizeof *b->w) : NULL;
  /* The engine's consumer takes up to 16 results at once (engine.h). */
  b->nnotes = cfg ? 2 * cfg->opts.window + 16 : 0;
  b->notes = cfg ? sl__calloc(b->nnotes, sizeof *b->notes) : NULL;
  pthread_mutex_init(&b->note_mu, NULL);
  SL_RETURN_ERROR_IF(!b->w || (cfg && !b->notes), SL_ENOMEM,
                     "%s: cannot allocate %d workers", label, nw);
  return SL_OK;
}

void sl__lua_base_note(sl__lua_base *b, uint64_t seq, bool unchecked) {
  atomic_store_explicit(&b->notes[seq % b->nnotes],
                        seq << 1 | (unchecked ? 1u : 0u), memory_order_release);
}

bool sl__lua_base_noted(sl__lua_base *b, uint64_t seq) {
  uint64_t note = atomic_load_explicit(&b->notes[seq % b->nnotes],
                                       memory_order_acquire);
  return (note >> 1) == seq ? (note & 1) != 0 : b->schema != NULL;
}

void sl__lua_base_fini(sl__lua_base *b) {
  sl__free(b->w);
  sl__free(b->notes);
  pthread_mutex_destroy(&b->note_mu);
  sl__free((char *)b->spec.label);
  sl_schema_release(b->schema);
  sl__shipped_release((sl__shipped *)b->spec.fn);
  sl__shipped_release((sl__shipped *)b->spec.init);
  sl__lua_env_release((sl__lua_env *)b->spec.env);
}

int sl__lua_base_worker_init(void *ud, int index, void **wctx) {
  sl__lua_base *b = ud;
  sl__lua_worker *w = &b->w[index];
  if (!w->L) {
    SL_FORWARD_IF_ERROR(sl__lua_stage_worker(
        &b->spec, index, sl__engine_stop_flag(b->run.engine), &w->ref, &w->L));
    w->cap = 8;
    sl__lua_heap_start(w->L, &w->heap);
  }
  *wctx = w;
  return SL_OK;
}

void sl__lua_base_worker_fini(void *ud, int index, void *wctx) {
  sl__lua_worker *w = wctx;
  sl__lua_heap_release(&w->heap,
                       sl__engine_budget(((sl__lua_base *)ud)->run.engine));
  if (w->L) lua_close(w->L);
  w->L = NULL;
}

void sl__lua_base_budget(void *st, sl__budget_acct *acct) {
  atomic_store_explicit(&((sl__lua_base *)st)->acct, acct,
                        memory_order_release);
}

sl__budget_acct *sl__lua_base_acct(const sl__lua_base *b) {
  return b->run.engine
             ? sl__engine_budget(b->run.engine)
             : atomic_load_explicit(&b->acct, memory_order_acquire);
}

int sl__lua_call_op(const sl__lua_base *b, sl__lua_worker *w, uint64_t seq,
                    int nargs, int nres) {
  if (w->ref.ctx) {
    lua_pushnumber(w->L, (lua_Number)seq);
    lua_pushnumber(w->L, (lua_Number)(b->epoch0 + b->run.pass));
    nargs += 2;
  }
  int rc = sl__lua_pcall(w->L, nargs, nres, b->spec.what, b->spec.where);
  sl__lua_heap_charge(w->L, &w->heap, sl__lua_base_acct(b));
  return rc;
}

void sl__lua_base_identity(const sl__lua_base *b, char *buf, size_t cap,
                           const char *extra) {
  char desc[256];
  snprintf(buf, cap, "%s %s ordered=%d seed=%llu epoch=%llu schema=%s%s",
           b->spec.what, sl__lua_where_base(b->spec.where),
           b->run.ordered ? 1 : 0, (unsigned long long)b->spec.seed,
           (unsigned long long)b->epoch0,
           b->schema ? sl_schema_describe(b->schema, desc, sizeof desc) : "?",
           extra ? extra : "");
}

void sl__lua_base_fix_schema(sl__lua_base *b, sl_schema *given) {
  b->schema = sl_schema_retain(
      given ? given : (sl_schema *)sl_reader_schema(b->run.up));
  sl_schema_freeze(b->schema);
  atomic_store_explicit(&b->check_schema, b->schema, memory_order_release);
}

int sl__lua_base_learn_schema(sl__lua_base *b, const sl_schema *keep,
                              const sl_sample *first) {
  if (!first && b->run.engine &&
      sl__engine_peek(b->run.engine, &first) != SL_OK)
    first = NULL;
  if (first) {
    int rc = sl__lua_infer_schema(keep, first, &b->schema);
    if (rc < 0)
      return sl_wrap_error(rc, "%s: the schema of the first output",
                           b->spec.label);
  } else {
    b->schema = sl_schema_retain((sl_schema *)sl_reader_schema(b->run.up));
  }
  atomic_store_explicit(&b->check_schema, b->schema, memory_order_release);
  return SL_OK;
}

int sl__lua_base_check(const sl__lua_base *b, const sl_schema *want,
                       sl_sample **s, uint64_t seq, const char *item) {
  const sl__lua_check_words words = {.what = b->spec.what,
                                     .where = b->spec.where,
                                     .item = item,
                                     .fields = "output fields",
                                     .whose = "the stage's",
                                     .require_filled = true};
  int rc = sl__lua_retype_empty(want, s);
  return rc < 0 ? rc : sl__lua_check_sample(want, s, seq, &words);
}

int sl__lua_base_error(const sl__lua_base *b, int rc) {
  return sl__error_keep(rc, "%s: %s", b->spec.label, sl_strerror(rc));
}

int sl__lua_base_error_at(const sl__lua_base *b, int rc, const char *fmt, ...) {
  char at[1024]; /* an error message's most */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(at, sizeof at, fmt, ap);
  va_end(ap);
  sl__lua_base_error(b, rc);
  char *msg = sl__error_dup();
  const char *text = msg ? msg : sl_strerror(rc);
  size_t np = strlen(b->spec.label);
  if (msg && strncmp(msg, b->spec.label, np) == 0 && msg[np] == ':')
    text = msg + np + (msg[np + 1] == ' ' ? 2 : 1);
  rc = sl_set_error(rc, "%s: %s: %s", b->spec.label, at, text);
  sl__free(msg);
  return rc;
}
