/*
 * reader.c - the reader contract's shared machinery.  An implementation (a
 * vtable + state) only produces samples; this file adds, once for all:
 *
 *   - sticky errors: after an error, next/has_next return the same code and
 *     restore the same detail message until reset;
 *   - EOF latching: once the implementation returns SL_EOF it is not called
 *     again until reset, so implementations need not handle "next after end";
 *   - the one-sample peek behind sl_reader_has_next;
 *   - for readers made shareable (sl__reader_share, used by sl_threaded), one
 *     mutex around next, has_next and reset, so that this wrapper's own state
 *     (status, sticky error, peek) is as safe as the implementation's;
 *   - run statistics: the samples each reader hands out and, while timing is
 *     on (sl_stats_enable), the time spent inside its implementation's next;
 *     the links to its upstreams (given to sl__stage_new) let stats.c walk the
 *     chain.  Counted where the implementation is called (pull), so a
 *     sample peeked by has_next counts once.
 */
#include "stages/stage.h"

#include <pthread.h>

enum { ST_OK, ST_EOF, ST_ERR };

struct sl_reader {
  const sl__stage_ops *ops; /* the stage's static table, or user_ops */
  void *state;
  sl_schema *schema;     /* retained, frozen */
  int status;            /* ST_* */
  int err;               /* the sticky error code when status == ST_ERR */
  char *errmsg;          /* its detail message (heap), may be NULL */
  sl_sample *peeked;     /* a sample taken by has_next, not yet returned */
  pthread_mutex_t *lock; /* non-NULL for shared readers; guards all above */
  /* statistics and saves: links given at construction (sl__stage_new) */
  sl_reader *const *ups; /* borrowed from the state, nups entries */
  size_t nups;
  const sl__stage_counters *counters; /* NULL: a stage without threads */
  /* The position (state.h), guarded like status: passes (resets, or as
   * restored) and samples handed out by next in this pass. */
  uint64_t pass, delivered;
  atomic_uint_least64_t n_out;   /* samples the implementation gave */
  atomic_uint_least64_t next_ns; /* time inside ops.next (timing on) */
  void (*release)(void *);       /* sl__reader_own: run on `owned` last */
  void *owned;
  sl__stage_ops user_ops; /* a user vtable's four entries (sl_reader_new) */
  /* the memory budget's account, or NULL: set once while other threads may
   * pull the reader (sl_reader_set_budget), so atomic; and whether the
   * budget was set on this reader */
  sl__budget_acct *_Atomic acct;
  bool budget_root;
  bool budget_none; /* sl_reader_set_no_budget: no default budget */
};

static sl__budget_acct *acct_of(const sl_reader *r) {
  return atomic_load_explicit(&r->acct, memory_order_acquire);
}

void sl__reader_own(sl_reader *r, void (*release)(void *), void *owned) {
  r->release = release;
  r->owned = owned;
}

const sl__stage_ops *sl__reader_ops(const sl_reader *r) {
  return r->ops;
}

void *sl__reader_defer(sl_reader *r, size_t max_pending) {
  if (!r || !r->ops->defer || r->lock) return NULL;
  return r->ops->defer(r->state, max_pending);
}

void sl__reader_finish(const sl_reader *r, void *handle, sl_sample *s) {
  if (handle) r->ops->finish(handle, s);
}

int sl__reader_keep(sl_reader *r, sl__keep *k) {
  return r && r->ops->keep && !r->lock ? r->ops->keep(r->state, k) : SL_OK;
}

bool sl__reader_fetch_shared(sl_reader *r) {
  return r && r->ops->fetch && r->ops->fetch_shared && !r->lock &&
         r->ops->fetch_shared(r->state);
}

bool sl__fetch_shared_always(void *st) {
  (void)st;
  return true;
}

bool sl__reader_rows(sl_reader *r, struct sl__rows *table) {
  return r && r->ops->rows && !r->lock && r->ops->rows(r->state, table);
}

/* Signals every stage of r's chain to stop its threads (reader_impl.h),
 * top down, joining nothing. */
static void signal_chain(sl_reader *r, int depth) {
  if (!r || depth > 1024) return;
  if (r->ops->stop) r->ops->stop(r->state);
  for (size_t i = 0; i < r->nups; i++)
    signal_chain(r->ups[i], depth + 1);
}

