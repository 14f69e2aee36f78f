/*
 * cmd_pack_tokens.c - `sluice pack tokens FILE... -o OUT.bin`: token shards
 * in llm.c's format, the input of the `tokens:` reader (docs/TEXT.md).  The
 * library's sl__pack_tokens (src/pack/import_tokens.c) does the work through
 * the output path every packer shares (src/transport/output.h): unique
 * temporaries, inputs refused as outputs, folders made, all files renamed
 * together, the run's set identity in every header; this file parses the
 * options, catches the signals (sl__out_signals_catch) and prints the
 * summary before the renames.
 */
#include "cli.h"
#include "pack/import.h"

#include <stdlib.h>
#include <string.h>

static const char synopsis[] =
    "  sluice pack tokens FILE... -o OUT.bin [options]\n";

static const char help[] =
    "Writes llm.c token shards (256 x int32 header, uint16 tokens), the\n"
    "input of the tokens: reader (docs/TEXT.md).\n"
    "\n"
    "Options:\n"
    "  -o, --out OUT.bin  the output (required)\n"
    "  --ids            FILEs hold whitespace-separated token ids (0..65535;\n"
    "                   a blank line ends a document); default: bytes\n"
    "  --eos ID         append token ID after every document\n"
    "  --shards K       K shards OUT_000000.bin ... (default 1: OUT itself)\n"
    "                   (a missing folder of OUT is created; OUT may not be\n"
    "                   an input; files are renamed once all are complete)\n"
    "  --val-tokens N   the first N tokens go to OUT_val.bin\n"
    "  -q, --quiet      no summary line\n"
    "  -h, --help       this help\n";

enum {
  OPT_OUT = 1,
  OPT_IDS,
  OPT_EOS,
  OPT_SHARDS,
  OPT_VAL,
  OPT_QUIET,
  OPT_HELP
};

static const cli_opt opts[] = {
    {"out", 'o', true, OPT_OUT},      {"ids", 0, false, OPT_IDS},
    {"eos", 0, true, OPT_EOS},        {"shards", 0, true, OPT_SHARDS},
    {"val-tokens", 0, true, OPT_VAL}, {"quiet", 'q', false, OPT_QUIET},
    {"help", 'h', false, OPT_HELP},   {NULL, 0, false, 0}};

typedef struct summary {
  bool quiet;
  size_t nin;
  uint64_t shards, val;
} summary;

/* Printed and flushed once every file is complete, before the renames: a
 * stdout that cannot take it fails the pack, the old files stay. */
static int print_summary(void *ud, uint64_t n, uint64_t bytes) {
  const summary *p = ud;
  if (p->quiet) return SL_OK;
  printf("packed %llu tokens from %zu file%s into %llu shard%s%s\n",
         (unsigned long long)n, p->nin, p->nin == 1 ? "" : "s",
         (unsigned long long)p->shards, p->shards == 1 ? "" : "s",
         p->val ? " + a validation shard" : "");
  const char *why = cli_summary_flush();
  if (!why) return SL_OK;
  return sl_set_error(SL_EIO,
                      "pack tokens: cannot write the summary to stdout: %s; "
                      "nothing was renamed",
                      why);
}

int cmd_pack_tokens(int argc, char **argv) {
  cli_parser p;
  cli_parser_init(&p, argc, argv, "pack tokens", synopsis, opts);
  const char *out = NULL;
  const char **in = calloc((size_t)argc, sizeof *in);
  size_t nin = 0;
  bool ids = false, quiet = false;
  int64_t eos = -1;
  uint64_t shards = 1, val = 0;
  int rc = CLI_OK;
  if (!in) return CLI_FAIL;
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
      in[nin++] = v;
      break;
    case OPT_OUT:
      out = v;
      break;
    case OPT_IDS:
      ids = true;
      break;
    case OPT_EOS:
      if (!cli_parse_u64(v, false, &n) || n > 65535) {
        rc = cli_usage_error("pack tokens", synopsis,
                             "--eos wants a token id 0..65535, not '%s'", v);
        goto done;
      }
      eos = (int64_t)n;
      break;
    case OPT_SHARDS:
      if (!cli_parse_u64(v, false, &shards) || shards < 1 || shards > 999999) {
        rc = cli_usage_error("pack tokens", synopsis,
                             "--shards wants 1..999999, not '%s'", v);
        goto done;
      }
      break;
    case OPT_VAL:
      if (!cli_parse_u64(v, true, &val)) {
        rc = cli_usage_error("pack tokens", synopsis,
                             "--val-tokens wants a count, not '%s'", v);
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
  if (!out || nin == 0) {
    rc = cli_usage_error("pack tokens", synopsis, "%s",
                         !out ? "missing -o OUT.bin" : "no input files");
    goto done;
  }
  summary sum = {quiet, nin, shards, val};
  sl__tokens_pack_opts po = {.ids = ids,
                             .eos = eos,
                             .shards = (uint32_t)shards,
                             .val = val,
                             .before_commit = print_summary,
                             .ud = &sum};
  sl__out_signals sigs;
  po.cancel = sl__out_signals_catch(&sigs);
  int prc = sl__pack_tokens(in, nin, out, &po, NULL);
  sl__out_signals_restore(&sigs);
  if (prc < 0) {
    const char *msg = sl_last_error();
    fprintf(stderr, "sluice: %s%s\n",
            strncmp(msg, "pack tokens:", 12) == 0 ? "" : "pack tokens: ",
            *msg ? msg : sl_strerror(prc));
    rc = *po.cancel ? 128 + (int)*po.cancel : CLI_FAIL;
  }
done:
  free(in);
  return rc;
}
