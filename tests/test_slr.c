/* test_slr.c - the SLR format: CRC32C, writer, reader, random access, chunk
 * ranges, corruption sweeps, truncation, and the version-1 golden file. */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "core/crc32c.h"
#include "formats/slr_file.h"

#include <sys/stat.h>
#include <unistd.h>

/* --- fixtures ----------------------------------------------------------------
 */

#define TMP_TAG "slr"

static const char *tmpdir(void) {
  return test_tmpdir(TMP_TAG);
}

static const char *tmppath(const char *name) {
  return test_tmppath(TMP_TAG, name);
}

/* {x: f32[3], tokens: i32[-1], text: bytes[-1], label: i64[]} */
static sl_schema *mixed_schema(void) {
  sl_schema *s = sl_schema_new();
  ASSERT_OK(sl_schema_add(s, "x", SL_F32, 1, (int64_t[]){3}));
  ASSERT_OK(sl_schema_add(s, "tokens", SL_I32, 1, (int64_t[]){SL_DIM_VAR}));
  ASSERT_OK(sl_schema_add(s, "text", SL_BYTES, 1, (int64_t[]){SL_DIM_VAR}));
  ASSERT_OK(sl_schema_add(s, "label", SL_I64, 0, NULL));
  ASSERT_OK(sl_schema_set_meta(s, "origin", "test_slr"));
  return s;
}

/* Record i of the synthetic data set: everything derived from i. */
static sl_sample *make_record(sl_schema *s, int64_t i) {
  sl_sample *r = sl_sample_new(s);
  float *x;
  ASSERT_OK(sl_sample_alloc(r, 0, 1, (int64_t[]){3}, (void **)&x));
  for (int k = 0; k < 3; k++)
    x[k] = (float)i * 0.5f + (float)k;
  int64_t nt = i % 7;
  int32_t *t;
  ASSERT_OK(sl_sample_alloc(r, 1, 1, &nt, (void **)&t));
  for (int64_t k = 0; k < nt; k++)
    t[k] = (int32_t)(i * 100 + k);
  char text[32];
  int64_t nb = snprintf(text, sizeof text, "rec-%lld", (long long)i) - (i % 2);
  char *b;
  ASSERT_OK(sl_sample_alloc(r, 2, 1, &nb, (void **)&b));
  memcpy(b, text, (size_t)nb);
  int64_t *lab;
  ASSERT_OK(sl_sample_alloc(r, 3, 0, NULL, (void **)&lab));
  *lab = i * 3 - 1;
  return r;
}

static void check_record(const sl_sample *r, int64_t i) {
  sl_schema *s = mixed_schema();
  sl_sample *want = make_record(s, i);
  for (int f = 0; f < 4; f++) {
    const sl_tensor *a = sl_sample_at_const(r, f),
                    *b = sl_sample_at_const(want, f);
    ASSERT_EQ(a->dtype, b->dtype);
    ASSERT_EQ(a->rank, b->rank);
    for (int d = 0; d < a->rank; d++)
      ASSERT_EQ(a->shape[d], b->shape[d]);
    ASSERT_EQ(a->nbytes, b->nbytes);
    if (a->nbytes) ASSERT_EQ(memcmp(a->data, b->data, a->nbytes), 0);
    /* Zero-copy views are aligned for their dtype. */
    ASSERT_EQ((uintptr_t)a->data %
                  (sl_dtype_size(a->dtype) < 8 ? sl_dtype_size(a->dtype) : 8),
              0);
  }
  sl_sample_release(want);
  sl_schema_release(s);
}

