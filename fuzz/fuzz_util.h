/*
 * fuzz_util.h - what the fuzz targets share: a byte source over memory,
 * scratch files in memory (memfd) for the readers that take a path, the
 * checks every target applies to what a reader returns, and the CRC
 * repair that lets mutated SLR files get past their checksums.
 *
 * The oracles.  A target aborts (a finding) when sluice
 *  - returns an error code a reader does not document for bad input
 *    (fuzz_expect_error), or an error without a message;
 *  - returns a sample whose tensors do not fit the reader's schema, whose
 *    byte count disagrees with its shape, or whose bytes cannot all be read
 *    (ASan sees the read: fuzz_touch_sample);
 *  - disagrees with itself: a file that verifies must read completely, two
 *    ways of reading the same bytes (sequential and random access, read(2)
 *    and mmap) must give the same samples.
 * Everything else, sanitizer reports and leaks included, is libFuzzer's.
 *
 * Header-only (static functions): each target is one translation unit, and
 * the replay driver (replay_main.c) links with any of them.
 */
#ifndef SLUICE_FUZZ_UTIL_H
#define SLUICE_FUZZ_UTIL_H

#include "core/internal.h"
#include "core/bytes.h"
#include "core/crc32c.h"
#include "transport/source.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Every helper is static and not every target uses all of them. */
#define FUZZ_FN static __attribute__((unused))

/* The entry point libFuzzer (or replay_main.c) calls. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* --- failing ------------------------------------------------------------- */

__attribute__((noreturn, format(printf, 1, 2))) FUZZ_FN void
fuzz_fail(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "FUZZ FINDING: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n  last error: %s\n", sl_last_error());
  abort();
}

#define FUZZ_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) fuzz_fail(__VA_ARGS__);                                       \
  } while (0)

/* SLUICE_FUZZ_DEBUG=1 in the environment: targets say what happened to
 * each input on stderr (to check that seeds reach what they should). */
FUZZ_FN bool fuzz_debug(void) {
  static int on = -1;
  if (on < 0) on = getenv("SLUICE_FUZZ_DEBUG") != NULL;
  return on;
}

#define FUZZ_DEBUG(...)                                                        \
  do {                                                                         \
    if (fuzz_debug()) fprintf(stderr, __VA_ARGS__);                            \
  } while (0)

/* `rc` (< 0) is one of the codes given (a 0-terminated list) and came with
 * a message.  SL_ENOMEM is always accepted: a fuzzed size may legitimately
 * exceed what the machine has. */
FUZZ_FN void fuzz_expect_error(int rc, const char *what, ...) {
  FUZZ_CHECK(rc < 0 && rc != SL_EOF, "%s: expected an error, got %d", what, rc);
  FUZZ_CHECK(sl_last_error()[0] != '\0', "%s: %s without a message", what,
             sl_err_name(rc));
  if (rc == SL_ENOMEM) return;
  va_list ap;
  va_start(ap, what);
  for (int code = va_arg(ap, int); code != 0; code = va_arg(ap, int))
    if (code == rc) {
      va_end(ap);
      return;
    }
  va_end(ap);
  fuzz_fail("%s: unexpected %s", what, sl_err_name(rc));
}

/* --- samples -------------------------------------------------------------- */

/* Where hashes go that nothing compares, so that the reads which computed
 * them (and ASan's checks of those reads) are not optimised away. */
static volatile uint64_t fuzz_sink;

/* FNV-1a over bytes, for comparing samples cheaply. */
FUZZ_FN uint64_t fuzz_hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* Checks every field of `s` against `schema` and reads every byte of it;
 * returns a hash of dtypes, shapes, LoD and data. */
