/*
 * csv_reader.c - the `csv` reader: a CSV file (RFC 4180) as one sample per
 * record, one field per column (docs/FORMATS.md).
 *
 * Columns.  The header line names the columns.  Without sl_csv_opts.columns
 * every column is a field, its dtype guessed from the first record (an
 * integer -> i64, another number -> f32, else bytes); with it, the named
 * columns in the order given, each with its dtype ("x:f32,y:i64,s:bytes";
 * a name without ":dtype" is guessed).  Numbers are scalars; bytes are
 * rank-1 variable.  A record whose field count differs from the header's,
 * or a value that does not parse as its column's dtype, is an error naming
 * the file, the line and the column.
 *
 * Memory.  The file is mapped (fmt_map.c) and parsed in place; each sample
 * owns one small buffer holding its numbers (8-byte slots) and its bytes
 * fields' contents, so a sample never pins the mapping.  A URL is fetched
 * whole into memory instead: that buffer, with the parser's own, is the
 * stage's resident charge to the memory budget, measured again after each
 * record (a mapping is page cache and not counted).
 *
 * Saving (stages/state.h): a byte offset, as the text reader does.  Each
 * output notes the offset after its record and the line there (two
 * sl__state_logs), so a save a little behind the reader seeks there on
 * restore; a save further behind replays the pass from the header.  The
 * record holds the file's size, so a state of a file changed since is
 * refused.
 */
#include "formats/csv.h"
#include "transport/fmt_map.h"
#include "formats/offset_log.h"
#include "sync/resident.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#define MAX_COLS 256

typedef struct csv_col {
  char name[64];
  sl_dtype dtype; /* SL_DTYPE_INVALID: guess from the first record */
  size_t src;     /* index in the file's records */
} csv_col;

typedef struct csv_state {
  char *path;
  sl_buffer *map;
  sl__file_id id; /* the file as mapped (a URL: its validators) */
  const char *base;
  size_t size;
  size_t data_pos; /* offset of the first record (after the header) */
  uint64_t data_line;
  size_t pos;    /* next record */
  uint64_t line; /* of the line at pos */
  size_t ncols_file;
  csv_col col[MAX_COLS];
  int ncol;
  sl_schema *schema;
  sl__csv csv;
  sl__offset_log offs, lines; /* after output i: offset and line there */
  sl__resident held;          /* a URL's bytes and the parser's, charged */
} csv_state;

/* The bytes the reader holds for itself: a URL's object (fetched whole)
 * and the parser's field table and scratch. */
static uint64_t held_bytes(const csv_state *s) {
  uint64_t n = sl__is_url(s->path) ? s->size : 0;
  return n + s->csv.scap + s->csv.fcap * (sizeof *s->csv.f + sizeof(size_t));
}

/* The memory budget: held_bytes, from the next record read. */
static void csv_budget(void *st, sl__budget_acct *acct) {
  sl__resident_account(&((csv_state *)st)->held, acct);
}

/* The low sz bytes of v into slot, as an integer of sz bytes. */
static void put_int(void *slot, size_t sz, uint64_t v) {
  uint8_t a = (uint8_t)v;
  uint16_t b = (uint16_t)v;
  uint32_t c = (uint32_t)v;
  memcpy(slot,
         sz == 1   ? (void *)&a
         : sz == 2 ? (void *)&b
         : sz == 4 ? (void *)&c
                   : (void *)&v,
         sz);
}

