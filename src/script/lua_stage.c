/*
 * lua_stage.c - sl__lua_stage: a Lua `map`, `filter` or text `parser` run
 * by N worker threads, each with its own worker Lua state (lua_host.h), on
 * the parallel-stage engine (sync/engine.c: the window, the pull turn, the
 * hand-off, ordering, errors at their place, shutdown).  What is Lua's is
 * here:
 *
 *   worker_init  Each worker thread makes its lua_State at its first start
 *             (sl__lua_base_worker_init, lua_common.c, as flat_map's:
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
 *             engine_stage.c counts it on the consumer's thread in delivery
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
 *             map without `schema`) are flagged by item (sl__lua_base's
 *             notes; a parser also keeps the line's file and number
 *             in at[]) and checked by the consumer when it takes them: the
 *             check may replace the sample (fields in another order are
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
 * process (worker w's: w->L, refs, slot; the item's note, and at[] under note_mu
 * entries, written before its result is deposited under the engine's
 * lock) run on the engine's workers; the rest is the consumer's.
 */
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>

/* Where a parser's unchecked output came from, for its messages. */
typedef struct line_at {
  sl_schema *file; /* the line's schema (retained), NULL once checked */
  uint64_t line;
} line_at;

typedef struct lua_stage {
  sl__lua_base b; /* first: the engine, the worker states, the schema */
  sl__lua_kind kind;
  size_t window;

  /* parser, the puller's: the file being pulled (its schema's address), the
   * last line number given, items pulled this pass, their line numbers */
  const sl_schema *line_file;
  uint64_t line_no, pulled;
  uint64_t *line; /* window entries */
  line_at *at;    /* parser: b.nnotes entries, by seq % b.nnotes, under b.note_mu */
} lua_stage;

/* --- checking outputs ----------------------------------------------------- */

/* A parser's error: this thread's message ("parser (<where>): <text>")
 * with the file (`file`'s sluice.path) and line inserted after the
 * prefix. */
static int parse_error(const lua_stage *st, const sl_schema *file,
                       uint64_t line, int rc) {
  const char *path = sl_schema_meta(file, "sluice.path");
  return sl__lua_base_error_at(&st->b, rc, "%s:%llu", path ? path : "?",
                               (unsigned long long)line);
}

/* Checks map (or parser) output o against the stage schema when it is
 * known, else notes it; stores it in *out.  A parser passes the line's
 * schema `file` and number, which its messages name. */
static int finish_output(lua_stage *st, sl_sample *o, uint64_t seq,
                         const sl_schema *file, uint64_t line,
                         sl_sample **out) {
  const sl_schema *want =
      atomic_load_explicit(&st->b.check_schema, memory_order_acquire);
  size_t i = seq % st->b.nnotes;
  if (st->at) { /* a parser: the line, for the consumer's messages */
    pthread_mutex_lock(&st->b.note_mu);
    sl_schema_release(st->at[i].file);
    st->at[i] =
        (line_at){want ? NULL : sl_schema_retain((sl_schema *)file), line};
    pthread_mutex_unlock(&st->b.note_mu);
  }
  sl__lua_base_note(&st->b, seq, !want);
  /* The schema may have become known while fn ran: an empty array made
   * without it takes the stage's dtype (sl__lua_retype_empty). */
  int rc = want ? sl__lua_base_check(&st->b, want, &o, seq, "sample") : SL_OK;
  if (rc < 0) {
    if (want && file) parse_error(st, file, line, rc);
    sl_sample_release(o);
    return rc;
  }
  if (want) /* checked: a row of the batch above, when fused */
    return sl__engine_stage_out(&st->b.run, seq, o, out);
  *out = o;
  return SL__ENGINE_OUT;
}

/* --- the engine's callbacks ----------------------------------------------- */

