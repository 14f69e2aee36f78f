/* test_channel.c - the bounded MPMC channel: try/blocking send and receive,
 * close/kill/abort semantics, reopen, byte accounting, recv_many, wake-ups of
 * blocked threads, and a multi-producer multi-consumer stress run. */
#include "test.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

/* --- helpers -------------------------------------------------------------- */

static sl_schema *i64_schema(void) {
  sl_schema *s = sl_schema_new();
  ASSERT_NOT_NULL(s);
  ASSERT_OK(sl_schema_add(s, "v", SL_I64, 0, NULL));
  return s;
}

static sl_schema *bytes_schema(void) {
  sl_schema *s = sl_schema_new();
  const int64_t var = SL_DIM_VAR;
  ASSERT_NOT_NULL(s);
  ASSERT_OK(sl_schema_add(s, "b", SL_U8, 1, &var));
  return s;
}

static sl_sample *make_i64(sl_schema *schema, int64_t v) {
  sl_sample *s = sl_sample_new(schema);
  void *data;
  ASSERT_NOT_NULL(s);
  ASSERT_OK(sl_sample_alloc(s, 0, 0, NULL, &data));
  *(int64_t *)data = v;
  return s;
}

static int64_t value_of(const sl_sample *s) {
  return *(const int64_t *)sl_sample_at_const(s, 0)->data;
}

static sl_sample *make_bytes(sl_schema *schema, int64_t n) {
  sl_sample *s = sl_sample_new(schema);
  void *data;
  ASSERT_NOT_NULL(s);
  ASSERT_OK(sl_sample_alloc(s, 0, 1, &n, &data));
  if (n) memset(data, 0xab, (size_t)n);
  return s;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Receives one sample and checks its value. */
static void expect_value(sl_channel *ch, int64_t v) {
  sl_sample *s = NULL;
  ASSERT_RC(sl_channel_recv(ch, &s), SL_OK);
  ASSERT_EQ(value_of(s), v);
  sl_sample_release(s);
}

/* --- construction --------------------------------------------------------- */

TEST(capacity_zero_is_einval) {
  sl_clear_error();
  ASSERT_NULL(sl_channel_new(0, 0));
  ASSERT_EQ(sl_last_error_code(), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "capacity");
  sl_channel *ch = sl_channel_new(3, 0);
  ASSERT_NOT_NULL(ch);
  ASSERT_EQ(sl_channel_capacity(ch), 3);
  ASSERT_EQ(sl_channel_len(ch), 0);
  ASSERT_EQ(sl_channel_bytes(ch), 0);
  sl_channel_destroy(ch);
  sl_channel_destroy(NULL);
}

TEST(null_arguments) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(2, 0);
  sl_sample *s = make_i64(sc, 1), *got = NULL;
  ASSERT_RC(sl_channel_send(NULL, s), SL_EINVAL);
  ASSERT_RC(sl_channel_send(ch, NULL), SL_EINVAL);
  ASSERT_RC(sl_channel_try_send(ch, NULL), SL_EINVAL);
  ASSERT_RC(sl_channel_recv(NULL, &got), SL_EINVAL);
  ASSERT_RC(sl_channel_recv(ch, NULL), SL_EINVAL);
  ASSERT_RC(sl_channel_recv_many(ch, &got, 0), SL_EINVAL);
  sl_channel_close(NULL);
  sl_channel_kill(NULL, SL_EIO, "x");
  sl_channel_reopen(NULL);
  ASSERT_EQ(sl_channel_len(NULL), 0);
  sl_sample_release(s);
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

/* --- send / receive ------------------------------------------------------- */

TEST(try_send_recv_fifo_and_eagain) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(4, 0);
  sl_sample *got = NULL;
  ASSERT_RC(sl_channel_try_recv(ch, &got), SL_EAGAIN);
  ASSERT_NULL(got);
  for (int i = 0; i < 4; i++)
    ASSERT_RC(sl_channel_try_send(ch, make_i64(sc, i)), SL_OK);
  ASSERT_EQ(sl_channel_len(ch), 4);
  sl_sample *extra = make_i64(sc, 99);
  ASSERT_RC(sl_channel_try_send(ch, extra), SL_EAGAIN);
  ASSERT_EQ(sl_sample_refcount(extra), 1); /* still ours */
  expect_value(ch, 0);
  ASSERT_RC(sl_channel_try_send(ch, extra), SL_OK); /* room again */
  for (int i = 1; i < 4; i++) {
    ASSERT_RC(sl_channel_try_recv(ch, &got), SL_OK);
    ASSERT_EQ(value_of(got), i);
    sl_sample_release(got);
  }
  expect_value(ch, 99);
  ASSERT_RC(sl_channel_try_recv(ch, &got), SL_EAGAIN);
  ASSERT_EQ(sl_channel_len(ch), 0);
  /* The ring wraps around many times. */
  for (int i = 0; i < 1000; i++) {
    ASSERT_RC(sl_channel_send(ch, make_i64(sc, i)), SL_OK);
    if (i % 3 == 2)
      for (int k = i - 2; k <= i; k++)
        expect_value(ch, k);
  }
  expect_value(ch, 999);
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

TEST(destroy_releases_queued_samples) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(4, 0);
  sl_sample *s = make_i64(sc, 7);
  sl_sample_retain(s);
  ASSERT_RC(sl_channel_send(ch, s), SL_OK);
  ASSERT_EQ(sl_sample_refcount(s), 2);
  sl_channel_destroy(ch);
  ASSERT_EQ(sl_sample_refcount(s), 1);
  sl_sample_release(s);
  sl_schema_release(sc);
}

