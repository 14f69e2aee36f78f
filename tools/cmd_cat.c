/*
 * cmd_cat.c - `sluice cat FILE [--from K] [--count N] [--json]`: prints
 * records, as compact text for people or as one JSON object per line for
 * programs.
 *
 * Records are fetched with sl_slr_read, so --from K starts at record K
 * without decoding the chunks before it (consecutive records then come from
 * the cached chunk).  Elements are read with memcpy: the decoded views are
 * aligned, but this file does not depend on it.
 */
#include "cli.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char synopsis[] =
    "  sluice cat [--from K] [--count N] [--json] [--max-chunk-bytes N] "
    "FILE\n";

static const char help[] =
    "Prints records of an SLR file, starting at record K (default 0), at\n"
    "most N of them (default: to the end).\n"
    "\n"
    "Text (default): one line per record, '#K field=value ...'; a scalar is\n"
    "its value, a tensor is dtype[shape] and its elements (long ones elided\n"
    "with '...'), bytes are a quoted string with C escapes (long ones cut,\n"
    "then '...').\n"
    "\n"
    "JSON (--json): one object per line mapping each field name to a number\n"
    "(scalar field), a nested array (tensor, row-major, nested by the\n"
    "record's shape) or a string (bytes: valid UTF-8 as is, control\n"
    "characters and invalid bytes as \\u00XX escapes).  Floats print as the\n"
    "shortest decimal that reads back exactly (f16 and bf16 as floats);\n"
    "NaN and infinities as null; bool as true/false.\n"
    "\n"
    "Options:\n"
    "  --from K      first record (default 0)\n"
    "  --count N     at most N records (default all)\n"
    "  -j, --json    JSON lines instead of text\n" CLI_MAX_CHUNK_HELP
    "  -h, --help    this help\n";

enum { OPT_FROM = 1, OPT_COUNT, OPT_JSON, OPT_HELP, OPT_MAX_CHUNK };

static const cli_opt opts[] = {
    {"max-chunk-bytes", 0, true, OPT_MAX_CHUNK},
    {"from", 0, true, OPT_FROM},
    {"count", 'n', true, OPT_COUNT},
    {"json", 'j', false, OPT_JSON},
    {"help", 'h', false, OPT_HELP},
    {NULL, 0, false, 0},
};

