/*
 * bucket_batch.c - sl_bucket_batch: batches of samples of similar length
 * (tf.data's bucket_by_sequence_length).
 *
 * A sample whose length field has L values goes to bucket i, the first
 * with L < boundaries[i] (the last bucket when none).  When bucket i holds
 * batch_sizes[i] samples they leave as one padded batch (padded_batch.c's
 * assembly: variable fields padded to the longest, or to boundaries[i] - 1
 * with pad_to_bucket, followed by their lengths).  A boundary of 0 is
 * accepted, as tf.data accepts it: its bucket (L < 0) never holds a sample.  At
 * the end of the pass the partial buckets leave in bucket order, unless
 * drop_remainder.
 *
 * There is no random draw: the batches are a function of the input order.
 * Position: which samples wait in which bucket depends on every sample
 * before, so a saved state is the position alone and the restore re-reads
 * the pass up to it (gather.h).
 */
#include "lm/lm.h"

#include <stdio.h>

typedef struct bucket_state {
  sl_reader *up; /* first: sl__gather_save_reread_up */
  int field;
  size_t nb; /* buckets: nboundaries + 1 */
  int64_t *bounds;
  sl__gather *b; /* per bucket (no upstream): its batch size and samples */
  int pad_to_bucket, drop;
  sl__padplan plan;
  bool ended;
  size_t flush; /* at the end: the next bucket to flush */
  uint64_t seen;
} bucket_state;

static void drop_all(bucket_state *s) {
  for (size_t i = 0; i < s->nb; i++)
    sl__gather_release(&s->b[i]);
}

static int emit(bucket_state *s, size_t i, sl_sample **out) {
  int64_t to = s->pad_to_bucket && i + 1 < s->nb ? s->bounds[i] - 1 : 0;
  int rc = sl__padplan_build(&s->plan, s->b[i].held, s->b[i].nheld, to, out);
  sl__gather_release(&s->b[i]);
  return rc;
}

static int bucket_next(void *st, sl_sample **out) {
  bucket_state *s = st;
  while (!s->ended) {
    sl_sample *smp = NULL;
    int rc = sl_reader_next(s->up, &smp);
    if (rc == SL_EOF) {
      s->ended = true;
      break;
    }
    if (rc < 0) return rc;
    rc = sl__padplan_check(&s->plan, smp, s->seen++);
    if (rc < 0) {
      sl_sample_release(smp);
      return rc;
    }
    int64_t len = sl__field_len(smp, s->field);
    size_t i = 0;
    while (i + 1 < s->nb && len >= s->bounds[i])
      i++;
    sl__gather *bk = &s->b[i];
    bk->held[bk->nheld++] = smp;
    if (bk->nheld == bk->n) return emit(s, i, out);
  }
  while (s->flush < s->nb && (s->b[s->flush].nheld == 0 || s->drop))
    sl__gather_release(&s->b[s->flush++]);
  if (s->flush == s->nb) return SL_EOF;
  return emit(s, s->flush++, out);
}

static void clear(bucket_state *s) {
  drop_all(s);
  s->ended = false;
  s->flush = 0;
  s->seen = 0;
}

static int bucket_reset(void *st) {
  bucket_state *s = st;
  clear(s);
  return sl_reader_reset(s->up);
}

static void bucket_destroy(void *st) {
  bucket_state *s = st;
  if (!s) return;
  for (size_t i = 0; s->b && i < s->nb; i++)
    sl__gather_fini(&s->b[i]);
  sl__free(s->b);
  sl__free(s->bounds);
  sl__padplan_fini(&s->plan);
  sl_reader_destroy(s->up);
  sl__free(s);
}

static int bucket_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                          sl__state_in *in) {
  bucket_state *s = st;
  clear(s);
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, s->up));
  return sl__state_replay(bucket_next, s, k, "bucket_batch");
}

static void bucket_identity(const sl_reader *r, void *st, char *buf,
                            size_t cap) {
  const bucket_state *s = st;
  int n = snprintf(buf, cap, "length=%s pad_to_bucket=%d drop=%d buckets=",
                   sl_schema_field_name(s->plan.in, s->field), s->pad_to_bucket,
                   s->drop);
  for (size_t i = 0; i < s->nb && n >= 0 && (size_t)n < cap; i++)
    n += snprintf(buf + n, cap - (size_t)n, "%s<%lld:%zu", i ? "," : "",
                  i + 1 < s->nb ? (long long)s->bounds[i] : -1LL, s->b[i].n);
}

