/*
 * slr_reader.c - opens SLR files and reads their chunks (docs/FORMAT.md).
 *
 * Open validates, in order: header, footer, schema block, index block - each
 * checksum before any size in it is used.  Chunks are checked when loaded:
 * header CRC, agreement with the index entry, sizes against the file and the
 * limits, payload CRC, the zstd frame's declared size, then the offset table
 * and every record against the schema.  Only a chunk that passed all of it
 * yields records, so corrupt data is reported, never returned.
 */
#include "core/crc32c.h"
#include "formats/slr_file.h"

#include <zstd.h>

/* Chunk size limits (docs/FORMAT.md, "Chunk size limits").  Without an
 * explicit max_chunk_bytes the limit on a chunk's raw size is what the
 * writer recorded as sluice.max_chunk_raw (at most SLR_MAX_CHUNK_RAW), or
 * SLR_DEFAULT_CHUNK_LIMIT for files that record none; such files also may
 * not claim a raw size above SLR_RATIO_FREE bytes that is more than
 * SLR_MAX_RATIO times the stored size (zstd's RLE blocks reach 32768:1, so
 * the frame's own bound does not stop a small file from asking for
 * gigabytes; SLR_RATIO_FREE, SLR_MAX_RATIO and SLR_META_MAX_CHUNK_RAW are in
 * slr_file.h: the chunk header check in slr_frames.c uses them). */
#define SLR_DEFAULT_CHUNK_LIMIT ((uint64_t)256 << 20)
#define SLR_MAX_CHUNK_RAW ((uint64_t)1 << 30)
/* Idle decoded-chunk buffers a file keeps for reuse.  Behind a shuffle a
 * chunk's buffer stays pinned until its last record leaves the window,
 * which for a 10 000-sample window is most of an epoch: the buffers come
 * back together at the end of a pass and the next pass needs as many
 * again.  So the pool keeps up to what one pass had out, bounded by
 * SLR_POOL_IDLE_BYTES (idle memory never exceeds the pipeline's own
 * earlier peak; it is freed when the file closes). */
#define SLR_POOL_IDLE 64
#define SLR_POOL_IDLE_BYTES ((size_t)64 << 20)

#define WHERE(f) (f)->src->name

static void file_free(sl_slr_file *f) {
  if (!f) return;
  sl__source_close(f->src);
  sl_schema_release(f->schema);
  sl__slr_layout_free(&f->layout);
  sl__free(f->index);
  sl__slr_decoder_free(&f->dec);
  sl__free(f->stored);
  sl_buffer_release(f->cache.raw);
  sl__free(f->cache_frames);
  sl__buffer_pool_release(f->pool); /* buffers still held stay valid */
  sl__slr_frames_free(f);
  ZSTD_freeDDict(f->ddict);
  sl__free(f->dict);
  sl__free(f);
}

void sl_slr_close(sl_slr_file *f) {
  file_free(f);
}

static int read_header(sl_slr_file *f) {
  unsigned char h[SLR_HEADER_SIZE];
  SL_FORWARD_IF_ERROR(f->src->read_at(f->src, 0, h, sizeof h));
  SL_RETURN_ERROR_IF(memcmp(h, sl__slr_magic, 8) != 0, SL_ECORRUPT,
                     "%s: not an SLR file (bad magic at offset 0)", WHERE(f));
  uint32_t crc = sl__crc32c(0, h, 28);
  SL_RETURN_ERROR_IF(crc != sl__get32(h + 28), SL_ECORRUPT,
                     "%s: file header at offset 0: CRC mismatch (stored "
                     "0x%08x, computed 0x%08x)",
                     WHERE(f), sl__get32(h + 28), crc);
  unsigned major = sl__get16(h + 8), minor = sl__get16(h + 10);
  SL_RETURN_ERROR_IF(major != SLR_MAJOR, SL_EUNSUPPORTED,
                     "%s: SLR version %u.%u is not supported (this reader "
                     "knows %d.x)",
                     WHERE(f), major, minor, SLR_MAJOR);
  uint32_t req = sl__get32(h + 12);
  SL_RETURN_ERROR_IF(req & ~SLR_KNOWN_REQUIRED, SL_EUNSUPPORTED,
                     "%s: unknown required feature bits 0x%08x (SLR %u.%u): "
                     "the file needs a newer sluice",
                     WHERE(f), req & ~SLR_KNOWN_REQUIRED, major, minor);
  f->framed = (req & SLR_FEATURE_FRAMES) != 0;
  f->compact = (req & SLR_FEATURE_COMPACT_FRAMES) != 0;
  SL_RETURN_ERROR_IF(f->compact && !f->framed, SL_ECORRUPT,
                     "%s: file header at offset 0: required feature bit 0x8 "
                     "(compact frames) without bit 0x1 (frames)",
                     WHERE(f));
  return SL_OK;
}