/* Text: tensors with more elements than this are elided. */
#define TEXT_MAX_ELEMS 12
#define TEXT_HEAD_ELEMS 8
#define TEXT_TAIL_ELEMS 2
#define TEXT_MAX_BYTES 120

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F,
           man = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | man << 13; /* inf / nan */
  } else if (exp) {
    bits = sign | (exp + 112) << 23 | man << 13;
  } else if (man) {
    /* Subnormal: normalise the mantissa. */
    int e = -1;
    do {
      e++;
      man <<= 1;
    } while (!(man & 0x400));
    bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3FF) << 13;
  } else {
    bits = sign;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static float bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Integers are most of what cat prints (an image is hundreds of them per
 * record), and fprintf's format parsing dominated.  The caller holds the
 * stream's lock (flockfile per record), so the unlocked putc is safe. */
static void put_u64(FILE *o, uint64_t v) {
  char b[24], *p = b + sizeof b;
  do {
    *--p = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (; p < b + sizeof b; p++)
    putc_unlocked(*p, o);
}

static void put_i64(FILE *o, int64_t v) {
  if (v < 0) {
    putc('-', o);
    put_u64(o, 0 - (uint64_t)v);
  } else {
    put_u64(o, (uint64_t)v);
  }
}

/* A float for people (%g: 6 digits) or, in JSON, the shortest decimal
 * that reads back as the same value: as a float when `single` (f32, and
 * f16/bf16, whose values are all floats), else as a double.  0.1f prints as
 * 0.1, not 0.100000001. */
static void print_float(FILE *o, double v, bool single, bool json) {
  if (!isfinite(v)) {
    fputs(json ? "null" : isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", o);
    return;
  }
  if (!json) {
    fprintf(o, "%g", v);
    return;
  }
  char b[40];
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(b, sizeof b, "%.*g", digits, v);
    double back = strtod(b, NULL);
    if (single ? (float)back == (float)v : back == v) break;
  }
  fputs(b, o);
}

/* Element i of t. */
static void print_elem(FILE *o, const sl_tensor *t, size_t i, bool json) {
  const unsigned char *p =
      (const unsigned char *)t->data + i * sl_dtype_size(t->dtype);
  union {
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    float f32;
    double f64;
  } v;
  memcpy(&v, p, sl_dtype_size(t->dtype));
  switch (t->dtype) {
  case SL_BOOL:
    fputs(*p ? "true" : "false", o);
    break;
  case SL_U8:
    put_u64(o, *p);
    break;
  case SL_I8:
    put_i64(o, v.i8);
    break;
  case SL_U16:
    put_u64(o, v.u16);
    break;
  case SL_I16:
    put_i64(o, v.i16);
    break;
  case SL_U32:
    put_u64(o, v.u32);
    break;
  case SL_I32:
    put_i64(o, v.i32);
    break;
  case SL_U64:
    put_u64(o, v.u64);
    break;
  case SL_I64:
    put_i64(o, v.i64);
    break;
  /* JSON gets enough digits to read back the same value; text, %g. */
  case SL_F16:
    print_float(o, half_to_float(v.u16), true, json);
    break;
  case SL_BF16:
    print_float(o, bf16_to_float(v.u16), true, json);
    break;
  case SL_F32:
    print_float(o, v.f32, true, json);
    break;
  case SL_F64:
    print_float(o, v.f64, false, json);
    break;
  case SL_BYTES:
    if (json)
      cli_json_string(o, p, 1);
    else
      cli_text_string(o, p, 1, 1);
    break;
  default:
    fputs(json ? "null" : "?", o);
    break;
  }
}

/* Dimension d of t as nested JSON arrays, from element *at on; bytes fields
 * end in strings (their last dimension is one string). */
static void json_tensor(FILE *o, const sl_tensor *t, int d, size_t *at) {
  if (t->dtype == SL_BYTES && d == t->rank - 1) {
    size_t n = (size_t)t->shape[d];
    cli_json_string(o, (const char *)t->data + *at, n);
    *at += n;
    return;
  }
  if (d == t->rank) {
    print_elem(o, t, (*at)++, true);
    return;
  }
  putc_unlocked('[', o);
  for (int64_t i = 0; i < t->shape[d]; i++) {
    if (i) putc_unlocked(',', o);
    json_tensor(o, t, d + 1, at);
  }
  putc_unlocked(']', o);
}

static void json_record(FILE *o, const sl_sample *s) {
  const sl_schema *sc = sl_sample_schema(s);
  putc('{', o);
  for (int i = 0; i < sl_sample_nfields(s); i++) {
    const char *name = sl_schema_field_name(sc, i);
    if (i) putc(',', o);
    cli_json_string(o, name, strlen(name));
    putc(':', o);
    size_t at = 0;
    json_tensor(o, sl_sample_at_const(s, i), 0, &at);
  }
  fputs("}\n", o);
}

static void text_tensor(FILE *o, const sl_tensor *t) {
  if (t->rank == 0) {
    print_elem(o, t, 0, false);
    return;
  }
  int64_t n = sl_tensor_numel(t);
  if (t->dtype == SL_BYTES && t->rank == 1) {
    cli_text_string(o, t->data, (size_t)n, TEXT_MAX_BYTES);
    return;
  }
  fputs(sl_dtype_name(t->dtype), o);
  putc('[', o);
  for (int d = 0; d < t->rank; d++)
    fprintf(o, "%s%" PRId64, d ? "," : "", t->shape[d]);
  fputs("] [", o);
  for (int64_t i = 0; i < n; i++) {
    if (n > TEXT_MAX_ELEMS && i == TEXT_HEAD_ELEMS) {
      fputs(" ...", o);
      i = n - TEXT_TAIL_ELEMS;
    }
    if (i) putc(' ', o);
    print_elem(o, t, (size_t)i, false);
  }
  putc(']', o);
}

static void text_record(FILE *o, uint64_t k, const sl_sample *s) {
  const sl_schema *sc = sl_sample_schema(s);
  fprintf(o, "#%" PRIu64, k);
  for (int i = 0; i < sl_sample_nfields(s); i++) {
    fprintf(o, " %s=", sl_schema_field_name(sc, i));
    text_tensor(o, sl_sample_at_const(s, i));
  }
  putc('\n', o);
}

int cmd_cat(int argc, char **argv) {
  cli_parser p;
  cli_parser_init(&p, argc, argv, "cat", synopsis, opts);
  const char *path = NULL;
  uint64_t from = 0, count = UINT64_MAX;
  bool json = false;
  sl_slr_open_opts oo = {0};
  for (;;) {
    const char *v;
    int id = cli_next(&p, &v);
    if (id == CLI_ARG_END) break;
    switch (id) {
    case CLI_ARG_BAD:
      return CLI_USAGE;
    case OPT_FROM:
      if (!cli_parse_u64(v, false, &from))
        return cli_usage_error("cat", synopsis,
                               "--from wants a record number, not '%s'", v);
      break;
    case OPT_COUNT:
      if (!cli_parse_u64(v, false, &count))
        return cli_usage_error("cat", synopsis,
                               "--count wants a count, not '%s'", v);
      break;
    case OPT_JSON:
      json = true;
      break;
    case OPT_MAX_CHUNK:
      if (cli_max_chunk_bytes("cat", synopsis, v, &oo.max_chunk_bytes) !=
          CLI_OK)
        return CLI_USAGE;
      break;
    case OPT_HELP:
      printf("Usage:\n%s\n%s", synopsis, help);
      return CLI_OK;
    case CLI_ARG_OPERAND:
      if (path)
        return cli_usage_error("cat", synopsis,
                               "one file at a time ('%s' and '%s')", path, v);
      path = v;
      break;
    }
  }
  if (!path) return cli_usage_error("cat", synopsis, "no file given");

  sl_slr_file *f = NULL;
  int rc = sl_slr_open(path, &oo, &f);
  if (rc < 0) return cli_fail("cat", rc);
  uint64_t n = sl_slr_records(f);
  if (from > n) {
    sl_set_error(SL_EINVAL,
                 "%s: --from %" PRIu64 " is past the end (%" PRIu64 " records)",
                 path, from, n);
    sl_slr_close(f);
    return cli_fail("cat", SL_EINVAL);
  }
  uint64_t end = count < n - from ? from + count : n;
  static char obuf[1 << 16];
  setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
  for (uint64_t k = from; k < end && rc == SL_OK; k++) {
    sl_sample *s = NULL;
    rc = sl_slr_read(f, k, &s);
    if (rc < 0) break;
    flockfile(stdout);
    if (json)
      json_record(stdout, s);
    else
      text_record(stdout, k, s);
    funlockfile(stdout);
    sl_sample_release(s);
    if (ferror(stdout)) break; /* main() reports it */
  }
  fflush(stdout); /* records before the error, in order */
  int ret = rc < 0 ? cli_fail("cat", rc) : CLI_OK;
  sl_slr_close(f);
  return ret;
}
