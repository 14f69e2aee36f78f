/*
 * sluice.h - the one public header of sluice, a C runtime for the input
 * pipelines of machine-learning training.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise:
 *
 *  - Errors.  Functions returning `int` return SL_OK (0) on success or a
 *    negative SL_E* code.  On failure a detail message saying what failed and
 *    where is stored in a thread-local slot readable with sl_last_error().
 *    SL_EOF (end of data) is not an error and carries no message.
 *  - Ownership.  "Takes" means the callee now owns the reference it was given
 *    (the caller must not release it); "borrows" means the callee uses the
 *    object only during the call, or as documented, and the caller keeps its
 *    reference.  Objects returned through an out-parameter are owned by the
 *    caller unless the comment says "borrowed".
 *  - NULL.  Every *_destroy / *_release accepts NULL and does nothing.
 *  - Threads.  Refcounting (retain/release) is thread-safe everywhere.
 *    Immutable objects (a schema once attached to a reader or sample, a
 *    sample once published) may be read from any thread.  A reader is used by
 *    one thread at a time unless wrapped by sl_threaded; channels are fully
 *    thread-safe.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SLUICE_BUILDING) && defined(__GNUC__)
#define SL_API __attribute__((visibility("default")))
#else
#define SL_API
#endif

#if defined(__GNUC__)
#define SL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SL_PRINTF(f, a)
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */

#define SL_VERSION_MAJOR 0
#define SL_VERSION_MINOR 1
#define SL_VERSION_PATCH 0
#define SL_VERSION_NUMBER                                                      \
  (SL_VERSION_MAJOR * 10000 + SL_VERSION_MINOR * 100 + SL_VERSION_PATCH)
#define SL_VERSION_STRING "0.1.0"

/* The version of the library actually linked, as "MAJOR.MINOR.PATCH".
 * Returns a static string.  Thread-safe. */
