/*
 * parallel.c - sl_map_parallel and sl_filter_parallel: the C map and filter
 * on the parallel-stage engine (sync/engine.c).
 *
 * The engine's workers pull from `up` in turns and call the callback
 * concurrently; a map output is checked against the stage schema on the
 * worker (sl__map_call), so the consumer only takes results.  The
 * messages are sl_map's / sl_filter's, with the sample numbered from 0 in
 * each pass (the engine's sequence number: upstream's order, whatever the
 * thread).  The reader side (reset, save, restore, length, the skip
 * count) is engine_stage.c's; destroy also frees ud (free_ud).
 *
 * ignore_errors (opts): a sample whose callback fails (any code but
 * SL_ENOMEM and SL_EKILLED) is SL__ENGINE_SKIP with the message as its
 * note; engine_stage.c counts them on the consumer's thread in delivery
 * order (per pass) and ends the pass once more than the cap were skipped
 * (sl__ignore_error: the count, the cap and the last message).  The callback's
 * failure is told apart from a failed output check by a per-call flag
 * (call_ctx): only the callback's own errors are the sample's.  Such a map
 * leaves holes, so its position is logged as a filter's and its length is not
 * known.
 *
 * Save / restore (engine_stage.h, sl__engine_pos): an ordered map is 1:1
 * (the state is the position), an ordered filter keeps a log of the seqs it
 * delivered (a save too far behind it replays the pass), an unordered stage
 * saves the set of seqs done (restore drops them unprocessed).  Identity:
 * the kind and `ordered` (the callback is not named; threads and queue may
 * differ between save and restore).
 */
#include "stages/engine_stage.h"

typedef struct par_state {
  sl__engine_stage run; /* first: the engine and the position */
  sl_map_fn map;        /* one of map / filter */
  sl_filter_fn filter;
  void *ud;
  sl_free_fn free_ud;
  sl_schema *schema; /* map: the output schema (retained) */
} par_state;

/* The user's map callback, noting whether it failed (so that a failed
 * output check is not taken for the callback's error). */
typedef struct call_ctx {
  const par_state *p;
  bool failed;
} call_ctx;

static int call_map(void *ud, sl_sample *in, sl_sample **out) {
  call_ctx *c = ud;
  int rc = c->p->map(c->p->ud, in, out);
  c->failed = rc != SL_OK;
  return rc;
}

/* Whether an error of the callback may be ignored: not running out of
 * memory, not a stop. */
static bool ignorable(const par_state *p, int rc) {
  return p->run.ignore_cap > 0 && rc < 0 && rc != SL_ENOMEM && rc != SL_EKILLED;
}

static int par_pull(void *ud, sl_sample **out) {
  return sl_reader_next(((par_state *)ud)->run.up, out);
}

static int par_process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                       sl_sample **out) {
  par_state *p = ud;
  if (sl__engine_stage_done(&p->run, seq)) { /* delivered before a restore */
    sl_sample_release(in);
    return SL__ENGINE_DROP;
  }
  if (p->filter) {
    int rc = p->filter(p->ud, in);
    if (rc > 0) {
      *out = in;
      return SL__ENGINE_OUT;
    }
    sl_sample_release(in);
    if (rc == 0 && !p->run.ordered) sl__engine_pos_dropped(&p->run.pos, seq);
    if (rc == 0) return SL__ENGINE_DROP;
    int code = sl__filter_callback_error(rc, seq);
    return ignorable(p, rc) ? SL__ENGINE_SKIP : code; /* message: the note */
  }
  call_ctx c = {p, false};
  int rc = sl__map_call(call_map, &c, p->schema, in, seq, out);
  if (rc < 0) return c.failed && ignorable(p, rc) ? SL__ENGINE_SKIP : rc;
  return sl__engine_stage_out(&p->run, seq, *out, out); /* checked */
}

static const sl__engine_ops par_engine = {par_pull, NULL, NULL, par_process,
                                          NULL};

static void par_free(void *st) {
  par_state *p = st;
  if (p->free_ud) p->free_ud(p->ud);
  sl_schema_release(p->schema);
  sl__free(p);
}

/* Past the ignore_errors cap the pass ends with SL_EINVAL: the engine hands
 * over the message only, which names the callback's error. */
