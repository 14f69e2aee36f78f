/*
 * internal.h - what every part of libsluice shares and users never see:
 * the allocator entry points, error-raising macros, refcount helpers and
 * the debug log.  Internal non-static names start with sl__.
 */
#ifndef SLUICE_INTERNAL_H
#define SLUICE_INTERNAL_H

#include "sluice.h"
#include "sluice/unstable.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* --- allocation -----------------------------------------------------------
 * Every allocation in the library goes through these, so that the fault
 * tests can make the N-th allocation fail.  sl__malloc(0) returns a unique
 * non-NULL pointer.  Failing calls set no error detail: callers say what they
 * were allocating with SL_RETURN_ERROR_IF / sl_set_error. */
void *sl__malloc(size_t size);
void *sl__calloc(size_t n, size_t size);
void *sl__realloc(void *p, size_t size);
void *sl__aligned_alloc(size_t align, size_t size);
void sl__free(void *p);
/* sl__free of each of n pointers, in order (NULL-safe); SL__FREE(a, b, ...)
 * is a destroy's list of owned buffers in one line (the arguments are all
 * read before the first is freed, so the struct holding them may come
 * last). */
void sl__free_n(void *const *p, size_t n);
#define SL__FREE(...)                                                          \
  sl__free_n((void *const[]){__VA_ARGS__},                                     \
             sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))
char *sl__strdup(const char *s);

/* Test hook: after `n` more successful allocations, every allocation fails
 * (n < 0 disables).  Returns the number of allocations made since the last
 * call.  Process-wide; for single-threaded fault tests. */
long sl__alloc_fail_after(long n);
/* Test hook: the largest single allocation requested (through the sl__
 * allocators) since the last call, which resets it.  Process-wide. */
size_t sl__alloc_largest(void);

/* --- errors ---------------------------------------------------------------
 * Written once so that every failure path says what and where.  The message
 * should name the stage: SL_RETURN_ERROR_IF(n == 0, SL_EINVAL,
 * "batch: batch size must be >= 1"). */
#define SL_RETURN_ERROR_IF(cond, code, ...)                                    \
  do {                                                                         \
    if (cond) return sl_set_error((code), __VA_ARGS__);                        \
  } while (0)

#define SL_FORWARD_IF_ERROR(expr)                                              \
  do {                                                                         \
    int sl__rc_ = (expr);                                                      \
    if (sl__rc_ < 0) return sl__rc_;                                           \
  } while (0)

/* Saves the calling thread's current error message into a fresh heap string
 * (NULL on allocation failure).  Used to carry errors across threads. */
char *sl__error_dup(void);

/* Copies `in` to `out` (cap bytes, NUL-terminated, cut when short; out may
 * be NULL when cap is 0) with the user:password of every URL replaced by
 * three asterisks: "https://USER:PASS@host/x" is shown with "***@host/x"
 * after its "https://".  Returns the
 * length of the whole redacted text, as snprintf does.  The one place
 * that keeps credentials out of what is shown: every error message passes
 * through it (error.c), and so does every URL the CLI prints. */
SL_API size_t sl__redact_urls(const char *in, char *out, size_t cap);

/* Forgets the code of the last error (not its text), so that a caller can
 * tell whether a callee that failed set a message of its own. */
void sl__error_forget_code(void);

/* Keeps the inner message: returns `code` with the current message left as
 * it is when a callee set one for that very code (a stage passing on its
 * callback's or upstream's own error), else sets `fmt` as its message.
 * Call sl__error_forget_code (or sl_clear_error) before the callee. */
int sl__error_keep(int code, const char *fmt, ...) SL_PRINTF(2, 3);

/* A sample maker's end: rc >= 0 hands `s` to *out (SL_OK); an error
 * releases s and is returned. */
static inline int sl__sample_out(int rc, sl_sample *s, sl_sample **out) {
  if (rc < 0) {
    sl_sample_release(s);
    return rc;
  }
  *out = s;
  return SL_OK;
}

