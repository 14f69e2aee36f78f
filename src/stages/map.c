/*
 * map.c - applies a callback to each sample.
 *
 * Protocol: fn(ud, in, &out) takes the upstream sample and stores a result in
 * out, which may be `in` itself (the identity costs one call and a schema
 * pointer comparison).  Every result is checked against the output schema:
 * the sample's schema must equal it, and every field must fit its dtype and
 * shape, so a callback bug is reported at the stage that made it as
 * SL_ESHAPE "map: sample N: ...", N counted from 0 in each pass.  A callback
 * error ends the pass with the callback's message (or one naming the code
 * when it set none).  free_ud(ud) runs once, when the reader is destroyed or
 * its construction fails.
 */
#include "stages/stage.h"

typedef struct map_state {
  sl_reader *up;
  sl_map_fn fn;
  void *ud;
  sl_free_fn free_ud;
  const sl_schema *schema; /* the output schema, kept alive by our reader */
  uint64_t index;          /* samples mapped in this pass */
} map_state;

/* Turns a callback's failure into the error the consumer sees, keeping the
 * callback's own message when it set one. */
static int callback_error(int rc, uint64_t index) {
  unsigned long long i = (unsigned long long)index;
  if (rc == SL_EOF || rc > 0)
    return sl_set_error(SL_EINVAL,
                        "map: sample %llu: callback returned %d (%s), not "
                        "SL_OK or an error",
                        i, rc, sl_err_name(rc));
  return sl__error_keep(rc, "map: sample %llu: callback returned %s", i,
                        sl_err_name(rc));
}

/* Checks a result against the output schema `want`.  The pointer comparison
 * inside sl_schema_equal makes the common case (the callback reused the
 * schema) cheap; the per-field check catches fields the callback left
 * unfilled or filled with the wrong dims. */
static int check_output(const sl_schema *want, const sl_sample *s,
                        uint64_t index) {
  const sl_schema *got = sl_sample_schema(s);
  if (!sl_schema_equal(got, want)) {
    char a[256], b[256];
    return sl_set_error(SL_ESHAPE,
                        "map: sample %llu: output schema %s does not match "
                        "the declared %s",
                        (unsigned long long)index,
                        sl_schema_describe(got, a, sizeof a),
                        sl_schema_describe(want, b, sizeof b));
  }
  int n = sl_schema_nfields(want);
  for (int i = 0; i < n; i++) {
    int rc = sl_schema_check(want, i, sl_sample_at_const(s, i));
    if (rc < 0)
      return sl_wrap_error(rc, "map: sample %llu", (unsigned long long)index);
  }
  return SL_OK;
}

int sl__map_call(sl_map_fn fn, void *ud, const sl_schema *want, sl_sample *in,
                 uint64_t index, sl_sample **out) {
  sl_sample *res = NULL;
  /* Cleared so that a stale message with the same code is never taken for
   * the callback's. */
  sl_clear_error();
  int rc = fn(ud, in, &res);
  /* On failure the callback has released `in`; `res` is ignored. */
  if (rc != SL_OK) return callback_error(rc, index);
  if (!res)
    return sl_set_error(SL_EINVAL,
                        "map: sample %llu: callback returned SL_OK without a "
                        "sample",
                        (unsigned long long)index);
  rc = check_output(want, res, index);
  if (rc < 0) {
    sl_sample_release(res);
    return rc;
  }
  *out = res;
  return SL_OK;
}

static int map_next(void *st, sl_sample **out) {
  map_state *m = st;
  sl_sample *in;
  int rc = sl_reader_next(m->up, &in);
  if (rc != SL_OK) return rc;
  return sl__map_call(m->fn, m->ud, m->schema, in, m->index++, out);
}

static int map_reset(void *st) {
  map_state *m = st;
  m->index = 0;
  return sl_reader_reset(m->up);
}

static void map_destroy(void *st) {
  map_state *m = st;
  if (!m) return;
  sl_reader_destroy(m->up);
  if (m->free_ud) m->free_ud(m->ud);
  sl__free(m);
}

static int map_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  map_state *m = st;
  SL_FORWARD_IF_ERROR(sl__state_restore_up_at(in, m->up, k));
  m->index = k;
  return SL_OK;
}

static const sl__stage_ops map_ops = {
    .name = "map",
    .next = map_next,
    .reset = map_reset,
    .destroy = map_destroy,
    .length = sl__length_of_upstream,
    .save = sl__state_save_1to1,
    .restore = map_restore,
};

int sl_map(sl_reader *up, sl_map_fn fn, void *ud, sl_free_fn free_ud,
           sl_schema *schema, sl_reader **out) {
  /* The stage owns ud from the start, so every early failure frees it. */
  if ((!out || !up || !fn) && free_ud) free_ud(ud);
  SL_DECORATOR_ARGS("map", up, out);
  if (!fn)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "map: NULL callback"));
  map_state *m = sl__decorator_state("map", up, sizeof *m);
  if (!m) {
    if (free_ud) free_ud(ud);
    return SL_ENOMEM;
  }
  m->fn = fn;
  m->ud = ud;
  m->free_ud = free_ud;
  /* Once made, our reader keeps the output schema alive for m->schema. */
  m->schema = schema ? schema : sl_reader_schema(up);
  return sl__stage_wrap(&map_ops, m, schema, &m->up, NULL, out);
}
