/* test_passes.c - the stages that shape passes: multi_pass (k passes as one),
 * take and skip (a prefix / everything after it), repeat_first (one sample n
 * times) and cache (the first pass replayed).  A counting generator shows how
 * often each stage pulls and resets its upstream. */
#include "test.h"
#include "test_util.h"

#define MAXN 256

#define EXPECT_EMPTY(r)                                                        \
  do {                                                                         \
    sl_sample *s_;                                                             \
    ASSERT_RC(sl_reader_next((r), &s_), SL_EOF);                               \
  } while (0)

/* --- a counting generator ------------------------------------------------
 * Yields base, base+1, ..., base+n-1 in field "i"; each reset adds 100 to
 * base, so a test sees whether a stage re-read its upstream.  With fail_at
 * >= 0, the first pass fails with SL_EIO at that index. */
typedef struct counter {
  sl_schema *schema;
  int64_t n, i, base, fail_at;
  int pulls, resets, freed;
} counter;

static int counter_next(void *ud, sl_sample **out) {
  counter *c = ud;
  c->pulls++;
  if (c->fail_at >= 0 && c->base == 0 && c->i == c->fail_at)
    return sl_set_error(SL_EIO, "counter: bad sample %" PRId64, c->i);
  if (c->i == c->n) return SL_EOF;
  sl_sample *s = sl_sample_new(c->schema);
  void *data;
  ASSERT_OK(sl_sample_alloc(s, 0, 0, NULL, &data));
  *(int64_t *)data = c->base + c->i++;
  *out = s;
  return SL_OK;
}

static int counter_reset(void *ud) {
  counter *c = ud;
  c->resets++;
  c->base += 100;
  c->i = 0;
  return SL_OK;
}

static void counter_free(void *ud) {
  ((counter *)ud)->freed++;
}

/* A generator over `c` (which the test keeps on its stack). */
static sl_reader *counting(counter *c, int64_t n, int resettable) {
  memset(c, 0, sizeof *c);
  c->n = n;
  c->fail_at = -1;
  c->schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(c->schema, "i", SL_I64, 0, NULL));
  sl_reader *r;
  ASSERT_OK(sl_reader_from_generator(c->schema, counter_next,
                                     resettable ? counter_reset : NULL,
                                     counter_free, c, &r));
  sl_schema_release(c->schema); /* the reader holds it */
  return r;
}

/* --- multi_pass ----------------------------------------------------------- */

TEST(multi_pass_joins_k_passes) {
  sl_reader *r;
  ASSERT_OK(sl_multi_pass(test_range_reader(3), 3, &r));
  ASSERT_STREQ(sl_reader_name(r), "multi_pass");
  EXPECT(r, SL_EOF, 0, 1, 2, 0, 1, 2, 0, 1, 2);
  EXPECT_EMPTY(r);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2, 0, 1, 2, 0, 1, 2);
  sl_reader_destroy(r);
}

TEST(multi_pass_resets_upstream_between_passes_only) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_multi_pass(counting(&c, 2, 1), 3, &r));
  EXPECT(r, SL_EOF, 0, 1, 100, 101, 200, 201);
  ASSERT_EQ(c.resets, 2); /* not after the last pass */
  sl_reader_destroy(r);
  ASSERT_EQ(c.freed, 1);
  /* k = 1 never resets, so a one-shot upstream works. */
  ASSERT_OK(sl_multi_pass(counting(&c, 2, 0), 1, &r));
  EXPECT(r, SL_EOF, 0, 1);
  sl_reader_destroy(r);
}

TEST(multi_pass_of_empty_upstream_terminates) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_multi_pass(counting(&c, 0, 1), 5, &r));
  EXPECT_EMPTY(r);
  ASSERT_EQ(c.resets, 4);
  ASSERT_EQ(c.pulls, 5);
  sl_reader_destroy(r);
}

/* SL_PASSES_FOREVER (tf.data's repeat()): passes until one yields
 * nothing, so an empty upstream ends at once instead of looping. */
