/*
 * slr_writer.c - writes SLR files (docs/FORMAT.md).
 *
 * Records are encoded into a growing body buffer with their end offsets;
 * when the chunk is full (target raw bytes, or a fixed record count) the
 * offset table and the body are fed to one zstd frame through the streaming
 * API with the raw size pledged up front (so the frame declares its content
 * size and no copy joins table and body), and the chunk header + payload are
 * written.  Close writes the schema block, the index and the footer, syncs,
 * and renames the temporary file to the final name: until then the final
 * name does not exist, so a crash never leaves a complete-looking file.
 *
 * The file is written through the output path (output.h): a unique
 * temporary name created O_EXCL | O_NOFOLLOW, registered for the signal
 * handlers, renamed when complete.  A writer opened by sl_slr_writer_open
 * owns its file; the shard sink (import_sink.c) opens its writers on the
 * files of an output set, which renames them together once every one is
 * finished.  Close is two steps for the sink: finish (everything written
 * and synced under the temporary name) and the set's commit.
 *
 * Compression is fed in ZSTD_BLOCKSIZE_MAX slices with the cancel flag
 * (sl__slr_writer_set_cancel) checked between them, so a chunk of 256 MiB at
 * level 19 stops within one block's time.  Chunks count their record table
 * against the target and never exceed SLR_WRITER_MAX_RAW; the largest raw
 * size written is recorded as sluice.max_chunk_raw, with the set identity
 * (sluice.set_id, sluice.set_size, sluice.set_index).
 */
#include "core/crc32c.h"
#include "formats/slr_format.h"

#include "pack/import.h"

#include <signal.h>
#include <zdict.h>
/* ZSTD_c_format (compact frames; zstd.h's static-linking section). */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

/* A chunk's raw size (record table + body) never exceeds this: what every
 * reader accepts (docs/FORMAT.md, "Chunk size limits"). */
#define SLR_WRITER_MAX_RAW ((uint64_t)1 << 30)
/* Compression input per step between two checks of the cancel flag. */
#define CANCEL_SLICE ((size_t)ZSTD_BLOCKSIZE_MAX)
/* Framed files: raw bytes per frame when frame_records is not given, the
 * dictionary size and the records buffered to train it by default. */
#define FRAME_TARGET 4096
#define DICT_DEFAULT ((size_t)112640)
#define DICT_SAMPLE_DEFAULT ((size_t)8 << 20)
#define DICT_SAMPLE_MAX ((size_t)1 << 30)

typedef struct index_entry {
  uint64_t offset, first_record;
  uint32_t records, header_crc;
} index_entry;

struct sl_slr_writer {
  char *path;
  sl__out_file *file; /* the output, under its temporary name */
  bool own_file;      /* opened by sl_slr_writer_open: freed with it */
  bool finished;      /* finish() done: complete under the temporary name */
  const volatile sig_atomic_t *cancel; /* non-zero: stop (may be NULL) */
  char set_id[SL__SET_ID_LEN + 1];
  uint32_t set_size, set_index;
  uint64_t max_raw; /* largest chunk raw size written */
  sl_schema *schema;
  slr_layout layout;
  int level;
  bool level_given; /* opts.level was set: else the default, 3 or, with a
                       dictionary, SL_SLR_DICT_LEVEL */
  size_t chunk_bytes;
  uint32_t records_per_chunk;
  ZSTD_CCtx *cctx;
  /* framed files: records per frame (0 until chosen), the dictionary, and
   * while it is being trained (dict auto) the chunks buffered for it */
  bool started; /* the file header is written */
  bool framed, training, compact;
  uint32_t frame_records;
  unsigned char *dict;
  size_t dict_len, dict_max, sample_bytes;
  ZSTD_CDict *cdict;
  unsigned char *fbuf; /* one frame's raw bytes */
  size_t fbuf_cap;
  uint32_t *cuts; /* ends (record numbers) of complete buffered chunks */
  size_t ncuts, cuts_cap;
  uint32_t cur; /* first record of the chunk being built */
  /* the records buffered: the chunk being built, and while training the
   * complete chunks before it; ends are offsets from the buffer start */
  unsigned char *body;
  size_t body_len, body_cap;
  uint32_t *ends;
  uint32_t nrec, ends_cap;
  unsigned char *out;
  size_t out_cap;
  /* the file so far */
  uint64_t records;
  index_entry *index;
  uint64_t nchunks, index_cap;
  bool failed;
};

static int write_all(sl_slr_writer *w, const void *data, size_t n) {
  int rc = sl__out_write(w->file, data, n);
  if (rc < 0) w->failed = true;
  return rc;
}

