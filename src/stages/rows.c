/*
 * rows.c - the batches a fused map fills row by row (rows.h has the
 * protocol).
 */
#include "stages/rows.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct slot {
  uint64_t k;    /* the batch's number among the map's outputs */
  uint64_t base; /* r->base when it was made: item seq wrote row seq -
                    base - k n */
  uint64_t last; /* the largest item seq reserved into it */
  sl_sample *b;  /* NULL: free */
} slot;

struct sl__rows {
  const sl_schema *in;
  sl_schema *out;
  size_t n;
  sl__buffer_pool *pool;
  int nfields;
  size_t *row; /* bytes of one row, per field */
  bool *unique; /* no other field has the same dtype and row size */
  pthread_mutex_t mu;
  /* under mu: item seq is output seq - base (its place when no item
   * before it is skipped unseen); the batches of this base, by k % nslots;
   * and those of earlier bases (retired by a skip), kept until every item
   * reserved into them has been delivered */
  uint64_t base;
  slot *slots;
  size_t nslots;
  slot *old;
  size_t nold, capold;
  sl__stage_counters *c; /* the map's */
  /* unordered (ticketed): an item's id is its ticket, the count of outputs
   * put before it, not its seq; under mu: the next ticket, and the tickets
   * of the tokens not yet handed on, by seq (open addressing) */
  bool ticketed;
  uint64_t next_ticket;
  struct tix {
    uint64_t seq, ticket;
    bool used;
  } *tix;
  size_t tixcap, ntix;
  /* the consumer's: the id of the item last delivered, and batch dst_k's
   * output (a reference, NULL before its first row) */
  uint64_t id;
  sl_sample *dst;
  uint64_t dst_k;
  bool down; /* a rebase by -1 since dst was made (under mu) */
};

int sl__rows_new(const sl_schema *in, sl_schema *out, size_t n,
                 sl__buffer_pool *pool, sl__rows **r) {
  sl__rows *t = sl__calloc(1, sizeof *t);
  int nf = sl_schema_nfields(in);
  if (t) t->row = sl__calloc(nf ? (size_t)nf : 1, sizeof *t->row);
  if (t) t->unique = sl__calloc(nf ? (size_t)nf : 1, sizeof *t->unique);
  if (!t || !t->row || !t->unique || pthread_mutex_init(&t->mu, NULL) != 0) {
    if (t) sl__free(t->row);
    if (t) sl__free(t->unique);
    sl__free(t);
    return sl_set_error(SL_ENOMEM, "batch: cannot allocate its fused rows");
  }
  t->in = in;
  t->out = sl_schema_retain(out);
  t->n = n;
  t->pool = pool;
  t->nfields = nf;
  for (int i = 0; i < nf; i++) {
    size_t bytes = sl_dtype_size(sl_schema_field_dtype(in, i));
    const int64_t *dims = sl_schema_field_shape(in, i);
    for (int d = 0; d < sl_schema_field_rank(in, i); d++)
      bytes *= (size_t)dims[d];
    t->row[i] = bytes;
  }
  for (int i = 0; i < nf; i++) {
    t->unique[i] = t->row[i] > 0;
    for (int j = 0; j < nf; j++)
      if (j != i && t->row[j] == t->row[i] &&
          sl_schema_field_dtype(in, j) == sl_schema_field_dtype(in, i))
        t->unique[i] = false;
  }
  *r = t;
  return SL_OK;
}

void sl__rows_free(sl__rows *r) {
  if (!r) return;
  sl__rows_clear(r, 0);
  SL__FREE(r->slots, r->old, r->tix, r->row, r->unique);
  sl_schema_release(r->out);
  pthread_mutex_destroy(&r->mu);
  sl__free(r);
}

int sl__rows_window(sl__rows *r, size_t items, sl__stage_counters *c,
                    bool ticketed) {
  r->c = c;
  r->ticketed = ticketed;
  size_t cap = 16;
  while (cap < 4 * items)
    cap *= 2;
  struct tix *x = ticketed ? sl__calloc(cap, sizeof *x) : NULL;
  if (ticketed && !x)
    return sl_set_error(SL_ENOMEM, "batch: cannot allocate its fused rows");
  sl__free(r->tix);
  r->tix = x;
  r->tixcap = ticketed ? cap : 0;
  /* The items in flight span at most items / n + 2 batches; one more for
   * the batch the consumer is taking; ticketed, the tokens held for their
   * turn (about as many again).  The retired batches each hold an item in
   * flight (the list grows if not). */
  size_t want = (ticketed ? 2 : 1) * items / r->n + 3;
  slot *s = sl__calloc(want, sizeof *s), *o = sl__calloc(items + want, sizeof *o);
  if (!s || !o) {
    SL__FREE(s, o);
    return sl_set_error(SL_ENOMEM, "batch: cannot allocate its fused rows");
  }
  SL__FREE(r->slots, r->old);
  r->slots = s;
  r->nslots = want;
  r->old = o;
  r->capold = items + want;
  return SL_OK;
}

