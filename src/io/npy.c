/*
 * npy.c - the .npy header parser (npy.h).
 *
 * The format (numpy/lib/format.py): "\x93NUMPY", major and minor version
 * bytes, the header length (u16 LE for 1.0, u32 LE for 2.0 and 3.0), then
 * the header: a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces and a newline so that the elements start aligned (64
 * bytes since NumPy 1.24, 16 before).  3.0 only allows UTF-8 in the header,
 * which matters for structured dtypes' names: those are refused anyway.
 *
 * The dict is parsed by looking up each of the three keys, not by a general
 * Python literal parser: numpy writes them in this order with this
 * spelling, and anything else (a structured descr, a list) is refused.
 */
#include "io/npy.h"
#include "io/bytes.h"

#include <ctype.h>

static const struct {
  const char *code;
  sl_dtype dtype;
} k_descrs[] = {{"b1", SL_BOOL}, {"u1", SL_U8},  {"i1", SL_I8},
                {"u2", SL_U16},  {"i2", SL_I16}, {"u4", SL_U32},
                {"i4", SL_I32},  {"u8", SL_U64}, {"i8", SL_I64},
                {"f2", SL_F16},  {"f4", SL_F32}, {"f8", SL_F64}};

/* The value after 'key': in h[0..n), skipping spaces: *at. */
static const char *find_key(const char *h, size_t n, const char *key) {
  size_t kl = strlen(key);
  for (size_t i = 0; i + kl + 2 < n; i++) {
    if ((h[i] == '\'' || h[i] == '"') && memcmp(h + i + 1, key, kl) == 0 &&
        h[i + 1 + kl] == h[i]) {
      size_t j = i + kl + 2;
      while (j < n && isspace((unsigned char)h[j]))
        j++;
      if (j < n && h[j] == ':') {
        j++;
        while (j < n && isspace((unsigned char)h[j]))
          j++;
        return h + j;
      }
    }
  }
  return NULL;
}

static int parse_descr(const char *what, const char *v, const char *end,
                       sl_dtype *dt) {
  SL_RETURN_ERROR_IF(v >= end || (*v != '\'' && *v != '"'), SL_EUNSUPPORTED,
                     "npy: %s: only simple dtypes are read (a structured "
                     "dtype's descr is a list)",
                     what);
  char q = *v++;
  const char *close = memchr(v, q, (size_t)(end - v));
  SL_RETURN_ERROR_IF(!close, SL_ECORRUPT, "npy: %s: unterminated descr", what);
  size_t len = (size_t)(close - v);
  SL_RETURN_ERROR_IF(len != 3, SL_EUNSUPPORTED,
                     "npy: %s: dtype '%.*s' is not read (bool, integers and "
                     "f2/f4/f8 are)",
                     what, (int)(len > 16 ? 16 : len), v);
  SL_RETURN_ERROR_IF(v[0] == '>', SL_EUNSUPPORTED,
                     "npy: %s: big-endian dtype '%.3s' is refused (convert "
                     "with arr.astype(arr.dtype.newbyteorder('<')))",
                     what, v);
  for (size_t i = 0; i < sizeof k_descrs / sizeof *k_descrs; i++) {
    if (memcmp(v + 1, k_descrs[i].code, 2) != 0) continue;
    bool one = k_descrs[i].code[1] == '1';
    /* '|' for single bytes; '<' (or native '=' on this little-endian
     * library) for the others. */
    if (v[0] == '<' || v[0] == '=' || (one && v[0] == '|')) {
      *dt = k_descrs[i].dtype;
      return SL_OK;
    }
  }
  return sl_set_error(SL_EUNSUPPORTED,
                      "npy: %s: dtype '%.3s' is not read (bool, integers and "
                      "f2/f4/f8 are)",
                      what, v);
}

