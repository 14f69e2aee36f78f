/*
 * ring.c - sl_double_buffer: a copy thread moves batch i+1 into a slot of
 * device (or host) memory while the consumer uses batch i.  The copy thread
 * is the parallel-stage engine (sync/engine.c) with one worker, ordered,
 * one item per turn, whose thread setup (sl__engine_on_thread) is the copy
 * engine's thread_init (device.h: the CUDA device made current); the copy
 * engine owns the memory and the ordering of copies, the ring the slots.
 *
 * Slots.  Each of the `nslots` slots is in one state (protected by `mu`):
 *   FREE     nothing refers to its memory: the worker may fill it;
 *   FILLING  the worker is copying a batch into it;
 *   READY    it holds a finished batch (item `seq`), on its way through the
 *            engine to the consumer;
 *   HELD     its batch was handed out.
 * The fields of a batch are views of its slot through one buffer wrapper,
 * the slot's lease (for a copy engine whose staging and device memory
 * differ, the LoD offsets stay in host staging behind a second wrapper that
 * holds the first).  The lease's free hook, slot_released, is the only way
 * a slot with a batch built in it becomes FREE again: it runs when the last
 * reference to the slot's memory goes - the consumer releasing the batch, a
 * DLPack deleter, the engine dropping results at a reset - on whichever
 * thread drops it.  Nothing is reused on a guess.
 *
 * The engine's callbacks:
 *   pull     next(up), and every field readable by the host; an end (EOF or
 *            an error) sets `ended`.
 *   process  waits for a FREE slot (`in_hand` while it waits: the worker
 *            holds a batch and no slot; the wait is the stage's wait_down),
 *            or the engine's stop; then FILLING: copy engine begin (the
 *            staging's last copy is over), reserve, memcpy of every field
 *            into staging at SL_SLOT_ALIGN offsets and of the LoD offsets
 *            after them, upload; the batch is built on views of the slot;
 *            READY, returned unchecked.  The window is nslots + 1 items: the
 *            worker pulls the next batch before it waits for a slot, which
 *            keeps upstream's work off the critical path.
 *   check    (consumer, the batch handed out) HELD, copy engine acquire.
 *
 * Consumer next, under mu, before the engine's next:
 *   a slot not HELD, or `ended`   the engine's next: a slot READY or being
 *                       filled gives the next batch, a FREE one is the
 *                       worker's to fill (or the pass ends);
 *   every slot HELD and `in_hand`  the consumer holds them all: SL_ESTATE
 *                       naming the slots, where waiting would deadlock
 *                       (after release_wait_ms, if set, for releases by
 *                       other threads);
 *   otherwise           wait: the worker is pulling; it ends the pass or
 *                       takes a batch in hand, and says so.
 *   So the answer never depends on timing: while the worker pulls, the
 *   consumer waits for it, then gets the batch, the end, or SL_ESTATE.
 *   `cv` is broadcast on every change either side waits for: a slot FREE,
 *   in_hand, ended, a stop.
 *
 * Stop (reset, restore, destroy): the engine's stop signal, and `cv`
 * broadcast under mu (a worker waiting for a slot sees the stop), then the
 * engine's stop (join; the results not delivered are released, so their
 * slots become FREE).  Batches the consumer holds keep their slots HELD
 * until released.
 *
 * Memory budget.  The slots' host memory (the host engine's slots; a CUDA
 * engine's pinned staging) is the stage's resident charge: the worker
 * moves it to the slots' capacity after each fill (charge_slots), and the
 * destroy releases it once the worker is joined (slots that outlive the
 * reader in batches still out are no longer counted).  A CUDA engine's
 * device memory is not the host's: not charged.  The batches themselves
 * are views of the slots (not charged again); the batch in hand is its
 * upstream's carry until the worker's next pull.
 *
 * Lifetime.  The ring is refcounted: one reference for the reader, one per
 * live lease.  The last one frees the slots' memory, the copy engine and
 * the ring, on whichever thread drops it: batches may outlive the reader.
 *
 * Protected by mu: slots[].state, slots[].seq, in_hand, ended.
 * The worker's (the consumer's while the engine is stopped): up, and
 *   slots[].mem of the slot being filled.
 * Read-only once published: slots[].mem of a READY or HELD slot, eng,
 *   nslots, release_wait_ms, device.
 */
