/*
 * npy_reader.c - the `npy` reader: a NumPy .npy file, or a .npz archive of
 * them, as one sample per leading index (docs/FORMATS.md).
 *
 * .npy: the file is mapped (fmt_map.c) and sample i of field `x` is a view
 * of row i: no copy, and reset is free.  The field is named after the
 * file's stem unless the caller names it; a 1-D array gives scalars.
 *
 * .npz: a zip archive (numpy.savez / savez_compressed) of .npy members, one
 * field per member, named after the member's stem.  Stored members are
 * views of the mapping (copied only when their data would be misaligned for
 * the dtype); deflated ones are inflated once at open into their own
 * buffer and checked against the zip's CRC-32.  Every member must have the
 * same leading dimension.  The zip is read through its central directory
 * (numpy writes ZIP64 extra fields even for small members: both places are
 * read); encrypted members and other methods are refused.
 *
 * A .npy URL (http(s)://, s3://) is not fetched whole: its header is read
 * from a URL byte source (source_http.c) and each sample's row by a read
 * of that source, whose read-ahead block (SLUICE_HTTP_READAHEAD) serves
 * the rows after it, so a pass costs one ranged GET per block and a
 * partial pass only the blocks it reached.  Such rows are copies (one
 * buffer per row), not views.  An .npz URL is fetched whole, as the
 * other formats without an index are.
 *
 * Memory budget: the stage's resident charge is its own memory - a .npy
 * URL's read-ahead block (sl__source_held), an .npz's inflated (or
 * realigned) members and an .npz fetched whole by URL, counted whole also
 * while samples refer to them - measured again after each sample read; a
 * mapping is page cache and not counted.
 *
 * Saving (stages/state.h): the position is the index; the record holds the
 * count and the file's identity (sl__state_put_file_ids), so a state of
 * another or a rewritten file is refused.
 */
#include "core/bytes.h"
#include "transport/fmt_map.h"
#include "transport/http.h"
#include "formats/npy.h"
#include "stages/indexed.h"
#include "sync/resident.h"

#include <zlib.h>

#define MAX_FIELDS 64

typedef struct npy_field {
  char name[64];
  sl__npy h;
  sl_buffer *buf; /* holds the elements at h.data_off */
  size_t row;     /* bytes of one leading index */
} npy_field;

typedef struct npy_state {
  sl__indexed ix; /* n: the leading dimension */
  npy_field f[MAX_FIELDS];
  int nf;
  uint64_t file_size;
  sl__file_id id; /* the file (URL) as opened: what a state checks */
  sl_schema *schema;
  char *path;
  sl__source *src;   /* a .npy URL, read row by row; else NULL */
  uint64_t own;      /* the fields' buffers that are not a mapping */
  sl__resident held; /* own and src's read-ahead, charged to the budget */
} npy_state;

/* Row i of field f read from the URL source into a new buffer. */
static int url_row(npy_state *s, const npy_field *f, uint64_t i, sl_tensor *t) {
  sl_buffer *b = sl_buffer_new(f->row);
  SL_RETURN_ERROR_IF(!b, SL_ENOMEM, "npy: %s: cannot allocate a %zu-byte row",
                     s->path, f->row);
  int rc = s->src->read_at(s->src, f->h.data_off + i * f->row,
                           sl_buffer_data(b), f->row);
  if (rc == SL_OK)
    rc = sl_tensor_view(t, f->h.dtype, f->h.rank - 1, f->h.shape + 1, b, 0);
  sl_buffer_release(b); /* the view holds its own reference */
  return rc;
}

static int npy_get(void *st, uint64_t pos, sl_sample **out) {
  npy_state *s = st;
  sl_sample *smp = sl_sample_new(s->schema);
  SL_RETURN_ERROR_IF(!smp, SL_ENOMEM, "npy: cannot allocate a sample");
  int rc = SL_OK;
  for (int i = 0; i < s->nf && rc == SL_OK; i++) {
    const npy_field *f = &s->f[i];
    sl_tensor t;
    rc = s->src
             ? url_row(s, f, pos, &t)
             : sl_tensor_view(&t, f->h.dtype, f->h.rank - 1, f->h.shape + 1,
                              f->buf, (size_t)(f->h.data_off + pos * f->row));
    if (rc == SL_OK && (rc = sl_sample_set_move(smp, i, &t)) < 0)
      sl_tensor_clear(&t);
  }
  sl__resident_set(&s->held, s->own + sl__source_held(s->src));
  if (rc < 0)
    rc = sl_wrap_error(rc, "npy: %s: sample %llu", s->path,
                       (unsigned long long)pos);
  return sl__sample_out(rc, smp, out);
}

