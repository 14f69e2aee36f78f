/*
 * open_files.c - sl_open_files: several SLR files read by T worker threads
 * following the epoch plan (epoch_plan.c), delivered as one reader.
 *
 * Work.  The plan is a list of units (some records of one chunk) grouped by
 * shuffle window.  A worker processes a unit by decoding its chunk with its
 * own file handle (one zstd context per open file per worker) and making
 * every sample the unit needs; the unit's samples then travel together as
 * one `result`, so a queue operation moves a chunk's worth of samples and
 * the consumer's per-sample cost is an array read.
 *
 * Ordered mode (the default).  Unit k is processed by worker k mod T, which
 * takes its units in increasing order and appends their results to its own
 * queue.  The consumer walks the plan's groups in order and takes unit k's
 * result from queue k mod T: the results arrive in plan order whatever the
 * threads' timing, so the output is the same for any T.  A group of one unit
 * is delivered as it stands; a group of several (a shuffle window wider than
 * one chunk) is first scattered into the group buffer by the units' slots,
 * restoring the window's permuted order.
 *
 * Unordered mode.  Workers take the next unit from an atomic counter and
 * append results to one shared queue; the consumer delivers results in
 * arrival order and stops after as many results as there are units.
 *
 * Errors.  A unit that fails carries its code and the worker's message (the
 * file's path, chunk and offset) in its result, in its place.  The worker
 * then stops, and records the unit in `fail_unit` so that the others do not
 * start units after it (the consumer will never read past it).  When the
 * consumer reaches the result it stops and joins every worker, then returns
 * the error with "open_files: epoch E, sample S: " in front.  Under
 * SL_CORRUPT_SKIP_CHUNK a corrupt chunk's result is an ECORRUPT the consumer
 * counts and skips; because the consumer does the counting, in plan order,
 * the pass fails at the same place for any T.
 *
 * Shard sets.  Construction refuses a mixed shard set (files of two pack
 * runs under one name, src/open/shard_set.c) before any worker starts.
 *
 * Changed files.  Construction reads every file's index and records its
 * identity (device, inode, size, mtime); a worker opens a file on first use
 * and again after closing it (past 64 open files), and checks that it is
 * still that file - same chunk count, same schema, same identity - before
 * reading it: a replaced file fails with its name (SL_ECORRUPT), never
 * yields records of another schema or layout.
 *
 * Queues (one mutex, two conditions each, as the channel).  A result is
 * admitted when the queue holds no samples or the total stays within `cap`,
 * so a chunk larger than the budget still passes alone.  `live` counts the
 * workers that may still push: a consumer finding the queue empty with no
 * live producer reports an internal error instead of waiting forever.
 *
 * Stop (reset, destroy, delivered error) is flag, wake, join: set `stop`,
 * mark every queue stopped and broadcast (a worker blocked in push wakes and
 * gives up; one inside a chunk decode finishes it and then gives up), join
 * all threads, then free every queued result.  Reset then recomputes the
 * plan for the next epoch and starts fresh workers; destroy frees
 * everything.
 *
 * Ownership and threads:
 *   files, paths, counts, ids, schema, T, buffer, options   immutable after
 *               construction.
 *   plan        written by the consumer only while no worker runs (build,
 *               reset); read-only to workers; thread create and join order
 *               the two.
 *   worker.fh, used, nopen, clock   the worker's file handles: its thread
 *               only while it runs, the consumer otherwise (destroy).
 *   queues      protected by their mutex (head, tail, samples, stopped,
 *               live); cap immutable.
 *   stop, next_unit, fail_unit      atomics.
 *   cur, pos, gbuf, glen, gpos, group, popped, delivered, bad, pass,
 *   running     consumer-only.
 */
#include "open/registry.h"
#include "open/shard_set.h"
#include "io/slr_file.h"
#include "io/source.h"
#include "open/epoch_plan.h"
#include "readers/reader_impl.h"

#include <pthread.h>

#define MAX_THREADS 1024
#define DEFAULT_BUFFER 1024
/* File handles a worker keeps open; past this the least recently used is
 * closed, so thousands of shards times T workers stay under fd limits. */
#define MAX_OPEN_PER_WORKER 64

