/*
 * idx.c - reads idx files (MNIST's format), plain or gzip-compressed.
 *
 * Everything goes through zlib's gzread, which passes plain files through
 * unchanged, so one code path serves both.  The header is decoded byte by
 * byte (big-endian), checked, and only then is the data read - into a
 * buffer grown as bytes actually arrive, because a gzip file's decompressed
 * size is not known in advance and a corrupt header must not be able to
 * make us allocate gigabytes for a file of a few bytes.
 */
#include "io/idx.h"

#include "io/bytes.h"

#include <errno.h>
#include <zlib.h>

/* First allocation for the data; doubled up to the declared size (realloc
 * of large blocks moves pages, not bytes, so doubling is cheap). */
#define IDX_FIRST_CAP ((size_t)4 << 20)
/* gzread takes an unsigned length and, on an error, does not say how much
 * it produced: read in pieces of this, so errors are placed within 1 MiB. */
#define IDX_READ_STEP ((size_t)1 << 20)

typedef struct idx_type {
  unsigned code;
  sl_dtype dtype;
  const char *name;
} idx_type;

static const idx_type idx_types[] = {
    {0x08, SL_U8, "unsigned byte"}, {0x09, SL_I8, "signed byte"},
    {0x0B, SL_I16, "short"},        {0x0C, SL_I32, "int"},
    {0x0D, SL_F32, "float"},        {0x0E, SL_F64, "double"},
};

static const idx_type *find_type(unsigned code) {
  for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
    if (idx_types[i].code == code) return &idx_types[i];
  return NULL;
}

/* Reads up to n bytes; returns the count read (< n only at the end of the
 * data) or -1 on a zlib error, with the error text in *why and the bytes
 * read before the failing piece in *done. */
static int64_t read_some(gzFile gz, void *buf, size_t n, const char **why,
                         size_t *done) {
  size_t got = 0;
  while (got < n) {
    size_t step = SL_MIN(n - got, IDX_READ_STEP);
    int k = gzread(gz, (char *)buf + got, (unsigned)step);
    if (k < 0) {
      int zerr = Z_OK;
      *why = gzerror(gz, &zerr);
      *done = got;
      return -1;
    }
    if (k == 0) {
      /* A gzip stream cut short is reported as an error by gzerror, not
       * by the return value: check so it reads as truncation, not EOF. */
      int zerr = Z_OK;
      const char *msg = gzerror(gz, &zerr);
      if (zerr != Z_OK && zerr != Z_STREAM_END) {
        *why = msg;
        if (zerr == Z_BUF_ERROR) return (int64_t)got; /* truncated stream */
        *done = got;
        return -1;
      }
      break;
    }
    got += (size_t)k;
  }
  return (int64_t)got;
}

void sl__idx_free(sl__idx *x) {
  if (!x) return;
  sl_buffer_release(x->data);
  sl__free(x->path);
  memset(x, 0, sizeof *x);
}

static void free_data(void *ud, void *data) {
  SL_UNUSED(ud);
  sl__free(data);
}

/* Converts big-endian elements of `esize` bytes to host order in place. */
static void to_host_order(unsigned char *p, uint64_t n, size_t esize) {
  if (esize == 1) return;
  for (uint64_t i = 0; i < n; i++, p += esize) {
    uint64_t v = 0;
    for (size_t b = 0; b < esize; b++)
      v = v << 8 | p[b];
    if (esize == 2) {
      uint16_t h = (uint16_t)v;
      memcpy(p, &h, 2);
    } else if (esize == 4) {
      uint32_t h = (uint32_t)v;
      memcpy(p, &h, 4);
    } else {
      memcpy(p, &v, 8);
    }
  }
}

char *sl__idx_dims_text(const sl__idx *x, int from, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = 0;
  for (int d = from; d < x->rank && n < size; d++)
    n += (size_t)snprintf(buf + n, size - n, "%s%u", d > from ? "x" : "",
                          x->dims[d]);
  return buf;
}