static void npy_destroy(void *st) {
  npy_state *s = st;
  if (!s) return;
  for (int i = 0; i < s->nf; i++)
    sl_buffer_release(s->f[i].buf);
  sl__source_close(s->src);
  sl__free(s->path);
  sl__stage_free(s, NULL, s->schema);
}

/* Record: the count and the file's identity. */
static int npy_put(void *st, sl__state_out *w) {
  const npy_state *s = st;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, s->ix.n));
  return sl__state_put_file_ids(w, &s->id, 1);
}

/* The count and the file unchanged. */
static int npy_check(void *st, sl__state_in *in) {
  const npy_state *s = st;
  uint64_t count;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &count));
  SL_RETURN_ERROR_IF(count != s->ix.n, SL_ECORRUPT,
                     "restore: npy %s: the file changed since the state was "
                     "saved (%llu samples then, %llu now)",
                     s->path, (unsigned long long)count,
                     (unsigned long long)s->ix.n);
  return sl__state_check_file_id(in, "npy", s->path, &s->id);
}

static void npy_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", sl__basename(((const npy_state *)st)->path));
}

/* The memory budget: own and a URL's read-ahead, from the next sample
 * read. */
static void npy_budget(void *st, sl__budget_acct *acct) {
  sl__resident_account(&((npy_state *)st)->held, acct);
}

static const sl__stage_ops npy_ops = {
    .name = "npy",
    SL__INDEXED_OPS,
    .destroy = npy_destroy,
    .identity = npy_identity,
    .budget = npy_budget,
};

/* Adds field `name` for the array h of `buf` (retained). */
static int add_field(npy_state *s, const char *name, const sl__npy *h,
                     sl_buffer *buf, const char *what) {
  SL_RETURN_ERROR_IF(s->nf == MAX_FIELDS, SL_EUNSUPPORTED,
                     "npy: %s: more than %d arrays", s->path, MAX_FIELDS);
  SL_RETURN_ERROR_IF(h->rank < 1, SL_EINVAL,
                     "npy: %s: a 0-d array has no leading index to make "
                     "samples of",
                     what);
  SL_RETURN_ERROR_IF(strlen(name) >= sizeof s->f[0].name || !name[0], SL_EINVAL,
                     "npy: %s: bad field name '%s'", what, name);
  npy_field *f = &s->f[s->nf];
  snprintf(f->name, sizeof f->name, "%s", name);
  f->h = *h;
  f->row = h->shape[0] ? (size_t)(h->nbytes / (uint64_t)h->shape[0]) : 0;
  uint64_t n = (uint64_t)h->shape[0];
  if (s->nf == 0) {
    s->ix.n = n;
  } else {
    SL_RETURN_ERROR_IF(n != s->ix.n, SL_EINVAL,
                       "npy: %s: array '%s' has %llu rows but '%s' has %llu: "
                       "the arrays of an .npz must have the same leading "
                       "dimension",
                       s->path, name, (unsigned long long)n, s->f[0].name,
                       (unsigned long long)s->ix.n);
  }
  f->buf = sl_buffer_retain(buf);
  s->nf++;
  return SL_OK;
}

/* --- .npz: the zip's central directory ------------------------------------ */

typedef struct zip_entry {
  const unsigned char *name;
  size_t name_len;
  unsigned method, flags;
  uint32_t crc;
  uint64_t csize, usize, local;
  uint64_t data; /* where its data starts (member_span) */
} zip_entry;

/* The ZIP64 extra field (0x0001) in extra[0..n): the 0xFFFFFFFF fields of
 * e, in order, are read from it. */
static int zip64_extra(const npy_state *s, const unsigned char *x, size_t n,
                       zip_entry *e) {
  while (n >= 4) {
    unsigned id = sl__get16(x), len = sl__get16(x + 2);
    if (len > n - 4) break;
    if (id == 1) {
      const unsigned char *v = x + 4, *end = x + 4 + len;
      uint64_t *fields[] = {&e->usize, &e->csize, &e->local};
      for (int i = 0; i < 3; i++) {
        if (*fields[i] != 0xFFFFFFFFu) continue;
        SL_RETURN_ERROR_IF(end - v < 8, SL_ECORRUPT,
                           "npy: %s: a short ZIP64 extra field", s->path);
        *fields[i] = sl__get64(v);
        v += 8;
      }
      return SL_OK;
    }
    x += 4 + len;
    n -= 4 + len;
  }
  return SL_OK;
}

