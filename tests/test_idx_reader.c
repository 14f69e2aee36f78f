/*
 * test_idx_reader.c - the `idx` file reader: the real Fashion-MNIST test set
 * (10000 samples checked against the idx parser and the raw gzip bytes),
 * through sl_idx_reader and sl_open, and small files written here for the
 * labels-name convention and every failure (missing labels, truncated or
 * corrupt files, mismatched counts, wrong dtypes and ranks).
 */
#include "formats/idx.h"
#include "test.h"
#include "test_util.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define T10K_IMAGES FMNIST_DIR "/t10k-images-idx3-ubyte.gz"
#define T10K_LABELS FMNIST_DIR "/t10k-labels-idx1-ubyte.gz"

/* --- fixtures ------------------------------------------------------------ */

static const char *tmppath(const char *name) {
  return test_tmppath("idx-reader", name);
}

/* The data set is a declared dependency (Makefile: make deps): its absence
 * is a failure that says how to fix it, never a silent skip. */
static void need_fmnist(void) {
  if (access(T10K_IMAGES, R_OK) != 0 || access(T10K_LABELS, R_OK) != 0)
    test_fail(__FILE__, __LINE__,
              "Fashion-MNIST not found at " FMNIST_DIR
              ": install the Debian package dataset-fashion-mnist "
              "(make deps)");
}

/* `count` images of 3 x 2 u8 (pixel j of image i = 10 i + j) into buf;
 * returns the file size. */
static size_t images_file(unsigned char *buf, uint32_t count) {
  uint32_t dims[3] = {count, 3, 2};
  size_t n = test_idx_header(buf, 0x08, 3, dims);
  for (uint32_t i = 0; i < count; i++)
    for (int j = 0; j < 6; j++)
      buf[n++] = (unsigned char)(10 * i + (uint32_t)j);
  return n;
}

/* `count` u8 labels (label i = 9 - i) into buf; returns the file size. */
static size_t labels_file(unsigned char *buf, uint32_t count) {
  uint32_t dims[1] = {count};
  size_t n = test_idx_header(buf, 0x08, 1, dims);
  for (uint32_t i = 0; i < count; i++)
    buf[n++] = (unsigned char)(9 - i);
  return n;
}

/* Reads the small data set of `count` samples, checking every value. */
static void check_small(sl_reader *r, uint32_t count) {
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t i = 0; i < count; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      const sl_tensor *im = sl_sample_field(s, "image");
      const sl_tensor *lb = sl_sample_field(s, "label");
      ASSERT_EQ(im->dtype, SL_U8);
      ASSERT_EQ(im->rank, 2);
      ASSERT_EQ(im->shape[0], 3);
      ASSERT_EQ(im->shape[1], 2);
      for (int j = 0; j < 6; j++)
        ASSERT_EQ(((const uint8_t *)im->data)[j], 10 * i + (uint32_t)j);
      ASSERT_EQ(lb->dtype, SL_I64);
      ASSERT_EQ(lb->rank, 0);
      ASSERT_EQ(*(const int64_t *)lb->data, 9 - (int64_t)i);
      sl_sample_release(s);
    }
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF); /* repeatable */
    ASSERT_OK(sl_reader_reset(r));            /* reset: start again */
  }
}

/* --- Fashion-MNIST ---------------------------------------------------------
 */

