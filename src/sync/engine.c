/*
 * engine.c - the parallel-stage engine (engine.h): N workers over one
 * upstream, one consumer.
 *
 * Protocol:
 *
 *   pull      Upstream is single-consumer, so the workers take turns: under
 *             `mu`, a worker waits until nobody is pulling and the window has
 *             room, sets `pulling`, reserves up to its batch size of sequence
 *             numbers (base = pull_seq) and drops the lock; it then pulls
 *             that many items, retakes the lock, advances pull_seq by what it
 *             got and clears `pulling`.  Upstream EOF or an error becomes
 *             the "terminal" at the next sequence number (the error's code
 *             and message copied) and sets `pull_done`: nobody pulls again
 *             this pass.
 *   batch     A worker's batch is about BATCH_WORK_NS of work, from its
 *             running estimate of an item's cost (pull + process): 1 at
 *             first (so the first result comes quickly), up to batch_max =
 *             min(BATCH_MAX, window / (threads + 1)), which leaves room in
 *             the window for one batch per worker plus the one being
 *             consumed.  A cheap callback thus costs one lock round trip and
 *             at most one wake-up per batch (items are handed over in bulk),
 *             a slow one is handed over item by item.
 *   process   Outside the lock, each item goes through ops.process.  An
 *             error becomes an error result (its message copied) and also
 *             sets `pull_done`; the rest of that batch is released
 *             unprocessed.
 *   deposit   Results are kept in the worker's local batch and deposited
 *             together under `mu` at the end of the batch.
 *   window    Sequence numbers [next_out, pull_seq) are "in flight": pulled
 *             and not yet consumed; pull_seq - next_out <= window always
 *             (workers wait while the window is full: backpressure).
 *             ordered:   result seq lives in win[seq % window]; the terminal
 *                        too (it takes a slot).  The consumer takes
 *                        win[next_out] once filled, skipping dropped items.
 *             unordered: results are pushed into a FIFO ring (the same
 *                        array) as they are deposited; a dropped item is
 *                        consumed at once (next_out++); next_out counts
 *                        consumed sequences.  An upstream EOF or error (at
 *                        term_seq) is delivered once every sequence before
 *                        it has been consumed.  A processing error is
 *                        delivered when it is reached, in completion order:
 *                        results deposited before it come out first; those
 *                        in flight or deposited after it are never delivered
 *                        and are released by the next stop.
 *   consumer  Takes up to cache_max (CACHE unless set lower) consecutive
 *             ready results per lock round trip into a private cache, and
 *             returns them one by one; an error or EOF is returned at its
 *             place.  The cache lets the workers run up to cache_max - 1
 *             items further ahead than the window.
 *   skip      An item processed to SL__ENGINE_SKIP is a result like a
 *             sample (a window slot, a ring entry) holding its note (the
 *             message copied); the consumer hands it to `skipped` when it
 *             reaches it in the cache and goes on, or, when the handler
 *             fails, turns it into the error that ends the pass.  So the
 *             handler sees the skips in delivery order, on one thread.
 *   signals   Decided under `mu`, sent after unlocking it (so the woken
 *             thread does not run into the mutex its waker still holds).
 *             The consumer sleeps on out_cv only when nothing is ready; a
 *             depositing worker signals it only when it sleeps and what it
 *             needs is there, once per sleep (`consumer_sleeping` is
 *             cleared by the waker).  Workers sleep on work_cv when the
 *             window is full or another worker is pulling; the consumer
 *             wakes one idle worker after a fill that left room (at most
 *             once per fill, never per item), a worker leaving the pull turn
 *             hands it to one idle worker; `woken` counts signals not yet
 *             taken, so no idle worker is signalled twice.  Ending a pass
 *             and stopping broadcast.  When both sides are busy nobody
 *             sleeps and nothing is signalled.  Before sleeping, a consumer
 *             with a spare CPU spins briefly on `published`: waking a
 *             sleeping thread costs tens of microseconds, a busy worker
 *             lands its next batch in a few; a spin lasts at most SPIN_NS
 *             (15 us, under a wake-up: 4000 pauses were 116 us on an
 *             EPYC guest), so it never costs more than the sleep it may
 *             save.  The spin adapts: one that ends without a result
 *             (the workers are the slower side, a Lua map on one thread)
 *             makes the consumer sleep at once for the next 1, 2, 4 ...
 *             SPIN_BACKOFF_MAX waits; one that meets a result clears that.
 *             So a consumer that is always waiting probes with a spin once
 *             in SPIN_BACKOFF_MAX sleeps.  No spin while the machine has
 *             more runnable threads than CPUs
 *             (sl__cpus_oversubscribed): it would take a CPU from a thread
 *             with work, the trainer's included.
 *   gather    A consumer that keeps finding nothing ready (its workers are
 *             the slower side: a Lua map feeding a batch) is woken per
 *             several results, not per deposit (sl__engine_set_gather;
 *             ordered engines without max_bytes): it sleeps wanting `want`
 *             results in order from next_out (or the end of the pass), and
 *             a depositing worker signals it only when they are there.
 *             `want` doubles after each sleep they ended, up to GATHER_MAX
 *             and half the window (so the workers can always make them
 *             without the consumer), and halves after a sleep that ran
 *             GATHER_NS (a timed wait) without them.  Whatever the
 *             consumer needs to take first wakes it at once: a full window
 *             (a worker about to wait for room), a worker about to wait
 *             for the memory budget (`blocked`), the end of the pass.
 *             Output and order are unchanged; only wake-ups are saved
 *             (PERFORMANCE.md, "Waking the consumer in bulk").
 *   many      With a process_many callback an item's results are one
 *             R_MANY result (an array of samples) in the item's one slot:
 *             the window, the ring and the cache count items.  The consumer
 *             hands its samples out one by one (`pos`; the result leaves
 *             the cache after its last) or the rest at once
 *             (sl__engine_next_many).
 *   depth     Flow control (prefetch): at most `depth` (<= window) sequence
 *             numbers in flight, and with max_bytes set no pull turn while
 *             the results deposited and not yet taken hold max_bytes or more
 *             (`bytes`, their sl_sample_nbytes), and a run of pulls ends
 *             once it holds the bytes left (so what is held stays under
 *             max_bytes plus one item per worker).  The consumer may raise the
 *             depth at any time (a worker is woken).  Each fill notes what
 *             it found when it began (`seen`): nothing ready, or the window
 *             without room (the workers wait for the consumer), or neither.
 *   auto      threads = SL__THREADS_AUTO: sl__threads_auto_max() workers are
 *             started, `active` of them run (chosen by the tuner, tune.c,
 *             from the consumer's side in fill_cache, at most once per
 *             period); a worker whose index is `active` or more parks on
 *             park_cv before its worker_init (so a worker that never runs
 *             never builds its state) and at each take_turn, passing any
 *             wake-up it took on to an idle worker.  Results are placed by
 *             sequence number whatever runs them, so the output and its
 *             order never depend on `active`.  Raising broadcasts park_cv;
 *             lowering lets the worker finish its batch and park at its next
 *             turn.  The running count is claimed in the tuner's ledger at
 *             start and given back at stop.
 *   finish    The finish hook runs on the consumer's thread on each sample
 *             of a result before the result is handed out or peeked at.
 *   stop      Set `stop` under mu, broadcast both conditions (that much is
 *             sl__engine_signal_stop, safe from any thread), join every
 *             thread.  A worker checks `stop` between items and between
 *             pulls: one in the middle of a callback finishes that call,
 *             releases what it holds and exits.  Then every result not
 *             delivered is released and the counters rewound.
 *
 * Liveness: the consumer sleeps only while nothing it may take is ready and
 * the terminal is not due.  Then either a worker holds an unfinished batch
 * with that sequence (it will deposit and signal), or next_out == pull_seq
 * and the window is empty, so a worker that is not busy can pull: the fill
 * or pull turn that made the room signalled it.  A worker whose
 * worker_init fails records that error as the terminal, so a pass always
 * ends.
 *
 * Shared fields and what protects them:
 *   mu protects: win, ring_head, ring_len, pull_seq, next_out, term,
 *     term_seq, pulling, pull_done, idle, woken, consumer_sleeping, want,
 *     blocked, depth, bytes, active.
 *   tune, claimed: consumer-only; tune_busy_ns: atomic, added by workers.
 *   ops.pull: the worker holding the pull turn (`pulling`, handed over
 *     under mu); nobody while stopped.
 *   stop: atomic, written under mu; read by workers without it between
 *     items, and under it before every wait, so no wake-up is lost.
 *   published: atomic counter bumped under mu when results land, read
 *     unlocked by the spinning consumer.
 *   worker wctx, ready, ns_per_item, in[], out[]: that worker's thread while
 *     it runs, the consumer otherwise (pthread_create / join order them).
 *   cache, cache_pos, cache_len, spin_skip, spin_backoff, spins, sleeps,
 *     late, gather_next, running, thread, seen: consumer-only.
 *   ops, ud, stage, ordered, window, batch_max, nthreads, spin, max_bytes,
 *     finish, on_thread, gather: immutable.
 */
