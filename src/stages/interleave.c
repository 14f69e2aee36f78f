/*
 * interleave.c - tf.data's interleave (deterministic) over many sources:
 * sl_interleave (readers), sl_interleave_sources (a callback opening source
 * i); sl_interleave_open (sl_open names) is in open/interleave_open.c, the
 * layer that knows sl_open.
 *
 * Protocol (tf.data's InterleaveDatasetOp, cycle_length = cycle,
 * block_length = block).  The stage keeps `cycle` slots and a turn (slot ci,
 * samples bi taken in this turn).  Each next:
 *
 *   slot ci holds a source   pull it: a sample goes out, bi++, and when
 *                            bi == block the turn moves to the next slot
 *                            (bi = 0); SL_EOF empties the slot (the source
 *                            is closed) and the turn moves on; an error
 *                            passes through (sticky until reset).
 *   slot ci empty, sources   the next unopened source (in order 0, 1, ...)
 *   left to open             opens in slot ci, which is pulled at once.
 *   otherwise                the pass ends when no slot holds a source;
 *                            else the turn moves on.
 *
 * So the order is a function of the sources' contents alone.  Reading ahead
 * (opts->threads > 0) wraps each source in a lazy sl_prefetch
 * (sl__prefetch_lazy), which keeps order and holds a thread only from the
 * source's first pull to its end: at most `cycle` threads run at once,
 * whatever the number of sources, and the thread limit counts the cycle.
 *
 * Sources.  Readers (sl_interleave): all `n` are owned and linked (stats,
 * state), reset together; "opening" one is starting to read it.  A
 * callback (sl_interleave_sources, sl_interleave_open): source i is opened
 * when its turn comes and destroyed when it ends, so at most `cycle` are
 * open; source 0 is opened at construction for the schema and kept for the
 * first time it is needed.  Each pass opens the sources again.
 *
 * Save/restore.  The scheduling state after output k-1 is a pure function
 * of the state at a base point (the pass start, or the last restore) and
 * of the sample counts of the sources that had ended by then; the stage
 * keeps each source's count (got) and end flag (done) for the pass, so a
 * save at any k between the base and the current output - behind it when
 * a stage above holds samples - replays the schedule arithmetically from
 * the base, block by block (O(k/block + sources) steps, no data read).  The
 * payload is the turn (ci, bi), the next source to open and each slot's
 * source and position.  Readers are saved at their own positions (those
 * of the slots; ended ones at their counts; unopened ones at 0).  A
 * callback's sources are not linked: the restore opens the slots' sources
 * again and reads each up to its position (that costs those samples).
 *
 * Memory budget.  Readers are the stage's upstreams: the budget reaches
 * them (and their read-ahead wrappers) as any chain's.  A callback's
 * sources are not: each joins the stage's ledger (sl__reader_join_budget)
 * when it is opened - or, for those open when the budget is set, at the
 * next call - so its read-ahead and its reader's buffers are counted while
 * it is open; its accounts go, released, when it ends.  They are not in
 * the stage's own stats row (the sources are not linked), only in the
 * ledger's total.
 *
 * Threads: none of its own beyond the prefetch wrappers; single consumer.
 */
#include "stages/reader_impl.h"
#include "stages/stage.h"

#include <limits.h>

#define NONE UINT64_MAX

typedef struct turn {
  uint64_t ci, bi, next_src, nopen, count;
} turn;

typedef struct il_state {
  size_t n;
  uint64_t cycle, block;
  uint32_t threads;
  sl_reader **readers; /* readers mode: n owned (prefetch-wrapped) */
  sl_source_open_fn open;
  void *ud;
  sl_free_fn free_ud;
  char *ident;       /* callback mode: names the sources (may be NULL) */
  sl_reader *first;  /* callback mode: source 0 opened at construction */
  sl_schema *schema; /* retained */
  /* the pass */
  turn t;
  uint64_t *src, *pos; /* cycle slots: source (NONE: empty), its position */
  sl_reader **r;       /* cycle slots' readers (owned in callback mode) */
  uint64_t *got;       /* n: samples each source gave this pass */
  bool *done;          /* n: the source ended this pass */
  /* the base of the save arithmetic */
  turn bt;
  uint64_t *bsrc, *bpos;
  /* the memory budget's account (set once, any time), and whether the
   * callback's sources open so far joined its ledger (the consumer's) */
  sl__budget_acct *_Atomic acct;
  bool joined;
} il_state;

