/*
 * arrow_reader.c - the `arrow` source: one sample per row of an Arrow C
 * stream (sl_reader_from_arrow_stream, include/sluice/arrow.h; the mapping
 * of Arrow types to fields is documented there).  The parked streams that
 * sl_open("arrow:NAME") opens are src/open/arrow_park.c's.
 *
 * A column is a chain of nodes from the struct's child down to its values
 * (child 0 of each list): fixed-size lists (FSL, a fixed dimension), lists
 * and strings (VAR, a variable dimension; a string is a VAR whose values
 * are its own data buffer) and a primitive or bool leaf.  The chain is
 * classified once, from the stream's schema (col_map); each batch is then
 * checked against it (batch_load: child counts, buffers, offsets within
 * their children), so that sl_reader_next only indexes.
 *
 * A row of a column is a range of slots walked down the chain (row_range):
 * slot p of an FSL of N spans its child's slots child.offset + [p*N,
 * (p+1)*N); slots [a, b) of a VAR span its child's child.offset +
 * [o[a], o[b]).  Validity bitmaps are checked over each level's range.
 *
 * Ownership: each batch (the ArrowArray get_next filled) is moved into a
 * holder with a refcount: the reader holds one reference while the batch
 * is current, and each column's leaf values are wrapped as an sl_buffer
 * (sl_buffer_wrap) holding one more; tensors view those buffers, so the
 * batch's release runs when the reader has moved on and the last tensor
 * viewing it is gone, on whichever thread drops it.
 */
#include "core/internal.h"
#include "stages/stage.h"
#include "sync/resident.h"

#include <errno.h>
#include <stdlib.h>

#define MAX_DEPTH (SL_MAX_RANK + 2)

enum node_kind { N_PRIM, N_BOOL, N_FSL, N_LIST32, N_LIST64, N_STR32, N_STR64 };

typedef struct col {
  char name[64];
  char format[32]; /* the column's top format, for messages */
  int depth;       /* nodes in the chain */
  enum node_kind kind[MAX_DEPTH];
  int64_t n[MAX_DEPTH]; /* FSL sizes */
  int lod_at;           /* the node whose offsets become LoD, or -1 */
  sl_dtype dtype;
  size_t esize; /* leaf element size in bytes */
  int rank;
  int64_t shape[SL_MAX_RANK];
  int64_t trail; /* product of the fixed dims after the first variable one */
  /* per batch */
  const struct ArrowArray *node[MAX_DEPTH];
  sl_buffer *values;   /* the leaf's values (a wrap of the batch or a copy) */
  bool nulls;          /* a node of the chain has a validity bitmap in use */
} col;

typedef struct holder {
  sl__refcnt ref;
  struct ArrowArray arr;
} holder;

typedef struct arrow_state {
  struct ArrowArrayStream stream;
  char *name;
  col *cols;
  int ncols;
  sl_schema *schema;
  holder *cur;   /* the current batch, or NULL */
  int64_t row;   /* next row of cur */
  uint64_t batches;   /* batches received */
  uint64_t row_base;  /* rows in the stream before cur */
  int failed;         /* an error: repeated by every next */
  char *failure;
  /* the memory budget: the current batch's column values, validity
   * bitmaps and offsets, resident (the samples made from it are views
   * that keep it alive) */
  sl__resident mem;
} arrow_state;

static bool is_bit_set(const void *bm, int64_t i) {
  return (((const uint8_t *)bm)[i >> 3] >> (i & 7)) & 1;
}

static void holder_drop(holder *h) {
  if (!h || !sl__ref_dec(&h->ref)) return;
  if (h->arr.release) h->arr.release(&h->arr);
  sl__free(h);
}

static void holder_free_fn(void *ud, void *data) {
  SL_UNUSED(data);
  holder_drop(ud);
}

/* --- the schema: columns ---------------------------------------------------- */

