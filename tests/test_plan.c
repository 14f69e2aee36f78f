/* test_plan.c - the epoch plan as pure functions: coverage, disjointness and
 * sizes of the shares for every policy, agreement with a direct
 * implementation of the definition, determinism, epochs that differ, pinned
 * random numbers, and the launchers' environment variables. */
#include "test.h"

#include "core/internal.h"
#include "formats/epoch_plan.h"

/* sl__plan_permute(sl__plan_key(42, 0, UINT64_MAX), a, 10). */
#define PINNED_PERM "9,2,3,4,0,1,6,8,7,5" /* also docs/DATA.md */

/* --- fixtures ---------------------------------------------------------------
 */

/* Five files of different shapes, one of them empty: 41 chunks in all. */
static const uint32_t k_f0[] = {5, 7, 3, 9, 1, 4, 6, 8, 2, 5, 5, 3};
static const uint32_t k_f1[] = {13};
static const uint32_t k_f3[] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 11, 1};
static const uint32_t k_f4[] = {6, 1, 1, 9, 3, 3, 7, 2, 4, 4, 8, 1, 5, 2, 6, 3};

static const sl__plan_file k_files[] = {
    {12, k_f0}, {1, k_f1}, {0, NULL}, {12, k_f3}, {16, k_f4}};
#define NFILES 5

/* A record's global id: files concatenated, chunk after chunk. */
typedef struct ids {
  uint64_t file_base[NFILES];
  uint64_t *chunk_base[NFILES];
  uint64_t total;
} ids;

static ids make_ids(const sl__plan_file *files, size_t nfiles) {
  ids x = {{0}, {0}, 0};
  for (size_t f = 0; f < nfiles; f++) {
    x.file_base[f] = x.total;
    x.chunk_base[f] = calloc(files[f].nchunks + 1, sizeof(uint64_t));
    for (uint64_t c = 0; c < files[f].nchunks; c++) {
      x.chunk_base[f][c] = x.total;
      x.total += files[f].records[c];
    }
  }
  return x;
}

static void free_ids(ids *x, size_t nfiles) {
  for (size_t f = 0; f < nfiles; f++)
    free(x->chunk_base[f]);
}

/* The plan's output as global record ids, groups scattered by their slots
 * exactly as a reader must. */
static uint64_t *plan_sequence(const sl__plan *pl, const ids *x,
                               const sl__plan_file *files) {
  uint64_t *out = calloc(pl->records + 1, sizeof *out), n = 0;
  for (size_t g = 0; g < pl->ngroups; g++) {
    const sl__plan_group *gr = &pl->groups[g];
    uint64_t *buf = out + n;
    uint64_t got = 0;
    char *seen = calloc(gr->records + 1, 1);
    for (size_t k = gr->first_unit; k < gr->first_unit + gr->nunits; k++) {
      const sl__plan_unit *u = &pl->units[k];
      ASSERT_TRUE(u->count > 0);
      ASSERT_EQ(gr->nunits == 1, u->slots == NULL);
      for (uint32_t j = 0; j < u->count; j++) {
        uint32_t rec = u->recs ? u->recs[j] : u->first + j;
        ASSERT_TRUE(rec < files[u->file].records[u->chunk]);
        uint64_t id = x->chunk_base[u->file][u->chunk] + rec;
        uint64_t slot = u->slots ? u->slots[j] : got;
        ASSERT_TRUE(slot < gr->records);
        ASSERT_EQ(seen[slot], 0);
        seen[slot] = 1;
        buf[slot] = id;
        got++;
      }
    }
    ASSERT_EQ(got, gr->records);
    free(seen);
    n += gr->records;
  }
  ASSERT_EQ(n, pl->records);
  return out;
}

static sl__plan_params params(uint64_t seed, uint64_t epoch, bool shuffle,
                              uint32_t window, int rank, int world,
                              sl_shard_policy pol) {
  return (sl__plan_params){seed, epoch, shuffle, window,
                           rank, world, pol,     SL__PLAN_SLR};
}

static uint64_t *rank_sequence(const sl__plan_params *p, const ids *x,
                               uint64_t *n) {
  sl__plan pl;
  ASSERT_OK(sl__plan_build(k_files, NFILES, p, &pl));
  ASSERT_EQ(pl.total, x->total);
  uint64_t *s = plan_sequence(&pl, x, k_files);
  *n = pl.records;
  sl__plan_free(&pl);
  return s;
}

