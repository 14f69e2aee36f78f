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
 * afresh from the untouched generator, so the order is exactly the same. Errors
 * from upstream are returned as soon as they are read, unchanged except
 * SL_ENOMEM, which gets "shuffle: out of memory holding N samples (buffer_size
 * B ...): " in front (the window's samples are what used the memory); the
 * window keeps its samples until reset or destroy.
 */
#include "core/rng.h"
#include "stages/stage.h"

#include <stdlib.h>

#define SHUFFLE_ENDS 16

typedef struct shuffle_state {
  sl_reader *up;
  size_t size;       /* buffer_size: the most samples the window holds */
  sl_sample **win;   /* the window, `count` samples owned by us */
  size_t count, cap; /* samples held, slots allocated */
  bool up_ended;     /* upstream returned SL_EOF this pass */
  uint64_t pulled;   /* upstream samples read this pass */
  uint64_t seed, pass;
  /* where upstream ended in the passes before (UINT64_MAX: reset before
   * its end), pass p's at p % SHUFFLE_ENDS; `ends_from`: the first pass
   * the ring knows (a save there: a repeat above reset the stage) */
  uint64_t ends[SHUFFLE_ENDS], ends_from;
  uint64_t rng[4]; /* xoshiro256** state */
  /* The next draw made early (see Cost): valid while ahead_ok. */
  bool ahead_ok;
  size_t ahead_bound, ahead_j;
  uint64_t ahead_rng[4]; /* rng after that draw */
  /* The memory budget's account, or NULL (set once, perhaps while a thread
   * pulls this stage), and the bytes charged for the window's samples (the
   * window may have filled before the budget came). */
  sl__budget_acct *_Atomic acct;
  uint64_t charged;
} shuffle_state;

/* Seeds the generator for pass `pass` (sl__rng_seed).  The pass number is
 * mixed through splitmix64 before it meets the seed, so (seed, p) and
 * (seed + 1, p - 1) give unrelated streams. */
static void seed_rng(uint64_t seed, uint64_t pass, uint64_t rng[4]) {
  sl__rng_seed(rng, seed ^ sl__splitmix64(&pass));
}

static void seed_pass(shuffle_state *s) {
  seed_rng(s->seed, s->pass, s->rng);
}

/* --- the window --------------------------------------------------------------
 */

static void release_window(shuffle_state *s) {
  for (size_t i = 0; i < s->count; i++)
    sl_sample_release(s->win[i]);
  s->count = 0;
  sl__budget_acct *a = atomic_load_explicit(&s->acct, memory_order_acquire);
  if (a) sl__budget_release_all(a);
  s->charged = 0;
}

/* The memory budget (sync/budget.h): the window's samples are charged as
 * they arrive (upstream's carry claimed), without waiting (the window only
 * empties as this stage's caller pulls); a sample drawn becomes the
 * account's carry.  A window needing more than the budget is an error. */
static void shuffle_budget(void *st, sl__budget_acct *acct) {
  atomic_store_explicit(&((shuffle_state *)st)->acct, acct,
                        memory_order_release);
}

static int charge_window(shuffle_state *s, sl_sample *smp) {
  sl__budget_acct *a = atomic_load_explicit(&s->acct, memory_order_acquire);
  if (!a) return SL_OK;
  uint64_t n = sl_sample_nbytes(smp);
  int rc = sl__budget_charge(a, n, s->count + 1);
  if (rc < 0) {
    sl_sample_release(smp);
    return rc;
  }
  s->charged += n;
  return SL_OK;
}

/* The sample drawn leaves the window: its bytes become the carry (at most
 * what the window was charged). */
static void carry_out(shuffle_state *s, const sl_sample *smp) {
  sl__budget_acct *a = atomic_load_explicit(&s->acct, memory_order_acquire);
  if (!a) return;
  uint64_t n = SL_MIN((uint64_t)sl_sample_nbytes(smp), s->charged);
  s->charged -= n;
  sl__budget_to_carry(a, n);
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
    SL_FORWARD_IF_ERROR(charge_window(s, s->win[s->count]));
    s->count++;
    s->pulled++;
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
  carry_out(s, *out);
  draw_ahead(s);
  return SL_OK;
}

static int shuffle_reset(void *st) {
  shuffle_state *s = st;
  release_window(s);
  s->ends[s->pass % SHUFFLE_ENDS] = s->up_ended ? s->pulled : UINT64_MAX;
  s->up_ended = false;
  s->ahead_ok = false;
  s->pulled = 0;
  s->pass++;
  seed_pass(s);
  return sl_reader_reset(s->up);
}

