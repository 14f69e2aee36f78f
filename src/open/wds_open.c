/*
 * wds_open.c - sl_wds_open: WebDataset shards read by T threads, with
 * brace patterns, shard shuffling and rank sharding (docs/FORMATS.md).
 *
 * Names.  Each name may hold WebDataset's brace patterns - ranges
 * "{000000..000127}" (zero-padded to the first bound's width) and lists
 * "{a,b,c}", several per name - expanded left to right, then globs and tags,
 * all by the registry as for sl_open (open/braces.c, sl__names_expand; a
 * name without a tag is "wds:").
 *
 * Order.  Pass p is the epoch plan of epoch p (epoch_plan.h, keys
 * SL__PLAN_WDS: a chunk per shard, its samples the records): the shard
 * list in its given order or, with shuffle, permuted by (seed, p) - the
 * same permutation on every rank.  World 1 reads every shard whole (a unit
 * per shard, its count unknown: URLs are not counted).  Rank r of W > 1
 * reads the plan's share under the remainder policy (by default pad,
 * ceil(N/W) for every rank, wrapping to the first samples), so every rank
 * reads as many samples and a world larger than the shard count splits
 * shards; N and the per-shard counts come from walking every shard's tar
 * headers at open (count_samples; under SL_WDS_MISSING_SKIP only the
 * samples with every field count).  The plan's units are (shard, first
 * sample, count); worker t of T reads units t, t + T, ...
 *
 * Threads.  The parallel-stage engine (sync/engine.h), as tf.data's
 * deterministic parallel interleave: lane t of T reads the plan's units t,
 * t + T, ... one after another (each shard mapped, or for a URL read by
 * ranges through a byte source, walked and closed: no file handle or
 * connection's block outlives its unit).  Engine item k is the next block
 * of `block` samples (buffer / 2) of lane k mod T; the engine's window is T
 * items, so a lane's next block is pulled only after its last was taken by
 * the consumer, and the workers that read a lane take turns on its cursor.
 * The consumer takes a round of T items and hands out one sample from each
 * lane in turn, passing over lanes that have ended.  The output is
 * therefore the same for any timing and any block size - a function of
 * (shards, T, seed, pass) - and an error reaches the consumer at its
 * position: the lane keeps it with the round it belongs to, after the
 * block's samples read before it.
 *
 * Fields.  The data set's fields are its first shard's first sample's (in
 * the given order, before shuffling), so every rank and pass agrees; a
 * sample without them fails naming its shard and key (wds_shard.c).
 *
 * Set.  The local shards are checked at open to be one `sluice pack`
 * run's, by the set identity each records as its first member, or to
 * record none (other tools'): sl__wds_set_check (wds.h), SL_ECORRUPT.
 *
 * Saving (stages/state.h).  The position k is, per lane, the count of
 * samples it had handed out by output k, plus the turn (the lane after
 * output k - 1's).  A ring of the lanes of the last SL__STATE_LOG outputs
 * turns the counts now into the counts at k; a restore restarts each lane
 * skipping its count (walking tar headers only), its rounds starting at the
 * turn.  A save further behind
 * than the ring replays the pass.  The record holds T, the shard count,
 * their total size and the identities of the local shards as construction
 * found them (sl__state_put_file_ids), so a state of other shards or
 * threads, or of shards changed since, is refused; a worker also refuses a
 * local shard that changed since construction (SL_ECORRUPT naming it).
 * URL shards are identified when a worker opens them, not in the state.
 *
 * Memory budget: the shard a lane has open holds buffers of its own (a
 * URL's read-ahead block, the walk's name and scratch buffers:
 * sl__wds_shard_held), charged to the stage's account as resident bytes
 * after each sample the lane reads and released when it closes the shard.
 * The blocks of samples read ahead are charged too, as resident bytes
 * rather than through the engine's reservations (the consumer takes a
 * whole round of T blocks before it hands out a sample, so a worker
 * waiting for room that only the round's hand-out frees would wait
 * forever): a worker adds its block's bytes as it makes it, the consumer
 * takes each sample's off as it hands it out, and a stop drops the rest.
 * So they are counted, never waited for: `buffer` bounds them.
 *
 * Threads and ownership: a lane's cursor (unit, shard handle, position,
 * skip, its error) is the worker's reading its block; its err_round is
 * atomic (the consumer reads it while a worker reads the lane's next
 * block); blocks, counts, turn, ring, pass are the consumer's; the layout
 * and file list are immutable after construction.
 */
#include "transport/http.h"
#include "formats/wds.h"
#include "formats/epoch_plan.h"
#include "open/registry.h"
#include "stages/stage.h"
#include "sync/budget.h"
#include "sync/engine.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#define DEFAULT_BUFFER 64
#define MAX_NAMES 100000
#define SL__WDS_CLASSES_MAX ((size_t)1 << 20)

