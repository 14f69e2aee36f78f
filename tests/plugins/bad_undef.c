/*
 * bad_undef.c - a parser plugin for tests/test_text_reader.c that needs a
 * symbol no library defines, so dlopen(RTLD_NOW) refuses it and the host's
 * message must carry dlerror's "undefined symbol" text.
 */
#include "sluice.h"

int sl_test_no_such_function(void);

static int undef_init(const char *options, sl_schema **schema, void **state) {
  (void)options, (void)schema, (void)state;
  return sl_test_no_such_function();
}

static const sl_parser_api api = {SL_PARSER_ABI_VERSION, "bad_undef",
                                  undef_init, NULL, NULL};

SL_PARSER_EXPORT const sl_parser_api *sl_parser_entry(void) {
  return &api;
}
