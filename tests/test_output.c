/*
 * test_output.c - the one output path of every packer (src/transport/output.h;
 * issue 24, item 1), through its smallest user, the token packer
 * (sl__pack_tokens, what `sluice pack tokens` calls):
 *
 * - a token re-pack that fails at any write (a full disk, EIO), the 3rd
 *   shard's included, leaves the old set byte-identical and readable, and
 *   no temporary file;
 * - every token shard records its run's set identity, and the `tokens:`
 *   readers (sl_tokens_reader, sl_open) refuse a set that mixes two runs,
 *   naming the odd file, while llm.c's own shards (no identity) and two
 *   sets of different names read together are accepted;
 * - temporary names are unique; an output set refuses an input, a folder
 *   and a name given twice before creating anything; the signal-safe
 *   cleanup removes temporaries and the folders a set made.
 * The CLI side (planted links, signals, ulimit -f) is tests/cli/
 * pack_outputs.sh.
 */
#include "pack/import.h"
#include "transport/io_faults.h"
#include "transport/output.h"
#include "test.h"
#include "test_util.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG "output"

static const char *path(const char *name) {
  return test_tmppath(TAG, name);
}

/* A path kept reachable for the process's life. */
static const char *kept(const char *name) {
  static char *keep[32];
  static int n;
  ASSERT_LE(n + 1, 32);
  return keep[n++] = test_tmppath_dup(TAG, name);
}

/* A text file of n bytes `c`; its path is kept for the process's life. */
static const char *text(const char *name, size_t n, char c) {
  char *b = malloc(n);
  ASSERT_NOT_NULL(b);
  memset(b, c, n);
  const char *p = kept(name);
  test_write_file(p, b, n);
  free(b);
  return p;
}

/* Windows of T = 2 over the n shards. */
static int read_windows(const char *const *paths, size_t n, uint64_t *count) {
  sl_tokens_opts o = SL_TOKENS_OPTS_INIT;
  o.seq_len = 2;
  sl_reader *r;
  int rc = sl_tokens_reader(paths, n, &o, &r);
  if (rc < 0) return rc;
  sl_sample *s;
  *count = 0;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    sl_sample_release(s);
    (*count)++;
  }
  sl_reader_destroy(r);
  return rc == SL_EOF ? SL_OK : rc;
}

TEST(token_repack_failing_at_any_write_leaves_the_old_set_readable) {
  mkdir(path("tok"), 0755);
  const char *old_in = text("old.txt", 301, 'o');
  const char *new_in = text("new.txt", 3 * 20000, 'n');
  const char *out = kept("tok/set.bin");
  sl__tokens_pack_opts o = {.eos = -1, .shards = 3, .val = 100};
  const char *oin[] = {old_in}, *nin[] = {new_in};
  ASSERT_OK(sl__pack_tokens(oin, 1, out, &o, NULL));
  char name[4][600];
  const char *shards[3] = {name[1], name[2], name[3]};
  char *old[4];
  size_t old_n[4];
  ASSERT_OK(sl__tokens_shard_name(out, UINT32_MAX, 3, name[0], 600));
  for (uint32_t s = 0; s < 3; s++)
    ASSERT_OK(sl__tokens_shard_name(out, s, 3, name[s + 1], 600));
  for (int s = 0; s < 4; s++) {
    old[s] = test_read_file(name[s], &old_n[s]);
    ASSERT_NOT_NULL(old[s]);
  }
  uint64_t windows = 0;
  ASSERT_OK(read_windows(shards, 3, &windows));
  ASSERT_EQ(windows, 3 * 33); /* 67 tokens a shard: 33 windows of 2 */
  sl__io_fault kinds[] = {SL__IO_ENOSPC, SL__IO_EIO};
  for (int f = 0; f < 2; f++) {
    long k = 0;
    for (;; k++) {
      ASSERT_LE(k, 1000);
      sl__io_fault_after(SL__IO_WRITE, k, kinds[f]);
      int rc = sl__pack_tokens(nin, 1, out, &o, NULL);
      long made = sl__io_fault_after(SL__IO_WRITE, -1, SL__IO_OK);
      ASSERT_EQ(test_count_named(path("tok"), ".tmp-"), 0);
      if (made <= k) {
        ASSERT_OK(rc);
        break;
      }
      ASSERT_RC(rc, SL_EIO);
      ASSERT_CONTAINS(sl_last_error(), "write failed at offset");
      char what[64];
      snprintf(what, sizeof what, "write %ld failed", k);
      for (int s = 0; s < 4; s++)
        test_assert_file_is(name[s], old[s], old_n[s], what);
      ASSERT_OK(read_windows(shards, 3, &windows));
      ASSERT_EQ(windows, 3 * 33);
    }
    /* Every write of the 4 files was faulted once: the val file, then the
     * shards, each a header and its tokens (3rd shard included). */
    ASSERT_GE(k, 4 * 2);
    ASSERT_OK(read_windows(shards, 3, &windows));
    ASSERT_EQ(windows, 9982 + 9983 + 9983); /* 19966, 19967, 19967 tokens */
    for (int s = 0; s < 4; s++)
      test_write_file(name[s], old[s], old_n[s]); /* the old set again */
  }
  for (int s = 0; s < 4; s++)
    free(old[s]);
}