static const struct {
  char f;
  sl_dtype dt;
} PRIMS[] = {{'c', SL_I8},  {'C', SL_U8},  {'s', SL_I16}, {'S', SL_U16},
             {'i', SL_I32}, {'I', SL_U32}, {'l', SL_I64}, {'L', SL_U64},
             {'e', SL_F16}, {'f', SL_F32}, {'g', SL_F64}, {'b', SL_BOOL}};

static int refuse(const arrow_state *s, const char *cname, const char *fmt,
                  const char *why) {
  return sl_set_error(SL_EUNSUPPORTED,
                      "arrow: %s: column '%s': Arrow type '%s' cannot be a "
                      "sluice field (%s)",
                      s->name, cname, fmt ? fmt : "(null)", why);
}

/* Classifies the chain under the column's schema `a`. */
static int col_map(const arrow_state *s, const struct ArrowSchema *a, col *c) {
  const char *cname = c->name;
  int nvar = 0, dims = 0;
  int64_t dimv[MAX_DEPTH];
  c->lod_at = -1;
  for (const struct ArrowSchema *x = a;; x = x->children[0]) {
    const char *f = x->format;
    if (!f) return refuse(s, cname, f, "no format string");
    if (x->dictionary)
      return refuse(s, cname, f, "dictionary-encoded: decode it first");
    if (c->depth == MAX_DEPTH)
      return refuse(s, cname, a->format, "nested too deep");
    int d = c->depth++;
    if (f[0] && !f[1]) {
      for (size_t k = 0; k < sizeof PRIMS / sizeof PRIMS[0]; k++)
        if (PRIMS[k].f == f[0]) {
          c->kind[d] = f[0] == 'b' ? N_BOOL : N_PRIM;
          c->dtype = PRIMS[k].dt;
          c->esize = sl_dtype_size(c->dtype);
          goto leaf;
        }
      if (f[0] == 'u' || f[0] == 'U' || f[0] == 'z' || f[0] == 'Z') {
        c->kind[d] = f[0] == 'u' || f[0] == 'z' ? N_STR32 : N_STR64;
        c->dtype = f[0] == 'u' || f[0] == 'U' ? SL_BYTES : SL_U8;
        c->esize = 1;
        if (dims > nvar)
          return refuse(s, cname, a->format,
                        "a string below a fixed-size list is ragged");
        if (nvar == 1) c->lod_at = d;
        if (++nvar > 2)
          return refuse(s, cname, a->format, "more than two levels of lists");
        dimv[dims++] = SL_DIM_VAR;
        goto leaf;
      }
      return refuse(s, cname, a->format,
                    "only numbers, bool, strings, binaries, lists and "
                    "fixed-size lists map to fields");
    }
    if (strncmp(f, "+w:", 3) == 0) {
      char *end;
      long long n = strtoll(f + 3, &end, 10);
      if (*end || n < 0) return refuse(s, cname, a->format, "bad list size");
      c->kind[d] = N_FSL;
      c->n[d] = n;
      dimv[dims++] = n;
    } else if (strcmp(f, "+l") == 0 || strcmp(f, "+L") == 0) {
      c->kind[d] = f[1] == 'l' ? N_LIST32 : N_LIST64;
      if (dims > nvar)
        return refuse(s, cname, a->format,
                      "a list below a fixed-size list is ragged in an inner "
                      "dimension");
      if (nvar == 1) c->lod_at = d;
      if (++nvar > 2)
        return refuse(s, cname, a->format, "more than two levels of lists");
      dimv[dims++] = SL_DIM_VAR;
    } else {
      return refuse(s, cname, a->format,
                    "only numbers, bool, strings, binaries, lists and "
                    "fixed-size lists map to fields");
    }
    if (x->n_children != 1 || !x->children || !x->children[0])
      return sl_set_error(SL_ECORRUPT,
                          "arrow: %s: column '%s': a '%s' with %lld children "
                          "(1 expected)",
                          s->name, cname, f, (long long)x->n_children);
  }
leaf:;
  /* Two variable levels: the first becomes the LoD, not a dimension. */
  int first = nvar == 2 ? 1 : 0;
  c->rank = dims - first;
  if (c->rank > SL_MAX_RANK)
    return refuse(s, cname, a->format, "more than 8 dimensions");
  c->trail = 1;
  for (int i = 0; i < c->rank; i++) {
    c->shape[i] = dimv[i + first];
    if (i > 0) c->trail *= c->shape[i];
  }
  if (c->rank > 0 && c->shape[0] != SL_DIM_VAR) c->trail *= c->shape[0];
  return SL_OK;
}

