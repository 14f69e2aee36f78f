/*
 * threads.c - how many worker threads a stage may ask for, and starting one.
 *
 * Every stage that owns threads (prefetch, open_files, decode_image, the Lua
 * map/filter and reader, double_buffer, interleave) starts them here, so
 * that:
 *
 *   - a thread count beyond what the machine runs well (4 x the CPUs the
 *     process may use, cpus.c, at least 8: sl__thread_advised) is
 *     accepted, as tf.data's num_parallel_calls and Paddle's xmap_readers
 *     accept it, so a script
 *     written for a 32-core machine runs on a laptop; the first such stage
 *     of the process prints one notice on stderr, and `sluice run --stats`
 *     (sl_stats_format) shows every stage running more threads than that;
 *   - only a hard ceiling is refused (SLUICE_MAX_THREADS when that is set
 *     to an integer in 1..SL__THREADS_HARD_MAX, else SL__THREADS_HARD_MAX):
 *     one message naming the stage and the limit, instead of thousands of
 *     threads (each with its own stack, and for Lua stages its own Lua
 *     state) that exhaust the process;
 *   - a thread that cannot be created is an error the stage reports, never a
 *     stage that silently runs with fewer threads than it was asked for;
 *   - every thread carries a name (`sl-<stage>`) in ps, top and gdb.
 *
 * The environment is read at every check (stages are built rarely), so a
 * test or a launcher can set SLUICE_MAX_THREADS before building a pipeline;
 * setting it also silences the notice (the limit is then the user's own).
 */
#include "core/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The variable that overrides the limit. */
#define LIMIT_ENV "SLUICE_MAX_THREADS"

/* The limit from the environment: 0 when unset or not a valid number. */
static long env_limit(void) {
  const char *s = getenv(LIMIT_ENV);
  if (!s || !*s) return 0;
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < 1 || v > SL__THREADS_HARD_MAX) return 0;
  return v;
}

long sl__thread_limit(void) {
  long v = env_limit();
  return v ? v : SL__THREADS_HARD_MAX;
}

long sl__thread_advised(void) {
  long v = 4 * sl__cpu_count();
  return v < 8 ? 8 : v;
}

long sl__threads_auto_max(void) {
  long n = sl__cpu_count();
  if (n > SL__THREADS_AUTO_CAP) n = SL__THREADS_AUTO_CAP;
  long limit = sl__thread_limit();
  if (n > limit) n = limit;
  return n < 1 ? 1 : n;
}

long sl__threads_resolve(long threads) {
  return threads == SL__THREADS_AUTO ? sl__threads_auto_max() : threads;
}

/* Stages accepted with more threads than advised (process-wide). */
static atomic_long oversubscribed = 0;

long sl__threads_oversubscribed(void) {
  return atomic_load(&oversubscribed);
}

int sl__threads_check(const char *stage, long threads) {
  SL_RETURN_ERROR_IF(threads < 1, SL_EINVAL,
                     "%s: threads must be >= 1 (got %ld)", stage, threads);
  long limit = sl__thread_limit();
  bool from_env = env_limit() != 0;
  if (threads > limit) {
    if (from_env)
      return sl_set_error(SL_EINVAL,
                          "%s: threads = %ld is more than the limit of %ld "
                          "set by " LIMIT_ENV,
                          stage, threads, limit);
    return sl_set_error(SL_EINVAL,
                        "%s: threads = %ld is more than the limit of %ld "
                        "threads a stage may start (" LIMIT_ENV
                        " may set a lower one)",
                        stage, threads, limit);
  }
  long advised = sl__thread_advised();
  if (threads <= advised) return SL_OK;
  /* Accepted: said once per process (not at all under the user's own
   * limit), so a loop of pipelines does not flood stderr. */
  if (atomic_fetch_add(&oversubscribed, 1) == 0 && !from_env)
    fprintf(stderr,
            "sluice: %s: threads = %ld is more than this machine runs well "
            "(4 x %ld CPUs, at least 8: %ld); accepted, the threads share "
            "the CPUs (said once; set " LIMIT_ENV " to cap or to accept "
            "silently)\n",
            stage, threads, sl__cpu_count(), advised);
  return SL_OK;
}

/* Test hook state: starts left before every start fails (< 0: off). */
static atomic_long fail_after = -1;

long sl__thread_fail_after(long n) {
  return atomic_exchange(&fail_after, n);
}

/* True when the test hook says this start fails (EAGAIN, as pthread_create
 * reports a lack of resources). */
static bool hook_fails(void) {
  long left = atomic_load(&fail_after);
  while (left >= 0) {
    if (left == 0) return true;
    if (atomic_compare_exchange_weak(&fail_after, &left, left - 1))
      return false;
  }
  return false;
}

int sl__thread_start(pthread_t *tid, const char *stage, const char *name,
                     void *(*fn)(void *), void *arg) {
  int err = hook_fails() ? EAGAIN : pthread_create(tid, NULL, fn, arg);
  if (err)
    return sl_set_error(SL_ENOMEM, "%s: cannot start a worker thread: %s",
                        stage, strerror(err));
#if defined(__linux__)
  /* From the creating thread: the name is there before the thread runs
   * anything worth seeing.  A failure (name too long) only loses the name. */
  (void)pthread_setname_np(*tid, name);
#else
  (void)name;
#endif
  return SL_OK;
}