TEST(tokens_readers_refuse_a_mixed_set_naming_the_odd_file) {
  mkdir(path("a"), 0755);
  mkdir(path("b"), 0755);
  const char *in = text("in.txt", 999, 'x');
  const char *ins[] = {in};
  sl__tokens_pack_opts o = {.eos = -1, .shards = 3};
  ASSERT_OK(sl__pack_tokens(ins, 1, path("a/s.bin"), &o, NULL));
  ASSERT_OK(sl__pack_tokens(ins, 1, path("b/s.bin"), &o, NULL));
  char *a[3], *b[3];
  for (int i = 0; i < 3; i++) {
    char n[32];
    snprintf(n, sizeof n, "a/s_%06d.bin", i);
    a[i] = test_tmppath_dup(TAG, n);
    snprintf(n, sizeof n, "b/s_%06d.bin", i);
    b[i] = test_tmppath_dup(TAG, n);
  }
  uint64_t w;
  ASSERT_OK(read_windows((const char *const *)a, 3, &w));
  ASSERT_EQ(w, 3 * 166);
  /* Two sets of other names read together: fine. */
  const char *ab[] = {a[0], a[1], b[2]};
  ASSERT_OK(read_windows(ab, 3, &w));
  /* b's shard 1 copied over a's: the same bytes but another run. */
  size_t n;
  char *bytes = test_read_file(b[1], &n);
  ASSERT_NOT_NULL(bytes);
  test_write_file(a[1], bytes, n);
  free(bytes);
  ASSERT_RC(read_windows((const char *const *)a, 3, &w), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), a[1]);
  ASSERT_CONTAINS(sl_last_error(), "is from another pack run");
  ASSERT_CONTAINS(sl_last_error(), "a mixed shard set");
  /* sl_open over the pattern (one reader per file, chained) too. */
  sl_tokens_opts to = SL_TOKENS_OPTS_INIT;
  to.seq_len = 2;
  to.world = 1;
  sl_open_opts oo = SL_OPEN_OPTS_INIT;
  oo.tokens = &to;
  char *pattern = test_tmppath_dup(TAG, "a/s_*.bin");
  char tagged[700];
  snprintf(tagged, sizeof tagged, "tokens:%s", pattern);
  sl_reader *r = NULL;
  ASSERT_RC(sl_open(tagged, &oo, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), a[1]);
  ASSERT_RC(sl_tokens_open(tagged, &to, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), a[1]);
  /* A shard without an identity (llm.c's, or an older sluice's) beside
   * shards with one: refused, naming it. */
  unsigned char h[1024 + 20] = {0};
  for (int i = 0; i < 4; i++)
    h[i] = (unsigned char)(20240520u >> (8 * i)); /* llm.c's magic */
  h[4] = 1;
  h[8] = 10;
  test_write_file(a[1], h, sizeof h);
  ASSERT_RC(read_windows((const char *const *)a, 3, &w), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), a[1]);
  ASSERT_CONTAINS(sl_last_error(), "has no shard set identity");
  /* A set of such shards only (llm.c's own): not ours to judge. */
  for (int i = 0; i < 3; i++)
    test_write_file(b[i], h, sizeof h);
  ASSERT_OK(read_windows((const char *const *)b, 3, &w));
  ASSERT_EQ(w, 3 * 4);
  /* A flipped bit in the identity fails its CRC. */
  ASSERT_OK(sl__pack_tokens(ins, 1, path("b/s.bin"), &o, NULL));
  bytes = test_read_file(b[2], &n);
  ASSERT_NOT_NULL(bytes);
  bytes[530] ^= 1;
  test_write_file(b[2], bytes, n);
  free(bytes);
  ASSERT_RC(read_windows((const char *const *)b, 3, &w), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), b[2]);
  ASSERT_CONTAINS(sl_last_error(), "fails its CRC");
  free(pattern);
  for (int i = 0; i < 3; i++) {
    free(a[i]);
    free(b[i]);
  }
}

