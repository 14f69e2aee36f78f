/*
 * sluice/reader.h - readers (the pull contract), sources, decorators,
 * channels.  Part of sluice.h: include <sluice.h>, whose opening comment
 * states the conventions that hold here.
 */
#ifndef SLUICE_API_READER_H
#define SLUICE_API_READER_H

#include "data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Readers: the pull contract every source and decorator implements         */
/* ------------------------------------------------------------------------ */

typedef struct sl_reader sl_reader;

/* Implementing a reader from outside the library: fill a vtable (static
 * storage) and call sl_reader_new.  The wrapper functions below add what
 * every reader shares (sticky errors, has_next peek, NULL checks), so an
 * implementation only does its own job:
 *   next:    SL_OK with a sample the caller will own, SL_EOF, or an error
 *            (set the detail with sl_set_error).  Never called again after an
 *            error until reset.
 *   reset:   start the next pass from the beginning (Paddle's ReInit); may be
 *            NULL, meaning the reader cannot be reset (SL_EUNSUPPORTED).
 *   destroy: free `state` and everything it owns, including upstreams; may be
 *            NULL when there is nothing to free. */
typedef struct sl_reader_vtable {
  const char *name; /* stage name used in messages ("shuffle", "my_reader") */
  int (*next)(void *state, sl_sample **out);
  int (*reset)(void *state);
  void (*destroy)(void *state);
} sl_reader_vtable;

/* Creates a reader.  Borrows `vt` (it must outlive the reader); takes `state`
 * (vt->destroy is called on it by sl_reader_destroy, and also when this call
 * fails); retains and freezes `schema`.  Returns NULL with SL_EINVAL/SL_ENOMEM
 * detail on failure. */
SL_API sl_reader *sl_reader_new(const sl_reader_vtable *vt, void *state,
                                sl_schema *schema);

/* Pulls the next sample.  Returns SL_OK with *out owned by the caller, SL_EOF
 * at the end of the pass (repeatable), or a negative error; on SL_EOF and
 * errors *out is set to NULL (what it pointed to before the call is not
 * released: release a sample before passing its variable again).  Errors are
 * sticky: every later call returns the same code and restores the same detail
 * message, until sl_reader_reset. */
SL_API int sl_reader_next(sl_reader *r, sl_sample **out);
/* One-sample peek: 1 if a sample is available (it is kept for the next
 * sl_reader_next), 0 at end of data, a negative error otherwise. */
SL_API int sl_reader_has_next(sl_reader *r);
/* Starts the next pass from the beginning; clears a sticky error and any
 * peeked sample.  Returns SL_OK or an error (which becomes sticky). */
SL_API int sl_reader_reset(sl_reader *r);
/* The schema of the samples this reader yields (borrowed, frozen). */
SL_API const sl_schema *sl_reader_schema(const sl_reader *r);
/* The stage name (borrowed static string). */
SL_API const char *sl_reader_name(const sl_reader *r);
/* How many samples one pass of `r` yields (batches, from a batch stage),
 * when the chain knows it without reading: SL_OK and *n.  Known for range,
 * array, slr files (policy fail), idx, open_files over slr files, and
 * through map, prefetch, shuffle, threaded, cache, batch (ceil(n / size),
 * floor with drop_last), take, skip, chain, zip, multi_pass, repeat_first.
 * SL_EUNSUPPORTED (*n = 0), the detail naming the stage, where a stage
 * cannot know: filter, generators, text files, a Lua reader, the skip_chunk
 * or skip policies, readers made with sl_reader_new.  SL_ELENGTH for a zip
 * (without truncate) of readers of different lengths.  SL_EINVAL for NULL
 * arguments.  Reads no data and does not change the reader; call it from
 * the thread that uses the reader (not during its reset). */
