/*
 * path.c - file-name helpers shared by the formats and the packers.
 */
#include "core/internal.h"

#include <string.h>

const char *sl__basename(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}
