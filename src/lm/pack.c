/*
 * pack.c - sl_pack: variable-length documents packed into rows of exactly
 * T tokens, with segment ids and positions (Grain's / T5's packing).
 *
 * Documents.  A sample's packed fields (equally long rank-1 token fields)
 * are one document; with eos, the eos id is appended to each of them.  A
 * document longer than T is split into pieces of T (the last shorter), each
 * packed as a document of its own, or cut to its first T tokens
 * (truncate).  An empty document is skipped.
 *
 * First fit.  Up to `lookahead` rows are open, oldest first.  A piece goes
 * into the first open row with room for it; when none has room, a new row
 * opens after them, and when that makes lookahead + 1 open rows the oldest
 * is closed: it joins the queue of finished rows, which next hands out in
 * order.  At the end of the pass every open row is closed, oldest first.
 * A row is one buffer: the packed fields, segment_ids and positions, T i32
 * each; closing it pads the tail (pad value, segment 0, position 0) and it
 * goes out as views of that buffer.
 *
 * Statistics: rows and non-pad tokens yielded, relaxed atomics written by
 * the consumer's thread and read by sl_pack_stats from any thread.
 *
 * Position.  Rows are numbered in the order they open, which is the order
 * they go out: at output k the stage holds rows [k, opened), and each is a
 * prefix of what it will hold.  When a row opens, the stage notes where
 * (the document being placed and the piece's first token) and the fill of
 * the rows open then (a snapshot: lookahead + 1 numbers); per output it
 * notes how many documents had been read.  Those rings reach back `hist`
 * rows.  A save at output k is then: where row k opened, the fill of the
 * rows open then, and the documents read at k (payload mode 0), with the
 * upstream saved at row k's document.  The restore puts those open rows
 * back as placeholders (fill only, no tokens: they go out before k), reads
 * the documents from row k's to the count again and places them by the
 * same first fit: rows k onwards come back token for token, and the
 * documents read again are those since row k opened - about lookahead + 1
 * rows of tokens - not the pass.  When nothing is held at k (every row
 * opened went out) the upstream is saved at the count itself and nothing is
 * read.  A save further behind than the rings (stages above holding more
 * than `hist` rows) saves mode 1: the upstream at the start of the pass,
 * which the restore re-reads (gather.h); so does a state with no payload
 * (saved before mode 0 existed).  The rings run on across a reset (each
 * pass notes where in them it began), so a save in the pass before - a
 * mix with stop = never or a repeat above reset the stage while the stages
 * above still hold its rows - is mode 0 too while the rings reach, the
 * upstream saved at its matching pass.
 */
#include "lm/lm.h"
#include "sync/budget.h"

#include <stdatomic.h>
#include <stdio.h>

typedef struct row {
  sl_buffer *buf; /* (nf + 2) x T i32: fields..., segment_ids, positions;
                     NULL: a placeholder of a restore (goes out before k) */
  int64_t used;
  int32_t nseg;
  uint64_t charged; /* its buffer's bytes charged to the budget, or 0 */
} row;

/* Where a row opened: document `doc`, its piece from token `from`, with
 * `nopen` rows open (their fill in the stage's snap_used). */
typedef struct snap {
  uint64_t doc, from, nopen;
} snap;

/* Where a pass's entries lie in the rings: output k's at obase + k, row
 * r's at rbase + r (mod hist); outputs [low, out] and rows [0, opened) are
 * its (low: the position a restore set). */
typedef struct pass_view {
  uint64_t obase, rbase, low, out, opened;
  bool known;
} pass_view;

