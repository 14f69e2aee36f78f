/*
 * test_pipeline.c - the embedding API (sl_pipeline_*): pipelines declared by
 * Lua scripts in tests/scripts/, opened and pulled from C; arguments seen as
 * `...` and `arg`; epochs; Lua maps on worker threads; every error path
 * (syntax, runtime error, wrong return value, Lua error during iteration,
 * missing file, missing field); closing mid-pass with busy workers.
 *
 * The scripts `require "sluice"`: CTest gives this test LUA_PATH pointing at
 * the source tree's lua/ (their FFI finds libsluice as ffi.C: this test
 * links the shared library).
 */
#include "test.h"
#include "test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SCRIPT(name) SLUICE_SOURCE_DIR "/tests/scripts/" name

static sl_pipeline *open_ok(const char *path, int argc,
                            const char *const *argv) {
  sl_pipeline *p = NULL;
  int rc = sl_pipeline_open_file(path, argc, argv, &p);
  if (rc != SL_OK)
    test_fail(__FILE__, __LINE__, "open %s: %s: %s", path, sl_err_name(rc),
              sl_last_error());
  ASSERT_NOT_NULL(p);
  return p;
}

/* Pulls one pass of batches of field "i" (i64 [B]) and checks they hold
 * 0, mul, 2*mul, ... (n values) in batches of `b`. */
static void check_range_pass(sl_pipeline *p, int64_t n, int64_t b,
                             int64_t mul) {
  int64_t next = 0, batches = 0;
  sl_sample *batch = NULL;
  int rc;
  while ((rc = sl_pipeline_next(p, &batch)) == SL_OK) {
    const sl_tensor *t = sl_sample_field(batch, "i");
    ASSERT_NOT_NULL(t);
    ASSERT_EQ(sl_tensor_dtype(t), SL_I64);
    ASSERT_EQ(sl_tensor_rank(t), 1);
    int64_t len = sl_tensor_shape(t)[0];
    int64_t want = n - next < b ? n - next : b;
    ASSERT_EQ(len, want);
    const int64_t *v = sl_tensor_data(t);
    for (int64_t k = 0; k < len; k++)
      ASSERT_EQ(v[k], (next + k) * mul);
    next += len;
    batches++;
    sl_sample_release(batch);
  }
  if (rc != SL_EOF)
    test_fail(__FILE__, __LINE__, "next: %s: %s", sl_err_name(rc),
              sl_last_error());
  ASSERT_NULL(batch);
  ASSERT_EQ(next, n);
  ASSERT_EQ(batches, (n + b - 1) / b);
  /* SL_EOF repeats. */
  ASSERT_EQ(sl_pipeline_next(p, &batch), SL_EOF);
}

TEST(range_batches_values_and_epochs) {
  const char *argv[] = {"10", "4"};
  sl_pipeline *p = open_ok(SCRIPT("range_batches.lua"), 2, argv);
  const sl_schema *s = sl_pipeline_schema(p);
  ASSERT_NOT_NULL(s);
  ASSERT_EQ(sl_schema_nfields(s), 1);
  ASSERT_EQ(sl_schema_find(s, "i"), 0);
  check_range_pass(p, 10, 4, 1);
  ASSERT_EQ(sl_pipeline_reset(p), SL_OK);
  check_range_pass(p, 10, 4, 1);
  ASSERT_EQ(sl_pipeline_reset(p), SL_OK);
  check_range_pass(p, 10, 4, 1);
  sl_pipeline_close(p);
}

TEST(missing_field_is_notfound) {
  const char *argv[] = {"5", "5"};
  sl_pipeline *p = open_ok(SCRIPT("range_batches.lua"), 2, argv);
  sl_sample *b = NULL;
  ASSERT_EQ(sl_pipeline_next(p, &b), SL_OK);
  ASSERT_NULL(sl_sample_field(b, "label"));
  ASSERT_EQ(sl_last_error_code(), SL_ENOTFOUND);
  ASSERT_TRUE(strstr(sl_last_error(), "label") != NULL);
  sl_sample_release(b);
  sl_pipeline_close(p);
}

