/*
 * cache.c - the first complete pass kept in memory and replayed (Paddle's
 * cache).
 *
 * Protocol: while the first pass runs, every upstream sample is retained in
 * a growable array as it passes through.  Complete: the cache holds the
 * whole first pass once upstream reports SL_EOF, or once it holds as many
 * samples as upstream's known length (sl_reader_length), or when a reset
 * finds upstream with nothing more (sl_reader_has_next is 0) - so a loop of
 * fixed steps that reads every sample but never asks past the last still
 * completes it.  Later passes replay the array (the same samples, retained
 * again) and never touch upstream, not even to reset it.  A reset before
 * the first pass is complete, including after an upstream error, discards
 * the partial cache and resets upstream, so caching starts over.
 *
 * Random access (sl__reader_fetch, for the samplers of sampler.c and a
 * shuffle's restore): position i is held sample i; a position not yet held
 * is read ahead from upstream (kept like any other).  `pos` counts the
 * samples handed out in every pass, so a pass under way that was read
 * ahead continues from the held samples before it pulls upstream again:
 * next yields what it would have without the fetch.
 *
 * The memory budget (sync/budget.h): every sample kept is charged to the
 * stage's account as it is kept (its upstream's carry claimed), without
 * waiting (the cache only shrinks when it is discarded), and stays charged
 * until discarded; a cache that would hold more than the budget ends the
 * pass with SL_ENOMEM naming it.  A sample handed out is the cached one
 * (a new reference, no copy): it is not made a carry, so a stage above
 * that keeps it (a batch's rows) counts its bytes a second time.
 */
#include "stages/stage.h"

typedef struct cache_state {
  sl_reader *up;
  sl_sample **items; /* the cached samples, each retained */
  size_t count, cap;
  bool complete;  /* the first pass was read whole (see "Complete") */
  uint64_t known; /* upstream's length when known, else UINT64_MAX */
  size_t pos;     /* samples handed out this pass (<= count) */
  /* the budget's account (set while a prefetch's worker may pull: atomic)
   * and the bytes charged to it for the samples kept */
  sl__budget_acct *_Atomic acct;
  uint64_t charged;
} cache_state;

static void cache_budget(void *st, sl__budget_acct *acct) {
  atomic_store_explicit(&((cache_state *)st)->acct, acct,
                        memory_order_release);
}

static void discard(cache_state *c) {
  for (size_t i = 0; i < c->count; i++)
    sl_sample_release(c->items[i]);
  c->count = 0;
  sl__budget_acct *a = atomic_load_explicit(&c->acct, memory_order_acquire);
  if (a && c->charged) sl__budget_release(a, c->charged);
  c->charged = 0;
}

/* Appends `s` (taking a new reference), doubling the array as needed. */
static int keep(cache_state *c, sl_sample *s) {
  if (c->count == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 64;
    SL_RETURN_ERROR_IF(cap < c->cap || cap > SIZE_MAX / sizeof *c->items,
                       SL_ENOMEM, "cache: cannot grow past %zu samples",
                       c->cap);
    sl_sample **items = sl__realloc(c->items, cap * sizeof *items);
    SL_RETURN_ERROR_IF(!items, SL_ENOMEM, "cache: cannot grow to %zu samples",
                       cap);
    c->items = items;
    c->cap = cap;
  }
  sl__budget_acct *a = atomic_load_explicit(&c->acct, memory_order_acquire);
  if (a) {
    uint64_t n = sl_sample_nbytes(s);
    SL_FORWARD_IF_ERROR(sl__budget_charge(a, n, c->count + 1));
    c->charged += n;
  }
  c->items[c->count++] = sl_sample_retain(s);
  return SL_OK;
}

static int cache_next(void *st, sl_sample **out) {
  cache_state *c = st;
  if (c->complete || c->pos < c->count) { /* held: replayed or read ahead */
    if (c->pos == c->count) return SL_EOF;
    *out = sl_sample_retain(c->items[c->pos++]);
    return SL_OK;
  }
  int rc = sl_reader_next(c->up, out);
  if (rc == SL_EOF) {
    c->complete = true;
    c->pos = c->count; /* this pass is over; the next replays from 0 */
    return SL_EOF;
  }
  if (rc < 0) return rc;
  rc = keep(c, *out);
  if (rc < 0) {
    sl_sample_release(*out);
    *out = NULL;
    return rc;
  }
  c->pos = c->count;
  if (c->count == c->known) { /* the whole pass, without asking for more */
    c->complete = true;
    c->pos = c->count;
  }
  return rc;
}

