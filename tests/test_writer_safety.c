/*
 * test_writer_safety.c - what a pack promises about the files it replaces
 * and the files it makes (issue 13, items 1, 2, 3, 6, 10, 13, 22):
 *
 * - a failed re-pack of a shard set (a full disk at any write) leaves the
 *   old set byte-identical, and no temporary file;
 * - every shard records the set it belongs to (sluice.set_id/size/index);
 * - temporary names are unique and created with O_EXCL: two writers of one
 *   path do not share a file, a planted symlink is not followed;
 * - a chunk's raw size (record table included) stays within the target,
 *   and the largest is recorded as sluice.max_chunk_raw;
 * - an output that is an input is refused, also through links;
 * - missing output folders are created;
 * - a before_commit hook that fails (the CLI's summary on a full stdout)
 *   leaves the old outputs;
 * - the cancel flag stops a level-19 compression within a block.
 *
 * The packer is sl__pack_text (what `sluice pack text` calls), over files
 * in a scratch directory.
 */
#include "pack/import.h"
#include "transport/io_faults.h"
#include "test.h"
#include "test_util.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TAG "writer_safety"

static const char *path(const char *name) {
  return test_tmppath(TAG, name);
}

/* test_tmppath_dup kept reachable for the process's life. */
static char *g_kept[64];
static int g_nkept;

static const char *keep_path(const char *name) {
  ASSERT_LE(g_nkept + 1, 64);
  return g_kept[g_nkept++] = test_tmppath_dup(TAG, name);
}

static void spill(const char *p, const char *data, size_t n) {
  FILE *f = fopen(p, "wb");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fwrite(data, 1, n, f), n);
  ASSERT_EQ(fclose(f), 0);
}

/* The whole file in a malloc'd buffer (*n bytes), or NULL when missing. */
/* Text lines "<tag> line <i>" for i in [0, n). */
static void lines_file(const char *p, const char *tag, int n) {
  size_t cap = (size_t)n * 40 + 1, len = 0;
  char *b = malloc(cap);
  ASSERT_NOT_NULL(b);
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(b + len, cap - len, "%s line %d\n", tag, i);
  spill(p, b, len);
  free(b);
}

/* Entries of the scratch directory whose name contains `part`. */
static int count_named(const char *part) {
  return test_count_named(test_tmpdir(TAG), part);
}

static sl_schema *text_schema(void) {
  sl_schema *s = sl_schema_new();
  ASSERT_NOT_NULL(s);
  ASSERT_OK(sl_schema_add(s, "text", SL_BYTES, 1, (int64_t[]){SL_DIM_VAR}));
  return s;
}

static sl_sample *text_record(sl_schema *s, const char *text, size_t n) {
  sl_sample *r = sl_sample_new(s);
  ASSERT_NOT_NULL(r);
  void *p;
  ASSERT_OK(sl_sample_alloc(r, 0, 1, (int64_t[]){(int64_t)n}, &p));
  memcpy(p, text, n);
  return r;
}

/* --- item 1: a failed re-pack keeps the old set ----------------------------
 */

TEST(failed_repack_keeps_the_old_set) {
  const char *old_in = keep_path("old.txt");
  const char *new_in = keep_path("new.txt");
  const char *out = keep_path("set.slr");
  lines_file(old_in, "old", 2000);
  lines_file(new_in, "new", 2400);
  sl__pack_opts o = {.shards = 4, .writer = {.records_per_chunk = 100}};
  const char *oin[] = {old_in}, *nin[] = {new_in};
  ASSERT_OK(sl__pack_text(oin, 1, out, &o, NULL));
  char name[4][600];
  char *old[4];
  size_t old_n[4];
  /* ENOSPC (and EIO) at every write of the re-pack in turn: each failed run
   * leaves the four old shards exactly as they were, and no temporary. */
  sl__io_fault kinds[] = {SL__IO_ENOSPC, SL__IO_EIO};
  for (int f = 0; f < 2; f++) {
    for (uint32_t s = 0; s < 4; s++) {
      ASSERT_OK(sl__shard_name(out, s, 4, name[s], sizeof name[s]));
      old[s] = test_read_file(name[s], &old_n[s]);
      ASSERT_NOT_NULL(old[s]);
    }
    long k = 0;
    for (;; k++) {
      ASSERT_LE(k, 10000);
      sl__io_fault_after(SL__IO_WRITE, k, kinds[f]);
      int rc = sl__pack_text(nin, 1, out, &o, NULL);
      long made = sl__io_fault_after(SL__IO_WRITE, -1, SL__IO_OK);
      ASSERT_EQ(count_named(".tmp-"), 0);
      if (made <= k) {
        ASSERT_OK(rc);
        break;
      }
      ASSERT_RC(rc, SL_EIO);
      char what[64];
      snprintf(what, sizeof what, "write %ld failed", k);
      for (uint32_t s = 0; s < 4; s++)
        test_assert_file_is(name[s], old[s], old_n[s], what);
    }
    /* The last run succeeded: the new set is in place; put the old back. */
    ASSERT_GE(k, 4 * 5);
    sl_slr_file *sf;
    ASSERT_OK(sl_slr_open(name[3], NULL, &sf));
    ASSERT_EQ(sl_slr_records(sf), 600);
    sl_slr_close(sf);
    ASSERT_OK(sl__pack_text(oin, 1, out, &o, NULL));
    for (uint32_t s = 0; s < 4; s++)
      free(old[s]);
  }
}

