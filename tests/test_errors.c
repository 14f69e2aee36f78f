/* test_errors.c - errors travelling through chains of decorators: an upstream
 * error reaches the consumer after the samples before it, with its code and
 * exact message, stays sticky, and is cleared by reset; errors raised by map
 * and filter callbacks in the middle of a chain arrive the same way. */
#include "core/internal.h"
#include "stages/reader_impl.h"
#include "stages/stage.h"
#include "test.h"
#include "test_util.h"

#define MAXN 256
#define BAD_MSG "gen: bad record 7 in file x.slr"

/* Fails unless the pass yields first..first+count-1 in order and then ends
 * with SL_ECORRUPT carrying BAD_MSG. */
static void expect_values_then_corrupt(sl_reader *r, int64_t first,
                                       size_t count) {
  int64_t v[MAXN];
  size_t n;
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), BAD_MSG);
  ASSERT_EQ(n, count);
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ(v[i], first + (int64_t)i);
}

/* --- a generator that fails -------------------------------------------------
 * Yields 0, 1, ... and fails with SL_ECORRUPT at index `fail_at`; a reset
 * starts it over (it fails again at the same place). */
typedef struct failing {
  sl_schema *schema;
  int64_t i, fail_at;
} failing;

static int failing_next(void *ud, sl_sample **out) {
  failing *f = ud;
  if (f->i == f->fail_at)
    return sl_set_error(SL_ECORRUPT,
                        "gen: bad record %" PRId64 " in file x.slr", f->i);
  int rc = test_i64_sample(f->schema, f->i, out);
  if (rc == SL_OK) f->i++;
  return rc;
}

static int failing_reset(void *ud) {
  ((failing *)ud)->i = 0;
  return SL_OK;
}

static void failing_free(void *ud) {
  failing *f = ud;
  sl_schema_release(f->schema);
  free(f);
}

/* A reader over a failing generator; resettable when asked. */
static sl_reader *failing_gen(int64_t fail_at, int resettable) {
  failing *f = calloc(1, sizeof *f);
  ASSERT_NOT_NULL(f);
  f->fail_at = fail_at;
  f->schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(f->schema, "i", SL_I64, 0, NULL));
  sl_reader *r;
  ASSERT_OK(sl_reader_from_generator(f->schema, failing_next,
                                     resettable ? failing_reset : NULL,
                                     failing_free, f, &r));
  return r;
}

static int identity(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  *out = in;
  return SL_OK;
}

static int keep_all(void *ud, const sl_sample *s) {
  (void)ud;
  (void)s;
  return 1;
}

/* --- upstream errors
 * ----------------------------------------------------------- */

TEST(upstream_error_crosses_five_decorators) {
  sl_reader *r = failing_gen(7, 1);
  ASSERT_OK(sl_map(r, identity, NULL, NULL, NULL, &r));
  ASSERT_OK(sl_filter(r, keep_all, NULL, NULL, &r));
  ASSERT_OK(sl_take(r, 1000, &r));
  ASSERT_OK(sl_skip(r, 0, &r));
  ASSERT_OK(sl_multi_pass(r, 1, &r));
  expect_values_then_corrupt(r, 0, 7);
  /* Sticky: the same code, and the same message restored even after the
   * thread's message was overwritten. */
  sl_clear_error();
  sl_sample *s = (sl_sample *)1;
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), BAD_MSG);
  ASSERT_NULL(s);
  sl_set_error(SL_EIO, "something else");
  ASSERT_RC(sl_reader_has_next(r), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), BAD_MSG);
  /* Reset clears the error everywhere in the chain. */
  ASSERT_OK(sl_reader_reset(r));
  expect_values_then_corrupt(r, 0, 7);
  sl_reader_destroy(r);
}

TEST(every_decorator_passes_upstream_errors_unchanged) {
  sl_reader *r;
  ASSERT_OK(sl_take(failing_gen(7, 1), 100, &r));
  expect_values_then_corrupt(r, 0, 7);
  sl_reader_destroy(r);

  ASSERT_OK(sl_skip(failing_gen(7, 1), 2, &r));
  expect_values_then_corrupt(r, 2, 5);
  sl_reader_destroy(r);

  ASSERT_OK(sl_skip(failing_gen(7, 1), 20, &r)); /* while skipping */
  expect_values_then_corrupt(r, 0, 0);
  sl_reader_destroy(r);

  ASSERT_OK(sl_multi_pass(failing_gen(7, 1), 3, &r));
  expect_values_then_corrupt(r, 0, 7);
  sl_reader_destroy(r);

  ASSERT_OK(sl_cache(failing_gen(7, 1), &r));
  expect_values_then_corrupt(r, 0, 7);
  ASSERT_OK(sl_reader_reset(r));
  expect_values_then_corrupt(r, 0, 7);
  sl_reader_destroy(r);

  ASSERT_OK(sl_repeat_first(failing_gen(0, 1), 5, &r));
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), "gen: bad record 0 in file x.slr");
  sl_reader_destroy(r);

  sl_reader *two[2] = {test_range_reader(2), failing_gen(7, 1)};
  ASSERT_OK(sl_chain(two, 2, &r));
  int64_t v[MAXN];
  size_t n;
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_ECORRUPT);
  ASSERT_EQ(n, 9);
  ASSERT_STREQ(sl_last_error(), BAD_MSG);
  sl_reader_destroy(r);
}