#include "sync/engine.h"
#include "sync/budget.h"
#include "sync/tune.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define BATCH_MAX 64          /* items pulled per turn, at most */
#define BATCH_WORK_NS 50000.0 /* aim: this much work per batch */
#define CACHE 16              /* results the consumer takes per lock trip */
#define SPIN_NS 15000         /* a spin's longest: under a wake-up's cost */
#define SPIN_BACKOFF_MAX 64   /* waits without a spin after missed spins */
#define GATHER_MAX 32         /* gather: results a sleeping consumer waits for */
#define GATHER_NS 500000      /* gather: a sleep's longest while it waits for more */

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

enum { R_EMPTY = 0, R_SAMPLE, R_DROP, R_SKIP, R_ERROR, R_EOF, R_MANY };

/* The end of a pass: EOF or an error. */
#define R_IS_END(kind) ((kind) == R_ERROR || (kind) == R_EOF)

typedef struct result {
  int kind;      /* R_* */
  int code;      /* R_ERROR: the error code */
  bool checked;  /* R_SAMPLE: needs no ops.check */
  bool finished; /* R_SAMPLE, R_MANY: the finish hook ran (or none) */
  size_t nbytes; /* R_SAMPLE: counted in `bytes` (max_bytes set) */
  /* R_SAMPLE, R_MANY: the bytes charged to the memory budget */
  uint64_t charged;
  uint64_t seq;  /* R_SAMPLE, R_SKIP: its sequence number */
  sl_sample *s;  /* R_SAMPLE: owned */
  char *msg;     /* R_ERROR, R_SKIP: owned heap copy of the message (the
                    note), may be NULL */
  sl_sample **v; /* R_MANY: owned array; v[pos, n) are owned, n >= 1 */
  size_t n, pos;
} result;

typedef struct worker {
  sl__engine *e;
  int index;
  pthread_t thread;
  bool running;       /* consumer-only: started, not yet joined */
  bool ready;         /* worker_init succeeded (or there is none) */
  void *wctx;         /* what worker_init stored */
  double ns_per_item; /* running estimate of an item's cost, 0: none */
  size_t budget;      /* max_bytes: bytes this pull run may still take */
  /* the memory budget: reserved for the next item to pull, and the charge
   * of each item in hand */
  uint64_t spare, rsv[BATCH_MAX];
  sl_sample *in[BATCH_MAX];
  result out[BATCH_MAX];
} worker;

struct sl__engine {
  /* immutable */
  const sl__engine_ops *ops;
  void *ud;
  const char *stage, *thread_name;
  sl__engine_skip_fn skipped;     /* set before the first start */
  sl__engine_many_fn many;        /* set before the first start, or NULL */
  sl__engine_finish_fn finish;    /* set before the first start, or NULL */
  sl__engine_thread_fn on_thread; /* set before the first start, or NULL */
  size_t max_bytes;               /* 0: no bound on the bytes deposited */
  int cache_max;                  /* 1..CACHE, set before the first start */
  bool ordered;
  bool spin; /* a spare CPU for the consumer to spin on */
  bool autotune; /* threads = SL__THREADS_AUTO */
  bool gather;   /* sl__engine_set_gather: wake the consumer in bulk */
  int nthreads;
  size_t window, batch_max;

  /* The memory budget's account (budget.h), set once, or NULL; the largest
   * result seen, what a worker reserves before it pulls; whether one was
   * made (until then only one item is in hand). */
  sl__budget_acct *_Atomic acct;
  atomic_uint_least64_t est;
  atomic_bool sized;

  pthread_mutex_t mu;
  /* Held by the worker pulling, around its pulls, and by a save
   * (sl__engine_hold_pulls) so that upstream is still while it is read. */
  pthread_mutex_t pull_mu;
  uint64_t last_seq;      /* consumer: the item of the result delivered last */
  pthread_cond_t work_cv; /* workers: room in the window, pull turn free */
  pthread_cond_t out_cv;  /* consumer: a result is ready */
  pthread_cond_t park_cv; /* auto: workers not running (index >= active) */
  int active;             /* auto: workers that run (else nthreads) */
  atomic_uint_least64_t tune_busy_ns; /* auto: busy, timing on or off */
  result *win;            /* `window` slots */
  size_t ring_head, ring_len;
  uint64_t pull_seq, next_out;
  result term; /* unordered: the upstream EOF / error, at term_seq */
  uint64_t term_seq;
  bool pulling, pull_done;
  size_t depth, bytes;    /* flow control (above) */
  int idle;               /* workers waiting on work_cv */
  int woken;              /* of those, signalled and not yet running */
  bool consumer_sleeping; /* the consumer waits on out_cv */
  size_t want;            /* gather: ready results that wake it (>= 1) */
  int blocked;            /* workers waiting for the memory budget */
  atomic_uint published;
  atomic_bool stop;
  sl__stage_counters stats; /* busy: running batches; wait_up: for the pull
                               turn; wait_down: for room in the window */

  /* consumer-only */
  result end; /* the EOF / error delivered, returned again until a stop */
  result cache[CACHE];
  int cache_pos, cache_len;
  int seen;              /* SL__ENGINE_SEEN_*: what the last fill found */
  unsigned spin_skip;    /* waits left to sleep through without a spin */
  uint64_t spins;        /* spins begun (sl__engine_spins) */
  uint64_t sleeps, late; /* sleeps, gathering ones timed out (_sleeps) */
  unsigned spin_backoff; /* 0 after a spin that met a result, else the
                            last skip, doubling per miss */
  size_t gather_next;    /* gather: the `want` of the next sleep */
  worker *w;             /* nthreads */
  sl__tune tune;         /* auto: the tuner */
  int claimed;           /* auto: running workers claimed in the ledger */
};