static const sl__engine_stage_hooks par_hooks = {
    .free = par_free,
    .skip_code = SL_EINVAL,
    .skipped = "samples failed",
    .option = "ignore_errors",
};

static void par_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const par_state *p = st;
  char schema[256];
  /* ignore_errors changes how a map's position is saved: named when on
   * (and only then, so that states saved before it existed still match). */
  snprintf(buf, cap, "%s ordered=%d schema=%s%s", p->map ? "map" : "filter",
           p->run.ordered ? 1 : 0,
           sl_schema_describe(p->schema, schema, sizeof schema),
           p->run.ignore_cap ? " ignore_errors" : "");
}

static const sl__stage_ops par_ops[] = {
    SL__ENGINE_STAGE_OPS("map", par_identity),
    SL__ENGINE_STAGE_OPS("filter", par_identity),
};

/* Both constructors: `what` is "map" or "filter", exactly one of map /
 * filter is set. */
static int make(const char *what, sl_reader *up, sl_map_fn map,
                sl_filter_fn filter, void *ud, sl_free_fn free_ud,
                sl_schema *schema, const sl_parallel_opts *opts,
                sl_reader **out) {
  /* The stage owns ud from the start, so every early failure frees it. */
  if ((!out || !up || !(map || filter)) && free_ud) free_ud(ud);
  if (!out) {
    sl_reader_destroy(up);
    return sl_set_error(SL_EINVAL, "%s: NULL out pointer", what);
  }
  *out = NULL;
  SL_RETURN_ERROR_IF(!up, SL_EINVAL, "%s: NULL upstream reader", what);
  int rc = SL_OK;
  sl_parallel_opts o = SL_PARALLEL_OPTS_INIT;
  if (!(map || filter))
    rc = sl_set_error(SL_EINVAL, "%s: NULL callback", what);
  else if (opts)
    rc = sl__opts_copy("sl_parallel_opts", &o, sizeof o, opts);
  par_state *p = rc < 0 ? NULL : sl__calloc(1, sizeof *p);
  if (!p) {
    if (rc == SL_OK) rc = sl_set_error(SL_ENOMEM, "%s: cannot allocate", what);
    if (map || filter) {
      if (free_ud) free_ud(ud);
    }
    return sl__fail_with_upstream(up, rc);
  }
  p->map = map;
  p->filter = filter;
  p->ud = ud;
  p->free_ud = free_ud;
  p->schema =
      sl_schema_retain(schema ? schema : (sl_schema *)sl_reader_schema(up));
  /* A map that may leave samples out has no length and is logged as a
   * filter. */
  const sl__engine_stage_cfg cfg = {
      .hooks = &par_hooks,
      .one_to_one = map && !o.ignore_errors,
      .fusable = map != NULL,
      .ignore_cap = o.ignore_errors,
      .what = what,
      .ops = &par_engine,
      .opts = {what, map ? "sl-map" : "sl-filter",
               sl__threads_opt(o.threads), !o.unordered,
               o.queue}};
  rc = sl__engine_stage_init(&p->run, up, &cfg);
  if (rc < 0) {
    sl__engine_stage_destroy(p);
    return rc;
  }
  /* Started once wrapped: over a chain with a memory budget, the workers
   * start charged (reader.c). */
  SL_FORWARD_IF_ERROR(
      sl__engine_stage_wrap(&par_ops[map ? 0 : 1], &p->run, p->schema, out));
  rc = sl__engine_stage_start(&p->run);
  if (rc < 0) {
    sl_reader_destroy(*out); /* destroys up too; keeps the error */
    *out = NULL;
  }
  return rc;
}

int sl_map_parallel(sl_reader *up, sl_map_fn fn, void *ud, sl_free_fn free_ud,
                    sl_schema *schema, const sl_parallel_opts *opts,
                    sl_reader **out) {
  return make("map", up, fn, NULL, ud, free_ud, schema, opts, out);
}

int sl_filter_parallel(sl_reader *up, sl_filter_fn fn, void *ud,
                       sl_free_fn free_ud, const sl_parallel_opts *opts,
                       sl_reader **out) {
  return make("filter", up, NULL, fn, ud, free_ud, NULL, opts, out);
}
