/*
 * path.c - file-name helpers shared by the formats and the packers.
 */
#include "core/internal.h"

#include <string.h>

const char *sl__basename(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* The URL schemes the io layer reads (http.c, s3.c); a name with another
 * scheme is a file name. */
bool sl__is_url(const char *path) {
  return path &&
         (strncmp(path, "http://", 7) == 0 ||
          strncmp(path, "https://", 8) == 0 || strncmp(path, "s3://", 5) == 0);
}
