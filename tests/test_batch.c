/*
 * test_batch.c - sl_batch: stacking fixed fields, LoD merge of ragged fields,
 * pad mode, partial last batches, per-sample checks, error pass-through and
 * reset.
 *
 * Fixtures are built with the public API only.  Samples that the library
 * would refuse to build for a schema (a wrong dtype or shape) are produced by
 * a small custom reader (sl_reader_new with a vtable defined here) whose
 * declared schema differs from its samples' - which also checks that readers
 * written outside the library plug into sl_batch.
 */
#include "test.h"

/* --- fixtures ------------------------------------------------------------- */

static sl_schema *schema1(const char *name, sl_dtype dt, int rank,
                          const int64_t *shape) {
  sl_schema *s = sl_schema_new();
  ASSERT_NOT_NULL(s);
  ASSERT_OK(sl_schema_add(s, name, dt, rank, shape));
  return s;
}

/* {x: f32[3], y: i64[]}: sample k holds x = {10k, 10k+1, 10k+2}, y = 100+k. */
static sl_schema *xy_schema(void) {
  sl_schema *s = sl_schema_new();
  ASSERT_NOT_NULL(s);
  int64_t three = 3;
  ASSERT_OK(sl_schema_add(s, "x", SL_F32, 1, &three));
  ASSERT_OK(sl_schema_add(s, "y", SL_I64, 0, NULL));
  return s;
}

static sl_sample *xy_sample(sl_schema *s, int k) {
  sl_sample *smp = sl_sample_new(s);
  ASSERT_NOT_NULL(smp);
  int64_t three = 3;
  void *d;
  ASSERT_OK(sl_sample_alloc(smp, 0, 1, &three, &d));
  for (int i = 0; i < 3; i++)
    ((float *)d)[i] = (float)(10 * k + i);
  ASSERT_OK(sl_sample_alloc(smp, 1, 0, NULL, &d));
  *(int64_t *)d = 100 + k;
  return smp;
}

/* An array reader over `count` xy samples (0..count-1). */
static sl_reader *xy_reader(int count) {
  sl_schema *s = xy_schema();
  sl_sample *smp[16];
  ASSERT_LE(count, 16);
  for (int k = 0; k < count; k++)
    smp[k] = xy_sample(s, k);
  sl_reader *r = NULL;
  ASSERT_OK(sl_reader_from_array(smp, (size_t)count, s, &r));
  for (int k = 0; k < count; k++)
    sl_sample_release(smp[k]);
  sl_schema_release(s);
  return r;
}

static sl_reader *xy_batch(int count, size_t n, int drop_last) {
  sl_batch_opts o = {.drop_last = drop_last};
  sl_reader *b = NULL;
  ASSERT_OK(sl_batch(xy_reader(count), n, &o, &b));
  return b;
}

/* Checks that `batch` holds xy samples first..first+B-1, stacked. */
static void check_xy_batch(sl_sample *batch, int first, int B) {
  ASSERT_EQ(sl_sample_nfields(batch), 2);
  const sl_tensor *x = sl_sample_field(batch, "x");
  const sl_tensor *y = sl_sample_field(batch, "y");
  ASSERT_NOT_NULL(x);
  ASSERT_NOT_NULL(y);
  ASSERT_EQ(x->dtype, SL_F32);
  ASSERT_EQ(x->rank, 2);
  ASSERT_EQ(x->shape[0], B);
  ASSERT_EQ(x->shape[1], 3);
  ASSERT_EQ(x->nbytes, (size_t)B * 3 * sizeof(float));
  ASSERT_NULL(x->lod);
  const float *xv = x->data;
  for (int j = 0; j < B; j++)
    for (int i = 0; i < 3; i++)
      ASSERT_EQ((long long)xv[j * 3 + i], 10 * (first + j) + i);
  ASSERT_EQ(y->dtype, SL_I64);
  ASSERT_EQ(y->rank, 1);
  ASSERT_EQ(y->shape[0], B);
  const int64_t *yv = y->data;
  for (int j = 0; j < B; j++)
    ASSERT_EQ(yv[j], 100 + first + j);
}

/* Pulls one batch and checks it is xy first..first+B-1. */
static void expect_xy(sl_reader *r, int first, int B) {
  sl_sample *b = NULL;
  ASSERT_RC(sl_reader_next(r, &b), SL_OK);
  check_xy_batch(b, first, B);
  sl_sample_release(b);
}

static void expect_eof(sl_reader *r) {
  sl_sample *b = NULL;
  ASSERT_RC(sl_reader_next(r, &b), SL_EOF);
  ASSERT_NULL(b);
  ASSERT_RC(sl_reader_next(r, &b), SL_EOF); /* EOF repeats */
}

/* A rank-1 (or more) sample of field 0 of `s`, its data from `vals`. */
static sl_sample *sample_with(sl_schema *s, int rank, const int64_t *shape,
                              const void *vals, size_t nbytes) {
  sl_sample *smp = sl_sample_new(s);
  ASSERT_NOT_NULL(smp);
  void *d = NULL;
  ASSERT_OK(sl_sample_alloc(smp, 0, rank, shape, &d));
  ASSERT_EQ(sl_sample_at(smp, 0)->nbytes, nbytes);
  if (nbytes) memcpy(d, vals, nbytes);
  return smp;
}

/* The array reader over `smp` (released here), batched; `pad` 1 sets pad,
 * LOD (2) sets lod. */
enum { LOD = 2 };
static sl_reader *batch_over(sl_sample **smp, size_t count, sl_schema *s,
                             size_t n, int drop_last, int pad) {
  sl_reader *r = NULL;
  ASSERT_OK(sl_reader_from_array(smp, count, s, &r));
  for (size_t k = 0; k < count; k++)
    sl_sample_release(smp[k]);
  sl_batch_opts o = {
      .drop_last = drop_last, .pad = pad == 1, .lod = pad == LOD};
  sl_reader *b = NULL;
  ASSERT_OK(sl_batch(r, n, &o, &b));
  return b;
}

/* --- a custom reader, defined outside the library -------------------------
 * Yields retained references to pool[0..n-1]; at position fail_at it fails
 * with fail_code instead.  `calls` counts next calls, so tests can see that
 * the batch stage stops pulling after an error. */
typedef struct fake {
  sl_sample **pool;
  size_t n, pos;
  size_t fail_at; /* (size_t)-1: never */
  int fail_code;
  int calls;
} fake;

static int fake_next(void *st, sl_sample **out) {
  fake *f = st;
  f->calls++;
  if (f->pos == f->fail_at)
    return sl_set_error(f->fail_code, "fake: disk on fire at record %zu",
                        f->pos);
  if (f->pos == f->n) return SL_EOF;
  *out = sl_sample_retain(f->pool[f->pos++]);
  return SL_OK;
}

