/* test_threads_auto.c - threads = "auto" (SL_THREADS_AUTO; sync/tune.c):
 * the same samples in the same order as any fixed count (C parallel map,
 * ordered, over passes; open_files), the tuner's decisions within bounds
 * (1..the workers started, the ledger within the CPUs + 1, a raise kept
 * only when it paid), an affinity mask of 2 CPUs (and of 1) bounding what
 * auto starts, a raise seen on a stage whose workers are the slow part, and
 * closing or resetting mid-pass with parked workers neither hanging nor
 * leaking.  In the TSan suite (make tsan). */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "sync/tune.h"

#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

/* v -> 3 v + 1 after `spin_us` of work (sleep when *ud says so). */
typedef struct work {
  long us;
  bool sleep; /* sleep instead of spinning: parallel on any machine */
} work;

static int times3(void *ud, sl_sample *in, sl_sample **out) {
  const work *w = ud;
  int64_t v = test_sample_i64(in, 0);
  if (w && w->us > 0) {
    if (w->sleep) {
      test_sleep_us(w->us);
    } else {
      double until = test_now_s() + (double)w->us * 1e-6;
      while (test_now_s() < until) {
      }
    }
  }
  int rc = test_i64_sample(sl_sample_schema(in), 3 * v + 1, out);
  sl_sample_release(in);
  return rc;
}

static sl_reader *map_of(int64_t n, uint32_t threads, work *w) {
  sl_parallel_opts o = SL_PARALLEL_OPTS_INIT;
  o.threads = threads;
  sl_reader *r = NULL;
  ASSERT_OK(sl_map_parallel(test_range_reader(n), times3, w, NULL, NULL, &o,
                            &r));
  return r;
}

/* The stats row of the stage at depth 0. */
static sl_stage_stats top_stats(sl_reader *r) {
  sl_stage_stats st[4];
  size_t n = 0;
  ASSERT_OK(sl_reader_stats(r, st, 4, &n));
  ASSERT_GE(n, 1);
  return st[0];
}

/* Checks the bounds of an auto stage's row and of the ledger. */
static void assert_bounds(sl_reader *r) {
  sl_stage_stats s = top_stats(r);
  ASSERT_EQ(s.threads_auto, 1);
  ASSERT_EQ(s.threads_max, sl__threads_auto_max());
  ASSERT_GE(s.threads, 1);
  ASSERT_LE(s.threads, s.threads_max);
  ASSERT_LE(sl__tune_total(), sl__tune_limit());
}

TEST(auto_map_gives_the_same_samples_in_the_same_order_as_fixed) {
  enum { N = 6000 };
  static int64_t a[N], b[N];
  work w = {20, false};
  sl_reader *fixed = map_of(N, 1, &w), *tuned = map_of(N, SL_THREADS_AUTO, &w);
  for (int pass = 0; pass < 3; pass++) {
    size_t na = 0, nb = 0;
    ASSERT_RC(test_drain_i64(fixed, a, N, &na), SL_EOF);
    ASSERT_RC(test_drain_i64(tuned, b, N, &nb), SL_EOF);
    ASSERT_EQ(na, N);
    test_assert_i64_values(b, nb, a, na);
    for (size_t i = 0; i < na; i++)
      ASSERT_EQ(a[i], 3 * (int64_t)i + 1);
    assert_bounds(tuned);
    ASSERT_OK(sl_reader_reset(fixed));
    ASSERT_OK(sl_reader_reset(tuned));
  }
  sl_reader_destroy(fixed);
  sl_reader_destroy(tuned);
  ASSERT_EQ(sl__tune_total(), 0);
}

TEST(a_fixed_count_is_not_tuned) {
  sl_reader *r = map_of(100, 2, NULL);
  sl_stage_stats s = top_stats(r);
  ASSERT_EQ(s.threads_auto, 0);
  ASSERT_EQ(s.threads, 2);
  ASSERT_EQ(s.threads_max, 2);
  ASSERT_EQ(sl__tune_total(), 0);
  sl_reader_destroy(r);
}

/* Workers that sleep are the slow part on any machine: with two CPUs or
 * more the tuner raises, and every look at the stats along the way is
 * within bounds. */
