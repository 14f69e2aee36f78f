/*
 * test_idx.c - the idx parser (src/formats/idx.c) on tiny files written here,
 * plain and gzip, good and broken, and the idx packer's input checks
 * (count mismatch, wrong dtype, nothing left behind on failure).
 */
#include "formats/idx.h"
#include "pack/import.h"
#include "test.h"
#include "test_util.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* --- helpers ------------------------------------------------------------ */

static char g_dir[256];
static char g_path[512];

static const char *tmpdir(void) {
  const char *base = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/sluice_idx_XXXXXX",
           base && *base ? base : "/tmp");
  if (!mkdtemp(g_dir)) test_fail(__FILE__, __LINE__, "mkdtemp failed");
  return g_dir;
}

static const char *path_of(const char *name) {
  snprintf(g_path, sizeof g_path, "%s/%s", g_dir, name);
  return g_path;
}

/* Files in the temporary directory (to check nothing was left behind). */
static int count_files(void) {
  DIR *d = opendir(g_dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
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

/* A 2 x 3 x 2 u8 image file: bytes 0..11; returns the file size. */
static size_t images_2x3x2(unsigned char *buf) {
  uint32_t dims[3] = {2, 3, 2};
  size_t n = test_idx_header(buf, 0x08, 3, dims);
  for (int i = 0; i < 12; i++)
    buf[n + (size_t)i] = (unsigned char)(i * 7);
  return n + 12;
}

static void check_2x3x2(const sl__idx *x) {
  ASSERT_EQ(x->type_code, 0x08);
  ASSERT_EQ(x->dtype, SL_U8);
  ASSERT_EQ(x->rank, 3);
  ASSERT_EQ(x->dims[0], 2);
  ASSERT_EQ(x->dims[1], 3);
  ASSERT_EQ(x->dims[2], 2);
  ASSERT_EQ(x->count, 2);
  ASSERT_EQ(x->item_bytes, 6);
  ASSERT_EQ(sl_buffer_size(x->data), 12);
  const unsigned char *p = sl_buffer_data(x->data);
  for (int i = 0; i < 12; i++)
    ASSERT_EQ(p[i], (i * 7) & 0xFF);
  ASSERT_EQ(((const unsigned char *)sl__idx_item(x, 1))[0], 42);
}

/* Loads `path` expecting failure `code` with `needle` in the message, which
 * must also name the file. */
static void expect_fail(const char *path, int code, const char *needle) {
  sl__idx x;
  ASSERT_RC(sl__idx_load(path, &x), code);
  ASSERT_CONTAINS(sl_last_error(), path);
  ASSERT_CONTAINS(sl_last_error(), needle);
  ASSERT_NULL(x.data);
  sl__idx_free(&x);
}

/* --- the parser --------------------------------------------------------- */

TEST(plain_u8) {
  tmpdir();
  unsigned char buf[64];
  size_t n = images_2x3x2(buf);
  test_write_file(path_of("img"), buf, n);
  sl__idx x;
  ASSERT_OK(sl__idx_load(path_of("img"), &x));
  check_2x3x2(&x);
  ASSERT_TRUE(!x.gzip);
  ASSERT_STREQ(x.path, path_of("img"));
  char dims[32];
  ASSERT_STREQ(sl__idx_dims_text(&x, 1, dims, sizeof dims), "3x2");
  ASSERT_OK(sl__idx_expect(&x, "images", SL_U8, 3));
  sl__idx_free(&x);
  sl__idx_free(&x); /* harmless twice */
  rm_tmpdir();
}

TEST(gzip_u8) {
  tmpdir();
  unsigned char buf[64];
  size_t n = images_2x3x2(buf);
  test_write_gz(path_of("img.gz"), buf, n);
  /* The gzip magic is what counts, not the name. */
  test_write_gz(path_of("img.raw"), buf, n);
  const char *names[] = {"img.gz", "img.raw"};
  for (int i = 0; i < 2; i++) {
    sl__idx x;
    ASSERT_OK(sl__idx_load(path_of(names[i]), &x));
    ASSERT_TRUE(x.gzip);
    check_2x3x2(&x);
    sl__idx_free(&x);
  }
  rm_tmpdir();
}

TEST(multibyte_to_host_order) {
  tmpdir();
  unsigned char buf[64];
  uint32_t dims[1] = {3};
  size_t n = test_idx_header(buf, 0x0C, 1, dims); /* i32 */
  static const unsigned char be[12] = {0x00, 0x00, 0x00, 0x01, 0xFF, 0xFF,
                                       0xFF, 0xFE, 0x12, 0x34, 0x56, 0x78};
  memcpy(buf + n, be, sizeof be);
  test_write_file(path_of("i32"), buf, n + sizeof be);
  sl__idx x;
  ASSERT_OK(sl__idx_load(path_of("i32"), &x));
  ASSERT_EQ(x.dtype, SL_I32);
  ASSERT_EQ(x.item_bytes, 4);
  const int32_t *v = sl_buffer_data(x.data);
  ASSERT_EQ(v[0], 1);
  ASSERT_EQ(v[1], -2);
  ASSERT_EQ(v[2], 0x12345678);
  sl__idx_free(&x);
  /* f64: 1.5 big-endian is 3F F8 00 .. 00 */
  n = test_idx_header(buf, 0x0E, 1, (uint32_t[]){1});
  memset(buf + n, 0, 8);
  buf[n] = 0x3F, buf[n + 1] = 0xF8;
  test_write_file(path_of("f64"), buf, n + 8);
  ASSERT_OK(sl__idx_load(path_of("f64"), &x));
  ASSERT_EQ(x.dtype, SL_F64);
  ASSERT_TRUE(*(const double *)sl_buffer_data(x.data) == 1.5);
  sl__idx_free(&x);
  rm_tmpdir();
}

TEST(zero_items) {
  tmpdir();
  unsigned char buf[64];
  size_t n = test_idx_header(buf, 0x08, 3, (uint32_t[]){0, 28, 28});
  test_write_file(path_of("empty"), buf, n);
  sl__idx x;
  ASSERT_OK(sl__idx_load(path_of("empty"), &x));
  ASSERT_EQ(x.count, 0);
  ASSERT_EQ(x.item_bytes, 784);
  ASSERT_EQ(sl_buffer_size(x.data), 0);
  sl__idx_free(&x);
  rm_tmpdir();
}

TEST(truncated_data) {
  tmpdir();
  unsigned char buf[64];
  size_t n = images_2x3x2(buf);
  test_write_file(path_of("img"), buf, n - 5);
  expect_fail(path_of("img"), SL_ECORRUPT, "truncated");
  /* The message says what was expected and what was found. */
  ASSERT_CONTAINS(sl_last_error(), "2x3x2");
  ASSERT_CONTAINS(sl_last_error(), "12 data bytes");
  ASSERT_CONTAINS(sl_last_error(), "found 7");
  test_write_gz(path_of("img.gz"), buf, n - 5);
  expect_fail(path_of("img.gz"), SL_ECORRUPT, "found 7");
  rm_tmpdir();
}

TEST(truncated_gzip_stream) {
  tmpdir();
  unsigned char buf[4096];
  uint32_t dims[3] = {4, 16, 16};
  size_t n = test_idx_header(buf, 0x08, 3, dims);
  for (size_t i = 0; i < 1024; i++)
    buf[n + i] = (unsigned char)(i * i);
  test_write_gz(path_of("full.gz"), buf, n + 1024);
  FILE *f = fopen(path_of("full.gz"), "rb");
  unsigned char gz[8192];
  size_t gzlen = fread(gz, 1, sizeof gz, f);
  fclose(f);
  ASSERT_GE(gzlen, 40);
  /* Cut inside the deflate data, and cut only the 8-byte trailer. */
  test_write_file(path_of("cut.gz"), gz, gzlen / 2);
  expect_fail(path_of("cut.gz"), SL_ECORRUPT, "truncated");
  test_write_file(path_of("notrailer.gz"), gz, gzlen - 4);
  expect_fail(path_of("notrailer.gz"), SL_ECORRUPT, "truncated gzip");
  /* A flipped byte in the stream: a data or CRC error, never silent. */
  gz[gzlen / 2] ^= 0x55;
  test_write_file(path_of("flip.gz"), gz, gzlen);
  sl__idx x;
  ASSERT_RC(sl__idx_load(path_of("flip.gz"), &x), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), path_of("flip.gz"));
  rm_tmpdir();
}

/* A large file (zlib inflates straight into our buffer) whose gzip trailer
 * is cut by 1..8 bytes: all data arrives, the loss must still be seen. */
TEST(truncated_gzip_trailer_large) {
  tmpdir();
  size_t items = 4096, n = 16 + items * 784;
  unsigned char *buf = malloc(n);
  ASSERT_NOT_NULL(buf);
  test_idx_header(buf, 0x08, 3, (uint32_t[]){(uint32_t)items, 28, 28});
  uint32_t x = 1;
  for (size_t i = 16; i < n; i++) {
    x = x * 1103515245u + 12345u;
    buf[i] = (unsigned char)((x >> 16) & 0x0F); /* compressible noise */
  }
  test_write_gz(path_of("big.gz"), buf, n);
  sl__idx ok;
  ASSERT_OK(sl__idx_load(path_of("big.gz"), &ok));
  ASSERT_TRUE(memcmp(sl_buffer_data(ok.data), buf + 16, n - 16) == 0);
  sl__idx_free(&ok);
  FILE *f = fopen(path_of("big.gz"), "rb");
  ASSERT_NOT_NULL(f);
  unsigned char *gz = malloc(n + 1024);
  size_t gzlen = fread(gz, 1, n + 1024, f);
  fclose(f);
  for (size_t cut = 1; cut <= 8; cut++) {
    test_write_file(path_of("cut.gz"), gz, gzlen - cut);
    expect_fail(path_of("cut.gz"), SL_ECORRUPT, "truncated gzip stream");
  }
  /* A wrong CRC in the trailer. */
  gz[gzlen - 8] ^= 1;
  test_write_file(path_of("crc.gz"), gz, gzlen);
  expect_fail(path_of("crc.gz"), SL_ECORRUPT, "zlib");
  free(gz);
  free(buf);
  rm_tmpdir();
}

TEST(truncated_header) {
  tmpdir();
  unsigned char buf[64];
  size_t n = images_2x3x2(buf);
  test_write_file(path_of("h"), buf, 9); /* magic + 1 of 3 dims + 1 byte */
  expect_fail(path_of("h"), SL_ECORRUPT, "truncated idx header");
  ASSERT_CONTAINS(sl_last_error(), "3 dimensions");
  test_write_file(path_of("m"), buf, 3);
  expect_fail(path_of("m"), SL_ECORRUPT, "truncated idx header");
  test_write_file(path_of("e"), buf, 0);
  expect_fail(path_of("e"), SL_ECORRUPT, "empty");
  SL_UNUSED(n);
  rm_tmpdir();
}

TEST(bad_magic) {
  tmpdir();
  unsigned char buf[64];
  size_t n = images_2x3x2(buf);
  buf[1] = 0x01;
  test_write_file(path_of("x"), buf, n);
  expect_fail(path_of("x"), SL_ECORRUPT, "not an idx file");
  /* A text file, gzip-compressed. */
  test_write_gz(path_of("t.gz"), "hello, world\n", 13);
  expect_fail(path_of("t.gz"), SL_ECORRUPT, "not an idx file");
  buf[1] = 0;
  buf[2] = 0x0A; /* no such type */
  test_write_file(path_of("y"), buf, n);
  expect_fail(path_of("y"), SL_ECORRUPT, "type code 0x0a");
  buf[2] = 0x08;
  buf[3] = 0; /* rank 0 */
  test_write_file(path_of("z"), buf, n);
  expect_fail(path_of("z"), SL_ECORRUPT, "rank 0");
  buf[3] = 9;
  test_write_file(path_of("z"), buf, n);
  expect_fail(path_of("z"), SL_ECORRUPT, "rank 9");
  rm_tmpdir();
}

TEST(trailing_bytes) {
  tmpdir();
  unsigned char buf[64];
  size_t n = images_2x3x2(buf);
  buf[n] = 0xAB;
  test_write_file(path_of("x"), buf, n + 1);
  expect_fail(path_of("x"), SL_ECORRUPT, "unexpected bytes");
  rm_tmpdir();
}

TEST(size_bounds) {
  tmpdir();
  unsigned char buf[64];
  size_t n = test_idx_header(
      buf, 0x0E, 3, (uint32_t[]){0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu});
  test_write_file(path_of("huge"), buf, n);
  expect_fail(path_of("huge"), SL_EINVAL, "limit");
  /* Zero items of an absurd size are refused as well. */
  n = test_idx_header(buf, 0x08, 3, (uint32_t[]){0, 0xFFFFFFFFu, 0xFFFFFFFFu});
  test_write_file(path_of("zero_huge"), buf, n);
  expect_fail(path_of("zero_huge"), SL_EINVAL, "limit");
  /* So are absurd dimensions beside a zero one (no tensor shape holds
   * them; found by the idx fuzzer). */
  n = test_idx_header(buf, 0x08, 4,
                      (uint32_t[]){2, 0x2f70726fu, 0x632f7365u, 0});
  test_write_file(path_of("zero_dim_huge"), buf, n);
  expect_fail(path_of("zero_dim_huge"), SL_EINVAL, "limit");
  /* Under the limit but lying: 1 GB declared, 10 bytes present.  Fails as
   * truncated after reading what is there. */
  n = test_idx_header(buf, 0x08, 3, (uint32_t[]){1000, 1000, 1000});
  memset(buf + n, 1, 10);
  test_write_file(path_of("liar"), buf, n + 10);
  expect_fail(path_of("liar"), SL_ECORRUPT, "found 10");
  /* An explicit limit. */
  n = images_2x3x2(buf);
  test_write_file(path_of("img"), buf, n);
  sl__idx x;
  ASSERT_RC(sl__idx_load_limit(path_of("img"), 11, &x), SL_EINVAL);
  ASSERT_OK(sl__idx_load_limit(path_of("img"), 12, &x));
  sl__idx_free(&x);
  rm_tmpdir();
}

TEST(missing_file) {
  tmpdir();
  expect_fail(path_of("nope"), SL_EIO, "cannot open");
  rm_tmpdir();
}

TEST(expect_mismatch) {
  tmpdir();
  unsigned char buf[64];
  size_t n = test_idx_header(buf, 0x08, 1, (uint32_t[]){4});
  memset(buf + n, 3, 4);
  test_write_file(path_of("labels"), buf, n + 4);
  sl__idx x;
  ASSERT_OK(sl__idx_load(path_of("labels"), &x));
  ASSERT_RC(sl__idx_expect(&x, "images", SL_U8, 3), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), path_of("labels"));
  ASSERT_CONTAINS(sl_last_error(), "expected images");
  ASSERT_CONTAINS(sl_last_error(), "3 dimensions");
  sl__idx_free(&x);
  rm_tmpdir();
}