static void writer_free(sl_slr_writer *w) {
  if (w->own_file) sl__out_abort(w->file);
  ZSTD_freeCCtx(w->cctx);
  ZSTD_freeCDict(w->cdict);
  sl__slr_layout_free(&w->layout);
  sl_schema_release(w->schema);
  SL__FREE(w->dict, w->fbuf, w->cuts);
  SL__FREE(w->body, w->ends, w->out, w->index, w->path, w);
}

void sl_slr_writer_abort(sl_slr_writer *w) {
  if (w) writer_free(w); /* removes its own file; a set's file is the set's */
}

/* Opens a writer on `file` (the set's when own is false, else taken). */
static int writer_open(sl__out_file *file, bool own, sl_schema *schema,
                       const sl_slr_writer_opts *opts, sl_slr_writer **out) {
  const char *path = sl__out_name(file);
  sl_slr_writer_opts o = opts ? *opts : (sl_slr_writer_opts){0};
  bool level_given = o.level != 0;
  if (o.level == 0) o.level = 3;
  if (o.chunk_bytes == 0) o.chunk_bytes = (size_t)1 << 20;
  sl_slr_writer *w = sl__calloc(1, sizeof *w);
  if (!w) {
    /* The message first: `path` is the file's, freed by the abort. */
    int e = sl_set_error(SL_ENOMEM, "slr writer: %s: cannot allocate", path);
    if (own) sl__out_abort(file);
    return e;
  }
  w->file = file;
  w->own_file = own;
  w->level = o.level;
  w->level_given = level_given;
  w->chunk_bytes = o.chunk_bytes;
  w->records_per_chunk = o.records_per_chunk;
  sl_schema_freeze(schema);
  w->schema = sl_schema_retain(schema);
  w->path = sl__strdup(path);
  w->cctx = ZSTD_createCCtx();
  if (!w->path || !w->cctx) {
    int e = sl_set_error(SL_ENOMEM, "slr writer: %s: cannot allocate", path);
    writer_free(w);
    return e;
  }
  sl__new_set_id(w->set_id); /* a set of one until told otherwise */
  w->set_size = 1;
  int rc = sl__slr_layout_init(&w->layout, schema);
  if (rc < 0) {
    rc = sl_wrap_error(rc, "slr writer: %s", path);
    writer_free(w);
    return rc;
  }
  *out = w;
  return SL_OK;
}

/* The file header, written before the first chunk (or the footer of a file
 * without chunks), once the frame options are known. */
static int start(sl_slr_writer *w) {
  if (w->started) return SL_OK;
  unsigned char h[SLR_HEADER_SIZE] = {0};
  memcpy(h, sl__slr_magic, 8);
  sl__put16(h + 8, SLR_MAJOR);
  sl__put16(h + 10, w->framed ? SLR_MINOR_FRAMES : SLR_MINOR);
  sl__put32(h + 12, (w->framed ? SLR_FEATURE_FRAMES : 0) |
                        (w->compact ? SLR_FEATURE_COMPACT_FRAMES : 0));
  sl__put32(h + 28, sl__crc32c(0, h, 28));
  SL_FORWARD_IF_ERROR(write_all(w, h, sizeof h));
  w->started = true;
  return SL_OK;
}

int sl_slr_writer_set_frames(sl_slr_writer *w, const sl_slr_frame_opts *opts) {
  SL_RETURN_ERROR_IF(!w, SL_EINVAL, "slr writer: NULL writer");
  SL_RETURN_ERROR_IF(w->records || w->started || w->failed, SL_ESTATE,
                     "slr writer: %s: frame options are set before the first "
                     "record",
                     w->path);
  sl_slr_frame_opts o = opts ? *opts : (sl_slr_frame_opts){0};
  SL_RETURN_ERROR_IF(
      (unsigned)o.dict > SL_SLR_DICT_GIVEN ||
          (o.dict == SL_SLR_DICT_GIVEN &&
           (!o.dict_data || o.dict_size == 0 || o.dict_size > SLR_MAX_DICT)),
      SL_EINVAL, "slr writer: %s: dictionary mode %d wants %s", w->path,
      (int)o.dict,
      (unsigned)o.dict > SL_SLR_DICT_GIVEN
          ? "one of SL_SLR_DICT_NONE, _AUTO, _GIVEN"
          : "dict_data and 1 byte to 16 MiB of dict_size");
  SL_RETURN_ERROR_IF(
      o.dict_max_bytes > SLR_MAX_DICT ||
          (o.dict_max_bytes && o.dict_max_bytes < 256) ||
          o.dict_sample_bytes > DICT_SAMPLE_MAX,
      SL_EINVAL,
      "slr writer: %s: dictionary size %zu is outside 256 B..16 MiB or its "
      "sample of %zu bytes exceeds 1 GiB",
      w->path, o.dict_max_bytes, o.dict_sample_bytes);
  ZSTD_freeCDict(w->cdict);
  sl__free(w->dict);
  w->cdict = NULL;
  w->dict = NULL;
  w->dict_len = 0;
  w->framed = o.frame_records > 0 || o.dict != SL_SLR_DICT_NONE || o.compact;
  /* Frames compressed with a dictionary default to a higher level: it
   * costs compression time only (docs/PERFORMANCE.md, "Level 15 by default
   * with a dictionary": the ratio rises ~12 % and decoding is no slower). */
  if (!w->level_given)
    w->level = o.dict != SL_SLR_DICT_NONE ? SL_SLR_DICT_LEVEL : 3;
  w->compact = o.compact != 0;
  w->frame_records = o.frame_records;
  w->training = o.dict == SL_SLR_DICT_AUTO;
  w->dict_max = o.dict_max_bytes ? o.dict_max_bytes : DICT_DEFAULT;
  w->sample_bytes =
      o.dict_sample_bytes ? o.dict_sample_bytes : DICT_SAMPLE_DEFAULT;
  if (o.dict != SL_SLR_DICT_GIVEN) return SL_OK;
  w->dict = sl__malloc(o.dict_size);
  SL_RETURN_ERROR_IF(!w->dict, SL_ENOMEM,
                     "slr writer: %s: cannot allocate the dictionary", w->path);
  memcpy(w->dict, o.dict_data, o.dict_size);
  w->dict_len = o.dict_size;
  w->cdict = ZSTD_createCDict(w->dict, w->dict_len, w->level);
  SL_RETURN_ERROR_IF(!w->cdict, SL_EINVAL,
                     "slr writer: %s: zstd cannot load the given %zu-byte "
                     "dictionary",
                     w->path, o.dict_size);
  return SL_OK;
}

