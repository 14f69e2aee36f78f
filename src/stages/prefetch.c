/*
 * prefetch.c - sl_prefetch: one worker thread pulls the upstream reader
 * ahead of the consumer (Paddle's `buffered`): the parallel-stage engine
 * (sync/engine.c) with one worker, ordered, whose process hands each sample
 * on unchanged.
 *
 * Depth.  prefetch(n) holds n samples ready plus the one its worker has in
 * hand: an engine window of n + 1.  The consumer takes up to 16 ready
 * samples per lock round trip (the engine's cache), so a worker blocked on
 * a full window is woken once per round instead of once per sample
 * (docs/PERFORMANCE.md, "prefetch's consumer cache").  Errors arrive at
 * their place with upstream's message, EOF after every sample; reset, stop
 * and destroy are the engine's (stop, reset upstream on the consumer's
 * thread, start again).
 *
 * Lazy (sl__prefetch_lazy: interleave's read-ahead, one per source): no
 * worker at construction, reset or restore; the pass's first next starts
 * it, and the next that returns the end (or an error) stops it.  So only
 * the sources being read hold a thread: interleave's cycle, not all of
 * its sources.
 *
 * Autotuning (sl_prefetch_auto; tf.data's prefetch autotuner): the engine
 * is made with room for max_depth samples and the byte bound max_bytes
 * (sl__engine_set_max_bytes: the samples held stay under it plus the one
 * in hand), a cache of one, and a depth that starts at 1.  After each next the
 * consumer notes what its wait found (sl__engine_seen), in two modes: upswing
 * the window has not been seen full since the last change; seeing it full turns
 * to downswing. downswing  seeing it empty (the consumer must wait although the
 * worker had filled it: the demand came in a burst) doubles the depth, up to
 * max_depth and to max_bytes / the average sample size so far, and turns back
 * to upswing. A consumer slower than the worker finds the window full, never
 * empty; a worker slower than the consumer never fills it: neither grows the
 * depth. The depth never shrinks and survives reset and restore; it is
 * published in stats.queue_depth.  `tune` is the consumer's.
 *
 * Deferred outputs (stage.h, defer / finish): over a stage that can leave
 * its outputs unfinished (batch's row copies), prefetch asks for that at
 * construction and the engine's finish hook completes each sample on the
 * consumer's thread before handing it out, so whatever leaves prefetch is
 * whole.
 */
#include "stages/stage.h"
#include "sync/engine.h"

#define PREFETCH_CACHE 16 /* the engine's default cache */
/* At most this many outputs out unfinished. */
#define PREFETCH_MAX_DEFERRED 64
/* sl_prefetch_auto's defaults and the largest max_depth. */
#define AUTO_MAX_BYTES ((uint64_t)64 << 20)
#define AUTO_MAX_DEPTH 1024u
#define AUTO_DEPTH_LIMIT 65536u

/* The autotuner's state (consumer-only). */
typedef struct prefetch_tune {
  bool on;
  bool downswing;        /* the window was seen full since the last change */
  size_t depth;          /* samples ready, at most (the engine's depth - 1) */
  size_t max_depth;      /* its bound */
  uint64_t max_bytes;    /* the byte bound */
  uint64_t seen_bytes;   /* payload of the samples received so far */
  uint64_t seen_samples; /* and their number */
} prefetch_tune;

typedef struct prefetch_state {
  sl_reader *up;
  sl__engine *engine;
  bool lazy;      /* sl__prefetch_lazy: started at the pass's first next */
  bool running;   /* lazy: started this pass (consumer-only) */
  void *deferred; /* sl__reader_defer's handle on up, or NULL */
  prefetch_tune tune;
} prefetch_state;

static int prefetch_pull(void *ud, sl_sample **out) {
  return sl_reader_next(((prefetch_state *)ud)->up, out);
}

static int prefetch_process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                            sl_sample **out) {
  *out = in;
  return SL__ENGINE_OUT;
}

static void prefetch_finish(void *ud, sl_sample *s) {
  prefetch_state *p = ud;
  sl__reader_finish(p->up, p->deferred, s);
}

