/*
 * rows.h - map and batch fused (tf.data's map_and_batch): the batches a
 * batch stage is building, shared with the parallel map right below it, so
 * that the map's workers write each output straight into its row of a
 * pooled batch instead of handing it to the batch stage to copy.
 *
 * Who: batch makes the table when every field stacks (fixed shapes: no LoD,
 * no pad) and offers it to its upstream (sl__reader_rows); a stage on the
 * engine that yields at most one output per item in order (a Lua or C map,
 * with or without ignore_errors, engine_stage.c) accepts it.
 *
 * Places: output p of the map's pass is row p % n of batch p / n.  A worker
 * does not know p when an item before its own may still be skipped, so it
 * places item seq at q = seq - base, where `base` counts the skips the
 * consumer has seen (plus, after a restore, the items skipped before the
 * restored position).  q is p when no skip before seq is unseen when seq is
 * placed, which is the rule; a skip seen moves base on and retires the
 * batches of the old base (sl__rows_rebase), so the items already placed
 * in them come as tokens of a retired batch and the consumer moves each
 * row to its place (sl__rows_land): one copy per item then in flight.  No
 * two items ever share a row of one batch: each batch belongs to one base.
 *
 *   put     a worker, with item seq's checked output o: when o's fields
 *           have the row's dtype, shape and size and the table has a slot
 *           for batch q / n (found, or free and allocated from the
 *           batch's pool), copies o into row q % n, releases o and returns
 *           a new reference to that batch (the token the engine hands on
 *           in o's place); else NULL and o is untouched (the map hands o on
 *           and batch copies it as before: nothing is ever lost, only not
 *           fused).
 *   rebase  the consumer: base += by (1 at a skipped item's place in
 *           delivery order; -1 unordered, at an output that came as
 *           itself), retiring the old base's batches.
 *   ticket  the consumer, unordered: item seq's ticket, or false when its
 *           output is not a token.
 *   delivered  the consumer: the id (seq, or ticket unordered) of the
 *           item whose output it hands on next.
 *   land    the consumer, with the output s that came for row j of batch
 *           k: whether s is a token; if so its row is in place (moved
 *           there when it was placed elsewhere).
 *   copy    the consumer: copies a sample that came as itself (made before
 *           the fusion, or not fused) into row j of batch k (after land).
 *   take    the consumer: removes batch k with m rows written (m < n: the
 *           short last batch) and hands it out.
 *   drop    the consumer: removes batch k (an error ended it).
 *   clear   with no worker running (the map's new pass: reset, restore,
 *           destroy): removes every batch and ticket and sets base.
 *
 * The rows are the same bytes batch would have copied: the output is the
 * same, bit for bit, as are errors (a sample that does not fit comes as
 * itself and batch's own checks name it) and positions (batch's and the
 * map's states are unchanged).
 *
 * Unordered (ticketed): an item's id is not its seq but its ticket, the
 * number of outputs put before it in the pass (taken in put, in the order
 * the outputs are finished), and the map hands its tokens on in ticket
 * order (engine_stage.c holds those that come early), so the output order
 * is still the order the items were finished in, and the rule above holds
 * with tickets for seqs: skipped items take no ticket; an output that comes
 * as itself takes a place but no ticket (rebase by -1).  No grants: a
 * grant comes before its item's output, so before its ticket.
 *
 * Threads: put and the grants on the map's workers, the rest on the
 * consumer's thread; `mu` guards the slots and base.  A row is written
 * before its token is deposited in the engine, which the consumer takes
 * under the engine's lock: the bytes are visible when the token arrives.
 * A worker holds its token's reference while it writes, so a batch
 * retired or dropped meanwhile stays valid.
 */
#ifndef SLUICE_STAGES_ROWS_H
#define SLUICE_STAGES_ROWS_H

#include "core/internal.h"
#include "core/stats.h"

typedef struct sl__rows sl__rows;

/* A table for batches of n rows of schema `in` (every field fixed; the
 * batch's upstream schema, borrowed) as samples of `out` (retained), with
 * buffers from `pool` (borrowed: it outlives the table; may be NULL).
 * SL_ENOMEM. */
int sl__rows_new(const sl_schema *in, sl_schema *out, size_t n,
                 sl__buffer_pool *pool, sl__rows **r);
/* Grants: while a fused map's function runs for item seq (between
 * grant_begin and grant_end, on the worker's thread), a tensor that
 * function makes (Lua's sluice.tensor, through sl__lua_row_grant) may be
 * given, as its storage, the zero-filled row of item seq (its place q) of a
 * field whose dtype and row size no other field shares (once per field
 * and call): the output then already sits in its row and put skips the
 * copy.  The Lua side revokes such tensors when the call returns
 * (tensor.lua), so none outlives its row's call.  grant_begin reserves the
 * batch (found or made, as put) and holds a reference to it until
 * grant_end; no reservation (a busy slot): no grant. */
void sl__rows_grant_begin(sl__rows *r, uint64_t seq);
void sl__rows_grant_end(void);
/* Lua's side (exported: include/sluice/unstable.h): the data pointer of
 * the granted row for a new zero-filled tensor of `dtype` and `nbytes`
 * bytes, its buffer in *buf (borrowed: the reservation keeps it alive for
 * the call), or NULL when this thread has no such grant. */
SL_API void *sl__lua_row_grant(int dtype, size_t nbytes, sl_buffer **buf);

/* Frees the table and every batch in it.  NULL-safe. */
void sl__rows_free(sl__rows *r);
/* The map's side, once, before a worker sees the table: `items` is the most
 * items its engine holds at once (window + cache), which bounds the batches
 * being filled; `c` (borrowed) counts the rows written (c->fused);
 * `ticketed`: an unordered map. */
int sl__rows_window(sl__rows *r, size_t items, sl__stage_counters *c,
                    bool ticketed);

sl_sample *sl__rows_put(sl__rows *r, uint64_t seq, sl_sample *o);
void sl__rows_rebase(sl__rows *r, uint64_t by);
bool sl__rows_ticket(sl__rows *r, uint64_t seq, uint64_t *ticket);
void sl__rows_delivered(sl__rows *r, uint64_t id);
/* Whether s is a token (a batch of this table), not a map's output. */
bool sl__rows_token(const sl__rows *r, const sl_sample *s);
/* SL_OK (*token set), or SL_ENOMEM: no batch k could be allocated. */
int sl__rows_land(sl__rows *r, uint64_t k, size_t j, const sl_sample *s,
                  bool *token);
int sl__rows_copy(sl__rows *r, uint64_t k, size_t j, const sl_sample *s);
int sl__rows_take(sl__rows *r, uint64_t k, size_t m, sl_sample **out);
void sl__rows_drop(sl__rows *r, uint64_t k);
void sl__rows_clear(sl__rows *r, uint64_t base);

#endif
