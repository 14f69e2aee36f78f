/*
 * batch.c - sl_batch: groups n consecutive samples of upstream into one
 * sample whose fields have a leading batch dimension (Paddle's batch reader).
 *
 * The output schema is fixed at construction from the upstream schema, field
 * by field (B below is n with drop_last, else SL_DIM_VAR because the last
 * batch of a pass may be short):
 *
 *   - Stacking.  A fixed field [d...] (no SL_DIM_VAR in its schema shape)
 *     becomes [B, d...]: the samples' values copied row after row into one
 *     new buffer.  A scalar field becomes [B].
 *   - LoD merge.  A variable field [v, t...] becomes [SL_DIM_VAR, t...]: the
 *     samples concatenated along dim 0, with LoD offsets lod[0] = 0,
 *     lod[i+1] = lod[i] + len(sample i), B+1 entries (Paddle's LoDTensor
 *     merge).  The offsets live in the same buffer as the values, after them
 *     at an 8-byte-aligned offset, so a ragged field costs one allocation.
 *     Only for a field whose variable dimension is the first alone (ragged
 *     sequences), or when asked (opts->lod): a field with a variable
 *     dimension after the first (images of unknown size, u8[-1,-1,-1]) is
 *     SL_EINVAL at construction without lod or pad, since merging 4 images
 *     of 40x40 into one "image" of 160x40 is rarely what was meant.
 *   - Pad (opts->pad).  A variable field [v, t...] becomes [B, SL_DIM_VAR,
 *     t...]: every sample zero-padded along dim 0 to the longest one in the
 *     batch, followed directly by an extra field "<name>_len" i64[B] holding
 *     each sample's length.  An upstream field already named "<name>_len" is
 *     SL_EINVAL at construction rather than a silent shadowing.
 *
 * Bytes fields (dtype bytes, schema shape [SL_DIM_VAR]) are simply variable
 * rank-1 fields of 1-byte elements and follow the same rules; the choice
 * between stacking and LoD/pad is made by sl_schema_field_is_var alone, so a
 * bytes field declared with a fixed length stacks like any fixed field.
 * Adding a dimension (stacking, pad) to a rank-SL_MAX_RANK field is
 * impossible: SL_EINVAL at construction.
 *
 * Checks.  Every sample is checked as soon as it arrives (so a bad sample is
 * reported before more of upstream is consumed): field count; dtype, rank
 * and fixed dims against the upstream schema (sl_schema_check, wrapped as
 * "batch: sample J of batch K: ..."); no LoD on input tensors (nested LoD is
 * SL_EUNSUPPORTED); for variable fields, dims 1.. equal to those of sample 0
 * of the batch, since only dim 0 can be concatenated or padded.
 *
 * Errors.  Upstream errors pass through unchanged (code and message).  When
 * an error (upstream's, or a failed check) arrives after k < n samples were
 * collected, those k samples are released and the error is returned: they
 * were consumed into the failed batch and are not replayed, exactly as a
 * failed upstream record is not.  reader.c makes the error sticky until
 * reset.  Batch numbers in messages count from 0 within the pass.  The
 * gathering, the length and the position are gather.h's (batch k starts at
 * upstream sample k x n).
 *
 * Memory.  The collected samples sit in an array of n pointers allocated at
 * construction; building a batch allocates the output sample and one buffer
 * per output field (sizes computed before anything is copied), never
 * anything per input sample.  Between calls no sample is held.  The values'
 * buffers (stacked, concatenated, padded fields) come from the reader's
 * pool (buffer_pool.c): a batch released by the trainer, on any thread,
 * gives its buffer back for the next batch of about the same size, so a
 * 400 KB f32 batch is not faulted in and zero-filled afresh each time.  The
 * pool keeps at most POOL_IDLE buffers and POOL_IDLE_BYTES idle; every byte
 * a field shows is written before the batch goes out (rows, padding tails,
 * LoD offsets), so old contents never show.  Under a memory budget the
 * idle buffers are the stage's resident bytes (batch_budget: the pool's
 * watcher moves the charge as a buffer returns or is taken again, on
 * whichever thread, and releases it when the stage is destroyed); a
 * buffer returned while the budget has no room for it is freed.
 *
 * Deferred copies (prefetch).  sl_prefetch over a batch asks for them
 * (the stage's defer entry, stage.h): batch_next then collects and checks the
 * rows and allocates the output (every error it can have is found there), but
 * leaves the row bytes to copy: the output goes out with its rows recorded in a
 * pending table, and batch_finish copies them, on whichever thread gets to
 * it first: prefetch's worker when the consumer is behind, the consumer when
 * it is waiting anyway (it would otherwise sleep while the worker copies).
 * Until filled, such an output has never been seen outside batch and
 * prefetch; it is filled before prefetch hands it out, so samples are
 * immutable once published as ever.  The table is guarded by `mu`; the copy
 * reads only what construction fixed (plan, schemas), so it may run beside
 * the next batch_next.
 *
 * Threading: single consumer, like every reader (batch_finish aside).
 */
