/*
 * lua_flow.c - sl__lua_flow: the Lua stages that change the flow of
 * samples rather than each sample (issue 19): flat_map (one sample in, 0..n
 * out), take_while (samples while a predicate holds, then the end of the
 * pass) and scan (a running state carried from sample to sample).  Each
 * runs its function in worker Lua states (lua_host.h), never in the
 * consumer's, through sluice.worker (lua/sluice/worker.lua):
 *
 *   flat_map    worker.flat_map(fn, sample, slots, cap, schema) -> n: fn
 *               returns an array of samples or tables of fields (nil or {}
 *               for none); the first n <= cap go into slots[0..n), else the
 *               stage grows the array to n and calls
 *               worker.flat_map_fill(slots).  It runs on the parallel-stage
 *               engine (sync/engine.h) with sl__engine_process_many, so
 *               `threads` workers share the work and the outputs come in
 *               upstream order (ordered) whatever the thread count.  Outputs
 *               are checked against the stage schema on the worker once it
 *               is known; those of an item processed before (the first
 *               items, while the constructor learns the schema from the
 *               first output) are flagged in unchecked[seq % nflags] (an
 *               item's flag stays put until the consumer took it: items
 *               pulled after it and before that are fewer than the
 *               engine's window plus its consumer cache, ordered, and less
 *               than twice the window plus the cache unordered, where an
 *               item may finish a window late) and checked by the consumer
 *               when it takes them.
 *               Length: not known.
 *               Position (save/restore): output k is output `off` of
 *               upstream item `seq`; a ring of the last SL__STATE_LOG
 *               outputs' (seq, off, n) finds the item to resume from and
 *               how many of its outputs to drop again (the restore re-runs
 *               that item: fn must be deterministic, ctx.rng is); a
 *               position further behind replays the pass from its start.
 *               Unordered (ordered = false) positions are not reproducible:
 *               a save is refused (SL_EUNSUPPORTED).
 *   take_while  worker.take_while(fn, sample) -> keep?  (filter's
 *               protocol).  The first false ends the pass: SL_EOF, and
 *               upstream is not read further in this pass.  Synchronous:
 *               runs on the thread that pulls the stage (one worker state,
 *               in order, nothing read ahead).  Position = upstream's (1:1
 *               until the stop).  Length: not known.
 *   scan        worker.scan(fn, state, sample, slot, schema) -> state:
 *               fn(state, s) returns the new state and the output (a sample
 *               or a table of fields).  Each pass starts from
 *               worker.scan_init(init) (a deep copy of what the shipped
 *               `init` function returns).  Synchronous, like take_while.
 *               The state is a Lua value that is not saved: a restore
 *               replays the pass from its start (k calls of fn).  Length:
 *               upstream's.  Without `schema` the constructor runs fn on
 *               the first sample (its output is yielded first) and infers
 *               the schema from it as a map does.
 *
 * ctx: a function declaring a second parameter (take_while, flat_map) or a
 * third (scan) gets ctx as the Lua map does (worker.context), with
 * ctx.index = the upstream sample's position in the pass.
 *
 * Threads: flat_map's workers own their lua_worker (w[i]) and write
 * unchecked[] for the items they process; the rest is the consumer's.
 * take_while and scan have no thread: their one worker state is touched by
 * whichever thread pulls the stage (one at a time, as any reader); their
 * stop flag (the deadline hook reads it) is set by the stop signal from any
 * thread.
 */
#include "stages/state.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"
#include "sync/engine.h"

#include <lauxlib.h>

/* One worker state and its registry references. */
typedef struct flow_worker {
  lua_State *L;
  /* fn; worker.<op> or its ctx variant; aux: worker.flat_map_fill (flat_map)
   * or worker.scan_init (scan); init: scan's shipped init function */
  sl__lua_worker_refs ref;
  size_t cap; /* flat_map: slots offered to the next call */
} flow_worker;