static void write_file(const char *path, int64_t n, uint32_t per_chunk,
                       int level) {
  sl_schema *s = mixed_schema();
  sl_slr_writer *w;
  sl_slr_writer_opts o = {level, 0, per_chunk};
  ASSERT_OK(sl_slr_writer_open(path, s, &o, &w));
  for (int64_t i = 0; i < n; i++) {
    sl_sample *r = make_record(s, i);
    ASSERT_OK(sl_slr_writer_append(w, r));
    sl_sample_release(r);
  }
  ASSERT_EQ(sl_slr_writer_records(w), n);
  ASSERT_OK(sl_slr_writer_close(w));
  sl_schema_release(s);
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ASSERT_NOT_NULL(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n ? *n : 1);
  ASSERT_EQ(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

static void spill(const char *path, const unsigned char *b, size_t n) {
  FILE *f = fopen(path, "wb");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fwrite(b, 1, n, f), n);
  fclose(f);
}

/* --- CRC32C
 * -------------------------------------------------------------------- */

TEST(crc32c_known_vectors_hw_and_sw) {
  unsigned char zeros[32] = {0}, ones[32], inc[32];
  memset(ones, 0xff, sizeof ones);
  for (int i = 0; i < 32; i++)
    inc[i] = (unsigned char)i;
  ASSERT_EQ(sl__crc32c(0, "123456789", 9), 0xE3069283u);
  ASSERT_EQ(sl__crc32c_sw(0, "123456789", 9), 0xE3069283u);
  ASSERT_EQ(sl__crc32c(0, zeros, 32), 0x8A9136AAu);
  ASSERT_EQ(sl__crc32c_sw(0, zeros, 32), 0x8A9136AAu);
  ASSERT_EQ(sl__crc32c(0, ones, 32), 0x62A8AB43u);
  ASSERT_EQ(sl__crc32c_sw(0, ones, 32), 0x62A8AB43u);
  ASSERT_EQ(sl__crc32c(0, inc, 32), 0x46DD794Eu);
  ASSERT_EQ(sl__crc32c_sw(0, inc, 32), 0x46DD794Eu);
  ASSERT_EQ(sl__crc32c(0, "", 0), 0);
  /* Incremental equals one-shot, at every split and misalignment. */
  unsigned char buf[301];
  for (int i = 0; i < 301; i++)
    buf[i] = (unsigned char)(i * 37 + 11);
  uint32_t whole = sl__crc32c_sw(0, buf, 301);
  for (size_t cut = 0; cut <= 301; cut += 7) {
    ASSERT_EQ(sl__crc32c(sl__crc32c(0, buf, cut), buf + cut, 301 - cut), whole);
    ASSERT_EQ(sl__crc32c_sw(sl__crc32c_sw(0, buf, cut), buf + cut, 301 - cut),
              whole);
  }
  printf("crc32c hardware path: %s\n", sl__crc32c_hw() ? "yes" : "no");
}

/* --- round trips
 * ---------------------------------------------------------------- */

TEST(roundtrip_sequential_random_and_ranges) {
  const char *path = tmppath("rt.slr");
  write_file(path, 1000, 64, 3);
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(path, NULL, &f));
  ASSERT_EQ(sl_slr_records(f), 1000);
  ASSERT_EQ(sl_slr_chunks(f), 16); /* 15 x 64 + 40 */
  ASSERT_STREQ(sl_schema_meta(sl_slr_schema(f), "origin"), "test_slr");
  char d[256];
  ASSERT_STREQ(sl_schema_describe(sl_slr_schema(f), d, sizeof d),
               "{x: f32[3], tokens: i32[-1], text: bytes[-1], label: i64[]}");
  ASSERT_OK(sl_slr_verify(f));
  /* Random access in a scattered order. */
  for (int64_t j = 0; j < 1000; j++) {
    int64_t k = (j * 7919) % 1000;
    sl_sample *r;
    ASSERT_OK(sl_slr_read(f, (uint64_t)k, &r));
    check_record(r, k);
    sl_sample_release(r);
  }
  sl_sample *r;
  ASSERT_RC(sl_slr_read(f, 1000, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "record 1000 is out of range");
  sl_slr_chunk_info ci;
  ASSERT_OK(sl_slr_chunk_info_get(f, 15, &ci));
  ASSERT_EQ(ci.first_record, 960);
  ASSERT_EQ(ci.records, 40);
  ASSERT_TRUE(ci.raw_size > 0 && ci.stored_size > 0);
  ASSERT_EQ(sl_slr_chunk_of(f, 959), 14);
  ASSERT_EQ(sl_slr_chunk_of(f, 960), 15);
  sl_slr_close(f);

  /* Sequential through the reader contract, two passes. */
  sl_reader *rd;
  ASSERT_OK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &rd));
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t i = 0; i < 1000; i++) {
      ASSERT_OK(sl_reader_next(rd, &r));
      check_record(r, i);
      sl_sample_release(r);
    }
    ASSERT_RC(sl_reader_next(rd, &r), SL_EOF);
    ASSERT_OK(sl_reader_reset(rd));
  }
  sl_reader_destroy(rd);
  /* A record range crossing chunk boundaries. */
  ASSERT_OK(sl_slr_reader(path, NULL, 60, 70, &rd));
  for (int64_t i = 60; i < 130; i++) {
    ASSERT_OK(sl_reader_next(rd, &r));
    check_record(r, i);
    sl_sample_release(r);
  }
  ASSERT_RC(sl_reader_next(rd, &r), SL_EOF);
  sl_reader_destroy(rd);
  /* Chunk ranges partition the file. */
  int64_t next = 0;
  for (uint64_t c = 0; c < 16; c += 5) {
    ASSERT_OK(
        sl_slr_reader_chunks(path, NULL, c, c + 5 <= 16 ? 5 : 16 - c, &rd));
    while (sl_reader_next(rd, &r) == SL_OK) {
      check_record(r, next++);
      sl_sample_release(r);
    }
    sl_reader_destroy(rd);
  }
  ASSERT_EQ(next, 1000);
  ASSERT_RC(sl_slr_reader_chunks(path, NULL, 10, 7, &rd), SL_EINVAL);
  ASSERT_RC(sl_slr_reader(path, NULL, 1001, 1, &rd), SL_EINVAL);
}

TEST(samples_outlive_their_file) {
  const char *path = tmppath("outlive.slr");
  write_file(path, 10, 4, 1);
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(path, NULL, &f));
  sl_sample *r;
  ASSERT_OK(sl_slr_read(f, 5, &r));
  sl_slr_close(f);
  check_record(r, 5); /* the decoded chunk is kept alive by the sample */
  sl_sample_release(r);
}

TEST(chunk_bytes_target_and_empty_file) {
  const char *path = tmppath("bytes.slr");
  sl_schema *s = mixed_schema();
  sl_slr_writer *w;
  sl_slr_writer_opts o = {1, 4096, 0};
  ASSERT_OK(sl_slr_writer_open(path, s, &o, &w));
  for (int64_t i = 0; i < 2000; i++) {
    sl_sample *r = make_record(s, i);
    ASSERT_OK(sl_slr_writer_append(w, r));
    sl_sample_release(r);
  }
  ASSERT_OK(sl_slr_writer_close(w));
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(path, NULL, &f));
  ASSERT_TRUE(sl_slr_chunks(f) > 10);
  for (uint64_t c = 0; c < sl_slr_chunks(f); c++) {
    sl_slr_chunk_info ci;
    ASSERT_OK(sl_slr_chunk_info_get(f, c, &ci));
    ASSERT_LE(ci.raw_size, 4096 + 8 * ci.records + 64);
  }
  ASSERT_OK(sl_slr_verify(f));
  sl_slr_close(f);
  /* A file with no records is valid and reads as empty. */
  path = tmppath("empty.slr");
  ASSERT_OK(sl_slr_writer_open(path, s, NULL, &w));
  ASSERT_OK(sl_slr_writer_close(w));
  ASSERT_OK(sl_slr_open(path, NULL, &f));
  ASSERT_EQ(sl_slr_records(f), 0);
  ASSERT_EQ(sl_slr_chunks(f), 0);
  ASSERT_OK(sl_slr_verify(f));
  sl_slr_close(f);
  sl_reader *rd;
  sl_sample *r;
  ASSERT_OK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &rd));
  ASSERT_RC(sl_reader_next(rd, &r), SL_EOF);
  sl_reader_destroy(rd);
  sl_schema_release(s);
}

