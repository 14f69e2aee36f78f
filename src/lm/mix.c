/*
 * mix.c - sl_mix: a weighted mixture of readers (tf.data's
 * sample_from_datasets, Grain's mixing).
 *
 * The draw.  Output j of pass p comes from the reader picked by a uniform
 * u in [0, 1) computed from (seed, p, j, attempt) alone (p = 0 on every
 * pass with keep_order: tf.data's sample_from_datasets without
 * rerandomize_each_iteration) - splitmix64's
 * finalizer over the four mixed together, as core/rng.h - against the
 * cumulative weights of the readers still drawn.  No generator state is
 * carried from one output to the next, so the interleaving depends on
 * nothing but the seed and the positions: not on threads, timing or what
 * was read before.  `attempt` counts the draws of one position: under
 * stop = all, a reader found ended leaves the draw and the position is
 * drawn again among the others.
 *
 * Ends.  stop = first: the mixture ends when a drawn reader ends.  stop =
 * all: an ended reader leaves the draw, the mixture ends with the last.
 * stop = never: an ended reader is reset and pulled again (a reader that
 * yields nothing right after a reset is an error rather than a spin).
 *
 * Statistics: the samples taken from each reader, relaxed atomics read by
 * sl_mix_counts from any thread.
 *
 * Position: which readers have ended when depends on the data, so a saved
 * state is the position alone; the restore re-reads the pass (each reader
 * from the pass it was in when the mixture's pass began) and replays the
 * draws (gather.h).
 */
#include "core/rng.h"
#include "lm/lm.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

typedef struct mix_state {
  sl_reader **readers;
  size_t n;
  double *w;            /* weights */
  bool *active;         /* still drawn this pass */
  uint64_t *start_pass; /* each reader's pass when this pass began */
  uint64_t seed;
  int stop;
  bool keep_order; /* every pass draws pass 0's order */
  uint64_t pass, j;
  bool ended;
  atomic_uint_least64_t *count;
} mix_state;

static double draw(const mix_state *m, uint64_t attempt) {
  uint64_t k =
      sl__splitmix64_mix(m->seed) ^
      sl__splitmix64_mix((m->keep_order ? 0 : m->pass) + SL__RNG_GOLDEN) ^
      sl__splitmix64_mix(m->j + 2 * SL__RNG_GOLDEN) ^
      sl__splitmix64_mix(attempt + 3 * SL__RNG_GOLDEN);
  return (double)(sl__splitmix64_mix(k) >> 11) * 0x1.0p-53;
}

static size_t pick(const mix_state *m, double u) {
  double total = 0;
  for (size_t i = 0; i < m->n; i++)
    if (m->active[i]) total += m->w[i];
  double x = u * total, acc = 0;
  size_t last = m->n;
  for (size_t i = 0; i < m->n; i++) {
    if (!m->active[i] || m->w[i] <= 0) continue;
    acc += m->w[i];
    last = i;
    if (x < acc) return i;
  }
  return last; /* rounding at the top */
}

static bool any_active(const mix_state *m) {
  for (size_t i = 0; i < m->n; i++)
    if (m->active[i] && m->w[i] > 0) return true;
  return false;
}

static int mix_next(void *st, sl_sample **out) {
  mix_state *m = st;
  if (m->ended) return SL_EOF;
  for (uint64_t attempt = 0;; attempt++) {
    if (!any_active(m)) {
      m->ended = true;
      return SL_EOF;
    }
    size_t i = pick(m, draw(m, attempt));
    int rc = sl_reader_next(m->readers[i], out);
    if (rc == SL_EOF && m->stop == SL_MIX_STOP_NEVER) {
      SL_FORWARD_IF_ERROR(sl_reader_reset(m->readers[i]));
      rc = sl_reader_next(m->readers[i], out);
      if (rc == SL_EOF)
        return sl_set_error(SL_EINVAL,
                            "mix: reader %zu (%s) yields nothing even after "
                            "a reset (stop = never needs every reader with a "
                            "weight to yield)",
                            i, sl_reader_name(m->readers[i]));
    }
    if (rc == SL_EOF) {
      if (m->stop == SL_MIX_STOP_FIRST) {
        m->ended = true;
        return SL_EOF;
      }
      m->active[i] = false;
      continue;
    }
    if (rc < 0) return rc;
    sl__stat_add_1w(&m->count[i], 1);
    m->j++;
    return SL_OK;
  }
}

static void start_pass(mix_state *m, uint64_t pass) {
  m->pass = pass;
  m->j = 0;
  m->ended = false;
  for (size_t i = 0; i < m->n; i++) {
    m->active[i] = true;
    m->start_pass[i] = sl__reader_pass(m->readers[i]);
  }
}

static int mix_reset(void *st) {
  mix_state *m = st;
  SL_FORWARD_IF_ERROR(sl__reset_readers(m->readers, m->n));
  start_pass(m, m->pass + 1);
  return SL_OK;
}

static void mix_destroy(void *st) {
  mix_state *m = st;
  if (!m) return;
  sl__destroy_readers(m->readers, m->n);
  SL__FREE(m->readers, m->w, m->active, m->start_pass, (void *)m->count, m);
}

static int mix_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                    sl__state_out *w) {
  mix_state *m = st;
  return sl__gather_save_reread(m->readers, m->start_pass, m->n, k, w);
}

