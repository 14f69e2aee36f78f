/*
 * trainer.c - softmax regression on Fashion-MNIST, fed by a pipeline declared
 * in Lua (examples/fashion_mnist.lua) through the embedding API
 * (docs/EMBEDDING.md): the main job of `make demo`.
 *
 *   train: sl_pipeline_open_file(SCRIPT, {"train", DATA, BATCH, SEED})
 *   test:  sl_pipeline_open_file(SCRIPT, {"test", DATA})
 *
 * Each epoch is one pass of the training pipeline (sl_reader_reset between
 * passes) followed by one pass of the test pipeline, and prints one line:
 *
 *   epoch=N loss=L test_acc=A wait=W step_us=S cached_step_us=C
 *   interference=S/C
 *
 * L is the mean training cross-entropy of the epoch, A the accuracy on the
 * 10000 t10k images, W the fraction of the epoch's wall time (training pass
 * and evaluation) spent inside sl_reader_next: "does training wait on
 * data?".  S is the mean wall time of one SGD step while the pipeline runs
 * beside it, C the same step over batches held in memory (the epoch's first
 * CACHED batches, copied, replayed on a scratch copy of the model after the
 * training pass, when the pipeline's threads have nothing left to do): S/C
 * is what the loader's threads cost the trainer ("does the loader slow the
 * step it feeds?").  The replay is not counted in the epoch's wall time.
 * The model is examples/softmax.h, shared with fmnist_softmax.c.
 *
 * Checkpoints (docs/RESUME.md).  `--save-state FILE` writes, at the end of
 * the run or after `--stop-after N` training steps (batches, counted across
 * epochs), a checkpoint: the epoch and step, the epoch's loss sum and sample
 * count so far, the model's weights, and the training pipeline's position
 * (sl_reader_save: positions, not samples, a few hundred bytes), with a
 * CRC32C; written to a temporary file, synced and renamed over FILE, so a
 * crash never leaves half a checkpoint.  `--resume FILE` loads it into a
 * fresh model and pipeline (sl_reader_restore) and continues: the epoch
 * lines that follow are those of the uninterrupted run (loss and accuracy
 * equal to the printed digits; wait is a timing).  The test pipeline has no
 * position to save: each epoch reads it whole.
 */
/* clock_gettime under strict -std=c11 (a user builds this with pkg-config
 * and their own flags). */
#define _POSIX_C_SOURCE 200809L

#include <sluice.h>

