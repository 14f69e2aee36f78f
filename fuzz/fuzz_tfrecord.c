/*
 * fuzz_tfrecord.c - libFuzzer target: TFRecord framing (both masked
 * CRC32Cs) and tf.train.Example decoding through protobuf-c.
 *
 * Input: one mode byte, then the records' payloads.  The framing's CRCs
 * would stop almost every mutation, so the target frames the input itself:
 * bit 0 clear: the rest is split at 0xFF bytes into Example payloads, each
 * framed with correct lengths and CRCs (the decoder is fuzzed); set: the
 * rest is the file as is (the framing is fuzzed).  Bit 1: gzip the file;
 * bit 2 (with bit 1): as two gzip members, cut in the middle.  Bit 3: the
 * rest is a GZIP file as is (the inflating stream, gzip_stream.c, is
 * fuzzed).
 *
 * Oracles: fuzz_formats.h, read with the features "a:bytes,b:i64[-1],
 * c:f32[-1]" (raw records when built without protobuf-c); and the three
 * record walkers agree: over the bytes in memory (sl__tfrecord_next, a
 * mapped file), through a byte source (sl__tfrecord_read, a URL) and
 * through a gzip stream of that source (sl__tfrecord_read_gz, a GZIP file
 * local or remote) give the same records and end the same way.
 */
#include "fuzz_formats.h"
#include "formats/tfrecord.h"

#include <zlib.h>

static int open_tf(const char *path, void *ud, sl_reader **out) {
  return sl_tfrecord_reader(path, ud, out);
}

/* Records walked at most. */
#define WALK_MAX 4096

/* Appends p[0..n) to z (capacity *cap, used *zn) as one gzip member. */
static void gz_member(unsigned char **z, size_t *zn, size_t *cap,
                      const unsigned char *p, size_t n) {
  size_t need = *zn + compressBound((uLong)n) + 64;
  if (need > *cap) {
    *z = realloc(*z, need);
    FUZZ_CHECK(*z != NULL, "out of memory");
    *cap = need;
  }
  z_stream s;
  memset(&s, 0, sizeof s);
  FUZZ_CHECK(deflateInit2(&s, 1, Z_DEFLATED, 9 + 16, 1, Z_DEFAULT_STRATEGY) ==
                 Z_OK,
             "deflateInit2");
  s.next_in = (Bytef *)(uintptr_t)p;
  s.avail_in = (uInt)n;
  s.next_out = *z + *zn;
  s.avail_out = (uInt)(*cap - *zn);
  FUZZ_CHECK(deflate(&s, Z_FINISH) == Z_STREAM_END, "deflate");
  *zn += s.total_out;
  deflateEnd(&s);
}

/* One step of a walker: SL_OK with the record's bytes in *d[0..*len), its
 * buffer (if any) in *own. */
typedef struct walker {
  int kind; /* 0: memory, 1: source, 2: gzip stream */
  const unsigned char *p;
  size_t n;
  sl__source *src;
  sl__gz *gz;
  uint64_t off;
} walker;

static int walk_next(walker *w, uint64_t rec, const unsigned char **d,
                     uint64_t *len, sl_buffer **own) {
  *own = NULL;
  if (w->kind == 0)
    return sl__tfrecord_next(w->p, w->n, &w->off, d, len, "fuzz", rec);
  int rc = w->kind == 1
               ? sl__tfrecord_read(w->src, &w->off, own, len, false, "fuzz",
                                   rec)
               : sl__tfrecord_read_gz(w->gz, &w->off, own, len, false, "fuzz",
                                      rec);
  *d = *own ? sl_buffer_data(*own) : NULL;
  return rc;
}

/* Walks a and b side by side: the same records, the same end. */
static void walk_same(walker *a, walker *b, const char *what) {
  for (uint64_t rec = 0; rec < WALK_MAX; rec++) {
    const unsigned char *da, *db;
    uint64_t la = 0, lb = 0;
    sl_buffer *oa, *ob;
    int ra = walk_next(a, rec, &da, &la, &oa);
    int rb = walk_next(b, rec, &db, &lb, &ob);
    if (ra < 0 && ra != SL_EOF)
      fuzz_expect_error(ra, what, SL_ECORRUPT, SL_EIO, 0);
    if (rb < 0 && rb != SL_EOF)
      fuzz_expect_error(rb, what, SL_ECORRUPT, SL_EIO, 0);
    FUZZ_CHECK(ra == rb, "%s: record %llu: %s one way, %s the other", what,
               (unsigned long long)rec, sl_err_name(ra), sl_err_name(rb));
    if (ra == SL_OK) {
      FUZZ_CHECK(la == lb && (la == 0 || memcmp(da, db, (size_t)la) == 0),
                 "%s: record %llu differs (%llu and %llu bytes)", what,
                 (unsigned long long)rec, (unsigned long long)la,
                 (unsigned long long)lb);
      FUZZ_CHECK(a->off == b->off, "%s: record %llu ends at %llu and %llu",
                 what, (unsigned long long)rec, (unsigned long long)a->off,
                 (unsigned long long)b->off);
    }
    sl_buffer_release(oa);
    sl_buffer_release(ob);
    if (ra != SL_OK) return;
  }
}

