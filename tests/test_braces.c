/*
 * test_braces.c - brace patterns in every name (src/open/braces.c through
 * sl__names_expand) and WebDataset options through sl_open
 * (sl_open_opts.wds): expansion order, bad ranges and the cap, literal
 * file names, slr shards by braces, wds shards with threads/shuffle/rank
 * through sl_open equal to sl_wds_open's.
 */
#include "open/registry.h"
#include "test.h"
#include "test_util.h"

#include <unistd.h>

#define FORMATS SLUICE_SOURCE_DIR "/tests/data/formats/"

/* Expands s and checks the names against want[0..n). */
static void expect_expansion(const char *s, const char *const *want,
                             size_t n) {
  char **v;
  size_t nv;
  ASSERT_OK(sl__braces_expand("t", s, &v, &nv));
  ASSERT_EQ(nv, n);
  for (size_t i = 0; i < n; i++)
    ASSERT_STREQ(v[i], want[i]);
  sl__braces_free(v, nv);
}

TEST(braces_expand_ranges_lists_and_several_groups_in_order) {
  const char *a[] = {"s-008.tar", "s-009.tar", "s-010.tar"};
  expect_expansion("s-{008..010}.tar", a, 3);
  const char *b[] = {"s0-x", "s0-y", "s1-x", "s1-y"};
  expect_expansion("s{0..1}-{x,y}", b, 4);
  const char *c[] = {"x", "x.gz"};
  expect_expansion("x{,.gz}", c, 2);
  const char *d[] = {"plain.slr"};
  expect_expansion("plain.slr", d, 1);
  const char *e[] = {"a{b"}; /* no closing brace: not a group */
  expect_expansion("a{b", e, 1);
  const char *f[] = {"9", "10", "11"}; /* width of the first bound */
  expect_expansion("{9..11}", f, 3);
}

TEST(braces_refuse_bad_ranges_and_huge_expansions) {
  char **v;
  size_t nv;
  const char *bad[] = {"s-{5..1}.tar", "s-{a..3}.tar", "s-{1..}.tar",
                       "s-{..3}.tar", "s-{-1..3}.tar", "s-{1..2x}.tar"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ASSERT_RC(sl__braces_expand("open", bad[i], &v, &nv), SL_EINVAL);
    ASSERT_NOT_NULL(strstr(sl_last_error(), "open: bad range"));
    ASSERT_NOT_NULL(strstr(sl_last_error(), bad[i]));
    ASSERT_TRUE(v == NULL && nv == 0);
  }
  ASSERT_RC(sl__braces_expand("open", "s-{0..99999999}.tar", &v, &nv),
            SL_EINVAL);
  ASSERT_NOT_NULL(strstr(sl_last_error(), "has more than 100000 names"));
  /* Many small groups multiplying past the cap fail too (10^6 names). */
  ASSERT_RC(sl__braces_expand("open",
                              "{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}", &v, &nv),
            SL_EINVAL);
  ASSERT_NOT_NULL(strstr(sl_last_error(), "expand to more than 100000"));
}

/* Reads every id of r (test_write_ids_slr's records). */
static size_t read_ids(sl_reader *r, int64_t *ids, size_t cap) {
  size_t n = 0;
  ASSERT_RC(test_drain_i64(r, ids, cap, &n), SL_EOF);
  return n;
}

TEST(sl_open_expands_braces_for_any_tag_in_order) {
  const char *dir = test_tmpdir("braces");
  char p0[512], p1[512], p2[512], name[600];
  snprintf(p0, sizeof p0, "%s/part-0.slr", dir);
  snprintf(p1, sizeof p1, "%s/part-1.slr", dir);
  snprintf(p2, sizeof p2, "%s/part-2.slr", dir);
  test_write_ids_slr(p0, 0, 3, 2);
  test_write_ids_slr(p1, 100, 2, 2);
  test_write_ids_slr(p2, 200, 1, 2);
  /* A list in an order other than the files' sorted one is kept. */
  snprintf(name, sizeof name, "slr:%s/part-{2,0}.slr", dir);
  sl_reader *r;
  ASSERT_OK(sl_open(name, NULL, &r));
  int64_t ids[16];
  int64_t want[] = {200, 0, 1, 2};
  size_t n = read_ids(r, ids, 16);
  test_assert_i64_values(ids, n, want, 4);
  sl_reader_destroy(r);
  /* A range, bare paths tagged by their extension, then a glob in a group. */
  snprintf(name, sizeof name, "%s/part-{0..1}.slr", dir);
  ASSERT_OK(sl_open(name, NULL, &r));
  int64_t want2[] = {0, 1, 2, 100, 101};
  n = read_ids(r, ids, 16);
  test_assert_i64_values(ids, n, want2, 5);
  sl_reader_destroy(r);
  snprintf(name, sizeof name, "%s/{part-2,part-[01]}.slr", dir);
  ASSERT_OK(sl_open(name, NULL, &r));
  int64_t want3[] = {200, 0, 1, 2, 100, 101};
  n = read_ids(r, ids, 16);
  test_assert_i64_values(ids, n, want3, 6);
  sl_reader_destroy(r);
  /* A brace naming a missing file fails naming that file. */
  snprintf(name, sizeof name, "%s/part-{1..3}.slr", dir);
  ASSERT_TRUE(sl_open(name, NULL, &r) < 0);
  ASSERT_NOT_NULL(strstr(sl_last_error(), "part-3.slr"));
}

