/*
 * unbatch.c - sl_unbatch: each batch of upstream split into its rows
 * (tf.data's unbatch), and sl_rebatch (unbatch, then batch).
 *
 * Protocol.  Every field of upstream has a leading dimension (a rank-0
 * field is SL_EINVAL at construction).  A batch of B rows yields B samples,
 * row r of each field:
 *
 *   - a plain field [B, d...] gives [d...]: a view of the batch's buffer at
 *     row r (no copy);
 *   - a LoD field (named in `lod` at construction: the concatenated
 *     variable fields sl_batch makes, schema [SL_DIM_VAR, t...], LoD
 *     offsets of B+1 entries) gives rows [lod[r], lod[r+1]) as
 *     [lod[r+1] - lod[r], t...], also a view; its output schema is its
 *     upstream one.
 *
 * Whether a field is LoD cannot be read from the schema (a plain field of a
 * batch that keeps its last partial batch is [SL_DIM_VAR, d...] too), hence
 * the list.  Each batch is checked when it arrives: a listed field without
 * offsets, an unlisted one with offsets, and fields that disagree on B are
 * SL_ESHAPE naming the field and the batch (counted from 0 in the pass).
 * An empty batch (B = 0) yields nothing.  The current batch is held until
 * its last row is out.  Upstream errors pass through.
 *
 * Save/restore.  Output k is row r of batch j.  A log (ring of
 * SL__STATE_LOG entries) holds the output number of the first row of each
 * recent batch of the pass; a save finds the latest batch j that starts at
 * or before k, saves upstream at batch j and the payload (j, r); the
 * restore resumes upstream there, pulls batch j (when r > 0) and skips r
 * rows.  A save further behind than the log (more than SL__STATE_LOG
 * batches) saves upstream at the pass start and the restore replays k
 * outputs (sl__state_save_up_replayed).
 *
 * Threads: none of its own; single consumer like every reader.
 */
#include "stages/stage.h"

typedef struct unbatch_state {
  sl_reader *up;
  sl_schema *out; /* retained */
  int nfields;
  bool *lod;                     /* nfields: split by LoD offsets */
  char *lod_names;               /* "a,b" for the identity (NULL: none) */
  sl_sample *cur;                /* the batch being split, or NULL */
  uint64_t rows;                 /* rows of cur */
  uint64_t row;                  /* the next row of cur */
  uint64_t nb;                   /* batches pulled this pass */
  uint64_t count;                /* outputs this pass */
  uint64_t known;                /* the first batch whose start the log holds */
  uint64_t start[SL__STATE_LOG]; /* output number of batch j's first row */
} unbatch_state;

/* Checks batch b (number j) and stores its row count in *rows. */
static int batch_rows(const unbatch_state *u, const sl_sample *b, uint64_t j,
                      uint64_t *rows) {
  const sl_schema *s = sl_sample_schema(b);
  int first = -1;
  for (int i = 0; i < u->nfields; i++) {
    const sl_tensor *t = sl_sample_at_const(b, i);
    const char *name = sl_schema_field_name(s, i);
    uint64_t n;
    if (u->lod[i]) {
      SL_RETURN_ERROR_IF(!t->lod || t->lod_len < 1, SL_ESHAPE,
                         "unbatch: batch %llu: field '%s' was named a LoD "
                         "field but carries no LoD offsets",
                         (unsigned long long)j, name);
      n = (uint64_t)(t->lod_len - 1);
    } else {
      SL_RETURN_ERROR_IF(t->lod, SL_ESHAPE,
                         "unbatch: batch %llu: field '%s' carries LoD offsets "
                         "(a ragged batch); name it in unbatch's lod list to "
                         "split it by them",
                         (unsigned long long)j, name);
      SL_RETURN_ERROR_IF(t->rank < 1, SL_ESHAPE,
                         "unbatch: batch %llu: field '%s' has rank 0",
                         (unsigned long long)j, name);
      n = (uint64_t)t->shape[0];
    }
    if (first < 0) {
      first = i;
      *rows = n;
    }
    SL_RETURN_ERROR_IF(n != *rows, SL_ESHAPE,
                       "unbatch: batch %llu: field '%s' has %llu rows, but "
                       "field '%s' has %llu",
                       (unsigned long long)j, name, (unsigned long long)n,
                       sl_schema_field_name(s, first),
                       (unsigned long long)*rows);
  }
  return SL_OK;
}

