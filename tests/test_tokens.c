/*
 * test_tokens.c - the token-shard reader (sl_tokens_reader, the `tokens:`
 * tag, sl_tokens_open): windows and targets, shards too short for a window,
 * header and size checks naming the file, .npy files, the llm.c
 * correspondence (rank r of W with block = B batched by B equals llm.c's
 * DataLoader batching, reimplemented here from its source), shuffles, ranks,
 * lengths and save/restore.
 */
#include "test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG "tokens"

/* Token i of a test shard: distinct across shards for small counts. */
static uint16_t tok(int shard, uint32_t i) {
  return (uint16_t)((uint32_t)shard * 7919u + i * 31u + (i >> 11));
}

/* Writes an llm.c shard of n tokens tok(shard, i); `declared` is the header's
 * count (n when < 0), `cut` bytes are removed from the end. */
static void write_shard_ex(const char *path, int shard, uint32_t n,
                           uint32_t magic, uint32_t version, int64_t declared,
                           size_t cut) {
  size_t bytes = 1024 + 2 * (size_t)n;
  unsigned char *b = calloc(1, bytes);
  ASSERT_NOT_NULL(b);
  uint32_t h[3] = {magic, version, declared < 0 ? n : (uint32_t)declared};
  for (int k = 0; k < 3; k++)
    for (int j = 0; j < 4; j++)
      b[4 * k + j] = (unsigned char)(h[k] >> (8 * j));
  for (uint32_t i = 0; i < n; i++) {
    uint16_t t = tok(shard, i);
    b[1024 + 2 * i] = (unsigned char)t;
    b[1024 + 2 * i + 1] = (unsigned char)(t >> 8);
  }
  test_write_file(path, b, bytes - cut);
  free(b);
}

static const char *write_shard(const char *name, int shard, uint32_t n) {
  const char *p = test_tmppath(TAG, name);
  write_shard_ex(p, shard, n, 20240520, 1, -1, 0);
  return p;
}

static int g_batch; /* open_tokens: sl_tokens_opts.batch */

static sl_reader *open_tokens(const char *const *paths, size_t n, int64_t T,
                              int rank, int world, uint64_t block, int shuffle,
                              uint64_t seed) {
  sl_tokens_opts o = SL_TOKENS_OPTS_INIT;
  o.batch = g_batch;
  o.seq_len = T;
  o.rank = rank;
  o.world = world;
  o.block = block;
  o.shuffle = shuffle;
  o.seed = seed;
  sl_reader *r = NULL;
  ASSERT_OK(sl_tokens_reader(paths, n, &o, &r));
  return r;
}

static const int32_t *field_i32(const sl_sample *s, const char *name) {
  const sl_tensor *t = sl_sample_field(s, name);
  ASSERT_NOT_NULL(t);
  ASSERT_EQ(t->dtype, SL_I32);
  return t->data;
}

TEST(windows_hold_T_inputs_and_targets_shifted_by_one) {
  const int64_t T = 5;
  const char *p = write_shard("w.bin", 0, 3 * T + 1 + 3); /* 3 windows */
  sl_reader *r = open_tokens(&p, 1, T, 0, 1, 1, 0, 0);
  ASSERT_EQ(test_length_checked(r), 3);
  for (int w = 0; w < 3; w++) {
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(r, &s));
    const int32_t *in = field_i32(s, "inputs"), *tg = field_i32(s, "targets");
    ASSERT_EQ(sl_sample_field(s, "inputs")->shape[0], T);
    for (int i = 0; i < T; i++) {
      ASSERT_EQ(in[i], tok(0, (uint32_t)(w * T + i)));
      ASSERT_EQ(tg[i], tok(0, (uint32_t)(w * T + i + 1)));
    }
    sl_sample_release(s);
  }
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
}