typedef struct wds_open wds_open;

/* A lane: plan units t, t + T, t + 2T, ... read one after another, a block
 * of o->block samples per engine item.  Block j + 1 of a lane is pulled
 * only after block j was taken by the consumer (the engine's window is T
 * items, one per lane), so the workers that read a lane's blocks take
 * turns on its cursor, ordered by the engine's lock. */
typedef struct wds_lane {
  /* the cursor (the worker reading the lane's block) */
  size_t unit;       /* index in the plan of the unit being read */
  sl__wds_shard *sh; /* open while inside that unit's shard */
  uint64_t pos;      /* samples of the shard walked */
  uint64_t skip;     /* samples to pass over first (a restore) */
  bool ended;
  uint64_t held;              /* the open shard's bytes charged */
  int err;                    /* the error that ended the lane, */
  char *msg;                  /* its message, */
  _Atomic uint64_t err_round; /* in this round (UINT64_MAX: none) */
  /* the consumer's: the lane's block of the round being interleaved */
  sl_sample **v;
  size_t n, at;
} wds_lane;

/* An item taken from the engine before its round was due. */
typedef struct wds_pend {
  sl_sample **v;
  size_t n;
  uint64_t seq;
} wds_pend;

struct wds_open {
  char **paths;
  uint64_t *sizes;
  sl__file_id *ids; /* local shards: as construction found them */
  size_t nfiles;
  const char **lpaths; /* the local shards' paths and ids (no URLs), */
  sl__file_id *lids;   /* nlocal of them: what a state records */
  size_t nlocal;
  uint64_t total;
  sl__wds_layout *lay;
  uint32_t T;
  int shuffle, rank, world;
  sl_shard_policy policy;
  uint64_t seed;
  size_t block; /* samples per engine item */
  sl__engine *eng;
  sl__budget_acct *_Atomic acct; /* the memory budget's, or NULL */
  atomic_uint_least64_t blk;     /* the read-ahead blocks' bytes charged */
  wds_lane *lanes;
  atomic_uint live;   /* lanes not ended this pass (the pull's EOF) */
  uint64_t *nsamples; /* per shard, once counted (counted), else NULL */
  uint64_t nall;      /* their sum */
  uint32_t *recs;     /* per shard: its records in the plan */
  sl__plan_file *pf;  /* per shard: one chunk of recs[i] */
  /* the consumer's */
  uint64_t pass;
  sl__plan plan;   /* this pass's (workers read it while they run) */
  uint64_t *count; /* per lane: samples taken this pass */
  uint64_t round;  /* the round being interleaved: items [round T, +T) */
  uint64_t resolved; /* items taken or skipped by the engine so far */
  bool loaded, eof, started, over;
  int over_rc;    /* the pass's end (over): SL_EOF or its error, */
  char *over_msg; /* with its message */
  wds_pend pend;
  uint32_t turn, rot;           /* the next lane; the lane rounds start at */
  uint16_t ring[SL__STATE_LOG]; /* lane of output i, at i % LOG */
  uint64_t out;                 /* outputs this pass */
  uint64_t ring_from;           /* the ring knows outputs from here on */
  uint32_t turn_from;           /* the turn at output ring_from */
};

/* --- the pass's order ------------------------------------------------------
 */

static int plan_pass(wds_open *o) {
  for (size_t i = 0; i < o->nfiles; i++) {
    SL_RETURN_ERROR_IF(o->world > 1 && o->nsamples[i] > UINT32_MAX, SL_EINVAL,
                       "wds: %s: more than 2^32 - 1 samples", o->paths[i]);
    o->recs[i] = o->world == 1 ? 1 : (uint32_t)o->nsamples[i];
  }
  sl__plan_params p = {o->seed, o->pass,  o->shuffle != 0, 1,
                       o->rank, o->world, o->policy,       SL__PLAN_WDS};
  sl__plan_free(&o->plan);
  return sl__plan_build(o->pf, o->nfiles, &p, &o->plan);
}

/* The sample count of every shard, walking its tar headers alone. */
static int count_samples(wds_open *o) {
  if (o->nsamples) return SL_OK;
  uint64_t *c = sl__calloc(o->nfiles ? o->nfiles : 1, sizeof *c);
  SL_RETURN_ERROR_IF(!c, SL_ENOMEM, "wds: out of memory");
  uint64_t all = 0;
  int rc = SL_OK;
  for (size_t i = 0; i < o->nfiles && rc == SL_OK; i++) {
    rc = sl__wds_shard_count(o->paths[i], o->lay, &c[i]);
    all += c[i];
  }
  if (rc < 0) {
    sl__free(c);
    return sl_wrap_error(rc, "wds: counting the samples of the shards");
  }
  o->nsamples = c;
  o->nall = all;
  return SL_OK;
}