/* The definition of docs/DATA.md, written directly: the whole epoch
 * sequence (world 1) as global ids. */
static uint64_t *reference_sequence(const ids *x, uint64_t seed, uint64_t epoch,
                                    bool shuffle, uint32_t W) {
  size_t C = 0;
  for (int f = 0; f < NFILES; f++)
    C += k_files[f].nchunks;
  uint32_t *gfile = calloc(C, 4), *gchunk = calloc(C, 4), *order = calloc(C, 4);
  size_t k = 0;
  for (int f = 0; f < NFILES; f++)
    for (uint32_t c = 0; c < k_files[f].nchunks; c++, k++) {
      gfile[k] = (uint32_t)f;
      gchunk[k] = c;
    }
  if (shuffle)
    sl__plan_permute(sl__plan_key(seed, epoch, UINT64_MAX), order, C);
  else
    for (size_t i = 0; i < C; i++)
      order[i] = (uint32_t)i;
  uint64_t *seq = calloc(x->total + 1, sizeof *seq), n = 0;
  if (!shuffle) W = 1;
  for (size_t w = 0; w * W < C; w++) {
    uint64_t in[256], m = 0;
    for (size_t i = w * W; i < C && i < (w + 1) * W; i++) {
      uint32_t f = gfile[order[i]], c = gchunk[order[i]];
      for (uint32_t r = 0; r < k_files[f].records[c]; r++)
        in[m++] = x->chunk_base[f][c] + r;
    }
    ASSERT_TRUE(m <= 256);
    uint32_t sigma[256];
    if (shuffle)
      sl__plan_permute(sl__plan_key(seed, epoch, w), sigma, m);
    else
      for (uint64_t j = 0; j < m; j++)
        sigma[j] = (uint32_t)j;
    for (uint64_t j = 0; j < m; j++)
      seq[n++] = in[sigma[j]];
  }
  ASSERT_EQ(n, x->total);
  free(gfile);
  free(gchunk);
  free(order);
  return seq;
}

/* --- random numbers ---------------------------------------------------------
 */

TEST(permutation_is_pinned_and_uniformish) {
  /* Pinned: a change here changes every existing job's epoch order. */
  uint32_t a[10];
  sl__plan_permute(sl__plan_key(42, 0, UINT64_MAX), a, 10);
  char got[64], *p = got;
  for (int i = 0; i < 10; i++)
    p += sprintf(p, "%u%s", a[i], i < 9 ? "," : "");
  printf("pinned permutation: %s\n", got);
  ASSERT_STREQ(got, PINNED_PERM);
  ASSERT_EQ(sl__plan_key(0, 0, UINT64_MAX) == sl__plan_key(0, 1, UINT64_MAX),
            0);
  ASSERT_EQ(sl__plan_key(0, 0, 0) == sl__plan_key(0, 0, 1), 0);
  ASSERT_EQ(sl__plan_key(1, 0, 0) == sl__plan_key(0, 1, 0), 0);
  /* Every element lands in every position about equally often. */
  enum { N = 5, TRIALS = 20000 };
  int hits[N][N] = {{0}};
  for (uint64_t t = 0; t < TRIALS; t++) {
    uint32_t b[N];
    sl__plan_permute(sl__plan_key(7, t, 3), b, N);
    int seen = 0;
    for (int i = 0; i < N; i++) {
      hits[b[i]][i]++;
      seen |= 1 << b[i];
    }
    ASSERT_EQ(seen, (1 << N) - 1);
  }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      ASSERT_GE(hits[i][j], TRIALS / N - 400);
      ASSERT_LE(hits[i][j], TRIALS / N + 400);
    }
  uint32_t one[1];
  sl__plan_permute(1, one, 1);
  ASSERT_EQ(one[0], 0);
  sl__plan_permute(1, one, 0); /* n = 0 touches nothing */
}

/* --- shares ------------------------------------------------------------------
 */

