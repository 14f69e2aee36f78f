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
 * before (a bucket of rare lengths may hold one from the pass's start), so
 * a state holds the buckets' samples themselves (sl__state_put_sample):
 * payload mode 0, the upstream samples read at the position, the flush
 * state, then per bucket its samples (each with its upstream number); the
 * upstream is saved at that count and nothing is read again.  To save at
 * a position behind its last batch (stages above holding batches) the
 * stage keeps the samples of its last BUCKET_HIST batches (references) and
 * the counts at each: the buckets at output k are those samples read
 * before k's count that were still waiting then.  Further behind, mode 1:
 * the upstream at the start of the pass, re-read by the restore
 * (gather.h); so does a state with no payload (saved before mode 0).
 *
 * Memory budget: the rows the buckets gather and the batch built from a
 * bucket are charged as gather.h charges them; the samples of the last
 * batches kept for a save (hist) are the stage's resident bytes once their
 * batch is out (sync_hist: what the hist holds, moved at each batch and
 * released by a reset or the destroy).
 */
#include "lm/lm.h"

#include <stdio.h>

/* batches kept for a save behind: a prefetch(n) above holds up to n + 1
 * and its consumer cache 16 */
#define BUCKET_HIST 32

/* A batch handed out: its bucket and samples (references), or where the
 * stage stood after an output. */
typedef struct bucket_out {
  size_t bucket, n;
  sl_sample **s;
  uint64_t *seq;
  uint64_t bytes; /* the samples' bytes (sl_sample_nbytes) */
} bucket_out;
typedef struct bucket_at {
  uint64_t seen;
  size_t flush;
  bool ended;
} bucket_at;

typedef struct bucket_state {
  sl_reader *up; /* first: sl__gather_save_reread_up */
  int field;
  size_t nb; /* buckets: nboundaries + 1 */
  int64_t *bounds;
  sl__gather *b; /* per bucket (no upstream): its batch size and samples */
  int pad_to_bucket, drop;
  sl__padplan plan;
  bool ended;
  size_t flush;    /* at the end: the next bucket to flush */
  uint64_t seen;   /* upstream samples read this pass */
  uint64_t **seqs; /* per bucket: the upstream number of each held sample */
  uint64_t out;    /* batches handed out this pass */
  bucket_out hist[BUCKET_HIST]; /* batch j at j % BUCKET_HIST */
  bucket_at at[BUCKET_HIST];    /* after output j, at j % BUCKET_HIST */
  /* the memory budget: the account (also the buckets', gather.h), the
   * bytes the hist's samples hold and what the account was charged for
   * them (resident) */
  sl__budget_acct *_Atomic acct;
  uint64_t hist_bytes, hist_charged;
} bucket_state;

/* The account's resident charge becomes what the hist holds. */
static void sync_hist(bucket_state *s) {
  sl__budget_acct *a = atomic_load_explicit(&s->acct, memory_order_acquire);
  if (!a || s->hist_charged == s->hist_bytes) return;
  sl__budget_resident(a, s->hist_charged, s->hist_bytes);
  s->hist_charged = s->hist_bytes;
}

static void drop_hist(bucket_state *s, bucket_out *h) {
  for (size_t j = 0; j < h->n; j++)
    sl_sample_release(h->s[j]);
  h->n = 0;
  s->hist_bytes -= h->bytes;
  h->bytes = 0;
}

static void drop_all(bucket_state *s) {
  for (size_t i = 0; s->b && i < s->nb; i++)
    sl__gather_release(&s->b[i]);
  for (size_t j = 0; j < BUCKET_HIST; j++)
    drop_hist(s, &s->hist[j]);
  sync_hist(s);
}

static int emit(bucket_state *s, size_t i, sl_sample **out) {
  bucket_out *h = &s->hist[s->out % BUCKET_HIST];
  drop_hist(s, h);
  h->bucket = i;
  for (; h->n < s->b[i].nheld; h->n++) {
    h->s[h->n] = sl_sample_retain(s->b[i].held[h->n]);
    h->seq[h->n] = s->seqs[i][h->n];
    h->bytes += sl_sample_nbytes(h->s[h->n]);
  }
  s->hist_bytes += h->bytes;
  int64_t to = s->pad_to_bucket && i + 1 < s->nb ? s->bounds[i] - 1 : 0;
  int rc = sl__padplan_build(&s->plan, s->b[i].held, s->b[i].nheld, to, out);
  if (rc == SL_OK) rc = sl__gather_hand_out(&s->b[i], out);
  sl__gather_release(&s->b[i]);
  sync_hist(s); /* the rows' charge went: the hist's samples, resident */
  return rc;
}

static int next_batch(bucket_state *s, sl_sample **out) {
  while (!s->ended) {
    sl_sample *smp = NULL;
    int rc = sl_reader_next(s->up, &smp);
    if (rc == SL_EOF) {
      s->ended = true;
      break;
    }
    if (rc < 0) return rc;
    uint64_t seq = s->seen;
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
    s->seqs[i][bk->nheld] = seq;
    bk->held[bk->nheld++] = smp;
    /* the memory budget: every bucket's rows, charged to the stage */
    rc = sl__gather_charge(bk, smp, bk->nheld);
    if (rc < 0) return rc;
    if (bk->nheld == bk->n) return emit(s, i, out);
  }
  while (s->flush < s->nb && (s->b[s->flush].nheld == 0 || s->drop))
    sl__gather_release(&s->b[s->flush++]);
  if (s->flush == s->nb) return SL_EOF;
  return emit(s, s->flush++, out);
}

/* The memory budget (sync/budget.h): the rows the buckets hold are
 * charged as they arrive (gather.h), the batch built from a bucket on top
 * as it goes out; the samples of the last batches kept for a save (hist),
 * resident (sync_hist, from the next batch out). */
static void bucket_budget(void *st, sl__budget_acct *acct) {
  bucket_state *s = st;
  for (size_t i = 0; s->b && i < s->nb; i++)
    sl__gather_budget(&s->b[i], acct);
  atomic_store_explicit(&s->acct, acct, memory_order_release);
}

static int bucket_next(void *st, sl_sample **out) {
  bucket_state *s = st;
  int rc = next_batch(s, out);
  if (rc == SL_OK)
    s->at[++s->out % BUCKET_HIST] = (bucket_at){s->seen, s->flush, s->ended};
  return rc;
}

static void clear(bucket_state *s) {
  drop_all(s);
  s->ended = false;
  s->flush = 0;
  s->seen = 0;
  s->out = 0;
  s->at[0] = (bucket_at){0, 0, false};
}

static int bucket_reset(void *st) {
  bucket_state *s = st;
  clear(s);
  return sl_reader_reset(s->up);
}

static void bucket_destroy(void *st) {
  bucket_state *s = st;
  if (!s) return;
  drop_all(s);
  for (size_t i = 0; s->b && i < s->nb; i++)
    sl__gather_fini(&s->b[i]);
  for (size_t i = 0; s->seqs && i < s->nb; i++)
    sl__free(s->seqs[i]);
  for (size_t j = 0; j < BUCKET_HIST; j++)
    SL__FREE(s->hist[j].s, s->hist[j].seq);
  SL__FREE(s->seqs, s->b, s->bounds);
  sl__padplan_fini(&s->plan);
  sl__stage_free(s, s->up, NULL);
}

/* Bucket i's samples at output k (see the top): those of batches k.. that
 * came from it, then those it holds, read before `seen`; each (its number
 * and the sample) to fn, or counted into *n when fn is NULL. */
static int held_at(bucket_state *s, size_t i, uint64_t k, uint64_t seen,
                   sl__state_out *w, uint64_t *n) {
  for (uint64_t j = k; j <= s->out; j++) {
    const bucket_out *h = &s->hist[j % BUCKET_HIST];
    sl_sample *const *v = j < s->out ? h->s : s->b[i].held;
    const uint64_t *q = j < s->out ? h->seq : s->seqs[i];
    size_t m = j < s->out ? (h->bucket == i ? h->n : 0) : s->b[i].nheld;
    for (size_t t = 0; t < m; t++) {
      if (q[t] >= seen) continue;
      if (!w) {
        ++*n;
        continue;
      }
      SL_FORWARD_IF_ERROR(sl__state_put_u64(w, q[t]));
      SL_FORWARD_IF_ERROR(sl__state_put_sample(w, v[t], "bucket_batch"));
    }
  }
  return SL_OK;
}

static int bucket_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_out *w) {
  bucket_state *s = st;
  if (pass != sl__reader_pass(r) || k > s->out || s->out - k >= BUCKET_HIST) {
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, 1));
    return sl__gather_save_reread_up(r, st, pass, k, w);
  }
  const bucket_at *a = &s->at[k % BUCKET_HIST];
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, 0));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, a->seen));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, a->flush));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, a->ended));
  for (size_t i = 0; i < s->nb; i++) {
    uint64_t n = 0;
    held_at(s, i, k, a->seen, NULL, &n);
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, n));
    SL_FORWARD_IF_ERROR(held_at(s, i, k, a->seen, w, NULL));
  }
  return sl__state_save_up(w, s->up, sl__reader_pass(s->up), a->seen);
}

