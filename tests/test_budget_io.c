/* test_budget_io.c - the memory budget (issue 27) counts the buffers the
 * formats and transports keep for themselves, as their stage's resident
 * bytes (sl__budget_resident, sync/resident.h): a URL's read-ahead block
 * (sl__source_held) under the wds, tfrecord and npy readers and each lane
 * of sl_wds_open (and its blocks read ahead), a CSV fetched whole by URL,
 * an npz's inflated members, a GZIP TFRecord stream's input block and zlib
 * state, a text file's read buffer, an idx pair in memory, the idle
 * buffers of decode_image's pool, and the sources an interleave opens by
 * callback (their read-ahead and their readers' buffers, in its ledger).
 * Each test sets a budget, reads part of a pass and checks the stage's
 * bytes_held is at least the buffer's known size and within the budget,
 * and that nothing stays charged to the ledger once the stage is gone.
 * The URL tests serve tests/data/formats by nginx, as test_http.c does.
 * In the TSan suite (make tsan). */
#include "test.h"
#include "test_util.h"

#if SLUICE_WITH_IMAGES
#include "image_fixture.h"
#include "sluice/image.h"
#endif

#include "stages/reader_impl.h"
#include "sync/budget.h"

#include "sluice/open.h"
#include "sluice/stages.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIR SLUICE_SOURCE_DIR "/tests/data/formats"
#define BUDGET ((uint64_t)4 << 20)

/* --- helpers ---------------------------------------------------------------
 */

/* Stage `name`'s bytes held now (its stats row). */
static uint64_t held_of(sl_reader *r, const char *name) {
  sl_stage_stats st[16];
  size_t n = 0;
  ASSERT_OK(sl_reader_stats(r, st, 16, &n));
  for (size_t i = 0; i < n && i < 16; i++)
    if (!strcmp(st[i].name, name)) return st[i].bytes_held;
  test_fail(__FILE__, __LINE__, "no stage '%s'", name);
  return 0;
}

/* An account of r's ledger that keeps it alive past r (free it with
 * sl__budget_acct_free). */
static sl__budget_acct *probe_of(sl_reader *r) {
  sl__reader_view v;
  sl__reader_view_of(r, &v);
  ASSERT_NOT_NULL(v.acct);
  sl__budget_acct *p = sl__budget_acct_new(sl__budget_of(v.acct), "probe");
  ASSERT_NOT_NULL(p);
  return p;
}

/* Destroys r and checks its ledger holds nothing after (probe: probe_of's,
 * freed here). */
static void destroy_and_check(sl_reader *r, sl__budget_acct *probe) {
  sl_reader_destroy(r);
  ASSERT_EQ(sl__budget_held(sl__budget_of(probe)), 0);
  sl__budget_acct_free(probe);
}

/* The size of file DIR/name. */
static uint64_t size_of(const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", DIR, name);
  struct stat st;
  ASSERT_EQ(stat(p, &st), 0);
  return (uint64_t)st.st_size;
}

/* Reads n samples of r (each released). */
static void read_n(sl_reader *r, int n) {
  for (int i = 0; i < n; i++) {
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_OK);
    sl_sample_release(s);
  }
}

/* --- wds, tfrecord ---------------------------------------------------------
 */

/* A wds shard read by URL holds the source's read-ahead block (8 KiB
 * asked for: the first block at open, then each refill's). */
TEST(wds_url_readahead_is_charged) {
  test_nginx sv;
  test_nginx_start(&sv, DIR);
  setenv("SLUICE_HTTP_READAHEAD", "8K", 1);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/wds-000001.tar", sv.port);
  sl_reader *r = NULL;
  ASSERT_OK(sl_wds_reader(url, &r));
  unsetenv("SLUICE_HTTP_READAHEAD");
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  ASSERT_EQ(held_of(r, "wds"), 0); /* charged from the first read */
  read_n(r, 2);
  uint64_t held = held_of(r, "wds");
  ASSERT_GE(held, 8192);
  ASSERT_LE(held, BUDGET);
  destroy_and_check(r, probe_of(r));
  test_nginx_stop(&sv);
}

/* A GZIP TFRecord file holds its stream: the 64 KiB input block and
 * zlib's 32 KiB window at least. */