SL_API int sl_reader_length(const sl_reader *r, uint64_t *n);
/* Saving and restoring a position (docs/RESUME.md).
 *
 * sl_reader_save writes where `r` stands - its next sample is the k-th of
 * its current pass - as a small byte string: for every stage of the chain,
 * its name, options and the position of its upstreams that reproduces it
 * (not the samples it holds: those are read again after a restore).  The
 * state has a format version and a CRC32C.  Returns SL_OK with *state (free
 * it with sl_free) and *len; SL_EUNSUPPORTED naming the stage that cannot
 * save (a reader made with sl_reader_new, or a position a stage cannot
 * reproduce, e.g. an unordered stage below a shuffle); SL_EINVAL for NULL
 * arguments; SL_ENOMEM.  Does not change what `r` yields.  Call it from the
 * thread that pulls `r`, between pulls.
 *
 * sl_reader_restore moves `r` - a chain built the same way, in this process
 * or another - to the saved position: its next samples are exactly those an
 * uninterrupted run would have given from there (bytes and order, for
 * ordered stages; the same remaining samples for unordered ones), and later
 * resets continue with the passes that follow.  Refuses, leaving `r` as it
 * was: SL_ECORRUPT (not a state, cut short, checksum), SL_EUNSUPPORTED
 * (another format version), SL_EINVAL (a state of another pipeline: the
 * message names the first stage that differs, from the top, and how).  A
 * failure while repositioning (an I/O error re-reading data, data that
 * changed since the save: SL_ECORRUPT) is sticky on `r` until reset.  Same
 * thread rule as save. */
SL_API int sl_reader_save(sl_reader *r, void **state, size_t *len);
SL_API int sl_reader_restore(sl_reader *r, const void *state, size_t len);
/* Elastic restarts (docs/RESUME.md): resumes a job of W' ranks from the
 * states its W ranks saved (W' may differ from W).  `r` is this rank's
 * sl_open_files reader itself (not a chain over it: add decorators after
 * the restore), made with the same files and options as the old job's
 * except rank and world (sl_open_files_opts.rank / world, or the
 * launcher's environment) and threads; states[0..n) and
 * lens[0..n) are the n == W states the old ranks saved with
 * sl_reader_save, one per rank, in any order - every new rank gets all of
 * them.  The new ranks then deliver, together, each sample the old ranks
 * had not yet delivered in the interrupted epoch exactly once (split
 * evenly among them in epoch order: rank counts may differ by one sample,
 * whatever the remainder policy), and from the next epoch on read their
 * shares of a W'-rank job as usual.  A state saved after an elastic
 * restore holds this rank's part of the epoch and may be restored with
 * sl_reader_restore (same W') or elastically again.  The states are
 * borrowed; the caller frees them.
 *
 * Refuses, leaving `r` as it was: SL_EINVAL (NULL arguments, not one state
 * per old rank, two of one rank, states of another job: other files or
 * options), SL_ECORRUPT (not a state, checksum; a file changed since the
 * save, named), SL_EUNSUPPORTED (`r` is not open_files, states of
 * different epochs, corrupt chunks skipped under skip_chunk in the
 * interrupted epoch of an ordered reader).  Unordered readers (`unordered`)
 * are supported: their states name the units delivered.  Cost: the plans
 * of the interrupted epoch (and, for unordered states, a map of one bit
 * per record of the epoch).  A failure restarting the pass is
 * sticky until reset.  Threads: as sl_reader_restore (the thread that
 * pulls `r`); the reader's thread count may differ from the old job's. */
SL_API int sl_reader_restore_elastic(sl_reader *r, const void *const *states,
                                     const size_t *lens, size_t n);
/* Frees memory sluice allocated for the caller (a saved state).  NULL-safe.
 */
SL_API void sl_free(void *p);