static int read_footer(sl_slr_file *f) {
  uint64_t size = f->src->size;
  f->footer_off = size - SLR_FOOTER_SIZE;
  unsigned char b[SLR_FOOTER_SIZE];
  SL_FORWARD_IF_ERROR(f->src->read_at(f->src, f->footer_off, b, sizeof b));
  SL_RETURN_ERROR_IF(memcmp(b + 56, sl__slr_end_magic, 8) != 0, SL_ECORRUPT,
                     "%s: no SLR footer at offset %llu: the file is "
                     "truncated or was not finished",
                     WHERE(f), (unsigned long long)f->footer_off);
  uint32_t crc = sl__crc32c(0, b, 52);
  SL_RETURN_ERROR_IF(crc != sl__get32(b + 52), SL_ECORRUPT,
                     "%s: footer at offset %llu: CRC mismatch (stored 0x%08x, "
                     "computed 0x%08x)",
                     WHERE(f), (unsigned long long)f->footer_off,
                     sl__get32(b + 52), crc);
  uint64_t so = sl__get64(b), ss = sl__get64(b + 8), io = sl__get64(b + 16),
           is = sl__get64(b + 24), end;
  f->records = sl__get64(b + 32);
  f->nchunks = sl__get64(b + 40);
  /* Framed files: the dictionary block's size (0: none); it ends where
   * the schema block starts. */
  uint64_t ds = sl__get32(b + 48);
  SL_RETURN_ERROR_IF(so < SLR_HEADER_SIZE || !sl__add_ok(so, ss, &end) ||
                         end != io || !sl__add_ok(io, is, &end) ||
                         end != f->footer_off || (ds && !f->framed) ||
                         ds > so - SLR_HEADER_SIZE,
                     SL_ECORRUPT,
                     "%s: footer at offset %llu: dictionary/schema/index "
                     "blocks (%llu, %llu+%llu, %llu+%llu) do not tile the file",
                     WHERE(f), (unsigned long long)f->footer_off,
                     (unsigned long long)ds, (unsigned long long)so,
                     (unsigned long long)ss, (unsigned long long)io,
                     (unsigned long long)is);
  f->schema_off = so;
  f->index_off = io;
  f->dict_size = ds;
  f->chunks_end = so - ds;
  return SL_OK;
}

/* Reads a whole block [off, off+len), checks magic and trailing CRC and
 * hands it to parse. */
static int read_block(sl_slr_file *f, const char *what, uint32_t magic,
                      uint64_t off, uint64_t len,
                      int (*parse)(sl_slr_file *, const unsigned char *,
                                   uint64_t)) {
  SL_RETURN_ERROR_IF(len < 12 || len > ((uint64_t)1 << 31), SL_ECORRUPT,
                     "%s: %s block at offset %llu has an absurd size %llu",
                     WHERE(f), what, (unsigned long long)off,
                     (unsigned long long)len);
  unsigned char *b = sl__malloc((size_t)len);
  SL_RETURN_ERROR_IF(!b, SL_ENOMEM, "%s: cannot allocate the %s block",
                     WHERE(f), what);
  int rc = f->src->read_at(f->src, off, b, (size_t)len);
  if (rc >= 0 && (sl__get32(b) != magic ||
                  sl__crc32c(0, b, (size_t)len - 4) != sl__get32(b + len - 4)))
    rc = sl_set_error(SL_ECORRUPT, "%s: %s block at offset %llu: %s", WHERE(f),
                      what, (unsigned long long)off,
                      sl__get32(b) != magic ? "bad magic" : "CRC mismatch");
  if (rc >= 0) rc = parse(f, b, len);
  sl__free(b);
  return rc;
}

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, at most
 * U+10FFFF. */