TEST(writer_refuses_mismatched_samples_and_bad_options) {
  sl_schema *s = mixed_schema();
  sl_slr_writer *w;
  const char *path = tmppath("refuse.slr");
  sl_slr_writer_opts bad = {99, 0, 0};
  ASSERT_RC(sl_slr_writer_open(path, s, &bad, &w), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "zstd level 99");
  ASSERT_RC(sl_slr_writer_open("/nonexistent-dir/x.slr", s, NULL, &w), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "/nonexistent-dir/x.slr.tmp-");
  ASSERT_OK(sl_slr_writer_open(path, s, NULL, &w));
  /* A sample whose x is f32[4] instead of f32[3]. */
  sl_schema *s2 = sl_schema_new();
  ASSERT_OK(sl_schema_add(s2, "x", SL_F32, 1, (int64_t[]){4}));
  ASSERT_OK(sl_schema_add(s2, "tokens", SL_I32, 1, (int64_t[]){SL_DIM_VAR}));
  ASSERT_OK(sl_schema_add(s2, "text", SL_BYTES, 1, (int64_t[]){SL_DIM_VAR}));
  ASSERT_OK(sl_schema_add(s2, "label", SL_I64, 0, NULL));
  sl_sample *r = sl_sample_new(s2);
  ASSERT_OK(sl_sample_alloc(r, 0, 1, (int64_t[]){4}, NULL));
  ASSERT_RC(sl_slr_writer_append(w, r), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "field 'x': expected f32[3], got f32[4]");
  ASSERT_CONTAINS(sl_last_error(), "record 0");
  sl_sample_release(r);
  /* The writer is still usable after a refused sample. */
  r = make_record(s, 0);
  ASSERT_OK(sl_slr_writer_append(w, r));
  sl_sample_release(r);
  ASSERT_OK(sl_slr_writer_close(w));
  sl_schema_release(s2);
  sl_schema_release(s);
}

TEST(unfinished_write_leaves_no_file_under_the_final_name) {
  sl_schema *s = mixed_schema();
  const char *path = tmppath("unfinished.slr");
  char final_path[512];
  snprintf(final_path, sizeof final_path, "%s", path);
  sl_slr_writer *w;
  ASSERT_OK(sl_slr_writer_open(final_path, s, NULL, &w));
  for (int i = 0; i < 50; i++) {
    sl_sample *r = make_record(s, i);
    ASSERT_OK(sl_slr_writer_append(w, r));
    sl_sample_release(r);
  }
  struct stat st;
  ASSERT_TRUE(stat(final_path, &st) != 0);       /* not there until close */
  ASSERT_EQ(test_temporaries_of(final_path), 1); /* the writer's temporary */
  sl_slr_writer_abort(w);
  ASSERT_TRUE(stat(final_path, &st) != 0);
  ASSERT_EQ(test_temporaries_of(final_path), 0); /* abort removed it */
  sl_schema_release(s);
}

/* --- bad files
 * -------------------------------------------------------------------- */

TEST(open_reports_missing_short_and_foreign_files) {
  sl_slr_file *f;
  ASSERT_RC(sl_slr_open(tmppath("missing.slr"), NULL, &f), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "missing.slr: cannot open");
  const char *p = tmppath("short.slr");
  spill(p, (const unsigned char *)"hello", 5);
  ASSERT_RC(sl_slr_open(p, NULL, &f), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "too short for an SLR file");
  unsigned char junk[200];
  memset(junk, 'j', sizeof junk);
  spill(p, junk, sizeof junk);
  ASSERT_RC(sl_slr_open(p, NULL, &f), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "not an SLR file");
  ASSERT_RC(sl_slr_open(tmpdir(), NULL, &f), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "not a regular file");
  sl_slr_open_opts bad = {(sl_corrupt_policy)7, 0, 0};
  ASSERT_RC(sl_slr_open(p, &bad, &f), SL_EINVAL);
}

TEST(newer_major_version_and_unknown_features_are_unsupported) {
  const char *path = tmppath("version.slr");
  write_file(path, 5, 5, 1);
  size_t n;
  unsigned char *b = slurp(path, &n);
  b[8] = 2; /* major 2 */
  sl__put32(b + 28, sl__crc32c(0, b, 28));
  spill(path, b, n);
  sl_slr_file *f;
  ASSERT_RC(sl_slr_open(path, NULL, &f), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "SLR version 2.0 is not supported");
  b[8] = 1;
  sl__put32(b + 12, 0x4); /* an unknown required feature */
  sl__put32(b + 28, sl__crc32c(0, b, 28));
  spill(path, b, n);
  ASSERT_RC(sl_slr_open(path, NULL, &f), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "unknown required feature bits 0x00000004");
  sl__put32(b + 12, 0);
  sl__put32(b + 16, 0x80); /* unknown optional features are fine */
  b[10] = 7;               /* and so is a newer minor version */
  sl__put32(b + 28, sl__crc32c(0, b, 28));
  spill(path, b, n);
  ASSERT_OK(sl_slr_open(path, NULL, &f));
  ASSERT_OK(sl_slr_verify(f));
  sl_slr_close(f);
  free(b);
}

/* An index entry whose offset would overflow offset + header size, with
 * a valid CRC (as a crafted file would have): refused at open. */
TEST(index_offsets_near_the_top_of_the_range_are_corrupt) {
  const char *path = tmppath("overflow.slr");
  write_file(path, 10, 5, 1);
  size_t size;
  unsigned char *b = slurp(path, &size);
  uint64_t io = sl__get64(b + size - 64 + 16),
           is = sl__get64(b + size - 64 + 24);
  sl__put64(b + io + 16 + 24, UINT64_MAX - 15); /* entry 1's offset */
  sl__put32(b + io + is - 4, sl__crc32c(0, b + io, (size_t)is - 4));
  spill(path, b, size);
  free(b);
  sl_slr_file *f;
  ASSERT_RC(sl_slr_open(path, NULL, &f), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "index entry 1");
}