/* Gives the whole chain of `r` one memory budget of `bytes` (> 0): the
 * bytes its stages hold (samples in a threaded stage's window or queue -
 * map, filter, flat_map, prefetch, decode_image - a shuffle's window, the
 * rows of a batch, padded_batch or bucket_batch being built and a cache's
 * samples, as
 * sl_sample_nbytes counts them) stay within it.  A threaded stage waits
 * for room before it pulls while it holds something (one that holds
 * nothing may always take one sample, so the pipeline never stalls on its
 * budget); a shuffle, which works on its caller's thread, takes what it
 * needs and leaves less to the others.  Each stage's bytes held and peak,
 * and the budget, are in its stats row (sl_reader_stats).  Call it once
 * per chain, before the first next: on the outermost reader it reaches
 * every stage, but threads that started when their stage was made may
 * have made one window of samples before it (counted, not bounded); on a
 * source, every stage made over it later joins it as it is made, bounded
 * from its first sample.  Errors: SL_EINVAL (NULL, 0 bytes), SL_ESTATE
 * (the chain already has a budget), SL_ENOMEM.  Later,
 * a sample larger than the budget, or a shuffle window needing more, ends
 * the pass with SL_ENOMEM "stage 'shuffle' needs N bytes ..., the budget is
 * M bytes".  Without a call, a chain has no budget (the C API; the Lua,
 * CLI and Python layers give one by default: sl_reader_default_budget).
 * What it does not count (pack's rows, decoded
 * images inside a stage, file read-ahead, Lua heaps): docs/LUA.md,
 * "Memory budget".  Threads: the thread that uses `r`, not while another
 * thread is inside it.  The budget is freed with the chain. */
SL_API int sl_reader_set_budget(sl_reader *r, uint64_t bytes);

/* The default memory budget's share of the memory the process may use. */
#define SL_BUDGET_DEFAULT_PERCENT 50

/* The default budget (issue 27): gives the chain of `r` a memory budget of
 * SL_BUDGET_DEFAULT_PERCENT % of the memory the process may use - the
 * environment's SLUICE_MEMORY_LIMIT (a size: bytes, or a number with K, M,
 * G or T) when set, else the container's limit (cgroup v2 memory.max, v1
 * memory.limit_in_bytes) or the physical memory, whichever is smaller - as
 * sl_reader_set_budget would, unless the chain already has a budget or
 * sl_reader_set_no_budget marked it (then it does nothing).  The C API sets
 * no budget by itself: the Lua layer calls this before a pipeline's first
 * sample, `sluice run` and Python's open_script after opening the script
 * (docs/LUA.md, "Memory budget").  The stats rows say the budget is a
 * default (budget_default_pct, memory_usable).  Returns SL_OK, or
 * SL_EINVAL (NULL r; SLUICE_MEMORY_LIMIT set but not a size, named),
 * SL_ENOMEM.  Threads: as sl_reader_set_budget. */
SL_API int sl_reader_default_budget(sl_reader *r);

/* Marks the chain of `r` as having no memory budget: a later
 * sl_reader_default_budget on it (or on a chain built over it) leaves it
 * without one (Lua p:budget(false), `sluice run --memory none`, Python
 * memory=False).  sl_reader_set_budget may still give it one.  Idempotent.
 * Errors: SL_EINVAL (NULL), SL_ESTATE (the chain has a budget already).
 * Threads: as sl_reader_set_budget. */
SL_API int sl_reader_set_no_budget(sl_reader *r);

/* Destroys the reader and the chain of upstreams it owns, joining any thread
 * it runs.  Safe at any moment (mid-pass, full channels).  NULL-safe. */
SL_API void sl_reader_destroy(sl_reader *r);

/* --- sources ------------------------------------------------------------ */

/* A reader over `n` samples in memory, yielded in order each pass.  Retains
 * each sample (borrows the array).  Every sample must share one schema
 * (sl_schema_equal with the first): SL_ESHAPE otherwise.  n == 0 needs
 * `schema`; otherwise `schema` may be NULL (the first sample's is used).
 * Returns SL_OK and *out, or an error. */
SL_API int sl_reader_from_array(sl_sample *const *samples, size_t n,
                                sl_schema *schema, sl_reader **out);

/* A reader driven by a C generator.  next(ud, &sample) returns SL_OK, SL_EOF
 * or an error; reset(ud) starts again (NULL: not resettable); free_ud(ud) is
 * called on destroy (and on failure of this call).  Retains `schema`. */
