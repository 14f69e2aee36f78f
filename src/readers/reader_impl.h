/*
 * reader_impl.h - helpers shared by the built-in sources and decorators.
 */
#ifndef SLUICE_READER_IMPL_H
#define SLUICE_READER_IMPL_H

#include "core/internal.h"

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

/* sl_reader_new for built-in stages: on failure the vtable's destroy has
 * already freed `state` (and the upstreams it owns); returns SL_OK or the
 * error. */
static inline int sl__reader_make(const sl_reader_vtable *vt, void *state,
                                  sl_schema *schema, sl_reader **out) {
  *out = sl_reader_new(vt, state, schema);
  return *out ? SL_OK : sl_last_error_code();
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

#endif
