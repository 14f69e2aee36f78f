/* test_double_buffer.c - sl_double_buffer (the ring, on the host engine):
 * order and values, batches reporting their device, slots reused only after
 * release, a consumer holding every slot (an error, never a hang), running
 * ahead of the consumer, reset and destroy with batches outstanding, upstream
 * errors in order with their message, bad options; the CUDA engine on this
 * machine (no driver: SL_ECUDA naming the CUDA error) and "auto"'s fallback
 * to the host engine, said once; DLPack export on the CPU path. */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "device/device.h"

#include <dlpack/dlpack.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

/* --- helpers -------------------------------------------------------------- */

static sl_reader *dbuf(sl_reader *up, const char *device, uint32_t slots) {
  sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
  o.device = device;
  o.slots = slots;
  sl_reader *r = NULL;
  ASSERT_OK(sl_double_buffer(up, &o, &r));
  ASSERT_NOT_NULL(r);
  return r;
}

static sl_sample *next_ok(sl_reader *r) {
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_OK);
  ASSERT_NOT_NULL(s);
  return s;
}

static int64_t first_i64(const sl_sample *s) {
  return test_sample_i64(s, 0);
}

static const void *data_of(const sl_sample *s, int i) {
  return sl_sample_at_const(s, i)->data;
}

/* A generator of {i: i64[]} samples 0..n-1, failing with SL_EIO at fail_at
 * (when >= 0), counting what it produced.  The test owns it. */
typedef struct gen {
  sl_schema *schema;
  int64_t n, fail_at, i;
  atomic_long produced;
  atomic_int frees;
} gen;

static int gen_next(void *ud, sl_sample **out) {
  gen *g = ud;
  if (g->i == g->fail_at)
    return sl_set_error(SL_EIO, "gen: boom at %lld", (long long)g->i);
  if (g->i >= g->n) return SL_EOF;
  int rc = test_i64_sample(g->schema, g->i, out);
  if (rc < 0) return rc;
  g->i++;
  atomic_fetch_add(&g->produced, 1);
  return SL_OK;
}

static int gen_reset(void *ud) {
  ((gen *)ud)->i = 0;
  return SL_OK;
}

static void gen_free(void *ud) {
  atomic_fetch_add(&((gen *)ud)->frees, 1);
}

static sl_reader *gen_reader(gen *g, int64_t n, int64_t fail_at) {
  memset(g, 0, sizeof *g);
  g->schema = sl_schema_new();
  ASSERT_NOT_NULL(g->schema);
  ASSERT_OK(sl_schema_add(g->schema, "i", SL_I64, 0, NULL));
  g->n = n;
  g->fail_at = fail_at;
  atomic_init(&g->produced, 0);
  atomic_init(&g->frees, 0);
  sl_reader *r;
  ASSERT_OK(sl_reader_from_generator(g->schema, gen_next, gen_reset, gen_free,
                                     g, &r));
  return r;
}

static void gen_done(gen *g) {
  ASSERT_EQ(atomic_load(&g->frees), 1);
  sl_schema_release(g->schema);
}

/* Waits (bounded) until the generator has produced at least n samples. */
static void wait_produced(gen *g, long n) {
  double deadline = test_now_s() + 20.0;
  while (atomic_load(&g->produced) < n) {
    if (test_now_s() > deadline)
      test_fail(__FILE__, __LINE__, "upstream produced %ld of %ld samples",
                atomic_load(&g->produced), n);
    sched_yield();
  }
}

/* Batches {x: f32[B, 3], label: i64[B]} of range(n) (x = 3 * i + k). */
static sl_reader *float_batches(int64_t n, size_t b) {
  sl_schema *sc = sl_schema_new();
  ASSERT_NOT_NULL(sc);
  int64_t three = 3;
  ASSERT_OK(sl_schema_add(sc, "x", SL_F32, 1, &three));
  ASSERT_OK(sl_schema_add(sc, "label", SL_I64, 0, NULL));
  sl_sample **v = calloc((size_t)n, sizeof *v);
  ASSERT_NOT_NULL(v);
  for (int64_t i = 0; i < n; i++) {
    v[i] = sl_sample_new(sc);
    ASSERT_NOT_NULL(v[i]);
    void *d;
    ASSERT_OK(sl_sample_alloc(v[i], 0, 1, &three, &d));
    for (int k = 0; k < 3; k++)
      ((float *)d)[k] = (float)(3 * i + k);
    ASSERT_OK(sl_sample_alloc(v[i], 1, 0, NULL, &d));
    *(int64_t *)d = i;
  }
  sl_reader *r, *out;
  ASSERT_OK(sl_reader_from_array(v, (size_t)n, sc, &r));
  for (int64_t i = 0; i < n; i++)
    sl_sample_release(v[i]);
  free(v);
  sl_schema_release(sc);
  ASSERT_OK(sl_batch(r, b, NULL, &out));
  return out;
}

/* Runs `fn` with stderr sent to a file, and returns what it wrote (static
 * buffer). */