TEST(shard_segments_and_counts) {
  uint64_t seg[4];
  /* 10 records, 4 ranks. */
  ASSERT_EQ(sl__shard_segments(10, 0, 4, SL_SHARD_UNEVEN, seg), 1);
  ASSERT_EQ(seg[0], 0);
  ASSERT_EQ(seg[1], 2);
  ASSERT_EQ(sl__shard_segments(10, 3, 4, SL_SHARD_UNEVEN, seg), 1);
  ASSERT_EQ(seg[0], 7);
  ASSERT_EQ(seg[1], 10);
  ASSERT_EQ(sl__shard_segments(10, 3, 4, SL_SHARD_DROP, seg), 1);
  ASSERT_EQ(seg[0], 6);
  ASSERT_EQ(seg[1], 8);
  /* PAD: Q = 3; rank 3 reads 9, then wraps to 0 and 1. */
  ASSERT_EQ(sl__shard_segments(10, 3, 4, SL_SHARD_PAD, seg), 2);
  ASSERT_EQ(seg[0], 9);
  ASSERT_EQ(seg[1], 10);
  ASSERT_EQ(seg[2], 0);
  ASSERT_EQ(seg[3], 2);
  /* Fewer records than ranks: 2 records, 7 ranks. */
  ASSERT_EQ(sl__shard_segments(2, 6, 7, SL_SHARD_PAD, seg), 1);
  ASSERT_EQ(seg[0], 0); /* position 6 of the extension is (6 - 2) mod 2 */
  ASSERT_EQ(seg[1], 1);
  ASSERT_EQ(sl__shard_segments(2, 5, 7, SL_SHARD_DROP, seg), 0);
  ASSERT_EQ(sl__shard_segments(2, 5, 7, SL_SHARD_UNEVEN, seg), 0);
  ASSERT_EQ(sl__shard_segments(0, 0, 3, SL_SHARD_PAD, seg), 0);
  /* Huge counts do not overflow. */
  uint64_t big = UINT64_MAX / 2;
  ASSERT_EQ(sl__shard_segments(big, 6, 7, SL_SHARD_UNEVEN, seg), 1);
  ASSERT_EQ(seg[1], big);
  ASSERT_EQ(sl_shard_count(10, 0, 4, SL_SHARD_UNEVEN), 2);
  ASSERT_EQ(sl_shard_count(10, 1, 4, SL_SHARD_UNEVEN), 3);
  ASSERT_EQ(sl_shard_count(10, 2, 4, SL_SHARD_DROP), 2);
  ASSERT_EQ(sl_shard_count(10, 2, 4, SL_SHARD_PAD), 3);
  ASSERT_EQ(sl_shard_count(10, 4, 4, SL_SHARD_PAD), 0);
  ASSERT_EQ(sl_shard_count(10, 0, 0, SL_SHARD_PAD), 0);
  ASSERT_EQ(sl_shard_count(10, 0, 1, (sl_shard_policy)9), 0);
}

/* --- the plan's properties
 * ----------------------------------------------------
 */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Checks every rank of one configuration; returns rank 0's sequence. */
static void check_config(const ids *x, uint64_t seed, uint64_t epoch,
                         bool shuffle, uint32_t W, int world,
                         sl_shard_policy pol) {
  uint64_t N = x->total;
  uint64_t *ref = reference_sequence(x, seed, epoch, shuffle, W);
  int *count = calloc(N, sizeof *count);
  uint64_t q = N / (uint64_t)world, Q = q + (N % (uint64_t)world != 0);
  uint64_t *concat = calloc(N + (uint64_t)world + 1, sizeof *concat), cn = 0;
  for (int r = 0; r < world; r++) {
    sl__plan_params p = params(seed, epoch, shuffle, W, r, world, pol);
    uint64_t n;
    uint64_t *s = rank_sequence(&p, x, &n);
    ASSERT_EQ(n, sl_shard_count(N, r, world, pol));
    if (pol == SL_SHARD_UNEVEN) {
      ASSERT_GE(n, q);
      ASSERT_LE(n, Q);
    } else {
      ASSERT_EQ(n, pol == SL_SHARD_DROP ? q : Q);
    }
    for (uint64_t i = 0; i < n; i++) {
      ASSERT_TRUE(s[i] < N);
      count[s[i]]++;
      concat[cn++] = s[i];
    }
    /* Deterministic: the same arguments give the same plan. */
    uint64_t n2;
    uint64_t *s2 = rank_sequence(&p, x, &n2);
    ASSERT_EQ(n2, n);
    ASSERT_EQ(memcmp(s, s2, n * sizeof *s), 0);
    free(s);
    free(s2);
  }
  /* The ranks' shares, in rank order, are consecutive slices of the one
   * epoch sequence (extended by wrapping under PAD). */
  for (uint64_t i = 0; i < cn; i++)
    ASSERT_EQ(concat[i], ref[i % N]);
  if (pol == SL_SHARD_UNEVEN) ASSERT_EQ(cn, N);
  uint64_t dropped = 0, repeated = 0;
  for (uint64_t id = 0; id < N; id++) {
    if (pol == SL_SHARD_UNEVEN) ASSERT_EQ(count[id], 1);
    if (pol == SL_SHARD_DROP) ASSERT_LE(count[id], 1);
    if (pol == SL_SHARD_PAD) ASSERT_GE(count[id], 1);
    dropped += count[id] == 0;
    repeated += count[id] > 1 ? (uint64_t)count[id] - 1 : 0;
  }
  if (pol == SL_SHARD_DROP) ASSERT_EQ(dropped, N - q * (uint64_t)world);
  if (pol == SL_SHARD_PAD) ASSERT_EQ(repeated, Q * (uint64_t)world - N);
  free(count);
  free(concat);
  free(ref);
}

