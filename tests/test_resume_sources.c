/*
 * test_resume_sources.c - sl_reader_save / sl_reader_restore over the data
 * sources (docs/RESUME.md): the SLR file reader under each
 * corruption policy, idx, text (buffers and mmap), a glob opened by sl_open
 * (a chain of readers), the image folder reader and decode_image with 1, 2
 * and 4 threads (a state saved with 4 threads restored with 1), unordered
 * decode_image (each remaining image exactly once); states of other files
 * and of files changed since the save are refused with the chain left as it
 * was.  State sizes are printed.
 */
#include "resume_fixture.h"
#include "test.h"
#include "test_util.h"

#if SLUICE_WITH_IMAGES
#include "image_fixture.h"
#endif

#include <stdlib.h>
#include <unistd.h>

static const char *tmp(const char *name) {
  return test_tmppath("resume-src", name);
}

#define OK(expr)                                                               \
  do {                                                                         \
    if ((expr) != SL_OK) return NULL;                                          \
  } while (0)

/* --- helpers ----------------------------------------------------------------
 */

/* Saves `r`, printing the size under `what`; the caller frees *st. */
static size_t save_print(sl_reader *r, const char *what, void **st) {
  size_t len = 0;
  if (sl_reader_save(r, st, &len) != SL_OK)
    test_fail(__FILE__, __LINE__, "%s: save: %s", what, sl_last_error());
  printf("  state size: %-40s %5zu bytes\n", what, len);
  return len;
}

/* The digests of the rest of the current pass of r into v (cap entries). */
static size_t drain_digests(sl_reader *r, uint64_t *v, size_t cap) {
  size_t n = 0;
  for (;;) {
    sl_sample *s;
    int rc = sl_reader_next(r, &s);
    if (rc == SL_EOF) return n;
    if (rc != SL_OK) test_fail(__FILE__, __LINE__, "next: %s", sl_last_error());
    if (n == cap) test_fail(__FILE__, __LINE__, "more than %zu samples", cap);
    v[n++] = test_sample_digest(s);
    sl_sample_release(s);
  }
}

static size_t take_digests(sl_reader *r, uint64_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    sl_sample *s;
    if (sl_reader_next(r, &s) != SL_OK)
      test_fail(__FILE__, __LINE__, "next %zu: %s", i, sl_last_error());
    v[i] = test_sample_digest(s);
    sl_sample_release(s);
  }
  return n;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Fails unless a[0..n) and b[0..m) hold the same values, counted.  (Used
 * by the image tests only: unused in a build without images.) */
__attribute__((unused)) static void
same_multiset(uint64_t *a, size_t n, uint64_t *b, size_t m, const char *what) {
  if (n != m)
    test_fail(__FILE__, __LINE__, "%s: %zu samples, expected %zu", what, n, m);
  qsort(a, n, sizeof *a, cmp_u64);
  qsort(b, m, sizeof *b, cmp_u64);
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i])
      test_fail(__FILE__, __LINE__, "%s: the samples differ (sorted %zu)", what,
                i);
}

/* A state saved after `cut` samples of a chain made by `save_build`
 * restored into one made by `load_build` gives the rest of load_build's
 * uninterrupted pass (the same digests, in order). */
__attribute__((unused)) static void
cross_check(test_build_fn save_build, void *save_ud, test_build_fn load_build,
            void *load_ud, size_t cut, size_t total) {
  uint64_t *ref = calloc(total + 1, sizeof *ref);
  uint64_t *got = calloc(total + 1, sizeof *got);
  sl_reader *r = load_build(load_ud);
  if (!r) test_fail(__FILE__, __LINE__, "build: %s", sl_last_error());
  size_t n = drain_digests(r, ref, total + 1);
  sl_reader_destroy(r);
  if (n != total) test_fail(__FILE__, __LINE__, "%zu of %zu", n, total);
  r = save_build(save_ud);
  take_digests(r, got, cut);
  void *st;
  size_t len = 0;
  if (sl_reader_save(r, &st, &len) != SL_OK)
    test_fail(__FILE__, __LINE__, "save: %s", sl_last_error());
  sl_reader_destroy(r);
  r = load_build(load_ud);
  if (sl_reader_restore(r, st, len) != SL_OK)
    test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
  sl_free(st);
  size_t rest = drain_digests(r, got + cut, total + 1 - cut);
  sl_reader_destroy(r);
  if (cut + rest != total)
    test_fail(__FILE__, __LINE__, "cut %zu: %zu after, %zu in all", cut, rest,
              total);
  for (size_t i = 0; i < total; i++)
    if (got[i] != ref[i])
      test_fail(__FILE__, __LINE__, "cut %zu: sample %zu differs", cut, i);
  free(ref);
  free(got);
}

