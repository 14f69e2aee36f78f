/*
 * shuffle.c - a sliding-window shuffle.
 *
 * Protocol: the stage keeps a window of up to buffer_size samples.  Each next
 * first tops the window up from upstream (on the first call of a pass this
 * reads buffer_size samples; afterwards one), then removes a uniformly random
 * slot, returns its sample and moves the last sample into the hole.  Once
 * upstream has ended, the window drains the same way.  Every pass therefore
 * yields a permutation of its input, and a sample can leave at most
 * buffer_size - 1 positions early.
 *
 * Determinism: pass p (the number of resets since creation) draws from a
 * xoshiro256** generator seeded by splitmix64 from a hash of (seed, p), with
 * Lemire's unbiased bounded draws, so the order is a pure function of the
 * seed, the pass and the input.  Resets count even in the middle of a pass,
 * so "reset, then read" always gives the same pass whatever came before.
 *
 * Cost: the window grows geometrically up to buffer_size (a huge bound costs
 * nothing for small data); after that a sample costs one upstream pull, one
 * draw and two pointer moves.  The sample drawn is one that arrived long
 * ago, so its header is no longer in the CPU's caches: each call therefore
 * also draws the *next* call's slot ahead of time, on a copy of the
 * generator, with the bound the window will have then if upstream does not
 * end, and prefetches that sample.  The next call uses the early draw (and
 * the copy's state) only when its bound turned out right, else it draws
 * afresh from the untouched generator, so the order is exactly the same.  Errors from upstream are returned as soon as
 * they are read, unchanged except SL_ENOMEM, which gets "shuffle: out of
 * memory holding N samples (buffer_size B ...): " in front (the window's
 * samples are what used the memory); the window keeps its samples until
 * reset or destroy.
 */
#include "core/rng.h"
#include "readers/reader_impl.h"

typedef struct shuffle_state {
  sl_reader *up;
  size_t size;       /* buffer_size: the most samples the window holds */
  sl_sample **win;   /* the window, `count` samples owned by us */
  size_t count, cap; /* samples held, slots allocated */
  bool up_ended;     /* upstream returned SL_EOF this pass */
  uint64_t seed, pass;
  uint64_t rng[4]; /* xoshiro256** state */
  /* The next draw made early (see Cost): valid while ahead_ok. */
  bool ahead_ok;
  size_t ahead_bound, ahead_j;
  uint64_t ahead_rng[4]; /* rng after that draw */
} shuffle_state;

/* --- random numbers ----------------------------------------------------------
 */

/* Seeds the generator for pass `pass`.  The pass number is mixed through
 * splitmix64 before it meets the seed, so (seed, p) and (seed + 1, p - 1)
 * give unrelated streams. */
static void seed_pass(shuffle_state *s) {
  uint64_t p = s->pass;
  uint64_t x = s->seed ^ sl__splitmix64(&p);
  for (int i = 0; i < 4; i++)
    s->rng[i] = sl__splitmix64(&x);
}

/* --- the window --------------------------------------------------------------
 */

static void release_window(shuffle_state *s) {
  for (size_t i = 0; i < s->count; i++)
    sl_sample_release(s->win[i]);
  s->count = 0;
}

/* Makes room for one more sample: doubles the allocation, capped at the
 * window size, so a buffer larger than the data costs only what is used. */
static int grow(shuffle_state *s) {
  size_t cap = s->cap ? s->cap * 2 : 64;
  if (cap > s->size || cap < s->cap) cap = s->size;
  SL_RETURN_ERROR_IF(cap > SIZE_MAX / sizeof *s->win, SL_ENOMEM,
                     "shuffle: cannot grow the window to %zu samples "
                     "(buffer_size %zu)",
                     cap, s->size);
  sl_sample **win = sl__realloc(s->win, cap * sizeof *win);
  SL_RETURN_ERROR_IF(!win, SL_ENOMEM,
                     "shuffle: cannot grow the window to %zu samples "
                     "(buffer_size %zu)",
                     cap, s->size);
  s->win = win;
  s->cap = cap;
  return SL_OK;
}

/* Draws the next call's slot early and prefetches its sample (the header
 * and the tensors after it); a slot at or past `count` will hold a sample
 * that has yet to arrive (and will be warm). */
static void draw_ahead(shuffle_state *s) {
  size_t bound = s->up_ended ? s->count : s->size;
  s->ahead_ok = bound > 0;
  if (!s->ahead_ok) return;
  memcpy(s->ahead_rng, s->rng, sizeof s->rng);
  s->ahead_bound = bound;
  s->ahead_j = (size_t)sl__rng_bounded(s->ahead_rng, bound);
  if (s->ahead_j < s->count) sl__prefetch(s->win[s->ahead_j], 256);
}

static int shuffle_next(void *st, sl_sample **out) {
  shuffle_state *s = st;
  while (!s->up_ended && s->count < s->size) {
    if (s->count == s->cap) SL_FORWARD_IF_ERROR(grow(s));
    int rc = sl_reader_next(s->up, &s->win[s->count]);
    if (rc == SL_EOF) {
      s->up_ended = true;
      break;
    }
    /* Out of memory while filling: the samples held here took it, so the
     * error names the shuffle, not only the stage whose allocation failed
     * (upstream's message follows).  Other errors pass unchanged. */
    if (rc == SL_ENOMEM)
      return sl_wrap_error(rc,
                           "shuffle: out of memory holding %zu samples "
                           "(buffer_size %zu; a smaller buffer holds less)",
                           s->count, s->size);
    if (rc < 0) return rc; /* upstream's message is already set */
    s->count++;
  }
  if (s->count == 0) return SL_EOF;
  size_t j;
  if (s->ahead_ok && s->ahead_bound == s->count) {
    j = s->ahead_j;
    memcpy(s->rng, s->ahead_rng, sizeof s->rng);
  } else {
    j = (size_t)sl__rng_bounded(s->rng, s->count);
  }
  *out = s->win[j];
  s->win[j] = s->win[--s->count];
  draw_ahead(s);
  return SL_OK;
}

static int shuffle_reset(void *st) {
  shuffle_state *s = st;
  release_window(s);
  s->up_ended = false;
  s->ahead_ok = false;
  s->pass++;
  seed_pass(s);
  return sl_reader_reset(s->up);
}

static void shuffle_destroy(void *st) {
  shuffle_state *s = st;
  if (!s) return;
  release_window(s);
  sl__free(s->win);
  sl_reader_destroy(s->up);
  sl__free(s);
}

static const sl_reader_vtable shuffle_vt = {"shuffle", shuffle_next,
                                            shuffle_reset, shuffle_destroy};

int sl_shuffle(sl_reader *up, size_t buffer_size, uint64_t seed,
               sl_reader **out) {
  SL_DECORATOR_ARGS("shuffle", up, out);
  if (buffer_size == 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "shuffle: buffer_size must be >= 1"));
  shuffle_state *s = sl__calloc(1, sizeof *s);
  if (!s)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "shuffle: cannot allocate"));
  s->up = up;
  s->size = buffer_size;
  s->seed = seed;
  seed_pass(s);
  /* Hold the schema ourselves: a failing sl_reader_new destroys `up`. */
  sl_schema *schema = sl_schema_retain((sl_schema *)sl_reader_schema(up));
  int rc = sl__decorator_make_1to1(&shuffle_vt, s, schema, &s->up, NULL, out);
  sl_schema_release(schema);
  return rc;
}
