/*
 * channel.c - a bounded multi-producer multi-consumer channel of samples.
 *
 * Protocol (one mutex, two condition variables, as zstd's pool and Go's
 * chan):
 *
 *   OPEN    send blocks while full; recv blocks while empty.
 *   CLOSED  (sl_channel_close) send fails with SL_ECLOSED at once; recv drains
 *           what is queued, then returns SL_EOF forever.
 *   KILLED  (sl_channel_kill) send fails with the kill code at once; recv
 *           drains what was queued before the kill (so an error reaches the
 *           consumer after the samples that preceded it), then returns the
 *           kill code with its message.  sl_channel_abort also drops what is
 *           queued.  The first of close/kill wins; a later kill does not
 *           override a close (the stream already ended cleanly).
 *   reopen  returns to OPEN with an empty queue, for the next pass.
 *
 * Invariants (all protected by mu):
 *   - 1 <= depth <= cap (sync/channel.h: sl_prefetch_auto changes it while
 *     the channel is used); a send is admitted only while len < depth, so
 *     len <= depth except right after a depth was lowered.
 *   - 0 <= len <= cap; queued samples are ring[(head + k) % cap], k < len,
 *     and size[] holds the byte count recorded for each when it was sent.
 *   - bytes == sum of size[] over queued samples.
 *   - when max_bytes > 0, a send is admitted iff len == 0 or
 *     bytes + nbytes <= max_bytes (an empty channel always admits one).
 *   - a thread waiting on not_full is counted in send_waiters, on not_empty
 *     in recv_waiters; signals are sent only when someone waits, so a busy
 *     producer/consumer pair hands off without system calls.
 *   - every state change that can unblock waiters broadcasts both conditions.
 *   - `level` mirrors len (written under mu, read without it) so that a
 *     thread about to sleep can first spin briefly, unlocked, watching for
 *     the other side to make progress: waking a sleeping thread costs tens of
 *     microseconds, far more than the few hundred nanoseconds a busy peer
 *     needs to hand over the next sample.
 */
#include "sync/channel.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

/* Spin iterations before sleeping on a condition (each a pause hint). */
#define SPIN_LIMIT 256

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

enum { CH_OPEN, CH_CLOSED, CH_KILLED };

struct sl_channel {
  pthread_mutex_t mu;
  pthread_cond_t not_empty; /* signalled when len grows or the state ends */
  pthread_cond_t not_full;  /* signalled when len shrinks or the state ends */
  sl_sample **ring;         /* protected by mu */
  size_t *size;             /* protected by mu */
  size_t cap;               /* immutable: the ring's slots */
  size_t depth;             /* protected by mu: the most a send admits */
  size_t max_bytes;         /* immutable */
  size_t head, len, bytes;  /* protected by mu */
  int state;                /* protected by mu */
  int kill_code;            /* protected by mu */
  char *kill_msg;           /* protected by mu */
  int send_waiters, recv_waiters; /* protected by mu */
  atomic_size_t level;            /* == len; written under mu */
  bool spin;                      /* immutable: more than one CPU online */
};

sl_channel *sl_channel_new(size_t capacity, size_t max_bytes) {
  if (capacity == 0 || capacity > (SIZE_MAX / 2) / sizeof(sl_sample *)) {
    sl_set_error(SL_EINVAL, "channel: capacity must be >= 1, got %zu",
                 capacity);
    return NULL;
  }
  sl_channel *ch = sl__calloc(1, sizeof *ch);
  if (ch) {
    ch->ring = sl__malloc(capacity * sizeof *ch->ring);
    ch->size = sl__malloc(capacity * sizeof *ch->size);
  }
  if (!ch || !ch->ring || !ch->size) {
    if (ch) {
      sl__free(ch->ring);
      sl__free(ch->size);
    }
    sl__free(ch);
    sl_set_error(SL_ENOMEM, "channel: cannot allocate %zu slots", capacity);
    return NULL;
  }
  ch->cap = capacity;
  ch->depth = capacity;
  ch->max_bytes = max_bytes;
  pthread_mutex_init(&ch->mu, NULL);
  pthread_cond_init(&ch->not_empty, NULL);
  pthread_cond_init(&ch->not_full, NULL);
  atomic_init(&ch->level, 0);
  ch->spin = sl__cpu_count() > 1;
  return ch;
}

/* Releases every queued sample.  Caller holds mu. */
static void drop_all(sl_channel *ch) {
  while (ch->len) {
    sl_sample_release(ch->ring[ch->head]);
    ch->head = (ch->head + 1) % ch->cap;
    ch->len--;
  }
  ch->head = 0;
  ch->bytes = 0;
  atomic_store_explicit(&ch->level, 0, memory_order_relaxed);
}

