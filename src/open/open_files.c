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
 * Memory budget.  The engine's window of units is charged as a threaded
 * stage's (a unit's samples together), the workers' open files as resident
 * bytes (charge_file).  A unit the consumer takes is its own from then on,
 * delivered sample by sample: the engine's carry of it becomes the
 * account's resident bytes (keep_unit), and each sample handed out moves
 * its bytes from there to the carry (let_go), so the rest of the unit
 * stays counted until it leaves (as the engine's carry alone, it was
 * dropped at the next sample).  Resident, not held: the consumer may wait
 * for the other units of a group while it holds some, and held bytes
 * would make the workers wait for it to hold nothing (the one item a
 * stage holding nothing may take).  drop_consumer releases them.
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
 *   fp          immutable after construction.
 *   segs, skipped, done, partials, log_*   consumer-only (saving).
 *   restored    written by the consumer while no worker runs (restore,
 *               start); read-only to workers during the pass (they drop
 *               the units it holds).
 */
#include "core/crc32c.h"
#include "core/bytes.h"
#include "formats/slr_file.h"
#include "transport/source.h"
#include "formats/epoch_plan.h"
#include "open/registry.h"
#include "open/shard_set.h"
#include "stages/stage.h"
#include "sync/budget.h"
#include "sync/engine.h"

#include <stdlib.h>

#define MAX_THREADS SL__THREADS_HARD_MAX
#define DEFAULT_BUFFER 1024
/* File handles a worker keeps open; past this the least recently used is
 * closed, so thousands of shards times T workers stay under fd limits. */
#define MAX_OPEN_PER_WORKER 64

/* A worker's engine context: its file handles. */
typedef struct worker {
  sl_slr_file **fh; /* [nfiles] open handles, NULL where closed */
  uint64_t *used;   /* [nfiles] last use, for closing the least recent */
  uint64_t *held;   /* [nfiles] its buffers charged to the budget */
  size_t nopen;
  uint64_t clock;
} worker;

/* A unit's samples as the engine hands them over: v[pos, n) still owned. */
typedef struct unit_out {
  sl_sample **v; /* heap, NULL when none is held */
  size_t n, pos;
  uint64_t seq; /* the unit */
} unit_out;

/* A set of unit numbers (unordered saving, below). */
typedef struct done_set {
  uint64_t lo;
  uint64_t *above;
  size_t n, cap;
} done_set;

typedef struct of_state {
  size_t nfiles;
  char **paths;
  sl__plan_file *pf; /* chunk record counts per file */
  sl__file_id *ids;  /* each file as construction read it */
  sl_schema *schema; /* the reader's (file 0's), retained */
  sl_slr_open_opts slr;
  uint32_t max_bad;
  size_t T, buffer; /* T: workers started (auto: sl__threads_auto_max) */
  bool auto_threads; /* threads = SL_THREADS_AUTO: the engine tunes */
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
  uint64_t kept; /* the memory budget: the consumer's samples, resident */
  /* saving (see "Saving" below) */
  uint64_t *fp;   /* [nfiles] each file's fingerprint, as construction read */
  uint64_t *segs; /* the positions of an elastic restore's epoch, or NULL */
  size_t nsegs;
  uint64_t *skipped; /* ordered: units skipped this pass, in order */
  size_t nskipped, skipped_cap;
  /* ordered: the pass before, for a save there (a repeat above reset the
   * reader while the stages above hold its samples): its skipped units
   * and segments; its plan is built again when such a save comes */
  uint64_t *prev_skipped, *prev_segs;
  size_t prev_nskipped, prev_nsegs;
  bool has_prev;
  done_set done;     /* unordered: units fully delivered or skipped */
  done_set restored; /* unordered: done before the restored position
                              (read-only to workers during the pass) */
  /* unordered: the units partly delivered before the restore, not yet
   * reached: pairs (unit, samples delivered) */
  uint64_t *partials;
  size_t npartials, partials_cap;
  sl__state_log log_unit, log_idx; /* unordered: unit and index of each
                                      output */
  uint64_t log_from; /* the first output the logs know (a restored pass) */
} of_state;

static void unit_out_free(unit_out *u) {
  for (size_t i = u->pos; i < u->n; i++)
    sl_sample_release(u->v[i]);
  sl__free(u->v);
  memset(u, 0, sizeof *u);
}

/* --- saving: what an unordered pass delivered ------------------------------
 * A set of unit numbers: every unit below `lo` is done, above[0..n) are the
 * done ones above it (unsorted; at most the engine's window of them). */

static void done_clear(done_set *d, uint64_t lo) {
  d->lo = lo;
  d->n = 0;
}

static void done_free(done_set *d) {
  sl__free(d->above);
  memset(d, 0, sizeof *d);
}

static bool done_take(done_set *d, uint64_t item) {
  for (size_t i = 0; i < d->n; i++)
    if (d->above[i] == item) {
      d->above[i] = d->above[--d->n];
      return true;
    }
  return false;
}

static bool done_has(const done_set *d, uint64_t item) {
  if (item < d->lo) return true;
  for (size_t i = 0; i < d->n; i++)
    if (d->above[i] == item) return true;
  return false;
}

static int done_add(done_set *d, uint64_t item) {
  if (done_has(d, item)) return SL_OK;
  if (item == d->lo) {
    d->lo++;
    while (d->n && done_take(d, d->lo))
      d->lo++;
    return SL_OK;
  }
  return sl__state_push_u64(&d->above, &d->n, &d->cap, item);
}

static bool in_list(const uint64_t *v, size_t n, uint64_t x) {
  for (size_t i = 0; i < n; i++)
    if (v[i] == x) return true;
  return false;
}

static int put_done(sl__state_out *w, const done_set *d, const uint64_t *undo,
                    size_t nundo) {
  uint64_t lo = d->lo, hi = d->lo; /* done items lie in [lo, hi) */
  for (size_t i = 0; i < nundo; i++)
    lo = SL_MIN(lo, undo[i]);
  for (size_t i = 0; i < d->n; i++)
    hi = SL_MAX(hi, d->above[i] + 1);
  /* Items in [lo, d->lo) are done unless undone, so is each of above. */
  uint64_t nbits = hi > lo ? hi - lo : 0;
  SL_RETURN_ERROR_IF(nbits > ((uint64_t)1 << 32), SL_EUNSUPPORTED,
                     "save: %llu items in flight: too many to save",
                     (unsigned long long)nbits);
  size_t nbytes = (size_t)((nbits + 7) / 8);
  unsigned char *bits = sl__calloc(nbytes ? nbytes : 1, 1);
  SL_RETURN_ERROR_IF(!bits, SL_ENOMEM, "save: out of memory");
  for (uint64_t x = lo; x < d->lo; x++)
    if (!in_list(undo, nundo, x))
      bits[(x - lo) / 8] |= (unsigned char)(1u << ((x - lo) % 8));
  for (size_t i = 0; i < d->n; i++) {
    uint64_t x = d->above[i];
    if (!in_list(undo, nundo, x))
      bits[(x - lo) / 8] |= (unsigned char)(1u << ((x - lo) % 8));
  }
  int rc = sl__state_put_u64(w, lo);
  if (rc == SL_OK) rc = sl__state_put_u64(w, nbits);
  if (rc == SL_OK) rc = sl__state_put_bytes(w, bits, nbytes);
  sl__free(bits);
  return rc;
}