TEST(fashion_mnist_t10k_matches_the_idx_parser) {
  need_fmnist();
  sl__idx im, lb;
  ASSERT_OK(sl__idx_load(T10K_IMAGES, &im));
  ASSERT_OK(sl__idx_load(T10K_LABELS, &lb));
  sl_reader *r;
  ASSERT_OK(sl_idx_reader(T10K_IMAGES, NULL, &r)); /* labels by name */
  ASSERT_STREQ(sl_reader_name(r), "idx");
  char desc[256];
  sl_schema_describe(sl_reader_schema(r), desc, sizeof desc);
  ASSERT_STREQ(desc, "{image: u8[28,28], label: i64[]}");
  ASSERT_STREQ(sl_schema_meta(sl_reader_schema(r), "labels"),
               "t10k-labels-idx1-ubyte.gz");
  int64_t per_class[10] = {0};
  uint64_t n = 0;
  sl_sample *s, *first = NULL;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    const sl_tensor *t = sl_sample_at_const(s, 0);
    const sl_tensor *l = sl_sample_at_const(s, 1);
    ASSERT_EQ(t->nbytes, 784);
    int64_t label = *(const int64_t *)l->data;
    ASSERT_TRUE(label >= 0 && label < 10);
    per_class[label]++;
    /* Every label; the pixels of every 7th image and the last. */
    ASSERT_EQ(label, ((const uint8_t *)sl_buffer_data(lb.data))[n]);
    if (n % 7 == 0 || n == 9999)
      ASSERT_EQ(memcmp(t->data, sl__idx_item(&im, n), 784), 0);
    if (n == 0)
      first = s;
    else
      sl_sample_release(s);
    n++;
  }
  ASSERT_RC(rc, SL_EOF);
  ASSERT_EQ(n, 10000);
  for (int c = 0; c < 10; c++)
    ASSERT_EQ(per_class[c], 1000); /* the test set is balanced */
  /* Image 0 against the raw file: 16 header bytes, then 784 pixels. */
  gzFile g = gzopen(T10K_IMAGES, "rb");
  ASSERT_TRUE(g != NULL);
  unsigned char raw[16 + 784];
  ASSERT_EQ(gzread(g, raw, sizeof raw), (int)sizeof raw);
  gzclose(g);
  ASSERT_EQ(raw[2], 0x08);
  ASSERT_EQ(raw[3], 3);
  ASSERT_EQ(memcmp(sl_sample_at_const(first, 0)->data, raw + 16, 784), 0);
  /* Samples are views into the loaded buffer: they outlive the reader. */
  sl_reader_destroy(r);
  ASSERT_EQ(*(const int64_t *)sl_sample_at_const(first, 1)->data,
            ((const uint8_t *)sl_buffer_data(lb.data))[0]);
  ASSERT_EQ(memcmp(sl_sample_at_const(first, 0)->data, raw + 16, 784), 0);
  sl_sample_release(first);
  sl__idx_free(&im);
  sl__idx_free(&lb);
}

static uint64_t drain(sl_reader *r) {
  uint64_t n = 0;
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    n++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  return n;
}

TEST(fashion_mnist_through_sl_open) {
  need_fmnist();
  sl_reader *r;
  ASSERT_OK(sl_open("idx:" T10K_IMAGES, NULL, &r));
  ASSERT_STREQ(sl_reader_name(r), "idx");
  ASSERT_EQ(drain(r), 10000);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(drain(r), 10000);
  sl_reader_destroy(r);
  /* A bare path: the "-idx3-ubyte.gz" suffix picks the tag. */
  ASSERT_OK(sl_open(T10K_IMAGES, NULL, &r));
  ASSERT_EQ(drain(r), 10000);
  sl_reader_destroy(r);
  /* The labels option overrides the convention. */
  sl_open_opts o = SL_OPEN_OPTS_INIT;
  o.labels = T10K_LABELS;
  ASSERT_OK(sl_open("idx:" T10K_IMAGES, &o, &r));
  ASSERT_EQ(drain(r), 10000);
  sl_reader_destroy(r);
  /* A glob over both sets chains them (t10k, then train). */
  ASSERT_OK(sl_open("idx:" FMNIST_DIR "/*-images-idx3-ubyte.gz", NULL, &r));
  ASSERT_EQ(drain(r), 70000);
  sl_reader_destroy(r);
  /* An option struct from before the idx fields (only its size and slr
   * options) still opens by convention. */
  sl_open_opts old = SL_OPEN_OPTS_INIT;
  old.size = offsetof(sl_open_opts, labels);
  old.labels = "ignored: beyond the caller's size";
  ASSERT_OK(sl_open("idx:" T10K_IMAGES, &old, &r));
  ASSERT_EQ(drain(r), 10000);
  sl_reader_destroy(r);
}

/* --- small files --------------------------------------------------------- */

TEST(small_plain_and_gzip_with_derived_labels) {
  unsigned char im[16 + 4 * 6], lb[8 + 4];
  size_t ni = images_file(im, 4), nl = labels_file(lb, 4);
  /* plain + plain */
  const char *images = tmppath("a-images-idx3-ubyte");
  test_write_file(images, im, ni);
  test_write_file(tmppath("a-labels-idx1-ubyte"), lb, nl);
  sl_reader *r;
  ASSERT_OK(sl_idx_reader(images, NULL, &r));
  check_small(r, 4);
  sl_reader_destroy(r);
  /* gzip + gzip */
  images = tmppath("b-images-idx3-ubyte.gz");
  test_write_gz(images, im, ni);
  test_write_gz(tmppath("b-labels-idx1-ubyte.gz"), lb, nl);
  ASSERT_OK(sl_idx_reader(images, NULL, &r));
  check_small(r, 4);
  sl_reader_destroy(r);
  /* plain images, gzipped labels: the ".gz" twin is found */
  images = tmppath("c-images-idx3-ubyte");
  test_write_file(images, im, ni);
  test_write_gz(tmppath("c-labels-idx1-ubyte.gz"), lb, nl);
  ASSERT_OK(sl_idx_reader(images, NULL, &r));
  ASSERT_STREQ(sl_schema_meta(sl_reader_schema(r), "labels"),
               "c-labels-idx1-ubyte.gz");
  check_small(r, 4);
  sl_reader_destroy(r);
  /* MNIST's other spelling, with dots */
  images = tmppath("train-images.idx3-ubyte");
  test_write_file(images, im, ni);
  test_write_file(tmppath("train-labels.idx1-ubyte"), lb, nl);
  ASSERT_OK(sl_idx_reader(images, NULL, &r));
  check_small(r, 4);
  sl_reader_destroy(r);
  /* any names, with the labels given */
  images = tmppath("pix.bin");
  test_write_file(images, im, ni);
  test_write_file(tmppath("lab.bin"), lb, nl);
  ASSERT_OK(sl_idx_reader(images, tmppath("lab.bin"), &r));
  check_small(r, 4);
  sl_reader_destroy(r);
}

