/*
 * test_util.h - helpers shared by several C test files (tests/test_util.c is
 * compiled into every test executable).  Each one fails the running test
 * through test_fail (test.h) instead of returning an error.
 */
#ifndef SLUICE_TEST_UTIL_H
#define SLUICE_TEST_UTIL_H

#include "test.h"

#include <stdbool.h>
#include <sys/types.h>

/* --- scratch files ----------------------------------------------------------
 * One scratch directory per test process, removed with its contents at exit.
 * `tag` names the test file in the directory's name; the first call creates
 * the directory, later calls return it whatever their tag. */

/* The process's scratch directory, "/tmp/sluice-test-<tag>-XXXXXX". */
const char *test_tmpdir(const char *tag);

/* "<test_tmpdir(tag)>/<name>" in one of TEST_TMPPATH_SLOTS static buffers
 * used in turn, so that many results may be used at once (e.g. two in one
 * call).  Not thread-safe. */
#define TEST_TMPPATH_SLOTS 8
const char *test_tmppath(const char *tag, const char *name);

/* "<test_tmpdir(tag)>/<name>" in a new malloc'd string (the caller frees
 * it, or keeps it for the process's life). */
char *test_tmppath_dup(const char *tag, const char *name);

/* --- readers of int64 samples -----------------------------------------------
 */

/* Field `i` of `s` read as an int64 (the field must be an i64 scalar). */
int64_t test_sample_i64(const sl_sample *s, int i);

/* sl_reader_range(n): samples {i: i64} holding 0, 1, ..., n-1. */
sl_reader *test_range_reader(int64_t n);

/* The LM stages' documents (budget tests): `src`'s samples {v: i64} mapped
 * (sl_map_parallel on one thread) to {ids: i32[v % 50 + 1]} holding v,
 * v+1, ...: 1 to 50 tokens.  Takes `src`. */
sl_reader *test_docs(sl_reader *src);

/* Reads `r` until it stops yielding, storing field 0 of each sample (an
 * int64) in v[0..*n), at most `cap` of them (more fails the test); returns
 * the code that ended the pass (SL_EOF or an error). */
int test_drain_i64(sl_reader *r, int64_t *v, size_t cap, size_t *n);

/* sl_reader_length(r), which must succeed; the test then reads one whole
 * pass of `r` (which must end with SL_EOF), checks that it yielded exactly
 * that many samples, and resets `r`.  Returns the length. */
uint64_t test_length_checked(sl_reader *r);

/* Fails unless v[0..n) equals the `m` expected values want[0..m). */
void test_assert_i64_values(const int64_t *v, size_t n, const int64_t *want,
                            size_t m);

/* The most values EXPECT and EXPECT_NONE drain from one pass. */
#define TEST_EXPECT_MAX 256

/* EXPECT(r, rc, v0, v1, ...): the pass of `r` yields exactly the int64
 * values v0, v1, ... (field 0) and then ends with `rc`. */
#define EXPECT(r, rc, ...)                                                     \
  do {                                                                         \
    static const int64_t expect_vals_[] = {__VA_ARGS__};                       \
    int64_t expect_got_[TEST_EXPECT_MAX];                                      \
    size_t expect_n_;                                                          \
    ASSERT_RC(test_drain_i64((r), expect_got_, TEST_EXPECT_MAX, &expect_n_),   \
              (rc));                                                           \
    test_assert_i64_values(expect_got_, expect_n_, expect_vals_,               \
                           sizeof expect_vals_ / sizeof expect_vals_[0]);      \
  } while (0)

/* EXPECT_NONE(r, rc): the pass of `r` ends with `rc` before yielding
 * anything. */
#define EXPECT_NONE(r, rc)                                                     \
  do {                                                                         \
    int64_t expect_got_[TEST_EXPECT_MAX];                                      \
    size_t expect_n_;                                                          \
    ASSERT_RC(test_drain_i64((r), expect_got_, TEST_EXPECT_MAX, &expect_n_),   \
              (rc));                                                           \
    ASSERT_EQ(expect_n_, 0);                                                   \
  } while (0)

/* --- files ------------------------------------------------------------------
 */

/* Writes n bytes to path (created or truncated); fails the test on error. */
void test_write_file(const char *path, const void *data, size_t n);
/* The whole file in a new malloc'd buffer (*n its size), or NULL when it
 * cannot be opened. */
char *test_read_file(const char *path, size_t *n);
/* Fails the test (naming `what`, e.g. "write 3 failed") unless the file at
 * path holds exactly data[0..n). */
void test_assert_file_is(const char *path, const void *data, size_t n,
                         const char *what);
/* The entries of folder `dir` whose name contains `part`. */
int test_count_named(const char *dir, const char *part);
/* Writes n bytes gzip-compressed to path; fails the test on error. */
void test_write_gz(const char *path, const void *data, size_t n);
/* An idx header (MNIST format) of element `type` (0x08 = u8, ...) with
 * `rank` big-endian dims into h (room for 4 + 4 * rank bytes); returns its
 * length. */
size_t test_idx_header(unsigned char *h, unsigned type, int rank,
                       const uint32_t *dims);

/* A new sample of `schema` (field 0 a scalar i64) holding `v` in *out.
 * Returns SL_OK, or the error of sl_sample_new/alloc (nothing leaked). */
int test_i64_sample(const sl_schema *schema, int64_t v, sl_sample **out);

/* Sleeps `us` microseconds. */
void test_sleep_us(long us);
/* Moves the modification time of `path` `seconds` on (as a rewrite a
 * little later would), keeping its bytes: fails the test on an error. */
