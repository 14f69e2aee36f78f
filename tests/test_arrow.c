/*
 * test_arrow.c - Arrow in and out (src/formats/arrow_reader.c,
 * arrow_export.c; include/sluice/arrow.h) over ArrowArrayStreams built by
 * hand here (no Arrow library): every mapped type, nested and offset
 * arrays, lists to variable dims and LoD, what is refused, nulls, a failing
 * stream, corrupt offsets, release counting (every release exactly once,
 * also for samples outliving the reader), and the round trip sluice ->
 * Arrow -> sluice.
 */
#include "test.h"

#include <errno.h>
#include <stdarg.h>

/* --- hand-built arrays, schemas and streams ---------------------------- */

static int g_arr_made, g_arr_freed, g_sch_made, g_sch_freed, g_str_freed;

typedef struct node {
  const void *bufs[3];
  void *owned[3];
  struct ArrowArray **kids;
  struct ArrowSchema **skids;
} node;

static void *dup_mem(const void *p, size_t n) {
  void *q = malloc(n ? n : 1);
  ASSERT_NOT_NULL(q);
  if (n) memcpy(q, p, n);
  return q;
}

static void arr_release(struct ArrowArray *a) {
  ASSERT_NOT_NULL(a->release); /* never twice */
  node *n = a->private_data;
  for (int64_t i = 0; i < a->n_children; i++) {
    if (n->kids[i]->release) n->kids[i]->release(n->kids[i]);
    free(n->kids[i]);
  }
  for (int i = 0; i < 3; i++) free(n->owned[i]);
  free(n->kids);
  free(n);
  a->release = NULL;
  g_arr_freed++;
}

/* A heap array: buffers copied (NULL stays NULL; sizes in bytes),
 * children taken. */
static struct ArrowArray *arr(int64_t len, int64_t off, int64_t nulls,
                              int nbufs, const void *b0, size_t s0,
                              const void *b1, size_t s1, const void *b2,
                              size_t s2, int nk, struct ArrowArray **kids) {
  struct ArrowArray *a = calloc(1, sizeof *a);
  node *n = calloc(1, sizeof *n);
  const void *b[3] = {b0, b1, b2};
  size_t s[3] = {s0, s1, s2};
  for (int i = 0; i < 3; i++)
    if (b[i]) n->bufs[i] = n->owned[i] = dup_mem(b[i], s[i]);
  n->kids = calloc((size_t)(nk ? nk : 1), sizeof *n->kids);
  for (int i = 0; i < nk; i++) n->kids[i] = kids[i];
  a->length = len;
  a->offset = off;
  a->null_count = nulls;
  a->n_buffers = nbufs;
  a->buffers = n->bufs;
  a->n_children = nk;
  a->children = n->kids;
  a->release = arr_release;
  a->private_data = n;
  g_arr_made++;
  return a;
}

#define PRIM(len, off, vals) arr(len, off, 0, 2, NULL, 0, vals, sizeof vals, NULL, 0, 0, NULL)

static void sch_release(struct ArrowSchema *s) {
  ASSERT_NOT_NULL(s->release);
  node *n = s->private_data;
  for (int64_t i = 0; i < s->n_children; i++) {
    if (n->skids[i]->release) n->skids[i]->release(n->skids[i]);
    free(n->skids[i]);
  }
  free(n->skids);
  if (s->dictionary) {
    s->dictionary->release(s->dictionary);
    free(s->dictionary);
  }
  free((void *)s->format);
  free((void *)s->name);
  free(n);
  s->release = NULL;
  g_sch_freed++;
}

static struct ArrowSchema *sch(const char *fmt, const char *name, int nk, ...) {
  struct ArrowSchema *s = calloc(1, sizeof *s);
  node *n = calloc(1, sizeof *n);
  n->skids = calloc((size_t)(nk ? nk : 1), sizeof *n->skids);
  va_list ap;
  va_start(ap, nk);
  for (int i = 0; i < nk; i++) n->skids[i] = va_arg(ap, struct ArrowSchema *);
  va_end(ap);
  s->format = strdup(fmt);
  s->name = name ? strdup(name) : NULL;
  s->n_children = nk;
  s->children = n->skids;
  s->release = sch_release;
  s->private_data = n;
  g_sch_made++;
  return s;
}

#define MAX_BATCHES 8
typedef struct fake_stream {
  struct ArrowSchema *(*make_schema)(void);
  struct ArrowArray *batches[MAX_BATCHES];
  int nb, next;
  int fail_at; /* get_next returns EIO at this call (-1: never) */
  int schema_fails;
} fake_stream;

static int fs_get_schema(struct ArrowArrayStream *st, struct ArrowSchema *out) {
  fake_stream *f = st->private_data;
  if (f->schema_fails) return ENOMEM;
  struct ArrowSchema *s = f->make_schema();
  *out = *s; /* moved */
  free(s);
  return 0;
}

static int fs_get_next(struct ArrowArrayStream *st, struct ArrowArray *out) {
  fake_stream *f = st->private_data;
  if (f->next == f->fail_at) return EIO;
  if (f->next >= f->nb) {
    out->release = NULL;
    return 0;
  }
  struct ArrowArray *a = f->batches[f->next];
  f->batches[f->next++] = NULL;
  *out = *a;
  free(a);
  return 0;
}

static const char *fs_last_error(struct ArrowArrayStream *st) {
  fake_stream *f = st->private_data;
  return f->schema_fails ? "no schema today" : "disk on fire";
}

static void fs_release(struct ArrowArrayStream *st) {
  ASSERT_NOT_NULL(st->release);
  fake_stream *f = st->private_data;
  for (int i = 0; i < f->nb; i++)
    if (f->batches[i]) {
      f->batches[i]->release(f->batches[i]);
      free(f->batches[i]);
    }
  free(f);
  st->release = NULL;
  g_str_freed++;
}

