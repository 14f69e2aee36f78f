/* test_shard_set.c - a mixed shard set (new shards 0-1 of one pack run
 * beside old shards 2-3 of another, as a failed re-pack leaves them) is
 * refused by open_files and sl_open, by glob and by list, naming the odd
 * file; subsets of one set, sets of other prefixes, sets of one and files
 * without the keys are accepted; renamed shards and malformed keys are
 * corrupt (issue 13, item 1, the reader side). */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "open/shard_set.h"

#include <sys/stat.h>
#include <unistd.h>

#define TMP_TAG "shard-set"

/* The writer keeps the sluice.* keys for itself once it records the set
 * (it sets them per shard through this internal call); before that, the
 * schema's metadata is written as given.  Either way the file records the
 * set we ask for. */
void sl__slr_writer_set_member(sl_slr_writer *w, const char *set_id,
                               uint32_t size, uint32_t index)
    __attribute__((weak));

static const char ID_A[] = "1a2b3c4d5e6f708192a3b4c5d6e7f801";
static const char ID_B[] = "9f8e7d6c5b4a39281706f5e4d3c2b1a0";

static char *path_of(const char *name) {
  return test_tmppath_dup(TMP_TAG, name);
}

/* An SLR file of `n` records {id: i64} from `first`; with `id`, recording
 * shard `index` of a set of `size` with that id. */
static void write_member(const char *path, const char *id, uint32_t size,
                         uint32_t index, int64_t first, int64_t n) {
  sl_schema *s = sl_schema_new();
  ASSERT_OK(sl_schema_add(s, "id", SL_I64, 0, NULL));
  char v[2][16];
  if (id) {
    snprintf(v[0], sizeof v[0], "%u", size);
    snprintf(v[1], sizeof v[1], "%u", index);
    ASSERT_OK(sl_schema_set_meta(s, "sluice.set_id", id));
    ASSERT_OK(sl_schema_set_meta(s, "sluice.set_size", v[0]));
    ASSERT_OK(sl_schema_set_meta(s, "sluice.set_index", v[1]));
  }
  sl_slr_writer *w;
  sl_slr_writer_opts o = {1, 0, 4};
  ASSERT_OK(sl_slr_writer_open(path, s, &o, &w));
  if (id && sl__slr_writer_set_member)
    sl__slr_writer_set_member(w, id, size, index);
  for (int64_t i = first; i < first + n; i++) {
    sl_sample *r = sl_sample_new(s);
    int64_t *p;
    ASSERT_OK(sl_sample_alloc(r, 0, 0, NULL, (void **)&p));
    *p = i;
    ASSERT_OK(sl_slr_writer_append(w, r));
    sl_sample_release(r);
  }
  ASSERT_OK(sl_slr_writer_close(w));
  sl_schema_release(s);
}

/* dir/train-0000i-of-00004.slr: shards 0-1 of set A, 2-3 of set B (a
 * re-pack that failed while writing shard 2); 5 records each. */
static const char *mixed_dir(void) {
  static char *dir;
  if (dir) return dir;
  dir = path_of("mixed");
  ASSERT_EQ(mkdir(dir, 0755), 0);
  for (uint32_t i = 0; i < 4; i++) {
    char name[64];
    snprintf(name, sizeof name, "mixed/train-%05u-of-00004.slr", i);
    char *p = path_of(name);
    write_member(p, i < 2 ? ID_A : ID_B, 4, i, 5 * (int64_t)i, 5);
    free(p);
  }
  return dir;
}

static char *shard(const char *dir, uint32_t i, uint32_t k) {
  char *p = malloc(strlen(dir) + 64);
  sprintf(p, "%s/train-%05u-of-%05u.slr", dir, i, k);
  return p;
}

static int64_t drain(sl_reader *r) {
  int64_t n = 0;
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    sl_sample_release(s);
    n++;
  }
  ASSERT_RC(rc, SL_EOF);
  return n;
}

static void expect_mixed(const char *msg, const char *stage, const char *odd,
                         const char *odd_id, uint32_t oi, const char *ref,
                         const char *ref_id, uint32_t ri) {
  char want[2048];
  snprintf(want, sizeof want,
           "%s: %s is from another pack run (set %s, shard %u of 4) than %s "
           "(set %s, shard %u of 4): a mixed shard set (a failed re-pack?)",
           stage, odd, odd_id, oi, ref, ref_id, ri);
  ASSERT_STREQ(msg, want);
}

