/*
 * keep.h - an allowance of decoded data that readers with random access
 * may keep across fetches and passes (issue 28: a global shuffle decodes
 * each SLR chunk once while the decoded data set fits).
 *
 * A stage that fetches at random (sl_global_shuffle, sl_weighted_sample,
 * sl_subset) owns one sl__keep and offers it down its chain
 * (sl__reader_keep, stages/stage.h, the `keep` entry); a source that
 * decodes units bigger than a sample (an SLR file's chunks, decoded whole
 * on first use) then keeps the units it decodes, taking their
 * bytes from the allowance first (sl__keep_take) and giving them back when
 * it lets them go.  Several sources (the files of a chain) share one
 * allowance.  `max` SL__KEEP_AUTO leaves the size to the memory budget:
 * a source keeps a unit only while the pipeline's budget would still have
 * half its capacity free after it, and keeps nothing in a chain without a
 * budget (formats/slr_source.c).
 *
 * Threads: take and give from any thread (an atomic count); `max` is set
 * before the allowance is offered and never changes.  The allowance must
 * outlive the readers it was offered to (its stage destroys them first).
 */
#ifndef SLUICE_CORE_KEEP_H
#define SLUICE_CORE_KEEP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SL__KEEP_AUTO UINT64_MAX

typedef struct sl__keep {
  uint64_t max;                /* bytes, or SL__KEEP_AUTO */
  atomic_uint_least64_t used;  /* kept now, every source together */
  /* the units the sources could keep (added when offered) and those kept:
   * when they are equal every fetch is served from memory */
  atomic_uint_least64_t units, kept;
} sl__keep;

/* Takes n bytes of the allowance: whether they fit under max. */
static inline bool sl__keep_take(sl__keep *k, uint64_t n) {
  uint64_t u = atomic_fetch_add(&k->used, n);
  if (k->max == SL__KEEP_AUTO || (u + n >= u && u + n <= k->max)) return true;
  atomic_fetch_sub(&k->used, n);
  return false;
}

/* Whether every unit of every source is kept. */
static inline bool sl__keep_all(sl__keep *k) {
  uint64_t u = atomic_load(&k->units);
  return u && atomic_load(&k->kept) == u;
}

/* Gives back n bytes taken before. */
static inline void sl__keep_give(sl__keep *k, uint64_t n) {
  atomic_fetch_sub(&k->used, n);
}

#endif /* SLUICE_CORE_KEEP_H */
