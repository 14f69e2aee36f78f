/* test_threads.c - the thread limit every threaded stage checks, its
 * override, and starting named threads (src/core/threads.c). */
#include "test.h"

#include "core/internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

static void limit_env(const char *v) {
  if (v)
    setenv("SLUICE_MAX_THREADS", v, 1);
  else
    unsetenv("SLUICE_MAX_THREADS");
}

TEST(default_limit_is_four_per_cpu_at_least_eight) {
  limit_env(NULL);
  long want = 4 * sl__cpu_count();
  if (want < 8) want = 8;
  ASSERT_EQ(sl__thread_limit(), want);
  ASSERT_OK(sl__threads_check("map (x.lua:1)", 1));
  ASSERT_OK(sl__threads_check("map (x.lua:1)", want));
}

TEST(too_many_threads_name_the_stage_the_limit_and_the_override) {
  limit_env(NULL);
  long lim = sl__thread_limit();
  ASSERT_EQ(sl__threads_check("map (x.lua:1)", lim + 1), SL_EINVAL);
  char want[256];
  snprintf(want, sizeof want,
           "map (x.lua:1): threads = %ld is more than the limit of %ld "
           "(4 x %ld CPUs, at least 8); set SLUICE_MAX_THREADS to raise it",
           lim + 1, lim, sl__cpu_count());
  ASSERT_STREQ(sl_last_error(), want);
  ASSERT_EQ(sl__threads_check("open_files", 10000), SL_EINVAL);
  ASSERT_EQ(sl__threads_check("open_files", 0), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
                "open_files: threads must be >= 1 (got 0)");
}

TEST(the_environment_overrides_the_limit) {
  limit_env("3");
  ASSERT_EQ(sl__thread_limit(), 3);
  ASSERT_OK(sl__threads_check("prefetch", 3));
  ASSERT_EQ(sl__threads_check("prefetch", 4), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
                "prefetch: threads = 4 is more than the limit of 3 set by "
                "SLUICE_MAX_THREADS");
  limit_env("1024");
  ASSERT_EQ(sl__thread_limit(), 1024);
  /* Values outside 1..1024 or not numbers are ignored. */
  long dflt = 4 * sl__cpu_count() < 8 ? 8 : 4 * sl__cpu_count();
  const char *bad[] = {"0", "-2", "1025", "8x", "", "lots"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    limit_env(bad[i]);
    ASSERT_EQ(sl__thread_limit(), dflt);
  }
  limit_env(NULL);
}

static void *store_name(void *arg) {
  char *name = arg;
  /* The creator names the thread right after creating it: wait for it. */
  for (int i = 0; i < 2000; i++) {
    pthread_getname_np(pthread_self(), name, 16);
    if (strcmp(name, "sl-test-name") == 0) break;
    sched_yield();
  }
  return NULL;
}

TEST(started_threads_run_and_carry_their_name) {
  pthread_t t;
  char name[16] = "";
  ASSERT_OK(sl__thread_start(&t, "test", "sl-test-name", store_name, name));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_STREQ(name, "sl-test-name");
}

static void *nothing(void *arg) {
  return arg;
}

TEST(a_thread_that_cannot_start_is_an_error_naming_the_stage) {
  pthread_t t;
  sl__thread_fail_after(1);
  ASSERT_OK(sl__thread_start(&t, "open_files", "sl-x", nothing, NULL));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(sl__thread_start(&t, "open_files", "sl-x", nothing, NULL),
            SL_ENOMEM);
  ASSERT_STREQ(sl_last_error(),
                "open_files: cannot start a worker thread: Resource "
                "temporarily unavailable");
  ASSERT_EQ(sl__thread_fail_after(-1), 0);
  ASSERT_OK(sl__thread_start(&t, "open_files", "sl-x", nothing, NULL));
  ASSERT_EQ(pthread_join(t, NULL), 0);
}
