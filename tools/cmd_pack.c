/*
 * cmd_pack.c - `sluice pack idx|text|images ... -o OUT.slr`: packs idx
 * (MNIST) files, text files or a folder of JPEG/PNG images into one SLR
 * file or K shards.
 *
 * The work is done by the library's internal importers (src/io/import_*.c),
 * the same functions the tests call; this file parses options, shows a
 * progress line when stderr is a terminal, and turns Ctrl-C into a clean
 * abort (the importers then remove their temporary files, so an interrupted
 * pack leaves nothing that looks finished).
 */
#include "cli.h"
#include "image/image.h"
#include "io/import.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char synopsis[] =
    "  sluice pack idx IMAGES LABELS -o OUT.slr [options]\n"
    "  sluice pack text FILE... -o OUT.slr [options]\n"
    "  sluice pack images FOLDER -o OUT.slr [options]\n";

static const char help[] =
    "Packs data into SLR record files (format: docs/FORMAT.md).\n"
    "\n"
    "Formats:\n"
    "  idx    MNIST-style idx files, plain or gzip-compressed: IMAGES (u8,\n"
    "         N x rows x cols) and LABELS (u8, N) become N records\n"
    "         {image: u8[rows,cols], label: i64}, with schema metadata\n"
    "         source=idx, images=<basename>, labels=<basename>.\n"
    "  text   one record {text: bytes[-1]} per line of each FILE, in order;\n"
    "         the newline and one trailing \\r are removed, an empty line is\n"
    "         an empty record, a last line without a newline counts.\n"
    "  images every *.jpg, *.jpeg and *.png file below FOLDER, sorted by\n"
    "         path, becomes a record {image: bytes (the file, unchanged),\n"
    "         label: i64}; the label is the index of the image's first-level\n"
    "         sub-folder (its class) in sorted order, and the sorted class\n"
    "         names, joined by ',', are the schema metadata \"classes\"\n"
    "         (docs/IMAGES.md).  Decode on read: sl_decode_image, or\n"
    "         :decode_image{} in Lua.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE       the output file (required)\n"
    "  --level N               zstd level, 1..22 (default 3)\n"
    "  --chunk-bytes N         target raw bytes per chunk; suffix K, M or G\n"
    "                          (powers of 1024; default 1M, at most 1G)\n"
    "  --records-per-chunk N   exactly N records per chunk (the last may\n"
    "                          have fewer); overrides --chunk-bytes\n"
    "  --shards K              write K files instead of one, named from OUT\n"
    "                          without its \".slr\": for -o data.slr and K=4,\n"
    "                          data-00000-of-00004.slr .. "
    "data-00003-of-00004.slr\n"
    "  --shard-mode MODE       how records are dealt to shards:\n"
    "                          round-robin (default): record i goes to shard\n"
    "                            i mod K;\n"
    "                          contiguous: shard s holds one consecutive\n"
    "                            range; sizes differ by at most 1, the first\n"
    "                            shards holding the extra records\n"
    "  -q, --quiet             no progress line and no summary\n"
    "  -h, --help              this help\n"
    "\n"
    "Each file is written under a temporary name (NAME.tmp-PID) and renamed\n"
    "when complete; on any failure or interruption no output is left under\n"
    "the final name(s).  A progress line (records, MB/s) is shown on stderr\n"
    "when it is a terminal.\n";

enum {
  OPT_OUT = 1,
  OPT_LEVEL,
  OPT_CHUNK_BYTES,
  OPT_RPC,
  OPT_SHARDS,
  OPT_SHARD_MODE,
  OPT_QUIET,
  OPT_HELP
};

static const cli_opt opts[] = {
    {"output", 'o', true, OPT_OUT},
    {"level", 0, true, OPT_LEVEL},
    {"chunk-bytes", 0, true, OPT_CHUNK_BYTES},
    {"records-per-chunk", 0, true, OPT_RPC},
    {"shards", 0, true, OPT_SHARDS},
    {"shard-mode", 0, true, OPT_SHARD_MODE},
    {"quiet", 'q', false, OPT_QUIET},
    {"help", 'h', false, OPT_HELP},
    {NULL, 0, false, 0},
};

/* --- progress and interruption ------------------------------------------- */

static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig) {
  g_interrupted = sig;
}

typedef struct progress {
  bool tty;
  double start, last;
  int width; /* characters of the line on screen, to clear it */
} progress;

static int on_progress(void *ud, uint64_t records, uint64_t bytes) {
  progress *p = ud;
  if (g_interrupted)
    return sl_set_error(SL_EKILLED, "interrupted by signal %d",
                        (int)g_interrupted);
  if (!p->tty) return SL_OK;
  double now = cli_now();
  if (now - p->last < 0.1) return SL_OK;
  p->last = now;
  double dt = now - p->start;
  int w = fprintf(stderr, "\rsluice pack: %llu records, %.1f MB/s",
                  (unsigned long long)records,
                  dt > 0 ? (double)bytes / 1e6 / dt : 0.0);
  if (w > p->width) p->width = w;
  fflush(stderr);
  return SL_OK;
}

static void clear_progress(progress *p) {
  if (p->width > 0) fprintf(stderr, "\r%*s\r", p->width, "");
  p->width = 0;
}

/* Bytes of the finished output(s), for the summary. */
static uint64_t output_bytes(const char *out, uint32_t shards) {
  uint64_t total = 0;
  struct stat st;
  if (!shards) return stat(out, &st) == 0 ? (uint64_t)st.st_size : 0;
  size_t cap = strlen(out) + 32;
  char *name = malloc(cap);
  if (!name) return 0;
  for (uint32_t i = 0; i < shards; i++)
    if (sl__shard_name(out, i, shards, name, cap) == SL_OK &&
        stat(name, &st) == 0)
      total += (uint64_t)st.st_size;
  free(name);
  return total;
}