TEST(mixed_set_by_glob_is_refused_naming_the_odd_file) {
  const char *dir = mixed_dir();
  char pat[600];
  snprintf(pat, sizeof pat, "%s/train-*.slr", dir);
  char *s0 = shard(dir, 0, 4), *s2 = shard(dir, 2, 4);
  const char *names[] = {pat};
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_open_files(names, 1, NULL, &r), SL_ECORRUPT);
  ASSERT_NULL(r);
  expect_mixed(sl_last_error(), "open_files", s2, ID_B, 2, s0, ID_A, 0);
  /* sl_open of the pattern (a chain) refuses it too. */
  ASSERT_RC(sl_open(pat, NULL, &r), SL_ECORRUPT);
  expect_mixed(sl_last_error(), "open", s2, ID_B, 2, s0, ID_A, 0);
  free(s0);
  free(s2);
}

TEST(mixed_set_by_list_is_refused_in_the_lists_order) {
  const char *dir = mixed_dir();
  char *s[4];
  for (uint32_t i = 0; i < 4; i++)
    s[i] = shard(dir, i, 4);
  sl_reader *r;
  const char *names[] = {s[0], s[1], s[2], s[3]};
  ASSERT_RC(sl_open_files(names, 4, NULL, &r), SL_ECORRUPT);
  expect_mixed(sl_last_error(), "open_files", s[2], ID_B, 2, s[0], ID_A, 0);
  /* Listed the other way round, the first file is the reference. */
  const char *back[] = {s[3], s[2], s[1], s[0]};
  ASSERT_RC(sl_open_files(back, 4, NULL, &r), SL_ECORRUPT);
  expect_mixed(sl_last_error(), "open_files", s[1], ID_A, 1, s[3], ID_B, 3);
  /* One file of each part: still mixed. */
  const char *two[] = {s[1], s[3]};
  ASSERT_RC(sl_open_files(two, 2, NULL, &r), SL_ECORRUPT);
  expect_mixed(sl_last_error(), "open_files", s[3], ID_B, 3, s[1], ID_A, 1);
  /* A subset of one set (what one rank may read) is fine. */
  const char *sub[] = {s[0], s[1]};
  ASSERT_OK(sl_open_files(sub, 2, NULL, &r));
  ASSERT_EQ(drain(r), 10);
  sl_reader_destroy(r);
  const char *one[] = {s[3]};
  ASSERT_OK(sl_open_files(one, 1, NULL, &r));
  ASSERT_EQ(drain(r), 5);
  sl_reader_destroy(r);
  for (int i = 0; i < 4; i++)
    free(s[i]);
}

TEST(sets_of_other_prefixes_and_plain_files_are_fine) {
  char *d = path_of("two");
  ASSERT_EQ(mkdir(d, 0755), 0);
  char p[4][700];
  snprintf(p[0], sizeof p[0], "%s/train-00000-of-00002.slr", d);
  snprintf(p[1], sizeof p[1], "%s/train-00001-of-00002.slr", d);
  snprintf(p[2], sizeof p[2], "%s/val-00000-of-00002.slr", d);
  snprintf(p[3], sizeof p[3], "%s/val-00001-of-00002.slr", d);
  write_member(p[0], ID_A, 2, 0, 0, 3);
  write_member(p[1], ID_A, 2, 1, 3, 3);
  write_member(p[2], ID_B, 2, 0, 6, 3);
  write_member(p[3], ID_B, 2, 1, 9, 3);
  /* Files without the keys, and sets of one, named or not. */
  char q[3][700];
  snprintf(q[0], sizeof q[0], "%s/plain.slr", d);
  snprintf(q[1], sizeof q[1], "%s/other-00001-of-00004.slr", d);
  snprintf(q[2], sizeof q[2], "%s/single.slr", d);
  write_member(q[0], NULL, 0, 0, 12, 2);
  write_member(q[1], NULL, 0, 0, 14, 2);
  write_member(q[2], "0123456789abcdef0123456789abcdef", 1, 0, 16, 2);
  char pat[800];
  snprintf(pat, sizeof pat, "%s/*.slr", d);
  sl_reader *r;
  const char *names[] = {pat};
  ASSERT_OK(sl_open_files(names, 1, NULL, &r));
  ASSERT_EQ(drain(r), 18);
  sl_reader_destroy(r);
  ASSERT_OK(sl_open(pat, NULL, &r));
  ASSERT_EQ(drain(r), 18);
  sl_reader_destroy(r);
  free(d);
}