#include "stages/gather.h"
#include "stages/rows.h"
#include "stages/stage.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

/* Idle output buffers kept for reuse: what prefetch and a trainer hold at
 * once, with room; at most 64 MiB. */
#define POOL_IDLE 16
#define POOL_IDLE_BYTES ((size_t)64 << 20)

enum { K_STACK, K_CONCAT, K_PAD };

typedef struct field_plan {
  int kind; /* K_* */
  int out;  /* index of the field in the output schema */
} field_plan;

/* An output whose row bytes are still to be copied (deferred mode). */
typedef struct pending {
  sl_sample *out;   /* NULL: the entry is free */
  sl_sample **rows; /* n slots, held references */
  size_t nrows;
} pending;

typedef struct batch_state {
  sl__gather g;        /* first (gather.h): upstream, n, the held samples */
  const sl_schema *in; /* upstream's schema, borrowed from `up` */
  sl_schema *out;      /* retained (the reader holds another reference) */
  int pad, lod;
  int nfields;           /* upstream field count */
  field_plan *plan;      /* nfields entries */
  sl__buffer_pool *pool; /* values' buffers; NULL: plain ones */
  /* deferred mode (batch_defer); mu guards pend[*] */
  pthread_mutex_t mu;
  pending *pend; /* npend entries, NULL when not deferred */
  size_t npend;
  sl__rows *rows; /* fused with the map below (rows.h), else NULL */
} batch_state;

/* --- helpers -------------------------------------------------------------- */

static bool mul_size(size_t a, size_t c, size_t *r) {
  if (a && c > SIZE_MAX / a) return false;
  *r = a * c;
  return true;
}

/* Bytes that `t`'s shape and dtype call for, or false on overflow. */
static bool shape_bytes(const sl_tensor *t, size_t *r) {
  size_t bytes = sl_dtype_size(t->dtype);
  for (int d = 0; d < t->rank; d++)
    if (t->shape[d] < 0 || (uint64_t)t->shape[d] > SIZE_MAX ||
        !mul_size(bytes, (size_t)t->shape[d], &bytes))
      return false;
  *r = bytes;
  return true;
}

static const sl_tensor *row_field(sl_sample *const *rows, size_t j, int i) {
  return sl_sample_at_const(rows[j], i);
}

/* --- per-sample checks ---------------------------------------------------- */

