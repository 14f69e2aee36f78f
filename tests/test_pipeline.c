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

#include <stdint.h>

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
