/*
 * cmd_run.c - `sluice run [--epochs N] [--limit N] SCRIPT [ARGS...]`: opens
 * the pipeline a Lua script returns (sl_pipeline_open_file, the embedding
 * API of docs/EMBEDDING.md), iterates it and prints batches, samples,
 * samples/s and batches/s per epoch and in total.
 *
 * Options come before SCRIPT; everything after SCRIPT goes to the script
 * (its `...` and `arg`), options included, so a script can take its own.
 * A batch's samples are the leading dimension of its first field (1 for a
 * scalar first field, i.e. a pipeline without batch()).
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
    "per epoch and in total, batches, samples (the sum of each batch's\n"
    "leading dimension), samples/s and batches/s.  A progress line goes to\n"
    "stderr when it is a terminal.  Options must come before SCRIPT:\n"
    "everything after it is the script's.\n"
    "\n"
    "The script runs in a Lua state of its own: `require \"sluice\"` needs\n"
    "LUA_PATH / LUA_CPATH when sluice is not installed under /usr/local\n"
    "(docs/EMBEDDING.md).\n"
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

/* Samples of one batch: the leading dimension of its first field. */
static int64_t batch_samples(sl_sample *b) {
  if (sl_sample_nfields(b) < 1) return 0;
  const sl_tensor *t = sl_sample_at(b, 0);
  if (!t || sl_tensor_rank(t) < 1) return 1;
  return sl_tensor_shape(t)[0];
}

static double rate(double n, double dt) {
  return dt > 0 ? n / dt : 0.0;
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
    double last_progress = e0;
    sl_sample *b = NULL;
    while ((rc = sl_pipeline_next(pl, &b)) == SL_OK) {
      batches++;
      samples += batch_samples(b);
      sl_sample_release(b);
      b = NULL;
      if (tty) {
        double now = cli_now();
        if (now - last_progress >= 0.2) {
          last_progress = now;
          fprintf(stderr,
                  "\r\033[Kepoch %" PRIu64 ": %" PRIu64 " batches, %" PRId64
                  " samples, %.0f samples/s",
                  e, batches, samples, rate((double)samples, now - e0));
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