/* A new batch of n zero rows (pooled buffers), or NULL. */
static sl_sample *new_batch(sl__rows *r) {
  sl_sample *b = sl_sample_new(r->out);
  for (int i = 0; b && i < r->nfields; i++) {
    int64_t shape[SL_MAX_RANK];
    int rank = sl_schema_field_rank(r->in, i);
    const int64_t *dims = sl_schema_field_shape(r->in, i);
    shape[0] = (int64_t)r->n;
    for (int d = 0; d < rank; d++)
      shape[d + 1] = dims[d];
    sl_tensor t;
    if (sl__tensor_alloc_pooled(r->pool, &t, sl_schema_field_dtype(r->in, i),
                                rank + 1, shape) < 0 ||
        sl_sample_set_move(b, i, &t) < 0) {
      sl_sample_release(b);
      b = NULL;
    }
  }
  return b;
}

/* Batch k's slot in this base, allocating its sample when `make` and the
 * slot is free; NULL when the slot holds another batch (or memory is
 * short).  Under mu. */
static slot *find(sl__rows *r, uint64_t k, bool make) {
  slot *s = &r->slots[k % r->nslots];
  if (s->b) return s->k == k ? s : NULL;
  sl_sample *b = make ? new_batch(r) : NULL;
  if (!b) return NULL;
  *s = (slot){.k = k, .base = r->base, .last = 0, .b = b};
  return s;
}

/* Whether o's fields are the rows' (the checks batch would make pass). */
static bool fits(const sl__rows *r, const sl_sample *o) {
  if (sl_sample_nfields(o) != r->nfields) return false;
  for (int i = 0; i < r->nfields; i++) {
    const sl_tensor *t = sl_sample_at_const(o, i);
    if (t->lod || t->nbytes != r->row[i] || (t->nbytes && !t->data) ||
        sl_schema_check(r->in, i, t) != SL_OK)
      return false;
  }
  return true;
}

/* Copies row i of `from`'s fields (a sample of the rows' schema when
 * i == SIZE_MAX, else a batch) into row j of b; a field already there (a
 * granted row) is left as it is. */
static void write_row(const sl__rows *r, sl_sample *b, size_t j,
                      const sl_sample *from, size_t i) {
  for (int f = 0; f < r->nfields; f++) {
    char *dst = (char *)sl_sample_at(b, f)->data + j * r->row[f];
    const char *src = sl_sample_at_const(from, f)->data;
    if (i != SIZE_MAX) src += i * r->row[f];
    if (r->row[f] && src != dst) memcpy(dst, src, r->row[f]);
  }
}

/* --- tickets (unordered) ------------------------------------------------ */

/* The entry of seq, or the free one where it would go.  Under mu. */
static struct tix *tix_at(const sl__rows *r, uint64_t seq) {
  size_t i = (size_t)seq & (r->tixcap - 1);
  while (r->tix[i].used && r->tix[i].seq != seq)
    i = (i + 1) & (r->tixcap - 1);
  return &r->tix[i];
}

/* Records seq's ticket, growing the table past half full; false when out
 * of memory.  Under mu. */
static bool tix_put(sl__rows *r, uint64_t seq, uint64_t ticket) {
  if (2 * (r->ntix + 1) > r->tixcap) {
    struct tix *was = r->tix, *x = sl__calloc(2 * r->tixcap, sizeof *x);
    if (!x) return false;
    size_t cap = r->tixcap;
    r->tix = x;
    r->tixcap = 2 * cap;
    for (size_t i = 0; i < cap; i++)
      if (was[i].used) *tix_at(r, was[i].seq) = was[i];
    sl__free(was);
  }
  *tix_at(r, seq) = (struct tix){seq, ticket, true};
  r->ntix++;
  return true;
}

bool sl__rows_ticket(sl__rows *r, uint64_t seq, uint64_t *ticket) {
  if (!r->ticketed) return false;
  pthread_mutex_lock(&r->mu);
  struct tix *e = tix_at(r, seq);
  bool found = e->used;
  if (found) { /* removed, the run after it moved back (linear probing) */
    *ticket = e->ticket;
    size_t m = r->tixcap - 1, i = (size_t)(e - r->tix), j = i;
    r->tix[i].used = false;
    r->ntix--;
    for (;;) {
      j = (j + 1) & m;
      if (!r->tix[j].used) break;
      size_t home = (size_t)r->tix[j].seq & m;
      if (((j - home) & m) >= ((j - i) & m)) { /* may move back to i */
        r->tix[i] = r->tix[j];
        r->tix[j].used = false;
        i = j;
      }
    }
  }
  pthread_mutex_unlock(&r->mu);
  return found;
}