/* Checks what writer_open needs before a file is created. */
static int check_open(const char *path, const sl_schema *schema,
                      const sl_slr_writer_opts *opts, sl_slr_writer **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "slr writer: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!path || !*path || !schema, SL_EINVAL,
                     "slr writer: NULL path or schema");
  SL_RETURN_ERROR_IF(sl_schema_nfields(schema) == 0, SL_EINVAL,
                     "slr writer: %s: the schema has no fields", path);
  int level = opts && opts->level ? opts->level : 3;
  SL_RETURN_ERROR_IF(level < 1 || level > ZSTD_maxCLevel(), SL_EINVAL,
                     "slr writer: %s: zstd level %d is outside 1..%d", path,
                     level, ZSTD_maxCLevel());
  SL_RETURN_ERROR_IF(opts && opts->chunk_bytes > ((size_t)1 << 30), SL_EINVAL,
                     "slr writer: %s: chunk size %zu exceeds 1 GiB", path,
                     opts->chunk_bytes);
  return SL_OK;
}

int sl_slr_writer_open(const char *path, sl_schema *schema,
                       const sl_slr_writer_opts *opts, sl_slr_writer **out) {
  SL_FORWARD_IF_ERROR(check_open(path, schema, opts, out));
  sl__out_file *f;
  SL_FORWARD_IF_ERROR(sl__out_open("slr writer", path, &f));
  return writer_open(f, true, schema, opts, out);
}

int sl__slr_writer_open_on(sl__out_file *file, sl_schema *schema,
                           const sl_slr_writer_opts *opts,
                           sl_slr_writer **out) {
  SL_FORWARD_IF_ERROR(
      check_open(file ? sl__out_name(file) : NULL, schema, opts, out));
  return writer_open(file, false, schema, opts, out);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return SL_OK;
  size_t c = *cap ? *cap : 64;
  while (c < need)
    c *= 2;
  void *q = sl__realloc(*p, c * elem);
  SL_RETURN_ERROR_IF(!q, SL_ENOMEM, "slr writer: cannot grow a buffer to %zu",
                     c * elem);
  *p = q;
  *cap = c;
  return SL_OK;
}

/* Raw size of a chunk of n records whose bodies take `body` bytes. */
static uint64_t chunk_raw(uint64_t n, uint64_t body) {
  return sl__align_up(n * 4, 8) + body;
}

/* Byte offset of buffered record r's start. */
static size_t rec_start(const sl_slr_writer *w, uint32_t r) {
  return r ? w->ends[r - 1] : 0;
}

/* Writes `part` (total bytes n) as one zstd frame into w->out from *pos, the
 * raw size pledged so that the frame declares it; the cancel flag is
 * checked between slices of CANCEL_SLICE bytes. */
