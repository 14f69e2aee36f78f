/*
 * source_http.c - a byte source (source.h) over an http(s):// or s3:// URL,
 * read by ranged GETs through http.c, so that a format with an index (SLR:
 * header, footer, index, then only the chunks asked for) fetches what it
 * reads rather than the whole object.
 *
 * Protocol.  Open is one ranged GET of the first read-ahead block (bytes
 * 0..R-1, R = SLUICE_HTTP_READAHEAD, default 4 MiB): its Content-Range
 * gives the size, its ETag and Last-Modified the identity, and its bytes
 * the first cached block.  A read_at of n bytes that the cached block does
 * not hold fetches one block of max(n, R) bytes holding it (moved back so
 * that it ends at the object's end when it would pass it: the tail of an
 * SLR file - schema, index, footer - comes in one request), which replaces
 * the cached block; a read that starts inside the cached block fetches only
 * the bytes after it (at least R of them) and joins them to the cached
 * tail, so a reader walking forward fetches each byte once.  Every range
 * after the first is asked with If-Range and the open's identity (ETag,
 * Last-Modified, size), and http.c checks that every answer is that
 * version, else the read fails "changed while read" rather than mixing two
 * versions of the object.  A server that sends neither ETag nor
 * Last-Modified gives nothing to check a range against, so such an object
 * is fetched whole at open, one version, and served from memory like a
 * server's that ignores ranges.  A server that ignores ranges answers 200 with
 * the whole object: it is kept as the block, and every later read is served
 * from memory (no range support costs memory, not correctness).  An empty
 * object has size 0, whether the server answers its first range with 416
 * (S3) or with an empty 200 (nginx).
 *
 * One mutex guards the cache, so several threads may read one source; the
 * fetch happens under it (readers of one file read it in order anyway).
 * The block is what the source holds (its `held` entry: the format stage
 * owning it charges that to its memory budget).
 * Connections are reused per thread by http.c.
 */
#include "transport/http.h"

#include <stdlib.h>

#define READAHEAD_DEFAULT ((size_t)4 << 20)

typedef struct url_source {
  sl__source base;
  pthread_mutex_t mu;
  size_t readahead;
  unsigned char *blk; /* cached bytes [blk_off, blk_off + blk_n) */
  uint64_t blk_off;
  size_t blk_n;
  sl__http_ident ident; /* at open */
  char stage[32]; /* the opener's, for messages */
} url_source;

/* SLUICE_HTTP_READAHEAD in bytes, with an optional K, M or G suffix
 * (powers of 1024); 4 MiB when unset, at least 1 byte.  A value that does
 * not parse is the default too: the knob tunes speed, not meaning. */
static size_t readahead_bytes(void) {
  const char *v = getenv("SLUICE_HTTP_READAHEAD");
  if (!v || !*v) return READAHEAD_DEFAULT;
  char *end;
  unsigned long long x = strtoull(v, &end, 10);
  int shift = *end == 'K' || *end == 'k'   ? 10
              : *end == 'M' || *end == 'm' ? 20
              : *end == 'G' || *end == 'g' ? 30
                                           : 0;
  if (shift) end++;
  if (*end || x == 0 || x > ((unsigned long long)1 << 40) >> shift)
    return READAHEAD_DEFAULT;
  return (size_t)(x << shift);
}

/* Fills the cache with a block holding [off, off + n); under the lock.
 * A read that starts inside the cached block and runs past its end (a
 * reader walking forward: tar members, TFRecord records) keeps the cached
 * part and fetches only what follows it, so a sequential walk fetches each
 * byte once. */
static int fill(url_source *u, uint64_t off, size_t n) {
  uint64_t size = u->base.size;
  uint64_t end = u->blk_off + u->blk_n;
  size_t keep =
      u->blk && off >= u->blk_off && off < end ? (size_t)(end - off) : 0;
  uint64_t want = n - keep;
  uint64_t len = want > u->readahead ? want : u->readahead;
  uint64_t start = keep ? end : off;
  if (keep && len > size - end) len = size - end;
  if (len > size) len = size;
  if (start + len > size) start = size - len; /* end at the object's end */
  unsigned char *p;
  size_t got;
  sl__http_meta m;
  SL_FORWARD_IF_ERROR(sl__http_get_range(
      u->stage, u->base.name, start, start + len - 1, &u->ident, &p, &got, &m));
  int rc = SL_OK;
  if (m.whole) { /* a 200 of the version seen at open (http.c checked) */
    start = 0; /* the whole object: it serves every read from now on */
    keep = 0;
  } else if (rc == SL_OK && (m.status != 206 || got < off + n - start)) {
    rc = sl_set_error(SL_EIO,
                      "%s: %s: asked for bytes %llu-%llu, got %zu bytes "
                      "(HTTP %ld): the object shrank?",
                      u->stage, u->base.name, (unsigned long long)start,
                      (unsigned long long)(start + len - 1), got, m.status);
  }
  if (rc == SL_OK && keep) { /* the cached tail, then the new bytes */
    unsigned char *q = sl__malloc(keep + got);
    if (!q) {
      rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory (%zu bytes)",
                        u->stage, u->base.name, keep + got);
    } else {
      memcpy(q, u->blk + (off - u->blk_off), keep);
      memcpy(q + keep, p, got);
      sl__free(p);
      p = q;
      start = off;
      got += keep;
    }
  }
  if (rc < 0) {
    sl__free(p);
    return rc;
  }
  sl__free(u->blk);
  u->blk = p;
  u->blk_off = start;
  u->blk_n = got;
  return SL_OK;
}