static void autotune_claim(sl__engine *e);

/* --- results -------------------------------------------------------------- */

static void result_clear(result *r) {
  if (r->kind == R_SAMPLE) sl_sample_release(r->s);
  if (r->kind == R_MANY) {
    for (size_t i = r->pos; i < r->n; i++)
      sl_sample_release(r->v[i]);
    sl__free(r->v);
  }
  if (r->kind == R_ERROR || r->kind == R_SKIP) sl__free(r->msg);
  memset(r, 0, sizeof *r);
}

/* An error result carrying this thread's detail message. */
static void result_error(result *r, int code) {
  memset(r, 0, sizeof *r);
  r->kind = R_ERROR;
  r->code = code;
  r->msg = sl__error_dup();
}

/* Room for more sequence numbers in the window.  Caller holds mu. */
static size_t room(const sl__engine *e) {
  size_t used = (size_t)(e->pull_seq - e->next_out);
  if (used >= e->depth || (e->max_bytes && e->bytes >= e->max_bytes)) return 0;
  return e->depth - used;
}

/* Whether the consumer has something to take.  Caller holds mu. */
static bool consumer_ready(const sl__engine *e) {
  if (e->ordered) return e->win[e->next_out % e->window].kind != R_EMPTY;
  return e->ring_len > 0 ||
         (e->term.kind != R_EMPTY && e->next_out == e->term_seq);
}

/* Signals decided under mu and sent after unlocking it. */
typedef struct wakes {
  bool consumer, worker, all_workers;
} wakes;

static void send_wakes(sl__engine *e, const wakes *wk) {
  if (wk->consumer) pthread_cond_signal(&e->out_cv);
  if (wk->all_workers)
    pthread_cond_broadcast(&e->work_cv);
  else if (wk->worker)
    pthread_cond_signal(&e->work_cv);
}

/* Whether the sleeping consumer should be woken: its next result is there
 * and, gathering (want > 1), so are the want - 1 after it, or the end of the
 * pass, or the workers cannot add more without it (the window is full, a
 * worker waits for the memory budget).  Caller holds mu. */
static bool consumer_wanted(const sl__engine *e) {
  if (!consumer_ready(e)) return false;
  if (e->want <= 1 || !e->ordered || e->blocked > 0 || room(e) == 0)
    return true;
  for (size_t k = 0; k < e->want; k++) {
    const result *r = &e->win[(e->next_out + k) % e->window];
    if (r->kind == R_EMPTY) return false;
    if (R_IS_END(r->kind)) return true;
  }
  return true;
}

/* Wakes the consumer when it sleeps and what it waits for is there (any
 * result: `any`); one signal per sleep.  Caller holds mu. */
static void wake_consumer_if(sl__engine *e, wakes *wk, bool any) {
  if (e->consumer_sleeping && (any ? consumer_ready(e) : consumer_wanted(e))) {
    e->consumer_sleeping = false;
    wk->consumer = true;
  }
}

/* Wakes the consumer when it sleeps and its result is there; one signal per
 * sleep.  Caller holds mu. */
static void wake_consumer(sl__engine *e, wakes *wk) {
  atomic_fetch_add_explicit(&e->published, 1, memory_order_release);
  wake_consumer_if(e, wk, false);
}

/* Wakes one idle worker when the window has room and the pull turn is free;
 * one signal per idle worker.  Caller holds mu. */
static void wake_worker(sl__engine *e, wakes *wk) {
  if (e->idle > e->woken && !e->pulling && !e->pull_done && room(e) > 0) {
    e->woken++;
    wk->worker = true;
  }
}

/* Ends the pulling of this pass: every idle worker leaves.  Caller holds
 * mu. */
static void set_pull_done(sl__engine *e, wakes *wk) {
  if (e->pull_done) return;
  e->pull_done = true;
  if (e->autotune) pthread_cond_broadcast(&e->park_cv); /* they leave */
  if (e->idle > 0) {
    e->woken = e->idle;
    wk->all_workers = true;
  }
}

/* Records upstream's end (rc = SL_EOF or an error, msg owned) at sequence
 * pull_seq.  Caller holds mu and the window has room for it. */
static void record_terminal(sl__engine *e, int rc, char *msg, wakes *wk) {
  result *r = e->ordered ? &e->win[e->pull_seq % e->window] : &e->term;
  assert(r->kind == R_EMPTY);
  r->kind = rc == SL_EOF ? R_EOF : R_ERROR;
  r->code = rc;
  r->msg = msg;
  if (e->ordered)
    e->pull_seq++;
  else
    e->term_seq = e->pull_seq;
  set_pull_done(e, wk);
  wake_consumer(e, wk);
}

/* --- the memory budget (budget.h) --------------------------------------------
 * With an account set (sl__engine_set_budget), a worker reserves room for
 * one item (the largest result so far, `est`) before its pull run, outside
 * pull_mu (a save may hold that), waiting while the budget is full and the
 * stage holds something; each further item of the run only tries, and the
 * run ends without room.  Once pulled, the item's charge becomes its bytes
 * (what upstream handed over is claimed from upstream's carry); once
 * processed, its result's (`charged`).  The consumer hands a result's
 * bytes out as the account's carry (the stage above claims them, or the
 * next call drops them).  A stop releases everything the account holds.
 * Until the first result is made its size is not known (a map may turn 8
 * bytes into a megabyte): only one item is in hand then. */

/* The result's bytes a process callback gave (sl__engine_result_bytes):
 * this worker's, for the item it is processing; UINT64_MAX: none. */
static _Thread_local uint64_t tl_result_bytes = UINT64_MAX;

void sl__engine_result_bytes(uint64_t n) { tl_result_bytes = n; }

static sl__budget_acct *acct_of(const sl__engine *e) {
  return atomic_load_explicit(&e->acct, memory_order_acquire);
}

static void raise_est(sl__engine *e, uint64_t n) {
  uint64_t v = atomic_load_explicit(&e->est, memory_order_relaxed);
  while (n > v && !atomic_compare_exchange_weak_explicit(&e->est, &v, n,
                                                         memory_order_relaxed,
                                                         memory_order_relaxed))
    ;
}

/* A worker is about to wait for the memory budget (`on`), or is done
 * waiting: while one waits, a gathering consumer is woken by any result,
 * since only its taking may free the room.  Takes mu. */
static void budget_blocked(sl__engine *e, bool on) {
  wakes wk = {false, false, false};
  pthread_mutex_lock(&e->mu);
  e->blocked += on ? 1 : -1;
  if (on) wake_consumer_if(e, &wk, true);
  pthread_mutex_unlock(&e->mu);
  send_wakes(e, &wk);
}

/* Room for the next item: waiting (first of a run) or only trying.
 * Returns SL_OK, 1 (no room: end the run), or an error. */
