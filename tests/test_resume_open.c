/*
 * test_resume_open.c - sl_reader_save / sl_reader_restore over
 * sl_open_files (docs/RESUME.md): ordered with 1, 2 and 4 threads
 * at cut points mid-chunk, at chunk boundaries, mid-epoch, at the epoch
 * boundary and in later epochs; a state saved with 4 threads restored with 1
 * and 2; shares of a rank; skip_chunk over a corrupt chunk; unordered
 * (each remaining sample exactly once, refused under a shuffle); refused
 * states (other files, seed, changed contents) leave the reader as it was;
 * and elastic restarts (sl_reader_restore_elastic): W = 4 -> 2 and 2 -> 3
 * ranks deliver the rest of the epoch exactly once, then whole epochs.
 */
#include "resume_fixture.h"
#include "test.h"
#include "test_util.h"

#include <stdlib.h>

static const char *tmp(const char *name) {
  return test_tmppath("resume-open", name);
}

/* Three files: 50 (chunks of 8), 37 (chunks of 5) and 33 (chunks of 11)
 * records, ids 0..119. */
#define N_IDS 120
static const char *const *files(void) {
  static const char *v[3];
  if (!v[0]) {
    static char p[3][1024];
    snprintf(p[0], sizeof p[0], "%s", tmp("a.slr"));
    snprintf(p[1], sizeof p[1], "%s", tmp("b.slr"));
    snprintf(p[2], sizeof p[2], "%s", tmp("c.slr"));
    test_write_ids_slr(p[0], 0, 50, 8);
    test_write_ids_slr(p[1], 50, 37, 5);
    test_write_ids_slr(p[2], 87, 33, 11);
    for (int i = 0; i < 3; i++)
      v[i] = p[i];
  }
  return v;
}

typedef struct of_ud {
  uint32_t threads, buffer, window;
  int shuffle, unordered, rank, world;
  uint64_t seed;
  sl_shard_policy remainder;
  sl_corrupt_policy policy;
  const char *const *names; /* NULL: files() */
  size_t n;
  bool repeated; /* under a repeat of 3 passes and a shuffle of 24 */
} of_ud;

static sl_reader *build_of(void *ud) {
  of_ud *u = ud;
  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
  o.threads = u->threads;
  o.buffer = u->buffer;
  o.window = u->window;
  o.shuffle = u->shuffle;
  o.unordered = u->unordered;
  o.seed = u->seed;
  o.rank = u->rank;
  o.world = u->world ? u->world : 1;
  o.remainder = u->remainder;
  o.slr.policy = u->policy;
  sl_reader *r;
  if (sl_open_files(u->names ? u->names : files(), u->names ? u->n : 3, &o,
                    &r) != SL_OK)
    return NULL;
  if (u->repeated && (sl_multi_pass(r, 3, &r) != SL_OK ||
                      sl_shuffle(r, 24, 11, &r) != SL_OK))
    return NULL;
  return r;
}

static of_ud base(uint32_t threads) {
  of_ud u = {threads,         16,   3, 1, 0, 0, 1, 42, SL_SHARD_PAD,
             SL_CORRUPT_FAIL, NULL, 0, false};
  return u;
}

static int64_t next_id(sl_reader *r) {
  sl_sample *s;
  int rc = sl_reader_next(r, &s);
  if (rc == SL_EOF) return -1;
  if (rc != SL_OK) test_fail(__FILE__, __LINE__, "next: %s", sl_last_error());
  int64_t v = test_sample_i64(s, 0);
  sl_sample_release(s);
  return v;
}

/* Appends the rest of r's pass to v (cap N_IDS * 2); returns the count. */
static size_t drain_ids(sl_reader *r, int64_t *v, size_t n) {
  int64_t x;
  while ((x = next_id(r)) >= 0) {
    if (n == 2 * N_IDS) test_fail(__FILE__, __LINE__, "too many samples");
    v[n++] = x;
  }
  return n;
}

