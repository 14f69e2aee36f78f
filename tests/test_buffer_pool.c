/* test_buffer_pool.c - src/core/buffer_pool.c: buffers that go back to a
 * pool when their last reference is released, and come out again for the
 * next allocation of about the same size (the image decoders' outputs). */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"

#include <pthread.h>

TEST(a_released_buffer_is_reused_for_the_next_allocation) {
  sl__buffer_pool *p = sl__buffer_pool_new(4, 1 << 20);
  ASSERT_NOT_NULL(p);
  sl_buffer *a = sl__buffer_pool_get(p, 1000);
  ASSERT_NOT_NULL(a);
  ASSERT_EQ(sl_buffer_size(a), 1000);
  ASSERT_EQ((uintptr_t)sl_buffer_data(a) % 64, 0);
  ASSERT_EQ(sl__buffer_refcount(a), 1);
  memset(sl_buffer_data(a), 7, 1000);
  void *bytes = sl_buffer_data(a);
  ASSERT_EQ(sl__buffer_pool_idle(p), 0);
  /* Only the last reference returns it. */
  sl_buffer_retain(a);
  sl_buffer_release(a);
  ASSERT_EQ(sl__buffer_pool_idle(p), 0);
  sl_buffer_release(a);
  ASSERT_EQ(sl__buffer_pool_idle(p), 1);
  /* The same bytes come back, with a fresh reference and the new size. */
  sl_buffer *b = sl__buffer_pool_get(p, 900);
  ASSERT_PTR_EQ(sl_buffer_data(b), bytes);
  ASSERT_EQ(sl_buffer_size(b), 900);
  ASSERT_EQ(sl__buffer_refcount(b), 1);
  ASSERT_EQ(sl__buffer_pool_idle(p), 0);
  sl_buffer_release(b);
  sl__buffer_pool_release(p);
}

TEST(sizes_match_within_a_quarter) {
  sl__buffer_pool *p = sl__buffer_pool_new(4, 1 << 20);
  ASSERT_NOT_NULL(p);
  sl_buffer *big = sl__buffer_pool_get(p, 4000);
  void *bytes = sl_buffer_data(big);
  sl_buffer_release(big);
  /* Too small for it (would waste more than a quarter), or too large. */
  sl_buffer *small = sl__buffer_pool_get(p, 2999);
  sl_buffer *large = sl__buffer_pool_get(p, 4001);
  ASSERT_TRUE(sl_buffer_data(small) != bytes);
  ASSERT_TRUE(sl_buffer_data(large) != bytes);
  ASSERT_EQ(sl__buffer_pool_idle(p), 1);
  sl_buffer *fit = sl__buffer_pool_get(p, 3000);
  ASSERT_PTR_EQ(sl_buffer_data(fit), bytes);
  ASSERT_EQ(sl_buffer_size(fit), 3000);
  sl_buffer_release(small);
  sl_buffer_release(large);
  sl_buffer_release(fit);
  ASSERT_EQ(sl__buffer_pool_idle(p), 3);
  sl__buffer_pool_release(p);
}

TEST(idle_buffers_are_bounded_by_count_and_bytes) {
  sl__buffer_pool *p = sl__buffer_pool_new(2, 1 << 20);
  ASSERT_NOT_NULL(p);
  sl_buffer *b[4];
  for (int i = 0; i < 4; i++)
    ASSERT_NOT_NULL(b[i] = sl__buffer_pool_get(p, 100));
  for (int i = 0; i < 4; i++)
    sl_buffer_release(b[i]); /* the last two are freed (ASan checks) */
  ASSERT_EQ(sl__buffer_pool_idle(p), 2);
  sl__buffer_pool_release(p);

  p = sl__buffer_pool_new(8, 10000); /* bytes: room for two of 4000 */
  ASSERT_NOT_NULL(p);
  for (int i = 0; i < 4; i++)
    ASSERT_NOT_NULL(b[i] = sl__buffer_pool_get(p, 4000));
  for (int i = 0; i < 4; i++)
    sl_buffer_release(b[i]);
  ASSERT_EQ(sl__buffer_pool_idle(p), 2);
  sl__buffer_pool_release(p);
}

/* The pool's owner may go first (a stage destroyed while the trainer holds
 * its batches): the buffers stay valid and are freed when released. */
TEST(buffers_outlive_their_pool) {
  sl__buffer_pool *p = sl__buffer_pool_new(4, 1 << 20);
  ASSERT_NOT_NULL(p);
  sl_buffer *a = sl__buffer_pool_get(p, 64);
  sl_buffer *b = sl__buffer_pool_get(p, 64);
  sl_buffer_release(b); /* idle: freed with the pool's release */
  sl__buffer_pool_release(p);
  memset(sl_buffer_data(a), 1, 64); /* still ours */
  sl_buffer_release(a);             /* frees it and the pool */
}