TEST(wider_labels_and_zero_items) {
  unsigned char im[16 + 3 * 6], lb[8 + 3 * 4];
  size_t ni = images_file(im, 3);
  uint32_t dims[1] = {3};
  size_t nl = test_idx_header(lb, 0x0C, 1, dims); /* i32, big-endian */
  for (int i = 0; i < 3; i++) {
    uint32_t v = (uint32_t)(9 - i);
    lb[nl++] = (unsigned char)(v >> 24), lb[nl++] = (unsigned char)(v >> 16);
    lb[nl++] = (unsigned char)(v >> 8), lb[nl++] = (unsigned char)v;
  }
  test_write_file(tmppath("w-images-idx3-ubyte"), im, ni);
  test_write_file(tmppath("w-labels-idx1-ubyte"), lb, nl);
  sl_reader *r;
  ASSERT_OK(sl_idx_reader(tmppath("w-images-idx3-ubyte"), NULL, &r));
  check_small(r, 3);
  sl_reader_destroy(r);
  /* Empty files (0 items) are a reader with no samples. */
  ni = images_file(im, 0);
  nl = labels_file(lb, 0);
  test_write_file(tmppath("z-images-idx3-ubyte"), im, ni);
  test_write_file(tmppath("z-labels-idx1-ubyte"), lb, nl);
  ASSERT_OK(sl_idx_reader(tmppath("z-images-idx3-ubyte"), NULL, &r));
  ASSERT_EQ(drain(r), 0);
  sl_reader_destroy(r);
}

TEST(missing_labels_file_names_both_files) {
  unsigned char im[16 + 2 * 6];
  size_t ni = images_file(im, 2);
  const char *images = tmppath("m-images-idx3-ubyte.gz");
  test_write_gz(images, im, ni);
  char want[1200];
  snprintf(want, sizeof want,
           "idx: labels for %s (derived from its name; set the labels "
           "option to choose the file): %s/m-labels-idx1-ubyte.gz: cannot "
           "open: No such file or directory",
           images, test_tmpdir("idx-reader"));
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_idx_reader(images, NULL, &r), SL_EIO);
  ASSERT_NULL(r);
  ASSERT_STREQ(sl_last_error(), want);
  /* Through sl_open, the same message. */
  char name[600];
  snprintf(name, sizeof name, "idx:%s", images);
  ASSERT_RC(sl_open(name, NULL, &r), SL_EIO);
  ASSERT_STREQ(sl_last_error(), want);
  /* A labels file given explicitly is named as given. */
  snprintf(want, sizeof want,
           "idx: labels for %s: /nonexistent/l.idx: cannot open: No such "
           "file or directory",
           images);
  ASSERT_RC(sl_idx_reader(images, "/nonexistent/l.idx", &r), SL_EIO);
  ASSERT_STREQ(sl_last_error(), want);
  /* A name with no convention cannot find its labels. */
  const char *odd = tmppath("pixels.idx");
  test_write_file(odd, im, ni);
  ASSERT_RC(sl_idx_reader(odd, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), odd);
  ASSERT_CONTAINS(sl_last_error(), "cannot derive the labels file");
  ASSERT_CONTAINS(sl_last_error(), "set the labels option");
  /* Missing images. */
  ASSERT_RC(sl_idx_reader("/nonexistent/x-images-idx3-ubyte", NULL, &r),
            SL_EIO);
  ASSERT_STREQ(sl_last_error(), "idx: /nonexistent/x-images-idx3-ubyte: "
                                "cannot open: No such file or directory");
  ASSERT_RC(sl_idx_reader(NULL, NULL, &r), SL_EINVAL);
  ASSERT_RC(sl_idx_reader("", NULL, &r), SL_EINVAL);
  ASSERT_RC(sl_idx_reader(images, NULL, NULL), SL_EINVAL);
}

