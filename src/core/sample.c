/*
 * sample.c - samples: one tensor per schema field in a single allocation,
 * refcounted, immutable once published.
 */
#include "internal.h"

struct sl_sample {
  sl__refcnt refs;
  int nfields;
  sl_schema *schema; /* retained, frozen */
  sl_tensor fields[];
};

sl_sample *sl_sample_new(sl_schema *schema) {
  if (!schema) {
    sl_set_error(SL_EINVAL, "sample: NULL schema");
    return NULL;
  }
  int n = sl_schema_nfields(schema);
  sl_sample *s = sl__malloc(sizeof *s + (size_t)n * sizeof(sl_tensor));
  if (!s) {
    sl_set_error(SL_ENOMEM, "sample: cannot allocate %d fields", n);
    return NULL;
  }
  sl__ref_init(&s->refs);
  s->nfields = n;
  sl_schema_freeze(schema);
  s->schema = sl_schema_retain(schema);
  memset(s->fields, 0, (size_t)n * sizeof(sl_tensor));
  for (int i = 0; i < n; i++)
    s->fields[i].dtype = sl_schema_field_dtype(schema, i);
  return s;
}

sl_sample *sl_sample_retain(sl_sample *s) {
  if (s) sl__ref_inc(&s->refs);
  return s;
}

void sl_sample_release(sl_sample *s) {
  if (!s || !sl__ref_dec(&s->refs)) return;
  for (int i = 0; i < s->nfields; i++) {
    sl_buffer_release(s->fields[i].buf);
    sl_buffer_release(s->fields[i].lod_buf);
  }
  sl_schema_release(s->schema);
  sl__free(s);
}

int sl_sample_refcount(const sl_sample *s) {
  return s ? atomic_load_explicit(&((sl_sample *)s)->refs, memory_order_relaxed)
           : 0;
}

const sl_schema *sl_sample_schema(const sl_sample *s) {
  return s ? s->schema : NULL;
}

int sl_sample_nfields(const sl_sample *s) {
  return s ? s->nfields : 0;
}

sl_tensor *sl_sample_at(sl_sample *s, int i) {
  return (s && i >= 0 && i < s->nfields) ? &s->fields[i] : NULL;
}

const sl_tensor *sl_sample_at_const(const sl_sample *s, int i) {
  return (s && i >= 0 && i < s->nfields) ? &s->fields[i] : NULL;
}

int sl_sample_index(const sl_sample *s, const char *name) {
  SL_RETURN_ERROR_IF(!s || !name, SL_EINVAL, "sample: NULL sample or name");
  int i = sl_schema_find(s->schema, name);
  if (i >= 0) return i;
  char fields[512];
  sl_schema_describe(s->schema, fields, sizeof fields);
  return sl_set_error(SL_ENOTFOUND, "sample: no field '%s' in %s", name,
                      fields);
}

const sl_tensor *sl_sample_field(const sl_sample *s, const char *name) {
  int i = sl_sample_index(s, name);
  return i >= 0 ? &s->fields[i] : NULL;
}

int sl_sample_set_move(sl_sample *s, int i, sl_tensor *t) {
  SL_RETURN_ERROR_IF(!s || !t, SL_EINVAL, "sample: NULL sample or tensor");
  SL_RETURN_ERROR_IF(i < 0 || i >= s->nfields, SL_EINVAL,
                     "sample: field index %d out of range (%d fields)", i,
                     s->nfields);
  SL_FORWARD_IF_ERROR(sl_schema_check(s->schema, i, t));
  sl_tensor old = s->fields[i];
  s->fields[i] = *t;
  memset(t, 0, sizeof *t);
  sl_buffer_release(old.buf);
  sl_buffer_release(old.lod_buf);
  return SL_OK;
}

int sl_sample_set(sl_sample *s, int i, const sl_tensor *t) {
  SL_RETURN_ERROR_IF(!t, SL_EINVAL, "sample: NULL tensor");
  sl_tensor ref;
  sl_tensor_copy_ref(&ref, t);
  int rc = sl_sample_set_move(s, i, &ref);
  if (rc < 0) sl_tensor_clear(&ref);
  return rc;
}

int sl_sample_alloc(sl_sample *s, int i, int rank, const int64_t *shape,
                    void **data) {
  SL_RETURN_ERROR_IF(!s || i < 0 || i >= s->nfields, SL_EINVAL,
                     "sample: field index %d out of range", i);
  sl_tensor t;
  SL_FORWARD_IF_ERROR(
      sl_tensor_alloc(&t, sl_schema_field_dtype(s->schema, i), rank, shape));
  int rc = sl_sample_set_move(s, i, &t);
  if (rc < 0) {
    sl_tensor_clear(&t);
    return rc;
  }
  if (data) *data = s->fields[i].data;
  return SL_OK;
}

size_t sl_sample_nbytes(const sl_sample *s) {
  if (!s) return 0;
  size_t n = 0;
  for (int i = 0; i < s->nfields; i++)
    n +=
        s->fields[i].nbytes +
        (s->fields[i].lod ? (size_t)s->fields[i].lod_len * sizeof(int64_t) : 0);
  return n;
}
