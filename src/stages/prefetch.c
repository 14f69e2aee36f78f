/*
 * prefetch.c - sl_prefetch: a worker thread pulls the upstream reader into a
 * bounded channel while the consumer is busy (Paddle's `buffered`).
 *
 * Protocol:
 *
 *   worker loop   until `stop` is set: s = next(up); then
 *                   SL_OK    send(ch, s); a failed send means the consumer
 *                            aborted the channel: release s and exit;
 *                   SL_EOF   close(ch) and exit (receivers drain, then EOF);
 *                   error    copy the worker's detail message (the worker has
 *                            its own thread-local slot) and kill(ch, code,
 *                            msg), then exit: receivers get the samples sent
 *                            before the error, then the code and the message.
 *   consumer next recv from the channel (through a small local cache filled
 *                 with recv_many; see "Cache" below).  The reader base makes
 *                 the EOF latch and the error sticky.
 *   stop          (reset and destroy) set `stop`, abort the channel so that a
 *                 worker blocked in send wakes at once (a worker inside the
 *                 upstream's next is waited for: its send then fails), join.
 *   reset         stop; drop the cache; reopen the channel; reset the
 *                 upstream on the consumer's thread; start a new worker.
 *   destroy       stop; drop the cache; destroy the channel and upstream.
 *
 * The worker exits on its own at EOF or on an error; it is still joined by
 * the next reset or destroy (`running` means "started, not yet joined").
 *
 * Lazy (sl__prefetch_lazy: interleave's read-ahead, one per source): no
 * worker at construction, reset or restore; the pass's first next starts
 * it, and the next that returns the end (or an error) joins it.  So only
 * the sources being read hold a thread: interleave's cycle, not all of
 * its sources.
 *
 * Invariants and ownership:
 *   up       owned.  Used only by the worker while one is running, and only
 *            by the consumer while none is (thread create and join order the
 *            two).
 *   ch       thread-safe by itself; the worker sends, closes and kills, the
 *            consumer receives, aborts and reopens.
 *   stop     atomic: written by the consumer, read by the worker.  The abort
 *            is what actually ends the worker; the flag only spares one more
 *            (possibly slow) upstream pull after the abort.
 *   thread, running, cache, cache_pos, cache_len
 *            consumer-only.
 *   batch    set at construction (NULL unless up is a batch), then read-only;
 *            batch's table has its own lock.
 *   waiting  atomic: written by the consumer, read by the worker.
 *
 * Cache: the consumer takes up to PREFETCH_CACHE samples per lock round trip
 * with sl_channel_recv_many.  The channel is FIFO and recv_many returns an
 * end (EOF or the kill code) only once the channel is empty, so the cache
 * preserves both sample order and error position; it lets the worker run up
 * to PREFETCH_CACHE samples further ahead than `n`.  It pays off when the
 * consumer is the slower side, which is what prefetch is for: one recv_many
 * frees many slots, so a worker blocked on a full channel is woken once per
 * batch instead of once per sample (docs/PERFORMANCE.md, "prefetch's
 * consumer cache", has the figures).
 *
 * Autotuning (sl_prefetch_auto; tf.data's prefetch autotuner): the channel
 * is made with max_depth slots and its byte budget, and its depth
 * (sync/channel.h) starts at 1.  The consumer takes one sample per receive
 * (no cache: the depth is then the whole bound) and notes what each receive
 * found (sl__channel_recv_seen), in two modes:
 *   upswing    the channel has not been seen full since the last change;
 *              seeing it full (at the depth, or a send refused for bytes)
 *              turns to downswing.
 *   downswing  seeing it empty (the consumer must wait although the worker
 *              had filled it: the demand came in a burst) doubles the depth,
 *              up to max_depth and to max_bytes / the average sample size
 *              so far, and turns back to upswing.
 * A consumer slower than the worker finds the channel full, never empty; a
 * worker slower than the consumer never fills it: neither grows the depth.
 * The depth never shrinks and survives reset and restore; it is published
 * in stats.queue_depth.  `tune` and the running size sums are the
 * consumer's.
 *
 * Over a batch (sl__batch_defer, batch.c): batch's outputs leave the worker
 * with their rows still to copy unless the worker copies them itself, which
 * it does when the consumer is not waiting (`waiting`, set by the consumer
 * around its recv_many with an empty cache: a hint, read relaxed; either
 * answer is correct).  The consumer calls sl__batch_fill on every sample
 * before handing it out, so whatever leaves prefetch is whole: a waiting
 * consumer copies the rows instead of sleeping, a busy one is spared the
 * copy.  Outputs dropped unfilled (stop, the cache) leave their rows in
 * batch's table until the reset or destroy that follows, which drops them.
 */