typedef int (*sl_gen_next_fn)(void *ud, sl_sample **out);
typedef int (*sl_gen_reset_fn)(void *ud);
typedef void (*sl_gen_free_fn)(void *ud);
SL_API int sl_reader_from_generator(sl_schema *schema, sl_gen_next_fn next,
                                    sl_gen_reset_fn reset,
                                    sl_gen_free_fn free_ud, void *ud,
                                    sl_reader **out);

/* 0, 1, ..., n-1 as samples with one field "i" (i64, rank 0). */
SL_API int sl_reader_range(int64_t n, sl_reader **out);

/* --- decorators ----------------------------------------------------------
 * Each takes ownership of `up` (also on failure: `up` is then destroyed), so
 * `sl_shuffle(sl_batch(...))` chains never leak.  A NULL `up` is SL_EINVAL.
 * Errors from upstream pass through unchanged, in order, with their message.
 */

/* Sliding-window shuffle with a buffer of `buffer_size` samples.  Pass p uses
 * a generator seeded from (seed, p); the output of a pass is a permutation of
 * its input.  buffer_size 0 is SL_EINVAL. */
SL_API int sl_shuffle(sl_reader *up, size_t buffer_size, uint64_t seed,
                      sl_reader **out);

typedef struct sl_batch_opts {
  int drop_last; /* drop a last partial batch */
  int pad;       /* ragged fields: padded [B, max, ...] + "<name>_len" i64[B]
                    instead of concatenated values + LoD */
  int lod;       /* fields with a variable dimension after the first (images
                    of unknown size, u8[-1,-1,-1]): concatenate them along
                    dim 0 with LoD offsets anyway; without lod or pad such a
                    field is SL_EINVAL.  Excludes pad.  Added last: zero-
                    initialise the struct ({0} or a designated initialiser)
                    so code written before it keeps its meaning. */
  int no_fuse;   /* do not fuse with the map below (docs/PERFORMANCE.md,
                    "Map and batch fused"): by default, when every field
                    stacks and upstream is a parallel map (Lua or C,
                    with or without ignore_errors, ordered or not), the
                    map's workers write their outputs
                    straight into the batch's rows; the batches, errors
                    and states are the same either way.  The environment
                    variable SLUICE_FUSE=0 turns fusion off everywhere.
                    Added last, like lod. */
} sl_batch_opts;
/* Groups `n` samples into one.  Fixed-shape fields stack along a new leading
 * dimension; variable fields (schema dims SL_DIM_VAR) whose only variable
 * dimension is the first (ragged sequences, i32[-1]) concatenate along dim 0
 * with LoD offsets, or pad (opts->pad).  A field with a variable dimension
 * after the first is SL_EINVAL naming it unless opts->lod or opts->pad asks
 * for one of those (LoD would otherwise merge 4 images of 40x40 into one of
 * 160x40 without a word).  Mismatched dtypes or trailing shapes are SL_ESHAPE
 * naming the field.  `opts` may be NULL (defaults: keep the last partial
 * batch, LoD for a variable first dimension).  n 0 is SL_EINVAL. */
SL_API int sl_batch(sl_reader *up, size_t n, const sl_batch_opts *opts,
                    sl_reader **out);

/* sl_multi_pass's k for "forever" (tf.data's repeat(), repeat(-1)). */
#define SL_PASSES_FOREVER UINT64_MAX

/* k passes of `up` (reset at each EOF but the last), as one pass. k >= 1.
 * k = SL_PASSES_FOREVER repeats until an upstream pass yields no sample,
 * which ends the pass (an empty upstream gives an empty pass instead of a
 * loop); its length is 0 over an empty upstream, else SL_EUNSUPPORTED. */
SL_API int sl_multi_pass(sl_reader *up, uint64_t k, sl_reader **out);
/* The first n samples of each pass (Paddle's firstn). */
SL_API int sl_take(sl_reader *up, uint64_t n, sl_reader **out);
/* Each pass without its first n samples. */
SL_API int sl_skip(sl_reader *up, uint64_t n, sl_reader **out);