TEST(arguments_as_dots_and_arg) {
  const char *argv[] = {"a", "", "three", NULL};
  sl_pipeline *p = open_ok(SCRIPT("args_echo.lua"), 4, argv);
  /* NULL entries pass "". */
  const int64_t want[] = {1, 0, 5, 0};
  sl_sample *s = NULL;
  for (int i = 0; i < 4; i++) {
    ASSERT_EQ(sl_pipeline_next(p, &s), SL_OK);
    const sl_tensor *len = sl_sample_field(s, "len");
    const sl_tensor *idx = sl_sample_field(s, "index");
    ASSERT_NOT_NULL(len);
    ASSERT_NOT_NULL(idx);
    ASSERT_EQ(sl_tensor_rank(len), 0);
    ASSERT_EQ(*(const int64_t *)sl_tensor_data(len), want[i]);
    ASSERT_EQ(*(const int64_t *)sl_tensor_data(idx), i + 1);
    sl_sample_release(s);
  }
  ASSERT_EQ(sl_pipeline_next(p, &s), SL_EOF);
  sl_pipeline_close(p);

  /* No arguments: `...` is empty and argv may be NULL. */
  p = NULL;
  ASSERT_EQ(sl_pipeline_open_file(SCRIPT("args_echo.lua"), 0, NULL, &p), SL_OK);
  ASSERT_EQ(sl_pipeline_next(p, &s), SL_EOF);
  sl_pipeline_close(p);
}

TEST(lua_map_on_two_threads) {
  const char *argv[] = {"95", "2"};
  sl_pipeline *p = open_ok(SCRIPT("lua_map.lua"), 2, argv);
  check_range_pass(p, 95, 10, 2);
  ASSERT_EQ(sl_pipeline_reset(p), SL_OK);
  check_range_pass(p, 95, 10, 2);
  sl_pipeline_close(p);
}

TEST(open_string) {
  const char *code = "local sluice = require 'sluice'\n"
                     "local n, b = ...\n"
                     "assert(arg[0] == 'inline', arg[0])\n"
                     "return sluice.range(tonumber(n)):batch(tonumber(b))\n";
  const char *argv[] = {"7", "3"};
  sl_pipeline *p = NULL;
  int rc = sl_pipeline_open_string(code, "inline", 2, argv, &p);
  if (rc != SL_OK)
    test_fail(__FILE__, __LINE__, "%s: %s", sl_err_name(rc), sl_last_error());
  check_range_pass(p, 7, 3, 1);
  sl_pipeline_close(p);

  /* The chunk name shows in errors. */
  p = NULL;
  rc = sl_pipeline_open_string("\n\nerror('boom')", "my_chunk", 0, NULL, &p);
  ASSERT_EQ(rc, SL_ELUA);
  ASSERT_NULL(p);
  ASSERT_TRUE(strstr(sl_last_error(), "my_chunk:3: boom") != NULL);
}

TEST(stats_walk_the_scripts_chain) {
  const char *code = "local sluice = require 'sluice'\n"
                     "return sluice.range(20):map(function(s) return s end,"
                     " {threads = 2}):batch(5)\n";
  sl_pipeline *p = NULL;
  int rc = sl_pipeline_open_string(code, "stats", 0, NULL, &p);
  if (rc != SL_OK)
    test_fail(__FILE__, __LINE__, "%s: %s", sl_err_name(rc), sl_last_error());
  sl_sample *b = NULL;
  int batches = 0;
  while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
    sl_sample_release(b);
    batches++;
  }
  ASSERT_RC(rc, SL_EOF);
  ASSERT_EQ(batches, 4);
  sl_stage_stats st[4];
  size_t n = 0;
  ASSERT_OK(sl_pipeline_stats(p, st, 4, &n));
  ASSERT_EQ(n, 3);
  ASSERT_STREQ(st[0].name, "batch");
  ASSERT_EQ(st[0].samples_out, 4);
  ASSERT_STREQ(st[1].name, "map");
  ASSERT_EQ(st[1].threads, 2);
  ASSERT_EQ(st[1].samples_out, 20);
  ASSERT_STREQ(st[2].name, "range");
  ASSERT_RC(sl_pipeline_stats(NULL, st, 4, &n), SL_EINVAL);
  ASSERT_RC(sl_pipeline_stats(p, NULL, 4, &n), SL_EINVAL);
  sl_pipeline_close(p);
}

