/*
 * cmd_run.c - `sluice run [--epochs N] [--limit N] SCRIPT [ARGS...]`: opens
 * the pipeline a Lua script returns (sl_pipeline_open_file, the embedding
 * API of docs/EMBEDDING.md), iterates it and prints batches, samples,
 * samples/s and batches/s per epoch and in total.
 *
 * Options come before SCRIPT; everything after SCRIPT goes to the script
 * (its `...` and `arg`), options included, so a script can take its own.
 * Samples are counted as samples: when the chain has a batch stage (its
 * statistics name one), each item is a batch of as many samples as its
 * first field's LoD has sequences, or else its leading dimension; without
 * one, each item is one sample, whatever its shape (a 28x28 image is one
 * sample, not 28).  When the pipeline knows its length (sl_pipeline_length)
 * it is printed, and the progress line shows the share done and an ETA.
 *
 * `--stats` turns timing on (sl_stats_enable) before the pipeline is opened
 * and prints, after the run, the table of sl_stats_format over the run's
 * iteration time (opening excluded): per stage samples in and out, busy
 * time, time waiting on upstream and blocked by downstream, and the stage
 * that limits throughput.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char synopsis[] =
    "  sluice run [--epochs N | --limit N] SCRIPT [ARGS...]\n";

static const char help[] =
    "Runs the Lua pipeline script SCRIPT (it returns a pipeline; ARGS reach\n"
    "it as `...` and as the table `arg`), iterates the batches and prints,\n"
    "per epoch and in total, batches, samples (with a batch stage, the\n"
    "samples in each batch; without one, each item is one sample),\n"
    "samples/s and batches/s.  When the pipeline knows its length, it is\n"
    "printed and the progress line (on stderr, when it is a terminal)\n"
    "shows the share done and an ETA.  Options must come before SCRIPT:\n"
    "everything after it is the script's.\n"
    "\n"
    "The script runs in a Lua state of its own; `require \"sluice\"` finds\n"
    "the Lua modules installed beside the libsluice this command loaded\n"
    "(<libdir>/lua/5.1, <prefix>/share/lua/5.1), or where LUA_PATH /\n"
    "LUA_CPATH say when they are set (docs/EMBEDDING.md).\n"
    "\n"
    "Options:\n"
    "  -e, --epochs N  passes over the pipeline (default 1), reset between\n"
    "  -l, --limit N   stop after N batches in all (with --epochs, whichever\n"
    "                  comes first)\n"
    "      --stats     after the run, per stage: samples in and out, busy\n"
    "                  time, time waiting on upstream and blocked by\n"
    "                  downstream, share of its threads used; and the stage\n"
    "                  that limits throughput (docs/PERFORMANCE.md)\n"
    "  -h, --help      this help\n";

enum { OPT_EPOCHS = 1, OPT_LIMIT, OPT_STATS, OPT_HELP };

static const cli_opt opts[] = {
    {"epochs", 'e', true, OPT_EPOCHS},
    {"limit", 'l', true, OPT_LIMIT},
    {"stats", 0, false, OPT_STATS},
    {"help", 'h', false, OPT_HELP},
    {NULL, 0, false, 0},
};

static double rate(double n, double dt) {
  return dt > 0 ? n / dt : 0.0;
}

/* Samples in one item: 1 without a batch stage; in a batch, the sequences
 * of its first field's LoD (a merged ragged field: its leading dimension
 * counts rows of all samples), else its leading dimension. */
static int64_t item_samples(sl_sample *b, bool batched) {
  if (!batched) return 1;
  const sl_tensor *t = sl_sample_nfields(b) > 0 ? sl_sample_at(b, 0) : NULL;
  if (!t || sl_tensor_rank(t) < 1) return 1;
  if (t->lod && t->lod_len > 0) return t->lod_len - 1;
  return sl_tensor_shape(t)[0];
}

/* Whether the pipeline's chain has a batch stage (its items are batches). */
static bool has_batch_stage(const sl_pipeline *pl) {
  size_t n = 0;
  if (sl_pipeline_stats(pl, NULL, 0, &n) != SL_OK || n == 0) return false;
  sl_stage_stats *st = calloc(n, sizeof *st);
  bool found = false;
  if (st && sl_pipeline_stats(pl, st, n, &n) == SL_OK)
    for (size_t i = 0; i < n && !found; i++)
      found = st[i].name && strcmp(st[i].name, "batch") == 0;
  free(st);
  return found;
}

/* "\r<progress>" on stderr: done/target with the share and an ETA when the
 * target is known (target 0: not known). */
static void progress(uint64_t e, uint64_t batches, int64_t samples,
                     uint64_t target, double dt) {
  fprintf(stderr, "\r\033[Kepoch %" PRIu64 ": %" PRIu64, e, batches);
  if (target > 0) {
    uint64_t left = target > batches ? target - batches : 0;
    double eta = batches > 0 ? dt / (double)batches * (double)left : 0.0;
    fprintf(stderr, "/%" PRIu64 " batches (%.0f%%, ETA %.1f s)", target,
            100.0 * (double)batches / (double)target, eta);
  } else {
    fprintf(stderr, " batches");
  }
  fprintf(stderr, ", %" PRId64 " samples, %.0f samples/s", samples,
          rate((double)samples, dt));
}

static void report(const char *what, uint64_t batches, int64_t samples,
                   double dt) {
  printf("%s: %" PRIu64 " batches, %" PRId64
         " samples in %.3f s: %.0f samples/s, %.1f batches/s\n",
         what, batches, samples, dt, rate((double)samples, dt),
         rate((double)batches, dt));
}

