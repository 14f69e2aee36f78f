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
 *               first output) are noted (sl__lua_base's notes,
 *               as the Lua map's) and checked by the consumer when it takes
 *               them.
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
 *               The state is a Lua value: a save holds it when it is a
 *               plain value (lua_value.h: nil, boolean, number, string,
 *               tables of those) - the current one, or for a save behind
 *               (stages above holding outputs) one of the last SCAN_HIST,
 *               kept encoded after each step while they stay under
 *               SCAN_HIST_BYTES - with the upstream at the position: the
 *               restore reads nothing again.  Otherwise (a function, a
 *               userdata or cdata, a metatable, a shared table in it; a
 *               save further behind) the save is the old one: the restore
 *               replays the pass from its start (k calls of fn).  Length:
 *               upstream's.  Without `schema` the constructor runs fn on
 *               the first sample (its output is yielded first) and infers
 *               the schema from it as a map does.
 *
 * Memory budget: each worker state's heap above its size once made is
 * charged to the stage after each call (lua_heap.c): flat_map's workers
 * through the engine's account, take_while's and scan's one state through
 * the stage's own (sl__lua_base_budget) - a scan's accumulator is in it -
 * released when the state is closed (the destroy).
 *
 * ctx: a function declaring a second parameter (take_while, flat_map) or a
 * third (scan) gets ctx as the Lua map does (worker.context), with
 * ctx.index = the upstream sample's position in the pass.
 *
 * Threads: flat_map's workers own their worker state (b.w[i]) and write
 * the notes for the items they process; the rest is the consumer's.
 * take_while and scan have no thread: their one worker state is touched by
 * whichever thread pulls the stage (one at a time, as any reader); their
 * stop flag (the deadline hook reads it) is set by the stop signal from any
 * thread.
 */
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include "script/lua_value.h"
#include "sync/budget.h"

#include <lauxlib.h>

/* scan: accumulators kept encoded for saves behind, while each is at most
 * SCAN_HIST_BYTES */
#define SCAN_HIST 64
#define SCAN_HIST_BYTES 4096

/* One output of flat_map: upstream item seq, its output off of n. */
typedef struct flow_out {
  uint64_t seq, off, n;
} flow_out;

typedef struct flow_stage {
  sl__lua_base b; /* first: upstream, the pass, the worker states, ... */
  sl__lua_flow_kind kind;

  /* take_while, scan: the pass of the one worker state, b.w[0] */
  atomic_bool stop;
  uint64_t seq;     /* upstream samples taken this pass */
  bool ended;       /* take_while: the predicate said no */
  sl_sample *first; /* scan: the first output, made by the constructor */
  int first_rc;     /* scan: the constructor's error on the first sample */
  char *first_msg;  /* ... and its message */
  /* scan: the accumulator after j steps, encoded, at j % SCAN_HIST, for j
   * in [hist_from, seq] (hist_ok: none too big or not plain this pass) */
  sl__lua_bytes hist[SCAN_HIST];
  uint64_t hist_from;
  bool hist_ok;

  /* flat_map: the consumer's current item, and what the memory budget
   * counts of it (resident in `acct`: its outputs not handed out yet) */
  sl_sample **cur;
  size_t cur_n, cur_pos;
  uint64_t cur_seq;
  uint64_t kept;
  sl__budget_acct *acct;
  /* flat_map positions: outputs this pass (count), the ring of their
   * origins, the first position the ring knows (known) and where output
   * `known` comes from (rest_u, rest_d) */
  flow_out ring[SL__STATE_LOG];
  uint64_t count, known, rest_u, rest_d;
} flow_stage;

static const char *const WHAT[] = {"flat_map", "take_while", "scan"};

/* --- messages ------------------------------------------------------------- */

/* This thread's message "<label>: <text>" becomes "<label>: sample N:
 * <text>": the position of the upstream sample fn was running on. */
static int at_sample(const flow_stage *st, uint64_t seq, int rc) {
  return sl__lua_base_error_at(&st->b, rc, "sample %llu",
                               (unsigned long long)seq);
}

/* Checks output *s of upstream sample seq against `want` (replacing *s by
 * a sample in want's field order when needed).  SL_OK or the error. */
static int check_out(const flow_stage *st, const sl_schema *want, sl_sample **s,
                     uint64_t seq) {
  return sl__lua_base_check(&st->b, want, s, seq, "output of sample");
}

/* --- flat_map on the engine ----------------------------------------------- */

static int fm_pull(void *ud, sl_sample **out) {
  return sl_reader_next(((flow_stage *)ud)->b.run.up, out);
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
static int fm_fill(flow_stage *st, sl__lua_worker *w, uint64_t seq,
                   sl_sample ***v, size_t *have, size_t m) {
  sl_sample **nv = sl__realloc(*v, m * sizeof *nv);
  if (!nv)
    return sl_set_error(SL_ENOMEM,
                        "%s: sample %llu: cannot allocate %zu outputs",
                        st->b.spec.label, (unsigned long long)seq, m);
  memset(nv + *have, 0, (m - *have) * sizeof *nv);
  *v = nv;
  *have = m;
  lua_State *L = w->L;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.aux);
  sl__lua_push_ptr(L, nv);
  int rc = sl__lua_pcall(L, 1, 0, st->b.spec.what, st->b.spec.where);
  lua_settop(L, top);
  return rc < 0 ? at_sample(st, seq, rc) : SL_OK;
}

static int fm_many(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                   sl_sample ***out, size_t *n) {
  flow_stage *st = ud;
  sl__lua_worker *w = wctx;
  lua_State *L = w->L;
  const sl_schema *want =
      atomic_load_explicit(&st->b.check_schema, memory_order_acquire);
  size_t cap = w->cap;
  sl_sample **v = sl__calloc(cap, sizeof *v);
  if (!v) {
    sl_sample_release(in);
    return sl_set_error(SL_ENOMEM, "%s: sample %llu: cannot allocate",
                        st->b.spec.label, (unsigned long long)seq);
  }
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.op);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.fn);
  sl__lua_push_ptr(L, in); /* this reference now belongs to Lua */
  sl__lua_push_ptr(L, v);
  lua_pushnumber(L, (lua_Number)cap);
  sl__lua_push_ptr_or_nil(L, want);
  int rc = sl__lua_call_op(&st->b, w, seq, 5, 1);
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
  sl__lua_base_note(&st->b, seq, !want);
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

