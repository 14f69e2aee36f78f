/*
 * repeat_first.c - the first sample of each pass, n times (Paddle's Fake
 * reader, used to time a pipeline's downstream without its sources).
 *
 * Protocol: the first next of a pass reads one sample from upstream and
 * keeps it; every next then yields it again (retained, the same sample) until
 * n have been yielded.  An empty upstream, or n = 0, gives an empty pass (n =
 * 0 without reading upstream at all).  Reset releases the kept sample and
 * resets upstream, so each pass repeats that pass's first sample.  A
 * counting stage (stage.h): count is the yields in this pass.
 */
#include "stages/stage.h"

typedef struct repeat_state {
  sl__count c;      /* n yields per pass; count: yields so far */
  sl_sample *first; /* this pass's first sample, or NULL before it is read */
} repeat_state;

static int repeat_next(void *st, sl_sample **out) {
  repeat_state *r = st;
  if (r->c.count >= r->c.n) return SL_EOF;
  if (!r->first) SL_FORWARD_IF_ERROR(sl_reader_next(r->c.up, &r->first));
  r->c.count++;
  *out = sl_sample_retain(r->first);
  return SL_OK;
}

static int repeat_reset(void *st) {
  repeat_state *r = st;
  sl_sample_release(r->first);
  r->first = NULL;
  return sl__count_reset(st);
}

static void repeat_destroy(void *st) {
  repeat_state *r = st;
  if (r) sl_sample_release(r->first);
  sl__count_destroy(st);
}

/* n, or 0 when upstream is empty (or n is 0). */
static int repeat_length(const sl_reader *r, void *st, uint64_t *n) {
  uint64_t up = 0, k = ((repeat_state *)st)->c.n;
  if (k > 0) SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  *n = up > 0 ? k : 0;
  return SL_OK;
}

/* The upstream is saved at its start: the first sample is read again. */
static int repeat_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_out *w) {
  sl_reader *up = ((repeat_state *)st)->c.up;
  uint64_t up_pass = sl__state_up_pass(r, up, pass);
  if (k == 0) return sl__state_save_up(w, up, up_pass, 0);
  return sl__state_save_up_replayed(w, up, up_pass, 0);
}

static int repeat_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                          sl__state_in *in) {
  repeat_state *s = st;
  sl_sample_release(s->first);
  s->first = NULL;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, s->c.up));
  SL_FORWARD_IF_ERROR(sl__state_check_at("repeat_first", k, s->c.n));
  if (k > 0) SL_FORWARD_IF_ERROR(sl_reader_next(s->c.up, &s->first));
  s->c.count = k;
  return SL_OK;
}

static const sl__stage_ops repeat_ops = {
    .name = "repeat_first",
    .next = repeat_next,
    .reset = repeat_reset,
    .destroy = repeat_destroy,
    .length = repeat_length,
    .save = repeat_save,
    .restore = repeat_restore,
    .identity = sl__count_identity,
};

int sl_repeat_first(sl_reader *up, uint64_t n, sl_reader **out) {
  return sl__count_new(&repeat_ops, sizeof(repeat_state), up, n, out);
}