/* The per-stage table over `wall` seconds of iteration. */
static int print_stats(const sl_pipeline *pl, double wall) {
  size_t n = 0;
  int rc = sl_pipeline_stats(pl, NULL, 0, &n);
  if (rc != SL_OK) return cli_fail("run", rc);
  sl_stage_stats *st = calloc(n, sizeof *st);
  if (!st) return cli_fail("run", sl_set_error(SL_ENOMEM, "stats: no memory"));
  rc = sl_pipeline_stats(pl, st, n, &n);
  int len = rc == SL_OK ? sl_stats_format(st, n, wall, NULL, 0) : rc;
  char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (!text) {
    free(st);
    return cli_fail(
        "run", len < 0 ? len : sl_set_error(SL_ENOMEM, "stats: no memory"));
  }
  sl_stats_format(st, n, wall, text, (size_t)len + 1);
  printf("\nstages (cumulative over the run):\n%s", text);
  free(text);
  free(st);
  return CLI_OK;
}

int cmd_run(int argc, char **argv) {
  cli_parser p;
  cli_parser_init(&p, argc, argv, "run", synopsis, opts);
  uint64_t epochs = 1, limit = 0; /* limit 0: none */
  bool stats = false;
  const char *script = NULL, *val;
  int id;
  while (!script && (id = cli_next(&p, &val)) != CLI_ARG_END) {
    switch (id) {
    case CLI_ARG_BAD:
      return CLI_USAGE;
    case OPT_HELP:
      printf("Usage:\n%s\n%s", synopsis, help);
      return CLI_OK;
    case OPT_STATS:
      stats = true;
      break;
    case OPT_EPOCHS:
      if (!cli_parse_u64(val, false, &epochs) || epochs < 1 || epochs > 1000000)
        return cli_usage_error("run", synopsis,
                               "--epochs needs a whole number >= 1 (got '%s')",
                               val);
      break;
    case OPT_LIMIT:
      if (!cli_parse_u64(val, false, &limit) || limit < 1)
        return cli_usage_error("run", synopsis,
                               "--limit needs a whole number >= 1 (got '%s')",
                               val);
      break;
    case CLI_ARG_OPERAND:
      script = val;
      break;
    default:
      break;
    }
  }
  if (!script) return cli_usage_error("run", synopsis, "no script given");
  const int nargs = argc - p.i;
  const char *const *args = (const char *const *)(argv + p.i);

  const bool tty = isatty(STDERR_FILENO) == 1;
  if (stats) sl_stats_enable(1);
  sl_pipeline *pl = NULL;
  double t0 = cli_now();
  int rc = sl_pipeline_open_file(script, nargs, args, &pl);
  if (rc != SL_OK) return cli_fail("run", rc);
  char desc[512];
  printf("pipeline: %s yields %s (opened in %.3f s)\n", script,
         sl_schema_describe(sl_pipeline_schema(pl), desc, sizeof desc),
         cli_now() - t0);
  const bool batched = has_batch_stage(pl);
  uint64_t length = 0;
  bool known = sl_pipeline_length(pl, &length) == SL_OK;
  if (known)
    printf("length: %" PRIu64 " %s per epoch\n", length,
           batched ? "batches" : "samples");
  else
    printf("length: not known (%s)\n", sl_last_error());
  fflush(stdout);

  uint64_t total_batches = 0;
  int64_t total_samples = 0;
  double total_time = 0.0;
  uint64_t e;
  bool stopped = false;
  int status = CLI_OK;
  for (e = 1; e <= epochs && !stopped; e++) {
    const double e0 = cli_now();
    if (e > 1 && (rc = sl_pipeline_reset(pl)) != SL_OK) {
      status = cli_fail("run", rc);
      break;
    }
    uint64_t batches = 0;
    int64_t samples = 0;
    double last_progress = -1.0; /* the first item shows it at once */
    /* What this epoch will yield, for the share and the ETA (0: unknown). */
    uint64_t target = known ? length : 0;
    if (known && limit && limit - total_batches < target)
      target = limit - total_batches;
    sl_sample *b = NULL;
    while ((rc = sl_pipeline_next(pl, &b)) == SL_OK) {
      batches++;
      samples += item_samples(b, batched);
      sl_sample_release(b);
      b = NULL;
      if (tty) {
        double now = cli_now();
        if (last_progress < 0 || now - last_progress >= 0.2) {
          last_progress = now;
          progress(e, batches, samples, target, now - e0);
        }
      }
      if (limit && total_batches + batches >= limit) {
        stopped = true;
        break;
      }
    }
    const double dt = cli_now() - e0;
    if (tty) fprintf(stderr, "\r\033[K");
    if (!stopped && rc != SL_EOF) {
      status = cli_fail("run", rc);
      break;
    }
    char what[64];
    snprintf(what, sizeof what, "epoch %" PRIu64 "%s", e,
             stopped ? " (--limit reached)" : "");
    report(what, batches, samples, dt);
    fflush(stdout);
    total_batches += batches;
    total_samples += samples;
    total_time += dt;
  }
  if (status == CLI_OK) {
    char what[64];
    uint64_t done = e - 1;
    snprintf(what, sizeof what, "total (%" PRIu64 " epoch%s)", done,
             done == 1 ? "" : "s");
    report(what, total_batches, total_samples, total_time);
    if (stats) status = print_stats(pl, total_time);
  }
  sl_pipeline_close(pl);
  return status;
}
