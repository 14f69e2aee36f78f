/*
 * trainer.c - softmax regression on Fashion-MNIST, fed by a pipeline declared
 * in Lua (examples/fashion_mnist.lua) through the embedding API
 * (docs/EMBEDDING.md): the main job of `make demo`.
 *
 *   train: sl_pipeline_open_file(SCRIPT, {"train", DATA, BATCH, SEED})
 *   test:  sl_pipeline_open_file(SCRIPT, {"test", DATA})
 *
 * Each epoch is one pass of the training pipeline (sl_pipeline_reset between
 * passes) followed by one pass of the test pipeline, and prints one line:
 *
 *   epoch=N loss=L test_acc=A wait=W
 *
 * L is the mean training cross-entropy of the epoch, A the accuracy on the
 * 10000 t10k images, W the fraction of the epoch's wall time (training pass
 * and evaluation) spent inside sl_pipeline_next: "does training wait on
 * data?".  The model is examples/softmax.h, shared with fmnist_softmax.c.
 */
/* clock_gettime under strict -std=c11 (a user builds this with pkg-config
 * and their own flags). */
#define _POSIX_C_SOURCE 200809L

#include <sluice.h>

#include "../softmax.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef TRAINER_DEFAULT_SCRIPT
#define TRAINER_DEFAULT_SCRIPT "examples/fashion_mnist.lua"
#endif
#ifndef TRAINER_DEFAULT_DATA
#define TRAINER_DEFAULT_DATA "build/data"
#endif

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct options {
  int epochs;
  long limit;               /* training batches per epoch, 0: all */
  const char *batch, *seed; /* passed to the script as strings */
  float lr;
  const char *data, *script;
} options;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: trainer [--epochs N] [--data DIR] [--script PATH] "
      "[--batch N] [--seed N] [--lr X] [--limit N]\n"
      "  --epochs N     training passes (default 3)\n"
      "  --data DIR     where train.slr and t10k.slr are (default %s;\n"
      "                 `make demo` packs them from dataset-fashion-mnist)\n"
      "  --script PATH  the pipeline script (default %s)\n"
      "  --batch N      training batch size (default 128)\n"
      "  --seed N       shuffle seed (default 42)\n"
      "  --lr X         SGD learning rate of epoch 1, then lr/epoch (default "
      "0.2)\n"
      "  --limit N      at most N training batches per epoch (default all)\n"
      "  --help         this text\n"
      "Each epoch prints: epoch=N loss=L test_acc=A wait=W (W: share of "
      "the epoch's wall time spent waiting in sl_pipeline_next).\n",
      TRAINER_DEFAULT_DATA, TRAINER_DEFAULT_SCRIPT);
}

static int whole(const char *s, long lo, long hi, long *v) {
  if (!s || !*s || *s == '-') return -1;
  char *end;
  errno = 0;
  long x = strtol(s, &end, 10);
  if (errno || *end || x < lo || x > hi) return -1;
  *v = x;
  return 0;
}

/* 0: run; 1: --help was printed; -1: bad usage (already reported). */
static int parse_options(int argc, char **argv, options *o) {
  o->epochs = 3;
  o->limit = 0;
  o->batch = "128";
  o->seed = "42";
  o->lr = 0.2f;
  o->data = TRAINER_DEFAULT_DATA;
  o->script = TRAINER_DEFAULT_SCRIPT;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 1;
    }
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long x;
    if (!strcmp(a, "--epochs")) {
      if (whole(v, 1, 1000, &x)) goto bad;
      o->epochs = (int)x;
    } else if (!strcmp(a, "--limit")) {
      if (whole(v, 1, 1L << 40, &x)) goto bad;
      o->limit = x;
    } else if (!strcmp(a, "--batch")) {
      if (whole(v, 1, 1000000, &x)) goto bad;
      o->batch = v;
    } else if (!strcmp(a, "--seed")) {
      if (whole(v, 0, 1L << 52, &x)) goto bad;
      o->seed = v;
    } else if (!strcmp(a, "--lr")) {
      char *end;
      if (!v) goto bad;
      double d = strtod(v, &end);
      if (*end || !(d > 0.0) || d > 100.0) goto bad;
      o->lr = (float)d;
    } else if (!strcmp(a, "--data")) {
      if (!v || !*v) goto bad;
      o->data = v;
    } else if (!strcmp(a, "--script")) {
      if (!v || !*v) goto bad;
      o->script = v;
    } else {
      fprintf(stderr, "trainer: unknown option '%s'\n", a);
      usage(stderr);
      return -1;
    }
    i++;
    continue;
  bad:
    fprintf(stderr, "trainer: option %s needs a valid value%s%s%s\n", a,
            v ? " (got '" : "", v ? v : "", v ? "')" : "");
    usage(stderr);
    return -1;
  }
  return 0;
}

