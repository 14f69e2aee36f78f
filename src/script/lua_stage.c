/*
 * lua_stage.c - sl__lua_stage: a Lua `map` or `filter` run by N worker
 * threads, each with its own worker Lua state (lua_host.h).
 *
 * Protocol:
 *
 *   pull      Upstream is single-consumer, so the workers take turns: under
 *             `mu`, a worker waits until nobody is pulling and the window has
 *             room, sets `pulling`, reserves up to its batch size of sequence
 *             numbers (base = pull_seq) and drops the lock; it then pulls
 *             that many samples from upstream, retakes the lock, advances
 *             pull_seq by what it got and clears `pulling`.  Upstream EOF or
 *             an error becomes the "terminal" at the next sequence number
 *             (the error's code and message copied), and sets `pull_done`:
 *             nobody pulls again this pass.
 *   batch     A worker's batch is about BATCH_WORK_NS of work, from its
 *             running estimate of a sample's cost (pull + call): 1 at first
 *             (so the first result comes quickly), up to batch_max =
 *             min(BATCH_MAX, qcap / (threads + 1)), which leaves room in the
 *             window for one batch per worker plus the one being consumed.
 *             A cheap function thus costs one lock round trip and at most
 *             one wake-up per batch, a slow one is handed over sample by
 *             sample.
 *   process   Outside the lock, each sample goes through the worker module:
 *             map:    worker.map(fn, sample, slot)  -> *slot
 *             filter: worker.filter(fn, sample)     -> keep?
 *             under sl__lua_pcall; an error becomes an error result (SL_ELUA,
 *             the message copied) and also sets `pull_done` (the rest of
 *             that batch is released unprocessed).  A map output is checked
 *             against the stage schema as soon as that is known.
 *   deposit   Results are kept in the worker's local batch and deposited
 *             together under `mu` at the end of the batch.
 *   window    Sequence numbers [next_out, pull_seq) are "in flight": pulled
 *             and not yet consumed.  pull_seq - next_out <= qcap always
 *             (workers wait while the window is full: backpressure).
 *             ordered:   result seq lives in win[seq % qcap]; the terminal
 *                        too (it takes a slot).  The consumer takes win
 *                        [next_out] when it is filled, skipping dropped
 *                        filter results.
 *             unordered: results are pushed into a FIFO ring (the same
 *                        array) as they are deposited; a dropped filter
 *                        result is consumed at once (next_out++).  next_out
 *                        counts consumed sequences.  An upstream EOF or
 *                        error (at term_seq) is delivered once every
 *                        sequence before it has been consumed, i.e. after
 *                        every sample pulled before it.  A Lua error (or a
 *                        schema mismatch) is delivered when it is reached,
 *                        in completion order like a sample: results
 *                        deposited before it come out first; results still
 *                        in flight or deposited after it are never delivered
 *                        (the error is sticky) and are released by the next
 *                        reset or destroy.
 *   consumer  Takes up to CACHE consecutive ready results per lock round
 *             trip into a private cache (as prefetch.c), and returns them
 *             one by one; an error or EOF in the cache is returned at its
 *             place, then the reader base keeps it sticky / latched, so the
 *             stage is not called again until reset.  The cache lets the
 *             workers run up to CACHE samples further ahead than `qcap`.
 *   signals   Decided under `mu`, sent after unlocking it (so the woken
 *             thread does not run into the mutex its waker still holds).
 *             The consumer sleeps on out_cv only when nothing is ready; a
 *             depositing worker signals it only when it sleeps and what it
 *             needs (ordered: win[next_out]; unordered: anything) is there,
 *             once per sleep (`consumer_sleeping` is cleared by the waker).
 *             Workers sleep on work_cv when the window is full or another
 *             worker is pulling; the consumer wakes one idle worker after a
 *             fill that left room (at most once per fill of up to CACHE
 *             results, never per sample), a worker leaving the pull turn
 *             hands it to one idle worker; `woken` counts signals not yet
 *             taken, so no idle worker is signalled twice.  Ending a pass
 *             (pull_done) and stopping broadcast.  When both sides are busy
 *             nobody sleeps and nothing is signalled.
 *   stop      (reset, destroy) set `stop` under mu, broadcast both
 *             conditions, join every thread.  A worker checks `stop` between
 *             samples and between pulls: one in the middle of a Lua call
 *             finishes that call (with a deadline, the deadline hook sees
 *             `stop` and ends the call: lua_deadline.c), then releases what
 *             it holds and exits.
 *   reset     stop; release every pending result (window, ring, terminal,
 *             cache); sl_reader_reset(up); restart the workers.
 *   destroy   stop; release everything; close the Lua states; destroy up.
 *   stats     (core/stats.h, while timing is on) a worker adds the time it
 *             runs a batch to busy, and a wait in take_turn to wait_down
 *             when the window was full, else to wait_up (another worker
 *             held the pull turn); pulling itself is upstream's next time.
 *
 * Liveness: the consumer sleeps only while win[next_out] (ordered) or the
 * ring (unordered) is empty and the terminal is not due.  Then either a
 * worker holds an unfinished batch with that sequence (it will deposit and
 * signal), or next_out == pull_seq and the window is empty, so a worker that
 * is not busy can pull: the fill or pull turn that made the room signalled
 * it.  A worker that cannot start (no Lua state) records its error as the
 * terminal, so a pass always ends.
 *
 * Worker states: each worker thread creates its lua_State at its first start
 * (sl__lua_worker_new), requires `sluice.worker` unless the host already put
 * it in the registry under "sluice.worker", rebuilds the function with
 * sl__lua_unship and keeps it and worker.map / worker.filter as registry
 * references.  The state lives across resets (threads are joined and
 * restarted, the state is handed over by the join) and is closed by destroy.
 * A worker whose state cannot be made records that error as the terminal of
 * the pass (at the next sequence number), so the consumer never hangs; the
 * next reset tries again.
 *
 * Map's schema: given, or the first output's (the constructor starts the
 * workers and waits for result 0, which stays in the cache and is yielded
 * first), with the variable dimensions upstream declared for the same
 * fields kept (sl__lua_infer_schema); if result 0 is an error or EOF the
 * upstream schema is used and the error / EOF is delivered normally.
 * Outputs with the stage's field names in another order are rebuilt in its
 * order by the check (sl__lua_check_sample).
 *
 * Parser (SL__LUA_PARSE, lua_host.h): a map over text lines whose function
 * may skip a line (R_DROP, as a filter's) and whose messages name the file
 * and line.  The puller numbers the lines as it pulls them (it holds the
 * pull turn, so numbering is sequential): a new file is a new schema
 * address (the text reader makes one per file, its "sluice.path" naming
 * it).  The line reaches Lua as (pointer, length), the sample kept by the
 * worker until the call returns.  Outputs made before the stage schema was
 * known keep the line's schema and number in their result, so the
 * consumer's late check names the line too.  `check_schema` is published (release)
 * once known; a worker checks its outputs against it (SL_ESHAPE "map
 * (<where>): sample N: field ...") and marks them checked; the few outputs
 * made before it was known are checked by the consumer.
 *
 * Shared fields and what protects them:
 *   mu protects: win, ring_head, ring_len, pull_seq, next_out, term,
 *     term_seq, pulling, pull_done, idle, woken, consumer_sleeping.
 *   up: used only by the worker holding the pull turn (`pulling`, handed
 *     over under mu), and by the consumer while no worker runs.
 *   stop: atomic, written under mu (by the consumer); read by workers
 *     without it between samples, and under it before every wait, so no
 *     wake-up is lost.
 *   check_schema: atomic pointer, published once per stage.
 *   worker L, fn_ref, op_ref, slot, ns_per_sample, in[], out[]: that
 *     worker's thread while it runs, the consumer otherwise (pthread_create
 *     / join order them).
 *   cache, cache_pos, cache_len, running, thread: consumer-only.
 *   fn, env, where, what, kind, ordered, qcap, batch_max, nthreads, schema,
 *     deadline: immutable while workers run.
 */
