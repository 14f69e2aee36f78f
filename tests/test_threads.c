/* test_threads.c - the thread limit every threaded stage checks (a hard
 * ceiling; more than the machine runs well is accepted with a notice), its
 * override, and starting named threads (src/core/threads.c). */
#include "test.h"

#include "core/internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void limit_env(const char *v) {
  if (v)
    setenv("SLUICE_MAX_THREADS", v, 1);
  else
    unsetenv("SLUICE_MAX_THREADS");
}

/* Runs check(stage, threads) with stderr going to a file; returns its rc
 * and leaves what it printed in out (NUL-terminated). */
static int check_capturing(const char *stage, long threads, char *out,
                           size_t cap) {
  fflush(stderr);
  int saved = dup(2);
  FILE *f = tmpfile();
  if (saved < 0 || !f) abort();
  dup2(fileno(f), 2);
  int rc = sl__threads_check(stage, threads);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(f);
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = '\0';
  fclose(f);
  return rc;
}

TEST(more_than_four_per_cpu_is_accepted_with_one_notice) {
  limit_env(NULL);
  long want = 4 * sl__cpu_count();
  if (want < 8) want = 8;
  ASSERT_EQ(sl__thread_advised(), want);
  ASSERT_EQ(sl__thread_limit(), SL__THREADS_HARD_MAX);
  char err[1024];
  ASSERT_OK(check_capturing("map (x.lua:1)", 1, err, sizeof err));
  ASSERT_OK(check_capturing("map (x.lua:1)", want, err, sizeof err));
  ASSERT_STREQ(err, "");
  ASSERT_EQ(sl__threads_oversubscribed(), 0);
  /* A script written for a bigger machine (issue 24, item 13: this was
   * SL_EINVAL): accepted, said once on stderr. */
  ASSERT_OK(check_capturing("map (x.lua:1)", want + 8, err, sizeof err));
  char notice[512];
  snprintf(notice, sizeof notice,
           "sluice: map (x.lua:1): threads = %ld is more than this machine "
           "runs well (4 x %ld CPUs, at least 8: %ld); accepted, the threads "
           "share the CPUs (said once; set SLUICE_MAX_THREADS to cap or to "
           "accept silently)\n",
           want + 8, sl__cpu_count(), want);
  ASSERT_STREQ(err, notice);
  ASSERT_OK(check_capturing("prefetch", SL__THREADS_HARD_MAX, err, sizeof err));
  ASSERT_STREQ(err, "");
  ASSERT_EQ(sl__threads_oversubscribed(), 2);
}

TEST(stats_show_the_oversubscribed_stages) {
  long advised = sl__thread_advised();
  sl_stage_stats st[2] = {
      {.name = "map (x.lua:3)", .threads = (int)advised + 1},
      {.name = "range", .depth = 1}};
  char buf[2048];
  ASSERT_TRUE(sl_stats_format(st, 2, 1.0, buf, sizeof buf) > 0);
  char want[256];
  snprintf(want, sizeof want,
           "oversubscribed: map (x.lua:3) runs %ld threads on %ld CPUs "
           "(advised at most %ld: 4 x the CPUs, at least 8)\n",
           advised + 1, sl__cpu_count(), advised);
  ASSERT_CONTAINS(buf, want);
  st[0].threads = (int)advised;
  ASSERT_TRUE(sl_stats_format(st, 2, 1.0, buf, sizeof buf) > 0);
  ASSERT_TRUE(strstr(buf, "oversubscribed") == NULL);
}

TEST(too_many_threads_name_the_stage_the_limit_and_the_override) {
  limit_env(NULL);
  long lim = sl__thread_limit();
  ASSERT_EQ(lim, 1024);
  ASSERT_EQ(sl__threads_check("map (x.lua:1)", lim + 1), SL_EINVAL);
  char want[256];
  snprintf(want, sizeof want,
           "map (x.lua:1): threads = %ld is more than the limit of %ld "
           "threads a stage may start (SLUICE_MAX_THREADS may set a lower "
           "one)",
           lim + 1, lim);
  ASSERT_STREQ(sl_last_error(), want);
  ASSERT_EQ(sl__threads_check("open_files", 10000), SL_EINVAL);
  ASSERT_EQ(sl__threads_check("open_files", 0), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open_files: threads must be >= 1 (got 0)");
}

TEST(the_environment_overrides_the_limit) {
  limit_env("3");
  ASSERT_EQ(sl__thread_limit(), 3);
  ASSERT_OK(sl__threads_check("prefetch", 3));
  ASSERT_EQ(sl__threads_check("prefetch", 4), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
               "prefetch: threads = 4 is more than the limit of 3 set by "
               "SLUICE_MAX_THREADS");
  /* The user's own limit: more than advised is accepted silently. */
  long over = sl__thread_advised() + 1;
  char env[32], err[512];
  snprintf(env, sizeof env, "%ld", over);
  limit_env(env);
  ASSERT_OK(check_capturing("prefetch", over, err, sizeof err));
  ASSERT_STREQ(err, "");
  ASSERT_EQ(sl__threads_oversubscribed(), 1);
  limit_env("1024");
  ASSERT_EQ(sl__thread_limit(), 1024);
  /* Values outside 1..1024 or not numbers are ignored. */
  const char *bad[] = {"0", "-2", "1025", "8x", "", "lots"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    limit_env(bad[i]);
    ASSERT_EQ(sl__thread_limit(), SL__THREADS_HARD_MAX);
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
