/*
 * padded_batch.c - sl_padded_batch: n samples per batch, variable fields
 * padded with their own pad value to the longest in the batch (or to a
 * fixed length) and followed by their lengths (tf.data's padded_batch).
 * Also the padded assembly bucket_batch.c uses, and the helpers the
 * language-model stages share (lm.h).
 *
 * Fields.  A field whose dim 0 is variable and whose other dims are fixed
 * becomes [B, L, d...] (L: the longest in the batch, or `to`) and is
 * followed by "<name>_len" i64[B]; a fixed field [d...] becomes [B, d...].
 * A field with a variable dimension after the first cannot be padded here
 * (SL_EINVAL at construction: sl_batch with lod does that).
 *
 * Gathering, length and position: gather.h's, as sl_batch's (batch k
 * starts at upstream sample k*n; the saved state is the position alone).
 */
#include "lm/lm.h"

#include <stdio.h>

/* --- the plan (lm.h) ----------------------------------------------------- */

void sl__padplan_fini(sl__padplan *p) {
  sl_schema_release(p->out);
  SL__FREE(p->pad, p->outi, p->value);
  memset(p, 0, sizeof *p);
}

int sl__padplan_init(sl__padplan *p, const char *stage, const sl_schema *in,
                     int64_t B, int64_t to, const sl_pad_value *pad,
                     size_t npad) {
  memset(p, 0, sizeof *p);
  p->stage = stage;
  p->in = in;
  p->nfields = sl_schema_nfields(in);
  size_t nf = p->nfields ? (size_t)p->nfields : 1;
  p->pad = sl__calloc(nf, sizeof *p->pad);
  p->outi = sl__calloc(nf, sizeof *p->outi);
  p->value = sl__calloc(nf, sizeof *p->value);
  p->out = sl_schema_new();
  SL_RETURN_ERROR_IF(!p->pad || !p->outi || !p->value || !p->out, SL_ENOMEM,
                     "%s: cannot allocate", stage);
  SL_RETURN_ERROR_IF(npad && !pad, SL_EINVAL, "%s: NULL pad values", stage);
  for (size_t k = 0; k < npad; k++) {
    int i = pad[k].field ? sl_schema_find(in, pad[k].field) : -1;
    SL_RETURN_ERROR_IF(i < 0, SL_EINVAL,
                       "%s: pad value for '%s', which is not a field", stage,
                       pad[k].field ? pad[k].field : "(null)");
    p->value[i] = pad[k].value;
  }
  for (int i = 0; i < p->nfields; i++) {
    const char *name = sl_schema_field_name(in, i);
    int rank = sl_schema_field_rank(in, i);
    const int64_t *dims = sl_schema_field_shape(in, i);
    sl_dtype dt = sl_schema_field_dtype(in, i);
    SL_RETURN_ERROR_IF(rank >= SL_MAX_RANK, SL_EINVAL,
                       "%s: field '%s' has rank %d; batching adds a "
                       "dimension and the maximum rank is %d",
                       stage, name, rank, SL_MAX_RANK);
    int64_t shape[SL_MAX_RANK];
    shape[0] = B;
    for (int d = 0; d < rank; d++)
      shape[d + 1] = dims[d];
    p->pad[i] = sl_schema_field_is_var(in, i);
    if (p->pad[i]) {
      for (int d = 1; d < rank; d++)
        SL_RETURN_ERROR_IF(dims[d] == SL_DIM_VAR, SL_EINVAL,
                           "%s: field '%s': only dim 0 may vary to be "
                           "padded (sl_batch with lod concatenates such "
                           "fields)",
                           stage, name);
      SL_RETURN_ERROR_IF(dt == SL_BYTES && p->value[i] != 0, SL_EINVAL,
                         "%s: field '%s' is bytes: its pad is 0", stage, name);
      shape[1] = to > 0 ? to : SL_DIM_VAR;
    }
    int rc = sl_schema_add(p->out, name, dt, rank + 1, shape);
    if (rc < 0) return sl_wrap_error(rc, "%s: output field '%s'", stage, name);
    p->outi[i] = rc;
    if (p->pad[i]) {
      char len_name[128];
      snprintf(len_name, sizeof len_name, "%s_len", name);
      SL_RETURN_ERROR_IF(sl_schema_find(in, len_name) >= 0, SL_EINVAL,
                         "%s: padding '%s' adds '%s', which upstream already "
                         "has",
                         stage, name, len_name);
      rc = sl_schema_add(p->out, len_name, SL_I64, 1, &B);
      if (rc < 0)
        return sl_wrap_error(rc, "%s: output field '%s'", stage, len_name);
    }
  }
  return SL_OK;
}