/* --- sources -------------------------------------------------------------- */

static int check_schema(il_state *t, size_t i, sl_reader *r) {
  if (sl_schema_equal(t->schema, sl_reader_schema(r))) return SL_OK;
  char a[256], b[256];
  sl_schema_describe(sl_reader_schema(r), a, sizeof a);
  sl_schema_describe(t->schema, b, sizeof b);
  return sl_set_error(SL_ESHAPE,
                      "interleave: source %zu has schema %s, but source 0 has "
                      "%s",
                      i, a, b);
}

/* threads = SL_THREADS_AUTO: each source's read-ahead bounds. */
#define INTERLEAVE_AUTO_DEPTH 4096u
#define INTERLEAVE_AUTO_BYTES ((uint64_t)16 << 20)

/* The read-ahead wrapper of threads > 0: threads x block samples. */
static int wrap(il_state *t, sl_reader *r, sl_reader **out) {
  if (!t->threads) {
    *out = r;
    return SL_OK;
  }
  if (t->threads == SL_THREADS_AUTO) /* the depth tuned (prefetch.c) */
    return sl__prefetch_lazy_auto(r, INTERLEAVE_AUTO_DEPTH,
                                  INTERLEAVE_AUTO_BYTES, out);
  uint64_t cap = (uint64_t)t->threads * t->block;
  if (cap > 4096 || cap / t->block != t->threads) cap = 4096;
  return sl__prefetch_lazy(r, (size_t)cap, out);
}

/* Calls the open callback for source i: SL_OK with *r set, or the error
 * with the callback's message (one naming the source when it set none). */
static int call_open(il_state *t, uint64_t i, sl_reader **r) {
  sl_clear_error();
  int rc = t->open(t->ud, (size_t)i, r);
  if (rc >= 0 && !*r)
    rc = sl_set_error(SL_EINVAL,
                      "interleave: the open callback gave no reader for "
                      "source %llu",
                      (unsigned long long)i);
  if (rc < 0 && !sl_last_error()[0])
    sl_set_error(rc, "interleave: opening source %llu failed (%s)",
                 (unsigned long long)i, sl_err_name(rc));
  return rc;
}

/* Callback mode: source r joins the stage's ledger, once it has one. */
static int join(il_state *t, sl_reader *r) {
  sl__budget_acct *a = atomic_load_explicit(&t->acct, memory_order_acquire);
  return a && r ? sl__reader_join_budget(r, a) : SL_OK;
}

/* Callback mode, a budget set since the last call: the sources open now
 * join it (those opened later join as they open). */
static int join_open(il_state *t) {
  if (t->readers || t->joined || !atomic_load(&t->acct)) return SL_OK;
  for (uint64_t s = 0; s < t->cycle; s++)
    SL_FORWARD_IF_ERROR(join(t, t->r[s]));
  SL_FORWARD_IF_ERROR(join(t, t->first));
  t->joined = true;
  return SL_OK;
}

static void il_budget(void *st, sl__budget_acct *acct) {
  atomic_store_explicit(&((il_state *)st)->acct, acct, memory_order_release);
}

/* Opens source i (callback mode): checked, wrapped and joined to the
 * budget. */
static int open_cb(il_state *t, uint64_t i, sl_reader **out) {
  sl_reader *r = NULL;
  if (i == 0 && t->first) {
    r = t->first;
    t->first = NULL;
  } else {
    int rc = call_open(t, i, &r);
    if (rc < 0) return rc;
    rc = check_schema(t, (size_t)i, r);
    if (rc < 0) {
      sl_reader_destroy(r);
      return rc;
    }
  }
  SL_FORWARD_IF_ERROR(wrap(t, r, out));
  int rc = join(t, *out);
  if (rc < 0) {
    sl_reader_destroy(*out);
    *out = NULL;
  }
  return rc;
}

