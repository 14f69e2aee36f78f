/* http.h - remote files over HTTP(S) with libcurl (http.c), for the
 * readers: a name such as "npy:https://host/x.npy" or "s3://bucket/x.tar"
 * is fetched instead of mapped (fmt_map.c), and an indexed format (SLR)
 * reads it by ranges through a URL byte source (source_http.c). */
#ifndef SLUICE_IO_HTTP_H
#define SLUICE_IO_HTTP_H

#include "core/internal.h"
#include "transport/source.h"

/* sl__is_url (core/internal.h, core/path.c) tells an http://, https:// or
 * s3:// URL; an s3:// name is mapped to an HTTP(S) URL and signed (s3.h). */

/* What tells one version of a remote object from another: its validators
 * (ETag, Last-Modified) and its size.  A field the server did not send is
 * unknown ("", -1, UINT64_MAX), and unknown is never "unchanged": two
 * identities are the same only when they share a validator and nothing
 * they both know differs (sl__http_ident_compare). */
typedef struct sl__http_ident {
  char etag[128];    /* ETag as sent (quotes kept; "W/" marks a weak one) */
  char modified[64]; /* Last-Modified as sent */
  int64_t filetime;  /* Last-Modified in seconds since 1970, or -1 */
  uint64_t size;     /* the object's size, or UINT64_MAX */
} sl__http_ident;

/* An identity with every field unknown. */
void sl__http_ident_unknown(sl__http_ident *id);

/* Whether `id` has a validator (an ETag or a Last-Modified). */
bool sl__http_ident_known(const sl__http_ident *id);

typedef enum sl__ident_cmp {
  SL__IDENT_SAME,    /* a shared validator, and nothing known differs */
  SL__IDENT_CHANGED, /* a validator or the size known on both differs */
  SL__IDENT_UNKNOWN  /* no validator known on both */
} sl__ident_cmp;

/* Compares the identity `was` (seen first) with `now`; when `why` is not
 * NULL and the answer is SL__IDENT_CHANGED, writes what differs there
 * ("ETag \"a\" before, now \"b\""). */
sl__ident_cmp sl__http_ident_compare(const sl__http_ident *was,
                                     const sl__http_ident *now, char *why,
                                     size_t cap);

/* The file identity a saved state records for the object at `url` with
 * identity `id` (source.h): dev is a hash of the ETag (0 without one), ino
 * a hash of the URL, size the size, mtime_s Last-Modified (-1 without
 * one); mtime_ns is 0, or -1 when the object has no validator at all - an
 * identity that cannot prove the object unchanged. */
void sl__http_ident_file_id(const sl__http_ident *id, const char *url,
                            sl__file_id *out);

/* What a response said about the object. */
typedef struct sl__http_meta {
  long status;       /* the last response's status: 200, 206 or 416 */
  bool whole;        /* the body is the whole object, from byte 0 (the
                        server answered 200, ignoring any range) */
  sl__http_ident id; /* the object's identity; id.size is Content-Range's
                        total or a 200's body size */
} sl__http_meta;

/* GETs the object at `url` into *out (a new buffer).  Connections are
 * reused per thread.  A dropped connection, a timeout, HTTP 429 or 5xx is
 * retried with exponential backoff (SLUICE_HTTP_RETRIES, default 5;
 * SLUICE_HTTP_BACKOFF_MS, default 100, doubling).  A body cut short resumes
 * where it stopped with a ranged GET carrying "If-Range" (the strong ETag,
 * else Last-Modified), and every response's identity must be the first's:
 * a resumed part of another version (another ETag, Last-Modified or size,
 * or a 200 answering the If-Range) is SL_EIO "changed while read" naming
 * the URL, never a body mixing two versions; an object without validators
 * cannot be resumed safely and is fetched again from byte 0.  Redirects
 * are followed (at most 10) to http:// and https:// only, and credentials
 * (S3 signing and session token, a URL's user:password) go only to the
 * original scheme, host and port.  Returns SL_OK, SL_EIO naming the URL and
 * the HTTP status or the transfer error (4xx at once, others once the
 * retries are spent), SL_EINVAL (a bad s3:// name or missing credentials),
 * SL_EUNSUPPORTED (built without libcurl) or SL_ENOMEM.  `ident` (may be
 * NULL) receives the object's identity.  `stage` prefixes messages.
 * Thread-safe. */
int sl__http_get(const char *stage, const char *url, sl_buffer **out,
                 sl__http_ident *ident);

/* GETs bytes [from, to] (inclusive; to = UINT64_MAX: to the end) of the
 * object at `url` with "Range: bytes=from-to", with the retries, resumption,
 * redirects and errors of sl__http_get (the same loop).  With `expect` (may
 * be NULL: the first request of an object) the request carries If-Range and
 * the answer must be that version: else SL_EIO "changed while read".  On
 * SL_OK *out is a new sl__malloc'd block of *n bytes (free with sl__free)
 * and *meta says what it is: status 206, the bytes asked for (fewer at the
 * object's end); status 200 (meta->whole), the whole object from byte 0 -
 * a server that ignores ranges; status 416, nothing (a range past the end,
 * as a first range of an empty object is).  Other outcomes as
 * sl__http_get.  Thread-safe. */
int sl__http_get_range(const char *stage, const char *url, uint64_t from,
                       uint64_t to, const sl__http_ident *expect,
                       unsigned char **out, size_t *n, sl__http_meta *meta);

/* Opens `url` as a byte source read by ranged GETs (source_http.c): its
 * size, ETag and Last-Modified come from a first ranged GET of the first
 * read-ahead block; each read_at missing the block cache fetches
 * max(n, SLUICE_HTTP_READAHEAD bytes, default 4 MiB) around it, or, when
 * the read starts inside the cached block, only the bytes after that block
 * (a forward walk fetches each byte once).  A server
 * that ignores ranges gives the whole object at once, kept for every read.
 * The source's identity (sl__source_url_ident) is the first response's;
 * every later range is asked with If-Range and must answer that version,
 * else the read fails (SL_EIO "changed while read") rather than mixing two
 * versions.  An object whose server sends neither ETag nor Last-Modified
 * cannot be told from a replacement between two ranges: it is fetched
 * whole at open (one version, in memory).  The source's id is
 * sl__http_ident_file_id of that identity.  Returns as sl__http_get_range,
 * and SL_ENOMEM.  The source is safe to read
 * from several threads (one lock around its cache). */
int sl__source_open_url(const char *stage, const char *url, sl__source **out);

/* The identity of the object a URL source (sl__source_open_url) reads, as
 * its first response said: SL_OK, or SL_EINVAL when `s` is not a URL
 * source.  For saved states that record what they read. */
int sl__source_url_ident(const sl__source *s, sl__http_ident *out);

/* Requests made, retries done and body bytes received by this process
 * (tests). */
void sl__http_counts(uint64_t *requests, uint64_t *retries);
uint64_t sl__http_bytes(void);

#endif
