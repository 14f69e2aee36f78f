/* test_prefetch.c - sl_prefetch: order, empty and tiny buffers, reset at any
 * point, errors carried across the thread in order with their message,
 * running ahead of a sleeping consumer, and destroy at any moment (full
 * channel, worker blocked in send or inside a slow upstream, stacked
 * prefetches) without hangs or leaks. */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

/* --- helpers -------------------------------------------------------------- */

static int64_t value(sl_sample *s) {
  return *(int64_t *)sl_sample_at(s, 0)->data;
}

/* Reads a whole pass and checks it is first, first+1, ..., end-1 then EOF. */
static void expect_pass(sl_reader *r, int64_t first, int64_t end) {
  for (int64_t i = first; i < end; i++) {
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_OK);
    if (value(s) != i)
      test_fail(__FILE__, __LINE__, "sample %lld: got %lld", (long long)i,
                (long long)value(s));
    sl_sample_release(s);
  }
  sl_sample *s = (sl_sample *)1;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_NULL(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF); /* repeatable */
}

static void read_n(sl_reader *r, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_OK);
    ASSERT_EQ(value(s), i);
    sl_sample_release(s);
  }
}

static sl_reader *range(int64_t n) {
  sl_reader *r;
  ASSERT_OK(sl_reader_range(n, &r));
  return r;
}

static sl_reader *prefetch(sl_reader *up, size_t n) {
  sl_reader *r;
  ASSERT_OK(sl_prefetch(up, n, &r));
  return r;
}

/* A generator yielding 0..n-1 (optionally failing at record fail_at,
 * optionally sleeping per sample) and counting what it produced.  The test
 * owns it (free_ud only counts frees), so counters stay readable. */
typedef struct gen {
  sl_schema *schema;
  int64_t n, fail_at, i;
  long sleep_us;
  atomic_long produced;
  atomic_int errors, frees;
} gen;

static int gen_next(void *ud, sl_sample **out) {
  gen *g = ud;
  if (g->fail_at >= 0 && g->i == g->fail_at) {
    atomic_fetch_add(&g->errors, 1);
    return sl_set_error(SL_EIO, "gen: read failed at record %lld",
                        (long long)g->i);
  }
  if (g->i >= g->n) return SL_EOF;
  if (g->sleep_us) test_sleep_us(g->sleep_us);
  int rc = test_i64_sample(g->schema, g->i, out);
  if (rc < 0) return rc;
  g->i++;
  atomic_fetch_add(&g->produced, 1);
  return SL_OK;
}

static int gen_reset(void *ud) {
  ((gen *)ud)->i = 0;
  return SL_OK;
}

static void gen_free(void *ud) {
  atomic_fetch_add(&((gen *)ud)->frees, 1);
}

static void gen_init(gen *g, int64_t n, int64_t fail_at, long sleep) {
  memset(g, 0, sizeof *g);
  g->schema = sl_schema_new();
  ASSERT_NOT_NULL(g->schema);
  ASSERT_OK(sl_schema_add(g->schema, "i", SL_I64, 0, NULL));
  g->n = n;
  g->fail_at = fail_at;
  g->sleep_us = sleep;
  atomic_init(&g->produced, 0);
  atomic_init(&g->errors, 0);
  atomic_init(&g->frees, 0);
}

static sl_reader *gen_reader(gen *g, int resettable) {
  sl_reader *r;
  ASSERT_OK(sl_reader_from_generator(
      g->schema, gen_next, resettable ? gen_reset : NULL, gen_free, g, &r));
  return r;
}

static void gen_done(gen *g) {
  ASSERT_EQ(atomic_load(&g->frees), 1); /* the pipeline freed it, once */
  sl_schema_release(g->schema);
}

/* Waits (bounded) until the generator has produced at least n samples. */
static void wait_produced(gen *g, long n) {
  double deadline = test_now_s() + 20.0;
  while (atomic_load(&g->produced) < n) {
    if (test_now_s() > deadline)
      test_fail(__FILE__, __LINE__, "worker produced %ld of %ld samples",
                atomic_load(&g->produced), n);
    sched_yield();
  }
}

/* --- construction --------------------------------------------------------- */