static int open_slot(il_state *t, uint64_t slot, uint64_t i) {
  sl_reader *r;
  if (t->readers) {
    r = t->readers[i];
  } else {
    SL_FORWARD_IF_ERROR(open_cb(t, i, &r));
  }
  t->src[slot] = i;
  t->pos[slot] = 0;
  t->r[slot] = r;
  t->t.nopen++;
  return SL_OK;
}

static void close_slot(il_state *t, uint64_t slot) {
  if (!t->readers) sl_reader_destroy(t->r[slot]);
  t->r[slot] = NULL;
  t->src[slot] = NONE;
}

static void advance(il_state *t) {
  t->t.bi = 0;
  t->t.ci = (t->t.ci + 1) % t->cycle;
}

/* --- the pass ------------------------------------------------------------- */

static int il_next(void *st, sl_sample **out) {
  il_state *t = st;
  SL_FORWARD_IF_ERROR(join_open(t));
  for (;;) {
    uint64_t ci = t->t.ci;
    if (t->src[ci] != NONE) {
      int rc = sl_reader_next(t->r[ci], out);
      if (rc == SL_OK) {
        t->pos[ci]++;
        t->got[t->src[ci]]++;
        t->t.count++;
        if (++t->t.bi == t->block) advance(t);
        return SL_OK;
      }
      if (rc != SL_EOF) return rc;
      t->done[t->src[ci]] = true;
      close_slot(t, ci);
      t->t.nopen--;
      advance(t);
    } else if (t->t.next_src < t->n) {
      SL_FORWARD_IF_ERROR(open_slot(t, ci, t->t.next_src));
      t->t.next_src++;
    } else if (t->t.nopen == 0) {
      return SL_EOF;
    } else {
      advance(t);
    }
  }
}

/* The current state becomes the base of the save arithmetic. */
static void set_base(il_state *t) {
  t->bt = t->t;
  memcpy(t->bsrc, t->src, t->cycle * sizeof *t->src);
  memcpy(t->bpos, t->pos, t->cycle * sizeof *t->pos);
}

/* Empties the slots and forgets the pass (the readers are not reset). */
static void clear_pass(il_state *t) {
  for (uint64_t s = 0; s < t->cycle; s++)
    close_slot(t, s);
  memset(&t->t, 0, sizeof t->t);
  memset(t->got, 0, t->n * sizeof *t->got);
  memset(t->done, 0, t->n * sizeof *t->done);
  set_base(t);
}

static int il_reset(void *st) {
  il_state *t = st;
  clear_pass(t);
  return t->readers ? sl__reset_readers(t->readers, t->n) : SL_OK;
}

static void il_destroy(void *st) {
  il_state *t = st;
  if (!t) return;
  if (t->src)
    for (uint64_t s = 0; s < t->cycle; s++)
      close_slot(t, s);
  if (t->readers) sl__destroy_readers(t->readers, t->n);
  sl__free(t->readers);
  sl_reader_destroy(t->first);
  if (t->free_ud) t->free_ud(t->ud);
  sl_schema_release(t->schema);
  SL__FREE(t->ident, t->src, t->pos, t->r, t->got, t->done, t->bsrc, t->bpos,
           t);
}

static int il_length(const sl_reader *r, void *st, uint64_t *n) {
  il_state *t = st;
  SL_RETURN_ERROR_IF(!t->readers, SL_EUNSUPPORTED,
                     "interleave: sources opened by a callback or by name "
                     "have no known length until they are read");
  uint64_t sum = 0;
  for (size_t i = 0; i < t->n; i++) {
    uint64_t k;
    SL_FORWARD_IF_ERROR(sl_reader_length(t->readers[i], &k));
    SL_RETURN_ERROR_IF(k > UINT64_MAX - sum, SL_EUNSUPPORTED,
                       "interleave: the length does not fit 64 bits at "
                       "source %zu",
                       i);
    sum += k;
  }
  *n = sum;
  return SL_OK;
}

/* --- save and restore ----------------------------------------------------- */

/* The scheduling state right after output k-1 (see the banner): from the
 * base, with the sources that ended this pass at their counts and the
 * others endless.  Fills *o and src/pos (cycle entries). */
