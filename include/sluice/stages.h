/*
 * sluice/stages.h - stages beyond reader.h's: reshaping and distributing,
 * language-model data, samplers and splits.  Part of sluice.h: include
 * <sluice.h>, whose opening comment states the conventions that hold here.
 */
#ifndef SLUICE_API_STAGES_H
#define SLUICE_API_STAGES_H

#include "open.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Reshaping and distributing: unbatch, rebatch, interleave, shard           */
/* ------------------------------------------------------------------------ */

/* Each batch of `up` split into its rows, along the leading dimension
 * (tf.data's unbatch).  A field of upstream schema [B, d...] yields rows
 * [d...]; a field named in lod[0..nlod) (borrowed names, copied) holds LoD
 * sequences (sl_batch's concatenated variable fields: schema [SL_DIM_VAR,
 * t...]) and is split by its offsets: row i is [lod[i+1] - lod[i], t...] and
 * the output schema keeps the field's shape.  Bytes fields follow the same
 * rules.  Rows are views of the batch's buffers, not copies.  A batch whose
 * fields disagree on the row count, a listed field without LoD offsets or an
 * unlisted one with them is SL_ESHAPE naming the field and the batch.
 * Construction: SL_EINVAL for a rank-0 field, a listed field that does not
 * exist or whose first dimension is fixed.  Length: upstream's length x B
 * when every field's B is fixed, else unknown.  Save/restore: a save maps
 * its position to (batch j, row r) through a log of the last 1024 batches'
 * first rows, resumes upstream at j and drops r rows (a save further behind
 * replays the pass).  Takes `up`, also on failure.  Single consumer. */
SL_API int sl_unbatch(sl_reader *up, const char *const *lod, size_t nlod,
                      sl_reader **out);

/* The rows of `up`'s batches re-cut into batches of n (tf.data's rebatch):
 * sl_unbatch(up, lod, nlod) then sl_batch(n, opts) (`opts` NULL: keep the
 * last partial batch; LoD fields are concatenated with LoD again).  Errors,
 * length and save/restore are those of the two stages.  n 0 is SL_EINVAL.
 * Takes `up`, also on failure.  Single consumer. */
SL_API int sl_rebatch(sl_reader *up, size_t n, const sl_batch_opts *opts,
                      const char *const *lod, size_t nlod, sl_reader **out);

/* Options of sl_interleave*.  Extensible: `size` must be
 * sizeof(sl_interleave_opts) (SL_INTERLEAVE_OPTS_INIT sets it and the
 * defaults). */
typedef struct sl_interleave_opts {
  size_t size;      /* sizeof(sl_interleave_opts) */
  uint32_t cycle;   /* sources open at once, >= 1 (INIT: 1) */
  uint32_t threads; /* 0: sources read on the consumer's thread; > 0: each
                       open source is read ahead on a prefetch thread of its
                       own (so up to `cycle` threads), holding up to
                       threads x block samples; the order is unchanged;
                       SL_THREADS_AUTO (reader.h): each open source is read
                       ahead with prefetch("auto")'s tuned depth (at most
                       4096 samples and 16 MiB per source) */
  uint64_t block;   /* samples taken from a source per turn, >= 1 (INIT: 1) */
} sl_interleave_opts;
/* clang-format off */
#define SL_INTERLEAVE_OPTS_INIT {sizeof(sl_interleave_opts), 1, 0, 1}
/* clang-format on */

/* Opens source i (0 <= i < n) of sl_interleave_sources into *out: returns
 * SL_OK, or an error with its message (the pass then fails with it).  Called
 * on the consumer's thread (or a restoring thread), again each pass. */
typedef int (*sl_source_open_fn)(void *ud, size_t i, sl_reader **out);