typedef struct pack_state {
  sl_reader *up; /* first: sl__gather_save_reread_up */
  int64_t T;
  int nf;
  int *fi; /* nf upstream field indices */
  int has_eos;
  int32_t eos, pad;
  size_t lookahead;
  int truncate;
  sl_schema *schema;
  row *open; /* lookahead + 1 slots, oldest first */
  size_t nopen;
  row *done; /* finished rows, a FIFO ring */
  size_t dhead, dcount, dcap;
  bool ended;
  uint64_t docs; /* documents read this pass */
  atomic_uint_least64_t rows_out, tokens_out;
  /* the position (see the top): rings of `hist` entries */
  size_t hist;
  uint64_t opened, out; /* rows opened, handed out this pass */
  uint64_t obase, rbase, low; /* this pass in the rings (pass_view) */
  pass_view prev;       /* the pass before, when known */
  uint64_t *docs_at;    /* documents read at output k, at (obase + k) % hist */
  snap *snaps;          /* where row r opened, at (rbase + r) % hist */
  int64_t *snap_used;   /* its open rows' fill, (lookahead + 1) per snap */
  /* the memory budget's account (set once, any time) */
  sl__budget_acct *_Atomic acct;
} pack_state;

/* The memory budget: each row's buffer is charged when it opens, as
 * resident bytes (the stage runs on its caller's thread and must finish
 * the document it places: no waiting), and becomes the stage's carry when
 * it goes out (the batch above claims it) or is released when dropped. */
static sl__budget_acct *acct_of(const pack_state *p) {
  return atomic_load_explicit(&p->acct, memory_order_acquire);
}

static void uncharge(pack_state *p, row *r) {
  if (r->charged) sl__budget_resident(acct_of(p), r->charged, 0);
  r->charged = 0;
}

static void pack_budget(void *st, sl__budget_acct *acct) {
  atomic_store_explicit(&((pack_state *)st)->acct, acct, memory_order_release);
}

static int32_t *col(const row *r, int64_t T, int c) {
  return (int32_t *)sl_buffer_data(r->buf) + (size_t)c * (size_t)T;
}

static void drop_rows(pack_state *p) {
  for (size_t i = 0; i < p->nopen; i++) {
    uncharge(p, &p->open[i]);
    sl_buffer_release(p->open[i].buf);
  }
  p->nopen = 0;
  for (size_t i = 0; i < p->dcount; i++) {
    uncharge(p, &p->done[(p->dhead + i) % p->dcap]);
    sl_buffer_release(p->done[(p->dhead + i) % p->dcap].buf);
  }
  p->dcount = 0;
  p->dhead = 0;
}

/* Moves open row i to the queue of finished rows. */
static int close_row(pack_state *p, size_t i) {
  if (p->dcount == p->dcap) {
    size_t cap = p->dcap ? p->dcap * 2 : 16;
    row *d = sl__malloc(cap * sizeof *d);
    SL_RETURN_ERROR_IF(!d, SL_ENOMEM, "pack: cannot allocate");
    for (size_t k = 0; k < p->dcount; k++)
      d[k] = p->done[(p->dhead + k) % p->dcap];
    sl__free(p->done);
    p->done = d;
    p->dcap = cap;
    p->dhead = 0;
  }
  row r = p->open[i];
  memmove(&p->open[i], &p->open[i + 1], (p->nopen - i - 1) * sizeof *p->open);
  p->nopen--;
  if (!r.buf) return SL_OK; /* a placeholder: it went out before the restore */
  for (int c = 0; c < p->nf; c++)
    for (int64_t t = r.used; t < p->T; t++)
      col(&r, p->T, c)[t] = p->pad;
  for (int c = p->nf; c < p->nf + 2; c++) /* segment 0, position 0 */
    memset(col(&r, p->T, c) + r.used, 0,
           (size_t)(p->T - r.used) * sizeof(int32_t));
  p->done[(p->dhead + p->dcount++) % p->dcap] = r;
  return SL_OK;
}

/* Places tokens [from, from + len) of document s (len <= T; the eos
 * position len_doc when from + len reaches it) into a row. */
