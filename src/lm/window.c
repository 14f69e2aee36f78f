/*
 * window.c - sl_window: fixed windows over a token stream that runs across
 * sample boundaries (tf.data's window + flat_map over one field).
 *
 * The stream is the values of field F of every upstream sample, one after
 * the other; window j is stream values [j*S, j*S + N).  The stage keeps a
 * buffer holding stream values [base, base + have): when have > 0 it starts
 * at the next window's start; when have == 0, base is where the next
 * incoming value sits, and values before the next start (a stride larger
 * than the window) are dropped as they arrive.  A window is copied out of
 * the buffer, then the values before the following start are dropped, so
 * the buffer holds at most N values plus one upstream sample.
 *
 * End of pass: windows that start inside the stream but lack values are
 * yielded short unless drop_remainder (tf.data's drop_remainder=False:
 * with a stride below the size, the last size / stride windows shrink).
 *
 * Length: known when field F has a fixed length per sample and upstream
 * knows its length (window_length); unknown for a field of varying length.
 *
 * Position.  Where window k starts is an upstream sample and an offset in
 * it: the stage keeps, for the values in its buffer, the samples they came
 * from (a queue of segments: sample number, offset of the first value held,
 * values held), and for its last SL__STATE_LOG windows where each started.
 * A saved state is (sample, offset): the restore resumes upstream at that
 * sample and drops `offset` values (mode 0).  A save further behind than
 * the log (stages above holding more than SL__STATE_LOG windows: a shuffle
 * of windows) starts from a checkpoint instead: the stage also keeps where
 * every SL__STATE_LOG-th window of the pass started (16 bytes per 1024
 * windows), and saves the checkpoint at or before k (mode 2); the restore
 * resumes there and makes the windows up to k again: fewer than
 * SL__STATE_LOG windows of the stream re-read, not the pass.  Mode 1 (the
 * pass re-read up to the position: gather.h, sl__gather_save_reread) is
 * left for a save behind a restore's position by more than the log, whose
 * pass has no checkpoints before it.
 */
#include "lm/lm.h"

#include <stdio.h>

typedef struct window_state {
  sl_reader *up;
  int field;
  sl_dtype dt;
  size_t es;
  uint64_t size, stride;
  int drop;
  char name[64];
  sl_schema *schema;
  unsigned char *buf; /* have values of es bytes, cap allocated */
  size_t have, cap;
  uint64_t base;  /* stream position of buf[0] */
  uint64_t start; /* the next window's first stream position */
  bool ended;
  uint64_t pulled; /* upstream samples read this pass */
  /* the samples the buffer's values came from, oldest first (a ring) */
  struct seg {
    uint64_t sample, off, n; /* off: of the first value held in its sample */
  } * segs;
  size_t nseg, seg0, segcap;
  /* where each of the last SL__STATE_LOG windows started */
  struct at {
    uint64_t sample, off;
  } log[SL__STATE_LOG];
  uint64_t count; /* windows yielded this pass */
  /* where window i * SL__STATE_LOG started, for i < nckpt (this pass) */
  struct at *ckpt;
  size_t nckpt, ckptcap;
} window_state;

static struct seg *seg_at(window_state *w, size_t i) {
  return &w->segs[(w->seg0 + i) % w->segcap];
}

/* Values [off, off + n) of upstream sample `sample` join the buffer. */
static int seg_push(window_state *w, uint64_t sample, uint64_t off,
                    uint64_t n) {
  if (w->nseg == w->segcap) {
    size_t cap = w->segcap ? w->segcap * 2 : 16;
    struct seg *v = sl__malloc(cap * sizeof *v);
    SL_RETURN_ERROR_IF(!v, SL_ENOMEM, "window: cannot allocate");
    for (size_t i = 0; i < w->nseg; i++)
      v[i] = *seg_at(w, i);
    sl__free(w->segs);
    w->segs = v;
    w->segcap = cap;
    w->seg0 = 0;
  }
  w->segs[(w->seg0 + w->nseg++) % w->segcap] = (struct seg){sample, off, n};
  return SL_OK;
}

