/*
 * arrow_export.c - samples out as Arrow arrays (sl_sample_to_arrow) and a
 * reader as an Arrow stream (sl_reader_to_arrow_stream); the mapping is
 * documented in include/sluice/arrow.h.
 *
 * Every exported array (the struct and each child, down to the leaves) has
 * its own private block holding a reference to the sample, its buffer
 * pointers, its children's structs and whatever it had to make (packed
 * bools): the interface lets a consumer move a child out and release it
 * apart from its parent, so no block depends on another.  A release
 * releases the children still in place (release non-NULL), frees the
 * block and drops the sample's reference.  Schemas likewise own their
 * format and name strings.
 */
#include "core/internal.h"
#include "stages/stage.h"

#include <errno.h>
#include <stdlib.h>

/* --- arrays ----------------------------------------------------------------- */

typedef struct exp_block {
  sl_sample *ref;
  const void *bufs[3];
  void *owned;                 /* packed bools */
  struct ArrowArray *storage;  /* the children's structs */
  struct ArrowArray **kids;
  int64_t nkids;
} exp_block;

static void array_release(struct ArrowArray *a) {
  if (!a || !a->release) return;
  exp_block *b = a->private_data;
  for (int64_t i = 0; i < b->nkids; i++)
    if (b->storage[i].release) b->storage[i].release(&b->storage[i]);
  sl_sample_release(b->ref);
  SL__FREE(b->owned, b->storage, b->kids, b);
  a->release = NULL;
}

/* Makes *a a live array of `nkids` children (their structs zeroed, i.e.
 * released) holding a reference to `ref`. */
static int array_init(struct ArrowArray *a, sl_sample *ref, int64_t length,
                      int64_t nbufs, int64_t nkids) {
  memset(a, 0, sizeof *a);
  exp_block *b = sl__calloc(1, sizeof *b);
  if (b && nkids) {
    b->storage = sl__calloc((size_t)nkids, sizeof *b->storage);
    b->kids = sl__calloc((size_t)nkids, sizeof *b->kids);
  }
  if (!b || (nkids && (!b->storage || !b->kids))) {
    if (b) SL__FREE(b->storage, b->kids);
    sl__free(b);
    return sl_set_error(SL_ENOMEM, "sl_sample_to_arrow: out of memory");
  }
  b->nkids = nkids;
  for (int64_t i = 0; i < nkids; i++) b->kids[i] = &b->storage[i];
  b->ref = sl_sample_retain(ref);
  a->length = length;
  a->n_buffers = nbufs;
  a->n_children = nkids;
  a->buffers = b->bufs;
  a->children = nkids ? b->kids : NULL;
  a->private_data = b;
  a->release = array_release;
  return SL_OK;
}

/* --- schemas ---------------------------------------------------------------- */

typedef struct sch_block {
  char *format, *name;
  struct ArrowSchema *storage;
  struct ArrowSchema **kids;
  int64_t nkids;
} sch_block;

static void schema_release(struct ArrowSchema *s) {
  if (!s || !s->release) return;
  sch_block *b = s->private_data;
  for (int64_t i = 0; i < b->nkids; i++)
    if (b->storage[i].release) b->storage[i].release(&b->storage[i]);
  SL__FREE(b->format, b->name, b->storage, b->kids, b);
  s->release = NULL;
}