/* --- refcounts ------------------------------------------------------------ */
typedef atomic_int sl__refcnt;
static inline void sl__ref_init(sl__refcnt *r) {
  atomic_init(r, 1);
}
static inline void sl__ref_inc(sl__refcnt *r) {
  atomic_fetch_add_explicit(r, 1, memory_order_relaxed);
}
/* True when this was the last reference: the caller frees the object. */
/* acq_rel rather than release + an acquire fence: same code on x86, and
 * ThreadSanitizer understands it (it does not model fences). */
static inline bool sl__ref_dec(sl__refcnt *r) {
  return atomic_fetch_sub_explicit(r, 1, memory_order_acq_rel) == 1;
}

/* The current refcount of `b` (acquire).  1 means the caller holds the only
 * reference, so it may write into the buffer again. */
int sl__buffer_refcount(const sl_buffer *b);

/* --- worker threads (threads.c) -------------------------------------------
 * Every stage that owns threads checks its thread count and starts them
 * here.  The hard bound of any `threads` option. */
#define SL__THREADS_HARD_MAX 1024
/* The CPUs this process may use (cpus.c): the affinity mask's count (read
 * at every call), lowered to the cgroup CPU quota (v2 cpu.max or v1
 * cfs_quota_us / cfs_period_us of the process's cgroup and its ancestors,
 * rounded up; read once per process); at least 1.  Thread-safe. */
long sl__cpu_count(void);
/* The quota part from files: ceil(quota / period), the smallest along the
 * cgroup paths listed in `proc_cgroup` (a /proc/self/cgroup) under `root`
 * (a /sys/fs/cgroup); 0 when there is none.  Tests give their own files. */
long sl__cgroup_cpu_limit(const char *proc_cgroup, const char *root);
/* The positions of the epoch sequence (n records; shard.c) that rank `rank` of
 * `world` reads, in output order, as segments [seg[2i], seg[2i+1]): returns
 * their number, 0 to 2 (two only under SL_SHARD_PAD, when the share wraps
 * to the start of the sequence).  Arguments must be valid. */
size_t sl__shard_segments(uint64_t n, int rank, int world,
                          sl_shard_policy policy, uint64_t seg[4]);
/* The memory this process may use, in bytes (cpus.c): the physical memory,
 * lowered to the cgroup memory limit (v2 memory.max, v1
 * memory.limit_in_bytes) of the process's cgroup and its ancestors; read
 * once per process.  The default of a memory budget (issue 27).
 * Thread-safe. */
unsigned long long sl__memory_limit(void);
/* The cgroup part from files, as sl__cgroup_cpu_limit: the smallest limit
 * in bytes along the cgroups `proc_cgroup` lists under `root`; 0: none. */
unsigned long long sl__cgroup_memory_limit(const char *proc_cgroup,
                                           const char *root);
/* Whether the machine has more runnable threads than online CPUs (cpus.c:
 * /proc/loadavg's running count, host-wide as the CPUs it is compared
 * with), so that a thread spinning for a result would take a CPU another
 * thread is waiting for.  Read at most once per 10 ms per process (a cached
 * answer in between); false when it cannot be read.  Thread-safe; a few
 * nanoseconds when cached.  The engine's consumer and the channel check it
 * before each spin. */
bool sl__cpus_oversubscribed(void);
/* The running count R of a /proc/loadavg-format file ("L1 L5 L15 R/T
 * PID"), or -1 when it cannot be read or parsed. */
long sl__runnable_threads(const char *loadavg);
/* Tests: the file sl__cpus_oversubscribed reads (NULL: /proc/loadavg), its
 * cached answer forgotten.  Not for use while other threads probe. */
void sl__cpus_probe_path(const char *loadavg);
/* The most threads a stage may start: SLUICE_MAX_THREADS when set to
 * 1..SL__THREADS_HARD_MAX, else SL__THREADS_HARD_MAX.  Thread-safe (reads
 * the environment). */
