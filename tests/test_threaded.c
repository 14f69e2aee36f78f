/* test_threaded.c - sl_threaded: several consumer threads pulling one reader
 * each get distinct samples and together all of them exactly once; EOF and
 * sticky errors reach every thread; reset between passes.  Run under TSan:
 * concurrent sl_reader_next on one reader must be free of data races,
 * including the reader base's own EOF latch, sticky error and peek state. */
#include "test.h"

#include "core/internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

enum { NTHREADS = 4 };

static int64_t value(sl_sample *s) {
  return *(int64_t *)sl_sample_at(s, 0)->data;
}

static sl_reader *threaded_range(int64_t n) {
  sl_reader *up, *r;
  ASSERT_OK(sl_reader_range(n, &up));
  ASSERT_OK(sl_threaded(up, &r));
  return r;
}

typedef struct drain {
  sl_reader *r;
  atomic_int *seen; /* per value: how many times it was received */
  int64_t n;        /* values are 0..n-1 */
  int use_has_next; /* call has_next before next */
  atomic_int *go;   /* start line, so that threads overlap */
  /* results */
  long count;
  int end_rc;       /* what ended the loop: SL_EOF or an error */
  int end_again_rc; /* the next call after the end */
  char end_msg[256];
  int in_order; /* this thread's values were increasing */
  int bad;      /* a value out of range */
} drain;

static void *drain_main(void *arg) {
  drain *d = arg;
  int64_t last = -1;
  d->in_order = 1;
  while (!atomic_load(d->go))
    sched_yield();
  for (;;) {
    sl_sample *s = NULL;
    if (d->use_has_next) {
      int h = sl_reader_has_next(d->r);
      if (h < 0) {
        d->end_rc = h;
        break;
      }
      /* 1 or 0: next decides (another thread may take the peeked sample). */
    }
    int rc = sl_reader_next(d->r, &s);
    if (rc != SL_OK) {
      d->end_rc = rc;
      break;
    }
    int64_t v = value(s);
    sl_sample_release(s);
    if (v < 0 || v >= d->n) {
      d->bad = 1;
      continue;
    }
    if (v <= last) d->in_order = 0;
    last = v;
    atomic_fetch_add(&d->seen[v], 1);
    d->count++;
  }
  snprintf(d->end_msg, sizeof d->end_msg, "%s", sl_last_error());
  sl_sample *s = NULL;
  d->end_again_rc = sl_reader_next(d->r, &s);
  sl_sample_release(s);
  return NULL;
}

/* Drains `r` (values 0..n-1) with NTHREADS threads; checks every value was
 * received exactly once and every thread saw `want_end`. */
static void drain_all(sl_reader *r, int64_t n, int use_has_next, int want_end,
                      drain *out) {
  atomic_int *seen = calloc((size_t)n + 1, sizeof *seen);
  atomic_int go;
  atomic_init(&go, 0);
  ASSERT_NOT_NULL(seen);
  pthread_t th[NTHREADS];
  drain d[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    d[i] = (drain){
        .r = r, .seen = seen, .n = n, .use_has_next = use_has_next, .go = &go};
    ASSERT_EQ(pthread_create(&th[i], NULL, drain_main, &d[i]), 0);
  }
  atomic_store(&go, 1);
  long total = 0;
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(th[i], NULL);
    total += d[i].count;
    ASSERT_EQ(d[i].bad, 0);
    ASSERT_TRUE(d[i].in_order); /* calls are serialised: no reordering */
    ASSERT_RC(d[i].end_rc, want_end);
    ASSERT_RC(d[i].end_again_rc, want_end);
  }
  ASSERT_EQ(total, n);
  for (int64_t v = 0; v < n; v++)
    if (atomic_load(&seen[v]) != 1)
      test_fail(__FILE__, __LINE__, "value %lld received %d times",
                (long long)v, atomic_load(&seen[v]));
  if (out) memcpy(out, d, sizeof d);
  free(seen);
}

