/* test_parallel.c - sl_map_parallel / sl_filter_parallel: the C map and
 * filter on the parallel-stage engine.  In order they give exactly what
 * sl_map / sl_filter give, for any thread count, errors and messages
 * included; unordered every sample comes once; options, ownership and
 * thread start failures. */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"

#include <stdatomic.h>

static atomic_int g_freed;
static void count_free(void *ud) {
  (void)ud;
  atomic_fetch_add(&g_freed, 1);
}

/* v -> v * v (a new sample), failing at ud's value when ud is non-NULL. */
static int square(void *ud, sl_sample *in, sl_sample **out) {
  int64_t v = test_sample_i64(in, 0);
  if (ud && v == *(const int64_t *)ud) {
    sl_sample_release(in);
    return sl_set_error(SL_ECORRUPT, "square: cannot square %lld",
                        (long long)v);
  }
  int rc = test_i64_sample(sl_sample_schema(in), v * v, out);
  sl_sample_release(in);
  return rc;
}

static int keep_odd(void *ud, const sl_sample *s) {
  int64_t v = test_sample_i64(s, 0);
  if (ud && v == *(const int64_t *)ud) return SL_EIO; /* no message */
  return v % 2 == 1;
}

static sl_parallel_opts popts(uint32_t threads, int unordered, uint32_t q) {
  sl_parallel_opts o = SL_PARALLEL_OPTS_INIT;
  o.threads = threads;
  o.unordered = unordered;
  o.queue = q;
  return o;
}

/* Drains one pass of `r` into v; returns the code that ended it. */
static int drain(sl_reader *r, int64_t *v, size_t cap, size_t *n) {
  return test_drain_i64(r, v, cap, n);
}

TEST(ordered_map_gives_exactly_what_sl_map_gives) {
  enum { N = 3000 };
  static int64_t want[N], got[N];
  sl_reader *seq;
  ASSERT_OK(sl_map(test_range_reader(N), square, NULL, NULL, NULL, &seq));
  size_t nw;
  ASSERT_RC(drain(seq, want, N, &nw), SL_EOF);
  sl_reader_destroy(seq);
  for (uint32_t t = 0; t <= 4; t++) {
    sl_parallel_opts o = popts(t, 0, t == 3 ? 5 : 0);
    sl_reader *r;
    g_freed = 0;
    ASSERT_OK(sl_map_parallel(test_range_reader(N), square, NULL, count_free,
                              NULL, &o, &r));
    ASSERT_STREQ(sl_reader_name(r), "map");
    ASSERT_EQ(test_length_checked(r), N); /* one pass; reset */
    for (int pass = 0; pass < 2; pass++) {
      size_t n;
      ASSERT_RC(drain(r, got, N, &n), SL_EOF);
      test_assert_i64_values(got, n, want, nw);
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
    ASSERT_EQ(g_freed, 1);
  }
}

TEST(ordered_filter_gives_exactly_what_sl_filter_gives) {
  enum { N = 2001 };
  static int64_t got[N];
  for (uint32_t t = 1; t <= 4; t++) {
    sl_parallel_opts o = popts(t, 0, 16);
    sl_reader *r;
    ASSERT_OK(sl_filter_parallel(test_range_reader(N), keep_odd, NULL, NULL,
                                 &o, &r));
    ASSERT_STREQ(sl_reader_name(r), "filter");
    size_t n;
    ASSERT_RC(drain(r, got, N, &n), SL_EOF);
    ASSERT_EQ(n, N / 2);
    for (size_t i = 0; i < n; i++)
      ASSERT_EQ(got[i], 2 * (int64_t)i + 1);
    sl_reader_destroy(r);
  }
}

TEST(errors_arrive_at_their_position_with_sl_maps_message_sticky) {
  enum { N = 1000 };
  static int64_t got[N];
  const int64_t at = 613;
  for (uint32_t t = 1; t <= 4; t++) {
    sl_parallel_opts o = popts(t, 0, 0);
    sl_reader *r;
    ASSERT_OK(sl_map_parallel(test_range_reader(N), square, (void *)&at, NULL,
                              NULL, &o, &r));
    for (int pass = 0; pass < 2; pass++) {
      size_t n;
      ASSERT_RC(drain(r, got, N, &n), SL_ECORRUPT);
      ASSERT_EQ(n, (size_t)at);
      ASSERT_STREQ(sl_last_error(), "square: cannot square 613");
      sl_sample *s;
      ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT); /* sticky */
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
    /* A filter error without a message is named as sl_filter names it. */
    ASSERT_OK(sl_filter_parallel(test_range_reader(N), keep_odd, (void *)&at,
                                 NULL, &o, &r));
    size_t n;
    ASSERT_RC(drain(r, got, N, &n), SL_EIO);
    ASSERT_EQ(n, (size_t)at / 2);
    ASSERT_STREQ(sl_last_error(), "filter: callback returned SL_EIO for "
                                  "sample 613");
    sl_reader_destroy(r);
  }
}

TEST(outputs_are_checked_against_the_declared_schema) {
  sl_schema *schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(schema, "y", SL_I64, 0, NULL));
  sl_parallel_opts o = popts(2, 0, 0);
  sl_reader *r;
  ASSERT_OK(sl_map_parallel(test_range_reader(10), square, NULL, NULL, schema,
                            &o, &r));
  sl_schema_release(schema);
  EXPECT_NONE(r, SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "map: sample 0: output schema {i: i64[]}");
  sl_reader_destroy(r);
}