#include "readers/reader_impl.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define BATCH_MAX 64          /* samples pulled per turn, at most */
#define BATCH_WORK_NS 50000.0 /* aim: this much work per batch */
#define CACHE 16              /* results the consumer takes per lock trip */
#define CONSUMER_SPIN 4000    /* pause iterations (~20-40 us) before a sleep */

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

enum { R_EMPTY = 0, R_SAMPLE, R_DROP, R_ERROR, R_EOF };

typedef struct result {
  int kind;     /* R_* */
  int code;     /* R_ERROR: the error code */
  bool checked; /* R_SAMPLE: checked against the stage schema */
  uint64_t seq; /* R_SAMPLE: its sequence number, for messages */
  sl_sample *s; /* R_SAMPLE: owned */
  /* parser, R_SAMPLE not checked: the input line's schema (retained: its
   * "sluice.path" names the file) and line number, for messages */
  sl_schema *file;
  uint64_t line;
  char *msg;    /* R_ERROR: owned heap copy of the message, may be NULL */
} result;

struct lua_stage;

typedef struct lua_worker {
  struct lua_stage *st;
  pthread_t thread;
  bool running;         /* consumer-only: started, not yet joined */
  lua_State *L;         /* NULL until the first start succeeds */
  int fn_ref, op_ref;   /* registry refs: the function, worker.map/filter */
  sl_sample *slot;      /* map's output slot handed to Lua */
  double ns_per_sample; /* running estimate of a sample's cost, 0: none */
  sl_sample *in[BATCH_MAX];
  uint64_t line[BATCH_MAX]; /* parser: in[k]'s line number in its file */
  result out[BATCH_MAX];
} lua_worker;

