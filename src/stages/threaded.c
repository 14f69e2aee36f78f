/*
 * threaded.c - sl_threaded: a reader that several consumer threads may pull
 * at once (Paddle's ThreadedReader).  Each sample goes to exactly one caller.
 *
 * Protocol: the returned reader is made shareable (sl__reader_share), so the
 * reader base takes one mutex around every sl_reader_next, has_next and
 * reset on it.  That mutex guards both the base's own state (its EOF latch,
 * sticky error and has_next peek, which a lock inside this file could not
 * reach) and every call below into the upstream, which is therefore never
 * entered by two threads at once.  Errors are raised, and sticky errors
 * restored, on the calling thread's own detail slot, so each caller sees the
 * code and the message.
 *
 * Invariants:
 *   up   owned; used only under the base mutex of the threaded reader
 *        (destroy: no thread may be using the reader any more, as for every
 *        reader).
 *
 * Each call is atomic, a sequence of calls is not: after has_next returns 1
 * another thread may take the peeked sample, and next then returns the
 * following sample or SL_EOF.  Concurrent consumers should call next only and
 * treat SL_EOF as the end of the pass; a reset while other threads still pull
 * cuts their pass at an arbitrary point.
 */
#include "stages/state.h"

typedef struct threaded_state {
  sl_reader *up;
} threaded_state;

static int threaded_next(void *st, sl_sample **out) {
  return sl_reader_next(((threaded_state *)st)->up, out);
}

static int threaded_reset(void *st) {
  return sl_reader_reset(((threaded_state *)st)->up);
}

static void threaded_destroy(void *st) {
  threaded_state *t = st;
  if (!t) return;
  sl_reader_destroy(t->up);
  sl__free(t);
}

static const sl__state_ops threaded_state_ops = SL__STATE_OPS_1TO1;

static const sl_reader_vtable threaded_vt = {"threaded", threaded_next,
                                             threaded_reset, threaded_destroy};

int sl_threaded(sl_reader *up, sl_reader **out) {
  SL_DECORATOR_ARGS("threaded", up, out);
  threaded_state *t = sl__calloc(1, sizeof *t);
  if (!t)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "threaded: cannot allocate"));
  t->up = up;
  /* The schema is frozen and refcounted atomically: retaining it through the
   * const accessor is safe. */
  SL_FORWARD_IF_ERROR(sl__decorator_make_1to1(
      &threaded_vt, t, (sl_schema *)sl_reader_schema(up), &t->up, NULL, out));
  sl__reader_set_state_ops(*out, &threaded_state_ops);
  int rc = sl__reader_share(*out);
  if (rc < 0) {
    sl_reader_destroy(*out); /* destroys up too */
    *out = NULL;
  }
  return rc;
}