int sl__reader_fetch(sl_reader *r, uint64_t pass, uint64_t pos,
                     sl_sample **out) {
  SL_RETURN_ERROR_IF(!r->ops->fetch, SL_EUNSUPPORTED,
                     "%s: no random access to its samples", sl_reader_name(r));
  return r->ops->fetch(r, r->state, pass, pos, out);
}

const sl__stage_ops *sl__reader_state_ops(const sl_reader *r, void **state) {
  *state = r->state;
  return r->ops->save ? r->ops : NULL;
}

uint64_t sl__reader_pass(const sl_reader *r) {
  return r->pass;
}

uint64_t sl__reader_delivered(const sl_reader *r) {
  return r->delivered;
}

sl_reader *sl__reader_up(const sl_reader *r, size_t i) {
  return i < r->nups ? r->ups[i] : NULL;
}

int sl_reader_length(const sl_reader *r, uint64_t *n) {
  SL_RETURN_ERROR_IF(!r || !n, SL_EINVAL, "length: NULL %s",
                     !r ? "reader" : "out pointer");
  *n = 0;
  SL_RETURN_ERROR_IF(!r->ops->length, SL_EUNSUPPORTED,
                     "%s: the number of samples a pass yields is not known "
                     "before reading it",
                     sl_reader_name(r));
  uint64_t v = 0;
  int rc = r->ops->length(r, r->state, &v);
  if (rc == SL_OK) *n = v;
  return rc;
}

int sl__upstream_length(const sl_reader *r, size_t i, uint64_t *n) {
  SL_RETURN_ERROR_IF(i >= r->nups || !r->ups[i], SL_EUNSUPPORTED,
                     "%s: its upstream is not known", sl_reader_name(r));
  return sl_reader_length(r->ups[i], n);
}

int sl__length_of_upstream(const sl_reader *r, void *state, uint64_t *n) {
  return sl__upstream_length(r, 0, n);
}

void sl__reader_view_of(const sl_reader *r, sl__reader_view *v) {
  v->name = sl_reader_name(r);
  v->ups = r->ups;
  v->nups = r->nups;
  v->counters = r->counters;
  v->samples_out = atomic_load_explicit(&r->n_out, memory_order_relaxed);
  v->acct = acct_of(r);
  v->next_ns = atomic_load_explicit(&r->next_ns, memory_order_relaxed);
}

int sl__reader_share(sl_reader *r) {
  if (r->lock) return SL_OK;
  pthread_mutex_t *m = sl__malloc(sizeof *m);
  SL_RETURN_ERROR_IF(!m, SL_ENOMEM, "%s: cannot allocate a lock",
                     sl_reader_name(r));
  pthread_mutex_init(m, NULL);
  r->lock = m;
  return SL_OK;
}

/* --- the memory budget (sync/budget.h) ---------------------------------------
 * sl_reader_set_budget gives every reader of the chain an account of one
 * ledger, upstreams first, each linked to its first upstream's (whose carry
 * it claims), and hands it to the stage (ops->budget).  A stage made later
 * over a reader with an account joins its ledger the same way when it is
 * made (sl__stage_new), before its threads start where the stage starts
 * them after wrapping (prefetch, the C parallel map): so a budget set on a
 * source bounds the chain built on it from its first sample.  The readers
 * own their accounts (freed after the stage's destroy: its threads are
 * gone); the ledger goes with the last account, and the destroy of the
 * reader it was set on closes it first, so that no worker waits for room
 * any more. */

static int attach_budget(sl_reader *r, sl__budget *b, int depth) {
  SL_RETURN_ERROR_IF(depth > 1024, SL_EINVAL,
                     "budget: the chain is deeper than 1024 stages");
  if (acct_of(r)) return SL_OK; /* reached twice */
  for (size_t i = 0; i < r->nups; i++)
    if (r->ups[i]) SL_FORWARD_IF_ERROR(attach_budget(r->ups[i], b, depth + 1));
  sl__budget_acct *a = sl__budget_acct_new(b, sl_reader_name(r));
  if (!a) return SL_ENOMEM;
  if (r->nups > 0 && r->ups[0]) sl__budget_acct_link(a, acct_of(r->ups[0]));
  atomic_store_explicit(&r->acct, a, memory_order_release);
  if (r->ops->budget && !r->lock) r->ops->budget(r->state, a);
  return SL_OK;
}

