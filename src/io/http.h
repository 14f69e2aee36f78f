/* http.h - remote files over HTTP(S) with libcurl (http.c), for the
 * readers of other programs' formats: a name such as
 * "npy:https://host/x.npy" is fetched instead of mapped (fmt_map.c). */
#ifndef SLUICE_IO_HTTP_H
#define SLUICE_IO_HTTP_H

#include "core/internal.h"

/* Whether `path` is an http:// or https:// URL. */
bool sl__is_url(const char *path);

/* GETs the object at `url` into *out (a new buffer).  Connections are
 * reused per thread.  A dropped connection, a timeout, HTTP 429 or 5xx is
 * retried with exponential backoff (SLUICE_HTTP_RETRIES, default 5;
 * SLUICE_HTTP_BACKOFF_MS, default 100, doubling); a body cut short resumes
 * where it stopped with a ranged GET.  Returns SL_OK, SL_EIO naming the URL
 * and the HTTP status or the transfer error (4xx at once, others once the
 * retries are spent), SL_EUNSUPPORTED (built without libcurl) or
 * SL_ENOMEM.  `stage` prefixes messages.  Thread-safe. */
int sl__http_get(const char *stage, const char *url, sl_buffer **out);

/* Requests made and retries done by this process (tests). */
void sl__http_counts(uint64_t *requests, uint64_t *retries);

#endif