static struct ArrowArrayStream stream_of(struct ArrowSchema *(*mk)(void),
                                         int nb, struct ArrowArray **b) {
  fake_stream *f = calloc(1, sizeof *f);
  f->make_schema = mk;
  f->nb = nb;
  f->fail_at = -1;
  for (int i = 0; i < nb; i++) f->batches[i] = b[i];
  struct ArrowArrayStream st = {fs_get_schema, fs_get_next, fs_last_error,
                                fs_release, f};
  return st;
}

static struct ArrowArray *batch_of(int64_t len, int nk,
                                   struct ArrowArray **kids) {
  return arr(len, 0, 0, 1, NULL, 0, NULL, 0, NULL, 0, nk, kids);
}

static void counts_reset(void) {
  g_arr_made = g_arr_freed = g_sch_made = g_sch_freed = g_str_freed = 0;
}

static void counts_balanced(void) {
  ASSERT_EQ(g_arr_freed, g_arr_made);
  ASSERT_EQ(g_sch_freed, g_sch_made);
}

static sl_reader *open_stream(struct ArrowArrayStream *st) {
  sl_reader *r = NULL;
  ASSERT_OK(sl_reader_from_arrow_stream(st, NULL, &r));
  ASSERT_NULL(st->release); /* moved */
  return r;
}

/* --- every primitive type ------------------------------------------------ */

static struct ArrowSchema *prims_schema(void) {
  return sch("+s", "", 12, sch("c", "i8", 0), sch("C", "u8", 0),
             sch("s", "i16", 0), sch("S", "u16", 0), sch("i", "i32", 0),
             sch("I", "u32", 0), sch("l", "i64", 0), sch("L", "u64", 0),
             sch("e", "f16", 0), sch("f", "f32", 0), sch("g", "f64", 0),
             sch("b", "flag", 0));
}

/* Rows v = base + k (k = 0..len-1), columns sliced at `off`. */
static struct ArrowArray *prims_batch(int len, int off, int base) {
  int n = len + off;
  int8_t a[8];
  uint8_t b[8];
  int16_t c[8];
  uint16_t d[8];
  int32_t e[8];
  uint32_t f[8];
  int64_t g[8];
  uint64_t h[8];
  uint16_t hf[8];
  float x[8];
  double y[8];
  uint8_t bits[1] = {0};
  for (int k = 0; k < n; k++) {
    int v = base + k - off;
    a[k] = (int8_t)-v, b[k] = (uint8_t)v, c[k] = (int16_t)(-v * 100);
    d[k] = (uint16_t)(v * 100), e[k] = -v * 100000, f[k] = (uint32_t)v * 100000u;
    g[k] = -(int64_t)((uint64_t)v << 40), h[k] = (uint64_t)v << 40;
    hf[k] = (uint16_t)(0x3c00 + v), x[k] = v + 0.5f, y[k] = v + 0.25;
    if (v % 2) bits[0] |= (uint8_t)(1u << k);
  }
  struct ArrowArray *kids[12] = {
      PRIM(n, 0, a) /* offsets differ per column: sliced at the batch */,
      PRIM(n, 0, b), PRIM(n, 0, c), PRIM(n, 0, d), PRIM(n, 0, e),
      PRIM(n, 0, f), PRIM(n, 0, g), PRIM(n, 0, h), PRIM(n, 0, hf),
      PRIM(n, 0, x), PRIM(n, 0, y), PRIM(n, 0, bits)};
  struct ArrowArray *t = batch_of(len, 12, kids);
  t->offset = off;
  return t;
}

TEST(arrow_every_primitive_type_row_by_row) {
  counts_reset();
  struct ArrowArray *b[2] = {prims_batch(3, 0, 0), prims_batch(4, 2, 3)};
  struct ArrowArrayStream st = stream_of(prims_schema, 2, b);
  sl_reader *r = open_stream(&st);
  char desc[512];
  sl_schema_describe(sl_reader_schema(r), desc, sizeof desc);
  ASSERT_STREQ(desc, "{i8: i8[], u8: u8[], i16: i16[], u16: u16[], i32: i32[], "
                     "u32: u32[], i64: i64[], u64: u64[], f16: f16[], f32: "
                     "f32[], f64: f64[], flag: bool[]}");
  sl_sample *s;
  for (int v = 0; v < 7; v++) {
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(*(int8_t *)sl_sample_field(s, "i8")->data, -v);
    ASSERT_EQ(*(uint8_t *)sl_sample_field(s, "u8")->data, v);
    ASSERT_EQ(*(int16_t *)sl_sample_field(s, "i16")->data, -v * 100);
    ASSERT_EQ(*(uint16_t *)sl_sample_field(s, "u16")->data, v * 100);
    ASSERT_EQ(*(int32_t *)sl_sample_field(s, "i32")->data, -v * 100000);
    ASSERT_EQ(*(uint32_t *)sl_sample_field(s, "u32")->data, v * 100000);
    ASSERT_EQ(*(int64_t *)sl_sample_field(s, "i64")->data,
              -(int64_t)((uint64_t)v << 40));
    ASSERT_TRUE(*(uint64_t *)sl_sample_field(s, "u64")->data ==
                (uint64_t)v << 40);
    ASSERT_EQ(*(uint16_t *)sl_sample_field(s, "f16")->data, 0x3c00 + v);
    ASSERT_TRUE(*(float *)sl_sample_field(s, "f32")->data == v + 0.5f);
    ASSERT_TRUE(*(double *)sl_sample_field(s, "f64")->data == v + 0.25);
    ASSERT_EQ(*(uint8_t *)sl_sample_field(s, "flag")->data, v % 2);
    ASSERT_EQ(sl_sample_field(s, "f64")->rank, 0);
    sl_sample_release(s);
  }
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_RC(sl_reader_reset(r), SL_EUNSUPPORTED);
  sl_reader_destroy(r);
  ASSERT_EQ(g_str_freed, 1);
  counts_balanced();
}

/* --- fixed-size lists, nested, with offsets ---------------------------------- */

static struct ArrowSchema *fsl_schema(void) {
  return sch("+s", "", 1,
             sch("+w:2", "m", 1, sch("+w:3", "item", 1, sch("f", "item", 0))));
}

