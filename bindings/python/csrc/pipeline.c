/*
 * pipeline.c - sluice.Pipeline: a pipeline script's reader chain, pulled
 * from Python.
 *
 * The puller thread.  sl_reader_next blocks until a batch is there and
 * cannot be interrupted, yet Ctrl-C must reach the trainer promptly.  So
 * every call that may block (next, reset, save, restore, close) runs on a
 * thread of the pipeline's own, the puller, started at the first such call:
 * the Python thread posts the operation and waits for its result with the
 * GIL released, in slices of SLICE_MS, running the signal handlers between
 * slices (PyErr_CheckSignals).  When a handler raises (KeyboardInterrupt),
 * the call returns with that exception and the operation goes on: its
 * result is kept, and the next call collects it (a next interrupted while
 * waiting gives its batch to the following next: no batch is lost or
 * pulled twice).  All pipeline calls are thus made by one thread, one at a
 * time, as sl_pipeline_* asks.
 *
 * The pending batch.  Between an interrupted next and the next that
 * collects its batch, that batch belongs to the caller although the
 * pipeline has handed it out.  Another operation posted meanwhile waits for
 * the next to finish and sets its result aside (`held`) instead of
 * discarding it; then
 *   - state() saves the position before that batch
 *     (sl__reader_save_back, one batch back: restoring it yields that
 *     batch first) and leaves it pending;
 *   - a restore() that is refused (the pipeline left as it was) keeps it;
 *     one that succeeds, and reset(), drop it: they leave its pass.
 * The following next takes a held batch as its own.
 *
 * The protocol (everything below `mu` is protected by it):
 *   op       posted by Python, taken by the puller (OP_NONE: none);
 *   running  the operation the puller is running (OP_NONE: idle);
 *   ready    a finished operation's result (result_op, rc, msg, sample,
 *            state) waits to be collected; posting clears a result that
 *            was not collected (it is discarded), except a next's (held);
 *   held     a pending next's result set aside (held_rc, held_msg,
 *            held_sample); save_back: OP_SAVE saves that many batches back;
 *   closing  the puller closes the pipeline once idle and exits (exited).
 * Closing: close() asks for it and waits for `exited` (interruptible: the
 * puller then finishes on its own, `detached`, and frees the struct).  The
 * object's finaliser waits only when the puller is idle, and detaches it
 * otherwise (a next that never returns must not hang the interpreter).
 *
 * Reading ahead.  Each hand-off through the puller costs two wake-ups
 * (the puller's, then the Python thread's: 30-60 us each), which next
 * would pay per batch.  So when a next's batch came quickly (the puller's
 * sl_reader_next took under AHEAD_NS: the chain had it ready), the Python
 * thread posts the following next before it returns the batch: the puller
 * pulls it while Python works, and the next call usually finds it ready
 * without sleeping.  That batch is exactly an interrupted next's (above):
 * the next call takes it, state() saves one batch back, reset() and a
 * restore() that succeeds drop it, close() discards it.  A slow chain
 * (a next that took longer) is not read ahead, so state() and close()
 * never wait long for a batch nobody asked for.
 *
 * A second Python thread calling into a pipeline another thread is
 * waiting on gets RuntimeError (`busy`, checked under the GIL).
 *
 * Fork.  A child process (multiprocessing, a DataLoader worker) inherits
 * the object but none of the pipeline's threads: there, the object only
 * refuses (ECLOSED) and its finaliser leaves the C side alone - joining
 * threads that do not exist in the child would hang it.
 */
#include "binding.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLICE_MS 50
/* A next that took the puller less than this is followed by a read-ahead
 * (see "Reading ahead" above). */
#define AHEAD_NS 2000000L

PyObject *slpy_PipelineType;

enum { OP_NONE, OP_NEXT, OP_RESET, OP_SAVE, OP_RESTORE };