/* Inflates a raw deflate stream into a new buffer of `usize` bytes. */
static int inflate_member(const npy_state *s, const zip_entry *e,
                          const unsigned char *src, sl_buffer **out) {
  /* Deflate expands at most 1032:1: a larger size is a damaged directory,
   * not an allocation to attempt. */
  SL_RETURN_ERROR_IF(
      e->usize > SIZE_MAX / 2 || e->usize / 1032 > e->csize + 1, SL_ECORRUPT,
      "npy: %s: member '%.*s' claims %llu bytes from %llu "
      "compressed (more than deflate can expand to)",
      s->path, (int)e->name_len, (const char *)e->name,
      (unsigned long long)e->usize, (unsigned long long)e->csize);
  sl_buffer *b = sl_buffer_new((size_t)e->usize);
  SL_RETURN_ERROR_IF(!b, SL_ENOMEM, "npy: %s: cannot allocate %llu bytes",
                     s->path, (unsigned long long)e->usize);
  z_stream z;
  memset(&z, 0, sizeof z);
  int zrc = inflateInit2(&z, -15);
  if (zrc != Z_OK) {
    sl_buffer_release(b);
    return sl_set_error(SL_ENOMEM, "npy: %s: inflateInit failed", s->path);
  }
  const unsigned char *p = src;
  uint64_t left_in = e->csize, left_out = e->usize;
  unsigned char *dst = sl_buffer_data(b);
  do {
    uInt in = left_in > UINT32_MAX ? UINT32_MAX : (uInt)left_in;
    uInt outn = left_out > UINT32_MAX ? UINT32_MAX : (uInt)left_out;
    z.next_in = (Bytef *)(uintptr_t)p;
    z.avail_in = in;
    z.next_out = dst;
    z.avail_out = outn;
    zrc = inflate(&z, Z_FINISH);
    p += in - z.avail_in;
    left_in -= in - z.avail_in;
    dst += outn - z.avail_out;
    left_out -= outn - z.avail_out;
  } while (zrc == Z_BUF_ERROR && (z.avail_out == 0 || z.avail_in == 0) &&
           left_in && left_out);
  inflateEnd(&z);
  int rc = SL_OK;
  if (zrc != Z_STREAM_END || left_out != 0)
    rc = sl_set_error(SL_ECORRUPT, "npy: %s: member '%.*s': bad deflate data",
                      s->path, (int)e->name_len, (const char *)e->name);
  else if ((uint32_t)crc32_z(0, sl_buffer_data(b), (size_t)e->usize) != e->crc)
    rc = sl_set_error(SL_ECORRUPT,
                      "npy: %s: member '%.*s': CRC-32 mismatch (damaged "
                      "archive)",
                      s->path, (int)e->name_len, (const char *)e->name);
  if (rc < 0) {
    sl_buffer_release(b);
    return rc;
  }
  *out = b;
  return SL_OK;
}

/* Where entry e's member lies in the file of `size` bytes (of which the
 * central directory starts at `cd`): its local header at e->local, its
 * data at e->data, e->csize bytes, before the central directory. */
static int member_span(const npy_state *s, const unsigned char *base,
                       size_t size, uint64_t cd, zip_entry *e) {
  char what[512];
  snprintf(what, sizeof what, "%s, member %.*s", s->path, (int)e->name_len,
           (const char *)e->name);
  SL_RETURN_ERROR_IF(e->flags & 1, SL_EUNSUPPORTED,
                     "npy: %s: encrypted members are refused", what);
  SL_RETURN_ERROR_IF(e->local > size || size - e->local < 30 ||
                         sl__get32(base + e->local) != 0x04034b50,
                     SL_ECORRUPT, "npy: %s: bad local header", what);
  const unsigned char *lh = base + e->local;
  e->data = e->local + 30 + sl__get16(lh + 26) + sl__get16(lh + 28);
  SL_RETURN_ERROR_IF(e->data > size || e->csize > size - e->data, SL_ECORRUPT,
                     "npy: %s: the member runs past the end of the file", what);
  SL_RETURN_ERROR_IF(e->data + e->csize > cd, SL_ECORRUPT,
                     "npy: %s: the member runs into the central directory "
                     "(at offset %llu)",
                     what, (unsigned long long)cd);
  return SL_OK;
}

