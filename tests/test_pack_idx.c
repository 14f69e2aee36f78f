/*
 * test_pack_idx.c - the acceptance on the real data: Fashion-MNIST
 * (t10k and train) packs into SLR, and reading it back gives every image
 * and label byte-identical to the idx source; sharded packs (round-robin
 * and contiguous) hold exactly the input, in order.
 *
 * The packer is sl__pack_idx, the function `sluice pack idx` calls.  The
 * data comes from Debian's dataset-fashion-mnist; when it is missing the
 * tests fail (they do not skip), saying what to install.
 */
#include "formats/idx.h"
#include "pack/import.h"
#include "test.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];
static char g_img[512], g_lab[512];

static void need_data(const char *set) {
  const char *d = getenv("SLUICE_FMNIST_DIR");
  if (!d || !*d) d = "/usr/share/datasets/fashion-mnist";
  snprintf(g_img, sizeof g_img, "%s/%s-images-idx3-ubyte.gz", d, set);
  snprintf(g_lab, sizeof g_lab, "%s/%s-labels-idx1-ubyte.gz", d, set);
  if (access(g_img, R_OK) != 0 || access(g_lab, R_OK) != 0)
    test_fail(__FILE__, __LINE__,
              "Fashion-MNIST is missing (%s): install the Debian package "
              "dataset-fashion-mnist (apt-get install dataset-fashion-mnist, "
              "or `make deps`)",
              g_img);
}

static void tmpdir(void) {
  const char *base = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/sluice_pack_XXXXXX",
           base && *base ? base : "/tmp");
  if (!mkdtemp(g_dir)) test_fail(__FILE__, __LINE__, "mkdtemp failed");
}

static void rm_tmpdir(void) {
  DIR *d = opendir(g_dir);
  struct dirent *e;
  char p[600];
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  rmdir(g_dir);
}

