/*
 * engine.h - the parallel-stage engine: N worker threads that take items
 * from one upstream in turn, process them, and hand the results to one
 * consumer in order (or as they finish).  Every thread a stage runs is a
 * worker of this engine plus a `process` callback: a C or Lua map/filter,
 * decode_image, open_files (process_many, a chunk's records from one item),
 * prefetch (one worker, ordered, process hands the sample on), the
 * double buffer's copy thread (one worker, its thread setup the device's,
 * process copies into a free slot) and wds_open (process_many, a block of
 * one lane's samples per item, window T) and a global shuffle with threads
 * (process_many, a block of the pass's entries fetched by position per
 * item); tests/threads.sh checks that no
 * other code starts one.  engine.c holds the protocol, its invariants and the
 * shutdown rules.
 *
 * Threads: sl__engine_create, _start, _stop, _next, _peek and _destroy are
 * the consumer's (one thread at a time, as a reader's calls are).  The
 * callbacks run on the threads named below.  sl__engine_signal_stop may be
 * called from any thread.
 */
#ifndef SLUICE_SYNC_ENGINE_H
#define SLUICE_SYNC_ENGINE_H

#include "core/internal.h"
#include "core/stats.h"

typedef struct sl__engine sl__engine;

/* What `process` returns besides an error. */
enum {
  SL__ENGINE_OUT = 0,       /* *out holds the result, already checked */
  SL__ENGINE_UNCHECKED = 1, /* *out holds the result; ops.check runs on it
                               on the consumer's thread before delivery */
  SL__ENGINE_DROP = 2,      /* no result for this item (filtered, skipped) */
  SL__ENGINE_SKIP = 3       /* no result; the message this thread set (its
                               note) goes to the skip handler on the
                               consumer's thread at the item's place
                               (sl__engine_on_skip; without one: DROP) */
};

typedef struct sl__engine_ops {
  /* Upstream's next item: SL_OK (*out is the engine's), SL_EOF, or an error
   * with its message set.  Called by one worker at a time (the pull turn),
   * or by nobody while the engine is stopped. */
  int (*pull)(void *ud, sl_sample **out);
  /* Optional.  On worker `worker`'s thread, before its first item; the
   * context it stores lives across passes until sl__engine_destroy.  An
   * error (message set) ends the pass at its next position; the next start
   * tries again. */
  int (*worker_init)(void *ud, int worker, void **wctx);
  /* Optional.  On the destroying thread, once for each worker whose
   * worker_init succeeded, after every thread has been joined. */
  void (*worker_fini)(void *ud, int worker, void *wctx);
  /* Processes item `seq` (0-based in the pass) on a worker thread.  `in` is
   * handed over (release it, or return it in *out).  Returns an SL__ENGINE_*
   * value or an error (message set, `in` released): the pass ends at this
   * item.  May be NULL when sl__engine_process_many sets the callback. */
  int (*process)(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                 sl_sample **out);
  /* Optional.  On the consumer's thread, for results returned UNCHECKED:
   * SL_OK, or an error (message set) delivered in the result's place. */
  int (*check)(void *ud, uint64_t seq, const sl_sample *s);
} sl__engine_ops;

typedef struct sl__engine_opts {
  const char *stage;       /* names the stage in messages, e.g. "map" */
  const char *thread_name; /* at most 15 characters, e.g. "sl-map" */
  int threads;             /* 1..sl__thread_limit(), or SL__THREADS_AUTO:
                              sl__threads_auto_max() started, as many run
                              as the tuner chooses (engine.c, "auto") */
  bool ordered;            /* results in upstream order; else as finished */
  size_t window;           /* items in flight; 0: max(128, 32 x threads) */
} sl__engine_opts;

/* The handler of SL__ENGINE_SKIP items: on the consumer's thread, at the
 * item's place in delivery order (upstream order when ordered), inside
 * sl__engine_next / _peek, with the note (the message process set, or a
 * placeholder when it could not be copied).  Returns SL_OK (the item stays
 * left out) or an error (message set) that ends the pass there, as a
 * process error would.  So a stage counts what it skips, and caps it, in
 * one order whatever the thread count. */
typedef int (*sl__engine_skip_fn)(void *ud, uint64_t seq, const char *note);

/* Makes a stopped engine (no thread runs until sl__engine_start).  `ops` and
 * `ud` are borrowed for the engine's life; `opts->stage` and
 * `opts->thread_name` too.  SL_EINVAL for bad options (threads beyond the
 * limit included), SL_ENOMEM. */
int sl__engine_create(const sl__engine_ops *ops, void *ud,
                      const sl__engine_opts *opts, sl__engine **out);

