/*
 * sampler.c - samplers over positions of an upstream with random access:
 * sl_weighted_sample (PyTorch's WeightedRandomSampler), sl_subset
 * (PyTorch's Subset), sl_random_split (PyTorch's random_split) and
 * sl_global_shuffle (a uniform permutation of the whole data set per pass,
 * tf.data's global_shuffle, Grain's index sampler: output k of pass p is
 * the upstream's sample at position feistel(seed, p)[share_r(k)], the
 * rank's share of the permutation as sl_shard_policy defines it, computed
 * per position in O(1) memory: core/rng.h sl__feistel).
 *
 * Protocol.  None of these stages pulls its upstream: pass p of a stage is
 * a list of upstream positions - fixed (subset, a split) or drawn from
 * (seed, p) - and output k is the upstream's sample at entry k, made by the
 * upstream's fetch function (sl__reader_fetch, stages/state.h: range,
 * array/from_table, slr under policy fail, idx, cache, and these stages
 * themselves).  An upstream without random access (a map, a filter, a
 * generator) is refused at construction with a message suggesting :cache()
 * after it (cache.c offers fetch by completing itself) or sampling the
 * source before the map; the stages never hold a pass in memory on their
 * own.  The upstream's length must be known for weighted_sample (one weight
 * per sample) and random_split (the partition); a subset checks its indices
 * against it when it is known and otherwise at fetch time.
 *
 * Draws.  weighted_sample's output k of pass p is a pure function of (seed,
 * p, k): with replacement, index i is the first whose cumulative weight
 * exceeds u * total, u in [0, 1) from splitmix64's finalizer over (seed, p,
 * k); without replacement, pass p orders the nonzero-weight indices by the
 * keys -ln(u_i) / w_i (u_i in (0, 1] from (seed, p, i): Efraimidis and
 * Spirakis, the same law as drawing one by one without replacement
 * proportionally to the weights left) and yields the first num_samples.
 * Pass p is the number of resets since construction (or as restored), as
 * for shuffle, so "reset, then read" always gives the same pass.
 * random_split permutes 0..n-1 once with core/rng.h's seeded permutation
 * (sl__permute_u64 of seed: Fisher-Yates) and gives split j the
 * positions [offset_j, offset_j + length_j) of the permutation: the same
 * seed gives the same split in every pass and process.
 *
 * Sharing (random_split).  The k splits read one source through a shared
 * handle: a refcounted struct holding the source and a mutex that guards
 * every fetch (each split is an independent reader with its own position,
 * reset and destroy, and may be pulled on its own thread).  The last split
 * destroyed destroys the source.  The splits are not linked to the source
 * (no upstream given to sl__stage_new): it belongs to none of them alone, so statistics, stop
 * signals and saves see each split as a source.  A split's saved state is
 * its position; its identity holds the source's name and identity, so a
 * state from a split of another source is refused.
 *
 * Threads (global_shuffle only).  With `threads`, the parallel-stage
 * engine's workers fetch the pass ahead: item j is the block of
 * GLOBAL_BLOCK entries from + j x GLOBAL_BLOCK onwards (from: the position
 * the run started at), pulled as NULL items and fetched by position, in
 * order; the consumer takes them one by one.  The workers read the pass's
 * permutation, made before they start, and the upstream's fetch, which
 * runs at once when the upstream declares it shared (sl__reader_fetch_
 * shared) and under fetch_mu otherwise.  Reset and restore stop them
 * first; the state (the position) is the same whatever the thread count.
 * A pass that starts with every upstream unit kept (core/keep.h:
 * sl__keep_all, e.g. the second pass over files that fit) runs on the
 * caller's thread: a fetch from memory costs a fifth of a hand-off.
 *
 * Saving.  Output k of pass p is determined by (p, k), so the state is the
 * position.  An owned upstream (weighted_sample, subset) is saved at (its
 * pass, 0) - these stages never move it - and restored first; its data
 * check (an SLR file changed since) runs as usual.  The identity holds the
 * options and a CRC32C of the weights or indices (they are data).
 *
 * Costs.  A fetch over an SLR file decodes the chunk holding the record
 * unless it is the one decoded last (the file keeps one chunk); random
 * positions over a file of many chunks decode about one chunk per sample
 * (docs/LUA.md, :weighted_sample).  Without replacement a pass starts by
 * sorting n keys (O(n log n), 16 bytes per nonzero weight).  A global
 * shuffle offers its upstream an allowance (core/keep.h, sl__reader_keep)
 * so that SLR files keep the chunks they decode, within `cache` bytes and
 * the memory budget: a data set that fits is decoded once, not once per
 * draw; so do weighted_sample (its `cache` option) and subset (as the
 * budget allows).
 */
#include "core/crc32c.h"
#include "core/rng.h"
#include "stages/stage.h"
#include "sync/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* --- the shared source of random_split ----------------------------------- */