static int url_read_at(sl__source *s, uint64_t off, void *buf, size_t n) {
  url_source *u = (url_source *)s;
  if (n == 0) return SL_OK;
  if (off > s->size || n > s->size - off)
    return sl_set_error(SL_EIO,
                        "%s: %s: read of %zu bytes at offset %llu is past "
                        "the end (the object is %llu bytes)",
                        u->stage, s->name, n, (unsigned long long)off,
                        (unsigned long long)s->size);
  pthread_mutex_lock(&u->mu);
  int rc = SL_OK;
  if (!(off >= u->blk_off && off - u->blk_off <= u->blk_n &&
        n <= u->blk_n - (off - u->blk_off)))
    rc = fill(u, off, n);
  if (rc == SL_OK) memcpy(buf, u->blk + (off - u->blk_off), n);
  pthread_mutex_unlock(&u->mu);
  return rc;
}

/* The cached block's bytes (the read-ahead), under the lock. */
static uint64_t url_held(sl__source *s) {
  url_source *u = (url_source *)s;
  pthread_mutex_lock(&u->mu);
  uint64_t n = u->blk ? u->blk_n : 0;
  pthread_mutex_unlock(&u->mu);
  return n;
}

static void url_close(sl__source *s) {
  url_source *u = (url_source *)s;
  pthread_mutex_destroy(&u->mu);
  SL__FREE(u->blk, s->name, u);
}

int sl__source_open_url(const char *stage, const char *url, sl__source **out) {
  *out = NULL;
  size_t ra = readahead_bytes();
  unsigned char *p;
  size_t got;
  sl__http_meta m;
  SL_FORWARD_IF_ERROR(
      sl__http_get_range(stage, url, 0, ra - 1, NULL, &p, &got, &m));
  if (m.status == 206 && !sl__http_ident_known(&m.id) &&
      !(m.id.size != UINT64_MAX && got >= m.id.size)) {
    /* No validator: two ranges could come from two versions unnoticed, so
     * the whole object is fetched in one answer instead. */
    sl__free(p);
    SL_FORWARD_IF_ERROR(
        sl__http_get_range(stage, url, 0, UINT64_MAX, NULL, &p, &got, &m));
    if (!m.whole) { /* a plain GET answered with a range: not HTTP */
      sl__free(p);
      return sl_set_error(SL_EIO,
                          "%s: %s: a GET without Range was answered with "
                          "HTTP %ld",
                          stage, url, m.status);
    }
  }
  uint64_t size = m.whole ? got : m.id.size;
  if (m.status == 416 && size == UINT64_MAX) size = 0; /* empty, unsaid */
  if (size == UINT64_MAX || (m.status == 416 && size != 0) ||
      (m.status == 206 && got != (size < ra ? size : ra))) {
    sl__free(p);
    return sl_set_error(SL_EIO,
                        "%s: %s: the server's answer to a ranged GET of bytes "
                        "0-%zu does not say the object's size (HTTP %ld, %zu "
                        "bytes, Content-Range total %s)",
                        stage, url, ra - 1, m.status, got,
                        m.id.size == UINT64_MAX ? "absent" : "unexpected");
  }
  url_source *u = sl__calloc(1, sizeof *u);
  char *name = sl__strdup(url);
  if (!u || !name || pthread_mutex_init(&u->mu, NULL) != 0) {
    SL__FREE(u, name, p);
    return sl_set_error(SL_ENOMEM, "%s: %s: cannot allocate a source", stage,
                        url);
  }
  u->readahead = ra;
  u->blk = p;
  u->blk_n = got;
  u->ident = m.id;
  u->ident.size = size;
  snprintf(u->stage, sizeof u->stage, "%s", stage);
  u->base.read_at = url_read_at;
  u->base.close = url_close;
  u->base.held = url_held;
  u->base.size = size;
  u->base.name = name;
  /* The identity a saved state checks: the ETag, the URL and Last-Modified
   * stand where a file's device, inode and mtime do. */
  sl__http_ident_file_id(&u->ident, url, &u->base.id);
  *out = &u->base;
  return SL_OK;
}

int sl__source_url_ident(const sl__source *s, sl__http_ident *out) {
  sl__http_ident_unknown(out);
  SL_RETURN_ERROR_IF(!s || s->close != url_close, SL_EINVAL,
                     "%s: not a URL source", s && s->name ? s->name : "?");
  *out = ((const url_source *)s)->ident;
  return SL_OK;
}