static int check_sample(void *st, size_t j) {
  const batch_state *b = st;
  const sl_sample *s = b->g.held[j];
  if (sl_sample_nfields(s) != b->nfields)
    return sl_set_error(SL_ESHAPE,
                        "batch: sample %zu of batch %llu has %d fields where "
                        "the upstream schema has %d",
                        j, b->g.no, sl_sample_nfields(s), b->nfields);
  for (int i = 0; i < b->nfields; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    const char *name = sl_schema_field_name(b->in, i);
    int rc = sl_schema_check(b->in, i, t);
    if (rc < 0)
      return sl_wrap_error(rc, "batch: sample %zu of batch %llu", j, b->g.no);
    if (t->lod)
      return sl_set_error(SL_EUNSUPPORTED,
                          "batch: field '%s' already has LoD; nested LoD is "
                          "not supported (sample %zu of batch %llu)",
                          name, j, b->g.no);
    /* The copies below trust nbytes and data; a hand-built tensor that
     * disagrees with its own shape would make them read out of bounds. */
    size_t want;
    if (!shape_bytes(t, &want) || want != t->nbytes || (want && !t->data)) {
      char got[128];
      return sl_set_error(SL_EINVAL,
                          "batch: sample %zu of batch %llu: field '%s' is an "
                          "inconsistent tensor (%s with %zu bytes%s)",
                          j, b->g.no, name,
                          sl_tensor_describe(t, got, sizeof got), t->nbytes,
                          t->data ? "" : ", no data");
    }
    /* The sample came out of a shuffle's window, its bytes long out of
     * the caches: start loading them now, to be copied when the batch is
     * full (a batch of small rows fits the L2 cache). */
    if (b->plan[i].kind == K_STACK) sl__prefetch(t->data, SL_MIN(want, 2048));
    if (b->plan[i].kind != K_STACK && j > 0) {
      const sl_tensor *t0 = row_field(b->g.held, 0, i);
      for (int d = 1; d < t->rank; d++) {
        if (t->shape[d] != t0->shape[d]) {
          char got[128], first[128];
          return sl_set_error(
              SL_ESHAPE,
              "batch: sample %zu of batch %llu: field '%s' has shape %s but "
              "sample 0 has %s; only dim 0 may differ within a batch",
              j, b->g.no, name, sl_tensor_describe(t, got, sizeof got),
              sl_tensor_describe(t0, first, sizeof first));
        }
      }
    }
  }
  return SL_OK;
}

/* --- building the output fields ------------------------------------------- */

/* [B, d...]: the samples' values row after row. */
static int stack_field(const batch_state *b, int i, sl_sample *o) {
  const sl_tensor *t0 = row_field(b->g.held, 0, i);
  int64_t shape[SL_MAX_RANK];
  shape[0] = (int64_t)b->g.nheld;
  for (int d = 0; d < t0->rank; d++)
    shape[d + 1] = t0->shape[d];
  sl_tensor t;
  int rc = sl__tensor_alloc_pooled(b->pool, &t, t0->dtype, t0->rank + 1, shape);
  if (rc < 0)
    return sl_wrap_error(rc, "batch: field '%s'",
                         sl_schema_field_name(b->in, i));
  return sl__gather_put(o, b->plan[i].out, &t, NULL);
}

/* The row bytes of a stacked field. */
static void stack_copy(sl_sample *const *rows, size_t nrows, int i,
                       sl_tensor *t) {
  size_t row = row_field(rows, 0, i)->nbytes; /* the schema shape, all rows */
  char *dst = t->data;
  if (row)
    for (size_t j = 0; j < nrows; j++, dst += row)
      memcpy(dst, row_field(rows, j, i)->data, row);
}

/* [sum of lengths, t...] + LoD, values and offsets in one buffer. */
static int concat_field(const batch_state *b, int i, sl_sample *o) {
  const char *name = sl_schema_field_name(b->in, i);
  const sl_tensor *t0 = row_field(b->g.held, 0, i);
  int64_t rows = 0;
  size_t data_bytes = 0;
  for (size_t j = 0; j < b->g.nheld; j++) {
    const sl_tensor *tj = row_field(b->g.held, j, i);
    if (tj->shape[0] > INT64_MAX - rows || tj->nbytes > SIZE_MAX - data_bytes)
      return sl_set_error(SL_EINVAL,
                          "batch: field '%s': batch %llu is too "
                          "large to concatenate",
                          name, b->g.no);
    rows += tj->shape[0];
    data_bytes += tj->nbytes;
  }
  /* The offsets follow the values, 8-byte aligned (buffers start 64-byte
   * aligned). */
  size_t lod_off = (data_bytes + 7) & ~(size_t)7;
  size_t lod_bytes = (b->g.nheld + 1) * sizeof(int64_t);
  if (lod_off < data_bytes || lod_off > SIZE_MAX - lod_bytes)
    return sl_set_error(SL_EINVAL,
                        "batch: field '%s': batch %llu is too "
                        "large to concatenate",
                        name, b->g.no);
  sl_buffer *buf = sl__buffer_pool_get(b->pool, lod_off + lod_bytes);
  if (!buf) return sl_wrap_error(SL_ENOMEM, "batch: field '%s'", name);

  int64_t shape[SL_MAX_RANK];
  for (int d = 0; d < t0->rank; d++)
    shape[d] = t0->shape[d];
  shape[0] = rows;
  sl_tensor t;
  int rc = sl_tensor_view(&t, t0->dtype, t0->rank, shape, buf, 0);
  if (rc < 0) {
    sl_buffer_release(buf);
    return sl_wrap_error(rc, "batch: field '%s'", name);
  }
  char *base = sl_buffer_data(buf);
  int64_t *lod = (int64_t *)(void *)(base + lod_off);
  lod[0] = 0;
  for (size_t j = 0; j < b->g.nheld; j++)
    lod[j + 1] = lod[j] + row_field(b->g.held, j, i)->shape[0];
  rc = sl_tensor_set_lod(&t, buf, lod, (int64_t)b->g.nheld + 1);
  sl_buffer_release(buf); /* the tensor holds its own references now */
  if (rc < 0) {
    sl_tensor_clear(&t);
    return sl_wrap_error(rc, "batch: field '%s'", name);
  }
  return sl__gather_put(o, b->plan[i].out, &t, NULL);
}