#include "device/device.h"
#include "stages/stage.h"
#include "sync/engine.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define STAGE "double_buffer"
#define MAX_SLOTS 256u
#define LOD_ALIGN 64

typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD } slot_state;

typedef struct ring ring;

typedef struct slot {
  ring *r;
  uint32_t index;
  slot_state state;
  uint64_t seq; /* READY: the engine's item in it */
  sl__slot_mem mem;
} slot;

struct ring {
  sl__refcnt refs;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a slot FREE, in_hand, ended, or a stop */
  sl__copy_engine *eng;
  char device[32]; /* "cpu", "cuda:0": for messages */
  uint32_t nslots;
  uint32_t release_wait_ms;
  slot *slots;
  bool in_hand; /* the worker holds a batch and waits for a slot */
  bool ended;   /* the pass's pull ended (EOF or an error) */
};

typedef struct dbuf_state {
  ring *r;
  sl_reader *up;
  sl__engine *engine;
  /* the memory budget: the account (set while the worker runs, so atomic)
   * and the slots' bytes charged to it (the worker's; the destroyer's once
   * it is joined) */
  sl__budget_acct *_Atomic acct;
  uint64_t charged;
} dbuf_state;

/* --- the ring's lifetime ---------------------------------------------------
 */

static void ring_free(ring *r) {
  for (uint32_t i = 0; r->slots && i < r->nslots; i++) {
    sl__slot_mem *m = &r->slots[i].mem;
    if (m->host || m->dev || m->priv) r->eng->ops->free_slot(r->eng, m);
  }
  if (r->eng) r->eng->ops->destroy(r->eng);
  sl__free(r->slots);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  sl__free(r);
}

static void ring_unref(ring *r) {
  if (r && sl__ref_dec(&r->refs)) ring_free(r);
}

/* The lease's free hook: the last reference to the slot's memory is gone. */
static void slot_released(void *ud, void *data) {
  slot *sl = ud;
  ring *r = sl->r;
  r->eng->ops->release(r->eng, &sl->mem);
  pthread_mutex_lock(&r->mu);
  assert(sl->state != SLOT_FREE);
  sl->state = SLOT_FREE;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  ring_unref(r);
}

/* The LoD wrapper of a split engine holds the lease. */
static void lease_chain_released(void *ud, void *data) {
  sl_buffer_release(ud);
}

/* --- filling a slot (worker) -------------------------------------------------
 */

static size_t align_up(size_t n, size_t a) {
  return (n + a - 1) & ~(a - 1);
}

/* Every field must be readable by the host to be copied. */
static int check_host_fields(const sl_sample *in) {
  int n = sl_sample_nfields(in);
  for (int i = 0; i < n; i++) {
    int id;
    sl_device_type d = sl_tensor_device(sl_sample_at_const(in, i), &id);
    if (d == SL_DEVICE_CPU || d == SL_DEVICE_CUDA_HOST) continue;
    char dn[32];
    return sl_set_error(
        SL_EINVAL,
        STAGE ": field '%s' of the batch is in %s memory: the double buffer "
              "copies batches from host memory",
        sl_schema_field_name(sl_sample_schema(in), i),
        sl_device_describe(d, id, dn, sizeof dn));
  }
  return SL_OK;
}

/* The slot layout of `in`: field data at SL_SLOT_ALIGN offsets from 0 up to
 * *data_end (what is copied to the device), then each field's LoD offsets at
 * LOD_ALIGN offsets up to *total.  SL_ENOMEM on overflow. */
static int layout(const sl_sample *in, size_t *data_end, size_t *total) {
  const size_t big = SIZE_MAX / 4; /* far beyond memory; keeps sums exact */
  size_t off = 0;
  int n = sl_sample_nfields(in);
  for (int i = 0; i < n; i++) {
    const sl_tensor *t = sl_sample_at_const(in, i);
    SL_RETURN_ERROR_IF(t->nbytes > big || off > big, SL_ENOMEM,
                       STAGE ": a batch of more than %zu bytes", big);
    off = align_up(off, SL_SLOT_ALIGN) + t->nbytes;
  }
  *data_end = off;
  off = align_up(off, LOD_ALIGN);
  for (int i = 0; i < n; i++) {
    const sl_tensor *t = sl_sample_at_const(in, i);
    if (!t->lod) continue;
    size_t lb = (size_t)t->lod_len * sizeof(int64_t);
    SL_RETURN_ERROR_IF(lb > big || off > big, SL_ENOMEM,
                       STAGE ": a batch of more than %zu bytes", big);
    off += align_up(lb, LOD_ALIGN);
  }
  *total = off;
  return SL_OK;
}

