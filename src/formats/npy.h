/* npy.h - NumPy's .npy header (format versions 1.0, 2.0 and 3.0), parsed
 * from bytes in memory: the one parser of it, shared by the npy: reader
 * (npy_reader.c), the wds: reader's .npy members (wds_shard.c), the
 * tokens: reader's .npy shards (tokens_reader.c) and the fuzz target. */
#ifndef SLUICE_IO_NPY_H
#define SLUICE_IO_NPY_H

#include "core/internal.h"

typedef struct sl__npy {
  sl_dtype dtype;
  int rank;
  int64_t shape[SL_MAX_RANK];
  uint64_t data_off; /* where the elements start, from the first byte */
  uint64_t nbytes;   /* product(shape) * element size */
} sl__npy;

/* Parses the .npy bytes p[0..n): magic, version, the header dictionary
 * ('descr', 'fortran_order', 'shape', each exactly once and no other key),
 * and checks that the elements fit in n bytes (the shape's product times
 * the element size is computed with overflow checks).  Accepted descrs:
 * |b1 |u1 |i1 and little-endian (or native '=') u2 i2 u4 i4 u8 i8 f2 f4
 * f8.  `what` names the data in messages.  Returns
 * SL_OK, SL_ECORRUPT (not .npy, a malformed header, a repeated or unknown
 * key, a negative or overflowing shape, too few bytes) or
 * SL_EUNSUPPORTED (Fortran order, big-endian, structured, object or string
 * dtypes, rank above SL_MAX_RANK), each naming `what`. */
int sl__npy_parse(const char *what, const unsigned char *p, size_t n,
                  sl__npy *out);

/* The same for a file of `total` bytes (total >= n) of which p[0..n) holds
 * at least the header: the elements are checked to fit in `total` (the npy
 * reader of a URL reads rows by ranges, never the whole object). */
int sl__npy_parse_head(const char *what, const unsigned char *p, size_t n,
                       uint64_t total, sl__npy *out);

/* numpy's descr of dt ("<f4", "|u1"), for messages; "?" for a dtype
 * .npy files of this parser do not hold. */
const char *sl__npy_descr(sl_dtype dt);

#endif