static const sl__stage_ops bucket_ops = {
    .name = "bucket_batch",
    .next = bucket_next,
    .reset = bucket_reset,
    .destroy = bucket_destroy,
    .save = sl__gather_save_reread_up,
    .restore = bucket_restore,
    .identity = bucket_identity,
};

static int setup(bucket_state *s, const sl_bucket_batch_opts *o) {
  const sl_schema *in = sl_reader_schema(s->up);
  SL_RETURN_ERROR_IF(!o->batch_sizes, SL_EINVAL,
                     "bucket_batch: batch_sizes are required (one more than "
                     "the boundaries)");
  SL_RETURN_ERROR_IF(o->nboundaries && !o->boundaries, SL_EINVAL,
                     "bucket_batch: NULL boundaries");
  SL_RETURN_ERROR_IF(o->nboundaries > 4096, SL_EINVAL,
                     "bucket_batch: %zu boundaries (at most 4096)",
                     o->nboundaries);
  for (size_t i = 0; i < o->nboundaries; i++)
    SL_RETURN_ERROR_IF(o->boundaries[i] < 0 ||
                           (i && o->boundaries[i] <= o->boundaries[i - 1]),
                       SL_EINVAL,
                       "bucket_batch: boundaries must be increasing and >= "
                       "0 (boundary %zu is %lld)",
                       i, (long long)o->boundaries[i]);
  s->nb = o->nboundaries + 1;
  for (size_t i = 0; i < s->nb; i++)
    SL_RETURN_ERROR_IF(o->batch_sizes[i] < 1 ||
                           o->batch_sizes[i] > (size_t)INT32_MAX,
                       SL_EINVAL,
                       "bucket_batch: batch size %zu of bucket %zu must be "
                       "in [1, 2^31)",
                       o->batch_sizes[i], i);
  if (o->length) {
    s->field = sl_schema_find(in, o->length);
    SL_RETURN_ERROR_IF(s->field < 0, SL_EINVAL,
                       "bucket_batch: no field '%s' upstream", o->length);
    SL_RETURN_ERROR_IF(!sl_schema_field_is_var(in, s->field), SL_EINVAL,
                       "bucket_batch: field '%s' has a fixed shape: its "
                       "length does not vary",
                       o->length);
  } else {
    s->field = 0;
    while (s->field < sl_schema_nfields(in) &&
           !sl_schema_field_is_var(in, s->field))
      s->field++;
    SL_RETURN_ERROR_IF(s->field == sl_schema_nfields(in), SL_EINVAL,
                       "bucket_batch: upstream has no variable field");
  }
  s->bounds = sl__calloc(s->nb, sizeof *s->bounds);
  s->b = sl__calloc(s->nb, sizeof *s->b);
  SL_RETURN_ERROR_IF(!s->bounds || !s->b, SL_ENOMEM,
                     "bucket_batch: cannot allocate");
  for (size_t i = 0; i < s->nb; i++) {
    s->bounds[i] = i < o->nboundaries ? o->boundaries[i] : INT64_MAX;
    SL_RETURN_ERROR_IF(!sl__gather_init(&s->b[i], NULL, o->batch_sizes[i], 0),
                       SL_ENOMEM, "bucket_batch: cannot allocate");
  }
  return sl__padplan_init(&s->plan, "bucket_batch", in, SL_DIM_VAR, 0, o->pad,
                          o->npad);
}

int sl_bucket_batch(sl_reader *up, const sl_bucket_batch_opts *opts,
                    sl_reader **out) {
  SL_DECORATOR_ARGS("bucket_batch", up, out);
  sl_bucket_batch_opts o = SL_BUCKET_BATCH_OPTS_INIT;
  int rc = opts ? sl__opts_copy("sl_bucket_batch_opts", &o, sizeof o, opts)
                : sl_set_error(SL_EINVAL, "bucket_batch: NULL options");
  if (rc < 0) return sl__fail_with_upstream(up, rc);
  bucket_state *s = sl__calloc(1, sizeof *s);
  if (!s)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "bucket_batch: cannot allocate"));
  s->up = up;
  s->pad_to_bucket = o.pad_to_bucket != 0;
  s->drop = o.drop_remainder != 0;
  rc = setup(s, &o);
  if (rc < 0) {
    bucket_destroy(s);
    return rc;
  }
  return sl__stage_wrap(&bucket_ops, s, s->plan.out, &s->up, NULL, out);
}