int sl__reader_join_budget(sl_reader *r, const sl__budget_acct *a) {
  SL_RETURN_ERROR_IF(!r || !a, SL_EINVAL, "budget: NULL reader or account");
  return attach_budget(r, sl__budget_of(a), 0);
}

uint64_t sl__reader_budget_peak(const sl_reader *r) {
  sl__budget_acct *a = r ? acct_of(r) : NULL;
  return a ? sl__budget_peak(sl__budget_of(a)) : 0;
}

uint64_t sl__reader_budget_headroom(const sl_reader *r) {
  sl__budget_acct *a = r ? acct_of(r) : NULL;
  return a ? sl__budget_headroom(sl__budget_of(a)) : 0;
}

static void reset_peaks(sl_reader *r, int depth) {
  sl__budget_acct *a = r && depth <= 1024 ? acct_of(r) : NULL;
  if (!a) return;
  sl__budget_acct_reset_peak(a);
  for (size_t i = 0; i < r->nups; i++)
    reset_peaks(r->ups[i], depth + 1);
}

void sl__reader_budget_reset_peak(sl_reader *r) {
  sl__budget_acct *a = r ? acct_of(r) : NULL;
  if (!a) return;
  sl__budget_reset_peak(sl__budget_of(a));
  reset_peaks(r, 0);
}

int sl_reader_set_budget(sl_reader *r, uint64_t bytes) {
  SL_RETURN_ERROR_IF(!r, SL_EINVAL, "budget: NULL reader");
  SL_RETURN_ERROR_IF(bytes == 0, SL_EINVAL,
                     "budget: must be at least 1 byte (got 0)");
  SL_RETURN_ERROR_IF(acct_of(r), SL_ESTATE,
                     "budget: %s already has a memory budget",
                     sl_reader_name(r));
  sl__budget *b = sl__budget_new(bytes);
  if (!b) return sl_last_error_code();
  int rc = attach_budget(r, b, 0);
  if (rc == SL_OK) r->budget_root = true;
  sl__budget_drop(b); /* the accounts hold it */
  return rc;
}

/* Whether r or a reader below it was marked "no budget". */
static bool marked_none(const sl_reader *r, int depth) {
  if (!r || depth > 1024) return false;
  if (r->budget_none) return true;
  for (size_t i = 0; i < r->nups; i++)
    if (marked_none(r->ups[i], depth + 1)) return true;
  return false;
}

int sl_reader_default_budget(sl_reader *r) {
  SL_RETURN_ERROR_IF(!r, SL_EINVAL, "budget: NULL reader");
  if (acct_of(r) || marked_none(r, 0)) return SL_OK;
  uint64_t usable;
  SL_FORWARD_IF_ERROR(sl__budget_usable(&usable));
  sl__budget *b =
      sl__budget_new(sl__budget_share(usable, SL_BUDGET_DEFAULT_PERCENT));
  if (!b) return sl_last_error_code();
  sl__budget_mark_default(b, SL_BUDGET_DEFAULT_PERCENT, usable);
  int rc = attach_budget(r, b, 0);
  if (rc == SL_OK) r->budget_root = true;
  sl__budget_drop(b);
  return rc;
}

int sl_reader_set_no_budget(sl_reader *r) {
  SL_RETURN_ERROR_IF(!r, SL_EINVAL, "budget: NULL reader");
  SL_RETURN_ERROR_IF(acct_of(r), SL_ESTATE,
                     "budget: %s already has a memory budget",
                     sl_reader_name(r));
  r->budget_none = true;
  return SL_OK;
}

static inline void lock(sl_reader *r) {
  if (r->lock) pthread_mutex_lock(r->lock);
}

static inline void unlock(sl_reader *r) {
  if (r->lock) pthread_mutex_unlock(r->lock);
}

/* The one constructor behind sl_reader_new and sl__stage_new. */
static sl_reader *make_reader(const sl__stage_ops *ops, void *state,
                              sl_schema *schema, bool user) {
  if (!ops || !ops->next || !schema) {
    if (ops && ops->destroy) ops->destroy(state);
    sl_set_error(SL_EINVAL, "reader: %s",
                 !ops        ? "NULL vtable"
                 : !ops->next ? "vtable has no next function"
                              : "NULL schema");
    return NULL;
  }
  sl_reader *r = sl__calloc(1, sizeof *r);
  if (!r) {
    if (ops->destroy) ops->destroy(state);
    sl_set_error(SL_ENOMEM, "reader: cannot allocate '%s'",
                 ops->name ? ops->name : "reader");
    return NULL;
  }
  if (user) r->user_ops = *ops;
  r->ops = user ? &r->user_ops : ops;
  r->state = state;
  sl_schema_freeze(schema);
  r->schema = sl_schema_retain(schema);
  r->status = ST_OK;
  return r;
}