static int place(pack_state *p, const sl_sample *s, int64_t doc_len,
                 int64_t from, int64_t len) {
  size_t i = 0;
  while (i < p->nopen && p->T - p->open[i].used < len)
    i++;
  if (i == p->nopen) {
    sl_buffer *b =
        sl_buffer_new((size_t)(p->nf + 2) * (size_t)p->T * sizeof(int32_t));
    SL_RETURN_ERROR_IF(!b, SL_ENOMEM, "pack: cannot allocate a row");
    size_t h = (p->rbase + p->opened++) % p->hist;
    p->snaps[h] = (snap){p->docs, (uint64_t)from, p->nopen};
    for (size_t k = 0; k < p->nopen; k++)
      p->snap_used[h * (p->lookahead + 1) + k] = p->open[k].used;
    sl__budget_acct *a = acct_of(p);
    uint64_t n = a ? sl_buffer_size(b) : 0;
    if (n) sl__budget_resident(a, 0, n);
    p->open[p->nopen++] = (row){b, 0, 0, n};
  }
  row *r = &p->open[i];
  int32_t seg = ++r->nseg;
  if (!r->buf) { /* a placeholder: its fill alone matters */
    r->used += len;
    return p->nopen > p->lookahead ? close_row(p, 0) : SL_OK;
  }
  for (int c = 0; c < p->nf; c++) {
    const sl_tensor *t = sl_sample_at_const(s, p->fi[c]);
    int32_t *dst = col(r, p->T, c) + r->used;
    for (int64_t k = 0; k < len; k++) {
      int64_t at = from + k;
      dst[k] =
          at < doc_len ? sl__token_at(t->data, t->dtype, (size_t)at) : p->eos;
    }
  }
  int32_t *sg = col(r, p->T, p->nf) + r->used;
  int32_t *ps = col(r, p->T, p->nf + 1) + r->used;
  for (int64_t k = 0; k < len; k++) {
    sg[k] = seg;
    ps[k] = (int32_t)k;
  }
  r->used += len;
  if (p->nopen > p->lookahead) return close_row(p, 0);
  return SL_OK;
}

/* Places document s from its piece starting at token `from0` (0: whole). */
static int take_doc(pack_state *p, const sl_sample *s, int64_t from0) {
  const sl_tensor *t0 = sl_sample_at_const(s, p->fi[0]);
  int64_t doc_len = t0->shape[0];
  for (int c = 0; c < p->nf; c++) {
    const sl_tensor *t = sl_sample_at_const(s, p->fi[c]);
    int rc = sl_schema_check(sl_reader_schema(p->up), p->fi[c], t);
    if (rc < 0)
      return sl_wrap_error(rc, "pack: document %llu",
                           (unsigned long long)p->docs);
    SL_RETURN_ERROR_IF(t->shape[0] != doc_len, SL_ESHAPE,
                       "pack: document %llu: field '%s' has %lld tokens, "
                       "field '%s' %lld",
                       (unsigned long long)p->docs,
                       sl_schema_field_name(sl_reader_schema(p->up), p->fi[c]),
                       (long long)t->shape[0],
                       sl_schema_field_name(sl_reader_schema(p->up), p->fi[0]),
                       (long long)doc_len);
  }
  int64_t total = doc_len + (p->has_eos ? 1 : 0);
  if (p->truncate) total = SL_MIN(total, p->T);
  for (int64_t from = from0; from < total; from += p->T)
    SL_FORWARD_IF_ERROR(place(p, s, doc_len, from, SL_MIN(p->T, total - from)));
  return SL_OK;
}

