/*
 * bench_restore_tokens.c - how long a language-model pipeline takes to
 * resume (issue 28 item 4, docs/RESUME.md): the chain
 *
 *   tokens(A) -> pack(T) --\
 *                           mix(seed, stop = all) -> batch(B)
 *   tokens(B) -> pack(T) --/
 *
 * over two sets of llm.c token shards (--tokens in all, half each, in
 * --shards files per set, written into --dir with deterministic tokens and
 * deleted at the end unless --keep).  Source A's "documents" are windows
 * of --wa tokens, B's of --wb, so the packs' rows hold several of them
 * with a ragged tail (first fit over 8 open rows).
 *
 * One pass is read to learn its length (batches); then, for each position
 * (--at, fractions of the pass), a fresh chain reads up to it (timed: what
 * a restore that re-reads the pass would cost), saves, and the state is
 * restored into --runs fresh chains: the restore call and the first batch
 * after it are timed (medians), and the next 4 batches are checked equal
 * to those of the chain that saved.  One JSON object per figure on stdout,
 * a table on stderr.
 */
#define BENCH_NAME "bench_restore_tokens"
#include "bench_util.h"
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct cfg {
  long long tokens, shards, T, B, wa, wb, runs;
  int keep;
  const char *dir;
  double at[16];
  int nat;
} cfg;

static char **paths[2];

static void write_shards(const cfg *c) {
  mkdir(c->dir, 0755);
  uint64_t s = BENCH_RNG_SEED;
  long long per = c->tokens / 2 / c->shards;
  double t0 = now_s();
  for (int set = 0; set < 2; set++) {
    paths[set] = calloc((size_t)c->shards, sizeof *paths[set]);
    for (long long i = 0; i < c->shards; i++) {
      paths[set][i] = malloc(4096);
      snprintf(paths[set][i], 4096, "%s/restore_%c_%03lld.bin", c->dir,
               "ab"[set], i);
      bench_write_token_shard(paths[set][i], per, &s);
    }
  }
  fprintf(stderr, "wrote 2 x %lld shards of %lld tokens in %.1f s\n", c->shards,
          per, now_s() - t0);
}

static sl_reader *build(const cfg *c) {
  sl_reader *packs[2];
  for (int set = 0; set < 2; set++) {
    sl_tokens_opts o = SL_TOKENS_OPTS_INIT;
    o.seq_len = set ? c->wb : c->wa;
    sl_reader *r = NULL;
    CHECK(sl_tokens_reader((const char *const *)paths[set], (size_t)c->shards,
                           &o, &r));
    static const char *const fields[] = {"inputs"};
    sl_pack_opts po = SL_PACK_OPTS_INIT;
    po.seq_len = c->T;
    po.fields = fields;
    po.nfields = 1;
    CHECK(sl_pack(r, &po, &packs[set]));
  }
  sl_mix_opts mo = SL_MIX_OPTS_INIT;
  mo.seed = 7;
  mo.stop = SL_MIX_STOP_ALL;
  sl_reader *r = NULL;
  CHECK(sl_mix(packs, 2, &mo, &r));
  CHECK(sl_batch(r, (size_t)c->B, NULL, &r));
  return r;
}

/* A digest of a batch's bytes (FNV-1a over every field). */
static uint64_t digest(const sl_sample *s) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < sl_sample_nfields(s); i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    const unsigned char *p = t->data;
    size_t n = sl_tensor_nbytes(t);
    for (size_t k = 0; k < n; k++)
      h = (h ^ p[k]) * 1099511628211ull;
  }
  return h;
}

static long read_batches(sl_reader *r, long n) {
  long k = 0;
  sl_sample *s = NULL;
  int rc;
  while (k < n && (rc = sl_reader_next(r, &s)) == SL_OK) {
    sl_sample_release(s);
    k++;
  }
  return k;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_restore_tokens [--tokens N] [--shards K] [--T T] "
          "[--B B] [--wa W] [--wb W] [--runs N] [--at F,F,...] [--dir DIR] "
          "[--keep]\n");
  exit(2);
}