/* Whether entries a and b claim bytes in common (local header to data's
 * end): two directory entries for one member would have it inflated once
 * per entry, a small archive becoming gigabytes. */
static bool overlap(const zip_entry *a, const zip_entry *b) {
  return a->local < b->data + b->csize && b->local < a->data + a->csize;
}

/* One member: its bytes, as a buffer whose element data is aligned. */
static int load_member(npy_state *s, sl_buffer *file, const zip_entry *e) {
  const unsigned char *base = sl_buffer_data(file);
  char what[512], name[256];
  snprintf(name, sizeof name, "%.*s", (int)e->name_len, (const char *)e->name);
  snprintf(what, sizeof what, "%s, member %s", s->path, name);
  uint64_t data = e->data;
  sl_buffer *mb = NULL;
  uint64_t off = 0; /* of the member's bytes in mb */
  if (e->method == 0) {
    SL_RETURN_ERROR_IF(e->csize != e->usize, SL_ECORRUPT,
                       "npy: %s: stored member with two sizes", what);
    /* The CRC-32 covers stored bytes as it does inflated ones. */
    SL_RETURN_ERROR_IF(
        (uint32_t)crc32_z(0, base + data, (size_t)e->csize) != e->crc,
        SL_ECORRUPT, "npy: %s: CRC-32 mismatch (damaged archive)", what);
    mb = sl_buffer_retain(file);
    off = data;
  } else if (e->method == 8) {
    SL_FORWARD_IF_ERROR(inflate_member(s, e, base + data, &mb));
  } else {
    return sl_set_error(SL_EUNSUPPORTED,
                        "npy: %s: compression method %u is not read (stored "
                        "and deflate are)",
                        what, e->method);
  }
  sl__npy h;
  int rc = sl__npy_parse(what, (const unsigned char *)sl_buffer_data(mb) + off,
                         (size_t)e->usize, &h);
  if (rc == SL_OK && ((uintptr_t)sl_buffer_data(mb) + off + h.data_off) %
                             sl_dtype_size(h.dtype) !=
                         0) {
    /* A stored member at an odd offset: copy its elements, aligned. */
    sl_buffer *c = sl_buffer_new((size_t)h.nbytes);
    if (!c) {
      rc = sl_set_error(SL_ENOMEM, "npy: %s: out of memory", what);
    } else {
      memcpy(sl_buffer_data(c),
             (const unsigned char *)sl_buffer_data(mb) + off + h.data_off,
             (size_t)h.nbytes);
      sl_buffer_release(mb);
      mb = c;
      off = 0;
      h.data_off = 0;
    }
  }
  if (rc == SL_OK) {
    h.data_off += off;
    char stem[256];
    size_t nl = strlen(name);
    if (nl > 4 && strcmp(name + nl - 4, ".npy") == 0) name[nl - 4] = 0;
    snprintf(stem, sizeof stem, "%s", name);
    rc = add_field(s, stem, &h, mb, what);
  }
  sl_buffer_release(mb);
  return rc;
}