/* Reads every record with `policy`; returns the reader's final code and
 * marks which records came back (each must equal the original). */
static int read_all(const char *path, sl_corrupt_policy policy, bool *seen,
                    int64_t n) {
  sl_slr_open_opts o = {policy, 1000, 0};
  sl_reader *rd;
  int rc = sl_slr_reader(path, &o, 0, UINT64_MAX, &rd);
  if (rc < 0) return rc;
  sl_sample *r;
  while ((rc = sl_reader_next(rd, &r)) == SL_OK) {
    int64_t label = *(int64_t *)sl_sample_field(r, "label")->data;
    int64_t i = (label + 1) / 3;
    ASSERT_TRUE(i >= 0 && i < n && !seen[i]);
    check_record(r, i); /* never wrong data */
    seen[i] = true;
    sl_sample_release(r);
  }
  sl_reader_destroy(rd);
  return rc;
}

TEST(corruption_sweep_every_byte) {
  const char *path = tmppath("sweep.slr"), *bad = tmppath("sweep-bad.slr");
  const int64_t n = 24;
  write_file(path, n, 6, 1); /* 4 chunks of 6 records */
  size_t size;
  unsigned char *orig = slurp(path, &size);
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(path, NULL, &f));
  uint64_t chunk_off[5];
  for (uint64_t c = 0; c < 4; c++) {
    sl_slr_chunk_info ci;
    ASSERT_OK(sl_slr_chunk_info_get(f, c, &ci));
    chunk_off[c] = ci.offset;
  }
  sl_slr_close(f);
  chunk_off[4] = UINT64_MAX;
  for (size_t pos = 0; pos < size; pos++) {
    unsigned char *b = malloc(size);
    memcpy(b, orig, size);
    b[pos] ^= 0x5a;
    spill(bad, b, size);
    free(b);
    int rc = sl_slr_open(bad, NULL, &f);
    if (rc < 0) {
      if (rc != SL_ECORRUPT && rc != SL_EUNSUPPORTED)
        test_fail(__FILE__, __LINE__, "byte %zu: open gave %s: %s", pos,
                  sl_err_name(rc), sl_last_error());
      continue;
    }
    rc = sl_slr_verify(f);
    sl_slr_close(f);
    if (rc != SL_ECORRUPT)
      test_fail(__FILE__, __LINE__, "byte %zu: verify gave %s", pos,
                sl_err_name(rc));
    ASSERT_CONTAINS(sl_last_error(), "chunk ");
    bool seen[24] = {0};
    rc = read_all(bad, SL_CORRUPT_FAIL, seen, n);
    if (rc != SL_ECORRUPT)
      test_fail(__FILE__, __LINE__, "byte %zu: policy fail gave %s", pos,
                sl_err_name(rc));
    /* skip_chunk: exactly the chunk holding the byte is missing. */
    memset(seen, 0, sizeof seen);
    rc = read_all(bad, SL_CORRUPT_SKIP_CHUNK, seen, n);
    ASSERT_RC(rc, SL_EOF);
    int64_t hit = -1;
    for (int c = 0; c < 4; c++)
      if (pos >= chunk_off[c] && pos < chunk_off[c + 1]) hit = c;
    ASSERT_TRUE(hit >= 0);
    for (int64_t i = 0; i < n; i++)
      if (seen[i] != (i / 6 != hit))
        test_fail(__FILE__, __LINE__,
                  "byte %zu (chunk %lld): record %lld seen=%d", pos,
                  (long long)hit, (long long)i, seen[i]);
  }
  free(orig);
}

TEST(truncation_at_every_length_is_detected) {
  const char *path = tmppath("trunc.slr"), *bad = tmppath("trunc-bad.slr");
  write_file(path, 12, 4, 1);
  size_t size;
  unsigned char *orig = slurp(path, &size);
  for (size_t len = 0; len < size; len++) {
    spill(bad, orig, len);
    sl_slr_file *f;
    int rc = sl_slr_open(bad, NULL, &f);
    if (rc != SL_ECORRUPT)
      test_fail(__FILE__, __LINE__, "length %zu of %zu: open gave %s", len,
                size, sl_err_name(rc));
    if (len >= 96 && len < size)
      ASSERT_TRUE(strstr(sl_last_error(), "truncated") ||
                  strstr(sl_last_error(), "footer"));
  }
  free(orig);
}

TEST(skip_chunk_cap_fails_after_too_many_bad_chunks) {
  const char *path = tmppath("cap.slr");
  write_file(path, 20, 2, 1); /* 10 chunks */
  size_t size;
  unsigned char *b = slurp(path, &size);
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(path, NULL, &f));
  for (uint64_t c = 0; c < 10; c += 3) { /* damage chunks 0, 3, 6, 9 */
    sl_slr_chunk_info ci;
    ASSERT_OK(sl_slr_chunk_info_get(f, c, &ci));
    b[ci.offset + 40 + ci.stored_size / 2] ^= 1;
  }
  sl_slr_close(f);
  spill(path, b, size);
  free(b);
  sl_slr_open_opts o = {SL_CORRUPT_SKIP_CHUNK, 3, 0};
  sl_reader *rd;
  ASSERT_OK(sl_slr_reader(path, &o, 0, UINT64_MAX, &rd));
  sl_sample *r;
  int got = 0, rc;
  while ((rc = sl_reader_next(rd, &r)) == SL_OK) {
    got++;
    sl_sample_release(r);
  }
  ASSERT_RC(rc, SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "4 corrupt chunks skipped, more than the "
                                   "cap of 3");
  ASSERT_CONTAINS(sl_last_error(), "chunk 9");
  /* Chunks 1, 2, 4, 5, 7 and 8 came through before the fourth bad one. */
  ASSERT_EQ(got, 12);
  sl_reader_destroy(rd);
}

