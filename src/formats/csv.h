/* csv.h - RFC 4180 records parsed from bytes in memory, for the csv:
 * reader (csv_reader.c) and its fuzz target. */
#ifndef SLUICE_IO_CSV_H
#define SLUICE_IO_CSV_H

#include "core/internal.h"

typedef struct sl__csv_field {
  const char *p; /* into the input, or into the parser's scratch */
  size_t len;
  bool quoted;
} sl__csv_field;

/* A parser's reusable memory.  Zero-initialise; sl__csv_fini frees. */
typedef struct sl__csv {
  char delim;
  sl__csv_field *f; /* the fields of the last record */
  size_t nf, fcap;
  char *scratch; /* unescaped quoted fields */
  size_t scap;
  size_t *soff; /* per field: offset in scratch, or SIZE_MAX (a view) */
} sl__csv;

/* Parses the record at p[*pos..n): fields separated by c->delim, ended by
 * "\n", "\r\n", "\r" alone or the end of the input (Python's csv module
 * reads the same three); a field in double quotes may hold the delimiter,
 * line ends (kept as written) and "" (one quote).  Empty lines are skipped.
 * *line is the 1-based number of the line at *pos.  On SL_OK: c->f[0..nf)
 * are the fields (valid until the next call), *first is the line the
 * record starts on, *pos is past its line end and *line the number of the
 * line now at *pos.
 * SL_EOF when only empty lines remain.  SL_ECORRUPT naming `what` and the
 * line: a quote inside an unquoted field, text after a closing quote, an
 * unterminated quoted field.  SL_ENOMEM. */
int sl__csv_record(sl__csv *c, const char *p, size_t n, size_t *pos,
                   uint64_t *line, uint64_t *first, const char *what);
void sl__csv_fini(sl__csv *c);

#endif
