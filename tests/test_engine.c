/* test_engine.c - the parallel-stage engine (src/sync/engine.c) driven by C
 * callbacks over a range upstream: order (and completeness when
 * unordered), drops, errors at their position from upstream, from process
 * and from a worker's setup, checks on the consumer's thread, peeking,
 * stopping and restarting mid-pass with a full window, thread limits and
 * start failures.  Under TSan (make tsan) it is the engine's race test. */
#include "test.h"
#include "test_util.h"

#include "sync/budget.h"
#include "sync/engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

/* What the callbacks do, per test. */
typedef struct job {
  sl_reader *up;
  int64_t drop_mod;      /* > 0: drop values with v % drop_mod == 1 */
  int64_t fail_at;       /* >= 0: process fails on this value */
  int64_t check_fail_at; /* >= 0: check fails on this value */
  long sleep_us;         /* per item */
  long busy_ns;          /* per item, spinning (finer than a sleep) */
  int64_t slow_until;    /* > 0: only values below it sleep */
  int init_fail_worker;  /* >= 0: this worker's setup fails */
  bool unchecked;        /* process returns UNCHECKED */
  atomic_int per_worker[8];
  atomic_int inits, finis, checks;
} job;

static void job_init(job *j, int64_t n) {
  memset(j, 0, sizeof *j);
  j->up = test_range_reader(n);
  j->fail_at = j->check_fail_at = -1;
  j->init_fail_worker = -1;
}

static int pull(void *ud, sl_sample **out) {
  job *j = ud;
  return sl_reader_next(j->up, out);
}

static int worker_init(void *ud, int worker, void **wctx) {
  job *j = ud;
  atomic_fetch_add(&j->inits, 1);
  if (worker == j->init_fail_worker)
    return sl_set_error(SL_ELUA, "setup of worker %d failed", worker);
  *wctx = &j->per_worker[worker];
  return SL_OK;
}

static void worker_fini(void *ud, int worker, void *wctx) {
  job *j = ud;
  ASSERT_PTR_EQ(wctx, &j->per_worker[worker]);
  atomic_fetch_add(&j->finis, 1);
}

/* v -> 10 v, dropping or failing as the job says. */
static int process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                   sl_sample **out) {
  job *j = ud;
  atomic_fetch_add((atomic_int *)wctx, 1);
  int64_t v = test_sample_i64(in, 0);
  if ((uint64_t)v != seq) {
    sl_sample_release(in);
    return sl_set_error(SL_EINVAL, "item %llu holds %lld",
                        (unsigned long long)seq, (long long)v);
  }
  if (j->sleep_us && (j->slow_until <= 0 || v < j->slow_until))
    test_sleep_us(j->sleep_us);
  for (double t0 = test_now_s(); j->busy_ns && test_now_s() - t0 < j->busy_ns * 1e-9;)
    ;
  if (v == j->fail_at) {
    sl_sample_release(in);
    return sl_set_error(SL_ELUA, "process failed at %lld", (long long)v);
  }
  if (j->drop_mod > 0 && v % j->drop_mod == 1) {
    sl_sample_release(in);
    return SL__ENGINE_DROP;
  }
  int rc = test_i64_sample(sl_sample_schema(in), 10 * v, out);
  sl_sample_release(in);
  if (rc < 0) return rc;
  return j->unchecked ? SL__ENGINE_UNCHECKED : SL__ENGINE_OUT;
}

static int check(void *ud, uint64_t seq, const sl_sample *s) {
  job *j = ud;
  atomic_fetch_add(&j->checks, 1);
  if (test_sample_i64(s, 0) == 10 * j->check_fail_at)
    return sl_set_error(SL_ESHAPE, "check failed at item %llu",
                        (unsigned long long)seq);
  return SL_OK;
}

static const sl__engine_ops ops = {pull, worker_init, worker_fini, process,
                                   check};

static sl__engine *engine(job *j, int threads, bool ordered, size_t window) {
  sl__engine_opts o = {"test stage", "sl-test", threads, ordered, window};
  sl__engine *e = NULL;
  ASSERT_OK(sl__engine_create(&ops, j, &o, &e));
  ASSERT_OK(sl__engine_start(e));
  return e;
}

/* Drains one pass: values into v (at most cap), returns the ending code. */
static int drain(sl__engine *e, int64_t *v, size_t cap, size_t *n) {
  *n = 0;
  for (;;) {
    sl_sample *s = NULL;
    int rc = sl__engine_next(e, &s);
    if (rc != SL_OK) return rc;
    ASSERT_TRUE(*n < cap);
    v[(*n)++] = test_sample_i64(s, 0);
    sl_sample_release(s);
  }
}

static void job_free(job *j, sl__engine *e) {
  sl__engine_destroy(e);
  sl_reader_destroy(j->up);
}

/* `passes` whole passes of n results 10 * i in order, restarted between. */
static void expect_ordered_passes(sl__engine *e, job *j, int64_t *v, size_t n,
                                  int passes) {
  for (int pass = 0; pass < passes; pass++) {
    size_t got;
    ASSERT_RC(drain(e, v, n, &got), SL_EOF);
    ASSERT_EQ(got, n);
    for (size_t i = 0; i < got; i++)
      ASSERT_EQ(v[i], 10 * (int64_t)i);
    sl__engine_stop(e);
    ASSERT_OK(sl_reader_reset(j->up));
    ASSERT_OK(sl__engine_start(e));
  }
}

TEST(ordered_results_come_in_upstream_order_over_passes) {
  enum { N = 5000 };
  static int64_t v[N];
  for (int threads = 1; threads <= 4; threads++) {
    for (size_t window = 1; window <= 256; window *= 16) {
      job j;
      job_init(&j, N);
      sl__engine *e = engine(&j, threads, true, window);
      expect_ordered_passes(e, &j, v, N, 2);
      job_free(&j, e);
      ASSERT_EQ(j.inits, threads);
      ASSERT_EQ(j.finis, threads);
    }
  }
}

TEST(unordered_results_are_each_item_exactly_once) {
  enum { N = 5000 };
  static int64_t v[N];
  static char seen[N];
  job j;
  job_init(&j, N);
  sl__engine *e = engine(&j, 3, false, 64);
  size_t n;
  ASSERT_RC(drain(e, v, N, &n), SL_EOF);
  ASSERT_EQ(n, N);
  memset(seen, 0, sizeof seen);
  for (size_t i = 0; i < n; i++) {
    ASSERT_EQ(v[i] % 10, 0);
    ASSERT_TRUE(v[i] / 10 >= 0 && v[i] / 10 < N);
    ASSERT_EQ(seen[v[i] / 10]++, 0);
  }
  job_free(&j, e);
}