/* The row bytes of a concatenated field, one after the other. */
static void concat_copy(sl_sample *const *rows, size_t nrows, int i,
                        sl_tensor *t) {
  char *dst = t->data;
  for (size_t j = 0; j < nrows; j++) {
    const sl_tensor *tj = row_field(rows, j, i);
    if (tj->nbytes) memcpy(dst, tj->data, tj->nbytes);
    dst += tj->nbytes;
  }
}

/* [B, longest, t...] zero-padded, then "<name>_len" i64[B]. */
static int pad_field(const batch_state *b, int i, sl_sample *o) {
  const char *name = sl_schema_field_name(b->in, i);
  const sl_tensor *t0 = row_field(b->g.held, 0, i);
  int64_t longest = 0;
  for (size_t j = 0; j < b->g.nheld; j++)
    longest = SL_MAX(longest, row_field(b->g.held, j, i)->shape[0]);
  int64_t shape[SL_MAX_RANK];
  shape[0] = (int64_t)b->g.nheld;
  shape[1] = longest;
  for (int d = 1; d < t0->rank; d++)
    shape[d + 1] = t0->shape[d];
  /* sl_tensor_alloc checks the whole size for overflow. */
  sl_tensor t;
  int rc = sl__tensor_alloc_pooled(b->pool, &t, t0->dtype, t0->rank + 1, shape);
  if (rc < 0) return sl_wrap_error(rc, "batch: field '%s'", name);
  int64_t len_shape = (int64_t)b->g.nheld;
  sl_tensor lens;
  rc = sl_tensor_alloc(&lens, SL_I64, 1, &len_shape);
  if (rc < 0) {
    sl_tensor_clear(&t);
    return sl_wrap_error(rc, "batch: field '%s_len'", name);
  }
  int64_t *len = lens.data;
  for (size_t j = 0; j < b->g.nheld; j++)
    len[j] = row_field(b->g.held, j, i)->shape[0];
  return sl__gather_put(o, b->plan[i].out, &t, &lens);
}

/* The row bytes of a padded field: each sample gets a slot of `slot` bytes,
 * its values, then zeros.  Only the tail is cleared, so every byte is
 * written once. */
static void pad_copy(sl_sample *const *rows, size_t nrows, int i,
                     sl_tensor *t) {
  size_t slot = t->nbytes / nrows;
  char *dst = t->data;
  if (slot)
    for (size_t j = 0; j < nrows; j++, dst += slot) {
      const sl_tensor *tj = row_field(rows, j, i);
      if (tj->nbytes) memcpy(dst, tj->data, tj->nbytes);
      memset(dst + tj->nbytes, 0, slot - tj->nbytes);
    }
}

/* Copies the row bytes of every field into `o`, whose fields assemble
 * allocated.  Reads only what construction fixed, so it may run on another
 * thread than batch_next. */
