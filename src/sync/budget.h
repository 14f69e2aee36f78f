/*
 * budget.h - the pipeline-wide memory budget (issue 27): one ledger per
 * pipeline, one account per stage.  The ledger holds a capacity in bytes
 * and the bytes all its accounts hold; an account holds the bytes of the
 * samples its stage keeps (a shuffle's window, a threaded stage's items in
 * hand and results not yet taken), its peak, and its "carry": the bytes of
 * the sample it handed out last, still counted until the stage above claims
 * them (sl__budget_claim: the charge moves, the total does not change) or
 * the stage's next call drops them (the sample left the pipeline).
 *
 * Who waits (engine.c, "budget"): a threaded stage's worker reserves room
 * before it pulls an item, and waits while the ledger is full and its own
 * stage holds something (its consumer will take that and free room); a
 * stage that holds nothing may always take one item, so the pipeline never
 * deadlocks on its budget.  A stage that works on its caller's thread (a
 * shuffle's window) charges without waiting: the only thing that would free
 * room for it is its own progress.  One sample larger than the whole budget,
 * or a stage of that kind whose holdings alone pass it, is an error naming
 * the stage and the bytes ("stage 'shuffle' needs N bytes ...").
 *
 * A stage's own memory that is not samples (a worker Lua state's heap, a
 * reader's buffers) is its account's "resident" charge: counted, never
 * waited for (sl__budget_resident).
 *
 * Headroom: the charges that do not wait (the one item of a stage holding
 * nothing, a shuffle's window, a batch's rows, resident bytes, an item
 * found larger than its reservation) could pass the capacity, so the
 * ledger learns how far they go: whenever one brings the total past the
 * capacity, the excess is added to its headroom (never more than the
 * capacity), and a reservation that waits from then on fits only under
 * the capacity less the headroom.  A stage whose charges come in bursts
 * it gives back together (a batch) declares its largest burst instead
 * (sl__budget_burst), so that its first burst teaches it whatever the
 * timing.  The first rounds of a pass may go over
 * while it learns; once the headroom covers what the stages take without
 * waiting, the total stays within the capacity (tests/test_budget.c,
 * "a hard bound").  The headroom never shrinks during the ledger's life.
 *
 * Threads: every function is safe from any thread; the held counts are
 * atomics, a mutex and a condition variable serve the waiters only (woken
 * together when a release makes room for the least reservation waiting or
 * empties an account with a waiter, when the ledger is closed, or when a
 * stage is stopped: sl__budget_wake).
 */
#ifndef SLUICE_SYNC_BUDGET_H
#define SLUICE_SYNC_BUDGET_H

#include "core/internal.h"

typedef struct sl__budget sl__budget;
typedef struct sl__budget_acct sl__budget_acct;

/* A ledger of `cap` bytes (> 0), with one reference: NULL and SL_ENOMEM or
 * SL_EINVAL set. */
sl__budget *sl__budget_new(uint64_t cap);
/* References: each account holds one; the last drop frees the ledger. */
void sl__budget_drop(sl__budget *b);

uint64_t sl__budget_cap(const sl__budget *b);
uint64_t sl__budget_held(const sl__budget *b); /* all accounts, now */
uint64_t sl__budget_peak(const sl__budget *b); /* the most ever held */
/* The headroom learned so far (see "Headroom" above): the room the
 * reservations that wait leave to the charges that do not. */
uint64_t sl__budget_headroom(const sl__budget *b);
/* Whether n more bytes fit now under the capacity less the headroom (the
 * room a reservation that waits may take): for memory a stage may keep or
 * free at will, such as a pool's idle buffers, which must not take the
 * room the headroom keeps for the charges that cannot wait. */
bool sl__budget_has_room(const sl__budget *b, uint64_t n);
/* Stage a (on its caller's thread) takes up to n bytes at once without
 * waiting, and gives them back together (a batch's rows and the output
 * built from them): the reservations that wait leave room for the largest
 * such burst declared, on top of the headroom learned. */
void sl__budget_burst(sl__budget_acct *a, uint64_t n);
void sl__budget_reset_peak(sl__budget *b);     /* peak = held now (tests) */

/* The default budget (issue 27): SL_BUDGET_DEFAULT_PERCENT of the memory
 * the process may use.  sl__budget_usable: that memory, the environment's
 * SLUICE_MEMORY_LIMIT (bytes, or a number with K, M, G or T: powers of
 * 1024; for tests, or to give the pipeline a share of less than the
 * container) when set, else sl__memory_limit (the cgroup limit or the
 * physical memory): SL_OK, or SL_EINVAL naming the variable when it is set
 * but not a size >= 1.  sl__budget_share: pct % of `usable` (at least 1
 * byte).  Thread-safe. */
int sl__budget_usable(uint64_t *usable);
uint64_t sl__budget_share(uint64_t usable, int pct);
/* Marks b as a default budget: pct % of `usable` (shown by the stats);
 * before any account uses it.  sl__budget_default_pct: that pct, 0 for a
 * budget the user set; sl__budget_usable_of: that `usable`, 0 likewise. */
void sl__budget_mark_default(sl__budget *b, int pct, uint64_t usable);
int sl__budget_default_pct(const sl__budget *b);
uint64_t sl__budget_usable_of(const sl__budget *b);

/* Closes the ledger (the pipeline is being destroyed): every waiter, now
 * and later, gets SL_EKILLED.  Idempotent. */
void sl__budget_close(sl__budget *b);

/* An account of stage `stage` (borrowed: a static name) in b (a reference
 * taken), charged nothing: NULL and SL_ENOMEM set. */
