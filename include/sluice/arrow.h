/*
 * sluice/arrow.h - Apache Arrow in and out, through Arrow's C Data
 * Interface and C Stream Interface (docs/SCALING.md, "Arrow").  Part of
 * sluice.h: include <sluice.h>, whose opening comment states the
 * conventions that hold here.
 *
 * No Arrow library is needed: the three structs below are the ABI that
 * Arrow's specification fixes, written from it, guarded by the macros the
 * specification names (ARROW_C_DATA_INTERFACE, ARROW_C_STREAM_INTERFACE),
 * so a program that also includes Arrow's own arrow/c/abi.h (or nanoarrow)
 * gets one definition.  Any producer or consumer of the interface works:
 * pyarrow (tables, datasets, record-batch readers), Polars, DuckDB, the
 * Hugging Face `datasets` library, Arrow C++/Rust/Go, nanoarrow.
 *
 * The rules of the interface, as sluice keeps them: a struct whose
 * `release` is NULL is released (empty); whoever holds a live struct calls
 * its `release` exactly once (the producer frees what it allocated, its
 * children included); a struct may be moved by copying it and setting the
 * source's `release` to NULL.  A stream's callbacks are called from one
 * thread at a time.
 */
#ifndef SLUICE_API_ARROW_H
#define SLUICE_API_ARROW_H

#include "reader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* The ABI (Arrow C Data Interface and C Stream Interface)                   */
/* ------------------------------------------------------------------------ */

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

/* A type: `format` is the type's format string ("f" float32, "+w:3" a
 * fixed-size list of 3, "+s" a struct, ...), `name` the field name. */
struct ArrowSchema {
  const char *format;
  const char *name;
  const char *metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema **children;
  struct ArrowSchema *dictionary;
  void (*release)(struct ArrowSchema *);
  void *private_data;
};

/* Data of a type: `length` values from slot `offset` of the buffers
 * (buffers[0] is the validity bitmap, NULL when there are no nulls). */
struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void **buffers;
  struct ArrowArray **children;
  struct ArrowArray *dictionary;
  void (*release)(struct ArrowArray *);
  void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

/* A stream of arrays of one type.  get_schema and get_next return 0 or an
 * errno value (then get_last_error may say more, until the next call);
 * get_next signals the end by an array whose release is NULL. */
struct ArrowArrayStream {
  int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
  int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
  const char *(*get_last_error)(struct ArrowArrayStream *);
  void (*release)(struct ArrowArrayStream *);
  void *private_data;
};

#endif /* ARROW_C_STREAM_INTERFACE */

/* ------------------------------------------------------------------------ */
/* Arrow in: a source over an ArrowArrayStream                               */
/* ------------------------------------------------------------------------ */

typedef struct sl_arrow_opts {
  size_t size; /* sizeof(sl_arrow_opts) */
  const char *name; /* names the stream in messages ("stream" when NULL);
                       borrowed, copied */
} sl_arrow_opts;
#define SL_ARROW_OPTS_INIT {sizeof(sl_arrow_opts), NULL}

/* A source yielding one sample per row of `stream`, whose schema must be a
 * struct ("+s": a record batch) with one child per column.  Each column is
 * one field of the same name; its type maps as follows (Arrow format
 * strings):
 *
 *   c C s S i I l L     i8 u8 i16 u16 i32 u32 i64 u64, scalars
 *   e f g               f16 f32 f64, scalars
 *   b                   bool, a scalar (unpacked from Arrow's bits: a copy)
 *   +w:N                a fixed dimension N before the child's (nested:
 *                       +w:2 of +w:3 of f is f32[2,3])
 *   u U                 (large) string: bytes[-1], the row's bytes
 *   z Z                 (large) binary: u8[-1]
 *   +l +L               (large) list: a variable dimension, -1, before the
 *                       child's (list<f> is f32[-1], list<+w:3 of f> is
 *                       f32[-1,3]); a list of lists or of strings gives the
 *                       concatenated inner values with LoD offsets marking
 *                       the inner sequences (list<list<i>> is i32[-1] with
 *                       LoD; list<u> is bytes[-1] with LoD)
 *
 * Anything else (a dictionary, a nested struct, a map, a union, dates and
 * times, decimals, views, a list below a fixed-size list, a third level of
 * lists, a rank over SL_MAX_RANK) is refused when the reader is made:
 * SL_EUNSUPPORTED naming the column and its format string.  A column name
 * must be 1..63 bytes and unique (SL_EINVAL otherwise).
 *
 * Nulls: sluice fields have none, so a null value (in the row's slot or
 * anywhere inside its lists) is SL_EINVAL from sl_reader_next, naming the
 * column, the row in the stream and the batch; the reader cannot go on
 * past it.  Fill or drop nulls before (pyarrow: fill_null, drop_null).
 *
 * Zero-copy: numeric columns, fixed-size lists, strings, binaries and lists
 * are views of the stream's buffers.  Each batch the stream yields is held
 * by a refcounted holder; the samples' tensors keep it alive, and its
 * release is called when the last tensor viewing it goes (after the reader
 * moved on or was destroyed).  Copies: bool columns (bits to bytes) and
 * LoD offsets (rebased to 0 per row).  A sample thus keeps its whole batch
 * alive: a consumer that holds rows for long copies them.
 *
 * The stream is taken (moved): on return, success or not, the caller's
 * struct is marked released (release NULL) and sluice calls the stream's
 * release exactly once (when the open fails, before returning; else from
 * sl_reader_destroy), and the release of every array it produced exactly
 * once.  `stream` NULL or already released is SL_EINVAL.
 *
 * The reader is one pass (a stream cannot rewind): sl_reader_reset is
 * SL_EUNSUPPORTED, and so are length and saving.  Errors: get_schema or
 * get_next failing is SL_EIO with the stream's get_last_error text (or the
 * errno's), the batch number and the stream's name; a batch whose shape
 * contradicts its schema (wrong child count or buffers, offsets out of
 * range or decreasing) is SL_ECORRUPT naming the column and the batch; after
 * such an error every next returns it again.  Thread safety: a reader; the
 * stream's callbacks are called from the thread calling sl_reader_next or
 * sl_reader_destroy, one at a time; the release of an array may run on
 * whichever thread drops the last sample viewing it. */