static int get_done(sl__state_in *in, done_set *d) {
  uint64_t lo, nbits;
  const void *p;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &lo));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &nbits));
  SL_RETURN_ERROR_IF(nbits > ((uint64_t)1 << 32), SL_ECORRUPT,
                     "restore: corrupt state: %llu items in flight",
                     (unsigned long long)nbits);
  SL_FORWARD_IF_ERROR(sl__state_get_bytes(in, &p, (size_t)((nbits + 7) / 8)));
  const unsigned char *bits = p;
  done_clear(d, lo);
  for (uint64_t i = 0; i < nbits; i++)
    if (bits[i / 8] & (1u << (i % 8))) SL_FORWARD_IF_ERROR(done_add(d, lo + i));
  return SL_OK;
}

/* --- workers ---------------------------------------------------------------
 */

/* The memory budget: a worker's open file f holds its buffers (the
 * compressed payload, the decoded chunk, its pool, the zstd context:
 * sl__slr_held_bytes), charged to the stage's account as resident bytes
 * after each chunk load and released when the file closes. */
static void charge_file(const of_state *o, worker *w, size_t f) {
  sl__budget_acct *a = sl__engine_budget(o->eng);
  uint64_t h = w->fh[f] ? sl__slr_held_bytes(w->fh[f]) : 0;
  if (!a || h == w->held[f]) return;
  sl__budget_resident(a, w->held[f], h);
  w->held[f] = h;
}

static void close_file(const of_state *o, worker *w, size_t f) {
  sl_slr_close(w->fh[f]);
  w->fh[f] = NULL;
  w->nopen--;
  charge_file(o, w, f);
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
    close_file(o, w, lru);
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
    w->held = sl__calloc(o->nfiles, sizeof *w->held);
  }
  if (!w || !w->fh || !w->used || !w->held) {
    if (w) SL__FREE(w->fh, w->used, w->held);
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
  for (size_t f = 0; f < o->nfiles; f++)
    if (w->fh[f]) close_file(o, w, f);
  SL__FREE(w->fh, w->used, w->held, w);
}