static void copy_rows(const batch_state *b, sl_sample *const *rows,
                      size_t nrows, sl_sample *o) {
  for (int i = 0; i < b->nfields; i++) {
    sl_tensor *t = sl_sample_at(o, b->plan[i].out);
    switch (b->plan[i].kind) {
    case K_STACK:
      stack_copy(rows, nrows, i, t);
      break;
    case K_CONCAT:
      concat_copy(rows, nrows, i, t);
      break;
    default:
      pad_copy(rows, nrows, i, t);
      break;
    }
  }
}

/* Allocates the output for the held samples (every field's shape, LoD
 * offsets and lengths set; the row bytes not yet copied). */
static int assemble(const batch_state *b, sl_sample **out) {
  sl_sample *o = sl_sample_new(b->out);
  if (!o) return sl_wrap_error(SL_ENOMEM, "batch");
  for (int i = 0; i < b->nfields; i++) {
    int rc;
    switch (b->plan[i].kind) {
    case K_STACK:
      rc = stack_field(b, i, o);
      break;
    case K_CONCAT:
      rc = concat_field(b, i, o);
      break;
    default:
      rc = pad_field(b, i, o);
      break;
    }
    if (rc < 0) {
      sl_sample_release(o);
      return rc;
    }
  }
  *out = o;
  return SL_OK;
}

/* --- deferred copies (the defer and finish entries) ---------------------- */

/* Records `o` with the held rows as pending (they move to the entry) and
 * returns true; false when the table is full (the caller copies now). */
static bool defer(batch_state *b, sl_sample *o) {
  pending *e = NULL;
  pthread_mutex_lock(&b->mu);
  for (size_t k = 0; k < b->npend && !e; k++)
    if (!b->pend[k].out) e = &b->pend[k];
  if (e) {
    sl_sample **rows = e->rows;
    e->rows = b->g.held; /* swap the arrays: no copy of the pointers */
    b->g.held = rows;
    e->nrows = b->g.nheld;
    e->out = o;
    b->g.nheld = 0;
  }
  pthread_mutex_unlock(&b->mu);
  return e != NULL;
}

static void drop_pending(batch_state *b) {
  if (!b->pend) return;
  pthread_mutex_lock(&b->mu);
  for (size_t k = 0; k < b->npend; k++) {
    pending *e = &b->pend[k];
    for (size_t j = 0; j < e->nrows; j++)
      sl_sample_release(e->rows[j]);
    e->nrows = 0;
    e->out = NULL;
  }
  pthread_mutex_unlock(&b->mu);
}

static void *batch_defer(void *st, size_t max_pending) {
  batch_state *b = st;
  if (b->pend || max_pending == 0) return NULL;
  pending *pend = sl__calloc(max_pending, sizeof *pend);
  bool ok = pend != NULL;
  for (size_t k = 0; ok && k < max_pending; k++)
    ok = (pend[k].rows = sl__malloc(b->g.n * sizeof *pend[k].rows)) != NULL;
  if (!ok || pthread_mutex_init(&b->mu, NULL) != 0) {
    for (size_t k = 0; pend && k < max_pending; k++)
      sl__free(pend[k].rows);
    sl__free(pend);
    return NULL; /* no deferred copies: batch copies as before */
  }
  b->pend = pend;
  b->npend = max_pending;
  return b;
}

static void batch_finish(void *h, sl_sample *s) {
  batch_state *b = h;
  sl_sample **rows = NULL;
  size_t nrows = 0;
  pthread_mutex_lock(&b->mu);
  pending *e = NULL;
  for (size_t k = 0; k < b->npend && !e; k++)
    if (b->pend[k].out == s) e = &b->pend[k];
  if (e) { /* take the rows out: the copy runs unlocked */
    rows = e->rows;
    nrows = e->nrows;
    e->rows = NULL;
  }
  pthread_mutex_unlock(&b->mu);
  if (!e) return; /* not pending: filled already */
  copy_rows(b, rows, nrows, s);
  for (size_t j = 0; j < nrows; j++)
    sl_sample_release(rows[j]);
  pthread_mutex_lock(&b->mu);
  e->rows = rows; /* e stays reserved until here: out is still s */
  e->nrows = 0;
  e->out = NULL;
  pthread_mutex_unlock(&b->mu);
}

