/*
 * make_seeds.c - writes the seed corpus of every fuzz target:
 *
 *   fuzz_seeds OUT_DIR GOLDEN_SLR
 *
 * creates OUT_DIR/<target>/seed-* (fuzz/corpus/ is its committed output:
 * `build/fuzz/fuzz_seeds fuzz/corpus tests/data/golden-v1.slr`).  Seeds
 * are small on purpose (libFuzzer mutates small inputs fastest): the
 * golden file, a handful of tiny SLR files covering every dtype, variable
 * and fixed fields, ranks up to 8, metadata, several chunks and no records
 * at all; idx files of every element type, plain and gzip; text files for
 * the plain reader and both example plugins.  Each seed is written in the
 * input layout its target documents (fuzz_<target>.c).  Deterministic: the
 * same files on every run.
 */
#include "core/internal.h"
#include "core/bytes.h"
#include "formats/slr_format.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

static void die(const char *what) {
  fprintf(stderr, "fuzz_seeds: %s: %s (last error: %s)\n", what,
          errno ? strerror(errno) : "failed", sl_last_error());
  exit(1);
}

static const char *g_out;

static void put(const char *target, const char *name, unsigned prefix,
                const void *data, size_t n) {
  char dir[1024], path[1200];
  snprintf(dir, sizeof dir, "%s/%s", g_out, target);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) die(dir);
  snprintf(path, sizeof path, "%s/seed-%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) die(path);
  if (prefix <= 0xff) fputc((int)prefix, f);
  if (n && fwrite(data, 1, n, f) != n) die(path);
  if (fclose(f) != 0) die(path);
}

#define NO_PREFIX 0x100u

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) die(path);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
  if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) die(path);
  fclose(f);
  *n = (size_t)len;
  return b;
}

/* --- SLR -------------------------------------------------------------------
 */

typedef struct slr_spec {
  const char *name;
  int nfields;
  struct {
    const char *name;
    sl_dtype dtype;
    int rank;
    int64_t shape[SL_MAX_RANK];
  } f[4];
  int records;
  uint32_t per_chunk;
  const char *meta;
} slr_spec;

static const slr_spec slr_specs[] = {
    {"scalar-i64", 1, {{"i", SL_I64, 0, {0}}}, 5, 2, NULL},
    {"empty", 1, {{"x", SL_F32, 1, {3}}}, 0, 0, "origin"},
    {"ragged",
     3,
     {{"tokens", SL_I32, 1, {SL_DIM_VAR}},
      {"text", SL_BYTES, 1, {SL_DIM_VAR}},
      {"label", SL_U8, 0, {0}}},
     7,
     3,
     "vocab"},
    {"image",
     2,
     {{"image", SL_U8, 3, {2, 3, 2}}, {"label", SL_I64, 0, {0}}},
     4,
     4,
     NULL},
    {"mixed-dtypes",
     4,
     {{"b", SL_BOOL, 1, {2}},
      {"h", SL_F16, 2, {SL_DIM_VAR, 2}},
      {"d", SL_F64, 0, {0}},
      {"w", SL_U16, 1, {SL_DIM_VAR}}},
     6,
     4,
     "a"},
    {"rank8",
     1,
     {{"t", SL_I8, 8, {1, 2, 1, SL_DIM_VAR, 1, 1, 2, 1}}},
     3,
     1,
     NULL},
};

/* Fills field i of record `rec` with bytes derived from (rec, i). */
static void fill_record(sl_sample *s, const slr_spec *sp, int rec) {
  for (int i = 0; i < sp->nfields; i++) {
    int64_t shape[SL_MAX_RANK];
    for (int d = 0; d < sp->f[i].rank; d++)
      shape[d] =
          sp->f[i].shape[d] == SL_DIM_VAR ? (rec + i) % 4 : sp->f[i].shape[d];
    unsigned char *data;
    if (sl_sample_alloc(s, i, sp->f[i].rank, shape, (void **)&data) < 0)
      die("sample");
    const sl_tensor *t = sl_sample_at_const(s, i);
    for (size_t k = 0; k < t->nbytes; k++)
      data[k] = sp->f[i].dtype == SL_BOOL ? (unsigned char)((rec + k) & 1)
                                          : (unsigned char)(rec * 31 + k * 7);
  }
}

static unsigned char *write_slr_framed(const slr_spec *sp,
                                       const sl_slr_frame_opts *fo,
                                       size_t *n) {
  sl_schema *schema = sl_schema_new();
  for (int i = 0; i < sp->nfields; i++)
    if (sl_schema_add(schema, sp->f[i].name, sp->f[i].dtype, sp->f[i].rank,
                      sp->f[i].shape) < 0)
      die("schema");
  if (sp->meta && sl_schema_set_meta(schema, sp->meta, "seed") < 0) die("meta");
  char path[1200];
  snprintf(path, sizeof path, "%s/.tmp-%s.slr", g_out, sp->name);
  sl_slr_writer_opts o = {1, 0, sp->per_chunk};
  sl_slr_writer *w;
  if (sl_slr_writer_open(path, schema, &o, &w) < 0) die("writer");
  if (fo && sl_slr_writer_set_frames(w, fo) < 0) die("frames");
  for (int r = 0; r < sp->records; r++) {
    sl_sample *s = sl_sample_new(schema);
    fill_record(s, sp, r);
    if (sl_slr_writer_append(w, s) < 0) die("append");
    sl_sample_release(s);
  }
  if (sl_slr_writer_close(w) < 0) die("close");
  sl_schema_release(schema);
  unsigned char *b = slurp(path, n);
  unlink(path);
  return b;
}