/* NULL pool: plain sl_buffer_new. */
TEST(no_pool_means_plain_buffers) {
  sl_buffer *a = sl__buffer_pool_get(NULL, 10);
  ASSERT_NOT_NULL(a);
  ASSERT_EQ(sl_buffer_size(a), 10);
  sl_buffer_release(a);
  ASSERT_EQ(sl__buffer_pool_idle(NULL), 0);
  sl__buffer_pool_release(NULL);
  sl_tensor t;
  ASSERT_OK(sl__tensor_alloc_pooled(NULL, &t, SL_U8, 1, (int64_t[]){5}));
  ASSERT_EQ(t.nbytes, 5);
  sl_tensor_clear(&t);
}

TEST(pooled_tensors_reuse_bytes) {
  sl__buffer_pool *p = sl__buffer_pool_new(4, 1 << 20);
  ASSERT_NOT_NULL(p);
  sl_tensor t;
  ASSERT_OK(sl__tensor_alloc_pooled(p, &t, SL_U8, 3, (int64_t[]){10, 10, 3}));
  ASSERT_EQ(t.nbytes, 300);
  void *bytes = t.data;
  sl_tensor_clear(&t);
  ASSERT_OK(sl__tensor_alloc_pooled(p, &t, SL_U8, 3, (int64_t[]){10, 9, 3}));
  ASSERT_PTR_EQ(t.data, bytes);
  ASSERT_EQ(t.nbytes, 270);
  ASSERT_EQ(sl_buffer_size(t.buf), 270);
  sl_tensor_clear(&t);
  /* A bad layout fails as sl_tensor_alloc does. */
  ASSERT_RC(sl__tensor_alloc_pooled(p, &t, SL_U8, 1, (int64_t[]){-1}),
            SL_EINVAL);
  ASSERT_NULL(t.buf);
  sl__buffer_pool_release(p);
}

TEST(allocation_failures_are_enomem_and_leak_nothing) {
  for (long n = 0; n < 4; n++) {
    sl__alloc_fail_after(n);
    sl__buffer_pool *p = sl__buffer_pool_new(4, 1 << 20);
    sl_buffer *a = p ? sl__buffer_pool_get(p, 100) : NULL;
    sl__alloc_fail_after(-1);
    if (!p || !a) ASSERT_EQ(sl_last_error_code(), SL_ENOMEM);
    sl_buffer_release(a);
    sl__buffer_pool_release(p);
  }
  ASSERT_NULL(sl__buffer_pool_get(NULL, SIZE_MAX - 8));
  ASSERT_EQ(sl_last_error_code(), SL_ENOMEM);
}

/* Threads take buffers from one pool, fill them and pass them on: thread
 * i puts its buffers in slot i + 1 and takes (and releases) those thread
 * i - 1 put in slot i, so buffers are released on other threads than the
 * one that took them.  Every buffer keeps its contents while held (TSan
 * checks the hand-overs). */
#define HANDS 4
#define ROUNDS 20000

static sl__buffer_pool *g_pool;
static pthread_mutex_t g_hand_mu = PTHREAD_MUTEX_INITIALIZER;
static sl_buffer *g_slot[HANDS];

static void check_filled(sl_buffer *b, unsigned char v) {
  const unsigned char *d = sl_buffer_data(b);
  for (size_t k = 0; k < sl_buffer_size(b); k++)
    if (d[k] != v) abort(); /* someone wrote into a held buffer */
}

static void *passer(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  for (int i = 0; i < ROUNDS; i++) {
    size_t size = 200 + (size_t)(i % 50);
    sl_buffer *b = sl__buffer_pool_get(g_pool, size);
    if (!b) abort();
    memset(sl_buffer_data(b), (int)(id + 1), size);
    pthread_mutex_lock(&g_hand_mu);
    sl_buffer *unclaimed = g_slot[(id + 1) % HANDS];
    g_slot[(id + 1) % HANDS] = b;
    sl_buffer *in = g_slot[id];
    g_slot[id] = NULL;
    pthread_mutex_unlock(&g_hand_mu);
    if (unclaimed) {
      check_filled(unclaimed, (unsigned char)(id + 1));
      sl_buffer_release(unclaimed);
    }
    if (in) {
      check_filled(in, (unsigned char)((id + HANDS - 1) % HANDS + 1));
      sl_buffer_release(in);
    }
  }
  return NULL;
}

TEST(threads_share_a_pool) {
  g_pool = sl__buffer_pool_new(8, 1 << 20);
  ASSERT_NOT_NULL(g_pool);
  pthread_t th[HANDS];
  for (uintptr_t i = 0; i < HANDS; i++)
    ASSERT_EQ(pthread_create(&th[i], NULL, passer, (void *)i), 0);
  for (int i = 0; i < HANDS; i++)
    pthread_join(th[i], NULL);
  ASSERT_TRUE(sl__buffer_pool_idle(g_pool) <= 8);
  sl__buffer_pool_release(g_pool);
  for (int i = 0; i < HANDS; i++)
    sl_buffer_release(g_slot[i]);
}