static int compress_frame(sl_slr_writer *w, const void *const part[2],
                          const size_t part_len[2], size_t *pos) {
  size_t raw = part_len[0] + part_len[1];
  ZSTD_CCtx_reset(w->cctx, ZSTD_reset_session_only);
  ZSTD_CCtx_setPledgedSrcSize(w->cctx, raw);
  ZSTD_outBuffer ob = {w->out, w->out_cap, *pos};
  size_t zr = 0;
  for (int k = 0; k < 2 && !ZSTD_isError(zr); k++) {
    ZSTD_inBuffer in = {part[k], 0, 0};
    while (in.pos < part_len[k] && !ZSTD_isError(zr)) {
      if (w->cancel && *w->cancel)
        return sl_set_error(SL_EKILLED,
                            "slr writer: %s: chunk %llu: interrupted while "
                            "compressing",
                            w->path, (unsigned long long)w->nchunks);
      in.size = SL_MIN(part_len[k], in.pos + CANCEL_SLICE);
      zr = ZSTD_compressStream2(w->cctx, &ob, &in, ZSTD_e_continue);
    }
  }
  ZSTD_inBuffer none = {NULL, 0, 0};
  while (!ZSTD_isError(zr) &&
         (zr = ZSTD_compressStream2(w->cctx, &ob, &none, ZSTD_e_end)) != 0 &&
         !ZSTD_isError(zr))
    ;
  if (ZSTD_isError(zr)) {
    w->failed = true;
    return sl_set_error(SL_EIO, "slr writer: %s: zstd: %s",
                        sl__out_temp_name(w->file), ZSTD_getErrorName(zr));
  }
  *pos = ob.pos;
  return SL_OK;
}

/* Compresses records [r0, r1) of the buffer as one unit: their record
 * table (end offsets from the unit's body start, padded to 8), then their
 * bytes.  Its raw size in *raw. */
static int compress_unit(sl_slr_writer *w, uint32_t r0, uint32_t r1,
                         size_t *pos, uint64_t *raw) {
  size_t n = r1 - r0, table = sl__align_up((uint64_t)n * 4, 8);
  size_t base = rec_start(w, r0), len = w->ends[r1 - 1] - base;
  SL_FORWARD_IF_ERROR(grow((void **)&w->fbuf, &w->fbuf_cap, table, 1));
  memset(w->fbuf, 0, table);
  for (size_t i = 0; i < n; i++)
    sl__put32(w->fbuf + 4 * i, (uint32_t)(w->ends[r0 + i] - base));
  size_t cap = w->out_cap;
  SL_FORWARD_IF_ERROR(
      grow((void **)&w->out, &cap, *pos + ZSTD_compressBound(table + len), 1));
  w->out_cap = cap;
  const void *part[2] = {w->fbuf, w->body + base};
  size_t part_len[2] = {table, len};
  *raw = table + len;
  return compress_frame(w, part, part_len, pos);
}

/* Unless given, frames of about FRAME_TARGET raw bytes, from the size of
 * buffered records [r0, r1) and their table entries; kept for the file. */
static void choose_frame_records(sl_slr_writer *w, uint32_t r0, uint32_t r1) {
  if (w->frame_records) return;
  uint64_t avg = (w->ends[r1 - 1] - rec_start(w, r0)) / (r1 - r0) + 4;
  w->frame_records = (uint32_t)SL_MAX(1, FRAME_TARGET / avg);
}

