/*
 * idx.c - reads idx files (MNIST's format), plain or gzip-compressed.
 *
 * A plain file is read as it is; a gzip file (1f 8b magic) is inflated here
 * with zlib's inflate, member by member, so that bytes after the last
 * member that are not another member are seen (gzread ignores them).  The
 * header is decoded byte by byte (big-endian) and checked, then the size it
 * declares is checked against the file before anything is allocated: a
 * plain file's size must match; a gzip file may hold at most 1032 times its
 * size, and when its trailer's ISIZE (the last member's size modulo 2^32)
 * does not match, the data is first inflated without being kept and
 * counted.  The data is then read into a buffer grown as bytes actually
 * arrive, so a corrupt header cannot make us allocate gigabytes for a file
 * of a few bytes.
 */
#include "formats/idx.h"

#include "core/bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* First allocation for the data; doubled up to the declared size (realloc
 * of large blocks moves pages, not bytes, so doubling is cheap). */
#define IDX_FIRST_CAP ((size_t)4 << 20)
/* Inflate in pieces of this (zlib takes unsigned lengths), so errors are
 * placed within 1 MiB. */
#define IDX_READ_STEP ((size_t)1 << 20)
/* Compressed bytes read at a time. */
#define IDX_IN_BUF ((size_t)256 << 10)
/* Deflate's largest expansion: a gzip file of n bytes holds at most
 * 1032 n bytes. */
#define IDX_GZIP_MAX_RATIO 1032

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

/* The input: a plain file read as it is, or a gzip file inflated here
 * member by member (zlib's gzread skips what follows the last member, so
 * trailing garbage would pass unseen). */
typedef struct idx_in {
  int fd;
  uint64_t file_size;
  uint64_t in_off; /* file offset of the next byte read into buf */
  bool gzip;
  bool zinit;       /* zs initialised */
  bool member_end;  /* the current member ended (trailer checked) */
  bool eof;         /* no more data */
  uint64_t members; /* gzip members met */
  z_stream zs;
  unsigned char buf[IDX_IN_BUF];
  /* The last problem: a message (why) and whether it is trailing garbage
   * after the last member (garbage_at, its file offset). */
  const char *why;
  char why_buf[160];
  bool garbage;
  uint64_t garbage_at;
} idx_in;

/* Reads more compressed bytes into the input buffer; false at the end of
 * the file or on a read error (in->why set for the latter). */
static bool refill(idx_in *in) {
  if (in->zs.avail_in) memmove(in->buf, in->zs.next_in, in->zs.avail_in);
  size_t have = in->zs.avail_in;
  for (;;) {
    ssize_t k = pread(in->fd, in->buf + have, sizeof in->buf - have,
                      (off_t)in->in_off);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      snprintf(in->why_buf, sizeof in->why_buf, "read error: %s",
               strerror(errno));
      in->why = in->why_buf;
      return false;
    }
    in->in_off += (uint64_t)k;
    in->zs.next_in = in->buf;
    in->zs.avail_in = (uInt)(have + (size_t)k);
    return k > 0;
  }
}

/* After a member's end: another member must follow, or nothing.  Returns
 * false (in->garbage set) when other bytes follow. */
static bool next_member(idx_in *in) {
  while (in->zs.avail_in < 2 && refill(in)) {
  }
  if (in->why) return false;
  if (in->zs.avail_in == 0) {
    in->eof = true;
    return true;
  }
  if (in->zs.avail_in < 2 || in->zs.next_in[0] != 0x1f ||
      in->zs.next_in[1] != 0x8b) {
    in->garbage = true;
    in->garbage_at = in->in_off - in->zs.avail_in;
    snprintf(in->why_buf, sizeof in->why_buf,
             "%llu bytes at offset %llu after the gzip data are not another "
             "gzip member (trailing garbage)",
             (unsigned long long)(in->file_size - in->garbage_at),
             (unsigned long long)in->garbage_at);
    in->why = in->why_buf;
    return false;
  }
  inflateReset(&in->zs);
  in->member_end = false;
  in->members++;
  return true;
}

