/*
 * multi_pass.c - k passes of the upstream as one pass (Paddle's
 * MultiPassReader).
 *
 * Protocol: samples pass through unchanged.  When upstream reports SL_EOF and
 * fewer than k of its passes have ended, the stage resets it and keeps
 * reading; the k-th SL_EOF is ours.  An empty upstream therefore ends after k
 * empty passes, and k = 1 never resets upstream (a one-shot source works).
 * Reset starts the count over and resets upstream.
 *
 * k = SL_PASSES_FOREVER repeats forever, except that an upstream pass that
 * yields nothing ends our pass (and a reset starts again): an empty or
 * exhausted upstream ends instead of spinning through empty passes.
 *
 * A counting stage (stage.h): n is k, count the samples yielded in this
 * pass.
 */
#include "stages/stage.h"

typedef struct multi_pass_state {
  sl__count c;   /* n: k, passes per pass of ours, >= 1; count: yielded */
  size_t done;   /* upstream passes ended in this pass */
  /* ends[j]: samples yielded when upstream pass j of this pass ended
   * (done entries, room for cap), to place a saved position. */
  uint64_t *ends;
  size_t cap;
} multi_pass_state;

static int note_end(multi_pass_state *m) {
  int rc = sl__state_push_u64(&m->ends, &m->done, &m->cap, m->c.count);
  return rc < 0 ? sl_wrap_error(rc, "multi_pass") : rc;
}

static int multi_pass_next(void *st, sl_sample **out) {
  multi_pass_state *m = st;
  for (;;) {
    int rc = sl_reader_next(m->c.up, out);
    if (rc == SL_OK) m->c.count++;
    if (rc != SL_EOF) return rc; /* a sample, or upstream's error */
    uint64_t before = m->done ? m->ends[m->done - 1] : 0;
    SL_FORWARD_IF_ERROR(note_end(m));
    if (m->done >= m->c.n) return SL_EOF;
    if (m->c.n == SL_PASSES_FOREVER && m->c.count == before) return SL_EOF;
    SL_FORWARD_IF_ERROR(sl_reader_reset(m->c.up));
  }
}

static int multi_pass_reset(void *st) {
  ((multi_pass_state *)st)->done = 0;
  return sl__count_reset(st);
}

static void multi_pass_destroy(void *st) {
  multi_pass_state *m = st;
  if (m) sl__free(m->ends);
  sl__count_destroy(st);
}

static int multi_pass_length(const sl_reader *r, void *st, uint64_t *n) {
  uint64_t up, k = ((multi_pass_state *)st)->c.n;
  SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  if (k == SL_PASSES_FOREVER) {
    SL_RETURN_ERROR_IF(up > 0, SL_EUNSUPPORTED,
                       "multi_pass: repeats %llu samples forever",
                       (unsigned long long)up);
    *n = 0;
    return SL_OK;
  }
  SL_RETURN_ERROR_IF(up > UINT64_MAX / k, SL_EUNSUPPORTED,
                     "multi_pass: %llu passes of %llu samples do not fit "
                     "64 bits",
                     (unsigned long long)k, (unsigned long long)up);
  *n = up * k;
  return SL_OK;
}

/* Output k lies in upstream pass j (j upstream passes of this pass ended
 * at or before it).  Payload: j and the ends before it. */
static int multi_pass_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                           sl__state_out *w) {
  multi_pass_state *m = st;
  SL_RETURN_ERROR_IF(pass != sl__reader_pass(r), SL_EUNSUPPORTED,
                     "save: multi_pass: the position is in its pass %llu, "
                     "it is in pass %llu now (a repeat or mix above reset "
                     "it while the stages above still hold its outputs): "
                     "only this pass's ends are kept",
                     (unsigned long long)pass,
                     (unsigned long long)sl__reader_pass(r));
  uint64_t j = 0;
  while (j < m->done && m->ends[j] <= k && j + 1 < m->c.n)
    j++;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, j));
  for (uint64_t i = 0; i < j; i++)
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, m->ends[i]));
  /* Upstream passes are counted from now back to pass j of this pass. */
  uint64_t up_pass =
      sl__reader_pass(m->c.up) - (m->done < m->c.n ? m->done : m->c.n - 1) + j;
  return sl__state_save_up(w, m->c.up, up_pass, k - (j ? m->ends[j - 1] : 0));
}

static int multi_pass_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                              sl__state_in *in) {
  multi_pass_state *m = st;
  uint64_t j;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, m->c.up));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &j));
  SL_RETURN_ERROR_IF(j >= m->c.n, SL_ECORRUPT,
                     "restore: multi_pass: upstream pass %llu of %llu",
                     (unsigned long long)j, (unsigned long long)m->c.n);
  m->done = 0;
  m->c.count = 0;
  for (uint64_t i = 0; i < j; i++) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &m->c.count));
    SL_FORWARD_IF_ERROR(note_end(m));
  }
  m->c.count = k;
  return SL_OK;
}

static void multi_pass_identity(const sl_reader *r, void *st, char *buf,
                                size_t cap) {
  snprintf(buf, cap, "k=%llu", (unsigned long long)((multi_pass_state *)st)->c.n);
}

static const sl__stage_ops multi_pass_ops = {
    .name = "multi_pass",
    .next = multi_pass_next,
    .reset = multi_pass_reset,
    .destroy = multi_pass_destroy,
    .length = multi_pass_length,
    .save = multi_pass_save,
    .restore = multi_pass_restore,
    .identity = multi_pass_identity,
};

int sl_multi_pass(sl_reader *up, uint64_t k, sl_reader **out) {
  SL_DECORATOR_ARGS("multi_pass", up, out);
  if (k == 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "multi_pass: k must be >= 1"));
  return sl__count_new(&multi_pass_ops, sizeof(multi_pass_state), up, k, out);
}
