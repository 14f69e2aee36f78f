/*
 * opts.c - copying a caller's extensible options struct (first member:
 * size_t size) over this library's defaults: the one rule every
 * sl_*_opts parameter follows (sluice.h, "Options structs").
 */
#include "core/internal.h"

#include <string.h>

int sl__opts_copy(const char *what, void *dst, size_t dst_size,
                  const void *src) {
  size_t size;
  memcpy(&size, src, sizeof size);
  if (size < sizeof(size_t)) {
    /* The struct's INIT macro: "sl_open_opts" -> "SL_OPEN_OPTS_INIT". */
    char init[64];
    size_t k = 0;
    for (; what[k] && k < sizeof init - 6; k++)
      init[k] =
          (char)(what[k] >= 'a' && what[k] <= 'z' ? what[k] - 32 : what[k]);
    memcpy(init + k, "_INIT", 6);
    return sl_set_error(SL_EINVAL,
                        "%s: size is %zu: set it to sizeof(%s) (%s does)",
                        what, size, what, init);
  }
  if (size > dst_size) {
    const unsigned char *extra = (const unsigned char *)src + dst_size;
    for (size_t i = 0; i < size - dst_size; i++)
      SL_RETURN_ERROR_IF(extra[i], SL_EUNSUPPORTED,
                         "%s: the caller's struct is %zu bytes and sets "
                         "options beyond the %zu bytes this libsluice (%s) "
                         "knows",
                         what, size, dst_size, SL_VERSION_STRING);
  }
  memcpy(dst, src, SL_MIN(size, dst_size));
  memcpy(dst, &dst_size, sizeof dst_size);
  return SL_OK;
}