sl__budget_acct *sl__budget_acct_new(sl__budget *b, const char *stage);
/* Releases what the account still holds, frees it, drops its reference.
 * NULL-safe.  No thread may use it any more. */
void sl__budget_acct_free(sl__budget_acct *a);
/* The account whose carry sl__budget_claim takes (the stage's upstream's;
 * may be NULL).  Before any thread uses either. */
void sl__budget_acct_link(sl__budget_acct *a, sl__budget_acct *below);

sl__budget *sl__budget_of(const sl__budget_acct *a);
/* Its held bytes with its resident bytes (what the stats show), never
 * above its peak: the two are read one after the other while other
 * threads move bytes between them (a charge going resident, a carry
 * claimed), so their sum alone could count a moved byte twice. */
uint64_t sl__budget_acct_held(const sl__budget_acct *a);
uint64_t sl__budget_acct_resident(const sl__budget_acct *a);
uint64_t sl__budget_acct_peak(const sl__budget_acct *a);
void sl__budget_acct_reset_peak(sl__budget_acct *a); /* peak = held (tests) */

/* Reserves n bytes for a, waiting while the ledger has no room for them and
 * a holds something (a holding nothing takes them at once).  SL_OK, or
 * SL_EKILLED ("<stage>: stopped") when *stop becomes true (stop may be NULL;
 * sl__budget_wake wakes a waiter to look) or the ledger is closed, or
 * SL_ENOMEM when n alone exceeds the capacity ("stage 'X' needs N bytes for
 * one sample, the budget is M bytes"). */
int sl__budget_reserve(sl__budget_acct *a, uint64_t n, const atomic_bool *stop);

/* Waits until a holds nothing: SL_OK, or SL_EKILLED as sl__budget_reserve
 * (a stage that must learn the size of one item before it takes more). */
int sl__budget_wait_empty(sl__budget_acct *a, const atomic_bool *stop);

/* Like sl__budget_reserve without waiting: whether the n bytes were taken
 * (a stage holding nothing always takes them). */
bool sl__budget_try(sl__budget_acct *a, uint64_t n);

/* SL_OK when one sample of n bytes fits the budget at all, else SL_ENOMEM
 * "stage 'X' needs N bytes for one sample, the budget is M bytes". */
int sl__budget_fits(const sl__budget_acct *a, uint64_t n);

/* Charges n more bytes to a without waiting (a stage on its caller's
 * thread), after claiming what it can of its upstream's carry (up to n):
 * SL_OK, or SL_ENOMEM (nothing charged) when n exceeds the capacity or a
 * would then hold more than the capacity, naming the stage, the bytes and
 * `count`, the samples it would hold ("to hold K samples"). */
int sl__budget_charge(sl__budget_acct *a, uint64_t n, uint64_t count);

/* Changes a's charge for one item from `from` to `to` bytes, without
 * waiting (an item's size known after a reservation). */
void sl__budget_adjust(sl__budget_acct *a, uint64_t from, uint64_t to);

/* Releases n of a's bytes (n <= what it holds) and wakes the waiters. */
void sl__budget_release(sl__budget_acct *a, uint64_t n);
/* Releases what a holds (a stopped stage), its carry included; not its
 * resident bytes. */
void sl__budget_release_all(sl__budget_acct *a);

/* Changes a's resident charge - memory its stage keeps for itself rather
 * than samples: a worker Lua state's heap, a reader's chunk buffers - from
 * `from` to `to` bytes, without waiting (the owner changes it as the memory
 * grows and shrinks; `from` is what it charged last).  Resident bytes count
 * in the ledger's total and peak and in a's held bytes and peak as the stats
 * show them (sl__budget_acct_held), but not in whether a "holds nothing"
 * (the one item a stage may always take: its own buffers never free room
 * by its consumer's progress), and sl__budget_release_all (a stage
 * stopping) leaves them: the memory stays until its owner lets it go, or
 * sl__budget_acct_free. */
void sl__budget_resident(sl__budget_acct *a, uint64_t from, uint64_t to);

/* Samples a stage took from its engine as one unit (an item's outputs, a
 * unit of records) and hands out one by one: the unit's n bytes, handed
 * out with it as the account's carry, become resident bytes kept in
 * *kept (sl__budget_keep; the carry dropped), and each sample of h bytes
 * leaving the stage's hands goes from there to the carry when handed out
 * (`out`), or is released (sl__budget_let_go), so the rest of the unit
 * stays counted until it leaves.  Resident, not held: the stage may wait
 * for more while it keeps some.  Neither teaches the headroom (the bytes
 * change hands).  The stage releases what is left (sl__budget_resident
 * from *kept to 0) when it drops the unit. */
void sl__budget_keep(sl__budget_acct *a, uint64_t *kept, uint64_t n);
void sl__budget_let_go(sl__budget_acct *a, uint64_t *kept, uint64_t h,
                       bool out);

/* n of a's held bytes become its carry: the sample handed out.  The carry
 * is dropped (released) by sl__budget_drop_carry, at the stage's next call,
 * unless the stage above claimed it first. */
void sl__budget_to_carry(sl__budget_acct *a, uint64_t n);
void sl__budget_drop_carry(sl__budget_acct *a);
/* Moves the carry of a's linked upstream account into a (at most `max`
 * bytes; the rest is dropped): returns the bytes moved. */
uint64_t sl__budget_claim(sl__budget_acct *a, uint64_t max);

/* Wakes every waiter to look at its stop flag again (a stage stopping). */
void sl__budget_wake(sl__budget *b);
/* How many times the waiters were woken so far (tests). */
uint64_t sl__budget_wakeups(const sl__budget *b);

#endif