SL_API int sl_reader_from_arrow_stream(struct ArrowArrayStream *stream,
                                       const sl_arrow_opts *opts,
                                       sl_reader **out);

/* Parks `stream` (taken, as sl_reader_from_arrow_stream takes it) under
 * `name` (1..63 bytes of [A-Za-z0-9_.-], borrowed, copied) so that
 * sl_open("arrow:NAME") (and sluice.open("arrow:NAME") in a Lua pipeline
 * script) opens it, once, as sl_reader_from_arrow_stream would (the first
 * park registers the format tag "arrow", sl_format_register); opening it
 * a second time is SL_ENOTFOUND.  This is how a pipeline script gets a
 * stream handed over by its host (sluice.from_arrow(obj, script=...) in
 * Python).  Returns SL_OK, SL_EINVAL (bad name, name already parked, NULL
 * or released stream: the stream is then released), SL_ENOMEM (64
 * streams parked at once, or no registry slot left for the tag; released
 * too).  Thread-safe (one mutex). */
SL_API int sl_arrow_stream_park(const char *name,
                                struct ArrowArrayStream *stream);
/* Releases the stream parked under `name` if it was not opened.  Returns 1
 * when one was released, 0 when none was parked under that name (opened
 * already, or never parked).  Thread-safe. */
SL_API int sl_arrow_stream_unpark(const char *name);

/* ------------------------------------------------------------------------ */
/* Arrow out: samples as Arrow arrays                                         */
/* ------------------------------------------------------------------------ */

/* Exports `batch` as a struct array (a record batch) in *array, of the type
 * in *schema: one child per field, in schema order, named after it, with
 * the field's leading dimension as the rows.  A field of shape [rows,
 * d1..dk] is d1..dk nested fixed-size lists ("+w:d1" of ... of the dtype's
 * primitive); a field with LoD offsets (a batch of variable-length rows,
 * sl_batch's) is a large list ("+L") whose offsets are the LoD offsets, of
 * fixed-size lists for its trailing dims; a rank-1 bytes field with LoD is
 * a large string ("U").  Dtypes: bool "b", u8..i64 "C c S s I i L l", f16
 * "e", f32 "f", f64 "g", bytes without LoD "C"; bf16 has no Arrow type:
 * SL_EUNSUPPORTED naming the field.  No value is null, though the fields
 * are flagged nullable (ARROW_FLAG_NULLABLE, as Arrow's own producers
 * make columns by default, so that the types compare equal).
 *
 * No copy: the arrays' buffers are the tensors' own (and the LoD offsets
 * themselves); every exported array (the struct and each child, which the
 * consumer may move out on its own) holds a reference to the sample,
 * dropped by its release.  Bool fields are packed into Arrow's bits (a
 * copy).  The sample must not change afterwards (a published sample never
 * does).
 *
 * Both outputs must be non-NULL; on success the caller owns them (call
 * each one's release once); on failure both are left released (release
 * NULL) and nothing leaks.  Errors: SL_EINVAL (NULL arguments, a field of
 * rank 0 - export a batch, not one sample), SL_ESHAPE (fields disagreeing
 * on the row count, naming them), SL_EUNSUPPORTED (bf16), SL_ENOMEM.
 * Thread-safe (reads the sample; its refcount is atomic). */
SL_API int sl_sample_to_arrow(const sl_sample *batch, struct ArrowSchema *schema,
                              struct ArrowArray *array);

/* A stream of the samples of `r` (taken: the stream's release destroys it),
 * each exported by sl_sample_to_arrow.  The stream's schema is that of the
 * first sample, pulled by the first get_schema or get_next; a later sample
 * exported with another type is an error (EINVAL, get_last_error naming
 * the field).  get_next returns 0 and a released array at the end of the
 * pass, EIO with the sluice error in get_last_error when the reader fails.
 * Arrays already handed out stay valid after the stream's release (they
 * hold their samples).  Returns SL_OK, SL_EINVAL (NULL argument: `r` is
 * destroyed) or SL_ENOMEM (`r` destroyed).  Thread safety: the stream's
 * callbacks one thread at a time, as the interface demands. */
SL_API int sl_reader_to_arrow_stream(sl_reader *r,
                                     struct ArrowArrayStream *out);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_ARROW_H */