/* Parses text v[0..len) as dtype dt into slot (8 bytes). */
static int parse_value(const csv_state *s, const csv_col *c, uint64_t line,
                       const char *v, size_t len, void *slot) {
  char tmp[128];
  SL_RETURN_ERROR_IF(len == 0 || len >= sizeof tmp, SL_EINVAL,
                     "csv: %s:%llu: column '%s': %s is not a %s", s->path,
                     (unsigned long long)line, c->name,
                     len ? "a long value" : "an empty value",
                     sl_dtype_name(c->dtype));
  memcpy(tmp, v, len);
  tmp[len] = 0;
  char *end;
  errno = 0;
  bool ok = true;
  switch (c->dtype) {
  case SL_F32:
  case SL_F64: {
    double d = strtod(tmp, &end);
    ok = end == tmp + len && end != tmp;
    if (c->dtype == SL_F32) {
      float f = (float)d;
      memcpy(slot, &f, sizeof f);
    } else {
      memcpy(slot, &d, sizeof d);
    }
    break;
  }
  case SL_BOOL: {
    uint8_t b = strcmp(tmp, "1") == 0 || strcmp(tmp, "true") == 0 ||
                strcmp(tmp, "True") == 0;
    ok = b || strcmp(tmp, "0") == 0 || strcmp(tmp, "false") == 0 ||
         strcmp(tmp, "False") == 0;
    memcpy(slot, &b, 1);
    break;
  }
  case SL_U8:
  case SL_U16:
  case SL_U32:
  case SL_U64: {
    unsigned long long u = strtoull(tmp, &end, 10);
    size_t sz = sl_dtype_size(c->dtype);
    ok = end == tmp + len && errno == 0 && tmp[0] != '-' &&
         (sz == 8 || u < (1ull << (8 * sz)));
    put_int(slot, sz, u);
    break;
  }
  default: { /* signed */
    long long i = strtoll(tmp, &end, 10);
    size_t sz = sl_dtype_size(c->dtype);
    long long lim = sz == 8 ? LLONG_MAX : (1ll << (8 * sz - 1)) - 1;
    ok = end == tmp + len && errno == 0 && i <= lim && i >= -lim - 1;
    put_int(slot, sz, (uint64_t)i); /* two's complement: the same bits */
    break;
  }
  }
  SL_RETURN_ERROR_IF(
      !ok, SL_EINVAL, "csv: %s:%llu: column '%s': '%s' is not %s %s", s->path,
      (unsigned long long)line, c->name, tmp,
      c->dtype == SL_I8 || c->dtype == SL_I16 || c->dtype == SL_I32 ||
              c->dtype == SL_I64 || c->dtype == SL_U8 || c->dtype == SL_U16 ||
              c->dtype == SL_U32 || c->dtype == SL_U64
          ? "an integer in range of"
          : "a",
      sl_dtype_name(c->dtype));
  return SL_OK;
}

/* The next record's fields, checked against the header's count. */
static int next_record(csv_state *s, uint64_t *first) {
  int rc = sl__csv_record(&s->csv, s->base, s->size, &s->pos, &s->line, first,
                          s->path);
  if (rc != SL_OK) return rc;
  SL_RETURN_ERROR_IF(s->csv.nf != s->ncols_file, SL_EINVAL,
                     "csv: %s:%llu: %zu fields, the header has %zu", s->path,
                     (unsigned long long)*first, s->csv.nf, s->ncols_file);
  return SL_OK;
}

static int csv_next(void *st, sl_sample **out) {
  csv_state *s = st;
  uint64_t line;
  int rc = next_record(s, &line);
  sl__resident_set(&s->held, held_bytes(s));
  if (rc != SL_OK) return rc;
  size_t bytes = (size_t)s->ncol * 8;
  for (int i = 0; i < s->ncol; i++)
    if (s->col[i].dtype == SL_BYTES) bytes += s->csv.f[s->col[i].src].len;
  sl_buffer *b = sl_buffer_new(bytes);
  SL_RETURN_ERROR_IF(!b, SL_ENOMEM, "csv: %s:%llu: out of memory", s->path,
                     (unsigned long long)line);
  sl_sample *smp = sl_sample_new(s->schema);
  rc = smp ? SL_OK : sl_set_error(SL_ENOMEM, "csv: out of memory");
  unsigned char *data = sl_buffer_data(b);
  size_t at = (size_t)s->ncol * 8;
  for (int i = 0; i < s->ncol && rc == SL_OK; i++) {
    const csv_col *c = &s->col[i];
    const sl__csv_field *f = &s->csv.f[c->src];
    sl_tensor t;
    if (c->dtype == SL_BYTES) {
      if (f->len) memcpy(data + at, f->p, f->len);
      int64_t len = (int64_t)f->len;
      rc = sl_tensor_view(&t, SL_BYTES, 1, &len, b, at);
      at += f->len;
    } else {
      rc = parse_value(s, c, line, f->p, f->len, data + 8 * (size_t)i);
      if (rc == SL_OK)
        rc = sl_tensor_view(&t, c->dtype, 0, NULL, b, 8 * (size_t)i);
    }
    if (rc == SL_OK && (rc = sl_sample_set_move(smp, i, &t)) < 0)
      sl_tensor_clear(&t);
  }
  sl_buffer_release(b);
  if (rc < 0) {
    sl_sample_release(smp);
    return rc;
  }
  sl__state_log_note(&s->offs.log, s->pos);
  sl__state_log_note(&s->lines.log, s->line);
  *out = smp;
  return SL_OK;
}