/* --- close / kill / abort ------------------------------------------------- */

TEST(close_drains_then_eof) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(4, 0);
  sl_sample *got = NULL;
  ASSERT_RC(sl_channel_send(ch, make_i64(sc, 1)), SL_OK);
  ASSERT_RC(sl_channel_send(ch, make_i64(sc, 2)), SL_OK);
  sl_channel_close(ch);
  sl_channel_close(ch); /* idempotent */
  sl_sample *late = make_i64(sc, 3);
  ASSERT_RC(sl_channel_send(ch, late), SL_ECLOSED);
  ASSERT_RC(sl_channel_try_send(ch, late), SL_ECLOSED);
  ASSERT_EQ(sl_sample_refcount(late), 1); /* the caller still owns it */
  sl_sample_release(late);
  expect_value(ch, 1);
  expect_value(ch, 2);
  for (int i = 0; i < 3; i++) {
    ASSERT_RC(sl_channel_recv(ch, &got), SL_EOF);
    ASSERT_RC(sl_channel_try_recv(ch, &got), SL_EOF);
    ASSERT_RC(sl_channel_recv_many(ch, &got, 4), SL_EOF);
  }
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

TEST(kill_delivers_samples_then_code_and_message) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(4, 0);
  sl_sample *got = NULL;
  ASSERT_RC(sl_channel_send(ch, make_i64(sc, 1)), SL_OK);
  ASSERT_RC(sl_channel_send(ch, make_i64(sc, 2)), SL_OK);
  sl_channel_kill(ch, SL_EIO, "disk: bad sector 7");
  sl_sample *late = make_i64(sc, 3);
  sl_clear_error();
  ASSERT_RC(sl_channel_send(ch, late), SL_EIO); /* at once, not after drain */
  ASSERT_STREQ(sl_last_error(), "disk: bad sector 7");
  ASSERT_RC(sl_channel_try_send(ch, late), SL_EIO);
  ASSERT_EQ(sl_sample_refcount(late), 1);
  sl_sample_release(late);
  expect_value(ch, 1);
  expect_value(ch, 2);
  for (int i = 0; i < 3; i++) {
    sl_clear_error();
    ASSERT_RC(sl_channel_recv(ch, &got), SL_EIO);
    ASSERT_STREQ(sl_last_error(), "disk: bad sector 7");
    ASSERT_EQ(sl_last_error_code(), SL_EIO);
    sl_clear_error();
    ASSERT_RC(sl_channel_try_recv(ch, &got), SL_EIO);
    ASSERT_STREQ(sl_last_error(), "disk: bad sector 7");
  }
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