/* One output of flat_map: upstream item seq, its output off of n. */
typedef struct flow_out {
  uint64_t seq, off, n;
} flow_out;

typedef struct flow_stage {
  /* immutable once built */
  sl__lua_flow_kind kind;
  const char *what, *where;
  char *label; /* "<what> (<where>)" */
  sl__shipped *fn, *init;
  sl__lua_env *env;
  double deadline;
  uint64_t seed, epoch0;
  bool ordered;
  sl_reader *up;
  sl_schema *schema; /* the stage's (retained); NULL while learning */
  _Atomic(const sl_schema *) check_schema;
  uint64_t pass; /* resets since construction (or as restored) */

  /* take_while, scan: the one worker state and the pass */
  flow_worker one;
  atomic_bool stop;
  uint64_t seq;     /* upstream samples taken this pass */
  bool ended;       /* take_while: the predicate said no */
  sl_sample *first; /* scan: the first output, made by the constructor */
  int first_rc;     /* scan: the constructor's error on the first sample */
  char *first_msg;  /* ... and its message */

  /* flat_map: the engine, its workers, and the consumer's current item */
  sl__engine *engine;
  flow_worker *w;
  size_t window, nflags;
  unsigned char *unchecked; /* nflags flags, by seq % nflags */
  sl_sample **cur;
  size_t cur_n, cur_pos;
  uint64_t cur_seq;
  /* flat_map positions: outputs this pass (count), the ring of their
   * origins, the first position the ring knows (known) and where output
   * `known` comes from (rest_u, rest_d) */
  flow_out ring[SL__STATE_LOG];
  uint64_t count, known, rest_u, rest_d;
} flow_stage;

/* The most results the engine's consumer takes per lock round trip (its
 * default cache, engine.h): they wait in the cache while the workers refill
 * the window. */
#define FLOW_CACHE 16

static const char *const WHAT[] = {"flat_map", "take_while", "scan"};
static const char *const OP[] = {"flat_map", "take_while", "scan"};

/* --- messages ------------------------------------------------------------- */

/* This thread's message "<label>: <text>" becomes "<label>: sample N:
 * <text>": the position of the upstream sample fn was running on. */
static int at_sample(const flow_stage *st, uint64_t seq, int rc) {
  if (sl_last_error_code() != rc || !sl_last_error()[0])
    sl_set_error(rc, "%s: %s", st->label, sl_strerror(rc));
  char *msg = sl__error_dup();
  const char *text = msg ? msg : sl_strerror(rc);
  size_t np = strlen(st->label);
  if (msg && strncmp(msg, st->label, np) == 0 && msg[np] == ':')
    text = msg + np + (msg[np + 1] == ' ' ? 2 : 1);
  rc = sl_set_error(rc, "%s: sample %llu: %s", st->label,
                    (unsigned long long)seq, text);
  sl__free(msg);
  return rc;
}

/* Checks output *s of upstream sample seq against `want` (replacing *s by
 * a sample in want's field order when needed).  SL_OK or the error. */
static int check_out(const flow_stage *st, const sl_schema *want, sl_sample **s,
                     uint64_t seq) {
  const sl__lua_check_words words = {.what = st->what,
                                     .where = st->where,
                                     .item = "output of sample",
                                     .fields = "output fields",
                                     .whose = "the stage's",
                                     .require_filled = true};
  int rc = sl__lua_retype_empty(want, s);
  return rc < 0 ? rc : sl__lua_check_sample(want, s, seq, &words);
}

/* --- worker states -------------------------------------------------------- */

/* Makes worker state `index` of the stage into *w.  `stop` is the flag a
 * deadline hook watches.  SL_OK or the error (message set). */
