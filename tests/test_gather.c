/*
 * test_gather.c - readers/gather.h, the shape batch, padded_batch and
 * window share: how many outputs a pass has (the partial-output rule with
 * and without drop), and the pull of batch after batch agreeing with it;
 * batch's deferred rows through its stage table's defer and finish.
 */
#include "stages/gather.h"
#include "stages/stage.h"
#include "test.h"
#include "test_util.h"

TEST(count_rules) {
  static const struct {
    uint64_t total, size, stride;
    int drop;
    uint64_t want;
  } cases[] = {
      /* batches of 3: a short last one counts unless dropped */
      {10, 3, 3, 0, 4},
      {10, 3, 3, 1, 3},
      {9, 3, 3, 0, 3},
      {9, 3, 3, 1, 3},
      {2, 3, 3, 0, 1},
      {2, 3, 3, 1, 0},
      {0, 3, 3, 0, 0},
      {0, 3, 3, 1, 0},
      {UINT64_MAX, 1, 1, 0, UINT64_MAX},
      {UINT64_MAX, 2, 2, 0, UINT64_MAX / 2 + 1},
      {UINT64_MAX, 2, 2, 1, UINT64_MAX / 2},
      /* windows of 4 every 2 over 10 values: starts 0, 2, 4, 6, 8; whole
       * ones 0..6 */
      {10, 4, 2, 0, 5},
      {10, 4, 2, 1, 4},
      {3, 4, 2, 1, 0},
      /* a stride above the size: values between windows are skipped */
      {10, 2, 5, 0, 2},
      {11, 2, 5, 0, 3},
      {11, 2, 5, 1, 2},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    ASSERT_EQ(sl__gather_count(cases[c].total, cases[c].size, cases[c].stride,
                               cases[c].drop),
              cases[c].want);
}

typedef struct seen {
  sl__gather g; /* first, as in the stages */
  size_t calls;
} seen;

/* Sample j of the batch being gathered holds its upstream number. */
static int check_order(void *st, size_t j) {
  seen *s = st;
  int64_t v = *(const int64_t *)sl_sample_at_const(s->g.held[j], 0)->data;
  ASSERT_EQ(v, (int64_t)(s->g.no * s->g.n + j));
  s->calls++;
  return SL_OK;
}

TEST(pull_agrees_with_count) {
  for (int total = 0; total <= 10; total++)
    for (size_t n = 1; n <= 4; n++)
      for (int drop = 0; drop <= 1; drop++) {
        seen s = {0};
        ASSERT_TRUE(sl__gather_init(&s.g, test_range_reader(total), n, drop));
        uint64_t len = 0;
        for (int pass = 0; pass < 2; pass++) {
          int rc;
          while ((rc = sl__gather_pull(&s.g, check_order, &s)) == SL_OK) {
            uint64_t left = (uint64_t)total - s.g.no * n;
            ASSERT_EQ(s.g.nheld, left < n ? left : n);
            sl__gather_release(&s.g);
            s.g.no++;
          }
          ASSERT_EQ(rc, SL_EOF);
          ASSERT_EQ(s.g.nheld, 0);
          ASSERT_EQ(s.g.no, sl__gather_count((uint64_t)total, n, n, drop));
          ASSERT_EQ(s.calls, (size_t)total); /* each checked once */
          ASSERT_OK(sl__gather_reset(&s));
          ASSERT_EQ(s.g.no, 0);
          s.calls = 0;
        }
        /* the stages' length: padded_batch's, over the same upstream */
        sl_padded_batch_opts o = SL_PADDED_BATCH_OPTS_INIT;
        o.drop_remainder = drop;
        sl_reader *b = NULL;
        ASSERT_OK(sl_padded_batch(test_range_reader(total), n, &o, &b));
        ASSERT_OK(sl_reader_length(b, &len));
        ASSERT_EQ(len, sl__gather_count((uint64_t)total, n, n, drop));
        sl_reader_destroy(b);
        sl__gather_fini(&s.g);
      }
}

/* A check's error ends the pull with the held samples released. */
static int fail_second(void *st, size_t j) {
  return j == 1 ? sl_set_error(SL_ESHAPE, "second") : SL_OK;
}

TEST(pull_error_releases) {
  seen s = {0};
  ASSERT_TRUE(sl__gather_init(&s.g, test_range_reader(5), 3, 0));
  ASSERT_RC(sl__gather_pull(&s.g, fail_second, &s), SL_ESHAPE);
  ASSERT_EQ(s.g.nheld, 0);
  sl__gather_fini(&s.g);
}

/* Deferred, a batch leaves with its rows still to copy; finish copies
 * them.  Stages without a defer entry answer NULL. */
TEST(batch_defers_through_its_stage_table) {
  sl_reader *b = NULL, *p = NULL;
  ASSERT_OK(sl_batch(test_range_reader(5), 2, NULL, &b));
  void *h = sl__reader_defer(b, 2);
  ASSERT_NOT_NULL(h);
  for (int64_t first = 0; first < 5; first += 2) {
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(b, &s));
    sl__reader_finish(b, h, s);
    sl__reader_finish(b, h, s); /* once finished, nothing more to do */
    const int64_t *v = sl_sample_at_const(s, 0)->data;
    for (int64_t j = 0; j < (first == 4 ? 1 : 2); j++)
      ASSERT_EQ(v[j], first + j);
    sl_sample_release(s);
  }
  sl_reader_destroy(b);
  ASSERT_OK(sl_padded_batch(test_range_reader(5), 2, NULL, &p));
  ASSERT_NULL(sl__reader_defer(p, 2));
  sl_reader_destroy(p);
}