typedef struct puller {
  pthread_mutex_t mu;
  pthread_cond_t wake; /* to the puller: an op was posted, or closing */
  pthread_cond_t done; /* to Python: an op finished, or exited */
  sl_reader *p;      /* the puller's: closed by it */
  int op;
  int running;
  int ready;
  int result_op;
  int rc;
  char *msg;         /* malloc'd detail when rc < 0 and not SL_EOF */
  sl_sample *sample; /* OP_NEXT's batch */
  void *state;       /* OP_SAVE's state (sl_free) */
  size_t len;        /* OP_SAVE's length */
  void *in;          /* OP_RESTORE's input, a malloc'd copy */
  size_t inlen;
  int held; /* an interrupted next's result, set aside */
  int held_rc;
  char *held_msg;
  sl_sample *held_sample;
  int save_back; /* OP_SAVE: batches back (the held one) */
  long next_ns;  /* the last OP_NEXT's time in sl_reader_next */
  int closing;
  int exited;
  int detached; /* nobody waits: the puller frees the struct */
} puller;

typedef struct {
  PyObject_HEAD sl_reader *p; /* the pipeline (owned by pu once started) */
  puller *pu;                   /* NULL until the first blocking call */
  pthread_t thread;
  int closed;
  int fresh;       /* no batch pulled since open, reset or restore */
  int busy;        /* a Python thread is inside a call */
  pid_t owner;     /* the process that opened it (see fork below) */
  PyObject *names; /* tuple of field names */
  PyObject *index; /* dict name -> position */
} PipelineObject;

/* --- the puller ------------------------------------------------------------
 */

static void result_discard(puller *pu) {
  sl_sample_release(pu->sample);
  pu->sample = NULL;
  sl_free(pu->state);
  pu->state = NULL;
  free(pu->msg);
  pu->msg = NULL;
  pu->ready = 0;
}

static void held_discard(puller *pu) {
  sl_sample_release(pu->held_sample);
  pu->held_sample = NULL;
  free(pu->held_msg);
  pu->held_msg = NULL;
  pu->held = 0;
}

/* Posting an operation other than next: an uncollected next's result is
 * set aside, not discarded (under mu, the puller idle). */
static void hold_next_result(puller *pu) {
  if (!pu->ready || pu->result_op != OP_NEXT) return;
  held_discard(pu);
  pu->held = 1;
  pu->held_rc = pu->rc;
  pu->held_msg = pu->msg;
  pu->held_sample = pu->sample;
  pu->msg = NULL;
  pu->sample = NULL;
  pu->ready = 0;
}

/* The next takes the held result as its own (under mu, the puller idle). */
static void take_held(puller *pu) {
  result_discard(pu);
  pu->result_op = OP_NEXT;
  pu->rc = pu->held_rc;
  pu->msg = pu->held_msg;
  pu->sample = pu->held_sample;
  pu->held_msg = NULL;
  pu->held_sample = NULL;
  pu->held = 0;
  pu->ready = 1;
}

static void puller_free(puller *pu) {
  result_discard(pu);
  held_discard(pu);
  free(pu->in);
  pthread_mutex_destroy(&pu->mu);
  pthread_cond_destroy(&pu->wake);
  pthread_cond_destroy(&pu->done);
  free(pu);
}

static void *puller_main(void *arg) {
  puller *pu = arg;
  pthread_mutex_lock(&pu->mu);
  for (;;) {
    while (pu->op == OP_NONE && !pu->closing)
      pthread_cond_wait(&pu->wake, &pu->mu);
    if (pu->op == OP_NONE) break; /* closing, idle */
    int op = pu->op;
    pu->op = OP_NONE;
    pu->running = op;
    pthread_mutex_unlock(&pu->mu);

    sl_sample *s = NULL;
    void *state = NULL;
    size_t len = 0;
    int rc;
    switch (op) {
    case OP_NEXT: {
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      rc = sl_reader_next(pu->p, &s);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      pu->next_ns = (long)(t1.tv_sec - t0.tv_sec) * 1000000000L +
                    (t1.tv_nsec - t0.tv_nsec);
      break;
    }
    case OP_RESET:
      rc = sl_reader_reset(pu->p);
      break;
    case OP_SAVE:
      rc = sl__reader_save_back(pu->p, (uint64_t)pu->save_back, &state, &len);
      break;
    default:
      rc = sl_reader_restore(pu->p, pu->in, pu->inlen);
      break;
    }
    char *msg = rc < 0 && rc != SL_EOF ? strdup(sl_last_error()) : NULL;

    pthread_mutex_lock(&pu->mu);
    free(pu->in);
    pu->in = NULL;
    pu->running = OP_NONE;
    if (op == OP_RESTORE && rc == SL_OK)
      held_discard(pu); /* the restore left the held batch's pass */
    pu->result_op = op;
    pu->rc = rc;
    pu->msg = msg;
    pu->sample = s;
    pu->state = state;
    pu->len = len;
    pu->ready = 1;
    pthread_cond_broadcast(&pu->done);
  }
  pthread_mutex_unlock(&pu->mu);

  sl_reader_destroy(pu->p); /* joins the chain's threads */

  pthread_mutex_lock(&pu->mu);
  pu->p = NULL;
  pu->exited = 1;
  int detached = pu->detached;
  pthread_cond_broadcast(&pu->done);
  pthread_mutex_unlock(&pu->mu);
  if (detached) puller_free(pu);
  return NULL;
}