TEST(shuffle_passes_upstream_errors_unchanged) {
  sl_reader *r;
  ASSERT_OK(sl_shuffle(failing_gen(7, 1), 4, 1, &r));
  int64_t v[MAXN];
  size_t n;
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), BAD_MSG);
  ASSERT_LE(n, 7);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_ECORRUPT);
  sl_reader_destroy(r);
}

static sl_reader *column_a(int n) {
  sl_schema *schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(schema, "a", SL_I64, 0, NULL));
  sl_sample *items[MAXN];
  for (int i = 0; i < n; i++) {
    items[i] = sl_sample_new(schema);
    void *data;
    ASSERT_OK(sl_sample_alloc(items[i], 0, 0, NULL, &data));
    *(int64_t *)data = 100 + i;
  }
  sl_reader *r;
  ASSERT_OK(sl_reader_from_array(items, (size_t)n, schema, &r));
  for (int i = 0; i < n; i++)
    sl_sample_release(items[i]);
  sl_schema_release(schema);
  return r;
}

TEST(zip_passes_errors_from_any_reader) {
  sl_reader *first[2] = {failing_gen(7, 1), column_a(20)};
  sl_reader *r;
  ASSERT_OK(sl_zip(first, 2, 0, &r));
  expect_values_then_corrupt(r, 0, 7);
  sl_reader_destroy(r);
  /* The sample already pulled from reader 0 is released (ASan checks). */
  sl_reader *second[2] = {column_a(20), failing_gen(7, 1)};
  ASSERT_OK(sl_zip(second, 2, 1, &r));
  int64_t v[MAXN];
  size_t n;
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), BAD_MSG);
  ASSERT_EQ(n, 7);
  ASSERT_EQ(v[0], 100);
  sl_reader_destroy(r);
}

TEST(upstream_reset_errors_pass_through) {
  sl_reader *r;
  ASSERT_OK(sl_map(failing_gen(7, 0), identity, NULL, NULL, NULL, &r));
  ASSERT_OK(sl_take(r, 3, &r));
  ASSERT_OK(sl_shuffle(r, 2, 1, &r));
  ASSERT_RC(sl_reader_reset(r), SL_EUNSUPPORTED);
  ASSERT_STREQ(sl_last_error(), "generator: no reset callback was given");
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EUNSUPPORTED); /* sticky too */
  sl_reader_destroy(r);
  /* A complete cache replays without resetting its upstream. */
  ASSERT_OK(sl_cache(failing_gen(3, 0), &r));
  ASSERT_OK(sl_skip(r, 0, &r));
  int64_t v[MAXN];
  size_t n;
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_ECORRUPT);
  ASSERT_RC(sl_reader_reset(r), SL_EUNSUPPORTED); /* not complete */
  sl_reader_destroy(r);
}

/* --- callback errors ---------------------------------------------------------
 */

static int map_fails_at_five(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  if (test_sample_i64(in, 0) != 5) {
    *out = in;
    return SL_OK;
  }
  sl_sample_release(in);
  return sl_set_error(SL_EINVAL, "normalize: sample 5 has no label");
}

TEST(map_callback_error_reaches_the_consumer) {
  sl_reader *r;
  ASSERT_OK(sl_take(test_range_reader(20), 15, &r));
  ASSERT_OK(sl_map(r, map_fails_at_five, NULL, NULL, NULL, &r));
  ASSERT_OK(sl_filter(r, keep_all, NULL, NULL, &r));
  ASSERT_OK(sl_multi_pass(r, 2, &r));
  ASSERT_OK(sl_skip(r, 1, &r));
  int64_t v[MAXN];
  size_t n;
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "normalize: sample 5 has no label");
  ASSERT_EQ(n, 4);
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ(v[i], (int64_t)i + 1);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "normalize: sample 5 has no label");
  sl_reader_destroy(r);
}

