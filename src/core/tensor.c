/*
 * tensor.c - tensors: typed views into refcounted buffers, with optional LoD
 * offsets for ragged data.
 */
#include "internal.h"

/* Element count of a shape, or -1 on a negative dimension or overflow. */
static int64_t shape_numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0) return -1;
    if (shape[i] && n > INT64_MAX / shape[i]) return -1;
    n *= shape[i];
  }
  return n;
}

static int check_layout(const char *what, sl_dtype dtype, int rank,
                        const int64_t *shape, size_t *nbytes) {
  size_t esz = sl_dtype_size(dtype);
  SL_RETURN_ERROR_IF(esz == 0, SL_EINVAL, "%s: invalid dtype %d", what,
                     (int)dtype);
  SL_RETURN_ERROR_IF(rank < 0 || rank > SL_MAX_RANK, SL_EINVAL,
                     "%s: rank %d is outside 0..%d", what, rank, SL_MAX_RANK);
  SL_RETURN_ERROR_IF(rank > 0 && !shape, SL_EINVAL, "%s: NULL shape", what);
  int64_t n = shape_numel(rank, shape);
  SL_RETURN_ERROR_IF(n < 0, SL_EINVAL,
                     "%s: negative dimension or size overflow", what);
  SL_RETURN_ERROR_IF((uint64_t)n > SIZE_MAX / esz, SL_EINVAL,
                     "%s: size overflow", what);
  *nbytes = (size_t)n * esz;
  return SL_OK;
}

static void set_shape(sl_tensor *t, sl_dtype dtype, int rank,
                      const int64_t *shape, size_t nbytes) {
  memset(t, 0, sizeof *t);
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++)
    t->shape[i] = shape[i];
  t->nbytes = nbytes;
}

int sl_tensor_alloc(sl_tensor *t, sl_dtype dtype, int rank,
                    const int64_t *shape) {
  return sl__tensor_alloc_pooled(NULL, t, dtype, rank, shape);
}

int sl__tensor_alloc_pooled(sl__buffer_pool *pool, sl_tensor *t,
                            sl_dtype dtype, int rank, const int64_t *shape) {
  size_t nbytes = 0;
  int rc = check_layout("tensor", dtype, rank, shape, &nbytes);
  if (rc < 0) {
    memset(t, 0, sizeof *t);
    return rc;
  }
  sl_buffer *b = sl__buffer_pool_get(pool, nbytes);
  if (!b) {
    memset(t, 0, sizeof *t);
    return SL_ENOMEM;
  }
  set_shape(t, dtype, rank, shape, nbytes);
  t->buf = b;
  t->data = sl_buffer_data(b);
  return SL_OK;
}

int sl_tensor_view(sl_tensor *t, sl_dtype dtype, int rank, const int64_t *shape,
                   sl_buffer *buf, size_t offset) {
  size_t nbytes = 0;
  SL_FORWARD_IF_ERROR(check_layout("tensor view", dtype, rank, shape, &nbytes));
  size_t have = sl_buffer_size(buf);
  SL_RETURN_ERROR_IF(!buf && nbytes, SL_EINVAL, "tensor view: NULL buffer");
  SL_RETURN_ERROR_IF(offset > have || nbytes > have - offset, SL_EINVAL,
                     "tensor view: %zu bytes at offset %zu exceed the buffer "
                     "of %zu bytes",
                     nbytes, offset, have);
  set_shape(t, dtype, rank, shape, nbytes);
  t->buf = sl_buffer_retain(buf);
  t->data = buf ? (char *)sl_buffer_data(buf) + offset : NULL;
  return SL_OK;
}