TEST(syntax_error_is_elua) {
  sl_pipeline *p = (sl_pipeline *)(uintptr_t)1;
  int rc = sl_pipeline_open_file(SCRIPT("syntax_error.lua"), 0, NULL, &p);
  ASSERT_EQ(rc, SL_ELUA);
  ASSERT_NULL(p);
  const char *m = sl_last_error();
  ASSERT_TRUE(strstr(m, "syntax_error.lua") != NULL);
  ASSERT_TRUE(strstr(m, "expected") != NULL || strstr(m, "near") != NULL);

  rc = sl_pipeline_open_string("return (", NULL, 0, NULL, &p);
  ASSERT_EQ(rc, SL_ELUA);
  ASSERT_NULL(p);
  ASSERT_TRUE(strstr(sl_last_error(), "pipeline:1:") != NULL);
}

TEST(runtime_error_has_message_and_traceback) {
  sl_pipeline *p = NULL;
  int rc = sl_pipeline_open_file(SCRIPT("raises.lua"), 0, NULL, &p);
  ASSERT_EQ(rc, SL_ELUA);
  ASSERT_NULL(p);
  const char *m = sl_last_error();
  if (!strstr(m, "raises.lua:4: need at least 10 samples, got 3") ||
      !strstr(m, "stack traceback") || !strstr(m, "raises.lua:6"))
    test_fail(__FILE__, __LINE__, "unexpected message: %s", m);
}

/* A script ending in `return sluice.f(...)` calls f as a tail call, so the
 * script's frame is gone from the traceback when f raises: the message
 * still names the script's line (issue 24, item 21: an open_files pattern
 * matching nothing gave no script line). */
TEST(error_in_a_tail_call_names_the_script_line) {
  sl_pipeline *p = (sl_pipeline *)(uintptr_t)1;
  int rc = sl_pipeline_open_string(
      "local sluice = require 'sluice'\n"
      "\n"
      "return sluice.open_files('/nonexistent-sluice-dir/*.slr')\n",
      "nomatch.lua", 0, NULL, &p);
  ASSERT_EQ(rc, SL_ELUA);
  ASSERT_NULL(p);
  const char *m = sl_last_error();
  ASSERT_CONTAINS(m, "pipeline script (nomatch.lua): nomatch.lua:3: "
                     "open_files: pattern '/nonexistent-sluice-dir/*.slr' "
                     "matches no file");
  ASSERT_CONTAINS(m, "stack traceback:");
  ASSERT_CONTAINS(m, "nomatch.lua:3: in main chunk");

  /* Two returns that are tail calls: the error names the one taken when
   * it can tell (here it cannot: both lines are named). */
  rc = sl_pipeline_open_string(
      "local sluice = require 'sluice'\n"
      "if ... then\n"
      "  return sluice.open_files('/nonexistent-sluice-dir/a*.slr')\n"
      "end\n"
      "return sluice.range(3):map(nil)\n",
      "two.lua", 0, NULL, &p);
  ASSERT_EQ(rc, SL_ELUA);
  ASSERT_CONTAINS(sl_last_error(), "pipeline script (two.lua): two.lua:3/5: "
                                   "sluice: :map(): expected a function");

  /* A script line the traceback already has is not added again. */
  rc = sl_pipeline_open_string(
      "local sluice = require 'sluice'\n"
      "local p = sluice.open_files('/nonexistent-sluice-dir/*.slr')\n"
      "return p\n",
      "direct.lua", 0, NULL, &p);
  ASSERT_EQ(rc, SL_ELUA);
  m = sl_last_error();
  ASSERT_CONTAINS(m, "pipeline script (direct.lua): direct.lua:2: open_files");
  ASSERT_TRUE(strstr(m, "(tail call)") == NULL);
}

