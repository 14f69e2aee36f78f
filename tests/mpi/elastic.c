/*
 * elastic.c - the elastic restart test tests/mpi/run.sh starts under
 * mpirun (issue 15 item 3).  It links libsluice only: sl_open_files takes
 * rank and world from the variables Open MPI's launcher sets.  The data is
 * shard_ids' (DIR/part-*.slr, 319 records).
 *
 *   elastic save DIR TAG        every rank of a job of W reads some samples
 *                               of epoch 0 (10 + 17 x rank), writes their
 *                               ids to DIR/TAG.old<R>.txt and its state to
 *                               DIR/TAG.state<R>
 *   elastic resume DIR TAG W    every rank of a job of W' hands all W states
 *                               to sl_reader_restore_elastic, writes the ids
 *                               of the rest of the epoch to DIR/TAG.new<R>.txt
 *                               and those of the next epoch to
 *                               DIR/TAG.next<R>.txt
 *
 * Exits 1 with a message on any failure.
 */
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, int rc) {
  fprintf(stderr, "elastic: %s: %s (%s)\n", what, sl_err_name(rc),
          sl_last_error());
  exit(1);
}

#define CHECK(expr)                                                            \
  do {                                                                         \
    int rc_ = (expr);                                                          \
    if (rc_ < 0) die(#expr, rc_);                                              \
  } while (0)

static sl_reader *open_data(const char *dir, int threads) {
  char pattern[4096];
  snprintf(pattern, sizeof pattern, "%s/part-*.slr", dir);
  const char *names[] = {pattern};
  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT; /* rank, world from env */
  o.threads = (uint32_t)threads;
  o.shuffle = 1;
  o.seed = 2024;
  o.window = 2;
  o.remainder = SL_SHARD_UNEVEN;
  sl_reader *r;
  CHECK(sl_open_files(names, 1, &o, &r));
  return r;
}

/* Writes the ids of up to `max` samples of r to path; returns the count. */
static long dump(sl_reader *r, const char *path, long max) {
  FILE *out = fopen(path, "w");
  if (!out) {
    perror(path);
    exit(1);
  }
  long n = 0;
  sl_sample *s;
  int rc = SL_OK;
  while (n < max && (rc = sl_reader_next(r, &s)) == SL_OK) {
    fprintf(out, "%lld\n",
            (long long)*(const int64_t *)sl_tensor_data(
                sl_sample_at_const(s, 0)));
    sl_sample_release(s);
    n++;
  }
  if (rc != SL_OK && rc != SL_EOF) die("sl_reader_next", rc);
  fclose(out);
  return n;
}

static int save(const char *dir, const char *tag) {
  int rank, world;
  CHECK(sl_shard_env(&rank, &world));
  sl_reader *r = open_data(dir, 2);
  char path[4300];
  snprintf(path, sizeof path, "%s/%s.old%d.txt", dir, tag, rank);
  dump(r, path, 10 + 17 * rank);
  void *st;
  size_t len;
  CHECK(sl_reader_save(r, &st, &len));
  snprintf(path, sizeof path, "%s/%s.state%d", dir, tag, rank);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(st, 1, len, f) != len || fclose(f) != 0) {
    perror(path);
    return 1;
  }
  sl_free(st);
  sl_reader_destroy(r);
  return 0;
}

static int resume(const char *dir, const char *tag, int old_world) {
  int rank, world;
  CHECK(sl_shard_env(&rank, &world));
  void *st[64];
  size_t len[64];
  char path[4300];
  if (old_world < 1 || old_world > 64) return 2;
  for (int i = 0; i < old_world; i++) {
    snprintf(path, sizeof path, "%s/%s.state%d", dir, tag, i);
    FILE *f = fopen(path, "rb");
    if (!f) {
      perror(path);
      return 1;
    }
    st[i] = malloc(1 << 16);
    len[i] = fread(st[i], 1, 1 << 16, f);
    fclose(f);
  }
  sl_reader *r = open_data(dir, 1 + rank % 3); /* any thread count */
  CHECK(sl_reader_restore_elastic(r, (const void *const *)st, len,
                                  (size_t)old_world));
  snprintf(path, sizeof path, "%s/%s.new%d.txt", dir, tag, rank);
  dump(r, path, 1L << 30);
  CHECK(sl_reader_reset(r));
  snprintf(path, sizeof path, "%s/%s.next%d.txt", dir, tag, rank);
  dump(r, path, 1L << 30);
  sl_reader_destroy(r);
  for (int i = 0; i < old_world; i++)
    free(st[i]);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "save") == 0) return save(argv[2], argv[3]);
  if (argc == 5 && strcmp(argv[1], "resume") == 0)
    return resume(argv[2], argv[3], atoi(argv[4]));
  fprintf(stderr, "usage: elastic save DIR TAG | elastic resume DIR TAG W\n");
  return 2;
}
