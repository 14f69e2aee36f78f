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
 * The dict is parsed as the Python literal numpy writes, by a small
 * recursive-descent parser of exactly what a header may hold: string keys,
 * and values that are strings, True/False, tuples of non-negative
 * integers (the shape) or a list (a structured descr, refused).  Each of
 * the three keys must appear exactly once and no other may: numpy's
 * literal_eval would take the last of a repeated key where a lookup takes
 * the first, so a repeated key is refused rather than read either way, and
 * numpy itself refuses other keys.  This is the one .npy header parser:
 * the npy: reader, the wds: reader's .npy members and the tokens: reader's
 * .npy shards all come here.
 */
#include "formats/npy.h"
#include "core/bytes.h"

#include <ctype.h>

/* numpy's descrs as it writes them: '|' for single bytes, '<' else. */
static const struct {
  const char *descr;
  sl_dtype dtype;
} k_descrs[] = {{"|b1", SL_BOOL}, {"|u1", SL_U8},  {"|i1", SL_I8},
                {"<u2", SL_U16},  {"<i2", SL_I16}, {"<u4", SL_U32},
                {"<i4", SL_I32},  {"<u8", SL_U64}, {"<i8", SL_I64},
                {"<f2", SL_F16},  {"<f4", SL_F32}, {"<f8", SL_F64}};

/* The header dictionary h[0..n) being parsed: `at` is the next byte. */
typedef struct hdr {
  const char *what;
  const char *h;
  size_t n, at;
} hdr;

static void skip_space(hdr *x) {
  while (x->at < x->n && isspace((unsigned char)x->h[x->at]))
    x->at++;
}

static bool at_char(const hdr *x, char c) {
  return x->at < x->n && x->h[x->at] == c;
}

static int malformed(const hdr *x, const char *expected) {
  if (x->at >= x->n)
    return sl_set_error(SL_ECORRUPT,
                        "npy: %s: malformed header: it ends where %s was "
                        "expected",
                        x->what, expected);
  /* The header is not NUL-terminated: at most what is left of it. */
  int show = (int)SL_MIN(x->n - x->at, (size_t)12);
  return sl_set_error(SL_ECORRUPT,
                      "npy: %s: malformed header at byte %zu ('%.*s'): %s "
                      "expected",
                      x->what, x->at, show, x->h + x->at, expected);
}

/* After an item of a tuple or the dict: 1 past a ',', 0 at `close`. */
static int separator(hdr *x, char close, const char *expected) {
  skip_space(x);
  if (at_char(x, ',')) {
    x->at++;
    return 1;
  }
  return at_char(x, close) ? 0 : malformed(x, expected);
}

/* A quoted string at x->at: its contents in *s[0..*len). */
static int parse_string(hdr *x, const char **s, size_t *len) {
  if (x->at >= x->n || (x->h[x->at] != '\'' && x->h[x->at] != '"'))
    return malformed(x, "a quoted string");
  char q = x->h[x->at];
  const char *open = x->h + x->at + 1;
  const char *close = memchr(open, q, x->n - x->at - 1);
  SL_RETURN_ERROR_IF(!close, SL_ECORRUPT,
                     "npy: %s: malformed header: a string at byte %zu is not "
                     "closed",
                     x->what, x->at);
  *s = open;
  *len = (size_t)(close - open);
  x->at += *len + 2;
  return SL_OK;
}

