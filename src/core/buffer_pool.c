/*
 * buffer_pool.c - buffers that return to a pool when their last reference
 * is released, for stages that make many large buffers of about one size
 * (decoded images: 3 MB each at 1008 x 1008 RGB).
 *
 * Why: freeing and reallocating such buffers makes the C library hand the
 * memory back to the kernel and fault it in again, zero-filled, page by
 * page: on the image reader, the largest cost of a second decoding thread
 * (two allocator arenas trimming in turn; figures in docs/PERFORMANCE.md,
 * image decoding).  A pooled buffer keeps its pages.
 *
 * Protocol:
 *   get       takes an idle buffer whose capacity fits the request (at
 *             least `size` and wasting at most a quarter of it), searched
 *             from the last returned (its pages are the warmest); else
 *             allocates a new one with capacity `size`.  Either way the
 *             buffer comes out with one reference and sl_buffer_size() ==
 *             size, and holds a reference to the pool.
 *   return    sl_buffer_release of the last reference calls
 *             pool_put (the buffer's recycle hook, set by get): the
 *             buffer becomes idle if
 *             the pool is open and stays within both bounds (max_idle
 *             buffers, max_idle_bytes of capacity); otherwise it is freed.
 *   watch     the owner may watch the idle capacity (sl__buffer_pool_watch:
 *             the memory budget's resident charge): each change of
 *             idle_bytes is told to its hook under mu, so what the owner
 *             charged is always what is idle, whichever thread returned a
 *             buffer; the hook may refuse a returned buffer (a full
 *             budget), which is then freed rather than kept.
 *   release   the owner's sl__buffer_pool_release closes the pool and frees
 *             the idle buffers; buffers still out stay valid and are freed
 *             when released.  The pool itself goes with its last reference
 *             (the owner's and one per buffer, idle or out).
 *
 * Memory bound: idle buffers hold at most max_idle_bytes; buffers out are
 * bounded by whoever holds them (a stage's window, the consumer).
 *
 * Threads: get and return may run on any threads (a worker takes, the
 * trainer releases); `mu` guards the idle list and `closed`.  A returned
 * buffer's last reference was dropped with acq_rel, and the mutex orders
 * the return before the next get: the next holder never sees old writes
 * late.
 */
#include "internal.h"

#include <pthread.h>

struct sl__buffer_pool {
  sl__refcnt refs; /* the owner's + one per buffer made by the pool */
  pthread_mutex_t mu;
  bool closed;               /* mu: the owner let go */
  size_t max_idle;           /* immutable */
  size_t max_idle_bytes;     /* immutable */
  size_t nidle, idle_bytes;  /* mu */
  sl_buffer **idle;          /* mu: [max_idle], appended on return */
  sl__buffer_pool_watch_fn watch; /* mu: told each change of idle_bytes */
  void *watch_ud;                 /* mu */
};

/* idle_bytes becomes `to`, told to the watcher: false when it refused a
 * growth (idle_bytes unchanged).  Under mu. */
static bool set_idle_bytes(sl__buffer_pool *p, size_t to) {
  size_t from = p->idle_bytes;
  if (p->watch && from != to && !p->watch(p->watch_ud, from, to) && to > from)
    return false;
  p->idle_bytes = to;
  return true;
}

sl__buffer_pool *sl__buffer_pool_new(size_t max_idle, size_t max_idle_bytes) {
  sl__buffer_pool *p = sl__calloc(1, sizeof *p);
  if (p && max_idle) p->idle = sl__calloc(max_idle, sizeof *p->idle);
  if (!p || (max_idle && !p->idle)) {
    sl__free(p);
    sl_set_error(SL_ENOMEM, "buffer pool: cannot allocate");
    return NULL;
  }
  sl__ref_init(&p->refs);
  pthread_mutex_init(&p->mu, NULL);
  p->max_idle = max_idle;
  p->max_idle_bytes = max_idle_bytes;
  return p;
}

static void pool_unref(sl__buffer_pool *p) {
  if (!sl__ref_dec(&p->refs)) return;
  pthread_mutex_destroy(&p->mu);
  sl__free(p->idle);
  sl__free(p);
}

/* The recycle hook of the pool's buffers: takes b back as idle (true), or
 * drops b's pool reference (false: sl_buffer_release frees b). */
static bool pool_put(void *ud, sl_buffer *b) {
  sl__buffer_pool *p = ud;
  size_t cap = sl__buffer_capacity(b);
  pthread_mutex_lock(&p->mu);
  bool keep = !p->closed && p->nidle < p->max_idle &&
              cap <= p->max_idle_bytes - p->idle_bytes &&
              set_idle_bytes(p, p->idle_bytes + cap);
  if (keep) p->idle[p->nidle++] = b;
  pthread_mutex_unlock(&p->mu);
  if (!keep) pool_unref(p); /* the caller frees b */
  return keep;
}

sl_buffer *sl__buffer_pool_get(sl__buffer_pool *p, size_t size) {
  if (!p) return sl_buffer_new(size);
  sl_buffer *b = NULL;
  pthread_mutex_lock(&p->mu);
  for (size_t i = p->nidle; i-- > 0;) {
    size_t cap = sl__buffer_capacity(p->idle[i]);
    if (cap >= size && cap - size <= cap / 4) {
      b = p->idle[i];
      p->idle[i] = p->idle[--p->nidle];
      set_idle_bytes(p, p->idle_bytes - cap);
      break;
    }
  }
  pthread_mutex_unlock(&p->mu);
  if (b) {
    sl__buffer_reuse(b, size);
    return b;
  }
  b = sl_buffer_new(size);
  if (!b) return NULL;
  sl__ref_inc(&p->refs);
  sl__buffer_set_recycle(b, pool_put, p);
  return b;
}
size_t sl__buffer_pool_idle(sl__buffer_pool *p) {
  if (!p) return 0;
  pthread_mutex_lock(&p->mu);
  size_t n = p->nidle;
  pthread_mutex_unlock(&p->mu);
  return n;
}

size_t sl__buffer_pool_idle_bytes(sl__buffer_pool *p) {
  if (!p) return 0;
  pthread_mutex_lock(&p->mu);
  size_t n = p->idle_bytes;
  pthread_mutex_unlock(&p->mu);
  return n;
}

void sl__buffer_pool_watch(sl__buffer_pool *p, sl__buffer_pool_watch_fn fn,
                           void *ud) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  if (p->watch && p->idle_bytes) p->watch(p->watch_ud, p->idle_bytes, 0);
  p->watch = p->closed ? NULL : fn;
  p->watch_ud = ud;
  if (p->watch && p->idle_bytes && !p->watch(ud, 0, p->idle_bytes)) {
    /* refused: what is idle goes (the owner's reference keeps p) */
    for (size_t i = 0; i < p->nidle; i++) {
      sl__buffer_free(p->idle[i]);
      pool_unref(p); /* each idle buffer's pool reference */
    }
    p->nidle = 0;
    p->idle_bytes = 0;
  }
  pthread_mutex_unlock(&p->mu);
}

void sl__buffer_pool_release(sl__buffer_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->closed = true;
  size_t n = p->nidle;
  p->nidle = 0;
  set_idle_bytes(p, 0);
  p->watch = NULL;
  pthread_mutex_unlock(&p->mu);
  /* Closed: nobody adds to or takes from the list any more. */
  for (size_t i = 0; i < n; i++) {
    sl__buffer_free(p->idle[i]);
    pool_unref(p); /* each idle buffer's pool reference */
  }
  pool_unref(p);
}
