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
 * Position: a window depends on every value before it, so a saved state
 * is the position alone and the restore re-reads the pass up to it (lm.h,
 * sl__lm_save_replay).
 */
#include "readers/lm.h"

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
} window_state;

static int append(window_state *w, const sl_tensor *t) {
  size_t len = (size_t)t->shape[0];
  const unsigned char *src = t->data;
  if (w->have == 0 && w->base < w->start) { /* drop what precedes start */
    uint64_t skip = SL_MIN((uint64_t)len, w->start - w->base);
    w->base += skip;
    src += skip * w->es;
    len -= (size_t)skip;
  }
  if (len == 0) return SL_OK;
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
    rc = append(w, t);
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
  w->start += w->stride;
  uint64_t drop = SL_MIN((uint64_t)w->have, w->start - w->base);
  memmove(w->buf, w->buf + drop * w->es, (w->have - drop) * w->es);
  w->have -= (size_t)drop;
  w->base += drop;
  *out = o;
  return SL_OK;
}

static void clear(window_state *w) {
  w->have = 0;
  w->base = 0;
  w->start = 0;
  w->ended = false;
}

static int window_reset(void *st) {
  window_state *w = st;
  clear(w);
  return sl_reader_reset(w->up);
}

static void window_destroy(void *st) {
  window_state *w = st;
  if (!w) return;
  sl__free(w->buf);
  sl_schema_release(w->schema);
  sl_reader_destroy(w->up);
  sl__free(w);
}

static int window_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_out *out) {
  (void)r;
  (void)pass;
  window_state *w = st;
  return sl__lm_save_replay(&w->up, NULL, 1, k, out);
}

static int window_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                          sl__state_in *in) {
  (void)r;
  (void)pass;
  window_state *w = st;
  clear(w);
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, w->up));
  return sl__state_replay(window_next, w, k, "window");
}

static void window_identity(const sl_reader *r, void *st, char *buf,
                            size_t cap) {
  (void)r;
  const window_state *w = st;
  snprintf(buf, cap, "field=%s size=%llu stride=%llu drop_remainder=%d",
           w->name, (unsigned long long)w->size, (unsigned long long)w->stride,
           w->drop);
}

static const sl__state_ops window_state_ops = {window_save, window_restore,
                                               window_identity};

static const sl_reader_vtable window_vt = {"window", window_next, window_reset,
                                           window_destroy};

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
  window_state *w = sl__calloc(1, sizeof *w);
  if (!w)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "window: cannot allocate"));
  w->up = up;
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
  sl_schema *schema = sl_schema_retain(w->schema);
  rc = sl__decorator_make(&window_vt, w, schema, &w->up, NULL, out);
  sl_schema_release(schema);
  if (rc < 0) return rc;
  sl__reader_set_state_ops(*out, &window_state_ops);
  return SL_OK;
}
