/*
 * slr_frames.c - chunks below the file (docs/FORMAT.md "Chunks", "Framed
 * chunks"): a chunk's header check, its frame table (codec 2; a codec-1
 * chunk is one frame), decoding and checking one frame, and sl_slr_fetch,
 * the record read that decodes only its record's frame.  slr_reader.c
 * (open, the whole-chunk loads, verify) builds on these; nothing here
 * calls it.
 *
 * A framed chunk's payload is a frame table (frame_records, frame_count,
 * then stored size, raw size and CRC32C of each frame; the chunk header's
 * payload CRC covers the table) followed by independent zstd frames of
 * frame_records records each, compressed with the file's dictionary when it
 * has one.  Each frame decodes to what a codec-1 chunk of its records would
 * (record table, padding, records), so sl__slr_check_records checks it.
 * A codec-1 chunk is handled as one frame of all its records: one path
 * decodes both.
 *
 * sl_slr_fetch may run on several threads at once: the chunk tables it
 * reads are published once per chunk with a compare-and-swap (a loser frees
 * its copy), and each call borrows a fetch context from the file (a
 * ZSTD_DCtx, a scratch buffer and a cache of the last SLR_FETCH_SLOTS
 * decoded frames) under a mutex held only to pop or push it.  A thread
 * that fetches again gets its context back (a LIFO stack), so its frame
 * cache is, in effect, per thread.  Each decoding context (the file's
 * sequential one, each fetch context) has its own dictionary window
 * (slr_decoder in slr_file.h): a copy of the dictionary with room for one
 * frame after it and a DDict over that copy, so that zstd decodes with the
 * dictionary as the frame's prefix (faster than its separate-dictionary
 * path); the frame is then copied where it goes.
 *
 * sl_slr_fetch reads a frame's stored bytes through a memory map of the
 * file when the source has one (source.h's view; else pread into the
 * context's scratch buffer): the CRC check and the decode run under
 * sl__sigbus_guard, so a file truncated under the reader gives SL_EIO
 * ("file shrank"), as pread would, not a SIGBUS.
 *
 * zstd's verdict on a damaged frame depends on the context's history:
 * libzstd decodes a block's sequences with its prefetching decoder when the
 * dictionary is "cold" (the context's last frame used another or none) and
 * with its plain one otherwise, and the two can disagree on bytes that are
 * not a valid frame.  So that every path (whole-chunk loads, verify,
 * fetch, on a fresh or a used context) gives one verdict for one frame,
 * each dictionary decode starts from the same state: the dictionary
 * already loaded (sl__slr_frame_decode).
 */
/* ZSTD_decompressBegin_usingDDict (exported since zstd 1.0; declared in
 * zstd.h's static-linking section). */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "core/crc32c.h"
#include "formats/slr_file.h"
#include "transport/sigbus_guard.h"

#include <stdarg.h>
#include <sys/mman.h>

#define SLR_FETCH_SLOTS 4

#define WHERE(f) (f)->src->name

typedef struct fetch_slot {
  sl_buffer *buf; /* the decoded frame; NULL: empty */
  uint64_t chunk;
  uint32_t frame;
  size_t body;
} fetch_slot;

struct slr_fetch_ctx {
  slr_fetch_ctx *next;
  slr_decoder dec;
  unsigned char *stored;
  size_t cap;
  fetch_slot slot[SLR_FETCH_SLOTS];
  unsigned hand;
};

