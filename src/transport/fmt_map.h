/* fmt_map.h - whole files mapped into refcounted buffers, for the readers
 * of other programs' formats (npy, csv, wds, tfrecord; docs/FORMATS.md):
 * each sample is then a zero-copy view of the mapping, and the mapping
 * lives as long as the last sample that points into it. */
#ifndef SLUICE_IO_FMT_MAP_H
#define SLUICE_IO_FMT_MAP_H

#include "core/internal.h"
#include "transport/source.h"

/* Maps `path` read-only (mmap, MAP_PRIVATE) into *out, a buffer whose last
 * release unmaps it; an empty file is an empty buffer.  An http:// or
 * https:// URL is fetched whole instead (http.h: retries, errors naming
 * the URL and status; SL_EUNSUPPORTED without libcurl): csv and npz come
 * here for URLs; wds shards and TFRecord files read URLs by ranges through
 * sl__source_open_url instead, and never call this for one.  *id (may be
 * NULL) gets the file's identity at open.  `stage` prefixes messages.  Returns
 * SL_OK, SL_EIO naming the file (missing, unreadable, not a regular file)
 * or SL_ENOMEM. */
int sl__map_file(const char *stage, const char *path, sl_buffer **out,
                 sl__file_id *id);

/* A format reader's first checks: `out` (then *out = NULL) and `path`
 * ("csv: NULL out pointer", "csv: empty path"). */
#define SL_SOURCE_ARGS(stage, path, out)                                       \
  do {                                                                         \
    SL_RETURN_ERROR_IF(!(out), SL_EINVAL, stage ": NULL out pointer");         \
    *(out) = NULL;                                                             \
    SL_RETURN_ERROR_IF(!(path) || !(path)[0], SL_EINVAL, stage ": %s path",    \
                       (path) ? "empty" : "NULL");                             \
  } while (0)

/* The base name of `path` without its last extension, into buf ("a/x.npy"
 * -> "x"). */
void sl__path_stem(const char *path, char *buf, size_t size);

#endif