TEST(multi_pass_forever_repeats_until_an_empty_pass) {
  sl_reader *r, *t;
  ASSERT_OK(sl_multi_pass(test_range_reader(3), SL_PASSES_FOREVER, &r));
  ASSERT_OK(sl_take(r, 7, &t));
  EXPECT(t, SL_EOF, 0, 1, 2, 0, 1, 2, 0);
  uint64_t n; /* take(7) of an endless upstream: not known (yet) */
  ASSERT_RC(sl_reader_length(t, &n), SL_EUNSUPPORTED);
  /* A reset mid-pass starts over. */
  ASSERT_OK(sl_reader_reset(t));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(t, &s));
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(t));
  EXPECT(t, SL_EOF, 0, 1, 2, 0, 1, 2, 0);
  sl_reader_destroy(t);

  counter c;
  ASSERT_OK(sl_multi_pass(counting(&c, 0, 1), SL_PASSES_FOREVER, &r));
  EXPECT_EMPTY(r);
  ASSERT_EQ(c.pulls, 1);
  ASSERT_EQ(c.resets, 0);
  sl_reader_destroy(r);
  ASSERT_OK(sl_multi_pass(test_range_reader(0), SL_PASSES_FOREVER, &r));
  EXPECT_EMPTY(r);
  ASSERT_OK(sl_reader_length(r, &n));
  ASSERT_EQ(n, 0);
  sl_reader_destroy(r);

  ASSERT_OK(sl_multi_pass(test_range_reader(3), SL_PASSES_FOREVER, &r));
  ASSERT_RC(sl_reader_length(r, &n), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "repeats 3 samples forever");
  sl_reader_destroy(r);
}

static sl_reader *build_forever(void *ud) {
  (void)ud;
  sl_reader *r;
  ASSERT_OK(sl_multi_pass(test_range_reader(3), SL_PASSES_FOREVER, &r));
  ASSERT_OK(sl_take(r, 8, &r));
  return r;
}

TEST(multi_pass_forever_resumes_exactly) {
  static const uint64_t cuts[] = {0, 1, 3, 4, 7, 8, 9, 13, 16};
  test_resume_check(build_forever, NULL, 2, cuts, 9, 0);
}

TEST(multi_pass_reset_mid_pass_restarts_the_count) {
  sl_reader *r;
  ASSERT_OK(sl_multi_pass(test_range_reader(3), 2, &r));
  for (int i = 0; i < 4; i++) { /* into the second pass */
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2, 0, 1, 2);
  sl_reader_destroy(r);
}

TEST(multi_pass_upstream_reset_failure_passes_through) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_multi_pass(counting(&c, 2, 0), 2, &r));
  EXPECT(r, SL_EUNSUPPORTED, 0, 1);
  ASSERT_STREQ(sl_last_error(), "generator: no reset callback was given");
  sl_reader_destroy(r);
}

TEST(multi_pass_invalid_arguments) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_multi_pass(test_range_reader(3), 0, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "multi_pass: k must be >= 1");
  ASSERT_NULL(r);
  ASSERT_RC(sl_multi_pass(NULL, 2, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "multi_pass: NULL upstream");
  ASSERT_RC(sl_multi_pass(test_range_reader(3), 2, NULL), SL_EINVAL);
}

/* --- take --------------------------------------------------------------------
 */

TEST(take_yields_a_prefix_without_reading_further) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_take(counting(&c, 10, 1), 3, &r));
  ASSERT_STREQ(sl_reader_name(r), "take");
  EXPECT(r, SL_EOF, 0, 1, 2);
  ASSERT_EQ(c.pulls, 3);
  EXPECT_EMPTY(r);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 100, 101, 102);
  ASSERT_EQ(c.resets, 1);
  sl_reader_destroy(r);
}

