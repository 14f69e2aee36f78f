/*
 * cmd_pack.c - `sluice pack idx|text|images|wds ... -o OUT.slr`: packs idx
 * (MNIST) files, text files, a folder of JPEG/PNG images or WebDataset tar
 * shards into one SLR file or K shards (or, images with --format wds, into
 * WebDataset tar shards).
 *
 * The work is done by the library's internal importers (src/pack/import_*.c),
 * the same functions the tests call; this file parses options, shows a
 * progress line when stderr is a terminal, and turns signals into a clean
 * abort through the output path's handlers (src/transport/output.h): SIGINT,
 * SIGTERM and SIGHUP set the cancel flag the writers check between
 * compression blocks (the importers then remove their temporary files); a
 * second one, or any other catchable signal that ends the process
 * (SIGPIPE, SIGALRM, SIGXFSZ, SIGUSR1, ...), removes the temporary files in
 * the handler and ends the process by that signal.  The summary is printed
 * (and flushed) before the outputs are renamed, so a stdout that cannot
 * take it fails the pack and leaves the old outputs.
 */
#include "cli.h"
#include "image/image.h"
#include "pack/import.h"
#include "transport/output.h"
#include "pack/wds_pack.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char synopsis[] =
    "  sluice pack idx IMAGES LABELS -o OUT.slr [options]\n"
    "  sluice pack text FILE... -o OUT.slr [options]\n"
    "  sluice pack images FOLDER -o OUT.slr [options]\n"
    "  sluice pack images FOLDER --format wds -o OUT.tar [options]\n"
    "  sluice pack wds SHARD... -o OUT.slr [options]\n"
    "  sluice pack tokens FILE... -o OUT.bin [options]\n";

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
    "  images every *.jpg, *.jpeg and *.png file below FOLDER becomes a\n"
    "         record {image: bytes (the file, unchanged), label: i64}; the\n"
    "         label is the index of the image's first-level sub-folder (its\n"
    "         class) in sorted order, and the sorted class names, joined by\n"
    "         ',', are the schema metadata \"classes\" (docs/IMAGES.md).\n"
    "         Records are written in a seeded random order (--order,\n"
    "         --seed), so that classes are mixed in every chunk.  Decode on\n"
    "         read: sl_decode_image, or :decode_image{} in Lua.\n"
    "         With --format wds, WebDataset tar shards instead: members\n"
    "         KEY.jpg/KEY.png (the file) and KEY.cls (the label), KEY the\n"
    "         record's number (8 digits); --shards K writes\n"
    "         OUT-000000.tar ... (docs/FORMATS.md).\n"
    "  wds    WebDataset tar shards (brace patterns such as\n"
    "         train-{000000..000127}.tar and globs expand; a SHARD without\n"
    "         a tag is wds:) become one record per sample, in the given\n"
    "         order: {__key__: bytes, one field per member extension: cls\n"
    "         -> i64, *npy -> the array, others -> bytes} (docs/FORMATS.md).\n"
    "  tokens llm.c token shards (OUT.bin, not SLR) from text or token\n"
    "         ids, for the tokens: reader; its options are its own: see\n"
    "         'sluice pack tokens --help' (docs/TEXT.md).\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE       the output file (required)\n"
    "  --level N               zstd level, 1..22 (default 3; 15 with\n"
    "                          --dict)\n"
    "  --chunk-bytes N         target raw bytes per chunk (record table\n"
    "                          included); suffix K, M or G\n"
    "                          (powers of 1024; default 1M, at most 1G)\n"
    "  --records-per-chunk N   exactly N records per chunk (the last may\n"
    "                          have fewer); overrides --chunk-bytes\n"
    "  --frame-records N       framed chunks (SLR 1.1): independent zstd\n"
    "                          frames of N records, so that one record is\n"
    "                          read by decoding its frame, not its chunk\n"
    "                          (default with --dict: about 4 KiB of records\n"
    "                          per frame)\n"
    "  --dict auto|FILE        compress the frames with a zstd dictionary:\n"
    "                          auto trains one on the first --dict-sample\n"
    "                          bytes of records; FILE is one made by\n"
    "                          `zstd --train` (at most 16M).  Stored once\n"
    "                          in each file.  Files with frames need a\n"
    "                          reader of SLR 1.1 (docs/FORMAT.md)\n"
    "  --dict-size N           auto: the dictionary's size (default 110K)\n"
    "  --dict-sample N         auto: bytes of records to train on (default\n"
    "                          8M, at most 1G)\n"
    "  --compact-frames        frames with a compact frame table and\n"
    "                          without zstd's magic number: ~8 bytes less\n"
    "                          a frame; such files need a reader of this\n"
    "                          version (required feature bit 0x8).\n"
    "                          Implies frames\n"
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
    "  --order ORDER           images only: random (default): the files in\n"
    "                          a random order drawn from --seed (the same\n"
    "                          folder and seed give the same file); sorted:\n"
    "                          sorted by path, i.e. by class\n"
    "  --seed N                images only: the seed of --order random\n"
    "                          (default 0)\n"
    "  --format FMT            images only: slr (default) or wds (tar\n"
    "                          shards, see above)\n"
    "  -q, --quiet             no progress line and no summary\n"
    "  -h, --help              this help\n"
    "\n"
    "Each file is written under a unique temporary name\n"
    "(NAME.tmp-PID-XXXXXX); the files are renamed only once all of them are\n"
    "complete and synced and the summary line is written, so on any failure\n"
    "or signal the files under the final name(s) are left as they were.  A\n"
    "missing output folder is created.  An output that is one of the inputs\n"
    "is refused.  A progress line (records, MB/s) is shown on stderr when it\n"
    "is a terminal.\n";