TEST(sl_open_takes_a_file_named_with_braces_literally) {
  const char *dir = test_tmpdir("braces_literal");
  char path[512];
  snprintf(path, sizeof path, "%s/odd-{1..2}.slr", dir);
  test_write_ids_slr(path, 7, 2, 2);
  sl_reader *r;
  ASSERT_OK(sl_open(path, NULL, &r));
  int64_t ids[4];
  int64_t want[] = {7, 8};
  size_t n = read_ids(r, ids, 4);
  test_assert_i64_values(ids, n, want, 2);
  sl_reader_destroy(r);
}

/* The __key__ numbers of a wds reader over the fixture shards. */
static size_t read_keys(sl_reader *r, int64_t *keys, size_t cap) {
  sl_sample *s;
  size_t n = 0;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    const sl_tensor *key = sl_sample_field(s, "__key__");
    ASSERT_NOT_NULL(key);
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", (int)key->nbytes,
             (const char *)key->data);
    if (n < cap) keys[n] = atoll(buf + 6); /* "sampleNNNN" */
    n++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  return n;
}

TEST(sl_open_reads_wds_shards_with_wds_options_as_sl_wds_open) {
  const char *name = "wds:" FORMATS "wds-{000000..000002}.tar";
  for (int shuffle = 0; shuffle <= 1; shuffle++) {
    for (uint32_t T = 1; T <= 3; T += 2) {
      for (int rank = 0; rank < 2; rank++) {
        sl_wds_opts w = SL_WDS_OPTS_INIT;
        w.threads = T;
        w.shuffle = shuffle;
        w.seed = 5;
        w.rank = rank;
        w.world = 2;
        sl_open_opts o = SL_OPEN_OPTS_INIT;
        o.wds = &w;
        sl_reader *a, *b;
        ASSERT_OK(sl_open(name, &o, &a));
        ASSERT_OK(sl_wds_open(&name, 1, &w, &b));
        for (int pass = 0; pass < 3; pass++) {
          int64_t ka[16], kb[16];
          size_t na = read_keys(a, ka, 16), nb = read_keys(b, kb, 16);
          ASSERT_EQ(na, nb);
          ASSERT_EQ(na, 6u); /* 12 samples: 6 a rank (docs/DATA.md) */
          test_assert_i64_values(ka, na, kb, nb);
          ASSERT_OK(sl_reader_reset(a));
          ASSERT_OK(sl_reader_reset(b));
        }
        sl_reader_destroy(a);
        sl_reader_destroy(b);
      }
    }
  }
}

TEST(sl_open_without_wds_options_chains_brace_shards_in_order) {
  sl_reader *r;
  ASSERT_OK(sl_open(FORMATS "wds-{000002,000000}.tar", NULL, &r));
  int64_t keys[16];
  int64_t want[] = {8, 9, 10, 11, 0, 1, 2, 3};
  size_t n = read_keys(r, keys, 16);
  test_assert_i64_values(keys, n, want, 8);
  sl_reader_destroy(r);
}

TEST(sl_open_refuses_wds_options_for_other_formats) {
  const char *dir = test_tmpdir("braces_wds");
  char path[512];
  snprintf(path, sizeof path, "%s/ids.slr", dir);
  test_write_ids_slr(path, 0, 2, 2);
  sl_wds_opts w = SL_WDS_OPTS_INIT;
  w.world = 1;
  sl_open_opts o = SL_OPEN_OPTS_INIT;
  o.wds = &w;
  sl_reader *r;
  ASSERT_RC(sl_open(path, &o, &r), SL_EINVAL);
  ASSERT_NOT_NULL(strstr(sl_last_error(), "wds options given"));
  ASSERT_NOT_NULL(strstr(sl_last_error(), "format 'slr'"));
  ASSERT_NULL(r);
  /* And bad wds options are sl_wds_open's errors. */
  w.rank = 3;
  w.world = 2;
  ASSERT_RC(sl_open("wds:" FORMATS "wds-000000.tar", &o, &r), SL_EINVAL);
  ASSERT_NOT_NULL(strstr(sl_last_error(), "rank 3 is not in [0, world 2)"));
}
