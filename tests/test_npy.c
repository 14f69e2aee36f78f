/*
 * test_npy.c - the npy: reader (src/io/npy_reader.c) against files written
 * by numpy (tests/data/formats/make_fixtures.py): .npy v1-v3, 1-D to 3-D,
 * .npz stored and deflated; what is refused; save/restore.
 */
#include "test.h"
#include "test_util.h"

#include <unistd.h>

#define DIR SLUICE_SOURCE_DIR "/tests/data/formats/"

static sl_reader *open_npy(const char *name) {
  sl_reader *r = NULL;
  ASSERT_OK(sl_open(name, NULL, &r));
  return r;
}

TEST(npy_rows_of_a_2d_array_as_f32_vectors) {
  sl_reader *r = open_npy("npy:" DIR "x.npy");
  const sl_schema *sc = sl_reader_schema(r);
  ASSERT_EQ(sl_schema_nfields(sc), 1);
  ASSERT_STREQ(sl_schema_field_name(sc, 0), "x");
  ASSERT_EQ(sl_schema_field_dtype(sc, 0), SL_F32);
  ASSERT_EQ(sl_schema_field_rank(sc, 0), 1);
  ASSERT_EQ(sl_schema_field_shape(sc, 0)[0], 3);
  uint64_t n;
  ASSERT_OK(sl_reader_length(r, &n));
  ASSERT_EQ(n, 5);
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < 5; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      const float *v = sl_sample_at_const(s, 0)->data;
      for (int j = 0; j < 3; j++)
        ASSERT_TRUE(v[j] == (float)(i * 3 + j) / 4);
      sl_sample_release(s);
    }
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

TEST(npy_1d_array_gives_scalars_and_extension_infers_the_tag) {
  sl_reader *r = open_npy(DIR "labels.npy");
  ASSERT_EQ(sl_schema_field_rank(sl_reader_schema(r), 0), 0);
  for (int i = 0; i < 5; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(*(const int64_t *)sl_sample_at_const(s, 0)->data, i * 7 - 3);
    sl_sample_release(s);
  }
  sl_reader_destroy(r);
}

TEST(npy_field_option_renames_and_3d_u8) {
  sl_npy_opts o = SL_NPY_OPTS_INIT;
  o.field = "image";
  sl_reader *r;
  ASSERT_OK(sl_npy_reader(DIR "u8cube.npy", &o, &r));
  const sl_schema *sc = sl_reader_schema(r);
  ASSERT_STREQ(sl_schema_field_name(sc, 0), "image");
  ASSERT_EQ(sl_schema_field_rank(sc, 0), 2);
  sl_sample *s;
  for (int i = 0; i < 4; i++) {
    ASSERT_OK(sl_reader_next(r, &s));
    const uint8_t *v = sl_sample_field(s, "image")->data;
    ASSERT_EQ(v[0], i * 6);
    ASSERT_EQ(v[5], i * 6 + 5);
    sl_sample_release(s);
  }
  sl_reader_destroy(r);
}

TEST(npy_format_versions_2_and_3) {
  const char *files[] = {"npy:" DIR "v2.npy", "npy:" DIR "v3.npy"};
  const sl_dtype want[] = {SL_I32, SL_U16};
  for (int f = 0; f < 2; f++) {
    sl_reader *r = open_npy(files[f]);
    ASSERT_EQ(sl_schema_field_dtype(sl_reader_schema(r), 0), want[f]);
    for (int i = 0; i < 6; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      const sl_tensor *t = sl_sample_at_const(s, 0);
      ASSERT_EQ(f ? *(const uint16_t *)t->data : *(const int32_t *)t->data, i);
      sl_sample_release(s);
    }
    sl_reader_destroy(r);
  }
}

TEST(npy_empty_array_ends_at_once) {
  sl_reader *r = open_npy("npy:" DIR "empty.npy");
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
}