TEST(renamed_shards_and_malformed_keys_are_corrupt) {
  char *d = path_of("odd");
  ASSERT_EQ(mkdir(d, 0755), 0);
  char a[700], b[700];
  snprintf(a, sizeof a, "%s/x-00000-of-00003.slr", d);
  snprintf(b, sizeof b, "%s/x-00002-of-00003.slr", d);
  write_member(a, ID_A, 3, 0, 0, 2);
  write_member(b, ID_A, 3, 1, 2, 2); /* shard 1, renamed to 2 */
  const char *names[] = {a, b};
  sl_reader *r;
  ASSERT_RC(sl_open_files(names, 2, NULL, &r), SL_ECORRUPT);
  char want[2048];
  snprintf(want, sizeof want,
           "open_files: %s is named shard 2 of 3, but it records shard 1 of "
           "3 of set %s (renamed?)",
           b, ID_A);
  ASSERT_STREQ(sl_last_error(), want);
  /* Unnamed members are grouped by their set size. */
  char u[3][700];
  snprintf(u[0], sizeof u[0], "%s/u0.slr", d);
  snprintf(u[1], sizeof u[1], "%s/u1.slr", d);
  snprintf(u[2], sizeof u[2], "%s/u2.slr", d);
  write_member(u[0], ID_A, 2, 0, 0, 2);
  write_member(u[1], ID_B, 3, 1, 2, 2); /* another size: another group */
  write_member(u[2], ID_B, 2, 1, 4, 2);
  const char *two[] = {u[0], u[1]};
  ASSERT_OK(sl_open_files(two, 2, NULL, &r));
  sl_reader_destroy(r);
  const char *three[] = {u[0], u[1], u[2]};
  ASSERT_RC(sl_open_files(three, 3, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), u[2]);
  ASSERT_CONTAINS(sl_last_error(), "a mixed shard set");
  /* The check on its own, with metadata the writer would not write. */
  sl_schema *s = sl_schema_new();
  ASSERT_OK(sl_schema_set_meta(s, "sluice.set_id", "1A2B"));
  const sl_schema *ss[2] = {s, s};
  const char *ps[2] = {"p.slr", "q.slr"};
  ASSERT_RC(sl__shard_set_check("t", ps, ss, 2), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), "t: p.slr: metadata sluice.set_id is '1A2B', "
                                "not 32 lowercase hex digits");
  ASSERT_OK(sl_schema_set_meta(s, "sluice.set_id", ID_A));
  ASSERT_OK(sl_schema_set_meta(s, "sluice.set_size", "4"));
  ASSERT_OK(sl_schema_set_meta(s, "sluice.set_index", "4"));
  ASSERT_RC(sl__shard_set_check(NULL, ps, ss, 2), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), "p.slr: metadata sluice.set_index is '4', "
                                "not a shard index below the set size");
  /* A keyless file named as a shard beside members: an older shard left
   * beside newer ones. */
  sl_schema *none = sl_schema_new();
  ASSERT_OK(sl_schema_set_meta(s, "sluice.set_index", "0"));
  const sl_schema *mix[2] = {s, none};
  const char *mp[2] = {"d/t-00000-of-00004.slr", "d/t-00003-of-00004.slr"};
  ASSERT_RC(sl__shard_set_check(NULL, mp, mix, 2), SL_ECORRUPT);
  snprintf(want, sizeof want,
           "d/t-00003-of-00004.slr has no shard set identity (written by an "
           "older sluice?) but d/t-00000-of-00004.slr, named as a shard of "
           "the same set, is from pack run %s: a mixed shard set (a failed "
           "re-pack?)",
           ID_A);
  ASSERT_STREQ(sl_last_error(), want);
  /* NULL schemas (files that could not be read) take no part. */
  const sl_schema *nul[2] = {s, NULL};
  const char *np[2] = {"d/t-00000-of-00004.slr", "d/other.slr"};
  ASSERT_OK(sl__shard_set_check(NULL, np, nul, 2));
  sl_schema_release(s);
  sl_schema_release(none);
  free(d);
}

/* Out of memory in the check is an error, not a pass. */
long sl__alloc_fail_after(long n);
TEST(allocation_failure_in_the_check) {
  sl_schema *s = sl_schema_new();
  const sl_schema *ss[2] = {s, s};
  const char *ps[2] = {"a", "b"};
  sl__alloc_fail_after(0);
  int rc = sl__shard_set_check("open_files", ps, ss, 2);
  sl__alloc_fail_after(-1);
  ASSERT_RC(rc, SL_ENOMEM);
  ASSERT_CONTAINS(sl_last_error(), "open_files: cannot allocate");
  sl_schema_release(s);
}