/* The first d values of the buffer leave it. */
static void seg_drop(window_state *w, uint64_t d) {
  while (d > 0 && w->nseg > 0) {
    struct seg *g = seg_at(w, 0);
    uint64_t k = SL_MIN(d, g->n);
    g->off += k;
    g->n -= k;
    d -= k;
    if (g->n == 0) {
      w->seg0 = (w->seg0 + 1) % w->segcap;
      w->nseg--;
    }
  }
}

/* Where the next window starts: a sample and an offset in it. */
static struct at next_at(const window_state *w) {
  if (w->have > 0) {
    const struct seg *g = &w->segs[w->seg0];
    return (struct at){g->sample, g->off};
  }
  /* nothing held: the next sample to read, which starts at `base` */
  return (struct at){w->pulled, w->start - w->base};
}

static int append(window_state *w, const sl_tensor *t, uint64_t sample) {
  size_t len = (size_t)t->shape[0];
  const unsigned char *src = t->data;
  uint64_t skip = 0;
  if (w->have == 0 && w->base < w->start) { /* drop what precedes start */
    skip = SL_MIN((uint64_t)len, w->start - w->base);
    w->base += skip;
    src += skip * w->es;
    len -= (size_t)skip;
  }
  if (len == 0) return SL_OK;
  SL_FORWARD_IF_ERROR(seg_push(w, sample, skip, len));
  if (w->have + len > w->cap) {
    size_t cap = SL_MAX(w->cap * 2, w->have + len);
    unsigned char *b = sl__realloc(w->buf, cap * w->es);
    SL_RETURN_ERROR_IF(!b, SL_ENOMEM,
                       "window: cannot hold %zu values of field '%s'", cap,
                       w->name);
    w->buf = b;
    w->cap = cap;
  }
  memcpy(w->buf + w->have * w->es, src, len * w->es);
  w->have += len;
  return SL_OK;
}

static int pull(window_state *w) {
  sl_sample *s = NULL;
  int rc = sl_reader_next(w->up, &s);
  if (rc == SL_EOF) {
    w->ended = true;
    return SL_OK;
  }
  if (rc < 0) return rc;
  const sl_tensor *t = sl_sample_at_const(s, w->field);
  rc = sl_schema_check(sl_reader_schema(w->up), w->field, t);
  if (rc < 0)
    rc = sl_wrap_error(rc, "window");
  else
    rc = append(w, t, w->pulled);
  w->pulled++;
  sl_sample_release(s);
  return rc;
}

static int window_next(void *st, sl_sample **out) {
  window_state *w = st;
  while (!w->ended && (w->have == 0 || w->base + w->have < w->start + w->size))
    SL_FORWARD_IF_ERROR(pull(w));
  uint64_t avail = w->have ? w->base + w->have - w->start : 0;
  if (avail == 0 || (avail < w->size && w->drop)) return SL_EOF;
  int64_t len = (int64_t)SL_MIN(avail, w->size);
  sl_sample *o = sl_sample_new(w->schema);
  SL_RETURN_ERROR_IF(!o, SL_ENOMEM, "window: cannot allocate");
  void *data = NULL;
  int rc = sl_sample_alloc(o, 0, 1, &len, &data);
  if (rc < 0) {
    sl_sample_release(o);
    return sl_wrap_error(rc, "window");
  }
  memcpy(data, w->buf, (size_t)len * w->es);
  if (w->count == (uint64_t)w->nckpt * SL__STATE_LOG) {
    if (w->nckpt == w->ckptcap) {
      size_t cap = w->ckptcap ? 2 * w->ckptcap : 16;
      struct at *v = sl__realloc(w->ckpt, cap * sizeof *v);
      if (!v) {
        sl_sample_release(o);
        return sl_set_error(SL_ENOMEM, "window: cannot allocate");
      }
      w->ckpt = v;
      w->ckptcap = cap;
    }
    w->ckpt[w->nckpt++] = next_at(w);
  }
  w->log[w->count++ % SL__STATE_LOG] = next_at(w);
  w->start += w->stride;
  uint64_t drop = SL_MIN((uint64_t)w->have, w->start - w->base);
  memmove(w->buf, w->buf + drop * w->es, (w->have - drop) * w->es);
  w->have -= (size_t)drop;
  w->base += drop;
  seg_drop(w, drop);
  *out = o;
  return SL_OK;
}

