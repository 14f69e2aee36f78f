/*
 * decode_image.c - sl_decode_image: a bytes field of encoded images (JPEG,
 * PNG) decoded into u8 [H, W, C] tensors by `threads` worker threads, in
 * the upstream's order by default.  The image reader (image_reader.c) is
 * this stage on top of a source of file bytes.
 *
 * Protocol (one mutex `mu`, two conditions: workers sleep on work_cv, the
 * consumer on out_cv):
 *
 *   pull      Upstream is single-consumer, so workers take turns: under mu
 *             a worker waits until nobody is pulling (`pulling`) and the
 *             window has room (pull_seq - next_out < qcap), takes sequence
 *             number pull_seq, sets `pulling`, and drops the lock to call
 *             sl_reader_next; it retakes the lock, advances pull_seq and
 *             hands the turn on (signal work_cv).  EOF or an upstream error
 *             becomes the terminal at that sequence (code and message
 *             copied) and sets pull_done: nobody pulls again this pass.
 *   decode    Outside the lock, with the worker's own decoder context; the
 *             result (a sample, an error with its message, or "skipped")
 *             goes into win[seq % qcap] under mu, and the consumer is
 *             signalled when it sleeps.
 *   window    Sequences [next_out, pull_seq) are in flight; at most qcap,
 *             so at most qcap decoded images wait for the consumer (the
 *             memory bound).  Ordered: the consumer takes win[next_out]
 *             once it is READY.  Unordered: any READY slot of the window;
 *             taken slots are marked TAKEN and next_out moves over them.
 *             The terminal is delivered once next_out reaches term_seq,
 *             i.e. after every sample pulled before it.
 *   skip      Under SL_CORRUPT_SKIP_CHUNK, an image that fails to decode
 *             with SL_ECORRUPT (damaged, truncated, not an image) or
 *             SL_ESHAPE is a SKIPPED result: the consumer counts it in
 *             `bad` (per pass, on the consumer's thread, so the count and
 *             where the cap trips are the same for any thread count in
 *             ordered mode) and fails the pass with SL_ECORRUPT once more
 *             than max_bad were skipped.  Other errors (SL_ENOMEM, upstream
 *             errors) always end the pass.
 *   stop      (reset, destroy) set `stop` under mu, broadcast work_cv,
 *             join.  A worker finishes the image it is decoding, deposits
 *             it and exits; a worker inside sl_reader_next finishes that
 *             call.  Reset then releases every pending result, resets
 *             upstream and clears the pass state; workers are started
 *             again by the next call to next.
 *
 * Workers start on the first next of each pass (not at construction: an
 * unread stage costs no threads), then run ahead of the consumer until the
 * window is full.  Shared fields, protected by mu: win[*], pull_seq,
 * next_out, pulling, pull_done, stop, term_*, consumer_waiting.  `up` is used
 * by the worker holding the pull turn, or by the consumer while no worker
 * runs (reset, destroy).  `bad`, `running` and the thread handles belong to
 * the consumer.  Each decoder context belongs to its worker.
 */
#include "image/image.h"
#include "readers/reader_impl.h"

#include <pthread.h>
#include <stdlib.h>

/* The buffer pool of decoded images: idle buffers beyond the window and
 * the workers, and the bytes they may hold in all. */
#define POOL_SPARE 16
#define POOL_IDLE_BYTES ((size_t)256 << 20)

enum { SLOT_EMPTY = 0, SLOT_READY, SLOT_TAKEN };
enum { RES_SAMPLE = 0, RES_ERROR, RES_SKIPPED };

typedef struct slot {
  int state; /* SLOT_* */
  int kind;  /* RES_* */
  int rc;
  sl_sample *s; /* RES_SAMPLE */
  char *msg;    /* RES_ERROR, RES_SKIPPED: the message (owned) */
} slot;

typedef struct dec_state dec_state;

typedef struct worker {
  dec_state *d;
  pthread_t tid;
  sl__image_decoder dec;
} worker;