TEST(take_more_than_available_and_zero) {
  sl_reader *r;
  ASSERT_OK(sl_take(test_range_reader(4), 100, &r));
  EXPECT(r, SL_EOF, 0, 1, 2, 3);
  sl_reader_destroy(r);
  counter c;
  ASSERT_OK(sl_take(counting(&c, 4, 1), 0, &r));
  EXPECT_EMPTY(r);
  ASSERT_EQ(c.pulls, 0);
  sl_reader_destroy(r);
  ASSERT_OK(sl_take(test_range_reader(0), 5, &r));
  EXPECT_EMPTY(r);
  sl_reader_destroy(r);
}

TEST(take_reset_mid_pass_and_has_next) {
  sl_reader *r;
  ASSERT_OK(sl_take(test_range_reader(10), 3, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(sl_reader_has_next(r), 1);
  EXPECT(r, SL_EOF, 0, 1, 2);
  ASSERT_EQ(sl_reader_has_next(r), 0);
  sl_reader_destroy(r);
}

TEST(take_invalid_arguments) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_take(NULL, 2, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "take: NULL upstream");
  ASSERT_NULL(r);
  ASSERT_RC(sl_take(test_range_reader(3), 2, NULL), SL_EINVAL);
}

/* --- skip --------------------------------------------------------------------
 */

TEST(skip_drops_a_prefix_of_each_pass) {
  sl_reader *r;
  ASSERT_OK(sl_skip(test_range_reader(6), 2, &r));
  ASSERT_STREQ(sl_reader_name(r), "skip");
  EXPECT(r, SL_EOF, 2, 3, 4, 5);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 2, 3, 4, 5);
  sl_reader_destroy(r);
  ASSERT_OK(sl_skip(test_range_reader(3), 0, &r));
  EXPECT(r, SL_EOF, 0, 1, 2);
  sl_reader_destroy(r);
}

TEST(skip_more_than_available_and_empty) {
  sl_reader *r;
  ASSERT_OK(sl_skip(test_range_reader(3), 5, &r));
  EXPECT_EMPTY(r);
  EXPECT_EMPTY(r);
  sl_reader_destroy(r);
  ASSERT_OK(sl_skip(test_range_reader(0), 1, &r));
  EXPECT_EMPTY(r);
  sl_reader_destroy(r);
}

TEST(skip_reset_mid_pass_and_has_next) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_skip(counting(&c, 5, 1), 2, &r));
  ASSERT_EQ(sl_reader_has_next(r), 1);
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(test_sample_i64(s, 0), 2);
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 102, 103, 104);
  sl_reader_destroy(r);
}

TEST(skip_releases_what_it_drops) {
  sl_reader *src = test_range_reader(4);
  sl_sample *items[4];
  for (int i = 0; i < 4; i++)
    ASSERT_OK(sl_reader_next(src, &items[i]));
  sl_reader_destroy(src);
  sl_reader *arr, *r;
  ASSERT_OK(sl_reader_from_array(items, 4, NULL, &arr));
  ASSERT_OK(sl_skip(arr, 3, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_PTR_EQ(s, items[3]);
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(sl_sample_refcount(items[i]), 2);
  sl_sample_release(s);
  sl_reader_destroy(r);
  for (int i = 0; i < 4; i++)
    sl_sample_release(items[i]);
}

TEST(skip_invalid_arguments) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_skip(NULL, 2, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "skip: NULL upstream");
  ASSERT_NULL(r);
  ASSERT_RC(sl_skip(test_range_reader(3), 2, NULL), SL_EINVAL);
}

/* --- repeat_first --------------------------------------------------------- */

TEST(repeat_first_yields_one_sample_n_times) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_repeat_first(counting(&c, 5, 1), 3, &r));
  ASSERT_STREQ(sl_reader_name(r), "repeat_first");
  sl_sample *first = NULL;
  for (int i = 0; i < 3; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(test_sample_i64(s, 0), 0);
    if (first) ASSERT_PTR_EQ(s, first); /* the same sample, retained */
    first = s;
    sl_sample_release(s);
  }
  EXPECT_EMPTY(r);
  ASSERT_EQ(c.pulls, 1);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 100, 100, 100);
  ASSERT_EQ(c.pulls, 2);
  sl_reader_destroy(r);
}