typedef struct shared_src {
  pthread_mutex_t mu; /* guards every use of `up` */
  sl_reader *up;
  atomic_size_t refs;
} shared_src;

static void shared_drop(shared_src *sh) {
  if (!sh || atomic_fetch_sub(&sh->refs, 1) != 1) return;
  sl_reader_destroy(sh->up);
  pthread_mutex_destroy(&sh->mu);
  sl__free(sh);
}

/* --- the stage ------------------------------------------------------------ */

typedef enum { K_WEIGHTED, K_SUBSET, K_SPLIT, K_GLOBAL } sampler_kind;

typedef struct key_idx {
  double key;
  uint64_t idx;
} key_idx;

typedef struct sampler {
  sl_reader *up;     /* owned upstream (weighted, subset), else NULL */
  sampler_kind kind;
  const char *stage; /* the stage's name in messages */
  shared_src *sh;    /* a split's source, else NULL */
  uint64_t count;    /* samples per pass */
  uint64_t pos;      /* samples yielded this pass */
  uint64_t pass;     /* resets since construction, or as restored */
  /* subset, split: count positions */
  uint64_t *indices;
  /* weighted */
  size_t n;       /* weights (the upstream's length) */
  double *cdf;    /* cdf[i] = w[0] + ... + w[i] */
  double *w;      /* the weights */
  size_t nonzero; /* weights > 0 */
  uint64_t seed;
  bool replace;
  uint64_t *order;     /* without replacement: pass order_pass's draw */
  uint64_t order_pass; /* valid when order_ok */
  bool order_ok;
  /* global: the rank's share of the permutation, as segments of it */
  uint64_t seg[4];
  size_t nseg;
  sl__keep keep;    /* decoded frames the upstream keeps (core/keep.h) */
  sl__feistel perm; /* of pass perm_pass (made by the consumer) */
  uint64_t perm_pass;
  bool perm_ok;
  /* global with threads: the engine fetching the pass from entry `from`
   * on, GLOBAL_BLOCK entries an item (item j: entries from + j x BLOCK
   * onwards; `pulled` the next entry not pulled), started lazily at a
   * pass's first next; its items are NULL (as open_files' units); an
   * upstream whose fetch is not shared is fetched under fetch_mu */
  sl__engine *engine;
  bool started, serial, mu_ok;
  uint64_t from, pulled;
  /* this pass (from its first next, or the restored position) runs on the
   * caller's thread because every upstream unit is kept (`direct`): a
   * fetch from memory costs less than a hand-off; `decided` once known */
  bool direct, decided;
  pthread_mutex_t fetch_mu;
  uint32_t crc; /* CRC32C of the weights or indices */
  char *ident;  /* the identity (split: with the source's) */
} sampler;

/* splitmix64's finalizer over (seed, pass, k): 64 random bits that depend
 * on nothing else (the stream of stream number `dom`). */
static uint64_t draw64(uint64_t seed, uint64_t pass, uint64_t k, uint64_t dom) {
  uint64_t x = sl__splitmix64_mix(seed) ^
               sl__splitmix64_mix(pass + SL__RNG_GOLDEN) ^
               sl__splitmix64_mix(k + 2 * SL__RNG_GOLDEN) ^
               sl__splitmix64_mix(dom + 3 * SL__RNG_GOLDEN);
  return sl__splitmix64_mix(x);
}

/* With replacement: the index of draw k of pass `pass`. */
static uint64_t draw_with(const sampler *s, uint64_t pass, uint64_t k) {
  double u = (double)(draw64(s->seed, pass, k, 0) >> 11) * 0x1.0p-53;
  double x = u * s->cdf[s->n - 1];
  size_t lo = 0, hi = s->n; /* the first i with cdf[i] > x in [lo, hi) */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->cdf[mid] > x)
      hi = mid;
    else
      lo = mid + 1;
  }
  if (lo == s->n) /* rounding put x at the total: the last nonzero weight */
    for (lo = s->n - 1; lo > 0 && s->w[lo] <= 0; lo--)
      ;
  return lo;
}

static int by_key(const void *a, const void *b) {
  const key_idx *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Without replacement: computes pass `pass`'s order (see Draws). */
static int make_order(sampler *s, uint64_t pass) {
  if (s->order_ok && s->order_pass == pass) return SL_OK;
  key_idx *keys = sl__malloc((s->nonzero ? s->nonzero : 1) * sizeof *keys);
  SL_RETURN_ERROR_IF(!keys, SL_ENOMEM,
                     "weighted_sample: out of memory drawing %zu indices "
                     "without replacement",
                     s->nonzero);
  size_t m = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (!(s->w[i] > 0)) continue;
    double u = (double)((draw64(s->seed, pass, i, 1) >> 11) + 1) * 0x1.0p-53;
    keys[m++] = (key_idx){-log(u) / s->w[i], i};
  }
  qsort(keys, m, sizeof *keys, by_key);
  for (uint64_t k = 0; k < s->count; k++)
    s->order[k] = keys[k].idx;
  sl__free(keys);
  s->order_pass = pass;
  s->order_ok = true;
  return SL_OK;
}

