/*
 * mkslr.c - writes a small SLR file with one field of every kind the
 * `sluice cat` printer handles (f32 with NaN/inf, f16 with a subnormal,
 * bf16, bool, a variable-shape i32 tensor, bytes with UTF-8 and a newline,
 * u64/i64 extremes, f64, and a tensor with a zero dimension), for
 * tests/cli/cat_types.sh.  Public API only.  Usage: mkslr OUT.slr
 */
#include "sluice.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int die(const char *what) {
  fprintf(stderr, "mkslr: %s: %s\n", what, sl_last_error());
  return 1;
}

/* Sets field i of s to `shape` and copies `n` bytes of `data` into it. */
static int put(sl_sample *s, int i, int rank, const int64_t *shape,
               const void *data, size_t n) {
  void *p = NULL;
  int rc = sl_sample_alloc(s, i, rank, shape, &p);
  if (rc == SL_OK && n) memcpy(p, data, n);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: mkslr OUT.slr\n");
    return 2;
  }
  sl_schema *sc = sl_schema_new();
  const int64_t f_shape[] = {2, 3}, h_shape[] = {3}, b_shape[] = {3},
                v_shape[] = {SL_DIM_VAR, 2}, s_shape[] = {SL_DIM_VAR},
                z_shape[] = {2, 0};
  if (sl_schema_add(sc, "f", SL_F32, 2, f_shape) < 0 ||
      sl_schema_add(sc, "h", SL_F16, 1, h_shape) < 0 ||
      sl_schema_add(sc, "bf", SL_BF16, 0, NULL) < 0 ||
      sl_schema_add(sc, "b", SL_BOOL, 1, b_shape) < 0 ||
      sl_schema_add(sc, "v", SL_I32, 2, v_shape) < 0 ||
      sl_schema_add(sc, "s", SL_BYTES, 1, s_shape) < 0 ||
      sl_schema_add(sc, "u", SL_U64, 0, NULL) < 0 ||
      sl_schema_add(sc, "i", SL_I64, 0, NULL) < 0 ||
      sl_schema_add(sc, "d", SL_F64, 0, NULL) < 0 ||
      sl_schema_add(sc, "z", SL_U16, 2, z_shape) < 0 ||
      sl_schema_set_meta(sc, "note", "tab\there") < 0)
    return die("schema");
  sl_slr_writer *w;
  if (sl_slr_writer_open(argv[1], sc, NULL, &w) < 0) return die("open");

  for (int r = 0; r < 2; r++) {
    sl_sample *s = sl_sample_new(sc);
    float f[2][6] = {{0.5f, -1.25f, 3.0f, 0.001f, NAN, -INFINITY},
                     {0.1f, 0.0f, -0.0f, 1e30f, 1e-30f, 2.0f}};
    uint16_t h[2][3] = {{0x3C00, 0xC100, 0x0001}, {0x7C00, 0x3555, 0x0000}};
    uint16_t bf[2] = {0x3FC0, 0xC2F7};
    unsigned char b[2][3] = {{1, 0, 1}, {0, 0, 0}};
    int32_t v[4] = {1, -2, 3, 4};
    int64_t v_dims[2][2] = {{2, 2}, {0, 2}};
    const char *str[2] = {"h\xc3\xa9\n", ""};
    uint64_t u[2] = {UINT64_MAX, 0};
    int64_t i64[2] = {INT64_MIN, -1};
    double d[2] = {0.1, 1e300};
    int64_t slen = (int64_t)strlen(str[r]);
    if (!s || put(s, 0, 2, f_shape, f[r], sizeof f[r]) < 0 ||
        put(s, 1, 1, h_shape, h[r], sizeof h[r]) < 0 ||
        put(s, 2, 0, NULL, &bf[r], 2) < 0 ||
        put(s, 3, 1, b_shape, b[r], 3) < 0 ||
        put(s, 4, 2, v_dims[r], v, r == 0 ? sizeof v : 0) < 0 ||
        put(s, 5, 1, &slen, str[r], (size_t)slen) < 0 ||
        put(s, 6, 0, NULL, &u[r], 8) < 0 ||
        put(s, 7, 0, NULL, &i64[r], 8) < 0 ||
        put(s, 8, 0, NULL, &d[r], 8) < 0 ||
        put(s, 9, 2, z_shape, NULL, 0) < 0 || sl_slr_writer_append(w, s) < 0)
      return die("record");
    sl_sample_release(s);
  }
  if (sl_slr_writer_close(w) < 0) return die("close");
  sl_schema_release(sc);
  return 0;
}