/* Optional settings of a stopped engine, before its first start (functions
 * rather than fields, so that the positional initialisers of sl__engine_ops
 * and sl__engine_opts stay complete):
 *   on_skip:  the skip handler (above); NULL: SKIP is DROP.
 *   set_cache: results the consumer takes per lock round trip, 1..16 (0 or
 *     more: 16).  Taken results wait in the consumer's cache while the
 *     workers refill the window, so up to window + cache - 1 results can be
 *     held; 1 makes `window` the exact bound (a stage whose results are
 *     large, e.g. decoded images). */
void sl__engine_on_skip(sl__engine *e, sl__engine_skip_fn skipped);
void sl__engine_set_cache(sl__engine *e, int cache);
/* Whether the consumer, finding nothing ready, may spin briefly before it
 * sleeps (default: when the CPUs outnumber the workers, and never while the
 * machine has more runnable threads than CPUs; a spin that meets
 * no result makes the next 1, 2, 4 ... 64 waits sleep at once, engine.c).
 * Off for a stage whose items take far longer than a wake-up (open_files:
 * a chunk each), where the spin seldom meets a result and only burns
 * CPU. */
void sl__engine_set_spin(sl__engine *e, bool spin);
/* Whether a consumer that keeps waiting for its workers is woken per several
 * results rather than per deposit (engine.c, "gather"; default off): for a
 * stage whose consumer takes many items in a row (a map under a batch).
 * Only wake-ups change, never the results or their order; an ordered
 * engine without max_bytes only.  Before the first start. */
void sl__engine_set_gather(sl__engine *e, bool gather);

/* Item `seq` giving any number of results (open_files: one chunk in, its
 * records out), on a worker thread.  On SL__ENGINE_OUT (or UNCHECKED:
 * ops.check is not run on these) *out is a heap array (sl__malloc) of *n
 * owned samples, handed over with the array; n == 0 is a DROP.  DROP, SKIP
 * and errors as for ops.process (nothing left in *out). */
typedef int (*sl__engine_many_fn)(void *ud, void *wctx, uint64_t seq,
                                  sl_sample *in, sl_sample ***out, size_t *n);

/* Optional setting of a stopped engine, before its first start: `many`
 * processes every item instead of ops.process (which may then be NULL).
 * The window still counts items, so a stage bounds the samples it holds by
 * choosing the window from its largest item.  The consumer takes the
 * samples one by one (sl__engine_next, _peek) or an item's at once
 * (sl__engine_next_many). */
void sl__engine_process_many(sl__engine *e, sl__engine_many_fn many);

/* Optional setting of a stopped engine, before its first start: `finish`
 * runs on the consumer's thread, once on each sample, before the sample is
 * handed out or peeked at (prefetch: sl__reader_finish of its upstream, the
 * deferred copies of stage.h). */
typedef void (*sl__engine_finish_fn)(void *ud, sl_sample *s);
void sl__engine_on_finish(sl__engine *e, sl__engine_finish_fn finish);

/* Optional settings of a stopped engine, before its first start:
 *   on_thread: runs on each worker thread as it starts, every pass, before
 *     worker_init: what a thread must set up for itself (the double
 *     buffer's device, device.h thread_init).  An error (message set) ends
 *     the pass as a worker_init error does.
 *   set_batch: at most `max` items pulled per turn (1: each result is
 *     deposited before the next item is processed; for a process that may
 *     wait for the consumer, as the double buffer waits for a free slot). */
typedef int (*sl__engine_thread_fn)(void *ud, int worker);
void sl__engine_on_thread(sl__engine *e, sl__engine_thread_fn fn);
void sl__engine_set_batch(sl__engine *e, size_t max);

/* Flow control (prefetch; engine.c, "depth"):
 *   set_depth: at most `depth` items in flight (clamped to 1..window; the
 *     default is the window).  The consumer's, any time.
 *   set_max_bytes: before the first start; > 0: no worker takes a pull
 *     turn while the results made and not yet taken hold that many bytes
 *     or more, and a turn's run of pulls ends once it holds the bytes left
 *     (with one worker, what is held stays under max_bytes plus the item
 *     in hand).
 *   seen: what the consumer's last wait for results (sl__engine_next /
 *     _peek taking a new round of results; one per result with
 *     set_cache(1)) found when it began. */
enum { SL__ENGINE_SEEN_SOME, SL__ENGINE_SEEN_EMPTY, SL__ENGINE_SEEN_FULL };
void sl__engine_set_depth(sl__engine *e, size_t depth);
void sl__engine_set_max_bytes(sl__engine *e, size_t max_bytes);
int sl__engine_seen(const sl__engine *e);

/* The memory budget (sync/budget.h; engine.c, "the memory budget"): the
 * stage's account, set once (any time; the consumer's), or NULL.  Workers
 * then reserve room before they pull (waiting while the budget is full and
 * the stage holds something), the items in hand and the results not yet
 * taken are charged to it, and a result handed out becomes its carry.  An
 * item larger than the whole budget ends the pass with SL_ENOMEM naming the
 * stage and the bytes. */
