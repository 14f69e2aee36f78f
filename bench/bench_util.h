/*
 * bench_util.h - helpers the benchmarks share (bench_*.c; header-only, each
 * benchmark is one translation unit): clocks, the median of runs, a
 * deterministic data generator, and CHECK for library calls.
 */
#ifndef SLUICE_BENCH_UTIL_H
#define SLUICE_BENCH_UTIL_H

#include "sluice.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

/* Wall-clock seconds on the monotonic clock (an arbitrary origin). */
static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds (user + system) this process has used, all threads. */
static inline double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
         (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

/* qsort comparator for doubles, ascending. */
static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n-1], n >= 1 (sorts v in place). */
static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The first state of bench_splitmix64 used by the data generators. */
#define BENCH_RNG_SEED 0x9e3779b97f4a7c15ull

/* The next output of the splitmix64 generator with state *state: the
 * deterministic "random" data of the benchmarks. */
static inline uint64_t bench_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Fills x[0..dim) with feature vector `i`: a quantised smooth signal plus a
 * little noise drawn from the generator *state, so that it compresses ~2-3x
 * like real numeric features. */
static inline void bench_features(float *x, int dim, int64_t i,
                                  uint64_t *state) {
  for (int k = 0; k < dim; k++)
    x[k] = (float)((int)(100.0 * (double)((k * 7 + i) % 97) / 97.0) / 100.0) +
           (float)(bench_splitmix64(state) % 8) / 1024.0f;
}

/* Reports a failed library call "<prog>: <expr>: <code name> (<detail>)"
 * and exits 1. */
static inline void bench_fail(const char *prog, const char *expr, int rc) {
  fprintf(stderr, "%s: %s: %s (%s)\n", prog, expr, sl_err_name(rc),
          sl_last_error());
  exit(1);
}

/* CHECK(call): exits through bench_fail when the call returns an error.
 * The including file defines BENCH_NAME (its program name) first. */
#ifdef BENCH_NAME
#define CHECK(expr)                                                            \
  do {                                                                         \
    int rc_ = (expr);                                                          \
    if (rc_ < 0) bench_fail(BENCH_NAME, #expr, rc_);                           \
  } while (0)
#endif

#endif
