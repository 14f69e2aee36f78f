/*
 * lua_stage.c - sl__lua_stage: a Lua `map`, `filter` or text `parser` run
 * by N worker threads, each with its own worker Lua state (lua_host.h), on
 * the parallel-stage engine (sync/engine.c: the window, the pull turn, the
 * hand-off, ordering, errors at their place, shutdown).  What is Lua's is
 * here:
 *
 *   worker_init  Each worker thread makes its lua_State at its first start
 *             (sl__lua_stage_worker, lua_common.c, shared with lua_flow.c:
 *             sl__lua_worker_setup: `sluice.worker` unless the host put it
 *             in the registry, the function rebuilt by sl__lua_unship, both
 *             kept as registry references) and, with a deadline, the hook
 *             that ends a call past it or once the engine stops
 *             (sl__engine_stop_flag; lua_deadline.c).  The state lives
 *             across resets and is closed by worker_fini (destroy).  A state
 *             that cannot be made ends the pass with that error at its
 *             place; the next reset tries again.
 *   process   map:    worker.map(fn, sample, slot)  -> *slot
 *             filter: worker.filter(fn, sample)     -> keep?
 *             parser: worker.parser(fn, ptr, len, slot, schema) -> keep?
 *             under sl__lua_pcall; an error (SL_ELUA, message and traceback)
 *             ends the pass at that sample, or, with ignore_errors (map and
 *             filter), is SL__ENGINE_SKIP with the message as its note:
 *             stage_skipped counts it on the consumer's thread in delivery
 *             order and ends the pass past the cap (sl__ignore_error), so
 *             the same samples are left out for any thread count; such a
 *             map is logged as a filter (no length, SL__EPOS_LOG).
 *             A map (parser) output is checked against the stage schema on
 *             the worker as soon as that is known (check_schema, published
 *             once with release order).
 *             A function declaring a second parameter (asked once per state:
 *             worker.context) is called through worker.<op>_ctx with the
 *             sample's sequence number (ctx.index) and the epoch (opts'
 *             epoch + the resets) after those arguments; ctx.seed is set once.
 *   unchecked Outputs made before the schema was known (the first ones of a
 *             map without `schema`) are noted in `pend` (by sample address,
 *             with their sequence number and, for a parser, the line's file
 *             and number) and checked by the consumer when it takes them:
 *             the check may replace the sample (fields in another order are
 *             rebuilt in the stage's order), which the engine's const
 *             ops.check could not.
 *   schema    Given, upstream's (filter), or the first output's (map,
 *             parser): the constructor starts the engine and peeks at
 *             result 0 (sl__engine_peek), infers the schema from it with
 *             the variable dimensions upstream declared for the same fields
 *             kept (sl__lua_infer_schema), and publishes it; if result 0 is
 *             an error or EOF, upstream's schema is used and the error / EOF
 *             is delivered normally.
 *   parser    A map over text lines whose function may skip a line
 *             (SL__ENGINE_DROP) and whose messages name the file and line.
 *             The puller numbers the lines as it pulls them (the pull turn
 *             is sequential, and the k-th item pulled in a pass is item k):
 *             line[k % window] holds item k's number, which stays put until
 *             item k has been consumed (the window bounds what is in
 *             flight).  A new file is a new schema address (the text reader
 *             makes one per file, its "sluice.path" naming it).  A parser is
 *             always ordered.
 *
 * Threads: pull (the puller's: line_file, line_no, pulled, line[]) and
 * process (worker w's: w->L, refs, slot) run on the engine's workers; the
 * rest is the consumer's.  `pend` is guarded by pend_mu (npend is read
 * without it by the consumer's fast path: an entry is added before its
 * result is deposited, under the engine's lock, so a consumer that takes
 * the result sees it).
 */
#include "stages/state.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"
#include "sync/engine.h"

#include <lauxlib.h>
#include <pthread.h>

typedef struct lua_worker {
  lua_State *L;            /* NULL until its worker_init succeeds */
  sl__lua_worker_refs ref; /* fn; worker.<op> or, with ctx, its ctx variant */
  sl_sample *slot;         /* map's output slot handed to Lua */
} lua_worker;

/* An output made before the stage schema was known, checked when taken. */
typedef struct unchecked {
  const sl_sample *s; /* its address (the sample is in the engine) */
  uint64_t seq;
  sl_schema *file; /* parser: the line's schema (retained), else NULL */
  uint64_t line;
} unchecked;

