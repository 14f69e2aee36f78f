/* registry.h - the format registry's interface to the rest of libsluice:
 * expanding names (tags, extensions, globs) into tagged paths, and reading
 * the caller's extensible option structs. */
#ifndef SLUICE_REGISTRY_H
#define SLUICE_REGISTRY_H

#include "core/internal.h"

#define SL__TAG_MAX 32 /* a tag is 1..31 bytes */

/* One file a name expanded to. */
typedef struct sl__named_file {
  char tag[SL__TAG_MAX]; /* the registered tag the file is opened with */
  char *path;            /* heap; the "TAG:" removed, globs expanded */
} sl__named_file;

/* Expands `n` names, in order, into *out (an array of *count files; free it
 * with sl__named_files_free).  Every tag is checked to be registered.
 * `stage` prefixes the messages ("open", "open_files").  Returns SL_OK or
 * the errors documented at sl_open; nothing is left allocated on failure. */
int sl__names_expand(const char *stage, const char *const *names, size_t n,
                     sl__named_file **out, size_t *count);
void sl__named_files_free(sl__named_file *files, size_t count);

/* Copies a caller's extensible options struct (first member: size_t size)
 * into `dst`, which holds this library's defaults and is `dst_size` bytes:
 * min(size, dst_size) bytes are copied, the rest keep their defaults.
 * SL_EINVAL when size is 0 or smaller than a size_t; SL_EUNSUPPORTED when
 * the caller's struct is larger and its extra bytes are not all zero.
 * `what` names the struct in messages.  dst->size is set to dst_size. */
int sl__opts_copy(const char *what, void *dst, size_t dst_size,
                  const void *src);

#endif
