/*
 * test_wds.c - WebDataset tar shards (src/formats/tar.c, wds_shard.c,
 * wds_reader.c, src/open/wds_open.c) against shards written by Python's
 * tarfile (tests/data/formats/make_fixtures.py): grouping by key, the
 * field types, GNU and pax long names, brace patterns, threads, shard
 * shuffle, rank sharding, errors, save/restore.
 */
#include "transport/output.h"
#include "formats/tar.h"
#include "formats/wds.h"
#include "pack/wds_pack.h"
#include "test.h"
#include "test_util.h"

#include <fcntl.h>
#include <sys/stat.h>
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

/* A copy of fixture shard 0 (4 samples of 3072 bytes, then the
 * end-of-archive blocks) in a temporary file, changed by `cut` (its new
 * size, or 0) and by zeroing [zero_at, zero_at + zero_len). */
static void damaged_copy(char *path, size_t cut, size_t zero_at,
                         size_t zero_len) {
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  FILE *in = fopen(DIR "wds-000000.tar", "rb");
  static unsigned char buf[20480];
  size_t n = fread(buf, 1, sizeof buf, in);
  fclose(in);
  memset(buf + zero_at, 0, zero_len);
  if (cut) n = cut;
  ASSERT_EQ(write(fd, buf, n), (long)n);
  close(fd);
}

/* Samples read from `path` by sl_wds_reader and by sl_wds_open until an
 * error: both must stop with SL_ECORRUPT naming `want`, after `good` (the
 * sample before the damage is not known to be whole either: its group ends
 * at the next header). */
static void expect_cut(const char *path, int good, const char *want) {
  for (int open = 0; open < 2; open++) {
    sl_reader *r = NULL;
    int rc, n = 0;
    if (open) {
      sl_wds_opts o = SL_WDS_OPTS_INIT;
      o.world = 1;
      rc = sl_wds_open(&path, 1, &o, &r);
    } else {
      rc = sl_wds_reader(path, &r); /* reads the first sample */
    }
    sl_sample *s;
    while (rc == SL_OK && (rc = sl_reader_next(r, &s)) == SL_OK) {
      sl_sample_release(s);
      n++;
    }
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_EQ(n, good);
    ASSERT_CONTAINS(sl_last_error(), want);
    ASSERT_CONTAINS(sl_last_error(), path);
    sl_reader_destroy(r);
  }
}