TEST(dropped_items_leave_no_gap_ordered_or_not) {
  enum { N = 3000 };
  static int64_t v[N];
  for (int ordered = 0; ordered <= 1; ordered++) {
    job j;
    job_init(&j, N);
    j.drop_mod = 3; /* drops 1, 4, 7, ... */
    sl__engine *e = engine(&j, 2, ordered, 32);
    size_t n;
    ASSERT_RC(drain(e, v, N, &n), SL_EOF);
    ASSERT_EQ(n, N - N / 3);
    int64_t sum = 0, want = 0;
    for (size_t i = 0; i < n; i++) {
      ASSERT_TRUE((v[i] / 10) % 3 != 1);
      if (ordered && i > 0) ASSERT_TRUE(v[i] > v[i - 1]);
      sum += v[i];
    }
    for (int64_t k = 0; k < N; k++)
      if (k % 3 != 1) want += 10 * k;
    ASSERT_EQ(sum, want);
    job_free(&j, e);
  }
}

TEST(a_process_error_comes_after_every_earlier_item_with_its_message) {
  enum { N = 2000 };
  static int64_t v[N];
  job j;
  job_init(&j, N);
  j.fail_at = 777;
  sl__engine *e = engine(&j, 4, true, 128);
  size_t n;
  ASSERT_RC(drain(e, v, N, &n), SL_ELUA);
  ASSERT_STREQ(sl_last_error(), "process failed at 777");
  ASSERT_EQ(n, 777);
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ(v[i], 10 * (int64_t)i);
  /* A new pass after stop + upstream reset runs again to the error. */
  sl__engine_stop(e);
  ASSERT_OK(sl_reader_reset(j.up));
  ASSERT_OK(sl__engine_start(e));
  ASSERT_RC(drain(e, v, N, &n), SL_ELUA);
  ASSERT_EQ(n, 777);
  job_free(&j, e);
}

TEST(an_unordered_process_error_is_delivered_never_lost) {
  enum { N = 2000 };
  static int64_t v[N];
  job j;
  job_init(&j, N);
  j.fail_at = 5;
  sl__engine *e = engine(&j, 2, false, 16);
  size_t n;
  ASSERT_RC(drain(e, v, N, &n), SL_ELUA);
  ASSERT_STREQ(sl_last_error(), "process failed at 5");
  ASSERT_TRUE(n < N);
  job_free(&j, e);
}

/* A C map upstream that fails on value 120. */
static int fail_120(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  if (test_sample_i64(in, 0) == 120) {
    sl_sample_release(in);
    return sl_set_error(SL_EIO, "upstream broke at 120");
  }
  *out = in;
  return SL_OK;
}

TEST(upstream_end_and_errors_arrive_at_their_position) {
  enum { N = 300 };
  static int64_t v[N];
  for (int ordered = 0; ordered <= 1; ordered++) {
    for (int err = 0; err <= 1; err++) {
      job j;
      job_init(&j, N);
      sl_reader *t = NULL;
      if (err)
        ASSERT_OK(sl_map(j.up, fail_120, NULL, NULL, NULL, &t));
      else
        ASSERT_OK(sl_take(j.up, 120, &t));
      j.up = t;
      sl__engine *e = engine(&j, 3, ordered, 8);
      size_t n;
      ASSERT_RC(drain(e, v, N, &n), err ? SL_EIO : SL_EOF);
      if (err) ASSERT_STREQ(sl_last_error(), "upstream broke at 120");
      /* Every item before the end came first, each once. */
      ASSERT_EQ(n, 120);
      int64_t sum = 0;
      for (size_t i = 0; i < n; i++)
        sum += v[i];
      ASSERT_EQ(sum, 10 * 119 * 120 / 2);
      job_free(&j, e);
    }
  }
}

TEST(check_runs_on_the_consumer_for_unchecked_results) {
  enum { N = 500 };
  static int64_t v[N];
  job j;
  job_init(&j, N);
  j.unchecked = true;
  j.check_fail_at = 321;
  sl__engine *e = engine(&j, 2, true, 64);
  size_t n;
  ASSERT_RC(drain(e, v, N, &n), SL_ESHAPE);
  ASSERT_STREQ(sl_last_error(), "check failed at item 321");
  ASSERT_EQ(n, 321);
  ASSERT_EQ(j.checks, 322);
  job_free(&j, e);
}

TEST(a_worker_whose_setup_fails_ends_the_pass_with_its_message) {
  enum { N = 100 };
  static int64_t v[N];
  job j;
  job_init(&j, N);
  j.init_fail_worker = 0;
  sl__engine *e = engine(&j, 1, true, 8);
  size_t n;
  ASSERT_RC(drain(e, v, N, &n), SL_ELUA);
  ASSERT_STREQ(sl_last_error(), "setup of worker 0 failed");
  ASSERT_EQ(n, 0);
  /* The next pass tries the setup again (and it succeeds now). */
  sl__engine_stop(e);
  j.init_fail_worker = -1;
  ASSERT_OK(sl_reader_reset(j.up));
  ASSERT_OK(sl__engine_start(e));
  ASSERT_RC(drain(e, v, N, &n), SL_EOF);
  ASSERT_EQ(n, N);
  job_free(&j, e);
  ASSERT_EQ(j.inits, 2);
  ASSERT_EQ(j.finis, 1);
}

TEST(peek_shows_the_next_result_without_taking_it) {
  job j;
  job_init(&j, 3);
  sl__engine *e = engine(&j, 2, true, 8);
  const sl_sample *first = NULL;
  ASSERT_OK(sl__engine_peek(e, &first));
  ASSERT_EQ(test_sample_i64(first, 0), 0);
  ASSERT_OK(sl__engine_peek(e, &first));
  ASSERT_EQ(test_sample_i64(first, 0), 0);
  int64_t v[4];
  size_t n;
  ASSERT_RC(drain(e, v, 4, &n), SL_EOF);
  ASSERT_EQ(n, 3);
  ASSERT_EQ(v[0], 0);
  /* After the end, next and peek keep returning it (never a hang). */
  ASSERT_EQ(sl__engine_peek(e, &first), SL_EOF);
  ASSERT_NULL(first);
  sl_sample *s = NULL;
  ASSERT_RC(sl__engine_next(e, &s), SL_EOF);
  job_free(&j, e);
  /* So does an error, with its message. */
  job_init(&j, 10);
  j.fail_at = 2;
  e = engine(&j, 2, true, 8);
  ASSERT_RC(drain(e, v, 4, &n), SL_ELUA);
  sl_clear_error();
  ASSERT_RC(sl__engine_next(e, &s), SL_ELUA);
  ASSERT_STREQ(sl_last_error(), "process failed at 2");
  ASSERT_RC(sl__engine_peek(e, &first), SL_ELUA);
  job_free(&j, e);
}

