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
#include "stages/stage.h"

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
  if (t) sl__stage_free(t, t->up, NULL);
}

static const sl__stage_ops threaded_ops = {
    .name = "threaded",
    .next = threaded_next,
    .reset = threaded_reset,
    .destroy = threaded_destroy,
    SL__STAGE_1TO1,
};

int sl_threaded(sl_reader *up, sl_reader **out) {
  SL_DECORATOR_ARGS("threaded", up, out);
  threaded_state *t = sl__decorator_state("threaded", up, sizeof *t);
  if (!t) return SL_ENOMEM;
  SL_FORWARD_IF_ERROR(sl__stage_wrap(&threaded_ops, t, NULL, &t->up, NULL, out));
  int rc = sl__reader_share(*out);
  if (rc < 0) {
    sl_reader_destroy(*out); /* destroys up too */
    *out = NULL;
  }
  return rc;
}
