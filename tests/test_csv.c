/*
 * test_csv.c - the csv: reader (src/formats/csv_reader.c, csv.c) against files
 * written by Python's csv module (tests/data/formats/make_fixtures.py):
 * header, guessed and declared dtypes, RFC 4180 quoting, delimiters, bad
 * rows naming their line, save/restore.
 */
#include "test.h"
#include "test_util.h"

#include <fcntl.h>
#include <unistd.h>

#define DIR SLUICE_SOURCE_DIR "/tests/data/formats/"

static const char *k_names[] = {"plain", "with \"quotes\", comma", "two\nlines",
                                ""};
static const double k_x[] = {1.5, -2, 3.25, 0};
static const int64_t k_y[] = {7, 0, -4, 9};

static void expect_table(sl_reader *r) {
  const sl_schema *sc = sl_reader_schema(r);
  ASSERT_EQ(sl_schema_nfields(sc), 3);
  ASSERT_EQ(sl_schema_field_dtype(sc, 0), SL_F32);
  ASSERT_EQ(sl_schema_field_dtype(sc, 1), SL_I64);
  ASSERT_EQ(sl_schema_field_dtype(sc, 2), SL_BYTES);
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < 4; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_TRUE(*(const float *)sl_sample_field(s, "x")->data ==
                  (float)k_x[i]);
      ASSERT_EQ(*(const int64_t *)sl_sample_field(s, "y")->data, k_y[i]);
      const sl_tensor *t = sl_sample_field(s, "name");
      ASSERT_EQ(t->shape[0], (int64_t)strlen(k_names[i]));
      ASSERT_TRUE(memcmp(t->data ? t->data : "", k_names[i], t->nbytes) == 0);
      sl_sample_release(s);
    }
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

TEST(csv_header_guessed_dtypes_and_rfc4180_quoting) {
  sl_reader *r;
  ASSERT_OK(sl_open("csv:" DIR "table.csv", NULL, &r));
  expect_table(r);
  ASSERT_OK(sl_open(DIR "table.csv", NULL, &r)); /* .csv is csv */
  expect_table(r);
}

TEST(csv_tab_delimiter_and_lf_line_ends) {
  sl_csv_opts o = SL_CSV_OPTS_INIT;
  o.delimiter = '\t';
  sl_reader *r;
  ASSERT_OK(sl_csv_reader(DIR "table.tsv", &o, &r));
  expect_table(r);
}

TEST(csv_columns_select_order_and_dtypes) {
  sl_csv_opts o = SL_CSV_OPTS_INIT;
  o.columns = "y:i32,x:f64";
  sl_reader *r;
  ASSERT_OK(sl_csv_reader(DIR "table.csv", &o, &r));
  const sl_schema *sc = sl_reader_schema(r);
  ASSERT_EQ(sl_schema_nfields(sc), 2);
  ASSERT_STREQ(sl_schema_field_name(sc, 0), "y");
  ASSERT_EQ(sl_schema_field_dtype(sc, 0), SL_I32);
  ASSERT_EQ(sl_schema_field_dtype(sc, 1), SL_F64);
  for (int i = 0; i < 4; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(*(const int32_t *)sl_sample_at_const(s, 0)->data, k_y[i]);
    ASSERT_TRUE(*(const double *)sl_sample_at_const(s, 1)->data == k_x[i]);
    sl_sample_release(s);
  }
  sl_reader_destroy(r);
}

TEST(csv_without_header_columns_name_every_column) {
  sl_csv_opts o = SL_CSV_OPTS_INIT;
  o.columns = "a:bytes,b:bytes,c";
  o.no_header = 1;
  sl_reader *r;
  ASSERT_OK(sl_csv_reader(DIR "table.csv", &o, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(sl_sample_field(s, "a")->nbytes, 1); /* "x" */
  sl_sample_release(s);
  uint64_t n = 1;
  while (sl_reader_next(r, &s) == SL_OK) {
    sl_sample_release(s);
    n++;
  }
  ASSERT_EQ(n, 5);
  sl_reader_destroy(r);
}

TEST(csv_bad_rows_name_file_line_and_column) {
  sl_reader *r;
  ASSERT_OK(sl_open("csv:" DIR "badrow.csv", NULL, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "badrow.csv:3: column 'y': 'oops'");
  sl_reader_destroy(r);

  char path[] = "/tmp/sluice-csv-XXXXXX";
  int fd = mkstemp(path);
  const char *text = "a,b\n1,2\n3\n4,\"5\n";
  ASSERT_EQ(write(fd, text, strlen(text)), (long)strlen(text));
  close(fd);
  ASSERT_OK(sl_csv_reader(path, NULL, &r));
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), ":3: 1 fields, the header has 2");
  sl_reader_destroy(r);
  sl_csv_opts o = SL_CSV_OPTS_INIT;
  o.columns = "a";
  ASSERT_OK(sl_csv_reader(path, &o, &r));
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_OK(sl_reader_reset(r));
  sl_reader_destroy(r);
  /* An unterminated quote is corrupt, naming the line it opens on. */
  fd = open(path, O_WRONLY | O_TRUNC);
  text = "a,b\n1,2\n4,\"5\n6\n";
  ASSERT_EQ(write(fd, text, strlen(text)), (long)strlen(text));
  close(fd);
  ASSERT_OK(sl_csv_reader(path, NULL, &r));
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), ":3: a quoted field is not closed");
  sl_reader_destroy(r);
  unlink(path);
}