/* global_shuffle: entry k of the rank's share of pass `pass`'s
 * permutation of the n upstream positions.  The stage's permutation is
 * made again only while no worker reads it (the engine stopped); a worker
 * asks for the pass it was started for, whose permutation is made. */
static uint64_t global_at(sampler *s, uint64_t pass, uint64_t k) {
  sl__feistel tmp;
  const sl__feistel *perm = &s->perm;
  if (!s->perm_ok || s->perm_pass != pass) {
    if (s->started) {
      sl__feistel_init(&tmp, s->n, s->seed, pass);
      perm = &tmp;
    } else {
      sl__feistel_init(&s->perm, s->n, s->seed, pass);
      s->perm_pass = pass;
      s->perm_ok = true;
    }
  }
  size_t i = 0;
  while (i + 1 < s->nseg && k >= s->seg[2 * i + 1] - s->seg[2 * i]) {
    k -= s->seg[2 * i + 1] - s->seg[2 * i];
    i++;
  }
  return sl__feistel_at(perm, s->seg[2 * i] + k);
}

/* The upstream position of output k of pass `pass`. */
static int position_of(sampler *s, uint64_t pass, uint64_t k, uint64_t *at) {
  if (s->kind == K_GLOBAL) {
    *at = global_at(s, pass, k);
  } else if (s->kind != K_WEIGHTED) {
    *at = s->indices[k];
  } else if (s->replace) {
    *at = draw_with(s, pass, k);
  } else {
    SL_FORWARD_IF_ERROR(make_order(s, pass));
    *at = s->order[k];
  }
  return SL_OK;
}

/* The upstream's sample at position `at` (entry k of the pass). */
static int fetch_at(sampler *s, uint64_t k, uint64_t at, sl_sample **out) {
  int rc;
  if (s->sh) {
    pthread_mutex_lock(&s->sh->mu);
    rc = sl__reader_fetch(s->sh->up, sl__reader_pass(s->sh->up), at, out);
    pthread_mutex_unlock(&s->sh->mu);
  } else if (s->serial) {
    pthread_mutex_lock(&s->fetch_mu);
    rc = sl__reader_fetch(s->up, sl__reader_pass(s->up), at, out);
    pthread_mutex_unlock(&s->fetch_mu);
  } else {
    rc = sl__reader_fetch(s->up, sl__reader_pass(s->up), at, out);
  }
  if (rc < 0)
    return sl_wrap_error(rc, "%s: sample %llu (upstream position %llu)",
                         s->stage, (unsigned long long)k,
                         (unsigned long long)at);
  return SL_OK;
}

/* --- global_shuffle on threads ------------------------------------------ */

/* Entries a worker fetches per item: a hand-off costs about a microsecond
 * (the engine's queue and wake-ups), a fetch from a kept chunk a fifth of
 * that, so items of one entry would cost more than the fetches. */
#define GLOBAL_BLOCK 64

/* The engine's upstream: one item per block of entries of the pass. */
static int global_pull(void *ud, sl_sample **out) {
  sampler *s = ud;
  if (s->pulled >= s->count) return SL_EOF;
  s->pulled = SL_MIN(s->pulled + GLOBAL_BLOCK, s->count);
  *out = NULL;
  return SL_OK;
}

/* Item seq's entries, fetched on a worker.  A fetch that fails fails the
 * item: the pass ends at its block. */
static int global_many(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                       sl_sample ***out, size_t *n) {
  sampler *s = ud;
  (void)wctx, (void)in; /* NULL */
  uint64_t first = s->from + seq * GLOBAL_BLOCK,
           end = SL_MIN(first + GLOBAL_BLOCK, s->count);
  sl_sample **v = sl__malloc((size_t)(end - first) * sizeof *v);
  SL_RETURN_ERROR_IF(!v, SL_ENOMEM, "global_shuffle: cannot allocate");
  for (uint64_t k = first; k < end; k++) {
    int rc = fetch_at(s, k, global_at(s, s->pass, k), &v[k - first]);
    if (rc < 0) {
      for (uint64_t j = first; j < k; j++)
        sl_sample_release(v[j - first]);
      sl__free(v);
      return rc;
    }
  }
  *out = v;
  *n = (size_t)(end - first);
  return SL__ENGINE_OUT;
}

static const sl__engine_ops global_engine_ops = {.pull = global_pull};

/* Stops the workers (joined: the results not taken are released). */
static void global_stop(sampler *s) {
  if (!s->started) return;
  sl__engine_stop(s->engine);
  s->started = false;
}