/* The samples of one unit, or its error. */
typedef struct result {
  struct result *next;
  size_t unit;    /* index in the plan */
  uint32_t n;     /* samples in s (0 on error) */
  int rc;         /* SL_OK, or the unit's error code */
  char *msg;      /* the error's message (heap), NULL if none or no memory */
  sl_sample *s[]; /* owned; slots set to NULL once handed on */
} result;

typedef struct rqueue {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  result *head, *tail; /* mu */
  size_t samples;      /* mu: samples in the queued results */
  size_t cap;          /* immutable */
  int live;            /* mu: workers that may still push here */
  bool stopped;        /* mu: the consumer is stopping the workers */
} rqueue;

struct of_state;

typedef struct worker {
  struct of_state *o;
  size_t id;
  pthread_t thread;
  bool running; /* consumer-only: started and not joined */
  rqueue *q;    /* where results go: &own (ordered) or the shared queue */
  rqueue own;
  sl_slr_file **fh; /* [nfiles] open handles, NULL where closed */
  uint64_t *used;   /* [nfiles] last use, for closing the least recent */
  size_t nopen;
  uint64_t clock;
  result *spare; /* reported when a result cannot be allocated */
} worker;

typedef struct of_state {
  size_t nfiles;
  char **paths;
  sl__plan_file *pf; /* chunk record counts per file */
  sl__file_id *ids;  /* each file as construction read it */
  sl_schema *schema; /* the reader's (file 0's), retained */
  sl_slr_open_opts slr;
  uint32_t max_bad;
  size_t T, buffer;
  bool unordered;
  sl__plan_params params; /* params.epoch is the current pass's */
  uint64_t epoch0, pass;
  sl__plan plan;
  worker *w; /* [T] */
  rqueue shared;
  atomic_bool stop;
  atomic_size_t next_unit; /* unordered: the next unit to take */
  atomic_size_t fail_unit; /* the first unit that failed, SIZE_MAX if none */
  sl__stage_counters stats; /* busy: decoding units; wait_down: full queue */
  /* consumer-only */
  result *cur;
  uint32_t pos;
  sl_sample **gbuf;
  size_t gcap, glen, gpos;
  size_t group, popped;
  uint64_t delivered, bad;
} of_state;

/* --- results and queues ----------------------------------------------------
 */

static void result_free(result *r) {
  if (!r) return;
  for (uint32_t i = 0; i < r->n; i++)
    sl_sample_release(r->s[i]);
  sl__free(r->msg);
  sl__free(r);
}

static void queue_init(rqueue *q, size_t cap) {
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->not_empty, NULL);
  pthread_cond_init(&q->not_full, NULL);
  q->cap = cap;
}

/* Frees what is queued.  No worker may be running. */
static void queue_clear(rqueue *q) {
  while (q->head) {
    result *r = q->head;
    q->head = r->next;
    result_free(r);
  }
  q->tail = NULL;
  q->samples = 0;
  q->live = 0;
  q->stopped = false;
}

static void queue_destroy(rqueue *q) {
  queue_clear(q);
  pthread_cond_destroy(&q->not_empty);
  pthread_cond_destroy(&q->not_full);
  pthread_mutex_destroy(&q->mu);
}

/* Appends r, waiting for room.  false: the consumer is stopping (the caller
 * still owns r). */
static bool queue_push(rqueue *q, result *r) {
  pthread_mutex_lock(&q->mu);
  while (!q->stopped && q->samples > 0 && q->samples + r->n > q->cap)
    pthread_cond_wait(&q->not_full, &q->mu);
  bool ok = !q->stopped;
  if (ok) {
    r->next = NULL;
    if (q->tail)
      q->tail->next = r;
    else
      q->head = r;
    q->tail = r;
    q->samples += r->n;
    pthread_cond_signal(&q->not_empty);
  }
  pthread_mutex_unlock(&q->mu);
  return ok;
}

/* The oldest result, waiting for one; NULL when none can come any more. */
static result *queue_pop(rqueue *q) {
  pthread_mutex_lock(&q->mu);
  while (!q->head && q->live > 0)
    pthread_cond_wait(&q->not_empty, &q->mu);
  result *r = q->head;
  if (r) {
    q->head = r->next;
    if (!q->head) q->tail = NULL;
    q->samples -= r->n;
    /* Several producers may wait on the shared queue. */
    pthread_cond_broadcast(&q->not_full);
  }
  pthread_mutex_unlock(&q->mu);
  return r;
}