TEST(arrow_nested_fixed_size_lists_are_fixed_shapes_zero_copy) {
  counts_reset();
  /* 3 rows of [2,3] from a child sliced twice: the fsl<2> at offset 1, its
   * fsl<3> child at offset 1 (one slot skipped), the floats at offset 3. */
  float v[33];
  for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) v[k] = (float)k;
  struct ArrowArray *leaf = arr(30, 3, 0, 2, NULL, 0, v, sizeof v, NULL, 0,
                                0, NULL);
  struct ArrowArray *f3 = arr(9, 1, 0, 1, NULL, 0, NULL, 0, NULL, 0, 1, &leaf);
  struct ArrowArray *f2 = arr(3, 1, 0, 1, NULL, 0, NULL, 0, NULL, 0, 1, &f3);
  struct ArrowArray *b = batch_of(3, 1, &f2);
  struct ArrowArrayStream st = stream_of(fsl_schema, 1, &b);
  sl_reader *r = open_stream(&st);
  ASSERT_EQ(sl_schema_field_rank(sl_reader_schema(r), 0), 2);
  sl_sample *s[3];
  for (int row = 0; row < 3; row++) {
    ASSERT_OK(sl_reader_next(r, &s[row]));
    const sl_tensor *t = sl_sample_at_const(s[row], 0);
    ASSERT_EQ(t->shape[0], 2);
    ASSERT_EQ(t->shape[1], 3);
    /* fsl<2> slot 1+row -> fsl<3> slots 1 + 2*(1+row) .. -> floats
     * 3 + 3*(1 + 2*(1+row)) ... */
    int first = 3 + 3 * (1 + 2 * (1 + row));
    for (int k = 0; k < 6; k++)
      ASSERT_TRUE(((float *)t->data)[k] == (float)(first + k));
    ASSERT_TRUE(t->data == (const char *)leaf->buffers[1] + first * 4);
  }
  sl_reader_destroy(r);
  /* The samples hold the batch: nothing is released yet. */
  ASSERT_EQ(g_arr_freed, 0);
  ASSERT_EQ(g_str_freed, 1);
  for (int row = 0; row < 3; row++) sl_sample_release(s[row]);
  counts_balanced();
}

/* --- strings, binaries, lists ------------------------------------------------- */

static struct ArrowSchema *var_schema(void) {
  return sch("+s", "", 6, sch("u", "text", 0), sch("Z", "blob", 0),
             sch("+l", "seq", 1, sch("i", "item", 0)),
             sch("+L", "pts", 1, sch("+w:2", "item", 1, sch("f", "item", 0))),
             sch("+l", "nest", 1, sch("+L", "item", 1, sch("s", "item", 0))),
             sch("+l", "words", 1, sch("U", "item", 0)));
}

static struct ArrowArray *var_batch(void) {
  /* text: "", "ab", "cde" at offset 1 of ["zz", "", "ab", "cde"] */
  int32_t to[] = {0, 2, 2, 4, 7};
  struct ArrowArray *text =
      arr(3, 1, 0, 3, NULL, 0, to, sizeof to, "zzabcde", 7, 0, NULL);
  int64_t bo[] = {0, 1, 1, 3};
  struct ArrowArray *blob =
      arr(3, 0, 0, 3, NULL, 0, bo, sizeof bo, "\x01\x02\x03", 3, 0, NULL);
  /* seq: [1,2], [], [3] with the child at offset 1 */
  int32_t so[] = {0, 2, 2, 3};
  int32_t sv[] = {99, 1, 2, 3};
  struct ArrowArray *sc = arr(3, 1, 0, 2, NULL, 0, sv, sizeof sv, NULL, 0, 0,
                              NULL);
  struct ArrowArray *seq = arr(3, 0, 0, 2, NULL, 0, so, sizeof so, NULL, 0, 1,
                               &sc);
  /* pts: [[0,1]], [[2,3],[4,5]], [] */
  int64_t po[] = {0, 1, 3, 3};
  float pv[] = {0, 1, 2, 3, 4, 5};
  struct ArrowArray *pl = arr(6, 0, 0, 2, NULL, 0, pv, sizeof pv, NULL, 0, 0,
                              NULL);
  struct ArrowArray *pf = arr(3, 0, 0, 1, NULL, 0, NULL, 0, NULL, 0, 1, &pl);
  struct ArrowArray *pts = arr(3, 0, 0, 2, NULL, 0, po, sizeof po, NULL, 0, 1,
                               &pf);
  /* nest: [[1],[2,3]], [], [[],[4]] */
  int32_t no[] = {0, 2, 2, 4};
  int64_t io[] = {0, 1, 3, 3, 4};
  int16_t iv[] = {1, 2, 3, 4};
  struct ArrowArray *nl = arr(4, 0, 0, 2, NULL, 0, iv, sizeof iv, NULL, 0, 0,
                              NULL);
  struct ArrowArray *ni = arr(4, 0, 0, 2, NULL, 0, io, sizeof io, NULL, 0, 1,
                              &nl);
  struct ArrowArray *nest = arr(3, 0, 0, 2, NULL, 0, no, sizeof no, NULL, 0, 1,
                                &ni);
  /* words: ["hi", "you"], ["x"], [] */
  int32_t wo[] = {0, 2, 3, 3};
  int64_t wso[] = {0, 2, 5, 6};
  struct ArrowArray *ws =
      arr(3, 0, 0, 3, NULL, 0, wso, sizeof wso, "hiyoux", 6, 0, NULL);
  struct ArrowArray *words = arr(3, 0, 0, 2, NULL, 0, wo, sizeof wo, NULL, 0,
                                 1, &ws);
  struct ArrowArray *kids[6] = {text, blob, seq, pts, nest, words};
  return batch_of(3, 6, kids);
}

static void check_lod(const sl_tensor *t, int n, const int64_t *want) {
  int64_t len;
  const int64_t *lod = sl_tensor_lod(t, &len);
  ASSERT_EQ(len, n);
  for (int i = 0; i < n; i++) ASSERT_EQ(lod[i], want[i]);
}