/* --- the workers' side -------------------------------------------------- */

/* The batch item seq's row is in (a new reference; its row in *j), or NULL
 * when its slot holds another (or, ticketed, with no grant: grants come
 * before the item's output, and so before its ticket). */
static sl_sample *reserve(sl__rows *r, uint64_t seq, bool grant, size_t *j) {
  if (grant && r->ticketed) return NULL;
  pthread_mutex_lock(&r->mu);
  uint64_t id = r->ticketed ? r->next_ticket : seq, q = id - r->base;
  slot *s = find(r, q / r->n, true);
  if (s && r->ticketed && !tix_put(r, seq, id)) s = NULL;
  if (s && r->ticketed) r->next_ticket++;
  if (s && id > s->last) s->last = id;
  sl_sample *b = s ? sl_sample_retain(s->b) : NULL;
  pthread_mutex_unlock(&r->mu);
  *j = (size_t)(q % r->n);
  return b;
}

/* This worker's grant (grant_begin .. grant_end). */
static _Thread_local struct {
  sl__rows *r;
  sl_sample *b; /* reserved: a reference */
  size_t j;
  uint64_t used; /* fields granted in this call (the first 64) */
} grant;

void sl__rows_grant_begin(sl__rows *r, uint64_t seq) {
  grant.r = r;
  grant.b = reserve(r, seq, true, &grant.j);
  grant.used = 0;
}

void sl__rows_grant_end(void) {
  sl_sample_release(grant.b);
  grant.b = NULL;
  grant.r = NULL;
}

void *sl__lua_row_grant(int dtype, size_t nbytes, sl_buffer **buf) {
  const sl__rows *r = grant.r;
  if (!grant.b) return NULL;
  for (int i = 0; i < r->nfields && i < 64; i++) {
    if (!r->unique[i] || r->row[i] != nbytes || (grant.used >> i & 1) ||
        (int)sl_schema_field_dtype(r->in, i) != dtype)
      continue;
    sl_tensor *t = sl_sample_at(grant.b, i);
    char *p = (char *)t->data + grant.j * nbytes;
    memset(p, 0, nbytes);
    grant.used |= (uint64_t)1 << i;
    *buf = t->buf;
    return p;
  }
  return NULL;
}

sl_sample *sl__rows_put(sl__rows *r, uint64_t seq, sl_sample *o) {
  if (!fits(r, o)) return NULL;
  size_t j;
  sl_sample *b = reserve(r, seq, false, &j);
  if (!b) return NULL;
  write_row(r, b, j, o, SIZE_MAX);
  sl_sample_release(o);
  atomic_fetch_add_explicit(&r->c->fused, 1, memory_order_relaxed);
  return b;
}

void sl__rows_rebase(sl__rows *r, uint64_t by) {
  pthread_mutex_lock(&r->mu);
  r->base += by;
  r->down |= by == UINT64_MAX;
  for (size_t i = 0; i < r->nslots; i++) {
    if (!r->slots[i].b) continue;
    slot *o = r->nold < r->capold
                  ? r->old
                  : sl__realloc(r->old, 2 * r->capold * sizeof *o);
    if (o && o != r->old) {
      r->old = o;
      r->capold *= 2;
    }
    if (o) /* else its tokens fail (land: lost) */
      r->old[r->nold++] = r->slots[i];
    else
      sl_sample_release(r->slots[i].b);
    r->slots[i].b = NULL;
  }
  pthread_mutex_unlock(&r->mu);
}

void sl__rows_delivered(sl__rows *r, uint64_t id) { r->id = id; }

bool sl__rows_token(const sl__rows *r, const sl_sample *s) {
  return sl_sample_schema(s) == r->out;
}

/* Releases the retired batches that are b or whose items are all before
 * item `before`.  Under mu. */
static void drop_old(sl__rows *r, const sl_sample *b, uint64_t before) {
  size_t kept = 0;
  for (size_t i = 0; i < r->nold; i++) {
    if (r->old[i].b == b || r->old[i].last < before)
      sl_sample_release(r->old[i].b);
    else
      r->old[kept++] = r->old[i];
  }
  r->nold = kept;
}

/* Releases the batches no item still to come can write into: those of this
 * base before batch k, the retired ones whose items are all delivered.
 * Under mu. */
static void prune(sl__rows *r, uint64_t k) {
  for (size_t i = 0; i < r->nslots; i++)
    if (r->slots[i].b && r->slots[i].k < k) {
      sl_sample_release(r->slots[i].b);
      r->slots[i].b = NULL;
    }
  drop_old(r, NULL, r->id);
}