/* The public vtable is the first four entries of a stage's table. */
sl_reader *sl_reader_new(const sl_reader_vtable *vt, void *state,
                         sl_schema *schema) {
  sl__stage_ops ops = {0};
  if (vt) {
    ops.name = vt->name;
    ops.next = vt->next;
    ops.reset = vt->reset;
    ops.destroy = vt->destroy;
  }
  return make_reader(vt ? &ops : NULL, state, schema, true);
}

int sl__stage_new(const sl__stage_ops *ops, void *state, sl_schema *schema,
                  sl_reader *const *ups, size_t nups,
                  const sl__stage_counters *c, sl_reader **out) {
  *out = make_reader(ops, state, schema, false);
  if (!*out) return sl_last_error_code();
  (*out)->ups = ups;
  (*out)->nups = ups ? nups : 0;
  (*out)->counters = c;
  /* Over a chain with a memory budget: join it. */
  sl__budget_acct *below = NULL;
  for (size_t i = 0; i < (*out)->nups && !below; i++)
    below = ups[i] ? acct_of(ups[i]) : NULL;
  int rc = below ? attach_budget(*out, sl__budget_of(below), 0) : SL_OK;
  if (rc < 0) {
    sl_reader_destroy(*out);
    *out = NULL;
  }
  return rc;
}

int sl__stage_wrap(const sl__stage_ops *ops, void *state, sl_schema *schema,
                   sl_reader *const *up_slot, const sl__stage_counters *c,
                   sl_reader **out) {
  /* Hold the schema ourselves: a failing constructor destroys the state,
   * and with it the upstream whose schema this may be. */
  sl_schema *own = sl_schema_retain(
      schema ? schema : (sl_schema *)sl_reader_schema(*up_slot));
  int rc = sl__stage_new(ops, state, own, up_slot, 1, c, out);
  sl_schema_release(own);
  return rc;
}

void *sl__decorator_state(const char *stage, sl_reader *up, size_t size) {
  sl_reader **st = sl__calloc(1, size);
  if (st) {
    *st = up;
  } else {
    sl_reader_destroy(up);
    sl_set_error(SL_ENOMEM, "%s: cannot allocate", stage);
  }
  return st;
}

void sl__stage_free(void *state, sl_reader *up, sl_schema *schema) {
  sl_reader_destroy(up);
  sl_schema_release(schema);
  sl__free(state);
}

static void clear_sticky(sl_reader *r) {
  sl__free(r->errmsg);
  r->errmsg = NULL;
  r->err = SL_OK;
  r->status = ST_OK;
}

static int make_sticky(sl_reader *r, int rc) {
  r->status = ST_ERR;
  r->err = rc;
  sl__free(r->errmsg);
  r->errmsg = sl__error_dup();
  return rc;
}

static int restore_sticky(const sl_reader *r) {
  return sl_set_error(r->err, "%s",
                      r->errmsg ? r->errmsg
                                : "(error message lost: out of memory)");
}

/* Pulls from the implementation, updating status.  Never called with a
 * peeked sample pending. */
static int pull(sl_reader *r, sl_sample **out) {
  if (r->status == ST_EOF) return SL_EOF;
  if (r->status == ST_ERR) return restore_sticky(r);
  *out = NULL;
  sl__error_forget_code(); /* so a failure without a message is named */
  sl__budget_acct *a = acct_of(r);
  if (a) sl__budget_drop_carry(a); /* the sample handed out last has left */
  uint64_t t0 = sl__stat_start();
  int rc = r->ops->next(r->state, out);
  if (t0) sl__stat_add_1w(&r->next_ns, sl__now_ns() - t0);
  if (rc == SL_OK) {
    if (!*out)
      return make_sticky(r, sl_set_error(SL_EINVAL,
                                         "%s: next returned SL_OK without a "
                                         "sample",
                                         sl_reader_name(r)));
    sl__stat_add_1w(&r->n_out, 1);
    return SL_OK;
  }
  if (*out) { /* a misbehaving implementation; never leak */
    sl_sample_release(*out);
    *out = NULL;
  }
  if (rc == SL_EOF) {
    r->status = ST_EOF;
    return SL_EOF;
  }
  if (rc > 0)
    rc = sl_set_error(SL_EINVAL, "%s: next returned %d", sl_reader_name(r), rc);
  return make_sticky(
      r, sl__error_keep(rc, "%s: %s", sl_reader_name(r), sl_strerror(rc)));
}

