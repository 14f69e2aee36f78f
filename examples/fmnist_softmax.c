/*
 * fmnist_softmax.c - softmax regression on Fashion-MNIST, fed by a sluice
 * pipeline.  The main job of `make demo`.
 *
 * The real data set (Debian's dataset-fashion-mnist package) is decoded from
 * its gzipped idx files into memory, then streamed through the C decorators,
 * using only the public API:
 *
 *   train: generator -> shuffle(10000, seed) -> map(u8 -> f32/255)
 *          -> batch(128) -> prefetch(4)
 *   test:  generator -> map -> batch(1000)
 *
 * Each epoch is one pass of the training pipeline, started with
 * sl_reader_reset.  Per epoch the trainer reports its mean loss and accuracy,
 * the samples per second that went through, and the share of the epoch's
 * wall time it spent blocked inside sl_reader_next: that share answers "does
 * training wait on data?".
 *
 * The idx decoding below is deliberately local to this example, to show a
 * C generator source; sluice's own idx reader is `sl_open("idx:...")`.
 */
/* clock_gettime under strict -std=c11 (a user builds this with pkg-config
 * and their own flags). */
#define _POSIX_C_SOURCE 200809L

#include "sluice.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zlib.h>

#include "softmax.h"

#define ROWS 28
#define COLS 28
#define SHUFFLE_BUFFER 10000
#define PREFETCH 4
#define TEST_BATCH 1000
#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define DATA_PACKAGE "dataset-fashion-mnist"

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct options {
  int epochs;
  size_t batch;
  uint64_t seed;
  float lr;
  const char *data;
} options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: fmnist_softmax [--epochs N] [--batch N] [--seed N] "
          "[--lr X] [--data DIR]\n"
          "  --epochs N  training passes (default 3)\n"
          "  --batch N   training batch size (default 128)\n"
          "  --seed N    shuffle seed (default 42)\n"
          "  --lr X      SGD learning rate (default 0.1)\n"
          "  --data DIR  folder of the gzipped idx files (default %s,\n"
          "              from the Debian package %s)\n"
          "  --help      this text\n",
          DEFAULT_DATA, DATA_PACKAGE);
}

/* Parses a whole decimal integer in [lo, hi]; 0 on success. */
static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *v) {
  if (!s || !*s || *s == '-') return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  if (errno || *end || x < lo || x > hi) return -1;
  *v = x;
  return 0;
}

/* 0: run; 1: --help was printed; -1: bad usage (already reported). */
static int parse_options(int argc, char **argv, options *o) {
  o->epochs = 3;
  o->batch = 128;
  o->seed = 42;
  o->lr = 0.1f;
  o->data = DEFAULT_DATA;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 1;
    }
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    uint64_t x;
    if (!strcmp(a, "--epochs")) {
      if (parse_u64(v, 1, 1000, &x)) goto bad;
      o->epochs = (int)x;
    } else if (!strcmp(a, "--batch")) {
      if (parse_u64(v, 1, 1000000, &x)) goto bad;
      o->batch = (size_t)x;
    } else if (!strcmp(a, "--seed")) {
      if (parse_u64(v, 0, UINT64_MAX, &x)) goto bad;
      o->seed = x;
    } else if (!strcmp(a, "--lr")) {
      char *end;
      if (!v) goto bad;
      double d = strtod(v, &end);
      if (*end || !(d > 0.0) || d > 100.0) goto bad;
      o->lr = (float)d;
    } else if (!strcmp(a, "--data")) {
      if (!v || !*v) goto bad;
      o->data = v;
    } else {
      fprintf(stderr, "fmnist_softmax: unknown option '%s'\n", a);
      usage(stderr);
      return -1;
    }
    i++;
    continue;
  bad:
    fprintf(stderr, "fmnist_softmax: option %s needs a valid value%s%s%s\n", a,
            v ? " (got '" : "", v ? v : "", v ? "')" : "");
    usage(stderr);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The idx files (gzipped, big-endian headers)                               */
/* ------------------------------------------------------------------------ */

typedef struct dataset {
  uint8_t *images; /* n * PIXELS, row-major */
  uint8_t *labels; /* n, each < CLASSES */
  int64_t n;
} dataset;

