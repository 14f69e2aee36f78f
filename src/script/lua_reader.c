/*
 * lua_reader.c - sl__lua_reader: a source written in Lua (Paddle's "reader
 * creator") in its own worker Lua state, under sl_prefetch: the source below
 * is plain and synchronous (its next runs one row of Lua on the calling
 * thread), and prefetch (stages/prefetch.c) runs it on a thread of its own,
 * feeding a channel of `buffer` samples.  So the thread, the channel, the
 * stop and the error hand-off are prefetch's, and the reader's order,
 * errors-after-the-rows-before-them and reset are prefetch's guarantees.
 *
 * The source (one thread at a time: prefetch's worker, or the constructor
 * before prefetch starts it):
 *
 *   state     Made at the first next (or by the constructor, which needs
 *             the first row when no schema was given): sl__lua_worker_new
 *             from the env, `sluice.worker` (the registry entry
 *             "sluice.worker", else require), fn rebuilt by sl__lua_unship;
 *             the state and both registry references live until destroy.  A
 *             state that cannot be made fails that next (the pass).
 *   next      At a pass's first next: it = fn() (a fresh iterator, kept at
 *             stack index 1 while the pass runs).  Then one row per call:
 *               v = it()         error -> that error (SL_ELUA + message)
 *               v == nil         SL_EOF, and again until the reset
 *               worker.export(v, slot, schema) -> the row's sample, checked
 *                                against the reader's schema (SL_ESHAPE
 *                                "reader (<where>): row N: ...", N from 0
 *                                each pass)
 *             Every call goes through sl__lua_pcall, so messages read
 *             "reader (<where>): <message + traceback>".  An error ends the
 *             pass (the reader base keeps it until reset).
 *   reset     Drops the iterator (on the consumer's thread while prefetch is
 *             stopped: no Lua runs); the next pass calls fn() again in the
 *             same state.
 *
 * Memory budget: the state's heap above its size once made is the stage's
 * resident charge (lua_heap.c, as a map worker's), moved after each row
 * (by prefetch's worker, or the constructor's thread) and released when the
 * state is closed (destroy).  The account comes through the stage's budget
 * op while prefetch's worker may run: atomic.
 *
 * Save / restore (stages/state.h): the source's position is all its state
 * (prefetch above saves it at the row the consumer reached); a restore
 * replays that pass from its start - a fresh iterator from fn(), its first
 * k rows made and dropped - so the function must yield the same rows again
 * (docs/RESUME.md).  Its cost is k rows of the Lua function.
 *
 * Construction: with a schema, the constructor returns at once.  Without
 * one, it runs the first row on its own thread: its schema is the reader's
 * (the row is kept and yielded first); if the pass ends at once (EOF) the
 * schema has no fields; if it fails, construction fails with that error (no
 * schema could be known).
 */
#include "stages/stage.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>

typedef enum { PASS_NEW = 0, PASS_RUNNING, PASS_ENDED } pass_state;

typedef struct lua_source {
  sl__shipped *fn;
  sl__lua_env *env;
  const char *where;
  sl_schema *schema; /* the reader's (retained); NULL until known */
  lua_State *L;      /* NULL until made */
  int fn_ref, export_ref;
  sl_sample *slot;
  pass_state pass;
  uint64_t row;     /* rows of this pass so far */
  sl_sample *first; /* the constructor's first row, yielded first */
  sl__lua_heap heap; /* the state's heap under the memory budget */
  sl__budget_acct *_Atomic acct; /* the memory budget's, or NULL */
} lua_source;

static sl__budget_acct *acct_of(const lua_source *r) {
  return atomic_load_explicit(&r->acct, memory_order_acquire);
}

/* Checks row *s against `want`: same field names (in any order: *s is then
 * replaced by a sample in want's order), tensors that fit. */
static int check_row(const lua_source *r, const sl_schema *want, sl_sample **s,
                     uint64_t row) {
  const sl__lua_check_words words = {.what = "reader",
                                     .where = r->where,
                                     .item = "row",
                                     .fields = "fields",
                                     .whose = "the reader's",
                                     .require_filled = false};
  return sl__lua_check_sample(want, s, row, &words);
}

/* Ends the pass with this thread's current error. */
static int fail(lua_source *r, int rc) {
  sl__error_keep(rc, "reader (%s): %s", r->where, sl_strerror(rc));
  r->pass = PASS_ENDED;
  if (r->L) lua_settop(r->L, 0); /* drops the iterator */
  return rc;
}

/* Makes the state and the pass's iterator (stack index 1). */
static int begin_pass(lua_source *r) {
  if (!r->L) {
    int rc = sl__lua_worker_setup(r->env, r->fn, "reader", r->where, "export",
                                  &r->export_ref, &r->fn_ref, &r->L);
    if (rc == SL_OK) rc = sl__lua_worker_seed_random(r->L, 0, r->where, 0);
    if (rc < 0) return fail(r, rc);
    sl__lua_heap_start(r->L, &r->heap);
  }
  lua_State *L = r->L;
  lua_settop(L, 0);
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->fn_ref);
  int rc = sl__lua_pcall(L, 0, 1, "reader", r->where);
  if (rc < 0) return fail(r, rc);
  if (!lua_isfunction(L, -1) && !lua_istable(L, -1) && !lua_isuserdata(L, -1)) {
    sl_set_error(SL_ELUA,
                 "reader (%s): the reader creator returned a %s, not an "
                 "iterator function",
                 r->where, luaL_typename(L, -1));
    return fail(r, SL_ELUA);
  }
  r->pass = PASS_RUNNING;
  r->row = 0;
  return SL_OK;
}