/* --- the reader ----------------------------------------------------------- */

/* Fused (rows.h): batch k's rows come as tokens (written by the map's
 * workers) or as samples (made before the fusion, or that did not fit),
 * which are checked and copied here as ever; then the batch is taken whole.
 * The same errors at the same places as batch_next's path. */
static int fused_next(batch_state *b, sl_sample **out) {
  uint64_t k = b->g.no;
  size_t j = 0;
  int rc = SL_OK;
  for (; rc == SL_OK && j < b->g.n; j++) {
    sl_sample *s = NULL;
    rc = sl_reader_next(b->g.up, &s);
    if (rc != SL_OK) break;
    bool token = false;
    rc = sl__rows_land(b->rows, k, j, s, &token);
    if (rc == SL_OK && token) {
      sl__gather_charge(&b->g, NULL, j + 1); /* written by the map */
      sl_sample_release(s);
      continue;
    }
    if (rc < 0) {
      sl_sample_release(s);
      break;
    }
    b->g.held[j] = s;
    b->g.nheld = j + 1;
    rc = sl__gather_charge(&b->g, s, j + 1);
    if (rc == SL_OK) rc = check_sample(b, j);
    if (rc == SL_OK) rc = sl__rows_copy(b->rows, k, j, s);
    b->g.held[j] = NULL;
    b->g.nheld = 0;
    sl_sample_release(s);
  }
  if (rc == SL_EOF && j > 0 && !b->g.drop) rc = SL_OK;
  if (rc == SL_OK) rc = sl__rows_take(b->rows, k, j, out);
  /* the rows are the output's bytes: their charge becomes its */
  sl__gather_uncharge(&b->g);
  if (rc < 0 || rc == SL_EOF) {
    sl__rows_drop(b->rows, k);
    return rc;
  }
  b->g.no++;
  return sl__gather_hand_out(&b->g, out);
}

static int batch_next(void *st, sl_sample **out) {
  batch_state *b = st;
  if (b->rows) return fused_next(b, out);
  int rc = sl__gather_pull(&b->g, check_sample, b);
  if (rc == SL_OK) rc = assemble(b, out);
  if (rc == SL_OK) {
    b->g.no++;
    /* deferred: the rows go with the output (defer empties g.held) */
    if (!b->pend || !defer(b, *out)) copy_rows(b, b->g.held, b->g.nheld, *out);
    rc = sl__gather_hand_out(&b->g, out); /* charged before the rows go */
  }
  sl__gather_release(&b->g);
  return rc;
}

static int batch_reset(void *st) {
  drop_pending(st);
  return sl__gather_reset(st);
}

/* The position is all (gather.h); the restore drops deferred rows too. */
static int batch_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                         sl__state_in *in) {
  drop_pending(st);
  return sl__gather_restore(r, st, pass, k, in);
}

static void batch_identity(const sl_reader *r, void *st, char *buf,
                           size_t cap) {
  const batch_state *b = st;
  snprintf(buf, cap, "size=%zu drop_last=%d pad=%d lod=%d", b->g.n, b->g.drop,
           b->pad, b->lod);
}

static void batch_destroy(void *st) {
  batch_state *b = st;
  if (!b) return;
  if (b->pend) {
    drop_pending(b);
    for (size_t k = 0; k < b->npend; k++)
      sl__free(b->pend[k].rows);
    sl__free(b->pend);
    pthread_mutex_destroy(&b->mu);
  }
  sl__gather_fini(&b->g); /* upstream first: its workers use the rows */
  sl__rows_free(b->rows);
  sl__free(b->plan);
  sl__buffer_pool_release(b->pool); /* batches still out free theirs */
  sl_schema_release(b->out);
  sl__free(b);
}

/* The pool's watcher: its idle capacity is the account's resident bytes;
 * a buffer returned to a full budget is freed rather than kept (a cache,
 * which would only pass the budget, or take the headroom the budget keeps
 * for the charges that cannot wait: sl__budget_has_room). */
