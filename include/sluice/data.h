/*
 * sluice/data.h - the data model: dtypes, buffers, tensors, schemas,
 * samples.  Part of sluice.h: include <sluice.h>, whose opening comment
 * states the conventions that hold here.
 */
#ifndef SLUICE_API_DATA_H
#define SLUICE_API_DATA_H

#include "errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* dtypes                                                                    */
/* ------------------------------------------------------------------------ */

/* X(NAME, lowercase name, element size in bytes). `bytes` is a byte string:
 * a rank-1 tensor of 1-byte elements whose length usually varies. */
#define SL_DTYPE_MAP(X)                                                        \
  X(BOOL, bool, 1)                                                             \
  X(U8, u8, 1)                                                                 \
  X(I8, i8, 1)                                                                 \
  X(U16, u16, 2)                                                               \
  X(I16, i16, 2)                                                               \
  X(U32, u32, 4)                                                               \
  X(I32, i32, 4)                                                               \
  X(U64, u64, 8)                                                               \
  X(I64, i64, 8)                                                               \
  X(F16, f16, 2)                                                               \
  X(BF16, bf16, 2)                                                             \
  X(F32, f32, 4)                                                               \
  X(F64, f64, 8)                                                               \
  X(BYTES, bytes, 1)

typedef enum sl_dtype {
  SL_DTYPE_INVALID = 0,
#define SL__DT_ENUM(name, lname, size) SL_##name,
  SL_DTYPE_MAP(SL__DT_ENUM)
#undef SL__DT_ENUM
      SL_DTYPE_COUNT
} sl_dtype;

/* Element size in bytes of `dt`, 0 for an invalid dtype.  Thread-safe. */
SL_API size_t sl_dtype_size(sl_dtype dt);
/* The lowercase name ("f32"), or "invalid".  Static string.  Thread-safe. */
SL_API const char *sl_dtype_name(sl_dtype dt);
/* The dtype named `name` ("f32", "u8", "bytes", ...), or SL_DTYPE_INVALID.
 * Borrows `name`.  Thread-safe. */
SL_API sl_dtype sl_dtype_from_name(const char *name);

/* ------------------------------------------------------------------------ */
/* Buffers: refcounted, immutable once shared                                */
/* ------------------------------------------------------------------------ */

typedef struct sl_buffer sl_buffer;

/* Frees memory handed to sl_buffer_wrap. */
typedef void (*sl_buffer_free_fn)(void *ud, void *data);

/* A new buffer of `size` bytes, 64-byte aligned, contents uninitialised,
 * refcount 1.  size 0 is allowed.  Returns NULL with SL_ENOMEM detail on
 * failure.  Thread-safe. */
SL_API sl_buffer *sl_buffer_new(size_t size);
/* Like sl_buffer_new, zero-filled. */
SL_API sl_buffer *sl_buffer_new_zero(size_t size);
/* Wraps memory the caller allocated: when the last reference goes,
 * free_fn(ud, data) is called (free_fn may be NULL for static memory).
 * Returns NULL on allocation failure; free_fn is then NOT called. */
SL_API sl_buffer *sl_buffer_wrap(void *data, size_t size,
                                 sl_buffer_free_fn free_fn, void *ud);
/* Borrowed pointer to the bytes; valid while a reference is held. */
SL_API void *sl_buffer_data(const sl_buffer *b);
SL_API size_t sl_buffer_size(const sl_buffer *b);
/* Adds a reference; returns `b`.  Thread-safe. */
SL_API sl_buffer *sl_buffer_retain(sl_buffer *b);
/* Drops a reference; frees on the last one.  NULL-safe.  Thread-safe. */
SL_API void sl_buffer_release(sl_buffer *b);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

#define SL_MAX_RANK 8

/* A view of typed data in a refcounted buffer.  The struct is public so that
 * C and the LuaJIT FFI read it directly; treat it as read-only and build it
 * with the functions below.  A tensor lives inside a sample (it is not
 * refcounted itself); its buffers are.
 *
 * LoD ("level of detail", as Paddle's LoDTensor) describes ragged data: when
 * `lod` is non-NULL the tensor holds `lod_len - 1` sequences concatenated
 * along dimension 0, sequence i spanning rows [lod[i], lod[i+1]).  lod[0] is
 * 0 and lod[lod_len-1] == shape[0]. */