/* The next entry from the workers, started at the pass's position. */
static int global_next(sampler *s, sl_sample **out) {
  if (!s->started) {
    (void)global_at(s, s->pass, 0); /* the pass's permutation, made now */
    s->from = s->pulled = s->pos;
    SL_FORWARD_IF_ERROR(sl__engine_start(s->engine));
    s->started = true;
  }
  int rc = sl__engine_next(s->engine, out);
  if (rc == SL_OK) s->pos++;
  return rc;
}

static void global_signal(void *st) {
  sampler *s = st;
  if (s->engine) sl__engine_signal_stop(s->engine);
}

static void global_budget(void *st, sl__budget_acct *acct) {
  sampler *s = st;
  if (s->engine) sl__engine_set_budget(s->engine, acct);
}

static int sampler_next(void *st, sl_sample **out) {
  sampler *s = st;
  if (s->pos >= s->count) return SL_EOF;
  if (s->engine && !s->decided) {
    s->direct = sl__keep_all(&s->keep);
    s->decided = true;
  }
  if (s->engine && !s->direct) return global_next(s, out);
  uint64_t at;
  SL_FORWARD_IF_ERROR(position_of(s, s->pass, s->pos, &at));
  SL_FORWARD_IF_ERROR(fetch_at(s, s->pos, at, out));
  s->pos++;
  return SL_OK;
}

/* A new pass: new draws.  An owned upstream is reset too (it clears a
 * sticky error there; its position is never used); a split leaves the
 * shared source alone (the other splits read it). */
static int sampler_reset(void *st) {
  sampler *s = st;
  global_stop(s);
  s->decided = false;
  s->pos = 0;
  s->pass++;
  return s->up ? sl_reader_reset(s->up) : SL_OK;
}

static void sampler_destroy(void *st) {
  sampler *s = st;
  if (!s) return;
  sl__engine_destroy(s->engine); /* joins the workers first */
  sl_reader_destroy(s->up);
  if (s->mu_ok) pthread_mutex_destroy(&s->fetch_mu);
  shared_drop(s->sh);
  SL__FREE(s->indices, s->cdf, s->w, s->order, s->ident, s);
}

static int sampler_length(const sl_reader *r, void *st, uint64_t *n) {
  *n = ((sampler *)st)->count;
  return SL_OK;
}

/* Random access to the stage itself: entry `pos` of pass `pass`. */
static int sampler_fetch(sl_reader *r, void *st, uint64_t pass, uint64_t pos,
                         sl_sample **out) {
  sampler *s = st;
  if (!out) return SL_OK;
  SL_RETURN_ERROR_IF(pos >= s->count, SL_ECORRUPT,
                     "%s: sample %llu is past its %llu samples", s->stage,
                     (unsigned long long)pos, (unsigned long long)s->count);
  uint64_t at;
  SL_FORWARD_IF_ERROR(position_of(s, pass, pos, &at));
  return fetch_at(s, pos, at, out);
}

static int sampler_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_out *w) {
  sampler *s = st;
  if (!s->up) return SL_OK;
  return sl__state_save_up(w, s->up, sl__state_up_pass(r, s->up, pass), 0);
}

static int sampler_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                           sl__state_in *in) {
  sampler *s = st;
  global_stop(s);
  s->decided = false;
  if (s->up) SL_FORWARD_IF_ERROR(sl__state_restore_up(in, s->up));
  SL_FORWARD_IF_ERROR(sl__state_check_at(s->stage, k, s->count));
  s->pass = pass;
  s->pos = k;
  return SL_OK;
}

static void sampler_identity(const sl_reader *r, void *st, char *buf,
                             size_t cap) {
  snprintf(buf, cap, "%s", ((sampler *)st)->ident);
}

/* The three stages differ in their name only. */
#define SAMPLER_OPS(stage_name)                                                \
  {                                                                            \
    .name = stage_name, .next = sampler_next, .reset = sampler_reset,          \
    .destroy = sampler_destroy, .length = sampler_length,                      \
    .save = sampler_save, .restore = sampler_restore,                          \
    .identity = sampler_identity, .fetch = sampler_fetch,                      \
  }
static const sl__stage_ops weighted_ops = SAMPLER_OPS("weighted_sample");
static const sl__stage_ops subset_ops = SAMPLER_OPS("subset");
static const sl__stage_ops split_ops = SAMPLER_OPS("random_split");
static const sl__stage_ops global_ops = SAMPLER_OPS("global_shuffle");
/* On threads: the same, with the engine's stop signal, budget and counters
 * (the state does not depend on the threads). */
static const sl__stage_ops global_threads_ops = {
    .name = "global_shuffle", .next = sampler_next, .reset = sampler_reset,
    .destroy = sampler_destroy, .length = sampler_length,
    .save = sampler_save, .restore = sampler_restore,
    .identity = sampler_identity, .fetch = sampler_fetch,
    .stop = global_signal, .budget = global_budget,
};

