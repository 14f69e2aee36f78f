/*
 * decode_image.c - sl_decode_image: a bytes field of encoded images (JPEG,
 * PNG) decoded into u8 [H, W, C] tensors by `threads` worker threads, in
 * the upstream's order by default.  The image reader (image_reader.c) is
 * this stage on top of a source of file bytes.
 *
 * The threads are the parallel-stage engine's (sync/engine.c: the window of
 * sequence numbers, the pull turn, ordered or unordered delivery, the end
 * of a pass at its position, stop at any moment); this file is what one
 * image takes:
 *
 *   worker    worker_init gives each worker its decoder context (the
 *             TurboJPEG handle it reuses, the stage's buffer pool for the
 *             pixels); worker_fini ends it when the stage is destroyed.
 *   process   Decodes the image field of one sample into a new sample of
 *             the output schema, naming the image (the file, or "sample N
 *             of the pass") in every message.
 *   skip      Under SL_CORRUPT_SKIP_CHUNK, an image that fails with
 *             SL_ECORRUPT (damaged, truncated, not an image) or SL_ESHAPE is
 *             SL__ENGINE_SKIP with its message as the note; engine_stage.c
 *             counts them on the consumer's thread in delivery order (per
 *             pass) and fails the pass with SL_ECORRUPT once more than
 *             max_bad were skipped (sl__ignore_error, the rule ignore_errors
 *             of the maps and filters follows too: the stats row carries the
 *             count of skipped images and the last message).  So the count
 *             and where the cap trips are the same for any number of threads
 *             in ordered mode, and exact in unordered mode.  Other errors
 *             (SL_ENOMEM, upstream errors) always end the pass.
 *   window    At most `window` samples are pulled and not yet handed out
 *             (the engine's window, with a consumer cache of 1): the bound
 *             on decoded images held.
 *   budget    The engine charges the items in hand and the decoded images
 *             not yet taken (engine.c); the stage's own memory on top is
 *             the buffer pool's idle buffers (up to POOL_IDLE_BYTES),
 *             charged as resident bytes, measured again after each decode.
 *
 * The reader side is engine_stage.c's, lazy: workers start on the first
 * next of each pass (not at construction: an unread stage costs no
 * threads); reset stops (joins) them, resets upstream and leaves the next
 * pass to start them again.  Each decoder context belongs to its worker.
 *
 * Saving (engine_stage.h, sl__engine_pos): ordered under policy fail the
 * stage is 1:1 (the state is the position); ordered under skip_chunk a
 * skipped image leaves a hole, so a log of the delivered seqs maps an output
 * position to the upstream's; unordered, the state holds the set of images
 * done (delivered or skipped) by the position, and the restored pass drops
 * them undecoded - each remaining image exactly once, in some order.  The
 * engine numbers items by upstream position from the restored start, so an
 * image's name (names[seq]) stays right.  The skip count restarts at the
 * restored position (bad images before it are not counted again).
 */
#include "image/image.h"
#include "stages/engine_stage.h"
#include "sync/resident.h"

#include <stdlib.h>

/* The buffer pool of decoded images: idle buffers beyond the window and
 * the workers, and the bytes they may hold in all. */
#define POOL_SPARE 16
#define POOL_IDLE_BYTES ((size_t)256 << 20)
/* The largest window. */
#define WINDOW_MAX 65536u

typedef struct dec_state {
  sl__engine_stage run; /* first: the engine and the position */
  sl_schema *schema;    /* the output schema */
  const char *stage;    /* "decode_image" or "image" */
  int field;            /* index of the image field */
  char field_name[64];
  sl_image_shape shape;
  sl_corrupt_policy policy;
  const char *const *names; /* borrowed; nnames entries, or NULL */
  size_t nnames;
  sl__buffer_pool *pool; /* the decoded pixels' buffers (buffer_pool.c) */
  sl__resident idle;     /* the pool's idle bytes, charged to the budget */
} dec_state;