/* --- lanes (worker threads) ---------------------------------------------- */

/* Charges the bytes the lane's open shard holds now (none once closed):
 * the lane's worker, or the consumer with the engine stopped. */
static void lane_charge(wds_open *o, wds_lane *L) {
  sl__budget_acct *a = atomic_load_explicit(&o->acct, memory_order_acquire);
  uint64_t h = sl__wds_shard_held(L->sh);
  if (!a || h == L->held) return;
  sl__budget_resident(a, L->held, h);
  L->held = h;
}

/* Charges n more bytes of blocks read ahead (a worker). */
static void blocks_add(wds_open *o, uint64_t n) {
  sl__budget_acct *a = atomic_load_explicit(&o->acct, memory_order_acquire);
  if (!a || !n) return;
  atomic_fetch_add(&o->blk, n);
  sl__budget_resident(a, 0, n);
}

/* Releases n of the blocks' bytes, at most what is charged (the blocks
 * made before the account was set were not): the consumer handing a
 * sample out, or UINT64_MAX for all (a stop, the engine's results
 * dropped). */
static void blocks_sub(wds_open *o, uint64_t n) {
  sl__budget_acct *a = atomic_load_explicit(&o->acct, memory_order_acquire);
  uint64_t have = atomic_load(&o->blk), take;
  do
    take = n < have ? n : have;
  while (take && !atomic_compare_exchange_weak(&o->blk, &have, have - take));
  if (a && take) sl__budget_resident(a, take, 0);
}

/* Opens the shard of the lane's unit; a local shard must be the one
 * construction found. */
static int piece_open(wds_open *o, wds_lane *L) {
  const char *path = o->paths[o->plan.units[L->unit].file];
  SL_FORWARD_IF_ERROR(sl__wds_shard_open(path, &L->sh));
  L->pos = 0;
  if (sl__is_url(path) ||
      sl__file_id_equal(&L->sh->id, &o->ids[o->plan.units[L->unit].file]))
    return SL_OK;
  sl__wds_shard_close(L->sh);
  L->sh = NULL;
  return sl_set_error(SL_ECORRUPT,
                      "wds: %s: the shard changed since it was opened "
                      "(replaced or rewritten: its inode, size or "
                      "modification time differs)",
                      path);
}

/* The next sample of the lane's unit: samples [first, first + count) of
 * its shard (world 1: to its end).  SL_OK, SL_EOF at the unit's end, or an
 * error. */
static int piece_next(wds_open *o, wds_lane *L, sl_sample **out) {
  const sl__plan_unit *u = &o->plan.units[L->unit];
  uint64_t from = u->first, end = o->world == 1 ? UINT64_MAX : from + u->count;
  while (L->pos < end) {
    /* Samples before the piece, and those skipped (a restore), are walked
     * by their headers alone; under SL_WDS_MISSING_SKIP an incomplete
     * sample is no position of the pass. */
    L->sh->headers_only = L->pos < from || L->skip > 0;
    int rc = sl__wds_shard_group(L->sh);
    if (rc == SL_EOF && end != UINT64_MAX)
      return sl_set_error(SL_ECORRUPT,
                          "wds: %s: ended after %llu samples; it had %llu "
                          "when the reader was opened (the shard changed?)",
                          o->paths[u->file], (unsigned long long)L->pos,
                          (unsigned long long)o->nsamples[u->file]);
    if (rc != SL_OK) return rc;
    if (o->lay->skip_incomplete && !sl__wds_group_complete(L->sh, o->lay))
      continue;
    if (L->pos++ < from) continue;
    if (L->skip) {
      L->skip--;
      continue;
    }
    return sl__wds_shard_sample(L->sh, o->lay, out);
  }
  return SL_EOF;
}

/* Up to o->block of the lane's next samples into v[*n ...]: SL_OK (the
 * block full), SL_EOF (the lane ended), or an error. */
static int lane_fill(wds_open *o, wds_lane *L, sl_sample **v, size_t *n) {
  while (*n < o->block) {
    if (!L->sh) {
      if (L->unit >= o->plan.nunits) return SL_EOF;
      SL_FORWARD_IF_ERROR(piece_open(o, L));
    }
    int rc = piece_next(o, L, &v[*n]);
    lane_charge(o, L);
    if (rc == SL_OK) {
      (*n)++;
      continue;
    }
    sl__wds_shard_close(L->sh); /* no handle outlives its unit */
    L->sh = NULL;
    lane_charge(o, L);
    if (rc != SL_EOF) return rc;
    L->unit += o->T;
  }
  return SL_OK;
}