/* A refused restore leaves r as it was: it still yields `first` next (the
 * digest of the sample it would have given). */
static void refused(sl_reader *r, const void *st, size_t len, int want_rc,
                    const char *want_text, uint64_t first) {
  int rc = sl_reader_restore(r, st, len);
  if (rc != want_rc)
    test_fail(__FILE__, __LINE__, "restore gave %d (%s), expected %d", rc,
              sl_last_error(), want_rc);
  if (want_text && !strstr(sl_last_error(), want_text))
    test_fail(__FILE__, __LINE__, "message '%s' lacks '%s'", sl_last_error(),
              want_text);
  printf("  refused: %s\n", sl_last_error());
  uint64_t d;
  take_digests(r, &d, 1);
  if (d != first)
    test_fail(__FILE__, __LINE__, "the chain changed after a refused state");
}

/* --- SLR -------------------------------------------------------------------
 */

typedef struct slr_ud {
  const char *path;
  sl_corrupt_policy policy;
  int shuffle; /* > 0: shuffle(buffer) and batch(3) on top */
} slr_ud;

static sl_reader *build_slr(void *ud) {
  slr_ud *u = ud;
  sl_slr_open_opts o = {u->policy, 0, 0};
  sl_reader *r;
  OK(sl_slr_reader(u->path, &o, 0, UINT64_MAX, &r));
  if (u->shuffle) {
    OK(sl_shuffle(r, (size_t)u->shuffle, 7, &r));
    OK(sl_batch(r, 3, NULL, &r));
  }
  return r;
}

static const uint64_t k_cuts_100[] = {0,   1,   3,   8,   16,  50,  99,
                                      100, 101, 104, 157, 200, 250, 299};

TEST(slr_fail_policy) {
  const char *p = tmp("ids.slr");
  test_write_ids_slr(p, 0, 100, 8);
  slr_ud u = {p, SL_CORRUPT_FAIL, 0};
  test_resume_check(build_slr, &u, 3, k_cuts_100,
                    sizeof k_cuts_100 / sizeof *k_cuts_100, 256);
  sl_reader *r = build_slr(&u);
  void *st;
  save_print(r, "slr (policy fail)", &st);
  sl_free(st);
  sl_reader_destroy(r);
}

TEST(slr_under_shuffle_and_batch) {
  const char *p = tmp("ids-sh.slr");
  test_write_ids_slr(p, 0, 100, 8);
  slr_ud u = {p, SL_CORRUPT_FAIL, 16};
  const uint64_t cuts[] = {0, 1, 5, 17, 33, 34, 40, 66, 99};
  test_resume_check(build_slr, &u, 3, cuts, sizeof cuts / sizeof *cuts, 1024);
}

TEST(slr_skip_chunk_policy) {
  const char *p = tmp("ids-bad.slr");
  test_write_ids_slr(p, 0, 100, 8);
  fix_corrupt_chunk(p, 2); /* records 16..23 are skipped: 92 a pass */
  slr_ud u = {p, SL_CORRUPT_SKIP_CHUNK, 0};
  const uint64_t cuts[] = {0, 8, 15, 16, 17, 50, 91, 92, 93, 100, 183, 200};
  test_resume_check(build_slr, &u, 3, cuts, sizeof cuts / sizeof *cuts, 512);
  sl_reader *r = build_slr(&u);
  uint64_t d[20];
  take_digests(r, d, 20);
  void *st;
  save_print(r, "slr (skip_chunk, after a bad chunk)", &st);
  sl_free(st);
  sl_reader_destroy(r);
}

TEST(slr_refused) {
  const char *a = tmp("ids-a.slr"), *b = tmp("ids-b.slr");
  test_write_ids_slr(a, 0, 100, 8);
  test_write_ids_slr(b, 0, 100, 8);
  slr_ud ua = {a, SL_CORRUPT_FAIL, 0}, ub = {b, SL_CORRUPT_FAIL, 0};
  sl_reader *r = build_slr(&ua);
  uint64_t d[30];
  take_digests(r, d, 30);
  void *st;
  size_t len = save_print(r, "slr", &st);
  sl_reader_destroy(r);
  /* Another file. */
  r = build_slr(&ub);
  refused(r, st, len, SL_EINVAL, "ids-b.slr", d[0]);
  sl_reader_destroy(r);
  /* Another policy. */
  slr_ud us = {a, SL_CORRUPT_SKIP_CHUNK, 0};
  r = build_slr(&us);
  refused(r, st, len, SL_EINVAL, "skip_chunk", d[0]);
  sl_reader_destroy(r);
  /* The file rewritten with fewer records, then with other contents. */
  test_write_ids_slr(a, 0, 90, 8);
  r = build_slr(&ua);
  refused(r, st, len, SL_ECORRUPT, "ids-a.slr", d[0]);
  sl_reader_destroy(r);
  test_write_ids_slr(a, 1000, 100, 8);
  r = build_slr(&ua);
  uint64_t other;
  sl_reader *r2 = build_slr(&ua);
  take_digests(r2, &other, 1);
  sl_reader_destroy(r2);
  refused(r, st, len, SL_ECORRUPT, "changed", other);
  sl_reader_destroy(r);
  sl_free(st);
}