/* --- the work of one image ---------------------------------------------- */

/* "image: PATH" or "decode_image: sample N (field 'image')" into buf. */
static void what_of(const dec_state *d, uint64_t seq, char *buf, size_t cap) {
  if (d->names && seq < d->nnames)
    snprintf(buf, cap, "%s: %s", d->stage, d->names[seq]);
  else
    snprintf(buf, cap, "%s: sample %llu of the pass (field '%s')", d->stage,
             (unsigned long long)seq, d->field_name);
}

/* Decodes field `field` of `in` (taken) into a new sample of the output
 * schema stored in *out. */
static int decode_one(dec_state *d, sl__image_decoder *dec, sl_sample *in,
                      uint64_t seq, sl_sample **out) {
  char what[1200];
  what_of(d, seq, what, sizeof what);
  const sl_tensor *src = sl_sample_at_const(in, d->field);
  sl_tensor px;
  int rc = sl__image_decode(dec, src->data, src->nbytes, &d->shape, what, &px);
  sl_sample *s = NULL;
  if (rc == SL_OK) {
    s = sl_sample_new(d->schema);
    if (!s) rc = sl_set_error(SL_ENOMEM, "%s: cannot allocate a sample", what);
  }
  /* The other fields go over as they are, but those in the encoded
   * image's buffer (an SLR record's label is a view of its decoded chunk)
   * as copies: a view would keep the chunk of encoded images alive as long
   * as the decoded sample (a shuffle's window of them pins every chunk). */
  int n = sl_sample_nfields(in);
  for (int i = 0; i < n && rc == SL_OK; i++) {
    if (i == d->field) continue;
    const sl_tensor *t = sl_sample_at_const(in, i);
    sl_tensor own;
    if (!t->buf || (t->buf != src->buf && t->lod_buf != src->buf))
      rc = sl_sample_set(s, i, t);
    else if ((rc = sl__tensor_copy_own(&own, t)) == SL_OK &&
             (rc = sl_sample_set_move(s, i, &own)) < 0)
      sl_tensor_clear(&own);
  }
  if (rc == SL_OK && (rc = sl_sample_set_move(s, d->field, &px)) < 0)
    sl_wrap_error(rc, "%s", what);
  if (rc < 0) {
    sl_tensor_clear(&px);
    sl_sample_release(s);
    s = NULL;
  }
  sl_sample_release(in);
  *out = s;
  return rc;
}

/* --- the engine's callbacks --------------------------------------------- */

static int dec_pull(void *ud, sl_sample **out) {
  return sl_reader_next(((dec_state *)ud)->run.up, out);
}

static int dec_worker_init(void *ud, int worker, void **wctx) {
  dec_state *d = ud;
  sl__image_decoder *dec = sl__calloc(1, sizeof *dec);
  SL_RETURN_ERROR_IF(!dec, SL_ENOMEM, "%s: worker %d: cannot allocate",
                     d->stage, worker);
  dec->pool = d->pool;
  *wctx = dec;
  return SL_OK;
}

static void dec_worker_fini(void *ud, int worker, void *wctx) {
  sl__image_decoder_fini(wctx);
  sl__free(wctx);
}

static int dec_process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                       sl_sample **out) {
  dec_state *d = ud;
  if (sl__engine_stage_done(&d->run, seq)) { /* done before a restore */
    sl_sample_release(in);
    return SL__ENGINE_DROP;
  }
  int rc = decode_one(d, wctx, in, seq, out);
  sl__resident_set(&d->idle, sl__buffer_pool_idle_bytes(d->pool));
  if (rc == SL_OK) return SL__ENGINE_OUT;
  if (d->policy == SL_CORRUPT_SKIP_CHUNK &&
      (rc == SL_ECORRUPT || rc == SL_ESHAPE))
    return SL__ENGINE_SKIP; /* the message is the note */
  return rc;
}

