/* test_ignore_errors.c - ignore_errors of sl_map_parallel /
 * sl_filter_parallel (tf.data's ignore_errors): failing samples are left
 * out and counted, the same ones for any thread count; past the cap the
 * pass ends with the count, the cap and the last message; the count
 * restarts at reset and restore; the stats row carries the count and the
 * last message; what is not the callback's own error (an output failing the
 * schema check, running out of memory, upstream's errors) still ends the
 * pass; save / restore over a stage that skipped. */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"

#include <string.h>

/* Whether value v fails: every 7th from 3 (3, 10, 17, ...). */
static bool fails(int64_t v) {
  return v % 7 == 3;
}

/* v -> v * 10; fails (SL_ECORRUPT "square: bad value V") when fails(v). */
static int times10(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  int64_t v = test_sample_i64(in, 0);
  if (fails(v)) {
    sl_sample_release(in);
    return sl_set_error(SL_ECORRUPT, "times10: bad value %lld", (long long)v);
  }
  int rc = test_i64_sample(sl_sample_schema(in), v * 10, out);
  sl_sample_release(in);
  return rc;
}

/* Keeps the even values; fails (SL_EIO, no message) when fails(v). */
static int keep_even(void *ud, const sl_sample *s) {
  (void)ud;
  int64_t v = test_sample_i64(s, 0);
  if (fails(v)) return SL_EIO;
  return v % 2 == 0;
}

/* Fails with SL_ENOMEM at value 5 (never ignored). */
static int oom_at_5(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  int64_t v = test_sample_i64(in, 0);
  if (v == 5) {
    sl_sample_release(in);
    return sl_set_error(SL_ENOMEM, "oom_at_5: out of memory");
  }
  *out = in;
  return SL_OK;
}

/* Returns a sample of another schema at value 4 (the output check fails:
 * not the callback's error, never ignored). */
static int wrong_at_4(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  int64_t v = test_sample_i64(in, 0);
  if (v != 4) {
    *out = in;
    return SL_OK;
  }
  sl_sample_release(in);
  sl_schema *other = sl_schema_new();
  if (!other) return sl_set_error(SL_ENOMEM, "wrong_at_4: cannot allocate");
  int rc = sl_schema_add(other, "other", SL_I64, 0, NULL);
  if (rc == SL_OK) rc = test_i64_sample(other, v, out);
  sl_schema_release(other);
  return rc;
}

static sl_parallel_opts popts(uint32_t threads, int unordered,
                              uint64_t ignore) {
  sl_parallel_opts o = SL_PARALLEL_OPTS_INIT;
  o.threads = threads;
  o.unordered = unordered;
  o.queue = threads == 2 ? 3 : 0; /* a small window too */
  o.ignore_errors = ignore;
  return o;
}

static sl_reader *map_ign(int64_t n, uint32_t threads, int unordered,
                          uint64_t ignore) {
  sl_parallel_opts o = popts(threads, unordered, ignore);
  sl_reader *r;
  ASSERT_OK(
      sl_map_parallel(test_range_reader(n), times10, NULL, NULL, NULL, &o, &r));
  return r;
}

/* The stage's own stats row (index 0). */
static sl_stage_stats row0(const sl_reader *r) {
  sl_stage_stats st[4];
  size_t n = 0;
  ASSERT_OK(sl_reader_stats(r, st, 4, &n));
  ASSERT_GE(n, 1);
  return st[0];
}