static int fake_reset(void *st) {
  ((fake *)st)->pos = 0;
  return SL_OK;
}

/* State lives on the test's stack and the pool is the test's: no destroy. */
static const sl_reader_vtable fake_vt = {"fake", fake_next, fake_reset, NULL};
static const sl_reader_vtable fake_noreset_vt = {"fake", fake_next, NULL, NULL};

static sl_reader *fake_reader(fake *f, sl_schema *declared) {
  sl_reader *r = sl_reader_new(&fake_vt, f, declared);
  ASSERT_NOT_NULL(r);
  return r;
}

/* --- stacking ------------------------------------------------------------- */

TEST(stack_fixed_values) {
  sl_reader *b = xy_batch(4, 2, 0);
  expect_xy(b, 0, 2);
  expect_xy(b, 2, 2);
  expect_eof(b);
  sl_reader_destroy(b);
}

TEST(stack_output_is_a_copy) {
  /* The batch must own its data: releasing the inputs (the array reader
   * with them) leaves the batch intact. */
  sl_reader *b = xy_batch(3, 3, 0);
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(b, &s));
  sl_reader_destroy(b);
  check_xy_batch(s, 0, 3);
  ASSERT_EQ(sl_sample_refcount(s), 1);
  sl_sample_release(s);
}

TEST(stacked_buffers_come_back_for_the_next_batch) {
  /* A released batch's values buffer is the next batch's (the reader's
   * pool), rewritten whole; one still held is not handed out again, and
   * outlives the reader. */
  sl_reader *b = xy_batch(8, 2, 0);
  sl_sample *s0 = NULL, *s1 = NULL, *s2 = NULL;
  ASSERT_OK(sl_reader_next(b, &s0));
  const void *x0 = sl_sample_field(s0, "x")->data;
  sl_sample_release(s0);
  ASSERT_OK(sl_reader_next(b, &s1));
  check_xy_batch(s1, 2, 2);
  ASSERT_TRUE(sl_sample_field(s1, "x")->data == x0);
  ASSERT_OK(sl_reader_next(b, &s2)); /* s1 held: another buffer */
  check_xy_batch(s2, 4, 2);
  ASSERT_TRUE(sl_sample_field(s2, "x")->data != x0);
  sl_sample_release(s1);
  sl_reader_destroy(b);
  check_xy_batch(s2, 4, 2);
  sl_sample_release(s2);
}

TEST(batch_size_one) {
  sl_reader *b = xy_batch(3, 1, 0);
  for (int k = 0; k < 3; k++)
    expect_xy(b, k, 1);
  expect_eof(b);
  sl_reader_destroy(b);
}

TEST(partial_last_batch_kept) {
  sl_reader *b = xy_batch(5, 2, 0);
  expect_xy(b, 0, 2);
  expect_xy(b, 2, 2);
  expect_xy(b, 4, 1);
  expect_eof(b);
  sl_reader_destroy(b);
}

TEST(partial_last_batch_dropped) {
  sl_reader *b = xy_batch(5, 2, 1);
  expect_xy(b, 0, 2);
  expect_xy(b, 2, 2);
  expect_eof(b);
  sl_reader_destroy(b);
}

TEST(exact_multiple_with_drop_last) {
  sl_reader *b = xy_batch(4, 2, 1);
  expect_xy(b, 0, 2);
  expect_xy(b, 2, 2);
  expect_eof(b);
  sl_reader_destroy(b);
}

TEST(empty_upstream) {
  for (int drop = 0; drop < 2; drop++) {
    sl_reader *b = xy_batch(0, 4, drop);
    expect_eof(b);
    ASSERT_EQ(sl_reader_has_next(b), 0);
    sl_reader_destroy(b);
  }
}

TEST(n_larger_than_data) {
  sl_reader *b = xy_batch(3, 10, 0);
  expect_xy(b, 0, 3);
  expect_eof(b);
  sl_reader_destroy(b);
  b = xy_batch(3, 10, 1);
  expect_eof(b);
  sl_reader_destroy(b);
}

TEST(null_opts_means_defaults) {
  sl_reader *b = NULL;
  ASSERT_OK(sl_batch(xy_reader(3), 2, NULL, &b));
  expect_xy(b, 0, 2);
  expect_xy(b, 2, 1); /* partial batch kept */
  expect_eof(b);
  /* LoD, not pad: the schema has no extra field */
  ASSERT_EQ(sl_schema_nfields(sl_reader_schema(b)), 2);
  sl_reader_destroy(b);
}

/* --- output schema -------------------------------------------------------- */

TEST(output_schema_shapes) {
  sl_schema *s = sl_schema_new();
  int64_t three = 3, var = SL_DIM_VAR, v2[2] = {SL_DIM_VAR, 2};
  ASSERT_OK(sl_schema_add(s, "x", SL_F32, 1, &three));
  ASSERT_OK(sl_schema_add(s, "y", SL_I64, 0, NULL));
  ASSERT_OK(sl_schema_add(s, "seq", SL_I32, 2, v2));
  ASSERT_OK(sl_schema_add(s, "raw", SL_BYTES, 1, &var));
  ASSERT_OK(sl_schema_set_meta(s, "source", "unit-test"));

  for (int mode = 0; mode < 4; mode++) {
    int drop = mode & 1, pad = mode >> 1;
    sl_reader *r = NULL;
    ASSERT_OK(sl_reader_from_array(NULL, 0, s, &r));
    sl_batch_opts o = {.drop_last = drop, .pad = pad};
    sl_reader *b = NULL;
    ASSERT_OK(sl_batch(r, 8, &o, &b));
    const sl_schema *os = sl_reader_schema(b);
    int64_t B = drop ? 8 : SL_DIM_VAR;
    ASSERT_STREQ(sl_schema_meta(os, "source"), "unit-test");

    int i = sl_schema_find(os, "x");
    ASSERT_EQ(i, 0);
    ASSERT_EQ(sl_schema_field_dtype(os, i), SL_F32);
    ASSERT_EQ(sl_schema_field_rank(os, i), 2);
    ASSERT_EQ(sl_schema_field_shape(os, i)[0], B);
    ASSERT_EQ(sl_schema_field_shape(os, i)[1], 3);

    i = sl_schema_find(os, "y");
    ASSERT_EQ(i, 1);
    ASSERT_EQ(sl_schema_field_rank(os, i), 1);
    ASSERT_EQ(sl_schema_field_shape(os, i)[0], B);

    i = sl_schema_find(os, "seq");
    ASSERT_EQ(i, 2);
    ASSERT_EQ(sl_schema_field_dtype(os, i), SL_I32);
    if (!pad) {
      ASSERT_EQ(sl_schema_field_rank(os, i), 2);
      ASSERT_EQ(sl_schema_field_shape(os, i)[0], SL_DIM_VAR);
      ASSERT_EQ(sl_schema_field_shape(os, i)[1], 2);
      ASSERT_EQ(sl_schema_find(os, "seq_len"), -1);
      ASSERT_EQ(sl_schema_find(os, "raw"), 3);
      ASSERT_EQ(sl_schema_field_rank(os, 3), 1);
      ASSERT_EQ(sl_schema_field_shape(os, 3)[0], SL_DIM_VAR);
      ASSERT_EQ(sl_schema_nfields(os), 4);
    } else {
      ASSERT_EQ(sl_schema_field_rank(os, i), 3);
      ASSERT_EQ(sl_schema_field_shape(os, i)[0], B);
      ASSERT_EQ(sl_schema_field_shape(os, i)[1], SL_DIM_VAR);
      ASSERT_EQ(sl_schema_field_shape(os, i)[2], 2);
      /* the lengths come right after their field */
      ASSERT_EQ(sl_schema_find(os, "seq_len"), 3);
      ASSERT_EQ(sl_schema_field_dtype(os, 3), SL_I64);
      ASSERT_EQ(sl_schema_field_rank(os, 3), 1);
      ASSERT_EQ(sl_schema_field_shape(os, 3)[0], B);
      ASSERT_EQ(sl_schema_find(os, "raw"), 4);
      ASSERT_EQ(sl_schema_field_dtype(os, 4), SL_BYTES);
      ASSERT_EQ(sl_schema_field_rank(os, 4), 2);
      ASSERT_EQ(sl_schema_field_shape(os, 4)[0], B);
      ASSERT_EQ(sl_schema_field_shape(os, 4)[1], SL_DIM_VAR);
      ASSERT_EQ(sl_schema_find(os, "raw_len"), 5);
      ASSERT_EQ(sl_schema_nfields(os), 6);
    }
    sl_reader_destroy(b);
  }
  sl_schema_release(s);
}

