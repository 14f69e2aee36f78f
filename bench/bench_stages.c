/*
 * bench_stages.c - per-stage overhead of the C decorators and channel
 * throughput.
 *
 * Each stage is measured on top of a source that costs almost nothing (one
 * preallocated sample handed out N times, a refcount increment each), so the
 * difference between "source + stage" and "source alone" is the stage's own
 * cost per sample.  Every figure is the median of --runs runs (default 5).
 *
 * Output: one JSON object per result on stdout (machine-readable), then a
 * human table on stderr.  `bench_stages --help` for options.
 */
#include "bench_util.h"
#include "sluice.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_stages: %s failed: %s (%s)\n", what, sl_err_name(rc),
          sl_last_error());
  exit(1);
}
#define CHECK(expr)                                                            \
  do {                                                                         \
    int rc_ = (expr);                                                          \
    if (rc_ < 0) die(#expr, rc_);                                              \
  } while (0)

/* --- the near-free source ---------------------------------------------------
 */
typedef struct constant {
  sl_sample *sample;
  uint64_t n, i;
} constant;

static int const_next(void *st, sl_sample **out) {
  constant *c = st;
  if (c->i == c->n) return SL_EOF;
  c->i++;
  *out = sl_sample_retain(c->sample);
  return SL_OK;
}
static int const_reset(void *st) {
  ((constant *)st)->i = 0;
  return SL_OK;
}
static void const_destroy(void *st) {
  constant *c = st;
  sl_sample_release(c->sample);
  free(c);
}
static const sl_reader_vtable const_vt = {"constant", const_next, const_reset,
                                          const_destroy};

/* The near-free source over one preallocated sample whose single i64 field
 * is called `name`. */
static sl_reader *source_named(uint64_t n, const char *name) {
  sl_schema *sc = sl_schema_new();
  CHECK(sl_schema_add(sc, name, SL_I64, 0, NULL));
  constant *c = calloc(1, sizeof *c);
  c->sample = sl_sample_new(sc);
  int64_t *v;
  CHECK(sl_sample_alloc(c->sample, 0, 0, NULL, (void **)&v));
  *v = 7;
  c->n = n;
  sl_reader *out = sl_reader_new(&const_vt, c, sc);
  if (!out) die("sl_reader_new", sl_last_error_code());
  sl_schema_release(sc);
  return out;
}

static sl_reader *source(uint64_t n) {
  return source_named(n, "i");
}

/* --- stages
 * ------------------------------------------------------------------- */
static int identity_map(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  *out = in;
  return SL_OK;
}
static int keep_all(void *ud, const sl_sample *s) {
  (void)ud, (void)s;
  return 1;
}

typedef sl_reader *(*build_fn)(uint64_t n);

static sl_reader *b_source(uint64_t n) {
  return source(n);
}
static sl_reader *b_shuffle(uint64_t n) {
  sl_reader *r;
  CHECK(sl_shuffle(source(n), 1024, 42, &r));
  return r;
}
static sl_reader *b_take(uint64_t n) {
  sl_reader *r;
  CHECK(sl_take(source(n), n, &r));
  return r;
}
static sl_reader *b_skip(uint64_t n) {
  sl_reader *r;
  CHECK(sl_skip(source(n), 0, &r));
  return r;
}
static sl_reader *b_map(uint64_t n) {
  sl_reader *r;
  CHECK(sl_map(source(n), identity_map, NULL, NULL, NULL, &r));
  return r;
}
static sl_reader *b_filter(uint64_t n) {
  sl_reader *r;
  CHECK(sl_filter(source(n), keep_all, NULL, NULL, &r));
  return r;
}
static sl_reader *b_multi_pass(uint64_t n) {
  sl_reader *r;
  CHECK(sl_multi_pass(source(n), 1, &r));
  return r;
}
static sl_reader *b_batch(uint64_t n) {
  sl_reader *r;
  CHECK(sl_batch(source(n), 128, NULL, &r));
  return r;
}
static sl_reader *b_prefetch(uint64_t n) {
  sl_reader *r;
  CHECK(sl_prefetch(source(n), 1024, &r));
  return r;
}
static sl_reader *b_prefetch_auto(uint64_t n) {
  sl_reader *r;
  CHECK(sl_prefetch_auto(source(n), NULL, &r));
  return r;
}
/* Rows of batches of 128: the cost per row of cutting them out again
 * (includes batch128's own cost per row). */
static sl_reader *b_unbatch(uint64_t n) {
  sl_reader *b, *r;
  CHECK(sl_batch(source(n), 128, NULL, &b));
  CHECK(sl_unbatch(b, NULL, 0, &r));
  return r;
}
/* Rank 0 of 1: the stage's own per-sample cost (every sample kept). */
static sl_reader *b_shard(uint64_t n) {
  sl_reader *r;
  CHECK(sl_shard(source(n), 1, 0, NULL, &r));
  return r;
}
/* Four sources of n/4, cycle 4, block 1: one switch per sample. */
static sl_reader *b_interleave(uint64_t n) {
  sl_reader *ups[4], *r;
  for (int i = 0; i < 4; i++)
    ups[i] = source(n / 4 + (i < (int)(n % 4)));
  sl_interleave_opts o = SL_INTERLEAVE_OPTS_INIT;
  o.cycle = 4;
  o.block = 1;
  CHECK(sl_interleave(ups, 4, &o, &r));
  return r;
}
/* The samplers need random access: over a range source, whose own cost is
 * the "range" row (compare with it, not with "source"). */
static sl_reader *b_range(uint64_t n) {
  sl_reader *r;
  CHECK(sl_reader_range(n, &r));
  return r;
}
static double *g_weights; /* n weights of 1..4, made once */
static sl_reader *b_weighted(uint64_t n) {
  if (!g_weights) {
    g_weights = malloc(n * sizeof *g_weights);
    for (uint64_t i = 0; i < n; i++)
      g_weights[i] = (double)(1 + i % 4);
  }
  sl_reader *r;
  CHECK(sl_weighted_sample(b_range(n), g_weights, n, NULL, &r));
  return r;
}
static uint64_t *g_indices; /* a reversed order, made once */
static sl_reader *b_subset(uint64_t n) {
  if (!g_indices) {
    g_indices = malloc(n * sizeof *g_indices);
    for (uint64_t i = 0; i < n; i++)
      g_indices[i] = n - 1 - i;
  }
  sl_reader *r;
  CHECK(sl_subset(b_range(n), g_indices, n, &r));
  return r;
}
static sl_reader *b_cache(uint64_t n) { /* the first pass: recording */
  sl_reader *r;
  CHECK(sl_cache(source(n), &r));
  return r;
}
static sl_reader *b_chain(uint64_t n) { /* two halves */
  sl_reader *r, *parts[2] = {source(n / 2), source(n - n / 2)};
  CHECK(sl_chain(parts, 2, &r));
  return r;
}
static sl_reader *b_zip(uint64_t n) { /* per output sample: two sources */
  sl_reader *r, *parts[2] = {source_named(n, "i"), source_named(n, "j")};
  CHECK(sl_zip(parts, 2, 0, &r));
  return r;
}
/* The parallel-stage engine (sl_map_parallel): an identity map on 1 and 2
 * threads (the consumer is the slower side: its spin meets results), and
 * a map of ~2 us a sample on 1 thread (the worker is the slower side: the
 * consumer waits on every fill, the case the adaptive spin is for). */
static int slow_map(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  double t0 = now_s();
  while (now_s() - t0 < 2e-6) {
  }
  *out = in;
  return SL_OK;
}
static sl_reader *parallel(uint64_t n, sl_map_fn fn, uint32_t threads) {
  sl_parallel_opts o = SL_PARALLEL_OPTS_INIT;
  o.threads = threads;
  sl_reader *r;
  CHECK(sl_map_parallel(source(n), fn, NULL, NULL, NULL, &o, &r));
  return r;
}
static sl_reader *b_par1(uint64_t n) {
  return parallel(n, identity_map, 1);
}
static sl_reader *b_par2(uint64_t n) {
  return parallel(n, identity_map, 2);
}
static sl_reader *b_par1_slow(uint64_t n) {
  return parallel(n, slow_map, 1);
}

static sl_reader *b_threaded(uint64_t n) {
  sl_reader *r;
  CHECK(sl_threaded(source(n), &r));
  return r;
}

/* Seconds to drain a freshly built pipeline (construction not timed); the
 * CPU seconds of every thread meanwhile in *cpu. */
static double drain(build_fn build, uint64_t n, uint64_t *count, double *cpu) {
  sl_reader *r = build(n);
  sl_sample *s;
  uint64_t k = 0;
  double c0 = cpu_s();
  double t0 = now_s();
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    sl_sample_release(s);
    k++;
  }
  double t = now_s() - t0;
  *cpu = cpu_s() - c0;
  if (rc != SL_EOF) die("sl_reader_next", rc);
  sl_reader_destroy(r);
  *count = k;
  return t;
}

