/*
 * reader_impl.h - helpers shared by the built-in sources and decorators.
 */
#ifndef SLUICE_READER_IMPL_H
#define SLUICE_READER_IMPL_H

#include "core/internal.h"
#include "core/stats.h"

typedef struct sl__stage_ops sl__stage_ops; /* stages/stage.h */

/* Common prologue of a decorator constructor: checks `out` and `up`, and on
 * failure destroys `up` (decorators take their upstream even when they fail)
 * and returns SL_EINVAL naming the stage. */
#define SL_DECORATOR_ARGS(stage, up, out)                                      \
  do {                                                                         \
    if (!(out)) {                                                              \
      sl_reader_destroy(up);                                                   \
      return sl_set_error(SL_EINVAL, stage ": NULL out pointer");              \
    }                                                                          \
    *(out) = NULL;                                                             \
    if (!(up)) return sl_set_error(SL_EINVAL, stage ": NULL upstream reader"); \
  } while (0)

/* Destroys `up` and returns `rc`, keeping the current error detail. */
static inline int sl__fail_with_upstream(sl_reader *up, int rc) {
  sl_reader_destroy(up);
  return rc;
}

/* sl__opts_copy for a decorator's constructor: copies the caller's `opts`
 * into `dst` (NULL: `dst` keeps its defaults); on failure destroys `up`
 * (decorators take their upstream even when they fail) and returns the
 * error.  SL_OK otherwise. */
static inline int sl__decorator_opts(sl_reader *up, const char *what, void *dst,
                                     size_t dst_size, const void *opts) {
  int rc = opts ? sl__opts_copy(what, dst, dst_size, opts) : SL_OK;
  return rc < 0 ? sl__fail_with_upstream(up, rc) : SL_OK;
}

/* Destroys readers[0..n) (each NULL-safe), for stages that own several
 * upstreams (chain, zip). */
static inline void sl__destroy_readers(sl_reader **readers, size_t n) {
  for (size_t i = 0; i < n; i++)
    sl_reader_destroy(readers[i]);
}

/* Resets readers[0..n) in order, stopping at the first failure (its code
 * and message are returned; the next reset tries them all again). */
static inline int sl__reset_readers(sl_reader **readers, size_t n) {
  for (size_t i = 0; i < n; i++)
    SL_FORWARD_IF_ERROR(sl_reader_reset(readers[i]));
  return SL_OK;
}

/* Common prologue of a stage taking an array of upstreams (chain, zip):
 * checks `out`, the array and every entry; on failure destroys all the
 * readers (the stage takes them even when it fails) and returns SL_EINVAL
 * naming `stage`.  Sets *out = NULL. */
static inline int sl__check_readers(const char *stage, sl_reader **readers,
                                    size_t n, sl_reader **out) {
  if (!out || !readers || n == 0) {
    if (readers) sl__destroy_readers(readers, n);
    if (out) *out = NULL;
    return sl_set_error(SL_EINVAL, "%s: %s", stage,
                        !out       ? "NULL out pointer"
                        : !readers ? "NULL reader array"
                                   : "needs at least one reader");
  }
  *out = NULL;
  for (size_t i = 0; i < n; i++) {
    if (!readers[i]) {
      sl__destroy_readers(readers, n);
      return sl_set_error(SL_EINVAL, "%s: reader %zu is NULL", stage, i);
    }
  }
  return SL_OK;
}

/* Makes `r` safe to call from several threads at once: sl_reader_next,
 * has_next and reset then run under one mutex held by the reader itself
 * (the implementation is never entered concurrently).  Returns SL_OK or
 * SL_ENOMEM.  Used by sl_threaded. */
int sl__reader_share(sl_reader *r);

/* Lengths (sl_reader_length).  A stage that knows how many samples one pass
 * of it yields without reading the pass has a `length` entry (stage.h).  The function gets the reader and its state, stores the count
 * in *n and returns SL_OK, or returns an error with a message
 * (SL_EUNSUPPORTED: not known).  It must only read what does not change
 * after construction (it may run beside next on another thread).  A stage
 * without one has no known length: filters, generators, parsers that may
 * skip lines, policies that skip bad input. */