TEST(rank_limit) {
  /* Stacking adds a dimension: a rank-8 fixed field cannot be batched. */
  int64_t shape[SL_MAX_RANK];
  for (int d = 0; d < SL_MAX_RANK; d++)
    shape[d] = 1;
  sl_schema *s = schema1("big", SL_U8, SL_MAX_RANK, shape);
  sl_reader *r = NULL, *b = NULL;
  ASSERT_OK(sl_reader_from_array(NULL, 0, s, &r));
  ASSERT_RC(sl_batch(r, 2, NULL, &b), SL_EINVAL);
  ASSERT_NULL(b);
  ASSERT_CONTAINS(sl_last_error(), "'big'");
  sl_schema_release(s);
}

/* --- LoD merge ------------------------------------------------------------ */

TEST(ragged_lod_values) {
  int64_t var = SL_DIM_VAR;
  sl_schema *s = schema1("tok", SL_I32, 1, &var);
  /* lengths 2, 0, 3 | 1 */
  const int32_t a[] = {1, 2}, c[] = {3, 4, 5}, d[] = {6};
  int64_t l2 = 2, l0 = 0, l3 = 3, l1 = 1;
  sl_sample *smp[4] = {
      sample_with(s, 1, &l2, a, sizeof a), sample_with(s, 1, &l0, NULL, 0),
      sample_with(s, 1, &l3, c, sizeof c), sample_with(s, 1, &l1, d, sizeof d)};
  sl_reader *b = batch_over(smp, 4, s, 3, 0, 0);

  sl_sample *out = NULL;
  ASSERT_OK(sl_reader_next(b, &out));
  const sl_tensor *t = sl_sample_field(out, "tok");
  ASSERT_EQ(t->dtype, SL_I32);
  ASSERT_EQ(t->rank, 1);
  ASSERT_EQ(t->shape[0], 5);
  ASSERT_EQ(t->nbytes, 5 * sizeof(int32_t));
  const int32_t *v = t->data;
  for (int i = 0; i < 5; i++)
    ASSERT_EQ(v[i], i + 1);
  int64_t len = 0;
  const int64_t *lod = sl_tensor_lod(t, &len);
  ASSERT_NOT_NULL(lod);
  ASSERT_EQ(len, 4);
  ASSERT_EQ(lod[0], 0);
  ASSERT_EQ(lod[1], 2);
  ASSERT_EQ(lod[2], 2);
  ASSERT_EQ(lod[3], 5);
  ASSERT_EQ((uintptr_t)lod % 8, 0);
  /* payload accounting includes the offsets */
  ASSERT_EQ(sl_sample_nbytes(out), 5 * sizeof(int32_t) + 4 * sizeof(int64_t));
  sl_sample_release(out);

  ASSERT_OK(sl_reader_next(b, &out)); /* the partial batch: one sample */
  t = sl_sample_field(out, "tok");
  ASSERT_EQ(t->shape[0], 1);
  ASSERT_EQ(((const int32_t *)t->data)[0], 6);
  lod = sl_tensor_lod(t, &len);
  ASSERT_EQ(len, 2);
  ASSERT_EQ(lod[0], 0);
  ASSERT_EQ(lod[1], 1);
  sl_sample_release(out);
  expect_eof(b);
  sl_reader_destroy(b);
  sl_schema_release(s);
}

TEST(ragged_all_empty) {
  int64_t var = SL_DIM_VAR, l0 = 0;
  sl_schema *s = schema1("tok", SL_I32, 1, &var);
  sl_sample *smp[2] = {sample_with(s, 1, &l0, NULL, 0),
                       sample_with(s, 1, &l0, NULL, 0)};
  sl_reader *b = batch_over(smp, 2, s, 2, 0, 0);
  sl_sample *out = NULL;
  ASSERT_OK(sl_reader_next(b, &out));
  const sl_tensor *t = sl_sample_at_const(out, 0);
  ASSERT_EQ(t->shape[0], 0);
  ASSERT_EQ(t->nbytes, 0);
  int64_t len = 0;
  const int64_t *lod = sl_tensor_lod(t, &len);
  ASSERT_EQ(len, 3);
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(lod[i], 0);
  sl_sample_release(out);
  sl_reader_destroy(b);
  sl_schema_release(s);
}

TEST(ragged_trailing_dims) {
  int64_t v2[2] = {SL_DIM_VAR, 2};
  sl_schema *s = schema1("pts", SL_F64, 2, v2);
  const double a[] = {0.5, 1.5}, c[] = {2.5, 3.5, 4.5, 5.5, 6.5, 7.5};
  int64_t sa[2] = {1, 2}, sc[2] = {3, 2};
  sl_sample *smp[2] = {sample_with(s, 2, sa, a, sizeof a),
                       sample_with(s, 2, sc, c, sizeof c)};
  sl_reader *b = batch_over(smp, 2, s, 2, 0, 0);
  sl_sample *out = NULL;
  ASSERT_OK(sl_reader_next(b, &out));
  const sl_tensor *t = sl_sample_field(out, "pts");
  ASSERT_EQ(t->rank, 2);
  ASSERT_EQ(t->shape[0], 4);
  ASSERT_EQ(t->shape[1], 2);
  const double *v = t->data;
  for (int i = 0; i < 8; i++)
    ASSERT_TRUE(v[i] == 0.5 + i);
  int64_t len = 0;
  const int64_t *lod = sl_tensor_lod(t, &len);
  ASSERT_EQ(len, 3);
  ASSERT_EQ(lod[0], 0);
  ASSERT_EQ(lod[1], 1);
  ASSERT_EQ(lod[2], 4);
  sl_sample_release(out);
  expect_eof(b);
  sl_reader_destroy(b);
  sl_schema_release(s);
}