/* --- channel
 * ---------------------------------------------------------------------- */
/* The channel's own hand-off cost: the producer sends pointers from a pool
 * of distinct samples without touching their refcounts (the channel never
 * does either), so no cache line but the channel's own bounces between the
 * two cores.  (Sending one sample retained each time measures the shared
 * refcount's ping-pong instead.) */
#define CHAN_POOL 4096

typedef struct chan_job {
  sl_channel *ch;
  sl_sample **pool;
  uint64_t n;
} chan_job;

static void *producer(void *arg) {
  chan_job *j = arg;
  for (uint64_t i = 0; i < j->n; i++)
    if (sl_channel_send(j->ch, j->pool[i % CHAN_POOL]) < 0) abort();
  sl_channel_close(j->ch);
  return NULL;
}

/* Samples per second from one producer thread to one consumer. */
static double channel_rate(uint64_t n, size_t cap, int many) {
  sl_reader *r;
  CHECK(sl_reader_range(CHAN_POOL, &r));
  static sl_sample *pool[CHAN_POOL];
  for (int i = 0; i < CHAN_POOL; i++)
    CHECK(sl_reader_next(r, &pool[i]));
  chan_job j = {sl_channel_new(cap, 0), pool, n};
  pthread_t t;
  double t0 = now_s();
  pthread_create(&t, NULL, producer, &j);
  uint64_t got = 0;
  sl_sample *buf[64];
  for (;;) {
    int rc = many ? sl_channel_recv_many(j.ch, buf, 64)
                  : (sl_channel_recv(j.ch, buf) == SL_OK ? 1 : SL_EOF);
    if (rc <= 0) break;
    got += (uint64_t)rc; /* the pool keeps the references */
  }
  double t1 = now_s();
  pthread_join(t, NULL);
  if (got != n) {
    fprintf(stderr, "channel lost samples: %llu of %llu\n",
            (unsigned long long)got, (unsigned long long)n);
    exit(1);
  }
  sl_channel_destroy(j.ch);
  for (int i = 0; i < CHAN_POOL; i++)
    sl_sample_release(pool[i]);
  sl_reader_destroy(r);
  return (double)n / (t1 - t0);
}

