/*
 * take.c - the first n samples of each pass (Paddle's firstn).
 *
 * Protocol: samples pass through until n have been yielded in this pass; then
 * SL_EOF without reading upstream again, so take(n) over an endless or
 * expensive source pulls exactly n samples.  n = 0 gives empty passes.
 * Reset starts the count over and resets upstream.  A counting stage
 * (stage.h): count is the samples yielded in this pass.
 */
#include "stages/stage.h"

static int take_next(void *st, sl_sample **out) {
  sl__count *t = st;
  if (t->count >= t->n) return SL_EOF;
  int rc = sl_reader_next(t->up, out);
  if (rc == SL_OK) t->count++;
  return rc;
}

/* min(n, upstream's); n alone when upstream's is not known but n is 0. */
static int take_length(const sl_reader *r, void *st, uint64_t *n) {
  sl__count *t = st;
  uint64_t up = 0;
  if (t->n > 0) SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  *n = up < t->n ? up : t->n;
  return SL_OK;
}

static int take_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  sl__count *t = st;
  SL_FORWARD_IF_ERROR(sl__state_restore_up_at(in, t->up, k));
  SL_FORWARD_IF_ERROR(sl__state_check_at("take", k, t->n));
  t->count = k;
  return SL_OK;
}

static const sl__stage_ops take_ops = {
    .name = "take",
    .next = take_next,
    .reset = sl__count_reset,
    .destroy = sl__count_destroy,
    .length = take_length,
    .save = sl__state_save_1to1,
    .restore = take_restore,
    .identity = sl__count_identity,
};

int sl_take(sl_reader *up, uint64_t n, sl_reader **out) {
  return sl__count_new(&take_ops, sizeof(sl__count), up, n, out);
}
