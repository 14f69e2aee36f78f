/*
 * filter.c - keeps the samples a callback accepts.
 *
 * Protocol: each upstream sample is shown to fn(ud, sample): a positive
 * result keeps it, 0 drops (and releases) it and reads on, a negative result
 * is an error that ends the pass.  The callback sets its own message with
 * sl_set_error; when it returns an error code without one, the stage names
 * the code and the sample index (counted from 0 in each pass).  free_ud(ud)
 * runs once, when the reader is destroyed or its construction fails.
 */
#include "stages/stage.h"

typedef struct filter_state {
  sl_reader *up;
  sl_filter_fn fn;
  void *ud;
  sl_free_fn free_ud;
  uint64_t index;    /* upstream samples seen in this pass */
  sl__state_log log; /* where the outputs of this pass came from */
} filter_state;

int sl__filter_callback_error(int rc, uint64_t index) {
  if (rc == SL_EOF)
    return sl_set_error(SL_EINVAL,
                        "filter: callback returned SL_EOF for sample %llu "
                        "(return 0 to drop a sample)",
                        (unsigned long long)index);
  return sl__error_keep(rc, "filter: callback returned %s for sample %llu",
                        sl_err_name(rc), (unsigned long long)index);
}

static int filter_next(void *st, sl_sample **out) {
  filter_state *f = st;
  for (;;) {
    sl_sample *s;
    int rc = sl_reader_next(f->up, &s);
    if (rc != SL_OK) return rc;
    uint64_t index = f->index++;
    /* Cleared so that a stale message with the same code is never taken
     * for the callback's. */
    sl_clear_error();
    rc = f->fn(f->ud, s);
    if (rc > 0) {
      sl__state_log_note(&f->log, index);
      *out = s;
      return SL_OK;
    }
    sl_sample_release(s);
    if (rc < 0) return sl__filter_callback_error(rc, index);
  }
}

static int filter_reset(void *st) {
  filter_state *f = st;
  f->index = 0;
  f->log.count = 0;
  return sl_reader_reset(f->up);
}

static void filter_destroy(void *st) {
  filter_state *f = st;
  if (!f) return;
  sl_reader_destroy(f->up);
  if (f->free_ud) f->free_ud(f->ud);
  sl__free(f);
}

/* Payload: the upstream position of the next sample, or UINT64_MAX when
 * the position is too far behind the log: then the restore replays the pass
 * from its start through the callback. */
static int filter_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_out *w) {
  filter_state *f = st;
  uint64_t u;
  /* the log is this pass's: an earlier pass replays */
  bool found =
      pass == sl__reader_pass(r) && sl__state_log_find(&f->log, k, &u);
  uint64_t up_pass = sl__state_up_pass(r, f->up, pass);
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, found ? u : UINT64_MAX));
  if (found) return sl__state_save_up(w, f->up, up_pass, u);
  return sl__state_save_up_replayed(w, f->up, up_pass, 0);
}

static int filter_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                          sl__state_in *in) {
  filter_state *f = st;
  uint64_t u;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, f->up));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &u));
  f->log.count = 0;
  f->index = 0;
  if (u != UINT64_MAX) {
    f->index = u;
    f->log.count = k;
    if (k) f->log.up[(k - 1) % SL__STATE_LOG] = u - 1;
    return SL_OK;
  }
  SL_FORWARD_IF_ERROR(sl__state_replay(filter_next, f, k, "filter"));
  return SL_OK;
}

static const sl__stage_ops filter_ops = {
    .name = "filter",
    .next = filter_next,
    .reset = filter_reset,
    .destroy = filter_destroy,
    .save = filter_save,
    .restore = filter_restore,
};

int sl_filter(sl_reader *up, sl_filter_fn fn, void *ud, sl_free_fn free_ud,
              sl_reader **out) {
  /* The stage owns ud from the start, so every early failure frees it. */
  if ((!out || !up || !fn) && free_ud) free_ud(ud);
  SL_DECORATOR_ARGS("filter", up, out);
  if (!fn)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "filter: NULL callback"));
  filter_state *f = sl__decorator_state("filter", up, sizeof *f);
  if (!f) {
    if (free_ud) free_ud(ud);
    return SL_ENOMEM;
  }
  f->fn = fn;
  f->ud = ud;
  f->free_ud = free_ud;
  return sl__stage_wrap(&filter_ops, f, NULL, &f->up, NULL, out);
}