static int next_locked(sl_reader *r, sl_sample **out) {
  if (r->peeked) {
    *out = r->peeked;
    r->peeked = NULL;
    r->delivered++;
    return SL_OK;
  }
  *out = NULL;
  int rc = pull(r, out);
  if (rc == SL_OK) r->delivered++;
  return rc;
}

int sl_reader_next(sl_reader *r, sl_sample **out) {
  SL_RETURN_ERROR_IF(!r || !out, SL_EINVAL, "reader: NULL %s",
                     !r ? "reader" : "out pointer");
  lock(r);
  int rc = next_locked(r, out);
  unlock(r);
  return rc;
}

static int has_next_locked(sl_reader *r) {
  if (r->peeked) return 1;
  sl_sample *s = NULL;
  int rc = pull(r, &s);
  if (rc == SL_OK) {
    r->peeked = s;
    return 1;
  }
  return rc == SL_EOF ? 0 : rc;
}

int sl_reader_has_next(sl_reader *r) {
  SL_RETURN_ERROR_IF(!r, SL_EINVAL, "reader: NULL reader");
  lock(r);
  int rc = has_next_locked(r);
  unlock(r);
  return rc;
}

static int reset_locked(sl_reader *r) {
  sl_sample_release(r->peeked);
  r->peeked = NULL;
  clear_sticky(r);
  r->pass++;
  r->delivered = 0;
  sl__budget_acct *a = acct_of(r);
  if (a) sl__budget_drop_carry(a);
  signal_chain(r, 0);
  if (!r->ops->reset)
    return make_sticky(r, sl_set_error(SL_EUNSUPPORTED,
                                       "%s: this reader cannot be reset",
                                       sl_reader_name(r)));
  sl__error_forget_code();
  int rc = r->ops->reset(r->state);
  if (rc < 0)
    return make_sticky(r, sl__error_keep(rc, "%s: reset failed: %s",
                                         sl_reader_name(r), sl_strerror(rc)));
  return SL_OK;
}

int sl_reader_reset(sl_reader *r) {
  SL_RETURN_ERROR_IF(!r, SL_EINVAL, "reader: NULL reader");
  lock(r);
  int rc = reset_locked(r);
  unlock(r);
  return rc;
}

void sl__reader_restore_begin(sl_reader *r) {
  signal_chain(r, 0);
  lock(r);
  sl_sample_release(r->peeked);
  r->peeked = NULL;
  clear_sticky(r);
  sl__error_forget_code();
}

int sl__reader_restore_end(sl_reader *r, int rc, uint64_t pass, uint64_t k) {
  if (rc < 0) {
    rc = make_sticky(r, sl__error_keep(rc, "%s: restore failed: %s",
                                       sl_reader_name(r), sl_strerror(rc)));
  } else {
    r->pass = pass;
    r->delivered = k;
  }
  unlock(r);
  return rc;
}

const sl_schema *sl_reader_schema(const sl_reader *r) {
  return r ? r->schema : NULL;
}

void *sl__reader_state_of(sl_reader *r, sl__next_fn next) {
  return (r && r->ops->next == next && !r->lock) ? r->state : NULL;
}

const char *sl_reader_name(const sl_reader *r) {
  return (r && r->ops->name) ? r->ops->name : "reader";
}

void sl_reader_destroy(sl_reader *r) {
  if (!r) return;
  if (r->budget_root) sl__budget_close(sl__budget_of(acct_of(r)));
  signal_chain(r, 0);
  sl_sample_release(r->peeked);
  if (r->ops->destroy) r->ops->destroy(r->state);
  sl__budget_acct_free(acct_of(r)); /* after its stage's threads are gone */
  sl_schema_release(r->schema);
  sl__free(r->errmsg);
  if (r->lock) {
    pthread_mutex_destroy(r->lock);
    sl__free(r->lock);
  }
  void (*release)(void *) = r->release;
  void *owned = r->owned;
  sl__free(r);
  if (release) release(owned);
}