/* The next row of the pass. */
static int source_next(void *state, sl_sample **out) {
  lua_source *r = state;
  if (r->first) {
    *out = r->first;
    r->first = NULL;
    return SL_OK;
  }
  if (r->pass == PASS_ENDED) return SL_EOF; /* the base keeps errors */
  if (r->pass == PASS_NEW) SL_FORWARD_IF_ERROR(begin_pass(r));
  lua_State *L = r->L;
  uint64_t row = r->row;
  lua_settop(L, 1);
  lua_pushvalue(L, 1);
  int rc = sl__lua_pcall(L, 0, 1, "reader", r->where);
  if (rc < 0) return fail(r, rc);
  if (lua_isnil(L, -1)) {
    r->pass = PASS_ENDED;
    lua_settop(L, 0);
    return SL_EOF;
  }
  /* export(value, slot, schema) */
  int v = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->export_ref);
  lua_pushvalue(L, v);
  r->slot = NULL;
  sl__lua_push_ptr(L, &r->slot);
  sl__lua_push_ptr_or_nil(L, r->schema);
  rc = sl__lua_pcall(L, 3, 0, "reader", r->where);
  sl__lua_heap_charge(L, &r->heap, acct_of(r)); /* what the row left */
  sl_sample *s = r->slot;
  r->slot = NULL;
  if (rc < 0) {
    sl_sample_release(s);
    return fail(r, rc);
  }
  if (!s) {
    sl_set_error(SL_ELUA, "reader (%s): row %llu: export made no sample",
                 r->where, (unsigned long long)row);
    return fail(r, SL_ELUA);
  }
  if (r->schema) {
    rc = check_row(r, r->schema, &s, row);
    if (rc < 0) {
      sl_sample_release(s);
      return fail(r, rc);
    }
  }
  r->row++;
  *out = s;
  return SL_OK;
}

static int source_reset(void *state) {
  lua_source *r = state;
  sl_sample_release(r->first);
  r->first = NULL;
  if (r->L) lua_settop(r->L, 0); /* drops the iterator */
  r->pass = PASS_NEW;
  return SL_OK;
}

static void source_destroy(void *state) {
  lua_source *r = state;
  if (!r) return;
  sl_sample_release(r->first);
  sl__lua_heap_release(&r->heap, acct_of(r));
  if (r->L) lua_close(r->L);
  sl__shipped_release(r->fn);
  sl__lua_env_release(r->env);
  sl__stage_free(r, NULL, r->schema);
}

/* Replays the pass from its start: a fresh iterator, k rows dropped. */
static int source_restore(sl_reader *rd, void *state, uint64_t pass, uint64_t k,
                          sl__state_in *in) {
  lua_source *r = state;
  source_reset(r);
  char what[300];
  snprintf(what, sizeof what, "reader (%s)", r->where);
  return sl__state_replay(source_next, r, k, what);
}

static void source_identity(const sl_reader *rd, void *state, char *buf,
                            size_t cap) {
  const lua_source *r = state;
  char schema[256];
  snprintf(buf, cap, "reader %s schema=%s", sl__lua_where_base(r->where),
           sl_schema_describe(r->schema, schema, sizeof schema));
}

/* The memory budget: the state's heap, resident (see the top). */
static void source_budget(void *state, sl__budget_acct *acct) {
  atomic_store_explicit(&((lua_source *)state)->acct, acct,
                        memory_order_release);
}

static const sl__stage_ops source_ops = {
    .name = "reader",
    .budget = source_budget,
    .next = source_next,
    .reset = source_reset,
    .destroy = source_destroy,
    .save = sl__state_save_position,
    .restore = source_restore,
    .identity = source_identity,
};

/* The reader's schema from its first row, run here (no schema given). */
static int learn_schema(lua_source *r) {
  sl_sample *s = NULL;
  int rc = source_next(r, &s);
  if (rc == SL_OK) {
    r->first = s;
    r->schema = sl_schema_retain((sl_schema *)sl_sample_schema(s));
    return SL_OK;
  }
  if (rc != SL_EOF) return rc;
  /* An empty first pass: the reader has no fields.  The pass stays ended
   * (the first next sees EOF); later passes must stay empty too (any row
   * fails the schema check). */
  r->schema = sl_schema_new();
  if (!r->schema)
    return sl_set_error(SL_ENOMEM, "reader (%s): cannot allocate a schema",
                        r->where);
  sl_schema_freeze(r->schema);
  return SL_OK;
}

int sl__lua_reader(sl__shipped *fn, sl__lua_env *env, size_t buffer,
                   sl_schema *schema, sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "reader: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!fn || !env, SL_EINVAL, "reader: NULL %s",
                     !fn ? "function" : "environment");
  SL_RETURN_ERROR_IF(buffer == 0, SL_EINVAL,
                     "reader (%s): buffer size must be >= 1",
                     sl__shipped_where(fn));
  lua_source *r = sl__calloc(1, sizeof *r);
  SL_RETURN_ERROR_IF(!r, SL_ENOMEM, "reader: cannot allocate");
  atomic_init(&r->acct, NULL);
  r->fn = sl__shipped_retain(fn);
  r->env = sl__lua_env_retain(env);
  r->where = sl__shipped_where(fn);
  if (schema) {
    sl_schema_freeze(schema);
    r->schema = sl_schema_retain(schema);
  }
  int rc = r->schema ? SL_OK : learn_schema(r);
  if (rc < 0) {
    source_destroy(r);
    return rc;
  }
  sl_reader *src = NULL;
  SL_FORWARD_IF_ERROR(
      sl__stage_new(&source_ops, r, r->schema, NULL, 0, NULL, &src));
  return sl_prefetch(src, buffer, out);
}