/* table.csv with its line ends, outside quotes, replaced by `end`; inside
 * quotes (the "two\nlines" field) they stay as written. */
static const char *table_with_line_ends(const char *name, const char *end) {
  FILE *f = fopen(DIR "table.csv", "rb");
  ASSERT_NOT_NULL(f);
  char in[1024], out[2048];
  size_t n = fread(in, 1, sizeof in, f), k = 0;
  fclose(f);
  bool quoted = false;
  for (size_t i = 0; i < n; i++) {
    if (in[i] == '"') quoted = !quoted;
    if (!quoted && in[i] == '\r' && i + 1 < n && in[i + 1] == '\n') {
      memcpy(out + k, end, strlen(end));
      k += strlen(end);
      i++;
    } else {
      out[k++] = in[i];
    }
  }
  const char *p = test_tmppath("csv", name);
  test_write_file(p, out, k);
  return p;
}

/* Issue 24 item 18: a file with CR-only line ends (classic Mac OS, Excel
 * for Mac) gave 0 rows and no error; Python's csv reads it. */
TEST(csv_cr_only_line_ends_read_like_crlf) {
  const char *p = table_with_line_ends("cr.csv", "\r");
  sl_reader *r;
  ASSERT_OK(sl_csv_reader(p, NULL, &r));
  expect_table(r);
  /* Mixed ends, and a blank CR-only line, read the same. */
  p = table_with_line_ends("mixed.csv", "\r\r\n");
  ASSERT_OK(sl_csv_reader(p, NULL, &r));
  expect_table(r);
  /* Line numbers in messages count CR-only lines. */
  p = test_tmppath("csv", "crbad.csv");
  const char *text = "a,b\r1,2\r\"x\ry\",3\r4,oops\r";
  test_write_file(p, text, strlen(text));
  sl_csv_opts o = SL_CSV_OPTS_INIT;
  o.columns = "a:bytes,b:i64";
  ASSERT_OK(sl_csv_reader(p, &o, &r));
  sl_sample *s;
  for (int i = 0; i < 2; i++) {
    ASSERT_OK(sl_reader_next(r, &s));
    if (i == 1) {
      const sl_tensor *t = sl_sample_field(s, "a");
      ASSERT_EQ(t->nbytes, 3);
      ASSERT_TRUE(memcmp(t->data, "x\ry", 3) == 0);
    }
    sl_sample_release(s);
  }
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "crbad.csv:5: column 'b': 'oops'");
  sl_reader_destroy(r);
}

static sl_reader *build_cr(void *ud) {
  sl_reader *r = NULL;
  return sl_csv_reader((const char *)ud, NULL, &r) == SL_OK ? r : NULL;
}

TEST(csv_cr_only_resume_exactly) {
  static const uint64_t cuts[] = {0, 1, 2, 3, 4, 5, 7};
  char *p = strdup(table_with_line_ends("cr-resume.csv", "\r"));
  test_resume_check(build_cr, p, 2, cuts, 7, 0);
  free(p);
}

TEST(csv_header_only_gives_no_samples) {
  /* A regression (fuzz): the dtype guess found no record and the
   * constructor returned SL_EOF. */
  char path[] = "/tmp/sluice-csvh-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_EQ(write(fd, "a,b\n", 4), 4);
  close(fd);
  sl_reader *r;
  ASSERT_OK(sl_csv_reader(path, NULL, &r));
  ASSERT_EQ(sl_schema_field_dtype(sl_reader_schema(r), 0), SL_BYTES);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  sl_csv_opts o = SL_CSV_OPTS_INIT;
  o.columns = "a:i64";
  ASSERT_OK(sl_csv_reader(path, &o, &r));
  sl_reader_destroy(r);
  unlink(path);
}