static size_t save_of(sl_reader *r, void **st) {
  size_t len;
  if (sl_reader_save(r, st, &len) != SL_OK)
    test_fail(__FILE__, __LINE__, "save: %s", sl_last_error());
  return len;
}

/* Fails unless v[0..n) holds each of 0..N_IDS-1 exactly once. */
static void exactly_once(const int64_t *v, size_t n, const char *what) {
  int seen[N_IDS] = {0};
  for (size_t i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= N_IDS)
      test_fail(__FILE__, __LINE__, "%s: id %lld", what, (long long)v[i]);
    if (seen[v[i]]++)
      test_fail(__FILE__, __LINE__, "%s: id %lld twice", what, (long long)v[i]);
  }
  if (n != N_IDS)
    test_fail(__FILE__, __LINE__, "%s: %zu ids, expected %d", what, n, N_IDS);
}

/* Cuts: mid-chunk, chunk boundaries, mid-epoch, the epoch boundary, later
 * epochs. */
static const uint64_t k_cuts[] = {0,   1,   5,   8,   16,  17,  50,  61,
                                  119, 120, 121, 127, 200, 239, 240, 333};
#define NCUTS (sizeof k_cuts / sizeof *k_cuts)

TEST(ordered_threads) {
  for (uint32_t t = 1; t <= 4; t *= 2) {
    of_ud u = base(t);
    test_resume_check(build_of, &u, 3, k_cuts, NCUTS, 4096);
    u.shuffle = 0; /* files and chunks in order */
    test_resume_check(build_of, &u, 3, k_cuts, NCUTS, 4096);
    u.shuffle = 1; /* one window over everything */
    u.window = 100;
    test_resume_check(build_of, &u, 3, k_cuts, NCUTS, 4096);
  }
  of_ud u = base(4);
  sl_reader *r = build_of(&u);
  for (int i = 0; i < 61; i++)
    next_id(r);
  void *st;
  size_t len = save_of(r, &st);
  printf("  state size: open_files (3 files, ordered, threads 4): %zu bytes\n",
         len);
  sl_free(st);
  sl_reader_destroy(r);
}

/* Under a repeat with a shuffle above holding samples from before each
 * reset: open_files is saved in its pass before (its plan of that epoch
 * built again, shuffled otherwise than the current one's), also with
 * chunks skipped in that pass. */
TEST(ordered_under_a_repeat_saved_in_the_pass_before) {
  uint64_t cuts[40];
  size_t n = test_cuts_after_ends(cuts, 40, N_IDS, 2, 24, 4);
  for (uint32_t t = 1; t <= 2; t++) {
    of_ud u = base(t);
    u.repeated = true;
    test_resume_check(build_of, &u, 2, cuts, n, 4096);
    u.window = 100;
    test_resume_check(build_of, &u, 2, cuts, n, 4096);
  }
  static char p[1024];
  snprintf(p, sizeof p, "%s", tmp("bad_rep.slr"));
  test_write_ids_slr(p, 0, 120, 6);
  fix_corrupt_chunk(p, 19); /* the last chunk: skipped near each end */
  const char *names[1] = {p};
  of_ud u = base(2);
  u.names = names;
  u.n = 1;
  u.policy = SL_CORRUPT_SKIP_CHUNK;
  u.repeated = true;
  const uint64_t bad_cuts[] = {110, 114, 118, 122, 130, 138, 228, 236};
  test_resume_check(build_of, &u, 2, bad_cuts, 8, 4096);
}

