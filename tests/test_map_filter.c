/* test_map_filter.c - map (one sample in, one out, checked against the output
 * schema) and filter (keep, drop or fail per sample), including their
 * callback errors and the ownership of their user data. */
#include "test.h"
#include "test_util.h"

/* Samples 0..n-1 of range(n), owned by the caller, for refcount checks. */
static void take_items(sl_sample **items, int n) {
  sl_reader *src = test_range_reader(n);
  for (int i = 0; i < n; i++)
    ASSERT_OK(sl_reader_next(src, &items[i]));
  sl_reader_destroy(src);
}

static int g_freed;
static void count_free(void *ud) {
  (void)ud;
  g_freed++;
}

/* --- filter --------------------------------------------------------------- */

static int keep_multiples(void *ud, const sl_sample *s) {
  int64_t k = *(int64_t *)ud;
  return *(const int64_t *)sl_sample_at_const(s, 0)->data % k == 0;
}

static int keep_none(void *ud, const sl_sample *s) {
  (void)ud;
  (void)s;
  return 0;
}

TEST(filter_keeps_what_the_callback_accepts) {
  int64_t k = 3;
  sl_reader *r;
  g_freed = 0;
  ASSERT_OK(
      sl_filter(test_range_reader(10), keep_multiples, &k, count_free, &r));
  ASSERT_STREQ(sl_reader_name(r), "filter");
  EXPECT(r, SL_EOF, 0, 3, 6, 9);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 3, 6, 9);
  ASSERT_EQ(g_freed, 0);
  sl_reader_destroy(r);
  ASSERT_EQ(g_freed, 1);
}

TEST(filter_drop_all_and_empty_upstream) {
  sl_reader *r;
  ASSERT_OK(sl_filter(test_range_reader(10), keep_none, NULL, NULL, &r));
  EXPECT_NONE(r, SL_EOF);
  ASSERT_EQ(sl_reader_has_next(r), 0);
  sl_reader_destroy(r);
  int64_t k = 1;
  ASSERT_OK(sl_filter(test_range_reader(0), keep_multiples, &k, NULL, &r));
  EXPECT_NONE(r, SL_EOF);
  sl_reader_destroy(r);
}

TEST(filter_releases_dropped_samples) {
  sl_sample *items[6];
  take_items(items, 6);
  sl_reader *arr, *r;
  ASSERT_OK(sl_reader_from_array(items, 6, NULL, &arr));
  int64_t k = 2;
  ASSERT_OK(sl_filter(arr, keep_multiples, &k, NULL, &r));
  sl_sample *kept[3];
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(sl_reader_next(r, &kept[i]));
    ASSERT_PTR_EQ(kept[i], items[2 * i]);
  }
  for (int i = 0; i < 6; i++)
    ASSERT_EQ(sl_sample_refcount(items[i]), i % 2 ? 2 : 3);
  for (int i = 0; i < 3; i++)
    sl_sample_release(kept[i]);
  sl_reader_destroy(r);
  for (int i = 0; i < 6; i++)
    sl_sample_release(items[i]);
}

TEST(filter_reset_mid_pass_and_has_next) {
  int64_t k = 2;
  sl_reader *r;
  ASSERT_OK(sl_filter(test_range_reader(7), keep_multiples, &k, NULL, &r));
  ASSERT_EQ(sl_reader_has_next(r), 1);
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(test_sample_i64(s, 0), 0);
  sl_sample_release(s);
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 2, 4, 6);
  sl_reader_destroy(r);
}

/* Fails at value 4, setting its own message when ud is non-NULL. */
static int fail_at_four(void *ud, const sl_sample *s) {
  int64_t v = *(const int64_t *)sl_sample_at_const(s, 0)->data;
  if (v != 4) return 1;
  if (ud) return sl_set_error(SL_ECORRUPT, "my filter: cannot judge %d", 4);
  return SL_EIO;
}

TEST(filter_callback_error_keeps_its_message) {
  sl_reader *r;
  ASSERT_OK(
      sl_filter(test_range_reader(10), fail_at_four, (void *)1, NULL, &r));
  EXPECT(r, SL_ECORRUPT, 0, 1, 2, 3);
  ASSERT_STREQ(sl_last_error(), "my filter: cannot judge 4");
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), "my filter: cannot judge 4");
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_ECORRUPT, 0, 1, 2, 3);
  sl_reader_destroy(r);
}