static bool charge_idle(void *acct, size_t from, size_t to) {
  if (to > from && !sl__budget_has_room(sl__budget_of(acct), to - from))
    return false;
  sl__budget_resident(acct, from, to);
  return true;
}

/* The memory budget: the rows and the output (gather.h), and the idle
 * buffers of the pool, resident. */
static void batch_budget(void *st, sl__budget_acct *acct) {
  batch_state *b = st;
  sl__gather_budget(&b->g, acct);
  sl__buffer_pool_watch(b->pool, acct ? charge_idle : NULL, acct);
}

static const sl__stage_ops batch_ops = {
    .name = "batch",
    .budget = batch_budget,
    .next = batch_next,
    .reset = batch_reset,
    .destroy = batch_destroy,
    .length = sl__gather_length,
    .save = sl__gather_save,
    .restore = batch_restore,
    .identity = batch_identity,
    .check = sl__gather_check,
    .defer = batch_defer,
    .finish = batch_finish,
};

/* --- construction --------------------------------------------------------- */

static int add_field(sl_schema *s, const char *name, sl_dtype dt, int rank,
                     const int64_t *shape) {
  int rc = sl_schema_add(s, name, dt, rank, shape);
  return rc < 0 ? sl_wrap_error(rc, "batch: cannot add output field '%s'", name)
                : rc;
}

/* SL_EINVAL for field i (a LoD-merged one) when a dimension after the
 * first varies and LoD was not asked for: see the banner. */
static int check_inner_dims(const batch_state *b, int i) {
  int rank = sl_schema_field_rank(b->in, i);
  const int64_t *dims = sl_schema_field_shape(b->in, i);
  bool inner_var = false;
  for (int d = 1; d < rank; d++)
    inner_var = inner_var || dims[d] == SL_DIM_VAR;
  if (!inner_var || b->lod) return SL_OK;
  char type[16 + 21 * SL_MAX_RANK];
  int k = snprintf(type, sizeof type, "%s[",
                   sl_dtype_name(sl_schema_field_dtype(b->in, i)));
  for (int d = 0; d < rank; d++)
    k += snprintf(type + k, sizeof type - (size_t)k, "%s%lld", d ? "," : "",
                  (long long)dims[d]);
  snprintf(type + k, sizeof type - (size_t)k, "]");
  return sl_set_error(
      SL_EINVAL,
      "batch: field '%s' is %s: a dimension after the first varies, so "
      "concatenating its samples along dim 0 would merge them (4 images of "
      "40x40 would become one of 160x40); ask for that with lod = true "
      "(C: sl_batch_opts.lod; LoD offsets mark each sample), or pad = true, "
      "or give the field a fixed shape (images: channels and a declared "
      "shape or resize)",
      sl_schema_field_name(b->in, i), type);
}