static int pack_next(void *st, sl_sample **out) {
  pack_state *p = st;
  while (p->dcount == 0) {
    if (p->ended) {
      if (p->nopen == 0) return SL_EOF;
      SL_FORWARD_IF_ERROR(close_row(p, 0));
      break;
    }
    sl_sample *s = NULL;
    int rc = sl_reader_next(p->up, &s);
    if (rc == SL_EOF) {
      p->ended = true;
      continue;
    }
    if (rc < 0) return rc;
    rc = take_doc(p, s, 0);
    p->docs++;
    sl_sample_release(s);
    if (rc < 0) return rc;
  }
  row r = p->done[p->dhead];
  sl_sample *o = sl_sample_new(p->schema);
  int rc = o ? SL_OK : sl_set_error(SL_ENOMEM, "pack: cannot allocate");
  for (int c = 0; c < p->nf + 2 && rc == SL_OK; c++) {
    sl_tensor t;
    rc = sl_tensor_view(&t, SL_I32, 1, &p->T, r.buf,
                        (size_t)c * (size_t)p->T * sizeof(int32_t));
    if (rc == SL_OK) rc = sl_sample_set_move(o, c, &t);
  }
  if (rc < 0) {
    sl_sample_release(o);
    return rc;
  }
  p->dhead = (p->dhead + 1) % p->dcap;
  p->dcount--;
  if (r.charged) { /* the row goes out: its bytes are the carry now */
    sl__budget_acct *a = acct_of(p);
    sl__budget_resident(a, r.charged, 0);
    sl__budget_adjust(a, 0, r.charged);
    sl__budget_to_carry(a, r.charged);
  }
  sl_buffer_release(r.buf);
  p->out++;
  p->docs_at[(p->obase + p->out) % p->hist] = p->docs;
  sl__stat_add_1w(&p->rows_out, 1);
  sl__stat_add_1w(&p->tokens_out, (uint64_t)r.used);
  *out = o;
  return SL_OK;
}

/* A new pass: after a reset (the rings run on, the pass before is kept)
 * or for a restore. */
static void clear(pack_state *p, bool reset) {
  drop_rows(p);
  p->ended = false;
  p->docs = 0;
  if (reset) {
    p->prev = (pass_view){p->obase, p->rbase, p->low, p->out, p->opened, true};
    p->obase += p->out + 1;
    p->rbase += p->opened;
  } else {
    p->prev.known = false;
    p->obase = p->rbase = 0;
  }
  p->opened = p->out = p->low = 0;
  p->docs_at[p->obase % p->hist] = 0;
}

static int pack_reset(void *st) {
  pack_state *p = st;
  clear(p, true);
  return sl_reader_reset(p->up);
}

static void pack_destroy(void *st) {
  pack_state *p = st;
  if (!p) return;
  if (p->open) drop_rows(p);
  SL__FREE(p->open, p->done, p->fi, p->docs_at, p->snaps, p->snap_used);
  sl__stage_free(p, p->up, p->schema);
}

/* Payload: mode 0, the documents read at k, where row k opened (document,
 * token) and the fill of the rows open then, the upstream saved at that
 * document (read again up to the count); or mode 1, the upstream at the
 * start of the pass (the pass read again).  See the top. */
static int pack_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                     sl__state_out *w) {
  pack_state *p = st;
  uint64_t now = sl__reader_pass(r);
  const pass_view cur = {p->obase, p->rbase, p->low, p->out, p->opened, true};
  const pass_view *v = pass == now ? &cur : pass + 1 == now ? &p->prev : NULL;
  /* the newest entries of the rings: older ones are overwritten past hist */
  uint64_t onew = p->obase + p->out, rnew = p->rbase + p->opened;
  bool ok = v && v->known && k >= v->low && k <= v->out &&
            onew - (v->obase + k) < p->hist;
  uint64_t at = ok ? p->docs_at[(v->obase + k) % p->hist] : 0;
  const snap *sn = NULL; /* where row k opened, when it was open at k */
  size_t h = 0;
  if (ok && k < v->opened) {
    h = (size_t)((v->rbase + k) % p->hist);
    if (rnew - (v->rbase + k) > p->hist)
      ok = false; /* its snapshot is gone */
    else if (p->snaps[h].doc < at)
      sn = &p->snaps[h];
  }
  if (!ok) {
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, 1));
    return sl__gather_save_reread_up(r, st, pass, k, w);
  }
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, 0));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, at));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, sn ? sn->doc : at));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, sn ? sn->from : 0));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, sn ? sn->nopen : 0));
  for (uint64_t i = 0; sn && i < sn->nopen; i++)
    SL_FORWARD_IF_ERROR(sl__state_put_u64(
        w, (uint64_t)p->snap_used[h * (p->lookahead + 1) + i]));
  uint64_t up_pass = sl__state_up_pass(r, p->up, pass);
  return sn ? sl__state_save_up_replayed(w, p->up, up_pass, sn->doc)
            : sl__state_save_up(w, p->up, up_pass, at);
}

