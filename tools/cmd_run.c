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
 * sample, not 28).  When the pipeline knows its length (sl_reader_length)
 * it is printed, and the progress line shows the share done and an ETA.
 *
 * `--stats` turns timing on (sl_stats_enable) before the pipeline is opened
 * and prints, after the run, the table of sl_stats_format over the run's
 * iteration time (opening excluded): per stage samples in and out, busy
 * time, time waiting on upstream and blocked by downstream, and the stage
 * that limits throughput.
 *
 * Exact resume (docs/RESUME.md).  `--save-state FILE` writes, when the run
 * stops (--stop-after N samples, --limit, or the last epoch's end), a run
 * state: the CLI's counters (the epoch in progress, whether it ended, its
 * batches and samples, the run's totals) around the pipeline's own state
 * (sl_reader_save), with a magic, a version and a CRC32C of the whole;
 * written atomically (a temporary renamed over FILE).  `--resume FILE`
 * checks it, restores the pipeline (sl_reader_restore: a state of another
 * pipeline is refused naming the stage that differs) and continues the
 * counters, so --epochs, --limit and --stop-after keep meaning the whole
 * run's totals.  `--digest` prints one line per item, "digest EPOCH ITEM
 * HASH" (FNV-1a 64 of every field's dtype, shape, LoD and bytes): what the
 * resume tests compare.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char synopsis[] =
    "  sluice run [--epochs N | --limit N] SCRIPT [ARGS...]\n"
    "  sluice run [--stop-after N] [--save-state FILE] [--resume FILE]\n"
    "             [--digest] [--stats] [--memory SIZE] [--epochs N]\n"
    "             SCRIPT [ARGS...]\n";

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
    "      --memory SIZE  one memory budget for the whole pipeline (a\n"
    "                  number of bytes, with an optional K, M or G: powers\n"
    "                  of 1024): the samples its stages hold stay within\n"
    "                  it (sl_reader_set_budget, docs/CLI.md); --stats\n"
    "                  states it and each stage's bytes held and peak.\n"
    "                  Default: 50 % of the memory the process may use\n"
    "                  (the container's limit, or SLUICE_MEMORY_LIMIT);\n"
    "                  'none': no budget\n"
    "      --stop-after N  stop once N samples of the run (counted across\n"
    "                  epochs, from the start of the first run when\n"
    "                  resuming) are done: at the end of the batch holding\n"
    "                  the N-th sample\n"
    "      --save-state FILE  when the run stops (--stop-after, --limit or\n"
    "                  the last epoch's end), write its state to FILE\n"
    "                  (atomically: a temporary renamed over FILE)\n"
    "      --resume FILE  continue the run FILE holds: the pipeline (the\n"
    "                  same SCRIPT and ARGS) from the saved position, and\n"
    "                  the epoch and sample counts from where they were\n"
    "                  (--epochs 3 means 3 in all); the next batches are\n"
    "                  those the uninterrupted run would have given\n"
    "      --digest    print one line per batch (sample, without a batch\n"
    "                  stage): digest EPOCH INDEX HASH (a 64-bit hash of\n"
    "                  its fields' dtypes, shapes and bytes)\n"
    "  -h, --help      this help\n"
    "\n"
    "Exit status: 0 done; 1 a failure (the script, the pipeline, a state\n"
    "file that cannot be written or read, is not a run state, is corrupt,\n"
    "or belongs to another pipeline: the message says which); 2 bad usage.\n";

enum {
  OPT_EPOCHS = 1,
  OPT_LIMIT,
  OPT_STATS,
  OPT_STOP_AFTER,
  OPT_SAVE_STATE,
  OPT_RESUME,
  OPT_DIGEST,
  OPT_MEMORY,
  OPT_HELP
};

static const cli_opt opts[] = {
    {"epochs", 'e', true, OPT_EPOCHS},
    {"limit", 'l', true, OPT_LIMIT},
    {"stats", 0, false, OPT_STATS},
    {"stop-after", 0, true, OPT_STOP_AFTER},
    {"save-state", 0, true, OPT_SAVE_STATE},
    {"resume", 0, true, OPT_RESUME},
    {"digest", 0, false, OPT_DIGEST},
    {"memory", 0, true, OPT_MEMORY},
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
static bool has_batch_stage(const sl_reader *pl) {
  size_t n = 0;
  if (sl_reader_stats(pl, NULL, 0, &n) != SL_OK || n == 0) return false;
  sl_stage_stats *st = calloc(n, sizeof *st);
  bool found = false;
  if (st && sl_reader_stats(pl, st, n, &n) == SL_OK)
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

/* `batches` and `samples` of an epoch or of the run; `here_*` of them were
 * read by this process in `dt` seconds (fewer after --resume: the rates are
 * of those). */
static void report(const char *what, uint64_t batches, int64_t samples,
                   uint64_t here_batches, int64_t here_samples, double dt) {
  printf("%s: %" PRIu64 " batches, %" PRId64 " samples", what, batches,
         samples);
  if (here_batches != batches)
    printf(" (%" PRIu64 " batches, %" PRId64 " samples in this run)",
           here_batches, here_samples);
  printf(" in %.3f s: %.0f samples/s, %.1f batches/s\n", dt,
         rate((double)here_samples, dt), rate((double)here_batches, dt));
}

/* --- the run state file (--save-state, --resume) ---------------------------
 *
 *   0  "SLUICERN"            magic
 *   8  u32 version (1)       u32 flags (bit 0: the epoch had ended)
 *  16  u64 epoch             the epoch in progress (1-based) or just ended
 *  24  u64 batches, u64 samples         of that epoch so far
 *  40  u64 total batches, u64 total samples   of the run so far
 *  56  u64 n                 the pipeline's state (sl_reader_save): n bytes
 *  64  ...                   then u32 CRC32C of everything before it
 *
 * Integers little-endian. */
#define RUN_MAGIC "SLUICERN"
#define RUN_VERSION 1u
#define RUN_HEADER 64
#define RUN_MAX_STATE ((size_t)1 << 30)

typedef struct run_pos {
  uint64_t epoch;
  bool ended;
  uint64_t batches, total_batches;
  int64_t samples, total_samples;
} run_pos;

static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Saves the pipeline and writes FILE. */
static int save_run(sl_reader *pl, const char *path, const run_pos *at) {
  void *st = NULL;
  size_t n = 0;
  int rc = sl_reader_save(pl, &st, &n);
  if (rc != SL_OK) return rc;
  size_t total = RUN_HEADER + n + 4;
  unsigned char *buf = malloc(total);
  if (!buf) {
    sl_free(st);
    return sl_set_error(SL_ENOMEM, "--save-state: out of memory");
  }
  memcpy(buf, RUN_MAGIC, 8);
  put_le(buf + 8, RUN_VERSION, 4);
  put_le(buf + 12, at->ended ? 1 : 0, 4);
  put_le(buf + 16, at->epoch, 8);
  put_le(buf + 24, at->batches, 8);
  put_le(buf + 32, (uint64_t)at->samples, 8);
  put_le(buf + 40, at->total_batches, 8);
  put_le(buf + 48, (uint64_t)at->total_samples, 8);
  put_le(buf + 56, n, 8);
  memcpy(buf + RUN_HEADER, st, n);
  sl_free(st);
  put_le(buf + RUN_HEADER + n, cli_crc32c(buf, RUN_HEADER + n), 4);
  rc = cli_write_file_atomic(path, buf, total);
  free(buf);
  if (rc == SL_OK)
    printf("state: %s (%zu bytes: epoch %" PRIu64 "%s, %" PRId64
           " samples of the run)\n",
           path, total, at->epoch, at->ended ? " ended" : "",
           at->total_samples);
  return rc;
}

/* Reads FILE, checks it and restores the pipeline; *at gets the counters. */
static int resume_run(sl_reader *pl, const char *path, run_pos *at) {
  void *data = NULL;
  size_t len = 0;
  int rc = cli_read_file(path, RUN_MAX_STATE, &data, &len);
  if (rc != SL_OK) return rc;
  const unsigned char *b = data;
  if (len < 8 || memcmp(b, RUN_MAGIC, 8) != 0) {
    rc = sl_set_error(SL_ECORRUPT,
                      "--resume %s: not a run state of `sluice run "
                      "--save-state` (%zu bytes, no " RUN_MAGIC " header)",
                      path, len);
  } else if (len < RUN_HEADER + 4) {
    rc = sl_set_error(SL_ECORRUPT,
                      "--resume %s: cut short (%zu bytes, a run state has at "
                      "least %d)",
                      path, len, RUN_HEADER + 4);
  } else if (get_le(b + 8, 4) != RUN_VERSION) {
    rc = sl_set_error(SL_EUNSUPPORTED,
                      "--resume %s: run state version %" PRIu64
                      ", this sluice reads version %u",
                      path, get_le(b + 8, 4), RUN_VERSION);
  } else if (get_le(b + 56, 8) != len - RUN_HEADER - 4) {
    rc = sl_set_error(SL_ECORRUPT,
                      "--resume %s: %zu bytes, but the header says %" PRIu64
                      " bytes of pipeline state (cut short or padded)",
                      path, len, get_le(b + 56, 8) + RUN_HEADER + 4);
  } else if (get_le(b + len - 4, 4) != cli_crc32c(b, len - 4)) {
    rc = sl_set_error(SL_ECORRUPT,
                      "--resume %s: checksum mismatch (the file is corrupt)",
                      path);
  } else {
    at->ended = get_le(b + 12, 4) & 1;
    at->epoch = get_le(b + 16, 8);
    at->batches = get_le(b + 24, 8);
    at->samples = (int64_t)get_le(b + 32, 8);
    at->total_batches = get_le(b + 40, 8);
    at->total_samples = (int64_t)get_le(b + 48, 8);
    rc = at->epoch >= 1
             ? SL_OK
             : sl_set_error(SL_ECORRUPT, "--resume %s: epoch 0", path);
    if (rc == SL_OK) {
      rc = sl_reader_restore(pl, b + RUN_HEADER, len - RUN_HEADER - 4);
      if (rc != SL_OK) {
        /* Keep the pipeline's message, saying which file. */
        char *msg = strdup(sl_last_error());
        rc = sl_set_error(rc, "--resume %s: %s", path,
                          msg ? msg : "cannot restore");
        free(msg);
      }
    }
  }
  free(data);
  return rc;
}

/* FNV-1a 64 of every field's dtype, rank, shape, bytes and LoD. */
static uint64_t item_digest(sl_sample *s) {
  uint64_t h = 1469598103934665603ull;
#define MIX(p, n)                                                              \
  do {                                                                         \
    const unsigned char *b_ = (const unsigned char *)(p);                      \
    for (size_t i_ = 0; i_ < (size_t)(n); i_++) {                              \
      h ^= b_[i_];                                                             \
      h *= 1099511628211ull;                                                   \
    }                                                                          \
  } while (0)
  int nf = sl_sample_nfields(s);
  for (int i = 0; i < nf; i++) {
    const sl_tensor *t = sl_sample_at(s, i);
    int32_t dt = (int32_t)t->dtype, rank = (int32_t)t->rank;
    MIX(&dt, sizeof dt);
    MIX(&rank, sizeof rank);
    MIX(t->shape, sizeof t->shape[0] * (size_t)t->rank);
    if (t->nbytes) MIX(t->data, t->nbytes);
    int64_t ll = t->lod_len;
    MIX(&ll, sizeof ll);
    if (t->lod_len) MIX(t->lod, sizeof *t->lod * (size_t)t->lod_len);
  }
#undef MIX
  return h;
}

/* The per-stage table over `wall` seconds of iteration. */
static int print_stats(const sl_reader *pl, double wall) {
  size_t n = 0;
  int rc = sl_reader_stats(pl, NULL, 0, &n);
  if (rc != SL_OK) return cli_fail("run", rc);
  sl_stage_stats *st = calloc(n, sizeof *st);
  if (!st) return cli_fail("run", sl_set_error(SL_ENOMEM, "stats: no memory"));
  rc = sl_reader_stats(pl, st, n, &n);
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
  uint64_t epochs = 1, limit = 0, stop_after = 0, memory = 0; /* 0: none */
  bool stats = false, digest = false, no_memory = false;
  const char *script = NULL, *val, *save_path = NULL, *resume_path = NULL;
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
    case OPT_DIGEST:
      digest = true;
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
    case OPT_STOP_AFTER:
      if (!cli_parse_u64(val, false, &stop_after) || stop_after < 1 ||
          stop_after > INT64_MAX)
        return cli_usage_error(
            "run", synopsis,
            "--stop-after needs a whole number >= 1 (got '%s')", val);
      break;
    case OPT_MEMORY:
      if (!strcmp(val, "none")) {
        no_memory = true;
        memory = 0;
        break;
      }
      no_memory = false;
      if (!cli_parse_u64(val, true, &memory) || memory < 1)
        return cli_usage_error("run", synopsis,
                               "--memory needs a size >= 1 byte (a number "
                               "with an optional K, M or G) or 'none' (got "
                               "'%s')",
                               val);
      break;
    case OPT_SAVE_STATE:
      if (!*val)
        return cli_usage_error("run", synopsis, "--save-state needs a file");
      save_path = val;
      break;
    case OPT_RESUME:
      if (!*val)
        return cli_usage_error("run", synopsis, "--resume needs a file");
      resume_path = val;
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
  sl_reader *pl = NULL;
  double t0 = cli_now();
  int rc = sl_pipeline_open_file(script, nargs, args, &pl);
  if (rc != SL_OK) return cli_fail("run", rc);
  /* --memory SIZE, --memory none, or the default budget (unless the
   * script set a budget or none itself). */
  rc = memory      ? sl_reader_set_budget(pl, memory)
       : no_memory ? sl_reader_set_no_budget(pl)
                   : sl_reader_default_budget(pl);
  if (rc != SL_OK) {
    sl_reader_destroy(pl);
    return cli_fail("run", rc);
  }
  char desc[512];
  printf("pipeline: %s yields %s (opened in %.3f s)\n", script,
         sl_schema_describe(sl_reader_schema(pl), desc, sizeof desc),
         cli_now() - t0);
  const bool batched = has_batch_stage(pl);
  uint64_t length = 0;
  bool known = sl_reader_length(pl, &length) == SL_OK;
  if (known)
    printf("length: %" PRIu64 " %s per epoch\n", length,
           batched ? "batches" : "samples");
  else
    printf("length: not known (%s)\n", sl_last_error());

  /* Where the run stands: a fresh run is before epoch 1; a resumed one
   * continues the saved epoch (or starts the next, when it had ended). */
  run_pos at = {.epoch = 1};
  if (resume_path) {
    t0 = cli_now();
    if ((rc = resume_run(pl, resume_path, &at)) != SL_OK) {
      sl_reader_destroy(pl);
      return cli_fail("run", rc);
    }
    printf("resumed: %s: epoch %" PRIu64 "%s, %" PRIu64 " batches, %" PRId64
           " samples into it, %" PRId64 " samples of the run (in %.3f s)\n",
           resume_path, at.epoch, at.ended ? " ended" : "", at.batches,
           at.samples, at.total_samples, cli_now() - t0);
  }
  fflush(stdout);

  const run_pos at0 = at;
  uint64_t total_batches = at.total_batches;
  int64_t total_samples = at.total_samples;
  double total_time = 0.0;
  uint64_t e;
  bool stopped = false;
  const char *why = "";
  int status = CLI_OK;
  /* Stopping before any pull: a resumed run already past its limits. */
  if (limit && total_batches >= limit)
    stopped = true, why = " (--limit reached)";
  if (stop_after && (uint64_t)total_samples >= stop_after)
    stopped = true, why = " (--stop-after reached)";
  /* The epoch ended stays `at.epoch` until the next one starts. */
  uint64_t first = at.ended ? at.epoch + 1 : at.epoch;
  bool in_epoch = false; /* pulled (or resumed) into epoch e, not ended */
  for (e = first; e <= epochs && !stopped; e++) {
    const double e0 = cli_now();
    const bool resumed_here = resume_path && e == at.epoch && !at.ended;
    if (e > 1 && !resumed_here && (rc = sl_reader_reset(pl)) != SL_OK) {
      status = cli_fail("run", rc);
      break;
    }
    uint64_t batches = resumed_here ? at.batches : 0;
    int64_t samples = resumed_here ? at.samples : 0;
    in_epoch = true;
    double last_progress = -1.0; /* the first item shows it at once */
    /* What this epoch will yield, for the share and the ETA (0: unknown). */
    uint64_t target = known ? length : 0;
    if (known && limit && limit - total_batches + batches < target)
      target = limit - total_batches + batches;
    const uint64_t batches0 = batches;
    const int64_t samples0 = samples;
    sl_sample *b = NULL;
    while ((rc = sl_reader_next(pl, &b)) == SL_OK) {
      const int64_t n = item_samples(b, batched);
      if (digest)
        printf("digest %" PRIu64 " %" PRIu64 " %016" PRIx64 "\n", e, batches,
               item_digest(b));
      batches++;
      samples += n;
      sl_sample_release(b);
      b = NULL;
      if (tty) {
        double now = cli_now();
        if (last_progress < 0 || now - last_progress >= 0.2) {
          last_progress = now;
          progress(e, batches, samples, target, now - e0);
        }
      }
      if (limit && total_batches + (batches - batches0) >= limit) {
        stopped = true;
        why = " (--limit reached)";
      }
      if (stop_after &&
          (uint64_t)(total_samples + (samples - samples0)) >= stop_after) {
        stopped = true;
        why = " (--stop-after reached)";
      }
      if (stopped) break;
    }
    const double dt = cli_now() - e0;
    if (tty) fprintf(stderr, "\r\033[K");
    if (!stopped && rc != SL_EOF) {
      status = cli_fail("run", rc);
      break;
    }
    if (!stopped) in_epoch = false;
    char what[96];
    snprintf(what, sizeof what, "epoch %" PRIu64 "%s%s", e,
             resumed_here ? " (resumed)" : "", stopped ? why : "");
    report(what, batches, samples, batches - batches0, samples - samples0, dt);
    fflush(stdout);
    total_batches += batches - batches0;
    total_samples += samples - samples0;
    total_time += dt;
    at.epoch = e;
    at.ended = !in_epoch;
    at.batches = batches;
    at.samples = samples;
  }
  if (status == CLI_OK) {
    char what[64];
    /* The epochs of the run, resumed ones included (as the uninterrupted
     * run would say); the times are this process's. */
    snprintf(what, sizeof what, "total (%" PRIu64 " epoch%s)", at.epoch,
             at.epoch == 1 ? "" : "s");
    report(what, total_batches, total_samples,
           total_batches - at0.total_batches, total_samples - at0.total_samples,
           total_time);
    at.total_batches = total_batches;
    at.total_samples = total_samples;
    if (save_path && (rc = save_run(pl, save_path, &at)) != SL_OK)
      status = cli_fail("run", rc);
    if (status == CLI_OK && stats) status = print_stats(pl, total_time);
  }
  sl_reader_destroy(pl);
  return status;
}