/* Decodes unit k (the engine's item k) into *out, *n samples. */
static int of_process(void *ud, void *wctx, uint64_t k, sl_sample *in,
                      sl_sample ***out, size_t *n) {
  of_state *o = ud;
  worker *w = wctx;
  /* in is NULL: the unit is k */
  const sl__plan_unit *u = &o->plan.units[k];
  if (u->count == 0 || (o->unordered && done_has(&o->restored, k)))
    return SL__ENGINE_DROP; /* delivered before the restore */
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
  if (rc == SL_OK) {
    rc = sl__slr_load_chunk(f, u->chunk, &ch);
    charge_file(o, w, u->file);
  }
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

/* Ordered: notes skipped unit k (a save finds the holes it left). */
static int note_skipped(of_state *o, uint64_t k) {
  return sl__state_push_u64(&o->skipped, &o->nskipped, &o->skipped_cap, k);
}

/* A skipped corrupt chunk, on the consumer's thread in delivery order:
 * counted, and the end of the pass past max_bad. */
static int of_skipped(void *ud, uint64_t k, const char *note) {
  of_state *o = ud;
  o->seen = k + 1;
  int rc = o->unordered ? done_add(&o->done, k) : note_skipped(o, k);
  if (rc < 0) return rc;
  if (++o->bad <= o->max_bad) return SL_OK;
  return sl_set_error(SL_ECORRUPT,
                      "%llu corrupt chunks skipped, more than the cap of %u; "
                      "last: %s",
                      (unsigned long long)o->bad, o->max_bad, note);
}

static const sl__engine_ops of_ops = {of_pull, of_worker_init, of_worker_fini,
                                      NULL, NULL};

/* The memory budget of the consumer's samples (see the top): none kept. */
static void drop_kept(of_state *o, sl__budget_acct *a) {
  sl__budget_resident(a, o->kept, 0);
  o->kept = 0;
}

/* The unit just taken (o->pend) is the consumer's: the engine's carry of
 * it (handed out with it) becomes resident (sl__budget_keep). */
static void keep_unit(of_state *o) {
  sl__budget_acct *a = sl__engine_budget(o->eng);
  if (!a) return;
  uint64_t n = 0;
  for (size_t i = o->pend.pos; i < o->pend.n; i++)
    n += sl_sample_nbytes(o->pend.v[i]);
  sl__budget_keep(a, &o->kept, n);
}

/* Sample s leaves the consumer's hands: its bytes are no longer resident;
 * handed out (`out`), they become the account's carry. */
static void let_go(of_state *o, const sl_sample *s, bool out) {
  sl__budget_acct *a = sl__engine_budget(o->eng);
  if (a) sl__budget_let_go(a, &o->kept, sl_sample_nbytes(s), out);
}

/* Releases what the consumer holds of the current pass. */
static void drop_consumer(of_state *o) {
  unit_out_free(&o->cur);
  unit_out_free(&o->pend);
  for (size_t i = o->gpos; i < o->glen; i++)
    sl_sample_release(o->gbuf[i]);
  o->glen = o->gpos = 0;
  sl__budget_acct *a = sl__engine_budget(o->eng);
  if (a && o->kept) drop_kept(o, a);
}

/* Forgets what the last pass delivered (saving). */
static void forget_pass(of_state *o) {
  o->nskipped = 0;
  done_clear(&o->done, 0);
  done_clear(&o->restored, 0);
  o->npartials = 0;
  o->log_unit.count = o->log_idx.count = 0;
  o->log_from = 0;
}

static int start_workers(of_state *o) {
  o->next_unit = 0;
  o->group = 0;
  o->seen = o->delivered = o->bad = 0;
  forget_pass(o);
  return sl__engine_start(o->eng);
}

/* --- the consumer ----------------------------------------------------------
 */

/* The next unit's samples into o->pend (unless one is there already):
 * SL_OK, SL_EOF, or the pass's error with the position in front. */
static int take_unit(of_state *o) {
  if (o->pend.v) return SL_OK;
  int rc = sl__engine_next_many(o->eng, &o->pend.v, &o->pend.n, &o->pend.seq);
  if (rc == SL_OK) keep_unit(o);
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

/* Unordered: the next unit to arrive (after a restore: less the samples
 * of the unit that was partly delivered). */
static int load_any(of_state *o) {
  SL_FORWARD_IF_ERROR(take_unit(o));
  o->cur = o->pend;
  memset(&o->pend, 0, sizeof o->pend);
  for (size_t i = 0; i < o->npartials; i += 2) {
    if (o->partials[i] != o->cur.seq) continue;
    for (; o->cur.pos < o->partials[i + 1] && o->cur.pos < o->cur.n;
         o->cur.pos++) {
      let_go(o, o->cur.v[o->cur.pos], false);
      sl_sample_release(o->cur.v[o->cur.pos]);
    }
    o->partials[i] = o->partials[o->npartials - 2];
    o->partials[i + 1] = o->partials[o->npartials - 1];
    o->npartials -= 2;
    break;
  }
  return SL_OK;
}

static int of_next(void *st, sl_sample **out) {
  of_state *o = st;
  for (;;) {
    if (o->cur.pos < o->cur.n) {
      *out = o->cur.v[o->cur.pos++];
      let_go(o, *out, true);
      o->delivered++;
      if (!o->unordered) return SL_OK;
      sl__state_log_note(&o->log_unit, o->cur.seq);
      sl__state_log_note(&o->log_idx, o->cur.pos - 1);
      int rc = o->cur.pos == o->cur.n ? done_add(&o->done, o->cur.seq) : SL_OK;
      if (rc < 0) {
        sl_sample_release(*out);
        *out = NULL;
      }
      return rc;
    }
    if (o->cur.v) unit_out_free(&o->cur);
    while (o->gpos < o->glen) {
      sl_sample *s = o->gbuf[o->gpos];
      o->gbuf[o->gpos++] = NULL;
      if (s) {
        *out = s;
        let_go(o, s, true);
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
  return sl__plan_build_segments(o->pf, o->nfiles, &o->params, o->segs,
                                 o->nsegs, &o->plan);
}

static int of_reset(void *st) {
  of_state *o = st;
  sl__engine_stop(o->eng);
  drop_consumer(o);
  o->pass++;
  o->params.epoch = o->epoch0 + o->pass;
  /* the pass that ended becomes the pass before; an elastic restore's
   * epoch is over */
  SL__FREE(o->prev_skipped, o->prev_segs);
  o->prev_skipped = o->skipped;
  o->prev_nskipped = o->nskipped;
  o->skipped = NULL;
  o->nskipped = o->skipped_cap = 0;
  o->prev_segs = o->segs;
  o->prev_nsegs = o->nsegs;
  o->has_prev = true;
  o->segs = NULL;
  o->nsegs = 0;
  SL_FORWARD_IF_ERROR(build_plan(o));
  return start_workers(o);
}

static void of_destroy(void *st) {
  of_state *o = st;
  if (!o) return;
  sl__budget_acct *a = sl__engine_budget(o->eng);
  if (a && o->kept) drop_kept(o, a); /* the account outlives the engine */
  sl__engine_destroy(o->eng); /* closes the workers' files */
  o->eng = NULL;
  drop_consumer(o);
  sl__free(o->gbuf);
  sl__plan_free(&o->plan);
  for (size_t f = 0; f < o->nfiles; f++) {
    if (o->paths) sl__free(o->paths[f]);
    if (o->pf) sl__free((void *)o->pf[f].records);
  }
  SL__FREE(o->paths, o->pf, o->ids, o->fp, o->segs, o->skipped,
           o->prev_skipped, o->prev_segs);
  done_free(&o->done);
  done_free(&o->restored);
  sl__free(o->partials);
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

/* --- saving and restoring (stages/state.h) ---------------------------------
 *
 * Ordered.  The output of a pass is a pure function of (files, seed, epoch,
 * shuffle, window, share), so a position k is a group of the plan and an
 * offset m inside it: the state is (g, m) - plus the units skipped before g
 * under skip_chunk, whose holes shift the positions - and a restore
 * rebuilds the plan of that epoch, starts the engine at the group's first
 * unit and drops the first m samples of the group: it re-reads at most one
 * shuffle group.  Samples in the engine's window are not saved, so a
 * state's size does not depend on threads or buffer, and a state saved with
 * T threads restores with any other T.
 *
 * Unordered.  Units arrive as they are finished: the state holds the set of
 * units fully delivered (or skipped) by position k - the lowest unit not
 * done and a bitmap of the done ones above it, at most the engine's window -
 * and the units partly delivered with how many of their samples (a unit's
 * own samples come out in one order; besides the one at the position, a
 * restored pass may still await some the state it resumed left).  The
 * restored pass starts at the lowest unit; the workers drop the done ones
 * undecoded and the consumer the partial units' first samples: each
 * remaining sample exactly once.  A save
 * behind the last delivery (a stage above holds samples) walks back through
 * a log of the last SL__STATE_LOG outputs; further back, or under a stage
 * that replays (a shuffle, a cache), it is refused.
 *
 * Record: nfiles, the files' fingerprints (CRC32C of each index and its
 * record count: one per file up to FP_EACH files, else one for all), their
 * identities as construction read them (sl__state_put_file_ids), the
 * explicit segments of an elastic restore's epoch (count, pairs), then the
 * ordered (g, m, skipped units) or unordered (done set, partial units and
 * their m)
 * part.
 */

#define FP_EACH 64

static const char *const k_remainder[] = {"pad", "drop", "uneven"};

static void of_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const of_state *o = st;
  uint32_t names = 0;
  for (size_t f = 0; f < o->nfiles; f++) {
    const char *b = sl__basename(o->paths[f]);
    names = sl__crc32c(names, b, strlen(b) + 1);
  }
  const sl__plan_params *p = &o->params;
  int pol = (int)p->policy;
  snprintf(buf, cap,
           "%zu files (%.60s .. %.60s, names %08x) seed=%llu epoch=%llu "
           "shuffle=%d window=%u remainder=%s policy=%s max_bad=%u "
           "ordered=%d rank=%d/%d",
           o->nfiles, sl__basename(o->paths[0]),
           sl__basename(o->paths[o->nfiles - 1]), names,
           (unsigned long long)p->seed, (unsigned long long)o->epoch0,
           p->shuffle ? 1 : 0, p->window,
           pol >= 0 && pol < 3 ? k_remainder[pol] : "?",
           o->slr.policy == SL_CORRUPT_SKIP_CHUNK ? "skip_chunk" : "fail",
           o->max_bad, o->unordered ? 0 : 1, p->rank, p->world);
}

/* The identity without " rank=R/W": what the states of one job share. */
static size_t ident_job_len(const char *ident, size_t len) {
  for (size_t i = len; i-- > 0;)
    if (ident[i] == ' ' && len - i > 6 && memcmp(ident + i, " rank=", 6) == 0)
      return i;
  return len;
}

static uint64_t all_fp(const of_state *o) {
  uint32_t crc = 0;
  for (size_t f = 0; f < o->nfiles; f++) {
    unsigned char b[8];
    sl__put64(b, o->fp[f]);
    crc = sl__crc32c(crc, b, 8);
  }
  return crc;
}

static int put_common(const of_state *o, const uint64_t *segs, size_t nsegs,
                      sl__state_out *w) {
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, o->nfiles));
  if (o->nfiles <= FP_EACH) {
    for (size_t f = 0; f < o->nfiles; f++)
      SL_FORWARD_IF_ERROR(sl__state_put_u64(w, o->fp[f]));
  } else {
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, all_fp(o)));
  }
  SL_FORWARD_IF_ERROR(sl__state_put_file_ids(w, o->ids, o->nfiles));
  /* 0: the rank's share; n + 1: n explicit segments */
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, segs ? nsegs + 1 : 0));
  for (size_t i = 0; segs && i < 2 * nsegs; i++)
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, segs[i]));
  return SL_OK;
}