/* Saved with 4 threads, restored with 1 and 2: the same samples. */
TEST(threads_change) {
  of_ud u4 = base(4), u1 = base(1), u2 = base(2);
  int64_t ref[2 * N_IDS], got[2 * N_IDS];
  sl_reader *r = build_of(&u1);
  size_t n = drain_ids(r, ref, 0);
  sl_reader_destroy(r);
  const size_t cuts[] = {0, 3, 40, 61, 119, 120};
  for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++)
    for (int to = 0; to < 2; to++) {
      r = build_of(&u4);
      for (size_t i = 0; i < cuts[c]; i++)
        got[i] = next_id(r);
      void *st;
      size_t len = save_of(r, &st);
      sl_reader_destroy(r);
      r = build_of(to ? &u2 : &u1);
      if (sl_reader_restore(r, st, len) != SL_OK)
        test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
      sl_free(st);
      size_t m = drain_ids(r, got, cuts[c]);
      sl_reader_destroy(r);
      if (m != n || memcmp(got, ref, n * sizeof *got) != 0)
        test_fail(__FILE__, __LINE__, "cut %zu: other samples", cuts[c]);
    }
}

/* A rank's share (pad: 120 records over 7 ranks wrap), and uneven. */
TEST(ordered_rank_share) {
  const uint64_t cuts[] = {0, 1, 9, 17, 18, 19, 30, 35, 52};
  for (uint32_t t = 1; t <= 4; t *= 2) {
    of_ud u = base(t);
    u.rank = 6;
    u.world = 7;
    test_resume_check(build_of, &u, 3, cuts, sizeof cuts / sizeof *cuts, 4096);
    u.rank = 2;
    u.remainder = SL_SHARD_UNEVEN;
    test_resume_check(build_of, &u, 3, cuts, sizeof cuts / sizeof *cuts, 4096);
  }
}

TEST(skip_chunk) {
  static char p[2][1024];
  snprintf(p[0], sizeof p[0], "%s", tmp("bad0.slr"));
  snprintf(p[1], sizeof p[1], "%s", tmp("bad1.slr"));
  test_write_ids_slr(p[0], 0, 60, 6);
  test_write_ids_slr(p[1], 60, 60, 6);
  fix_corrupt_chunk(p[0], 3);
  fix_corrupt_chunk(p[1], 7);
  const char *names[2] = {p[0], p[1]};
  const uint64_t cuts[] = {0, 5, 30, 54, 107, 108, 109, 150, 216, 300};
  for (uint32_t t = 1; t <= 4; t *= 2) {
    of_ud u = base(t);
    u.names = names;
    u.n = 2;
    u.policy = SL_CORRUPT_SKIP_CHUNK;
    test_resume_check(build_of, &u, 3, cuts, sizeof cuts / sizeof *cuts, 4096);
  }
}

/* Unordered: each sample of the pass exactly once around a save, at cuts
 * (the restore with 4 threads, and with 1); then the whole next pass. */
TEST(unordered_exactly_once) {
  int64_t got[2 * N_IDS];
  const size_t cuts[] = {0, 1, 7, 33, 60, 100, 119, 120};
  for (int shuffle = 0; shuffle < 2; shuffle++)
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++)
      for (uint32_t to = 1; to <= 4; to *= 4) {
        of_ud u = base(4);
        u.unordered = 1;
        u.shuffle = shuffle;
        u.buffer = 4;
        sl_reader *r = build_of(&u);
        for (size_t i = 0; i < cuts[c]; i++)
          got[i] = next_id(r);
        void *st;
        size_t len = save_of(r, &st);
        if (c == 3)
          printf("  state size: open_files (unordered, threads 4): %zu "
                 "bytes\n",
                 len);
        sl_reader_destroy(r);
        u.threads = to;
        r = build_of(&u);
        if (sl_reader_restore(r, st, len) != SL_OK)
          test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
        sl_free(st);
        size_t n = drain_ids(r, got, cuts[c]);
        exactly_once(got, n, "the restored pass");
        if (sl_reader_reset(r) != SL_OK)
          test_fail(__FILE__, __LINE__, "reset: %s", sl_last_error());
        n = drain_ids(r, got, 0);
        exactly_once(got, n, "the next pass");
        sl_reader_destroy(r);
      }
}