/* The engine's pull: item k is block k / T of lane k % T (a NULL item);
 * the end once every lane has ended. */
static int wo_pull(void *ud, sl_sample **out) {
  wds_open *o = ud;
  if (atomic_load_explicit(&o->live, memory_order_acquire) == 0) return SL_EOF;
  *out = NULL;
  return SL_OK;
}

/* The engine's process: the lane's next block.  An ended lane's items, and
 * an empty block, are SKIPs (the consumer learns the round is resolved);
 * an error ends the lane and is kept for the consumer with the round it
 * belongs to, after the samples read before it, so it reaches the output
 * at its position. */
static int wo_process(void *ud, void *wctx, uint64_t seq, sl_sample *in,
                      sl_sample ***out, size_t *n) {
  (void)wctx;
  (void)in;
  wds_open *o = ud;
  wds_lane *L = &o->lanes[seq % o->T];
  *n = 0;
  if (L->ended) return SL__ENGINE_SKIP;
  sl_sample **v = sl__malloc(o->block * sizeof *v);
  int rc = v ? lane_fill(o, L, v, n)
             : sl_set_error(SL_ENOMEM, "wds: out of memory");
  if (rc != SL_OK) {
    L->ended = true;
    if (rc != SL_EOF) {
      L->err = rc;
      L->msg = sl__error_dup();
      atomic_store_explicit(&L->err_round, seq / o->T, memory_order_release);
    }
    atomic_fetch_sub_explicit(&o->live, 1, memory_order_release);
  }
  if (*n == 0) {
    sl__free(v);
    return SL__ENGINE_SKIP;
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < *n; i++)
    bytes += sl_sample_nbytes(v[i]);
  blocks_add(o, bytes);
  *out = v;
  return SL__ENGINE_OUT;
}

/* The engine's skip handler (the consumer's thread, in item order): an
 * item without samples resolves its place in the round. */
static int wo_skipped(void *ud, uint64_t seq, const char *note) {
  (void)note;
  ((wds_open *)ud)->resolved = seq + 1;
  return SL_OK;
}

static void wo_signal_stop(void *st) {
  sl__engine_signal_stop(((wds_open *)st)->eng);
}

/* Releases the samples of the round's blocks not handed out yet. */
static void drop_round(wds_open *o) {
  for (uint32_t t = 0; t < o->T; t++) {
    wds_lane *L = &o->lanes[t];
    for (size_t i = L->at; i < L->n; i++)
      sl_sample_release(L->v[i]);
    sl__free(L->v);
    L->v = NULL;
    L->n = L->at = 0;
  }
}

/* Every lane back at its first unit, nothing open or kept.  The engine is
 * stopped. */
static void lanes_rewind(wds_open *o) {
  drop_round(o);
  for (uint32_t t = 0; t < o->T; t++) {
    wds_lane *L = &o->lanes[t];
    sl__wds_shard_close(L->sh);
    L->sh = NULL;
    lane_charge(o, L);
    sl__free(L->msg);
    *L = (wds_lane){.unit = t, .err_round = UINT64_MAX};
  }
  atomic_store(&o->live, o->T);
}

/* --- the consumer -------------------------------------------------------- */

/* Ends the pass: `rc` (SL_EOF or an error, its message set) is returned
 * again by every later call until a reset. */
static int wo_over(wds_open *o, int rc) {
  o->over = true;
  o->over_rc = rc;
  if (rc < 0) o->over_msg = sl__error_dup();
  return rc;
}

/* Takes the items of the round from the engine into their lanes' blocks
 * (an item of a later round waits in o->pend). */
static int load_round(wds_open *o) {
  uint64_t last = (o->round + 1) * o->T;
  for (;;) {
    if (o->pend.v) {
      if (o->pend.seq >= last) break; /* this round is resolved */
      wds_lane *L = &o->lanes[o->pend.seq % o->T];
      L->v = o->pend.v;
      L->n = o->pend.n;
      L->at = 0;
      o->pend.v = NULL;
      continue;
    }
    if (o->eof || o->resolved >= last) break;
    int rc =
        sl__engine_next_many(o->eng, &o->pend.v, &o->pend.n, &o->pend.seq);
    if (rc == SL_EOF) o->eof = true;
    else if (rc < 0) return rc;
    else o->resolved = o->pend.seq + 1;
  }
  o->loaded = true;
  return SL_OK;
}

static int plan_pass(wds_open *o);

static int wo_start(wds_open *o) {
  SL_FORWARD_IF_ERROR(plan_pass(o));
  SL_FORWARD_IF_ERROR(sl__engine_start(o->eng));
  o->started = true;
  return SL_OK;
}

/* One sample from each lane in turn, passing over ended ones: the lanes'
 * blocks of a round interleaved sample by sample. */