/* --- sl_open over a glob: a chain of readers ---------------------------------
 */

static sl_reader *build_glob(void *ud) {
  sl_reader *r;
  OK(sl_open((const char *)ud, NULL, &r));
  return r;
}

TEST(open_glob_chain) {
  test_write_ids_slr(tmp("part-0.slr"), 0, 40, 8);
  test_write_ids_slr(tmp("part-1.slr"), 40, 30, 8);
  test_write_ids_slr(tmp("part-2.slr"), 70, 30, 8);
  char pattern[1024];
  snprintf(pattern, sizeof pattern, "%s", tmp("part-*.slr"));
  test_resume_check(build_glob, pattern, 3, k_cuts_100,
                    sizeof k_cuts_100 / sizeof *k_cuts_100, 1024);
  sl_reader *r = build_glob(pattern);
  uint64_t d[45];
  take_digests(r, d, 45);
  void *st;
  save_print(r, "open(glob of 3 slr files)", &st);
  sl_free(st);
  sl_reader_destroy(r);
}

/* --- idx -------------------------------------------------------------------
 */

static void write_idx(const char *images, const char *labels, uint32_t count,
                      int salt) {
  unsigned char *b = malloc(64 + (size_t)count * 6);
  uint32_t dims[3] = {count, 3, 2};
  size_t n = test_idx_header(b, 0x08, 3, dims);
  for (uint32_t i = 0; i < count; i++)
    for (int j = 0; j < 6; j++)
      b[n++] = (unsigned char)(10 * i + (uint32_t)j + (uint32_t)salt);
  test_write_file(images, b, n);
  uint32_t ld[1] = {count};
  n = test_idx_header(b, 0x08, 1, ld);
  for (uint32_t i = 0; i < count; i++)
    b[n++] = (unsigned char)(i % 10);
  test_write_file(labels, b, n);
  free(b);
}

static sl_reader *build_idx(void *ud) {
  (void)ud;
  sl_reader *r;
  OK(sl_idx_reader(tmp("x-images-idx3-ubyte"), tmp("x-labels-idx1-ubyte"), &r));
  return r;
}

TEST(idx_reader) {
  write_idx(tmp("x-images-idx3-ubyte"), tmp("x-labels-idx1-ubyte"), 100, 0);
  test_resume_check(build_idx, NULL, 3, k_cuts_100,
                    sizeof k_cuts_100 / sizeof *k_cuts_100, 256);
  sl_reader *r = build_idx(NULL);
  uint64_t d[10];
  take_digests(r, d, 10);
  void *st;
  size_t len = save_print(r, "idx", &st);
  sl_reader_destroy(r);
  /* Other pixels, then fewer samples: refused, naming the files. */
  write_idx(tmp("x-images-idx3-ubyte"), tmp("x-labels-idx1-ubyte"), 100, 1);
  r = build_idx(NULL);
  uint64_t first;
  sl_reader *r2 = build_idx(NULL);
  take_digests(r2, &first, 1);
  sl_reader_destroy(r2);
  refused(r, st, len, SL_ECORRUPT, "x-images-idx3-ubyte", first);
  sl_reader_destroy(r);
  write_idx(tmp("x-images-idx3-ubyte"), tmp("x-labels-idx1-ubyte"), 90, 0);
  r = build_idx(NULL);
  refused(r, st, len, SL_ECORRUPT, "changed", d[0]);
  sl_reader_destroy(r);
  sl_free(st);
}

/* --- text ------------------------------------------------------------------
 */

static void write_lines(const char *p, int n, const char *extra) {
  FILE *f = fopen(p, "wb");
  for (int i = 0; i < n; i++)
    fprintf(f, i % 7 == 3 ? "line %d\r\n" : i % 11 == 5 ? "\n" : "l%d\n", i);
  if (extra) fputs(extra, f);
  fclose(f);
}

