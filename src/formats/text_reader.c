/*
 * text_reader.c - the `text` file reader: one sample per line, read through
 * memory buffers or mmap, optionally turned into samples by a parser plugin.
 *
 * Two ways in, one way out.  Both modes find lines the same way (memchr for
 * '\n', then one trailing '\r' dropped) and hand (pointer, length, line
 * number) to the same code that makes the sample, so they cannot disagree
 * about what a line is; the tests compare them file by file.
 *
 *  - Buffers (the default): read(2) into a buffer in pieces of READ_STEP,
 *    the unfinished line moved to the front before each refill and the
 *    buffer doubled when a line outgrows it, so memory is O(longest line)
 *    whatever the file size.  Lines are copied into their samples: a view
 *    into the shared buffer would pin it (and every line after it) for as
 *    long as a shuffle buffer keeps one sample.
 *  - mmap: the whole file is mapped once, at open, and held by a refcounted
 *    sl_buffer whose free callback unmaps it; lines are zero-copy views, so
 *    the mapping lives until the last sample goes.  A mapping is page cache,
 *    not our memory, so pinning it costs nothing but address space.
 *
 * Memory budget: in buffer mode the buffer (its capacity: READ_STEP and
 * more, the longest line's) is the stage's resident charge, measured
 * again after each line; a mapping is page cache and not counted.
 *
 * Line numbers are 1-based and count every line, skipped ones included, so
 * a message's "data.csv:17" is what an editor shows.
 *
 * Saving (stages/state.h): a byte offset, not a replay.  Each output notes
 * the offset after its line and its line number (sl__state_log, so a save
 * a little behind the reader finds them); a restore seeks there.  The record
 * holds the file's identity (sl__state_put_file_ids: device, inode, size,
 * mtime; as mapped, or as fstat says at the save in buffer mode) and a
 * CRC32C of the (up to) 256 bytes before the offset, so a state of a file
 * changed since is refused (SL_ECORRUPT naming it).
 */
#include "core/crc32c.h"
#include "transport/fmt_map.h"
#include "formats/parser_plugin.h"
#include "stages/stage.h"
#include "sync/resident.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bytes asked of each read(2): large enough that syscalls are a small part
 * of the cost, small enough to stay in L2 while memchr scans it. */
#define READ_STEP ((size_t)64 << 10)

typedef struct text_state {
  char *path;
  char *ctx; /* "text: PATH", the start of every message */
  bool use_mmap;
  int fd;
  sl__file_id id; /* mmap mode: the file as mapped */
  /* mmap mode: the mapping (NULL for an empty file) and the next offset */
  sl_buffer *map;
  const char *base;
  size_t size, pos;
  /* buffer mode: bytes [start, end) of buf are unread; '\n' was searched
   * for up to `scan` already; eof once read(2) returned 0 */
  char *buf;
  size_t cap, start, end, scan;
  bool eof;
  uint64_t boff;   /* buffer mode: the file offset of buf[0] */
  uint64_t lineno; /* of the line returned last */
  /* per output: the offset after its line - 1, and its line number - 1 */
  sl__state_log off_log, line_log;
  char *parser_name; /* "NAME OPTIONS" (the plugin's base name); NULL: lines */
  sl__parser *parser;
  sl_schema *schema;
  sl__resident held; /* buffer mode: buf's capacity, charged */
} text_state;

/* The memory budget: the read buffer, from the next line read. */
static void text_budget(void *st, sl__budget_acct *acct) {
  sl__resident_account(&((text_state *)st)->held, acct);
}

static void text_destroy(void *st) {
  text_state *s = st;
  if (!s) return;
  sl__parser_close(s->parser);
  sl_schema_release(s->schema);
  sl_buffer_release(s->map); /* samples may still hold the mapping */
  if (s->fd >= 0) close(s->fd);
  SL__FREE(s->buf, s->ctx, s->path, s->parser_name, s);
}

static int text_reset(void *st) {
  text_state *s = st;
  s->lineno = 0;
  s->pos = 0;
  s->start = s->end = s->scan = 0;
  s->eof = false;
  s->boff = 0;
  s->off_log.count = s->line_log.count = 0;
  if (!s->use_mmap && lseek(s->fd, 0, SEEK_SET) < 0)
    return sl_set_error(SL_EIO, "%s: cannot rewind: %s", s->ctx,
                        strerror(errno));
  return SL_OK;
}

/* The next line of a mapped file: *off is its offset in the mapping. */
static int map_line(text_state *s, const char **line, size_t *len,
                    size_t *off) {
  if (s->pos >= s->size) return SL_EOF;
  const char *p = s->base + s->pos;
  size_t left = s->size - s->pos;
  const char *nl = memchr(p, '\n', left);
  *line = p;
  *off = s->pos;
  *len = nl ? (size_t)(nl - p) : left;
  s->pos += *len + (nl ? 1 : 0);
  return SL_OK;
}

