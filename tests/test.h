/*
 * test.h - the C test harness: TEST(name) functions registered at load time,
 * ASSERT_* macros that print both operands, and a per-test watchdog (a hung
 * test fails instead of blocking CI).  Run `test_x` for every test in a file,
 * `test_x name` for one; CMake registers each TEST as its own CTest test.
 */
#ifndef SLUICE_TEST_H
#define SLUICE_TEST_H

#include "sluice.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
/* Stops the test with a failure message (prints, then exits 1). */
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

/* Ends the test as skipped, saying why (a layer this build leaves out): it
 * exits 77, which CTest reports as Skipped (SKIP_RETURN_CODE), never as a
 * pass. */
#define TEST_SKIP(why)                                                         \
  do {                                                                         \
    printf("skipped: %s\n", (why));                                            \
    fflush(stdout);                                                            \
    exit(77);                                                                  \
  } while (0)

/* A test of a layer this build leaves out: registered by its TEST line in
 * the branch that has the layer (CMake reads the TEST lines, so write this
 * form in the other branch), reported Skipped with `why`. */
#define TEST_SKIPPED(name, why)                                                \
  TEST(name) {                                                                 \
    TEST_SKIP(why);                                                            \
  }

#define TEST(name)                                                             \
  static void test_##name(void);                                               \
  __attribute__((constructor)) static void test_reg_##name(void) {             \
    test_register(#name, test_##name);                                         \
  }                                                                            \
  static void test_##name(void)

#define ASSERT_TRUE(c)                                                         \
  do {                                                                         \
    if (!(c)) test_fail(__FILE__, __LINE__, "expected true: %s", #c);          \
  } while (0)

#define ASSERT_EQ(a, b)                                                        \
  do {                                                                         \
    long long sl_t_a_ = (long long)(a), sl_t_b_ = (long long)(b);              \
    if (sl_t_a_ != sl_t_b_)                                                    \
      test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, sl_t_a_, \
                sl_t_b_);                                                      \
  } while (0)

#define ASSERT_NE(a, b)                                                        \
  do {                                                                         \
    long long sl_t_a_ = (long long)(a), sl_t_b_ = (long long)(b);              \
    if (sl_t_a_ == sl_t_b_)                                                    \
      test_fail(__FILE__, __LINE__, "%s != %s: both %lld", #a, #b, sl_t_a_);   \
  } while (0)

#define ASSERT_GE(a, b)                                                        \
  do {                                                                         \
    long long sl_t_a_ = (long long)(a), sl_t_b_ = (long long)(b);              \
    if (!(sl_t_a_ >= sl_t_b_))                                                 \
      test_fail(__FILE__, __LINE__, "%s >= %s: %lld < %lld", #a, #b, sl_t_a_,  \
                sl_t_b_);                                                      \
  } while (0)

#define ASSERT_LE(a, b)                                                        \
  do {                                                                         \
    long long sl_t_a_ = (long long)(a), sl_t_b_ = (long long)(b);              \
    if (!(sl_t_a_ <= sl_t_b_))                                                 \
      test_fail(__FILE__, __LINE__, "%s <= %s: %lld > %lld", #a, #b, sl_t_a_,  \
                sl_t_b_);                                                      \
  } while (0)

#define ASSERT_PTR_EQ(a, b)                                                    \
  do {                                                                         \
    const void *sl_t_a_ = (a), *sl_t_b_ = (b);                                 \
    if (sl_t_a_ != sl_t_b_)                                                    \
      test_fail(__FILE__, __LINE__, "%s == %s: %p != %p", #a, #b, sl_t_a_,     \
                sl_t_b_);                                                      \
  } while (0)

#define ASSERT_NULL(a) ASSERT_PTR_EQ(a, NULL)
#define ASSERT_NOT_NULL(a)                                                     \
  do {                                                                         \
    if ((a) == NULL)                                                           \
      test_fail(__FILE__, __LINE__, "%s is NULL (last error: %s)", #a,         \
                sl_last_error());                                              \
  } while (0)

#define ASSERT_STREQ(a, b)                                                     \
  do {                                                                         \
    const char *sl_t_a_ = (a), *sl_t_b_ = (b);                                 \
    if (!sl_t_a_ || !sl_t_b_ || strcmp(sl_t_a_, sl_t_b_) != 0)                 \
      test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b,      \
                sl_t_a_ ? sl_t_a_ : "(null)", sl_t_b_ ? sl_t_b_ : "(null)");   \
  } while (0)

/* `hay` contains `needle`. */
#define ASSERT_CONTAINS(hay, needle)                                           \
  do {                                                                         \
    const char *sl_t_h_ = (hay), *sl_t_n_ = (needle);                          \
    if (!sl_t_h_ || !strstr(sl_t_h_, sl_t_n_))                                 \
      test_fail(__FILE__, __LINE__, "%s does not contain \"%s\": \"%s\"",      \
                #hay, sl_t_n_, sl_t_h_ ? sl_t_h_ : "(null)");                  \
  } while (0)

/* A sluice call returns SL_OK (or any non-negative value). */
#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    int sl_t_rc_ = (expr);                                                     \
    if (sl_t_rc_ < 0)                                                          \
      test_fail(__FILE__, __LINE__, "%s failed: %s (%s)", #expr,               \
                sl_err_name(sl_t_rc_), sl_last_error());                       \
  } while (0)

/* A sluice call returns exactly `code`. */
#define ASSERT_RC(expr, code)                                                  \
  do {                                                                         \
    int sl_t_rc_ = (expr), sl_t_want_ = (code);                                \
    if (sl_t_rc_ != sl_t_want_)                                                \
      test_fail(__FILE__, __LINE__, "%s: got %s, want %s (last error: %s)",    \
                #expr, sl_err_name(sl_t_rc_), sl_err_name(sl_t_want_),         \
                sl_last_error());                                              \
  } while (0)

#endif