TEST(shares_cover_disjoint_and_sized_for_every_policy) {
  ids x = make_ids(k_files, NFILES);
  ASSERT_EQ(x.total, 168);
  const int worlds[] = {1, 2, 3, 4, 7};
  const sl_shard_policy pols[] = {SL_SHARD_UNEVEN, SL_SHARD_DROP, SL_SHARD_PAD};
  const uint32_t windows[] = {1, 3, 64};
  const uint64_t seeds[] = {0, 42};
  int configs = 0;
  for (int sh = 0; sh < 2; sh++)
    for (int si = 0; si < 2; si++)
      for (uint64_t e = 0; e < 3; e++)
        for (int wi = 0; wi < 3; wi++)
          for (int wo = 0; wo < 5; wo++)
            for (int po = 0; po < 3; po++) {
              check_config(&x, seeds[si], e, sh, windows[wi], worlds[wo],
                           pols[po]);
              configs++;
            }
  printf("%d configurations checked\n", configs);
  free_ids(&x, NFILES);
}

TEST(no_shuffle_world_one_is_the_concatenation) {
  ids x = make_ids(k_files, NFILES);
  sl__plan_params p = params(5, 9, false, 8, 0, 1, SL_SHARD_PAD);
  sl__plan pl;
  ASSERT_OK(sl__plan_build(k_files, NFILES, &p, &pl));
  /* One unit per chunk, whole chunks as ranges, in file order. */
  ASSERT_EQ(pl.nunits, 41);
  ASSERT_EQ(pl.ngroups, 41);
  ASSERT_NULL(pl.pool);
  ASSERT_EQ(pl.units[12].file, 1);
  ASSERT_EQ(pl.units[13].file, 3); /* file 2 is empty */
  uint64_t *s = plan_sequence(&pl, &x, k_files);
  for (uint64_t i = 0; i < x.total; i++)
    ASSERT_EQ(s[i], i);
  free(s);
  sl__plan_free(&pl);
  /* Rank 1 of 3, uneven: a contiguous run starting mid-chunk. */
  p = params(0, 0, false, 1, 1, 3, SL_SHARD_UNEVEN);
  uint64_t n;
  s = rank_sequence(&p, &x, &n);
  ASSERT_EQ(n, 56); /* [56, 112) */
  for (uint64_t i = 0; i < n; i++)
    ASSERT_EQ(s[i], 56 + i);
  free(s);
  free_ids(&x, NFILES);
}

TEST(shuffle_changes_order_and_shares_between_epochs) {
  ids x = make_ids(k_files, NFILES);
  uint64_t *prev = NULL, *prev_share = NULL;
  uint64_t pn = 0;
  for (uint64_t e = 0; e < 4; e++) {
    sl__plan_params p = params(1234, e, true, 4, 0, 1, SL_SHARD_UNEVEN);
    uint64_t n;
    uint64_t *s = rank_sequence(&p, &x, &n);
    ASSERT_EQ(n, x.total);
    /* A permutation of all records ... */
    uint64_t *sorted = malloc(n * sizeof *sorted);
    memcpy(sorted, s, n * sizeof *s);
    qsort(sorted, n, sizeof *sorted, cmp_u64);
    for (uint64_t i = 0; i < n; i++)
      ASSERT_EQ(sorted[i], i);
    free(sorted);
    /* ... that is not the identity, and differs from the last epoch's. */
    uint64_t fixed = 0;
    for (uint64_t i = 0; i < n; i++)
      fixed += s[i] == i;
    ASSERT_LE(fixed, n / 4);
    if (prev) ASSERT_NE(memcmp(prev, s, n * sizeof *s), 0);
    free(prev);
    prev = s;
    /* Rank 0 of 4 reads a different set of records each epoch. */
    p = params(1234, e, true, 4, 0, 4, SL_SHARD_UNEVEN);
    uint64_t *share = rank_sequence(&p, &x, &n);
    qsort(share, n, sizeof *share, cmp_u64);
    if (prev_share) {
      ASSERT_EQ(n, pn);
      ASSERT_NE(memcmp(prev_share, share, n * sizeof *share), 0);
    }
    free(prev_share);
    prev_share = share;
    pn = n;
  }
  free(prev);
  free(prev_share);
  /* Another seed, same epoch: another order. */
  sl__plan_params a = params(1, 0, true, 2, 0, 1, SL_SHARD_PAD),
                  b = params(2, 0, true, 2, 0, 1, SL_SHARD_PAD);
  uint64_t na, nb;
  uint64_t *sa = rank_sequence(&a, &x, &na), *sb = rank_sequence(&b, &x, &nb);
  ASSERT_NE(memcmp(sa, sb, na * sizeof *sa), 0);
  free(sa);
  free(sb);
  free_ids(&x, NFILES);
}