TEST(truncated_and_corrupt_files_are_named) {
  unsigned char im[16 + 4 * 6], lb[8 + 4];
  size_t ni = images_file(im, 4), nl = labels_file(lb, 4);
  sl_reader *r;
  /* Truncated images data. */
  const char *images = tmppath("t-images-idx3-ubyte");
  test_write_file(images, im, ni - 5);
  test_write_file(tmppath("t-labels-idx1-ubyte"), lb, nl);
  ASSERT_RC(sl_idx_reader(images, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "idx: ");
  ASSERT_CONTAINS(sl_last_error(), images);
  ASSERT_CONTAINS(sl_last_error(), "truncated");
  /* Truncated labels (the header promises 4). */
  test_write_file(images, im, ni);
  test_write_file(tmppath("t-labels-idx1-ubyte"), lb, nl - 1);
  ASSERT_RC(sl_idx_reader(images, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "t-labels-idx1-ubyte: truncated");
  /* A gzip stream cut in the middle. */
  unsigned char gz[4096];
  images = tmppath("g-images-idx3-ubyte.gz");
  test_write_gz(images, im, ni);
  FILE *f = fopen(images, "rb");
  size_t gn = fread(gz, 1, sizeof gz, f);
  fclose(f);
  test_write_file(images, gz, gn / 2);
  test_write_gz(tmppath("g-labels-idx1-ubyte.gz"), lb, nl);
  ASSERT_RC(sl_idx_reader(images, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), images);
  /* Not an idx file at all. */
  images = tmppath("n-images-idx3-ubyte");
  test_write_file(images, "hello, world\n", 13);
  ASSERT_RC(sl_idx_reader(images, tmppath("t-labels-idx1-ubyte"), &r),
            SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "not an idx file");
  /* An empty file. */
  test_write_file(images, "", 0);
  ASSERT_RC(sl_idx_reader(images, tmppath("t-labels-idx1-ubyte"), &r),
            SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "empty");
}

TEST(mismatched_counts_dtypes_and_ranks) {
  unsigned char im[16 + 4 * 6], lb[16 + 16];
  size_t ni = images_file(im, 4), nl = labels_file(lb, 3);
  const char *images = tmppath("k-images-idx3-ubyte");
  const char *labels = tmppath("k-labels-idx1-ubyte");
  test_write_file(images, im, ni);
  test_write_file(labels, lb, nl);
  sl_reader *r;
  char want[1200];
  snprintf(want, sizeof want, "idx: %s holds 4 images but %s holds 3 labels",
           images, labels);
  ASSERT_RC(sl_idx_reader(images, NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), want);
  /* Float labels. */
  uint32_t dims[2] = {4, 1};
  nl = test_idx_header(lb, 0x0D, 1, dims);
  memset(lb + nl, 0, 16);
  test_write_file(labels, lb, nl + 16);
  ASSERT_RC(sl_idx_reader(images, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "labels must be integers, found f32");
  /* Labels of rank 2. */
  nl = test_idx_header(lb, 0x08, 2, dims);
  memset(lb + nl, 0, 4);
  test_write_file(labels, lb, nl + 4);
  ASSERT_RC(sl_idx_reader(images, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), labels);
  ASSERT_CONTAINS(sl_last_error(), "expected labels");
  /* Images of rank 1 (no per-image dimensions). */
  nl = test_idx_header(im, 0x08, 1, dims);
  memset(im + nl, 0, 4);
  test_write_file(images, im, nl + 4);
  ASSERT_RC(sl_idx_reader(images, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), images);
  ASSERT_CONTAINS(sl_last_error(), "at least 2 dimensions");
}

/* --- allocation failures ------------------------------------------------- */

/* The library's fault-injection hook (core/internal.h); the test links the
 * static library, where it is visible. */
long sl__alloc_fail_after(long n);

TEST(allocation_failures_are_clean) {
  unsigned char im[16 + 4 * 6], lb[8 + 4];
  size_t ni = images_file(im, 4), nl = labels_file(lb, 4);
  const char *images = tmppath("f-images-idx3-ubyte.gz");
  test_write_gz(images, im, ni);
  test_write_gz(tmppath("f-labels-idx1-ubyte.gz"), lb, nl);
  int completed = 0;
  for (long k = 0; k < 1000 && !completed; k++) {
    sl_reader *r = NULL;
    sl__alloc_fail_after(k);
    int rc = sl_idx_reader(images, NULL, &r);
    int n = 0;
    if (rc == SL_OK) {
      sl_sample *s;
      while ((rc = sl_reader_next(r, &s)) == SL_OK) {
        n++;
        sl_sample_release(s);
      }
    }
    long made = sl__alloc_fail_after(-1);
    sl_reader_destroy(r);
    if (rc == SL_EOF) {
      ASSERT_EQ(n, 4);
      completed = made <= k;
    } else {
      ASSERT_RC(rc, SL_ENOMEM);
      ASSERT_TRUE(sl_last_error()[0] != '\0');
    }
  }
  ASSERT_TRUE(completed);
}