static int schedule_at(const il_state *t, uint64_t k, turn *o, uint64_t *src,
                       uint64_t *pos) {
  SL_RETURN_ERROR_IF(k < t->bt.count || k > t->t.count, SL_EUNSUPPORTED,
                     "save: interleave: position %llu is outside [%llu, "
                     "%llu], what this pass can place",
                     (unsigned long long)k, (unsigned long long)t->bt.count,
                     (unsigned long long)t->t.count);
  turn s = t->bt;
  memcpy(src, t->bsrc, t->cycle * sizeof *src);
  memcpy(pos, t->bpos, t->cycle * sizeof *pos);
  while (s.count < k) {
    uint64_t ci = s.ci;
    if (src[ci] != NONE) {
      uint64_t i = src[ci];
      uint64_t avail = t->done[i] ? t->got[i] - pos[ci] : NONE;
      if (avail == 0) {
        src[ci] = NONE;
        s.nopen--;
        s.bi = 0;
        s.ci = (ci + 1) % t->cycle;
        continue;
      }
      uint64_t take = t->block - s.bi;
      if (avail < take) take = avail;
      if (k - s.count < take) take = k - s.count;
      pos[ci] += take;
      s.count += take;
      s.bi += take;
      if (s.bi == t->block) {
        s.bi = 0;
        s.ci = (ci + 1) % t->cycle;
      }
    } else if (s.next_src < t->n) {
      src[ci] = s.next_src++;
      pos[ci] = 0;
      s.nopen++;
    } else {
      SL_RETURN_ERROR_IF(s.nopen == 0, SL_ECORRUPT,
                         "save: interleave: position %llu is past the pass",
                         (unsigned long long)k);
      s.bi = 0;
      s.ci = (ci + 1) % t->cycle;
    }
  }
  *o = s;
  return SL_OK;
}

static int il_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                   sl__state_out *w) {
  il_state *t = st;
  SL_RETURN_ERROR_IF(pass != sl__reader_pass(r), SL_EUNSUPPORTED,
                     "save: interleave: the position is in its pass %llu, "
                     "it is in pass %llu now (a repeat or mix above reset "
                     "it while the stages above still hold its outputs): "
                     "only this pass's schedule is kept",
                     (unsigned long long)pass,
                     (unsigned long long)sl__reader_pass(r));
  turn s = {0, 0, 0, 0, 0};
  uint64_t *src = sl__calloc(2 * t->cycle, sizeof *src);
  SL_RETURN_ERROR_IF(!src, SL_ENOMEM, "save: interleave: cannot allocate");
  uint64_t *pos = src + t->cycle;
  int rc = schedule_at(t, k, &s, src, pos);
  if (rc == SL_OK) rc = sl__state_put_u64(w, s.ci);
  if (rc == SL_OK) rc = sl__state_put_u64(w, s.bi);
  if (rc == SL_OK) rc = sl__state_put_u64(w, s.next_src);
  for (uint64_t c = 0; rc == SL_OK && c < t->cycle; c++) {
    rc = sl__state_put_u64(w, src[c]);
    if (rc == SL_OK) rc = sl__state_put_u64(w, pos[c]);
  }
  for (size_t i = 0; rc == SL_OK && t->readers && i < t->n; i++) {
    uint64_t at = i < s.next_src ? t->got[i] : 0;
    for (uint64_t c = 0; c < t->cycle; c++)
      if (src[c] == i) at = pos[c];
    rc =
        sl__state_save_up(w, t->readers[i], sl__reader_pass(t->readers[i]), at);
  }
  sl__free(src);
  return rc;
}