static const char *capture_stderr(void (*fn)(void *), void *arg) {
  static char text[4096];
  char path[] = "/tmp/sluice-test-dbuf-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  unlink(path);
  fflush(stderr);
  int saved = dup(2);
  ASSERT_TRUE(saved >= 0);
  ASSERT_TRUE(dup2(fd, 2) >= 0);
  fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  text[n > 0 ? n : 0] = '\0';
  return text;
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

/* --- order, values, devices ------------------------------------------------
 */

TEST(order_and_values_are_preserved) {
  /* 100 samples in batches of 7: 14 full batches and a short one, so the
   * slots also see a smaller batch after larger ones. */
  sl_reader *r = dbuf(float_batches(100, 7), "cpu", 2);
  ASSERT_STREQ(sl_reader_name(r), "double_buffer");
  for (int pass = 0; pass < 2; pass++) {
    int64_t seen = 0;
    for (;;) {
      sl_sample *b = NULL;
      int rc = sl_reader_next(r, &b);
      if (rc == SL_EOF) break;
      ASSERT_RC(rc, SL_OK);
      const sl_tensor *x = sl_sample_field(b, "x");
      const sl_tensor *l = sl_sample_field(b, "label");
      ASSERT_EQ(x->rank, 2);
      ASSERT_EQ(x->shape[1], 3);
      ASSERT_EQ(x->shape[0], l->shape[0]);
      ASSERT_EQ(x->shape[0], seen + 7 <= 100 ? 7 : 100 - seen);
      for (int64_t k = 0; k < l->shape[0]; k++) {
        ASSERT_EQ(((const int64_t *)l->data)[k], seen + k);
        for (int j = 0; j < 3; j++)
          ASSERT_EQ(((const float *)x->data)[3 * k + j], 3 * (seen + k) + j);
      }
      seen += l->shape[0];
      sl_sample_release(b);
    }
    ASSERT_EQ(seen, 100);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

TEST(batches_report_their_device_and_aligned_pointers) {
  sl_reader *r = dbuf(float_batches(10, 5), "cpu", 2);
  sl_sample *b = next_ok(r);
  for (int i = 0; i < sl_sample_nfields(b); i++) {
    const sl_tensor *t = sl_sample_at_const(b, i);
    int id = -1;
    ASSERT_EQ(sl_tensor_device(t, &id), SL_DEVICE_CPU);
    ASSERT_EQ(id, 0);
    ASSERT_EQ(sl_buffer_device(t->buf, NULL), SL_DEVICE_CPU);
    ASSERT_EQ((uintptr_t)t->data % SL_SLOT_ALIGN, 0);
  }
  /* Both fields live in the one slot block, one lease. */
  ASSERT_PTR_EQ(sl_sample_at_const(b, 0)->buf, sl_sample_at_const(b, 1)->buf);
  char name[32];
  ASSERT_STREQ(sl_device_describe(SL_DEVICE_CUDA, 3, name, sizeof name),
               "cuda:3");
  ASSERT_STREQ(sl_device_describe(SL_DEVICE_CPU, 0, name, sizeof name), "cpu");
  ASSERT_STREQ(sl_device_describe(SL_DEVICE_CUDA_HOST, 0, name, sizeof name),
               "cuda_host");
  ASSERT_EQ(sl_tensor_device(NULL, NULL), SL_DEVICE_CPU);
  sl_sample_release(b);
  sl_reader_destroy(r);
}

TEST(ragged_fields_keep_their_lod_offsets) {
  /* {v: i32[-1]} samples of lengths 0, 1, 2, ... batched with LoD. */
  sl_schema *sc = sl_schema_new();
  ASSERT_NOT_NULL(sc);
  int64_t var = SL_DIM_VAR;
  ASSERT_OK(sl_schema_add(sc, "v", SL_I32, 1, &var));
  sl_sample *v[9];
  for (int i = 0; i < 9; i++) {
    v[i] = sl_sample_new(sc);
    ASSERT_NOT_NULL(v[i]);
    int64_t len = i;
    void *d;
    ASSERT_OK(sl_sample_alloc(v[i], 0, 1, &len, &d));
    for (int k = 0; k < i; k++)
      ((int32_t *)d)[k] = 100 * i + k;
  }
  sl_reader *up, *bat;
  ASSERT_OK(sl_reader_from_array(v, 9, sc, &up));
  for (int i = 0; i < 9; i++)
    sl_sample_release(v[i]);
  sl_schema_release(sc);
  ASSERT_OK(sl_batch(up, 3, NULL, &bat));
  sl_reader *r = dbuf(bat, "cpu", 2);
  for (int b = 0; b < 3; b++) {
    sl_sample *s = next_ok(r);
    const sl_tensor *t = sl_sample_at_const(s, 0);
    int64_t len;
    const int64_t *lod = sl_tensor_lod(t, &len);
    ASSERT_NOT_NULL(lod);
    ASSERT_EQ(len, 4);
    /* The offsets live in the slot, after the data. */
    const char *base = sl_buffer_data(t->lod_buf);
    ASSERT_TRUE((const char *)lod >= base &&
                (const char *)(lod + len) <= base + sl_buffer_size(t->lod_buf));
    for (int k = 0; k < 3; k++) {
      int i = 3 * b + k;
      ASSERT_EQ(lod[k + 1] - lod[k], i);
      for (int j = 0; j < i; j++)
        ASSERT_EQ(((const int32_t *)t->data)[lod[k] + j], 100 * i + j);
    }
    sl_sample_release(s);
  }
  sl_sample *s = (sl_sample *)1;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_NULL(s);
  sl_reader_destroy(r);
}

TEST(empty_upstream_ends_at_once) {
  sl_reader *r = dbuf(test_range_reader(0), "cpu", 2);
  EXPECT_NONE(r, SL_EOF);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT_NONE(r, SL_EOF);
  sl_reader_destroy(r);
}

/* --- slots -----------------------------------------------------------------
 */

TEST(slot_is_reused_only_after_release) {
  gen g;
  sl_reader *r = dbuf(gen_reader(&g, 100, -1), "cpu", 2);
  sl_sample *b0 = next_ok(r), *b1 = next_ok(r);
  const void *p0 = data_of(b0, 0), *p1 = data_of(b1, 0);
  ASSERT_TRUE(p0 != p1);
  /* The worker pulls sample 2 and then has no slot to put it in: it waits
   * however long the consumer holds both. */
  wait_produced(&g, 3);
  test_sleep_us(20000);
  ASSERT_EQ(atomic_load(&g.produced), 3);
  ASSERT_EQ(first_i64(b0), 0);
  ASSERT_EQ(first_i64(b1), 1);
  /* Releasing b0 frees its slot, and only that one: batch 2 lands there. */
  sl_sample_release(b0);
  sl_sample *b2 = next_ok(r);
  ASSERT_EQ(first_i64(b2), 2);
  ASSERT_PTR_EQ(data_of(b2, 0), p0);
  ASSERT_EQ(first_i64(b1), 1); /* untouched */
  sl_sample_release(b1);
  sl_sample *b3 = next_ok(r);
  ASSERT_EQ(first_i64(b3), 3);
  ASSERT_PTR_EQ(data_of(b3, 0), p1);
  ASSERT_EQ(first_i64(b2), 2);
  sl_sample_release(b2);
  sl_sample_release(b3);
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(fills_slots_ahead_of_an_idle_consumer) {
  gen g;
  sl_reader *r = dbuf(gen_reader(&g, 100, -1), "cpu", 3);
  /* Nobody calls next: the worker fills 3 slots and pulls a 4th sample,
   * then waits for a slot. */
  wait_produced(&g, 4);
  test_sleep_us(20000);
  ASSERT_EQ(atomic_load(&g.produced), 4);
  for (int64_t i = 0; i < 100; i++) {
    sl_sample *s = next_ok(r);
    ASSERT_EQ(first_i64(s), i);
    sl_sample_release(s);
  }
  EXPECT_NONE(r, SL_EOF);
  sl_reader_destroy(r);
  gen_done(&g);
}

TEST(holding_every_slot_is_an_error_not_a_hang) {
  sl_reader *r = dbuf(test_range_reader(10), "cpu", 2);
  sl_sample *b0 = next_ok(r), *b1 = next_ok(r), *b2 = (sl_sample *)1;
  ASSERT_RC(sl_reader_next(r, &b2), SL_ESTATE);
  ASSERT_NULL(b2);
  ASSERT_CONTAINS(sl_last_error(), "double_buffer: the consumer holds all 2 "
                                   "slots (cpu)");
  ASSERT_CONTAINS(sl_last_error(), "release a batch");
  /* The held batches are intact; the error is sticky until reset. */
  ASSERT_EQ(first_i64(b0), 0);
  ASSERT_EQ(first_i64(b1), 1);
  sl_sample_release(b0);
  ASSERT_RC(sl_reader_next(r, &b2), SL_ESTATE);
  sl_sample_release(b1);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
  sl_reader_destroy(r);

  /* One slot: holding one batch is holding them all. */
  r = dbuf(test_range_reader(5), "cpu", 1);
  b0 = next_ok(r);
  ASSERT_RC(sl_reader_next(r, &b2), SL_ESTATE);
  ASSERT_CONTAINS(sl_last_error(), "holds all 1 slot (cpu)");
  sl_sample_release(b0);
  sl_reader_destroy(r);
}

TEST(holding_every_slot_waits_release_wait_ms_then_fails) {
  sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
  o.device = "cpu";
  o.release_wait_ms = 50;
  sl_reader *r = NULL;
  ASSERT_OK(sl_double_buffer(test_range_reader(10), &o, &r));
  sl_sample *b0 = next_ok(r), *b1 = next_ok(r), *b2 = NULL;
  double t0 = test_now_s();
  ASSERT_RC(sl_reader_next(r, &b2), SL_ESTATE);
  ASSERT_TRUE(test_now_s() - t0 >= 0.045);
  ASSERT_CONTAINS(sl_last_error(), "holds all 2 slots (cpu) (for 50 ms)");
  sl_sample_release(b0);
  sl_sample_release(b1);
  sl_reader_destroy(r);
}

TEST(holding_every_slot_at_the_end_is_eof) {
  /* Exactly `slots` batches: the last next finds the end, not an error. */
  sl_reader *r = dbuf(test_range_reader(2), "cpu", 2);
  sl_sample *b0 = next_ok(r), *b1 = next_ok(r), *b2 = (sl_sample *)1;
  ASSERT_RC(sl_reader_next(r, &b2), SL_EOF);
  ASSERT_NULL(b2);
  sl_sample_release(b0);
  sl_sample_release(b1);
  sl_reader_destroy(r);
}

static void *release_thunk(void *s) {
  sl_sample_release(s);
  return NULL;
}

TEST(releasing_from_another_thread_frees_the_slot) {
  enum { N = 200 };
  static pthread_t threads[N];
  sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
  o.device = "cpu";
  o.release_wait_ms = 60000; /* the releasing threads may lag behind */
  sl_reader *r = NULL;
  ASSERT_OK(sl_double_buffer(test_range_reader(N), &o, &r));
  for (int64_t i = 0; i < N; i++) {
    sl_sample *s = next_ok(r);
    ASSERT_EQ(first_i64(s), i);
    /* Released by another thread while the consumer goes on (and waits
     * for that release once both slots are out). */
    ASSERT_EQ(pthread_create(&threads[i], NULL, release_thunk, s), 0);
  }
  EXPECT_NONE(r, SL_EOF);
  for (int i = 0; i < N; i++)
    pthread_join(threads[i], NULL);
  sl_reader_destroy(r);
}

/* --- reset, destroy --------------------------------------------------------
 */

TEST(reset_with_batches_outstanding) {
  sl_reader *r = dbuf(float_batches(40, 4), "cpu", 3);
  sl_sample *a = next_ok(r), *b = next_ok(r);
  ASSERT_OK(sl_reader_reset(r)); /* a and b keep their slots */
  /* One free slot is enough to read a whole pass, one batch at a time. */
  for (int64_t i = 0; i < 10; i++) {
    sl_sample *s = next_ok(r);
    ASSERT_EQ(((const int64_t *)sl_sample_field(s, "label")->data)[0], 4 * i);
    sl_sample_release(s);
  }
  EXPECT_NONE(r, SL_EOF);
  ASSERT_EQ(((const int64_t *)sl_sample_field(a, "label")->data)[3], 3);
  ASSERT_EQ(((const float *)sl_sample_field(b, "x")->data)[0], 12.0);
  ASSERT_OK(sl_reader_reset(r));
  sl_reader_destroy(r); /* destroyed with batches still out */
  ASSERT_EQ(((const int64_t *)sl_sample_field(a, "label")->data)[0], 0);
  sl_sample_release(a);
  ASSERT_EQ(((const int64_t *)sl_sample_field(b, "label")->data)[0], 4);
  sl_sample_release(b); /* the last reference frees the ring */
}

TEST(destroy_at_any_moment) {
  for (int round = 0; round < 300; round++) {
    gen g;
    sl_reader *r = dbuf(gen_reader(&g, 50, -1), "cpu", 1 + round % 3);
    sl_sample *held[3] = {NULL, NULL, NULL};
    int nheld = round % (2 + round % 3); /* 0 .. slots */
    for (int k = 0; k < nheld; k++)
      held[k] = next_ok(r);
    if (round % 5 == 0) ASSERT_OK(sl_reader_reset(r));
    sl_reader_destroy(r);
    for (int k = 0; k < nheld; k++) {
      ASSERT_EQ(first_i64(held[k]), k);
      sl_sample_release(held[k]);
    }
    gen_done(&g);
  }
}

/* --- errors ----------------------------------------------------------------
 */

TEST(upstream_errors_pass_through_in_order) {
  gen g;
  sl_reader *r = dbuf(gen_reader(&g, 10, 3), "cpu", 2);
  EXPECT(r, SL_EIO, 0, 1, 2);
  ASSERT_STREQ(sl_last_error(), "gen: boom at 3");
  sl_sample *s = (sl_sample *)1;
  ASSERT_RC(sl_reader_next(r, &s), SL_EIO); /* sticky */
  ASSERT_STREQ(sl_last_error(), "gen: boom at 3");
  ASSERT_NULL(s);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EIO, 0, 1, 2);
  sl_reader_destroy(r);
  gen_done(&g);
}

static void free_nothing(void *ud, void *data) {
  (void)ud;
  (void)data;
}

TEST(batches_already_on_a_device_are_refused) {
  sl_schema *sc = sl_schema_new();
  ASSERT_NOT_NULL(sc);
  int64_t four = 4;
  ASSERT_OK(sl_schema_add(sc, "y", SL_U8, 1, &four));
  static uint8_t fake[4];
  sl_buffer *buf =
      sl_buffer_wrap_device(fake, 4, SL_DEVICE_CUDA, 1, free_nothing, NULL);
  ASSERT_NOT_NULL(buf);
  int id = -1;
  ASSERT_EQ(sl_buffer_device(buf, &id), SL_DEVICE_CUDA);
  ASSERT_EQ(id, 1);
  sl_sample *s = sl_sample_new(sc);
  ASSERT_NOT_NULL(s);
  sl_tensor t;
  ASSERT_OK(sl_tensor_view(&t, SL_U8, 1, &four, buf, 0));
  ASSERT_OK(sl_sample_set_move(s, 0, &t));
  sl_buffer_release(buf);
  sl_reader *up;
  ASSERT_OK(sl_reader_from_array(&s, 1, NULL, &up));
  sl_sample_release(s);
  sl_schema_release(sc);
  sl_reader *r = dbuf(up, "cpu", 2);
  EXPECT_NONE(r, SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
               "double_buffer: field 'y' of the batch is in cuda:1 memory: "
               "the double buffer copies batches from host memory");
  sl_reader_destroy(r);
  /* A bad device for a wrapper is refused. */
  ASSERT_NULL(sl_buffer_wrap_device(fake, 4, (sl_device_type)9, 0, NULL, NULL));
  ASSERT_NULL(sl_buffer_wrap_device(fake, 4, SL_DEVICE_CUDA, -1, NULL, NULL));
}

TEST(bad_options_are_refused) {
  sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
  sl_reader *r = (sl_reader *)1;
  o.slots = 0;
  ASSERT_RC(sl_double_buffer(test_range_reader(3), &o, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_STREQ(sl_last_error(), "double_buffer: slots must be 1..256 (got 0)");
  o.slots = 257;
  ASSERT_RC(sl_double_buffer(test_range_reader(3), &o, &r), SL_EINVAL);
  o.slots = 2;

  o.device = "tpu:0";
  ASSERT_RC(sl_double_buffer(test_range_reader(3), &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(),
               "double_buffer: unknown device \"tpu:0\": expected \"cpu\", "
               "\"cuda\", \"cuda:N\" (N a device number) or \"auto\"");
  const char *bad_numbers[] = {"cuda:x", "cuda:", "cuda:-1", "cuda:1x",
                               "cuda:99999999999"};
  for (size_t i = 0; i < sizeof bad_numbers / sizeof bad_numbers[0]; i++) {
    o.device = bad_numbers[i];
    ASSERT_RC(sl_double_buffer(test_range_reader(3), &o, &r), SL_EINVAL);
    ASSERT_CONTAINS(sl_last_error(), "double_buffer: bad device \"");
    ASSERT_CONTAINS(sl_last_error(), bad_numbers[i]);
    ASSERT_CONTAINS(sl_last_error(), "must be a decimal integer >= 0");
  }
  o.device = "CPU";
  ASSERT_RC(sl_double_buffer(test_range_reader(3), &o, &r), SL_EINVAL);
  o.device = "cpu";

  o.size = 0;
  ASSERT_RC(sl_double_buffer(test_range_reader(3), &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "SL_DOUBLE_BUFFER_OPTS_INIT");
  o.size = sizeof o;

  ASSERT_RC(sl_double_buffer(NULL, &o, &r), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "double_buffer: NULL upstream reader");
  ASSERT_RC(sl_double_buffer(test_range_reader(3), &o, NULL), SL_EINVAL);

  /* A struct from a newer header: unknown non-zero bytes are refused. */
  struct {
    sl_double_buffer_opts o;
    uint64_t extra;
  } newer = {SL_DOUBLE_BUFFER_OPTS_INIT, 1};
  newer.o.size = sizeof newer;
  ASSERT_RC(sl_double_buffer(test_range_reader(3), &newer.o, &r),
            SL_EUNSUPPORTED);
  newer.extra = 0;
  newer.o.device = "cpu";
  ASSERT_OK(sl_double_buffer(test_range_reader(3), &newer.o, &r));
  EXPECT(r, SL_EOF, 0, 1, 2);
  sl_reader_destroy(r);
}

TEST(allocation_failures_leak_nothing) {
  /* Construction and the worker's fills both allocate; any failure is
   * SL_ENOMEM (at creation, or as the pass's error) and leaks nothing. */
  int created = 0;
  for (long k = 0; k < 200; k++) {
    sl_reader *up = test_range_reader(3), *r = (sl_reader *)1;
    sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
    o.device = "cpu";
    sl__alloc_fail_after(k);
    int rc = sl_double_buffer(up, &o, &r);
    if (rc != SL_OK) {
      sl__alloc_fail_after(-1);
      ASSERT_RC(rc, SL_ENOMEM);
      ASSERT_NULL(r);
      continue;
    }
    created++;
    int64_t v[8];
    size_t n = 0;
    rc = test_drain_i64(r, v, 8, &n);
    sl__alloc_fail_after(-1);
    ASSERT_TRUE(rc == SL_EOF || rc == SL_ENOMEM);
    for (size_t i = 0; i < n; i++)
      ASSERT_EQ(v[i], (int64_t)i);
    if (rc == SL_EOF) ASSERT_EQ(n, 3);
    sl_reader_destroy(r);
  }
  ASSERT_TRUE(created > 0);
}

TEST(a_thread_that_cannot_start_fails_the_stage_and_leaks_nothing) {
  /* At construction: SL_ENOMEM naming the stage, the upstream freed. */
  gen g;
  sl_reader *r = (sl_reader *)1;
  sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
  o.device = "cpu";
  sl_reader *up = gen_reader(&g, 5, -1);
  sl__thread_fail_after(0);
  int rc = sl_double_buffer(up, &o, &r);
  sl__thread_fail_after(-1);
  ASSERT_RC(rc, SL_ENOMEM);
  ASSERT_NULL(r);
  ASSERT_STREQ(sl_last_error(), "double_buffer: cannot start a worker "
                                "thread: Resource temporarily unavailable");
  gen_done(&g);
  /* At a reset: the reset's error; the reader can still be destroyed, or
   * reset again once threads start. */
  r = dbuf(gen_reader(&g, 5, -1), "cpu", 2);
  sl_sample *s = next_ok(r);
  ASSERT_EQ(first_i64(s), 0);
  sl_sample_release(s);
  sl__thread_fail_after(0);
  rc = sl_reader_reset(r);
  sl__thread_fail_after(-1);
  ASSERT_RC(rc, SL_ENOMEM);
  ASSERT_CONTAINS(sl_last_error(),
                  "double_buffer: cannot start a worker thread");
  ASSERT_OK(sl_reader_reset(r));
  s = next_ok(r);
  ASSERT_EQ(first_i64(s), 0);
  sl_sample_release(s);
  sl_reader_destroy(r);
  gen_done(&g);
  ASSERT_TRUE(!test_leaked());
}

/* --- CUDA on this machine, and "auto" ---------------------------------------
 */

TEST(cuda_without_a_usable_device_is_a_clear_error) {
  sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
  o.device = "cuda:0";
  sl_reader *r = (sl_reader *)1;
  int rc = sl_double_buffer(test_range_reader(3), &o, &r);
  if (rc == SL_OK) {
    /* A machine with a GPU: the batches are on it. */
    sl_sample *s = next_ok(r);
    int id = -1;
    ASSERT_EQ(sl_tensor_device(sl_sample_at_const(s, 0), &id), SL_DEVICE_CUDA);
    ASSERT_EQ(id, 0);
    sl_sample_release(s);
    sl_reader_destroy(r);
    fprintf(stderr, "note: a CUDA device is present; the no-driver path was "
                    "not exercised\n");
    return;
  }
  ASSERT_NULL(r);
  const char *msg = sl_last_error();
  if (!sl__cuda_engine_built()) {
    ASSERT_RC(rc, SL_EUNSUPPORTED);
    ASSERT_CONTAINS(msg, "double_buffer: cuda:0: this libsluice was built "
                         "without the CUDA engine");
    return;
  }
  ASSERT_RC(rc, SL_ECUDA);
  ASSERT_CONTAINS(msg, "double_buffer: cuda:0: ");
  /* Either the runtime loaded and a call failed (no driver, no device),
   * named with the CUDA error's name and description and the call site,
   * or the runtime itself could not be loaded. */
  bool absent = false;
  if (strstr(msg, "cannot load the CUDA runtime")) {
    ASSERT_CONTAINS(msg, "libcudart");
  } else if (strstr(msg, "cudaErrorInsufficientDriver") ||
             strstr(msg, "cudaErrorNoDevice")) {
    /* No driver (this project's build machine: a toolkit, no GPU) or no
     * device: said plainly first, the CUDA error and the call after it. */
    absent = true;
    ASSERT_CONTAINS(msg, "double_buffer: cuda:0: no CUDA device or driver "
                         "found (cudaGetDeviceCount(&n) failed: cudaError");
    ASSERT_CONTAINS(msg, "[engine_cuda.c:");
  } else {
    ASSERT_CONTAINS(msg, "cudaGetDeviceCount(&n) failed: cudaError");
    ASSERT_CONTAINS(msg, "[engine_cuda.c:");
  }
  /* The same for another device number, and "cuda". */
  o.device = "cuda";
  ASSERT_RC(sl_double_buffer(test_range_reader(3), &o, &r), SL_ECUDA);
  o.device = "cuda:7";
  ASSERT_RC(sl_double_buffer(test_range_reader(3), &o, &r), SL_ECUDA);
  ASSERT_CONTAINS(sl_last_error(), "cuda:7");
  if (absent)
    ASSERT_CONTAINS(sl_last_error(),
                    "cuda:7: no CUDA device or driver found (");
}

static void open_two_autos(void *arg) {
  int *devices = arg;
  for (int k = 0; k < 2; k++) {
    sl_reader *r = NULL;
    ASSERT_OK(sl_double_buffer(test_range_reader(2), NULL, &r)); /* "auto" */
    sl_sample *s = next_ok(r);
    devices[k] = sl_tensor_device(sl_sample_at_const(s, 0), NULL);
    ASSERT_EQ(first_i64(s), 0);
    sl_sample_release(s);
    sl_reader_destroy(r);
  }
}

TEST(auto_falls_back_to_host_and_says_so_once) {
  sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
  o.device = "cuda:0";
  sl_reader *probe = NULL;
  int cuda_ok = sl_double_buffer(test_range_reader(1), &o, &probe) == SL_OK;
  sl_reader_destroy(probe);
  /* Why "cuda:0" failed: no driver or device, no runtime, or another
   * reason (said in full). */
  char why[1024];
  snprintf(why, sizeof why, "%s", cuda_ok ? "" : sl_last_error());
  sl_clear_error();

  (void)sl__device_fallback_reset();
  int devices[2] = {0, 0};
  const char *err = capture_stderr(open_two_autos, devices);
  if (cuda_ok) {
    ASSERT_EQ(devices[0], SL_DEVICE_CUDA);
    ASSERT_EQ(count_of(err, "device \"auto\""), 0);
    return;
  }
  ASSERT_EQ(devices[0], SL_DEVICE_CPU);
  ASSERT_EQ(devices[1], SL_DEVICE_CPU);
  ASSERT_EQ(count_of(err, "device \"auto\""), 1);
  if (strstr(why, "cudaErrorInsufficientDriver") ||
      strstr(why, "cudaErrorNoDevice") ||
      strstr(why, "no CUDA device or driver found")) {
    /* This project's build machine (a toolkit, no driver): said plainly,
     * without the CUDA runtime's "driver version is insufficient". */
    ASSERT_STREQ(err, "sluice: double_buffer: device \"auto\": no CUDA "
                      "device or driver found; using the host engine\n");
  } else if (strstr(why, "cannot load the CUDA runtime")) {
    ASSERT_STREQ(err, "sluice: double_buffer: device \"auto\": no CUDA "
                      "runtime (libcudart) found; using the host engine\n");
  } else if (!sl__cuda_engine_built()) {
    ASSERT_STREQ(err, "sluice: double_buffer: device \"auto\": this "
                      "libsluice was built without CUDA; using the host "
                      "engine\n");
  } else {
    ASSERT_CONTAINS(err, "sluice: double_buffer: device \"auto\": CUDA is "
                         "not usable (cuda:0: ");
    ASSERT_CONTAINS(err, "); using the host engine\n");
  }
  ASSERT_EQ(sl__device_fallback_reset(), 2);
}

/* --- DLPack ------------------------------------------------------------------
 */

typedef struct dl_case {
  sl_dtype dt;
  uint8_t code, bits;
} dl_case;

TEST(dlpack_exports_every_dtype_on_the_cpu) {
  static const dl_case cases[] = {
      {SL_BOOL, 6, 8},        {SL_U8, kDLUInt, 8},      {SL_I8, kDLInt, 8},
      {SL_U16, kDLUInt, 16},  {SL_I16, kDLInt, 16},     {SL_U32, kDLUInt, 32},
      {SL_I32, kDLInt, 32},   {SL_U64, kDLUInt, 64},    {SL_I64, kDLInt, 64},
      {SL_F16, kDLFloat, 16}, {SL_BF16, kDLBfloat, 16}, {SL_F32, kDLFloat, 32},
      {SL_F64, kDLFloat, 64}, {SL_BYTES, kDLUInt, 8},
  };
  const int n = (int)(sizeof cases / sizeof cases[0]);
  ASSERT_EQ(n, SL_DTYPE_COUNT - 1); /* every sluice dtype maps */
  sl_schema *sc = sl_schema_new();
  ASSERT_NOT_NULL(sc);
  int64_t shape[3] = {2, 3, 4};
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "f%d", i);
    int rank = cases[i].dt == SL_BYTES ? 1 : 3;
    ASSERT_OK(sl_schema_add(sc, name, cases[i].dt, rank, shape));
  }
  ASSERT_OK(sl_schema_add(sc, "scalar", SL_F32, 0, NULL));
  sl_sample *s = sl_sample_new(sc);
  ASSERT_NOT_NULL(s);
  for (int i = 0; i <= n; i++) {
    void *d;
    int rank = i == n ? 0 : cases[i].dt == SL_BYTES ? 1 : 3;
    ASSERT_OK(sl_sample_alloc(s, i, rank, shape, &d));
    memset(d, 0, sl_sample_at(s, i)->nbytes);
  }
  ASSERT_EQ(sl_sample_refcount(s), 1);
  for (int i = 0; i < n; i++) {
    DLManagedTensor *m = NULL;
    ASSERT_OK(sl_sample_to_dlpack(s, i, &m));
    ASSERT_NOT_NULL(m);
    ASSERT_EQ(sl_sample_refcount(s), 2); /* the export holds the sample */
    ASSERT_EQ(sl__dlpack_live(), 1);
    const DLTensor *t = &m->dl_tensor;
    const sl_tensor *f = sl_sample_at_const(s, i);
    ASSERT_PTR_EQ(t->data, f->data);
    ASSERT_EQ(t->byte_offset, 0);
    ASSERT_EQ(t->device.device_type, kDLCPU);
    ASSERT_EQ(t->device.device_id, 0);
    ASSERT_EQ(t->ndim, f->rank);
    ASSERT_EQ(t->dtype.code, cases[i].code);
    ASSERT_EQ(t->dtype.bits, cases[i].bits);
    ASSERT_EQ(t->dtype.lanes, 1);
    for (int d = 0; d < t->ndim; d++)
      ASSERT_EQ(t->shape[d], f->shape[d]);
    /* Compact row-major strides, in elements. */
    if (t->ndim == 3) {
      ASSERT_NOT_NULL(t->strides);
      ASSERT_EQ(t->strides[0], 12);
      ASSERT_EQ(t->strides[1], 4);
      ASSERT_EQ(t->strides[2], 1);
    } else {
      ASSERT_EQ(t->strides[0], 1);
    }
    m->deleter(m);
    ASSERT_EQ(sl_sample_refcount(s), 1);
    ASSERT_EQ(sl__dlpack_live(), 0);
  }
  DLManagedTensor *m = NULL;
  ASSERT_OK(sl_sample_to_dlpack(s, n, &m)); /* rank 0 */
  ASSERT_EQ(m->dl_tensor.ndim, 0);
  ASSERT_EQ(m->dl_tensor.dtype.code, kDLFloat);
  m->deleter(m);
  sl_sample_release(s);
  sl_schema_release(sc);
}

TEST(dlpack_keeps_the_batch_alive_until_the_deleter) {
  gen g;
  sl_reader *r = dbuf(gen_reader(&g, 10, -1), "cpu", 2);
  sl_sample *b0 = next_ok(r);
  const void *p0 = data_of(b0, 0);
  DLManagedTensor *m = NULL;
  ASSERT_OK(sl_sample_to_dlpack(b0, 0, &m));
  ASSERT_EQ(m->dl_tensor.device.device_type, kDLCPU);
  ASSERT_EQ(m->dl_tensor.ndim, 0);
  ASSERT_EQ(m->dl_tensor.dtype.code, kDLInt);
  ASSERT_EQ((uintptr_t)m->dl_tensor.data % SL_SLOT_ALIGN, 0);
  sl_sample_release(b0); /* the export still holds batch 0 and its slot */
  sl_sample *b1 = next_ok(r);
  wait_produced(&g, 3); /* sample 2 waits for a slot */
  test_sleep_us(20000);
  ASSERT_EQ(atomic_load(&g.produced), 3);
  ASSERT_EQ(*(const int64_t *)m->dl_tensor.data, 0); /* still batch 0 */
  ASSERT_EQ(sl__dlpack_live(), 1);
  m->deleter(m); /* exactly once: the slot is free now */
  ASSERT_EQ(sl__dlpack_live(), 0);
  sl_sample *b2 = next_ok(r);
  ASSERT_EQ(first_i64(b2), 2);
  ASSERT_PTR_EQ(data_of(b2, 0), p0);
  sl_sample_release(b1);
  sl_sample_release(b2);
  /* An export may also outlive the reader. */
  sl_sample *b3 = next_ok(r);
  ASSERT_OK(sl_sample_to_dlpack(b3, 0, &m));
  sl_sample_release(b3);
  sl_reader_destroy(r);
  ASSERT_EQ(*(const int64_t *)m->dl_tensor.data, 3);
  m->deleter(m);
  gen_done(&g);
}

TEST(dlpack_bad_arguments) {
  DLManagedTensor *m = (DLManagedTensor *)1;
  ASSERT_RC(sl_sample_to_dlpack(NULL, 0, &m), SL_EINVAL);
  ASSERT_NULL(m);
  ASSERT_STREQ(sl_last_error(), "dlpack: NULL sample");
  sl_reader *up = test_range_reader(1);
  sl_sample *s = next_ok(up);
  ASSERT_RC(sl_sample_to_dlpack(s, 1, &m), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "dlpack: field 1 out of range (the sample "
                                "has 1)");
  ASSERT_RC(sl_sample_to_dlpack(s, -1, &m), SL_EINVAL);
  ASSERT_RC(sl_sample_to_dlpack(s, 0, NULL), SL_EINVAL);
  ASSERT_EQ(sl__dlpack_live(), 0);
  sl_sample_release(s);
  sl_reader_destroy(up);
}