/* filter: returns 1 to keep, 0 to drop, or a negative error (detail set with
 * sl_set_error).  Borrows the sample. */
typedef int (*sl_filter_fn)(void *ud, const sl_sample *s);
/* map: takes `in` (release it or return it) and stores the result in *out;
 * returns SL_OK or an error (then *out is ignored and `in` must already be
 * released by the callback). */
typedef int (*sl_map_fn)(void *ud, sl_sample *in, sl_sample **out);
typedef void (*sl_free_fn)(void *ud);
/* Keeps the samples for which fn returns 1.  free_ud(ud) on destroy. */
SL_API int sl_filter(sl_reader *up, sl_filter_fn fn, void *ud,
                     sl_free_fn free_ud, sl_reader **out);
/* Applies fn to each sample.  `schema` is the output schema (retained); NULL
 * means "same as upstream".  Outputs are checked against it (SL_ESHAPE). */
SL_API int sl_map(sl_reader *up, sl_map_fn fn, void *ud, sl_free_fn free_ud,
                  sl_schema *schema, sl_reader **out);

/* A `threads` option meaning "auto" (sl_map_parallel, sl_filter_parallel,
 * sl_decode_image, sl_image_reader, sl_open_files): the stage starts as
 * many workers as the usable CPUs (the affinity mask and the cgroup CPU
 * quota; at most 16 and the thread limit) and runs as many of them as a
 * tuner chooses at run time from the stage's busy time and its consumer's
 * waits (docs/PERFORMANCE.md, "Autotuning"); the workers of every auto
 * stage of the process that run at once stay within the usable CPUs + 1
 * (each stage runs at least one).  The output and its order are those of
 * any fixed count: the tuning changes speed, never the samples.  The
 * choice is in the stage's stats row (sl_stage_stats.threads, with
 * threads_auto set). */
#define SL_THREADS_AUTO 0xFFFFFFFEu

/* Options of sl_map_parallel / sl_filter_parallel.  Extensible: `size` must
 * be sizeof(sl_parallel_opts) (SL_PARALLEL_OPTS_INIT sets it and the
 * defaults). */
typedef struct sl_parallel_opts {
  size_t size;      /* sizeof(sl_parallel_opts) */
  uint32_t threads; /* worker threads, 1..the thread limit (0 = 1): 1024,
                       or SLUICE_MAX_THREADS; more than 4 x the usable
                       CPUs (at least 8) is accepted with a notice;
                       SL_THREADS_AUTO: tuned at run time */
  int unordered;    /* 0: upstream's order, identical for any number of
                       threads; 1: samples as soon as they are ready */
  uint32_t queue;   /* samples in flight (0: max(128, 32 x threads), auto:
                       the workers started) */
  /* tf.data's ignore_errors: 0 (default) an error of the callback ends the
   * pass; N > 0: a sample whose callback fails (any code but SL_ENOMEM;
   * not an output that fails the schema check, not an upstream error) is
   * left out and counted, at most N per pass; the (N+1)-th ends the pass
   * with SL_EINVAL and "<stage>: K samples failed in this pass,
   * more than ignore_errors (N); the last: <message>".  SL_IGNORE_ALL: no
   * cap.  Which samples are left out does not depend on `threads`; the
   * count restarts at each reset and restore.  The count and the last
   * message are in the stage's stats row (sl_stage_stats).  A map with
   * ignore_errors is no longer one-to-one: its length is not known. */
  uint64_t ignore_errors;
} sl_parallel_opts;
/* ignore_errors without a cap. */
#define SL_IGNORE_ALL UINT64_MAX
/* clang-format off */
#define SL_PARALLEL_OPTS_INIT {sizeof(sl_parallel_opts), 1, 0, 0, 0}
/* clang-format on */
/* sl_map and sl_filter run by `opts->threads` worker threads of the stage
 * (the parallel-stage engine, docs/ARCHITECTURE.md): the workers take
 * samples from `up` in turns, in runs, and call `fn` concurrently, so `fn`
 * must be thread-safe.  Outputs are checked on the workers.  In order
 * (default) the results are exactly sl_map's / sl_filter's; an error (a
 * callback's, upstream's) arrives at its position with its message, sticky
 * until reset.  Unordered, each result comes once, as it is ready; an error
 * ends the pass when it is reached.  `opts` may be NULL (1 thread, in
 * order).  SL_EINVAL for bad options (threads beyond the limit, a `size`
 * this library does not know: SL_EUNSUPPORTED for a larger one), SL_ENOMEM
 * when a thread cannot be started.  Ownership as sl_map / sl_filter. */
