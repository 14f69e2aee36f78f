/*
 * test_npy.c - the npy: reader (src/formats/npy_reader.c) against files written
 * by numpy (tests/data/formats/make_fixtures.py): .npy v1-v3, 1-D to 3-D,
 * .npz stored and deflated; what is refused; save/restore.
 */
#include "test.h"
#include "test_util.h"

#include "core/bytes.h"

#include <unistd.h>
#include <zlib.h>

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

/* --- hostile files, written here ------------------------------------------ */

/* A version-1 .npy of the header dictionary `dict` (padded to 64 bytes)
 * and `data_n` bytes of data (data, or zeros when NULL); *n its size. */
static unsigned char *npy_bytes(const char *dict, const void *data,
                                size_t data_n, size_t *n) {
  size_t dl = strlen(dict), padded = (10 + dl + 1 + 63) / 64 * 64;
  unsigned char *b = calloc(1, padded + data_n);
  ASSERT_NOT_NULL(b);
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  sl__put16(b + 8, (uint16_t)(padded - 10));
  memset(b + 10, ' ', padded - 10);
  memcpy(b + 10, dict, dl);
  b[padded - 1] = '\n';
  if (data) memcpy(b + padded, data, data_n);
  *n = padded + data_n;
  return b;
}

/* A member of a zip written by write_zip: stored, or deflated. */
typedef struct zmember {
  const unsigned char *data;
  size_t n;
  bool deflate;
} zmember;

/* A central directory entry: member `m` under `name`. */
typedef struct zentry {
  int m;
  const char *name;
} zentry;

/* A zip of the members m[0..nm) (each with a local header named after the
 * first entry pointing at it) and a central directory of e[0..ne), which
 * may point several entries at one member.  flip: a byte offset into the
 * first member's data to XOR with 0x01 after its CRC was taken (or -1). */
static void write_zip(const char *path, const zmember *m, int nm,
                      const zentry *e, int ne, long flip) {
  size_t cap = 4096;
  for (int i = 0; i < nm; i++)
    cap += compressBound((uLong)m[i].n) + 128;
  cap += (size_t)ne * 128;
  unsigned char *z = calloc(1, cap);
  ASSERT_NOT_NULL(z);
  size_t at = 0;
  uint64_t local[8];
  uint32_t crc[8], csize[8];
  ASSERT_TRUE(nm <= 8);
  for (int i = 0; i < nm; i++) {
    const char *name = "member.npy";
    for (int j = 0; j < ne; j++)
      if (e[j].m == i) {
        name = e[j].name;
        break;
      }
    size_t nl = strlen(name);
    local[i] = at;
    crc[i] = (uint32_t)crc32(0, m[i].data, (uInt)m[i].n);
    unsigned char *h = z + at;
    sl__put32(h, 0x04034b50);
    sl__put16(h + 4, 20);
    sl__put16(h + 8, m[i].deflate ? 8 : 0);
    sl__put32(h + 14, crc[i]);
    sl__put32(h + 22, (uint32_t)m[i].n);
    sl__put16(h + 26, (uint16_t)nl);
    memcpy(h + 30, name, nl);
    unsigned char *d = h + 30 + nl;
    if (m[i].deflate) {
      z_stream zs;
      memset(&zs, 0, sizeof zs);
      ASSERT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY),
                Z_OK);
      zs.next_in = (Bytef *)(uintptr_t)m[i].data;
      zs.avail_in = (uInt)m[i].n;
      zs.next_out = d;
      zs.avail_out = (uInt)(cap - (size_t)(d - z));
      ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
      csize[i] = (uint32_t)zs.total_out;
      deflateEnd(&zs);
    } else {
      memcpy(d, m[i].data, m[i].n);
      csize[i] = (uint32_t)m[i].n;
    }
    if (i == 0 && flip >= 0) d[flip] ^= 0x01;
    sl__put32(h + 18, csize[i]);
    at += 30 + nl + csize[i];
  }
  size_t cd = at;
  for (int j = 0; j < ne; j++) {
    int i = e[j].m;
    size_t nl = strlen(e[j].name);
    unsigned char *c = z + at;
    sl__put32(c, 0x02014b50);
    sl__put16(c + 4, 20);
    sl__put16(c + 6, 20);
    sl__put16(c + 10, m[i].deflate ? 8 : 0);
    sl__put32(c + 16, crc[i]);
    sl__put32(c + 20, csize[i]);
    sl__put32(c + 24, (uint32_t)m[i].n);
    sl__put16(c + 28, (uint16_t)nl);
    sl__put32(c + 42, (uint32_t)local[i]);
    memcpy(c + 46, e[j].name, nl);
    at += 46 + nl;
  }
  unsigned char *q = z + at;
  sl__put32(q, 0x06054b50);
  sl__put16(q + 8, (uint16_t)ne);
  sl__put16(q + 10, (uint16_t)ne);
  sl__put32(q + 12, (uint32_t)(at - cd));
  sl__put32(q + 16, (uint32_t)cd);
  at += 22;
  test_write_file(path, z, at);
  free(z);
}

