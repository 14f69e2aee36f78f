/* test_shuffle.c - the sliding-window shuffle: every pass is a permutation of
 * its input, the order is a pure function of (seed, pass), the window bounds
 * how far a sample can move, and buffered samples are released on reset. */
#include "test.h"
#include "test_util.h"

#define MAXN 4096

/* A shuffle over range(n); fails the test when construction fails. */
static sl_reader *shuffled_range(int64_t n, size_t buffer, uint64_t seed) {
  sl_reader *src, *r;
  ASSERT_OK(sl_reader_range(n, &src));
  ASSERT_OK(sl_shuffle(src, buffer, seed, &r));
  return r;
}

/* Fails unless v[0..n) holds each of 0..n-1 exactly once. */
static void assert_permutation(const int64_t *v, size_t n) {
  static unsigned char seen[MAXN];
  memset(seen, 0, sizeof seen);
  ASSERT_LE(n, MAXN);
  for (size_t i = 0; i < n; i++) {
    ASSERT_GE(v[i], 0);
    ASSERT_TRUE(v[i] < (int64_t)n);
    ASSERT_EQ(seen[v[i]], 0);
    seen[v[i]] = 1;
  }
}

static int is_identity(const int64_t *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (v[i] != (int64_t)i) return 0;
  return 1;
}

TEST(pass_is_a_permutation_and_not_the_input_order) {
  sl_reader *r = shuffled_range(1000, 64, 1);
  ASSERT_STREQ(sl_reader_name(r), "shuffle");
  char d[64];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(r), d, sizeof d),
               "{i: i64[]}");
  static int64_t v[MAXN];
  size_t n;
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_EOF);
  ASSERT_EQ(n, 1000);
  assert_permutation(v, n);
  ASSERT_TRUE(!is_identity(v, n));
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF); /* EOF repeats */
  sl_reader_destroy(r);
}

TEST(same_seed_gives_same_order_across_readers) {
  static int64_t a[MAXN], b[MAXN], c[MAXN];
  size_t na, nb, nc;
  sl_reader *r1 = shuffled_range(500, 32, 42);
  sl_reader *r2 = shuffled_range(500, 32, 42);
  sl_reader *r3 = shuffled_range(500, 32, 43);
  ASSERT_RC(test_drain_i64(r1, a, MAXN, &na), SL_EOF);
  ASSERT_RC(test_drain_i64(r2, b, MAXN, &nb), SL_EOF);
  ASSERT_RC(test_drain_i64(r3, c, MAXN, &nc), SL_EOF);
  ASSERT_EQ(na, 500);
  ASSERT_EQ(nb, 500);
  ASSERT_EQ(nc, 500);
  ASSERT_TRUE(memcmp(a, b, na * sizeof *a) == 0);
  ASSERT_TRUE(memcmp(a, c, na * sizeof *a) != 0);
  assert_permutation(c, nc);
  sl_reader_destroy(r1);
  sl_reader_destroy(r2);
  sl_reader_destroy(r3);
}

TEST(each_pass_has_its_own_reproducible_order) {
  static int64_t p0[MAXN], p1[MAXN], q0[MAXN], q1[MAXN];
  size_t n0, n1, m0, m1;
  sl_reader *r = shuffled_range(300, 300, 7);
  ASSERT_RC(test_drain_i64(r, p0, MAXN, &n0), SL_EOF);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_RC(test_drain_i64(r, p1, MAXN, &n1), SL_EOF);
  ASSERT_EQ(n0, 300);
  ASSERT_EQ(n1, 300);
  assert_permutation(p0, n0);
  assert_permutation(p1, n1);
  ASSERT_TRUE(memcmp(p0, p1, n0 * sizeof *p0) != 0);
  /* A second reader with the same seed walks through the same passes. */
  sl_reader *q = shuffled_range(300, 300, 7);
  ASSERT_RC(test_drain_i64(q, q0, MAXN, &m0), SL_EOF);
  ASSERT_OK(sl_reader_reset(q));
  ASSERT_RC(test_drain_i64(q, q1, MAXN, &m1), SL_EOF);
  ASSERT_TRUE(memcmp(p0, q0, n0 * sizeof *p0) == 0);
  ASSERT_TRUE(memcmp(p1, q1, n1 * sizeof *p1) == 0);
  sl_reader_destroy(r);
  sl_reader_destroy(q);
}