/* The files' identities in a record against construction's. */
static int check_ids(const of_state *o, sl__state_in *in) {
  return sl__state_check_file_ids(in, "open_files",
                                  (const char *const *)o->paths, o->ids,
                                  o->nfiles);
}

/* Checks the files' fingerprints in a record against this reader's. */
static int check_files(const of_state *o, sl__state_in *in) {
  uint64_t n, v;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &n));
  SL_RETURN_ERROR_IF(n != o->nfiles, SL_EINVAL,
                     "restore: the state is of another pipeline: open_files "
                     "reads %zu files here, %llu in the state",
                     o->nfiles, (unsigned long long)n);
  if (o->nfiles > FP_EACH) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &v));
    SL_RETURN_ERROR_IF(v != all_fp(o), SL_ECORRUPT,
                       "restore: open_files: one of the %zu files (%s .. %s) "
                       "changed since the state was saved",
                       o->nfiles, o->paths[0], o->paths[o->nfiles - 1]);
    return check_ids(o, in);
  }
  for (size_t f = 0; f < o->nfiles; f++) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &v));
    SL_RETURN_ERROR_IF(v != o->fp[f], SL_ECORRUPT,
                       "restore: open_files: %s changed since the state was "
                       "saved (%llu records, index %08llx then; %llu records, "
                       "index %08llx now)",
                       o->paths[f], (unsigned long long)(v >> 32),
                       (unsigned long long)(v & 0xffffffffu),
                       (unsigned long long)(o->fp[f] >> 32),
                       (unsigned long long)(o->fp[f] & 0xffffffffu));
  }
  return check_ids(o, in);
}

/* Reads the segments of a record into *segs (heap; NULL: the share). */
static int get_segs(sl__state_in *in, uint64_t **segs, size_t *nsegs) {
  uint64_t n;
  *segs = NULL;
  *nsegs = 0;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &n));
  if (!n--) return SL_OK;
  SL_RETURN_ERROR_IF(n > ((uint64_t)1 << 24), SL_ECORRUPT,
                     "restore: corrupt state: open_files: %llu segments",
                     (unsigned long long)n);
  uint64_t *v = sl__malloc((size_t)(2 * n + 1) * sizeof *v);
  SL_RETURN_ERROR_IF(!v, SL_ENOMEM, "restore: open_files: out of memory");
  for (size_t i = 0; i < 2 * n; i++) {
    int rc = sl__state_get_u64(in, &v[i]);
    if (rc < 0) {
      sl__free(v);
      return rc;
    }
  }
  *segs = v;
  *nsegs = (size_t)n;
  return SL_OK;
}

static int of_check(const sl_reader *r, void *st, sl__state_in *in) {
  return check_files(st, in);
}

/* A pass's plan and the units it skipped (ordered), for a save. */
typedef struct pass_plan {
  const sl__plan *plan;
  const uint64_t *skipped;
  size_t nskipped;
} pass_plan;

/* Ordered: the group holding output k of the pass and the outputs of it
 * before k, and how many units were skipped before the group. */
static int ordered_point(const pass_plan *pp, uint64_t k, size_t *g,
                         uint64_t *m, size_t *nskip) {
  const sl__plan *pl = pp->plan;
  uint64_t cum = 0;
  size_t si = 0;
  for (size_t i = 0; i < pl->ngroups; i++) {
    const sl__plan_group *gr = &pl->groups[i];
    size_t before = si;
    uint64_t out = gr->records;
    while (si < pp->nskipped &&
           pp->skipped[si] < gr->first_unit + gr->nunits) {
      out -= pl->units[pp->skipped[si]].count;
      si++;
    }
    if (k < cum + out) {
      *g = i;
      *m = k - cum;
      *nskip = before;
      return SL_OK;
    }
    cum += out;
  }
  SL_RETURN_ERROR_IF(k != cum, SL_EINVAL,
                     "save: open_files: position %llu is past the %llu "
                     "samples of the pass (a bug)",
                     (unsigned long long)k, (unsigned long long)cum);
  *g = pl->ngroups;
  *m = 0;
  *nskip = pp->nskipped;
  return SL_OK;
}

static int save_ordered(const pass_plan *pp, uint64_t k, sl__state_out *w) {
  size_t g = 0, nskip = 0;
  uint64_t m = 0;
  SL_FORWARD_IF_ERROR(ordered_point(pp, k, &g, &m, &nskip));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, g));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, m));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, nskip));
  for (size_t i = 0; i < nskip; i++)
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, pp->skipped[i]));
  return SL_OK;
}

/* Ordered, position k of the pass before: its plan built again (a pure
 * function of the files and the parameters of its epoch), with the units
 * it skipped and its segments. */