struct dec_state {
  sl_reader *up;
  sl_schema *schema; /* the output schema */
  const char *stage; /* "decode_image" or "image" */
  int field;         /* index of the image field */
  char field_name[64];
  sl_image_shape shape;
  bool unordered;
  sl_corrupt_policy policy;
  uint32_t max_bad;
  const char *const *names; /* borrowed; nnames entries, or NULL */
  size_t nnames;
  uint32_t nworkers, qcap;
  worker *workers;
  sl__buffer_pool *pool; /* the decoded pixels' buffers (buffer_pool.c) */
  sl__stage_counters counters;

  pthread_mutex_t mu;
  pthread_cond_t work_cv, out_cv;
  slot *win;               /* qcap slots (mu) */
  uint64_t pull_seq;       /* mu */
  uint64_t next_out;       /* mu */
  bool pulling, pull_done; /* mu */
  bool stop;               /* mu */
  bool consumer_waiting;   /* mu */
  bool have_term;          /* mu */
  int term_rc;             /* mu */
  char *term_msg;          /* mu */
  uint64_t term_seq;       /* mu */

  bool running; /* consumer: workers started this pass */
  uint64_t bad; /* consumer: images skipped this pass */
};

/* --- the work of one image ---------------------------------------------- */

/* "image: PATH" or "decode_image: sample N (field 'image')" into buf. */
static void what_of(const dec_state *d, uint64_t seq, char *buf, size_t cap) {
  if (d->names && seq < d->nnames)
    snprintf(buf, cap, "%s: %s", d->stage, d->names[seq]);
  else
    snprintf(buf, cap, "%s: sample %llu of the pass (field '%s')", d->stage,
             (unsigned long long)seq, d->field_name);
}

/* Decodes field `field` of `in` (taken) into a new sample of the output
 * schema stored in *out. */
static int decode_one(dec_state *d, sl__image_decoder *dec, sl_sample *in,
                      uint64_t seq, sl_sample **out) {
  char what[1200];
  what_of(d, seq, what, sizeof what);
  const sl_tensor *src = sl_sample_at_const(in, d->field);
  sl_tensor px;
  int rc = sl__image_decode(dec, src->data, src->nbytes, &d->shape, what, &px);
  sl_sample *s = NULL;
  if (rc == SL_OK) {
    s = sl_sample_new(d->schema);
    if (!s) rc = sl_set_error(SL_ENOMEM, "%s: cannot allocate a sample", what);
  }
  int n = sl_sample_nfields(in);
  for (int i = 0; i < n && rc == SL_OK; i++)
    if (i != d->field) rc = sl_sample_set(s, i, sl_sample_at_const(in, i));
  if (rc == SL_OK && (rc = sl_sample_set_move(s, d->field, &px)) < 0)
    sl_wrap_error(rc, "%s", what);
  if (rc < 0) {
    sl_tensor_clear(&px);
    sl_sample_release(s);
    s = NULL;
  }
  sl_sample_release(in);
  *out = s;
  return rc;
}

/* --- workers -------------------------------------------------------------- */

static void *worker_main(void *arg) {
  worker *w = arg;
  dec_state *d = w->d;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->stop && !d->pull_done &&
           (d->pulling || d->pull_seq - d->next_out >= d->qcap))
      pthread_cond_wait(&d->work_cv, &d->mu);
    if (d->stop || d->pull_done) break;
    d->pulling = true;
    uint64_t seq = d->pull_seq;
    pthread_mutex_unlock(&d->mu);

    sl_sample *in = NULL;
    int rc = sl_reader_next(d->up, &in);
    char *msg = rc < 0 ? sl__error_dup() : NULL;

    pthread_mutex_lock(&d->mu);
    d->pulling = false;
    if (rc != SL_OK) {
      d->have_term = true;
      d->term_rc = rc;
      d->term_msg = msg;
      d->term_seq = seq;
      d->pull_done = true;
      pthread_cond_broadcast(&d->work_cv);
      if (d->consumer_waiting) pthread_cond_signal(&d->out_cv);
      break;
    }
    d->pull_seq++;
    pthread_cond_signal(&d->work_cv); /* the pull turn is free */
    pthread_mutex_unlock(&d->mu);

    uint64_t t0 = sl__stat_start();
    sl_sample *res = NULL;
    rc = decode_one(d, &w->dec, in, seq, &res);
    slot r = {SLOT_READY, RES_SAMPLE, rc, res, NULL};
    if (rc < 0) {
      bool skip = d->policy == SL_CORRUPT_SKIP_CHUNK &&
                  (rc == SL_ECORRUPT || rc == SL_ESHAPE);
      r.kind = skip ? RES_SKIPPED : RES_ERROR;
      r.msg = sl__error_dup();
    }
    sl__stat_since(&d->counters.busy_ns, t0);

    pthread_mutex_lock(&d->mu);
    d->win[seq % d->qcap] = r;
    if (d->consumer_waiting) pthread_cond_signal(&d->out_cv);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* Stops and joins the workers (consumer thread). */
