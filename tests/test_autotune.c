/* test_autotune.c - sl_prefetch_auto (tf.data's AUTOTUNE for a prefetch's
 * depth): the depth grows for a bursty producer, stays small for a fast
 * producer and for a slow one, never holds more than max_bytes, survives
 * reset; bad options; errors in order, save / restore, close with full
 * channels; and how far a chain runs ahead of a consumer that stops pulling
 * (the bound docs/LUA.md gives: a map's window + its cache, prefetch's
 * channel + its worker's sample + its cache). */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "sync/channel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

/* --- a counting generator: bursts, pauses, padding ---------------------- */

/* Yields {i: i64, pad: u8[pad]} for i in 0..n-1.  Every `burst` samples it
 * pauses pause_us (a bursty producer); each sample costs each_us.  `fail_at`
 * >= 0 makes that record an SL_EIO error.  The test owns it. */
typedef struct gen {
  sl_schema *schema;
  int64_t n, i, fail_at;
  int burst;
  long pause_us, each_us;
  int64_t pad;
  atomic_long produced;
} gen;

static int gen_next(void *ud, sl_sample **out) {
  gen *g = ud;
  if (g->i >= g->n) return SL_EOF;
  if (g->i == g->fail_at)
    return sl_set_error(SL_EIO, "gen: read failed at record %lld",
                        (long long)g->i);
  if (g->burst > 0 && g->i > 0 && g->i % g->burst == 0 && g->pause_us)
    test_sleep_us(g->pause_us);
  if (g->each_us) test_sleep_us(g->each_us);
  sl_sample *s = sl_sample_new(g->schema);
  if (!s) return sl_set_error(SL_ENOMEM, "gen: cannot allocate");
  void *d;
  int rc = sl_sample_alloc(s, 0, 0, NULL, &d);
  if (rc == SL_OK) {
    *(int64_t *)d = g->i;
    rc = sl_sample_alloc(s, 1, 1, &g->pad, &d);
  }
  if (rc == SL_OK) memset(d, (int)(g->i & 0xff), (size_t)g->pad);
  if (rc < 0) {
    sl_sample_release(s);
    return rc;
  }
  *out = s;
  g->i++;
  atomic_fetch_add(&g->produced, 1);
  return SL_OK;
}

static int gen_reset(void *ud) {
  ((gen *)ud)->i = 0;
  return SL_OK;
}

static void gen_init(gen *g, int64_t n, int burst, long pause_us, long each_us,
                     int64_t pad) {
  memset(g, 0, sizeof *g);
  g->schema = sl_schema_new();
  ASSERT_NOT_NULL(g->schema);
  ASSERT_OK(sl_schema_add(g->schema, "i", SL_I64, 0, NULL));
  const int64_t var[1] = {SL_DIM_VAR};
  ASSERT_OK(sl_schema_add(g->schema, "pad", SL_U8, 1, var));
  g->n = n;
  g->fail_at = -1;
  g->burst = burst;
  g->pause_us = pause_us;
  g->each_us = each_us;
  g->pad = pad;
  atomic_init(&g->produced, 0);
}

static sl_reader *gen_reader(gen *g) {
  sl_reader *r;
  ASSERT_OK(
      sl_reader_from_generator(g->schema, gen_next, gen_reset, NULL, g, &r));
  return r;
}

static void gen_done(gen *g) {
  sl_schema_release(g->schema);
}

static sl_reader *auto_over(sl_reader *up, uint64_t max_bytes,
                            uint32_t max_depth) {
  sl_prefetch_auto_opts o = SL_PREFETCH_AUTO_OPTS_INIT;
  o.max_bytes = max_bytes;
  o.max_depth = max_depth;
  sl_reader *r;
  ASSERT_OK(sl_prefetch_auto(up, &o, &r));
  return r;
}

static uint64_t depth_of(const sl_reader *r) {
  sl_stage_stats st[4];
  size_t n = 0;
  ASSERT_OK(sl_reader_stats(r, st, 4, &n));
  ASSERT_STREQ(st[0].name, "prefetch");
  return st[0].queue_depth;
}

/* Reads k samples, sleeping consumer_us after each; checks their order from
 * `first`.  Returns the largest depth seen. */
static uint64_t consume(sl_reader *r, int64_t first, int64_t k,
                        long consumer_us) {
  uint64_t most = 0;
  for (int64_t i = 0; i < k; i++) {
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(test_sample_i64(s, 0), first + i);
    sl_sample_release(s);
    uint64_t d = depth_of(r);
    if (d > most) most = d;
    if (consumer_us) test_sleep_us(consumer_us);
  }
  return most;
}