TEST(arrow_strings_binaries_lists_and_lists_of_lists) {
  counts_reset();
  struct ArrowArray *b = var_batch();
  struct ArrowArrayStream st = stream_of(var_schema, 1, &b);
  sl_reader *r = open_stream(&st);
  char desc[512];
  sl_schema_describe(sl_reader_schema(r), desc, sizeof desc);
  ASSERT_STREQ(desc, "{text: bytes[-1], blob: u8[-1], seq: i32[-1], pts: "
                     "f32[-1,2], nest: i16[-1], words: bytes[-1]}");
  sl_sample *s;
  /* row 0 */
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(sl_sample_field(s, "text")->shape[0], 0);
  ASSERT_EQ(sl_sample_field(s, "blob")->shape[0], 1);
  ASSERT_EQ(((uint8_t *)sl_sample_field(s, "blob")->data)[0], 1);
  const sl_tensor *t = sl_sample_field(s, "seq");
  ASSERT_EQ(t->shape[0], 2);
  ASSERT_EQ(((int32_t *)t->data)[0], 1);
  ASSERT_EQ(((int32_t *)t->data)[1], 2);
  t = sl_sample_field(s, "pts");
  ASSERT_EQ(t->shape[0], 1);
  ASSERT_TRUE(((float *)t->data)[1] == 1.0f);
  t = sl_sample_field(s, "nest");
  ASSERT_EQ(t->shape[0], 3);
  check_lod(t, 3, (int64_t[]){0, 1, 3});
  ASSERT_EQ(((int16_t *)t->data)[2], 3);
  t = sl_sample_field(s, "words");
  ASSERT_EQ(t->shape[0], 5);
  ASSERT_TRUE(memcmp(t->data, "hiyou", 5) == 0);
  check_lod(t, 3, (int64_t[]){0, 2, 5});
  sl_sample_release(s);
  /* row 1 */
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_TRUE(memcmp(sl_sample_field(s, "text")->data, "ab", 2) == 0);
  ASSERT_EQ(sl_sample_field(s, "blob")->shape[0], 0);
  ASSERT_EQ(sl_sample_field(s, "seq")->shape[0], 0);
  t = sl_sample_field(s, "pts");
  ASSERT_EQ(t->shape[0], 2);
  ASSERT_TRUE(((float *)t->data)[3] == 5.0f);
  t = sl_sample_field(s, "nest");
  ASSERT_EQ(t->shape[0], 0);
  check_lod(t, 1, (int64_t[]){0});
  t = sl_sample_field(s, "words");
  ASSERT_EQ(t->shape[0], 1);
  check_lod(t, 2, (int64_t[]){0, 1});
  sl_sample_release(s);
  /* row 2 */
  ASSERT_OK(sl_reader_next(r, &s));
  t = sl_sample_field(s, "text");
  ASSERT_EQ(t->shape[0], 3);
  ASSERT_TRUE(memcmp(t->data, "cde", 3) == 0);
  ASSERT_EQ(sl_sample_field(s, "blob")->shape[0], 2);
  t = sl_sample_field(s, "seq");
  ASSERT_EQ(((int32_t *)t->data)[0], 3);
  ASSERT_EQ(sl_sample_field(s, "pts")->shape[0], 0);
  t = sl_sample_field(s, "nest");
  check_lod(t, 3, (int64_t[]){0, 0, 1});
  ASSERT_EQ(((int16_t *)t->data)[0], 4);
  ASSERT_EQ(sl_sample_field(s, "words")->shape[0], 0);
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  ASSERT_EQ(g_str_freed, 1);
  counts_balanced();
}

/* --- refusals --------------------------------------------------------------- */

static const char *g_bad_format;
static struct ArrowSchema *bad_schema(void) {
  return sch("+s", "", 2, sch("f", "ok", 0), sch(g_bad_format, "when", 0));
}
static struct ArrowSchema *not_struct_schema(void) {
  return sch("f", "x", 0);
}
static struct ArrowSchema *ragged_inner_schema(void) {
  return sch("+s", "", 1,
             sch("+w:2", "grid", 1, sch("+l", "item", 1, sch("f", "i", 0))));
}
static struct ArrowSchema *nested_struct_schema(void) {
  return sch("+s", "", 1, sch("+s", "inner", 1, sch("f", "x", 0)));
}
static struct ArrowSchema *three_lists_schema(void) {
  return sch("+s", "", 1,
             sch("+l", "deep", 1,
                 sch("+l", "i", 1, sch("+l", "i", 1, sch("c", "i", 0)))));
}

static void refused(struct ArrowSchema *(*mk)(void), int code,
                    const char *needle1, const char *needle2) {
  counts_reset();
  struct ArrowArrayStream st = stream_of(mk, 0, NULL);
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_reader_from_arrow_stream(&st, NULL, &r), code);
  ASSERT_NULL(r);
  ASSERT_NULL(st.release);
  ASSERT_EQ(g_str_freed, 1);
  ASSERT_CONTAINS(sl_last_error(), needle1);
  if (needle2) ASSERT_CONTAINS(sl_last_error(), needle2);
  counts_balanced();
}

TEST(arrow_refuses_unmappable_types_naming_column_and_format) {
  g_bad_format = "tsu:UTC";
  refused(bad_schema, SL_EUNSUPPORTED, "column 'when'", "'tsu:UTC'");
  g_bad_format = "d:10,2";
  refused(bad_schema, SL_EUNSUPPORTED, "column 'when'", "'d:10,2'");
  g_bad_format = "vu";
  refused(bad_schema, SL_EUNSUPPORTED, "column 'when'", "'vu'");
  refused(not_struct_schema, SL_EUNSUPPORTED, "'f'", "not a struct");
  refused(ragged_inner_schema, SL_EUNSUPPORTED, "column 'grid'", "'+w:2'");
  refused(nested_struct_schema, SL_EUNSUPPORTED, "column 'inner'", "'+s'");
  refused(three_lists_schema, SL_EUNSUPPORTED, "column 'deep'",
          "more than two levels");
  /* A released or NULL stream. */
  struct ArrowArrayStream dead = {0};
  sl_reader *r;
  ASSERT_RC(sl_reader_from_arrow_stream(&dead, NULL, &r), SL_EINVAL);
  ASSERT_RC(sl_reader_from_arrow_stream(NULL, NULL, &r), SL_EINVAL);
}

