/*
 * parallel.c - sl_map_parallel and sl_filter_parallel: the C map and filter
 * on the parallel-stage engine (sync/engine.c).
 *
 * The engine's workers pull from `up` in turns and call the callback
 * concurrently; a map output is checked against the stage schema on the
 * worker (sl__map_call), so the consumer only takes results.  The
 * messages are sl_map's / sl_filter's, with the sample numbered from 0 in
 * each pass (the engine's sequence number: upstream's order, whatever the
 * thread).  reset = stop the engine (join), reset upstream, start it again;
 * destroy = stop, destroy upstream, free_ud.
 *
 * ignore_errors (opts): a sample whose callback fails (any code but
 * SL_ENOMEM and SL_EKILLED) is SL__ENGINE_SKIP with the message as its
 * note; the engine hands the notes to par_skipped on the consumer's thread
 * in delivery order, which counts them in `ignored` (per pass) and ends the
 * pass once more than the cap were skipped (sl__ignore_error: the count, the
 * cap and the last message).  The callback's failure is told apart from a
 * failed output check by a per-call flag (call_ctx): only the callback's
 * own errors are the sample's.  Such a map leaves holes, so its position is
 * logged as a filter's and its length is not known.
 *
 * Save / restore (readers/state.h, sl__engine_pos): an ordered map is 1:1
 * (the state is the position), an ordered filter keeps a log of the seqs it
 * delivered (a save too far behind it replays the pass), an unordered stage
 * saves the set of seqs done (restore drops them unprocessed).  Identity:
 * the kind and `ordered` (the callback is not named; threads and queue may
 * differ between save and restore).
 */
#include "stages/state.h"
#include "sync/engine.h"

typedef struct par_state {
  sl_reader *up;
  sl_map_fn map; /* one of map / filter */
  sl_filter_fn filter;
  void *ud;
  sl_free_fn free_ud;
  sl_schema *schema; /* map: the output schema (retained) */
  sl__engine *engine;
  sl__engine_pos pos;
  bool ordered;
  uint64_t ignore_cap; /* ignore_errors: 0 off, SL_IGNORE_ALL no cap */
  uint64_t ignored;    /* consumer: samples skipped this pass */
  const char *what;    /* "map" / "filter" */
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
  return p->ignore_cap > 0 && rc < 0 && rc != SL_ENOMEM && rc != SL_EKILLED;
}

static int par_pull(void *ud, sl_sample **out) {
  return sl_reader_next(((par_state *)ud)->up, out);
}

static int par_process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                       sl_sample **out) {
  par_state *p = ud;
  (void)wctx;
  if (sl__engine_pos_skip(&p->pos, seq)) { /* delivered before a restore */
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
    if (rc == 0 && !p->ordered) sl__engine_pos_dropped(&p->pos, seq);
    if (rc == 0) return SL__ENGINE_DROP;
    int code = sl__filter_callback_error(rc, seq);
    return ignorable(p, rc) ? SL__ENGINE_SKIP : code; /* message: the note */
  }
  call_ctx c = {p, false};
  int rc = sl__map_call(call_map, &c, p->schema, in, seq, out);
  if (rc < 0 && c.failed && ignorable(p, rc)) return SL__ENGINE_SKIP;
  return rc < 0 ? rc : SL__ENGINE_OUT;
}

/* A sample whose callback failed, on the consumer's thread in delivery
 * order (ignore_errors).  Past the cap the pass ends with SL_EINVAL: the
 * engine hands over the message only, which names the callback's error. */
static int par_skipped(void *ud, uint64_t seq, const char *note) {
  par_state *p = ud;
  if (!p->ordered) sl__engine_pos_dropped(&p->pos, seq);
  return sl__ignore_error((sl__stage_counters *)sl__engine_counters(p->engine),
                          &p->ignored, p->ignore_cap, SL_EINVAL, p->what,
                          "samples failed", "ignore_errors", note);
}

static const sl__engine_ops par_ops = {par_pull, NULL, NULL, par_process, NULL};