long sl__thread_limit(void);
/* What the machine runs well: 4 x the usable CPUs, at least 8.  More is
 * accepted (one notice per process on stderr; a line in sl_stats_format). */
long sl__thread_advised(void);
/* SL_OK when 1 <= threads <= sl__thread_limit() (printing the notice the
 * first time a count is above sl__thread_advised()); else SL_EINVAL with a
 * message naming `stage`, the count, the limit and where it comes from. */
int sl__threads_check(const char *stage, long threads);
/* A `threads` value meaning "auto" inside the library (an int field; the
 * public uint32_t fields use SL_THREADS_AUTO, reader.h): the engine starts
 * sl__threads_auto_max() workers and its tuner (sync/tune.c) chooses how
 * many of them run. */
#define SL__THREADS_AUTO (-1)
/* The workers an "auto" stage starts: the usable CPUs (sl__cpu_count, the
 * affinity mask and the cgroup quota), at most SL__THREADS_AUTO_CAP and
 * sl__thread_limit().  Thread-safe. */
#define SL__THREADS_AUTO_CAP 16
long sl__threads_auto_max(void);
/* `threads` with SL__THREADS_AUTO replaced by sl__threads_auto_max(). */
long sl__threads_resolve(long threads);
/* A public uint32_t `threads` option as the engine's int: 0 is 1,
 * SL_THREADS_AUTO is SL__THREADS_AUTO, more than 2^20 is 2^20 (refused by
 * sl__threads_check, which names the limit). */
static inline int sl__threads_opt(uint32_t threads) {
  if (threads == SL_THREADS_AUTO) return SL__THREADS_AUTO;
  if (threads == 0) return 1;
  return threads > (1u << 20) ? (int)(1u << 20) : (int)threads;
}
/* How many checks accepted more threads than advised (process-wide). */
long sl__threads_oversubscribed(void);
/* pthread_create + a thread name (at most 15 characters, e.g.
 * "sl-prefetch").  SL_OK, or SL_ENOMEM with a message naming `stage` and
 * the reason; *tid is then unset and nothing runs. */
int sl__thread_start(pthread_t *tid, const char *stage, const char *name,
                     void *(*fn)(void *), void *arg);
/* Test hook: after `n` more successful sl__thread_start calls, every call
 * fails with EAGAIN (n < 0 disables).  Returns the previous setting.
 * Process-wide. */
long sl__thread_fail_after(long n);

/* --- buffer pools (buffer_pool.c) ------------------------------------------
 * Buffers that go back to a pool when their last reference is released and
 * come out again for the next request of about the same size.  Every
 * function is thread-safe; a NULL pool means plain sl_buffer_new. */
typedef struct sl__buffer_pool sl__buffer_pool;

/* A new pool keeping at most `max_idle` idle buffers and `max_idle_bytes`
 * of idle capacity.  NULL with SL_ENOMEM on failure. */
sl__buffer_pool *sl__buffer_pool_new(size_t max_idle, size_t max_idle_bytes);
/* A buffer of `size` bytes, 64-byte aligned, contents unspecified (a reused
 * one holds old bytes), one reference: an idle one whose capacity is at
 * least `size` and at most a third more, else a new one.  NULL with
 * SL_ENOMEM. */
sl_buffer *sl__buffer_pool_get(sl__buffer_pool *p, size_t size);
/* The owner lets go: idle buffers are freed, buffers still out are freed
 * when released.  NULL-safe. */
void sl__buffer_pool_release(sl__buffer_pool *p);
/* Idle buffers now (tests), and their capacity in bytes (what the pool
 * holds for its owner: the memory budget's charge).  0 for NULL. */
size_t sl__buffer_pool_idle(sl__buffer_pool *p);
size_t sl__buffer_pool_idle_bytes(sl__buffer_pool *p);
/* Makes dst a copy of src in buffers of its own (its data, and its
 * offsets when ragged): a small field kept from a sample whose large
 * buffer is going away, so that it does not keep that buffer alive.
 * SL_OK, or SL_ENOMEM with dst untouched. */