TEST(repeat_first_of_empty_upstream_and_zero) {
  sl_reader *r;
  ASSERT_OK(sl_repeat_first(test_range_reader(0), 4, &r));
  EXPECT_EMPTY(r);
  sl_reader_destroy(r);
  counter c;
  ASSERT_OK(sl_repeat_first(counting(&c, 3, 1), 0, &r));
  EXPECT_EMPTY(r);
  ASSERT_EQ(c.pulls, 0);
  sl_reader_destroy(r);
}

TEST(repeat_first_reset_mid_pass_reads_again) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_repeat_first(counting(&c, 5, 1), 4, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(sl_reader_has_next(r), 1);
  EXPECT(r, SL_EOF, 100, 100, 100, 100);
  ASSERT_EQ(c.resets, 1);
  sl_reader_destroy(r);
}

TEST(repeat_first_invalid_arguments) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_repeat_first(NULL, 2, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "repeat_first: NULL upstream");
  ASSERT_NULL(r);
  ASSERT_RC(sl_repeat_first(test_range_reader(3), 2, NULL), SL_EINVAL);
}

/* --- cache
 * -------------------------------------------------------------------- */

TEST(cache_replays_the_first_pass_without_upstream) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_cache(counting(&c, 4, 1), &r));
  ASSERT_STREQ(sl_reader_name(r), "cache");
  sl_sample *firsts[4];
  for (int i = 0; i < 4; i++) {
    ASSERT_OK(sl_reader_next(r, &firsts[i]));
    ASSERT_EQ(test_sample_i64(firsts[i], 0), i);
  }
  EXPECT_EMPTY(r);
  int pulls = c.pulls;
  for (int pass = 0; pass < 3; pass++) {
    ASSERT_OK(sl_reader_reset(r));
    for (int i = 0; i < 4; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_PTR_EQ(s, firsts[i]); /* kept, not re-read */
      sl_sample_release(s);
    }
    EXPECT_EMPTY(r);
  }
  ASSERT_EQ(c.pulls, pulls);
  ASSERT_EQ(c.resets, 0);
  /* A reset in the middle of a replay starts the replay over. */
  ASSERT_OK(sl_reader_reset(r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2, 3);
  sl_reader_destroy(r);
  for (int i = 0; i < 4; i++)
    sl_sample_release(firsts[i]);
}

TEST(cache_reset_before_complete_discards_the_partial_pass) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_cache(counting(&c, 4, 1), &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(c.resets, 1);
  EXPECT(r, SL_EOF, 100, 101, 102, 103);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 100, 101, 102, 103);
  ASSERT_EQ(c.resets, 1);
  sl_reader_destroy(r);
}

TEST(cache_error_in_first_pass_starts_caching_over) {
  counter c;
  sl_reader *r;
  sl_reader *up = counting(&c, 4, 1);
  c.fail_at = 2;
  ASSERT_OK(sl_cache(up, &r));
  EXPECT(r, SL_EIO, 0, 1);
  ASSERT_STREQ(sl_last_error(), "counter: bad sample 2");
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EIO); /* sticky */
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 100, 101, 102, 103);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 100, 101, 102, 103);
  ASSERT_EQ(c.resets, 1);
  sl_reader_destroy(r);
}

TEST(cache_of_empty_upstream) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_cache(counting(&c, 0, 1), &r));
  EXPECT_EMPTY(r);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT_EMPTY(r);
  ASSERT_EQ(c.resets, 0);
  ASSERT_EQ(sl_reader_has_next(r), 0);
  sl_reader_destroy(r);
}