static int schema_init(struct ArrowSchema *s, const char *format,
                       const char *name, int64_t nkids) {
  memset(s, 0, sizeof *s);
  sch_block *b = sl__calloc(1, sizeof *b);
  if (b) {
    b->format = sl__strdup(format);
    b->name = sl__strdup(name ? name : "");
    if (nkids) {
      b->storage = sl__calloc((size_t)nkids, sizeof *b->storage);
      b->kids = sl__calloc((size_t)nkids, sizeof *b->kids);
    }
  }
  if (!b || !b->format || !b->name ||
      (nkids && (!b->storage || !b->kids))) {
    if (b) SL__FREE(b->format, b->name, b->storage, b->kids);
    sl__free(b);
    return sl_set_error(SL_ENOMEM, "sl_sample_to_arrow: out of memory");
  }
  b->nkids = nkids;
  for (int64_t i = 0; i < nkids; i++) b->kids[i] = &b->storage[i];
  s->format = b->format;
  s->name = b->name;
  /* Nullable, Arrow's default (what pyarrow makes of a column), so that
   * the types equal and concatenate with other producers'; none is null. */
  s->flags = ARROW_FLAG_NULLABLE;
  s->n_children = nkids;
  s->children = nkids ? b->kids : NULL;
  s->private_data = b;
  s->release = schema_release;
  return SL_OK;
}

/* --- fields ------------------------------------------------------------------- */

static const char *prim_format(sl_dtype dt) {
  switch (dt) {
  case SL_BOOL: return "b";
  case SL_U8: case SL_BYTES: return "C";
  case SL_I8: return "c";
  case SL_U16: return "S";
  case SL_I16: return "s";
  case SL_U32: return "I";
  case SL_I32: return "i";
  case SL_U64: return "L";
  case SL_I64: return "l";
  case SL_F16: return "e";
  case SL_F32: return "f";
  case SL_F64: return "g";
  default: return NULL;
  }
}

/* The leaf array (and schema) of `count` elements of tensor t from element
 * 0. */
static int export_leaf(sl_sample *ref, const sl_tensor *t, int64_t count,
                       struct ArrowSchema *s, struct ArrowArray *a,
                       const char *name) {
  SL_FORWARD_IF_ERROR(schema_init(s, prim_format(t->dtype), name, 0));
  int rc = array_init(a, ref, count, 2, 0);
  if (rc < 0) return rc;
  exp_block *b = a->private_data;
  if (t->dtype == SL_BOOL) {
    size_t nb = (size_t)(count + 7) / 8;
    uint8_t *bits = sl__calloc(nb ? nb : 1, 1);
    SL_RETURN_ERROR_IF(!bits, SL_ENOMEM, "sl_sample_to_arrow: out of memory");
    const uint8_t *v = t->data;
    for (int64_t i = 0; i < count; i++)
      if (v[i]) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
    b->owned = bits;
    b->bufs[1] = bits;
  } else {
    b->bufs[1] = t->data;
  }
  return SL_OK;
}

/* Dims [from, rank) of t as nested fixed-size lists over the leaf, `rows`
 * slots at the top. */
static int export_fixed(sl_sample *ref, const sl_tensor *t, int from,
                        int64_t rows, struct ArrowSchema *s,
                        struct ArrowArray *a, const char *name) {
  if (from >= t->rank) return export_leaf(ref, t, rows, s, a, name);
  char fmt[32];
  snprintf(fmt, sizeof fmt, "+w:%lld", (long long)t->shape[from]);
  SL_FORWARD_IF_ERROR(schema_init(s, fmt, name, 1));
  SL_FORWARD_IF_ERROR(array_init(a, ref, rows, 1, 1));
  return export_fixed(ref, t, from + 1, rows * t->shape[from], s->children[0],
                      a->children[0], "item");
}

static int export_field(sl_sample *ref, const sl_tensor *t, const char *name,
                        int64_t rows, struct ArrowSchema *s,
                        struct ArrowArray *a) {
  if (!t->lod) return export_fixed(ref, t, 1, rows, s, a, name);
  int64_t dim0 = t->rank ? t->shape[0] : 0;
  if (t->dtype == SL_BYTES && t->rank == 1) {
    SL_FORWARD_IF_ERROR(schema_init(s, "U", name, 0));
    SL_FORWARD_IF_ERROR(array_init(a, ref, rows, 3, 0));
    exp_block *b = a->private_data;
    b->bufs[1] = t->lod;
    b->bufs[2] = t->data ? t->data : (const void *)t->lod; /* non-NULL */
    return SL_OK;
  }
  SL_FORWARD_IF_ERROR(schema_init(s, "+L", name, 1));
  SL_FORWARD_IF_ERROR(array_init(a, ref, rows, 2, 1));
  ((exp_block *)a->private_data)->bufs[1] = t->lod;
  return export_fixed(ref, t, 1, dim0, s->children[0], a->children[0],
                      "item");
}

