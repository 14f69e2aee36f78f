/*
 * idx.h - the idx format of MNIST and Fashion-MNIST, plain or gzip-compressed.
 *
 * An idx file is a 4-byte magic (0x00 0x00 <type code> <rank>), `rank`
 * big-endian u32 dimensions, then the elements in row-major order, each
 * big-endian.  sl__idx_load reads a whole file into one buffer with the
 * elements converted to host order, so item i is a ready tensor view at
 * i * item_bytes.  The SLR importer uses it; the `idx` reader stage of a
 * later issue builds on the same call.
 */
#ifndef SLUICE_IDX_H
#define SLUICE_IDX_H

#include "core/internal.h"

/* Default bound on the data size a header may declare (8 GiB): a header
 * asking for more is refused before anything is allocated. */
#define SL__IDX_MAX_BYTES ((uint64_t)8 << 30)

typedef struct sl__idx {
  char *path;         /* as given, for messages (owned) */
  bool gzip;          /* the file was gzip-compressed */
  unsigned type_code; /* idx type byte: 0x08 u8, 0x09 i8, 0x0B i16,
                         0x0C i32, 0x0D f32, 0x0E f64 */
  sl_dtype dtype;     /* the matching sluice dtype */
  int rank;           /* 1..SL_MAX_RANK */
  uint32_t dims[SL_MAX_RANK];
  uint64_t count;    /* dims[0]: the number of items */
  size_t item_bytes; /* bytes of one item (product of dims[1..], times the
                        element size) */
  sl_buffer *data;   /* count * item_bytes bytes, host byte order */
} sl__idx;

/* Reads the idx file at `path` (gzip detected by its 1f 8b magic) into
 * `out`.  Every failure names the file: SL_EIO (cannot open or read),
 * SL_ECORRUPT (bad magic, unknown type code, rank 0 or above SL_MAX_RANK,
 * truncated header or data, bytes past the declared data, a gzip stream
 * error, bytes after the last gzip member that are not another member) or
 * SL_EINVAL (declared size above max_bytes; 0 means SL__IDX_MAX_BYTES).  The
 * declared size is checked before anything is allocated for the data (a
 * plain file's size; a gzip file's size times 1032, then its ISIZE
 * trailer, or the data counted without being kept when that does not
 * match), and the buffer grows as data arrives (from 4 MiB, at most
 * doubling), so a header lying about its size cannot make this allocate
 * more than the file really holds.  Only regular files (SL_EIO otherwise).
 * On failure `out` is zeroed (sl__idx_free on it is harmless). */
int sl__idx_load_limit(const char *path, uint64_t max_bytes, sl__idx *out);
static inline int sl__idx_load(const char *path, sl__idx *out) {
  return sl__idx_load_limit(path, 0, out);
}

/* Checks that `x` holds `dtype` elements with `rank` dimensions; `what`
 * ("images", "labels") goes into the message.  SL_OK or SL_EINVAL naming the
 * file, what was expected and what it holds. */
int sl__idx_expect(const sl__idx *x, const char *what, sl_dtype dtype,
                   int rank);

/* SL_OK when `im` and `lb` hold as many items, else SL_EINVAL:
 * "<prefix><images> holds N images but <labels> holds M labels". */
int sl__idx_same_count(const sl__idx *im, const sl__idx *lb, const char *prefix,
                       const char *images, const char *labels);

/* "28x28" style text of dims[from..rank) into buf ("" when none). */
char *sl__idx_dims_text(const sl__idx *x, int from, char *buf, size_t size);

/* Pointer to item i (i < count). */
static inline const void *sl__idx_item(const sl__idx *x, uint64_t i) {
  return (const char *)sl_buffer_data(x->data) + i * x->item_bytes;
}

/* Releases the buffer and the path, and zeroes `x`.  NULL-safe. */
void sl__idx_free(sl__idx *x);

#endif
