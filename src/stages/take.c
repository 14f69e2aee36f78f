/*
 * take.c - the first n samples of each pass (Paddle's firstn).
 *
 * Protocol: samples pass through until n have been yielded in this pass; then
 * SL_EOF without reading upstream again, so take(n) over an endless or
 * expensive source pulls exactly n samples.  n = 0 gives empty passes.
 * Reset starts the count over and resets upstream.
 */
#include "stages/state.h"

typedef struct take_state {
  sl_reader *up;
  uint64_t n;     /* samples per pass */
  uint64_t taken; /* samples yielded in this pass */
} take_state;

static int take_next(void *st, sl_sample **out) {
  take_state *t = st;
  if (t->taken >= t->n) return SL_EOF;
  int rc = sl_reader_next(t->up, out);
  if (rc == SL_OK) t->taken++;
  return rc;
}

static int take_reset(void *st) {
  take_state *t = st;
  t->taken = 0;
  return sl_reader_reset(t->up);
}

static void take_destroy(void *st) {
  take_state *t = st;
  if (!t) return;
  sl_reader_destroy(t->up);
  sl__free(t);
}

/* min(n, upstream's); n alone when upstream's is not known but n is 0. */
static int take_length(const sl_reader *r, void *st, uint64_t *n) {
  take_state *t = st;
  uint64_t up = 0;
  if (t->n > 0) SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  *n = up < t->n ? up : t->n;
  return SL_OK;
}

static int take_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  (void)r;
  (void)pass;
  take_state *t = st;
  SL_FORWARD_IF_ERROR(sl__state_restore_up_at(in, t->up, k));
  SL_RETURN_ERROR_IF(k > t->n, SL_ECORRUPT,
                     "restore: take: position %llu is past its %llu samples",
                     (unsigned long long)k, (unsigned long long)t->n);
  t->taken = k;
  return SL_OK;
}

static void take_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  (void)r;
  snprintf(buf, cap, "n=%llu", (unsigned long long)((take_state *)st)->n);
}

static const sl__state_ops take_state_ops = {sl__state_save_1to1, take_restore,
                                             take_identity};

static const sl_reader_vtable take_vt = {"take", take_next, take_reset,
                                         take_destroy};

int sl_take(sl_reader *up, uint64_t n, sl_reader **out) {
  SL_DECORATOR_ARGS("take", up, out);
  take_state *t = sl__calloc(1, sizeof *t);
  if (!t)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "take: cannot allocate"));
  t->up = up;
  t->n = n;
  /* Hold the schema ourselves: a failing sl_reader_new destroys `up`. */
  sl_schema *schema = sl_schema_retain((sl_schema *)sl_reader_schema(up));
  int rc = sl__decorator_make(&take_vt, t, schema, &t->up, NULL, out);
  sl_schema_release(schema);
  if (rc == SL_OK) {
    sl__reader_set_length(*out, take_length);
    sl__reader_set_state_ops(*out, &take_state_ops);
  }
  return rc;
}