static const sl__engine_ops fm_engine = {fm_pull, sl__lua_base_worker_init,
                                         sl__lua_base_worker_fini, NULL, NULL};

/* Releases the consumer's current item. */
static void fm_drop_cur(flow_stage *st) {
  if (st->cur)
    for (size_t i = st->cur_pos; i < st->cur_n; i++)
      sl_sample_release(st->cur[i]);
  sl__free(st->cur);
  st->cur = NULL;
  st->cur_n = st->cur_pos = 0;
  if (st->kept) sl__budget_resident(st->acct, st->kept, 0);
  st->kept = 0;
}

/* The next item's outputs into cur (checked when made before the schema
 * was known).  SL_OK, SL_EOF or the pass's error. */
static int fm_take(flow_stage *st) {
  sl_sample **v = NULL;
  size_t n = 0;
  uint64_t seq = 0;
  SL_FORWARD_IF_ERROR(sl__engine_next_many(st->b.run.engine, &v, &n, &seq));
  if (sl__lua_base_noted(&st->b, seq)) {
    for (size_t i = 0; i < n; i++) {
      int rc = check_out(st, st->b.schema, &v[i], seq);
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
  /* the item's outputs stay counted until each goes out (its carry, taken
   * with it, would leave the count at the next call) */
  st->acct = sl__engine_budget(st->b.run.engine);
  uint64_t bytes = 0;
  for (size_t i = 0; st->acct && i < n; i++)
    bytes += sl_sample_nbytes(v[i]);
  if (st->acct) sl__budget_keep(st->acct, &st->kept, bytes);
  return SL_OK;
}

static int fm_next(void *state, sl_sample **out) {
  flow_stage *st = state;
  while (st->cur_pos >= st->cur_n) {
    fm_drop_cur(st);
    SL_FORWARD_IF_ERROR(fm_take(st));
  }
  *out = st->cur[st->cur_pos++];
  if (st->kept)
    sl__budget_let_go(st->acct, &st->kept, sl_sample_nbytes(*out), true);
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
  SL_FORWARD_IF_ERROR(sl_reader_next(st->b.run.up, &s));
  uint64_t seq = st->seq++;
  sl__lua_worker *w = &st->b.w[0];
  lua_State *L = w->L;
  int top = lua_gettop(L);
  sl_sample_retain(s); /* ours, yielded if fn says so */
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.op);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.fn);
  sl__lua_push_ptr(L, s); /* the other reference belongs to Lua */
  int rc = sl__lua_call_op(&st->b, w, seq, 2, 1);
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
  sl__lua_worker *w = &st->b.w[0];
  lua_State *L = w->L;
  int top = lua_gettop(L);
  lua_pushlightuserdata(L, (void *)&SCAN_STATE_KEY);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.aux);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.init);
  int rc = sl__lua_pcall(L, 1, 1, st->b.spec.what, st->b.spec.where);
  if (rc == SL_OK) lua_rawset(L, LUA_REGISTRYINDEX);
  lua_settop(L, top);
  return rc < 0 ? at_sample(st, seq, rc) : SL_OK;
}