typedef struct lua_stage {
  /* immutable while workers run */
  sl__lua_kind kind;
  const char *what; /* "map" / "filter" */
  bool ordered;
  int nthreads;
  bool spin; /* immutable: a spare CPU for the consumer to spin on */
  size_t qcap, batch_max;
  sl__shipped *fn;
  sl__lua_env *env;
  const char *where;
  double deadline;   /* seconds per call, 0 = none (lua_deadline.c) */
  sl_schema *schema; /* the stage schema (retained), NULL until known */
  _Atomic(const sl_schema *) check_schema;
  sl_reader *up;
  /* parser: the file being pulled (its schema's address: the text reader
   * makes one per file) and the last line number given; the puller's. */
  const sl_schema *line_file;
  uint64_t line_no;

  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* workers: room in the window, pull turn free */
  pthread_cond_t out_cv;  /* consumer: a result is ready */
  result *win;            /* qcap slots */
  size_t ring_head, ring_len;
  uint64_t pull_seq, next_out;
  result term; /* unordered: the upstream EOF / error, at term_seq */
  uint64_t term_seq;
  bool pulling, pull_done;
  int idle;               /* workers waiting on work_cv */
  int woken;              /* of those, signalled and not yet running */
  bool consumer_sleeping; /* the consumer waits on out_cv */
  atomic_uint published;  /* bumped (under mu) whenever results land; read
                             unlocked by a consumer spinning before sleep */
  atomic_bool stop;
  sl__stage_counters stats; /* busy: running batches; wait_up: for the pull
                               turn; wait_down: for room in the window */

  /* consumer-only */
  result cache[CACHE];
  int cache_pos, cache_len;
  lua_worker *w; /* nthreads */
} lua_stage;

/* --- results -------------------------------------------------------------- */

static void result_clear(result *r) {
  if (r->kind == R_SAMPLE) sl_sample_release(r->s);
  sl_schema_release(r->file);
  if (r->kind == R_ERROR) sl__free(r->msg);
  memset(r, 0, sizeof *r);
}

/* An error result carrying this thread's detail message. */
static void result_error(result *r, int code) {
  r->kind = R_ERROR;
  r->code = code;
  r->s = NULL;
  r->msg = sl__error_dup();
}

/* Room for more sequence numbers in the window.  Caller holds mu. */
static size_t room(const lua_stage *st) {
  return st->qcap - (size_t)(st->pull_seq - st->next_out);
}

/* Whether the consumer has something to take.  Caller holds mu. */
static bool consumer_ready(const lua_stage *st) {
  if (st->ordered) return st->win[st->next_out % st->qcap].kind != R_EMPTY;
  return st->ring_len > 0 ||
         (st->term.kind != R_EMPTY && st->next_out == st->term_seq);
}

/* Signals decided under mu and sent after unlocking it, so that the woken
 * thread does not wake only to block on the mutex its waker still holds. */
typedef struct wakes {
  bool consumer, worker, all_workers;
} wakes;

static void send_wakes(lua_stage *st, const wakes *wk) {
  if (wk->consumer) pthread_cond_signal(&st->out_cv);
  if (wk->all_workers)
    pthread_cond_broadcast(&st->work_cv);
  else if (wk->worker)
    pthread_cond_signal(&st->work_cv);
}

/* Wakes the consumer when it sleeps and its result is there; one signal per
 * sleep (the flag is cleared by the waker).  Caller holds mu. */
static void wake_consumer(lua_stage *st, wakes *wk) {
  atomic_fetch_add_explicit(&st->published, 1, memory_order_release);
  if (st->consumer_sleeping && consumer_ready(st)) {
    st->consumer_sleeping = false;
    wk->consumer = true;
  }
}

/* Wakes one idle worker when the window has room for `min_room` more
 * sequence numbers and the pull turn is free; one signal per idle worker.
 * Caller holds mu. */
static void wake_worker(lua_stage *st, wakes *wk, size_t min_room) {
  if (st->idle > st->woken && !st->pulling && !st->pull_done &&
      room(st) >= min_room) {
    st->woken++;
    wk->worker = true;
  }
}

/* Ends the pulling of this pass: every idle worker leaves.  Caller holds
 * mu. */
static void set_pull_done(lua_stage *st, wakes *wk) {
  if (st->pull_done) return;
  st->pull_done = true;
  if (st->idle > 0) {
    st->woken = st->idle;
    wk->all_workers = true;
  }
}

/* Records upstream's end (rc = SL_EOF or an error, msg owned) at sequence
 * pull_seq.  Caller holds mu and the window has room for it. */
static void record_terminal(lua_stage *st, int rc, char *msg, wakes *wk) {
  result *r = st->ordered ? &st->win[st->pull_seq % st->qcap] : &st->term;
  assert(r->kind == R_EMPTY);
  r->kind = rc == SL_EOF ? R_EOF : R_ERROR;
  r->code = rc;
  r->msg = msg;
  if (st->ordered)
    st->pull_seq++;
  else
    st->term_seq = st->pull_seq;
  set_pull_done(st, wk);
  wake_consumer(st, wk);
}

/* --- checking map outputs ------------------------------------------------- */

/* Checks output *s (sequence `seq`) against the stage schema `want`: the
 * same field names (another order is accepted: *s is then replaced by a
 * sample in want's order), and every tensor fits its field. */
static int check_output(const lua_stage *st, const sl_schema *want,
                        sl_sample **s, uint64_t seq) {
  const sl__lua_check_words words = {.what = st->what,
                                     .where = st->where,
                                     .item = "sample",
                                     .fields = "output fields",
                                     .whose = "the stage's",
                                     .require_filled = true};
  return sl__lua_check_sample(want, s, seq, &words);
}

