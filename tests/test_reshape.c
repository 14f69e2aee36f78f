/*
 * test_reshape.c - sl_unbatch (batches split into rows, LoD fields by their
 * offsets) and sl_rebatch (rows re-cut into batches of n).
 */
#include "test.h"
#include "test_util.h"

#include <stdint.h>

#define OK(x) ASSERT_OK(x)

static sl_reader *batched(int64_t n, size_t b, int drop_last) {
  sl_batch_opts o = {0};
  o.drop_last = drop_last;
  sl_reader *r;
  OK(sl_batch(test_range_reader(n), b, &o, &r));
  return r;
}

static sl_reader *unbatched(sl_reader *up) {
  sl_reader *r;
  OK(sl_unbatch(up, NULL, 0, &r));
  return r;
}

TEST(unbatch_gives_the_rows) {
  sl_reader *r = unbatched(batched(10, 4, 0));
  EXPECT(r, SL_EOF, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
  /* The last batch is short, so B is variable: no length. */
  uint64_t n;
  ASSERT_RC(sl_reader_length(r, &n), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "unbatch: the rows per batch vary");
  /* The schema is upstream's without the batch dimension: i64[]. */
  const sl_schema *s = sl_reader_schema(r);
  ASSERT_EQ(sl_schema_nfields(s), 1);
  ASSERT_EQ(sl_schema_field_rank(s, 0), 0);
  ASSERT_EQ(sl_schema_field_dtype(s, 0), SL_I64);
  sl_reader_destroy(r);
  /* drop_last: B is fixed, so the length is 8. */
  r = unbatched(batched(10, 4, 1));
  ASSERT_EQ(test_length_checked(r), 8);
  EXPECT(r, SL_EOF, 0, 1, 2, 3, 4, 5, 6, 7);
  sl_reader_destroy(r);
  /* An empty upstream. */
  r = unbatched(batched(0, 4, 1));
  ASSERT_EQ(test_length_checked(r), 0);
  EXPECT_NONE(r, SL_EOF);
  sl_reader_destroy(r);
}

/* Samples {tok: i32[len], raw: bytes[len + 1], y: f32[2]} with len = i % 4,
 * tok[j] = 10 i + j, raw[j] = 'a' + i + j, y = {i, -i}. */
static sl_schema *ragged_schema(void) {
  sl_schema *s = sl_schema_new();
  int64_t var = SL_DIM_VAR, two = 2;
  OK(sl_schema_add(s, "tok", SL_I32, 1, &var));
  OK(sl_schema_add(s, "raw", SL_BYTES, 1, &var));
  OK(sl_schema_add(s, "y", SL_F32, 1, &two));
  return s;
}

static sl_sample *ragged_sample(sl_schema *schema, int i) {
  sl_sample *s = sl_sample_new(schema);
  ASSERT_NOT_NULL(s);
  int64_t len = i % 4, rawlen = len + 1, two = 2;
  void *d;
  OK(sl_sample_alloc(s, 0, 1, &len, &d));
  for (int j = 0; j < len; j++)
    ((int32_t *)d)[j] = 10 * i + j;
  OK(sl_sample_alloc(s, 1, 1, &rawlen, &d));
  for (int j = 0; j < rawlen; j++)
    ((char *)d)[j] = (char)('a' + i + j);
  OK(sl_sample_alloc(s, 2, 1, &two, &d));
  ((float *)d)[0] = (float)i;
  ((float *)d)[1] = (float)-i;
  return s;
}

static sl_reader *ragged_source(int n) {
  sl_schema *schema = ragged_schema();
  sl_sample *v[64];
  for (int i = 0; i < n; i++)
    v[i] = ragged_sample(schema, i);
  sl_reader *r;
  OK(sl_reader_from_array(v, (size_t)n, schema, &r));
  for (int i = 0; i < n; i++)
    sl_sample_release(v[i]);
  sl_schema_release(schema);
  return r;
}

static const char *const k_lod[] = {"tok", "raw"};

TEST(unbatch_splits_lod_fields_by_their_offsets) {
  /* batch concatenates tok and raw with LoD offsets and stacks y; unbatch
   * with tok and raw named gives back every sample, byte for byte. */
  sl_reader *want = ragged_source(11), *r;
  OK(sl_batch(ragged_source(11), 3, NULL, &r));
  OK(sl_unbatch(r, k_lod, 2, &r));
  ASSERT_TRUE(sl_schema_equal(sl_reader_schema(r), sl_reader_schema(want)));
  for (int pass = 0; pass < 2; pass++) {
    int got = 0;
    for (;;) {
      sl_sample *a, *b;
      int rc = sl_reader_next(r, &a);
      ASSERT_EQ(sl_reader_next(want, &b), rc);
      if (rc == SL_EOF) break;
      OK(rc);
      ASSERT_EQ(test_sample_digest(a), test_sample_digest(b));
      /* Rows are views, not copies: no LoD left on them. */
      ASSERT_NULL(sl_sample_at_const(a, 0)->lod);
      sl_sample_release(a);
      sl_sample_release(b);
      got++;
    }
    ASSERT_EQ(got, 11);
    OK(sl_reader_reset(r));
    OK(sl_reader_reset(want));
  }
  sl_reader_destroy(r);
  sl_reader_destroy(want);
}

TEST(unbatch_lod_errors_name_the_field) {
  /* Not naming a LoD field: its batch carries offsets. */
  sl_reader *r;
  OK(sl_batch(ragged_source(4), 2, NULL, &r));
  OK(sl_unbatch(r, k_lod, 1, &r));
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "unbatch: batch 0: field 'raw' carries LoD");
  sl_reader_destroy(r);
  /* A name that is not a field, and one whose first dimension is fixed. */
  const char *bad[] = {"nope"};
  OK(sl_batch(ragged_source(4), 2, NULL, &r));
  ASSERT_RC(sl_unbatch(r, bad, 1, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "unbatch: lod field 'nope' is not a field");
  bad[0] = "y";
  OK(sl_batch(ragged_source(4), 2, (sl_batch_opts[]){{.drop_last = 1}}, &r));
  ASSERT_RC(sl_unbatch(r, bad, 1, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "unbatch: lod field 'y' has a fixed first");
  /* A named field without offsets: the unbatched (not batched) source. */
  const char *tok[] = {"tok"};
  OK(sl_unbatch(ragged_source(4), tok, 1, &r));
  ASSERT_RC(sl_reader_next(r, &s), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(),
                  "field 'tok' was named a LoD field but carries no LoD");
  sl_reader_destroy(r);
}

/* A "batch" of {a: i64[-1], b: i64[-1]} with a of `na` rows and b of `nb`. */
static sl_reader *pairs(const int64_t *na, const int64_t *nb, int n) {
  sl_schema *schema = sl_schema_new();
  int64_t var = SL_DIM_VAR;
  OK(sl_schema_add(schema, "a", SL_I64, 1, &var));
  OK(sl_schema_add(schema, "b", SL_I64, 1, &var));
  sl_sample *v[8];
  int64_t next = 0;
  for (int i = 0; i < n; i++) {
    v[i] = sl_sample_new(schema);
    void *d;
    OK(sl_sample_alloc(v[i], 0, 1, &na[i], &d));
    for (int64_t j = 0; j < na[i]; j++)
      ((int64_t *)d)[j] = next + j;
    OK(sl_sample_alloc(v[i], 1, 1, &nb[i], &d));
    for (int64_t j = 0; j < nb[i]; j++)
      ((int64_t *)d)[j] = -(next + j);
    next += na[i];
  }
  sl_reader *r;
  OK(sl_reader_from_array(v, (size_t)n, schema, &r));
  for (int i = 0; i < n; i++)
    sl_sample_release(v[i]);
  sl_schema_release(schema);
  return r;
}

TEST(unbatch_empty_batches_and_disagreeing_fields) {
  /* Batches of 2, 0, 0, 3 rows: the empty ones yield nothing. */
  static const int64_t na[] = {2, 0, 0, 3}, nb[] = {2, 0, 0, 3};
  sl_reader *r = unbatched(pairs(na, nb, 4));
  sl_sample *s;
  for (int64_t i = 0; i < 5; i++) {
    OK(sl_reader_next(r, &s));
    ASSERT_EQ(test_sample_i64(s, 0), i);
    ASSERT_EQ(test_sample_i64(s, 1), -i);
    sl_sample_release(s);
  }
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  /* Batch 1 has 2 rows of a but 3 of b. */
  static const int64_t ma[] = {1, 2}, mb[] = {1, 3};
  r = unbatched(pairs(ma, mb, 2));
  OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "unbatch: batch 1: field 'b' has 3 rows, "
                                   "but field 'a' has 2");
  sl_reader_destroy(r);
}

TEST(unbatch_bad_arguments) {
  sl_reader *r = (sl_reader *)1;
  /* A scalar field has nothing to split. */
  ASSERT_RC(sl_unbatch(test_range_reader(3), NULL, 0, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "unbatch: field 'i' is a scalar");
  ASSERT_RC(sl_unbatch(NULL, NULL, 0, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "unbatch: NULL upstream");
  ASSERT_RC(sl_unbatch(batched(3, 2, 0), NULL, 2, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "unbatch: NULL lod list");
  ASSERT_RC(sl_unbatch(batched(3, 2, 0), NULL, 0, NULL), SL_EINVAL);
  ASSERT_RC(sl_rebatch(batched(3, 2, 0), 0, NULL, NULL, 0, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "rebatch: batch size must be >= 1");
  ASSERT_RC(sl_rebatch(test_range_reader(3), 2, NULL, NULL, 0, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "rebatch: unbatch: field 'i' is a scalar");
}

TEST(unbatch_reset_mid_pass) {
  sl_reader *r = unbatched(batched(10, 4, 0));
  sl_sample *s;
  for (int i = 0; i < 6; i++) {
    OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
  sl_reader_destroy(r);
}

/* Field 0 of batch s as int64 values. */
static void expect_batch(sl_sample *s, const int64_t *want, int64_t n) {
  const sl_tensor *t = sl_sample_at_const(s, 0);
  ASSERT_EQ(t->rank, 1);
  ASSERT_EQ(t->shape[0], n);
  for (int64_t i = 0; i < n; i++)
    ASSERT_EQ(((const int64_t *)t->data)[i], want[i]);
  sl_sample_release(s);
}

TEST(rebatch_recuts_batches) {
  /* tf.data: range(10).batch(4).rebatch(3) -> [0,1,2] [3,4,5] [6,7,8] [9]. */
  sl_reader *r;
  OK(sl_rebatch(batched(10, 4, 0), 3, NULL, NULL, 0, &r));
  static const int64_t v[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (int pass = 0; pass < 2; pass++) {
    sl_sample *s;
    for (int b = 0; b < 4; b++) {
      OK(sl_reader_next(r, &s));
      expect_batch(s, v + 3 * b, b < 3 ? 3 : 1);
    }
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    OK(sl_reader_reset(r));
  }
  ASSERT_STREQ(sl_reader_name(r), "batch");
  sl_reader_destroy(r);
  /* drop_last on both sides: 8 rows, 2 batches of 3; the length knows. */
  sl_batch_opts o = {.drop_last = 1};
  OK(sl_rebatch(batched(10, 4, 1), 3, &o, NULL, 0, &r));
  ASSERT_EQ(test_length_checked(r), 2);
  sl_reader_destroy(r);
  /* LoD fields are concatenated again: the rows come back whole. */
  OK(sl_batch(ragged_source(10), 3, NULL, &r));
  OK(sl_rebatch(r, 4, NULL, k_lod, 2, &r));
  OK(sl_unbatch(r, k_lod, 2, &r));
  sl_reader *want = ragged_source(10);
  for (int i = 0; i < 10; i++) {
    sl_sample *a, *b;
    OK(sl_reader_next(r, &a));
    OK(sl_reader_next(want, &b));
    ASSERT_EQ(test_sample_digest(a), test_sample_digest(b));
    sl_sample_release(a);
    sl_sample_release(b);
  }
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  sl_reader_destroy(want);
}

static sl_reader *build(void *ud) {
  int kind = (int)(intptr_t)ud;
  sl_reader *r;
  switch (kind) {
  case 0: /* range -> batch(4) -> unbatch */
    return unbatched(batched(23, 4, 0));
  case 1: /* shuffle -> batch(5) -> unbatch -> prefetch */
    OK(sl_shuffle(test_range_reader(23), 7, 5, &r));
    OK(sl_batch(r, 5, NULL, &r));
    r = unbatched(r);
    OK(sl_prefetch(r, 4, &r));
    return r;
  case 2: /* ragged: batch(3) -> unbatch(lod) */
    OK(sl_batch(ragged_source(17), 3, NULL, &r));
    OK(sl_unbatch(r, k_lod, 2, &r));
    return r;
  case 3: /* batch(4) -> rebatch(3) */
    OK(sl_rebatch(batched(23, 4, 0), 3, NULL, NULL, 0, &r));
    return r;
  default: /* batch(4) -> rebatch(3) -> prefetch -> unbatch */
    OK(sl_rebatch(batched(23, 4, 0), 3, NULL, NULL, 0, &r));
    OK(sl_prefetch(r, 2, &r));
    return unbatched(r);
  }
}

TEST(save_restore) {
  static const uint64_t cuts[] = {0, 1,  2,  3,  4,  5,  7,  8,
                                  9, 17, 22, 23, 24, 30, 46, 50};
  for (int kind = 0; kind < 5; kind++)
    test_resume_check(build, (void *)(intptr_t)kind, 3, cuts,
                      sizeof cuts / sizeof *cuts, 0);
}

/* A save far behind (a prefetch of 1500 rows above 1-row batches) goes
 * past the log of 1024 batches: the restore replays the pass. */
TEST(save_behind_the_log_replays) {
  sl_reader *r = unbatched(batched(3000, 1, 0));
  sl_reader *p;
  OK(sl_prefetch(r, 1500, &p));
  sl_sample *s;
  OK(sl_reader_next(p, &s));
  sl_sample_release(s);
  /* Let the worker run ahead. */
  for (int i = 0; i < 200; i++)
    test_sleep_us(1000);
  void *st;
  size_t len;
  OK(sl_reader_save(p, &st, &len));
  sl_reader_destroy(p);
  p = unbatched(batched(3000, 1, 0));
  OK(sl_prefetch(p, 1500, &p));
  OK(sl_reader_restore(p, st, len));
  sl_free(st);
  for (int64_t i = 1; i < 3000; i++) {
    OK(sl_reader_next(p, &s));
    ASSERT_EQ(test_sample_i64(s, 0), i);
    sl_sample_release(s);
  }
  ASSERT_RC(sl_reader_next(p, &s), SL_EOF);
  sl_reader_destroy(p);
}

TEST(identity_names_the_lod_fields) {
  sl_reader *a, *b;
  OK(sl_batch(ragged_source(4), 2, NULL, &a));
  OK(sl_unbatch(a, k_lod, 2, &a));
  OK(sl_batch(ragged_source(4), 2, NULL, &b));
  OK(sl_unbatch(b, k_lod, 2, &b));
  void *st;
  size_t len;
  OK(sl_reader_save(a, &st, &len));
  OK(sl_reader_restore(b, st, len));
  sl_reader_destroy(b);
  /* A chain naming other LoD fields refuses the state. */
  sl_schema *schema = ragged_schema();
  sl_sample *one = ragged_sample(schema, 1);
  OK(sl_reader_from_array(&one, 1, NULL, &b));
  sl_sample_release(one);
  sl_schema_release(schema);
  OK(sl_batch(b, 2, NULL, &b));
  ASSERT_RC(sl_unbatch(b, k_lod, 1, &b), SL_OK);
  ASSERT_TRUE(sl_reader_restore(b, st, len) < 0);
  ASSERT_CONTAINS(sl_last_error(), "lod=tok,raw");
  sl_free(st);
  sl_reader_destroy(a);
  sl_reader_destroy(b);
}
