/*
 * budget.c - the pipeline's memory ledger (budget.h).
 *
 * The total and each account's held bytes, peak and carry are atomics; a
 * reservation takes room with a compare-and-swap on the total, so the
 * total never passes the capacity through a reservation.  Charges that do
 * not wait (sl__budget_charge, a growing sl__budget_adjust, the one item a
 * stage holding nothing may take) add without the check.
 *
 * Waiting: a reserver that finds no room registers (`waiters`, seq_cst)
 * under `mu`, looks at the total (or its account's held bytes) again and
 * sleeps on `cv`; whoever lowers a total or an account's held bytes
 * (a release, a drop, a claim of the carry) subtracts (seq_cst) and then
 * reads `waiters`: one of the two sees the other's write, so no wake-up
 * is lost.  A waiter registers what would let it go on: the room its
 * reservation needs (the ledger's min_need, the least of them) or, for
 * every waiter, its account holding nothing (the account's `waiting`); a
 * release wakes the waiters only when one of those holds now (wake_if),
 * all of them together (they may want different amounts; those that
 * still cannot go on register again), and close and wake always do.
 *
 * Headroom (budget.h): learn() adds what a charge that does not wait took
 * past the capacity; sl__budget_burst keeps the largest burst declared;
 * room_cap() is the capacity less both, the bound of every reservation
 * that waits (must_wait, sl__budget_try, wake_if, sl__budget_has_room).
 */
#include "sync/budget.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct sl__budget {
  uint64_t cap;
  atomic_uint_least64_t total, peak;
  /* the headroom learned: what the charges that do not wait took past the
   * capacity so far (at most cap); a reservation that waits leaves it
   * free (room_cap below) */
  atomic_uint_least64_t headroom;
  /* the largest burst a stage declared (sl__budget_burst), also left free */
  atomic_uint_least64_t burst;
  atomic_int refs;
  atomic_int waiters;
  /* the least room a reservation waiting now needs (UINT64_MAX: none);
   * reset by each wake-up, lowered again by the waiters still waiting */
  atomic_uint_least64_t min_need;
  atomic_uint_least64_t wakeups; /* broadcasts so far (tests) */
  atomic_bool closed;
  int default_pct;  /* a default budget: its share, else 0 */
  uint64_t usable;  /* a default budget: the memory it is a share of */
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

struct sl__budget_acct {
  sl__budget *b;
  const char *stage;
  sl__budget_acct *below; /* its upstream's account, or NULL */
  atomic_uint_least64_t held, peak, carry;
  /* what its stage keeps for itself (sl__budget_resident): in the total,
   * the peak and the stats, never in `held` ("holds nothing") */
  atomic_uint_least64_t resident;
  atomic_int waiting; /* its waiters: they may go on once it holds nothing */
  /* the headroom its charges added (learn), and whether it declares its
   * bursts instead (sl__budget_burst: then its charges add none) */
  atomic_uint_least64_t learned;
  atomic_bool bursty;
};

static void raise_peak(atomic_uint_least64_t *peak, uint64_t v) {
  uint64_t p = atomic_load_explicit(peak, memory_order_relaxed);
  while (v > p && !atomic_compare_exchange_weak_explicit(
                      peak, &p, v, memory_order_relaxed, memory_order_relaxed))
    ;
}

/* The capacity a reservation that waits may fill: the capacity less the
 * headroom learned. */
static uint64_t room_cap(const sl__budget *b) {
  uint64_t h = sl__budget_headroom(b);
  return h < b->cap ? b->cap - h : 0;
}

/* A charge of n bytes that does not wait brought the total to t: what
 * passes the capacity (of those n bytes) joins the headroom (at most the
 * capacity), so the reservations that wait leave that much more room from
 * now on.  Learned from the
 * charges a stage makes by its rules (the one item of a stage holding
 * nothing, sl__budget_charge, resident growth), not from an item found
 * larger than its reservation (sl__budget_adjust): that is the first item
 * of a stage, or one made before the budget was set, once. */