static void shuffle_destroy(void *st) {
  shuffle_state *s = st;
  if (!s) return;
  release_window(s);
  sl__free(s->win);
  sl__stage_free(s, s->up, NULL);
}

/* --- saving and restoring --------------------------------------------------
 * Which upstream samples the window holds after k outputs of a pass depends
 * only on the seed, the pass, k and where upstream ended - not on the
 * samples - so a state holds no samples: replay() runs the window's moves
 * on sequence numbers.  Over a source with random access (sl__reader_fetch:
 * range, array, slr, idx) the restore then fetches exactly the window's
 * samples, in position order (a chunked file decodes each chunk they fall
 * in once); over anything else it reads upstream again from the oldest
 * sample the window held, keeping the held ones in their slots: the
 * distance from that sample to the newest, which for a full window is
 * about buffer_size x (1 + ln buffer_size) samples (docs/RESUME.md). */

typedef struct replayed {
  uint64_t *slot; /* the window: upstream sequence numbers, count of them */
  size_t count;
  uint64_t pulled; /* upstream samples read */
  bool ended;      /* upstream's end was met */
  uint64_t rng[4];
} replayed;

/* The window after k outputs of pass `pass` whose upstream ends after
 * `end` samples (UINT64_MAX: not known to end). */
static int replay(const shuffle_state *s, uint64_t pass, uint64_t k,
                  uint64_t end, replayed *w) {
  memset(w, 0, sizeof *w);
  seed_rng(s->seed, pass, w->rng);
  size_t cap = 0;
  for (uint64_t i = 0; i < k; i++) {
    while (!w->ended && w->count < s->size) {
      if (w->pulled == end) {
        w->ended = true;
        break;
      }
      if (w->count == cap) {
        cap = cap ? SL_MIN(cap * 2, s->size) : SL_MIN((size_t)64, s->size);
        uint64_t *slot = sl__realloc(w->slot, cap * sizeof *slot);
        if (!slot) {
          sl__free(w->slot);
          w->slot = NULL;
          return sl_set_error(SL_ENOMEM,
                              "shuffle: out of memory replaying a window of "
                              "%zu samples",
                              cap);
        }
        w->slot = slot;
      }
      w->slot[w->count++] = w->pulled++;
    }
    if (w->count == 0) {
      sl__free(w->slot);
      w->slot = NULL;
      return sl_set_error(SL_ECORRUPT,
                          "shuffle: position %llu is past the end of the "
                          "pass (%llu samples)",
                          (unsigned long long)k, (unsigned long long)w->pulled);
    }
    size_t j = (size_t)sl__rng_bounded(w->rng, w->count);
    w->slot[j] = w->slot[--w->count];
  }
  return SL_OK;
}

static uint64_t oldest(const replayed *w) {
  uint64_t m = w->pulled;
  for (size_t i = 0; i < w->count; i++)
    m = SL_MIN(m, w->slot[i]);
  return m;
}

/* How a restore gets the window's samples back (payload). */
enum { REFILL_READ = 0, REFILL_FETCH = 1 };

/* Payload: where upstream ended in this pass (UINT64_MAX: not yet), and
 * how to refill: REFILL_FETCH when upstream has random access (a source
 * with an index: sl__reader_fetch) - upstream is saved where the window
 * stopped reading and the restore fetches exactly the samples the window
 * held; else REFILL_READ - upstream is saved at the window's oldest sample
 * and the restore reads forward from there. */
static int shuffle_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_out *w) {
  shuffle_state *s = st;
  uint64_t end = s->up_ended ? s->pulled : UINT64_MAX;
  if (pass != s->pass) { /* a pass before: where its upstream ended */
    SL_RETURN_ERROR_IF(
        pass < s->ends_from || s->pass - pass > SHUFFLE_ENDS, SL_EUNSUPPORTED,
        "save: shuffle: the position is in its pass %llu, it is in pass "
        "%llu now: where upstream ended is kept for %d passes back, and "
        "not before a restore",
        (unsigned long long)pass, (unsigned long long)s->pass, SHUFFLE_ENDS);
    end = s->ends[pass % SHUFFLE_ENDS];
  }
  replayed win;
  SL_FORWARD_IF_ERROR(replay(s, pass, k, end, &win));
  uint64_t from = oldest(&win), pulled = win.pulled;
  sl__free(win.slot);
  /* An end the window had not met by k changes nothing up to k: not
   * saved, so the state is a function of the position alone, however far
   * a thread above (an engine's workers) has pulled since. */
  if (!win.ended) end = UINT64_MAX;
  bool fetch = sl__reader_fetch(s->up, 0, 0, NULL) == SL_OK;
  sl_clear_error();
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, end));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, fetch ? REFILL_FETCH : REFILL_READ));
  uint64_t up_pass = sl__state_up_pass(r, s->up, pass);
  if (fetch || from == pulled) /* nothing to read again */
    return sl__state_save_up(w, s->up, up_pass, fetch ? pulled : from);
  return sl__state_save_up_replayed(w, s->up, up_pass, from);
}

