/*
 * engine_stage.c - the reader side of a stage run by the engine
 * (engine_stage.h has the protocol).
 */
#include "stages/engine_stage.h"

#include <stdlib.h>
#include <string.h>

/* A skipped item, on the consumer's thread in delivery order. */
static int skipped(void *ud, uint64_t seq, const char *note) {
  sl__engine_stage *b = ud;
  if (!b->ordered) sl__engine_pos_dropped(&b->pos, seq);
  sl__rows *rows = atomic_load_explicit(&b->rows, memory_order_relaxed);
  if (rows && b->ordered) sl__rows_rebase(rows, 1); /* the outputs after it
                                                      move up */
  return sl__ignore_error(sl__engine_counters(b->engine), &b->ignored,
                          b->ignore_cap, b->hooks->skip_code, b->pos.what,
                          b->hooks->skipped, b->hooks->option, note);
}

int sl__engine_stage_init(sl__engine_stage *b, sl_reader *up,
                          const sl__engine_stage_cfg *cfg) {
  b->up = up;
  b->hooks = cfg->hooks;
  b->one_to_one = cfg->one_to_one;
  b->lazy = cfg->lazy;
  b->ordered = cfg->opts.ordered;
  b->ignore_cap = cfg->ignore_cap;
  b->fusable = cfg->fusable;
  /* as engine.c's default window, plus the consumer's cache */
  b->inflight = (cfg->opts.window ? cfg->opts.window
                                  : SL_MAX(128, 32 * (size_t)sl__threads_resolve(
                                                     cfg->opts.threads))) +
                16;
  atomic_init(&b->rows, NULL);
  /* A stage that may leave items out is logged as a filter. */
  sl__engine_pos_init(&b->pos,
                      !b->ordered     ? SL__EPOS_UNORDERED
                      : b->one_to_one ? SL__EPOS_1TO1
                                      : SL__EPOS_LOG,
                      cfg->what);
  SL_FORWARD_IF_ERROR(sl__engine_create(cfg->ops, b, &cfg->opts, &b->engine));
  /* Its consumer takes item after item (a batch above, the next stage):
   * woken per several results when the workers are the slower side
   * (SLUICE_GATHER=0: per deposit, for comparisons). */
  const char *env = getenv("SLUICE_GATHER");
  sl__engine_set_gather(b->engine, !(env && strcmp(env, "0") == 0));
  if (b->ignore_cap) sl__engine_on_skip(b->engine, skipped);
  return SL_OK;
}

int sl__engine_stage_start(sl__engine_stage *b) {
  SL_FORWARD_IF_ERROR(sl__engine_start(b->engine));
  b->started = true;
  return SL_OK;
}

/* Hands on item seq's result s (id: its seq, or its ticket unordered). */
static int deliver(sl__engine_stage *b, sl__rows *rows, uint64_t seq,
                   uint64_t id, sl_sample *s, sl_sample **out) {
  sl__engine_pos_delivered(&b->pos, seq);
  if (rows) sl__rows_delivered(rows, id);
  *out = s;
  /* a row token: an output checked before it was written */
  if (!b->hooks->took || (rows && sl__rows_token(rows, s))) return SL_OK;
  return b->hooks->took(b, seq, out);
}

/* Releases the tokens held for their tickets (a new pass). */
static void drop_held(sl__engine_stage *b) {
  for (size_t i = 0; i < b->nheld; i++)
    sl_sample_release(b->held[i].s);
  b->nheld = 0;
  b->ticket = 0;
}

/* Unordered and fused (rows.h): the results in ticket order, those that
 * came before their turn held; a result that is not a token at once. */
static int ticketed_next(sl__engine_stage *b, sl__rows *rows,
                         sl_sample **out) {
  for (;;) {
    for (size_t i = 0; i < b->nheld; i++) {
      if (b->held[i].ticket != b->ticket) continue;
      sl__held h = b->held[i];
      b->held[i] = b->held[--b->nheld];
      b->ticket++;
      return deliver(b, rows, h.seq, h.ticket, h.s, out);
    }
    sl_sample *s = NULL;
    int rc = sl__engine_next(b->engine, &s);
    if (rc == SL_EOF && b->nheld) { /* not expected: a ticket went missing */
      uint64_t low = UINT64_MAX;
      for (size_t i = 0; i < b->nheld; i++)
        low = SL_MIN(low, b->held[i].ticket);
      b->ticket = low;
      continue;
    }
    SL_FORWARD_IF_ERROR(rc);
    uint64_t seq = sl__engine_last_seq(b->engine), t;
    if (!sl__rows_ticket(rows, seq, &t)) {
      sl__rows_rebase(rows, UINT64_MAX); /* a place, no ticket */
      return deliver(b, rows, seq, b->ticket, s, out);
    }
    if (t == b->ticket) {
      b->ticket++;
      return deliver(b, rows, seq, t, s, out);
    }
    if (b->nheld == b->capheld) {
      size_t cap = b->capheld ? 2 * b->capheld : 64;
      sl__held *h = sl__realloc(b->held, cap * sizeof *h);
      if (!h) {
        sl_sample_release(s);
        return sl_set_error(SL_ENOMEM, "%s: cannot hold %zu outputs",
                            b->pos.what, cap);
      }
      b->held = h;
      b->capheld = cap;
    }
    b->held[b->nheld++] = (sl__held){t, seq, s};
  }
}