static void learn(sl__budget_acct *a, uint64_t t, uint64_t n) {
  sl__budget *b = a->b;
  if (t <= b->cap || atomic_load(&a->bursty)) return;
  uint64_t over = t - b->cap < n ? t - b->cap : n; /* this charge's part */
  uint64_t h = atomic_load(&b->headroom), want;
  do {
    want = h + over;
    if (want > b->cap || want < h) want = b->cap;
    if (want <= h) return;
  } while (!atomic_compare_exchange_weak(&b->headroom, &h, want));
  atomic_fetch_add(&a->learned, want - h);
}

/* Adds n to a's held and the total (no check); returns the total. */
static uint64_t add(sl__budget_acct *a, uint64_t n) {
  if (!n) return atomic_load(&a->b->total);
  uint64_t t = atomic_fetch_add(&a->b->total, n) + n;
  raise_peak(&a->b->peak, t);
  uint64_t h = atomic_fetch_add(&a->held, n) + n;
  raise_peak(&a->peak, h + atomic_load(&a->resident));
  return t;
}

static void wake_all(sl__budget *b) {
  pthread_mutex_lock(&b->mu);
  atomic_store(&b->min_need, UINT64_MAX);
  atomic_fetch_add_explicit(&b->wakeups, 1, memory_order_relaxed);
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

/* After bytes were released (the total now `total`, and account a, when
 * not NULL, holding `held`): wakes the waiters when one of them can go on
 * - the room is what the least of the reservations waiting needs, or a
 * holds nothing and has a waiter - and not at every release (a ledger
 * full of a slow consumer's samples would wake every worker per sample). */
static void wake_if(sl__budget *b, uint64_t total, const sl__budget_acct *a,
                    uint64_t held) {
  if (atomic_load(&b->waiters) == 0) return;
  uint64_t cap = room_cap(b);
  uint64_t room = total < cap ? cap - total : 0;
  if (room >= atomic_load(&b->min_need) ||
      (a && held == 0 && atomic_load(&a->waiting) > 0))
    wake_all(b);
}

static void sub(sl__budget_acct *a, uint64_t n) {
  if (!n) return;
  uint64_t h = atomic_fetch_sub(&a->held, n) - n;
  uint64_t t = atomic_fetch_sub(&a->b->total, n) - n;
  wake_if(a->b, t, a, h);
}

sl__budget *sl__budget_new(uint64_t cap) {
  if (cap == 0) {
    sl_set_error(SL_EINVAL, "budget: must be at least 1 byte (got 0)");
    return NULL;
  }
  sl__budget *b = sl__calloc(1, sizeof *b);
  if (!b) {
    sl_set_error(SL_ENOMEM, "budget: cannot allocate");
    return NULL;
  }
  b->cap = cap;
  atomic_init(&b->total, 0);
  atomic_init(&b->peak, 0);
  atomic_init(&b->headroom, 0);
  atomic_init(&b->burst, 0);
  atomic_init(&b->refs, 1);
  atomic_init(&b->waiters, 0);
  atomic_init(&b->min_need, UINT64_MAX);
  atomic_init(&b->wakeups, 0);
  atomic_init(&b->closed, false);
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  return b;
}

void sl__budget_drop(sl__budget *b) {
  if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  sl__free(b);
}

uint64_t sl__budget_cap(const sl__budget *b) {
  return b->cap;
}

uint64_t sl__budget_held(const sl__budget *b) {
  return atomic_load_explicit(&b->total, memory_order_relaxed);
}

uint64_t sl__budget_peak(const sl__budget *b) {
  return atomic_load_explicit(&b->peak, memory_order_relaxed);
}

uint64_t sl__budget_headroom(const sl__budget *b) {
  uint64_t h = atomic_load_explicit(&b->headroom, memory_order_relaxed) +
               atomic_load_explicit(&b->burst, memory_order_relaxed);
  return h < b->cap ? h : b->cap;
}

bool sl__budget_has_room(const sl__budget *b, uint64_t n) {
  uint64_t t = atomic_load(&b->total), cap = room_cap(b);
  return t <= cap && n <= cap - t;
}

void sl__budget_burst(sl__budget_acct *a, uint64_t n) {
  if (!atomic_exchange(&a->bursty, true)) {
    /* what its charges taught the ledger so far was its burst: the burst
     * replaces it */
    uint64_t l = atomic_exchange(&a->learned, 0);
    uint64_t h = atomic_load(&a->b->headroom);
    while (!atomic_compare_exchange_weak(&a->b->headroom, &h,
                                         h > l ? h - l : 0))
      ;
  }
  raise_peak(&a->b->burst, n < a->b->cap ? n : a->b->cap);
}

void sl__budget_reset_peak(sl__budget *b) {
  atomic_store(&b->peak, atomic_load(&b->total));
}

void sl__budget_acct_reset_peak(sl__budget_acct *a) {
  atomic_store(&a->peak, atomic_load(&a->held));
}

int sl__budget_usable(uint64_t *usable) {
  const char *v = getenv("SLUICE_MEMORY_LIMIT");
  if (!v || !*v) {
    *usable = sl__memory_limit();
    return SL_OK;
  }
  /* digits, then an optional unit (K, M, G, T with an optional B or iB) */
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  bool digits = *v >= '0' && *v <= '9';
  int shift = 0;
  const char *u = end;
  switch (*u == 0 ? 0 : (*u | 0x20)) {
  case 'k': shift = 10; break;
  case 'm': shift = 20; break;
  case 'g': shift = 30; break;
  case 't': shift = 40; break;
  case 'b': break;
  case 0: break;
  default: shift = -1;
  }
  if (shift > 0) u++;
  if (shift >= 0 && (*u | 0x20) == 'i' && shift > 0) u++;
  if (shift >= 0 && (*u | 0x20) == 'b') u++;
  if (!digits || errno || shift < 0 || *u || n == 0 ||
      (shift && n > (UINT64_MAX >> shift)))
    return sl_set_error(SL_EINVAL,
                        "SLUICE_MEMORY_LIMIT: not a size >= 1 byte (a number "
                        "with an optional K, M, G or T; got '%s')",
                        v);
  *usable = (uint64_t)n << shift;
  return SL_OK;
}

uint64_t sl__budget_share(uint64_t usable, int pct) {
  uint64_t b = usable / 100 * (uint64_t)pct + usable % 100 * (uint64_t)pct / 100;
  return b ? b : 1;
}

void sl__budget_mark_default(sl__budget *b, int pct, uint64_t usable) {
  b->default_pct = pct;
  b->usable = usable;
}

int sl__budget_default_pct(const sl__budget *b) {
  return b->default_pct;
}

uint64_t sl__budget_usable_of(const sl__budget *b) {
  return b->usable;
}

void sl__budget_close(sl__budget *b) {
  if (!b) return;
  atomic_store(&b->closed, true);
  wake_all(b);
}

void sl__budget_wake(sl__budget *b) {
  if (b && atomic_load(&b->waiters) > 0) wake_all(b);
}

sl__budget_acct *sl__budget_acct_new(sl__budget *b, const char *stage) {
  sl__budget_acct *a = sl__calloc(1, sizeof *a);
  if (!a) {
    sl_set_error(SL_ENOMEM, "%s: cannot allocate its budget account", stage);
    return NULL;
  }
  a->b = b;
  a->stage = stage;
  atomic_init(&a->held, 0);
  atomic_init(&a->peak, 0);
  atomic_init(&a->carry, 0);
  atomic_init(&a->resident, 0);
  atomic_init(&a->waiting, 0);
  atomic_init(&a->learned, 0);
  atomic_init(&a->bursty, false);
  atomic_fetch_add(&b->refs, 1);
  return a;
}

void sl__budget_acct_free(sl__budget_acct *a) {
  if (!a) return;
  sl__budget_release_all(a);
  sl__budget_resident(a, atomic_load(&a->resident), 0);
  sl__budget_drop(a->b);
  sl__free(a);
}

void sl__budget_acct_link(sl__budget_acct *a, sl__budget_acct *below) {
  a->below = below;
}

sl__budget *sl__budget_of(const sl__budget_acct *a) {
  return a->b;
}

uint64_t sl__budget_acct_held(const sl__budget_acct *a) {
  uint64_t h = atomic_load(&a->held) + atomic_load(&a->resident);
  uint64_t p = atomic_load(&a->peak);
  return h < p ? h : p;
}

uint64_t sl__budget_acct_resident(const sl__budget_acct *a) {
  return atomic_load_explicit(&a->resident, memory_order_relaxed);
}

uint64_t sl__budget_acct_peak(const sl__budget_acct *a) {
  return atomic_load_explicit(&a->peak, memory_order_relaxed);
}

static int too_big(const sl__budget_acct *a, uint64_t n) {
  return sl_set_error(SL_ENOMEM,
                      "stage '%s' needs %llu bytes for one sample, the "
                      "budget is %llu bytes",
                      a->stage, (unsigned long long)n,
                      (unsigned long long)a->b->cap);
}

/* Whether a reservation of n must wait now. */
static bool must_wait(const sl__budget_acct *a, uint64_t n) {
  if (atomic_load(&a->held) == 0) return false; /* one item, always */
  uint64_t t = atomic_load(&a->b->total), cap = room_cap(a->b);
  return n ? t + n > cap : t >= cap;
}

static bool stopped(const sl__budget_acct *a, const atomic_bool *stop) {
  return atomic_load(&a->b->closed) ||
         (stop && atomic_load_explicit(stop, memory_order_acquire));
}

int sl__budget_fits(const sl__budget_acct *a, uint64_t n) {
  return n > a->b->cap ? too_big(a, n) : SL_OK;
}

bool sl__budget_try(sl__budget_acct *a, uint64_t n) {
  sl__budget *b = a->b;
  for (;;) {
    if (atomic_load(&a->held) == 0) {
      learn(a, add(a, n), n);
      return true;
    }
    uint64_t t = atomic_load(&b->total), cap = room_cap(b);
    if (!(n ? t + n <= cap : t < cap)) return false;
    if (!atomic_compare_exchange_weak(&b->total, &t, t + n)) continue;
    raise_peak(&b->peak, t + n);
    uint64_t h = atomic_fetch_add(&a->held, n) + n;
    raise_peak(&a->peak, h + atomic_load(&a->resident));
    return true;
  }
}

/* Waits until a holds nothing (empty) or until n bytes fit (taking them). */
static int wait_room(sl__budget_acct *a, uint64_t n, const atomic_bool *stop,
                     bool empty) {
  sl__budget *b = a->b;
  for (;;) {
    if (stopped(a, stop))
      return sl_set_error(SL_EKILLED,
                          "%s: stopped while waiting for room "
                          "in the memory budget",
                          a->stage);
    if (empty ? atomic_load(&a->held) == 0 : sl__budget_try(a, n)) return SL_OK;
    pthread_mutex_lock(&b->mu);
    /* register (what would let it go on), then look again: a releaser
     * lowers the counts first and reads these after (seq_cst), so one of
     * the two sees the other's write and no wake-up is lost */
    atomic_fetch_add(&b->waiters, 1);
    atomic_fetch_add(&a->waiting, 1);
    if (!empty) {
      uint64_t need = n ? n : 1, m = atomic_load(&b->min_need);
      while (need < m && !atomic_compare_exchange_weak(&b->min_need, &m, need))
        ;
    }
    bool wait = empty ? atomic_load(&a->held) > 0 : must_wait(a, n);
    if (wait && !stopped(a, stop)) pthread_cond_wait(&b->cv, &b->mu);
    atomic_fetch_sub(&a->waiting, 1);
    atomic_fetch_sub(&b->waiters, 1);
    pthread_mutex_unlock(&b->mu);
  }
}

int sl__budget_reserve(sl__budget_acct *a, uint64_t n,
                       const atomic_bool *stop) {
  if (n > a->b->cap) return too_big(a, n);
  return wait_room(a, n, stop, false);
}

int sl__budget_wait_empty(sl__budget_acct *a, const atomic_bool *stop) {
  return wait_room(a, 0, stop, true);
}

int sl__budget_charge(sl__budget_acct *a, uint64_t n, uint64_t count) {
  if (n > a->b->cap) return too_big(a, n);
  uint64_t h = atomic_load(&a->held);
  if (h + n > a->b->cap)
    return sl_set_error(SL_ENOMEM,
                        "stage '%s' needs %llu bytes to hold %llu samples, "
                        "the budget is %llu bytes",
                        a->stage, (unsigned long long)(h + n),
                        (unsigned long long)count,
                        (unsigned long long)a->b->cap);
  uint64_t got = sl__budget_claim(a, n);
  learn(a, add(a, n - got), n - got);
  return SL_OK;
}

void sl__budget_adjust(sl__budget_acct *a, uint64_t from, uint64_t to) {
  if (to > from)
    add(a, to - from);
  else
    sub(a, from - to);
}

void sl__budget_release(sl__budget_acct *a, uint64_t n) {
  sub(a, n);
}

void sl__budget_release_all(sl__budget_acct *a) {
  atomic_store(&a->carry, 0);
  uint64_t h = atomic_exchange(&a->held, 0);
  if (!h) return;
  uint64_t t = atomic_fetch_sub(&a->b->total, h) - h;
  wake_if(a->b, t, a, 0);
}

void sl__budget_resident(sl__budget_acct *a, uint64_t from, uint64_t to) {
  if (to > from) {
    uint64_t n = to - from;
    uint64_t t = atomic_fetch_add(&a->b->total, n) + n;
    raise_peak(&a->b->peak, t);
    learn(a, t, n);
    uint64_t r = atomic_fetch_add(&a->resident, n) + n;
    raise_peak(&a->peak, r + atomic_load(&a->held));
  } else if (from > to) {
    uint64_t n = from - to;
    atomic_fetch_sub(&a->resident, n);
    uint64_t t = atomic_fetch_sub(&a->b->total, n) - n;
    wake_if(a->b, t, NULL, 0);
  }
}

void sl__budget_keep(sl__budget_acct *a, uint64_t *kept, uint64_t n) {
  uint64_t c = atomic_exchange(&a->carry, 0);
  uint64_t h = atomic_fetch_sub(&a->held, c) - c;
  uint64_t r = atomic_fetch_add(&a->resident, n) + n;
  raise_peak(&a->peak, r + h);
  uint64_t t = atomic_fetch_add(&a->b->total, n - c) + (n - c);
  if (n > c) raise_peak(&a->b->peak, t);
  *kept += n;
  /* a holds less: a waiter of a's (for a to hold nothing) may go on */
  wake_if(a->b, t, a, h);
}

void sl__budget_let_go(sl__budget_acct *a, uint64_t *kept, uint64_t h,
                       bool out) {
  if (h > *kept) h = *kept;
  if (!h) return;
  *kept -= h;
  atomic_fetch_sub(&a->resident, h);
  if (out) { /* resident to held, then its carry: the total stays */
    atomic_fetch_add(&a->held, h);
    atomic_fetch_add(&a->carry, h);
    return;
  }
  uint64_t t = atomic_fetch_sub(&a->b->total, h) - h;
  wake_if(a->b, t, NULL, 0);
}

void sl__budget_to_carry(sl__budget_acct *a, uint64_t n) {
  atomic_fetch_add(&a->carry, n);
}

void sl__budget_drop_carry(sl__budget_acct *a) {
  uint64_t c = atomic_exchange(&a->carry, 0);
  sub(a, c);
}

uint64_t sl__budget_claim(sl__budget_acct *a, uint64_t max) {
  sl__budget_acct *d = a->below;
  if (!d || d->b != a->b) return 0;
  uint64_t c = atomic_exchange(&d->carry, 0);
  if (!c) return 0;
  uint64_t moved = c < max ? c : max;
  /* The moved bytes change hands (the total stays); the rest is freed. */
  uint64_t dh = atomic_fetch_sub(&d->held, c) - c;
  uint64_t h = atomic_fetch_add(&a->held, moved) + moved;
  raise_peak(&a->peak, h + atomic_load(&a->resident));
  uint64_t t = c > moved ? atomic_fetch_sub(&a->b->total, c - moved) -
                               (c - moved)
                         : atomic_load(&a->b->total);
  /* d holds less: a waiter of d's (for room while it holds something, or
   * for it to hold nothing) may go on. */
  wake_if(a->b, t, d, dh);
  return moved;
}

uint64_t sl__budget_wakeups(const sl__budget *b) {
  return atomic_load_explicit(&b->wakeups, memory_order_relaxed);
}