/* Builds the batch on views of the slot's memory through a new lease.
 * *leased tells whether the lease was made: from then on the slot becomes
 * FREE through slot_released, also when this fails. */
static int build_batch(ring *r, slot *sl, const sl_sample *in, size_t data_end,
                       size_t total, sl_sample **out, bool *leased) {
  const sl__copy_engine *e = r->eng;
  sl_buffer *dev =
      sl_buffer_wrap_device(sl->mem.dev, e->same ? total : data_end, e->type,
                            e->device_id, slot_released, sl);
  if (!dev) return sl_last_error_code();
  sl__ref_inc(&r->refs); /* the lease's */
  *leased = true;
  int rc = SL_OK;
  sl_buffer *lodb = NULL;
  sl_sample *b = NULL;
  int n = sl_sample_nfields(in);
  bool ragged = false;
  for (int i = 0; i < n; i++)
    ragged = ragged || sl_sample_at_const(in, i)->lod;
  if (ragged) {
    if (e->same) {
      lodb = sl_buffer_retain(dev);
    } else {
      lodb = sl_buffer_wrap_device(sl->mem.host, total, SL_DEVICE_CUDA_HOST, 0,
                                   lease_chain_released, dev);
      if (!lodb) {
        rc = sl_last_error_code();
        goto done;
      }
      sl_buffer_retain(dev); /* lodb's */
    }
  }
  /* The schema is frozen and refcounted atomically: retaining it through
   * the const accessor is safe. */
  b = sl_sample_new((sl_schema *)sl_sample_schema(in));
  if (!b) {
    rc = sl_last_error_code();
    goto done;
  }
  size_t off = 0, lod_off = align_up(data_end, LOD_ALIGN);
  for (int i = 0; i < n && rc == SL_OK; i++) {
    const sl_tensor *t = sl_sample_at_const(in, i);
    off = align_up(off, SL_SLOT_ALIGN);
    sl_tensor v;
    rc = sl_tensor_view(&v, t->dtype, t->rank, t->shape, dev, off);
    if (rc != SL_OK) break;
    off += t->nbytes;
    if (t->lod) {
      rc = sl_tensor_set_lod(&v, lodb,
                             (const int64_t *)((char *)sl->mem.host + lod_off),
                             t->lod_len);
      lod_off += align_up((size_t)t->lod_len * sizeof(int64_t), LOD_ALIGN);
    }
    if (rc == SL_OK) rc = sl_sample_set_move(b, i, &v);
    if (rc != SL_OK) sl_tensor_clear(&v);
  }
done:
  if (rc != SL_OK) {
    sl_sample_release(b);
    b = NULL;
  }
  sl_buffer_release(lodb);
  sl_buffer_release(dev); /* the batch's views hold their own references */
  *out = b;
  return rc;
}

/* Copies `in` into slot `sl` (FILLING) and builds the batch on it. */
static int fill(ring *r, slot *sl, const sl_sample *in, sl_sample **out,
                bool *leased) {
  const sl__copy_ops *ops = r->eng->ops;
  size_t data_end = 0, total = 0;
  SL_FORWARD_IF_ERROR(layout(in, &data_end, &total));
  SL_FORWARD_IF_ERROR(ops->begin(r->eng, &sl->mem));
  SL_FORWARD_IF_ERROR(ops->reserve(r->eng, &sl->mem, total, data_end));
  char *host = sl->mem.host;
  size_t off = 0, lod_off = align_up(data_end, LOD_ALIGN);
  int n = sl_sample_nfields(in);
  for (int i = 0; i < n; i++) {
    const sl_tensor *t = sl_sample_at_const(in, i);
    off = align_up(off, SL_SLOT_ALIGN);
    if (t->nbytes) memcpy(host + off, t->data, t->nbytes);
    off += t->nbytes;
    if (t->lod) {
      size_t lb = (size_t)t->lod_len * sizeof(int64_t);
      memcpy(host + lod_off, t->lod, lb);
      lod_off += align_up(lb, LOD_ALIGN);
    }
  }
  SL_FORWARD_IF_ERROR(ops->upload(r->eng, &sl->mem, data_end));
  return build_batch(r, sl, in, data_end, total, out, leased);
}

