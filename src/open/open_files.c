/*
 * open_files.c - sl_open_files: several SLR files read by T worker threads
 * following the epoch plan (epoch_plan.c), delivered as one reader.
 *
 * Work.  The plan is a list of units (some records of one chunk) grouped by
 * shuffle window.  The units are the items of a parallel-stage engine
 * (sync/engine.h) with a process_many callback: pull hands out unit numbers
 * (no upstream: each item is NULL and its sequence number is the unit's
 * index), a worker processes unit k by decoding its chunk with its own file
 * handles (one zstd context per open file per worker) and making every
 * sample the unit needs, and the unit's samples travel together as one
 * result, so a hand-off moves a chunk's worth of samples and the consumer's
 * per-sample cost is an array read.  The engine's window counts units; it
 * is sized from `buffer` and the largest chunk (window_units).
 *
 * Ordered mode (the default).  The engine delivers units in plan order
 * whatever the threads' timing, so the output is the same for any T.  A
 * unit alone in its group is delivered as it stands; the units of a group
 * of several (a shuffle window wider than one chunk) are scattered into the
 * group buffer by their slots, restoring the window's permuted order.
 *
 * Unordered mode.  The engine delivers units as they are finished; their
 * samples go out in arrival order.
 *
 * Errors.  A unit that fails is the engine's error at its position: the
 * samples of every unit before it are delivered first (a group it belongs
 * to is dropped: its samples are interleaved), then the error with
 * "open_files: epoch E, sample S: " in front.  Under SL_CORRUPT_SKIP_CHUNK a
 * corrupt chunk is an SL__ENGINE_SKIP item, which the engine hands to
 * of_skipped on the consumer's thread in delivery order: it counts it and
 * fails the pass past max_bad, so the pass fails at the same place for any
 * T.
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
 * Stop (reset, destroy) is the engine's: flag, wake, join, release what
 * was not delivered.  Reset then recomputes the plan for the next epoch and
 * starts the workers again; destroy closes the workers' files
 * (worker_fini) and frees everything.
 *
 * Ownership and threads:
 *   files, paths, counts, ids, schema, T, buffer, options   immutable after
 *               construction.
 *   plan        written by the consumer only while no worker runs (build,
 *               reset); read-only to workers; thread create and join order
 *               the two.
 *   worker.fh, used, nopen, clock   the worker's file handles (its
 *               engine context): its thread only while it runs, the
 *               destroying thread in worker_fini.
 *   next_unit   the engine's pull turn (one worker at a time), the consumer
 *               while the engine is stopped.
 *   cur, pos, pend, gbuf, glen, gpos, group, seen, delivered, bad, pass
 *               consumer-only (of_skipped runs on the consumer's thread).
 */
#include "open/registry.h"
#include "open/shard_set.h"
#include "io/slr_file.h"
#include "io/source.h"
#include "open/epoch_plan.h"
#include "readers/reader_impl.h"
#include "sync/engine.h"

#define MAX_THREADS SL__THREADS_HARD_MAX
#define DEFAULT_BUFFER 1024
/* File handles a worker keeps open; past this the least recently used is
 * closed, so thousands of shards times T workers stay under fd limits. */
#define MAX_OPEN_PER_WORKER 64

/* A worker's engine context: its file handles. */
typedef struct worker {
  sl_slr_file **fh; /* [nfiles] open handles, NULL where closed */
  uint64_t *used;   /* [nfiles] last use, for closing the least recent */
  size_t nopen;
  uint64_t clock;
} worker;

/* A unit's samples as the engine hands them over: v[pos, n) still owned. */
typedef struct unit_out {
  sl_sample **v; /* heap, NULL when none is held */
  size_t n, pos;
  uint64_t seq; /* the unit */
} unit_out;

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
  sl__engine *eng;
  size_t next_unit; /* the pull turn's: the next unit to hand out */
  /* consumer-only */
  unit_out cur;  /* the unit being delivered */
  unit_out pend; /* taken from the engine, not yet placed */
  sl_sample **gbuf;
  size_t gcap, glen, gpos;
  size_t group;
  uint64_t seen; /* units delivered or skipped, ordered: all below it */
  uint64_t delivered, bad;
} of_state;