TEST(filter_callback_error_without_message_is_named) {
  sl_reader *r;
  ASSERT_OK(sl_filter(test_range_reader(10), fail_at_four, NULL, NULL, &r));
  /* A stale message with the same code must not be taken for the
   * callback's. */
  sl_set_error(SL_EIO, "stale");
  EXPECT(r, SL_EIO, 0, 1, 2, 3);
  ASSERT_CONTAINS(sl_last_error(), "filter: callback returned SL_EIO");
  ASSERT_CONTAINS(sl_last_error(), "sample 4");
  sl_reader_destroy(r);
}

TEST(filter_invalid_arguments_free_ud_and_upstream) {
  sl_reader *r = (sl_reader *)1;
  int64_t k = 2;
  g_freed = 0;
  ASSERT_RC(sl_filter(test_range_reader(3), NULL, &k, count_free, &r),
            SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "filter: NULL callback");
  ASSERT_NULL(r);
  ASSERT_EQ(g_freed, 1);
  ASSERT_RC(sl_filter(NULL, keep_multiples, &k, count_free, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "filter: NULL upstream");
  ASSERT_EQ(g_freed, 2);
  ASSERT_RC(
      sl_filter(test_range_reader(3), keep_multiples, &k, count_free, NULL),
      SL_EINVAL);
  ASSERT_EQ(g_freed, 3);
}

/* --- map ------------------------------------------------------------------ */

static int identity(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  *out = in;
  return SL_OK;
}

TEST(map_identity_passes_samples_through) {
  sl_sample *items[3];
  take_items(items, 3);
  sl_reader *arr, *r;
  ASSERT_OK(sl_reader_from_array(items, 3, NULL, &arr));
  const sl_schema *up_schema = sl_reader_schema(arr);
  g_freed = 0;
  ASSERT_OK(sl_map(arr, identity, NULL, count_free, NULL, &r));
  ASSERT_STREQ(sl_reader_name(r), "map");
  ASSERT_PTR_EQ(sl_reader_schema(r), up_schema); /* NULL = upstream's */
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < 3; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_PTR_EQ(s, items[i]);
      sl_sample_release(s);
    }
    EXPECT_NONE(r, SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  ASSERT_EQ(g_freed, 1);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(sl_sample_refcount(items[i]), 1);
    sl_sample_release(items[i]);
  }
}

/* Turns {i: i64[]} into {x: f64[2]} holding (i, i / 2). */
static int to_pair(void *ud, sl_sample *in, sl_sample **out) {
  sl_schema *schema = ud;
  int64_t v = test_sample_i64(in, 0);
  sl_sample_release(in);
  sl_sample *s = sl_sample_new(schema);
  if (!s) return SL_ENOMEM;
  void *data;
  const int64_t shape[1] = {2};
  int rc = sl_sample_alloc(s, 0, 1, shape, &data);
  if (rc < 0) {
    sl_sample_release(s);
    return rc;
  }
  ((double *)data)[0] = (double)v;
  ((double *)data)[1] = (double)v / 2;
  *out = s;
  return SL_OK;
}

TEST(map_transforms_into_the_declared_schema) {
  sl_schema *schema = sl_schema_new();
  const int64_t shape[1] = {2};
  ASSERT_OK(sl_schema_add(schema, "x", SL_F64, 1, shape));
  sl_reader *r;
  ASSERT_OK(sl_map(test_range_reader(4), to_pair, schema, NULL, schema, &r));
  char d[64];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(r), d, sizeof d),
               "{x: f64[2]}");
  for (int i = 0; i < 4; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    const double *x = sl_sample_at(s, 0)->data;
    ASSERT_TRUE(x[0] == i && x[1] == i / 2.0);
    sl_sample_release(s);
  }
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  sl_schema_release(schema);
}

TEST(map_output_with_another_schema_is_eshape) {
  sl_schema *schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(schema, "y", SL_I64, 0, NULL));
  sl_reader *r;
  ASSERT_OK(sl_map(test_range_reader(4), identity, NULL, NULL, schema, &r));
  sl_schema_release(schema);
  EXPECT_NONE(r, SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "map: sample 0: ");
  ASSERT_CONTAINS(sl_last_error(), "{i: i64[]}");
  ASSERT_CONTAINS(sl_last_error(), "{y: i64[]}");
  sl_reader_destroy(r);
}

/* Yields its input for even values and, for odd ones, a sample of the right
 * schema whose field was never filled (rank 0 instead of [-1, 3]). */