static int save_pass_before(of_state *o, uint64_t pass, uint64_t k,
                            sl__state_out *w) {
  sl__plan_params p = o->params;
  p.epoch = o->epoch0 + pass;
  sl__plan plan;
  memset(&plan, 0, sizeof plan);
  int rc = sl__plan_build_segments(o->pf, o->nfiles, &p, o->prev_segs,
                                   o->prev_nsegs, &plan);
  pass_plan pp = {&plan, o->prev_skipped, o->prev_nskipped};
  if (rc == SL_OK) rc = put_common(o, o->prev_segs, o->prev_nsegs, w);
  if (rc == SL_OK) rc = save_ordered(&pp, k, w);
  sl__plan_free(&plan);
  return rc;
}

static int save_unordered(of_state *o, uint64_t k, sl__state_out *w) {
  SL_RETURN_ERROR_IF(
      sl__state_replayed(w), SL_EUNSUPPORTED,
      "save: open_files (ordered=false) under a shuffle (or another stage "
      "that reads it again in the same order: cache, repeat_first, a "
      "filter's replay): its order is not reproducible; use ordered=true");
  uint64_t count = o->delivered;
  SL_RETURN_ERROR_IF(
      k < o->log_from || count - k > SL__STATE_LOG, SL_EUNSUPPORTED,
      "save: open_files (ordered=false): position %llu is %llu "
      "samples behind what it delivered, more than it keeps "
      "(%d)",
      (unsigned long long)k, (unsigned long long)(count - k), SL__STATE_LOG);
  /* The units of the outputs from k on were not done at k; the unit of
   * output k had idx(k) of its samples out. */
  size_t nundo = (size_t)(count - k);
  uint64_t *undo = sl__malloc((nundo ? nundo : 1) * sizeof *undo);
  SL_RETURN_ERROR_IF(!undo, SL_ENOMEM, "save: open_files: out of memory");
  for (size_t i = 0; i < nundo; i++)
    undo[i] = o->log_unit.up[(k + i) % SL__STATE_LOG];
  /* The units partly delivered at k: the one of output k (or the current
   * one), and those a restore left that have not arrived yet. */
  uint64_t partial = UINT64_MAX, pm = 0;
  if (nundo) {
    pm = o->log_idx.up[k % SL__STATE_LOG];
    if (pm) partial = undo[0];
  } else if (o->cur.v && o->cur.pos > 0 && o->cur.pos < o->cur.n) {
    partial = o->cur.seq;
    pm = o->cur.pos;
  }
  int rc = put_done(w, &o->done, undo, nundo);
  sl__free(undo);
  SL_FORWARD_IF_ERROR(rc);
  SL_FORWARD_IF_ERROR(
      sl__state_put_u64(w, o->npartials / 2 + (partial != UINT64_MAX ? 1 : 0)));
  if (partial != UINT64_MAX) {
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, partial));
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, pm));
  }
  for (size_t i = 0; i < o->npartials; i++)
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, o->partials[i]));
  return SL_OK;
}

static int of_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                   sl__state_out *w) {
  of_state *o = st;
  uint64_t now = sl__reader_pass(r);
  if (pass != now) {
    SL_RETURN_ERROR_IF(
        o->unordered || pass + 1 != now || !o->has_prev, SL_EUNSUPPORTED,
        "save: open_files: the position is in its pass %llu, it is in pass "
        "%llu now (a repeat or mix above reset it while the stages above "
        "still hold its outputs): %s",
        (unsigned long long)pass, (unsigned long long)now,
        o->unordered ? "with ordered=false, what was done then is not kept"
                     : "only the pass before is kept");
    return save_pass_before(o, pass, k, w);
  }
  SL_FORWARD_IF_ERROR(put_common(o, o->segs, o->nsegs, w));
  if (o->unordered) return save_unordered(o, k, w);
  pass_plan pp = {&o->plan, o->skipped, o->nskipped};
  return save_ordered(&pp, k, w);
}

/* Stops the pass and builds the plan of pass `pass` over segs (taken; NULL:
 * the rank's share). */
static int restart_pass(of_state *o, uint64_t pass, uint64_t *segs,
                        size_t nsegs) {
  sl__engine_stop(o->eng);
  drop_consumer(o);
  sl__free(o->segs);
  o->segs = segs;
  o->nsegs = nsegs;
  o->has_prev = false; /* the passes before the restored one: unknown */
  o->pass = pass;
  o->params.epoch = o->epoch0 + pass;
  forget_pass(o);
  o->group = 0;
  o->seen = o->delivered = o->bad = 0;
  return build_plan(o);
}

static int restore_ordered(of_state *o, uint64_t k, sl__state_in *in) {
  uint64_t g, m, nskip;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &g));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &m));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &nskip));
  SL_RETURN_ERROR_IF(g > o->plan.ngroups || m > k || nskip > o->plan.nunits,
                     SL_ECORRUPT,
                     "restore: corrupt state: open_files: group %llu of %zu",
                     (unsigned long long)g, o->plan.ngroups);
  for (uint64_t i = 0; i < nskip; i++) {
    uint64_t u;
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &u));
    SL_FORWARD_IF_ERROR(note_skipped(o, u));
  }
  size_t first =
      g < o->plan.ngroups ? o->plan.groups[g].first_unit : o->plan.nunits;
  o->next_unit = first;
  o->group = (size_t)g;
  o->seen = first;
  o->delivered = k - m;
  o->bad = nskip;
  sl__engine_start_at(o->eng, first);
  SL_FORWARD_IF_ERROR(sl__engine_start(o->eng));
  return sl__state_replay(of_next, o, m, "open_files: the restored group");
}

/* Reads the partly delivered units of an unordered record into *v. */
static int get_partials(sl__state_in *in, uint64_t **v, size_t *n,
                        size_t *cap) {
  uint64_t np, x;
  *n = 0;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &np));
  SL_RETURN_ERROR_IF(np > ((uint64_t)1 << 24), SL_ECORRUPT,
                     "restore: corrupt state: open_files: %llu partial units",
                     (unsigned long long)np);
  for (uint64_t i = 0; i < 2 * np; i++) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &x));
    SL_FORWARD_IF_ERROR(sl__state_push_u64(v, n, cap, x));
  }
  return SL_OK;
}

static int restore_unordered(of_state *o, uint64_t k, sl__state_in *in) {
  SL_FORWARD_IF_ERROR(get_done(in, &o->done));
  SL_FORWARD_IF_ERROR(
      get_partials(in, &o->partials, &o->npartials, &o->partials_cap));
  SL_RETURN_ERROR_IF(o->done.lo > o->plan.nunits, SL_ECORRUPT,
                     "restore: corrupt state: open_files: unit %llu of %zu",
                     (unsigned long long)o->done.lo, o->plan.nunits);
  done_clear(&o->restored, o->done.lo);
  for (size_t i = 0; i < o->done.n; i++)
    SL_FORWARD_IF_ERROR(done_add(&o->restored, o->done.above[i]));
  o->next_unit = (size_t)o->done.lo;
  o->delivered = o->log_unit.count = o->log_idx.count = o->log_from = k;
  sl__engine_start_at(o->eng, o->done.lo);
  return sl__engine_start(o->eng);
}