/* --- the worker thread ---------------------------------------------------- */

static void finish_output(lua_stage *st, sl_sample *o, uint64_t seq,
                          const sl_schema *file, uint64_t line, result *r);

/* A parser's error: this thread's message ("parser (<where>): <text>")
 * with the file (`file`'s sluice.path) and line inserted after the
 * prefix. */
static int parse_error(const lua_stage *st, const sl_schema *file,
                       uint64_t line, int rc) {
  const char *path = sl_schema_meta(file, "sluice.path");
  char *msg = sl__error_dup();
  const char *text = msg ? msg : sl_strerror(rc);
  size_t np = strlen(st->what) + strlen(st->where) + 5; /* "w (x): " */
  if (msg && strlen(msg) >= np && strncmp(msg, st->what, strlen(st->what)) == 0)
    text = msg + np;
  rc = sl_set_error(rc, "%s (%s): %s:%llu: %s", st->what, st->where,
                    path ? path : "?", (unsigned long long)line, text);
  sl__free(msg);
  return rc;
}

/* The parser on one line (sample s, a reference the worker owns and
 * releases here): worker.parser(fn, line_ptr, line_len, slot, schema). */
static void run_parse(lua_stage *st, lua_worker *w, uint64_t seq,
                      sl_sample *s, uint64_t line, result *r) {
  lua_State *L = w->L;
  int top = lua_gettop(L);
  int fi = sl_sample_index(s, "line");
  const sl_tensor *t = fi >= 0 ? sl_sample_at_const(s, fi) : NULL;
  if (!t || sl_tensor_dtype(t) != SL_BYTES) {
    sl_set_error(SL_EINVAL, "%s (%s): sample %llu has no 'line' field", st->what,
                 st->where, (unsigned long long)seq);
    sl_sample_release(s);
    result_error(r, SL_EINVAL);
    return;
  }
  const sl_schema *want =
      atomic_load_explicit(&st->check_schema, memory_order_acquire);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->op_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->fn_ref);
  sl__lua_push_ptr(L, t->data);
  lua_pushnumber(L, (lua_Number)t->nbytes);
  w->slot = NULL;
  sl__lua_push_ptr(L, &w->slot);
  if (want)
    sl__lua_push_ptr(L, want);
  else
    lua_pushnil(L);
  int rc = sl__lua_pcall(L, 5, 1, st->what, st->where);
  bool keep = rc == SL_OK && lua_toboolean(L, -1);
  lua_settop(L, top);
  if (rc < 0) {
    if (sl_last_error_code() != rc || !sl_last_error()[0])
      sl_set_error(rc, "%s (%s): %s", st->what, st->where, sl_strerror(rc));
    parse_error(st, sl_sample_schema(s), line, rc);
    sl_sample_release(w->slot);
    w->slot = NULL;
    sl_sample_release(s);
    result_error(r, rc);
    return;
  }
  sl_sample *o = w->slot;
  w->slot = NULL;
  if (!keep || !o) {
    sl_sample_release(o);
    sl_sample_release(s);
    r->kind = R_DROP;
    return;
  }
  finish_output(st, o, seq, sl_sample_schema(s), line, r);
  sl_sample_release(s);
}

/* Runs the function on one sample (a reference the worker owned; it is
 * handed over) and stores the outcome in *r. */
static void run_one(lua_stage *st, lua_worker *w, uint64_t seq, sl_sample *s,
                    uint64_t line, result *r) {
  lua_State *L = w->L;
  int top = lua_gettop(L);
  bool map = st->kind == SL__LUA_MAP;
  memset(r, 0, sizeof *r);
  if (st->kind == SL__LUA_PARSE) {
    run_parse(st, w, seq, s, line, r);
    return;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->op_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, w->fn_ref);
  sl__lua_push_ptr(L, s); /* this reference now belongs to Lua */
  int rc;
  if (map) {
    w->slot = NULL;
    sl__lua_push_ptr(L, &w->slot);
    rc = sl__lua_pcall(L, 3, 0, st->what, st->where);
  } else {
    sl_sample_retain(s); /* ours, kept if the filter says so */
    rc = sl__lua_pcall(L, 2, 1, st->what, st->where);
  }
  if (rc < 0) {
    if (map) {
      sl_sample_release(w->slot);
      w->slot = NULL;
    } else {
      sl_sample_release(s);
    }
    if (sl_last_error_code() != rc || !sl_last_error()[0])
      sl_set_error(rc, "%s (%s): %s", st->what, st->where, sl_strerror(rc));
    result_error(r, rc);
    lua_settop(L, top);
    return;
  }
  if (!map) {
    bool keep = lua_toboolean(L, -1);
    lua_settop(L, top);
    if (keep) {
      r->kind = R_SAMPLE;
      r->s = s;
      r->checked = true;
    } else {
      sl_sample_release(s);
      r->kind = R_DROP;
    }
    return;
  }
  lua_settop(L, top);
  sl_sample *o = w->slot;
  w->slot = NULL;
  if (!o) {
    sl_set_error(SL_ELUA,
                 "%s (%s): sample %llu: the function returned no "
                 "sample",
                 st->what, st->where, (unsigned long long)seq);
    result_error(r, SL_ELUA);
    return;
  }
  finish_output(st, o, seq, NULL, 0, r);
}