/* --- construction ----------------------------------------------------------
 */

/* SL_OK when `up` has random access, else SL_EUNSUPPORTED saying what to
 * do instead. */
static int need_fetch(const char *stage, sl_reader *up) {
  if (sl__reader_fetch(up, 0, 0, NULL) == SL_OK) return SL_OK;
  return sl_set_error(
      SL_EUNSUPPORTED,
      "%s: its upstream '%s' has no random access to its samples (range, "
      "arrays/from_table, slr files under policy fail, idx files, cache, "
      "subset, weighted_sample, random_split, global_shuffle and chains of "
      "them have it): sample the source "
      "before mapping or filtering, or add :cache() (sl_cache) before %s",
      stage, sl_reader_name(up), stage);
}

/* Offers the upstream an allowance of `cache` bytes of decoded units
 * (SL_GLOBAL_SHUFFLE_CACHE_AUTO: as the budget allows; 0: none). */
static int offer_keep(sampler *s, uint64_t cache) {
  s->keep.max = cache == SL_GLOBAL_SHUFFLE_CACHE_AUTO ? SL__KEEP_AUTO : cache;
  int rc = cache ? sl__reader_keep(s->up, &s->keep) : SL_OK;
  return rc < 0 ? sl_wrap_error(rc, "%s: the frame cache", s->stage) : rc;
}

/* The upstream's length, which must be known. */
static int need_length(const char *stage, sl_reader *up, uint64_t *n) {
  int rc = sl_reader_length(up, n);
  if (rc < 0)
    return sl_wrap_error(rc, "%s: the upstream's length must be known", stage);
  return SL_OK;
}

static char *dup_printf(const char *fmt, ...) SL_PRINTF(1, 2);
static char *dup_printf(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return sl__strdup(buf);
}

/* "1st", "2nd", "3rd", "4th", ..., "11th", ..., "21st": entry i (0-based)
 * of an array counted from 1, which reads the same from C and from Lua's
 * 1-based tables. */
static const char *ordinal(size_t i, char buf[32]) {
  size_t n = i + 1;
  const char *suffix = "th";
  if (n % 100 < 11 || n % 100 > 13) {
    if (n % 10 == 1)
      suffix = "st";
    else if (n % 10 == 2)
      suffix = "nd";
    else if (n % 10 == 3)
      suffix = "rd";
  }
  snprintf(buf, 32, "%zu%s", n, suffix);
  return buf;
}

/* x for a message: "NaN" whatever its sign bit, else %g. */
static const char *number(double x, char buf[32]) {
  if (isnan(x)) return "NaN";
  snprintf(buf, 32, "%g", x);
  return buf;
}

/* Checks the weights and fills s->w, s->cdf, s->nonzero. */
static int take_weights(sampler *s, const double *weights, size_t n) {
  s->n = n;
  s->w = sl__malloc((n ? n : 1) * sizeof *s->w);
  s->cdf = sl__malloc((n ? n : 1) * sizeof *s->cdf);
  SL_RETURN_ERROR_IF(!s->w || !s->cdf, SL_ENOMEM,
                     "weighted_sample: cannot allocate %zu weights", n);
  double total = 0;
  for (size_t i = 0; i < n; i++) {
    double x = weights[i];
    char nth[32], num[32];
    SL_RETURN_ERROR_IF(isnan(x) || x < 0 || isinf(x), SL_EINVAL,
                       "weighted_sample: the %s weight must be a finite "
                       "number >= 0 (got %s)",
                       ordinal(i, nth), number(x, num));
    s->w[i] = x;
    total += x;
    s->cdf[i] = total;
    if (x > 0) s->nonzero++;
  }
  SL_RETURN_ERROR_IF(isinf(total), SL_EINVAL,
                     "weighted_sample: the weights sum to infinity (scale "
                     "them down)");
  s->crc = sl__crc32c(0, s->w, n * sizeof *s->w);
  return SL_OK;
}