static int of_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                      sl__state_in *in) {
  of_state *o = st;
  uint64_t *segs;
  size_t nsegs;
  SL_FORWARD_IF_ERROR(check_files(o, in));
  SL_FORWARD_IF_ERROR(get_segs(in, &segs, &nsegs));
  SL_FORWARD_IF_ERROR(restart_pass(o, pass, segs, nsegs));
  return o->unordered ? restore_unordered(o, k, in) : restore_ordered(o, k, in);
}

/* Stop signal (stages/reader_impl.h). */
static void of_signal_stop(void *state) {
  sl__engine_signal_stop(((of_state *)state)->eng);
}

/* The memory budget: the engine's window of units (their samples) and
 * the workers' open files (charge_file). */
static void of_budget(void *state, sl__budget_acct *acct) {
  sl__engine_set_budget(((of_state *)state)->eng, acct);
}

static const sl__stage_ops of_stage = {
    .name = "open_files",
    .next = of_next,
    .reset = of_reset,
    .destroy = of_destroy,
    .length = of_length,
    .save = of_save,
    .restore = of_restore,
    .identity = of_identity,
    .check = of_check,
    .stop = of_signal_stop,
    .budget = of_budget,
};

/* --- elastic restores ------------------------------------------------------
 */

typedef struct span {
  uint64_t lo, hi;
} span;

static int cmp_span(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges v[0..*n) in place. */
static void merge_spans(span *v, size_t *n) {
  if (!*n) return;
  qsort(v, *n, sizeof *v, cmp_span);
  size_t k = 0;
  for (size_t i = 1; i < *n; i++) {
    if (v[i].lo <= v[k].hi)
      v[k].hi = SL_MAX(v[k].hi, v[i].hi);
    else
      v[++k] = v[i];
  }
  *n = k + 1;
}

/* One old rank's state, as the elastic restore reads it. */
typedef struct old_rank {
  sl__state_root root;
  int rank, world;
  uint64_t *segs; /* its epoch's positions (explicit, or its share) */
  size_t nsegs;
  bool explicit_segs; /* the state's own (an elastic restore's epoch) */
  uint64_t done;      /* ordered: positions of its segments delivered */
  done_set units;     /* unordered: the units done, */
  uint64_t *partials; /* and those partly delivered (unit, m) */
  size_t npartials, partials_cap;
  span *dsp; /* the positions delivered, as spans */
  size_t ndsp;
} old_rank;

/* Parses state i into *x, checking it against o (files, job identity). */
static int read_old(const of_state *o, const char *job, size_t job_len,
                    const void *state, size_t len, size_t i, old_rank *x) {
  SL_FORWARD_IF_ERROR(sl__state_root_parse(state, len, &x->root));
  const sl__state_root *rt = &x->root;
  SL_RETURN_ERROR_IF(rt->name_len != 10 || memcmp(rt->name, "open_files", 10),
                     SL_EINVAL,
                     "restore_elastic: state %zu is of a '%.*s' reader, not "
                     "open_files (only a chain that is open_files itself can "
                     "be restored elastically)",
                     i, (int)rt->name_len, rt->name);
  size_t jl = ident_job_len(rt->ident, rt->ident_len);
  SL_RETURN_ERROR_IF(jl != job_len || memcmp(rt->ident, job, jl) != 0,
                     SL_EINVAL,
                     "restore_elastic: state %zu is of another job: '%.*s' "
                     "in the state, '%.*s' here; the reader is unchanged",
                     i, (int)rt->ident_len, rt->ident, (int)job_len, job);
  SL_RETURN_ERROR_IF(
      sscanf(rt->ident + jl, " rank=%d/%d", &x->rank, &x->world) != 2 ||
          x->world < 1 || x->rank < 0 || x->rank >= x->world,
      SL_ECORRUPT, "restore_elastic: state %zu: no rank in '%.*s'", i,
      (int)rt->ident_len, rt->ident);
  SL_FORWARD_IF_ERROR(check_files(o, rt->in));
  SL_FORWARD_IF_ERROR(get_segs(rt->in, &x->segs, &x->nsegs));
  x->explicit_segs = x->segs != NULL;
  if (o->unordered) {
    SL_FORWARD_IF_ERROR(get_done(rt->in, &x->units));
    return get_partials(rt->in, &x->partials, &x->npartials, &x->partials_cap);
  }
  uint64_t g, m, nskip;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(rt->in, &g));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(rt->in, &m));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(rt->in, &nskip));
  SL_RETURN_ERROR_IF(nskip != 0, SL_EUNSUPPORTED,
                     "restore_elastic: state %zu (rank %d): %llu corrupt "
                     "chunks were skipped in its epoch; their holes cannot "
                     "be split among other ranks",
                     i, x->rank, (unsigned long long)nskip);
  x->done = rt->k; /* without holes, output k is position k of the share */
  return SL_OK;
}

/* The share of old rank x in an epoch of N records with no explicit
 * segments, into x->segs. */
static int old_share(const of_state *o, uint64_t N, old_rank *x) {
  uint64_t seg[4];
  size_t n = sl__shard_segments(N, x->rank, x->world, o->params.policy, seg);
  x->segs = sl__malloc(4 * sizeof *x->segs);
  SL_RETURN_ERROR_IF(!x->segs, SL_ENOMEM, "restore_elastic: out of memory");
  memcpy(x->segs, seg, 2 * n * sizeof *seg);
  x->nsegs = n;
  return SL_OK;
}

/* Appends [lo, hi) to x's delivered spans (room for `cap`). */
static int add_dsp(old_rank *x, size_t *cap, uint64_t lo, uint64_t hi) {
  if (x->ndsp == *cap) {
    size_t c = *cap ? 2 * *cap : 8;
    span *v = sl__realloc(x->dsp, c * sizeof *v);
    SL_RETURN_ERROR_IF(!v, SL_ENOMEM, "restore_elastic: out of memory");
    x->dsp = v;
    *cap = c;
  }
  x->dsp[x->ndsp++] = (span){lo, hi};
  return SL_OK;
}