TEST(returning_a_number_is_einval) {
  sl_pipeline *p = NULL;
  int rc = sl_pipeline_open_file(SCRIPT("returns_number.lua"), 0, NULL, &p);
  ASSERT_EQ(rc, SL_EINVAL);
  ASSERT_NULL(p);
  const char *m = sl_last_error();
  if (!strstr(m, "returns_number.lua returned a number, not a pipeline"))
    test_fail(__FILE__, __LINE__, "unexpected message: %s", m);

  rc = sl_pipeline_open_string("return {}", "t", 0, NULL, &p);
  ASSERT_EQ(rc, SL_EINVAL);
  ASSERT_TRUE(strstr(sl_last_error(), "t returned a table, not a pipeline"));
  rc = sl_pipeline_open_string("", "nothing", 0, NULL, &p);
  ASSERT_EQ(rc, SL_EINVAL);
  ASSERT_TRUE(strstr(sl_last_error(), "returned a nil, not a pipeline"));
  rc = sl_pipeline_open_string("local p = require('sluice').range(3)\n"
                               "p:close() return p",
                               "closed", 0, NULL, &p);
  ASSERT_EQ(rc, SL_EINVAL);
  ASSERT_TRUE(strstr(sl_last_error(), "pipeline that is closed"));
}

TEST(lua_error_during_iteration_at_its_position) {
  sl_pipeline *p = open_ok(SCRIPT("map_fails.lua"), 0, NULL);
  for (int pass = 0; pass < 2; pass++) {
    sl_sample *s = NULL;
    for (int64_t i = 0; i < 5; i++) {
      int rc = sl_pipeline_next(p, &s);
      if (rc != SL_OK)
        test_fail(__FILE__, __LINE__, "sample %lld: %s: %s", (long long)i,
                  sl_err_name(rc), sl_last_error());
      ASSERT_EQ(*(const int64_t *)sl_tensor_data(sl_sample_field(s, "i")), i);
      sl_sample_release(s);
    }
    ASSERT_EQ(sl_pipeline_next(p, &s), SL_ELUA);
    ASSERT_NULL(s);
    const char *m = sl_last_error();
    if (!strstr(m, "map_fails.lua:4: bad sample 5") ||
        !strstr(m, "stack traceback"))
      test_fail(__FILE__, __LINE__, "unexpected message: %s", m);
    /* Sticky until reset. */
    ASSERT_EQ(sl_pipeline_next(p, &s), SL_ELUA);
    ASSERT_EQ(sl_pipeline_reset(p), SL_OK);
  }
  sl_pipeline_close(p);
}

TEST(missing_file_is_eio) {
  sl_pipeline *p = NULL;
  int rc = sl_pipeline_open_file(SCRIPT("no_such_script.lua"), 0, NULL, &p);
  ASSERT_EQ(rc, SL_EIO);
  ASSERT_NULL(p);
  ASSERT_TRUE(strstr(sl_last_error(), "no_such_script.lua") != NULL);
}

TEST(bad_arguments) {
  sl_pipeline *p = NULL;
  ASSERT_EQ(sl_pipeline_open_file(NULL, 0, NULL, &p), SL_EINVAL);
  ASSERT_EQ(sl_pipeline_open_file(SCRIPT("args_echo.lua"), 0, NULL, NULL),
            SL_EINVAL);
  ASSERT_EQ(sl_pipeline_open_file(SCRIPT("args_echo.lua"), 2, NULL, &p),
            SL_EINVAL);
  ASSERT_EQ(sl_pipeline_open_file(SCRIPT("args_echo.lua"), -1, NULL, &p),
            SL_EINVAL);
  ASSERT_EQ(sl_pipeline_open_string(NULL, "x", 0, NULL, &p), SL_EINVAL);
  ASSERT_NULL(p);
  sl_sample *s = NULL;
  ASSERT_EQ(sl_pipeline_next(NULL, &s), SL_EINVAL);
  ASSERT_EQ(sl_pipeline_reset(NULL), SL_EINVAL);
  ASSERT_NULL(sl_pipeline_schema(NULL));
  sl_pipeline_close(NULL);
}

TEST(close_mid_pass_with_busy_workers) {
  for (int round = 0; round < 100; round++) {
    sl_pipeline *p = open_ok(SCRIPT("busy_map.lua"), 0, NULL);
    /* Some rounds pull a few batches first; others close at once. */
    for (int k = 0; k < round % 3; k++) {
      sl_sample *b = NULL;
      ASSERT_EQ(sl_pipeline_next(p, &b), SL_OK);
      sl_sample_release(b);
    }
    sl_pipeline_close(p);
  }
}