/* Mode 1 and states without a payload: the pass read again up to k. */
static int restore_replay(pack_state *p, uint64_t k, sl__state_in *in) {
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, p->up));
  uint64_t rows = atomic_load(&p->rows_out), toks = atomic_load(&p->tokens_out);
  int rc = sl__state_replay(pack_next, p, k, "pack");
  atomic_store(&p->rows_out, rows); /* the replayed rows were counted */
  atomic_store(&p->tokens_out, toks);
  return rc;
}

/* Reads the next document of the restore's re-read (SL_ECORRUPT when the
 * upstream ends before the state's count). */
static int reread(pack_state *p, uint64_t at, int64_t from) {
  sl_sample *s = NULL;
  int rc = sl_reader_next(p->up, &s);
  if (rc == SL_EOF)
    return sl_set_error(SL_ECORRUPT,
                        "restore: pack: its upstream '%s' ended after %llu "
                        "documents, the state needs %llu (did the data "
                        "change since the save?)",
                        sl_reader_name(p->up), (unsigned long long)p->docs,
                        (unsigned long long)at);
  SL_FORWARD_IF_ERROR(rc);
  rc = take_doc(p, s, from);
  p->docs++;
  sl_sample_release(s);
  return rc;
}

static int pack_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  pack_state *p = st;
  clear(p, false);
  uint64_t mode = 1, v[4] = {0};
  if (sl__state_left(in) > 0) SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &mode));
  SL_RETURN_ERROR_IF(mode > 1, SL_ECORRUPT,
                     "restore: corrupt state: pack: mode %llu (0 or 1)",
                     (unsigned long long)mode);
  if (mode == 1) return restore_replay(p, k, in);
  for (int i = 0; i < 4; i++) /* documents at k, row k's doc, from, nopen */
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &v[i]));
  uint64_t at = v[0], doc = v[1], from = v[2], nopen = v[3];
  SL_RETURN_ERROR_IF(
      doc > at || nopen > p->lookahead || from >= (uint64_t)INT64_MAX ||
          (doc == at && (from || nopen)) || nopen > k,
      SL_ECORRUPT,
      "restore: corrupt state: pack: row %llu opened at document %llu "
      "token %llu with %llu rows open (lookahead %zu), %llu documents read",
      (unsigned long long)k, (unsigned long long)doc, (unsigned long long)from,
      (unsigned long long)nopen, p->lookahead, (unsigned long long)at);
  for (uint64_t i = 0; i < nopen; i++) {
    uint64_t used;
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &used));
    SL_RETURN_ERROR_IF(used < 1 || used > (uint64_t)p->T, SL_ECORRUPT,
                       "restore: corrupt state: pack: an open row holds %llu "
                       "tokens (T = %lld)",
                       (unsigned long long)used, (long long)p->T);
    p->open[p->nopen++] = (row){NULL, (int64_t)used, 0, 0};
  }
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, p->up));
  p->docs = doc;
  p->opened = p->out = p->low = k;
  p->docs_at[k % p->hist] = at;
  int rc = SL_OK;
  for (int64_t f = (int64_t)from; p->docs < at && rc == SL_OK; f = 0)
    rc = reread(p, at, f);
  /* placeholders still open went out at the end of the pass, before k */
  if (rc == SL_OK && p->nopen && !p->open[0].buf) {
    sl_sample *s = NULL;
    rc = sl_reader_next(p->up, &s);
    sl_sample_release(s);
    if (rc == SL_OK)
      rc = sl_set_error(SL_ECORRUPT,
                        "restore: corrupt state: pack: rows before %llu are "
                        "still open after %llu documents, but its upstream "
                        "'%s' has not ended",
                        (unsigned long long)k, (unsigned long long)at,
                        sl_reader_name(p->up));
    if (rc == SL_EOF) {
      rc = SL_OK;
      p->ended = true;
      while (p->nopen && !p->open[0].buf)
        rc = close_row(p, 0);
    }
  }
  return rc;
}