static const sl__engine_ops prefetch_engine_ops = {.pull = prefetch_pull,
                                                   .process = prefetch_process};

/* One received sample (the autotuner above). */
static void tune_after(prefetch_state *p, const sl_sample *s) {
  prefetch_tune *t = &p->tune;
  int seen = sl__engine_seen(p->engine);
  t->seen_bytes += sl_sample_nbytes(s);
  t->seen_samples++;
  if (!t->downswing) {
    t->downswing = seen == SL__ENGINE_SEEN_FULL;
    return;
  }
  if (seen != SL__ENGINE_SEEN_EMPTY) return;
  t->downswing = false;
  size_t want = SL_MIN(2 * t->depth, t->max_depth);
  uint64_t avg = t->seen_bytes / t->seen_samples;
  if (avg > 0 && want > 1 && (uint64_t)want * avg > t->max_bytes)
    want = (size_t)SL_MAX(t->max_bytes / avg, (uint64_t)1);
  if (want <= t->depth) return;
  t->depth = want;
  sl__engine_set_depth(p->engine, want + 1);
  atomic_store_explicit(&sl__engine_counters(p->engine)->queue_depth, want,
                        memory_order_relaxed);
}

static int prefetch_next(void *st, sl_sample **out) {
  prefetch_state *p = st;
  if (p->lazy && !p->running) {
    SL_FORWARD_IF_ERROR(sl__engine_start(p->engine));
    p->running = true;
  }
  int rc = sl__engine_next(p->engine, out);
  if (rc == SL_OK && p->tune.on) tune_after(p, *out);
  /* Lazy: the thread is stopped at the end it reported (the reader base
   * latches the end, so no next follows before a reset or restore). */
  if (rc != SL_OK && p->lazy) {
    sl__engine_stop(p->engine);
    p->running = false;
  }
  return rc;
}

/* Starts the next pass (unless lazy) once upstream was put back
 * (`rewound`: SL_OK, or the error that is returned). */
static int restart(prefetch_state *p, int rewound) {
  if (rewound < 0 || p->lazy) return rewound;
  return sl__engine_start(p->engine);
}

static int prefetch_reset(void *st) {
  prefetch_state *p = st;
  sl__engine_stop(p->engine);
  p->running = false;
  return restart(p, sl_reader_reset(p->up));
}

static void prefetch_destroy(void *st) {
  prefetch_state *p = st;
  if (!p) return;
  sl__engine_destroy(p->engine);
  sl__stage_free(p, p->up, NULL);
}

/* The samples ready in the window are not saved: the restored upstream
 * yields them again. */
static int prefetch_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                         sl__state_out *w) {
  prefetch_state *p = st;
  sl__engine_hold_pulls(p->engine);
  int rc = sl__state_save_up(w, p->up, sl__state_up_pass(r, p->up, pass), k);
  sl__engine_release_pulls(p->engine);
  return rc;
}

static int prefetch_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                            sl__state_in *in) {
  prefetch_state *p = st;
  sl__engine_stop(p->engine);
  p->running = false;
  return restart(p, sl__state_restore_up_at(in, p->up, k));
}

/* Stop signal (reader_impl.h): the worker leaves at its next check, a
 * waiting consumer gets SL_EKILLED. */
static void prefetch_signal_stop(void *st) {
  sl__engine_signal_stop(((prefetch_state *)st)->engine);
}

/* The memory budget: the engine's window is charged (engine.c). */
static void prefetch_budget(void *st, sl__budget_acct *acct) {
  sl__engine_set_budget(((prefetch_state *)st)->engine, acct);
}

static const sl__stage_ops prefetch_ops = {
    .name = "prefetch",
    .next = prefetch_next,
    .reset = prefetch_reset,
    .destroy = prefetch_destroy,
    .length = sl__length_of_upstream,
    .save = prefetch_save,
    .restore = prefetch_restore,
    .stop = prefetch_signal_stop,
    .budget = prefetch_budget,
};

/* Both constructors: `n` samples of depth, or autotuned when `tune` is
 * set (its max_depth, its byte budget). */