static int cache_reset(void *st) {
  cache_state *c = st;
  if (!c->complete && c->count > 0) {
    /* Every sample read but the end not asked for (a loop of fixed
     * steps): the pass is whole if upstream has nothing more. */
    int more = sl_reader_has_next(c->up);
    if (more == 0) c->complete = true;
  }
  if (c->complete) {
    c->pos = 0;
    return SL_OK;
  }
  discard(c);
  c->pos = 0;
  return sl_reader_reset(c->up);
}

static void cache_destroy(void *st) {
  cache_state *c = st;
  if (!c) return;
  discard(c);
  sl__free(c->items);
  sl__stage_free(c, c->up, NULL);
}

/* Saving never holds samples: the upstream is saved at the start of the
 * pass that fills the cache, and the restore reads it again - the first k
 * samples while filling, the whole pass once complete (docs/RESUME.md: a
 * cache costs one upstream pass to restore).  Payload: complete (0/1). */
static int cache_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                      sl__state_out *w) {
  cache_state *c = st;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, c->complete ? 1 : 0));
  return sl__state_save_up_replayed(w, c->up, sl__reader_pass(c->up), 0);
}

static int cache_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                         sl__state_in *in) {
  cache_state *c = st;
  uint64_t complete;
  discard(c);
  c->complete = false;
  c->pos = 0;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, c->up));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &complete));
  for (uint64_t i = 0; complete || i < k; i++) {
    sl_sample *s = NULL;
    int rc = sl_reader_next(c->up, &s);
    if (rc == SL_EOF && complete) break;
    if (rc == SL_EOF)
      return sl_set_error(SL_ECORRUPT,
                          "restore: cache: upstream ended after %llu samples, "
                          "the state needs %llu",
                          (unsigned long long)i, (unsigned long long)k);
    SL_FORWARD_IF_ERROR(rc);
    rc = keep(c, s);
    sl_sample_release(s);
    SL_FORWARD_IF_ERROR(rc);
  }
  if (complete) {
    SL_FORWARD_IF_ERROR(sl__state_check_at("cache", k, c->count));
    c->complete = true;
    c->pos = (size_t)k;
  } else {
    c->pos = c->count;
  }
  return SL_OK;
}

/* Random access (see the banner): reads ahead until position `pos` is
 * held (or upstream ends); upstream's errors are returned as they come
 * (the samples read ahead stay held, and the pass meets the same error
 * when it reaches them). */
static int cache_fetch(sl_reader *r, void *st, uint64_t pass, uint64_t pos,
                       sl_sample **out) {
  cache_state *c = st;
  if (!out) return SL_OK;
  while (!c->complete && pos >= c->count) {
    sl_sample *s = NULL;
    int rc = sl_reader_next(c->up, &s);
    if (rc == SL_EOF) {
      c->complete = true;
      break;
    }
    SL_FORWARD_IF_ERROR(rc);
    rc = keep(c, s);
    sl_sample_release(s);
    SL_FORWARD_IF_ERROR(rc);
    if (c->count == c->known) c->complete = true;
  }
  SL_RETURN_ERROR_IF(pos >= c->count, SL_ECORRUPT,
                     "cache: sample %llu is past its %zu samples",
                     (unsigned long long)pos, c->count);
  *out = sl_sample_retain(c->items[pos]);
  return SL_OK;
}

static const sl__stage_ops cache_ops = {
    .name = "cache",
    .budget = cache_budget,
    .next = cache_next,
    .reset = cache_reset,
    .destroy = cache_destroy,
    .length = sl__length_of_upstream,
    .save = cache_save,
    .restore = cache_restore,
    .fetch = cache_fetch,
};

int sl_cache(sl_reader *up, sl_reader **out) {
  SL_DECORATOR_ARGS("cache", up, out);
  cache_state *c = sl__decorator_state("cache", up, sizeof *c);
  if (!c) return SL_ENOMEM;
  uint64_t n;
  c->known = sl_reader_length(up, &n) == SL_OK ? n : UINT64_MAX;
  sl_clear_error(); /* an unknown length is no error here */
  return sl__stage_wrap(&cache_ops, c, NULL, &c->up, NULL, out);
}