/* The field's row count: its LoD's sequences, else its leading dim. */
static int64_t field_rows(const sl_tensor *t) {
  return t->lod ? t->lod_len - 1 : t->shape[0];
}

int sl_sample_to_arrow(const sl_sample *batch, struct ArrowSchema *schema,
                       struct ArrowArray *array) {
  if (schema) schema->release = NULL;
  if (array) array->release = NULL;
  SL_RETURN_ERROR_IF(!batch || !schema || !array, SL_EINVAL,
                     "sl_sample_to_arrow: NULL argument");
  sl_sample *ref = (sl_sample *)(uintptr_t)batch;
  const sl_schema *sc = sl_sample_schema(batch);
  int n = sl_sample_nfields(batch);
  int64_t rows = -1;
  int first = -1;
  for (int i = 0; i < n; i++) {
    const sl_tensor *t = sl_sample_at_const(batch, i);
    const char *nm = sl_schema_field_name(sc, i);
    SL_RETURN_ERROR_IF(t->rank == 0 && !t->lod, SL_EINVAL,
                       "sl_sample_to_arrow: field '%s' is a scalar: export a "
                       "batch (leading dimension = rows), not one sample",
                       nm);
    SL_RETURN_ERROR_IF(!prim_format(t->dtype), SL_EUNSUPPORTED,
                       "sl_sample_to_arrow: field '%s': %s has no Arrow type "
                       "(convert it to f32 first)",
                       nm, sl_dtype_name(t->dtype));
    int64_t r = field_rows(t);
    if (rows < 0) {
      rows = r;
      first = i;
    }
    SL_RETURN_ERROR_IF(r != rows, SL_ESHAPE,
                       "sl_sample_to_arrow: field '%s' has %lld rows but "
                       "'%s' has %lld (a record batch's columns have one "
                       "length)",
                       nm, (long long)r, sl_schema_field_name(sc, first),
                       (long long)rows);
  }
  if (rows < 0) rows = 0;
  int rc = schema_init(schema, "+s", "", n);
  if (rc == SL_OK) rc = array_init(array, ref, rows, 1, n);
  for (int i = 0; i < n && rc == SL_OK; i++)
    rc = export_field(ref, sl_sample_at_const(batch, i),
                      sl_schema_field_name(sc, i), rows, schema->children[i],
                      array->children[i]);
  if (rc < 0) {
    schema_release(schema);
    array_release(array);
  }
  return rc;
}

/* --- a reader as a stream ----------------------------------------------- */

typedef struct exp_stream {
  sl_reader *r;
  struct ArrowSchema first; /* the first sample's type (release NULL: none) */
  sl_sample *pending;       /* pulled by get_schema, not yet handed out */
  int done;
  char *err;
} exp_stream;

static int stream_fail(exp_stream *x, int code) {
  sl__free(x->err);
  x->err = sl__strdup(sl_last_error());
  return code;
}

/* Pulls the first sample to learn the type. */
static int stream_prime(exp_stream *x) {
  if (x->first.release || x->done) return 0;
  sl_sample *s = NULL;
  int rc = sl_reader_next(x->r, &s);
  if (rc == SL_EOF) {
    x->done = 1;
    sl_set_error(SL_EINVAL, "sl_reader_to_arrow_stream: the reader yielded no "
                 "sample, so the stream has no type");
    return stream_fail(x, EINVAL);
  }
  if (rc < 0) return stream_fail(x, EIO);
  struct ArrowArray tmp;
  rc = sl_sample_to_arrow(s, &x->first, &tmp);
  if (rc < 0) {
    sl_sample_release(s);
    return stream_fail(x, EINVAL);
  }
  tmp.release(&tmp);
  x->pending = s;
  return 0;
}