typedef struct placed {
  uint64_t seq;
  size_t slot;
} placed;

static int by_seq(const void *a, const void *b) {
  uint64_t x = ((const placed *)a)->seq, y = ((const placed *)b)->seq;
  return (x > y) - (x < y);
}

static int refill(shuffle_state *s, const replayed *w, bool fetch) {
  if (w->count > s->cap) {
    sl_sample **win = sl__realloc(s->win, w->count * sizeof *win);
    SL_RETURN_ERROR_IF(!win, SL_ENOMEM,
                       "shuffle: cannot allocate a window of %zu samples",
                       w->count);
    s->win = win;
    s->cap = w->count;
  }
  placed *order = sl__malloc((w->count ? w->count : 1) * sizeof *order);
  SL_RETURN_ERROR_IF(!order, SL_ENOMEM, "shuffle: out of memory restoring");
  for (size_t i = 0; i < w->count; i++)
    order[i] = (placed){w->slot[i], i};
  qsort(order, w->count, sizeof *order, by_seq);
  int rc = SL_OK;
  size_t next = 0;
  /* Random access: exactly the window's samples, in position order. */
  uint64_t up_pass = sl__reader_pass(s->up);
  while (fetch && next < w->count && rc == SL_OK) {
    sl_sample *smp = NULL;
    rc = sl__reader_fetch(s->up, up_pass, order[next].seq, &smp);
    if (rc == SL_OK) s->win[order[next++].slot] = smp;
  }
  for (uint64_t q = oldest(w); !fetch && q < w->pulled && rc == SL_OK; q++) {
    sl_sample *smp = NULL;
    rc = sl_reader_next(s->up, &smp);
    if (rc == SL_EOF)
      rc = sl_set_error(SL_ECORRUPT,
                        "restore: shuffle: upstream ended at sample %llu, "
                        "the state needs %llu (did the data change since "
                        "the save?)",
                        (unsigned long long)q, (unsigned long long)w->pulled);
    if (rc != SL_OK) break;
    if (next < w->count && order[next].seq == q)
      s->win[order[next++].slot] = smp;
    else
      sl_sample_release(smp);
  }
  if (rc != SL_OK) /* release what was placed; the window stays empty */
    for (size_t i = 0; i < next; i++)
      sl_sample_release(s->win[order[i].slot]);
  sl__budget_acct *a = atomic_load_explicit(&s->acct, memory_order_acquire);
  for (size_t i = 0; rc == SL_OK && a && i < w->count; i++) {
    uint64_t n = sl_sample_nbytes(s->win[i]);
    sl__budget_adjust(a, 0, n);
    s->charged += n;
  }
  sl__free(order);
  return rc;
}

/* The longest a sample stays in a full window: one stays m draws with
 * probability (1 - 1/n)^m < e^-(m/n), so a window span of 64 windows is
 * out of reach of any real pass (e^-64, about 1e-28, per sample), while it
 * bounds what a restore replays by what its upstream was restored to. */
#define SPAN_WINDOWS 64

/* Bounds a restored position before anything is replayed: after k outputs
 * the window has read min(size + k - 1, end) upstream samples (0 at k = 0);
 * a FETCH state holds exactly that as its upstream's position, a READ
 * state the window's oldest sample, which is at most k (every sample
 * before it was drawn) and at most SPAN_WINDOWS windows behind.  A state
 * that fails this is refused at once (SL_ECORRUPT) rather than replaying
 * towards a position its upstream cannot have. */