/* Pulls the next batch of upstream into u->cur. */
static int load_batch(unbatch_state *u) {
  sl_sample *b;
  SL_FORWARD_IF_ERROR(sl_reader_next(u->up, &b));
  uint64_t j = u->nb, rows = 0;
  int rc = batch_rows(u, b, j, &rows);
  if (rc < 0) {
    sl_sample_release(b);
    return rc;
  }
  u->nb++;
  u->start[j % SL__STATE_LOG] = u->count;
  u->cur = b;
  u->rows = rows;
  u->row = 0;
  return SL_OK;
}

/* Row u->row of u->cur as a new sample of views. */
static int make_row(unbatch_state *u, sl_sample **out) {
  sl_sample *s = sl_sample_new(u->out);
  if (!s) return sl_wrap_error(SL_ENOMEM, "unbatch: a row sample");
  int64_t r = (int64_t)u->row;
  for (int i = 0; i < u->nfields; i++) {
    const sl_tensor *t = sl_sample_at_const(u->cur, i);
    int64_t shape[SL_MAX_RANK];
    int rank;
    int64_t first, n;
    if (u->lod[i]) {
      first = t->lod[r];
      n = t->lod[r + 1] - first;
      rank = t->rank;
      shape[0] = n;
      for (int d = 1; d < t->rank; d++)
        shape[d] = t->shape[d];
    } else {
      first = r;
      n = 1;
      rank = t->rank - 1;
      for (int d = 1; d < t->rank; d++)
        shape[d - 1] = t->shape[d];
    }
    /* Bytes per leading row: the tensor's bytes over its first dimension. */
    size_t unit = t->shape[0] > 0 ? t->nbytes / (size_t)t->shape[0] : 0;
    size_t offset = t->buf ? (size_t)((const char *)t->data -
                                      (const char *)sl_buffer_data(t->buf))
                           : 0;
    sl_tensor v;
    memset(&v, 0, sizeof v);
    int rc = sl_tensor_view(&v, t->dtype, rank, shape, t->buf,
                            offset + (size_t)first * unit);
    if (rc == SL_OK) rc = sl_sample_set_move(s, i, &v);
    if (rc < 0) {
      sl_tensor_clear(&v);
      sl_sample_release(s);
      return sl_wrap_error(rc, "unbatch: batch %llu, row %lld, field '%s'",
                           (unsigned long long)(u->nb - 1), (long long)r,
                           sl_schema_field_name(u->out, i));
    }
  }
  *out = s;
  return SL_OK;
}

static int unbatch_next(void *st, sl_sample **out) {
  unbatch_state *u = st;
  for (;;) {
    if (u->cur && u->row < u->rows) {
      SL_FORWARD_IF_ERROR(make_row(u, out));
      u->row++;
      u->count++;
      return SL_OK;
    }
    sl_sample_release(u->cur);
    u->cur = NULL;
    SL_FORWARD_IF_ERROR(load_batch(u));
  }
}

static void clear_pass(unbatch_state *u) {
  sl_sample_release(u->cur);
  u->cur = NULL;
  u->rows = u->row = u->nb = u->count = u->known = 0;
}

static int unbatch_reset(void *st) {
  unbatch_state *u = st;
  clear_pass(u);
  return sl_reader_reset(u->up);
}

static void unbatch_destroy(void *st) {
  unbatch_state *u = st;
  if (!u) return;
  sl_sample_release(u->cur);
  SL__FREE(u->lod, u->lod_names);
  sl__stage_free(u, u->up, u->out);
}

/* Upstream's length x B when a plain field's first dimension is a fixed B
 * (every batch then has B rows: the check of each batch says so). */
static int unbatch_length(const sl_reader *r, void *st, uint64_t *n) {
  unbatch_state *u = st;
  const sl_schema *in = sl_reader_schema(u->up);
  for (int i = 0; i < u->nfields; i++) {
    int64_t b = sl_schema_field_shape(in, i)[0];
    if (u->lod[i] || b == SL_DIM_VAR) continue;
    uint64_t up;
    SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
    SL_RETURN_ERROR_IF(b && up > UINT64_MAX / (uint64_t)b, SL_EUNSUPPORTED,
                       "unbatch: the length does not fit 64 bits");
    *n = up * (uint64_t)b;
    return SL_OK;
  }
  return sl_set_error(SL_EUNSUPPORTED,
                      "unbatch: the rows per batch vary (no field has a "
                      "fixed first dimension), so the length is not known");
}

