/*
 * softmax.h - the model both Fashion-MNIST examples train: softmax
 * regression (784 -> 10) with plain SGD, and the check that a batch from a
 * pipeline has the fields it needs.  Header-only (static functions) so each
 * example stays one self-contained program.
 *
 * Weights are stored pixel-major, w[j][k], so that the ten class scores
 * accumulate side by side (ten independent sums the compiler keeps in
 * registers) and zero pixels - about half of Fashion-MNIST - are skipped.
 */
#ifndef SLUICE_EXAMPLE_SOFTMAX_H
#define SLUICE_EXAMPLE_SOFTMAX_H

#include "sluice.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define PIXELS (28 * 28)
#define CLASSES 10

typedef struct model {
  float w[PIXELS][CLASSES];
  float b[CLASSES];
  float gw[PIXELS][CLASSES]; /* gradient accumulators for one batch */
  float gb[CLASSES];
} model;

/* Class probabilities of one image into p; returns the argmax. */
static int forward(const model *m, const float *x, float *p) {
  float z[CLASSES];
  memcpy(z, m->b, sizeof z);
  for (int j = 0; j < PIXELS; j++) {
    const float xj = x[j];
    if (xj == 0.0f) continue;
    for (int k = 0; k < CLASSES; k++)
      z[k] += m->w[j][k] * xj;
  }
  int best = 0;
  for (int k = 1; k < CLASSES; k++)
    if (z[k] > z[best]) best = k;
  const float maxv = z[best];
  float sum = 0.0f;
  for (int k = 0; k < CLASSES; k++)
    sum += (p[k] = expf(z[k] - maxv));
  for (int k = 0; k < CLASSES; k++)
    p[k] /= sum;
  return best;
}

typedef struct batch_view {
  const float *x;   /* [n, 784] */
  const int64_t *y; /* [n] */
  int64_t n;
} batch_view;

/* Finds the fields by name and checks them: SL_ENOTFOUND (the detail lists
 * the fields there are) or SL_ESHAPE unless image is f32[B,784] and label
 * i64[B] with labels in 0..9. */
static int view_batch(const sl_sample *b, batch_view *v) {
  const sl_tensor *x = sl_sample_field(b, "image");
  if (!x) return sl_last_error_code();
  const sl_tensor *y = sl_sample_field(b, "label");
  if (!y) return sl_last_error_code();
  const int64_t *xs = sl_tensor_shape(x), *ys = sl_tensor_shape(y);
  if (sl_tensor_dtype(x) != SL_F32 || sl_tensor_rank(x) != 2 ||
      xs[1] != PIXELS || sl_tensor_dtype(y) != SL_I64 ||
      sl_tensor_rank(y) != 1 || ys[0] != xs[0]) {
    char a[64], c[64];
    return sl_set_error(SL_ESHAPE,
                        "batch has image %s and label %s, expected "
                        "f32[B,784] and i64[B]",
                        sl_tensor_describe(x, a, sizeof a),
                        sl_tensor_describe(y, c, sizeof c));
  }
  v->x = sl_tensor_data(x);
  v->y = sl_tensor_data(y);
  v->n = xs[0];
  for (int64_t i = 0; i < v->n; i++)
    if (v->y[i] < 0 || v->y[i] >= CLASSES)
      return sl_set_error(SL_ESHAPE, "label %lld is not a class 0..9",
                          (long long)v->y[i]);
  return SL_OK;
}

/* One SGD step on a batch; adds its summed loss and, when `correct` is not
 * NULL, the number of images it classified right before the step. */
static void train_step(model *m, const batch_view *v, float lr, double *loss,
                       int64_t *correct) {
  memset(m->gw, 0, sizeof m->gw);
  memset(m->gb, 0, sizeof m->gb);
  float p[CLASSES];
  for (int64_t i = 0; i < v->n; i++) {
    const float *x = v->x + i * PIXELS;
    const int y = (int)v->y[i];
    const int pred = forward(m, x, p);
    *loss -= log(fmax(p[y], 1e-30));
    if (correct) *correct += pred == y;
    p[y] -= 1.0f; /* p is now the gradient of the loss w.r.t. the scores */
    for (int k = 0; k < CLASSES; k++)
      m->gb[k] += p[k];
    for (int j = 0; j < PIXELS; j++) {
      const float xj = x[j];
      if (xj == 0.0f) continue;
      for (int k = 0; k < CLASSES; k++)
        m->gw[j][k] += p[k] * xj;
    }
  }
  const float step = lr / (float)v->n;
  for (int j = 0; j < PIXELS; j++)
    for (int k = 0; k < CLASSES; k++)
      m->w[j][k] -= step * m->gw[j][k];
  for (int k = 0; k < CLASSES; k++)
    m->b[k] -= step * m->gb[k];
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