static int filter_fails_at_six(void *ud, const sl_sample *s) {
  (void)ud;
  if (*(const int64_t *)sl_sample_at_const(s, 0)->data != 6) return 1;
  return sl_set_error(SL_ECORRUPT, "dedup: sample 6 is unreadable");
}

TEST(filter_callback_error_reaches_the_consumer) {
  sl_reader *r;
  ASSERT_OK(sl_map(test_range_reader(20), identity, NULL, NULL, NULL, &r));
  ASSERT_OK(sl_filter(r, filter_fails_at_six, NULL, NULL, &r));
  ASSERT_OK(sl_take(r, 100, &r));
  ASSERT_OK(sl_cache(r, &r));
  sl_reader *zs[1] = {r};
  ASSERT_OK(sl_chain(zs, 1, &r));
  int64_t v[MAXN];
  size_t n;
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), "dedup: sample 6 is unreadable");
  ASSERT_EQ(n, 6);
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ(v[i], (int64_t)i);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_RC(test_drain_i64(r, v, MAXN, &n), SL_ECORRUPT);
  ASSERT_EQ(n, 6);
  sl_reader_destroy(r);
}

/* --- allocation failures ---------------------------------------------------
 * Every allocation made while building a pipeline and running two passes is
 * made to fail in turn.  Each outcome must be a clean error with a message;
 * ASan checks that nothing leaks (decorators take their upstreams and user
 * data also on failure) and nothing is freed twice. */

long sl__alloc_fail_after(long n); /* the test hook in src/core/alloc.c */

static sl_schema *g_j_schema; /* {j: i64[]}, made before faults start */

/* Copies field "i" into a new sample with field "j". */
static int rename_to_j(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  int64_t v = test_sample_i64(in, 0);
  sl_sample_release(in);
  return test_i64_sample(g_j_schema, v, out);
}

/* Every linear decorator, then chain.  Each call may fail; a failed stage
 * leaves r NULL, which the next stage reports as SL_EINVAL. */
static int build_linear(sl_reader **out) {
  sl_reader *r = NULL;
  sl_reader_range(40, &r);
  sl_shuffle(r, 8, 3, &r);
  sl_map(r, identity, malloc(8), free, NULL, &r);
  sl_filter(r, keep_all, malloc(8), free, &r);
  sl_take(r, 30, &r);
  sl_skip(r, 2, &r);
  sl_multi_pass(r, 2, &r);
  sl_cache(r, &r);
  sl_reader *tail = NULL;
  sl_reader_range(5, &tail);
  sl_repeat_first(tail, 3, &tail);
  sl_reader *parts[2] = {r, tail};
  return sl_chain(parts, 2, out);
}

static int build_zip(sl_reader **out) {
  sl_reader *a = NULL, *b = NULL;
  sl_reader_range(12, &a);
  sl_reader_range(12, &b);
  sl_map(b, rename_to_j, NULL, NULL, g_j_schema, &b);
  sl_reader *parts[2] = {a, b};
  return sl_zip(parts, 2, 0, out);
}

/* Builds, runs two passes and destroys; returns SL_OK or the first error,
 * and the sum of field 0 over both passes. */
static int run_twice(int (*build)(sl_reader **), int64_t *sum) {
  sl_reader *r;
  *sum = 0;
  int rc = build(&r);
  if (rc < 0) return rc;
  for (int pass = 0; pass < 2 && rc >= 0; pass++) {
    if (pass) rc = sl_reader_reset(r);
    sl_sample *s;
    while (rc >= 0 && (rc = sl_reader_next(r, &s)) == SL_OK) {
      *sum += test_sample_i64(s, 0);
      sl_sample_release(s);
    }
    if (rc == SL_EOF) rc = SL_OK;
  }
  sl_reader_destroy(r);
  return rc;
}

static void sweep_allocation_failures(int (*build)(sl_reader **)) {
  int64_t want, got;
  ASSERT_OK(run_twice(build, &want));
  for (long k = 0;; k++) {
    ASSERT_LE(k, 100000);
    sl__alloc_fail_after(k);
    int rc = run_twice(build, &got);
    long made = sl__alloc_fail_after(-1);
    if (rc < 0) {
      ASSERT_TRUE(rc != SL_EOF);
      ASSERT_TRUE(sl_last_error()[0] != '\0');
      continue;
    }
    ASSERT_EQ(got, want); /* a run that succeeded is complete */
    if (made <= k) break; /* no allocation failed: all points covered */
  }
}

TEST(allocation_failures_leave_no_leaks_linear) {
  sweep_allocation_failures(build_linear);
}