TEST(bad_arguments) {
  sl_reader *up, *r = (sl_reader *)1;
  ASSERT_RC(sl_threaded(NULL, &r), SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_OK(sl_reader_range(3, &up));
  ASSERT_RC(sl_threaded(up, NULL), SL_EINVAL); /* up destroyed */
}

TEST(single_thread_behaves_like_upstream) {
  sl_reader *r = threaded_range(5);
  ASSERT_STREQ(sl_reader_name(r), "threaded");
  char d[64];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(r), d, sizeof d),
               "{i: i64[]}");
  for (int pass = 0; pass < 2; pass++) {
    sl_sample *s;
    ASSERT_EQ(sl_reader_has_next(r), 1);
    for (int64_t i = 0; i < 5; i++) {
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_EQ(value(s), i);
      sl_sample_release(s);
    }
    ASSERT_EQ(sl_reader_has_next(r), 0);
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

TEST(four_threads_drain_every_value_once) {
  sl_reader *r = threaded_range(100000);
  drain_all(r, 100000, 0, SL_EOF, NULL);
  sl_reader_destroy(r);
}

TEST(reset_between_passes) {
  sl_reader *r = threaded_range(20000);
  for (int pass = 0; pass < 3; pass++) {
    drain_all(r, 20000, 0, SL_EOF, NULL);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

TEST(concurrent_has_next_and_next) {
  sl_reader *r = threaded_range(20000);
  drain_all(r, 20000, 1, SL_EOF, NULL);
  sl_reader_destroy(r);
}

typedef struct fail_gen {
  sl_schema *schema;
  int64_t i, fail_at;
} fail_gen;

static int fail_gen_next(void *ud, sl_sample **out) {
  fail_gen *g = ud;
  if (g->i == g->fail_at)
    return sl_set_error(SL_ECORRUPT, "fail_gen: bad record %lld",
                        (long long)g->i);
  sl_sample *s = sl_sample_new(g->schema);
  void *data;
  if (!s) return SL_ENOMEM;
  if (sl_sample_alloc(s, 0, 0, NULL, &data) < 0) {
    sl_sample_release(s);
    return SL_ENOMEM;
  }
  *(int64_t *)data = g->i++;
  *out = s;
  return SL_OK;
}

static int fail_gen_reset(void *ud) {
  ((fail_gen *)ud)->i = 0;
  return SL_OK;
}

TEST(sticky_error_reaches_every_thread_with_message) {
  fail_gen g = {sl_schema_new(), 0, 5000};
  ASSERT_OK(sl_schema_add(g.schema, "i", SL_I64, 0, NULL));
  sl_reader *up, *r;
  ASSERT_OK(sl_reader_from_generator(g.schema, fail_gen_next, fail_gen_reset,
                                     NULL, &g, &up));
  ASSERT_OK(sl_threaded(up, &r));
  for (int pass = 0; pass < 2; pass++) {
    drain d[NTHREADS];
    drain_all(r, 5000, pass, SL_ECORRUPT, d);
    for (int i = 0; i < NTHREADS; i++) /* on each thread's own slot */
      ASSERT_STREQ(d[i].end_msg, "fail_gen: bad record 5000");
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  sl_schema_release(g.schema);
}

TEST(threaded_over_prefetch) {
  sl_reader *up, *pf, *r;
  ASSERT_OK(sl_reader_range(30000, &up));
  ASSERT_OK(sl_prefetch(up, 16, &pf));
  ASSERT_OK(sl_threaded(pf, &r));
  drain_all(r, 30000, 0, SL_EOF, NULL);
  ASSERT_OK(sl_reader_reset(r));
  drain_all(r, 30000, 0, SL_EOF, NULL);
  sl_reader_destroy(r);
}

TEST(allocation_failures_leak_nothing) {
  for (long k = 0;; k++) {
    sl_reader *up, *r = (sl_reader *)1;
    ASSERT_OK(sl_reader_range(3, &up));
    sl__alloc_fail_after(k);
    int rc = sl_threaded(up, &r);
    sl__alloc_fail_after(-1);
    if (rc == SL_OK) {
      ASSERT_TRUE(k > 0);
      sl_reader_destroy(r);
      break;
    }
    ASSERT_RC(rc, SL_ENOMEM);
    ASSERT_NULL(r);
    ASSERT_TRUE(k < 100);
  }
}
