/* test_compose.c - readers combined: chain (one after another, equal schemas)
 * and zip (side by side, fields concatenated, lengths checked or
 * truncated). */
#include "test.h"
#include "test_util.h"

#define MAXN 256

/* An in-memory reader of n samples with one i64 field `name` holding
 * first, first+1, ...  The samples are also stored in keep[] (retained)
 * when keep is non-NULL. */
static sl_reader *column(const char *name, int64_t first, int n,
                         sl_sample **keep) {
  sl_schema *schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(schema, name, SL_I64, 0, NULL));
  sl_sample *items[MAXN];
  ASSERT_LE(n, MAXN);
  for (int i = 0; i < n; i++) {
    items[i] = sl_sample_new(schema);
    ASSERT_NOT_NULL(items[i]);
    void *data;
    ASSERT_OK(sl_sample_alloc(items[i], 0, 0, NULL, &data));
    *(int64_t *)data = first + i;
  }
  sl_reader *r;
  ASSERT_OK(sl_reader_from_array(items, (size_t)n, schema, &r));
  for (int i = 0; i < n; i++) {
    if (keep)
      keep[i] = items[i];
    else
      sl_sample_release(items[i]);
  }
  sl_schema_release(schema);
  return r;
}

/* --- chain ------------------------------------------------------------------
 */

TEST(chain_concatenates_passes) {
  sl_reader *rs[3] = {test_range_reader(3), test_range_reader(0),
                      test_range_reader(2)};
  sl_reader *r;
  ASSERT_OK(sl_chain(rs, 3, &r));
  ASSERT_STREQ(sl_reader_name(r), "chain");
  char d[64];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(r), d, sizeof d),
               "{i: i64[]}");
  EXPECT(r, SL_EOF, 0, 1, 2, 0, 1);
  EXPECT_NONE(r, SL_EOF);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2, 0, 1);
  sl_reader_destroy(r);
}

TEST(chain_of_one_and_of_empties) {
  sl_reader *one[1] = {test_range_reader(2)};
  sl_reader *r;
  ASSERT_OK(sl_chain(one, 1, &r));
  EXPECT(r, SL_EOF, 0, 1);
  sl_reader_destroy(r);
  sl_reader *empties[2] = {test_range_reader(0), test_range_reader(0)};
  ASSERT_OK(sl_chain(empties, 2, &r));
  ASSERT_EQ(sl_reader_has_next(r), 0);
  sl_reader_destroy(r);
}

TEST(chain_reset_mid_pass_resets_every_reader) {
  sl_reader *rs[2] = {test_range_reader(2), test_range_reader(3)};
  sl_reader *r;
  ASSERT_OK(sl_chain(rs, 2, &r));
  for (int i = 0; i < 3; i++) { /* into reader 1 */
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(sl_reader_has_next(r), 1);
  EXPECT(r, SL_EOF, 0, 1, 0, 1, 2);
  sl_reader_destroy(r);
}

TEST(chain_schema_mismatch_is_eshape_naming_both) {
  sl_reader *rs[3] = {test_range_reader(2), test_range_reader(2),
                      column("x", 0, 2, NULL)};
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_chain(rs, 3, &r), SL_ESHAPE);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "chain: reader 2");
  ASSERT_CONTAINS(sl_last_error(), "{x: i64[]}");
  ASSERT_CONTAINS(sl_last_error(), "{i: i64[]}");
}

