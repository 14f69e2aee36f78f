/*
 * shard_ids.c - the program tests/mpi/run.sh starts under mpirun.  It links
 * libsluice only (not MPI): sl_open_files takes rank and world from the
 * variables Open MPI's launcher sets (OMPI_COMM_WORLD_RANK/SIZE).
 *
 *   shard_ids write DIR          writes DIR/part-0.slr .. part-4.slr, records
 *                                {id: i64} numbered 0 .. 318 across them
 *   shard_ids read DIR EPOCHS    reads DIR/part-*.slr with sl_open_files
 *                                (shuffled, 2 threads, rank and world from the
 *                                environment) for EPOCHS passes; writes the
 *                                ids of epoch e to DIR/rank<R>.epoch<e>.txt,
 *                                one per line, and "rank R world W" to
 *                                DIR/rank<R>.info
 *   shard_ids wds NAME DIR       reads the WebDataset shards NAME with
 *                                sl_open and no options (rank and world
 *                                from the environment: issue 24 item 10);
 *                                writes each sample's key to DIR/wds<R>.txt
 *
 * Exits 1 with a message on any failure.
 */
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const int64_t k_sizes[] = {23, 150, 8, 77, 61};
#define NFILES 5

static void die(const char *what, int rc) {
  fprintf(stderr, "shard_ids: %s: %s (%s)\n", what, sl_err_name(rc),
          sl_last_error());
  exit(1);
}

#define CHECK(expr)                                                            \
  do {                                                                         \
    int rc_ = (expr);                                                          \
    if (rc_ < 0) die(#expr, rc_);                                              \
  } while (0)

static int write_files(const char *dir) {
  if (mkdir(dir, 0755) != 0) {
    perror(dir);
    return 1;
  }
  sl_schema *s = sl_schema_new();
  CHECK(sl_schema_add(s, "id", SL_I64, 0, NULL));
  int64_t id = 0;
  for (int f = 0; f < NFILES; f++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/part-%d.slr", dir, f);
    sl_slr_writer *w;
    sl_slr_writer_opts o = {1, 0, 9}; /* small chunks: many to permute */
    CHECK(sl_slr_writer_open(path, s, &o, &w));
    for (int64_t i = 0; i < k_sizes[f]; i++, id++) {
      sl_sample *r = sl_sample_new(s);
      int64_t *v;
      CHECK(sl_sample_alloc(r, 0, 0, NULL, (void **)&v));
      *v = id;
      CHECK(sl_slr_writer_append(w, r));
      sl_sample_release(r);
    }
    CHECK(sl_slr_writer_close(w));
  }
  sl_schema_release(s);
  return 0;
}

static int read_epochs(const char *dir, int epochs) {
  int rank, world;
  CHECK(sl_shard_env(&rank, &world));
  /* mpirun must be where they came from. */
  const char * or = getenv("OMPI_COMM_WORLD_RANK");
  if (! or || atoi(or) != rank) {
    fprintf(stderr,
            "shard_ids: rank %d did not come from "
            "OMPI_COMM_WORLD_RANK (%s)\n",
            rank, or ? or : "unset");
    return 1;
  }
  char pattern[4096], path[4200];
  snprintf(pattern, sizeof pattern, "%s/part-*.slr", dir);
  const char *names[] = {pattern};
  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT; /* rank, world from env */
  o.threads = 2;
  o.shuffle = 1;
  o.seed = 2024;
  o.window = 2;
  o.remainder = SL_SHARD_UNEVEN;
  sl_reader *r;
  CHECK(sl_open_files(names, 1, &o, &r));
  for (int e = 0; e < epochs; e++) {
    if (e > 0) CHECK(sl_reader_reset(r));
    snprintf(path, sizeof path, "%s/rank%d.epoch%d.txt", dir, rank, e);
    FILE *out = fopen(path, "w");
    if (!out) {
      perror(path);
      return 1;
    }
    sl_sample *s;
    int rc;
    while ((rc = sl_reader_next(r, &s)) == SL_OK) {
      fprintf(out, "%lld\n",
              (long long)*(const int64_t *)sl_tensor_data(
                  sl_sample_at_const(s, 0)));
      sl_sample_release(s);
    }
    if (rc != SL_EOF) die("sl_reader_next", rc);
    fclose(out);
  }
  sl_reader_destroy(r);
  snprintf(path, sizeof path, "%s/rank%d.info", dir, rank);
  FILE *info = fopen(path, "w");
  if (!info) {
    perror(path);
    return 1;
  }
  fprintf(info, "rank %d world %d\n", rank, world);
  fclose(info);
  return 0;
}

static int read_wds(const char *name, const char *dir) {
  int rank, world;
  CHECK(sl_shard_env(&rank, &world));
  char path[4200];
  snprintf(path, sizeof path, "%s/wds%d.txt", dir, rank);
  FILE *out = fopen(path, "w");
  if (!out) {
    perror(path);
    return 1;
  }
  sl_reader *r;
  CHECK(sl_open(name, NULL, &r));
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    const sl_tensor *k = sl_sample_field(s, "__key__");
    fprintf(out, "%.*s\n", (int)k->nbytes, (const char *)k->data);
    sl_sample_release(s);
  }
  if (rc != SL_EOF) die("sl_reader_next", rc);
  fclose(out);
  sl_reader_destroy(r);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "write") == 0) return write_files(argv[2]);
  if (argc == 4 && strcmp(argv[1], "read") == 0)
    return read_epochs(argv[2], atoi(argv[3]));
  if (argc == 4 && strcmp(argv[1], "wds") == 0)
    return read_wds(argv[2], argv[3]);
  fprintf(stderr, "usage: shard_ids write DIR | shard_ids read DIR EPOCHS | "
                  "shard_ids wds NAME DIR\n");
  return 2;
}