/* Payload: j (UINT64_MAX: replay the pass) and r. */
static int unbatch_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_out *w) {
  unbatch_state *u = st;
  uint64_t up_pass = sl__state_up_pass(r, u->up, pass);
  uint64_t lo = u->nb > SL__STATE_LOG ? u->nb - SL__STATE_LOG : 0;
  if (lo < u->known) lo = u->known;
  uint64_t j = 0, row = 0;
  bool found = k == 0;
  /* the ring is this pass's: an earlier pass replays */
  if (pass != sl__reader_pass(r)) lo = u->nb;
  for (uint64_t b = u->nb; !found && b > lo; b--) {
    uint64_t s = u->start[(b - 1) % SL__STATE_LOG];
    if (s <= k) {
      j = b - 1;
      row = k - s;
      found = true;
    }
  }
  /* One position, one state: at a batch boundary k is the end of the
   * earlier batch (whose rows end at k), however many batches (the next,
   * empty ones) a thread above has already pulled - so two saves at the
   * same position give the same bytes. */
  while (found && row == 0 && j > lo) {
    j--;
    row = k - u->start[j % SL__STATE_LOG];
  }
  if (!found) {
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, UINT64_MAX));
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, 0));
    return sl__state_save_up_replayed(w, u->up, up_pass, 0);
  }
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, j));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, row));
  return sl__state_save_up(w, u->up, up_pass, j);
}

static int unbatch_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                           sl__state_in *in) {
  unbatch_state *u = st;
  uint64_t j, row;
  clear_pass(u);
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, u->up));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &j));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &row));
  if (j == UINT64_MAX) return sl__state_replay(unbatch_next, u, k, "unbatch");
  SL_RETURN_ERROR_IF(row > k, SL_ECORRUPT,
                     "restore: unbatch: row %llu of batch %llu is past "
                     "position %llu",
                     (unsigned long long)row, (unsigned long long)j,
                     (unsigned long long)k);
  u->nb = u->known = j;
  u->count = k - row;
  if (row == 0) return SL_OK;
  int rc = load_batch(u);
  SL_RETURN_ERROR_IF(rc == SL_EOF, SL_ECORRUPT,
                     "restore: unbatch: upstream '%s' ended before batch %llu",
                     sl_reader_name(u->up), (unsigned long long)j);
  SL_FORWARD_IF_ERROR(rc);
  SL_RETURN_ERROR_IF(row > u->rows, SL_ECORRUPT,
                     "restore: unbatch: batch %llu has %llu rows, the state "
                     "needs %llu",
                     (unsigned long long)j, (unsigned long long)u->rows,
                     (unsigned long long)row);
  u->row = row;
  u->count = k;
  return SL_OK;
}

static void unbatch_identity(const sl_reader *r, void *st, char *buf,
                             size_t cap) {
  unbatch_state *u = st;
  snprintf(buf, cap, "lod=%s", u->lod_names ? u->lod_names : "");
}

static const sl__stage_ops unbatch_ops = {
    .name = "unbatch",
    .next = unbatch_next,
    .reset = unbatch_reset,
    .destroy = unbatch_destroy,
    .length = unbatch_length,
    .save = unbatch_save,
    .restore = unbatch_restore,
    .identity = unbatch_identity,
};

