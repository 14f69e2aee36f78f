/*
 * test_image.c - images: JPEG/PNG decoding, the `image` reader, packed
 * encoded images decoded by decode_image (1 and more threads), resize,
 * random crop/flip, and every failure (damaged, truncated and non-image
 * files, in a folder and inside SLR records; the skip policy and its cap;
 * empty folders; declared shapes).
 *
 * The data: the first N_IMAGES Fashion-MNIST t10k images, written here as
 * PNG (lossless: decoding must give the idx bytes exactly) and JPEG
 * (quality 95, gray: mean absolute error <= JPEG_MAE_BOUND over all pixels
 * and no pixel off by more than JPEG_MAX_BOUND) in ImageFolder class
 * folders named after the data set's classes (tests/image_fixture.h).
 */
#include "core/rng.h"
#include "image/image.h"
#include "image_fixture.h"
#include "pack/import.h"
#include "test.h"
#include "test_util.h"

#include <unistd.h>
#include <zlib.h>

#define N_IMAGES 300
/* Measured on these 300 images: mean 1.09 (quality 95, gray). */
#define JPEG_MAE_BOUND 2.0
#define JPEG_MAX_BOUND 32

/* --- fixtures --------------------------------------------------------------
 */

static const char *tmppath(const char *name) {
  return test_tmppath("image", name);
}

static fix_fmnist g_data;
/* Reading order of the folders: sample k is image g_order[k]. */
static size_t g_order[N_IMAGES];
/* ImageFolder label of each Fashion-MNIST label (its class name's rank). */
static int64_t g_class_of[10];

static int cmp_name(const void *a, const void *b) {
  return strcmp(fix_class_names[*(const int *)a],
                fix_class_names[*(const int *)b]);
}

static void need_data(void) {
  if (g_data.n) return;
  if (access(FIX_FMNIST_DIR "/t10k-images-idx3-ubyte.gz", R_OK) != 0)
    test_fail(__FILE__, __LINE__,
              "Fashion-MNIST not found at " FIX_FMNIST_DIR
              ": install the Debian package dataset-fashion-mnist "
              "(make deps)");
  if (fix_fmnist_load(FIX_FMNIST_DIR, N_IMAGES, &g_data) < 0)
    test_fail(__FILE__, __LINE__, "cannot load Fashion-MNIST");
  ASSERT_EQ(g_data.n, N_IMAGES);
  int by_name[10];
  for (int c = 0; c < 10; c++)
    by_name[c] = c;
  qsort(by_name, 10, sizeof *by_name, cmp_name);
  for (int k = 0; k < 10; k++)
    g_class_of[by_name[k]] = k;
  /* Paths sort by class name, then by number. */
  size_t k = 0;
  for (int rank = 0; rank < 10; rank++)
    for (size_t i = 0; i < g_data.n; i++)
      if (g_class_of[g_data.labels[i]] == rank) g_order[k++] = i;
  ASSERT_EQ(k, N_IMAGES);
}

/* A folder of the test images ("png" or "jpeg"), made once per process. */
static const char *folder(int kind) {
  need_data();
  const char *dir = tmppath(kind == FIX_PNG ? "png" : "jpeg");
  if (access(dir, F_OK) != 0 && fix_make_folder(dir, &g_data, kind) < 0)
    test_fail(__FILE__, __LINE__, "cannot write the test images in %s", dir);
  return dir;
}

static const char *sorted_classes(void) {
  return "Ankle_boot,Bag,Coat,Dress,Pullover,Sandal,Shirt,Sneaker,"
         "T-shirt_top,Trouser";
}

static sl_image_opts image_opts(uint32_t threads) {
  sl_image_opts o = SL_IMAGE_OPTS_INIT;
  o.threads = threads;
  return o;
}

/* Reads a pass of `r`, checking each sample against the source pixels:
 * exactly (max_err 0) or within the bounds; returns the mean abs error. */
static double check_pass(sl_reader *r, int max_err) {
  uint64_t sum = 0;
  int worst = 0;
  for (size_t k = 0; k < N_IMAGES; k++) {
    sl_sample *s;
    int rc = sl_reader_next(r, &s);
    if (rc != SL_OK)
      test_fail(__FILE__, __LINE__, "sample %zu: %s: %s", k, sl_err_name(rc),
                sl_last_error());
    size_t i = g_order[k];
    const sl_tensor *img = sl_sample_field(s, "image");
    ASSERT_EQ(img->dtype, SL_U8);
    ASSERT_EQ(img->rank, 3);
    ASSERT_EQ(img->shape[0], 28);
    ASSERT_EQ(img->shape[1], 28);
    ASSERT_EQ(img->shape[2], 1);
    const uint8_t *got = img->data, *want = g_data.pixels + i * 784;
    for (int p = 0; p < 784; p++) {
      int d = abs((int)got[p] - (int)want[p]);
      sum += (uint64_t)d;
      if (d > worst) worst = d;
    }
    ASSERT_EQ(*(const int64_t *)sl_sample_field(s, "label")->data,
              g_class_of[g_data.labels[i]]);
    sl_sample_release(s);
  }
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_LE(worst, max_err);
  return (double)sum / (N_IMAGES * 784.0);
}

/* Every sample of a pass, concatenated (images and labels), for
 * comparisons between runs. */
typedef struct pass_bytes {
  uint8_t *v;
  size_t n, cap, samples;
} pass_bytes;

static void pb_add(pass_bytes *pb, const void *p, size_t n) {
  if (pb->n + n > pb->cap) {
    pb->cap = (pb->n + n) * 2;
    pb->v = realloc(pb->v, pb->cap);
  }
  memcpy(pb->v + pb->n, p, n);
  pb->n += n;
}

static pass_bytes drain(sl_reader *r) {
  pass_bytes pb = {0};
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    for (int f = 0; f < sl_sample_nfields(s); f++) {
      const sl_tensor *t = sl_sample_at_const(s, f);
      pb_add(&pb, t->shape, sizeof t->shape);
      pb_add(&pb, t->data, t->nbytes);
    }
    pb.samples++;
    sl_sample_release(s);
  }
  if (rc != SL_EOF)
    test_fail(__FILE__, __LINE__, "drain: %s: %s", sl_err_name(rc),
              sl_last_error());
  return pb;
}

static void assert_same(const pass_bytes *a, const pass_bytes *b) {
  ASSERT_EQ(a->samples, b->samples);
  ASSERT_EQ(a->n, b->n);
  ASSERT_TRUE(memcmp(a->v, b->v, a->n) == 0);
}

