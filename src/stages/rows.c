/*
 * rows.c - the batches a fused map fills row by row (rows.h has the
 * protocol).
 */
#include "stages/rows.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct slot {
  uint64_t k;   /* the batch's number in the pass */
  sl_sample *b; /* NULL: free */
} slot;

struct sl__rows {
  const sl_schema *in;
  sl_schema *out;
  size_t n;
  sl__buffer_pool *pool;
  int nfields;
  size_t *row; /* bytes of one row, per field */
  bool *unique; /* no other field has the same dtype and row size */
  pthread_mutex_t mu;
  slot *slots;
  size_t nslots;
  sl__stage_counters *c; /* the map's */
};

int sl__rows_new(const sl_schema *in, sl_schema *out, size_t n,
                 sl__buffer_pool *pool, sl__rows **r) {
  sl__rows *t = sl__calloc(1, sizeof *t);
  int nf = sl_schema_nfields(in);
  if (t) t->row = sl__calloc(nf ? (size_t)nf : 1, sizeof *t->row);
  if (t) t->unique = sl__calloc(nf ? (size_t)nf : 1, sizeof *t->unique);
  if (!t || !t->row || !t->unique || pthread_mutex_init(&t->mu, NULL) != 0) {
    if (t) sl__free(t->row);
    if (t) sl__free(t->unique);
    sl__free(t);
    return sl_set_error(SL_ENOMEM, "batch: cannot allocate its fused rows");
  }
  t->in = in;
  t->out = sl_schema_retain(out);
  t->n = n;
  t->pool = pool;
  t->nfields = nf;
  for (int i = 0; i < nf; i++) {
    size_t bytes = sl_dtype_size(sl_schema_field_dtype(in, i));
    const int64_t *dims = sl_schema_field_shape(in, i);
    for (int d = 0; d < sl_schema_field_rank(in, i); d++)
      bytes *= (size_t)dims[d];
    t->row[i] = bytes;
  }
  for (int i = 0; i < nf; i++) {
    t->unique[i] = t->row[i] > 0;
    for (int j = 0; j < nf; j++)
      if (j != i && t->row[j] == t->row[i] &&
          sl_schema_field_dtype(in, j) == sl_schema_field_dtype(in, i))
        t->unique[i] = false;
  }
  *r = t;
  return SL_OK;
}

void sl__rows_free(sl__rows *r) {
  if (!r) return;
  sl__rows_clear(r);
  sl__free(r->slots);
  sl__free(r->row);
  sl__free(r->unique);
  sl_schema_release(r->out);
  pthread_mutex_destroy(&r->mu);
  sl__free(r);
}

int sl__rows_window(sl__rows *r, size_t items, sl__stage_counters *c) {
  r->c = c;
  /* The items in flight span at most items / n + 2 batches; one more for
   * the batch the consumer is taking. */
  size_t want = items / r->n + 3;
  slot *s = sl__calloc(want, sizeof *s);
  if (!s) return sl_set_error(SL_ENOMEM, "batch: cannot allocate its fused rows");
  sl__free(r->slots);
  r->slots = s;
  r->nslots = want;
  return SL_OK;
}

/* Batch k's slot, allocating its sample when `make` and the slot is free;
 * NULL when the slot holds another batch (or memory is short).  Under mu. */
static slot *find(sl__rows *r, uint64_t k, bool make) {
  slot *s = &r->slots[k % r->nslots];
  if (s->b) return s->k == k ? s : NULL;
  if (!make) return NULL;
  sl_sample *b = sl_sample_new(r->out);
  for (int i = 0; b && i < r->nfields; i++) {
    int64_t shape[SL_MAX_RANK];
    int rank = sl_schema_field_rank(r->in, i);
    const int64_t *dims = sl_schema_field_shape(r->in, i);
    shape[0] = (int64_t)r->n;
    for (int d = 0; d < rank; d++)
      shape[d + 1] = dims[d];
    sl_tensor t;
    if (sl__tensor_alloc_pooled(r->pool, &t, sl_schema_field_dtype(r->in, i),
                                rank + 1, shape) < 0 ||
        sl_sample_set_move(b, i, &t) < 0) {
      sl_sample_release(b);
      b = NULL;
    }
  }
  if (!b) return NULL;
  s->k = k;
  s->b = b;
  return s;
}

/* Whether o's fields are the rows' (the checks batch would make pass). */
static bool fits(const sl__rows *r, const sl_sample *o) {
  if (sl_sample_nfields(o) != r->nfields) return false;
  for (int i = 0; i < r->nfields; i++) {
    const sl_tensor *t = sl_sample_at_const(o, i);
    if (t->lod || t->nbytes != r->row[i] || (t->nbytes && !t->data) ||
        sl_schema_check(r->in, i, t) != SL_OK)
      return false;
  }
  return true;
}

