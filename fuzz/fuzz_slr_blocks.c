/*
 * fuzz_slr_blocks.c - libFuzzer target: SLR files assembled from a fuzzed
 * schema block, index block and decompressed chunk payloads, with every
 * CRC, the zstd frames and the footer made valid here.  Mutations thus land
 * in the decoders behind the checksums: the schema block (fields, dtypes,
 * ranks, dims, metadata), the index (offsets, first records, counts), the
 * record-end offset table of a chunk and the records against the schema.
 * The file is then read as in fuzz_slr.c (fuzz_slr_common.h).
 *
 * Input layout (fuzz/make_seeds.c writes it from real files):
 *   u8   flags: bit 0 index body from the input (else computed, consistent)
 *              bit 1 policy skip_chunk; bit 2 footer record count from the
 *              input (else the sum of the chunks' counts); bits 4-5
 *              max_bad_chunks
 *   u16  schema body length S, then S bytes: the schema block between its
 *        size field and its CRC (field count, fields, meta count, entries)
 *   u8   chunk count C (mod 16); per chunk: u32 record count, u16 payload
 *        length P, then P bytes: the decompressed payload (offset table,
 *        padding, records)
 *   [u64 footer record count, when bit 2]
 *   [the rest: the index body from chunk_count on, when bit 0]
 * Integers little-endian; a field cut short by the end of the input reads
 * as zeros.
 */
#include "fuzz_slr_common.h"

#include <zstd.h>

typedef struct cursor {
  const uint8_t *p;
  size_t left;
} cursor;

static uint64_t take_int(cursor *c, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes && c->left; i++, c->left--)
    v |= (uint64_t)*c->p++ << (8 * i);
  return v;
}

static const uint8_t *take_bytes(cursor *c, size_t *n) {
  if (*n > c->left) *n = c->left;
  const uint8_t *p = c->p;
  c->p += *n;
  c->left -= *n;
  return p;
}

typedef struct outbuf {
  unsigned char *b;
  size_t len, cap;
} outbuf;

static unsigned char *grow(outbuf *o, size_t n) {
  if (o->len + n > o->cap) {
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + n)
      cap *= 2;
    o->b = realloc(o->b, cap);
    FUZZ_CHECK(o->b != NULL, "out of memory");
    o->cap = cap;
  }
  unsigned char *p = o->b + o->len;
  memset(p, 0, n);
  o->len += n;
  return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cursor c = {data, size};
  unsigned flags = (unsigned)take_int(&c, 1);
  size_t slen = (size_t)take_int(&c, 2);
  const uint8_t *sbody = take_bytes(&c, &slen);
  unsigned nchunks = (unsigned)take_int(&c, 1) % 16;

  outbuf o = {NULL, 0, 0};
  unsigned char *h = grow(&o, SLR_HEADER_SIZE);
  memcpy(h, sl__slr_magic, 8);
  sl__put16(h + 8, SLR_MAJOR);
  sl__put16(h + 10, SLR_MINOR);
  sl__put32(h + 28, sl__crc32c(0, h, 28));

  unsigned char index[16 * 24];
  uint64_t records = 0;
  for (unsigned k = 0; k < nchunks; k++) {
    uint32_t count = (uint32_t)take_int(&c, 4);
    size_t rlen = (size_t)take_int(&c, 2);
    const uint8_t *raw = take_bytes(&c, &rlen);
    size_t bound = ZSTD_compressBound(rlen);
    size_t off = o.len;
    grow(&o, SLR_CHUNK_HEADER_SIZE + bound);
    unsigned char *ch = o.b + off;
    size_t stored =
        ZSTD_compress(ch + SLR_CHUNK_HEADER_SIZE, bound, raw, rlen, 1);
    FUZZ_CHECK(!ZSTD_isError(stored), "zstd: %s", ZSTD_getErrorName(stored));
    o.len = off + SLR_CHUNK_HEADER_SIZE + stored;
    sl__put32(ch, SLR_CHUNK_MAGIC);
    sl__put32(ch + 4, count);
    sl__put64(ch + 8, stored);
    sl__put64(ch + 16, rlen);
    sl__put32(ch + 24, k);
    sl__put32(ch + 28, SLR_CODEC_ZSTD);
    sl__put32(ch + 32, sl__crc32c(0, ch + SLR_CHUNK_HEADER_SIZE, stored));
    uint32_t hcrc = sl__crc32c(0, ch, 36);
    sl__put32(ch + 36, hcrc);
    unsigned char *e = index + 24 * k;
    sl__put64(e, off);
    sl__put64(e + 8, records);
    sl__put32(e + 16, count);
    sl__put32(e + 20, hcrc);
    records += count;
  }
  if (flags & 4) records = take_int(&c, 8);

  uint64_t schema_off = o.len;
  unsigned char *sb = grow(&o, 12 + slen);
  sl__put32(sb, SLR_SCHEMA_MAGIC);
  sl__put32(sb + 4, (uint32_t)(12 + slen));
  if (slen) memcpy(sb + 8, sbody, slen);
  sl__put32(sb + 8 + slen, sl__crc32c(0, sb, 8 + slen));

  uint64_t index_off = o.len, chunk_count = nchunks;
  size_t ilen = 8 + 24 * (size_t)nchunks;
  const uint8_t *ibody = NULL;
  if (flags & 1) {
    ilen = c.left;
    ibody = take_bytes(&c, &ilen);
  }
  unsigned char *ib = grow(&o, 12 + ilen);
  sl__put32(ib, SLR_INDEX_MAGIC);
  if (ibody) {
    if (ilen) memcpy(ib + 8, ibody, ilen);
    unsigned char cc[8] = {0};
    memcpy(cc, ibody, ilen < 8 ? ilen : 8);
    chunk_count = sl__get64(cc);
  } else {
    sl__put64(ib + 8, nchunks);
    memcpy(ib + 16, index, 24 * (size_t)nchunks);
  }
  sl__put32(ib + 8 + ilen, sl__crc32c(0, ib, 8 + ilen));

  unsigned char *f = grow(&o, SLR_FOOTER_SIZE);
  sl__put64(f, schema_off);
  sl__put64(f + 8, index_off - schema_off);
  sl__put64(f + 16, index_off);
  sl__put64(f + 24, (uint64_t)(f - o.b) - index_off);
  sl__put64(f + 32, records);
  sl__put64(f + 40, chunk_count);
  sl__put32(f + 52, sl__crc32c(0, f, 52));
  memcpy(f + 56, sl__slr_end_magic, 8);

  uint64_t pick = fuzz_hash(14695981039346656037ull, data, size);
  fuzz_slr_run(o.b, o.len,
               (flags & 2) ? SL_CORRUPT_SKIP_CHUNK : SL_CORRUPT_FAIL,
               (flags >> 4) & 3, pick);
  free(o.b);
  sl_clear_error();
  return 0;
}