SL_API int sl_map_parallel(sl_reader *up, sl_map_fn fn, void *ud,
                           sl_free_fn free_ud, sl_schema *schema,
                           const sl_parallel_opts *opts, sl_reader **out);
SL_API int sl_filter_parallel(sl_reader *up, sl_filter_fn fn, void *ud,
                              sl_free_fn free_ud,
                              const sl_parallel_opts *opts, sl_reader **out);

/* The readers one after another as one pass.  Takes all `n` readers (also on
 * failure).  Their schemas must be equal: SL_ESHAPE otherwise.  When every
 * reader has random access and a known length, so does the chain (the
 * samplers and sl_global_shuffle read it as one data set). */
SL_API int sl_chain(sl_reader **readers, size_t n, sl_reader **out);
/* Samples of all readers side by side (Paddle's compose).  Takes all readers.
 * Field names must be distinct (SL_EINVAL).  Readers ending at different
 * times is SL_ELENGTH, unless `truncate`: the pass then ends with the
 * shortest. */
SL_API int sl_zip(sl_reader **readers, size_t n, int truncate, sl_reader **out);
/* The first complete pass is kept in memory and replayed on later passes
 * (upstream is not read again).  A reset before the first pass completes
 * discards the partial cache and restarts upstream.  It gives random access
 * to the samplers (sl_weighted_sample, sl_subset, sl_random_split): a
 * sample not yet held is read ahead from upstream, and the pass under way
 * continues from the held samples. */
SL_API int sl_cache(sl_reader *up, sl_reader **out);
/* Reads the first sample of each pass once and yields it n times (Paddle's
 * Fake reader, for speed tests). */
SL_API int sl_repeat_first(sl_reader *up, uint64_t n, sl_reader **out);

/* A worker thread pulls `up` into a channel of `n` samples (n >= 1) and keeps
 * going while the consumer is busy (Paddle's buffered).  The thread starts
 * now.  Upstream errors reach the consumer in order after the samples before
 * them.  Reset and destroy stop and join the worker first.  Besides the n
 * queued, the worker holds the sample it is sending and the consumer takes
 * up to 16 at a time, so at most n + 16 samples are pulled and not yet
 * handed out.  Its stats row's queue_depth is n. */
SL_API int sl_prefetch(sl_reader *up, size_t n, sl_reader **out);

/* Options of sl_prefetch_auto.  Extensible: `size` must be
 * sizeof(sl_prefetch_auto_opts) (SL_PREFETCH_AUTO_OPTS_INIT sets it and
 * the defaults). */
typedef struct sl_prefetch_auto_opts {
  size_t size;        /* sizeof(sl_prefetch_auto_opts) */
  uint64_t max_bytes; /* payload bytes the channel may hold (sample sizes
                         from sl_sample_nbytes); 0: 64 MiB */
  uint32_t max_depth; /* the largest depth in samples, 1..65536;
                         0: 1024 */
} sl_prefetch_auto_opts;
/* clang-format off */
#define SL_PREFETCH_AUTO_OPTS_INIT {sizeof(sl_prefetch_auto_opts), 0, 0}
/* clang-format on */
/* sl_prefetch whose depth is tuned while it runs (tf.data's AUTOTUNE for
 * prefetch): it starts at 1 sample; when the worker filled the channel to
 * its depth and the consumer later found it empty (a burst: the producer
 * keeps up on average, the consumer's demand is uneven), the depth
 * doubles, up to max_depth and to as many samples of the average size as
 * max_bytes holds.  A consumer slower than the producer never finds it
 * empty, and a producer slower than the consumer never fills it: the depth
 * stays where it is (it never shrinks).  The channel never holds more than
 * max_bytes, except one sample larger than that alone.  The consumer takes
 * one sample per lock round trip (no cache: the depth is the bound).  The
 * depth chosen is the stage's stats row's queue_depth, and survives
 * reset.  `opts` may be NULL (the defaults).  SL_EINVAL for bad options
 * (naming the option), SL_ENOMEM; takes `up` also on failure. */