static int make(sl_reader *up, size_t n, const prefetch_tune *tune, bool lazy,
                sl_reader **out) {
  prefetch_state *p = sl__decorator_state("prefetch", up, sizeof *p);
  if (!p) return SL_ENOMEM;
  p->lazy = lazy;
  if (tune) {
    p->tune = *tune;
    n = tune->max_depth;
  }
  const sl__engine_opts eo = {"prefetch", "sl-prefetch", 1, true,
                              n > SIZE_MAX - 1 ? n : n + 1};
  int rc = sl__engine_create(&prefetch_engine_ops, p, &eo, &p->engine);
  if (rc < 0) {
    prefetch_destroy(p);
    return rc;
  }
  sl__stage_counters *c = sl__engine_counters(p->engine);
  atomic_store_explicit(&c->queue_depth, tune ? tune->depth : n,
                        memory_order_relaxed);
  if (tune) {
    sl__engine_set_cache(p->engine, 1);
    sl__engine_set_depth(p->engine, tune->depth + 1);
    sl__engine_set_max_bytes(p->engine, (size_t)tune->max_bytes);
  }
  /* At most every output the window and the cache can hold at once. */
  p->deferred = sl__reader_defer(
      up, SL_MIN(n + PREFETCH_CACHE + 1, (size_t)PREFETCH_MAX_DEFERRED));
  if (p->deferred) sl__engine_on_finish(p->engine, prefetch_finish);
  SL_FORWARD_IF_ERROR(sl__stage_wrap(&prefetch_ops, p, NULL, &p->up, c, out));
  rc = lazy ? SL_OK : sl__engine_start(p->engine);
  if (rc != SL_OK) {
    sl_reader_destroy(*out); /* destroys up too: we own it; keeps the error */
    *out = NULL;
  }
  return rc;
}

static int make_fixed(sl_reader *up, size_t n, bool lazy, sl_reader **out) {
  SL_DECORATOR_ARGS("prefetch", up, out);
  if (n == 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "prefetch: buffer size must be >= 1"));
  return make(up, n, NULL, lazy, out);
}

int sl_prefetch(sl_reader *up, size_t n, sl_reader **out) {
  return make_fixed(up, n, false, out);
}

int sl__prefetch_lazy(sl_reader *up, size_t n, sl_reader **out) {
  return make_fixed(up, n, true, out);
}

/* Autotuned (checked bounds; 0: the defaults), lazy or not. */
static int make_auto(sl_reader *up, unsigned max_depth, uint64_t max_bytes,
                     bool lazy, sl_reader **out) {
  prefetch_tune t = {0};
  t.on = true;
  t.depth = 1;
  t.max_depth = max_depth ? max_depth : AUTO_MAX_DEPTH;
  t.max_bytes = max_bytes ? max_bytes : AUTO_MAX_BYTES;
  return make(up, 0, &t, lazy, out);
}

int sl__prefetch_lazy_auto(sl_reader *up, unsigned max_depth,
                           uint64_t max_bytes, sl_reader **out) {
  SL_DECORATOR_ARGS("prefetch", up, out);
  return make_auto(up, SL_MIN(max_depth, AUTO_DEPTH_LIMIT), max_bytes, true,
                   out);
}

int sl_prefetch_auto(sl_reader *up, const sl_prefetch_auto_opts *opts,
                     sl_reader **out) {
  SL_DECORATOR_ARGS("prefetch", up, out);
  sl_prefetch_auto_opts o = SL_PREFETCH_AUTO_OPTS_INIT;
  SL_FORWARD_IF_ERROR(
      sl__decorator_opts(up, "sl_prefetch_auto_opts", &o, sizeof o, opts));
  if (o.max_depth > AUTO_DEPTH_LIMIT)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL,
                         "prefetch(\"auto\"): option 'max_depth' must be "
                         "1..%u samples (0: %u; got %u)",
                         AUTO_DEPTH_LIMIT, AUTO_MAX_DEPTH, o.max_depth));
  if (o.max_bytes > (uint64_t)SIZE_MAX / 2)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL,
                         "prefetch(\"auto\"): option 'max_bytes' is too "
                         "large (%llu)",
                         (unsigned long long)o.max_bytes));
  return make_auto(up, o.max_depth, o.max_bytes, false, out);
}