static void clear(window_state *w) {
  w->have = 0;
  w->base = 0;
  w->start = 0;
  w->ended = false;
  w->pulled = 0;
  w->nseg = 0;
  w->seg0 = 0;
  w->count = 0;
  w->nckpt = 0;
}

static int window_reset(void *st) {
  window_state *w = st;
  clear(w);
  return sl_reader_reset(w->up);
}

static void window_destroy(void *st) {
  window_state *w = st;
  if (!w) return;
  SL__FREE(w->buf, w->segs, w->ckpt);
  sl__stage_free(w, w->up, w->schema);
}

/* Payload: 0 and the offset (upstream saved at the sample); 2, the
 * checkpoint's number and offset (upstream saved at its sample, read again
 * up to k); or 1 (the pass is re-read: upstream saved at its start). */
static int window_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_out *out) {
  window_state *w = st;
  struct at at;
  uint64_t up_pass = sl__state_up_pass(r, w->up, pass);
  bool known = pass == sl__reader_pass(r) && k <= w->count;
  if (known && k == w->count)
    at = next_at(w);
  else if (known && w->count - k <= SL__STATE_LOG && k < w->count)
    at = w->log[k % SL__STATE_LOG];
  else
    known = false;
  if (!known && pass == sl__reader_pass(r) && k < w->count &&
      k / SL__STATE_LOG < w->nckpt) {
    const struct at *c = &w->ckpt[k / SL__STATE_LOG];
    SL_FORWARD_IF_ERROR(sl__state_put_u64(out, 2));
    SL_FORWARD_IF_ERROR(sl__state_put_u64(out, k / SL__STATE_LOG));
    SL_FORWARD_IF_ERROR(sl__state_put_u64(out, c->off));
    return sl__state_save_up_replayed(out, w->up, up_pass, c->sample);
  }
  if (!known) {
    SL_FORWARD_IF_ERROR(sl__state_put_u64(out, 1));
    return sl__gather_save_reread(&w->up, &up_pass, 1, k, out);
  }
  SL_FORWARD_IF_ERROR(sl__state_put_u64(out, 0));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(out, at.off));
  return sl__state_save_up(out, w->up, up_pass, at.sample);
}

static int window_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                          sl__state_in *in) {
  window_state *w = st;
  clear(w);
  uint64_t mode, off = 0, c = 0, at = k;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &mode));
  SL_RETURN_ERROR_IF(mode > 2, SL_ECORRUPT,
                     "restore: corrupt state: window: mode %llu",
                     (unsigned long long)mode);
  if (mode == 2) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &c));
    SL_RETURN_ERROR_IF(c != k / SL__STATE_LOG, SL_ECORRUPT,
                       "restore: corrupt state: window: checkpoint %llu for "
                       "window %llu",
                       (unsigned long long)c, (unsigned long long)k);
    at = c * SL__STATE_LOG;
  }
  if (mode != 1) SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &off));
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, w->up));
  if (mode == 1) return sl__state_replay(window_next, w, k, "window");
  SL_RETURN_ERROR_IF(k > UINT64_MAX / w->stride, SL_ECORRUPT,
                     "restore: window: position %llu overflows",
                     (unsigned long long)k);
  /* window `at` starts `off` values into the next upstream sample */
  w->pulled = sl__reader_delivered(w->up);
  w->count = at;
  w->start = at * w->stride;
  SL_RETURN_ERROR_IF(off > w->start, SL_ECORRUPT,
                     "restore: window: offset %llu beyond position %llu",
                     (unsigned long long)off, (unsigned long long)w->start);
  w->base = w->start - off;
  return at < k ? sl__state_replay(window_next, w, k - at, "window") : SL_OK;
}