int sl__tensor_copy_own(sl_tensor *dst, const sl_tensor *src);
/* The owner watches its idle capacity (the memory budget's charge): fn(ud,
 * from, to) runs under the pool's lock each time the idle bytes change -
 * at once from 0 to what is idle now, then at each buffer returned or
 * taken, and from what is idle to 0 at sl__buffer_pool_release, after
 * which it is never called again - on whichever thread made the change.
 * For a buffer returned (to > from) it answers whether the pool may keep
 * it: false, and the buffer is freed instead (the idle bytes stay
 * `from`); its answer to a decrease is ignored.  One watcher (a second
 * replaces the first, which is called from what is idle to 0); fn NULL:
 * none.  fn must not call into the pool. */
typedef bool (*sl__buffer_pool_watch_fn)(void *ud, size_t from, size_t to);
void sl__buffer_pool_watch(sl__buffer_pool *p, sl__buffer_pool_watch_fn fn,
                           void *ud);
/* sl_tensor_alloc with the buffer from `pool` (may be NULL). */
int sl__tensor_alloc_pooled(sl__buffer_pool *pool, sl_tensor *t,
                            sl_dtype dtype, int rank, const int64_t *shape);

/* What buffer_pool.c uses of buffer.c (one way: buffer.c knows no pools). */
size_t sl__buffer_capacity(const sl_buffer *b);
/* A fresh reference to idle buffer b, now `size` bytes. */
void sl__buffer_reuse(sl_buffer *b, size_t size);
/* b's last release calls fn(ud, b) first: true keeps b (idle in a pool),
 * false frees it as usual. */
typedef bool (*sl__buffer_recycle_fn)(void *ud, sl_buffer *b);
void sl__buffer_set_recycle(sl_buffer *b, sl__buffer_recycle_fn fn, void *ud);
/* Frees b (its free callback for a wrapped one) whatever its references. */
void sl__buffer_free(sl_buffer *b);

/* --- options structs (opts.c) -------------------------------------------- */
/* Copies a caller's extensible options struct (first member: size_t size)
 * into `dst`, which holds this library's defaults and is `dst_size` bytes:
 * min(size, dst_size) bytes are copied, the rest keep their defaults.
 * SL_EINVAL when size is 0 or smaller than a size_t; SL_EUNSUPPORTED when
 * the caller's struct is larger and its extra bytes are not all zero.
 * `what` names the struct in messages.  dst->size is set to dst_size. */
int sl__opts_copy(const char *what, void *dst, size_t dst_size,
                  const void *src);

/* --- paths (path.c) --------------------------------------------------------- */
/* The last path component of `path` (a pointer into it). */
const char *sl__basename(const char *path);
/* Whether `path` is an http://, https:// or s3:// URL (read by the io
 * layer's URL sources, transport/http.h) rather than a file name. */
bool sl__is_url(const char *path);

/* --- misc ----------------------------------------------------------------- */
#define SL_UNUSED(x) ((void)(x))
#define SL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SL_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Asks the CPU to start loading the cache lines of [p, p + n) for reading;
 * a hint only (nothing on compilers without the builtin). */
static inline void sl__prefetch(const void *p, size_t n) {
#if defined(__GNUC__) || defined(__clang__)
  for (size_t k = 0; k < n; k += 64)
    __builtin_prefetch((const char *)p + k);
#else
  (void)p;
  (void)n;
#endif
}

#ifdef SL_DEBUG
#define SL_DEBUGLOG(...)                                                       \
  do {                                                                         \
    fprintf(stderr, "sluice %s:%d: ", __FILE__, __LINE__);                     \
    fprintf(stderr, __VA_ARGS__);                                              \
    fputc('\n', stderr);                                                       \
  } while (0)
#else
#define SL_DEBUGLOG(...) ((void)0)
#endif

#endif /* SLUICE_INTERNAL_H */