static unsigned char *write_slr(const slr_spec *sp, size_t *n) {
  return write_slr_framed(sp, NULL, n);
}

/* Framed files (SLR 1.1: frame tables, a dictionary; codec 2, and the
 * compact codec 3 of feature bit 0x8) for fuzz_slr only
 * (fuzz_slr_blocks builds whole chunks). */
static void slr_framed_seeds(void) {
  static const char dict[] = "tokens text label seed vocab";
  const sl_slr_frame_opts fo[] = {
      {.frame_records = 2, .dict = SL_SLR_DICT_GIVEN, .dict_data = dict,
       .dict_size = sizeof dict - 1},
      {.frame_records = 3},
      {.dict = SL_SLR_DICT_AUTO},
      {.frame_records = 2, .dict = SL_SLR_DICT_GIVEN, .dict_data = dict,
       .dict_size = sizeof dict - 1, .compact = 1},
      {.frame_records = 3, .compact = 1}};
  const int spec[] = {2, 3, 0, 2, 3}; /* ragged, image, scalar-i64 */
  const char *const kind[] = {"framed", "framed", "framed", "compact",
                              "compact"}; /* codec 2; codec 3 */
  for (int i = 0; i < 5; i++) {
    size_t n;
    unsigned char *b = write_slr_framed(&slr_specs[spec[i]], &fo[i], &n);
    static const unsigned modes[] = {0x00, 0x01, 0x03};
    for (size_t m = 0; m < 3; m++) {
      char nm[128];
      snprintf(nm, sizeof nm, "%s-%s-m%02x", kind[i],
               slr_specs[spec[i]].name, modes[m]);
      put("slr", nm, modes[m], b, n);
    }
    free(b);
  }
}

/* The fuzz_slr_blocks layout of a valid file `b` (see fuzz_slr_blocks.c). */
static unsigned char *to_blocks(const unsigned char *b, size_t n,
                                unsigned flags, size_t *out_n) {
  const unsigned char *foot = b + n - SLR_FOOTER_SIZE;
  uint64_t so = sl__get64(foot), ss = sl__get64(foot + 8),
           io = sl__get64(foot + 16), is = sl__get64(foot + 24),
           nrec = sl__get64(foot + 32), nch = sl__get64(foot + 40);
  size_t cap = 64 + n * 8 + (1 << 16);
  unsigned char *o = calloc(1, cap), *p = o;
  *p++ = (unsigned char)flags;
  sl__put16(p, (uint16_t)(ss - 12));
  p += 2;
  memcpy(p, b + so + 8, ss - 12);
  p += ss - 12;
  *p++ = (unsigned char)nch;
  for (uint64_t c = 0; c < nch; c++) {
    uint64_t off = sl__get64(b + io + 16 + 24 * c);
    const unsigned char *h = b + off;
    uint64_t stored = sl__get64(h + 8), raw = sl__get64(h + 16);
    if (raw > 0xffff || (size_t)(p - o) + 6 + raw > cap) die("chunk too big");
    sl__put32(p, sl__get32(h + 4));
    sl__put16(p + 4, (uint16_t)raw);
    p += 6;
    size_t got = ZSTD_decompress(p, raw, h + SLR_CHUNK_HEADER_SIZE, stored);
    if (ZSTD_isError(got) || got != raw) die("zstd");
    p += raw;
  }
  if (flags & 4) {
    sl__put64(p, nrec);
    p += 8;
  }
  if (flags & 1) {
    memcpy(p, b + io + 8, is - 12);
    p += is - 12;
  }
  *out_n = (size_t)(p - o);
  return o;
}

static void slr_seeds(const char *golden) {
  for (size_t i = 0; i <= sizeof slr_specs / sizeof slr_specs[0]; i++) {
    size_t n;
    unsigned char *b;
    const char *name;
    if (i == 0) {
      b = slurp(golden, &n);
      name = "golden-v1";
    } else {
      b = write_slr(&slr_specs[i - 1], &n);
      name = slr_specs[i - 1].name;
    }
    char nm[128];
    /* fuzz_slr: raw (mode 0), CRCs repaired (1), skip_chunk (3) */
    static const unsigned modes[] = {0x00, 0x01, 0x03};
    for (size_t m = 0; m < 3; m++) {
      snprintf(nm, sizeof nm, "%s-m%02x", name, modes[m]);
      put("slr", nm, modes[m], b, n);
    }
    /* fuzz_slr_blocks: computed index (0), index from the input (1),
     * skip_chunk with the footer's count (6) */
    static const unsigned flags[] = {0x00, 0x01, 0x06};
    for (size_t m = 0; m < 3; m++) {
      size_t bn;
      unsigned char *bl = to_blocks(b, n, flags[m], &bn);
      snprintf(nm, sizeof nm, "%s-f%02x", name, flags[m]);
      put("slr_blocks", nm, NO_PREFIX, bl, bn);
      free(bl);
    }
    free(b);
  }
}