TEST(exactly_T_plus_one_tokens_give_one_window_and_T_none) {
  const int64_t T = 8;
  const char *a = write_shard("t1.bin", 1, T + 1);
  const char *b = write_shard("t0.bin", 2, T);
  const char *c = write_shard("one.bin", 3, 1);
  const char *d = write_shard("empty.bin", 4, 0);
  const char *paths[] = {b, c, d, a};
  sl_reader *r = open_tokens(paths, 4, T, 0, 1, 1, 0, 0);
  ASSERT_EQ(test_length_checked(r), 1);
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(field_i32(s, "targets")[T - 1], tok(1, (uint32_t)T));
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  /* T larger than every shard: a reader of nothing, not an error */
  r = open_tokens(paths, 4, 1000, 0, 1, 1, 1, 3);
  ASSERT_EQ(test_length_checked(r), 0);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
}

static void expect_open_error(const char *path, int code, const char *what) {
  sl_tokens_opts o = SL_TOKENS_OPTS_INIT;
  o.seq_len = 4;
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_tokens_reader(&path, 1, &o, &r), code);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), path);
  ASSERT_CONTAINS(sl_last_error(), what);
}

TEST(wrong_magic_is_refused_naming_the_file) {
  const char *p = test_tmppath(TAG, "magic.bin");
  write_shard_ex(p, 0, 100, 20240521, 1, -1, 0);
  expect_open_error(p, SL_ECORRUPT, "bad magic 20240521");
}

TEST(another_header_version_is_refused) {
  const char *p = test_tmppath(TAG, "version.bin");
  write_shard_ex(p, 0, 100, 20240520, 7, -1, 0);
  expect_open_error(p, SL_ECORRUPT, "header version 7");
}

TEST(truncated_shard_is_refused) {
  const char *p = test_tmppath(TAG, "trunc.bin");
  write_shard_ex(p, 0, 100, 20240520, 1, -1, 3);
  expect_open_error(p, SL_ECORRUPT, "truncated");
}

TEST(count_below_the_file_is_refused_as_trailing_bytes) {
  const char *p = test_tmppath(TAG, "trail.bin");
  write_shard_ex(p, 0, 100, 20240520, 1, 90, 0);
  expect_open_error(p, SL_ECORRUPT, "trailing bytes");
}

TEST(corrupt_header_count_is_refused) {
  const char *p = test_tmppath(TAG, "count.bin");
  write_shard_ex(p, 0, 100, 20240520, 1, 0x7fffffff, 0);
  expect_open_error(p, SL_ECORRUPT, "declares 2147483647 tokens");
}

TEST(file_shorter_than_the_header_is_refused) {
  const char *p = test_tmppath(TAG, "short.bin");
  test_write_file(p, "\x28\x0b\x35\x01", 4);
  expect_open_error(p, SL_ECORRUPT, "truncated header");
}

TEST(missing_file_is_an_io_error) {
  expect_open_error(test_tmppath(TAG, "absent.bin"), SL_EIO, "cannot open");
}

