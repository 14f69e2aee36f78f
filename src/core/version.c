/* version.c - the version of the linked library. */
#include "internal.h"

const char *sl_version(void) {
  return SL_VERSION_STRING;
}

int sl_version_number(void) {
  return SL_VERSION_NUMBER;
}