static struct ArrowSchema *dict_schema(void) {
  struct ArrowSchema *s = sch("+s", "", 1, sch("i", "cat", 0));
  s->children[0]->dictionary = sch("u", "", 0);
  return s;
}
static struct ArrowSchema *dup_names_schema(void) {
  return sch("+s", "", 2, sch("f", "a", 0), sch("i", "a", 0));
}
static struct ArrowSchema *no_name_schema(void) {
  return sch("+s", "", 1, sch("f", NULL, 0));
}

TEST(arrow_dictionaries_duplicate_and_missing_names_are_refused) {
  refused(dict_schema, SL_EUNSUPPORTED, "column 'cat'", "dictionary");
  refused(dup_names_schema, SL_EINVAL, "column 'a'", NULL);
  refused(no_name_schema, SL_EINVAL, "column 0", NULL);
}

/* --- nulls ------------------------------------------------------------------ */

static struct ArrowSchema *one_f32_schema(void) {
  return sch("+s", "", 1, sch("f", "x", 0));
}
static struct ArrowSchema *list_f32_schema(void) {
  return sch("+s", "", 1, sch("+l", "xs", 1, sch("f", "item", 0)));
}

TEST(arrow_a_null_value_is_an_error_naming_column_and_row) {
  counts_reset();
  float v[] = {1, 2, 3};
  uint8_t valid = 0x5; /* row 1 null */
  struct ArrowArray *c = arr(3, 0, 1, 2, &valid, 1, v, sizeof v, NULL, 0, 0,
                             NULL);
  struct ArrowArray *b0 = batch_of(3, 1, &c);
  struct ArrowArray *c2 = PRIM(3, 0, v);
  struct ArrowArray *b1 = batch_of(3, 1, &c2);
  struct ArrowArray *bs[2] = {b1, b0};
  struct ArrowArrayStream st = stream_of(one_f32_schema, 2, bs);
  sl_reader *r = open_stream(&st);
  sl_sample *s;
  for (int i = 0; i < 4; i++) {
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "column 'x', row 4 (row 1 of batch 2)");
  ASSERT_CONTAINS(sl_last_error(), "null");
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL); /* and stays so */
  ASSERT_CONTAINS(sl_last_error(), "row 4");
  sl_reader_destroy(r);
  counts_balanced();
}

TEST(arrow_a_null_inside_a_list_is_an_error_too) {
  counts_reset();
  int32_t o[] = {0, 1, 3};
  float v[] = {1, 2, 3};
  uint8_t valid = 0x5; /* element 1, in row 1, null */
  struct ArrowArray *leaf = arr(3, 0, -1, 2, &valid, 1, v, sizeof v, NULL, 0,
                                0, NULL);
  struct ArrowArray *l = arr(2, 0, 0, 2, NULL, 0, o, sizeof o, NULL, 0, 1,
                             &leaf);
  struct ArrowArray *b = batch_of(2, 1, &l);
  struct ArrowArrayStream st = stream_of(list_f32_schema, 1, &b);
  sl_reader *r = open_stream(&st);
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "column 'xs', row 1");
  sl_reader_destroy(r);
  counts_balanced();
}

/* --- a failing stream, corrupt batches ------------------------------------------ */

TEST(arrow_get_next_failing_is_eio_with_the_streams_message) {
  counts_reset();
  float v[] = {1, 2};
  struct ArrowArray *c = PRIM(2, 0, v);
  struct ArrowArray *b = batch_of(2, 1, &c);
  struct ArrowArray *c2 = PRIM(2, 0, v);
  struct ArrowArray *b2 = batch_of(2, 1, &c2);
  struct ArrowArray *bs[2] = {b, b2};
  struct ArrowArrayStream st = stream_of(one_f32_schema, 2, bs);
  ((fake_stream *)st.private_data)->fail_at = 1;
  sl_arrow_opts o = SL_ARROW_OPTS_INIT;
  o.name = "shard-7";
  sl_reader *r;
  ASSERT_OK(sl_reader_from_arrow_stream(&st, &o, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample *s2;
  ASSERT_RC(sl_reader_next(r, &s2), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "shard-7");
  ASSERT_CONTAINS(sl_last_error(), "disk on fire");
  ASSERT_CONTAINS(sl_last_error(), "after 1 batches (2 rows)");
  ASSERT_RC(sl_reader_next(r, &s2), SL_EIO);
  sl_reader_destroy(r);
  ASSERT_EQ(g_arr_freed, 2); /* b2 and its child, never handed out */
  sl_sample_release(s); /* the first batch goes with its last sample */
  ASSERT_EQ(g_str_freed, 1);
  counts_balanced();
}

TEST(arrow_get_schema_failing_is_eio) {
  counts_reset();
  struct ArrowArrayStream st = stream_of(one_f32_schema, 0, NULL);
  ((fake_stream *)st.private_data)->schema_fails = 1;
  sl_reader *r;
  ASSERT_RC(sl_reader_from_arrow_stream(&st, NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "no schema today");
  ASSERT_EQ(g_str_freed, 1);
  counts_balanced();
}

TEST(arrow_corrupt_batches_are_ecorrupt_naming_the_column) {
  counts_reset();
  int32_t o[] = {0, 2, 1}; /* decreasing */
  float v[] = {1, 2};
  struct ArrowArray *leaf = PRIM(2, 0, v);
  struct ArrowArray *l = arr(2, 0, 0, 2, NULL, 0, o, sizeof o, NULL, 0, 1,
                             &leaf);
  struct ArrowArray *b = batch_of(2, 1, &l);
  struct ArrowArrayStream st = stream_of(list_f32_schema, 1, &b);
  sl_reader *r = open_stream(&st);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "column 'xs'");
  ASSERT_CONTAINS(sl_last_error(), "offsets decrease");
  sl_reader_destroy(r);
  counts_balanced();

  /* offsets past the child */
  counts_reset();
  int32_t o2[] = {0, 2, 5};
  leaf = PRIM(2, 0, v);
  l = arr(2, 0, 0, 2, NULL, 0, o2, sizeof o2, NULL, 0, 1, &leaf);
  b = batch_of(2, 1, &l);
  st = stream_of(list_f32_schema, 1, &b);
  r = open_stream(&st);
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "shorter than the list needs");
  sl_reader_destroy(r);
  counts_balanced();

  /* a batch with the wrong column count */
  counts_reset();
  struct ArrowArray *c1 = PRIM(2, 0, v), *c2 = PRIM(2, 0, v);
  struct ArrowArray *two[2] = {c1, c2};
  b = batch_of(2, 2, two);
  st = stream_of(one_f32_schema, 1, &b);
  r = open_stream(&st);
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "2 columns");
  sl_reader_destroy(r);
  counts_balanced();
}

