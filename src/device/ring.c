/*
 * ring.c - sl_double_buffer: a copy thread moves batch i+1 into a slot of
 * device (or host) memory while the consumer uses batch i.  One ring
 * implementation runs every copy engine (device.h): the engine owns the
 * memory and the ordering of copies, the ring owns the slots and the
 * protocol below.
 *
 * Slots.  Each of the `nslots` slots is in one state (protected by `mu`):
 *   FREE     nothing refers to its memory: the worker may fill it;
 *   FILLING  the worker is copying a batch into it;
 *   READY    it holds a finished batch, queued in `fifo`;
 *   HELD     its batch was handed out.
 * The fields of a batch are views of its slot through one buffer wrapper,
 * the slot's lease (for an engine whose staging and device memory differ,
 * the LoD offsets stay in host staging behind a second wrapper that holds
 * the first).  The lease's free hook, slot_released, is the only way a slot
 * with a batch built in it becomes FREE again: it runs when the last
 * reference to the slot's memory goes - the consumer releasing the batch, a
 * DLPack deleter, a reset dropping queued batches - on whichever thread
 * drops it.  Nothing is reused on a guess.
 *
 * Worker loop (one thread, started at creation and by each reset):
 *   pull   s = next(up), without the lock (W_PULLING).  SL_EOF or an error
 *          ends the pass: `end_code` (and the error's message, copied
 *          across threads) is set, the consumer woken, the worker exits.
 *   wait   for a FREE slot (W_WAIT_SLOT), or `stop`.
 *   fill   the slot FILLING: engine begin (the staging's last copy is
 *          over), reserve, memcpy of every field into staging at
 *          SL_SLOT_ALIGN offsets and of the LoD offsets after them, upload;
 *          the batch is built on views of the slot; READY, queued, the
 *          consumer woken.
 *   Pulling before waiting keeps upstream's work off the critical path, and
 *   lets the consumer tell "every slot is held" from "not ready yet".
 *
 * Consumer next, under mu:
 *   a batch queued      pop it (HELD), engine acquire, return it;
 *   end_code set        SL_EOF, or the error with its message;
 *   worker W_WAIT_SLOT  it holds a batch but no slot is FREE and none is
 *   and no slot FREE    READY, so the consumer holds them all: SL_ESTATE
 *                       naming the slots, where waiting would deadlock
 *                       (after release_wait_ms, if set, for releases by
 *                       other threads: the worker then fills the freed
 *                       slot and wakes the consumer);
 *   otherwise           wait: the worker is pulling or filling.
 *   So the answer never depends on timing: while the worker pulls, the
 *   consumer waits for it, then gets the batch, the end, or SL_ESTATE.
 *
 * Stop (reset, destroy): set `stop` and wake the worker under mu, then join
 * it (a worker inside upstream's next finishes that call first).  Reset
 * then drops the queued batches (their slots become FREE), clears the end,
 * resets upstream on the consumer's thread and starts a new worker; batches
 * the consumer holds keep their slots HELD until released.  Destroy drops
 * the queued batches, destroys upstream and drops the reader's reference to
 * the ring.
 *
 * Lifetime.  The ring is refcounted: one reference for the reader, one per
 * live lease.  The last one frees the slots' memory, the engine and the
 * ring, on whichever thread drops it: batches may outlive the reader.
 *
 * Protected by mu: slots[].state, slots[].batch, fifo/head/len, ws, stop,
 *   end_code, end_msg.
 * Worker only (consumer only while no worker runs; create and join order
 *   the two): up, and slots[].mem of the slot being filled.
 * Read-only once published: slots[].mem of a READY or HELD slot, eng,
 *   nslots, release_wait_ms, device.
 */
#include "device/device.h"
#include "stages/state.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define STAGE "double_buffer"
#define MAX_SLOTS 256u
#define LOD_ALIGN 64

typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD } slot_state;
typedef enum { W_IDLE, W_PULLING, W_WAIT_SLOT, W_FILLING, W_DONE } wstate;

typedef struct ring ring;

typedef struct slot {
  ring *r;
  uint32_t index;
  slot_state state;
  sl_sample *batch; /* READY: the queued batch (the ring's reference) */
  sl__slot_mem mem;
} slot;