static int budget_room(sl__engine *e, worker *w, sl__budget_acct *a,
                       bool wait) {
  uint64_t n = atomic_load_explicit(&e->est, memory_order_relaxed);
  bool sized = atomic_load_explicit(&e->sized, memory_order_acquire);
  if (sized && n <= sl__budget_cap(sl__budget_of(a)) && sl__budget_try(a, n)) {
    w->spare = n;
    return SL_OK;
  }
  if (!wait) return 1;
  budget_blocked(e, true);
  int rc = sized ? SL_OK : sl__budget_wait_empty(a, &e->stop);
  if (rc == SL_OK) {
    n = atomic_load_explicit(&e->est, memory_order_relaxed);
    rc = sl__budget_reserve(a, n, &e->stop);
  }
  budget_blocked(e, false);
  SL_FORWARD_IF_ERROR(rc);
  w->spare = n;
  return SL_OK;
}

/* Item s was pulled: its charge (*rsv) becomes its bytes or what was
 * reserved for it, whichever is more. */
static int budget_took(sl__engine *e, worker *w, sl__budget_acct *a,
                       const sl_sample *s, uint64_t *rsv) {
  uint64_t h = sl_sample_nbytes(s);
  SL_FORWARD_IF_ERROR(sl__budget_fits(a, h));
  /* Its charge: its bytes, or the room reserved for its result if more. */
  uint64_t keep = h > w->spare ? h : w->spare;
  uint64_t claimed = sl__budget_claim(a, h);
  sl__budget_adjust(a, w->spare + claimed, keep);
  w->spare = 0;
  *rsv = keep;
  return SL_OK;
}

/* Item j of the batch was processed into w->out[j]: its charge becomes the
 * result's bytes. */
static void budget_done(sl__engine *e, worker *w, size_t j) {
  sl__budget_acct *a = acct_of(e);
  if (!a) return;
  result *r = &w->out[j];
  uint64_t n = 0, given = tl_result_bytes;
  tl_result_bytes = UINT64_MAX;
  if (r->kind == R_SAMPLE)
    n = given != UINT64_MAX ? given : sl_sample_nbytes(r->s);
  for (size_t i = 0; r->kind == R_MANY && i < r->n; i++)
    n += sl_sample_nbytes(r->v[i]);
  if (sl__budget_fits(a, n) < 0) { /* one result larger than the budget */
    result_clear(r);
    result_error(r, SL_ENOMEM);
    n = 0;
  }
  sl__budget_adjust(a, w->rsv[j], n);
  w->rsv[j] = 0;
  r->charged = n;
  raise_est(e, n);
  atomic_store_explicit(&e->sized, true, memory_order_release);
}

/* Items j.. of a batch that will not be processed: their charges go. */
static void budget_drop(sl__engine *e, worker *w, size_t j, size_t got) {
  sl__budget_acct *a = acct_of(e);
  for (size_t k = j; k < got; k++) {
    if (a) sl__budget_release(a, w->rsv[k]);
    w->rsv[k] = 0;
  }
}

/* The consumer hands out a result's bytes. */
static void budget_out(sl__engine *e, uint64_t charged) {
  sl__budget_acct *a = acct_of(e);
  if (a && charged) sl__budget_to_carry(a, charged);
}

void sl__engine_set_budget(sl__engine *e, sl__budget_acct *a) {
  atomic_store_explicit(&e->acct, a, memory_order_release);
}

sl__budget_acct *sl__engine_budget(const sl__engine *e) {
  return e ? acct_of(e) : NULL;
}

/* --- the worker thread ---------------------------------------------------- */

/* The message of an error a callback returned without setting one. */
static void name_error(sl__engine *e, uint64_t seq, int rc) {
  sl__error_keep(rc, "%s: item %llu: %s", e->stage, (unsigned long long)seq,
                 sl_strerror(rc));
}

/* Runs ops.process_many on item `seq` (handed over). */
static void run_many(sl__engine *e, worker *w, uint64_t seq, sl_sample *in,
                     result *r) {
  sl_sample **v = NULL;
  size_t n = 0;
  sl_clear_error();
  int rc = e->many(e->ud, w->wctx, seq, in, &v, &n);
  if (rc < 0) {
    name_error(e, seq, rc);
    result_error(r, rc);
  } else if (rc == SL__ENGINE_SKIP && e->skipped) {
    r->kind = R_SKIP;
    r->seq = seq;
    r->msg = sl__error_dup();
  } else if (rc == SL__ENGINE_OUT || rc == SL__ENGINE_UNCHECKED) {
    if (n > 0) {
      r->kind = R_MANY;
      r->seq = seq;
      r->v = v;
      r->n = n;
      return; /* v is the result's */
    }
    r->kind = R_DROP;
  } else if (rc == SL__ENGINE_DROP || rc == SL__ENGINE_SKIP) {
    r->kind = R_DROP;
  } else {
    for (size_t i = 0; i < n; i++)
      sl_sample_release(v[i]);
    sl_set_error(SL_EINVAL,
                 "%s: item %llu: the callback returned an unknown "
                 "value",
                 e->stage, (unsigned long long)seq);
    result_error(r, SL_EINVAL);
  }
  sl__free(v);
}

/* Runs ops.process on item `seq` (handed over) and stores the outcome. */
static void run_one(sl__engine *e, worker *w, uint64_t seq, sl_sample *in,
                    result *r) {
  memset(r, 0, sizeof *r);
  if (e->many) {
    run_many(e, w, seq, in, r);
    return;
  }
  sl_sample *o = NULL;
  sl_clear_error();
  int rc = e->ops->process(e->ud, w->wctx, seq, in, &o);
  if (rc < 0) {
    name_error(e, seq, rc);
    result_error(r, rc);
    return;
  }
  if (rc == SL__ENGINE_DROP || (rc == SL__ENGINE_SKIP && !e->skipped)) {
    r->kind = R_DROP;
    return;
  }
  if (rc == SL__ENGINE_SKIP) {
    r->kind = R_SKIP;
    r->seq = seq;
    r->msg = sl__error_dup();
    return;
  }
  if ((rc != SL__ENGINE_OUT && rc != SL__ENGINE_UNCHECKED) || !o) {
    sl_sample_release(o);
    sl_set_error(SL_EINVAL, "%s: item %llu: %s", e->stage,
                 (unsigned long long)seq,
                 o ? "the callback returned an unknown value"
                   : "the callback returned no sample");
    result_error(r, SL_EINVAL);
    return;
  }
  r->kind = R_SAMPLE;
  r->s = o;
  r->seq = seq;
  r->checked = rc == SL__ENGINE_OUT || !e->ops->check;
  if (e->max_bytes) r->nbytes = sl_sample_nbytes(o);
}

/* Deposits results w->out[0, n) of the batch starting at `base`. */
static void deposit(sl__engine *e, worker *w, uint64_t base, size_t n) {
  if (n == 0) return;
  wakes wk = {false, false, false};
  pthread_mutex_lock(&e->mu);
  for (size_t k = 0; k < n; k++) {
    result *r = &w->out[k];
    if (r->kind == R_ERROR) set_pull_done(e, &wk);
    e->bytes += r->nbytes;
    if (e->ordered) {
      result *slot = &e->win[(base + k) % e->window];
      assert(slot->kind == R_EMPTY);
      *slot = *r;
    } else if (r->kind == R_DROP) {
      e->next_out++; /* consumed at once */
    } else {
      assert(e->ring_len < e->window);
      e->win[(e->ring_head + e->ring_len++) % e->window] = *r;
    }
    memset(r, 0, sizeof *r);
  }
  wake_consumer(e, &wk);
  if (!e->ordered) wake_worker(e, &wk); /* drops made room */
  pthread_mutex_unlock(&e->mu);
  send_wakes(e, &wk);
}