static void read_file(const char *path, uint8_t **data, size_t *n) {
  FILE *f = fopen(path, "rb");
  ASSERT_NOT_NULL(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  *data = malloc((size_t)len + 1);
  ASSERT_EQ(fread(*data, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
}

/* Packs `dir` into `out` with the library's packer (what the CLI calls). */
static void pack(const char *dir, const char *out) {
  sl__pack_opts po = {0};
  po.writer.records_per_chunk = 64;
  uint64_t records = 0;
  ASSERT_OK(sl__pack_images(dir, out, &po, &records));
  (void)records;
}

/* --- the reader on good data --------------------------------------------- */

TEST(png_folder_gives_the_idx_pixels_exactly) {
  const char *dir = folder(FIX_PNG);
  sl_image_opts o = image_opts(2);
  sl_reader *r;
  ASSERT_OK(sl_image_reader(dir, &o, &r));
  const sl_schema *sc = sl_reader_schema(r);
  char desc[256];
  ASSERT_STREQ(sl_schema_describe(sc, desc, sizeof desc),
               "{image: u8[-1,-1,-1], label: i64[]}");
  ASSERT_STREQ(sl_schema_meta(sc, "classes"), sorted_classes());
  ASSERT_STREQ(sl_schema_meta(sc, "source"), "image");
  ASSERT_STREQ(sl_reader_name(r), "image");
  ASSERT_TRUE(check_pass(r, 0) == 0.0);
  /* A second pass after reset: the same. */
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_TRUE(check_pass(r, 0) == 0.0);
  sl_reader_destroy(r);
}

TEST(jpeg_folder_is_within_the_error_bound) {
  const char *dir = folder(FIX_JPEG);
  sl_image_opts o = image_opts(2);
  o.shape.channels = 1;
  sl_reader *r;
  ASSERT_OK(sl_image_reader(dir, &o, &r));
  double mae = check_pass(r, JPEG_MAX_BOUND);
  printf("jpeg q95: mean abs error %.3f\n", mae);
  ASSERT_TRUE(mae <= JPEG_MAE_BOUND);
  sl_reader_destroy(r);
}

TEST(sl_open_image_tag_and_extensions) {
  const char *dir = folder(FIX_PNG);
  char name[1100];
  snprintf(name, sizeof name, "image:%s", dir);
  sl_image_opts io = image_opts(1);
  io.shape.channels = 3;
  sl_open_opts o = SL_OPEN_OPTS_INIT;
  o.image = &io;
  sl_reader *r;
  ASSERT_OK(sl_open(name, &o, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(&*r, &s));
  const sl_tensor *t = sl_sample_field(s, "image");
  ASSERT_EQ(t->shape[2], 3);
  const uint8_t *px = t->data, *want = g_data.pixels + g_order[0] * 784;
  for (int p = 0; p < 784; p++) {
    ASSERT_EQ(px[3 * p], want[p]);
    ASSERT_EQ(px[3 * p + 1], want[p]);
    ASSERT_EQ(px[3 * p + 2], want[p]);
  }
  sl_sample_release(s);
  sl_reader_destroy(r);
  /* One file by its extension: {image} alone, as stored (gray). */
  char file[1100];
  snprintf(file, sizeof file, "%s/Bag/%05zu.png", dir, g_order[0] + 0);
  /* g_order[0] is the first Ankle_boot image; find a Bag one instead. */
  size_t bag = 0;
  while (g_data.labels[bag] != 8)
    bag++;
  snprintf(file, sizeof file, "%s/Bag/%05zu.png", dir, bag);
  ASSERT_OK(sl_open(file, NULL, &r));
  char desc[128];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(r), desc, sizeof desc),
               "{image: u8[-1,-1,-1]}");
  ASSERT_OK(sl_reader_next(r, &s));
  t = sl_sample_field(s, "image");
  ASSERT_EQ(t->shape[2], 1);
  ASSERT_TRUE(memcmp(t->data, g_data.pixels + bag * 784, 784) == 0);
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
}

/* --- packed SLR + decode_image ---------------------------------------------
 */

static void packed_matches_reader(int kind) {
  const char *dir = folder(kind);
  const char *slr = tmppath(kind == FIX_PNG ? "png.slr" : "jpeg.slr");
  pack(dir, slr);
  /* Records hold each file's bytes unchanged, with the label. */
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(slr, NULL, &f));
  ASSERT_EQ(sl_slr_records(f), N_IMAGES);
  ASSERT_STREQ(sl_schema_meta(sl_slr_schema(f), "classes"), sorted_classes());
  for (uint64_t k = 0; k < N_IMAGES; k += 37) {
    sl_sample *s;
    ASSERT_OK(sl_slr_read(f, k, &s));
    size_t i = g_order[k];
    char p[1100];
    snprintf(p, sizeof p, "%s/%s/%05zu.%s", dir,
             fix_class_names[g_data.labels[i]], i,
             kind == FIX_PNG ? "png" : "jpg");
    uint8_t *bytes;
    size_t n;
    read_file(p, &bytes, &n);
    const sl_tensor *t = sl_sample_field(s, "image");
    ASSERT_EQ(t->dtype, SL_BYTES);
    ASSERT_EQ(t->nbytes, n);
    ASSERT_TRUE(memcmp(t->data, bytes, n) == 0);
    ASSERT_EQ(*(const int64_t *)sl_sample_field(s, "label")->data,
              g_class_of[g_data.labels[i]]);
    free(bytes);
    sl_sample_release(s);
  }
  sl_slr_close(f);

  /* Decoded with 1 and 2 threads: identical, and identical to the folder
   * read by the image reader. */
  pass_bytes runs[3];
  for (int t = 0; t < 3; t++) {
    sl_reader *r;
    if (t < 2) {
      ASSERT_OK(sl_open(slr, NULL, &r));
      sl_image_opts o = image_opts((uint32_t)t + 1);
      ASSERT_OK(sl_decode_image(r, &o, &r));
      ASSERT_STREQ(sl_reader_name(r), "decode_image");
      ASSERT_STREQ(sl_schema_meta(sl_reader_schema(r), "classes"),
                   sorted_classes());
    } else {
      sl_image_opts o = image_opts(2);
      ASSERT_OK(sl_image_reader(dir, &o, &r));
    }
    runs[t] = drain(r);
    sl_reader_destroy(r);
  }
  ASSERT_EQ(runs[0].samples, N_IMAGES);
  assert_same(&runs[0], &runs[1]);
  assert_same(&runs[0], &runs[2]);
  for (int t = 0; t < 3; t++)
    free(runs[t].v);
  /* And against the source pixels. */
  sl_reader *r;
  ASSERT_OK(sl_open(slr, NULL, &r));
  sl_image_opts o = image_opts(2);
  ASSERT_OK(sl_decode_image(r, &o, &r));
  double mae = check_pass(r, kind == FIX_PNG ? 0 : JPEG_MAX_BOUND);
  ASSERT_TRUE(mae <= (kind == FIX_PNG ? 0.0 : JPEG_MAE_BOUND));
  sl_reader_destroy(r);
}

TEST(packed_png_decodes_exactly_with_1_and_2_threads) {
  packed_matches_reader(FIX_PNG);
}

/* A decoded sample keeps no view of its record's SLR chunk: its label is
 * copied out of the chunk (a view would keep the chunk of encoded images
 * alive as long as the decoded sample, and a shuffle's window of decoded
 * samples would pin every chunk it came from). */
TEST(decoded_samples_do_not_pin_their_chunks) {
  const char *slr = tmppath("pin.slr");
  pack(folder(FIX_PNG), slr);
  for (uint32_t threads = 1; threads <= 2; threads++) {
    sl_reader *r;
    ASSERT_OK(sl_open(slr, NULL, &r));
    /* undecoded, the label is a view of the chunk */
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_TRUE(sl_buffer_size(sl_sample_field(s, "label")->buf) > 64);
    sl_sample_release(s);
    ASSERT_OK(sl_reader_reset(r));
    sl_image_opts o = image_opts(threads);
    ASSERT_OK(sl_decode_image(r, &o, &r));
    size_t n = 0;
    while (sl_reader_next(r, &s) == SL_OK) {
      const sl_tensor *label = sl_sample_field(s, "label");
      ASSERT_EQ(sl_buffer_size(label->buf), sizeof(int64_t));
      ASSERT_EQ(*(const int64_t *)label->data,
                g_class_of[g_data.labels[g_order[n]]]);
      sl_sample_release(s);
      n++;
    }
    ASSERT_EQ(n, N_IMAGES);
    sl_reader_destroy(r);
  }
}

TEST(packed_jpeg_decodes_within_bound_with_1_and_2_threads) {
  packed_matches_reader(FIX_JPEG);
}

TEST(decode_order_does_not_depend_on_threads_or_window) {
  const char *slr = tmppath("order.slr");
  pack(folder(FIX_JPEG), slr);
  pass_bytes ref = {0};
  uint32_t threads[] = {1, 2, 3, 4, 2};
  uint32_t windows[] = {0, 2, 3, 64, 0};
  for (int k = 0; k < 5; k++) {
    sl_reader *r;
    ASSERT_OK(sl_open(slr, NULL, &r));
    sl_image_opts o = image_opts(threads[k]);
    o.window = windows[k];
    ASSERT_OK(sl_decode_image(r, &o, &r));
    /* Two passes: reset restarts the workers. */
    for (int pass = 0; pass < 2; pass++) {
      pass_bytes pb = drain(r);
      if (!ref.v)
        ref = pb;
      else {
        assert_same(&ref, &pb);
        free(pb.v);
      }
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
  }
  /* Unordered: the same samples, in some order. */
  sl_reader *r;
  ASSERT_OK(sl_open(slr, NULL, &r));
  sl_image_opts o = image_opts(3);
  o.unordered = 1;
  ASSERT_OK(sl_decode_image(r, &o, &r));
  pass_bytes un = drain(r);
  ASSERT_EQ(un.samples, ref.samples);
  ASSERT_EQ(un.n, ref.n);
  free(un.v);
  sl_reader_destroy(r);
  free(ref.v);
}

TEST(destroy_mid_pass_joins_the_workers) {
  const char *slr = tmppath("mid.slr");
  pack(folder(FIX_PNG), slr);
  for (int k = 0; k < 20; k++) {
    sl_reader *r;
    ASSERT_OK(sl_open(slr, NULL, &r));
    sl_image_opts o = image_opts(3);
    ASSERT_OK(sl_decode_image(r, &o, &r));
    for (int i = 0; i < k; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    if (k % 2) ASSERT_OK(sl_reader_reset(r));
    sl_reader_destroy(r);
  }
}

/* Decoded images come from a buffer pool that reuses released buffers
 * (core/buffer_pool.c): images the consumer still holds are never reused,
 * and they outlive the reader. */
TEST(held_images_stay_intact_and_outlive_their_reader) {
  const char *dir = folder(FIX_PNG);
  for (uint32_t threads = 1; threads <= 2; threads++) {
    sl_image_opts o = image_opts(threads);
    sl_reader *r;
    ASSERT_OK(sl_image_reader(dir, &o, &r));
    sl_sample *kept[10];
    for (int k = 0; k < 10; k++)
      ASSERT_OK(sl_reader_next(r, &kept[k]));
    for (int k = 10; k < 110; k++) { /* released: their buffers recycle */
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    sl_reader_destroy(r);
    for (int k = 0; k < 10; k++) {
      const sl_tensor *img = sl_sample_field(kept[k], "image");
      ASSERT_EQ(memcmp(img->data, g_data.pixels + g_order[k] * 784, 784), 0);
      sl_sample_release(kept[k]);
    }
  }
}

/* --- channels, resize ---------------------------------------------------- */

TEST(gray_and_rgb_channels) {
  /* A 2 x 3 RGB image, and its gray version. */
  const uint8_t rgb[18] = {255, 0,  0,  0,  255, 0,  0,   0,   255,
                           10,  20, 30, 90, 90,  90, 200, 100, 50};
  size_t n;
  uint8_t *png = fix_png_encode(rgb, 2, 3, 3, &n);
  ASSERT_NOT_NULL(png);
  ASSERT_EQ(sl_image_sniff(png, n), SL_IMAGE_PNG);
  sl_tensor t;
  ASSERT_OK(sl_image_decode(png, n, NULL, "rgb.png", &t));
  ASSERT_EQ(t.shape[0], 2);
  ASSERT_EQ(t.shape[1], 3);
  ASSERT_EQ(t.shape[2], 3);
  ASSERT_TRUE(memcmp(t.data, rgb, 18) == 0);
  sl_tensor_clear(&t);
  sl_image_shape gray = {1, 0, 0, SL_RESIZE_NONE};
  ASSERT_OK(sl_image_decode(png, n, &gray, "rgb.png", &t));
  ASSERT_EQ(t.shape[2], 1);
  const uint8_t *g = t.data;
  for (int p = 0; p < 6; p++) {
    unsigned want = (299u * rgb[3 * p] + 587u * rgb[3 * p + 1] +
                     114u * rgb[3 * p + 2] + 500u) /
                    1000u;
    ASSERT_EQ(g[p], want);
  }
  ASSERT_EQ(g[0], 76);  /* red */
  ASSERT_EQ(g[1], 150); /* green */
  ASSERT_EQ(g[4], 90);  /* gray stays itself */
  sl_tensor_clear(&t);
  free(png);
  /* A gray JPEG asked as RGB repeats its value; as stored it is 1 channel. */
  need_data();
  uint8_t *jpg = fix_jpeg_encode(g_data.pixels, 28, 28, 1, 95, &n);
  ASSERT_EQ(sl_image_sniff(jpg, n), SL_IMAGE_JPEG);
  sl_tensor a, b;
  ASSERT_OK(sl_image_decode(jpg, n, NULL, "gray.jpg", &a));
  ASSERT_EQ(a.shape[2], 1);
  sl_image_shape rgb3 = {3, 0, 0, SL_RESIZE_NONE};
  ASSERT_OK(sl_image_decode(jpg, n, &rgb3, "gray.jpg", &b));
  ASSERT_EQ(b.shape[2], 3);
  for (int p = 0; p < 784; p++)
    for (int c = 0; c < 3; c++)
      ASSERT_EQ(((uint8_t *)b.data)[3 * p + c], ((uint8_t *)a.data)[p]);
  sl_tensor_clear(&a);
  sl_tensor_clear(&b);
  free(jpg);
  /* A color JPEG (4:4:4) decodes within the bound on each channel. */
  uint8_t px[28 * 28 * 3];
  for (int p = 0; p < 784; p++) {
    px[3 * p] = g_data.pixels[p];
    px[3 * p + 1] = (uint8_t)(255 - g_data.pixels[p]);
    px[3 * p + 2] = (uint8_t)(g_data.pixels[p] / 2);
  }
  jpg = fix_jpeg_encode(px, 28, 28, 3, 95, &n);
  ASSERT_OK(sl_image_decode(jpg, n, NULL, "rgb.jpg", &a));
  ASSERT_EQ(a.shape[2], 3);
  uint64_t sum = 0;
  for (int k = 0; k < 784 * 3; k++)
    sum += (uint64_t)abs((int)((uint8_t *)a.data)[k] - (int)px[k]);
  ASSERT_LE(sum, 784 * 3 * 3); /* mean <= 3 on color */
  sl_tensor_clear(&a);
  free(jpg);
}

static void make_u8(sl_tensor *t, int h, int w, int c, const uint8_t *v) {
  int64_t shape[3] = {h, w, c};
  ASSERT_OK(sl_tensor_alloc(t, SL_U8, 3, shape));
  memcpy(t->data, v, (size_t)(h * w * c));
}

TEST(resize_nearest_and_bilinear_exact_values) {
  const uint8_t src[4] = {0, 100, 200, 40}; /* 2 x 2 gray */
  sl_tensor in, out;
  make_u8(&in, 2, 2, 1, src);
  /* Bilinear 2x2 -> 4x4, centres aligned: taps at -0.25 (clamped), 0.25,
   * 0.75, 1.25 (clamped) along each axis. */
  static const uint8_t bil[16] = {0,   25,  75, 100, //
                                  50,  59,  76, 85,  //
                                  150, 126, 79, 55,  //
                                  200, 160, 80, 40};
  ASSERT_OK(sl_image_resize(&in, 4, 4, SL_RESIZE_BILINEAR, &out));
  for (int k = 0; k < 16; k++)
    if (((uint8_t *)out.data)[k] != bil[k])
      test_fail(__FILE__, __LINE__, "bilinear[%d] = %d, want %d", k,
                ((uint8_t *)out.data)[k], bil[k]);
  sl_tensor_clear(&out);
  /* Nearest 2x2 -> 3x3: source (2y + 1) * 2 / 6 = 0, 1, 1. */
  static const uint8_t near3[9] = {0, 100, 100, 200, 40, 40, 200, 40, 40};
  ASSERT_OK(sl_image_resize(&in, 3, 3, SL_RESIZE_NEAREST, &out));
  ASSERT_TRUE(memcmp(out.data, near3, 9) == 0);
  sl_tensor_clear(&out);
  sl_tensor_clear(&in);
  /* Downscaling 4x4 -> 2x2: nearest takes rows/cols 1 and 3; bilinear
   * averages each 2x2 block (taps at 0.5 and 2.5). */
  uint8_t v[16];
  for (int k = 0; k < 16; k++)
    v[k] = (uint8_t)(k * 10);
  make_u8(&in, 4, 4, 1, v);
  ASSERT_OK(sl_image_resize(&in, 2, 2, SL_RESIZE_NEAREST, &out));
  static const uint8_t near2[4] = {50, 70, 130, 150};
  ASSERT_TRUE(memcmp(out.data, near2, 4) == 0);
  sl_tensor_clear(&out);
  ASSERT_OK(sl_image_resize(&in, 2, 2, SL_RESIZE_BILINEAR, &out));
  /* block means: (0+10+40+50)/4 = 25, 45, 105, 125 */
  static const uint8_t bil2[4] = {25, 45, 105, 125};
  ASSERT_TRUE(memcmp(out.data, bil2, 4) == 0);
  sl_tensor_clear(&out);
  /* Multi-channel: channels are resized independently. */
  sl_tensor_clear(&in);
  const uint8_t rgb[12] = {0, 10, 20, 100, 110, 120, 200, 210, 220, 40, 50, 60};
  make_u8(&in, 2, 2, 3, rgb);
  ASSERT_OK(sl_image_resize(&in, 4, 4, SL_RESIZE_BILINEAR, &out));
  for (int k = 0; k < 16; k++)
    for (int c = 0; c < 3; c++)
      ASSERT_EQ(((uint8_t *)out.data)[3 * k + c], bil[k] + 10 * c);
  sl_tensor_clear(&out);
  /* Errors. */
  ASSERT_RC(sl_image_resize(&in, 0, 4, SL_RESIZE_BILINEAR, &out), SL_EINVAL);
  ASSERT_RC(sl_image_resize(&in, 4, 4, SL_RESIZE_NONE, &out), SL_EINVAL);
  sl_tensor_clear(&in);
  int64_t shape[2] = {2, 2};
  ASSERT_OK(sl_tensor_alloc(&in, SL_U8, 2, shape));
  ASSERT_RC(sl_image_resize(&in, 4, 4, SL_RESIZE_NEAREST, &out), SL_ESHAPE);
  sl_tensor_clear(&in);
}

TEST(reader_resizes_to_a_fixed_size) {
  const char *dir = folder(FIX_PNG);
  sl_image_opts o = image_opts(2);
  o.shape = (sl_image_shape){1, 14, 14, SL_RESIZE_NEAREST};
  sl_reader *r;
  ASSERT_OK(sl_image_reader(dir, &o, &r));
  char desc[128];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(r), desc, sizeof desc),
               "{image: u8[14,14,1], label: i64[]}");
  for (size_t k = 0; k < 20; k++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    const uint8_t *got = sl_sample_field(s, "image")->data;
    const uint8_t *src = g_data.pixels + g_order[k] * 784;
    for (int y = 0; y < 14; y++)
      for (int x = 0; x < 14; x++)
        ASSERT_EQ(got[y * 14 + x], src[(2 * y + 1) * 28 + 2 * x + 1]);
    sl_sample_release(s);
  }
  sl_reader_destroy(r);
  /* Bilinear to 32 x 32 (upscaling) gives the shape asked. */
  o.shape = (sl_image_shape){3, 32, 32, SL_RESIZE_BILINEAR};
  ASSERT_OK(sl_image_reader(dir, &o, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  const sl_tensor *t = sl_sample_field(s, "image");
  ASSERT_EQ(t->shape[0], 32);
  ASSERT_EQ(t->shape[1], 32);
  ASSERT_EQ(t->shape[2], 3);
  sl_sample_release(s);
  sl_reader_destroy(r);
}

TEST(wrong_declared_shape_is_eshape) {
  const char *dir = folder(FIX_PNG);
  sl_image_opts o = image_opts(2);
  o.shape.height = 32;
  o.shape.width = 32;
  sl_reader *r;
  ASSERT_OK(sl_image_reader(dir, &o, &r));
  char desc[128];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(r), desc, sizeof desc),
               "{image: u8[32,32,-1], label: i64[]}");
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "image: ");
  ASSERT_CONTAINS(sl_last_error(), "/Ankle_boot/");
  ASSERT_CONTAINS(sl_last_error(), "the image is 28x28 (height x width), the "
                                   "declared shape is 32x32");
  sl_reader_destroy(r);
  /* Only the height declared: checked alone. */
  o.shape.width = 0;
  o.shape.height = 28;
  ASSERT_OK(sl_image_reader(dir, &o, &r));
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  sl_reader_destroy(r);
  /* Bad requests. */
  o.shape = (sl_image_shape){2, 0, 0, SL_RESIZE_NONE};
  ASSERT_RC(sl_image_reader(dir, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
               "image: channels must be 0 (as stored), 1 (gray) or 3 (RGB), "
               "not 2");
  o.shape = (sl_image_shape){1, 10, 0, SL_RESIZE_BILINEAR};
  ASSERT_RC(sl_image_reader(dir, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "resizing needs both a height and a width");
}

/* --- crop and flip
 * ------------------------------------------------------------ */

/* One pass of decode (threads) + crop/flip (seed, epoch). */
static pass_bytes crop_pass(const char *slr, uint32_t threads, uint64_t seed,
                            uint64_t epoch) {
  sl_reader *r;
  ASSERT_OK(sl_open(slr, NULL, &r));
  sl_image_opts o = image_opts(threads);
  ASSERT_OK(sl_decode_image(r, &o, &r));
  sl_crop_flip_opts c = SL_CROP_FLIP_OPTS_INIT;
  c.height = 20;
  c.width = 24;
  c.seed = seed;
  c.epoch = epoch;
  ASSERT_OK(sl_random_crop_flip(r, &c, &r));
  pass_bytes pb = drain(r);
  sl_reader_destroy(r);
  return pb;
}

TEST(crop_flip_is_deterministic_across_threads_and_runs) {
  const char *slr = tmppath("crop.slr");
  pack(folder(FIX_PNG), slr);
  pass_bytes a = crop_pass(slr, 1, 7, 0), b = crop_pass(slr, 2, 7, 0),
             c = crop_pass(slr, 3, 7, 0);
  assert_same(&a, &b);
  assert_same(&a, &c);
  /* Another seed or epoch: other crops. */
  pass_bytes d = crop_pass(slr, 2, 8, 0), e = crop_pass(slr, 2, 7, 1);
  ASSERT_TRUE(d.n == a.n && memcmp(d.v, a.v, a.n) != 0);
  ASSERT_TRUE(e.n == a.n && memcmp(e.v, a.v, a.n) != 0);
  /* A reset moves to the next epoch: pass 1 of epoch 0 == pass 0 of
   * epoch 1. */
  sl_reader *r;
  ASSERT_OK(sl_open(slr, NULL, &r));
  sl_image_opts o = image_opts(2);
  ASSERT_OK(sl_decode_image(r, &o, &r));
  sl_crop_flip_opts co = SL_CROP_FLIP_OPTS_INIT;
  co.height = 20;
  co.width = 24;
  co.seed = 7;
  ASSERT_OK(sl_random_crop_flip(r, &co, &r));
  char desc[128];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(r), desc, sizeof desc),
               "{image: u8[20,24,-1], label: i64[]}");
  pass_bytes p0 = drain(r);
  ASSERT_OK(sl_reader_reset(r));
  pass_bytes p1 = drain(r);
  assert_same(&p0, &a);
  assert_same(&p1, &e);
  sl_reader_destroy(r);
  free(p0.v);
  free(p1.v);
  free(a.v);
  free(b.v);
  free(c.v);
  free(d.v);
  free(e.v);
}

TEST(crop_flip_output_is_a_window_of_the_input) {
  const char *slr = tmppath("crop2.slr");
  pack(folder(FIX_PNG), slr);
  sl_reader *r;
  ASSERT_OK(sl_open(slr, NULL, &r));
  ASSERT_OK(sl_decode_image(r, NULL, &r));
  sl_crop_flip_opts co = SL_CROP_FLIP_OPTS_INIT;
  co.height = 20;
  co.width = 24;
  co.seed = 3;
  ASSERT_OK(sl_random_crop_flip(r, &co, &r));
  int flips = 0, tops[9] = {0};
  for (size_t k = 0; k < N_IMAGES; k++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    const uint8_t *got = sl_sample_field(s, "image")->data;
    const uint8_t *src = g_data.pixels + g_order[k] * 784;
    int matches = 0;
    for (int top = 0; top <= 8; top++)
      for (int left = 0; left <= 4; left++)
        for (int flip = 0; flip < 2; flip++) {
          bool ok = true;
          for (int y = 0; y < 20 && ok; y++)
            for (int x = 0; x < 24 && ok; x++) {
              int sx = flip ? left + 23 - x : left + x;
              ok = got[y * 24 + x] == src[(top + y) * 28 + sx];
            }
          if (ok) {
            matches++;
            flips += flip;
            tops[top]++;
          }
        }
    ASSERT_GE(matches, 1);
    sl_sample_release(s);
  }
  /* Both flips and several offsets occur. */
  ASSERT_GE(flips, 50);
  int used = 0;
  for (int t = 0; t < 9; t++)
    used += tops[t] > 0;
  ASSERT_GE(used, 5);
  sl_reader_destroy(r);
}

/* --- failures ----------------------------------------------------------------
 */

/* A folder "bad-<tag>" of `good` PNG images in class "a" plus files given
 * as (name, bytes) in class "b". */
static const char *bad_folder(const char *tag, int good, const char **names,
                              void **data, const size_t *sizes, int nbad) {
  need_data();
  char dirname[64];
  snprintf(dirname, sizeof dirname, "bad-%s", tag);
  static char dir[1100]; /* one bad folder per test */
  snprintf(dir, sizeof dir, "%s", tmppath(dirname));
  char p[1100];
  ASSERT_EQ(mkdir(dir, 0777), 0);
  snprintf(p, sizeof p, "%s/a", dir);
  ASSERT_EQ(mkdir(p, 0777), 0);
  snprintf(p, sizeof p, "%s/b", dir);
  ASSERT_EQ(mkdir(p, 0777), 0);
  for (int i = 0; i < good; i++) {
    size_t n;
    void *png = fix_png_encode(g_data.pixels + (size_t)i * 784, 28, 28, 1, &n);
    snprintf(p, sizeof p, "%s/a/%03d.png", dir, i);
    test_write_file(p, png, n);
    free(png);
  }
  for (int i = 0; i < nbad; i++) {
    snprintf(p, sizeof p, "%s/b/%s", dir, names[i]);
    test_write_file(p, data[i], sizes[i]);
  }
  return dir;
}

typedef struct bad_set {
  const char *names[4];
  void *data[4];
  size_t sizes[4];
} bad_set;

/* Truncated JPEG, truncated PNG, a PNG with a damaged IDAT (CRC), and a
 * text file named .jpg. */
static bad_set make_bad_set(void) {
  need_data();
  bad_set b;
  size_t n;
  uint8_t *jpg = fix_jpeg_encode(g_data.pixels, 28, 28, 1, 95, &n);
  b.names[0] = "0-truncated.jpg";
  b.data[0] = jpg;
  b.sizes[0] = n / 2;
  uint8_t *png = fix_png_encode(g_data.pixels + 784, 28, 28, 1, &n);
  b.names[1] = "1-truncated.png";
  b.data[1] = png;
  b.sizes[1] = n - 30;
  uint8_t *png2 = fix_png_encode(g_data.pixels + 2 * 784, 28, 28, 1, &n);
  png2[n / 2] ^= 0x55; /* inside IDAT: its CRC fails */
  b.names[2] = "2-damaged.png";
  b.data[2] = png2;
  b.sizes[2] = n;
  b.names[3] = "3-not-an-image.jpg";
  b.data[3] = strdup("hello, I am text\n");
  b.sizes[3] = strlen(b.data[3]);
  return b;
}

static void free_bad_set(bad_set *b) {
  for (int i = 0; i < 4; i++)
    free(b->data[i]);
}

/* The reader on a folder with one bad file after `good` good ones: the
 * good ones, then the error. */
static void expect_bad_file(int which, int rc_want, const char *decoder_msg) {
  bad_set b = make_bad_set();
  char tag[16];
  snprintf(tag, sizeof tag, "one%d", which);
  const char *dir =
      bad_folder(tag, 5, &b.names[which], &b.data[which], &b.sizes[which], 1);
  for (uint32_t threads = 1; threads <= 2; threads++) {
    sl_image_opts o = image_opts(threads);
    sl_reader *r;
    ASSERT_OK(sl_image_reader(dir, &o, &r));
    for (int i = 0; i < 5; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), rc_want);
    char want[1200];
    snprintf(want, sizeof want, "image: %s/b/%s: %s", dir, b.names[which],
             decoder_msg);
    ASSERT_CONTAINS(sl_last_error(), want);
    /* Sticky. */
    ASSERT_RC(sl_reader_next(r, &s), rc_want);
    sl_reader_destroy(r);
  }
  free_bad_set(&b);
}

