/* test_util.c - the helpers of test_util.h. */
#include "test_util.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- scratch files ----------------------------------------------------------
 */

static char g_tmpdir[256];

static int remove_entry(const char *p, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

static void remove_tmpdir(void) {
  if (g_tmpdir[0]) nftw(g_tmpdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

const char *test_tmpdir(const char *tag) {
  if (!g_tmpdir[0]) {
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/sluice-test-%s-XXXXXX", tag);
    ASSERT_NOT_NULL(mkdtemp(g_tmpdir));
    atexit(remove_tmpdir);
  }
  return g_tmpdir;
}

const char *test_tmppath(const char *tag, const char *name) {
  static char buf[TEST_TMPPATH_SLOTS][512];
  static int next;
  char *b = buf[next++ % TEST_TMPPATH_SLOTS];
  snprintf(b, sizeof buf[0], "%s/%s", test_tmpdir(tag), name);
  return b;
}

char *test_tmppath_dup(const char *tag, const char *name) {
  char *b = malloc(512);
  ASSERT_NOT_NULL(b);
  snprintf(b, 512, "%s/%s", test_tmpdir(tag), name);
  return b;
}

/* --- readers of int64 samples ----------------------------------------------
 */

int64_t test_sample_i64(const sl_sample *s, int i) {
  return *(const int64_t *)sl_sample_at_const(s, i)->data;
}

sl_reader *test_range_reader(int64_t n) {
  sl_reader *r;
  ASSERT_OK(sl_reader_range(n, &r));
  return r;
}

int test_drain_i64(sl_reader *r, int64_t *v, size_t cap, size_t *n) {
  *n = 0;
  for (;;) {
    sl_sample *s;
    int rc = sl_reader_next(r, &s);
    if (rc != SL_OK) return rc;
    if (*n == cap) test_fail(__FILE__, __LINE__, "more than %zu samples", cap);
    v[(*n)++] = test_sample_i64(s, 0);
    sl_sample_release(s);
  }
}

void test_assert_i64_values(const int64_t *v, size_t n, const int64_t *want,
                            size_t m) {
  ASSERT_EQ(n, m);
  for (size_t i = 0; i < n; i++)
    if (v[i] != want[i])
      test_fail(__FILE__, __LINE__, "value %zu: %" PRId64 " != %" PRId64, i,
                v[i], want[i]);
}