/* Parks a worker that is not to run (auto: index >= active) until a raise
 * or a stop, first passing on a wake-up it may have taken to an idle worker.
 * Caller holds mu. */
static void park(sl__engine *e) {
  wakes wk = {false, false, false};
  wake_worker(e, &wk);
  if (wk.worker) pthread_cond_signal(&e->work_cv);
  pthread_cond_wait(&e->park_cv, &e->mu);
}

/* Auto: waits until worker w may run.  False when it should exit (stop, or
 * nothing left to pull this pass). */
static bool wait_active(sl__engine *e, const worker *w) {
  pthread_mutex_lock(&e->mu);
  for (;;) {
    bool gone =
        atomic_load_explicit(&e->stop, memory_order_relaxed) || e->pull_done;
    if (gone || w->index < e->active) {
      pthread_mutex_unlock(&e->mu);
      return !gone;
    }
    pthread_cond_wait(&e->park_cv, &e->mu);
  }
}

/* Waits for the pull turn.  Returns false when the worker should exit, else
 * holds the turn and the reserved range [*base, *base + *n). */
static bool take_turn(sl__engine *e, worker *w, size_t want, uint64_t *base,
                      size_t *n) {
  pthread_mutex_lock(&e->mu);
  for (;;) {
    if (atomic_load_explicit(&e->stop, memory_order_relaxed) || e->pull_done) {
      pthread_mutex_unlock(&e->mu);
      return false;
    }
    if (w->index >= e->active) {
      park(e);
      continue;
    }
    if (!e->pulling && room(e) > 0) break;
    if (room(e) == 0) { /* a gathering consumer must take what is there */
      wakes wk = {false, false, false};
      wake_consumer_if(e, &wk, true);
      if (wk.consumer) pthread_cond_signal(&e->out_cv);
    }
    atomic_uint_least64_t *why =
        room(e) == 0 ? &e->stats.wait_down_ns : &e->stats.wait_up_ns;
    uint64_t t0 = sl__stat_start();
    e->idle++;
    pthread_cond_wait(&e->work_cv, &e->mu);
    e->idle--;
    sl__stat_since(why, t0);
    if (e->woken > 0) e->woken--;
  }
  e->pulling = true;
  *base = e->pull_seq;
  *n = SL_MIN(want, room(e));
  w->budget = e->max_bytes - e->bytes; /* room: bytes < max_bytes */
  pthread_mutex_unlock(&e->mu);
  return true;
}

/* Pulls up to n items into w->in, then gives the turn back.  Returns how
 * many were pulled. */
static size_t pull_batch(sl__engine *e, worker *w, uint64_t base, size_t n) {
  size_t got = 0;
  int rc = SL_OK;
  char *msg = NULL;
  sl__budget_acct *a = acct_of(e);
  if (a) {
    rc = budget_room(e, w, a, true);
    if (rc < 0 && atomic_load_explicit(&e->stop, memory_order_relaxed))
      rc = SL_OK, n = 0; /* stopped: the worker leaves */
    else if (rc < 0)
      msg = sl__error_dup(), n = 0;
  }
  pthread_mutex_lock(&e->pull_mu);
  while (got < n) {
    if (atomic_load_explicit(&e->stop, memory_order_relaxed)) break;
    if (a && got > 0 && budget_room(e, w, a, false) != SL_OK) break;
    sl_sample *s = NULL;
    rc = e->ops->pull(e->ud, &s);
    if (rc != SL_OK) {
      if (rc != SL_EOF) msg = sl__error_dup();
      break;
    }
    if (a && (rc = budget_took(e, w, a, s, &w->rsv[got])) < 0) {
      sl_sample_release(s);
      msg = sl__error_dup();
      break;
    }
    w->in[got++] = s;
    /* The run ends once it holds the bytes left (one item may pass). */
    if (e->max_bytes) {
      size_t b = sl_sample_nbytes(s);
      if (b >= w->budget) break;
      w->budget -= b;
    }
  }
  pthread_mutex_unlock(&e->pull_mu);
  if (a && w->spare) sl__budget_release(a, w->spare);
  w->spare = 0;
  wakes wk = {false, false, false};
  pthread_mutex_lock(&e->mu);
  e->pull_seq = base + got;
  e->pulling = false;
  if (rc != SL_OK)
    record_terminal(e, rc, msg, &wk);
  else
    wake_worker(e, &wk); /* the next worker's turn */
  pthread_mutex_unlock(&e->mu);
  send_wakes(e, &wk);
  return got;
}

/* Runs the batch and deposits its results.  Returns false when stopped. */
static bool process_batch(sl__engine *e, worker *w, uint64_t base, size_t got) {
  for (size_t j = 0; j < got; j++) {
    if (atomic_load_explicit(&e->stop, memory_order_relaxed)) {
      for (size_t k = j; k < got; k++)
        sl_sample_release(w->in[k]);
      for (size_t k = 0; k < j; k++)
        result_clear(&w->out[k]);
      budget_drop(e, w, j, got);
      return false;
    }
    sl_sample *s = w->in[j];
    w->in[j] = NULL;
    run_one(e, w, base + j, s, &w->out[j]);
    budget_done(e, w, j);
    if (w->out[j].kind == R_ERROR) {
      /* The pass ends here: the rest of the batch would never be seen. */
      for (size_t k = j + 1; k < got; k++) {
        sl_sample_release(w->in[k]);
        w->in[k] = NULL;
      }
      budget_drop(e, w, j + 1, got);
      deposit(e, w, base, j + 1);
      return true;
    }
  }
  deposit(e, w, base, got);
  return true;
}

/* A worker that cannot run records its error (this thread's detail) where
 * the next pulled item would have gone, so the consumer gets it in order. */
static void fail_pass(sl__engine *e, worker *w, int rc) {
  char *msg = sl__error_dup();
  uint64_t base;
  size_t n;
  if (!take_turn(e, w, 1, &base, &n)) {
    sl__free(msg);
    return;
  }
  wakes wk = {false, false, false};
  pthread_mutex_lock(&e->mu);
  e->pulling = false;
  record_terminal(e, rc, msg, &wk);
  pthread_mutex_unlock(&e->mu);
  send_wakes(e, &wk);
}

/* Items to pull at the next turn: about BATCH_WORK_NS of work (one at first,
 * while the cost is unknown), at most batch_max. */
static size_t batch_size(const sl__engine *e, const worker *w) {
  if (w->ns_per_item <= 0) return 1;
  double n = BATCH_WORK_NS / w->ns_per_item;
  if (n <= 1) return 1;
  return n >= (double)e->batch_max ? e->batch_max : (size_t)n;
}

/* The time this worker's callbacks reported waiting in the batch running
 * (sl__engine_note_wait): wait_down, not busy. */
static _Thread_local uint64_t tl_waited_ns;

