/*
 * tune.c - the thread tuner of "auto" stages (tune.h): a greedy hill-climb
 * on measured throughput, guided by the engine's busy and wait times.
 *
 * Every period (SL__TUNE_PERIOD_NS of the consumer's time, checked when the
 * consumer takes results, so an idle pipeline costs nothing) the engine
 * hands over what it measured since the last one:
 *
 *   wait   the share of the period its consumer spent waiting for a result
 *          (nothing ready in the window);
 *   util   the workers' busy time over (period x running workers): how
 *          much of their time the running workers spent on items rather
 *          than waiting for the pull turn (a slow upstream) or for room
 *          (a slow consumer);
 *   rate   results taken per second.
 *
 * and the tuner decides, in phases:
 *
 *   steady   raise by one when the consumer waits (wait > 5%), the workers
 *            are busy (util > 60%: the stage itself is the slow part, not
 *            its upstream), a worker is left to start and the ledger has
 *            room; the raise is then a probe.  Lower by one when the
 *            consumer does not wait (wait < 1%) and the work done would fit
 *            in one worker fewer at 60% (util x active < 0.6 x (active -
 *            1)): the results sit in a full window.
 *   settle   the period right after a change is not judged (a raised
 *            worker may be building its Lua state, the window refilling).
 *   probe    the period after that: the raise is kept when the rate grew by
 *            5% or more, else undone, and raises wait 1, 2, 4 ... 64
 *            periods (doubling per failed probe, cleared by a kept one),
 *            so a stage on a busy machine stops probing without ever
 *            stopping for good.
 *
 * Why a hill-climb and not tf.data's model: tf.data's autotuner builds an
 * analytic model of the whole pipeline (each stage's processing time and
 * parallelism) and optimises its predicted latency by gradient descent under
 * a CPU budget.  That pays when many stages share a large machine and every
 * stage's cost is known.  Here the stages that take `threads` are few, the
 * machines small (2 CPUs is the target), and the costs that matter (a Lua
 * function, the trainer beside the pipeline on the same CPUs, other
 * processes) are what the model cannot see: a probe measures them.  The
 * busy/wait shares only say where a probe is worth trying; the rate decides.
 * The total across stages stays within the CPUs + 1 (the ledger below) so
 * that two auto stages do not climb past the machine together.
 *
 * The ledger counts the running workers of every auto engine of the
 * process, claimed at a pass's start and given back at its stop, so an
 * idle pipeline (a test set between epochs) holds nothing.
 */
#include "sync/tune.h"

#include "core/stats.h"

#include <stdatomic.h>

enum { STEADY, SETTLE, PROBE };

#define WAIT_RAISE 0.05  /* the consumer waits more: try a raise */
#define WAIT_LOWER 0.01  /* the consumer waits less: a lowering may do */
#define UTIL_RAISE 0.60  /* the workers must be this busy to raise */
#define FIT_LOWER 0.60   /* the work must fit one worker fewer at this */
#define GAIN 1.05        /* a probe must gain this much to be kept */
#define BACKOFF_MAX 64u  /* periods, the longest wait after a failed probe */
#define MIN_ITEMS 4      /* results a period needs (or 4 periods' time) */

static atomic_long total;

long sl__tune_limit(void) {
  return sl__cpu_count() + 1;
}

int sl__tune_claim(int want) {
  long limit = sl__tune_limit();
  long cur = atomic_load(&total);
  for (;;) {
    long g = want;
    if (g > limit - cur) g = limit - cur;
    if (g < 1) g = 1;
    if (atomic_compare_exchange_weak(&total, &cur, cur + g)) return (int)g;
  }
}

bool sl__tune_claim_one(void) {
  long limit = sl__tune_limit();
  long cur = atomic_load(&total);
  while (cur + 1 <= limit)
    if (atomic_compare_exchange_weak(&total, &cur, cur + 1)) return true;
  return false;
}

void sl__tune_release(int n) {
  if (n > 0) atomic_fetch_sub(&total, n);
}

long sl__tune_total(void) {
  return atomic_load(&total);
}

void sl__tune_init(sl__tune *t, int max, int active) {
  memset(t, 0, sizeof *t);
  t->max = max < 1 ? 1 : max;
  t->active = active < 1 ? 1 : active > t->max ? t->max : active;
}

void sl__tune_restart(sl__tune *t, int active) {
  t->active = active < 1 ? 1 : active > t->max ? t->max : active;
  t->t0 = 0;
  t->phase = STEADY;
  t->probing = false;
}

/* A change by `d` (+1 or -1), the ledger already settled. */
static int change(sl__tune *t, int d, bool probe) {
  t->active += d;
  t->changes++;
  t->phase = SETTLE;
  t->probing = probe;
  return t->active;
}

int sl__tune_step(sl__tune *t, uint64_t now, uint64_t busy_ns) {
  if (!t->t0) {
    t->t0 = now;
    t->busy0 = busy_ns;
    t->wait_ns = t->items = 0;
    return t->active;
  }
  uint64_t dt = now - t->t0;
  if (dt < SL__TUNE_PERIOD_NS ||
      (t->items < MIN_ITEMS && dt < 4 * SL__TUNE_PERIOD_NS))
    return t->active;
  double secs = (double)dt * 1e-9;
  double rate = (double)t->items / secs;
  double wait = (double)t->wait_ns / (double)dt;
  double util = busy_ns > t->busy0 ? (double)(busy_ns - t->busy0) /
                                         ((double)dt * t->active)
                                   : 0.0;
  t->t0 = now;
  t->busy0 = busy_ns;
  t->wait_ns = 0;
  t->items = 0;
  if (t->phase == SETTLE) {
    t->phase = t->probing ? PROBE : STEADY;
    return t->active;
  }
  if (t->phase == PROBE) {
    t->phase = STEADY;
    t->probing = false;
    if (rate >= GAIN * t->rate_before) {
      t->backoff = 0;
      return t->active;
    }
    t->backoff = t->backoff ? 2 * t->backoff : 1;
    if (t->backoff > BACKOFF_MAX) t->backoff = BACKOFF_MAX;
    t->hold = t->backoff;
    sl__tune_release(1);
    return change(t, -1, false);
  }
  bool held = t->hold > 0;
  if (held) t->hold--;
  if (!held && wait > WAIT_RAISE && util > UTIL_RAISE && t->active < t->max &&
      sl__tune_claim_one()) {
    t->rate_before = rate;
    return change(t, +1, true);
  }
  if (wait < WAIT_LOWER && t->active > 1 &&
      util * t->active < FIT_LOWER * (t->active - 1)) {
    sl__tune_release(1);
    return change(t, -1, false);
  }
  return t->active;
}