int sl_weighted_sample(sl_reader *up, const double *weights, size_t n_weights,
                       const sl_weighted_sample_opts *opts, sl_reader **out) {
  SL_DECORATOR_ARGS("weighted_sample", up, out);
  sl_weighted_sample_opts o = SL_WEIGHTED_SAMPLE_OPTS_INIT;
  int rc = opts ? sl__opts_copy("sl_weighted_sample_opts", &o, sizeof o, opts)
                : SL_OK;
  if (rc < 0)
    return sl__fail_with_upstream(
        up, sl_wrap_error(rc, "weighted_sample: options"));
  if (!weights && n_weights > 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL,
                         "weighted_sample: NULL weights with "
                         "n_weights %zu",
                         n_weights));
  uint64_t len;
  rc = need_fetch("weighted_sample", up);
  if (rc == SL_OK) rc = need_length("weighted_sample", up, &len);
  if (rc < 0) return sl__fail_with_upstream(up, rc);
  if (len != n_weights)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL,
                         "weighted_sample: %zu weights for an upstream of "
                         "%llu samples (one weight per sample)",
                         n_weights, (unsigned long long)len));
  sampler *s = sl__decorator_state("weighted_sample", up, sizeof *s);
  if (!s) return SL_ENOMEM;
  s->kind = K_WEIGHTED;
  s->stage = "weighted_sample";
  s->seed = o.seed;
  s->replace = !o.without_replacement;
  s->count = o.num_samples ? o.num_samples : len;
  rc = take_weights(s, weights, n_weights);
  if (rc == SL_OK && s->count > 0 && s->nonzero == 0)
    rc = n_weights
             ? sl_set_error(SL_EINVAL, "weighted_sample: all %zu weights are 0",
                            n_weights)
             : sl_set_error(SL_EINVAL,
                            "weighted_sample: num_samples %llu from an "
                            "empty upstream (no weights)",
                            (unsigned long long)s->count);
  if (rc == SL_OK && !s->replace && s->count > s->nonzero)
    rc = sl_set_error(SL_EINVAL,
                      "weighted_sample: num_samples %llu without replacement "
                      "needs as many nonzero weights, there are %zu",
                      (unsigned long long)s->count, s->nonzero);
  if (rc == SL_OK && !s->replace) {
    s->order = sl__malloc((s->count ? s->count : 1) * sizeof *s->order);
    if (!s->order)
      rc = sl_set_error(SL_ENOMEM, "weighted_sample: cannot allocate");
  }
  if (rc == SL_OK) {
    s->ident =
        dup_printf("n=%zu num_samples=%llu replacement=%d seed=%llu "
                   "weights=crc32c:%08x",
                   s->n, (unsigned long long)s->count, s->replace ? 1 : 0,
                   (unsigned long long)s->seed, (unsigned)s->crc);
    if (!s->ident)
      rc = sl_set_error(SL_ENOMEM, "weighted_sample: cannot allocate");
  }
  if (rc == SL_OK) rc = offer_keep(s, o.cache);
  if (rc < 0) {
    sampler_destroy(s); /* destroys up */
    return rc;
  }
  return sl__stage_wrap(&weighted_ops, s, NULL, &s->up, NULL, out);
}

/* Checks indices[0..n) against the upstream's length `len` (UINT64_MAX: not
 * known) and copies them into s->indices. */
static int take_indices(sampler *s, const uint64_t *indices, size_t n,
                        uint64_t len) {
  s->indices = sl__malloc((n ? n : 1) * sizeof *s->indices);
  SL_RETURN_ERROR_IF(!s->indices, SL_ENOMEM, "%s: cannot allocate %zu indices",
                     s->stage, n);
  for (size_t i = 0; i < n; i++) {
    char nth[32];
    SL_RETURN_ERROR_IF(len != UINT64_MAX && indices[i] >= len, SL_EINVAL,
                       "%s: index %llu (the %s) is out of range: the "
                       "upstream has %llu samples (indices are 0-based)",
                       s->stage, (unsigned long long)indices[i],
                       ordinal(i, nth), (unsigned long long)len);
    s->indices[i] = indices[i];
  }
  s->count = n;
  s->crc = sl__crc32c(0, s->indices, n * sizeof *s->indices);
  return SL_OK;
}

/* The engine of a global shuffle on `threads` workers (or
 * SL__THREADS_AUTO): stopped until the first next. */
static int global_threads(sampler *s, int threads) {
  s->serial = !sl__reader_fetch_shared(s->up);
  if (s->serial) {
    SL_RETURN_ERROR_IF(pthread_mutex_init(&s->fetch_mu, NULL) != 0, SL_ENOMEM,
                       "global_shuffle: cannot make a mutex");
    s->mu_ok = true;
  }
  /* 4 blocks a worker in flight (the window counts items), and the
   * consumer's cache 2 items: at most (4 x threads + 1) x GLOBAL_BLOCK
   * samples held, fewer under a memory budget */
  size_t window = 4 * (size_t)sl__threads_resolve(threads);
  sl__engine_opts eo = {"global_shuffle", "sl-gshuffle", threads, true,
                        window};
  SL_FORWARD_IF_ERROR(
      sl__engine_create(&global_engine_ops, s, &eo, &s->engine));
  sl__engine_process_many(s->engine, global_many);
  sl__engine_set_cache(s->engine, 2);
  /* the consumer takes entry after entry: woken per several items */
  sl__engine_set_gather(s->engine, true);
  return SL_OK;
}