TEST(ragged_trailing_mismatch) {
  /* Both dims variable in the schema, so the array reader accepts the
   * samples (LoD or pad asked for: a variable dim 1); within one batch only
   * dim 0 may differ. */
  int64_t vv[2] = {SL_DIM_VAR, SL_DIM_VAR};
  sl_schema *s = schema1("seq", SL_I32, 2, vv);
  const int32_t z[6] = {0};
  int64_t s22[2] = {2, 2}, s13[2] = {1, 3};
  for (int pad = 1; pad <= LOD; pad++) {
    sl_sample *smp[2] = {sample_with(s, 2, s22, z, 4 * sizeof(int32_t)),
                         sample_with(s, 2, s13, z, 3 * sizeof(int32_t))};
    sl_reader *b = batch_over(smp, 2, s, 2, 0, pad);
    sl_sample *out = NULL;
    ASSERT_RC(sl_reader_next(b, &out), SL_ESHAPE);
    ASSERT_NULL(out);
    ASSERT_CONTAINS(sl_last_error(), "batch: sample 1 of batch 0");
    ASSERT_CONTAINS(sl_last_error(), "field 'seq'");
    ASSERT_CONTAINS(sl_last_error(), "i32[1,3]");
    ASSERT_CONTAINS(sl_last_error(), "i32[2,2]");
    sl_reader_destroy(b);
  }
  /* The same samples in separate batches are fine: [2,2] then [1,3]. */
  sl_sample *smp[2] = {sample_with(s, 2, s22, z, 4 * sizeof(int32_t)),
                       sample_with(s, 2, s13, z, 3 * sizeof(int32_t))};
  sl_reader *b = batch_over(smp, 2, s, 1, 0, LOD);
  sl_sample *out = NULL;
  ASSERT_OK(sl_reader_next(b, &out));
  ASSERT_EQ(sl_sample_at(out, 0)->shape[1], 2);
  sl_sample_release(out);
  ASSERT_OK(sl_reader_next(b, &out));
  ASSERT_EQ(sl_sample_at(out, 0)->shape[1], 3);
  sl_sample_release(out);
  sl_reader_destroy(b);
  sl_schema_release(s);
}

TEST(ragged_fixed_trailing_dim_wrong) {
  /* Schema [-1, 2], a sample [2, 3] from a reader that lies about it. */
  int64_t v2[2] = {SL_DIM_VAR, 2}, v3[2] = {SL_DIM_VAR, 3}, s23[2] = {2, 3};
  sl_schema *decl = schema1("pts", SL_I32, 2, v2);
  sl_schema *actual = schema1("pts", SL_I32, 2, v3);
  const int32_t z[6] = {0};
  sl_sample *pool[1] = {sample_with(actual, 2, s23, z, sizeof z)};
  fake f = {pool, 1, 0, (size_t)-1, 0, 0};
  sl_reader *b = NULL;
  ASSERT_OK(sl_batch(fake_reader(&f, decl), 4, NULL, &b));
  sl_sample *out = NULL;
  ASSERT_RC(sl_reader_next(b, &out), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "field 'pts'");
  ASSERT_CONTAINS(sl_last_error(), "i32[-1,2]");
  ASSERT_CONTAINS(sl_last_error(), "i32[2,3]");
  sl_reader_destroy(b);
  ASSERT_EQ(sl_sample_refcount(pool[0]), 1);
  sl_sample_release(pool[0]);
  sl_schema_release(decl);
  sl_schema_release(actual);
}

TEST(bytes_field_lod) {
  int64_t var = SL_DIM_VAR;
  sl_schema *s = schema1("raw", SL_BYTES, 1, &var);
  int64_t l2 = 2, l0 = 0, l3 = 3;
  sl_sample *smp[3] = {sample_with(s, 1, &l2, "ab", 2),
                       sample_with(s, 1, &l0, NULL, 0),
                       sample_with(s, 1, &l3, "xyz", 3)};
  sl_reader *b = batch_over(smp, 3, s, 3, 0, 0);
  sl_sample *out = NULL;
  ASSERT_OK(sl_reader_next(b, &out));
  const sl_tensor *t = sl_sample_field(out, "raw");
  ASSERT_EQ(t->dtype, SL_BYTES);
  ASSERT_EQ(t->rank, 1);
  ASSERT_EQ(t->shape[0], 5);
  ASSERT_EQ(t->nbytes, 5);
  ASSERT_TRUE(memcmp(t->data, "abxyz", 5) == 0);
  int64_t len = 0;
  const int64_t *lod = sl_tensor_lod(t, &len);
  ASSERT_EQ(len, 4);
  ASSERT_EQ(lod[0], 0);
  ASSERT_EQ(lod[1], 2);
  ASSERT_EQ(lod[2], 2);
  ASSERT_EQ(lod[3], 5);
  ASSERT_EQ((uintptr_t)lod % 8, 0);
  sl_sample_release(out);
  expect_eof(b);
  sl_reader_destroy(b);
  sl_schema_release(s);
}

TEST(nested_lod_unsupported) {
  int64_t var = SL_DIM_VAR;
  sl_schema *s = schema1("tok", SL_I32, 1, &var);
  sl_sample *smp = sl_sample_new(s);
  ASSERT_NOT_NULL(smp);
  sl_tensor t;
  int64_t four = 4;
  ASSERT_OK(sl_tensor_alloc(&t, SL_I32, 1, &four));
  memset(t.data, 0, t.nbytes);
  sl_buffer *lb = sl_buffer_new(3 * sizeof(int64_t));
  int64_t *lod = sl_buffer_data(lb);
  lod[0] = 0;
  lod[1] = 1;
  lod[2] = 4;
  ASSERT_OK(sl_tensor_set_lod(&t, lb, lod, 3));
  sl_buffer_release(lb);
  ASSERT_OK(sl_sample_set_move(smp, 0, &t));
  sl_sample *arr[1] = {smp};
  sl_reader *b = batch_over(arr, 1, s, 2, 0, 0);
  sl_sample *out = NULL;
  ASSERT_RC(sl_reader_next(b, &out), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(),
                  "batch: field 'tok' already has LoD; nested LoD is not "
                  "supported");
  sl_reader_destroy(b);
  sl_schema_release(s);
}

