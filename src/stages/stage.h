/*
 * stage.h - one descriptor per stage: the table of operations every
 * built-in source and decorator defines once, statically, and the one
 * constructor that makes a reader of it (tf.data's IteratorBase:
 * GetNextInternal, SaveInternal, RestoreInternal, Cardinality).
 *
 * A stage is a state struct plus one `static const sl__stage_ops` table.
 * Only `name` and `next` are required; an absent entry (NULL) means "not
 * supported", and the base (reader.c, state.c) checks it once and answers
 * for the stage:
 *
 *   next, reset, destroy   the pull protocol, as sl_reader_vtable (reset
 *                          NULL: one pass only; destroy NULL: nothing
 *                          owned);
 *   length                 sl_reader_length without reading the pass
 *                          (NULL: not known; sl__length_of_upstream for a
 *                          stage yielding one sample per upstream sample);
 *   save, restore,         the position protocol of state.h (save NULL:
 *   identity, check        the stage cannot be saved; identity NULL: its
 *                          name alone; check NULL: no data check);
 *   fetch                  random access for a restore (state.h; NULL:
 *                          none);
 *   stop                   asks the stage's own threads to stop without
 *                          waiting (reader_impl.h, "Stopping promptly";
 *                          NULL: no threads of its own);
 *   defer, finish          finishing outputs on the consuming thread: after
 *                          defer(st, max) returns non-NULL, the stage's
 *                          outputs may leave unfinished (at most max at
 *                          once) and whoever consumes them calls
 *                          finish(handle, sample) once on each before
 *                          publishing it (batch's row copies, done on the
 *                          prefetch engine's consumer; NULL: outputs leave
 *                          finished).  Call defer before any thread pulls.
 *   rows                   map and batch fused (rows.h): rows(st, table)
 *                          returns true when the stage will write its
 *                          outputs into the rows of the batch above it
 *                          (its outputs are then tokens of that table);
 *                          NULL: it will not.
 *   budget                 the memory budget (sync/budget.h): budget(st,
 *                          acct) gives the stage its account (set once,
 *                          before the first next or while a pass runs;
 *                          the reader owns it and frees it after destroy),
 *                          which it charges with the bytes it holds; NULL:
 *                          the stage holds no samples of its own (its
 *                          account only passes its upstream's carry on).
 *   keep                   random access that keeps what it decodes
 *                          (core/keep.h): keep(st, k) makes the stage keep
 *                          decoded units (an SLR file's frames) across its
 *                          fetches and passes within the allowance k;
 *                          SL_OK or SL_ENOMEM; NULL: nothing to keep (a
 *                          chain offers k to each of its readers).  Call
 *                          it before any thread fetches.
 *   fetch_shared           fetch_shared(st) makes the stage's fetch
 *                          callable from several threads at once from now
 *                          on (a threaded global shuffle) and returns
 *                          whether it is; NULL: it is not (callers then
 *                          serialise their fetches).  Call it before any
 *                          thread fetches.
 *
 * The links a stage's statistics and saves walk (its upstreams, its
 * counters) are given to the constructor too: nothing is set on a reader
 * after it is made.  The public sl_reader_vtable (users' readers) is the
 * first four entries of this table: sl_reader_new adapts it.
 */
#ifndef SLUICE_READERS_STAGE_H
#define SLUICE_READERS_STAGE_H

#include "core/keep.h"
#include "stages/state.h"
#include "sync/budget.h"

struct sl__rows; /* rows.h */

struct sl__stage_ops {
  const char *name; /* the stage in messages and statistics ("shuffle") */
  int (*next)(void *st, sl_sample **out);
  int (*reset)(void *st);
  void (*destroy)(void *st);
  sl__length_fn length;
  int (*save)(sl_reader *r, void *st, uint64_t pass, uint64_t k,
              sl__state_out *w);
  int (*restore)(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                 sl__state_in *in);
  void (*identity)(const sl_reader *r, void *st, char *buf, size_t cap);
  sl__state_check_fn check;
  sl__fetch_fn fetch;
  sl__stop_signal_fn stop;
  void *(*defer)(void *st, size_t max_pending);
  void (*finish)(void *handle, sl_sample *s);
  bool (*rows)(void *st, struct sl__rows *table);
  void (*budget)(void *st, sl__budget_acct *acct);
  int (*keep)(void *st, sl__keep *k);
  bool (*fetch_shared)(void *st);
};

