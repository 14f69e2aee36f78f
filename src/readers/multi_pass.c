/*
 * multi_pass.c - k passes of the upstream as one pass (Paddle's
 * MultiPassReader).
 *
 * Protocol: samples pass through unchanged.  When upstream reports SL_EOF and
 * fewer than k of its passes have ended, the stage resets it and keeps
 * reading; the k-th SL_EOF is ours.  An empty upstream therefore ends after k
 * empty passes, and k = 1 never resets upstream (a one-shot source works).
 * Reset starts the count over and resets upstream.
 */
#include "readers/reader_impl.h"

typedef struct multi_pass_state {
  sl_reader *up;
  uint64_t k;    /* passes per pass of ours, >= 1 */
  uint64_t done; /* upstream passes ended in this pass */
} multi_pass_state;

static int multi_pass_next(void *st, sl_sample **out) {
  multi_pass_state *m = st;
  for (;;) {
    int rc = sl_reader_next(m->up, out);
    if (rc != SL_EOF) return rc; /* a sample, or upstream's error */
    if (++m->done >= m->k) return SL_EOF;
    SL_FORWARD_IF_ERROR(sl_reader_reset(m->up));
  }
}

static int multi_pass_reset(void *st) {
  multi_pass_state *m = st;
  m->done = 0;
  return sl_reader_reset(m->up);
}

static void multi_pass_destroy(void *st) {
  multi_pass_state *m = st;
  if (!m) return;
  sl_reader_destroy(m->up);
  sl__free(m);
}

static int multi_pass_length(const sl_reader *r, void *st, uint64_t *n) {
  uint64_t up, k = ((multi_pass_state *)st)->k;
  SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  SL_RETURN_ERROR_IF(up > UINT64_MAX / k, SL_EUNSUPPORTED,
                     "multi_pass: %llu passes of %llu samples do not fit "
                     "64 bits",
                     (unsigned long long)k, (unsigned long long)up);
  *n = up * k;
  return SL_OK;
}

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
  if (rc == SL_OK) sl__reader_set_length(*out, multi_pass_length);
  return rc;
}