/* The account's resident charge becomes the slots' host capacity (the
 * worker: it alone grows a slot). */
static void charge_slots(dbuf_state *p) {
  sl__budget_acct *a = atomic_load_explicit(&p->acct, memory_order_acquire);
  if (!a) return;
  uint64_t want = 0;
  for (uint32_t i = 0; i < p->r->nslots; i++)
    want += p->r->slots[i].mem.host_cap;
  if (want == p->charged) return;
  sl__budget_resident(a, p->charged, want);
  p->charged = want;
}

/* --- the engine's callbacks ------------------------------------------------
 */

/* Says that the pass's pull ended (its end is then the consumer's next). */
static void set_ended(ring *r) {
  pthread_mutex_lock(&r->mu);
  r->ended = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* The copy thread's setup: the copy engine's device current on it. */
static int dbuf_thread(void *ud, int worker) {
  ring *r = ((dbuf_state *)ud)->r;
  int rc = r->eng->ops->thread_init(r->eng);
  if (rc == SL_OK) return SL_OK;
  rc = sl_wrap_error(rc, STAGE ": copy thread");
  set_ended(r);
  return rc;
}

static int dbuf_pull(void *ud, sl_sample **out) {
  dbuf_state *p = ud;
  int rc = sl_reader_next(p->up, out);
  if (rc == SL_OK) rc = check_host_fields(*out);
  if (rc == SL_OK) return SL_OK;
  if (rc != SL_EOF) {
    sl_sample_release(*out);
    *out = NULL;
  }
  set_ended(p->r); /* EOF, or upstream's error with its message */
  return rc;
}

static slot *find_free(ring *r) {
  for (uint32_t i = 0; i < r->nslots; i++)
    if (r->slots[i].state == SLOT_FREE) return &r->slots[i];
  return NULL;
}

static int dbuf_process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                        sl_sample **out) {
  dbuf_state *p = ud;
  ring *r = p->r;
  const atomic_bool *stop = sl__engine_stop_flag(p->engine);
  uint64_t t0 = sl__stat_start();
  pthread_mutex_lock(&r->mu);
  slot *sl = NULL;
  while (!atomic_load(stop) && !(sl = find_free(r))) {
    if (!r->in_hand) {
      r->in_hand = true;
      pthread_cond_broadcast(&r->cv);
    }
    pthread_cond_wait(&r->cv, &r->mu);
  }
  r->in_hand = false;
  if (sl) sl->state = SLOT_FILLING;
  pthread_mutex_unlock(&r->mu);
  sl__engine_note_wait(p->engine, t0);
  if (!sl) { /* stopping: the result would never be delivered */
    sl_sample_release(in);
    return SL__ENGINE_DROP;
  }
  bool leased = false;
  int rc = fill(r, sl, in, out, &leased);
  sl_sample_release(in);
  charge_slots(p); /* a slot may have grown */
  pthread_mutex_lock(&r->mu);
  if (rc == SL_OK) {
    sl->state = SLOT_READY;
    sl->seq = seq;
  } else if (!leased) {
    sl->state = SLOT_FREE;
  }
  pthread_mutex_unlock(&r->mu);
  if (rc != SL_OK)
    return sl_wrap_error(rc, STAGE ": slot %u (%s)", sl->index, r->device);
  return SL__ENGINE_UNCHECKED;
}

/* The batch of item `seq` handed out: its slot HELD, the consumer's work
 * ordered after the copy. */
static int dbuf_check(void *ud, uint64_t seq, const sl_sample *s) {
  ring *r = ((dbuf_state *)ud)->r;
  slot *sl = NULL;
  pthread_mutex_lock(&r->mu);
  for (uint32_t i = 0; i < r->nslots && !sl; i++)
    if (r->slots[i].state == SLOT_READY && r->slots[i].seq == seq)
      sl = &r->slots[i];
  assert(sl);
  sl->state = SLOT_HELD;
  pthread_mutex_unlock(&r->mu);
  int rc = r->eng->ops->acquire(r->eng, &sl->mem);
  return rc == SL_OK ? SL_OK : sl_wrap_error(rc, STAGE ": slot %u", sl->index);
}