static int csv_reset(void *st) {
  csv_state *s = st;
  s->pos = s->data_pos;
  s->line = s->data_line;
  sl__offset_log_start(&s->offs, 0, s->data_pos);
  sl__offset_log_start(&s->lines, 0, s->data_line);
  return SL_OK;
}

static void csv_destroy(void *st) {
  csv_state *s = st;
  if (!s) return;
  sl_buffer_release(s->map);
  sl__csv_fini(&s->csv);
  sl__free(s->path);
  sl__stage_free(s, NULL, s->schema);
}

/* Record: the file's offset log (offset_log.h), then the line at the
 * offset (0 with UINT64_MAX: replay k records from the header). */
static int csv_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                    sl__state_out *w) {
  csv_state *s = st;
  bool logged = sl__offset_log_find(&s->offs, k) != UINT64_MAX;
  SL_FORWARD_IF_ERROR(sl__offset_log_save(&s->offs, k, &s->id, w));
  return sl__state_put_u64(w, logged ? sl__offset_log_find(&s->lines, k) : 0);
}

/* Reads the record: the file unchanged, the offset inside its records and
 * no more records before it than bytes (a record takes at least one). */
static int csv_record(const csv_state *s, uint64_t k, sl__state_in *in,
                      uint64_t *off, uint64_t *line) {
  SL_FORWARD_IF_ERROR(
      sl__offset_log_read(in, "csv", s->path, &s->id, UINT64_MAX, off));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, line));
  SL_RETURN_ERROR_IF(
      (*off != UINT64_MAX && (*off > s->size || *off < s->data_pos)) ||
          k > s->size,
      SL_ECORRUPT,
      "restore: corrupt state: csv %s: record %llu at offset %llu of a "
      "%zu-byte file",
      s->path, (unsigned long long)k, (unsigned long long)*off, s->size);
  return SL_OK;
}

/* The state check (before any stage changes): the same reads; the
 * position is bounded again by the restore. */
static int csv_check(const sl_reader *r, void *st, sl__state_in *in) {
  uint64_t off, line;
  return csv_record(st, 0, in, &off, &line);
}

static int csv_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  csv_state *s = st;
  uint64_t off, line;
  SL_FORWARD_IF_ERROR(csv_record(s, k, in, &off, &line));
  csv_reset(s);
  if (off == UINT64_MAX) return sl__state_replay(csv_next, s, k, "csv");
  s->pos = (size_t)off;
  s->line = line;
  /* The logs restart at k: outputs before it are not known. */
  sl__offset_log_start(&s->offs, k, off);
  sl__offset_log_start(&s->lines, k, line);
  return SL_OK;
}

static void csv_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", sl__basename(((const csv_state *)st)->path));
}

static const sl__stage_ops csv_ops = {
    .name = "csv",
    .next = csv_next,
    .reset = csv_reset,
    .destroy = csv_destroy,
    .save = csv_save,
    .restore = csv_restore,
    .identity = csv_identity,
    .check = csv_check,
    .budget = csv_budget,
};

/* Integer, other number, or text. */
static sl_dtype guess(const char *v, size_t len) {
  char tmp[128], *end;
  if (len == 0 || len >= sizeof tmp) return SL_BYTES;
  memcpy(tmp, v, len);
  tmp[len] = 0;
  errno = 0;
  (void)strtoll(tmp, &end, 10);
  if (end == tmp + len && errno == 0) return SL_I64;
  (void)strtod(tmp, &end);
  return end == tmp + len ? SL_F32 : SL_BYTES;
}

