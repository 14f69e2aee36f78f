/*
 * csv_floats.c - a text parser plugin (docs/PLUGINS.md): a line of
 * comma-separated numbers becomes one sample {x: f32[n]}.
 *
 * Options: "n=N" (or "columns=N"), 1 <= N <= 65536, required.  Blank lines
 * and lines starting with '#' are skipped (SL_PARSER_SKIP); spaces around a
 * number are allowed.  A line with another column count, or a column that is
 * not a whole number, is an error naming the column (1-based).  Numbers are
 * read with strtof, so in the "C" locale (the default of every program that
 * does not call setlocale) the decimal point is '.'.
 *
 * Built against the shared libsluice (examples/plugins/CMakeLists.txt); it
 * uses only the public header and libc.
 */
#include "sluice.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COLUMNS 65536
/* A number longer than this is not a float anyone writes in a CSV. */
#define MAX_FIELD 127

typedef struct csv_state {
  sl_schema *schema;
  int n;
} csv_state;

static bool is_space(char c) {
  return c == ' ' || c == '\t';
}

/* Parses "key=value[,key=value...]" (',' or spaces between pairs). */
static int parse_options(const char *options, int *n) {
  *n = 0;
  const char *p = options;
  while (*p) {
    while (*p == ',' || is_space(*p))
      p++;
    if (!*p) break;
    const char *key = p;
    while (*p && *p != '=' && *p != ',' && !is_space(*p))
      p++;
    size_t klen = (size_t)(p - key);
    if (*p != '=')
      return sl_set_error(SL_EINVAL, "option '%.*s' has no value (write n=4)",
                          (int)klen, key);
    p++;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (!((klen == 1 && strncmp(key, "n", 1) == 0) ||
          (klen == 7 && strncmp(key, "columns", 7) == 0)))
      return sl_set_error(SL_EINVAL,
                          "unknown option '%.*s' (known: n, "
                          "columns)",
                          (int)klen, key);
    if (end == p || errno || v < 1 || v > MAX_COLUMNS ||
        (*end && *end != ',' && !is_space(*end)))
      return sl_set_error(SL_EINVAL,
                          "option %.*s must be a whole number in "
                          "1..%d",
                          (int)klen, key, MAX_COLUMNS);
    *n = (int)v;
    p = end;
  }
  if (*n == 0)
    return sl_set_error(SL_EINVAL, "the number of columns is required "
                                   "(options \"n=4\")");
  return SL_OK;
}

static int csv_init(const char *options, sl_schema **schema, void **state) {
  int n;
  int rc = parse_options(options, &n);
  if (rc < 0) return rc;
  csv_state *st = calloc(1, sizeof *st);
  sl_schema *s = sl_schema_new();
  int64_t shape[1] = {n};
  if (!st || !s || (rc = sl_schema_add(s, "x", SL_F32, 1, shape)) < 0) {
    free(st);
    sl_schema_release(s);
    return rc < 0 ? rc : sl_set_error(SL_ENOMEM, "out of memory");
  }
  st->schema = s;
  st->n = n;
  /* One reference for the host, one kept to make samples. */
  *schema = sl_schema_retain(s);
  *state = st;
  return SL_OK;
}

/* Reads column `col` (1-based), the bytes [p, end), into *v. */
static int parse_float(const char *p, const char *end, int col, float *v) {
  while (p < end && is_space(*p))
    p++;
  while (end > p && is_space(end[-1]))
    end--;
  size_t len = (size_t)(end - p);
  if (len == 0) return sl_set_error(SL_EINVAL, "column %d is empty", col);
  if (len > MAX_FIELD)
    return sl_set_error(SL_EINVAL, "column %d: %zu characters is not a number",
                        col, len);
  char buf[MAX_FIELD + 1]; /* strtof needs a terminated string */
  memcpy(buf, p, len);
  buf[len] = 0;
  char *stop;
  *v = strtof(buf, &stop);
  if (stop != buf + len)
    return sl_set_error(SL_EINVAL, "column %d: '%s' is not a number", col, buf);
  return SL_OK;
}

static int csv_parse(void *state, const char *line, size_t len,
                     sl_sample **out) {
  csv_state *st = state;
  size_t i = 0;
  while (i < len && is_space(line[i]))
    i++;
  if (i == len || line[i] == '#') return SL_PARSER_SKIP;
  int cols = 1;
  for (size_t k = 0; k < len; k++)
    cols += line[k] == ',';
  if (cols != st->n)
    return sl_set_error(SL_EINVAL, "expected %d floats, got %d", st->n, cols);
  sl_sample *s = sl_sample_new(st->schema);
  float *x;
  int64_t shape[1] = {st->n};
  int rc = s ? sl_sample_alloc(s, 0, 1, shape, (void **)&x) : SL_ENOMEM;
  const char *p = line, *end = line + len;
  for (int c = 0; rc == SL_OK && c < st->n; c++) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *stop = comma ? comma : end;
    rc = parse_float(p, stop, c + 1, &x[c]);
    p = stop + 1;
  }
  if (rc < 0) {
    sl_sample_release(s);
    return rc;
  }
  *out = s;
  return SL_OK;
}

static void csv_destroy(void *state) {
  csv_state *st = state;
  sl_schema_release(st->schema);
  free(st);
}

static const sl_parser_api api = {SL_PARSER_ABI_VERSION, "csv_floats", csv_init,
                                  csv_parse, csv_destroy};

SL_PARSER_EXPORT const sl_parser_api *sl_parser_entry(void) {
  return &api;
}
