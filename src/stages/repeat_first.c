/*
 * repeat_first.c - the first sample of each pass, n times (Paddle's Fake
 * reader, used to time a pipeline's downstream without its sources).
 *
 * Protocol: the first next of a pass reads one sample from upstream and
 * keeps it; every next then yields it again (retained, the same sample) until
 * n have been yielded.  An empty upstream, or n = 0, gives an empty pass (n =
 * 0 without reading upstream at all).  Reset releases the kept sample and
 * resets upstream, so each pass repeats that pass's first sample.
 */
#include "stages/state.h"

typedef struct repeat_state {
  sl_reader *up;
  uint64_t n;       /* yields per pass */
  uint64_t given;   /* yields so far in this pass */
  sl_sample *first; /* this pass's first sample, or NULL before it is read */
} repeat_state;

static int repeat_next(void *st, sl_sample **out) {
  repeat_state *r = st;
  if (r->given >= r->n) return SL_EOF;
  if (!r->first) SL_FORWARD_IF_ERROR(sl_reader_next(r->up, &r->first));
  r->given++;
  *out = sl_sample_retain(r->first);
  return SL_OK;
}

static int repeat_reset(void *st) {
  repeat_state *r = st;
  sl_sample_release(r->first);
  r->first = NULL;
  r->given = 0;
  return sl_reader_reset(r->up);
}

static void repeat_destroy(void *st) {
  repeat_state *r = st;
  if (!r) return;
  sl_sample_release(r->first);
  sl_reader_destroy(r->up);
  sl__free(r);
}

/* n, or 0 when upstream is empty (or n is 0). */
static int repeat_length(const sl_reader *r, void *st, uint64_t *n) {
  uint64_t up = 0, k = ((repeat_state *)st)->n;
  if (k > 0) SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  *n = up > 0 ? k : 0;
  return SL_OK;
}

/* The upstream is saved at its start: the first sample is read again. */
static int repeat_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_out *w) {
  (void)r;
  (void)pass;
  repeat_state *s = st;
  if (k == 0) return sl__state_save_up(w, s->up, sl__reader_pass(s->up), 0);
  return sl__state_save_up_replayed(w, s->up, sl__reader_pass(s->up), 0);
}

static int repeat_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                          sl__state_in *in) {
  (void)r;
  (void)pass;
  repeat_state *s = st;
  sl_sample_release(s->first);
  s->first = NULL;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, s->up));
  SL_RETURN_ERROR_IF(k > s->n, SL_ECORRUPT,
                     "restore: repeat_first: position %llu is past its %llu "
                     "samples",
                     (unsigned long long)k, (unsigned long long)s->n);
  if (k > 0) SL_FORWARD_IF_ERROR(sl_reader_next(s->up, &s->first));
  s->given = k;
  return SL_OK;
}

static void repeat_identity(const sl_reader *r, void *st, char *buf,
                            size_t cap) {
  (void)r;
  snprintf(buf, cap, "n=%llu", (unsigned long long)((repeat_state *)st)->n);
}

static const sl__state_ops repeat_state_ops = {repeat_save, repeat_restore,
                                               repeat_identity};

static const sl_reader_vtable repeat_vt = {"repeat_first", repeat_next,
                                           repeat_reset, repeat_destroy};

int sl_repeat_first(sl_reader *up, uint64_t n, sl_reader **out) {
  SL_DECORATOR_ARGS("repeat_first", up, out);
  repeat_state *r = sl__calloc(1, sizeof *r);
  if (!r)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "repeat_first: cannot allocate"));
  r->up = up;
  r->n = n;
  /* Hold the schema ourselves: a failing sl_reader_new destroys `up`. */
  sl_schema *schema = sl_schema_retain((sl_schema *)sl_reader_schema(up));
  int rc = sl__decorator_make(&repeat_vt, r, schema, &r->up, NULL, out);
  sl_schema_release(schema);
  if (rc == SL_OK) {
    sl__reader_set_length(*out, repeat_length);
    sl__reader_set_state_ops(*out, &repeat_state_ops);
  }
  return rc;
}