typedef int (*sl__length_fn)(const sl_reader *r, void *state, uint64_t *n);
/* The length of upstream i of r (its statistics link), or SL_EUNSUPPORTED. */
int sl__upstream_length(const sl_reader *r, size_t i, uint64_t *n);
/* A length function for stages yielding exactly one sample per sample of
 * their one upstream (map, prefetch, shuffle, cache, threaded, ...). */
int sl__length_of_upstream(const sl_reader *r, void *state, uint64_t *n);

/* The C map and filter (map.c, filter.c), shared with their parallel form
 * (parallel.c).
 *   sl__map_call: runs fn on `in` (handed over), sample `index` of the
 *     pass, and checks its output against `want`: SL_OK with *out set, or
 *     the error the consumer sees (the callback's own message kept when it
 *     set one; "map: sample N: ..." otherwise and for a bad output).
 *   sl__filter_callback_error: a filter callback's negative rc (or SL_EOF)
 *     on sample `index` as the consumer sees it. */
int sl__map_call(sl_map_fn fn, void *ud, const sl_schema *want, sl_sample *in,
                 uint64_t index, sl_sample **out);
int sl__filter_callback_error(int rc, uint64_t index);

/* Stopping promptly (issue 19).  A stage with threads of its own sets, once
 * after construction, a function that asks them to stop without waiting
 * (any thread, idempotent until the stage restarts them; e.g.
 * sl__engine_signal_stop).  Before a reader is destroyed or reset, every
 * stage of its chain is signalled this way, top down, before any thread is
 * joined: a thread of a stage above that waits on a stage below (a
 * runaway Lua call with a deadline) is released at once instead of after
 * the call ends.  The stages' own reset / destroy then join and restart as
 * usual. */
typedef void (*sl__stop_signal_fn)(void *state);

/* r's state when r is a built-in stage whose next function is `next` and
 * that is not shared (sl__reader_share); else NULL.  For stages that
 * cooperate with the stage they wrap (prefetch over batch). */
typedef int (*sl__next_fn)(void *state, sl_sample **out);
void *sl__reader_state_of(sl_reader *r, sl__next_fn next);

/* sl_prefetch whose worker starts at a pass's first next (not at
 * construction, reset or restore) and is joined when that pass's end (or
 * error) is returned: a thread only while the reader is being read
 * (prefetch.c, "Lazy").  Ownership and errors as sl_prefetch. */
int sl__prefetch_lazy(sl_reader *up, size_t n, sl_reader **out);
/* The same with prefetch("auto")'s tuned depth (sl_prefetch_auto: at most
 * max_depth samples and max_bytes, 1..65536 and > 0): interleave's
 * read-ahead under threads = SL_THREADS_AUTO. */
int sl__prefetch_lazy_auto(sl_reader *up, unsigned max_depth,
                           uint64_t max_bytes, sl_reader **out);

/* A snapshot of one reader's statistics and links (stages/stats.c). */
typedef struct sl__reader_view {
  const char *name;
  sl_reader *const *ups;
  size_t nups;
  const sl__stage_counters *counters;
  uint64_t samples_out, next_ns;
  const struct sl__budget_acct *acct; /* the memory budget's, or NULL */
} sl__reader_view;
void sl__reader_view_of(const sl_reader *r, sl__reader_view *v);

/* Gives r and the readers below it (those without one) accounts of the
 * ledger of `a`, as sl__stage_new does for a stage made over a chain with
 * a budget: for a chain made apart from the one it feeds (an interleave's
 * source opened when its turn comes), so that its stages' buffers and
 * read-ahead count in that budget.  r does not own the ledger (its
 * destroy frees its accounts, releasing their charges, and does not close
 * it).  SL_OK, SL_EINVAL or SL_ENOMEM. */
int sl__reader_join_budget(sl_reader *r, const struct sl__budget_acct *a);

/* The most bytes r's memory budget held, all stages together, since it was
 * set or since the last reset_peak (tests: held never above the budget);
 * 0 without a budget. */
uint64_t sl__reader_budget_peak(const sl_reader *r);
/* The headroom its ledger learned so far (sync/budget.h); 0 without one. */
uint64_t sl__reader_budget_headroom(const sl_reader *r);
void sl__reader_budget_reset_peak(sl_reader *r);

#endif
