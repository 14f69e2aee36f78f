/*
 * test_shard.c - sl_shard: sample i to rank i % world, with the remainder
 * policies of PyTorch's DistributedSampler (uneven, drop, pad).
 */
#include "test.h"
#include "test_util.h"

#include <stdint.h>

#define OK(x) ASSERT_OK(x)

static sl_reader *shard_of(sl_reader *up, int world, int rank,
                           sl_shard_policy policy) {
  sl_shard_opts o = SL_SHARD_OPTS_INIT;
  o.remainder = policy;
  sl_reader *r;
  OK(sl_shard(up, world, rank, &o, &r));
  return r;
}

TEST(uneven_is_i_mod_world) {
  /* tf.data: range(10).shard(3, r): r, r+3, ... */
  sl_reader *r = shard_of(test_range_reader(10), 3, 0, SL_SHARD_UNEVEN);
  EXPECT(r, SL_EOF, 0, 3, 6, 9);
  sl_reader_destroy(r);
  r = shard_of(test_range_reader(10), 3, 1, SL_SHARD_UNEVEN);
  EXPECT(r, SL_EOF, 1, 4, 7);
  sl_reader_destroy(r);
  r = shard_of(test_range_reader(10), 3, 2, SL_SHARD_UNEVEN);
  EXPECT(r, SL_EOF, 2, 5, 8);
  sl_reader_destroy(r);
  /* NULL options mean uneven. */
  OK(sl_shard(test_range_reader(10), 3, 0, NULL, &r));
  EXPECT(r, SL_EOF, 0, 3, 6, 9);
  sl_reader_destroy(r);
}

TEST(drop_keeps_complete_groups) {
  /* 10 over 3: every rank gets floor(10/3) = 3; sample 9 (an incomplete
   * group) goes to nobody. */
  sl_reader *r = shard_of(test_range_reader(10), 3, 0, SL_SHARD_DROP);
  EXPECT(r, SL_EOF, 0, 3, 6);
  sl_reader_destroy(r);
  r = shard_of(test_range_reader(10), 3, 1, SL_SHARD_DROP);
  EXPECT(r, SL_EOF, 1, 4, 7);
  sl_reader_destroy(r);
  r = shard_of(test_range_reader(10), 3, 2, SL_SHARD_DROP);
  EXPECT(r, SL_EOF, 2, 5, 8);
  sl_reader_destroy(r);
}

TEST(pad_wraps_to_the_first_samples) {
  /* 10 over 4: ceil = 3 each; the pass extended to 12 is 0..9, 0, 1, and
   * rank r takes positions r, r+4, r+8 (DistributedSampler's
   * indices[rank::world] after padding with indices[:2]). */
  sl_reader *r = shard_of(test_range_reader(10), 4, 0, SL_SHARD_PAD);
  EXPECT(r, SL_EOF, 0, 4, 8);
  sl_reader_destroy(r);
  r = shard_of(test_range_reader(10), 4, 1, SL_SHARD_PAD);
  EXPECT(r, SL_EOF, 1, 5, 9);
  sl_reader_destroy(r);
  r = shard_of(test_range_reader(10), 4, 2, SL_SHARD_PAD);
  EXPECT(r, SL_EOF, 2, 6, 0);
  sl_reader_destroy(r);
  r = shard_of(test_range_reader(10), 4, 3, SL_SHARD_PAD);
  EXPECT(r, SL_EOF, 3, 7, 1);
  sl_reader_destroy(r);
  /* Fewer samples than ranks: the extension repeats the pass (p mod n). */
  r = shard_of(test_range_reader(2), 5, 4, SL_SHARD_PAD);
  EXPECT(r, SL_EOF, 0);
  sl_reader_destroy(r);
  r = shard_of(test_range_reader(2), 5, 3, SL_SHARD_PAD);
  EXPECT(r, SL_EOF, 1);
  sl_reader_destroy(r);
}