typedef struct sl_tensor {
  sl_dtype dtype;
  int32_t rank;
  int64_t shape[SL_MAX_RANK];
  void *data;         /* points into buf; NULL only when nbytes == 0 */
  size_t nbytes;      /* product(shape) * sl_dtype_size(dtype) */
  sl_buffer *buf;     /* owns data (may be NULL when nbytes == 0) */
  const int64_t *lod; /* NULL, or lod_len offsets in lod_buf */
  int64_t lod_len;
  sl_buffer *lod_buf;
} sl_tensor;

/* Makes `t` a fresh tensor of `dtype` and `shape` backed by a new buffer
 * (uninitialised contents).  Any previous contents of `t` are overwritten, not
 * released.  Returns SL_OK, SL_EINVAL (bad dtype, rank > SL_MAX_RANK, negative
 * dimension, size overflow) or SL_ENOMEM.  On failure `t` is zeroed. */
SL_API int sl_tensor_alloc(sl_tensor *t, sl_dtype dtype, int rank,
                           const int64_t *shape);
/* Makes `t` a view of `buf` at byte `offset`, retaining `buf` (borrows the
 * caller's reference).  Returns SL_EINVAL if the view does not fit. */
SL_API int sl_tensor_view(sl_tensor *t, sl_dtype dtype, int rank,
                          const int64_t *shape, sl_buffer *buf, size_t offset);
/* Attaches LoD offsets (lod_len entries) to `t`, retaining `lod_buf` which
 * must hold them; `lod` must point into lod_buf.  Checks that the offsets are
 * non-decreasing, start at 0 and end at shape[0]: SL_EINVAL otherwise. */
SL_API int sl_tensor_set_lod(sl_tensor *t, sl_buffer *lod_buf,
                             const int64_t *lod, int64_t lod_len);
/* Copies the view `src` into `dst`, retaining its buffers (no data copy). */
SL_API void sl_tensor_copy_ref(sl_tensor *dst, const sl_tensor *src);
/* Releases the buffers of `t` and zeroes it.  NULL-safe. */
SL_API void sl_tensor_clear(sl_tensor *t);

/* Accessors, for callers who prefer functions to struct fields.  All borrow
 * `t`; none fails (a NULL `t` gives 0/NULL). */
SL_API sl_dtype sl_tensor_dtype(const sl_tensor *t);
SL_API int sl_tensor_rank(const sl_tensor *t);
SL_API const int64_t *sl_tensor_shape(const sl_tensor *t);
SL_API void *sl_tensor_data(const sl_tensor *t);
SL_API size_t sl_tensor_nbytes(const sl_tensor *t);
SL_API int64_t sl_tensor_numel(const sl_tensor *t);
/* The LoD offsets (borrowed) and their count in *len, or NULL with *len = 0
 * when the tensor is not ragged.  `len` may be NULL. */