static int wo_next(void *st, sl_sample **out) {
  wds_open *o = st;
  if (o->over)
    return o->over_rc == SL_EOF
               ? SL_EOF
               : sl_set_error(o->over_rc, "%s",
                              o->over_msg ? o->over_msg : "wds: failed");
  if (!o->started) SL_FORWARD_IF_ERROR(wo_start(o));
  for (;;) {
    if (!o->loaded) {
      int rc = load_round(o);
      if (rc < 0) return wo_over(o, rc);
    }
    for (uint32_t tries = 0; tries < o->T; tries++) {
      uint32_t t = o->turn;
      wds_lane *L = &o->lanes[t];
      o->turn = (t + 1) % o->T;
      if (L->at < L->n) {
        *out = L->v[L->at++];
        blocks_sub(o, sl_sample_nbytes(*out));
        o->ring[o->out++ % SL__STATE_LOG] = (uint16_t)t;
        o->count[t]++;
        return SL_OK;
      }
      if (atomic_load_explicit(&L->err_round, memory_order_acquire) ==
          o->round)
        return wo_over(o, sl_set_error(L->err, "%s", L->msg ? L->msg : ""));
    }
    /* every lane's block is spent: the next round, from the first lane */
    if (o->eof) return wo_over(o, SL_EOF);
    drop_round(o);
    o->round++;
    o->turn = o->rot;
    o->loaded = false;
  }
}

/* Stops the engine and forgets the pass (positions, blocks, lanes). */
static void clear_pass(wds_open *o) {
  sl__engine_stop(o->eng);
  for (size_t i = 0; o->pend.v && i < o->pend.n; i++)
    sl_sample_release(o->pend.v[i]);
  sl__free(o->pend.v);
  o->pend.v = NULL;
  sl__free(o->over_msg);
  o->over_msg = NULL;
  lanes_rewind(o);
  blocks_sub(o, UINT64_MAX); /* blocks dropped, the engine's with them */
  for (uint32_t t = 0; t < o->T; t++)
    o->count[t] = 0;
  o->round = o->resolved = o->out = o->ring_from = 0;
  o->turn = o->rot = o->turn_from = 0;
  o->loaded = o->eof = o->started = o->over = false;
}

static int wo_reset(void *st) {
  wds_open *o = st;
  clear_pass(o);
  o->pass++;
  return SL_OK;
}

static void wo_destroy(void *st) {
  wds_open *o = st;
  if (!o) return;
  if (o->eng && o->lanes && o->count) clear_pass(o);
  sl__engine_destroy(o->eng);
  for (size_t i = 0; i < o->nfiles; i++)
    sl__free(o->paths ? o->paths[i] : NULL);
  SL__FREE(o->paths, o->sizes, o->ids, o->lpaths, o->lids, o->recs, o->pf);
  sl__plan_free(&o->plan);
  SL__FREE(o->nsamples, o->count, o->lanes);
  sl__wds_layout_free(o->lay);
  sl__free(o);
}

/* Record: T, files, total size, the local shards' identities, then (replay
 * flag, turn, counts[T]). */
static int wo_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                   sl__state_out *w) {
  wds_open *o = st;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, o->T));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, o->nfiles));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, o->total));
  SL_FORWARD_IF_ERROR(sl__state_put_file_ids(w, o->lids, o->nlocal));
  /* the ring is this pass's: a pass before (a repeat above reset the
   * reader) replays that pass */
  bool known = pass == sl__reader_pass(r) && k <= o->out &&
               k >= o->ring_from && o->out - k < SL__STATE_LOG - 1;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, known ? 0 : 1));
  if (!known) return SL_OK;
  uint64_t turn = k == o->ring_from
                      ? o->turn_from
                      : (o->ring[(k - 1) % SL__STATE_LOG] + 1u) % o->T;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, turn));
  for (uint32_t t = 0; t < o->T; t++) {
    uint64_t c = o->count[t];
    for (uint64_t i = k; i < o->out; i++)
      c -= o->ring[i % SL__STATE_LOG] == t;
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, c));
  }
  return SL_OK;
}

/* Reads the record up to the replay flag: the same shards and threads,
 * unchanged. */
static int wo_record(const wds_open *o, sl__state_in *in, uint64_t *replay) {
  uint64_t T, n, total;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &T));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &n));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &total));
  SL_RETURN_ERROR_IF(
      T != o->T || n != o->nfiles || total != o->total, SL_ECORRUPT,
      "restore: wds: the state is of %llu shards (%llu bytes) "
      "read by %llu threads; this reader has %zu (%llu bytes) "
      "and %u",
      (unsigned long long)n, (unsigned long long)total, (unsigned long long)T,
      o->nfiles, (unsigned long long)o->total, o->T);
  SL_FORWARD_IF_ERROR(
      sl__state_check_file_ids(in, "wds", o->lpaths, o->lids, o->nlocal));
  return sl__state_get_u64(in, replay);
}