/* Unordered under a batch: a save at a position behind what open_files
 * delivered (the batch holds a partial batch), each sample exactly once. */
TEST(unordered_under_batch) {
  of_ud u = base(4);
  u.unordered = 1;
  int64_t got[2 * N_IDS];
  for (size_t cut = 0; cut < 8; cut++) {
    sl_reader *r = build_of(&u), *b;
    if (sl_batch(r, 7, NULL, &b) != SL_OK)
      test_fail(__FILE__, __LINE__, "%s", sl_last_error());
    size_t n = 0;
    for (size_t i = 0; i < cut; i++) {
      sl_sample *s;
      if (sl_reader_next(b, &s) != SL_OK)
        test_fail(__FILE__, __LINE__, "%s", sl_last_error());
      const sl_tensor *t = sl_sample_at_const(s, 0);
      for (int64_t j = 0; j < t->shape[0]; j++)
        got[n++] = ((const int64_t *)t->data)[j];
      sl_sample_release(s);
    }
    void *st;
    size_t len = save_of(b, &st);
    sl_reader_destroy(b);
    r = build_of(&u);
    if (sl_batch(r, 7, NULL, &b) != SL_OK)
      test_fail(__FILE__, __LINE__, "%s", sl_last_error());
    if (sl_reader_restore(b, st, len) != SL_OK)
      test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
    sl_free(st);
    for (;;) {
      sl_sample *s;
      int rc = sl_reader_next(b, &s);
      if (rc == SL_EOF) break;
      if (rc != SL_OK) test_fail(__FILE__, __LINE__, "%s", sl_last_error());
      const sl_tensor *t = sl_sample_at_const(s, 0);
      for (int64_t j = 0; j < t->shape[0]; j++)
        got[n++] = ((const int64_t *)t->data)[j];
      sl_sample_release(s);
    }
    sl_reader_destroy(b);
    exactly_once(got, n, "under a batch");
  }
}

TEST(unordered_under_shuffle_refused) {
  of_ud u = base(2);
  u.unordered = 1;
  sl_reader *r = build_of(&u);
  if (sl_shuffle(r, 10, 3, &r) != SL_OK)
    test_fail(__FILE__, __LINE__, "%s", sl_last_error());
  next_id(r);
  void *st;
  size_t len;
  if (sl_reader_save(r, &st, &len) != SL_EUNSUPPORTED ||
      !strstr(sl_last_error(), "ordered=true"))
    test_fail(__FILE__, __LINE__, "save: %s", sl_last_error());
  printf("  refused: %s\n", sl_last_error());
  sl_reader_destroy(r);
}

/* States of another pipeline or of changed files are refused; the reader
 * goes on as it was: the rest of its pass is that of a fresh reader `u`
 * after its first sample. */
static void refused(sl_reader *r, of_ud *u, const void *st, size_t len,
                    int want, const char *text) {
  next_id(r);
  int rc = sl_reader_restore(r, st, len);
  if (rc != want || !strstr(sl_last_error(), text))
    test_fail(__FILE__, __LINE__, "restore gave %d: %s (expected %d, '%s')", rc,
              sl_last_error(), want, text);
  printf("  refused: %s\n", sl_last_error());
  sl_reader *ref = build_of(u);
  next_id(ref);
  int64_t a;
  while ((a = next_id(ref)) >= 0)
    if (next_id(r) != a)
      test_fail(__FILE__, __LINE__, "the reader changed after a refusal");
  if (next_id(r) != -1) test_fail(__FILE__, __LINE__, "a longer pass");
  sl_reader_destroy(ref);
}