static int worker_make(const flow_stage *st, int index, const atomic_bool *stop,
                       flow_worker *w) {
  const sl__lua_stage_worker_spec spec = {
      .env = st->env,
      .fn = st->fn,
      .init = st->init,
      .what = st->what,
      .where = st->where,
      .label = st->label,
      .op = OP[st->kind],
      .aux = st->kind == SL__LUA_FLAT_MAP ? "flat_map_fill"
             : st->kind == SL__LUA_SCAN   ? "scan_init"
                                          : NULL,
      .deadline = st->deadline,
      .seed = st->seed};
  SL_FORWARD_IF_ERROR(sl__lua_stage_worker(&spec, index, stop, &w->ref, &w->L));
  w->cap = 8;
  return SL_OK;
}

static void worker_close(flow_worker *w) {
  if (w->L) lua_close(w->L);
  w->L = NULL;
}

/* ctx's index and epoch, after the operation's arguments. */
static void push_ctx(const flow_stage *st, lua_State *L, uint64_t seq) {
  lua_pushnumber(L, (lua_Number)seq);
  lua_pushnumber(L, (lua_Number)(st->epoch0 + st->pass));
}

/* --- flat_map on the engine ----------------------------------------------- */

static int fm_pull(void *ud, sl_sample **out) {
  return sl_reader_next(((flow_stage *)ud)->up, out);
}

static int fm_worker_init(void *ud, int index, void **wctx) {
  flow_stage *st = ud;
  flow_worker *w = &st->w[index];
  if (!w->L)
    SL_FORWARD_IF_ERROR(
        worker_make(st, index, sl__engine_stop_flag(st->engine), w));
  *wctx = w;
  return SL_OK;
}

static void fm_worker_fini(void *ud, int index, void *wctx) {
  (void)ud;
  (void)index;
  worker_close(wctx);
}

/* Releases v[0..n) and frees v. */
static void free_outputs(sl_sample **v, size_t n) {
  if (!v) return;
  for (size_t i = 0; i < n; i++)
    sl_sample_release(v[i]);
  sl__free(v);
}

/* Grows the slots *v (*have of them) to m, zeroed, and asks Lua for the
 * outputs it kept. */
static int fm_fill(flow_stage *st, flow_worker *w, uint64_t seq, sl_sample ***v,
                   size_t *have, size_t m) {
  sl_sample **nv = sl__realloc(*v, m * sizeof *nv);
  if (!nv)
    return sl_set_error(SL_ENOMEM,
                        "%s: sample %llu: cannot allocate %zu outputs",
                        st->label, (unsigned long long)seq, m);
  memset(nv + *have, 0, (m - *have) * sizeof *nv);
  *v = nv;
  *have = m;
  lua_State *L = w->L;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.aux);
  sl__lua_push_ptr(L, nv);
  int rc = sl__lua_pcall(L, 1, 0, st->what, st->where);
  lua_settop(L, top);
  return rc < 0 ? at_sample(st, seq, rc) : SL_OK;
}

static int fm_many(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                   sl_sample ***out, size_t *n) {
  flow_stage *st = ud;
  flow_worker *w = wctx;
  lua_State *L = w->L;
  const sl_schema *want =
      atomic_load_explicit(&st->check_schema, memory_order_acquire);
  size_t cap = w->cap;
  sl_sample **v = sl__calloc(cap, sizeof *v);
  if (!v) {
    sl_sample_release(in);
    return sl_set_error(SL_ENOMEM, "%s: sample %llu: cannot allocate",
                        st->label, (unsigned long long)seq);
  }
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.op);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.fn);
  sl__lua_push_ptr(L, in); /* this reference now belongs to Lua */
  sl__lua_push_ptr(L, v);
  lua_pushnumber(L, (lua_Number)cap);
  if (want)
    sl__lua_push_ptr(L, want);
  else
    lua_pushnil(L);
  if (w->ref.ctx) push_ctx(st, L, seq);
  int rc = sl__lua_pcall(L, w->ref.ctx ? 7 : 5, 1, st->what, st->where);
  lua_Number got = rc == SL_OK ? lua_tonumber(L, -1) : 0;
  lua_settop(L, top);
  if (rc < 0) {
    free_outputs(v, cap);
    return at_sample(st, seq, rc);
  }
  size_t m = got > 0 ? (size_t)got : 0;
  if (m > cap) {
    size_t have = cap;
    rc = fm_fill(st, w, seq, &v, &have, m);
    /* Offer the next call about as many slots (bounded: one huge item
     * does not make every later item allocate as much). */
    w->cap = m < 1024 ? m : 1024;
    if (rc < 0) {
      free_outputs(v, have);
      return rc;
    }
  }
  if (m == 0) {
    sl__free(v);
    return SL__ENGINE_DROP;
  }
  st->unchecked[seq % st->nflags] = want ? 0 : 1;
  for (size_t i = 0; want && i < m; i++) {
    rc = check_out(st, want, &v[i], seq);
    if (rc < 0) {
      free_outputs(v, m);
      return rc;
    }
  }
  *out = v;
  *n = m;
  return SL__ENGINE_OUT;
}