TEST(limits_are_checked_before_allocating) {
  const char *path = tmppath("limit.slr");
  write_file(path, 64, 64, 1);
  sl_slr_open_opts o = {SL_CORRUPT_FAIL, 0, 256}; /* tiny chunk limit */
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(path, &o, &f));
  sl_sample *r;
  ASSERT_RC(sl_slr_read(f, 0, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "exceeds the limit of 256");
  sl_slr_close(f);
}

/* A byte source failing the N-th read: every N gives a clean error. */
TEST(io_errors_at_every_read_are_reported) {
  const char *path = tmppath("eio.slr");
  write_file(path, 30, 7, 1);
  int successes = 0;
  for (long n = 0; n < 40; n++) {
    sl__source *src, *faulty;
    ASSERT_OK(sl__source_open_file(path, &src));
    ASSERT_OK(sl__source_faulty(src, n, 0, UINT64_MAX, &faulty));
    sl_slr_file *f;
    int rc = sl__slr_open_source(faulty, NULL, &f);
    if (rc == SL_OK) {
      rc = sl_slr_verify(f);
      sl_slr_close(f);
    }
    if (rc == SL_OK) {
      successes++;
      continue;
    }
    ASSERT_RC(rc, SL_EIO);
    ASSERT_CONTAINS(sl_last_error(), "injected I/O error");
  }
  ASSERT_GE(successes, 1); /* past the last read, the whole file verifies */
}

/* --- golden file
 * -------------------------------------------------------------------- */

#define GOLDEN SLUICE_SOURCE_DIR "/tests/data/golden-v1.slr"

/* Regenerate (only when the format's writer changes on purpose):
 *   SLUICE_WRITE_GOLDEN=1 build/test_slr golden_v1_file_still_reads */
TEST(golden_v1_file_still_reads) {
  if (getenv("SLUICE_WRITE_GOLDEN")) {
    write_file(GOLDEN, 40, 16, 3);
    printf("wrote %s\n", GOLDEN);
  }
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(GOLDEN, NULL, &f));
  ASSERT_EQ(sl_slr_records(f), 40);
  ASSERT_EQ(sl_slr_chunks(f), 3);
  ASSERT_OK(sl_slr_verify(f));
  for (uint64_t k = 0; k < 40; k++) {
    sl_sample *r;
    ASSERT_OK(sl_slr_read(f, k, &r));
    check_record(r, (int64_t)k);
    sl_sample_release(r);
  }
  sl_slr_close(f);
}

/* --- crafted files: hostile sizes and values (issue 13, items 7, 8, 14) -----
 * craft_slr writes a file from a schema block body and stored chunk
 * payloads, with every CRC, the index and the footer made valid, so the
 * reader's checks behind the checksums are what is tested. */

#include <zstd.h>

typedef struct cbuf {
  unsigned char *b;
  size_t n, cap;
} cbuf;

static void cb_put(cbuf *c, const void *p, size_t n) {
  if (c->n + n > c->cap) {
    c->cap = (c->n + n) * 2 + 64;
    c->b = realloc(c->b, c->cap);
    ASSERT_NOT_NULL(c->b);
  }
  if (n) memcpy(c->b + c->n, p, n);
  c->n += n;
}
static void cb_le(cbuf *c, uint64_t v, int bytes) {
  unsigned char b[8];
  for (int i = 0; i < bytes; i++)
    b[i] = (unsigned char)(v >> (8 * i));
  cb_put(c, b, (size_t)bytes);
}

/* A field of a schema block body: name bytes (len 0 = strlen), dtype, rank,
 * dims. */
typedef struct cfield {
  const char *name;
  size_t name_len;
  int dtype, rank;
  int64_t dims[4];
} cfield;

/* Schema block body (field count .. metadata entries): nf fields, nm
 * key/value pairs in meta (2 * nm strings). */
static void craft_schema(cbuf *c, const cfield *fs, int nf,
                         const char *const *meta, int nm) {
  cb_le(c, (uint64_t)nf, 4);
  for (int i = 0; i < nf; i++) {
    size_t nl = fs[i].name_len ? fs[i].name_len : strlen(fs[i].name);
    cb_le(c, nl, 2);
    cb_put(c, fs[i].name, nl);
    cb_le(c, (uint64_t)fs[i].dtype, 1);
    cb_le(c, (uint64_t)fs[i].rank, 1);
    for (int d = 0; d < fs[i].rank; d++)
      cb_le(c, (uint64_t)fs[i].dims[d], 8);
  }
  cb_le(c, (uint64_t)nm, 4);
  for (int i = 0; i < 2 * nm; i++) {
    cb_le(c, strlen(meta[i]), 4);
    cb_put(c, meta[i], strlen(meta[i]));
  }
}

typedef struct cchunk {
  uint32_t records;
  const unsigned char *stored; /* the zstd frame */
  size_t stored_len;
  uint64_t raw_size; /* as declared in the chunk header */
} cchunk;