static void dataset_free(dataset *d) {
  free(d->images);
  free(d->labels);
  memset(d, 0, sizeof *d);
}

/* Reads exactly `len` bytes; 0 on success, else prints why and returns -1. */
static int gz_read_all(gzFile f, const char *path, void *buf, size_t len,
                       const char *what) {
  uint8_t *p = buf;
  while (len) {
    unsigned chunk = len > (1u << 30) ? (1u << 30) : (unsigned)len;
    int got = gzread(f, p, chunk);
    if (got < 0) {
      int zerr;
      const char *msg = gzerror(f, &zerr);
      fprintf(stderr, "fmnist_softmax: %s: cannot read %s: %s\n", path, what,
              zerr == Z_ERRNO ? strerror(errno) : msg);
      return -1;
    }
    if (got == 0) {
      fprintf(stderr, "fmnist_softmax: %s: file is truncated inside %s\n", path,
              what);
      return -1;
    }
    p += got;
    len -= (size_t)got;
  }
  return 0;
}

static uint32_t be32(const uint8_t *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 |
         (uint32_t)b[3];
}

static gzFile open_idx(const char *path) {
  gzFile f = gzopen(path, "rb");
  if (!f) {
    int e = errno;
    fprintf(stderr, "fmnist_softmax: cannot open %s: %s\n", path,
            e ? strerror(e) : "out of memory");
    if (e == ENOENT)
      fprintf(stderr,
              "fmnist_softmax: the Fashion-MNIST data set comes with the "
              "Debian package %s\n"
              "  (apt-get install %s, or `make demo`, which installs it), "
              "or pass --data DIR\n",
              DATA_PACKAGE, DATA_PACKAGE);
  }
  return f;
}

/* Checks that nothing follows the payload. */
static int expect_end(gzFile f, const char *path) {
  uint8_t extra;
  if (gzread(f, &extra, 1) != 0) {
    fprintf(stderr,
            "fmnist_softmax: %s: unexpected bytes after the declared data\n",
            path);
    return -1;
  }
  return 0;
}

/* Loads `<dir>/<prefix>-images-idx3-ubyte.gz` and the matching labels file,
 * checking magic numbers (2051 images, 2049 labels), 28x28 images, equal
 * counts and labels < 10.  0 on success; -1 after printing what was wrong. */
static int load_split(const char *dir, const char *prefix, dataset *d) {
  char ipath[4096], lpath[4096];
  snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
  snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
  memset(d, 0, sizeof *d);
  int ok = -1;
  gzFile fi = NULL, fl = NULL;
  uint8_t h[16];

  if (!(fi = open_idx(ipath))) goto out;
  if (gz_read_all(fi, ipath, h, 16, "the idx3 header")) goto out;
  uint32_t magic = be32(h), n = be32(h + 4), rows = be32(h + 8),
           cols = be32(h + 12);
  if (magic != 2051) {
    fprintf(stderr,
            "fmnist_softmax: %s: bad magic %u (an idx3 u8 image file has "
            "2051)\n",
            ipath, magic);
    goto out;
  }
  if (rows != ROWS || cols != COLS) {
    fprintf(stderr, "fmnist_softmax: %s: images are %ux%u, expected %dx%d\n",
            ipath, rows, cols, ROWS, COLS);
    goto out;
  }
  if (n == 0 || n > 10000000) {
    fprintf(stderr, "fmnist_softmax: %s: implausible image count %u\n", ipath,
            n);
    goto out;
  }

  if (!(fl = open_idx(lpath))) goto out;
  if (gz_read_all(fl, lpath, h, 8, "the idx1 header")) goto out;
  uint32_t lmagic = be32(h), ln = be32(h + 4);
  if (lmagic != 2049) {
    fprintf(stderr,
            "fmnist_softmax: %s: bad magic %u (an idx1 u8 label file has "
            "2049)\n",
            lpath, lmagic);
    goto out;
  }
  if (ln != n) {
    fprintf(stderr, "fmnist_softmax: %s: %u labels, but %s has %u images\n",
            lpath, ln, ipath, n);
    goto out;
  }

  d->n = n;
  d->images = malloc((size_t)n * PIXELS);
  d->labels = malloc(n);
  if (!d->images || !d->labels) {
    fprintf(stderr, "fmnist_softmax: out of memory loading %s\n", ipath);
    goto out;
  }
  if (gz_read_all(fi, ipath, d->images, (size_t)n * PIXELS, "the pixels") ||
      expect_end(fi, ipath))
    goto out;
  if (gz_read_all(fl, lpath, d->labels, n, "the labels") ||
      expect_end(fl, lpath))
    goto out;
  for (uint32_t i = 0; i < n; i++) {
    if (d->labels[i] >= CLASSES) {
      fprintf(stderr,
              "fmnist_softmax: %s: label %u of record %u is not a "
              "class 0..9\n",
              lpath, d->labels[i], i);
      goto out;
    }
  }
  ok = 0;
out:
  if (fi) gzclose(fi);
  if (fl) gzclose(fl);
  if (ok) dataset_free(d);
  return ok;
}