uint64_t sl_slr_chunk_of(const sl_slr_file *f, uint64_t k) {
  uint64_t lo = 0, hi = f->nchunks;
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (f->index[mid].first_record <= k)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

int sl__slr_chunk_fail(sl_slr_file *f, uint64_t c, const char *fmt, ...) {
  char why[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return sl_set_error(SL_ECORRUPT, "%s: chunk %llu at offset %llu: %s",
                      WHERE(f), (unsigned long long)c,
                      (unsigned long long)f->index[c].offset, why);
}

int sl__slr_chunk_header(sl_slr_file *f, uint64_t c, uint64_t *stored,
                         uint64_t *raw, uint32_t *payload_crc,
                         uint32_t *codec) {
  const slr_index_entry *x = &f->index[c];
  unsigned char h[SLR_CHUNK_HEADER_SIZE];
  SL_FORWARD_IF_ERROR(f->src->read_at(f->src, x->offset, h, sizeof h));
  uint32_t crc = sl__crc32c(0, h, 36);
  if (crc != sl__get32(h + 36))
    CHUNK_FAIL("header CRC mismatch (stored 0x%08x, computed 0x%08x)",
               sl__get32(h + 36), crc);
  if (crc != x->header_crc) CHUNK_FAIL("header does not match its index entry");
  if (sl__get32(h) != SLR_CHUNK_MAGIC) CHUNK_FAIL("bad chunk magic");
  if (sl__get32(h + 24) != (uint32_t)c)
    CHUNK_FAIL("sequence number %u, expected %llu", sl__get32(h + 24),
               (unsigned long long)c);
  if (sl__get32(h + 4) != x->records)
    CHUNK_FAIL("%u records, the index says %u", sl__get32(h + 4), x->records);
  *codec = sl__get32(h + 28);
  if (*codec != SLR_CODEC_ZSTD &&
      (*codec != SLR_CODEC_ZSTD_FRAMES || !f->framed) &&
      (*codec != SLR_CODEC_ZSTD_FRAMES_COMPACT || !f->compact))
    CHUNK_FAIL("unknown codec %u%s", *codec,
               *codec == SLR_CODEC_ZSTD_FRAMES
                   ? " (framed chunks need required feature bit 0x1)"
               : *codec == SLR_CODEC_ZSTD_FRAMES_COMPACT
                   ? " (compact framed chunks need required feature bit 0x8)"
                   : "");
  *stored = sl__get64(h + 8);
  *raw = sl__get64(h + 16);
  *payload_crc = sl__get32(h + 32);
  uint64_t end,
      want_end = c + 1 < f->nchunks ? f->index[c + 1].offset : f->chunks_end;
  if (*raw > f->raw_limit)
    CHUNK_FAIL("raw size %llu exceeds the limit of %llu bytes, %s",
               (unsigned long long)*raw, (unsigned long long)f->raw_limit,
               f->limit_from);
  if (*stored > f->stored_limit)
    CHUNK_FAIL("stored size %llu exceeds the limit of %llu bytes (a zstd "
               "frame of at most %llu bytes), %s",
               (unsigned long long)*stored,
               (unsigned long long)f->stored_limit,
               (unsigned long long)f->raw_limit, f->limit_from);
  if (f->ratio_bound && *raw > SLR_RATIO_FREE &&
      *raw / SLR_MAX_RATIO > *stored)
    CHUNK_FAIL("raw size %llu from %llu stored bytes is a ratio above "
               "%d:1, which a file that does not record "
               SLR_META_MAX_CHUNK_RAW " may not claim above %llu bytes; set "
               "max_chunk_bytes to read it",
               (unsigned long long)*raw, (unsigned long long)*stored,
               SLR_MAX_RATIO, (unsigned long long)SLR_RATIO_FREE);
  if (!sl__add_ok(x->offset + SLR_CHUNK_HEADER_SIZE, *stored, &end) ||
      end != want_end)
    CHUNK_FAIL("payload of %llu bytes does not end where the next structure "
               "starts (offset %llu)",
               (unsigned long long)*stored, (unsigned long long)want_end);
  return SL_OK;
}

int sl__slr_check_records(sl_slr_file *f, uint64_t c, uint32_t frame,
                          uint32_t first, const unsigned char *raw,
                          uint64_t raw_size, uint32_t n, size_t *body) {
  const slr_index_entry *x = &f->index[c];
  /* "frame N: " before each message of a frame (made only on failure). */
  char frb[32] = "";
#define fr                                                                     \
  (frame != UINT32_MAX ? (snprintf(frb, sizeof frb, "frame %u: ", frame), frb) \
                       : frb)
  uint64_t table = sl__align_up((uint64_t)n * 4, 8);
  if (table > raw_size)
    CHUNK_FAIL("%soffset table of %u records exceeds the payload", fr, n);
  uint64_t body_size = raw_size - table, prev = 0;
  for (uint32_t r = 0; r < n; r++) {
    uint64_t e = sl__get32(raw + 4 * (size_t)r);
    if (e < prev || e > body_size || e % 8)
      CHUNK_FAIL("%srecord %u: bad end offset %llu", fr, first + r,
                 (unsigned long long)e);
    int rc = sl__slr_record_check(&f->layout, raw + table + prev, e - prev);
    if (rc < 0) {
      char why[512];
      snprintf(why, sizeof why, "%s", sl_last_error());
      CHUNK_FAIL("%srecord %llu: %s", fr,
                 (unsigned long long)(x->first_record + first + r), why);
    }
    prev = e;
  }
  if (prev != body_size)
    CHUNK_FAIL("%srecords end at %llu, the body is %llu bytes", fr,
               (unsigned long long)prev, (unsigned long long)body_size);
  for (uint64_t i = (uint64_t)n * 4; i < table; i++)
    if (raw[i]) CHUNK_FAIL("%snon-zero padding after the offset table", fr);
  *body = (size_t)table;
  return SL_OK;
#undef fr
}

/* Reads a LEB128 varint of at most 5 bytes, below 2^32, from p[at..end):
 * the offset after it, 0 when it is malformed or runs past end. */
static size_t varint32(const unsigned char *p, size_t end, size_t at,
                       uint32_t *v) {
  uint64_t x = 0;
  for (int k = 0; k < 5 && at < end; k++) {
    unsigned char b = p[at++];
    x |= (uint64_t)(b & 0x7f) << (7 * k);
    if (!(b & 0x80)) {
      if (x > UINT32_MAX || (k && !b)) return 0; /* too big, or padded */
      *v = (uint32_t)x;
      return at;
    }
  }
  return 0;
}

/* Records in frame i of a chunk of n records. */
static uint32_t frame_records(const slr_frame_table *t, uint32_t i,
                              uint32_t n) {
  uint64_t first = (uint64_t)i * t->per;
  return (uint32_t)SL_MIN((uint64_t)t->per, n - first);
}

int sl__slr_frame_table(sl_slr_file *f, uint64_t c, uint32_t codec,
                        const unsigned char *p, uint64_t avail,
                        uint64_t stored, uint64_t raw, uint32_t pcrc,
                        uint64_t *need, slr_frame_table **out) {
  *out = NULL;
  *need = 0;
  uint32_t n = f->index[c].records;
  slr_frame_table *t;
  if (!SLR_CODEC_IS_FRAMED(codec)) {
    t = sl__malloc(sizeof *t + sizeof t->fr[0]);
    SL_RETURN_ERROR_IF(!t, SL_ENOMEM, "%s: chunk %llu: cannot allocate",
                       WHERE(f), (unsigned long long)c);
    *t = (slr_frame_table){n, 1, codec};
    t->fr[0] = (slr_frame){0, 0, stored, raw, pcrc};
    *out = t;
    return SL_OK;
  }
  if (stored < SLR_FRAME_TABLE_HEAD)
    CHUNK_FAIL("payload of %llu bytes is too short for a frame table",
               (unsigned long long)stored);
  if (avail < SLR_FRAME_TABLE_HEAD) {
    *need = SLR_FRAME_TABLE_HEAD;
    return SL_OK;
  }
  bool compact = codec == SLR_CODEC_ZSTD_FRAMES_COMPACT;
  uint64_t head = compact ? SLR_COMPACT_TABLE_HEAD : SLR_FRAME_TABLE_HEAD;
  if (compact && stored < head)
    CHUNK_FAIL("payload of %llu bytes is too short for a frame table",
               (unsigned long long)stored);
  if (avail < head) {
    *need = head;
    return SL_OK;
  }
  uint32_t per = sl__get32(p), count = sl__get32(p + 4);
  if (per == 0 || count != (n + (uint64_t)per - 1) / per)
    CHUNK_FAIL("frame table: %u frames of %u records do not hold the "
               "chunk's %u records",
               count, per, n);
  uint64_t table = head + (uint64_t)count * SLR_FRAME_ENTRY_SIZE;
  if (compact) {
    /* Its size is stored; entries take 6 to 14 bytes each. */
    table = sl__get32(p + 8);
    if (table < head + (uint64_t)count * SLR_COMPACT_ENTRY_MIN ||
        table > head + (uint64_t)count * SLR_COMPACT_ENTRY_MAX)
      CHUNK_FAIL("frame table of %llu bytes cannot hold %u entries of 6 to "
                 "14 bytes",
                 (unsigned long long)table, count);
  }
  if (table > stored)
    CHUNK_FAIL("frame table of %u frames (%llu bytes) exceeds the payload of "
               "%llu bytes",
               count, (unsigned long long)table, (unsigned long long)stored);
  if (avail < table) {
    *need = table;
    return SL_OK;
  }
  uint32_t crc = sl__crc32c(0, p, (size_t)table);
  if (crc != pcrc)
    CHUNK_FAIL("frame table CRC mismatch (stored 0x%08x, computed 0x%08x)",
               pcrc, crc);
  t = sl__malloc(sizeof *t + (size_t)count * sizeof t->fr[0]);
  SL_RETURN_ERROR_IF(!t, SL_ENOMEM,
                     "%s: chunk %llu: cannot allocate a table of %u frames",
                     WHERE(f), (unsigned long long)c, count);
  *t = (slr_frame_table){per, count, codec};
  uint64_t off = table, raw_off = 0;
  size_t at = (size_t)head; /* the next entry */
  for (uint32_t i = 0; i < count; i++) {
    slr_frame *fr = &t->fr[i];
    if (!compact) {
      const unsigned char *e = p + at;
      *fr = (slr_frame){off, raw_off, sl__get32(e), sl__get32(e + 4),
                        sl__get32(e + 8)};
      at += SLR_FRAME_ENTRY_SIZE;
    } else {
      uint32_t st, rw;
      size_t a = varint32(p, (size_t)table, at, &st),
             b = a ? varint32(p, (size_t)table, a, &rw) : 0;
      if (!b || b + 4 > table) {
        sl__free(t);
        CHUNK_FAIL("frame table: entry %u at table offset %zu is malformed "
                   "(a size is not a varint below 2^32, or the entry runs "
                   "past the table's %llu bytes)",
                   i, at, (unsigned long long)table);
      }
      *fr = (slr_frame){off, raw_off, st, rw, sl__get32(p + b)};
      at = b + 4;
    }
    uint64_t least = sl__align_up((uint64_t)frame_records(t, i, n) * 4, 8);
    if (fr->stored == 0 || fr->stored > stored - off || fr->raw < least ||
        fr->raw > raw - raw_off) {
      int rc = sl__slr_chunk_fail(
          f, c,
          "frame %u: %llu stored bytes at payload offset %llu and %llu raw "
          "bytes at %llu run past the chunk (%llu stored, %llu raw bytes) or "
          "cannot hold its records",
          i, (unsigned long long)fr->stored, (unsigned long long)off,
          (unsigned long long)fr->raw, (unsigned long long)raw_off,
          (unsigned long long)stored, (unsigned long long)raw);
      sl__free(t);
      return rc;
    }
    off += fr->stored;
    raw_off += fr->raw;
  }
  if (at != table) {
    sl__free(t);
    CHUNK_FAIL("frame table: its %u entries end at byte %zu of its %llu",
               count, at, (unsigned long long)table);
  }
  if (off != stored || raw_off != raw) {
    sl__free(t);
    CHUNK_FAIL("frames take %llu stored and %llu raw bytes, the chunk %llu "
               "and %llu",
               (unsigned long long)off, (unsigned long long)raw_off,
               (unsigned long long)stored, (unsigned long long)raw);
  }
  *out = t;
  return SL_OK;
}

int sl__slr_decoder_init(sl_slr_file *f, slr_decoder *d) {
  *d = (slr_decoder){0};
  d->dctx = ZSTD_createDCtx();
  SL_RETURN_ERROR_IF(!d->dctx, SL_ENOMEM, "%s: cannot create a zstd context",
                     WHERE(f));
  return SL_OK;
}

void sl__slr_decoder_free(slr_decoder *d) {
  ZSTD_freeDCtx(d->dctx);
  ZSTD_freeDDict(d->ddict);
  sl__free(d->win);
  *d = (slr_decoder){0};
}

/* Makes d's window hold a frame of `raw` bytes after the dictionary: a new
 * copy of it and a DDict over that copy (at least 64 KiB of room, doubled
 * as frames need: a file's frames are about one size, so this is once). */
static int window_fit(sl_slr_file *f, uint64_t c, slr_decoder *d,
                      uint64_t raw) {
  if (d->win && raw <= d->room) return SL_OK;
  /* a fetch context's window counts in fetch_bytes (the file's own, in
   * sl__slr_held_bytes) */
  if (d != &f->dec && d->win)
    atomic_fetch_sub(&f->fetch_bytes, f->dict_len + d->room);
  size_t room = d->room ? d->room : (size_t)64 << 10;
  while (room < raw)
    room *= 2;
  ZSTD_freeDDict(d->ddict);
  sl__free(d->win);
  d->ddict = NULL;
  d->room = 0;
  d->win = sl__malloc(f->dict_len + room);
  if (d->win && d != &f->dec)
    atomic_fetch_add(&f->fetch_bytes, f->dict_len + room);
  if (d->win) {
    memcpy(d->win, f->dict, f->dict_len);
    d->ddict = ZSTD_createDDict_advanced(d->win, f->dict_len, ZSTD_dlm_byRef,
                                         ZSTD_dct_auto, ZSTD_defaultCMem);
  }
  if (!d->ddict) {
    if (d->win && d != &f->dec)
      atomic_fetch_sub(&f->fetch_bytes, f->dict_len + room);
    sl__free(d->win);
    d->win = NULL;
    return sl_set_error(SL_ENOMEM,
                        "%s: chunk %llu: cannot allocate %zu bytes to decode "
                        "a frame with the dictionary",
                        WHERE(f), (unsigned long long)c, f->dict_len + room);
  }
  d->room = room;
  return SL_OK;
}

int sl__slr_frame_decode(sl_slr_file *f, uint64_t c, const slr_frame_table *t,
                         uint32_t i, slr_decoder *d, const unsigned char *src,
                         unsigned char *dst, size_t *body) {
  ZSTD_DCtx *dctx = d->dctx;
  const slr_frame *fr = &t->fr[i];
  bool framed = SLR_CODEC_IS_FRAMED(t->codec),
       magicless = t->codec == SLR_CODEC_ZSTD_FRAMES_COMPACT;
  /* Codec 1 keeps version 1.0's messages ("payload CRC mismatch"); a
   * frame is named by number and payload offset (made only on failure). */
  char at[64] = "";
#define AT(sep)                                                                \
  (framed ? (snprintf(at, sizeof at, "frame %u at payload offset %llu%s", i,   \
                      (unsigned long long)fr->off, sep),                       \
             at)                                                               \
          : at)
  uint32_t crc = sl__crc32c(0, src, (size_t)fr->stored);
  if (crc != fr->crc)
    CHUNK_FAIL("%s%sCRC mismatch (stored 0x%08x, computed 0x%08x)", AT(": "),
               framed ? "" : "payload ", fr->crc, crc);
  unsigned long long declared = ZSTD_getFrameContentSize(src, fr->stored);
  if (magicless) {
    ZSTD_frameHeader zh;
    declared = ZSTD_getFrameHeader_advanced(&zh, src, (size_t)fr->stored,
                                            ZSTD_f_zstd1_magicless) != 0
                   ? ZSTD_CONTENTSIZE_ERROR
                   : zh.frameContentSize;
  }
  if (declared != fr->raw) {
    if (declared == ZSTD_CONTENTSIZE_UNKNOWN ||
        declared == ZSTD_CONTENTSIZE_ERROR)
      CHUNK_FAIL("%s is not a zstd frame with a declared size",
                 framed ? AT("") : "payload");
    CHUNK_FAIL("%szstd frame declares %llu bytes, the %s %llu", AT(": "),
               declared, framed ? "frame table" : "header",
               (unsigned long long)fr->raw);
  }
  /* Load the dictionary first so the decode below finds it warm whatever
   * this context decoded before (the header comment says why). */
  size_t fmt = ZSTD_DCtx_setParameter(
      dctx, ZSTD_d_format,
      magicless ? ZSTD_f_zstd1_magicless : ZSTD_f_zstd1);
  if (ZSTD_isError(fmt))
    CHUNK_FAIL("%szstd: %s", AT(": "), ZSTD_getErrorName(fmt));
  /* With a dictionary, the frame is decoded right after the window's copy
   * of it (slr_decoder) and copied out. */
  const ZSTD_DDict *dd = NULL;
  unsigned char *out = dst;
  if (framed && f->dict) {
    SL_FORWARD_IF_ERROR(window_fit(f, c, d, fr->raw));
    dd = d->ddict;
    out = d->win + f->dict_len;
    size_t begun = ZSTD_decompressBegin_usingDDict(dctx, dd);
    if (ZSTD_isError(begun))
      CHUNK_FAIL("%szstd: %s", AT(": "), ZSTD_getErrorName(begun));
  }
  size_t got = ZSTD_decompress_usingDDict(dctx, out, (size_t)fr->raw, src,
                                          (size_t)fr->stored, dd);
  if (ZSTD_isError(got) || got != fr->raw)
    CHUNK_FAIL("%szstd: %s", AT(": "),
               ZSTD_isError(got) ? ZSTD_getErrorName(got)
                                 : "short decompression");
  if (out != dst) memcpy(dst, out, (size_t)fr->raw);
  return sl__slr_check_records(f, c, framed ? i : UINT32_MAX, i * t->per, dst,
                               fr->raw,
                               frame_records(t, i, f->index[c].records), body);
#undef AT
}

/* Start of record j's bytes in a decoded unit whose record table is at
 * `ends` and whose body starts `body` bytes into it. */
static size_t record_start(const unsigned char *ends, size_t body,
                           uint32_t j) {
  return body + (j ? sl__get32(ends + 4 * (size_t)(j - 1)) : 0);
}

int sl__slr_framed_record(sl_slr_file *f, const slr_chunk *ch, uint32_t r,
                          sl_sample **out) {
  const slr_frame_table *t = ch->frames;
  uint32_t i = r / t->per, n = frame_records(t, i, ch->records);
  const unsigned char *ends =
      (const unsigned char *)sl_buffer_data(ch->raw) + t->fr[i].raw_off;
  size_t body = (size_t)sl__align_up((uint64_t)n * 4, 8);
  return sl__slr_record_decode(
      &f->layout, f->schema, ch->raw,
      (size_t)t->fr[i].raw_off + record_start(ends, body, r - i * t->per), out);
}

/* --- the fetch path ------------------------------------------------------- */

int sl__slr_frames_open(sl_slr_file *f) {
  f->tables = sl__calloc((size_t)(f->nchunks ? f->nchunks : 1),
                         sizeof *f->tables);
  SL_RETURN_ERROR_IF(!f->tables, SL_ENOMEM,
                     "%s: cannot allocate the frame tables of %llu chunks",
                     WHERE(f), (unsigned long long)f->nchunks);
  SL_RETURN_ERROR_IF(pthread_mutex_init(&f->fetch_mu, NULL) != 0, SL_ENOMEM,
                     "%s: cannot make a mutex", WHERE(f));
  f->fetch_mu_ok = true;
  return SL_OK;
}

static void ctx_free(slr_fetch_ctx *x) {
  for (int i = 0; i < SLR_FETCH_SLOTS; i++)
    sl_buffer_release(x->slot[i].buf);
  sl__slr_decoder_free(&x->dec);
  sl__free(x->stored);
  sl__free(x);
}

static void region_drop(struct slr_region *g); /* below */

/* Lets the kept chunks go (at close: no fetch runs). */
static void kept_free(sl_slr_file *f) {
  if (!f->kept) return;
  for (uint64_t c = 0; c < f->nchunks; c++) {
    sl_buffer *b = atomic_load(&f->kept[c]);
    if (!sl__slr_kept(b)) continue;
    sl__keep_give(f->keep, sl_buffer_size(b));
    atomic_fetch_sub(&f->keep->kept, 1);
    sl_buffer_release(b);
  }
  sl__free(f->kept);
  f->kept = NULL;
  region_drop(f->region);
  f->region = NULL;
}

void sl__slr_frames_free(sl_slr_file *f) {
  kept_free(f);
  if (f->tables)
    for (uint64_t c = 0; c < f->nchunks; c++)
      sl__free(atomic_load(&f->tables[c]));
  sl__free(f->tables);
  while (f->idle) {
    slr_fetch_ctx *x = f->idle;
    f->idle = x->next;
    ctx_free(x);
  }
  if (f->fetch_mu_ok) pthread_mutex_destroy(&f->fetch_mu);
}

/* Grows a context's scratch buffer to n bytes. */
static int scratch(sl_slr_file *f, slr_fetch_ctx *x, uint64_t n) {
  if (n <= x->cap) return SL_OK;
  unsigned char *p = sl__realloc(x->stored, (size_t)n);
  SL_RETURN_ERROR_IF(!p, SL_ENOMEM, "%s: cannot allocate %llu bytes to fetch",
                     WHERE(f), (unsigned long long)n);
  atomic_fetch_add(&f->fetch_bytes, n - x->cap);
  x->stored = p;
  x->cap = (size_t)n;
  return SL_OK;
}

/* Chunk c's frame table, read and checked on first use and then shared. */
static int chunk_table(sl_slr_file *f, slr_fetch_ctx *x, uint64_t c,
                       const slr_frame_table **out) {
  slr_frame_table *t = atomic_load_explicit(&f->tables[c],
                                            memory_order_acquire);
  if (t) {
    *out = t;
    return SL_OK;
  }
  uint64_t stored, raw, need = 0, at = f->index[c].offset + SLR_CHUNK_HEADER_SIZE;
  uint32_t pcrc, codec;
  SL_FORWARD_IF_ERROR(sl__slr_chunk_header(f, c, &stored, &raw, &pcrc, &codec));
  for (;;) {
    SL_FORWARD_IF_ERROR(sl__slr_frame_table(f, c, codec, x->stored, need,
                                            stored, raw, pcrc, &need, &t));
    if (t) break;
    SL_FORWARD_IF_ERROR(scratch(f, x, need));
    SL_FORWARD_IF_ERROR(f->src->read_at(f->src, at, x->stored, (size_t)need));
  }
  slr_frame_table *none = NULL;
  if (!atomic_compare_exchange_strong(&f->tables[c], &none, t)) {
    sl__free(t); /* another thread published it first */
    t = none;
  }
  *out = t;
  return SL_OK;
}

static slr_fetch_ctx *ctx_get(sl_slr_file *f) {
  pthread_mutex_lock(&f->fetch_mu);
  slr_fetch_ctx *x = f->idle;
  if (x) f->idle = x->next;
  pthread_mutex_unlock(&f->fetch_mu);
  if (x) return x;
  x = sl__calloc(1, sizeof *x);
  if (x && sl__slr_decoder_init(f, &x->dec) < 0) {
    sl__free(x);
    x = NULL;
  }
  if (x)
    atomic_fetch_add(&f->fetch_bytes,
                     sizeof *x + ZSTD_sizeof_DCtx(x->dec.dctx));
  if (!x) sl_set_error(SL_ENOMEM, "%s: cannot allocate a fetch context",
                       WHERE(f));
  return x;
}

static void ctx_put(sl_slr_file *f, slr_fetch_ctx *x) {
  pthread_mutex_lock(&f->fetch_mu);
  x->next = f->idle;
  f->idle = x;
  pthread_mutex_unlock(&f->fetch_mu);
}

/* One frame decoded from the file's memory map (source.h's view): no
 * read, no copy of the stored bytes.  The CRC and the decode read the map
 * under sl__sigbus_guard, so a file truncated under us is SL_EIO "file
 * shrank", as read_at says it, not a SIGBUS. */
typedef struct mapped_job {
  sl_slr_file *f;
  uint64_t c;
  const slr_frame_table *t;
  uint32_t i;
  slr_decoder *dec;
  const unsigned char *src;
  unsigned char *dst;
  size_t *body;
} mapped_job;

static int mapped_run(void *p) {
  mapped_job *j = p;
  return sl__slr_frame_decode(j->f, j->c, j->t, j->i, j->dec, j->src, j->dst,
                              j->body);
}

static int mapped_decode(sl_slr_file *f, slr_fetch_ctx *x, uint64_t c,
                         const slr_frame_table *t, uint32_t i,
                         const unsigned char *src, unsigned char *dst,
                         size_t *body) {
  mapped_job j = {f, c, t, i, &x->dec, src, dst, body};
  bool faulted;
  int rc = sl__sigbus_guard(mapped_run, &j, &faulted);
  if (faulted)
    return sl_set_error(SL_EIO,
                        "%s: file shrank: chunk %llu, frame %u at offset "
                        "%llu could not be read (it was %llu bytes when "
                        "opened)",
                        WHERE(f), (unsigned long long)c, i,
                        (unsigned long long)(f->index[c].offset +
                                             SLR_CHUNK_HEADER_SIZE +
                                             t->fr[i].off),
                        (unsigned long long)f->src->size);
  return rc;
}

/* Frame i of chunk c decoded and checked into dst (its raw bytes), from
 * the file's map or read into x's scratch buffer. */
static int decode_frame(sl_slr_file *f, slr_fetch_ctx *x, uint64_t c,
                        const slr_frame_table *t, uint32_t i,
                        unsigned char *dst, size_t *body) {
  const slr_frame *fr = &t->fr[i];
  uint64_t at = f->index[c].offset + SLR_CHUNK_HEADER_SIZE + fr->off;
  const unsigned char *map = f->src->view ? f->src->view(f->src) : NULL;
  atomic_fetch_add_explicit(&f->fetch_decodes, 1, memory_order_relaxed);
  if (map) return mapped_decode(f, x, c, t, i, map + at, dst, body);
  SL_FORWARD_IF_ERROR(scratch(f, x, fr->stored));
  SL_FORWARD_IF_ERROR(
      f->src->read_at(f->src, at, x->stored, (size_t)fr->stored));
  return sl__slr_frame_decode(f, c, t, i, &x->dec, x->stored, dst, body);
}

/* Record r of chunk c from a buffer holding its frame i's raw bytes at
 * offset `at`, whose record table is `body` bytes long. */
static int frame_record(sl_slr_file *f, const slr_frame_table *t, uint32_t i,
                        sl_buffer *b, size_t at, size_t body, uint32_t r,
                        sl_sample **out) {
  const unsigned char *ends = (const unsigned char *)sl_buffer_data(b) + at;
  return sl__slr_record_decode(&f->layout, f->schema, b,
                               at + record_start(ends, body, r - i * t->per),
                               out);
}

/* Record r of chunk c from its kept decoded chunk b (every frame at its
 * raw offset, checked when it was decoded). */
static int kept_record(sl_slr_file *f, const slr_frame_table *t, uint64_t c,
                       sl_buffer *b, uint32_t r, sl_sample **out) {
  uint32_t i = r / t->per;
  uint64_t n = frame_records(t, i, f->index[c].records);
  return frame_record(f, t, i, b, (size_t)t->fr[i].raw_off,
                      (size_t)sl__align_up(n * 4, 8), r, out);
}

/* --- kept chunks' memory --------------------------------------------------
 * Kept chunks are cut from regions of SLR_REGION bytes (or one chunk's, if
 * larger), aligned to 2 MiB and advised for transparent huge pages: a
 * first pass over a file that fits touches every kept byte once, and 4 KiB
 * pages made that a page fault every 4 KiB (about a tenth of the pass).  A
 * region is freed when the last chunk cut from it is released (the file
 * keeps its current region until it closes).  The slack at a region's end
 * is never touched, so it is not memory in use. */
#define SLR_REGION ((size_t)16 << 20)
#define SLR_HUGE ((size_t)2 << 20)

typedef struct slr_region {
  sl__refcnt refs; /* the file's (while current) and each chunk's */
  size_t size, used;
  unsigned char *mem;
} slr_region;

static void region_drop(slr_region *g) {
  if (!g || !sl__ref_dec(&g->refs)) return;
  sl__free(g->mem);
  sl__free(g);
}

static void region_free_fn(void *ud, void *data) {
  (void)data;
  region_drop(ud);
}

/* A buffer of n bytes cut from the file's current region (a new region
 * when it has no room), or NULL (SL_ENOMEM, no message).  Any thread. */
static sl_buffer *region_buffer(sl_slr_file *f, size_t want) {
  size_t n = (want + 63) & ~(size_t)63; /* the next cut 64-byte aligned */
  pthread_mutex_lock(&f->fetch_mu);
  slr_region *g = f->region;
  if (!g || g->size - g->used < n) {
    slr_region *ng = sl__calloc(1, sizeof *ng);
    size_t size = SL_MAX(SLR_REGION, (n + SLR_HUGE - 1) & ~(SLR_HUGE - 1));
    if (ng) ng->mem = sl__aligned_alloc(SLR_HUGE, size);
    if (ng && ng->mem) {
#ifdef MADV_HUGEPAGE
      madvise(ng->mem, size, MADV_HUGEPAGE); /* advice: failure is fine */
#endif
      sl__ref_init(&ng->refs);
      ng->size = size;
      region_drop(f->region);
      f->region = g = ng;
    } else {
      if (ng) sl__free(ng);
      g = NULL;
    }
  }
  sl_buffer *b = NULL;
  if (g) {
    sl__ref_inc(&g->refs);
    b = sl_buffer_wrap(g->mem + g->used, want, region_free_fn, g);
    if (b)
      g->used += n;
    else
      sl__ref_dec(&g->refs); /* the file still holds it */
  }
  pthread_mutex_unlock(&f->fetch_mu);
  return b;
}

/* Chunk c decoded whole and kept (core/keep.h), when the allowance and
 * the room allow and every frame of it decodes: *out the kept chunk (the
 * file holds it), or NULL when it is not kept - the caller then decodes
 * the record's frame alone, which gives that frame's own verdict (a
 * damaged frame elsewhere in the chunk does not fail it).  One thread
 * decodes a chunk (it claims the entry: SLR_KEPT_BUSY); a chunk with a
 * damaged frame (SL_ECORRUPT) is marked SLR_KEPT_BAD and never tried
 * again; one that found no room, no memory or a read error may be tried at
 * a later fetch.  A chunk is the unit so
 * that a pass over a file in any order decodes every frame once, chunk by
 * chunk, as a sequential pass does. */
static void keep_chunk(sl_slr_file *f, slr_fetch_ctx *x, uint64_t c,
                       const slr_frame_table *t, sl_buffer **out) {
  *out = NULL;
  const slr_frame *last = &t->fr[t->count - 1];
  uint64_t raw = SL_MAX(last->raw_off + last->raw, 8);
  if (!sl__keep_take(f->keep, raw)) return;
  sl_buffer *cur = NULL;
  if (!f->keep_room(f->keep_ud, f->keep, raw) ||
      !atomic_compare_exchange_strong(&f->kept[c], &cur, SLR_KEPT_BUSY)) {
    sl__keep_give(f->keep, raw); /* no room, or another thread has it */
    if (sl__slr_kept(cur)) *out = cur;
    return;
  }
  sl_buffer *b = region_buffer(f, (size_t)raw);
  int rc = b ? SL_OK : SL_ENOMEM;
  for (uint32_t i = 0; i < t->count && rc == SL_OK; i++) {
    size_t body;
    rc = decode_frame(f, x, c, t, i,
                      (unsigned char *)sl_buffer_data(b) + t->fr[i].raw_off,
                      &body);
  }
  if (rc == SL_OK) {
    atomic_fetch_add(&f->fetch_bytes, raw);
    atomic_fetch_add(&f->keep->kept, 1);
    atomic_store_explicit(&f->kept[c], b, memory_order_release);
    *out = b;
    return;
  }
  /* a frame failed its checks: never again; out of memory or a read
   * error: tried again at a later fetch */
  atomic_store_explicit(&f->kept[c], rc == SL_ECORRUPT ? SLR_KEPT_BAD : NULL,
                        memory_order_release);
  sl_buffer_release(b);
  sl__keep_give(f->keep, raw);
  sl_clear_error();
}

/* Record k (chunk c, record r of it) through context x. */
static int fetch(sl_slr_file *f, slr_fetch_ctx *x, uint64_t c, uint32_t r,
                 sl_sample **out) {
  const slr_frame_table *t;
  SL_FORWARD_IF_ERROR(chunk_table(f, x, c, &t));
  if (f->kept) {
    sl_buffer *b = atomic_load_explicit(&f->kept[c], memory_order_acquire);
    if (!b) keep_chunk(f, x, c, t, &b);
    if (sl__slr_kept(b)) return kept_record(f, t, c, b, r, out);
  }
  uint32_t i = r / t->per;
  fetch_slot *s = NULL;
  for (int k = 0; k < SLR_FETCH_SLOTS && !s; k++)
    if (x->slot[k].buf && x->slot[k].chunk == c && x->slot[k].frame == i)
      s = &x->slot[k];
  if (!s) {
    const slr_frame *fr = &t->fr[i];
    s = &x->slot[x->hand++ % SLR_FETCH_SLOTS];
    /* The slot's buffer is reused when no sample holds it any more. */
    if (s->buf && (sl__buffer_refcount(s->buf) != 1 ||
                   sl_buffer_size(s->buf) < fr->raw)) {
      atomic_fetch_sub(&f->fetch_bytes, sl_buffer_size(s->buf));
      sl_buffer_release(s->buf);
      s->buf = NULL;
    }
    if (!s->buf) {
      s->buf = sl_buffer_new((size_t)SL_MAX(fr->raw, 8));
      if (s->buf) atomic_fetch_add(&f->fetch_bytes, sl_buffer_size(s->buf));
    }
    SL_RETURN_ERROR_IF(!s->buf, SL_ENOMEM,
                       "%s: chunk %llu: cannot allocate %llu bytes for frame "
                       "%u",
                       WHERE(f), (unsigned long long)c,
                       (unsigned long long)fr->raw, i);
    s->chunk = UINT64_MAX; /* empty until decoded and checked */
    SL_FORWARD_IF_ERROR(
        decode_frame(f, x, c, t, i, sl_buffer_data(s->buf), &s->body));
    s->chunk = c;
    s->frame = i;
  }
  return frame_record(f, t, i, s->buf, 0, s->body, r, out);
}

int sl__slr_keep(sl_slr_file *f, sl__keep *k,
                 bool (*room)(void *ud, const sl__keep *k, uint64_t n),
                 void *ud) {
  if (f->kept) return SL_OK;
  f->kept = sl__calloc((size_t)(f->nchunks ? f->nchunks : 1),
                       sizeof *f->kept);
  SL_RETURN_ERROR_IF(!f->kept, SL_ENOMEM,
                     "%s: cannot allocate the kept chunks of %llu chunks",
                     WHERE(f), (unsigned long long)f->nchunks);
  f->keep = k;
  f->keep_room = room;
  f->keep_ud = ud;
  atomic_fetch_add(&k->units, f->nchunks);
  return SL_OK;
}

uint64_t sl__slr_fetch_decodes(const sl_slr_file *f) {
  return atomic_load_explicit(&f->fetch_decodes, memory_order_relaxed);
}

uint64_t sl__slr_fetch_bytes(const sl_slr_file *f) {
  return atomic_load_explicit(&f->fetch_bytes, memory_order_relaxed);
}

int sl_slr_fetch(sl_slr_file *f, uint64_t k, sl_sample **out) {
  SL_RETURN_ERROR_IF(!f || !out, SL_EINVAL, "slr: NULL file or out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(k >= f->records, SL_EINVAL,
                     "%s: record %llu is out of range (%llu records)", WHERE(f),
                     (unsigned long long)k, (unsigned long long)f->records);
  uint64_t c = sl_slr_chunk_of(f, k);
  uint32_t r = (uint32_t)(k - f->index[c].first_record);
  if (f->kept) { /* a kept chunk needs no fetch context */
    sl_buffer *b = atomic_load_explicit(&f->kept[c], memory_order_acquire);
    if (sl__slr_kept(b))
      return kept_record(f, atomic_load_explicit(&f->tables[c],
                                                 memory_order_acquire),
                         c, b, r, out);
  }
  slr_fetch_ctx *x = ctx_get(f);
  if (!x) return SL_ENOMEM;
  int rc = fetch(f, x, c, r, out);
  ctx_put(f, x);
  return rc;
}

int sl_slr_chunk_frames(sl_slr_file *f, uint64_t c, uint32_t *frame_records,
                        uint32_t *frames) {
  SL_RETURN_ERROR_IF(!f || !frame_records || !frames || c >= f->nchunks,
                     SL_EINVAL, "slr: chunk %llu out of range",
                     (unsigned long long)c);
  slr_fetch_ctx *x = ctx_get(f);
  if (!x) return SL_ENOMEM;
  const slr_frame_table *t;
  int rc = chunk_table(f, x, c, &t);
  ctx_put(f, x);
  SL_FORWARD_IF_ERROR(rc);
  *frame_records = t->per;
  *frames = t->count;
  return SL_OK;
}

uint64_t sl_slr_dict_size(const sl_slr_file *f) {
  return f && f->dict_size ? f->dict_size - SLR_DICT_HEAD - 4 : 0;
}