static int puller_start(PipelineObject *self) {
  puller *pu = calloc(1, sizeof *pu);
  if (!pu) {
    PyErr_NoMemory();
    return -1;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&pu->mu, NULL);
  pthread_cond_init(&pu->wake, &ca);
  pthread_cond_init(&pu->done, &ca);
  pthread_condattr_destroy(&ca);
  pu->p = self->p;
  /* The puller takes no signals (nor do the threads it may start): they
   * are the Python main thread's to handle. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int err = pthread_create(&self->thread, NULL, puller_main, pu);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err) {
    pu->p = NULL;
    puller_free(pu);
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  self->pu = pu;
  return 0;
}

static int cond_ready(const puller *pu) {
  return pu->ready;
}
static int cond_idle(const puller *pu) {
  return pu->op == OP_NONE && pu->running == OP_NONE;
}
static int cond_exited(const puller *pu) {
  return pu->exited;
}

/* Waits until cond(pu) with the GIL released, in slices; between slices
 * the signal handlers run.  Returns 0, or -1 with their exception set. */
static int wait_for(puller *pu, int (*cond)(const puller *)) {
  for (;;) {
    int ok;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&pu->mu);
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += SLICE_MS * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
      dl.tv_sec += 1;
      dl.tv_nsec -= 1000000000L;
    }
    while (!cond(pu))
      if (pthread_cond_timedwait(&pu->done, &pu->mu, &dl) == ETIMEDOUT) break;
    ok = cond(pu);
    pthread_mutex_unlock(&pu->mu);
    Py_END_ALLOW_THREADS if (ok) return 0;
    if (PyErr_CheckSignals() < 0) return -1;
  }
}

/* The outcome of an operation, collected from the puller. */
typedef struct outcome {
  int rc;
  char *msg;
  sl_sample *sample;
  void *state;
  size_t len;
} outcome;

/* Runs `op` on the puller (restore: `in`, `inlen` copied).  Returns 0 with
 * *out filled (the caller owns its pointers), or -1 with an exception set
 * (the operation may still be running: its result is left for later). */