static const sl__engine_ops fm_ops = {fm_pull, fm_worker_init, fm_worker_fini,
                                      NULL, NULL};

/* Releases the consumer's current item. */
static void fm_drop_cur(flow_stage *st) {
  if (st->cur)
    for (size_t i = st->cur_pos; i < st->cur_n; i++)
      sl_sample_release(st->cur[i]);
  sl__free(st->cur);
  st->cur = NULL;
  st->cur_n = st->cur_pos = 0;
}

/* The next item's outputs into cur (checked when made before the schema
 * was known).  SL_OK, SL_EOF or the pass's error. */
static int fm_take(flow_stage *st) {
  sl_sample **v = NULL;
  size_t n = 0;
  uint64_t seq = 0;
  SL_FORWARD_IF_ERROR(sl__engine_next_many(st->engine, &v, &n, &seq));
  if (st->unchecked[seq % st->nflags]) {
    for (size_t i = 0; i < n; i++) {
      int rc = check_out(st, st->schema, &v[i], seq);
      if (rc < 0) {
        free_outputs(v, n);
        return rc;
      }
    }
  }
  st->cur = v;
  st->cur_n = n;
  st->cur_pos = 0;
  st->cur_seq = seq;
  return SL_OK;
}

static int fm_next(void *state, sl_sample **out) {
  flow_stage *st = state;
  while (st->cur_pos >= st->cur_n) {
    fm_drop_cur(st);
    SL_FORWARD_IF_ERROR(fm_take(st));
  }
  *out = st->cur[st->cur_pos++];
  st->ring[st->count++ % SL__STATE_LOG] =
      (flow_out){st->cur_seq, st->cur_pos - 1, st->cur_n};
  return SL_OK;
}

/* A new pass's positions: output `known` = 0 comes from item 0. */
static void fm_forget(flow_stage *st) {
  fm_drop_cur(st);
  st->count = st->known = st->rest_u = st->rest_d = 0;
}

/* --- take_while and scan: synchronous ------------------------------------- */

static int tw_next(void *state, sl_sample **out) {
  flow_stage *st = state;
  if (st->ended) return SL_EOF;
  sl_sample *s = NULL;
  SL_FORWARD_IF_ERROR(sl_reader_next(st->up, &s));
  uint64_t seq = st->seq++;
  flow_worker *w = &st->one;
  lua_State *L = w->L;
  int top = lua_gettop(L);
  sl_sample_retain(s); /* ours, yielded if fn says so */
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.op);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.fn);
  sl__lua_push_ptr(L, s); /* the other reference belongs to Lua */
  if (w->ref.ctx) push_ctx(st, L, seq);
  int rc = sl__lua_pcall(L, w->ref.ctx ? 4 : 2, 1, st->what, st->where);
  bool keep = rc == SL_OK && lua_toboolean(L, -1);
  lua_settop(L, top);
  if (rc < 0) {
    sl_sample_release(s);
    return at_sample(st, seq, rc);
  }
  if (keep) {
    *out = s;
    return SL_OK;
  }
  sl_sample_release(s);
  st->ended = true;
  return SL_EOF;
}