/* Waits until g->produced has not changed for `still_ms`; returns it. */
static long settle(gen *g, int still_ms) {
  long last = atomic_load(&g->produced);
  double since = test_now_s(), deadline = since + 20.0;
  for (;;) {
    test_sleep_us(2000);
    long now = atomic_load(&g->produced);
    if (now != last) {
      last = now;
      since = test_now_s();
    } else if (test_now_s() - since >= still_ms / 1000.0) {
      return now;
    }
    ASSERT_TRUE(test_now_s() < deadline);
  }
}

/* --- the channel's depth (sync/channel.h) ------------------------------- */

typedef struct sender {
  sl_channel *ch;
  sl_sample *s;
  atomic_int rc;
} sender;

static void *send_main(void *arg) {
  sender *x = arg;
  atomic_store(&x->rc, sl_channel_send(x->ch, x->s));
  return NULL;
}

TEST(channel_depth_bounds_sends_and_recv_reports_what_it_found) {
  sl_channel *ch = sl_channel_new(8, 0);
  ASSERT_NOT_NULL(ch);
  sl_schema *sc = sl_schema_new();
  ASSERT_OK(sl_schema_add(sc, "i", SL_I64, 0, NULL));
  sl_sample *v[4];
  for (int i = 0; i < 4; i++)
    ASSERT_OK(test_i64_sample(sc, i, &v[i]));
  sl__channel_set_depth(ch, 2);
  ASSERT_OK(sl_channel_try_send(ch, sl_sample_retain(v[0])));
  ASSERT_OK(sl_channel_try_send(ch, sl_sample_retain(v[1])));
  ASSERT_RC(sl_channel_try_send(ch, v[2]), SL_EAGAIN);
  int seen = -1;
  sl_sample *s = NULL;
  ASSERT_OK(sl__channel_recv_seen(ch, &s, &seen));
  ASSERT_EQ(seen, SL__CH_SEEN_FULL);
  ASSERT_EQ(test_sample_i64(s, 0), 0);
  sl_sample_release(s);
  ASSERT_OK(sl__channel_recv_seen(ch, &s, &seen));
  ASSERT_EQ(seen, SL__CH_SEEN_SOME);
  sl_sample_release(s);
  /* Lowered below what is queued: nothing is dropped, sends wait. */
  sl__channel_set_depth(ch, 3);
  for (int i = 0; i < 3; i++)
    ASSERT_OK(sl_channel_try_send(ch, sl_sample_retain(v[i])));
  sl__channel_set_depth(ch, 1);
  ASSERT_EQ(sl_channel_len(ch), 3);
  ASSERT_RC(sl_channel_try_send(ch, v[3]), SL_EAGAIN);
  /* Raised: a sender blocked on the full channel goes on. */
  sender x = {ch, sl_sample_retain(v[3]), 1};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, send_main, &x), 0);
  test_sleep_us(20000);
  ASSERT_EQ(atomic_load(&x.rc), 1); /* still blocked */
  sl__channel_set_depth(ch, 100);   /* clamped to the 8 slots */
  pthread_join(t, NULL);
  ASSERT_EQ(atomic_load(&x.rc), SL_OK);
  for (int i = 0; i < 4; i++) {
    ASSERT_OK(sl_channel_recv(ch, &s));
    ASSERT_EQ(test_sample_i64(s, 0), i);
    sl_sample_release(s);
  }
  /* Empty: the receive found nothing (here it ends at the close). */
  sl_channel_close(ch);
  ASSERT_RC(sl__channel_recv_seen(ch, &s, &seen), SL_EOF);
  ASSERT_EQ(seen, SL__CH_SEEN_EMPTY);
  sl_channel_destroy(ch);
  for (int i = 0; i < 4; i++)
    sl_sample_release(v[i]);
  sl_schema_release(sc);
}

/* --- arguments ----------------------------------------------------------- */