/* Checks map (or parser) output o, taken from w->slot, against the stage
 * schema when it is known, and stores it in *r.  A parser passes the
 * line's schema `file` and number, which its messages name. */
static void finish_output(lua_stage *st, sl_sample *o, uint64_t seq,
                          const sl_schema *file, uint64_t line, result *r) {
  int rc;
  const sl_schema *want =
      atomic_load_explicit(&st->check_schema, memory_order_acquire);
  if (want) {
    rc = check_output(st, want, &o, seq);
    if (rc < 0) {
      if (file) parse_error(st, file, line, rc);
      sl_sample_release(o);
      result_error(r, rc);
      return;
    }
  } else if (file) {
    r->file = sl_schema_retain((sl_schema *)file);
    r->line = line;
  }
  r->kind = R_SAMPLE;
  r->s = o;
  r->seq = seq;
  r->checked = want != NULL;
}

/* Deposits results w->out[from, to) of the batch starting at `base`. */
static void flush(lua_stage *st, lua_worker *w, uint64_t base, size_t from,
                  size_t to) {
  if (from == to) return;
  wakes wk = {false, false, false};
  pthread_mutex_lock(&st->mu);
  for (size_t k = from; k < to; k++) {
    result *r = &w->out[k];
    if (r->kind == R_ERROR) set_pull_done(st, &wk);
    if (st->ordered) {
      result *slot = &st->win[(base + k) % st->qcap];
      assert(slot->kind == R_EMPTY);
      *slot = *r;
    } else if (r->kind == R_DROP) {
      st->next_out++; /* consumed at once */
    } else {
      assert(st->ring_len < st->qcap);
      st->win[(st->ring_head + st->ring_len++) % st->qcap] = *r;
    }
    memset(r, 0, sizeof *r);
  }
  wake_consumer(st, &wk);
  if (!st->ordered) wake_worker(st, &wk, 1); /* drops made room */
  pthread_mutex_unlock(&st->mu);
  send_wakes(st, &wk);
}

/* Waits for the pull turn.  Returns false when the worker should exit, else
 * holds the turn and the reserved range [*base, *base + *n). */
static bool take_turn(lua_stage *st, size_t want, uint64_t *base, size_t *n) {
  pthread_mutex_lock(&st->mu);
  for (;;) {
    if (atomic_load_explicit(&st->stop, memory_order_relaxed) ||
        st->pull_done) {
      pthread_mutex_unlock(&st->mu);
      return false;
    }
    if (!st->pulling && room(st) > 0) break;
    atomic_uint_least64_t *why =
        room(st) == 0 ? &st->stats.wait_down_ns : &st->stats.wait_up_ns;
    uint64_t t0 = sl__stat_start();
    st->idle++;
    pthread_cond_wait(&st->work_cv, &st->mu);
    st->idle--;
    sl__stat_since(why, t0);
    if (st->woken > 0) st->woken--;
  }
  st->pulling = true;
  *base = st->pull_seq;
  *n = SL_MIN(want, room(st));
  pthread_mutex_unlock(&st->mu);
  return true;
}

/* Pulls up to n samples into w->in, then gives the turn back.  Returns how
 * many were pulled. */
static size_t pull_batch(lua_stage *st, lua_worker *w, uint64_t base,
                         size_t n) {
  size_t got = 0;
  int rc = SL_OK;
  char *msg = NULL;
  while (got < n) {
    if (atomic_load_explicit(&st->stop, memory_order_relaxed)) break;
    sl_sample *s = NULL;
    rc = sl_reader_next(st->up, &s);
    if (rc != SL_OK) {
      if (rc != SL_EOF) msg = sl__error_dup();
      break;
    }
    if (st->kind == SL__LUA_PARSE) {
      /* Every line is a sample and each file has its own schema object. */
      const sl_schema *f = sl_sample_schema(s);
      if (f != st->line_file) {
        st->line_file = f;
        st->line_no = 0;
      }
      w->line[got] = ++st->line_no;
    }
    w->in[got++] = s;
  }
  wakes wk = {false, false, false};
  pthread_mutex_lock(&st->mu);
  st->pull_seq = base + got;
  st->pulling = false;
  if (rc != SL_OK)
    record_terminal(st, rc, msg, &wk);
  else
    wake_worker(st, &wk, 1); /* the next worker's turn */
  pthread_mutex_unlock(&st->mu);
  send_wakes(st, &wk);
  return got;
}

