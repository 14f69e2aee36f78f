/*
 * tfrecord.c - TFRecord's framing (tfrecord.h) and the feature spec.
 *
 * Each record is
 *   uint64 length (little-endian)
 *   uint32 masked CRC32C of those 8 bytes
 *   byte   data[length]
 *   uint32 masked CRC32C of the data
 * where mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (tensorflow/core/
 * lib/hash/crc32c.h).  Both checksums are checked: a flipped bit in a
 * length would otherwise send the reader into the middle of a record.
 */
#include "formats/tfrecord.h"
#include "core/crc32c.h"
#include "core/bytes.h"

#include <stdlib.h>

uint32_t sl__tfrecord_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* Record `rec`'s 12-byte header `h` at offset `at`, with `left` bytes of
 * the file from `at` on (at least 12): its data length in *len once the
 * length's CRC matches and the data and its CRC fit in the file. */
static int check_header(const unsigned char *h, uint64_t left, uint64_t at,
                        uint64_t rec, const char *what, uint64_t *len) {
  uint64_t l = sl__get64(h);
  SL_RETURN_ERROR_IF(sl__tfrecord_mask(sl__crc32c(0, h, 8)) != sl__get32(h + 8),
                     SL_ECORRUPT,
                     "tfrecord: %s: record %llu at offset %llu: the length's "
                     "CRC does not match (not a TFRecord file, or a damaged "
                     "one)",
                     what, (unsigned long long)rec, (unsigned long long)at);
  SL_RETURN_ERROR_IF(l > left - 12 || left - 12 - l < 4, SL_ECORRUPT,
                     "tfrecord: %s: record %llu at offset %llu: %llu bytes "
                     "of data run past the end of the file",
                     what, (unsigned long long)rec, (unsigned long long)at,
                     (unsigned long long)l);
  *len = l;
  return SL_OK;
}

/* Record `rec` at offset `at`, `left` bytes of the file from there: room
 * for its 12-byte header. */
static int check_room(uint64_t left, uint64_t at, uint64_t rec,
                      const char *what) {
  SL_RETURN_ERROR_IF(left < 12, SL_ECORRUPT,
                     "tfrecord: %s: record %llu at offset %llu: the header "
                     "is cut short (%llu bytes left)",
                     what, (unsigned long long)rec, (unsigned long long)at,
                     (unsigned long long)left);
  return SL_OK;
}

/* The data CRC of record `rec` (data d[0..l), its masked CRC after it). */
static int check_data(const unsigned char *d, uint64_t l, uint64_t at,
                      uint64_t rec, const char *what) {
  SL_RETURN_ERROR_IF(sl__tfrecord_mask(sl__crc32c(0, d, (size_t)l)) !=
                         sl__get32(d + l),
                     SL_ECORRUPT,
                     "tfrecord: %s: record %llu at offset %llu: the data's "
                     "CRC does not match (a damaged record)",
                     what, (unsigned long long)rec, (unsigned long long)at);
  return SL_OK;
}

int sl__tfrecord_next(const unsigned char *p, size_t n, uint64_t *off,
                      const unsigned char **data, uint64_t *len,
                      const char *what, uint64_t rec) {
  uint64_t at = *off;
  if (at >= n) return SL_EOF;
  SL_FORWARD_IF_ERROR(check_room(n - at, at, rec, what));
  uint64_t l;
  SL_FORWARD_IF_ERROR(check_header(p + at, n - at, at, rec, what, &l));
  const unsigned char *d = p + at + 12;
  SL_FORWARD_IF_ERROR(check_data(d, l, at, rec, what));
  *data = d;
  *len = l;
  *off = at + 16 + l;
  return SL_OK;
}

int sl__tfrecord_read(sl__source *src, uint64_t *off, sl_buffer **rec,
                      uint64_t *len, bool skip, const char *what, uint64_t n) {
  *rec = NULL;
  uint64_t at = *off, size = src->size;
  if (at >= size) return SL_EOF;
  SL_FORWARD_IF_ERROR(check_room(size - at, at, n, what));
  unsigned char h[12];
  SL_FORWARD_IF_ERROR(src->read_at(src, at, h, sizeof h));
  uint64_t l;
  SL_FORWARD_IF_ERROR(check_header(h, size - at, at, n, what, &l));
  if (!skip) {
    SL_RETURN_ERROR_IF(l > SIZE_MAX - 4, SL_ENOMEM,
                       "tfrecord: %s: record %llu: %llu bytes", what,
                       (unsigned long long)n, (unsigned long long)l);
    sl_buffer *b = sl_buffer_new((size_t)l + 4);
    SL_RETURN_ERROR_IF(!b, SL_ENOMEM,
                       "tfrecord: %s: record %llu: out of memory (%llu "
                       "bytes)",
                       what, (unsigned long long)n, (unsigned long long)l);
    unsigned char *d = sl_buffer_data(b);
    int rc = src->read_at(src, at + 12, d, (size_t)l + 4);
    if (rc == SL_OK) rc = check_data(d, l, at, n, what);
    if (rc < 0) {
      sl_buffer_release(b);
      return rc;
    }
    *rec = b;
  }
  *len = l;
  *off = at + 16 + l;
  return SL_OK;
}