TEST(chain_invalid_arguments_take_all_readers) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_chain(NULL, 2, &r), SL_EINVAL);
  ASSERT_NULL(r);
  sl_reader *none[1] = {NULL};
  ASSERT_RC(sl_chain(none, 0, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "chain: ");
  sl_reader *holes[3] = {test_range_reader(1), NULL, test_range_reader(2)};
  ASSERT_RC(sl_chain(holes, 3, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "chain: reader 1 is NULL");
  sl_reader *rs[2] = {test_range_reader(1), test_range_reader(2)};
  ASSERT_RC(sl_chain(rs, 2, NULL), SL_EINVAL);
}

/* --- zip
 * ------------------------------------------------------------------------ */

TEST(zip_puts_fields_side_by_side_sharing_buffers) {
  sl_sample *a_items[4], *b_items[4];
  sl_reader *rs[2] = {column("a", 0, 4, a_items), column("b", 10, 4, b_items)};
  sl_reader *r;
  ASSERT_OK(sl_zip(rs, 2, 0, &r));
  ASSERT_STREQ(sl_reader_name(r), "zip");
  char d[64];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(r), d, sizeof d),
               "{a: i64[], b: i64[]}");
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < 4; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_EQ(sl_sample_nfields(s), 2);
      ASSERT_EQ(test_sample_i64(s, 0), i);
      ASSERT_EQ(test_sample_i64(s, 1), 10 + i);
      ASSERT_PTR_EQ(sl_sample_at(s, 0)->data,
                    sl_sample_at(a_items[i], 0)->data);
      ASSERT_PTR_EQ(sl_sample_at(s, 1)->data,
                    sl_sample_at(b_items[i], 0)->data);
      sl_sample_release(s);
    }
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  for (int i = 0; i < 4; i++) {
    ASSERT_EQ(sl_sample_refcount(a_items[i]), 1); /* inputs released */
    sl_sample_release(a_items[i]);
    sl_sample_release(b_items[i]);
  }
}

TEST(zip_of_three_and_of_empties) {
  sl_reader *rs[3] = {column("a", 0, 2, NULL), column("b", 5, 2, NULL),
                      test_range_reader(2)};
  sl_reader *r;
  ASSERT_OK(sl_zip(rs, 3, 0, &r));
  for (int i = 0; i < 2; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(test_sample_i64(s, 0), i);
    ASSERT_EQ(test_sample_i64(s, 1), 5 + i);
    ASSERT_EQ(test_sample_i64(s, 2), i);
    sl_sample_release(s);
  }
  EXPECT_NONE(r, SL_EOF);
  sl_reader_destroy(r);
  sl_reader *es[2] = {column("a", 0, 0, NULL), column("b", 0, 0, NULL)};
  ASSERT_OK(sl_zip(es, 2, 0, &r));
  EXPECT_NONE(r, SL_EOF);
  sl_reader_destroy(r);
}

TEST(zip_later_reader_ending_first_is_elength) {
  sl_reader *rs[2] = {column("a", 0, 8, NULL), column("b", 0, 5, NULL)};
  sl_reader *r;
  ASSERT_OK(sl_zip(rs, 2, 0, &r));
  EXPECT(r, SL_ELENGTH, 0, 1, 2, 3, 4);
  ASSERT_STREQ(sl_last_error(),
               "zip: reader 1 ended after 5 samples while reader 0 has more");
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_ELENGTH);
  ASSERT_OK(sl_reader_reset(r)); /* the error clears; the pass repeats */
  EXPECT(r, SL_ELENGTH, 0, 1, 2, 3, 4);
  sl_reader_destroy(r);
}

TEST(zip_first_reader_ending_first_is_elength) {
  sl_reader *rs[3] = {column("a", 0, 3, NULL), column("b", 0, 3, NULL),
                      column("c", 0, 4, NULL)};
  sl_reader *r;
  ASSERT_OK(sl_zip(rs, 3, 0, &r));
  EXPECT(r, SL_ELENGTH, 0, 1, 2);
  ASSERT_STREQ(sl_last_error(),
               "zip: reader 0 ended after 3 samples while reader 2 has more");
  sl_reader_destroy(r);
}

TEST(zip_truncate_ends_with_the_shortest) {
  sl_reader *rs[2] = {column("a", 0, 8, NULL), column("b", 0, 5, NULL)};
  sl_reader *r;
  ASSERT_OK(sl_zip(rs, 2, 1, &r));
  EXPECT(r, SL_EOF, 0, 1, 2, 3, 4);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2, 3, 4);
  sl_reader_destroy(r);
  sl_reader *qs[2] = {column("a", 0, 2, NULL), column("b", 0, 6, NULL)};
  ASSERT_OK(sl_zip(qs, 2, 1, &r));
  EXPECT(r, SL_EOF, 0, 1);
  sl_reader_destroy(r);
}