/* ------------------------------------------------------------------------ */
/* The pipeline                                                              */
/* ------------------------------------------------------------------------ */

/* Generator state: a cursor over a dataset the caller keeps alive. */
typedef struct cursor {
  const dataset *d;
  int64_t i;
  sl_schema *schema; /* {image: u8[28,28], label: i64[]}, retained */
} cursor;

/* Yields one sample {image: u8[28,28], label: i64[]} per record.  Runs on the
 * prefetch worker for the training pipeline. */
static int cursor_next(void *ud, sl_sample **out) {
  cursor *c = ud;
  if (c->i >= c->d->n) return SL_EOF;
  sl_sample *s = sl_sample_new(c->schema);
  if (!s) return sl_last_error_code();
  static const int64_t img_shape[2] = {ROWS, COLS};
  void *img, *lab;
  int rc = sl_sample_alloc(s, 0, 2, img_shape, &img);
  if (rc == SL_OK) rc = sl_sample_alloc(s, 1, 0, NULL, &lab);
  if (rc < 0) {
    sl_sample_release(s);
    return sl_wrap_error(rc, "fmnist generator: record %lld", (long long)c->i);
  }
  memcpy(img, c->d->images + (size_t)c->i * PIXELS, PIXELS);
  *(int64_t *)lab = c->d->labels[c->i];
  c->i++;
  *out = s;
  return SL_OK;
}

static int cursor_reset(void *ud) {
  ((cursor *)ud)->i = 0;
  return SL_OK;
}

static void cursor_free(void *ud) {
  cursor *c = ud;
  if (!c) return;
  sl_schema_release(c->schema);
  free(c);
}

/* pixel value -> [0,1]; filled by main before any pipeline thread starts
 * (thread creation orders the writes before the worker's reads).  A table
 * beats the u8 -> float conversion loop, which GCC does not vectorise. */
static float g_unit[256];

/* The map callback: u8[28,28] pixels -> f32[784] in [0,1].  `ud` is the
 * output schema {image: f32[784], label: i64[]} (borrowed: sl_map retains
 * it).  The label tensor is shared with the input, not copied. */
static int to_float(void *ud, sl_sample *in, sl_sample **out) {
  sl_schema *schema = ud;
  sl_sample *s = sl_sample_new(schema);
  if (!s) {
    sl_sample_release(in);
    return sl_last_error_code();
  }
  static const int64_t shape[1] = {PIXELS};
  void *dst;
  int rc = sl_sample_alloc(s, 0, 1, shape, &dst);
  if (rc == SL_OK) rc = sl_sample_set(s, 1, sl_sample_at(in, 1));
  if (rc < 0) {
    sl_sample_release(s);
    sl_sample_release(in);
    return sl_wrap_error(rc, "to_float");
  }
  const uint8_t *src = sl_tensor_data(sl_sample_at(in, 0));
  float *f = dst;
  for (int k = 0; k < PIXELS; k++)
    f[k] = g_unit[src[k]];
  sl_sample_release(in);
  *out = s;
  return SL_OK;
}