struct ring {
  sl__refcnt refs;
  pthread_mutex_t mu;
  pthread_cond_t worker_cv;   /* a slot became FREE, or stop */
  pthread_cond_t consumer_cv; /* a batch queued, the end, or W_WAIT_SLOT */
  sl__engine *eng;
  char device[32]; /* "cpu", "cuda:0": for messages */
  uint32_t nslots;
  uint32_t release_wait_ms;
  slot *slots;
  uint32_t *fifo; /* indices of READY slots, oldest at head */
  uint32_t head, len;
  wstate ws;
  bool stop;
  int end_code; /* SL_EOF or the error, once ws == W_DONE */
  char *end_msg;
};

typedef struct dbuf_state {
  ring *r;
  sl_reader *up;
  pthread_t thread;
  bool running;             /* started, not yet joined (consumer only) */
  sl__stage_counters stats; /* busy: filling slots; wait_down: no free slot */
  /* Held by the worker around each upstream pull, and by a save, so that
   * the chain below is still while it is saved (readers/state.h). */
  pthread_mutex_t pulling;
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
  sl__free(r->fifo);
  sl__free(r->end_msg);
  pthread_cond_destroy(&r->worker_cv);
  pthread_cond_destroy(&r->consumer_cv);
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
  (void)data;
  r->eng->ops->release(r->eng, &sl->mem);
  pthread_mutex_lock(&r->mu);
  assert(sl->state != SLOT_FREE && !sl->batch);
  sl->state = SLOT_FREE;
  pthread_cond_signal(&r->worker_cv);
  pthread_mutex_unlock(&r->mu);
  ring_unref(r);
}