static const sl__engine_ops dec_engine = {dec_pull, dec_worker_init,
                                          dec_worker_fini, dec_process, NULL};

/* --- the stage ------------------------------------------------------------ */

static void dec_free(void *st) {
  dec_state *d = st;
  sl__buffer_pool_release(d->pool); /* images still held stay valid */
  sl_schema_release(d->schema);
  sl__free(d);
}

/* One image in, one out: upstream's length, unless bad images are left
 * out (the skip policy); the words of ignore_errors (core/stats.h). */
static const sl__engine_stage_hooks dec_hooks = {
    .free = dec_free,
    .skip_code = SL_ECORRUPT,
    .skipped = "images failed to decode",
    .option = "max_bad",
    .length_why = " (the skip policy leaves bad images out)",
};

/* What makes the output differ: the field, the shape and format asked for,
 * the policy and the order (not threads or window). */
static void dec_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const dec_state *d = st;
  snprintf(buf, cap,
           "field=%s shape=%ux%ux%d resize=%d policy=%s max_bad=%llu "
           "ordered=%d",
           d->field_name, d->shape.height, d->shape.width, d->shape.channels,
           (int)d->shape.resize,
           d->policy == SL_CORRUPT_SKIP_CHUNK ? "skip" : "fail",
           (unsigned long long)d->run.ignore_cap, d->run.ordered ? 1 : 0);
}

/* The memory budget: the engine's, and the pool's idle buffers (charged
 * from the next decode). */
static void dec_budget(void *st, sl__budget_acct *acct) {
  sl__engine_stage_budget(st, acct);
  sl__resident_account(&((dec_state *)st)->idle, acct);
}

static const sl__stage_ops dec_ops[] = {
    SL__ENGINE_STAGE_OPS_BUDGET("decode_image", dec_identity, dec_budget),
    SL__ENGINE_STAGE_OPS_BUDGET("image", dec_identity, dec_budget),
};

/* --- construction ------------------------------------------------------------
 */

int sl__schema_with_field(const sl_schema *up, int field, sl_dtype dtype,
                          int rank, const int64_t *shape, sl_schema **out) {
  *out = NULL;
  sl_schema *s = sl_schema_new();
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "cannot allocate a schema");
  int rc = SL_OK, n = sl_schema_nfields(up);
  for (int i = 0; i < n && rc >= 0; i++) {
    if (i == field)
      rc = sl_schema_add(s, sl_schema_field_name(up, i), dtype, rank, shape);
    else
      rc = sl_schema_add(
          s, sl_schema_field_name(up, i), sl_schema_field_dtype(up, i),
          sl_schema_field_rank(up, i), sl_schema_field_shape(up, i));
  }
  int nm = sl_schema_meta_count(up);
  for (int i = 0; i < nm && rc >= 0; i++) {
    const char *k, *v;
    rc = sl_schema_meta_at(up, i, &k, &v);
    if (rc >= 0) rc = sl_schema_set_meta(s, k, v);
  }
  if (rc < 0) {
    sl_schema_release(s);
    return rc;
  }
  *out = s;
  return SL_OK;
}

int sl__image_field(const char *stage, const sl_schema *up, const char *name) {
  int field = sl_schema_find(up, name);
  if (field >= 0) return field;
  char desc[512];
  return sl_set_error(SL_EINVAL, "%s: upstream has no field '%s' (schema %s)",
                      stage, name, sl_schema_describe(up, desc, sizeof desc));
}

