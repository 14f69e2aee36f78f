/*
 * tar.c - the tar member walker (tar.h).
 *
 * A tar archive is a sequence of 512-byte headers, each followed by its
 * member's data padded to 512 bytes, ended by two zero blocks - required:
 * bytes that stop without them (a cut, even at a member boundary), one
 * zero block alone, or data after them (a zeroed hole) are corrupt
 * (check_end), so a shard that ends early is never read as complete.  Header
 * fields are NUL- or space-terminated octal text; GNU tar writes sizes of
 * 8 GiB and more in base-256 (high bit of the first byte set).  A name
 * longer than 100 bytes is stored in one of three ways, all read here:
 *   ustar   a 155-byte prefix at offset 345 ("prefix/name");
 *   GNU     a preceding member of type 'L' (name "././@LongLink") whose
 *           data is the name;
 *   pax     a preceding member of type 'x' whose data holds records
 *           "LEN path=VALUE\n" (Python's tarfile default since 3.8);
 *           its "size" record overrides the header's size too.
 * Global pax headers ('g') and GNU long link names ('K') are passed over.
 * Each header's checksum is checked (both the unsigned sum POSIX asks for
 * and the signed one some old tars wrote are accepted).
 *
 * Bytes come from memory (a mapped file) or from a byte source (a URL):
 * at() gives a pointer to [off, off + n), from the mapping or read into
 * the header buffer / scratch space, so the walk is the same code either
 * way.  From a source only headers and long-name / pax records are read;
 * member data is the caller's to read.
 */
#include "formats/tar.h"

#define BLOCK 512
#define SCRATCH_MAX ((size_t)1 << 20) /* a long-name or pax record, read */

/* The bytes [off, off + n) of the archive (within t->n, checked by the
 * caller) into *out: a pointer into the mapping, or bytes read from the
 * source into `buf` (a header: n <= BLOCK) or the scratch space. */
static int at(sl__tar *t, const char *what, uint64_t off, uint64_t n,
              unsigned char *buf, const unsigned char **out) {
  if (!t->src) {
    *out = t->p + off;
    return SL_OK;
  }
  if (!buf) {
    SL_RETURN_ERROR_IF(n > SCRATCH_MAX, SL_ECORRUPT,
                       "tar: %s: a long-name or pax record of %llu bytes at "
                       "offset %llu (more than %zu)",
                       what, (unsigned long long)n, (unsigned long long)off,
                       SCRATCH_MAX);
    if (n > t->scratch_cap || !t->scratch) {
      unsigned char *p = sl__realloc(t->scratch, n ? (size_t)n : 1);
      SL_RETURN_ERROR_IF(!p, SL_ENOMEM, "tar: out of memory");
      t->scratch = p;
      t->scratch_cap = n ? (size_t)n : 1;
    }
    buf = t->scratch;
  }
  SL_FORWARD_IF_ERROR(t->src->read_at(t->src, off, buf, (size_t)n));
  *out = buf;
  return SL_OK;
}

void sl__tar_init(sl__tar *t, const void *p, size_t n) {
  memset(t, 0, sizeof *t);
  t->p = p;
  t->n = n;
}

void sl__tar_init_source(sl__tar *t, sl__source *src) {
  memset(t, 0, sizeof *t);
  t->src = src;
  t->n = src->size;
}

void sl__tar_fini(sl__tar *t) {
  sl__free(t->scratch);
  t->scratch = NULL;
  t->scratch_cap = 0;
  sl__free(t->name);
  t->name = NULL;
  t->name_cap = 0;
}

uint64_t sl__tar_held(const sl__tar *t) {
  return (uint64_t)t->scratch_cap + t->name_cap + sl__source_held(t->src);
}

/* An octal or base-256 number field. */
static bool parse_num(const unsigned char *f, size_t len, uint64_t *v) {
  *v = 0;
  if (f[0] & 0x80) { /* base-256, big-endian, positive only */
    if (f[0] != 0x80) return false;
    for (size_t i = 1; i < len; i++) {
      if (*v >> 56) return false;
      *v = *v << 8 | f[i];
    }
    return true;
  }
  size_t i = 0;
  while (i < len && f[i] == ' ')
    i++;
  bool any = false;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
    if (*v >> 60) return false;
    *v = *v << 3 | (uint64_t)(f[i] - '0');
    any = true;
  }
  for (; i < len; i++)
    if (f[i] != ' ' && f[i] != 0) return false;
  return any || f[0] == 0 || f[0] == ' ';
}