/* The key of the scan state in its worker state's registry (a worker state
 * runs one stage, so one key serves every stage). */
static const char SCAN_STATE_KEY = 0;

/* registry[key] = worker.scan_init(init). */
static int scan_init(flow_stage *st, uint64_t seq) {
  flow_worker *w = &st->one;
  lua_State *L = w->L;
  int top = lua_gettop(L);
  lua_pushlightuserdata(L, (void *)&SCAN_STATE_KEY);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.aux);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.init);
  int rc = sl__lua_pcall(L, 1, 1, st->what, st->where);
  if (rc == SL_OK) lua_rawset(L, LUA_REGISTRYINDEX);
  lua_settop(L, top);
  return rc < 0 ? at_sample(st, seq, rc) : SL_OK;
}

/* One step of the scan on the next upstream sample: the output, not yet
 * checked, in *out. */
static int scan_step(flow_stage *st, sl_sample **out) {
  sl_sample *s = NULL;
  SL_FORWARD_IF_ERROR(sl_reader_next(st->up, &s));
  uint64_t seq = st->seq++;
  if (seq == 0) {
    int rc = scan_init(st, seq);
    if (rc < 0) {
      sl_sample_release(s);
      return rc;
    }
  }
  flow_worker *w = &st->one;
  lua_State *L = w->L;
  int top = lua_gettop(L);
  sl_sample *o = NULL;
  lua_pushlightuserdata(L, (void *)&SCAN_STATE_KEY);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.op);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.fn);
  lua_pushlightuserdata(L, (void *)&SCAN_STATE_KEY);
  lua_rawget(L, LUA_REGISTRYINDEX);
  sl__lua_push_ptr(L, s); /* this reference now belongs to Lua */
  sl__lua_push_ptr(L, &o);
  if (st->schema)
    sl__lua_push_ptr(L, st->schema);
  else
    lua_pushnil(L);
  if (w->ref.ctx) push_ctx(st, L, seq);
  int rc = sl__lua_pcall(L, w->ref.ctx ? 7 : 5, 1, st->what, st->where);
  if (rc == SL_OK) lua_rawset(L, LUA_REGISTRYINDEX); /* the new state */
  lua_settop(L, top);
  if (rc < 0) {
    sl_sample_release(o);
    return at_sample(st, seq, rc);
  }
  if (!o)
    return sl_set_error(SL_ELUA, "%s: sample %llu: the function gave no output",
                        st->label, (unsigned long long)seq);
  *out = o;
  return SL_OK;
}

static int scan_next(void *state, sl_sample **out) {
  flow_stage *st = state;
  if (st->first) {
    *out = st->first;
    st->first = NULL;
    return SL_OK;
  }
  if (st->first_rc < 0) {
    int rc = st->first_rc;
    st->first_rc = SL_OK;
    sl_set_error(rc, "%s", st->first_msg ? st->first_msg : sl_strerror(rc));
    sl__free(st->first_msg);
    st->first_msg = NULL;
    return rc;
  }
  sl_sample *o = NULL;
  SL_FORWARD_IF_ERROR(scan_step(st, &o));
  int rc = check_out(st, st->schema, &o, st->seq - 1);
  if (rc < 0) {
    sl_sample_release(o);
    return rc;
  }
  *out = o;
  return SL_OK;
}

/* Forgets what the constructor made for the first pass. */
static void drop_first(flow_stage *st) {
  sl_sample_release(st->first);
  st->first = NULL;
  st->first_rc = SL_OK;
  sl__free(st->first_msg);
  st->first_msg = NULL;
}

/* --- the reader ----------------------------------------------------------- */