/* tf.data's interleave (deterministic): `cycle` sources are open at once;
 * the stage takes `block` samples from each in turn, round robin; when a
 * source ends its slot is emptied and the turn moves on, and the next time
 * the turn reaches the empty slot the next unopened source opens there
 * (sources open in order 0, 1, ...).  The order depends only on the
 * sources' contents, never on `threads`.  Errors of a source pass through
 * and end the pass.
 *
 * sl_interleave takes the `n` readers (also on failure); their schemas must
 * be equal (SL_ESHAPE naming the first that differs).  Reset resets them
 * all.  Length: the sum of the readers' lengths.  Save/restore: the cycle's
 * position (open slots, their sources' positions) through a log of the last
 * outputs; each reader is saved at its own position (a save further behind
 * than the log replays the pass).
 *
 * sl_interleave_sources opens source i by calling open(ud, i) when its turn
 * comes and destroys it when it ends, so at most `cycle` are open (plus
 * source 0, opened at construction for the schema and used by the first
 * pass); each pass opens them again.  A source whose schema differs from
 * source 0's fails the pass (SL_ESHAPE naming it).  free_ud(ud) runs on
 * destroy and on failure.  `ident` (borrowed, copied; NULL: none) names the
 * sources for state checks.  Length: unknown.  Save/restore: the cycle's
 * position; a restore opens the cycle's sources again and reads each up to
 * its position (cost: those samples, not the pass).
 *
 * sl_interleave_open: sources by sl_open name (`names[0..n)`, copied; tags,
 * globs as sl_open, each name one source), opened lazily as above.
 *
 * SL_EINVAL: n 0, a NULL reader, name or callback, cycle or block 0,
 * threads beyond the limit; SL_EUNSUPPORTED for a larger opts->size;
 * `opts` NULL means SL_INTERLEAVE_OPTS_INIT.  Single consumer. */
SL_API int sl_interleave(sl_reader **readers, size_t n,
                         const sl_interleave_opts *opts, sl_reader **out);
SL_API int sl_interleave_sources(size_t n, sl_source_open_fn open, void *ud,
                                 sl_free_fn free_ud, const char *ident,
                                 const sl_interleave_opts *opts,
                                 sl_reader **out);
SL_API int sl_interleave_open(const char *const *names, size_t n,
                              const sl_interleave_opts *opts, sl_reader **out);

/* Options of sl_shard.  Extensible: `size` must be sizeof(sl_shard_opts)
 * (SL_SHARD_OPTS_INIT sets it and the default). */
typedef struct sl_shard_opts {
  size_t size;               /* sizeof(sl_shard_opts) */
  sl_shard_policy remainder; /* INIT: SL_SHARD_UNEVEN */
} sl_shard_opts;
#define SL_SHARD_OPTS_INIT {sizeof(sl_shard_opts), SL_SHARD_UNEVEN}

/* Rank `rank` of `world`'s share of any reader (tf.data's shard): upstream
 * sample i of a pass goes to rank i % world; the stage reads the whole pass
 * and yields its rank's samples in order.  The last n % world samples of a
 * pass of n follow opts->remainder (PyTorch DistributedSampler's choices):
 * SL_SHARD_UNEVEN (default, tf.data): ranks below n % world yield one more;
 * SL_SHARD_DROP (drop_last): every rank yields floor(n/world), only complete
 * groups of `world` count (no sample twice over the ranks); SL_SHARD_PAD:
 * every rank yields ceil(n/world), positions >= n wrapping to the first
 * samples of the pass (sample p mod n), which needs sl_reader_length of `up`
 * (SL_EUNSUPPORTED saying so when unknown; a pass of another length is
 * SL_ECORRUPT).  World and rank from the launcher's environment:
 * sl_shard_env.  SL_EINVAL: world < 1, rank not in [0, world), a bad
 * remainder.  Length: the share of upstream's.  Save/restore: the
 * upstream position of the rank's next sample (a pad rank that still owes
 * its wrapped sample rereads from it).  Takes `up`, also on failure.
 * Single consumer. */
