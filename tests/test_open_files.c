/* test_open_files.c - sl_open_files over five SLR files of different sizes:
 * exact multisets for 1, 2, 4 threads; ordered output identical across
 * thread counts, runs and the epoch plan; unordered multisets; reset as the
 * next epoch; 4 ranks x 3 epochs; errors at their position (corrupt chunk,
 * missing file, changed file, schema mismatch, bad options) with every
 * worker stopped; destroy at any moment; rank and world from the
 * environment; the default shuffle window mixing class-sorted Fashion-MNIST
 * (one file and 4 shards: >= 8 of 10 classes per batch of 64). */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "pack/import.h"
#include "formats/epoch_plan.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- fixtures ---------------------------------------------------------------
 */

#define TMP_TAG "open-files"

static const char *tmpdir(void) {
  return test_tmpdir(TMP_TAG);
}

/* A malloc'd path: the caller frees it (or keeps it, as g_paths does). */
static char *tmppath(const char *name) {
  return test_tmppath_dup(TMP_TAG, name);
}

#define NF 5
#define PER_CHUNK 7
static const int64_t k_sizes[NF] = {37, 120, 5, 64, 91};
#define TOTAL 317 /* the sum of k_sizes */
static char *g_paths[NF];
static const char *g_names[NF];

/* {a: i64, b: f32[2] = (a, -a)}: with ("id", "x") the files' schema; other
 * names give another schema of the same layout (the same bytes). */
static sl_schema *named_schema(const char *a, const char *b) {
  sl_schema *s = sl_schema_new();
  ASSERT_OK(sl_schema_add(s, a, SL_I64, 0, NULL));
  ASSERT_OK(sl_schema_add(s, b, SL_F32, 1, (int64_t[]){2}));
  return s;
}

/* Writes records first .. first + n - 1 with schema `s` (borrowed). */
static void write_ids_with(const char *path, sl_schema *s, int64_t first,
                           int64_t n) {
  sl_slr_writer *w;
  sl_slr_writer_opts o = {1, 0, PER_CHUNK};
  ASSERT_OK(sl_slr_writer_open(path, s, &o, &w));
  for (int64_t i = first; i < first + n; i++) {
    sl_sample *r = sl_sample_new(s);
    int64_t *v;
    float *x;
    ASSERT_OK(sl_sample_alloc(r, 0, 0, NULL, (void **)&v));
    ASSERT_OK(sl_sample_alloc(r, 1, 1, (int64_t[]){2}, (void **)&x));
    *v = i;
    x[0] = (float)i;
    x[1] = -(float)i;
    ASSERT_OK(sl_slr_writer_append(w, r));
    sl_sample_release(r);
  }
  ASSERT_OK(sl_slr_writer_close(w));
}

static void write_ids_named(const char *path, const char *a, const char *b,
                            int64_t first, int64_t n) {
  sl_schema *s = named_schema(a, b);
  write_ids_with(path, s, first, n);
  sl_schema_release(s);
}

/* {id: i64, x: f32[2] = (id, -id)} */
static void write_ids(const char *path, int64_t first, int64_t n) {
  write_ids_named(path, "id", "x", first, n);
}

static int64_t base_of(int f) {
  int64_t b = 0;
  for (int i = 0; i < f; i++)
    b += k_sizes[i];
  return b;
}

static void make_files(void) {
  if (g_paths[0]) return;
  for (int f = 0; f < NF; f++) {
    char name[32];
    snprintf(name, sizeof name, "f%d.slr", f);
    g_paths[f] = tmppath(name);
    g_names[f] = g_paths[f];
    write_ids(g_paths[f], base_of(f), k_sizes[f]);
  }
}

static sl_open_files_opts opts(int threads, bool shuffle, int world) {
  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
  o.threads = (uint32_t)threads;
  o.shuffle = shuffle;
  o.seed = 77;
  o.window = 1;
  o.rank = 0;
  o.world = world;
  o.remainder = SL_SHARD_UNEVEN;
  return o;
}

/* Reads the pass to its end; returns the ids (checked against x) and the
 * count in *n.  The final code is returned in *rc. */
static int64_t *read_pass(sl_reader *r, int64_t *n, int *rc) {
  int64_t cap = 64, k = 0;
  int64_t *ids = malloc((size_t)cap * sizeof *ids);
  sl_sample *s;
  while ((*rc = sl_reader_next(r, &s)) == SL_OK) {
    int64_t id = *(const int64_t *)sl_sample_at_const(s, 0)->data;
    const float *x = sl_sample_at_const(s, 1)->data;
    ASSERT_TRUE(x[0] == (float)id && x[1] == -(float)id);
    if (k == cap) ids = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
    ids[k++] = id;
    sl_sample_release(s);
  }
  *n = k;
  return ids;
}

static int64_t *read_all(sl_reader *r, int64_t *n) {
  int rc;
  int64_t *ids = read_pass(r, n, &rc);
  ASSERT_RC(rc, SL_EOF);
  return ids;
}

static int64_t *read_names(const char *const *names, size_t nn,
                           const sl_open_files_opts *o, int64_t *n) {
  sl_reader *r;
  ASSERT_OK(sl_open_files(names, nn, o, &r));
  ASSERT_STREQ(sl_reader_name(r), "open_files");
  int64_t *ids = read_all(r, n);
  sl_reader_destroy(r);
  return ids;
}