/* The walkers over the plain bytes p[0..n), through a source of them and
 * through a gzip stream of their gzip form z[0..zn). */
static void walk_all(const unsigned char *p, size_t n, const unsigned char *z,
                     size_t zn) {
  walker mem = {0, p, n, NULL, NULL, 0};
  walker src = {1, NULL, 0, fuzz_mem_source_new(p, n, "fuzz-src"), NULL, 0};
  walk_same(&mem, &src, "memory vs source");
  sl__source_close(src.src);
  walker gz = {2, NULL, 0, NULL, NULL, 0};
  FUZZ_CHECK(sl__gz_open(fuzz_mem_source_new(z, zn, "fuzz-gz"), &gz.gz) ==
                 SL_OK,
             "sl__gz_open");
  mem.off = 0;
  walk_same(&mem, &gz, "memory vs gzip stream");
  /* Rewound, the stream gives the same again. */
  sl__gz_rewind(gz.gz);
  gz.off = mem.off = 0;
  walk_same(&mem, &gz, "memory vs rewound gzip stream");
  sl__gz_close(gz.gz);
}

/* Bit 3: data[0..size) as a GZIP file.  Inflated in one piece, a
 * reference; the stream must give its bytes or fail. */
static void fuzz_gzip_bytes(const uint8_t *data, size_t size) {
  sl__gz *g;
  FUZZ_CHECK(sl__gz_open(fuzz_mem_source_new(data, size, "fuzz-gz"), &g) ==
                 SL_OK,
             "sl__gz_open");
  unsigned char buf[4096];
  size_t total = 0, got;
  int rc;
  /* Deflate expands at most 1032:1; past that the stream is wrong. */
  while ((rc = sl__gz_read(g, buf, sizeof buf, &got)) == SL_OK &&
         got == sizeof buf)
    FUZZ_CHECK((total += got) <= 1032 * size + 4096,
               "gzip: more bytes than deflate can expand to");
  if (rc < 0) fuzz_expect_error(rc, "gzip stream", SL_ECORRUPT, 0);
  sl__gz_close(g);
  sl_tfrecord_opts o = SL_TFRECORD_OPTS_INIT;
  o.compression = SL_TFRECORD_GZIP;
  fuzz_two_passes("tfrecord gzip", open_tf, fuzz_file(0, data, size), &o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned mode = data[0];
  data++, size--;
  if (mode & 8) {
    fuzz_gzip_bytes(data, size);
    return 0;
  }
  /* Each input byte may end a record: 16 bytes of framing per byte. */
  unsigned char *file = malloc(17 * size + 64);
  FUZZ_CHECK(file != NULL, "out of memory");
  size_t n = 0;
  if (mode & 1) {
    memcpy(file, data, size);
    n = size;
  } else {
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
      if (i < size && data[i] != 0xFF) continue;
      size_t l = i - start;
      sl__put64(file + n, l);
      sl__put32(file + n + 8, sl__tfrecord_mask(sl__crc32c(0, file + n, 8)));
      memcpy(file + n + 12, data + start, l);
      sl__put32(file + n + 12 + l,
                sl__tfrecord_mask(sl__crc32c(0, data + start, l)));
      n += 16 + l;
      start = i + 1;
    }
  }
  const char *path;
  unsigned char *z = NULL;
  size_t zn = 0, zcap = 0;
  /* The gzip form is always made, for the walkers' comparison; the file
   * the reader opens is it only with bit 1. */
  size_t half = mode & 4 ? n / 2 : n;
  gz_member(&z, &zn, &zcap, file, half);
  if (half < n) gz_member(&z, &zn, &zcap, file + half, n - half);
  path = mode & 2 ? fuzz_file(0, z, zn) : fuzz_file(0, file, n);
  walk_all(file, n, z, zn);
  free(file);
  free(z);
  sl_tfrecord_opts o = SL_TFRECORD_OPTS_INIT;
  if (sl__tf_can_decode()) o.features = "a:bytes,b:i64[-1],c:f32[-1]";
  fuzz_two_passes("tfrecord", open_tf, path, &o);
  return 0;
}