/* A record's first allocation from a stream; doubled as its bytes arrive,
 * up to its length.  A length field is only a claim: a stream that ends
 * sooner costs the bytes it held, not the length it claimed. */
#define TF_FIRST_CAP ((size_t)4 << 20)

static void free_record(void *ud, void *data) {
  (void)ud;
  sl__free(data);
}

/* Reads the next `want` bytes of g into a new buffer grown as they arrive:
 * *got < want only at the stream's end. */
static int read_grown(sl__gz *g, uint64_t want, sl_buffer **out,
                      uint64_t *got, const char *what, uint64_t rec) {
  size_t cap = (size_t)SL_MIN(want, (uint64_t)TF_FIRST_CAP), have = 0;
  unsigned char *d = sl__malloc(cap ? cap : 1);
  int rc = d ? SL_OK : SL_ENOMEM;
  while (rc == SL_OK && have < want) {
    if (have == cap) {
      size_t more = (size_t)SL_MIN(want, (uint64_t)cap * 2);
      unsigned char *e = sl__realloc(d, more);
      if (!e) {
        rc = SL_ENOMEM;
        break;
      }
      d = e;
      cap = more;
    }
    size_t ask = cap - have, k;
    rc = sl__gz_read(g, d + have, ask, &k);
    have += k;
    if (rc == SL_OK && k < ask) break; /* the stream's end */
  }
  if (rc == SL_ENOMEM)
    rc = sl_set_error(SL_ENOMEM,
                      "tfrecord: %s: record %llu: out of memory (%llu bytes)",
                      what, (unsigned long long)rec, (unsigned long long)want);
  sl_buffer *b =
      rc == SL_OK ? sl_buffer_wrap(d, have, free_record, NULL) : NULL;
  if (rc == SL_OK && !b)
    rc = sl_set_error(SL_ENOMEM, "tfrecord: %s: out of memory", what);
  if (rc < 0) {
    sl__free(d);
    return rc;
  }
  *out = b;
  *got = have;
  return SL_OK;
}

int sl__tfrecord_read_gz(sl__gz *g, uint64_t *off, sl_buffer **rec,
                         uint64_t *len, bool skip, const char *what,
                         uint64_t n) {
  *rec = NULL;
  uint64_t at = *off;
  unsigned char h[12];
  size_t hgot;
  SL_FORWARD_IF_ERROR(sl__gz_read(g, h, sizeof h, &hgot));
  if (hgot == 0) return SL_EOF;
  SL_FORWARD_IF_ERROR(check_room(hgot, at, n, what));
  uint64_t l, got;
  /* The stream's size is not known before its end: only the length's CRC
   * is checked here, the end comes as a short read below. */
  SL_FORWARD_IF_ERROR(check_header(h, UINT64_MAX, at, n, what, &l));
  sl_buffer *b = NULL;
  if (skip) {
    SL_FORWARD_IF_ERROR(sl__gz_skip(g, l + 4, &got));
  } else {
    SL_RETURN_ERROR_IF(l > SIZE_MAX - 4, SL_ENOMEM,
                       "tfrecord: %s: record %llu: %llu bytes", what,
                       (unsigned long long)n, (unsigned long long)l);
    SL_FORWARD_IF_ERROR(read_grown(g, l + 4, &b, &got, what, n));
  }
  int rc = SL_OK;
  if (got < l + 4)
    rc = sl_set_error(SL_ECORRUPT,
                      "tfrecord: %s: record %llu at offset %llu: %llu bytes "
                      "of data run past the end of the stream (%llu "
                      "there)",
                      what, (unsigned long long)n, (unsigned long long)at,
                      (unsigned long long)l,
                      (unsigned long long)(got > 4 ? got - 4 : 0));
  else if (b)
    rc = check_data(sl_buffer_data(b), l, at, n, what);
  if (rc < 0) {
    sl_buffer_release(b);
    return rc;
  }
  *rec = b;
  *len = l;
  *off = at + 16 + l;
  return SL_OK;
}