/* Reports a failed sluice call and returns 1 (the exit status). */
static int fail(int rc, const char *what) {
  fprintf(stderr, "fmnist_softmax: %s failed: %s: %s\n", what, sl_err_name(rc),
          sl_last_error());
  return 1;
}

/* Builds generator -> [shuffle] -> map -> batch -> [prefetch] over `d`.
 * Returns SL_OK with *out, or an error with the detail set (nothing leaks:
 * each decorator takes its upstream even when it fails). */
static int build_pipeline(const dataset *d, sl_schema *in_schema,
                          sl_schema *out_schema, int shuffle, uint64_t seed,
                          size_t batch, int prefetch, sl_reader **out) {
  *out = NULL;
  cursor *c = calloc(1, sizeof *c);
  if (!c) return sl_set_error(SL_ENOMEM, "fmnist: cannot allocate a cursor");
  c->d = d;
  c->schema = sl_schema_retain(in_schema);
  sl_reader *r = NULL;
  int rc = sl_reader_from_generator(in_schema, cursor_next, cursor_reset,
                                    cursor_free, c, &r);
  if (rc < 0) return rc;
  if (shuffle && (rc = sl_shuffle(r, SHUFFLE_BUFFER, seed, &r)) < 0) return rc;
  if ((rc = sl_map(r, to_float, out_schema, NULL, out_schema, &r)) < 0)
    return rc;
  if ((rc = sl_batch(r, batch, NULL, &r)) < 0) return rc;
  if (prefetch && (rc = sl_prefetch(r, PREFETCH, &r)) < 0) return rc;
  *out = r;
  return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* The model: softmax regression, 784 -> 10, plain minibatch SGD             */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  printf("note: the main job (make demo) is examples/trainer, fed by a Lua "
         "pipeline script; this example builds its pipeline in C alone.\n");
  fflush(stdout);

  options o;
  int p = parse_options(argc, argv, &o);
  if (p) return p > 0 ? 0 : 2;

  int status = 1, rc;
  dataset train = {0}, test = {0};
  sl_schema *in_schema = NULL, *out_schema = NULL;
  sl_reader *train_r = NULL, *test_r = NULL;
  sl_sample *b = NULL;
  model *m = NULL;

  double t0 = now_s();
  if (load_split(o.data, "train", &train) || load_split(o.data, "t10k", &test))
    goto out;
  printf("data: %lld train + %lld test images from %s (%.2f s to decode)\n",
         (long long)train.n, (long long)test.n, o.data, now_s() - t0);

  for (int k = 0; k < 256; k++)
    g_unit[k] = (float)k / 255.0f;

  /* Schemas: what the generator yields and what the map makes of it. */
  static const int64_t img_shape[2] = {ROWS, COLS}, flat[1] = {PIXELS};
  if (!(in_schema = sl_schema_new()) || !(out_schema = sl_schema_new())) {
    status = fail(sl_last_error_code(), "sl_schema_new");
    goto out;
  }
  if ((rc = sl_schema_add(in_schema, "image", SL_U8, 2, img_shape)) < 0 ||
      (rc = sl_schema_add(in_schema, "label", SL_I64, 0, NULL)) < 0 ||
      (rc = sl_schema_add(out_schema, "image", SL_F32, 1, flat)) < 0 ||
      (rc = sl_schema_add(out_schema, "label", SL_I64, 0, NULL)) < 0) {
    status = fail(rc, "sl_schema_add");
    goto out;
  }

  if ((rc = build_pipeline(&train, in_schema, out_schema, 1, o.seed, o.batch, 1,
                           &train_r)) < 0) {
    status = fail(rc, "building the training pipeline");
    goto out;
  }
  if ((rc = build_pipeline(&test, in_schema, out_schema, 0, 0, TEST_BATCH, 0,
                           &test_r)) < 0) {
    status = fail(rc, "building the test pipeline");
    goto out;
  }
  char desc[256];
  printf("pipeline: generator %s -> shuffle(%d, seed %llu) -> map(u8 -> f32 "
         "/255) -> batch(%zu) -> prefetch(%d)\n",
         sl_schema_describe(in_schema, desc, sizeof desc), SHUFFLE_BUFFER,
         (unsigned long long)o.seed, o.batch, PREFETCH);
  printf("  yields %s\n",
         sl_schema_describe(sl_reader_schema(train_r), desc, sizeof desc));

  /* The pipeline alone: one pass with no training, to know its capacity. */
  {
    double s0 = now_s();
    int64_t n = 0;
    while ((rc = sl_reader_next(train_r, &b)) == SL_OK) {
      batch_view v;
      if ((rc = view_batch(b, &v)) < 0) break;
      n += v.n;
      sl_sample_release(b);
      b = NULL;
    }
    if (rc != SL_EOF) {
      status = fail(rc, "reading the training pipeline");
      goto out;
    }
    double dt = now_s() - s0;
    printf("pipeline alone: %lld samples in %.3f s = %.0f samples/s (one pass, "
           "no training)\n",
           (long long)n, dt, (double)n / dt);
  }

  if (!(m = calloc(1, sizeof *m))) {
    fprintf(stderr, "fmnist_softmax: out of memory for the model\n");
    goto out;
  }
  for (int e = 1; e <= o.epochs; e++) {
    if ((rc = sl_reader_reset(train_r)) < 0) {
      status = fail(rc, "sl_reader_reset (training pipeline)");
      goto out;
    }
    /* `first` is the wait for the first batch of the pass, reported apart:
     * it includes the shuffle window filling up (10000 samples), which no
     * amount of prefetching can hide at the start of a pass. */
    double loss = 0.0, wait = 0.0, first = 0.0;
    int64_t seen = 0, correct = 0;
    const double e0 = now_s();
    for (;;) {
      const double w0 = now_s();
      rc = sl_reader_next(train_r, &b);
      const double w = now_s() - w0;
      if (seen == 0) first = w;
      wait += w;
      if (rc == SL_EOF) break;
      if (rc < 0) {
        status = fail(rc, "sl_reader_next (training pipeline)");
        goto out;
      }
      batch_view v;
      if ((rc = view_batch(b, &v)) < 0) {
        status = fail(rc, "reading a training batch");
        goto out;
      }
      train_step(m, &v, o.lr, &loss, &correct);
      seen += v.n;
      sl_sample_release(b);
      b = NULL;
    }
    const double dt = now_s() - e0;
    printf("epoch %d/%d: loss %.4f  train acc %.4f  %lld samples in %.2f s = "
           "%.0f samples/s  waiting on data %.1f%% of the time (first batch "
           "%.0f ms, the rest %.1f%%)\n",
           e, o.epochs, loss / (double)seen, (double)correct / (double)seen,
           (long long)seen, dt, (double)seen / dt, 100.0 * wait / dt,
           1e3 * first, 100.0 * (wait - first) / dt);
    fflush(stdout);
  }

  /* Evaluation on t10k, unshuffled. */
  {
    int64_t seen = 0, correct = 0;
    float prob[CLASSES];
    while ((rc = sl_reader_next(test_r, &b)) == SL_OK) {
      batch_view v;
      if ((rc = view_batch(b, &v)) < 0) break;
      for (int64_t i = 0; i < v.n; i++)
        correct += forward(m, v.x + i * PIXELS, prob) == (int)v.y[i];
      seen += v.n;
      sl_sample_release(b);
      b = NULL;
    }
    if (rc != SL_EOF) {
      status = fail(rc, "reading the test pipeline");
      goto out;
    }
    if (seen != test.n) {
      fprintf(stderr,
              "fmnist_softmax: the test pipeline yielded %lld samples, "
              "expected %lld\n",
              (long long)seen, (long long)test.n);
      goto out;
    }
    printf("test accuracy: %.4f (%lld of %lld t10k images)\n",
           (double)correct / (double)seen, (long long)correct, (long long)seen);
  }
  status = 0;

out:
  sl_sample_release(b);
  sl_reader_destroy(train_r);
  sl_reader_destroy(test_r);
  sl_schema_release(in_schema);
  sl_schema_release(out_schema);
  dataset_free(&train);
  dataset_free(&test);
  free(m);
  return status;
}