/* Bucket i's samples from the record (mode 0). */
static int get_bucket(bucket_state *s, size_t i, uint64_t seen,
                      sl__state_in *in) {
  uint64_t n, seq;
  sl__gather *g = &s->b[i];
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &n));
  SL_RETURN_ERROR_IF(n >= g->n, SL_ECORRUPT,
                     "restore: corrupt state: bucket_batch: bucket %zu holds "
                     "%llu samples, its batch is %zu",
                     i, (unsigned long long)n, g->n);
  for (uint64_t t = 0; t < n; t++) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &seq));
    SL_RETURN_ERROR_IF(seq >= seen || (t && seq <= s->seqs[i][t - 1]),
                       SL_ECORRUPT,
                       "restore: corrupt state: bucket_batch: bucket %zu "
                       "holds sample %llu, out of order or not read (%llu "
                       "read)",
                       i, (unsigned long long)seq, (unsigned long long)seen);
    sl_sample *smp = NULL;
    SL_FORWARD_IF_ERROR(
        sl__state_get_sample(in, s->plan.in, "bucket_batch", &smp));
    int rc = sl__padplan_check(&s->plan, smp, seq);
    if (rc < 0) {
      sl_sample_release(smp);
      return sl_wrap_error(
          SL_ECORRUPT, "restore: corrupt state: bucket_batch: bucket %zu", i);
    }
    s->seqs[i][g->nheld] = seq;
    g->held[g->nheld++] = smp;
  }
  return SL_OK;
}