/* Writes v as a LEB128 varint at p: the bytes written (1..5). */
static size_t put_varint(unsigned char *p, uint32_t v) {
  size_t k = 0;
  while (v >= 0x80) {
    p[k++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  p[k++] = (unsigned char)v;
  return k;
}

/* Writes records [r0, r1) of the buffer as a chunk: one zstd frame, or a
 * frame table and frames of frame_records records (docs/FORMAT.md). */
static int emit_chunk(sl_slr_writer *w, uint32_t r0, uint32_t r1) {
  SL_FORWARD_IF_ERROR(start(w));
  uint32_t n = r1 - r0;
  uint64_t raw = 0;
  size_t pos = 0;
  uint32_t codec = SLR_CODEC_ZSTD, pcrc;
  ZSTD_CCtx_reset(w->cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, w->level);
  ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_contentSizeFlag, 1);
  if (!w->framed) {
    SL_FORWARD_IF_ERROR(compress_unit(w, r0, r1, &pos, &raw));
    pcrc = sl__crc32c(0, w->out, pos);
  } else {
    bool compact = w->compact;
    codec = compact ? SLR_CODEC_ZSTD_FRAMES_COMPACT : SLR_CODEC_ZSTD_FRAMES;
    choose_frame_records(w, r0, r1);
    /* The frame's dictionary ID is left out: the file has one dictionary;
     * compact frames leave out zstd's magic number too. */
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_dictIDFlag, 0);
    if (compact)
      ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_format, ZSTD_f_zstd1_magicless);
    if (w->cdict) ZSTD_CCtx_refCDict(w->cctx, w->cdict);
    uint32_t per = w->frame_records, count = (n + per - 1) / per;
    /* The frames go after room for the largest table; a compact table's
     * entries (varints) are written as the frames are made, then the
     * frames moved up to where it ends. */
    size_t head = compact ? SLR_COMPACT_TABLE_HEAD : SLR_FRAME_TABLE_HEAD,
           table = head + (size_t)count * (compact ? SLR_COMPACT_ENTRY_MAX
                                                   : SLR_FRAME_ENTRY_SIZE),
           e = head;
    size_t cap = w->out_cap;
    SL_FORWARD_IF_ERROR(grow((void **)&w->out, &cap, table, 1));
    w->out_cap = cap;
    pos = table;
    for (uint32_t i = 0; i < count; i++) {
      uint32_t a = r0 + i * per, b = (uint32_t)SL_MIN((uint64_t)a + per, r1);
      size_t at = pos;
      uint64_t fraw;
      SL_FORWARD_IF_ERROR(compress_unit(w, a, b, &pos, &fraw));
      if (compact) {
        e += put_varint(w->out + e, (uint32_t)(pos - at));
        e += put_varint(w->out + e, (uint32_t)fraw);
      } else {
        sl__put32(w->out + e, (uint32_t)(pos - at));
        sl__put32(w->out + e + 4, (uint32_t)fraw);
        e += 8;
      }
      sl__put32(w->out + e, sl__crc32c(0, w->out + at, pos - at));
      e += 4;
      raw += fraw;
    }
    if (e < table) { /* a compact table: close the gap */
      memmove(w->out + e, w->out + table, pos - table);
      pos -= table - e;
      table = e;
    }
    sl__put32(w->out, per);
    sl__put32(w->out + 4, count);
    if (compact) sl__put32(w->out + 8, (uint32_t)table);
    pcrc = sl__crc32c(0, w->out, table);
  }
  unsigned char h[SLR_CHUNK_HEADER_SIZE];
  sl__put32(h, SLR_CHUNK_MAGIC);
  sl__put32(h + 4, n);
  sl__put64(h + 8, pos);
  sl__put64(h + 16, raw);
  sl__put32(h + 24, (uint32_t)w->nchunks);
  sl__put32(h + 28, codec);
  sl__put32(h + 32, pcrc);
  uint32_t hcrc = sl__crc32c(0, h, 36);
  sl__put32(h + 36, hcrc);
  size_t icap = (size_t)w->index_cap;
  SL_FORWARD_IF_ERROR(grow((void **)&w->index, &icap, (size_t)w->nchunks + 1,
                           sizeof *w->index));
  w->index_cap = icap;
  w->index[w->nchunks] = (index_entry){
      sl__out_bytes(w->file), w->records - (w->nrec - r0), n, hcrc};
  SL_FORWARD_IF_ERROR(write_all(w, h, sizeof h));
  SL_FORWARD_IF_ERROR(write_all(w, w->out, pos));
  if (raw > w->max_raw) w->max_raw = raw;
  w->nchunks++;
  return SL_OK;
}

/* Trains the dictionary (ZDICT_trainFromBuffer) on every buffered record,
 * laid out as the frames they will be written in (record table and
 * records), so that it learns what it compresses; with too little to learn
 * from, the frames go without one. */
static int train(sl_slr_writer *w) {
  w->training = false;
  if (w->nrec == 0) return SL_OK;
  choose_frame_records(w, 0, w->nrec);
  uint32_t per = w->frame_records, nf = (w->nrec + per - 1) / per;
  size_t table = sl__align_up((uint64_t)per * 4, 8);
  size_t *sizes = sl__malloc((size_t)nf * sizeof *sizes);
  unsigned char *buf = sl__malloc(w->body_len + (size_t)nf * table);
  w->dict = sl__malloc(w->dict_max);
  if (!sizes || !buf || !w->dict) {
    SL__FREE(sizes, buf);
    return sl_set_error(SL_ENOMEM,
                        "slr writer: %s: cannot allocate to train a "
                        "dictionary",
                        w->path);
  }
  size_t len = 0;
  for (uint32_t i = 0; i < nf; i++) {
    uint32_t a = i * per, b = (uint32_t)SL_MIN((uint64_t)a + per, w->nrec);
    size_t t = sl__align_up((uint64_t)(b - a) * 4, 8), base = rec_start(w, a);
    memset(buf + len, 0, t);
    for (uint32_t r = a; r < b; r++)
      sl__put32(buf + len + 4 * (size_t)(r - a), (uint32_t)(w->ends[r] - base));
    memcpy(buf + len + t, w->body + base, w->ends[b - 1] - base);
    sizes[i] = t + w->ends[b - 1] - base;
    len += sizes[i];
  }
  /* zstd's default trainer.  Its entropy tables are made at level 3 even
   * for a file at SL_SLR_DICT_LEVEL: making them at the file's level
   * (ZDICT_optimizeTrainFromBuffer_fastCover with zParams.compressionLevel)
   * gains 0.8 % of ratio but triples the writing time of a 16 MB file
   * (docs/PERFORMANCE.md, "Level 15 by default with a dictionary"). */
  size_t got = ZDICT_trainFromBuffer(w->dict, w->dict_max, buf, sizes, nf);
  SL__FREE(sizes, buf);
  if (ZDICT_isError(got)) return SL_OK; /* too few samples: no dictionary */
  w->dict_len = got;
  w->cdict = ZSTD_createCDict(w->dict, got, w->level);
  SL_RETURN_ERROR_IF(!w->cdict, SL_ENOMEM,
                     "slr writer: %s: cannot digest the dictionary", w->path);
  return SL_OK;
}

