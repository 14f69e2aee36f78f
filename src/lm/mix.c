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
 * Position.  Since output j's reader is a function of (seed, pass, j) and
 * of which readers had left the draw by then, the stage keeps, per reader,
 * the output during whose draw it left (stop = all), and, for stop =
 * never, the lengths of its last MIX_ENDS passes.  A save at output k
 * walks the draws back from the current output to k (no data read: O(j -
 * k) hashes, j - k being what the stages above hold) to get each reader's
 * position at k - (its pass, its sample) - and saves every reader there
 * with, as payload, mode 0 and which readers had left by k.  The restore
 * puts each reader at its own position and sets the counter: nothing is
 * re-read.  A stop = never walk back across more of a reader's passes than
 * it remembers saves mode 1, the old way: the readers at the start of the
 * pass, which the restore re-reads while replaying the draws (gather.h);
 * a state with no payload (saved before mode 0 existed) restores that way
 * too.
 */
#include "core/rng.h"
#include "lm/lm.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

#define MIX_ENDS 16 /* stop = never: pass lengths kept per reader */
#define MIX_ACTIVE UINT64_MAX

typedef struct mix_state {
  sl_reader **readers;
  size_t n;
  double *w;            /* weights */
  bool *active;         /* still drawn this pass */
  uint64_t *start_pass; /* each reader's pass when this pass began; from
                           start_pass + n, when the pass before began */
  bool has_prev;        /* that pass is known (not before a restore) */
  uint64_t seed;
  int stop;
  bool keep_order; /* every pass draws pass 0's order */
  uint64_t pass, j;
  bool ended;
  atomic_uint_least64_t *count;
  uint64_t *gone;  /* per reader: the output whose draw it left, or ACTIVE */
  uint64_t *ends;  /* stop = never: n x MIX_ENDS pass lengths (a ring each) */
  uint64_t *nends; /* per reader: passes it ended in this mixture's pass */
  bool *act;       /* scratch of the walk back (save) */
} mix_state;

static double draw(const mix_state *m, uint64_t j, uint64_t attempt) {
  uint64_t k =
      sl__splitmix64_mix(m->seed) ^
      sl__splitmix64_mix((m->keep_order ? 0 : m->pass) + SL__RNG_GOLDEN) ^
      sl__splitmix64_mix(j + 2 * SL__RNG_GOLDEN) ^
      sl__splitmix64_mix(attempt + 3 * SL__RNG_GOLDEN);
  return (double)(sl__splitmix64_mix(k) >> 11) * 0x1.0p-53;
}

static size_t pick(const mix_state *m, const bool *active, double u) {
  double total = 0;
  for (size_t i = 0; i < m->n; i++)
    if (active[i]) total += m->w[i];
  double x = u * total, acc = 0;
  size_t last = m->n;
  for (size_t i = 0; i < m->n; i++) {
    if (!active[i] || m->w[i] <= 0) continue;
    acc += m->w[i];
    last = i;
    if (x < acc) return i;
  }
  return last; /* rounding at the top */
}

static bool any_active(const mix_state *m, const bool *active) {
  for (size_t i = 0; i < m->n; i++)
    if (active[i] && m->w[i] > 0) return true;
  return false;
}

/* The reader output j (< m->j) came from, drawn again: the readers that
 * had left before j are out of the draw, the one that left during it
 * (stop = all) takes its attempt. */
static size_t who(const mix_state *m, uint64_t j) {
  for (size_t i = 0; i < m->n; i++)
    m->act[i] = m->gone[i] == MIX_ACTIVE || m->gone[i] >= j;
  for (uint64_t attempt = 0;; attempt++) {
    if (!any_active(m, m->act)) return m->n;
    size_t i = pick(m, m->act, draw(m, j, attempt));
    if (m->gone[i] != j) return i;
    m->act[i] = false;
  }
}

static int mix_next(void *st, sl_sample **out) {
  mix_state *m = st;
  if (m->ended) return SL_EOF;
  for (uint64_t attempt = 0;; attempt++) {
    if (!any_active(m, m->active)) {
      m->ended = true;
      return SL_EOF;
    }
    size_t i = pick(m, m->active, draw(m, m->j, attempt));
    int rc = sl_reader_next(m->readers[i], out);
    if (rc == SL_EOF && m->stop == SL_MIX_STOP_NEVER) {
      m->ends[i * MIX_ENDS + m->nends[i]++ % MIX_ENDS] =
          sl__reader_delivered(m->readers[i]);
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
      m->gone[i] = m->j;
      continue;
    }
    if (rc < 0) return rc;
    sl__stat_add_1w(&m->count[i], 1);
    m->j++;
    return SL_OK;
  }
}

static void start_pass(mix_state *m, uint64_t pass, bool after_reset) {
  memcpy(m->start_pass + m->n, m->start_pass, m->n * sizeof *m->start_pass);
  m->has_prev = after_reset;
  m->pass = pass;
  m->j = 0;
  m->ended = false;
  for (size_t i = 0; i < m->n; i++) {
    m->active[i] = true;
    m->gone[i] = MIX_ACTIVE;
    m->nends[i] = 0;
    m->start_pass[i] = sl__reader_pass(m->readers[i]);
  }
}

static int mix_reset(void *st) {
  mix_state *m = st;
  SL_FORWARD_IF_ERROR(sl__reset_readers(m->readers, m->n));
  start_pass(m, m->pass + 1, true);
  return SL_OK;
}

static void mix_destroy(void *st) {
  mix_state *m = st;
  if (!m) return;
  sl__destroy_readers(m->readers, m->n);
  SL__FREE(m->readers, m->w, m->active, m->start_pass, (void *)m->count,
           m->gone, m->ends, m->nends, m->act, m);
}