static sl_reader *build_text(void *ud) {
  sl_reader *r;
  OK(sl_text_reader(tmp("lines.txt"), ud != NULL, NULL, NULL, &r));
  return r;
}

TEST(text_reader) {
  write_lines(tmp("lines.txt"), 99, "last line without newline");
  for (int mmap = 0; mmap < 2; mmap++) {
    void *ud = mmap ? (void *)1 : NULL;
    test_resume_check(build_text, ud, 3, k_cuts_100,
                      sizeof k_cuts_100 / sizeof *k_cuts_100, 256);
    sl_reader *r = build_text(ud);
    uint64_t d[10];
    take_digests(r, d, 10);
    void *st;
    size_t len = save_print(r, mmap ? "text (mmap)" : "text", &st);
    sl_reader_destroy(r);
    /* The other mode restores it too: the same lines, the same offsets. */
    r = build_text(mmap ? NULL : (void *)1);
    if (sl_reader_restore(r, st, len) != SL_OK)
      test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
    uint64_t e;
    take_digests(r, &e, 1);
    sl_reader *ref = build_text(NULL);
    uint64_t want[11];
    take_digests(ref, want, 11);
    sl_reader_destroy(ref);
    if (e != want[10]) test_fail(__FILE__, __LINE__, "after the restore");
    sl_reader_destroy(r);
    /* Lines appended since: refused, naming the file. */
    write_lines(tmp("lines.txt"), 99, "last line without newline\nmore\n");
    r = build_text(ud);
    refused(r, st, len, SL_ECORRUPT, "lines.txt", d[0]);
    sl_reader_destroy(r);
    write_lines(tmp("lines.txt"), 99, "last line without newline");
    sl_free(st);
  }
}

/* A parser plugin that skips lines ('#' comments, blank lines): the
 * offsets of the outputs, not their count, locate the position. */
static const char *csv_plugin(void) {
  static char so[4200];
  char dir[4096];
  const char *env = getenv("SLUICE_PLUGIN_DIR");
  if (env && env[0]) {
    snprintf(dir, sizeof dir, "%s", env);
  } else {
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) test_fail(__FILE__, __LINE__, "readlink");
    dir[n] = 0;
    char *slash = strrchr(dir, '/');
    snprintf(slash, sizeof dir - (size_t)(slash - dir), "/examples/plugins");
  }
  snprintf(so, sizeof so, "%s/libcsv_floats.so", dir);
  if (access(so, R_OK) != 0)
    test_fail(__FILE__, __LINE__,
              "parser plugin %s not found: build the examples or set "
              "SLUICE_PLUGIN_DIR",
              so);
  return so;
}

static sl_reader *build_csv(void *ud) {
  sl_reader *r;
  OK(sl_text_reader(tmp("floats.csv"), ud != NULL, csv_plugin(), "n=2", &r));
  OK(sl_batch(r, 3, NULL, &r));
  return r;
}

TEST(text_reader_parser_skips_lines) {
  FILE *f = fopen(tmp("floats.csv"), "wb");
  for (int i = 0; i < 90; i++) {
    if (i % 9 == 4) fputs("# a comment\n", f);
    if (i % 13 == 7) fputs("\n", f);
    fprintf(f, "%d,%d.5\n", i, -i);
  }
  fclose(f);
  const uint64_t cuts[] = {0, 1, 2, 5, 14, 29, 30, 31, 47, 59, 60, 89};
  for (int mmap = 0; mmap < 2; mmap++)
    test_resume_check(build_csv, mmap ? (void *)1 : NULL, 3, cuts,
                      sizeof cuts / sizeof *cuts, 512);
  sl_reader *r = build_csv(NULL);
  uint64_t d[7];
  take_digests(r, d, 7);
  void *st;
  save_print(r, "text + csv_floats parser, batch 3", &st);
  sl_free(st);
  sl_reader_destroy(r);
}

/* --- images -------------------------------------------------------------- */

#if SLUICE_WITH_IMAGES

#define N_IMAGES 60

static const char *image_dir(void) {
  static char dir[1024];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "%s", tmp("images"));
    fix_fmnist f;
    if (fix_fmnist_load(FIX_FMNIST_DIR, N_IMAGES, &f) < 0)
      test_fail(__FILE__, __LINE__,
                "Fashion-MNIST not found at " FIX_FMNIST_DIR " (make deps)");
    if (fix_make_folder(dir, &f, FIX_PNG) < 0)
      test_fail(__FILE__, __LINE__, "cannot write the image folder");
    fix_fmnist_free(&f);
  }
  return dir;
}

typedef struct img_ud {
  uint32_t threads;
  int unordered;
} img_ud;

