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
 */
#include "stages/state.h"

typedef struct multi_pass_state {
  sl_reader *up;
  uint64_t k;     /* passes per pass of ours, >= 1 */
  uint64_t done;  /* upstream passes ended in this pass */
  uint64_t given; /* samples yielded in this pass */
  /* ends[j]: samples yielded when upstream pass j of this pass ended
   * (done entries, room for cap), to place a saved position. */
  uint64_t *ends;
  size_t cap;
} multi_pass_state;

static int note_end(multi_pass_state *m) {
  if (m->done == m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 8;
    uint64_t *e = sl__realloc(m->ends, cap * sizeof *e);
    SL_RETURN_ERROR_IF(!e, SL_ENOMEM, "multi_pass: out of memory");
    m->ends = e;
    m->cap = cap;
  }
  m->ends[m->done++] = m->given;
  return SL_OK;
}

static int multi_pass_next(void *st, sl_sample **out) {
  multi_pass_state *m = st;
  for (;;) {
    int rc = sl_reader_next(m->up, out);
    if (rc == SL_OK) m->given++;
    if (rc != SL_EOF) return rc; /* a sample, or upstream's error */
    uint64_t before = m->done ? m->ends[m->done - 1] : 0;
    SL_FORWARD_IF_ERROR(note_end(m));
    if (m->done >= m->k) return SL_EOF;
    if (m->k == SL_PASSES_FOREVER && m->given == before) return SL_EOF;
    SL_FORWARD_IF_ERROR(sl_reader_reset(m->up));
  }
}

static int multi_pass_reset(void *st) {
  multi_pass_state *m = st;
  m->done = 0;
  m->given = 0;
  return sl_reader_reset(m->up);
}

static void multi_pass_destroy(void *st) {
  multi_pass_state *m = st;
  if (!m) return;
  sl_reader_destroy(m->up);
  sl__free(m->ends);
  sl__free(m);
}

static int multi_pass_length(const sl_reader *r, void *st, uint64_t *n) {
  uint64_t up, k = ((multi_pass_state *)st)->k;
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
  (void)r;
  (void)pass;
  multi_pass_state *m = st;
  uint64_t j = 0;
  while (j < m->done && m->ends[j] <= k && j + 1 < m->k)
    j++;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, j));
  for (uint64_t i = 0; i < j; i++)
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, m->ends[i]));
  /* Upstream passes are counted from now back to pass j of this pass. */
  uint64_t up_pass =
      sl__reader_pass(m->up) - (m->done < m->k ? m->done : m->k - 1) + j;
  return sl__state_save_up(w, m->up, up_pass, k - (j ? m->ends[j - 1] : 0));
}

static int multi_pass_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                              sl__state_in *in) {
  (void)r;
  (void)pass;
  multi_pass_state *m = st;
  uint64_t j;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, m->up));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &j));
  SL_RETURN_ERROR_IF(j >= m->k, SL_ECORRUPT,
                     "restore: multi_pass: upstream pass %llu of %llu",
                     (unsigned long long)j, (unsigned long long)m->k);
  m->done = 0;
  m->given = 0;
  for (uint64_t i = 0; i < j; i++) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &m->given));
    SL_FORWARD_IF_ERROR(note_end(m));
  }
  m->given = k;
  return SL_OK;
}

static void multi_pass_identity(const sl_reader *r, void *st, char *buf,
                                size_t cap) {
  (void)r;
  snprintf(buf, cap, "k=%llu", (unsigned long long)((multi_pass_state *)st)->k);
}

static const sl__state_ops multi_pass_state_ops = {
    multi_pass_save, multi_pass_restore, multi_pass_identity};

static const sl_reader_vtable multi_pass_vt = {
    "multi_pass", multi_pass_next, multi_pass_reset, multi_pass_destroy};

int sl_multi_pass(sl_reader *up, uint64_t k, sl_reader **out) {
  SL_DECORATOR_ARGS("multi_pass", up, out);
  if (k == 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "multi_pass: k must be >= 1"));
  multi_pass_state *m = sl__calloc(1, sizeof *m);
  if (!m)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "multi_pass: cannot allocate"));
  m->up = up;
  m->k = k;
  /* Hold the schema ourselves: a failing sl_reader_new destroys `up`. */
  sl_schema *schema = sl_schema_retain((sl_schema *)sl_reader_schema(up));
  int rc = sl__decorator_make(&multi_pass_vt, m, schema, &m->up, NULL, out);
  sl_schema_release(schema);
  if (rc == SL_OK) {
    sl__reader_set_length(*out, multi_pass_length);
    sl__reader_set_state_ops(*out, &multi_pass_state_ops);
  }
  return rc;
}