/* Makes room for at least READ_STEP more bytes after `end`. */
static int make_room(text_state *s) {
  if (s->start > 0) { /* keep only the unfinished line */
    memmove(s->buf, s->buf + s->start, s->end - s->start);
    s->boff += s->start;
    s->end -= s->start;
    s->scan -= s->start;
    s->start = 0;
  }
  if (s->cap - s->end >= READ_STEP) return SL_OK;
  size_t cap = SL_MAX(2 * s->cap, s->end + READ_STEP);
  char *b = sl__realloc(s->buf, cap);
  SL_RETURN_ERROR_IF(!b, SL_ENOMEM,
                     "%s: cannot allocate %zu bytes for line %llu", s->ctx, cap,
                     (unsigned long long)s->lineno + 1);
  s->buf = b;
  s->cap = cap;
  return SL_OK;
}

/* The next line of the file read with read(2); valid until the next call. */
static int buf_line(text_state *s, const char **line, size_t *len) {
  for (;;) {
    /* (memchr on the NULL buffer of a fresh reader would be undefined.) */
    const char *nl = s->end > s->scan
                         ? memchr(s->buf + s->scan, '\n', s->end - s->scan)
                         : NULL;
    if (nl || (s->eof && s->start < s->end)) {
      size_t stop = nl ? (size_t)(nl - s->buf) : s->end;
      *line = s->buf + s->start;
      *len = stop - s->start;
      s->start = s->scan = nl ? stop + 1 : stop;
      return SL_OK;
    }
    if (s->eof) return SL_EOF;
    s->scan = s->end;
    SL_FORWARD_IF_ERROR(make_room(s));
    ssize_t k;
    do
      k = read(s->fd, s->buf + s->end, SL_MIN(s->cap - s->end, 4 * READ_STEP));
    while (k < 0 && errno == EINTR);
    if (k < 0)
      return sl_set_error(SL_EIO, "%s: read failed after line %llu: %s", s->ctx,
                          (unsigned long long)s->lineno, strerror(errno));
    if (k == 0)
      s->eof = true;
    else
      s->end += (size_t)k;
  }
}

/* The line as a {line: bytes[len]} sample: a view of the mapping, or a
 * copy. */
static int line_sample(text_state *s, const char *line, size_t len,
                       size_t map_off, sl_sample **out) {
  sl_sample *smp = sl_sample_new(s->schema);
  SL_RETURN_ERROR_IF(!smp, SL_ENOMEM, "%s:%llu: cannot allocate a sample",
                     s->ctx, (unsigned long long)s->lineno);
  int64_t shape[1] = {(int64_t)len};
  int rc;
  if (s->map) {
    sl_tensor t;
    rc = sl_tensor_view(&t, SL_BYTES, 1, shape, s->map, map_off);
    if (rc == SL_OK && (rc = sl_sample_set_move(smp, 0, &t)) < 0)
      sl_tensor_clear(&t);
  } else {
    void *data;
    rc = sl_sample_alloc(smp, 0, 1, shape, &data);
    if (rc == SL_OK && len) memcpy(data, line, len);
  }
  if (rc < 0)
    rc = sl_wrap_error(rc, "%s:%llu", s->ctx, (unsigned long long)s->lineno);
  return sl__sample_out(rc, smp, out);
}

/* The file offset after the line read last. */
static uint64_t text_offset(const text_state *s) {
  return s->use_mmap ? s->pos : s->boff + s->start;
}

static int text_next(void *st, sl_sample **out) {
  text_state *s = st;
  for (;;) {
    const char *line = NULL;
    size_t len = 0, off = 0;
    int rc =
        s->use_mmap ? map_line(s, &line, &len, &off) : buf_line(s, &line, &len);
    sl__resident_set(&s->held, s->cap);
    if (rc != SL_OK) return rc; /* SL_EOF or an error */
    s->lineno++;
    if (len && line[len - 1] == '\r') len--;
    if (!s->parser)
      rc = line_sample(s, line, len, off, out);
    else
      rc = sl__parser_parse(s->parser, line, len, s->ctx, s->lineno, out);
    if (rc == SL_PARSER_SKIP) continue;
    if (rc == SL_OK) { /* a line consumed ends at offset >= 1 */
      sl__state_log_note(&s->off_log, text_offset(s) - 1);
      sl__state_log_note(&s->line_log, s->lineno - 1);
    }
    return rc;
  }
}

/* --- saving and restoring ------------------------------------------------ */

#define TEXT_TAIL 256