void sl_channel_destroy(sl_channel *ch) {
  if (!ch) return;
  drop_all(ch);
  SL__FREE(ch->kill_msg, ch->ring, ch->size);
  pthread_cond_destroy(&ch->not_empty);
  pthread_cond_destroy(&ch->not_full);
  pthread_mutex_destroy(&ch->mu);
  sl__free(ch);
}

/* Caller holds mu. */
static bool admits(const sl_channel *ch, size_t nbytes) {
  if (ch->len >= ch->depth) return false;
  if (ch->max_bytes == 0 || ch->len == 0) return true;
  return ch->bytes + nbytes <= ch->max_bytes;
}

/* The error a sender gets on an ended channel.  Caller holds mu. */
static int send_error(const sl_channel *ch) {
  if (ch->state == CH_CLOSED)
    return sl_set_error(SL_ECLOSED, "channel: send on a closed channel");
  return sl_set_error(ch->kill_code, "%s",
                      ch->kill_msg ? ch->kill_msg : sl_strerror(ch->kill_code));
}

static void push(sl_channel *ch, sl_sample *s, size_t nbytes) {
  size_t tail = (ch->head + ch->len) % ch->cap;
  ch->ring[tail] = s;
  ch->size[tail] = nbytes;
  ch->len++;
  atomic_store_explicit(&ch->level, ch->len, memory_order_relaxed);
  ch->bytes += nbytes;
  if (ch->recv_waiters) pthread_cond_signal(&ch->not_empty);
}

/* Called with mu held when a sender finds the channel full (`full`) or a
 * receiver finds it empty.  Releases mu, spins a little while the level
 * stays put, then retakes mu; the caller then re-checks every condition
 * under the lock before it may sleep, so no wake-up is missed.  Spinning only
 * pays with a second core: on one CPU the peer cannot run while we spin, nor
 * while every CPU has a thread to run (sl__cpus_oversubscribed). */
static void spin_while_level(sl_channel *ch, bool full) {
  if (!ch->spin || sl__cpus_oversubscribed()) return;
  size_t start = ch->len;
  pthread_mutex_unlock(&ch->mu);
  for (int i = 0; i < SPIN_LIMIT; i++) {
    cpu_relax();
    size_t now = atomic_load_explicit(&ch->level, memory_order_relaxed);
    if (full ? now < start : now > start) break;
  }
  pthread_mutex_lock(&ch->mu);
}

static int do_send(sl_channel *ch, sl_sample *s, bool block) {
  SL_RETURN_ERROR_IF(!ch || !s, SL_EINVAL, "channel: NULL %s",
                     !ch ? "channel" : "sample");
  size_t nbytes = sl_sample_nbytes(s);
  bool spun = false;
  pthread_mutex_lock(&ch->mu);
  for (;;) {
    if (ch->state != CH_OPEN) {
      int rc = send_error(ch);
      pthread_mutex_unlock(&ch->mu);
      return rc;
    }
    if (admits(ch, nbytes)) break;
    if (!block) {
      pthread_mutex_unlock(&ch->mu);
      return SL_EAGAIN;
    }
    if (!spun) { /* spin once, then re-check everything under the lock */
      spun = true;
      spin_while_level(ch, true);
      continue;
    }
    ch->send_waiters++;
    pthread_cond_wait(&ch->not_full, &ch->mu);
    ch->send_waiters--;
  }
  push(ch, s, nbytes);
  pthread_mutex_unlock(&ch->mu);
  return SL_OK;
}

int sl_channel_send(sl_channel *ch, sl_sample *s) {
  return do_send(ch, s, true);
}

int sl_channel_try_send(sl_channel *ch, sl_sample *s) {
  return do_send(ch, s, false);
}

/* The result of a receive on an empty, ended channel.  Caller holds mu. */
static int ended(const sl_channel *ch) {
  if (ch->state == CH_CLOSED) return SL_EOF;
  return sl_set_error(ch->kill_code, "%s",
                      ch->kill_msg ? ch->kill_msg : sl_strerror(ch->kill_code));
}

/* Receives up to max samples into out; blocks for the first if `block`.
 * `seen` (optional) receives what the receive found when it began. */