TEST(truncated_jpeg_names_the_file_and_the_decoder_message) {
  expect_bad_file(0, SL_ECORRUPT, "jpeg: Premature end of JPEG file");
}

TEST(truncated_png_names_the_file_and_the_decoder_message) {
  expect_bad_file(1, SL_ECORRUPT, "png: ");
}

TEST(damaged_png_names_the_file_and_the_decoder_message) {
  expect_bad_file(2, SL_ECORRUPT, "png: ");
}

TEST(non_image_file_is_ecorrupt) {
  expect_bad_file(3, SL_ECORRUPT,
                  "not a JPEG or PNG image (17 bytes, starting 68 65 6c 6c");
}

/* Ordered or not, at 1 to 4 threads, the count is exact (taken on the
 * consumer's thread, in delivery order). */
TEST(skip_policy_counts_and_caps_bad_images) {
  bad_set b = make_bad_set();
  const char *dir = bad_folder("skip", 6, b.names, b.data, b.sizes, 4);
  for (int k = 0; k < 8; k++) {
    uint32_t threads = 1 + (uint32_t)k % 4;
    sl_image_opts o = image_opts(threads);
    o.unordered = k >= 4;
    o.policy = SL_CORRUPT_SKIP_CHUNK;
    o.max_bad = 4;
    sl_reader *r;
    ASSERT_OK(sl_image_reader(dir, &o, &r));
    pass_bytes pb = drain(r);
    ASSERT_EQ(pb.samples, 6);
    free(pb.v);
    /* Counted: 10 in, 6 out. */
    sl_stage_stats st[4];
    size_t n;
    ASSERT_OK(sl_reader_stats(r, st, 4, &n));
    ASSERT_EQ(n, 2);
    ASSERT_STREQ(st[0].name, "image");
    ASSERT_EQ(st[0].samples_out, 6);
    ASSERT_EQ(st[1].samples_out, 10);
    /* Again after reset: the count is per pass. */
    ASSERT_OK(sl_reader_reset(r));
    pb = drain(r);
    ASSERT_EQ(pb.samples, 6);
    free(pb.v);
    sl_reader_destroy(r);
    /* Past the cap: SL_ECORRUPT naming the count and the last failure. */
    o.max_bad = 3;
    ASSERT_OK(sl_image_reader(dir, &o, &r));
    sl_sample *s;
    int rc, got = 0;
    while ((rc = sl_reader_next(r, &s)) == SL_OK) {
      got++;
      sl_sample_release(s);
    }
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(),
                    "image: 4 images failed to decode in this pass, more "
                    "than max_bad (3); the last: image: ");
    if (!o.unordered) { /* in order: after every good one, at the last */
      ASSERT_EQ(got, 6);
      ASSERT_CONTAINS(sl_last_error(), "3-not-an-image.jpg");
    }
    sl_reader_destroy(r);
  }
  free_bad_set(&b);
}