/* --- pad mode ------------------------------------------------------------- */

TEST(pad_values_and_lengths) {
  sl_schema *s = sl_schema_new();
  int64_t var = SL_DIM_VAR;
  ASSERT_OK(sl_schema_add(s, "tok", SL_I32, 1, &var));
  ASSERT_OK(sl_schema_add(s, "label", SL_I64, 0, NULL));
  /* lengths 2, 0, 3 */
  const int32_t vals[3][3] = {{1, 2}, {0}, {3, 4, 5}};
  const int64_t lens[3] = {2, 0, 3};
  sl_sample *smp[3];
  for (int k = 0; k < 3; k++) {
    smp[k] = sl_sample_new(s);
    void *d;
    ASSERT_OK(sl_sample_alloc(smp[k], 0, 1, &lens[k], &d));
    if (lens[k]) memcpy(d, vals[k], (size_t)lens[k] * sizeof(int32_t));
    ASSERT_OK(sl_sample_alloc(smp[k], 1, 0, NULL, &d));
    *(int64_t *)d = 7 + k;
  }
  sl_reader *b = batch_over(smp, 3, s, 3, 0, 1);
  sl_sample *out = NULL;
  ASSERT_OK(sl_reader_next(b, &out));
  ASSERT_EQ(sl_sample_nfields(out), 3);

  ASSERT_EQ(sl_sample_index(out, "tok"), 0);
  const sl_tensor *t = sl_sample_field(out, "tok");
  ASSERT_EQ(t->dtype, SL_I32);
  ASSERT_EQ(t->rank, 2);
  ASSERT_EQ(t->shape[0], 3);
  ASSERT_EQ(t->shape[1], 3);
  ASSERT_NULL(t->lod);
  const int32_t *v = t->data;
  const int32_t want[9] = {1, 2, 0, 0, 0, 0, 3, 4, 5};
  for (int i = 0; i < 9; i++)
    ASSERT_EQ(v[i], want[i]);

  ASSERT_EQ(sl_sample_index(out, "tok_len"), 1);
  const sl_tensor *l = sl_sample_field(out, "tok_len");
  ASSERT_EQ(l->dtype, SL_I64);
  ASSERT_EQ(l->rank, 1);
  ASSERT_EQ(l->shape[0], 3);
  for (int k = 0; k < 3; k++)
    ASSERT_EQ(((const int64_t *)l->data)[k], lens[k]);

  ASSERT_EQ(sl_sample_index(out, "label"), 2);
  const sl_tensor *y = sl_sample_field(out, "label");
  ASSERT_EQ(y->shape[0], 3);
  for (int k = 0; k < 3; k++)
    ASSERT_EQ(((const int64_t *)y->data)[k], 7 + k);
  sl_sample_release(out);
  expect_eof(b);
  sl_reader_destroy(b);
  sl_schema_release(s);
}

TEST(pad_trailing_dims_zero_fill) {
  /* The padding must be zeros even where the allocator hands back dirty
   * memory: run several batches so buffers get reused. */
  int64_t v2[2] = {SL_DIM_VAR, 2};
  sl_schema *s = schema1("pts", SL_F32, 2, v2);
  const float a[] = {1, 2, 3, 4, 5, 6}, c[] = {7, 8};
  int64_t sa[2] = {3, 2}, sc[2] = {1, 2};
  sl_sample *smp[4] = {
      sample_with(s, 2, sa, a, sizeof a), sample_with(s, 2, sc, c, sizeof c),
      sample_with(s, 2, sc, c, sizeof c), sample_with(s, 2, sa, a, sizeof a)};
  sl_reader *b = batch_over(smp, 4, s, 2, 1, 1);
  for (int pass = 0; pass < 3; pass++) {
    sl_sample *out = NULL;
    for (int bi = 0; bi < 2; bi++) {
      ASSERT_OK(sl_reader_next(b, &out));
      const sl_tensor *t = sl_sample_field(out, "pts");
      ASSERT_EQ(t->rank, 3);
      ASSERT_EQ(t->shape[0], 2);
      ASSERT_EQ(t->shape[1], 3);
      ASSERT_EQ(t->shape[2], 2);
      const float *v = t->data;
      /* batch 0: {a, c+pad}; batch 1: {c+pad, a} */
      const float *rowa = bi == 0 ? v : v + 6, *rowc = bi == 0 ? v + 6 : v;
      for (int i = 0; i < 6; i++)
        ASSERT_TRUE(rowa[i] == a[i]);
      ASSERT_TRUE(rowc[0] == 7 && rowc[1] == 8);
      for (int i = 2; i < 6; i++)
        ASSERT_TRUE(rowc[i] == 0.0f);
      const int64_t *len = sl_sample_field(out, "pts_len")->data;
      ASSERT_EQ(len[bi == 0 ? 0 : 1], 3);
      ASSERT_EQ(len[bi == 0 ? 1 : 0], 1);
      sl_sample_release(out);
    }
    expect_eof(b);
    ASSERT_OK(sl_reader_reset(b));
  }
  sl_reader_destroy(b);
  sl_schema_release(s);
}

TEST(pad_zero_fill_reused_memory) {
  /* Padding must be written as zeros, not inherited from the allocator:
   * batch 1, smaller than batch 0 by a quarter, reuses batch 0's buffer
   * from the reader's pool, all non-zero memory. */
  enum { L = 400, M = 300 };
  int64_t var = SL_DIM_VAR, lfull = L, lmid = M, lone = 1;
  sl_schema *s = schema1("v", SL_F32, 1, &var);
  float full[L];
  for (int i = 0; i < L; i++)
    full[i] = (float)(i + 1);
  sl_sample *smp[4] = {sample_with(s, 1, &lfull, full, sizeof full),
                       sample_with(s, 1, &lfull, full, sizeof full),
                       sample_with(s, 1, &lmid, full, M * sizeof(float)),
                       sample_with(s, 1, &lone, full, sizeof(float))};
  sl_reader *b = batch_over(smp, 4, s, 2, 0, 1);
  for (int pass = 0; pass < 2; pass++) {
    sl_sample *out = NULL;
    ASSERT_OK(sl_reader_next(b, &out));
    ASSERT_EQ(sl_sample_field(out, "v")->shape[1], L);
    sl_sample_release(out);
    ASSERT_OK(sl_reader_next(b, &out));
    const sl_tensor *t = sl_sample_field(out, "v");
    ASSERT_EQ(t->shape[1], M);
    const float *v = t->data;
    for (int i = 0; i < M; i++)
      ASSERT_TRUE(v[i] == (float)(i + 1));
    ASSERT_TRUE(v[M] == 1.0f);
    for (int i = M + 1; i < 2 * M; i++)
      if (v[i] != 0.0f) ASSERT_EQ(i, -1); /* names the first dirty index */
    const int64_t *len = sl_sample_field(out, "v_len")->data;
    ASSERT_EQ(len[0], M);
    ASSERT_EQ(len[1], 1);
    sl_sample_release(out);
    expect_eof(b);
    ASSERT_OK(sl_reader_reset(b));
  }
  sl_reader_destroy(b);
  sl_schema_release(s);
}