static int64_t *read_files(const sl_open_files_opts *o, int64_t *n) {
  make_files();
  return read_names(g_names, NF, o, n);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* ids is a permutation of 0 .. TOTAL-1. */
static void assert_all_once(const int64_t *ids, int64_t n) {
  ASSERT_EQ(n, TOTAL);
  int64_t *s = malloc((size_t)n * sizeof *s);
  memcpy(s, ids, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_i64);
  for (int64_t i = 0; i < n; i++)
    ASSERT_EQ(s[i], i);
  free(s);
}

/* The epoch plan's sequence for these files, as ids. */
static int64_t *plan_ids(const sl__plan_params *p, int64_t *n) {
  make_files();
  sl__plan_file pf[NF];
  uint32_t *recs[NF];
  int64_t *chunk_base[NF];
  for (int f = 0; f < NF; f++) {
    sl_slr_file *h;
    ASSERT_OK(sl_slr_open(g_paths[f], NULL, &h));
    uint64_t nc = sl_slr_chunks(h);
    recs[f] = calloc(nc + 1, sizeof(uint32_t));
    chunk_base[f] = calloc(nc + 1, sizeof(int64_t));
    for (uint64_t c = 0; c < nc; c++) {
      sl_slr_chunk_info ci;
      ASSERT_OK(sl_slr_chunk_info_get(h, c, &ci));
      recs[f][c] = ci.records;
      chunk_base[f][c] = base_of(f) + (int64_t)ci.first_record;
    }
    pf[f] = (sl__plan_file){nc, recs[f]};
    sl_slr_close(h);
  }
  sl__plan pl;
  ASSERT_OK(sl__plan_build(pf, NF, p, &pl));
  int64_t *ids = calloc(pl.records + 1, sizeof *ids), k = 0;
  for (size_t g = 0; g < pl.ngroups; g++) {
    const sl__plan_group *gr = &pl.groups[g];
    uint64_t j0 = 0;
    for (size_t u = gr->first_unit; u < gr->first_unit + gr->nunits; u++) {
      const sl__plan_unit *un = &pl.units[u];
      for (uint32_t j = 0; j < un->count; j++) {
        uint32_t rec = un->recs ? un->recs[j] : un->first + j;
        uint64_t slot = un->slots ? un->slots[j] : j0 + j;
        ids[k + (int64_t)slot] = chunk_base[un->file][un->chunk] + rec;
      }
      j0 += un->count;
    }
    k += (int64_t)gr->records;
  }
  *n = k;
  sl__plan_free(&pl);
  for (int f = 0; f < NF; f++) {
    free(recs[f]);
    free(chunk_base[f]);
  }
  return ids;
}

static void *nothing(void *arg) {
  return arg;
}

/* Threads of this process now.  The first thread ever started may bring a
 * runtime's helper thread along (ThreadSanitizer's), so one is started and
 * joined before the first count. */
static int thread_count(void) {
  static bool warmed;
  if (!warmed) {
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, nothing, NULL), 0);
    pthread_join(t, NULL);
    warmed = true;
  }
  DIR *d = opendir("/proc/self/task");
  ASSERT_NOT_NULL(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* The thread count once it has come down to `want`: pthread_join returns
 * when the kernel clears the thread's id, a moment before the thread leaves
 * /proc/self/task, so a joined thread may still be listed briefly (on a
 * loaded machine, long enough to be seen).  Waits up to 5 s; returns the
 * last count. */
static int settled_thread_count(int want) {
  int n = thread_count();
  for (int i = 0; i < 500 && n > want; i++) {
    test_sleep_us(10000);
    n = thread_count();
  }
  return n;
}

static void clear_env(void) {
  const char *v[] = {
      "RANK",     "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
      "PMI_RANK", "PMI_SIZE",   "PADDLE_TRAINER_ID",    "PADDLE_TRAINERS_NUM"};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++)
    unsetenv(v[i]);
}

/* --- the multiset and the order
 * --------------------------------------------------
 */

TEST(concatenation_for_1_2_4_threads) {
  clear_env();
  const int threads[] = {1, 2, 4};
  for (int t = 0; t < 3; t++) {
    sl_open_files_opts o = opts(threads[t], false, 1);
    int64_t n;
    int64_t *ids = read_files(&o, &n);
    ASSERT_EQ(n, TOTAL);
    for (int64_t i = 0; i < n; i++)
      ASSERT_EQ(ids[i], i); /* file 0, then file 1, ... */
    free(ids);
    o.unordered = 1;
    ids = read_files(&o, &n);
    assert_all_once(ids, n);
    free(ids);
  }
  /* NULL options: one thread, ranks from the (empty) environment. */
  make_files();
  int64_t n;
  int64_t *ids = read_names(g_names, NF, NULL, &n);
  for (int64_t i = 0; i < n; i++)
    ASSERT_EQ(ids[i], i);
  free(ids);
}

TEST(ordered_is_identical_across_threads_and_runs) {
  clear_env();
  const uint32_t windows[] = {1, 3, 100};
  for (int wi = 0; wi < 3; wi++) {
    sl__plan_params p = {77, 0, true, windows[wi], 0, 1, SL_SHARD_UNEVEN, SL__PLAN_SLR};
    int64_t pn;
    int64_t *want = plan_ids(&p, &pn);
    ASSERT_EQ(pn, TOTAL);
    assert_all_once(want, pn);
    const int threads[] = {1, 2, 8, 2, 1};
    for (int t = 0; t < 5; t++) {
      sl_open_files_opts o = opts(threads[t], true, 1);
      o.window = windows[wi];
      o.buffer = t % 2 ? 3 : 0; /* tiny and default budgets */
      int64_t n;
      int64_t *ids = read_files(&o, &n);
      ASSERT_EQ(n, pn);
      for (int64_t i = 0; i < n; i++)
        ASSERT_EQ(ids[i], want[i]);
      free(ids);
    }
    /* Shuffled: not the concatenation. */
    int64_t fixed = 0;
    for (int64_t i = 0; i < pn; i++)
      fixed += want[i] == i;
    ASSERT_LE(fixed, TOTAL / 4);
    free(want);
  }
}