static void pack_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const pack_state *p = st;
  int n = snprintf(buf, cap,
                   "T=%lld eos=%s%d pad=%d lookahead=%zu "
                   "truncate=%d fields=",
                   (long long)p->T, p->has_eos ? "" : "none:", p->eos, p->pad,
                   p->lookahead, p->truncate);
  for (int c = 0; c < p->nf && n >= 0 && (size_t)n < cap; c++)
    n += snprintf(buf + n, cap - (size_t)n, "%s%s", c ? "," : "",
                  sl_schema_field_name(sl_reader_schema(p->up), p->fi[c]));
}

static const sl__stage_ops pack_ops = {
    .name = "pack",
    .next = pack_next,
    .reset = pack_reset,
    .destroy = pack_destroy,
    .save = pack_save,
    .restore = pack_restore,
    .identity = pack_identity,
    .budget = pack_budget,
};

int sl_pack_stats(const sl_reader *r, uint64_t *rows, uint64_t *tokens,
                  double *efficiency) {
  SL_RETURN_ERROR_IF(!r, SL_EINVAL, "pack_stats: NULL reader");
  const pack_state *p = sl__lm_find(r, pack_next);
  SL_RETURN_ERROR_IF(!p, SL_ENOTFOUND,
                     "pack_stats: no pack stage in the "
                     "chain of '%s'",
                     sl_reader_name(r));
  uint64_t n = atomic_load_explicit(&p->rows_out, memory_order_relaxed);
  uint64_t t = atomic_load_explicit(&p->tokens_out, memory_order_relaxed);
  if (rows) *rows = n;
  if (tokens) *tokens = t;
  if (efficiency) *efficiency = n ? (double)t / ((double)n * (double)p->T) : 0;
  return SL_OK;
}

static int check_field(const sl_schema *in, const char *name, int *fi) {
  int i = name ? sl_schema_find(in, name) : -1;
  SL_RETURN_ERROR_IF(i < 0, SL_EINVAL, "pack: no field '%s' upstream",
                     name ? name : "(null)");
  SL_RETURN_ERROR_IF(!sl__token_dtype(sl_schema_field_dtype(in, i)) ||
                         sl_schema_field_rank(in, i) != 1,
                     SL_EINVAL,
                     "pack: field '%s' must be a rank-1 i32, u16, u32 or i64 "
                     "field, it is %s of rank %d",
                     name, sl_dtype_name(sl_schema_field_dtype(in, i)),
                     sl_schema_field_rank(in, i));
  *fi = i;
  return SL_OK;
}