static bool utf8_valid(const unsigned char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      k = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      k = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      k = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (n - i - 1 < k) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t j = 2; j <= k; j++)
      if ((p[i + j] & 0xC0) != 0x80) return false;
    i += k + 1;
  }
  return true;
}

static int parse_schema(sl_slr_file *f, const unsigned char *b, uint64_t len) {
#define NEED(n)                                                                \
  SL_RETURN_ERROR_IF((uint64_t)(p - b) + (n) > len - 4, SL_ECORRUPT,           \
                     "%s: schema block at offset %llu is truncated", WHERE(f), \
                     (unsigned long long)f->schema_off)
  const unsigned char *p = b + 8;
  SL_RETURN_ERROR_IF(sl__get32(b + 4) != len, SL_ECORRUPT,
                     "%s: schema block at offset %llu: size field %u does not "
                     "match the footer (%llu)",
                     WHERE(f), (unsigned long long)f->schema_off,
                     sl__get32(b + 4), (unsigned long long)len);
  NEED(4);
  uint32_t nf = sl__get32(p);
  p += 4;
  f->schema = sl_schema_new();
  if (!f->schema) return SL_ENOMEM;
  for (uint32_t i = 0; i < nf; i++) {
    NEED(2);
    size_t nl = sl__get16(p);
    p += 2;
    NEED(nl + 2);
    char name[64];
    SL_RETURN_ERROR_IF(nl == 0 || nl > 63 || memchr(p, 0, nl), SL_ECORRUPT,
                       "%s: schema field %u has a bad name", WHERE(f), i);
    SL_RETURN_ERROR_IF(!utf8_valid(p, nl), SL_ECORRUPT,
                       "%s: schema block at offset %llu: field %u's name is "
                       "not valid UTF-8",
                       WHERE(f), (unsigned long long)f->schema_off, i);
    memcpy(name, p, nl);
    name[nl] = 0;
    p += nl;
    int dt = *p++, rank = *p++;
    SL_RETURN_ERROR_IF(rank > SL_MAX_RANK, SL_ECORRUPT,
                       "%s: schema field '%s' has rank %d", WHERE(f), name,
                       rank);
    NEED(8 * (size_t)rank);
    int64_t shape[SL_MAX_RANK];
    for (int d = 0; d < rank; d++, p += 8)
      shape[d] = (int64_t)sl__get64(p);
    SL_RETURN_ERROR_IF(
        dt == SL_BYTES && (rank != 1 || shape[0] != SL_DIM_VAR), SL_ECORRUPT,
        "%s: schema block at offset %llu: field '%s' is bytes of rank %d%s "
        "(bytes fields are bytes[-1])",
        WHERE(f), (unsigned long long)f->schema_off, name, rank,
        rank == 1 ? " with a fixed size" : "");
    int rc = sl_schema_add(f->schema, name, (sl_dtype)dt, rank, shape);
    /* Wrap, not set: the cause is the current message itself.  Running
     * out of memory is not corruption. */
    if (rc < 0)
      return sl_wrap_error(rc == SL_ENOMEM ? rc : SL_ECORRUPT,
                           "%s: schema block", WHERE(f));
  }
  SL_RETURN_ERROR_IF(nf == 0, SL_ECORRUPT, "%s: the schema has no fields",
                     WHERE(f));
  NEED(4);
  uint32_t nm = sl__get32(p);
  p += 4;
  SL_RETURN_ERROR_IF(nm > SL_MAX_META, SL_ECORRUPT,
                     "%s: schema block at offset %llu: %u metadata entries, "
                     "more than the maximum of %d",
                     WHERE(f), (unsigned long long)f->schema_off, nm,
                     SL_MAX_META);
  for (uint32_t i = 0; i < nm; i++) {
    /* Both strings are located and checked before anything is allocated,
     * so no failure path holds memory. */
    const unsigned char *at[2];
    uint32_t l[2];
    for (int j = 0; j < 2; j++) {
      NEED(4);
      l[j] = sl__get32(p);
      p += 4;
      SL_RETURN_ERROR_IF(
          l[j] > (1u << 20) || (uint64_t)(p - b) + l[j] > len - 4 ||
              memchr(p, 0, l[j]),
          SL_ECORRUPT, "%s: schema metadata entry %u is malformed", WHERE(f),
          i);
      at[j] = p;
      p += l[j];
    }
    char *kv[2] = {sl__malloc(l[0] + 1), sl__malloc(l[1] + 1)};
    if (!kv[0] || !kv[1]) {
      sl__free(kv[0]);
      sl__free(kv[1]);
      return sl_set_error(SL_ENOMEM, "%s: cannot allocate metadata", WHERE(f));
    }
    for (int j = 0; j < 2; j++) {
      memcpy(kv[j], at[j], l[j]);
      kv[j][l[j]] = 0;
    }
    if (sl_schema_meta(f->schema, kv[0])) {
      int rc = sl_set_error(SL_ECORRUPT,
                            "%s: schema block at offset %llu: metadata entry "
                            "%u repeats the key '%.200s'",
                            WHERE(f), (unsigned long long)f->schema_off, i,
                            kv[0]);
      sl__free(kv[0]);
      sl__free(kv[1]);
      return rc;
    }
    int rc = sl_schema_set_meta(f->schema, kv[0], kv[1]);
    sl__free(kv[0]);
    sl__free(kv[1]);
    if (rc < 0 && rc != SL_ENOMEM)
      return sl_set_error(SL_ECORRUPT, "%s: schema metadata entry %u: %s",
                          WHERE(f), i, sl_strerror(rc));
    SL_FORWARD_IF_ERROR(rc);
  }
  SL_RETURN_ERROR_IF((uint64_t)(p - b) != len - 4, SL_ECORRUPT,
                     "%s: schema block at offset %llu has %llu trailing bytes",
                     WHERE(f), (unsigned long long)f->schema_off,
                     (unsigned long long)(len - 4 - (uint64_t)(p - b)));
  sl_schema_freeze(f->schema);
  int rc = sl__slr_layout_init(&f->layout, f->schema);
  /* A schema this reader cannot lay out (fields too large) came from the
   * file: corruption, named as such. */
  if (rc == SL_EINVAL)
    return sl_wrap_error(SL_ECORRUPT, "%s: schema block at offset %llu",
                         WHERE(f), (unsigned long long)f->schema_off);
  return rc;
#undef NEED
}