static int run_op(PipelineObject *self, int op, const void *in, size_t inlen,
                  outcome *out) {
  memset(out, 0, sizeof *out);
  if (!self->pu && puller_start(self) < 0) return -1;
  puller *pu = self->pu;
  void *copy = NULL;
  if (op == OP_RESTORE) {
    copy = malloc(inlen ? inlen : 1);
    if (!copy) {
      PyErr_NoMemory();
      return -1;
    }
    memcpy(copy, in, inlen);
  }

  pthread_mutex_lock(&pu->mu);
  int post = 1;
  for (;;) {
    if (op == OP_NEXT && (pu->op == OP_NEXT || pu->running == OP_NEXT ||
                          (pu->ready && pu->result_op == OP_NEXT))) {
      post = 0; /* an interrupted next's batch is this one's */
      break;
    }
    if (!cond_idle(pu)) {
      /* Another operation (an interrupted one) finishes first; then look
       * again: a restore that succeeded has dropped a held batch. */
      pthread_mutex_unlock(&pu->mu);
      if (wait_for(pu, cond_idle) < 0) {
        free(copy);
        return -1;
      }
      pthread_mutex_lock(&pu->mu);
      continue;
    }
    if (op == OP_NEXT && pu->held) {
      take_held(pu); /* set aside by a state() or a refused restore() */
      post = 0;
    }
    break;
  }
  if (post) {
    hold_next_result(pu);
    result_discard(pu);
    if (op == OP_RESET) held_discard(pu); /* its pass is left */
    /* A batch handed out and not yet taken is not consumed. */
    pu->save_back = pu->held && pu->held_rc == SL_OK ? 1 : 0;
    pu->in = copy;
    pu->inlen = inlen;
    pu->op = op;
    pthread_cond_signal(&pu->wake);
  }
  pthread_mutex_unlock(&pu->mu);

  if (wait_for(pu, cond_ready) < 0) return -1;

  pthread_mutex_lock(&pu->mu);
  out->rc = pu->rc;
  out->msg = pu->msg;
  out->sample = pu->sample;
  out->state = pu->state;
  out->len = pu->len;
  pu->msg = NULL;
  pu->sample = NULL;
  pu->state = NULL;
  pu->ready = 0;
  /* Read ahead after a batch that came quickly (the puller is idle: its
   * result was just collected). */
  if (op == OP_NEXT && pu->result_op == OP_NEXT && out->rc == SL_OK &&
      pu->next_ns < AHEAD_NS && cond_idle(pu) && !pu->held && !pu->closing) {
    pu->op = OP_NEXT;
    pthread_cond_signal(&pu->wake);
  }
  pthread_mutex_unlock(&pu->mu);
  return 0;
}

/* Raises the outcome's error (freeing its message); returns NULL. */
static PyObject *raise_outcome(outcome *o) {
  slpy_raise(o->rc, o->msg ? o->msg : "");
  free(o->msg);
  o->msg = NULL;
  return NULL;
}

/* --- the object ------------------------------------------------------------
 */

static int check_usable(PipelineObject *self) {
  if (self->closed) {
    slpy_raise(SL_ECLOSED, "sluice: the pipeline is closed");
    return -1;
  }
  if (self->owner != getpid()) {
    slpy_raise(SL_ECLOSED, "sluice: the pipeline was opened by another "
                           "process (this one was forked from it): open it "
                           "again here");
    return -1;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "sluice: another Python thread is using this pipeline "
                    "(one thread at a time)");
    return -1;
  }
  return 0;
}

static int build_schema(PipelineObject *self) {
  const sl_schema *sc = sl_reader_schema(self->p);
  int n = sl_schema_nfields(sc);
  self->names = PyTuple_New(n);
  self->index = PyDict_New();
  if (!self->names || !self->index) return -1;
  for (int i = 0; i < n; i++) {
    PyObject *name = PyUnicode_FromString(sl_schema_field_name(sc, i));
    PyObject *pos = PyLong_FromLong(i);
    int bad = !name || !pos || PyDict_SetItem(self->index, name, pos) < 0;
    Py_XDECREF(pos);
    if (bad || PyTuple_SetItem(self->names, i, name) < 0) {
      if (bad) Py_XDECREF(name);
      return -1;
    }
  }
  return 0;
}

PyObject *slpy_pipeline_new(sl_reader *p) {
  PyTypeObject *tp = (PyTypeObject *)slpy_PipelineType;
  allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
  PipelineObject *self = (PipelineObject *)alloc(tp, 0);
  if (!self) {
    sl_reader_destroy(p);
    return NULL;
  }
  self->p = p;
  self->fresh = 1;
  self->owner = getpid();
  if (build_schema(self) < 0) {
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject *)self;
}

/* Closes without waiting for a busy puller (the finaliser): an idle one is
 * joined, a busy one detached. */