TEST(a_stage_whose_workers_are_the_slow_part_is_raised_within_bounds) {
  if (sl__threads_auto_max() < 2) TEST_SKIP("one usable CPU: nothing to raise");
  work w = {300, true};
  sl_reader *r = map_of(1 << 20, SL_THREADS_AUTO, &w);
  int most = 0;
  double until = test_now_s() + 10.0;
  while (test_now_s() < until && most < 2) {
    for (int k = 0; k < 50; k++) {
      sl_sample *s = NULL;
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    assert_bounds(r);
    int t = top_stats(r).threads;
    if (t > most) most = t;
  }
  ASSERT_GE(most, 2);
  char text[4096];
  sl_stage_stats st[2];
  size_t n = 0;
  ASSERT_OK(sl_reader_stats(r, st, 2, &n));
  ASSERT_GE(sl_stats_format(st, n, 1.0, text, sizeof text), 1);
  ASSERT_CONTAINS(text, "autotuned: map runs");
  sl_reader_destroy(r);
  ASSERT_EQ(sl__tune_total(), 0);
}

/* One period of figures for the tuner: the consumer waited `wait` of it
 * (a fraction), took `items` results, the running workers were busy
 * `util` of their time.  Returns the decision. */
typedef struct clock_ {
  uint64_t now, busy;
} clock_;
static int period(sl__tune *t, clock_ *c, double wait, uint64_t items,
                  double util) {
  const uint64_t P = SL__TUNE_PERIOD_NS;
  t->wait_ns = (uint64_t)(wait * (double)P);
  t->items = items;
  c->now += P;
  c->busy += (uint64_t)(util * (double)t->active * (double)P);
  return sl__tune_step(t, c->now, c->busy);
}

/* The tuner alone, on figures it is given: a raise is a probe kept only
 * when the rate grew, a failed probe is undone and holds further raises,
 * a consumer that never waits with idle workers lowers, and the count
 * stays in 1..max whatever it is told. */
TEST(the_tuner_hill_climbs_within_bounds_on_given_figures) {
  sl__tune t;
  ASSERT_EQ(sl__tune_claim(1), 1);
  sl__tune_init(&t, 3, 1);
  clock_ c = {1000, 0};
  ASSERT_EQ(sl__tune_step(&t, c.now, c.busy), 1); /* the first period */
  /* The consumer waits half the time, the one worker is busy: a raise. */
  ASSERT_EQ(period(&t, &c, 0.5, 100, 1.0), 2);
  ASSERT_EQ(sl__tune_total(), 2);
  ASSERT_EQ(period(&t, &c, 0.0, 10, 1.0), 2); /* settling: not judged */
  ASSERT_EQ(period(&t, &c, 0.5, 180, 1.0), 2); /* the probe paid: kept */
  /* still waiting, busy: the next probe, to 3 (the most) */
  ASSERT_EQ(period(&t, &c, 0.5, 180, 1.0), 3);
  ASSERT_EQ(period(&t, &c, 0.0, 10, 1.0), 3); /* settling */
  /* the probe gained nothing: undone, and raises are held */
  ASSERT_EQ(period(&t, &c, 0.5, 181, 1.0), 2);
  ASSERT_EQ(sl__tune_total(), 2);
  ASSERT_EQ(period(&t, &c, 0.0, 10, 1.0), 2);  /* settling */
  ASSERT_EQ(period(&t, &c, 0.5, 180, 1.0), 2); /* held for one period */
  /* Never above max: many periods of waiting, all probes paying. */
  for (int k = 0; k < 40; k++) {
    int a = period(&t, &c, 0.5, 180 + 100 * (uint64_t)k, 1.0);
    ASSERT_GE(a, 1);
    ASSERT_LE(a, 3);
  }
  /* The consumer never waits and the workers idle: down to 1, not below. */
  for (int k = 0; k < 20; k++) {
    int a = period(&t, &c, 0.0, 100, 0.05);
    ASSERT_GE(a, 1);
    ASSERT_LE(a, 3);
  }
  ASSERT_EQ(t.active, 1);
  ASSERT_EQ(sl__tune_total(), 1);
  sl__tune_release(1);
  ASSERT_EQ(sl__tune_total(), 0);
}

TEST(the_ledger_keeps_running_workers_within_the_cpus_plus_one) {
  long limit = sl__tune_limit();
  ASSERT_EQ(limit, sl__cpu_count() + 1);
  ASSERT_EQ(sl__tune_claim((int)limit + 5), limit);
  ASSERT_TRUE(!sl__tune_claim_one());
  ASSERT_EQ(sl__tune_claim(3), 1); /* a stage always runs one */
  sl__tune_release(1);
  sl__tune_release(1);
  ASSERT_TRUE(sl__tune_claim_one());
  sl__tune_release((int)limit);
  ASSERT_EQ(sl__tune_total(), 0);
  /* A raise the ledger has no room for is not made. */
  ASSERT_EQ(sl__tune_claim((int)limit), limit);
  sl__tune t;
  sl__tune_init(&t, 4, 1);
  clock_ c = {1, 0};
  sl__tune_step(&t, c.now, c.busy);
  ASSERT_EQ(period(&t, &c, 1.0, 50, 1.0), 1);
  sl__tune_release((int)limit);
}

/* sched_setaffinity to the first `k` CPUs of the current mask (false when
 * it has fewer); *was keeps the mask to restore. */
static bool pin_to(int k, cpu_set_t *was) {
  ASSERT_EQ(sched_getaffinity(0, sizeof *was, was), 0);
  if (CPU_COUNT(was) < k) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c = 0, got = 0; c < CPU_SETSIZE && got < k; c++)
    if (CPU_ISSET(c, was)) {
      CPU_SET(c, &set);
      got++;
    }
  ASSERT_EQ(sched_setaffinity(0, sizeof set, &set), 0);
  return true;
}

