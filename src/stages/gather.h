/*
 * gather.h - what the stages that gather upstream samples into outputs
 * share (batch, padded_batch, window; bucket_batch, pack and mix re-read).
 *
 * Counting.  Output j of a pass covers upstream items [j*stride,
 * j*stride + size) (batch: size = stride = n samples; window: values of
 * the stream).  A pass of `total` items has the outputs that start below
 * total; with drop (drop_last, drop_remainder) only those with all `size`
 * items: sl__gather_count.
 *
 * Batches of n (sl__gather: the FIRST member of batch's and padded_batch's
 * state, so that the ops below take that state).  Output b of a pass is
 * upstream samples [b*n, b*n + n), pulled and checked one by one, then
 * built and released: no sample is held between calls, so a saved state
 * is the position alone, upstream at b*n, or (the last, short batch, after
 * which upstream ended) between (b-1)*n and b*n.  A state whose two
 * positions disagree is refused before any stage changes (the check op).
 * bucket_batch's buckets are sl__gathers without an upstream.
 *
 * Re-read: a saved state that is the position alone, each upstream saved
 * at the start of its pass, the restore re-reading the pass up to it
 * (sl__gather_save_reread).  bucket_batch, pack and mix save what they
 * hold instead (src/lm/); they keep this for states saved before that
 * (no payload) and for a save further behind than their memory (payload
 * mode 1).
 */
#ifndef SLUICE_READERS_GATHER_H
#define SLUICE_READERS_GATHER_H

#include "stages/state.h"
#include "sync/budget.h"

typedef struct sl__gather {
  sl_reader *up;
  size_t n;         /* samples per output */
  int drop;         /* a short last batch is dropped */
  sl_sample **held; /* n slots: the batch being gathered */
  size_t nheld;
  unsigned long long no; /* batches yielded in this pass */
  /* the pass before: its batches and the samples upstream gave (a save
   * there: a repeat above reset the stage) */
  unsigned long long prev_no;
  uint64_t prev_up;
  /* The memory budget (sync/budget.h; sl__gather_budget): the stage's
   * account or NULL, set while another thread may pull (a prefetch's
   * worker), so atomic; and the bytes its held rows are charged. */
  sl__budget_acct *_Atomic acct;
  uint64_t charged;
} sl__gather;

/* Outputs of a pass of `total` items (see above); stride >= 1. */
uint64_t sl__gather_count(uint64_t total, uint64_t size, uint64_t stride,
                          int drop);

/* Sets g up over `up` (owned from now on: sl__gather_fini destroys it);
 * false when the n slots cannot be allocated. */
bool sl__gather_init(sl__gather *g, sl_reader *up, size_t n, int drop);
void sl__gather_release(sl__gather *g); /* the held samples */
void sl__gather_fini(sl__gather *g);    /* held samples, slots, upstream */

/* Pulls the next batch into g->held, calling check(st, j) on sample j as it
 * arrives.  SL_OK: g->nheld samples to build (then sl__gather_release, and
 * g->no++ when built); SL_EOF: none (or a short one with drop); an error
 * (upstream's untouched, or check's): the held samples released. */
int sl__gather_pull(sl__gather *g, int (*check)(void *st, size_t j), void *st);

/* The memory budget of a gathering stage (issue 27): each row is charged
 * to the stage's account as it arrives (the upstream's carry claimed),
 * without waiting - a batch must finish the rows it started, and the rows
 * only leave as it does - so a batch whose rows alone need more than the
 * budget ends the pass (SL_ENOMEM "stage 'batch' needs N bytes to hold K
 * samples ..."); sl__gather_release releases them.  sl__gather_budget is
 * the stage's budget op (st: an sl__gather first in the state);
 * sl__gather_hand_out charges the output `o` built from the rows (before
 * the rows are released: both are in memory then) and makes it the
 * account's carry, as the stage hands it out: SL_ENOMEM (o released,
 * *o NULL) when rows and output together pass the budget. */
void sl__gather_budget(void *st, sl__budget_acct *acct);
/* Charges one row that is not in g->held (batch fused with its map: a row
 * copied into the batch being built, `count` rows so far, or with s NULL a
 * row the map wrote there, whose bytes the map's carry holds: claimed);
 * sl__gather_uncharge releases what the rows were charged. */
int sl__gather_charge(sl__gather *g, const sl_sample *s, size_t count);
void sl__gather_uncharge(sl__gather *g);
int sl__gather_hand_out(sl__gather *g, sl_sample **o);

/* Moves t into field i of o and, when lens is not NULL, lens into field
 * i + 1 (a padded field's lengths); on failure clears what was not moved. */
int sl__gather_put(sl_sample *o, int i, sl_tensor *t, sl_tensor *lens);

/* Stage ops over a state whose first member is an sl__gather. */
int sl__gather_reset(void *st);
int sl__gather_length(const sl_reader *r, void *st, uint64_t *n);
int sl__gather_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                    sl__state_out *w);
int sl__gather_check(const sl_reader *r, void *st, sl__state_in *in);
int sl__gather_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in);

/* Save for a re-read stage: each of the `n` upstreams saved at
 * (passes[i], 0) - the pass of its that matches the saved one
 * (sl__state_up_pass) - as replayed when k > 0. */
int sl__gather_save_reread(sl_reader *const *ups, const uint64_t *passes,
                           size_t n, uint64_t k, sl__state_out *w);
/* The save op of a re-read stage whose state's first member is its one
 * upstream. */
int sl__gather_save_reread_up(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                              sl__state_out *w);

#endif