/* Copies o's fields into row j of b; a field already there (a granted
 * row) is left as it is. */
static void write_row(const sl__rows *r, sl_sample *b, size_t j,
                      const sl_sample *o) {
  for (int i = 0; i < r->nfields; i++) {
    char *dst = (char *)sl_sample_at(b, i)->data + j * r->row[i];
    const void *src = sl_sample_at_const(o, i)->data;
    if (r->row[i] && src != dst) memcpy(dst, src, r->row[i]);
  }
}

/* Batch seq / n, a new reference, or NULL when its slot holds another. */
static sl_sample *reserve(sl__rows *r, uint64_t seq) {
  pthread_mutex_lock(&r->mu);
  slot *s = find(r, seq / r->n, true);
  sl_sample *b = s ? sl_sample_retain(s->b) : NULL;
  pthread_mutex_unlock(&r->mu);
  return b;
}

/* This worker's grant (grant_begin .. grant_end). */
static _Thread_local struct {
  sl__rows *r;
  sl_sample *b; /* reserved: a reference */
  size_t j;
  uint64_t used; /* fields granted in this call (the first 64) */
} grant;

void sl__rows_grant_begin(sl__rows *r, uint64_t seq) {
  grant.r = r;
  grant.b = reserve(r, seq);
  grant.j = seq % r->n;
  grant.used = 0;
}

void sl__rows_grant_end(void) {
  sl_sample_release(grant.b);
  grant.b = NULL;
  grant.r = NULL;
}

void *sl__lua_row_grant(int dtype, size_t nbytes, sl_buffer **buf) {
  const sl__rows *r = grant.r;
  if (!grant.b) return NULL;
  for (int i = 0; i < r->nfields && i < 64; i++) {
    if (!r->unique[i] || r->row[i] != nbytes || (grant.used >> i & 1) ||
        (int)sl_schema_field_dtype(r->in, i) != dtype)
      continue;
    sl_tensor *t = sl_sample_at(grant.b, i);
    char *p = (char *)t->data + grant.j * nbytes;
    memset(p, 0, nbytes);
    grant.used |= (uint64_t)1 << i;
    *buf = t->buf;
    return p;
  }
  return NULL;
}

sl_sample *sl__rows_put(sl__rows *r, uint64_t seq, sl_sample *o) {
  if (!fits(r, o)) return NULL;
  sl_sample *b = reserve(r, seq);
  if (!b) return NULL;
  write_row(r, b, seq % r->n, o);
  sl_sample_release(o);
  atomic_fetch_add_explicit(&r->c->fused, 1, memory_order_relaxed);
  return b;
}

bool sl__rows_is(sl__rows *r, uint64_t k, const sl_sample *s) {
  pthread_mutex_lock(&r->mu);
  slot *t = find(r, k, false);
  bool is = t && t->b == s;
  pthread_mutex_unlock(&r->mu);
  return is;
}

int sl__rows_copy(sl__rows *r, uint64_t k, size_t j, const sl_sample *s) {
  pthread_mutex_lock(&r->mu);
  slot *t = find(r, k, true);
  sl_sample *b = t ? t->b : NULL;
  pthread_mutex_unlock(&r->mu);
  /* The consumer's own batch: its slot stays until take or drop. */
  if (!b)
    return sl_set_error(SL_ENOMEM, "batch: cannot allocate batch %llu",
                        (unsigned long long)k);
  write_row(r, b, j, s);
  return SL_OK;
}

/* Removes batch k's slot; its sample (the table's reference) or NULL. */
static sl_sample *unslot(sl__rows *r, uint64_t k) {
  pthread_mutex_lock(&r->mu);
  slot *t = find(r, k, false);
  sl_sample *b = t ? t->b : NULL;
  if (t) t->b = NULL;
  pthread_mutex_unlock(&r->mu);
  return b;
}

int sl__rows_take(sl__rows *r, uint64_t k, size_t m, sl_sample **out) {
  sl_sample *b = unslot(r, k);
  if (!b)
    return sl_set_error(SL_EINVAL, "batch: fused batch %llu is missing",
                        (unsigned long long)k);
  for (int i = 0; m < r->n && i < r->nfields; i++) { /* the short last one */
    sl_tensor *t = sl_sample_at(b, i);
    t->shape[0] = (int64_t)m;
    t->nbytes = m * r->row[i];
  }
  *out = b;
  return SL_OK;
}

void sl__rows_drop(sl__rows *r, uint64_t k) { sl_sample_release(unslot(r, k)); }

void sl__rows_clear(sl__rows *r) {
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->nslots; i++) {
    sl_sample_release(r->slots[i].b);
    r->slots[i].b = NULL;
  }
  pthread_mutex_unlock(&r->mu);
}