struct sl__budget_acct;
void sl__engine_set_budget(sl__engine *e, struct sl__budget_acct *a);
/* That account, or NULL while none is set: any thread (a worker charging
 * its own memory to it, sl__budget_resident). */
struct sl__budget_acct *sl__engine_budget(const sl__engine *e);
/* For a process callback, on its worker's thread: the bytes its result
 * holds for the budget when sl_sample_nbytes would misstate them (a fused
 * map's token refers to its whole batch: the row's bytes). */
void sl__engine_result_bytes(uint64_t n);

/* Starts a pass: every worker thread.  When one cannot be started, those
 * started are stopped again and the error (SL_ENOMEM, naming the stage) is
 * returned: a stage never runs with fewer threads than it was asked for.
 * SL_EINVAL when there is neither ops.process nor a process_many. */
int sl__engine_start(sl__engine *e);

/* Asks the workers to stop (they finish the item in hand) without waiting
 * for them.  Any thread, any time; idempotent until the next start.  A
 * consumer waiting in sl__engine_next / _peek with nothing ready then gets
 * SL_EKILLED ("<stage>: stopped") instead of waiting for results that will
 * not come (the stop of a chain: stages/reader_impl.h). */
void sl__engine_signal_stop(sl__engine *e);

/* Stops the pass: signals, joins every worker, releases every result not
 * yet delivered and rewinds the sequence numbers.  Upstream may then be
 * reset, and the engine started again. */
void sl__engine_stop(sl__engine *e);

/* Restoring a position (stages/state.h):
 *   start_at: the next pass of a stopped engine numbers its items from
 *     `seq` instead of 0 (call between sl__engine_stop and _start; the
 *     stop after that pass rewinds to 0 again).
 *   hold_pulls / release_pulls: the consumer holds the pull turn, so that
 *     no worker is inside ops.pull while a save reads the upstream chain
 *     (a worker waits; the results already made are untouched).  Hold it
 *     across one save at most.
 *   last_seq: the sequence number of the item whose result sl__engine_next
 *     or _next_many delivered last (a filter's log, the delivered set of an
 *     unordered stage). */
void sl__engine_start_at(sl__engine *e, uint64_t seq);
void sl__engine_hold_pulls(sl__engine *e);
void sl__engine_release_pulls(sl__engine *e);
uint64_t sl__engine_last_seq(const sl__engine *e);

/* The next result: SL_OK (*out is the caller's), SL_EOF at the end of the
 * pass, or the error that ended it (its message set); the end is returned
 * again by every later call until sl__engine_stop. */
int sl__engine_next(sl__engine *e, sl_sample **out);

/* The rest of the next item's results at once (an engine with
 * process_many; with process, an array of one): SL_OK with *v (heap: the
 * caller sl__free()s it and owns the samples), *n >= 1 and *seq the item's
 * sequence number, or the same EOF / error as sl__engine_next.  After
 * sl__engine_next took some of an item's samples, it returns the others. */
int sl__engine_next_many(sl__engine *e, sl_sample ***v, size_t *n,
                         uint64_t *seq);

/* Waits for the next result without taking it: SL_OK with *first borrowed
 * (valid until the next sl__engine_next / _stop), else the EOF or error
 * code the next sl__engine_next will return (no message set). */
int sl__engine_peek(sl__engine *e, const sl_sample **first);

/* For a process callback that waits for its consumer's side (the double
 * buffer waiting for a free slot), on the worker's thread: the time since
 * t0 (sl__stat_start) counts as the stage's wait_down, not as busy. */
void sl__engine_note_wait(sl__engine *e, uint64_t t0);

/* The stop flag (true while stopping), for code that must end a long call
 * early (the Lua deadline hook). */
const atomic_bool *sl__engine_stop_flag(const sl__engine *e);

/* The spins the consumer began since creation (tests: none while the
 * machine is oversubscribed, sl__cpus_oversubscribed).  The consumer's. */
uint64_t sl__engine_spins(const sl__engine *e);
/* The times the consumer slept waiting for results since creation, and of
 * those (timeouts, may be NULL) the gathering sleeps that ran out their
 * time (engine.c, "gather").  The consumer's. */
uint64_t sl__engine_sleeps(const sl__engine *e, uint64_t *timeouts);

/* The workers started (threads, SL__THREADS_AUTO resolved), and of those
 * the ones running now (auto: the tuner's choice; else all).  threads:
 * any thread; active: the consumer's or any thread (takes the lock). */
int sl__engine_threads(const sl__engine *e);
int sl__engine_active(sl__engine *e);

/* The engine's run counters (busy, wait_up, wait_down; threads). */
sl__stage_counters *sl__engine_counters(sl__engine *e);

/* Stops, runs worker_fini for each worker, frees.  NULL-safe. */
void sl__engine_destroy(sl__engine *e);

#endif /* SLUICE_SYNC_ENGINE_H */