typedef struct lua_stage {
  /* immutable once built */
  sl__lua_kind kind;
  const char *what;  /* "map" / "filter" / "parser" */
  const char *where; /* the function's source:line */
  char *label;       /* "<what> (<where>)": the engine's stage name */
  sl__shipped *fn;
  sl__lua_env *env;
  double deadline;       /* seconds per call, 0 = none (lua_deadline.c) */
  uint64_t seed, epoch0; /* ctx.seed; ctx.epoch = epoch0 + pass */
  uint64_t pass;         /* resets since construction (consumer's; read by
                            the workers, which run only between a start and
                            a stop) */
  sl_schema *schema;     /* the stage schema (retained), NULL until known */
  _Atomic(const sl_schema *) check_schema;
  sl_reader *up;
  sl__engine *engine;
  lua_worker *w; /* one per engine worker */
  size_t window;

  /* parser, the puller's: the file being pulled (its schema's address), the
   * last line number given, items pulled this pass, their line numbers */
  const sl_schema *line_file;
  uint64_t line_no, pulled;
  uint64_t *line; /* window entries */

  sl__engine_pos pos; /* what a save needs (readers/state.h) */
  bool ordered;
  uint64_t ignore_cap; /* ignore_errors: 0 off, SL_IGNORE_ALL no cap */
  uint64_t ignored;    /* consumer: samples skipped this pass */

  pthread_mutex_t pend_mu;
  unchecked *pend;
  size_t pend_cap;
  atomic_size_t npend;
} lua_stage;

/* --- checking outputs ----------------------------------------------------- */

/* Checks output *s (sequence `seq`) against the stage schema `want`: the
 * same field names (another order is accepted: *s is then replaced by a
 * sample in want's order), and every tensor fits its field. */
static int check_output(const lua_stage *st, const sl_schema *want,
                        sl_sample **s, uint64_t seq) {
  const sl__lua_check_words words = {.what = st->what,
                                     .where = st->where,
                                     .item = "sample",
                                     .fields = "output fields",
                                     .whose = "the stage's",
                                     .require_filled = true};
  return sl__lua_check_sample(want, s, seq, &words);
}

/* A parser's error: this thread's message ("parser (<where>): <text>")
 * with the file (`file`'s sluice.path) and line inserted after the
 * prefix. */
static int parse_error(const lua_stage *st, const sl_schema *file,
                       uint64_t line, int rc) {
  const char *path = sl_schema_meta(file, "sluice.path");
  char *msg = sl__error_dup();
  const char *text = msg ? msg : sl_strerror(rc);
  size_t np = strlen(st->label) + 2; /* "what (where): " */
  if (msg && strlen(msg) >= np && strncmp(msg, st->label, np - 2) == 0)
    text = msg + np;
  rc = sl_set_error(rc, "%s: %s:%llu: %s", st->label, path ? path : "?",
                    (unsigned long long)line, text);
  sl__free(msg);
  return rc;
}

/* Notes output o as unchecked (the schema was not known when it was made). */
static int note_unchecked(lua_stage *st, const sl_sample *o, uint64_t seq,
                          const sl_schema *file, uint64_t line) {
  pthread_mutex_lock(&st->pend_mu);
  size_t n = atomic_load_explicit(&st->npend, memory_order_relaxed);
  if (n == st->pend_cap) {
    size_t cap = st->pend_cap ? 2 * st->pend_cap : 16;
    unchecked *p = sl__realloc(st->pend, cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&st->pend_mu);
      return sl_set_error(SL_ENOMEM, "%s: sample %llu: cannot allocate",
                          st->label, (unsigned long long)seq);
    }
    st->pend = p;
    st->pend_cap = cap;
  }
  st->pend[n] = (unchecked){o, seq, sl_schema_retain((sl_schema *)file), line};
  atomic_store_explicit(&st->npend, n + 1, memory_order_relaxed);
  pthread_mutex_unlock(&st->pend_mu);
  return SL_OK;
}

/* Forgets every unchecked note.  No worker may run. */
static void drop_unchecked(lua_stage *st) {
  size_t n = atomic_load_explicit(&st->npend, memory_order_relaxed);
  for (size_t i = 0; i < n; i++)
    sl_schema_release(st->pend[i].file);
  atomic_store_explicit(&st->npend, 0, memory_order_relaxed);
}

/* Checks map (or parser) output o against the stage schema when it is
 * known, else notes it; stores it in *out.  A parser passes the line's
 * schema `file` and number, which its messages name. */
