/*
 * braces.c - WebDataset's brace patterns in names: ranges
 * "{000000..000127}" (zero-padded to the first bound's width) and lists
 * "{a,b,c}", several per name, expanded left to right
 * ("s{0..1}-{x,y}" -> s0-x s0-y s1-x s1-y).  sl__names_expand applies them
 * to every name before globs and extensions, so sl_open, sl_open_files and
 * sl_wds_open all accept them (docs/DATA.md, "Names").
 *
 * A group is the text from a '{' to the next '}'; groups do not nest.  A
 * body with ".." is a range of decimal integers (first <= last); any other
 * body is a comma-separated list (empty items allowed: "x{,.gz}").  The
 * expansion is capped at SL__BRACES_MAX names, so a typo such as
 * "{0..99999999}" fails at once instead of allocating for minutes.
 */
#include "open/registry.h"

#include <stdlib.h>

typedef struct name_list {
  char **v;
  size_t n, cap;
  const char *stage;
} name_list;

static int push(name_list *l, char *s) {
  if (!s) return sl_set_error(SL_ENOMEM, "%s: out of memory", l->stage);
  if (l->n >= SL__BRACES_MAX) {
    sl__free(s);
    return sl_set_error(SL_EINVAL, "%s: brace patterns expand to more than %d "
                                   "names",
                        l->stage, SL__BRACES_MAX);
  }
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    char **v = sl__realloc(l->v, cap * sizeof *v);
    if (!v) {
      sl__free(s);
      return sl_set_error(SL_ENOMEM, "%s: out of memory", l->stage);
    }
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = s;
  return SL_OK;
}

/* a[0..al) + b[0..bl) + c, in a new string (NULL: out of memory). */
static char *join3(const char *a, size_t al, const char *b, size_t bl,
                   const char *c) {
  size_t cl = strlen(c);
  char *s = sl__malloc(al + bl + cl + 1);
  if (!s) return NULL;
  memcpy(s, a, al);
  memcpy(s + al, b, bl);
  memcpy(s + al + bl, c, cl + 1);
  return s;
}

bool sl__has_braces(const char *s) {
  const char *open = strchr(s, '{');
  return open && strchr(open, '}');
}

/* Expands the first group of `s` (recursively the rest) into l. */
static int expand(const char *s, name_list *l) {
  const char *open = strchr(s, '{');
  const char *close = open ? strchr(open, '}') : NULL;
  if (!open || !close) return push(l, sl__strdup(s));
  size_t pre = (size_t)(open - s);
  const char *body = open + 1, *rest = close + 1;
  size_t bl = (size_t)(close - body);
  const char *dots = NULL;
  for (size_t i = 0; i + 1 < bl && !dots; i++)
    if (body[i] == '.' && body[i + 1] == '.') dots = body + i;
  int rc = SL_OK;
  if (dots) {
    char *end;
    unsigned long long a = strtoull(body, &end, 10);
    SL_RETURN_ERROR_IF(end != dots || dots == body || body[0] == '-' ||
                           body[0] == '+',
                       SL_EINVAL,
                       "%s: bad range '{%.*s}' in '%s' (write {000..127})",
                       l->stage, (int)bl, body, s);
    const char *b_start = dots + 2;
    unsigned long long b = strtoull(b_start, &end, 10);
    SL_RETURN_ERROR_IF(end != close || end == b_start || *b_start == '-' ||
                           *b_start == '+' || b < a,
                       SL_EINVAL,
                       "%s: bad range '{%.*s}' in '%s' (write {000..127})",
                       l->stage, (int)bl, body, s);
    SL_RETURN_ERROR_IF(b - a >= SL__BRACES_MAX, SL_EINVAL,
                       "%s: range '{%.*s}' has more than %d names", l->stage,
                       (int)bl, body, SL__BRACES_MAX);
    int width = (int)(dots - body);
    for (unsigned long long v = a; v <= b && rc == SL_OK; v++) {
      char num[32];
      int nl = snprintf(num, sizeof num, "%0*llu", width, v);
      char *next = join3(s, pre, num, (size_t)nl, rest);
      rc = next ? expand(next, l)
                : sl_set_error(SL_ENOMEM, "%s: out of memory", l->stage);
      sl__free(next);
    }
    return rc;
  }
  const char *p = body;
  for (;;) {
    const char *comma = memchr(p, ',', (size_t)(close - p));
    const char *e = comma ? comma : close;
    char *next = join3(s, pre, p, (size_t)(e - p), rest);
    rc = next ? expand(next, l)
              : sl_set_error(SL_ENOMEM, "%s: out of memory", l->stage);
    sl__free(next);
    if (rc < 0 || !comma) return rc;
    p = comma + 1;
  }
}

void sl__braces_free(char **names, size_t n) {
  if (!names) return;
  for (size_t i = 0; i < n; i++)
    sl__free(names[i]);
  sl__free(names);
}

int sl__braces_expand(const char *stage, const char *s, char ***out,
                      size_t *n) {
  name_list l = {NULL, 0, 0, stage};
  *out = NULL;
  *n = 0;
  int rc = expand(s, &l);
  if (rc < 0) {
    sl__braces_free(l.v, l.n);
    return rc;
  }
  *out = l.v;
  *n = l.n;
  return SL_OK;
}
