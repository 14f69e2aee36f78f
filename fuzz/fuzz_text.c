/*
 * fuzz_text.c - libFuzzer target: the `text` reader, plain and with the
 * example parser plugins (examples/plugins: csv_floats, tokenize), read
 * both ways (read(2) buffers and mmap) and compared.
 *
 * Input: one mode byte, the plugin options up to the first '\n' (at most
 * 63 bytes; a NUL ends them early), then the file.
 *   bits 0-1  parser: 0 none ({line: bytes[-1]}), 1 csv_floats,
 *             2 tokenize, 3 csv_floats again (the richest parser)
 * Oracles: only documented errors, each naming the file; samples fit the
 * reader's schema; the read(2) and mmap readers give the same samples, the
 * same ending and the same message (they promise identical samples); a
 * reset pass repeats the first.
 *
 * The plugins are loaded from SLUICE_FUZZ_PLUGIN_DIR (the environment wins
 * over the directory compiled in), as lib<name>.so.
 */
#include "fuzz_util.h"

#ifndef SLUICE_FUZZ_PLUGIN_DIR
#define SLUICE_FUZZ_PLUGIN_DIR "."
#endif

/* Lines read per pass at most. */
#define FUZZ_TEXT_MAX 4096

typedef struct outcome {
  int open_rc, end_rc;
  uint64_t count, hash;
  char msg[1024];
} outcome;

static const char *plugin_path(unsigned which) {
  static char paths[2][512];
  static const char *const names[2] = {"csv_floats", "tokenize"};
  if (!paths[which][0]) {
    const char *dir = getenv("SLUICE_FUZZ_PLUGIN_DIR");
    snprintf(paths[which], sizeof paths[which], "%s/lib%s.so",
             dir && *dir ? dir : SLUICE_FUZZ_PLUGIN_DIR, names[which]);
    /* Without the plugin every input would stop at open: say so once. */
    FUZZ_CHECK(access(paths[which], R_OK) == 0,
               "parser plugin %s not found (build it, or set "
               "SLUICE_FUZZ_PLUGIN_DIR)",
               paths[which]);
  }
  return paths[which];
}

static void pass(sl_reader *r, outcome *o) {
  const sl_schema *schema = sl_reader_schema(r);
  o->count = o->hash = 0;
  o->end_rc = SL_OK;
  o->msg[0] = 0;
  while (o->count < FUZZ_TEXT_MAX) {
    sl_sample *s;
    int rc = sl_reader_next(r, &s);
    if (rc != SL_OK) {
      o->end_rc = rc;
      if (rc != SL_EOF) {
        fuzz_expect_error(rc, "text next", SL_EINVAL, SL_ESHAPE, 0);
        snprintf(o->msg, sizeof o->msg, "%s", sl_last_error());
      }
      return;
    }
    o->hash = o->hash * 31 + fuzz_touch_sample(schema, s);
    sl_sample_release(s);
    o->count++;
  }
}

static void run(const char *path, int use_mmap, const char *parser,
                const char *options, outcome *o) {
  memset(o, 0, sizeof *o);
  sl_reader *r;
  o->open_rc = sl_text_reader(path, use_mmap, parser, options, &r);
  if (o->open_rc < 0) {
    fuzz_expect_error(o->open_rc, "text open", SL_EINVAL, 0);
    snprintf(o->msg, sizeof o->msg, "%s", sl_last_error());
    return;
  }
  pass(r, o);
  if (o->end_rc != SL_OK) { /* not cut short: a second pass repeats it */
    FUZZ_CHECK(sl_reader_reset(r) == SL_OK, "text: reset failed");
    outcome again;
    pass(r, &again);
    FUZZ_CHECK(again.count == o->count && again.hash == o->hash &&
                   again.end_rc == o->end_rc && strcmp(again.msg, o->msg) == 0,
               "text (mmap %d): the second pass differs", use_mmap);
  }
  sl_reader_destroy(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned mode = data[0];
  data++, size--;
  char options[64];
  size_t k = 0;
  while (k < size && k < sizeof options - 1 && data[k] != '\n' && data[k])
    k++;
  memcpy(options, data, k);
  options[k] = 0;
  while (k < size && data[k] != '\n')
    k++;
  if (k < size) k++; /* the '\n' ending the options */
  const char *path = fuzz_file(0, data + k, size - k);
  unsigned p = mode & 3;
  const char *parser = p == 0 ? NULL : plugin_path(p == 2 ? 1 : 0);
  outcome a, b;
  run(path, 0, parser, options, &a);
  run(path, 1, parser, options, &b);
  FUZZ_DEBUG("text: parser %u, options '%s': open %s, %llu samples, then %s "
             "%s\n",
             p, options, sl_err_name(a.open_rc), (unsigned long long)a.count,
             sl_err_name(a.end_rc), a.msg);
  FUZZ_CHECK(a.open_rc == b.open_rc && a.end_rc == b.end_rc &&
                 a.count == b.count && a.hash == b.hash,
             "read(2) and mmap differ: open %s/%s, %llu/%llu samples, end "
             "%s/%s",
             sl_err_name(a.open_rc), sl_err_name(b.open_rc),
             (unsigned long long)a.count, (unsigned long long)b.count,
             sl_err_name(a.end_rc), sl_err_name(b.end_rc));
  FUZZ_CHECK(strcmp(a.msg, b.msg) == 0,
             "read(2) and mmap messages differ:\n  %s\n  %s", a.msg, b.msg);
  sl_clear_error();
  return 0;
}