TEST(token_packer_refuses_an_input_as_output_and_makes_folders) {
  const char *in = text("corpus.txt", 50, 'c');
  size_t n0, n1;
  char *before = test_read_file(in, &n0);
  const char *ins[] = {in};
  sl__tokens_pack_opts o = {.eos = -1, .shards = 1};
  ASSERT_RC(sl__pack_tokens(ins, 1, in, &o, NULL), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "is the input");
  char *after = test_read_file(in, &n1);
  ASSERT_EQ(n0, n1);
  ASSERT_EQ(memcmp(before, after, n0), 0);
  free(before);
  free(after);
  ASSERT_OK(sl__pack_tokens(ins, 1, path("new/deep/t.bin"), &o, NULL));
  struct stat st;
  ASSERT_EQ(stat(path("new/deep/t.bin"), &st), 0);
  ASSERT_EQ((long)st.st_size, 1024 + 2 * 50);
}

TEST(output_temporaries_are_unique_and_removed_by_the_signal_cleanup) {
  const char *out = kept("u/v/x.bin");
  const char *names[] = {out, path("u/v/y.bin")};
  sl__out_set *set;
  ASSERT_OK(sl__out_set_open("test", names, 2, NULL, 0, &set));
  sl__out_file *f;
  ASSERT_OK(sl__out_open("test", out, &f));
  ASSERT_NOT_NULL(sl__out_set_file(set, 1));
  ASSERT_NULL(sl__out_set_file(set, 2));
  ASSERT_CONTAINS(sl_last_error(), "output 2 of 2");
  const char *t0 = sl__out_temp_name(sl__out_set_file(set, 0));
  ASSERT_NE(strcmp(t0, sl__out_temp_name(f)), 0);
  ASSERT_EQ(test_count_named(path("u/v"), ".tmp-"), 3);
  ASSERT_OK(sl__out_write(f, "abc", 3));
  ASSERT_EQ(sl__out_bytes(f), 3);
  /* What a handler does: every temporary and made folder goes. */
  sl__out_remove_temps();
  struct stat st;
  ASSERT_NE(stat(path("u"), &st), 0);
  sl__out_abort(f);
  sl__out_set_abort(set);
}

TEST(output_set_refuses_inputs_folders_and_names_given_twice) {
  const char *in = text("input.txt", 5, 'i');
  mkdir(path("adir"), 0755);
  ASSERT_EQ(symlink(in, path("link.bin")), 0);
  const char *inputs[] = {in};
  sl__out_set *set = NULL;
  const char *a[] = {path("fresh/o1"), path("link.bin")};
  ASSERT_RC(sl__out_set_open("test", a, 2, inputs, 1, &set), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "link.bin is the input");
  const char *b[] = {path("fresh/o1"), path("adir")};
  ASSERT_RC(sl__out_set_open("test", b, 2, inputs, 1, &set), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "adir is a folder");
  const char *c[] = {path("fresh/o1"), path("fresh/o1")};
  ASSERT_RC(sl__out_set_open("test", c, 2, inputs, 1, &set), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "is named twice");
  ASSERT_NULL(set);
  struct stat st;
  ASSERT_NE(stat(path("fresh"), &st), 0); /* nothing made */
  /* A commit renames both; an abort leaves nothing, folders included. */
  const char *d[] = {path("fresh/o1"), path("fresh/sub/o2")};
  ASSERT_OK(sl__out_set_open("test", d, 2, inputs, 1, &set));
  ASSERT_OK(sl__out_write(sl__out_set_file(set, 1), "xy", 2));
  sl__out_set_abort(set);
  ASSERT_NE(stat(path("fresh"), &st), 0);
  ASSERT_OK(sl__out_set_open("test", d, 2, inputs, 1, &set));
  ASSERT_OK(sl__out_write(sl__out_set_file(set, 1), "xy", 2));
  ASSERT_EQ(sl__out_set_bytes(set), 2);
  ASSERT_OK(sl__out_set_commit(set));
  ASSERT_EQ(stat(path("fresh/sub/o2"), &st), 0);
  ASSERT_EQ((long)st.st_size, 2);
  ASSERT_EQ(stat(path("fresh/o1"), &st), 0);
  ASSERT_EQ(test_count_named(path("fresh"), ".tmp-"), 0);
}