static void craft_slr(const char *path, const cbuf *schema_body,
                      const cchunk *ch, int n) {
  cbuf f = {0};
  unsigned char h[32] = {0x89, 'S', 'L', 'R', '\r', '\n', 0x1a, '\n', 1, 0};
  sl__put32(h + 28, sl__crc32c(0, h, 28));
  cb_put(&f, h, 32);
  uint64_t *offs = calloc((size_t)n + 1, sizeof *offs);
  uint32_t *hcrc = calloc((size_t)n + 1, sizeof *hcrc);
  uint64_t records = 0;
  for (int i = 0; i < n; i++) {
    unsigned char c[40];
    sl__put32(c, 0x4B434C53u);
    sl__put32(c + 4, ch[i].records);
    sl__put64(c + 8, ch[i].stored_len);
    sl__put64(c + 16, ch[i].raw_size);
    sl__put32(c + 24, (uint32_t)i);
    sl__put32(c + 28, 1);
    sl__put32(c + 32, sl__crc32c(0, ch[i].stored, ch[i].stored_len));
    hcrc[i] = sl__crc32c(0, c, 36);
    sl__put32(c + 36, hcrc[i]);
    offs[i] = f.n;
    cb_put(&f, c, 40);
    cb_put(&f, ch[i].stored, ch[i].stored_len);
  }
  uint64_t so = f.n, ss = 12 + schema_body->n;
  size_t s0 = f.n;
  cb_le(&f, 0x43534C53u, 4);
  cb_le(&f, ss, 4);
  cb_put(&f, schema_body->b, schema_body->n);
  cb_le(&f, sl__crc32c(0, f.b + s0, f.n - s0), 4);
  uint64_t io = f.n, is = 20 + 24 * (uint64_t)n;
  size_t i0 = f.n;
  cb_le(&f, 0x58494C53u, 4);
  cb_le(&f, 0, 4);
  cb_le(&f, (uint64_t)n, 8);
  for (int i = 0; i < n; i++) {
    cb_le(&f, offs[i], 8);
    cb_le(&f, records, 8);
    cb_le(&f, ch[i].records, 4);
    cb_le(&f, hcrc[i], 4);
    records += ch[i].records;
  }
  cb_le(&f, sl__crc32c(0, f.b + i0, f.n - i0), 4);
  unsigned char ft[64] = {0};
  sl__put64(ft, so);
  sl__put64(ft + 8, ss);
  sl__put64(ft + 16, io);
  sl__put64(ft + 24, is);
  sl__put64(ft + 32, records);
  sl__put64(ft + 40, (uint64_t)n);
  sl__put32(ft + 52, sl__crc32c(0, ft, 52));
  memcpy(ft + 56, "SLREND01", 8);
  cb_put(&f, ft, 64);
  spill(path, f.b, f.n);
  free(f.b);
  free(offs);
  free(hcrc);
}

/* A zstd frame declaring hlen + zeros bytes: `head` in a raw block, then
 * the zeros as RLE blocks of 128 KiB (4 bytes each: 32768:1). */
static void rle_frame(cbuf *out, const unsigned char *head, size_t hlen,
                      uint64_t zeros) {
  cb_le(out, 0xFD2FB528u, 4);
  cb_le(out, 0xE0, 1); /* 8-byte content size, single segment */
  cb_le(out, hlen + zeros, 8);
  cb_le(out, (uint64_t)hlen << 3 | (zeros ? 0 : 1), 3); /* raw block */
  cb_put(out, head, hlen);
  while (zeros) {
    uint64_t k = SL_MIN(zeros, (uint64_t)128 << 10);
    zeros -= k;
    cb_le(out, k << 3 | 1 << 1 | (zeros ? 0 : 1), 3); /* RLE block */
    cb_le(out, 0, 1);
  }
}

/* One chunk of one record of {blob: u8[-1]} holding `zeros` zero bytes (a
 * multiple of 8), as an RLE bomb; raw size 16 + zeros. */
static void blob_bomb(cbuf *frame, uint64_t zeros) {
  unsigned char head[16] = {0};
  sl__put32(head, (uint32_t)(8 + zeros)); /* end of record 0 */
  sl__put64(head + 8, zeros);             /* its dim */
  rle_frame(frame, head, sizeof head, zeros);
}

static const cfield blob_field = {"blob", 0, SL_U8, 1, {SL_DIM_VAR}};

/* Item 8: 4 chunks of ~1 GiB zeros in a 131 KB file (valid CRCs, valid
 * frames) are refused before anything of their size is allocated. */
TEST(gigabyte_bomb_chunks_are_refused_before_allocating) {
  const char *path = tmppath("bomb.slr");
  cbuf schema = {0}, frame = {0};
  craft_schema(&schema, &blob_field, 1, NULL, 0);
  blob_bomb(&frame, ((uint64_t)1 << 30) - 16);
  cchunk ch[4];
  for (int i = 0; i < 4; i++)
    ch[i] = (cchunk){1, frame.b, frame.n, (uint64_t)1 << 30};
  craft_slr(path, &schema, ch, 4);
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(path, NULL, &f));
  sl__alloc_largest();
  ASSERT_RC(sl_slr_verify(f), SL_ECORRUPT);
  ASSERT_LE(sl__alloc_largest(), (size_t)1 << 20);
  ASSERT_CONTAINS(sl_last_error(), "bomb.slr: chunk 0 at offset 32");
  ASSERT_CONTAINS(sl_last_error(), "exceeds the limit of 268435456 bytes");
  ASSERT_CONTAINS(sl_last_error(), "max_chunk_bytes");
  sl_slr_close(f);
  /* The same through the reader stage, under skip_chunk: every chunk is
   * refused, none allocated. */
  sl_slr_open_opts o = {SL_CORRUPT_SKIP_CHUNK, 8, 0};
  sl_reader *r;
  ASSERT_OK(sl_slr_reader(path, &o, 0, UINT64_MAX, &r));
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_LE(sl__alloc_largest(), (size_t)1 << 20);
  sl_reader_destroy(r);
  free(schema.b);
  free(frame.b);
}

/* Item 8: a file that records no chunk size may not claim more than 1024:1
 * above 16 MiB; the max_chunk_bytes option reads it. */