void sl__engine_note_wait(sl__engine *e, uint64_t t0) {
  if (!t0) return;
  uint64_t ns = sl__now_ns() - t0;
  tl_waited_ns += ns;
  sl__stat_add(&e->stats.wait_down_ns, ns);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  sl__engine *e = w->e;
  if (e->autotune && !wait_active(e, w)) return NULL;
  int rc = e->on_thread ? e->on_thread(e->ud, w->index) : SL_OK;
  if (rc >= 0 && !w->ready) {
    rc = e->ops->worker_init ? e->ops->worker_init(e->ud, w->index, &w->wctx)
                             : SL_OK;
    w->ready = rc >= 0;
  }
  if (rc < 0) {
    fail_pass(e, w, rc);
    return NULL;
  }
  for (;;) {
    uint64_t base;
    size_t n;
    if (!take_turn(e, w, batch_size(e, w), &base, &n)) break;
    uint64_t t0 = sl__now_ns();
    size_t got = pull_batch(e, w, base, n);
    uint64_t t1 = e->autotune ? sl__now_ns() : sl__stat_start();
    tl_waited_ns = 0;
    bool more = process_batch(e, w, base, got);
    if (t1) {
      uint64_t busy = sl__now_ns() - t1 - tl_waited_ns;
      if (sl__stats_timing()) sl__stat_add(&e->stats.busy_ns, busy);
      if (e->autotune) sl__stat_add(&e->tune_busy_ns, busy);
    }
    if (!more) break;
    if (got > 0) {
      double per = (double)(sl__now_ns() - t0) / (double)got;
      w->ns_per_item =
          w->ns_per_item > 0 ? 0.75 * w->ns_per_item + 0.25 * per : per;
    }
  }
  return NULL;
}

/* --- consumer side -------------------------------------------------------- */

void sl__engine_signal_stop(sl__engine *e) {
  pthread_mutex_lock(&e->mu);
  atomic_store_explicit(&e->stop, true, memory_order_relaxed);
  pthread_cond_broadcast(&e->work_cv);
  pthread_cond_broadcast(&e->out_cv);
  pthread_cond_broadcast(&e->park_cv);
  pthread_mutex_unlock(&e->mu);
  sl__budget_acct *a = acct_of(e); /* a worker waiting for room */
  if (a) sl__budget_wake(sl__budget_of(a));
}

/* Releases every pending result and rewinds the counters.  No worker may
 * run. */
static void drop_pending(sl__engine *e) {
  for (size_t i = 0; i < e->window; i++)
    result_clear(&e->win[i]);
  result_clear(&e->term);
  while (e->cache_pos < e->cache_len)
    result_clear(&e->cache[e->cache_pos++]);
  result_clear(&e->end);
  e->cache_pos = e->cache_len = 0;
  e->ring_head = e->ring_len = 0;
  e->pull_seq = e->next_out = e->term_seq = 0;
  e->pulling = e->pull_done = false;
  e->bytes = 0;
  e->idle = e->woken = 0;
  e->consumer_sleeping = false;
  e->want = 1;
  sl__budget_acct *a = acct_of(e);
  if (a) sl__budget_release_all(a);
}

/* Joins every started worker (after a signal_stop). */
static void join_workers(sl__engine *e) {
  for (int i = 0; i < e->nthreads; i++) {
    if (!e->w[i].running) continue;
    pthread_join(e->w[i].thread, NULL);
    e->w[i].running = false;
  }
}

void sl__engine_stop(sl__engine *e) {
  sl__engine_signal_stop(e);
  join_workers(e);
  drop_pending(e);
  sl__tune_release(e->claimed); /* an idle stage holds no CPU */
  e->claimed = 0;
}

void sl__engine_start_at(sl__engine *e, uint64_t seq) {
  e->pull_seq = e->next_out = e->term_seq = seq;
}

void sl__engine_hold_pulls(sl__engine *e) {
  pthread_mutex_lock(&e->pull_mu);
}

void sl__engine_release_pulls(sl__engine *e) {
  pthread_mutex_unlock(&e->pull_mu);
}

uint64_t sl__engine_last_seq(const sl__engine *e) {
  return e->last_seq;
}

int sl__engine_start(sl__engine *e) {
  SL_RETURN_ERROR_IF(!e->ops->process && !e->many, SL_EINVAL,
                     "%s: no process callback", e->stage);
  atomic_store_explicit(&e->stop, false, memory_order_relaxed);
  if (e->autotune) autotune_claim(e);
  for (int i = 0; i < e->nthreads; i++) {
    worker *w = &e->w[i];
    int rc =
        sl__thread_start(&w->thread, e->stage, e->thread_name, worker_main, w);
    if (rc < 0) {
      char *msg = sl__error_dup();
      sl__engine_stop(e);
      rc = sl_set_error(rc, "%s", msg ? msg : "cannot start a worker thread");
      sl__free(msg);
      return rc;
    }
    w->running = true;
  }
  return SL_OK;
}

/* Auto: the running workers this pass starts with, what the tuner chose
 * last as far as the ledger allows (at least one).  No worker runs. */
static void autotune_claim(sl__engine *e) {
  sl__tune_release(e->claimed);
  e->claimed = sl__tune_claim(e->tune.active);
  e->active = e->claimed;
  sl__tune_restart(&e->tune, e->claimed); /* the pause is nobody's wait */
  atomic_store_explicit(&e->stats.threads_active, e->active,
                        memory_order_relaxed);
}

/* Auto: one fill's figures for the tuner (`waited` ns for results, `n`
 * taken), and its decision when a period is over. */
static void autotune_tick(sl__engine *e, uint64_t waited, int n) {
  e->tune.wait_ns += waited;
  e->tune.items += (uint64_t)n;
  int was = e->tune.active;
  int now = sl__tune_step(
      &e->tune, sl__now_ns(),
      atomic_load_explicit(&e->tune_busy_ns, memory_order_relaxed));
  if (now == was) return;
  e->claimed += now - was; /* the tuner settled the ledger */
  pthread_mutex_lock(&e->mu);
  e->active = now;
  if (now > was) pthread_cond_broadcast(&e->park_cv);
  pthread_mutex_unlock(&e->mu);
  atomic_store_explicit(&e->stats.threads_active, now, memory_order_relaxed);
}

/* gather: how many ready results wake the consumer this sleep, from the
 * last sleeps (doubling after one that they ended, halving after one that
 * ran GATHER_NS without them), at most half the window so that the workers
 * can always make them.  1: any result.  Caller holds mu. */
static size_t gather_want(const sl__engine *e) {
  if (!e->gather || !e->ordered || e->max_bytes || e->blocked > 0) return 1;
  size_t most = SL_MIN((size_t)GATHER_MAX, SL_MIN(e->depth, e->window) / 2);
  return SL_MAX(1, SL_MIN(e->gather_next, most));
}

/* The consumer sleeps until woken (wake_consumer) or, gathering, for at most
 * GATHER_NS: its workers are the slower side, so waking it for every
 * deposit costs a wake-up per few results where one per `want` would do.
 * Caller holds mu. */
static void consumer_sleep(sl__engine *e) {
  e->want = gather_want(e);
  e->consumer_sleeping = true;
  e->sleeps++;
  if (e->want > 1) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += GATHER_NS;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    bool late =
        pthread_cond_timedwait(&e->out_cv, &e->mu, &until) == ETIMEDOUT;
    e->gather_next = late ? e->want / 2 : e->want * 2;
    e->late += late;
  } else {
    pthread_cond_wait(&e->out_cv, &e->mu);
    e->gather_next = 2;
  }
  e->consumer_sleeping = false;
  e->want = 1;
}