#include "stages/state.h"
#include "sync/channel.h"

#include <pthread.h>

#define PREFETCH_CACHE 16
/* At most this many batches out with their rows still to copy. */
#define PREFETCH_MAX_DEFERRED 64
/* sl_prefetch_auto's defaults and the largest max_depth. */
#define AUTO_MAX_BYTES ((uint64_t)64 << 20)
#define AUTO_MAX_DEPTH 1024u
#define AUTO_DEPTH_LIMIT 65536u

/* The autotuner's state (consumer-only). */
typedef struct prefetch_tune {
  bool on;
  bool downswing;        /* the channel was seen full since the last change */
  size_t depth;          /* the channel's depth now */
  size_t max_depth;      /* the channel's slots */
  uint64_t max_bytes;    /* the channel's byte budget */
  uint64_t seen_bytes;   /* payload of the samples received so far */
  uint64_t seen_samples; /* and their number */
} prefetch_tune;

typedef struct prefetch_state {
  sl_reader *up;
  sl_channel *ch;
  atomic_bool stop;
  pthread_t thread;
  bool running;
  bool lazy; /* sl__prefetch_lazy: the worker starts at the pass's first
                next and is joined when the consumer reaches the end */
  sl_sample *cache[PREFETCH_CACHE];
  int cache_pos, cache_len;
  sl__stage_counters stats; /* wait_down: the worker blocked in send */
  void *batch;              /* sl__batch_defer's handle, or NULL */
  atomic_bool waiting;      /* the consumer has nothing cached: it waits */
  /* Held by the worker around each upstream pull, and by a save, so that
   * the chain below is still while it is saved (state.h). */
  pthread_mutex_t pulling;
  prefetch_tune tune; /* sl_prefetch_auto only */
} prefetch_state;

static void *worker_main(void *arg) {
  prefetch_state *p = arg;
  while (!atomic_load_explicit(&p->stop, memory_order_relaxed)) {
    sl_sample *s = NULL;
    pthread_mutex_lock(&p->pulling);
    int rc = sl_reader_next(p->up, &s);
    pthread_mutex_unlock(&p->pulling);
    if (rc == SL_OK) {
      /* A consumer that waits copies the rows itself (it would sleep
       * meanwhile); one that is busy gets them copied here. */
      if (p->batch && !atomic_load_explicit(&p->waiting, memory_order_relaxed))
        sl__batch_fill(p->batch, s);
      uint64_t t0 = sl__stat_start();
      int sent = sl_channel_send(p->ch, s);
      sl__stat_since(&p->stats.wait_down_ns, t0);
      if (sent != SL_OK) {
        sl_sample_release(s); /* aborted: the consumer is going away */
        break;
      }
      continue;
    }
    if (rc == SL_EOF) {
      sl_channel_close(p->ch);
      break;
    }
    /* Carry the message across threads: the channel copies it and restores
     * it as the consumer's detail.  NULL (out of memory) falls back to the
     * code's description. */
    char *msg = sl__error_dup();
    sl_channel_kill(p->ch, rc, msg);
    sl__free(msg);
    break;
  }
  return NULL;
}

/* SL_OK, or SL_ENOMEM naming the stage (sl__thread_start's message). */
static int start_worker(prefetch_state *p) {
  atomic_store_explicit(&p->stop, false, memory_order_relaxed);
  SL_FORWARD_IF_ERROR(
      sl__thread_start(&p->thread, "prefetch", "sl-prefetch", worker_main, p));
  p->running = true;
  return SL_OK;
}

static void stop_worker(prefetch_state *p) {
  if (!p->running) return;
  atomic_store_explicit(&p->stop, true, memory_order_relaxed);
  sl_channel_abort(p->ch, SL_EKILLED, "prefetch: stopped");
  pthread_join(p->thread, NULL);
  p->running = false;
}

static void drop_cache(prefetch_state *p) {
  while (p->cache_pos < p->cache_len)
    sl_sample_release(p->cache[p->cache_pos++]);
  p->cache_pos = p->cache_len = 0;
}

/* Stop signal (reader_impl.h): the worker leaves at its next check, and
 * one blocked in send wakes at once. */