TEST(slow_items_are_spread_over_every_worker) {
  job j;
  job_init(&j, 200);
  j.sleep_us = 500;
  sl__engine *e = engine(&j, 4, true, 64);
  int64_t v[200];
  size_t n;
  ASSERT_RC(drain(e, v, 200, &n), SL_EOF);
  ASSERT_EQ(n, 200);
  for (int i = 0; i < 4; i++)
    ASSERT_TRUE(atomic_load(&j.per_worker[i]) > 0);
  job_free(&j, e);
}

TEST(a_consumer_whose_spins_miss_still_gets_every_result_in_order) {
  /* Items far slower than the consumer's spin (its spins miss, so it
   * backs off and sleeps at once), then quick ones (spins meet results
   * again), over two passes: every result, in order, none lost to a sleep
   * that skipped its spin. */
  enum { N = 600, SLOW = 150 };
  static int64_t v[N];
  for (int threads = 1; threads <= 2; threads++) {
    job j;
    job_init(&j, N);
    j.sleep_us = 300;
    j.slow_until = SLOW;
    sl__engine *e = engine(&j, threads, true, 16);
    expect_ordered_passes(e, &j, v, N, 2);
    job_free(&j, e);
  }
}

/* A loadavg-format file saying `running` threads are runnable. */
static void fake_loadavg(char *path, size_t cap, long running) {
  snprintf(path, cap, "%s/loadavg", test_tmpdir("engine"));
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fprintf(f, "1.00 1.00 1.00 %ld/500 1\n", running);
  ASSERT_EQ(fclose(f), 0);
  sl__cpus_probe_path(path);
}

/* Issue 26: a consumer never spins while the machine has more runnable
 * threads than CPUs (a spin would take a CPU from the trainer), and does
 * spin again once it has not.  One worker slower than the consumer, so
 * every result is waited for. */
TEST(the_consumer_does_not_spin_while_the_cpus_are_oversubscribed) {
  if (sl__cpu_count() < 2) TEST_SKIP("one usable CPU: the engine never spins");
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  char path[1024];
  enum { N = 200 };
  static int64_t v[N];
  job j;
  job_init(&j, N);
  j.sleep_us = 200;
  fake_loadavg(path, sizeof path, online + 2);
  sl__engine *e = engine(&j, 1, true, 16);
  size_t n;
  ASSERT_RC(drain(e, v, N, &n), SL_EOF);
  ASSERT_EQ(n, N);
  ASSERT_EQ(sl__engine_spins(e), 0);
  /* The machine quiet again: the consumer probes with spins (at least one
   * in SPIN_BACKOFF_MAX waits). */
  fake_loadavg(path, sizeof path, 1);
  sl__engine_stop(e);
  ASSERT_OK(sl_reader_reset(j.up));
  ASSERT_OK(sl__engine_start(e));
  ASSERT_RC(drain(e, v, N, &n), SL_EOF);
  ASSERT_EQ(n, N);
  ASSERT_TRUE(sl__engine_spins(e) > 0);
  sl__cpus_probe_path(NULL);
  job_free(&j, e);
}

TEST(stopping_with_a_full_window_and_busy_workers_releases_everything) {
  /* The consumer takes a few results and walks away: the window is full,
   * workers are blocked or mid-item; stop/destroy must join them and
   * release every result (ASan's leak check is the judge). */
  for (int round = 0; round < 50; round++) {
    job j;
    job_init(&j, 100000);
    j.sleep_us = round % 2 ? 50 : 0;
    sl__engine *e = engine(&j, 1 + round % 4, round % 3 != 0, 4 + round);
    for (int k = 0; k < round % 7; k++) {
      sl_sample *s = NULL;
      ASSERT_OK(sl__engine_next(e, &s));
      sl_sample_release(s);
    }
    if (round % 2) {
      sl__engine_signal_stop(e); /* a signal first, as a chain would */
      sl__engine_stop(e);
      ASSERT_OK(sl_reader_reset(j.up));
      ASSERT_OK(sl__engine_start(e));
      sl_sample *s = NULL;
      ASSERT_OK(sl__engine_next(e, &s));
      if (round % 3 != 0) /* ordered: a fresh pass starts at 0 */
        ASSERT_EQ(test_sample_i64(s, 0), 0);
      sl_sample_release(s);
    }
    job_free(&j, e);
  }
  ASSERT_TRUE(!test_leaked());
}

/* --- gather: the consumer woken per several results ------------------------- */

/* An engine made stopped, so that settings can go in before its start. */
static sl__engine *engine_gather(job *j, int threads, bool ordered,
                                 size_t window, bool gather) {
  sl__engine_opts o = {"test stage", "sl-test", threads, ordered, window};
  sl__engine *e = NULL;
  ASSERT_OK(sl__engine_create(&ops, j, &o, &e));
  sl__engine_set_spin(e, false); /* sleeps only: they are what is counted */
  sl__engine_set_gather(e, gather);
  ASSERT_OK(sl__engine_start(e));
  return e;
}

TEST(a_gathering_consumer_sleeps_once_per_many_results) {
  /* One worker at ~5 us an item, a consumer that takes each at once: woken
   * per deposit (a few items), it sleeps hundreds of times a pass; gathering,
   * once per up to GATHER_MAX items.  The results are the same.  Counted:
   * the sleeps a worker's signal ended (a loaded machine that stops the
   * worker for longer than a gathering sleep lasts ends some by their
   * timeout instead); up to three tries, for a machine that busy. */
  enum { N = 4000 };
  static int64_t v[N];
  bool fewer = false;
  for (int attempt = 0; attempt < 3 && !fewer; attempt++) {
    uint64_t woken[2];
    for (int g = 0; g < 2; g++) {
      job j;
      job_init(&j, N);
      j.busy_ns = 5000;
      sl__engine *e = engine_gather(&j, 1, true, 0, g == 1);
      size_t n;
      ASSERT_RC(drain(e, v, N, &n), SL_EOF);
      ASSERT_EQ(n, N);
      for (size_t i = 0; i < n; i++)
        ASSERT_EQ(v[i], 10 * (int64_t)i);
      uint64_t late = 0;
      woken[g] = sl__engine_sleeps(e, &late) - late;
      job_free(&j, e);
    }
    fprintf(stderr,
            "woken per %d items: %llu per deposit, %llu gathering\n", N,
            (unsigned long long)woken[0], (unsigned long long)woken[1]);
    fewer = woken[1] * 2 < woken[0] && woken[1] <= N / 8;
  }
  ASSERT_TRUE(fewer);
}

