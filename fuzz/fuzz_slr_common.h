/*
 * fuzz_slr_common.h - the checks shared by the two SLR targets (fuzz_slr.c:
 * raw files; fuzz_slr_blocks.c: files built from fuzzed schema, index and
 * chunk contents).
 *
 * One run opens the bytes three times, from memory:
 *   1. file API: chunk headers (sl_slr_chunk_info_get), sl_slr_verify,
 *      random access to a few records (first, last, two picked by the
 *      input);
 *   2. the `slr` reader (the reader contract, with the input's corruption
 *      policy): two passes, every sample checked and hashed;
 *   3. the reader over a record range picked by the input.
 * Oracles, beyond "no crash, no leak, only documented error codes":
 *   - a file that verifies reads completely: every record by random access,
 *     and every pass yields exactly sl_slr_records samples then SL_EOF;
 *   - under the `fail` policy a pass ends with SL_EOF only if the file
 *     verifies (corruption is never skipped silently);
 *   - sequential record i equals random-access record i;
 *   - both passes give the same samples and the same ending (under
 *     `skip_chunk` too: its cap counts per pass).
 */
#ifndef SLUICE_FUZZ_SLR_COMMON_H
#define SLUICE_FUZZ_SLR_COMMON_H

#include "fuzz_util.h"
#include "formats/slr_file.h"

/* Chunk size limit for fuzzing: a fuzzed size field must not make the
 * reader allocate a gigabyte per input. */
#define FUZZ_SLR_MAX_CHUNK ((uint64_t)1 << 20)
/* Samples read per pass at most (a 1 MiB chunk may hold 256 Ki records). */
#define FUZZ_SLR_MAX_SAMPLES 4096
/* Sequential samples compared with random access. */
#define FUZZ_SLR_COMPARE 64

/* view: the source offers its bytes as a map (fetch reads frames in
 * place), else only read_at (fetch copies them out, as with pread). */
static int fuzz_slr_open(const unsigned char *buf, size_t n,
                         const sl_slr_open_opts *o, sl_slr_file **f,
                         bool view) {
  sl__source *src = fuzz_mem_source_new(buf, n, "fuzz.slr");
  if (view) src->view = fuzz_mem_view;
  return sl__slr_open_source(src, o, f);
}

static void fuzz_slr_expect_named(const char *what) {
  FUZZ_CHECK(strstr(sl_last_error(), "fuzz.slr") != NULL,
             "%s: the message does not name the file", what);
}

/* One pass of the reader: returns the code that ended it (or SL_OK when it
 * was cut at FUZZ_SLR_MAX_SAMPLES), the count and a hash of the samples. */
static int fuzz_slr_pass(sl_reader *r, sl_slr_file *ra, int verified,
                         uint64_t *count, uint64_t *hash) {
  const sl_schema *schema = sl_reader_schema(r);
  *count = 0;
  *hash = 0;
  for (;;) {
    if (*count == FUZZ_SLR_MAX_SAMPLES) return SL_OK;
    sl_sample *s;
    int rc = sl_reader_next(r, &s);
    if (rc != SL_OK) return rc;
    uint64_t h = fuzz_touch_sample(schema, s);
    sl_sample_release(s);
    if (verified == SL_OK && *count < FUZZ_SLR_COMPARE) {
      sl_sample *t;
      rc = sl_slr_read(ra, *count, &t);
      FUZZ_CHECK(rc == SL_OK, "record %llu reads sequentially, not randomly",
                 (unsigned long long)*count);
      FUZZ_CHECK(fuzz_touch_sample(schema, t) == h,
                 "record %llu differs between sequential and random access",
                 (unsigned long long)*count);
      sl_sample_release(t);
    }
    *hash = *hash * 31 + h;
    (*count)++;
  }
}