/* Sets the chunk size limits: the max_chunk_bytes option, else the size
 * the writer recorded, else the default with the ratio bound. */
static int chunk_limits(sl_slr_file *f) {
  const char *rec = sl_schema_meta(f->schema, SLR_META_MAX_CHUNK_RAW);
  if (f->opts.max_chunk_bytes) {
    f->raw_limit = f->opts.max_chunk_bytes;
    f->limit_from = "the max_chunk_bytes option";
  } else if (rec) {
    uint64_t v = 0;
    size_t n = strlen(rec);
    bool ok = n > 0 && n <= 10;
    for (size_t i = 0; ok && i < n; i++) {
      ok = rec[i] >= '0' && rec[i] <= '9';
      v = v * 10 + (uint64_t)(rec[i] - '0');
    }
    SL_RETURN_ERROR_IF(!ok || v > SLR_MAX_CHUNK_RAW, SL_ECORRUPT,
                       "%s: schema block at offset %llu: metadata %s = '%.40s' "
                       "is not a size of at most %llu bytes",
                       WHERE(f), (unsigned long long)f->schema_off,
                       SLR_META_MAX_CHUNK_RAW, rec,
                       (unsigned long long)SLR_MAX_CHUNK_RAW);
    f->raw_limit = v;
    f->limit_from = "the largest chunk its writer recorded (" SLR_META_MAX_CHUNK_RAW
                    "); set max_chunk_bytes to override";
  } else {
    f->raw_limit = SLR_DEFAULT_CHUNK_LIMIT;
    f->limit_from = "the default for files that do not record "
                    SLR_META_MAX_CHUNK_RAW "; set max_chunk_bytes to raise it";
    f->ratio_bound = true;
  }
  /* A zstd frame of n bytes may take up to ZSTD_compressBound(n) bytes. */
  uint64_t l = SL_MIN(f->raw_limit, (uint64_t)SIZE_MAX / 2);
  f->stored_limit = (uint64_t)ZSTD_compressBound((size_t)l);
  if (f->stored_limit < l) f->stored_limit = l;
  return SL_OK;
}