TEST(refused_states) {
  of_ud u = base(2);
  sl_reader *r = build_of(&u);
  for (int i = 0; i < 30; i++)
    next_id(r);
  void *st;
  size_t len = save_of(r, &st);
  sl_reader_destroy(r);
  int64_t ref[2 * N_IDS];
  r = build_of(&u);
  size_t n = drain_ids(r, ref, 0);
  sl_reader_destroy(r);
  /* Another seed, other files: refused, and the reader yields its pass. */
  of_ud v = base(2);
  v.seed = 43;
  r = build_of(&v);
  int64_t first = next_id(r);
  if (sl_reader_restore(r, st, len) != SL_EINVAL ||
      !strstr(sl_last_error(), "seed=43"))
    test_fail(__FILE__, __LINE__, "another seed: %s", sl_last_error());
  printf("  refused: %s\n", sl_last_error());
  sl_reader_destroy(r);
  (void)first;
  const char *two[2] = {files()[0], files()[1]};
  v = base(2);
  v.names = two;
  v.n = 2;
  r = build_of(&v);
  refused(r, &v, st, len, SL_EINVAL, "2 files");
  sl_reader_destroy(r);
  /* The chain is unchanged after a refusal: it yields the rest of its
   * pass as if nothing happened. */
  v = base(2);
  v.seed = 43;
  r = build_of(&v);
  sl_reader *ref43 = build_of(&v);
  for (int i = 0; i < 10; i++)
    next_id(r), next_id(ref43);
  if (sl_reader_restore(r, st, len) == SL_OK)
    test_fail(__FILE__, __LINE__, "restored another seed");
  int64_t a, b;
  while ((a = next_id(ref43)) >= 0)
    if ((b = next_id(r)) != a)
      test_fail(__FILE__, __LINE__, "the reader changed: %lld, not %lld",
                (long long)b, (long long)a);
  sl_reader_destroy(r);
  sl_reader_destroy(ref43);
  /* A file rewritten with fewer records: SL_ECORRUPT naming it. */
  static char p[3][1024];
  for (int i = 0; i < 3; i++)
    snprintf(p[i], sizeof p[i], "%s",
             tmp(i == 0   ? "x.slr"
                 : i == 1 ? "y.slr"
                          : "z.slr"));
  test_write_ids_slr(p[0], 0, 50, 8);
  test_write_ids_slr(p[1], 50, 37, 5);
  test_write_ids_slr(p[2], 87, 33, 11);
  const char *xyz[3] = {p[0], p[1], p[2]};
  v = base(2);
  v.names = xyz;
  v.n = 3;
  r = build_of(&v);
  for (int i = 0; i < 30; i++)
    next_id(r);
  sl_free(st);
  len = save_of(r, &st);
  sl_reader_destroy(r);
  test_write_ids_slr(p[1], 50, 36, 5);
  r = build_of(&v);
  refused(r, &v, st, len, SL_ECORRUPT, "y.slr");
  sl_reader_destroy(r);
  test_write_ids_slr(p[1], 1050, 37, 5); /* same size, other records */
  r = build_of(&v);
  refused(r, &v, st, len, SL_ECORRUPT, "y.slr");
  sl_reader_destroy(r);
  sl_free(st);
  (void)n;
}

/* --- elastic restarts ------------------------------------------------------
 */

/* W old ranks read cuts[r] samples each and save; W2 new ranks restore
 * all W states: together with what the old ranks delivered they give each
 * id exactly once; then each new rank's next epoch is its W2 share (all
 * ranks together: each id once). */