/* Like taskset -c 0,1 on a larger machine: the usable CPUs are the mask's
 * (issue 27 item 2), and auto starts and runs no more than they allow; a
 * mask of one CPU leaves one worker. */
TEST(an_affinity_mask_of_two_cpus_bounds_auto) {
  cpu_set_t was;
  for (int k = 2; k >= 1; k--) {
    if (!pin_to(k, &was)) continue;
    ASSERT_LE(sl__cpu_count(), k);
    ASSERT_LE(sl__threads_auto_max(), k);
    ASSERT_EQ(sl__tune_limit(), sl__cpu_count() + 1);
    work w = {200, true};
    sl_reader *r = map_of(4000, SL_THREADS_AUTO, &w);
    for (int i = 0; i < 4000; i++) {
      sl_sample *s = NULL;
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_EQ(test_sample_i64(s, 0), 3 * (int64_t)i + 1);
      sl_sample_release(s);
      if (i % 200 == 0) {
        sl_stage_stats st = top_stats(r);
        ASSERT_LE(st.threads_max, k);
        ASSERT_LE(st.threads, k);
        ASSERT_LE(sl__tune_total(), k + 1);
      }
    }
    sl_reader_destroy(r);
    ASSERT_EQ(sched_setaffinity(0, sizeof was, &was), 0);
  }
}

/* Parked workers (auto starts with one running) leave at a close or a
 * reset mid-pass, before and after their first item; nothing hangs, the
 * ledger is given back. */
