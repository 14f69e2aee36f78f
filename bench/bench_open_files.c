/*
 * bench_open_files.c - sl_open_files throughput against its thread count.
 *
 * Writes a deterministic set of zstd-compressed SLR shards (float32 feature
 * vectors that compress like real numeric features, plus an i64 label), then
 * reads every record of them through sl_open_files with 1, 2, 4 ... worker
 * threads, --runs times each, the thread counts interleaved.  The consumer
 * touches each sample (reads its label) and releases it, so the figure is the
 * pipeline's delivery rate into a training loop that does nothing.  The first
 * pass is untimed (it warms the page cache, so the files are read from memory
 * and the measure is decode + hand-off, which is what threads can scale).
 *
 * Output: one JSON line per configuration on stdout (medians of the runs,
 * plus the speedup over the first thread count and the median CPU seconds
 * a pass used, user + system, all threads), a table on stderr.  On a shared
 * machine the CPU seconds tell the code's cost apart from the cores it got:
 * equal CPU per pass at 1 and 2 threads means the work scales, whatever the
 * wall-clock figure says.
 */
#define BENCH_NAME "bench_open_files"
#include "bench_util.h"
#include "sluice.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t g_rng = BENCH_RNG_SEED;

typedef struct config {
  int files;
  long records; /* per file */
  int dim;
  size_t chunk_bytes;
  int level;
  int runs;
  int threads[16], nthreads;
  int unordered, shuffle;
  unsigned window;
} config;

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_open_files [options]\n"
          "  --files N        shards to write (default 8)\n"
          "  --records N      records per shard (default 16000)\n"
          "  --dim N          floats per record (default 256: 1 KiB)\n"
          "  --chunk-kib N    target raw chunk size in KiB (default 256)\n"
          "  --level N        zstd level (default 3)\n"
          "  --runs N         timed runs per configuration (default 5)\n"
          "  --threads LIST   comma-separated thread counts (default 1,2,4)\n"
          "  --unordered      deliver as ready instead of in plan order\n"
          "  --shuffle        shuffle chunks and records (window --window)\n"
          "  --window N       shuffle window in chunks (default 0: the\n"
          "                   library's default, 32)\n"
          "  --help           this text\n"
          "Prints one JSON line per thread count on stdout (medians of the\n"
          "interleaved runs, and the CPU seconds a pass used) and a table\n"
          "on stderr.\n");
}

static int parse_threads(const char *s, config *c) {
  c->nthreads = 0;
  while (*s && c->nthreads < 16) {
    char *end;
    long t = strtol(s, &end, 10);
    if (end == s || t < 1 || t > 1024) return -1;
    c->threads[c->nthreads++] = (int)t;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return c->nthreads ? 0 : -1;
}

static void parse_args(int argc, char **argv, config *c) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NUM(flag, field)                                                       \
  if (strcmp(a, flag) == 0 && v) {                                             \
    c->field = atol(v);                                                        \
    i++;                                                                       \
    continue;                                                                  \
  }
    NUM("--files", files)
    NUM("--records", records)
    NUM("--dim", dim)
    NUM("--level", level)
    NUM("--runs", runs)
    NUM("--window", window)
#undef NUM
    if (strcmp(a, "--chunk-kib") == 0 && v) {
      c->chunk_bytes = (size_t)atol(v) * 1024;
      i++;
    } else if (strcmp(a, "--threads") == 0 && v) {
      if (parse_threads(v, c) < 0) {
        fprintf(stderr, "bench_open_files: bad --threads '%s'\n", v);
        exit(2);
      }
      i++;
    } else if (strcmp(a, "--unordered") == 0) {
      c->unordered = 1;
    } else if (strcmp(a, "--shuffle") == 0) {
      c->shuffle = 1;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else {
      fprintf(stderr, "bench_open_files: unknown or incomplete option '%s'\n",
              a);
      usage(stderr);
      exit(2);
    }
  }
  if (c->files < 1 || c->records < 1 || c->dim < 1 || c->runs < 1 ||
      c->level < 1 || c->level > 19 || c->chunk_bytes == 0) {
    fprintf(stderr, "bench_open_files: every count must be >= 1\n");
    exit(2);
  }
}

static void write_shard(const char *path, const config *c, long first) {
  sl_schema *s = sl_schema_new();
  CHECK(sl_schema_add(s, "features", SL_F32, 1, (int64_t[]){c->dim}));
  CHECK(sl_schema_add(s, "label", SL_I64, 0, NULL));
  sl_slr_writer *w;
  sl_slr_writer_opts o = {c->level, c->chunk_bytes, 0};
  CHECK(sl_slr_writer_open(path, s, &o, &w));
  for (long i = first; i < first + c->records; i++) {
    sl_sample *r = sl_sample_new(s);
    float *x;
    int64_t *y;
    CHECK(sl_sample_alloc(r, 0, 1, (int64_t[]){c->dim}, (void **)&x));
    CHECK(sl_sample_alloc(r, 1, 0, NULL, (void **)&y));
    bench_features(x, c->dim, i, &g_rng);
    *y = i;
    CHECK(sl_slr_writer_append(w, r));
    sl_sample_release(r);
  }
  CHECK(sl_slr_writer_close(w));
  sl_schema_release(s);
}

/* One pass over everything; returns the records read and their label sum
 * (so the compiler cannot drop the reads). */