static int flow_next(void *state, sl_sample **out) {
  flow_stage *st = state;
  switch (st->kind) {
  case SL__LUA_FLAT_MAP:
    return fm_next(state, out);
  case SL__LUA_TAKE_WHILE:
    return tw_next(state, out);
  default:
    return scan_next(state, out);
  }
}

static void flow_signal_stop(void *state) {
  flow_stage *st = state;
  if (st->engine)
    sl__engine_signal_stop(st->engine);
  else
    atomic_store(&st->stop, true);
}

/* Stops what runs and forgets the pass (not the counters of passes). */
static void stop_pass(flow_stage *st) {
  if (st->engine) {
    sl__engine_stop(st->engine);
    fm_forget(st);
  }
  drop_first(st);
  atomic_store(&st->stop, false);
  st->seq = 0;
  st->ended = false;
}

static int flow_reset(void *state) {
  flow_stage *st = state;
  stop_pass(st);
  st->pass++;
  SL_FORWARD_IF_ERROR(sl_reader_reset(st->up));
  return st->engine ? sl__engine_start(st->engine) : SL_OK;
}

static void flow_destroy(void *state) {
  flow_stage *st = state;
  if (!st) return;
  if (st->engine) {
    sl__engine_stop(st->engine);
    fm_drop_cur(st);
  }
  sl__engine_destroy(st->engine); /* closes the workers' states */
  worker_close(&st->one);
  drop_first(st);
  sl__free(st->w);
  sl__free(st->unchecked);
  sl__free(st->label);
  sl_reader_destroy(st->up);
  sl_schema_release(st->schema);
  sl__shipped_release(st->fn);
  sl__shipped_release(st->init);
  sl__lua_env_release(st->env);
  sl__free(st);
}

static const sl_reader_vtable flat_map_vt = {"flat_map", flow_next, flow_reset,
                                             flow_destroy};
static const sl_reader_vtable take_while_vt = {"take_while", flow_next,
                                               flow_reset, flow_destroy};
static const sl_reader_vtable scan_vt = {"scan", flow_next, flow_reset,
                                         flow_destroy};

/* --- saving and restoring (readers/state.h) ------------------------------- */

/* flat_map: the payload is (u, d): resume pulling at upstream position u
 * and drop the first d outputs of item u; u = UINT64_MAX: replay the pass
 * from its start (k outputs). */
static int fm_save(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                   sl__state_out *w) {
  (void)r;
  (void)pass;
  flow_stage *st = state;
  if (!st->ordered)
    return sl_set_error(SL_EUNSUPPORTED,
                        "save: %s (ordered=false): the order of its outputs "
                        "is not reproducible, so its position cannot be "
                        "saved; use ordered=true",
                        st->label);
  SL_RETURN_ERROR_IF(k > st->count, SL_EINVAL,
                     "save: %s: position %llu is ahead of %llu", st->label,
                     (unsigned long long)k, (unsigned long long)st->count);
  uint64_t u = 0, d = 0;
  bool replay = false;
  if (k == st->known) {
    u = st->rest_u;
    d = st->rest_d;
  } else if (k > st->known && st->count - k < SL__STATE_LOG) {
    const flow_out *o = &st->ring[(k - 1) % SL__STATE_LOG];
    if (o->off + 1 < o->n) {
      u = o->seq;
      d = o->off + 1;
    } else {
      u = o->seq + 1;
    }
  } else {
    replay = true;
  }
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, replay ? UINT64_MAX : u));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, d));
  sl__engine_hold_pulls(st->engine);
  int rc =
      replay ? sl__state_save_up_replayed(w, st->up, sl__reader_pass(st->up), 0)
             : sl__state_save_up(w, st->up, sl__reader_pass(st->up), u);
  sl__engine_release_pulls(st->engine);
  return rc;
}