static void fuzz_slr_run(const unsigned char *buf, size_t n,
                         sl_corrupt_policy policy, uint32_t max_bad,
                         uint64_t pick) {
  sl_slr_open_opts o = {policy, max_bad, FUZZ_SLR_MAX_CHUNK};
  sl_slr_file *f;
  int rc = fuzz_slr_open(buf, n, &o, &f, pick & 1);
  FUZZ_DEBUG("slr: %zu bytes, open: %s %s\n", n, sl_err_name(rc),
             rc < 0 ? sl_last_error() : "");
  if (rc < 0) {
    fuzz_expect_error(rc, "open", SL_ECORRUPT, SL_EUNSUPPORTED, 0);
    fuzz_slr_expect_named("open");
    return;
  }
  const sl_schema *schema = sl_slr_schema(f);
  uint64_t records = sl_slr_records(f), chunks = sl_slr_chunks(f);
  FUZZ_CHECK(sl_schema_nfields(schema) > 0, "open: a schema with no fields");
  FUZZ_CHECK(chunks <= records, "%llu chunks for %llu records",
             (unsigned long long)chunks, (unsigned long long)records);

  /* 1. the file API */
  for (uint64_t c = 0; c < chunks && c < 16; c++) {
    sl_slr_chunk_info ci;
    rc = sl_slr_chunk_info_get(f, c, &ci);
    if (rc < 0) {
      fuzz_expect_error(rc, "chunk info", SL_ECORRUPT, 0);
      fuzz_slr_expect_named("chunk info");
      continue;
    }
    FUZZ_CHECK(ci.records >= 1 && ci.first_record < records,
               "chunk %llu: %u records from %llu", (unsigned long long)c,
               ci.records, (unsigned long long)ci.first_record);
    FUZZ_CHECK(sl_slr_chunk_of(f, ci.first_record) == c,
               "record %llu is not found in its chunk %llu",
               (unsigned long long)ci.first_record, (unsigned long long)c);
  }
  int verified = sl_slr_verify(f);
  FUZZ_DEBUG("slr: %llu records in %llu chunks, verify: %s %s\n",
             (unsigned long long)records, (unsigned long long)chunks,
             sl_err_name(verified), verified < 0 ? sl_last_error() : "");
  if (verified < 0) {
    fuzz_expect_error(verified, "verify", SL_ECORRUPT, 0);
    fuzz_slr_expect_named("verify");
  }
  for (uint64_t c = 0; c < chunks && c < 16; c++) {
    uint32_t per, count;
    rc = sl_slr_chunk_frames(f, c, &per, &count);
    if (rc < 0) {
      fuzz_expect_error(rc, "frame table", SL_ECORRUPT, 0);
      fuzz_slr_expect_named("frame table");
      FUZZ_CHECK(verified < 0, "chunk %llu's frame table fails in a file "
                 "that verifies", (unsigned long long)c);
    } else {
      FUZZ_CHECK(per >= 1 && count >= 1, "chunk %llu: %u frames of %u",
                 (unsigned long long)c, count, per);
    }
  }
  if (records > 0) {
    uint64_t ks[4] = {0, records - 1, pick % records, (pick >> 32) % records};
    for (int i = 0; i < 4; i++) {
      sl_sample *s, *t;
      rc = sl_slr_read(f, ks[i], &s);
      /* sl_slr_fetch (by frame, through its own cache) agrees where read
       * succeeds; where read fails it may still succeed, since it decodes
       * only the record's own frame (read decodes every frame of the chunk,
       * and one bad frame fails them all). */
      int rf = sl_slr_fetch(f, ks[i], &t);
      FUZZ_CHECK(rc != SL_OK || rf == SL_OK,
                 "record %llu: read gave %d, fetch %d",
                 (unsigned long long)ks[i], rc, rf);
      if (rf == SL_OK) {
        FUZZ_CHECK(rc != SL_OK || fuzz_touch_sample(schema, s) ==
                                      fuzz_touch_sample(schema, t),
                   "record %llu differs between read and fetch",
                   (unsigned long long)ks[i]);
        sl_sample_release(t);
      } else {
        fuzz_expect_error(rf, "fetch", SL_ECORRUPT, 0);
        fuzz_slr_expect_named("fetch");
      }
      if (rc == SL_OK) {
        fuzz_touch_sample(schema, s);
        sl_sample_release(s);
        continue;
      }
      FUZZ_CHECK(verified < 0, "record %llu fails in a file that verifies",
                 (unsigned long long)ks[i]);
      fuzz_expect_error(rc, "read", SL_ECORRUPT, 0);
      fuzz_slr_expect_named("read");
    }
  }

  /* 2. the reader, over a second open of the same bytes */
  sl_slr_file *g;
  rc = fuzz_slr_open(buf, n, &o, &g, false);
  FUZZ_CHECK(rc == SL_OK, "the second open of the same bytes failed");
  sl_reader *r;
  rc = sl__slr_reader_from_file(g, 0, UINT64_MAX, &r);
  FUZZ_CHECK(rc == SL_OK, "cannot make a reader");
  int end0 = 0;
  uint64_t count0 = 0, hash0 = 0;
  for (int pass = 0; pass < 2; pass++) {
    uint64_t count, hash;
    int end = fuzz_slr_pass(r, f, verified, &count, &hash);
    FUZZ_DEBUG("slr: pass %d: %llu samples, then %s\n", pass,
               (unsigned long long)count, sl_err_name(end));
    if (end == SL_OK) break; /* cut short: nothing more to compare */
    if (end == SL_EOF) {
      FUZZ_CHECK(count <= records, "%llu samples from %llu records",
                 (unsigned long long)count, (unsigned long long)records);
      FUZZ_CHECK(policy != SL_CORRUPT_FAIL || verified == SL_OK,
                 "policy fail: a pass ended cleanly in a file that does not "
                 "verify");
    } else {
      fuzz_expect_error(end, "next", SL_ECORRUPT, 0);
      fuzz_slr_expect_named("next");
    }
    if (verified == SL_OK)
      FUZZ_CHECK(end == SL_EOF && count == records,
                 "a file that verifies gave %llu of %llu records, then %s",
                 (unsigned long long)count, (unsigned long long)records,
                 sl_err_name(end));
    if (pass == 0) {
      end0 = end, count0 = count, hash0 = hash;
    } else {
      FUZZ_CHECK(end == end0 && count == count0 && hash == hash0,
                 "the second pass differs from the first");
    }
    rc = sl_reader_reset(r);
    FUZZ_CHECK(rc == SL_OK, "reset failed");
  }
  sl_reader_destroy(r);

  /* 3. a record range picked by the input, starting mid-chunk: in a file
   * that verifies, exactly the records of the range, equal to random
   * access. */
  uint64_t first = records ? (pick >> 16) % (records + 1) : 0,
           count = (pick >> 40) % 64;
  rc = fuzz_slr_open(buf, n, &o, &g, false);
  FUZZ_CHECK(rc == SL_OK, "the third open of the same bytes failed");
  rc = sl__slr_reader_from_file(g, first, count, &r);
  FUZZ_CHECK(rc == SL_OK, "cannot make a reader over [%llu, +%llu)",
             (unsigned long long)first, (unsigned long long)count);
  uint64_t want = SL_MIN(count, records - first), got = 0;
  sl_sample *s;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    uint64_t h = fuzz_touch_sample(schema, s);
    sl_sample_release(s);
    FUZZ_CHECK(got < want, "range [%llu, +%llu): too many samples",
               (unsigned long long)first, (unsigned long long)count);
    if (verified == SL_OK) {
      sl_sample *t;
      FUZZ_CHECK(sl_slr_read(f, first + got, &t) == SL_OK,
                 "record %llu reads in a range, not randomly",
                 (unsigned long long)(first + got));
      FUZZ_CHECK(fuzz_touch_sample(schema, t) == h,
                 "record %llu differs between a range and random access",
                 (unsigned long long)(first + got));
      sl_sample_release(t);
    }
    got++;
  }
  if (rc == SL_EOF) {
    FUZZ_CHECK(policy != SL_CORRUPT_FAIL || got == want,
               "range [%llu, +%llu): %llu samples, then a clean end",
               (unsigned long long)first, (unsigned long long)count,
               (unsigned long long)got);
  } else {
    FUZZ_CHECK(verified < 0, "range of a file that verifies failed");
    fuzz_expect_error(rc, "range next", SL_ECORRUPT, 0);
  }
  sl_reader_destroy(r);
  sl_slr_close(f);
}

#endif
