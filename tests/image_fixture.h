/*
 * image_fixture.h - test images made here, not downloaded: Fashion-MNIST
 * images (the idx files of Debian's dataset-fashion-mnist) written as PNG
 * (libspng's encoder) and JPEG (TurboJPEG's) files in ImageFolder class
 * folders.  Used by tests/test_image.c and tests/cli/mkimages.c.
 * Header-only (static functions) so each user compiles what it calls.
 */
#ifndef SLUICE_IMAGE_FIXTURE_H
#define SLUICE_IMAGE_FIXTURE_H

#include "formats/idx.h"

#include <errno.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#define FIX_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Fashion-MNIST's classes by label; their sorted order is not the label
 * order, which is what makes the ImageFolder labels worth testing. */
static const char *const fix_class_names[10] = {
    "T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle_boot"};

typedef struct fix_fmnist {
  size_t n;        /* images */
  uint8_t *pixels; /* n * 784, malloc'd */
  int64_t *labels; /* n, malloc'd */
} fix_fmnist;

/* The first `n` t10k images and labels.  Returns 0, or -1 with a message
 * on stderr. */
static inline int fix_fmnist_load(const char *dir, size_t n, fix_fmnist *out) {
  char ip[512], lp[512];
  snprintf(ip, sizeof ip, "%s/t10k-images-idx3-ubyte.gz", dir);
  snprintf(lp, sizeof lp, "%s/t10k-labels-idx1-ubyte.gz", dir);
  sl__idx imgs, labs;
  if (sl__idx_load(ip, &imgs) < 0) {
    fprintf(stderr, "%s (install dataset-fashion-mnist)\n", sl_last_error());
    return -1;
  }
  if (sl__idx_load(lp, &labs) < 0) {
    fprintf(stderr, "%s\n", sl_last_error());
    sl__idx_free(&imgs);
    return -1;
  }
  if (n > imgs.count) n = (size_t)imgs.count;
  out->n = n;
  out->pixels = malloc(n * 784);
  out->labels = malloc(n * sizeof *out->labels);
  for (size_t i = 0; i < n; i++) {
    memcpy(out->pixels + i * 784, sl__idx_item(&imgs, i), 784);
    out->labels[i] = *(const uint8_t *)sl__idx_item(&labs, i);
  }
  sl__idx_free(&imgs);
  sl__idx_free(&labs);
  return 0;
}

static inline void fix_fmnist_free(fix_fmnist *f) {
  free(f->pixels);
  free(f->labels);
  memset(f, 0, sizeof *f);
}

static inline int fix_write(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "%s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t w = fwrite(data, 1, n, f);
  int rc = fclose(f);
  return w == n && rc == 0 ? 0 : -1;
}

/* h x w x c (1 or 3) u8 pixels as a PNG in a malloc'd buffer (*size). */
static inline void *fix_png_encode(const uint8_t *px, uint32_t h, uint32_t w,
                                   int c, size_t *size) {
  spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  struct spng_ihdr ihdr = {0};
  ihdr.width = w;
  ihdr.height = h;
  ihdr.bit_depth = 8;
  ihdr.color_type =
      c == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR;
  spng_set_ihdr(ctx, &ihdr);
  int err = spng_encode_image(ctx, px, (size_t)h * w * (size_t)c, SPNG_FMT_PNG,
                              SPNG_ENCODE_FINALIZE);
  void *png = NULL;
  if (!err) png = spng_get_png_buffer(ctx, size, &err);
  spng_ctx_free(ctx);
  if (err) {
    fprintf(stderr, "png encode: %s\n", spng_strerror(err));
    free(png);
    return NULL;
  }
  return png;
}

/* The same as a JPEG of `quality`, 4:4:4 (color) or gray, in a malloc'd
 * buffer. */
static inline void *fix_jpeg_encode(const uint8_t *px, uint32_t h, uint32_t w,
                                    int c, int quality, size_t *size) {
  tjhandle tj = tjInitCompress();
  unsigned char *buf = NULL;
  unsigned long len = 0;
  int rc =
      tjCompress2(tj, px, (int)w, 0, (int)h, c == 1 ? TJPF_GRAY : TJPF_RGB,
                  &buf, &len, c == 1 ? TJSAMP_GRAY : TJSAMP_444, quality, 0);
  if (rc < 0) {
    fprintf(stderr, "jpeg encode: %s\n", tjGetErrorStr2(tj));
    tjDestroy(tj);
    return NULL;
  }
  tjDestroy(tj);
  void *out = malloc(len);
  memcpy(out, buf, len);
  tjFree(buf);
  *size = len;
  return out;
}

/* Which files fix_make_folder writes. */
enum { FIX_PNG = 1, FIX_JPEG = 2 };

/* Writes image i of `f` (i < f->n) as DIR/<class name>/<i, 5 digits>.png
 * or .jpg (quality 95), creating DIR and the class folders.  Returns 0 or
 * -1. */
static inline int fix_make_folder(const char *dir, const fix_fmnist *f,
                                  int kind) {
  char p[1024];
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) return -1;
  for (int c = 0; c < 10; c++) {
    snprintf(p, sizeof p, "%s/%s", dir, fix_class_names[c]);
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
  }
  for (size_t i = 0; i < f->n; i++) {
    size_t len;
    void *enc = kind == FIX_PNG
                    ? fix_png_encode(f->pixels + i * 784, 28, 28, 1, &len)
                    : fix_jpeg_encode(f->pixels + i * 784, 28, 28, 1, 95, &len);
    if (!enc) return -1;
    snprintf(p, sizeof p, "%s/%s/%05zu.%s", dir, fix_class_names[f->labels[i]],
             i, kind == FIX_PNG ? "png" : "jpg");
    int rc = fix_write(p, enc, len);
    free(enc);
    if (rc < 0) return -1;
  }
  return 0;
}

#endif