SL_API const int64_t *sl_tensor_lod(const sl_tensor *t, int64_t *len);
/* Writes "f32[128,784]" into buf (always NUL-terminated).  Returns buf. */
SL_API char *sl_tensor_describe(const sl_tensor *t, char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Schemas                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct sl_schema sl_schema;

/* Marks a variable dimension in a schema shape. */
#define SL_DIM_VAR (-1)

/* A new empty schema, refcount 1, mutable until frozen (attaching it to a
 * reader or a sample freezes it).  NULL on SL_ENOMEM. */
SL_API sl_schema *sl_schema_new(void);
/* Appends a field.  `name` is copied (1..63 bytes, unique within the schema);
 * `shape` has `rank` dims, each >= 0 or SL_DIM_VAR.  Returns the new field's
 * index, or SL_EINVAL (duplicate or bad name, bad dtype or shape),
 * SL_ESTATE (schema frozen) or SL_ENOMEM. */
SL_API int sl_schema_add(sl_schema *s, const char *name, sl_dtype dtype,
                         int rank, const int64_t *shape);
/* At most this many metadata entries per schema (a file's schema block
 * with more is corrupt). */
#define SL_MAX_META 65536
/* Sets a user metadata entry (both strings copied; an existing key is
 * replaced).  O(1) on average (keys are hashed).  Returns SL_OK, SL_ESTATE
 * (frozen), SL_EINVAL (a new key beyond SL_MAX_META entries) or
 * SL_ENOMEM. */
SL_API int sl_schema_set_meta(sl_schema *s, const char *key, const char *value);
/* The metadata value for `key` (borrowed, lives as long as the schema), or
 * NULL. */
SL_API const char *sl_schema_meta(const sl_schema *s, const char *key);
SL_API int sl_schema_meta_count(const sl_schema *s);
/* The i-th metadata entry, borrowed.  Returns SL_EINVAL when out of range. */
SL_API int sl_schema_meta_at(const sl_schema *s, int i, const char **key,
                             const char **value);
/* Makes the schema immutable.  Idempotent.  After this, sharing it between
 * threads is safe. */
SL_API void sl_schema_freeze(sl_schema *s);
/* A mutable deep copy (unfrozen), or NULL on SL_ENOMEM. */
SL_API sl_schema *sl_schema_copy(const sl_schema *s);

SL_API int sl_schema_nfields(const sl_schema *s);
/* Field index for `name`, or -1.  Borrows `name`. */
SL_API int sl_schema_find(const sl_schema *s, const char *name);
/* Field properties by index; out-of-range indices give NULL / INVALID / -1. */
SL_API const char *sl_schema_field_name(const sl_schema *s, int i);
SL_API sl_dtype sl_schema_field_dtype(const sl_schema *s, int i);
SL_API int sl_schema_field_rank(const sl_schema *s, int i);
SL_API const int64_t *sl_schema_field_shape(const sl_schema *s, int i);
/* 1 when the field has a SL_DIM_VAR dimension, else 0. */
SL_API int sl_schema_field_is_var(const sl_schema *s, int i);
/* 1 when both schemas have the same field names, dtypes and shapes, in order
 * (metadata is ignored). */
SL_API int sl_schema_equal(const sl_schema *a, const sl_schema *b);
/* Checks tensor `t` against field i: SL_OK, or SL_ESHAPE with a message naming
 * the field, the expected and the actual dtype/shape. */
SL_API int sl_schema_check(const sl_schema *s, int i, const sl_tensor *t);
/* "{image: u8[28,28], label: i64[]}" into buf.  Returns buf. */
SL_API char *sl_schema_describe(const sl_schema *s, char *buf, size_t size);

SL_API sl_schema *sl_schema_retain(sl_schema *s);
SL_API void sl_schema_release(sl_schema *s);

/* ------------------------------------------------------------------------ */
/* Samples                                                                   */
/* ------------------------------------------------------------------------ */

/* One tensor per schema field, refcounted.  Immutable once published (sent
 * to a channel or returned by a reader): a stage that changes a sample either
 * makes a new one or holds the only reference (sl_sample_refcount == 1). */
typedef struct sl_sample sl_sample;

/* A new sample for `schema` (retained and frozen), every field an empty
 * tensor of the field's dtype and rank 0.  NULL on SL_ENOMEM or a NULL
 * schema (SL_EINVAL). */
SL_API sl_sample *sl_sample_new(sl_schema *schema);
SL_API sl_sample *sl_sample_retain(sl_sample *s);
/* Drops a reference; the last one releases every tensor.  NULL-safe. */
SL_API void sl_sample_release(sl_sample *s);
/* Current refcount (a snapshot; exact only when no other thread holds it). */
SL_API int sl_sample_refcount(const sl_sample *s);

/* The schema (borrowed). */
SL_API const sl_schema *sl_sample_schema(const sl_sample *s);
SL_API int sl_sample_nfields(const sl_sample *s);
/* Field i (borrowed, lives as long as the sample), or NULL out of range. */
SL_API sl_tensor *sl_sample_at(sl_sample *s, int i);
SL_API const sl_tensor *sl_sample_at_const(const sl_sample *s, int i);
/* Field by name (borrowed), or NULL with SL_ENOTFOUND detail naming the
 * field and listing the fields that exist. */
SL_API const sl_tensor *sl_sample_field(const sl_sample *s, const char *name);
/* Field index by name, or SL_ENOTFOUND (with detail). */
SL_API int sl_sample_index(const sl_sample *s, const char *name);

/* Replaces field i with a reference to `t` (buffers retained; the old field
 * released).  Checks dtype and rank (and fixed dims) against the schema:
 * SL_ESHAPE with a message otherwise; SL_EINVAL for a bad index. */
SL_API int sl_sample_set(sl_sample *s, int i, const sl_tensor *t);
/* Like sl_sample_set but takes the caller's buffer references in `t` (moves
 * them: on success `t` is zeroed; on failure `t` is untouched). */
SL_API int sl_sample_set_move(sl_sample *s, int i, sl_tensor *t);
/* Allocates field i with `shape` and the schema's dtype, and returns its data
 * pointer in *data (may be NULL).  SL_ESHAPE/SL_ENOMEM on failure. */
SL_API int sl_sample_alloc(sl_sample *s, int i, int rank, const int64_t *shape,
                           void **data);
/* Total payload bytes of all fields (data and LoD).  Thread-safe on a
 * published sample. */
SL_API size_t sl_sample_nbytes(const sl_sample *s);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_DATA_H */