static int parse_index(sl_slr_file *f, const unsigned char *b, uint64_t len) {
  /* magic, reserved, chunk_count, crc: 20 bytes before any entry (the
   * block reader only guarantees magic and CRC). */
  SL_RETURN_ERROR_IF(len < 20, SL_ECORRUPT,
                     "%s: index block at offset %llu: %llu bytes is too "
                     "short",
                     WHERE(f), (unsigned long long)f->index_off,
                     (unsigned long long)len);
  uint64_t n = sl__get64(b + 8), want;
  SL_RETURN_ERROR_IF(
      n != f->nchunks || !sl__mul_ok(n, SLR_INDEX_ENTRY_SIZE, &want) ||
          want + 20 != len || sl__get32(b + 4) != 0,
      SL_ECORRUPT,
      "%s: index block at offset %llu: %llu chunks do not "
      "match its size %llu or the footer's %llu chunks",
      WHERE(f), (unsigned long long)f->index_off, (unsigned long long)n,
      (unsigned long long)len, (unsigned long long)f->nchunks);
  f->index = sl__malloc((size_t)(n ? n : 1) * sizeof *f->index);
  SL_RETURN_ERROR_IF(!f->index, SL_ENOMEM, "%s: cannot allocate the index",
                     WHERE(f));
  uint64_t next_record = 0, min_off = SLR_HEADER_SIZE;
  for (uint64_t c = 0; c < n; c++) {
    const unsigned char *e = b + 16 + SLR_INDEX_ENTRY_SIZE * c;
    slr_index_entry *x = &f->index[c];
    x->offset = sl__get64(e);
    x->first_record = sl__get64(e + 8);
    x->records = sl__get32(e + 16);
    x->header_crc = sl__get32(e + 20);
    uint64_t hdr_end;
    bool ok = x->first_record == next_record && x->records > 0 &&
              (c ? x->offset > min_off : x->offset == SLR_HEADER_SIZE) &&
              sl__add_ok(x->offset, SLR_CHUNK_HEADER_SIZE, &hdr_end) &&
              hdr_end <= f->chunks_end;
    SL_RETURN_ERROR_IF(!ok, SL_ECORRUPT,
                       "%s: index entry %llu (chunk at offset %llu, first "
                       "record %llu, %u records) is inconsistent",
                       WHERE(f), (unsigned long long)c,
                       (unsigned long long)x->offset,
                       (unsigned long long)x->first_record, x->records);
    min_off = x->offset + SLR_CHUNK_HEADER_SIZE;
    next_record += x->records;
  }
  SL_RETURN_ERROR_IF(
      next_record != f->records || (n == 0 && f->chunks_end != SLR_HEADER_SIZE),
      SL_ECORRUPT, "%s: the index counts %llu records, the footer %llu",
      WHERE(f), (unsigned long long)next_record,
      (unsigned long long)f->records);
  return SL_OK;
}

/* The dictionary block of a framed file: magic, size, the zstd dictionary,
 * CRC; digested once into the DDict every decoding context shares. */
