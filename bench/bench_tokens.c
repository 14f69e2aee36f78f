/*
 * bench_tokens.c - language-model input (docs/TEXT.md), in one run:
 *
 *   tokens     sl_tokens_reader(block = B) -> sl_batch(B): windows/s
 *   windows    sl_tokens_reader alone (no batch): what the batch costs
 *   batched    sl_tokens_reader with its batch option (each block of B
 *              windows one [B, T] sample: no second copy)
 *   fread      llm.c's DataLoader loop: fseek + fread of B*T + 1 uint16,
 *              then the int inputs/targets arrays (dataloader_load_batch)
 *   memcpy     a plain memcpy of the same bytes (B*T + 1 uint16 a batch)
 *              from the page-cached file, mapped: the floor of any loader
 *   pack       sl_pack(T) over documents of 1..2T tokens (in memory):
 *              rows/s and the packing efficiency
 *
 * The shard (--tokens N uint16, deterministic, in --dir) is written once and
 * read once before timing, so every loader reads from the page cache.
 * Each figure is the median of --runs runs; windows/s counts T-token
 * windows (B per batch).  One JSON object per result on stdout, a table on
 * stderr.
 */
#include "bench_util.h"
#include "sluice.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_tokens: %s failed: %s (%s)\n", what, sl_err_name(rc),
          sl_last_error());
  exit(1);
}
#define CHECK(expr)                                                            \
  do {                                                                         \
    int rc_ = (expr);                                                          \
    if (rc_ < 0) die(#expr, rc_);                                              \
  } while (0)

typedef struct cfg {
  long tokens, B, T, runs, docs, lookahead;
  const char *dir;
} cfg;

/* sluice: windows read in one pass, batched by B (or not). */
/* mode 0: windows alone; 1: -> sl_batch(B); 2: the reader's batch option */
static double run_sluice(const cfg *c, const char *path, long *windows,
                         int mode) {
  sl_tokens_opts o = SL_TOKENS_OPTS_INIT;
  o.seq_len = c->T;
  o.block = (uint64_t)c->B;
  o.batch = mode == 2;
  sl_reader *r = NULL;
  CHECK(sl_tokens_reader(&path, 1, &o, &r));
  if (mode == 1) CHECK(sl_batch(r, (size_t)c->B, NULL, &r));
  long per = mode ? c->B : 1;
  double t0 = now_s();
  long n = 0;
  sl_sample *b;
  int rc;
  volatile int32_t sink = 0;
  while ((rc = sl_reader_next(r, &b)) == SL_OK) {
    sink += ((const int32_t *)sl_sample_field(b, "targets")->data)[0];
    sl_sample_release(b);
    n += per;
  }
  double dt = now_s() - t0;
  if (rc != SL_EOF) die("next", rc);
  sl_reader_destroy(r);
  *windows = n;
  return dt;
}

static double run_tokens(const cfg *c, const char *path, long *windows) {
  return run_sluice(c, path, windows, 1);
}

static double run_windows(const cfg *c, const char *path, long *windows) {
  return run_sluice(c, path, windows, 0);
}

static double run_blocks(const cfg *c, const char *path, long *windows) {
  return run_sluice(c, path, windows, 2);
}

/* llm.c's loop, dataloader_load_batch per batch. */
static double run_fread(const cfg *c, const char *path, long *windows) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  size_t BT = (size_t)(c->B * c->T);
  uint16_t *buf = malloc((BT + 1) * 2);
  int *in = malloc(BT * sizeof *in), *tg = malloc(BT * sizeof *tg);
  long ntok = c->tokens, nb = (ntok - 1) / (long)BT, n = 0;
  volatile int sink = 0;
  double t0 = now_s();
  for (long i = 0; i < nb; i++) {
    long off = 1024 + i * (long)BT * 2;
    fseek(f, off, SEEK_SET);
    if (fread(buf, 2, BT + 1, f) != BT + 1) die("fread", SL_EIO);
    /* llm.c builds with -O3 (or -Ofast), which vectorises this loop; at
     * -O2 the compiler leaves a loop of unknown count scalar, so it is
     * written in runs of 16, as sluice's own conversion is. */
    size_t k = 0;
    for (; k + 16 <= BT; k += 16) {
      for (size_t j = 0; j < 16; j++)
        in[k + j] = buf[k + j];
      for (size_t j = 0; j < 16; j++)
        tg[k + j] = buf[k + j + 1];
    }
    for (; k < BT; k++) {
      in[k] = buf[k];
      tg[k] = buf[k + 1];
    }
    sink += tg[0] + in[BT - 1];
    n += c->B;
  }
  double dt = now_s() - t0;
  fclose(f);
  free(buf);
  free(in);
  free(tg);
  *windows = n;
  return dt;
}

/* memcpy of the same bytes from the mapped file. */
static double run_memcpy(const cfg *c, const char *path, long *windows) {
  int fd = open(path, O_RDONLY);
  struct stat st;
  fstat(fd, &st);
  const char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  size_t BT = (size_t)(c->B * c->T);
  char *buf = malloc((BT + 1) * 2);
  long nb = (c->tokens - 1) / (long)BT, n = 0;
  volatile char sink = 0;
  double t0 = now_s();
  for (long i = 0; i < nb; i++) {
    memcpy(buf, m + 1024 + i * (long)BT * 2, (BT + 1) * 2);
    sink += buf[i % (long)BT];
    n += c->B;
  }
  double dt = now_s() - t0;
  munmap((void *)m, (size_t)st.st_size);
  free(buf);
  *windows = n;
  return dt;
}