/* The body of sl__idx_load_limit once the file is open. */
static int load(gzFile gz, const char *path, uint64_t max_bytes, sl__idx *x) {
  const char *why = NULL;
  unsigned char h[4 + 4 * SL_MAX_RANK];
  size_t done = 0;
  int64_t got = read_some(gz, h, 4, &why, &done);
  if (got < 0)
    return sl_set_error(SL_ECORRUPT, "%s: cannot read the idx header: %s", path,
                        why);
  x->gzip = !gzdirect(gz);
  if (got == 0)
    return sl_set_error(SL_ECORRUPT,
                        "%s: the file is empty (expected an idx "
                        "header)",
                        path);
  if (got < 4)
    return sl_set_error(SL_ECORRUPT,
                        "%s: truncated idx header: expected 4 "
                        "magic bytes, found %lld",
                        path, (long long)got);
  if (h[0] != 0 || h[1] != 0)
    return sl_set_error(SL_ECORRUPT,
                        "%s: not an idx file (magic %02x %02x "
                        "%02x %02x, expected 00 00 <type> <rank>)",
                        path, h[0], h[1], h[2], h[3]);
  const idx_type *t = find_type(h[2]);
  if (!t)
    return sl_set_error(SL_ECORRUPT, "%s: unknown idx type code 0x%02x", path,
                        h[2]);
  int rank = h[3];
  if (rank < 1 || rank > SL_MAX_RANK)
    return sl_set_error(SL_ECORRUPT, "%s: idx rank %d is outside 1..%d", path,
                        rank, SL_MAX_RANK);
  size_t dim_bytes = 4 * (size_t)rank;
  got = read_some(gz, h + 4, dim_bytes, &why, &done);
  if (got < 0)
    return sl_set_error(SL_ECORRUPT, "%s: cannot read the idx header: %s", path,
                        why);
  if ((size_t)got < dim_bytes)
    return sl_set_error(SL_ECORRUPT,
                        "%s: truncated idx header: expected %d "
                        "dimensions (%zu bytes), found %lld bytes",
                        path, rank, dim_bytes, (long long)got);
  x->type_code = t->code;
  x->dtype = t->dtype;
  x->rank = rank;
  size_t esize = sl_dtype_size(t->dtype);
  uint64_t item = esize, total;
  for (int d = 0; d < rank; d++) {
    x->dims[d] = (uint32_t)h[4 + 4 * d] << 24 | (uint32_t)h[5 + 4 * d] << 16 |
                 (uint32_t)h[6 + 4 * d] << 8 | (uint32_t)h[7 + 4 * d];
    if (d > 0 && !sl__mul_ok(item, x->dims[d], &item)) item = UINT64_MAX;
  }
  x->count = x->dims[0];
  char dims[160];
  sl__idx_dims_text(x, 0, dims, sizeof dims);
  /* The item size is bounded on its own too: with zero items the total is
   * 0 whatever the other dimensions claim. */
  if (item > max_bytes || !sl__mul_ok(item, x->count, &total) ||
      total > max_bytes)
    return sl_set_error(SL_EINVAL,
                        "%s: idx header declares %s %s elements, "
                        "more than the limit of %llu bytes",
                        path, dims, sl_dtype_name(t->dtype),
                        (unsigned long long)max_bytes);
  x->item_bytes = (size_t)item;
  /* Grow as data arrives: the declared size is not trusted with memory.
   * One spare byte past the data: the last read asks for it, so zlib has to
   * go on through the gzip trailer (CRC and length) and reports a trailer
   * that is missing or wrong - a read that exactly fills the buffer can stop
   * before the trailer and miss it.  Getting the spare byte means the file
   * holds more than its header declares. */
  size_t cap = (size_t)SL_MIN(total, (uint64_t)IDX_FIRST_CAP), len = 0;
  unsigned char *data = sl__malloc(cap + 1);
  if (!data)
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate %zu bytes", path, cap);
  for (;;) {
    size_t want = cap - len + (cap == total ? 1 : 0);
    got = read_some(gz, data + len, want, &why, &done);
    if (got < 0) {
      sl__free(data);
      return sl_set_error(SL_ECORRUPT,
                          "%s: %s %zu+ of the %llu data bytes "
                          "(zlib: %s)",
                          path,
                          len + done >= total ? "corrupt gzip trailer after"
                                              : "corrupt gzip data after",
                          len + done, (unsigned long long)total, why);
    }
    len += (size_t)got;
    if (len < cap || cap == total) break;
    size_t ncap = (size_t)SL_MIN((uint64_t)cap * 2, total);
    unsigned char *p = sl__realloc(data, ncap + 1);
    if (!p) {
      sl__free(data);
      return sl_set_error(SL_ENOMEM, "%s: cannot allocate %zu bytes", path,
                          ncap);
    }
    data = p;
    cap = ncap;
  }
  size_t hdr = 4 + dim_bytes;
  const char *err = NULL;
  char msg[400];
  if (len < total) {
    snprintf(msg, sizeof msg,
             "truncated: the idx header declares %s %s "
             "elements (%llu data bytes after the %zu-byte header), found %zu",
             dims, sl_dtype_name(t->dtype), (unsigned long long)total, hdr,
             len);
    err = msg;
  } else if (len > total) {
    snprintf(msg, sizeof msg,
             "unexpected bytes after the %llu data bytes "
             "the idx header declares (%s %s elements)",
             (unsigned long long)total, dims, sl_dtype_name(t->dtype));
    err = msg;
  } else if (why) {
    snprintf(msg, sizeof msg,
             "truncated gzip stream: all %llu data bytes "
             "arrived but not the gzip trailer",
             (unsigned long long)total);
    err = msg;
  }
  if (err) {
    sl__free(data);
    /* zlib's own text (it starts with the path) says what it saw. */
    return sl_set_error(SL_ECORRUPT, "%s: %s%s%s%s", path, err,
                        why ? " (zlib: " : "", why ? why : "", why ? ")" : "");
  }
  to_host_order(data, total / esize, esize);
  x->data = sl_buffer_wrap(data, (size_t)total, free_data, NULL);
  if (!x->data) {
    sl__free(data);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate a buffer", path);
  }
  return SL_OK;
}

