/* source_array.c - a reader over samples held in memory, replayed each pass. */
#include "stages/stage.h"

typedef struct array_state {
  sl_sample **samples; /* each retained */
  size_t n, pos;
} array_state;

static int array_next(void *st, sl_sample **out) {
  array_state *a = st;
  if (a->pos == a->n) return SL_EOF;
  *out = sl_sample_retain(a->samples[a->pos++]);
  return SL_OK;
}

static int array_reset(void *st) {
  ((array_state *)st)->pos = 0;
  return SL_OK;
}

static void array_destroy(void *st) {
  array_state *a = st;
  if (!a) return;
  for (size_t i = 0; i < a->n; i++)
    sl_sample_release(a->samples[i]);
  sl__free(a->samples);
  sl__free(a);
}

static int array_length(const sl_reader *r, void *st, uint64_t *n) {
  *n = ((array_state *)st)->n;
  return SL_OK;
}

static int array_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                         sl__state_in *in) {
  array_state *a = st;
  SL_FORWARD_IF_ERROR(sl__state_check_at("array", k, a->n));
  a->pos = (size_t)k;
  return SL_OK;
}

static int array_fetch(sl_reader *r, void *st, uint64_t pass, uint64_t pos,
                       sl_sample **out) {
  array_state *a = st;
  if (!out) return SL_OK;
  SL_RETURN_ERROR_IF(pos >= a->n, SL_ECORRUPT,
                     "array: sample %llu is past its %zu samples",
                     (unsigned long long)pos, a->n);
  *out = sl_sample_retain(a->samples[pos]);
  return SL_OK;
}

static void array_identity(const sl_reader *r, void *st, char *buf,
                           size_t cap) {
  snprintf(buf, cap, "%zu samples", ((array_state *)st)->n);
}

static const sl__stage_ops array_ops = {
    .name = "array",
    .next = array_next,
    .reset = array_reset,
    .destroy = array_destroy,
    .length = array_length,
    .save = sl__state_save_position,
    .restore = array_restore,
    .identity = array_identity,
    .fetch = array_fetch,
    .fetch_shared = sl__fetch_shared_always,
};

int sl_reader_from_array(sl_sample *const *samples, size_t n, sl_schema *schema,
                         sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "array: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(n && !samples, SL_EINVAL, "array: NULL sample array");
  SL_RETURN_ERROR_IF(!n && !schema, SL_EINVAL,
                     "array: an empty array needs a schema");
  for (size_t i = 0; i < n; i++)
    SL_RETURN_ERROR_IF(!samples[i], SL_EINVAL, "array: sample %zu is NULL", i);
  const sl_schema *want = schema ? schema : sl_sample_schema(samples[0]);
  for (size_t i = 0; i < n; i++) {
    if (!sl_schema_equal(want, sl_sample_schema(samples[i]))) {
      char a[256], b[256];
      return sl_set_error(
          SL_ESHAPE, "array: sample %zu has schema %s, expected %s", i,
          sl_schema_describe(sl_sample_schema(samples[i]), a, sizeof a),
          sl_schema_describe(want, b, sizeof b));
    }
  }
  array_state *a = sl__calloc(1, sizeof *a);
  sl_sample **copy = sl__malloc((n ? n : 1) * sizeof *copy);
  if (!a || !copy) {
    sl__free(a);
    sl__free(copy);
    return sl_set_error(SL_ENOMEM, "array: cannot allocate %zu samples", n);
  }
  for (size_t i = 0; i < n; i++)
    copy[i] = sl_sample_retain(samples[i]);
  a->samples = copy;
  a->n = n;
  return sl__stage_new(&array_ops, a, (sl_schema *)want, NULL, 0, NULL, out);
}