TEST(kill_without_message_uses_description) {
  sl_channel *ch = sl_channel_new(1, 0);
  sl_sample *got = NULL;
  sl_channel_kill(ch, SL_ECORRUPT, NULL);
  ASSERT_RC(sl_channel_recv(ch, &got), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), sl_strerror(SL_ECORRUPT));
  sl_channel_destroy(ch);
}

TEST(abort_drops_queued_samples) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(4, 0);
  sl_sample *kept[3], *got = NULL;
  for (int i = 0; i < 3; i++) {
    kept[i] = make_i64(sc, i);
    ASSERT_RC(sl_channel_send(ch, sl_sample_retain(kept[i])), SL_OK);
    ASSERT_EQ(sl_sample_refcount(kept[i]), 2);
  }
  sl_channel_abort(ch, SL_EKILLED, "consumer gone");
  ASSERT_EQ(sl_channel_len(ch), 0);
  ASSERT_EQ(sl_channel_bytes(ch), 0);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(sl_sample_refcount(kept[i]), 1); /* released by the abort */
    sl_sample_release(kept[i]);
  }
  ASSERT_RC(sl_channel_recv(ch, &got), SL_EKILLED);
  ASSERT_STREQ(sl_last_error(), "consumer gone");
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

TEST(first_end_wins) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(2, 0);
  sl_sample *got = NULL;
  /* close, then kill: the stream already ended cleanly. */
  sl_channel_close(ch);
  sl_channel_kill(ch, SL_EIO, "too late");
  ASSERT_RC(sl_channel_recv(ch, &got), SL_EOF);
  /* kill, then close: still the error. */
  sl_channel_reopen(ch);
  sl_channel_kill(ch, SL_EIO, "first");
  sl_channel_close(ch);
  ASSERT_RC(sl_channel_recv(ch, &got), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "first");
  /* kill, then another kill: the first code and message. */
  sl_channel_reopen(ch);
  sl_channel_kill(ch, SL_ECORRUPT, "first kill");
  sl_channel_kill(ch, SL_EIO, "second kill");
  sl_channel_abort(ch, SL_EKILLED, "abort");
  ASSERT_RC(sl_channel_recv(ch, &got), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), "first kill");
  /* A later abort on a closed channel still drops the queue, keeps EOF. */
  sl_channel_reopen(ch);
  ASSERT_RC(sl_channel_send(ch, make_i64(sc, 1)), SL_OK);
  sl_channel_close(ch);
  sl_channel_abort(ch, SL_EKILLED, NULL);
  ASSERT_EQ(sl_channel_len(ch), 0);
  ASSERT_RC(sl_channel_recv(ch, &got), SL_EOF);
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

TEST(reopen_for_next_pass) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(3, 0);
  sl_sample *got = NULL;
  sl_sample *left = make_i64(sc, 5);
  ASSERT_RC(sl_channel_send(ch, sl_sample_retain(left)), SL_OK);
  sl_channel_kill(ch, SL_EIO, "pass 1 failed");
  sl_channel_reopen(ch); /* releases what it still held */
  ASSERT_EQ(sl_sample_refcount(left), 1);
  sl_sample_release(left);
  ASSERT_EQ(sl_channel_len(ch), 0);
  ASSERT_RC(sl_channel_try_recv(ch, &got), SL_EAGAIN); /* open and empty */
  for (int pass = 0; pass < 3; pass++) {
    for (int i = 0; i < 3; i++)
      ASSERT_RC(sl_channel_send(ch, make_i64(sc, pass * 10 + i)), SL_OK);
    sl_channel_close(ch);
    for (int i = 0; i < 3; i++)
      expect_value(ch, pass * 10 + i);
    ASSERT_RC(sl_channel_recv(ch, &got), SL_EOF);
    sl_channel_reopen(ch);
  }
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