TEST(windows_mix_records_of_their_chunks_only) {
  ids x = make_ids(k_files, NFILES);
  /* With W = 3, the first window's output is exactly the records of the
   * first three permuted chunks. */
  sl__plan_params p = params(99, 2, true, 3, 0, 1, SL_SHARD_PAD);
  sl__plan pl;
  ASSERT_OK(sl__plan_build(k_files, NFILES, &p, &pl));
  const sl__plan_group *g0 = &pl.groups[0];
  ASSERT_EQ(g0->nunits, 3);
  uint64_t in_window = 0;
  for (size_t k = 0; k < g0->nunits; k++) {
    const sl__plan_unit *u = &pl.units[k];
    in_window += k_files[u->file].records[u->chunk];
    ASSERT_EQ(u->count, k_files[u->file].records[u->chunk]); /* whole */
  }
  ASSERT_EQ(g0->records, in_window);
  /* Records of one chunk are spread over the window, not kept together. */
  uint64_t *s = plan_sequence(&pl, &x, k_files);
  int runs = 0;
  for (uint64_t i = 1; i < g0->records; i++)
    runs += s[i] != s[i - 1] + 1;
  ASSERT_GE(runs, (int)g0->records / 3);
  free(s);
  sl__plan_free(&pl);
  free_ids(&x, NFILES);
}

TEST(bad_parameters) {
  sl__plan pl;
  sl__plan_params p = params(0, 0, false, 1, 3, 3, SL_SHARD_PAD);
  ASSERT_RC(sl__plan_build(k_files, NFILES, &p, &pl), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "plan: rank 3 is not in [0, world 3)");
  ASSERT_NULL(pl.units);
  p = params(0, 0, false, 0, 0, 1, SL_SHARD_PAD);
  ASSERT_RC(sl__plan_build(k_files, NFILES, &p, &pl), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "plan: window must be >= 1");
  p = params(0, 0, false, 1, 0, 1, (sl_shard_policy)7);
  ASSERT_RC(sl__plan_build(k_files, NFILES, &p, &pl), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "plan: unknown remainder policy 7");
  /* No files at all: an empty plan. */
  p = params(0, 0, true, 1, 0, 2, SL_SHARD_PAD);
  ASSERT_OK(sl__plan_build(NULL, 0, &p, &pl));
  ASSERT_EQ(pl.nunits, 0);
  ASSERT_EQ(pl.records, 0);
  sl__plan_free(&pl);
  sl__plan_free(NULL);
}

TEST(out_of_memory_at_every_allocation) {
  sl__plan_params p = params(3, 1, true, 3, 1, 3, SL_SHARD_PAD);
  sl__plan ref;
  ASSERT_OK(sl__plan_build(k_files, NFILES, &p, &ref));
  int failures = 0;
  for (long n = 0;; n++) {
    sl__plan pl;
    sl__alloc_fail_after(n);
    int rc = sl__plan_build(k_files, NFILES, &p, &pl);
    sl__alloc_fail_after(-1);
    if (rc == SL_OK) {
      ASSERT_EQ(pl.nunits, ref.nunits);
      sl__plan_free(&pl);
      break;
    }
    ASSERT_RC(rc, SL_ENOMEM);
    ASSERT_CONTAINS(sl_last_error(), "plan: cannot allocate");
    ASSERT_NULL(pl.units);
    failures++;
  }
  ASSERT_GE(failures, 5);
  sl__plan_free(&ref);
}