static int stage_pull(void *ud, sl_sample **out) {
  lua_stage *st = ud;
  int rc = sl_reader_next(st->b.run.up, out);
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

/* The parser on one line (sample s, released here):
 * worker.parser(fn, line_ptr, line_len, slot, schema). */
static int run_parse(lua_stage *st, sl__lua_worker *w, uint64_t seq,
                     sl_sample *s, sl_sample **out) {
  lua_State *L = w->L;
  int top = lua_gettop(L);
  uint64_t line = st->line[seq % st->window];
  int fi = sl_sample_index(s, "line");
  const sl_tensor *t = fi >= 0 ? sl_sample_at_const(s, fi) : NULL;
  if (!t || sl_tensor_dtype(t) != SL_BYTES) {
    int rc = sl_set_error(SL_EINVAL, "%s: sample %llu has no 'line' field",
                          st->b.spec.label, (unsigned long long)seq);
    sl_sample_release(s);
    return rc;
  }
  const sl_schema *want =
      atomic_load_explicit(&st->b.check_schema, memory_order_acquire);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.op);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref.fn);
  sl__lua_push_ptr(L, t->data);
  lua_pushnumber(L, (lua_Number)t->nbytes);
  w->slot = NULL;
  sl__lua_push_ptr(L, &w->slot);
  sl__lua_push_ptr_or_nil(L, want);
  int rc = sl__lua_call_op(&st->b, w, seq, 5, 1);
  bool keep = rc == SL_OK && lua_toboolean(L, -1);
  lua_settop(L, top);
  sl_sample *o = w->slot;
  w->slot = NULL;
  if (rc < 0) {
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
  sl__lua_worker *w = wctx;
  if (st->kind == SL__LUA_PARSE) return run_parse(st, w, seq, s, out);
  if (sl__engine_stage_done(&st->b.run, seq)) { /* delivered before a restore */
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
    /* fused with the batch above: sluice.tensor may get the output's row */
    sl__rows *rows = atomic_load_explicit(&st->b.run.rows, memory_order_acquire);
    if (rows) sl__rows_grant_begin(rows, seq);
    w->slot = NULL;
    sl__lua_push_ptr(L, &w->slot);
    rc = sl__lua_call_op(&st->b, w, seq, 3, 0);
    if (rows) sl__rows_grant_end();
  } else {
    sl_sample_retain(s); /* ours, kept if the filter says so */
    rc = sl__lua_call_op(&st->b, w, seq, 2, 1);
  }
  if (rc < 0) {
    if (map) {
      sl_sample_release(w->slot);
      w->slot = NULL;
    } else {
      sl_sample_release(s);
    }
    lua_settop(L, top);
    sl__lua_base_error(&st->b, rc);
    /* ignore_errors: fn's own error (not a stop) leaves the sample out;
     * the message is the note (engine_stage.c counts it). */
    if (st->b.run.ignore_cap && rc == SL_ELUA &&
        !atomic_load_explicit(sl__engine_stop_flag(st->b.run.engine),
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
    if (!st->b.run.ordered) sl__engine_pos_dropped(&st->b.run.pos, seq);
    return SL__ENGINE_DROP;
  }
  lua_settop(L, top);
  sl_sample *o = w->slot;
  w->slot = NULL;
  if (!o)
    return sl_set_error(SL_ELUA,
                        "%s: sample %llu: the function returned no sample",
                        st->b.spec.label, (unsigned long long)seq);
  return finish_output(st, o, seq, NULL, 0, out);
}

static const sl__engine_ops lua_engine = {stage_pull, sl__lua_base_worker_init,
                                          sl__lua_base_worker_fini,
                                          stage_process, NULL};

/* --- the reader (engine_stage.h) ------------------------------------------
 * next takes one of the first outputs, perhaps made before the schema was
 * known, through took; a new pass forgets the unchecked notes and the
 * parser's line numbers.  A stop signal also interrupts a running call
 * when the stage has a deadline (its hook reads the engine's stop flag).
 * Save and restore are the engine's position (sl__engine_pos: ordered map
 * 1:1, ordered filter and parser a log of delivered seqs, unordered the set
 * of seqs done), and nothing else: ctx.index is the item's seq and
 * ctx.epoch the restored pass, so a function using ctx.rng draws what the
 * uninterrupted run drew.  The worker states live on (their globals are
 * not saved). */

static int stage_took(void *state, uint64_t seq, sl_sample **out) {
  lua_stage *st = state;
  size_t i = seq % st->b.nnotes;
  if (!sl__lua_base_noted(&st->b, seq)) return SL_OK;
  int rc = sl__lua_base_check(&st->b, st->b.schema, out, seq, "sample");
  if (rc < 0) {
    pthread_mutex_lock(&st->b.note_mu);
    if (st->at && st->at[i].file)
      rc = parse_error(st, st->at[i].file, st->at[i].line, rc);
    pthread_mutex_unlock(&st->b.note_mu);
    sl_sample_release(*out);
    *out = NULL;
  }
  return rc;
}

/* The parser's line[] is indexed by seq, from the pass's first. */
static void stage_new_pass(void *state, uint64_t start) {
  lua_stage *st = state;
  st->line_file = NULL;
  st->line_no = 0;
  st->pulled = start;
}

static void stage_free(void *state) {
  lua_stage *st = state;
  for (size_t i = 0; st->at && i < st->b.nnotes; i++)
    sl_schema_release(st->at[i].file);
  sl__free(st->at);
  sl__free(st->line);
  sl__lua_base_fini(&st->b);
  sl__free(st);
}

/* A sample whose call failed under ignore_errors: SL_ELUA past the cap. */
static const sl__engine_stage_hooks stage_hooks = {
    .new_pass = stage_new_pass,
    .took = stage_took,
    .free = stage_free,
    .skip_code = SL_ELUA,
    .skipped = "samples failed",
    .option = "ignore_errors",
};

/* Not threads nor queue: a state restores into any thread count. */
static void stage_identity(const sl_reader *r, void *state, char *buf,
                           size_t cap) {
  /* ignore_errors is named only when on: older states still match. */
  const lua_stage *st = state;
  sl__lua_base_identity(&st->b, buf, cap,
                        st->b.run.ignore_cap ? " ignore_errors" : NULL);
}

static const sl__stage_ops stage_ops[] = {
    /* by sl__lua_kind */
    SL__ENGINE_STAGE_OPS("map", stage_identity),
    SL__ENGINE_STAGE_OPS("filter", stage_identity),
    SL__ENGINE_STAGE_OPS("parser", stage_identity),
};

int sl__lua_stage(sl_reader *up, sl__lua_kind kind, sl__shipped *fn,
                  sl__lua_env *env, const sl__lua_stage_opts *opts,
                  sl_schema *schema, sl_reader **out) {
  const char *what = kind == SL__LUA_FILTER  ? "filter"
                     : kind == SL__LUA_PARSE ? "parser"
                                             : "map";
  lua_stage *st = NULL;
  SL_FORWARD_IF_ERROR(sl__lua_base_new(
      sizeof *st, up, out, what,
      !fn     ? "NULL function"
      : !env  ? "NULL environment"
      : !opts ? "NULL options"
      : kind != SL__LUA_MAP && kind != SL__LUA_FILTER && kind != SL__LUA_PARSE
          ? "unknown kind"
          : NULL,
      fn, opts, (void **)&st));
  st->kind = kind;
  /* The engine checks the thread count (the one place) and the window.
   * The window is set here so that the parser's line numbers fit it.  A
   * map yields one sample per sample (it cannot drop one) unless it
   * ignores errors: its length is upstream's; a filter's or a parser's
   * (skipped lines) is not known, and such stages are logged as filters.
   * A parser is always ordered and never ignores errors. */
  st->window = sl__lua_stage_window(opts);
  uint64_t cap = kind == SL__LUA_PARSE ? 0 : opts->ignore_errors;
  sl__engine_stage_cfg cfg = {
      .hooks = &stage_hooks,
      .one_to_one = kind == SL__LUA_MAP && !cap,
      .fusable = kind == SL__LUA_MAP,
      .ignore_cap = cap,
      .ops = &lua_engine,
      .opts = {NULL, "sl-lua-map", opts->threads,
               kind == SL__LUA_PARSE || opts->ordered != 0, st->window}};
  int rc = sl__lua_base_init(&st->b, up, what, NULL, fn, NULL, env, opts, &cfg);
  if (rc == SL_OK && kind == SL__LUA_PARSE) {
    st->line = sl__calloc(st->window, sizeof *st->line);
    st->at = sl__calloc(st->b.nnotes, sizeof *st->at);
    if (!st->line || !st->at)
      rc = sl_set_error(SL_ENOMEM, "%s: cannot allocate %d workers",
                        st->b.spec.label, opts->threads);
  }
  /* The schema: given, upstream's (filter), or the first output's (map,
   * parser: a map keeps the variable dimensions upstream declared; a
   * parser's rows are inferred with variable lengths already). */
  if (rc == SL_OK && (schema || kind == SL__LUA_FILTER))
    sl__lua_base_fix_schema(&st->b, schema);
  /* A map whose schema is known starts at its first next, so that a batch
   * built on it fuses with it (rows.h) before it makes any output; one that
   * must learn its schema starts now to see its first output. */
  if (rc == SL_OK && !(kind == SL__LUA_MAP && st->b.schema))
    rc = sl__engine_stage_start(&st->b.run);
  if (rc == SL_OK && !st->b.schema)
    rc = sl__lua_base_learn_schema(
        &st->b, kind == SL__LUA_MAP ? sl_reader_schema(up) : NULL, NULL);
  if (rc < 0) {
    sl__engine_stage_destroy(st);
    return rc;
  }
  return sl__engine_stage_wrap(&stage_ops[kind], &st->b.run, st->b.schema, out);
}