/* Every shard of a run records one random set id, the set size and its
 * index; the next run has another id; a single file is a set of one. */
TEST(every_shard_records_its_set) {
  const char *in = keep_path("ids.txt");
  const char *out = keep_path("ids.slr");
  lines_file(in, "x", 10);
  const char *ins[] = {in};
  char first_id[2][SL__SET_ID_LEN + 1];
  for (int run = 0; run < 2; run++) {
    sl__pack_opts o = {.shards = 3};
    ASSERT_OK(sl__pack_text(ins, 1, out, &o, NULL));
    for (uint32_t s = 0; s < 3; s++) {
      char name[600], idx[16];
      ASSERT_OK(sl__shard_name(out, s, 3, name, sizeof name));
      sl_slr_file *f;
      ASSERT_OK(sl_slr_open(name, NULL, &f));
      const sl_schema *sc = sl_slr_schema(f);
      const char *id = sl_schema_meta(sc, "sluice.set_id");
      ASSERT_NOT_NULL(id);
      ASSERT_EQ(strlen(id), SL__SET_ID_LEN);
      ASSERT_EQ(strspn(id, "0123456789abcdef"), SL__SET_ID_LEN);
      if (s == 0) snprintf(first_id[run], sizeof first_id[run], "%s", id);
      ASSERT_STREQ(id, first_id[run]);
      ASSERT_STREQ(sl_schema_meta(sc, "sluice.set_size"), "3");
      snprintf(idx, sizeof idx, "%u", s);
      ASSERT_STREQ(sl_schema_meta(sc, "sluice.set_index"), idx);
      sl_slr_close(f);
    }
  }
  ASSERT_TRUE(strcmp(first_id[0], first_id[1]) != 0);
  /* One file: a set of one. */
  ASSERT_OK(sl__pack_text(ins, 1, out, NULL, NULL));
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(out, NULL, &f));
  const sl_schema *sc = sl_slr_schema(f);
  ASSERT_EQ(strlen(sl_schema_meta(sc, "sluice.set_id")), SL__SET_ID_LEN);
  ASSERT_STREQ(sl_schema_meta(sc, "sluice.set_size"), "1");
  ASSERT_STREQ(sl_schema_meta(sc, "sluice.set_index"), "0");
  sl_slr_close(f);
}

/* A schema copied from another file brings that file's sluice.* entries:
 * the writer replaces them with its own (no key twice). */
TEST(sluice_keys_of_the_schema_are_replaced_by_the_writers) {
  sl_schema *s = text_schema();
  ASSERT_OK(sl_schema_set_meta(s, "sluice.set_id", "not-this-one"));
  ASSERT_OK(sl_schema_set_meta(s, "sluice.max_chunk_raw", "5"));
  ASSERT_OK(sl_schema_set_meta(s, "mine", "kept"));
  sl_slr_writer *w;
  const char *p = path("copied.slr");
  ASSERT_OK(sl_slr_writer_open(p, s, NULL, &w));
  sl_sample *r = text_record(s, "hello", 5);
  ASSERT_OK(sl_slr_writer_append(w, r));
  sl_sample_release(r);
  ASSERT_OK(sl_slr_writer_close(w));
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(p, NULL, &f));
  ASSERT_OK(sl_slr_verify(f));
  const sl_schema *fs = sl_slr_schema(f);
  ASSERT_STREQ(sl_schema_meta(fs, "mine"), "kept");
  ASSERT_EQ(strlen(sl_schema_meta(fs, "sluice.set_id")), SL__SET_ID_LEN);
  /* 8-byte table + one record of 8 (5 bytes padded). */
  ASSERT_STREQ(sl_schema_meta(fs, "sluice.max_chunk_raw"), "24");
  sl_slr_close(f);
  sl_schema_release(s);
}