static int parse_shape(const char *what, const char *v, const char *end,
                       sl__npy *out) {
  SL_RETURN_ERROR_IF(v >= end || *v != '(', SL_ECORRUPT,
                     "npy: %s: malformed shape", what);
  v++;
  out->rank = 0;
  for (;;) {
    while (v < end && (isspace((unsigned char)*v) || *v == ','))
      v++;
    SL_RETURN_ERROR_IF(v >= end, SL_ECORRUPT, "npy: %s: unterminated shape",
                       what);
    if (*v == ')') break;
    SL_RETURN_ERROR_IF(!isdigit((unsigned char)*v), SL_ECORRUPT,
                       "npy: %s: malformed shape", what);
    SL_RETURN_ERROR_IF(out->rank == SL_MAX_RANK, SL_EUNSUPPORTED,
                       "npy: %s: more than %d dimensions", what, SL_MAX_RANK);
    uint64_t d = 0;
    while (v < end && isdigit((unsigned char)*v)) {
      SL_RETURN_ERROR_IF(d > (uint64_t)INT64_MAX / 10, SL_ECORRUPT,
                         "npy: %s: dimension too large", what);
      d = d * 10 + (uint64_t)(*v++ - '0');
    }
    while (v < end && (*v == 'L')) /* Python 2's long suffix */
      v++;
    out->shape[out->rank++] = (int64_t)d;
  }
  return SL_OK;
}

int sl__npy_parse(const char *what, const unsigned char *p, size_t n,
                  sl__npy *out) {
  return sl__npy_parse_head(what, p, n, n, out);
}

int sl__npy_parse_head(const char *what, const unsigned char *p, size_t n,
                       uint64_t total, sl__npy *out) {
  memset(out, 0, sizeof *out);
  SL_RETURN_ERROR_IF(n < 10 || memcmp(p, "\x93NUMPY", 6) != 0, SL_ECORRUPT,
                     "npy: %s: not a .npy file (no \\x93NUMPY magic)", what);
  unsigned major = p[6];
  SL_RETURN_ERROR_IF(major < 1 || major > 3, SL_EUNSUPPORTED,
                     "npy: %s: format version %u.%u is not read (1.0 to 3.0 "
                     "are)",
                     what, major, p[7]);
  uint64_t hlen, hoff;
  if (major == 1) {
    hlen = sl__get16(p + 8);
    hoff = 10;
  } else {
    SL_RETURN_ERROR_IF(n < 12, SL_ECORRUPT, "npy: %s: truncated header", what);
    hlen = sl__get32(p + 8);
    hoff = 12;
  }
  SL_RETURN_ERROR_IF(hoff + hlen > n, SL_ECORRUPT,
                     "npy: %s: the header (%llu bytes) is cut short", what,
                     (unsigned long long)hlen);
  const char *h = (const char *)p + hoff, *end = h + hlen;
  const char *d = find_key(h, hlen, "descr");
  const char *f = find_key(h, hlen, "fortran_order");
  const char *s = find_key(h, hlen, "shape");
  SL_RETURN_ERROR_IF(!d || !f || !s, SL_ECORRUPT,
                     "npy: %s: the header lacks '%s'", what,
                     !d   ? "descr"
                     : !f ? "fortran_order"
                          : "shape");
  SL_FORWARD_IF_ERROR(parse_descr(what, d, end, &out->dtype));
  if (end - f >= 4 && memcmp(f, "True", 4) == 0)
    return sl_set_error(SL_EUNSUPPORTED,
                        "npy: %s: Fortran-order arrays are refused (save "
                        "np.ascontiguousarray(a))",
                        what);
  SL_RETURN_ERROR_IF(end - f < 5 || memcmp(f, "False", 5) != 0, SL_ECORRUPT,
                     "npy: %s: malformed fortran_order", what);
  SL_FORWARD_IF_ERROR(parse_shape(what, s, end, out));
  uint64_t nb = sl_dtype_size(out->dtype);
  for (int i = 0; i < out->rank; i++)
    SL_RETURN_ERROR_IF(!sl__mul_ok(nb, (uint64_t)out->shape[i], &nb),
                       SL_ECORRUPT, "npy: %s: the shape overflows", what);
  out->data_off = hoff + hlen;
  out->nbytes = nb;
  SL_RETURN_ERROR_IF(nb > total - out->data_off, SL_ECORRUPT,
                     "npy: %s: %llu bytes of elements expected, %llu present",
                     what, (unsigned long long)nb,
                     (unsigned long long)(total - out->data_off));
  return SL_OK;
}
