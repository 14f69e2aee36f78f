/*
 * slr_source.c - the `slr` file reader on the reader contract: records
 * [first, first + count) of one file, read chunk by chunk.
 *
 * Under SL_CORRUPT_SKIP_CHUNK a chunk that fails a check is skipped as a
 * whole (no record of it is returned) and counted; past the cap the reader
 * fails.  Under SL_CORRUPT_FAIL (the default) the first bad chunk is the
 * error.  Records come out as zero-copy views of the decoded chunk.
 */
#include "io/slr_file.h"
#include "readers/reader_impl.h"

typedef struct slr_state {
  sl_slr_file *f;
  uint64_t first, end; /* record range */
  uint64_t pos;        /* next record number */
  const slr_chunk *ch; /* loaded chunk holding pos, or NULL */
  uint64_t ch_first;
} slr_state;

static int slr_next(void *st, sl_sample **out) {
  slr_state *s = st;
  for (;;) {
    if (s->pos >= s->end) return SL_EOF;
    if (!s->ch) {
      uint64_t c = sl_slr_chunk_of(s->f, s->pos);
      uint32_t n;
      sl__slr_chunk_span(s->f, c, &s->ch_first, &n);
      int rc = sl__slr_load_chunk(s->f, c, &s->ch);
      if (rc < 0) {
        s->ch = NULL;
        if (rc != SL_ECORRUPT || sl__slr_policy(s->f) != SL_CORRUPT_SKIP_CHUNK)
          return rc;
        SL_FORWARD_IF_ERROR(sl__slr_count_bad(s->f));
        s->pos = s->ch_first + n; /* skip the whole chunk */
        continue;
      }
    }
    uint64_t r = s->pos - s->ch_first;
    if (r >= s->ch->records) {
      s->ch = NULL;
      continue;
    }
    SL_FORWARD_IF_ERROR(sl__slr_chunk_record(s->f, s->ch, (uint32_t)r, out));
    s->pos++;
    return SL_OK;
  }
}

static int slr_reset(void *st) {
  slr_state *s = st;
  s->pos = s->first;
  s->ch = NULL;
  sl__slr_pass_start(s->f);
  return SL_OK;
}

static void slr_destroy(void *st) {
  slr_state *s = st;
  if (!s) return;
  sl_slr_close(s->f);
  sl__free(s);
}

/* The records of the range; not known under skip_chunk (a bad chunk's
 * records are skipped). */
static int slr_length(const sl_reader *r, void *st, uint64_t *n) {
  const slr_state *s = st;
  SL_RETURN_ERROR_IF(
      sl__slr_policy(s->f) == SL_CORRUPT_SKIP_CHUNK, SL_EUNSUPPORTED,
      "slr: %s: under policy skip_chunk a pass may yield fewer "
      "than its %llu records",
      sl_slr_path(s->f), (unsigned long long)(s->end - s->first));
  *n = s->end - s->first;
  return SL_OK;
}

static const sl_reader_vtable slr_vt = {"slr", slr_next, slr_reset,
                                        slr_destroy};

static int make(sl_slr_file *f, uint64_t first, uint64_t end, sl_reader **out) {
  slr_state *s = sl__calloc(1, sizeof *s);
  if (!s) {
    sl_slr_close(f);
    return sl_set_error(SL_ENOMEM, "slr: cannot allocate a reader");
  }
  s->f = f;
  s->first = s->pos = first;
  s->end = end;
  SL_FORWARD_IF_ERROR(
      sl__reader_make(&slr_vt, s, (sl_schema *)sl_slr_schema(f), out));
  sl__reader_set_length(*out, slr_length);
  return SL_OK;
}

int sl__slr_reader_from_file(sl_slr_file *f, uint64_t first, uint64_t count,
                             sl_reader **out) {
  *out = NULL;
  uint64_t n = sl_slr_records(f);
  if (first > n) {
    int rc = sl_set_error(SL_EINVAL,
                          "slr: %s: first record %llu is beyond "
                          "the %llu records",
                          sl_slr_path(f), (unsigned long long)first,
                          (unsigned long long)n);
    sl_slr_close(f);
    return rc;
  }
  uint64_t end = (count > n - first) ? n : first + count;
  return make(f, first, end, out);
}

int sl_slr_reader(const char *path, const sl_slr_open_opts *opts,
                  uint64_t first, uint64_t count, sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "slr: NULL out pointer");
  *out = NULL;
  sl_slr_file *f;
  SL_FORWARD_IF_ERROR(sl_slr_open(path, opts, &f));
  return sl__slr_reader_from_file(f, first, count, out);
}

int sl_slr_reader_chunks(const char *path, const sl_slr_open_opts *opts,
                         uint64_t first_chunk, uint64_t nchunks,
                         sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "slr: NULL out pointer");
  *out = NULL;
  sl_slr_file *f;
  SL_FORWARD_IF_ERROR(sl_slr_open(path, opts, &f));
  uint64_t nc = sl_slr_chunks(f);
  if (first_chunk > nc || nchunks > nc - first_chunk) {
    int rc = sl_set_error(SL_EINVAL,
                          "slr: %s: chunks [%llu, +%llu) are "
                          "outside the %llu chunks",
                          path, (unsigned long long)first_chunk,
                          (unsigned long long)nchunks, (unsigned long long)nc);
    sl_slr_close(f);
    return rc;
  }
  uint64_t first = 0, end = 0;
  uint32_t cnt;
  if (first_chunk < nc)
    sl__slr_chunk_span(f, first_chunk, &first, &cnt);
  else
    first = sl_slr_records(f);
  if (first_chunk + nchunks < nc)
    sl__slr_chunk_span(f, first_chunk + nchunks, &end, &cnt);
  else
    end = sl_slr_records(f);
  return make(f, first, end, out);
}