TEST(csv_refuses_bad_options) {
  sl_reader *r = NULL;
  sl_csv_opts o = SL_CSV_OPTS_INIT;
  o.columns = "nosuch:f32";
  ASSERT_RC(sl_csv_reader(DIR "table.csv", &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "no column 'nosuch'");
  o.columns = "x:f33";
  ASSERT_RC(sl_csv_reader(DIR "table.csv", &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "unknown dtype 'f33'");
  o.columns = "x:f16";
  ASSERT_RC(sl_csv_reader(DIR "table.csv", &o, &r), SL_EUNSUPPORTED);
  o.columns = NULL;
  o.delimiter = '"';
  ASSERT_RC(sl_csv_reader(DIR "table.csv", &o, &r), SL_EINVAL);
  ASSERT_RC(sl_csv_reader(DIR "nonexistent.csv", NULL, &r), SL_EIO);
  ASSERT_NULL(r);
}

static sl_reader *build_csv(void *ud) {
  sl_reader *r = NULL;
  if (sl_open((const char *)ud, NULL, &r) != SL_OK) return NULL;
  if (sl_shuffle(r, 2, 7, &r) != SL_OK) return NULL;
  return r;
}

static sl_reader *build_big(void *ud) {
  sl_reader *r = NULL;
  return sl_csv_reader((const char *)ud, NULL, &r) == SL_OK ? r : NULL;
}

TEST(csv_resume_exactly) {
  static const uint64_t cuts[] = {0, 1, 2, 3, 4, 5, 6, 9, 11};
  test_resume_check(build_csv, (void *)("csv:" DIR "table.csv"), 3, cuts, 9, 0);
  /* Past the offset log: a save far behind replays. */
  char path[] = "/tmp/sluice-csvbig-XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fdopen(fd, "w");
  fprintf(f, "i,s\n");
  for (int i = 0; i < 3000; i++)
    fprintf(f, "%d,\"r%d\"\n", i, i);
  fclose(f);
  static const uint64_t big[] = {0, 1, 1500, 2999, 3000, 4500};
  test_resume_check(build_big, path, 2, big, 6, 0);
  unlink(path);
}

/* Writes a CSV of rows "i,word" whose words are `w` (all rows the same
 * length, so that two versions of the file have the same size). */
static void write_rows(const char *path, const char *w) {
  char buf[4096];
  size_t n = (size_t)snprintf(buf, sizeof buf, "i,s\n");
  for (int i = 0; i < 20; i++)
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%02d,%s\n", i, w);
  test_write_file(path, buf, n);
}

static void save_after(const char *path, int rows, void **st, size_t *len) {
  sl_reader *r = NULL;
  ASSERT_OK(sl_csv_reader(path, NULL, &r));
  for (int i = 0; i < rows; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  ASSERT_OK(sl_reader_save(r, st, len));
  sl_reader_destroy(r);
}

/* Issue 24 item 8: a CSV rewritten at the same size (in place, or replaced
 * by a rename) is refused naming the file and what changed - not resumed
 * mid-row - and the refused reader goes on from its own start. */
TEST(csv_restore_into_a_rewritten_file_is_refused) {
  const char *p = test_tmppath("csv-id", "rows.csv");
  write_rows(p, "aaaa");
  void *st;
  size_t len;
  save_after(p, 7, &st, &len);
  /* The same file, untouched: restores. */
  sl_reader *r = NULL;
  ASSERT_OK(sl_csv_reader(p, NULL, &r));
  ASSERT_OK(sl_reader_restore(r, st, len));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(*(const int64_t *)sl_sample_field(s, "i")->data, 7);
  sl_sample_release(s);
  sl_reader_destroy(r);
  /* Rewritten in place at the same size, a moment later. */
  write_rows(p, "bbbb");
  test_touch_later(p, 1);
  ASSERT_OK(sl_csv_reader(p, NULL, &r));
  ASSERT_RC(sl_reader_restore(r, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), p);
  ASSERT_CONTAINS(sl_last_error(), "modification time");
  ASSERT_OK(sl_reader_next(r, &s)); /* unchanged: its first row */
  ASSERT_EQ(*(const int64_t *)sl_sample_field(s, "i")->data, 0);
  sl_sample_release(s);
  sl_reader_destroy(r);
  /* Replaced by a rename (another inode), same size. */
  sl_free(st);
  save_after(p, 5, &st, &len);
  const char *q = test_tmppath("csv-id", "rows.new");
  write_rows(q, "cccc");
  ASSERT_EQ(rename(q, p), 0);
  ASSERT_OK(sl_csv_reader(p, NULL, &r));
  ASSERT_RC(sl_reader_restore(r, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "another file");
  sl_free(st);
  sl_reader_destroy(r);
}