TEST(corrupt_record_in_slr_names_the_sample) {
  bad_set b = make_bad_set();
  /* Only the truncated files: pack refuses the text file (see below). */
  const char *dir = bad_folder("slr", 3, b.names, b.data, b.sizes, 2);
  const char *slr = tmppath("bad.slr");
  pack(dir, slr);
  sl_reader *r;
  ASSERT_OK(sl_open(slr, NULL, &r));
  sl_image_opts o = image_opts(2);
  ASSERT_OK(sl_decode_image(r, &o, &r));
  for (int i = 0; i < 3; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(),
               "decode_image: sample 3 of the pass (field 'image'): jpeg: "
               "Premature end of JPEG file");
  sl_reader_destroy(r);
  /* Skipped: counted and capped like corrupt chunks. */
  ASSERT_OK(sl_open(slr, NULL, &r));
  o.policy = SL_CORRUPT_SKIP_CHUNK;
  o.max_bad = 1;
  ASSERT_OK(sl_decode_image(r, &o, &r));
  int rc, got = 0;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    got++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_ECORRUPT);
  ASSERT_EQ(got, 3);
  ASSERT_CONTAINS(sl_last_error(),
                  "decode_image: 2 images failed to decode in this pass, more "
                  "than max_bad (1); the last: decode_image: sample 4 of the "
                  "pass (field 'image'): png: ");
  sl_reader_destroy(r);
  /* The text file named .jpg: pack fails naming it, leaving nothing. */
  char p[1100];
  snprintf(p, sizeof p, "%s/b/%s", dir, b.names[3]);
  test_write_file(p, b.data[3], b.sizes[3]);
  const char *slr2 = tmppath("bad2.slr");
  sl__pack_opts po = {0};
  ASSERT_RC(sl__pack_images(dir, slr2, &po, NULL), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "3-not-an-image.jpg: not a JPEG or PNG");
  ASSERT_TRUE(access(slr2, F_OK) != 0);
  free_bad_set(&b);
}