/* One pass's values and its end, for comparing two engines. */
typedef struct pass_out {
  size_t n;
  int rc;
  char msg[128];
} pass_out;

static void drain_pass(sl__engine *e, int64_t *v, size_t cap, pass_out *p) {
  p->rc = drain(e, v, cap, &p->n);
  snprintf(p->msg, sizeof p->msg, "%s", p->rc == SL_EOF ? "" : sl_last_error());
}

TEST(gathering_gives_the_same_results_errors_and_ends_for_any_window) {
  /* Against the same engine woken per deposit: every value in place, a
   * process error at the same place with the same message, drops, windows
   * smaller than GATHER_MAX (want is at most half the window), 1-4 workers,
   * three passes each (stop, reset, start). */
  enum { N = 1500 };
  static int64_t a[N], b[N];
  const size_t windows[] = {2, 3, 8, 64, 0};
  for (int threads = 1; threads <= 4; threads++) {
    for (size_t wi = 0; wi < sizeof windows / sizeof *windows; wi++) {
      for (int kind = 0; kind < 3; kind++) {
        job j[2];
        sl__engine *e[2];
        for (int g = 0; g < 2; g++) {
          job_init(&j[g], N);
          j[g].busy_ns = 2000;
          if (kind == 1) j[g].fail_at = 1001;
          if (kind == 2) j[g].drop_mod = 7;
          e[g] = engine_gather(&j[g], threads, true, windows[wi], g == 1);
        }
        for (int pass = 0; pass < 3; pass++) {
          pass_out pa, pb;
          drain_pass(e[0], a, N, &pa);
          drain_pass(e[1], b, N, &pb);
          ASSERT_EQ(pa.rc, pb.rc);
          ASSERT_STREQ(pa.msg, pb.msg);
          ASSERT_EQ(pa.n, pb.n);
          size_t want = kind == 1 ? 1001 : N;
          for (int64_t x = 0; kind == 2 && x < N; x++)
            want -= x % 7 == 1;
          ASSERT_EQ(pa.n, want);
          ASSERT_TRUE(memcmp(a, b, pa.n * sizeof *a) == 0);
          for (int g = 0; g < 2; g++) {
            sl__engine_stop(e[g]);
            ASSERT_OK(sl_reader_reset(j[g].up));
            ASSERT_OK(sl__engine_start(e[g]));
          }
        }
        for (int g = 0; g < 2; g++)
          job_free(&j[g], e[g]);
      }
    }
  }
}

TEST(a_worker_waiting_for_the_budget_wakes_a_gathering_consumer) {
  /* A budget of three results: the worker fills it and must wait for the
   * consumer to take them.  It wakes the consumer, whatever it gathers for,
   * instead of leaving it to sleep out its time (GATHER_NS) each time.  A
   * machine so loaded that the worker is not run within a gathering sleep
   * ends some sleeps by their timeout instead: up to three tries. */
  enum { N = 3000 };
  static int64_t v[N];
  sl_sample *probe = NULL;
  sl_reader *one = test_range_reader(1);
  ASSERT_OK(sl_reader_next(one, &probe));
  uint64_t item = sl_sample_nbytes(probe);
  sl_sample_release(probe);
  sl_reader_destroy(one);
  uint64_t late = UINT64_MAX;
  for (int attempt = 0; attempt < 3 && late > 20; attempt++) {
    job j;
    job_init(&j, N);
    sl__engine_opts o = {"test stage", "sl-test", 1, true, 0};
    sl__engine *e = NULL;
    ASSERT_OK(sl__engine_create(&ops, &j, &o, &e));
    sl__engine_set_spin(e, false);
    sl__engine_set_gather(e, true);
    sl__budget *b = sl__budget_new(3 * item);
    sl__budget_acct *acct = sl__budget_acct_new(b, "test stage");
    sl__budget_drop(b); /* the account holds it */
    sl__engine_set_budget(e, acct);
    ASSERT_OK(sl__engine_start(e));
    size_t n = 0;
    for (;;) { /* as a stage's next: the sample handed out last has left */
      sl__budget_drop_carry(acct);
      sl_sample *s = NULL;
      int rc = sl__engine_next(e, &s);
      if (rc == SL_EOF) break;
      ASSERT_OK(rc);
      ASSERT_TRUE(n < N);
      v[n++] = test_sample_i64(s, 0);
      sl_sample_release(s);
    }
    ASSERT_EQ(n, N);
    for (size_t i = 0; i < n; i++)
      ASSERT_EQ(v[i], 10 * (int64_t)i);
    uint64_t sleeps = sl__engine_sleeps(e, &late);
    fprintf(stderr, "%llu sleeps, %llu timed out\n",
            (unsigned long long)sleeps, (unsigned long long)late);
    ASSERT_TRUE(sl__budget_acct_peak(acct) <= 3 * item);
    job_free(&j, e);
    sl__budget_acct_free(acct);
  }
  ASSERT_TRUE(late <= 20); /* waking the consumer: ~0; leaving it: ~N / 3 */
}

TEST(thread_counts_beyond_the_limit_are_refused) {
  job j;
  job_init(&j, 10);
  sl__engine_opts o = {"map (x.lua:1)", "sl-test", 0, true, 0};
  sl__engine *e = NULL;
  o.threads = (int)sl__thread_limit() + 1;
  ASSERT_RC(sl__engine_create(&ops, &j, &o, &e), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "map (x.lua:1): threads = ");
  ASSERT_NULL(e);
  o.threads = 0;
  ASSERT_RC(sl__engine_create(&ops, &j, &o, &e), SL_EINVAL);
  ASSERT_NULL(e);
  sl_reader_destroy(j.up);
}

TEST(a_thread_that_cannot_start_fails_the_start_and_runs_nothing) {
  job j;
  job_init(&j, 1000);
  sl__engine_opts o = {"test stage", "sl-test", 4, true, 0};
  sl__engine *e = NULL;
  ASSERT_OK(sl__engine_create(&ops, &j, &o, &e));
  sl__thread_fail_after(2);
  ASSERT_RC(sl__engine_start(e), SL_ENOMEM);
  sl__thread_fail_after(-1);
  ASSERT_STREQ(sl_last_error(),
               "test stage: cannot start a worker thread: Resource "
               "temporarily unavailable");
  /* The two started workers were stopped; a later start works. */
  ASSERT_OK(sl_reader_reset(j.up));
  ASSERT_OK(sl__engine_start(e));
  int64_t v[1000];
  size_t n;
  ASSERT_RC(drain(e, v, 1000, &n), SL_EOF);
  ASSERT_EQ(n, 1000);
  job_free(&j, e);
}