static int load_npz(npy_state *s, sl_buffer *file) {
  const unsigned char *p = sl_buffer_data(file);
  size_t n = sl_buffer_size(file);
  /* The end of central directory record: the last 22 + comment bytes. */
  size_t eocd = SIZE_MAX;
  for (size_t i = n >= 22 ? n - 22 : 0,
              stop = n > 22 + 65535 ? n - 22 - 65535 : 0;
       n >= 22; i--) {
    if (sl__get32(p + i) == 0x06054b50) {
      eocd = i;
      break;
    }
    if (i == stop) break;
  }
  SL_RETURN_ERROR_IF(eocd == SIZE_MAX, SL_ECORRUPT,
                     "npy: %s: not a zip archive (no end of central "
                     "directory record)",
                     s->path);
  uint64_t entries = sl__get16(p + eocd + 10), cd = sl__get32(p + eocd + 16);
  if ((entries == 0xFFFF || cd == 0xFFFFFFFFu) && eocd >= 20 &&
      sl__get32(p + eocd - 20) == 0x07064b50) {
    uint64_t z64 = sl__get64(p + eocd - 20 + 8);
    SL_RETURN_ERROR_IF(z64 > n || n - z64 < 56 ||
                           sl__get32(p + z64) != 0x06064b50,
                       SL_ECORRUPT, "npy: %s: bad ZIP64 end record", s->path);
    entries = sl__get64(p + z64 + 32);
    cd = sl__get64(p + z64 + 48);
  }
  SL_RETURN_ERROR_IF(entries == 0, SL_EINVAL, "npy: %s: an empty archive",
                     s->path);
  SL_RETURN_ERROR_IF(entries > MAX_FIELDS, SL_EUNSUPPORTED,
                     "npy: %s: %llu members, more than %d arrays", s->path,
                     (unsigned long long)entries, MAX_FIELDS);
  /* The whole directory first, each member's span checked against the
   * others', so that nothing is inflated for an archive that will be
   * refused. */
  zip_entry es[MAX_FIELDS];
  uint64_t at = cd;
  for (uint64_t i = 0; i < entries; i++) {
    SL_RETURN_ERROR_IF(at > n || n - at < 46 || sl__get32(p + at) != 0x02014b50,
                       SL_ECORRUPT, "npy: %s: bad central directory entry %llu",
                       s->path, (unsigned long long)i);
    const unsigned char *c = p + at;
    zip_entry e = {c + 46,
                   sl__get16(c + 28),
                   sl__get16(c + 10),
                   sl__get16(c + 8),
                   sl__get32(c + 16),
                   sl__get32(c + 20),
                   sl__get32(c + 24),
                   sl__get32(c + 42),
                   0};
    size_t xl = sl__get16(c + 30), cl = sl__get16(c + 32);
    SL_RETURN_ERROR_IF(n - at - 46 < e.name_len + xl + cl, SL_ECORRUPT,
                       "npy: %s: central directory entry %llu is cut short",
                       s->path, (unsigned long long)i);
    SL_FORWARD_IF_ERROR(zip64_extra(s, c + 46 + e.name_len, xl, &e));
    SL_FORWARD_IF_ERROR(member_span(s, p, n, cd, &e));
    for (uint64_t j = 0; j < i; j++)
      SL_RETURN_ERROR_IF(overlap(&es[j], &e), SL_ECORRUPT,
                         "npy: %s: member %.*s overlaps member %.*s (two "
                         "directory entries claim the same bytes)",
                         s->path, (int)e.name_len, (const char *)e.name,
                         (int)es[j].name_len, (const char *)es[j].name);
    es[i] = e;
    at += 46 + e.name_len + xl + cl;
  }
  for (uint64_t i = 0; i < entries; i++)
    SL_FORWARD_IF_ERROR(load_member(s, file, &es[i]));
  return SL_OK;
}

static int make_schema(npy_state *s) {
  sl_schema *sc = s->schema = sl_schema_new();
  SL_RETURN_ERROR_IF(!sc, SL_ENOMEM, "npy: cannot allocate a schema");
  int rc = SL_OK;
  for (int i = 0; i < s->nf && rc >= 0; i++)
    rc = sl_schema_add(sc, s->f[i].name, s->f[i].h.dtype, s->f[i].h.rank - 1,
                       s->f[i].h.shape + 1);
  if (rc >= 0) rc = sl_schema_set_meta(sc, "source", "npy");
  if (rc >= 0) rc = sl_schema_set_meta(sc, "file", sl__basename(s->path));
  return rc < 0 ? sl_wrap_error(rc, "npy: %s: building the schema", s->path)
                : SL_OK;
}

/* A .npy URL: the header from the URL source, rows read later (see the
 * banner).  *npz is set, and nothing kept, when the object is a zip: the
 * caller fetches it whole. */