static long read_pass(const char *const *names, const config *c, int threads,
                      int64_t *sum) {
  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
  o.threads = (uint32_t)threads;
  o.unordered = c->unordered;
  o.shuffle = c->shuffle;
  o.window = c->window;
  o.seed = 1;
  o.rank = 0;
  o.world = 1;
  sl_reader *r;
  CHECK(sl_open_files(names, (size_t)c->files, &o, &r));
  long n = 0;
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    *sum += *(const int64_t *)sl_tensor_data(sl_sample_at_const(s, 1));
    sl_sample_release(s);
    n++;
  }
  CHECK(rc == SL_EOF ? SL_OK : rc);
  sl_reader_destroy(r);
  return n;
}

static int remove_entry(const char *p, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

int main(int argc, char **argv) {
  config c = {8, 16000, 256, 256 * 1024, 3, 5, {1, 2, 4}, 3, 0, 0, 0};
  parse_args(argc, argv, &c);
  char dir[] = "/tmp/sluice-bench-open-files-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("bench_open_files: mkdtemp");
    return 1;
  }
  char **names = calloc((size_t)c.files, sizeof *names);
  uint64_t raw = 0, stored = 0, chunks = 0;
  for (int f = 0; f < c.files; f++) {
    names[f] = malloc(strlen(dir) + 32);
    sprintf(names[f], "%s/shard-%03d.slr", dir, f);
    write_shard(names[f], &c, (long)f * c.records);
    sl_slr_file *h;
    CHECK(sl_slr_open(names[f], NULL, &h));
    for (uint64_t k = 0; k < sl_slr_chunks(h); k++) {
      sl_slr_chunk_info ci;
      CHECK(sl_slr_chunk_info_get(h, k, &ci));
      raw += ci.raw_size;
      stored += ci.stored_size;
    }
    chunks += sl_slr_chunks(h);
    sl_slr_close(h);
  }
  long total = (long)c.files * c.records;
  int64_t sum = 0;
  const char *const *cn = (const char *const *)names;
  if (read_pass(cn, &c, 1, &sum) != total) { /* warm-up, untimed */
    fprintf(stderr, "bench_open_files: short read\n");
    return 1;
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  fprintf(stderr,
          "open_files: %d shards, %ld records of %d floats, %llu chunks, "
          "%.1f MB raw, %.1f MB stored (zstd %d), %s%s, %ld CPUs, median of "
          "%d\n",
          c.files, total, c.dim, (unsigned long long)chunks, (double)raw / 1e6,
          (double)stored / 1e6, c.level, c.unordered ? "unordered" : "ordered",
          c.shuffle ? ", shuffled" : "", cpus, c.runs);
  fprintf(stderr, "%8s %12s %14s %12s %9s %9s\n", "threads", "median s",
          "samples/s", "raw MB/s", "speedup", "CPU s");
  /* Runs are interleaved (1, 2, 4, 1, 2, 4, ...) rather than grouped, so
   * a change in the load of a shared machine hits every thread count. */
  double *times = calloc((size_t)(c.runs * c.nthreads), sizeof *times);
  double *cpus_used = calloc((size_t)(c.runs * c.nthreads), sizeof *times);
  double *probe = calloc((size_t)c.runs, sizeof *probe);
  for (int k = 0; k < c.runs; k++) {
    probe[k] = bench_parallel_probe();
    for (int t = 0; t < c.nthreads; t++) {
      double t0 = now_s(), c0 = cpu_s();
      long n = read_pass(cn, &c, c.threads[t], &sum);
      times[t * c.runs + k] = now_s() - t0;
      cpus_used[t * c.runs + k] = cpu_s() - c0;
      if (n != total) {
        fprintf(stderr, "bench_open_files: read %ld of %ld\n", n, total);
        return 1;
      }
    }
  }
  double par = median(probe, c.runs);
  double base = 0;
  for (int t = 0; t < c.nthreads; t++) {
    double *tt = times + t * c.runs;
    double med = median(tt, c.runs); /* sorts tt */
    double cpu = median(cpus_used + t * c.runs, c.runs);
    double rate = (double)total / med, mbs = (double)raw / med / 1e6;
    if (t == 0) base = rate;
    printf("{\"bench\":\"open_files\",\"threads\":%d,\"mode\":\"%s\","
           "\"shuffle\":%d,\"window\":%u,\"files\":%d,\"records\":%ld,"
           "\"raw_bytes\":%llu,\"stored_bytes\":%llu,\"runs\":%d,"
           "\"median_s\":%.6f,\"min_s\":%.6f,\"max_s\":%.6f,"
           "\"samples_per_s\":%.0f,\"raw_mb_per_s\":%.1f,"
           "\"speedup_vs_first\":%.3f,\"cpu_s\":%.6f,\"cpus\":%ld}\n",
           c.threads[t], c.unordered ? "unordered" : "ordered", c.shuffle,
           c.window, c.files, total, (unsigned long long)raw,
           (unsigned long long)stored, c.runs, med, tt[0], tt[c.runs - 1], rate,
           mbs, rate / base, cpu, cpus);
    fflush(stdout);
    fprintf(stderr, "%8d %12.4f %14.0f %12.1f %8.2fx %9.4f\n", c.threads[t],
            med, rate, mbs, rate / base, cpu);
  }
  printf("{\"bench\":\"parallel_probe\",\"runs\":%d,\"speedup_2t\":%.3f}\n",
         c.runs, par);
  fprintf(stderr, "two plain C threads at the same time: %.2fx\n", par);
  free(times);
  free(cpus_used);
  free(probe);
  if (sum == 42) fprintf(stderr, "(unlikely)\n");
  for (int f = 0; f < c.files; f++)
    free(names[f]);
  free(names);
  nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
  return 0;
}