/* Ends the chunk being built.  While a dictionary is being trained the
 * chunk stays buffered until the sample is large enough (or `last`); then
 * every buffered chunk is written and the buffer emptied. */
static int flush_chunk(sl_slr_writer *w, bool last) {
  if (w->nrec > w->cur) {
    size_t cap = w->cuts_cap;
    SL_FORWARD_IF_ERROR(grow((void **)&w->cuts, &cap, w->ncuts + 1, 4));
    w->cuts_cap = cap;
    w->cuts[w->ncuts++] = w->nrec;
    w->cur = w->nrec;
  }
  if (w->training) {
    if (!last && w->body_len < w->sample_bytes) return SL_OK;
    SL_FORWARD_IF_ERROR(train(w));
  }
  uint32_t r0 = 0;
  for (size_t k = 0; k < w->ncuts; r0 = w->cuts[k++])
    SL_FORWARD_IF_ERROR(emit_chunk(w, r0, w->cuts[k]));
  w->ncuts = 0;
  w->nrec = w->cur = 0;
  w->body_len = 0;
  return SL_OK;
}

int sl_slr_writer_append(sl_slr_writer *w, const sl_sample *s) {
  SL_RETURN_ERROR_IF(!w || !s, SL_EINVAL, "slr writer: NULL writer or sample");
  SL_RETURN_ERROR_IF(w->failed, SL_ESTATE,
                     "slr writer: %s: an earlier write failed", w->path);
  const sl_schema *schema = w->schema;
  int n = sl_schema_nfields(schema);
  SL_RETURN_ERROR_IF(sl_sample_nfields(s) != n, SL_ESHAPE,
                     "slr writer: %s: record %llu has %d fields, the schema %d",
                     w->path, (unsigned long long)w->records,
                     sl_sample_nfields(s), n);
  for (int i = 0; i < n; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    const char *sn = sl_schema_field_name(sl_sample_schema(s), i);
    if (strcmp(sn, sl_schema_field_name(schema, i)) != 0)
      return sl_set_error(SL_ESHAPE,
                          "slr writer: %s: record %llu field %d is '%s', the "
                          "schema's is '%s'",
                          w->path, (unsigned long long)w->records, i, sn,
                          sl_schema_field_name(schema, i));
    int rc = sl_schema_check(schema, i, t);
    if (rc < 0)
      return sl_wrap_error(rc, "slr writer: %s: record %llu", w->path,
                           (unsigned long long)w->records);
    if (t->nbytes && !t->data)
      return sl_set_error(SL_EINVAL, "slr writer: field '%s' has no data", sn);
    if (w->layout.f[i].var)
      for (int d = 0; d < t->rank; d++)
        if ((uint64_t)t->shape[d] > SLR_MAX_DIM)
          return sl_set_error(SL_ESHAPE,
                              "slr writer: field '%s' dim %d is "
                              "too large",
                              sn, d);
  }
  size_t size = sl__slr_record_size(&w->layout, s);
  SL_RETURN_ERROR_IF(size > SLR_WRITER_MAX_RAW - 8, SL_EINVAL,
                     "slr writer: %s: record %llu is %zu bytes (a chunk "
                     "holds at most %llu bytes with its record table)",
                     w->path, (unsigned long long)w->records, size,
                     (unsigned long long)SLR_WRITER_MAX_RAW);
  /* Start a new chunk first if this record would take the chunk, record
   * table included, past the target, or past what readers accept. */
  uint32_t in_chunk = w->nrec - w->cur;
  uint64_t chunk_body = w->body_len - rec_start(w, w->cur);
  uint64_t raw_with = chunk_raw(in_chunk + 1, chunk_body + size);
  if (in_chunk && ((!w->records_per_chunk && raw_with > w->chunk_bytes) ||
                   raw_with > SLR_WRITER_MAX_RAW))
    SL_FORWARD_IF_ERROR(flush_chunk(w, false));
  SL_FORWARD_IF_ERROR(
      grow((void **)&w->body, &w->body_cap, w->body_len + size, 1));
  size_t ecap = w->ends_cap;
  SL_FORWARD_IF_ERROR(grow((void **)&w->ends, &ecap, (size_t)w->nrec + 1, 4));
  w->ends_cap = (uint32_t)SL_MIN(ecap, UINT32_MAX);
  sl__slr_record_encode(&w->layout, s, w->body + w->body_len);
  w->body_len += size;
  w->ends[w->nrec++] = (uint32_t)w->body_len;
  w->records++;
  in_chunk = w->nrec - w->cur;
  chunk_body = w->body_len - rec_start(w, w->cur);
  if ((w->records_per_chunk && in_chunk == w->records_per_chunk) ||
      (!w->records_per_chunk && chunk_raw(in_chunk, chunk_body) >= w->chunk_bytes))
    SL_FORWARD_IF_ERROR(flush_chunk(w, false));
  return SL_OK;
}

