/*
 * cmd_pack_tokens.c - `sluice pack tokens FILE... -o OUT.bin`: writes token
 * shards in llm.c's format (a header of 256 little-endian int32: magic
 * 20240520, version 1, token count; then the uint16 tokens), the input of
 * the `tokens:` reader (docs/TEXT.md).
 *
 * Tokenizers: bytes (default: token = byte, for tests and examples; each
 * file is one document) or ids (--ids: whitespace-separated decimal token
 * ids 0..65535; a blank line ends a document).  --eos ID appends ID after
 * each document.  --shards K splits the tokens into K shards of about the
 * same size, named OUT without ".bin" + "_%06u.bin" (llm.c's naming:
 * data_000000.bin, ...).  --val-tokens N writes the first N tokens to a
 * shard of their own, "<name>_val.bin" (llm.c keeps shard 0 for
 * validation); the rest are the training shards.  Each shard is written
 * to a temporary name and renamed when complete.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LLMC_MAGIC 20240520

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

typedef struct tokens {
  uint16_t *v;
  size_t n, cap;
} tokens;

static bool push(tokens *t, uint16_t x) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1 << 16;
    uint16_t *v = realloc(t->v, cap * sizeof *v);
    if (!v) return false;
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n++] = x;
  return true;
}

/* Appends the tokens of `path`; false after printing why. */
static bool read_file(const char *path, bool ids, int64_t eos, tokens *t) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "sluice: pack tokens: %s: %s\n", path, strerror(errno));
    return false;
  }
  bool ok = true;
  if (!ids) {
    int c;
    while (ok && (c = getc(f)) != EOF)
      ok = push(t, (uint16_t)c);
    if (ok && eos >= 0) ok = push(t, (uint16_t)eos);
  } else {
    char word[32];
    size_t len = 0, line = 1, newlines = 0;
    bool in_doc = false;
    for (int c = getc(f);; c = getc(f)) {
      if (c != EOF && !isspace(c)) {
        if (len + 1 >= sizeof word || !isdigit(c)) {
          fprintf(stderr,
                  "sluice: pack tokens: %s:%zu: a token id is a decimal "
                  "number 0..65535\n",
                  path, line);
          ok = false;
          break;
        }
        word[len++] = (char)c;
        newlines = 0;
        continue;
      }
      if (len) {
        word[len] = 0;
        unsigned long v = strtoul(word, NULL, 10);
        if (v > 65535) {
          fprintf(stderr,
                  "sluice: pack tokens: %s:%zu: token id %s is above "
                  "65535\n",
                  path, line, word);
          ok = false;
          break;
        }
        ok = push(t, (uint16_t)v);
        in_doc = true;
        len = 0;
      }
      if (c == '\n') {
        line++;
        newlines++;
      }
      bool doc_end = c == EOF || newlines == 2;
      if (doc_end && in_doc && eos >= 0) ok = ok && push(t, (uint16_t)eos);
      if (doc_end) in_doc = false;
      if (c == EOF || !ok) break;
    }
  }
  if (!ok && errno == ENOMEM)
    fprintf(stderr, "sluice: pack tokens: out of memory\n");
  fclose(f);
  return ok;
}

static void le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

/* Writes v[0..n) as a shard at `path` (through a temporary); false after
 * printing why. */
static bool write_shard(const char *path, const uint16_t *v, size_t n) {
  if (n > INT32_MAX) {
    fprintf(stderr,
            "sluice: pack tokens: %s: %zu tokens do not fit llm.c's int32 "
            "count (use --shards)\n",
            path, n);
    return false;
  }
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    fprintf(stderr, "sluice: pack tokens: %s: %s\n", tmp, strerror(errno));
    return false;
  }
  unsigned char header[1024] = {0};
  le32(header, LLMC_MAGIC);
  le32(header + 4, 1);
  le32(header + 8, (uint32_t)n);
  bool ok = fwrite(header, 1, sizeof header, f) == sizeof header;
  unsigned char buf[8192];
  for (size_t i = 0; ok && i < n;) {
    size_t k = 0;
    for (; k < sizeof buf / 2 && i < n; k++, i++) {
      buf[2 * k] = (unsigned char)v[i];
      buf[2 * k + 1] = (unsigned char)(v[i] >> 8);
    }
    ok = fwrite(buf, 2, k, f) == k;
  }
  ok = (fflush(f) == 0) && ok;
  ok = (fsync(fileno(f)) == 0) && ok;
  ok = (fclose(f) == 0) && ok;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) {
    fprintf(stderr, "sluice: pack tokens: %s: %s\n", path, strerror(errno));
    unlink(tmp);
  }
  return ok;
}

/* OUT without ".bin", then the suffix. */
static void name_of(const char *out, const char *suffix, char *buf,
                    size_t size) {
  size_t len = strlen(out);
  if (len > 4 && strcmp(out + len - 4, ".bin") == 0) len -= 4;
  snprintf(buf, size, "%.*s%s", (int)len, out, suffix);
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
  tokens t = {0};
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
  for (size_t i = 0; i < nin; i++)
    if (!read_file(in[i], ids, eos, &t)) {
      rc = CLI_FAIL;
      goto done;
    }
  size_t first = 0;
  char name[4200];
  if (val > 0) {
    size_t nv = val < t.n ? (size_t)val : t.n;
    name_of(out, "_val.bin", name, sizeof name);
    if (!write_shard(name, t.v, nv)) {
      rc = CLI_FAIL;
      goto done;
    }
    first = nv;
  }
  size_t left = t.n - first;
  for (uint64_t k = 0; k < shards; k++) {
    size_t from = first + (size_t)(left * k / shards);
    size_t to = first + (size_t)(left * (k + 1) / shards);
    if (shards == 1) {
      snprintf(name, sizeof name, "%s", out);
    } else {
      char suffix[32];
      snprintf(suffix, sizeof suffix, "_%06u.bin", (unsigned)k);
      name_of(out, suffix, name, sizeof name);
    }
    if (!write_shard(name, t.v + from, to - from)) {
      rc = CLI_FAIL;
      goto done;
    }
  }
  if (!quiet)
    printf("packed %zu tokens from %zu file%s into %llu shard%s%s\n", t.n, nin,
           nin == 1 ? "" : "s", (unsigned long long)shards,
           shards == 1 ? "" : "s", val ? " + a validation shard" : "");
done:
  free(t.v);
  free(in);
  return rc;
}
