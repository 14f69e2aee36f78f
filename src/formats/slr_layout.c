/*
 * slr_layout.c - the SLR record encoding (docs/FORMAT.md, "A record"):
 *
 *   u64 dims[V] | fixed fields at fixed offsets | variable fields | pad to 8
 *
 * Every field starts at a multiple of min(element size, 8), so decoded
 * tensors are aligned zero-copy views into the chunk buffer.
 */
#include "formats/slr_format.h"

const unsigned char sl__slr_magic[8] = {0x89, 'S',  'L',  'R',
                                        '\r', '\n', 0x1a, '\n'};
const unsigned char sl__slr_end_magic[8] = {'S', 'L', 'R', 'E',
                                            'N', 'D', '0', '1'};

int sl__slr_layout_init(slr_layout *l, const sl_schema *schema) {
  memset(l, 0, sizeof *l);
  int n = sl_schema_nfields(schema);
  l->nfields = n;
  l->f = sl__calloc((size_t)(n ? n : 1), sizeof *l->f);
  SL_RETURN_ERROR_IF(!l->f, SL_ENOMEM, "slr: cannot allocate a layout");
  int slot = 0;
  for (int i = 0; i < n; i++) {
    slr_field_layout *f = &l->f[i];
    f->rank = sl_schema_field_rank(schema, i);
    memcpy(f->shape, sl_schema_field_shape(schema, i),
           (size_t)f->rank * sizeof(int64_t));
    f->esize = sl_dtype_size(sl_schema_field_dtype(schema, i));
    f->align = f->esize < 8 ? f->esize : 8;
    f->var = sl_schema_field_is_var(schema, i);
    f->boolean = sl_schema_field_dtype(schema, i) == SL_BOOL;
    f->first_dim_slot = slot;
    for (int d = 0; d < f->rank; d++)
      if (f->shape[d] == SL_DIM_VAR) slot++;
  }
  l->ndims = slot;
  uint64_t off = (uint64_t)slot * 8;
  for (int i = 0; i < n; i++) {
    slr_field_layout *f = &l->f[i];
    if (f->var) continue;
    uint64_t bytes = f->esize;
    for (int d = 0; d < f->rank; d++)
      if (!sl__mul_ok(bytes, (uint64_t)f->shape[d], &bytes) ||
          bytes > SLR_MAX_DIM || off + bytes > SLR_MAX_DIM) {
        sl__slr_layout_free(l);
        return sl_set_error(SL_EINVAL, "slr: field '%s' is too large",
                            sl_schema_field_name(schema, i));
      }
    off = sl__align_up(off, f->align);
    f->offset = (size_t)off;
    f->nbytes = (size_t)bytes;
    off += bytes;
  }
  l->fixed_end = (size_t)off;
  return SL_OK;
}

void sl__slr_layout_free(slr_layout *l) {
  sl__free(l->f);
  l->f = NULL;
}

size_t sl__slr_record_size(const slr_layout *l, const sl_sample *s) {
  uint64_t off = l->fixed_end;
  for (int i = 0; i < l->nfields; i++) {
    if (!l->f[i].var) continue;
    off = sl__align_up(off, l->f[i].align) + sl_sample_at_const(s, i)->nbytes;
  }
  return (size_t)sl__align_up(off, 8);
}

void sl__slr_record_encode(const slr_layout *l, const sl_sample *s,
                           unsigned char *dst) {
  size_t total = sl__slr_record_size(l, s);
  memset(dst, 0, total);
  for (int i = 0; i < l->nfields; i++) {
    const slr_field_layout *f = &l->f[i];
    const sl_tensor *t = sl_sample_at_const(s, i);
    if (!f->var) {
      if (f->nbytes) memcpy(dst + f->offset, t->data, f->nbytes);
      continue;
    }
    int slot = f->first_dim_slot;
    for (int d = 0; d < f->rank; d++)
      if (f->shape[d] == SL_DIM_VAR)
        sl__put64(dst + 8 * (size_t)slot++, (uint64_t)t->shape[d]);
  }
  uint64_t off = l->fixed_end;
  for (int i = 0; i < l->nfields; i++) {
    if (!l->f[i].var) continue;
    const sl_tensor *t = sl_sample_at_const(s, i);
    off = sl__align_up(off, l->f[i].align);
    if (t->nbytes) memcpy(dst + off, t->data, t->nbytes);
    off += t->nbytes;
  }
}

/* The shape of variable field `f` given the dims block; its byte size in
 * *bytes.  false when a dim is absurd. */