int cmd_pack(int argc, char **argv) {
  cli_parser p;
  cli_parser_init(&p, argc, argv, "pack", synopsis, opts);
  sl__pack_opts po = {0};
  const char *out = NULL, *fmt = NULL;
  const char **in = calloc((size_t)argc, sizeof *in);
  size_t nin = 0;
  bool quiet = false;
  int rc = CLI_OK;
  if (!in) {
    fprintf(stderr, "sluice: pack: out of memory\n");
    return CLI_FAIL;
  }
  for (;;) {
    const char *v;
    uint64_t n = 0;
    int id = cli_next(&p, &v);
    if (id == CLI_ARG_END) break;
    if (id == CLI_ARG_BAD) {
      rc = CLI_USAGE;
      goto done;
    }
    switch (id) {
    case CLI_ARG_OPERAND:
      if (!fmt)
        fmt = v;
      else
        in[nin++] = v;
      break;
    case OPT_OUT:
      out = v;
      break;
    case OPT_LEVEL:
      if (!cli_parse_u64(v, false, &n) || n < 1 || n > 22) {
        rc = cli_usage_error("pack", synopsis,
                             "--level wants a zstd level 1..22, not '%s'", v);
        goto done;
      }
      po.writer.level = (int)n;
      break;
    case OPT_CHUNK_BYTES:
      if (!cli_parse_u64(v, true, &n) || n < 1 || n > (1u << 30)) {
        rc = cli_usage_error("pack", synopsis,
                             "--chunk-bytes wants 1..1G bytes (suffix K, M "
                             "or G), not '%s'",
                             v);
        goto done;
      }
      po.writer.chunk_bytes = (size_t)n;
      break;
    case OPT_RPC:
      if (!cli_parse_u64(v, false, &n) || n < 1 || n > UINT32_MAX) {
        rc = cli_usage_error("pack", synopsis,
                             "--records-per-chunk wants a count >= 1, not "
                             "'%s'",
                             v);
        goto done;
      }
      po.writer.records_per_chunk = (uint32_t)n;
      break;
    case OPT_SHARDS:
      if (!cli_parse_u64(v, false, &n) || n < 1 || n > SL__MAX_SHARDS) {
        rc = cli_usage_error("pack", synopsis,
                             "--shards wants a count 1..%u, not '%s'",
                             SL__MAX_SHARDS, v);
        goto done;
      }
      po.shards = (uint32_t)n;
      break;
    case OPT_SHARD_MODE:
      if (strcmp(v, "round-robin") == 0) {
        po.mode = SL__SHARD_ROUND_ROBIN;
      } else if (strcmp(v, "contiguous") == 0) {
        po.mode = SL__SHARD_CONTIGUOUS;
      } else {
        rc = cli_usage_error("pack", synopsis,
                             "--shard-mode is round-robin or contiguous, not "
                             "'%s'",
                             v);
        goto done;
      }
      break;
    case OPT_QUIET:
      quiet = true;
      break;
    case OPT_HELP:
      printf("Usage:\n%s\n%s", synopsis, help);
      goto done;
    }
  }
  if (!fmt) {
    rc = cli_usage_error("pack", synopsis,
                         "what to pack: 'idx', 'text' or 'images'");
    goto done;
  }
  bool idx = strcmp(fmt, "idx") == 0, images = strcmp(fmt, "images") == 0;
  if (!idx && !images && strcmp(fmt, "text") != 0) {
    rc =
        cli_usage_error("pack", synopsis,
                        "unknown input format '%s' (idx, text or images)", fmt);
    goto done;
  }
  if (images && nin != 1) {
    rc = cli_usage_error("pack", synopsis,
                         "pack images wants one FOLDER (got %zu)", nin);
    goto done;
  }
  if (idx && nin != 2) {
    rc = cli_usage_error("pack", synopsis,
                         "pack idx wants two files, IMAGES and LABELS "
                         "(got %zu)",
                         nin);
    goto done;
  }
  if (!idx && nin == 0) {
    rc = cli_usage_error("pack", synopsis, "pack text wants input files");
    goto done;
  }
  if (!out) {
    rc = cli_usage_error("pack", synopsis, "no output file (-o OUT.slr)");
    goto done;
  }

  progress prog = {.tty = !quiet && isatty(STDERR_FILENO) == 1};
  prog.start = prog.last = cli_now();
  po.progress = on_progress;
  po.progress_ud = &prog;
  /* SA_RESTART: reads and writes in progress just continue; the flag is
   * seen at the next progress call and the pack aborts cleanly. */
  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  uint64_t records = 0;
  int src = idx      ? sl__pack_idx(in[0], in[1], out, &po, &records)
            : images ? sl__pack_images(in[0], out, &po, &records)
                     : sl__pack_text(in, nin, out, &po, &records);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  clear_progress(&prog);
  if (src < 0) {
    rc = cli_fail("pack", src);
    if (g_interrupted) rc = 128 + (int)g_interrupted;
    goto done;
  }
  if (!quiet) {
    double dt = cli_now() - prog.start;
    char size[32];
    cli_human_bytes(output_bytes(out, po.shards), size, sizeof size);
    if (po.shards) {
      char first[4096];
      sl__shard_name(out, 0, po.shards, first, sizeof first);
      printf("packed %llu records into %u shard%s (%s, ...; %s) in %.2f s\n",
             (unsigned long long)records, po.shards, po.shards == 1 ? "" : "s",
             first, size, dt);
    } else {
      printf("packed %llu records into %s (%s) in %.2f s\n",
             (unsigned long long)records, out, size, dt);
    }
  }
done:
  free(in);
  return rc;
}