TEST(reset_mid_pass_starts_the_next_seeded_pass) {
  static int64_t ref0[MAXN], ref1[MAXN], v[MAXN];
  size_t n0, n1, n;
  sl_reader *ref = shuffled_range(200, 16, 99);
  ASSERT_RC(test_drain_i64(ref, ref0, MAXN, &n0), SL_EOF);
  ASSERT_OK(sl_reader_reset(ref));
  ASSERT_RC(test_drain_i64(ref, ref1, MAXN, &n1), SL_EOF);

  sl_reader *r = shuffled_range(200, 16, 99);
  for (int i = 0; i < 5; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(test_sample_i64(s, 0), ref0[i]);
    sl_sample_release(s);
  }
  /* The pass number counts resets, not completed passes. */
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_EOF);
  ASSERT_EQ(n, 200);
  assert_permutation(v, n);
  ASSERT_TRUE(memcmp(v, ref1, n * sizeof *v) == 0);
  sl_reader_destroy(ref);
  sl_reader_destroy(r);
}

TEST(buffer_larger_than_data) {
  static int64_t v[MAXN];
  size_t n;
  sl_reader *r = shuffled_range(10, 1000, 3);
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_EOF);
  ASSERT_EQ(n, 10);
  assert_permutation(v, n);
  sl_reader_destroy(r);
  /* The window grows with the data, so an absurd bound costs nothing. */
  r = shuffled_range(10, SIZE_MAX, 3);
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_EOF);
  ASSERT_EQ(n, 10);
  assert_permutation(v, n);
  sl_reader_destroy(r);
}

TEST(buffer_of_one_keeps_the_input_order) {
  static int64_t v[MAXN];
  size_t n;
  sl_reader *r = shuffled_range(50, 1, 12345);
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_EOF);
  ASSERT_EQ(n, 50);
  ASSERT_TRUE(is_identity(v, n));
  sl_reader_destroy(r);
}

TEST(window_bounds_how_early_a_sample_can_leave) {
  /* When output k is produced, only inputs 0..k+B-1 have been read, so a
   * sliding window of B can never emit a later one. */
  static int64_t v[MAXN];
  size_t n;
  const size_t B = 10;
  sl_reader *r = shuffled_range(1000, B, 5);
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_EOF);
  ASSERT_EQ(n, 1000);
  for (size_t k = 0; k < n; k++)
    ASSERT_TRUE(v[k] < (int64_t)(k + B));
  assert_permutation(v, n);
  sl_reader_destroy(r);
}

TEST(first_pick_is_uniform_over_the_window) {
  /* Over many seeds the first output of a window of 4 over range(4) is each
   * value about a quarter of the time; a biased slot pick fails this. */
  int counts[4] = {0};
  const int trials = 4000;
  for (int t = 0; t < trials; t++) {
    sl_reader *r = shuffled_range(4, 4, (uint64_t)t);
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    counts[test_sample_i64(s, 0)]++;
    sl_sample_release(s);
    sl_reader_destroy(r);
  }
  for (int i = 0; i < 4; i++) {
    ASSERT_GE(counts[i], 850);
    ASSERT_LE(counts[i], 1150);
  }
}

TEST(empty_upstream_ends_at_once) {
  sl_reader *r = shuffled_range(0, 8, 1);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(sl_reader_has_next(r), 0);
  sl_reader_destroy(r);
}

TEST(has_next_keeps_the_picked_sample) {
  static int64_t a[MAXN];
  size_t na;
  sl_reader *ref = shuffled_range(20, 8, 11);
  ASSERT_RC(test_drain_i64(ref, a, MAXN, &na), SL_EOF);
  sl_reader *r = shuffled_range(20, 8, 11);
  for (size_t i = 0; i < na; i++) {
    ASSERT_EQ(sl_reader_has_next(r), 1);
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(test_sample_i64(s, 0), a[i]);
    sl_sample_release(s);
  }
  ASSERT_EQ(sl_reader_has_next(r), 0);
  sl_reader_destroy(ref);
  sl_reader_destroy(r);
}

