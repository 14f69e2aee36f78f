/*
 * bad_abi.c - a parser plugin for tests/test_text_reader.c built for a
 * future ABI: its version is SL_PARSER_ABI_VERSION + 1 and its other fields
 * are deliberately nonsense, so a host that read them before checking the
 * version would crash the test.
 */
#include "sluice.h"

#include <stdint.h>

/* Only the first field is meaningful: a later ABI may change the rest. */
typedef struct future_api {
  uint32_t abi_version;
  uintptr_t junk[4];
} future_api;

static const future_api api = {SL_PARSER_ABI_VERSION + 1, {1, 2, 3, 4}};

SL_PARSER_EXPORT const sl_parser_api *sl_parser_entry(void) {
  return (const sl_parser_api *)(const void *)&api;
}
