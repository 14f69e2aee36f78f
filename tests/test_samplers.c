/*
 * test_samplers.c - sl_weighted_sample, sl_subset, sl_random_split
 * (src/stages/sampler.c) and the random access they need from sl_cache:
 * the draws follow the weights, are reproducible by seed and differ by
 * pass, subsets keep their order, splits partition by PyTorch's rounding,
 * bad arguments are refused with messages naming the stage and the value,
 * and every stage resumes exactly at any cut.
 */
#include "core/rng.h"
#include "formats/slr_format.h"
#include "stages/state.h"
#include "test.h"
#include "test_util.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define OK(expr)                                                               \
  do {                                                                         \
    if ((expr) != SL_OK) return NULL;                                          \
  } while (0)

/* i -> i * 3 + 1 (a new sample; the map has no random access). */
static int times3(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  int64_t v = test_sample_i64(in, 0);
  int rc = test_i64_sample(sl_sample_schema(in), v * 3 + 1, out);
  sl_sample_release(in);
  return rc;
}

static int keep_all(void *ud, const sl_sample *s) {
  (void)ud;
  (void)s;
  return 1;
}

static sl_reader *weighted(sl_reader *up, const double *w, size_t n,
                           uint64_t num, int without, uint64_t seed) {
  sl_weighted_sample_opts o = SL_WEIGHTED_SAMPLE_OPTS_INIT;
  o.num_samples = num;
  o.without_replacement = without;
  o.seed = seed;
  sl_reader *r = NULL;
  ASSERT_OK(sl_weighted_sample(up, w, n, &o, &r));
  return r;
}

/* Reads one pass of r into v (field 0 of each sample). */
static size_t drain(sl_reader *r, int64_t *v, size_t cap) {
  size_t n = 0;
  ASSERT_RC(test_drain_i64(r, v, cap, &n), SL_EOF);
  return n;
}

/* --- weighted_sample -------------------------------------------------------
 */

TEST(weighted_draws_follow_the_weights) {
  const double w[5] = {1, 2, 0, 3, 4};
  enum { N = 200000 };
  sl_reader *r = weighted(test_range_reader(5), w, 5, N, 0, 7);
  uint64_t len = 0;
  ASSERT_OK(sl_reader_length(r, &len));
  ASSERT_EQ(len, N);
  size_t count[5] = {0};
  sl_sample *s;
  size_t total = 0;
  while (sl_reader_next(r, &s) == SL_OK) {
    int64_t v = test_sample_i64(s, 0);
    ASSERT_TRUE(v >= 0 && v < 5);
    count[v]++;
    total++;
    sl_sample_release(s);
  }
  ASSERT_EQ(total, N);
  ASSERT_EQ(count[2], 0); /* a zero weight is never drawn */
  for (int i = 0; i < 5; i++) {
    double got = (double)count[i] / N, want = w[i] / 10;
    ASSERT_TRUE(fabs(got - want) < 0.005);
  }
  sl_reader_destroy(r);
}

TEST(weighted_default_num_samples_is_the_upstream_length) {
  const double w[7] = {1, 1, 1, 1, 1, 1, 1};
  sl_reader *r = weighted(test_range_reader(7), w, 7, 0, 0, 1);
  ASSERT_EQ(test_length_checked(r), 7);
  sl_reader_destroy(r);
  r = weighted(test_range_reader(7), w, 7, 3, 0, 1);
  ASSERT_EQ(test_length_checked(r), 3);
  sl_reader_destroy(r);
  /* NULL opts: defaults (with replacement, length samples, seed 0). */
  ASSERT_OK(sl_weighted_sample(test_range_reader(7), w, 7, NULL, &r));
  ASSERT_EQ(test_length_checked(r), 7);
  sl_reader_destroy(r);
}

