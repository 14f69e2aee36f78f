/*
 * sluice/stats.h - run statistics.  Part of sluice.h: include <sluice.h>,
 * whose opening comment states the conventions that hold here.
 */
#ifndef SLUICE_API_STATS_H
#define SLUICE_API_STATS_H

#include "reader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Run statistics: where a pipeline spends its time (docs/PERFORMANCE.md)     */
/* ------------------------------------------------------------------------ */

/* Every reader counts the samples it hands out.  Timing (two monotonic clock
 * reads per sample per stage, plus per-batch figures in the threaded
 * stages) is off until sl_stats_enable(1); it then applies to every reader
 * of the process from that moment on.  Thread-safe. */
SL_API void sl_stats_enable(int on);
/* 1 when timing is on.  Thread-safe. */
SL_API int sl_stats_enabled(void);

/* One stage of a reader chain, as seen since it was made (cumulative over
 * passes).  Times are seconds of thread time summed over the stage's
 * threads; they are 0 while timing is off.
 *   name         the stage name (sl_reader_name; static storage).
 *   depth        0 for the reader asked about, +1 per hop upstream.
 *   downstream   index (in the same array) of the stage this one feeds, -1
 *                for depth 0.
 *   threads      threads doing the stage's own work (prefetch 1, a Lua map
 *                its workers, open_files its readers); 0 when the stage runs
 *                on the thread that calls its next.
 *   samples_in   samples taken from its upstreams (a source: = samples_out).
 *   samples_out  samples (batches, for batch) it handed downstream.
 *   next_s       time its callers spent inside its next (for depth 0: how
 *                long the consumer waited for the pipeline).
 *   busy_s       its own work, upstream excluded: for a stage without
 *                threads, next_s less its upstreams' next_s; for a threaded
 *                stage, what its threads measured.
 *   wait_up_s    time waiting for upstream: inside the upstreams' next, and
 *                for several workers sharing one upstream, waiting for the
 *                turn to pull.
 *   wait_down_s  time its threads were blocked because what they produced
 *                was not taken yet (a full queue or window); 0 without
 *                threads.
 *   errors_ignored  samples left out because of their error since the stage
 *                was made, over every pass (ignore_errors of the parallel
 *                and Lua map / filter, decode_image's skip policy); 0 for
 *                other stages.
 *   queue_depth  prefetch: its channel's depth in samples now (n, or what
 *                sl_prefetch_auto chose so far); 0 for other stages.
 *   last_error   the message of the last ignored error ("" when none),
 *                truncated to fit; a copy (the row owns it).
 *   samples_fused  a map fused with the batch right above it (sl_batch,
 *                no_fuse): outputs its workers wrote straight into the
 *                batch's rows instead of handing them on; 0 for other
 *                stages.
 *   threads_auto 1 for a stage whose threads are tuned (SL_THREADS_AUTO,
 *                Lua threads = "auto"): `threads` is then the workers the
 *                tuner runs now, threads_max those started; 0 otherwise
 *                (threads_max = threads).
 *   bytes_held   with a memory budget (sl_reader_set_budget): the payload
 *                bytes (sl_sample_nbytes) the stage holds now, counting the
 *                sample it handed out last until the stage above takes
 *                it over; 0 without a budget.
 *   bytes_peak   the most it held at once since the budget was set.
 *   budget_bytes the chain's memory budget (the same in every row); 0:
 *                none.
 *   budget_default_pct  for a default budget (sl_reader_default_budget):
 *                its share of memory_usable in percent; 0 for a budget
 *                set with sl_reader_set_budget, or none.
 *   memory_usable  for a default budget: the memory it is a share of
 *                (SLUICE_MEMORY_LIMIT, else the container's limit or the
 *                physical memory); 0 otherwise. */
typedef struct sl_stage_stats {
  const char *name;
  int depth;
  int downstream;
  int threads;
  uint64_t samples_in;
  uint64_t samples_out;
  double next_s;
  double busy_s;
  double wait_up_s;
  double wait_down_s;
  uint64_t errors_ignored;
  uint64_t queue_depth;
  char last_error[256];
  uint64_t samples_fused;
  int threads_auto;
  int threads_max;
  uint64_t bytes_held;
  uint64_t bytes_peak;
  uint64_t budget_bytes;
  int budget_default_pct;
  uint64_t memory_usable;
} sl_stage_stats;

/* Walks the chain of `r` depth-first from r (index 0) to its sources and
 * fills out[0 .. min(cap, count)), upstreams after their downstream;
 * *count (required) receives the number of stages, so cap 0 asks for the
 * size.  Readers made through sl_reader_new with an external vtable appear
 * as sources (their upstreams are not known).  May run while the chain's
 * threads work (the figures are then a moment's snapshot); not while `r` is
 * being reset or destroyed.  Returns SL_OK or SL_EINVAL (NULL r or count, or
 * NULL out with cap > 0). */
SL_API int sl_reader_stats(const sl_reader *r, sl_stage_stats *out,
                           size_t cap, size_t *count);

/* The stage limiting throughput over a run of `wall_s` seconds: -1 when the
 * consumer waited for data (stats[0].next_s) less than 10% of wall_s (the
 * pipeline keeps up; the consumer is the limit), -2 when timing was off or
 * the arguments are unusable (n == 0, wall_s <= 0); otherwise the index of
 * the stage whose busy_s is the largest share of its capacity (wall_s times
 * max(threads, 1); threads_max for a stage with threads_auto).  Pure function; thread-safe. */
SL_API int sl_stats_limiting(const sl_stage_stats *stats, size_t n,
                             double wall_s);
/* Formats a table of `stats` (one line per stage, indented by depth: in, out,
 * busy, waits, the share of capacity used) and a closing line naming the
 * limiting stage (sl_stats_limiting), then one "oversubscribed:" line per stage
 * running more threads than this machine runs well (4 x the usable CPUs, at
 * least 8), and a last "machine:" line (the usable CPUs and memory: the
 * affinity mask and the cgroup's CPU quota and memory limit), into buf
 * (NUL-terminated, truncated to cap).  Returns the length
 * the whole text needs, like snprintf, or SL_EINVAL for NULL stats with n > 0
 * or NULL buf with cap > 0.  Thread-safe. */
SL_API int sl_stats_format(const sl_stage_stats *stats, size_t n,
                           double wall_s, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_STATS_H */