static int map_schema(arrow_state *s, const struct ArrowSchema *as) {
  SL_RETURN_ERROR_IF(!as->format || strcmp(as->format, "+s") != 0,
                     SL_EUNSUPPORTED,
                     "arrow: %s: the stream's type is '%s', not a struct "
                     "('+s', a record batch): nothing to make fields of",
                     s->name, as->format ? as->format : "(null)");
  SL_RETURN_ERROR_IF(as->n_children < 1 || as->n_children > 4096 ||
                         !as->children,
                     SL_EINVAL, "arrow: %s: the stream has %lld columns",
                     s->name, (long long)as->n_children);
  s->cols = sl__calloc((size_t)as->n_children, sizeof *s->cols);
  SL_RETURN_ERROR_IF(!s->cols, SL_ENOMEM, "arrow: %s: out of memory", s->name);
  s->ncols = (int)as->n_children;
  s->schema = sl_schema_new();
  SL_RETURN_ERROR_IF(!s->schema, SL_ENOMEM, "arrow: %s: out of memory",
                     s->name);
  for (int i = 0; i < s->ncols; i++) {
    const struct ArrowSchema *ch = as->children[i];
    col *c = &s->cols[i];
    SL_RETURN_ERROR_IF(!ch, SL_ECORRUPT, "arrow: %s: column %d is NULL",
                       s->name, i);
    const char *nm = ch->name ? ch->name : "";
    SL_RETURN_ERROR_IF(!nm[0] || strlen(nm) >= sizeof c->name, SL_EINVAL,
                       "arrow: %s: column %d's name '%s' is not 1..63 bytes",
                       s->name, i, nm);
    snprintf(c->name, sizeof c->name, "%s", nm);
    snprintf(c->format, sizeof c->format, "%s",
             ch->format ? ch->format : "(null)");
    SL_FORWARD_IF_ERROR(col_map(s, ch, c));
    int rc = sl_schema_add(s->schema, c->name, c->dtype, c->rank, c->shape);
    if (rc < 0)
      return sl_wrap_error(rc, "arrow: %s: column '%s'", s->name, c->name);
  }
  SL_FORWARD_IF_ERROR(sl_schema_set_meta(s->schema, "source", "arrow"));
  return SL_OK;
}

/* --- batches ---------------------------------------------------------------- */

static int bad_batch(arrow_state *s, const col *c, const char *why) {
  return sl_set_error(SL_ECORRUPT, "arrow: %s: batch %llu, column '%s' (%s): %s",
                      s->name, (unsigned long long)s->batches, c->name,
                      c->format, why);
}

/* Offsets o[first..first+n] of a VAR node: non-negative, non-decreasing;
 * *end = o[first+n]. */
static int check_offsets(arrow_state *s, const col *c,
                         const struct ArrowArray *a, bool wide, int64_t *end) {
  const void *ob = a->buffers[1];
  if (!ob) return bad_batch(s, c, "no offsets buffer");
  int64_t prev = -1;
  for (int64_t i = a->offset; i <= a->offset + a->length; i++) {
    int64_t v = wide ? ((const int64_t *)ob)[i] : ((const int32_t *)ob)[i];
    if (v < 0 || v < prev) return bad_batch(s, c, "offsets decrease");
    prev = v;
  }
  *end = prev;
  return SL_OK;
}

static int64_t off_at(const struct ArrowArray *a, bool wide, int64_t i) {
  return wide ? ((const int64_t *)a->buffers[1])[i]
              : ((const int32_t *)a->buffers[1])[i];
}