TEST(unrecorded_chunk_size_is_bounded_by_a_ratio) {
  const char *path = tmppath("ratio.slr");
  cbuf schema = {0}, frame = {0};
  craft_schema(&schema, &blob_field, 1, NULL, 0);
  uint64_t zeros = (uint64_t)64 << 20;
  blob_bomb(&frame, zeros);
  cchunk ch = {1, frame.b, frame.n, 16 + zeros};
  craft_slr(path, &schema, &ch, 1);
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(path, NULL, &f));
  sl__alloc_largest();
  ASSERT_RC(sl_slr_verify(f), SL_ECORRUPT);
  ASSERT_LE(sl__alloc_largest(), (size_t)1 << 20);
  ASSERT_CONTAINS(sl_last_error(), "ratio.slr: chunk 0");
  ASSERT_CONTAINS(sl_last_error(), "a ratio above 1024:1");
  sl_slr_close(f);
  sl_slr_open_opts o = {SL_CORRUPT_FAIL, 0, (uint64_t)128 << 20};
  ASSERT_OK(sl_slr_open(path, &o, &f));
  ASSERT_OK(sl_slr_verify(f));
  sl_sample *s;
  ASSERT_OK(sl_slr_read(f, 0, &s));
  ASSERT_EQ(sl_sample_at_const(s, 0)->shape[0], (int64_t)zeros);
  sl_sample_release(s);
  sl_slr_close(f);
  free(schema.b);
  free(frame.b);
}

/* Item 8: sluice.max_chunk_raw, recorded by the writer, is the default
 * limit: all-zero data it records reads (no ratio bound), a chunk above it
 * is corrupt, and a recorded value that is not a size up to 1 GiB is
 * corrupt at open. */
TEST(recorded_max_chunk_raw_is_the_default_limit) {
  const char *path = tmppath("recorded.slr");
  uint64_t zeros = (uint64_t)32 << 20;
  cbuf frame = {0};
  blob_bomb(&frame, zeros);
  cchunk ch = {1, frame.b, frame.n, 16 + zeros};
  char fits[32], small[32];
  snprintf(fits, sizeof fits, "%llu", (unsigned long long)(16 + zeros));
  snprintf(small, sizeof small, "%llu", (unsigned long long)(8 + zeros));
  const char *vals[] = {fits, small, "1073741825", "12x", ""};
  for (int i = 0; i < 5; i++) {
    cbuf schema = {0};
    const char *meta[] = {"sluice.max_chunk_raw", vals[i]};
    craft_schema(&schema, &blob_field, 1, meta, 1);
    craft_slr(path, &schema, &ch, 1);
    free(schema.b);
    sl_slr_file *f;
    int rc = sl_slr_open(path, NULL, &f);
    if (i >= 2) {
      ASSERT_RC(rc, SL_ECORRUPT);
      ASSERT_CONTAINS(sl_last_error(), "recorded.slr: schema block");
      ASSERT_CONTAINS(sl_last_error(), "sluice.max_chunk_raw");
      continue;
    }
    ASSERT_OK(rc);
    rc = sl_slr_verify(f);
    if (i == 0) {
      ASSERT_OK(rc);
    } else {
      ASSERT_RC(rc, SL_ECORRUPT);
      ASSERT_CONTAINS(sl_last_error(), "exceeds the limit of");
      ASSERT_CONTAINS(sl_last_error(), "largest chunk its writer recorded");
    }
    sl_slr_close(f);
  }
  free(frame.b);
}

/* Item 8: running out of memory while a chunk is read names the file and
 * the chunk. */
TEST(allocation_failures_name_the_file_and_chunk) {
  const char *path = tmppath("oom.slr");
  write_file(path, 40, 8, 1);
  int failures = 0;
  for (long n = 0; n < 64; n++) {
    sl_slr_file *f;
    ASSERT_OK(sl_slr_open(path, NULL, &f));
    sl__alloc_fail_after(n);
    int rc = sl_slr_verify(f);
    sl__alloc_fail_after(-1);
    sl_slr_close(f);
    if (rc == SL_OK) continue;
    failures++;
    ASSERT_RC(rc, SL_ENOMEM);
    ASSERT_CONTAINS(sl_last_error(), "oom.slr: ");
    ASSERT_CONTAINS(sl_last_error(), "chunk ");
  }
  ASSERT_GE(failures, 2);
}

/* Writes a one-chunk file of schema `fs` whose chunk holds `n` records
 * with the given raw payload (offset table included), zstd-compressed. */
static void craft_one_chunk(const char *path, const cfield *fs, int nf,
                            uint32_t n, const unsigned char *raw,
                            size_t raw_len) {
  cbuf schema = {0};
  craft_schema(&schema, fs, nf, NULL, 0);
  size_t cap = ZSTD_compressBound(raw_len);
  unsigned char *z = malloc(cap);
  size_t zn = ZSTD_compress(z, cap, raw, raw_len, 1);
  ASSERT_TRUE(!ZSTD_isError(zn));
  cchunk ch = {n, z, zn, raw_len};
  craft_slr(path, &schema, &ch, 1);
  free(z);
  free(schema.b);
}

/* Opens and verifies `path`: SL_OK, or the error code (message kept). */
static int open_verify(const char *path) {
  sl_slr_file *f;
  int rc = sl_slr_open(path, NULL, &f);
  if (rc < 0) return rc;
  rc = sl_slr_verify(f);
  sl_slr_close(f);
  return rc;
}

/* Item 7: a schema block with more metadata entries than SL_MAX_META is
 * corrupt (200 000 took 42.7 s per open when keys were searched linearly);
 * SL_MAX_META entries open, every key found. */
