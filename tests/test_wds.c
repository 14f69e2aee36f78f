/*
 * test_wds.c - WebDataset tar shards (src/io/tar.c, wds_shard.c,
 * wds_reader.c, src/open/wds_open.c) against shards written by Python's
 * tarfile (tests/data/formats/make_fixtures.py): grouping by key, the
 * field types, GNU and pax long names, brace patterns, threads, shard
 * shuffle, rank sharding, errors, save/restore.
 */
#include "test.h"
#include "test_util.h"

#include <fcntl.h>
#include <unistd.h>

#define DIR SLUICE_SOURCE_DIR "/tests/data/formats/"

/* The sample number k of the fixture shards: checks every field. */
static int64_t check_sample(const sl_sample *s) {
  const sl_tensor *key = sl_sample_field(s, "__key__");
  ASSERT_NOT_NULL(key);
  char buf[64];
  snprintf(buf, sizeof buf, "%.*s", (int)key->nbytes, (const char *)key->data);
  int64_t k = atoll(buf + 6); /* "sampleNNNN" */
  ASSERT_EQ(*(const int64_t *)sl_sample_field(s, "cls")->data, k % 10);
  const sl_tensor *txt = sl_sample_field(s, "txt");
  snprintf(buf, sizeof buf, "caption %d", (int)k);
  ASSERT_EQ(txt->nbytes, strlen(buf));
  ASSERT_TRUE(memcmp(txt->data, buf, txt->nbytes) == 0);
  const sl_tensor *x = sl_sample_field(s, "x.npy");
  ASSERT_EQ(x->dtype, SL_F32);
  ASSERT_EQ(x->rank, 2);
  ASSERT_EQ(x->shape[0], 2);
  for (int i = 0; i < 4; i++)
    ASSERT_TRUE(((const float *)x->data)[i] == (float)k);
  return k;
}

TEST(wds_groups_members_by_key_with_typed_fields) {
  sl_reader *r;
  ASSERT_OK(sl_open("wds:" DIR "wds-000001.tar", NULL, &r));
  const sl_schema *sc = sl_reader_schema(r);
  ASSERT_EQ(sl_schema_nfields(sc), 4);
  ASSERT_STREQ(sl_schema_field_name(sc, 0), "__key__");
  ASSERT_STREQ(sl_schema_field_name(sc, 1), "cls");
  ASSERT_STREQ(sl_schema_field_name(sc, 2), "txt");
  ASSERT_STREQ(sl_schema_field_name(sc, 3), "x.npy");
  ASSERT_EQ(sl_schema_field_dtype(sc, 1), SL_I64);
  ASSERT_EQ(sl_schema_field_dtype(sc, 2), SL_BYTES);
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < 4; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_EQ(check_sample(s), 4 + i);
      sl_sample_release(s);
    }
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

TEST(wds_gnu_long_names_and_pax_headers) {
  const char *files[] = {"wds:" DIR "wds-long.tar", "wds:" DIR "wds-pax.tar"};
  for (int f = 0; f < 2; f++) {
    sl_reader *r;
    ASSERT_OK(sl_open(files[f], NULL, &r));
    for (int i = 0; i < 2; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      const sl_tensor *key = sl_sample_field(s, "__key__");
      ASSERT_EQ(key->nbytes, 121 + 2); /* 120 'd', '/', "sN" */
      ASSERT_EQ(((const char *)key->data)[122], '0' + i);
      ASSERT_EQ(*(const int64_t *)sl_sample_field(s, "cls")->data, i);
      sl_sample_release(s);
    }
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    sl_reader_destroy(r);
  }
}

