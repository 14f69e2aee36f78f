/* registry.h - the format registry's interface to the rest of libsluice:
 * expanding names (tags, extensions, globs) into tagged paths. */
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

#endif
