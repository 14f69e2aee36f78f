/*
 * bench_global_shuffle.c - sl_global_shuffle over an SLR file against a
 * sequential pass of the same file (issue 28, docs/PERFORMANCE.md "The
 * frame cache of a global shuffle").
 *
 *   bench_global_shuffle --slr FILE [--runs N] [--budget BYTES]
 *                        [--nocache-samples N] [--threads LIST]
 *
 * For each thread count of --threads (default 0: the caller's thread;
 * N: N workers, sl_global_shuffle_opts.threads), per run, interleaved, the
 * file in the page cache:
 *
 *   seq          every record through sl_slr_reader
 *   cold         the first pass of a new sl_global_shuffle whose chain has
 *                a memory budget of --budget bytes (default 8 GiB) and the
 *                default frame cache (SL_GLOBAL_SHUFFLE_CACHE_AUTO): each
 *                frame is decoded when first drawn and kept
 *   warm         its second pass: every frame kept, none decoded
 *   nocache      the first --nocache-samples draws (default 50000, at most
 *                the file) of a global shuffle with cache 0: a frame
 *                decode per draw, about (the fetch's cost)
 *
 * Records per second of wall clock and of the process's CPU time; medians
 * of --runs; the ratios against seq of the same run (target: cold >= 0.8
 * on the caller's thread).  One JSON line per thread count on stdout, a
 * table on stderr.
 */
#define BENCH_NAME "bench_global_shuffle"
#include "bench_util.h"
#include "sluice.h"

#include <string.h>

/* Reads up to `max` samples of r's current pass: records/s (wall) and per
 * CPU second in *cpu_rps. */
static double drain(sl_reader *r, uint64_t max, double *cpu_rps) {
  double t0 = now_s(), c0 = cpu_s();
  uint64_t n = 0;
  sl_sample *s;
  int rc = SL_OK;
  while (n < max && (rc = sl_reader_next(r, &s)) == SL_OK) {
    n++;
    sl_sample_release(s);
  }
  if (rc != SL_OK && rc != SL_EOF) CHECK(rc);
  double dt = now_s() - t0;
  *cpu_rps = (double)n / (cpu_s() - c0);
  return (double)n / dt;
}

static sl_reader *shuffled(const char *path, uint64_t cache, uint64_t budget,
                           uint64_t seed, uint32_t threads) {
  sl_reader *r;
  CHECK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &r));
  sl_global_shuffle_opts o = SL_GLOBAL_SHUFFLE_OPTS_INIT;
  o.seed = seed;
  o.world = 1;
  o.cache = cache;
  o.threads = threads;
  CHECK(sl_global_shuffle(r, &o, &r));
  if (budget) CHECK(sl_reader_set_budget(r, budget));
  return r;
}

int main(int argc, char **argv) {
  const char *slr = NULL, *tlist = "0";
  int runs = 5;
  uint64_t budget = 8ull << 30, nocache = 50000;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "%s: %s wants a value\n", BENCH_NAME, a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--slr"))
      slr = v;
    else if (!strcmp(a, "--runs"))
      runs = atoi(v);
    else if (!strcmp(a, "--budget"))
      budget = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--nocache-samples"))
      nocache = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--threads"))
      tlist = v;
    else {
      fprintf(stderr, "%s: unknown option %s\n", BENCH_NAME, a);
      return 2;
    }
  }
  uint32_t threads[16];
  int nt = 0;
  for (const char *p = tlist; *p && nt < 16;) {
    char *end;
    long t = strtol(p, &end, 10);
    if (end == p || t < 0) nt = -1;
    if (nt < 0) break;
    threads[nt++] = (uint32_t)t;
    p = *end == ',' ? end + 1 : end;
  }
  if (!slr || runs < 1 || budget < 1 || nt < 1) {
    fprintf(stderr,
            "usage: %s --slr FILE [--runs N] [--budget BYTES] "
            "[--nocache-samples N] [--threads 0,1,2]\n",
            BENCH_NAME);
    return 2;
  }
  enum { SEQ, COLD, WARM, NOCACHE, K };
  static const char *const names[K] = {"seq", "cold", "warm", "nocache"};
  fprintf(stderr, "%s: %s, %d runs (medians)\n", BENCH_NAME, slr, runs);
  for (int ti = 0; ti < nt; ti++) {
    uint32_t th = threads[ti];
    double *w[K], *c[K];
    for (int k = 0; k < K; k++) {
      w[k] = calloc((size_t)runs, sizeof(double));
      c[k] = calloc((size_t)runs, sizeof(double));
    }
    uint64_t records = 0;
    for (int r = 0; r < runs; r++) {
      sl_reader *q;
      CHECK(sl_slr_reader(slr, NULL, 0, UINT64_MAX, &q));
      CHECK(sl_reader_length(q, &records));
      w[SEQ][r] = drain(q, UINT64_MAX, &c[SEQ][r]);
      sl_reader_destroy(q);
      q = shuffled(slr, SL_GLOBAL_SHUFFLE_CACHE_AUTO, budget, 1 + (uint64_t)r,
                   th);
      w[COLD][r] = drain(q, UINT64_MAX, &c[COLD][r]);
      CHECK(sl_reader_reset(q));
      w[WARM][r] = drain(q, UINT64_MAX, &c[WARM][r]);
      sl_reader_destroy(q);
      q = shuffled(slr, 0, 0, 100 + (uint64_t)r, th);
      w[NOCACHE][r] = drain(q, nocache, &c[NOCACHE][r]);
      sl_reader_destroy(q);
    }
    double mw[K], mc[K];
    for (int k = 0; k < K; k++) {
      mw[k] = median(w[k], runs);
      mc[k] = median(c[k], runs);
    }
    printf("{\"bench\":\"global_shuffle\",\"data\":\"%s\",\"records\":%llu,"
           "\"threads\":%u,\"runs\":%d,\"budget\":%llu",
           slr, (unsigned long long)records, th, runs,
           (unsigned long long)budget);
    for (int k = 0; k < K; k++)
      printf(",\"%s_rps\":%.0f,\"%s_cpu_rps\":%.0f,\"%s_vs_seq\":%.4f,"
             "\"%s_vs_seq_cpu\":%.4f",
             names[k], mw[k], names[k], mc[k], names[k], mw[k] / mw[SEQ],
             names[k], mc[k] / mc[SEQ]);
    printf("}\n");
    fflush(stdout);
    fprintf(stderr, " threads %u (%llu records):\n", th,
            (unsigned long long)records);
    for (int k = 0; k < K; k++)
      fprintf(stderr,
              "  %-8s %10.0f rec/s (%.3f of seq)  %10.0f per CPU s (%.3f)\n",
              names[k], mw[k], mw[k] / mw[SEQ], mc[k], mc[k] / mc[SEQ]);
    for (int k = 0; k < K; k++) {
      free(w[k]);
      free(c[k]);
    }
  }
  return 0;
}