/* An image file larger than an encoded image may be (SL__IMAGE_MAX_BYTES)
 * is refused by both image packers, naming it, before it is read whole
 * (one reader, pack_images.c); a missing folder entry's open error names
 * it too. */
TEST(both_image_packers_refuse_an_oversized_file_naming_it) {
  static char dir[1100];
  snprintf(dir, sizeof dir, "%s", tmppath("oversized"));
  ASSERT_EQ(mkdir(dir, 0777), 0);
  char p[1200];
  snprintf(p, sizeof p, "%s/a", dir);
  ASSERT_EQ(mkdir(p, 0777), 0);
  snprintf(p, sizeof p, "%s/a/huge.jpg", dir);
  FILE *f = fopen(p, "wb");
  ASSERT_TRUE(f != NULL);
  static const unsigned char soi[] = {0xFF, 0xD8, 0xFF, 0xE0};
  ASSERT_EQ(fwrite(soi, 1, sizeof soi, f), sizeof soi);
  fclose(f);
  /* sparse: no disk, but the reader sees every byte */
  ASSERT_EQ(truncate(p, (off_t)SL__IMAGE_MAX_BYTES + 1), 0);
  sl__pack_opts po = {0};
  const char *slr = tmppath("oversized.slr");
  ASSERT_RC(sl__pack_images(dir, slr, &po, NULL), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "huge.jpg: more than the 256 MiB an "
                                   "encoded image may take");
  ASSERT_TRUE(access(slr, F_OK) != 0);
  const char *tar = tmppath("oversized.tar");
  ASSERT_RC(sl__pack_images_wds(dir, tar, &po, NULL), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "huge.jpg: more than the 256 MiB an "
                                   "encoded image may take");
  ASSERT_TRUE(access(tar, F_OK) != 0);
  unlink(p);
}