TEST(bad_arguments) {
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl_prefetch_auto(test_range_reader(3), NULL, NULL), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "prefetch: NULL out pointer");
  ASSERT_RC(sl_prefetch_auto(NULL, NULL, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "prefetch: NULL upstream");
  sl_prefetch_auto_opts o = SL_PREFETCH_AUTO_OPTS_INIT;
  o.max_depth = 65537;
  ASSERT_RC(sl_prefetch_auto(test_range_reader(3), &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "option 'max_depth' must be 1..65536");
  ASSERT_CONTAINS(sl_last_error(), "got 65537");
  o = (sl_prefetch_auto_opts)SL_PREFETCH_AUTO_OPTS_INIT;
  o.size = 0;
  ASSERT_RC(sl_prefetch_auto(test_range_reader(3), &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "sl_prefetch_auto_opts: size is 0");
  /* The defaults: NULL options. */
  ASSERT_OK(sl_prefetch_auto(test_range_reader(5), NULL, &r));
  ASSERT_STREQ(sl_reader_name(r), "prefetch");
  ASSERT_EQ(depth_of(r), 1); /* it starts at one */
  ASSERT_EQ(test_length_checked(r), 5);
  EXPECT(r, SL_EOF, 0, 1, 2, 3, 4);
  sl_reader_destroy(r);
}

TEST(prefetch_n_reports_its_depth_and_is_unchanged) {
  sl_reader *r;
  ASSERT_OK(sl_prefetch(test_range_reader(100), 7, &r));
  ASSERT_EQ(depth_of(r), 7);
  int64_t got[100];
  size_t n = 0;
  ASSERT_RC(test_drain_i64(r, got, 100, &n), SL_EOF);
  ASSERT_EQ(n, 100);
  ASSERT_EQ(depth_of(r), 7);
  sl_reader_destroy(r);
}

/* --- the tuning ----------------------------------------------------------- */

TEST(depth_grows_for_a_bursty_producer) {
  /* Bursts of 16 samples, then a 30 ms pause; the consumer takes one per
   * 0.5 ms.  The worker fills the channel during a burst (the consumer is
   * the slower side then) and the consumer drains it during the pause: the
   * depth doubles once per burst. */
  gen g;
  gen_init(&g, 16 * 7, 16, 30000, 0, 8);
  sl_reader *r = auto_over(gen_reader(&g), 0, 0);
  uint64_t most = consume(r, 0, 16 * 7, 500);
  ASSERT_GE(most, 8);
  ASSERT_LE(most, 32); /* a burst never fills more than 16 */
  /* The depth survives a reset. */
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(depth_of(r), most);
  consume(r, 0, 10, 0);
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(depth_stays_small_for_a_fast_producer) {
  /* The producer refills the channel in microseconds while the consumer
   * sleeps 1 ms per sample: the consumer never finds it empty. */
  gen g;
  gen_init(&g, 120, 0, 0, 0, 8);
  sl_reader *r = auto_over(gen_reader(&g), 0, 0);
  uint64_t most = consume(r, 0, 120, 1000);
  /* A scheduling hiccup may double it once or twice, no more. */
  ASSERT_LE(most, 4);
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(depth_stays_small_for_a_slow_producer) {
  /* 2 ms per sample and a consumer that never waits otherwise: the channel
   * is never full, so a deeper one would not help and is not made. */
  gen g;
  gen_init(&g, 60, 0, 0, 2000, 8);
  sl_reader *r = auto_over(gen_reader(&g), 0, 0);
  uint64_t most = consume(r, 0, 60, 0);
  ASSERT_LE(most, 2);
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(depth_and_samples_held_never_exceed_the_byte_bound) {
  /* 64 KiB samples and max_bytes 256 KiB: a bursty producer wants a depth
   * of 16 and more; it gets 4 (max_bytes / the sample size), and a consumer
   * that stops pulling finds at most 4 queued plus the one the worker holds
   * in hand.  The consumer takes 2 ms a sample so that the producer, whose
   * 64 KiB memset is slow under ThreadSanitizer on a loaded machine, stays
   * the faster side during a burst (at 0.3 ms the depth once never grew:
   * CI's tsan run). */
  gen g;
  gen_init(&g, 16 * 6 + 100, 16, 20000, 0, 65536 - 8);
  sl_reader *r = auto_over(gen_reader(&g), 256 << 10, 0);
  uint64_t most = consume(r, 0, 16 * 6, 2000);
  ASSERT_GE(most, 2);
  ASSERT_LE(most, 4);
  long produced = settle(&g, 100);
  ASSERT_LE(produced - 16 * 6, 4 + 1);
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(max_depth_caps_the_depth) {
  gen g;
  gen_init(&g, 16 * 6, 16, 20000, 0, 8);
  sl_reader *r = auto_over(gen_reader(&g), 0, 2);
  uint64_t most = consume(r, 0, 16 * 6, 300);
  ASSERT_LE(most, 2);
  long produced = settle(&g, 50);
  ASSERT_LE(produced, 16 * 6);
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(a_sample_larger_than_max_bytes_still_passes) {
  gen g;
  gen_init(&g, 20, 0, 0, 0, 4096);
  sl_reader *r = auto_over(gen_reader(&g), 1000, 0);
  consume(r, 0, 20, 0);
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_EQ(depth_of(r), 1);
  sl_reader_destroy(r);
  gen_done(&g);
}

/* --- the reader contract -------------------------------------------------- */

TEST(errors_arrive_in_order_with_their_message) {
  gen g;
  gen_init(&g, 50, 8, 1000, 0, 8);
  g.fail_at = 30;
  sl_reader *r = auto_over(gen_reader(&g), 0, 0);
  consume(r, 0, 30, 100);
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "gen: read failed at record 30");
  ASSERT_RC(sl_reader_next(r, &s), SL_EIO); /* sticky */
  g.fail_at = -1;
  ASSERT_OK(sl_reader_reset(r));
  consume(r, 0, 50, 0);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(reset_mid_pass) {
  gen g;
  gen_init(&g, 40, 4, 2000, 0, 8);
  sl_reader *r = auto_over(gen_reader(&g), 0, 0);
  for (int k = 0; k < 5; k++) {
    consume(r, 0, 3 + 7 * k, 200);
    ASSERT_OK(sl_reader_reset(r));
  }
  consume(r, 0, 40, 0);
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  gen_done(&g);
}

static sl_reader *build_auto(void *ud) {
  (void)ud;
  return auto_over(test_range_reader(40), 0, 0);
}

TEST(save_and_restore) {
  static const uint64_t cuts[] = {0, 1, 2, 17, 39, 40, 41, 79};
  test_resume_check(build_auto, NULL, 2, cuts, 8, 0);
}

TEST(close_mid_pass_with_full_channels) {
  for (int i = 0; i < 40; i++) {
    gen g;
    gen_init(&g, 100000, 0, 0, 0, 8);
    sl_reader *r = auto_over(gen_reader(&g), 0, (uint32_t)(1 + i % 8));
    consume(r, 0, i, 0);
    if (i % 3 == 0) settle(&g, 5); /* the channel full, the worker blocked */
    sl_reader_destroy(r);
    gen_done(&g);
  }
}

/* --- how far a chain runs ahead (docs/LUA.md, "Samples in flight") -------- */

static int identity(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  *out = in;
  return SL_OK;
}

TEST(run_ahead_of_map_and_prefetch_is_bounded_as_documented) {
  /* source -> map (threads t, queue q) -> prefetch(n): the consumer takes
   * 10 samples and stops; the source has then been pulled at most
   * 10 + (q + 15) + (n + 16) times: the map's window and its consumer
   * cache (16, one handed out), prefetch's channel, the sample its worker
   * holds and its consumer cache (16, one handed out). */
  const uint32_t qs[] = {8, 32, 0};
  for (int k = 0; k < 3; k++) {
    for (uint32_t t = 1; t <= 4; t *= 4) {
      const uint32_t q = qs[k];
      const size_t n = 4;
      gen g;
      gen_init(&g, 100000, 0, 0, 0, 8);
      sl_parallel_opts o = SL_PARALLEL_OPTS_INIT;
      o.threads = t;
      o.queue = q;
      sl_reader *m, *p;
      ASSERT_OK(
          sl_map_parallel(gen_reader(&g), identity, NULL, NULL, NULL, &o, &m));
      ASSERT_OK(sl_prefetch(m, n, &p));
      consume(p, 0, 10, 0);
      long produced = settle(&g, 100);
      const long window = q ? q : (32 * t > 128 ? 32 * t : 128);
      const long bound = 10 + (window + 15) + ((long)n + 16);
      if (produced > bound)
        test_fail(__FILE__, __LINE__,
                  "threads %u queue %u: the source was pulled %ld times, "
                  "more than the documented %ld",
                  t, q, produced, bound);
      /* It does run ahead: the window at least is filled. */
      ASSERT_GE(produced, 10 + window);
      sl_reader_destroy(p);
      gen_done(&g);
    }
  }
}

TEST(run_ahead_of_prefetch_auto_is_its_depth_plus_one) {
  gen g;
  gen_init(&g, 100000, 0, 0, 0, 8);
  sl_reader *r = auto_over(gen_reader(&g), 0, 0);
  consume(r, 0, 10, 0);
  long produced = settle(&g, 100);
  ASSERT_LE(produced, 10 + (long)depth_of(r) + 1);
  sl_reader_destroy(r);
  gen_done(&g);
}