TEST(reset_releases_the_buffered_samples) {
  sl_reader *src;
  ASSERT_OK(sl_reader_range(10, &src));
  sl_sample *items[10];
  for (int i = 0; i < 10; i++)
    ASSERT_OK(sl_reader_next(src, &items[i]));
  sl_reader_destroy(src);
  sl_reader *arr, *r;
  ASSERT_OK(sl_reader_from_array(items, 10, NULL, &arr));
  ASSERT_OK(sl_shuffle(arr, 10, 1, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  int held = 0;
  for (int i = 0; i < 10; i++)
    held += sl_sample_refcount(items[i]) == 3;
  ASSERT_EQ(held, 9); /* ours, the array's and the window's */
  ASSERT_OK(sl_reader_reset(r));
  for (int i = 0; i < 10; i++)
    ASSERT_EQ(sl_sample_refcount(items[i]), 2);
  sl_reader_destroy(r);
  for (int i = 0; i < 10; i++) {
    ASSERT_EQ(sl_sample_refcount(items[i]), 1);
    sl_sample_release(items[i]);
  }
}

TEST(invalid_arguments_are_einval_and_take_upstream) {
  sl_reader *src, *r = (sl_reader *)1;
  ASSERT_OK(sl_reader_range(3, &src));
  ASSERT_RC(sl_shuffle(src, 0, 1, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shuffle: buffer_size must be >= 1");
  ASSERT_NULL(r);
  ASSERT_RC(sl_shuffle(NULL, 4, 1, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "shuffle: NULL upstream");
  ASSERT_OK(sl_reader_range(3, &src));
  ASSERT_RC(sl_shuffle(src, 4, 1, NULL), SL_EINVAL); /* src destroyed */
  ASSERT_CONTAINS(sl_last_error(), "shuffle");
}

long sl__alloc_fail_after(long n);

/* Out of memory while the window fills: the samples the shuffle holds are
 * what took the memory, so the error names the shuffle (and its buffer),
 * not only the stage whose allocation happened to fail (issue 13). */
TEST(out_of_memory_while_filling_names_the_shuffle) {
  int hits = 0;
  for (long k = 0; k < 400; k += 7) {
    sl_reader *r = shuffled_range(1000, 500, 3);
    sl_sample *s = NULL;
    sl__alloc_fail_after(k);
    int rc = sl_reader_next(r, &s);
    sl__alloc_fail_after(-1);
    if (rc == SL_OK) {
      sl_sample_release(s);
    } else {
      ASSERT_RC(rc, SL_ENOMEM);
      ASSERT_CONTAINS(sl_last_error(), "shuffle: ");
      ASSERT_CONTAINS(sl_last_error(), "buffer_size 500");
      hits++;
    }
    sl_reader_destroy(r);
  }
  ASSERT_GE(hits, 10);
}

/* The order the protocol defines, computed here with plain draws: the stage
 * draws each slot one call early (to prefetch the sample), and that must
 * not change a single position, wherever upstream ends. */
#include "core/rng.h"
static void reference_order(size_t n, size_t buffer, uint64_t seed,
                            uint64_t pass, int64_t *out) {
  static int64_t win[MAXN];
  uint64_t p = pass, x = seed ^ sl__splitmix64(&p), rng[4];
  for (int i = 0; i < 4; i++)
    rng[i] = sl__splitmix64(&x);
  size_t count = 0, next = 0, k = 0;
  for (;;) {
    while (next < n && count < buffer)
      win[count++] = (int64_t)next++;
    if (count == 0) break;
    size_t j = (size_t)sl__rng_bounded(rng, count);
    out[k++] = win[j];
    win[j] = win[--count];
  }
}

TEST(order_is_the_plain_draws_order_for_every_window_and_length) {
  static int64_t want[MAXN], got[MAXN];
  const size_t ns[] = {0, 1, 2, 7, 100, 1000, 4000};
  const size_t bufs[] = {1, 2, 3, 64, 999, 1000, 1001, 5000};
  for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
    for (size_t b = 0; b < sizeof bufs / sizeof *bufs; b++) {
      sl_reader *r = shuffled_range((int64_t)ns[a], bufs[b], 42);
      for (uint64_t pass = 0; pass < 3; pass++) {
        if (pass) ASSERT_OK(sl_reader_reset(r));
        size_t n;
        ASSERT_RC(test_drain_i64(r, got, MAXN, &n), SL_EOF);
        ASSERT_EQ(n, ns[a]);
        reference_order(ns[a], bufs[b], 42, pass, want);
        for (size_t i = 0; i < n; i++)
          ASSERT_EQ(got[i], want[i]);
      }
      sl_reader_destroy(r);
    }
  }
}