/* A worker leaves: the consumer must not wait on it any more. */
static void queue_leave(rqueue *q) {
  pthread_mutex_lock(&q->mu);
  q->live--;
  pthread_cond_broadcast(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

static void queue_stop(rqueue *q) {
  pthread_mutex_lock(&q->mu);
  q->stopped = true;
  pthread_cond_broadcast(&q->not_full);
  pthread_mutex_unlock(&q->mu);
}

/* --- workers ---------------------------------------------------------------
 */

static void close_file(worker *w, size_t f) {
  sl_slr_close(w->fh[f]);
  w->fh[f] = NULL;
  w->nopen--;
}

/* Opens file f, with its identity (device, inode, size, mtime) as opened. */
static int open_file(const of_state *o, size_t f, sl_slr_file **h,
                     sl__file_id *id) {
  sl__source *src;
  SL_FORWARD_IF_ERROR(sl__source_open_file(o->paths[f], &src));
  *id = src->id;
  return sl__slr_open_source(src, &o->slr, h); /* takes src */
}

/* Whether handle h, just opened, is still the file construction read: the
 * plan was made from that index and the reader declares that schema, so a
 * file replaced since must not be read (record numbers would point past the
 * chunks, or samples would carry another schema).  The identity check also
 * catches a replacement of the same layout and schema but other records. */
static int check_unchanged(const of_state *o, size_t f, sl_slr_file *h,
                           const sl__file_id *id) {
  const char *path = o->paths[f];
  if (sl_slr_chunks(h) != o->pf[f].nchunks)
    return sl_set_error(SL_ECORRUPT,
                        "%s: the file changed since open_files read it (%llu "
                        "chunks then, %llu now)",
                        path, (unsigned long long)o->pf[f].nchunks,
                        (unsigned long long)sl_slr_chunks(h));
  if (!sl_schema_equal(sl_slr_schema(h), o->schema)) {
    char then[256], now[256];
    sl_schema_describe(o->schema, then, sizeof then);
    sl_schema_describe(sl_slr_schema(h), now, sizeof now);
    return sl_set_error(SL_ECORRUPT,
                        "%s: the file changed since open_files read it "
                        "(schema %s then, %s now)",
                        path, then, now);
  }
  if (!sl__file_id_equal(id, &o->ids[f]))
    return sl_set_error(
        SL_ECORRUPT,
        "%s: the file changed since open_files read it (it was replaced or "
        "rewritten: inode %llu, %llu bytes, mtime %lld.%09lld then; inode "
        "%llu, %llu bytes, mtime %lld.%09lld now)",
        path, (unsigned long long)o->ids[f].ino,
        (unsigned long long)o->ids[f].size, (long long)o->ids[f].mtime_s,
        (long long)o->ids[f].mtime_ns, (unsigned long long)id->ino,
        (unsigned long long)id->size, (long long)id->mtime_s,
        (long long)id->mtime_ns);
  return SL_OK;
}

/* The worker's handle of file f, opened on first use (and again after the
 * least recently used handles were closed), checked to be the file
 * construction read. */
static int get_file(worker *w, size_t f, sl_slr_file **out) {
  of_state *o = w->o;
  w->used[f] = ++w->clock;
  if (w->fh[f]) {
    *out = w->fh[f];
    return SL_OK;
  }
  if (w->nopen == MAX_OPEN_PER_WORKER) {
    size_t lru = SIZE_MAX;
    for (size_t i = 0; i < o->nfiles; i++)
      if (w->fh[i] && (lru == SIZE_MAX || w->used[i] < w->used[lru])) lru = i;
    close_file(w, lru);
  }
  sl_slr_file *h;
  sl__file_id id;
  SL_FORWARD_IF_ERROR(open_file(o, f, &h, &id));
  int rc = check_unchanged(o, f, h, &id);
  if (rc < 0) {
    sl_slr_close(h);
    return rc;
  }
  w->fh[f] = h;
  w->nopen++;
  *out = h;
  return SL_OK;
}

/* Decodes unit k.  Never NULL: on failure the result carries the error. */
static result *process(worker *w, size_t k) {
  of_state *o = w->o;
  const sl__plan_unit *u = &o->plan.units[k];
  result *r = sl__malloc(sizeof *r + (size_t)u->count * sizeof(sl_sample *));
  int rc = SL_OK;
  if (!r) {
    r = w->spare;
    w->spare = NULL;
    rc =
        sl_set_error(SL_ENOMEM,
                     "open_files: cannot allocate the %u samples "
                     "of chunk %llu of %s",
                     u->count, (unsigned long long)u->chunk, o->paths[u->file]);
  }
  r->next = NULL;
  r->unit = k;
  r->n = 0;
  r->rc = SL_OK;
  r->msg = NULL;
  sl_slr_file *f = NULL;
  const slr_chunk *ch = NULL;
  if (rc == SL_OK) rc = get_file(w, u->file, &f);
  if (rc == SL_OK) rc = sl__slr_load_chunk(f, u->chunk, &ch);
  if (rc == SL_OK && ch->records != o->pf[u->file].records[u->chunk])
    rc = sl_set_error(SL_ECORRUPT,
                      "%s: chunk %llu: the file changed since open_files "
                      "read it (%u records then, %u now)",
                      o->paths[u->file], (unsigned long long)u->chunk,
                      o->pf[u->file].records[u->chunk], ch->records);
  for (uint32_t j = 0; j < u->count && rc == SL_OK; j++) {
    uint32_t rec = u->recs ? u->recs[j] : u->first + j;
    rc = sl__slr_chunk_record(f, ch, rec, &r->s[j]);
    if (rc == SL_OK) r->n++;
  }
  if (rc < 0) {
    for (uint32_t j = 0; j < r->n; j++)
      sl_sample_release(r->s[j]);
    r->n = 0;
    r->rc = rc;
    r->msg = sl__error_dup();
  }
  return r;
}

static bool skippable(const of_state *o, int rc) {
  return rc == SL_ECORRUPT && o->slr.policy == SL_CORRUPT_SKIP_CHUNK;
}

/* fail_unit = min(fail_unit, k). */
static void note_failure(of_state *o, size_t k) {
  size_t cur = atomic_load(&o->fail_unit);
  while (k < cur && !atomic_compare_exchange_weak(&o->fail_unit, &cur, k)) {
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  of_state *o = w->o;
#if defined(__linux__)
  (void)pthread_setname_np(pthread_self(), "sl-open-files");
#endif
  size_t n = o->plan.nunits;
  for (size_t k = w->id;; k += o->T) {
    if (o->unordered) k = atomic_fetch_add(&o->next_unit, 1);
    if (k >= n || atomic_load(&o->stop) || k > atomic_load(&o->fail_unit))
      break;
    uint64_t t0 = sl__stat_start();
    result *r = process(w, k);
    sl__stat_since(&o->stats.busy_ns, t0);
    bool fatal = r->rc < 0 && !skippable(o, r->rc);
    if (fatal) note_failure(o, k);
    t0 = sl__stat_start();
    bool pushed = queue_push(w->q, r);
    sl__stat_since(&o->stats.wait_down_ns, t0);
    if (!pushed) {
      result_free(r);
      break;
    }
    if (fatal) break;
  }
  queue_leave(w->q);
  return NULL;
}

static void stop_workers(of_state *o) {
  atomic_store(&o->stop, true);
  queue_stop(&o->shared);
  for (size_t i = 0; i < o->T; i++)
    queue_stop(&o->w[i].own);
  for (size_t i = 0; i < o->T; i++) {
    if (!o->w[i].running) continue;
    pthread_join(o->w[i].thread, NULL);
    o->w[i].running = false;
  }
  queue_clear(&o->shared);
  for (size_t i = 0; i < o->T; i++)
    queue_clear(&o->w[i].own);
}

/* Releases what the consumer holds of the current pass. */
static void drop_consumer(of_state *o) {
  result_free(o->cur);
  o->cur = NULL;
  o->pos = 0;
  for (size_t i = o->gpos; i < o->glen; i++)
    sl_sample_release(o->gbuf[i]);
  o->glen = o->gpos = 0;
}

static int start_workers(of_state *o) {
  atomic_store(&o->stop, false);
  atomic_store(&o->next_unit, 0);
  atomic_store(&o->fail_unit, SIZE_MAX);
  o->group = o->popped = 0;
  o->delivered = o->bad = 0;
  for (size_t i = 0; i < o->T; i++) {
    worker *w = &o->w[i];
    if (!w->spare) w->spare = sl__malloc(sizeof(result));
    if (!w->spare) {
      stop_workers(o);
      return sl_set_error(SL_ENOMEM, "open_files: cannot allocate a worker");
    }
    w->q = o->unordered ? &o->shared : &w->own;
    pthread_mutex_lock(&w->q->mu);
    w->q->live++;
    pthread_mutex_unlock(&w->q->mu);
    int err = pthread_create(&w->thread, NULL, worker_main, w);
    if (err) {
      pthread_mutex_lock(&w->q->mu);
      w->q->live--;
      pthread_mutex_unlock(&w->q->mu);
      stop_workers(o);
      return sl_set_error(SL_ENOMEM,
                          "open_files: cannot start worker thread %zu: %s", i,
                          strerror(err));
    }
    w->running = true;
  }
  return SL_OK;
}

/* --- the consumer ----------------------------------------------------------
 */

/* Turns a failed result into the pass's error: stops every worker first. */
static int fail_with(of_state *o, result *r) {
  int rc;
  const char *msg = r->msg ? r->msg : sl_strerror(r->rc);
  if (skippable(o, r->rc))
    rc = sl_set_error(SL_ECORRUPT,
                      "open_files: epoch %llu, sample %llu: %llu corrupt "
                      "chunks skipped, more than the cap of %u; last: %s",
                      (unsigned long long)o->params.epoch,
                      (unsigned long long)o->delivered,
                      (unsigned long long)o->bad, o->max_bad, msg);
  else
    rc = sl_set_error(r->rc, "open_files: epoch %llu, sample %llu: %s",
                      (unsigned long long)o->params.epoch,
                      (unsigned long long)o->delivered, msg);
  result_free(r);
  drop_consumer(o);
  stop_workers(o);
  return rc;
}

/* 1: use r; 0: r was a skipped corrupt chunk (freed); < 0: the error. */
static int accept(of_state *o, result *r) {
  if (r->rc == SL_OK) return 1;
  if (skippable(o, r->rc) && ++o->bad <= o->max_bad) {
    result_free(r);
    return 0;
  }
  return fail_with(o, r);
}

static result *take(of_state *o, rqueue *q, size_t unit) {
  result *r = queue_pop(q);
  if (!r) {
    sl_set_error(SL_ESTATE,
                 "open_files: epoch %llu: the result of unit %zu never came "
                 "(internal error)",
                 (unsigned long long)o->params.epoch, unit);
    drop_consumer(o);
    stop_workers(o);
  }
  assert(!r || o->unordered || r->unit == unit);
  return r;
}

/* Unordered: the next result to arrive. */
static int load_any(of_state *o) {
  if (o->popped == o->plan.nunits) return SL_EOF;
  result *r = take(o, &o->shared, o->popped);
  if (!r) return SL_ESTATE;
  o->popped++;
  int rc = accept(o, r);
  if (rc == 1) o->cur = r;
  return rc < 0 ? rc : SL_OK;
}

/* Ordered: the next group, as `cur` (one unit) or scattered into gbuf. */
static int load_group(of_state *o) {
  if (o->group == o->plan.ngroups) return SL_EOF;
  const sl__plan_group *g = &o->plan.groups[o->group++];
  if (g->nunits == 1) {
    result *r = take(o, &o->w[g->first_unit % o->T].own, g->first_unit);
    if (!r) return SL_ESTATE;
    int rc = accept(o, r);
    if (rc == 1) o->cur = r;
    return rc < 0 ? rc : SL_OK;
  }
  if (g->records > o->gcap) {
    sl_sample **b = sl__realloc(o->gbuf, (size_t)g->records * sizeof *b);
    if (!b) {
      drop_consumer(o);
      stop_workers(o);
      return sl_set_error(SL_ENOMEM,
                          "open_files: cannot allocate a window of %llu "
                          "samples",
                          (unsigned long long)g->records);
    }
    o->gbuf = b;
    o->gcap = (size_t)g->records;
  }
  memset(o->gbuf, 0, (size_t)g->records * sizeof *o->gbuf);
  o->glen = (size_t)g->records; /* holes (skipped chunks) stay NULL */
  o->gpos = 0;
  for (size_t k = g->first_unit; k < g->first_unit + g->nunits; k++) {
    result *r = take(o, &o->w[k % o->T].own, k);
    if (!r) return SL_ESTATE;
    int rc = accept(o, r);
    if (rc < 0) return rc;
    if (rc == 0) continue;
    const uint32_t *slots = o->plan.units[k].slots;
    for (uint32_t j = 0; j < r->n; j++) {
      o->gbuf[slots[j]] = r->s[j];
      r->s[j] = NULL;
    }
    r->n = 0;
    result_free(r);
  }
  return SL_OK;
}

static int of_next(void *st, sl_sample **out) {
  of_state *o = st;
  for (;;) {
    if (o->cur) {
      if (o->pos < o->cur->n) {
        *out = o->cur->s[o->pos];
        o->cur->s[o->pos++] = NULL;
        o->delivered++;
        return SL_OK;
      }
      o->cur->n = 0; /* every slot was handed on */
      result_free(o->cur);
      o->cur = NULL;
      o->pos = 0;
    }
    while (o->gpos < o->glen) {
      sl_sample *s = o->gbuf[o->gpos];
      o->gbuf[o->gpos++] = NULL;
      if (s) {
        *out = s;
        o->delivered++;
        return SL_OK;
      }
    }
    o->glen = o->gpos = 0;
    int rc = o->unordered ? load_any(o) : load_group(o);
    if (rc != SL_OK) return rc;
  }
}

static int build_plan(of_state *o) {
  sl__plan_free(&o->plan);
  return sl__plan_build(o->pf, o->nfiles, &o->params, &o->plan);
}

static int of_reset(void *st) {
  of_state *o = st;
  stop_workers(o);
  drop_consumer(o);
  o->pass++;
  o->params.epoch = o->epoch0 + o->pass;
  SL_FORWARD_IF_ERROR(build_plan(o));
  return start_workers(o);
}

static void of_destroy(void *st) {
  of_state *o = st;
  if (!o) return;
  if (o->w) {
    stop_workers(o);
    for (size_t i = 0; i < o->T; i++) {
      worker *w = &o->w[i];
      for (size_t f = 0; w->fh && f < o->nfiles; f++)
        if (w->fh[f]) close_file(w, f);
      sl__free(w->fh);
      sl__free(w->used);
      sl__free(w->spare);
      queue_destroy(&w->own);
    }
    sl__free(o->w);
  }
  drop_consumer(o);
  queue_destroy(&o->shared);
  sl__free(o->gbuf);
  sl__plan_free(&o->plan);
  for (size_t f = 0; f < o->nfiles; f++) {
    if (o->paths) sl__free(o->paths[f]);
    if (o->pf) sl__free((void *)o->pf[f].records);
  }
  sl__free(o->paths);
  sl__free(o->pf);
  sl__free(o->ids);
  sl_schema_release(o->schema);
  sl__free(o);
}

/* This rank's records per pass; not known under skip_chunk. */
static int of_length(const sl_reader *r, void *st, uint64_t *n) {
  const of_state *o = st;
  SL_RETURN_ERROR_IF(o->slr.policy == SL_CORRUPT_SKIP_CHUNK, SL_EUNSUPPORTED,
                     "open_files: under policy skip_chunk a pass may yield "
                     "fewer than its %llu records",
                     (unsigned long long)o->plan.records);
  *n = o->plan.records;
  return SL_OK;
}

static const sl_reader_vtable of_vt = {"open_files", of_next, of_reset,
                                       of_destroy};

/* --- construction ----------------------------------------------------------
 */

static int check_opts(sl_open_files_opts *p) {
  SL_RETURN_ERROR_IF(p->threads > MAX_THREADS, SL_EINVAL,
                     "open_files: threads must be at most %d, got %u",
                     MAX_THREADS, p->threads);
  SL_RETURN_ERROR_IF(
      p->remainder != SL_SHARD_PAD && p->remainder != SL_SHARD_DROP &&
          p->remainder != SL_SHARD_UNEVEN,
      SL_EINVAL, "open_files: unknown remainder policy %d", (int)p->remainder);
  SL_RETURN_ERROR_IF(p->slr.policy != SL_CORRUPT_FAIL &&
                         p->slr.policy != SL_CORRUPT_SKIP_CHUNK,
                     SL_EINVAL, "open_files: unknown corruption policy %d",
                     (int)p->slr.policy);
  if (p->world <= 0) {
    SL_FORWARD_IF_ERROR(sl_shard_env(&p->rank, &p->world));
  } else {
    SL_RETURN_ERROR_IF(p->rank < 0 || p->rank >= p->world, SL_EINVAL,
                       "open_files: rank %d is not in [0, world %d)", p->rank,
                       p->world);
  }
  if (p->threads == 0) p->threads = 1;
  if (p->buffer == 0) p->buffer = DEFAULT_BUFFER;
  if (p->window == 0) p->window = 1;
  return SL_OK;
}

/* Opens file f once to read its index; checks its schema against the
 * first file's (*schema, retained from file 0) and keeps it retained in
 * *keep (for the shard set check). */
static int read_index(of_state *o, size_t f, sl_schema **schema,
                      sl_schema **keep) {
  sl_slr_file *h;
  SL_FORWARD_IF_ERROR(open_file(o, f, &h, &o->ids[f]));
  int rc = SL_OK;
  const sl_schema *s = sl_slr_schema(h);
  *keep = sl_schema_retain((sl_schema *)s);
  if (f == 0) {
    *schema = sl_schema_retain((sl_schema *)s);
    o->schema = sl_schema_retain((sl_schema *)s);
  } else if (!sl_schema_equal(*schema, s)) {
    char a[256], b[256];
    sl_schema_describe(s, a, sizeof a);
    sl_schema_describe(*schema, b, sizeof b);
    rc = sl_set_error(SL_ESHAPE,
                      "open_files: %s has schema %s, but %s (the first file) "
                      "has %s",
                      o->paths[f], a, o->paths[0], b);
  }
  uint64_t nc = sl_slr_chunks(h);
  uint32_t *recs = NULL;
  if (rc == SL_OK && nc > SIZE_MAX / sizeof *recs)
    rc =
        sl_set_error(SL_ENOMEM, "open_files: %s: too many chunks", o->paths[f]);
  if (rc == SL_OK) {
    recs = sl__malloc((size_t)(nc ? nc : 1) * sizeof *recs);
    if (!recs)
      rc = sl_set_error(SL_ENOMEM, "open_files: %s: cannot allocate the index",
                        o->paths[f]);
  }
  for (uint64_t c = 0; rc == SL_OK && c < nc; c++) {
    uint64_t first;
    sl__slr_chunk_span(h, c, &first, &recs[c]);
  }
  if (rc == SL_OK) {
    o->pf[f].nchunks = nc;
    o->pf[f].records = recs;
  } else {
    sl__free(recs);
  }
  sl_slr_close(h);
  return rc;
}

/* Every file's index, then the shard set check over their metadata: a
 * mixed set (two pack runs under one name) is refused before any record is
 * read (src/open/shard_set.c). */
static int read_indexes(of_state *o, sl_schema **schema) {
  sl_schema **keep = sl__calloc(o->nfiles, sizeof *keep);
  SL_RETURN_ERROR_IF(!keep, SL_ENOMEM, "open_files: cannot allocate %zu files",
                     o->nfiles);
  int rc = SL_OK;
  for (size_t f = 0; f < o->nfiles && rc == SL_OK; f++)
    rc = read_index(o, f, schema, &keep[f]);
  if (rc == SL_OK)
    rc = sl__shard_set_check("open_files", (const char *const *)o->paths,
                             (const sl_schema *const *)keep, o->nfiles);
  for (size_t f = 0; f < o->nfiles; f++)
    sl_schema_release(keep[f]);
  sl__free(keep);
  return rc;
}

static int make_state(const sl_open_files_opts *p, sl__named_file *files,
                      size_t nfiles, of_state **out, sl_schema **schema) {
  of_state *o = sl__calloc(1, sizeof *o);
  SL_RETURN_ERROR_IF(!o, SL_ENOMEM, "open_files: cannot allocate");
  *out = o;
  queue_init(&o->shared, (size_t)p->buffer * p->threads);
  atomic_init(&o->stop, false);
  atomic_init(&o->next_unit, 0);
  atomic_init(&o->fail_unit, SIZE_MAX);
  o->slr = p->slr;
  o->max_bad = p->slr.max_bad_chunks ? p->slr.max_bad_chunks : 16;
  o->T = p->threads;
  o->buffer = p->buffer;
  o->unordered = p->unordered != 0;
  o->epoch0 = p->epoch;
  o->params = (sl__plan_params){p->seed, p->epoch, p->shuffle != 0, p->window,
                                p->rank, p->world, p->remainder};
  o->paths = sl__calloc(nfiles, sizeof *o->paths);
  o->pf = sl__calloc(nfiles, sizeof *o->pf);
  o->ids = sl__calloc(nfiles, sizeof *o->ids);
  SL_RETURN_ERROR_IF(!o->paths || !o->pf || !o->ids, SL_ENOMEM,
                     "open_files: cannot allocate %zu files", nfiles);
  o->nfiles = nfiles;
  for (size_t f = 0; f < nfiles; f++) { /* take the expanded paths */
    o->paths[f] = files[f].path;
    files[f].path = NULL;
  }
  SL_FORWARD_IF_ERROR(read_indexes(o, schema));
  SL_FORWARD_IF_ERROR(build_plan(o));
  o->w = sl__calloc(o->T, sizeof *o->w);
  SL_RETURN_ERROR_IF(!o->w, SL_ENOMEM,
                     "open_files: cannot allocate %zu "
                     "workers",
                     o->T);
  for (size_t i = 0; i < o->T; i++) /* first, so destroy can count on them */
    queue_init(&o->w[i].own, o->buffer);
  for (size_t i = 0; i < o->T; i++) {
    worker *w = &o->w[i];
    w->o = o;
    w->id = i;
    w->fh = sl__calloc(nfiles, sizeof *w->fh);
    w->used = sl__calloc(nfiles, sizeof *w->used);
    SL_RETURN_ERROR_IF(!w->fh || !w->used, SL_ENOMEM,
                       "open_files: cannot allocate worker %zu", i);
  }
  return SL_OK;
}

int sl_open_files(const char *const *names, size_t n,
                  const sl_open_files_opts *opts, sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "open_files: NULL out pointer");
  *out = NULL;
  sl_open_files_opts p = SL_OPEN_FILES_OPTS_INIT;
  if (opts)
    SL_FORWARD_IF_ERROR(
        sl__opts_copy("sl_open_files_opts", &p, sizeof p, opts));
  SL_FORWARD_IF_ERROR(check_opts(&p));
  sl__named_file *files;
  size_t nfiles;
  SL_FORWARD_IF_ERROR(
      sl__names_expand("open_files", names, n, &files, &nfiles));
  for (size_t f = 0; f < nfiles; f++) {
    if (strcmp(files[f].tag, "slr") != 0) {
      int rc = sl_set_error(SL_EUNSUPPORTED,
                            "open_files: %s has format '%s', but only slr "
                            "files can be read in parallel (the epoch plan "
                            "needs their index of chunks and records)",
                            files[f].path, files[f].tag);
      sl__named_files_free(files, nfiles);
      return rc;
    }
  }
  of_state *o = NULL;
  sl_schema *schema = NULL;
  int rc = make_state(&p, files, nfiles, &o, &schema);
  sl__named_files_free(files, nfiles);
  if (rc < 0) {
    of_destroy(o);
    sl_schema_release(schema);
    return rc;
  }
  rc = sl__reader_make(&of_vt, o, schema, out); /* destroys o on failure */
  sl_schema_release(schema);
  if (rc < 0) return rc;
  o->stats.threads = (int)o->T;
  sl__reader_link(*out, NULL, 0, &o->stats);
  sl__reader_set_length(*out, of_length);
  rc = start_workers(o);
  if (rc < 0) {
    sl_reader_destroy(*out);
    *out = NULL;
  }
  return rc;
}