/* --- bytes ---------------------------------------------------------------- */

TEST(byte_count_matches_sample_nbytes) {
  sl_schema *sc = bytes_schema();
  sl_channel *ch = sl_channel_new(8, 0);
  const int64_t sizes[] = {0, 1, 17, 4096, 3, 100};
  size_t total = 0;
  for (int i = 0; i < 6; i++) {
    sl_sample *s = make_bytes(sc, sizes[i]);
    ASSERT_EQ(sl_sample_nbytes(s), sizes[i]);
    total += sl_sample_nbytes(s);
    ASSERT_RC(sl_channel_send(ch, s), SL_OK);
    ASSERT_EQ(sl_channel_bytes(ch), total);
  }
  for (int i = 0; i < 6; i++) {
    sl_sample *got = NULL;
    ASSERT_RC(sl_channel_recv(ch, &got), SL_OK);
    ASSERT_EQ(sl_sample_nbytes(got), sizes[i]);
    total -= sl_sample_nbytes(got);
    ASSERT_EQ(sl_channel_bytes(ch), total);
    sl_sample_release(got);
  }
  ASSERT_EQ(sl_channel_bytes(ch), 0);
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

TEST(max_bytes_bound_respected) {
  sl_schema *sc = bytes_schema();
  sl_channel *ch = sl_channel_new(10, 100);
  sl_sample *got = NULL;
  ASSERT_RC(sl_channel_try_send(ch, make_bytes(sc, 60)), SL_OK);
  sl_sample *s41 = make_bytes(sc, 41);
  ASSERT_RC(sl_channel_try_send(ch, s41), SL_EAGAIN);            /* 101 > 100 */
  ASSERT_RC(sl_channel_try_send(ch, make_bytes(sc, 40)), SL_OK); /* == 100 */
  ASSERT_EQ(sl_channel_bytes(ch), 100);
  ASSERT_RC(sl_channel_try_send(ch, make_bytes(sc, 0)), SL_OK); /* 0 fits */
  ASSERT_RC(sl_channel_try_send(ch, s41), SL_EAGAIN);
  ASSERT_RC(sl_channel_recv(ch, &got), SL_OK); /* frees 60 */
  sl_sample_release(got);
  ASSERT_RC(sl_channel_try_send(ch, s41), SL_OK);
  ASSERT_EQ(sl_channel_bytes(ch), 81);
  for (int i = 0; i < 3; i++) {
    ASSERT_RC(sl_channel_recv(ch, &got), SL_OK);
    sl_sample_release(got);
  }
  ASSERT_EQ(sl_channel_bytes(ch), 0);
  /* An empty channel admits one oversized sample, and only one. */
  ASSERT_RC(sl_channel_try_send(ch, make_bytes(sc, 500)), SL_OK);
  ASSERT_EQ(sl_channel_bytes(ch), 500);
  sl_sample *small = make_bytes(sc, 1);
  ASSERT_RC(sl_channel_try_send(ch, small), SL_EAGAIN);
  ASSERT_RC(sl_channel_recv(ch, &got), SL_OK);
  ASSERT_EQ(sl_sample_nbytes(got), 500);
  sl_sample_release(got);
  ASSERT_RC(sl_channel_try_send(ch, small), SL_OK);
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

typedef struct big_sender {
  sl_channel *ch;
  sl_sample *s;
  int rc;
} big_sender;

static void *send_one(void *arg) {
  big_sender *b = arg;
  b->rc = sl_channel_send(b->ch, b->s);
  return NULL;
}

TEST(byte_bound_blocks_sender_until_room) {
  sl_schema *sc = bytes_schema();
  sl_channel *ch = sl_channel_new(10, 100);
  sl_sample *got = NULL;
  ASSERT_RC(sl_channel_send(ch, make_bytes(sc, 80)), SL_OK);
  big_sender b = {ch, make_bytes(sc, 50), 1};
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, send_one, &b), 0);
  sleep_ms(20);
  ASSERT_EQ(sl_channel_len(ch), 1); /* the sender waits for bytes */
  ASSERT_RC(sl_channel_recv(ch, &got), SL_OK);
  ASSERT_EQ(sl_sample_nbytes(got), 80);
  sl_sample_release(got);
  ASSERT_RC(sl_channel_recv(ch, &got), SL_OK); /* then the oversized one */
  ASSERT_EQ(sl_sample_nbytes(got), 50);
  sl_sample_release(got);
  pthread_join(th, NULL);
  ASSERT_RC(b.rc, SL_OK);
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

/* --- recv_many ------------------------------------------------------------ */

TEST(recv_many) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(8, 0);
  sl_sample *got[8];
  for (int i = 0; i < 5; i++)
    ASSERT_RC(sl_channel_send(ch, make_i64(sc, i)), SL_OK);
  ASSERT_EQ(sl_channel_recv_many(ch, got, 3), 3);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(value_of(got[i]), i);
    sl_sample_release(got[i]);
  }
  ASSERT_EQ(sl_channel_recv_many(ch, got, 8), 2); /* what is there, no wait */
  ASSERT_EQ(value_of(got[0]), 3);
  ASSERT_EQ(value_of(got[1]), 4);
  sl_sample_release(got[0]);
  sl_sample_release(got[1]);
  /* Samples before a kill, then the kill code. */
  ASSERT_RC(sl_channel_send(ch, make_i64(sc, 5)), SL_OK);
  sl_channel_kill(ch, SL_ECORRUPT, "bad record 6");
  ASSERT_EQ(sl_channel_recv_many(ch, got, 8), 1);
  ASSERT_EQ(value_of(got[0]), 5);
  sl_sample_release(got[0]);
  ASSERT_RC(sl_channel_recv_many(ch, got, 8), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), "bad record 6");
  /* Close: the rest, then EOF. */
  sl_channel_reopen(ch);
  ASSERT_RC(sl_channel_send(ch, make_i64(sc, 6)), SL_OK);
  sl_channel_close(ch);
  ASSERT_EQ(sl_channel_recv_many(ch, got, 8), 1);
  sl_sample_release(got[0]);
  ASSERT_RC(sl_channel_recv_many(ch, got, 8), SL_EOF);
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

