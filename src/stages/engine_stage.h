/*
 * engine_stage.h - a stage run by the parallel-stage engine (sync/engine.h):
 * the reader side every such stage shares (the C map and filter,
 * decode_image, the Lua map, filter, parser and flat_map), so that a stage
 * writes only its engine callbacks, its identity and what it owns.
 *
 * The stage's state starts with an sl__engine_stage (the engine's `ud` and
 * the reader's state are the same pointer) and its ops table is
 * SL__ENGINE_STAGE_OPS(name, identity):
 *
 *   next      starts the engine if this pass has not (a lazy stage: no
 *             thread before the first next), takes its next result and
 *             notes it delivered (sl__engine_pos), then hooks->took.
 *   reset     stops (joins) the engine, forgets the pass (the position, the
 *             skip count, hooks->new_pass), counts the pass, resets upstream
 *             and starts the engine again (lazy: at the next next).
 *   save,     the engine's position (stages/state.h, sl__engine_pos:
 *   restore   1:1, a log of delivered seqs, or the done set unordered); a
 *             restore stops the engine, reads the position, forgets the
 *             pass (hooks->new_pass with the restored start) and resumes.
 *   length    upstream's when every item gives one result (one_to_one),
 *             else not known (hooks->length_why says why, if not obvious).
 *   stop      sl__engine_signal_stop.
 *   rows      map and batch fused (rows.h): a fusable stage (cfg), a map
 *             (one output or a skip per item), takes the batch's table; its
 *             process then ends with sl__engine_stage_out; each skip
 *             (ordered) and each delivery is told to the table
 *             (sl__rows_rebase, _delivered); unordered, next hands the
 *             tokens on in ticket order (holding those that come early: at
 *             most the items in flight); and every new pass (reset,
 *             restore, destroy) clears the table and the held tokens with
 *             the engine stopped, at the restored place.
 *   destroy   stops, destroys the engine (its worker_fini), upstream and
 *             the position, then hooks->free frees the rest and the state.
 *
 * Skipped items (SL__ENGINE_SKIP, with ignore_cap > 0): counted on the
 * consumer's thread in delivery order, past the cap the end of the pass
 * (sl__ignore_error with the hooks' words, the stage named by what), and
 * marked done for an unordered save.  A stage's process starts with
 * sl__engine_stage_done (an item done before a restore is dropped
 * unprocessed) and marks items it drops unordered (sl__engine_pos_dropped).
 */
#ifndef SLUICE_READERS_ENGINE_STAGE_H
#define SLUICE_READERS_ENGINE_STAGE_H

#include "stages/rows.h"
#include "stages/stage.h"
#include "sync/engine.h"

/* What differs between the stages on the engine besides their callbacks. */
typedef struct sl__engine_stage_hooks {
  /* Optional, on the consumer's thread with the engine stopped: forget the
   * stage's own pass state; the next pass's first item is `start` (0, or
   * the restored upstream position). */
  void (*new_pass)(void *st, uint64_t start);
  /* Optional: item seq's result, about to be handed on (may replace or
   * refuse it: an error releases *out). */
  int (*took)(void *st, uint64_t seq, sl_sample **out);
  /* Frees what the stage owns besides the base, and the state. */
  void (*free)(void *st);
  /* sl__ignore_error's words: the code past the cap, what failed
   * ("samples failed") and the option ("ignore_errors"). */
  int skip_code;
  const char *skipped, *option;
  /* Appended to "not known before reading it" (may be NULL). */
  const char *length_why;
} sl__engine_stage_hooks;

/* A token that came before its ticket (unordered and fused). */
typedef struct sl__held {
  uint64_t ticket, seq;
  sl_sample *s;
} sl__held;