static bool checksum_ok(const unsigned char *h) {
  uint64_t want;
  if (!parse_num(h + 148, 8, &want)) return false;
  uint64_t u = 0;
  int64_t sg = 0;
  for (int i = 0; i < BLOCK; i++) {
    unsigned char c = i >= 148 && i < 156 ? ' ' : h[i];
    u += c;
    sg += (signed char)c;
  }
  return u == want || (uint64_t)sg == want;
}

static int set_name(sl__tar *t, const char *a, size_t al, const char *b,
                    size_t bl) {
  size_t need = al + (al ? 1 : 0) + bl + 1;
  if (need > t->name_cap) {
    char *p = sl__realloc(t->name, need);
    SL_RETURN_ERROR_IF(!p, SL_ENOMEM, "tar: out of memory");
    t->name = p;
    t->name_cap = need;
  }
  size_t o = 0;
  if (al) {
    memcpy(t->name, a, al);
    t->name[al] = '/';
    o = al + 1;
  }
  memcpy(t->name + o, b, bl);
  t->name[o + bl] = 0;
  return SL_OK;
}

/* The length of a NUL-padded field. */
static size_t field_len(const unsigned char *f, size_t max) {
  const unsigned char *z = memchr(f, 0, max);
  return z ? (size_t)(z - f) : max;
}

/* pax records "LEN key=value\n" in d[0..n): path and size. */
static int parse_pax(sl__tar *t, const char *what, uint64_t at,
                     const unsigned char *d, uint64_t n, bool *has_path,
                     bool *has_size, uint64_t *size) {
  uint64_t i = 0;
  while (i < n) {
    uint64_t len = 0, j = i;
    while (j < n && d[j] >= '0' && d[j] <= '9' && len < (1u << 30))
      len = len * 10 + (uint64_t)(d[j++] - '0');
    SL_RETURN_ERROR_IF(j == i || j >= n || d[j] != ' ' || len > n - i ||
                           len < j - i + 2 || d[i + len - 1] != '\n',
                       SL_ECORRUPT,
                       "tar: %s: malformed pax record at offset %llu", what,
                       (unsigned long long)(at + i));
    const char *kv = (const char *)d + j + 1;
    size_t kvl = (size_t)(i + len - 1 - (j + 1));
    const char *eq = memchr(kv, '=', kvl);
    if (eq) {
      size_t kl = (size_t)(eq - kv), vl = kvl - kl - 1;
      if (kl == 4 && memcmp(kv, "path", 4) == 0) {
        SL_FORWARD_IF_ERROR(set_name(t, NULL, 0, eq + 1, vl));
        *has_path = true;
      } else if (kl == 4 && memcmp(kv, "size", 4) == 0) {
        uint64_t v = 0;
        for (size_t k = 0; k < vl; k++) {
          SL_RETURN_ERROR_IF(eq[1 + k] < '0' || eq[1 + k] > '9' || v >> 59,
                             SL_ECORRUPT, "tar: %s: bad pax size at %llu", what,
                             (unsigned long long)(at + i));
          v = v * 10 + (uint64_t)(eq[1 + k] - '0');
        }
        *size = v;
        *has_size = true;
      }
    }
    i += len;
  }
  return SL_OK;
}

static bool all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return false;
  return true;
}

/* The end of the archive at t->off, where a zero block was found: a second
 * zero block must follow, and nothing but zeros after it (the padding to
 * a tar record).  A single zero block, or data after the zero blocks, is
 * a zeroed hole or a cut, not an end.  Checked once per walk's end. */