/* One step of the scan on the next upstream sample: the output, not yet
 * checked, in *out. */
static int scan_step(flow_stage *st, sl_sample **out) {
  sl_sample *s = NULL;
  SL_FORWARD_IF_ERROR(sl_reader_next(st->b.run.up, &s));
  uint64_t seq = st->seq++;
  if (seq == 0) {
    int rc = scan_init(st, seq);
    if (rc < 0) {
      sl_sample_release(s);
      return rc;
    }
  }
  sl__lua_worker *w = &st->b.w[0];
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
  sl__lua_push_ptr_or_nil(L, st->b.schema);
  int rc = sl__lua_call_op(&st->b, w, seq, 5, 1);
  if (rc == SL_OK && st->hist_ok) { /* the new state, encoded */
    sl__lua_bytes *h = &st->hist[(seq + 1) % SCAN_HIST];
    const char *why;
    h->n = 0;
    st->hist_ok =
        sl__lua_value_encode(L, -1, h, &why) && h->n <= SCAN_HIST_BYTES;
  }
  if (rc == SL_OK) lua_rawset(L, LUA_REGISTRYINDEX); /* the new state */
  lua_settop(L, top);
  if (rc < 0) {
    sl_sample_release(o);
    return at_sample(st, seq, rc);
  }
  if (!o)
    return sl_set_error(SL_ELUA, "%s: sample %llu: the function gave no output",
                        st->b.spec.label, (unsigned long long)seq);
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
  int rc = check_out(st, st->b.schema, &o, st->seq - 1);
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

/* --- saving and restoring (stages/state.h) ------------------------------- */

/* flat_map: the payload is (u, d): resume pulling at upstream position u
 * and drop the first d outputs of item u; u = UINT64_MAX: replay the pass
 * from its start (k outputs). */
static int fm_save(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                   sl__state_out *w) {
  flow_stage *st = state;
  if (!st->b.run.ordered)
    return sl_set_error(SL_EUNSUPPORTED,
                        "save: %s (ordered=false): the order of its outputs "
                        "is not reproducible, so its position cannot be "
                        "saved; use ordered=true",
                        st->b.spec.label);
  bool now = pass == sl__reader_pass(r); /* else: replay that pass */
  SL_RETURN_ERROR_IF(
      now && k > st->count, SL_EINVAL,
      "save: %s: position %llu is ahead of %llu", st->b.spec.label,
      (unsigned long long)k, (unsigned long long)st->count);
  uint64_t u = 0, d = 0;
  bool replay = false;
  if (!now) {
    replay = true;
  } else if (k == st->known) {
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
  sl__engine_hold_pulls(st->b.run.engine);
  uint64_t up_pass = sl__state_up_pass(r, st->b.run.up, pass);
  int rc = replay ? sl__state_save_up_replayed(w, st->b.run.up, up_pass, 0)
                  : sl__state_save_up(w, st->b.run.up, up_pass, u);
  sl__engine_release_pulls(st->b.run.engine);
  return rc;
}

static int fm_restore(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                      sl__state_in *in) {
  flow_stage *st = state;
  sl__engine_stop(st->b.run.engine);
  fm_forget(st);
  st->b.run.pass = pass;
  uint64_t u = 0, d = 0;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, st->b.run.up));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &u));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &d));
  if (u == UINT64_MAX) {
    SL_FORWARD_IF_ERROR(sl__engine_stage_start(&st->b.run));
    return sl__state_replay(fm_next, st, k, st->b.spec.label);
  }
  sl__engine_start_at(st->b.run.engine, u);
  SL_FORWARD_IF_ERROR(sl__engine_stage_start(&st->b.run));
  if (d > 0) {
    int rc = fm_take(st);
    if (rc == SL_OK && (st->cur_seq != u || st->cur_n <= d))
      rc = sl_set_error(SL_ECORRUPT,
                        "restore: %s: sample %llu gave %zu outputs, the state "
                        "needs more than %llu (is the function "
                        "deterministic? ctx.rng is)",
                        st->b.spec.label, (unsigned long long)u,
                        st->cur_seq == u ? st->cur_n : (size_t)0,
                        (unsigned long long)d);
    if (rc == SL_EOF)
      rc = sl_set_error(SL_ECORRUPT,
                        "restore: %s: the pass ended before sample %llu",
                        st->b.spec.label, (unsigned long long)u);
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

/* --- the stages ------------------------------------------------------------
 * flat_map is a stage on the engine (engine_stage.h: reset, destroy, stop)
 * with its own next, save and restore; take_while and scan reset, restore
 * and stop their one worker state here. */

static void flow_free(void *state) {
  flow_stage *st = state;
  drop_first(st);
  for (size_t j = 0; j < SCAN_HIST; j++)
    sl__free(st->hist[j].p);
  sl__lua_base_fini(&st->b);
  sl__free(st);
}

static void fm_new_pass(void *state, uint64_t start) {
  fm_forget(state);
}

static const sl__engine_stage_hooks fm_hooks = {.new_pass = fm_new_pass,
                                                .free = flow_free};

/* Not threads nor queue: a state restores into any thread count. */
static void flow_identity(const sl_reader *r, void *state, char *buf,
                          size_t cap) {
  sl__lua_base_identity(state, buf, cap, NULL);
}

/* take_while and scan: forgets the pass (not the count of passes). */
static void sync_new_pass(flow_stage *st) {
  drop_first(st);
  atomic_store(&st->stop, false);
  st->seq = 0;
  st->ended = false;
  st->hist_from = 0;
  st->hist_ok = true;
}

static int sync_reset(void *state) {
  flow_stage *st = state;
  sync_new_pass(st);
  st->b.run.pass++;
  return sl_reader_reset(st->b.run.up);
}

static void sync_destroy(void *state) {
  flow_stage *st = state;
  if (!st) return;
  if (st->b.w && st->b.w[0].L) {
    sl__lua_heap_release(&st->b.w[0].heap, sl__lua_base_acct(&st->b));
    lua_close(st->b.w[0].L);
  }
  sl_reader_destroy(st->b.run.up);
  flow_free(st);
}

static void sync_stop(void *state) {
  atomic_store(&((flow_stage *)state)->stop, true);
}

/* take_while's position is upstream's (1:1 until the stop). */
static int tw_restore(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                      sl__state_in *in) {
  flow_stage *st = state;
  sync_new_pass(st);
  st->b.run.pass = pass;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, st->b.run.up));
  st->seq = k;
  return SL_OK;
}