int sl_tensor_set_lod(sl_tensor *t, sl_buffer *lod_buf, const int64_t *lod,
                      int64_t lod_len) {
  SL_RETURN_ERROR_IF(t->rank < 1, SL_EINVAL,
                     "tensor lod: a rank-0 tensor cannot be ragged");
  SL_RETURN_ERROR_IF(lod_len < 1 || !lod || !lod_buf, SL_EINVAL,
                     "tensor lod: need at least one offset");
  const char *base = sl_buffer_data(lod_buf);
  SL_RETURN_ERROR_IF((const char *)lod < base ||
                         (const char *)(lod + lod_len) >
                             base + sl_buffer_size(lod_buf),
                     SL_EINVAL, "tensor lod: offsets lie outside their buffer");
  SL_RETURN_ERROR_IF(lod[0] != 0, SL_EINVAL,
                     "tensor lod: first offset is %lld, not 0",
                     (long long)lod[0]);
  for (int64_t i = 1; i < lod_len; i++)
    SL_RETURN_ERROR_IF(lod[i] < lod[i - 1], SL_EINVAL,
                       "tensor lod: offset %lld (%lld) is below offset %lld "
                       "(%lld)",
                       (long long)i, (long long)lod[i], (long long)(i - 1),
                       (long long)lod[i - 1]);
  SL_RETURN_ERROR_IF(lod[lod_len - 1] != t->shape[0], SL_EINVAL,
                     "tensor lod: last offset %lld is not the row count %lld",
                     (long long)lod[lod_len - 1], (long long)t->shape[0]);
  sl_buffer_retain(lod_buf);
  sl_buffer_release(t->lod_buf);
  t->lod_buf = lod_buf;
  t->lod = lod;
  t->lod_len = lod_len;
  return SL_OK;
}

void sl_tensor_copy_ref(sl_tensor *dst, const sl_tensor *src) {
  *dst = *src;
  sl_buffer_retain(dst->buf);
  sl_buffer_retain(dst->lod_buf);
}

int sl__tensor_copy_own(sl_tensor *dst, const sl_tensor *src) {
  sl_tensor t = *src;
  t.buf = t.lod_buf = NULL;
  t.data = NULL;
  t.lod = NULL;
  if (src->nbytes) {
    t.buf = sl_buffer_new(src->nbytes);
    if (!t.buf) return sl_set_error(SL_ENOMEM, "tensor: cannot copy %zu bytes",
                                    src->nbytes);
    t.data = sl_buffer_data(t.buf);
    memcpy(t.data, src->data, src->nbytes);
  } else if (src->buf) {
    t.buf = sl_buffer_retain(src->buf); /* nothing to pin */
    t.data = src->data;
  }
  if (src->lod) {
    size_t n = (size_t)src->lod_len * sizeof(int64_t);
    t.lod_buf = sl_buffer_new(n);
    if (!t.lod_buf) {
      sl_buffer_release(t.buf);
      return sl_set_error(SL_ENOMEM, "tensor: cannot copy its offsets");
    }
    memcpy(sl_buffer_data(t.lod_buf), src->lod, n);
    t.lod = sl_buffer_data(t.lod_buf);
  }
  *dst = t;
  return SL_OK;
}

void sl_tensor_clear(sl_tensor *t) {
  if (!t) return;
  sl_buffer_release(t->buf);
  sl_buffer_release(t->lod_buf);
  memset(t, 0, sizeof *t);
}

sl_dtype sl_tensor_dtype(const sl_tensor *t) {
  return t ? t->dtype : SL_DTYPE_INVALID;
}
int sl_tensor_rank(const sl_tensor *t) {
  return t ? t->rank : 0;
}
const int64_t *sl_tensor_shape(const sl_tensor *t) {
  return t ? t->shape : NULL;
}
void *sl_tensor_data(const sl_tensor *t) {
  return t ? t->data : NULL;
}
size_t sl_tensor_nbytes(const sl_tensor *t) {
  return t ? t->nbytes : 0;
}
int64_t sl_tensor_numel(const sl_tensor *t) {
  if (!t) return 0;
  return shape_numel(t->rank, t->shape);
}

const int64_t *sl_tensor_lod(const sl_tensor *t, int64_t *len) {
  if (len) *len = (t && t->lod) ? t->lod_len : 0;
  return t ? t->lod : NULL;
}

char *sl_tensor_describe(const sl_tensor *t, char *buf, size_t size) {
  if (!size) return buf;
  if (!t) {
    snprintf(buf, size, "(null)");
    return buf;
  }
  size_t n = (size_t)snprintf(buf, size, "%s[", sl_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, i ? ",%lld" : "%lld",
                          (long long)t->shape[i]);
  if (n < size) n += (size_t)snprintf(buf + n, size - n, "]");
  if (t->lod && n < size)
    snprintf(buf + n, size - n, " lod(%lld)", (long long)t->lod_len);
  return buf;
}