static int parse_dict(sl_slr_file *f, const unsigned char *b, uint64_t len) {
  SL_RETURN_ERROR_IF(sl__get32(b + 4) != len || len - 12 > SLR_MAX_DICT,
                     SL_ECORRUPT,
                     "%s: dictionary block at offset %llu: size field %u does "
                     "not match the footer's %llu (at most %llu bytes of "
                     "dictionary)",
                     WHERE(f), (unsigned long long)f->chunks_end,
                     sl__get32(b + 4), (unsigned long long)len,
                     (unsigned long long)SLR_MAX_DICT);
  f->ddict = ZSTD_createDDict(b + 8, (size_t)len - 12);
  SL_RETURN_ERROR_IF(!f->ddict, SL_ECORRUPT,
                     "%s: dictionary block at offset %llu: zstd cannot load "
                     "its %llu-byte dictionary",
                     WHERE(f), (unsigned long long)f->chunks_end,
                     (unsigned long long)(len - 12));
  f->dict_len = (size_t)len - 12;
  f->dict = sl__malloc(f->dict_len);
  SL_RETURN_ERROR_IF(!f->dict, SL_ENOMEM,
                     "%s: cannot allocate %zu bytes for the dictionary",
                     WHERE(f), f->dict_len);
  memcpy(f->dict, b + 8, f->dict_len);
  return SL_OK;
}

int sl__slr_open_source(sl__source *src, const sl_slr_open_opts *opts,
                        sl_slr_file **out) {
  *out = NULL;
  sl_slr_file *f = sl__calloc(1, sizeof *f);
  if (!f) {
    sl__source_close(src);
    return sl_set_error(SL_ENOMEM, "slr: cannot allocate a file");
  }
  f->src = src;
  if (opts) f->opts = *opts;
  if (!f->opts.max_bad_chunks) f->opts.max_bad_chunks = 16;
  int rc = SL_OK;
  if (f->src->size < SLR_HEADER_SIZE + SLR_FOOTER_SIZE) {
    rc = sl_set_error(SL_ECORRUPT,
                      "%s: %llu bytes is too short for an SLR "
                      "file (truncated?)",
                      WHERE(f), (unsigned long long)f->src->size);
    goto fail;
  }
  if ((rc = read_header(f)) < 0 || (rc = read_footer(f)) < 0) goto fail;
  if ((rc = read_block(f, "schema", SLR_SCHEMA_MAGIC, f->schema_off,
                       f->index_off - f->schema_off, parse_schema)) < 0 ||
      (rc = chunk_limits(f)) < 0 ||
      (rc = read_block(f, "index", SLR_INDEX_MAGIC, f->index_off,
                       f->footer_off - f->index_off, parse_index)) < 0 ||
      (f->dict_size &&
       (rc = read_block(f, "dictionary", SLR_DICT_MAGIC, f->chunks_end,
                        f->dict_size, parse_dict)) < 0) ||
      (rc = sl__slr_frames_open(f)) < 0)
    goto fail;
  if ((rc = sl__slr_decoder_init(f, &f->dec)) < 0) goto fail;
  *out = f;
  return SL_OK;
fail:
  file_free(f);
  return rc;
}

int sl_slr_open(const char *path, const sl_slr_open_opts *opts,
                sl_slr_file **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "slr: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!path, SL_EINVAL, "slr: NULL path");
  SL_RETURN_ERROR_IF(opts && opts->policy != SL_CORRUPT_FAIL &&
                         opts->policy != SL_CORRUPT_SKIP_CHUNK,
                     SL_EINVAL, "slr: %s: unknown corruption policy %d", path,
                     (int)opts->policy);
  sl__source *src;
  SL_FORWARD_IF_ERROR(sl__source_open_file(path, &src));
  return sl__slr_open_source(src, opts, out);
}

const char *sl_slr_path(const sl_slr_file *f) {
  return f ? f->src->name : NULL;
}
const sl_schema *sl_slr_schema(const sl_slr_file *f) {
  return f ? f->schema : NULL;
}
uint64_t sl_slr_records(const sl_slr_file *f) {
  return f ? f->records : 0;
}
uint64_t sl_slr_chunks(const sl_slr_file *f) {
  return f ? f->nchunks : 0;
}
uint64_t sl_slr_bad_chunks(const sl_slr_file *f) {
  return f ? f->bad_chunks : 0;
}
sl_corrupt_policy sl__slr_policy(const sl_slr_file *f) {
  return f->opts.policy;
}