/* sl_pack over c->docs documents of 1..2T tokens held in memory. */
static double run_pack(const cfg *c, long *rows, double *eff) {
  sl_schema *s = sl_schema_new();
  int64_t var = SL_DIM_VAR;
  CHECK(sl_schema_add(s, "ids", SL_I32, 1, &var));
  sl_sample **v = malloc((size_t)c->docs * sizeof *v);
  uint64_t g = BENCH_RNG_SEED;
  for (long d = 0; d < c->docs; d++) {
    v[d] = sl_sample_new(s);
    int64_t len = 1 + (int64_t)(bench_splitmix64(&g) % (uint64_t)(2 * c->T));
    void *data;
    CHECK(sl_sample_alloc(v[d], 0, 1, &len, &data));
    for (int64_t i = 0; i < len; i++)
      ((int32_t *)data)[i] = (int32_t)(bench_splitmix64(&g) % 50257);
  }
  sl_reader *r = NULL;
  CHECK(sl_reader_from_array(v, (size_t)c->docs, s, &r));
  for (long d = 0; d < c->docs; d++)
    sl_sample_release(v[d]);
  free(v);
  sl_schema_release(s);
  sl_pack_opts o = SL_PACK_OPTS_INIT;
  o.seq_len = c->T;
  o.has_eos = 1;
  o.eos = 50256;
  o.lookahead = (size_t)c->lookahead;
  CHECK(sl_pack(r, &o, &r));
  double t0 = now_s();
  sl_sample *b;
  int rc;
  long n = 0;
  while ((rc = sl_reader_next(r, &b)) == SL_OK) {
    sl_sample_release(b);
    n++;
  }
  double dt = now_s() - t0;
  if (rc != SL_EOF) die("pack next", rc);
  CHECK(sl_pack_stats(r, NULL, NULL, eff));
  sl_reader_destroy(r);
  *rows = n;
  return dt;
}

int main(int argc, char **argv) {
  cfg c = {16L << 20, 8, 1024, 5, 20000, 8, "/tmp"};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0) {
      printf("usage: bench_tokens [--tokens N] [--B N] [--T N] [--runs N] "
             "[--docs N] [--lookahead N] [--dir DIR]\n");
      return 0;
    }
    if (!v) {
      fprintf(stderr, "bench_tokens: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (strcmp(a, "--tokens") == 0)
      c.tokens = atol(v);
    else if (strcmp(a, "--B") == 0)
      c.B = atol(v);
    else if (strcmp(a, "--T") == 0)
      c.T = atol(v);
    else if (strcmp(a, "--runs") == 0)
      c.runs = atol(v);
    else if (strcmp(a, "--docs") == 0)
      c.docs = atol(v);
    else if (strcmp(a, "--lookahead") == 0)
      c.lookahead = atol(v);
    else if (strcmp(a, "--dir") == 0)
      c.dir = v;
    else {
      fprintf(stderr, "bench_tokens: unknown option %s\n", a);
      return 2;
    }
  }
  if (c.tokens < c.B * c.T + 1 || c.runs < 1 || c.runs > 99) {
    fprintf(stderr, "bench_tokens: --tokens must hold a batch; --runs 1..99\n");
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/bench_tokens-%ld.bin", c.dir, (long)getpid());
  uint64_t seed = BENCH_RNG_SEED;
  bench_write_token_shard(path, c.tokens, &seed);
  long w;
  run_fread(&c, path, &w); /* warm the page cache */
  enum { NR = 5 };
  static const char *names[NR] = {"tokens", "fread", "memcpy", "windows",
                                  "batched"};
  double (*fns[NR])(const cfg *, const char *, long *) = {
      run_tokens, run_fread, run_memcpy, run_windows, run_blocks};
  /* Interleaved rounds: a load that comes and goes on a shared machine
   * falls on every reader alike. */
  double rate[NR], t[NR][99];
  for (int i = 0; i < c.runs; i++)
    for (int k = 0; k < NR; k++) {
      double dt = fns[k](&c, path, &w);
      t[k][i] = (double)w / dt;
    }
  for (int k = 0; k < NR; k++) {
    rate[k] = median(t[k], (int)c.runs);
    printf("{\"bench\":\"tokens\",\"reader\":\"%s\",\"B\":%ld,\"T\":%ld,"
           "\"tokens\":%ld,\"windows_per_s\":%.0f,\"runs\":%ld}\n",
           names[k], c.B, c.T, c.tokens, rate[k], c.runs);
  }
  unlink(path);
  long rows = 0;
  double eff = 0;
  for (int i = 0; i < c.runs; i++) {
    double dt = run_pack(&c, &rows, &eff);
    t[0][i] = (double)rows / dt;
  }
  double pack = median(t[0], (int)c.runs);
  printf("{\"bench\":\"pack\",\"T\":%ld,\"docs\":%ld,\"lookahead\":%ld,"
         "\"rows\":%ld,\"rows_per_s\":%.0f,\"efficiency\":%.4f,"
         "\"runs\":%ld}\n",
         c.T, c.docs, c.lookahead, rows, pack, eff, c.runs);
  fprintf(stderr,
          "B=%ld T=%ld, %ld tokens (%.0f MB), median of %ld runs\n"
          "  %-8s %12s %10s\n",
          c.B, c.T, c.tokens, c.tokens * 2 / 1e6, c.runs, "reader", "windows/s",
          "vs fread");
  for (int k = 0; k < NR; k++)
    fprintf(stderr, "  %-8s %12.0f %9.2fx\n", names[k], rate[k],
            rate[k] / rate[1]);
  fprintf(stderr,
          "  pack T=%ld lookahead %ld: %.0f rows/s over %ld documents of "
          "1..%ld tokens, efficiency %.3f\n",
          c.T, c.lookahead, pack, c.docs, 2 * c.T, eff);
  return 0;
}