/* Moves ready results into the cache, waiting while there are none. */
static void fill_cache(sl__engine *e) {
  int n = 0;
  bool spun = false;
  pthread_mutex_lock(&e->mu);
  e->seen = !consumer_ready(e) ? SL__ENGINE_SEEN_EMPTY
            : room(e) == 0     ? SL__ENGINE_SEEN_FULL
                               : SL__ENGINE_SEEN_SOME;
  uint64_t wait0 =
      e->autotune && e->seen == SL__ENGINE_SEEN_EMPTY ? sl__now_ns() : 0;
  for (;;) {
    if (e->ordered) {
      while (n < e->cache_max) {
        result *r = &e->win[e->next_out % e->window];
        if (r->kind == R_EMPTY) break;
        if (r->kind == R_DROP) {
          r->kind = R_EMPTY;
          e->next_out++;
          continue;
        }
        e->bytes -= r->nbytes;
        e->cache[n++] = *r;
        memset(r, 0, sizeof *r);
        if (R_IS_END(e->cache[n - 1].kind)) break; /* stays at next_out */
        e->next_out++;
      }
    } else {
      while (n < e->cache_max && e->ring_len > 0) {
        result *r = &e->win[e->ring_head];
        e->bytes -= r->nbytes;
        e->cache[n++] = *r;
        memset(r, 0, sizeof *r);
        e->ring_head = (e->ring_head + 1) % e->window;
        e->ring_len--;
        e->next_out++;
        if (R_IS_END(e->cache[n - 1].kind)) break;
      }
      if (n == 0 && e->term.kind != R_EMPTY && e->next_out == e->term_seq) {
        e->cache[n++] = e->term;
        memset(&e->term, 0, sizeof e->term);
      }
    }
    if (n > 0) break;
    /* Told to stop (sl__engine_signal_stop from another thread, e.g. the
     * chain of a reader being destroyed): no result may ever come, so the
     * consumer gets an end instead of sleeping. */
    if (atomic_load_explicit(&e->stop, memory_order_relaxed)) {
      sl_set_error(SL_EKILLED, "%s: stopped", e->stage);
      result_error(&e->cache[n++], SL_EKILLED);
      break;
    }
    /* Skipped drops may have made room: idle workers must not wait for a
     * consumer that is about to sleep. */
    wakes wk0 = {false, false, false};
    wake_worker(e, &wk0);
    send_wakes(e, &wk0);
    if (!spun && e->spin && e->spin_skip > 0) {
      spun = true; /* a spin missed lately: sleep at once */
      e->spin_skip--;
    }
    if (!spun && e->spin && sl__cpus_oversubscribed())
      spun = true; /* the CPUs are all taken: a spin would take one */
    if (!spun && e->spin) {
      spun = true;
      e->spins++;
      unsigned p0 = atomic_load_explicit(&e->published, memory_order_acquire);
      pthread_mutex_unlock(&e->mu);
      bool hit = false;
      uint64_t until = sl__now_ns() + SPIN_NS;
      for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(&e->published, memory_order_acquire) != p0) {
          hit = true;
          break;
        }
        if (atomic_load_explicit(&e->stop, memory_order_relaxed)) break;
        if (i % 16 == 0 && sl__now_ns() >= until) break;
        cpu_pause();
      }
      if (hit) {
        e->spin_backoff = 0;
      } else {
        e->spin_backoff = e->spin_backoff ? e->spin_backoff * 2 : 1;
        if (e->spin_backoff > SPIN_BACKOFF_MAX)
          e->spin_backoff = SPIN_BACKOFF_MAX;
        e->spin_skip = e->spin_backoff;
      }
      pthread_mutex_lock(&e->mu);
      continue;
    }
    consumer_sleep(e);
  }
  /* Room was made: wake an idle worker, at most once per fill. */
  wakes wk = {false, false, false};
  wake_worker(e, &wk);
  pthread_mutex_unlock(&e->mu);
  send_wakes(e, &wk);
  e->cache_pos = 0;
  e->cache_len = n;
  if (e->autotune) autotune_tick(e, wait0 ? sl__now_ns() - wait0 : 0, n);
}

/* The result the consumer sees next: the end already delivered, or the
 * cache's next (filled, waiting if need be).  Skipped items on the way go
 * to the skip handler; one it fails becomes the error result. */
static result *next_result(sl__engine *e) {
  for (;;) {
    if (e->end.kind != R_EMPTY) return &e->end;
    if (e->cache_pos == e->cache_len) fill_cache(e);
    result *r = &e->cache[e->cache_pos];
    if (e->finish && !r->finished && r->kind == R_SAMPLE)
      e->finish(e->ud, r->s);
    for (size_t i = r->pos; e->finish && !r->finished && i < r->n; i++)
      e->finish(e->ud, r->v[i]); /* R_MANY: the samples left */
    r->finished = true;
    if (r->kind != R_SKIP) return r;
    uint64_t seq = r->seq;
    sl_clear_error();
    int rc =
        e->skipped(e->ud, seq, r->msg ? r->msg : "(note lost: out of memory)");
    result_clear(r);
    if (rc >= 0) {
      e->cache_pos++;
      continue;
    }
    name_error(e, seq, rc);
    result_error(r, rc);
    return r;
  }
}

int sl__engine_peek(sl__engine *e, const sl_sample **first) {
  const result *r = next_result(e);
  if (r->kind == R_MANY) {
    *first = r->v[r->pos];
    return SL_OK;
  }
  *first = r->kind == R_SAMPLE ? r->s : NULL;
  return r->kind == R_SAMPLE ? SL_OK : r->kind == R_EOF ? SL_EOF : r->code;
}

/* Takes the end of the pass at rp (EOF or an error): kept (moved out of the
 * cache) and returned again until a stop. */
static int take_end(sl__engine *e, result *rp) {
  if (rp != &e->end) {
    e->end = *rp;
    memset(rp, 0, sizeof *rp);
    e->cache_pos++;
  }
  if (e->end.kind == R_EOF) return SL_EOF;
  assert(e->end.kind == R_ERROR);
  return sl_set_error(e->end.code, "%s",
                      e->end.msg ? e->end.msg
                                 : "(error message lost: out of memory)");
}

int sl__engine_next_many(sl__engine *e, sl_sample ***v, size_t *n,
                         uint64_t *seq) {
  *v = NULL;
  *n = 0;
  result *rp = next_result(e);
  if (rp->kind == R_SAMPLE) {
    sl_sample **one = sl__malloc(sizeof *one);
    if (!one) return sl_set_error(SL_ENOMEM, "%s: cannot allocate", e->stage);
    sl_sample *s = NULL;
    *seq = rp->seq;
    int rc = sl__engine_next(e, &s); /* runs the check */
    if (rc < 0) {
      sl__free(one);
      return rc;
    }
    one[0] = s;
    *v = one;
    *n = 1;
    return SL_OK;
  }
  if (rp->kind != R_MANY) return take_end(e, rp);
  if (rp->pos > 0)
    memmove(rp->v, rp->v + rp->pos, (rp->n - rp->pos) * sizeof *rp->v);
  *v = rp->v;
  *n = rp->n - rp->pos;
  *seq = rp->seq;
  e->last_seq = rp->seq;
  budget_out(e, rp->charged);
  memset(rp, 0, sizeof *rp);
  e->cache_pos++;
  return SL_OK;
}

