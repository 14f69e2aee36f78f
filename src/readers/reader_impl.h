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

/* Makes `r` safe to call from several threads at once: sl_reader_next,
 * has_next and reset then run under one mutex held by the reader itself
 * (the implementation is never entered concurrently).  Returns SL_OK or
 * SL_ENOMEM.  Used by sl_threaded. */
int sl__reader_share(sl_reader *r);

#endif