TEST(bad_arguments) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_prefetch(range(10), 0, &r), SL_EINVAL); /* up destroyed */
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "prefetch");
  ASSERT_RC(sl_prefetch(NULL, 4, &r), SL_EINVAL);
  ASSERT_RC(sl_prefetch(range(10), 4, NULL), SL_EINVAL);
}

TEST(name_and_schema_are_upstreams) {
  sl_reader *up = range(3);
  const sl_schema *want = sl_reader_schema(up);
  sl_reader *r = prefetch(up, 2);
  ASSERT_STREQ(sl_reader_name(r), "prefetch");
  ASSERT_TRUE(sl_schema_equal(sl_reader_schema(r), want));
  expect_pass(r, 0, 3);
  sl_reader_destroy(r);
}

TEST(allocation_failures_leak_nothing) {
  /* range(0): the worker reaches EOF without allocating, so the fault hook
   * only ever fails the constructor's own allocations. */
  for (long k = 0;; k++) {
    sl_reader *up = range(0), *r = (sl_reader *)1;
    sl__alloc_fail_after(k);
    int rc = sl_prefetch(up, 4, &r);
    sl__alloc_fail_after(-1);
    if (rc == SL_OK) {
      ASSERT_TRUE(k > 0);
      expect_pass(r, 0, 0);
      sl_reader_destroy(r);
      break;
    }
    ASSERT_RC(rc, SL_ENOMEM);
    ASSERT_NULL(r);
    ASSERT_CONTAINS(sl_last_error(), "prefetch");
    ASSERT_TRUE(k < 100);
  }
}

TEST(a_thread_that_cannot_start_fails_the_stage_and_leaks_nothing) {
  /* At construction: SL_ENOMEM naming the stage, the upstream freed. */
  gen g;
  gen_init(&g, 10, -1, 0);
  sl_reader *r = (sl_reader *)1;
  sl__thread_fail_after(0);
  int rc = sl_prefetch(gen_reader(&g, 1), 4, &r);
  sl__thread_fail_after(-1);
  ASSERT_RC(rc, SL_ENOMEM);
  ASSERT_NULL(r);
  ASSERT_STREQ(sl_last_error(), "prefetch: cannot start a worker thread: "
                                "Resource temporarily unavailable");
  gen_done(&g);
  /* At a reset: the reset's error; the reader can still be destroyed, or
   * reset again once threads start. */
  gen_init(&g, 10, -1, 0);
  r = prefetch(gen_reader(&g, 1), 4);
  read_n(r, 3);
  sl__thread_fail_after(0);
  rc = sl_reader_reset(r);
  sl__thread_fail_after(-1);
  ASSERT_RC(rc, SL_ENOMEM);
  ASSERT_CONTAINS(sl_last_error(), "prefetch: cannot start a worker thread");
  ASSERT_OK(sl_reader_reset(r));
  expect_pass(r, 0, 10);
  sl_reader_destroy(r);
  gen_done(&g);
  ASSERT_TRUE(!test_leaked());
}

#ifdef __linux__
/* True when some thread of this process is named `name`. */
static int thread_named(const char *name) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  int found = 0;
  if (!d) return -1;
  while (!found && (e = readdir(d))) {
    char path[300], comm[64] = "";
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f)) {
      comm[strcspn(comm, "\n")] = '\0';
      found = strcmp(comm, name) == 0;
    }
    fclose(f);
  }
  closedir(d);
  return found;
}

TEST(worker_thread_is_named) {
  gen g;
  gen_init(&g, 1000, -1, 0);
  sl_reader *r = prefetch(gen_reader(&g, 1), 2);
  wait_produced(&g, 3); /* running, blocked in send */
  ASSERT_EQ(thread_named("sl-prefetch"), 1);
  sl_reader_destroy(r);
  /* Joined; a joined thread may stay listed in /proc/self/task for a
   * moment after pthread_join returns (the kernel clears its id first). */
  int named = thread_named("sl-prefetch");
  for (int i = 0; i < 500 && named == 1; i++) {
    test_sleep_us(10000);
    named = thread_named("sl-prefetch");
  }
  ASSERT_EQ(named, 0);
  gen_done(&g);
}
#endif