TEST(tfrecord_gzip_stream_is_charged) {
  sl_reader *r = NULL;
  ASSERT_OK(sl_tfrecord_reader(DIR "/ex.tfrecord.gz", NULL, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 1);
  uint64_t held = held_of(r, "tfrecord");
  ASSERT_GE(held, (64 << 10) + (32 << 10));
  ASSERT_LE(held, BUDGET);
  /* a reset keeps the stream (rewound): still charged, once */
  ASSERT_OK(sl_reader_reset(r));
  read_n(r, 1);
  ASSERT_EQ(held_of(r, "tfrecord"), held);
  destroy_and_check(r, probe_of(r));
}

/* A plain TFRecord file by URL holds the read-ahead block: the whole
 * object (smaller than the read-ahead). */
TEST(tfrecord_url_readahead_is_charged) {
  test_nginx sv;
  test_nginx_start(&sv, DIR);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/ex.tfrecord", sv.port);
  sl_reader *r = NULL;
  ASSERT_OK(sl_tfrecord_reader(url, NULL, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 1);
  uint64_t held = held_of(r, "tfrecord");
  ASSERT_GE(held, size_of("ex.tfrecord"));
  ASSERT_LE(held, BUDGET);
  destroy_and_check(r, probe_of(r));
  test_nginx_stop(&sv);
}

/* A .npy file by URL holds the read-ahead block, rows read from it: the
 * whole object (smaller than the read-ahead). */
TEST(npy_url_readahead_is_charged) {
  test_nginx sv;
  test_nginx_start(&sv, DIR);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/x.npy", sv.port);
  sl_reader *r = NULL;
  ASSERT_OK(sl_npy_reader(url, NULL, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 1);
  uint64_t held = held_of(r, "npy");
  ASSERT_GE(held, size_of("x.npy"));
  ASSERT_LE(held, BUDGET);
  destroy_and_check(r, probe_of(r));
  test_nginx_stop(&sv);
}

/* An .npz of deflated members inflates each into a buffer of its own at
 * open: the reader holds them (all the samples' bytes at least). */
TEST(npz_inflated_members_are_charged) {
  sl_reader *r = NULL;
  ASSERT_OK(sl_npy_reader(DIR "/pair_z.npz", NULL, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  uint64_t n = 0, bytes = 0;
  sl_sample *s = NULL;
  while (sl_reader_next(r, &s) == SL_OK) {
    bytes += sl_sample_nbytes(s);
    sl_sample_release(s);
    n++;
  }
  ASSERT_GE(n, 1);
  uint64_t held = held_of(r, "npy");
  ASSERT_GE(held, bytes);
  ASSERT_LE(held, BUDGET);
  destroy_and_check(r, probe_of(r));
}

/* A CSV file by URL is fetched whole: the reader holds its bytes on
 * top of its parser's memory (all a mapped file's reader holds). */
TEST(csv_url_object_is_charged) {
  sl_reader *r = NULL;
  ASSERT_OK(sl_csv_reader(DIR "/table.csv", NULL, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 1);
  uint64_t parser = held_of(r, "csv");
  ASSERT_GE(parser, 1); /* its field table at least */
  destroy_and_check(r, probe_of(r));
  test_nginx sv;
  test_nginx_start(&sv, DIR);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/table.csv", sv.port);
  ASSERT_OK(sl_csv_reader(url, NULL, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 1);
  uint64_t held = held_of(r, "csv");
  ASSERT_EQ(held, parser + size_of("table.csv"));
  ASSERT_LE(held, BUDGET);
  destroy_and_check(r, probe_of(r));
  test_nginx_stop(&sv);
}

/* A text file read through buffers (the default) holds its read buffer:
 * 64 KiB at least; mapped, nothing of its own. */
TEST(text_read_buffer_is_charged) {
  const char *path = test_tmppath("budget_io", "lines.txt");
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  for (int i = 0; i < 1000; i++)
    fprintf(f, "line %d\n", i);
  ASSERT_EQ(fclose(f), 0);
  sl_reader *r = NULL;
  ASSERT_OK(sl_text_reader(path, 0, NULL, NULL, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 10);
  uint64_t held = held_of(r, "text");
  ASSERT_GE(held, 64 << 10);
  ASSERT_LE(held, BUDGET);
  destroy_and_check(r, probe_of(r));
  ASSERT_OK(sl_text_reader(path, 1, NULL, NULL, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 10);
  ASSERT_EQ(held_of(r, "text"), 0); /* a mapping: page cache */
  sl_reader_destroy(r);
}

/* An idx pair is loaded whole: the reader holds the images (here 100 of
 * 28 x 28 bytes) and the labels widened to i64. */
TEST(idx_files_in_memory_are_charged) {
  const char *img = test_tmppath("budget_io", "x-images-idx3-ubyte");
  const char *lab = test_tmppath("budget_io", "x-labels-idx1-ubyte");
  enum { N = 100, SIDE = 28 };
  static unsigned char px[16 + N * SIDE * SIDE], lb[8 + N];
  const unsigned char ih[16] = {0, 0, 8, 3,    0, 0, 0, N,
                                0, 0, 0, SIDE, 0, 0, 0, SIDE};
  const unsigned char lh[8] = {0, 0, 8, 1, 0, 0, 0, N};
  memcpy(px, ih, sizeof ih);
  memcpy(lb, lh, sizeof lh);
  for (int i = 0; i < N; i++)
    lb[8 + i] = (unsigned char)(i % 10);
  FILE *f = fopen(img, "wb");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fwrite(px, 1, sizeof px, f), sizeof px);
  ASSERT_EQ(fclose(f), 0);
  ASSERT_NOT_NULL(f = fopen(lab, "wb"));
  ASSERT_EQ(fwrite(lb, 1, sizeof lb, f), sizeof lb);
  ASSERT_EQ(fclose(f), 0);
  sl_reader *r = NULL;
  ASSERT_OK(sl_idx_reader(img, lab, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 3);
  uint64_t held = held_of(r, "idx");
  ASSERT_GE(held, N * SIDE * SIDE + N * sizeof(int64_t));
  ASSERT_LE(held, BUDGET);
  destroy_and_check(r, probe_of(r));
}

/* sl_wds_open's lanes: the shard a lane has open (a URL's read-ahead
 * block) is charged while it is open, released when the lane closes it;
 * at the pass's end nothing is. */
TEST(wds_open_lane_shards_are_charged) {
  test_nginx sv;
  test_nginx_start(&sv, DIR);
  setenv("SLUICE_HTTP_READAHEAD", "8K", 1);
  char url[256];
  snprintf(url, sizeof url, "wds:http://127.0.0.1:%d/wds-{000000..000002}.tar",
           sv.port);
  const char *name = url;
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.threads = 1;
  o.world = 1;
  o.buffer = 2; /* blocks of one sample: the lane stays inside its shard */
  sl_reader *r = NULL;
  ASSERT_OK(sl_wds_open(&name, 1, &o, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 2);
  uint64_t held = held_of(r, "wds_open");
  ASSERT_GE(held, 8192);
  ASSERT_LE(held, BUDGET);
  read_n(r, 10); /* 12 samples in all */
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  unsetenv("SLUICE_HTTP_READAHEAD");
  ASSERT_EQ(held_of(r, "wds_open"), 0);
  destroy_and_check(r, probe_of(r));
  test_nginx_stop(&sv);
}

/* The bytes r's whole ledger holds now (every account of it). */
static uint64_t ledger_of(sl_reader *r) {
  sl__reader_view v;
  sl__reader_view_of(r, &v);
  ASSERT_NOT_NULL(v.acct);
  return sl__budget_held(sl__budget_of(v.acct));
}

/* sl_wds_open's blocks of samples read ahead are charged as they are
 * made and released as they are handed out: after the first sample of a
 * round, the rest of the round's blocks are held. */
TEST(wds_open_read_ahead_blocks_are_charged) {
  const char *name = "wds:" DIR "/wds-{000000..000002}.tar";
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.threads = 2;
  o.world = 1;
  o.buffer = 8; /* blocks of 4 samples */
  sl_reader *r = NULL;
  ASSERT_OK(sl_wds_open(&name, 1, &o, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 1);
  uint64_t held = held_of(r, "wds_open");
  ASSERT_LE(held, BUDGET);
  /* the next 7 samples are the round's other blocks' (2 lanes x 4) */
  uint64_t next = 0;
  for (int i = 0; i < 7; i++) {
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(r, &s));
    next += sl_sample_nbytes(s);
    sl_sample_release(s);
  }
  ASSERT_GE(held, next);
  ASSERT_TRUE(next > 0);
  read_n(r, 4); /* 12 samples in all */
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_EQ(held_of(r, "wds_open"), 0); /* every block handed out */
  /* a reset mid-round drops the blocks and their charge */
  ASSERT_OK(sl_reader_reset(r));
  read_n(r, 1);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(held_of(r, "wds_open"), 0);
  destroy_and_check(r, probe_of(r));
}

/* --- interleave ------------------------------------------------------------
 */

/* The samples of r's pass (r reset after). */
static uint64_t count_pass(sl_reader *r) {
  uint64_t n = 0;
  sl_sample *s = NULL;
  while (sl_reader_next(r, &s) == SL_OK) {
    sl_sample_release(s);
    n++;
  }
  ASSERT_OK(sl_reader_reset(r));
  return n;
}

/* An interleave over sources it opens by name (callback mode): each open
 * source joins the interleave's budget - its read-ahead wrapper and its
 * reader's buffers (a GZIP stream: 96 KiB at least) are in the ledger
 * while it is open, and gone once the pass has closed them all. */
TEST(interleave_open_sources_join_the_budget) {
  const char *gz = "tfrecord:" DIR "/ex.tfrecord.gz";
  const char *names[3] = {gz, gz, gz};
  sl_interleave_opts o = SL_INTERLEAVE_OPTS_INIT;
  o.cycle = 2;
  o.block = 1;
  o.threads = 1; /* a read-ahead thread per open source */
  sl_reader *one = NULL;
  ASSERT_OK(sl_tfrecord_reader(DIR "/ex.tfrecord.gz", NULL, &one));
  uint64_t per = count_pass(one);
  sl_reader_destroy(one);
  ASSERT_GE(per, 2);
  sl_reader *r = NULL;
  ASSERT_OK(sl_interleave_open(names, 3, &o, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 2); /* one from each slot: two sources open */
  uint64_t held = ledger_of(r);
  ASSERT_GE(held, 2 * ((64 << 10) + (32 << 10)));
  ASSERT_LE(held, BUDGET);
  read_n(r, (int)(3 * per - 2));
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_EQ(ledger_of(r), 0); /* every source closed: nothing left */
  destroy_and_check(r, probe_of(r));
}

/* A budget set while sources are open (here without read-ahead): those
 * join it at the interleave's next call and are charged at their next
 * read. */
TEST(interleave_sources_open_before_the_budget_join_it) {
  const char *gz = "tfrecord:" DIR "/ex.tfrecord.gz";
  const char *names[2] = {gz, gz};
  sl_interleave_opts o = SL_INTERLEAVE_OPTS_INIT;
  o.cycle = 2;
  o.block = 1;
  sl_reader *r = NULL;
  ASSERT_OK(sl_interleave_open(names, 2, &o, &r));
  read_n(r, 2); /* both sources open */
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  read_n(r, 2); /* a record of each */
  uint64_t held = ledger_of(r);
  ASSERT_GE(held, 2 * ((64 << 10) + (32 << 10)));
  ASSERT_LE(held, BUDGET);
  destroy_and_check(r, probe_of(r));
}

/* --- decode_image ------------------------------------------------------------
 */

#if SLUICE_WITH_IMAGES

#define IMG_SIDE 64
#define IMG_BYTES (IMG_SIDE * IMG_SIDE * 3)
#define N_IMG 24

/* A folder of N_IMG 64 x 64 RGB PNGs (one class). */
static const char *png_folder(void) {
  static char dir[1024];
  if (dir[0]) return dir;
  snprintf(dir, sizeof dir, "%s", test_tmppath("budget_io", "png"));
  char p[1100];
  snprintf(p, sizeof p, "%s/a", dir);
  ASSERT_EQ(mkdir(dir, 0777) == 0 || errno == EEXIST, 1);
  ASSERT_EQ(mkdir(p, 0777) == 0 || errno == EEXIST, 1);
  static uint8_t px[IMG_BYTES];
  for (int i = 0; i < N_IMG; i++) {
    for (size_t k = 0; k < sizeof px; k++)
      px[k] = (uint8_t)(k * 7 + (size_t)i);
    size_t len;
    void *png = fix_png_encode(px, IMG_SIDE, IMG_SIDE, 3, &len);
    ASSERT_NOT_NULL(png);
    snprintf(p, sizeof p, "%s/a/%05d.png", dir, i);
    ASSERT_EQ(fix_write(p, png, len), 0);
    free(png);
  }
  return dir;
}

/* The stage's resident bytes (its own memory, not samples). */
static uint64_t resident_of(sl_reader *r) {
  sl__reader_view v;
  sl__reader_view_of(r, &v);
  ASSERT_NOT_NULL(v.acct);
  return sl__budget_acct_resident(v.acct);
}

/* The decoded images the consumer lets go return to the stage's pool as
 * idle buffers; those are the stage's memory, charged as it decodes the
 * next ones. */
TEST(decode_image_idle_pool_is_charged) {
  sl_image_opts o = SL_IMAGE_OPTS_INIT;
  o.threads = 1;
  o.window = 2;
  sl_reader *r = NULL;
  ASSERT_OK(sl_image_reader(png_folder(), &o, &r));
  ASSERT_OK(sl_reader_set_budget(r, BUDGET));
  sl_sample *kept[10];
  for (int i = 0; i < 10; i++)
    ASSERT_OK(sl_reader_next(r, &kept[i]));
  ASSERT_EQ(resident_of(r), 0); /* every buffer is out: none idle */
  for (int i = 0; i < 10; i++)
    sl_sample_release(kept[i]); /* 10 idle buffers */
  /* Each decode from now takes one (the window decodes at most 2 ahead):
   * after 3 more samples at least 10 - 2 - 3 are idle, charged. */
  read_n(r, 3);
  uint64_t res = resident_of(r);
  ASSERT_GE(res, 4 * IMG_BYTES);
  ASSERT_LE(held_of(r, "image"), BUDGET);
  destroy_and_check(r, probe_of(r));
}

#else /* !SLUICE_WITH_IMAGES: the test exists, and says why it does not run */

TEST_SKIPPED(decode_image_idle_pool_is_charged,
             "built without image support (-DSLUICE_WITH_IMAGES=OFF)")

#endif