TEST(zip_reset_mid_pass_and_has_next) {
  sl_reader *rs[2] = {column("a", 0, 3, NULL), column("b", 0, 3, NULL)};
  sl_reader *r;
  ASSERT_OK(sl_zip(rs, 2, 0, &r));
  ASSERT_EQ(sl_reader_has_next(r), 1);
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2);
  ASSERT_EQ(sl_reader_has_next(r), 0);
  sl_reader_destroy(r);
}

TEST(zip_duplicate_field_is_einval_naming_both_readers) {
  sl_reader *rs[3] = {column("a", 0, 2, NULL), test_range_reader(2),
                      column("i", 0, 2, NULL)};
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_zip(rs, 3, 0, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_STREQ(sl_last_error(),
               "zip: field 'i' appears in reader 1 and reader 2");
}

TEST(zip_invalid_arguments_take_all_readers) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_zip(NULL, 2, 0, &r), SL_EINVAL);
  ASSERT_NULL(r);
  sl_reader *none[1] = {NULL};
  ASSERT_RC(sl_zip(none, 0, 0, &r), SL_EINVAL);
  sl_reader *holes[2] = {NULL, test_range_reader(1)};
  ASSERT_RC(sl_zip(holes, 2, 0, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "zip: reader 0 is NULL");
  sl_reader *rs[2] = {column("a", 0, 1, NULL), test_range_reader(2)};
  ASSERT_RC(sl_zip(rs, 2, 0, NULL), SL_EINVAL);
}

/* --- lengths (sl_reader_length) --------------------------------------------
 */

static int keep_any(void *ud, const sl_sample *s) {
  (void)ud, (void)s;
  return 1;
}

TEST(length_of_chain_is_the_sum) {
  sl_reader *rs[3] = {test_range_reader(3), test_range_reader(0),
                      test_range_reader(2)};
  sl_reader *r;
  ASSERT_OK(sl_chain(rs, 3, &r));
  ASSERT_EQ(test_length_checked(r), 5);
  sl_reader_destroy(r);
  /* One reader of unknown length makes the chain's unknown. */
  sl_reader *f;
  ASSERT_OK(sl_filter(test_range_reader(2), keep_any, NULL, NULL, &f));
  sl_reader *mixed[2] = {test_range_reader(3), f};
  ASSERT_OK(sl_chain(mixed, 2, &r));
  uint64_t n;
  ASSERT_RC(sl_reader_length(r, &n), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "filter: ");
  sl_reader_destroy(r);
}

TEST(length_of_zip_equal_truncated_or_elength) {
  sl_reader *r;
  sl_reader *eq[2] = {column("a", 0, 4, NULL), column("b", 10, 4, NULL)};
  ASSERT_OK(sl_zip(eq, 2, 0, &r));
  ASSERT_EQ(test_length_checked(r), 4);
  sl_reader_destroy(r);
  sl_reader *tr[3] = {column("a", 0, 4, NULL), column("b", 10, 2, NULL),
                      column("c", 20, 3, NULL)};
  ASSERT_OK(sl_zip(tr, 3, 1, &r));
  ASSERT_EQ(test_length_checked(r), 2);
  sl_reader_destroy(r);
  sl_reader *ne[2] = {column("a", 0, 4, NULL), column("b", 10, 3, NULL)};
  ASSERT_OK(sl_zip(ne, 2, 0, &r));
  uint64_t n;
  ASSERT_RC(sl_reader_length(r, &n), SL_ELENGTH);
  ASSERT_STREQ(sl_last_error(),
               "zip: reader 1 yields 3 samples but reader 0 yields 4 (zip "
               "them with truncate to end with the shortest)");
  sl_reader_destroy(r);
}