static int bucket_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                          sl__state_in *in) {
  bucket_state *s = st;
  clear(s);
  uint64_t mode = 1, seen = 0, flush = 0, ended = 0;
  if (sl__state_left(in) > 0) SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &mode));
  SL_RETURN_ERROR_IF(mode > 1, SL_ECORRUPT,
                     "restore: corrupt state: bucket_batch: mode %llu (0 or "
                     "1)",
                     (unsigned long long)mode);
  if (mode == 1) {
    SL_FORWARD_IF_ERROR(sl__state_restore_up(in, s->up));
    return sl__state_replay(bucket_next, s, k, "bucket_batch");
  }
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &seen));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &flush));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &ended));
  SL_RETURN_ERROR_IF(
      ended > 1 || flush > s->nb || (flush && !ended), SL_ECORRUPT,
      "restore: corrupt state: bucket_batch: flushing bucket "
      "%llu of %zu, ended %llu",
      (unsigned long long)flush, s->nb, (unsigned long long)ended);
  for (size_t i = 0; i < s->nb; i++)
    SL_FORWARD_IF_ERROR(get_bucket(s, i, seen, in));
  SL_FORWARD_IF_ERROR(sl__state_restore_up_at(in, s->up, seen));
  s->seen = seen;
  s->flush = (size_t)flush;
  s->ended = ended != 0;
  s->out = k;
  s->at[k % BUCKET_HIST] = (bucket_at){seen, s->flush, s->ended};
  return SL_OK;
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
    .budget = bucket_budget,
    .next = bucket_next,
    .reset = bucket_reset,
    .destroy = bucket_destroy,
    .save = bucket_save,
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
  s->seqs = sl__calloc(s->nb, sizeof *s->seqs);
  SL_RETURN_ERROR_IF(!s->bounds || !s->b || !s->seqs, SL_ENOMEM,
                     "bucket_batch: cannot allocate");
  size_t most = 0;
  for (size_t i = 0; i < s->nb; i++) {
    most = SL_MAX(most, o->batch_sizes[i]);
    s->seqs[i] = sl__calloc(o->batch_sizes[i], sizeof *s->seqs[i]);
    SL_RETURN_ERROR_IF(!s->seqs[i], SL_ENOMEM, "bucket_batch: cannot allocate");
  }
  for (size_t j = 0; j < BUCKET_HIST; j++) {
    s->hist[j].s = sl__calloc(most, sizeof *s->hist[j].s);
    s->hist[j].seq = sl__calloc(most, sizeof *s->hist[j].seq);
    SL_RETURN_ERROR_IF(!s->hist[j].s || !s->hist[j].seq, SL_ENOMEM,
                       "bucket_batch: cannot allocate");
  }
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
  bucket_state *s = sl__decorator_state("bucket_batch", up, sizeof *s);
  if (!s) return SL_ENOMEM;
  atomic_init(&s->acct, NULL);
  s->pad_to_bucket = o.pad_to_bucket != 0;
  s->drop = o.drop_remainder != 0;
  rc = setup(s, &o);
  if (rc < 0) {
    bucket_destroy(s);
    return rc;
  }
  return sl__stage_wrap(&bucket_ops, s, s->plan.out, &s->up, NULL, out);
}