/* --- item 3: temporary files -----------------------------------------------
 */

TEST(two_writers_of_one_path_do_not_share_a_temporary) {
  sl_schema *s = text_schema();
  const char *p = path("twice.slr");
  sl_slr_writer *a, *b;
  ASSERT_OK(sl_slr_writer_open(p, s, NULL, &a));
  ASSERT_OK(sl_slr_writer_open(p, s, NULL, &b));
  ASSERT_EQ(test_temporaries_of(p), 2);
  for (int i = 0; i < 300; i++) {
    char line[64];
    int n = snprintf(line, sizeof line, "writer a, record %d", i);
    sl_sample *r = text_record(s, line, (size_t)n);
    ASSERT_OK(sl_slr_writer_append(a, r));
    sl_sample_release(r);
    if (i % 3 == 0) {
      n = snprintf(line, sizeof line, "b %d", i);
      r = text_record(s, line, (size_t)n);
      ASSERT_OK(sl_slr_writer_append(b, r));
      sl_sample_release(r);
    }
  }
  ASSERT_OK(sl_slr_writer_close(a));
  ASSERT_OK(sl_slr_writer_close(b));
  /* The last close wins, and its file is whole. */
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(p, NULL, &f));
  ASSERT_OK(sl_slr_verify(f));
  ASSERT_EQ(sl_slr_records(f), 100);
  sl_slr_close(f);
  ASSERT_EQ(count_named(".tmp-"), 0);
  sl_schema_release(s);
}

TEST(planted_symlink_is_not_followed) {
  sl_schema *s = text_schema();
  const char *victim = keep_path("victim.txt");
  const char *p = keep_path("planted.slr");
  spill(victim, "precious\n", 9);
  /* The names a writer of this process used to take. */
  char planted[700];
  snprintf(planted, sizeof planted, "%s.tmp-%ld", p, (long)getpid());
  ASSERT_EQ(symlink(victim, planted), 0);
  sl_slr_writer *w;
  ASSERT_OK(sl_slr_writer_open(p, s, NULL, &w));
  sl_sample *r = text_record(s, "data", 4);
  ASSERT_OK(sl_slr_writer_append(w, r));
  sl_sample_release(r);
  ASSERT_OK(sl_slr_writer_close(w));
  size_t n = 0;
  char *v = test_read_file(victim, &n);
  ASSERT_NOT_NULL(v);
  ASSERT_EQ(n, 9);
  ASSERT_TRUE(memcmp(v, "precious\n", 9) == 0);
  free(v);
  struct stat st;
  ASSERT_EQ(lstat(planted, &st), 0);
  ASSERT_TRUE(S_ISLNK(st.st_mode));
  unlink(planted);
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(p, NULL, &f));
  ASSERT_OK(sl_slr_verify(f));
  sl_slr_close(f);
  sl_schema_release(s);
}

/* --- item 6: chunk sizes ---------------------------------------------------
 */

TEST(chunks_count_the_record_table_against_the_target) {
  sl_schema *s = text_schema();
  const char *p = path("target.slr");
  sl_slr_writer_opts o = {.chunk_bytes = 4096};
  sl_slr_writer *w;
  ASSERT_OK(sl_slr_writer_open(p, s, &o, &w));
  /* 8-byte records: 512 of them fill 4096 bytes of body, but their table
   * takes 2048 more. */
  for (int i = 0; i < 5000; i++) {
    sl_sample *r = text_record(s, "12345678", 8);
    ASSERT_OK(sl_slr_writer_append(w, r));
    sl_sample_release(r);
  }
  ASSERT_OK(sl_slr_writer_close(w));
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(p, NULL, &f));
  uint64_t max_raw = 0;
  for (uint64_t c = 0; c < sl_slr_chunks(f); c++) {
    sl_slr_chunk_info ci;
    ASSERT_OK(sl_slr_chunk_info_get(f, c, &ci));
    ASSERT_LE(ci.raw_size, 4096);
    if (ci.raw_size > max_raw) max_raw = ci.raw_size;
  }
  /* 204 records of 16 bytes and their table: 816 + 3264. */
  ASSERT_EQ(max_raw, 4080);
  char want[32];
  snprintf(want, sizeof want, "%llu", (unsigned long long)max_raw);
  ASSERT_STREQ(sl_schema_meta(sl_slr_schema(f), "sluice.max_chunk_raw"), want);
  ASSERT_OK(sl_slr_verify(f));
  sl_slr_close(f);
  sl_schema_release(s);
}