/* --- the idx packer on small files ---------------------------------------- */

/* Writes n images of 3x2 (bytes i*6+j) and n labels (i % 10) as idx. */
static void write_set(const char *img, uint32_t n_img, const char *lab,
                      uint32_t n_lab, unsigned lab_type) {
  unsigned char buf[4096];
  size_t h = test_idx_header(buf, 0x08, 3, (uint32_t[]){n_img, 3, 2});
  for (size_t i = 0; i < 6 * (size_t)n_img; i++)
    buf[h + i] = (unsigned char)i;
  test_write_gz(img, buf, h + 6 * (size_t)n_img);
  size_t esize = lab_type == 0x08 ? 1 : 4;
  h = test_idx_header(buf, lab_type, 1, (uint32_t[]){n_lab});
  memset(buf + h, 0, esize * n_lab);
  for (size_t i = 0; i < n_lab; i++)
    buf[h + i * esize + esize - 1] = (unsigned char)(i % 10);
  test_write_file(lab, buf, h + esize * n_lab);
}

TEST(pack_small) {
  tmpdir();
  char img[600], lab[600], out[600];
  snprintf(img, sizeof img, "%s", path_of("img.gz"));
  snprintf(lab, sizeof lab, "%s", path_of("lab"));
  snprintf(out, sizeof out, "%s", path_of("out.slr"));
  write_set(img, 25, lab, 25, 0x08);
  sl__pack_opts o = {.writer = {.records_per_chunk = 4}};
  uint64_t n = 0;
  ASSERT_OK(sl__pack_idx(img, lab, out, &o, &n));
  ASSERT_EQ(n, 25);
  ASSERT_EQ(count_files(), 3); /* no temporary file left */
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(out, NULL, &f));
  ASSERT_EQ(sl_slr_records(f), 25);
  ASSERT_EQ(sl_slr_chunks(f), 7);
  const sl_schema *s = sl_slr_schema(f);
  char desc[128];
  ASSERT_STREQ(sl_schema_describe(s, desc, sizeof desc),
               "{image: u8[3,2], label: i64[]}");
  ASSERT_STREQ(sl_schema_meta(s, "source"), "idx");
  ASSERT_STREQ(sl_schema_meta(s, "images"), "img.gz");
  ASSERT_STREQ(sl_schema_meta(s, "labels"), "lab");
  for (uint64_t k = 0; k < 25; k++) {
    sl_sample *r;
    ASSERT_OK(sl_slr_read(f, k, &r));
    const sl_tensor *im = sl_sample_at_const(r, 0),
                    *lb = sl_sample_at_const(r, 1);
    for (int j = 0; j < 6; j++)
      ASSERT_EQ(((const unsigned char *)im->data)[j],
                (k * 6 + (uint64_t)j) & 0xFF);
    ASSERT_EQ(*(const int64_t *)lb->data, (int64_t)(k % 10));
    sl_sample_release(r);
  }
  ASSERT_OK(sl_slr_verify(f));
  sl_slr_close(f);
  rm_tmpdir();
}

