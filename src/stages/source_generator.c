/* source_generator.c - a reader driven by a C generator callback. */
#include "stages/stage.h"

typedef struct gen_state {
  sl_gen_next_fn next;
  sl_gen_reset_fn reset;
  sl_gen_free_fn free_ud;
  void *ud;
  const sl_schema *schema;
} gen_state;

static int gen_next(void *st, sl_sample **out) {
  gen_state *g = st;
  int rc = g->next(g->ud, out);
  if (rc != SL_OK) return rc;
  /* Generators are user code: check what they yield against the schema. */
  if (!sl_schema_equal(sl_sample_schema(*out), g->schema)) {
    char a[256], b[256];
    return sl_set_error(
        SL_ESHAPE, "generator: sample schema %s does not match declared %s",
        sl_schema_describe(sl_sample_schema(*out), a, sizeof a),
        sl_schema_describe(g->schema, b, sizeof b));
  }
  for (int i = 0; i < sl_schema_nfields(g->schema); i++) {
    int rc2 = sl_schema_check(g->schema, i, sl_sample_at(*out, i));
    if (rc2 < 0) return sl_wrap_error(rc2, "generator");
  }
  return SL_OK;
}

static int gen_reset(void *st) {
  gen_state *g = st;
  if (!g->reset)
    return sl_set_error(SL_EUNSUPPORTED,
                        "generator: no reset callback was given");
  return g->reset(g->ud);
}

static void gen_destroy(void *st) {
  gen_state *g = st;
  if (!g) return;
  if (g->free_ud) g->free_ud(g->ud);
  sl__free(g);
}

/* A generator is opaque: restored by calling its reset and replaying the
 * pass up to the position (docs/RESUME.md: its callbacks must give the same
 * samples again). */
static int gen_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  SL_FORWARD_IF_ERROR(gen_reset(st));
  SL_FORWARD_IF_ERROR(sl__state_replay(gen_next, st, k, "generator"));
  return SL_OK;
}

static const sl__stage_ops gen_ops = {
    .name = "generator",
    .next = gen_next,
    .reset = gen_reset,
    .destroy = gen_destroy,
    .save = sl__state_save_position,
    .restore = gen_restore,
};

int sl_reader_from_generator(sl_schema *schema, sl_gen_next_fn next,
                             sl_gen_reset_fn reset, sl_gen_free_fn free_ud,
                             void *ud, sl_reader **out) {
  if (!out || !schema || !next) {
    if (free_ud) free_ud(ud);
    if (out) *out = NULL;
    return sl_set_error(SL_EINVAL, "generator: NULL %s",
                        !out      ? "out pointer"
                        : !schema ? "schema"
                                  : "next");
  }
  gen_state *g = sl__calloc(1, sizeof *g);
  if (!g) {
    if (free_ud) free_ud(ud);
    *out = NULL;
    return sl_set_error(SL_ENOMEM, "generator: cannot allocate");
  }
  g->next = next;
  g->reset = reset;
  g->free_ud = free_ud;
  g->ud = ud;
  g->schema = schema; /* the reader keeps it alive */
  return sl__stage_new(&gen_ops, g, schema, NULL, 0, NULL, out);
}