/* --- item 2: an output that is an input ------------------------------------
 */

static void refused(const char *const *ins, size_t n, const char *out,
                    uint32_t shards) {
  sl__pack_opts o = {.shards = shards};
  ASSERT_RC(sl__pack_text(ins, n, out, &o, NULL), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "is the input");
}

TEST(output_that_is_an_input_is_refused) {
  const char *in = keep_path("in.txt");
  const char *other = keep_path("other.txt");
  const char *hard = keep_path("hard.txt");
  const char *soft = keep_path("soft.txt");
  const char *in_link = keep_path("in-link.txt");
  const char *shard = keep_path("s-00001-of-00002.slr");
  spill(in, "keep me\n", 8);
  spill(other, "other\n", 6);
  ASSERT_EQ(link(in, hard), 0);
  ASSERT_EQ(symlink(in, soft), 0);
  ASSERT_EQ(symlink(shard, in_link), 0);
  spill(shard, "shard\n", 6);
  const char *a[] = {other, in};
  refused(a, 2, in, 0);        /* -o in.txt */
  refused(a, 2, hard, 0);      /* a hard link of it */
  refused(a, 2, soft, 0);      /* a symlink to it */
  const char *b[] = {in_link}; /* an input that is a link to a shard */
  refused(b, 1, test_tmppath(TAG, "s.slr"), 2);
  size_t n = 0;
  char *v = test_read_file(in, &n);
  ASSERT_EQ(n, 8);
  ASSERT_TRUE(memcmp(v, "keep me\n", 8) == 0);
  free(v);
  v = test_read_file(shard, &n);
  ASSERT_EQ(n, 6);
  free(v);
  ASSERT_EQ(count_named(".tmp-"), 0);
}

/* --- item 22: missing folders ----------------------------------------------
 */

TEST(missing_output_folders_are_created) {
  const char *in = keep_path("mk.txt");
  lines_file(in, "m", 5);
  const char *ins[] = {in};
  const char *out = keep_path("new/deeper/out.slr");
  ASSERT_OK(sl__pack_text(ins, 1, out, NULL, NULL));
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(out, NULL, &f));
  ASSERT_EQ(sl_slr_records(f), 5);
  sl_slr_close(f);
  unlink(out);
  rmdir(test_tmppath(TAG, "new/deeper"));
  rmdir(test_tmppath(TAG, "new"));
  /* A pack that fails removes the folders it made. */
  const char *missing[] = {keep_path("no-such-input.txt")};
  sl__pack_opts o = {.shards = 2};
  ASSERT_RC(sl__pack_text(missing, 1, out, &o, NULL), SL_EIO);
  struct stat st;
  ASSERT_TRUE(stat(test_tmppath(TAG, "new"), &st) != 0);
  /* A file where a folder should be is named. */
  spill(test_tmppath(TAG, "afile"), "x", 1);
  ASSERT_RC(sl__pack_text(ins, 1, test_tmppath(TAG, "afile/x.slr"), NULL, NULL),
            SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "is not a folder");
}

/* --- item 13: the commit hook ----------------------------------------------
 */

static int g_hook_calls;
static uint64_t g_hook_bytes;

static int failing_hook(void *ud, uint64_t records, uint64_t bytes) {
  (void)ud;
  (void)records;
  g_hook_calls++;
  g_hook_bytes = bytes;
  return sl_set_error(SL_EIO, "stdout: No space left on device");
}

