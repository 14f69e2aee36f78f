/*
 * bench_slr.c - SLR read+decode throughput against zstd on the same bytes.
 *
 * Writes a deterministic data set (float32 feature vectors with a smooth
 * signal plus noise, so they compress like real numeric features), then, in
 * the same run and on the same payload:
 *
 *   zstd-lib   ZSTD_decompressDCtx over every chunk's frame into a reused
 *              buffer: the decompression limit, no checks, no samples;
 *   zstd -d    the zstd command decompressing the chunk frames concatenated
 *              into one .zst file, to /dev/null (skipped if zstd is absent);
 *   sluice 1T  sl_slr_reader pulling every record as a sample (CRC, size
 *              checks, record table checks, zero-copy tensors);
 *   sluice 2T  two threads, each an sl_slr_reader_chunks over half the
 *              chunks.
 *
 * Throughput is raw (decompressed) payload bytes per second; medians of
 * --runs runs.  JSON lines on stdout, a table on stderr.
 */
#define BENCH_NAME "bench_slr"
#include "bench_util.h"
#include "sluice.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

static uint64_t rng_state = BENCH_RNG_SEED;
static uint64_t rnd(void) {
  return bench_splitmix64(&rng_state);
}

static void write_dataset(const char *path, int64_t records, int dim,
                          int level) {
  sl_schema *s = sl_schema_new();
  CHECK(sl_schema_add(s, "features", SL_F32, 1, (int64_t[]){dim}));
  CHECK(sl_schema_add(s, "label", SL_I64, 0, NULL));
  sl_slr_writer *w;
  sl_slr_writer_opts o = {level, 1 << 20, 0};
  CHECK(sl_slr_writer_open(path, s, &o, &w));
  for (int64_t i = 0; i < records; i++) {
    sl_sample *r = sl_sample_new(s);
    float *x;
    int64_t *y;
    CHECK(sl_sample_alloc(r, 0, 1, (int64_t[]){dim}, (void **)&x));
    CHECK(sl_sample_alloc(r, 1, 0, NULL, (void **)&y));
    bench_features(x, dim, i, &rng_state);
    *y = (int64_t)(rnd() % 10);
    CHECK(sl_slr_writer_append(w, r));
    sl_sample_release(r);
  }
  CHECK(sl_slr_writer_close(w));
  sl_schema_release(s);
}

/* Reads every chunk's stored frame into memory (for the zstd baselines). */
typedef struct frames {
  unsigned char **data;
  size_t *size, *raw;
  uint64_t n, raw_total, stored_total;
} frames;

static frames load_frames(const char *path) {
  sl_slr_file *f;
  CHECK(sl_slr_open(path, NULL, &f));
  frames fr = {0};
  fr.n = sl_slr_chunks(f);
  fr.data = calloc(fr.n, sizeof *fr.data);
  fr.size = calloc(fr.n, sizeof *fr.size);
  fr.raw = calloc(fr.n, sizeof *fr.raw);
  FILE *fp = fopen(path, "rb");
  for (uint64_t c = 0; c < fr.n; c++) {
    sl_slr_chunk_info ci;
    CHECK(sl_slr_chunk_info_get(f, c, &ci));
    fr.size[c] = ci.stored_size;
    fr.raw[c] = ci.raw_size;
    fr.data[c] = malloc(ci.stored_size);
    fseek(fp, (long)(ci.offset + 40), SEEK_SET);
    if (fread(fr.data[c], 1, ci.stored_size, fp) != ci.stored_size) exit(1);
    fr.raw_total += ci.raw_size;
    fr.stored_total += ci.stored_size;
  }
  fclose(fp);
  sl_slr_close(f);
  return fr;
}

static double zstd_lib(const frames *fr) {
  ZSTD_DCtx *d = ZSTD_createDCtx();
  size_t cap = 0;
  for (uint64_t c = 0; c < fr->n; c++)
    cap = fr->raw[c] > cap ? fr->raw[c] : cap;
  void *out = malloc(cap);
  double t0 = now_s();
  for (uint64_t c = 0; c < fr->n; c++) {
    size_t got = ZSTD_decompressDCtx(d, out, cap, fr->data[c], fr->size[c]);
    if (ZSTD_isError(got) || got != fr->raw[c]) exit(1);
  }
  double t = now_s() - t0;
  free(out);
  ZSTD_freeDCtx(d);
  return t;
}

static double zstd_cli(const char *zst) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "zstd -d -q -c '%s' > /dev/null", zst);
  double t0 = now_s();
  if (system(cmd) != 0) return -1;
  return now_s() - t0;
}

typedef struct job {
  const char *path;
  uint64_t first_chunk, nchunks;
  uint64_t records;
} job;

static void *read_job(void *arg) {
  job *j = arg;
  sl_reader *r;
  CHECK(sl_slr_reader_chunks(j->path, NULL, j->first_chunk, j->nchunks, &r));
  sl_sample *s;
  int rc;
  uint64_t n = 0;
  volatile float sink = 0;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    sink += ((const float *)sl_sample_at(s, 0)->data)[0];
    sl_sample_release(s);
    n++;
  }
  CHECK(rc == SL_EOF ? SL_OK : rc);
  (void)sink;
  sl_reader_destroy(r);
  j->records = n;
  return NULL;
}