/* --- blocked threads woken ------------------------------------------------ */

typedef struct blocked {
  sl_channel *ch;
  sl_sample *s; /* to send; NULL: receive */
  atomic_int started;
  int rc;
  char msg[128];
} blocked;

static void *blocked_main(void *arg) {
  blocked *b = arg;
  atomic_store(&b->started, 1);
  if (b->s) {
    b->rc = sl_channel_send(b->ch, b->s);
  } else {
    sl_sample *got = NULL;
    b->rc = sl_channel_recv(b->ch, &got);
    sl_sample_release(got);
  }
  snprintf(b->msg, sizeof b->msg, "%s", sl_last_error());
  return NULL;
}

static void start_blocked(pthread_t *th, blocked *b) {
  ASSERT_EQ(pthread_create(th, NULL, blocked_main, b), 0);
  while (!atomic_load(&b->started))
    sleep_ms(1);
  sleep_ms(20); /* long enough to be waiting in the channel */
}

TEST(receiver_blocked_on_empty_woken_by_close) {
  sl_channel *ch = sl_channel_new(2, 0);
  blocked b = {.ch = ch, .rc = 1};
  pthread_t th;
  start_blocked(&th, &b);
  sl_channel_close(ch);
  pthread_join(th, NULL);
  ASSERT_RC(b.rc, SL_EOF);
  sl_channel_destroy(ch);
}