static int add_col(csv_state *s, const char *name, size_t nl, sl_dtype dt) {
  SL_RETURN_ERROR_IF(s->ncol == MAX_COLS, SL_EUNSUPPORTED,
                     "csv: %s: more than %d columns", s->path, MAX_COLS);
  SL_RETURN_ERROR_IF(nl == 0 || nl >= sizeof s->col[0].name, SL_EINVAL,
                     "csv: %s: column name '%.*s' is %s", s->path, (int)nl,
                     name, nl ? "too long" : "empty");
  csv_col *c = &s->col[s->ncol];
  memcpy(c->name, name, nl);
  c->name[nl] = 0;
  c->dtype = dt;
  /* Find it in the header. */
  size_t i = 0;
  for (; i < s->csv.nf; i++)
    if (s->csv.f[i].len == nl && memcmp(s->csv.f[i].p, name, nl) == 0) break;
  SL_RETURN_ERROR_IF(i == s->csv.nf, SL_EINVAL,
                     "csv: %s: no column '%s' in the header", s->path, c->name);
  c->src = i;
  s->ncol++;
  return SL_OK;
}

/* The columns option "a:f32,b,c:bytes" against the header in s->csv. */
static int parse_columns(csv_state *s, const char *spec) {
  const char *p = spec;
  while (*p) {
    const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
    const char *colon = memchr(p, ':', (size_t)(end - p));
    sl_dtype dt = SL_DTYPE_INVALID;
    if (colon) {
      char dn[16];
      snprintf(dn, sizeof dn, "%.*s", (int)(end - colon - 1), colon + 1);
      dt = sl_dtype_from_name(dn);
      SL_RETURN_ERROR_IF(dt == SL_DTYPE_INVALID, SL_EINVAL,
                         "csv: %s: columns: unknown dtype '%s'", s->path, dn);
      SL_RETURN_ERROR_IF(dt == SL_F16 || dt == SL_BF16, SL_EUNSUPPORTED,
                         "csv: %s: columns: dtype %s is not parsed from text "
                         "(read f32 and convert)",
                         s->path, dn);
    }
    SL_FORWARD_IF_ERROR(add_col(s, p, (size_t)((colon ? colon : end) - p), dt));
    p = comma ? comma + 1 : end;
  }
  SL_RETURN_ERROR_IF(s->ncol == 0, SL_EINVAL, "csv: %s: columns is empty",
                     s->path);
  return SL_OK;
}

/* Reads the header (or, without one, names the columns from the option),
 * then guesses dtypes left open from the first record. */