FUZZ_FN uint64_t fuzz_touch_sample(const sl_schema *schema,
                                   const sl_sample *s) {
  uint64_t h = 14695981039346656037ull;
  int nf = sl_schema_nfields(schema);
  FUZZ_CHECK(sl_sample_nfields(s) == nf, "sample has %d fields, schema %d",
             sl_sample_nfields(s), nf);
  for (int i = 0; i < nf; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    FUZZ_CHECK(sl_schema_check(schema, i, t) == SL_OK,
               "field %d does not fit the schema", i);
    int64_t numel = sl_tensor_numel(t);
    FUZZ_CHECK(numel >= 0 &&
                   (uint64_t)numel * sl_dtype_size(t->dtype) == t->nbytes,
               "field %d: %zu bytes for %lld elements", i, t->nbytes,
               (long long)numel);
    FUZZ_CHECK(t->nbytes == 0 || t->data != NULL, "field %d: no data", i);
    h = fuzz_hash(h, &t->dtype, sizeof t->dtype);
    h = fuzz_hash(h, &t->rank, sizeof t->rank);
    h = fuzz_hash(h, t->shape, sizeof t->shape[0] * (size_t)t->rank);
    if (t->nbytes) h = fuzz_hash(h, t->data, t->nbytes);
    if (t->lod) h = fuzz_hash(h, t->lod, sizeof *t->lod * (size_t)t->lod_len);
  }
  fuzz_sink = h;
  return h;
}

/* --- a byte source over memory -------------------------------------------- */

typedef struct fuzz_mem_source {
  sl__source base;
  const unsigned char *data; /* borrowed: outlives the source */
  char name[32];
} fuzz_mem_source;

FUZZ_FN int fuzz_mem_read_at(sl__source *s, uint64_t off, void *buf, size_t n) {
  const fuzz_mem_source *m = (const fuzz_mem_source *)s;
  if (off > s->size || n > s->size - off)
    return sl_set_error(SL_EIO,
                        "%s: read of %zu bytes at offset %llu is past "
                        "the end",
                        s->name, n, (unsigned long long)off);
  if (n) memcpy(buf, m->data + off, n);
  return SL_OK;
}

/* The bytes as the source's map (source.h's view): a memory source set
 * up with it reads like a mapped file (sl_slr_fetch then decodes frames
 * in place, under the SIGBUS guard). */
FUZZ_FN const unsigned char *fuzz_mem_view(sl__source *s) {
  return s->size ? ((const fuzz_mem_source *)s)->data : NULL;
}

FUZZ_FN void fuzz_mem_close(sl__source *s) {
  free(s);
}

/* A source reading `data` (borrowed); messages call it `name`. */
FUZZ_FN sl__source *fuzz_mem_source_new(const void *data, size_t n,
                                        const char *name) {
  fuzz_mem_source *m = calloc(1, sizeof *m);
  FUZZ_CHECK(m != NULL, "out of memory");
  m->data = data;
  snprintf(m->name, sizeof m->name, "%s", name);
  m->base.read_at = fuzz_mem_read_at;
  m->base.close = fuzz_mem_close;
  m->base.size = n;
  m->base.name = m->name;
  return &m->base;
}

/* --- scratch files in memory ------------------------------------------------
 * The idx and text readers take a path.  Each slot is one memfd created on
 * first use and rewritten for every input; its path is /proc/self/fd/N. */

#define FUZZ_FILE_SLOTS 2

FUZZ_FN const char *fuzz_file(int slot, const void *data, size_t n) {
  static int fds[FUZZ_FILE_SLOTS] = {-1, -1};
  static char paths[FUZZ_FILE_SLOTS][64];
  if (fds[slot] < 0) {
    fds[slot] = memfd_create("sluice-fuzz", MFD_CLOEXEC);
    FUZZ_CHECK(fds[slot] >= 0, "memfd_create failed");
    snprintf(paths[slot], sizeof paths[slot], "/proc/self/fd/%d", fds[slot]);
  }
  int fd = fds[slot];
  FUZZ_CHECK(ftruncate(fd, 0) == 0, "ftruncate failed");
  const char *p = data;
  for (size_t done = 0; done < n;) {
    ssize_t k = pwrite(fd, p + done, n - done, (off_t)done);
    FUZZ_CHECK(k > 0, "pwrite failed");
    done += (size_t)k;
  }
  return paths[slot];
}

/* --- SLR checksum repair
 * ------------------------------------------------------ Mutations almost
 * always break a CRC, and a reader that checks CRCs first would then never show
 * the fuzzer anything deeper.  This recomputes, where the structures can be
 * found, the chunk header and payload CRCs (and their copies in the index), the
 * schema and index block CRCs, and the header and footer CRCs; sizes and
 * offsets are left as the fuzzer made them. */