static void prefetch_signal_stop(void *st) {
  prefetch_state *p = st;
  atomic_store_explicit(&p->stop, true, memory_order_relaxed);
  sl_channel_abort(p->ch, SL_EKILLED, "prefetch: stopped");
}

/* One received sample and what its receive found (the autotuner above). */
static void tune_after(prefetch_state *p, const sl_sample *s, int seen) {
  prefetch_tune *t = &p->tune;
  t->seen_bytes += sl_sample_nbytes(s);
  t->seen_samples++;
  if (!t->downswing) {
    t->downswing = seen == SL__CH_SEEN_FULL;
    return;
  }
  if (seen != SL__CH_SEEN_EMPTY) return;
  t->downswing = false;
  size_t want = SL_MIN(2 * t->depth, t->max_depth);
  uint64_t avg = t->seen_bytes / t->seen_samples;
  if (avg > 0 && want > 1 && (uint64_t)want * avg > t->max_bytes)
    want = (size_t)SL_MAX(t->max_bytes / avg, (uint64_t)1);
  if (want <= t->depth) return;
  t->depth = want;
  sl__channel_set_depth(p->ch, want);
  atomic_store_explicit(&p->stats.queue_depth, want, memory_order_relaxed);
}

static int prefetch_next_running(prefetch_state *p, sl_sample **out);

static int prefetch_next(void *st, sl_sample **out) {
  prefetch_state *p = st;
  if (!p->lazy) return prefetch_next_running(p, out);
  /* Lazy: nothing runs before the pass's first pull, and the thread is
   * joined at the end it reported (the reader base latches the end, so no
   * next follows before a reset or restore). */
  if (!p->running) SL_FORWARD_IF_ERROR(start_worker(p));
  int rc = prefetch_next_running(p, out);
  if (rc != SL_OK) stop_worker(p);
  return rc;
}

static int prefetch_next_running(prefetch_state *p, sl_sample **out) {
  if (p->tune.on) {
    int seen = SL__CH_SEEN_SOME;
    atomic_store_explicit(&p->waiting, true, memory_order_relaxed);
    int rc = sl__channel_recv_seen(p->ch, out, &seen);
    atomic_store_explicit(&p->waiting, false, memory_order_relaxed);
    if (rc != SL_OK) return rc; /* SL_EOF, or the kill code and message */
    tune_after(p, *out, seen);
    if (p->batch) sl__batch_fill(p->batch, *out);
    return SL_OK;
  }
  if (p->cache_pos == p->cache_len) {
    atomic_store_explicit(&p->waiting, true, memory_order_relaxed);
    int n = sl_channel_recv_many(p->ch, p->cache, PREFETCH_CACHE);
    atomic_store_explicit(&p->waiting, false, memory_order_relaxed);
    if (n <= 0) return n; /* SL_EOF, or the kill code with its message */
    p->cache_pos = 0;
    p->cache_len = n;
  }
  *out = p->cache[p->cache_pos++];
  if (p->batch) sl__batch_fill(p->batch, *out); /* its rows, if still due */
  return SL_OK;
}

static int prefetch_reset(void *st) {
  prefetch_state *p = st;
  stop_worker(p);
  drop_cache(p);
  sl_channel_reopen(p->ch);
  SL_FORWARD_IF_ERROR(sl_reader_reset(p->up));
  return p->lazy ? SL_OK : start_worker(p);
}

static void prefetch_destroy(void *st) {
  prefetch_state *p = st;
  if (!p) return;
  stop_worker(p);
  drop_cache(p);
  sl_channel_destroy(p->ch);
  sl_reader_destroy(p->up);
  pthread_mutex_destroy(&p->pulling);
  sl__free(p);
}

/* The samples in the channel and the cache are not saved: the restored
 * upstream yields them again. */
static int prefetch_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                         sl__state_out *w) {
  (void)r;
  (void)pass;
  prefetch_state *p = st;
  pthread_mutex_lock(&p->pulling);
  int rc = sl__state_save_up(w, p->up, sl__reader_pass(p->up), k);
  pthread_mutex_unlock(&p->pulling);
  return rc;
}

static int prefetch_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                            sl__state_in *in) {
  (void)r;
  (void)pass;
  prefetch_state *p = st;
  stop_worker(p);
  drop_cache(p);
  sl_channel_reopen(p->ch);
  SL_FORWARD_IF_ERROR(sl__state_restore_up_at(in, p->up, k));
  return p->lazy ? SL_OK : start_worker(p);
}

