/* source_range.c - 0..n-1 as samples with one i64 field "i". */
#include "stages/stage.h"

typedef struct range_state {
  int64_t n, i;
  sl_schema *schema; /* retained */
} range_state;

/* Sample i (reads nothing but n and the schema: any thread). */
static int range_make(const range_state *r, int64_t i, sl_sample **out) {
  sl_sample *s = sl_sample_new(r->schema);
  if (!s) return SL_ENOMEM;
  void *data;
  int rc = sl_sample_alloc(s, 0, 0, NULL, &data);
  if (rc < 0) {
    sl_sample_release(s);
    return sl_wrap_error(rc, "range: sample %lld", (long long)i);
  }
  *(int64_t *)data = i;
  *out = s;
  return SL_OK;
}

static int range_next(void *st, sl_sample **out) {
  range_state *r = st;
  if (r->i >= r->n) return SL_EOF;
  SL_FORWARD_IF_ERROR(range_make(r, r->i, out));
  r->i++;
  return SL_OK;
}

static int range_reset(void *st) {
  ((range_state *)st)->i = 0;
  return SL_OK;
}

static void range_destroy(void *st) {
  range_state *r = st;
  if (r) sl__stage_free(r, NULL, r->schema);
}

static int range_length(const sl_reader *r, void *st, uint64_t *n) {
  *n = (uint64_t)((range_state *)st)->n;
  return SL_OK;
}

static int range_restore(sl_reader *rd, void *st, uint64_t pass, uint64_t k,
                         sl__state_in *in) {
  range_state *r = st;
  SL_FORWARD_IF_ERROR(sl__state_check_at("range", k, (uint64_t)r->n));
  r->i = (int64_t)k;
  return SL_OK;
}

static int range_fetch(sl_reader *rd, void *st, uint64_t pass, uint64_t pos,
                       sl_sample **out) {
  range_state *r = st;
  if (!out) return SL_OK;
  SL_RETURN_ERROR_IF(pos >= (uint64_t)r->n, SL_ECORRUPT,
                     "range: sample %llu is past its %lld samples",
                     (unsigned long long)pos, (long long)r->n);
  return range_make(r, (int64_t)pos, out);
}

static void range_identity(const sl_reader *rd, void *st, char *buf,
                           size_t cap) {
  snprintf(buf, cap, "n=%lld", (long long)((range_state *)st)->n);
}

static const sl__stage_ops range_ops = {
    .name = "range",
    .next = range_next,
    .reset = range_reset,
    .destroy = range_destroy,
    .length = range_length,
    .save = sl__state_save_position,
    .restore = range_restore,
    .identity = range_identity,
    .fetch = range_fetch,
    .fetch_shared = sl__fetch_shared_always,
};

int sl_reader_range(int64_t n, sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "range: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(n < 0, SL_EINVAL, "range: n must be >= 0, got %lld",
                     (long long)n);
  range_state *r = sl__calloc(1, sizeof *r);
  SL_RETURN_ERROR_IF(!r, SL_ENOMEM, "range: cannot allocate");
  r->n = n;
  r->schema = sl_schema_new();
  if (!r->schema || sl_schema_add(r->schema, "i", SL_I64, 0, NULL) < 0) {
    range_destroy(r);
    return sl_last_error_code() ? sl_last_error_code() : SL_ENOMEM;
  }
  return sl__stage_new(&range_ops, r, r->schema, NULL, 0, NULL, out);
}