TEST(wds_a_sample_missing_a_field_names_shard_and_key) {
  sl_reader *r;
  ASSERT_OK(sl_open("wds:" DIR "wds-missing.tar", NULL, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "wds-missing.tar: sample 'b' has no 'txt'");
  sl_reader_destroy(r);
}

TEST(wds_damaged_shards_are_corrupt) {
  char path[] = "/tmp/sluice-wds-XXXXXX";
  int fd = mkstemp(path);
  FILE *in = fopen(DIR "wds-000000.tar", "rb");
  static unsigned char buf[20480];
  size_t n = fread(buf, 1, sizeof buf, in);
  fclose(in);
  buf[600] ^= 1;       /* inside the first member's data: unchecked */
  buf[6144 + 10] ^= 1; /* the third sample's first header: bad checksum */
  ASSERT_EQ(write(fd, buf, n), (long)n);
  close(fd);
  sl_reader *r;
  ASSERT_OK(sl_wds_reader(path, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "bad header checksum at offset 6144");
  sl_reader_destroy(r);
  /* Cut in the middle of a member. */
  ASSERT_EQ(truncate(path, 512 * 3 + 100), 0);
  ASSERT_RC(sl_wds_reader(path, &r), SL_ECORRUPT);
  unlink(path);
  ASSERT_RC(sl_wds_reader(DIR "table.csv", &r), SL_ECORRUPT);
  ASSERT_RC(sl_wds_reader(DIR "nonexistent.tar", &r), SL_EIO);
}

static int64_t read_all(sl_reader *r, int64_t *keys, int64_t cap) {
  sl_sample *s;
  int64_t n = 0;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    int64_t k = check_sample(s);
    if (n < cap) keys[n] = k;
    n++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  return n;
}

TEST(wds_open_braces_threads_take_turns) {
  const char *name = DIR "wds-{000000..000002}.tar";
  for (uint32_t T = 1; T <= 4; T++) {
    sl_wds_opts o = SL_WDS_OPTS_INIT;
    o.threads = T;
    o.world = 1;
    sl_reader *r;
    ASSERT_OK(sl_wds_open(&name, 1, &o, &r));
    int64_t keys[16];
    for (int pass = 0; pass < 2; pass++) {
      ASSERT_EQ(read_all(r, keys, 16), 12);
      if (T == 1)
        for (int i = 0; i < 12; i++)
          ASSERT_EQ(keys[i], i);
      if (T == 3) /* one shard per thread, one sample from each in turn */
        for (int i = 0; i < 12; i++)
          ASSERT_EQ(keys[i], (i % 3) * 4 + i / 3);
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
  }
}

TEST(wds_open_shuffles_shards_per_pass_and_splits_by_rank) {
  const char *names[] = {"wds:" DIR "wds-00000{0,1}.tar", DIR "wds-000002.tar"};
  int64_t seen[12] = {0};
  uint64_t orders = 0;
  for (int rank = 0; rank < 2; rank++) {
    sl_wds_opts o = SL_WDS_OPTS_INIT;
    o.shuffle = 1;
    o.seed = 9;
    o.rank = rank;
    o.world = 2;
    o.threads = 2;
    sl_reader *r;
    ASSERT_OK(sl_wds_open(names, 2, &o, &r));
    for (int pass = 0; pass < 4; pass++) {
      int64_t keys[16];
      int64_t n = read_all(r, keys, 16);
      ASSERT_TRUE(n == 4 || n == 8);
      for (int64_t i = 0; i < n; i++)
        seen[keys[i]] += 1;
      orders |= 1ull << (keys[0] / 4 + 4 * rank); /* first shard */
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
  }
  for (int k = 0; k < 12; k++) /* each pass covers every sample once */
    ASSERT_EQ(seen[k], 4);
  ASSERT_TRUE(__builtin_popcountll(orders) > 2); /* the order changes */
}

TEST(wds_open_refuses_bad_names) {
  sl_reader *r = NULL;
  const char *bad[] = {DIR "wds-{2..1}.tar", DIR "wds-{a..b}.tar",
                       DIR "nothing-*.tar", "npy:" DIR "x.npy"};
  int codes[] = {SL_EINVAL, SL_EINVAL, SL_EINVAL, SL_EINVAL};
  for (int i = 0; i < 4; i++) {
    ASSERT_RC(sl_wds_open(&bad[i], 1, NULL, &r), codes[i]);
    ASSERT_NULL(r);
  }
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.world = 2;
  o.rank = 2;
  const char *good = DIR "wds-000000.tar";
  ASSERT_RC(sl_wds_open(&good, 1, &o, &r), SL_EINVAL);
}

TEST(wds_open_error_reaches_consumer_in_order) {
  const char *names[] = {DIR "wds-000000.tar", DIR "wds-missing.tar"};
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.threads = 2;
  o.world = 1;
  sl_reader *r;
  ASSERT_OK(sl_wds_open(names, 2, &o, &r));
  sl_sample *s;
  int rc, n = 0;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    sl_sample_release(s);
    n++;
  }
  ASSERT_RC(rc, SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(),
                  "wds-missing.tar: sample 'a' has no 'x.npy'");
  ASSERT_EQ(n, 1); /* thread 0's first sample, then thread 1's error */
  sl_reader_destroy(r);
}

static sl_reader *build_one(void *ud) {
  sl_reader *r = NULL;
  return sl_open((const char *)ud, NULL, &r) == SL_OK ? r : NULL;
}

typedef struct open_case {
  uint32_t threads;
  int shuffle;
  bool shuffle_samples;
} open_case;

static sl_reader *build_open(void *ud) {
  const open_case *c = ud;
  const char *name = DIR "wds-{000000..000002}.tar";
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.threads = c->threads;
  o.shuffle = c->shuffle;
  o.seed = 5;
  o.world = 1;
  sl_reader *r = NULL;
  if (sl_wds_open(&name, 1, &o, &r) != SL_OK) return NULL;
  if (c->shuffle_samples && sl_shuffle(r, 5, 3, &r) != SL_OK) return NULL;
  return r;
}

TEST(wds_resume_exactly) {
  static const uint64_t cuts[] = {0, 1, 2, 3, 4, 5, 9, 11, 12, 13, 20, 35};
  test_resume_check(build_one, (void *)("wds:" DIR "wds-000002.tar"), 3, cuts,
                    8, 0);
  for (uint32_t t = 1; t <= 3; t++) {
    open_case a = {t, 0, false}, b = {t, 1, false}, c = {t, 1, true};
    test_resume_check(build_open, &a, 3, cuts, 12, 0);
    test_resume_check(build_open, &b, 3, cuts, 12, 0);
    test_resume_check(build_open, &c, 3, cuts, 12, 0);
  }
}