static int par_next(void *st, sl_sample **out) {
  par_state *p = st;
  int rc = sl__engine_next(p->engine, out);
  if (rc == SL_OK)
    sl__engine_pos_delivered(&p->pos, sl__engine_last_seq(p->engine));
  return rc;
}

static int par_reset(void *st) {
  par_state *p = st;
  sl__engine_stop(p->engine);
  sl__engine_pos_reset(&p->pos);
  p->ignored = 0;
  SL_FORWARD_IF_ERROR(sl_reader_reset(p->up));
  return sl__engine_start(p->engine);
}

static void par_destroy(void *st) {
  par_state *p = st;
  if (!p) return;
  sl__engine_destroy(p->engine);
  sl_reader_destroy(p->up);
  if (p->free_ud) p->free_ud(p->ud);
  sl_schema_release(p->schema);
  sl__engine_pos_fini(&p->pos);
  sl__free(p);
}

static int par_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                    sl__state_out *w) {
  (void)r;
  (void)pass;
  par_state *p = st;
  return sl__engine_pos_save(&p->pos, p->engine, p->up, k, w);
}

static int par_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  (void)r;
  (void)pass;
  par_state *p = st;
  uint64_t start;
  sl__engine_stop(p->engine);
  p->ignored = 0; /* errors before the restored position are not counted */
  SL_FORWARD_IF_ERROR(sl__engine_pos_restore(&p->pos, p->up, k, in, &start));
  return sl__engine_pos_resume(&p->pos, p->engine, k, par_next, p);
}

static void par_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  (void)r;
  const par_state *p = st;
  char schema[256];
  /* ignore_errors changes how a map's position is saved: named when on
   * (and only then, so that states saved before it existed still match). */
  snprintf(buf, cap, "%s ordered=%d schema=%s%s", p->map ? "map" : "filter",
           p->ordered ? 1 : 0,
           sl_schema_describe(p->schema, schema, sizeof schema),
           p->ignore_cap ? " ignore_errors" : "");
}

static const sl__state_ops par_state_ops = {par_save, par_restore,
                                            par_identity};

static const sl_reader_vtable map_vt = {"map", par_next, par_reset,
                                        par_destroy};
static const sl_reader_vtable filter_vt = {"filter", par_next, par_reset,
                                           par_destroy};

/* Stop signal (reader_impl.h). */
static void par_signal_stop(void *state) {
  sl__engine_signal_stop(((par_state *)state)->engine);
}

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
  p->ordered = !o.unordered;
  p->ignore_cap = o.ignore_errors;
  p->what = what;
  /* A map that may leave samples out is logged as a filter. */
  sl__engine_pos_init(&p->pos,
                      !p->ordered               ? SL__EPOS_UNORDERED
                      : map && !o.ignore_errors ? SL__EPOS_1TO1
                                                : SL__EPOS_LOG,
                      what);
  p->up = up;
  p->map = map;
  p->filter = filter;
  p->ud = ud;
  p->free_ud = free_ud;
  p->schema =
      sl_schema_retain(schema ? schema : (sl_schema *)sl_reader_schema(up));
  const sl__engine_opts eo = {what, map ? "sl-map" : "sl-filter",
                              o.threads ? (int)SL_MIN(o.threads, 1u << 20) : 1,
                              !o.unordered, o.queue};
  rc = sl__engine_create(&par_ops, p, &eo, &p->engine);
  if (rc == SL_OK && p->ignore_cap) sl__engine_on_skip(p->engine, par_skipped);
  if (rc == SL_OK) rc = sl__engine_start(p->engine);
  if (rc < 0) {
    par_destroy(p);
    return rc;
  }
  const sl__stage_counters *c = sl__engine_counters(p->engine);
  if (map && !p->ignore_cap)
    rc = sl__decorator_make_1to1(&map_vt, p, p->schema, &p->up, c, out);
  else /* a filter, or a map that may leave samples out: no length */
    rc = sl__decorator_make(map ? &map_vt : &filter_vt, p, p->schema, &p->up, c,
                            out);
  if (rc == SL_OK) {
    sl__reader_set_state_ops(*out, &par_state_ops);
    sl__reader_set_stop_signal(*out, par_signal_stop);
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