/* Issue 24 item 6: a stored member's bytes were used without checking the
 * CRC-32 the directory holds for them (numpy refuses the file). */
TEST(npz_stored_member_with_a_flipped_bit_fails_its_crc) {
  int32_t v[6] = {1, 2, 3, 4, 5, 6};
  size_t n;
  unsigned char *a = npy_bytes(
      "{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }", v,
      sizeof v, &n);
  zmember m = {a, n, false};
  zentry e = {0, "a.npy"};
  const char *p = test_tmppath("npy", "stored.npz");
  write_zip(p, &m, 1, &e, 1, -1);
  sl_reader *r = NULL;
  ASSERT_OK(sl_npy_reader(p, NULL, &r));
  uint64_t count;
  test_digest_all(r, &count);
  ASSERT_EQ(count, 6);
  /* The same with one bit of an element flipped: the header still parses
   * and the shape fits, only the CRC tells. */
  write_zip(p, &m, 1, &e, 1, (long)(n - 3));
  r = NULL;
  ASSERT_RC(sl_npy_reader(p, NULL, &r), SL_ECORRUPT);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "member a.npy");
  ASSERT_CONTAINS(sl_last_error(), "CRC-32 mismatch");
  free(a);
}

/* 8 entries of the central directory pointing at one deflated member of
 * 32 MiB of zeros (32 KiB compressed): each was inflated into its own
 * buffer (the tester's 54 KB file with 64 entries reached 3.3 GB). */
#define OVERLAP_BYTES ((size_t)32 << 20)

static void open_overlapping(void *ud) {
  sl_reader *r = NULL;
  ASSERT_RC(sl_npy_reader((const char *)ud, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "overlaps");
  ASSERT_CONTAINS(sl_last_error(), "a1.npy");
}

TEST(npz_members_overlapping_are_refused_without_inflating_them) {
  char dict[128];
  snprintf(dict, sizeof dict,
           "{'descr': '|u1', 'fortran_order': False, 'shape': (%zu,), }",
           OVERLAP_BYTES);
  size_t n;
  unsigned char *a = npy_bytes(dict, NULL, OVERLAP_BYTES, &n);
  zmember m = {a, n, true};
  zentry e[8];
  static const char *names[8] = {"a0.npy", "a1.npy", "a2.npy", "a3.npy",
                                 "a4.npy", "a5.npy", "a6.npy", "a7.npy"};
  for (int i = 0; i < 8; i++)
    e[i] = (zentry){0, names[i]};
  const char *p = test_tmppath("npy", "overlap.npz");
  write_zip(p, &m, 1, e, 8, -1);
  free(a);
  uint64_t rss = test_child_peak_rss(open_overlapping, (void *)p);
  printf("  peak RSS refusing the overlapping .npz: %llu MiB\n",
         (unsigned long long)(rss >> 20));
  ASSERT_TRUE(rss < 2 * OVERLAP_BYTES);
}

/* Issue 24 item 18: the npy: reader by the same parser as tokens:. */
TEST(npy_header_repeated_key_negative_or_wrapping_shape_is_refused) {
  static const struct {
    const char *dict, *msg;
    int code;
  } bad[] = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), "
       "'shape': (1,), }",
       "repeats key 'shape'", SL_ECORRUPT},
      {"{'descr': '<f4', 'fortran_order': False, 'fortran_order': True, "
       "'shape': (2,), }",
       "repeats key 'fortran_order'", SL_ECORRUPT},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }",
       "negative dimension", SL_ECORRUPT},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': "
       "(4611686018427387906,), }",
       "overflows", SL_ECORRUPT},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1, }",
       "has key 'x'", SL_ECORRUPT},
      {"{'descr': '<f4', 'fortran_order': False, }", "lacks 'shape'",
       SL_ECORRUPT},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x",
       "text after the dictionary", SL_ECORRUPT},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }",
       "',' or '}' expected", SL_ECORRUPT},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
       "structured", SL_EUNSUPPORTED},
  };
  float v[2] = {1, 2};
  const char *p = test_tmppath("npy", "hostile.npy");
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    size_t n;
    unsigned char *b = npy_bytes(bad[i].dict, v, sizeof v, &n);
    test_write_file(p, b, n);
    free(b);
    sl_reader *r = NULL;
    ASSERT_RC(sl_npy_reader(p, NULL, &r), bad[i].code);
    ASSERT_CONTAINS(sl_last_error(), "hostile.npy");
    ASSERT_CONTAINS(sl_last_error(), bad[i].msg);
  }
  /* What numpy writes, spaced or not, in either quote, still reads. */
  static const char *good[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
      "{\"shape\":(2L,),\"fortran_order\":False,\"descr\":\"<f4\"}",
      "  { 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 2 , ) }"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    size_t n;
    unsigned char *b = npy_bytes(good[i], v, sizeof v, &n);
    test_write_file(p, b, n);
    free(b);
    sl_reader *r = NULL;
    ASSERT_OK(sl_npy_reader(p, NULL, &r));
    uint64_t count;
    test_digest_all(r, &count);
    ASSERT_EQ(count, 2);
  }
}