/* Fills b->plan and b->out from the upstream schema b->in. */
static int build_schema(batch_state *b) {
  const sl_schema *in = b->in;
  sl_schema *s = sl_schema_new();
  if (!s) return sl_wrap_error(SL_ENOMEM, "batch: output schema");
  b->out = s;
  int64_t B = b->g.drop ? (int64_t)b->g.n : SL_DIM_VAR;
  for (int i = 0; i < b->nfields; i++) {
    const char *name = sl_schema_field_name(in, i);
    sl_dtype dt = sl_schema_field_dtype(in, i);
    int rank = sl_schema_field_rank(in, i);
    const int64_t *dims = sl_schema_field_shape(in, i);
    int kind = !sl_schema_field_is_var(in, i) ? K_STACK
               : b->pad                       ? K_PAD
                                              : K_CONCAT;
    int64_t shape[SL_MAX_RANK];
    int out_rank, rc;
    if (kind == K_CONCAT) SL_FORWARD_IF_ERROR(check_inner_dims(b, i));
    SL_RETURN_ERROR_IF(kind != K_CONCAT && rank >= SL_MAX_RANK, SL_EINVAL,
                       "batch: field '%s' has rank %d; batching it adds a "
                       "dimension and the maximum rank is %d",
                       name, rank, SL_MAX_RANK);
    if (kind == K_STACK) {
      shape[0] = B;
      for (int d = 0; d < rank; d++)
        shape[d + 1] = dims[d];
      out_rank = rank + 1;
    } else if (kind == K_CONCAT) {
      for (int d = 0; d < rank; d++)
        shape[d] = dims[d];
      shape[0] = SL_DIM_VAR; /* total rows vary even if each sample's don't */
      out_rank = rank;
    } else {
      shape[0] = B;
      shape[1] = SL_DIM_VAR;
      for (int d = 1; d < rank; d++)
        shape[d + 1] = dims[d];
      out_rank = rank + 1;
    }
    rc = add_field(s, name, dt, out_rank, shape);
    if (rc < 0) return rc;
    b->plan[i].kind = kind;
    b->plan[i].out = rc;
    if (kind == K_PAD) {
      char len_name[128];
      snprintf(len_name, sizeof len_name, "%s_len", name);
      SL_RETURN_ERROR_IF(sl_schema_find(in, len_name) >= 0, SL_EINVAL,
                         "batch: pad mode adds field '%s' for the lengths of "
                         "'%s', but upstream already has a field '%s'",
                         len_name, name, len_name);
      rc = add_field(s, len_name, SL_I64, 1, &B);
      if (rc < 0) return rc;
    }
  }
  /* Metadata describes the data set, which batching does not change. */
  for (int m = 0; m < sl_schema_meta_count(in); m++) {
    const char *key, *value;
    if (sl_schema_meta_at(in, m, &key, &value) == SL_OK &&
        sl_schema_set_meta(s, key, value) < 0)
      return sl_wrap_error(SL_ENOMEM, "batch: output schema");
  }
  return SL_OK;
}

/* Map and batch fused (rows.h) when every field stacks and the map below
 * takes the table; otherwise (or short of memory) batch works as ever. */
static void fuse(batch_state *b, bool off) {
  const char *env = getenv("SLUICE_FUSE");
  if (off || (env && strcmp(env, "0") == 0) || b->nfields == 0) return;
  for (int i = 0; i < b->nfields; i++)
    if (b->plan[i].kind != K_STACK) return;
  if (sl__rows_new(b->in, b->out, b->g.n, b->pool, &b->rows) < 0) {
    sl_clear_error();
    return;
  }
  if (!sl__reader_rows(b->g.up, b->rows)) {
    sl__rows_free(b->rows);
    b->rows = NULL;
  }
}

int sl_batch(sl_reader *up, size_t n, const sl_batch_opts *opts,
             sl_reader **out) {
  SL_DECORATOR_ARGS("batch", up, out);
  if (n == 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "batch: batch size must be >= 1"));
  /* B must fit a shape dimension and the held array must be allocatable. */
  if (n > SIZE_MAX / sizeof(sl_sample *) || (uint64_t)n > (uint64_t)INT64_MAX)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "batch: batch size %zu is too large", n));
  batch_state *b = sl__calloc(1, sizeof *b);
  if (!b)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "batch: cannot allocate"));
  /* from here on batch_destroy owns up */
  bool held = sl__gather_init(&b->g, up, n, opts && opts->drop_last);
  b->in = sl_reader_schema(up);
  b->pad = opts ? opts->pad != 0 : 0;
  b->lod = opts ? opts->lod != 0 : 0;
  b->nfields = sl_schema_nfields(b->in);
  b->plan = sl__calloc(b->nfields ? (size_t)b->nfields : 1, sizeof *b->plan);
  b->pool = sl__buffer_pool_new(POOL_IDLE, POOL_IDLE_BYTES);
  int rc = b->pad && b->lod
               ? sl_set_error(SL_EINVAL,
                              "batch: lod and pad exclude each other (lod "
                              "concatenates variable fields with LoD "
                              "offsets, pad pads them)")
           : (!b->plan || !held || !b->pool)
               ? sl_set_error(SL_ENOMEM,
                              "batch: cannot allocate state for %zu samples", n)
               : build_schema(b);
  if (rc < 0) {
    batch_destroy(b);
    return rc;
  }
  fuse(b, opts && opts->no_fuse);
  return sl__stage_wrap(&batch_ops, b, b->out, &b->g.up, NULL, out);
}
