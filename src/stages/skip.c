/*
 * skip.c - each pass without its first n samples.
 *
 * Protocol: the first next of a pass reads and releases n samples (fewer if
 * upstream ends or fails first, which then ends the pass the same way), then
 * samples pass through unchanged.  Reset starts the count over and resets
 * upstream.  A counting stage (stage.h): count is the samples dropped in
 * this pass.
 */
#include "stages/stage.h"

static int skip_next(void *st, sl_sample **out) {
  sl__count *k = st;
  while (k->count < k->n) {
    sl_sample *s;
    int rc = sl_reader_next(k->up, &s);
    if (rc != SL_OK) return rc; /* upstream ended or failed while skipping */
    sl_sample_release(s);
    k->count++;
  }
  return sl_reader_next(k->up, out);
}

static int skip_length(const sl_reader *r, void *st, uint64_t *n) {
  uint64_t up;
  SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  uint64_t k = ((sl__count *)st)->n;
  *n = up > k ? up - k : 0;
  return SL_OK;
}

/* Payload: the samples dropped before the position (n once any sample has
 * been yielded). */
static int skip_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                     sl__state_out *w) {
  sl__count *s = st;
  uint64_t dropped = k > 0 ? s->n : s->count;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, dropped));
  return sl__state_save_up(w, s->up, sl__state_up_pass(r, s->up, pass),
                           dropped + k);
}

static int skip_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  sl__count *s = st;
  uint64_t dropped;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &dropped));
  SL_RETURN_ERROR_IF(dropped > s->n || (k > 0 && dropped != s->n) ||
                         k > UINT64_MAX - dropped,
                     SL_ECORRUPT,
                     "restore: skip: %llu samples dropped at position %llu, "
                     "its n is %llu",
                     (unsigned long long)dropped, (unsigned long long)k,
                     (unsigned long long)s->n);
  SL_FORWARD_IF_ERROR(sl__state_restore_up_at(in, s->up, dropped + k));
  s->count = dropped;
  return SL_OK;
}

static const sl__stage_ops skip_ops = {
    .name = "skip",
    .next = skip_next,
    .reset = sl__count_reset,
    .destroy = sl__count_destroy,
    .length = skip_length,
    .save = skip_save,
    .restore = skip_restore,
    .identity = sl__count_identity,
};

int sl_skip(sl_reader *up, uint64_t n, sl_reader **out) {
  return sl__count_new(&skip_ops, sizeof(sl__count), up, n, out);
}