enum {
  OPT_OUT = 1,
  OPT_LEVEL,
  OPT_CHUNK_BYTES,
  OPT_RPC,
  OPT_FRAME_RECORDS,
  OPT_DICT,
  OPT_DICT_SIZE,
  OPT_DICT_SAMPLE,
  OPT_COMPACT_FRAMES,
  OPT_SHARDS,
  OPT_SHARD_MODE,
  OPT_ORDER,
  OPT_SEED,
  OPT_FORMAT,
  OPT_QUIET,
  OPT_HELP
};

static const cli_opt opts[] = {
    {"output", 'o', true, OPT_OUT},
    {"level", 0, true, OPT_LEVEL},
    {"chunk-bytes", 0, true, OPT_CHUNK_BYTES},
    {"records-per-chunk", 0, true, OPT_RPC},
    {"frame-records", 0, true, OPT_FRAME_RECORDS},
    {"dict", 0, true, OPT_DICT},
    {"dict-size", 0, true, OPT_DICT_SIZE},
    {"dict-sample", 0, true, OPT_DICT_SAMPLE},
    {"compact-frames", 0, false, OPT_COMPACT_FRAMES},
    {"shards", 0, true, OPT_SHARDS},
    {"shard-mode", 0, true, OPT_SHARD_MODE},
    {"order", 0, true, OPT_ORDER},
    {"seed", 0, true, OPT_SEED},
    {"format", 0, true, OPT_FORMAT},
    {"quiet", 'q', false, OPT_QUIET},
    {"help", 'h', false, OPT_HELP},
    {NULL, 0, false, 0},
};

/* --- progress and interruption ------------------------------------------- */

/* The interrupt flag of the handlers (sl__out_signals_catch): the signal
 * number once SIGINT, SIGTERM or SIGHUP arrived. */
static const volatile sig_atomic_t *g_cancel;

typedef struct progress {
  bool tty, quiet;
  double start, last;
  int width; /* characters of the line on screen, to clear it */
  const char *out;
  uint32_t shards;
  bool wds; /* tar shards: named by sl__wds_shard_name */
} progress;