static sl_reader *build_images(void *ud) {
  img_ud *u = ud;
  sl_image_opts o = SL_IMAGE_OPTS_INIT;
  o.threads = u->threads;
  o.unordered = u->unordered;
  sl_reader *r;
  OK(sl_image_reader(image_dir(), &o, &r));
  return r;
}

TEST(image_reader_threads) {
  const uint64_t cuts[] = {0, 1, 7, 30, 59, 60, 61, 95, 130, 179};
  img_ud u[3] = {{1, 0}, {2, 0}, {4, 0}};
  for (int i = 0; i < 3; i++)
    test_resume_check(build_images, &u[i], 3, cuts, sizeof cuts / sizeof *cuts,
                      512);
  /* Saved with 4 threads, restored with 1 and 2 (and the other way). */
  size_t cut[] = {0, 13, 44, 60};
  for (int c = 0; c < 4; c++) {
    cross_check(build_images, &u[2], build_images, &u[0], cut[c], N_IMAGES);
    cross_check(build_images, &u[2], build_images, &u[1], cut[c], N_IMAGES);
    cross_check(build_images, &u[0], build_images, &u[2], cut[c], N_IMAGES);
  }
  sl_reader *r = build_images(&u[2]);
  uint64_t d[20];
  take_digests(r, d, 20);
  void *st;
  save_print(r, "image folder (threads 4)", &st);
  sl_free(st);
  sl_reader_destroy(r);
}

/* decode_image over samples {image: PNG bytes, label} in memory (a source
 * with a position), batched by 4 when batch is set. */
static sl_sample *g_png[N_IMAGES];
/* The same with 3 samples that are not images, at 5, 30 and 61. */
#define N_MIXED (N_IMAGES + 3)
static sl_sample *g_mixed[N_MIXED];

static void make_png_samples(void) {
  if (g_png[0]) return;
  fix_fmnist f;
  if (fix_fmnist_load(FIX_FMNIST_DIR, N_IMAGES, &f) < 0)
    test_fail(__FILE__, __LINE__, "Fashion-MNIST not found (make deps)");
  sl_schema *sc = sl_schema_new();
  int64_t var = SL_DIM_VAR;
  sl_schema_add(sc, "image", SL_BYTES, 1, &var);
  sl_schema_add(sc, "label", SL_I64, 0, NULL);
  for (size_t i = 0; i < N_IMAGES; i++) {
    size_t len;
    void *enc = fix_png_encode(f.pixels + i * 784, 28, 28, 1, &len);
    sl_sample *s = sl_sample_new(sc);
    int64_t shape[1] = {(int64_t)len};
    void *data;
    if (!enc || sl_sample_alloc(s, 0, 1, shape, &data) != SL_OK)
      test_fail(__FILE__, __LINE__, "cannot make sample %zu", i);
    memcpy(data, enc, len);
    free(enc);
    if (sl_sample_alloc(s, 1, 0, NULL, &data) != SL_OK)
      test_fail(__FILE__, __LINE__, "cannot make sample %zu", i);
    *(int64_t *)data = f.labels[i];
    g_png[i] = s;
  }
  for (size_t i = 0, j = 0; i < N_MIXED; i++) {
    if (i == 5 || i == 30 || i == 61) {
      sl_sample *s = sl_sample_new(sc);
      int64_t shape[1] = {16};
      void *data, *label;
      if (sl_sample_alloc(s, 0, 1, shape, &data) != SL_OK ||
          sl_sample_alloc(s, 1, 0, NULL, &label) != SL_OK)
        test_fail(__FILE__, __LINE__, "cannot make a bad sample");
      memset(data, 0x42, 16);
      *(int64_t *)label = -1;
      g_mixed[i] = s;
    } else {
      g_mixed[i] = sl_sample_retain(g_png[j++]);
    }
  }
  sl_schema_release(sc);
  fix_fmnist_free(&f);
}

typedef struct dec_ud {
  uint32_t threads;
  int unordered, batch, mixed; /* mixed: 3 bad images, policy skip */
} dec_ud;

static sl_reader *build_decode(void *ud) {
  dec_ud *u = ud;
  make_png_samples();
  sl_image_opts o = SL_IMAGE_OPTS_INIT;
  o.threads = u->threads;
  o.unordered = u->unordered;
  o.shape.channels = 1; /* a fixed shape, so batches stack */
  o.shape.height = o.shape.width = 28;
  sl_reader *r;
  if (u->mixed) {
    o.policy = SL_CORRUPT_SKIP_CHUNK;
    OK(sl_reader_from_array(g_mixed, N_MIXED, NULL, &r));
  } else {
    OK(sl_reader_from_array(g_png, N_IMAGES, NULL, &r));
  }
  OK(sl_decode_image(r, &o, &r));
  if (u->batch) OK(sl_batch(r, 4, NULL, &r));
  return r;
}