/* The LoD wrapper of a split engine holds the lease. */
static void lease_chain_released(void *ud, void *data) {
  (void)data;
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
  const sl__engine *e = r->eng;
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
  const sl__engine_ops *ops = r->eng->ops;
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

/* --- the worker
 * ----------------------------------------------------------------
 */

/* Ends the pass with `code` (SL_EOF or an error whose message is this
 * thread's detail). */
static void end_pass(ring *r, int code) {
  char *msg = code == SL_EOF ? NULL : sl__error_dup();
  pthread_mutex_lock(&r->mu);
  r->end_code = code;
  sl__free(r->end_msg);
  r->end_msg = msg;
  r->ws = W_DONE;
  pthread_cond_signal(&r->consumer_cv);
  pthread_mutex_unlock(&r->mu);
}

static slot *find_free(ring *r) {
  for (uint32_t i = 0; i < r->nslots; i++)
    if (r->slots[i].state == SLOT_FREE) return &r->slots[i];
  return NULL;
}

static void *worker_main(void *arg) {
  dbuf_state *p = arg;
  ring *r = p->r;
  int rc = r->eng->ops->thread_init(r->eng);
  if (rc != SL_OK) {
    sl_wrap_error(rc, STAGE ": copy thread");
    end_pass(r, rc);
    return NULL;
  }
  for (;;) {
    pthread_mutex_lock(&r->mu);
    bool stop = r->stop;
    if (!stop) r->ws = W_PULLING;
    pthread_mutex_unlock(&r->mu);
    if (stop) break;

    sl_sample *in = NULL;
    pthread_mutex_lock(&p->pulling);
    rc = sl_reader_next(p->up, &in);
    pthread_mutex_unlock(&p->pulling);
    if (rc == SL_OK) rc = check_host_fields(in);
    if (rc != SL_OK) {
      sl_sample_release(in);
      end_pass(r, rc); /* EOF, or upstream's error with its message */
      break;
    }

    uint64_t t0 = sl__stat_start();
    pthread_mutex_lock(&r->mu);
    slot *sl = NULL;
    while (!r->stop && !(sl = find_free(r))) {
      if (r->ws != W_WAIT_SLOT) {
        r->ws = W_WAIT_SLOT;
        pthread_cond_signal(&r->consumer_cv);
      }
      pthread_cond_wait(&r->worker_cv, &r->mu);
    }
    if (r->stop) {
      pthread_mutex_unlock(&r->mu);
      sl_sample_release(in);
      break;
    }
    sl->state = SLOT_FILLING;
    r->ws = W_FILLING;
    pthread_mutex_unlock(&r->mu);
    sl__stat_since(&p->stats.wait_down_ns, t0);

    sl_sample *b = NULL;
    bool leased = false;
    t0 = sl__stat_start();
    rc = fill(r, sl, in, &b, &leased);
    sl__stat_since(&p->stats.busy_ns, t0);
    sl_sample_release(in);
    if (rc != SL_OK) {
      sl_wrap_error(rc, STAGE ": slot %u (%s)", sl->index, r->device);
      if (!leased) {
        pthread_mutex_lock(&r->mu);
        sl->state = SLOT_FREE;
        pthread_mutex_unlock(&r->mu);
      }
      end_pass(r, rc);
      break;
    }
    pthread_mutex_lock(&r->mu);
    sl->state = SLOT_READY;
    sl->batch = b;
    r->fifo[(r->head + r->len) % r->nslots] = sl->index;
    r->len++;
    pthread_cond_signal(&r->consumer_cv);
    pthread_mutex_unlock(&r->mu);
  }
  return NULL;
}

static int start_worker(dbuf_state *p) {
  SL_FORWARD_IF_ERROR(
      sl__thread_start(&p->thread, STAGE, "sl-dbuf", worker_main, p));
  p->running = true;
  return SL_OK;
}

static void stop_worker(dbuf_state *p) {
  if (!p->running) return;
  ring *r = p->r;
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_cond_signal(&r->worker_cv);
  pthread_mutex_unlock(&r->mu);
  pthread_join(p->thread, NULL);
  p->running = false;
}

/* Releases the queued batches (their slots become FREE through their
 * leases).  No worker runs. */
static void drop_queued(ring *r) {
  for (;;) {
    pthread_mutex_lock(&r->mu);
    if (r->len == 0) {
      pthread_mutex_unlock(&r->mu);
      return;
    }
    slot *sl = &r->slots[r->fifo[r->head]];
    r->head = (r->head + 1) % r->nslots;
    r->len--;
    sl_sample *b = sl->batch;
    sl->batch = NULL;
    pthread_mutex_unlock(&r->mu);
    sl_sample_release(b); /* takes mu in slot_released */
  }
}

/* --- the reader
 * ------------------------------------------------------------------
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

static int dbuf_next(void *st, sl_sample **out) {
  dbuf_state *p = st;
  ring *r = p->r;
  struct timespec deadline;
  bool deadline_set = false;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    if (r->len) {
      slot *sl = &r->slots[r->fifo[r->head]];
      r->head = (r->head + 1) % r->nslots;
      r->len--;
      sl->state = SLOT_HELD;
      sl_sample *b = sl->batch;
      sl->batch = NULL;
      pthread_mutex_unlock(&r->mu);
      int rc = r->eng->ops->acquire(r->eng, &sl->mem);
      if (rc != SL_OK) {
        sl_sample_release(b);
        return sl_wrap_error(rc, STAGE ": slot %u", sl->index);
      }
      *out = b;
      return SL_OK;
    }
    if (r->ws == W_DONE) {
      int code = r->end_code;
      if (code != SL_EOF)
        sl_set_error(code, "%s", r->end_msg ? r->end_msg : sl_strerror(code));
      pthread_mutex_unlock(&r->mu);
      return code;
    }
    /* A slot released since the worker began to wait is FREE: the worker
     * will fill it, so wait for that rather than report. */
    if (r->ws == W_WAIT_SLOT && !find_free(r)) {
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
      if (!deadline_set || pthread_cond_timedwait(&r->consumer_cv, &r->mu,
                                                  &deadline) == ETIMEDOUT) {
        bool still = r->ws == W_WAIT_SLOT && !find_free(r) && !r->len;
        if (still) {
          pthread_mutex_unlock(&r->mu);
          return held_error(r);
        }
      }
      continue;
    }
    pthread_cond_wait(&r->consumer_cv, &r->mu);
  }
}

/* Stop signal (readers/reader_impl.h): the worker leaves at its next
 * check; one waiting for a slot wakes at once. */