/* A failed pack leaves nothing: not the output, not a temporary file. */
static void expect_pack_fail(const char *img, const char *lab, int code,
                             const char *needle) {
  int before = count_files();
  ASSERT_RC(sl__pack_idx(img, lab, path_of("out.slr"), NULL, NULL), code);
  ASSERT_CONTAINS(sl_last_error(), needle);
  ASSERT_EQ(count_files(), before);
}

TEST(pack_count_mismatch) {
  tmpdir();
  char img[600], lab[600];
  snprintf(img, sizeof img, "%s", path_of("img.gz"));
  snprintf(lab, sizeof lab, "%s", path_of("lab"));
  write_set(img, 2, lab, 3, 0x08);
  expect_pack_fail(img, lab, SL_EINVAL, "holds 2 images");
  ASSERT_CONTAINS(sl_last_error(), "3 labels");
  ASSERT_CONTAINS(sl_last_error(), lab);
  rm_tmpdir();
}

TEST(pack_wrong_inputs) {
  tmpdir();
  char img[600], lab[600];
  snprintf(img, sizeof img, "%s", path_of("img.gz"));
  snprintf(lab, sizeof lab, "%s", path_of("lab"));
  write_set(img, 3, lab, 3, 0x0C); /* i32 labels */
  expect_pack_fail(img, lab, SL_EINVAL, "expected labels");
  /* Images and labels swapped. */
  expect_pack_fail(lab, img, SL_EINVAL, "expected images");
  char missing[600];
  snprintf(missing, sizeof missing, "%s", path_of("missing"));
  expect_pack_fail(img, missing, SL_EIO, "missing");
  rm_tmpdir();
}