static double sluice_read(const char *path, uint64_t nchunks, int threads,
                          uint64_t want_records) {
  job jobs[2];
  pthread_t th[2];
  uint64_t per = nchunks / (uint64_t)threads;
  double t0 = now_s();
  for (int i = 0; i < threads; i++) {
    jobs[i] = (job){path, per * (uint64_t)i,
                    i == threads - 1 ? nchunks - per * (uint64_t)i : per, 0};
    pthread_create(&th[i], NULL, read_job, &jobs[i]);
  }
  uint64_t got = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(th[i], NULL);
    got += jobs[i].records;
  }
  double elapsed = now_s() - t0;
  if (got != want_records) {
    fprintf(stderr, "bench_slr: read %llu records, want %llu\n",
            (unsigned long long)got, (unsigned long long)want_records);
    exit(1);
  }
  return elapsed;
}

int main(int argc, char **argv) {
  int64_t records = 200000;
  int dim = 256, runs = 5, level = 3;
  const char *dir = "/tmp";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: bench_slr [--records N] [--dim D] [--level L] [--runs R] "
             "[--dir DIR]\nSLR read+decode throughput vs zstd on the same "
             "payload (see the banner of bench/bench_slr.c).\n");
      return 0;
    } else if (!strcmp(argv[i], "--records") && i + 1 < argc) {
      records = atoll(argv[++i]);
    } else if (!strcmp(argv[i], "--dim") && i + 1 < argc) {
      dim = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--level") && i + 1 < argc) {
      level = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
      dir = argv[++i];
    } else {
      fprintf(stderr, "bench_slr: unknown argument '%s' (try --help)\n",
              argv[i]);
      return 2;
    }
  }
  if (runs < 1 || runs > 51 || records < 1 || dim < 1) {
    fprintf(stderr, "bench_slr: bad --runs/--records/--dim\n");
    return 2;
  }
  char path[512], zst[512];
  snprintf(path, sizeof path, "%s/sluice-bench-%d.slr", dir, (int)getpid());
  snprintf(zst, sizeof zst, "%s/sluice-bench-%d.zst", dir, (int)getpid());
  double tw = now_s();
  write_dataset(path, records, dim, level);
  tw = now_s() - tw;
  frames fr = load_frames(path);
  FILE *z = fopen(zst, "wb");
  for (uint64_t c = 0; c < fr.n; c++)
    fwrite(fr.data[c], 1, fr.size[c], z);
  fclose(z);
  /* The four measurements are interleaved run by run, so that load from
   * other processes on a shared machine hits them alike. */
  double t[4][51], med[4];
  const char *names[4] = {"zstd_lib", "zstd_cli", "sluice_1t", "sluice_2t"};
  int have_cli = 1;
  for (int r = 0; r < runs; r++) {
    t[0][r] = zstd_lib(&fr);
    if ((t[1][r] = zstd_cli(zst)) < 0) have_cli = 0;
    t[2][r] = sluice_read(path, fr.n, 1, (uint64_t)records);
    t[3][r] = sluice_read(path, fr.n, 2, (uint64_t)records);
  }
  for (int i = 0; i < 4; i++)
    med[i] = median(t[i], runs);
  if (!have_cli) med[1] = -1;
  double mb = (double)fr.raw_total / 1e6;
  fprintf(stderr,
          "data: %lld records of f32[%d] + i64, %llu chunks, raw %.1f MB, "
          "stored %.1f MB (ratio %.2f), pack %.2f s\n",
          (long long)records, dim, (unsigned long long)fr.n, mb,
          (double)fr.stored_total / 1e6,
          (double)fr.raw_total / (double)fr.stored_total, tw);
  fprintf(stderr, "%-10s %10s %12s %14s\n", "reader", "MB/s", "records/s",
          "vs zstd_lib");
  for (int i = 0; i < 4; i++) {
    if (med[i] < 0) continue;
    double mbs = mb / med[i];
    printf("{\"bench\":\"slr_read\",\"reader\":\"%s\",\"records\":%lld,"
           "\"raw_bytes\":%llu,\"runs\":%d,\"seconds\":%.4f,\"mb_per_s\":%.1f,"
           "\"ratio_vs_zstd_lib\":%.3f}\n",
           names[i], (long long)records, (unsigned long long)fr.raw_total, runs,
           med[i], mbs, med[0] / med[i]);
    fprintf(stderr, "%-10s %10.1f %12.0f %14.3f\n", names[i], mbs,
            (double)records / med[i], med[0] / med[i]);
  }
  if (have_cli)
    fprintf(stderr, "sluice_1t / zstd -d: %.3f   sluice_2t / sluice_1t: %.2f\n",
            med[1] / med[2], med[2] / med[3]);
  for (uint64_t c = 0; c < fr.n; c++)
    free(fr.data[c]);
  free(fr.data);
  free(fr.size);
  free(fr.raw);
  unlink(path);
  unlink(zst);
  return 0;
}
