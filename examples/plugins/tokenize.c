/*
 * tokenize.c - a text parser plugin (docs/PLUGINS.md): a whitespace
 * tokenizer.  A line becomes {tokens: i32[-1], ntokens: i64[]}: its
 * whitespace-separated words (space, tab, '\v', '\f', '\r'), in order, each
 * mapped to an id by a hash, and how many there are.
 *
 * Options: "vocab=V" (2 <= V <= 2^31 - 1; default 32768).  The id of a word
 * is 1 + FNV-1a-32(word bytes) mod (V - 1): ids are in 1..V-1, and 0 is
 * left free for padding.  The hash is fixed and byte-wise, so ids are the
 * same on every machine and run; different words may share an id (this is
 * the "hashing trick", not a learned vocabulary).  An empty or blank line
 * gives zero tokens.
 */
#include "sluice.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_VOCAB 32768

typedef struct tok_state {
  sl_schema *schema;
  uint32_t vocab;
} tok_state;

static bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' ||
         c == '\n';
}

static int parse_options(const char *options, uint32_t *vocab) {
  *vocab = DEFAULT_VOCAB;
  const char *p = options;
  while (*p) {
    while (*p == ',' || is_ws(*p))
      p++;
    if (!*p) break;
    const char *key = p;
    while (*p && *p != '=' && *p != ',' && !is_ws(*p))
      p++;
    int klen = (int)(p - key);
    if (klen != 5 || strncmp(key, "vocab", 5) != 0)
      return sl_set_error(SL_EINVAL, "unknown option '%.*s' (known: vocab)",
                          klen, key);
    if (*p != '=')
      return sl_set_error(SL_EINVAL, "option vocab has no value (write "
                                     "vocab=30000)");
    p++;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 2 || v > INT32_MAX ||
        (*end && *end != ',' && !is_ws(*end)))
      return sl_set_error(SL_EINVAL,
                          "option vocab must be a whole number in "
                          "2..%d",
                          INT32_MAX);
    *vocab = (uint32_t)v;
    p = end;
  }
  return SL_OK;
}

static int tok_init(const char *options, sl_schema **schema, void **state) {
  uint32_t vocab;
  int rc = parse_options(options, &vocab);
  if (rc < 0) return rc;
  tok_state *st = calloc(1, sizeof *st);
  sl_schema *s = sl_schema_new();
  int64_t var[1] = {SL_DIM_VAR};
  if (!st || !s || (rc = sl_schema_add(s, "tokens", SL_I32, 1, var)) < 0 ||
      (rc = sl_schema_add(s, "ntokens", SL_I64, 0, NULL)) < 0) {
    free(st);
    sl_schema_release(s);
    return rc < 0 ? rc : sl_set_error(SL_ENOMEM, "out of memory");
  }
  st->schema = s;
  st->vocab = vocab;
  *schema = sl_schema_retain(s);
  *state = st;
  return SL_OK;
}

/* FNV-1a, 32 bits: simple, fixed and good enough to spread words. */
static uint32_t fnv1a(const char *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)p[i];
    h *= 16777619u;
  }
  return h;
}

static int tok_parse(void *state, const char *line, size_t len,
                     sl_sample **out) {
  tok_state *st = state;
  int64_t n = 0; /* count first, to allocate the tensor once */
  for (size_t i = 0; i < len;) {
    while (i < len && is_ws(line[i]))
      i++;
    if (i == len) break;
    n++;
    while (i < len && !is_ws(line[i]))
      i++;
  }
  sl_sample *s = sl_sample_new(st->schema);
  if (!s) return sl_set_error(SL_ENOMEM, "out of memory");
  int32_t *ids;
  int64_t *count;
  int rc = sl_sample_alloc(s, 0, 1, &n, (void **)&ids);
  if (rc == SL_OK) rc = sl_sample_alloc(s, 1, 0, NULL, (void **)&count);
  if (rc < 0) {
    sl_sample_release(s);
    return rc;
  }
  *count = n;
  int64_t k = 0;
  for (size_t i = 0; i < len;) {
    while (i < len && is_ws(line[i]))
      i++;
    if (i == len) break;
    size_t start = i;
    while (i < len && !is_ws(line[i]))
      i++;
    ids[k++] = (int32_t)(1 + fnv1a(line + start, i - start) % (st->vocab - 1));
  }
  *out = s;
  return SL_OK;
}

static void tok_destroy(void *state) {
  tok_state *st = state;
  sl_schema_release(st->schema);
  free(st);
}

static const sl_parser_api api = {SL_PARSER_ABI_VERSION, "tokenize", tok_init,
                                  tok_parse, tok_destroy};

SL_PARSER_EXPORT const sl_parser_api *sl_parser_entry(void) {
  return &api;
}