TEST(metadata_entry_count_is_bounded) {
  const char *path = tmppath("meta_many.slr");
  int counts[] = {200000, SL_MAX_META};
  for (int t = 0; t < 2; t++) {
    int nm = counts[t];
    char **meta = malloc(sizeof(char *) * 2 * (size_t)nm);
    for (int i = 0; i < nm; i++) {
      char k[32];
      snprintf(k, sizeof k, "key-%d", i);
      meta[2 * i] = strdup(k);
      meta[2 * i + 1] = strdup(k + 4);
    }
    cbuf schema = {0};
    craft_schema(&schema, &blob_field, 1, (const char *const *)meta, nm);
    craft_slr(path, &schema, NULL, 0);
    free(schema.b);
    sl_slr_file *f;
    int rc = sl_slr_open(path, NULL, &f);
    if (t == 0) {
      ASSERT_RC(rc, SL_ECORRUPT);
      ASSERT_CONTAINS(sl_last_error(), "meta_many.slr: schema block");
      ASSERT_CONTAINS(sl_last_error(),
                      "200000 metadata entries, more than the maximum of "
                      "65536");
    } else {
      ASSERT_OK(rc);
      const sl_schema *s = sl_slr_schema(f);
      ASSERT_EQ(sl_schema_meta_count(s), nm);
      ASSERT_STREQ(sl_schema_meta(s, "key-0"), "0");
      ASSERT_STREQ(sl_schema_meta(s, "key-65535"), "65535");
      ASSERT_NULL(sl_schema_meta(s, "key-65536"));
      const char *k, *v;
      ASSERT_OK(sl_schema_meta_at(s, 1234, &k, &v));
      ASSERT_STREQ(k, "key-1234");
      sl_slr_close(f);
    }
    for (int i = 0; i < 2 * nm; i++)
      free(meta[i]);
    free(meta);
  }
}

/* Item 7: a repeated metadata key is corrupt, named. */
TEST(duplicate_metadata_keys_are_corrupt) {
  const char *path = tmppath("meta_dup.slr");
  const char *meta[] = {"origin", "a", "split", "train", "origin", "b"};
  cbuf schema = {0};
  craft_schema(&schema, &blob_field, 1, meta, 3);
  craft_slr(path, &schema, NULL, 0);
  free(schema.b);
  ASSERT_RC(open_verify(path), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "meta_dup.slr: schema block at offset 32");
  ASSERT_CONTAINS(sl_last_error(), "entry 2 repeats the key 'origin'");
}

/* Item 14: a bool element other than 0 or 1 is corrupt; so is a non-zero
 * padding byte (alignment or the record's pad to 8). */
TEST(bool_values_and_record_padding_are_checked) {
  const char *path = tmppath("bool.slr");
  /* {flag: bool[2], n: i32[-1]}: dims (8) | flag (2) | pad (2) | n (4 k) |
   * pad to 8. */
  const cfield fs[] = {{"flag", 0, SL_BOOL, 1, {2}},
                       {"n", 0, SL_I32, 1, {SL_DIM_VAR}}};
  struct {
    unsigned char flag0, flag1, gap, tail;
    int rc;
    const char *msg;
  } cases[] = {
      {1, 0, 0, 0, SL_OK, NULL},
      {1, 7, 0, 0, SL_ECORRUPT, "bool field 0: element 1 is 7"},
      {0, 1, 5, 0, SL_ECORRUPT,
       "non-zero padding byte 0x05 at record offset 10"},
      {0, 1, 0, 9, SL_ECORRUPT,
       "non-zero padding byte 0x09 at record offset 20"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    unsigned char raw[8 + 24] = {0};
    sl__put32(raw, 24); /* end of record 0 */
    unsigned char *r = raw + 8;
    sl__put64(r, 2); /* n has 2 elements */
    r[8] = cases[c].flag0;
    r[9] = cases[c].flag1;
    r[10] = cases[c].gap;
    sl__put32(r + 12, 41);
    sl__put32(r + 16, 42);
    r[20] = cases[c].tail;
    craft_one_chunk(path, fs, 2, 1, raw, sizeof raw);
    int rc = open_verify(path);
    ASSERT_RC(rc, cases[c].rc);
    if (cases[c].msg) {
      ASSERT_CONTAINS(sl_last_error(), "bool.slr: chunk 0 at offset 32");
      ASSERT_CONTAINS(sl_last_error(), cases[c].msg);
    }
  }
}

/* Item 14: bytes fields are bytes[-1]; field names are UTF-8. */
TEST(bytes_shapes_and_non_utf8_names_are_corrupt) {
  const char *path = tmppath("schema14.slr");
  const cfield bad[] = {
      {"b", 0, SL_BYTES, 1, {5}},
      {"b", 0, SL_BYTES, 2, {SL_DIM_VAR, 3}},
      {"b", 0, SL_BYTES, 0, {0}},
      {"\xff\xfe", 0, SL_U8, 0, {0}},
      {"a\xc0\xaf", 0, SL_U8, 0, {0}},    /* overlong '/' */
      {"\xed\xa0\x80", 0, SL_U8, 0, {0}}, /* a surrogate */
      {"x\xe2\x82", 0, SL_U8, 0, {0}},    /* cut short */
  };
  const char *why[] = {"field 'b' is bytes of rank 1 with a fixed size",
                       "field 'b' is bytes of rank 2",
                       "field 'b' is bytes of rank 0",
                       "field 0's name is not valid UTF-8",
                       "field 0's name is not valid UTF-8",
                       "field 0's name is not valid UTF-8",
                       "field 0's name is not valid UTF-8"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cbuf schema = {0};
    craft_schema(&schema, &bad[i], 1, NULL, 0);
    craft_slr(path, &schema, NULL, 0);
    free(schema.b);
    ASSERT_RC(open_verify(path), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(), "schema14.slr: schema block at offset 32");
    ASSERT_CONTAINS(sl_last_error(), why[i]);
  }
  /* Multi-byte UTF-8 names and bytes[-1] are fine. */
  const cfield good[] = {{"gr\xc3\xb6\xc3\x9f"
                          "e \xf0\x9f\x93\x8f",
                          0,
                          SL_U8,
                          0,
                          {0}},
                         {"b", 0, SL_BYTES, 1, {SL_DIM_VAR}}};
  cbuf schema = {0};
  craft_schema(&schema, good, 2, NULL, 0);
  craft_slr(path, &schema, NULL, 0);
  free(schema.b);
  ASSERT_OK(open_verify(path));
}