/* Runs the batch and deposits its results.  Returns false when stopped. */
static bool process_batch(lua_stage *st, lua_worker *w, uint64_t base,
                          size_t got) {
  for (size_t j = 0; j < got; j++) {
    if (atomic_load_explicit(&st->stop, memory_order_relaxed)) {
      for (size_t k = j; k < got; k++)
        sl_sample_release(w->in[k]);
      for (size_t k = 0; k < j; k++)
        result_clear(&w->out[k]);
      return false;
    }
    sl_sample *s = w->in[j];
    w->in[j] = NULL;
    run_one(st, w, base + j, s, w->line[j], &w->out[j]);
    if (w->out[j].kind == R_ERROR) {
      /* The pass ends here: the rest of the batch would never be seen. */
      for (size_t k = j + 1; k < got; k++) {
        sl_sample_release(w->in[k]);
        w->in[k] = NULL;
      }
      flush(st, w, base, 0, j + 1);
      return true;
    }
  }
  flush(st, w, base, 0, got);
  return true;
}

/* A worker that cannot run records its error (this thread's detail) where
 * the next pulled sample would have gone, so the consumer gets it in
 * order. */
static void fail_pass(lua_stage *st, int rc) {
  char *msg = sl__error_dup();
  uint64_t base;
  size_t n;
  if (!take_turn(st, 1, &base, &n)) {
    sl__free(msg);
    return;
  }
  wakes wk = {false, false, false};
  pthread_mutex_lock(&st->mu);
  st->pulling = false;
  record_terminal(st, rc, msg, &wk);
  pthread_mutex_unlock(&st->mu);
  send_wakes(st, &wk);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Samples to pull at the next turn: about BATCH_WORK_NS of work (one at
 * first, while the cost is unknown - so the first result comes quickly),
 * at most st->batch_max. */
static size_t batch_size(const lua_stage *st, const lua_worker *w) {
  if (w->ns_per_sample <= 0) return 1;
  double n = BATCH_WORK_NS / w->ns_per_sample;
  if (n <= 1) return 1;
  return n >= (double)st->batch_max ? st->batch_max : (size_t)n;
}

static void *worker_main(void *arg) {
  lua_worker *w = arg;
  lua_stage *st = w->st;
#if defined(__linux__)
  (void)pthread_setname_np(pthread_self(), "sl-lua-map");
#elif defined(__APPLE__)
  (void)pthread_setname_np("sl-lua-map");
#endif
  if (!w->L) {
    int rc = sl__lua_worker_setup(st->env, st->fn, st->what, st->where,
                                  st->what, &w->op_ref, &w->fn_ref, &w->L);
    if (rc == SL_OK && st->deadline > 0 &&
        (rc = sl__lua_deadline_set(w->L, st->deadline, &st->stop, w->fn_ref,
                                   st->what, st->where)) < 0) {
      lua_close(w->L);
      w->L = NULL;
    }
    if (rc < 0) {
      fail_pass(st, rc);
      return NULL;
    }
  }
  for (;;) {
    uint64_t base;
    size_t n;
    if (!take_turn(st, batch_size(st, w), &base, &n)) break;
    double t0 = now_ns();
    size_t got = pull_batch(st, w, base, n);
    uint64_t t1 = sl__stat_start();
    bool more = process_batch(st, w, base, got);
    sl__stat_since(&st->stats.busy_ns, t1);
    if (!more) break;
    if (got > 0) {
      double per = (now_ns() - t0) / (double)got;
      w->ns_per_sample =
          w->ns_per_sample > 0 ? 0.75 * w->ns_per_sample + 0.25 * per : per;
    }
  }
  return NULL;
}

/* --- consumer side -------------------------------------------------------- */

static int thread_error(const lua_stage *st, int err) {
  return sl_set_error(SL_ENOMEM, "%s (%s): cannot start worker threads: %s",
                      st->what, st->where, strerror(err));
}

/* Starts every worker; SL_OK when at least one runs (fewer threads only
 * means less parallelism). */
static int start_workers(lua_stage *st) {
  atomic_store_explicit(&st->stop, false, memory_order_relaxed);
  int started = 0, err = 0;
  for (int i = 0; i < st->nthreads; i++) {
    lua_worker *w = &st->w[i];
    int e = pthread_create(&w->thread, NULL, worker_main, w);
    if (e == 0) {
      w->running = true;
      started++;
    } else {
      err = e;
    }
  }
  return started ? SL_OK : thread_error(st, err);
}

static void stop_workers(lua_stage *st) {
  pthread_mutex_lock(&st->mu);
  atomic_store_explicit(&st->stop, true, memory_order_relaxed);
  pthread_cond_broadcast(&st->work_cv);
  pthread_cond_broadcast(&st->out_cv);
  pthread_mutex_unlock(&st->mu);
  for (int i = 0; i < st->nthreads; i++) {
    if (!st->w[i].running) continue;
    pthread_join(st->w[i].thread, NULL);
    st->w[i].running = false;
  }
}

/* Releases every pending result and rewinds the counters.  No worker may
 * run. */
static void drop_pending(lua_stage *st) {
  for (size_t i = 0; i < st->qcap; i++)
    result_clear(&st->win[i]);
  result_clear(&st->term);
  while (st->cache_pos < st->cache_len)
    result_clear(&st->cache[st->cache_pos++]);
  st->cache_pos = st->cache_len = 0;
  st->ring_head = st->ring_len = 0;
  st->pull_seq = st->next_out = st->term_seq = 0;
  st->pulling = st->pull_done = false;
  st->idle = st->woken = 0;
  st->line_file = NULL;
  st->line_no = 0;
  st->consumer_sleeping = false;
}

/* Moves ready results into the cache, waiting while there are none.
 * Returns the count (> 0). */
static int fill_cache(lua_stage *st) {
  int n = 0;
  bool spun = false;
  pthread_mutex_lock(&st->mu);
  for (;;) {
    if (st->ordered) {
      while (n < CACHE) {
        result *r = &st->win[st->next_out % st->qcap];
        if (r->kind == R_EMPTY) break;
        if (r->kind == R_DROP) {
          r->kind = R_EMPTY;
          st->next_out++;
          continue;
        }
        st->cache[n++] = *r;
        memset(r, 0, sizeof *r);
        if (st->cache[n - 1].kind != R_SAMPLE) break; /* the end */
        st->next_out++;
      }
    } else {
      while (n < CACHE && st->ring_len > 0) {
        result *r = &st->win[st->ring_head];
        st->cache[n++] = *r;
        memset(r, 0, sizeof *r);
        st->ring_head = (st->ring_head + 1) % st->qcap;
        st->ring_len--;
        st->next_out++;
        if (st->cache[n - 1].kind != R_SAMPLE) break;
      }
      if (n == 0 && st->term.kind != R_EMPTY && st->next_out == st->term_seq) {
        st->cache[n++] = st->term;
        memset(&st->term, 0, sizeof st->term);
      }
    }
    if (n > 0) break;
    /* Skipped drops may have made room: idle workers must not wait for a
     * consumer that is about to sleep (signalled under mu: this path is
     * taken once per sleep). */
    wakes wk0 = {false, false, false};
    wake_worker(st, &wk0, 1);
    send_wakes(st, &wk0);
    if (!spun && st->spin) {
      /* Spin briefly before sleeping: a busy worker usually lands its next
       * results within microseconds, while a sleep costs it a wake-up
       * system call and us tens of microseconds.  Then re-check under mu. */
      spun = true;
      unsigned p0 = atomic_load_explicit(&st->published, memory_order_acquire);
      pthread_mutex_unlock(&st->mu);
      for (int i = 0; i < CONSUMER_SPIN; i++) {
        if (atomic_load_explicit(&st->published, memory_order_acquire) != p0 ||
            atomic_load_explicit(&st->stop, memory_order_relaxed))
          break;
        cpu_pause();
      }
      pthread_mutex_lock(&st->mu);
      continue;
    }
    st->consumer_sleeping = true;
    pthread_cond_wait(&st->out_cv, &st->mu);
    st->consumer_sleeping = false;
  }
  /* Room was made: wake an idle worker.  At most once per fill (up to
   * CACHE results), never once per sample. */
  wakes wk = {false, false, false};
  wake_worker(st, &wk, 1);
  pthread_mutex_unlock(&st->mu);
  send_wakes(st, &wk);
  st->cache_pos = 0;
  st->cache_len = n;
  return n;
}

static int stage_next(void *state, sl_sample **out) {
  lua_stage *st = state;
  if (st->cache_pos == st->cache_len) fill_cache(st);
  result r = st->cache[st->cache_pos];
  memset(&st->cache[st->cache_pos], 0, sizeof r);
  st->cache_pos++;
  if (r.kind == R_EOF) return SL_EOF;
  if (r.kind == R_ERROR) {
    int rc = sl_set_error(
        r.code, "%s", r.msg ? r.msg : "(error message lost: out of memory)");
    sl__free(r.msg);
    return rc;
  }
  if (!r.checked) {
    int rc = check_output(st, st->schema, &r.s, r.seq);
    if (rc < 0) {
      if (r.file) rc = parse_error(st, r.file, r.line, rc);
      r.kind = R_SAMPLE;
      result_clear(&r);
      return rc;
    }
  }
  sl_schema_release(r.file);
  *out = r.s;
  return SL_OK;
}

static int stage_reset(void *state) {
  lua_stage *st = state;
  stop_workers(st);
  drop_pending(st);
  SL_FORWARD_IF_ERROR(sl_reader_reset(st->up));
  return start_workers(st);
}

static void stage_destroy(void *state) {
  lua_stage *st = state;
  if (!st) return;
  if (st->w) {
    stop_workers(st);
    for (int i = 0; i < st->nthreads; i++)
      if (st->w[i].L) lua_close(st->w[i].L);
    sl__free(st->w);
  }
  if (st->win) {
    drop_pending(st);
    sl__free(st->win);
  }
  pthread_cond_destroy(&st->work_cv);
  pthread_cond_destroy(&st->out_cv);
  pthread_mutex_destroy(&st->mu);
  sl_reader_destroy(st->up);
  sl_schema_release(st->schema);
  sl__shipped_release(st->fn);
  sl__lua_env_release(st->env);
  sl__free(st);
}

static const sl_reader_vtable map_vt = {"map", stage_next, stage_reset,
                                        stage_destroy};
static const sl_reader_vtable filter_vt = {"filter", stage_next, stage_reset,
                                           stage_destroy};
static const sl_reader_vtable parse_vt = {"parser", stage_next, stage_reset,
                                          stage_destroy};

int sl__lua_stage(sl_reader *up, sl__lua_kind kind, sl__shipped *fn,
                  sl__lua_env *env, const sl__lua_stage_opts *opts,
                  sl_schema *schema, sl_reader **out) {
  const char *what = kind == SL__LUA_FILTER  ? "filter"
                     : kind == SL__LUA_PARSE ? "parser"
                                             : "map";
  if (!out) {
    sl_reader_destroy(up);
    return sl_set_error(SL_EINVAL, "%s: NULL out pointer", what);
  }
  *out = NULL;
  if (!up) return sl_set_error(SL_EINVAL, "%s: NULL upstream reader", what);
  if (!fn || !env || !opts || opts->threads < 1 ||
      !(opts->deadline >= 0 && opts->deadline < 1e9) ||
      (kind != SL__LUA_MAP && kind != SL__LUA_FILTER &&
       kind != SL__LUA_PARSE))
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "%s: %s", what,
                         !fn                 ? "NULL function"
                         : !env              ? "NULL environment"
                         : !opts             ? "NULL options"
                         : opts->threads < 1 ? "threads must be >= 1"
                         : !(opts->deadline >= 0 && opts->deadline < 1e9)
                             ? "deadline must be a number of seconds >= 0 "
                               "(0: none)"
                             : "unknown kind"));
  lua_stage *st = sl__calloc(1, sizeof *st);
  if (!st)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "%s: cannot allocate", what));
  pthread_mutex_init(&st->mu, NULL);
  pthread_cond_init(&st->work_cv, NULL);
  pthread_cond_init(&st->out_cv, NULL);
  atomic_init(&st->stop, false);
  atomic_init(&st->published, 0);
  atomic_init(&st->check_schema, NULL);
  st->up = up;
  st->kind = kind;
  st->what = what;
  st->ordered = opts->ordered != 0;
  st->nthreads = opts->threads;
  /* Spinning only pays when the workers leave a CPU free for it. */
  st->spin = sysconf(_SC_NPROCESSORS_ONLN) > opts->threads;
  /* 128+ in flight: enough to amortise a hand-off over many samples (the
   * measured identity-map overhead: ~0.7 us at 128, ~1.5 us at 64, 2-7 us
   * at 8, on 2 vCPUs). */
  size_t dflt = (size_t)opts->threads * 32;
  st->qcap = opts->queue ? opts->queue : (dflt > 128 ? dflt : 128);
  /* Batches small enough that the window holds one per worker plus one
   * being consumed, so pulling never waits for the consumer to drain it. */
  st->batch_max =
      SL_MAX(1, SL_MIN(BATCH_MAX, st->qcap / (size_t)(st->nthreads + 1)));
  st->fn = sl__shipped_retain(fn);
  st->env = sl__lua_env_retain(env);
  st->where = sl__shipped_where(fn);
  st->deadline = opts->deadline;
  st->win = sl__calloc(st->qcap, sizeof *st->win);
  st->w = sl__calloc((size_t)st->nthreads, sizeof *st->w);
  if (!st->win || !st->w) {
    stage_destroy(st);
    return sl_set_error(SL_ENOMEM, "%s (%s): cannot allocate %d workers", what,
                        sl__shipped_where(fn), opts->threads);
  }
  for (int i = 0; i < st->nthreads; i++)
    st->w[i].st = st;

  /* The schema: given, upstream's (filter), or the first output's (map). */
  if (schema || kind == SL__LUA_FILTER) {
    st->schema =
        sl_schema_retain(schema ? schema : (sl_schema *)sl_reader_schema(up));
    sl_schema_freeze(st->schema);
    atomic_store_explicit(&st->check_schema, st->schema, memory_order_release);
  }
  st->stats.threads = st->nthreads;
  int rc = start_workers(st);
  if (rc < 0) {
    stage_destroy(st);
    return rc;
  }
  if (!st->schema) {
    fill_cache(st);
    const result *first = &st->cache[0];
    if (first->kind == R_SAMPLE) {
      /* A map keeps the variable dimensions upstream declared (a parser's
       * rows are inferred with variable lengths already). */
      rc = sl__lua_infer_schema(
          kind == SL__LUA_MAP ? sl_reader_schema(st->up) : NULL, first->s,
          &st->schema);
      if (rc < 0) {
        sl_wrap_error(rc, "%s (%s): the schema of the first output", what,
                      st->where);
        stage_destroy(st);
        return rc;
      }
    } else {
      st->schema = sl_schema_retain((sl_schema *)sl_reader_schema(st->up));
    }
    atomic_store_explicit(&st->check_schema, st->schema, memory_order_release);
  }
  /* A map yields one sample per sample (it cannot drop one): its length is
   * upstream's; a filter's is not known. */
  if (kind == SL__LUA_FILTER)
    return sl__decorator_make(&filter_vt, st, st->schema, &st->up, &st->stats,
                              out);
  if (kind == SL__LUA_PARSE) /* skipped lines: its length is not known */
    return sl__decorator_make(&parse_vt, st, st->schema, &st->up, &st->stats,
                              out);
  return sl__decorator_make_1to1(&map_vt, st, st->schema, &st->up, &st->stats,
                                 out);
}
