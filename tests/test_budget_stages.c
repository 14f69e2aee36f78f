/* test_budget_stages.c - the stages' own memory under the pipeline-wide
 * memory budget (issue 27; sl__budget_resident): a batch's pool of idle
 * output buffers, a bucket_batch's last batches kept for a save, a double
 * buffer's slots (the host engine), and the rest of an open_files unit the
 * consumer side delivers sample by sample.  Each is in its stage's
 * bytes_held (p:stats()), within the budget, and a reset leaves nothing
 * where the stage lets it go.  The Lua states of take_while, scan and a Lua
 * reader: spec/35-budget_stages_spec.lua.  Threads (the map's workers, the
 * double buffer's copy thread, open_files' workers): in the TSan suite
 * (make tsan). */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"

#include "sluice/device.h"
#include "sluice/open.h"

#define ITEM 1024 /* bytes of one widened sample */

/* v -> {x: u8[ITEM]} with x[0] = v (a new sample of ITEM payload bytes). */
static sl_schema *g_wide;
static int widen(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  int64_t v = test_sample_i64(in, 0);
  sl_sample_release(in);
  sl_sample *s = sl_sample_new(g_wide);
  uint8_t *x = NULL;
  int64_t n = ITEM;
  if (!s || sl_sample_alloc(s, 0, 1, &n, (void **)&x) < 0) {
    sl_sample_release(s);
    return sl_set_error(SL_ENOMEM, "widen");
  }
  memset(x, 0, ITEM);
  x[0] = (uint8_t)v;
  *out = s;
  return SL_OK;
}

/* range(n) widened by a map of one thread. */
static sl_reader *wide_map(int64_t n) {
  if (!g_wide) {
    int64_t k = ITEM;
    g_wide = sl_schema_new();
    ASSERT_OK(sl_schema_add(g_wide, "x", SL_U8, 1, &k));
  }
  sl_parallel_opts o = SL_PARALLEL_OPTS_INIT;
  o.threads = 1;
  sl_reader *m = NULL;
  ASSERT_OK(
      sl_map_parallel(test_range_reader(n), widen, NULL, NULL, g_wide, &o, &m));
  return m;
}

/* A batch of k rows, not fused with the map below: its output buffers come
 * from its pool on the consumer's thread alone. */
static sl_reader *batch_of(sl_reader *up, size_t k) {
  sl_batch_opts o = {0};
  o.no_fuse = 1;
  sl_reader *r = NULL;
  ASSERT_OK(sl_batch(up, k, &o, &r));
  return r;
}

static sl_sample *next_ok(sl_reader *r) {
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_OK);
  ASSERT_NOT_NULL(s);
  return s;
}

/* Stage `name`'s bytes held now (with its resident bytes). */
static uint64_t held_of(sl_reader *r, const char *name) {
  sl_stage_stats st[16];
  size_t n = 0;
  ASSERT_OK(sl_reader_stats(r, st, 16, &n));
  for (size_t i = 0; i < n && i < 16; i++)
    if (!strcmp(st[i].name, name)) {
      ASSERT_LE(st[i].bytes_held, st[i].budget_bytes);
      return st[i].bytes_held;
    }
  test_fail(__FILE__, __LINE__, "no stage '%s'", name);
  return 0;
}

/* Every stage's bytes held now: the ledger's total. */
static uint64_t total_held(sl_reader *r) {
  sl_stage_stats st[16];
  size_t n = 0;
  uint64_t t = 0;
  ASSERT_OK(sl_reader_stats(r, st, 16, &n));
  for (size_t i = 0; i < n && i < 16; i++)
    t += st[i].bytes_held;
  return t;
}

/* --- batch: its pool of idle output buffers -------------------------------
 */

/* Batches released by the consumer go back to the batch's pool: their
 * buffers, idle, are the batch's resident bytes (more than the carry of
 * the one batch handed out last), and the charge shrinks as the pool hands
 * one out again. */