TEST(bad_options_are_refused) {
  const char *p = write_shard("opts.bin", 0, 50);
  sl_tokens_opts o = SL_TOKENS_OPTS_INIT;
  sl_reader *r = NULL;
  ASSERT_RC(sl_tokens_reader(&p, 1, &o, &r), SL_EINVAL); /* seq_len 0 */
  ASSERT_CONTAINS(sl_last_error(), "seq_len");
  o.seq_len = 4;
  o.rank = 2;
  o.world = 2;
  ASSERT_RC(sl_tokens_reader(&p, 1, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "rank 2");
  ASSERT_RC(sl_tokens_reader(&p, 0, &o, &r), SL_EINVAL);
}

/* A .npy of n tokens tok(shard, i) as '<u2' or '<u4'. */
static const char *write_npy(const char *name, int shard, uint32_t n, int u32,
                             const char *descr) {
  char header[128];
  int hl = snprintf(header, sizeof header,
                    "{'descr': '%s', 'fortran_order': False, 'shape': (%u,), }",
                    descr ? descr
                    : u32 ? "<u4"
                          : "<u2",
                    n);
  int total = 10 + hl + 1;
  int padded = (total + 63) / 64 * 64;
  size_t es = u32 ? 4 : 2;
  size_t bytes = (size_t)padded + es * n;
  unsigned char *b = calloc(1, bytes);
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (unsigned char)(padded - 10);
  b[9] = (unsigned char)((padded - 10) >> 8);
  memcpy(b + 10, header, (size_t)hl);
  memset(b + 10 + hl, ' ', (size_t)(padded - 10 - hl - 1));
  b[padded - 1] = '\n';
  for (uint32_t i = 0; i < n; i++) {
    uint32_t t = u32 ? 70000u + tok(shard, i) : tok(shard, i);
    for (size_t j = 0; j < es; j++)
      b[(size_t)padded + es * i + j] = (unsigned char)(t >> (8 * j));
  }
  const char *p = test_tmppath(TAG, name);
  test_write_file(p, b, bytes);
  free(b);
  return p;
}

TEST(npy_u16_and_u32_arrays_read_like_shards) {
  for (int u32 = 0; u32 <= 1; u32++) {
    const char *p = write_npy(u32 ? "t32.npy" : "t16.npy", 5, 41, u32, NULL);
    sl_reader *r = open_tokens(&p, 1, 10, 0, 1, 1, 0, 0);
    ASSERT_EQ(test_length_checked(r), 4);
    for (int w = 0; w < 4; w++) {
      sl_sample *s = NULL;
      ASSERT_OK(sl_reader_next(r, &s));
      for (int i = 0; i < 10; i++) {
        uint32_t base = u32 ? 70000u : 0;
        ASSERT_EQ(field_i32(s, "inputs")[i],
                  base + tok(5, (uint32_t)(w * 10 + i)));
        ASSERT_EQ(field_i32(s, "targets")[i],
                  base + tok(5, (uint32_t)(w * 10 + i + 1)));
      }
      sl_sample_release(s);
    }
    sl_reader_destroy(r);
  }
}

TEST(npy_of_another_dtype_or_shape_is_refused) {
  expect_open_error(write_npy("f4.npy", 0, 10, 1, "<f4"), SL_ECORRUPT,
                    "dtype '<f4'");
  /* a file cut short of its declared shape */
  const char *p = write_npy("cut.npy", 0, 10, 0, NULL);
  FILE *f = fopen(p, "r+b");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fseek(f, 0, SEEK_END), 0);
  ASSERT_EQ(ftruncate(fileno(f), ftell(f) - 2), 0);
  fclose(f);
  expect_open_error(p, SL_ECORRUPT, "truncated");
}

/* A version-1 .npy whose header dictionary is `dict` as given (padded to
 * 64 bytes), followed by `data` zero bytes: for hostile headers. */
static const char *write_npy_dict(const char *name, const char *dict,
                                  size_t data) {
  size_t dl = strlen(dict), padded = (10 + dl + 1 + 63) / 64 * 64;
  unsigned char *b = calloc(1, padded + data);
  ASSERT_NOT_NULL(b);
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (unsigned char)(padded - 10);
  b[9] = (unsigned char)((padded - 10) >> 8);
  memset(b + 10, ' ', padded - 10);
  memcpy(b + 10, dict, dl);
  b[padded - 1] = '\n';
  const char *p = test_tmppath(TAG, name);
  test_write_file(p, b, padded + data);
  free(b);
  return p;
}

/* Headers the tokens: reader refused wrongly or not at all (issue 24
 * items 2 and 18), with the data bytes after them and the message. */