TEST(cache_holds_many_samples) {
  sl_reader *r;
  ASSERT_OK(sl_cache(test_range_reader(200), &r));
  int64_t v[MAXN];
  size_t n;
  for (int pass = 0; pass < 2; pass++) {
    ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_EOF);
    ASSERT_EQ(n, 200);
    for (size_t i = 0; i < n; i++)
      ASSERT_EQ(v[i], (int64_t)i);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

TEST(cache_invalid_arguments) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_cache(NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "cache: NULL upstream");
  ASSERT_NULL(r);
  ASSERT_RC(sl_cache(test_range_reader(3), NULL), SL_EINVAL);
}

/* --- lengths (sl_reader_length) --------------------------------------------
 */

/* The length of `r` (checked against a pass), then `r` destroyed. */
static uint64_t length_of(sl_reader *r) {
  uint64_t n = test_length_checked(r);
  sl_reader_destroy(r);
  return n;
}

/* Fails unless sl_reader_length(r) is SL_EUNSUPPORTED naming `stage`. */
static void assert_length_unknown(sl_reader *r, const char *stage) {
  uint64_t n = 7;
  ASSERT_RC(sl_reader_length(r, &n), SL_EUNSUPPORTED);
  ASSERT_EQ(n, 0);
  ASSERT_CONTAINS(sl_last_error(), stage);
  sl_reader_destroy(r);
}

TEST(length_of_take_skip_multi_pass_repeat_first_cache) {
  sl_reader *r;
  ASSERT_OK(sl_take(test_range_reader(10), 4, &r));
  ASSERT_EQ(length_of(r), 4);
  ASSERT_OK(sl_take(test_range_reader(3), 4, &r));
  ASSERT_EQ(length_of(r), 3);
  ASSERT_OK(sl_skip(test_range_reader(10), 4, &r));
  ASSERT_EQ(length_of(r), 6);
  ASSERT_OK(sl_skip(test_range_reader(3), 4, &r));
  ASSERT_EQ(length_of(r), 0);
  ASSERT_OK(sl_multi_pass(test_range_reader(5), 3, &r));
  ASSERT_EQ(length_of(r), 15);
  ASSERT_OK(sl_repeat_first(test_range_reader(5), 9, &r));
  ASSERT_EQ(length_of(r), 9);
  ASSERT_OK(sl_repeat_first(test_range_reader(0), 9, &r));
  ASSERT_EQ(length_of(r), 0);
  ASSERT_OK(sl_cache(test_range_reader(6), &r));
  ASSERT_EQ(test_length_checked(r), 6); /* the pass that fills the cache */
  ASSERT_EQ(length_of(r), 6);           /* a replay */
  /* Nested: take(skip(range(10), 2), 5) -> 5; skip(take(...)) -> 3. */
  sl_reader *k;
  ASSERT_OK(sl_skip(test_range_reader(10), 2, &k));
  ASSERT_OK(sl_take(k, 5, &r));
  ASSERT_EQ(length_of(r), 5);
  ASSERT_OK(sl_take(test_range_reader(10), 5, &k));
  ASSERT_OK(sl_skip(k, 2, &r));
  ASSERT_EQ(length_of(r), 3);
}

TEST(length_unknown_upstream_is_unsupported_naming_it) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_take(counting(&c, 5, 1), 3, &r));
  assert_length_unknown(r, "generator");
  ASSERT_OK(sl_skip(counting(&c, 5, 1), 3, &r));
  assert_length_unknown(r, "generator");
  ASSERT_OK(sl_multi_pass(counting(&c, 5, 1), 2, &r));
  assert_length_unknown(r, "generator");
  ASSERT_OK(sl_cache(counting(&c, 5, 1), &r));
  assert_length_unknown(r, "generator");
  ASSERT_OK(sl_repeat_first(counting(&c, 5, 1), 3, &r));
  assert_length_unknown(r, "generator");
  /* take(0) and repeat_first(0) yield nothing whatever upstream holds. */
  ASSERT_OK(sl_take(counting(&c, 5, 1), 0, &r));
  ASSERT_EQ(length_of(r), 0);
  ASSERT_EQ(c.pulls, 0);
  ASSERT_OK(sl_repeat_first(counting(&c, 5, 1), 0, &r));
  ASSERT_EQ(length_of(r), 0);
}

