/* test_registry.c - the format registry: tags, extension inference, glob
 * expansion in byte order, the error messages for unknown tags and empty
 * patterns, formats registered at run time, replacement and removal,
 * extensible options, and registration racing with opens. */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "open/registry.h"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- fixtures ---------------------------------------------------------------
 */

#define TMP_TAG "registry"

static const char *tmpdir(void) {
  return test_tmpdir(TMP_TAG);
}

static const char *tmppath(const char *name) {
  return test_tmppath(TMP_TAG, name);
}

static void touch(const char *path) {
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fclose(f);
}

/* Reads a reader to its end; returns the count and checks ids are
 * first, first + 1, ... */
static int64_t drain_ids(sl_reader *r, int64_t first) {
  int64_t n = 0;
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    const sl_tensor *t = sl_sample_at_const(s, 0);
    ASSERT_EQ(*(const int64_t *)t->data, first + n);
    n++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  return n;
}

/* --- tags and inference -----------------------------------------------------
 */

TEST(slr_tag_and_extension_inference) {
  const char *p = tmppath("plain.slr");
  test_write_ids_slr(p, 0, 10, 4);
  char name[600];
  snprintf(name, sizeof name, "slr:%s", p);
  sl_reader *r;
  ASSERT_OK(sl_open(name, NULL, &r));
  ASSERT_STREQ(sl_reader_name(r), "slr");
  ASSERT_EQ(drain_ids(r, 0), 10);
  sl_reader_destroy(r);
  ASSERT_OK(sl_open(p, NULL, &r)); /* bare path: ".slr" picks slr */
  ASSERT_EQ(drain_ids(r, 0), 10);
  sl_reader_destroy(r);
  /* A tag overrides the extension: any file name works with "slr:". */
  const char *odd = tmppath("data.bin");
  test_write_ids_slr(odd, 5, 3, 4);
  snprintf(name, sizeof name, "slr:%s", odd);
  ASSERT_OK(sl_open(name, NULL, &r));
  ASSERT_EQ(drain_ids(r, 5), 3);
  sl_reader_destroy(r);
  /* An absolute path with a ':' inside is a bare path. */
  const char *colon = tmppath("a:b.slr");
  test_write_ids_slr(colon, 7, 2, 4);
  ASSERT_OK(sl_open(colon, NULL, &r));
  ASSERT_EQ(drain_ids(r, 7), 2);
  sl_reader_destroy(r);
  /* options reach the file: a zero-initialised struct with its size. */
  sl_open_opts o = SL_OPEN_OPTS_INIT;
  o.slr.policy = SL_CORRUPT_SKIP_CHUNK;
  ASSERT_OK(sl_open(p, &o, &r));
  sl_reader_destroy(r);
}