TEST(batches_outlive_close) {
  const char *argv[] = {"6", "3"};
  sl_pipeline *p = open_ok(SCRIPT("range_batches.lua"), 2, argv);
  sl_sample *b = NULL;
  ASSERT_EQ(sl_pipeline_next(p, &b), SL_OK);
  sl_pipeline_close(p);
  const sl_tensor *t = sl_sample_field(b, "i");
  ASSERT_NOT_NULL(t);
  ASSERT_EQ(((const int64_t *)sl_tensor_data(t))[2], 2);
  sl_sample_release(b);
}

/* --- saving and restoring (sl_pipeline_save / sl_pipeline_restore) ------- */

/* A script with a shuffle (its seed is the argument), batches that cut
 * across the shuffle's window and a prefetch holding batches ahead. */
static const char RESUME_CODE[] =
    "local sluice = require 'sluice'\n"
    "local seed = tonumber((...)) or 7\n"
    "return sluice.range(100):shuffle(16, {seed = seed}):batch(8)"
    ":prefetch(3)\n";

/* The demo's shape with a random Lua map on 2 threads (ctx.rng) between
 * the shuffle and the batch. */
static const char RESUME_MAP_CODE[] =
    "local sluice = require 'sluice'\n"
    "local seed = tonumber((...)) or 7\n"
    "return sluice.range(300):shuffle(64, {seed = seed})\n"
    "  :map(function(s, ctx) s.u = ctx.rng:random(1, 1000000) return s end,\n"
    "       {threads = 2, seed = seed}):batch(8):prefetch(3)\n";

static const char *resume_code = RESUME_CODE;

static sl_pipeline *open_resume(const char *seed) {
  const char *argv[] = {seed};
  sl_pipeline *p = NULL;
  int rc = sl_pipeline_open_string(resume_code, "resume", 1, argv, &p);
  if (rc != SL_OK)
    test_fail(__FILE__, __LINE__, "open: %s: %s", sl_err_name(rc),
              sl_last_error());
  return p;
}

/* Pulls up to `n` items across passes (a reset after each end, at most
 * `passes` passes in all, counting from pass *pass), writing their digests
 * (0 for a pass end) to out; returns how many entries it wrote. */
static size_t pull_digests(sl_pipeline *p, size_t n, int *pass, int passes,
                           uint64_t *out) {
  size_t k = 0;
  while (k < n && *pass < passes) {
    sl_sample *b = NULL;
    int rc = sl_pipeline_next(p, &b);
    if (rc == SL_EOF) {
      out[k++] = 0;
      if (++*pass < passes) ASSERT_OK(sl_pipeline_reset(p));
      continue;
    }
    ASSERT_OK(rc);
    out[k++] = test_sample_digest(b);
    sl_sample_release(b);
  }
  return k;
}

/* The resume contract over PASSES passes of the script resume_code: for
 * each cut (entries consumed, pass ends included), a pipeline read that far,
 * saved and closed, and a fresh one restored, give the uninterrupted run. */
static void check_pipeline_cuts(const size_t *cuts, size_t ncuts,
                                size_t want_total) {
  enum { PASSES = 3, MAX = 160 };
  uint64_t whole[MAX], got[MAX];
  int pass = 0;
  sl_pipeline *p = open_resume("7");
  size_t total = pull_digests(p, MAX, &pass, PASSES, whole);
  sl_pipeline_close(p);
  ASSERT_EQ(total, want_total);
  for (size_t c = 0; c < ncuts; c++) {
    pass = 0;
    p = open_resume("7");
    size_t k = pull_digests(p, cuts[c], &pass, PASSES, got);
    ASSERT_EQ(k, cuts[c]);
    void *state = NULL;
    size_t len = 0;
    ASSERT_OK(sl_pipeline_save(p, &state, &len));
    ASSERT_NOT_NULL(state);
    ASSERT_TRUE(len > 0 && len < 4096);
    sl_pipeline_close(p);
    /* A fresh pipeline in the same state. */
    sl_pipeline *q = open_resume("7");
    ASSERT_OK(sl_pipeline_restore(q, state, len));
    sl_free(state);
    size_t rest = pull_digests(q, MAX, &pass, PASSES, got + k);
    ASSERT_EQ(k + rest, total);
    for (size_t i = 0; i < total; i++)
      if (got[i] != whole[i])
        test_fail(__FILE__, __LINE__,
                  "cut %zu: entry %zu differs (%016llx, uninterrupted "
                  "%016llx)",
                  cuts[c], i, (unsigned long long)got[i],
                  (unsigned long long)whole[i]);
    sl_pipeline_close(q);
  }
}