int sl__padplan_check(const sl__padplan *p, const sl_sample *s, uint64_t no) {
  SL_RETURN_ERROR_IF(sl_sample_nfields(s) != p->nfields, SL_ESHAPE,
                     "%s: sample %llu has %d fields, the schema %d", p->stage,
                     (unsigned long long)no, sl_sample_nfields(s), p->nfields);
  for (int i = 0; i < p->nfields; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    int rc = sl_schema_check(p->in, i, t);
    if (rc < 0)
      return sl_wrap_error(rc, "%s: sample %llu", p->stage,
                           (unsigned long long)no);
    SL_RETURN_ERROR_IF(t->lod, SL_EUNSUPPORTED,
                       "%s: sample %llu: field '%s' has LoD", p->stage,
                       (unsigned long long)no, sl_schema_field_name(p->in, i));
    SL_RETURN_ERROR_IF(t->nbytes && !t->data, SL_EINVAL,
                       "%s: sample %llu: field '%s' has no data", p->stage,
                       (unsigned long long)no, sl_schema_field_name(p->in, i));
  }
  return SL_OK;
}

/* One element of dtype `dt` holding v, in e (16 bytes). */
static void pad_elem(sl_dtype dt, double v, unsigned char *e) {
  memset(e, 0, 16);
  switch (dt) {
#define PUT(code, type)                                                        \
  case code: {                                                                 \
    type x = (type)v;                                                          \
    memcpy(e, &x, sizeof x);                                                   \
    break;                                                                     \
  }
    PUT(SL_BOOL, uint8_t)
    PUT(SL_U8, uint8_t)
    PUT(SL_I8, int8_t)
    PUT(SL_U16, uint16_t)
    PUT(SL_I16, int16_t)
    PUT(SL_U32, uint32_t)
    PUT(SL_I32, int32_t)
    PUT(SL_U64, uint64_t)
    PUT(SL_I64, int64_t)
    PUT(SL_F32, float)
    PUT(SL_F64, double)
#undef PUT
  default: /* f16, bf16, bytes: zeros (a non-zero pad is refused above for
              bytes; f16/bf16 get 0 whatever was asked) */
    break;
  }
}

static int build_field(const sl__padplan *p, int i, sl_sample *const *rows,
                       size_t n, int64_t to, sl_sample *o) {
  const char *name = sl_schema_field_name(p->in, i);
  const sl_tensor *t0 = sl_sample_at_const(rows[0], i);
  sl_dtype dt = t0->dtype;
  size_t es = sl_dtype_size(dt);
  int64_t shape[SL_MAX_RANK];
  shape[0] = (int64_t)n;
  for (int d = 0; d < t0->rank; d++)
    shape[d + 1] = t0->shape[d];
  if (!p->pad[i]) {
    sl_tensor t;
    int rc = sl_tensor_alloc(&t, dt, t0->rank + 1, shape);
    if (rc < 0) return sl_wrap_error(rc, "%s: field '%s'", p->stage, name);
    char *dst = t.data;
    for (size_t j = 0; j < n; j++, dst += t0->nbytes) {
      const sl_tensor *tj = sl_sample_at_const(rows[j], i);
      if (tj->nbytes) memcpy(dst, tj->data, tj->nbytes);
    }
    return sl__gather_put(o, p->outi[i], &t, NULL);
  }
  int64_t L = 0;
  for (size_t j = 0; j < n; j++)
    L = SL_MAX(L, sl__field_len(rows[j], i));
  if (to > 0) {
    SL_RETURN_ERROR_IF(L > to, SL_ESHAPE,
                       "%s: field '%s': a sample of length %lld is longer "
                       "than the padded length %lld",
                       p->stage, name, (long long)L, (long long)to);
    L = to;
  }
  shape[1] = L;
  size_t inner = es; /* bytes per step of dim 0 */
  for (int d = 1; d < t0->rank; d++)
    inner *= (size_t)t0->shape[d];
  sl_tensor t, lens;
  int rc = sl_tensor_alloc(&t, dt, t0->rank + 1, shape);
  if (rc < 0) return sl_wrap_error(rc, "%s: field '%s'", p->stage, name);
  int64_t nn = (int64_t)n;
  rc = sl_tensor_alloc(&lens, SL_I64, 1, &nn);
  if (rc < 0) {
    sl_tensor_clear(&t);
    return sl_wrap_error(rc, "%s: field '%s_len'", p->stage, name);
  }
  unsigned char e[16];
  pad_elem(dt, p->value[i], e);
  size_t slot = (size_t)L * inner;
  char *dst = t.data;
  int64_t *len = lens.data;
  for (size_t j = 0; j < n; j++, dst += slot) {
    const sl_tensor *tj = sl_sample_at_const(rows[j], i);
    len[j] = tj->shape[0];
    if (tj->nbytes) memcpy(dst, tj->data, tj->nbytes);
    if (p->value[i] == 0) {
      memset(dst + tj->nbytes, 0, slot - tj->nbytes);
    } else {
      for (size_t b = tj->nbytes; b < slot; b += es)
        memcpy(dst + b, e, es);
    }
  }
  return sl__gather_put(o, p->outi[i], &t, &lens);
}