/* --- idx --------------------------------------------------------------------
 */

static size_t idx_file(unsigned char *b, unsigned type, int rank,
                       const uint32_t *dims, size_t esize) {
  b[0] = b[1] = 0;
  b[2] = (unsigned char)type;
  b[3] = (unsigned char)rank;
  size_t n = 4, count = 1;
  for (int d = 0; d < rank; d++) {
    for (int k = 0; k < 4; k++)
      b[n++] = (unsigned char)(dims[d] >> (24 - 8 * k));
    count *= dims[d];
  }
  for (size_t i = 0; i < count * esize; i++)
    b[n++] = (unsigned char)(i * 13 + type);
  return n;
}

static unsigned char *gz(const unsigned char *data, size_t n, size_t *out_n) {
  uLongf cap = compressBound((uLong)n) + 64;
  unsigned char *b = malloc(cap);
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    die("deflate");
  z.next_in = (Bytef *)data;
  z.avail_in = (uInt)n;
  z.next_out = b;
  z.avail_out = (uInt)cap;
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) die("deflate");
  *out_n = cap - z.avail_out;
  deflateEnd(&z);
  return b;
}

static void idx_seeds(void) {
  static const struct {
    const char *name;
    unsigned type;
    size_t esize;
    int rank;
    uint32_t dims[3];
  } files[] = {
      {"u8-images", 0x08, 1, 3, {3, 4, 4}},  {"i8-vector", 0x09, 1, 1, {5}},
      {"i16-matrix", 0x0B, 2, 2, {2, 3}},    {"i32-labels", 0x0C, 4, 1, {3}},
      {"f32-images", 0x0D, 4, 3, {2, 2, 2}}, {"f64-matrix", 0x0E, 8, 2, {3, 1}},
      {"empty", 0x08, 1, 2, {0, 7}},
  };
  unsigned char a[512], l[64], pair[700];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    size_t n = idx_file(a, files[i].type, files[i].rank, files[i].dims,
                        files[i].esize);
    char nm[128];
    snprintf(nm, sizeof nm, "%s", files[i].name);
    put("idx", nm, 0x00, a, n);
    size_t zn;
    unsigned char *z = gz(a, n, &zn);
    snprintf(nm, sizeof nm, "%s-gz", files[i].name);
    put("idx", nm, 0x00, z, zn); /* gzip bytes as they lie on disk */
    free(z);
    /* Reader mode: these images with matching u8 labels. */
    if (files[i].rank >= 2) {
      uint32_t ld[1] = {files[i].dims[0]};
      size_t ln = idx_file(l, 0x08, 1, ld, 1);
      sl__put16(pair, (uint16_t)n);
      memcpy(pair + 2, a, n);
      memcpy(pair + 2 + n, l, ln);
      snprintf(nm, sizeof nm, "%s-reader", files[i].name);
      put("idx", nm, 0x01, pair, 2 + n + ln);
      snprintf(nm, sizeof nm, "%s-reader-gz", files[i].name);
      put("idx", nm, 0x03, pair, 2 + n + ln);
    }
  }
}

/* --- text -------------------------------------------------------------------
 */

static void text_seeds(void) {
  static const struct {
    const char *name;
    unsigned mode;
    const char *body; /* options line, '\n', then the file */
  } t[] = {
      {"lines", 0, "\nfirst line\nsecond\r\n\nlast without newline"},
      {"empty", 0, "\n"},
      {"csv", 1, "n=3\n1,2,3\n# comment\n\n 4.5 , -6e2,7\n8,9,10\n"},
      {"csv-crlf", 1, "columns=2\n1,2\r\n3,4\r\n"},
      {"csv-bad-count", 1, "n=2\n1,2\n1,2,3\n"},
      {"csv-bad-number", 1, "n=1\nabc\n"},
      {"csv-bad-options", 1, "n=0\n1\n"},
      {"tokens", 2, "vocab=100\nthe quick brown fox\n\n\tjumps  over\r\n"},
      {"tokens-default", 2, "\na b c d e f g h\n"},
      {"tokens-bad-options", 2, "vocab=1\nx\n"},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    put("text", t[i].name, t[i].mode, t[i].body, strlen(t[i].body));
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s OUT_DIR GOLDEN_SLR\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  if (mkdir(g_out, 0755) != 0 && errno != EEXIST) die(g_out);
  slr_seeds(argv[2]);
  slr_framed_seeds();
  idx_seeds();
  text_seeds();
  return 0;
}