TEST(unordered_every_sample_comes_once) {
  enum { N = 4000 };
  static int64_t got[N];
  static char seen[N];
  sl_parallel_opts o = popts(3, 1, 32);
  sl_reader *r;
  ASSERT_OK(sl_map_parallel(test_range_reader(N), square, NULL, NULL, NULL, &o,
                            &r));
  size_t n;
  ASSERT_RC(drain(r, got, N, &n), SL_EOF);
  ASSERT_EQ(n, N);
  memset(seen, 0, sizeof seen);
  for (size_t i = 0; i < n; i++) {
    int64_t k = 0;
    while (k * k < got[i])
      k++;
    ASSERT_EQ(k * k, got[i]);
    ASSERT_TRUE(k < N);
    ASSERT_EQ(seen[k]++, 0);
  }
  sl_reader_destroy(r);
}

TEST(stats_report_the_stages_threads) {
  sl_parallel_opts o = popts(3, 0, 0);
  sl_reader *r;
  ASSERT_OK(sl_map_parallel(test_range_reader(10), square, NULL, NULL, NULL,
                            &o, &r));
  sl_stage_stats st[4];
  size_t n = 0;
  ASSERT_OK(sl_reader_stats(r, st, 4, &n));
  ASSERT_EQ(n, 2);
  ASSERT_STREQ(st[0].name, "map");
  ASSERT_EQ(st[0].threads, 3);
  sl_reader_destroy(r);
}

TEST(bad_options_fail_and_free_ud_and_upstream) {
  sl_reader *r = (sl_reader *)1;
  g_freed = 0;
  sl_parallel_opts o = popts((uint32_t)sl__thread_limit() + 1, 0, 0);
  ASSERT_RC(sl_map_parallel(test_range_reader(3), square, NULL, count_free,
                            NULL, &o, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "map: threads = ");
  ASSERT_CONTAINS(sl_last_error(), "SLUICE_MAX_THREADS");
  ASSERT_NULL(r);
  ASSERT_EQ(g_freed, 1);
  o = popts(1, 0, 0);
  o.size = 0;
  ASSERT_RC(sl_filter_parallel(test_range_reader(3), keep_odd, NULL,
                               count_free, &o, &r),
            SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "sl_parallel_opts: size is 0: set it to "
                                "sizeof(sl_parallel_opts) "
                                "(SL_PARALLEL_OPTS_INIT does)");
  ASSERT_EQ(g_freed, 2);
  ASSERT_RC(sl_map_parallel(test_range_reader(3), NULL, NULL, count_free, NULL,
                            NULL, &r),
            SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "map: NULL callback");
  ASSERT_EQ(g_freed, 3);
  ASSERT_RC(sl_filter_parallel(NULL, keep_odd, NULL, count_free, NULL, &r),
            SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "filter: NULL upstream reader");
  ASSERT_EQ(g_freed, 4);
  ASSERT_RC(sl_filter_parallel(test_range_reader(3), keep_odd, NULL,
                               count_free, NULL, NULL),
            SL_EINVAL);
  ASSERT_EQ(g_freed, 5);
}

TEST(a_thread_that_cannot_start_fails_the_stage_and_leaks_nothing) {
  sl_parallel_opts o = popts(4, 0, 0);
  sl_reader *r = (sl_reader *)1;
  g_freed = 0;
  sl__thread_fail_after(3);
  int rc = sl_map_parallel(test_range_reader(1000), square, NULL, count_free,
                           NULL, &o, &r);
  sl__thread_fail_after(-1);
  ASSERT_RC(rc, SL_ENOMEM);
  ASSERT_STREQ(sl_last_error(), "map: cannot start a worker thread: Resource "
                                "temporarily unavailable");
  ASSERT_NULL(r);
  ASSERT_EQ(g_freed, 1);
  /* The same at a reset: the error is the reset's, the reader destroyable. */
  ASSERT_OK(sl_map_parallel(test_range_reader(1000), square, NULL, NULL, NULL,
                            &o, &r));
  sl__thread_fail_after(1);
  rc = sl_reader_reset(r);
  sl__thread_fail_after(-1);
  ASSERT_RC(rc, SL_ENOMEM);
  sl_reader_destroy(r);
  ASSERT_TRUE(!test_leaked());
}

TEST(destroy_mid_pass_with_a_full_queue_joins_and_frees) {
  for (int round = 0; round < 40; round++) {
    sl_parallel_opts o = popts(1 + round % 4, round % 2, 2 + round % 9);
    sl_reader *r;
    ASSERT_OK(sl_map_parallel(test_range_reader(1 << 20), square, NULL, NULL,
                              NULL, &o, &r));
    for (int k = 0; k < round; k++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    sl_reader_destroy(r);
  }
  ASSERT_TRUE(!test_leaked());
}
