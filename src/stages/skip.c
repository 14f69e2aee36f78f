/*
 * skip.c - each pass without its first n samples.
 *
 * Protocol: the first next of a pass reads and releases n samples (fewer if
 * upstream ends or fails first, which then ends the pass the same way), then
 * samples pass through unchanged.  Reset starts the count over and resets
 * upstream.
 */
#include "stages/stage.h"

typedef struct skip_state {
  sl_reader *up;
  uint64_t n;       /* samples to drop per pass */
  uint64_t skipped; /* samples dropped in this pass */
} skip_state;

static int skip_next(void *st, sl_sample **out) {
  skip_state *k = st;
  while (k->skipped < k->n) {
    sl_sample *s;
    int rc = sl_reader_next(k->up, &s);
    if (rc != SL_OK) return rc; /* upstream ended or failed while skipping */
    sl_sample_release(s);
    k->skipped++;
  }
  return sl_reader_next(k->up, out);
}

static int skip_reset(void *st) {
  skip_state *k = st;
  k->skipped = 0;
  return sl_reader_reset(k->up);
}

static void skip_destroy(void *st) {
  skip_state *k = st;
  if (!k) return;
  sl_reader_destroy(k->up);
  sl__free(k);
}

static int skip_length(const sl_reader *r, void *st, uint64_t *n) {
  uint64_t up;
  SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  uint64_t k = ((skip_state *)st)->n;
  *n = up > k ? up - k : 0;
  return SL_OK;
}

/* Payload: the samples dropped before the position (n once any sample has
 * been yielded). */
static int skip_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                     sl__state_out *w) {
  skip_state *s = st;
  uint64_t dropped = k > 0 ? s->n : s->skipped;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, dropped));
  return sl__state_save_up(w, s->up, sl__reader_pass(s->up), dropped + k);
}

static int skip_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  skip_state *s = st;
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
  s->skipped = dropped;
  return SL_OK;
}

static void skip_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  snprintf(buf, cap, "n=%llu", (unsigned long long)((skip_state *)st)->n);
}

static const sl__stage_ops skip_ops = {
    .name = "skip",
    .next = skip_next,
    .reset = skip_reset,
    .destroy = skip_destroy,
    .length = skip_length,
    .save = skip_save,
    .restore = skip_restore,
    .identity = skip_identity,
};

int sl_skip(sl_reader *up, uint64_t n, sl_reader **out) {
  SL_DECORATOR_ARGS("skip", up, out);
  skip_state *k = sl__calloc(1, sizeof *k);
  if (!k)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "skip: cannot allocate"));
  k->up = up;
  k->n = n;
  return sl__stage_wrap(&skip_ops, k, NULL, &k->up, NULL, out);
}