static int wo_check(const sl_reader *r, void *st, sl__state_in *in) {
  uint64_t replay;
  return wo_record(st, in, &replay);
}

static int wo_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                      sl__state_in *in) {
  wds_open *o = st;
  uint64_t replay;
  SL_FORWARD_IF_ERROR(wo_record(o, in, &replay));
  clear_pass(o);
  o->pass = pass;
  if (replay) return sl__state_replay(wo_next, o, k, "wds");
  uint64_t turn;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &turn));
  uint64_t sum = 0;
  for (uint32_t t = 0; t < o->T; t++) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &o->count[t]));
    o->lanes[t].skip = o->count[t];
    sum += o->count[t];
  }
  SL_RETURN_ERROR_IF(turn >= o->T || sum != k, SL_ECORRUPT,
                     "restore: wds: a malformed state");
  /* Rounds start at the restored turn: the lanes before it are one
   * sample ahead, so the interleave goes on as it was. */
  o->turn = o->rot = o->turn_from = (uint32_t)turn;
  o->out = o->ring_from = k; /* a save behind k replays */
  return SL_OK;
}

static void wo_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const wds_open *o = st;
  snprintf(
      buf, cap, "shards=%zu threads=%u shuffle=%d seed=%llu rank=%d/%d%s%s%s%s",
      o->nfiles, o->T, o->shuffle, (unsigned long long)o->seed, o->rank,
      o->world,
      o->world == 1                  ? ""
      : o->policy == SL_SHARD_DROP   ? " remainder=drop"
      : o->policy == SL_SHARD_UNEVEN ? " remainder=uneven"
                                     : " remainder=pad",
      o->lay->fields ? " fields=" : "", o->lay->fields ? o->lay->fields : "",
      o->lay->skip_incomplete ? " missing=skip" : "");
}

/* World 1: every sample of every shard (local shards counted once, by
 * their headers); world > 1: the rank's share of them. */
static int wo_length(const sl_reader *r, void *st, uint64_t *n) {
  wds_open *o = st;
  for (size_t i = 0; i < o->nfiles && !o->nsamples; i++)
    SL_RETURN_ERROR_IF(sl__is_url(o->paths[i]), SL_EUNSUPPORTED,
                       "wds_open: the number of samples a pass yields is "
                       "not known before reading it (shard %s is read by "
                       "URL; local shards are counted by their headers)",
                       o->paths[i]);
  SL_FORWARD_IF_ERROR(count_samples(o));
  *n = o->world == 1 ? o->nall
                     : sl_shard_count(o->nall, o->rank, o->world, o->policy);
  return SL_OK;
}

/* The memory budget: the lanes' open shards (lane_charge) and the blocks
 * read ahead (blocks_add), from the next sample a lane reads. */
static void wo_budget(void *st, sl__budget_acct *acct) {
  atomic_store_explicit(&((wds_open *)st)->acct, acct, memory_order_release);
}

static const sl__stage_ops wo_ops = {
    .name = "wds_open",
    .next = wo_next,
    .reset = wo_reset,
    .destroy = wo_destroy,
    .length = wo_length,
    .save = wo_save,
    .restore = wo_restore,
    .identity = wo_identity,
    .check = wo_check,
    .stop = wo_signal_stop,
    .budget = wo_budget,
};

/* The names, braces and globs expanded by the registry (sl__names_expand);
 * a name without a tag is "wds:". */