static void elastic(int W, int W2, const size_t *cuts, uint32_t threads,
                    int shuffle, int unordered) {
  int64_t got[4 * N_IDS];
  size_t n = 0;
  void *st[8];
  size_t len[8];
  for (int r = 0; r < W; r++) {
    of_ud u = base(threads);
    u.shuffle = shuffle;
    u.unordered = unordered;
    u.buffer = unordered ? 4 : u.buffer;
    u.rank = r;
    u.world = W;
    sl_reader *rd = build_of(&u);
    for (size_t i = 0; i < cuts[r]; i++) {
      int64_t x = next_id(rd);
      if (x < 0) break;
      got[n++] = x;
    }
    len[r] = save_of(rd, &st[r]);
    sl_reader_destroy(rd);
  }
  size_t epoch2 = 0;
  int64_t next[2 * N_IDS];
  for (int r = 0; r < W2; r++) {
    of_ud u = base(threads == 1 ? 2 : 1);
    u.shuffle = shuffle;
    u.unordered = unordered;
    u.rank = r;
    u.world = W2;
    sl_reader *rd = build_of(&u);
    next_id(rd); /* mid-pass: the restore drops it */
    if (sl_reader_restore_elastic(rd, (const void *const *)st, len,
                                  (size_t)W) != SL_OK)
      test_fail(__FILE__, __LINE__, "restore_elastic: %s", sl_last_error());
    size_t before = n;
    n = drain_ids(rd, got, n);
    if (r == 0)
      printf("  elastic %d -> %d%s: new rank 0 delivers %zu of the epoch's "
             "rest\n",
             W, W2, unordered ? " (unordered)" : "", n - before);
    /* A state saved mid-way through the rest restores the same (W2). */
    if (sl_reader_reset(rd) != SL_OK)
      test_fail(__FILE__, __LINE__, "reset: %s", sl_last_error());
    epoch2 = drain_ids(rd, next, epoch2);
    sl_reader_destroy(rd);
  }
  exactly_once(got, n, "the interrupted epoch");
  exactly_once(next, epoch2, "the next epoch");
  for (int r = 0; r < W; r++)
    sl_free(st[r]);
}

TEST(elastic_4_to_2) {
  const size_t cuts[4] = {0, 7, 29, 30};
  elastic(4, 2, cuts, 2, 1, 0);
  const size_t cuts2[4] = {13, 13, 13, 13};
  elastic(4, 2, cuts2, 1, 0, 0);
  elastic(4, 2, cuts, 4, 1, 1);
  elastic(4, 2, cuts2, 2, 0, 1);
}

TEST(elastic_2_to_3) {
  const size_t cuts[2] = {45, 11};
  elastic(2, 3, cuts, 4, 1, 0);
  const size_t cuts2[2] = {60, 0}; /* rank 0 done, rank 1 not started */
  elastic(2, 3, cuts2, 2, 1, 0);
  elastic(2, 3, cuts, 4, 1, 1);
  elastic(2, 3, cuts2, 3, 1, 1);
}

/* A state saved in the rest of an epoch that an elastic restore began
 * restores (same world) to the same samples, and elastically again. */