static int setup(pack_state *p, const sl_pack_opts *o) {
  const sl_schema *in = sl_reader_schema(p->up);
  p->nf = o->fields ? (int)o->nfields : 1;
  SL_RETURN_ERROR_IF(o->fields && (o->nfields == 0 || o->nfields > 32),
                     SL_EINVAL, "pack: 1 to 32 fields, got %zu", o->nfields);
  p->fi = sl__calloc((size_t)p->nf, sizeof *p->fi);
  p->open = sl__calloc(p->lookahead + 1, sizeof *p->open);
  p->schema = sl_schema_new();
  /* the rings: 1024 rows, fewer for a long lookahead (at most 2^18 fills) */
  p->hist = SL_MAX(64, SL_MIN(1024, ((size_t)1 << 18) / (p->lookahead + 1)));
  p->docs_at = sl__calloc(p->hist, sizeof *p->docs_at);
  p->snaps = sl__calloc(p->hist, sizeof *p->snaps);
  p->snap_used = sl__calloc(p->hist * (p->lookahead + 1), sizeof *p->snap_used);
  SL_RETURN_ERROR_IF(!p->fi || !p->open || !p->schema || !p->docs_at ||
                         !p->snaps || !p->snap_used,
                     SL_ENOMEM, "pack: cannot allocate");
  if (!o->fields) {
    int i = 0;
    while (i < sl_schema_nfields(in) &&
           !(sl_schema_field_rank(in, i) == 1 &&
             sl__token_dtype(sl_schema_field_dtype(in, i))))
      i++;
    SL_RETURN_ERROR_IF(i == sl_schema_nfields(in), SL_EINVAL,
                       "pack: upstream has no rank-1 token field (i32, u16, "
                       "u32, i64) to pack");
    SL_FORWARD_IF_ERROR(
        check_field(in, sl_schema_field_name(in, i), &p->fi[0]));
  } else {
    for (int c = 0; c < p->nf; c++)
      SL_FORWARD_IF_ERROR(check_field(in, o->fields[c], &p->fi[c]));
  }
  for (int c = 0; c < p->nf + 2; c++) {
    const char *name = c < p->nf    ? sl_schema_field_name(in, p->fi[c])
                       : c == p->nf ? "segment_ids"
                                    : "positions";
    int rc = sl_schema_add(p->schema, name, SL_I32, 1, &p->T);
    if (rc < 0) return sl_wrap_error(rc, "pack: output field '%s'", name);
  }
  return SL_OK;
}

int sl_pack(sl_reader *up, const sl_pack_opts *opts, sl_reader **out) {
  SL_DECORATOR_ARGS("pack", up, out);
  sl_pack_opts o = SL_PACK_OPTS_INIT;
  int rc = opts ? sl__opts_copy("sl_pack_opts", &o, sizeof o, opts) : SL_OK;
  if (rc == SL_OK && (o.seq_len < 1 || o.seq_len > INT32_MAX / 16))
    rc = sl_set_error(SL_EINVAL,
                      "pack: seq_len must be in [1, 2^27), got "
                      "%lld",
                      (long long)o.seq_len);
  /* The rows are i32: an id that does not fit would wrap. */
  if (rc == SL_OK && o.has_eos && (o.eos < INT32_MIN || o.eos > INT32_MAX))
    rc = sl_set_error(SL_EINVAL,
                      "pack: eos %lld does not fit the rows' i32 tokens",
                      (long long)o.eos);
  if (rc == SL_OK && (o.pad < INT32_MIN || o.pad > INT32_MAX))
    rc = sl_set_error(SL_EINVAL,
                      "pack: pad %lld does not fit the rows' i32 tokens",
                      (long long)o.pad);
  if (rc == SL_OK && o.lookahead > 4096)
    rc = sl_set_error(SL_EINVAL, "pack: lookahead %zu is above 4096",
                      o.lookahead);
  if (rc < 0) return sl__fail_with_upstream(up, rc);
  pack_state *p = sl__decorator_state("pack", up, sizeof *p);
  if (!p) return SL_ENOMEM;
  p->T = o.seq_len;
  p->has_eos = o.has_eos != 0;
  p->eos = (int32_t)o.eos;
  p->pad = (int32_t)o.pad;
  p->lookahead = o.lookahead ? o.lookahead : 8;
  p->truncate = o.truncate != 0;
  rc = setup(p, &o);
  if (rc < 0) {
    pack_destroy(p);
    return rc;
  }
  return sl__stage_wrap(&pack_ops, p, p->schema, &p->up, NULL, out);
}
