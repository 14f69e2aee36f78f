/*
 * bench_util.h - helpers the benchmarks share (bench_*.c; header-only, each
 * benchmark is one translation unit): clocks, the median of runs, a
 * deterministic data generator, and CHECK for library calls.
 */
#ifndef SLUICE_BENCH_UTIL_H
#define SLUICE_BENCH_UTIL_H

#include "sluice.h"

#include <pthread.h>
#include <stdbool.h>
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

/* Fills px[0..h*w) with image `i`: a dark background and one bright
 * ellipse (position, radii and brightness drawn from *state) with texture,
 * and faint noise on some background pixels, so that it compresses about
 * like Fashion-MNIST's u8 images (~1.8x at zstd level 3). */
static inline void bench_image_u8(uint8_t *px, int h, int w, int64_t i,
                                  uint64_t *state) {
  (void)i;
  uint64_t r = bench_splitmix64(state);
  double cy = h * (0.3 + 0.4 * (double)(r & 0xff) / 255.0);
  double cx = w * (0.3 + 0.4 * (double)((r >> 8) & 0xff) / 255.0);
  double ry = h * (0.15 + 0.3 * (double)((r >> 16) & 0xff) / 255.0);
  double rx = w * (0.15 + 0.3 * (double)((r >> 24) & 0xff) / 255.0);
  int level = 96 + (int)((r >> 32) % 128);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      double dy = (y - cy) / ry, dx = (x - cx) / rx;
      int v = 0;
      uint64_t n = bench_splitmix64(state);
      if (dy * dy + dx * dx <= 1.0)
        v = level + (int)(n % 96) - 48;
      else if ((n & 0x300) == 0) /* 1 in 4 background pixels */
        v = (int)((n >> 16) % 24);
      px[(size_t)y * (size_t)w + (size_t)x] = (uint8_t)(v < 0 ? 0 : v);
    }
}

/* The length of token sequence `i`: 16..511, skewed to short (the
 * minimum of two uniform draws), mean ~180. */
static inline int64_t bench_token_len(int64_t i, uint64_t *state) {
  (void)i;
  uint64_t a = bench_splitmix64(state) % 496, b = bench_splitmix64(state) % 496;
  return 16 + (int64_t)(a < b ? a : b);
}

/* Fills tok[0..len) with token ids in [0, 32000) drawn from a Zipf-like
 * distribution (the minimum of three uniform draws, squared), so that
 * frequent ids dominate like in tokenised text. */
static inline void bench_tokens(int32_t *tok, int64_t len, uint64_t *state) {
  for (int64_t k = 0; k < len; k++) {
    uint64_t r = bench_splitmix64(state);
    double u = (double)(r & 0xfffff) / 1048576.0;
    double v = (double)((r >> 20) & 0xfffff) / 1048576.0;
    double x = (double)((r >> 40) & 0xfffff) / 1048576.0;
    double m = u < v ? (u < x ? u : x) : (v < x ? v : x);
    tok[k] = (int32_t)(m * m * 32000.0);
  }
}

/* The parallelism probe: how much faster two threads finish two equal
 * pieces of pure CPU work (a dependent float loop, no memory traffic, no
 * sharing) than one thread finishes one, i.e. how many CPUs the machine gives
 * this process at that moment.  2.0 on two idle cores; close to 1.0 when
 * other processes hold one of them.  A ceiling for any 2-thread speed-up
 * measured at the same time. */
static inline void *bench_probe_work(void *arg) {
  volatile double *out = arg;
  double x = 1.0;
  for (long i = 0; i < 20000000; i++)
    x = x * 1.0000001 + 1e-9;
  *out = x;
  return NULL;
}

static inline double bench_parallel_probe(void) {
  double a = 0, b = 0;
  double t0 = now_s();
  bench_probe_work((void *)&a);
  double one = now_s() - t0;
  pthread_t th;
  t0 = now_s();
  if (pthread_create(&th, NULL, bench_probe_work, (void *)&b) != 0) return 0;
  bench_probe_work((void *)&a);
  pthread_join(th, NULL);
  double two = now_s() - t0;
  return 2.0 * one / two;
}

/* Writes an llm.c token shard (a header of 256 int32: magic 20240520,
 * version 1, n; then n uint16 tokens below 50257 from bench_splitmix64 on
 * *state) to `path`; exits 1 with the path when it cannot. */
static inline void bench_write_token_shard(const char *path, long long n,
                                           uint64_t *state) {
  FILE *f = fopen(path, "wb");
  int32_t h[256] = {20240520, 1, (int32_t)n};
  bool ok = f && fwrite(h, 4, 256, f) == 256;
  uint16_t buf[4096];
  for (long long i = 0; ok && i < n;) {
    int k = 0;
    for (; k < 4096 && i < n; k++, i++)
      buf[k] = (uint16_t)(bench_splitmix64(state) % 50257);
    ok = fwrite(buf, 2, (size_t)k, f) == (size_t)k;
  }
  if (f && fclose(f) != 0) ok = false;
  if (!ok) {
    perror(path);
    exit(1);
  }
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