static const struct {
  const char *name, *dict;
  size_t data;
  const char *msg;
} k_bad_npy[] = {
    /* The tester's 328-byte file: 2 x 9223372036854775908 is 2^64 + 200,
     * 128 header bytes + 200 = 328: the size check passed and the first
     * window read past the mapping (a Bus error). */
    {"wrap2.npy",
     "{'descr': '<u2', 'fortran_order': False, 'shape': "
     "(9223372036854775908,), }",
     200, "too large"},
    /* Within int64 but 4 x (2^62 + 50) = 2^64 + 200. */
    {"wrap4.npy",
     "{'descr': '<u4', 'fortran_order': False, 'shape': "
     "(4611686018427387954,), }",
     200, "overflows"},
    /* sscanf("%llu") took "-5" as 2^64 - 5. */
    {"neg.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (-5,), }",
     64, "negative dimension"},
    /* numpy takes the last of a repeated key, a lookup the first. */
    {"twice.npy",
     "{'descr': '<u2', 'fortran_order': False, 'shape': (20,), "
     "'shape': (10,), }",
     40, "repeats key 'shape'"},
    {"twice_descr.npy",
     "{'descr': '<u4', 'fortran_order': False, 'shape': (10,), "
     "'descr': '<u2', }",
     40, "repeats key 'descr'"},
    {"twod.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (4, 5), }",
     40, "1-D"},
};

/* Each of k_bad_npy[from..to) is refused, SL_ECORRUPT naming the file. */
static void expect_bad_npy(size_t from, size_t to) {
  for (size_t i = from; i < to; i++)
    expect_open_error(
        write_npy_dict(k_bad_npy[i].name, k_bad_npy[i].dict, k_bad_npy[i].data),
        SL_ECORRUPT, k_bad_npy[i].msg);
}

/* Issue 24 item 2 (the 328-byte file first). */
TEST(npy_shape_whose_byte_count_wraps_is_refused) {
  struct stat st;
  const char *p = write_npy_dict(k_bad_npy[0].name, k_bad_npy[0].dict, 200);
  ASSERT_EQ(stat(p, &st), 0);
  ASSERT_EQ(st.st_size, 328);
  expect_bad_npy(0, 2);
}

TEST(npy_negative_shape_is_refused) {
  expect_bad_npy(2, 3);
}

/* Issue 24 item 18, by the same parser as the npy: reader's. */
TEST(npy_header_with_a_repeated_key_is_refused) {
  expect_bad_npy(3, sizeof k_bad_npy / sizeof *k_bad_npy);
}

/* --- llm.c's DataLoader, reimplemented from its dataloader.h ------------- */

typedef struct ref_loader {
  const char *const *paths;
  size_t nshards;
  int B, T, rank, world;
  size_t shard;
  uint16_t *tokens; /* the current shard's tokens */
  int64_t ntok, num_samples, sample;
} ref_loader;

static void ref_load_shard(ref_loader *L) {
  free(L->tokens);
  FILE *f = fopen(L->paths[L->shard], "rb");
  ASSERT_NOT_NULL(f);
  int32_t header[256];
  ASSERT_EQ(fread(header, 4, 256, f), 256);
  L->ntok = header[2];
  L->tokens = malloc(2 * (size_t)L->ntok + 2);
  ASSERT_EQ(fread(L->tokens, 2, (size_t)L->ntok, f), (size_t)L->ntok);
  fclose(f);
  /* shard_num_samples = (ntok * 2 - 2) / total_batch_size_bytes */
  int64_t total_batch_bytes = (int64_t)L->world * L->B * L->T * 2;
  L->num_samples = (L->ntok * 2 - 2) / total_batch_bytes;
  L->sample = 0;
}

/* The next batch into in/tg (B*T each); false at the end of the epoch. */
static bool ref_next(ref_loader *L, int32_t *in, int32_t *tg) {
  while (L->sample >= L->num_samples) {
    if (L->shard + 1 >= L->nshards) return false;
    L->shard++;
    ref_load_shard(L);
  }
  int64_t offset = L->sample * L->world * L->B * L->T +
                   (int64_t)L->rank * L->B * L->T; /* in tokens */
  for (int i = 0; i < L->B * L->T; i++) {
    in[i] = L->tokens[offset + i];
    tg[i] = L->tokens[offset + i + 1];
  }
  L->sample++;
  return true;
}