TEST(receiver_blocked_on_empty_woken_by_kill) {
  sl_channel *ch = sl_channel_new(2, 0);
  blocked b = {.ch = ch, .rc = 1};
  pthread_t th;
  start_blocked(&th, &b);
  sl_channel_kill(ch, SL_EIO, "reader thread: disk gone");
  pthread_join(th, NULL);
  ASSERT_RC(b.rc, SL_EIO);
  ASSERT_STREQ(b.msg, "reader thread: disk gone"); /* on the receiver's slot */
  sl_channel_destroy(ch);
}

TEST(sender_blocked_on_full_woken_by_kill) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(1, 0);
  ASSERT_RC(sl_channel_send(ch, make_i64(sc, 0)), SL_OK);
  sl_sample *s = make_i64(sc, 1);
  blocked b = {.ch = ch, .s = s, .rc = 1};
  pthread_t th;
  start_blocked(&th, &b);
  ASSERT_EQ(sl_channel_len(ch), 1);
  sl_channel_kill(ch, SL_ECORRUPT, "consumer: stop");
  pthread_join(th, NULL);
  ASSERT_RC(b.rc, SL_ECORRUPT);
  ASSERT_STREQ(b.msg, "consumer: stop");
  ASSERT_EQ(sl_sample_refcount(s), 1); /* the sender still owns it */
  sl_sample_release(s);
  expect_value(ch, 0); /* kill keeps what was queued before it */
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

TEST(sender_blocked_on_full_woken_by_abort_and_close) {
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(1, 0);
  for (int round = 0; round < 2; round++) {
    ASSERT_RC(sl_channel_send(ch, make_i64(sc, 0)), SL_OK);
    sl_sample *s = make_i64(sc, 1);
    blocked b = {.ch = ch, .s = s, .rc = 1};
    pthread_t th;
    start_blocked(&th, &b);
    if (round == 0)
      sl_channel_abort(ch, SL_EKILLED, NULL);
    else
      sl_channel_close(ch);
    pthread_join(th, NULL);
    ASSERT_RC(b.rc, round == 0 ? SL_EKILLED : SL_ECLOSED);
    ASSERT_EQ(sl_channel_len(ch), round == 0 ? 0 : 1);
    sl_sample_release(s);
    sl_channel_reopen(ch);
  }
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

typedef struct ordered_rx {
  sl_channel *ch;
  int64_t count;
  int in_order;
} ordered_rx;

static void *ordered_rx_main(void *arg) {
  ordered_rx *o = arg;
  sl_sample *got = NULL;
  o->in_order = 1;
  while (sl_channel_recv(o->ch, &got) == SL_OK) {
    if (value_of(got) != o->count) o->in_order = 0;
    o->count++;
    sl_sample_release(got);
  }
  return NULL;
}

TEST(blocking_send_recv_across_threads) {
  /* One producer, one consumer, capacity 1: most hand-offs block. */
  sl_schema *sc = i64_schema();
  sl_channel *ch = sl_channel_new(1, 0);
  ordered_rx o = {ch, 0, 0};
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, ordered_rx_main, &o), 0);
  for (int i = 0; i < 5000; i++)
    ASSERT_RC(sl_channel_send(ch, make_i64(sc, i)), SL_OK);
  sl_channel_close(ch);
  pthread_join(th, NULL);
  ASSERT_EQ(o.count, 5000);
  ASSERT_TRUE(o.in_order);
  sl_channel_destroy(ch);
  sl_schema_release(sc);
}

/* --- stress --------------------------------------------------------------- */

enum { NPROD = 4, NCONS = 3, PER_PROD = 20000 };