/* --- the skip policy after a JPEG cut inside its headers ---------------------
 * Issue 13 item 4: a JPEG cut to 300 bytes (inside its Huffman tables, before
 * any scan) made the worker's TurboJPEG handle fail the next good JPEG too,
 * with the broken file's message.  Every good image must come through, and
 * each counted failure must name the broken file. */

#define CUT_BYTES 300

/* A flat folder `tag` of JPEGs named "<k>.jpg" for k in [0, n): file k is
 * Fashion-MNIST image 20 + k, cut to CUT_BYTES when cut[k]; packed into
 * *slr ("<tag>.slr") too. */
static const char *cut_jpeg_folder(const char *tag, int n, const bool *cut,
                                   const char **slr) {
  need_data();
  static char dir[1100];
  snprintf(dir, sizeof dir, "%s", tmppath(tag));
  ASSERT_EQ(mkdir(dir, 0777), 0);
  for (int k = 0; k < n; k++) {
    size_t len;
    uint8_t *jpg =
        fix_jpeg_encode(g_data.pixels + (size_t)(20 + k) * 784, 28, 28, 1, 95,
                        &len);
    ASSERT_NOT_NULL(jpg);
    if (cut[k]) {
      ASSERT_TRUE(len > CUT_BYTES);
      /* The cut is inside the headers: no start of scan before it. */
      for (size_t i = 0; i + 1 < CUT_BYTES; i++)
        ASSERT_TRUE(!(jpg[i] == 0xFF && jpg[i + 1] == 0xDA));
      len = CUT_BYTES;
    }
    char p[1200];
    snprintf(p, sizeof p, "%s/%d.jpg", dir, k);
    test_write_file(p, jpg, len);
    free(jpg);
  }
  char name[80];
  snprintf(name, sizeof name, "%s.slr", tag);
  *slr = tmppath(name);
  pack(dir, *slr);
  return dir;
}

/* The image reader over `dir`, or when `slr` is given, that file (packed
 * from `dir`) + decode_image, with `threads`; the skip policy with
 * `max_bad` when `skip`. */
static sl_reader *cut_reader(const char *dir, const char *slr,
                             uint32_t threads, bool skip, uint32_t max_bad) {
  sl_image_opts o = image_opts(threads);
  if (skip) o.policy = SL_CORRUPT_SKIP_CHUNK;
  o.max_bad = max_bad;
  sl_reader *r;
  if (slr) {
    ASSERT_OK(sl_open(slr, NULL, &r));
    ASSERT_OK(sl_decode_image(r, &o, &r));
  } else {
    ASSERT_OK(sl_image_reader(dir, &o, &r));
  }
  return r;
}

/* The next sample of `r` is file k of cut_jpeg_folder (within the JPEG
 * bounds of its source pixels). */