static void dbuf_signal_stop(void *st) {
  ring *r = ((dbuf_state *)st)->r;
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_cond_signal(&r->worker_cv);
  pthread_mutex_unlock(&r->mu);
}

/* Stops the worker and drops the queued batches and the pass's end, for a
 * reset or a restore of upstream.  Batches the consumer holds keep their
 * slots. */
static void rewind_ring(dbuf_state *p) {
  ring *r = p->r;
  stop_worker(p);
  drop_queued(r);
  pthread_mutex_lock(&r->mu);
  r->stop = false;
  r->ws = W_IDLE;
  r->end_code = SL_OK;
  sl__free(r->end_msg);
  r->end_msg = NULL;
  pthread_mutex_unlock(&r->mu);
}

static int dbuf_reset(void *st) {
  dbuf_state *p = st;
  rewind_ring(p);
  SL_FORWARD_IF_ERROR(sl_reader_reset(p->up));
  return start_worker(p);
}

/* The batches queued in slots are not saved: the restored upstream yields
 * them again (one more copy each). */
static int dbuf_save(sl_reader *rd, void *st, uint64_t pass, uint64_t k,
                     sl__state_out *w) {
  (void)rd;
  (void)pass;
  dbuf_state *p = st;
  pthread_mutex_lock(&p->pulling);
  int rc = sl__state_save_up(w, p->up, sl__reader_pass(p->up), k);
  pthread_mutex_unlock(&p->pulling);
  return rc;
}

static int dbuf_restore(sl_reader *rd, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  (void)rd;
  (void)pass;
  (void)k;
  dbuf_state *p = st;
  rewind_ring(p);
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, p->up));
  return start_worker(p);
}

static const sl__state_ops dbuf_state_ops = {dbuf_save, dbuf_restore, NULL};

static void dbuf_destroy(void *st) {
  dbuf_state *p = st;
  if (!p) return;
  stop_worker(p);
  if (p->r) drop_queued(p->r);
  sl_reader_destroy(p->up);
  ring_unref(p->r);
  pthread_mutex_destroy(&p->pulling);
  sl__free(p);
}

static const sl_reader_vtable dbuf_vt = {STAGE, dbuf_next, dbuf_reset,
                                         dbuf_destroy};

static int ring_new(const sl_double_buffer_opts *o, ring **out) {
  ring *r = sl__calloc(1, sizeof *r);
  SL_RETURN_ERROR_IF(!r, SL_ENOMEM, STAGE ": cannot allocate");
  sl__ref_init(&r->refs);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->worker_cv, NULL);
  /* The consumer's timed wait (release_wait_ms) runs on the monotonic
   * clock, immune to changes of the wall clock. */
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->consumer_cv, &ca);
  pthread_condattr_destroy(&ca);
  r->nslots = o->slots;
  r->release_wait_ms = o->release_wait_ms;
  r->ws = W_IDLE;
  r->slots = sl__calloc(o->slots, sizeof *r->slots);
  r->fifo = sl__calloc(o->slots, sizeof *r->fifo);
  if (!r->slots || !r->fifo) {
    ring_free(r);
    return sl_set_error(SL_ENOMEM, STAGE ": cannot allocate %u slots",
                        o->slots);
  }
  for (uint32_t i = 0; i < o->slots; i++) {
    r->slots[i].r = r;
    r->slots[i].index = i;
    r->slots[i].state = SLOT_FREE;
  }
  int rc = sl__engine_open(STAGE, o->device, o->stream, &r->eng);
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
  p->stats.threads = 1;
  pthread_mutex_init(&p->pulling, NULL);
  /* The schema is frozen and refcounted atomically, so retaining it through
   * the const accessor is safe. */
  SL_FORWARD_IF_ERROR(sl__decorator_make_1to1(
      &dbuf_vt, p, (sl_schema *)sl_reader_schema(up), &p->up, &p->stats, out));
  sl__reader_set_state_ops(*out, &dbuf_state_ops);
  sl__reader_set_stop_signal(*out, dbuf_signal_stop);
  rc = start_worker(p);
  if (rc != SL_OK) {
    sl_reader_destroy(*out); /* destroys up too: we own it */
    *out = NULL;
    return rc;
  }
  return SL_OK;
}