void sl__slr_chunk_span(const sl_slr_file *f, uint64_t c, uint64_t *first,
                        uint32_t *count) {
  *first = f->index[c].first_record;
  *count = f->index[c].records;
}

void sl__slr_pass_start(sl_slr_file *f) {
  f->pass_bad_chunks = 0;
}

void sl__slr_set_pass_bad(sl_slr_file *f, uint64_t n) {
  f->pass_bad_chunks = n;
}

const sl__file_id *sl__slr_file_id(const sl_slr_file *f) {
  return &f->src->id;
}

uint32_t sl__slr_fingerprint(const sl_slr_file *f) {
  uint32_t crc = 0;
  for (uint64_t c = 0; c < f->nchunks; c++) {
    unsigned char e[24];
    sl__put64(e, f->index[c].offset);
    sl__put64(e + 8, f->index[c].first_record);
    sl__put32(e + 16, f->index[c].records);
    sl__put32(e + 20, f->index[c].header_crc);
    crc = sl__crc32c(crc, e, sizeof e);
  }
  return crc;
}

int sl__slr_count_bad(sl_slr_file *f) {
  f->bad_chunks++;
  f->pass_bad_chunks++;
  if (f->pass_bad_chunks <= f->opts.max_bad_chunks) return SL_OK;
  /* The cause is the current message; copy it before overwriting. */
  char last[1024];
  snprintf(last, sizeof last, "%s", sl_last_error());
  return sl_set_error(SL_ECORRUPT,
                      "%llu corrupt chunks skipped, more than the cap of %u; "
                      "last: %s",
                      (unsigned long long)f->pass_bad_chunks,
                      f->opts.max_bad_chunks, last);
}

int sl_slr_chunk_info_get(sl_slr_file *f, uint64_t c, sl_slr_chunk_info *out) {
  SL_RETURN_ERROR_IF(!f || !out || c >= f->nchunks, SL_EINVAL,
                     "slr: chunk %llu out of range", (unsigned long long)c);
  uint32_t pcrc;
  out->offset = f->index[c].offset;
  out->first_record = f->index[c].first_record;
  out->records = f->index[c].records;
  out->codec = 0;
  return sl__slr_chunk_header(f, c, &out->stored_size, &out->raw_size, &pcrc,
                              &out->codec);
}