TEST(elastic_save_again) {
  void *st[2];
  size_t len[2];
  for (int r = 0; r < 2; r++) {
    of_ud u = base(2);
    u.rank = r;
    u.world = 2;
    sl_reader *rd = build_of(&u);
    for (int i = 0; i < 20 + 10 * r; i++)
      next_id(rd);
    len[r] = save_of(rd, &st[r]);
    sl_reader_destroy(rd);
  }
  /* 3 new ranks; each reads 5, saves, and restores into a fresh reader. */
  int64_t got[4 * N_IDS], ref[2 * N_IDS];
  size_t n = 0;
  void *st3[3];
  size_t len3[3];
  for (int r = 0; r < 3; r++) {
    of_ud u = base(1);
    u.rank = r;
    u.world = 3;
    sl_reader *a = build_of(&u), *b = build_of(&u);
    if (sl_reader_restore_elastic(a, (const void *const *)st, len, 2) !=
            SL_OK ||
        sl_reader_restore_elastic(b, (const void *const *)st, len, 2) != SL_OK)
      test_fail(__FILE__, __LINE__, "restore_elastic: %s", sl_last_error());
    size_t m = drain_ids(b, ref, 0);
    sl_reader_destroy(b);
    for (int i = 0; i < 5; i++)
      got[n++] = next_id(a);
    len3[r] = save_of(a, &st3[r]);
    printf("  state size: open_files after an elastic restore: %zu bytes\n",
           len3[r]);
    sl_reader_destroy(a);
    a = build_of(&u);
    if (sl_reader_restore(a, st3[r], len3[r]) != SL_OK)
      test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
    size_t before = n;
    n = drain_ids(a, got, n);
    if (n - before + 5 != m ||
        memcmp(got + before - 5, ref, m * sizeof *ref) != 0)
      test_fail(__FILE__, __LINE__, "rank %d: other samples", r);
    sl_reader_destroy(a);
  }
  /* The old ranks' first samples complete the epoch. */
  for (int r = 0; r < 2; r++) {
    of_ud u = base(1);
    u.rank = r;
    u.world = 2;
    sl_reader *rd = build_of(&u);
    for (int i = 0; i < 20 + 10 * r; i++)
      got[n++] = next_id(rd);
    sl_reader_destroy(rd);
  }
  exactly_once(got, n, "old and new ranks");
  /* Elastic again, from the 3 states saved mid-rest (5 each): 3 -> 2. */
  n = 0;
  for (int r = 0; r < 2; r++) {
    of_ud u = base(2);
    u.rank = r;
    u.world = 2;
    sl_reader *rd = build_of(&u);
    for (int i = 0; i < 20 + 10 * r; i++) /* what the first job gave */
      got[n++] = next_id(rd);
    sl_reader_destroy(rd);
  }
  for (int r = 0; r < 3; r++) { /* what the second job gave */
    of_ud u = base(1);
    u.rank = r;
    u.world = 3;
    sl_reader *rd = build_of(&u);
    if (sl_reader_restore(rd, st3[r], len3[r]) != SL_OK)
      test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
    sl_reader_destroy(rd);
    rd = build_of(&u);
    if (sl_reader_restore_elastic(rd, (const void *const *)st, len, 2) != SL_OK)
      test_fail(__FILE__, __LINE__, "restore_elastic: %s", sl_last_error());
    for (int i = 0; i < 5; i++)
      got[n++] = next_id(rd);
    sl_reader_destroy(rd);
  }
  for (int r = 0; r < 2; r++) { /* the third job: 2 ranks */
    of_ud u = base(4);
    u.rank = r;
    u.world = 2;
    sl_reader *rd = build_of(&u);
    if (sl_reader_restore_elastic(rd, (const void *const *)st3, len3, 3) !=
        SL_OK)
      test_fail(__FILE__, __LINE__, "restore_elastic 3 -> 2: %s",
                sl_last_error());
    n = drain_ids(rd, got, n);
    sl_reader_destroy(rd);
  }
  exactly_once(got, n, "three jobs");
  for (int r = 0; r < 3; r++)
    sl_free(st3[r]);
  for (int r = 0; r < 2; r++)
    sl_free(st[r]);
}

TEST(elastic_refused) {
  void *st[2];
  size_t len[2];
  for (int r = 0; r < 2; r++) {
    of_ud u = base(1);
    u.rank = r;
    u.world = 2;
    sl_reader *rd = build_of(&u);
    next_id(rd);
    len[r] = save_of(rd, &st[r]);
    sl_reader_destroy(rd);
  }
  of_ud u = base(1);
  u.rank = 0;
  u.world = 3;
  sl_reader *rd = build_of(&u);
  /* One state missing, a rank twice, another seed, not open_files. */
  if (sl_reader_restore_elastic(rd, (const void *const *)st, len, 1) !=
      SL_EINVAL)
    test_fail(__FILE__, __LINE__, "one state of two: %s", sl_last_error());
  printf("  refused: %s\n", sl_last_error());
  const void *twice[2] = {st[0], st[0]};
  size_t tl[2] = {len[0], len[0]};
  if (sl_reader_restore_elastic(rd, twice, tl, 2) != SL_EINVAL)
    test_fail(__FILE__, __LINE__, "a rank twice: %s", sl_last_error());
  printf("  refused: %s\n", sl_last_error());
  sl_reader_destroy(rd);
  u.seed = 7;
  rd = build_of(&u);
  if (sl_reader_restore_elastic(rd, (const void *const *)st, len, 2) !=
      SL_EINVAL)
    test_fail(__FILE__, __LINE__, "another seed: %s", sl_last_error());
  printf("  refused: %s\n", sl_last_error());
  /* Unchanged: its pass from the start. */
  sl_reader *ref = build_of(&u);
  int64_t a;
  while ((a = next_id(ref)) >= 0)
    if (next_id(rd) != a) test_fail(__FILE__, __LINE__, "the reader changed");
  sl_reader_destroy(ref);
  if (sl_batch(rd, 2, NULL, &rd) != SL_OK)
    test_fail(__FILE__, __LINE__, "%s", sl_last_error());
  if (sl_reader_restore_elastic(rd, (const void *const *)st, len, 2) !=
      SL_EUNSUPPORTED)
    test_fail(__FILE__, __LINE__, "a batch: %s", sl_last_error());
  printf("  refused: %s\n", sl_last_error());
  sl_reader_destroy(rd);
  for (int r = 0; r < 2; r++)
    sl_free(st[r]);
}