int sl__padplan_build(const sl__padplan *p, sl_sample *const *rows, size_t n,
                      int64_t to, sl_sample **out) {
  sl_sample *o = sl_sample_new(p->out);
  SL_RETURN_ERROR_IF(!o, SL_ENOMEM, "%s: cannot allocate", p->stage);
  for (int i = 0; i < p->nfields; i++) {
    int rc = build_field(p, i, rows, n, to, o);
    if (rc < 0) {
      sl_sample_release(o);
      return rc;
    }
  }
  *out = o;
  return SL_OK;
}

/* --- shared helpers (lm.h) ----------------------------------------------- */

/* Depth first, upstreams in order: the order of sl_reader_stats. */
static void *find_from(const sl_reader *r, sl__next_fn next, int depth) {
  if (!r || depth >= 256) return NULL; /* chains are short */
  void *st = sl__reader_state_of((sl_reader *)r, next);
  if (st) return st;
  sl__reader_view v;
  sl__reader_view_of(r, &v);
  for (size_t i = 0; i < v.nups; i++) {
    void *found = find_from(v.ups[i], next, depth + 1);
    if (found) return found;
  }
  return NULL;
}

void *sl__lm_find(const sl_reader *r, sl__next_fn next) {
  return find_from(r, next, 0);
}

/* --- the reader ---------------------------------------------------------- */

typedef struct padded_state {
  sl__gather g; /* first (gather.h): upstream, n, the held samples */
  int64_t to;
  sl__padplan plan;
} padded_state;

static int padded_check(void *st, size_t j) {
  padded_state *b = st;
  return sl__padplan_check(&b->plan, b->g.held[j], b->g.no * b->g.n + j);
}

static int padded_next(void *st, sl_sample **out) {
  padded_state *b = st;
  int rc = sl__gather_pull(&b->g, padded_check, b);
  if (rc == SL_OK)
    rc = sl__padplan_build(&b->plan, b->g.held, b->g.nheld, b->to, out);
  if (rc == SL_OK) b->g.no++;
  if (rc == SL_OK) rc = sl__gather_hand_out(&b->g, out);
  sl__gather_release(&b->g);
  return rc;
}

static void padded_destroy(void *st) {
  padded_state *b = st;
  if (!b) return;
  sl__padplan_fini(&b->plan);
  sl__gather_fini(&b->g);
  sl__free(b);
}

static void padded_identity(const sl_reader *r, void *st, char *buf,
                            size_t cap) {
  const padded_state *b = st;
  snprintf(buf, cap, "size=%zu to=%lld drop_remainder=%d", b->g.n,
           (long long)b->to, b->g.drop);
}

static const sl__stage_ops padded_ops = {
    .name = "padded_batch",
    .budget = sl__gather_budget,
    .next = padded_next,
    .reset = sl__gather_reset,
    .destroy = padded_destroy,
    .length = sl__gather_length,
    .save = sl__gather_save,
    .restore = sl__gather_restore,
    .identity = padded_identity,
    .check = sl__gather_check,
};

int sl_padded_batch(sl_reader *up, size_t n, const sl_padded_batch_opts *opts,
                    sl_reader **out) {
  SL_DECORATOR_ARGS("padded_batch", up, out);
  sl_padded_batch_opts o = SL_PADDED_BATCH_OPTS_INIT;
  int rc =
      opts ? sl__opts_copy("sl_padded_batch_opts", &o, sizeof o, opts) : SL_OK;
  if (rc == SL_OK && (n == 0 || n > (size_t)INT32_MAX))
    rc = sl_set_error(SL_EINVAL,
                      "padded_batch: batch size must be in [1, 2^31), got "
                      "%zu",
                      n);
  if (rc == SL_OK && o.to < 0)
    rc = sl_set_error(SL_EINVAL, "padded_batch: to must be >= 0, got %lld",
                      (long long)o.to);
  if (rc < 0) return sl__fail_with_upstream(up, rc);
  padded_state *b = sl__calloc(1, sizeof *b);
  if (!b)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "padded_batch: cannot allocate"));
  b->to = o.to;
  rc = !sl__gather_init(&b->g, up, n, o.drop_remainder != 0)
           ? sl_set_error(SL_ENOMEM, "padded_batch: cannot allocate")
           : sl__padplan_init(&b->plan, "padded_batch", sl_reader_schema(up),
                              b->g.drop ? (int64_t)n : SL_DIM_VAR, b->to, o.pad,
                              o.npad);
  if (rc < 0) {
    padded_destroy(b);
    return rc;
  }
  return sl__stage_wrap(&padded_ops, b, b->plan.out, &b->g.up, NULL, out);
}