static const sl__state_ops prefetch_state_ops = {prefetch_save,
                                                 prefetch_restore, NULL};

static const sl_reader_vtable prefetch_vt = {"prefetch", prefetch_next,
                                             prefetch_reset, prefetch_destroy};

/* Both constructors: `n` samples of depth, or autotuned when `tune` is
 * set (its max_depth slots, its byte budget). */
static int make(sl_reader *up, size_t n, const prefetch_tune *tune, bool lazy,
                sl_reader **out) {
  prefetch_state *p = sl__calloc(1, sizeof *p);
  if (!p)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "prefetch: cannot allocate"));
  p->up = up;
  p->lazy = lazy;
  p->stats.threads = 1;
  if (tune) {
    p->tune = *tune;
    n = tune->max_depth;
  }
  atomic_init(&p->stats.queue_depth, tune ? tune->depth : n);
  pthread_mutex_init(&p->pulling, NULL);
  atomic_init(&p->stop, false);
  atomic_init(&p->waiting, false);
  /* Over a batch, the rows of a batch may be left for the consumer to
   * copy while it waits (see batch.c).  At most every batch the channel,
   * the cache and the worker can hold at once. */
  p->batch = sl__batch_defer(
      up, SL_MIN(n + PREFETCH_CACHE + 1, (size_t)PREFETCH_MAX_DEFERRED));
  p->ch = sl_channel_new(n, tune ? (size_t)tune->max_bytes : 0);
  if (p->ch && tune) sl__channel_set_depth(p->ch, tune->depth);
  if (!p->ch) {
    int rc = sl_wrap_error(sl_last_error_code(), "prefetch");
    prefetch_destroy(p);
    return rc;
  }
  /* The schema is frozen and refcounted atomically, so retaining it through
   * the const accessor is safe. */
  SL_FORWARD_IF_ERROR(sl__decorator_make_1to1(&prefetch_vt, p,
                                              (sl_schema *)sl_reader_schema(up),
                                              &p->up, &p->stats, out));
  sl__reader_set_state_ops(*out, &prefetch_state_ops);
  sl__reader_set_stop_signal(*out, prefetch_signal_stop);
  int rc = lazy ? SL_OK : start_worker(p);
  if (rc != SL_OK) {
    sl_reader_destroy(*out); /* destroys up too: we own it; keeps the error */
    *out = NULL;
  }
  return rc;
}

static int make_fixed(sl_reader *up, size_t n, bool lazy, sl_reader **out) {
  SL_DECORATOR_ARGS("prefetch", up, out);
  if (n == 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "prefetch: buffer size must be >= 1"));
  return make(up, n, NULL, lazy, out);
}

int sl_prefetch(sl_reader *up, size_t n, sl_reader **out) {
  return make_fixed(up, n, false, out);
}

int sl__prefetch_lazy(sl_reader *up, size_t n, sl_reader **out) {
  return make_fixed(up, n, true, out);
}

int sl_prefetch_auto(sl_reader *up, const sl_prefetch_auto_opts *opts,
                     sl_reader **out) {
  SL_DECORATOR_ARGS("prefetch", up, out);
  sl_prefetch_auto_opts o = SL_PREFETCH_AUTO_OPTS_INIT;
  if (opts) {
    int rc = sl__opts_copy("sl_prefetch_auto_opts", &o, sizeof o, opts);
    if (rc < 0) return sl__fail_with_upstream(up, rc);
  }
  if (o.max_depth > AUTO_DEPTH_LIMIT)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL,
                         "prefetch(\"auto\"): option 'max_depth' must be "
                         "1..%u samples (0: %u; got %u)",
                         AUTO_DEPTH_LIMIT, AUTO_MAX_DEPTH, o.max_depth));
  if (o.max_bytes > (uint64_t)SIZE_MAX / 2)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL,
                         "prefetch(\"auto\"): option 'max_bytes' is too "
                         "large (%llu)",
                         (unsigned long long)o.max_bytes));
  prefetch_tune t = {0};
  t.on = true;
  t.depth = 1;
  t.max_depth = o.max_depth ? o.max_depth : AUTO_MAX_DEPTH;
  t.max_bytes = o.max_bytes ? o.max_bytes : AUTO_MAX_BYTES;
  return make(up, 0, &t, false, out);
}