static int keep_all(void *ud, const sl_sample *s) {
  (void)ud, (void)s;
  return 1;
}

static int identity(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  *out = in;
  return SL_OK;
}

TEST(length_through_map_prefetch_shuffle_threaded_batch) {
  sl_reader *r, *m;
  ASSERT_OK(sl_map(test_range_reader(10), identity, NULL, NULL, NULL, &r));
  ASSERT_EQ(length_of(r), 10);
  ASSERT_OK(sl_prefetch(test_range_reader(10), 4, &r));
  ASSERT_EQ(length_of(r), 10);
  ASSERT_OK(sl_shuffle(test_range_reader(10), 4, 1, &r));
  ASSERT_EQ(length_of(r), 10);
  ASSERT_OK(sl_threaded(test_range_reader(10), &r));
  ASSERT_EQ(length_of(r), 10);
  /* batch: ceil(n / size) batches, floor with drop_last */
  ASSERT_OK(sl_batch(test_range_reader(10), 4, NULL, &r));
  ASSERT_EQ(length_of(r), 3);
  sl_batch_opts drop = {.drop_last = 1};
  ASSERT_OK(sl_batch(test_range_reader(10), 4, &drop, &r));
  ASSERT_EQ(length_of(r), 2);
  ASSERT_OK(sl_batch(test_range_reader(8), 4, NULL, &r));
  ASSERT_EQ(length_of(r), 2);
  ASSERT_OK(sl_batch(test_range_reader(0), 4, NULL, &r));
  ASSERT_EQ(length_of(r), 0);
  ASSERT_OK(sl_shuffle(test_range_reader(10), 3, 7, &m));
  ASSERT_OK(sl_batch(m, 3, NULL, &m));
  ASSERT_OK(sl_prefetch(m, 2, &r));
  ASSERT_EQ(length_of(r), 4);
  /* A filter cannot know, nor can anything after it. */
  ASSERT_OK(sl_filter(test_range_reader(10), keep_all, NULL, NULL, &m));
  ASSERT_OK(sl_batch(m, 3, NULL, &r));
  assert_length_unknown(r, "filter: ");
}

/* --- cache completes without the final next (issue 19, failure 3) ------- */

static int g_map_calls;
static int count_calls(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  g_map_calls++;
  *out = in;
  return SL_OK;
}

TEST(cache_completes_at_the_upstream_known_length) {
  sl_reader *r = test_range_reader(4);
  g_map_calls = 0;
  ASSERT_OK(sl_map(r, count_calls, NULL, NULL, NULL, &r)); /* length 4 */
  ASSERT_OK(sl_cache(r, &r));
  for (int pass = 0; pass < 3; pass++) {
    for (int i = 0; i < 4; i++) { /* exactly 4: never asks for a 5th */
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_EQ(test_sample_i64(s, 0), i);
      sl_sample_release(s);
    }
    ASSERT_OK(sl_reader_reset(r));
  }
  ASSERT_EQ(g_map_calls, 4); /* read once, replayed twice */
  sl_reader_destroy(r);
}

TEST(cache_completes_when_a_reset_finds_upstream_exhausted) {
  counter c;
  sl_reader *r;
  ASSERT_OK(sl_cache(counting(&c, 4, 1), &r)); /* no known length */
  for (int i = 0; i < 4; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2, 3); /* the cache: no reset of upstream */
  ASSERT_EQ(c.resets, 0);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2, 3);
  sl_reader_destroy(r);
  /* Stopped short of the end: the partial cache is dropped as before. */
  ASSERT_OK(sl_cache(counting(&c, 4, 1), &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(c.resets, 1);
  EXPECT(r, SL_EOF, 100, 101, 102, 103);
  sl_reader_destroy(r);
}