/* Ordered: the first x->done positions of its segments. */
static int ordered_spans(old_rank *x) {
  uint64_t left = x->done;
  size_t cap = 0;
  for (size_t j = 0; j < x->nsegs && left; j++) {
    uint64_t lo = x->segs[2 * j], hi = x->segs[2 * j + 1];
    uint64_t d = SL_MIN(left, hi - lo);
    left -= d;
    SL_FORWARD_IF_ERROR(add_dsp(x, &cap, lo, lo + d));
  }
  SL_RETURN_ERROR_IF(left, SL_ECORRUPT,
                     "restore_elastic: rank %d delivered %llu samples, more "
                     "than its share",
                     x->rank, (unsigned long long)x->done);
  return SL_OK;
}

/* Unordered: the positions of the units done and of the partial unit's
 * first samples, found in the old rank's plan of epoch `epoch` (a bitmap
 * over the N positions, then its runs). */
static int unordered_spans(const of_state *o, uint64_t epoch, uint64_t N,
                           old_rank *x) {
  sl__plan_params p = o->params;
  p.rank = x->rank;
  p.world = x->world;
  p.epoch = epoch;
  sl__plan pl;
  SL_FORWARD_IF_ERROR(sl__plan_build_segments(
      o->pf, o->nfiles, &p, x->explicit_segs ? x->segs : NULL,
      x->explicit_segs ? x->nsegs : 0, &pl));
  unsigned char *bits = sl__calloc((size_t)(N / 8 + 1), 1);
  int rc = bits ? SL_OK
                : sl_set_error(SL_ENOMEM,
                               "restore_elastic: cannot allocate a map of %llu "
                               "positions",
                               (unsigned long long)N);
  size_t si = 0;
  uint64_t pos = x->nsegs ? x->segs[0] : 0;
  for (size_t g = 0; rc == SL_OK && g < pl.ngroups; g++) {
    const sl__plan_group *gr = &pl.groups[g];
    uint64_t start = pos;
    pos += gr->records; /* groups tile the segments in order */
    if (si < x->nsegs && pos == x->segs[2 * si + 1] && ++si < x->nsegs)
      pos = x->segs[2 * si];
    for (size_t u = gr->first_unit; u < gr->first_unit + gr->nunits; u++) {
      const sl__plan_unit *un = &pl.units[u];
      uint64_t m = done_has(&x->units, u) ? un->count : 0;
      for (size_t q = 0; q < x->npartials; q += 2)
        if (x->partials[q] == u) m = SL_MIN(x->partials[q + 1], un->count);
      for (uint64_t j = 0; j < m; j++) {
        uint64_t at = start + (un->slots ? un->slots[j] : j);
        if (at < N) bits[at / 8] |= (unsigned char)(1u << (at % 8));
      }
    }
  }
  size_t cap = 0;
  for (uint64_t a = 0; rc == SL_OK && a < N;) {
    if (!(bits[a / 8] >> (a % 8) & 1)) {
      a++;
      continue;
    }
    uint64_t b = a;
    while (b < N && (bits[b / 8] >> (b % 8) & 1))
      b++;
    rc = add_dsp(x, &cap, a, b);
    a = b;
  }
  sl__free(bits);
  sl__plan_free(&pl);
  return rc;
}

/* Remaining positions: (union of the old segments) minus (union of the
 * positions they delivered), then new rank r of W takes its part in
 * order. */
static int elastic_segments(of_state *o, old_rank *x, size_t n, uint64_t N,
                            uint64_t **out, size_t *nout) {
  size_t cap = 1, dcap = 1;
  for (size_t i = 0; i < n; i++) {
    cap += x[i].nsegs;
    dcap += x[i].ndsp;
  }
  span *rest = sl__malloc(cap * sizeof *rest);
  span *done = sl__malloc(dcap * sizeof *done);
  uint64_t *segs = NULL;
  int rc = SL_OK;
  if (!rest || !done) {
    rc = sl_set_error(SL_ENOMEM, "restore_elastic: out of memory");
    goto out;
  }
  size_t nr = 0, nd = 0;
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < x[i].nsegs; j++)
      rest[nr++] = (span){x[i].segs[2 * j], x[i].segs[2 * j + 1]};
    for (size_t j = 0; j < x[i].ndsp; j++)
      done[nd++] = x[i].dsp[j];
  }
  merge_spans(rest, &nr);
  merge_spans(done, &nd);
  /* rest minus done, in place (both sorted and merged) */
  size_t k = 0, d = 0;
  span *diff = sl__malloc((nr + nd + 1) * sizeof *diff);
  if (!diff) {
    rc = sl_set_error(SL_ENOMEM, "restore_elastic: out of memory");
    goto out;
  }
  for (size_t i = 0; i < nr; i++) {
    uint64_t lo = rest[i].lo, hi = rest[i].hi;
    while (d < nd && done[d].hi <= lo)
      d++;
    for (size_t e = d; e < nd && done[e].lo < hi && lo < hi; e++) {
      if (done[e].lo > lo) diff[k++] = (span){lo, done[e].lo};
      lo = SL_MAX(lo, done[e].hi);
    }
    if (lo < hi) diff[k++] = (span){lo, hi};
  }
  uint64_t M = 0;
  for (size_t i = 0; i < k; i++)
    M += diff[i].hi - diff[i].lo;
  /* The new rank's part [a, b) of the M remaining positions (uneven:
   * the ranks' parts differ by one at most). */
  uint64_t r = (uint64_t)o->params.rank, W = (uint64_t)o->params.world;
  uint64_t a = r * (M / W) + r * (M % W) / W;
  uint64_t b = (r + 1) * (M / W) + (r + 1) * (M % W) / W;
  segs = sl__malloc((2 * k + 2) * sizeof *segs);
  if (!segs) {
    sl__free(diff);
    rc = sl_set_error(SL_ENOMEM, "restore_elastic: out of memory");
    goto out;
  }
  size_t ns = 0;
  uint64_t at = 0;
  for (size_t i = 0; i < k; i++) {
    uint64_t len = diff[i].hi - diff[i].lo;
    uint64_t lo = SL_MAX(a, at), hi = SL_MIN(b, at + len);
    if (lo < hi) {
      segs[2 * ns] = diff[i].lo + (lo - at);
      segs[2 * ns + 1] = diff[i].lo + (hi - at);
      ns++;
    }
    at += len;
  }
  sl__free(diff);
  *out = segs;
  *nout = ns;
out:
  sl__free(rest);
  sl__free(done);
  return rc;
}

