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

/* The constructor registered for `tag` into *fn, *ud (copied under the
 * registry's lock; fn NULL: only checks), or SL_EINVAL naming `name` and
 * the registered tags (`stage` prefixes the message). */
int sl__format_find(const char *stage, const char *tag, const char *name,
                    sl_format_open_fn *fn, void **ud);

/* Brace patterns (braces.c): at most this many names from one name. */
#define SL__BRACES_MAX 100000
/* Whether `s` holds a '{' followed later by a '}'. */
bool sl__has_braces(const char *s);
/* Expands the brace groups of `s` left to right into *out (an array of *n
 * heap strings; free with sl__braces_free); a name without braces gives
 * itself.  SL_OK, SL_EINVAL (a bad range, more than SL__BRACES_MAX names;
 * `stage` prefixes the message) or SL_ENOMEM; nothing is left allocated on
 * failure. */
int sl__braces_expand(const char *stage, const char *s, char ***out,
                      size_t *n);
void sl__braces_free(char **names, size_t n);

#endif