/* The leaf values of column c as an sl_buffer. */
static int leaf_buffer(arrow_state *s, col *c) {
  const struct ArrowArray *a = c->node[c->depth - 1];
  enum node_kind k = c->kind[c->depth - 1];
  int64_t slots = a->offset + a->length;
  if (k == N_BOOL) {
    sl_buffer *b = sl_buffer_new((size_t)slots);
    SL_RETURN_ERROR_IF(!b, SL_ENOMEM, "arrow: %s: out of memory", s->name);
    uint8_t *p = sl_buffer_data(b);
    if (slots && !a->buffers[1]) {
      sl_buffer_release(b);
      return bad_batch(s, c, "no values buffer");
    }
    for (int64_t i = 0; i < slots; i++) p[i] = is_bit_set(a->buffers[1], i);
    c->values = b;
    return SL_OK;
  }
  size_t bytes;
  const void *data;
  if (k == N_STR32 || k == N_STR64) {
    int64_t end;
    SL_FORWARD_IF_ERROR(check_offsets(s, c, a, k == N_STR64, &end));
    bytes = (size_t)end;
    data = a->buffers[2];
  } else {
    if ((uint64_t)slots > SIZE_MAX / c->esize)
      return bad_batch(s, c, "more values than memory can hold");
    bytes = (size_t)slots * c->esize;
    data = a->buffers[1];
  }
  if (bytes && !data) return bad_batch(s, c, "no values buffer");
  sl__ref_inc(&s->cur->ref);
  c->values = sl_buffer_wrap((void *)(uintptr_t)data, data ? bytes : 0,
                             holder_free_fn, s->cur);
  if (!c->values) {
    holder_drop(s->cur); /* the reference the wrap would have held */
    return sl_set_error(SL_ENOMEM, "arrow: %s: out of memory", s->name);
  }
  return SL_OK;
}

static int64_t n_buffers_of(enum node_kind k) {
  return k == N_FSL ? 1 : k == N_STR32 || k == N_STR64 ? 3 : 2;
}

/* Checks column c of the current batch and fills its nodes. */
static int col_load(arrow_state *s, col *c, const struct ArrowArray *top) {
  const struct ArrowArray *a = top;
  c->nulls = false;
  for (int d = 0; d < c->depth; d++) {
    if (!a) return bad_batch(s, c, "a NULL child array");
    if (a->length < 0 || a->offset < 0 || a->null_count < -1 ||
        a->offset > INT64_MAX - a->length - 1)
      return bad_batch(s, c, "negative or overflowing length or offset");
    if (a->n_buffers != n_buffers_of(c->kind[d]) || !a->buffers)
      return bad_batch(s, c, "wrong number of buffers for its type");
    if (a->null_count != 0 && a->buffers[0]) c->nulls = true;
    c->node[d] = a;
    if (c->kind[d] == N_FSL || c->kind[d] == N_LIST32 ||
        c->kind[d] == N_LIST64) {
      if (a->n_children != 1 || !a->children || !a->children[0])
        return bad_batch(s, c, "a list without its child array");
      const struct ArrowArray *ch = a->children[0];
      int64_t need;
      if (c->kind[d] == N_FSL) {
        if (c->n[d] && a->offset + a->length > INT64_MAX / c->n[d])
          return bad_batch(s, c, "a fixed-size list longer than 2^63 values");
        need = (a->offset + a->length) * c->n[d];
      } else
        SL_FORWARD_IF_ERROR(check_offsets(s, c, a, c->kind[d] == N_LIST64,
                                          &need));
      if (ch->length < need)
        return bad_batch(s, c, "the child array is shorter than the list "
                               "needs");
      a = ch;
    }
  }
  return leaf_buffer(s, c);
}

/* Bytes of column c's validity bitmaps and offsets in the current batch
 * (its values are counted apart, as c->values). */
static uint64_t col_index_bytes(const col *c) {
  uint64_t n = 0;
  for (int d = 0; d < c->depth; d++) {
    const struct ArrowArray *a = c->node[d];
    uint64_t slots = (uint64_t)(a->offset + a->length);
    enum node_kind k = c->kind[d];
    if (a->buffers[0]) n += (slots + 7) / 8;
    if (k == N_LIST32 || k == N_STR32) n += (slots + 1) * 4;
    if (k == N_LIST64 || k == N_STR64) n += (slots + 1) * 8;
  }
  return n;
}