/* Many files: the state stays small (one fingerprint for them all past 64
 * files), and a resume over them is exact. */
TEST(many_files_small_state) {
  static char paths[100][1024];
  static const char *names[100];
  for (int f = 0; f < 100; f++) {
    char name[32];
    snprintf(name, sizeof name, "many-%03d.slr", f);
    snprintf(paths[f], sizeof paths[f], "%s", tmp(name));
    test_write_ids_slr(paths[f], 3 * f, 3, 2);
    names[f] = paths[f];
  }
  of_ud u = base(4);
  u.names = names;
  u.n = 100;
  u.window = 32;
  const uint64_t cuts[] = {0, 7, 150, 299, 300, 451};
  test_resume_check(build_of, &u, 2, cuts, sizeof cuts / sizeof *cuts, 4096);
  sl_reader *r = build_of(&u);
  for (int i = 0; i < 150; i++)
    next_id(r);
  void *st;
  size_t len = save_of(r, &st);
  printf("  state size: open_files (100 files, ordered): %zu bytes\n", len);
  sl_reader_destroy(r);
  test_write_ids_slr(paths[57], 0, 2, 2); /* one file changed */
  r = build_of(&u);
  if (sl_reader_restore(r, st, len) != SL_ECORRUPT ||
      !strstr(sl_last_error(), "one of the 100 files"))
    test_fail(__FILE__, __LINE__, "a changed file: %s", sl_last_error());
  printf("  refused: %s\n", sl_last_error());
  sl_reader_destroy(r);
  sl_free(st);
}

/* Unordered: saved again soon after a restore (while chunks left partly
 * delivered by the first state have not arrived yet), restored, then
 * drained: each sample exactly once. */
TEST(unordered_save_after_restore) {
  int64_t got[2 * N_IDS];
  for (size_t c1 = 3; c1 < 40; c1 += 9)
    for (size_t c2 = 0; c2 < 6; c2++) {
      of_ud u = base(4);
      u.unordered = 1;
      u.buffer = 2;
      sl_reader *r = build_of(&u);
      size_t n = 0;
      for (size_t i = 0; i < c1; i++)
        got[n++] = next_id(r);
      void *st;
      size_t len = save_of(r, &st);
      sl_reader_destroy(r);
      r = build_of(&u);
      if (sl_reader_restore(r, st, len) != SL_OK)
        test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
      sl_free(st);
      for (size_t i = 0; i < c2; i++)
        got[n++] = next_id(r);
      len = save_of(r, &st);
      sl_reader_destroy(r);
      u.threads = 2;
      r = build_of(&u);
      if (sl_reader_restore(r, st, len) != SL_OK)
        test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
      sl_free(st);
      n = drain_ids(r, got, n);
      sl_reader_destroy(r);
      exactly_once(got, n, "two restores");
    }
}