/* Over many (n, world): each rank's samples and count follow the
 * definitions, and the union over ranks is the pass (uneven: exactly; drop:
 * the first floor(n/w)*w, no duplicates; pad: the pass plus the wrapped
 * first samples).  Also checks sl_reader_length against the pass. */
TEST(union_over_ranks) {
  static const sl_shard_policy pols[] = {SL_SHARD_UNEVEN, SL_SHARD_DROP,
                                         SL_SHARD_PAD};
  for (int p = 0; p < 3; p++) {
    for (int64_t n = 0; n <= 13; n++) {
      for (int w = 1; w <= 5; w++) {
        int seen[32] = {0};
        uint64_t total = 0;
        uint64_t q = (uint64_t)n / (uint64_t)w, rem = (uint64_t)n % (uint64_t)w;
        for (int rank = 0; rank < w; rank++) {
          sl_reader *r = shard_of(test_range_reader(n), w, rank, pols[p]);
          uint64_t len = test_length_checked(r);
          uint64_t want = pols[p] == SL_SHARD_DROP ? q
                          : pols[p] == SL_SHARD_PAD
                              ? q + (rem != 0)
                              : q + ((uint64_t)rank < rem);
          ASSERT_EQ(len, want);
          int64_t v[32];
          size_t got;
          ASSERT_RC(test_drain_i64(r, v, 32, &got), SL_EOF);
          ASSERT_EQ(got, want);
          for (size_t j = 0; j < got; j++) {
            /* Position rank + j*w of the (extended) pass. */
            int64_t pos = rank + (int64_t)j * w;
            ASSERT_EQ(v[j], n ? pos % n : -1);
            seen[v[j]]++;
          }
          total += got;
          sl_reader_destroy(r);
        }
        for (int64_t i = 0; i < n; i++) {
          int want_seen = 1;
          if (pols[p] == SL_SHARD_DROP && (uint64_t)i >= q * (uint64_t)w)
            want_seen = 0;
          if (pols[p] == SL_SHARD_PAD && rem) {
            /* The extension has E = ceil(n/w)*w positions; position p is
             * sample p mod n. */
            uint64_t E = (q + 1) * (uint64_t)w;
            want_seen =
                (int)(E / (uint64_t)n) + ((uint64_t)i < E % (uint64_t)n);
          }
          ASSERT_EQ(seen[i], want_seen);
        }
        if (pols[p] == SL_SHARD_UNEVEN) ASSERT_EQ(total, (uint64_t)n);
        if (pols[p] == SL_SHARD_DROP) ASSERT_EQ(total, q * (uint64_t)w);
        if (pols[p] == SL_SHARD_PAD)
          ASSERT_EQ(total, (q + (rem != 0)) * (uint64_t)w);
      }
    }
  }
}

static int keep_all(void *ud, const sl_sample *s) {
  (void)ud;
  (void)s;
  return 1;
}