static void stop_workers(dec_state *d) {
  if (!d->running) return;
  pthread_mutex_lock(&d->mu);
  d->stop = true;
  pthread_cond_broadcast(&d->work_cv);
  pthread_mutex_unlock(&d->mu);
  for (uint32_t i = 0; i < d->nworkers; i++)
    if (d->workers[i].d) pthread_join(d->workers[i].tid, NULL);
  for (uint32_t i = 0; i < d->nworkers; i++)
    d->workers[i].d = NULL;
  d->stop = false;
  d->running = false;
}

static int start_workers(dec_state *d) {
  d->running = true;
  for (uint32_t i = 0; i < d->nworkers; i++) {
    worker *w = &d->workers[i];
    w->d = d;
    int err = pthread_create(&w->tid, NULL, worker_main, w);
    if (err) {
      w->d = NULL;
      stop_workers(d);
      return sl_set_error(SL_ENOMEM, "%s: cannot start worker %u: %s", d->stage,
                          i, strerror(err));
    }
  }
  return SL_OK;
}

/* Releases every pending result and clears the pass state (no worker
 * running). */
static void clear_pass(dec_state *d) {
  for (uint32_t i = 0; i < d->qcap; i++) {
    sl_sample_release(d->win[i].s);
    sl__free(d->win[i].msg);
    memset(&d->win[i], 0, sizeof d->win[i]);
  }
  sl__free(d->term_msg);
  d->term_msg = NULL;
  d->have_term = d->pull_done = d->pulling = false;
  d->pull_seq = d->next_out = 0;
  d->bad = 0;
}

/* --- the consumer -----------------------------------------------------------
 */

/* Takes a READY result (or the due terminal) under mu into *r; returns
 * true for a result, false for the terminal. */
static bool take_locked(dec_state *d, slot *r) {
  for (;;) {
    uint64_t end = d->pull_seq;
    for (uint64_t seq = d->next_out; seq < end; seq++) {
      slot *s = &d->win[seq % d->qcap];
      if (s->state == SLOT_READY) {
        *r = *s;
        s->state = SLOT_TAKEN;
        s->s = NULL;
        s->msg = NULL;
        bool moved = false;
        while (d->next_out < d->pull_seq &&
               d->win[d->next_out % d->qcap].state == SLOT_TAKEN) {
          d->win[d->next_out % d->qcap].state = SLOT_EMPTY;
          d->next_out++;
          moved = true;
        }
        if (moved) pthread_cond_signal(&d->work_cv); /* room in the window */
        return true;
      }
      if (!d->unordered) break; /* ordered: only next_out will do */
    }
    if (d->have_term && d->next_out == d->term_seq) return false;
    d->consumer_waiting = true;
    pthread_cond_wait(&d->out_cv, &d->mu);
    d->consumer_waiting = false;
  }
}

