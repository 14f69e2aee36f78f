/*
 * cli.h - what the subcommands of the `sluice` tool share: exit codes, the
 * option parser, number parsing, error reporting and JSON/text output
 * helpers.  Each subcommand lives in its own cmd_*.c.
 */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include "sluice.h"
#include "sluice/unstable.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses: documented in docs/CLI.md, relied on by scripts. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* The subcommands: argv[0] is the subcommand's name. */
int cmd_pack(int argc, char **argv);
/* `pack tokens` (cmd_pack_tokens.c): argv[0] is "tokens". */
int cmd_pack_tokens(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_run(int argc, char **argv);

/* --- option parsing ---------------------------------------------------------
 * GNU style: options and operands in any order, "--name value",
 * "--name=value", "-x value", "-xvalue", and "--" ending the options. */
typedef struct cli_opt {
  const char *name; /* long name without "--" */
  char short_name;  /* 0 for none */
  bool has_arg;
  int id; /* > 0, returned by cli_next */
} cli_opt;

typedef struct cli_parser {
  int argc;
  char **argv;
  int i;                /* next argument */
  bool operands_only;   /* after "--" */
  const char *cmd;      /* for messages: "pack" */
  const char *synopsis; /* printed after a usage error */
  const cli_opt *opts;  /* terminated by an entry with id 0 */
} cli_parser;

enum { CLI_ARG_END = -1, CLI_ARG_BAD = -2, CLI_ARG_OPERAND = 0 };

/* Starts parsing argv[1..] (argv[0] is the subcommand). */
void cli_parser_init(cli_parser *p, int argc, char **argv, const char *cmd,
                     const char *synopsis, const cli_opt *opts);
/* The next option's id (its value, if any, in *val), CLI_ARG_OPERAND with
 * the operand in *val, CLI_ARG_END, or CLI_ARG_BAD after printing the
 * problem and the synopsis to stderr. */
int cli_next(cli_parser *p, const char **val);

/* Prints "sluice: CMD: <message>" and the synopsis to stderr; returns
 * CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *synopsis, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prints "sluice: CMD: <sl_last_error()>" (or the code's description when
 * there is no detail) to stderr; returns CLI_FAIL. */
int cli_fail(const char *cmd, int rc);

/* Parses a decimal unsigned integer; with `suffixes`, an optional K, M or G
 * (powers of 1024, either case, optional trailing "B" or "iB").  false on
 * junk, a sign, overflow or an empty string. */
bool cli_parse_u64(const char *s, bool suffixes, uint64_t *out);

/* --max-chunk-bytes N of verify, inspect and cat: the reader's limit on a
 * chunk's raw size (sl_slr_open_opts.max_chunk_bytes), 1..4G with a K, M or
 * G suffix.  Sets *out and returns CLI_OK, or prints the usage error and
 * returns CLI_USAGE. */
#define CLI_MAX_CHUNK_HELP                                                     \
  "  --max-chunk-bytes N  refuse chunks above N raw bytes (suffix K, M, G;\n"  \
  "               default: the size the file records, else 256M)\n"
int cli_max_chunk_bytes(const char *cmd, const char *synopsis, const char *v,
                        uint64_t *out);

/* --- output -----------------------------------------------------------------
 */

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when the bytes there
 * are not one (overlong, surrogate, beyond U+10FFFF, cut short). */
int cli_utf8_len(const unsigned char *p, size_t n);
/* `n` bytes as a JSON string with quotes: valid UTF-8 passes through,
 * control characters and invalid bytes become \u00XX escapes. */
void cli_json_string(FILE *o, const void *data, size_t n);
/* `n` bytes as a C-like quoted string for humans: \n, \t, \", \\, \xNN for
 * other non-printable bytes and invalid UTF-8; at most `max` bytes, then
 * "..." after the closing quote. */
void cli_text_string(FILE *o, const void *data, size_t n, size_t max);
/* `name` as it may be shown: a URL's user:password replaced by "***"
 * (sl__redact_urls, the library's one redaction), into buf. */
const char *cli_shown(const char *name, char *buf, size_t size);
/* "1.5 MB" style (powers of 1000) into buf. */
const char *cli_human_bytes(uint64_t n, char *buf, size_t size);
/* Monotonic seconds. */
double cli_now(void);
/* The packers' summary, printed before their renames (sl__commit_fn):
 * flushes stdout; NULL when it took everything, else the reason, with what
 * it could not take dropped (the pack's error is then the one report). */
const char *cli_summary_flush(void);

/* --- files ------------------------------------------------------------------
 */

/* CRC-32C (Castagnoli) of n bytes. */
uint32_t cli_crc32c(const void *data, size_t n);
/* Writes n bytes to `path` atomically through the output path
 * (src/transport/output.h): a temporary "PATH.tmp-PID-XXXXXX" in the same folder
 * (O_EXCL | O_NOFOLLOW), fsync'd, then renamed over PATH (and the folder
 * fsync'd), so PATH is either its old contents or all the new bytes, never
 * a part.  SL_OK, or SL_EIO / SL_ENOMEM with the detail set (the temporary
 * removed). */
int cli_write_file_atomic(const char *path, const void *data, size_t n);
/* Reads the whole file (at most `max` bytes: SL_EINVAL beyond) into *data
 * (malloc'd, the caller frees) and *n.  SL_OK, or SL_EIO / SL_ENOMEM /
 * SL_EINVAL with the detail set. */
int cli_read_file(const char *path, size_t max, void **data, size_t *n);

#endif