static void batch_drop(arrow_state *s) {
  for (int i = 0; i < s->ncols; i++) {
    sl_buffer_release(s->cols[i].values);
    s->cols[i].values = NULL;
  }
  holder_drop(s->cur);
  s->cur = NULL;
  sl__resident_set(&s->mem, 0);
}

static void arrow_budget(void *st, sl__budget_acct *acct) {
  sl__resident_account(&((arrow_state *)st)->mem, acct);
}

static int fail(arrow_state *s, int rc) {
  s->failed = rc;
  sl__free(s->failure);
  s->failure = sl__strdup(sl_last_error());
  return rc;
}

/* The next non-empty batch into cur: SL_OK, SL_EOF or an error. */
static int batch_next(arrow_state *s) {
  batch_drop(s);
  for (;;) {
    holder *h = sl__calloc(1, sizeof *h);
    SL_RETURN_ERROR_IF(!h, SL_ENOMEM, "arrow: %s: out of memory", s->name);
    sl__ref_init(&h->ref);
    int e = s->stream.get_next(&s->stream, &h->arr);
    if (e != 0) {
      const char *m =
          s->stream.get_last_error ? s->stream.get_last_error(&s->stream) : NULL;
      h->arr.release = NULL; /* nothing valid came back */
      holder_drop(h);
      return sl_set_error(SL_EIO,
                          "arrow: %s: get_next failed after %llu batches "
                          "(%llu rows): %s",
                          s->name, (unsigned long long)s->batches,
                          (unsigned long long)s->row_base,
                          m && m[0] ? m : strerror(e));
    }
    if (!h->arr.release) {
      holder_drop(h);
      return SL_EOF;
    }
    s->batches++;
    s->cur = h;
    s->row = 0;
    const struct ArrowArray *a = &h->arr;
    if (a->n_children != s->ncols || (s->ncols && !a->children))
      return sl_set_error(SL_ECORRUPT,
                          "arrow: %s: batch %llu has %lld columns, the "
                          "schema %d",
                          s->name, (unsigned long long)s->batches,
                          (long long)a->n_children, s->ncols);
    SL_RETURN_ERROR_IF(a->length < 0 || a->offset < 0 ||
                           a->offset > INT64_MAX - a->length,
                       SL_ECORRUPT,
                       "arrow: %s: batch %llu: negative or overflowing length "
                       "or offset",
                       s->name, (unsigned long long)s->batches);
    if (a->length == 0) {
      batch_drop(s);
      continue;
    }
    for (int i = 0; i < s->ncols; i++) {
      const struct ArrowArray *ch = a->children[i];
      SL_RETURN_ERROR_IF(ch && ch->length < a->offset + a->length, SL_ECORRUPT,
                         "arrow: %s: batch %llu, column '%s': %lld values for "
                         "%lld rows",
                         s->name, (unsigned long long)s->batches,
                         s->cols[i].name, (long long)ch->length,
                         (long long)(a->offset + a->length));
      SL_FORWARD_IF_ERROR(col_load(s, &s->cols[i], ch));
    }
    uint64_t bytes = 0;
    for (int i = 0; i < s->ncols; i++)
      bytes += (s->cols[i].values ? sl_buffer_size(s->cols[i].values) : 0) +
               col_index_bytes(&s->cols[i]);
    sl__resident_set(&s->mem, bytes);
    return SL_OK;
  }
}

/* --- rows ------------------------------------------------------------------- */

static int null_error(arrow_state *s, const col *c, int64_t r) {
  return sl_set_error(SL_EINVAL,
                      "arrow: %s: column '%s', row %llu (row %lld of batch "
                      "%llu): a null value (sluice fields have no nulls: fill "
                      "or drop them first)",
                      s->name, c->name,
                      (unsigned long long)(s->row_base + (uint64_t)r),
                      (long long)r, (unsigned long long)s->batches);
}