TEST(allocation_failures_leave_no_leaks_zip) {
  g_j_schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(g_j_schema, "j", SL_I64, 0, NULL));
  sweep_allocation_failures(build_zip);
  sl_schema_release(g_j_schema);
}

/* A message longer than the 1023-byte slot loses its middle, not its end:
 * the stage stays at the start and the reason at the end, also for a
 * 2000-byte path and through sl_wrap_error (issue 13). */
TEST(long_messages_keep_their_reason) {
  char path[2001];
  memset(path, 'd', 2000);
  for (int i = 100; i < 2000; i += 100)
    path[i] = '/';
  memcpy(path + 1990, "/file.slr", 10); /* ends the string */
  ASSERT_RC(sl_set_error(SL_EIO, "open: %s: cannot open: %s", path,
                         "No such file or directory"),
            SL_EIO);
  const char *m = sl_last_error();
  ASSERT_EQ(strlen(m), 1023);
  ASSERT_TRUE(strncmp(m, "open: dddd", 10) == 0);
  ASSERT_CONTAINS(m, "...");
  const char *want = "/file.slr: cannot open: No such file or directory";
  ASSERT_STREQ(m + strlen(m) - strlen(want), want);
  ASSERT_EQ(sl_last_error_code(), SL_EIO);

  /* Wrapped: the new prefix is kept, and the old reason still ends it. */
  ASSERT_RC(sl_wrap_error(SL_EIO, "open_files: epoch 0, sample 5"), SL_EIO);
  m = sl_last_error();
  ASSERT_EQ(strlen(m), 1023);
  ASSERT_TRUE(strncmp(m, "open_files: epoch 0, sample 5: open: d", 38) == 0);
  ASSERT_STREQ(m + strlen(m) - strlen(want), want);

  /* A long prefix too. */
  ASSERT_RC(sl_set_error(SL_ECORRUPT, "bad chunk"), SL_ECORRUPT);
  ASSERT_RC(sl_wrap_error(SL_ECORRUPT, "%s", path), SL_ECORRUPT);
  m = sl_last_error();
  ASSERT_EQ(strlen(m), 1023);
  ASSERT_TRUE(strncmp(m, "dddd", 4) == 0);
  want = "/file.slr: bad chunk";
  ASSERT_STREQ(m + strlen(m) - strlen(want), want);

  /* Multi-byte characters are never cut in two. */
  char u[3001] = "";
  for (int i = 0; i < 1000; i++)
    strcat(u, "\xc3\xa9"); /* e-acute, 2 bytes */
  sl_set_error(SL_EINVAL, "x%s", u);
  m = sl_last_error();
  ASSERT_LE(strlen(m), 1023);
  const char *dots = strstr(m, "...");
  ASSERT_NOT_NULL(dots);
  ASSERT_EQ((dots - m - 1) % 2, 0);        /* head: 'x' + whole pairs */
  ASSERT_EQ(strlen(dots + 3) % 2, 0);      /* tail: whole pairs */
  ASSERT_TRUE((unsigned char)dots[3] == 0xc3);

  /* Short messages are as before. */
  sl_set_error(SL_EINVAL, "short %d", 7);
  ASSERT_STREQ(sl_last_error(), "short 7");

  /* Through a real open: the file's reason ends the message. */
  char *deep = malloc(4200);
  snprintf(deep, 4200, "/nonexistent-dir-%s/x.slr", path + 1000);
  sl_slr_file *f;
  ASSERT_RC(sl_slr_open(deep, NULL, &f), SL_EIO);
  want = "/x.slr: cannot open: No such file or directory";
  m = sl_last_error();
  ASSERT_STREQ(m + strlen(m) - strlen(want), want);
  free(deep);
}

/* sl__error_keep, the one "keep the inner message" (issue 25): a callee's
 * message for the same code stays; another code, or none, gets the
 * stage's. */
TEST(error_keep_keeps_the_callee_message_of_the_same_code) {
  sl_set_error(SL_EIO, "inner: disk on fire");
  ASSERT_RC(sl__error_keep(SL_EIO, "outer %d", 1), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "inner: disk on fire");
  ASSERT_RC(sl__error_keep(SL_EINVAL, "outer %d", 2), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "outer 2");
  ASSERT_EQ(sl_last_error_code(), SL_EINVAL);
  sl_clear_error();
  ASSERT_RC(sl__error_keep(SL_EINVAL, "outer %d", 3), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "outer 3");
}

/* sl__decorator_state, the one allocation of a decorator's state (issue
 * 25): the upstream is its first member, or destroyed when memory is
 * short (the sweeps above check that nothing leaks). */
