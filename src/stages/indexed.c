/* indexed.c - the ops of an indexed source (indexed.h). */
#include "stages/indexed.h"

int sl__indexed_next(void *st, sl_sample **out) {
  sl__indexed *x = st;
  if (x->pos >= x->n) return SL_EOF;
  int rc = x->get(st, x->pos, out);
  if (rc == SL_OK) x->pos++;
  return rc;
}

int sl__indexed_reset(void *st) {
  ((sl__indexed *)st)->pos = 0;
  return SL_OK;
}

int sl__indexed_length(const sl_reader *r, void *st, uint64_t *n) {
  *n = ((const sl__indexed *)st)->n;
  return SL_OK;
}

int sl__indexed_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                     sl__state_out *w) {
  sl__indexed *x = st;
  return x->put ? x->put(st, w) : SL_OK;
}

int sl__indexed_check(const sl_reader *r, void *st, sl__state_in *in) {
  sl__indexed *x = st;
  return x->check ? x->check(st, in) : SL_OK;
}

/* "STAGE NAME: sample|position K is past its N UNIT" */
static int past(const sl__indexed *x, const char *pre, const char *what,
                uint64_t k) {
  return sl_set_error(SL_ECORRUPT, "%s%s%s%s: %s %llu is past its %llu %s", pre,
                      x->stage, x->name ? " " : "", x->name ? x->name : "",
                      what, (unsigned long long)k, (unsigned long long)x->n,
                      x->unit);
}

int sl__indexed_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  sl__indexed *x = st;
  SL_FORWARD_IF_ERROR(sl__indexed_check(r, st, in));
  if (k > x->n) return past(x, "restore: ", "position", k);
  x->pos = k;
  return SL_OK;
}

int sl__indexed_fetch(sl_reader *r, void *st, uint64_t pass, uint64_t pos,
                      sl_sample **out) {
  sl__indexed *x = st;
  if (!out) return SL_OK;
  if (pos >= x->n) return past(x, "", "sample", pos);
  return x->get(st, pos, out);
}