/* --- skipped items and the consumer's cache (sl__engine_on_skip,
 * sl__engine_set_cache) --------------------------------------------------- */

/* Values with v % 7 == 3 are skipped with the note "skip <v>"; the handler
 * records them (on the consumer's thread) and fails at the `fail_at`-th. */
typedef struct skip_job {
  sl_reader *up;
  pthread_t consumer;
  int64_t notes[1000];
  int nnotes;
  int fail_at; /* > 0: the handler fails at this many skips */
  atomic_long pulled;
} skip_job;

static int skip_pull(void *ud, sl_sample **out) {
  skip_job *j = ud;
  atomic_fetch_add(&j->pulled, 1);
  return sl_reader_next(j->up, out);
}

static int skip_process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                        sl_sample **out) {
  (void)ud;
  (void)wctx;
  (void)seq;
  int64_t v = test_sample_i64(in, 0);
  if (v % 7 == 3) {
    sl_sample_release(in);
    sl_set_error(SL_ECORRUPT, "skip %lld", (long long)v);
    return SL__ENGINE_SKIP;
  }
  *out = in;
  return SL__ENGINE_OUT;
}

static int skip_handler(void *ud, uint64_t seq, const char *note) {
  skip_job *j = ud;
  ASSERT_TRUE(pthread_equal(pthread_self(), j->consumer));
  long long v = -1;
  ASSERT_EQ(sscanf(note, "skip %lld", &v), 1);
  ASSERT_EQ((uint64_t)v, seq);
  ASSERT_TRUE(j->nnotes < 1000);
  j->notes[j->nnotes++] = v;
  if (j->nnotes == j->fail_at)
    return sl_set_error(SL_ECORRUPT, "too many skips, the last: %s", note);
  return SL_OK;
}

static const sl__engine_ops skip_ops = {skip_pull, NULL, NULL, skip_process,
                                        NULL};

static sl__engine *skip_engine(skip_job *j, int64_t n, int threads,
                               bool ordered, bool handler) {
  memset(j, 0, sizeof *j);
  j->up = test_range_reader(n);
  j->consumer = pthread_self();
  sl__engine_opts o = {"skip stage", "sl-test", threads, ordered, 16};
  sl__engine *e = NULL;
  ASSERT_OK(sl__engine_create(&skip_ops, j, &o, &e));
  if (handler) sl__engine_on_skip(e, skip_handler);
  ASSERT_OK(sl__engine_start(e));
  return e;
}

TEST(skipped_items_reach_the_handler_on_the_consumer_in_order) {
  enum { N = 700 };
  static int64_t v[N];
  for (int threads = 1; threads <= 4; threads++) {
    for (int ordered = 0; ordered <= 1; ordered++) {
      skip_job j;
      sl__engine *e = skip_engine(&j, N, threads, ordered, true);
      size_t n;
      ASSERT_RC(drain(e, v, N, &n), SL_EOF);
      ASSERT_EQ(n, N - N / 7);
      ASSERT_EQ(j.nnotes, N / 7); /* each exactly once */
      int64_t sum = 0;
      for (int k = 0; k < j.nnotes; k++) {
        ASSERT_EQ(j.notes[k] % 7, 3);
        if (ordered) ASSERT_EQ(j.notes[k], 7 * k + 3);
        sum += j.notes[k];
      }
      ASSERT_EQ(sum, 7 * (int64_t)(N / 7) * (N / 7 - 1) / 2 + 3 * (N / 7));
      sl__engine_destroy(e);
      sl_reader_destroy(j.up);
    }
  }
}

TEST(a_failing_skip_handler_ends_the_pass_at_that_item) {
  enum { N = 700 };
  static int64_t v[N];
  for (int threads = 1; threads <= 4; threads++) {
    for (int ordered = 0; ordered <= 1; ordered++) {
      skip_job j;
      sl__engine *e = skip_engine(&j, N, threads, ordered, true);
      j.fail_at = 5; /* value 31 */
      size_t n;
      ASSERT_RC(drain(e, v, N, &n), SL_ECORRUPT);
      ASSERT_EQ(j.nnotes, 5);
      if (ordered) {
        ASSERT_STREQ(sl_last_error(), "too many skips, the last: skip 31");
        ASSERT_EQ(n, 31 - 4); /* 0..30 less the 4 skipped */
        for (size_t i = 0; i < n; i++)
          ASSERT_TRUE(v[i] < 31);
      } else {
        ASSERT_CONTAINS(sl_last_error(), "too many skips, the last: skip ");
      }
      /* The end stays, for next and peek. */
      sl_sample *s = NULL;
      ASSERT_RC(sl__engine_next(e, &s), SL_ECORRUPT);
      const sl_sample *first = NULL;
      ASSERT_RC(sl__engine_peek(e, &first), SL_ECORRUPT);
      /* A new pass counts again. */
      sl__engine_stop(e);
      ASSERT_OK(sl_reader_reset(j.up));
      j.nnotes = 0;
      j.fail_at = 0;
      ASSERT_OK(sl__engine_start(e));
      ASSERT_RC(drain(e, v, N, &n), SL_EOF);
      ASSERT_EQ(j.nnotes, N / 7);
      sl__engine_destroy(e);
      sl_reader_destroy(j.up);
    }
  }
}

TEST(peek_hands_skips_to_the_handler_first) {
  skip_job j;
  sl__engine *e = skip_engine(&j, 5, 2, true, true);
  sl_sample *s = NULL;
  for (int k = 0; k < 3; k++) { /* 0, 1, 2 */
    ASSERT_OK(sl__engine_next(e, &s));
    sl_sample_release(s);
  }
  const sl_sample *first = NULL;
  ASSERT_OK(sl__engine_peek(e, &first)); /* 3 skipped: 4 */
  ASSERT_EQ(test_sample_i64(first, 0), 4);
  ASSERT_EQ(j.nnotes, 1);
  ASSERT_OK(sl__engine_next(e, &s));
  ASSERT_EQ(test_sample_i64(s, 0), 4);
  sl_sample_release(s);
  ASSERT_RC(sl__engine_next(e, &s), SL_EOF);
  ASSERT_EQ(j.nnotes, 1);
  sl__engine_destroy(e);
  sl_reader_destroy(j.up);
}