int sl_global_shuffle(sl_reader *up, const sl_global_shuffle_opts *opts,
                      sl_reader **out) {
  SL_DECORATOR_ARGS("global_shuffle", up, out);
  sl_global_shuffle_opts p = SL_GLOBAL_SHUFFLE_OPTS_INIT;
  int rc = opts ? sl__opts_copy("sl_global_shuffle_opts", &p, sizeof p, opts)
                : SL_OK;
  if (rc == SL_OK && p.world == 0) rc = sl_shard_env(&p.rank, &p.world);
  if (rc == SL_OK && (p.world < 1 || p.rank < 0 || p.rank >= p.world))
    rc = sl_set_error(SL_EINVAL, "global_shuffle: rank %d is not in [0, %d)",
                      p.rank, p.world);
  if (rc == SL_OK && p.remainder != SL_SHARD_PAD &&
      p.remainder != SL_SHARD_DROP && p.remainder != SL_SHARD_UNEVEN)
    rc = sl_set_error(SL_EINVAL,
                      "global_shuffle: remainder %d is not SL_SHARD_PAD, "
                      "SL_SHARD_DROP or SL_SHARD_UNEVEN",
                      (int)p.remainder);
  int threads = p.threads ? sl__threads_opt(p.threads) : 0;
  if (rc == SL_OK && threads && threads != SL__THREADS_AUTO)
    rc = sl__threads_check("global_shuffle", threads);
  if (rc == SL_OK) rc = need_fetch("global_shuffle", up);
  uint64_t n = 0;
  if (rc == SL_OK) rc = need_length("global_shuffle", up, &n);
  if (rc < 0) return sl__fail_with_upstream(up, rc);
  sampler *s = sl__decorator_state("global_shuffle", up, sizeof *s);
  if (!s) return SL_ENOMEM;
  s->kind = K_GLOBAL;
  s->stage = "global_shuffle";
  s->n = n;
  s->seed = p.seed;
  s->count = sl_shard_count(n, p.rank, p.world, p.remainder);
  s->nseg = sl__shard_segments(n, p.rank, p.world, p.remainder, s->seg);
  s->ident = dup_printf("n=%llu seed=%llu rank=%d/%d remainder=%d",
                        (unsigned long long)n, (unsigned long long)p.seed,
                        p.rank, p.world, (int)p.remainder);
  if (!s->ident) {
    sampler_destroy(s);
    return sl_set_error(SL_ENOMEM, "global_shuffle: cannot allocate");
  }
  rc = offer_keep(s, p.cache);
  if (rc == SL_OK && threads) rc = global_threads(s, threads);
  if (rc < 0) {
    sampler_destroy(s);
    return sl_wrap_error(rc, "global_shuffle: cannot start");
  }
  if (!s->engine) return sl__stage_wrap(&global_ops, s, NULL, &s->up, NULL, out);
  return sl__stage_wrap(&global_threads_ops, s, NULL, &s->up,
                        sl__engine_counters(s->engine), out);
}

int sl_subset(sl_reader *up, const uint64_t *indices, size_t n,
              sl_reader **out) {
  SL_DECORATOR_ARGS("subset", up, out);
  if (!indices && n > 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "subset: NULL indices with n %zu", n));
  int rc = need_fetch("subset", up);
  if (rc < 0) return sl__fail_with_upstream(up, rc);
  uint64_t len;
  if (sl_reader_length(up, &len) < 0) len = UINT64_MAX; /* checked later */
  sl_clear_error();
  sampler *s = sl__decorator_state("subset", up, sizeof *s);
  if (!s) return SL_ENOMEM;
  s->kind = K_SUBSET;
  s->stage = "subset";
  rc = take_indices(s, indices, n, len);
  if (rc == SL_OK) {
    s->ident = dup_printf("n=%zu indices=crc32c:%08x", n, (unsigned)s->crc);
    if (!s->ident) rc = sl_set_error(SL_ENOMEM, "subset: cannot allocate");
  }
  if (rc == SL_OK) rc = offer_keep(s, SL_GLOBAL_SHUFFLE_CACHE_AUTO);
  if (rc < 0) {
    sampler_destroy(s);
    return rc;
  }
  return sl__stage_wrap(&subset_ops, s, NULL, &s->up, NULL, out);
}

/* --- random_split ----------------------------------------------------------
 */

/* PyTorch's rule: sizes that are fractions summing to 1 become floor(n *
 * f) each, then the remainder one by one round-robin from the first;
 * otherwise they must be whole counts summing to n. */