/* --- out, and back ------------------------------------------------------------ */

/* A batch of 3 rows: x f32[3,2,2], y i64[3], ok bool[3], s bytes (LoD),
 * seq i32 (LoD), h f16[3,4]. */
static sl_sample *make_batch(void) {
  sl_schema *sc = sl_schema_new();
  int64_t x[] = {3, 2, 2}, y[] = {3}, v[] = {SL_DIM_VAR}, h[] = {3, 4};
  ASSERT_TRUE(sl_schema_add(sc, "x", SL_F32, 3, x) >= 0);
  ASSERT_TRUE(sl_schema_add(sc, "y", SL_I64, 1, y) >= 0);
  ASSERT_TRUE(sl_schema_add(sc, "ok", SL_BOOL, 1, y) >= 0);
  ASSERT_TRUE(sl_schema_add(sc, "s", SL_BYTES, 1, v) >= 0);
  ASSERT_TRUE(sl_schema_add(sc, "seq", SL_I32, 1, v) >= 0);
  ASSERT_TRUE(sl_schema_add(sc, "h", SL_F16, 2, h) >= 0);
  sl_sample *s = sl_sample_new(sc);
  sl_schema_release(sc);
  void *d;
  ASSERT_OK(sl_sample_alloc(s, 0, 3, x, &d));
  for (int i = 0; i < 12; i++) ((float *)d)[i] = (float)i * 1.5f;
  ASSERT_OK(sl_sample_alloc(s, 1, 1, y, &d));
  for (int i = 0; i < 3; i++) ((int64_t *)d)[i] = (int64_t)i * 1000000007;
  ASSERT_OK(sl_sample_alloc(s, 2, 1, y, &d));
  for (int i = 0; i < 3; i++) ((uint8_t *)d)[i] = i != 1;
  ASSERT_OK(sl_sample_alloc(s, 5, 2, h, &d));
  for (int i = 0; i < 12; i++) ((uint16_t *)d)[i] = (uint16_t)(0x3c00 + i);
  /* LoD fields */
  const char *txt = "hellothere!";
  int64_t tl[] = {0, 5, 5, 11};
  int32_t sv[] = {7, 8, 9};
  int64_t sl_[] = {0, 2, 3, 3};
  for (int f = 3; f <= 4; f++) {
    sl_tensor t;
    int64_t n = f == 3 ? 11 : 3;
    ASSERT_OK(sl_tensor_alloc(&t, f == 3 ? SL_BYTES : SL_I32, 1, &n));
    memcpy(t.data, f == 3 ? (const void *)txt : (const void *)sv, t.nbytes);
    sl_buffer *lb = sl_buffer_new(4 * sizeof(int64_t));
    memcpy(sl_buffer_data(lb), f == 3 ? tl : sl_, 4 * sizeof(int64_t));
    ASSERT_OK(sl_tensor_set_lod(&t, lb, sl_buffer_data(lb), 4));
    sl_buffer_release(lb);
    ASSERT_OK(sl_sample_set_move(s, f, &t));
  }
  return s;
}