static int read_header(csv_state *s, const sl_csv_opts *o) {
  uint64_t first;
  int rc = sl__csv_record(&s->csv, s->base, s->size, &s->pos, &s->line, &first,
                          s->path);
  SL_RETURN_ERROR_IF(rc == SL_EOF, SL_EINVAL,
                     "csv: %s: the file is empty (no header)", s->path);
  SL_FORWARD_IF_ERROR(rc);
  s->ncols_file = s->csv.nf;
  if (o->no_header) {
    /* The first record is data: columns name every column in order. */
    s->pos = 0;
    s->line = 1;
    SL_RETURN_ERROR_IF(!o->columns || !o->columns[0], SL_EINVAL,
                       "csv: %s: without a header, option columns must name "
                       "every column",
                       s->path);
    /* Make a synthetic header of the names. */
    size_t nn = 0;
    const char *q = o->columns;
    char names[MAX_COLS][64];
    while (*q && nn < MAX_COLS) {
      size_t l = strcspn(q, ":,");
      snprintf(names[nn++], 64, "%.*s", (int)(l < 63 ? l : 63), q);
      q += strcspn(q, ",");
      if (*q) q++;
    }
    SL_RETURN_ERROR_IF(nn != s->ncols_file, SL_EINVAL,
                       "csv: %s: columns names %zu columns, the first record "
                       "has %zu",
                       s->path, nn, s->ncols_file);
    for (size_t i = 0; i < nn; i++)
      s->csv.f[i] = (sl__csv_field){names[i], strlen(names[i]), false};
    rc = parse_columns(s, o->columns);
  } else if (o->columns && o->columns[0]) {
    rc = parse_columns(s, o->columns);
  } else {
    for (size_t i = 0; i < s->csv.nf && rc == SL_OK; i++)
      rc = add_col(s, s->csv.f[i].p, s->csv.f[i].len, SL_DTYPE_INVALID);
  }
  SL_FORWARD_IF_ERROR(rc);
  for (int i = 0; i < s->ncol; i++)
    for (int j = 0; j < i; j++)
      SL_RETURN_ERROR_IF(strcmp(s->col[i].name, s->col[j].name) == 0, SL_EINVAL,
                         "csv: %s: column '%s' appears twice", s->path,
                         s->col[i].name);
  s->data_pos = s->offs.from_off = s->pos;
  s->data_line = s->lines.from_off = s->line;
  /* Guess what is left open from the first record (bytes if none). */
  rc = sl__csv_record(&s->csv, s->base, s->size, &s->pos, &s->line, &first,
                      s->path);
  if (rc < 0 && rc != SL_EOF) return rc; /* EOF: no records, guess bytes */
  for (int i = 0; i < s->ncol; i++)
    if (s->col[i].dtype == SL_DTYPE_INVALID)
      s->col[i].dtype =
          rc == SL_OK && s->col[i].src < s->csv.nf
              ? guess(s->csv.f[s->col[i].src].p, s->csv.f[s->col[i].src].len)
              : SL_BYTES;
  s->pos = s->data_pos;
  s->line = s->data_line;
  return SL_OK;
}

static int make_schema(csv_state *s) {
  sl_schema *sc = s->schema = sl_schema_new();
  SL_RETURN_ERROR_IF(!sc, SL_ENOMEM, "csv: cannot allocate a schema");
  int rc = SL_OK;
  for (int i = 0; i < s->ncol && rc >= 0; i++) {
    int64_t var = -1;
    rc = s->col[i].dtype == SL_BYTES
             ? sl_schema_add(sc, s->col[i].name, SL_BYTES, 1, &var)
             : sl_schema_add(sc, s->col[i].name, s->col[i].dtype, 0, NULL);
  }
  if (rc >= 0) rc = sl_schema_set_meta(sc, "source", "csv");
  return rc < 0 ? sl_wrap_error(rc, "csv: %s: building the schema", s->path)
                : SL_OK;
}

static int delimiter_of(const char *path, const sl_csv_opts *o, char *d) {
  *d = o->delimiter ? o->delimiter : ',';
  SL_RETURN_ERROR_IF(*d == '"' || *d == '\n' || *d == '\r', SL_EINVAL,
                     "csv: %s: the delimiter cannot be a quote or a line end",
                     path);
  return SL_OK;
}

int sl_csv_reader(const char *path, const sl_csv_opts *opts, sl_reader **out) {
  SL_SOURCE_ARGS("csv", path, out);
  sl_csv_opts o = SL_CSV_OPTS_INIT;
  if (opts)
    SL_FORWARD_IF_ERROR(sl__opts_copy("sl_csv_opts", &o, sizeof o, opts));
  char delim;
  SL_FORWARD_IF_ERROR(delimiter_of(path, &o, &delim));
  csv_state *s = sl__calloc(1, sizeof *s);
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "csv: cannot allocate a reader");
  sl__resident_init(&s->held);
  s->csv.delim = delim;
  s->line = 1;
  s->path = sl__strdup(path);
  int rc = s->path ? SL_OK : sl_set_error(SL_ENOMEM, "csv: out of memory");
  if (rc == SL_OK) rc = sl__map_file("csv", path, &s->map, &s->id);
  if (rc == SL_OK) {
    s->base = sl_buffer_data(s->map);
    s->size = sl_buffer_size(s->map);
    rc = read_header(s, &o);
  }
  if (rc == SL_OK) rc = make_schema(s);
  if (rc < 0) {
    csv_destroy(s);
    return rc;
  }
  return sl__stage_new(&csv_ops, s, s->schema, NULL, 0, NULL, out);
}