/* CRC32C of the (up to) TEXT_TAIL bytes before `off`. */
static int text_tail_crc(const text_state *s, uint64_t off, uint32_t *crc) {
  char b[TEXT_TAIL];
  size_t n = (size_t)SL_MIN(off, (uint64_t)TEXT_TAIL);
  uint64_t at = off - n;
  if (s->use_mmap) {
    if (n) memcpy(b, s->base + at, n);
  } else {
    size_t got = 0;
    while (got < n) {
      ssize_t r = pread(s->fd, b + got, n - got, (off_t)(at + got));
      if (r < 0 && errno == EINTR) continue;
      SL_RETURN_ERROR_IF(r <= 0, SL_ECORRUPT,
                         "restore: %s: cannot read at offset %llu: %s", s->ctx,
                         (unsigned long long)at,
                         r < 0 ? strerror(errno) : "the file is shorter");
      got += (size_t)r;
    }
  }
  *crc = sl__crc32c(0, b, n);
  return SL_OK;
}

/* The file's identity: as mapped, or (buffer mode) as it is now. */
static int text_id(const text_state *s, sl__file_id *id) {
  if (s->use_mmap) {
    *id = s->id;
    return SL_OK;
  }
  struct stat st;
  SL_RETURN_ERROR_IF(fstat(s->fd, &st) != 0, SL_EIO, "%s: cannot stat: %s",
                     s->ctx, strerror(errno));
  *id = sl__file_id_of(&st);
  return SL_OK;
}

/* Record: the file's identity, offset, line number, CRC of the bytes
 * before. */
static int text_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                     sl__state_out *w) {
  text_state *s = st;
  uint64_t off, line;
  sl__file_id id;
  uint32_t crc;
  SL_RETURN_ERROR_IF(!sl__state_log_find(&s->off_log, k, &off) ||
                         !sl__state_log_find(&s->line_log, k, &line),
                     SL_EUNSUPPORTED,
                     "save: %s: position %llu is more than %d samples behind "
                     "the reader",
                     s->ctx, (unsigned long long)k, SL__STATE_LOG);
  SL_FORWARD_IF_ERROR(text_id(s, &id));
  SL_FORWARD_IF_ERROR(text_tail_crc(s, off, &crc));
  SL_FORWARD_IF_ERROR(sl__state_put_file_ids(w, &id, 1));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, off));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, line));
  return sl__state_put_u64(w, crc);
}

/* Reads the record, checking it against the file: *off and *line, and
 * position k at most one sample a line and one line a byte. */
static int text_record(const text_state *s, uint64_t k, sl__state_in *in,
                       uint64_t *off, uint64_t *line) {
  uint64_t crc;
  sl__file_id now;
  uint32_t c = 0;
  SL_FORWARD_IF_ERROR(text_id(s, &now));
  SL_FORWARD_IF_ERROR(sl__state_check_file_id(in, "text", s->path, &now));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, off));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, line));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &crc));
  SL_RETURN_ERROR_IF(*off > now.size || *line > *off + 1 || k > *line,
                     SL_ECORRUPT,
                     "restore: corrupt state: %s: sample %llu, line %llu at "
                     "offset %llu of %llu bytes",
                     s->ctx, (unsigned long long)k, (unsigned long long)*line,
                     (unsigned long long)*off, (unsigned long long)now.size);
  SL_FORWARD_IF_ERROR(text_tail_crc(s, *off, &c));
  SL_RETURN_ERROR_IF(c != crc, SL_ECORRUPT,
                     "restore: %s: the file changed since the state was saved "
                     "(other contents before offset %llu)",
                     s->ctx, (unsigned long long)*off);
  return SL_OK;
}

static int text_check(const sl_reader *r, void *st, sl__state_in *in) {
  uint64_t off, line;
  return text_record(st, sl__state_position(in), in, &off, &line);
}

static int text_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  text_state *s = st;
  uint64_t off, line;
  SL_FORWARD_IF_ERROR(text_record(s, k, in, &off, &line));
  SL_FORWARD_IF_ERROR(text_reset(s));
  if (s->use_mmap) {
    s->pos = (size_t)off;
  } else {
    SL_RETURN_ERROR_IF(lseek(s->fd, (off_t)off, SEEK_SET) < 0, SL_EIO,
                       "%s: cannot seek to offset %llu: %s", s->ctx,
                       (unsigned long long)off, strerror(errno));
    s->boff = off;
  }
  s->lineno = line;
  /* The logs restart at output k (earlier outputs cannot be saved at). */
  s->off_log.count = s->line_log.count = k;
  if (k > 0) {
    s->off_log.up[(k - 1) % SL__STATE_LOG] = off - 1;
    s->line_log.up[(k - 1) % SL__STATE_LOG] = line - 1;
  }
  return SL_OK;
}

static void text_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const text_state *s = st;
  snprintf(buf, cap, "%s parser=%s", sl__basename(s->path),
           s->parser_name ? s->parser_name : "lines");
}

