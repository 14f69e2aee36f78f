/* test_core.c - errors, dtypes, buffers, tensors, schemas and samples. */
#include "test.h"

#include "core/internal.h"

#include <pthread.h>

TEST(error_names_and_descriptions) {
  ASSERT_STREQ(sl_err_name(SL_OK), "SL_OK");
  ASSERT_STREQ(sl_err_name(SL_EOF), "SL_EOF");
  ASSERT_STREQ(sl_err_name(SL_EINVAL), "SL_EINVAL");
  ASSERT_STREQ(sl_err_name(SL_ECUDA), "SL_ECUDA");
  ASSERT_STREQ(sl_err_name(-999), "SL_UNKNOWN");
  ASSERT_STREQ(sl_strerror(SL_ECORRUPT), "corrupt data");
  ASSERT_STREQ(sl_strerror(12345), "unknown error");
  /* Every code the issue names exists and is negative except OK. */
  int codes[] = {SL_EOF,          SL_ENOMEM, SL_EINVAL,  SL_EIO,
                 SL_ECORRUPT,     SL_ESHAPE, SL_ECLOSED, SL_EKILLED,
                 SL_EUNSUPPORTED, SL_ELUA,   SL_ECUDA};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    ASSERT_TRUE(codes[i] < 0);
    ASSERT_TRUE(strcmp(sl_err_name(codes[i]), "SL_UNKNOWN") != 0);
  }
  ASSERT_EQ(SL_OK, 0);
}

TEST(error_detail_is_set_wrapped_and_cleared) {
  ASSERT_RC(sl_set_error(SL_EIO, "file %s: chunk %d", "a.slr", 3), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "file a.slr: chunk 3");
  ASSERT_EQ(sl_last_error_code(), SL_EIO);
  ASSERT_RC(sl_wrap_error(SL_EIO, "stage %s", "shuffle"), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "stage shuffle: file a.slr: chunk 3");
  sl_clear_error();
  ASSERT_STREQ(sl_last_error(), "");
  ASSERT_EQ(sl_last_error_code(), SL_OK);
  /* Wrapping an empty message names the code. */
  sl_wrap_error(SL_ENOMEM, "batch");
  ASSERT_STREQ(sl_last_error(), "batch: out of memory");
}

static void *other_thread_error(void *arg) {
  (void)arg;
  sl_set_error(SL_ECUDA, "other thread");
  return NULL;
}

TEST(error_detail_is_thread_local) {
  sl_set_error(SL_EIO, "mine");
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, other_thread_error, NULL), 0);
  pthread_join(t, NULL);
  ASSERT_STREQ(sl_last_error(), "mine");
}