int sl__engine_stage_next(void *st, sl_sample **out) {
  sl__engine_stage *b = st;
  if (!b->started) SL_FORWARD_IF_ERROR(sl__engine_stage_start(b));
  sl__rows *rows = atomic_load_explicit(&b->rows, memory_order_relaxed);
  if (rows && !b->ordered) return ticketed_next(b, rows, out);
  sl_sample *s = NULL;
  SL_FORWARD_IF_ERROR(sl__engine_next(b->engine, &s));
  uint64_t seq = sl__engine_last_seq(b->engine);
  return deliver(b, rows, seq, seq, s, out);
}

void sl__engine_stage_budget(void *st, sl__budget_acct *acct) {
  sl__engine_set_budget(((sl__engine_stage *)st)->engine, acct);
}

bool sl__engine_stage_rows(void *st, sl__rows *table) {
  sl__engine_stage *b = st;
  if (!b->fusable || sl__rows_window(table, b->inflight,
                                     sl__engine_counters(b->engine),
                                     !b->ordered) < 0)
    return false;
  atomic_store_explicit(&b->rows, table, memory_order_release);
  return true;
}

int sl__engine_stage_out(sl__engine_stage *b, uint64_t seq, sl_sample *o,
                         sl_sample **out) {
  sl__rows *rows = atomic_load_explicit(&b->rows, memory_order_acquire);
  size_t row = rows ? sl_sample_nbytes(o) : 0;
  sl_sample *token = rows ? sl__rows_put(rows, seq, o) : NULL;
  if (token) sl__engine_result_bytes(row); /* not the whole batch's */
  *out = token ? token : o;
  return SL__ENGINE_OUT;
}

/* Stops the engine and the fused rows of its pass, whose item seq will be
 * output seq - base (rows.h). */
static void stop(sl__engine_stage *b, uint64_t base) {
  sl__engine_stop(b->engine);
  drop_held(b);
  sl__rows *rows = atomic_load_explicit(&b->rows, memory_order_relaxed);
  if (rows) sl__rows_clear(rows, base);
}

/* Stops the engine and forgets the pass, whose first item will be
 * `start`. */
static void new_pass(sl__engine_stage *b, uint64_t start) {
  stop(b, 0);
  b->started = false;
  sl__engine_pos_reset(&b->pos);
  b->ignored = 0;
  if (b->hooks->new_pass) b->hooks->new_pass(b, start);
}

int sl__engine_stage_reset(void *st) {
  sl__engine_stage *b = st;
  new_pass(b, 0);
  b->pass++; /* counts even if the reset fails, as shuffle's passes */
  SL_FORWARD_IF_ERROR(sl_reader_reset(b->up));
  return b->lazy ? SL_OK : sl__engine_stage_start(b);
}

void sl__engine_stage_destroy(void *st) {
  sl__engine_stage *b = st;
  if (!b) return;
  if (b->engine) new_pass(b, 0);
  sl__engine_destroy(b->engine); /* joined: each worker's fini */
  sl_reader_destroy(b->up);
  sl__engine_pos_fini(&b->pos);
  sl__free(b->held);
  b->hooks->free(st);
}

int sl__engine_stage_length(const sl_reader *r, void *st, uint64_t *n) {
  const sl__engine_stage *b = st;
  SL_RETURN_ERROR_IF(!b->one_to_one, SL_EUNSUPPORTED,
                     "%s: the number of samples a pass yields is not known "
                     "before reading it%s",
                     sl_reader_name(r),
                     b->hooks->length_why ? b->hooks->length_why : "");
  return sl__upstream_length(r, 0, n);
}

int sl__engine_stage_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                          sl__state_out *w) {
  sl__engine_stage *b = st;
  return sl__engine_pos_save(&b->pos, b->engine, r, b->up, pass, k, w);
}

/* Errors before the restored position are not counted; ctx.epoch is the
 * restored pass's. */
int sl__engine_stage_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                             sl__state_in *in) {
  sl__engine_stage *b = st;
  stop(b, 0);
  b->pass = pass;
  uint64_t start = 0;
  int rc = sl__engine_pos_restore(&b->pos, b->up, k, in, &start);
  /* output k is item start (or, replayed, the pass starts at item 0);
   * unordered, ticket 0 */
  stop(b, !b->ordered ? 0 - k : start > k ? start - k : 0);
  b->started = false;
  b->ignored = 0;
  if (b->hooks->new_pass) b->hooks->new_pass(b, start);
  SL_FORWARD_IF_ERROR(rc);
  b->started = true;
  return sl__engine_pos_resume(&b->pos, b->engine, k, sl__engine_stage_next, b);
}

void sl__engine_stage_stop(void *st) {
  sl__engine_signal_stop(((sl__engine_stage *)st)->engine);
}

int sl__engine_stage_wrap(const sl__stage_ops *ops, sl__engine_stage *b,
                          sl_schema *schema, sl_reader **out) {
  return sl__stage_wrap(ops, b, schema, &b->up, sl__engine_counters(b->engine),
                        out);
}