typedef struct stress {
  sl_channel *ch;
  sl_schema *sc;
  atomic_int seen[NPROD * PER_PROD];
  atomic_int failures;
} stress;

typedef struct stress_arg {
  stress *st;
  int id;
  long received;
} stress_arg;

static void *stress_producer(void *arg) {
  stress_arg *a = arg;
  for (int i = 0; i < PER_PROD; i++) {
    sl_sample *s = sl_sample_new(a->st->sc);
    void *data;
    if (!s || sl_sample_alloc(s, 0, 0, NULL, &data) < 0) {
      atomic_fetch_add(&a->st->failures, 1);
      sl_sample_release(s);
      return NULL;
    }
    *(int64_t *)data = (int64_t)a->id * PER_PROD + i;
    /* Mix blocking and non-blocking sends. */
    int rc;
    if (i % 2) {
      while ((rc = sl_channel_try_send(a->st->ch, s)) == SL_EAGAIN)
        sched_yield();
    } else {
      rc = sl_channel_send(a->st->ch, s);
    }
    if (rc != SL_OK) {
      atomic_fetch_add(&a->st->failures, 1);
      sl_sample_release(s);
      return NULL;
    }
  }
  return NULL;
}

static void *stress_consumer(void *arg) {
  stress_arg *a = arg;
  int64_t last[NPROD];
  for (int p = 0; p < NPROD; p++)
    last[p] = -1;
  sl_sample *got[8];
  for (;;) {
    int n = (a->id == 0)
                ? sl_channel_recv_many(a->st->ch, got, 8)
                : (sl_channel_recv(a->st->ch, got) == SL_OK ? 1 : SL_EOF);
    if (n == SL_EOF) break;
    if (n <= 0) {
      atomic_fetch_add(&a->st->failures, 1);
      break;
    }
    for (int k = 0; k < n; k++) {
      int64_t v = value_of(got[k]);
      sl_sample_release(got[k]);
      int p = (int)(v / PER_PROD);
      /* FIFO: one consumer sees each producer's values in order. */
      if (v < 0 || p >= NPROD || v <= last[p])
        atomic_fetch_add(&a->st->failures, 1);
      else {
        last[p] = v;
        atomic_fetch_add(&a->st->seen[v], 1);
      }
      a->received++;
    }
  }
  return NULL;
}

TEST(mpmc_stress_every_value_once) {
  stress *st = calloc(1, sizeof *st);
  ASSERT_NOT_NULL(st);
  st->sc = i64_schema();
  st->ch = sl_channel_new(8, 0);
  pthread_t prod[NPROD], cons[NCONS];
  stress_arg pa[NPROD], ca[NCONS];
  for (int i = 0; i < NCONS; i++) {
    ca[i] = (stress_arg){st, i, 0};
    ASSERT_EQ(pthread_create(&cons[i], NULL, stress_consumer, &ca[i]), 0);
  }
  for (int i = 0; i < NPROD; i++) {
    pa[i] = (stress_arg){st, i, 0};
    ASSERT_EQ(pthread_create(&prod[i], NULL, stress_producer, &pa[i]), 0);
  }
  for (int i = 0; i < NPROD; i++)
    pthread_join(prod[i], NULL);
  sl_channel_close(st->ch);
  long total = 0;
  for (int i = 0; i < NCONS; i++) {
    pthread_join(cons[i], NULL);
    total += ca[i].received;
  }
  ASSERT_EQ(atomic_load(&st->failures), 0);
  ASSERT_EQ(total, NPROD * PER_PROD);
  for (int v = 0; v < NPROD * PER_PROD; v++)
    if (atomic_load(&st->seen[v]) != 1)
      test_fail(__FILE__, __LINE__, "value %d received %d times", v,
                atomic_load(&st->seen[v]));
  ASSERT_EQ(sl_channel_len(st->ch), 0);
  sl_channel_destroy(st->ch);
  sl_schema_release(st->sc);
  free(st);
}