/* Reader i's position *pass, *k before the last `back` samples it gave
 * (stop = never: across its passes, as far as its ring of ends goes):
 * false when the ring does not reach. */
static bool back_of(const mix_state *m, size_t i, uint64_t back, uint64_t *pass,
                    uint64_t *k) {
  uint64_t p = sl__reader_pass(m->readers[i]);
  uint64_t c = sl__reader_delivered(m->readers[i]);
  for (uint64_t t = 0; back > c; t++) {
    if (t >= m->nends[i] || t >= MIX_ENDS) return false;
    back -= c;
    p--;
    c = m->ends[i * MIX_ENDS + (m->nends[i] - 1 - t) % MIX_ENDS];
  }
  *pass = p;
  *k = c - back;
  return true;
}

/* Payload: 0, then per reader the output during whose draw it left (stop =
 * all; ACTIVE for one still drawn at k), each reader saved at its own
 * position at k; or 1, each reader saved at the start of the pass (the
 * restore replays the draws). */
static int mix_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                    sl__state_out *w) {
  mix_state *m = st;
  /* a pass before (a repeat above reset the mixture): re-read from where
   * its readers were when it began */
  SL_RETURN_ERROR_IF(pass != m->pass && (pass + 1 != m->pass || !m->has_prev),
                     SL_EUNSUPPORTED,
                     "save: mix: the position is in its pass %llu, it is in "
                     "pass %llu now: only the pass before is kept",
                     (unsigned long long)pass, (unsigned long long)m->pass);
  const uint64_t *starts =
      pass == m->pass ? m->start_pass : m->start_pass + m->n;
  uint64_t *pos = sl__calloc(2 * m->n, sizeof *pos);
  SL_RETURN_ERROR_IF(!pos, SL_ENOMEM, "save: mix: cannot allocate");
  bool walked = k == 0 || (pass == m->pass && k <= m->j);
  if (k == 0) {
    for (size_t i = 0; i < m->n; i++)
      pos[2 * i] = starts[i];
  } else if (walked) {
    for (uint64_t j = m->j; j-- > k;) {
      size_t i = who(m, j);
      if (i < m->n) pos[2 * i + 1]++; /* samples to go back */
    }
    for (size_t i = 0; walked && i < m->n; i++)
      walked = back_of(m, i, pos[2 * i + 1], &pos[2 * i], &pos[2 * i + 1]);
  }
  int rc = sl__state_put_u64(w, walked ? 0 : 1);
  for (size_t i = 0; walked && i < m->n && rc == SL_OK; i++)
    rc = sl__state_put_u64(w, k && m->gone[i] < k ? m->gone[i] : MIX_ACTIVE);
  for (size_t i = 0; walked && i < m->n && rc == SL_OK; i++)
    rc = sl__state_save_up(w, m->readers[i], pos[2 * i], pos[2 * i + 1]);
  sl__free(pos);
  if (rc < 0 || walked) return rc;
  return sl__gather_save_reread(m->readers, starts, m->n, k, w);
}

/* Mode 1 and states without a payload: the pass re-read up to k. */
static int restore_replay(mix_state *m, uint64_t pass, uint64_t k,
                          sl__state_in *in) {
  for (size_t i = 0; i < m->n; i++)
    SL_FORWARD_IF_ERROR(sl__state_restore_up(in, m->readers[i]));
  start_pass(m, pass, false);
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

static int mix_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  mix_state *m = st;
  uint64_t mode = 1;
  if (sl__state_left(in) > 0) SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &mode));
  SL_RETURN_ERROR_IF(mode > 1, SL_ECORRUPT,
                     "restore: corrupt state: mix: mode %llu (0 or 1)",
                     (unsigned long long)mode);
  if (mode == 1) return restore_replay(m, pass, k, in);
  for (size_t i = 0; i < m->n; i++) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &m->gone[i]));
    SL_RETURN_ERROR_IF(
        m->gone[i] != MIX_ACTIVE &&
            (m->gone[i] >= k || m->stop != SL_MIX_STOP_ALL),
        SL_ECORRUPT,
        "restore: corrupt state: mix: reader %zu left the draw at output "
        "%llu, at position %llu with stop %d",
        i, (unsigned long long)m->gone[i], (unsigned long long)k, m->stop);
  }
  uint64_t *gone = sl__malloc(m->n * sizeof *gone);
  SL_RETURN_ERROR_IF(!gone, SL_ENOMEM, "mix: cannot allocate");
  memcpy(gone, m->gone, m->n * sizeof *gone);
  int rc = SL_OK;
  for (size_t i = 0; i < m->n && rc == SL_OK; i++)
    rc = sl__state_restore_up(in, m->readers[i]);
  if (rc == SL_OK) {
    start_pass(m, pass, false);
    m->j = k;
    for (size_t i = 0; i < m->n; i++) {
      m->gone[i] = gone[i];
      m->active[i] = gone[i] == MIX_ACTIVE;
    }
  }
  sl__free(gone);
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
  m->start_pass = sl__calloc(2 * m->n, sizeof *m->start_pass);
  m->count = sl__calloc(m->n, sizeof *m->count);
  m->gone = sl__calloc(m->n, sizeof *m->gone);
  m->ends = sl__calloc(m->n * MIX_ENDS, sizeof *m->ends);
  m->nends = sl__calloc(m->n, sizeof *m->nends);
  m->act = sl__calloc(m->n, sizeof *m->act);
  SL_RETURN_ERROR_IF(!m->w || !m->active || !m->start_pass || !m->count ||
                         !m->gone || !m->ends || !m->nends || !m->act,
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
  start_pass(m, 0, false);
  return sl__stage_new(&mix_ops, m,
                       (sl_schema *)sl_reader_schema(m->readers[0]), m->readers,
                       m->n, NULL, out);
}