/* --- the environment ---------------------------------------------------------
 */

static const char *const k_vars[] = {
    "RANK",     "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK", "PMI_SIZE",   "PADDLE_TRAINER_ID",    "PADDLE_TRAINERS_NUM"};

static void clear_env(void) {
  for (size_t i = 0; i < sizeof k_vars / sizeof *k_vars; i++)
    unsetenv(k_vars[i]);
}

TEST(env_launchers_in_order) {
  clear_env();
  int r = -5, w = -5;
  ASSERT_OK(sl_shard_env(&r, &w));
  ASSERT_EQ(r, 0);
  ASSERT_EQ(w, 1);
  setenv("PADDLE_TRAINER_ID", "2", 1);
  setenv("PADDLE_TRAINERS_NUM", "3", 1);
  ASSERT_OK(sl_shard_env(&r, &w));
  ASSERT_EQ(r, 2);
  ASSERT_EQ(w, 3);
  setenv("PMI_RANK", "1", 1);
  setenv("PMI_SIZE", "5", 1);
  ASSERT_OK(sl_shard_env(&r, &w));
  ASSERT_EQ(r, 1);
  ASSERT_EQ(w, 5);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  ASSERT_OK(sl_shard_env(&r, &w));
  ASSERT_EQ(r, 3);
  ASSERT_EQ(w, 4);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  ASSERT_OK(sl_shard_env(&r, &w));
  ASSERT_EQ(r, 0);
  ASSERT_EQ(w, 2);
  clear_env();
}