TEST(decode_image_threads) {
  const uint64_t cuts[] = {0, 1, 7, 30, 59, 60, 61, 95, 130, 179};
  const uint64_t bcuts[] = {0, 1, 7, 14, 15, 16, 30, 44};
  for (uint32_t t = 1; t <= 4; t *= 2) {
    dec_ud u = {t, 0, 0, 0}, b = {t, 0, 1, 0}, m = {t, 0, 0, 1};
    test_resume_check(build_decode, &u, 3, cuts, sizeof cuts / sizeof *cuts,
                      512);
    test_resume_check(build_decode, &b, 3, bcuts, sizeof bcuts / sizeof *bcuts,
                      512);
    /* policy skip: the bad images leave holes (a log of positions) */
    test_resume_check(build_decode, &m, 3, cuts, sizeof cuts / sizeof *cuts,
                      512);
  }
  dec_ud u4 = {4, 0, 0, 0}, u1 = {1, 0, 0, 0};
  cross_check(build_decode, &u4, build_decode, &u1, 23, N_IMAGES);
  sl_reader *r = build_decode(&u4);
  uint64_t d[20];
  take_digests(r, d, 20);
  void *st;
  save_print(r, "decode_image (threads 4) over an array", &st);
  sl_free(st);
  sl_reader_destroy(r);
  /* Unordered with bad images: each good image exactly once around a
   * save, the bad ones skipped (the done set holds them too). */
  uint64_t all[N_IMAGES], got[N_IMAGES + 1], a[N_IMAGES];
  r = build_decode(&u1);
  size_t n = drain_digests(r, all, N_IMAGES);
  sl_reader_destroy(r);
  const size_t mcuts[] = {0, 4, 5, 29, 45, 57};
  for (size_t c = 0; c < sizeof mcuts / sizeof *mcuts; c++) {
    dec_ud un = {4, 1, 0, 1};
    r = build_decode(&un);
    take_digests(r, got, mcuts[c]);
    size_t len = 0;
    if (sl_reader_save(r, &st, &len) != SL_OK)
      test_fail(__FILE__, __LINE__, "save: %s", sl_last_error());
    sl_reader_destroy(r);
    un.threads = 2;
    r = build_decode(&un);
    if (sl_reader_restore(r, st, len) != SL_OK)
      test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
    sl_free(st);
    size_t rest = drain_digests(r, got + mcuts[c], N_IMAGES + 1 - mcuts[c]);
    sl_reader_destroy(r);
    memcpy(a, all, sizeof a);
    same_multiset(got, mcuts[c] + rest, a, n, "unordered, bad images skipped");
  }
  for (size_t i = 0; i < N_MIXED; i++) {
    sl_sample_release(g_mixed[i]);
    g_mixed[i] = NULL;
  }
  for (size_t i = 0; i < N_IMAGES; i++) {
    sl_sample_release(g_png[i]);
    g_png[i] = NULL;
  }
}

/* Unordered: each image of the pass exactly once around a save, for cuts
 * mid-pass, with 4 threads restored with 4 and with 2. */
TEST(image_reader_unordered) {
  img_ud ord = {1, 0}, un4 = {4, 1}, un2 = {2, 1};
  uint64_t all[N_IMAGES], got[N_IMAGES + 1];
  sl_reader *r = build_images(&ord);
  size_t n = drain_digests(r, all, N_IMAGES);
  sl_reader_destroy(r);
  const size_t cuts[] = {0, 1, 17, 31, 59, 60};
  for (int t = 0; t < 2; t++)
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
      r = build_images(&un4);
      take_digests(r, got, cuts[c]);
      void *st;
      size_t len;
      if (sl_reader_save(r, &st, &len) != SL_OK)
        test_fail(__FILE__, __LINE__, "save: %s", sl_last_error());
      sl_reader_destroy(r);
      r = build_images(t ? &un2 : &un4);
      if (sl_reader_restore(r, st, len) != SL_OK)
        test_fail(__FILE__, __LINE__, "restore: %s", sl_last_error());
      sl_free(st);
      size_t rest = drain_digests(r, got + cuts[c], N_IMAGES + 1 - cuts[c]);
      /* The next pass is whole. */
      uint64_t next[N_IMAGES + 1];
      if (sl_reader_reset(r) != SL_OK)
        test_fail(__FILE__, __LINE__, "reset: %s", sl_last_error());
      size_t m = drain_digests(r, next, N_IMAGES + 1);
      sl_reader_destroy(r);
      uint64_t a[N_IMAGES];
      memcpy(a, all, sizeof a);
      same_multiset(got, cuts[c] + rest, a, n, "the restored pass");
      memcpy(a, all, sizeof a);
      same_multiset(next, m, a, n, "the pass after");
    }
  /* Under a shuffle its order cannot be saved. */
  r = build_images(&un4);
  if (sl_shuffle(r, 8, 1, &r) != SL_OK)
    test_fail(__FILE__, __LINE__, "%s", sl_last_error());
  take_digests(r, got, 3);
  void *st;
  size_t len;
  if (sl_reader_save(r, &st, &len) != SL_EUNSUPPORTED ||
      !strstr(sl_last_error(), "ordered=true"))
    test_fail(__FILE__, __LINE__, "save under a shuffle: %s", sl_last_error());
  printf("  refused: %s\n", sl_last_error());
  sl_reader_destroy(r);
}

