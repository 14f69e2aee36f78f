/* http.h - remote files over HTTP(S) with libcurl (http.c), for the
 * readers: a name such as "npy:https://host/x.npy" or "s3://bucket/x.tar"
 * is fetched instead of mapped (fmt_map.c), and an indexed format (SLR)
 * reads it by ranges through a URL byte source (source_http.c). */
#ifndef SLUICE_IO_HTTP_H
#define SLUICE_IO_HTTP_H

#include "core/internal.h"
#include "io/source.h"

/* Whether `path` is an http://, https:// or s3:// URL.  An s3:// name is
 * mapped to an HTTP(S) URL and signed (s3.h). */
bool sl__is_url(const char *path);

/* What a response said about the object. */
typedef struct sl__http_meta {
  long status;      /* the last response's status: 200, 206 or 416 */
  bool whole;       /* the body is the whole object, from byte 0 (the
                       server answered 200, ignoring any range) */
  uint64_t total;   /* the object's size (Content-Range's total, or a
                       200's body); UINT64_MAX when not said */
  int64_t filetime; /* Last-Modified in seconds since 1970, or -1 */
  char etag[128];   /* ETag as sent (quotes kept), or "" */
} sl__http_meta;

/* GETs the object at `url` into *out (a new buffer).  Connections are
 * reused per thread.  A dropped connection, a timeout, HTTP 429 or 5xx is
 * retried with exponential backoff (SLUICE_HTTP_RETRIES, default 5;
 * SLUICE_HTTP_BACKOFF_MS, default 100, doubling); a body cut short resumes
 * where it stopped with a ranged GET.  Returns SL_OK, SL_EIO naming the URL
 * and the HTTP status or the transfer error (4xx at once, others once the
 * retries are spent), SL_EINVAL (an s3:// name without bucket, key or
 * credentials), SL_EUNSUPPORTED (built without libcurl) or SL_ENOMEM.
 * `stage` prefixes messages.  Thread-safe. */
int sl__http_get(const char *stage, const char *url, sl_buffer **out);

/* GETs bytes [from, to] (inclusive; to = UINT64_MAX: to the end) of the
 * object at `url` with "Range: bytes=from-to", with the retries, resumption
 * and errors of sl__http_get (the same loop).  On SL_OK *out is a new
 * sl__malloc'd block of *n bytes (free with sl__free) and *meta says what
 * it is: status 206, the bytes asked for (fewer at the object's end);
 * status 200 (meta->whole), the whole object from byte 0 - a server that
 * ignores ranges; status 416, nothing (a range past the end, as a first
 * range of an empty object is).  Other outcomes as sl__http_get.
 * Thread-safe. */
int sl__http_get_range(const char *stage, const char *url, uint64_t from,
                       uint64_t to, unsigned char **out, size_t *n,
                       sl__http_meta *meta);

/* Opens `url` as a byte source read by ranged GETs (source_http.c): its
 * size, ETag and Last-Modified come from a first ranged GET of the first
 * read-ahead block; each read_at missing the block cache fetches
 * max(n, SLUICE_HTTP_READAHEAD bytes, default 4 MiB) around it, or, when
 * the read starts inside the cached block, only the bytes after that block
 * (a forward walk fetches each byte once).  A server
 * that ignores ranges gives the whole object at once, kept for every read.
 * The source's id is the object's size, hashed ETag and Last-Modified; a
 * read that finds another ETag or size fails (SL_EIO "changed while read").
 * Returns as sl__http_get_range, and SL_ENOMEM.  The source is safe to read
 * from several threads (one lock around its cache). */
int sl__source_open_url(const char *stage, const char *url, sl__source **out);

/* Requests made, retries done and body bytes received by this process
 * (tests). */
void sl__http_counts(uint64_t *requests, uint64_t *retries);
uint64_t sl__http_bytes(void);

#endif