TEST(pad_bytes_field) {
  int64_t var = SL_DIM_VAR;
  sl_schema *s = schema1("raw", SL_BYTES, 1, &var);
  int64_t l1 = 1, l3 = 3;
  sl_sample *smp[2] = {sample_with(s, 1, &l1, "q", 1),
                       sample_with(s, 1, &l3, "xyz", 3)};
  sl_reader *b = batch_over(smp, 2, s, 2, 0, 1);
  sl_sample *out = NULL;
  ASSERT_OK(sl_reader_next(b, &out));
  const sl_tensor *t = sl_sample_field(out, "raw");
  ASSERT_EQ(t->shape[0], 2);
  ASSERT_EQ(t->shape[1], 3);
  ASSERT_TRUE(memcmp(t->data, "q\0\0xyz", 6) == 0);
  const int64_t *len = sl_sample_field(out, "raw_len")->data;
  ASSERT_EQ(len[0], 1);
  ASSERT_EQ(len[1], 3);
  sl_sample_release(out);
  sl_reader_destroy(b);
  sl_schema_release(s);
}

TEST(pad_name_collision) {
  sl_schema *s = sl_schema_new();
  int64_t var = SL_DIM_VAR;
  ASSERT_OK(sl_schema_add(s, "x", SL_I32, 1, &var));
  ASSERT_OK(sl_schema_add(s, "x_len", SL_I64, 0, NULL));
  sl_reader *r = NULL, *b = NULL;
  ASSERT_OK(sl_reader_from_array(NULL, 0, s, &r));
  sl_batch_opts pad = {.pad = 1};
  ASSERT_RC(sl_batch(r, 2, &pad, &b), SL_EINVAL);
  ASSERT_NULL(b);
  ASSERT_CONTAINS(sl_last_error(), "batch:");
  ASSERT_CONTAINS(sl_last_error(), "upstream already has a field 'x_len'");
  /* Without pad there is nothing to collide with. */
  ASSERT_OK(sl_reader_from_array(NULL, 0, s, &r));
  ASSERT_OK(sl_batch(r, 2, NULL, &b));
  sl_reader_destroy(b);
  sl_schema_release(s);
}

/* --- per-sample checks ---------------------------------------------------- */

TEST(fixed_wrong_shape) {
  int64_t three = 3, four = 4;
  sl_schema *decl = schema1("x", SL_F32, 1, &three);
  sl_schema *other = schema1("x", SL_F32, 1, &four);
  const float z[4] = {0};
  sl_sample *pool[2] = {sample_with(decl, 1, &three, z, 3 * sizeof(float)),
                        sample_with(other, 1, &four, z, sizeof z)};
  fake f = {pool, 2, 0, (size_t)-1, 0, 0};
  sl_reader *b = NULL;
  ASSERT_OK(sl_batch(fake_reader(&f, decl), 2, NULL, &b));
  sl_sample *out = NULL;
  ASSERT_RC(sl_reader_next(b, &out), SL_ESHAPE);
  ASSERT_NULL(out);
  ASSERT_CONTAINS(sl_last_error(), "batch: sample 1 of batch 0");
  ASSERT_CONTAINS(sl_last_error(), "field 'x'");
  ASSERT_CONTAINS(sl_last_error(), "expected f32[3]");
  ASSERT_CONTAINS(sl_last_error(), "got f32[4]");
  /* the good sample collected before was released */
  ASSERT_EQ(sl_sample_refcount(pool[0]), 1);
  ASSERT_EQ(sl_sample_refcount(pool[1]), 1);
  sl_reader_destroy(b);
  for (int k = 0; k < 2; k++)
    sl_sample_release(pool[k]);
  sl_schema_release(decl);
  sl_schema_release(other);
}

TEST(wrong_dtype) {
  int64_t three = 3;
  sl_schema *decl = schema1("x", SL_F32, 1, &three);
  sl_schema *other = schema1("x", SL_I32, 1, &three);
  const int32_t z[3] = {0};
  /* a good first batch, then the bad sample starts batch 1 */
  sl_sample *pool[3] = {sample_with(decl, 1, &three, z, sizeof z),
                        sample_with(decl, 1, &three, z, sizeof z),
                        sample_with(other, 1, &three, z, sizeof z)};
  fake f = {pool, 3, 0, (size_t)-1, 0, 0};
  sl_reader *b = NULL;
  ASSERT_OK(sl_batch(fake_reader(&f, decl), 2, NULL, &b));
  sl_sample *out = NULL;
  ASSERT_OK(sl_reader_next(b, &out));
  sl_sample_release(out);
  ASSERT_RC(sl_reader_next(b, &out), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "batch: sample 0 of batch 1");
  ASSERT_CONTAINS(sl_last_error(), "field 'x'");
  ASSERT_CONTAINS(sl_last_error(), "expected f32[3]");
  ASSERT_CONTAINS(sl_last_error(), "got i32[3]");
  sl_reader_destroy(b);
  for (int k = 0; k < 3; k++)
    sl_sample_release(pool[k]);
  sl_schema_release(decl);
  sl_schema_release(other);
}

TEST(wrong_field_count) {
  int64_t three = 3;
  sl_schema *decl = xy_schema();
  sl_schema *other = schema1("x", SL_F32, 1, &three);
  const float z[3] = {0};
  sl_sample *pool[1] = {sample_with(other, 1, &three, z, sizeof z)};
  fake f = {pool, 1, 0, (size_t)-1, 0, 0};
  sl_reader *b = NULL;
  ASSERT_OK(sl_batch(fake_reader(&f, decl), 2, NULL, &b));
  sl_sample *out = NULL;
  ASSERT_RC(sl_reader_next(b, &out), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "batch: sample 0 of batch 0");
  ASSERT_CONTAINS(sl_last_error(), "1 field");
  sl_reader_destroy(b);
  sl_sample_release(pool[0]);
  sl_schema_release(decl);
  sl_schema_release(other);
}

/* --- errors, reset -------------------------------------------------------- */