int sl_reader_restore_elastic(sl_reader *r, const void *const *states,
                              const size_t *lens, size_t n) {
  SL_RETURN_ERROR_IF(!r || !states || !lens || n == 0, SL_EINVAL,
                     "restore_elastic: %s",
                     !r       ? "NULL reader"
                     : n == 0 ? "no states"
                              : "NULL state array");
  of_state *o = sl__reader_state_of(r, of_stage.next);
  SL_RETURN_ERROR_IF(!o, SL_EUNSUPPORTED,
                     "restore_elastic: the reader is '%s', not open_files: "
                     "only a chain that is open_files itself can be restored "
                     "elastically (add decorators after the restore)",
                     sl_reader_name(r));
  char job[512];
  of_identity(r, o, job, sizeof job);
  size_t job_len = ident_job_len(job, strlen(job));
  old_rank *x = sl__calloc(n, sizeof *x);
  SL_RETURN_ERROR_IF(!x, SL_ENOMEM, "restore_elastic: out of memory");
  int rc = SL_OK;
  for (size_t i = 0; i < n && rc == SL_OK; i++)
    rc = read_old(o, job, job_len, states[i], lens[i], i, &x[i]);
  /* One state per rank of the old job, all of one epoch (a rank that
   * finished it and saved at the start of the next counts as done). */
  uint64_t pass = UINT64_MAX;
  bool explicit_segs = false;
  for (size_t i = 0; i < n && rc == SL_OK; i++) {
    pass = SL_MIN(pass, x[i].root.pass);
    explicit_segs |= x[i].segs != NULL;
    if (x[i].world != x[0].world || (size_t)x[0].world != n)
      rc = sl_set_error(SL_EINVAL,
                        "restore_elastic: %zu states, but state %zu is of "
                        "rank %d of %d: pass one state of every rank of the "
                        "old job",
                        n, i, x[i].rank, x[i].world);
    for (size_t j = 0; j < i && rc == SL_OK; j++)
      if (x[j].rank == x[i].rank)
        rc = sl_set_error(SL_EINVAL,
                          "restore_elastic: states %zu and %zu are both of "
                          "rank %d",
                          j, i, x[i].rank);
  }
  const uint64_t N = o->plan.total; /* the same for every epoch */
  for (size_t i = 0; i < n && rc == SL_OK; i++) {
    if (!x[i].segs) rc = old_share(o, N, &x[i]);
    if (rc < 0) break;
    if (x[i].root.pass == pass + 1 && x[i].root.k == 0 && !explicit_segs) {
      /* done with epoch `pass`: all its share */
      size_t cap = 0;
      for (size_t j = 0; j < x[i].nsegs && rc == SL_OK; j++)
        rc = add_dsp(&x[i], &cap, x[i].segs[2 * j], x[i].segs[2 * j + 1]);
    } else if (x[i].root.pass != pass) {
      rc = sl_set_error(SL_EUNSUPPORTED,
                        "restore_elastic: the states are of different "
                        "epochs (rank %d at pass %llu, position %llu; "
                        "another at pass %llu): save every rank at the same "
                        "point",
                        x[i].rank, (unsigned long long)x[i].root.pass,
                        (unsigned long long)x[i].root.k,
                        (unsigned long long)pass);
    } else {
      rc = o->unordered ? unordered_spans(o, o->epoch0 + pass, N, &x[i])
                        : ordered_spans(&x[i]);
    }
  }
  uint64_t *segs = NULL;
  size_t nsegs = 0;
  if (rc == SL_OK) rc = elastic_segments(o, x, n, N, &segs, &nsegs);
  for (size_t i = 0; i < n; i++) {
    sl__state_root_free(&x[i].root);
    SL__FREE(x[i].segs, x[i].dsp, x[i].partials);
    done_free(&x[i].units);
  }
  sl__free(x);
  SL_FORWARD_IF_ERROR(rc);
  /* Everything checked: from here on a failure is sticky (as a restore's). */
  /* (An empty segs, nsegs == 0, is an empty epoch: nothing left here.) */
  sl__reader_restore_begin(r);
  rc = restart_pass(o, pass, segs, nsegs);
  if (rc == SL_OK) {
    o->next_unit = 0;
    rc = sl__engine_start(o->eng);
  }
  return sl__reader_restore_end(r, rc, pass, 0);
}

/* --- construction ----------------------------------------------------------
 */

static int check_opts(sl_open_files_opts *p) {
  SL_RETURN_ERROR_IF(p->threads > MAX_THREADS && p->threads != SL_THREADS_AUTO,
                     SL_EINVAL,
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
    o->fp[f] = (uint64_t)sl__slr_fingerprint(h) | sl_slr_records(h) << 32;
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
  o->auto_threads = p->threads == SL_THREADS_AUTO;
  o->T = o->auto_threads ? (size_t)sl__threads_auto_max() : p->threads;
  o->buffer = p->buffer;
  o->unordered = p->unordered != 0;
  o->epoch0 = p->epoch;
  o->params =
      (sl__plan_params){p->seed, p->epoch, p->shuffle != 0, p->window,
                        p->rank, p->world, p->remainder,    SL__PLAN_SLR};
  o->paths = sl__calloc(nfiles, sizeof *o->paths);
  o->pf = sl__calloc(nfiles, sizeof *o->pf);
  o->ids = sl__calloc(nfiles, sizeof *o->ids);
  o->fp = sl__calloc(nfiles, sizeof *o->fp);
  SL_RETURN_ERROR_IF(!o->paths || !o->pf || !o->ids || !o->fp, SL_ENOMEM,
                     "open_files: cannot allocate %zu files", nfiles);
  o->nfiles = nfiles;
  for (size_t f = 0; f < nfiles; f++) { /* take the expanded paths */
    o->paths[f] = files[f].path;
    files[f].path = NULL;
  }
  SL_FORWARD_IF_ERROR(read_indexes(o, schema));
  SL_FORWARD_IF_ERROR(build_plan(o));
  sl__engine_opts eo = {"open_files", "sl-open-files",
                        o->auto_threads ? SL__THREADS_AUTO : (int)o->T,
                        !o->unordered,
                        window_units(o)};
  SL_FORWARD_IF_ERROR(sl__engine_create(&of_ops, o, &eo, &o->eng));
  sl__engine_process_many(o->eng, of_process);
  sl__engine_on_skip(o->eng, of_skipped);
  sl__engine_set_cache(o->eng, 1);    /* the window is the exact bound */
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
  rc = sl__stage_new(&of_stage, o, schema, NULL, 0, sl__engine_counters(o->eng),
                     out); /* destroys o on failure */
  sl_schema_release(schema);
  if (rc < 0) return rc;
  rc = start_workers(o);
  if (rc < 0) {
    sl_reader_destroy(*out);
    *out = NULL;
  }
  return rc;
}