/* --- passes --------------------------------------------------------------- */

TEST(order_matches_upstream) {
  const size_t sizes[] = {1, 2, 7, 16, 17, 64, 1000, 100000};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    sl_reader *r = prefetch(range(5000), sizes[k]);
    expect_pass(r, 0, 5000);
    sl_reader_destroy(r);
  }
}

TEST(buffer_of_one) {
  gen g;
  gen_init(&g, 300, -1, 0);
  sl_reader *r = prefetch(gen_reader(&g, 1), 1);
  wait_produced(&g, 2); /* one in the channel, one held by the worker */
  test_sleep_us(10000);
  ASSERT_LE(atomic_load(&g.produced), 2);
  for (int pass = 0; pass < 3; pass++) {
    expect_pass(r, 0, 300);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(empty_upstream) {
  sl_reader *r = prefetch(range(0), 4);
  ASSERT_EQ(sl_reader_has_next(r), 0);
  expect_pass(r, 0, 0);
  ASSERT_OK(sl_reader_reset(r));
  expect_pass(r, 0, 0);
  sl_reader_destroy(r);
}

TEST(has_next_through_prefetch) {
  sl_reader *r = prefetch(range(3), 2);
  sl_sample *s;
  ASSERT_EQ(sl_reader_has_next(r), 1);
  ASSERT_EQ(sl_reader_has_next(r), 1);
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(value(s), 0);
  sl_sample_release(s);
  ASSERT_EQ(sl_reader_has_next(r), 1);
  ASSERT_OK(sl_reader_reset(r)); /* drops the peeked sample */
  expect_pass(r, 0, 3);
  ASSERT_EQ(sl_reader_has_next(r), 0);
  sl_reader_destroy(r);
}

TEST(reset_mid_pass_then_full_pass) {
  const int64_t stops[] = {0, 1, 5, 16, 17, 37, 500, 999, 1000};
  for (size_t k = 0; k < sizeof stops / sizeof *stops; k++) {
    sl_reader *r = prefetch(range(1000), 16);
    read_n(r, stops[k]);
    ASSERT_OK(sl_reader_reset(r));
    expect_pass(r, 0, 1000);
    read_n(r, 0);
    ASSERT_OK(sl_reader_reset(r)); /* reset right after reset, too */
    ASSERT_OK(sl_reader_reset(r));
    expect_pass(r, 0, 1000);
    sl_reader_destroy(r);
  }
}

TEST(reset_at_eof) {
  sl_reader *r = prefetch(range(777), 8);
  for (int pass = 0; pass < 5; pass++) {
    expect_pass(r, 0, 777);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

TEST(stacked_prefetch_order_and_reset) {
  sl_reader *r = prefetch(prefetch(range(3000), 3), 5);
  expect_pass(r, 0, 3000);
  ASSERT_OK(sl_reader_reset(r));
  read_n(r, 1234);
  ASSERT_OK(sl_reader_reset(r));
  expect_pass(r, 0, 3000);
  sl_reader_destroy(r);
}

/* --- errors --------------------------------------------------------------- */

static void expect_gen_error(sl_reader *r) {
  sl_sample *s = (sl_sample *)1;
  for (int k = 0; k < 3; k++) { /* sticky, with the exact message */
    sl_clear_error();
    ASSERT_RC(sl_reader_next(r, &s), SL_EIO);
    ASSERT_NULL(s);
    ASSERT_STREQ(sl_last_error(), "gen: read failed at record 5");
    ASSERT_EQ(sl_last_error_code(), SL_EIO);
  }
  sl_clear_error();
  ASSERT_RC(sl_reader_has_next(r), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "gen: read failed at record 5");
}

TEST(error_propagates_in_order_with_message) {
  gen g;
  gen_init(&g, 100, 5, 0);
  sl_reader *r = prefetch(gen_reader(&g, 1), 4);
  /* The worker raises on its own thread: this thread's detail slot is not
   * touched by it. */
  sl_set_error(SL_EINVAL, "consumer marker");
  read_n(r, 5);
  ASSERT_STREQ(sl_last_error(), "consumer marker");
  expect_gen_error(r);
  /* The worker has exited; reset restarts upstream and the same happens. */
  ASSERT_OK(sl_reader_reset(r));
  read_n(r, 5);
  expect_gen_error(r);
  ASSERT_EQ(atomic_load(&g.errors), 2); /* upstream not pulled after error */
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(error_after_samples_still_queued) {
  /* The worker has killed the channel before the consumer reads anything:
   * the five samples still come first. */
  gen g;
  gen_init(&g, 100, 5, 0);
  sl_reader *r = prefetch(gen_reader(&g, 1), 64);
  double deadline = test_now_s() + 20.0;
  while (atomic_load(&g.errors) == 0 && test_now_s() < deadline)
    sched_yield();
  ASSERT_EQ(atomic_load(&g.errors), 1);
  read_n(r, 5);
  expect_gen_error(r);
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(error_at_first_record) {
  gen g;
  gen_init(&g, 100, 0, 0);
  sl_reader *r = prefetch(gen_reader(&g, 1), 1);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "gen: read failed at record 0");
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(upstream_reset_failure_is_sticky) {
  gen g;
  gen_init(&g, 10, -1, 0);
  sl_reader *r = prefetch(gen_reader(&g, 0), 4);
  expect_pass(r, 0, 10);
  ASSERT_RC(sl_reader_reset(r), SL_EUNSUPPORTED);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "generator");
  ASSERT_RC(sl_reader_reset(r), SL_EUNSUPPORTED); /* no worker to stop */
  sl_reader_destroy(r);
  gen_done(&g);
}

/* --- running ahead -------------------------------------------------------- */

TEST(prefetches_while_consumer_sleeps) {
  gen g;
  gen_init(&g, 100, -1, 0);
  sl_reader *r = prefetch(gen_reader(&g, 1), 64);
  /* Nothing pulled yet: the worker fills the channel on its own... */
  wait_produced(&g, 64);
  test_sleep_us(50000);
  /* ...and stops there: 64 queued, at most one more held by the worker. */
  long made = atomic_load(&g.produced);
  ASSERT_GE(made, 64);
  ASSERT_LE(made, 65);
  expect_pass(r, 0, 100);
  sl_reader_destroy(r);
  gen_done(&g);
}

/* --- destroy at any moment ------------------------------------------------ */

TEST(destroy_full_channel_1000) {
  for (int k = 0; k < 1000; k++) {
    gen g;
    gen_init(&g, INT64_MAX, -1, 0);
    sl_reader *r = prefetch(gen_reader(&g, 1), 4);
    if (k % 2) read_n(r, k % 7); /* sometimes after a few reads */
    /* 4 in the channel plus one more produced: the worker is in send. */
    wait_produced(&g, 5 + k % 2 * (k % 7));
    sl_reader_destroy(r);
    gen_done(&g);
  }
}

TEST(destroy_right_after_create) {
  for (int k = 0; k < 500; k++)
    sl_reader_destroy(prefetch(range(100), 1 + k % 5));
}

static uint64_t rng_next(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

TEST(destroy_at_random_points) {
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int k = 0; k < 300; k++) {
    sl_reader *r = prefetch(range(300), 1 + rng_next(&seed) % 8);
    if (rng_next(&seed) % 2) /* stacked prefetch over prefetch */
      r = prefetch(r, 1 + rng_next(&seed) % 8);
    if (rng_next(&seed) % 4 == 0) {
      read_n(r, (int64_t)(rng_next(&seed) % 300));
      ASSERT_OK(sl_reader_reset(r));
    }
    int64_t n = (int64_t)(rng_next(&seed) % 320);
    if (n >= 300) {
      expect_pass(r, 0, 300);
    } else {
      read_n(r, n);
    }
    if (rng_next(&seed) % 3 == 0)
      test_sleep_us(200); /* let the workers fill up */
    sl_reader_destroy(r);
  }
}

TEST(destroy_while_worker_inside_slow_upstream) {
  for (int mode = 0; mode < 3; mode++) {
    gen g;
    gen_init(&g, INT64_MAX, -1, 1000); /* 1 ms per sample */
    sl_reader *r = prefetch(gen_reader(&g, 1), 4);
    if (mode == 1) read_n(r, 2);
    if (mode == 2) wait_produced(&g, 5); /* full, then blocked in send */
    double t0 = test_now_s();
    sl_reader_destroy(r);
    double took = test_now_s() - t0;
    ASSERT_TRUE(took < 2.0); /* the join waits for one sample at most */
    gen_done(&g);
  }
}

TEST(destroy_stacked_while_inner_upstream_slow) {
  gen g;
  gen_init(&g, INT64_MAX, -1, 1000);
  sl_reader *r = prefetch(prefetch(gen_reader(&g, 1), 2), 2);
  read_n(r, 3);
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(reset_while_worker_inside_slow_upstream) {
  gen g;
  gen_init(&g, 20, -1, 1000);
  sl_reader *r = prefetch(gen_reader(&g, 1), 4);
  read_n(r, 3);
  ASSERT_OK(sl_reader_reset(r));
  expect_pass(r, 0, 20);
  ASSERT_OK(sl_reader_reset(r));
  read_n(r, 1);
  sl_reader_destroy(r);
  gen_done(&g);
}

/* --- over a batch: deferred row copies ------------------------------------ */

/* Reads batches of `b` rows of 0..n-1 (the last may be short) up to `stop`
 * batches (-1: the whole pass, then EOF), sleeping every `sleep_every`-th
 * batch so that both the worker (consumer busy) and the consumer (waiting)
 * copy rows. */
static void expect_batches(sl_reader *r, int64_t n, int64_t b, int64_t stop,
                           int sleep_every) {
  int64_t next = 0, k = 0;
  for (; next < n && (stop < 0 || k < stop); k++) {
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_OK);
    const sl_tensor *t = sl_sample_at(s, 0);
    int64_t rows = SL_MIN(b, n - next);
    ASSERT_EQ(t->shape[0], rows);
    for (int64_t j = 0; j < rows; j++)
      ASSERT_EQ(((int64_t *)t->data)[j], next + j);
    next += rows;
    if (sleep_every && k % sleep_every == 0) test_sleep_us(2000);
    sl_sample_release(s);
  }
  if (stop < 0) {
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  }
}

static sl_reader *batch_of(sl_reader *up, size_t n) {
  sl_reader *r;
  ASSERT_OK(sl_batch(up, n, NULL, &r));
  return r;
}

TEST(over_a_batch_every_batch_is_whole_whoever_copies_its_rows) {
  for (int sleep_every = 0; sleep_every <= 3; sleep_every++) {
    sl_reader *r = prefetch(batch_of(range(1000), 7), 2);
    expect_batches(r, 1000, 7, -1, sleep_every);
    /* resets mid-pass, with batches queued and rows still to copy */
    for (int k = 0; k < 5; k++) {
      ASSERT_OK(sl_reader_reset(r));
      expect_batches(r, 1000, 7, k * 11, sleep_every);
    }
    ASSERT_OK(sl_reader_reset(r));
    expect_batches(r, 1000, 7, -1, sleep_every);
    sl_reader_destroy(r);
  }
  ASSERT_TRUE(!test_leaked());
}

TEST(over_a_batch_destroy_at_any_moment_and_errors_in_order) {
  for (int k = 0; k < 40; k++) { /* batches queued, rows still to copy */
    sl_reader *r = prefetch(batch_of(range(5000), 16), 1 + k % 4);
    expect_batches(r, 5000, 16, k % 7, 0);
    if (k % 2) test_sleep_us(500);
    sl_reader_destroy(r);
  }
  gen g;
  gen_init(&g, 100, 50, 0); /* fails at record 50: batch 6 of 8 rows */
  sl_reader *r = prefetch(batch_of(gen_reader(&g, 1), 8), 3);
  expect_batches(r, 48, 8, 6, 1);
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "gen: read failed at record 50");
  ASSERT_RC(sl_reader_next(r, &s), SL_EIO);
  ASSERT_OK(sl_reader_reset(r));
  expect_batches(r, 48, 8, 6, 0);
  sl_reader_destroy(r);
  gen_done(&g);
  ASSERT_TRUE(!test_leaked());
}