static const sl__stage_ops text_ops = {
    .name = "text",
    .next = text_next,
    .reset = text_reset,
    .destroy = text_destroy,
    .save = text_save,
    .restore = text_restore,
    .identity = text_identity,
    .check = text_check,
    .budget = text_budget,
};

static void unmap(void *ud, void *data) {
  munmap(data, (size_t)(uintptr_t)ud);
}

/* Maps the whole file (nothing for an empty one). */
static int map_file(text_state *s, const struct stat *st) {
  SL_RETURN_ERROR_IF(!S_ISREG(st->st_mode), SL_EINVAL,
                     "%s: cannot mmap: not a regular file (read it without "
                     "text_mmap)",
                     s->ctx);
  SL_RETURN_ERROR_IF((uint64_t)st->st_size > SIZE_MAX, SL_EINVAL,
                     "%s: too large to map", s->ctx);
  s->size = (size_t)st->st_size;
  if (s->size == 0) return SL_OK;
  void *p = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, s->fd, 0);
  SL_RETURN_ERROR_IF(p == MAP_FAILED, SL_EIO, "%s: cannot mmap %zu bytes: %s",
                     s->ctx, s->size, strerror(errno));
  /* Advice only: a failure changes nothing but speed. */
  (void)madvise(p, s->size, MADV_SEQUENTIAL);
  s->map = sl_buffer_wrap(p, s->size, unmap, (void *)(uintptr_t)s->size);
  if (!s->map) {
    munmap(p, s->size);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate a buffer", s->ctx);
  }
  s->base = p;
  return SL_OK;
}

/* {line: bytes[-1]}, with metadata sluice.path = the path: each file has a
 * schema object of its own, so a stage after a glob's chain (the Lua
 * parser, lua_stage.c) can tell the files apart and name them. */
static int line_schema(text_state *s) {
  s->schema = sl_schema_new();
  int64_t var[1] = {SL_DIM_VAR};
  int rc = s->schema ? sl_schema_add(s->schema, "line", SL_BYTES, 1, var)
                     : SL_ENOMEM;
  if (rc >= 0) rc = sl_schema_set_meta(s->schema, "sluice.path", s->path);
  if (rc == SL_ENOMEM)
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate a schema", s->ctx);
  return rc < 0 ? rc : SL_OK;
}

static int open_state(text_state *s, const char *path, const char *parser,
                      const char *parser_options) {
  size_t n = strlen(path) + 7;
  s->path = sl__strdup(path);
  s->ctx = sl__malloc(n);
  SL_RETURN_ERROR_IF(!s->path || !s->ctx, SL_ENOMEM,
                     "text: %s: cannot allocate a reader", path);
  snprintf(s->ctx, n, "text: %s", path);
  s->fd = open(path, O_RDONLY | O_CLOEXEC);
  SL_RETURN_ERROR_IF(s->fd < 0, SL_EIO, "%s: cannot open: %s", s->ctx,
                     strerror(errno));
  struct stat st;
  SL_RETURN_ERROR_IF(fstat(s->fd, &st) != 0, SL_EIO, "%s: cannot stat: %s",
                     s->ctx, strerror(errno));
  SL_RETURN_ERROR_IF(S_ISDIR(st.st_mode), SL_EIO, "%s: is a directory", s->ctx);
  s->id = sl__file_id_of(&st);
  if (s->use_mmap) {
    SL_FORWARD_IF_ERROR(map_file(s, &st));
    /* The mapping holds the file's pages; the descriptor is not needed. */
    close(s->fd);
    s->fd = -1;
  }
  if (!parser) return line_schema(s);
  SL_FORWARD_IF_ERROR(
      sl__parser_open(parser, parser_options, s->ctx, &s->parser));
  const char *pname = sl__basename(parser), *popts = parser_options;
  size_t n2 = strlen(pname) + (popts ? strlen(popts) : 0) + 2;
  s->parser_name = sl__malloc(n2);
  SL_RETURN_ERROR_IF(!s->parser_name, SL_ENOMEM, "%s: cannot allocate", s->ctx);
  snprintf(s->parser_name, n2, "%s %s", pname, popts ? popts : "");
  s->schema = sl_schema_retain(sl__parser_schema(s->parser));
  return SL_OK;
}

int sl_text_reader(const char *path, int use_mmap, const char *parser,
                   const char *parser_options, sl_reader **out) {
  SL_SOURCE_ARGS("text", path, out);
  text_state *s = sl__calloc(1, sizeof *s);
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "text: %s: cannot allocate a reader", path);
  sl__resident_init(&s->held);
  s->fd = -1;
  s->use_mmap = use_mmap != 0;
  int rc = open_state(s, path, parser, parser_options);
  if (rc < 0) {
    text_destroy(s);
    return rc;
  }
  return sl__stage_new(&text_ops, s, s->schema, NULL, 0, NULL, out);
}