int sl__tf_features_parse(const char *spec, sl__tf_feature *f, int max,
                          int *nf) {
  *nf = 0;
  const char *p = spec;
  while (*p) {
    /* One item, up to a ',' outside brackets. */
    const char *e = p;
    int depth = 0;
    while (*e && (depth || *e != ',')) {
      depth += *e == '[' ? 1 : *e == ']' ? -1 : 0;
      e++;
    }
    SL_RETURN_ERROR_IF(*nf == max, SL_EINVAL,
                       "tfrecord: features: more than %d", max);
    sl__tf_feature *x = &f[*nf];
    memset(x, 0, sizeof *x);
    const char *colon = memchr(p, ':', (size_t)(e - p));
    SL_RETURN_ERROR_IF(!colon || colon == p ||
                           (size_t)(colon - p) >= sizeof x->name,
                       SL_EINVAL,
                       "tfrecord: features: '%.*s' is not NAME:DTYPE or "
                       "NAME:DTYPE[DIMS]",
                       (int)(e - p), p);
    memcpy(x->name, p, (size_t)(colon - p));
    const char *br = memchr(colon, '[', (size_t)(e - colon));
    char dn[16];
    snprintf(dn, sizeof dn, "%.*s", (int)((br ? br : e) - colon - 1),
             colon + 1);
    x->dtype = sl_dtype_from_name(dn);
    SL_RETURN_ERROR_IF(x->dtype == SL_DTYPE_INVALID || x->dtype == SL_F16 ||
                           x->dtype == SL_BF16 || x->dtype == SL_BOOL,
                       SL_EINVAL,
                       "tfrecord: features: '%s': dtype '%s' is not one of "
                       "bytes, an integer dtype, f32, f64",
                       x->name, dn);
    if (br) {
      const char *q = br + 1;
      while (q < e && *q != ']') {
        char *end;
        long long d = strtoll(q, &end, 10);
        SL_RETURN_ERROR_IF(end == q || x->rank == SL_MAX_RANK ||
                               (d < 0 && d != -1) || (d == -1 && x->rank),
                           SL_EINVAL,
                           "tfrecord: features: '%s': bad dimensions "
                           "'%.*s' ([3], [2,3] or [-1])",
                           x->name, (int)(e - br), br);
        x->shape[x->rank++] = d;
        q = end;
        if (*q == ',') q++;
      }
      SL_RETURN_ERROR_IF(q >= e || q + 1 != e || x->rank == 0 ||
                             (x->shape[0] == -1 && x->rank != 1),
                         SL_EINVAL,
                         "tfrecord: features: '%s': bad dimensions '%.*s' "
                         "([3], [2,3] or [-1])",
                         x->name, (int)(e - br), br);
    }
    SL_RETURN_ERROR_IF(x->dtype == SL_BYTES && x->rank, SL_EINVAL,
                       "tfrecord: features: '%s': a bytes feature takes no "
                       "dimensions (it is one value of a bytes_list)",
                       x->name);
    for (int i = 0; i < *nf; i++)
      SL_RETURN_ERROR_IF(strcmp(f[i].name, x->name) == 0, SL_EINVAL,
                         "tfrecord: features: '%s' appears twice", x->name);
    (*nf)++;
    p = *e ? e + 1 : e;
  }
  SL_RETURN_ERROR_IF(*nf == 0, SL_EINVAL, "tfrecord: features: none named");
  return SL_OK;
}

int sl__tf_features_schema(const sl__tf_feature *f, int nf, sl_schema **out) {
  sl_schema *sc = sl_schema_new();
  SL_RETURN_ERROR_IF(!sc, SL_ENOMEM, "tfrecord: out of memory");
  int rc = SL_OK;
  int64_t var = -1;
  for (int i = 0; i < nf && rc >= 0; i++)
    rc = f[i].dtype == SL_BYTES
             ? sl_schema_add(sc, f[i].name, SL_BYTES, 1, &var)
             : sl_schema_add(sc, f[i].name, f[i].dtype, f[i].rank, f[i].shape);
  if (rc >= 0) rc = sl_schema_set_meta(sc, "source", "tfrecord");
  if (rc < 0) {
    sl_schema_release(sc);
    return sl_wrap_error(rc, "tfrecord: the schema");
  }
  *out = sc;
  return SL_OK;
}