static int fm_restore(flow_stage *st, uint64_t k, sl__state_in *in) {
  uint64_t u = 0, d = 0;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, st->up));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &u));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &d));
  if (u == UINT64_MAX) {
    SL_FORWARD_IF_ERROR(sl__engine_start(st->engine));
    return sl__state_replay(fm_next, st, k, st->label);
  }
  sl__engine_start_at(st->engine, u);
  SL_FORWARD_IF_ERROR(sl__engine_start(st->engine));
  if (d > 0) {
    int rc = fm_take(st);
    if (rc == SL_OK && (st->cur_seq != u || st->cur_n <= d))
      rc = sl_set_error(SL_ECORRUPT,
                        "restore: %s: sample %llu gave %zu outputs, the state "
                        "needs more than %llu (is the function "
                        "deterministic? ctx.rng is)",
                        st->label, (unsigned long long)u,
                        st->cur_seq == u ? st->cur_n : (size_t)0,
                        (unsigned long long)d);
    if (rc == SL_EOF)
      rc = sl_set_error(SL_ECORRUPT,
                        "restore: %s: the pass ended before sample %llu",
                        st->label, (unsigned long long)u);
    SL_FORWARD_IF_ERROR(rc);
    for (; st->cur_pos < d; st->cur_pos++) {
      sl_sample_release(st->cur[st->cur_pos]);
      st->cur[st->cur_pos] = NULL;
    }
  }
  st->count = st->known = k;
  st->rest_u = u;
  st->rest_d = d;
  return SL_OK;
}

static int flow_save(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                     sl__state_out *w) {
  flow_stage *st = state;
  switch (st->kind) {
  case SL__LUA_FLAT_MAP:
    return fm_save(r, state, pass, k, w);
  case SL__LUA_TAKE_WHILE:
    return sl__state_save_1to1(r, state, pass, k, w);
  default:
    /* The scan state is not saved: the restore replays the pass. */
    return sl__state_save_up_replayed(w, st->up, sl__reader_pass(st->up), 0);
  }
}

static int flow_restore(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  (void)r;
  flow_stage *st = state;
  stop_pass(st);
  st->pass = pass;
  switch (st->kind) {
  case SL__LUA_FLAT_MAP:
    return fm_restore(st, k, in);
  case SL__LUA_TAKE_WHILE:
    SL_FORWARD_IF_ERROR(sl__state_restore_up(in, st->up));
    st->seq = k;
    return SL_OK;
  default:
    SL_FORWARD_IF_ERROR(sl__state_restore_up(in, st->up));
    return sl__state_replay(scan_next, st, k, st->label);
  }
}

/* Not threads nor queue: a state restores into any thread count. */
static void flow_identity(const sl_reader *r, void *state, char *buf,
                          size_t cap) {
  (void)r;
  const flow_stage *st = state;
  sl__lua_stage_identity(buf, cap, st->what, st->where, st->ordered, st->seed,
                         st->epoch0, st->schema, NULL);
}

static const sl__state_ops flow_state_ops = {flow_save, flow_restore,
                                             flow_identity};

/* --- construction --------------------------------------------------------- */

/* The stage schema from the first output (flat_map and scan without
 * `schema`); upstream's when there is none (an empty pass, or an error,
 * which is then delivered at its place). */
static int learn_schema(flow_stage *st) {
  const sl_sample *first = NULL;
  int got = SL_EOF;
  if (st->engine) {
    got = sl__engine_peek(st->engine, &first);
  } else {
    sl_sample *o = NULL;
    got = scan_step(st, &o);
    if (got == SL_OK) {
      st->first = o;
      first = o;
    } else if (got != SL_EOF) {
      st->first_rc = got;
      st->first_msg = sl__error_dup();
    }
  }
  return sl__lua_stage_learn_schema(sl_reader_schema(st->up), st->up,
                                    got == SL_OK ? first : NULL, st->label,
                                    &st->schema, &st->check_schema);
}