static int parse_descr(hdr *x, sl_dtype *dt) {
  if (at_char(x, '['))
    return sl_set_error(SL_EUNSUPPORTED,
                        "npy: %s: only simple dtypes are read (a structured "
                        "dtype's descr is a list)",
                        x->what);
  const char *v;
  size_t len;
  SL_FORWARD_IF_ERROR(parse_string(x, &v, &len));
  const char *what = x->what;
  SL_RETURN_ERROR_IF(len != 3, SL_EUNSUPPORTED,
                     "npy: %s: dtype '%.*s' is not read (bool, integers and "
                     "f2/f4/f8 are)",
                     what, (int)(len > 16 ? 16 : len), v);
  SL_RETURN_ERROR_IF(v[0] == '>', SL_EUNSUPPORTED,
                     "npy: %s: big-endian dtype '%.3s' is refused (convert "
                     "with arr.astype(arr.dtype.newbyteorder('<')))",
                     what, v);
  for (size_t i = 0; i < sizeof k_descrs / sizeof *k_descrs; i++) {
    if (memcmp(v + 1, k_descrs[i].descr + 1, 2) != 0) continue;
    bool one = k_descrs[i].descr[0] == '|';
    /* '|' for single bytes; '<' (or native '=' on this little-endian
     * library) for all. */
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

static int parse_bool(hdr *x, bool *b) {
  const char *v = x->h + x->at;
  size_t left = x->n - x->at;
  if (left >= 4 && memcmp(v, "True", 4) == 0) {
    *b = true;
    x->at += 4;
  } else if (left >= 5 && memcmp(v, "False", 5) == 0) {
    *b = false;
    x->at += 5;
  } else {
    return malformed(x, "fortran_order's True or False");
  }
  return SL_OK;
}

/* A tuple of dimensions: "()", "(5,)", "(3, 4)"; Python 2's "3L" too. */
static int parse_shape(hdr *x, sl__npy *out) {
  if (!at_char(x, '(')) return malformed(x, "a shape tuple");
  x->at++;
  out->rank = 0;
  for (int more = 1; more;) {
    skip_space(x);
    if (at_char(x, ')')) break;
    SL_RETURN_ERROR_IF(at_char(x, '-'), SL_ECORRUPT,
                       "npy: %s: the shape has a negative dimension", x->what);
    if (x->at >= x->n || !isdigit((unsigned char)x->h[x->at]))
      return malformed(x, "a dimension");
    SL_RETURN_ERROR_IF(out->rank == SL_MAX_RANK, SL_EUNSUPPORTED,
                       "npy: %s: more than %d dimensions", x->what,
                       SL_MAX_RANK);
    uint64_t d = 0;
    while (x->at < x->n && isdigit((unsigned char)x->h[x->at])) {
      unsigned digit = (unsigned)(x->h[x->at++] - '0');
      SL_RETURN_ERROR_IF(d > ((uint64_t)INT64_MAX - digit) / 10, SL_ECORRUPT,
                         "npy: %s: the shape has a dimension too large",
                         x->what);
      d = d * 10 + digit;
    }
    if (at_char(x, 'L')) x->at++; /* Python 2's long */
    out->shape[out->rank++] = (int64_t)d;
    more = separator(x, ')', "',' or ')' in the shape");
    SL_FORWARD_IF_ERROR(more);
  }
  x->at++; /* ')' */
  return SL_OK;
}

/* The dictionary: each of the three keys exactly once, no other. */
static int parse_dict(hdr *x, sl__npy *out) {
  static const char *const keys[3] = {"descr", "fortran_order", "shape"};
  bool seen[3] = {false, false, false}, fortran = false;
  skip_space(x);
  if (!at_char(x, '{')) return malformed(x, "the dictionary's '{'");
  x->at++;
  for (int more = 1; more;) {
    skip_space(x);
    if (at_char(x, '}')) break;
    const char *k;
    size_t kl;
    SL_FORWARD_IF_ERROR(parse_string(x, &k, &kl));
    int key = -1;
    for (int i = 0; i < 3; i++)
      if (strlen(keys[i]) == kl && memcmp(keys[i], k, kl) == 0) key = i;
    SL_RETURN_ERROR_IF(key < 0, SL_ECORRUPT,
                       "npy: %s: the header has key '%.*s' (numpy writes "
                       "only 'descr', 'fortran_order' and 'shape')",
                       x->what, (int)(kl > 32 ? 32 : kl), k);
    SL_RETURN_ERROR_IF(seen[key], SL_ECORRUPT,
                       "npy: %s: the header repeats key '%s' (which value "
                       "holds is ambiguous: refused)",
                       x->what, keys[key]);
    seen[key] = true;
    skip_space(x);
    if (!at_char(x, ':')) return malformed(x, "':'");
    x->at++;
    skip_space(x);
    int rc = key == 0   ? parse_descr(x, &out->dtype)
             : key == 1 ? parse_bool(x, &fortran)
                        : parse_shape(x, out);
    SL_FORWARD_IF_ERROR(rc);
    more = separator(x, '}', "',' or '}'");
    SL_FORWARD_IF_ERROR(more);
  }
  x->at++; /* '}' */
  skip_space(x);
  SL_RETURN_ERROR_IF(x->at < x->n, SL_ECORRUPT,
                     "npy: %s: malformed header: text after the dictionary "
                     "at byte %zu",
                     x->what, x->at);
  for (int i = 0; i < 3; i++)
    SL_RETURN_ERROR_IF(!seen[i], SL_ECORRUPT, "npy: %s: the header lacks '%s'",
                       x->what, keys[i]);
  SL_RETURN_ERROR_IF(fortran, SL_EUNSUPPORTED,
                     "npy: %s: Fortran-order arrays are refused (save "
                     "np.ascontiguousarray(a))",
                     x->what);
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
  hdr x = {what, (const char *)p + hoff, (size_t)hlen, 0};
  SL_FORWARD_IF_ERROR(parse_dict(&x, out));
  uint64_t nb = sl_dtype_size(out->dtype);
  for (int i = 0; i < out->rank; i++)
    SL_RETURN_ERROR_IF(!sl__mul_ok(nb, (uint64_t)out->shape[i], &nb),
                       SL_ECORRUPT, "npy: %s: the shape overflows", what);
  out->data_off = hoff + hlen;
  out->nbytes = nb;
  SL_RETURN_ERROR_IF(
      out->data_off > total || nb > total - out->data_off, SL_ECORRUPT,
      "npy: %s: %llu bytes of elements expected, %llu present", what,
      (unsigned long long)nb,
      (unsigned long long)(total > out->data_off ? total - out->data_off : 0));
  return SL_OK;
}

const char *sl__npy_descr(sl_dtype dt) {
  for (size_t i = 0; i < sizeof k_descrs / sizeof *k_descrs; i++)
    if (k_descrs[i].dtype == dt) return k_descrs[i].descr;
  return "?";
}