TEST(unordered_gives_the_same_multiset) {
  clear_env();
  for (int t = 1; t <= 4; t++) {
    sl_open_files_opts o = opts(t, true, 1);
    o.unordered = 1;
    o.window = 4;
    o.buffer = 5;
    int64_t n;
    int64_t *ids = read_files(&o, &n);
    assert_all_once(ids, n);
    free(ids);
  }
}

TEST(reset_reads_the_next_epoch) {
  clear_env();
  make_files();
  sl_open_files_opts o = opts(2, true, 1);
  o.window = 2;
  o.epoch = 5;
  sl_reader *r;
  ASSERT_OK(sl_open_files(g_names, NF, &o, &r));
  int64_t n;
  int64_t *e5 = read_all(r, &n);
  assert_all_once(e5, n);
  ASSERT_OK(sl_reader_reset(r));
  int64_t *e6 = read_all(r, &n);
  assert_all_once(e6, n);
  ASSERT_NE(memcmp(e5, e6, sizeof(int64_t) * TOTAL), 0);
  /* Epoch 6 is epoch 6 however it is reached. */
  sl__plan_params p = {77, 6, true, 2, 0, 1, SL_SHARD_UNEVEN, SL__PLAN_SLR};
  int64_t pn;
  int64_t *want = plan_ids(&p, &pn);
  ASSERT_EQ(memcmp(e6, want, sizeof(int64_t) * TOTAL), 0);
  o.epoch = 6;
  o.threads = 3;
  int64_t *fresh = read_files(&o, &n);
  ASSERT_EQ(memcmp(e6, fresh, sizeof(int64_t) * TOTAL), 0);
  /* A reset in mid-pass also counts: epoch 7, then 8. */
  sl_sample *s;
  ASSERT_OK(sl_reader_reset(r));
  for (int i = 0; i < 10; i++) {
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  ASSERT_OK(sl_reader_reset(r));
  int64_t *e8 = read_all(r, &n);
  p.epoch = 8;
  int64_t *want8 = plan_ids(&p, &pn);
  ASSERT_EQ(memcmp(e8, want8, sizeof(int64_t) * TOTAL), 0);
  sl_reader_destroy(r);
  free(e5);
  free(e6);
  free(e8);
  free(want);
  free(want8);
  free(fresh);
  /* Without shuffle every epoch is the same concatenation. */
  o = opts(2, false, 1);
  ASSERT_OK(sl_open_files(g_names, NF, &o, &r));
  for (int pass = 0; pass < 3; pass++) {
    int64_t *ids = read_all(r, &n);
    for (int64_t i = 0; i < n; i++)
      ASSERT_EQ(ids[i], i);
    free(ids);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

/* --- ranks
 * --------------------------------------------------------------------------
 */

TEST(four_ranks_three_epochs_disjoint_covering_changing) {
  clear_env();
  make_files();
  int64_t *prev[4] = {NULL}, prevn[4] = {0};
  for (int e = 0; e < 3; e++) {
    int *count = calloc(TOTAL, sizeof *count);
    for (int rank = 0; rank < 4; rank++) {
      sl_open_files_opts o = opts(1 + rank % 3, true, 4);
      o.rank = rank;
      o.window = 2;
      sl_reader *r;
      ASSERT_OK(sl_open_files(g_names, NF, &o, &r));
      for (int k = 0; k < e; k++) /* reach epoch e by resets */
        ASSERT_OK(sl_reader_reset(r));
      int64_t n;
      int64_t *ids = read_all(r, &n);
      sl_reader_destroy(r);
      ASSERT_TRUE(n == TOTAL / 4 || n == TOTAL / 4 + 1);
      ASSERT_EQ(n, (int64_t)sl_shard_count(TOTAL, rank, 4, SL_SHARD_UNEVEN));
      for (int64_t i = 0; i < n; i++)
        count[ids[i]]++;
      qsort(ids, (size_t)n, sizeof *ids, cmp_i64);
      if (prev[rank]) {
        ASSERT_TRUE(prevn[rank] != n ||
                    memcmp(prev[rank], ids, (size_t)n * sizeof *ids) != 0);
        free(prev[rank]);
      }
      prev[rank] = ids;
      prevn[rank] = n;
    }
    for (int64_t id = 0; id < TOTAL; id++)
      ASSERT_EQ(count[id], 1);
    free(count);
  }
  for (int rank = 0; rank < 4; rank++)
    free(prev[rank]);
  /* drop and pad give every rank the same count. */
  for (int rank = 0; rank < 4; rank++) {
    sl_open_files_opts o = opts(2, true, 4);
    o.rank = rank;
    o.remainder = SL_SHARD_DROP;
    int64_t n;
    free(read_files(&o, &n));
    ASSERT_EQ(n, TOTAL / 4);
    o.remainder = SL_SHARD_PAD;
    free(read_files(&o, &n));
    ASSERT_EQ(n, TOTAL / 4 + 1);
  }
}

TEST(rank_and_world_from_the_environment) {
  clear_env();
  make_files();
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  int64_t n, wn;
  int64_t *ids = read_names(g_names, NF, NULL, &n); /* defaults: from env */
  sl_open_files_opts o = opts(1, false, 3);
  o.rank = 1;
  o.remainder = SL_SHARD_PAD;
  clear_env();
  int64_t *want = read_files(&o, &wn);
  ASSERT_EQ(n, wn);
  ASSERT_EQ(n, 106);
  ASSERT_EQ(memcmp(ids, want, (size_t)n * sizeof *ids), 0);
  ASSERT_EQ(ids[0], 106);
  free(ids);
  free(want);
  /* Explicit rank/world win over the environment. */
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  o = opts(1, false, 2);
  o.rank = 1;
  ids = read_files(&o, &n);
  ASSERT_EQ(ids[0], TOTAL / 2);
  free(ids);
  /* A bad variable fails the call, naming it. */
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "2", 1);
  sl_reader *r;
  o = opts(1, false, SL_RANK_FROM_ENV);
  o.rank = SL_RANK_FROM_ENV;
  ASSERT_RC(sl_open_files(g_names, NF, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shard: RANK=2 is not below WORLD_SIZE=2");
  setenv("RANK", "one", 1);
  ASSERT_RC(sl_open_files(g_names, NF, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shard: RANK='one' is not a decimal integer");
  clear_env();
}

/* --- errors
 * ---------------------------------------------------------------------------
 */

/* A copy of file 3 whose chunks `bad` (a list ending with -1) have a payload
 * byte flipped. */
static char *corrupt_copy(const char *name, const int *bad) {
  char *p = tmppath(name);
  write_ids(p, base_of(3), k_sizes[3]);
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(p, NULL, &f));
  FILE *fp = fopen(p, "r+b");
  ASSERT_NOT_NULL(fp);
  for (; *bad >= 0; bad++) {
    sl_slr_chunk_info ci;
    ASSERT_OK(sl_slr_chunk_info_get(f, (uint64_t)*bad, &ci));
    long at = (long)(ci.offset + 40 + ci.stored_size / 2);
    fseek(fp, at, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, at, SEEK_SET);
    fputc(c ^ 0x5a, fp);
  }
  fclose(fp);
  sl_slr_close(f);
  return p;
}

TEST(corrupt_chunk_in_file_3_fails_at_its_position) {
  clear_env();
  make_files();
  char *bad = corrupt_copy("c3.slr", (const int[]){4, -1});
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(bad, NULL, &f));
  sl_slr_chunk_info ci;
  ASSERT_OK(sl_slr_chunk_info_get(f, 4, &ci));
  sl_slr_close(f);
  const char *names[NF] = {g_names[0], g_names[1], g_names[2], bad, g_names[4]};
  int base = thread_count();
  char want[1024];
  /* 37 + 120 + 5 records, then 4 chunks of 7 of file 3: sample 190. */
  snprintf(want, sizeof want,
           "open_files: epoch 0, sample 190: %s: chunk 4 at offset %llu: "
           "payload CRC mismatch",
           bad, (unsigned long long)ci.offset);
  char first_msg[1024] = "";
  int64_t first_n = -1;
  for (int shuffle = 0; shuffle < 2; shuffle++)
    for (int t = 1; t <= 4; t *= 2) {
      sl_open_files_opts o = opts(t, shuffle, 1);
      o.window = 3;
      sl_reader *r;
      ASSERT_OK(sl_open_files(names, NF, &o, &r));
      int64_t n;
      int rc;
      int64_t *ids = read_pass(r, &n, &rc);
      ASSERT_RC(rc, SL_ECORRUPT);
      if (!shuffle) {
        ASSERT_EQ(n, 190);
        for (int64_t i = 0; i < n; i++)
          ASSERT_EQ(ids[i], i);
        ASSERT_CONTAINS(sl_last_error(), want);
      } else if (first_n < 0) {
        first_n = n;
        snprintf(first_msg, sizeof first_msg, "%s", sl_last_error());
        ASSERT_CONTAINS(first_msg, bad);
        ASSERT_CONTAINS(first_msg, ": chunk 4 at offset");
      } else { /* the same place and message for every thread count */
        ASSERT_EQ(n, first_n);
        ASSERT_STREQ(sl_last_error(), first_msg);
      }
      free(ids);
      /* Every worker has been joined before the error came back. */
      ASSERT_EQ(settled_thread_count(base), base);
      /* The error is sticky. */
      sl_sample *s;
      ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
      /* Reset starts the next epoch (and fails again at the bad chunk). */
      ASSERT_OK(sl_reader_reset(r));
      ids = read_pass(r, &n, &rc);
      ASSERT_RC(rc, SL_ECORRUPT);
      ASSERT_CONTAINS(sl_last_error(), "open_files: epoch 1, sample ");
      free(ids);
      sl_reader_destroy(r);
    }
  /* Unordered: the error comes when it comes, after valid samples only. */
  for (int t = 1; t <= 4; t++) {
    sl_open_files_opts o = opts(t, true, 1);
    o.unordered = 1;
    sl_reader *r;
    ASSERT_OK(sl_open_files(names, NF, &o, &r));
    int64_t n;
    int rc;
    int64_t *ids = read_pass(r, &n, &rc);
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(), ": chunk 4 at offset");
    ASSERT_TRUE(n < TOTAL);
    qsort(ids, (size_t)n, sizeof *ids, cmp_i64);
    for (int64_t i = 1; i < n; i++)
      ASSERT_TRUE(ids[i] > ids[i - 1]);
    ASSERT_EQ(settled_thread_count(base), base);
    free(ids);
    sl_reader_destroy(r);
  }
  printf("shuffled: failed after %lld samples\n", (long long)first_n);
  free(bad);
}

TEST(skip_chunk_policy_leaves_out_bad_chunks_up_to_the_cap) {
  clear_env();
  make_files();
  char *bad = corrupt_copy("s3.slr", (const int[]){2, 7, -1});
  const char *names[NF] = {g_names[0], g_names[1], g_names[2], bad, g_names[4]};
  for (int t = 1; t <= 4; t *= 2) {
    sl_open_files_opts o = opts(t, false, 1);
    o.slr.policy = SL_CORRUPT_SKIP_CHUNK;
    int64_t n;
    int64_t *ids = read_names(names, NF, &o, &n);
    ASSERT_EQ(n, TOTAL - 2 * PER_CHUNK);
    int64_t k = 0;
    for (int64_t id = 0; id < TOTAL; id++) {
      int64_t in3 = id - base_of(3);
      if (in3 >= 0 && in3 < k_sizes[3] &&
          (in3 / PER_CHUNK == 2 || in3 / PER_CHUNK == 7))
        continue;
      ASSERT_EQ(ids[k++], id);
    }
    free(ids);
    /* A cap of 1: the second bad chunk fails the pass, in order. */
    o.slr.max_bad_chunks = 1;
    sl_reader *r;
    ASSERT_OK(sl_open_files(names, NF, &o, &r));
    int rc;
    ids = read_pass(r, &n, &rc);
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_EQ(n, base_of(3) + 6 * PER_CHUNK); /* chunk 2 left out */
    ASSERT_CONTAINS(sl_last_error(), "open_files: epoch 0, sample 204: 2 "
                                     "corrupt chunks skipped, more than the "
                                     "cap of 1; last: ");
    ASSERT_CONTAINS(sl_last_error(), ": chunk 7 at offset");
    free(ids);
    sl_reader_destroy(r);
  }
  free(bad);
}

TEST(missing_file_is_eio_naming_it) {
  clear_env();
  make_files();
  char *missing = tmppath("missing.slr");
  const char *names[NF] = {g_names[0], g_names[1], g_names[2], missing,
                           g_names[4]};
  sl_reader *r = (sl_reader *)1;
  sl_open_files_opts o = opts(2, false, 1);
  ASSERT_RC(sl_open_files(names, NF, &o, &r), SL_EIO);
  ASSERT_NULL(r);
  char want[1024];
  snprintf(want, sizeof want, "%s: cannot open: No such file or directory",
           missing);
  ASSERT_CONTAINS(sl_last_error(), want);
  /* A file that disappears after open fails at its place in the stream.
   * One thread and a budget of one sample keep the worker from reaching
   * file 3 before it is gone. */
  char *gone = tmppath("gone.slr");
  write_ids(gone, base_of(3), k_sizes[3]);
  names[3] = gone;
  o = opts(1, false, 1);
  o.buffer = 1;
  ASSERT_OK(sl_open_files(names, NF, &o, &r));
  ASSERT_EQ(unlink(gone), 0);
  int64_t n;
  int rc;
  int64_t *ids = read_pass(r, &n, &rc);
  ASSERT_RC(rc, SL_EIO);
  ASSERT_EQ(n, base_of(3));
  snprintf(want, sizeof want,
           "open_files: epoch 0, sample %lld: %s: cannot open: No such file "
           "or directory",
           (long long)base_of(3), gone);
  ASSERT_STREQ(sl_last_error(), want);
  free(ids);
  sl_reader_destroy(r);
  /* A file replaced by another with other chunks is refused, not misread. */
  write_ids(gone, 0, 3 * PER_CHUNK); /* 3 chunks instead of 10 */
  char *tmp = tmppath("gone2.slr");
  write_ids(tmp, base_of(3), k_sizes[3]);
  names[3] = tmp;
  ASSERT_OK(sl_open_files(names, NF, &o, &r));
  ASSERT_EQ(rename(gone, tmp), 0);
  ids = read_pass(r, &n, &rc);
  ASSERT_RC(rc, SL_ECORRUPT);
  ASSERT_EQ(n, base_of(3));
  snprintf(want, sizeof want,
           "open_files: epoch 0, sample %lld: %s: the file changed since "
           "open_files read it (10 chunks then, 3 now)",
           (long long)base_of(3), tmp);
  ASSERT_STREQ(sl_last_error(), want);
  free(ids);
  sl_reader_destroy(r);
  free(missing);
  free(gone);
  free(tmp);
}

TEST(schema_mismatch_names_the_first_differing_file) {
  clear_env();
  make_files();
  char *other = tmppath("other.slr");
  sl_schema *s = sl_schema_new();
  ASSERT_OK(sl_schema_add(s, "id", SL_I32, 0, NULL));
  sl_slr_writer *w;
  ASSERT_OK(sl_slr_writer_open(other, s, NULL, &w));
  ASSERT_OK(sl_slr_writer_close(w));
  sl_schema_release(s);
  const char *names[] = {g_names[0], g_names[1], other, g_names[2]};
  sl_reader *r;
  ASSERT_RC(sl_open_files(names, 4, NULL, &r), SL_ESHAPE);
  char want[1024];
  snprintf(want, sizeof want,
           "open_files: %s has schema {id: i32[]}, but %s (the first file) "
           "has {id: i64[], x: f32[2]}",
           other, g_names[0]);
  ASSERT_STREQ(sl_last_error(), want);
  free(other);
}

static int open_dummy(void *ud, const char *path, const sl_open_opts *o,
                      sl_reader **out) {
  SL_UNUSED(ud), SL_UNUSED(path), SL_UNUSED(o);
  return sl_reader_range(3, out);
}

TEST(bad_arguments_and_options) {
  clear_env();
  make_files();
  sl_reader *r;
  sl_open_files_opts o = opts(1, false, 1);
  ASSERT_RC(sl_open_files(g_names, NF, &o, NULL), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open_files: NULL out pointer");
  ASSERT_RC(sl_open_files(g_names, 0, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open_files: no file names");
  ASSERT_RC(sl_open_files(NULL, 2, &o, &r), SL_EINVAL);
  o.threads = 1025;
  ASSERT_RC(sl_open_files(g_names, NF, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
               "open_files: threads must be at most 1024, got 1025");
  /* The limit every threaded stage shares (the engine checks it). */
  setenv("SLUICE_MAX_THREADS", "2", 1);
  o.threads = 3;
  ASSERT_RC(sl_open_files(g_names, NF, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open_files: threads = 3 is more than the "
                                "limit of 2 set by SLUICE_MAX_THREADS");
  o.threads = 2;
  ASSERT_OK(sl_open_files(g_names, NF, &o, &r));
  sl_reader_destroy(r);
  unsetenv("SLUICE_MAX_THREADS");
  o = opts(1, false, 3);
  o.rank = 3;
  ASSERT_RC(sl_open_files(g_names, NF, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open_files: rank 3 is not in [0, world 3)");
  o = opts(1, false, 1);
  o.remainder = (sl_shard_policy)3;
  ASSERT_RC(sl_open_files(g_names, NF, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open_files: unknown remainder policy 3");
  o = opts(1, false, 1);
  o.slr.policy = (sl_corrupt_policy)4;
  ASSERT_RC(sl_open_files(g_names, NF, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open_files: unknown corruption policy 4");
  o = opts(1, false, 1);
  o.size = 0;
  ASSERT_RC(sl_open_files(g_names, NF, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "sl_open_files_opts: size is 0: set it to "
                                "sizeof(sl_open_files_opts) "
                                "(SL_OPEN_FILES_OPTS_INIT does)");
  /* Another format cannot be planned. */
  ASSERT_OK(sl_format_register("dummy", open_dummy, NULL));
  const char *names[] = {g_names[0], "dummy:x"};
  ASSERT_RC(sl_open_files(names, 2, NULL, &r), SL_EUNSUPPORTED);
  ASSERT_STREQ(sl_last_error(),
               "open_files: x has format 'dummy', but only slr files can be "
               "read in parallel (the epoch plan needs their index of chunks "
               "and records)");
  ASSERT_OK(sl_format_register("dummy", NULL, NULL));
  /* Name errors are the registry's. */
  const char *unknown[] = {"zip:a.zip"};
  ASSERT_RC(sl_open_files(unknown, 1, NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open_files: unknown format tag 'zip' in "
                                "'zip:a.zip' (known tags: csv, idx, image, npy, slr, text, tfrecord, tokens, wds)");
}

TEST(globs_and_empty_files) {
  clear_env();
  make_files();
  char pat[600];
  snprintf(pat, sizeof pat, "%s/f*.slr", tmpdir());
  const char *names[] = {pat};
  int64_t n;
  int64_t *ids = read_names(names, 1, NULL, &n);
  ASSERT_EQ(n, TOTAL);
  for (int64_t i = 0; i < n; i++)
    ASSERT_EQ(ids[i], i);
  free(ids);
  /* An empty file contributes nothing; all empty gives an empty pass. */
  char *empty = tmppath("empty.slr");
  write_ids(empty, 0, 0);
  const char *with_empty[] = {empty, g_names[2], empty};
  sl_open_files_opts o = opts(3, true, 2);
  o.remainder = SL_SHARD_PAD;
  ids = read_names(with_empty, 3, &o, &n);
  ASSERT_EQ(n, 3);
  free(ids);
  const char *only_empty[] = {empty};
  o = opts(2, true, 1);
  ids = read_names(only_empty, 1, &o, &n);
  ASSERT_EQ(n, 0);
  free(ids);
  free(empty);
}

/* --- lifetimes
 * --------------------------------------------------------------------------
 */

TEST(destroy_and_reset_at_any_moment) {
  clear_env();
  make_files();
  int base = thread_count();
  for (int i = 0; i < 200; i++) {
    sl_open_files_opts o = opts(1 + i % 4, i % 3 != 0, 1 + i % 2);
    o.rank = i % 2 ? 1 : 0;
    o.unordered = i % 5 == 0;
    o.window = 1 + (uint32_t)(i % 3);
    o.buffer = (uint32_t)(i % 7);
    sl_reader *r;
    ASSERT_OK(sl_open_files(g_names, NF, &o, &r));
    int take = (i * 37) % 120;
    sl_sample *s;
    for (int k = 0; k < take; k++) {
      int rc = sl_reader_next(r, &s);
      if (rc == SL_EOF) break;
      ASSERT_OK(rc);
      sl_sample_release(s);
    }
    if (i % 4 == 1) {
      ASSERT_OK(sl_reader_reset(r));
      if (i % 8 == 1) ASSERT_OK(sl_reader_has_next(r));
    }
    sl_reader_destroy(r);
  }
  ASSERT_EQ(settled_thread_count(base), base);
}

TEST(samples_outlive_the_reader) {
  clear_env();
  make_files();
  sl_open_files_opts o = opts(2, true, 1);
  sl_reader *r;
  ASSERT_OK(sl_open_files(g_names, NF, &o, &r));
  sl_sample *keep[50];
  for (int i = 0; i < 50; i++)
    ASSERT_OK(sl_reader_next(r, &keep[i]));
  sl_reader_destroy(r);
  for (int i = 0; i < 50; i++) {
    int64_t id = *(const int64_t *)sl_sample_at_const(keep[i], 0)->data;
    ASSERT_TRUE(id >= 0 && id < TOTAL);
    ASSERT_TRUE(((const float *)sl_sample_at_const(keep[i], 1)->data)[0] ==
                (float)id);
    sl_sample_release(keep[i]);
  }
}

/* --- files replaced while open (issue 13, item 5) ----------------------------
 */

/* Reads a pass, failing the test when a sample's schema is not the
 * reader's; returns the final code and the count in *n. */
static int read_checked(sl_reader *r, int64_t *n) {
  sl_sample *s;
  int rc;
  *n = 0;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    ASSERT_TRUE(sl_schema_equal(sl_sample_schema(s), sl_reader_schema(r)));
    sl_sample_release(s);
    ++*n;
  }
  return rc;
}

/* Over 64 files a worker closes the least recently used and reopens them by
 * path: a file replaced between passes by one of the same layout (chunks,
 * records, bytes) but another schema must fail with its name, never yield
 * {text, y} samples from a reader that declares {id, x}. */
TEST(more_than_64_files_replaced_by_another_schema_between_passes) {
  clear_env();
  enum { N = 70, PER = 9 };
  char *paths[N];
  for (int f = 0; f < N; f++) {
    char name[32];
    snprintf(name, sizeof name, "many/m%02d.slr", f);
    if (f == 0) {
      char *d = tmppath("many");
      ASSERT_EQ(mkdir(d, 0755), 0);
      free(d);
    }
    paths[f] = tmppath(name);
    write_ids(paths[f], f * PER, PER);
  }
  sl_open_files_opts o = opts(1, false, 1);
  sl_reader *r;
  ASSERT_OK(sl_open_files((const char *const *)paths, N, &o, &r));
  int64_t n;
  ASSERT_RC(read_checked(r, &n), SL_EOF);
  ASSERT_EQ(n, N * PER);
  for (int f = 0; f < N; f++)
    write_ids_named(paths[f], "text", "y", f * PER, PER);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_RC(read_checked(r, &n), SL_ECORRUPT);
  ASSERT_EQ(n, 0);
  char want[1024];
  snprintf(want, sizeof want,
           "open_files: epoch 1, sample 0: %s: the file changed since "
           "open_files read it (schema {id: i64[], x: f32[2]} then, "
           "{text: i64[], y: f32[2]} now)",
           paths[0]);
  ASSERT_STREQ(sl_last_error(), want);
  sl_reader_destroy(r);
  /* The same schema and counts, other records: still another file. */
  for (int f = 0; f < N; f++)
    write_ids(paths[f], f * PER, PER);
  ASSERT_OK(sl_open_files((const char *const *)paths, N, &o, &r));
  ASSERT_RC(read_checked(r, &n), SL_EOF);
  write_ids(paths[1], 1000, PER);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_RC(read_checked(r, &n), SL_ECORRUPT);
  ASSERT_EQ(n, PER);
  ASSERT_CONTAINS(sl_last_error(), paths[1]);
  ASSERT_CONTAINS(sl_last_error(), "the file changed since open_files read "
                                   "it (it was replaced or rewritten:");
  sl_reader_destroy(r);
  for (int f = 0; f < N; f++)
    free(paths[f]);
}

/* At most 64 files: a worker opens each file on first use, after
 * construction read its index; a file replaced in between is refused the
 * same way.  One thread and a budget of one sample keep the worker from
 * reaching file 3 before it is replaced.  Handles kept open across passes
 * keep reading the files as they were (the inode stays). */
TEST(few_files_replaced_by_another_schema_before_first_use) {
  clear_env();
  make_files();
  char *mine = tmppath("replaced3.slr");
  write_ids(mine, base_of(3), k_sizes[3]);
  const char *names[NF] = {g_names[0], g_names[1], g_names[2], mine,
                           g_names[4]};
  sl_open_files_opts o = opts(1, false, 1);
  o.buffer = 1;
  sl_reader *r;
  ASSERT_OK(sl_open_files(names, NF, &o, &r));
  write_ids_named(mine, "text", "y", base_of(3), k_sizes[3]);
  int64_t n;
  ASSERT_RC(read_checked(r, &n), SL_ECORRUPT);
  ASSERT_EQ(n, base_of(3));
  char want[1024];
  snprintf(want, sizeof want,
           "open_files: epoch 0, sample %lld: %s: the file changed since "
           "open_files read it (schema {id: i64[], x: f32[2]} then, "
           "{text: i64[], y: f32[2]} now)",
           (long long)base_of(3), mine);
  ASSERT_STREQ(sl_last_error(), want);
  sl_reader_destroy(r);
  free(mine);
}

/* --- mixing class-sorted data (issue 15 item 4) -----------------------------
 */

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define MIX_BATCH 64

/* Fashion-MNIST's 60 000 training images sorted by label (stable), written
 * as `sluice pack` writes them (1 MiB chunks) to `out`: one file (shards
 * 0) or K round-robin shards, each of them class-sorted. */
static void write_sorted_fmnist(const char *out, uint32_t shards) {
  const char *img = FMNIST_DIR "/train-images-idx3-ubyte.gz",
             *lab = FMNIST_DIR "/train-labels-idx1-ubyte.gz";
  if (access(img, R_OK) != 0 || access(lab, R_OK) != 0)
    test_fail(__FILE__, __LINE__,
              "Fashion-MNIST not found at " FMNIST_DIR
              ": install the Debian package dataset-fashion-mnist "
              "(make deps)");
  char *raw = tmppath("fmnist-idx-order.slr");
  sl__pack_opts po = {0};
  uint64_t n = 0;
  ASSERT_OK(sl__pack_idx(img, lab, raw, &po, &n));
  ASSERT_EQ(n, 60000);
  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
  o.rank = 0;
  o.world = 1;
  sl_reader *r;
  const char *names[] = {raw};
  ASSERT_OK(sl_open_files(names, 1, &o, &r));
  sl_sample **all = malloc(60000 * sizeof *all);
  size_t k = 0;
  sl_sample *s;
  while (sl_reader_next(r, &s) == SL_OK) {
    ASSERT_TRUE(k < 60000);
    all[k++] = s;
  }
  ASSERT_EQ(k, 60000);
  po.shards = shards;
  sl__pack_sink *sink;
  ASSERT_OK(sl__sink_open(out, (sl_schema *)sl_reader_schema(r),
                          SL__TOTAL_UNKNOWN, &po, NULL, 0, &sink));
  for (int64_t c = 0; c < 10; c++)
    for (size_t i = 0; i < k; i++)
      if (*(const int64_t *)sl_sample_at_const(all[i], 1)->data == c)
        ASSERT_OK(sl__sink_append(sink, all[i]));
  ASSERT_OK(sl__sink_close(sink));
  for (size_t i = 0; i < k; i++)
    sl_sample_release(all[i]);
  free(all);
  sl_reader_destroy(r);
  unlink(raw);
  free(raw);
}

/* The average number of distinct labels in the full batches of 64 of one
 * pass; *n gets the samples read. */
static double classes_per_batch(sl_reader *r, int64_t *n) {
  int seen[10] = {0}, in_batch = 0, distinct = 0;
  int64_t batches = 0, sum = 0;
  sl_sample *s;
  *n = 0;
  while (sl_reader_next(r, &s) == SL_OK) {
    int64_t c = *(const int64_t *)sl_sample_at_const(s, 1)->data;
    ASSERT_TRUE(c >= 0 && c < 10);
    distinct += !seen[c];
    seen[c] = 1;
    sl_sample_release(s);
    ++*n;
    if (++in_batch == MIX_BATCH) {
      sum += distinct;
      batches++;
      memset(seen, 0, sizeof seen);
      in_batch = distinct = 0;
    }
  }
  return batches ? (double)sum / (double)batches : 0;
}

/* With the default options and shuffle on, class-sorted files (one file,
 * and 4 shards) give batches of 64 holding at least 8 of the 10 classes on
 * average, every epoch, for 1 and 2 threads; unshuffled, one class.  The
 * explicit window = 1 (the default before issue 15) shows what the test
 * guards against. */
TEST(defaults_mix_class_sorted_fashion_mnist) {
  clear_env();
  char *one = tmppath("fmnist-sorted.slr");
  char *set = tmppath("fmnist-sorted4.slr");
  char *glob = tmppath("fmnist-sorted4-*-of-00004.slr");
  write_sorted_fmnist(one, 0);
  write_sorted_fmnist(set, 4);
  const char *cases[2] = {one, glob};
  for (int ci = 0; ci < 2; ci++) {
    for (uint32_t window = 0; window <= 1; window++) {
      for (uint32_t t = 1; t <= 2; t++) {
        sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
        o.shuffle = 1;
        o.seed = 1234;
        o.threads = t;
        o.window = window; /* 0: the default */
        o.rank = 0;
        o.world = 1;
        sl_reader *r;
        ASSERT_OK(sl_open_files(&cases[ci], 1, &o, &r));
        for (int e = 0; e < 2; e++) {
          int64_t n;
          double avg = classes_per_batch(r, &n);
          ASSERT_EQ(n, 60000);
          if (t == 1 && e == 0)
            fprintf(stderr, "    %s, window %s: %.2f classes per batch of %d\n",
                    ci ? "4 shards" : "one file", window ? "1" : "default", avg,
                    MIX_BATCH);
          if (window == 0)
            ASSERT_TRUE(avg >= 8.0);
          else
            ASSERT_TRUE(avg < 3.0);
          ASSERT_OK(sl_reader_reset(r));
        }
        sl_reader_destroy(r);
      }
    }
    sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
    o.rank = 0;
    o.world = 1;
    sl_reader *r;
    ASSERT_OK(sl_open_files(&cases[ci], 1, &o, &r));
    int64_t n;
    double avg = classes_per_batch(r, &n);
    ASSERT_EQ(n, 60000);
    ASSERT_TRUE(avg < (ci ? 1.2 : 1.1));
    sl_reader_destroy(r);
  }
  unlink(one);
  for (uint32_t i = 0; i < 4; i++) {
    char p[1024];
    ASSERT_OK(sl__shard_name(set, i, 4, p, sizeof p));
    unlink(p);
  }
  free(one);
  free(set);
  free(glob);
}