/* The accumulator after k steps, encoded into *b (false: none to give:
 * not plain, too far behind, or an error pending). */
static bool scan_acc_at(flow_stage *st, uint64_t k, sl__lua_bytes *b) {
  if (k == st->seq && !st->first && st->first_rc == SL_OK) {
    lua_State *L = st->b.w[0].L;
    lua_pushlightuserdata(L, (void *)&SCAN_STATE_KEY);
    lua_rawget(L, LUA_REGISTRYINDEX);
    const char *why;
    bool ok = sl__lua_value_encode(L, -1, b, &why);
    lua_pop(L, 1);
    return ok;
  }
  if (!st->hist_ok || k < st->hist_from || k > st->seq ||
      st->seq - k >= SCAN_HIST)
    return false;
  const sl__lua_bytes *h = &st->hist[k % SCAN_HIST];
  b->p = h->n ? sl__malloc(h->n) : NULL;
  if (!b->p) return false;
  memcpy(b->p, h->p, h->n);
  b->n = b->cap = h->n;
  return true;
}

/* Payload: mode 0, the steps k and the accumulator after them (empty for k
 * = 0: the next step starts from init), the upstream at k; or mode 1 (an
 * accumulator that is not plain, or a save too far behind): the upstream at
 * the start of the pass, which the restore replays. */