static int mix_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  mix_state *m = st;
  for (size_t i = 0; i < m->n; i++)
    SL_FORWARD_IF_ERROR(sl__state_restore_up(in, m->readers[i]));
  start_pass(m, pass);
  uint64_t *keep = sl__malloc(m->n * sizeof *keep);
  SL_RETURN_ERROR_IF(!keep, SL_ENOMEM, "mix: cannot allocate");
  for (size_t i = 0; i < m->n; i++)
    keep[i] = atomic_load(&m->count[i]);
  int rc = sl__state_replay(mix_next, m, k, "mix");
  for (size_t i = 0; i < m->n; i++) /* the replayed draws were counted */
    atomic_store(&m->count[i], keep[i]);
  sl__free(keep);
  return rc;
}

static void mix_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const mix_state *m = st;
  int n = snprintf(buf, cap,
                   "seed=%llu stop=%d%s weights=", (unsigned long long)m->seed,
                   m->stop, m->keep_order ? " keep_order" : "");
  for (size_t i = 0; i < m->n && n >= 0 && (size_t)n < cap; i++)
    n += snprintf(buf + n, cap - (size_t)n, "%s%.17g", i ? "," : "", m->w[i]);
}

static const sl__stage_ops mix_ops = {
    .name = "mix",
    .next = mix_next,
    .reset = mix_reset,
    .destroy = mix_destroy,
    .save = mix_save,
    .restore = mix_restore,
    .identity = mix_identity,
};

int sl_mix_counts(const sl_reader *r, uint64_t *counts, size_t cap, size_t *n) {
  SL_RETURN_ERROR_IF(!r || (!counts && cap), SL_EINVAL,
                     "mix_counts: NULL argument");
  const mix_state *m = sl__lm_find(r, mix_next);
  SL_RETURN_ERROR_IF(!m, SL_ENOTFOUND,
                     "mix_counts: no mix stage in the chain "
                     "of '%s'",
                     sl_reader_name(r));
  for (size_t i = 0; i < m->n && i < cap; i++)
    counts[i] = atomic_load_explicit(&m->count[i], memory_order_relaxed);
  if (n) *n = m->n;
  return SL_OK;
}

static int setup(mix_state *m, const sl_mix_opts *o) {
  m->w = sl__calloc(m->n, sizeof *m->w);
  m->active = sl__calloc(m->n, sizeof *m->active);
  m->start_pass = sl__calloc(m->n, sizeof *m->start_pass);
  m->count = sl__calloc(m->n, sizeof *m->count);
  SL_RETURN_ERROR_IF(!m->w || !m->active || !m->start_pass || !m->count,
                     SL_ENOMEM, "mix: cannot allocate");
  SL_RETURN_ERROR_IF(
      o->stop != SL_MIX_STOP_FIRST && o->stop != SL_MIX_STOP_ALL &&
          o->stop != SL_MIX_STOP_NEVER,
      SL_EINVAL, "mix: stop %d is not first, all or never", o->stop);
  double total = 0;
  for (size_t i = 0; i < m->n; i++) {
    double w = o->weights ? o->weights[i] : 1.0;
    SL_RETURN_ERROR_IF(!(w >= 0) || isinf(w), SL_EINVAL,
                       "mix: weight %zu is %g; weights must be finite and "
                       ">= 0",
                       i, w);
    m->w[i] = w;
    total += w;
  }
  SL_RETURN_ERROR_IF(!(total > 0), SL_EINVAL, "mix: the weights are all 0");
  const sl_schema *s0 = sl_reader_schema(m->readers[0]);
  for (size_t i = 1; i < m->n; i++) {
    if (!sl_schema_equal(s0, sl_reader_schema(m->readers[i]))) {
      char a[256], b[256];
      return sl_set_error(
          SL_ESHAPE,
          "mix: reader %zu yields %s, reader 0 %s: a mixture "
          "needs one schema",
          i, sl_schema_describe(sl_reader_schema(m->readers[i]), b, sizeof b),
          sl_schema_describe(s0, a, sizeof a));
    }
  }
  return SL_OK;
}

int sl_mix(sl_reader **readers, size_t n, const sl_mix_opts *opts,
           sl_reader **out) {
  SL_FORWARD_IF_ERROR(sl__check_readers("mix", readers, n, out));
  sl_mix_opts o = SL_MIX_OPTS_INIT;
  int rc = opts ? sl__opts_copy("sl_mix_opts", &o, sizeof o, opts) : SL_OK;
  mix_state *m = rc == SL_OK ? sl__calloc(1, sizeof *m) : NULL;
  sl_reader **copy = m ? sl__calloc(n, sizeof *copy) : NULL;
  if (!copy) {
    if (rc == SL_OK) rc = sl_set_error(SL_ENOMEM, "mix: cannot allocate");
    sl__free(m);
    sl__destroy_readers(readers, n);
    return rc;
  }
  memcpy(copy, readers, n * sizeof *copy);
  m->readers = copy; /* from here on mix_destroy owns them */
  m->n = n;
  m->seed = o.seed;
  m->stop = o.stop;
  m->keep_order = o.keep_order != 0;
  rc = setup(m, &o);
  if (rc < 0) {
    mix_destroy(m);
    return rc;
  }
  start_pass(m, 0);
  return sl__stage_new(&mix_ops, m,
                       (sl_schema *)sl_reader_schema(m->readers[0]), m->readers,
                       m->n, NULL, out);
}