static void pipeline_close_nowait(PipelineObject *self) {
  if (self->closed) return;
  self->closed = 1;
  if (self->owner != getpid()) return; /* a forked child's copy */
  puller *pu = self->pu;
  if (!pu) {
    sl_reader *p = self->p;
    Py_BEGIN_ALLOW_THREADS sl_reader_destroy(p);
    Py_END_ALLOW_THREADS return;
  }
  pthread_mutex_lock(&pu->mu);
  pu->closing = 1;
  int idle = cond_idle(pu);
  if (!idle) pu->detached = 1;
  pthread_cond_signal(&pu->wake);
  pthread_mutex_unlock(&pu->mu);
  if (idle) {
    pthread_t th = self->thread;
    Py_BEGIN_ALLOW_THREADS pthread_join(th, NULL);
    Py_END_ALLOW_THREADS puller_free(pu);
  } else {
    pthread_detach(self->thread);
  }
  self->pu = NULL;
}

static void pipeline_dealloc(PyObject *obj) {
  PipelineObject *self = (PipelineObject *)obj;
  PyTypeObject *tp = Py_TYPE(obj);
  if (self->p) pipeline_close_nowait(self);
  Py_XDECREF(self->names);
  Py_XDECREF(self->index);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(obj);
  Py_DECREF(tp);
}

static PyObject *pipeline_close(PyObject *obj, PyObject *unused) {
  PipelineObject *self = (PipelineObject *)obj;
  if (self->closed) Py_RETURN_NONE;
  if (self->owner != getpid()) {
    pipeline_close_nowait(self); /* marks it closed, nothing else */
    Py_RETURN_NONE;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "sluice: another Python thread is using this pipeline");
    return NULL;
  }
  puller *pu = self->pu;
  if (!pu) {
    pipeline_close_nowait(self);
    Py_RETURN_NONE;
  }
  self->closed = 1;
  pthread_mutex_lock(&pu->mu);
  pu->closing = 1;
  pthread_cond_signal(&pu->wake);
  pthread_mutex_unlock(&pu->mu);
  if (wait_for(pu, cond_exited) < 0) {
    /* Interrupted: the puller finishes (closes the pipeline) alone. */
    pthread_mutex_lock(&pu->mu);
    int exited = pu->exited;
    pu->detached = !exited;
    pthread_mutex_unlock(&pu->mu);
    if (exited) {
      pthread_join(self->thread, NULL);
      puller_free(pu);
    } else {
      pthread_detach(self->thread);
    }
    self->pu = NULL;
    return NULL;
  }
  pthread_join(self->thread, NULL);
  puller_free(pu);
  self->pu = NULL;
  Py_RETURN_NONE;
}

static PyObject *pipeline_next(PyObject *obj) {
  PipelineObject *self = (PipelineObject *)obj;
  if (check_usable(self) < 0) return NULL;
  self->busy = 1;
  self->fresh = 0;
  outcome o;
  int st = run_op(self, OP_NEXT, NULL, 0, &o);
  self->busy = 0;
  if (st < 0) return NULL;
  if (o.rc == SL_EOF) return NULL; /* StopIteration, no exception set */
  if (o.rc < 0) return raise_outcome(&o);
  return slpy_batch_new(o.sample, self->names, self->index);
}

static PyObject *pipeline_reset(PyObject *obj, PyObject *unused) {
  PipelineObject *self = (PipelineObject *)obj;
  if (check_usable(self) < 0) return NULL;
  self->busy = 1;
  outcome o;
  int st = run_op(self, OP_RESET, NULL, 0, &o);
  self->busy = 0;
  if (st < 0) return NULL;
  if (o.rc < 0) return raise_outcome(&o);
  self->fresh = 1;
  Py_RETURN_NONE;
}

/* --- passes ------------------------------------------------------------------
 */

/* iter(p) returns a Pass: an iterator over one pass of `p` (iter() of the
 * Pass is the Pass itself, so `it = iter(p); next(it); for b in it:` goes
 * on with the same pass).  The pass under way if nothing was pulled since
 * open, reset or restore, otherwise the next pass (a reset first). */
static PyObject *PassType;

typedef struct {
  PyObject_HEAD PyObject *pipeline;
} PassObject;

static PyObject *pass_next(PyObject *obj) {
  return pipeline_next(((PassObject *)obj)->pipeline);
}

static void pass_dealloc(PyObject *obj) {
  PyTypeObject *tp = Py_TYPE(obj);
  Py_XDECREF(((PassObject *)obj)->pipeline);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(obj);
  Py_DECREF(tp);
}