static void usage(void) {
  printf("usage: bench_stages [--n SAMPLES] [--runs R] [--only NAME]\n"
         "Measures per-sample overhead of each C decorator (ns/sample above a\n"
         "near-free source) and one-producer/one-consumer channel throughput.\n"
         "Prints JSON lines on stdout and a table on stderr; medians of R "
         "runs.\n");
}

int main(int argc, char **argv) {
  uint64_t n = 5000000;
  int runs = 5;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage();
      return 0;
    } else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
      n = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
    } else {
      fprintf(stderr, "bench_stages: unknown argument '%s'\n", argv[i]);
      usage();
      return 2;
    }
  }
  if (runs < 1 || runs > 101 || n == 0) {
    fprintf(stderr, "bench_stages: --runs must be 1..101 and --n >= 1\n");
    return 2;
  }
  static const struct {
    const char *name;
    build_fn build;
  } stages[] = {
      {"source", b_source},
      {"shuffle", b_shuffle},
      {"take", b_take},
      {"skip", b_skip},
      {"map", b_map},
      {"filter", b_filter},
      {"multi_pass", b_multi_pass},
      {"threaded", b_threaded},
      {"batch128", b_batch},
      {"prefetch", b_prefetch},
      {"prefetch_auto", b_prefetch_auto},
      {"unbatch", b_unbatch},
      {"shard", b_shard},
      {"interleave4", b_interleave},
      {"range", b_range},
      {"weighted", b_weighted},
      {"subset", b_subset},
      {"cache", b_cache},
      {"chain", b_chain},
      {"zip", b_zip},
      {"par1", b_par1},
      {"par2", b_par2},
      {"par1_slow", b_par1_slow},
  };
  double times[101], cpus[101];
  double base_ns = 0;
  fprintf(stderr, "%-12s %14s %14s %14s\n", "stage", "ns/sample", "stage ns",
          "CPU ns");
  for (size_t s = 0; s < sizeof stages / sizeof stages[0]; s++) {
    if (only && strcmp(only, stages[s].name) && s) continue;
    uint64_t count = 0;
    for (int r = 0; r < runs; r++)
      times[r] = drain(stages[s].build, n, &count, &cpus[r]);
    double ns = median(times, runs) * 1e9 / (double)n;
    double cpu_ns = median(cpus, runs) * 1e9 / (double)n;
    if (s == 0) base_ns = ns;
    double stage_ns = s ? ns - base_ns : ns;
    printf("{\"bench\":\"stage\",\"stage\":\"%s\",\"samples\":%llu,\"runs\":%d,"
           "\"ns_per_sample\":%.2f,\"stage_ns_per_sample\":%.2f,"
           "\"cpu_ns_per_sample\":%.2f}\n",
           stages[s].name, (unsigned long long)n, runs, ns, stage_ns, cpu_ns);
    fprintf(stderr, "%-12s %14.2f %14.2f %14.2f\n", stages[s].name, ns,
            stage_ns, cpu_ns);
  }
  if (!only || !strcmp(only, "channel")) {
    for (int many = 0; many <= 1; many++) {
      for (int r = 0; r < runs; r++)
        times[r] = channel_rate(n, 1024, many);
      double rate = median(times, runs);
      const char *name = many ? "channel_recv_many" : "channel_recv";
      printf("{\"bench\":\"channel\",\"mode\":\"%s\",\"samples\":%llu,"
             "\"runs\":%d,\"samples_per_s\":%.0f,\"ns_per_handoff\":%.2f}\n",
             name, (unsigned long long)n, runs, rate, 1e9 / rate);
      fprintf(stderr,
              "%-18s %10.2f M samples/s, %.1f ns per hand-off (1 producer, "
              "1 consumer)\n",
              name, rate / 1e6, 1e9 / rate);
    }
  }
  return 0;
}