SL_API int sl_shard(sl_reader *up, int world, int rank,
                    const sl_shard_opts *opts, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Language-model data: token shards, windows, packing, padded and bucketed */
/* batches, weighted mixtures (docs/TEXT.md)                                */
/* ------------------------------------------------------------------------ */

/* Options of the token-shard reader.  Extensible like sl_open_opts: `size`
 * is sizeof(sl_tokens_opts) as the caller compiled it (SL_TOKENS_OPTS_INIT
 * sets it); the zero of every other field is its default. */
typedef struct sl_tokens_opts {
  size_t size;
  int64_t seq_len; /* T >= 1: each sample is T inputs and T targets */
  int shuffle;     /* 1: shard order per pass, window order within each */
  uint64_t seed;   /* of the shuffle: (seed, pass) decides every order */
  int rank;        /* this rank, 0 <= rank < world */
  int world;       /* ranks; 0: 1 for sl_tokens_reader, the launcher's
                      environment (sl_shard_env) for sl_tokens_open/sl_open */
  uint64_t block;  /* windows per rank block; 0 means 1 */
  int batch;       /* 1: each sample is a block, [block, T] (below) */
} sl_tokens_opts;
#define SL_TOKENS_OPTS_INIT {sizeof(sl_tokens_opts), 0, 0, 0, 0, 0, 0, 0}

/* A reader of token shards `paths[0..n)`: llm.c's format (a header of 256
 * little-endian int32: magic 20240520, version 1, token count N; then N
 * little-endian uint16 tokens) or a .npy file of a 1-D '<u2' or '<u4' array
 * (told apart by their first bytes).  Each file is checked at construction
 * (magic, version, header, its size against N: SL_ECORRUPT naming the file
 * and what is wrong; SL_EIO when it cannot be opened) and mapped with mmap
 * while it is read.  Samples are {inputs: i32[T], targets: i32[T]}: the
 * T + 1 tokens from w*T of window w (targets = inputs shifted by one), for
 * w < (N - 1) / T within each shard (a shard shorter than T + 1 tokens
 * gives none).  Ranks: the windows of a shard form rounds of world x block
 * windows (an incomplete last round is left out, so every rank gets as
 * many); rank r takes windows [(g*world + r)*block, ... + block) of round g.
 * With block = B and no shuffle, sl_batch(B) on rank r of W gives, batch for
 * batch, llm.c's DataLoader(B, T, r, W) batches within each shard.  Shards
 * come in the order given, windows in order; with shuffle, the shard order
 * of each pass and the round order within each shard are permutations drawn
 * from (seed, pass, shard), the same on every rank.  With batch = 1 each
 * sample is a whole block, {inputs: i32[block, T], targets: i32[block,
 * T]}: what sl_batch(block) makes of the windows (llm.c's batch), cut in
 * one go from the block's contiguous tokens instead of copied again.
 * Length: known.  Saves its position (no payload).  Borrows the strings (copied).  Returns SL_OK
 * and *out, SL_EINVAL (no files, seq_len < 1, rank outside [0, world)),
 * SL_ECORRUPT, SL_EIO or SL_ENOMEM. */
SL_API int sl_tokens_reader(const char *const *paths, size_t n,
                            const sl_tokens_opts *opts, sl_reader **out);
/* sl_tokens_reader over the files `name` names ("tokens:" optional; a glob
 * pattern expands in byte order, as sl_open), world 0 taken from the
 * launcher's environment (sl_shard_env).  The whole set is one reader, so
 * shuffle permutes the shard order too; sl_open("tokens:...") with
 * sl_open_opts.tokens opens each file as its own reader and chains them
 * (shards in glob order, windows shuffled within each). */
SL_API int sl_tokens_open(const char *name, const sl_tokens_opts *opts,
                          sl_reader **out);

/* Fixed windows over a token stream (tf.data's window + flat_map): the
 * values of field `field` (a rank-1 variable-length i32, u16 or u32 field)
 * of every upstream sample, concatenated across sample boundaries, are cut
 * into windows of `size` values starting every `stride` values (window j:
 * stream values [j*stride, j*stride + size)).  Samples are {field: [size]}
 * of the field's dtype, the other fields dropped.  At the end of the pass,
 * windows that start inside the stream but are short are yielded
 * (shape [SL_DIM_VAR] then) unless drop_remainder.  stride 0 means size.
 * Saves its position: the upstream sample where the next window starts and
 * the offset in it (further behind than its last 1024 windows: where the
 * 1024-th window before the position started, and the restore makes fewer
 * than 1024 windows again).  Returns SL_OK,
 * SL_EINVAL (size 0, unknown field, wrong dtype or shape) or SL_ENOMEM;
 * takes `up` also on failure. */
SL_API int sl_window(sl_reader *up, const char *field, size_t size,
                     size_t stride, int drop_remainder, sl_reader **out);

/* Options of sl_pack.  Zero is the default of every field but seq_len. */
typedef struct sl_pack_opts {
  size_t size;             /* sizeof(sl_pack_opts) */
  int64_t seq_len;         /* T >= 1: tokens per row */
  const char *const *fields; /* the fields packed; NULL: the first rank-1
                                i32/u16/u32/i64 field */
  size_t nfields;
  int has_eos;             /* 1: append `eos` to every document */
  int64_t eos;             /* must fit i32 when has_eos (SL_EINVAL) */
  int64_t pad;             /* value of padding positions (default 0; must
                              fit i32, SL_EINVAL) */
  size_t lookahead;        /* rows open at once for first-fit; 0 means 8 */
  int truncate;            /* documents longer than T: 0 split into pieces
                              of T (each its own segment), 1 keep the first
                              T tokens */
} sl_pack_opts;
#define SL_PACK_OPTS_INIT {sizeof(sl_pack_opts), 0, NULL, 0, 0, 0, 0, 0, 0}

/* Packs variable-length documents (the rank-1 i32/u16/u32/i64 fields
 * `fields`, equally long in each sample) into rows of exactly T tokens:
 * samples {<field>: i32[T]..., segment_ids: i32[T], positions: i32[T]},
 * segment_ids numbering the documents of a row 1, 2, ... (0: padding) and
 * positions counting from 0 within each document.  First fit over a
 * bounded look-ahead: each document goes into the first of the `lookahead`
 * open rows with room for it; when none has room a new row opens, and
 * when more than `lookahead` are open the oldest is yielded; at the end of
 * the pass the open rows are yielded oldest first.  Empty documents (with
 * no eos) are skipped.  Deterministic.  Statistics: sl_pack_stats.  Saves
 * where the oldest row held at the position opened (the document and token,
 * and the fill of the rows open then): a restore reads again only the
 * documents since then (about lookahead + 1 rows), not the pass (docs/
 * RESUME.md).  Returns SL_OK,
 * SL_EINVAL (seq_len < 1, unknown or unsuitable field) or SL_ENOMEM; takes
 * `up` also on failure. */
SL_API int sl_pack(sl_reader *up, const sl_pack_opts *opts, sl_reader **out);
/* The packing figures of the first pack stage of r's chain in the order of
 * sl_reader_stats (r itself first, then its upstreams depth first): rows
 * yielded, non-pad tokens in
 * them and efficiency = tokens / (rows x T) (0 before the first row); each
 * out pointer may be NULL.  Cumulative over passes.  SL_ENOTFOUND when the
 * chain has no pack stage, SL_EINVAL for NULL r.  Same thread rule as
 * sl_reader_stats. */
SL_API int sl_pack_stats(const sl_reader *r, uint64_t *rows, uint64_t *tokens,
                         double *efficiency);

/* A padding value for one field of sl_padded_batch / sl_bucket_batch. */
typedef struct sl_pad_value {
  const char *field;
  double value; /* converted to the field's dtype */
} sl_pad_value;

typedef struct sl_padded_batch_opts {
  size_t size;              /* sizeof(sl_padded_batch_opts) */
  int64_t to;               /* 0: the longest in the batch; > 0: that length
                               (a longer sample is SL_ESHAPE) */
  const sl_pad_value *pad;  /* per-field values (default 0) */
  size_t npad;
  int drop_remainder;       /* 1: no short last batch */
} sl_padded_batch_opts;
#define SL_PADDED_BATCH_OPTS_INIT {sizeof(sl_padded_batch_opts), 0, NULL, 0, 0}

/* Batches of n samples whose variable fields (dim 0 variable, the others
 * fixed) are padded along dim 0 with their pad value to the longest in the
 * batch (or to `to`), each followed by "<name>_len" i64[B], the lengths;
 * fixed fields are stacked (tf.data's padded_batch).  Saves its position
 * (batch k starts at upstream sample k*n).  Returns SL_OK, SL_EINVAL (n 0,
 * a pad for an unknown field, a field that cannot be padded) or SL_ENOMEM;
 * takes `up` also on failure. */
SL_API int sl_padded_batch(sl_reader *up, size_t n,
                           const sl_padded_batch_opts *opts, sl_reader **out);

typedef struct sl_bucket_batch_opts {
  size_t size;                /* sizeof(sl_bucket_batch_opts) */
  const char *length;         /* field whose dim 0 is the length; NULL: the
                                 first variable field */
  const int64_t *boundaries;  /* nboundaries increasing lengths */
  size_t nboundaries;
  const size_t *batch_sizes;  /* nboundaries + 1 sizes, each >= 1 */
  const sl_pad_value *pad;    /* per-field values (default 0) */
  size_t npad;
  int pad_to_bucket;          /* 1: pad to the bucket's bound - 1 (the last
                                 bucket: the longest in the batch) */
  int drop_remainder;         /* 1: drop the partial buckets at the end */
} sl_bucket_batch_opts;
#define SL_BUCKET_BATCH_OPTS_INIT                                              \
  {sizeof(sl_bucket_batch_opts), NULL, NULL, 0, NULL, NULL, 0, 0, 0}

/* Batches by length (tf.data's bucket_by_sequence_length): a sample of
 * length L goes to bucket i, the first with L < boundaries[i] (the last,
 * nboundaries, when none); a bucket that holds batch_sizes[i] samples is
 * yielded as a padded batch (sl_padded_batch's fields); at the end of the
 * pass the partial buckets are yielded in bucket order unless
 * drop_remainder.  No random draw: the output is a function of the input
 * order (shuffle upstream for random batches).  Saves its position and the
 * samples its buckets hold (the state grows with them); a restore reads
 * nothing again.  Returns SL_OK, SL_EINVAL or
 * SL_ENOMEM; takes `up` also on failure. */
SL_API int sl_bucket_batch(sl_reader *up, const sl_bucket_batch_opts *opts,
                           sl_reader **out);

typedef enum sl_mix_stop {
  SL_MIX_STOP_FIRST = 0, /* the mixture ends when a drawn reader ends */
  SL_MIX_STOP_ALL = 1,   /* an ended reader leaves the draw; ends with the
                            last */
  SL_MIX_STOP_NEVER = 2  /* an ended reader is reset and drawn again */
} sl_mix_stop;

typedef struct sl_mix_opts {
  size_t size;            /* sizeof(sl_mix_opts) */
  const double *weights;  /* n weights >= 0, not all 0; NULL: equal */
  uint64_t seed;
  int stop;               /* an sl_mix_stop */
  /* 0 (default): each pass draws its own order (keyed by the pass number);
   * 1: every pass draws pass 0's order, as tf.data's sample_from_datasets
   * does unless rerandomize_each_iteration. */
  int keep_order;
} sl_mix_opts;
/* clang-format off */
#define SL_MIX_OPTS_INIT {sizeof(sl_mix_opts), NULL, 0, SL_MIX_STOP_FIRST, 0}
/* clang-format on */

/* Draws each output from one of `readers[0..n)` chosen by weight: output j of
 * pass p comes from the reader a counter-based draw keyed by (seed, p, j) -
 * (seed, 0, j) with keep_order - picks among those still drawn (weights
 * renormalised), so the same seed gives the same interleaving whatever the
 * threads do.  A restore to pass p followed by a reset draws pass p + 1's order
 * (pass 0's with keep_order), as the run that saved would have.  The readers
 * must have equal schemas (SL_ESHAPE).  Statistics: sl_mix_counts.  Saves its
 * position and each reader's own (the draws walked back from the last
 * output, no data read); a restore reads nothing again.  Takes the readers also on
 * failure.  Returns SL_OK, SL_EINVAL (no readers, bad weights or stop),
 * SL_ESHAPE or SL_ENOMEM. */
SL_API int sl_mix(sl_reader **readers, size_t n, const sl_mix_opts *opts,
                  sl_reader **out);
/* The samples the first mix stage of r's chain (in sl_reader_stats's
 * order, r first) has taken from each of its readers, cumulative over passes: counts[i]
 * for i < min(cap, readers), *n (may be NULL) the number of readers.  The
 * realised shares are counts[i] / sum.  SL_ENOTFOUND without a mix stage,
 * SL_EINVAL for NULL r or NULL counts with cap > 0. */
SL_API int sl_mix_counts(const sl_reader *r, uint64_t *counts, size_t cap,
                         size_t *n);

/* ------------------------------------------------------------------------ */
/* --- samplers and splits --- (src/stages/sampler.c, docs/LUA.md)          */
/* ------------------------------------------------------------------------ */

/* These stages read their upstream by position (random access), never by
 * pulling it: the upstream must offer it - range, from_array, slr (policy
 * fail), idx, sl_cache, and these stages themselves - else the constructor
 * fails with SL_EUNSUPPORTED suggesting sl_cache or sampling the source
 * before a map.  Positions and indices are 0-based.  Each saves its
 * position (a pass is a pure function of its seed and pass number). */

typedef struct sl_weighted_sample_opts {
  size_t size;             /* sizeof(sl_weighted_sample_opts) */
  uint64_t num_samples;    /* samples per pass; 0: the upstream's length */
  int without_replacement; /* 1: each index at most once per pass */
  uint64_t seed;
  uint64_t cache; /* bytes of decoded chunks kept, as sl_global_shuffle's
                     (SL_GLOBAL_SHUFFLE_CACHE_AUTO, the default) */
} sl_weighted_sample_opts;
#define SL_WEIGHTED_SAMPLE_OPTS_INIT                                           \
  {sizeof(sl_weighted_sample_opts), 0, 0, 0, UINT64_MAX}

/* PyTorch's WeightedRandomSampler: each pass yields num_samples samples of
 * `up`, index i drawn with probability weights[i] / sum (n_weights must be
 * up's length, which must be known).  Draw k of pass p is a pure function
 * of (seed, p, k) (without replacement: of (seed, p)), so passes differ and
 * repeat exactly after a restore.  Without replacement num_samples must not
 * exceed the number of nonzero weights.  `weights` is copied.  An SLR
 * upstream keeps the chunks the draws decode within `cache` bytes and the
 * memory budget, as sl_global_shuffle's frame cache (without a budget the
 * default keeps nothing: a draw decodes its frame or chunk).  Takes `up`
 * also on failure.  Returns SL_OK; SL_EINVAL (weights negative, NaN,
 * infinite, all 0, or not one per sample; num_samples too large);
 * SL_EUNSUPPORTED (no random access or unknown length); SL_ENOMEM. */
SL_API int sl_weighted_sample(sl_reader *up, const double *weights,
                              size_t n_weights,
                              const sl_weighted_sample_opts *opts,
                              sl_reader **out);

/* PyTorch's Subset: each pass yields up's samples at indices[0..n) in that
 * order (repeats allowed; `indices` is copied).  An index past up's length
 * is SL_EINVAL naming it when the length is known, else the pass's error
 * when reached.  An SLR upstream keeps the chunks it decodes as the memory
 * budget allows (sl_global_shuffle's frame cache with its default size).
 * Takes `up` also on failure.  Returns SL_OK, SL_EINVAL,
 * SL_EUNSUPPORTED (no random access) or SL_ENOMEM. */
SL_API int sl_subset(sl_reader *up, const uint64_t *indices, size_t n,
                     sl_reader **out);

/* PyTorch's random_split: partitions up's samples (its length must be
 * known) into k readers out[0..k) by one permutation drawn from `seed`
 * (the same seed, the same split).  sizes[0..k) are fractions summing to 1
 * - each floor(n * f), then the remainder one by one round-robin from the
 * first (PyTorch's rule) - or whole counts summing to n.  The k readers
 * share `up` through a mutex-guarded, refcounted handle: each is an
 * independent reader (own position, reset, destroy) that may be used on
 * its own thread; the last destroyed destroys `up`.  Takes `up` also on
 * failure (every out[i] is then NULL).  Returns SL_OK; SL_EINVAL (bad
 * sizes, NULL arguments); SL_EUNSUPPORTED (no random access, unknown
 * length); SL_ENOMEM. */
SL_API int sl_random_split(sl_reader *up, const double *sizes, size_t k,
                           uint64_t seed, sl_reader **out);

/* Options of sl_global_shuffle.  Extensible: `size` must be
 * sizeof(sl_global_shuffle_opts) (SL_GLOBAL_SHUFFLE_OPTS_INIT sets it and
 * the defaults). */
typedef struct sl_global_shuffle_opts {
  size_t size;               /* sizeof(sl_global_shuffle_opts) */
  uint64_t seed;
  int rank, world;           /* world 0: both from sl_shard_env */
  sl_shard_policy remainder; /* how ranks split the pass (SL_SHARD_PAD) */
  uint64_t cache; /* bytes of decoded frames kept (below); 0: none;
                     SL_GLOBAL_SHUFFLE_CACHE_AUTO (the default): as the
                     memory budget allows */
  uint32_t threads; /* 0: fetch on the caller's thread; N: N workers;
                       SL_THREADS_AUTO (below) */
} sl_global_shuffle_opts;
#define SL_GLOBAL_SHUFFLE_CACHE_AUTO UINT64_MAX
#define SL_GLOBAL_SHUFFLE_OPTS_INIT                                            \
  {sizeof(sl_global_shuffle_opts), 0, 0, 0, SL_SHARD_PAD,                      \
   SL_GLOBAL_SHUFFLE_CACHE_AUTO, 0}

/* A uniform shuffle of the whole data set, new every pass: pass p yields
 * up's samples at the positions of a pseudo-random permutation of [0, n)
 * drawn from (seed, p) - a Feistel permutation computed per position, so
 * O(1) memory whatever n, no window and no index list - the rank's share
 * of it under `remainder` (sl_shard_policy: equal counts under PAD and
 * DROP).  up must have random access and a known length n.  The state is
 * the position (restored without replay).
 * The frame cache: an upstream that decodes more than the sample it is
 * asked for (an SLR file decodes the sample's frame, or its whole chunk
 * in a file without frames; a chain of such files) keeps what it decodes
 * for later draws, in this pass and the next, up to `cache` bytes of
 * decoded data over all its files: a data set whose decoded size fits is
 * decoded once, not once per sample (a file of 4 KiB frames about one
 * frame decode per record otherwise).  SL_GLOBAL_SHUFFLE_CACHE_AUTO keeps
 * frames while the chain's memory budget (sl_reader_set_budget; the Lua,
 * CLI and Python layers give one by default) would keep half its capacity
 * free after them, the kept bytes charged to the file's reader; without a
 * budget, AUTO keeps nothing, and a number keeps up to that many bytes
 * (under a budget, also only while it keeps half its capacity free).
 * The cache is freed with the stage.
 * Threads: with `threads` N >= 1, N workers of the parallel-stage engine
 * fetch the pass's entries ahead of the caller and hand them on in the
 * pass's order (the same samples, order and states as on the caller's
 * thread, whatever N; SL_THREADS_AUTO: as many as the engine's tuner
 * chooses).  Fetches run at once when the upstream's can (SLR files,
 * chains of them, range, arrays), else one at a time.  Takes `up` also on
 * failure; SL_EINVAL for a thread count above the limit.
 * Returns SL_OK; SL_EINVAL (rank not in [0, world), a bad remainder);
 * SL_EUNSUPPORTED (no random access, unknown length); SL_ENOMEM. */
SL_API int sl_global_shuffle(sl_reader *up, const sl_global_shuffle_opts *opts,
                             sl_reader **out);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_STAGES_H */
