/* test_faults.c - fault injection over the whole path a training job takes:
 * pack (the SLR writer) -> read (the slr reader) -> decorate (shuffle, map)
 * -> batch, and the same read path through worker threads (open_files,
 * prefetch).
 *
 * Each sweep arms one fault at call number k - the k-th allocation
 * (sl__alloc_fail_after), the k-th read (EIO, short reads, a file that
 * shrinks) or the k-th write (EIO, ENOSPC, short writes) of
 * src/transport/io_faults.h - runs the path, and checks the outcome: either the
 * run succeeds and every batch holds exactly the right rows, or it fails
 * with the fault's own code (SL_ENOMEM, SL_EIO) and a message saying where.
 * k goes 0, 1, 2, ... until a run makes no more than k calls, i.e. until
 * every allocation / read / write of the path has been failed once.  ASan
 * (make asan) checks that no failure path leaks or double-frees.
 *
 * Scratch files live in /dev/shm when there is one: the writer fsyncs every
 * file it completes, and the sweeps pack hundreds of them. */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "core/crc32c.h"
#include "transport/io_faults.h"
#include "formats/slr_file.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- scratch files ------------------------------------------------------- */

static char g_dir[256];

static int rm_entry(const char *p, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

static void rm_dir(void) {
  if (g_dir[0]) nftw(g_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static const char *scratch(const char *name) {
  static char buf[8][512];
  static int next;
  if (!g_dir[0]) {
    struct stat st;
    const char *base =
        stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/sluice-test-faults-XXXXXX", base);
    ASSERT_NOT_NULL(mkdtemp(g_dir));
    atexit(rm_dir);
  }
  char *b = buf[next++ % 8];
  snprintf(b, sizeof buf[0], "%s/%s", g_dir, name);
  return b;
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* The start of the writer's temporary names for `path` in this process
 * (slr_writer.c: NAME.tmp-PID-XXXXXX). */
static const char *tmp_name(const char *path) {
  static char b[600];
  snprintf(b, sizeof b, "%s.tmp-%ld", path, (long)getpid());
  return b;
}

/* --- the data ---------------------------------------------------------------
 * Record i: {x: f32[3] = i/2 + k, tokens: i32[i % 5] = 10 i + k,
 * label: i64 = i}.  The map adds LABEL_SHIFT to the label. */

#define LABEL_SHIFT 1000

static sl_schema *g_schema; /* made before any fault is armed */

static sl_schema *make_schema(void) {
  sl_schema *s = sl_schema_new();
  ASSERT_NOT_NULL(s);
  ASSERT_OK(sl_schema_add(s, "x", SL_F32, 1, (int64_t[]){3}));
  ASSERT_OK(sl_schema_add(s, "tokens", SL_I32, 1, (int64_t[]){SL_DIM_VAR}));
  ASSERT_OK(sl_schema_add(s, "label", SL_I64, 0, NULL));
  sl_schema_freeze(s);
  return s;
}

/* Record i, or NULL with the error set (allocations may be failing). */
static sl_sample *make_record(int64_t i) {
  sl_sample *r = sl_sample_new(g_schema);
  if (!r) return NULL;
  float *x;
  int32_t *t;
  int64_t *lab, nt = i % 5;
  if (sl_sample_alloc(r, 0, 1, (int64_t[]){3}, (void **)&x) < 0 ||
      sl_sample_alloc(r, 1, 1, &nt, (void **)&t) < 0 ||
      sl_sample_alloc(r, 2, 0, NULL, (void **)&lab) < 0) {
    sl_sample_release(r);
    return NULL;
  }
  for (int k = 0; k < 3; k++)
    x[k] = (float)i * 0.5f + (float)k;
  for (int64_t k = 0; k < nt; k++)
    t[k] = (int32_t)(i * 10 + k);
  *lab = i;
  return r;
}

/* Packs records 0..n-1, `per_chunk` to a chunk.  SL_OK or the error. */
static int pack(const char *path, int64_t n, uint32_t per_chunk) {
  sl_slr_writer_opts o = {1, 0, per_chunk};
  sl_slr_writer *w;
  SL_FORWARD_IF_ERROR(sl_slr_writer_open(path, g_schema, &o, &w));
  for (int64_t i = 0; i < n; i++) {
    sl_sample *r = make_record(i);
    int rc = r ? sl_slr_writer_append(w, r) : sl_last_error_code();
    sl_sample_release(r);
    if (rc < 0) {
      sl_slr_writer_abort(w);
      return rc;
    }
  }
  return sl_slr_writer_close(w);
}

/* The map: a new sample sharing x and tokens, with label + LABEL_SHIFT. */
static int shift_label(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  sl_sample *o = sl_sample_new(g_schema);
  int64_t *lab;
  int rc = o ? SL_OK : SL_ENOMEM;
  if (rc == SL_OK) rc = sl_sample_set(o, 0, sl_sample_at_const(in, 0));
  if (rc == SL_OK) rc = sl_sample_set(o, 1, sl_sample_at_const(in, 1));
  if (rc == SL_OK) rc = sl_sample_alloc(o, 2, 0, NULL, (void **)&lab);
  if (rc == SL_OK) *lab = test_sample_i64(in, 2) + LABEL_SHIFT;
  sl_sample_release(in);
  if (rc < 0) {
    sl_sample_release(o);
    return sl_wrap_error(rc, "shift_label");
  }
  *out = o;
  return SL_OK;
}

/* Checks one batch row by row against the records it claims to hold (the
 * label says which); marks them in seen[0..n).  Wrong data fails the test:
 * whatever the fault, a run may fail but never deliver a wrong row. */
static void check_batch(const sl_sample *b, bool *seen, int64_t n) {
  const sl_tensor *x = sl_sample_field(b, "x"),
                  *t = sl_sample_field(b, "tokens"),
                  *lab = sl_sample_field(b, "label");
  ASSERT_NOT_NULL(x);
  ASSERT_NOT_NULL(t);
  ASSERT_NOT_NULL(lab);
  int64_t rows = lab->shape[0], lod_len;
  const int64_t *lod = sl_tensor_lod(t, &lod_len);
  ASSERT_TRUE(rows >= 1 && rows <= 8);
  ASSERT_EQ(x->shape[0], rows);
  ASSERT_NOT_NULL(lod);
  ASSERT_EQ(lod_len, rows + 1);
  const float *xv = x->data;
  const int32_t *tv = t->data;
  const int64_t *lv = lab->data;
  for (int64_t j = 0; j < rows; j++) {
    int64_t i = lv[j] - LABEL_SHIFT;
    ASSERT_TRUE(i >= 0 && i < n);
    if (seen[i])
      test_fail(__FILE__, __LINE__, "record %lld twice", (long long)i);
    seen[i] = true;
    for (int k = 0; k < 3; k++)
      ASSERT_TRUE(xv[3 * j + k] == (float)i * 0.5f + (float)k);
    ASSERT_EQ(lod[j + 1] - lod[j], i % 5);
    for (int64_t k = 0; k < i % 5; k++)
      ASSERT_EQ(tv[lod[j] + k], i * 10 + k);
  }
}

/* One pass of `r` (batches of the n records): SL_OK when every record came
 * exactly once, else the error that ended it. */
static int drain_pass(sl_reader *r, int64_t n) {
  bool *seen = calloc((size_t)n, 1);
  ASSERT_NOT_NULL(seen);
  sl_sample *b;
  int rc;
  while ((rc = sl_reader_next(r, &b)) == SL_OK) {
    check_batch(b, seen, n);
    sl_sample_release(b);
  }
  if (rc == SL_EOF) {
    for (int64_t i = 0; i < n; i++)
      if (!seen[i])
        test_fail(__FILE__, __LINE__,
                  "record %lld missing from a pass that "
                  "ended cleanly",
                  (long long)i);
    rc = SL_OK;
  }
  free(seen);
  return rc;
}

/* read -> shuffle -> map -> batch over `path`, two passes.  Every stage
 * takes its upstream, also when it fails, so nothing leaks on any path. */
static int read_path(const char *path, int64_t n) {
  sl_reader *r;
  SL_FORWARD_IF_ERROR(sl_slr_reader(path, NULL, 0, UINT64_MAX, &r));
  SL_FORWARD_IF_ERROR(sl_shuffle(r, 16, 7, &r));
  SL_FORWARD_IF_ERROR(sl_map(r, shift_label, NULL, NULL, NULL, &r));
  SL_FORWARD_IF_ERROR(sl_batch(r, 8, NULL, &r));
  int rc = drain_pass(r, n);
  if (rc == SL_OK) rc = sl_reader_reset(r);
  if (rc == SL_OK) rc = drain_pass(r, n);
  sl_reader_destroy(r);
  return rc;
}

/* The same records through threads: open_files (2 workers, shuffled plan)
 * over `nfiles` files -> prefetch -> map -> batch, two passes. */
static int threaded_path(const char *const *files, size_t nfiles, int64_t n) {
  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
  o.threads = 2;
  o.shuffle = 1;
  o.seed = 3;
  o.world = 1, o.rank = 0;
  sl_reader *r;
  SL_FORWARD_IF_ERROR(sl_open_files(files, nfiles, &o, &r));
  SL_FORWARD_IF_ERROR(sl_prefetch(r, 4, &r));
  SL_FORWARD_IF_ERROR(sl_map(r, shift_label, NULL, NULL, NULL, &r));
  SL_FORWARD_IF_ERROR(sl_batch(r, 8, NULL, &r));
  int rc = drain_pass(r, n);
  if (rc == SL_OK) rc = sl_reader_reset(r);
  if (rc == SL_OK) rc = drain_pass(r, n);
  sl_reader_destroy(r);
  return rc;
}

/* A failed run: the fault's code, and a message that says where (a
 * "stage: " or "path: " prefix before the cause, never a bare strerror). */
static void expect_failure(int rc, int code, const char *fault, long k,
                           const char *want_in_msg) {
  const char *msg = sl_last_error();
  if (rc != code)
    test_fail(__FILE__, __LINE__, "%s %ld: got %s, want %s: %s", fault, k,
              sl_err_name(rc), sl_err_name(code), msg);
  if (!msg[0] || !strstr(msg, ": ") || strcmp(msg, sl_strerror(rc)) == 0)
    test_fail(__FILE__, __LINE__,
              "%s %ld: %s without a message saying where: "
              "\"%s\"",
              fault, k, sl_err_name(rc), msg);
  if (want_in_msg && !strstr(msg, want_in_msg))
    test_fail(__FILE__, __LINE__, "%s %ld: message without \"%s\": \"%s\"",
              fault, k, want_in_msg, msg);
  if (getenv("SLUICE_FAULTS_VERBOSE")) printf("  %s %ld: %s\n", fault, k, msg);
}

static void setup(void) {
  if (!g_schema) g_schema = make_schema();
}

#define RECORDS 20
#define PER_CHUNK 6 /* 4 chunks, the last short */

/* --- allocation failures ----------------------------------------------------
 */

TEST(alloc_failures_pack_read_shuffle_map_batch) {
  setup();
  const char *path = scratch("alloc.slr");
  ASSERT_OK(pack(path, RECORDS, PER_CHUNK));
  ASSERT_OK(read_path(path, RECORDS));
  remove(path);
  long k = 0, failed = 0;
  for (;; k++) {
    ASSERT_LE(k, 200000);
    sl_clear_error();
    sl__alloc_fail_after(k);
    int rc = pack(path, RECORDS, PER_CHUNK);
    bool packed = rc == SL_OK;
    if (packed) rc = read_path(path, RECORDS);
    long made = sl__alloc_fail_after(-1);
    if (!packed) {
      /* A failed pack leaves nothing: no file under the final name that
       * could be mistaken for a complete one, no temporary either. */
      ASSERT_TRUE(!exists(path));
      ASSERT_EQ(test_temporaries_of(path), 0);
    }
    if (rc < 0) {
      expect_failure(rc, SL_ENOMEM, "allocation", k, NULL);
      failed++;
    }
    remove(path);
    if (made <= k) {
      ASSERT_OK(rc); /* no allocation failed: the run must succeed */
      break;
    }
  }
  printf("allocation sweep: %ld allocations on the path, each failed once "
         "(%ld failed runs)\n",
         k, failed);
  ASSERT_GE(k, 100);
}

/* --- read faults
 * ---------------------------------------------------------------
 */

/* Sweeps read fault `kind` over every read of read_path.  Returns the
 * number of reads on the path. */
static long sweep_reads(sl__io_fault kind, const char *name,
                        const char *want_in_msg) {
  const char *path = scratch("reads.slr");
  ASSERT_OK(pack(path, RECORDS, PER_CHUNK));
  long k = 0;
  for (;; k++) {
    ASSERT_LE(k, 100000);
    sl_clear_error();
    sl__io_fault_after(SL__IO_READ, k, kind);
    int rc = read_path(path, RECORDS);
    long made = sl__io_fault_after(SL__IO_READ, -1, SL__IO_OK);
    if (rc < 0) {
      expect_failure(rc, SL_EIO, name, k, want_in_msg);
      ASSERT_CONTAINS(sl_last_error(), path);
    }
    if (made <= k) {
      ASSERT_OK(rc);
      break;
    }
  }
  return k;
}

TEST(read_eio_at_every_read_is_reported_with_the_file) {
  setup();
  long reads = sweep_reads(SL__IO_EIO, "EIO at read", "Input/output error");
  printf("EIO sweep: %ld reads on the path, each failed once\n", reads);
  ASSERT_GE(reads, 8); /* header, footer, blocks, 4 chunks x 2 passes */
}

TEST(file_shrinking_under_the_reader_is_reported) {
  setup();
  long reads = sweep_reads(SL__IO_SHRINK, "shrink at read", "file shrank");
  printf("shrink sweep: %ld reads on the path\n", reads);
}

TEST(short_reads_change_nothing) {
  setup();
  const char *path = scratch("short.slr");
  ASSERT_OK(pack(path, RECORDS, PER_CHUNK));
  sl__io_fault_after(SL__IO_READ, -1, SL__IO_OK);
  ASSERT_OK(read_path(path, RECORDS));
  long whole = sl__io_fault_after(SL__IO_READ, 0, SL__IO_SHORT);
  ASSERT_OK(read_path(path, RECORDS)); /* every pread moves 1..7 bytes */
  long pieces = sl__io_fault_after(SL__IO_READ, -1, SL__IO_OK);
  ASSERT_GE(pieces, 10 * whole);
  /* Short reads starting at every read of the path. */
  for (long k = 0; k < whole; k++) {
    sl__io_fault_after(SL__IO_READ, k, SL__IO_SHORT);
    ASSERT_OK(read_path(path, RECORDS));
    sl__io_fault_after(SL__IO_READ, -1, SL__IO_OK);
  }
}

/* --- write faults
 * ----------------------------------------------------------------
 */

TEST(write_faults_never_leave_a_file_that_looks_complete) {
  setup();
  const char *path = scratch("writes.slr");
  static const struct {
    sl__io_fault kind;
    const char *name, *msg;
  } faults[] = {{SL__IO_EIO, "EIO at write", "Input/output error"},
                {SL__IO_ENOSPC, "ENOSPC at write", "No space left on device"}};
  for (size_t f = 0; f < 2; f++) {
    long k = 0;
    for (;; k++) {
      ASSERT_LE(k, 100000);
      remove(path);
      sl_clear_error();
      sl__io_fault_after(SL__IO_WRITE, k, faults[f].kind);
      int rc = pack(path, RECORDS, PER_CHUNK);
      long made = sl__io_fault_after(SL__IO_WRITE, -1, SL__IO_OK);
      if (rc < 0) {
        expect_failure(rc, SL_EIO, faults[f].name, k, faults[f].msg);
        ASSERT_CONTAINS(sl_last_error(), tmp_name(path));
        ASSERT_TRUE(!exists(path));
        ASSERT_EQ(test_temporaries_of(path), 0);
      } else {
        ASSERT_OK(read_path(path, RECORDS));
      }
      if (made <= k) {
        ASSERT_OK(rc);
        break;
      }
    }
    printf("%s sweep: %ld writes, each failed once\n", faults[f].name, k);
    ASSERT_GE(k, 6); /* header, 4 chunks, schema, index, footer */
  }
  /* Short writes: the writer loops, the file is the same. */
  remove(path);
  sl__io_fault_after(SL__IO_WRITE, 0, SL__IO_SHORT);
  ASSERT_OK(pack(path, RECORDS, PER_CHUNK));
  long pieces = sl__io_fault_after(SL__IO_WRITE, -1, SL__IO_OK);
  ASSERT_GE(pieces, 50);
  ASSERT_OK(read_path(path, RECORDS));
}

/* --- through worker threads
 * ---------------------------------------------------- The same faults where
 * the reads (and most allocations) happen on open_files' workers and the
 * prefetch thread: the error must cross the threads with its code and message,
 * and every thread must be joined. */

static const char *const *three_files(void) {
  static const char *files[3];
  static char paths[3][512];
  for (int f = 0; f < 3; f++) {
    char name[32];
    snprintf(name, sizeof name, "part-%d.slr", f);
    snprintf(paths[f], sizeof paths[f], "%s", scratch(name));
    files[f] = paths[f];
  }
  return files;
}

/* Files part-0..2 holding records [0,7), [7,14), [14,20). */
static void pack_three(const char *const *files) {
  for (int f = 0; f < 3; f++) {
    sl_slr_writer_opts o = {1, 0, 3};
    sl_slr_writer *w;
    ASSERT_OK(sl_slr_writer_open(files[f], g_schema, &o, &w));
    for (int64_t i = 7 * f; i < SL_MIN(7 * (f + 1), RECORDS); i++) {
      sl_sample *r = make_record(i);
      ASSERT_NOT_NULL(r);
      ASSERT_OK(sl_slr_writer_append(w, r));
      sl_sample_release(r);
    }
    ASSERT_OK(sl_slr_writer_close(w));
  }
}

TEST(faults_cross_worker_threads_with_their_message) {
  setup();
  const char *const *files = three_files();
  pack_three(files);
  ASSERT_OK(threaded_path(files, 3, RECORDS));
  /* Reads: EIO at every read. */
  long k = 0;
  for (;; k++) {
    ASSERT_LE(k, 100000);
    sl_clear_error();
    sl__io_fault_after(SL__IO_READ, k, SL__IO_EIO);
    int rc = threaded_path(files, 3, RECORDS);
    long made = sl__io_fault_after(SL__IO_READ, -1, SL__IO_OK);
    if (rc < 0) {
      expect_failure(rc, SL_EIO, "EIO at read (threads)", k,
                     "Input/output error");
      ASSERT_CONTAINS(sl_last_error(), "part-");
    }
    if (made <= k) {
      ASSERT_OK(rc);
      break;
    }
  }
  printf("threaded EIO sweep: %ld reads\n", k);
  /* Allocations: the count differs from run to run (threads race), so the
   * sweep runs until one run made no more allocations than k. */
  long a = 0, lost = 0;
  for (;; a++) {
    ASSERT_LE(a, 200000);
    sl_clear_error();
    sl__alloc_fail_after(a);
    int rc = threaded_path(files, 3, RECORDS);
    long made = sl__alloc_fail_after(-1);
    /* A message crosses threads as a heap copy; when the failed allocation
     * was that copy, the code still arrives, with its description
     * (documented in docs/RELIABILITY.md). */
    if (rc == SL_ENOMEM && (strcmp(sl_last_error(), sl_strerror(rc)) == 0 ||
                            strstr(sl_last_error(), "message lost")))
      lost++;
    else if (rc < 0)
      expect_failure(rc, SL_ENOMEM, "allocation (threads)", a, NULL);
    if (made <= a) {
      ASSERT_OK(rc);
      break;
    }
  }
  printf("threaded allocation sweep: %ld allocations (%ld messages lost "
         "with the allocation that would have copied them)\n",
         a, lost);
}

/* --- corruption under skip_chunk
 * ------------------------------------------------
 */

/* The cap of skip_chunk is per pass: every pass meets the same bad chunks,
 * and a file within the cap must read the same way in every epoch. */
TEST(skip_chunk_cap_counts_per_pass) {
  setup();
  const char *path = scratch("cap.slr");
  ASSERT_OK(pack(path, 30, 3)); /* 10 chunks */
  size_t size;
  FILE *fp = fopen(path, "rb");
  ASSERT_NOT_NULL(fp);
  fseek(fp, 0, SEEK_END);
  size = (size_t)ftell(fp);
  fseek(fp, 0, SEEK_SET);
  unsigned char *b = malloc(size);
  ASSERT_EQ(fread(b, 1, size, fp), size);
  fclose(fp);
  sl_slr_file *f;
  ASSERT_OK(sl_slr_open(path, NULL, &f));
  for (uint64_t c = 1; c < 10; c += 4) { /* chunks 1, 5, 9 */
    sl_slr_chunk_info ci;
    ASSERT_OK(sl_slr_chunk_info_get(f, c, &ci));
    b[ci.offset + 40 + ci.stored_size / 2] ^= 0x10;
  }
  sl_slr_close(f);
  test_write_file(path, b, size);
  free(b);
  sl_slr_open_opts o = {SL_CORRUPT_SKIP_CHUNK, 3, 0};
  sl_reader *r;
  ASSERT_OK(sl_slr_reader(path, &o, 0, UINT64_MAX, &r));
  for (int pass = 0; pass < 4; pass++) {
    int n = 0, rc;
    sl_sample *s;
    while ((rc = sl_reader_next(r, &s)) == SL_OK) {
      int64_t i = test_sample_i64(s, 2);
      ASSERT_TRUE(i / 3 != 1 && i / 3 != 5 && i / 3 != 9);
      sl_sample_release(s);
      n++;
    }
    ASSERT_RC(rc, SL_EOF);
    ASSERT_EQ(n, 21);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  /* The cap still holds within a pass. */
  o.max_bad_chunks = 2;
  ASSERT_OK(sl_slr_reader(path, &o, 0, UINT64_MAX, &r));
  int rc;
  sl_sample *s;
  while ((rc = sl_reader_next(r, &s)) == SL_OK)
    sl_sample_release(s);
  ASSERT_RC(rc, SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "3 corrupt chunks skipped, more than the "
                                   "cap of 2");
  ASSERT_CONTAINS(sl_last_error(), "chunk 9");
  sl_reader_destroy(r);
}