static int finish_output(lua_stage *st, sl_sample *o, uint64_t seq,
                         const sl_schema *file, uint64_t line,
                         sl_sample **out) {
  const sl_schema *want =
      atomic_load_explicit(&st->check_schema, memory_order_acquire);
  /* The schema may have become known while fn ran: an empty array made
   * without it takes the stage's dtype (sl__lua_retype_empty). */
  int rc = want ? sl__lua_retype_empty(want, &o)
                : note_unchecked(st, o, seq, file, line);
  if (want && rc >= 0) rc = check_output(st, want, &o, seq);
  if (rc < 0) {
    if (want && file) parse_error(st, file, line, rc);
    sl_sample_release(o);
    return rc;
  }
  *out = o;
  return SL__ENGINE_OUT;
}

/* --- the engine's callbacks ----------------------------------------------- */

static int stage_pull(void *ud, sl_sample **out) {
  lua_stage *st = ud;
  int rc = sl_reader_next(st->up, out);
  if (rc == SL_OK && st->kind == SL__LUA_PARSE) {
    /* Every line is a sample and each file has its own schema object. */
    const sl_schema *f = sl_sample_schema(*out);
    if (f != st->line_file) {
      st->line_file = f;
      st->line_no = 0;
    }
    st->line[st->pulled++ % st->window] = ++st->line_no;
  }
  return rc;
}

static int stage_worker_init(void *ud, int index, void **wctx) {
  lua_stage *st = ud;
  lua_worker *w = &st->w[index];
  if (!w->L) {
    const sl__lua_stage_worker_spec spec = {.env = st->env,
                                            .fn = st->fn,
                                            .what = st->what,
                                            .where = st->where,
                                            .label = st->label,
                                            .op = st->what,
                                            .deadline = st->deadline,
                                            .seed = st->seed};
    SL_FORWARD_IF_ERROR(sl__lua_stage_worker(
        &spec, index, sl__engine_stop_flag(st->engine), &w->ref, &w->L));
  }
  *wctx = w;
  return SL_OK;
}

static void stage_worker_fini(void *ud, int index, void *wctx) {
  lua_worker *w = wctx;
  (void)ud;
  (void)index;
  if (w->L) lua_close(w->L);
  w->L = NULL;
}

/* ctx's index and epoch, after the operation's arguments. */
static void push_ctx(const lua_stage *st, lua_State *L, uint64_t seq) {
  lua_pushnumber(L, (lua_Number)seq);
  lua_pushnumber(L, (lua_Number)(st->epoch0 + st->pass));
}

/* The parser on one line (sample s, released here):
 * worker.parser(fn, line_ptr, line_len, slot, schema). */
static int run_parse(lua_stage *st, lua_worker *w, uint64_t seq, sl_sample *s,
                     sl_sample **out) {
  lua_State *L = w->L;
  int top = lua_gettop(L);
  uint64_t line = st->line[seq % st->window];
  int fi = sl_sample_index(s, "line");
  const sl_tensor *t = fi >= 0 ? sl_sample_at_const(s, fi) : NULL;
  if (!t || sl_tensor_dtype(t) != SL_BYTES) {
    int rc = sl_set_error(SL_EINVAL, "%s: sample %llu has no 'line' field",
                          st->label, (unsigned long long)seq);
    sl_sample_release(s);
    return rc;
  }
  const sl_schema *want =
      atomic_load_explicit(&st->check_schema, memory_order_acquire);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.op);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.fn);
  sl__lua_push_ptr(L, t->data);
  lua_pushnumber(L, (lua_Number)t->nbytes);
  w->slot = NULL;
  sl__lua_push_ptr(L, &w->slot);
  if (want)
    sl__lua_push_ptr(L, want);
  else
    lua_pushnil(L);
  if (w->ref.ctx) push_ctx(st, L, seq);
  int rc = sl__lua_pcall(L, w->ref.ctx ? 7 : 5, 1, st->what, st->where);
  bool keep = rc == SL_OK && lua_toboolean(L, -1);
  lua_settop(L, top);
  sl_sample *o = w->slot;
  w->slot = NULL;
  if (rc < 0) {
    if (sl_last_error_code() != rc || !sl_last_error()[0])
      sl_set_error(rc, "%s: %s", st->label, sl_strerror(rc));
    rc = parse_error(st, sl_sample_schema(s), line, rc);
    sl_sample_release(o);
    sl_sample_release(s);
    return rc;
  }
  if (!keep || !o) {
    sl_sample_release(o);
    sl_sample_release(s);
    return SL__ENGINE_DROP;
  }
  rc = finish_output(st, o, seq, sl_sample_schema(s), line, out);
  sl_sample_release(s);
  return rc;
}