/* The slot (of this base or retired) whose batch is s, or NULL.  Under mu. */
static const slot *token_slot(const sl__rows *r, const sl_sample *s) {
  for (size_t i = 0; i < r->nslots; i++)
    if (r->slots[i].b == s) return &r->slots[i];
  for (size_t i = 0; i < r->nold; i++)
    if (r->old[i].b == s) return &r->old[i];
  return NULL;
}

int sl__rows_land(sl__rows *r, uint64_t k, size_t j, const sl_sample *s,
                  bool *token) {
  pthread_mutex_lock(&r->mu);
  if (!r->dst || r->dst_k != k) { /* batch k's first row */
    sl_sample_release(r->dst);
    prune(r, k);
    slot *d = find(r, k, true);
    /* a slot taken by a batch far ahead (not expected): a batch of its
     * own, every row copied in */
    r->dst = d ? sl_sample_retain(d->b) : new_batch(r);
    r->dst_k = k;
    r->down = false;
  } else if (r->down) {
    /* Places moved down (an output that came without a ticket): the items
     * that own dst's next rows now come later, so its rows so far move to
     * a batch of its own, which no worker writes. */
    sl_sample *b = new_batch(r);
    if (!b) {
      pthread_mutex_unlock(&r->mu);
      return sl_set_error(SL_ENOMEM, "batch: cannot allocate batch %llu",
                          (unsigned long long)k);
    }
    for (size_t i = 0; i < j; i++)
      write_row(r, b, i, r->dst, i);
    sl_sample_release(r->dst);
    r->dst = b;
    r->down = false;
  }
  const slot *t = sl__rows_token(r, s) ? token_slot(r, s) : NULL;
  bool lost = !t && sl__rows_token(r, s);
  size_t i = t ? (size_t)(r->id - t->base - t->k * r->n) : 0;
  pthread_mutex_unlock(&r->mu);
  /* The consumer's own batch: nothing else releases it before take. */
  if (!r->dst)
    return sl_set_error(SL_ENOMEM, "batch: cannot allocate batch %llu",
                        (unsigned long long)k);
  if (lost)
    return sl_set_error(SL_ENOMEM,
                        "batch: the fused row of batch %llu row %zu was lost "
                        "(no memory to track it)",
                        (unsigned long long)k, j);
  *token = t != NULL;
  /* Written where its item was placed when an item before it, skipped,
   * was not yet seen (sl__rows_rebase): moved to its row.  No worker
   * writes either row any more (both belong to items delivered). */
  if (t && !(s == r->dst && i == j)) {
    write_row(r, r->dst, j, s, i);
    /* not straight into its row after all */
    atomic_fetch_sub_explicit(&r->c->fused, 1, memory_order_relaxed);
  }
  return SL_OK;
}

int sl__rows_copy(sl__rows *r, uint64_t k, size_t j, const sl_sample *s) {
  (void)k; /* batch k is dst: sl__rows_land came first */
  write_row(r, r->dst, j, s, SIZE_MAX);
  return SL_OK;
}

/* Forgets the consumer's batch, unslotting it; its reference or NULL. */
static sl_sample *unslot(sl__rows *r) {
  sl_sample *b = r->dst;
  r->dst = NULL;
  if (!b) return NULL;
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->nslots; i++)
    if (r->slots[i].b == b) {
      sl_sample_release(b); /* the table's */
      r->slots[i].b = NULL;
    }
  drop_old(r, b, 0); /* retired: its items are all delivered */
  pthread_mutex_unlock(&r->mu);
  return b;
}

int sl__rows_take(sl__rows *r, uint64_t k, size_t m, sl_sample **out) {
  sl_sample *b = r->dst_k == k ? unslot(r) : NULL;
  if (!b)
    return sl_set_error(SL_EINVAL, "batch: fused batch %llu is missing",
                        (unsigned long long)k);
  for (int i = 0; m < r->n && i < r->nfields; i++) { /* the short last one */
    sl_tensor *t = sl_sample_at(b, i);
    t->shape[0] = (int64_t)m;
    t->nbytes = m * r->row[i];
  }
  *out = b;
  return SL_OK;
}

void sl__rows_drop(sl__rows *r, uint64_t k) {
  (void)k;
  sl_sample_release(unslot(r));
}

void sl__rows_clear(sl__rows *r, uint64_t base) {
  sl_sample_release(r->dst);
  r->dst = NULL;
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->nslots; i++) {
    sl_sample_release(r->slots[i].b);
    r->slots[i].b = NULL;
  }
  for (size_t i = 0; i < r->nold; i++)
    sl_sample_release(r->old[i].b);
  r->nold = 0;
  r->base = base;
  r->next_ticket = 0;
  r->ntix = 0;
  if (r->tix) memset(r->tix, 0, r->tixcap * sizeof *r->tix);
  pthread_mutex_unlock(&r->mu);
}