static int dec_next(void *st, sl_sample **out) {
  dec_state *d = st;
  if (!d->running) SL_FORWARD_IF_ERROR(start_workers(d));
  for (;;) {
    slot r;
    pthread_mutex_lock(&d->mu);
    bool got = take_locked(d, &r);
    int term_rc = d->term_rc;
    char *term_msg = NULL;
    if (!got && term_rc != SL_EOF && d->term_msg)
      term_msg = sl__strdup(d->term_msg);
    pthread_mutex_unlock(&d->mu);
    if (!got) {
      if (term_rc == SL_EOF) return SL_EOF;
      sl_set_error(term_rc, "%s", term_msg ? term_msg : sl_strerror(term_rc));
      sl__free(term_msg);
      return term_rc;
    }
    if (r.kind == RES_SAMPLE) {
      *out = r.s;
      return SL_OK;
    }
    if (r.kind == RES_ERROR) {
      sl_set_error(r.rc, "%s", r.msg ? r.msg : sl_strerror(r.rc));
      sl__free(r.msg);
      return r.rc;
    }
    /* RES_SKIPPED */
    d->bad++;
    if (d->bad > d->max_bad) {
      int rc = sl_set_error(SL_ECORRUPT,
                            "%s: %llu images failed to decode in this pass, "
                            "more than max_bad (%u); the last: %s",
                            d->stage, (unsigned long long)d->bad, d->max_bad,
                            r.msg ? r.msg : "?");
      sl__free(r.msg);
      return rc;
    }
    SL_DEBUGLOG("%s: skipped: %s", d->stage, r.msg ? r.msg : "?");
    sl__free(r.msg);
  }
}

static int dec_reset(void *st) {
  dec_state *d = st;
  stop_workers(d);
  clear_pass(d);
  return sl_reader_reset(d->up);
}

static void dec_destroy(void *st) {
  dec_state *d = st;
  if (!d) return;
  if (d->win) {
    stop_workers(d);
    clear_pass(d);
  }
  for (uint32_t i = 0; d->workers && i < d->nworkers; i++)
    sl__image_decoder_fini(&d->workers[i].dec);
  sl__buffer_pool_release(d->pool); /* images still held stay valid */
  sl_reader_destroy(d->up);
  sl_schema_release(d->schema);
  if (d->win) {
    pthread_cond_destroy(&d->work_cv);
    pthread_cond_destroy(&d->out_cv);
    pthread_mutex_destroy(&d->mu);
  }
  sl__free(d->win);
  sl__free(d->workers);
  sl__free(d);
}

static const sl_reader_vtable dec_vt = {"decode_image", dec_next, dec_reset,
                                        dec_destroy};
static const sl_reader_vtable image_vt = {"image", dec_next, dec_reset,
                                          dec_destroy};

/* --- construction ------------------------------------------------------------
 */

int sl__schema_with_field(const sl_schema *up, int field, sl_dtype dtype,
                          int rank, const int64_t *shape, sl_schema **out) {
  *out = NULL;
  sl_schema *s = sl_schema_new();
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "cannot allocate a schema");
  int rc = SL_OK, n = sl_schema_nfields(up);
  for (int i = 0; i < n && rc >= 0; i++) {
    if (i == field)
      rc = sl_schema_add(s, sl_schema_field_name(up, i), dtype, rank, shape);
    else
      rc = sl_schema_add(
          s, sl_schema_field_name(up, i), sl_schema_field_dtype(up, i),
          sl_schema_field_rank(up, i), sl_schema_field_shape(up, i));
  }
  int nm = sl_schema_meta_count(up);
  for (int i = 0; i < nm && rc >= 0; i++) {
    const char *k, *v;
    rc = sl_schema_meta_at(up, i, &k, &v);
    if (rc >= 0) rc = sl_schema_set_meta(s, k, v);
  }
  if (rc < 0) {
    sl_schema_release(s);
    return rc;
  }
  *out = s;
  return SL_OK;
}