TEST(closing_or_resetting_mid_pass_with_parked_workers) {
  work w = {100, true};
  for (int take = 0; take < 40; take += 13) {
    sl_reader *r = map_of(100000, SL_THREADS_AUTO, &w);
    for (int i = 0; i < take; i++) {
      sl_sample *s = NULL;
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    ASSERT_OK(sl_reader_reset(r));
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(test_sample_i64(s, 0), 1);
    sl_sample_release(s);
    sl_reader_destroy(r);
    ASSERT_EQ(sl__tune_total(), 0);
  }
  /* a raised stage closed mid-pass */
  if (sl__threads_auto_max() >= 2) {
    w.us = 300;
    sl_reader *r = map_of(1 << 20, SL_THREADS_AUTO, &w);
    double until = test_now_s() + 10.0;
    while (test_now_s() < until && top_stats(r).threads < 2) {
      sl_sample *s = NULL;
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    sl_reader_destroy(r);
    ASSERT_EQ(sl__tune_total(), 0);
  }
}

TEST(auto_open_files_reads_the_same_records_in_the_same_order) {
  const char *a = test_tmppath("threads_auto", "a.slr");
  const char *b = test_tmppath("threads_auto", "b.slr");
  test_write_ids_slr(a, 0, 3000, 37);
  test_write_ids_slr(b, 3000, 2000, 11);
  const char *names[] = {a, b};
  uint64_t digest[2], n[2];
  for (int k = 0; k < 2; k++) {
    sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
    o.threads = k ? SL_THREADS_AUTO : 1;
    o.shuffle = 1;
    o.seed = 7;
    sl_reader *r = NULL;
    ASSERT_OK(sl_open_files(names, 2, &o, &r));
    if (k) {
      sl_stage_stats s = top_stats(r);
      ASSERT_EQ(s.threads_auto, 1);
      ASSERT_EQ(s.threads_max, sl__threads_auto_max());
    }
    digest[k] = test_digest_all(r, &n[k]);
  }
  ASSERT_EQ(n[0], 5000);
  ASSERT_EQ(n[1], n[0]);
  ASSERT_TRUE(digest[0] == digest[1]);
  ASSERT_EQ(sl__tune_total(), 0);
}

TEST(bad_thread_counts_are_still_refused) {
  sl_parallel_opts o = SL_PARALLEL_OPTS_INIT;
  o.threads = SL_THREADS_AUTO + 1; /* UINT32_MAX: not auto */
  sl_reader *r = NULL;
  ASSERT_RC(sl_map_parallel(test_range_reader(3), times3, NULL, NULL, NULL,
                            &o, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "more than the limit");
  sl_open_files_opts fo = SL_OPEN_FILES_OPTS_INIT;
  fo.threads = SL_THREADS_AUTO - 1;
  const char *a = test_tmppath("threads_auto", "c.slr");
  test_write_ids_slr(a, 0, 10, 5);
  ASSERT_RC(sl_open_files(&a, 1, &fo, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "threads must be at most");
}

/* interleave's read-ahead with SL_THREADS_AUTO: each source behind a lazy
 * prefetch("auto"); the order is that of no read-ahead, over passes. */
TEST(auto_interleave_read_ahead_keeps_the_order) {
  enum { SOURCES = 4, EACH = 500 };
  static int64_t a[SOURCES * EACH + 8], b[SOURCES * EACH + 8];
  sl_reader *r[2];
  for (int k = 0; k < 2; k++) {
    sl_reader *src[SOURCES];
    for (int i = 0; i < SOURCES; i++)
      src[i] = test_range_reader(EACH + i);
    sl_interleave_opts o = SL_INTERLEAVE_OPTS_INIT;
    o.cycle = 2;
    o.block = 3;
    o.threads = k ? SL_THREADS_AUTO : 0;
    ASSERT_OK(sl_interleave(src, SOURCES, &o, &r[k]));
  }
  for (int pass = 0; pass < 2; pass++) {
    size_t na = 0, nb = 0;
    ASSERT_RC(test_drain_i64(r[0], a, SOURCES * EACH + 8, &na), SL_EOF);
    ASSERT_RC(test_drain_i64(r[1], b, SOURCES * EACH + 8, &nb), SL_EOF);
    ASSERT_EQ(na, SOURCES * EACH + 6);
    test_assert_i64_values(b, nb, a, na);
    ASSERT_OK(sl_reader_reset(r[0]));
    ASSERT_OK(sl_reader_reset(r[1]));
  }
  /* the read-ahead stages are prefetch("auto") rows */
  sl_stage_stats st[16];
  size_t n = 0;
  ASSERT_OK(sl_reader_stats(r[1], st, 16, &n));
  int prefetches = 0;
  for (size_t i = 0; i < n && i < 16; i++)
    if (!strcmp(st[i].name, "prefetch")) {
      prefetches++;
      ASSERT_GE(st[i].queue_depth, 1);
      ASSERT_LE(st[i].queue_depth, 4096);
    }
  ASSERT_EQ(prefetches, SOURCES);
  sl_reader_destroy(r[0]);
  sl_reader_destroy(r[1]);
}

/* WebDataset lanes decide the order: auto is refused with the reason. */
TEST(wds_refuses_auto_threads_naming_why) {
  sl_wds_opts o = {0};
  o.size = sizeof o;
  o.threads = SL_THREADS_AUTO;
  const char *name = "no-such-shard.tar";
  sl_reader *r = NULL;
  ASSERT_RC(sl_wds_open(&name, 1, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "the number of lanes decides the order");
  ASSERT_NULL(r);
}
