/* epoch_plan.h - the one sharded epoch plan: which units (records of
 * chunks of files) one rank reads in one epoch, and in what order.  Every
 * multi-file source plans with it (open_files: SLR chunks' records;
 * wds_open: tar shards' samples; tokens_reader: token shards' rounds) and
 * decodes the units it lists.  Pure functions of their arguments; the
 * definition is in epoch_plan.c's banner and docs/DATA.md. */
#ifndef SLUICE_EPOCH_PLAN_H
#define SLUICE_EPOCH_PLAN_H

#include "core/internal.h"

/* One input file: its chunks' record counts (borrowed). */
typedef struct sl__plan_file {
  uint64_t nchunks;
  const uint32_t *records; /* [nchunks] */
} sl__plan_file;

/* The window of sl_open_files_opts.window == 0: chunks whose records are
 * permuted together.  32 makes batches of 64 from class-sorted files hold
 * ~9.8 of 10 classes (docs/DATA.md, "What the shuffle options trade"). */
#define SL__PLAN_DEFAULT_WINDOW 32u

/* Which keys draw the permutations: each format's pinned order (the
 * definitions are in epoch_plan.c's banner). */
typedef enum sl__plan_keys {
  SL__PLAN_SLR,    /* chunks and windows' records (open_files) */
  SL__PLAN_WDS,    /* chunks (one per shard) only (wds_open) */
  SL__PLAN_TOKENS, /* chunks (one per shard) only; the decoder orders each
                      shard's rounds by stream `shard` (tokens_reader) */
} sl__plan_keys;

typedef struct sl__plan_params {
  uint64_t seed, epoch;
  bool shuffle;
  uint32_t window; /* chunks per shuffle window, >= 1 */
  int rank, world; /* 0 <= rank < world */
  sl_shard_policy policy;
  sl__plan_keys keys; /* 0: SL__PLAN_SLR */
} sl__plan_params;

/* A unit of work: some records of one chunk.  The records are `count`
 * record numbers within the chunk, in the order the rank outputs them:
 * first, first + 1, ... when recs is NULL, else recs[0..count).  A unit
 * alone in its group is output as it stands; in a group of several units,
 * record j of the unit goes to position slots[j] of the group's output. */
typedef struct sl__plan_unit {
  uint32_t file;
  uint64_t chunk;
  uint32_t first, count;
  const uint32_t *recs;  /* NULL: the range [first, first + count) */
  const uint32_t *slots; /* NULL iff the unit is alone in its group */
} sl__plan_unit;

/* Consecutive units whose records interleave in the output: the part of
 * one shuffle window that falls in one contiguous segment of the rank's
 * share. */
typedef struct sl__plan_group {
  size_t first_unit, nunits;
  uint64_t records; /* the sum of the units' counts */
} sl__plan_group;

typedef struct sl__plan {
  sl__plan_unit *units;
  size_t nunits;
  sl__plan_group *groups;
  size_t ngroups;
  uint64_t records; /* this rank's records in the epoch */
  uint64_t total;   /* records in the epoch's sequence, all ranks */
  uint32_t *pool;   /* storage of every recs and slots array */
  size_t pool_len, pool_cap;
} sl__plan;

/* Builds the plan of rank p->rank for epoch p->epoch over `nfiles` files.
 * Returns SL_OK, SL_EINVAL (bad parameters, or a window holding 2^32 records
 * or more) or SL_ENOMEM; *out is empty (zeroed) on failure.  Free it with
 * sl__plan_free.  Thread-safe (no shared state). */
int sl__plan_build(const sl__plan_file *files, size_t nfiles,
                   const sl__plan_params *p, sl__plan *out);
void sl__plan_free(sl__plan *plan);
/* sl__plan_build for explicit positions of the epoch sequence instead of
 * the rank's share: segs[2i] .. segs[2i+1] for i < nsegs, sorted, disjoint
 * and non-empty (SL_EINVAL otherwise).  segs == NULL: the share.  The rest
 * of an epoch after an elastic restore (sl_reader_restore_elastic). */
int sl__plan_build_segments(const sl__plan_file *files, size_t nfiles,
                            const sl__plan_params *p, const uint64_t *segs,
                            size_t nsegs, sl__plan *out);

/* The permutation keys of the plan (documented in docs/DATA.md): the
 * key of the chunk permutation (window == UINT64_MAX) or of window w's
 * record permutation. */
uint64_t sl__plan_key(uint64_t seed, uint64_t epoch, uint64_t window);
/* The key of stream `stream` under scheme `keys`: UINT64_MAX the chunk
 * order; else SLR's window `stream`, TOKENS' rounds of shard `stream`. */
uint64_t sl__plan_stream_key(sl__plan_keys keys, uint64_t seed, uint64_t epoch,
                             uint64_t stream);
/* Fisher-Yates permutation of [0, n) into a, drawn from xoshiro256**
 * seeded from `key`. */
void sl__plan_permute(uint64_t key, uint32_t *a, size_t n);

#endif