int sl__decode_image_make(sl_reader *up, const sl_image_opts *opts,
                          const char *stage, const char *const *names,
                          size_t nnames, sl_reader **out) {
  if (!out) {
    sl_reader_destroy(up);
    return sl_set_error(SL_EINVAL, "%s: NULL out pointer", stage);
  }
  *out = NULL;
  if (!up) return sl_set_error(SL_EINVAL, "%s: NULL upstream reader", stage);
  sl_image_opts o = SL_IMAGE_OPTS_INIT;
  if (opts) {
    int rc = sl__opts_copy("sl_image_opts", &o, sizeof o, opts);
    if (rc < 0) return sl__fail_with_upstream(up, rc);
  }
  const char *fname = o.field ? o.field : "image";
  const sl_schema *us = sl_reader_schema(up);
  int field = sl_schema_find(us, fname);
  int rc = sl__image_shape_check(stage, &o.shape);
  if (rc == SL_OK && field < 0) {
    char desc[512];
    rc = sl_set_error(SL_EINVAL, "%s: upstream has no field '%s' (schema %s)",
                      stage, fname, sl_schema_describe(us, desc, sizeof desc));
  } else if (rc == SL_OK && (sl_schema_field_dtype(us, field) != SL_BYTES &&
                             sl_schema_field_dtype(us, field) != SL_U8)) {
    rc = sl_set_error(SL_ESHAPE,
                      "%s: field '%s' holds %s, not encoded image bytes "
                      "(bytes or u8)",
                      stage, fname,
                      sl_dtype_name(sl_schema_field_dtype(us, field)));
  } else if (rc == SL_OK && (o.threads > 1024 || o.window > 65536)) {
    rc = sl_set_error(SL_EINVAL,
                      "%s: threads must be 0..1024 and window 0..65536 (got "
                      "%u and %u)",
                      stage, o.threads, o.window);
  } else if (rc == SL_OK && o.policy != SL_CORRUPT_FAIL &&
             o.policy != SL_CORRUPT_SKIP_CHUNK) {
    rc = sl_set_error(SL_EINVAL, "%s: unknown corrupt policy %d", stage,
                      (int)o.policy);
  }
  if (rc < 0) return sl__fail_with_upstream(up, rc);

  dec_state *d = sl__calloc(1, sizeof *d);
  if (!d)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "%s: cannot allocate", stage));
  d->up = up;
  d->stage = stage;
  d->field = field;
  snprintf(d->field_name, sizeof d->field_name, "%s", fname);
  d->shape = o.shape;
  d->unordered = o.unordered != 0;
  d->policy = o.policy;
  d->max_bad = o.max_bad ? o.max_bad : 16;
  d->names = names;
  d->nnames = nnames;
  d->nworkers = o.threads ? o.threads : 1;
  d->qcap = o.window ? o.window : 4 * d->nworkers;
  if (d->qcap < d->nworkers) d->qcap = d->nworkers;
  d->counters.threads = (int)d->nworkers;
  d->workers = sl__calloc(d->nworkers, sizeof *d->workers);
  slot *win = sl__calloc(d->qcap, sizeof *win);
  /* Idle buffers kept for reuse: enough for the window, the images being
   * decoded and some the consumer holds, at most POOL_IDLE_BYTES. */
  d->pool = sl__buffer_pool_new((size_t)d->qcap + d->nworkers + POOL_SPARE,
                                POOL_IDLE_BYTES);
  for (uint32_t i = 0; d->workers && i < d->nworkers; i++)
    d->workers[i].dec.pool = d->pool;
  int64_t dims[3];
  sl__image_schema_dims(&o.shape, dims);
  rc = d->workers && win && d->pool ? SL_OK
                                    : sl_set_error(SL_ENOMEM,
                                                   "%s: cannot allocate the "
                                                   "window",
                                                   stage);
  if (rc == SL_OK) {
    rc = sl__schema_with_field(us, field, SL_U8, 3, dims, &d->schema);
    if (rc < 0) sl_wrap_error(rc, "%s", stage);
  }
  if (rc == SL_OK) {
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->work_cv, NULL);
    pthread_cond_init(&d->out_cv, NULL);
    d->win = win;
  } else {
    sl__free(win);
    dec_destroy(d);
    return rc;
  }
  return sl__decorator_make(strcmp(stage, "image") == 0 ? &image_vt : &dec_vt,
                            d, d->schema, &d->up, &d->counters, out);
}

int sl_decode_image(sl_reader *up, const sl_image_opts *opts, sl_reader **out) {
  return sl__decode_image_make(up, opts, "decode_image", NULL, 0, out);
}
