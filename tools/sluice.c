/*
 * sluice.c - the `sluice` command: dispatches to its subcommands (pack,
 * inspect, verify, cat, run), and answers --help and --version.
 *
 * Exit statuses, everywhere: 0 success, 1 failure (with a message on
 * stderr), 2 bad usage (message and usage on stderr).  docs/CLI.md is the
 * manual.
 */
#include "cli.h"

#include <string.h>
#include <zlib.h>
#include <zstd.h>

/* The same lines as docs/CLI.md's synopsis, and each subcommand's usage
 * lines are among them (tests/cli/synopsis.sh). */
static const char synopsis[] =
    "  sluice pack idx IMAGES LABELS -o OUT.slr [options]\n"
    "  sluice pack text FILE... -o OUT.slr [options]\n"
    "  sluice pack images FOLDER -o OUT.slr [options]\n"
    "  sluice pack images FOLDER --format wds -o OUT.tar [options]\n"
    "  sluice pack wds SHARD... -o OUT.slr [options]\n"
    "  sluice pack tokens FILE... -o OUT.bin [options]\n"
    "  sluice inspect [--json] [--chunks] [--max-chunk-bytes N] FILE\n"
    "  sluice verify [-q] [--max-chunk-bytes N] FILE...\n"
    "  sluice cat [--from K] [--count N] [--json] [--max-chunk-bytes N] FILE\n"
    "  sluice run [--epochs N | --limit N] SCRIPT [ARGS...]\n"
    "  sluice run [--stop-after N] [--save-state FILE] [--resume FILE]\n"
    "             [--digest] [--stats] [--memory SIZE] [--epochs N]\n"
    "             SCRIPT [ARGS...]\n"
    "  sluice help [COMMAND]\n"
    "  sluice --version\n";

static void print_help(FILE *o) {
  fprintf(o,
          "sluice - pack, inspect, verify and read SLR record files; run Lua "
          "pipeline scripts\n"
          "\n"
          "Usage:\n%s"
          "\n"
          "Commands:\n"
          "  pack     pack idx (MNIST), text, image or WebDataset files "
          "into SLR\n"
          "           file(s), or text into llm.c token shards\n"
          "  inspect  show a file's schema, counts, sizes and compression\n"
          "  verify   check every checksum, size and index entry of files\n"
          "  cat      print records as text or JSON lines\n"
          "  run      iterate a Lua pipeline script, print samples/s\n"
          "\n"
          "Run 'sluice COMMAND --help' for a command's options.\n"
          "Exit status: 0 success, 1 failure (message on stderr), 2 bad "
          "usage.\n",
          synopsis);
}

typedef struct command {
  const char *name;
  int (*fn)(int argc, char **argv);
} command;

static const command commands[] = {
    {"pack", cmd_pack}, {"inspect", cmd_inspect}, {"verify", cmd_verify},
    {"cat", cmd_cat},   {"run", cmd_run},
};

static const command *find_command(const char *name) {
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "sluice: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nUsage:\n%sRun 'sluice --help' for details.\n", synopsis);
  return CLI_USAGE;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage_error("%s", "no command given");
  const char *a = argv[1];
  if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
    print_help(stdout);
    return CLI_OK;
  }
  if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
    printf("sluice %s (libsluice %s, zstd %s, zlib %s)\n", SL_VERSION_STRING,
           sl_version(), ZSTD_versionString(), zlibVersion());
    return CLI_OK;
  }
  if (strcmp(a, "help") == 0) {
    if (argc == 2) {
      print_help(stdout);
      return CLI_OK;
    }
    const command *c = find_command(argv[2]);
    if (!c) return usage_error("unknown command '%s'", argv[2]);
    static char help_opt[] = "--help";
    char *args[] = {argv[2], help_opt, NULL};
    return c->fn(2, args);
  }
  if (a[0] == '-') return usage_error("unknown option '%s'", a);
  const command *c = find_command(a);
  if (!c) return usage_error("unknown command '%s'", a);
  int rc = c->fn(argc - 1, argv + 1);
  /* Output that could not be written (a full disk, a closed pipe) is a
   * failure even when the command itself succeeded. */
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "sluice: %s: cannot write the output\n", a);
    if (rc == CLI_OK) rc = CLI_FAIL;
  }
  return rc;
}