int main(int argc, char **argv) {
  cfg c = {1LL << 30,
           4,
           2048,
           8,
           1021,
           397,
           5,
           0,
           "/tmp/sluice_restore_tokens",
           {0.01, 0.5, 0.9},
           3};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--keep")) {
      c.keep = 1;
      continue;
    }
    if (!v) usage();
    i++;
    const struct {
      const char *name;
      long long *v;
    } nums[] = {{"--tokens", &c.tokens}, {"--shards", &c.shards},
                {"--T", &c.T},           {"--B", &c.B},
                {"--wa", &c.wa},         {"--wb", &c.wb},
                {"--runs", &c.runs}};
    size_t k = 0;
    while (k < sizeof nums / sizeof nums[0] && strcmp(a, nums[k].name))
      k++;
    if (k < sizeof nums / sizeof nums[0])
      *nums[k].v = atoll(v);
    else if (!strcmp(a, "--dir"))
      c.dir = v;
    else if (!strcmp(a, "--at")) {
      c.nat = 0;
      for (char *p = (char *)v; *p && c.nat < 16;) {
        c.at[c.nat++] = strtod(p, &p);
        if (*p == ',') p++;
      }
    } else
      usage();
  }
  if (c.tokens < 4 || c.shards < 1 || c.runs < 1 || c.runs > 64) usage();
  write_shards(&c);

  /* one pass: its length, and a page-cached file set */
  sl_reader *r = build(&c);
  double t0 = now_s();
  long n = read_batches(r, -1UL >> 1);
  double pass_s = now_s() - t0;
  sl_reader_destroy(r);
  fprintf(stderr,
          "one pass: %ld batches of %lld x %lld tokens in %.1f s "
          "(%.0f M tokens/s in)\n",
          n, c.B, c.T, pass_s, (double)c.tokens / pass_s * 1e-6);
  printf("{\"bench\":\"restore_tokens\",\"case\":\"pass\",\"tokens\":%lld,"
         "\"batches\":%ld,\"seconds\":%.3f}\n",
         c.tokens, n, pass_s);

  fprintf(stderr, "%-8s %10s %8s %12s %12s %12s\n", "at", "batch", "state",
          "read_to_s", "restore_s", "next_s");
  for (int a = 0; a < c.nat; a++) {
    long at = (long)(c.at[a] * (double)n);
    r = build(&c);
    t0 = now_s();
    if (read_batches(r, at) != at)
      bench_fail(BENCH_NAME, "reading to the position", SL_EOF);
    double read_s = now_s() - t0;
    void *st = NULL;
    size_t len = 0;
    CHECK(sl_reader_save(r, &st, &len));
    uint64_t want[4];
    for (int i = 0; i < 4; i++) {
      sl_sample *s = NULL;
      CHECK(sl_reader_next(r, &s));
      want[i] = digest(s);
      sl_sample_release(s);
    }
    sl_reader_destroy(r);
    double rs[64], ns[64];
    for (int k = 0; k < c.runs; k++) {
      r = build(&c);
      t0 = now_s();
      CHECK(sl_reader_restore(r, st, len));
      rs[k] = now_s() - t0;
      for (int i = 0; i < 4; i++) {
        sl_sample *s = NULL;
        t0 = now_s();
        CHECK(sl_reader_next(r, &s));
        if (i == 0) ns[k] = now_s() - t0;
        if (digest(s) != want[i]) {
          fprintf(stderr,
                  "bench_restore_tokens: batch %ld after the restore "
                  "differs from the uninterrupted run's\n",
                  at + i);
          return 1;
        }
        sl_sample_release(s);
      }
      sl_reader_destroy(r);
    }
    double rm = median(rs, (int)c.runs), nm = median(ns, (int)c.runs);
    fprintf(stderr, "%-8.3f %10ld %7zuB %12.3f %12.6f %12.6f\n", c.at[a], at,
            len, read_s, rm, nm);
    printf("{\"bench\":\"restore_tokens\",\"case\":\"restore\",\"at\":%.4f,"
           "\"batch\":%ld,\"state_bytes\":%zu,\"read_to_s\":%.3f,"
           "\"restore_s\":%.6f,\"next_s\":%.6f,\"runs\":%lld}\n",
           c.at[a], at, len, read_s, rm, nm, c.runs);
    sl_free(st);
  }
  for (int set = 0; set < 2; set++) {
    for (long long i = 0; i < c.shards; i++) {
      if (!c.keep) unlink(paths[set][i]);
      free(paths[set][i]);
    }
    free(paths[set]);
  }
  if (!c.keep) rmdir(c.dir);
  return 0;
}