/* Runs the function on one sample (handed over). */
static int stage_process(void *ud, void *wctx, uint64_t seq, sl_sample *s,
                         sl_sample **out) {
  lua_stage *st = ud;
  lua_worker *w = wctx;
  if (st->kind == SL__LUA_PARSE) return run_parse(st, w, seq, s, out);
  if (sl__engine_pos_skip(&st->pos, seq)) { /* delivered before a restore */
    sl_sample_release(s);
    return SL__ENGINE_DROP;
  }
  lua_State *L = w->L;
  int top = lua_gettop(L);
  bool map = st->kind == SL__LUA_MAP;
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.op);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.fn);
  sl__lua_push_ptr(L, s); /* this reference now belongs to Lua */
  int rc;
  if (map) {
    w->slot = NULL;
    sl__lua_push_ptr(L, &w->slot);
    if (w->ref.ctx) push_ctx(st, L, seq);
    rc = sl__lua_pcall(L, w->ref.ctx ? 5 : 3, 0, st->what, st->where);
  } else {
    sl_sample_retain(s); /* ours, kept if the filter says so */
    if (w->ref.ctx) push_ctx(st, L, seq);
    rc = sl__lua_pcall(L, w->ref.ctx ? 4 : 2, 1, st->what, st->where);
  }
  if (rc < 0) {
    if (map) {
      sl_sample_release(w->slot);
      w->slot = NULL;
    } else {
      sl_sample_release(s);
    }
    lua_settop(L, top);
    if (sl_last_error_code() != rc || !sl_last_error()[0])
      sl_set_error(rc, "%s: %s", st->label, sl_strerror(rc));
    /* ignore_errors: fn's own error (not a stop) leaves the sample out;
     * the message is the note (stage_skipped). */
    if (st->ignore_cap && rc == SL_ELUA &&
        !atomic_load_explicit(sl__engine_stop_flag(st->engine),
                              memory_order_relaxed))
      return SL__ENGINE_SKIP;
    return rc;
  }
  if (!map) {
    bool keep = lua_toboolean(L, -1);
    lua_settop(L, top);
    if (keep) {
      *out = s;
      return SL__ENGINE_OUT;
    }
    sl_sample_release(s);
    if (!st->ordered) sl__engine_pos_dropped(&st->pos, seq);
    return SL__ENGINE_DROP;
  }
  lua_settop(L, top);
  sl_sample *o = w->slot;
  w->slot = NULL;
  if (!o)
    return sl_set_error(SL_ELUA,
                        "%s: sample %llu: the function returned no sample",
                        st->label, (unsigned long long)seq);
  return finish_output(st, o, seq, NULL, 0, out);
}

static const sl__engine_ops lua_ops = {stage_pull, stage_worker_init,
                                       stage_worker_fini, stage_process, NULL};

/* A sample whose call failed under ignore_errors, on the consumer's thread
 * in delivery order: counted (per pass and in the stats row), and past the
 * cap the end of the pass (sl__ignore_error). */
static int stage_skipped(void *ud, uint64_t seq, const char *note) {
  lua_stage *st = ud;
  if (!st->ordered) sl__engine_pos_dropped(&st->pos, seq);
  return sl__ignore_error(sl__engine_counters(st->engine), &st->ignored,
                          st->ignore_cap, SL_ELUA, st->label, "samples failed",
                          "ignore_errors", note);
}

/* --- the reader ----------------------------------------------------------- */

/* Stop signal (readers/reader_impl.h): also interrupts a running call when
 * the stage has a deadline (its hook reads the engine's stop flag). */
static void stage_signal_stop(void *state) {
  sl__engine_signal_stop(((lua_stage *)state)->engine);
}