/* Repairs the frame CRCs of a framed chunk's payload p (stored bytes, as
 * far as its table and sizes reach); returns the table's CRC, the chunk
 * header's payload CRC (docs/FORMAT.md, "Framed chunks"). */
FUZZ_FN uint32_t fuzz_slr_fix_frames(unsigned char *p, uint64_t stored) {
  if (stored < 8) return 0;
  uint64_t count = sl__get32(p + 4), table = 8 + 12 * count;
  if (table > stored) return 0;
  uint64_t off = table;
  for (uint64_t i = 0; i < count; i++) {
    unsigned char *e = p + 8 + 12 * i;
    uint64_t len = sl__get32(e);
    if (len > stored - off) break;
    sl__put32(e + 8, sl__crc32c(0, p + off, (size_t)len));
    off += len;
  }
  return sl__crc32c(0, p, (size_t)table);
}

/* The same for a compact framed chunk (codec 3, "Compact framed chunks"):
 * a varint table of T bytes, T at payload offset 8. */
FUZZ_FN uint32_t fuzz_slr_fix_compact(unsigned char *p, uint64_t stored) {
  if (stored < 12) return 0;
  uint64_t count = sl__get32(p + 4), table = sl__get32(p + 8);
  if (table < 12 || table > stored) return 0;
  uint64_t at = 12, off = table;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t v[2] = {0, 0};
    for (int k = 0; k < 2; k++)
      for (int sh = 0; at < table && sh < 35; sh += 7) {
        unsigned char c = p[at++];
        v[k] |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) break;
      }
    if (at + 4 > table || v[0] > stored - off) break;
    sl__put32(p + at, sl__crc32c(0, p + off, (size_t)v[0]));
    at += 4;
    off += v[0];
  }
  return sl__crc32c(0, p, (size_t)table);
}

FUZZ_FN void fuzz_slr_fix_crcs(unsigned char *b, size_t n) {
  if (n < 96) return;
  sl__put32(b + 28, sl__crc32c(0, b, 28));
  unsigned char *foot = b + n - 64;
  uint64_t so = sl__get64(foot), ss = sl__get64(foot + 8),
           io = sl__get64(foot + 16), is = sl__get64(foot + 24);
  uint64_t limit = n - 64;
  if (so <= limit && ss >= 12 && ss <= limit - so)
    sl__put32(b + so + ss - 4, sl__crc32c(0, b + so, (size_t)ss - 4));
  if (io <= limit && is >= 20 && is <= limit - io) {
    unsigned char *ix = b + io;
    uint64_t nc = sl__get64(ix + 8);
    for (uint64_t c = 0; c < nc && 16 + 24 * (c + 1) <= is - 4; c++) {
      unsigned char *e = ix + 16 + 24 * c;
      uint64_t off = sl__get64(e);
      if (off > limit || limit - off < 40) continue;
      unsigned char *h = b + off;
      uint64_t stored = sl__get64(h + 8);
      if (stored <= limit - off - 40 && sl__get32(h + 28) == 2)
        sl__put32(h + 32, fuzz_slr_fix_frames(h + 40, stored));
      else if (stored <= limit - off - 40 && sl__get32(h + 28) == 3)
        sl__put32(h + 32, fuzz_slr_fix_compact(h + 40, stored));
      else if (stored <= limit - off - 40)
        sl__put32(h + 32, sl__crc32c(0, h + 40, (size_t)stored));
      uint32_t hc = sl__crc32c(0, h, 36);
      sl__put32(h + 36, hc);
      sl__put32(e + 20, hc);
    }
    sl__put32(ix + is - 4, sl__crc32c(0, ix, (size_t)is - 4));
  }
  /* The dictionary block of a framed file ends where the schema starts. */
  uint64_t ds = sl__get32(foot + 48);
  if (so <= limit && ds >= 12 && ds <= so)
    sl__put32(b + so - 4, sl__crc32c(0, b + so - ds, (size_t)ds - 4));
  sl__put32(foot + 52, sl__crc32c(0, foot, 52));
}

#endif