TEST(decorator_state_holds_the_upstream_or_destroys_it) {
  typedef struct {
    sl_reader *up;
    int x;
  } st;
  sl_reader *up;
  ASSERT_OK(sl_reader_range(3, &up));
  st *s = sl__decorator_state("t", up, sizeof *s);
  ASSERT_NOT_NULL(s);
  ASSERT_PTR_EQ(s->up, up);
  ASSERT_EQ(s->x, 0);
  sl_reader_destroy(s->up);
  sl__free(s);
  ASSERT_OK(sl_reader_range(3, &up));
  sl__alloc_fail_after(0);
  s = sl__decorator_state("t", up, sizeof *s);
  sl__alloc_fail_after(-1);
  ASSERT_NULL(s);
  ASSERT_EQ(sl_last_error_code(), SL_ENOMEM);
  ASSERT_STREQ(sl_last_error(), "t: cannot allocate");
}

static int nothing_next(void *ud, sl_sample **out) {
  (void)ud;
  *out = NULL;
  return SL_OK;
}

static void count_free(void *ud) {
  (*(int *)ud)++;
}

/* sl__stage_free, the common end of a stage's destroy (issue 25): the
 * upstream is destroyed once, the schema reference and the state are
 * released (ASan: nothing leaks), and a source's NULL upstream and a NULL
 * schema are no-ops. */
TEST(stage_free_destroys_the_upstream_and_frees_the_state) {
  int freed = 0;
  sl_schema *sc = sl_schema_new();
  ASSERT_NOT_NULL(sc);
  ASSERT_OK(sl_schema_add(sc, "i", SL_I64, 0, NULL));
  sl_reader *up;
  ASSERT_OK(sl_reader_from_generator(sc, nothing_next, NULL, count_free, &freed,
                                     &up));
  void *state = sl__calloc(1, 64);
  ASSERT_NOT_NULL(state);
  sl__stage_free(state, up, sc); /* takes our reference to sc */
  ASSERT_EQ(freed, 1);
  state = sl__calloc(1, 64);
  ASSERT_NOT_NULL(state);
  sl__stage_free(state, NULL, NULL);
  sl__stage_free(NULL, NULL, NULL);
  ASSERT_EQ(freed, 1);
}

/* sl__decorator_opts, a decorator's options copy (issue 25): NULL keeps
 * the defaults and the upstream, a caller's struct is copied, and a bad one
 * fails with sl__opts_copy's error and destroys the upstream. */
TEST(decorator_opts_copies_or_destroys_the_upstream) {
  typedef struct {
    size_t size;
    int x;
  } opts;
  int freed = 0;
  sl_schema *sc = sl_schema_new();
  ASSERT_NOT_NULL(sc);
  sl_reader *up;
  ASSERT_OK(sl_reader_from_generator(sc, nothing_next, NULL, count_free,
                                     &freed, &up));
  sl_schema_release(sc);
  opts o = {sizeof o, 7}, in = {sizeof in, 9}, bad = {0, 9};
  ASSERT_OK(sl__decorator_opts(up, "t_opts", &o, sizeof o, NULL));
  ASSERT_EQ(o.x, 7);
  ASSERT_OK(sl__decorator_opts(up, "t_opts", &o, sizeof o, &in));
  ASSERT_EQ(o.x, 9);
  ASSERT_EQ(freed, 0);
  o.x = 7;
  ASSERT_RC(sl__decorator_opts(up, "t_opts", &o, sizeof o, &bad), SL_EINVAL);
  ASSERT_EQ(freed, 1);
  ASSERT_EQ(o.x, 7);
  ASSERT_NOT_NULL(strstr(sl_last_error(), "t_opts"));
}

TEST(sample_out_hands_over_or_releases) {
  sl_schema *sc = sl_schema_new();
  ASSERT_NOT_NULL(sc);
  ASSERT_OK(sl_schema_add(sc, "x", SL_I64, 0, NULL));
  sl_sample *s = sl_sample_new(sc), *out = NULL;
  ASSERT_NOT_NULL(s);
  ASSERT_OK(sl__sample_out(SL_OK, s, &out));
  ASSERT_TRUE(out == s);
  sl_sample_release(out);
  out = NULL;
  s = sl_sample_new(sc); /* released by sl__sample_out (ASan: no leak) */
  ASSERT_NOT_NULL(s);
  ASSERT_RC(sl__sample_out(SL_EIO, s, &out), SL_EIO);
  ASSERT_TRUE(out == NULL);
  sl_schema_release(sc);
}