#include "../softmax.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
  long limit;                /* training batches per epoch, 0: all */
  long stop_after;           /* training steps in all, 0: none */
  const char *save, *resume; /* checkpoint files, NULL: none */
  const char *batch, *seed;  /* passed to the script as strings */
  float lr;
  const char *data, *script;
} options;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: trainer [--epochs N] [--data DIR] [--script PATH] "
      "[--batch N] [--seed N] [--lr X] [--limit N]\n"
      "               [--stop-after N] [--save-state FILE] [--resume FILE]\n"
      "  --epochs N     training passes (default 3)\n"
      "  --data DIR     where train.slr and t10k.slr are (default %s;\n"
      "                 `make demo` packs them from dataset-fashion-mnist)\n"
      "  --script PATH  the pipeline script (default %s)\n"
      "  --batch N      training batch size (default 128)\n"
      "  --seed N       shuffle seed (default 42)\n"
      "  --lr X         SGD learning rate of epoch 1, then lr/epoch (default "
      "0.2)\n"
      "  --limit N      at most N training batches per epoch (default all)\n"
      "  --stop-after N stop after N training steps (batches) in all,\n"
      "                 counted across epochs and resumed runs\n"
      "  --save-state FILE  at the end (or at --stop-after), write a\n"
      "                 checkpoint: model, counters, pipeline position\n"
      "  --resume FILE  continue from a checkpoint of --save-state (the\n"
      "                 same --batch, --seed, --data, --script)\n"
      "  --help         this text\n"
      "Each epoch prints: epoch=N loss=L test_acc=A wait=W step_us=S "
      "cached_step_us=C interference=S/C\n"
      "  (W: share of the epoch's wall time spent waiting in "
      "sl_reader_next;\n"
      "   S: a training step's mean time with the pipeline running, C: the "
      "same\n"
      "   step over batches held in memory, the pipeline idle)\n",
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
  o->stop_after = 0;
  o->save = o->resume = NULL;
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
    } else if (!strcmp(a, "--stop-after")) {
      if (whole(v, 1, 1L << 40, &x)) goto bad;
      o->stop_after = x;
    } else if (!strcmp(a, "--save-state")) {
      if (!v || !*v) goto bad;
      o->save = v;
    } else if (!strcmp(a, "--resume")) {
      if (!v || !*v) goto bad;
      o->resume = v;
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
static int next_batch(sl_reader *p, sl_sample **b, double *wait) {
  const double t = now_s();
  int rc = sl_reader_next(p, b);
  *wait += now_s() - t;
  return rc;
}

/* ------------------------------------------------------------------------ */
/* The step over cached batches                                              */
/* ------------------------------------------------------------------------ */

/* Copies of the first CACHED training batches: the step timed without the
 * pipeline.  The trainer owns them; cache_free releases them. */
enum { CACHED = 16, REPLAY = 128 };
typedef struct cached {
  float *x;
  int64_t *y;
  int64_t n;
} cached;

/* Keeps a copy of *v in c[*k] while there is room; out of memory is not an
 * error (fewer batches to replay). */
static void cache_batch(cached *c, int *k, const batch_view *v) {
  if (*k >= CACHED) return;
  float *x = malloc((size_t)v->n * PIXELS * sizeof *x);
  int64_t *y = malloc((size_t)v->n * sizeof *y);
  if (!x || !y) {
    free(x);
    free(y);
    return;
  }
  memcpy(x, v->x, (size_t)v->n * PIXELS * sizeof *x);
  memcpy(y, v->y, (size_t)v->n * sizeof *y);
  c[(*k)++] = (cached){x, y, v->n};
}

static void cache_free(cached *c, int k) {
  for (int i = 0; i < k; i++) {
    free(c[i].x);
    free(c[i].y);
  }
}

/* The mean seconds of one SGD step over the cached batches, replayed on
 * `scratch` (a copy of the model: the real one is not touched) for REPLAY
 * steps (a stable mean that adds little to an epoch); 0 when none. */
static double cached_step_s(const cached *c, int k, model *scratch,
                            float lr) {
  if (k == 0) return 0.0;
  const long n = REPLAY;
  double loss = 0.0;
  const double t = now_s();
  for (long i = 0; i < n; i++) {
    const batch_view v = {c[i % k].x, c[i % k].y, c[i % k].n};
    train_step(scratch, &v, lr, &loss, NULL);
  }
  return (now_s() - t) / (double)n;
}

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                               */
/* ------------------------------------------------------------------------ */

/* Where training stands: the epoch in progress (1-based), the training
 * steps done in it and in all, and its loss sum and sample count so far. */
typedef struct progress {
  int epoch;
  int fresh; /* 1: `epoch` has not started (the one before ended) */
  long batches;
  long steps;
  double loss;
  int64_t seen;
} progress;

/*   "SLTRAIN1", u32 version 1, i32 epoch, i32 fresh, i64 batches, i64
 *   steps, f64 loss,
 *   i64 seen, f32 w[PIXELS][CLASSES], f32 b[CLASSES], u64 n, n bytes of
 *   pipeline state, u32 CRC32C of all before.  Host byte order: a
 *   checkpoint is for the machine that trains. */
#define CKPT_MAGIC "SLTRAIN1"
enum { CKPT_VERSION = 1 };

static uint32_t crc32c(const void *data, size_t n) {
  const unsigned char *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

typedef struct bytes {
  unsigned char *p;
  size_t n, cap;
} bytes;

static int put(bytes *b, const void *data, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 65536;
    while (cap < b->n + n)
      cap *= 2;
    unsigned char *q = realloc(b->p, cap);
    if (!q) return -1;
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, data, n);
  b->n += n;
  return 0;
}

/* Writes the checkpoint to `path` through a temporary renamed over it. */
static int save_checkpoint(const char *path, sl_reader *train, const model *m,
                           const progress *at) {
  void *st = NULL;
  size_t n = 0;
  int rc = sl_reader_save(train, &st, &n);
  if (rc != SL_OK) {
    fprintf(stderr, "trainer: --save-state %s: %s: %s\n", path, sl_err_name(rc),
            sl_last_error());
    return -1;
  }
  bytes b = {0};
  const uint32_t version = CKPT_VERSION;
  const int32_t epoch = at->epoch, fresh = at->fresh;
  const int64_t batches = at->batches, steps = at->steps, seen = at->seen;
  const uint64_t len = n;
  int bad = put(&b, CKPT_MAGIC, 8) || put(&b, &version, 4) ||
            put(&b, &epoch, 4) || put(&b, &fresh, 4) || put(&b, &batches, 8) ||
            put(&b, &steps, 8) || put(&b, &at->loss, 8) || put(&b, &seen, 8) ||
            put(&b, m->w, sizeof m->w) || put(&b, m->b, sizeof m->b) ||
            put(&b, &len, 8) || put(&b, st, n);
  sl_free(st);
  uint32_t crc = bad ? 0 : crc32c(b.p, b.n);
  bad = bad || put(&b, &crc, 4);
  if (bad) {
    free(b.p);
    fprintf(stderr, "trainer: --save-state %s: out of memory\n", path);
    return -1;
  }
  size_t tl = strlen(path) + 32;
  char *tmp = malloc(tl);
  int fd = -1;
  if (tmp) {
    snprintf(tmp, tl, "%s.tmp-%ld-XXXXXX", path, (long)getpid());
    fd = mkstemp(tmp);
    if (fd >= 0) { /* mkstemp's 0600 -> what a plain create would give */
      mode_t mask = umask(0);
      umask(mask);
      (void)fchmod(fd, 0666 & ~mask);
    }
  }
  int err = fd < 0 ? (tmp ? errno : ENOMEM) : 0;
  size_t done = 0;
  while (!err && done < b.n) {
    ssize_t k = write(fd, b.p + done, b.n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      err = k < 0 ? errno : EIO;
    else
      done += (size_t)k;
  }
  if (!err && fsync(fd) != 0) err = errno;
  if (fd >= 0 && close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err && fd >= 0) unlink(tmp);
  free(tmp);
  free(b.p);
  if (err) {
    fprintf(stderr, "trainer: --save-state %s: %s\n", path, strerror(err));
    return -1;
  }
  printf("checkpoint: %s (%zu bytes, pipeline state %zu bytes) at epoch %d "
         "step %ld\n",
         path, done, n, at->epoch, at->batches);
  fflush(stdout);
  return 0;
}

/* Reads the checkpoint at `path` into *m and *at and restores `train`. */
static int load_checkpoint(const char *path, sl_reader *train, model *m,
                           progress *at) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "trainer: --resume %s: %s\n", path, strerror(errno));
    return -1;
  }
  bytes b = {0};
  unsigned char chunk[65536];
  size_t k;
  int bad = 0;
  while (!bad && (k = fread(chunk, 1, sizeof chunk, f)) > 0)
    bad = put(&b, chunk, k) || b.n > (64u << 20);
  fclose(f);
  const size_t head =
      8 + 4 + 4 + 4 + 8 + 8 + 8 + 8 + sizeof m->w + sizeof m->b + 8;
  const char *why = NULL;
  uint64_t len = 0;
  uint32_t version = 0, crc = 0;
  if (bad)
    why = "cannot be read (too large, or out of memory)";
  else if (b.n < 8 || memcmp(b.p, CKPT_MAGIC, 8) != 0)
    why = "not a trainer checkpoint (no " CKPT_MAGIC " header)";
  else if (b.n < head + 4)
    why = "cut short";
  else if (memcpy(&version, b.p + 8, 4), version != CKPT_VERSION)
    why = "another checkpoint version";
  else if (memcpy(&len, b.p + head - 8, 8), len != b.n - head - 4)
    why = "cut short or padded";
  else if (memcpy(&crc, b.p + b.n - 4, 4), crc != crc32c(b.p, b.n - 4))
    why = "checksum mismatch (the file is corrupt)";
  if (why) {
    fprintf(stderr, "trainer: --resume %s: %s\n", path, why);
    free(b.p);
    return -1;
  }
  const unsigned char *p = b.p + 12;
  int32_t epoch, fresh;
  int64_t batches, steps, seen;
  memcpy(&epoch, p, 4);
  memcpy(&fresh, p + 4, 4);
  memcpy(&batches, p + 8, 8);
  memcpy(&steps, p + 16, 8);
  memcpy(&at->loss, p + 24, 8);
  memcpy(&seen, p + 32, 8);
  memcpy(m->w, p + 40, sizeof m->w);
  memcpy(m->b, p + 40 + sizeof m->w, sizeof m->b);
  at->epoch = epoch;
  at->fresh = fresh != 0;
  at->batches = (long)batches;
  at->steps = (long)steps;
  at->seen = seen;
  int rc = sl_reader_restore(train, b.p + head, (size_t)len);
  free(b.p);
  if (rc != SL_OK) {
    fprintf(stderr, "trainer: --resume %s: %s: %s\n", path, sl_err_name(rc),
            sl_last_error());
    return -1;
  }
  printf("resumed: %s at epoch %d%s step %ld (%ld steps in all)\n", path,
         at->epoch, at->fresh ? " (its start)" : "", at->batches, at->steps);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  options o;
  int pr = parse_options(argc, argv, &o);
  if (pr) return pr > 0 ? 0 : 2;

  const char *train_args[] = {"train", o.data, o.batch, o.seed};
  const char *test_args[] = {"test", o.data};
  sl_reader *train = NULL, *test = NULL;
  sl_sample *b = NULL;
  model *m = NULL, *scratch = NULL;
  cached cache[CACHED];
  int ncached = 0;
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
         sl_schema_describe(sl_reader_schema(train), desc, sizeof desc));
  fflush(stdout);
  if (!(m = calloc(1, sizeof *m)) || !(scratch = malloc(sizeof *scratch))) {
    fprintf(stderr, "trainer: out of memory for the model\n");
    goto out;
  }

  progress at = {.epoch = 1};
  if (o.resume && load_checkpoint(o.resume, train, m, &at) != 0) goto out;
  bool stopped = false;
  int e;
  for (e = at.epoch; e <= o.epochs && !stopped; e++) {
    const double e0 = now_s();
    double wait = 0.0, step = 0.0;
    long steps = 0;
    /* A resumed epoch goes on with its sums; a new one starts them. */
    const bool resumed = o.resume && e == at.epoch && !at.fresh;
    if (!resumed) at.batches = 0, at.loss = 0.0, at.seen = 0;
    at.epoch = e;
    at.fresh = 0;
    /* The rate decays as 1/epoch: the last SGD steps of an epoch then move
     * the weights less, and the test accuracy stops jumping around. */
    const float lr = o.lr / (float)e;
    if (e > 1 && ((!resumed && (rc = sl_reader_reset(train)) != SL_OK) ||
                  (rc = sl_reader_reset(test)) != SL_OK)) {
      status = fail("sl_reader_reset", rc);
      goto out;
    }
    rc = SL_OK;
    while ((!o.limit || at.batches < o.limit) &&
           !(stopped = o.stop_after && at.steps >= o.stop_after) &&
           (rc = next_batch(train, &b, &wait)) == SL_OK) {
      batch_view v;
      if ((rc = view_batch(b, &v)) != SL_OK) {
        status = fail("a training batch", rc);
        goto out;
      }
      cache_batch(cache, &ncached, &v);
      const double t = now_s();
      train_step(m, &v, lr, &at.loss, NULL);
      step += now_s() - t;
      steps++;
      at.seen += v.n;
      at.batches++;
      at.steps++;
      sl_sample_release(b);
      b = NULL;
    }
    if (stopped) break; /* mid-epoch: no evaluation, no epoch line */
    if ((!o.limit || at.batches < o.limit) && rc != SL_EOF) {
      status = fail("the training pipeline", rc);
      goto out;
    }
    if (at.seen == 0) {
      fprintf(stderr, "trainer: the training pipeline yielded no sample\n");
      goto out;
    }
    const double r0 = now_s();
    memcpy(scratch, m, sizeof *m);
    const double cstep = cached_step_s(cache, ncached, scratch, lr);
    const double replay = now_s() - r0;
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
    const double dt = now_s() - e0 - replay;
    const double sstep = steps ? step / (double)steps : 0.0;
    printf("epoch=%d loss=%.4f test_acc=%.4f wait=%.3f step_us=%.1f "
           "cached_step_us=%.1f interference=%.2f\n",
           e, at.loss / (double)at.seen, (double)correct / (double)tested,
           wait / dt, sstep * 1e6, cstep * 1e6,
           cstep > 0.0 ? sstep / cstep : 0.0);
    fflush(stdout);
  }
  /* After the last epoch the checkpoint says so: a resume with more
   * --epochs starts the next one. */
  if (!stopped) {
    at.epoch = e;
    at.fresh = 1;
    at.batches = 0, at.loss = 0.0, at.seen = 0;
  }
  if (o.save && save_checkpoint(o.save, train, m, &at) != 0) goto out;
  status = 0;

out:
  sl_sample_release(b);
  sl_reader_destroy(train);
  sl_reader_destroy(test);
  cache_free(cache, ncached);
  free(scratch);
  free(m);
  return status;
}