uint64_t sl_slr_writer_records(const sl_slr_writer *w) {
  return w ? w->records : 0;
}

/* The writer's own metadata: keys and values. */
enum { OWN_META = 4 };
static void own_meta(const sl_slr_writer *w, char vals[OWN_META][24],
                     const char *keys[OWN_META], const char *v[OWN_META]) {
  keys[0] = SL__META_MAX_CHUNK_RAW;
  snprintf(vals[0], 24, "%llu", (unsigned long long)w->max_raw);
  keys[1] = SL__META_SET_ID;
  keys[2] = SL__META_SET_SIZE;
  snprintf(vals[2], 24, "%u", w->set_size);
  keys[3] = SL__META_SET_INDEX;
  snprintf(vals[3], 24, "%u", w->set_index);
  for (int i = 0; i < OWN_META; i++)
    v[i] = vals[i];
  v[1] = w->set_id;
}

/* Metadata entry i of the block: the schema's entries except its
 * "sluice." keys (those are the writer's, and describe another file when
 * the schema came from one), then the writer's own. */
static bool meta_entry(const sl_slr_writer *w, const char *own_k[],
                       const char *own_v[], int i, const char **k,
                       const char **v) {
  int nm = sl_schema_meta_count(w->schema);
  if (i >= nm) {
    *k = own_k[i - nm];
    *v = own_v[i - nm];
    return true;
  }
  sl_schema_meta_at(w->schema, i, k, v);
  return strncmp(*k, "sluice.", 7) != 0;
}

/* Serialises the schema block into a new buffer. */
static int schema_block(const sl_slr_writer *w, unsigned char **out,
                        size_t *len) {
  const sl_schema *s = w->schema;
  char own_buf[OWN_META][24];
  const char *own_k[OWN_META], *own_v[OWN_META];
  own_meta(w, own_buf, own_k, own_v);
  /* magic, size, field count, meta count, CRC */
  size_t n = 20;
  int nf = sl_schema_nfields(s), nm = sl_schema_meta_count(s) + OWN_META;
  uint32_t kept = 0;
  for (int i = 0; i < nf; i++)
    n += 4 + strlen(sl_schema_field_name(s, i)) +
         8 * (size_t)sl_schema_field_rank(s, i);
  for (int i = 0; i < nm; i++) {
    const char *k, *v;
    if (!meta_entry(w, own_k, own_v, i, &k, &v)) continue;
    kept++;
    SL_RETURN_ERROR_IF(strlen(k) > (1u << 20) || strlen(v) > (1u << 20),
                       SL_EINVAL, "slr writer: metadata '%.40s' exceeds 1 MiB",
                       k);
    n += 8 + strlen(k) + strlen(v);
  }
  unsigned char *b = sl__malloc(n), *p = b;
  SL_RETURN_ERROR_IF(!b, SL_ENOMEM, "slr writer: cannot allocate the schema");
  sl__put32(p, SLR_SCHEMA_MAGIC);
  sl__put32(p + 4, (uint32_t)n);
  sl__put32(p + 8, (uint32_t)nf);
  p += 12;
  for (int i = 0; i < nf; i++) {
    const char *name = sl_schema_field_name(s, i);
    size_t nl = strlen(name);
    int rank = sl_schema_field_rank(s, i);
    sl__put16(p, (uint16_t)nl);
    memcpy(p + 2, name, nl);
    p += 2 + nl;
    *p++ = (unsigned char)sl_schema_field_dtype(s, i);
    *p++ = (unsigned char)rank;
    for (int d = 0; d < rank; d++, p += 8)
      sl__put64(p, (uint64_t)sl_schema_field_shape(s, i)[d]);
  }
  sl__put32(p, kept);
  p += 4;
  for (int i = 0; i < nm; i++) {
    const char *k, *v;
    if (!meta_entry(w, own_k, own_v, i, &k, &v)) continue;
    size_t kl = strlen(k), vl = strlen(v);
    sl__put32(p, (uint32_t)kl);
    memcpy(p + 4, k, kl);
    p += 4 + kl;
    sl__put32(p, (uint32_t)vl);
    memcpy(p + 4, v, vl);
    p += 4 + vl;
  }
  sl__put32(p, sl__crc32c(0, b, (size_t)(p - b)));
  *out = b;
  *len = n;
  return SL_OK;
}