TEST(without_a_handler_skip_is_drop) {
  enum { N = 300 };
  static int64_t v[N];
  skip_job j;
  sl__engine *e = skip_engine(&j, N, 3, true, false);
  size_t n;
  ASSERT_RC(drain(e, v, N, &n), SL_EOF);
  ASSERT_EQ(n, N - N / 7 - (N % 7 > 3));
  ASSERT_EQ(j.nnotes, 0);
  sl__engine_destroy(e);
  sl_reader_destroy(j.up);
  ASSERT_TRUE(!test_leaked()); /* the notes were freed */
}

TEST(a_cache_of_one_makes_the_window_the_bound_on_results_held) {
  for (int threads = 1; threads <= 3; threads++) {
    for (int ordered = 0; ordered <= 1; ordered++) {
      skip_job j;
      memset(&j, 0, sizeof j);
      j.up = test_range_reader(100000);
      sl__engine_opts o = {"cache stage", "sl-test", threads, ordered, 8};
      sl__engine *e = NULL;
      ASSERT_OK(sl__engine_create(&skip_ops, &j, &o, &e));
      sl__engine_set_cache(e, 1);
      ASSERT_OK(sl__engine_start(e));
      /* The consumer takes one at a time and lets the workers fill the
       * window: pulled items not yet taken (the drops, made by skips
       * without a handler, aside) never exceed it.  With the default cache
       * they would reach window + 7: the consumer takes all 8 it finds. */
      long taken = 0;
      for (int k = 0; k < 40; k++) {
        sl_sample *s = NULL;
        ASSERT_OK(sl__engine_next(e, &s));
        sl_sample_release(s);
        taken++;
        test_sleep_us(2000); /* the workers fill the window */
        long pulled = atomic_load(&j.pulled);
        long dropped = 0;
        for (long v = 0; v < pulled; v++)
          dropped += v % 7 == 3;
        ASSERT_LE(pulled - dropped - taken, 8);
      }
      sl__engine_destroy(e);
      sl_reader_destroy(j.up);
    }
  }
}

/* --- process_many: one item in, several results out ---------------------- */

/* Items are numbers 0.. counted by pull (no upstream sample: NULL items);
 * item k gives k % 4 samples 100 k + j (so every fourth item gives none),
 * skips items with k % 11 == 5 when `skip`, fails at item fail_at. */
typedef struct many_job {
  uint64_t next, n;
  int64_t fail_at;
  bool skip;
  int64_t skipped[64];
  int nskipped;
  atomic_long processed, gave; /* items processed, those with results */
} many_job;

static int many_pull(void *ud, sl_sample **out) {
  many_job *j = ud;
  if (j->next == j->n) return SL_EOF;
  j->next++;
  *out = NULL;
  return SL_OK;
}

static int many_process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                        sl_sample ***out, size_t *n) {
  many_job *j = ud;
  (void)wctx;
  ASSERT_TRUE(in == NULL);
  atomic_fetch_add(&j->processed, 1);
  if ((int64_t)seq == j->fail_at)
    return sl_set_error(SL_ECORRUPT, "item %llu is corrupt",
                        (unsigned long long)seq);
  if (j->skip && seq % 11 == 5) {
    sl_set_error(SL_ECORRUPT, "skip %llu", (unsigned long long)seq);
    return SL__ENGINE_SKIP;
  }
  size_t k = seq % 4;
  if (k == 0) return SL__ENGINE_OUT; /* no results: a drop */
  atomic_fetch_add(&j->gave, 1);
  sl_sample **v = sl__malloc(k * sizeof *v);
  ASSERT_TRUE(v != NULL);
  sl_schema *schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(schema, "v", SL_I64, 0, NULL));
  for (size_t i = 0; i < k; i++)
    ASSERT_OK(test_i64_sample(schema, (int64_t)(100 * seq + i), &v[i]));
  sl_schema_release(schema);
  *out = v;
  *n = k;
  return SL__ENGINE_OUT;
}

static int many_skipped(void *ud, uint64_t seq, const char *note) {
  many_job *j = ud;
  long long v = -1;
  ASSERT_EQ(sscanf(note, "skip %lld", &v), 1);
  ASSERT_EQ((uint64_t)v, seq);
  if (j->nskipped < 64) j->skipped[j->nskipped++] = v;
  return SL_OK;
}

static const sl__engine_ops many_ops = {many_pull, NULL, NULL, NULL, NULL};

static sl__engine *many_engine(many_job *j, uint64_t n, int threads,
                               bool ordered, size_t window) {
  memset(j, 0, sizeof *j);
  j->n = n;
  j->fail_at = -1;
  sl__engine_opts o = {"many stage", "sl-test", threads, ordered, window};
  sl__engine *e = NULL;
  ASSERT_OK(sl__engine_create(&many_ops, j, &o, &e));
  sl__engine_on_skip(e, many_skipped);
  sl__engine_process_many(e, many_process);
  return e;
}

/* The values item k gives, in order, appended to v. */
static size_t many_expected(uint64_t n, bool skip, int64_t *v) {
  size_t m = 0;
  for (uint64_t k = 0; k < n; k++) {
    if (skip && k % 11 == 5) continue;
    for (uint64_t i = 0; i < k % 4; i++)
      v[m++] = (int64_t)(100 * k + i);
  }
  return m;
}

TEST(process_many_results_come_in_item_order_for_any_thread_count) {
  enum { N = 3000 };
  static int64_t want[3 * N], got[3 * N];
  for (int skip = 0; skip <= 1; skip++) {
    size_t m = many_expected(N, skip, want);
    for (int threads = 1; threads <= 4; threads++) {
      many_job j;
      sl__engine *e = many_engine(&j, N, threads, true, 0);
      j.skip = skip;
      for (int pass = 0; pass < 2; pass++) {
        j.next = 0;
        ASSERT_OK(sl__engine_start(e));
        size_t n;
        ASSERT_RC(drain(e, got, 3 * N, &n), SL_EOF);
        ASSERT_EQ(n, m);
        ASSERT_TRUE(memcmp(got, want, m * sizeof *got) == 0);
        sl__engine_stop(e);
      }
      ASSERT_EQ(j.nskipped, skip ? 64 : 0);
      sl__engine_destroy(e);
    }
  }
}