static int il_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                      sl__state_in *in) {
  il_state *t = st;
  clear_pass(t);
  for (size_t i = 0; t->readers && i < t->n; i++)
    SL_FORWARD_IF_ERROR(sl__state_restore_up(in, t->readers[i]));
  turn s = {0, 0, 0, 0, k};
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &s.ci));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &s.bi));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &s.next_src));
  SL_RETURN_ERROR_IF(s.ci >= t->cycle || s.bi >= t->block || s.next_src > t->n,
                     SL_ECORRUPT,
                     "restore: interleave: turn %llu/%llu, next source %llu",
                     (unsigned long long)s.ci, (unsigned long long)s.bi,
                     (unsigned long long)s.next_src);
  if (t->readers)
    for (size_t i = 0; i < t->n; i++) {
      t->got[i] = sl__reader_delivered(t->readers[i]);
      t->done[i] = i < s.next_src;
    }
  else
    for (uint64_t i = 0; i < s.next_src; i++)
      t->done[i] = true;
  for (uint64_t c = 0; c < t->cycle; c++) {
    uint64_t i, p;
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &i));
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &p));
    if (i == NONE) continue;
    SL_RETURN_ERROR_IF(i >= s.next_src || !t->done[i], SL_ECORRUPT,
                       "restore: interleave: slot %llu holds source %llu",
                       (unsigned long long)c, (unsigned long long)i);
    t->done[i] = false;
    SL_FORWARD_IF_ERROR(open_slot(t, c, i));
    t->pos[c] = p;
    t->got[i] = p;
    if (!t->readers)
      SL_FORWARD_IF_ERROR(sl__state_skip(t->r[c], p, "interleave"));
  }
  s.nopen = t->t.nopen;
  t->t = s;
  set_base(t);
  return SL_OK;
}

static void il_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  il_state *t = st;
  snprintf(buf, cap, "n=%zu cycle=%llu block=%llu%s%s", t->n,
           (unsigned long long)t->cycle, (unsigned long long)t->block,
           t->ident ? " " : "", t->ident ? t->ident : "");
}

static const sl__stage_ops il_ops = {
    .name = "interleave",
    .next = il_next,
    .reset = il_reset,
    .destroy = il_destroy,
    .length = il_length,
    .save = il_save,
    .restore = il_restore,
    .identity = il_identity,
    .budget = il_budget,
};

/* --- construction --------------------------------------------------------- */

/* threads > 0 runs one read-ahead thread per source in the cycle
 * (min(cycle, n) at once), for readers and for a callback's sources. */
static int check_opts(const sl_interleave_opts *o, size_t n) {
  SL_RETURN_ERROR_IF(o->size != sizeof *o,
                     o->size > sizeof *o ? SL_EUNSUPPORTED : SL_EINVAL,
                     "interleave: options of size %zu, this library's are "
                     "%zu (initialise them with SL_INTERLEAVE_OPTS_INIT)",
                     o->size, sizeof *o);
  SL_RETURN_ERROR_IF(o->cycle == 0, SL_EINVAL,
                     "interleave: cycle must be >= 1 (the sources open at "
                     "once)");
  SL_RETURN_ERROR_IF(o->block == 0, SL_EINVAL,
                     "interleave: block must be >= 1 (the samples taken "
                     "from a source per turn)");
  /* Threads run for the sources in the cycle only (the wrappers start
   * theirs at a source's first pull and join it at its end), so the cycle
   * is what counts, not the number of sources (tf.data's rule). */
  size_t wrapped = o->cycle < n ? o->cycle : n;
  if (o->threads)
    SL_FORWARD_IF_ERROR(sl__threads_check(
        "interleave", wrapped > (size_t)LONG_MAX ? LONG_MAX : (long)wrapped));
  return SL_OK;
}

/* Allocates the slots and per-source arrays of t (n, cycle set). */
static int alloc_pass(il_state *t) {
  t->src = sl__malloc(t->cycle * sizeof *t->src);
  t->pos = sl__calloc(t->cycle, sizeof *t->pos);
  t->r = sl__calloc(t->cycle, sizeof *t->r);
  t->bsrc = sl__malloc(t->cycle * sizeof *t->bsrc);
  t->bpos = sl__calloc(t->cycle, sizeof *t->bpos);
  t->got = sl__calloc(t->n, sizeof *t->got);
  t->done = sl__calloc(t->n, sizeof *t->done);
  SL_RETURN_ERROR_IF(!t->src || !t->pos || !t->r || !t->bsrc || !t->bpos ||
                         !t->got || !t->done,
                     SL_ENOMEM,
                     "interleave: cannot allocate %llu slots for %zu sources",
                     (unsigned long long)t->cycle, t->n);
  for (uint64_t s = 0; s < t->cycle; s++)
    t->src[s] = NONE;
  set_base(t);
  return SL_OK;
}