static int unfilled_on_odd(void *ud, sl_sample *in, sl_sample **out) {
  sl_schema *schema = ud;
  int64_t v = test_sample_i64(in, 0);
  sl_sample_release(in);
  sl_sample *s = sl_sample_new(schema);
  if (!s) return SL_ENOMEM;
  if (v % 2 == 0) {
    const int64_t shape[2] = {v, 3};
    int rc = sl_sample_alloc(s, 0, 2, shape, NULL);
    if (rc < 0) {
      sl_sample_release(s);
      return rc;
    }
  }
  *out = s;
  return SL_OK;
}

TEST(map_output_with_wrong_dims_is_eshape) {
  sl_schema *schema = sl_schema_new();
  const int64_t shape[2] = {SL_DIM_VAR, 3};
  ASSERT_OK(sl_schema_add(schema, "v", SL_F32, 2, shape));
  sl_reader *r;
  ASSERT_OK(
      sl_map(test_range_reader(4), unfilled_on_odd, schema, NULL, schema, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(sl_sample_at(s, 0)->shape[1], 3);
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "map: sample 1: field 'v'");
  ASSERT_CONTAINS(sl_last_error(), "f32[-1,3]");
  sl_reader_destroy(r);
  sl_schema_release(schema);
}

/* Fails at value 2: with a message when ud is non-NULL, else without. */
static int fail_at_two(void *ud, sl_sample *in, sl_sample **out) {
  int64_t v = test_sample_i64(in, 0);
  if (v != 2) {
    *out = in;
    return SL_OK;
  }
  sl_sample_release(in);
  if (ud) return sl_set_error(SL_ECORRUPT, "my map: cannot map %d", 2);
  return SL_EIO;
}

TEST(map_callback_error_keeps_its_message) {
  sl_reader *r;
  ASSERT_OK(
      sl_map(test_range_reader(5), fail_at_two, (void *)1, NULL, NULL, &r));
  EXPECT(r, SL_ECORRUPT, 0, 1);
  ASSERT_STREQ(sl_last_error(), "my map: cannot map 2");
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_ECORRUPT, 0, 1);
  sl_reader_destroy(r);
}

TEST(map_callback_error_without_message_is_named) {
  sl_reader *r;
  ASSERT_OK(sl_map(test_range_reader(5), fail_at_two, NULL, NULL, NULL, &r));
  sl_set_error(SL_EIO, "stale");
  EXPECT(r, SL_EIO, 0, 1);
  ASSERT_STREQ(sl_last_error(), "map: sample 2: callback returned SL_EIO");
  sl_reader_destroy(r);
}

static int forget_output(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  (void)out;
  sl_sample_release(in);
  return SL_OK;
}

TEST(map_ok_without_a_sample_is_einval) {
  sl_reader *r;
  ASSERT_OK(sl_map(test_range_reader(5), forget_output, NULL, NULL, NULL, &r));
  EXPECT_NONE(r, SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "map: sample 0: ");
  sl_reader_destroy(r);
}

TEST(map_reset_mid_pass_and_has_next) {
  sl_reader *r;
  ASSERT_OK(sl_map(test_range_reader(3), identity, NULL, NULL, NULL, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(sl_reader_has_next(r), 1);
  EXPECT(r, SL_EOF, 0, 1, 2);
  ASSERT_EQ(sl_reader_has_next(r), 0);
  sl_reader_destroy(r);
}

TEST(map_sample_index_restarts_each_pass) {
  sl_reader *r;
  ASSERT_OK(sl_map(test_range_reader(5), fail_at_two, NULL, NULL, NULL, &r));
  EXPECT(r, SL_EIO, 0, 1);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EIO, 0, 1);
  ASSERT_STREQ(sl_last_error(), "map: sample 2: callback returned SL_EIO");
  sl_reader_destroy(r);
}

TEST(map_invalid_arguments_free_ud_and_upstream) {
  sl_reader *r = (sl_reader *)1;
  g_freed = 0;
  ASSERT_RC(sl_map(test_range_reader(3), NULL, NULL, count_free, NULL, &r),
            SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "map: NULL callback");
  ASSERT_NULL(r);
  ASSERT_EQ(g_freed, 1);
  ASSERT_RC(sl_map(NULL, identity, NULL, count_free, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "map: NULL upstream");
  ASSERT_EQ(g_freed, 2);
  ASSERT_RC(
      sl_map(test_range_reader(3), identity, NULL, count_free, NULL, NULL),
      SL_EINVAL);
  ASSERT_EQ(g_freed, 3);
}