TEST(rank_r_of_W_with_block_B_batches_as_llm_c_dataloader) {
  const char *paths[3];
  paths[0] = test_tmppath_dup(TAG, "llmc0.bin");
  paths[1] = test_tmppath_dup(TAG, "llmc1.bin");
  paths[2] = test_tmppath_dup(TAG, "llmc2.bin");
  const uint32_t sizes[3] = {5000, 2049, 7777};
  for (int k = 0; k < 3; k++)
    write_shard_ex(paths[k], k, sizes[k], 20240520, 1, -1, 0);
  const int Bs[] = {1, 4}, Ts[] = {16, 64}, Ws[] = {1, 2, 3};
  /* batched by sl_batch, then by the reader itself (batch = 1) */
  for (g_batch = 0; g_batch <= 1; g_batch++)
    for (int bi = 0; bi < 2; bi++)
      for (int ti = 0; ti < 2; ti++)
        for (int wi = 0; wi < 3; wi++)
          for (int rank = 0; rank < Ws[wi]; rank++) {
            int B = Bs[bi], T = Ts[ti], W = Ws[wi];
            sl_reader *r = open_tokens(paths, 3, T, rank, W, (uint64_t)B, 0, 0);
            if (!g_batch) ASSERT_OK(sl_batch(r, (size_t)B, NULL, &r));
            ref_loader L = {paths, 3, B, T, rank, W, 0, NULL, 0, 0, 0};
            ref_load_shard(&L);
            int32_t *in = malloc(4 * (size_t)B * T),
                    *tg = malloc(4 * (size_t)B * T);
            int batches = 0;
            for (;;) {
              bool more = ref_next(&L, in, tg);
              sl_sample *s = NULL;
              int rc = sl_reader_next(r, &s);
              if (!more) {
                ASSERT_RC(rc, SL_EOF);
                break;
              }
              ASSERT_OK(rc);
              const sl_tensor *ti_ = sl_sample_field(s, "inputs");
              ASSERT_EQ(ti_->shape[0], B);
              ASSERT_EQ(ti_->shape[1], T);
              if (memcmp(ti_->data, in, 4 * (size_t)B * T) != 0 ||
                  memcmp(sl_sample_field(s, "targets")->data, tg,
                         4 * (size_t)B * T) != 0)
                test_fail(__FILE__, __LINE__,
                          "B=%d T=%d rank %d of %d (batch option %d): batch %d "
                          "differs from llm.c's",
                          B, T, rank, W, g_batch, batches);
              sl_sample_release(s);
              batches++;
            }
            ASSERT_GE(batches, 1);
            free(in);
            free(tg);
            free(L.tokens);
            sl_reader_destroy(r);
          }
  g_batch = 0;
  for (int k = 0; k < 3; k++)
    free((char *)paths[k]);
}