TEST(batch_pool_idle_buffers_are_charged) {
  const uint64_t out = 8 * ITEM; /* one batch's buffer */
  sl_reader *r = batch_of(wide_map(400), 8);
  ASSERT_OK(sl_reader_set_budget(r, 1 << 20));
  sl_sample *held[4];
  for (int i = 0; i < 4; i++) {
    held[i] = next_ok(r);
    ASSERT_EQ(((const uint8_t *)sl_sample_at(held[i], 0)->data)[0],
              (uint8_t)(8 * i));
  }
  uint64_t before = held_of(r, "batch");
  for (int i = 0; i < 4; i++)
    sl_sample_release(held[i]); /* four buffers idle in the pool */
  uint64_t idle = held_of(r, "batch");
  ASSERT_TRUE(idle >= before + 4 * out);
  ASSERT_TRUE(idle >= 4 * out);
  sl_sample *s = next_ok(r); /* its buffer: one of the idle ones */
  uint64_t after = held_of(r, "batch");
  ASSERT_TRUE(after + out <= idle);
  ASSERT_TRUE(after >= 3 * out); /* three idle, the batch out its carry */
  sl_sample_release(s);
  /* a reset keeps the pool (and its charge) for the next pass */
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_TRUE(held_of(r, "batch") >= 4 * out);
  sl_reader_destroy(r);
}

/* The pool is a cache: a batch returned while the budget has no room for
 * its buffer frees it rather than pass the budget.  The map below fills
 * the room the consumer's batches left (they left the pipeline), so the
 * four batches released then find none. */
TEST(batch_pool_keeps_no_buffer_past_the_budget) {
  const uint64_t budget = 24 * ITEM;
  sl_reader *r = batch_of(wide_map(400), 8);
  ASSERT_OK(sl_reader_set_budget(r, budget));
  sl_sample *held[4];
  for (int i = 0; i < 4; i++)
    held[i] = next_ok(r);
  /* the map's worker fills the room (what the budget leaves beside the
   * headroom it keeps for the batch's rows and output, and the last
   * batch's carry: one sample at least), then waits */
  for (int t = 0; t < 5000 && held_of(r, "map") < ITEM; t++)
    test_sleep_us(1000);
  ASSERT_TRUE(held_of(r, "map") >= ITEM);
  test_sleep_us(20000);
  for (int i = 0; i < 4; i++)
    sl_sample_release(held[i]);
  /* the map's one sample past the budget (it may take one holding none) */
  ASSERT_LE(total_held(r), budget + ITEM);
  for (int i = 4; i < 50; i++) {
    sl_sample *s = next_ok(r);
    ASSERT_EQ(((const uint8_t *)sl_sample_at(s, 0)->data)[0], (uint8_t)(8 * i));
    sl_sample_release(s);
    ASSERT_LE(total_held(r), budget + ITEM + 8 * ITEM); /* a batch built */
  }
  sl_reader_destroy(r);
}

/* A batch released after its reader was destroyed goes nowhere near the
 * freed account (the pool let its watcher go at the destroy). */
TEST(batch_released_after_destroy) {
  sl_reader *r = batch_of(wide_map(64), 8);
  ASSERT_OK(sl_reader_set_budget(r, 1 << 20));
  sl_sample *a = next_ok(r), *b = next_ok(r);
  sl_sample_release(a); /* idle: charged */
  ASSERT_TRUE(held_of(r, "batch") >= 8 * ITEM);
  sl_reader_destroy(r);
  ASSERT_EQ(((const uint8_t *)sl_sample_at(b, 0)->data)[0], 8);
  sl_sample_release(b);
}

/* The pool's watcher itself: told every change of the idle bytes (the
 * charge follows them exactly), its refusal frees a returned buffer, a
 * watcher set over idle buffers is told them at once (and refusing,
 * frees them), and the release tells it the idle bytes went. */
typedef struct watch_log {
  size_t idle;   /* what the watcher was told is idle now */
  size_t refuse; /* refuse growth past this */
  int calls;
} watch_log;

static bool watch_fn(void *ud, size_t from, size_t to) {
  watch_log *w = ud;
  ASSERT_EQ(from, w->idle);
  w->calls++;
  if (to > from && to > w->refuse) return false;
  w->idle = to;
  return true;
}