static int scan_save(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                     sl__state_out *w) {
  flow_stage *st = state;
  sl_reader *up = st->b.run.up;
  sl__lua_bytes b = {0};
  bool ok = pass == sl__reader_pass(r) && (k == 0 || scan_acc_at(st, k, &b));
  int rc = sl__state_put_u64(w, ok ? 0 : 1);
  if (rc == SL_OK && ok) rc = sl__state_put_u64(w, k);
  if (rc == SL_OK && ok) rc = sl__state_put_u64(w, k ? b.n : 0);
  if (rc == SL_OK && ok && k) rc = sl__state_put_bytes(w, b.p, b.n);
  sl__free(b.p);
  SL_FORWARD_IF_ERROR(rc);
  uint64_t up_pass = sl__state_up_pass(r, up, pass);
  return ok ? sl__state_save_up(w, up, up_pass, k)
            : sl__state_save_up_replayed(w, up, up_pass, 0);
}

static int scan_restore(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  flow_stage *st = state;
  sync_new_pass(st);
  st->b.run.pass = pass;
  uint64_t mode = 1, steps = 0, n = 0;
  const void *acc = NULL;
  if (sl__state_left(in) > 0) SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &mode));
  SL_RETURN_ERROR_IF(mode > 1, SL_ECORRUPT,
                     "restore: corrupt state: %s: mode %llu (0 or 1)",
                     st->b.spec.label, (unsigned long long)mode);
  if (mode == 1) {
    SL_FORWARD_IF_ERROR(sl__state_restore_up(in, st->b.run.up));
    return sl__state_replay(scan_next, st, k, st->b.spec.label);
  }
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &steps));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &n));
  SL_RETURN_ERROR_IF(
      steps != k || (k == 0) != (n == 0) || n > sl__state_left(in), SL_ECORRUPT,
      "restore: corrupt state: %s: an accumulator of %llu "
      "bytes after %llu steps, at position %llu",
      st->b.spec.label, (unsigned long long)n, (unsigned long long)steps,
      (unsigned long long)k);
  SL_FORWARD_IF_ERROR(sl__state_get_bytes(in, &acc, (size_t)n));
  if (k > 0) {
    lua_State *L = st->b.w[0].L;
    int top = lua_gettop(L);
    lua_pushlightuserdata(L, (void *)&SCAN_STATE_KEY);
    if (!sl__lua_value_decode(L, acc, (size_t)n)) {
      lua_settop(L, top);
      return sl_set_error(SL_ECORRUPT,
                          "restore: corrupt state: %s: its accumulator (%llu "
                          "bytes) is not a plain Lua value's encoding",
                          st->b.spec.label, (unsigned long long)n);
    }
    lua_rawset(L, LUA_REGISTRYINDEX);
    lua_settop(L, top);
    sl__lua_bytes *h = &st->hist[k % SCAN_HIST]; /* for saves behind k */
    unsigned char *p = n <= SCAN_HIST_BYTES ? sl__realloc(h->p, n) : NULL;
    h->n = 0;
    if (p) {
      memcpy(p, acc, n);
      h->p = p;
      h->n = h->cap = n;
    }
    st->hist_ok = p != NULL;
  }
  SL_FORWARD_IF_ERROR(sl__state_restore_up_at(in, st->b.run.up, k));
  st->seq = k;
  st->hist_from = k;
  return SL_OK;
}