static int split_lengths(const double *sizes, size_t k, uint64_t n,
                         uint64_t *len) {
  double sum = 0;
  bool fractions = true;
  char nth[32];
  for (size_t i = 0; i < k; i++) {
    double x = sizes[i];
    char num[32];
    SL_RETURN_ERROR_IF(isnan(x) || x < 0 || isinf(x), SL_EINVAL,
                       "random_split: the %s size must be a finite number "
                       ">= 0 (got %s)",
                       ordinal(i, nth), number(x, num));
    sum += x;
    if (x > 1) fractions = false;
  }
  if (fractions && fabs(sum - 1) <= 1e-9) {
    uint64_t used = 0;
    for (size_t i = 0; i < k; i++) {
      len[i] = (uint64_t)floor((double)n * sizes[i]);
      if (len[i] > n) len[i] = n;
      used += len[i];
    }
    SL_RETURN_ERROR_IF(used > n, SL_EINVAL,
                       "random_split: fractions give %llu samples of %llu",
                       (unsigned long long)used, (unsigned long long)n);
    for (uint64_t r = 0; r < n - used; r++)
      len[r % k]++;
    return SL_OK;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < k; i++) {
    SL_RETURN_ERROR_IF(sizes[i] != floor(sizes[i]) || sizes[i] >= 0x1.0p53,
                       SL_EINVAL,
                       "random_split: the %s size is %g: sizes are "
                       "fractions summing to 1 or whole counts summing to "
                       "the source's %llu samples",
                       ordinal(i, nth), sizes[i], (unsigned long long)n);
    len[i] = (uint64_t)sizes[i];
    total += len[i];
  }
  SL_RETURN_ERROR_IF(total != n, SL_EINVAL,
                     "random_split: sizes sum to %g, the source has %llu "
                     "samples (give fractions summing to 1, or counts "
                     "summing to %llu)",
                     sum, (unsigned long long)n, (unsigned long long)n);
  return SL_OK;
}

int sl_random_split(sl_reader *up, const double *sizes, size_t k, uint64_t seed,
                    sl_reader **out) {
  if (out)
    for (size_t i = 0; i < k; i++)
      out[i] = NULL;
  if (!out) {
    sl_reader_destroy(up);
    return sl_set_error(SL_EINVAL, "random_split: NULL out array");
  }
  if (!up) return sl_set_error(SL_EINVAL, "random_split: NULL source reader");
  if (!sizes || k == 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "random_split: %s",
                         !sizes ? "NULL sizes" : "needs at least one size"));
  uint64_t n;
  int rc = need_fetch("random_split", up);
  if (rc == SL_OK) rc = need_length("random_split", up, &n);
  if (rc < 0) return sl__fail_with_upstream(up, rc);
  if (n > SIZE_MAX / sizeof(uint64_t))
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "random_split: %llu samples are too many",
                         (unsigned long long)n));
  uint64_t *len = sl__calloc(k, sizeof *len);
  uint64_t *perm = sl__malloc((n ? n : 1) * sizeof *perm);
  shared_src *sh = sl__calloc(1, sizeof *sh);
  if (!len || !perm || !sh) {
    SL__FREE(len, perm, sh);
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "random_split: cannot allocate"));
  }
  rc = split_lengths(sizes, k, n, len);
  if (rc < 0) {
    SL__FREE(len, perm, sh);
    return sl__fail_with_upstream(up, rc);
  }
  /* The source's name and identity, for the splits' identities. */
  char src_ident[256] = "";
  void *src_st;
  const sl__stage_ops *ops = sl__reader_state_ops(up, &src_st);
  if (ops && ops->identity)
    ops->identity(up, src_st, src_ident, sizeof src_ident);
  sl__permute_u64(seed, perm, (size_t)n);
  pthread_mutex_init(&sh->mu, NULL);
  sh->up = up;
  atomic_init(&sh->refs, 1); /* ours, dropped at the end */
  sl_schema *schema = sl_schema_retain((sl_schema *)sl_reader_schema(up));
  uint64_t off = 0;
  for (size_t i = 0; i < k && rc == SL_OK; i++) {
    sampler *s = sl__calloc(1, sizeof *s);
    if (!s) {
      rc = sl_set_error(SL_ENOMEM, "random_split: cannot allocate");
      break;
    }
    s->kind = K_SPLIT;
    s->stage = "random_split";
    atomic_fetch_add(&sh->refs, 1);
    s->sh = sh;
    rc = take_indices(s, perm + off, (size_t)len[i], n);
    off += len[i];
    if (rc == SL_OK) {
      s->ident =
          dup_printf("part %zu of %zu: %llu of %llu samples, sizes "
                     "crc32c:%08x seed=%llu; source: %s %s",
                     i, k, (unsigned long long)len[i], (unsigned long long)n,
                     (unsigned)sl__crc32c(0, len, k * sizeof *len),
                     (unsigned long long)seed, sl_reader_name(up), src_ident);
      if (!s->ident)
        rc = sl_set_error(SL_ENOMEM, "random_split: cannot allocate");
    }
    if (rc < 0) {
      sampler_destroy(s);
      break;
    }
    rc = sl__stage_new(&split_ops, s, schema, NULL, 0, NULL, &out[i]);
  }
  sl_schema_release(schema);
  sl__free(len);
  sl__free(perm);
  if (rc < 0)
    for (size_t i = 0; i < k; i++) {
      sl_reader_destroy(out[i]);
      out[i] = NULL;
    }
  shared_drop(sh); /* the last split destroys the source; on failure, now */
  return rc;
}