static int on_progress(void *ud, uint64_t records, uint64_t bytes) {
  progress *p = ud;
  if (g_cancel && *g_cancel)
    return sl_set_error(SL_EKILLED, "interrupted by signal %d", (int)*g_cancel);
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

/* Prints the summary once every file is complete, before any is renamed
 * (sl__commit_fn): when stdout cannot take it, the pack fails and the old
 * outputs stay, so the exit status and the files agree. */
static int print_summary(void *ud, uint64_t records, uint64_t file_bytes) {
  progress *p = ud;
  clear_progress(p);
  if (p->quiet) return SL_OK;
  double dt = cli_now() - p->start;
  char size[32];
  cli_human_bytes(file_bytes, size, sizeof size);
  if (p->shards) {
    char first[4096];
    if (p->wds)
      sl__wds_shard_name(p->out, 0, first, sizeof first);
    else
      sl__shard_name(p->out, 0, p->shards, first, sizeof first);
    printf("packed %llu records into %u shard%s (%s, ...; %s) in %.2f s\n",
           (unsigned long long)records, p->shards, p->shards == 1 ? "" : "s",
           first, size, dt);
  } else {
    printf("packed %llu records into %s (%s) in %.2f s\n",
           (unsigned long long)records, p->out, size, dt);
  }
  const char *why = cli_summary_flush();
  if (!why) return SL_OK;
  return sl_set_error(SL_EIO,
                      "cannot write the summary to stdout: %s; nothing was "
                      "renamed, %s%s is as it was",
                      why, p->out, p->shards ? " (its shards)" : "");
}

int cmd_pack(int argc, char **argv) {
  /* llm.c token shards, not SLR: a command of its own. */
  if (argc > 1 && strcmp(argv[1], "tokens") == 0)
    return cmd_pack_tokens(argc - 1, argv + 1);
  cli_parser p;
  cli_parser_init(&p, argc, argv, "pack", synopsis, opts);
  sl__pack_opts po = {.shuffle = true};
  const char *out = NULL, *fmt = NULL, *order_opt = NULL, *out_fmt = NULL;
  const char **in = calloc((size_t)argc, sizeof *in);
  size_t nin = 0;
  bool quiet = false;
  void *dict = NULL; /* --dict FILE's bytes */
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
    case OPT_COMPACT_FRAMES:
      po.frames.compact = 1;
      break;
    case OPT_FRAME_RECORDS:
      if (!cli_parse_u64(v, false, &n) || n < 1 || n > UINT32_MAX) {
        rc = cli_usage_error("pack", synopsis,
                             "--frame-records wants a count >= 1, not '%s'",
                             v);
        goto done;
      }
      po.frames.frame_records = (uint32_t)n;
      break;
    case OPT_DICT:
      free(dict);
      dict = NULL;
      po.frames.dict = SL_SLR_DICT_AUTO;
      if (strcmp(v, "auto") == 0) break;
      if (cli_read_file(v, (size_t)16 << 20, &dict, &po.frames.dict_size) <
              0 ||
          po.frames.dict_size == 0) {
        rc = cli_usage_error("pack", synopsis,
                             "--dict is auto or a dictionary file of 1 byte "
                             "to 16M: %s",
                             dict ? "the file is empty" : sl_last_error());
        goto done;
      }
      po.frames.dict = SL_SLR_DICT_GIVEN;
      po.frames.dict_data = dict;
      break;
    case OPT_DICT_SIZE:
    case OPT_DICT_SAMPLE:
      if (!cli_parse_u64(v, true, &n) ||
          (id == OPT_DICT_SIZE ? n < 256 || n > (16u << 20)
                               : n < 1 || n > (1u << 30))) {
        rc = cli_usage_error("pack", synopsis,
                             "%s wants %s bytes (suffix K, M or G), not '%s'",
                             id == OPT_DICT_SIZE ? "--dict-size"
                                                 : "--dict-sample",
                             id == OPT_DICT_SIZE ? "256..16M" : "1..1G", v);
        goto done;
      }
      if (id == OPT_DICT_SIZE)
        po.frames.dict_max_bytes = (size_t)n;
      else
        po.frames.dict_sample_bytes = (size_t)n;
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
    case OPT_ORDER:
      if (strcmp(v, "random") == 0) {
        po.shuffle = true;
      } else if (strcmp(v, "sorted") == 0) {
        po.shuffle = false;
      } else {
        rc = cli_usage_error("pack", synopsis,
                             "--order is random or sorted, not '%s'", v);
        goto done;
      }
      order_opt = "--order";
      break;
    case OPT_SEED:
      if (!cli_parse_u64(v, false, &n)) {
        rc = cli_usage_error("pack", synopsis,
                             "--seed wants an integer 0..2^64-1, not '%s'", v);
        goto done;
      }
      po.seed = n;
      order_opt = "--seed";
      break;
    case OPT_FORMAT:
      if (strcmp(v, "slr") != 0 && strcmp(v, "wds") != 0) {
        rc = cli_usage_error("pack", synopsis,
                             "--format is slr or wds, not '%s'", v);
        goto done;
      }
      out_fmt = v;
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
                         "what to pack: 'idx', 'text', 'images', 'wds' or "
                         "'tokens'");
    goto done;
  }
  bool idx = strcmp(fmt, "idx") == 0, images = strcmp(fmt, "images") == 0;
  bool wds = strcmp(fmt, "wds") == 0;
  bool to_wds = out_fmt && strcmp(out_fmt, "wds") == 0;
  if (!idx && !images && !wds && strcmp(fmt, "text") != 0) {
    rc = cli_usage_error("pack", synopsis,
                         "unknown input format '%s' (idx, text, images, "
                         "wds or tokens)",
                         fmt);
    goto done;
  }
  if (!images && out_fmt) {
    rc = cli_usage_error("pack", synopsis,
                         "--format is for pack images (the others write "
                         "SLR)");
    goto done;
  }
  if (!images && order_opt) {
    rc = cli_usage_error("pack", synopsis,
                         "%s is for pack images (idx and text keep their "
                         "input's order)",
                         order_opt);
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
    rc = cli_usage_error("pack", synopsis, "pack %s wants input files", fmt);
    goto done;
  }
  if (!out) {
    rc = cli_usage_error("pack", synopsis, "no output file (-o OUT.slr)");
    goto done;
  }
  if (to_wds &&
      (po.frames.frame_records || po.frames.dict || po.frames.compact)) {
    rc = cli_usage_error("pack", synopsis,
                         "--frame-records, --dict and --compact-frames are "
                         "for SLR output, not --format wds");
    goto done;
  }

  progress prog = {.tty = !quiet && isatty(STDERR_FILENO) == 1,
                   .quiet = quiet,
                   .out = out,
                   .shards = po.shards,
                   .wds = to_wds};
  prog.start = prog.last = cli_now();
  po.progress = on_progress;
  po.progress_ud = &prog;
  po.before_commit = print_summary;
  sl__out_signals sigs;
  po.cancel = g_cancel = sl__out_signals_catch(&sigs);
  uint64_t records = 0;
  int src = idx      ? sl__pack_idx(in[0], in[1], out, &po, &records)
            : images ? (to_wds ? sl__pack_images_wds(in[0], out, &po, &records)
                               : sl__pack_images(in[0], out, &po, &records))
            : wds    ? sl__pack_wds(in, nin, out, &po, &records)
                     : sl__pack_text(in, nin, out, &po, &records);
  sl__out_signals_restore(&sigs);
  clear_progress(&prog);
  if (src < 0) {
    rc = cli_fail("pack", src);
    if (*g_cancel) rc = 128 + (int)*g_cancel;
  }
done:
  free(dict);
  free(in);
  return rc;
}