static bool var_shape(const slr_field_layout *f, const unsigned char *rec,
                      int64_t *shape, uint64_t *bytes) {
  int slot = f->first_dim_slot;
  uint64_t b = f->esize;
  for (int d = 0; d < f->rank; d++) {
    uint64_t v = (uint64_t)f->shape[d];
    if (f->shape[d] == SL_DIM_VAR) {
      v = sl__get64(rec + 8 * (size_t)slot++);
      if (v > SLR_MAX_DIM) return false;
    }
    shape[d] = (int64_t)v;
    if (!sl__mul_ok(b, v, &b) || b > SLR_MAX_DIM) return false;
  }
  *bytes = b;
  return true;
}

/* SL_OK when rec[from, to) is all zero (padding), else SL_ECORRUPT. */
static int zero_gap(const unsigned char *rec, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; i++)
    SL_RETURN_ERROR_IF(rec[i], SL_ECORRUPT,
                       "non-zero padding byte 0x%02x at record offset %llu",
                       rec[i], (unsigned long long)i);
  return SL_OK;
}

/* SL_OK when every byte of bool field i's data is 0 or 1. */
static int bool_check(const unsigned char *rec, uint64_t off, uint64_t n,
                      int i) {
  for (uint64_t k = 0; k < n; k++)
    SL_RETURN_ERROR_IF(rec[off + k] > 1, SL_ECORRUPT,
                       "bool field %d: element %llu is %u (bool bytes are 0 "
                       "or 1)",
                       i, (unsigned long long)k, rec[off + k]);
  return SL_OK;
}

int sl__slr_record_check(const slr_layout *l, const unsigned char *rec,
                         uint64_t len) {
  SL_RETURN_ERROR_IF(len < l->fixed_end, SL_ECORRUPT,
                     "record of %llu bytes is shorter than its fixed part "
                     "(%zu bytes)",
                     (unsigned long long)len, l->fixed_end);
  /* The fixed part: the gaps the alignment leaves are zero. */
  uint64_t off = (uint64_t)l->ndims * 8;
  for (int i = 0; i < l->nfields; i++) {
    const slr_field_layout *f = &l->f[i];
    if (f->var) continue;
    SL_FORWARD_IF_ERROR(zero_gap(rec, off, f->offset));
    if (f->boolean) SL_FORWARD_IF_ERROR(bool_check(rec, f->offset, f->nbytes, i));
    off = f->offset + f->nbytes;
  }
  SL_FORWARD_IF_ERROR(zero_gap(rec, off, l->fixed_end));
  off = l->fixed_end;
  for (int i = 0; i < l->nfields; i++) {
    const slr_field_layout *f = &l->f[i];
    if (!f->var) continue;
    int64_t shape[SL_MAX_RANK];
    uint64_t bytes, prev = off, start = sl__align_up(off, f->align);
    SL_RETURN_ERROR_IF(!var_shape(f, rec, shape, &bytes), SL_ECORRUPT,
                       "field %d declares an absurd dimension", i);
    SL_RETURN_ERROR_IF(start > len || !sl__add_ok(start, bytes, &off) ||
                           off > len,
                       SL_ECORRUPT,
                       "field %d (%llu bytes) runs past the record end "
                       "(%llu bytes)",
                       i, (unsigned long long)bytes, (unsigned long long)len);
    SL_FORWARD_IF_ERROR(zero_gap(rec, prev, start));
    if (f->boolean) SL_FORWARD_IF_ERROR(bool_check(rec, start, bytes, i));
  }
  SL_RETURN_ERROR_IF(sl__align_up(off, 8) != len, SL_ECORRUPT,
                     "record is %llu bytes but its fields take %llu",
                     (unsigned long long)len,
                     (unsigned long long)sl__align_up(off, 8));
  return zero_gap(rec, off, len);
}

int sl__slr_record_decode(const slr_layout *l, sl_schema *schema,
                          sl_buffer *buf, size_t off, sl_sample **out) {
  const unsigned char *rec = (const unsigned char *)sl_buffer_data(buf) + off;
  sl_sample *s = sl_sample_new(schema);
  if (!s) return SL_ENOMEM;
  uint64_t voff = l->fixed_end;
  for (int i = 0; i < l->nfields; i++) {
    const slr_field_layout *f = &l->f[i];
    sl_tensor *t = sl_sample_at(s, i);
    sl_dtype dt = sl_schema_field_dtype(schema, i);
    int rc;
    if (!f->var) {
      rc = sl_tensor_view(t, dt, f->rank, f->shape, buf, off + f->offset);
    } else {
      int64_t shape[SL_MAX_RANK];
      uint64_t bytes = 0;
      var_shape(f, rec, shape, &bytes); /* checked at chunk load */
      voff = sl__align_up(voff, f->align);
      rc = sl_tensor_view(t, dt, f->rank, shape, buf, off + (size_t)voff);
      voff += bytes;
    }
    if (rc < 0) {
      sl_sample_release(s);
      return rc;
    }
  }
  *out = s;
  return SL_OK;
}