int sl__slr_load_chunk(sl_slr_file *f, uint64_t c, const slr_chunk **out) {
  if (f->cache.raw && f->cache.index == c) {
    *out = &f->cache;
    return SL_OK;
  }
  const slr_index_entry *x = &f->index[c];
  uint64_t stored, raw, need;
  uint32_t pcrc, codec;
  SL_FORWARD_IF_ERROR(sl__slr_chunk_header(f, c, &stored, &raw, &pcrc, &codec));
  if (stored > f->stored_cap) {
    unsigned char *p = sl__realloc(f->stored, (size_t)stored);
    SL_RETURN_ERROR_IF(!p, SL_ENOMEM,
                       "%s: cannot allocate %llu bytes for "
                       "chunk %llu",
                       WHERE(f), (unsigned long long)stored,
                       (unsigned long long)c);
    f->stored = p;
    f->stored_cap = (size_t)stored;
  }
  SL_FORWARD_IF_ERROR(f->src->read_at(f->src, x->offset + SLR_CHUNK_HEADER_SIZE,
                                      f->stored, (size_t)stored));
  slr_frame_table *t;
  SL_FORWARD_IF_ERROR(sl__slr_frame_table(f, c, codec, f->stored, stored,
                                          stored, raw, pcrc, &need, &t));
  /* Decode into the previous chunk's buffer when no sample holds it any
   * more, else into one from the file's pool: the buffers of chunks whose
   * samples were all released (behind a shuffle, on any thread) go back to
   * it.  A fresh 1 MiB buffer per chunk costs its page faults, a reused
   * one is warm (docs/PERFORMANCE.md, "The per-sample path").
   * Without a pool (out of memory making it) buffers are plain ones. */
  sl_buffer *buf = NULL;
  if (f->cache.raw && sl__buffer_refcount(f->cache.raw) == 1 &&
      sl_buffer_size(f->cache.raw) >= raw) {
    buf = f->cache.raw;
    f->cache.raw = NULL;
  } else {
    if (!f->pool) {
      f->pool = sl__buffer_pool_new(SLR_POOL_IDLE, SLR_POOL_IDLE_BYTES);
      if (!f->pool) sl_clear_error();
    }
    buf = sl__buffer_pool_get(f->pool, (size_t)raw);
    if (!buf) {
      sl__free(t);
      return sl_wrap_error(SL_ENOMEM,
                           "%s: chunk %llu at offset %llu: %llu raw bytes",
                           WHERE(f), (unsigned long long)c,
                           (unsigned long long)x->offset,
                           (unsigned long long)raw);
    }
  }
  /* Every frame (a codec-1 chunk is one), checked as it is decoded. */
  size_t body = 0;
  unsigned char *dst = sl_buffer_data(buf);
  int rc = SL_OK;
  for (uint32_t i = 0; i < t->count && rc == SL_OK; i++)
    rc = sl__slr_frame_decode(f, c, t, i, &f->dec, f->stored + t->fr[i].off,
                              dst + t->fr[i].raw_off, &body);
  if (rc < 0) {
    sl__free(t);
    sl_buffer_release(buf);
    return rc;
  }
  sl_buffer_release(f->cache.raw);
  sl__free(f->cache_frames);
  f->cache_frames = NULL;
  if (SLR_CODEC_IS_FRAMED(codec)) {
    f->cache_frames = t;
  } else {
    sl__free(t);
  }
  f->cache.index = c;
  f->cache.records = x->records;
  f->cache.raw = buf;
  f->cache.ends = dst;
  f->cache.body = body;
  f->cache.frames = f->cache_frames;
  *out = &f->cache;
  return SL_OK;
}

uint64_t sl__slr_held_bytes(sl_slr_file *f) {
  uint64_t n = f->stored_cap + sl__buffer_pool_idle_bytes(f->pool);
  if (f->cache.raw) n += sl_buffer_size(f->cache.raw);
  if (f->dec.dctx) n += ZSTD_sizeof_DCtx(f->dec.dctx);
  if (f->dec.win) n += f->dict_len + f->dec.room;
  return n;
}

int sl__slr_chunk_record(sl_slr_file *f, const slr_chunk *ch, uint32_t r,
                         sl_sample **out) {
  if (ch->frames) return sl__slr_framed_record(f, ch, r, out);
  size_t start = r ? sl__get32(ch->ends + 4 * (size_t)(r - 1)) : 0;
  return sl__slr_record_decode(&f->layout, f->schema, ch->raw, ch->body + start,
                               out);
}

int sl_slr_read(sl_slr_file *f, uint64_t k, sl_sample **out) {
  SL_RETURN_ERROR_IF(!f || !out, SL_EINVAL, "slr: NULL file or out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(k >= f->records, SL_EINVAL,
                     "%s: record %llu is out of range (%llu records)", WHERE(f),
                     (unsigned long long)k, (unsigned long long)f->records);
  /* Framed files: decode only the record's frame. */
  if (f->framed) return sl_slr_fetch(f, k, out);
  uint64_t c = sl_slr_chunk_of(f, k);
  const slr_chunk *ch;
  SL_FORWARD_IF_ERROR(sl__slr_load_chunk(f, c, &ch));
  return sl__slr_chunk_record(f, ch, (uint32_t)(k - f->index[c].first_record),
                              out);
}

int sl_slr_verify(sl_slr_file *f) {
  SL_RETURN_ERROR_IF(!f, SL_EINVAL, "slr: NULL file");
  for (uint64_t c = 0; c < f->nchunks; c++) {
    const slr_chunk *ch;
    /* Drop the cache so every chunk is read and checked again. */
    sl_buffer_release(f->cache.raw);
    f->cache.raw = NULL;
    SL_FORWARD_IF_ERROR(sl__slr_load_chunk(f, c, &ch));
  }
  return SL_OK;
}
