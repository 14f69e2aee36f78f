/*
 * tune.h - the thread tuner of "auto" stages (threads = "auto",
 * SL_THREADS_AUTO): how many of an engine's started workers run, chosen at
 * run time from what the engine measures, and the process-wide ledger that
 * keeps the running workers of every auto stage within the usable CPUs.
 * tune.c has the algorithm and why (docs/PERFORMANCE.md, "Autotuning").
 *
 * Threads: an sl__tune is its engine's consumer's (sl__engine_next's
 * thread), as the engine calls it; the ledger functions are thread-safe.
 */
#ifndef SLUICE_SYNC_TUNE_H
#define SLUICE_SYNC_TUNE_H

#include "core/internal.h"

/* One decision period, in the consumer's time: at least this long. */
#define SL__TUNE_PERIOD_NS 100000000ull /* 100 ms */

typedef struct sl__tune {
  int max;             /* workers started (the most that may run) */
  int active;          /* workers running now (the engine's copy) */
  int phase;           /* tune.c: steady, settling after a change, probing */
  bool probing;        /* the last change was a raise being tried */
  unsigned hold;       /* periods before the next raise may be tried */
  unsigned backoff;    /* the last hold after a failed raise (doubles) */
  uint64_t t0;         /* the period's start (0: not begun) */
  uint64_t busy0;      /* the workers' busy ns at the period's start */
  uint64_t wait_ns;    /* the consumer's wait for results in the period */
  uint64_t items;      /* results the consumer took in the period */
  double rate_before;  /* probing: results per second before the raise */
  uint64_t changes;    /* decisions that changed `active` (tests, stats) */
} sl__tune;

/* A tuner for `max` started workers, `active` of them running. */
void sl__tune_init(sl__tune *t, int max, int active);

/* A new pass with `active` workers running (what the ledger granted): the
 * next period starts afresh, any probe forgotten. */
void sl__tune_restart(sl__tune *t, int active);

/* The decision at `now` (sl__now_ns) given the workers' busy time so far
 * (`busy_ns`, cumulative): the number of workers to run from now on,
 * 1..t->max, claimed in the ledger (a raise is only made when the ledger
 * has room; a lowering gives the thread back).  Cheap when the period is
 * not over (one comparison). */
int sl__tune_step(sl__tune *t, uint64_t now, uint64_t busy_ns);

/* The ledger: running workers of auto stages, process-wide, at most
 * sl__cpu_count() + 1 (the consumer's thread being the +1), except that a
 * stage always runs one.
 *   claim: up to `want` (at least 1, even past the limit); returns how
 *     many were granted.
 *   claim_one: one more when the total stays within the limit.
 *   release: gives `n` back.
 *   total: the running workers counted now (tests). */
int sl__tune_claim(int want);
bool sl__tune_claim_one(void);
void sl__tune_release(int n);
long sl__tune_total(void);
/* The ledger's limit: sl__cpu_count() + 1. */
long sl__tune_limit(void);

#endif /* SLUICE_SYNC_TUNE_H */
