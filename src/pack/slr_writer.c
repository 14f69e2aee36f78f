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
#include <zstd.h>

/* A chunk's raw size (record table + body) never exceeds this: what every
 * reader accepts (docs/FORMAT.md, "Chunk size limits"). */
#define SLR_WRITER_MAX_RAW ((uint64_t)1 << 30)
/* Compression input per step between two checks of the cancel flag. */
#define CANCEL_SLICE ((size_t)ZSTD_BLOCKSIZE_MAX)

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
  size_t chunk_bytes;
  uint32_t records_per_chunk;
  ZSTD_CCtx *cctx;
  /* the chunk being built */
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
  sl__slr_layout_free(&w->layout);
  sl_schema_release(w->schema);
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
  unsigned char h[SLR_HEADER_SIZE] = {0};
  memcpy(h, sl__slr_magic, 8);
  sl__put16(h + 8, SLR_MAJOR);
  sl__put16(h + 10, SLR_MINOR);
  sl__put32(h + 28, sl__crc32c(0, h, 28));
  rc = write_all(w, h, sizeof h);
  if (rc < 0) {
    sl_slr_writer_abort(w);
    return rc;
  }
  *out = w;
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

static int flush_chunk(sl_slr_writer *w) {
  if (w->nrec == 0) return SL_OK;
  size_t table = sl__align_up((uint64_t)w->nrec * 4, 8);
  size_t raw = table + w->body_len;
  unsigned char *tab = sl__calloc(1, table);
  SL_RETURN_ERROR_IF(!tab, SL_ENOMEM, "slr writer: cannot allocate a table");
  for (uint32_t i = 0; i < w->nrec; i++)
    sl__put32(tab + 4 * i, w->ends[i]);
  size_t bound = ZSTD_compressBound(raw);
  size_t cap = w->out_cap;
  int rc = grow((void **)&w->out, &cap, bound, 1);
  w->out_cap = cap;
  if (rc < 0) {
    sl__free(tab);
    return rc;
  }
  /* One frame, raw size pledged so the header declares it. */
  ZSTD_CCtx_reset(w->cctx, ZSTD_reset_session_only);
  ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, w->level);
  ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_contentSizeFlag, 1);
  ZSTD_CCtx_setPledgedSrcSize(w->cctx, raw);
  ZSTD_outBuffer ob = {w->out, w->out_cap, 0};
  const void *part[2] = {tab, w->body};
  size_t part_len[2] = {table, w->body_len}, zr = 0;
  /* Slice by slice, the cancel flag checked between slices. */
  for (int k = 0; k < 2 && !ZSTD_isError(zr); k++) {
    ZSTD_inBuffer in = {part[k], 0, 0};
    while (in.pos < part_len[k] && !ZSTD_isError(zr)) {
      if (w->cancel && *w->cancel) {
        sl__free(tab);
        return sl_set_error(SL_EKILLED,
                            "slr writer: %s: chunk %llu: interrupted while "
                            "compressing",
                            w->path, (unsigned long long)w->nchunks);
      }
      in.size = SL_MIN(part_len[k], in.pos + CANCEL_SLICE);
      zr = ZSTD_compressStream2(w->cctx, &ob, &in, ZSTD_e_continue);
    }
  }
  ZSTD_inBuffer none = {NULL, 0, 0};
  while (!ZSTD_isError(zr) &&
         (zr = ZSTD_compressStream2(w->cctx, &ob, &none, ZSTD_e_end)) != 0 &&
         !ZSTD_isError(zr))
    ;
  sl__free(tab);
  if (ZSTD_isError(zr)) {
    w->failed = true;
    return sl_set_error(SL_EIO, "slr writer: %s: zstd: %s",
                        sl__out_temp_name(w->file), ZSTD_getErrorName(zr));
  }
  unsigned char h[SLR_CHUNK_HEADER_SIZE];
  sl__put32(h, SLR_CHUNK_MAGIC);
  sl__put32(h + 4, w->nrec);
  sl__put64(h + 8, ob.pos);
  sl__put64(h + 16, raw);
  sl__put32(h + 24, (uint32_t)w->nchunks);
  sl__put32(h + 28, SLR_CODEC_ZSTD);
  sl__put32(h + 32, sl__crc32c(0, w->out, ob.pos));
  uint32_t hcrc = sl__crc32c(0, h, 36);
  sl__put32(h + 36, hcrc);
  size_t icap = (size_t)w->index_cap;
  SL_FORWARD_IF_ERROR(grow((void **)&w->index, &icap, (size_t)w->nchunks + 1,
                           sizeof *w->index));
  w->index_cap = icap;
  w->index[w->nchunks] = (index_entry){sl__out_bytes(w->file),
                                       w->records - w->nrec, w->nrec, hcrc};
  SL_FORWARD_IF_ERROR(write_all(w, h, sizeof h));
  SL_FORWARD_IF_ERROR(write_all(w, w->out, ob.pos));
  if (raw > w->max_raw) w->max_raw = raw;
  w->nchunks++;
  w->nrec = 0;
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
  uint64_t raw_with = chunk_raw(w->nrec + 1, (uint64_t)w->body_len + size);
  if (w->nrec && ((!w->records_per_chunk && raw_with > w->chunk_bytes) ||
                  raw_with > SLR_WRITER_MAX_RAW))
    SL_FORWARD_IF_ERROR(flush_chunk(w));
  SL_FORWARD_IF_ERROR(
      grow((void **)&w->body, &w->body_cap, w->body_len + size, 1));
  size_t ecap = w->ends_cap;
  SL_FORWARD_IF_ERROR(grow((void **)&w->ends, &ecap, (size_t)w->nrec + 1, 4));
  w->ends_cap = (uint32_t)SL_MIN(ecap, UINT32_MAX);
  sl__slr_record_encode(&w->layout, s, w->body + w->body_len);
  w->body_len += size;
  w->ends[w->nrec++] = (uint32_t)w->body_len;
  w->records++;
  if ((w->records_per_chunk && w->nrec == w->records_per_chunk) ||
      (!w->records_per_chunk && chunk_raw(w->nrec, w->body_len) >= w->chunk_bytes))
    SL_FORWARD_IF_ERROR(flush_chunk(w));
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
  SL_FORWARD_IF_ERROR(flush_chunk(w));
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