static int finish(sl_slr_writer *w) {
  SL_RETURN_ERROR_IF(w->failed, SL_EIO,
                     "slr writer: %s: an earlier write failed", w->path);
  SL_FORWARD_IF_ERROR(flush_chunk(w, true));
  SL_FORWARD_IF_ERROR(start(w));
  /* Framed files: the dictionary block, before the schema. */
  size_t dl = w->dict_len ? SLR_DICT_HEAD + w->dict_len + 4 : 0;
  if (dl) {
    unsigned char hd[SLR_DICT_HEAD], crc[4];
    sl__put32(hd, SLR_DICT_MAGIC);
    sl__put32(hd + 4, (uint32_t)dl);
    sl__put32(crc, sl__crc32c(sl__crc32c(0, hd, sizeof hd), w->dict,
                              w->dict_len));
    SL_FORWARD_IF_ERROR(write_all(w, hd, sizeof hd));
    SL_FORWARD_IF_ERROR(write_all(w, w->dict, w->dict_len));
    SL_FORWARD_IF_ERROR(write_all(w, crc, sizeof crc));
  }
  uint64_t schema_off = sl__out_bytes(w->file);
  unsigned char *sb = NULL;
  size_t sl = 0;
  SL_FORWARD_IF_ERROR(schema_block(w, &sb, &sl));
  int rc = write_all(w, sb, sl);
  sl__free(sb);
  SL_FORWARD_IF_ERROR(rc);
  uint64_t index_off = sl__out_bytes(w->file);
  size_t il = 16 + SLR_INDEX_ENTRY_SIZE * (size_t)w->nchunks + 4;
  unsigned char *ib = sl__calloc(1, il);
  SL_RETURN_ERROR_IF(!ib, SL_ENOMEM, "slr writer: cannot allocate the index");
  sl__put32(ib, SLR_INDEX_MAGIC);
  sl__put64(ib + 8, w->nchunks);
  for (uint64_t c = 0; c < w->nchunks; c++) {
    unsigned char *e = ib + 16 + SLR_INDEX_ENTRY_SIZE * c;
    sl__put64(e, w->index[c].offset);
    sl__put64(e + 8, w->index[c].first_record);
    sl__put32(e + 16, w->index[c].records);
    sl__put32(e + 20, w->index[c].header_crc);
  }
  sl__put32(ib + il - 4, sl__crc32c(0, ib, il - 4));
  rc = write_all(w, ib, il);
  sl__free(ib);
  SL_FORWARD_IF_ERROR(rc);
  unsigned char f[SLR_FOOTER_SIZE] = {0};
  sl__put64(f, schema_off);
  sl__put64(f + 8, sl);
  sl__put64(f + 16, index_off);
  sl__put64(f + 24, il);
  sl__put64(f + 32, w->records);
  sl__put64(f + 40, w->nchunks);
  sl__put32(f + 48, (uint32_t)dl);
  sl__put32(f + 52, sl__crc32c(0, f, 52));
  memcpy(f + 56, sl__slr_end_magic, 8);
  SL_FORWARD_IF_ERROR(write_all(w, f, sizeof f));
  SL_FORWARD_IF_ERROR(sl__out_finish(w->file));
  w->finished = true;
  return SL_OK;
}

int sl__slr_writer_finish(sl_slr_writer *w) {
  SL_RETURN_ERROR_IF(!w, SL_EINVAL, "slr writer: NULL writer");
  if (w->finished) return SL_OK;
  int rc = finish(w);
  if (rc < 0) {
    /* The temporary file is removed now; the writer stays for abort. */
    w->failed = true;
    if (w->own_file) {
      sl__out_abort(w->file);
      w->file = NULL;
      w->own_file = false;
    }
  }
  return rc;
}

uint64_t sl__slr_writer_bytes(const sl_slr_writer *w) {
  return w && w->file ? sl__out_bytes(w->file) : 0;
}

int sl__slr_writer_commit(sl_slr_writer *w) {
  if (!w) return SL_OK;
  int rc = sl__slr_writer_finish(w);
  if (rc == SL_OK && w->own_file) {
    rc = sl__out_commit(w->file); /* frees the file, also on failure */
    w->own_file = false;
  }
  writer_free(w);
  return rc;
}

void sl__slr_writer_set_member(sl_slr_writer *w, const char *set_id,
                               uint32_t size, uint32_t index) {
  snprintf(w->set_id, sizeof w->set_id, "%s", set_id);
  w->set_size = size;
  w->set_index = index;
}

void sl__slr_writer_set_cancel(sl_slr_writer *w,
                               const volatile sig_atomic_t *flag) {
  w->cancel = flag;
}

int sl_slr_writer_close(sl_slr_writer *w) {
  return sl__slr_writer_commit(w);
}