typedef struct sl__engine_stage {
  sl_reader *up;
  sl__engine *engine;
  sl__engine_pos pos;
  const sl__engine_stage_hooks *hooks;
  bool one_to_one;     /* each item gives exactly one result: a length */
  bool lazy;           /* threads start at a pass's first next */
  bool started;        /* the engine runs this pass */
  bool ordered;        /* results in upstream order */
  uint64_t ignore_cap; /* SKIP items allowed per pass (SL_IGNORE_ALL: all) */
  uint64_t ignored;    /* consumer: items skipped this pass */
  uint64_t pass;       /* resets since construction, or as restored */
  /* map and batch fused (rows.h): the batch's table once it offered one
   * and the stage took it (fusable); set before
   * the workers read it, which they do in sl__engine_stage_out */
  bool fusable;
  size_t inflight; /* the most items the engine holds (window + cache) */
  sl__rows *_Atomic rows;
  /* unordered and fused: the next ticket to hand on, the tokens held */
  uint64_t ticket;
  sl__held *held;
  size_t nheld, capheld;
} sl__engine_stage;

/* The base's settings, then the engine's (ops with ud = the state). */
typedef struct sl__engine_stage_cfg {
  const sl__engine_stage_hooks *hooks;
  bool one_to_one, lazy;
  bool fusable; /* process ends with sl__engine_stage_out */
  uint64_t ignore_cap;
  const char *what; /* the stage in messages ("map (x.lua:3)"), borrowed */
  const sl__engine_ops *ops;
  sl__engine_opts opts;
} sl__engine_stage_cfg;

/* Fills b (the start of the calloc'd state, up taken) and creates its
 * stopped engine: SL_OK or the error, after which sl__engine_stage_destroy
 * frees the state (call it first thing: the base is then destroyable). */
int sl__engine_stage_init(sl__engine_stage *b, sl_reader *up,
                          const sl__engine_stage_cfg *cfg);

/* Starts the engine of a stage that is not lazy (its first pass). */
int sl__engine_stage_start(sl__engine_stage *b);

/* In process: whether item seq was done before the restore being resumed
 * (drop it: release it and return SL__ENGINE_DROP). */
static inline bool sl__engine_stage_done(sl__engine_stage *b, uint64_t seq) {
  return sl__engine_pos_skip(&b->pos, seq);
}

/* In process, item seq's checked output o (handed over): when the batch
 * above took rows, o written into its row and the row's token in *out
 * (sl__rows_put), else o itself.  Returns SL__ENGINE_OUT. */
int sl__engine_stage_out(sl__engine_stage *b, uint64_t seq, sl_sample *o,
                         sl_sample **out);

int sl__engine_stage_next(void *st, sl_sample **out);
bool sl__engine_stage_rows(void *st, sl__rows *table);
int sl__engine_stage_reset(void *st);
void sl__engine_stage_destroy(void *st);
int sl__engine_stage_length(const sl_reader *r, void *st, uint64_t *n);
int sl__engine_stage_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                          sl__state_out *w);
int sl__engine_stage_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                             sl__state_in *in);
void sl__engine_stage_stop(void *st);
/* The memory budget: the engine's (sl__engine_set_budget). */
void sl__engine_stage_budget(void *st, sl__budget_acct *acct);

/* The ops table of a stage on the engine, named `nm`. */
#define SL__ENGINE_STAGE_OPS(nm, ident)                                        \
  SL__ENGINE_STAGE_OPS_BUDGET(nm, ident, sl__engine_stage_budget)
/* The same with a budget entry of the stage's own (`bud`, which calls
 * sl__engine_stage_budget and charges the stage's own memory too). */
#define SL__ENGINE_STAGE_OPS_BUDGET(nm, ident, bud)                            \
  {                                                                            \
    .name = (nm), .next = sl__engine_stage_next,                               \
    .reset = sl__engine_stage_reset, .destroy = sl__engine_stage_destroy,      \
    .length = sl__engine_stage_length, .save = sl__engine_stage_save,          \
    .restore = sl__engine_stage_restore, .identity = (ident),                  \
    .stop = sl__engine_stage_stop, .rows = sl__engine_stage_rows,              \
    .budget = (bud)                                                            \
  }

/* The reader of a stage on the engine: sl__stage_wrap with its counters. */
int sl__engine_stage_wrap(const sl__stage_ops *ops, sl__engine_stage *b,
                          sl_schema *schema, sl_reader **out);

#endif