static const sl__engine_ops dbuf_engine_ops = {
    .pull = dbuf_pull, .process = dbuf_process, .check = dbuf_check};

/* --- the reader --------------------------------------------------------------
 */

static int held_error(const ring *r) {
  char waited[48] = "";
  if (r->release_wait_ms)
    snprintf(waited, sizeof waited, " (for %u ms)", r->release_wait_ms);
  return sl_set_error(
      SL_ESTATE,
      STAGE ": the consumer holds all %u slot%s (%s)%s: each batch not yet "
            "released, and each DLPack export or tensor taken from one, "
            "keeps its slot; release a batch before asking for the next, or "
            "give the double buffer more slots",
      r->nslots, r->nslots == 1 ? "" : "s", r->device, waited);
}

static bool all_held(const ring *r) {
  for (uint32_t i = 0; i < r->nslots; i++)
    if (r->slots[i].state != SLOT_HELD) return false;
  return true;
}

static int dbuf_next(void *st, sl_sample **out) {
  dbuf_state *p = st;
  ring *r = p->r;
  const atomic_bool *stop = sl__engine_stop_flag(p->engine);
  struct timespec deadline;
  bool deadline_set = false, held = false;
  pthread_mutex_lock(&r->mu);
  while (all_held(r) && !r->ended && !atomic_load(stop)) {
    if (!r->in_hand) { /* the worker pulls: wait for what it finds */
      pthread_cond_wait(&r->cv, &r->mu);
      continue;
    }
    if (!deadline_set && r->release_wait_ms) {
      clock_gettime(CLOCK_MONOTONIC, &deadline);
      deadline.tv_sec += r->release_wait_ms / 1000;
      deadline.tv_nsec += (long)(r->release_wait_ms % 1000) * 1000000L;
      if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
      }
      deadline_set = true;
    }
    if (!deadline_set ||
        pthread_cond_timedwait(&r->cv, &r->mu, &deadline) == ETIMEDOUT) {
      held = all_held(r) && r->in_hand;
      if (held) break;
    }
  }
  pthread_mutex_unlock(&r->mu);
  if (held) return held_error(r);
  return sl__engine_next(p->engine, out);
}

/* Stop signal (stages/reader_impl.h): the worker leaves at its next
 * check; one waiting for a slot, and a consumer waiting, wake at once. */
static void dbuf_signal_stop(void *st) {
  dbuf_state *p = st;
  sl__engine_signal_stop(p->engine);
  pthread_mutex_lock(&p->r->mu);
  pthread_cond_broadcast(&p->r->cv);
  pthread_mutex_unlock(&p->r->mu);
}

/* Stops the worker and drops the batches not handed out, for a reset or a
 * restore of upstream.  Batches the consumer holds keep their slots. */
static void rewind_ring(dbuf_state *p) {
  dbuf_signal_stop(p);
  sl__engine_stop(p->engine);
  pthread_mutex_lock(&p->r->mu);
  p->r->ended = p->r->in_hand = false;
  pthread_mutex_unlock(&p->r->mu);
}

static int dbuf_reset(void *st) {
  dbuf_state *p = st;
  rewind_ring(p);
  SL_FORWARD_IF_ERROR(sl_reader_reset(p->up));
  return sl__engine_start(p->engine);
}

/* The batches in slots not handed out are not saved: the restored upstream
 * yields them again (one more copy each). */
static int dbuf_save(sl_reader *rd, void *st, uint64_t pass, uint64_t k,
                     sl__state_out *w) {
  dbuf_state *p = st;
  sl__engine_hold_pulls(p->engine);
  int rc = sl__state_save_up(w, p->up, sl__state_up_pass(rd, p->up, pass), k);
  sl__engine_release_pulls(p->engine);
  return rc;
}

static int dbuf_restore(sl_reader *rd, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  dbuf_state *p = st;
  rewind_ring(p);
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, p->up));
  return sl__engine_start(p->engine);
}