static void same_tensor(const sl_tensor *a, const sl_tensor *b) {
  ASSERT_EQ(a->dtype, b->dtype);
  ASSERT_EQ(a->rank, b->rank);
  for (int i = 0; i < a->rank; i++) ASSERT_EQ(a->shape[i], b->shape[i]);
  ASSERT_EQ(a->nbytes, b->nbytes);
  ASSERT_TRUE(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
  ASSERT_EQ(a->lod_len, b->lod_len);
  for (int64_t i = 0; i < a->lod_len; i++) ASSERT_EQ(a->lod[i], b->lod[i]);
}

TEST(arrow_export_is_a_struct_of_fixed_size_lists_without_copy) {
  sl_sample *s = make_batch();
  struct ArrowSchema sc;
  struct ArrowArray a;
  ASSERT_OK(sl_sample_to_arrow(s, &sc, &a));
  ASSERT_STREQ(sc.format, "+s");
  ASSERT_EQ(sc.n_children, 6);
  ASSERT_EQ(a.length, 3);
  ASSERT_STREQ(sc.children[0]->name, "x");
  ASSERT_STREQ(sc.children[0]->format, "+w:2");
  ASSERT_STREQ(sc.children[0]->children[0]->format, "+w:2");
  ASSERT_STREQ(sc.children[0]->children[0]->children[0]->format, "f");
  ASSERT_STREQ(sc.children[1]->format, "l");
  ASSERT_STREQ(sc.children[2]->format, "b");
  ASSERT_STREQ(sc.children[3]->format, "U");
  ASSERT_STREQ(sc.children[4]->format, "+L");
  ASSERT_STREQ(sc.children[4]->children[0]->format, "i");
  ASSERT_STREQ(sc.children[5]->format, "+w:4");
  ASSERT_STREQ(sc.children[5]->children[0]->format, "e");
  /* zero-copy: the leaves are the tensors' memory */
  struct ArrowArray *leaf = a.children[0]->children[0]->children[0];
  ASSERT_EQ(leaf->length, 12);
  ASSERT_TRUE(leaf->buffers[1] == sl_sample_field(s, "x")->data);
  ASSERT_TRUE(a.children[3]->buffers[1] == (const void *)sl_sample_field(s, "s")->lod);
  ASSERT_EQ(((const uint8_t *)a.children[2]->buffers[1])[0], 0x5);
  /* the arrays hold the sample: it outlives the caller's reference */
  ASSERT_TRUE(sl_sample_refcount(s) > 1);
  /* a child moved out and released apart from its parent */
  struct ArrowArray moved = *a.children[1];
  a.children[1]->release = NULL;
  sl_sample_release(s);
  a.release(&a);
  ASSERT_EQ(((const int64_t *)moved.buffers[1])[2], 2 * 1000000007LL);
  moved.release(&moved); /* the last reference: frees the sample */
  sc.release(&sc);
  ASSERT_NULL(sc.release);
}

TEST(arrow_export_refusals) {
  sl_schema *sc = sl_schema_new();
  int64_t two[] = {2}, three[] = {3};
  ASSERT_TRUE(sl_schema_add(sc, "a", SL_F32, 1, two) >= 0);
  ASSERT_TRUE(sl_schema_add(sc, "b", SL_F32, 1, three) >= 0);
  ASSERT_TRUE(sl_schema_add(sc, "w", SL_BF16, 1, two) >= 0);
  ASSERT_TRUE(sl_schema_add(sc, "z", SL_F32, 0, NULL) >= 0);
  sl_sample *s = sl_sample_new(sc);
  sl_schema_release(sc);
  void *d;
  ASSERT_OK(sl_sample_alloc(s, 0, 1, two, &d));
  ASSERT_OK(sl_sample_alloc(s, 1, 1, three, &d));
  ASSERT_OK(sl_sample_alloc(s, 2, 1, two, &d));
  ASSERT_OK(sl_sample_alloc(s, 3, 0, NULL, &d));
  struct ArrowSchema as;
  struct ArrowArray aa;
  ASSERT_RC(sl_sample_to_arrow(s, &as, &aa), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "field 'b' has 3 rows but 'a' has 2");
  ASSERT_NULL(as.release);
  ASSERT_NULL(aa.release);
  ASSERT_RC(sl_sample_to_arrow(NULL, &as, &aa), SL_EINVAL);
  sl_sample_release(s);
  sc = sl_schema_new();
  ASSERT_TRUE(sl_schema_add(sc, "w", SL_BF16, 1, two) >= 0);
  s = sl_sample_new(sc);
  sl_schema_release(sc);
  ASSERT_OK(sl_sample_alloc(s, 0, 1, two, &d));
  ASSERT_RC(sl_sample_to_arrow(s, &as, &aa), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "field 'w': bf16");
  sl_sample_release(s);
  sc = sl_schema_new();
  ASSERT_TRUE(sl_schema_add(sc, "z", SL_F32, 0, NULL) >= 0);
  s = sl_sample_new(sc);
  sl_schema_release(sc);
  ASSERT_OK(sl_sample_alloc(s, 0, 0, NULL, &d));
  ASSERT_RC(sl_sample_to_arrow(s, &as, &aa), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "field 'z' is a scalar");
  sl_sample_release(s);
}

/* One batch exported, read back row by row, batched again: equal. */
TEST(arrow_round_trip_sluice_arrow_sluice) {
  sl_sample *orig = make_batch();
  sl_reader *src;
  ASSERT_OK(sl_reader_from_array(&orig, 1, NULL, &src));
  struct ArrowArrayStream st;
  ASSERT_OK(sl_reader_to_arrow_stream(src, &st));
  sl_reader *back;
  ASSERT_OK(sl_reader_from_arrow_stream(&st, NULL, &back));
  char desc[512];
  sl_schema_describe(sl_reader_schema(back), desc, sizeof desc);
  ASSERT_STREQ(desc, "{x: f32[2,2], y: i64[], ok: bool[], s: bytes[-1], seq: "
                     "i32[-1], h: f16[4]}");
  sl_reader *rb;
  ASSERT_OK(sl_batch(back, 3, NULL, &rb));
  sl_sample *got;
  ASSERT_OK(sl_reader_next(rb, &got));
  for (int i = 0; i < sl_sample_nfields(orig); i++)
    same_tensor(sl_sample_at_const(orig, i), sl_sample_at_const(got, i));
  sl_sample *none;
  ASSERT_RC(sl_reader_next(rb, &none), SL_EOF);
  sl_reader_destroy(rb);
  sl_sample_release(got);
  sl_sample_release(orig);
}

TEST(arrow_stream_export_reports_reader_errors_and_ends) {
  /* an empty reader: get_schema fails, get_next ends */
  sl_schema *sc = sl_schema_new();
  int64_t two[] = {2};
  ASSERT_TRUE(sl_schema_add(sc, "a", SL_F32, 1, two) >= 0);
  sl_reader *r;
  ASSERT_OK(sl_reader_from_array(NULL, 0, sc, &r));
  sl_schema_release(sc);
  struct ArrowArrayStream st;
  ASSERT_OK(sl_reader_to_arrow_stream(r, &st));
  struct ArrowSchema as;
  ASSERT_EQ(st.get_schema(&st, &as), EINVAL);
  ASSERT_CONTAINS(st.get_last_error(&st), "no sample");
  struct ArrowArray aa;
  ASSERT_EQ(st.get_next(&st, &aa), 0);
  ASSERT_NULL(aa.release);
  st.release(&st);
  ASSERT_NULL(st.release);
  ASSERT_RC(sl_reader_to_arrow_stream(NULL, &st), SL_EINVAL);
}

TEST(arrow_parked_stream_opens_once_through_sl_open) {
  counts_reset();
  float v[] = {4, 5};
  struct ArrowArray *c = PRIM(2, 0, v);
  struct ArrowArray *b = batch_of(2, 1, &c);
  struct ArrowArrayStream st = stream_of(one_f32_schema, 1, &b);
  ASSERT_OK(sl_arrow_stream_park("t1", &st));
  ASSERT_NULL(st.release);
  struct ArrowArrayStream st2 = stream_of(one_f32_schema, 0, NULL);
  ASSERT_RC(sl_arrow_stream_park("t1", &st2), SL_EINVAL); /* taken name */
  ASSERT_NULL(st2.release);
  ASSERT_EQ(g_str_freed, 1);
  sl_reader *r;
  ASSERT_OK(sl_open("arrow:t1", NULL, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_TRUE(*(float *)sl_sample_field(s, "x")->data == 4.0f);
  sl_sample_release(s);
  sl_reader_destroy(r);
  ASSERT_RC(sl_open("arrow:t1", NULL, &r), SL_ENOTFOUND);
  ASSERT_CONTAINS(sl_last_error(), "arrow:t1");
  ASSERT_EQ(sl_arrow_stream_unpark("t1"), 0);
  st = stream_of(one_f32_schema, 0, NULL);
  ASSERT_RC(sl_arrow_stream_park("bad name", &st), SL_EINVAL);
  st = stream_of(one_f32_schema, 0, NULL);
  ASSERT_OK(sl_arrow_stream_park("t2", &st));
  ASSERT_EQ(sl_arrow_stream_unpark("t2"), 1);
  ASSERT_EQ(g_str_freed, 4);
  counts_balanced();
}

TEST(arrow_empty_batches_are_skipped_and_a_null_row_is_an_error) {
  counts_reset();
  float v[] = {1, 2, 3};
  struct ArrowArray *c0 = PRIM(0, 0, v);
  struct ArrowArray *empty = batch_of(0, 1, &c0);
  struct ArrowArray *c1 = PRIM(3, 0, v);
  uint8_t valid = 0x5; /* row 1 null as a whole */
  struct ArrowArray *b = arr(3, 0, 1, 1, &valid, 1, NULL, 0, NULL, 0, 1, &c1);
  struct ArrowArray *bs[2] = {empty, b};
  struct ArrowArrayStream st = stream_of(one_f32_schema, 2, bs);
  sl_reader *r = open_stream(&st);
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_TRUE(*(float *)sl_sample_field(s, "x")->data == 1.0f);
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "row 1 (row 1 of batch 2) is null");
  sl_reader_destroy(r);
  counts_balanced();
}

/* --- the memory budget ---------------------------------------------------- */

/* The current batch's column values are the stage's resident bytes (its
 * samples are views that keep it alive): charged as it arrives, the next
 * batch's in its place, nothing once the stream ends. */
TEST(arrow_current_batch_is_charged) {
  counts_reset();
  float v0[64], v1[16];
  for (int k = 0; k < 64; k++) v0[k] = (float)k;
  for (int k = 0; k < 16; k++) v1[k] = (float)-k;
  struct ArrowArray *c0 = PRIM(64, 0, v0);
  struct ArrowArray *b0 = batch_of(64, 1, &c0);
  struct ArrowArray *c1 = PRIM(16, 0, v1);
  struct ArrowArray *b1 = batch_of(16, 1, &c1);
  struct ArrowArray *bs[2] = {b0, b1};
  struct ArrowArrayStream st = stream_of(one_f32_schema, 2, bs);
  sl_reader *r = open_stream(&st);
  ASSERT_OK(sl_reader_set_budget(r, 1 << 20));
  sl_stage_stats row;
  size_t n = 0;
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s)); /* batch 1: 64 floats */
  sl_sample_release(s);
  ASSERT_OK(sl_reader_stats(r, &row, 1, &n));
  ASSERT_GE(row.bytes_held, 64 * sizeof(float));
  ASSERT_LE(row.bytes_held, 64 * sizeof(float) + 64);
  for (int i = 1; i < 65; i++) { /* into batch 2: 16 floats */
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  ASSERT_OK(sl_reader_stats(r, &row, 1, &n));
  ASSERT_GE(row.bytes_held, 16 * sizeof(float));
  ASSERT_LE(row.bytes_held, 16 * sizeof(float) + 64);
  ASSERT_TRUE(row.bytes_peak >= 64 * sizeof(float));
  while (sl_reader_next(r, &s) == SL_OK)
    sl_sample_release(s);
  ASSERT_OK(sl_reader_stats(r, &row, 1, &n));
  ASSERT_LE(row.bytes_held, 16); /* the stream ended: only a carry */
  sl_reader_destroy(r);
  counts_balanced();
}

/* A column's validity bitmaps and list offsets are the batch's bytes too:
 * 1024 one-value lists of f32 with a bitmap hold 4 096 bytes of values,
 * 4 100 of offsets and 128 of bitmap. */
TEST(arrow_bitmaps_and_offsets_are_charged_with_the_values) {
  counts_reset();
  enum { N = 1024 };
  static int32_t offs[N + 1];
  static float vals[N];
  static uint8_t valid[N / 8];
  for (int k = 0; k <= N; k++) offs[k] = k;
  for (int k = 0; k < N; k++) vals[k] = (float)k;
  memset(valid, 0xff, sizeof valid);
  struct ArrowArray *item =
      arr(N, 0, 0, 2, NULL, 0, vals, sizeof vals, NULL, 0, 0, NULL);
  struct ArrowArray *xs = arr(N, 0, 0, 2, valid, sizeof valid, offs,
                              sizeof offs, NULL, 0, 1, &item);
  struct ArrowArray *b = batch_of(N, 1, &xs);
  struct ArrowArrayStream st = stream_of(list_f32_schema, 1, &b);
  sl_reader *r = open_stream(&st);
  ASSERT_OK(sl_reader_set_budget(r, 1 << 20));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_TRUE(((float *)sl_sample_field(s, "xs")->data)[0] == 0.0f);
  sl_sample_release(s);
  sl_stage_stats row;
  size_t n = 0;
  ASSERT_OK(sl_reader_stats(r, &row, 1, &n));
  ASSERT_GE(row.bytes_held, sizeof vals + sizeof offs + sizeof valid);
  ASSERT_LE(row.bytes_held, sizeof vals + sizeof offs + sizeof valid + 64);
  sl_reader_destroy(r);
  counts_balanced();
}