static int check_end(sl__tar *t, const char *what) {
  uint64_t off = t->off;
  if (t->end_ok && t->end_at == off) return SL_EOF;
  SL_RETURN_ERROR_IF(t->n - off < 2 * BLOCK, SL_ECORRUPT,
                     "tar: %s: one zero block at offset %llu, then the file "
                     "ends (an archive ends with two: the file is cut short)",
                     what, (unsigned long long)off);
  for (uint64_t o = off + BLOCK; o < t->n; o += BLOCK) {
    uint64_t len = SL_MIN((uint64_t)BLOCK, t->n - o);
    const unsigned char *h;
    SL_FORWARD_IF_ERROR(at(t, what, o, len, t->hbuf, &h));
    SL_RETURN_ERROR_IF(
        !all_zero(h, (size_t)len), SL_ECORRUPT,
        "tar: %s: data at offset %llu after zero blocks at offset %llu (a "
        "zeroed hole in the archive, or a damaged one)",
        what, (unsigned long long)o, (unsigned long long)off);
  }
  t->end_ok = true;
  t->end_at = off;
  return SL_EOF;
}

int sl__tar_next(sl__tar *t, const char *what) {
  bool long_name = false, pax_size = false;
  uint64_t psize = 0;
  uint64_t first = t->off;
  for (;;) {
    SL_RETURN_ERROR_IF(
        t->off >= t->n, SL_ECORRUPT,
        "tar: %s: the archive ends at offset %llu without its end-of-archive "
        "blocks (the file is cut short%s)",
        what, (unsigned long long)t->off,
        t->off == t->n ? " at a member boundary" : "");
    SL_RETURN_ERROR_IF(t->n - t->off < BLOCK, SL_ECORRUPT,
                       "tar: %s: a header cut short at offset %llu", what,
                       (unsigned long long)t->off);
    const unsigned char *h;
    SL_FORWARD_IF_ERROR(at(t, what, t->off, BLOCK, t->hbuf, &h));
    if (all_zero(h, BLOCK)) return check_end(t, what);
    SL_RETURN_ERROR_IF(!checksum_ok(h), SL_ECORRUPT,
                       "tar: %s: bad header checksum at offset %llu (not a "
                       "tar file, or a damaged one)",
                       what, (unsigned long long)t->off);
    uint64_t size;
    SL_RETURN_ERROR_IF(!parse_num(h + 124, 12, &size), SL_ECORRUPT,
                       "tar: %s: bad size field at offset %llu", what,
                       (unsigned long long)t->off);
    char type = (char)h[156];
    uint64_t data = t->off + BLOCK;
    if (pax_size && (type == '0' || type == 0 || type == '7')) size = psize;
    SL_RETURN_ERROR_IF(size > t->n - data, SL_ECORRUPT,
                       "tar: %s: the member at offset %llu (%llu bytes) runs "
                       "past the end of the file",
                       what, (unsigned long long)t->off,
                       (unsigned long long)size);
    uint64_t next = data + ((size + BLOCK - 1) / BLOCK) * BLOCK;
    SL_RETURN_ERROR_IF(next > t->n, SL_ECORRUPT,
                       "tar: %s: the archive is cut short in the member at "
                       "offset %llu",
                       what, (unsigned long long)t->off);
    if (type == 'L') { /* GNU long name: the data is the next name */
      const unsigned char *d;
      SL_FORWARD_IF_ERROR(at(t, what, data, size, NULL, &d));
      SL_FORWARD_IF_ERROR(
          set_name(t, NULL, 0, (const char *)d, field_len(d, (size_t)size)));
      long_name = true;
    } else if (type == 'x') {
      const unsigned char *d;
      SL_FORWARD_IF_ERROR(at(t, what, data, size, NULL, &d));
      SL_FORWARD_IF_ERROR(
          parse_pax(t, what, data, d, size, &long_name, &pax_size, &psize));
    } else if (type == '0' || type == 0 || type == '7') {
      if (!long_name) {
        size_t nl = field_len(h, 100), pl = 0;
        if (memcmp(h + 257, "ustar", 5) == 0 && h[263] == '0')
          pl = field_len(h + 345, 155); /* POSIX ustar's prefix */
        SL_FORWARD_IF_ERROR(
            set_name(t, (const char *)h + 345, pl, (const char *)h, nl));
      }
      t->header = first;
      t->data = data;
      t->size = size;
      t->off = next;
      return SL_OK;
    } else {
      /* A directory, a link, 'g' or 'K': passed over with its name. */
      long_name = pax_size = false;
      first = next;
    }
    t->off = next;
  }
}