SL_API const char *sl_version(void);
/* SL_VERSION_NUMBER of the linked library.  Thread-safe. */
SL_API int sl_version_number(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* X(NAME, value, description).  Values are stable across versions. */
#define SL_ERRNO_MAP(X)                                                        \
  X(OK, 0, "success")                                                          \
  X(EOF, -1, "end of data")                                                    \
  X(ENOMEM, -2, "out of memory")                                               \
  X(EINVAL, -3, "invalid argument")                                            \
  X(EIO, -4, "I/O error")                                                      \
  X(ECORRUPT, -5, "corrupt data")                                              \
  X(ESHAPE, -6, "dtype or shape mismatch")                                     \
  X(ECLOSED, -7, "closed")                                                     \
  X(EKILLED, -8, "killed")                                                     \
  X(EUNSUPPORTED, -9, "unsupported operation")                                 \
  X(ELUA, -10, "Lua error")                                                    \
  X(ECUDA, -11, "CUDA error")                                                  \
  X(EAGAIN, -12, "resource temporarily unavailable")                           \
  X(ENOTFOUND, -13, "not found")                                               \
  X(ESTATE, -14, "operation not valid in the current state")                   \
  X(ELENGTH, -15, "length mismatch")

typedef enum sl_errno {
#define SL__ERR_ENUM(name, val, desc) SL_##name = (val),
  SL_ERRNO_MAP(SL__ERR_ENUM)
#undef SL__ERR_ENUM
} sl_errno;

/* A static description of `code` ("end of data", ...); "unknown error" for a
 * code not in SL_ERRNO_MAP.  Thread-safe. */
SL_API const char *sl_strerror(int code);
/* The static name of `code` ("SL_EOF", "SL_EINVAL", ...); "SL_UNKNOWN" for a
 * code not in the map.  Thread-safe. */
SL_API const char *sl_err_name(int code);

/* The detail message of the last error raised on the calling thread (what and
 * where), or "" if none.  The pointer is valid until the next sluice call on
 * this thread.  Thread-safe (the slot is thread-local). */
SL_API const char *sl_last_error(void);
/* The code that accompanied the last detail message on this thread, or SL_OK.
 */
SL_API int sl_last_error_code(void);

/* Sets the calling thread's detail message to the formatted text and returns
 * `code`, so custom readers and callbacks can write
 * `return sl_set_error(SL_EINVAL, "my_reader: bad row %d", i);`.
 * A message longer than 1023 bytes loses its middle, not its end: its first
 * 320 bytes, "...", then its end (the reason), so a long path cannot push
 * the reason out.  Thread-safe. */
SL_API int sl_set_error(int code, const char *fmt, ...) SL_PRINTF(2, 3);
/* Like sl_set_error, prepending "<what>: " to the current detail message; used
 * to add context while an error travels up.  Returns `code`. */
SL_API int sl_wrap_error(int code, const char *fmt, ...) SL_PRINTF(2, 3);
/* Clears the calling thread's detail message. */
SL_API void sl_clear_error(void);

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

/* ------------------------------------------------------------------------ */
/* Readers: the pull contract every source and decorator implements         */
/* ------------------------------------------------------------------------ */

typedef struct sl_reader sl_reader;

/* Implementing a reader from outside the library: fill a vtable (static
 * storage) and call sl_reader_new.  The wrapper functions below add what
 * every reader shares (sticky errors, has_next peek, NULL checks), so an
 * implementation only does its own job:
 *   next:    SL_OK with a sample the caller will own, SL_EOF, or an error
 *            (set the detail with sl_set_error).  Never called again after an
 *            error until reset.
 *   reset:   start the next pass from the beginning (Paddle's ReInit); may be
 *            NULL, meaning the reader cannot be reset (SL_EUNSUPPORTED).
 *   destroy: free `state` and everything it owns, including upstreams; may be
 *            NULL when there is nothing to free. */
typedef struct sl_reader_vtable {
  const char *name; /* stage name used in messages ("shuffle", "my_reader") */
  int (*next)(void *state, sl_sample **out);
  int (*reset)(void *state);
  void (*destroy)(void *state);
} sl_reader_vtable;

/* Creates a reader.  Borrows `vt` (it must outlive the reader); takes `state`
 * (vt->destroy is called on it by sl_reader_destroy, and also when this call
 * fails); retains and freezes `schema`.  Returns NULL with SL_EINVAL/SL_ENOMEM
 * detail on failure. */
SL_API sl_reader *sl_reader_new(const sl_reader_vtable *vt, void *state,
                                sl_schema *schema);

/* Pulls the next sample.  Returns SL_OK with *out owned by the caller, SL_EOF
 * at the end of the pass (repeatable), or a negative error.  Errors are
 * sticky: every later call returns the same code and restores the same detail
 * message, until sl_reader_reset. */
SL_API int sl_reader_next(sl_reader *r, sl_sample **out);
/* One-sample peek: 1 if a sample is available (it is kept for the next
 * sl_reader_next), 0 at end of data, a negative error otherwise. */
SL_API int sl_reader_has_next(sl_reader *r);
/* Starts the next pass from the beginning; clears a sticky error and any
 * peeked sample.  Returns SL_OK or an error (which becomes sticky). */
SL_API int sl_reader_reset(sl_reader *r);
/* The schema of the samples this reader yields (borrowed, frozen). */
SL_API const sl_schema *sl_reader_schema(const sl_reader *r);
/* The stage name (borrowed static string). */
SL_API const char *sl_reader_name(const sl_reader *r);
/* How many samples one pass of `r` yields (batches, from a batch stage),
 * when the chain knows it without reading: SL_OK and *n.  Known for range,
 * array, slr files (policy fail), idx, open_files over slr files, and
 * through map, prefetch, shuffle, threaded, cache, batch (ceil(n / size),
 * floor with drop_last), take, skip, chain, zip, multi_pass, repeat_first.
 * SL_EUNSUPPORTED (*n = 0), the detail naming the stage, where a stage
 * cannot know: filter, generators, text files, a Lua reader, the skip_chunk
 * or skip policies, readers made with sl_reader_new.  SL_ELENGTH for a zip
 * (without truncate) of readers of different lengths.  SL_EINVAL for NULL
 * arguments.  Reads no data and does not change the reader; call it from
 * the thread that uses the reader (not during its reset). */
SL_API int sl_reader_length(const sl_reader *r, uint64_t *n);
/* Saving and restoring a position (docs/RESUME.md).
 *
 * sl_reader_save writes where `r` stands - its next sample is the k-th of
 * its current pass - as a small byte string: for every stage of the chain,
 * its name, options and the position of its upstreams that reproduces it
 * (not the samples it holds: those are read again after a restore).  The
 * state has a format version and a CRC32C.  Returns SL_OK with *state (free
 * it with sl_free) and *len; SL_EUNSUPPORTED naming the stage that cannot
 * save (a reader made with sl_reader_new, or a position a stage cannot
 * reproduce, e.g. an unordered stage below a shuffle); SL_EINVAL for NULL
 * arguments; SL_ENOMEM.  Does not change what `r` yields.  Call it from the
 * thread that pulls `r`, between pulls.
 *
 * sl_reader_restore moves `r` - a chain built the same way, in this process
 * or another - to the saved position: its next samples are exactly those an
 * uninterrupted run would have given from there (bytes and order, for
 * ordered stages; the same remaining samples for unordered ones), and later
 * resets continue with the passes that follow.  Refuses, leaving `r` as it
 * was: SL_ECORRUPT (not a state, cut short, checksum), SL_EUNSUPPORTED
 * (another format version), SL_EINVAL (a state of another pipeline: the
 * message names the first stage that differs, from the top, and how).  A
 * failure while repositioning (an I/O error re-reading data, data that
 * changed since the save: SL_ECORRUPT) is sticky on `r` until reset.  Same
 * thread rule as save. */
SL_API int sl_reader_save(sl_reader *r, void **state, size_t *len);
SL_API int sl_reader_restore(sl_reader *r, const void *state, size_t len);
/* Elastic restarts (docs/RESUME.md): resumes a job of W' ranks from the
 * states its W ranks saved (W' may differ from W).  `r` is this rank's
 * sl_open_files reader itself (not a chain over it: add decorators after
 * the restore), made with the same files and options as the old job's
 * except rank and world (sl_open_files_opts.rank / world, or the
 * launcher's environment) and threads; states[0..n) and
 * lens[0..n) are the n == W states the old ranks saved with
 * sl_reader_save, one per rank, in any order - every new rank gets all of
 * them.  The new ranks then deliver, together, each sample the old ranks
 * had not yet delivered in the interrupted epoch exactly once (split
 * evenly among them in epoch order: rank counts may differ by one sample,
 * whatever the remainder policy), and from the next epoch on read their
 * shares of a W'-rank job as usual.  A state saved after an elastic
 * restore holds this rank's part of the epoch and may be restored with
 * sl_reader_restore (same W') or elastically again.  The states are
 * borrowed; the caller frees them.
 *
 * Refuses, leaving `r` as it was: SL_EINVAL (NULL arguments, not one state
 * per old rank, two of one rank, states of another job: other files or
 * options), SL_ECORRUPT (not a state, checksum; a file changed since the
 * save, named), SL_EUNSUPPORTED (`r` is not open_files, states of
 * different epochs, corrupt chunks skipped under skip_chunk in the
 * interrupted epoch of an ordered reader).  Unordered readers (`unordered`)
 * are supported: their states name the units delivered.  Cost: the plans
 * of the interrupted epoch (and, for unordered states, a map of one bit
 * per record of the epoch).  A failure restarting the pass is
 * sticky until reset.  Threads: as sl_reader_restore (the thread that
 * pulls `r`); the reader's thread count may differ from the old job's. */
SL_API int sl_reader_restore_elastic(sl_reader *r, const void *const *states,
                                     const size_t *lens, size_t n);
/* Frees memory sluice allocated for the caller (a saved state).  NULL-safe.
 */
SL_API void sl_free(void *p);

/* Destroys the reader and the chain of upstreams it owns, joining any thread
 * it runs.  Safe at any moment (mid-pass, full channels).  NULL-safe. */
SL_API void sl_reader_destroy(sl_reader *r);

/* --- sources ------------------------------------------------------------ */

/* A reader over `n` samples in memory, yielded in order each pass.  Retains
 * each sample (borrows the array).  Every sample must share one schema
 * (sl_schema_equal with the first): SL_ESHAPE otherwise.  n == 0 needs
 * `schema`; otherwise `schema` may be NULL (the first sample's is used).
 * Returns SL_OK and *out, or an error. */
SL_API int sl_reader_from_array(sl_sample *const *samples, size_t n,
                                sl_schema *schema, sl_reader **out);

/* A reader driven by a C generator.  next(ud, &sample) returns SL_OK, SL_EOF
 * or an error; reset(ud) starts again (NULL: not resettable); free_ud(ud) is
 * called on destroy (and on failure of this call).  Retains `schema`. */
typedef int (*sl_gen_next_fn)(void *ud, sl_sample **out);
typedef int (*sl_gen_reset_fn)(void *ud);
typedef void (*sl_gen_free_fn)(void *ud);
SL_API int sl_reader_from_generator(sl_schema *schema, sl_gen_next_fn next,
                                    sl_gen_reset_fn reset,
                                    sl_gen_free_fn free_ud, void *ud,
                                    sl_reader **out);

/* 0, 1, ..., n-1 as samples with one field "i" (i64, rank 0). */
SL_API int sl_reader_range(int64_t n, sl_reader **out);

/* --- decorators ----------------------------------------------------------
 * Each takes ownership of `up` (also on failure: `up` is then destroyed), so
 * `sl_shuffle(sl_batch(...))` chains never leak.  A NULL `up` is SL_EINVAL.
 * Errors from upstream pass through unchanged, in order, with their message.
 */

/* Sliding-window shuffle with a buffer of `buffer_size` samples.  Pass p uses
 * a generator seeded from (seed, p); the output of a pass is a permutation of
 * its input.  buffer_size 0 is SL_EINVAL. */
SL_API int sl_shuffle(sl_reader *up, size_t buffer_size, uint64_t seed,
                      sl_reader **out);

typedef struct sl_batch_opts {
  int drop_last; /* drop a last partial batch */
  int pad;       /* ragged fields: padded [B, max, ...] + "<name>_len" i64[B]
                    instead of concatenated values + LoD */
  int lod;       /* fields with a variable dimension after the first (images
                    of unknown size, u8[-1,-1,-1]): concatenate them along
                    dim 0 with LoD offsets anyway; without lod or pad such a
                    field is SL_EINVAL.  Excludes pad.  Added last: zero-
                    initialise the struct ({0} or a designated initialiser)
                    so code written before it keeps its meaning. */
} sl_batch_opts;
/* Groups `n` samples into one.  Fixed-shape fields stack along a new leading
 * dimension; variable fields (schema dims SL_DIM_VAR) whose only variable
 * dimension is the first (ragged sequences, i32[-1]) concatenate along dim 0
 * with LoD offsets, or pad (opts->pad).  A field with a variable dimension
 * after the first is SL_EINVAL naming it unless opts->lod or opts->pad asks
 * for one of those (LoD would otherwise merge 4 images of 40x40 into one of
 * 160x40 without a word).  Mismatched dtypes or trailing shapes are SL_ESHAPE
 * naming the field.  `opts` may be NULL (defaults: keep the last partial
 * batch, LoD for a variable first dimension).  n 0 is SL_EINVAL. */
SL_API int sl_batch(sl_reader *up, size_t n, const sl_batch_opts *opts,
                    sl_reader **out);

/* sl_multi_pass's k for "forever" (tf.data's repeat(), repeat(-1)). */
#define SL_PASSES_FOREVER UINT64_MAX

/* k passes of `up` (reset at each EOF but the last), as one pass. k >= 1.
 * k = SL_PASSES_FOREVER repeats until an upstream pass yields no sample,
 * which ends the pass (an empty upstream gives an empty pass instead of a
 * loop); its length is 0 over an empty upstream, else SL_EUNSUPPORTED. */
SL_API int sl_multi_pass(sl_reader *up, uint64_t k, sl_reader **out);
/* The first n samples of each pass (Paddle's firstn). */
SL_API int sl_take(sl_reader *up, uint64_t n, sl_reader **out);
/* Each pass without its first n samples. */
SL_API int sl_skip(sl_reader *up, uint64_t n, sl_reader **out);

/* filter: returns 1 to keep, 0 to drop, or a negative error (detail set with
 * sl_set_error).  Borrows the sample. */
typedef int (*sl_filter_fn)(void *ud, const sl_sample *s);
/* map: takes `in` (release it or return it) and stores the result in *out;
 * returns SL_OK or an error (then *out is ignored and `in` must already be
 * released by the callback). */
typedef int (*sl_map_fn)(void *ud, sl_sample *in, sl_sample **out);
typedef void (*sl_free_fn)(void *ud);
/* Keeps the samples for which fn returns 1.  free_ud(ud) on destroy. */
SL_API int sl_filter(sl_reader *up, sl_filter_fn fn, void *ud,
                     sl_free_fn free_ud, sl_reader **out);
/* Applies fn to each sample.  `schema` is the output schema (retained); NULL
 * means "same as upstream".  Outputs are checked against it (SL_ESHAPE). */
SL_API int sl_map(sl_reader *up, sl_map_fn fn, void *ud, sl_free_fn free_ud,
                  sl_schema *schema, sl_reader **out);

/* Options of sl_map_parallel / sl_filter_parallel.  Extensible: `size` must
 * be sizeof(sl_parallel_opts) (SL_PARALLEL_OPTS_INIT sets it and the
 * defaults). */
typedef struct sl_parallel_opts {
  size_t size;      /* sizeof(sl_parallel_opts) */
  uint32_t threads; /* worker threads, 1..the thread limit (0 = 1): 1024,
                       or SLUICE_MAX_THREADS; more than 4 x the online
                       CPUs (at least 8) is accepted with a notice */
  int unordered;    /* 0: upstream's order, identical for any number of
                       threads; 1: samples as soon as they are ready */
  uint32_t queue;   /* samples in flight (0: max(128, 32 x threads)) */
  /* tf.data's ignore_errors: 0 (default) an error of the callback ends the
   * pass; N > 0: a sample whose callback fails (any code but SL_ENOMEM;
   * not an output that fails the schema check, not an upstream error) is
   * left out and counted, at most N per pass; the (N+1)-th ends the pass
   * with SL_EINVAL and "<stage>: K samples failed in this pass,
   * more than ignore_errors (N); the last: <message>".  SL_IGNORE_ALL: no
   * cap.  Which samples are left out does not depend on `threads`; the
   * count restarts at each reset and restore.  The count and the last
   * message are in the stage's stats row (sl_stage_stats).  A map with
   * ignore_errors is no longer one-to-one: its length is not known. */
  uint64_t ignore_errors;
} sl_parallel_opts;
/* ignore_errors without a cap. */
#define SL_IGNORE_ALL UINT64_MAX
/* clang-format off */
#define SL_PARALLEL_OPTS_INIT {sizeof(sl_parallel_opts), 1, 0, 0, 0}
/* clang-format on */
/* sl_map and sl_filter run by `opts->threads` worker threads of the stage
 * (the parallel-stage engine, docs/ARCHITECTURE.md): the workers take
 * samples from `up` in turns, in runs, and call `fn` concurrently, so `fn`
 * must be thread-safe.  Outputs are checked on the workers.  In order
 * (default) the results are exactly sl_map's / sl_filter's; an error (a
 * callback's, upstream's) arrives at its position with its message, sticky
 * until reset.  Unordered, each result comes once, as it is ready; an error
 * ends the pass when it is reached.  `opts` may be NULL (1 thread, in
 * order).  SL_EINVAL for bad options (threads beyond the limit, a `size`
 * this library does not know: SL_EUNSUPPORTED for a larger one), SL_ENOMEM
 * when a thread cannot be started.  Ownership as sl_map / sl_filter. */
SL_API int sl_map_parallel(sl_reader *up, sl_map_fn fn, void *ud,
                           sl_free_fn free_ud, sl_schema *schema,
                           const sl_parallel_opts *opts, sl_reader **out);
SL_API int sl_filter_parallel(sl_reader *up, sl_filter_fn fn, void *ud,
                              sl_free_fn free_ud,
                              const sl_parallel_opts *opts, sl_reader **out);

/* The readers one after another as one pass.  Takes all `n` readers (also on
 * failure).  Their schemas must be equal: SL_ESHAPE otherwise. */
SL_API int sl_chain(sl_reader **readers, size_t n, sl_reader **out);
/* Samples of all readers side by side (Paddle's compose).  Takes all readers.
 * Field names must be distinct (SL_EINVAL).  Readers ending at different
 * times is SL_ELENGTH, unless `truncate`: the pass then ends with the
 * shortest. */
SL_API int sl_zip(sl_reader **readers, size_t n, int truncate, sl_reader **out);
/* The first complete pass is kept in memory and replayed on later passes
 * (upstream is not read again).  A reset before the first pass completes
 * discards the partial cache and restarts upstream.  It gives random access
 * to the samplers (sl_weighted_sample, sl_subset, sl_random_split): a
 * sample not yet held is read ahead from upstream, and the pass under way
 * continues from the held samples. */
SL_API int sl_cache(sl_reader *up, sl_reader **out);
/* Reads the first sample of each pass once and yields it n times (Paddle's
 * Fake reader, for speed tests). */
SL_API int sl_repeat_first(sl_reader *up, uint64_t n, sl_reader **out);

/* A worker thread pulls `up` into a channel of `n` samples (n >= 1) and keeps
 * going while the consumer is busy (Paddle's buffered).  The thread starts
 * now.  Upstream errors reach the consumer in order after the samples before
 * them.  Reset and destroy stop and join the worker first.  Besides the n
 * queued, the worker holds the sample it is sending and the consumer takes
 * up to 16 at a time, so at most n + 16 samples are pulled and not yet
 * handed out.  Its stats row's queue_depth is n. */
SL_API int sl_prefetch(sl_reader *up, size_t n, sl_reader **out);

/* Options of sl_prefetch_auto.  Extensible: `size` must be
 * sizeof(sl_prefetch_auto_opts) (SL_PREFETCH_AUTO_OPTS_INIT sets it and
 * the defaults). */
typedef struct sl_prefetch_auto_opts {
  size_t size;        /* sizeof(sl_prefetch_auto_opts) */
  uint64_t max_bytes; /* payload bytes the channel may hold (sample sizes
                         from sl_sample_nbytes); 0: 64 MiB */
  uint32_t max_depth; /* the largest depth in samples, 1..65536;
                         0: 1024 */
} sl_prefetch_auto_opts;
/* clang-format off */
#define SL_PREFETCH_AUTO_OPTS_INIT {sizeof(sl_prefetch_auto_opts), 0, 0}
/* clang-format on */
/* sl_prefetch whose depth is tuned while it runs (tf.data's AUTOTUNE for
 * prefetch): it starts at 1 sample; when the worker filled the channel to
 * its depth and the consumer later found it empty (a burst: the producer
 * keeps up on average, the consumer's demand is uneven), the depth
 * doubles, up to max_depth and to as many samples of the average size as
 * max_bytes holds.  A consumer slower than the producer never finds it
 * empty, and a producer slower than the consumer never fills it: the depth
 * stays where it is (it never shrinks).  The channel never holds more than
 * max_bytes, except one sample larger than that alone.  The consumer takes
 * one sample per lock round trip (no cache: the depth is the bound).  The
 * depth chosen is the stage's stats row's queue_depth, and survives
 * reset.  `opts` may be NULL (the defaults).  SL_EINVAL for bad options
 * (naming the option), SL_ENOMEM; takes `up` also on failure. */
SL_API int sl_prefetch_auto(sl_reader *up, const sl_prefetch_auto_opts *opts,
                            sl_reader **out);
/* A mutex-guarded reader: next, has_next and reset of the result may be
 * called from several threads at once. */
SL_API int sl_threaded(sl_reader *up, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Channels: bounded MPMC queues of samples                                  */
/* ------------------------------------------------------------------------ */

typedef struct sl_channel sl_channel;

/* A channel holding at most `capacity` samples (>= 1) and, when max_bytes >
 * 0, at most max_bytes payload bytes (sl_sample_nbytes) - except that an
 * empty channel always accepts one sample, so a large sample never
 * deadlocks.  NULL with SL_EINVAL/SL_ENOMEM detail on failure.  All channel
 * functions are thread-safe. */
SL_API sl_channel *sl_channel_new(size_t capacity, size_t max_bytes);
/* Destroys the channel, releasing samples still in it.  No thread may be
 * using it.  NULL-safe. */
SL_API void sl_channel_destroy(sl_channel *ch);

/* Sends `s`, blocking while full.  SL_OK: the channel took `s`.  SL_ECLOSED
 * (closed) or the kill code (killed): the caller still owns `s`. */
SL_API int sl_channel_send(sl_channel *ch, sl_sample *s);
/* Like sl_channel_send, but SL_EAGAIN instead of blocking. */
SL_API int sl_channel_try_send(sl_channel *ch, sl_sample *s);
/* Receives, blocking while empty and open.  SL_OK with *out owned by the
 * caller; SL_EOF once closed and drained; the kill code (with its message
 * restored as this thread's detail) once killed. */
SL_API int sl_channel_recv(sl_channel *ch, sl_sample **out);
/* Like sl_channel_recv, but SL_EAGAIN instead of blocking. */
SL_API int sl_channel_try_recv(sl_channel *ch, sl_sample **out);
/* Receives up to `max` samples at once (at least one, blocking like
 * sl_channel_recv); returns the count (> 0), SL_EOF or the kill code. */
SL_API int sl_channel_recv_many(sl_channel *ch, sl_sample **out, size_t max);

/* Ends the stream: senders get SL_ECLOSED; receivers drain what is left,
 * then get SL_EOF.  Idempotent; no effect on a killed channel. */
SL_API void sl_channel_close(sl_channel *ch);
/* Ends the stream with an error: senders get `code` at once; receivers get
 * `code` and `msg` (copied; may be NULL) after draining the samples sent
 * before the kill, so errors arrive in order.  The first kill wins.  `code`
 * must be negative and not SL_EOF. */
SL_API void sl_channel_kill(sl_channel *ch, int code, const char *msg);
/* Like kill, but samples still queued are released at once instead of
 * drained (used when the consumer is going away). */
SL_API void sl_channel_abort(sl_channel *ch, int code, const char *msg);
/* Reopens a closed or killed channel for the next pass, releasing whatever
 * it still holds.  No thread may be blocked on it. */
SL_API void sl_channel_reopen(sl_channel *ch);

SL_API size_t sl_channel_len(sl_channel *ch);   /* samples held now */
SL_API size_t sl_channel_bytes(sl_channel *ch); /* payload bytes held */
SL_API size_t sl_channel_capacity(const sl_channel *ch);

/* ------------------------------------------------------------------------ */
/* SLR record files (format: docs/FORMAT.md)                                 */
/* ------------------------------------------------------------------------ */

typedef struct sl_slr_writer sl_slr_writer;

typedef struct sl_slr_writer_opts {
  int level;                  /* zstd level, 1..19 (0 = default 3) */
  size_t chunk_bytes;         /* target raw bytes per chunk, record table
                                 included (0 = 1 MiB, at most 1 GiB) */
  uint32_t records_per_chunk; /* if > 0, exactly this many per chunk
                                 (the last may have fewer); overrides
                                 chunk_bytes */
} sl_slr_writer_opts;

/* Starts writing `path` with `schema` (retained and frozen).  Data goes to a
 * new unique temporary file "PATH.tmp-PID-XXXXXX" (O_EXCL | O_NOFOLLOW) that
 * sl_slr_writer_close renames to `path` once the footer is written and
 * synced, so a crash never leaves a complete-looking file.  The file's
 * metadata gets the writer's own sluice.* entries (docs/FORMAT.md) in place
 * of any the schema holds.  `opts` may be NULL.  Returns SL_OK and *out,
 * SL_EINVAL (bad options, or a schema with no fields) or SL_EIO (with the OS
 * error).  One writer is used by one thread at a time. */
SL_API int sl_slr_writer_open(const char *path, sl_schema *schema,
                              const sl_slr_writer_opts *opts,
                              sl_slr_writer **out);
/* Appends one record.  Borrows `s`.  A sample whose fields do not match the
 * schema is refused with SL_ESHAPE naming the field (nothing is written);
 * SL_EIO / SL_ENOMEM on failure (the writer is then unusable: abort it). */
SL_API int sl_slr_writer_append(sl_slr_writer *w, const sl_sample *s);
/* Records appended so far. */
SL_API uint64_t sl_slr_writer_records(const sl_slr_writer *w);
/* Flushes the last chunk, writes schema, index and footer, syncs, renames
 * the temporary file to its final name, and frees the writer (also on
 * failure, in which case the temporary file is removed).  NULL-safe. */
SL_API int sl_slr_writer_close(sl_slr_writer *w);
/* Discards everything: removes the temporary file and frees the writer.
 * NULL-safe. */
SL_API void sl_slr_writer_abort(sl_slr_writer *w);

typedef struct sl_slr_file sl_slr_file;

/* What happens when a chunk fails a check while reading sequentially. */
typedef enum sl_corrupt_policy {
  SL_CORRUPT_FAIL = 0,      /* SL_ECORRUPT naming file, chunk and offset */
  SL_CORRUPT_SKIP_CHUNK = 1 /* skip the chunk, count it; fail past the cap */
} sl_corrupt_policy;

typedef struct sl_slr_open_opts {
  sl_corrupt_policy policy;
  uint32_t max_bad_chunks;  /* skip_chunk: fail when more are skipped in
                               one pass (0 = 16) */
  uint64_t max_chunk_bytes; /* limit on a chunk's raw (decompressed) size;
                               its stored size may be zstd's bound of it.
                               0 = the largest chunk the writer recorded in
                               the file (metadata sluice.max_chunk_raw, at
                               most 1 GiB), or 256 MiB for files that record
                               none, which also may not claim more than
                               1024 times the stored size above 16 MiB.  A
                               chunk above the limit is SL_ECORRUPT, refused
                               before anything is allocated for it. */
} sl_slr_open_opts;

/* Opens an SLR file and validates header, footer, schema and index (not the
 * chunks: they are checked when read).  `opts` may be NULL.  Returns SL_OK,
 * SL_EIO (cannot open/read), SL_ECORRUPT (a check failed; the message names
 * the file, structure and offset) or SL_EUNSUPPORTED (newer major version or
 * unknown required feature).  A file is used by one thread at a time; open it
 * once per thread to read in parallel. */
SL_API int sl_slr_open(const char *path, const sl_slr_open_opts *opts,
                       sl_slr_file **out);
SL_API void sl_slr_close(sl_slr_file *f);
SL_API const char *sl_slr_path(const sl_slr_file *f);
/* The schema (borrowed, frozen), including the file's metadata. */
SL_API const sl_schema *sl_slr_schema(const sl_slr_file *f);
SL_API uint64_t sl_slr_records(const sl_slr_file *f);
SL_API uint64_t sl_slr_chunks(const sl_slr_file *f);
/* Chunks skipped under SL_CORRUPT_SKIP_CHUNK so far. */
SL_API uint64_t sl_slr_bad_chunks(const sl_slr_file *f);

typedef struct sl_slr_chunk_info {
  uint64_t offset;       /* of the chunk header */
  uint64_t first_record; /* number of the chunk's first record in the file */
  uint32_t records;
  uint64_t stored_size; /* compressed payload bytes (0 if not read yet) */
  uint64_t raw_size;    /* decompressed payload bytes (0 if not read yet) */
} sl_slr_chunk_info;
/* Index entry of chunk `c` (from the index; stored/raw sizes come from the
 * chunk header, which this call reads and checks).  SL_EINVAL out of range,
 * SL_ECORRUPT/SL_EIO when the header fails. */
SL_API int sl_slr_chunk_info_get(sl_slr_file *f, uint64_t c,
                                 sl_slr_chunk_info *out);
/* The chunk holding record k (binary search of the index); k must be <
 * sl_slr_records. */
SL_API uint64_t sl_slr_chunk_of(const sl_slr_file *f, uint64_t k);

/* Random access: record k as a new sample (tensors are zero-copy views into
 * the decoded chunk, which stays alive while any of its samples does).
 * Decodes the chunk unless it is the one decoded last.  SL_EINVAL when k is
 * out of range; SL_ECORRUPT/SL_EIO when its chunk fails a check (whatever
 * the policy). */
SL_API int sl_slr_read(sl_slr_file *f, uint64_t k, sl_sample **out);
/* Reads and checks every byte of the file: all chunks (CRCs, sizes, record
 * tables against the schema), contiguity, index agreement.  Returns SL_OK or
 * the first problem (SL_ECORRUPT with file, chunk and offset). */
SL_API int sl_slr_verify(sl_slr_file *f);

/* A reader over records [first, first + count) of `path` (count
 * UINT64_MAX = to the end), read sequentially chunk by chunk with the policy
 * of `opts`; its schema is the file's.  Each reset starts the range again. */
SL_API int sl_slr_reader(const char *path, const sl_slr_open_opts *opts,
                         uint64_t first, uint64_t count, sl_reader **out);
/* A reader over chunks [first_chunk, first_chunk + nchunks) of `path`: the
 * unit used to split a file among threads and ranks. */
SL_API int sl_slr_reader_chunks(const char *path, const sl_slr_open_opts *opts,
                                uint64_t first_chunk, uint64_t nchunks,
                                sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Opening files by name: the format registry (docs/DATA.md)                */
/* ------------------------------------------------------------------------ */

/* Names.  A file is named "TAG:PATH" or by a bare PATH.
 *  - TAG is a letter followed by up to 30 letters, digits, '_', '-' or '+';
 *    the text before the first ':' is a tag only if it has that form, so
 *    "/data/a:b.slr" is a bare path, while a relative path whose first
 *    component holds a ':' must be written "./a:b.slr" or "slr:a:b.slr".
 *  - A bare PATH takes the tag mapped to its extension: the longest
 *    registered suffix that ends it (".slr" -> "slr" is built in).
 *  - A PATH holding '*', '?' or '[' is a glob(3) pattern.  It expands to the
 *    matching files sorted in byte order (strcmp, not the locale's order, so
 *    every rank of a job sees the same list whatever its environment); each
 *    match is then tagged as above.  A pattern that matches nothing is
 *    SL_EINVAL naming the pattern.
 *  - Before globs, a PATH's brace patterns are expanded left to right, as
 *    WebDataset writes shard names: ranges "{000000..000127}" (zero-padded
 *    to the first bound's width) and lists "{a,b}", several per name, at
 *    most 100000 names; the results keep the name's order.  A URL takes
 *    braces but not globs.  A file named exactly like the pattern is that
 *    file (braces and globs alike).
 * Built-in tags: "slr" (sl_slr_reader over the whole file), "idx"
 * (sl_idx_reader: MNIST-style images with their labels; the suffixes
 * "-idx3-ubyte" and "-idx3-ubyte.gz" map to it), "text" (sl_text_reader:
 * one sample per line, with an optional parser plugin) and "image"
 * (sl_image_reader: a folder of JPEG/PNG files or one of them; the suffixes
 * ".jpg", ".jpeg" and ".png" map to it). */

/* Options for opening one file.  Extensible: `size` must be
 * sizeof(sl_open_opts) as the caller compiled it (SL_OPEN_OPTS_INIT sets it),
 * and the zero of every other field is its default.  A later library that
 * appends fields reads only `size` bytes and defaults the rest; a library
 * older than the caller's header refuses a larger struct whose extra bytes
 * are not all zero (SL_EUNSUPPORTED).  size 0 is SL_EINVAL. */
typedef struct sl_open_opts {
  size_t size;          /* sizeof(sl_open_opts) */
  sl_slr_open_opts slr; /* tag slr: corruption policy and limits */
  /* Appended with the idx and text readers (sl_idx_reader and
   * sl_text_reader below).  Strings are borrowed for the call. */
  /* tag idx: the labels file; NULL derives it from the images file's name */
  const char *labels;
  /* tag text: 1 maps the file with mmap(2); 0 reads it with read(2) */
  int text_mmap;
  /* tag text: path of a parser plugin (a shared object, docs/PLUGINS.md)
   * that turns each line into a sample; NULL: the line itself */
  const char *parser;
  /* tag text: the plugin's options, given to its init (NULL is "") */
  const char *parser_options;
  /* Appended with the image reader.  tag image: its options (channels,
   * size, threads, skip policy; see sl_image_reader); NULL: the defaults.
   * Borrowed for the call. */
  const struct sl_image_opts *image;
  /* Appended with the token reader.  tag tokens: its options (seq_len is
   * required); see sl_tokens_reader.  Borrowed for the call. */
  const struct sl_tokens_opts *tokens;
  /* Appended with the formats of docs/FORMATS.md: the options of tags npy,
   * csv and tfrecord (sl_npy_reader, sl_csv_reader, sl_tfrecord_reader);
   * NULL: their defaults.  Borrowed for the call. */
  const struct sl_npy_opts *npy;
  const struct sl_csv_opts *csv;
  const struct sl_tfrecord_opts *tfrecord;
  /* Appended with brace patterns in every name.  tag wds: when set, the
   * name's shards (one or many: braces, globs) are read by sl_wds_open with
   * these options (threads, shard shuffle, rank/world; world 0 takes both
   * from the launcher's environment); NULL: each shard is one sl_wds_reader,
   * several chained - unless the launcher's environment (sl_shard_env)
   * says world > 1: then sl_wds_open with SL_WDS_OPTS_INIT, so that each
   * rank reads its equal share.  Set for a name that is not all wds
   * shards, it is SL_EINVAL.  Borrowed for the call. */
  const struct sl_wds_opts *wds;
} sl_open_opts;
/* clang-format off */
#define SL_OPEN_OPTS_INIT                                                      \
  {sizeof(sl_open_opts), {SL_CORRUPT_FAIL, 0, 0},                              \
   NULL /* labels */, 0 /* text_mmap */, NULL /* parser */,                    \
   NULL /* parser_options */, NULL /* image */, NULL /* tokens */,             \
   NULL /* npy */, NULL /* csv */, NULL /* tfrecord */, NULL /* wds */}
/* clang-format on */

/* A format's constructor: opens `path` (the "TAG:" removed, globs already
 * expanded) as a reader.  `opts` is never NULL: the library passes a complete
 * sl_open_opts of its own version with the caller's options and the defaults
 * filled in.  Returns SL_OK and *out, or an error with its detail set (name
 * the path).  Called without any registry lock held, possibly from several
 * threads at once. */
typedef int (*sl_format_open_fn)(void *ud, const char *path,
                                 const sl_open_opts *opts, sl_reader **out);

/* Registers format `tag`: names "tag:..." are then opened by fn(ud, ...).
 * Registering a tag that exists (the built-in "slr" included) replaces its fn
 * and ud for the calls that start afterwards; calls already running finish
 * with the old ones.  fn NULL removes the tag.  The registry never frees or
 * copies what `ud` points to: it must stay valid while any sl_open may still
 * use it (for most programs, forever).  Borrows `tag` (copied).  Returns
 * SL_OK, SL_EINVAL (malformed tag, or removing a tag that is not registered)
 * or SL_ENOMEM (all 64 slots taken).  Thread-safe (one mutex). */
SL_API int sl_format_register(const char *tag, sl_format_open_fn fn, void *ud);

/* Maps the extension `ext` (a suffix such as ".slr" or "-ubyte": 1..31
 * bytes, no '/', compared case-sensitively with the end of a bare path) to
 * `tag`, replacing an earlier mapping of the same suffix; `tag` NULL removes
 * the mapping.  The tag need not be registered yet: it is looked up when a
 * name is opened.  Borrows both strings (copied).  Returns SL_OK, SL_EINVAL
 * (malformed ext or tag, or removing an unmapped ext) or SL_ENOMEM (all 64
 * slots taken).  Thread-safe. */
SL_API int sl_format_extension(const char *ext, const char *tag);

/* Opens the file or files named `name` (see "Names") as one reader, with
 * `opts` (NULL: defaults).  A pattern matching several files gives their
 * readers one after another (sl_chain: their schemas must be equal).  Borrows
 * `name` and `opts`.  Returns SL_OK and *out; SL_EINVAL for an unknown tag
 * (the message lists the registered tags), a bare path with no known
 * extension, an empty path, a pattern that matches nothing or bad options;
 * SL_EIO when a pattern cannot be read; SL_EUNSUPPORTED for options from a
 * newer header; otherwise the format's own error (for slr: SL_EIO naming a
 * missing file, SL_ECORRUPT, ...).  Thread-safe. */
SL_API int sl_open(const char *name, const sl_open_opts *opts, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Sharding and open_files: the epoch plan (docs/DATA.md)                    */
/* ------------------------------------------------------------------------ */

/* How the N records of an epoch's sequence are split among `world` ranks. */
typedef enum sl_shard_policy {
  SL_SHARD_PAD = 0,   /* every rank gets ceil(N/world): the sequence is
                         extended by repeating its first records, and rank r
                         takes positions [r*Q, (r+1)*Q) of the extension */
  SL_SHARD_DROP = 1,  /* every rank gets q = floor(N/world): rank r takes
                         [r*q, (r+1)*q); the last N mod world records of the
                         sequence are not read this epoch */
  SL_SHARD_UNEVEN = 2 /* rank r takes [floor(r*N/world),
                         floor((r+1)*N/world)): an exact cover, sizes
                         differing by at most one */
} sl_shard_policy;

/* In sl_open_files_opts.rank/world: take both from the environment. */
#define SL_RANK_FROM_ENV (-1)

/* This process's rank and world size from the environment of the common
 * launchers, the first pair of which either variable is set: RANK /
 * WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open
 * MPI's mpirun), PMI_RANK / PMI_SIZE (MPICH, Intel MPI), PADDLE_TRAINER_ID /
 * PADDLE_TRAINERS_NUM (Paddle); rank 0 of world 1 when none is set.  Returns
 * SL_OK, or SL_EINVAL naming the variable when one of a pair is missing, a
 * value is not a decimal integer (rank >= 0, 1 <= world <= INT32_MAX) or the
 * rank is not below the world size.  Thread-safe (reads the environment). */
SL_API int sl_shard_env(int *rank, int *world);

/* The number of records rank `rank` of `world` reads from an epoch of `n`
 * records under `policy`; 0 when world < 1 or rank is not in [0, world).
 * Thread-safe. */
SL_API uint64_t sl_shard_count(uint64_t n, int rank, int world,
                               sl_shard_policy policy);

/* Options of sl_open_files.  Extensible like sl_open_opts: `size` must be
 * sizeof(sl_open_files_opts) (SL_OPEN_FILES_OPTS_INIT sets it and the
 * defaults). */
typedef struct sl_open_files_opts {
  size_t size;          /* sizeof(sl_open_files_opts) */
  sl_slr_open_opts slr; /* how the files are opened; under
                           SL_CORRUPT_SKIP_CHUNK the cap counts bad chunks
                           over all files, per pass */
  uint32_t threads;     /* worker threads (0 = 1), at most the thread
                           limit: 1024, or SLUICE_MAX_THREADS (1..1024);
                           more than 4 x the online CPUs (at least 8) is
                           accepted with a notice */
  uint32_t buffer;      /* decoded samples each worker may hold ready ahead
                           of the consumer (0 = 1024); a chunk's records
                           travel together, so a larger chunk is still
                           admitted alone */
  int unordered;        /* 0: the plan's order, identical for any number of
                           threads; 1: samples as soon as they are ready */
  int shuffle;          /* 0: files, chunks and records in order; 1: the
                           epoch plan's permutations */
  uint64_t seed;        /* of the permutations */
  uint64_t epoch;       /* the epoch of the first pass; each reset adds 1 */
  uint32_t window;      /* with shuffle: records are permuted within windows
                           of this many consecutive (permuted) chunks
                           (0 = 32: mixes class-sorted files; holds up to
                           32 decoded chunks, docs/DATA.md) */
  int rank, world;      /* world <= 0 (SL_RANK_FROM_ENV): both from
                           sl_shard_env; else 0 <= rank < world */
  sl_shard_policy remainder;
} sl_open_files_opts;
/* clang-format off */
#define SL_OPEN_FILES_OPTS_INIT                                                \
  {sizeof(sl_open_files_opts), {SL_CORRUPT_FAIL, 0, 0},                        \
   0 /* threads */, 0 /* buffer */, 0 /* unordered */, 0 /* shuffle */,       \
   0 /* seed */, 0 /* epoch */, 0 /* window */,                                \
   SL_RANK_FROM_ENV, SL_RANK_FROM_ENV, SL_SHARD_PAD}
/* clang-format on */

/* One reader over the records of several files, read by `threads` worker
 * threads (each with its own file handles and decompression contexts) in the
 * order of the epoch plan (docs/DATA.md): with shuffle off and world 1, every
 * record of file 0, then of file 1, and so on.
 *
 * `names` (n >= 1, borrowed) are expanded as by sl_open (tags, extensions,
 * globs) into one list of files, in order.  Every file must be tagged "slr":
 * the plan needs each file's chunk and record counts, which only an index
 * gives without reading the file; another tag is SL_EUNSUPPORTED naming the
 * file.  Every file is opened once here to read its index: one that cannot
 * be opened fails the call with its own error (SL_EIO naming a missing file,
 * SL_ECORRUPT, ...), and their schemas must be equal (sl_schema_equal):
 * SL_ESHAPE naming the first file that differs.  The reader's schema is the
 * first file's.  `opts` NULL means SL_OPEN_FILES_OPTS_INIT.
 *
 * Pass p (the resets since creation, resets in mid-pass included) reads
 * epoch opts->epoch + p, its plan recomputed; to resume at another epoch,
 * open again with that epoch.  The workers start at once; reset and destroy
 * stop and join them first, and are safe at any moment.
 *
 * An error in a worker (a file that became unreadable, a corrupt chunk under
 * SL_CORRUPT_FAIL, SL_ENOMEM) reaches the consumer with its code and the
 * message "open_files: epoch E, sample S: " followed by the file's own
 * message (path, chunk and offset).  In ordered mode it arrives in order,
 * after the S samples before it (for a shuffle window of several chunks: at
 * the start of that window's samples).  Every worker is stopped and joined
 * before the error is returned.  Under SL_CORRUPT_SKIP_CHUNK a corrupt
 * chunk's records are left out and counted; past max_bad_chunks (0 = 16) in
 * one pass the pass fails with SL_ECORRUPT.
 *
 * Returns SL_OK and *out, or SL_EINVAL (no names, a NULL name, bad options,
 * a bad rank/world or environment variable, or any sl_open name error),
 * SL_EUNSUPPORTED, SL_EIO, SL_ECORRUPT, SL_ESHAPE or SL_ENOMEM.  The reader,
 * like any, is used by one thread at a time. */
SL_API int sl_open_files(const char *const *names, size_t n,
                         const sl_open_files_opts *opts, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Reshaping and distributing: unbatch, rebatch, interleave, shard           */
/* ------------------------------------------------------------------------ */

/* Each batch of `up` split into its rows, along the leading dimension
 * (tf.data's unbatch).  A field of upstream schema [B, d...] yields rows
 * [d...]; a field named in lod[0..nlod) (borrowed names, copied) holds LoD
 * sequences (sl_batch's concatenated variable fields: schema [SL_DIM_VAR,
 * t...]) and is split by its offsets: row i is [lod[i+1] - lod[i], t...] and
 * the output schema keeps the field's shape.  Bytes fields follow the same
 * rules.  Rows are views of the batch's buffers, not copies.  A batch whose
 * fields disagree on the row count, a listed field without LoD offsets or an
 * unlisted one with them is SL_ESHAPE naming the field and the batch.
 * Construction: SL_EINVAL for a rank-0 field, a listed field that does not
 * exist or whose first dimension is fixed.  Length: upstream's length x B
 * when every field's B is fixed, else unknown.  Save/restore: a save maps
 * its position to (batch j, row r) through a log of the last 1024 batches'
 * first rows, resumes upstream at j and drops r rows (a save further behind
 * replays the pass).  Takes `up`, also on failure.  Single consumer. */
SL_API int sl_unbatch(sl_reader *up, const char *const *lod, size_t nlod,
                      sl_reader **out);

/* The rows of `up`'s batches re-cut into batches of n (tf.data's rebatch):
 * sl_unbatch(up, lod, nlod) then sl_batch(n, opts) (`opts` NULL: keep the
 * last partial batch; LoD fields are concatenated with LoD again).  Errors,
 * length and save/restore are those of the two stages.  n 0 is SL_EINVAL.
 * Takes `up`, also on failure.  Single consumer. */
SL_API int sl_rebatch(sl_reader *up, size_t n, const sl_batch_opts *opts,
                      const char *const *lod, size_t nlod, sl_reader **out);

/* Options of sl_interleave*.  Extensible: `size` must be
 * sizeof(sl_interleave_opts) (SL_INTERLEAVE_OPTS_INIT sets it and the
 * defaults). */
typedef struct sl_interleave_opts {
  size_t size;      /* sizeof(sl_interleave_opts) */
  uint32_t cycle;   /* sources open at once, >= 1 (INIT: 1) */
  uint32_t threads; /* 0: sources read on the consumer's thread; > 0: each
                       open source is read ahead on a prefetch thread of its
                       own (so up to `cycle` threads), holding up to
                       threads x block samples; the order is unchanged */
  uint64_t block;   /* samples taken from a source per turn, >= 1 (INIT: 1) */
} sl_interleave_opts;
/* clang-format off */
#define SL_INTERLEAVE_OPTS_INIT {sizeof(sl_interleave_opts), 1, 0, 1}
/* clang-format on */

/* Opens source i (0 <= i < n) of sl_interleave_sources into *out: returns
 * SL_OK, or an error with its message (the pass then fails with it).  Called
 * on the consumer's thread (or a restoring thread), again each pass. */
typedef int (*sl_source_open_fn)(void *ud, size_t i, sl_reader **out);

/* tf.data's interleave (deterministic): `cycle` sources are open at once;
 * the stage takes `block` samples from each in turn, round robin; when a
 * source ends its slot is emptied and the turn moves on, and the next time
 * the turn reaches the empty slot the next unopened source opens there
 * (sources open in order 0, 1, ...).  The order depends only on the
 * sources' contents, never on `threads`.  Errors of a source pass through
 * and end the pass.
 *
 * sl_interleave takes the `n` readers (also on failure); their schemas must
 * be equal (SL_ESHAPE naming the first that differs).  Reset resets them
 * all.  Length: the sum of the readers' lengths.  Save/restore: the cycle's
 * position (open slots, their sources' positions) through a log of the last
 * outputs; each reader is saved at its own position (a save further behind
 * than the log replays the pass).
 *
 * sl_interleave_sources opens source i by calling open(ud, i) when its turn
 * comes and destroys it when it ends, so at most `cycle` are open (plus
 * source 0, opened at construction for the schema and used by the first
 * pass); each pass opens them again.  A source whose schema differs from
 * source 0's fails the pass (SL_ESHAPE naming it).  free_ud(ud) runs on
 * destroy and on failure.  `ident` (borrowed, copied; NULL: none) names the
 * sources for state checks.  Length: unknown.  Save/restore: the cycle's
 * position; a restore opens the cycle's sources again and reads each up to
 * its position (cost: those samples, not the pass).
 *
 * sl_interleave_open: sources by sl_open name (`names[0..n)`, copied; tags,
 * globs as sl_open, each name one source), opened lazily as above.
 *
 * SL_EINVAL: n 0, a NULL reader, name or callback, cycle or block 0,
 * threads beyond the limit; SL_EUNSUPPORTED for a larger opts->size;
 * `opts` NULL means SL_INTERLEAVE_OPTS_INIT.  Single consumer. */
SL_API int sl_interleave(sl_reader **readers, size_t n,
                         const sl_interleave_opts *opts, sl_reader **out);
SL_API int sl_interleave_sources(size_t n, sl_source_open_fn open, void *ud,
                                 sl_free_fn free_ud, const char *ident,
                                 const sl_interleave_opts *opts,
                                 sl_reader **out);
SL_API int sl_interleave_open(const char *const *names, size_t n,
                              const sl_interleave_opts *opts, sl_reader **out);

/* Options of sl_shard.  Extensible: `size` must be sizeof(sl_shard_opts)
 * (SL_SHARD_OPTS_INIT sets it and the default). */
typedef struct sl_shard_opts {
  size_t size;               /* sizeof(sl_shard_opts) */
  sl_shard_policy remainder; /* INIT: SL_SHARD_UNEVEN */
} sl_shard_opts;
#define SL_SHARD_OPTS_INIT {sizeof(sl_shard_opts), SL_SHARD_UNEVEN}

/* Rank `rank` of `world`'s share of any reader (tf.data's shard): upstream
 * sample i of a pass goes to rank i % world; the stage reads the whole pass
 * and yields its rank's samples in order.  The last n % world samples of a
 * pass of n follow opts->remainder (PyTorch DistributedSampler's choices):
 * SL_SHARD_UNEVEN (default, tf.data): ranks below n % world yield one more;
 * SL_SHARD_DROP (drop_last): every rank yields floor(n/world), only complete
 * groups of `world` count (no sample twice over the ranks); SL_SHARD_PAD:
 * every rank yields ceil(n/world), positions >= n wrapping to the first
 * samples of the pass (sample p mod n), which needs sl_reader_length of `up`
 * (SL_EUNSUPPORTED saying so when unknown; a pass of another length is
 * SL_ECORRUPT).  World and rank from the launcher's environment:
 * sl_shard_env.  SL_EINVAL: world < 1, rank not in [0, world), a bad
 * remainder.  Length: the share of upstream's.  Save/restore: the
 * upstream position of the rank's next sample (a pad rank that still owes
 * its wrapped sample rereads from it).  Takes `up`, also on failure.
 * Single consumer. */
SL_API int sl_shard(sl_reader *up, int world, int rank,
                    const sl_shard_opts *opts, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* File readers: idx and text, and text parser plugins (docs/PLUGINS.md)     */
/* ------------------------------------------------------------------------ */

/* A reader over an idx image file (MNIST, Fashion-MNIST; plain or gzip) and
 * its labels: samples {image: <dtype>[d1, ..., dk], label: i64[]}, for
 * Fashion-MNIST {image: u8[28, 28], label: i64[]}, in file order; each reset
 * starts again.  The images file must have rank >= 2; the labels file rank 1
 * of an integer type (widened to i64 once, at open), with as many items.
 * `labels` NULL derives the labels file from the images file's name: the
 * last "images-idx3" or "images.idx3" in its base name becomes
 * "labels-idx1" / "labels.idx1" (so "t10k-images-idx3-ubyte.gz" pairs with
 * "t10k-labels-idx1-ubyte.gz"); when that file does not exist but the same
 * name with ".gz" added or removed does, that one is used.  Both files are
 * loaded whole at open; samples are zero-copy views into the two loaded
 * buffers, which live as long as the reader or any sample.  Borrows the
 * strings.  Returns SL_OK and *out; SL_EINVAL (a name with no labels
 * convention, a dtype/rank or count mismatch, naming both files); SL_EIO or
 * SL_ECORRUPT naming the file from the idx parser (missing, truncated,
 * corrupt gzip).  The reader, like any, is used by one thread at a time. */
SL_API int sl_idx_reader(const char *images, const char *labels,
                         sl_reader **out);

/* The version of the parser plugin ABI below; a plugin built against another
 * version is refused.  Bumped whenever sl_parser_api changes. */
#define SL_PARSER_ABI_VERSION 1u

/* What a parse callback returns to drop a line (a header, a comment): no
 * sample comes out of it, and reading goes on with the next line. */
#define SL_PARSER_SKIP 1

/* A text parser plugin: a shared object exporting
 *   const sl_parser_api *sl_parser_entry(void);
 * that returns a pointer to static storage.  libsluice loads it with
 * dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) - never unloaded, so samples
 * whose buffers were made by plugin code stay valid - and checks abi_version
 * before reading any other field.  The plugin calls the host's sl_* functions
 * (sl_schema_new, sl_sample_alloc, sl_set_error, ...): link it against the
 * shared libsluice, and load it into a process that uses that same libsluice
 * (or exports the same sl_* symbols), so both sides share one library. */
typedef struct sl_parser_api {
  uint32_t abi_version; /* SL_PARSER_ABI_VERSION, first in every version */
  const char *name;     /* short name for messages ("csv_floats") */
  /* Parses `options` (never NULL; "" when none) and builds the schema of
   * the samples it will make.  Returns SL_OK with *schema (a reference the
   * caller takes) and *state (opaque, may be NULL), or an error with
   * sl_set_error and nothing to free.  Called once per reader; several
   * readers may call it at the same time from different threads. */
  int (*init)(const char *options, sl_schema **schema, void **state);
  /* Turns one line (`len` bytes, not NUL-terminated, newline and a trailing
   * '\r' removed; may be empty) into a new sample of the schema, stored in
   * *out (the caller takes it).  Returns SL_OK, SL_PARSER_SKIP (no sample
   * for this line), or an error with sl_set_error saying what is wrong
   * (the host adds the file, line and plugin); after anything but SL_OK,
   * *out is ignored (leave it NULL, release what you made).  SL_EOF is not
   * an error code and is refused.  One state is used by one thread at a
   * time; `line` is valid only during the call. */
  int (*parse)(void *state, const char *line, size_t len, sl_sample **out);
  /* Frees the state (may be NULL: nothing to free). */
  void (*destroy)(void *state);
} sl_parser_api;

/* The symbol a plugin exports, and its type.  Define the entry point with
 * SL_PARSER_EXPORT so it stays visible when the plugin is compiled with
 * -fvisibility=hidden (as sluice's own build compiles everything):
 *   SL_PARSER_EXPORT const sl_parser_api *sl_parser_entry(void) { ... } */
#define SL_PARSER_ENTRY "sl_parser_entry"
typedef const sl_parser_api *(*sl_parser_entry_fn)(void);
#if defined(__GNUC__)
#define SL_PARSER_EXPORT __attribute__((visibility("default")))
#else
#define SL_PARSER_EXPORT
#endif
/* The plugin's entry point, declared here so that a plugin's definition is
 * checked against it (libsluice itself does not define it). */
SL_PARSER_EXPORT const sl_parser_api *sl_parser_entry(void);

/* A reader over the lines of the text file `path`: one sample per line
 * ("\n" ends a line and is removed, then one trailing "\r"; a last line
 * without "\n" counts; an empty file has no samples), in order; each reset
 * starts again.  use_mmap 1 maps the file (lines are zero-copy views into
 * the mapping, which lives while any sample does; a file truncated meanwhile
 * faults, as any mapping does); 0 reads it with read(2) in pieces into a
 * growing buffer and copies each line.  Both give identical samples.
 *
 * Without `parser` the schema is {line: bytes[-1]}.  With `parser` (the path
 * of a plugin, see sl_parser_api) each line goes to the plugin, started with
 * `parser_options` (NULL = ""), and the reader's schema is the one the
 * plugin declares; every sample it returns is checked against it.
 *
 * Errors name the file and, while reading, the 1-based line: SL_EIO
 * ("text: PATH: cannot open: ..."); a plugin that cannot be loaded (SL_EINVAL
 * with dlerror's text), lacks sl_parser_entry (SL_EINVAL) or has another ABI
 * version (SL_EUNSUPPORTED "... ABI version 2, this libsluice expects 1");
 * its init failing (its code, "text: PATH: parser NAME (SO): init: ...");
 * a line it rejects (its code, "text: PATH:17: parser NAME (SO): <its
 * message>"); a sample that does not fit the declared schema (SL_ESHAPE
 * "text: PATH:17: parser NAME (SO): field 'x': expected f32[4], got ...").
 * Borrows the strings (copied).  Returns SL_OK and *out or an error. */
SL_API int sl_text_reader(const char *path, int use_mmap, const char *parser,
                          const char *parser_options, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Language-model data: token shards, windows, packing, padded and bucketed */
/* batches, weighted mixtures (docs/TEXT.md)                                */
/* ------------------------------------------------------------------------ */

/* Options of the token-shard reader.  Extensible like sl_open_opts: `size`
 * is sizeof(sl_tokens_opts) as the caller compiled it (SL_TOKENS_OPTS_INIT
 * sets it); the zero of every other field is its default. */
typedef struct sl_tokens_opts {
  size_t size;
  int64_t seq_len; /* T >= 1: each sample is T inputs and T targets */
  int shuffle;     /* 1: shard order per pass, window order within each */
  uint64_t seed;   /* of the shuffle: (seed, pass) decides every order */
  int rank;        /* this rank, 0 <= rank < world */
  int world;       /* ranks; 0: 1 for sl_tokens_reader, the launcher's
                      environment (sl_shard_env) for sl_tokens_open/sl_open */
  uint64_t block;  /* windows per rank block; 0 means 1 */
  int batch;       /* 1: each sample is a block, [block, T] (below) */
} sl_tokens_opts;
#define SL_TOKENS_OPTS_INIT {sizeof(sl_tokens_opts), 0, 0, 0, 0, 0, 0, 0}

/* A reader of token shards `paths[0..n)`: llm.c's format (a header of 256
 * little-endian int32: magic 20240520, version 1, token count N; then N
 * little-endian uint16 tokens) or a .npy file of a 1-D '<u2' or '<u4' array
 * (told apart by their first bytes).  Each file is checked at construction
 * (magic, version, header, its size against N: SL_ECORRUPT naming the file
 * and what is wrong; SL_EIO when it cannot be opened) and mapped with mmap
 * while it is read.  Samples are {inputs: i32[T], targets: i32[T]}: the
 * T + 1 tokens from w*T of window w (targets = inputs shifted by one), for
 * w < (N - 1) / T within each shard (a shard shorter than T + 1 tokens
 * gives none).  Ranks: the windows of a shard form rounds of world x block
 * windows (an incomplete last round is left out, so every rank gets as
 * many); rank r takes windows [(g*world + r)*block, ... + block) of round g.
 * With block = B and no shuffle, sl_batch(B) on rank r of W gives, batch for
 * batch, llm.c's DataLoader(B, T, r, W) batches within each shard.  Shards
 * come in the order given, windows in order; with shuffle, the shard order
 * of each pass and the round order within each shard are permutations drawn
 * from (seed, pass, shard), the same on every rank.  With batch = 1 each
 * sample is a whole block, {inputs: i32[block, T], targets: i32[block,
 * T]}: what sl_batch(block) makes of the windows (llm.c's batch), cut in
 * one go from the block's contiguous tokens instead of copied again.
 * Length: known.  Saves its position (no payload).  Borrows the strings (copied).  Returns SL_OK
 * and *out, SL_EINVAL (no files, seq_len < 1, rank outside [0, world)),
 * SL_ECORRUPT, SL_EIO or SL_ENOMEM. */
SL_API int sl_tokens_reader(const char *const *paths, size_t n,
                            const sl_tokens_opts *opts, sl_reader **out);
/* sl_tokens_reader over the files `name` names ("tokens:" optional; a glob
 * pattern expands in byte order, as sl_open), world 0 taken from the
 * launcher's environment (sl_shard_env).  The whole set is one reader, so
 * shuffle permutes the shard order too; sl_open("tokens:...") with
 * sl_open_opts.tokens opens each file as its own reader and chains them
 * (shards in glob order, windows shuffled within each). */
SL_API int sl_tokens_open(const char *name, const sl_tokens_opts *opts,
                          sl_reader **out);

/* Fixed windows over a token stream (tf.data's window + flat_map): the
 * values of field `field` (a rank-1 variable-length i32, u16 or u32 field)
 * of every upstream sample, concatenated across sample boundaries, are cut
 * into windows of `size` values starting every `stride` values (window j:
 * stream values [j*stride, j*stride + size)).  Samples are {field: [size]}
 * of the field's dtype, the other fields dropped.  At the end of the pass,
 * windows that start inside the stream but are short are yielded
 * (shape [SL_DIM_VAR] then) unless drop_remainder.  stride 0 means size.
 * Saves its position: the upstream sample where the next window starts and
 * the offset in it (further behind than its last 1024 windows: restore
 * re-reads the pass up to it).  Returns SL_OK,
 * SL_EINVAL (size 0, unknown field, wrong dtype or shape) or SL_ENOMEM;
 * takes `up` also on failure. */
SL_API int sl_window(sl_reader *up, const char *field, size_t size,
                     size_t stride, int drop_remainder, sl_reader **out);

/* Options of sl_pack.  Zero is the default of every field but seq_len. */
typedef struct sl_pack_opts {
  size_t size;             /* sizeof(sl_pack_opts) */
  int64_t seq_len;         /* T >= 1: tokens per row */
  const char *const *fields; /* the fields packed; NULL: the first rank-1
                                i32/u16/u32/i64 field */
  size_t nfields;
  int has_eos;             /* 1: append `eos` to every document */
  int64_t eos;
  int64_t pad;             /* value of padding positions (default 0) */
  size_t lookahead;        /* rows open at once for first-fit; 0 means 8 */
  int truncate;            /* documents longer than T: 0 split into pieces
                              of T (each its own segment), 1 keep the first
                              T tokens */
} sl_pack_opts;
#define SL_PACK_OPTS_INIT {sizeof(sl_pack_opts), 0, NULL, 0, 0, 0, 0, 0, 0}

/* Packs variable-length documents (the rank-1 i32/u16/u32/i64 fields
 * `fields`, equally long in each sample) into rows of exactly T tokens:
 * samples {<field>: i32[T]..., segment_ids: i32[T], positions: i32[T]},
 * segment_ids numbering the documents of a row 1, 2, ... (0: padding) and
 * positions counting from 0 within each document.  First fit over a
 * bounded look-ahead: each document goes into the first of the `lookahead`
 * open rows with room for it; when none has room a new row opens, and
 * when more than `lookahead` are open the oldest is yielded; at the end of
 * the pass the open rows are yielded oldest first.  Empty documents (with
 * no eos) are skipped.  Deterministic.  Statistics: sl_pack_stats.  Saves
 * its position (restore re-reads the pass up to it).  Returns SL_OK,
 * SL_EINVAL (seq_len < 1, unknown or unsuitable field) or SL_ENOMEM; takes
 * `up` also on failure. */
SL_API int sl_pack(sl_reader *up, const sl_pack_opts *opts, sl_reader **out);
/* The packing figures of the first pack stage of r's chain in the order of
 * sl_reader_stats (r itself first, then its upstreams depth first): rows
 * yielded, non-pad tokens in
 * them and efficiency = tokens / (rows x T) (0 before the first row); each
 * out pointer may be NULL.  Cumulative over passes.  SL_ENOTFOUND when the
 * chain has no pack stage, SL_EINVAL for NULL r.  Same thread rule as
 * sl_reader_stats. */
SL_API int sl_pack_stats(const sl_reader *r, uint64_t *rows, uint64_t *tokens,
                         double *efficiency);

/* A padding value for one field of sl_padded_batch / sl_bucket_batch. */
typedef struct sl_pad_value {
  const char *field;
  double value; /* converted to the field's dtype */
} sl_pad_value;

typedef struct sl_padded_batch_opts {
  size_t size;              /* sizeof(sl_padded_batch_opts) */
  int64_t to;               /* 0: the longest in the batch; > 0: that length
                               (a longer sample is SL_ESHAPE) */
  const sl_pad_value *pad;  /* per-field values (default 0) */
  size_t npad;
  int drop_remainder;       /* 1: no short last batch */
} sl_padded_batch_opts;
#define SL_PADDED_BATCH_OPTS_INIT {sizeof(sl_padded_batch_opts), 0, NULL, 0, 0}

/* Batches of n samples whose variable fields (dim 0 variable, the others
 * fixed) are padded along dim 0 with their pad value to the longest in the
 * batch (or to `to`), each followed by "<name>_len" i64[B], the lengths;
 * fixed fields are stacked (tf.data's padded_batch).  Saves its position
 * (batch k starts at upstream sample k*n).  Returns SL_OK, SL_EINVAL (n 0,
 * a pad for an unknown field, a field that cannot be padded) or SL_ENOMEM;
 * takes `up` also on failure. */
SL_API int sl_padded_batch(sl_reader *up, size_t n,
                           const sl_padded_batch_opts *opts, sl_reader **out);

typedef struct sl_bucket_batch_opts {
  size_t size;                /* sizeof(sl_bucket_batch_opts) */
  const char *length;         /* field whose dim 0 is the length; NULL: the
                                 first variable field */
  const int64_t *boundaries;  /* nboundaries increasing lengths */
  size_t nboundaries;
  const size_t *batch_sizes;  /* nboundaries + 1 sizes, each >= 1 */
  const sl_pad_value *pad;    /* per-field values (default 0) */
  size_t npad;
  int pad_to_bucket;          /* 1: pad to the bucket's bound - 1 (the last
                                 bucket: the longest in the batch) */
  int drop_remainder;         /* 1: drop the partial buckets at the end */
} sl_bucket_batch_opts;
#define SL_BUCKET_BATCH_OPTS_INIT                                              \
  {sizeof(sl_bucket_batch_opts), NULL, NULL, 0, NULL, NULL, 0, 0, 0}

/* Batches by length (tf.data's bucket_by_sequence_length): a sample of
 * length L goes to bucket i, the first with L < boundaries[i] (the last,
 * nboundaries, when none); a bucket that holds batch_sizes[i] samples is
 * yielded as a padded batch (sl_padded_batch's fields); at the end of the
 * pass the partial buckets are yielded in bucket order unless
 * drop_remainder.  No random draw: the output is a function of the input
 * order (shuffle upstream for random batches).  Saves its position
 * (restore re-reads the pass up to it).  Returns SL_OK, SL_EINVAL or
 * SL_ENOMEM; takes `up` also on failure. */
SL_API int sl_bucket_batch(sl_reader *up, const sl_bucket_batch_opts *opts,
                           sl_reader **out);

typedef enum sl_mix_stop {
  SL_MIX_STOP_FIRST = 0, /* the mixture ends when a drawn reader ends */
  SL_MIX_STOP_ALL = 1,   /* an ended reader leaves the draw; ends with the
                            last */
  SL_MIX_STOP_NEVER = 2  /* an ended reader is reset and drawn again */
} sl_mix_stop;

typedef struct sl_mix_opts {
  size_t size;            /* sizeof(sl_mix_opts) */
  const double *weights;  /* n weights >= 0, not all 0; NULL: equal */
  uint64_t seed;
  int stop;               /* an sl_mix_stop */
  /* 0 (default): each pass draws its own order (keyed by the pass number);
   * 1: every pass draws pass 0's order, as tf.data's sample_from_datasets
   * does unless rerandomize_each_iteration. */
  int keep_order;
} sl_mix_opts;
/* clang-format off */
#define SL_MIX_OPTS_INIT {sizeof(sl_mix_opts), NULL, 0, SL_MIX_STOP_FIRST, 0}
/* clang-format on */

/* Draws each output from one of `readers[0..n)` chosen by weight: output j of
 * pass p comes from the reader a counter-based draw keyed by (seed, p, j) -
 * (seed, 0, j) with keep_order - picks among those still drawn (weights
 * renormalised), so the same seed gives the same interleaving whatever the
 * threads do.  A restore to pass p followed by a reset draws pass p + 1's order
 * (pass 0's with keep_order), as the run that saved would have.  The readers
 * must have equal schemas (SL_ESHAPE).  Statistics: sl_mix_counts.  Saves its
 * position (restore re-reads the pass up to it).  Takes the readers also on
 * failure.  Returns SL_OK, SL_EINVAL (no readers, bad weights or stop),
 * SL_ESHAPE or SL_ENOMEM. */
SL_API int sl_mix(sl_reader **readers, size_t n, const sl_mix_opts *opts,
                  sl_reader **out);
/* The samples the first mix stage of r's chain (in sl_reader_stats's
 * order, r first) has taken from each of its readers, cumulative over passes: counts[i]
 * for i < min(cap, readers), *n (may be NULL) the number of readers.  The
 * realised shares are counts[i] / sum.  SL_ENOTFOUND without a mix stage,
 * SL_EINVAL for NULL r or NULL counts with cap > 0. */
SL_API int sl_mix_counts(const sl_reader *r, uint64_t *counts, size_t cap,
                         size_t *n);

/* ------------------------------------------------------------------------ */
/* --- samplers and splits --- (src/readers/sampler.c, docs/LUA.md)          */
/* ------------------------------------------------------------------------ */

/* These stages read their upstream by position (random access), never by
 * pulling it: the upstream must offer it - range, from_array, slr (policy
 * fail), idx, sl_cache, and these stages themselves - else the constructor
 * fails with SL_EUNSUPPORTED suggesting sl_cache or sampling the source
 * before a map.  Positions and indices are 0-based.  Each saves its
 * position (a pass is a pure function of its seed and pass number). */

typedef struct sl_weighted_sample_opts {
  size_t size;             /* sizeof(sl_weighted_sample_opts) */
  uint64_t num_samples;    /* samples per pass; 0: the upstream's length */
  int without_replacement; /* 1: each index at most once per pass */
  uint64_t seed;
} sl_weighted_sample_opts;
#define SL_WEIGHTED_SAMPLE_OPTS_INIT {sizeof(sl_weighted_sample_opts), 0, 0, 0}

/* PyTorch's WeightedRandomSampler: each pass yields num_samples samples of
 * `up`, index i drawn with probability weights[i] / sum (n_weights must be
 * up's length, which must be known).  Draw k of pass p is a pure function
 * of (seed, p, k) (without replacement: of (seed, p)), so passes differ and
 * repeat exactly after a restore.  Without replacement num_samples must not
 * exceed the number of nonzero weights.  `weights` is copied.  Takes `up`
 * also on failure.  Returns SL_OK; SL_EINVAL (weights negative, NaN,
 * infinite, all 0, or not one per sample; num_samples too large);
 * SL_EUNSUPPORTED (no random access or unknown length); SL_ENOMEM. */
SL_API int sl_weighted_sample(sl_reader *up, const double *weights,
                              size_t n_weights,
                              const sl_weighted_sample_opts *opts,
                              sl_reader **out);

/* PyTorch's Subset: each pass yields up's samples at indices[0..n) in that
 * order (repeats allowed; `indices` is copied).  An index past up's length
 * is SL_EINVAL naming it when the length is known, else the pass's error
 * when reached.  Takes `up` also on failure.  Returns SL_OK, SL_EINVAL,
 * SL_EUNSUPPORTED (no random access) or SL_ENOMEM. */
SL_API int sl_subset(sl_reader *up, const uint64_t *indices, size_t n,
                     sl_reader **out);

/* PyTorch's random_split: partitions up's samples (its length must be
 * known) into k readers out[0..k) by one permutation drawn from `seed`
 * (the same seed, the same split).  sizes[0..k) are fractions summing to 1
 * - each floor(n * f), then the remainder one by one round-robin from the
 * first (PyTorch's rule) - or whole counts summing to n.  The k readers
 * share `up` through a mutex-guarded, refcounted handle: each is an
 * independent reader (own position, reset, destroy) that may be used on
 * its own thread; the last destroyed destroys `up`.  Takes `up` also on
 * failure (every out[i] is then NULL).  Returns SL_OK; SL_EINVAL (bad
 * sizes, NULL arguments); SL_EUNSUPPORTED (no random access, unknown
 * length); SL_ENOMEM. */
SL_API int sl_random_split(sl_reader *up, const double *sizes, size_t k,
                           uint64_t seed, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* --- devices and the double buffer --- (docs/DEVICE.md)                    */
/* ------------------------------------------------------------------------ */

/* Where the bytes of a buffer live.  The values are DLPack's DLDeviceType
 * codes.  Every buffer is SL_DEVICE_CPU unless it was made by
 * sl_buffer_wrap_device (the double buffer's CUDA engine does so): a
 * tensor's `data` is then an address on that device, which host code must
 * not dereference. */
typedef enum sl_device_type {
  SL_DEVICE_CPU = 1,      /* ordinary host memory */
  SL_DEVICE_CUDA = 2,     /* CUDA device memory (not readable by the host) */
  SL_DEVICE_CUDA_HOST = 3 /* page-locked host memory (cudaHostAlloc):
                             readable by the host and by CUDA devices */
} sl_device_type;

/* Like sl_buffer_wrap, for `size` bytes at `data` on device `type` number
 * `device_id` (>= 0; 0 for host memory).  sl_buffer_data returns `data` (a
 * device address for SL_DEVICE_CUDA).  free_fn(ud, data) runs when the last
 * reference goes, on whatever thread drops it.  Returns NULL with
 * SL_EINVAL (unknown type, negative id) or SL_ENOMEM detail; free_fn is
 * then NOT called.  Thread-safe. */
SL_API sl_buffer *sl_buffer_wrap_device(void *data, size_t size,
                                        sl_device_type type, int device_id,
                                        sl_buffer_free_fn free_fn, void *ud);
/* The device of `b`'s bytes, and its number in *device_id (may be NULL).
 * A NULL buffer is SL_DEVICE_CPU, number 0.  Thread-safe. */
SL_API sl_device_type sl_buffer_device(const sl_buffer *b, int *device_id);
/* The device of tensor `t`'s data (that of t->buf; a tensor without a
 * buffer, or a NULL `t`, is SL_DEVICE_CPU).  The per-field device pointer
 * is t->data (sl_tensor_data).  LoD offsets are always host memory.
 * Borrows `t`; never fails.  Thread-safe on a published sample's tensor. */
SL_API sl_device_type sl_tensor_device(const sl_tensor *t, int *device_id);
/* Writes "cpu", "cuda:N" or "cuda_host" into buf (always NUL-terminated;
 * "unknown" for a type not in sl_device_type).  Returns buf.  Thread-safe. */
SL_API char *sl_device_describe(sl_device_type type, int device_id, char *buf,
                                size_t size);

/* Options of sl_double_buffer.  Extensible like sl_open_opts: `size` must be
 * sizeof(sl_double_buffer_opts) (SL_DOUBLE_BUFFER_OPTS_INIT sets it and the
 * defaults). */
typedef struct sl_double_buffer_opts {
  size_t size;        /* sizeof(sl_double_buffer_opts) */
  const char *device; /* "cpu", "cuda" (= "cuda:0"), "cuda:N" or "auto";
                         NULL means "auto".  Borrowed for the call. */
  uint32_t slots;     /* batches in flight, 1..256 (the INIT macro: 2).  The
                         consumer may hold at most this many at once. */
  void *stream;       /* CUDA: the cudaStream_t the consumer's work on the
                         batches is queued on; NULL is the legacy default
                         stream.  Handing a batch out makes this stream wait
                         for its copy; releasing it records an event on this
                         stream that the next copy into the slot waits for.
                         Ignored by the host engine. */
  uint32_t release_wait_ms; /* when every slot is held, how long next waits
                               for another thread to release a batch before
                               SL_ESTATE; 0 (default): report at once */
} sl_double_buffer_opts;
/* clang-format off */
#define SL_DOUBLE_BUFFER_OPTS_INIT                                             \
  {sizeof(sl_double_buffer_opts), "auto" /* device */, 2 /* slots */,         \
   NULL /* stream */, 0 /* release_wait_ms */}
/* clang-format on */

/* Moves batches into device memory ahead of the consumer (Paddle's
 * DoubleBuffer, without its guess): a copy thread, started now, pulls `up`
 * and copies each batch into one of `slots` slots while the consumer uses
 * the batches before it.  The batches it yields have `up`'s schema; each
 * field is a view into the batch's slot, on the engine's device
 * (sl_tensor_device: SL_DEVICE_CUDA for the CUDA engine, whose t->data are
 * device pointers; SL_DEVICE_CPU for the host engine, which copies into
 * 256-byte aligned host slots).  LoD offsets stay in host memory.
 *
 * Slots: a slot is reused only when every reference to its memory is gone
 * (the batch released, DLPack exports deleted, tensors copied from it
 * cleared), never on a guess.  A consumer that holds `slots` batches and
 * asks for another gets SL_ESTATE ("double_buffer: the consumer holds all 2
 * slots ...") instead of a deadlock - at once, or after release_wait_ms when
 * batches are released by other threads; the error is sticky until reset,
 * like every reader error.  Batches outstanding across sl_reader_reset and
 * sl_reader_destroy stay valid: their slots live until released.
 *
 * Engines: "cpu" is the host engine.  "cuda:N" is the CUDA engine on device
 * N: the CUDA runtime (libcudart.so) is loaded at run time, page-locked
 * staging and device memory are allocated per slot once (and grown only
 * when a batch does not fit), copies run on a dedicated non-blocking
 * stream, and events order the copy before the consumer's use and the
 * consumer's use (see `stream`) before the slot's next copy.  "auto" is
 * CUDA device 0 when the CUDA engine can start, else the host engine, saying
 * why on stderr once per process.
 *
 * Every field of upstream's batches must be in host memory (SL_DEVICE_CPU or
 * SL_DEVICE_CUDA_HOST): a batch already on a device is SL_EINVAL naming the
 * field.  Upstream errors reach the consumer in order with their message;
 * copy failures are SL_ENOMEM or SL_ECUDA naming the slot and the CUDA call.
 *
 * Takes `up` (destroyed also on failure).  `opts` NULL means
 * SL_DOUBLE_BUFFER_OPTS_INIT.  Returns SL_OK and *out, or: SL_EINVAL (NULL
 * up or out, bad size, slots outside 1..256, a device string that is not
 * one of the above, e.g. "tpu:0" or "cuda:x"), SL_EUNSUPPORTED (a CUDA
 * device asked of a libsluice built without the CUDA toolkit's headers, or
 * options from a newer header), SL_ECUDA (the runtime cannot be loaded, no
 * driver or device, or a failing CUDA call: the message names the CUDA
 * error, e.g. "cudaErrorNoDevice (no CUDA-capable device is detected)", and
 * the call), SL_ENOMEM.  The reader, like any, is used by one thread at a
 * time; its batches may be released from any thread. */
SL_API int sl_double_buffer(sl_reader *up, const sl_double_buffer_opts *opts,
                            sl_reader **out);

/* DLPack (https://github.com/dmlc/dlpack, the legacy DLManagedTensor of
 * dlpack.h 0.6 and later): `#include <dlpack/dlpack.h>` to read it. */
struct DLManagedTensor;
/* Exports field `field` of `s` as a new DLManagedTensor, zero-copy: its
 * data is the field's data (byte_offset 0), its device that of the field's
 * buffer (kDLCPU, kDLCUDA or kDLCUDAHost), shape the field's, strides the
 * compact row-major ones (in elements), dtype per sl_dtype: signed ints
 * kDLInt, unsigned ints kDLUInt, f16/f32/f64 kDLFloat, bf16 kDLBfloat,
 * bool code 6 (kDLBool since DLPack 0.8) with 8 bits, bytes kDLUInt 8 bits.
 * A ragged field exports its concatenated values (read the offsets with
 * sl_tensor_lod).  The export holds a reference to `s` (the caller keeps
 * its own): the batch and its slot stay alive until the consumer calls the
 * tensor's deleter, exactly once, from any thread.  Returns SL_OK and
 * *out, or SL_EINVAL (NULL argument, field out of range) or SL_ENOMEM.
 * Thread-safe on a published sample. */
SL_API int sl_sample_to_dlpack(sl_sample *s, int field,
                               struct DLManagedTensor **out);

/* ------------------------------------------------------------------------ */
/* --- images --- JPEG/PNG decoding, the image reader (docs/IMAGES.md)        */
/* ------------------------------------------------------------------------ */

/* Encoded image formats, told apart by their first bytes. */
typedef enum sl_image_format {
  SL_IMAGE_UNKNOWN = 0,
  SL_IMAGE_JPEG = 1, /* FF D8 FF */
  SL_IMAGE_PNG = 2   /* 89 'P' 'N' 'G' 0D 0A 1A 0A */
} sl_image_format;

/* Resize filters (exact arithmetic in docs/IMAGES.md). */
typedef enum sl_resize_filter {
  SL_RESIZE_NONE = 0,    /* keep the decoded size */
  SL_RESIZE_NEAREST = 1, /* nearest neighbour, pixel centres aligned */
  SL_RESIZE_BILINEAR = 2 /* bilinear, pixel centres aligned, 11-bit weights */
} sl_resize_filter;

/* What a decoded image looks like: u8 [height, width, channels].  A plain
 * struct (no size field) used inside sl_image_opts; all zeros = as stored. */
typedef struct sl_image_shape {
  int channels;           /* 1 (gray), 3 (RGB), or 0: as stored (1 for a
                             grayscale image, 3 otherwise); alpha dropped */
  uint32_t height, width; /* with resize: the output size (both required);
                             without: a declared size checked against every
                             image (0 = any), a mismatch is SL_ESHAPE */
  sl_resize_filter resize;
} sl_image_shape;

/* The format of `size` bytes at `data` by their magic (NULL data is
 * SL_IMAGE_UNKNOWN).  Pure function; thread-safe. */
SL_API sl_image_format sl_image_sniff(const void *data, size_t size);

/* Decodes one JPEG or PNG image (`size` bytes at `data`, borrowed) into
 * `out`, a new u8 [H, W, C] tensor in its own buffer, owned by the caller
 * (sl_tensor_clear it).  `shape` (may be NULL: as stored) chooses channels,
 * resizes or checks the size.  `what` (may be NULL: "image") names the image
 * in every message.  Returns SL_OK, or with `out` zeroed: SL_ECORRUPT for
 * bytes that are not a JPEG or PNG, a damaged or truncated image (any libjpeg
 * warning included), or one that would decode to more than 256 MiB; the
 * message is "<what>: jpeg: <TurboJPEG's message>" or "<what>: png:
 * <libspng's message>"; SL_ESHAPE when the image's size differs from a
 * declared height/width (without resize); SL_EINVAL for bad arguments;
 * SL_ENOMEM.  Thread-safe (each call uses its own decoder). */
SL_API int sl_image_decode(const void *data, size_t size,
                           const sl_image_shape *shape, const char *what,
                           sl_tensor *out);

/* Resizes `in` (u8 [H, W, C], 1 <= C <= 4, borrowed) to `height` x `width`
 * with `filter` (SL_RESIZE_NEAREST or SL_RESIZE_BILINEAR) into `out`, a new
 * tensor owned by the caller.  Returns SL_OK, or with `out` zeroed:
 * SL_ESHAPE (not such a tensor), SL_EINVAL (bad filter or size, 1..65535),
 * SL_ENOMEM.  Deterministic to the byte.  Thread-safe. */
SL_API int sl_image_resize(const sl_tensor *in, uint32_t height, uint32_t width,
                           sl_resize_filter filter, sl_tensor *out);

/* Options of sl_decode_image and sl_image_reader.  Extensible like
 * sl_open_opts: `size` must be sizeof(sl_image_opts) (SL_IMAGE_OPTS_INIT
 * sets it and the defaults). */
typedef struct sl_image_opts {
  size_t size;              /* sizeof(sl_image_opts) */
  sl_image_shape shape;     /* channels, size, resize (zeros: as stored) */
  const char *field;        /* sl_decode_image: the field of encoded images,
                               bytes or u8 (NULL = "image"); the reader's field
                               is always "image".  Borrowed for the call. */
  uint32_t threads;         /* decoding worker threads, 1..the thread limit
                               (0 = 1): 1024, or SLUICE_MAX_THREADS; more
                               than 4 x the CPUs (at least 8) is accepted
                               with a notice */
  uint32_t window;          /* samples in flight, pulled and not yet consumed:
                               the bound on decoded images held, 0..65536
                               (0 = 4 x threads; at least threads) */
  int unordered;            /* 0: upstream's order, identical for any number
                               of threads; 1: as soon as decoded */
  sl_corrupt_policy policy; /* SL_CORRUPT_FAIL: an image that fails to
                               decode ends the pass with its error;
                               SL_CORRUPT_SKIP_CHUNK: it is left out and
                               counted (SL_ECORRUPT and SL_ESHAPE failures
                               only) */
  uint32_t max_bad;         /* skip: fail the pass with SL_ECORRUPT when more
                               than this many are left out in one pass
                               (0 = 16) */
} sl_image_opts;
/* clang-format off */
#define SL_IMAGE_OPTS_INIT                                                     \
  {sizeof(sl_image_opts), {0, 0, 0, SL_RESIZE_NONE}, NULL /* field */,        \
   0 /* threads */, 0 /* window */, 0 /* unordered */, SL_CORRUPT_FAIL,       \
   0 /* max_bad */}
/* clang-format on */

/* Decodes the encoded images of upstream's field opts->field (bytes or u8,
 * e.g. what `sluice pack images` stores) on opts->threads worker threads
 * into u8 [H, W, C] tensors.  The output schema is upstream's with that
 * field turned into u8 [height or -1, width or -1, channels or -1] (schema
 * metadata kept); every other field is passed on by reference.  At most
 * opts->window samples are in flight.  Workers start at the first next of
 * a pass and keep decoding ahead of the consumer; reset and destroy stop
 * and join them first, and are safe at any moment.  A worker thread that
 * cannot be started fails that next with SL_ENOMEM ("decode_image: cannot
 * start a worker thread: ..."); the stage never runs with fewer threads.
 *
 * Errors arrive in order (ordered mode), after the samples before them: a
 * decode failure is "decode_image: sample N of the pass (field 'image'):
 * jpeg: <decoder message>" (N counts from 0 in each pass; for a packed SLR
 * file read whole it is the record number) with the code of
 * sl_image_decode; upstream errors pass through unchanged.  Under
 * SL_CORRUPT_SKIP_CHUNK, images failing with SL_ECORRUPT or SL_ESHAPE are
 * left out (the stage's samples_in - samples_out in sl_reader_stats counts
 * them) until more than max_bad in one pass: then SL_ECORRUPT "decode_image:
 * 17 images failed to decode in this pass, more than max_bad (16); the
 * last: ...".
 *
 * Takes `up` (destroyed also on failure).  `opts` NULL means
 * SL_IMAGE_OPTS_INIT.  Returns SL_OK and *out, or SL_EINVAL (NULL
 * arguments, no such field, bad options), SL_ESHAPE (the field is not bytes
 * or u8), SL_EUNSUPPORTED (options from a newer header), SL_ENOMEM.  The
 * reader, like any, is used by one thread at a time. */
SL_API int sl_decode_image(sl_reader *up, const sl_image_opts *opts,
                           sl_reader **out);

/* A reader over the JPEG and PNG images of folder `path`, or of the one
 * image file `path`.  A folder is listed once, now: every regular file
 * named *.jpg, *.jpeg or *.png (any case; hidden files and folders left
 * out) at any depth, sorted by path (strcmp).  When the folder has
 * sub-folders they are the classes (ImageFolder): their sorted names,
 * joined by ',', are the schema metadata "classes", and each image's label
 * is the index of its first-level sub-folder; an image directly in the
 * folder is then SL_EINVAL.  Samples are {image: u8[H, W, C], label: i64[]}
 * (a folder without sub-folders, or one file: {image} alone), decoded as
 * by sl_decode_image with `opts` (threads, order, policy; field must be
 * NULL or "image"), with decode errors naming the file: "image: PATH: jpeg:
 * ...".  Metadata: source=image, root=PATH, classes=...
 *
 * Borrows `path` and `opts`.  Returns SL_OK and *out, or SL_EIO (a missing
 * path, an unreadable folder), SL_EINVAL (no images, a stray image, a class
 * name holding ',' or a newline, bad options), SL_ENOMEM.  A file that
 * cannot be read later is SL_EIO at its place in the pass. */
SL_API int sl_image_reader(const char *path, const sl_image_opts *opts,
                           sl_reader **out);

/* Options of sl_random_crop_flip.  Extensible: `size` must be
 * sizeof(sl_crop_flip_opts) (SL_CROP_FLIP_OPTS_INIT sets it and the
 * defaults). */
typedef struct sl_crop_flip_opts {
  size_t size;            /* sizeof(sl_crop_flip_opts) */
  const char *field;      /* u8 [H, W, C] field (NULL = "image"); borrowed */
  uint32_t height, width; /* crop size (both, or 0 and 0: no crop) */
  int flip;               /* 1: flip horizontally with probability 1/2 */
  uint64_t seed;          /* of the draws */
  uint64_t epoch;         /* the epoch of the first pass; each reset adds 1 */
} sl_crop_flip_opts;
/* clang-format off */
#define SL_CROP_FLIP_OPTS_INIT                                                 \
  {sizeof(sl_crop_flip_opts), NULL /* field */, 0, 0 /* height, width */,     \
   1 /* flip */, 0 /* seed */, 0 /* epoch */}
/* clang-format on */

/* Crops a random height x width window out of each image and flips it
 * horizontally with probability 1/2, on the consumer's thread.  The draws
 * of sample i of pass p are a pure function of (seed, epoch + p, i)
 * (docs/IMAGES.md gives it), so they do not depend on thread timing: after
 * an ordered decode_image the output is the same for any thread count and
 * in every run.  The output image is a new buffer; other fields pass by
 * reference.  An image smaller than the crop is SL_ESHAPE naming the sample.
 * Takes `up` (destroyed also on failure); `opts` NULL means
 * SL_CROP_FLIP_OPTS_INIT.  Returns SL_OK and *out, or SL_EINVAL (NULL
 * arguments, no such field, one of height/width 0), SL_ESHAPE (the field is
 * not u8 of rank 3), SL_EUNSUPPORTED, SL_ENOMEM.  One thread at a time. */
SL_API int sl_random_crop_flip(sl_reader *up, const sl_crop_flip_opts *opts,
                               sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Other programs' formats: NumPy, CSV, WebDataset, TFRecord                 */
/* (docs/FORMATS.md)                                                         */
/* ------------------------------------------------------------------------ */

/* Options of sl_npy_reader.  Extensible like sl_open_opts: `size` is
 * sizeof(sl_npy_opts) (SL_NPY_OPTS_INIT sets it); zero fields are defaults. */
typedef struct sl_npy_opts {
  size_t size;
  const char *field; /* .npy: the field's name; NULL: the file's stem */
} sl_npy_opts;
#define SL_NPY_OPTS_INIT {sizeof(sl_npy_opts), NULL}

/* A reader of a NumPy file (tag `npy`, extensions .npy and .npz): a .npy
 * array (format 1.0 to 3.0, C order, little-endian, dtype bool, an integer
 * or f2/f4/f8) yields one sample per leading index, in one field named
 * after the file's stem ("x.npy" -> "x") or opts->field, of the array's
 * other dimensions (a 1-D array gives scalars).  An .npz (numpy.savez or
 * savez_compressed: stored or deflated members) yields one sample per
 * leading index with one field per member, named after it; every member
 * must have the same leading dimension.  The file is memory-mapped and
 * samples are views of it (deflated members are inflated once, at open).
 * Length known; saves its position.  Borrows `path` and `opts` (copied).
 * Returns SL_OK and *out, SL_EIO (cannot open or map, naming the file),
 * SL_ECORRUPT (a malformed header or archive, too few bytes, a CRC
 * mismatch), SL_EUNSUPPORTED (Fortran order, big-endian, a dtype sluice has
 * not, a compression method other than deflate), SL_EINVAL (a 0-d array,
 * members of different lengths) or SL_ENOMEM.  Thread-safe. */
SL_API int sl_npy_reader(const char *path, const sl_npy_opts *opts,
                         sl_reader **out);

/* Options of sl_csv_reader.  Extensible like sl_open_opts: `size` is
 * sizeof(sl_csv_opts) (SL_CSV_OPTS_INIT sets it); zero fields are defaults. */
typedef struct sl_csv_opts {
  size_t size;
  /* The fields, in order: "x:f32,y:i64,name:bytes" (a name without ":dtype"
   * has its dtype guessed); NULL: every column of the header, guessed.
   * Guessing looks at the first record: an integer is i64, another number
   * f32, anything else bytes. */
  const char *columns;
  char delimiter; /* 0: ',' */
  int no_header;  /* 1: the first line is data; columns then names every
                     column of the file, in order */
} sl_csv_opts;
#define SL_CSV_OPTS_INIT {sizeof(sl_csv_opts), NULL, 0, 0}

/* A reader of a CSV file (tag `csv`, extension .csv): RFC 4180 records
 * (quoted fields may hold the delimiter, line ends and doubled quotes;
 * "\n" or "\r\n" line ends; empty lines skipped), one sample per record,
 * one field per selected column: numbers (bool as 0/1/true/false, the
 * integer dtypes range-checked, f32, f64) are scalars, bytes are rank-1.
 * A record with another field count than the header, or a value that does
 * not parse as its column's dtype, fails the pass with SL_EINVAL naming
 * "FILE:LINE" and the column; a malformed quote is SL_ECORRUPT naming the
 * line.  The file is memory-mapped; samples own their values.  Length
 * unknown; saves its position (a byte offset).  Borrows `path` and `opts`
 * (copied).  Returns SL_OK and *out, SL_EIO (cannot open), SL_EINVAL (no
 * header, a column not in it, a bad columns option), SL_EUNSUPPORTED (f16
 * or bf16 columns) or SL_ENOMEM.  Thread-safe. */
SL_API int sl_csv_reader(const char *path, const sl_csv_opts *opts,
                         sl_reader **out);

/* A reader of one WebDataset tar shard (tag `wds`): a POSIX/ustar tar file
 * (GNU long names and pax headers read too) whose consecutive members
 * sharing a key (the name up to the first dot of its last component) form
 * one sample, one field per extension, named after it ("a/b.x.npy" is key
 * "a/b", field "x.npy"), plus a bytes field `__key__`.  Types: "cls" (an
 * integer written as text) -> i64 scalar; an extension ending in "npy" ->
 * the .npy array (dtype and rank fixed by the first sample, dimensions
 * variable); anything else ("txt", "json", "jpg", "png", ...) -> bytes,
 * which sl_decode_image decodes.  The fields are the shard's first
 * sample's (an image field, jpg, jpeg or png, takes any of the three); a
 * later sample missing one, or with another, fails the pass with
 * SL_EINVAL naming the shard and key.  The shard is memory-mapped; bytes
 * and npy fields are views of it.  Length: a local shard's samples,
 * counted once by walking its headers (unknown for a URL).  Saves its
 * position (a byte offset).  Borrows `path`.  Returns SL_OK and *out,
 * SL_EIO (cannot open), SL_ECORRUPT (a bad header checksum, a member past
 * the end, a shard that ends without its end-of-archive blocks or with
 * data after them), SL_EINVAL (no samples) or SL_ENOMEM.  Thread-safe. */
SL_API int sl_wds_reader(const char *path, sl_reader **out);

/* Options of sl_wds_open.  Extensible like sl_open_opts: `size` is
 * sizeof(sl_wds_opts) (SL_WDS_OPTS_INIT sets it); zero fields are
 * defaults. */
typedef struct sl_wds_opts {
  size_t size;
  uint32_t threads; /* shard-reading threads (0 = 1) */
  int shuffle;      /* 1: the shard order of pass p is drawn from (seed, p),
                       the same on every rank */
  uint64_t seed;
  int rank, world;  /* world 0: from the launcher's environment
                       (sl_shard_env) */
  size_t buffer;    /* samples each thread reads ahead (0 = 64) */
  /* Appended with equal shares.  World > 1: what each rank reads of the
   * pass's samples (sl_shard_policy, as sl_open_files): SL_SHARD_PAD (0,
   * the default) and SL_SHARD_DROP give every rank the same count. */
  sl_shard_policy remainder;
  /* Appended with alternatives.  NULL: the fields are the first sample's
   * (an image field, jpg, jpeg or png, takes any of the three in later
   * samples).  Else the fields, comma-separated, each "EXT", "EXT;EXT..."
   * (alternatives: the sample's one member among them) or "NAME=EXT;..."
   * (the field named NAME); members of no field are passed over. */
  const char *fields;
  /* A sample without a member for every field: SL_WDS_MISSING_FAIL (0)
   * fails the pass naming the shard and key; SL_WDS_MISSING_SKIP passes
   * it over (it is not part of the pass: counts, shares and the length
   * leave it out too). */
  int missing;
} sl_wds_opts;
#define SL_WDS_MISSING_FAIL 0
#define SL_WDS_MISSING_SKIP 1
/* clang-format off */
#define SL_WDS_OPTS_INIT                                                       \
  {sizeof(sl_wds_opts), 0, 0, 0, 0, 0, 0, SL_SHARD_PAD, NULL,                  \
   SL_WDS_MISSING_FAIL}
/* clang-format on */

/* WebDataset shards `names[0..n)` read by opts->threads threads as one
 * reader.  A name may hold brace patterns ("train-{000000..000127}.tar",
 * "{a,b}"; ranges zero-padded to the first bound's width) and globs; a
 * name without a tag is "wds:".  Pass p takes the shards in the given
 * order (or shuffled by (seed, p)): the pass's sequence is their samples
 * one shard after another.  World 1 reads all of it; rank r of W > 1 reads
 * the positions opts->remainder gives it (sl_shard_count: by default
 * ceil(N/W), every rank as many, wrapping to the first samples), so a
 * shard may be split between ranks and a world larger than the shard count
 * still gives every rank samples; the sample counts of the shards come from
 * walking their tar headers at open (for URLs, ranged reads of the
 * headers).  The rank's part is cut into pieces at shard boundaries;
 * thread t of T reads pieces t, t + T, ..., and the output takes one
 * sample from each thread in turn, so it depends on T but not on timing.
 * Fields: as sl_wds_reader, fixed by the first shard's first sample, or
 * opts->fields.  Length: known for world > 1 and for local shards (their
 * headers walked once, on the first sl_reader_length); unknown for URLs
 * read by one rank.  Saves its position (per thread counts; a restore
 * walks tar headers to them).  Borrows `names` and `opts`.  Returns SL_OK
 * and *out, SL_EINVAL (no names, a name matching nothing, a bad brace
 * pattern, a tag other than wds, rank outside [0, world), too many
 * threads, bad fields), SL_EIO, SL_ECORRUPT or SL_ENOMEM. */
SL_API int sl_wds_open(const char *const *names, size_t n,
                       const sl_wds_opts *opts, sl_reader **out);

/* sl_tfrecord_opts.compression */
#define SL_TFRECORD_AUTO 0 /* GZIP when the file starts with its magic */
#define SL_TFRECORD_NONE 1
#define SL_TFRECORD_GZIP 2

/* Options of sl_tfrecord_reader.  Extensible like sl_open_opts: `size` is
 * sizeof(sl_tfrecord_opts) (SL_TFRECORD_OPTS_INIT sets it); zero fields are
 * defaults. */
typedef struct sl_tfrecord_opts {
  size_t size;
  /* The tf.train.Example features to take, in order:
   * "image:bytes,label:i64,x:f32[3],ids:i64[-1]": bytes from a bytes_list
   * (one value), integer dtypes from an int64_list (range-checked), f32 and
   * f64 from a float_list; no dimensions: one value, [d...]: exactly that
   * many, [-1]: any count (rank 1).  NULL: no decoding, samples are
   * {record: bytes}. */
  const char *features;
  int compression; /* SL_TFRECORD_AUTO (0), _NONE or _GZIP */
} sl_tfrecord_opts;
#define SL_TFRECORD_OPTS_INIT {sizeof(sl_tfrecord_opts), NULL, 0}

/* A reader of a TFRecord file (tag `tfrecord`, extension .tfrecord),
 * uncompressed or GZIP: each record's length and data are checked against
 * their masked CRC32Cs (a mismatch or a record cut short is SL_ECORRUPT
 * naming the file, record and offset).  With opts->features each record is
 * a tf.train.Example decoded by protobuf-c into the named fields (a
 * feature missing, of another list kind or with another value count fails
 * with SL_EINVAL naming the record); without, {record: bytes}.  A plain
 * file is memory-mapped, a GZIP one inflated at open.  Length unknown;
 * saves its position (a byte offset).  Borrows `path` and `opts` (copied).
 * Returns SL_OK and *out, SL_EIO, SL_ECORRUPT (a damaged GZIP stream),
 * SL_EINVAL (a bad features option), SL_EUNSUPPORTED (features asked of a
 * libsluice built without protobuf-c: the message says so) or SL_ENOMEM.
 * Thread-safe. */
SL_API int sl_tfrecord_reader(const char *path, const sl_tfrecord_opts *opts,
                              sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Embedding: pipelines declared by Lua scripts (docs/EMBEDDING.md)          */
/* ------------------------------------------------------------------------ */

/* A pipeline declared by a Lua script, pulled from C.  The script runs in a
 * Lua state private to the pipeline (the C program needs no Lua of its own):
 * a fresh LuaJIT state with the standard libraries, whose package.path and
 * package.cpath are LuaJIT's (LUA_PATH / LUA_CPATH from the environment when
 * set, else LuaJIT's defaults, which search the Lua 5.1 tree under
 * /usr/local: set them when sluice's Lua files are installed elsewhere).  The
 * script sees its arguments as `...` (strings) and as the global table `arg`
 * (arg[0] = the script path or chunk name, arg[1..argc] = the arguments),
 * and must return a pipeline object (`require "sluice"`, then e.g.
 * `return sluice.range(n):batch(b)`); the C side takes its reader over.
 *
 * Thread safety: one thread at a time per pipeline (like a reader); distinct
 * pipelines are independent.  The private state is only used while opening
 * and closing: sl_pipeline_next and sl_pipeline_reset run the C reader chain
 * (Lua decorators in it run in worker states of their own), never the
 * script's state.  Error details are in the calling thread's
 * sl_last_error(). */
typedef struct sl_pipeline sl_pipeline;

/* Runs the script file `path` with `argc` arguments `argv` (borrowed; copied
 * into Lua; a NULL entry passes "") and sets *out to a new pipeline owned by
 * the caller (sl_pipeline_close it).  On any error *out is NULL and nothing
 * is leaked.  Returns SL_OK, or:
 *   SL_EINVAL   NULL out or path, argc < 0, argc > 0 with NULL argv; or the
 *               script returned something else than a live pipeline
 *               ("pipeline script PATH returned a number, not a pipeline";
 *               a closed or consumed pipeline is named as such);
 *   SL_EIO      the file cannot be read ("pipeline script PATH: cannot open
 *               PATH..." with the system's reason);
 *   SL_ELUA     a syntax error (Lua's message, with the line), or an error
 *               raised while the script runs: "pipeline script (PATH): " +
 *               the Lua message + a traceback naming the script's lines;
 *   SL_ENOMEM   out of memory (C or Lua). */
SL_API int sl_pipeline_open_file(const char *path, int argc,
                                 const char *const *argv, sl_pipeline **out);
/* Like sl_pipeline_open_file for the script text `code` (NUL-terminated,
 * Lua source or bytecode; borrowed).  `chunkname` (NULL or "" = "pipeline")
 * names the chunk in messages and tracebacks and is arg[0].  Same returns,
 * less SL_EIO. */
SL_API int sl_pipeline_open_string(const char *code, const char *chunkname,
                                   int argc, const char *const *argv,
                                   sl_pipeline **out);
/* Pulls the next batch (sample) into *batch, owned by the caller
 * (sl_sample_release it; fields by name with sl_sample_field).  Returns
 * SL_OK, SL_EOF at the end of the pass (repeatable; *batch NULL), or an
 * error (*batch NULL), sticky until sl_pipeline_reset: a Lua decorator's
 * error is SL_ELUA at that sample's position, with the Lua message and a
 * traceback naming the decorator's source line.  SL_EINVAL for a NULL
 * pipeline or batch. */
SL_API int sl_pipeline_next(sl_pipeline *p, sl_sample **batch);
/* Starts the next pass (epoch) from the beginning and clears a sticky
 * error.  SL_OK, SL_EINVAL for NULL, or the chain's error (e.g.
 * SL_EUNSUPPORTED when a stage cannot be reset). */
SL_API int sl_pipeline_reset(sl_pipeline *p);
/* The schema of the batches (borrowed, frozen, valid until close), or NULL
 * for a NULL pipeline. */
SL_API const sl_schema *sl_pipeline_schema(const sl_pipeline *p);
/* sl_reader_length of the pipeline's chain: the batches (samples, without
 * a batch stage) one pass yields, or SL_EUNSUPPORTED where not known;
 * SL_EINVAL for NULL arguments. */
SL_API int sl_pipeline_length(const sl_pipeline *p, uint64_t *n);
/* Saving and restoring the pipeline's position (docs/RESUME.md): the same
 * shapes and rules as sl_reader_save / sl_reader_restore, on the chain the
 * script returned.  sl_pipeline_save sets *state (a byte string owned by
 * the caller: sl_free it) and *len; it does not change what the pipeline
 * yields.  The state holds, for every stage, its name, options and the
 * positions that reproduce where the pipeline stands - including the pass
 * (epoch) number, so sl_pipeline_reset after a restore starts the pass that
 * follows the saved one, as it would have in the saved process - and not
 * the samples: those a prefetch or a map held when saving are read again.
 * The script's Lua state keeps nothing else.  sl_pipeline_restore takes a
 * state of a pipeline opened from the same script with the same arguments
 * (in this process or another) and continues from there: the next batches
 * are those the saved pipeline would have yielded.  Returns as
 * sl_reader_save / sl_reader_restore: SL_EUNSUPPORTED naming a stage that
 * cannot save (or another format version, on restore), SL_ECORRUPT (not a
 * state, cut short, bad checksum; the pipeline is left as it was), SL_EINVAL
 * (NULL arguments, or the state of another pipeline: the message names the
 * first stage that differs, the pipeline is left as it was), SL_ENOMEM.
 * Threads: call them from the thread that pulls the pipeline, between
 * sl_pipeline_next calls (the pipeline's own threads keep running). */
SL_API int sl_pipeline_save(sl_pipeline *p, void **state, size_t *len);
SL_API int sl_pipeline_restore(sl_pipeline *p, const void *state, size_t len);
/* Destroys the reader chain (joining its threads, at any moment: mid-pass,
 * busy workers) and then the private Lua state.  Batches already returned
 * stay valid until released.  NULL-safe. */
SL_API void sl_pipeline_close(sl_pipeline *p);

/* ------------------------------------------------------------------------ */
/* Run statistics: where a pipeline spends its time (docs/PERFORMANCE.md)     */
/* ------------------------------------------------------------------------ */

/* Every reader counts the samples it hands out.  Timing (two monotonic clock
 * reads per sample per stage, plus per-batch figures in the threaded
 * stages) is off until sl_stats_enable(1); it then applies to every reader
 * of the process from that moment on.  Thread-safe. */
SL_API void sl_stats_enable(int on);
/* 1 when timing is on.  Thread-safe. */
SL_API int sl_stats_enabled(void);

/* One stage of a reader chain, as seen since it was made (cumulative over
 * passes).  Times are seconds of thread time summed over the stage's
 * threads; they are 0 while timing is off.
 *   name         the stage name (sl_reader_name; static storage).
 *   depth        0 for the reader asked about, +1 per hop upstream.
 *   downstream   index (in the same array) of the stage this one feeds, -1
 *                for depth 0.
 *   threads      threads doing the stage's own work (prefetch 1, a Lua map
 *                its workers, open_files its readers); 0 when the stage runs
 *                on the thread that calls its next.
 *   samples_in   samples taken from its upstreams (a source: = samples_out).
 *   samples_out  samples (batches, for batch) it handed downstream.
 *   next_s       time its callers spent inside its next (for depth 0: how
 *                long the consumer waited for the pipeline).
 *   busy_s       its own work, upstream excluded: for a stage without
 *                threads, next_s less its upstreams' next_s; for a threaded
 *                stage, what its threads measured.
 *   wait_up_s    time waiting for upstream: inside the upstreams' next, and
 *                for several workers sharing one upstream, waiting for the
 *                turn to pull.
 *   wait_down_s  time its threads were blocked because what they produced
 *                was not taken yet (a full queue or window); 0 without
 *                threads.
 *   errors_ignored  samples left out because of their error since the stage
 *                was made, over every pass (ignore_errors of the parallel
 *                and Lua map / filter, decode_image's skip policy); 0 for
 *                other stages.
 *   queue_depth  prefetch: its channel's depth in samples now (n, or what
 *                sl_prefetch_auto chose so far); 0 for other stages.
 *   last_error   the message of the last ignored error ("" when none),
 *                truncated to fit; a copy (the row owns it). */
typedef struct sl_stage_stats {
  const char *name;
  int depth;
  int downstream;
  int threads;
  uint64_t samples_in;
  uint64_t samples_out;
  double next_s;
  double busy_s;
  double wait_up_s;
  double wait_down_s;
  uint64_t errors_ignored;
  uint64_t queue_depth;
  char last_error[256];
} sl_stage_stats;

/* Walks the chain of `r` depth-first from r (index 0) to its sources and
 * fills out[0 .. min(cap, count)), upstreams after their downstream;
 * *count (required) receives the number of stages, so cap 0 asks for the
 * size.  Readers made through sl_reader_new with an external vtable appear
 * as sources (their upstreams are not known).  May run while the chain's
 * threads work (the figures are then a moment's snapshot); not while `r` is
 * being reset or destroyed.  Returns SL_OK or SL_EINVAL (NULL r or count, or
 * NULL out with cap > 0). */
SL_API int sl_reader_stats(const sl_reader *r, sl_stage_stats *out,
                           size_t cap, size_t *count);
/* sl_reader_stats of the pipeline's chain. */
SL_API int sl_pipeline_stats(const sl_pipeline *p, sl_stage_stats *out,
                             size_t cap, size_t *count);

/* The stage limiting throughput over a run of `wall_s` seconds: -1 when the
 * consumer waited for data (stats[0].next_s) less than 10% of wall_s (the
 * pipeline keeps up; the consumer is the limit), -2 when timing was off or
 * the arguments are unusable (n == 0, wall_s <= 0); otherwise the index of
 * the stage whose busy_s is the largest share of its capacity (wall_s times
 * max(threads, 1)).  Pure function; thread-safe. */
SL_API int sl_stats_limiting(const sl_stage_stats *stats, size_t n,
                             double wall_s);
/* Formats a table of `stats` (one line per stage, indented by depth: in, out,
 * busy, waits, the share of capacity used) and a closing line naming the
 * limiting stage (sl_stats_limiting), then one "oversubscribed:" line per stage
 * running more threads than this machine runs well (4 x the online CPUs, at
 * least 8), into buf (NUL-terminated, truncated to cap).  Returns the length
 * the whole text needs, like snprintf, or SL_EINVAL for NULL stats with n > 0
 * or NULL buf with cap > 0.  Thread-safe. */
SL_API int sl_stats_format(const sl_stage_stats *stats, size_t n,
                           double wall_s, char *buf, size_t cap);

/* ======================================================================== */
/* BEGIN UNSTABLE                                                           */
/* Unstable: for sluice's own CLI and Lua facade; may change in any release. */
/* ======================================================================== */
/* libsluice is built with hidden visibility: it exports the SL_API
 * functions above and, besides them, only the sl__ functions of this
 * section.  They are internal (their types and full documentation are in
 * the src/ header named with each group), not part of the API or ABI that
 * the version number describes: a program or plugin outside this source
 * tree must not call them.  They are exported rather than linked statically
 * because their users load libsluice.so itself: the `sluice` command's
 * `run` executes scripts whose Lua facade calls libsluice through the
 * LuaJIT FFI, and a second, static copy of the library in the process
 * would have its own error slots and registries (docs/EMBEDDING.md, "ABI").  CTest `abi` fails when
 * libsluice.so exports an sl__ symbol this section does not name, or this
 * section names one it does not export. */

/* sl_pipeline_save as of `back` batches ago in the current pass: batches
 * sl_pipeline_next handed out that the caller has not used (the Python
 * binding's batch of an interrupted next, docs/PYTHON.md).  SL_EINVAL when
 * fewer were handed out in this pass.  src/readers/state.h. */
SL_API int sl__pipeline_save_back(sl_pipeline *p, uint64_t back, void **state,
                                  size_t *len);
struct sl__pack_opts;
struct sl__lua_stage_opts;
struct sl__lua_pins;
typedef struct sl__lua_env sl__lua_env;
typedef struct sl__shipped sl__shipped;

/* The `sluice` command (tools/): pack, verify, signal handling.
 * src/io/import.h, src/io/output.h, src/image/image.h,
 * src/open/shard_set.h. */
SL_API int sl__pack_idx(const char *images, const char *labels,
                        const char *out, const struct sl__pack_opts *o,
                        uint64_t *records);
SL_API int sl__pack_text(const char *const *files, size_t n, const char *out,
                         const struct sl__pack_opts *o, uint64_t *records);
SL_API int sl__pack_images(const char *root, const char *out,
                           const struct sl__pack_opts *o, uint64_t *records);
SL_API int sl__shard_name(const char *out, uint32_t shard, uint32_t shards,
                          char *buf, size_t size);
SL_API void sl__out_remove_temps(void);
SL_API int sl__tokens_shard_name(const char *out, uint32_t shard,
                                 uint32_t shards, char *buf, size_t size);
/* Also exported, declared in src/io/output.h and src/io/import.h (their
 * types are internal): sl__out_signals_catch(), sl__out_signals_restore()
 * (the packing commands' signal handlers), sl__out_open(), sl__out_write(),
 * sl__out_commit(), sl__out_abort() (the output path, for the state files
 * of `run --save-state`) and sl__pack_tokens(). */
SL_API int sl__pack_wds(const char *const *names, size_t n, const char *out,
                        const struct sl__pack_opts *o, uint64_t *records);
SL_API int sl__pack_images_wds(const char *root, const char *out,
                               const struct sl__pack_opts *o,
                               uint64_t *records);
SL_API int sl__wds_shard_name(const char *out, uint32_t i, char *buf,
                              size_t size);
SL_API int sl__shard_set_check(const char *stage, const char *const *paths,
                               const sl_schema *const *schemas, size_t n);
/* The one redaction of a URL's user:password in what is shown (the error
 * slot, the CLI's output).  src/core/internal.h. */
SL_API size_t sl__redact_urls(const char *in, char *out, size_t cap);

/* The Lua facade through the FFI (lua/sluice/cdef.lua): shipped functions
 * (bytes made by lua/sluice/ship.lua), worker environments, the Lua
 * stages.  src/script/lua_host.h (absent from a build without the Lua
 * layer).  `kind` is an sl__lua_kind (an enum of non-negative values,
 * unsigned int to GCC and Clang; lua_host.h's prototype is checked against
 * this one wherever both are seen). */
SL_API sl__lua_env *sl__lua_env_new(const char *path, const char *cpath);
SL_API void sl__lua_env_release(sl__lua_env *e);
SL_API int sl__shipped_new(const char *what, const char *where,
                           const void *data, size_t size, const char *name,
                           sl__shipped **out);
SL_API void sl__shipped_release(sl__shipped *f);
SL_API int sl__lua_stage(sl_reader *up, unsigned kind, sl__shipped *fn,
                         sl__lua_env *env,
                         const struct sl__lua_stage_opts *opts,
                         sl_schema *schema, sl_reader **out);
SL_API int sl__lua_reader(sl__shipped *fn, sl__lua_env *env, size_t buffer,
                          sl_schema *schema, sl_reader **out);
/* The Lua flow stages: flat_map, take_while, scan (`kind`: an
 * sl__lua_flow_kind; `init`: scan's shipped init function, else NULL).
 * src/script/lua_host.h, src/script/lua_flow.c. */
SL_API int sl__lua_flow(sl_reader *up, unsigned kind, sl__shipped *fn,
                        sl__shipped *init, sl__lua_env *env,
                        const struct sl__lua_stage_opts *opts,
                        sl_schema *schema, sl_reader **out);

/* The Lua facade through the FFI (lua/sluice/cdef.lua): what a Lua sample
 * pins, compact copies, pooled tensor buffers.  src/script/lua_host.h. */
SL_API size_t sl__lua_sample_account(const sl_sample *s,
                                     struct sl__lua_pins *pins);
SL_API sl_sample *sl__lua_sample_clone(const sl_sample *s);
SL_API sl_buffer *sl__lua_buffer_new(size_t size, int zero);

/* ======================================================================== */
/* END UNSTABLE                                                             */
/* ======================================================================== */

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_H */