/* Reads up to n bytes; returns the count read (< n only at the end of the
 * data) or -1 on an error, with the error text in in->why and the bytes
 * read before it in *done.  A gzip stream cut short ends the data with
 * in->why set ("unexpected end of file"), so it reads as truncation. */
static int64_t read_some(idx_in *in, void *buf, size_t n, size_t *done) {
  size_t got = 0;
  if (!in->gzip) {
    while (got < n) {
      ssize_t k = pread(in->fd, (char *)buf + got, n - got, (off_t)in->in_off);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) {
        snprintf(in->why_buf, sizeof in->why_buf, "read error: %s",
                 strerror(errno));
        in->why = in->why_buf;
        *done = got;
        return -1;
      }
      if (k == 0) break;
      in->in_off += (uint64_t)k;
      got += (size_t)k;
    }
    return (int64_t)got;
  }
  while (got < n && !in->eof) {
    if (in->member_end) {
      if (!next_member(in)) {
        *done = got;
        return -1;
      }
      continue;
    }
    if (in->zs.avail_in == 0 && !refill(in)) {
      if (in->why) {
        *done = got;
        return -1;
      }
      in->why = "unexpected end of file";
      in->eof = true;
      break;
    }
    size_t step = SL_MIN(n - got, IDX_READ_STEP);
    in->zs.next_out = (Bytef *)buf + got;
    in->zs.avail_out = (uInt)step;
    int z = inflate(&in->zs, Z_NO_FLUSH);
    got += step - in->zs.avail_out;
    if (z == Z_STREAM_END) {
      in->member_end = true;
    } else if (z != Z_OK && z != Z_BUF_ERROR) {
      snprintf(in->why_buf, sizeof in->why_buf, "%s",
               in->zs.msg ? in->zs.msg : zError(z));
      in->why = in->why_buf;
      *done = got;
      return -1;
    }
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

/* Discards the rest of the data, counting it: the real size of a gzip
 * file's data without keeping it.  Stops past `stop` bytes.  -1 on an
 * error (in->why). */
static int64_t count_rest(idx_in *in, uint64_t stop) {
  unsigned char scratch[64 << 10];
  uint64_t total = 0;
  for (;;) {
    size_t done = 0;
    int64_t k = read_some(in, scratch, sizeof scratch, &done);
    if (k < 0) return -1;
    total += (uint64_t)k;
    if ((size_t)k < sizeof scratch || total > stop) return (int64_t)total;
  }
}

/* Back to the start of the data after a header of hdr bytes. */
static int rewind_to(idx_in *in, size_t hdr) {
  in->in_off = 0;
  in->eof = in->member_end = false;
  in->why = NULL;
  in->zs.avail_in = 0;
  in->members = 1;
  inflateReset(&in->zs);
  unsigned char h[4 + 4 * SL_MAX_RANK];
  size_t done;
  return read_some(in, h, hdr, &done) == (int64_t)hdr ? SL_OK : -1;
}

/* Before anything is allocated: does the file hold the size its header
 * declares?  A plain file is compared with its size.  A gzip file can
 * hold at most 1032 times its size (deflate's limit); its trailer's ISIZE
 * is the last member's size modulo 2^32, and when it does not match, the
 * data is counted (inflated without being kept) and compared. */
static int check_declared(idx_in *in, const char *path, const char *what,
                          size_t hdr, uint64_t total) {
  uint64_t want = hdr + total;
  if (!in->gzip) {
    uint64_t have = in->file_size > hdr ? in->file_size - hdr : 0;
    if (in->file_size == want) return SL_OK;
    return sl_set_error(SL_ECORRUPT,
                        in->file_size < want
                            ? "%s: truncated: the idx header declares %s "
                              "(%llu data bytes after the %zu-byte header), "
                              "found %llu"
                            : "%s: unexpected bytes after the data the idx "
                              "header declares: %s (%llu data bytes after the "
                              "%zu-byte header), the file holds %llu",
                        path, what, (unsigned long long)total, hdr,
                        (unsigned long long)have);
  }
  if (want / IDX_GZIP_MAX_RATIO > in->file_size)
    return sl_set_error(SL_ECORRUPT,
                        "%s: the idx header declares %s (%llu data bytes), "
                        "more than a gzip file of %llu bytes can hold "
                        "(deflate expands at most %d:1)",
                        path, what, (unsigned long long)total,
                        (unsigned long long)in->file_size, IDX_GZIP_MAX_RATIO);
  unsigned char t[4];
  if (in->file_size >= 8 &&
      pread(in->fd, t, 4, (off_t)(in->file_size - 4)) == 4 &&
      ((uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 |
       (uint32_t)t[3] << 24) == (uint32_t)want)
    return SL_OK;
  int64_t have = count_rest(in, total);
  if (have < 0) {
    if (in->garbage) return sl_set_error(SL_ECORRUPT, "%s: %s", path, in->why);
    return sl_set_error(SL_ECORRUPT, "%s: corrupt gzip data (zlib: %s)", path,
                        in->why);
  }
  if ((uint64_t)have != total)
    return sl_set_error(SL_ECORRUPT,
                        "%s: %sthe idx header declares %s (%llu data bytes "
                        "after the %zu-byte header), found %s%llu in the gzip "
                        "data",
                        path, (uint64_t)have < total ? "truncated: " : "",
                        what, (unsigned long long)total, hdr,
                        (uint64_t)have > total ? "more than " : "",
                        (unsigned long long)SL_MIN((uint64_t)have, total));
  if (rewind_to(in, hdr) < 0)
    return sl_set_error(SL_EIO, "%s: cannot read the file again: %s", path,
                        in->why ? in->why : "short read");
  return SL_OK;
}

/* The body of sl__idx_load_limit once the file is open. */
static int load(idx_in *in, const char *path, uint64_t max_bytes, sl__idx *x) {
  unsigned char h[4 + 4 * SL_MAX_RANK];
  size_t done = 0;
  int64_t got = read_some(in, h, 4, &done);
  if (got < 0)
    return sl_set_error(SL_ECORRUPT, "%s: cannot read the idx header: %s", path,
                        in->why);
  x->gzip = in->gzip;
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
  got = read_some(in, h + 4, dim_bytes, &done);
  if (got < 0)
    return sl_set_error(SL_ECORRUPT, "%s: cannot read the idx header: %s", path,
                        in->why);
  if ((size_t)got < dim_bytes)
    return sl_set_error(SL_ECORRUPT,
                        "%s: truncated idx header: expected %d "
                        "dimensions (%zu bytes), found %lld bytes",
                        path, rank, dim_bytes, (long long)got);
  x->type_code = t->code;
  x->dtype = t->dtype;
  x->rank = rank;
  size_t esize = sl_dtype_size(t->dtype);
  /* span: an item's size with its zero dimensions counted as 1, so that
   * dimensions no tensor shape can hold are refused even beside a 0. */
  uint64_t item = esize, span = esize, total;
  for (int d = 0; d < rank; d++) {
    x->dims[d] = (uint32_t)h[4 + 4 * d] << 24 | (uint32_t)h[5 + 4 * d] << 16 |
                 (uint32_t)h[6 + 4 * d] << 8 | (uint32_t)h[7 + 4 * d];
    if (d > 0 && !sl__mul_ok(item, x->dims[d], &item)) item = UINT64_MAX;
    if (d > 0 && x->dims[d] && !sl__mul_ok(span, x->dims[d], &span))
      span = UINT64_MAX;
  }
  x->count = x->dims[0];
  char dims[160];
  sl__idx_dims_text(x, 0, dims, sizeof dims);
  /* The item size is bounded on its own too: with zero items the total is
   * 0 whatever the other dimensions claim. */
  if (span > max_bytes || !sl__mul_ok(item, x->count, &total) ||
      total > max_bytes)
    return sl_set_error(SL_EINVAL,
                        "%s: idx header declares %s %s elements, "
                        "more than the limit of %llu bytes",
                        path, dims, sl_dtype_name(t->dtype),
                        (unsigned long long)max_bytes);
  x->item_bytes = (size_t)item;
  size_t hdr = 4 + dim_bytes;
  char what[200];
  snprintf(what, sizeof what, "%s %s elements", dims, sl_dtype_name(t->dtype));
  SL_FORWARD_IF_ERROR(check_declared(in, path, what, hdr, total));
  /* Grow as data arrives: the declared size is not trusted with memory.
   * One spare byte past the data: the last read asks for it, so the gzip
   * trailer (CRC and length) and what follows the last member are read and
   * checked; getting the spare byte means the file holds more than its
   * header declares. */
  size_t cap = (size_t)SL_MIN(total, (uint64_t)IDX_FIRST_CAP), len = 0;
  unsigned char *data = sl__malloc(cap + 1);
  if (!data)
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate %zu bytes", path, cap);
  for (;;) {
    size_t want = cap - len + (cap == total ? 1 : 0);
    got = read_some(in, data + len, want, &done);
    if (got < 0) {
      sl__free(data);
      if (in->garbage)
        return sl_set_error(SL_ECORRUPT, "%s: %s", path, in->why);
      return sl_set_error(SL_ECORRUPT,
                          "%s: %s %zu+ of the %llu data bytes "
                          "(zlib: %s)",
                          path,
                          len + done >= total ? "corrupt gzip trailer after"
                                              : "corrupt gzip data after",
                          len + done, (unsigned long long)total, in->why);
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
  const char *err = NULL;
  char msg[400];
  if (len < total) {
    snprintf(msg, sizeof msg,
             "truncated: the idx header declares %s "
             "(%llu data bytes after the %zu-byte header), found %zu",
             what, (unsigned long long)total, hdr, len);
    err = msg;
  } else if (len > total) {
    snprintf(msg, sizeof msg,
             "unexpected bytes after the %llu data bytes "
             "the idx header declares (%s)",
             (unsigned long long)total, what);
    err = msg;
  } else if (in->why) {
    snprintf(msg, sizeof msg,
             "truncated gzip stream: all %llu data bytes "
             "arrived but not the gzip trailer",
             (unsigned long long)total);
    err = msg;
  }
  if (err) {
    sl__free(data);
    return sl_set_error(SL_ECORRUPT, "%s: %s%s%s%s", path, err,
                        in->why ? " (zlib: " : "", in->why ? in->why : "",
                        in->why ? ")" : "");
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
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  SL_RETURN_ERROR_IF(fd < 0, SL_EIO, "%s: cannot open: %s", path,
                     strerror(errno));
  struct stat st;
  bool stat_ok = fstat(fd, &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    const char *why = stat_ok ? "not a regular file" : strerror(errno);
    close(fd);
    return sl_set_error(SL_EIO, "%s: cannot open: %s", path, why);
  }
  idx_in *in = sl__calloc(1, sizeof *in);
  if (!in) {
    close(fd);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate a reader", path);
  }
  in->fd = fd;
  in->file_size = (uint64_t)st.st_size;
  unsigned char magic[2];
  in->gzip = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f &&
             magic[1] == 0x8b;
  int rc = SL_OK;
  if (in->gzip) {
    in->members = 1;
    if (inflateInit2(&in->zs, 15 + 16) != Z_OK)
      rc = sl_set_error(SL_ENOMEM, "%s: cannot start zlib", path);
    else
      in->zinit = true;
  }
  if (rc == SL_OK) rc = load(in, path, max_bytes, out);
  if (in->zinit) inflateEnd(&in->zs);
  sl__free(in);
  close(fd);
  if (rc == SL_OK) {
    out->path = sl__strdup(path);
    if (!out->path) rc = sl_set_error(SL_ENOMEM, "%s: cannot allocate", path);
  }
  if (rc < 0) sl__idx_free(out);
  return rc;
}

int sl__idx_same_count(const sl__idx *im, const sl__idx *lb, const char *prefix,
                       const char *images, const char *labels) {
  if (im->count == lb->count) return SL_OK;
  return sl_set_error(SL_EINVAL,
                      "%s%s holds %llu images but %s holds %llu labels", prefix,
                      images, (unsigned long long)im->count, labels,
                      (unsigned long long)lb->count);
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