int sl__lua_flow(sl_reader *up, sl__lua_flow_kind kind, sl__shipped *fn,
                 sl__shipped *init, sl__lua_env *env,
                 const sl__lua_stage_opts *opts, sl_schema *schema,
                 sl_reader **out) {
  const char *what = (unsigned)kind <= SL__LUA_SCAN ? WHAT[kind] : "lua flow";
  const char *bad = !fn                                ? "NULL function"
                    : !env                             ? "NULL environment"
                    : !opts                            ? "NULL options"
                    : (unsigned)kind > SL__LUA_SCAN    ? "unknown kind"
                    : (kind == SL__LUA_SCAN) != !!init ? "an init function "
                                                         "is scan's only"
                    : kind == SL__LUA_TAKE_WHILE && schema
                        ? "take_while has no schema option (it yields its "
                          "upstream's samples)"
                        : NULL;
  SL_FORWARD_IF_ERROR(sl__lua_stage_check_args(up, out, what, bad, fn, opts));
  flow_stage *st = sl__calloc(1, sizeof *st);
  if (!st)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "%s: cannot allocate", what));
  int rc = SL_OK;
  atomic_init(&st->check_schema, NULL);
  atomic_init(&st->stop, false);
  st->one.ref =
      (sl__lua_worker_refs){LUA_NOREF, LUA_NOREF, LUA_NOREF, LUA_NOREF, false};
  st->up = up;
  st->kind = kind;
  st->what = what;
  st->fn = sl__shipped_retain(fn);
  st->init = init ? sl__shipped_retain(init) : NULL;
  st->env = sl__lua_env_retain(env);
  st->where = sl__shipped_where(fn);
  st->deadline = opts->deadline;
  st->seed = opts->seed;
  st->epoch0 = opts->epoch;
  st->ordered = kind != SL__LUA_FLAT_MAP || opts->ordered != 0;
  st->label = sl__lua_stage_label(what, st->where);
  if (!st->label) {
    flow_destroy(st);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate", what);
  }

  if (schema || kind == SL__LUA_TAKE_WHILE)
    sl__lua_stage_fix_schema(schema, up, &st->schema, &st->check_schema);
  if (kind == SL__LUA_FLAT_MAP) {
    st->window = sl__lua_stage_window(opts);
    const sl__engine_opts eo = {st->label, "sl-lua-flatmap", opts->threads,
                                st->ordered, st->window};
    rc = sl__engine_create(&fm_ops, st, &eo, &st->engine);
    if (rc < 0) {
      flow_destroy(st);
      return rc;
    }
    sl__engine_process_many(st->engine, fm_many);
    st->w = sl__calloc((size_t)opts->threads, sizeof *st->w);
    st->nflags = 2 * st->window + FLOW_CACHE;
    st->unchecked = sl__calloc(st->nflags, 1);
    if (!st->w || !st->unchecked) {
      flow_destroy(st);
      return sl_set_error(SL_ENOMEM, "%s: cannot allocate %d workers",
                          st->label, opts->threads);
    }
    rc = sl__engine_start(st->engine);
  } else {
    rc = worker_make(st, 0, &st->stop, &st->one);
  }
  if (rc == SL_OK && !st->schema) rc = learn_schema(st);
  if (rc < 0) {
    flow_destroy(st);
    return rc;
  }
  const sl__stage_counters *c =
      st->engine ? sl__engine_counters(st->engine) : NULL;
  const sl_reader_vtable *vt = kind == SL__LUA_FLAT_MAP     ? &flat_map_vt
                               : kind == SL__LUA_TAKE_WHILE ? &take_while_vt
                                                            : &scan_vt;
  /* A scan yields one output per sample: upstream's length.  flat_map's
   * and take_while's are not known. */
  if (kind == SL__LUA_SCAN)
    rc = sl__decorator_make_1to1(vt, st, st->schema, &st->up, c, out);
  else
    rc = sl__decorator_make(vt, st, st->schema, &st->up, c, out);
  if (rc == SL_OK) {
    sl__reader_set_state_ops(*out, &flow_state_ops);
    sl__reader_set_stop_signal(*out, flow_signal_stop);
  }
  return rc;
}
