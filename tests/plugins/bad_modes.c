/*
 * bad_modes.c - a parser plugin for tests/test_text_reader.c that breaks the
 * ABI on purpose, one way per "mode=..." option, so the host's checks and
 * messages can be tested:
 *   ok            {len: i64[]}: the line's length (the control)
 *   init_fail     init fails with a message
 *   init_silent   init fails without a message
 *   init_noschema init returns SL_OK but no schema
 *   other_schema  declares {x: f32[2]}, returns samples of {y: i32[]}
 *   unfilled      declares {x: f32[2], n: i64[]}, fills only x
 *   no_sample     parse returns SL_OK with no sample
 *   eof           parse returns SL_EOF
 *   code7         parse returns 7
 *   silent_fail   parse fails without a message
 */
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bad_state {
  char mode[32];
  sl_schema *declared, *other;
} bad_state;

static void bad_destroy(void *state) {
  bad_state *st = state;
  sl_schema_release(st->declared);
  sl_schema_release(st->other);
  free(st);
}

static int bad_init(const char *options, sl_schema **schema, void **state) {
  const char *m = strncmp(options, "mode=", 5) == 0 ? options + 5 : "ok";
  if (strcmp(m, "init_fail") == 0)
    return sl_set_error(SL_EINVAL, "bad_modes: init refuses on purpose");
  if (strcmp(m, "init_silent") == 0) return SL_ECORRUPT;
  bad_state *st = calloc(1, sizeof *st);
  if (!st) return SL_ENOMEM;
  snprintf(st->mode, sizeof st->mode, "%s", m);
  if (strcmp(m, "init_noschema") == 0) {
    *state = st; /* the host frees it with destroy */
    return SL_OK;
  }
  st->declared = sl_schema_new();
  int64_t two[1] = {2};
  if (strcmp(m, "ok") == 0) {
    sl_schema_add(st->declared, "len", SL_I64, 0, NULL);
  } else {
    sl_schema_add(st->declared, "x", SL_F32, 1, two);
    if (strcmp(m, "unfilled") == 0)
      sl_schema_add(st->declared, "n", SL_I64, 0, NULL);
  }
  st->other = sl_schema_new();
  sl_schema_add(st->other, "y", SL_I32, 0, NULL);
  *schema = sl_schema_retain(st->declared);
  *state = st;
  return SL_OK;
}

static int bad_parse(void *state, const char *line, size_t len,
                     sl_sample **out) {
  (void)line;
  bad_state *st = state;
  const char *m = st->mode;
  if (strcmp(m, "no_sample") == 0) return SL_OK;
  if (strcmp(m, "eof") == 0) return SL_EOF;
  if (strcmp(m, "code7") == 0) return 7;
  if (strcmp(m, "silent_fail") == 0) return SL_ECORRUPT;
  void *data;
  if (strcmp(m, "other_schema") == 0) {
    sl_sample *s = sl_sample_new(st->other);
    sl_sample_alloc(s, 0, 0, NULL, &data);
    *(int32_t *)data = (int32_t)len;
    *out = s;
    return SL_OK;
  }
  sl_sample *s = sl_sample_new(st->declared);
  if (strcmp(m, "ok") == 0) {
    sl_sample_alloc(s, 0, 0, NULL, &data);
    *(int64_t *)data = (int64_t)len;
  } else {
    int64_t two[1] = {2};
    sl_sample_alloc(s, 0, 1, two, &data);
    ((float *)data)[0] = ((float *)data)[1] = (float)len;
  }
  *out = s;
  return SL_OK;
}

static const sl_parser_api api = {SL_PARSER_ABI_VERSION, "bad_modes", bad_init,
                                  bad_parse, bad_destroy};

SL_PARSER_EXPORT const sl_parser_api *sl_parser_entry(void) {
  return &api;
}