TEST(without_replacement_draws_each_index_at_most_once) {
  double w[20];
  for (int i = 0; i < 20; i++)
    w[i] = i % 5 == 0 ? 0 : 1 + i; /* 4 zeros, 16 nonzero */
  for (uint64_t num = 1; num <= 16; num += 5) {
    sl_reader *r = weighted(test_range_reader(20), w, 20, num, 1, 3);
    for (int pass = 0; pass < 3; pass++) {
      int64_t v[32];
      size_t n = drain(r, v, 32);
      ASSERT_EQ(n, num);
      bool seen[20] = {false};
      for (size_t i = 0; i < n; i++) {
        ASSERT_TRUE(v[i] >= 0 && v[i] < 20);
        ASSERT_TRUE(w[v[i]] > 0);
        ASSERT_TRUE(!seen[v[i]]);
        seen[v[i]] = true;
      }
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
  }
  /* All the nonzero ones: a permutation of them. */
  sl_reader *r = weighted(test_range_reader(20), w, 20, 16, 1, 3);
  int64_t v[32];
  ASSERT_EQ(drain(r, v, 32), 16);
  sl_reader_destroy(r);
}

TEST(without_replacement_first_draw_follows_the_weights) {
  const double w[4] = {1, 2, 3, 4};
  enum { PASSES = 40000 };
  sl_reader *r = weighted(test_range_reader(4), w, 4, 2, 1, 11);
  size_t first[4] = {0}, second[4] = {0};
  for (int p = 0; p < PASSES; p++) {
    int64_t v[2];
    ASSERT_EQ(drain(r, v, 2), 2);
    ASSERT_NE(v[0], v[1]);
    first[v[0]]++;
    second[v[1]]++;
    ASSERT_OK(sl_reader_reset(r));
  }
  for (int i = 0; i < 4; i++)
    ASSERT_TRUE(fabs((double)first[i] / PASSES - w[i] / 10) < 0.01);
  /* The second draw is from the weights left: P(second = 0) =
   * sum over j != 0 of w_j / 10 * w_0 / (10 - w_j). */
  double p0 = 0;
  for (int j = 1; j < 4; j++)
    p0 += w[j] / 10 * w[0] / (10 - w[j]);
  ASSERT_TRUE(fabs((double)second[0] / PASSES - p0) < 0.01);
  sl_reader_destroy(r);
}

/* Two passes of a weighted sampler made with `seed` (with or without
 * replacement) into a[0..n) and b[0..n). */
static void two_passes(uint64_t seed, int without, int64_t *a, int64_t *b,
                       size_t n) {
  double w[50];
  for (int i = 0; i < 50; i++)
    w[i] = 1 + (i % 7);
  sl_reader *r = weighted(test_range_reader(50), w, 50, n, without, seed);
  ASSERT_EQ(drain(r, a, n), n);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(drain(r, b, n), n);
  sl_reader_destroy(r);
}

TEST(weighted_draws_repeat_by_seed_and_change_by_pass) {
  for (int without = 0; without <= 1; without++) {
    int64_t a[40], b[40], c[40], d[40], e[40], f[40];
    two_passes(5, without, a, b, 40);
    two_passes(5, without, c, d, 40);
    two_passes(6, without, e, f, 40);
    ASSERT_TRUE(memcmp(a, c, sizeof a) == 0); /* same seed, same passes */
    ASSERT_TRUE(memcmp(b, d, sizeof b) == 0);
    ASSERT_TRUE(memcmp(a, b, sizeof a) != 0); /* the pass changes the draw */
    ASSERT_TRUE(memcmp(a, e, sizeof a) != 0); /* so does the seed */
  }
}

TEST(weighted_reset_mid_pass_starts_the_next_pass) {
  const double w[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  sl_reader *r = weighted(test_range_reader(10), w, 10, 30, 0, 2);
  sl_reader *ref = weighted(test_range_reader(10), w, 10, 30, 0, 2);
  int64_t v[30], want[30];
  sl_sample *s;
  for (int i = 0; i < 4; i++) {
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  ASSERT_OK(sl_reader_reset(r)); /* mid-pass: pass 1 starts */
  ASSERT_EQ(drain(r, v, 30), 30);
  drain(ref, want, 30);
  ASSERT_OK(sl_reader_reset(ref));
  ASSERT_EQ(drain(ref, want, 30), 30);
  ASSERT_TRUE(memcmp(v, want, sizeof v) == 0);
  sl_reader_destroy(r);
  sl_reader_destroy(ref);
}

TEST(weighted_bad_arguments_are_refused_naming_the_value) {
  sl_reader *r = (sl_reader *)1;
  const double w3[3] = {1, 1, 1};
  ASSERT_RC(sl_weighted_sample(test_range_reader(4), w3, 3, NULL, &r),
            SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "weighted_sample: 3 weights");
  ASSERT_CONTAINS(sl_last_error(), "4 samples");
  const double neg[3] = {1, -1, 1};
  ASSERT_RC(sl_weighted_sample(test_range_reader(3), neg, 3, NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(),
                  "the 2nd weight must be a finite number >= 0");
  const double nan_w[3] = {1, 1, NAN};
  ASSERT_RC(sl_weighted_sample(test_range_reader(3), nan_w, 3, NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(),
                  "the 3rd weight must be a finite number >= 0 (got NaN)");
  const double inf_w[3] = {INFINITY, 1, 1};
  ASSERT_RC(sl_weighted_sample(test_range_reader(3), inf_w, 3, NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "the 1st weight");
  const double zero[3] = {0, 0, 0};
  ASSERT_RC(sl_weighted_sample(test_range_reader(3), zero, 3, NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "all 3 weights are 0");
  const double big[2] = {1.5e308, 1.5e308};
  ASSERT_RC(sl_weighted_sample(test_range_reader(2), big, 2, NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "infinity");
  ASSERT_RC(sl_weighted_sample(test_range_reader(3), NULL, 3, NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "NULL weights");
  /* Without replacement: more samples than nonzero weights. */
  const double some[4] = {1, 0, 2, 0};
  sl_weighted_sample_opts o = SL_WEIGHTED_SAMPLE_OPTS_INIT;
  o.without_replacement = 1;
  o.num_samples = 3;
  ASSERT_RC(sl_weighted_sample(test_range_reader(4), some, 4, &o, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "num_samples 3 without replacement");
  ASSERT_CONTAINS(sl_last_error(), "there are 2");
  /* Its default (the length, 4) is too many as well. */
  o.num_samples = 0;
  ASSERT_RC(sl_weighted_sample(test_range_reader(4), some, 4, &o, &r),
            SL_EINVAL);
  o.size = 0;
  ASSERT_RC(sl_weighted_sample(test_range_reader(4), some, 4, &o, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "weighted_sample");
  ASSERT_RC(sl_weighted_sample(NULL, some, 4, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "weighted_sample: NULL upstream");
  ASSERT_RC(sl_weighted_sample(test_range_reader(4), some, 4, NULL, NULL),
            SL_EINVAL);
}

TEST(an_upstream_without_random_access_is_refused_suggesting_cache) {
  sl_reader *m = NULL, *r = (sl_reader *)1;
  ASSERT_OK(sl_map(test_range_reader(4), times3, NULL, NULL, NULL, &m));
  const double w[4] = {1, 1, 1, 1};
  ASSERT_RC(sl_weighted_sample(m, w, 4, NULL, &r), SL_EUNSUPPORTED);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "weighted_sample: its upstream 'map' has "
                                   "no random access");
  ASSERT_CONTAINS(sl_last_error(), ":cache()");
  ASSERT_OK(sl_map(test_range_reader(4), times3, NULL, NULL, NULL, &m));
  const uint64_t idx[1] = {0};
  ASSERT_RC(sl_subset(m, idx, 1, &r), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "subset: its upstream 'map'");
  ASSERT_OK(sl_map(test_range_reader(4), times3, NULL, NULL, NULL, &m));
  sl_reader *parts[2] = {(sl_reader *)1, (sl_reader *)1};
  const double half[2] = {0.5, 0.5};
  ASSERT_RC(sl_random_split(m, half, 2, 0, parts), SL_EUNSUPPORTED);
  ASSERT_NULL(parts[0]);
  ASSERT_NULL(parts[1]);
  ASSERT_CONTAINS(sl_last_error(), "random_split: its upstream 'map'");
  /* A cache over a filter has random access but no known length. */
  sl_reader *f = NULL;
  ASSERT_OK(sl_filter(test_range_reader(4), keep_all, NULL, NULL, &f));
  ASSERT_OK(sl_cache(f, &f));
  ASSERT_RC(sl_weighted_sample(f, w, 4, NULL, &r), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(),
                  "weighted_sample: the upstream's length must be known");
}

TEST(a_cache_gives_random_access_to_a_map) {
  const double w[6] = {1, 2, 3, 1, 2, 3};
  sl_reader *m = NULL;
  ASSERT_OK(sl_map(test_range_reader(6), times3, NULL, NULL, NULL, &m));
  ASSERT_OK(sl_cache(m, &m));
  sl_reader *a = weighted(m, w, 6, 25, 0, 9);
  sl_reader *b = weighted(test_range_reader(6), w, 6, 25, 0, 9);
  for (int pass = 0; pass < 3; pass++) {
    int64_t va[25], vb[25];
    ASSERT_EQ(drain(a, va, 25), 25);
    ASSERT_EQ(drain(b, vb, 25), 25);
    for (int i = 0; i < 25; i++)
      ASSERT_EQ(va[i], vb[i] * 3 + 1); /* the same draws, mapped */
    ASSERT_OK(sl_reader_reset(a));
    ASSERT_OK(sl_reader_reset(b));
  }
  sl_reader_destroy(a);
  sl_reader_destroy(b);
}

TEST(a_cache_read_ahead_by_fetch_keeps_its_pass) {
  sl_reader *c = NULL;
  ASSERT_OK(sl_map(test_range_reader(8), times3, NULL, NULL, NULL, &c));
  ASSERT_OK(sl_cache(c, &c));
  ASSERT_OK(sl__reader_fetch(c, 0, 0, NULL));
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(c, &s));
  ASSERT_EQ(test_sample_i64(s, 0), 1);
  sl_sample_release(s);
  ASSERT_OK(sl__reader_fetch(c, 0, 5, &s)); /* reads ahead to 5 */
  ASSERT_EQ(test_sample_i64(s, 0), 16);
  sl_sample_release(s);
  ASSERT_OK(sl__reader_fetch(c, 0, 0, &s)); /* held */
  ASSERT_EQ(test_sample_i64(s, 0), 1);
  sl_sample_release(s);
  /* The pass goes on from sample 1, through the held ones, to the end. */
  EXPECT(c, SL_EOF, 4, 7, 10, 13, 16, 19, 22);
  ASSERT_RC(sl__reader_fetch(c, 0, 8, &s), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "cache: sample 8 is past its 8 samples");
  ASSERT_OK(sl_reader_reset(c));
  EXPECT(c, SL_EOF, 1, 4, 7, 10, 13, 16, 19, 22);
  /* Read ahead to the end before the first next: the pass is whole. */
  sl_reader *d = NULL;
  ASSERT_OK(sl_map(test_range_reader(3), times3, NULL, NULL, NULL, &d));
  ASSERT_OK(sl_cache(d, &d));
  ASSERT_OK(sl__reader_fetch(d, 0, 2, &s));
  sl_sample_release(s);
  EXPECT(d, SL_EOF, 1, 4, 7);
  sl_reader_destroy(c);
  sl_reader_destroy(d);
}

TEST(weighted_over_an_empty_upstream) {
  sl_reader *r = NULL;
  ASSERT_OK(sl_weighted_sample(test_range_reader(0), NULL, 0, NULL, &r));
  EXPECT_NONE(r, SL_EOF);
  ASSERT_EQ(test_length_checked(r), 0);
  sl_reader_destroy(r);
  sl_weighted_sample_opts o = SL_WEIGHTED_SAMPLE_OPTS_INIT;
  o.num_samples = 3;
  ASSERT_RC(sl_weighted_sample(test_range_reader(0), NULL, 0, &o, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "num_samples 3 from an empty upstream");
}

/* --- subset -----------------------------------------------------------------
 */

TEST(subset_yields_the_indices_in_their_order) {
  const uint64_t idx[6] = {7, 0, 3, 3, 9, 1};
  sl_reader *r = NULL;
  ASSERT_OK(sl_subset(test_range_reader(10), idx, 6, &r));
  ASSERT_EQ(test_length_checked(r), 6);
  EXPECT(r, SL_EOF, 7, 0, 3, 3, 9, 1);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 7, 0, 3, 3, 9, 1); /* every pass the same */
  sl_reader *e = NULL;
  ASSERT_OK(sl_subset(test_range_reader(10), NULL, 0, &e));
  EXPECT_NONE(e, SL_EOF);
  sl_reader_destroy(e);
  ASSERT_OK(sl_subset(test_range_reader(0), NULL, 0, &e));
  EXPECT_NONE(e, SL_EOF);
  sl_reader_destroy(e);
  /* A subset of a subset, and of a weighted sample (random access). */
  const uint64_t sub[3] = {4, 0, 2};
  ASSERT_OK(sl_subset(r, sub, 3, &r));
  EXPECT(r, SL_EOF, 9, 7, 3);
  sl_reader_destroy(r);
}

TEST(subset_reset_mid_pass_and_close_mid_pass) {
  const uint64_t idx[5] = {4, 3, 2, 1, 0};
  sl_reader *r = NULL;
  ASSERT_OK(sl_subset(test_range_reader(5), idx, 5, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(test_sample_i64(s, 0), 4);
  sl_sample_release(s);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 4, 3, 2, 1, 0);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_OK(sl_reader_next(r, &s));
  sl_reader_destroy(r); /* mid-pass, with a sample still held */
  ASSERT_EQ(test_sample_i64(s, 0), 4);
  sl_sample_release(s);
}

TEST(subset_out_of_range_indices_are_refused_naming_them) {
  const uint64_t idx[3] = {1, 10, 2};
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_subset(test_range_reader(10), idx, 3, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "subset: index 10 (the 2nd) is out of "
                                   "range: the upstream has 10 samples");
  /* Entries are counted from 1 in words (the same from C and Lua). */
  uint64_t many[23] = {0};
  const struct {
    size_t at;
    const char *nth;
  } cases[] = {{10, "the 11th"}, {11, "the 12th"}, {12, "the 13th"},
               {20, "the 21st"}, {21, "the 22nd"}, {22, "the 23rd"}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    memset(many, 0, sizeof many);
    many[cases[c].at] = 99;
    ASSERT_RC(sl_subset(test_range_reader(10), many, 23, &r), SL_EINVAL);
    ASSERT_CONTAINS(sl_last_error(), cases[c].nth);
  }
  ASSERT_RC(sl_subset(test_range_reader(10), NULL, 2, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "subset: NULL indices");
  /* Length not known (a cache over a filter): the pass meets the error. */
  sl_reader *f = NULL;
  ASSERT_OK(sl_filter(test_range_reader(10), keep_all, NULL, NULL, &f));
  ASSERT_OK(sl_cache(f, &f));
  ASSERT_OK(sl_subset(f, idx, 3, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(test_sample_i64(s, 0), 1);
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "subset: sample 1 (upstream position 10)");
  ASSERT_CONTAINS(sl_last_error(), "past its 10 samples");
  sl_reader_destroy(r);
}

/* --- random_split ------------------------------------------------------------
 */

/* Splits range(n) by sizes[0..k) with `seed`; checks the lengths want[] and
 * that the parts are disjoint and cover 0..n-1; stores part i's values at
 * v[i * n ...] (up to n each). */
static void split_check(int64_t n, const double *sizes, size_t k, uint64_t seed,
                        const uint64_t *want, int64_t *v) {
  sl_reader *parts[8];
  ASSERT_TRUE(k <= 8);
  ASSERT_OK(sl_random_split(test_range_reader(n), sizes, k, seed, parts));
  bool *seen = calloc((size_t)n + 1, 1);
  size_t total = 0;
  for (size_t i = 0; i < k; i++) {
    uint64_t len = 0;
    ASSERT_OK(sl_reader_length(parts[i], &len));
    ASSERT_EQ(len, want[i]);
    size_t got = drain(parts[i], v + i * (size_t)n, (size_t)n);
    ASSERT_EQ(got, want[i]);
    for (size_t j = 0; j < got; j++) {
      int64_t x = v[i * (size_t)n + j];
      ASSERT_TRUE(x >= 0 && x < n);
      ASSERT_TRUE(!seen[x]);
      seen[x] = true;
    }
    total += got;
  }
  ASSERT_EQ(total, (size_t)n);
  free(seen);
  for (size_t i = 0; i < k; i++)
    sl_reader_destroy(parts[i]);
}

TEST(random_split_sizes_follow_pytorch_rounding) {
  int64_t v[3 * 100];
  const double f82[2] = {0.8, 0.2};
  split_check(10, f82, 2, 0, (const uint64_t[]){8, 2}, v);
  const double f334[3] = {0.3, 0.3, 0.4};
  /* floor: 3, 3, 4 (10 of 11); the remainder goes to the first. */
  split_check(11, f334, 3, 0, (const uint64_t[]){4, 3, 4}, v);
  const double thirds[3] = {1.0 / 3, 1.0 / 3, 1.0 / 3};
  /* floor: 33 each (99 of 100); one more to the first. */
  split_check(100, thirds, 3, 1, (const uint64_t[]){34, 33, 33}, v);
  const double halves[2] = {0.5, 0.5};
  split_check(7, halves, 2, 2, (const uint64_t[]){4, 3}, v);
  const double quarters[4] = {0.25, 0.25, 0.25, 0.25};
  /* floor: 0 each (0 of 3); the remainder round-robin: 1, 1, 1, 0. */
  split_check(3, quarters, 4, 2, (const uint64_t[]){1, 1, 1, 0}, v);
  const double counts[3] = {3, 0, 7};
  split_check(10, counts, 3, 3, (const uint64_t[]){3, 0, 7}, v);
  const double all[1] = {1};
  split_check(5, all, 1, 3, (const uint64_t[]){5}, v);
  /* An empty source: every part empty. */
  split_check(0, halves, 2, 3, (const uint64_t[]){0, 0}, v);
}

TEST(random_split_same_seed_same_split) {
  const double f[3] = {0.5, 0.3, 0.2};
  const uint64_t want[3] = {50, 30, 20};
  static int64_t a[300], b[300], c[300];
  split_check(100, f, 3, 42, want, a);
  split_check(100, f, 3, 42, want, b);
  split_check(100, f, 3, 43, want, c);
  ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
  ASSERT_TRUE(memcmp(a, c, sizeof a) != 0);
  /* Not the identity: the permutation shuffles. */
  bool sorted = true;
  for (int i = 1; i < 50; i++)
    sorted = sorted && a[i] > a[i - 1];
  ASSERT_TRUE(!sorted);
}

/* The order is core/rng.h's seeded permutation (sl__permute_u64 of the
 * seed), pinned: the values the Fisher-Yates loop random_split had before
 * issue 25 gave, so a split saved or published stays the same. */
TEST(random_split_order_is_the_pinned_permutation) {
  const double halves[2] = {0.5, 0.5};
  int64_t v[2 * 10];
  split_check(10, halves, 2, 42, (const uint64_t[]){5, 5}, v);
  const int64_t want[10] = {9, 1, 4, 2, 8, 7, 6, 5, 3, 0};
  for (int i = 0; i < 10; i++)
    ASSERT_EQ(v[i < 5 ? i : 10 + i - 5], want[i]);
  uint64_t p[10];
  sl__permute_u64(42, p, 10);
  for (int i = 0; i < 10; i++)
    ASSERT_EQ((int64_t)p[i], want[i]);
}

TEST(random_split_bad_sizes_are_refused) {
  sl_reader *p[3] = {(sl_reader *)1, (sl_reader *)1, (sl_reader *)1};
  const double sum9[2] = {4, 5};
  ASSERT_RC(sl_random_split(test_range_reader(10), sum9, 2, 0, p), SL_EINVAL);
  ASSERT_NULL(p[0]);
  ASSERT_NULL(p[1]);
  ASSERT_CONTAINS(sl_last_error(),
                  "random_split: sizes sum to 9, the source has 10 samples");
  const double frac[2] = {0.5, 0.4};
  ASSERT_RC(sl_random_split(test_range_reader(10), frac, 2, 0, p), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "the 1st size is 0.5");
  const double neg[2] = {-1, 11};
  ASSERT_RC(sl_random_split(test_range_reader(10), neg, 2, 0, p), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "the 1st size must be a finite number >= 0");
  const double nan_s[2] = {NAN, 1};
  ASSERT_RC(sl_random_split(test_range_reader(10), nan_s, 2, 0, p), SL_EINVAL);
  ASSERT_RC(sl_random_split(test_range_reader(10), frac, 0, 0, p), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "needs at least one size");
  ASSERT_RC(sl_random_split(test_range_reader(10), NULL, 2, 0, p), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "random_split: NULL sizes");
  ASSERT_RC(sl_random_split(NULL, frac, 2, 0, p), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "random_split: NULL source");
  ASSERT_RC(sl_random_split(test_range_reader(10), frac, 2, 0, NULL),
            SL_EINVAL);
}

TEST(random_splits_are_independent_pipelines) {
  const double f[2] = {0.6, 0.4};
  sl_reader *p[2];
  ASSERT_OK(sl_random_split(test_range_reader(20), f, 2, 5, p));
  int64_t a[12], b[8];
  ASSERT_EQ(drain(p[0], a, 12), 12);
  ASSERT_EQ(drain(p[1], b, 8), 8);
  ASSERT_OK(sl_reader_reset(p[0]));
  ASSERT_OK(sl_reader_reset(p[1]));
  /* Interleaved, with a reset of one mid-pass: each keeps its own place. */
  sl_sample *s;
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(sl_reader_next(p[0], &s));
    ASSERT_EQ(test_sample_i64(s, 0), a[i]);
    sl_sample_release(s);
    ASSERT_OK(sl_reader_next(p[1], &s));
    ASSERT_EQ(test_sample_i64(s, 0), b[i]);
    sl_sample_release(s);
  }
  ASSERT_OK(sl_reader_reset(p[1]));
  int64_t rest[12];
  ASSERT_EQ(drain(p[0], rest, 12), 9);
  ASSERT_TRUE(memcmp(rest, a + 3, 9 * sizeof *a) == 0);
  int64_t again[8];
  ASSERT_EQ(drain(p[1], again, 8), 8);
  ASSERT_TRUE(memcmp(again, b, sizeof b) == 0);
  /* Destroying one leaves the other working (it holds the source). */
  sl_reader_destroy(p[0]);
  ASSERT_OK(sl_reader_reset(p[1]));
  ASSERT_EQ(drain(p[1], again, 8), 8);
  ASSERT_TRUE(memcmp(again, b, sizeof b) == 0);
  /* A split can be sampled further (it has random access). */
  const double w[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  sl_reader *ws = weighted(p[1], w, 8, 16, 0, 1);
  int64_t x[16];
  ASSERT_EQ(drain(ws, x, 16), 16);
  for (int i = 0; i < 16; i++) {
    bool in_b = false;
    for (int j = 0; j < 8; j++)
      in_b = in_b || x[i] == b[j];
    ASSERT_TRUE(in_b);
  }
  sl_reader_destroy(ws);
}

typedef struct split_job {
  sl_reader *r;
  int64_t sum;
  size_t n;
  int64_t first[250]; /* the first pass, in order */
} split_job;

static void *read_split(void *arg) {
  split_job *j = arg;
  for (int pass = 0; pass < 50; pass++) {
    sl_sample *s;
    size_t k = 0;
    while (sl_reader_next(j->r, &s) == SL_OK) {
      if (pass == 0 && k < 250) j->first[k++] = test_sample_i64(s, 0);
      j->sum += test_sample_i64(s, 0);
      j->n++;
      sl_sample_release(s);
    }
    if (sl_reader_reset(j->r) != SL_OK) break;
  }
  return NULL;
}

TEST(random_splits_read_on_threads_of_their_own) {
  enum { N = 1000, K = 4 };
  const double f[K] = {0.25, 0.25, 0.25, 0.25};
  sl_reader *p[K];
  ASSERT_OK(sl_random_split(test_range_reader(N), f, K, 8, p));
  split_job jobs[K];
  pthread_t t[K];
  for (int i = 0; i < K; i++) {
    jobs[i] = (split_job){p[i], 0, 0, {0}};
    ASSERT_EQ(pthread_create(&t[i], NULL, read_split, &jobs[i]), 0);
  }
  int64_t sum = 0;
  size_t n = 0;
  for (int i = 0; i < K; i++) {
    pthread_join(t[i], NULL);
    sum += jobs[i].sum;
    n += jobs[i].n;
    ASSERT_EQ(jobs[i].n, 50 * N / K);
    sl_reader_destroy(p[i]);
  }
  ASSERT_EQ(n, 50 * N);
  ASSERT_EQ(sum, 50 * (int64_t)N * (N - 1) / 2);
  /* Each part's pass is the one a single thread reads. */
  ASSERT_OK(sl_random_split(test_range_reader(N), f, K, 8, p));
  for (int i = 0; i < K; i++) {
    int64_t v[N / K];
    ASSERT_EQ(drain(p[i], v, N / K), N / K);
    ASSERT_TRUE(memcmp(v, jobs[i].first, sizeof v) == 0);
    sl_reader_destroy(p[i]);
  }
}

/* --- over an SLR file
 * --------------------------------------------------------- */

TEST(samplers_over_an_slr_file) {
  const char *path = test_tmppath("samplers", "ids.slr");
  test_write_ids_slr(path, 100, 50, 8);
  sl_reader *f = NULL;
  ASSERT_OK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &f));
  const uint64_t idx[4] = {49, 0, 8, 7};
  ASSERT_OK(sl_subset(f, idx, 4, &f));
  EXPECT(f, SL_EOF, 149, 100, 108, 107);
  sl_reader_destroy(f);
  double w[50];
  for (int i = 0; i < 50; i++)
    w[i] = i < 25 ? 0 : 1;
  ASSERT_OK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &f));
  f = weighted(f, w, 50, 25, 1, 4);
  int64_t v[25];
  ASSERT_EQ(drain(f, v, 25), 25);
  int64_t seen = 0;
  for (int i = 0; i < 25; i++) {
    ASSERT_TRUE(v[i] >= 125 && v[i] < 150);
    seen |= (int64_t)1 << (v[i] - 125);
  }
  ASSERT_EQ(seen, ((int64_t)1 << 25) - 1); /* each of them once */
  sl_reader_destroy(f);
}

/* Throughput, for docs/LUA.md (printed; the assertions check the counts):
 * a random fetch from an SLR file decodes the chunk holding the record
 * unless it is the last one decoded, so its cost grows with the records
 * per chunk; a cache in front pays one pass, then serves from memory. */
TEST(weighted_throughput_over_range_and_slr) {
  enum { N = 20000, DRAWS = 200000 };
  const char *big = test_tmppath("samplers", "tput1000.slr");
  const char *small = test_tmppath("samplers", "tput64.slr");
  test_write_ids_slr(big, 0, N, 1000);
  test_write_ids_slr(small, 0, N, 64);
  double *w = malloc(N * sizeof *w);
  for (int i = 0; i < N; i++)
    w[i] = 1 + i % 3;
  const char *names[4] = {"range", "slr (1000 records a chunk)",
                          "slr (64 records a chunk)",
                          "cache over slr (1000 records a chunk)"};
  for (int kind = 0; kind < 4; kind++) {
    sl_reader *r = NULL;
    if (kind == 0)
      r = test_range_reader(N);
    else
      ASSERT_OK(
          sl_slr_reader(kind == 2 ? small : big, NULL, 0, UINT64_MAX, &r));
    if (kind == 3) ASSERT_OK(sl_cache(r, &r));
    uint64_t draws = kind == 1 || kind == 2 ? DRAWS / 20 : DRAWS;
    r = weighted(r, w, N, draws, 0, 1);
    double t0 = test_now_s();
    uint64_t n = 0;
    sl_sample *s;
    while (sl_reader_next(r, &s) == SL_OK) {
      n++;
      sl_sample_release(s);
    }
    double dt = test_now_s() - t0;
    ASSERT_EQ(n, draws);
    printf("weighted_sample over %s: %.0f samples/s\n", names[kind],
           (double)n / dt);
    sl_reader_destroy(r);
  }
  free(w);
}

/* --- global_shuffle (issue 28, item 3) ----------------------------------
 */

/* The Feistel permutation of core/rng.h: a bijection of [0, n) for every n,
 * a function of (seed, stream) alone, a different one per stream. */
TEST(feistel_permutes_every_size_by_seed_and_stream) {
  static const uint64_t sizes[] = {1,  2,   3,   4,    5,    7,    16,
                                   17, 100, 255, 256,  257,  1000, 4097,
                                   65539};
  static uint8_t seen[65539];
  for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
    uint64_t n = sizes[z];
    for (uint64_t stream = 0; stream < 3; stream++) {
      sl__feistel f, g;
      sl__feistel_init(&f, n, 42, stream);
      sl__feistel_init(&g, n, 42, stream);
      memset(seen, 0, n);
      uint64_t fixed = 0;
      for (uint64_t i = 0; i < n; i++) {
        uint64_t x = sl__feistel_at(&f, i);
        ASSERT_TRUE(x < n);
        ASSERT_EQ(seen[x], 0);
        seen[x] = 1;
        ASSERT_EQ(sl__feistel_at(&g, i), x); /* same key, same value */
        fixed += x == i;
      }
      if (n >= 100) ASSERT_TRUE(fixed < n / 10); /* not the identity */
    }
    if (n >= 100) { /* another stream (pass), another order */
      sl__feistel a, b;
      sl__feistel_init(&a, n, 42, 0);
      sl__feistel_init(&b, n, 42, 1);
      uint64_t same = 0;
      for (uint64_t i = 0; i < n; i++)
        same += sl__feistel_at(&a, i) == sl__feistel_at(&b, i);
      ASSERT_TRUE(same < n / 10);
    }
  }
  /* The largest sizes: values stay in range. */
  sl__feistel big;
  sl__feistel_init(&big, UINT64_MAX, 7, 0);
  for (uint64_t i = 0; i < 1000; i++)
    ASSERT_TRUE(sl__feistel_at(&big, UINT64_MAX - 1 - i) < UINT64_MAX);
}

/* Uniform: over 2000 passes, where sample 0 lands is spread evenly over the
 * 20 positions (chi-square with 19 degrees of freedom below 43.8, p =
 * 0.001), and so is which sample comes first. */
TEST(feistel_positions_are_uniform_over_passes) {
  enum { N = 20, PASSES = 2000 };
  double where0[N] = {0}, first[N] = {0};
  for (uint64_t p = 0; p < PASSES; p++) {
    sl__feistel f;
    sl__feistel_init(&f, N, 9, p);
    first[sl__feistel_at(&f, 0)]++;
    for (uint64_t i = 0; i < N; i++)
      if (sl__feistel_at(&f, i) == 0) where0[i]++;
  }
  double c1 = 0, c2 = 0, e = (double)PASSES / N;
  for (int i = 0; i < N; i++) {
    c1 += (where0[i] - e) * (where0[i] - e) / e;
    c2 += (first[i] - e) * (first[i] - e) / e;
  }
  ASSERT_TRUE(c1 < 43.8);
  ASSERT_TRUE(c2 < 43.8);
}

/* A global shuffle of up on `threads` workers (0: none). */
static sl_reader *global_on(sl_reader *up, uint64_t seed, uint32_t threads,
                            int rank, int world, sl_shard_policy policy) {
  sl_global_shuffle_opts o = SL_GLOBAL_SHUFFLE_OPTS_INIT;
  o.seed = seed;
  o.rank = rank;
  o.world = world;
  o.remainder = policy;
  o.threads = threads;
  sl_reader *r = NULL;
  ASSERT_OK(sl_global_shuffle(up, &o, &r));
  return r;
}

static sl_reader *global(sl_reader *up, uint64_t seed, int rank, int world,
                         sl_shard_policy policy) {
  return global_on(up, seed, 0, rank, world, policy);
}

TEST(global_shuffle_visits_every_sample_once_per_pass_in_a_new_order) {
  enum { N = 1000 };
  static int64_t v[N + 1], prev[N];
  sl_reader *r = global(test_range_reader(N), 5, 0, 1, SL_SHARD_PAD);
  uint64_t len;
  ASSERT_OK(sl_reader_length(r, &len));
  ASSERT_EQ(len, N);
  for (int pass = 0; pass < 3; pass++) {
    ASSERT_EQ(drain(r, v, N + 1), N);
    static uint8_t seen[N];
    memset(seen, 0, sizeof seen);
    size_t same = 0, in_order = 0;
    for (int i = 0; i < N; i++) {
      ASSERT_TRUE(v[i] >= 0 && v[i] < N);
      ASSERT_EQ(seen[v[i]], 0);
      seen[v[i]] = 1;
      if (pass) same += v[i] == prev[i];
      in_order += v[i] == i;
    }
    ASSERT_TRUE(in_order < N / 10);
    if (pass) ASSERT_TRUE(same < N / 10);
    memcpy(prev, v, sizeof prev);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  /* The same seed gives the same passes; another seed another. */
  sl_reader *a = global(test_range_reader(N), 5, 0, 1, SL_SHARD_PAD);
  sl_reader *b = global(test_range_reader(N), 6, 0, 1, SL_SHARD_PAD);
  static int64_t va[N], vb[N];
  ASSERT_EQ(drain(a, va, N), N);
  ASSERT_EQ(drain(b, vb, N), N);
  size_t same = 0;
  for (int i = 0; i < N; i++)
    same += va[i] == vb[i];
  ASSERT_TRUE(same < N / 10);
  sl_reader_destroy(a);
  sl_reader_destroy(b);
}

/* Ranks split each pass's permutation: equal counts under pad and drop
 * (pad repeats the first of the permutation), an exact cover under uneven,
 * and together the whole pass. */
TEST(global_shuffle_ranks_split_the_pass_with_equal_counts) {
  enum { N = 103, W = 4 };
  static const sl_shard_policy pol[] = {SL_SHARD_PAD, SL_SHARD_DROP,
                                        SL_SHARD_UNEVEN};
  for (int k = 0; k < 3; k++) {
    int count[N] = {0};
    uint64_t total = 0;
    for (int rank = 0; rank < W; rank++) {
      sl_reader *r = global(test_range_reader(N), 11, rank, W, pol[k]);
      static int64_t v[N];
      size_t n = drain(r, v, N);
      uint64_t len;
      ASSERT_OK(sl_reader_length(r, &len));
      ASSERT_EQ(len, n);
      ASSERT_EQ(n, sl_shard_count(N, rank, W, pol[k]));
      for (size_t i = 0; i < n; i++)
        count[v[i]]++;
      total += n;
      sl_reader_destroy(r);
    }
    int missing = 0, twice = 0;
    for (int i = 0; i < N; i++) {
      missing += count[i] == 0;
      twice += count[i] > 1;
    }
    if (pol[k] == SL_SHARD_PAD) {
      ASSERT_EQ(total, 26 * W);
      ASSERT_EQ(missing, 0);
      ASSERT_EQ(twice, 26 * W - N);
    } else if (pol[k] == SL_SHARD_DROP) {
      ASSERT_EQ(total, 25 * W);
      ASSERT_EQ(missing, N - 25 * W);
      ASSERT_EQ(twice, 0);
    } else {
      ASSERT_EQ(total, N);
      ASSERT_EQ(missing + twice, 0);
    }
  }
}

/* A chain of readers with random access and known lengths is one data set
 * to global_shuffle (a set of files); a chain with a part without is
 * refused naming it. */
TEST(global_shuffle_reads_a_chain_as_one_data_set) {
  uint64_t idx[20];
  for (int i = 0; i < 20; i++)
    idx[i] = 30 + (uint64_t)i;
  sl_reader *parts[2] = {test_range_reader(30), NULL};
  ASSERT_OK(sl_subset(test_range_reader(50), idx, 20, &parts[1]));
  sl_reader *c = NULL;
  ASSERT_OK(sl_chain(parts, 2, &c));
  sl_reader *r = global(c, 3, 0, 1, SL_SHARD_PAD);
  int64_t v[51];
  for (int pass = 0; pass < 2; pass++) {
    ASSERT_EQ(drain(r, v, 51), 50);
    uint8_t seen[50] = {0};
    int in_order = 0;
    for (int i = 0; i < 50; i++) {
      ASSERT_TRUE(v[i] >= 0 && v[i] < 50);
      ASSERT_EQ(seen[v[i]], 0);
      seen[v[i]] = 1;
      in_order += v[i] == i;
    }
    ASSERT_TRUE(in_order < 10);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  sl_reader *m = NULL;
  ASSERT_OK(sl_map(test_range_reader(4), times3, NULL, NULL, NULL, &m));
  sl_reader *both[2] = {test_range_reader(4), m};
  ASSERT_OK(sl_chain(both, 2, &c));
  r = (sl_reader *)1;
  ASSERT_RC(sl_global_shuffle(c, NULL, &r), SL_EUNSUPPORTED);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "its upstream 'chain' has no random access");
}

TEST(global_shuffle_refuses_bad_options_and_upstreams) {
  sl_reader *r = (sl_reader *)1;
  sl_global_shuffle_opts o = SL_GLOBAL_SHUFFLE_OPTS_INIT;
  o.rank = 3;
  o.world = 3;
  ASSERT_RC(sl_global_shuffle(test_range_reader(4), &o, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "global_shuffle: rank 3 is not in [0, 3)");
  o = (sl_global_shuffle_opts)SL_GLOBAL_SHUFFLE_OPTS_INIT;
  o.remainder = (sl_shard_policy)7;
  ASSERT_RC(sl_global_shuffle(test_range_reader(4), &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "remainder 7");
  sl_reader *m = NULL;
  ASSERT_OK(sl_map(test_range_reader(4), times3, NULL, NULL, NULL, &m));
  ASSERT_RC(sl_global_shuffle(m, NULL, &r), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "global_shuffle: its upstream 'map' has "
                                   "no random access");
  sl_reader *f = NULL;
  ASSERT_OK(sl_filter(test_range_reader(4), keep_all, NULL, NULL, &f));
  ASSERT_OK(sl_cache(f, &f));
  ASSERT_RC(sl_global_shuffle(f, NULL, &r), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(),
                  "global_shuffle: the upstream's length must be known");
  /* an empty upstream: an empty pass */
  r = global(test_range_reader(0), 1, 0, 1, SL_SHARD_PAD);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
}

/* --- saving and restoring
 * ------------------------------------------------------ */

typedef enum {
  RS_WEIGHTED,
  RS_WEIGHTED_WITHOUT,
  RS_SUBSET,
  RS_SPLIT,
  RS_WEIGHTED_OVER_CACHE,
  RS_SHUFFLE_OVER_SUBSET,
  RS_WEIGHTED_OVER_SLR,
  RS_GLOBAL,
  RS_GLOBAL_RANK,
  RS_GLOBAL_THREADS,     /* rank 2 of 3, on 3 workers */
  RS_GLOBAL_SLR_THREADS, /* two SLR files as one set, on 2 workers */
} resume_kind;

static sl_reader *build(void *ud) {
  resume_kind kind = (resume_kind)(intptr_t)ud;
  static double w[40];
  for (int i = 0; i < 40; i++)
    w[i] = i % 4 == 1 ? 0 : 1 + i % 5;
  static uint64_t idx[30];
  for (int i = 0; i < 30; i++)
    idx[i] = (uint64_t)(i * 7) % 40;
  sl_reader *r = test_range_reader(40);
  sl_weighted_sample_opts o = SL_WEIGHTED_SAMPLE_OPTS_INIT;
  o.seed = 3;
  switch (kind) {
  case RS_WEIGHTED:
    o.num_samples = 50;
    OK(sl_weighted_sample(r, w, 40, &o, &r));
    return r;
  case RS_WEIGHTED_WITHOUT:
    o.num_samples = 25;
    o.without_replacement = 1;
    OK(sl_weighted_sample(r, w, 40, &o, &r));
    return r;
  case RS_SUBSET:
    OK(sl_subset(r, idx, 30, &r));
    return r;
  case RS_SPLIT: {
    const double f[3] = {0.5, 0.25, 0.25};
    sl_reader *p[3];
    OK(sl_random_split(r, f, 3, 6, p));
    sl_reader_destroy(p[0]);
    sl_reader_destroy(p[2]);
    return p[1];
  }
  case RS_WEIGHTED_OVER_CACHE:
    OK(sl_map(r, times3, NULL, NULL, NULL, &r));
    OK(sl_cache(r, &r));
    o.num_samples = 30;
    OK(sl_weighted_sample(r, w, 40, &o, &r));
    return r;
  case RS_SHUFFLE_OVER_SUBSET:
    OK(sl_subset(r, idx, 30, &r));
    OK(sl_shuffle(r, 8, 1, &r));
    return r;
  case RS_GLOBAL:
  case RS_GLOBAL_RANK:
  case RS_GLOBAL_THREADS: {
    sl_global_shuffle_opts g = SL_GLOBAL_SHUFFLE_OPTS_INIT;
    g.seed = 3;
    g.world = kind == RS_GLOBAL ? 1 : 3;
    g.rank = kind == RS_GLOBAL ? 0 : 2;
    g.threads = kind == RS_GLOBAL_THREADS ? 3 : 0;
    OK(sl_global_shuffle(r, &g, &r));
    return r;
  }
  case RS_GLOBAL_SLR_THREADS: {
    sl_reader_destroy(r);
    const char *a = test_tmppath("samplers", "gt-a.slr"),
               *b = test_tmppath("samplers", "gt-b.slr");
    static bool written;
    if (!written) {
      test_write_ids_slr(a, 0, 25, 6);
      test_write_ids_slr(b, 25, 15, 4);
    }
    written = true;
    sl_reader *p[2];
    OK(sl_slr_reader(a, NULL, 0, UINT64_MAX, &p[0]));
    OK(sl_slr_reader(b, NULL, 0, UINT64_MAX, &p[1]));
    OK(sl_chain(p, 2, &r));
    sl_global_shuffle_opts g = SL_GLOBAL_SHUFFLE_OPTS_INIT;
    g.seed = 4;
    g.world = 1;
    g.threads = 2;
    OK(sl_global_shuffle(r, &g, &r));
    return r;
  }
  case RS_WEIGHTED_OVER_SLR: {
    sl_reader_destroy(r);
    const char *path = test_tmppath("samplers", "resume.slr");
    static bool written;
    if (!written) test_write_ids_slr(path, 0, 40, 6);
    written = true;
    OK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &r));
    o.num_samples = 30;
    o.without_replacement = 1;
    OK(sl_weighted_sample(r, w, 40, &o, &r));
    return r;
  }
  }
  return NULL;
}

static const uint64_t k_cuts[] = {0, 1, 7, 24, 25, 26, 49, 50, 51, 77, 99};

static void check_kind(resume_kind kind) {
  test_resume_check(build, (void *)(intptr_t)kind, 3, k_cuts,
                    sizeof k_cuts / sizeof *k_cuts, 4096);
}

TEST(weighted_resumes_exactly) {
  check_kind(RS_WEIGHTED);
}
TEST(weighted_without_replacement_resumes_exactly) {
  check_kind(RS_WEIGHTED_WITHOUT);
}
TEST(subset_resumes_exactly) {
  check_kind(RS_SUBSET);
}
TEST(a_random_split_resumes_exactly) {
  check_kind(RS_SPLIT);
}
TEST(weighted_over_a_cache_resumes_exactly) {
  check_kind(RS_WEIGHTED_OVER_CACHE);
}
TEST(a_shuffle_over_a_subset_resumes_exactly) {
  check_kind(RS_SHUFFLE_OVER_SUBSET);
}
TEST(weighted_over_slr_resumes_exactly) {
  check_kind(RS_WEIGHTED_OVER_SLR);
}

TEST(global_shuffle_resumes_exactly) {
  check_kind(RS_GLOBAL);
  check_kind(RS_GLOBAL_RANK);
}

TEST(global_shuffle_on_threads_resumes_exactly) {
  check_kind(RS_GLOBAL_THREADS);
  check_kind(RS_GLOBAL_SLR_THREADS);
}

/* Threads change who fetches, not what comes: every pass, rank and
 * upstream (shared fetch: range, SLR files; one at a time: a cache) gives
 * the samples of the caller's-thread shuffle in its order; states move
 * between thread counts. */
TEST(global_shuffle_on_threads_gives_the_same_passes_whatever_the_threads) {
  enum { N = 997 };
  static int64_t want[N + 1], got[N + 1];
  const char *path = test_tmppath("samplers", "gt.slr");
  test_write_ids_slr(path, 0, N, 50);
  static const uint32_t threads[] = {1, 2, 4, SL_THREADS_AUTO};
  for (int up = 0; up < 3; up++)
    for (int rank = 0; rank < 2; rank++) {
      sl_reader *src[5];
      for (int t = 0; t < 5; t++) {
        if (up == 0) {
          src[t] = test_range_reader(N);
        } else if (up == 1) {
          ASSERT_OK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &src[t]));
        } else {
          src[t] = test_range_reader(N);
          ASSERT_OK(sl_cache(src[t], &src[t]));
        }
      }
      sl_reader *ref = global_on(src[0], 9, 0, rank, 2, SL_SHARD_PAD);
      sl_reader *r[4];
      for (int t = 0; t < 4; t++)
        r[t] = global_on(src[t + 1], 9, threads[t], rank, 2, SL_SHARD_PAD);
      for (int pass = 0; pass < 2; pass++) {
        size_t n = drain(ref, want, N + 1);
        ASSERT_EQ(n, (N + 1) / 2);
        for (int t = 0; t < 4; t++) {
          ASSERT_EQ(drain(r[t], got, N + 1), n);
          ASSERT_TRUE(memcmp(want, got, n * sizeof *got) == 0);
          ASSERT_OK(sl_reader_reset(r[t]));
        }
        ASSERT_OK(sl_reader_reset(ref));
      }
      /* a state of the caller's thread restores on 4 workers, and back */
      void *st;
      size_t len;
      st = test_save_after(ref, 100, &len);
      ASSERT_OK(sl_reader_restore(r[2], st, len));
      sl_free(st);
      size_t rest = drain(ref, want, N + 1);
      ASSERT_EQ(drain(r[2], got, N + 1), rest);
      ASSERT_TRUE(memcmp(want, got, rest * sizeof *got) == 0);
      ASSERT_OK(sl_reader_reset(ref));
      ASSERT_OK(sl_reader_reset(r[2]));
      st = test_save_after(r[2], 37, &len);
      ASSERT_OK(sl_reader_restore(ref, st, len));
      sl_free(st);
      rest = drain(ref, want, N + 1);
      ASSERT_EQ(drain(r[2], got, N + 1), rest);
      ASSERT_TRUE(memcmp(want, got, rest * sizeof *got) == 0);
      sl_reader_destroy(ref);
      for (int t = 0; t < 4; t++)
        sl_reader_destroy(r[t]);
    }
}

/* Closing mid-pass with results in flight, a reset mid-pass, and the
 * statistics of the workers. */
TEST(global_shuffle_on_threads_closes_and_resets_mid_pass) {
  for (int k = 0; k < 20; k++) {
    sl_reader *r =
        global_on(test_range_reader(5000), (uint64_t)k, 3, 0, 1, SL_SHARD_PAD);
    sl_sample *s;
    for (int i = 0; i < k * 7; i++) {
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    if (k % 2) {
      ASSERT_OK(sl_reader_reset(r));
      static int64_t v[5001];
      ASSERT_EQ(drain(r, v, 5001), 5000);
    }
    if (k == 3) {
      sl_stage_stats st[4];
      size_t ns = 0;
      ASSERT_OK(sl_reader_stats(r, st, 4, &ns));
      ASSERT_TRUE(ns >= 1);
      ASSERT_STREQ(st[0].name, "global_shuffle");
      ASSERT_EQ(st[0].threads, 3);
    }
    sl_reader_destroy(r); /* the workers may hold results: released */
  }
}

/* A fetch that fails on a worker ends the pass with its message at its
 * place; the next pass starts again; too many threads are refused. */
TEST(global_shuffle_on_threads_reports_a_bad_record_and_bad_counts) {
  const char *path = test_tmppath("samplers", "gt-bad.slr");
  test_write_ids_slr(path, 0, 200, 20);
  size_t n;
  unsigned char *b = (unsigned char *)test_read_file(path, &n);
  b[32 + SLR_CHUNK_HEADER_SIZE + 8] ^= 0x40; /* chunk 0's payload */
  test_write_file(path, b, n);
  free(b);
  sl_reader *up;
  ASSERT_OK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &up));
  sl_reader *r = global_on(up, 1, 2, 0, 1, SL_SHARD_PAD);
  for (int pass = 0; pass < 2; pass++) {
    sl_sample *s;
    int rc, got = 0;
    while ((rc = sl_reader_next(r, &s)) == SL_OK) {
      ASSERT_TRUE(test_sample_i64(s, 0) >= 20); /* never chunk 0's */
      sl_sample_release(s);
      got++;
    }
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(), "global_shuffle: sample ");
    ASSERT_CONTAINS(sl_last_error(), "gt-bad.slr: chunk 0");
    ASSERT_TRUE(got < 200);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  sl_global_shuffle_opts o = SL_GLOBAL_SHUFFLE_OPTS_INIT;
  o.threads = 1u << 20;
  ASSERT_RC(sl_global_shuffle(test_range_reader(4), &o, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "global_shuffle");
}

TEST(a_state_of_other_weights_or_another_split_is_refused) {
  const double w1[4] = {1, 2, 3, 4}, w2[4] = {1, 2, 3, 5};
  sl_reader *a = weighted(test_range_reader(4), w1, 4, 5, 0, 0);
  sl_reader *b = weighted(test_range_reader(4), w2, 4, 5, 0, 0);
  sl_sample *s;
  ASSERT_OK(sl_reader_next(a, &s));
  sl_sample_release(s);
  void *st = NULL;
  size_t len = 0;
  ASSERT_OK(sl_reader_save(a, &st, &len));
  ASSERT_RC(sl_reader_restore(b, st, len), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "weighted_sample");
  ASSERT_OK(sl_reader_restore(a, st, len));
  sl_free(st);
  sl_reader_destroy(a);
  sl_reader_destroy(b);
  /* Part 0 and part 1 of one split differ; so do other sources. */
  const double f[2] = {0.5, 0.5};
  sl_reader *p[2], *q[2];
  ASSERT_OK(sl_random_split(test_range_reader(10), f, 2, 0, p));
  ASSERT_OK(sl_random_split(test_range_reader(12), f, 2, 0, q));
  ASSERT_OK(sl_reader_save(p[0], &st, &len));
  ASSERT_NE(sl_reader_restore(p[1], st, len), SL_OK);
  ASSERT_CONTAINS(sl_last_error(), "random_split");
  ASSERT_NE(sl_reader_restore(q[0], st, len), SL_OK);
  ASSERT_OK(sl_reader_restore(p[0], st, len));
  sl_free(st);
  for (int i = 0; i < 2; i++) {
    sl_reader_destroy(p[i]);
    sl_reader_destroy(q[i]);
  }
}

TEST(out_of_memory_anywhere_in_construction_leaks_nothing) {
  const double w[6] = {1, 2, 3, 4, 5, 6};
  const uint64_t idx[3] = {5, 1, 2};
  const double f[2] = {0.5, 0.5};
  for (int which = 0; which < 3; which++) {
    for (int n = 0; n < 64; n++) {
      sl_reader *up = test_range_reader(6), *r = NULL, *p[2] = {NULL, NULL};
      sl__alloc_fail_after(n);
      int rc;
      if (which == 0) {
        sl_weighted_sample_opts o = SL_WEIGHTED_SAMPLE_OPTS_INIT;
        o.without_replacement = 1;
        rc = sl_weighted_sample(up, w, 6, &o, &r);
      } else if (which == 1) {
        rc = sl_subset(up, idx, 3, &r);
      } else {
        rc = sl_random_split(up, f, 2, 0, p);
      }
      sl_sample *s = NULL;
      int rn = rc == SL_OK ? sl_reader_next(which == 2 ? p[0] : r, &s) : 0;
      sl__alloc_fail_after(-1);
      if (rc != SL_OK) {
        ASSERT_NULL(r);
        ASSERT_NULL(p[0]);
        ASSERT_NULL(p[1]);
        ASSERT_TRUE(rc == SL_ENOMEM);
      }
      if (rn == SL_OK) sl_sample_release(s);
      sl_reader_destroy(r);
      sl_reader_destroy(p[0]);
      sl_reader_destroy(p[1]);
      if (rc == SL_OK && rn == SL_OK) break;
    }
  }
  ASSERT_TRUE(!test_leaked());
}