static bool range_has_null(const struct ArrowArray *a, int64_t p, int64_t n) {
  if (a->null_count == 0 || !a->buffers[0]) return false;
  for (int64_t i = p; i < p + n; i++)
    if (!is_bit_set(a->buffers[0], i)) return true;
  return false;
}

/* Row r (of the batch, top-level slot p) of column c into tensor t. */
static int col_row(arrow_state *s, col *c, int64_t r, int64_t p,
                   sl_tensor *t) {
  int64_t n = 1;
  int64_t lod_first = 0, lod_n = 0;
  const struct ArrowArray *lod_node = NULL;
  int64_t byte_off = 0, bytes = 0;
  for (int d = 0; d < c->depth; d++) {
    const struct ArrowArray *a = c->node[d];
    if (c->nulls && range_has_null(a, p, n)) return null_error(s, c, r);
    switch (c->kind[d]) {
    case N_FSL:
      p = a->children[0]->offset + p * c->n[d];
      n *= c->n[d];
      break;
    case N_LIST32:
    case N_LIST64: {
      bool w = c->kind[d] == N_LIST64;
      if (d == c->lod_at) {
        lod_node = a, lod_first = p, lod_n = n;
      }
      int64_t b = off_at(a, w, p), e = off_at(a, w, p + n);
      p = a->children[0]->offset + b;
      n = e - b;
      break;
    }
    case N_STR32:
    case N_STR64: {
      bool w = c->kind[d] == N_STR64;
      if (d == c->lod_at) {
        lod_node = a, lod_first = p, lod_n = n;
      }
      byte_off = off_at(a, w, p);
      bytes = off_at(a, w, p + n) - byte_off;
      break;
    }
    default: /* N_PRIM, N_BOOL */
      byte_off = p * (int64_t)c->esize;
      bytes = n * (int64_t)c->esize;
      break;
    }
  }
  int64_t shape[SL_MAX_RANK];
  memcpy(shape, c->shape, sizeof shape);
  if (c->rank > 0 && shape[0] == SL_DIM_VAR)
    shape[0] = c->trail ? bytes / (int64_t)c->esize / c->trail : 0;
  int rc = sl_tensor_view(t, c->dtype, c->rank, shape, c->values,
                          (size_t)byte_off);
  if (rc < 0 || !lod_node) return rc;
  /* LoD: the inner sequences' offsets, rebased to 0, in units of dim 0. */
  bool w = c->kind[c->lod_at] == N_LIST64 || c->kind[c->lod_at] == N_STR64;
  sl_buffer *lb = sl_buffer_new((size_t)(lod_n + 1) * sizeof(int64_t));
  if (!lb) {
    sl_tensor_clear(t);
    return sl_set_error(SL_ENOMEM, "arrow: %s: out of memory", s->name);
  }
  int64_t *lod = sl_buffer_data(lb);
  int64_t base = off_at(lod_node, w, lod_first);
  for (int64_t i = 0; i <= lod_n; i++) /* offsets count dim-0 rows */
    lod[i] = off_at(lod_node, w, lod_first + i) - base;
  rc = sl_tensor_set_lod(t, lb, lod, lod_n + 1);
  sl_buffer_release(lb);
  if (rc < 0) sl_tensor_clear(t);
  return rc;
}