SL_API int sl_prefetch_auto(sl_reader *up, const sl_prefetch_auto_opts *opts,
                            sl_reader **out);
/* A mutex-guarded reader: next, has_next and reset of the result may be
 * called from several threads at once. */
SL_API int sl_threaded(sl_reader *up, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Channels: bounded MPMC queues of samples                                  */
/* ------------------------------------------------------------------------ */

typedef struct sl_channel sl_channel;

/* A channel holding at most `capacity` samples (>= 1) and, when max_bytes >
 * 0, at most max_bytes payload bytes (sl_sample_nbytes) - except that an
 * empty channel always accepts one sample, so a large sample never
 * deadlocks.  NULL with SL_EINVAL/SL_ENOMEM detail on failure.  All channel
 * functions are thread-safe. */
SL_API sl_channel *sl_channel_new(size_t capacity, size_t max_bytes);
/* Destroys the channel, releasing samples still in it.  No thread may be
 * using it.  NULL-safe. */
SL_API void sl_channel_destroy(sl_channel *ch);

/* Sends `s`, blocking while full.  SL_OK: the channel took `s`.  SL_ECLOSED
 * (closed) or the kill code (killed): the caller still owns `s`. */
SL_API int sl_channel_send(sl_channel *ch, sl_sample *s);
/* Like sl_channel_send, but SL_EAGAIN instead of blocking. */
SL_API int sl_channel_try_send(sl_channel *ch, sl_sample *s);
/* Receives, blocking while empty and open.  SL_OK with *out owned by the
 * caller; SL_EOF once closed and drained; the kill code (with its message
 * restored as this thread's detail) once killed. */
SL_API int sl_channel_recv(sl_channel *ch, sl_sample **out);
/* Like sl_channel_recv, but SL_EAGAIN instead of blocking. */
SL_API int sl_channel_try_recv(sl_channel *ch, sl_sample **out);
/* Receives up to `max` samples at once (at least one, blocking like
 * sl_channel_recv); returns the count (> 0), SL_EOF or the kill code. */
SL_API int sl_channel_recv_many(sl_channel *ch, sl_sample **out, size_t max);

/* Ends the stream: senders get SL_ECLOSED; receivers drain what is left,
 * then get SL_EOF.  Idempotent; no effect on a killed channel. */
SL_API void sl_channel_close(sl_channel *ch);
/* Ends the stream with an error: senders get `code` at once; receivers get
 * `code` and `msg` (copied; may be NULL) after draining the samples sent
 * before the kill, so errors arrive in order.  The first kill wins.  `code`
 * must be negative and not SL_EOF. */
SL_API void sl_channel_kill(sl_channel *ch, int code, const char *msg);
/* Like kill, but samples still queued are released at once instead of
 * drained (used when the consumer is going away). */
SL_API void sl_channel_abort(sl_channel *ch, int code, const char *msg);
/* Reopens a closed or killed channel for the next pass, releasing whatever
 * it still holds.  No thread may be blocked on it. */
SL_API void sl_channel_reopen(sl_channel *ch);

SL_API size_t sl_channel_len(sl_channel *ch);   /* samples held now */
SL_API size_t sl_channel_bytes(sl_channel *ch); /* payload bytes held */
SL_API size_t sl_channel_capacity(const sl_channel *ch);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_READER_H */