static il_state *new_state(size_t n, const sl_interleave_opts *o) {
  il_state *t = sl__calloc(1, sizeof *t);
  if (!t) {
    sl_set_error(SL_ENOMEM, "interleave: cannot allocate");
    return NULL;
  }
  atomic_init(&t->acct, NULL);
  t->n = n;
  /* More slots than sources would stay empty. */
  t->cycle = o->cycle < n ? o->cycle : n;
  t->block = o->block;
  t->threads = o->threads;
  return t;
}

static int finish(il_state *t, sl_reader **out) {
  int rc = alloc_pass(t);
  if (rc < 0) {
    il_destroy(t);
    return rc;
  }
  return sl__stage_new(&il_ops, t, t->schema, t->readers, t->n, NULL, out);
}

int sl_interleave(sl_reader **readers, size_t n, const sl_interleave_opts *opts,
                  sl_reader **out) {
  SL_FORWARD_IF_ERROR(sl__check_readers("interleave", readers, n, out));
  sl_interleave_opts dflt = SL_INTERLEAVE_OPTS_INIT;
  const sl_interleave_opts *o = opts ? opts : &dflt;
  int rc = check_opts(o, n);
  const sl_schema *first = sl_reader_schema(readers[0]);
  for (size_t i = 1; rc == SL_OK && i < n; i++)
    if (!sl_schema_equal(first, sl_reader_schema(readers[i]))) {
      char a[256], b[256];
      sl_schema_describe(sl_reader_schema(readers[i]), a, sizeof a);
      sl_schema_describe(first, b, sizeof b);
      rc = sl_set_error(SL_ESHAPE,
                        "interleave: reader %zu has schema %s, but reader 0 "
                        "has %s",
                        i, a, b);
    }
  il_state *t = rc == SL_OK ? new_state(n, o) : NULL;
  sl_reader **copy =
      t && n <= SIZE_MAX / sizeof *copy ? sl__malloc(n * sizeof *copy) : NULL;
  if (!t || !copy) {
    if (rc == SL_OK)
      rc =
          sl_set_error(SL_ENOMEM, "interleave: cannot allocate %zu readers", n);
    sl__free(t);
    sl__free(copy);
    sl__destroy_readers(readers, n);
    return rc;
  }
  memcpy(copy, readers, n * sizeof *copy);
  t->readers = copy;
  t->schema = sl_schema_retain((sl_schema *)first);
  /* Read ahead: every reader wrapped now, so the chain's shape (for saved
   * states) does not depend on what was opened. */
  for (size_t i = 0; i < n && o->threads; i++) {
    sl_reader *w = NULL;
    rc = wrap(t, copy[i], &w);
    copy[i] = w; /* NULL after a failure: sl_prefetch took the reader */
    if (rc < 0) {
      il_destroy(t);
      return rc;
    }
  }
  return finish(t, out);
}

int sl_interleave_sources(size_t n, sl_source_open_fn open, void *ud,
                          sl_free_fn free_ud, const char *ident,
                          const sl_interleave_opts *opts, sl_reader **out) {
  sl_interleave_opts dflt = SL_INTERLEAVE_OPTS_INIT;
  const sl_interleave_opts *o = opts ? opts : &dflt;
  int rc = !out     ? sl_set_error(SL_EINVAL, "interleave: NULL out pointer")
           : !open  ? sl_set_error(SL_EINVAL, "interleave: NULL open callback")
           : n == 0 ? sl_set_error(SL_EINVAL, "interleave: needs at least one "
                                              "source")
                    : check_opts(o, n);
  if (out) *out = NULL;
  il_state *t = rc == SL_OK ? new_state(n, o) : NULL;
  if (!t) {
    if (free_ud) free_ud(ud);
    return rc < 0 ? rc : SL_ENOMEM;
  }
  t->open = open;
  t->ud = ud;
  t->free_ud = free_ud;
  if (ident && !(t->ident = sl__strdup(ident))) {
    il_destroy(t);
    return sl_set_error(SL_ENOMEM, "interleave: cannot allocate");
  }
  /* Source 0 gives the schema and serves the first pass. */
  rc = call_open(t, 0, &t->first);
  if (rc < 0) {
    il_destroy(t);
    return rc;
  }
  t->schema = sl_schema_retain((sl_schema *)sl_reader_schema(t->first));
  return finish(t, out);
}