/* Makes a reader of stage `ops` (borrowed: static) over `state` (taken:
 * ops->destroy frees it, also when this call fails) yielding `schema`
 * (retained and frozen; the caller keeps its own reference).  `ups` (n
 * entries, borrowed from the state, e.g. &state->up) are the readers the
 * stage pulls from, `c` (may be NULL, borrowed from the state) the counters
 * of a stage with threads of its own.  SL_OK with *out set, or the error
 * with *out = NULL. */
int sl__stage_new(const sl__stage_ops *ops, void *state, sl_schema *schema,
                  sl_reader *const *ups, size_t nups,
                  const sl__stage_counters *c, sl_reader **out);

/* sl__stage_new for a decorator of one upstream, `*up_slot` (the state's
 * field holding it), yielding `schema`, or the upstream's own schema when
 * `schema` is NULL. */
int sl__stage_wrap(const sl__stage_ops *ops, void *state, sl_schema *schema,
                   sl_reader *const *up_slot, const sl__stage_counters *c,
                   sl_reader **out);

/* The state of a one-upstream decorator, after its constructor checked its
 * arguments: `size` zeroed bytes whose first member, a sl_reader *, is set
 * to `up`; or NULL with `up` destroyed and SL_ENOMEM "<stage>: cannot
 * allocate" set (return SL_ENOMEM). */
void *sl__decorator_state(const char *stage, sl_reader *up, size_t size);

/* The common end of a stage's destroy, after what only the stage owns (its
 * threads, buffers, held samples) is gone: destroys its upstream `up`,
 * releases its reference to `schema`, then frees `state` (each may be NULL:
 * a source passes up = NULL, a stage holding no schema of its own
 * schema = NULL). */
void sl__stage_free(void *state, sl_reader *up, sl_schema *schema);

/* The base's side of defer/finish: r's handle (NULL when r cannot defer,
 * is shared, or memory is short: nothing changes then), and finishing one
 * of r's outputs with it. */
void *sl__reader_defer(sl_reader *r, size_t max_pending);
void sl__reader_finish(const sl_reader *r, void *handle, sl_sample *s);

/* The base's side of keep: offers k to r (a stage without the entry
 * ignores it): SL_OK, or the error of a stage that could not take it. */
int sl__reader_keep(sl_reader *r, sl__keep *k);

/* The base's side of fetch_shared: whether r's fetch may now run on
 * several threads at once (false for a reader shared under a lock).
 * sl__fetch_shared_always: the entry of a stage whose fetch only reads
 * (range, arrays). */
bool sl__reader_fetch_shared(sl_reader *r);
bool sl__fetch_shared_always(void *st);

/* The base's side of rows: whether r (not shared) took the table. */
bool sl__reader_rows(sl_reader *r, struct sl__rows *table);

/* r's stage operations (never NULL: readers made by sl_reader_new have the
 * vtable's four). */
const sl__stage_ops *sl__reader_ops(const sl_reader *r);

/* Makes r own `owned`: sl_reader_destroy(r) calls release(owned) once the
 * chain is gone (an embedded pipeline's Lua state, src/script/pipeline.c). */
void sl__reader_own(sl_reader *r, void (*release)(void *), void *owned);

/* The entries of a stage yielding its one upstream's k-th sample as its own
 * k-th with no position of its own (threaded): length, save and restore
 * are upstream 0's.  Written inside a table: `{.name = ..., SL__STAGE_1TO1}`. */
#define SL__STAGE_1TO1                                                         \
  .length = sl__length_of_upstream, .save = sl__state_save_1to1,               \
  .restore = sl__state_restore_1to1

/* --- counting stages (count.c) ------------------------------------------------
 * skip, take, repeat_first and multi_pass: one upstream and a number n given
 * at construction; what a pass yields is a function of n, the upstream and
 * a count the stage keeps for the pass (dropped, yielded, ...).  Their
 * state begins with sl__count, and these are their shared entries:
 *   sl__count_new       the constructor: checks the arguments (taking `up`
 *                       also when it fails), allocates `size` zeroed bytes,
 *                       sets up and n, and wraps them as stage `ops`;
 *   sl__count_reset     count = 0, resets up;
 *   sl__count_destroy   destroys up, frees the state;
 *   sl__count_identity  "n=N". */
typedef struct sl__count {
  sl_reader *up;
  uint64_t n;     /* the stage's argument */
  uint64_t count; /* counted in this pass */
} sl__count;
int sl__count_new(const sl__stage_ops *ops, size_t size, sl_reader *up,
                  uint64_t n, sl_reader **out);
int sl__count_reset(void *st);
void sl__count_destroy(void *st);
void sl__count_identity(const sl_reader *r, void *st, char *buf, size_t cap);

#endif