/* By sl__lua_flow_kind.  flat_map's and take_while's lengths are not
 * known; a scan yields one output per sample. */
static const sl__stage_ops flow_ops[] = {
    {.name = "flat_map",
     .next = fm_next,
     .reset = sl__engine_stage_reset,
     .destroy = sl__engine_stage_destroy,
     .save = fm_save,
     .restore = fm_restore,
     .identity = flow_identity,
     .stop = sl__engine_stage_stop,
     .budget = sl__engine_stage_budget},
    {.name = "take_while",
     .next = tw_next,
     .reset = sync_reset,
     .destroy = sync_destroy,
     .save = sl__state_save_1to1,
     .restore = tw_restore,
     .identity = flow_identity,
     .stop = sync_stop,
     .budget = sl__lua_base_budget},
    {.name = "scan",
     .next = scan_next,
     .reset = sync_reset,
     .destroy = sync_destroy,
     .length = sl__length_of_upstream,
     .save = scan_save,
     .restore = scan_restore,
     .identity = flow_identity,
     .stop = sync_stop,
     .budget = sl__lua_base_budget},
};

/* --- construction --------------------------------------------------------- */

/* The stage schema from the first output (flat_map and scan without
 * `schema`); upstream's when there is none (an empty pass, or an error,
 * which is then delivered at its place). */
static int learn_schema(flow_stage *st) {
  if (!st->b.run.engine) {
    sl_sample *o = NULL;
    int got = scan_step(st, &o);
    if (got == SL_OK) {
      st->first = o;
    } else if (got != SL_EOF) {
      st->first_rc = got;
      st->first_msg = sl__error_dup();
    }
  }
  return sl__lua_base_learn_schema(&st->b, sl_reader_schema(st->b.run.up),
                                   st->first);
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
  flow_stage *st = NULL;
  SL_FORWARD_IF_ERROR(
      sl__lua_base_new(sizeof *st, up, out, what, bad, fn, opts, (void **)&st));
  atomic_init(&st->stop, false);
  st->kind = kind;
  bool fm = kind == SL__LUA_FLAT_MAP;
  size_t window = sl__lua_stage_window(opts);
  sl__engine_stage_cfg cfg = {.hooks = &fm_hooks,
                              .ops = &fm_engine,
                              .opts = {NULL, "sl-lua-flatmap", opts->threads,
                                       opts->ordered != 0, window}};
  int rc = sl__lua_base_init(&st->b, up, what,
                             fm                     ? "flat_map_fill"
                             : kind == SL__LUA_SCAN ? "scan_init"
                                                    : NULL,
                             fn, init, env, opts, fm ? &cfg : NULL);
  if (rc == SL_OK && fm) sl__engine_process_many(st->b.run.engine, fm_many);
  if (rc == SL_OK && (schema || kind == SL__LUA_TAKE_WHILE))
    sl__lua_base_fix_schema(&st->b, schema);
  if (rc == SL_OK)
    rc = fm ? sl__engine_stage_start(&st->b.run)
            : sl__lua_stage_worker(&st->b.spec, 0, &st->stop, &st->b.w[0].ref,
                                   &st->b.w[0].L);
  if (rc == SL_OK && !fm) sl__lua_heap_start(st->b.w[0].L, &st->b.w[0].heap);
  if (rc == SL_OK && !st->b.schema) rc = learn_schema(st);
  if (rc < 0) {
    flow_ops[kind].destroy(st);
    return rc;
  }
  return sl__stage_wrap(&flow_ops[kind], st, st->b.schema, &st->b.run.up,
                        fm ? sl__engine_counters(st->b.run.engine) : NULL, out);
}