static int check_position(const shuffle_state *s, uint64_t k, uint64_t end,
                          bool fetch, uint64_t up) {
  SL_RETURN_ERROR_IF(end != UINT64_MAX && k > end, SL_ECORRUPT,
                     "restore: corrupt state: shuffle at sample %llu of a "
                     "pass whose upstream ended after %llu",
                     (unsigned long long)k, (unsigned long long)end);
  uint64_t pulled = 0;
  if (k > 0)
    pulled = k > UINT64_MAX - s->size ? UINT64_MAX : k + s->size - 1;
  pulled = SL_MIN(pulled, end);
  uint64_t span = s->size > UINT64_MAX / (SPAN_WINDOWS + 1)
                      ? UINT64_MAX
                      : (uint64_t)s->size * (SPAN_WINDOWS + 1);
  bool ok = fetch ? up == pulled : up <= k && pulled - up <= span;
  SL_RETURN_ERROR_IF(!ok, SL_ECORRUPT,
                     "restore: corrupt state: shuffle (buffer_size %zu) at "
                     "sample %llu cannot have its upstream '%s' at %llu "
                     "(the window has read %llu samples there); the state "
                     "is not one this pipeline saved",
                     s->size, (unsigned long long)k, sl_reader_name(s->up),
                     (unsigned long long)up, (unsigned long long)pulled);
  return SL_OK;
}

/* Reads the payload and bounds the position (check_position). */
static int read_record(const shuffle_state *s, uint64_t k, sl__state_in *in,
                       uint64_t *end, uint64_t *how, uint64_t *up) {
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, end));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, how));
  SL_RETURN_ERROR_IF(*how != REFILL_READ && *how != REFILL_FETCH, SL_ECORRUPT,
                     "restore: corrupt state: shuffle refill %llu",
                     (unsigned long long)*how);
  SL_FORWARD_IF_ERROR(sl__state_up_position(in, up));
  return check_position(s, k, *end, *how == REFILL_FETCH, *up);
}

/* The state check: the same, before any stage of the chain changes. */
static int shuffle_check(const sl_reader *r, void *st, sl__state_in *in) {
  uint64_t end, how, up;
  return read_record(st, sl__state_position(in), in, &end, &how, &up);
}

static int shuffle_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                           sl__state_in *in) {
  shuffle_state *s = st;
  uint64_t end, how, up;
  SL_FORWARD_IF_ERROR(read_record(s, k, in, &end, &how, &up));
  release_window(s);
  s->ahead_ok = false;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, s->up));
  replayed w;
  SL_FORWARD_IF_ERROR(replay(s, pass, k, end, &w));
  uint64_t want = how == REFILL_FETCH ? w.pulled : oldest(&w);
  if (up != want) { /* an inconsistency check_position could not see */
    sl__free(w.slot);
    return sl_set_error(SL_ECORRUPT,
                         "restore: corrupt state: shuffle at sample %llu "
                         "puts its upstream '%s' at %llu, the state at %llu",
                         (unsigned long long)k, sl_reader_name(s->up),
                         (unsigned long long)want, (unsigned long long)up);
  }
  int rc = refill(s, &w, how == REFILL_FETCH);
  if (rc == SL_OK) {
    s->count = w.count;
    s->pulled = w.pulled;
    s->up_ended = w.ended;
    s->pass = s->ends_from = pass;
    memcpy(s->rng, w.rng, sizeof s->rng);
  }
  sl__free(w.slot);
  return rc;
}

static void shuffle_identity(const sl_reader *r, void *st, char *buf,
                             size_t cap) {
  const shuffle_state *s = st;
  snprintf(buf, cap, "buffer_size=%zu seed=%llu", s->size,
           (unsigned long long)s->seed);
}

static const sl__stage_ops shuffle_ops = {
    .name = "shuffle",
    .next = shuffle_next,
    .reset = shuffle_reset,
    .destroy = shuffle_destroy,
    .length = sl__length_of_upstream,
    .save = shuffle_save,
    .restore = shuffle_restore,
    .identity = shuffle_identity,
    .check = shuffle_check,
    .budget = shuffle_budget,
};

int sl_shuffle(sl_reader *up, size_t buffer_size, uint64_t seed,
               sl_reader **out) {
  SL_DECORATOR_ARGS("shuffle", up, out);
  if (buffer_size == 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "shuffle: buffer_size must be >= 1"));
  shuffle_state *s = sl__decorator_state("shuffle", up, sizeof *s);
  if (!s) return SL_ENOMEM;
  s->size = buffer_size;
  s->seed = seed;
  seed_pass(s);
  return sl__stage_wrap(&shuffle_ops, s, NULL, &s->up, NULL, out);
}