static int do_recv(sl_channel *ch, sl_sample **out, size_t max, bool block,
                   int *seen) {
  SL_RETURN_ERROR_IF(!ch || !out || !max, SL_EINVAL,
                     "channel: NULL channel or output");
  bool spun = false;
  pthread_mutex_lock(&ch->mu);
  if (seen)
    *seen = ch->len == 0                                   ? SL__CH_SEEN_EMPTY
            : ch->len >= ch->depth || ch->send_waiters > 0 ? SL__CH_SEEN_FULL
                                                           : SL__CH_SEEN_SOME;
  while (ch->len == 0) {
    if (ch->state != CH_OPEN) {
      int rc = ended(ch);
      pthread_mutex_unlock(&ch->mu);
      return rc;
    }
    if (!block) {
      pthread_mutex_unlock(&ch->mu);
      return SL_EAGAIN;
    }
    if (!spun) {
      spun = true;
      spin_while_level(ch, false);
      continue;
    }
    ch->recv_waiters++;
    pthread_cond_wait(&ch->not_empty, &ch->mu);
    ch->recv_waiters--;
  }
  size_t n = SL_MIN(max, ch->len);
  for (size_t k = 0; k < n; k++) {
    out[k] = ch->ring[ch->head];
    ch->bytes -= ch->size[ch->head];
    ch->head = (ch->head + 1) % ch->cap;
  }
  ch->len -= n;
  atomic_store_explicit(&ch->level, ch->len, memory_order_relaxed);
  if (ch->send_waiters) {
    if (n > 1)
      pthread_cond_broadcast(&ch->not_full);
    else
      pthread_cond_signal(&ch->not_full);
  }
  pthread_mutex_unlock(&ch->mu);
  return (int)n;
}

int sl_channel_recv(sl_channel *ch, sl_sample **out) {
  int rc = do_recv(ch, out, 1, true, NULL);
  return rc > 0 ? SL_OK : rc;
}

int sl__channel_recv_seen(sl_channel *ch, sl_sample **out, int *seen) {
  int rc = do_recv(ch, out, 1, true, seen);
  return rc > 0 ? SL_OK : rc;
}

void sl__channel_set_depth(sl_channel *ch, size_t depth) {
  if (!ch) return;
  pthread_mutex_lock(&ch->mu);
  bool grew = depth > ch->depth;
  ch->depth = SL_MIN(SL_MAX(depth, (size_t)1), ch->cap);
  if (grew && ch->send_waiters) pthread_cond_broadcast(&ch->not_full);
  pthread_mutex_unlock(&ch->mu);
}

int sl_channel_try_recv(sl_channel *ch, sl_sample **out) {
  int rc = do_recv(ch, out, 1, false, NULL);
  return rc > 0 ? SL_OK : rc;
}

int sl_channel_recv_many(sl_channel *ch, sl_sample **out, size_t max) {
  if (max > INT32_MAX) max = INT32_MAX;
  return do_recv(ch, out, max, true, NULL);
}

static void end(sl_channel *ch, int state, int code, const char *msg,
                bool drop) {
  if (!ch) return;
  char *copy = NULL;
  if (state == CH_KILLED && msg) copy = sl__strdup(msg);
  pthread_mutex_lock(&ch->mu);
  if (ch->state == CH_OPEN) {
    ch->state = state;
    if (state == CH_KILLED) {
      ch->kill_code = (code < 0 && code != SL_EOF) ? code : SL_EKILLED;
      ch->kill_msg = copy;
      copy = NULL;
    }
  }
  if (drop) drop_all(ch);
  pthread_cond_broadcast(&ch->not_empty);
  pthread_cond_broadcast(&ch->not_full);
  pthread_mutex_unlock(&ch->mu);
  sl__free(copy);
}

void sl_channel_close(sl_channel *ch) {
  end(ch, CH_CLOSED, SL_OK, NULL, false);
}

void sl_channel_kill(sl_channel *ch, int code, const char *msg) {
  end(ch, CH_KILLED, code, msg, false);
}

void sl_channel_abort(sl_channel *ch, int code, const char *msg) {
  end(ch, CH_KILLED, code, msg, true);
}

void sl_channel_reopen(sl_channel *ch) {
  if (!ch) return;
  pthread_mutex_lock(&ch->mu);
  drop_all(ch);
  ch->state = CH_OPEN;
  ch->kill_code = SL_OK;
  sl__free(ch->kill_msg);
  ch->kill_msg = NULL;
  pthread_mutex_unlock(&ch->mu);
}

size_t sl_channel_len(sl_channel *ch) {
  if (!ch) return 0;
  pthread_mutex_lock(&ch->mu);
  size_t n = ch->len;
  pthread_mutex_unlock(&ch->mu);
  return n;
}

size_t sl_channel_bytes(sl_channel *ch) {
  if (!ch) return 0;
  pthread_mutex_lock(&ch->mu);
  size_t n = ch->bytes;
  pthread_mutex_unlock(&ch->mu);
  return n;
}

size_t sl_channel_capacity(const sl_channel *ch) {
  return ch ? ch->cap : 0;
}