static void dbuf_destroy(void *st) {
  dbuf_state *p = st;
  if (!p) return;
  if (p->engine) dbuf_signal_stop(p);
  sl__engine_destroy(p->engine);
  sl__budget_acct *a = atomic_load_explicit(&p->acct, memory_order_acquire);
  if (a && p->charged) sl__budget_resident(a, p->charged, 0);
  sl_reader_destroy(p->up);
  ring_unref(p->r);
  sl__free(p);
}

/* The memory budget: the slots' host memory, resident (see the top). */
static void dbuf_budget(void *st, sl__budget_acct *acct) {
  atomic_store_explicit(&((dbuf_state *)st)->acct, acct, memory_order_release);
}

static const sl__stage_ops dbuf_ops = {
    .name = STAGE,
    .budget = dbuf_budget,
    .next = dbuf_next,
    .reset = dbuf_reset,
    .destroy = dbuf_destroy,
    .length = sl__length_of_upstream,
    .save = dbuf_save,
    .restore = dbuf_restore,
    .stop = dbuf_signal_stop,
};

static int ring_new(const sl_double_buffer_opts *o, ring **out) {
  ring *r = sl__calloc(1, sizeof *r);
  SL_RETURN_ERROR_IF(!r, SL_ENOMEM, STAGE ": cannot allocate");
  sl__ref_init(&r->refs);
  pthread_mutex_init(&r->mu, NULL);
  /* The consumer's timed wait (release_wait_ms) runs on the monotonic
   * clock, immune to changes of the wall clock. */
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  r->nslots = o->slots;
  r->release_wait_ms = o->release_wait_ms;
  r->slots = sl__calloc(o->slots, sizeof *r->slots);
  if (!r->slots) {
    ring_free(r);
    return sl_set_error(SL_ENOMEM, STAGE ": cannot allocate %u slots",
                        o->slots);
  }
  for (uint32_t i = 0; i < o->slots; i++) {
    r->slots[i].r = r;
    r->slots[i].index = i;
    r->slots[i].state = SLOT_FREE;
  }
  int rc = sl__copy_open(STAGE, o->device, o->stream, &r->eng);
  if (rc != SL_OK) {
    ring_free(r);
    return rc;
  }
  sl_device_describe(r->eng->type, r->eng->device_id, r->device,
                     sizeof r->device);
  *out = r;
  return SL_OK;
}

int sl_double_buffer(sl_reader *up, const sl_double_buffer_opts *opts,
                     sl_reader **out) {
  SL_DECORATOR_ARGS(STAGE, up, out);
  sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
  if (opts) {
    int rc = sl__opts_copy("sl_double_buffer_opts", &o, sizeof o, opts);
    if (rc != SL_OK)
      return sl__fail_with_upstream(up, sl_wrap_error(rc, STAGE));
  }
  if (o.slots < 1 || o.slots > MAX_SLOTS)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, STAGE ": slots must be 1..%u (got %u)",
                         MAX_SLOTS, o.slots));
  ring *r = NULL;
  int rc = ring_new(&o, &r);
  if (rc != SL_OK) return sl__fail_with_upstream(up, rc);
  dbuf_state *p = sl__calloc(1, sizeof *p);
  if (!p) {
    ring_unref(r);
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, STAGE ": cannot allocate"));
  }
  p->r = r;
  p->up = up;
  atomic_init(&p->acct, NULL);
  /* One copy thread, one batch per turn (its process waits for a slot),
   * the window the slots plus the batch pulled ahead, a cache of one. */
  const sl__engine_opts eo = {STAGE, "sl-dbuf", 1, true, (size_t)o.slots + 1};
  rc = sl__engine_create(&dbuf_engine_ops, p, &eo, &p->engine);
  if (rc != SL_OK) {
    dbuf_destroy(p);
    return rc;
  }
  sl__engine_on_thread(p->engine, dbuf_thread);
  sl__engine_set_batch(p->engine, 1);
  sl__engine_set_cache(p->engine, 1);
  SL_FORWARD_IF_ERROR(sl__stage_wrap(&dbuf_ops, p, NULL, &p->up,
                                     sl__engine_counters(p->engine), out));
  rc = sl__engine_start(p->engine);
  if (rc != SL_OK) {
    sl_reader_destroy(*out); /* destroys up too: we own it */
    *out = NULL;
    return rc;
  }
  return SL_OK;
}
