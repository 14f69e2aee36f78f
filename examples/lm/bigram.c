/*
 * bigram.c - a byte-level bigram language model (a 256 x 256 table of
 * logits, softmax over the next byte) trained with SGD on token shards,
 * fed by a Lua pipeline (examples/lm/bigram.lua) through the embedding API
 * (docs/EMBEDDING.md, docs/TEXT.md).
 *
 *   bigram [--epochs N] [--lr X] [--T N] [--B N] [--seed N]
 *          TRAIN_PATTERN [VAL_PATTERN]
 *
 * Each epoch is one pass of the training pipeline; it prints
 *
 *   rank=R world=W epoch=N batches=K loss=L [val_loss=V]
 *
 * L is the mean cross-entropy (nats per token) of the epoch's training
 * tokens, V that of the validation shard after the epoch.  Under mpirun
 * every rank reads its own share (the pipeline's rank and world come from
 * the launcher's environment) and trains its own table: no gradient is
 * exchanged, this only shows the split.
 */
#define _POSIX_C_SOURCE 200809L

#include <sluice.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef BIGRAM_SCRIPT
#define BIGRAM_SCRIPT "examples/lm/bigram.lua"
#endif

#define V 256

static float W[V][V]; /* logits: W[x][y] for next byte y after x */

/* Cross-entropy of y after x; with lr > 0 also one SGD step on row x. */
static double step(int x, int y, float lr) {
  float *w = W[x];
  float m = w[0];
  for (int j = 1; j < V; j++)
    m = w[j] > m ? w[j] : m;
  float p[V], sum = 0;
  for (int j = 0; j < V; j++)
    sum += p[j] = expf(w[j] - m);
  double loss = -log((double)p[y] / sum);
  if (lr > 0) {
    float inv = 1.0f / sum;
    for (int j = 0; j < V; j++)
      w[j] -= lr * (p[j] * inv - (j == y));
  }
  return loss;
}

/* One pass of `p`: mean loss per token into *loss, batches into *n. */
static int pass(sl_reader *p, float lr, double *loss, long *n) {
  double sum = 0;
  long tokens = 0, batches = 0;
  sl_sample *b;
  int rc;
  while ((rc = sl_reader_next(p, &b)) == SL_OK) {
    const sl_tensor *in = sl_sample_field(b, "inputs");
    const sl_tensor *tg = sl_sample_field(b, "targets");
    const int32_t *x = in->data, *y = tg->data;
    int64_t k = sl_tensor_numel(in);
    for (int64_t i = 0; i < k; i++) {
      if (x[i] < 0 || x[i] >= V || y[i] < 0 || y[i] >= V) {
        fprintf(stderr, "bigram: token %d is not a byte\n", x[i]);
        sl_sample_release(b);
        return SL_EINVAL;
      }
      sum += step(x[i], y[i], lr);
    }
    tokens += k;
    batches++;
    sl_sample_release(b);
  }
  if (rc != SL_EOF) return rc;
  *loss = tokens ? sum / (double)tokens : 0;
  *n = batches;
  return SL_OK;
}

static void usage(void) {
  fprintf(stderr, "usage: bigram [--epochs N] [--lr X] [--T N] [--B N] "
                  "[--seed N] [--script PATH] TRAIN_PATTERN [VAL_PATTERN]\n");
}

int main(int argc, char **argv) {
  int epochs = 3;
  float lr = 0.5f;
  const char *T = "64", *B = "16", *seed = "1", *script = BIGRAM_SCRIPT;
  const char *train = NULL, *val = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (strcmp(a, "--epochs") == 0 && has)
      epochs = atoi(argv[++i]);
    else if (strcmp(a, "--lr") == 0 && has)
      lr = (float)atof(argv[++i]);
    else if (strcmp(a, "--T") == 0 && has)
      T = argv[++i];
    else if (strcmp(a, "--B") == 0 && has)
      B = argv[++i];
    else if (strcmp(a, "--seed") == 0 && has)
      seed = argv[++i];
    else if (strcmp(a, "--script") == 0 && has)
      script = argv[++i];
    else if (a[0] == '-') {
      usage();
      return 2;
    } else if (!train)
      train = a;
    else if (!val)
      val = a;
    else {
      usage();
      return 2;
    }
  }
  if (!train || epochs < 1) {
    usage();
    return 2;
  }
  int rank = 0, world = 1;
  if (sl_shard_env(&rank, &world) < 0) {
    fprintf(stderr, "bigram: %s\n", sl_last_error());
    return 1;
  }
  const char *targs[] = {"train", train, T, B, seed};
  sl_reader *tp = NULL, *vp = NULL;
  if (sl_pipeline_open_file(script, 5, targs, &tp) < 0) {
    fprintf(stderr, "bigram: %s\n", sl_last_error());
    return 1;
  }
  const char *vargs[] = {"val", val, T, B};
  if (val && sl_pipeline_open_file(script, 4, vargs, &vp) < 0) {
    fprintf(stderr, "bigram: %s\n", sl_last_error());
    sl_reader_destroy(tp);
    return 1;
  }
  int rc = SL_OK;
  for (int e = 1; e <= epochs && rc == SL_OK; e++) {
    double loss = 0, vloss = 0;
    long n = 0, vn = 0;
    if (e > 1) rc = sl_reader_reset(tp);
    if (rc == SL_OK) rc = pass(tp, lr, &loss, &n);
    if (rc == SL_OK && vp && e > 1) rc = sl_reader_reset(vp);
    if (rc == SL_OK && vp) rc = pass(vp, 0, &vloss, &vn);
    if (rc != SL_OK) break;
    printf("rank=%d world=%d epoch=%d batches=%ld loss=%.4f", rank, world, e, n,
           loss);
    if (vp) printf(" val_loss=%.4f", vloss);
    printf("\n");
    fflush(stdout);
  }
  if (rc != SL_OK) fprintf(stderr, "bigram: %s\n", sl_last_error());
  sl_reader_destroy(vp);
  sl_reader_destroy(tp);
  return rc == SL_OK ? 0 : 1;
}