/* The model (softmax regression, 784 -> 10, plain minibatch SGD) and the
 * batch check are shared with examples/fmnist_softmax.c: ../softmax.h. */

static int fail(const char *what, int rc) {
  fprintf(stderr, "trainer: %s: %s: %s\n", what, sl_err_name(rc),
          sl_last_error());
  return 1;
}

/* Pulls the next batch of `p`, adding the time spent to *wait. */
static int next_batch(sl_pipeline *p, sl_sample **b, double *wait) {
  const double t = now_s();
  int rc = sl_pipeline_next(p, b);
  *wait += now_s() - t;
  return rc;
}

int main(int argc, char **argv) {
  options o;
  int pr = parse_options(argc, argv, &o);
  if (pr) return pr > 0 ? 0 : 2;

  const char *train_args[] = {"train", o.data, o.batch, o.seed};
  const char *test_args[] = {"test", o.data};
  sl_pipeline *train = NULL, *test = NULL;
  sl_sample *b = NULL;
  model *m = NULL;
  int status = 1, rc;

  if ((rc = sl_pipeline_open_file(o.script, 4, train_args, &train)) != SL_OK) {
    status = fail("opening the training pipeline", rc);
    goto out;
  }
  if ((rc = sl_pipeline_open_file(o.script, 2, test_args, &test)) != SL_OK) {
    status = fail("opening the test pipeline", rc);
    goto out;
  }
  char desc[256];
  printf("pipeline: %s train %s batch %s seed %s yields %s\n", o.script, o.data,
         o.batch, o.seed,
         sl_schema_describe(sl_pipeline_schema(train), desc, sizeof desc));
  fflush(stdout);
  if (!(m = calloc(1, sizeof *m))) {
    fprintf(stderr, "trainer: out of memory for the model\n");
    goto out;
  }

  for (int e = 1; e <= o.epochs; e++) {
    const double e0 = now_s();
    double wait = 0.0, loss = 0.0;
    int64_t seen = 0;
    long batches = 0;
    /* The rate decays as 1/epoch: the last SGD steps of an epoch then move
     * the weights less, and the test accuracy stops jumping around. */
    const float lr = o.lr / (float)e;
    if (e > 1 && ((rc = sl_pipeline_reset(train)) != SL_OK ||
                  (rc = sl_pipeline_reset(test)) != SL_OK)) {
      status = fail("sl_pipeline_reset", rc);
      goto out;
    }
    while ((!o.limit || batches < o.limit) &&
           (rc = next_batch(train, &b, &wait)) == SL_OK) {
      batch_view v;
      if ((rc = view_batch(b, &v)) != SL_OK) {
        status = fail("a training batch", rc);
        goto out;
      }
      train_step(m, &v, lr, &loss, NULL);
      seen += v.n;
      batches++;
      sl_sample_release(b);
      b = NULL;
    }
    if ((!o.limit || batches < o.limit) && rc != SL_EOF) {
      status = fail("the training pipeline", rc);
      goto out;
    }
    if (seen == 0) {
      fprintf(stderr, "trainer: the training pipeline yielded no sample\n");
      goto out;
    }

    int64_t tested = 0, correct = 0;
    float prob[CLASSES];
    while ((rc = next_batch(test, &b, &wait)) == SL_OK) {
      batch_view v;
      if ((rc = view_batch(b, &v)) != SL_OK) {
        status = fail("a test batch", rc);
        goto out;
      }
      for (int64_t i = 0; i < v.n; i++)
        correct += forward(m, v.x + i * PIXELS, prob) == (int)v.y[i];
      tested += v.n;
      sl_sample_release(b);
      b = NULL;
    }
    if (rc != SL_EOF) {
      status = fail("the test pipeline", rc);
      goto out;
    }
    if (tested == 0) {
      fprintf(stderr, "trainer: the test pipeline yielded no sample\n");
      goto out;
    }
    const double dt = now_s() - e0;
    printf("epoch=%d loss=%.4f test_acc=%.4f wait=%.3f\n", e,
           loss / (double)seen, (double)correct / (double)tested, wait / dt);
    fflush(stdout);
  }
  status = 0;

out:
  sl_sample_release(b);
  sl_pipeline_close(train);
  sl_pipeline_close(test);
  free(m);
  return status;
}