TEST(shard_names) {
  char b[64];
  ASSERT_OK(sl__shard_name("data.slr", 1, 4, b, sizeof b));
  ASSERT_STREQ(b, "data-00001-of-00004.slr");
  ASSERT_OK(sl__shard_name("dir/out", 0, 12, b, sizeof b));
  ASSERT_STREQ(b, "dir/out-00000-of-00012.slr");
  ASSERT_OK(sl__shard_name("x.slr.slr", 0, 1, b, sizeof b));
  ASSERT_STREQ(b, "x.slr-00000-of-00001.slr");
  ASSERT_RC(sl__shard_name("data.slr", 0, 4, b, 10), SL_EINVAL);
  ASSERT_STREQ(sl__basename("/a/b/c.gz"), "c.gz");
  ASSERT_STREQ(sl__basename("c.gz"), "c.gz");
}

/* More shards than records: the extra shards are valid, empty files. */
TEST(pack_more_shards_than_records) {
  tmpdir();
  char img[600], lab[600], out[600], name[700];
  snprintf(img, sizeof img, "%s", path_of("img.gz"));
  snprintf(lab, sizeof lab, "%s", path_of("lab"));
  snprintf(out, sizeof out, "%s", path_of("o.slr"));
  write_set(img, 3, lab, 3, 0x08);
  for (int mode = 0; mode < 2; mode++) {
    sl__pack_opts o = {.shards = 5, .mode = (sl__shard_mode)mode};
    ASSERT_OK(sl__pack_idx(img, lab, out, &o, NULL));
    /* round-robin: 1 1 1 0 0; contiguous: the same sizes. */
    for (uint32_t s = 0; s < 5; s++) {
      ASSERT_OK(sl__shard_name(out, s, 5, name, sizeof name));
      sl_slr_file *f;
      ASSERT_OK(sl_slr_open(name, NULL, &f));
      ASSERT_EQ(sl_slr_records(f), s < 3 ? 1 : 0);
      if (s < 3) {
        sl_sample *r;
        ASSERT_OK(sl_slr_read(f, 0, &r));
        ASSERT_EQ(*(const int64_t *)sl_sample_at_const(r, 1)->data, s);
        sl_sample_release(r);
      }
      ASSERT_OK(sl_slr_verify(f));
      sl_slr_close(f);
    }
    ASSERT_EQ(count_files(), 7);
  }
  rm_tmpdir();
}