#else /* !SLUICE_WITH_IMAGES: the tests exist, and say why they do not run */

#define NO_IMAGES "built without image support (-DSLUICE_WITH_IMAGES=OFF)"
TEST_SKIPPED(image_reader_threads, NO_IMAGES)
TEST_SKIPPED(decode_image_threads, NO_IMAGES)
TEST_SKIPPED(image_reader_unordered, NO_IMAGES)

#endif /* SLUICE_WITH_IMAGES */

/* --- changed files (issue 24 item 8) ----------------------------------------
 * Every file-backed source carries its files' identity (device, inode,
 * size, mtime) in its state, through one mechanism (state.h,
 * sl__state_put_file_ids): a file touched or rewritten since the save
 * (another mtime, same size and bytes) or replaced by a copy keeping its
 * times (another inode) is refused with SL_ECORRUPT naming the file and
 * what changed, and the refused reader goes on from where it was. */

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

static void copy_file(const char *from, const char *to) {
  FILE *f = fopen(from, "rb");
  ASSERT_NOT_NULL(f);
  static unsigned char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  ASSERT_TRUE(n < sizeof buf);
  test_write_file(to, buf, n);
}

static sl_reader *open_named(void *ud) {
  /* names[0] alone: sl_open; with names[2] (non-NULL): sl_wds_open of
   * names[0..1]; else sl_open_files of names[0..1] */
  const char *const *names = ud;
  sl_reader *r = NULL;
  if (names[1] && names[2]) {
    sl_wds_opts o = SL_WDS_OPTS_INIT;
    o.threads = 2;
    o.world = 1;
    if (sl_wds_open(names, 2, &o, &r) != SL_OK) return NULL;
  } else if (names[1]) {
    sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
    if (sl_open_files(names, 2, &o, &r) != SL_OK) return NULL;
  } else if (sl_open(names[0], NULL, &r) != SL_OK) {
    return NULL;
  }
  return r;
}

static void *save_after_idx(sl_reader *r, size_t *len) {
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  void *st;
  ASSERT_OK(sl_reader_save(r, &st, len));
  return st;
}

static void *save_at(void *ud, int k, size_t *len) {
  sl_reader *r = open_named(ud);
  ASSERT_NOT_NULL(r);
  for (int i = 0; i < k; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  void *st;
  ASSERT_OK(sl_reader_save(r, &st, len));
  sl_reader_destroy(r);
  return st;
}

/* A restore of st into a new reader over ud fails naming `path` and
 * `what`; the reader then yields its first sample as a fresh one does. */
static void assert_refused(void *ud, const void *st, size_t len,
                           const char *path, const char *what) {
  sl_reader *r = open_named(ud), *fresh = open_named(ud);
  ASSERT_NOT_NULL(r);
  ASSERT_RC(sl_reader_restore(r, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), path);
  ASSERT_CONTAINS(sl_last_error(), what);
  test_same_next(r, fresh, 1);
  sl_reader_destroy(r);
  sl_reader_destroy(fresh);
}

/* The file at p: touched one second on, then replaced by a copy with its
 * times. */
static void check_changes(void *ud, const char *p) {
  size_t len;
  void *st = save_at(ud, 1, &len);
  sl_reader *r = open_named(ud); /* untouched: restores */
  ASSERT_OK(sl_reader_restore(r, st, len));
  sl_reader_destroy(r);
  test_touch_later(p, 1);
  assert_refused(ud, st, len, p, "modification time");
  sl_free(st);
  st = save_at(ud, 1, &len);
  char q[4096];
  snprintf(q, sizeof q, "%s.copy", p);
  copy_file(p, q);
  struct stat sb;
  ASSERT_EQ(stat(p, &sb), 0);
  struct timespec same[2] = {sb.st_atim, sb.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, q, same, 0), 0);
  ASSERT_EQ(rename(q, p), 0);
  assert_refused(ud, st, len, p, "another file");
  sl_free(st);
}