TEST(buffer_pool_watcher_follows_the_idle_bytes) {
  sl__buffer_pool *p = sl__buffer_pool_new(8, 1 << 20);
  ASSERT_NOT_NULL(p);
  sl_buffer *b[3];
  for (int i = 0; i < 3; i++)
    ASSERT_NOT_NULL(b[i] = sl__buffer_pool_get(p, 4096));
  sl_buffer_release(b[0]); /* idle before any watcher */
  watch_log w = {0, 2 * 4096, 0};
  sl__buffer_pool_watch(p, watch_fn, &w);
  ASSERT_EQ(w.idle, sl__buffer_pool_idle_bytes(p)); /* told at once */
  ASSERT_TRUE(w.idle >= 4096);
  sl_buffer_release(b[1]);
  ASSERT_EQ(w.idle, sl__buffer_pool_idle_bytes(p));
  ASSERT_EQ(sl__buffer_pool_idle(p), 2);
  sl_buffer_release(b[2]); /* refused: freed, not kept */
  ASSERT_EQ(sl__buffer_pool_idle(p), 2);
  ASSERT_EQ(w.idle, sl__buffer_pool_idle_bytes(p));
  sl_buffer *again = sl__buffer_pool_get(p, 4096); /* taken: told */
  ASSERT_EQ(w.idle, sl__buffer_pool_idle_bytes(p));
  ASSERT_EQ(sl__buffer_pool_idle(p), 1);
  /* a new watcher refusing what is idle: the old one told it went, the
   * idle buffer freed */
  watch_log w2 = {0, 0, 0};
  sl__buffer_pool_watch(p, watch_fn, &w2);
  ASSERT_EQ(w.idle, 0);
  ASSERT_EQ(w2.idle, 0);
  ASSERT_EQ(sl__buffer_pool_idle(p), 0);
  sl__buffer_pool_watch(p, watch_fn, &w);
  w.refuse = SIZE_MAX;
  sl_buffer_release(again);
  ASSERT_EQ(w.idle, sl__buffer_pool_idle_bytes(p));
  ASSERT_TRUE(w.idle > 0);
  int calls = w.calls;
  sl__buffer_pool_release(p); /* told the idle bytes went, then no more */
  ASSERT_EQ(w.idle, 0);
  ASSERT_EQ(w.calls, calls + 1);
}

/* --- bucket_batch: the last batches kept for a save ------------------------
 */

/* The rows of the batches handed out stay referenced for a save behind
 * (the last 32 batches): they are the stage's resident bytes, at least
 * their tokens' bytes, within the budget; a reset lets them go. */
TEST(bucket_batch_kept_batches_are_charged) {
  const int64_t bounds[] = {25};
  const size_t sizes[] = {4, 4};
  sl_bucket_batch_opts o = SL_BUCKET_BATCH_OPTS_INIT;
  o.boundaries = bounds;
  o.nboundaries = 1;
  o.batch_sizes = sizes;
  sl_reader *r = NULL;
  ASSERT_OK(sl_bucket_batch(test_docs(test_range_reader(2000)), &o, &r));
  ASSERT_OK(sl_reader_set_budget(r, 1 << 20));
  uint64_t tokens = 0;
  for (int b = 0; b < 20; b++) { /* fewer than the 32 kept */
    sl_sample *s = next_ok(r);
    const sl_tensor *lens = sl_sample_at(s, 1); /* ids_len: i64[B] */
    for (int64_t j = 0; j < lens->shape[0]; j++)
      tokens += (uint64_t)((const int64_t *)lens->data)[j];
    sl_sample_release(s);
  }
  /* the kept rows alone: 4 bytes a token of the 80 rows handed out */
  ASSERT_TRUE(held_of(r, "bucket_batch") >= 4 * tokens);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(held_of(r, "bucket_batch"), 0);
  /* a whole pass: never more than the 32 batches kept and the buckets */
  uint64_t most = 0, rows = 0;
  sl_sample *s = NULL;
  while (sl_reader_next(r, &s) == SL_OK) {
    rows += (uint64_t)sl_sample_at(s, 1)->shape[0];
    sl_sample_release(s);
    uint64_t h = held_of(r, "bucket_batch");
    most = h > most ? h : most;
  }
  ASSERT_EQ(rows, 2000);
  ASSERT_TRUE(most <= (32 * 4 + 8) * 50 * 4 + 4096);
  sl_reader_destroy(r);
}

/* --- double_buffer: the slots (host engine) -------------------------------
 */

/* Two batches held at once fill both slots: their host memory (8 KiB
 * each) is the stage's resident bytes (the budget set below it, so the
 * copy thread runs under it from its first slot); a reset keeps the slots
 * and their charge; the pass still yields every batch. */