static int arrow_next(void *st, sl_sample **out) {
  arrow_state *s = st;
  if (s->failed == SL_EOF) return SL_EOF;
  if (s->failed)
    return sl_set_error(s->failed, "%s",
                        s->failure ? s->failure : "arrow: failed earlier");
  if (!s->cur || s->row >= s->cur->arr.length) {
    if (s->cur) s->row_base += (uint64_t)s->cur->arr.length;
    int rc = batch_next(s);
    if (rc == SL_EOF) {
      batch_drop(s);
      s->failed = SL_EOF;
      return SL_EOF;
    }
    if (rc < 0) return fail(s, rc);
  }
  const struct ArrowArray *top = &s->cur->arr;
  int64_t r = s->row;
  int64_t slot = top->offset + r;
  if (top->null_count != 0 && top->n_buffers >= 1 && top->buffers &&
      top->buffers[0] && !is_bit_set(top->buffers[0], slot))
    return fail(s, sl_set_error(SL_EINVAL,
                                "arrow: %s: row %llu (row %lld of batch %llu) "
                                "is null as a whole (sluice samples have no "
                                "nulls: drop it first)",
                                s->name,
                                (unsigned long long)(s->row_base + (uint64_t)r),
                                (long long)r, (unsigned long long)s->batches));
  sl_sample *smp = sl_sample_new(s->schema);
  SL_RETURN_ERROR_IF(!smp, SL_ENOMEM, "arrow: %s: out of memory", s->name);
  for (int i = 0; i < s->ncols; i++) {
    sl_tensor t;
    int rc = col_row(s, &s->cols[i], r, top->children[i]->offset + slot, &t);
    if (rc == SL_OK && (rc = sl_sample_set_move(smp, i, &t)) < 0)
      sl_tensor_clear(&t);
    if (rc < 0) {
      sl_sample_release(smp);
      return fail(s, rc);
    }
  }
  s->row++;
  *out = smp;
  return SL_OK;
}

static void arrow_destroy(void *st) {
  arrow_state *s = st;
  if (!s) return;
  batch_drop(s);
  if (s->stream.release) s->stream.release(&s->stream);
  sl_schema_release(s->schema);
  SL__FREE(s->cols, s->name, s->failure, s);
}

static const sl__stage_ops arrow_ops = {
    .name = "arrow",
    .budget = arrow_budget,
    .next = arrow_next,
    .destroy = arrow_destroy,
};

int sl_reader_from_arrow_stream(struct ArrowArrayStream *stream,
                                const sl_arrow_opts *opts, sl_reader **out) {
  if (out) *out = NULL;
  if (!stream || !stream->release) {
    SL_RETURN_ERROR_IF(true, SL_EINVAL,
                       "sl_reader_from_arrow_stream: %s stream",
                       stream ? "a released" : "a NULL");
  }
  struct ArrowArrayStream mine = *stream;
  stream->release = NULL; /* moved: ours to release */
  arrow_state *s = sl__calloc(1, sizeof *s);
  if (!s) {
    mine.release(&mine);
    return sl_set_error(SL_ENOMEM, "arrow: out of memory");
  }
  s->stream = mine;
  sl__resident_init(&s->mem);
  sl_arrow_opts o = SL_ARROW_OPTS_INIT;
  int rc = SL_OK;
  if (opts) rc = sl__opts_copy("sl_arrow_opts", &o, sizeof o, opts);
  if (rc == SL_OK) {
    s->name = sl__strdup(o.name && o.name[0] ? o.name : "stream");
    if (!s->name) rc = sl_set_error(SL_ENOMEM, "arrow: out of memory");
  }
  if (rc == SL_OK && !out)
    rc = sl_set_error(SL_EINVAL, "sl_reader_from_arrow_stream: NULL out");
  if (rc == SL_OK && (!s->stream.get_schema || !s->stream.get_next))
    rc = sl_set_error(SL_EINVAL, "arrow: %s: the stream has no get_schema or "
                      "get_next", s->name);
  struct ArrowSchema as = {0};
  if (rc == SL_OK) {
    int e = s->stream.get_schema(&s->stream, &as);
    if (e != 0) {
      const char *m = s->stream.get_last_error
                          ? s->stream.get_last_error(&s->stream)
                          : NULL;
      rc = sl_set_error(SL_EIO, "arrow: %s: get_schema failed: %s", s->name,
                        m && m[0] ? m : strerror(e));
      as.release = NULL;
    } else if (!as.release) {
      rc = sl_set_error(SL_ECORRUPT, "arrow: %s: get_schema gave a released "
                        "schema", s->name);
    }
  }
  if (rc == SL_OK) rc = map_schema(s, &as);
  if (as.release) as.release(&as);
  if (rc < 0) {
    arrow_destroy(s);
    return rc;
  }
  return sl__stage_new(&arrow_ops, s, s->schema, NULL, 0, NULL, out);
}