static int stage_next(void *state, sl_sample **out) {
  lua_stage *st = state;
  int rc = sl__engine_next(st->engine, out);
  if (rc == SL_OK)
    sl__engine_pos_delivered(&st->pos, sl__engine_last_seq(st->engine));
  if (rc != SL_OK ||
      atomic_load_explicit(&st->npend, memory_order_relaxed) == 0)
    return rc;
  /* One of the first outputs, perhaps made before the schema was known. */
  unchecked u = {NULL, 0, NULL, 0};
  pthread_mutex_lock(&st->pend_mu);
  size_t n = atomic_load_explicit(&st->npend, memory_order_relaxed);
  for (size_t i = 0; i < n; i++) {
    if (st->pend[i].s != *out) continue;
    u = st->pend[i];
    st->pend[i] = st->pend[n - 1];
    atomic_store_explicit(&st->npend, n - 1, memory_order_relaxed);
    break;
  }
  pthread_mutex_unlock(&st->pend_mu);
  if (!u.s) return SL_OK;
  rc = sl__lua_retype_empty(st->schema, out);
  if (rc >= 0) rc = check_output(st, st->schema, out, u.seq);
  if (rc < 0) {
    if (u.file) rc = parse_error(st, u.file, u.line, rc);
    sl_sample_release(*out);
    *out = NULL;
  }
  sl_schema_release(u.file);
  return rc;
}

/* Stops the workers and forgets the pass. */
static void stop_pass(lua_stage *st) {
  sl__engine_stop(st->engine);
  drop_unchecked(st);
  st->line_file = NULL;
  st->line_no = st->pulled = 0;
}

static int stage_reset(void *state) {
  lua_stage *st = state;
  stop_pass(st);
  sl__engine_pos_reset(&st->pos);
  st->ignored = 0;
  st->pass++; /* counts even if the reset fails, as shuffle's passes */
  SL_FORWARD_IF_ERROR(sl_reader_reset(st->up));
  return sl__engine_start(st->engine);
}

static void stage_destroy(void *state) {
  lua_stage *st = state;
  if (!st) return;
  if (st->engine) stop_pass(st);
  sl__engine_destroy(st->engine); /* closes the worker states */
  drop_unchecked(st);
  sl__free(st->pend);
  pthread_mutex_destroy(&st->pend_mu);
  sl__engine_pos_fini(&st->pos);
  sl__free(st->w);
  sl__free(st->line);
  sl__free(st->label);
  sl_reader_destroy(st->up);
  sl_schema_release(st->schema);
  sl__shipped_release(st->fn);
  sl__lua_env_release(st->env);
  sl__free(st);
}

static const sl_reader_vtable map_vt = {"map", stage_next, stage_reset,
                                        stage_destroy};
static const sl_reader_vtable filter_vt = {"filter", stage_next, stage_reset,
                                           stage_destroy};
static const sl_reader_vtable parse_vt = {"parser", stage_next, stage_reset,
                                          stage_destroy};

/* --- saving and restoring (readers/state.h) --------------------------------
 * The engine's position (sl__engine_pos: ordered map 1:1, ordered filter and
 * parser a log of delivered seqs, unordered the set of seqs done), and
 * nothing else: ctx.index is the item's seq and ctx.epoch the restored
 * pass, so a function using ctx.rng draws what the uninterrupted run drew.
 * The worker states live on (their globals are not saved). */

static int stage_save(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                      sl__state_out *w) {
  (void)r;
  (void)pass;
  lua_stage *st = state;
  return sl__engine_pos_save(&st->pos, st->engine, st->up, k, w);
}

static int stage_restore(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                         sl__state_in *in) {
  (void)r;
  lua_stage *st = state;
  stop_pass(st);
  st->pass = pass;
  st->ignored = 0; /* errors before the restored position are not counted */
  uint64_t start = 0;
  SL_FORWARD_IF_ERROR(sl__engine_pos_restore(&st->pos, st->up, k, in, &start));
  st->pulled = start; /* the parser's line[] is indexed by seq */
  return sl__engine_pos_resume(&st->pos, st->engine, k, stage_next, st);
}

/* Not threads nor queue: a state restores into any thread count. */
static void stage_identity(const sl_reader *r, void *state, char *buf,
                           size_t cap) {
  (void)r;
  const lua_stage *st = state;
  /* ignore_errors is named only when on: older states still match. */
  sl__lua_stage_identity(buf, cap, st->what, st->where, st->ordered, st->seed,
                         st->epoch0, st->schema,
                         st->ignore_cap ? " ignore_errors" : NULL);
}

static const sl__state_ops stage_state_ops = {stage_save, stage_restore,
                                              stage_identity};

/* The stage schema from result 0 (map and parser without `schema`). */
static int learn_schema(lua_stage *st) {
  const sl_sample *first = NULL;
  if (sl__engine_peek(st->engine, &first) != SL_OK) first = NULL;
  /* A map keeps the variable dimensions upstream declared (a parser's rows
   * are inferred with variable lengths already). */
  return sl__lua_stage_learn_schema(
      st->kind == SL__LUA_MAP ? sl_reader_schema(st->up) : NULL, st->up, first,
      st->label, &st->schema, &st->check_schema);
}

