/*
 * stats.h - the counters behind run statistics (sl_reader_stats).
 *
 * The reader base (stages/reader.c) counts every stage's output and, while
 * timing is on, the time its callers spend inside its next.  A stage with
 * threads of its own (prefetch, open_files, the Lua map) also owns an
 * sl__stage_counters in its state, given to sl__stage_new, and
 * adds what only its threads can see: their own work, the time they wait
 * for the turn to pull upstream, and the time they are blocked by a full
 * queue.  Counters are relaxed atomics: a snapshot may be read while the
 * threads run.
 */
#ifndef SLUICE_STATS_H
#define SLUICE_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The longest last-error note a stats row carries (with its NUL). */
#define SL__NOTE_MAX 256

typedef struct sl__stage_counters {
  int threads;                        /* set before the threads start */
  atomic_uint_least64_t busy_ns;      /* the threads' own work */
  atomic_uint_least64_t wait_up_ns;   /* waiting for the pull turn */
  atomic_uint_least64_t wait_down_ns; /* blocked by a full queue/window */
  /* Samples left out because of their error (ignore_errors, decode_image's
   * skip policy), since the stage was made: every pass counts. */
  atomic_uint_least64_t ignored;
  /* A queue's current depth in samples (prefetch: n, or what autotuning
   * chose); 0: the stage has no such queue. */
  atomic_uint_least64_t queue_depth;
  /* threads = "auto" (sync/tune.c): the workers the tuner runs now, out
   * of `threads` started; 0: a fixed count. */
  atomic_int threads_active;
  /* A map fused with the batch above it (stages/rows.h): outputs written
   * straight into the batch's rows. */
  atomic_uint_least64_t fused;
  /* The last ignored error's message, guarded by note_lock (a spin lock:
   * 0 free, 1 held; zero-initialised counters are unlocked), because a
   * stats walk may read it from another thread while it is written. */
  atomic_int note_lock;
  char last_error[SL__NOTE_MAX];
} sl__stage_counters;

/* Process-wide timing switch (stats.c). */
extern atomic_int sl__stats_on;

static inline bool sl__stats_timing(void) {
  return atomic_load_explicit(&sl__stats_on, memory_order_relaxed) != 0;
}

static inline uint64_t sl__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void sl__stat_add(atomic_uint_least64_t *c, uint64_t v) {
  atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* For a counter with one writer at a time (a reader's own counts: its next
 * is never entered concurrently): a plain load and store, no locked
 * instruction, still a data-race-free read for the stats walk. */
static inline void sl__stat_add_1w(atomic_uint_least64_t *c, uint64_t v) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                        memory_order_relaxed);
}

/* A start time when timing is on, else 0 (then sl__stat_since adds
 * nothing): `uint64_t t = sl__stat_start(); ...; sl__stat_since(c, t);` */
static inline uint64_t sl__stat_start(void) {
  return sl__stats_timing() ? sl__now_ns() : 0;
}

static inline void sl__stat_since(atomic_uint_least64_t *c, uint64_t t0) {
  if (t0) sl__stat_add(c, sl__now_ns() - t0);
}

/* Copies `msg` into c->last_error under its lock (truncated). */
void sl__stat_note(sl__stage_counters *c, const char *msg);
/* Copies c->last_error into buf (cap bytes, NUL-terminated) under its lock. */
void sl__stat_note_read(const sl__stage_counters *c, char *buf, size_t cap);

/* One sample whose error was ignored (ignore_errors, or decode_image's
 * skip policy), on the consumer's thread in delivery order: counts it in
 * *count (the pass's) and in c->ignored, keeps `note` as the last error,
 * and returns SL_OK while *count <= cap, else `code` with the message
 * "<stage>: <count> <what> in this pass, more than <option> (<cap>); the
 * last: <note>" (`what`: "samples failed", "images failed to decode").  Defined
 * in stages/stats.c (stages of every layer above readers use it, so that the
 * rule and the words are one). */
int sl__ignore_error(sl__stage_counters *c, uint64_t *count, uint64_t cap,
                     int code, const char *stage, const char *what,
                     const char *option, const char *note);

/* ignore_errors' "no cap" (Lua's `ignore_errors = true`). */
#define SL__IGNORE_ALL UINT64_MAX

#endif