static void window_identity(const sl_reader *r, void *st, char *buf,
                            size_t cap) {
  const window_state *w = st;
  snprintf(buf, cap, "field=%s size=%llu stride=%llu drop_remainder=%d",
           w->name, (unsigned long long)w->size, (unsigned long long)w->stride,
           w->drop);
}

/* The number of windows when field F has a fixed length C per sample (as
 * tf.data knows the cardinality of window): the stream has T = upstream's
 * length x C values; windows start at 0, S, 2S, ... below T, and with
 * drop_remainder only those with N values count.  A field of varying
 * length is SL_EUNSUPPORTED: the count depends on every sample's length. */
static int window_length(const sl_reader *r, void *st, uint64_t *n) {
  window_state *w = st;
  int64_t c = sl_schema_field_shape(sl_reader_schema(w->up), w->field)[0];
  if (c == SL_DIM_VAR)
    return sl_set_error(SL_EUNSUPPORTED,
                        "window: field '%s' varies in length from sample to "
                        "sample, so the number of windows is not known",
                        w->name);
  uint64_t up;
  SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  SL_RETURN_ERROR_IF(c && up > UINT64_MAX / (uint64_t)c, SL_EUNSUPPORTED,
                     "window: the stream's length does not fit 64 bits");
  *n = sl__gather_count(up * (uint64_t)c, w->size, w->stride, w->drop);
  return SL_OK;
}

static const sl__stage_ops window_ops = {
    .name = "window",
    .next = window_next,
    .reset = window_reset,
    .destroy = window_destroy,
    .length = window_length,
    .save = window_save,
    .restore = window_restore,
    .identity = window_identity,
};

int sl_window(sl_reader *up, const char *field, size_t size, size_t stride,
              int drop_remainder, sl_reader **out) {
  SL_DECORATOR_ARGS("window", up, out);
  const sl_schema *in = sl_reader_schema(up);
  int fi = field ? sl_schema_find(in, field) : -1;
  int rc = SL_OK;
  if (!field)
    rc = sl_set_error(SL_EINVAL, "window: NULL field");
  else if (fi < 0)
    rc = sl_set_error(SL_EINVAL, "window: no field '%s' upstream", field);
  else if (strlen(field) >= 64)
    rc = sl_set_error(SL_EINVAL, "window: field name too long");
  else if (size == 0 || size > (size_t)INT32_MAX)
    rc = sl_set_error(SL_EINVAL, "window: size must be in [1, 2^31), got %zu",
                      size);
  else if (!sl__token_dtype(sl_schema_field_dtype(in, fi)) ||
           sl_schema_field_rank(in, fi) != 1)
    rc = sl_set_error(SL_EINVAL,
                      "window: field '%s' must be a rank-1 i32, u16, u32 or "
                      "i64 field, it is %s of rank %d",
                      field, sl_dtype_name(sl_schema_field_dtype(in, fi)),
                      sl_schema_field_rank(in, fi));
  if (rc < 0) return sl__fail_with_upstream(up, rc);
  window_state *w = sl__decorator_state("window", up, sizeof *w);
  if (!w) return SL_ENOMEM;
  w->field = fi;
  w->dt = sl_schema_field_dtype(in, fi);
  w->es = sl_dtype_size(w->dt);
  w->size = size;
  w->stride = stride ? stride : size;
  w->drop = drop_remainder != 0;
  snprintf(w->name, sizeof w->name, "%s", field);
  w->schema = sl_schema_new();
  int64_t shape = w->drop ? (int64_t)size : SL_DIM_VAR;
  rc = !w->schema ? sl_set_error(SL_ENOMEM, "window: cannot allocate")
                  : sl_schema_add(w->schema, field, w->dt, 1, &shape);
  if (rc < 0) {
    window_destroy(w);
    return rc;
  }
  return sl__stage_wrap(&window_ops, w, w->schema, &w->up, NULL, out);
}