/* The first input token of every window of a pass. */
static size_t firsts(sl_reader *r, int64_t *v, size_t cap) {
  size_t n = 0;
  sl_sample *s = NULL;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    ASSERT_TRUE(n < cap);
    v[n++] =
        (int64_t)field_i32(s, "inputs")[0] * 65536 + field_i32(s, "inputs")[1];
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  return n;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

TEST(shuffle_is_a_seeded_permutation_per_pass_and_ranks_stay_disjoint) {
  const char *paths[4];
  for (int k = 0; k < 4; k++) {
    char name[32];
    snprintf(name, sizeof name, "sh%d.bin", k);
    paths[k] = test_tmppath_dup(TAG, name);
    write_shard_ex(paths[k], k, 600 + 37 * (uint32_t)k, 20240520, 1, -1, 0);
  }
  enum { CAP = 4096 };
  static int64_t plain[CAP], a[CAP], b[CAP], again[CAP];
  sl_reader *r = open_tokens(paths, 4, 8, 0, 1, 1, 0, 0);
  size_t n = firsts(r, plain, CAP);
  sl_reader_destroy(r);
  sl_reader *s1 = open_tokens(paths, 4, 8, 0, 1, 1, 1, 42);
  sl_reader *s2 = open_tokens(paths, 4, 8, 0, 1, 1, 1, 42);
  ASSERT_EQ(firsts(s1, a, CAP), n);
  ASSERT_EQ(firsts(s2, again, CAP), n);
  ASSERT_TRUE(memcmp(a, again, n * 8) == 0); /* reproducible */
  ASSERT_TRUE(memcmp(a, plain, n * 8) != 0); /* shuffled */
  ASSERT_OK(sl_reader_reset(s1));
  ASSERT_EQ(firsts(s1, b, CAP), n);
  ASSERT_TRUE(memcmp(a, b, n * 8) != 0); /* another order next pass */
  qsort(a, n, 8, cmp_i64);
  qsort(plain, n, 8, cmp_i64);
  ASSERT_TRUE(memcmp(a, plain, n * 8) == 0); /* the same windows */
  sl_reader_destroy(s1);
  sl_reader_destroy(s2);
  /* 3 ranks, block 2, shuffled: disjoint, and together every window of
   * the complete rounds */
  size_t total = 0;
  for (int rank = 0; rank < 3; rank++) {
    r = open_tokens(paths, 4, 8, rank, 3, 2, 1, 7);
    ASSERT_OK(sl_reader_reset(r)); /* pass 1 */
    total += firsts(r, a + total, CAP - total);
    sl_reader_destroy(r);
  }
  qsort(a, total, 8, cmp_i64);
  for (size_t i = 1; i < total; i++)
    ASSERT_TRUE(a[i] != a[i - 1]);
  size_t want = 0;
  for (int k = 0; k < 4; k++)
    want += ((600 + 37 * (size_t)k - 1) / 8) / 6 * 6;
  ASSERT_EQ(total, want);
  for (int k = 0; k < 4; k++)
    free((char *)paths[k]);
}

static const char *const *g_resume_paths;

static sl_reader *build_tokens(void *ud) {
  int shuffle = (int)(intptr_t)ud;
  sl_reader *r = open_tokens(g_resume_paths, 3, 6, 1, 2, 2, shuffle, 99);
  return r;
}

TEST(tokens_resume_exactly) {
  static const char *paths[3];
  for (int k = 0; k < 3; k++) {
    char name[32];
    snprintf(name, sizeof name, "res%d.bin", k);
    paths[k] = test_tmppath_dup(TAG, name);
    write_shard_ex(paths[k], k, 200 + 50 * (uint32_t)k, 20240520, 1, -1, 0);
  }
  g_resume_paths = paths;
  const uint64_t cuts[] = {0, 1, 7, 20, 31, 40, 63, 64, 90};
  test_resume_check(build_tokens, (void *)(intptr_t)0, 3, cuts, 9, 0);
  test_resume_check(build_tokens, (void *)(intptr_t)1, 3, cuts, 9, 0);
  g_batch = 1; /* blocks of 2 windows as batches */
  test_resume_check(build_tokens, (void *)(intptr_t)1, 3, cuts, 9, 0);
  g_batch = 0;
}

TEST(the_tokens_tag_and_sl_tokens_open_expand_globs) {
  write_shard("glob-a.bin", 0, 101);
  write_shard("glob-b.bin", 1, 51);
  char pattern[512];
  snprintf(pattern, sizeof pattern, "tokens:%s/glob-*.bin", test_tmpdir(TAG));
  sl_tokens_opts t = SL_TOKENS_OPTS_INIT;
  t.seq_len = 10;
  t.world = 1;
  sl_open_opts o = SL_OPEN_OPTS_INIT;
  o.tokens = &t;
  sl_reader *r = NULL;
  ASSERT_OK(sl_open(pattern, &o, &r));
  ASSERT_EQ(test_length_checked(r), 10 + 5);
  sl_reader_destroy(r);
  ASSERT_OK(sl_tokens_open(pattern, &t, &r));
  ASSERT_STREQ(sl_reader_name(r), "tokens");
  ASSERT_EQ(test_length_checked(r), 15);
  sl_reader_destroy(r);
  ASSERT_OK(sl_tokens_open(pattern + 7, &t, &r)); /* without the tag */
  ASSERT_EQ(test_length_checked(r), 15);
  sl_reader_destroy(r);
  /* world 0: the launcher's environment */
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  t.world = 0;
  ASSERT_OK(sl_tokens_open(pattern, &t, &r));
  ASSERT_EQ(test_length_checked(r), 5 + 2);
  sl_reader_destroy(r);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  /* no options */
  o.tokens = NULL;
  ASSERT_RC(sl_open(pattern, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "needs options");
}

TEST(a_world_that_leaves_every_rank_nothing_is_refused) {
  write_shard("few-a.bin", 0, 101); /* 10 windows of 10 */
  write_shard("few-b.bin", 1, 51);  /* 5 */
  char pattern[512];
  snprintf(pattern, sizeof pattern, "%s/few-*.bin", test_tmpdir(TAG));
  sl_tokens_opts t = SL_TOKENS_OPTS_INIT;
  t.seq_len = 10;
  t.world = 16; /* a round is 16 windows: no shard holds one */
  t.rank = 3;
  sl_reader *r = NULL;
  ASSERT_RC(sl_tokens_open(pattern, &t, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "15 windows of 10 tokens make no round "
                                   "of 16 ranks x 1");
  ASSERT_CONTAINS(sl_last_error(), "every rank would read nothing");
  /* 10 ranks: shard a holds a round, every rank one window. */
  t.world = 10;
  ASSERT_OK(sl_tokens_open(pattern, &t, &r));
  ASSERT_EQ(test_length_checked(r), 1);
  sl_reader_destroy(r);
  /* Blocks of 4 over 3 ranks: 12 windows a round, again none. */
  t.world = 3;
  t.rank = 0;
  t.block = 4;
  ASSERT_RC(sl_tokens_open(pattern, &t, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "no round of 3 ranks x 4");
}

/* Issue 24 item 8: shards rewritten since the save (the same token counts,
 * other tokens) are refused naming the shard, not resumed into other
 * windows; untouched shards restore. */
TEST(tokens_restore_into_rewritten_shards_is_refused) {
  static const char *paths[3];
  for (int k = 0; k < 3; k++) {
    char name[32];
    snprintf(name, sizeof name, "rw%d.bin", k);
    paths[k] = test_tmppath_dup(TAG, name);
    write_shard_ex(paths[k], k, 200, 20240520, 1, -1, 0);
  }
  sl_reader *r = open_tokens(paths, 3, 6, 0, 1, 1, 1, 5);
  for (int i = 0; i < 40; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  void *st;
  size_t len;
  ASSERT_OK(sl_reader_save(r, &st, &len));
  sl_reader_destroy(r);
  r = open_tokens(paths, 3, 6, 0, 1, 1, 1, 5);
  ASSERT_OK(sl_reader_restore(r, st, len));
  sl_reader_destroy(r);
  write_shard_ex(paths[1], 7, 200, 20240520, 1, -1, 0); /* same size */
  test_touch_later(paths[1], 1); /* a rewrite a moment later */
  r = open_tokens(paths, 3, 6, 0, 1, 1, 1, 5);
  ASSERT_RC(sl_reader_restore(r, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), paths[1]);
  ASSERT_CONTAINS(sl_last_error(), "changed since the state was saved");
  sl_sample *s; /* the refused reader is unchanged: its pass from the start */
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  sl_reader_destroy(r);
  sl_free(st);
}