static void expect_npz(const char *name) {
  sl_reader *r = open_npy(name);
  const sl_schema *sc = sl_reader_schema(r);
  ASSERT_EQ(sl_schema_nfields(sc), 2);
  ASSERT_EQ(sl_schema_field_dtype(sc, sl_schema_find(sc, "a")), SL_F64);
  ASSERT_EQ(sl_schema_field_dtype(sc, sl_schema_find(sc, "b")), SL_I32);
  for (int i = 0; i < 3; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    const double *a = sl_sample_field(s, "a")->data;
    ASSERT_TRUE(a[0] == 2 * i && a[1] == 2 * i + 1);
    ASSERT_EQ(*(const int32_t *)sl_sample_field(s, "b")->data, 10 * (i + 1));
    sl_sample_release(s);
  }
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
}

TEST(npz_stored_and_deflated_one_field_per_member) {
  expect_npz("npy:" DIR "pair.npz");
  expect_npz(DIR "pair_z.npz");
}

static void expect_refused(const char *name, int code, const char *msg) {
  sl_reader *r = NULL;
  ASSERT_RC(sl_open(name, NULL, &r), code);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), msg);
}

TEST(npy_refuses_fortran_bigendian_0d_uneven_and_garbage) {
  expect_refused("npy:" DIR "fortran.npy", SL_EUNSUPPORTED, "Fortran-order");
  expect_refused("npy:" DIR "bigendian.npy", SL_EUNSUPPORTED, "big-endian");
  expect_refused("npy:" DIR "scalar.npy", SL_EINVAL, "0-d array");
  expect_refused("npy:" DIR "uneven.npz", SL_EINVAL, "same leading dimension");
  expect_refused("npy:" DIR "table.csv", SL_ECORRUPT, "not a .npy file");
  expect_refused("npy:" DIR "nonexistent.npy", SL_EIO, "nonexistent.npy");
}

TEST(npy_cut_short_and_damaged_deflate_are_corrupt) {
  char path[] = "/tmp/sluice-npy-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  FILE *in = fopen(DIR "x.npy", "rb");
  unsigned char buf[4096];
  size_t n = fread(buf, 1, sizeof buf, in);
  fclose(in);
  ASSERT_EQ(write(fd, buf, n - 5), (long)(n - 5));
  close(fd);
  sl_reader *r = NULL;
  ASSERT_RC(sl_npy_reader(path, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "bytes of elements expected");
  /* A deflated member with a flipped byte: bad data or a CRC mismatch. */
  in = fopen(DIR "pair_z.npz", "rb");
  n = fread(buf, 1, sizeof buf, in);
  fclose(in);
  buf[60] ^= 0x55;
  in = fopen(path, "wb");
  fwrite(buf, 1, n, in);
  fclose(in);
  ASSERT_RC(sl_npy_reader(path, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "member");
  unlink(path);
}

static sl_reader *build_npz(void *ud) {
  sl_reader *r = NULL;
  return sl_open((const char *)ud, NULL, &r) == SL_OK ? r : NULL;
}

static sl_reader *build_shuffled(void *ud) {
  sl_reader *r = build_npz(ud);
  if (r && sl_shuffle(r, 3, 42, &r) != SL_OK) return NULL;
  return r;
}

TEST(npy_resume_exactly) {
  static const uint64_t cuts[] = {0, 1, 2, 3, 4, 5, 7, 11};
  test_resume_check(build_npz, (void *)("npy:" DIR "pair_z.npz"), 3, cuts, 8,
                    0);
  test_resume_check(build_npz, (void *)("npy:" DIR "x.npy"), 3, cuts, 8, 0);
  test_resume_check(build_shuffled, (void *)("npy:" DIR "x.npy"), 3, cuts, 8,
                    0);
}

TEST(npy_restore_refuses_another_file) {
  sl_reader *a = open_npy("npy:" DIR "x.npy"), *b = NULL;
  sl_sample *s;
  ASSERT_OK(sl_reader_next(a, &s));
  sl_sample_release(s);
  void *st;
  size_t len;
  ASSERT_OK(sl_reader_save(a, &st, &len));
  sl_npy_opts o = SL_NPY_OPTS_INIT;
  o.field = "x";
  ASSERT_OK(sl_npy_reader(DIR "u8cube.npy", &o, &b));
  ASSERT_TRUE(sl_reader_restore(b, st, len) < 0);
  sl_free(st);
  sl_reader_destroy(a);
  sl_reader_destroy(b);
}