static void expect_jpeg_k(sl_reader *r, int k) {
  sl_sample *s;
  int rc = sl_reader_next(r, &s);
  if (rc != SL_OK)
    test_fail(__FILE__, __LINE__, "file %d.jpg: %s: %s", k, sl_err_name(rc),
              sl_last_error());
  const sl_tensor *img = sl_sample_field(s, "image");
  ASSERT_EQ(img->shape[0], 28);
  ASSERT_EQ(img->shape[1], 28);
  ASSERT_EQ(img->shape[2], 1);
  const uint8_t *got = img->data,
                *want = g_data.pixels + (size_t)(20 + k) * 784;
  uint64_t sum = 0;
  for (int p = 0; p < 784; p++) {
    int d = abs((int)got[p] - (int)want[p]);
    ASSERT_LE(d, JPEG_MAX_BOUND);
    sum += (uint64_t)d;
  }
  ASSERT_TRUE(sum / 784.0 <= 2 * JPEG_MAE_BOUND);
  sl_sample_release(s);
}

TEST(skip_policy_keeps_every_good_jpeg_after_a_cut_one) {
  /* 0.jpg cut, 1..4 good. */
  const bool cut[5] = {true, false, false, false, false};
  const char *slr;
  const char *dir = cut_jpeg_folder("cut-one", 5, cut, &slr);
  for (int packed = 0; packed <= 1; packed++)
    for (uint32_t threads = 1; threads <= 2; threads++) {
      sl_reader *r = cut_reader(dir, packed ? slr : NULL, threads, true, 0);
      for (int pass = 0; pass < 2; pass++) {
        for (int k = 1; k < 5; k++)
          expect_jpeg_k(r, k);
        sl_sample *s;
        ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
        /* Exactly one left out: 5 in, 4 out (a pass at a time). */
        sl_stage_stats st[4];
        size_t n;
        ASSERT_OK(sl_reader_stats(r, st, 4, &n));
        ASSERT_EQ(st[0].samples_out, 4 * (pass + 1));
        ASSERT_EQ(st[1].samples_out, 5 * (pass + 1));
        ASSERT_OK(sl_reader_reset(r));
      }
      sl_reader_destroy(r);
    }
}

TEST(skip_policy_names_each_cut_jpeg_it_counts) {
  /* 0.jpg and 3.jpg cut; with max_bad 1 the pass fails at 3.jpg, the
   * second failure, naming it, after 1.jpg and 2.jpg came through. */
  const bool cut[6] = {true, false, false, true, false, false};
  const char *slr;
  const char *dir = cut_jpeg_folder("cut-two", 6, cut, &slr);
  for (int packed = 0; packed <= 1; packed++)
    for (uint32_t threads = 1; threads <= 4; threads++) {
      sl_reader *r = cut_reader(dir, packed ? slr : NULL, threads, true, 1);
      expect_jpeg_k(r, 1);
      expect_jpeg_k(r, 2);
      sl_sample *s;
      ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
      char want[1400];
      if (packed)
        snprintf(want, sizeof want,
                 "decode_image: 2 images failed to decode in this pass, more "
                 "than max_bad (1); the last: decode_image: sample 3 of the "
                 "pass (field 'image'): jpeg: ");
      else
        snprintf(want, sizeof want,
                 "image: 2 images failed to decode in this pass, more than "
                 "max_bad (1); the last: image: %s/3.jpg: jpeg: ",
                 dir);
      ASSERT_CONTAINS(sl_last_error(), want);
      sl_reader_destroy(r);
      /* Policy fail, through random_crop_flip: the decode error passes
       * unchanged and names 0.jpg (record 0). */
      r = cut_reader(dir, packed ? slr : NULL, threads, false, 0);
      sl_crop_flip_opts co = SL_CROP_FLIP_OPTS_INIT;
      co.height = co.width = 20;
      ASSERT_OK(sl_random_crop_flip(r, &co, &r));
      ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
      if (packed)
        ASSERT_CONTAINS(sl_last_error(),
                        "decode_image: sample 0 of the pass (field 'image'): "
                        "jpeg: ");
      else {
        snprintf(want, sizeof want, "image: %s/0.jpg: jpeg: ", dir);
        ASSERT_CONTAINS(sl_last_error(), want);
      }
      sl_reader_destroy(r);
    }
}