TEST(env_errors_name_the_variable) {
  int r, w;
  clear_env();
  setenv("RANK", "1", 1);
  ASSERT_RC(sl_shard_env(&r, &w), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shard: RANK is set (to '1') but WORLD_SIZE "
                                "is not");
  clear_env();
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  ASSERT_RC(sl_shard_env(&r, &w), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shard: OMPI_COMM_WORLD_SIZE is set (to '4') "
                                "but OMPI_COMM_WORLD_RANK is not");
  clear_env();
  setenv("PMI_RANK", "x1", 1);
  setenv("PMI_SIZE", "4", 1);
  ASSERT_RC(sl_shard_env(&r, &w), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shard: PMI_RANK='x1' is not a decimal "
                                "integer");
  setenv("PMI_RANK", "", 1);
  ASSERT_RC(sl_shard_env(&r, &w), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shard: PMI_RANK='' is not a decimal integer");
  setenv("PMI_RANK", "-1", 1);
  ASSERT_RC(sl_shard_env(&r, &w), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shard: PMI_RANK='-1' is not a decimal "
                                "integer");
  setenv("PMI_RANK", "4", 1);
  ASSERT_RC(sl_shard_env(&r, &w), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shard: PMI_RANK=4 is not below PMI_SIZE=4");
  setenv("PMI_RANK", "0", 1);
  setenv("PMI_SIZE", "0", 1);
  ASSERT_RC(sl_shard_env(&r, &w), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shard: PMI_SIZE=0 must be at least 1");
  setenv("PMI_SIZE", "99999999999", 1);
  ASSERT_RC(sl_shard_env(&r, &w), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "shard: PMI_SIZE='99999999999' is not a "
                                "decimal integer");
  setenv("PMI_SIZE", " 4", 1);
  ASSERT_RC(sl_shard_env(&r, &w), SL_EINVAL);
  clear_env();
  ASSERT_RC(sl_shard_env(NULL, &w), SL_EINVAL);
}

/* --- the example of docs/DATA.md
 * -------------------------------------------------
 */

TEST(documented_example) {
  /* File A: chunks of 3 and 2 records (ids 0-2, 3-4); file B: one chunk of
   * 4 (ids 5-8).  seed 1, window 2. */
  static const uint32_t a[] = {3, 2}, b[] = {4};
  const sl__plan_file files[] = {{2, a}, {1, b}};
  ids x = {{0, 5}, {NULL, NULL}, 9};
  uint64_t ca[] = {0, 3}, cb[] = {5};
  x.chunk_base[0] = ca;
  x.chunk_base[1] = cb;
  const uint64_t want[2][9] = {{0, 4, 3, 1, 2, 8, 7, 5, 6},
                               {5, 0, 6, 1, 8, 7, 2, 3, 4}};
  for (uint64_t e = 0; e < 2; e++) {
    sl__plan_params p = params(1, e, true, 2, 0, 1, SL_SHARD_UNEVEN);
    sl__plan pl;
    ASSERT_OK(sl__plan_build(files, 2, &p, &pl));
    uint64_t *s = plan_sequence(&pl, &x, files);
    for (int i = 0; i < 9; i++)
      ASSERT_EQ(s[i], want[e][i]);
    free(s);
    sl__plan_free(&pl);
  }
  /* Rank 0 of 2, epoch 0: one group, units A1 {recs 1,0; slots 1,2} then
   * A0 {recs 0,1; slots 0,3}. */
  sl__plan_params p = params(1, 0, true, 2, 0, 2, SL_SHARD_UNEVEN);
  sl__plan pl;
  ASSERT_OK(sl__plan_build(files, 2, &p, &pl));
  ASSERT_EQ(pl.ngroups, 1);
  ASSERT_EQ(pl.nunits, 2);
  const sl__plan_unit *u0 = &pl.units[0], *u1 = &pl.units[1];
  ASSERT_EQ(u0->file, 0);
  ASSERT_EQ(u0->chunk, 1);
  ASSERT_EQ(u0->count, 2);
  ASSERT_EQ(u0->recs[0], 1);
  ASSERT_EQ(u0->recs[1], 0);
  ASSERT_EQ(u0->slots[0], 1);
  ASSERT_EQ(u0->slots[1], 2);
  ASSERT_EQ(u1->chunk, 0);
  ASSERT_EQ(u1->recs[0], 0);
  ASSERT_EQ(u1->recs[1], 1);
  ASSERT_EQ(u1->slots[0], 0);
  ASSERT_EQ(u1->slots[1], 3);
  sl__plan_free(&pl);
  /* The other policies' rank 1: pad wraps to A0.0, drop loses B0.1. */
  const uint64_t pad1[] = {8, 7, 5, 6, 0}, drop1[] = {2, 8, 7, 5};
  p = params(1, 0, true, 2, 1, 2, SL_SHARD_PAD);
  ASSERT_OK(sl__plan_build(files, 2, &p, &pl));
  uint64_t *s = plan_sequence(&pl, &x, files);
  ASSERT_EQ(pl.records, 5);
  for (int i = 0; i < 5; i++)
    ASSERT_EQ(s[i], pad1[i]);
  free(s);
  sl__plan_free(&pl);
  p = params(1, 0, true, 2, 1, 2, SL_SHARD_DROP);
  ASSERT_OK(sl__plan_build(files, 2, &p, &pl));
  s = plan_sequence(&pl, &x, files);
  ASSERT_EQ(pl.records, 4);
  for (int i = 0; i < 4; i++)
    ASSERT_EQ(s[i], drop1[i]);
  free(s);
  sl__plan_free(&pl);
}

/* --- the format key schemes (wds_open, tokens_reader) ----------------------
 */

#include "core/rng.h"

/* Shards of uneven sample counts, one empty: a chunk per shard. */
static const uint32_t k_shard_recs[] = {7, 1, 0, 12, 5, 9, 3};
#define NSHARDS 7

static void shard_files(sl__plan_file *pf) {
  for (int i = 0; i < NSHARDS; i++)
    pf[i] = (sl__plan_file){1, &k_shard_recs[i]};
}

/* The shard orders wds_open and tokens_reader drew with their own loops
 * before the plan (issue 25), written out: the plan must keep them. */
static void old_wds_order(uint64_t seed, uint64_t pass, size_t *perm,
                          size_t n) {
  for (size_t i = 0; i < n; i++)
    perm[i] = i;
  uint64_t x = seed ^ sl__splitmix64_mix(pass + 0x5EED), st[4];
  for (int i = 0; i < 4; i++)
    st[i] = sl__splitmix64(&x);
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)sl__rng_bounded(st, i), t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
}

static void old_tokens_perm(uint64_t seed, uint64_t pass, uint64_t which,
                            uint64_t *perm, size_t n) {
  uint64_t p = pass, q = which + SL__RNG_GOLDEN, rng[4];
  uint64_t x = seed ^ sl__splitmix64(&p) ^ sl__splitmix64_mix(q * 3 + 1);
  for (int i = 0; i < 4; i++)
    rng[i] = sl__splitmix64(&x);
  for (size_t i = 0; i < n; i++)
    perm[i] = i;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)sl__rng_bounded(rng, i);
    uint64_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
}

TEST(wds_and_tokens_keys_keep_their_pinned_shard_orders) {
  sl__plan_file pf[NSHARDS];
  shard_files(pf);
  for (uint64_t seed = 0; seed < 3; seed++)
    for (uint64_t pass = 0; pass < 4; pass++)
      for (int keys = SL__PLAN_WDS; keys <= SL__PLAN_TOKENS; keys++) {
        size_t want[NSHARDS];
        uint64_t want64[NSHARDS];
        if (keys == SL__PLAN_WDS) {
          old_wds_order(seed, pass, want, NSHARDS);
        } else {
          old_tokens_perm(seed, pass, UINT64_MAX, want64, NSHARDS);
          for (int i = 0; i < NSHARDS; i++)
            want[i] = (size_t)want64[i];
        }
        sl__plan_params p = {
            seed, pass, true, 1, 0, 1, SL_SHARD_UNEVEN, (sl__plan_keys)keys};
        sl__plan pl;
        ASSERT_OK(sl__plan_build(pf, NSHARDS, &p, &pl));
        /* A whole unit per non-empty shard, in the old order, records in
         * order. */
        size_t u = 0;
        for (int i = 0; i < NSHARDS; i++) {
          if (!k_shard_recs[want[i]]) continue;
          ASSERT_EQ(pl.units[u].file, want[i]);
          ASSERT_EQ(pl.units[u].first, 0);
          ASSERT_EQ(pl.units[u].count, k_shard_recs[want[i]]);
          ASSERT_NULL(pl.units[u].recs);
          u++;
        }
        ASSERT_EQ(u, pl.nunits);
        sl__plan_free(&pl);
      }
  /* tokens' per-shard round orders. */
  uint64_t a[50], b[50];
  for (uint64_t s = 0; s < 5; s++) {
    old_tokens_perm(9, 2, s, a, 50);
    sl__permute_u64(sl__plan_stream_key(SL__PLAN_TOKENS, 9, 2, s), b, 50);
    ASSERT_EQ(memcmp(a, b, sizeof a), 0);
  }
}

/* Every scheme: equal counts per rank (drop, pad), and across the ranks
 * every unit exactly once (uneven), at most once (drop), at least once
 * (pad), for shards of uneven sizes. */
TEST(every_scheme_shares_units_equally_and_once) {
  sl__plan_file pf[NSHARDS];
  shard_files(pf);
  uint64_t total = 0, base[NSHARDS];
  for (int i = 0; i < NSHARDS; i++) {
    base[i] = total;
    total += k_shard_recs[i];
  }
  const sl_shard_policy pols[] = {SL_SHARD_UNEVEN, SL_SHARD_DROP, SL_SHARD_PAD};
  for (int keys = SL__PLAN_SLR; keys <= SL__PLAN_TOKENS; keys++)
    for (int sh = 0; sh < 2; sh++)
      for (int world = 1; world <= 8; world++)
        for (int po = 0; po < 3; po++) {
          int seen[64] = {0};
          uint64_t counts[8];
          for (int r = 0; r < world; r++) {
            sl__plan_params p = {5, 1,     sh != 0,  2,
                                 r, world, pols[po], (sl__plan_keys)keys};
            sl__plan pl;
            ASSERT_OK(sl__plan_build(pf, NSHARDS, &p, &pl));
            counts[r] = 0;
            for (size_t u = 0; u < pl.nunits; u++)
              for (uint32_t j = 0; j < pl.units[u].count; j++) {
                const sl__plan_unit *un = &pl.units[u];
                seen[base[un->file] +
                     (un->recs ? un->recs[j] : un->first + j)]++;
                counts[r]++;
              }
            ASSERT_EQ(counts[r], pl.records);
            ASSERT_EQ(counts[r], sl_shard_count(total, r, world, pols[po]));
            sl__plan_free(&pl);
          }
          for (int r = 1; r < world && pols[po] != SL_SHARD_UNEVEN; r++)
            ASSERT_EQ(counts[r], counts[0]);
          for (uint64_t i = 0; i < total; i++) {
            if (pols[po] == SL_SHARD_UNEVEN) ASSERT_EQ(seen[i], 1);
            if (pols[po] == SL_SHARD_DROP) ASSERT_LE(seen[i], 1);
            if (pols[po] == SL_SHARD_PAD) ASSERT_GE(seen[i], 1);
          }
        }
}