TEST(name_errors_are_exact) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_open("foo:x.slr", NULL, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_STREQ(sl_last_error(), "open: unknown format tag 'foo' in "
                                "'foo:x.slr' (known tags: csv, idx, image, npy, slr, text, tfrecord, tokens, wds)");
  ASSERT_RC(sl_open("/data/x.bin", NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
               "open: '/data/x.bin' has no format tag and no known extension "
               "(write TAG:PATH; known tags: csv, idx, image, npy, slr, text, tfrecord, tokens, wds)");
  ASSERT_RC(sl_open("slr:", NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open: 'slr:' has an empty path");
  ASSERT_RC(sl_open("", NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open: '' has an empty path");
  ASSERT_RC(sl_open(NULL, NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open: NULL name");
  ASSERT_RC(sl_open("x.slr", NULL, NULL), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open: NULL out pointer");
  /* A missing file is the format's own error, naming it. */
  const char *missing = tmppath("missing.slr");
  ASSERT_RC(sl_open(missing, NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), missing);
  ASSERT_CONTAINS(sl_last_error(), "No such file or directory");
  /* A relative name whose first component has a ':' reads as a tag. */
  ASSERT_RC(sl_open("run1:data.slr", NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open: unknown format tag 'run1' in "
                                "'run1:data.slr' (known tags: csv, idx, image, npy, slr, text, tfrecord, tokens, wds)");
}

/* --- globs -----------------------------------------------------------------
 */

TEST(globs_expand_in_byte_order) {
  ASSERT_EQ(mkdir(tmppath("g"), 0755), 0);
  /* Written out of order; byte order puts "B" before "a" and "c10" before
   * "c9" whatever the locale. */
  test_write_ids_slr(tmppath("g/c9.slr"), 30, 2, 4);
  test_write_ids_slr(tmppath("g/a.slr"), 10, 3, 4);
  test_write_ids_slr(tmppath("g/c10.slr"), 20, 4, 4);
  test_write_ids_slr(tmppath("g/B.slr"), 0, 5, 4);
  touch(tmppath("g/notes.txt"));
  char pat[600];
  snprintf(pat, sizeof pat, "%s/*.slr", tmppath("g"));
  sl__named_file *f;
  size_t n;
  const char *names[] = {pat, "slr:/dev/null"};
  ASSERT_OK(sl__names_expand("test", names, 2, &f, &n));
  ASSERT_EQ(n, 5);
  const char *want[] = {"g/B.slr", "g/a.slr", "g/c10.slr", "g/c9.slr"};
  for (size_t i = 0; i < 4; i++) {
    ASSERT_STREQ(f[i].path, tmppath(want[i]));
    ASSERT_STREQ(f[i].tag, "slr");
  }
  ASSERT_STREQ(f[4].path, "/dev/null"); /* names keep their order */
  sl__named_files_free(f, n);
  /* sl_open of a pattern chains the matches in that order. */
  sl_reader *r;
  ASSERT_OK(sl_open(pat, NULL, &r));
  ASSERT_STREQ(sl_reader_name(r), "chain");
  /* ids: B 0..4, a 10..12, c10 20..23, c9 30..31 */
  int64_t want_ids[] = {0, 1, 2, 3, 4, 10, 11, 12, 20, 21, 22, 23, 30, 31};
  sl_sample *s;
  for (size_t i = 0; i < sizeof want_ids / sizeof *want_ids; i++) {
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(*(const int64_t *)sl_sample_at_const(s, 0)->data, want_ids[i]);
    sl_sample_release(s);
  }
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  /* ?, [..] and a tag on a pattern. */
  snprintf(pat, sizeof pat, "slr:%s/c[0-9]?.slr", tmppath("g"));
  ASSERT_OK(sl__names_expand("test", (const char *const[]){pat}, 1, &f, &n));
  ASSERT_EQ(n, 1);
  ASSERT_STREQ(f[0].path, tmppath("g/c10.slr"));
  sl__named_files_free(f, n);
  /* Every match is tagged on its own: notes.txt has no known extension. */
  snprintf(pat, sizeof pat, "%s/*", tmppath("g"));
  ASSERT_RC(sl_open(pat, NULL, &r), SL_EINVAL);
  char msg[1024];
  snprintf(msg, sizeof msg,
           "open: '%s' has no format tag and no known extension (write "
           "TAG:PATH; known tags: csv, idx, image, npy, slr, text, tfrecord, tokens, wds)",
           tmppath("g/notes.txt"));
  ASSERT_STREQ(sl_last_error(), msg);
}

TEST(glob_matching_nothing_names_the_pattern) {
  char pat[600];
  snprintf(pat, sizeof pat, "%s/nothing-*.slr", tmpdir());
  sl_reader *r;
  ASSERT_RC(sl_open(pat, NULL, &r), SL_EINVAL);
  char msg[1024];
  snprintf(msg, sizeof msg, "open: pattern '%s' matches no file", pat);
  ASSERT_STREQ(sl_last_error(), msg);
  snprintf(pat, sizeof pat, "slr:/no/such/dir/*.slr");
  ASSERT_RC(sl_open(pat, NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
               "open: pattern '/no/such/dir/*.slr' matches no file");
  sl__named_file *f = (sl__named_file *)1;
  size_t n = 9;
  ASSERT_RC(sl__names_expand("x", NULL, 0, &f, &n), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "x: no file names");
  ASSERT_NULL(f);
  ASSERT_EQ(n, 0);
  const char *names[] = {"a.slr", NULL};
  ASSERT_RC(sl__names_expand("x", names, 2, &f, &n), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "x: name 1 is NULL");
}

/* --- formats registered at run time
 * -------------------------------------------
 */

/* "count:N" yields 0..N-1; ud counts the opens; the options' max_bad_chunks
 * is added to every value, to show the options arrive. */
typedef struct count_ud {
  atomic_int opens;
  int64_t step;
} count_ud;

typedef struct count_state {
  int64_t next, end, add;
  sl_schema *schema;
} count_state;

static int cs_next(void *st, sl_sample **out) {
  count_state *c = st;
  if (c->next >= c->end) return SL_EOF;
  sl_sample *r = sl_sample_new(c->schema);
  int64_t *v;
  SL_FORWARD_IF_ERROR(sl_sample_alloc(r, 0, 0, NULL, (void **)&v));
  *v = c->next++ + c->add;
  *out = r;
  return SL_OK;
}

static int cs_reset(void *st) {
  count_state *c = st;
  c->next = 0;
  return SL_OK;
}

static void cs_destroy(void *st) {
  count_state *c = st;
  sl_schema_release(c->schema);
  free(c);
}

static const sl_reader_vtable count_vt = {"count", cs_next, cs_reset,
                                          cs_destroy};

static int open_count(void *ud, const char *path, const sl_open_opts *opts,
                      sl_reader **out) {
  count_ud *u = ud;
  atomic_fetch_add(&u->opens, 1);
  ASSERT_EQ(opts->size, sizeof(sl_open_opts));
  char *end;
  long n = strtol(path, &end, 10);
  if (end == path || n < 0)
    return sl_set_error(SL_EINVAL, "count: '%s' is not a count", path);
  count_state *c = calloc(1, sizeof *c);
  c->end = n * u->step;
  c->add = opts->slr.max_bad_chunks;
  c->schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(c->schema, "id", SL_I64, 0, NULL));
  *out = sl_reader_new(&count_vt, c, c->schema);
  return *out ? SL_OK : sl_last_error_code();
}

TEST(user_format_register_replace_remove) {
  count_ud a = {0, 1}, b = {0, 2};
  ASSERT_OK(sl_format_register("count", open_count, &a));
  sl_reader *r;
  ASSERT_OK(sl_open("count:5", NULL, &r));
  ASSERT_STREQ(sl_reader_name(r), "count");
  ASSERT_EQ(drain_ids(r, 0), 5);
  sl_reader_destroy(r);
  ASSERT_EQ(atomic_load(&a.opens), 1);
  /* Its error passes through unchanged. */
  ASSERT_RC(sl_open("count:abc", NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "count: 'abc' is not a count");
  /* Options arrive complete. */
  sl_open_opts o = SL_OPEN_OPTS_INIT;
  o.slr.max_bad_chunks = 100;
  ASSERT_OK(sl_open("count:2", &o, &r));
  ASSERT_EQ(drain_ids(r, 100), 2);
  sl_reader_destroy(r);
  /* The unknown-tag message now lists it, sorted. */
  ASSERT_RC(sl_open("nope:1", NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open: unknown format tag 'nope' in 'nope:1' "
                                "(known tags: count, csv, idx, image, npy, slr, text, tfrecord, tokens, wds)");
  /* An extension for it, and the longest suffix wins. */
  ASSERT_OK(sl_format_extension(".cnt", "count"));
  ASSERT_OK(sl_format_extension(".x.cnt", "slr"));
  ASSERT_OK(sl_open("3.cnt", NULL, &r));
  ASSERT_EQ(drain_ids(r, 0), 3);
  sl_reader_destroy(r);
  sl__named_file *f;
  size_t n;
  ASSERT_OK(sl__names_expand("t", (const char *const[]){"a.x.cnt"}, 1, &f, &n));
  ASSERT_STREQ(f[0].tag, "slr");
  sl__named_files_free(f, n);
  ASSERT_OK(sl_format_extension(".x.cnt", NULL));
  /* Re-registering replaces fn and ud. */
  ASSERT_OK(sl_format_register("count", open_count, &b));
  ASSERT_OK(sl_open("count:3", NULL, &r));
  ASSERT_EQ(drain_ids(r, 0), 6);
  sl_reader_destroy(r);
  ASSERT_EQ(atomic_load(&a.opens), 4);
  ASSERT_EQ(atomic_load(&b.opens), 1);
  /* Removal: the tag and names mapped to it by extension are unknown. */
  ASSERT_OK(sl_format_register("count", NULL, NULL));
  ASSERT_RC(sl_open("count:3", NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open: unknown format tag 'count' in "
                                "'count:3' (known tags: csv, idx, image, npy, slr, text, tfrecord, tokens, wds)");
  ASSERT_RC(sl_open("3.cnt", NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open: unknown format tag 'count' in '3.cnt' "
                                "(known tags: csv, idx, image, npy, slr, text, tfrecord, tokens, wds)");
  ASSERT_RC(sl_format_register("count", NULL, NULL), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
               "format_register: cannot remove 'count': no such format");
  ASSERT_OK(sl_format_extension(".cnt", NULL));
  ASSERT_RC(sl_format_extension(".cnt", NULL), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
               "format_extension: cannot remove '.cnt': not mapped");
}

static int open_slr_again(void *ud, const char *path, const sl_open_opts *opts,
                          sl_reader **out) {
  atomic_fetch_add((atomic_int *)ud, 1);
  return sl_slr_reader(path, &opts->slr, 0, UINT64_MAX, out);
}

static int open_nothing(void *ud, const char *path, const sl_open_opts *opts,
                        sl_reader **out) {
  SL_UNUSED(ud), SL_UNUSED(path), SL_UNUSED(opts), SL_UNUSED(out);
  return SL_OK; /* a buggy format: OK without a reader */
}

static int open_silent_failure(void *ud, const char *path,
                               const sl_open_opts *opts, sl_reader **out) {
  SL_UNUSED(ud), SL_UNUSED(path), SL_UNUSED(opts), SL_UNUSED(out);
  return SL_EIO; /* and no message */
}

TEST(builtin_can_be_replaced_and_bad_formats_are_named) {
  const char *p = tmppath("wrapped.slr");
  test_write_ids_slr(p, 0, 4, 4);
  /* Static: the registry keeps ud for later opens (other tests' too). */
  static atomic_int calls;
  atomic_store(&calls, 0);
  ASSERT_OK(sl_format_register("slr", open_slr_again, &calls));
  sl_reader *r;
  ASSERT_OK(sl_open(p, NULL, &r));
  ASSERT_EQ(drain_ids(r, 0), 4);
  sl_reader_destroy(r);
  ASSERT_EQ(atomic_load(&calls), 1);
  ASSERT_OK(sl_format_register("bad", open_nothing, NULL));
  ASSERT_RC(sl_open("bad:x", NULL, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "open: format 'bad' returned no reader for "
                                "'x'");
  ASSERT_OK(sl_format_register("bad", open_silent_failure, NULL));
  ASSERT_RC(sl_open("bad:x", NULL, &r), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "open: format 'bad' failed on 'x': I/O error");
  ASSERT_OK(sl_format_register("bad", NULL, NULL));
  /* Put back a plain slr constructor (the built-in is static). */
  ASSERT_OK(sl_format_register("slr", open_slr_again, &calls));
}

TEST(malformed_tags_and_full_tables) {
  const char *bad[] = {
      "",    "1abc", "a/b",
      "a:b", "a b",  "abcdefghijabcdefghijabcdefghijab"}; /* 32 bytes */
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ASSERT_RC(sl_format_register(bad[i], open_nothing, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_last_error(), "format_register: bad tag");
  }
  ASSERT_RC(sl_format_register(NULL, open_nothing, NULL), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "format_register: bad tag '(null)' (a letter, "
                                "then up to 30 letters, digits, '_', '-' or "
                                "'+')");
  ASSERT_OK(sl_format_register("abcdefghijabcdefghijabcdefghija", open_nothing,
                               NULL)); /* 31 bytes: the longest */
  ASSERT_OK(sl_format_register("abcdefghijabcdefghijabcdefghija", NULL, NULL));
  ASSERT_OK(sl_format_register("A-b_c+9", open_nothing, NULL));
  ASSERT_OK(sl_format_register("A-b_c+9", NULL, NULL));
  ASSERT_RC(sl_format_extension("", "slr"), SL_EINVAL);
  ASSERT_RC(sl_format_extension("a/b", "slr"), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "format_extension: bad extension 'a/b' (1..31 "
                                "bytes, no '/')");
  ASSERT_RC(sl_format_extension(".q", "9x"), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "format_extension: bad tag '9x'");
  /* More formats fill the 64 slots (the built-in formats take the others:
   * counted here, so that adding one does not change this test). */
  char tag[32];
  int added = 0;
  for (int i = 0;; i++) {
    snprintf(tag, sizeof tag, "fill%d", i);
    int rc = sl_format_register(tag, open_nothing, NULL);
    if (rc < 0) {
      ASSERT_RC(rc, SL_ENOMEM);
      char want[96];
      snprintf(want, sizeof want,
               "format_register: cannot add 'fill%d': all 64 format slots "
               "are taken",
               i);
      ASSERT_STREQ(sl_last_error(), want);
      break;
    }
    added++;
  }
  ASSERT_GE(added, 40);
  ASSERT_LE(added, 60); /* slr, idx, text and image at least are built in */
  /* Replacing still works when full. */
  ASSERT_OK(sl_format_register("fill0", open_silent_failure, NULL));
  for (int i = 0; i < added; i++) {
    snprintf(tag, sizeof tag, "fill%d", i);
    ASSERT_OK(sl_format_register(tag, NULL, NULL));
  }
  int free_exts = 0;
  for (int i = 0;; i++) {
    snprintf(tag, sizeof tag, ".e%d", i);
    int rc = sl_format_extension(tag, "slr");
    if (rc < 0) {
      ASSERT_RC(rc, SL_ENOMEM);
      /* .slr, -idx3-ubyte, -idx3-ubyte.gz, .jpg, .jpeg, .png and the other
       * formats' extensions are built in */
      ASSERT_GE(i, 40);
      ASSERT_LE(i, 58);
      free_exts = i;
      break;
    }
  }
  for (int i = 0; i < free_exts; i++) {
    snprintf(tag, sizeof tag, ".e%d", i);
    ASSERT_OK(sl_format_extension(tag, NULL));
  }
}

/* --- options
 * ------------------------------------------------------------------
 */

TEST(extensible_options) {
  const char *p = tmppath("opts.slr");
  test_write_ids_slr(p, 0, 2, 4);
  sl_reader *r;
  sl_open_opts o = {0};
  ASSERT_RC(sl_open(p, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "sl_open_opts: size is 0: set it to "
                                "sizeof(sl_open_opts) (SL_OPEN_OPTS_INIT "
                                "does)");
  /* A caller built with a newer, larger struct: zero extras are fine ... */
  struct {
    sl_open_opts o;
    uint64_t newer[4];
  } big = {SL_OPEN_OPTS_INIT, {0}};
  big.o.size = sizeof big;
  ASSERT_OK(sl_open(p, &big.o, &r));
  sl_reader_destroy(r);
  /* ... options this library does not know are refused. */
  big.newer[2] = 1;
  ASSERT_RC(sl_open(p, &big.o, &r), SL_EUNSUPPORTED);
  char msg[256];
  snprintf(msg, sizeof msg,
           "sl_open_opts: the caller's struct is %zu bytes and sets options "
           "beyond the %zu bytes this libsluice (%s) knows",
           sizeof big, sizeof(sl_open_opts), SL_VERSION_STRING);
  ASSERT_STREQ(sl_last_error(), msg);
  /* An older, smaller struct: the missing fields take their defaults. */
  sl_open_opts small = SL_OPEN_OPTS_INIT;
  small.size = sizeof(size_t);
  ASSERT_OK(sl_open(p, &small, &r));
  sl_reader_destroy(r);
  /* Bad SLR options are the format's error. */
  o = (sl_open_opts)SL_OPEN_OPTS_INIT;
  o.slr.policy = (sl_corrupt_policy)5;
  ASSERT_RC(sl_open(p, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "unknown corruption policy 5");
}

/* --- threads
 * ------------------------------------------------------------------
 */

static const char *g_race_path;

static void *race_open(void *arg) {
  SL_UNUSED(arg);
  for (int i = 0; i < 300; i++) {
    sl_reader *r;
    int rc = sl_open(g_race_path, NULL, &r);
    if (rc == SL_OK) {
      sl_reader_destroy(r);
    } else if (rc != SL_EINVAL) {
      fprintf(stderr, "race_open: %s\n", sl_last_error());
      abort();
    }
    rc = sl_open("racy:1", NULL, &r);
    if (rc == SL_OK) sl_reader_destroy(r);
  }
  return NULL;
}

static void *race_register(void *arg) {
  count_ud *u = arg;
  for (int i = 0; i < 300; i++) {
    if (sl_format_register("racy", open_count, u) < 0) abort();
    if (sl_format_extension(".racy", i % 2 ? "racy" : "slr") < 0) abort();
    if (sl_format_register("racy", NULL, NULL) < 0 &&
        sl_last_error_code() != SL_EINVAL)
      abort();
  }
  return NULL;
}

TEST(registration_races_with_open) {
  const char *p = tmppath("race.slr");
  test_write_ids_slr(p, 0, 3, 4);
  g_race_path = p;
  count_ud u = {0, 1};
  pthread_t t[4];
  pthread_create(&t[0], NULL, race_open, NULL);
  pthread_create(&t[1], NULL, race_open, NULL);
  pthread_create(&t[2], NULL, race_register, &u);
  pthread_create(&t[3], NULL, race_register, &u);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  sl_format_register("racy", NULL, NULL);
  sl_format_extension(".racy", NULL);
  sl_reader *r;
  ASSERT_OK(sl_open(p, NULL, &r));
  ASSERT_EQ(drain_ids(r, 0), 3);
  sl_reader_destroy(r);
}

/* A file literally named like a pattern ("[a].slr") is opened as named
 * when it exists, by sl_open and open_files; a pattern that names no
 * existing file is still a pattern (issue 13). */
TEST(literal_name_that_looks_like_a_pattern) {
  ASSERT_EQ(mkdir(tmppath("lit"), 0755), 0);
  test_write_ids_slr(tmppath("lit/[a].slr"), 100, 3, 4);
  test_write_ids_slr(tmppath("lit/a.slr"), 0, 5, 4);
  char name[600];
  snprintf(name, sizeof name, "%s", tmppath("lit/[a].slr"));
  sl_reader *r;
  ASSERT_OK(sl_open(name, NULL, &r));
  ASSERT_EQ(drain_ids(r, 100), 3);
  sl_reader_destroy(r);
  const char *names[] = {name};
  ASSERT_OK(sl_open_files(names, 1, NULL, &r));
  ASSERT_EQ(drain_ids(r, 100), 3);
  sl_reader_destroy(r);
  /* With a tag too. */
  char tagged[620];
  snprintf(tagged, sizeof tagged, "slr:%s", name);
  ASSERT_OK(sl_open(tagged, NULL, &r));
  ASSERT_EQ(drain_ids(r, 100), 3);
  sl_reader_destroy(r);
  /* Once the literal file is gone, the same name is a pattern again. */
  ASSERT_EQ(unlink(name), 0);
  ASSERT_OK(sl_open(name, NULL, &r));
  ASSERT_EQ(drain_ids(r, 0), 5);
  sl_reader_destroy(r);
}

/* The image tag stays registered in a build without image decoding
 * (cmake -DSLUICE_WITH_IMAGES=OFF) and says how the library was built, by
 * tag and by extension; a full build never says it. */
TEST(image_tag_says_when_built_without_images) {
  ASSERT_EQ(mkdir(tmppath("img"), 0755), 0);
  FILE *f = fopen(tmppath("img/x.jpg"), "wb");
  ASSERT_TRUE(f != NULL);
  fputs("\xff\xd8\xff", f);
  fclose(f);
  char tagged[600];
  snprintf(tagged, sizeof tagged, "image:%s", tmppath("img"));
  const char *names[] = {tagged, tmppath("img/x.jpg")};
  for (int i = 0; i < 2; i++) {
    sl_reader *r = NULL;
    int rc = sl_open(names[i], NULL, &r);
#if SLUICE_WITH_IMAGES
    if (rc == SL_OK) sl_reader_destroy(r);
    else
      ASSERT_TRUE(strstr(sl_last_error(), "built without image") == NULL);
#else
    ASSERT_RC(rc, SL_EUNSUPPORTED);
    ASSERT_TRUE(r == NULL);
    ASSERT_CONTAINS(sl_last_error(), "was built without image support "
                                     "(cmake -DSLUICE_WITH_IMAGES=OFF");
#endif
  }
}