int sl__lua_stage(sl_reader *up, sl__lua_kind kind, sl__shipped *fn,
                  sl__lua_env *env, const sl__lua_stage_opts *opts,
                  sl_schema *schema, sl_reader **out) {
  const char *what = kind == SL__LUA_FILTER  ? "filter"
                     : kind == SL__LUA_PARSE ? "parser"
                                             : "map";
  SL_FORWARD_IF_ERROR(sl__lua_stage_check_args(
      up, out, what,
      !fn     ? "NULL function"
      : !env  ? "NULL environment"
      : !opts ? "NULL options"
      : kind != SL__LUA_MAP && kind != SL__LUA_FILTER && kind != SL__LUA_PARSE
          ? "unknown kind"
          : NULL,
      fn, opts));
  lua_stage *st = sl__calloc(1, sizeof *st);
  if (!st)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "%s: cannot allocate", what));
  pthread_mutex_init(&st->pend_mu, NULL);
  st->ordered = kind == SL__LUA_PARSE || opts->ordered != 0;
  st->ignore_cap = kind == SL__LUA_PARSE ? 0 : opts->ignore_errors;
  /* A map that may leave samples out is logged as a filter. */
  sl__engine_pos_init(&st->pos,
                      !st->ordered ? SL__EPOS_UNORDERED
                      : kind == SL__LUA_MAP && !st->ignore_cap ? SL__EPOS_1TO1
                                                               : SL__EPOS_LOG,
                      what);
  atomic_init(&st->check_schema, NULL);
  atomic_init(&st->npend, 0);
  st->up = up;
  st->kind = kind;
  st->what = what;
  st->fn = sl__shipped_retain(fn);
  st->env = sl__lua_env_retain(env);
  st->where = sl__shipped_where(fn);
  st->deadline = opts->deadline;
  st->seed = opts->seed;
  st->epoch0 = opts->epoch;
  st->label = sl__lua_stage_label(what, st->where);
  if (!st->label) {
    stage_destroy(st);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate", what);
  }
  st->pos.what = st->label;
  /* The engine checks the thread count (the one place) and the window.
   * The window is set here so that the parser's line numbers fit it. */
  st->window = sl__lua_stage_window(opts);
  const sl__engine_opts eo = {st->label, "sl-lua-map", opts->threads,
                              st->ordered, st->window};
  int rc = sl__engine_create(&lua_ops, st, &eo, &st->engine);
  if (rc < 0) {
    stage_destroy(st);
    return rc;
  }
  if (st->ignore_cap) sl__engine_on_skip(st->engine, stage_skipped);
  st->w = sl__calloc((size_t)opts->threads, sizeof *st->w);
  if (kind == SL__LUA_PARSE)
    st->line = sl__calloc(st->window, sizeof *st->line);
  if (!st->w || (kind == SL__LUA_PARSE && !st->line)) {
    stage_destroy(st);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate %d workers", st->label,
                        opts->threads);
  }

  /* The schema: given, upstream's (filter), or the first output's (map). */
  if (schema || kind == SL__LUA_FILTER)
    sl__lua_stage_fix_schema(schema, up, &st->schema, &st->check_schema);
  rc = sl__engine_start(st->engine);
  if (rc == SL_OK && !st->schema) rc = learn_schema(st);
  if (rc < 0) {
    stage_destroy(st);
    return rc;
  }
  const sl__stage_counters *c = sl__engine_counters(st->engine);
  /* A map yields one sample per sample (it cannot drop one): its length is
   * upstream's; a filter's or a parser's (skipped lines) is not known. */
  if (kind == SL__LUA_FILTER)
    rc = sl__decorator_make(&filter_vt, st, st->schema, &st->up, c, out);
  else if (kind == SL__LUA_PARSE)
    rc = sl__decorator_make(&parse_vt, st, st->schema, &st->up, c, out);
  else if (st->ignore_cap) /* may leave samples out: no length */
    rc = sl__decorator_make(&map_vt, st, st->schema, &st->up, c, out);
  else
    rc = sl__decorator_make_1to1(&map_vt, st, st->schema, &st->up, c, out);
  if (rc == SL_OK) {
    sl__reader_set_state_ops(*out, &stage_state_ops);
    sl__reader_set_stop_signal(*out, stage_signal_stop);
  }
  return rc;
}