TEST(upstream_error_passes_through) {
  sl_schema *s = xy_schema();
  sl_sample *pool[4];
  for (int k = 0; k < 4; k++)
    pool[k] = xy_sample(s, k);
  fake f = {pool, 4, 0, 2, SL_EIO, 0};
  sl_reader *b = NULL;
  ASSERT_OK(sl_batch(fake_reader(&f, s), 4, NULL, &b));
  sl_sample *out = NULL;
  ASSERT_RC(sl_reader_next(b, &out), SL_EIO);
  ASSERT_NULL(out);
  ASSERT_STREQ(sl_last_error(), "fake: disk on fire at record 2");
  /* the two samples consumed into the failed batch were released */
  for (int k = 0; k < 4; k++)
    ASSERT_EQ(sl_sample_refcount(pool[k]), 1);
  int calls = f.calls;
  ASSERT_EQ(calls, 3);

  /* sticky: same code and message, upstream not pulled again */
  sl_clear_error();
  ASSERT_RC(sl_reader_next(b, &out), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "fake: disk on fire at record 2");
  ASSERT_RC(sl_reader_has_next(b), SL_EIO);
  ASSERT_EQ(f.calls, calls);

  /* reset clears it; a healthy upstream then batches normally */
  f.fail_at = (size_t)-1;
  ASSERT_OK(sl_reader_reset(b));
  ASSERT_OK(sl_reader_next(b, &out));
  check_xy_batch(out, 0, 4);
  sl_sample_release(out);
  expect_eof(b);
  sl_reader_destroy(b);
  for (int k = 0; k < 4; k++)
    ASSERT_EQ(sl_sample_refcount(pool[k]), 1);
  for (int k = 0; k < 4; k++)
    sl_sample_release(pool[k]);
  sl_schema_release(s);
}

TEST(upstream_error_at_batch_start) {
  /* An error with nothing collected is still the error, not EOF. */
  sl_schema *s = xy_schema();
  sl_sample *pool[2] = {xy_sample(s, 0), xy_sample(s, 1)};
  fake f = {pool, 2, 0, 2, SL_ECORRUPT, 0};
  sl_reader *b = NULL;
  ASSERT_OK(sl_batch(fake_reader(&f, s), 2, NULL, &b));
  expect_xy(b, 0, 2);
  sl_sample *out = NULL;
  ASSERT_RC(sl_reader_next(b, &out), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), "fake: disk on fire at record 2");
  sl_reader_destroy(b);
  for (int k = 0; k < 2; k++)
    sl_sample_release(pool[k]);
  sl_schema_release(s);
}

TEST(reset_mid_pass) {
  sl_reader *b = xy_batch(5, 2, 0);
  expect_xy(b, 0, 2);
  ASSERT_OK(sl_reader_reset(b));
  expect_xy(b, 0, 2);
  expect_xy(b, 2, 2);
  ASSERT_EQ(sl_reader_has_next(b), 1); /* peeks the partial batch */
  ASSERT_OK(sl_reader_reset(b));       /* drops the peeked batch */
  expect_xy(b, 0, 2);
  expect_xy(b, 2, 2);
  expect_xy(b, 4, 1);
  expect_eof(b);
  ASSERT_OK(sl_reader_reset(b)); /* a second full pass */
  expect_xy(b, 0, 2);
  expect_xy(b, 2, 2);
  expect_xy(b, 4, 1);
  expect_eof(b);
  sl_reader_destroy(b);
}

TEST(reset_error_forwarded) {
  sl_schema *s = xy_schema();
  sl_sample *pool[1] = {xy_sample(s, 0)};
  fake f = {pool, 1, 0, (size_t)-1, 0, 0};
  sl_reader *up = sl_reader_new(&fake_noreset_vt, &f, s);
  ASSERT_NOT_NULL(up);
  sl_reader *b = NULL;
  ASSERT_OK(sl_batch(up, 2, NULL, &b));
  expect_xy(b, 0, 1);
  ASSERT_RC(sl_reader_reset(b), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "fake: this reader cannot be reset");
  sl_reader_destroy(b);
  sl_sample_release(pool[0]);
  sl_schema_release(s);
}

TEST(bad_arguments) {
  sl_reader *b = (sl_reader *)1;
  ASSERT_RC(sl_batch(NULL, 2, NULL, &b), SL_EINVAL);
  ASSERT_NULL(b);
  ASSERT_CONTAINS(sl_last_error(), "batch");

  /* n == 0: the upstream is taken (and destroyed: ASan would see a leak) */
  b = (sl_reader *)1;
  ASSERT_RC(sl_batch(xy_reader(2), 0, NULL, &b), SL_EINVAL);
  ASSERT_NULL(b);
  ASSERT_STREQ(sl_last_error(), "batch: batch size must be >= 1");

  ASSERT_RC(sl_batch(xy_reader(2), 2, NULL, NULL), SL_EINVAL);
  ASSERT_RC(sl_batch(xy_reader(2), SIZE_MAX, NULL, &b), SL_EINVAL);
  ASSERT_NULL(b);
  ASSERT_CONTAINS(sl_last_error(), "batch");
}

/* --- allocation failures -------------------------------------------------- */

/* The library's fault-injection hook (core/internal.h); tests link the static
 * library, where it is visible. */
long sl__alloc_fail_after(long n);

TEST(allocation_failures) {
  /* Fail the k-th allocation for every k, in construction and in every
   * batch: each run ends in SL_ENOMEM or a full pass, and never leaks
   * (ASan) or crashes. */
  sl_schema *s = sl_schema_new();
  int64_t three = 3, var = SL_DIM_VAR;
  ASSERT_OK(sl_schema_add(s, "x", SL_F32, 1, &three));
  ASSERT_OK(sl_schema_add(s, "tok", SL_I32, 1, &var));
  ASSERT_OK(sl_schema_add(s, "raw", SL_BYTES, 1, &var));
  ASSERT_OK(sl_schema_set_meta(s, "k", "v"));
  sl_sample *smp[3];
  for (int k = 0; k < 3; k++) {
    smp[k] = sl_sample_new(s);
    int64_t len = k + 1;
    void *d;
    ASSERT_OK(sl_sample_alloc(smp[k], 0, 1, &three, &d));
    memset(d, 0, 3 * sizeof(float));
    ASSERT_OK(sl_sample_alloc(smp[k], 1, 1, &len, &d));
    memset(d, 0, (size_t)len * sizeof(int32_t));
    ASSERT_OK(sl_sample_alloc(smp[k], 2, 1, &len, &d));
    memset(d, 'a', (size_t)len);
  }
  for (int pad = 0; pad < 2; pad++) {
    int completed = 0;
    for (long k = 0; k < 1000 && !completed; k++) {
      sl_reader *r = NULL;
      ASSERT_OK(sl_reader_from_array(smp, 3, s, &r));
      sl_batch_opts o = {.pad = pad};
      sl_reader *b = NULL;
      sl__alloc_fail_after(k);
      int rc = sl_batch(r, 2, &o, &b);
      int batches = 0;
      if (rc == SL_OK) {
        sl_sample *out = NULL;
        while ((rc = sl_reader_next(b, &out)) == SL_OK) {
          batches++;
          sl_sample_release(out);
        }
      }
      long made = sl__alloc_fail_after(-1);
      sl_reader_destroy(b);
      if (rc == SL_EOF) {
        ASSERT_EQ(batches, 2);
        completed = made <= k; /* no allocation was refused: done */
      } else {
        ASSERT_RC(rc, SL_ENOMEM);
        ASSERT_TRUE(sl_last_error()[0] != '\0');
      }
    }
    ASSERT_TRUE(completed);
  }
  for (int k = 0; k < 3; k++) {
    ASSERT_EQ(sl_sample_refcount(smp[k]), 1);
    sl_sample_release(smp[k]);
  }
  sl_schema_release(s);
}