TEST(process_many_unordered_gives_every_result_once) {
  enum { N = 3000 };
  static int64_t want[3 * N], got[3 * N];
  size_t m = many_expected(N, false, want);
  many_job j;
  sl__engine *e = many_engine(&j, N, 3, false, 0);
  ASSERT_OK(sl__engine_start(e));
  size_t n;
  ASSERT_RC(drain(e, got, 3 * N, &n), SL_EOF);
  ASSERT_EQ(n, m);
  static char seen[100 * N];
  memset(seen, 0, sizeof seen);
  for (size_t i = 0; i < n; i++) {
    ASSERT_TRUE(got[i] >= 0 && got[i] < 100 * N);
    ASSERT_EQ(seen[got[i]], 0);
    seen[got[i]] = 1;
  }
  for (size_t i = 0; i < m; i++)
    ASSERT_EQ(seen[want[i]], 1);
  sl__engine_destroy(e);
}

TEST(next_many_takes_an_item_at_once_or_its_rest) {
  many_job j;
  sl__engine *e = many_engine(&j, 12, 2, true, 0);
  ASSERT_OK(sl__engine_start(e));
  /* Item 0 gives nothing; item 1 one sample; item 2 two; item 3 three. */
  sl_sample **v;
  size_t n;
  uint64_t seq;
  ASSERT_OK(sl__engine_next_many(e, &v, &n, &seq));
  ASSERT_EQ(seq, 1);
  ASSERT_EQ(n, 1);
  ASSERT_EQ(test_sample_i64(v[0], 0), 100);
  sl_sample_release(v[0]);
  sl__free(v);
  /* One sample of item 2 by next, the other by next_many. */
  sl_sample *s;
  const sl_sample *peeked;
  ASSERT_OK(sl__engine_peek(e, &peeked));
  ASSERT_EQ(test_sample_i64(peeked, 0), 200);
  ASSERT_OK(sl__engine_next(e, &s));
  ASSERT_EQ(test_sample_i64(s, 0), 200);
  sl_sample_release(s);
  ASSERT_OK(sl__engine_next_many(e, &v, &n, &seq));
  ASSERT_EQ(seq, 2);
  ASSERT_EQ(n, 1);
  ASSERT_EQ(test_sample_i64(v[0], 0), 201);
  sl_sample_release(v[0]);
  sl__free(v);
  ASSERT_OK(sl__engine_next_many(e, &v, &n, &seq));
  ASSERT_EQ(seq, 3);
  ASSERT_EQ(n, 3);
  for (size_t i = 0; i < n; i++) {
    ASSERT_EQ(test_sample_i64(v[i], 0), 300 + (int64_t)i);
    sl_sample_release(v[i]);
  }
  sl__free(v);
  /* Stopping with a partly taken item and a full window frees everything
   * (the leak check of make asan). */
  ASSERT_OK(sl__engine_next_many(e, &v, &n, &seq)); /* item 5 */
  ASSERT_EQ(seq, 5);
  for (size_t i = 0; i < n; i++)
    sl_sample_release(v[i]);
  sl__free(v);
  ASSERT_OK(sl__engine_next(e, &s)); /* item 6: 1 of 2 */
  sl_sample_release(s);
  sl__engine_destroy(e);
}

TEST(process_many_error_comes_after_every_earlier_result) {
  enum { N = 400 };
  static int64_t want[3 * N], got[3 * N];
  size_t m = many_expected(77, false, want);
  for (int threads = 1; threads <= 3; threads++) {
    many_job j;
    sl__engine *e = many_engine(&j, N, threads, true, 0);
    j.fail_at = 77;
    ASSERT_OK(sl__engine_start(e));
    size_t n;
    ASSERT_RC(drain(e, got, 3 * N, &n), SL_ECORRUPT);
    ASSERT_STREQ(sl_last_error(), "item 77 is corrupt");
    ASSERT_EQ(n, m);
    ASSERT_TRUE(memcmp(got, want, m * sizeof *got) == 0);
    sl_sample **v;
    uint64_t seq;
    ASSERT_RC(sl__engine_next_many(e, &v, &n, &seq), SL_ECORRUPT);
    ASSERT_TRUE(v == NULL && n == 0);
    sl__engine_destroy(e);
  }
}

TEST(a_stage_without_a_process_callback_does_not_start) {
  many_job j;
  memset(&j, 0, sizeof j);
  sl__engine_opts o = {"many stage", "sl-test", 1, true, 0};
  sl__engine *e = NULL;
  ASSERT_OK(sl__engine_create(&many_ops, &j, &o, &e));
  ASSERT_RC(sl__engine_start(e), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "many stage: no process callback");
  sl__engine_destroy(e);
}

TEST(process_many_window_counts_items) {
  for (int threads = 1; threads <= 3; threads++) {
    for (int ordered = 0; ordered <= 1; ordered++) {
      many_job j;
      sl__engine *e = many_engine(&j, 100000, threads, ordered, 6);
      sl__engine_set_cache(e, 1);
      ASSERT_OK(sl__engine_start(e));
      /* Nothing taken: the workers stop once 6 items are in flight,
       * whatever each gives (items that give nothing are drops, which an
       * unordered engine consumes at once). */
      test_sleep_us(20000);
      ASSERT_LE(atomic_load(&j.gave), 6);
      if (ordered) ASSERT_LE(atomic_load(&j.processed), 6);
      long taken = 0;
      for (int k = 0; k < 30; k++) {
        sl_sample **v;
        size_t n;
        uint64_t seq;
        ASSERT_OK(sl__engine_next_many(e, &v, &n, &seq));
        for (size_t i = 0; i < n; i++)
          sl_sample_release(v[i]);
        sl__free(v);
        /* Ordered, every item up to seq left the window; the ones with
         * results among them: all but k % 4 == 0. */
        taken++;
        if (ordered) ASSERT_EQ(taken, (long)(seq + 1 - (seq / 4 + 1)));
        test_sleep_us(2000);
        ASSERT_LE(atomic_load(&j.gave) - taken, 6);
      }
      sl__engine_destroy(e);
    }
  }
}

/* --- finish hook, flow control, thread setup, noted waits ---------------- */

typedef struct flow_job {
  job j;
  atomic_long pulled;
  pthread_t consumer;
  atomic_int finished, off_thread, threads_set, fail_thread;
  long wait_us; /* process: waits this long, noted as wait_down */
  sl__engine *e;
} flow_job;

static int flow_pull(void *ud, sl_sample **out) {
  flow_job *f = ud;
  int rc = sl_reader_next(f->j.up, out);
  if (rc == SL_OK) atomic_fetch_add(&f->pulled, 1);
  return rc;
}