TEST(long_error_messages_are_truncated_not_overflowed) {
  char big[4000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  sl_set_error(SL_EIO, "%s", big);
  ASSERT_EQ(strlen(sl_last_error()), 1023);
  sl_wrap_error(SL_EIO, "%s", big);
  ASSERT_EQ(strlen(sl_last_error()), 1023);
}

TEST(version) {
  ASSERT_STREQ(sl_version(), SL_VERSION_STRING);
  ASSERT_EQ(sl_version_number(), SL_VERSION_NUMBER);
}

TEST(dtype_sizes_and_names) {
  ASSERT_EQ(sl_dtype_size(SL_BOOL), 1);
  ASSERT_EQ(sl_dtype_size(SL_U16), 2);
  ASSERT_EQ(sl_dtype_size(SL_BF16), 2);
  ASSERT_EQ(sl_dtype_size(SL_F32), 4);
  ASSERT_EQ(sl_dtype_size(SL_I64), 8);
  ASSERT_EQ(sl_dtype_size(SL_BYTES), 1);
  ASSERT_EQ(sl_dtype_size(SL_DTYPE_INVALID), 0);
  ASSERT_EQ(sl_dtype_size((sl_dtype)99), 0);
  for (int d = 1; d < SL_DTYPE_COUNT; d++)
    ASSERT_EQ(sl_dtype_from_name(sl_dtype_name((sl_dtype)d)), d);
  ASSERT_EQ(sl_dtype_from_name("float"), SL_DTYPE_INVALID);
  ASSERT_EQ(sl_dtype_from_name(NULL), SL_DTYPE_INVALID);
  ASSERT_STREQ(sl_dtype_name((sl_dtype)99), "invalid");
}

static int g_freed;
static void count_free(void *ud, void *data) {
  ASSERT_PTR_EQ(ud, &g_freed);
  ASSERT_NOT_NULL(data);
  g_freed++;
}

TEST(buffers_are_aligned_refcounted_and_wrappable) {
  sl_buffer *b = sl_buffer_new(100);
  ASSERT_NOT_NULL(b);
  ASSERT_EQ((uintptr_t)sl_buffer_data(b) % 64, 0);
  ASSERT_EQ(sl_buffer_size(b), 100);
  sl_buffer_release(sl_buffer_retain(b));
  sl_buffer_release(b);
  sl_buffer *z = sl_buffer_new_zero(33);
  for (int i = 0; i < 33; i++)
    ASSERT_EQ(((unsigned char *)sl_buffer_data(z))[i], 0);
  sl_buffer_release(z);
  sl_buffer_release(NULL);

  static char storage[16];
  g_freed = 0;
  sl_buffer *w = sl_buffer_wrap(storage, sizeof storage, count_free, &g_freed);
  ASSERT_PTR_EQ(sl_buffer_data(w), storage);
  sl_buffer_retain(w);
  sl_buffer_release(w);
  ASSERT_EQ(g_freed, 0);
  sl_buffer_release(w);
  ASSERT_EQ(g_freed, 1);
  sl_buffer *e = sl_buffer_new(0);
  ASSERT_NOT_NULL(e);
  sl_buffer_release(e);
}

TEST(buffer_allocation_failure_is_enomem) {
  sl__alloc_fail_after(0);
  sl_buffer *b = sl_buffer_new(10);
  sl__alloc_fail_after(-1);
  ASSERT_NULL(b);
  ASSERT_EQ(sl_last_error_code(), SL_ENOMEM);
  ASSERT_CONTAINS(sl_last_error(), "buffer");
  ASSERT_NULL(sl_buffer_new(SIZE_MAX - 8));
  ASSERT_EQ(sl_last_error_code(), SL_ENOMEM);
}

TEST(tensor_alloc_view_and_describe) {
  sl_tensor t;
  int64_t shape[2] = {3, 4};
  ASSERT_OK(sl_tensor_alloc(&t, SL_F32, 2, shape));
  ASSERT_EQ(t.nbytes, 48);
  ASSERT_EQ(sl_tensor_numel(&t), 12);
  ASSERT_EQ(sl_tensor_rank(&t), 2);
  ASSERT_EQ(sl_tensor_shape(&t)[1], 4);
  ASSERT_EQ(sl_tensor_dtype(&t), SL_F32);
  char d[64];
  ASSERT_STREQ(sl_tensor_describe(&t, d, sizeof d), "f32[3,4]");
  /* A view of the second row shares the buffer. */
  sl_tensor row;
  int64_t rshape[1] = {4};
  ASSERT_OK(sl_tensor_view(&row, SL_F32, 1, rshape, t.buf, 16));
  ASSERT_PTR_EQ(row.data, (char *)t.data + 16);
  ASSERT_RC(sl_tensor_view(&row, SL_F32, 1, rshape, t.buf, 40), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "exceed the buffer");
  sl_tensor_clear(&row);
  sl_tensor_clear(&t);
  ASSERT_NULL(t.buf);
  sl_tensor_clear(NULL);
  sl_tensor s0;
  ASSERT_OK(sl_tensor_alloc(&s0, SL_I64, 0, NULL));
  ASSERT_EQ(s0.nbytes, 8);
  ASSERT_STREQ(sl_tensor_describe(&s0, d, sizeof d), "i64[]");
  sl_tensor_clear(&s0);
}

TEST(tensor_rejects_bad_layouts) {
  sl_tensor t;
  int64_t neg[1] = {-1};
  ASSERT_RC(sl_tensor_alloc(&t, SL_F32, 1, neg), SL_EINVAL);
  ASSERT_NULL(t.buf);
  int64_t big[2] = {INT64_MAX / 2, 4};
  ASSERT_RC(sl_tensor_alloc(&t, SL_F32, 2, big), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "overflow");
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  ASSERT_RC(sl_tensor_alloc(&t, SL_U8, 9, nine), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "rank 9");
  ASSERT_RC(sl_tensor_alloc(&t, SL_DTYPE_INVALID, 0, NULL), SL_EINVAL);
}

TEST(tensor_lod_is_validated) {
  sl_tensor t;
  int64_t shape[1] = {5};
  ASSERT_OK(sl_tensor_alloc(&t, SL_I32, 1, shape));
  sl_buffer *lb = sl_buffer_new(4 * sizeof(int64_t));
  int64_t *lod = sl_buffer_data(lb);
  lod[0] = 0, lod[1] = 2, lod[2] = 2, lod[3] = 5;
  ASSERT_OK(sl_tensor_set_lod(&t, lb, lod, 4));
  int64_t n;
  ASSERT_PTR_EQ(sl_tensor_lod(&t, &n), lod);
  ASSERT_EQ(n, 4);
  lod[3] = 4; /* no longer ends at shape[0] */
  ASSERT_RC(sl_tensor_set_lod(&t, lb, lod, 4), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "last offset 4");
  lod[3] = 5, lod[2] = 1; /* decreasing */
  ASSERT_RC(sl_tensor_set_lod(&t, lb, lod, 4), SL_EINVAL);
  lod[0] = 1;
  ASSERT_RC(sl_tensor_set_lod(&t, lb, lod, 4), SL_EINVAL);
  sl_buffer_release(lb);
  sl_tensor_clear(&t); /* releases the LoD buffer it retained */
}

static sl_schema *image_label_schema(void) {
  sl_schema *s = sl_schema_new();
  int64_t img[2] = {28, 28};
  ASSERT_EQ(sl_schema_add(s, "image", SL_U8, 2, img), 0);
  ASSERT_EQ(sl_schema_add(s, "label", SL_I64, 0, NULL), 1);
  return s;
}

TEST(schema_fields_lookup_and_describe) {
  sl_schema *s = image_label_schema();
  int64_t tok[1] = {SL_DIM_VAR};
  ASSERT_EQ(sl_schema_add(s, "tokens", SL_I32, 1, tok), 2);
  ASSERT_EQ(sl_schema_nfields(s), 3);
  ASSERT_EQ(sl_schema_find(s, "label"), 1);
  ASSERT_EQ(sl_schema_find(s, "nope"), -1);
  ASSERT_STREQ(sl_schema_field_name(s, 2), "tokens");
  ASSERT_EQ(sl_schema_field_dtype(s, 0), SL_U8);
  ASSERT_EQ(sl_schema_field_rank(s, 0), 2);
  ASSERT_EQ(sl_schema_field_shape(s, 0)[1], 28);
  ASSERT_EQ(sl_schema_field_is_var(s, 0), 0);
  ASSERT_EQ(sl_schema_field_is_var(s, 2), 1);
  ASSERT_NULL(sl_schema_field_name(s, 3));
  ASSERT_EQ(sl_schema_field_rank(s, -1), -1);
  char d[256];
  ASSERT_STREQ(sl_schema_describe(s, d, sizeof d),
               "{image: u8[28,28], label: i64[], tokens: i32[-1]}");
  sl_schema_release(s);
}

TEST(schema_rejects_bad_fields_and_freezes) {
  sl_schema *s = image_label_schema();
  ASSERT_RC(sl_schema_add(s, "label", SL_I32, 0, NULL), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "duplicate field 'label'");
  ASSERT_RC(sl_schema_add(s, "", SL_I32, 0, NULL), SL_EINVAL);
  ASSERT_RC(sl_schema_add(s, "x", SL_DTYPE_INVALID, 0, NULL), SL_EINVAL);
  int64_t bad[1] = {-5};
  ASSERT_RC(sl_schema_add(s, "x", SL_F32, 1, bad), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "dim 0 is -5");
  ASSERT_OK(sl_schema_set_meta(s, "classes", "a,b"));
  ASSERT_OK(sl_schema_set_meta(s, "classes", "c,d"));
  ASSERT_OK(sl_schema_set_meta(s, "source", "test"));
  ASSERT_STREQ(sl_schema_meta(s, "classes"), "c,d");
  ASSERT_EQ(sl_schema_meta_count(s), 2);
  const char *k, *v;
  ASSERT_OK(sl_schema_meta_at(s, 1, &k, &v));
  ASSERT_STREQ(k, "source");
  ASSERT_RC(sl_schema_meta_at(s, 2, &k, &v), SL_EINVAL);
  sl_schema *c = sl_schema_copy(s);
  ASSERT_TRUE(sl_schema_equal(s, c));
  ASSERT_STREQ(sl_schema_meta(c, "source"), "test");
  sl_schema_freeze(s);
  ASSERT_RC(sl_schema_add(s, "y", SL_F32, 0, NULL), SL_ESTATE);
  ASSERT_RC(sl_schema_set_meta(s, "k", "v"), SL_ESTATE);
  /* The copy is mutable again, and a different field list is not equal. */
  ASSERT_OK(sl_schema_add(c, "y", SL_F32, 0, NULL));
  ASSERT_TRUE(!sl_schema_equal(s, c));
  sl_schema_release(c);
  sl_schema_release(s);
}

TEST(schema_check_names_field_expected_and_actual) {
  sl_schema *s = image_label_schema();
  sl_tensor t;
  int64_t wrong[2] = {28, 27};
  ASSERT_OK(sl_tensor_alloc(&t, SL_U8, 2, wrong));
  ASSERT_RC(sl_schema_check(s, 0, &t), SL_ESHAPE);
  ASSERT_STREQ(sl_last_error(),
               "field 'image': expected u8[28,28], got u8[28,27]");
  sl_tensor_clear(&t);
  ASSERT_OK(sl_tensor_alloc(&t, SL_I32, 0, NULL));
  ASSERT_RC(sl_schema_check(s, 1, &t), SL_ESHAPE);
  ASSERT_STREQ(sl_last_error(), "field 'label': expected i64[], got i32[]");
  sl_tensor_clear(&t);
  sl_schema_release(s);
}

TEST(sample_fields_by_name_and_index) {
  sl_schema *s = image_label_schema();
  sl_sample *smp = sl_sample_new(s);
  sl_schema_release(s); /* the sample keeps its own reference */
  ASSERT_NOT_NULL(smp);
  ASSERT_EQ(sl_sample_nfields(smp), 2);
  int64_t img[2] = {28, 28};
  void *data;
  ASSERT_OK(sl_sample_alloc(smp, 0, 2, img, &data));
  memset(data, 7, 28 * 28);
  int64_t *lab;
  ASSERT_OK(sl_sample_alloc(smp, 1, 0, NULL, (void **)&lab));
  *lab = 3;
  const sl_tensor *t = sl_sample_field(smp, "label");
  ASSERT_NOT_NULL(t);
  ASSERT_EQ(*(int64_t *)t->data, 3);
  ASSERT_EQ(sl_sample_index(smp, "image"), 0);
  ASSERT_NULL(sl_sample_field(smp, "lable"));
  ASSERT_EQ(sl_last_error_code(), SL_ENOTFOUND);
  ASSERT_STREQ(sl_last_error(),
               "sample: no field 'lable' in {image: u8[28,28], label: i64[]}");
  ASSERT_EQ(sl_sample_nbytes(smp), 28 * 28 + 8);
  /* A wrong shape is refused and leaves the field as it was. */
  int64_t bad[2] = {2, 2};
  ASSERT_RC(sl_sample_alloc(smp, 0, 2, bad, NULL), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "field 'image'");
  ASSERT_EQ(sl_sample_at(smp, 0)->shape[1], 28);
  ASSERT_NULL(sl_sample_at(smp, 2));
  ASSERT_RC(sl_sample_alloc(smp, 5, 0, NULL, NULL), SL_EINVAL);
  /* Sharing a tensor between samples shares the buffer. */
  sl_schema *s2 = image_label_schema();
  sl_sample *other = sl_sample_new(s2);
  sl_schema_release(s2);
  ASSERT_OK(sl_sample_set(other, 0, sl_sample_at(smp, 0)));
  ASSERT_PTR_EQ(sl_sample_at(other, 0)->data, data);
  sl_sample_release(smp);
  ASSERT_EQ(((unsigned char *)sl_sample_at(other, 0)->data)[5], 7);
  ASSERT_EQ(sl_sample_refcount(other), 1);
  sl_sample_release(sl_sample_retain(other));
  sl_sample_release(other);
  sl_sample_release(NULL);
  ASSERT_NULL(sl_sample_new(NULL));
  ASSERT_EQ(sl_last_error_code(), SL_EINVAL);
}

TEST(sample_set_move_transfers_references) {
  sl_schema *s = image_label_schema();
  sl_sample *smp = sl_sample_new(s);
  sl_tensor t;
  ASSERT_OK(sl_tensor_alloc(&t, SL_I64, 0, NULL));
  sl_buffer *b = t.buf;
  ASSERT_OK(sl_sample_set_move(smp, 1, &t));
  ASSERT_NULL(t.buf);
  ASSERT_PTR_EQ(sl_sample_at(smp, 1)->buf, b);
  /* A refused move leaves the tensor with the caller. */
  ASSERT_OK(sl_tensor_alloc(&t, SL_F32, 0, NULL));
  ASSERT_RC(sl_sample_set_move(smp, 1, &t), SL_ESHAPE);
  ASSERT_NOT_NULL(t.buf);
  sl_tensor_clear(&t);
  sl_sample_release(smp);
  sl_schema_release(s);
}

TEST(allocation_failures_in_core_are_reported) {
  sl_schema *s = image_label_schema();
  for (long n = 0; n < 4; n++) {
    sl__alloc_fail_after(n);
    sl_sample *smp = sl_sample_new(s);
    int rc = smp ? sl_sample_alloc(smp, 0, 2, (int64_t[]){28, 28}, NULL) : -1;
    sl__alloc_fail_after(-1);
    if (!smp || rc < 0) ASSERT_EQ(sl_last_error_code(), SL_ENOMEM);
    sl_sample_release(smp);
  }
  sl_schema_release(s);
}

/* Issue 13 item 7: metadata keys are hashed (65 536 entries set and found
 * in linear time, insertion order kept by sl_schema_meta_at), replacing a
 * key keeps one entry, and a new key beyond SL_MAX_META is refused. */
TEST(schema_metadata_is_indexed_and_bounded) {
  sl_schema *s = sl_schema_new();
  char k[32], v[32];
  for (int i = 0; i < SL_MAX_META; i++) {
    snprintf(k, sizeof k, "k%d", i);
    snprintf(v, sizeof v, "%d", i * 3);
    ASSERT_OK(sl_schema_set_meta(s, k, v));
  }
  ASSERT_EQ(sl_schema_meta_count(s), SL_MAX_META);
  for (int i = 0; i < SL_MAX_META; i += 997) {
    snprintf(k, sizeof k, "k%d", i);
    snprintf(v, sizeof v, "%d", i * 3);
    ASSERT_STREQ(sl_schema_meta(s, k), v);
    const char *ki, *vi;
    ASSERT_OK(sl_schema_meta_at(s, i, &ki, &vi));
    ASSERT_STREQ(ki, k);
  }
  ASSERT_NULL(sl_schema_meta(s, "k65536"));
  ASSERT_RC(sl_schema_set_meta(s, "one-more", "x"), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "at most 65536 entries");
  ASSERT_OK(sl_schema_set_meta(s, "k7", "seven")); /* replacing is fine */
  ASSERT_STREQ(sl_schema_meta(s, "k7"), "seven");
  ASSERT_EQ(sl_schema_meta_count(s), SL_MAX_META);
  sl_schema *c = sl_schema_copy(s);
  ASSERT_NOT_NULL(c);
  ASSERT_STREQ(sl_schema_meta(c, "k65535"), "196605");
  sl_schema_release(c);
  sl_schema_release(s);
}