static int open_url(npy_state *s, const char *field, bool *npz) {
  *npz = false;
  SL_FORWARD_IF_ERROR(sl__source_open_url("npy", s->path, &s->src));
  s->id = s->src->id;
  uint64_t size = s->src->size;
  /* The magic, version and header length, then the header itself. */
  size_t n = (size_t)(size < 12 ? size : 12);
  unsigned char *p = sl__malloc(12);
  int rc = p ? s->src->read_at(s->src, 0, p, n)
             : sl_set_error(SL_ENOMEM, "npy: %s: out of memory", s->path);
  if (rc == SL_OK && n >= 4 && sl__get32(p) == 0x04034b50) {
    *npz = true;
  } else if (rc == SL_OK && n >= 10 && memcmp(p, "\x93NUMPY", 6) == 0) {
    uint64_t want = p[6] == 1 ? 10 + (uint64_t)sl__get16(p + 8)
                              : (n >= 12 ? 12 + (uint64_t)sl__get32(p + 8) : n);
    /* A header past the object's end or absurdly long is left for the
     * parse below to call cut short. */
    unsigned char *q = want > n && want <= size && want <= ((uint64_t)1 << 26)
                           ? sl__realloc(p, (size_t)want)
                           : NULL;
    if (q) {
      p = q;
      n = (size_t)want;
      rc = s->src->read_at(s->src, 0, p, n);
    }
  }
  sl__npy h;
  if (rc == SL_OK && !*npz) rc = sl__npy_parse_head(s->path, p, n, size, &h);
  sl__free(p);
  if (rc == SL_OK && !*npz) {
    s->file_size = size;
    char stem[256];
    sl__path_stem(s->path, stem, sizeof stem);
    rc = add_field(s, field && field[0] ? field : stem, &h, NULL, s->path);
  }
  if (rc < 0 || *npz) {
    sl__source_close(s->src);
    s->src = NULL;
  }
  return rc;
}

/* The bytes of the fields' buffers that are the reader's own memory: an
 * inflated or realigned member's; `file`'s (once) when it is a URL's
 * object fetched whole rather than a mapping. */
static uint64_t own_bytes(const npy_state *s, sl_buffer *file, bool url) {
  uint64_t n = 0;
  bool whole = false;
  for (int i = 0; i < s->nf; i++) {
    if (s->f[i].buf && s->f[i].buf != file) n += sl_buffer_size(s->f[i].buf);
    whole |= s->f[i].buf == file;
  }
  return n + (whole && url ? sl_buffer_size(file) : 0);
}

static bool is_zip(sl_buffer *b) {
  return sl_buffer_size(b) >= 4 &&
         sl__get32(sl_buffer_data(b)) == 0x04034b50; /* "PK\3\4" */
}

int sl_npy_reader(const char *path, const sl_npy_opts *opts, sl_reader **out) {
  SL_SOURCE_ARGS("npy", path, out);
  sl_npy_opts o = SL_NPY_OPTS_INIT;
  if (opts)
    SL_FORWARD_IF_ERROR(sl__opts_copy("sl_npy_opts", &o, sizeof o, opts));
  npy_state *s = sl__calloc(1, sizeof *s);
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "npy: cannot allocate a reader");
  sl__resident_init(&s->held);
  s->path = sl__strdup(path);
  s->ix = (sl__indexed){npy_get, npy_put,   npy_check, "npy",
                        s->path, "samples", 0,         0};
  sl_buffer *file = NULL;
  int rc = s->path ? SL_OK : sl_set_error(SL_ENOMEM, "npy: out of memory");
  bool npz = true; /* fetched or mapped whole */
  if (rc == SL_OK && sl__is_url(path)) rc = open_url(s, o.field, &npz);
  if (rc == SL_OK && npz) rc = sl__map_file("npy", path, &file, &s->id);
  if (rc == SL_OK && npz) {
    s->file_size = sl_buffer_size(file);
    if (is_zip(file)) {
      rc = load_npz(s, file);
      if (rc == SL_OK && o.field)
        rc = sl_set_error(SL_EINVAL,
                          "npy: %s: option field names the field of a .npy "
                          "file; an .npz's fields are its members' names",
                          path);
    } else {
      sl__npy h;
      char stem[256];
      sl__path_stem(path, stem, sizeof stem);
      rc = sl__npy_parse(path, sl_buffer_data(file), sl_buffer_size(file), &h);
      if (rc == SL_OK)
        rc = add_field(s, o.field && o.field[0] ? o.field : stem, &h, file,
                       path);
    }
  }
  if (rc == SL_OK) s->own = own_bytes(s, file, sl__is_url(path));
  sl_buffer_release(file);
  if (rc == SL_OK) rc = make_schema(s);
  if (rc < 0) {
    npy_destroy(s);
    return rc;
  }
  return sl__stage_new(&npy_ops, s, s->schema, NULL, 0, NULL, out);
}