static void unit_out_free(unit_out *u) {
  for (size_t i = u->pos; i < u->n; i++)
    sl_sample_release(u->v[i]);
  sl__free(u->v);
  memset(u, 0, sizeof *u);
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
static int get_file(of_state *o, worker *w, size_t f, sl_slr_file **out) {
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

static bool skippable(const of_state *o, int rc) {
  return rc == SL_ECORRUPT && o->slr.policy == SL_CORRUPT_SKIP_CHUNK;
}

/* The engine's pull: the next unit number (as a NULL item), or the end. */
static int of_pull(void *ud, sl_sample **out) {
  of_state *o = ud;
  if (o->next_unit >= o->plan.nunits) return SL_EOF;
  o->next_unit++;
  *out = NULL;
  return SL_OK;
}

static int of_worker_init(void *ud, int index, void **wctx) {
  of_state *o = ud;
  worker *w = sl__calloc(1, sizeof *w);
  if (w) {
    w->fh = sl__calloc(o->nfiles, sizeof *w->fh);
    w->used = sl__calloc(o->nfiles, sizeof *w->used);
  }
  if (!w || !w->fh || !w->used) {
    if (w) {
      sl__free(w->fh);
      sl__free(w->used);
    }
    sl__free(w);
    return sl_set_error(SL_ENOMEM, "open_files: cannot allocate worker %d",
                        index);
  }
  *wctx = w;
  return SL_OK;
}

static void of_worker_fini(void *ud, int index, void *wctx) {
  of_state *o = ud;
  worker *w = wctx;
  SL_UNUSED(index);
  for (size_t f = 0; f < o->nfiles; f++)
    if (w->fh[f]) close_file(w, f);
  sl__free(w->fh);
  sl__free(w->used);
  sl__free(w);
}

/* Decodes unit k (the engine's item k) into *out, *n samples. */
static int of_process(void *ud, void *wctx, uint64_t k, sl_sample *in,
                      sl_sample ***out, size_t *n) {
  of_state *o = ud;
  worker *w = wctx;
  SL_UNUSED(in); /* NULL: the unit is k */
  const sl__plan_unit *u = &o->plan.units[k];
  if (u->count == 0) return SL__ENGINE_DROP;
  sl_sample **v = sl__malloc((size_t)u->count * sizeof *v);
  if (!v)
    return sl_set_error(SL_ENOMEM,
                        "open_files: cannot allocate the %u samples of "
                        "chunk %llu of %s",
                        u->count, (unsigned long long)u->chunk,
                        o->paths[u->file]);
  uint32_t got = 0;
  sl_slr_file *f = NULL;
  const slr_chunk *ch = NULL;
  int rc = get_file(o, w, u->file, &f);
  if (rc == SL_OK) rc = sl__slr_load_chunk(f, u->chunk, &ch);
  if (rc == SL_OK && ch->records != o->pf[u->file].records[u->chunk])
    rc = sl_set_error(SL_ECORRUPT,
                      "%s: chunk %llu: the file changed since open_files "
                      "read it (%u records then, %u now)",
                      o->paths[u->file], (unsigned long long)u->chunk,
                      o->pf[u->file].records[u->chunk], ch->records);
  for (; got < u->count && rc == SL_OK; got++) {
    uint32_t rec = u->recs ? u->recs[got] : u->first + got;
    rc = sl__slr_chunk_record(f, ch, rec, &v[got]);
    if (rc < 0) break;
  }
  if (rc < 0) {
    for (uint32_t j = 0; j < got; j++)
      sl_sample_release(v[j]);
    sl__free(v);
    return skippable(o, rc) ? SL__ENGINE_SKIP : rc; /* message set */
  }
  *out = v;
  *n = got;
  return SL__ENGINE_OUT;
}

/* A skipped corrupt chunk, on the consumer's thread in delivery order:
 * counted, and the end of the pass past max_bad. */
static int of_skipped(void *ud, uint64_t k, const char *note) {
  of_state *o = ud;
  o->seen = k + 1;
  if (++o->bad <= o->max_bad) return SL_OK;
  return sl_set_error(SL_ECORRUPT,
                      "%llu corrupt chunks skipped, more than the cap of %u; "
                      "last: %s",
                      (unsigned long long)o->bad, o->max_bad, note);
}

static const sl__engine_ops of_ops = {of_pull, of_worker_init, of_worker_fini,
                                      NULL, NULL};

/* Releases what the consumer holds of the current pass. */
static void drop_consumer(of_state *o) {
  unit_out_free(&o->cur);
  unit_out_free(&o->pend);
  for (size_t i = o->gpos; i < o->glen; i++)
    sl_sample_release(o->gbuf[i]);
  o->glen = o->gpos = 0;
}

static int start_workers(of_state *o) {
  o->next_unit = 0;
  o->group = 0;
  o->seen = o->delivered = o->bad = 0;
  return sl__engine_start(o->eng);
}

/* --- the consumer ----------------------------------------------------------
 */

/* The next unit's samples into o->pend (unless one is there already):
 * SL_OK, SL_EOF, or the pass's error with the position in front. */
static int take_unit(of_state *o) {
  if (o->pend.v) return SL_OK;
  int rc = sl__engine_next_many(o->eng, &o->pend.v, &o->pend.n, &o->pend.seq);
  if (rc == SL_OK || rc == SL_EOF) return rc;
  drop_consumer(o);
  return sl_wrap_error(rc, "open_files: epoch %llu, sample %llu",
                       (unsigned long long)o->params.epoch,
                       (unsigned long long)o->delivered);
}

/* Ordered: the group of the next unit, as `cur` (a unit alone in its
 * group) or scattered into gbuf. */
static int load_group(of_state *o) {
  SL_FORWARD_IF_ERROR(take_unit(o)); /* SL_EOF too */
  while (o->plan.groups[o->group].first_unit +
             o->plan.groups[o->group].nunits <=
         o->pend.seq)
    o->group++; /* groups whose units were all skipped */
  const sl__plan_group *g = &o->plan.groups[o->group++];
  if (g->nunits == 1) {
    o->cur = o->pend;
    memset(&o->pend, 0, sizeof o->pend);
    o->seen = o->cur.seq + 1;
    return SL_OK;
  }
  if (g->records > o->gcap) {
    sl_sample **b = sl__realloc(o->gbuf, (size_t)g->records * sizeof *b);
    if (!b) {
      drop_consumer(o);
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
  const uint64_t end = g->first_unit + g->nunits;
  /* Every unit of the group is placed or was skipped (of_skipped moves
   * `seen` past it): the next unit taken is then of a later group. */
  while (o->seen < end) {
    int rc = take_unit(o);
    if (rc == SL_EOF) break; /* the group's last units were skipped */
    if (rc < 0) return rc;   /* inside the group: its samples are dropped */
    if (o->pend.seq >= end) break; /* kept for the next group */
    const uint32_t *slots = o->plan.units[o->pend.seq].slots;
    for (size_t j = 0; j < o->pend.n; j++)
      o->gbuf[slots[j]] = o->pend.v[j];
    o->pend.pos = o->pend.n; /* every sample was handed on */
    o->seen = o->pend.seq + 1;
    unit_out_free(&o->pend);
  }
  return SL_OK;
}

/* Unordered: the next unit to arrive. */
static int load_any(of_state *o) {
  SL_FORWARD_IF_ERROR(take_unit(o));
  o->cur = o->pend;
  memset(&o->pend, 0, sizeof o->pend);
  return SL_OK;
}

static int of_next(void *st, sl_sample **out) {
  of_state *o = st;
  for (;;) {
    if (o->cur.pos < o->cur.n) {
      *out = o->cur.v[o->cur.pos++];
      o->delivered++;
      return SL_OK;
    }
    if (o->cur.v) unit_out_free(&o->cur);
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
  sl__engine_stop(o->eng);
  drop_consumer(o);
  o->pass++;
  o->params.epoch = o->epoch0 + o->pass;
  SL_FORWARD_IF_ERROR(build_plan(o));
  return start_workers(o);
}

static void of_destroy(void *st) {
  of_state *o = st;
  if (!o) return;
  sl__engine_destroy(o->eng); /* closes the workers' files */
  drop_consumer(o);
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
  if (p->window == 0) p->window = SL__PLAN_DEFAULT_WINDOW;
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

/* The engine's window, in units: `buffer` decoded samples ready per worker
 * (at least one unit) plus the unit each decodes, counted in the largest
 * chunk, so the samples held stay within T x (buffer + largest chunk) as
 * with a queue of `buffer` samples per worker. */
static size_t window_units(const of_state *o) {
  uint64_t largest = 1;
  for (size_t f = 0; f < o->nfiles; f++)
    for (uint64_t c = 0; c < o->pf[f].nchunks; c++)
      largest = SL_MAX(largest, (uint64_t)o->pf[f].records[c]);
  uint64_t ready = SL_MAX(1, o->buffer / largest);
  return (size_t)SL_MIN(o->T * (1 + ready), (uint64_t)1 << 24);
}

static int make_state(const sl_open_files_opts *p, sl__named_file *files,
                      size_t nfiles, of_state **out, sl_schema **schema) {
  of_state *o = sl__calloc(1, sizeof *o);
  SL_RETURN_ERROR_IF(!o, SL_ENOMEM, "open_files: cannot allocate");
  *out = o;
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
  sl__engine_opts eo = {"open_files", "sl-open-files", (int)o->T, !o->unordered,
                        window_units(o)};
  SL_FORWARD_IF_ERROR(sl__engine_create(&of_ops, o, &eo, &o->eng));
  sl__engine_process_many(o->eng, of_process);
  sl__engine_on_skip(o->eng, of_skipped);
  sl__engine_set_cache(o->eng, 1); /* the window is the exact bound */
  sl__engine_set_spin(o->eng, false); /* a unit is a chunk's decode */
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
  sl__reader_link(*out, NULL, 0, sl__engine_counters(o->eng));
  sl__reader_set_length(*out, of_length);
  rc = start_workers(o);
  if (rc < 0) {
    sl_reader_destroy(*out);
    *out = NULL;
  }
  return rc;
}