static int expand_names(const char *const *names, size_t n, wds_open *o) {
  char **tagged = sl__calloc(n, sizeof *tagged);
  SL_RETURN_ERROR_IF(!tagged, SL_ENOMEM, "wds: out of memory");
  int rc = SL_OK;
  for (size_t i = 0; i < n && rc == SL_OK; i++) {
    if (!names[i]) {
      rc = sl_set_error(SL_EINVAL, "wds: name %zu is NULL", i);
      break;
    }
    /* "TAG:..." when a letter starts it and no '/' comes before ':'; a URL
     * ("https://...") is a path. */
    const char *colon = strchr(names[i], ':');
    bool has_tag = colon && isalpha((unsigned char)names[i][0]) &&
                   !memchr(names[i], '/', (size_t)(colon - names[i])) &&
                   !sl__is_url(names[i]);
    size_t len = strlen(names[i]);
    tagged[i] = sl__malloc(len + 5);
    if (!tagged[i]) {
      rc = sl_set_error(SL_ENOMEM, "wds: out of memory");
      break;
    }
    snprintf(tagged[i], len + 5, "%s%s", has_tag ? "" : "wds:", names[i]);
  }
  sl__named_file *files = NULL;
  size_t nf = 0;
  if (rc == SL_OK)
    rc = sl__names_expand("wds", (const char *const *)tagged, n, &files, &nf);
  for (size_t i = 0; i < n; i++)
    sl__free(tagged[i]);
  sl__free(tagged);
  SL_FORWARD_IF_ERROR(rc);
  SL_RETURN_ERROR_IF(nf > MAX_NAMES, SL_EINVAL,
                     "wds: the names expand to %zu shards, more than %d", nf,
                     MAX_NAMES);
  o->paths = sl__calloc(nf, sizeof *o->paths);
  o->sizes = sl__calloc(nf, sizeof *o->sizes);
  o->ids = sl__calloc(nf ? nf : 1, sizeof *o->ids);
  o->lpaths = sl__calloc(nf ? nf : 1, sizeof *o->lpaths);
  o->lids = sl__calloc(nf ? nf : 1, sizeof *o->lids);
  rc = o->paths && o->sizes && o->ids && o->lpaths && o->lids
           ? SL_OK
           : sl_set_error(SL_ENOMEM, "wds: out of memory");
  for (size_t i = 0; i < nf && rc == SL_OK; i++) {
    if (strcmp(files[i].tag, "wds") != 0)
      rc = sl_set_error(SL_EINVAL,
                        "wds: %s has format '%s', but sl_wds_open reads "
                        "only wds shards",
                        files[i].path, files[i].tag);
    else if (!(o->paths[i] = sl__strdup(files[i].path)))
      rc = sl_set_error(SL_ENOMEM, "wds: out of memory");
    else
      o->nfiles = i + 1;
  }
  sl__named_files_free(files, nf);
  return rc;
}

/* The class names beside the first shard (sl__wds_classes_name, written
 * by `sluice pack images --format wds`), when it is local and has them,
 * into the schema's "classes" metadata, joined by ','. */
static int read_classes(wds_open *o) {
  char name[4096];
  if (sl__is_url(o->paths[0]) ||
      sl__wds_classes_name(o->paths[0], name, sizeof name) < 0)
    return SL_OK;
  FILE *f = fopen(name, "rb");
  if (!f) return SL_OK;
  char *buf = sl__malloc(SL__WDS_CLASSES_MAX + 1);
  size_t n = buf ? fread(buf, 1, SL__WDS_CLASSES_MAX + 1, f) : 0;
  bool err = ferror(f) != 0;
  fclose(f);
  SL_RETURN_ERROR_IF(!buf, SL_ENOMEM, "wds: out of memory");
  int rc = SL_OK;
  if (err || n > SL__WDS_CLASSES_MAX)
    rc =
        sl_set_error(err ? SL_EIO : SL_EINVAL, "wds: %s: %s", name,
                     err ? "cannot read it" : "more than 1 MiB of class names");
  /* lines -> "a,b,c" (a last line without '\n' counts) */
  size_t k = 0;
  for (size_t i = 0; i < n && rc == SL_OK; i++) {
    if (buf[i] == ',' || buf[i] == 0) {
      rc = sl_set_error(SL_EINVAL,
                        "wds: %s: a class name holds a ',' or a NUL byte "
                        "(offset %zu)",
                        name, i);
    } else if (buf[i] == '\n') {
      if (i + 1 < n) buf[k++] = ',';
    } else if (buf[i] != '\r') {
      buf[k++] = buf[i];
    }
  }
  buf[k] = 0;
  if (rc == SL_OK && k) rc = sl_schema_set_meta(o->lay->schema, "classes", buf);
  sl__free(buf);
  return rc;
}

/* The layout from the first shard's first sample; every shard's size. */
static int survey(wds_open *o, const char *fields, int missing) {
  sl__wds_shard *sh;
  SL_FORWARD_IF_ERROR(sl__wds_shard_open(o->paths[0], &sh));
  int rc = sl__wds_shard_group(sh);
  if (rc == SL_EOF)
    rc = sl_set_error(SL_EINVAL,
                      "wds: %s: no samples (the first shard "
                      "decides the fields)",
                      o->paths[0]);
  if (rc == SL_OK) rc = sl__wds_layout_make(sh, fields, missing, &o->lay);
  sl__wds_shard_close(sh);
  if (rc == SL_OK) rc = read_classes(o);
  for (size_t i = 0; i < o->nfiles && rc == SL_OK; i++) {
    struct stat st;
    if (sl__is_url(o->paths[i])) /* sized when fetched: 0 in the states */
      o->sizes[i] = 0;
    else if (stat(o->paths[i], &st) != 0)
      rc = sl_set_error(SL_EIO, "wds: %s: %s", o->paths[i], strerror(errno));
    else {
      o->total += o->sizes[i] = (uint64_t)st.st_size;
      o->ids[i] = sl__file_id_of(&st);
      o->lpaths[o->nlocal] = o->paths[i];
      o->lids[o->nlocal++] = o->ids[i];
    }
  }
  /* One pack run's shards, or other tools' (wds.h: the set identity). */
  if (rc == SL_OK)
    rc = sl__wds_set_check("wds", (const char *const *)o->paths, o->nfiles);
  return rc;
}