void test_touch_later(const char *path, int seconds);
/* CLOCK_MONOTONIC in seconds. */
double test_now_s(void);
/* Writes an SLR file of `n` records {id: i64} numbered from `first`,
 * `per_chunk` records per chunk, level 1. */
void test_write_ids_slr(const char *path, int64_t first, int64_t n,
                        uint32_t per_chunk);

/* How many of the SLR writer's temporaries of `path` exist: entries of its
 * folder named "<name>.tmp-" followed by anything (the writer's
 * NAME.tmp-PID-XXXXXX, any process). */
int test_temporaries_of(const char *path);

/* --- the resume contract (sl_reader_save / sl_reader_restore) ------------ */

/* A digest of everything a sample holds: each field's dtype, shape, LoD
 * and bytes (FNV-1a, 64 bits). */
uint64_t test_sample_digest(const sl_sample *s);
/* The next n samples of a and of b are the same (test_sample_digest). */
void test_same_next(sl_reader *a, sl_reader *b, uint64_t n);
/* Reads one whole pass of `r` (which must end with SL_EOF), then destroys
 * it: a digest of its samples in order (test_sample_digest of each), and
 * their count in *n. */
uint64_t test_digest_all(sl_reader *r, uint64_t *n);

/* Reads n samples of r (each must come: no end of pass), then saves r:
 * the state (sl_free it), its length in *len. */
void *test_save_after(sl_reader *r, uint64_t n, size_t *len);

/* Builds a fresh chain, the same way each call (the test's ud). */
typedef sl_reader *(*test_build_fn)(void *ud);

/* The resume contract over `passes` passes (a reset after each end): an
 * uninterrupted run gives a sequence of samples and pass ends; for every
 * cut in cuts[0..ncuts) (a count of samples across passes), a chain that
 * read `cut` samples, saved, and was destroyed, restored into a fresh chain
 * must give exactly the rest of that sequence (digests and pass ends).
 * Also saves twice at the cut (the two states are equal: a save changes
 * nothing) and checks every state is below max_state_bytes (0: 64 KiB).
 * Fails the test with the cut, the position and both digests. */
/* Microseconds test_resume_check waits at each cut before it saves (0 by
 * default): for a chain whose state depends on how far its threads ran
 * ahead (a filter saved far behind a prefetch, whose log entry becomes a
 * replay once the prefetch has pulled 1024 more), so that both saves see
 * the threads settled. */
extern long test_resume_settle_us;
/* Cuts just after the ends of an upstream's passes under a repeat (where
 * a window above still holds samples of the pass before): for p in
 * 1..ends, p x pass_len + 0, step, ... up to + span; then the last
 * sample of pass `ends`.  Writes at most cap cuts; returns how many. */
size_t test_cuts_after_ends(uint64_t *cuts, size_t cap, uint64_t pass_len,
                            int ends, uint64_t span, uint64_t step);
void test_resume_check(test_build_fn build, void *ud, int passes,
                       const uint64_t *cuts, size_t ncuts,
                       size_t max_state_bytes);

/* Runs fn(ud) in a child process (fork) and returns the child's peak
 * resident memory in bytes (wait4's ru_maxrss): for the checks that a
 * hostile file is refused without a giant allocation.  The child starts
 * with the pages the parent has resident, so free large buffers first.
 * Fails the test when the child does not exit 0 (an ASSERT failing in fn
 * exits 1, its message on stderr). */
uint64_t test_child_peak_rss(void (*fn)(void *ud), void *ud);

/* Under ASan: runs LeakSanitizer now and returns whether it found leaks
 * (it prints them).  Elsewhere: false.  Only meaningful while every thread
 * the test started is joined. */
bool test_leaked(void);

/* A TCP port on 127.0.0.1 free a moment ago (bound, read, closed), for a
 * test server (nginx, tests/http/s3_server.py). */
int test_free_port(void);
/* Whether something accepts connections on 127.0.0.1:port. */
bool test_can_connect(int port);

/* Starts argv[0] (argv NULL-terminated) as a test server that listens on
 * 127.0.0.1:port: killed with the test process (PR_SET_PDEATHSIG), its
 * stdout (and stderr when quiet_stderr) to /dev/null; waits up to 10 s for
 * the port, else fails the test naming `what`.  Returns its pid. */
pid_t test_server_start(const char *what, char *const argv[], int port,
                        bool quiet_stderr);
/* Sends `sig` to the server and reaps it (the test fails if it cannot). */
void test_server_stop(pid_t pid, int sig);

/* A real nginx on loopback for the HTTP tests (test_http*.c,
 * test_budget_io.c), in a folder of its own, `dir` (its config, logs and
 * temp files, and dir/www for a test's own files), on a free `port`:
 * test_nginx_start serves `root` at / and, rate-limited to 1 request per
 * second with status 500 beyond it (nginx's limit_req), at /flaky/; and
 * dir/www at /w/ and, rate-limited, at /flakyw/.  nginx is a declared
 * dependency (Makefile PACKAGES): the test fails when it is missing.
 * test_nginx_stop stops it and removes its folder. */
typedef struct test_nginx {
  pid_t pid;
  int port;
  char dir[256];
} test_nginx;
void test_nginx_start(test_nginx *s, const char *root);
void test_nginx_stop(test_nginx *s);
/* s->dir/www/<name>, served at /w/<name> and /flakyw/<name> (one of four
 * static buffers in turn). */
const char *test_nginx_www(const test_nginx *s, const char *name);

#endif
