/*
 * no_entry.c - a shared object for tests/test_text_reader.c that loads but
 * exports no sl_parser_entry (a plugin with its entry point misspelt).
 */
#include "sluice.h"

SL_PARSER_EXPORT const sl_parser_api *sl_parser_entyr(void);
SL_PARSER_EXPORT const sl_parser_api *sl_parser_entyr(void) {
  return NULL;
}