static int schema_copy(const struct ArrowSchema *src, struct ArrowSchema *dst) {
  int rc = schema_init(dst, src->format, src->name, src->n_children);
  for (int64_t i = 0; i < src->n_children && rc == SL_OK; i++)
    rc = schema_copy(src->children[i], dst->children[i]);
  if (rc < 0) schema_release(dst);
  return rc;
}

static bool same_type(const struct ArrowSchema *a,
                      const struct ArrowSchema *b) {
  if (strcmp(a->format, b->format) != 0 || a->n_children != b->n_children)
    return false;
  for (int64_t i = 0; i < a->n_children; i++)
    if (!same_type(a->children[i], b->children[i])) return false;
  return true;
}

/* The first column of struct b whose type differs from a's, or NULL. */
static const char *schema_diff(const struct ArrowSchema *a,
                               const struct ArrowSchema *b) {
  if (a->n_children != b->n_children) return "(the column count)";
  for (int64_t i = 0; i < a->n_children; i++)
    if (!same_type(a->children[i], b->children[i])) return b->children[i]->name;
  return NULL;
}

static int stream_get_schema(struct ArrowArrayStream *st,
                             struct ArrowSchema *out) {
  exp_stream *x = st->private_data;
  int e = stream_prime(x);
  if (e) return e;
  if (!x->first.release) return EINVAL;
  return schema_copy(&x->first, out) < 0 ? stream_fail(x, ENOMEM) : 0;
}

static int stream_get_next(struct ArrowArrayStream *st,
                           struct ArrowArray *out) {
  exp_stream *x = st->private_data;
  out->release = NULL;
  if (!x->first.release && !x->done) {
    int e = stream_prime(x);
    if (e && !x->done) return e; /* an empty reader ends the stream */
  }
  sl_sample *s = x->pending;
  x->pending = NULL;
  if (!s) {
    if (x->done) return 0;
    int rc = sl_reader_next(x->r, &s);
    if (rc == SL_EOF) {
      x->done = 1;
      return 0;
    }
    if (rc < 0) return stream_fail(x, EIO);
  }
  struct ArrowSchema sc;
  int rc = sl_sample_to_arrow(s, &sc, out);
  sl_sample_release(s);
  if (rc < 0) return stream_fail(x, EINVAL);
  const char *d = schema_diff(&x->first, &sc);
  sc.release(&sc);
  if (d) {
    out->release(out);
    sl_set_error(SL_ESHAPE, "sl_reader_to_arrow_stream: field '%s' changed "
                 "its Arrow type after the first batch",
                 d);
    return stream_fail(x, EINVAL);
  }
  return 0;
}

static const char *stream_last_error(struct ArrowArrayStream *st) {
  exp_stream *x = st->private_data;
  return x->err;
}

static void stream_release(struct ArrowArrayStream *st) {
  if (!st || !st->release) return;
  exp_stream *x = st->private_data;
  sl_sample_release(x->pending);
  if (x->first.release) x->first.release(&x->first);
  sl_reader_destroy(x->r);
  SL__FREE(x->err, x);
  st->release = NULL;
}

int sl_reader_to_arrow_stream(sl_reader *r, struct ArrowArrayStream *out) {
  if (out) out->release = NULL;
  if (!r || !out) {
    sl_reader_destroy(r);
    return sl_set_error(SL_EINVAL, "sl_reader_to_arrow_stream: NULL %s",
                        r ? "out" : "reader");
  }
  exp_stream *x = sl__calloc(1, sizeof *x);
  if (!x) {
    sl_reader_destroy(r);
    return sl_set_error(SL_ENOMEM, "sl_reader_to_arrow_stream: out of memory");
  }
  x->r = r;
  out->get_schema = stream_get_schema;
  out->get_next = stream_get_next;
  out->get_last_error = stream_last_error;
  out->release = stream_release;
  out->private_data = x;
  return SL_OK;
}