static PyObject *pass_iter(PyObject *obj) {
  return Py_NewRef(obj);
}

static PyType_Slot pass_slots[] = {
    {Py_tp_dealloc, pass_dealloc},
    {Py_tp_iter, pass_iter},
    {Py_tp_iternext, pass_next},
    {Py_tp_doc, "One pass of a Pipeline (iter(pipeline))."},
    {0, NULL}};

static PyType_Spec pass_spec = {
    "sluice.Pass", sizeof(PassObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, pass_slots};

static PyObject *pipeline_iter(PyObject *obj) {
  PipelineObject *self = (PipelineObject *)obj;
  if (check_usable(self) < 0) return NULL;
  if (!self->fresh) {
    PyObject *r = pipeline_reset(obj, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
  }
  PyTypeObject *tp = (PyTypeObject *)PassType;
  allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
  PassObject *it = (PassObject *)alloc(tp, 0);
  if (!it) return NULL;
  it->pipeline = Py_NewRef(obj);
  return (PyObject *)it;
}

static PyObject *pipeline_state(PyObject *obj, PyObject *unused) {
  PipelineObject *self = (PipelineObject *)obj;
  if (check_usable(self) < 0) return NULL;
  self->busy = 1;
  outcome o;
  int st = run_op(self, OP_SAVE, NULL, 0, &o);
  self->busy = 0;
  if (st < 0) return NULL;
  if (o.rc < 0) return raise_outcome(&o);
  PyObject *b = PyBytes_FromStringAndSize(o.state, (Py_ssize_t)o.len);
  sl_free(o.state);
  return b;
}

static PyObject *pipeline_restore(PyObject *obj, PyObject *arg) {
  PipelineObject *self = (PipelineObject *)obj;
  if (check_usable(self) < 0) return NULL;
  Py_buffer view;
  if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
  self->busy = 1;
  outcome o;
  int st = run_op(self, OP_RESTORE, view.buf, (size_t)view.len, &o);
  self->busy = 0;
  PyBuffer_Release(&view);
  if (st < 0) return NULL;
  if (o.rc < 0) return raise_outcome(&o);
  self->fresh = 1;
  Py_RETURN_NONE;
}

static PyObject *pipeline_enter(PyObject *obj, PyObject *unused) {
  return Py_NewRef(obj);
}

static PyObject *pipeline_exit(PyObject *obj, PyObject *args) {
  PyObject *r = pipeline_close(obj, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

static PyObject *stage_dict(const sl_stage_stats *s) {
  return Py_BuildValue(
      "{s:s,s:i,s:i,s:i,s:K,s:K,s:d,s:d,s:d,s:d,s:K,s:K,s:s,s:K,s:O,s:i,s:K,s:K,s:K,"
      "s:i,s:K}",
      "name", s->name,
      "depth", s->depth, "downstream", s->downstream, "threads", s->threads,
      "samples_in", (unsigned long long)s->samples_in, "samples_out",
      (unsigned long long)s->samples_out, "next_s", s->next_s, "busy_s",
      s->busy_s, "wait_up_s", s->wait_up_s, "wait_down_s", s->wait_down_s,
      "errors_ignored", (unsigned long long)s->errors_ignored, "queue_depth",
      (unsigned long long)s->queue_depth, "last_error", s->last_error,
      "samples_fused", (unsigned long long)s->samples_fused, "threads_auto",
      s->threads_auto ? Py_True : Py_False, "threads_max", s->threads_max,
      "bytes_held",
      (unsigned long long)s->bytes_held, "bytes_peak",
      (unsigned long long)s->bytes_peak, "budget_bytes",
      (unsigned long long)s->budget_bytes, "budget_default_pct",
      s->budget_default_pct, "memory_usable",
      (unsigned long long)s->memory_usable);
}

/* Whether a budget may be set on self now (open, before the first next);
 * else raises and returns 0. */
static int budget_settable(PipelineObject *self) {
  if (self->closed) {
    slpy_raise(SL_ECLOSED, "sluice: the pipeline is closed");
    return 0;
  }
  if (self->pu) {
    PyErr_SetString(PyExc_RuntimeError,
                    "sluice: a memory budget is set before the first batch");
    return 0;
  }
  return 1;
}

/* sl_reader_set_budget, before the first next (sluice.open_script's
 * memory=): no puller thread uses the chain yet. */
static PyObject *pipeline_set_budget(PyObject *obj, PyObject *arg) {
  PipelineObject *self = (PipelineObject *)obj;
  if (!budget_settable(self)) return NULL;
  unsigned long long bytes = PyLong_AsUnsignedLongLong(arg);
  if (bytes == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  int rc = sl_reader_set_budget(self->p, (uint64_t)bytes);
  if (rc < 0) return slpy_raise(rc, sl_last_error());
  Py_RETURN_NONE;
}

/* sl_reader_default_budget (no argument) or sl_reader_set_no_budget
 * (False), before the first next, as _set_budget: open_script's memory
 * unset / memory=False. */
static PyObject *pipeline_default_budget(PyObject *obj, PyObject *arg) {
  PipelineObject *self = (PipelineObject *)obj;
  if (!budget_settable(self)) return NULL;
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  int rc = on ? sl_reader_default_budget(self->p)
              : sl_reader_set_no_budget(self->p);
  if (rc < 0) return slpy_raise(rc, sl_last_error());
  Py_RETURN_NONE;
}

/* The chain's stages (sl_reader_stats), as a list of dicts. */
static PyObject *pipeline_stats(PyObject *obj, PyObject *unused) {
  PipelineObject *self = (PipelineObject *)obj;
  if (self->closed)
    return slpy_raise(SL_ECLOSED, "sluice: the pipeline is closed");
  if (self->pu) {
    /* Not while the chain is being reset (an interrupted reset). */
    pthread_mutex_lock(&self->pu->mu);
    int resetting = self->pu->running == OP_RESET || self->pu->op == OP_RESET ||
                    self->pu->running == OP_RESTORE ||
                    self->pu->op == OP_RESTORE;
    pthread_mutex_unlock(&self->pu->mu);
    if (resetting) {
      PyErr_SetString(PyExc_RuntimeError,
                      "sluice: stats() while the pipeline is being reset");
      return NULL;
    }
  }
  size_t n = 0;
  int rc = sl_reader_stats(self->p, NULL, 0, &n);
  if (rc < 0) return slpy_raise(rc, sl_last_error());
  sl_stage_stats *st = calloc(n ? n : 1, sizeof *st);
  if (!st) return PyErr_NoMemory();
  size_t got = 0;
  rc = sl_reader_stats(self->p, st, n, &got);
  if (rc < 0) {
    free(st);
    return slpy_raise(rc, sl_last_error());
  }
  if (got > n) got = n;
  PyObject *list = PyList_New((Py_ssize_t)got);
  for (size_t i = 0; list && i < got; i++) {
    PyObject *d = stage_dict(&st[i]);
    if (!d) {
      Py_CLEAR(list);
      break;
    }
    PyList_SetItem(list, (Py_ssize_t)i, d);
  }
  free(st);
  return list;
}

static Py_ssize_t pipeline_len(PyObject *obj) {
  PipelineObject *self = (PipelineObject *)obj;
  if (self->closed) {
    slpy_raise(SL_ECLOSED, "sluice: the pipeline is closed");
    return -1;
  }
  uint64_t n = 0;
  int rc = sl_reader_length(self->p, &n);
  if (rc == SL_EUNSUPPORTED) {
    PyErr_Format(PyExc_TypeError,
                 "sluice: this pipeline's length is not known (%s)",
                 sl_last_error());
    return -1;
  }
  if (rc < 0) {
    slpy_raise(rc, sl_last_error());
    return -1;
  }
  return (Py_ssize_t)n;
}

/* {name: (dtype, shape)}; -1 marks a variable dimension. */
static PyObject *pipeline_get_schema(PyObject *obj, void *c) {
  PipelineObject *self = (PipelineObject *)obj;
  if (self->closed)
    return slpy_raise(SL_ECLOSED, "sluice: the pipeline is closed");
  const sl_schema *sc = sl_reader_schema(self->p);
  PyObject *d = PyDict_New();
  int n = sl_schema_nfields(sc);
  for (int i = 0; d && i < n; i++) {
    int rank = sl_schema_field_rank(sc, i);
    const int64_t *shape = sl_schema_field_shape(sc, i);
    PyObject *sh = PyTuple_New(rank);
    for (int k = 0; sh && k < rank; k++)
      PyTuple_SetItem(sh, k, PyLong_FromLongLong(shape[k]));
    PyObject *v =
        sh ? Py_BuildValue("(sN)", sl_dtype_name(sl_schema_field_dtype(sc, i)),
                           sh)
           : NULL;
    if (!v || PyDict_SetItemString(d, sl_schema_field_name(sc, i), v) < 0)
      Py_CLEAR(d);
    Py_XDECREF(v);
  }
  return d;
}

static PyObject *pipeline_get_closed(PyObject *obj, void *c) {
  return PyBool_FromLong(((PipelineObject *)obj)->closed);
}

/* A pipeline is true even when its length is unknown (no __len__ call). */
static int pipeline_bool(PyObject *obj) {
  return 1;
}

static PyObject *pipeline_repr(PyObject *obj) {
  PipelineObject *self = (PipelineObject *)obj;
  if (self->closed) return PyUnicode_FromString("<sluice.Pipeline closed>");
  char buf[1024];
  sl_schema_describe(sl_reader_schema(self->p), buf, sizeof buf);
  return PyUnicode_FromFormat("<sluice.Pipeline %s>", buf);
}

static PyMethodDef pipeline_methods[] = {
    {"close", pipeline_close, METH_NOARGS,
     "Closes the pipeline (joins its threads); batches already taken stay "
     "valid.  Idempotent."},
    {"reset", pipeline_reset, METH_NOARGS,
     "Starts the next pass (epoch) from the beginning."},
    {"state", pipeline_state, METH_NOARGS,
     "The pipeline's position as bytes (sl_reader_save)."},
    {"restore", pipeline_restore, METH_O,
     "Moves to a position state() returned (sl_reader_restore)."},
    {"stats", pipeline_stats, METH_NOARGS,
     "The chain's stages as dicts (sl_reader_stats)."},
    {"_set_budget", pipeline_set_budget, METH_O,
     "sl_reader_set_budget(bytes), before the first batch (open_script's "
     "memory=)."},
    {"_default_budget", pipeline_default_budget, METH_O,
     "True: sl_reader_default_budget; False: sl_reader_set_no_budget; "
     "before the first batch (open_script's memory unset / False)."},
    {"__enter__", pipeline_enter, METH_NOARGS, NULL},
    {"__exit__", pipeline_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef pipeline_getset[] = {
    {"schema", pipeline_get_schema, NULL,
     "{name: (dtype, shape)} of the batches; -1 marks a variable dimension",
     NULL},
    {"closed", pipeline_get_closed, NULL, "True once closed", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot pipeline_slots[] = {
    {Py_tp_dealloc, pipeline_dealloc},
    {Py_tp_repr, pipeline_repr},
    {Py_tp_iter, pipeline_iter},
    {Py_tp_iternext, pipeline_next},
    {Py_tp_methods, pipeline_methods},
    {Py_tp_getset, pipeline_getset},
    {Py_mp_length, pipeline_len},
    {Py_nb_bool, pipeline_bool},
    {Py_tp_doc, "A pipeline declared by a Lua script: iterate it for one "
                "pass of batches (sluice.open_script)."},
    {0, NULL}};

static PyType_Spec pipeline_spec = {
    "sluice.Pipeline", sizeof(PipelineObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, pipeline_slots};

int slpy_pipeline_init_type(PyObject *module) {
  PassType = PyType_FromSpec(&pass_spec);
  if (!PassType) return -1;
  slpy_PipelineType = PyType_FromSpec(&pipeline_spec);
  if (!slpy_PipelineType) return -1;
  Py_INCREF(slpy_PipelineType);
  return PyModule_AddObject(module, "Pipeline", slpy_PipelineType);
}