TEST(map_skips_the_same_samples_for_any_thread_count) {
  enum { N = 1000 };
  static int64_t want[N], got[N];
  size_t nw = 0, nbad = 0;
  for (int64_t v = 0; v < N; v++) {
    if (fails(v))
      nbad++;
    else
      want[nw++] = v * 10;
  }
  for (uint32_t t = 1; t <= 4; t *= 2) {
    sl_reader *r = map_ign(N, t, 0, SL_IGNORE_ALL);
    ASSERT_STREQ(sl_reader_name(r), "map");
    /* It may leave samples out: no length. */
    uint64_t len = 0;
    ASSERT_RC(sl_reader_length(r, &len), SL_EUNSUPPORTED);
    for (int pass = 0; pass < 2; pass++) {
      size_t n = 0;
      ASSERT_RC(test_drain_i64(r, got, N, &n), SL_EOF);
      test_assert_i64_values(got, n, want, nw);
      sl_stage_stats s = row0(r);
      ASSERT_EQ(s.errors_ignored, (uint64_t)nbad * (pass + 1)); /* all passes */
      /* The last failing value below N, in order: 997 (997 % 7 == 3). */
      ASSERT_CONTAINS(s.last_error, "times10: bad value 997");
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
  }
}

TEST(unordered_map_skips_each_failing_sample_once) {
  enum { N = 500 };
  static int64_t got[N];
  for (uint32_t t = 1; t <= 4; t *= 2) {
    sl_reader *r = map_ign(N, t, 1, SL_IGNORE_ALL);
    size_t n = 0;
    ASSERT_RC(test_drain_i64(r, got, N, &n), SL_EOF);
    static bool seen[N];
    memset(seen, 0, sizeof seen);
    for (size_t i = 0; i < n; i++) {
      ASSERT_EQ(got[i] % 10, 0);
      int64_t v = got[i] / 10;
      ASSERT_TRUE(v >= 0 && v < N && !fails(v) && !seen[v]);
      seen[v] = true;
    }
    size_t bad = 0;
    for (int64_t v = 0; v < N; v++)
      bad += fails(v);
    ASSERT_EQ(n, (size_t)N - bad);
    ASSERT_EQ(row0(r).errors_ignored, (uint64_t)bad);
    sl_reader_destroy(r);
  }
}

TEST(past_the_cap_the_pass_ends_with_count_cap_and_last_message) {
  /* Failing values 3, 10, 17: a cap of 2 ends the pass at 17, after every
   * sample before it, for any thread count. */
  for (uint32_t t = 1; t <= 4; t *= 2) {
    sl_reader *r = map_ign(100, t, 0, 2);
    int64_t got[32];
    size_t n = 0;
    ASSERT_RC(test_drain_i64(r, got, 32, &n), SL_EINVAL);
    ASSERT_CONTAINS(sl_last_error(),
                    "map: 3 samples failed in this pass, more than "
                    "ignore_errors (2); the last: ");
    ASSERT_CONTAINS(sl_last_error(), "times10: bad value 17");
    ASSERT_EQ(n, 15); /* 0..16 less 3 and 10 */
    ASSERT_EQ(got[n - 1], 160);
    /* Sticky, with the same message. */
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
    ASSERT_CONTAINS(sl_last_error(), "more than ignore_errors (2)");
    ASSERT_EQ(row0(r).errors_ignored, 3);
    sl_reader_destroy(r);
  }
}

TEST(reset_mid_pass_restarts_the_count) {
  /* 30 samples hold 4 failing values (3, 10, 17, 24): with a cap of 4 each
   * whole pass succeeds only if the count restarts at every reset. */
  for (uint32_t t = 1; t <= 4; t *= 2) {
    sl_reader *r = map_ign(30, t, 0, 4);
    int64_t got[32];
    for (int round = 0; round < 3; round++) {
      /* Part of a pass (two failures in), then a reset. */
      for (int k = 0; k < 12; k++) {
        sl_sample *s = NULL;
        ASSERT_OK(sl_reader_next(r, &s));
        sl_sample_release(s);
      }
      ASSERT_OK(sl_reader_reset(r));
      size_t n = 0;
      ASSERT_RC(test_drain_i64(r, got, 32, &n), SL_EOF);
      ASSERT_EQ(n, 26);
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
  }
}

TEST(filter_skips_failing_samples_the_same_for_any_thread_count) {
  enum { N = 700 };
  static int64_t want[N], got[N];
  size_t nw = 0, nbad = 0;
  for (int64_t v = 0; v < N; v++) {
    if (fails(v))
      nbad++;
    else if (v % 2 == 0)
      want[nw++] = v;
  }
  for (uint32_t t = 1; t <= 4; t *= 2) {
    sl_parallel_opts o = popts(t, 0, nbad);
    sl_reader *r;
    ASSERT_OK(sl_filter_parallel(test_range_reader(N), keep_even, NULL, NULL,
                                 &o, &r));
    size_t n = 0;
    ASSERT_RC(test_drain_i64(r, got, N, &n), SL_EOF);
    test_assert_i64_values(got, n, want, nw);
    sl_stage_stats s = row0(r);
    ASSERT_EQ(s.errors_ignored, nbad);
    /* sl_filter's words for a callback error without a message. */
    ASSERT_CONTAINS(s.last_error, "filter: callback returned SL_EIO");
    /* One more failure than the cap ends the pass. */
    o.ignore_errors = nbad - 1;
    sl_reader *r2;
    ASSERT_OK(sl_filter_parallel(test_range_reader(N), keep_even, NULL, NULL,
                                 &o, &r2));
    ASSERT_RC(test_drain_i64(r2, got, N, &n), SL_EINVAL);
    ASSERT_CONTAINS(sl_last_error(), "filter: ");
    ASSERT_CONTAINS(sl_last_error(), "more than ignore_errors");
    sl_reader_destroy(r2);
    sl_reader_destroy(r);
  }
}

TEST(without_ignore_errors_the_first_error_ends_the_pass) {
  sl_reader *r = map_ign(100, 2, 0, 0);
  int64_t got[8];
  size_t n = 0;
  ASSERT_RC(test_drain_i64(r, got, 8, &n), SL_ECORRUPT);
  ASSERT_EQ(n, 3);
  ASSERT_CONTAINS(sl_last_error(), "times10: bad value 3");
  ASSERT_EQ(row0(r).errors_ignored, 0);
  ASSERT_STREQ(row0(r).last_error, "");
  uint64_t len = 0;
  ASSERT_OK(sl_reader_length(r, &len)); /* 1:1 without it */
  ASSERT_EQ(len, 100);
  sl_reader_destroy(r);
}

TEST(out_of_memory_and_bad_outputs_are_never_ignored) {
  for (uint32_t t = 1; t <= 4; t *= 2) {
    sl_parallel_opts o = popts(t, 0, SL_IGNORE_ALL);
    sl_reader *r;
    ASSERT_OK(sl_map_parallel(test_range_reader(20), oom_at_5, NULL, NULL, NULL,
                              &o, &r));
    int64_t got[32];
    size_t n = 0;
    ASSERT_RC(test_drain_i64(r, got, 32, &n), SL_ENOMEM);
    ASSERT_EQ(n, 5);
    sl_reader_destroy(r);
    ASSERT_OK(sl_map_parallel(test_range_reader(20), wrong_at_4, NULL, NULL,
                              NULL, &o, &r));
    ASSERT_RC(test_drain_i64(r, got, 32, &n), SL_ESHAPE);
    ASSERT_EQ(n, 4);
    ASSERT_CONTAINS(sl_last_error(), "map: sample 4");
    ASSERT_EQ(row0(r).errors_ignored, 0);
    sl_reader_destroy(r);
  }
}

TEST(upstream_errors_are_never_ignored) {
  /* take(0..9) of a map that fails at 3 is fine; a filter over a map
   * without ignore_errors that fails: the filter's ignore_errors does not
   * hide its upstream's error. */
  sl_parallel_opts o0 = popts(2, 0, 0);
  sl_parallel_opts o1 = popts(2, 0, SL_IGNORE_ALL);
  sl_reader *m, *f;
  ASSERT_OK(sl_map_parallel(test_range_reader(50), times10, NULL, NULL, NULL,
                            &o0, &m));
  ASSERT_OK(sl_filter_parallel(m, keep_even, NULL, NULL, &o1, &f));
  int64_t got[64];
  size_t n = 0;
  ASSERT_RC(test_drain_i64(f, got, 64, &n), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "times10: bad value 3");
  sl_reader_destroy(f);
}

/* --- save / restore over a stage that skipped --------------------------- */

static sl_reader *build_map(void *ud) {
  uint32_t t = (uint32_t)(uintptr_t)ud;
  return map_ign(60, t, 0, SL_IGNORE_ALL);
}

static sl_reader *build_filter(void *ud) {
  uint32_t t = (uint32_t)(uintptr_t)ud;
  sl_parallel_opts o = popts(t, 0, SL_IGNORE_ALL);
  sl_reader *r;
  ASSERT_OK(
      sl_filter_parallel(test_range_reader(60), keep_even, NULL, NULL, &o, &r));
  return r;
}

static sl_reader *build_unordered(void *ud) {
  (void)ud;
  /* Unordered over one thread: the order is still upstream's, so the
   * resume check's exact sequence applies. */
  return map_ign(60, 1, 1, SL_IGNORE_ALL);
}

TEST(save_and_restore_over_skipped_samples) {
  /* Cuts across passes (a pass of the map is 51 samples, of the filter
   * 26): before, at and after skipped ones. */
  static const uint64_t cuts[] = {0, 1, 3, 4, 9, 10, 25, 50, 51, 52, 77, 100};
  for (uintptr_t t = 1; t <= 4; t *= 2) {
    test_resume_check(build_map, (void *)t, 2, cuts, 12, 0);
    test_resume_check(build_filter, (void *)t, 2, cuts, 10, 0);
  }
  test_resume_check(build_unordered, NULL, 2, cuts, 12, 0);
}

TEST(restore_restarts_the_count) {
  /* Cap 2 and failing values 3, 10, 17 in 0..19: the uninterrupted pass
   * fails at 17; a state saved after 12 outputs (3 and 10 passed) restores
   * into a chain that counts 17 alone, since failures before the restored
   * position are not counted again, and ends cleanly. */
  sl_reader *a = map_ign(20, 2, 0, 2);
  for (int k = 0; k < 12; k++) {
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(a, &s));
    sl_sample_release(s);
  }
  void *state = NULL;
  size_t len = 0;
  ASSERT_OK(sl_reader_save(a, &state, &len));
  int64_t got[64];
  size_t n = 0;
  ASSERT_RC(test_drain_i64(a, got, 64, &n), SL_EINVAL); /* at 17 */
  ASSERT_EQ(n, 3);                                      /* 14, 15, 16 */
  sl_reader *b = map_ign(20, 4, 0, 2);
  ASSERT_OK(sl_reader_restore(b, state, len));
  ASSERT_RC(test_drain_i64(b, got, 64, &n), SL_EOF);
  ASSERT_EQ(n, 5); /* 14, 15, 16, 18, 19 */
  ASSERT_EQ(got[0], 140);
  ASSERT_EQ(got[4], 190);
  ASSERT_EQ(row0(b).errors_ignored, 1);
  sl_free(state);
  sl_reader_destroy(a);
  sl_reader_destroy(b);
}

TEST(close_mid_pass_with_skips_in_flight) {
  for (int i = 0; i < 50; i++) {
    sl_reader *r = map_ign(10000, 4, i % 2, SL_IGNORE_ALL);
    for (int k = 0; k < i; k++) {
      sl_sample *s = NULL;
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    sl_reader_destroy(r);
  }
}

/* --- decode_image: the same rule, the same stats row -------------------- */

TEST(decode_image_skips_count_in_the_stats_row) {
  /* Images that are not images: every one fails to decode (SL_ECORRUPT);
   * the skip policy leaves them out, counted like ignore_errors, and the
   * stats row carries the count and the last message. */
  enum { N = 12 };
  sl_schema *sc = sl_schema_new();
  const int64_t var[1] = {SL_DIM_VAR};
  ASSERT_OK(sl_schema_add(sc, "image", SL_U8, 1, var));
  sl_sample *v[N];
  for (int i = 0; i < N; i++) {
    v[i] = sl_sample_new(sc);
    ASSERT_NOT_NULL(v[i]);
    void *d;
    const int64_t len = 16;
    ASSERT_OK(sl_sample_alloc(v[i], 0, 1, &len, &d));
    memset(d, 'x', 16);
  }
  for (uint32_t t = 1; t <= 4; t *= 2) {
    sl_reader *src, *r;
    ASSERT_OK(sl_reader_from_array(v, N, sc, &src));
    sl_image_opts o = SL_IMAGE_OPTS_INIT;
    o.threads = t;
    o.policy = SL_CORRUPT_SKIP_CHUNK;
    o.max_bad = N;
    int rc = sl_decode_image(src, &o, &r);
    if (rc == SL_EUNSUPPORTED) break; /* a build without the image layer */
    ASSERT_OK(rc);
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    sl_stage_stats st = row0(r);
    ASSERT_EQ(st.errors_ignored, N);
    ASSERT_CONTAINS(st.last_error, "decode_image: sample 11 of the pass");
    /* One fewer allowed: the 12th ends the pass, with the same words. */
    ASSERT_OK(sl_reader_reset(r));
    sl_reader_destroy(r);
    ASSERT_OK(sl_reader_from_array(v, N, sc, &src));
    o.max_bad = N - 1;
    ASSERT_OK(sl_decode_image(src, &o, &r));
    ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(),
                    "decode_image: 12 images failed to decode in this pass, "
                    "more than max_bad (11); the last: decode_image: sample "
                    "11 of the pass");
    ASSERT_EQ(row0(r).errors_ignored, N);
    sl_reader_destroy(r);
  }
  for (int i = 0; i < N; i++)
    sl_sample_release(v[i]);
  sl_schema_release(sc);
}
