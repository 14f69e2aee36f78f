/*
 * cmd_verify.c - `sluice verify FILE...`: checks every byte of each file
 * (header, footer, schema, index, every chunk's CRCs, sizes and records)
 * and says which are sound.  All files are checked even after a failure, so
 * one run reports every bad file; the exit status is 0 only when all are
 * sound.
 */
#include "cli.h"
#include "open/shard_set.h"

#include <inttypes.h>
#include <stdlib.h>

static const char synopsis[] =
    "  sluice verify [-q] [--max-chunk-bytes N] FILE...\n";

static const char help[] =
    "Checks each SLR file completely: header, footer, schema and index\n"
    "blocks, then every chunk (header and payload CRC32C, sizes against the\n"
    "file and the index, the zstd frame, the record table and every record\n"
    "against the schema).  Prints 'FILE: ok (N records, C chunks)' on\n"
    "stdout for a sound file, and 'sluice: verify: <problem>' on stderr for\n"
    "a bad one, naming the chunk and byte offset of the first problem.\n"
    "Then checks that the sound files do not mix shards of two pack runs\n"
    "under one name (a failed re-pack), naming the odd file.\n"
    "\n"
    "Exit status: 0 when every file is sound, 1 otherwise, 2 on bad usage.\n"
    "\n"
    "Options:\n"
    "  -q, --quiet  print nothing for sound files\n" CLI_MAX_CHUNK_HELP
    "  -h, --help   this help\n";

enum { OPT_QUIET = 1, OPT_HELP, OPT_MAX_CHUNK };

static const cli_opt opts[] = {
    {"quiet", 'q', false, OPT_QUIET},
    {"max-chunk-bytes", 0, true, OPT_MAX_CHUNK},
    {"help", 'h', false, OPT_HELP},
    {NULL, 0, false, 0},
};

/* Opens and verifies one file; prints its line.  A sound file's schema
 * (its metadata) is retained in *keep for the shard set check. */
static bool verify_one(const char *path, bool quiet,
                       const sl_slr_open_opts *o, sl_schema **keep) {
  sl_slr_file *f = NULL;
  int rc = sl_slr_open(path, o, &f);
  if (rc == SL_OK) rc = sl_slr_verify(f);
  if (rc < 0) {
    cli_fail("verify", rc);
  } else if (!quiet) {
    char shown[4096];
    printf("%s: ok (%" PRIu64 " records, %" PRIu64 " chunks)\n",
           cli_shown(path, shown, sizeof shown), sl_slr_records(f),
           sl_slr_chunks(f));
    fflush(stdout); /* keep the order of stdout and stderr lines */
  }
  if (rc == SL_OK) *keep = sl_schema_retain((sl_schema *)sl_slr_schema(f));
  sl_slr_close(f);
  return rc == SL_OK;
}

int cmd_verify(int argc, char **argv) {
  cli_parser p;
  cli_parser_init(&p, argc, argv, "verify", synopsis, opts);
  bool quiet = false;
  sl_slr_open_opts oo = {0};
  /* Options may follow the files: collect the files first. */
  int nfiles = 0;
  for (;;) {
    const char *v;
    int id = cli_next(&p, &v);
    if (id == CLI_ARG_END) break;
    if (id == CLI_ARG_BAD) return CLI_USAGE;
    if (id == OPT_QUIET) quiet = true;
    if (id == OPT_MAX_CHUNK &&
        cli_max_chunk_bytes("verify", synopsis, v, &oo.max_chunk_bytes) !=
            CLI_OK)
      return CLI_USAGE;
    if (id == OPT_HELP) {
      printf("Usage:\n%s\n%s", synopsis, help);
      return CLI_OK;
    }
    if (id == CLI_ARG_OPERAND) argv[++nfiles] = (char *)v;
  }
  if (nfiles == 0) return cli_usage_error("verify", synopsis, "no file given");
  bool all_ok = true;
  sl_schema **keep = calloc((size_t)nfiles + 1, sizeof *keep);
  if (!keep) return cli_fail("verify", SL_ENOMEM);
  for (int i = 1; i <= nfiles; i++)
    if (!verify_one(argv[i], quiet, &oo, &keep[i])) all_ok = false;
  int rc = sl__shard_set_check(NULL, (const char *const *)argv + 1,
                               (const sl_schema *const *)keep + 1,
                               (size_t)nfiles);
  if (rc < 0) {
    cli_fail("verify", rc);
    all_ok = false;
  }
  for (int i = 1; i <= nfiles; i++)
    sl_schema_release(keep[i]);
  free(keep);
  return all_ok ? CLI_OK : CLI_FAIL;
}