#if SLUICE_WITH_IMAGES
#include <dirent.h>

/* Moves the mtime of one image of the folder (the first found) on. */
static void touch_first_image(const char *dir) {
  DIR *d = opendir(dir);
  ASSERT_NOT_NULL(d);
  struct dirent *e;
  char sub[4096] = "", img[4200] = "";
  while ((e = readdir(d)) && !sub[0])
    if (e->d_name[0] != '.') snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
  closedir(d);
  ASSERT_NOT_NULL(d = opendir(sub));
  while ((e = readdir(d)) && !img[0])
    if (e->d_name[0] != '.') snprintf(img, sizeof img, "%s/%s", sub, e->d_name);
  closedir(d);
  ASSERT_TRUE(img[0] != '\0');
  test_touch_later(img, 1);
}
#endif

TEST(every_file_source_refuses_a_changed_file_naming_it) {
  static const struct {
    const char *tag, *fixture, *name;
  } cases[] = {
      {"npy:", "x.npy", "x.npy"},
      {"npy:", "pair.npz", "pair.npz"},
      {"tfrecord:", "ex.tfrecord", "ex.tfrecord"},
      {"tfrecord:", "ex.tfrecord.gz", "ex.tfrecord.gz"},
      {"wds:", "wds-000000.tar", "w.tar"},
      {"csv:", "table.csv", "t.csv"},
      {"text:", "table.csv", "t.txt"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char p[4096], fixture[4096], spec[4200];
    snprintf(p, sizeof p, "%s", tmp(cases[i].name));
    snprintf(fixture, sizeof fixture, "%s/tests/data/formats/%s",
             SLUICE_SOURCE_DIR, cases[i].fixture);
    copy_file(fixture, p);
    snprintf(spec, sizeof spec, "%s%s", cases[i].tag, p);
    const char *names[3] = {spec, NULL, NULL};
    check_changes((void *)names, p);
  }
  /* slr alone and under open_files */
  char a[4096], b[4096];
  snprintf(a, sizeof a, "%s", tmp("id-a.slr"));
  snprintf(b, sizeof b, "%s", tmp("id-b.slr"));
  test_write_ids_slr(a, 0, 50, 8);
  test_write_ids_slr(b, 50, 50, 8);
  const char *one[3] = {a, NULL, NULL}, *two[3] = {a, b, NULL};
  check_changes((void *)one, a);
  check_changes((void *)two, b);
  /* wds shards read by sl_wds_open's threads */
  char w0[4096], w1[4096];
  snprintf(w0, sizeof w0, "%s", tmp("wo-0.tar"));
  snprintf(w1, sizeof w1, "%s", tmp("wo-1.tar"));
  copy_file(SLUICE_SOURCE_DIR "/tests/data/formats/wds-000000.tar", w0);
  copy_file(SLUICE_SOURCE_DIR "/tests/data/formats/wds-000001.tar", w1);
  const char *shards[3] = {w0, w1, "wds_open"};
  check_changes((void *)shards, w1);
  /* idx: the images and the labels file */
  write_idx(tmp("x-images-idx3-ubyte"), tmp("x-labels-idx1-ubyte"), 100, 0);
  char lab[4096];
  snprintf(lab, sizeof lab, "%s", tmp("x-labels-idx1-ubyte"));
  size_t len;
  sl_reader *r = build_idx(NULL);
  void *st = save_after_idx(r, &len);
  sl_reader_destroy(r);
  test_touch_later(lab, 1);
  r = build_idx(NULL);
  ASSERT_RC(sl_reader_restore(r, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), lab);
  ASSERT_CONTAINS(sl_last_error(), "modification time");
  sl_reader_destroy(r);
  sl_free(st);
#if SLUICE_WITH_IMAGES
  /* an image folder: one image touched (16+ files: the folded identity) */
  img_ud u = {1, 0};
  r = build_images(&u);
  st = save_after_idx(r, &len);
  sl_reader_destroy(r);
  r = build_images(&u);
  ASSERT_OK(sl_reader_restore(r, st, len));
  sl_reader_destroy(r);
  touch_first_image(image_dir());
  r = build_images(&u);
  ASSERT_RC(sl_reader_restore(r, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "changed since the state was saved");
  sl_reader_destroy(r);
  sl_free(st);
#endif
}