static int flow_process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                        sl_sample **out) {
  flow_job *f = ud;
  if (f->wait_us) {
    uint64_t t0 = sl__stat_start();
    test_sleep_us(f->wait_us);
    sl__engine_note_wait(f->e, t0);
  }
  if (f->j.sleep_us && test_sample_i64(in, 0) < f->j.slow_until)
    test_sleep_us(f->j.sleep_us);
  *out = in;
  return SL__ENGINE_OUT;
}

static void flow_finish(void *ud, sl_sample *s) {
  flow_job *f = ud;
  atomic_fetch_add(&f->finished, 1);
  if (!pthread_equal(pthread_self(), f->consumer))
    atomic_fetch_add(&f->off_thread, 1);
}

static int flow_thread(void *ud, int worker) {
  flow_job *f = ud;
  atomic_fetch_add(&f->threads_set, 1);
  if (atomic_load(&f->fail_thread))
    return sl_set_error(SL_ECUDA, "cannot set up worker %d", worker);
  return SL_OK;
}

static const sl__engine_ops flow_ops = {.pull = flow_pull,
                                        .process = flow_process};

static sl__engine *flow_engine(flow_job *f, int64_t n, int threads,
                               size_t window) {
  memset(f, 0, sizeof *f);
  f->j.up = test_range_reader(n);
  f->consumer = pthread_self();
  sl__engine_opts o = {"flow", "sl-test", threads, true, window};
  ASSERT_OK(sl__engine_create(&flow_ops, f, &o, &f->e));
  return f->e;
}

TEST(finish_runs_on_the_consumer_once_per_sample_before_it_is_seen) {
  flow_job f;
  sl__engine *e = flow_engine(&f, 50, 3, 8);
  sl__engine_on_finish(e, flow_finish);
  ASSERT_OK(sl__engine_start(e));
  const sl_sample *first = NULL;
  ASSERT_OK(sl__engine_peek(e, &first));
  ASSERT_EQ(atomic_load(&f.finished), 1); /* peeked: finished already */
  for (int64_t i = 0; i < 50; i++) {
    sl_sample *s = NULL;
    ASSERT_OK(sl__engine_next(e, &s));
    ASSERT_EQ(test_sample_i64(s, 0), i);
    ASSERT_EQ(atomic_load(&f.finished), i + 1); /* once, no more */
    sl_sample_release(s);
  }
  sl_sample *s = NULL;
  ASSERT_RC(sl__engine_next(e, &s), SL_EOF);
  ASSERT_EQ(atomic_load(&f.off_thread), 0);
  job_free(&f.j, e);
}

TEST(depth_bounds_what_is_in_flight_and_seen_says_what_the_consumer_found) {
  flow_job f;
  sl__engine *e = flow_engine(&f, 100000, 1, 64);
  sl__engine_set_cache(e, 1);
  sl__engine_set_depth(e, 3);
  f.j.sleep_us = 50000; /* the first item: the consumer finds nothing */
  f.j.slow_until = 1;
  ASSERT_OK(sl__engine_start(e));
  sl_sample *s = NULL;
  ASSERT_OK(sl__engine_next(e, &s));
  sl_sample_release(s);
  ASSERT_EQ(sl__engine_seen(e), SL__ENGINE_SEEN_EMPTY);
  test_sleep_us(20000); /* the worker fills the depth */
  ASSERT_OK(sl__engine_next(e, &s));
  sl_sample_release(s);
  ASSERT_EQ(sl__engine_seen(e), SL__ENGINE_SEEN_FULL);
  test_sleep_us(20000);
  ASSERT_LE(atomic_load(&f.pulled) - 2, 3);
  /* Raised while running: the worker goes on to the new depth. */
  sl__engine_set_depth(e, 10);
  test_sleep_us(20000);
  ASSERT_EQ(atomic_load(&f.pulled) - 2, 10);
  job_free(&f.j, e);
}

TEST(max_bytes_stops_the_pulls_while_the_results_hold_that_much) {
  flow_job f;
  sl__engine *e = flow_engine(&f, 100000, 1, 64);
  sl__engine_set_cache(e, 1);
  /* range samples hold one i64: 8 bytes each; 3 ready make 24 (a run of
   * pulls ends there too, whatever the batch size) */
  sl__engine_set_max_bytes(e, 24);
  ASSERT_OK(sl__engine_start(e));
  sl_sample *s = NULL;
  for (int k = 0; k < 5; k++) {
    ASSERT_OK(sl__engine_next(e, &s));
    ASSERT_EQ(test_sample_i64(s, 0), k);
    sl_sample_release(s);
    test_sleep_us(20000);
    ASSERT_EQ(atomic_load(&f.pulled) - (k + 1), 3);
  }
  job_free(&f.j, e);
}

TEST(thread_setup_runs_on_every_worker_every_pass_and_its_error_ends_it) {
  flow_job f;
  sl__engine *e = flow_engine(&f, 10, 2, 8);
  sl__engine_on_thread(e, flow_thread);
  ASSERT_OK(sl__engine_start(e));
  int64_t v[16];
  size_t n = 0;
  ASSERT_RC(drain(e, v, 16, &n), SL_EOF);
  ASSERT_EQ(n, 10);
  sl__engine_stop(e);
  ASSERT_EQ(atomic_load(&f.threads_set), 2);
  ASSERT_OK(sl_reader_reset(f.j.up));
  atomic_store(&f.fail_thread, 1);
  ASSERT_OK(sl__engine_start(e));
  ASSERT_RC(drain(e, v, 16, &n), SL_ECUDA);
  ASSERT_CONTAINS(sl_last_error(), "cannot set up worker");
  ASSERT_EQ(n, 0);
  sl__engine_stop(e);
  ASSERT_EQ(atomic_load(&f.threads_set), 4); /* once per thread started */
  job_free(&f.j, e);
}

TEST(a_noted_wait_counts_as_wait_down_not_busy) {
  sl_stats_enable(1);
  flow_job f;
  sl__engine *e = flow_engine(&f, 5, 1, 8);
  f.wait_us = 20000;
  ASSERT_OK(sl__engine_start(e));
  int64_t v[8];
  size_t n = 0;
  ASSERT_RC(drain(e, v, 8, &n), SL_EOF);
  const sl__stage_counters *c = sl__engine_counters(e);
  ASSERT_GE(atomic_load(&c->wait_down_ns), 5 * 15000000ull);
  ASSERT_LE(atomic_load(&c->busy_ns), 5 * 10000000ull);
  job_free(&f.j, e);
  sl_stats_enable(0);
}