int sl_wds_open(const char *const *names, size_t n, const sl_wds_opts *opts,
                sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "wds: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!names || n == 0, SL_EINVAL, "wds: no shard names");
  sl_wds_opts p = SL_WDS_OPTS_INIT;
  if (opts)
    SL_FORWARD_IF_ERROR(sl__opts_copy("sl_wds_opts", &p, sizeof p, opts));
  if (p.threads == 0) p.threads = 1;
  /* The lane count is part of the order: it cannot change with the CPUs. */
  SL_RETURN_ERROR_IF(p.threads == SL_THREADS_AUTO, SL_EINVAL,
                     "wds: threads = SL_THREADS_AUTO is not available (the "
                     "number of lanes decides the order); give a count");
  SL_FORWARD_IF_ERROR(sl__threads_check("wds", (long)p.threads));
  SL_RETURN_ERROR_IF(p.threads > UINT16_MAX - 1, SL_EINVAL,
                     "wds: at most %d threads", UINT16_MAX - 1);
  if (p.world == 0) SL_FORWARD_IF_ERROR(sl_shard_env(&p.rank, &p.world));
  SL_RETURN_ERROR_IF(p.world < 1 || p.rank < 0 || p.rank >= p.world, SL_EINVAL,
                     "wds: rank %d is not in [0, world %d)", p.rank, p.world);
  SL_RETURN_ERROR_IF(p.remainder != SL_SHARD_PAD &&
                         p.remainder != SL_SHARD_DROP &&
                         p.remainder != SL_SHARD_UNEVEN,
                     SL_EINVAL,
                     "wds: remainder %d is not SL_SHARD_PAD, SL_SHARD_DROP "
                     "or SL_SHARD_UNEVEN",
                     (int)p.remainder);
  wds_open *o = sl__calloc(1, sizeof *o);
  SL_RETURN_ERROR_IF(!o, SL_ENOMEM, "wds: out of memory");
  atomic_init(&o->acct, NULL);
  atomic_init(&o->blk, 0);
  o->T = p.threads;
  o->shuffle = p.shuffle;
  o->seed = p.seed;
  o->rank = p.rank;
  o->world = p.world;
  o->policy = p.remainder;
  /* Each lane holds a block at the consumer and one in the engine: about
   * `buffer` samples read ahead per thread. */
  o->block = SL_MAX(1, (p.buffer ? p.buffer : DEFAULT_BUFFER) / 2);
  int rc = expand_names(names, n, o);
  if (rc == SL_OK) rc = survey(o, p.fields, p.missing);
  if (rc == SL_OK && o->world > 1) rc = count_samples(o);
  if (rc == SL_OK) {
    o->recs = sl__calloc(o->nfiles, sizeof *o->recs);
    o->pf = sl__calloc(o->nfiles, sizeof *o->pf);
    for (size_t i = 0; o->recs && o->pf && i < o->nfiles; i++)
      o->pf[i] = (sl__plan_file){1, &o->recs[i]};
    o->count = sl__calloc(o->T, sizeof *o->count);
    o->lanes = sl__calloc(o->T, sizeof *o->lanes);
    if (!o->recs || !o->pf || !o->count || !o->lanes)
      rc = sl_set_error(SL_ENOMEM, "wds: out of memory");
  }
  if (rc == SL_OK) {
    /* A window of T items, one per lane: a lane's next block is pulled
     * after its last was taken, so its blocks are read one at a time. */
    static const sl__engine_ops ops = {wo_pull, NULL, NULL, NULL, NULL};
    sl__engine_opts eo = {"wds", "sl-wds", (int)o->T, true, o->T};
    rc = sl__engine_create(&ops, o, &eo, &o->eng);
  }
  if (rc == SL_OK) {
    sl__engine_process_many(o->eng, wo_process);
    sl__engine_on_skip(o->eng, wo_skipped);
    sl__engine_set_cache(o->eng, 1);    /* the window is the exact bound */
    lanes_rewind(o);
  }
  if (rc < 0) {
    wo_destroy(o);
    return rc;
  }
  return sl__stage_new(&wo_ops, o, o->lay->schema, NULL, 0,
                       sl__engine_counters(o->eng), out);
}
