/*
 * test_text_reader.c - the `text` file reader and parser plugins: line
 * splitting (empty lines, "\r\n", a last line without "\n", an empty file,
 * a 1 MB line, lines across read boundaries), buffers and mmap giving
 * identical samples, sl_open with "text:", and the plugins: the two
 * examples (csv_floats, tokenize) and deliberately broken ones (wrong ABI
 * version, no entry point, unresolved symbol, not a shared object, samples
 * that do not fit the declared schema, bad return codes), with the promised
 * messages naming plugin, file and line.
 *
 * Finding the plugins.  The top-level CMakeLists.txt gives tests no
 * per-target definitions, so the paths are found at run time: the plugins
 * are built into <build>/examples/plugins, and this executable is
 * <build>/test_text_reader, so the directory is /proc/self/exe's directory
 * plus "/examples/plugins".  SLUICE_PLUGIN_DIR overrides it.  A missing
 * plugin fails the test, saying to build the examples.
 */
#include "test.h"
#include "test_util.h"

#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- fixtures ------------------------------------------------------------ */

static const char *tmppath(const char *name) {
  return test_tmppath("text-reader", name);
}

static void write_str(const char *path, const char *s) {
  test_write_file(path, s, strlen(s));
}

/* The path of plugin `lib<name>.so` (see the file comment). */
static const char *plugin(const char *name) {
  static char buf[4][PATH_MAX + 64];
  static int next;
  char dir[PATH_MAX];
  const char *env = getenv("SLUICE_PLUGIN_DIR");
  if (env && env[0]) {
    snprintf(dir, sizeof dir, "%s", env);
  } else {
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    ASSERT_TRUE(n > 0);
    dir[n] = 0;
    char *slash = strrchr(dir, '/');
    ASSERT_NOT_NULL(slash);
    snprintf(slash, sizeof dir - (size_t)(slash - dir), "/examples/plugins");
  }
  char *b = buf[next++ % 4];
  snprintf(b, sizeof buf[0], "%s/lib%s.so", dir, name);
  if (access(b, R_OK) != 0)
    test_fail(__FILE__, __LINE__,
              "parser plugin %s not found: build the examples "
              "(SLUICE_BUILD_EXAMPLES=ON, examples/plugins) or set "
              "SLUICE_PLUGIN_DIR",
              b);
  return b;
}

/* Every line of `r` (field 0, bytes) until EOF, as one string with each
 * line followed by '|', and the count. */
static size_t read_lines(sl_reader *r, char *out, size_t size) {
  size_t used = 0, n = 0;
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    const sl_tensor *t = sl_sample_at_const(s, 0);
    ASSERT_EQ(t->dtype, SL_BYTES);
    ASSERT_EQ(t->rank, 1);
    ASSERT_TRUE(used + t->nbytes + 1 < size);
    for (size_t i = 0; i < t->nbytes; i++) { /* NUL shown as '0' */
      char c = ((const char *)t->data)[i];
      out[used++] = c ? c : '0';
    }
    out[used++] = '|';
    n++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  out[used] = 0;
  return n;
}

