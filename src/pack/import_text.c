/*
 * import_text.c - packs text files, one record per line, into SLR records
 * {text: bytes[-1]}.
 *
 * Lines are read with getline, so they may be of any length and hold NUL
 * bytes; each record is a view of the line buffer, encoded by the writer
 * before the next line is read.  Contiguous sharding must know the number
 * of records before the first is written, so it costs one extra counting
 * pass over the files.
 */
#include "pack/import.h"

#include <errno.h>
#include <stdlib.h>

/* Counts the records (lines) of one file: its "\n" bytes, plus one for a
 * last line without one. */
static int count_lines(const char *path, uint64_t *n) {
  FILE *f = fopen(path, "rb");
  SL_RETURN_ERROR_IF(!f, SL_EIO, "%s: cannot open: %s", path, strerror(errno));
  static const size_t step = (size_t)1 << 20;
  char *buf = sl__malloc(step);
  if (!buf) {
    fclose(f);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate", path);
  }
  uint64_t lines = 0;
  char last = '\n';
  size_t got;
  while ((got = fread(buf, 1, step, f)) > 0) {
    for (const char *p = buf, *end = buf + got;
         (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++)
      lines++;
    last = buf[got - 1];
  }
  int rc = ferror(f) ? sl_set_error(SL_EIO, "%s: read failed: %s", path,
                                    strerror(errno))
                     : SL_OK;
  sl__free(buf);
  fclose(f);
  *n += lines + (last != '\n' ? 1 : 0);
  return rc;
}

/* Packs the lines of one file. */
static int pack_file(const char *path, sl_sample *s, sl__pack_sink *sink) {
  FILE *f = fopen(path, "rb");
  SL_RETURN_ERROR_IF(!f, SL_EIO, "%s: cannot open: %s", path, strerror(errno));
  char *line = NULL; /* getline's buffer: malloc'd by libc */
  size_t cap = 0;
  uint64_t lineno = 0;
  int rc = SL_OK;
  ssize_t len;
  while (rc == SL_OK && (len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    size_t n = (size_t)len;
    if (n && line[n - 1] == '\n') n--;
    if (n && line[n - 1] == '\r') n--;
    /* The wrapper does not own the line: getline reuses it. */
    sl_buffer *b = sl_buffer_wrap(line, n, NULL, NULL);
    if (!b) {
      rc = SL_ENOMEM;
      break;
    }
    int64_t shape[1] = {(int64_t)n};
    sl_tensor t;
    rc = sl_tensor_view(&t, SL_BYTES, 1, shape, b, 0);
    sl_buffer_release(b);
    if (rc == SL_OK && (rc = sl_sample_set_move(s, 0, &t)) < 0)
      sl_tensor_clear(&t);
    if (rc == SL_OK) rc = sl__sink_append(sink, s);
    if (rc < 0)
      rc = sl_wrap_error(rc, "pack text: %s: line %llu", path,
                         (unsigned long long)lineno);
  }
  /* getline's -1 is also how it reports a failure (ENOMEM): only feof
   * means the file was read to its end. */
  if (rc == SL_OK && (ferror(f) || !feof(f)))
    rc = sl_set_error(SL_EIO, "%s: read failed after line %llu: %s", path,
                      (unsigned long long)lineno, strerror(errno));
  /* Drop the view of `line` before freeing it. */
  sl_tensor empty = {.dtype = SL_BYTES, .rank = 1};
  sl_sample_set(s, 0, &empty);
  free(line);
  fclose(f);
  return rc;
}

/* "a.txt,b.txt" into a new string, or the count when that gets long (schema
 * metadata values are limited to 1 MiB). */
static char *files_meta(const char *const *files, size_t n) {
  size_t len = 1;
  for (size_t i = 0; i < n; i++)
    len += strlen(sl__basename(files[i])) + 1;
  if (len > 4096) len = 64;
  char *m = sl__malloc(len);
  if (!m) return NULL;
  if (len == 64) {
    snprintf(m, len, "%zu files", n);
    return m;
  }
  m[0] = 0;
  for (size_t i = 0, k = 0; i < n; i++)
    k += (size_t)snprintf(m + k, len - k, "%s%s", i ? "," : "",
                          sl__basename(files[i]));
  return m;
}

int sl__pack_text(const char *const *files, size_t n, const char *out,
                  const sl__pack_opts *o, uint64_t *records) {
  if (records) *records = 0;
  SL_RETURN_ERROR_IF(!files || n == 0 || !out, SL_EINVAL,
                     "pack text: no input files");
  uint64_t total = SL__TOTAL_UNKNOWN;
  if (o && o->shards > 1 && o->mode == SL__SHARD_CONTIGUOUS) {
    total = 0;
    for (size_t i = 0; i < n; i++)
      SL_FORWARD_IF_ERROR(count_lines(files[i], &total));
  }
  sl_schema *schema = sl_schema_new();
  SL_RETURN_ERROR_IF(!schema, SL_ENOMEM, "pack text: cannot allocate");
  int64_t var = SL_DIM_VAR;
  char *meta = files_meta(files, n);
  int rc = meta ? SL_OK : SL_ENOMEM;
  if (rc == SL_OK) rc = sl_schema_add(schema, "text", SL_BYTES, 1, &var);
  if (rc >= 0) rc = sl_schema_set_meta(schema, "source", "text");
  if (rc >= 0) rc = sl_schema_set_meta(schema, "files", meta);
  sl__free(meta);
  sl__pack_sink *sink = NULL;
  if (rc >= 0) rc = sl__sink_open(out, schema, total, o, files, n, &sink);
  if (rc >= 0) {
    sl_sample *s = sl_sample_new(schema);
    rc = s ? SL_OK : SL_ENOMEM;
    for (size_t i = 0; i < n && rc == SL_OK; i++)
      rc = pack_file(files[i], s, sink);
    sl_sample_release(s);
    rc = sl__sink_finish(sink, rc, records);
  }
  sl_schema_release(schema);
  return rc < 0 ? rc : SL_OK;
}