static int count_files(void) {
  DIR *d = opendir(g_dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

/* Record r of `f` must be item `i` of the idx pair: image bytes and label
 * identical. */
static void check_record(sl_slr_file *f, uint64_t r, const sl__idx *im,
                         const sl__idx *lb, uint64_t i) {
  sl_sample *s;
  ASSERT_OK(sl_slr_read(f, r, &s));
  const sl_tensor *img = sl_sample_at_const(s, 0);
  const sl_tensor *lab = sl_sample_at_const(s, 1);
  ASSERT_EQ(img->nbytes, im->item_bytes);
  if (memcmp(img->data, sl__idx_item(im, i), im->item_bytes) != 0)
    test_fail(__FILE__, __LINE__,
              "%s record %llu: image differs from idx "
              "item %llu",
              sl_slr_path(f), (unsigned long long)r, (unsigned long long)i);
  int64_t want = *(const unsigned char *)sl__idx_item(lb, i);
  if (*(const int64_t *)lab->data != want)
    test_fail(__FILE__, __LINE__,
              "%s record %llu: label %lld, idx item %llu "
              "has %lld",
              sl_slr_path(f), (unsigned long long)r,
              (long long)*(const int64_t *)lab->data, (unsigned long long)i,
              (long long)want);
  sl_sample_release(s);
}

/* Packs set ("t10k", "train") whole and compares every record. */
static void roundtrip(const char *set, uint64_t expect) {
  need_data(set);
  tmpdir();
  char out[600];
  snprintf(out, sizeof out, "%s/%s.slr", g_dir, set);
  uint64_t n = 0;
  ASSERT_OK(sl__pack_idx(g_img, g_lab, out, NULL, &n));
  ASSERT_EQ(n, expect);
  ASSERT_EQ(count_files(), 1);
  sl__idx im, lb;
  ASSERT_OK(sl__idx_load(g_img, &im));
  ASSERT_OK(sl__idx_load(g_lab, &lb));
  ASSERT_EQ(im.count, expect);
  ASSERT_EQ(lb.count, expect);
  ASSERT_TRUE(im.gzip);
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(out, NULL, &f));
  ASSERT_OK(sl_slr_verify(f));
  ASSERT_EQ(sl_slr_records(f), expect);
  const sl_schema *s = sl_slr_schema(f);
  char desc[128];
  ASSERT_STREQ(sl_schema_describe(s, desc, sizeof desc),
               "{image: u8[28,28], label: i64[]}");
  ASSERT_STREQ(sl_schema_meta(s, "source"), "idx");
  ASSERT_STREQ(sl_schema_meta(s, "images"), sl__basename(g_img));
  ASSERT_STREQ(sl_schema_meta(s, "labels"), sl__basename(g_lab));
  for (uint64_t k = 0; k < expect; k++)
    check_record(f, k, &im, &lb, k);
  /* And the same through the sequential reader stage. */
  sl_reader *r;
  ASSERT_OK(sl_slr_reader(out, NULL, 0, UINT64_MAX, &r));
  uint64_t k = 0;
  sl_sample *smp;
  int rc;
  while ((rc = sl_reader_next(r, &smp)) == SL_OK) {
    const sl_tensor *img = sl_sample_at_const(smp, 0);
    ASSERT_TRUE(memcmp(img->data, sl__idx_item(&im, k), 784) == 0);
    sl_sample_release(smp);
    k++;
  }
  ASSERT_RC(rc, SL_EOF);
  ASSERT_EQ(k, expect);
  sl_reader_destroy(r);
  sl_slr_close(f);
  sl__idx_free(&im);
  sl__idx_free(&lb);
  rm_tmpdir();
}

TEST(t10k_byte_identical) {
  roundtrip("t10k", 10000);
}

TEST(train_byte_identical) {
  roundtrip("train", 60000);
}

/* Packs t10k into k shards and checks counts, names and that the shards
 * together are the input in order. */
static void sharded(uint32_t k, sl__shard_mode mode) {
  need_data("t10k");
  tmpdir();
  char out[600], name[700];
  snprintf(out, sizeof out, "%s/t10k.slr", g_dir);
  sl__pack_opts o = {
      .shards = k, .mode = mode, .writer = {.chunk_bytes = 64 << 10}};
  uint64_t n = 0;
  ASSERT_OK(sl__pack_idx(g_img, g_lab, out, &o, &n));
  ASSERT_EQ(n, 10000);
  ASSERT_EQ(count_files(), (int)k);
  sl__idx im, lb;
  ASSERT_OK(sl__idx_load(g_img, &im));
  ASSERT_OK(sl__idx_load(g_lab, &lb));
  uint64_t next = 0, total = 0;
  for (uint32_t s = 0; s < k; s++) {
    ASSERT_OK(sl__shard_name(out, s, k, name, sizeof name));
    sl_slr_file *f;
    ASSERT_OK(sl_slr_open(name, NULL, &f));
    ASSERT_OK(sl_slr_verify(f));
    uint64_t recs = sl_slr_records(f);
    /* Sizes differ by at most one, the larger ones first. */
    uint64_t want = 10000 / k + (s < 10000 % k ? 1 : 0);
    ASSERT_EQ(recs, want);
    for (uint64_t r = 0; r < recs; r++) {
      uint64_t i = mode == SL__SHARD_ROUND_ROBIN ? r * k + s : next + r;
      check_record(f, r, &im, &lb, i);
    }
    next += recs;
    total += recs;
    sl_slr_close(f);
  }
  ASSERT_EQ(total, 10000);
  sl__idx_free(&im);
  sl__idx_free(&lb);
  rm_tmpdir();
}

TEST(shards_round_robin_4) {
  sharded(4, SL__SHARD_ROUND_ROBIN);
}

TEST(shards_contiguous_4) {
  sharded(4, SL__SHARD_CONTIGUOUS);
}

TEST(shards_round_robin_3) {
  sharded(3, SL__SHARD_ROUND_ROBIN);
}

TEST(shards_contiguous_3) {
  sharded(3, SL__SHARD_CONTIGUOUS);
}