int sl__engine_next(sl__engine *e, sl_sample **out) {
  result *rp = next_result(e);
  if (rp->kind == R_MANY) {
    e->last_seq = rp->seq;
    *out = rp->v[rp->pos++];
    if (rp->pos == rp->n) { /* the item's last sample */
      budget_out(e, rp->charged);
      sl__free(rp->v);
      memset(rp, 0, sizeof *rp);
      e->cache_pos++;
    }
    return SL_OK;
  }
  if (rp->kind != R_SAMPLE) return take_end(e, rp);
  result r = *rp;
  memset(rp, 0, sizeof r);
  e->cache_pos++;
  e->last_seq = r.seq;
  budget_out(e, r.charged);
  if (!r.checked) {
    int rc = e->ops->check(e->ud, r.seq, r.s);
    if (rc < 0) {
      sl_sample_release(r.s);
      return rc;
    }
  }
  *out = r.s;
  return SL_OK;
}

void sl__engine_on_skip(sl__engine *e, sl__engine_skip_fn skipped) {
  e->skipped = skipped;
}

void sl__engine_set_gather(sl__engine *e, bool gather) {
  e->gather = gather;
}

void sl__engine_set_spin(sl__engine *e, bool spin) {
  e->spin = spin && sl__cpu_count() > e->nthreads;
}

void sl__engine_process_many(sl__engine *e, sl__engine_many_fn many) {
  e->many = many;
}

void sl__engine_on_finish(sl__engine *e, sl__engine_finish_fn finish) {
  e->finish = finish;
}

void sl__engine_on_thread(sl__engine *e, sl__engine_thread_fn fn) {
  e->on_thread = fn;
}

void sl__engine_set_batch(sl__engine *e, size_t max) {
  e->batch_max = SL_MAX(1, SL_MIN(max, e->batch_max));
}

void sl__engine_set_max_bytes(sl__engine *e, size_t max_bytes) {
  e->max_bytes = max_bytes;
}

void sl__engine_set_depth(sl__engine *e, size_t depth) {
  wakes wk = {false, false, false};
  pthread_mutex_lock(&e->mu);
  e->depth = SL_MAX(1, SL_MIN(depth, e->window));
  wake_worker(e, &wk);
  pthread_mutex_unlock(&e->mu);
  send_wakes(e, &wk);
}

int sl__engine_seen(const sl__engine *e) {
  return e->seen;
}

void sl__engine_set_cache(sl__engine *e, int cache) {
  e->cache_max = cache >= 1 && cache < CACHE ? cache : CACHE;
}

const atomic_bool *sl__engine_stop_flag(const sl__engine *e) {
  return &e->stop;
}

uint64_t sl__engine_spins(const sl__engine *e) { return e->spins; }

uint64_t sl__engine_sleeps(const sl__engine *e, uint64_t *timeouts) {
  if (timeouts) *timeouts = e->late;
  return e->sleeps;
}

int sl__engine_threads(const sl__engine *e) {
  return e->nthreads;
}

int sl__engine_active(sl__engine *e) {
  pthread_mutex_lock(&e->mu);
  int n = e->active;
  pthread_mutex_unlock(&e->mu);
  return n;
}

sl__stage_counters *sl__engine_counters(sl__engine *e) {
  return &e->stats;
}

/* --- life ----------------------------------------------------------------- */

void sl__engine_destroy(sl__engine *e) {
  if (!e) return;
  if (e->w) {
    sl__engine_stop(e);
    for (int i = 0; i < e->nthreads; i++)
      if (e->w[i].ready && e->ops->worker_fini)
        e->ops->worker_fini(e->ud, i, e->w[i].wctx);
    sl__free(e->w);
  }
  sl__free(e->win);
  pthread_cond_destroy(&e->work_cv);
  pthread_cond_destroy(&e->out_cv);
  pthread_cond_destroy(&e->park_cv);
  pthread_mutex_destroy(&e->mu);
  pthread_mutex_destroy(&e->pull_mu);
  sl__free(e);
}

int sl__engine_create(const sl__engine_ops *ops, void *ud,
                      const sl__engine_opts *opts, sl__engine **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "engine: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!ops || !opts || !opts->stage || !opts->thread_name ||
                         !ops->pull,
                     SL_EINVAL, "engine: NULL %s",
                     !ops || !opts                        ? "options"
                     : !opts->stage || !opts->thread_name ? "name"
                                                          : "callback");
  bool autotune = opts->threads == SL__THREADS_AUTO;
  int nthreads = (int)sl__threads_resolve(opts->threads);
  SL_FORWARD_IF_ERROR(sl__threads_check(opts->stage, nthreads));
  SL_RETURN_ERROR_IF(opts->window > ((size_t)1 << 24), SL_EINVAL,
                     "%s: queue must be at most %zu items (got %zu)",
                     opts->stage, (size_t)1 << 24, opts->window);
  sl__engine *e = sl__calloc(1, sizeof *e);
  SL_RETURN_ERROR_IF(!e, SL_ENOMEM, "%s: cannot allocate", opts->stage);
  pthread_mutex_init(&e->mu, NULL);
  pthread_mutex_init(&e->pull_mu, NULL);
  pthread_cond_init(&e->work_cv, NULL);
  pthread_condattr_t mono; /* the consumer's timed sleep (gather) */
  pthread_condattr_init(&mono);
  pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);
  pthread_cond_init(&e->out_cv, &mono);
  pthread_condattr_destroy(&mono);
  pthread_cond_init(&e->park_cv, NULL);
  atomic_init(&e->tune_busy_ns, 0);
  atomic_init(&e->stop, false);
  atomic_init(&e->published, 0);
  atomic_init(&e->acct, NULL);
  atomic_init(&e->est, 0);
  atomic_init(&e->sized, false);
  e->ops = ops;
  e->ud = ud;
  e->stage = opts->stage;
  e->thread_name = opts->thread_name;
  e->ordered = opts->ordered;
  e->cache_max = CACHE;
  e->nthreads = nthreads;
  e->autotune = autotune;
  /* Auto: one worker runs at first; the tuner raises (tune.c). */
  e->active = autotune ? 1 : nthreads;
  sl__tune_init(&e->tune, nthreads, e->active);
  /* Spinning only pays when the workers leave a CPU free for it. */
  e->spin = sl__cpu_count() > nthreads;
  e->want = e->gather_next = 1;
  /* 128+ in flight: enough to amortise a hand-off over many items
   * (docs/PERFORMANCE.md, the Lua layer). */
  size_t dflt = (size_t)nthreads * 32;
  e->window = opts->window ? opts->window : (dflt > 128 ? dflt : 128);
  e->depth = e->window;
  /* Batches small enough that the window holds one per worker plus one
   * being consumed, so pulling never waits for the consumer to drain it. */
  e->batch_max =
      SL_MAX(1, SL_MIN(BATCH_MAX, e->window / (size_t)(e->nthreads + 1)));
  e->win = sl__calloc(e->window, sizeof *e->win);
  e->w = sl__calloc((size_t)e->nthreads, sizeof *e->w);
  if (!e->win || !e->w) {
    sl__engine_destroy(e);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate %d workers",
                        opts->stage, nthreads);
  }
  for (int i = 0; i < e->nthreads; i++) {
    e->w[i].e = e;
    e->w[i].index = i;
  }
  e->stats.threads = e->nthreads;
  atomic_store_explicit(&e->stats.threads_active, autotune ? e->active : 0,
                        memory_order_relaxed);
  *out = e;
  return SL_OK;
}