TEST(failing_before_commit_leaves_the_old_outputs) {
  const char *in = keep_path("hook.txt");
  const char *out = keep_path("hook.slr");
  lines_file(in, "h", 50);
  const char *ins[] = {in};
  ASSERT_OK(sl__pack_text(ins, 1, out, NULL, NULL));
  size_t n0 = 0, n1 = 0;
  char *before = test_read_file(out, &n0);
  lines_file(in, "changed", 70);
  sl__pack_opts o = {.before_commit = failing_hook};
  ASSERT_RC(sl__pack_text(ins, 1, out, &o, NULL), SL_EIO);
  ASSERT_EQ(g_hook_calls, 1);
  ASSERT_GE(g_hook_bytes, 100);
  char *after = test_read_file(out, &n1);
  ASSERT_EQ(n0, n1);
  ASSERT_TRUE(memcmp(before, after, n0) == 0);
  ASSERT_EQ(count_named(".tmp-"), 0);
  free(before);
  free(after);
}

/* --- item 10: cancellation within a compression block ----------------------
 */

static volatile sig_atomic_t g_cancel;
static double g_cancel_at;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The flag is set as sluice pack sets it: by a signal handler on the
 * writing thread (so the test has no data race for TSan to see). */
static void on_usr1(int sig) {
  (void)sig;
  g_cancel = 2;
}

static void *cancel_later(void *arg) {
  usleep(300 * 1000);
  g_cancel_at = now_s();
  pthread_kill(*(pthread_t *)arg, SIGUSR1);
  return NULL;
}

TEST(cancel_stops_compression_within_a_block) {
  sl_schema *s = text_schema();
  const char *p = path("cancel.slr");
  sl_slr_writer_opts o = {.level = 19, .chunk_bytes = 256u << 20};
  sl_slr_writer *w;
  ASSERT_OK(sl_slr_writer_open(p, s, &o, &w));
  sl__slr_writer_set_cancel(w, &g_cancel);
  /* 48 MiB of pseudo-random words: minutes at level 19 in one chunk. */
  static char line[65536];
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 768; i++) {
    for (size_t k = 0; k < sizeof line; k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      line[k] = (char)('a' + (x >> 40) % 26);
    }
    sl_sample *r = text_record(s, line, sizeof line);
    ASSERT_OK(sl_slr_writer_append(w, r));
    sl_sample_release(r);
  }
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  pthread_t t, self = pthread_self();
  ASSERT_EQ(pthread_create(&t, NULL, cancel_later, &self), 0);
  int rc = sl_slr_writer_close(w);
  double end = now_s();
  pthread_join(t, NULL); /* orders g_cancel_at's write before our read */
  double took = end - g_cancel_at;
  sigaction(SIGUSR1, &old, NULL);
  ASSERT_RC(rc, SL_EKILLED);
  ASSERT_CONTAINS(sl_last_error(), "interrupted");
  printf("stopped %.3f s after the cancel flag was set\n", took);
  ASSERT_TRUE(took < 1.0); /* a block takes ~50 ms; slack for a busy host */
  struct stat st;
  ASSERT_TRUE(stat(p, &st) != 0);
  ASSERT_EQ(test_temporaries_of(p), 0);
  sl_schema_release(s);
}

/* --- sl__sink_finish: an importer's end -------------------------------------
 */

TEST(sink_finish_commits_on_ok_and_aborts_on_an_error) {
  sl_schema *s = text_schema();
  sl_sample *r = text_record(s, "abc", 3);
  const char *out = keep_path("finish.slr");
  sl__pack_sink *sink;
  ASSERT_OK(sl__sink_open(out, s, SL__TOTAL_UNKNOWN, NULL, NULL, 0, &sink));
  ASSERT_OK(sl__sink_append(sink, r));
  ASSERT_RC(sl__sink_finish(sink, SL_EIO, NULL), SL_EIO);
  struct stat st;
  ASSERT_TRUE(stat(out, &st) != 0);
  ASSERT_EQ(test_temporaries_of(out), 0);
  uint64_t records = 0;
  ASSERT_OK(sl__sink_open(out, s, SL__TOTAL_UNKNOWN, NULL, NULL, 0, &sink));
  ASSERT_OK(sl__sink_append(sink, r));
  ASSERT_OK(sl__sink_append(sink, r));
  ASSERT_OK(sl__sink_finish(sink, SL_OK, &records));
  ASSERT_EQ(records, 2);
  ASSERT_TRUE(stat(out, &st) == 0);
  unlink(out);
  sl_sample_release(r);
  sl_schema_release(s);
}
