/*
 * resident.h - a stage's resident charge to the memory budget (budget.h,
 * sl__budget_resident) kept in one place: the account, given once by the
 * stage's `budget` entry (any time, possibly while a pass runs), and the
 * bytes charged so far, moved by atomic exchange so that the owner may
 * measure its buffers again on whichever thread changed them (a reader's
 * refill, a worker's decode).  Until an account is given nothing is
 * charged; the account releases what is left when it is freed with its
 * stage (sl__budget_acct_free), so an owner that lets its buffers go
 * before that sets the charge to 0.
 *
 * Header only: the formats' readers (wds, TFRecord, npy, csv, text, idx,
 * arrow)
 * and decode_image use it.
 */
#ifndef SLUICE_SYNC_RESIDENT_H
#define SLUICE_SYNC_RESIDENT_H

#include "sync/budget.h"

#include <stdatomic.h>

typedef struct sl__resident {
  sl__budget_acct *_Atomic acct;
  atomic_uint_least64_t charged;
} sl__resident;

/* Nothing charged, no account (before any thread uses it). */
static inline void sl__resident_init(sl__resident *r) {
  atomic_init(&r->acct, NULL);
  atomic_init(&r->charged, 0);
}

/* The stage's account (its `budget` entry); charged from the next
 * sl__resident_set. */
static inline void sl__resident_account(sl__resident *r, sl__budget_acct *a) {
  atomic_store_explicit(&r->acct, a, memory_order_release);
}

/* The account given, or NULL. */
static inline sl__budget_acct *sl__resident_acct(const sl__resident *r) {
  return atomic_load_explicit(&r->acct, memory_order_acquire);
}

/* The owner's buffers hold `bytes` now: the charge becomes that.  Any
 * thread; nothing without an account. */
static inline void sl__resident_set(sl__resident *r, uint64_t bytes) {
  sl__budget_acct *a = sl__resident_acct(r);
  if (!a || atomic_load_explicit(&r->charged, memory_order_relaxed) == bytes)
    return; /* nothing changed: no write on the reader's hot path */
  uint64_t old = atomic_exchange(&r->charged, bytes);
  if (old != bytes) sl__budget_resident(a, old, bytes);
}

#endif
