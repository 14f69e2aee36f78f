/* test_engine_stage.c - readers/engine_stage.h, the reader side of a stage
 * run by the engine: lazy start, length (1:1 or not, with the stage's
 * reason), the pass hooks (new_pass with the restored start, free once),
 * skipped items counted and capped with the stage's words, and the resume
 * contract of a stage that drops items. */
#include "test.h"
#include "test_util.h"

#include "stages/engine_stage.h"

#include <stdatomic.h>

enum { PASS_ALL, DROP_THIRDS, SKIP_ODD };

typedef struct tstage {
  sl__engine_stage run; /* first */
  int mode;
  atomic_int inits;
  int new_passes;
  uint64_t last_start;
  int *freed;
} tstage;

static int t_pull(void *ud, sl_sample **out) {
  return sl_reader_next(((tstage *)ud)->run.up, out);
}

static int t_init(void *ud, int worker, void **wctx) {
  atomic_fetch_add(&((tstage *)ud)->inits, 1);
  *wctx = NULL;
  return SL_OK;
}

static int t_process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                     sl_sample **out) {
  tstage *t = ud;
  int64_t v = test_sample_i64(in, 0);
  if (sl__engine_stage_done(&t->run, seq) ||
      (t->mode == DROP_THIRDS && v % 3 == 0)) {
    sl_sample_release(in);
    return SL__ENGINE_DROP;
  }
  if (t->mode == SKIP_ODD && v % 2) {
    sl_sample_release(in);
    sl_set_error(SL_EINVAL, "odd %lld", (long long)v);
    return SL__ENGINE_SKIP;
  }
  *out = in;
  return SL__ENGINE_OUT;
}

static const sl__engine_ops t_engine = {t_pull, t_init, NULL, t_process, NULL};

static void t_new_pass(void *st, uint64_t start) {
  tstage *t = st;
  t->new_passes++;
  t->last_start = start;
}

static void t_free(void *st) {
  tstage *t = st;
  if (t->freed) (*t->freed)++;
  sl__free(t);
}

static const sl__engine_stage_hooks t_hooks = {
    .new_pass = t_new_pass,
    .free = t_free,
    .skip_code = SL_ECORRUPT,
    .skipped = "items failed",
    .option = "max_odd",
    .length_why = " (odd items are left out)",
};

static const sl__stage_ops t_ops = SL__ENGINE_STAGE_OPS("tstage", NULL);

static sl_reader *make(sl_reader *up, int mode, bool lazy, int threads,
                       uint64_t cap, int *freed, tstage **tp) {
  tstage *t = sl__calloc(1, sizeof *t);
  ASSERT_TRUE(t != NULL);
  t->mode = mode;
  t->freed = freed;
  const sl__engine_stage_cfg cfg = {
      .hooks = &t_hooks,
      .one_to_one = mode == PASS_ALL,
      .lazy = lazy,
      .ignore_cap = cap,
      .what = "tstage",
      .ops = &t_engine,
      .opts = {"tstage", "sl-test", threads, true, 0}};
  int rc = sl__engine_stage_init(&t->run, up, &cfg);
  if (rc == SL_OK && !lazy) rc = sl__engine_stage_start(&t->run);
  if (rc < 0) {
    sl__engine_stage_destroy(t);
    return NULL;
  }
  sl_reader *r = NULL;
  ASSERT_OK(sl__engine_stage_wrap(&t_ops, &t->run, NULL, &r));
  if (tp) *tp = t;
  return r;
}

TEST(a_lazy_stage_starts_its_threads_at_the_first_next) {
  int freed = 0;
  tstage *t = NULL;
  sl_reader *r = make(test_range_reader(10), PASS_ALL, true, 2, 0, &freed, &t);
  ASSERT_EQ(atomic_load(&t->inits), 0);
  uint64_t len = 0;
  ASSERT_OK(sl_reader_length(r, &len)); /* 1:1: upstream's */
  ASSERT_EQ(len, 10);
  ASSERT_EQ(atomic_load(&t->inits), 0);
  int64_t got[16];
  size_t n = 0;
  for (int pass = 0; pass < 2; pass++) {
    ASSERT_RC(test_drain_i64(r, got, 16, &n), SL_EOF);
    const int64_t want[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    test_assert_i64_values(got, n, want, 10);
    ASSERT_TRUE(atomic_load(&t->inits) >= 1);
    ASSERT_OK(sl_reader_reset(r));
    ASSERT_EQ(t->new_passes, pass + 1);
    ASSERT_EQ(t->last_start, 0);
    ASSERT_EQ(t->run.pass, (uint64_t)pass + 1);
  }
  sl_reader_destroy(r);
  ASSERT_EQ(freed, 1);
}

TEST(skipped_items_are_counted_capped_and_named_with_the_stage_words) {
  int freed = 0;
  sl_reader *r =
      make(test_range_reader(10), SKIP_ODD, false, 3, 3, &freed, NULL);
  uint64_t len = 0;
  ASSERT_RC(sl_reader_length(r, &len), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "tstage: the number of samples");
  ASSERT_CONTAINS(sl_last_error(), "(odd items are left out)");
  for (int pass = 0; pass < 2; pass++) {
    int64_t got[16];
    size_t n = 0;
    /* 1, 3, 5 are skipped (the cap), 7 is one too many. */
    ASSERT_RC(test_drain_i64(r, got, 16, &n), SL_ECORRUPT);
    const int64_t want[] = {0, 2, 4, 6};
    test_assert_i64_values(got, n, want, 4);
    ASSERT_CONTAINS(sl_last_error(), "tstage");
    ASSERT_CONTAINS(sl_last_error(), "max_odd");
    ASSERT_CONTAINS(sl_last_error(), "odd 7");
    ASSERT_OK(sl_reader_reset(r)); /* the count restarts */
  }
  sl_reader_destroy(r);
  ASSERT_EQ(freed, 1);
}

static sl_reader *build_thirds(void *ud) {
  return make(test_range_reader(40), DROP_THIRDS, ud != NULL, 3, 0, NULL, NULL);
}

TEST(a_stage_that_drops_items_resumes_exactly_lazy_or_not) {
  const uint64_t cuts[] = {0, 1, 5, 26, 27, 30, 53};
  test_resume_check(build_thirds, NULL, 2, cuts, 7, 0);
  test_resume_check(build_thirds, (void *)1, 2, cuts, 7, 0);
}

TEST(restore_gives_new_pass_the_restored_start) {
  sl_reader *r = make(test_range_reader(40), PASS_ALL, false, 2, 0, NULL, NULL);
  for (int i = 0; i < 7; i++) {
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(test_sample_i64(s, 0), i);
    sl_sample_release(s);
  }
  void *state = NULL;
  size_t len = 0;
  ASSERT_OK(sl_reader_save(r, &state, &len));
  sl_reader_destroy(r);
  tstage *t = NULL;
  r = make(test_range_reader(40), PASS_ALL, false, 2, 0, NULL, &t);
  ASSERT_OK(sl_reader_restore(r, state, len));
  ASSERT_EQ(t->last_start, 7);
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(test_sample_i64(s, 0), 7);
  sl_sample_release(s);
  sl_reader_destroy(r);
  sl_free(state);
}