TEST(folder_errors) {
  sl_reader *r;
  /* Empty folder. */
  const char *empty = tmppath("empty");
  ASSERT_EQ(mkdir(empty, 0777), 0);
  ASSERT_RC(sl_image_reader(empty, NULL, &r), SL_EINVAL);
  char want[1200];
  snprintf(want, sizeof want,
           "image: %s: no images (files named *.jpg, *.jpeg or *.png)", empty);
  ASSERT_STREQ(sl_last_error(), want);
  ASSERT_NULL(r);
  /* Class folders without images: the same. */
  char p[1100];
  snprintf(p, sizeof p, "%s/cls", empty);
  ASSERT_EQ(mkdir(p, 0777), 0);
  ASSERT_RC(sl_image_reader(empty, NULL, &r), SL_EINVAL);
  /* Missing path. */
  ASSERT_RC(sl_image_reader(tmppath("nope"), NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "nope: No such file or directory");
  /* A stray image beside class folders. */
  need_data();
  size_t n;
  void *png = fix_png_encode(g_data.pixels, 28, 28, 1, &n);
  snprintf(p, sizeof p, "%s/cls/x.png", empty);
  test_write_file(p, png, n);
  snprintf(p, sizeof p, "%s/stray.png", empty);
  test_write_file(p, png, n);
  ASSERT_RC(sl_image_reader(empty, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "stray.png is not inside a class folder");
  unlink(p);
  /* Other files are ignored; a nested folder counts for its class. */
  snprintf(p, sizeof p, "%s/cls/README.txt", empty);
  test_write_file(p, "hi", 2);
  snprintf(p, sizeof p, "%s/cls/deeper", empty);
  ASSERT_EQ(mkdir(p, 0777), 0);
  snprintf(p, sizeof p, "%s/cls/deeper/y.PNG", empty);
  test_write_file(p, png, n);
  ASSERT_OK(sl_image_reader(empty, NULL, &r));
  pass_bytes pb = drain(r);
  ASSERT_EQ(pb.samples, 2);
  free(pb.v);
  ASSERT_STREQ(sl_schema_meta(sl_reader_schema(r), "classes"), "cls");
  sl_reader_destroy(r);
  free(png);
  /* Bad options. */
  sl_image_opts o = image_opts(1);
  o.field = "pixels";
  ASSERT_RC(sl_image_reader(empty, &o, &r), SL_EINVAL);
  o = image_opts(1);
  o.size = 0;
  ASSERT_RC(sl_image_reader(empty, &o, &r), SL_EINVAL);
  ASSERT_RC(sl_image_reader(NULL, NULL, &r), SL_EINVAL);
}

TEST(decode_image_argument_errors) {
  sl_reader *r;
  /* No such field, wrong dtype. */
  ASSERT_OK(sl_reader_range(3, &r));
  ASSERT_RC(sl_decode_image(r, NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "decode_image: upstream has no field "
                                   "'image' (schema {i: i64[]})");
  ASSERT_OK(sl_reader_range(3, &r));
  sl_image_opts o = image_opts(1);
  o.field = "i";
  ASSERT_RC(sl_decode_image(r, &o, &r), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "field 'i' holds i64");
  ASSERT_RC(sl_decode_image(NULL, NULL, &r), SL_EINVAL);
  /* crop/flip needs an image. */
  ASSERT_OK(sl_reader_range(3, &r));
  ASSERT_RC(sl_random_crop_flip(r, NULL, &r), SL_EINVAL);
}

/* sl__image_field, the image field both decorators look up (issue 25):
 * its index, or SL_EINVAL naming the stage, the field and the schema. */
TEST(image_field_finds_the_field_or_names_the_stage) {
  sl_schema *sc = sl_schema_new();
  ASSERT_NOT_NULL(sc);
  ASSERT_OK(sl_schema_add(sc, "i", SL_I64, 0, NULL));
  ASSERT_OK(sl_schema_add(sc, "image", SL_BYTES, 0, NULL));
  ASSERT_EQ(sl__image_field("st", sc, "image"), 1);
  ASSERT_EQ(sl__image_field("st", sc, "i"), 0);
  ASSERT_RC(sl__image_field("st", sc, "pixels"), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "st: upstream has no field 'pixels' "
                                   "(schema {i: i64[], image: bytes[]})");
  sl_schema_release(sc);
}

/* Thread counts are the engine's (sl__threads_check): 1..1024, or
 * SLUICE_MAX_THREADS; 0 means 1. */
TEST(thread_counts_beyond_the_limit_are_refused) {
  const char *dir = folder(FIX_PNG);
  const char *slr = tmppath("limit.slr");
  pack(dir, slr);
  sl_image_opts o = image_opts((uint32_t)sl__thread_limit() + 1);
  sl_reader *r;
  ASSERT_RC(sl_image_reader(dir, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "image: threads = ");
  ASSERT_CONTAINS(sl_last_error(), "SLUICE_MAX_THREADS");
  ASSERT_NULL(r);
  ASSERT_OK(sl_open(slr, NULL, &r));
  ASSERT_RC(sl_decode_image(r, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "decode_image: threads = ");
  ASSERT_NULL(r);
  o = image_opts(UINT32_MAX);
  ASSERT_OK(sl_open(slr, NULL, &r));
  ASSERT_RC(sl_decode_image(r, &o, &r), SL_EINVAL);
  /* The limit itself is fine; so is 0 (one thread). */
  o = image_opts((uint32_t)sl__thread_advised());
  ASSERT_OK(sl_open(slr, NULL, &r));
  ASSERT_OK(sl_decode_image(r, &o, &r));
  pass_bytes pb = drain(r);
  ASSERT_EQ(pb.samples, N_IMAGES);
  free(pb.v);
  sl_reader_destroy(r);
  o = image_opts(1);
  o.window = 65537;
  ASSERT_OK(sl_open(slr, NULL, &r));
  ASSERT_RC(sl_decode_image(r, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
               "decode_image: window must be 0..65536 (got 65537)");
}

/* A worker thread that cannot start fails the stage (never fewer threads
 * than asked): the first next says so, naming the stage; the threads that
 * did start are joined (ASan's leak check), and after a reset the stage
 * starts again. */
TEST(a_thread_that_cannot_start_fails_the_stage) {
  const char *dir = folder(FIX_PNG);
  const char *slr = tmppath("nothread.slr");
  pack(dir, slr);
  for (int reader = 0; reader <= 1; reader++) {
    sl_image_opts o = image_opts(4);
    sl_reader *r;
    if (reader) {
      ASSERT_OK(sl_image_reader(dir, &o, &r));
    } else {
      ASSERT_OK(sl_open(slr, NULL, &r));
      ASSERT_OK(sl_decode_image(r, &o, &r));
    }
    sl__thread_fail_after(2); /* the 3rd start fails */
    sl_sample *s = NULL;
    int rc = sl_reader_next(r, &s);
    sl__thread_fail_after(-1);
    ASSERT_RC(rc, SL_ENOMEM);
    ASSERT_NULL(s);
    ASSERT_STREQ(sl_last_error(),
                 reader ? "image: cannot start a worker thread: Resource "
                          "temporarily unavailable"
                        : "decode_image: cannot start a worker thread: "
                          "Resource temporarily unavailable");
    ASSERT_RC(sl_reader_next(r, &s), SL_ENOMEM); /* sticky */
    ASSERT_OK(sl_reader_reset(r));
    pass_bytes pb = drain(r);
    ASSERT_EQ(pb.samples, N_IMAGES);
    free(pb.v);
    sl_reader_destroy(r);
  }
  ASSERT_TRUE(!test_leaked());
}

/* A PNG header declaring 60000 x 60000 RGB (10 GB decoded) in 57 bytes. */
TEST(huge_declared_size_is_refused_before_allocating) {
  uint8_t f[64];
  size_t k = 0;
  const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  memcpy(f, sig, 8);
  k = 8;
  const uint8_t ihdr[17] = {'I', 'H',  'D',  'R', 0, 0, 0xEA, 0x60, 0,
                            0,   0xEA, 0x60, 8,   2, 0, 0,    0};
  f[k++] = 0, f[k++] = 0, f[k++] = 0, f[k++] = 13;
  memcpy(f + k, ihdr, 17);
  uint32_t crc = (uint32_t)crc32(0, ihdr, 17);
  k += 17;
  f[k++] = (uint8_t)(crc >> 24), f[k++] = (uint8_t)(crc >> 16);
  f[k++] = (uint8_t)(crc >> 8), f[k++] = (uint8_t)crc;
  sl_tensor t;
  ASSERT_RC(sl_image_decode(f, k, NULL, "huge.png", &t), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(),
               "huge.png: 60000x60000x3 pixels are 10800000000 bytes, more "
               "than the 256 MiB an image may take");
  ASSERT_NULL(t.data);
  /* Nothing at all, and a bare JPEG marker. */
  ASSERT_RC(sl_image_decode("", 0, NULL, NULL, &t), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(),
               "image: not a JPEG or PNG image (0 bytes, starting an empty "
               "file)");
  const uint8_t soi[3] = {0xFF, 0xD8, 0xFF};
  ASSERT_RC(sl_image_decode(soi, 3, NULL, "soi.jpg", &t), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(),
               "soi.jpg: jpeg: no frame header (Premature end of JPEG file)");
  /* A JPEG cut inside its header: TurboJPEG's message. */
  need_data();
  size_t n;
  uint8_t *jpg = fix_jpeg_encode(g_data.pixels, 28, 28, 1, 95, &n);
  ASSERT_RC(sl_image_decode(jpg, 40, NULL, "cut.jpg", &t), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "cut.jpg: jpeg: ");
  free(jpg);
  ASSERT_RC(sl_image_decode(NULL, 5, NULL, NULL, &t), SL_EINVAL);
}

/* sl__pack_order: the identity, or the Fisher-Yates order pack images has
 * always written (xoshiro256** seeded by splitmix64 from the seed). */
TEST(pack_order_is_the_pinned_seeded_permutation) {
  sl__pack_opts po = {.shuffle = false, .seed = 7};
  uint64_t *a = sl__pack_order(5, &po);
  ASSERT_NOT_NULL(a);
  for (uint64_t i = 0; i < 5; i++)
    ASSERT_EQ(a[i], i);
  free(a);
  po.shuffle = true;
  size_t n = 1000;
  a = sl__pack_order(n, &po);
  ASSERT_NOT_NULL(a);
  uint64_t s[4], *want = malloc(n * sizeof *want);
  for (int j = 0; j < 4; j++)
    s[j] = sl__splitmix64_mix(7 + (uint64_t)(j + 1) * SL__RNG_GOLDEN);
  for (size_t i = 0; i < n; i++)
    want[i] = i;
  for (size_t i = n; i-- > 1;) {
    size_t j = (size_t)sl__rng_bounded(s, (uint64_t)i + 1);
    uint64_t t = want[i];
    want[i] = want[j];
    want[j] = t;
  }
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ(a[i], want[i]);
  free(want);
  free(a);
  a = sl__pack_order(0, NULL);
  ASSERT_NOT_NULL(a);
  free(a);
}
