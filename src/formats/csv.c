/*
 * csv.c - the RFC 4180 record parser (csv.h).
 *
 * One pass over the bytes, no copy for unquoted fields (views of the
 * input); a quoted field is unescaped into the scratch buffer, whose
 * offsets are turned into pointers once the record is complete (the
 * scratch may move while it grows).  Lenient where RFC 4180 is silent and
 * practice differs: "\n" alone and "\r" alone (old Mac OS, and what
 * Excel for Mac still writes) end a line as "\r\n" does, as Python's csv
 * module reads them, and a last record without a line end is a record.
 * Strict where a silent guess would shift columns: a quote in the middle
 * of an unquoted field, or text after a closing quote, is an error naming
 * the line.
 */
#include "formats/csv.h"

static int push_field(sl__csv *c, const char *p, size_t len, size_t soff,
                      bool quoted) {
  if (c->nf == c->fcap) {
    size_t cap = c->fcap ? 2 * c->fcap : 16;
    sl__csv_field *f = sl__realloc(c->f, cap * sizeof *f);
    size_t *o = f ? sl__realloc(c->soff, cap * sizeof *o) : NULL;
    if (f) c->f = f;
    if (o) c->soff = o;
    SL_RETURN_ERROR_IF(!f || !o, SL_ENOMEM, "csv: out of memory");
    c->fcap = cap;
  }
  c->f[c->nf] = (sl__csv_field){p, len, quoted};
  c->soff[c->nf++] = soff;
  return SL_OK;
}

static int scratch_put(sl__csv *c, size_t *used, char ch) {
  if (*used == c->scap) {
    size_t cap = c->scap ? 2 * c->scap : 256;
    char *s = sl__realloc(c->scratch, cap);
    SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "csv: out of memory");
    c->scratch = s;
    c->scap = cap;
  }
  c->scratch[(*used)++] = ch;
  return SL_OK;
}

/* The line end at p[i] ("\n", "\r\n" or "\r"): its length, counting the
 * line. */
static size_t line_end(const char *p, size_t n, size_t i, uint64_t *line) {
  (*line)++;
  return p[i] == '\r' && i + 1 < n && p[i + 1] == '\n' ? 2 : 1;
}

int sl__csv_record(sl__csv *c, const char *p, size_t n, size_t *pos,
                   uint64_t *line, uint64_t *first, const char *what) {
  size_t i = *pos;
  /* Empty lines between records. */
  while (i < n && (p[i] == '\n' || p[i] == '\r'))
    i += line_end(p, n, i, line);
  if (i >= n) {
    *pos = n;
    return SL_EOF;
  }
  *first = *line;
  c->nf = 0;
  size_t used = 0;
  const char d = c->delim;
  for (;;) {
    if (i < n && p[i] == '"') {
      /* A quoted field: up to the closing quote, "" is one quote. */
      size_t start = used;
      uint64_t qline = *line;
      i++;
      for (;;) {
        SL_RETURN_ERROR_IF(i >= n, SL_ECORRUPT,
                           "csv: %s:%llu: a quoted field is not closed", what,
                           (unsigned long long)qline);
        if (p[i] == '"') {
          if (i + 1 < n && p[i + 1] == '"') {
            SL_FORWARD_IF_ERROR(scratch_put(c, &used, '"'));
            i += 2;
            continue;
          }
          i++;
          break;
        }
        /* A line end inside quotes is data, kept as written. */
        if (p[i] == '\n' || (p[i] == '\r' && (i + 1 == n || p[i + 1] != '\n')))
          (*line)++;
        SL_FORWARD_IF_ERROR(scratch_put(c, &used, p[i]));
        i++;
      }
      SL_FORWARD_IF_ERROR(push_field(c, NULL, used - start, start, true));
      SL_RETURN_ERROR_IF(i < n && p[i] != d && p[i] != '\n' && p[i] != '\r',
                         SL_ECORRUPT,
                         "csv: %s:%llu: text after a closing quote (field %zu)",
                         what, (unsigned long long)*line, c->nf);
    } else {
      size_t s = i;
      while (i < n && p[i] != d && p[i] != '\n' && p[i] != '\r') {
        SL_RETURN_ERROR_IF(p[i] == '"', SL_ECORRUPT,
                           "csv: %s:%llu: a quote inside unquoted field %zu "
                           "(quote the whole field, doubling its quotes)",
                           what, (unsigned long long)*line, c->nf + 1);
        i++;
      }
      SL_FORWARD_IF_ERROR(push_field(c, p + s, i - s, SIZE_MAX, false));
    }
    if (i < n && p[i] == d) {
      i++;
      continue;
    }
    /* The end of the record: a line end or the input's end. */
    if (i < n) i += line_end(p, n, i, line);
    break;
  }
  for (size_t k = 0; k < c->nf; k++)
    if (c->soff[k] != SIZE_MAX)
      c->f[k].p = c->scratch ? c->scratch + c->soff[k] : "";
  *pos = i;
  return SL_OK;
}

void sl__csv_fini(sl__csv *c) {
  SL__FREE(c->f, c->soff, c->scratch);
  memset(c, 0, sizeof *c);
}