int sl__decode_image_make(sl_reader *up, const sl_image_opts *opts,
                          const char *stage, const char *const *names,
                          size_t nnames, sl_reader **out) {
  if (!out) {
    sl_reader_destroy(up);
    return sl_set_error(SL_EINVAL, "%s: NULL out pointer", stage);
  }
  *out = NULL;
  if (!up) return sl_set_error(SL_EINVAL, "%s: NULL upstream reader", stage);
  sl_image_opts o = SL_IMAGE_OPTS_INIT;
  SL_FORWARD_IF_ERROR(
      sl__decorator_opts(up, "sl_image_opts", &o, sizeof o, opts));
  const char *fname = o.field ? o.field : "image";
  const sl_schema *us = sl_reader_schema(up);
  int rc = sl__image_shape_check(stage, &o.shape);
  int field = rc == SL_OK ? sl__image_field(stage, us, fname) : rc;
  if (field < 0) {
    rc = field;
  } else if (sl_schema_field_dtype(us, field) != SL_BYTES &&
             sl_schema_field_dtype(us, field) != SL_U8) {
    rc = sl_set_error(SL_ESHAPE,
                      "%s: field '%s' holds %s, not encoded image bytes "
                      "(bytes or u8)",
                      stage, fname,
                      sl_dtype_name(sl_schema_field_dtype(us, field)));
  } else if (o.window > WINDOW_MAX) {
    rc = sl_set_error(SL_EINVAL, "%s: window must be 0..%u (got %u)", stage,
                      WINDOW_MAX, o.window);
  } else if (o.policy != SL_CORRUPT_FAIL && o.policy != SL_CORRUPT_SKIP_CHUNK) {
    rc = sl_set_error(SL_EINVAL, "%s: unknown corrupt policy %d", stage,
                      (int)o.policy);
  }
  if (rc < 0) return sl__fail_with_upstream(up, rc);

  dec_state *d = sl__calloc(1, sizeof *d);
  if (!d)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "%s: cannot allocate", stage));
  sl__resident_init(&d->idle);
  d->stage = stage;
  d->field = field;
  snprintf(d->field_name, sizeof d->field_name, "%s", fname);
  d->shape = o.shape;
  d->policy = o.policy;
  d->names = names;
  d->nnames = nnames;
  /* The engine checks the thread count (sl__threads_check). */
  int threads = sl__threads_opt(o.threads);
  int started = (int)sl__threads_resolve(threads); /* auto: the most */
  size_t window = o.window ? o.window : 4 * (size_t)started;
  if (window < (size_t)started) window = (size_t)started;
  const sl__engine_stage_cfg cfg = {
      .hooks = &dec_hooks,
      .one_to_one = o.policy != SL_CORRUPT_SKIP_CHUNK,
      .lazy = true,
      .ignore_cap = o.max_bad ? o.max_bad : 16,
      .what = stage,
      .ops = &dec_engine,
      .opts = {stage, "sl-decode", threads, !o.unordered, window}};
  rc = sl__engine_stage_init(&d->run, up, &cfg);
  if (rc == SL_OK) {
    sl__engine_set_cache(d->run.engine, 1); /* window: the exact bound */
    /* Idle buffers kept for reuse: enough for the window, the images being
     * decoded and some the consumer holds, at most POOL_IDLE_BYTES. */
    d->pool = sl__buffer_pool_new(window + (size_t)started + POOL_SPARE,
                                  POOL_IDLE_BYTES);
    if (!d->pool)
      rc =
          sl_set_error(SL_ENOMEM, "%s: cannot allocate the buffer pool", stage);
  }
  if (rc == SL_OK) {
    int64_t dims[3];
    sl__image_schema_dims(&o.shape, dims);
    rc = sl__schema_with_field(us, field, SL_U8, 3, dims, &d->schema);
    if (rc < 0) sl_wrap_error(rc, "%s", stage);
  }
  if (rc < 0) {
    sl__engine_stage_destroy(d);
    return rc;
  }
  return sl__engine_stage_wrap(&dec_ops[strcmp(stage, "image") == 0], &d->run,
                               d->schema, out);
}

int sl_decode_image(sl_reader *up, const sl_image_opts *opts, sl_reader **out) {
  return sl__decode_image_make(up, opts, "decode_image", NULL, 0, out);
}