/* Marks the listed LoD fields and keeps their names for the identity. */
static int mark_lod(unbatch_state *u, const sl_schema *in,
                    const char *const *lod, size_t nlod) {
  size_t len = 0;
  for (size_t k = 0; k < nlod; k++) {
    SL_RETURN_ERROR_IF(!lod[k], SL_EINVAL, "unbatch: lod name %zu is NULL", k);
    int i = sl_schema_find(in, lod[k]);
    if (i < 0) {
      char desc[512];
      sl_schema_describe(in, desc, sizeof desc);
      return sl_set_error(SL_EINVAL,
                          "unbatch: lod field '%s' is not a field of "
                          "upstream %s",
                          lod[k], desc);
    }
    SL_RETURN_ERROR_IF(sl_schema_field_rank(in, i) < 1 ||
                           sl_schema_field_shape(in, i)[0] != SL_DIM_VAR,
                       SL_EINVAL,
                       "unbatch: lod field '%s' has a fixed first dimension; "
                       "a LoD field's rows are concatenated along a variable "
                       "one",
                       lod[k]);
    u->lod[i] = true;
    len += strlen(lod[k]) + 1;
  }
  if (nlod == 0) return SL_OK;
  u->lod_names = sl__malloc(len);
  SL_RETURN_ERROR_IF(!u->lod_names, SL_ENOMEM, "unbatch: cannot allocate");
  u->lod_names[0] = 0;
  for (size_t k = 0; k < nlod; k++) {
    if (k) strcat(u->lod_names, ",");
    strcat(u->lod_names, lod[k]);
  }
  return SL_OK;
}

/* The output schema: each plain field without its first dimension. */
static int build_schema(unbatch_state *u, const sl_schema *in) {
  u->out = sl_schema_new();
  SL_RETURN_ERROR_IF(!u->out, SL_ENOMEM, "unbatch: output schema");
  for (int i = 0; i < u->nfields; i++) {
    const char *name = sl_schema_field_name(in, i);
    int rank = sl_schema_field_rank(in, i);
    const int64_t *dims = sl_schema_field_shape(in, i);
    SL_RETURN_ERROR_IF(rank < 1, SL_EINVAL,
                       "unbatch: field '%s' is a scalar: it has no leading "
                       "dimension to split",
                       name);
    int rc = u->lod[i]
                 ? sl_schema_add(u->out, name, sl_schema_field_dtype(in, i),
                                 rank, dims)
                 : sl_schema_add(u->out, name, sl_schema_field_dtype(in, i),
                                 rank - 1, dims + 1);
    if (rc < 0)
      return sl_wrap_error(rc, "unbatch: cannot add output field '%s'", name);
  }
  for (int m = 0; m < sl_schema_meta_count(in); m++) {
    const char *key, *value;
    if (sl_schema_meta_at(in, m, &key, &value) == SL_OK &&
        sl_schema_set_meta(u->out, key, value) < 0)
      return sl_wrap_error(SL_ENOMEM, "unbatch: output schema");
  }
  return SL_OK;
}

int sl_unbatch(sl_reader *up, const char *const *lod, size_t nlod,
               sl_reader **out) {
  SL_DECORATOR_ARGS("unbatch", up, out);
  if (nlod && !lod)
    return sl__fail_with_upstream(
        up,
        sl_set_error(SL_EINVAL, "unbatch: NULL lod list of %zu names", nlod));
  const sl_schema *in = sl_reader_schema(up);
  int nfields = sl_schema_nfields(in);
  if (nfields < 1)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "unbatch: upstream has no fields"));
  unbatch_state *u = sl__calloc(1, sizeof *u);
  bool *marks = sl__calloc((size_t)nfields, sizeof *marks);
  if (!u || !marks) {
    sl__free(u);
    sl__free(marks);
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "unbatch: cannot allocate"));
  }
  u->up = up; /* from here on unbatch_destroy owns it */
  u->lod = marks;
  u->nfields = nfields;
  int rc = mark_lod(u, in, lod, nlod);
  if (rc == SL_OK) rc = build_schema(u, in);
  if (rc < 0) {
    unbatch_destroy(u);
    return rc;
  }
  return sl__stage_wrap(&unbatch_ops, u, u->out, &u->up, NULL, out);
}

int sl_rebatch(sl_reader *up, size_t n, const sl_batch_opts *opts,
               const char *const *lod, size_t nlod, sl_reader **out) {
  SL_DECORATOR_ARGS("rebatch", up, out);
  if (n == 0)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "rebatch: batch size must be >= 1"));
  sl_reader *rows;
  int rc = sl_unbatch(up, lod, nlod, &rows);
  if (rc < 0) return sl_wrap_error(rc, "rebatch");
  rc = sl_batch(rows, n, opts, out);
  if (rc < 0) return sl_wrap_error(rc, "rebatch");
  return SL_OK;
}