TEST(wds_shard_cut_or_zeroed_at_a_member_boundary_is_corrupt) {
  char path[] = "/tmp/sluice-wds-XXXXXX";
  /* Cut after sample 2: every member whole, no end-of-archive blocks. */
  damaged_copy(path, 2 * 3072, 0, 0);
  expect_cut(path, 1, "ends at offset 6144 without its end-of-archive blocks");
  unlink(path);
  /* Cut after the first of the two zero blocks. */
  strcpy(path, "/tmp/sluice-wds-XXXXXX");
  damaged_copy(path, 4 * 3072 + 512, 0, 0);
  expect_cut(path, 3, "one zero block at offset 12288, then the file ends");
  unlink(path);
  /* Samples 1 and 2 zeroed: a hole that looks like the end. */
  strcpy(path, "/tmp/sluice-wds-XXXXXX");
  damaged_copy(path, 0, 3072, 2 * 3072);
  expect_cut(path, 0, "data at offset 9216 after zero blocks at offset 3072");
  unlink(path);
  /* The whole shard still reads: its end blocks and padding are zeros. */
  sl_reader *r;
  ASSERT_OK(sl_wds_reader(DIR "wds-000000.tar", &r));
  int64_t keys[8];
  ASSERT_EQ(read_all(r, keys, 8), 4);
  sl_reader_destroy(r);
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

/* The order is a function of (shards, threads, seed, pass) alone: the
 * read-ahead (`buffer`, which sets how many samples a thread reads per
 * turn of the engine) never changes it, also where a thread's samples end
 * inside a turn or run across its shards. */
TEST(wds_open_order_does_not_depend_on_the_read_ahead) {
  const char *name = DIR "wds-{000000..000002}.tar";
  /* 2 threads: thread 0 reads shards 0 and 2, thread 1 shard 1. */
  static const int64_t two[12] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 9, 10, 11};
  static const size_t buffers[] = {1, 2, 3, 4, 5, 8, 9, 16, 64};
  for (size_t b = 0; b < sizeof buffers / sizeof *buffers; b++)
    for (uint32_t T = 1; T <= 4; T++) {
      sl_wds_opts o = SL_WDS_OPTS_INIT;
      o.threads = T;
      o.world = 1;
      o.buffer = buffers[b];
      sl_reader *r;
      ASSERT_OK(sl_wds_open(&name, 1, &o, &r));
      int64_t keys[16];
      for (int pass = 0; pass < 2; pass++) {
        ASSERT_EQ(read_all(r, keys, 16), 12);
        for (int i = 0; i < 12; i++)
          ASSERT_EQ(keys[i], T == 1   ? i
                             : T == 2 ? two[i]
                                      : (i % 3) * 4 + i / 3);
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
      ASSERT_EQ(n, 6); /* 12 samples, 3 shards: half a shard each */
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

/* Every rank of `world` over the 3 fixture shards (12 samples) under
 * `policy`: each must read `each` samples, with length `each`, and the
 * ranks together every sample at least once (pad, uneven) or none twice
 * (drop, uneven). */
static void check_ranks(int world, sl_shard_policy policy, int64_t each,
                        uint32_t threads) {
  const char *name = DIR "wds-{000000..000002}.tar";
  int64_t seen[12] = {0};
  for (int rank = 0; rank < world; rank++) {
    sl_wds_opts o = SL_WDS_OPTS_INIT;
    o.rank = rank;
    o.world = world;
    o.remainder = policy;
    o.threads = threads;
    o.shuffle = 1;
    o.seed = 3;
    sl_reader *r;
    ASSERT_OK(sl_wds_open(&name, 1, &o, &r));
    uint64_t len = 0;
    ASSERT_OK(sl_reader_length(r, &len));
    int64_t keys[16];
    int64_t n = read_all(r, keys, 16);
    ASSERT_EQ(n, policy == SL_SHARD_UNEVEN ? (int64_t)len : each);
    ASSERT_EQ((int64_t)len, n);
    for (int64_t i = 0; i < n && i < 16; i++)
      seen[keys[i]]++;
    sl_reader_destroy(r);
  }
  for (int k = 0; k < 12; k++) {
    if (policy != SL_SHARD_DROP) ASSERT_TRUE(seen[k] >= 1);
    if (policy != SL_SHARD_PAD) ASSERT_TRUE(seen[k] <= 1);
  }
}

TEST(wds_open_every_rank_reads_as_many_samples) {
  /* World 5 over 3 shards: shards are split, no rank is left empty. */
  check_ranks(5, SL_SHARD_PAD, 3, 1);
  check_ranks(5, SL_SHARD_PAD, 3, 2);
  check_ranks(5, SL_SHARD_DROP, 2, 3);
  check_ranks(5, SL_SHARD_UNEVEN, 0, 2);
  /* World 16 over 3 shards (more ranks than samples): one sample each. */
  check_ranks(16, SL_SHARD_PAD, 1, 1);
  /* World 2: six each. */
  check_ranks(2, SL_SHARD_DROP, 6, 4);
  /* A bad remainder. */
  const char *name = DIR "wds-000000.tar";
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.world = 2;
  o.remainder = (sl_shard_policy)7;
  sl_reader *r = NULL;
  ASSERT_RC(sl_wds_open(&name, 1, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "remainder 7");
}

TEST(wds_ranks_come_from_the_launchers_environment) {
  /* sl_open of shards, no wds options, and sl_wds_open with world 0. */
  const char *name = "wds:" DIR "wds-{000000..000002}.tar";
  int64_t seen[12] = {0};
  for (int rank = 0; rank < 5; rank++) {
    char rv[8];
    snprintf(rv, sizeof rv, "%d", rank);
    setenv("RANK", rv, 1);
    setenv("WORLD_SIZE", "5", 1);
    sl_reader *r;
    ASSERT_OK(sl_open(name, NULL, &r));
    int64_t keys[16];
    ASSERT_EQ(read_all(r, keys, 16), 3);
    for (int i = 0; i < 3; i++)
      seen[keys[i]]++;
    sl_reader_destroy(r);
    sl_wds_opts o = SL_WDS_OPTS_INIT;
    ASSERT_OK(sl_wds_open(&name, 1, &o, &r));
    ASSERT_EQ(read_all(r, keys, 16), 3);
    sl_reader_destroy(r);
  }
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  for (int k = 0; k < 12; k++)
    ASSERT_TRUE(seen[k] >= 1);
  /* Without a launcher: world 1, every sample. */
  sl_reader *r;
  ASSERT_OK(sl_open(name, NULL, &r));
  int64_t keys[16];
  ASSERT_EQ(read_all(r, keys, 16), 12);
  sl_reader_destroy(r);
}

TEST(wds_open_knows_its_length_from_headers) {
  const char *name = DIR "wds-{000000..000002}.tar";
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.world = 1;
  o.threads = 2;
  sl_reader *r;
  ASSERT_OK(sl_wds_open(&name, 1, &o, &r));
  uint64_t n = 0;
  ASSERT_OK(sl_reader_length(r, &n));
  ASSERT_EQ(n, 12u);
  /* decode_image passes it on (one image in, one out) */
  sl_image_opts io = SL_IMAGE_OPTS_INIT;
  io.field = "txt";
  sl_reader *d;
  if (sl_decode_image(r, &io, &d) == SL_OK) {
    ASSERT_OK(sl_reader_length(d, &n));
    ASSERT_EQ(n, 12u);
    sl_reader_destroy(d);
  } else {
    ASSERT_RC(sl_last_error_code(), SL_EUNSUPPORTED); /* no image layer */
  }
  /* Under the skip policy decode_image cannot know, and says so itself. */
  ASSERT_OK(sl_wds_open(&name, 1, &o, &r));
  io.policy = SL_CORRUPT_SKIP_CHUNK;
  if (sl_decode_image(r, &io, &d) == SL_OK) {
    ASSERT_RC(sl_reader_length(d, &n), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_last_error(), "decode_image: the number of samples");
    ASSERT_CONTAINS(sl_last_error(), "skip policy");
    sl_reader_destroy(d);
  }
}

/* A shard of members name[i] (the bytes "x"), then the end blocks. */
static void write_shard(char *path, const char *const *names, int n) {
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  sl__out_file *f;
  ASSERT_OK(sl__out_open("test", path, &f));
  for (int i = 0; i < n; i++) {
    const char *data = strstr(names[i], ".cls") ? "1" : "x";
    ASSERT_OK(sl__tar_write_member(f, names[i], data, 1));
  }
  ASSERT_OK(sl__tar_write_end(f));
  ASSERT_OK(sl__out_commit(f));
}

TEST(wds_image_fields_take_jpg_or_png_and_fields_pick_alternatives) {
  char path[] = "/tmp/sluice-wds-XXXXXX";
  const char *mixed[] = {"a.cls",  "a.jpg", "b.cls", "b.png", "c.cls",
                         "c.jpeg", "d.cls", "d.jpg", "d.png"};
  write_shard(path, mixed, 9);
  sl_reader *r;
  ASSERT_OK(sl_wds_reader(path, &r));
  ASSERT_STREQ(sl_schema_field_name(sl_reader_schema(r), 2), "jpg");
  sl_sample *s;
  for (int i = 0; i < 3; i++) { /* a, b and c: one image each */
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(sl_sample_field(s, "jpg")->nbytes, 1u);
    sl_sample_release(s);
  }
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL); /* d: two */
  ASSERT_CONTAINS(sl_last_error(), "sample 'd' has a 'jpg' and a 'png' "
                                   "member, both for field 'jpg'");
  sl_reader_destroy(r);
  /* Asked-for fields: named, alternatives, other members passed over. */
  const char *p = path;
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.world = 1;
  o.fields = "image=png;jpg;jpeg";
  ASSERT_OK(sl_wds_open(&p, 1, &o, &r));
  const sl_schema *sc = sl_reader_schema(r);
  ASSERT_EQ(sl_schema_nfields(sc), 2);
  ASSERT_STREQ(sl_schema_field_name(sc, 1), "image");
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  sl_reader_destroy(r);
  /* Skipping a sample without every field: d's two images still fail. */
  o.fields = "png,cls";
  o.missing = SL_WDS_MISSING_SKIP;
  ASSERT_OK(sl_wds_open(&p, 1, &o, &r));
  uint64_t len = 0;
  ASSERT_OK(sl_reader_length(r, &len));
  ASSERT_EQ(len, 2u); /* b and d have a png */
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(((const char *)sl_sample_field(s, "__key__")->data)[0], 'b');
  sl_sample_release(s);
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(((const char *)sl_sample_field(s, "__key__")->data)[0], 'd');
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  /* ... and ranks share what is left: 2 samples, 2 ranks, one each. */
  for (int rank = 0; rank < 2; rank++) {
    o.world = 2;
    o.rank = rank;
    ASSERT_OK(sl_wds_open(&p, 1, &o, &r));
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(((const char *)sl_sample_field(s, "__key__")->data)[0],
              rank ? 'd' : 'b');
    sl_sample_release(s);
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    sl_reader_destroy(r);
  }
  o.world = 1;
  o.rank = 0;
  o.missing = 7;
  ASSERT_RC(sl_wds_open(&p, 1, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "missing 7");
  o.missing = SL_WDS_MISSING_FAIL;
  /* Bad fields lists. */
  const char *bad[] = {"",        "cls,",    "=jpg",        "a=", "jpg;;png",
                       "cls;txt", "jpg,jpg", "x=cls,x=jpg", "npy"};
  for (int i = 0; i < 9; i++) {
    o.fields = bad[i];
    r = NULL;
    ASSERT_RC(sl_wds_open(&p, 1, &o, &r), SL_EINVAL);
    ASSERT_NULL(r);
    ASSERT_CONTAINS(sl_last_error(), "fields");
  }
  unlink(path);
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

/* A shard that fails after 3 samples, beside a whole one on 2 threads: the
 * error comes at that thread's 4th turn, after the other thread's 4th
 * sample, however many samples a thread reads per turn. */
TEST(wds_open_error_keeps_its_position_for_any_read_ahead) {
  char path[] = "/tmp/sluice-wds-XXXXXX";
  damaged_copy(path, 4 * 3072 + 512, 0, 0);
  const char *names[] = {DIR "wds-000000.tar", path};
  static const size_t buffers[] = {1, 2, 4, 6, 8, 64};
  for (size_t b = 0; b < sizeof buffers / sizeof *buffers; b++) {
    sl_wds_opts o = SL_WDS_OPTS_INIT;
    o.threads = 2;
    o.world = 1;
    o.buffer = buffers[b];
    sl_reader *r;
    ASSERT_OK(sl_wds_open(names, 2, &o, &r));
    sl_sample *s;
    int rc, n = 0;
    while ((rc = sl_reader_next(r, &s)) == SL_OK) {
      ASSERT_EQ(check_sample(s), n / 2);
      sl_sample_release(s);
      n++;
    }
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_EQ(n, 7);
    ASSERT_CONTAINS(sl_last_error(), path);
    /* The end stays: the same error again, until a reset. */
    ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(), "one zero block at offset 12288");
    ASSERT_OK(sl_reader_reset(r));
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(check_sample(s), 0);
    sl_sample_release(s);
    sl_reader_destroy(r); /* mid-pass, blocks in flight */
  }
  unlink(path);
}

static sl_reader *build_one(void *ud) {
  sl_reader *r = NULL;
  return sl_open((const char *)ud, NULL, &r) == SL_OK ? r : NULL;
}

typedef struct open_case {
  uint32_t threads;
  size_t buffer; /* 0: the default */
  int shuffle;
  bool shuffle_samples;
  int rank, world; /* world 0: 1 */
} open_case;

static sl_reader *build_open(void *ud) {
  const open_case *c = ud;
  const char *name = DIR "wds-{000000..000002}.tar";
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.threads = c->threads;
  o.buffer = c->buffer;
  o.shuffle = c->shuffle;
  o.seed = 5;
  o.world = c->world ? c->world : 1;
  o.rank = c->rank;
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
    open_case a = {t, 0, 0, false, 0, 0}, b = {t, 0, 1, false, 0, 0},
              c = {t, 0, 1, true, 0, 0};
    test_resume_check(build_open, &a, 3, cuts, 12, 0);
    test_resume_check(build_open, &b, 3, cuts, 12, 0);
    test_resume_check(build_open, &c, 3, cuts, 12, 0);
    /* Rank 2 of 5: samples 6..8 of the pass, cut out of shards. */
    open_case d = {t, 0, 1, false, 2, 5};
    test_resume_check(build_open, &d, 3, cuts, 7, 0);
    /* Cuts inside a thread's turn of 1, 2 and 3 samples. */
    for (size_t buffer = 2; buffer <= 6; buffer += 2) {
      open_case e = {t, buffer, 1, false, 0, 0};
      test_resume_check(build_open, &e, 3, cuts, 12, 0);
    }
  }
}

/* --- set identity (issue 24 item 1) ------------------------------------- */

/* `pack images --format wds` of folder `img` into `out` (3 shards, sorted
 * order); false when the image layer is not built. */
static bool pack_wds_set(const char *img, const char *out) {
  sl__pack_opts po = {0};
  po.shards = 3;
  uint64_t n = 0;
  int rc = sl__pack_images_wds(img, out, &po, &n);
  if (rc == SL_EUNSUPPORTED) return false;
  ASSERT_OK(rc);
  ASSERT_EQ(n, 6);
  return true;
}

/* Opens `names`, reads every sample: the count, and every key is a packed
 * image's (never the identity member), with the image and class fields. */
static uint64_t read_wds_set(const char *const *names, size_t n) {
  sl_reader *r;
  ASSERT_OK(sl_wds_open(names, n, NULL, &r));
  ASSERT_EQ(sl_schema_nfields(sl_reader_schema(r)), 3);
  uint64_t len = 0, got = 0;
  ASSERT_OK(sl_reader_length(r, &len));
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    const sl_tensor *key = sl_sample_field(s, "__key__");
    ASSERT_NOT_NULL(key);
    ASSERT_EQ(key->nbytes, 8); /* "%08zu": the record number */
    ASSERT_TRUE(memcmp(key->data, "__", 2) != 0);
    const sl_tensor *png = sl_sample_field(s, "png");
    ASSERT_NOT_NULL(png);
    ASSERT_EQ(sl_image_sniff(png->data, png->nbytes), SL_IMAGE_PNG);
    const sl_tensor *cls = sl_sample_field(s, "cls");
    ASSERT_NOT_NULL(cls);
    int64_t c = *(const int64_t *)cls->data;
    ASSERT_TRUE(c == 0 || c == 1);
    sl_sample_release(s);
    got++;
  }
  ASSERT_RC(rc, SL_EOF);
  ASSERT_EQ(got, len);
  sl_reader_destroy(r);
  return got;
}

TEST(wds_pack_set_identity_refuses_shards_of_two_runs) {
  const char *img = test_tmppath("wds_set", "img");
  char sub[2][512];
  mkdir(img, 0755);
  for (int c = 0; c < 2; c++) {
    snprintf(sub[c], sizeof sub[c], "%s/%c", img, 'a' + c);
    mkdir(sub[c], 0755);
    for (int i = 0; i < 3; i++) {
      char path[600], data[16] = "\x89PNG\r\n\x1a\n";
      snprintf(path, sizeof path, "%s/%d.png", sub[c], i);
      snprintf(data + 8, 8, "i%d%d", c, i);
      test_write_file(path, data, 11);
    }
  }
  const char *out = test_tmppath("wds_set", "s.tar");
  if (!pack_wds_set(img, out)) TEST_SKIP("built without the image layer");
  const char *names[3];
  for (int i = 0; i < 3; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "s-%06d.tar", i);
    names[i] = test_tmppath_dup("wds_set", nm);
  }
  /* Every shard starts with the identity: this run's id, 3, its index. */
  sl__wds_set set[3];
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(sl__wds_shard_set(names[i], &set[i]));
    ASSERT_TRUE(set[i].has);
    ASSERT_EQ(set[i].shards, 3);
    ASSERT_EQ(set[i].index, (uint32_t)i);
    ASSERT_STREQ(set[i].id, set[0].id);
  }
  /* A consistent set reads every image once, the member forms no sample
   * (each shard: 2 samples), one shard alone too. */
  ASSERT_EQ(read_wds_set(names, 3), 6);
  ASSERT_EQ(read_wds_set(names + 1, 1), 2);
  /* Keep shard 1 of this run, pack again into the same names, swap it in:
   * refused, naming it and the shard it disagrees with. */
  size_t n1;
  char *old1 = test_read_file(names[1], &n1);
  ASSERT_TRUE(pack_wds_set(img, out));
  sl__wds_set again;
  ASSERT_OK(sl__wds_shard_set(names[0], &again));
  ASSERT_TRUE(strcmp(again.id, set[0].id) != 0);
  ASSERT_EQ(read_wds_set(names, 3), 6);
  char pat0[600];
  snprintf(pat0, sizeof pat0, "%s/s-*.tar", test_tmpdir("wds_set"));
  sl_reader *all;
  ASSERT_OK(sl_open(pat0, NULL, &all)); /* one run's shards: read */
  uint64_t nall = 0;
  test_digest_all(all, &nall);
  ASSERT_EQ(nall, 6);
  test_write_file(names[1], old1, n1);
  sl_reader *r = NULL;
  ASSERT_RC(sl_wds_open(names, 3, NULL, &r), SL_ECORRUPT);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "s-000001.tar is shard 1 of 3 of set");
  ASSERT_CONTAINS(sl_last_error(), "s-000000.tar is shard 0 of 3");
  ASSERT_CONTAINS(sl_last_error(), set[0].id);
  ASSERT_CONTAINS(sl_last_error(), again.id);
  /* sl_open of a pattern (one wds reader a shard, chained): refused too. */
  char pattern[600];
  snprintf(pattern, sizeof pattern, "%s/s-*.tar", test_tmpdir("wds_set"));
  ASSERT_RC(sl_open(pattern, NULL, &r), SL_ECORRUPT);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "open: ");
  ASSERT_CONTAINS(sl_last_error(), "s-000001.tar is shard 1 of 3 of set");
  /* Through `pack wds` (which reads by sl_wds_open): refused, nothing
   * written. */
  const char *slr = test_tmppath("wds_set", "back.slr");
  ASSERT_RC(sl__pack_wds(names, 3, slr, NULL, NULL), SL_ECORRUPT);
  ASSERT_TRUE(access(slr, F_OK) != 0);
  /* A shard with an identity beside one without (another tool's). */
  const char *mixed[2] = {names[0], DIR "wds-000000.tar"};
  ASSERT_RC(sl_wds_open(mixed, 2, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "wds-000000.tar records no set identity");
  ASSERT_CONTAINS(sl_last_error(), "s-000000.tar is shard 0 of 3");
  const char *mixed2[2] = {DIR "wds-000000.tar", names[2]};
  ASSERT_RC(sl_wds_open(mixed2, 2, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "s-000002.tar is shard 2 of 3");
  /* A damaged identity member: corrupt, naming the shard. */
  int fd = open(names[2], O_WRONLY);
  ASSERT_TRUE(fd >= 0);
  ASSERT_EQ(pwrite(fd, "x", 1, 512 + 3), 1); /* the id's first digit */
  close(fd);
  ASSERT_RC(sl_wds_open(names + 2, 1, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "s-000002.tar: member __sluice_set__");
  free(old1);
  for (int i = 0; i < 3; i++)
    free((char *)names[i]);
}