/* --- variable dimensions after the first (issue 13 item 21) ----------------
 * Images of unknown size, u8[-1,-1,-1]: concatenating them along dim 0 (LoD)
 * used to turn 4 images of 40x40 into one 160x40 image without a word.
 * Such a field is refused unless LoD (lod) or padding (pad) is asked for;
 * a variable leading dimension alone (ragged sequences) merges as before. */

/* Four 40x40x3 u8 images (image k filled with k + 1) in {image:
 * u8[-1,-1,-1]}, batched by 4 with `o`; *rc receives sl_batch's code. */
static sl_reader *images_batched(const sl_batch_opts *o, int *rc) {
  int64_t var3[3] = {SL_DIM_VAR, SL_DIM_VAR, SL_DIM_VAR};
  sl_schema *s = schema1("image", SL_U8, 3, var3);
  int64_t shape[3] = {40, 40, 3};
  uint8_t px[40 * 40 * 3];
  sl_sample *smp[4];
  for (int k = 0; k < 4; k++) {
    memset(px, k + 1, sizeof px);
    smp[k] = sample_with(s, 3, shape, px, sizeof px);
  }
  sl_reader *r = NULL, *b = (sl_reader *)1;
  ASSERT_OK(sl_reader_from_array(smp, 4, s, &r));
  for (int k = 0; k < 4; k++)
    sl_sample_release(smp[k]);
  sl_schema_release(s);
  *rc = sl_batch(r, 4, o, &b);
  if (*rc < 0) ASSERT_NULL(b);
  return b;
}

TEST(variable_inner_dims_are_refused_unless_lod_or_pad) {
  int rc;
  /* Refused at construction, naming the field, its shape and the options
   * (upstream destroyed with the failed stage). */
  ASSERT_NULL(images_batched(NULL, &rc));
  ASSERT_RC(rc, SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "batch: field 'image' is u8[-1,-1,-1]");
  ASSERT_CONTAINS(sl_last_error(), "lod = true");
  ASSERT_CONTAINS(sl_last_error(), "pad = true");
  sl_batch_opts o = {0};
  o.drop_last = 1;
  ASSERT_NULL(images_batched(&o, &rc));
  ASSERT_RC(rc, SL_EINVAL);

  /* lod: today's LoD merge, asked for: 160x40x3 with offsets 0,40,..160. */
  o = (sl_batch_opts){0};
  o.lod = 1;
  sl_reader *b = images_batched(&o, &rc);
  ASSERT_OK(rc);
  char desc[128];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(b), desc, sizeof desc),
               "{image: u8[-1,-1,-1]}");
  sl_sample *out;
  ASSERT_OK(sl_reader_next(b, &out));
  const sl_tensor *t = sl_sample_at_const(out, 0);
  ASSERT_EQ(t->rank, 3);
  ASSERT_EQ(t->shape[0], 160);
  ASSERT_EQ(t->shape[1], 40);
  ASSERT_EQ(t->shape[2], 3);
  ASSERT_EQ(t->lod_len, 5);
  for (int k = 0; k <= 4; k++)
    ASSERT_EQ(t->lod[k], 40 * k);
  for (int k = 0; k < 4; k++)
    ASSERT_EQ(((const uint8_t *)t->data)[(size_t)k * 40 * 40 * 3], k + 1);
  sl_sample_release(out);
  expect_eof(b);
  sl_reader_destroy(b);

  /* pad: [4, 40, 40, 3] and image_len. */
  o = (sl_batch_opts){0};
  o.pad = 1;
  b = images_batched(&o, &rc);
  ASSERT_OK(rc);
  ASSERT_OK(sl_reader_next(b, &out));
  t = sl_sample_at_const(out, 0);
  ASSERT_EQ(t->rank, 4);
  ASSERT_EQ(t->shape[0], 4);
  ASSERT_EQ(t->shape[1], 40);
  ASSERT_NULL(t->lod);
  ASSERT_EQ(((const int64_t *)sl_sample_field(out, "image_len")->data)[3], 40);
  sl_sample_release(out);
  sl_reader_destroy(b);

  /* Both: they exclude each other. */
  o.lod = 1;
  ASSERT_NULL(images_batched(&o, &rc));
  ASSERT_RC(rc, SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "lod and pad");
}

TEST(variable_leading_dim_alone_still_merges_with_lod) {
  /* Ragged token lists i32[-1] and rows f32[-1, 2]: LoD without asking. */
  int64_t var = SL_DIM_VAR;
  sl_schema *s = schema1("ids", SL_I32, 1, &var);
  int32_t v[3] = {1, 2, 3};
  int64_t n2 = 2, n1 = 1;
  sl_sample *smp[2] = {sample_with(s, 1, &n2, v, 8),
                       sample_with(s, 1, &n1, v + 2, 4)};
  sl_reader *b = batch_over(smp, 2, s, 2, 0, 0);
  sl_sample *out;
  ASSERT_OK(sl_reader_next(b, &out));
  const sl_tensor *t = sl_sample_at_const(out, 0);
  ASSERT_EQ(t->shape[0], 3);
  ASSERT_EQ(t->lod_len, 3);
  ASSERT_EQ(t->lod[1], 2);
  ASSERT_EQ(((const int32_t *)t->data)[2], 3);
  sl_sample_release(out);
  sl_reader_destroy(b);
  sl_schema_release(s);

  int64_t rows[2] = {SL_DIM_VAR, 2};
  s = schema1("rows", SL_F32, 2, rows);
  float f[4] = {1, 2, 3, 4};
  int64_t sh1[2] = {1, 2}, sh2[2] = {1, 2};
  sl_sample *smp2[2] = {sample_with(s, 2, sh1, f, 8),
                        sample_with(s, 2, sh2, f + 2, 8)};
  b = batch_over(smp2, 2, s, 2, 0, 0);
  ASSERT_OK(sl_reader_next(b, &out));
  ASSERT_EQ(sl_sample_at_const(out, 0)->shape[0], 2);
  ASSERT_EQ(sl_sample_at_const(out, 0)->lod_len, 3);
  sl_sample_release(out);
  sl_reader_destroy(b);
  sl_schema_release(s);
}