TEST(save_restore_continues_across_passes) {
  /* Cut points: the start, mid pass, just before and after a pass end, in a
   * later pass. */
  const size_t cuts[] = {0, 1, 5, 13, 14, 15, 20, 27, 28, 40};
  resume_code = RESUME_CODE;
  check_pipeline_cuts(cuts, sizeof cuts / sizeof cuts[0],
                      3 * 14); /* 13 batches and an end, three times */
}

TEST(save_restore_with_a_random_lua_map_on_two_threads) {
  const size_t cuts[] = {0, 1, 9, 37, 38, 39, 60, 113};
  resume_code = RESUME_MAP_CODE;
  check_pipeline_cuts(cuts, sizeof cuts / sizeof cuts[0],
                      3 * 39); /* 38 batches (the last of 4) and an end */
  resume_code = RESUME_CODE;
}

TEST(restore_refuses_another_pipelines_state) {
  sl_pipeline *p = open_resume("7");
  sl_sample *b = NULL;
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(sl_pipeline_next(p, &b));
    sl_sample_release(b);
  }
  void *state = NULL;
  size_t len = 0;
  ASSERT_OK(sl_pipeline_save(p, &state, &len));
  sl_pipeline_close(p);

  /* Another seed: refused naming the shuffle; q is left as it was. */
  sl_pipeline *q = open_resume("8");
  sl_pipeline *ref = open_resume("8");
  ASSERT_RC(sl_pipeline_restore(q, state, len), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "shuffle");
  /* Corrupt: one byte flipped, then cut short. */
  unsigned char *bad = malloc(len);
  ASSERT_NOT_NULL(bad);
  memcpy(bad, state, len);
  bad[len / 2] ^= 0x40;
  ASSERT_RC(sl_pipeline_restore(q, bad, len), SL_ECORRUPT);
  ASSERT_RC(sl_pipeline_restore(q, state, len / 2), SL_ECORRUPT);
  ASSERT_RC(sl_pipeline_restore(q, "not a state", 11), SL_ECORRUPT);
  free(bad);
  for (int i = 0; i < 14; i++) {
    sl_sample *x = NULL, *y = NULL;
    int rx = sl_pipeline_next(q, &x), ry = sl_pipeline_next(ref, &y);
    ASSERT_EQ(rx, ry);
    if (rx == SL_OK) ASSERT_EQ(test_sample_digest(x), test_sample_digest(y));
    sl_sample_release(x);
    sl_sample_release(y);
  }
  sl_pipeline_close(ref);

  /* NULL arguments. */
  void *st2 = (void *)1;
  size_t len2 = 1;
  ASSERT_RC(sl_pipeline_save(NULL, &st2, &len2), SL_EINVAL);
  ASSERT_NULL(st2);
  ASSERT_EQ(len2, 0);
  ASSERT_RC(sl_pipeline_save(q, NULL, &len2), SL_EINVAL);
  ASSERT_RC(sl_pipeline_save(q, &st2, NULL), SL_EINVAL);
  ASSERT_RC(sl_pipeline_restore(NULL, state, len), SL_EINVAL);
  ASSERT_RC(sl_pipeline_restore(q, NULL, len), SL_EINVAL);
  sl_pipeline_close(q);
  sl_free(state);
}

TEST(save_at_the_start_is_small_and_restores_in_place) {
  const char *code = "local sluice = require 'sluice'\n"
                     "return sluice.range(10):batch(4)\n";
  sl_pipeline *p = NULL;
  ASSERT_OK(sl_pipeline_open_string(code, "small", 0, NULL, &p));
  void *state = NULL;
  size_t len = 0;
  ASSERT_OK(sl_pipeline_save(p, &state, &len));
  /* A state of two stages and a position is small. */
  ASSERT_TRUE(len < 512);
  ASSERT_OK(sl_pipeline_restore(p, state, len));
  sl_free(state);
  sl_pipeline_close(p);
}