int sl__idx_load_limit(const char *path, uint64_t max_bytes, sl__idx *out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "idx: NULL out pointer");
  memset(out, 0, sizeof *out);
  SL_RETURN_ERROR_IF(!path, SL_EINVAL, "idx: NULL path");
  if (max_bytes == 0) max_bytes = SL__IDX_MAX_BYTES;
  errno = 0;
  gzFile gz = gzopen(path, "rb");
  if (!gz)
    return sl_set_error(errno ? SL_EIO : SL_ENOMEM, "%s: cannot open: %s", path,
                        errno ? strerror(errno) : "out of memory");
  gzbuffer(gz, 256 << 10);
  int rc = load(gz, path, max_bytes, out);
  gzclose_r(gz);
  if (rc == SL_OK) {
    out->path = sl__strdup(path);
    if (!out->path) rc = sl_set_error(SL_ENOMEM, "%s: cannot allocate", path);
  }
  if (rc < 0) sl__idx_free(out);
  return rc;
}

int sl__idx_expect(const sl__idx *x, const char *what, sl_dtype dtype,
                   int rank) {
  if (x->dtype == dtype && x->rank == rank) return SL_OK;
  char dims[160];
  return sl_set_error(SL_EINVAL,
                      "%s: expected %s: an idx file of %s with %d "
                      "dimension%s, found %s with %d (%s)",
                      x->path ? x->path : "idx", what, sl_dtype_name(dtype),
                      rank, rank == 1 ? "" : "s", sl_dtype_name(x->dtype),
                      x->rank, sl__idx_dims_text(x, 0, dims, sizeof dims));
}