TEST(bad_arguments) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_shard(test_range_reader(4), 2, 2, NULL, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "shard: rank 2 is not in [0, world 2)");
  ASSERT_RC(sl_shard(test_range_reader(4), 2, -1, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "shard: rank -1");
  sl_shard_opts o = SL_SHARD_OPTS_INIT;
  o.remainder = (sl_shard_policy)7;
  ASSERT_RC(sl_shard(test_range_reader(4), 2, 0, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "shard: remainder 7");
  o = (sl_shard_opts)SL_SHARD_OPTS_INIT;
  o.size = 4;
  ASSERT_RC(sl_shard(test_range_reader(4), 2, 0, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "SL_SHARD_OPTS_INIT");
  ASSERT_RC(sl_shard(NULL, 2, 0, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "shard: NULL upstream");
  ASSERT_RC(sl_shard(test_range_reader(4), 2, 0, NULL, NULL), SL_EINVAL);
  /* pad needs a length: a filter has none. */
  sl_reader *f;
  OK(sl_filter(test_range_reader(4), keep_all, NULL, NULL, &f));
  o = (sl_shard_opts)SL_SHARD_OPTS_INIT;
  o.remainder = SL_SHARD_PAD;
  ASSERT_RC(sl_shard(f, 2, 0, &o, &r), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "remainder \"pad\" needs the length");
  /* uneven and drop do not. */
  OK(sl_filter(test_range_reader(5), keep_all, NULL, NULL, &f));
  o.remainder = SL_SHARD_DROP;
  OK(sl_shard(f, 2, 1, &o, &r));
  EXPECT(r, SL_EOF, 1, 3);
  uint64_t n;
  ASSERT_RC(sl_reader_length(r, &n), SL_EUNSUPPORTED);
  sl_reader_destroy(r);
}

TEST(world_must_be_positive) {
  /* World and rank from the launcher's environment are sl_shard_env's
   * (p:shard() calls it); sl_shard itself takes them as given. */
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "3", 1);
  int rank, world;
  OK(sl_shard_env(&rank, &world));
  sl_reader *r;
  OK(sl_shard(test_range_reader(7), world, rank, NULL, &r));
  EXPECT(r, SL_EOF, 1, 4);
  sl_reader_destroy(r);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  ASSERT_RC(sl_shard(test_range_reader(7), 0, 0, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "shard: world 0 must be >= 1");
}

TEST(empty_and_reset_mid_pass) {
  sl_reader *r = shard_of(test_range_reader(0), 3, 1, SL_SHARD_PAD);
  EXPECT_NONE(r, SL_EOF);
  sl_reader_destroy(r);
  r = shard_of(test_range_reader(10), 4, 3, SL_SHARD_PAD);
  sl_sample *s;
  OK(sl_reader_next(r, &s));
  ASSERT_EQ(test_sample_i64(s, 0), 3);
  sl_sample_release(s);
  OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 3, 7, 1);
  OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 3, 7, 1);
  sl_reader_destroy(r);
  r = shard_of(test_range_reader(10), 3, 0, SL_SHARD_DROP);
  OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 3, 6);
  sl_reader_destroy(r);
}

typedef struct build_ud {
  int world, rank;
  sl_shard_policy policy;
  int64_t n;
  int shuffle;
} build_ud;

static sl_reader *build(void *ud) {
  build_ud *u = ud;
  sl_reader *r = test_range_reader(u->n);
  if (u->shuffle) OK(sl_shuffle(r, 8, 3, &r));
  return shard_of(r, u->world, u->rank, u->policy);
}

TEST(save_restore) {
  static const uint64_t cuts[] = {0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 13};
  static const sl_shard_policy pols[] = {SL_SHARD_UNEVEN, SL_SHARD_DROP,
                                         SL_SHARD_PAD};
  for (int p = 0; p < 3; p++)
    for (int rank = 0; rank < 4; rank++)
      for (int sh = 0; sh < 2; sh++) {
        build_ud u = {4, rank, pols[p], 14, sh};
        test_resume_check(build, &u, 3, cuts, sizeof cuts / sizeof *cuts, 0);
      }
  /* n < world: the wrapped sample is the rank's only one. */
  build_ud u = {5, 4, SL_SHARD_PAD, 2, 0};
  test_resume_check(build, &u, 3, cuts, 4, 0);
}

TEST(identity_refuses_another_rank) {
  sl_reader *a = shard_of(test_range_reader(10), 2, 0, SL_SHARD_UNEVEN);
  sl_reader *b = shard_of(test_range_reader(10), 2, 1, SL_SHARD_UNEVEN);
  void *st;
  size_t len;
  OK(sl_reader_save(a, &st, &len));
  int rc = sl_reader_restore(b, st, len);
  ASSERT_TRUE(rc < 0);
  ASSERT_CONTAINS(sl_last_error(), "rank=0");
  sl_free(st);
  sl_reader_destroy(a);
  sl_reader_destroy(b);
}