/* The lines of `content` read in mode `mmap`, as read_lines gives them. */
static void expect_lines(const char *content, size_t len, int mmap,
                         const char *want, size_t count) {
  const char *p = tmppath("lines.txt");
  test_write_file(p, content, len);
  sl_reader *r;
  ASSERT_OK(sl_text_reader(p, mmap, NULL, NULL, &r));
  char got[1024];
  for (int pass = 0; pass < 2; pass++) { /* reset reads it again */
    ASSERT_EQ(read_lines(r, got, sizeof got), count);
    ASSERT_STREQ(got, want);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

/* --- lines ---------------------------------------------------------------- */

/* A string literal's bytes, NULs included. */
#define LINES(m, lit, want, count)                                             \
  expect_lines(lit, sizeof lit - 1, m, want, count)

TEST(lines_empty_lines_crlf_and_no_final_newline) {
  for (int m = 0; m < 2; m++) {
    LINES(m, "a\nbb\n\nccc\n", "a|bb||ccc|", 4);
    LINES(m, "a\nbb\n\nccc", "a|bb||ccc|", 4); /* no final newline */
    LINES(m, "\n", "|", 1);
    LINES(m, "\n\n", "||", 2);
    LINES(m, "x", "x|", 1);
    /* "\r\n" and a last "\r": one trailing '\r' is removed per line. */
    LINES(m, "x\r\ny\r\n\r\nz\r", "x|y||z|", 4);
    LINES(m, "a\r\r\nb\rc\n", "a\r|b\rc|", 2);
    LINES(m, "\r", "|", 1);
    /* NUL bytes are data: read_lines turns them into '0' below. */
    LINES(m, "a\0b\n\0\n", "a0b|0|", 2);
  }
}

TEST(empty_file_and_sl_open) {
  const char *p = tmppath("empty.txt");
  test_write_file(p, "", 0);
  for (int m = 0; m < 2; m++) {
    sl_reader *r;
    ASSERT_OK(sl_text_reader(p, m, NULL, NULL, &r));
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    sl_reader_destroy(r);
  }
  const char *q = tmppath("three.txt");
  write_str(q, "one\ntwo\nthree\n");
  char name[600], got[256];
  snprintf(name, sizeof name, "text:%s", q);
  for (int m = 0; m < 2; m++) {
    sl_open_opts o = SL_OPEN_OPTS_INIT;
    o.text_mmap = m;
    sl_reader *r;
    ASSERT_OK(sl_open(name, &o, &r));
    ASSERT_STREQ(sl_reader_name(r), "text");
    char desc[128];
    sl_schema_describe(sl_reader_schema(r), desc, sizeof desc);
    ASSERT_STREQ(desc, "{line: bytes[-1]}");
    ASSERT_EQ(read_lines(r, got, sizeof got), 3);
    ASSERT_STREQ(got, "one|two|three|");
    sl_reader_destroy(r);
  }
  /* Defaults (NULL options) read with buffers. */
  sl_reader *r;
  ASSERT_OK(sl_open(name, NULL, &r));
  ASSERT_EQ(read_lines(r, got, sizeof got), 3);
  sl_reader_destroy(r);
}

TEST(a_one_megabyte_line) {
  size_t big = (size_t)1 << 20;
  size_t n = big + 20;
  char *data = malloc(n);
  ASSERT_NOT_NULL(data);
  memcpy(data, "first\n", 6);
  for (size_t i = 0; i < big; i++)
    data[6 + i] = (char)('a' + i % 26);
  memcpy(data + 6 + big, "\r\nlast", 6);
  n = 6 + big + 6;
  const char *p = tmppath("big.txt");
  test_write_file(p, data, n);
  for (int m = 0; m < 2; m++) {
    sl_reader *r;
    ASSERT_OK(sl_text_reader(p, m, NULL, NULL, &r));
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(sl_sample_at_const(s, 0)->nbytes, 5);
    sl_sample_release(s);
    ASSERT_OK(sl_reader_next(r, &s));
    const sl_tensor *t = sl_sample_at_const(s, 0);
    ASSERT_EQ(t->shape[0], (int64_t)big);
    ASSERT_EQ(memcmp(t->data, data + 6, big), 0);
    sl_sample_release(s);
    ASSERT_OK(sl_reader_next(r, &s));
    t = sl_sample_at_const(s, 0);
    ASSERT_EQ(t->nbytes, 4);
    ASSERT_EQ(memcmp(t->data, "last", 4), 0);
    sl_sample_release(s);
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    sl_reader_destroy(r);
  }
  free(data);
}

/* A deterministic generator for the comparison files. */
static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

/* Reads `path` in both modes, sample for sample, and checks they agree;
 * returns the number of lines. */
static size_t compare_modes(const char *path) {
  sl_reader *a, *b;
  ASSERT_OK(sl_text_reader(path, 0, NULL, NULL, &a));
  ASSERT_OK(sl_text_reader(path, 1, NULL, NULL, &b));
  size_t lines = 0;
  for (int pass = 0; pass < 2; pass++) {
    size_t n = 0;
    for (;;) {
      sl_sample *x, *y;
      int ra = sl_reader_next(a, &x), rb = sl_reader_next(b, &y);
      ASSERT_EQ(ra, rb);
      if (ra == SL_EOF) break;
      ASSERT_OK(ra);
      const sl_tensor *tx = sl_sample_at_const(x, 0);
      const sl_tensor *ty = sl_sample_at_const(y, 0);
      ASSERT_EQ(tx->nbytes, ty->nbytes);
      ASSERT_EQ(tx->shape[0], ty->shape[0]);
      if (tx->nbytes) ASSERT_EQ(memcmp(tx->data, ty->data, tx->nbytes), 0);
      sl_sample_release(x);
      sl_sample_release(y);
      n++;
    }
    if (pass) ASSERT_EQ(n, lines);
    lines = n;
    ASSERT_OK(sl_reader_reset(a));
    ASSERT_OK(sl_reader_reset(b));
  }
  sl_reader_destroy(a);
  sl_reader_destroy(b);
  return lines;
}

TEST(mmap_and_buffers_give_identical_samples) {
  /* Lines around the 64 KiB read size and its multiples, so lines end,
   * and "\r\n" pairs split, exactly at and next to read boundaries. */
  size_t cap = (size_t)3 << 20;
  char *data = malloc(cap);
  ASSERT_NOT_NULL(data);
  for (int file = 0; file < 6; file++) {
    size_t n = 0, want = 0;
    while (n < cap - 300000) {
      size_t len;
      switch (rnd() % 6) {
      case 0:
        len = 0;
        break;
      case 1:
        len = rnd() % 8;
        break;
      case 2:
        len = rnd() % 200;
        break;
      case 3:
        len = 65536 - 2 + rnd() % 5;
        break;
      case 4:
        len = rnd() % 200000;
        break;
      default:
        len = 65536 * (1 + rnd() % 3) - 1 - n % 65536;
        break;
      }
      for (size_t i = 0; i < len; i++) {
        uint64_t c = rnd() % 64;
        data[n++] = c == 0 ? '\r' : c == 1 ? '\0' : (char)(' ' + c);
      }
      if (file % 2 && rnd() % 3 == 0) data[n++] = '\r';
      data[n++] = '\n';
      want++;
    }
    if (file >= 4) { /* a last line without a newline */
      memcpy(data + n, "tail\r", 5);
      n += 5;
      want++;
    }
    char name[32];
    snprintf(name, sizeof name, "cmp%d.txt", file);
    const char *p = tmppath(name);
    test_write_file(p, data, n);
    ASSERT_EQ(compare_modes(p), want);
  }
  free(data);
}

TEST(reset_mid_pass_and_samples_outlive_the_reader) {
  const char *p = tmppath("reset.txt");
  write_str(p, "l1\nl2\nl3\n");
  for (int m = 0; m < 2; m++) {
    sl_reader *r;
    ASSERT_OK(sl_text_reader(p, m, NULL, NULL, &r));
    sl_sample *s, *keep;
    ASSERT_OK(sl_reader_next(r, &keep));
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
    ASSERT_OK(sl_reader_reset(r));
    char got[64];
    ASSERT_EQ(read_lines(r, got, sizeof got), 3);
    ASSERT_STREQ(got, "l1|l2|l3|");
    sl_reader_destroy(r);
    /* In mmap mode a view keeps the mapping alive. */
    const sl_tensor *t = sl_sample_at_const(keep, 0);
    ASSERT_EQ(t->nbytes, 2);
    ASSERT_EQ(memcmp(t->data, "l1", 2), 0);
    sl_sample_release(keep);
  }
}

TEST(file_errors_name_the_file) {
  sl_reader *r = (sl_reader *)1;
  for (int m = 0; m < 2; m++) {
    ASSERT_RC(sl_text_reader("/nonexistent/x.txt", m, NULL, NULL, &r), SL_EIO);
    ASSERT_NULL(r);
    ASSERT_STREQ(sl_last_error(), "text: /nonexistent/x.txt: cannot open: No "
                                  "such file or directory");
    ASSERT_RC(sl_text_reader("/tmp", m, NULL, NULL, &r), SL_EIO);
    ASSERT_STREQ(sl_last_error(), "text: /tmp: is a directory");
  }
  ASSERT_RC(sl_open("text:/nonexistent/x.txt", NULL, &r), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "text: /nonexistent/x.txt: cannot open: No "
                                "such file or directory");
  ASSERT_RC(sl_text_reader(NULL, 0, NULL, NULL, &r), SL_EINVAL);
  ASSERT_RC(sl_text_reader("", 0, NULL, NULL, &r), SL_EINVAL);
  ASSERT_RC(sl_text_reader("/tmp/x", 0, NULL, NULL, NULL), SL_EINVAL);
}

/* --- the example plugins ------------------------------------------------- */

TEST(csv_floats_plugin_parses_and_checks) {
  const char *so = plugin("csv_floats");
  const char *p = tmppath("data.csv");
  write_str(p, "1,2,3,4\n# a comment\n\n  -5.5 , 6e2,7,0.25\r\n");
  for (int m = 0; m < 2; m++) {
    sl_reader *r;
    ASSERT_OK(sl_text_reader(p, m, so, "n=4", &r));
    char desc[128];
    sl_schema_describe(sl_reader_schema(r), desc, sizeof desc);
    ASSERT_STREQ(desc, "{x: f32[4]}");
    const float want[2][4] = {{1, 2, 3, 4}, {-5.5f, 600, 7, 0.25f}};
    for (int pass = 0; pass < 2; pass++) {
      for (int i = 0; i < 2; i++) {
        sl_sample *s;
        ASSERT_OK(sl_reader_next(r, &s));
        const sl_tensor *t = sl_sample_field(s, "x");
        ASSERT_EQ(t->shape[0], 4);
        ASSERT_EQ(memcmp(t->data, want[i], sizeof want[i]), 0);
        sl_sample_release(s);
      }
      sl_sample *s;
      ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
  }
  /* Through sl_open, with "columns=" spelling. */
  char name[600];
  snprintf(name, sizeof name, "text:%s", p);
  sl_open_opts o = SL_OPEN_OPTS_INIT;
  o.parser = so;
  o.parser_options = "columns=4";
  sl_reader *r;
  ASSERT_OK(sl_open(name, &o, &r));
  int n = 0;
  sl_sample *s;
  while (sl_reader_next(r, &s) == SL_OK) {
    n++;
    sl_sample_release(s);
  }
  ASSERT_EQ(n, 2);
  sl_reader_destroy(r);
  /* Batching trusts the declared schema: 2 samples stack to [2, 4]. */
  ASSERT_OK(sl_open(name, &o, &r));
  ASSERT_OK(sl_batch(r, 2, NULL, &r));
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(sl_sample_at_const(s, 0)->shape[0], 2);
  ASSERT_EQ(sl_sample_at_const(s, 0)->shape[1], 4);
  sl_sample_release(s);
  sl_reader_destroy(r);
}

TEST(csv_floats_errors_name_plugin_file_and_line) {
  const char *so = plugin("csv_floats");
  const char *p = tmppath("bad.csv");
  /* Line 4 has 3 columns; lines 2 and 3 are skipped but counted. */
  write_str(p, "1,2,3,4\n#\n\n1,2,3\n");
  char want[1200];
  for (int m = 0; m < 2; m++) {
    sl_reader *r;
    ASSERT_OK(sl_text_reader(p, m, so, "n=4", &r));
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
    snprintf(want, sizeof want,
             "text: %s:4: parser csv_floats (%s): expected 4 floats, got 3", p,
             so);
    ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
    ASSERT_STREQ(sl_last_error(), want);
    ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL); /* sticky */
    ASSERT_STREQ(sl_last_error(), want);
    ASSERT_OK(sl_reader_reset(r)); /* and reset starts over */
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
    sl_reader_destroy(r);
  }
  write_str(p, "1,2,3,4\n1,x,3,4\n");
  sl_reader *r;
  ASSERT_OK(sl_text_reader(p, 0, so, "n=4", &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  snprintf(want, sizeof want,
           "text: %s:2: parser csv_floats (%s): column 2: 'x' is not a number",
           p, so);
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), want);
  sl_reader_destroy(r);
  write_str(p, "1,2,,4\n");
  ASSERT_OK(sl_text_reader(p, 1, so, "n=4", &r));
  ASSERT_RC(sl_reader_next(r, &s), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), ":1: parser csv_floats");
  ASSERT_CONTAINS(sl_last_error(), "column 3 is empty");
  sl_reader_destroy(r);
  /* Options are checked by init. */
  snprintf(want, sizeof want,
           "text: %s: parser csv_floats (%s): init with options \"\": the "
           "number of columns is required (options \"n=4\")",
           p, so);
  ASSERT_RC(sl_text_reader(p, 0, so, NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), want);
  ASSERT_RC(sl_text_reader(p, 0, so, "n=4,rows=2", &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "unknown option 'rows' (known: n, columns)");
  ASSERT_RC(sl_text_reader(p, 0, so, "n=0", &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "option n must be a whole number");
}

static uint32_t fnv1a(const char *p) {
  uint32_t h = 2166136261u;
  for (; *p; p++) {
    h ^= (unsigned char)*p;
    h *= 16777619u;
  }
  return h;
}

TEST(tokenize_plugin) {
  const char *so = plugin("tokenize");
  const char *p = tmppath("words.txt");
  write_str(p, "the cat sat\n  the\tdog  \n\n   \r\n");
  const char *words[4][3] = {
      {"the", "cat", "sat"}, {"the", "dog", NULL}, {NULL}, {NULL}};
  const int counts[4] = {3, 2, 0, 0};
  for (int m = 0; m < 2; m++) {
    sl_reader *r;
    ASSERT_OK(sl_text_reader(p, m, so, "vocab=1000", &r));
    char desc[128];
    sl_schema_describe(sl_reader_schema(r), desc, sizeof desc);
    ASSERT_STREQ(desc, "{tokens: i32[-1], ntokens: i64[]}");
    for (int i = 0; i < 4; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      const sl_tensor *tok = sl_sample_field(s, "tokens");
      const sl_tensor *nt = sl_sample_field(s, "ntokens");
      ASSERT_EQ(*(const int64_t *)nt->data, counts[i]);
      ASSERT_EQ(tok->shape[0], counts[i]);
      for (int k = 0; k < counts[i]; k++)
        ASSERT_EQ(((const int32_t *)tok->data)[k],
                  1 + fnv1a(words[i][k]) % 999);
      sl_sample_release(s);
    }
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    sl_reader_destroy(r);
  }
  /* The same word gets the same id; the default vocabulary is 32768. */
  sl_reader *r;
  ASSERT_OK(sl_text_reader(p, 0, so, NULL, &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(((const int32_t *)sl_sample_at_const(s, 0)->data)[0],
            1 + fnv1a("the") % 32767);
  sl_sample_release(s);
  sl_reader_destroy(r);
  ASSERT_RC(sl_text_reader(p, 0, so, "vocab=1", &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "option vocab must be a whole number");
}

/* --- broken plugins ---------------------------------------------------- */

TEST(wrong_abi_version_is_refused) {
  const char *so = plugin("sl_test_bad_abi");
  const char *p = tmppath("x.txt");
  write_str(p, "x\n");
  char want[1200];
  snprintf(want, sizeof want,
           "text: %s: parser plugin %s: ABI version %u, this libsluice (%s) "
           "expects %u (SL_PARSER_ABI_VERSION): rebuild the plugin against "
           "this sluice.h",
           p, so, SL_PARSER_ABI_VERSION + 1, SL_VERSION_STRING,
           SL_PARSER_ABI_VERSION);
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_text_reader(p, 0, so, NULL, &r), SL_EUNSUPPORTED);
  ASSERT_NULL(r);
  ASSERT_STREQ(sl_last_error(), want);
  char name[600];
  snprintf(name, sizeof name, "text:%s", p);
  sl_open_opts o = SL_OPEN_OPTS_INIT;
  o.parser = so;
  ASSERT_RC(sl_open(name, &o, &r), SL_EUNSUPPORTED);
  ASSERT_STREQ(sl_last_error(), want);
}

TEST(plugins_that_do_not_load) {
  const char *p = tmppath("x.txt");
  write_str(p, "x\n");
  sl_reader *r;
  /* No entry point. */
  const char *so = plugin("sl_test_no_entry");
  ASSERT_RC(sl_text_reader(p, 0, so, NULL, &r), SL_EINVAL);
  char want[1200];
  snprintf(want, sizeof want,
           "text: %s: parser plugin %s: no symbol "
           "sl_parser_entry (",
           p, so);
  ASSERT_CONTAINS(sl_last_error(), want);
  ASSERT_CONTAINS(sl_last_error(), "a plugin exports const sl_parser_api "
                                   "*sl_parser_entry(void)");
  /* An unresolved symbol: RTLD_NOW refuses it at load. */
  so = plugin("sl_test_bad_undef");
  ASSERT_RC(sl_text_reader(p, 0, so, NULL, &r), SL_EINVAL);
  snprintf(want, sizeof want, "text: %s: parser plugin %s: cannot load: ", p,
           so);
  ASSERT_CONTAINS(sl_last_error(), want);
  ASSERT_CONTAINS(sl_last_error(),
                  "undefined symbol: sl_test_no_such_function");
  /* Not a shared object. */
  const char *fake = tmppath("libfake.so");
  write_str(fake, "this is not an ELF file\n");
  ASSERT_RC(sl_text_reader(p, 0, fake, NULL, &r), SL_EINVAL);
  snprintf(want, sizeof want, "text: %s: parser plugin %s: cannot load: ", p,
           fake);
  ASSERT_CONTAINS(sl_last_error(), want);
  ASSERT_CONTAINS(sl_last_error(), fake); /* dlerror names it again */
  /* No such file. */
  ASSERT_RC(sl_text_reader(p, 0, "/nonexistent/libp.so", NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "parser plugin /nonexistent/libp.so: "
                                   "cannot load: ");
  ASSERT_CONTAINS(sl_last_error(), "No such file or directory");
  ASSERT_RC(sl_text_reader(p, 0, "", NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "empty parser plugin path");
  /* The text file is checked before the plugin is loaded. */
  ASSERT_RC(sl_text_reader("/nonexistent/x", 0, so, NULL, &r), SL_EIO);
}

/* Opens `p` with the bad_modes plugin in `mode`; returns the reader. */
static sl_reader *bad_reader(const char *p, const char *mode) {
  char opts[64];
  snprintf(opts, sizeof opts, "mode=%s", mode);
  sl_reader *r;
  ASSERT_OK(sl_text_reader(p, 0, plugin("sl_test_bad_modes"), opts, &r));
  return r;
}

/* The first line's error under `mode`: code and message tail. */
static void expect_line_error(const char *p, const char *mode, int code,
                              const char *tail) {
  sl_reader *r = bad_reader(p, mode);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), code);
  char want[1400];
  snprintf(want, sizeof want, "text: %s:1: parser bad_modes (%s): %s", p,
           plugin("sl_test_bad_modes"), tail);
  ASSERT_STREQ(sl_last_error(), want);
  sl_reader_destroy(r);
}

TEST(samples_are_checked_against_the_declared_schema) {
  const char *p = tmppath("x.txt");
  write_str(p, "abc\nde\n");
  /* The control: a well-behaved mode. */
  sl_reader *r = bad_reader(p, "ok");
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(*(const int64_t *)sl_sample_at_const(s, 0)->data, 3);
  sl_sample_release(s);
  sl_reader_destroy(r);
  expect_line_error(p, "other_schema", SL_ESHAPE,
                    "the sample has schema {y: i32[]}, but the plugin "
                    "declared {x: f32[2]}");
  expect_line_error(p, "unfilled", SL_ESHAPE,
                    "field 'n' was not filled (0 data bytes for 1 elements)");
  expect_line_error(p, "no_sample", SL_EINVAL,
                    "parse returned SL_OK but no sample");
  expect_line_error(p, "eof", SL_EINVAL,
                    "parse returned SL_EOF, which is not an error code");
  expect_line_error(p, "code7", SL_EINVAL,
                    "parse returned 7, not SL_OK, SL_PARSER_SKIP or an error");
  expect_line_error(p, "silent_fail", SL_ECORRUPT, "corrupt data");
}

TEST(init_failures_name_the_plugin) {
  const char *p = tmppath("x.txt");
  write_str(p, "abc\n");
  const char *so = plugin("sl_test_bad_modes");
  char want[1400];
  sl_reader *r;
  snprintf(want, sizeof want,
           "text: %s: parser bad_modes (%s): init with options "
           "\"mode=init_fail\": bad_modes: init refuses on purpose",
           p, so);
  ASSERT_RC(sl_text_reader(p, 0, so, "mode=init_fail", &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), want);
  snprintf(want, sizeof want,
           "text: %s: parser bad_modes (%s): init with options "
           "\"mode=init_silent\": corrupt data",
           p, so);
  ASSERT_RC(sl_text_reader(p, 1, so, "mode=init_silent", &r), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), want);
  /* No schema: refused, and the state it made is destroyed (leak check). */
  ASSERT_RC(sl_text_reader(p, 0, so, "mode=init_noschema", &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "init returned SL_OK but no schema");
}

/* Readers with the same plugin in several threads: each has its own state;
 * the library is loaded once and stays. */
static const char *g_csv_path, *g_csv_so;

static void *read_csv(void *arg) {
  (void)arg;
  for (int k = 0; k < 20; k++) {
    sl_reader *r;
    if (sl_text_reader(g_csv_path, k % 2, g_csv_so, "n=3", &r) < 0) abort();
    int n = 0;
    sl_sample *s;
    while (sl_reader_next(r, &s) == SL_OK) {
      if (((const float *)sl_sample_at_const(s, 0)->data)[2] != (float)n + 2)
        abort();
      n++;
      sl_sample_release(s);
    }
    if (n != 100) abort();
    sl_reader_destroy(r);
  }
  return NULL;
}

TEST(one_plugin_many_readers_and_threads) {
  g_csv_so = plugin("csv_floats");
  const char *p = tmppath("rows.csv");
  FILE *f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  for (int i = 0; i < 100; i++)
    fprintf(f, "%d,%d,%d\n", i, i + 1, i + 2);
  fclose(f);
  g_csv_path = p;
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, read_csv, NULL), 0);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  /* A sample outlives its reader and the plugin's last reader. */
  sl_reader *r;
  ASSERT_OK(sl_text_reader(p, 0, g_csv_so, "n=3", &r));
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_reader_destroy(r);
  ASSERT_EQ(((const float *)sl_sample_at_const(s, 0)->data)[1], 1.0f);
  sl_sample_release(s);
}

/* --- allocation failures ------------------------------------------------- */

/* The library's fault-injection hook (core/internal.h); the test links the
 * static library, where it is visible, and the plugins' sl_* calls bind to
 * this executable's copy, so the hook reaches them too. */
long sl__alloc_fail_after(long n);

TEST(allocation_failures_are_clean) {
  /* Fail the k-th allocation for every k, at open and in every line: each
   * run ends in SL_ENOMEM with a message or a full pass, and never leaks
   * (ASan) or crashes. */
  const char *p = tmppath("alloc.csv");
  write_str(p, "1,2\n\n3,4\r\n5,6");
  const char *so = plugin("csv_floats");
  for (int variant = 0; variant < 4; variant++) {
    int use_mmap = variant % 2;
    const char *parser = variant >= 2 ? so : NULL;
    int completed = 0;
    for (long k = 0; k < 1000 && !completed; k++) {
      sl_reader *r = NULL;
      sl__alloc_fail_after(k);
      int rc = sl_text_reader(p, use_mmap, parser, "n=2", &r);
      int n = 0;
      if (rc == SL_OK) {
        sl_sample *s;
        while ((rc = sl_reader_next(r, &s)) == SL_OK) {
          n++;
          sl_sample_release(s);
        }
      }
      long made = sl__alloc_fail_after(-1);
      sl_reader_destroy(r);
      if (rc == SL_EOF) {
        ASSERT_EQ(n, parser ? 3 : 4);
        completed = made <= k;
      } else {
        ASSERT_RC(rc, SL_ENOMEM);
        ASSERT_TRUE(sl_last_error()[0] != '\0');
      }
    }
    ASSERT_TRUE(completed);
  }
}