/* --- hostile sizes and trailing bytes (issue 13, items 8 and 14) --------- */

/* The bytes of file `name` in the test folder (malloc'd). */
static unsigned char *read_back(const char *name, size_t *n) {
  FILE *f = fopen(path_of(name), "rb");
  ASSERT_NOT_NULL(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n + 64);
  ASSERT_EQ(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

/* A gzip file whose header declares 2 GB (under the 8 GiB limit) over 2 MiB
 * of data fails before any buffer for the data is allocated, naming the
 * declared and the real size; one declaring more than deflate can expand
 * its size to fails at once. */
TEST(gzip_declaring_gigabytes_fails_before_allocating) {
  tmpdir();
  size_t data = (size_t)2 << 20, n = 16 + data;
  unsigned char *buf = malloc(n);
  test_idx_header(buf, 0x08, 3, (uint32_t[]){2000, 1000, 1000});
  uint32_t x = 7;
  for (size_t i = 16; i < n; i++) {
    x = x * 1103515245u + 12345u;
    buf[i] = (unsigned char)(x >> 23); /* incompressible */
  }
  test_write_gz(path_of("liar.gz"), buf, n);
  sl__alloc_largest();
  expect_fail(path_of("liar.gz"), SL_ECORRUPT, "2000x1000x1000 u8 elements");
  ASSERT_LE(sl__alloc_largest(), (size_t)1 << 20);
  ASSERT_CONTAINS(sl_last_error(), "2000000000 data bytes");
  ASSERT_CONTAINS(sl_last_error(), "found 2097152 in the gzip data");
  /* More data than declared: found before allocating too. */
  test_idx_header(buf, 0x08, 3, (uint32_t[]){1, 1000, 1000});
  test_write_gz(path_of("more.gz"), buf, n);
  expect_fail(path_of("more.gz"), SL_ECORRUPT, "found more than 1000000");
  ASSERT_LE(sl__alloc_largest(), (size_t)1 << 20);
  /* 2 GB declared in a file of a few KB: beyond deflate's 1032:1. */
  test_idx_header(buf, 0x08, 3, (uint32_t[]){2000, 1000, 1000});
  memset(buf + 16, 0, 4096);
  test_write_gz(path_of("bomb.gz"), buf, 16 + 4096);
  expect_fail(path_of("bomb.gz"), SL_ECORRUPT,
              "more than a gzip file of");
  ASSERT_CONTAINS(sl_last_error(), "2000000000 data bytes");
  ASSERT_LE(sl__alloc_largest(), (size_t)1 << 20);
  /* A plain file is compared with its size at once. */
  test_write_file(path_of("plain"), buf, 16 + 4096);
  expect_fail(path_of("plain"), SL_ECORRUPT, "found 4096");
  ASSERT_LE(sl__alloc_largest(), (size_t)1 << 20);
  free(buf);
  rm_tmpdir();
}

/* Bytes after the last gzip member that are not another member are
 * corrupt (whether or not the file's last 4 bytes look like the ISIZE the
 * header implies); concatenated members are one stream. */
TEST(gzip_trailing_garbage_is_corrupt) {
  tmpdir();
  unsigned char buf[64];
  size_t n = images_2x3x2(buf);
  test_write_gz(path_of("a.gz"), buf, 10);
  test_write_gz(path_of("b.gz"), buf + 10, n - 10);
  size_t na, nb;
  unsigned char *a = read_back("a.gz", &na), *b = read_back("b.gz", &nb);
  /* Two members: loads. */
  unsigned char *two = malloc(na + nb + 64);
  memcpy(two, a, na);
  memcpy(two + na, b, nb);
  test_write_file(path_of("two.gz"), two, na + nb);
  sl__idx x;
  ASSERT_OK(sl__idx_load(path_of("two.gz"), &x));
  check_2x3x2(&x);
  sl__idx_free(&x);
  /* A whole file, then garbage. */
  test_write_gz(path_of("one.gz"), buf, n);
  size_t n1;
  unsigned char *one = read_back("one.gz", &n1);
  memcpy(one + n1, "garbage!", 8);
  test_write_file(path_of("g1.gz"), one, n1 + 8);
  expect_fail(path_of("g1.gz"), SL_ECORRUPT, "trailing garbage");
  ASSERT_CONTAINS(sl_last_error(), "8 bytes at offset");
  /* Garbage ending in the right ISIZE (28): the fast path reads it. */
  memcpy(one + n1, "zz\x1c\x00\x00\x00", 6);
  test_write_file(path_of("g2.gz"), one, n1 + 6);
  expect_fail(path_of("g2.gz"), SL_ECORRUPT, "trailing garbage");
  /* One stray byte that starts like a member. */
  one[n1] = 0x1f;
  test_write_file(path_of("g3.gz"), one, n1 + 1);
  expect_fail(path_of("g3.gz"), SL_ECORRUPT, "trailing garbage");
  /* Garbage after two members. */
  memcpy(two + na + nb, "\x00\x00\x00\x00", 4);
  test_write_file(path_of("g4.gz"), two, na + nb + 4);
  expect_fail(path_of("g4.gz"), SL_ECORRUPT, "trailing garbage");
  free(a);
  free(b);
  free(two);
  free(one);
  rm_tmpdir();
}
