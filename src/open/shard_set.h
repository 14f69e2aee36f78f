/* shard_set.h - refusing a mixed shard set: files of two `pack --shards K`
 * runs read together as one (docs/DATA.md, "Shard sets"). */
#ifndef SLUICE_SHARD_SET_H
#define SLUICE_SHARD_SET_H

#include "core/internal.h"

/* Checks the n files one reader (open_files, an sl_open pattern) or one
 * `sluice verify` reads: paths[i] has the schema metadata of schemas[i]
 * (NULL: a file with no metadata, e.g. one that could not be opened).
 * SL_OK, SL_ECORRUPT naming the odd file (and the file it disagrees with),
 * or SL_ENOMEM.  `stage` ("open_files") prefixes the message; NULL for none.
 * Exported for the CLI; not part of the public API. */
SL_API int sl__shard_set_check(const char *stage, const char *const *paths,
                               const sl_schema *const *schemas, size_t n);

#endif