TEST(double_buffer_slots_are_charged) {
  sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
  o.device = "cpu";
  o.slots = 2;
  sl_reader *r = batch_of(wide_map(160), 8);
  ASSERT_OK(sl_reader_set_budget(r, 1 << 20));
  ASSERT_OK(sl_double_buffer(r, &o, &r));
  sl_sample *a = next_ok(r), *b = next_ok(r); /* one slot each */
  ASSERT_EQ(((const uint8_t *)sl_sample_at(b, 0)->data)[0], 8);
  ASSERT_TRUE(held_of(r, "double_buffer") >= 2 * 8 * ITEM);
  sl_sample_release(a);
  sl_sample_release(b);
  int got = 2;
  sl_sample *s = NULL;
  while (sl_reader_next(r, &s) == SL_OK) {
    ASSERT_EQ(((const uint8_t *)sl_sample_at(s, 0)->data)[0],
              (uint8_t)(8 * got));
    got++;
    sl_sample_release(s);
  }
  ASSERT_EQ(got, 20);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_TRUE(held_of(r, "double_buffer") >= 2 * 8 * ITEM);
  sl_reader_destroy(r);
}

/* --- open_files: the rest of a unit ---------------------------------------
 */

/* One file of one chunk: one unit of 1000 ids, decoded by the one worker
 * and delivered by the consumer sample by sample.  After its second sample
 * the rest of the unit (998 ids of 8 bytes) is still the stage's, above
 * what it holds at the end of the pass (the worker's file alone); a reset
 * in the middle of the unit lets the rest go.  The worker starts as the
 * reader is made, before the budget is set: its file is charged from its
 * next chunk load, the second pass's, which is the one measured. */
TEST(open_files_unit_stays_counted) {
  const char *path = test_tmppath("budget_stages", "unit.slr");
  test_write_ids_slr(path, 0, 1000, 1000);
  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
  o.threads = 1;
  sl_reader *r = NULL;
  ASSERT_OK(sl_open_files(&path, 1, &o, &r));
  ASSERT_OK(sl_reader_set_budget(r, 4 << 20));
  uint64_t at2 = 0, end = 0;
  for (int pass = 0; pass < 3; pass++) {
    for (int64_t i = 0; i < 1000; i++) {
      sl_sample *s = next_ok(r);
      ASSERT_EQ(test_sample_i64(s, 0), i);
      sl_sample_release(s);
      if (i == 1 && pass == 1) at2 = held_of(r, "open_files");
      if (i == 1 && pass == 2) ASSERT_EQ(held_of(r, "open_files"), at2);
    }
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    uint64_t h = held_of(r, "open_files");
    if (pass == 1) end = h;
    if (pass == 2) ASSERT_EQ(h, end); /* nothing left over */
    if (pass > 0) ASSERT_TRUE(at2 >= end + 998 * 8);
    ASSERT_OK(sl_reader_reset(r));
  }
  /* a reset with most of the unit in the consumer's hands */
  for (int64_t i = 0; i < 2; i++)
    sl_sample_release(next_ok(r));
  ASSERT_OK(sl_reader_reset(r));
  for (int64_t i = 0; i < 1000; i++)
    sl_sample_release(next_ok(r));
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_EQ(held_of(r, "open_files"), end);
  sl_reader_destroy(r);
}

/* A shuffle window of several chunks (a group of units gathered before
 * any goes out) under a budget that holds about one unit: the consumer
 * keeps the group's first units while it waits for the others, and the
 * workers still take them (the kept units are not samples held by the
 * stage's window); every record comes once. */
TEST(open_files_group_under_a_small_budget) {
  const char *path = test_tmppath("budget_stages", "group.slr");
  test_write_ids_slr(path, 0, 4000, 500); /* 8 chunks of 4000 bytes */
  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
  o.threads = 2;
  o.shuffle = 1;
  o.window = 2000; /* 4 chunks a group */
  o.seed = 7;
  sl_reader *r = NULL;
  ASSERT_OK(sl_open_files(&path, 1, &o, &r));
  ASSERT_OK(sl_reader_set_budget(r, 6000));
  static bool seen[4000];
  memset(seen, 0, sizeof seen);
  for (int64_t i = 0; i < 4000; i++) {
    sl_sample *s = next_ok(r);
    int64_t v = test_sample_i64(s, 0);
    ASSERT_TRUE(v >= 0 && v < 4000 && !seen[v]);
    seen[v] = true;
    sl_sample_release(s);
  }
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
}
