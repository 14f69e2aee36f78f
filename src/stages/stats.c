/*
 * stats.c - run statistics over a reader chain: the walk (sl_reader_stats),
 * the verdict (sl_stats_limiting) and the table (sl_stats_format).  The
 * timing switch (sl_stats_enable) is core/stats.c.
 *
 * Where the figures come from (see core/stats.h):
 *   samples_out  the reader base's count of samples its implementation gave.
 *   samples_in   the sum of the upstreams' samples_out (a source: its own).
 *   next_s       the reader base's time inside the implementation's next.
 *   wait_up_s    the upstreams' next_s (the time this stage, or its threads,
 *                spent inside upstream calls) plus, for a stage with worker
 *                threads, their wait for the turn to pull.
 *   busy_s       a stage with threads: what they measured; otherwise next_s
 *                less the upstreams' next_s, since a stage without threads
 *                calls its upstreams from inside its own next.
 *   wait_down_s  a stage with threads: their time blocked by a full queue.
 *
 * The verdict.  The consumer's wait (the depth-0 stage's next_s) decides
 * whether the pipeline limits at all: under 10% of the run, it keeps up and
 * the consumer (the trainer) is the limit.  Otherwise each stage's busy time
 * is compared with its capacity, the run's wall time on each of its threads
 * (a stage without threads shares its caller's one thread): the highest
 * share is the stage that limits throughput.  A stage running on the same
 * thread as others (a map under prefetch) competes with them for that
 * thread, so its share is also the share of that thread it takes.
 */
#include "stages/reader_impl.h"
#include "sync/budget.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>

#define MAX_DEPTH 256 /* chains are short; this bounds the recursion */

/* --- ignored errors (core/stats.h) ----------------------------------------
 * The note is written on the consumer's thread and read by a stats walk,
 * perhaps on another thread: a spin lock held for one short copy. */

static void note_lock(sl__stage_counters *c) {
  int free_ = 0;
  while (!atomic_compare_exchange_weak_explicit(
      &c->note_lock, &free_, 1, memory_order_acquire, memory_order_relaxed))
    free_ = 0;
}

static void note_unlock(sl__stage_counters *c) {
  atomic_store_explicit(&c->note_lock, 0, memory_order_release);
}

void sl__stat_note(sl__stage_counters *c, const char *msg) {
  note_lock(c);
  snprintf(c->last_error, sizeof c->last_error, "%s", msg ? msg : "");
  note_unlock(c);
}

void sl__stat_note_read(const sl__stage_counters *c, char *buf, size_t cap) {
  if (!cap) return;
  /* The lock is the only field written through this const view. */
  sl__stage_counters *m = (sl__stage_counters *)c;
  note_lock(m);
  snprintf(buf, cap, "%s", c->last_error);
  note_unlock(m);
}

int sl__ignore_error(sl__stage_counters *c, uint64_t *count, uint64_t cap,
                     int code, const char *stage, const char *what,
                     const char *option, const char *note) {
  ++*count;
  if (c) {
    sl__stat_add(&c->ignored, 1);
    sl__stat_note(c, note);
  }
  if (*count <= cap) {
    SL_DEBUGLOG("%s: ignored: %s", stage, note);
    return SL_OK;
  }
  return sl_set_error(code,
                      "%s: %llu %s in this pass, more than %s (%llu); "
                      "the last: %s",
                      stage, (unsigned long long)*count, what, option,
                      (unsigned long long)cap, note ? note : "?");
}

typedef struct walk {
  sl_stage_stats *out;
  size_t cap, n;
} walk;

static double seconds(uint64_t ns) {
  return (double)ns * 1e-9;
}

static void visit(walk *w, const sl_reader *r, int depth, int downstream) {
  sl__reader_view v;
  sl__reader_view_of(r, &v);
  const size_t me = w->n++;
  if (depth >= MAX_DEPTH) v.nups = 0; /* deeper stages are left out */
  uint64_t up_next = 0, up_out = 0;
  for (size_t i = 0; i < v.nups; i++) {
    sl__reader_view u;
    if (!v.ups[i]) continue;
    sl__reader_view_of(v.ups[i], &u);
    up_next += u.next_ns;
    up_out += u.samples_out;
  }
  if (me < w->cap) {
    const sl__stage_counters *c = v.counters;
    sl_stage_stats *s = &w->out[me];
    s->name = v.name;
    s->depth = depth;
    s->downstream = downstream;
    int active =
        c ? atomic_load_explicit(&c->threads_active, memory_order_relaxed) : 0;
    s->threads_max = c ? c->threads : 0;
    s->threads_auto = active > 0;
    s->threads = active > 0 ? active : s->threads_max;
    s->samples_out = v.samples_out;
    s->samples_in = v.nups ? up_out : v.samples_out;
    s->next_s = seconds(v.next_ns);
    uint64_t wait_up = up_next;
    uint64_t busy = v.next_ns > up_next ? v.next_ns - up_next : 0;
    uint64_t wait_down = 0;
    if (c) {
      wait_up += atomic_load_explicit(&c->wait_up_ns, memory_order_relaxed);
      busy = atomic_load_explicit(&c->busy_ns, memory_order_relaxed);
      wait_down = atomic_load_explicit(&c->wait_down_ns, memory_order_relaxed);
    }
    s->busy_s = seconds(busy);
    s->wait_up_s = seconds(wait_up);
    s->wait_down_s = seconds(wait_down);
    s->errors_ignored =
        c ? atomic_load_explicit(&c->ignored, memory_order_relaxed) : 0;
    s->queue_depth =
        c ? atomic_load_explicit(&c->queue_depth, memory_order_relaxed) : 0;
    s->samples_fused =
        c ? atomic_load_explicit(&c->fused, memory_order_relaxed) : 0;
    s->bytes_held = v.acct ? sl__budget_acct_held(v.acct) : 0;
    s->bytes_peak = v.acct ? sl__budget_acct_peak(v.acct) : 0;
    s->budget_bytes = v.acct ? sl__budget_cap(sl__budget_of(v.acct)) : 0;
    s->budget_default_pct =
        v.acct ? sl__budget_default_pct(sl__budget_of(v.acct)) : 0;
    s->memory_usable = v.acct ? sl__budget_usable_of(sl__budget_of(v.acct)) : 0;
    s->last_error[0] = '\0';
    if (c) sl__stat_note_read(c, s->last_error, sizeof s->last_error);
  }
  for (size_t i = 0; i < v.nups; i++)
    if (v.ups[i]) visit(w, v.ups[i], depth + 1, (int)me);
}

int sl_reader_stats(const sl_reader *r, sl_stage_stats *out, size_t cap,
                    size_t *count) {
  SL_RETURN_ERROR_IF(!r || !count || (!out && cap > 0), SL_EINVAL,
                     "stats: NULL %s",
                     !r       ? "reader"
                     : !count ? "count pointer"
                              : "out array");
  walk w = {out, cap, 0};
  visit(&w, r, 0, -1);
  *count = w.n;
  return SL_OK;
}

/* The consumer waited less than this share of the run: it is the limit. */
#define CONSUMER_BOUND 0.10

/* The threads a stage's busy time is shared over: an auto stage's started
 * workers (how many ran changed over the run). */
static int capacity(const sl_stage_stats *s) {
  return s->threads_auto ? s->threads_max : s->threads;
}

static double share(const sl_stage_stats *s, double wall_s) {
  int t = capacity(s);
  return s->busy_s / (wall_s * (t > 0 ? t : 1));
}

int sl_stats_limiting(const sl_stage_stats *stats, size_t n, double wall_s) {
  if (!stats || n == 0 || !(wall_s > 0)) return -2;
  bool timed = stats[0].next_s > 0;
  for (size_t i = 0; i < n && !timed; i++)
    timed = stats[i].busy_s > 0 || stats[i].wait_up_s > 0;
  if (!timed) return -2;
  if (stats[0].next_s < CONSUMER_BOUND * wall_s) return -1;
  size_t best = 0;
  for (size_t i = 1; i < n; i++)
    if (share(&stats[i], wall_s) > share(&stats[best], wall_s)) best = i;
  return (int)best;
}

/* snprintf into buf at *len, counting what does not fit. */
typedef struct out_text {
  char *buf;
  size_t cap, len;
} out_text;

static void put(out_text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *at = t->len < t->cap ? t->buf + t->len : NULL;
  size_t room = t->len < t->cap ? t->cap - t->len : 0;
  int k = vsnprintf(at, room, fmt, ap);
  va_end(ap);
  if (k > 0) t->len += (size_t)k;
}

static double pct(double part, double whole) {
  return whole > 0 ? 100.0 * part / whole : 0.0;
}

int sl_stats_format(const sl_stage_stats *stats, size_t n, double wall_s,
                    char *buf, size_t cap) {
  SL_RETURN_ERROR_IF((!stats && n > 0) || (!buf && cap > 0), SL_EINVAL,
                     "stats: NULL %s", !buf ? "buffer" : "stats array");
  if (buf && cap > 0) buf[0] = '\0';
  out_text t = {buf, cap, 0};
  put(&t, "%-24s %7s %12s %12s %9s %9s %9s %6s\n", "stage", "threads",
      "samples in", "out", "busy s", "wait up", "blocked", "load");
  for (size_t i = 0; i < n; i++) {
    const sl_stage_stats *s = &stats[i];
    int indent = 2 * (s->depth < 8 ? s->depth : 8);
    char thr[16];
    if (s->threads > 0)
      snprintf(thr, sizeof thr, "%d", s->threads);
    else
      snprintf(thr, sizeof thr, "-");
    put(&t, "%*s%-*s %7s %12llu %12llu %9.3f %9.3f %9.3f %5.0f%%\n", indent, "",
        24 - indent, s->name ? s->name : "?", thr,
        (unsigned long long)s->samples_in, (unsigned long long)s->samples_out,
        s->busy_s, s->wait_up_s, s->wait_down_s,
        wall_s > 0 ? 100.0 * share(s, wall_s) : 0.0);
  }
  int k = sl_stats_limiting(stats, n, wall_s);
  if (k == -2) {
    put(&t, "no verdict: timing was off (sl_stats_enable) or the run was "
            "empty\n");
  } else if (k == -1) {
    put(&t,
        "the pipeline keeps up: the consumer waited for data %.0f%% of the "
        "%.3f s run, so the consumer limits throughput\n",
        pct(stats[0].next_s, wall_s), wall_s);
  } else {
    const sl_stage_stats *s = &stats[k];
    put(&t,
        "limiting stage: %s (busy %.0f%% of the run on %d thread%s); the "
        "consumer waited for data %.0f%% of the %.3f s run\n",
        s->name ? s->name : "?", 100.0 * share(s, wall_s),
        capacity(s) > 0 ? capacity(s) : 1, capacity(s) > 1 ? "s" : "",
        pct(stats[0].next_s, wall_s), wall_s);
  }
  /* Fused stages (a map writing into the batch above it). */
  for (size_t i = 0; i < n; i++)
    if (stats[i].samples_fused)
      put(&t, "fused: %s wrote %llu samples straight into the rows of the "
              "batch above it\n",
          stats[i].name ? stats[i].name : "?",
          (unsigned long long)stats[i].samples_fused);
  /* Tuned thread counts (threads = "auto", sync/tune.c). */
  for (size_t i = 0; i < n; i++)
    if (stats[i].threads_auto)
      put(&t, "autotuned: %s runs %d of %d threads\n",
          stats[i].name ? stats[i].name : "?", stats[i].threads,
          stats[i].threads_max);
  /* Stages running more threads than the machine runs well (accepted by
   * sl__threads_check, which said so once on stderr). */
  long advised = sl__thread_advised();
  for (size_t i = 0; i < n; i++) {
    const sl_stage_stats *s = &stats[i];
    if (s->threads > advised)
      put(&t,
          "oversubscribed: %s runs %d threads on %ld CPUs (advised at most "
          "%ld: 4 x the CPUs, at least 8)\n",
          s->name ? s->name : "?", s->threads, sl__cpu_count(), advised);
  }
  /* The memory budget and what each stage held (sl_reader_set_budget). */
  if (n > 0 && stats[0].budget_bytes) {
    put(&t, "memory budget: %.1f MiB",
        (double)stats[0].budget_bytes / (1024.0 * 1024));
    if (stats[0].budget_default_pct)
      put(&t, " (default: %d %% of %.1f GiB usable)",
          stats[0].budget_default_pct,
          (double)stats[0].memory_usable / (1024.0 * 1024 * 1024));
    put(&t, "; held now, peak:");
    for (size_t i = 0; i < n; i++)
      if (stats[i].bytes_peak)
        put(&t, " %s %.1f/%.1f MiB", stats[i].name ? stats[i].name : "?",
            (double)stats[i].bytes_held / (1024.0 * 1024),
            (double)stats[i].bytes_peak / (1024.0 * 1024));
    put(&t, "\n");
  }
  /* What the machine gives this process (the container's share: cpus.c). */
  put(&t, "machine: %ld usable CPUs, %.1f GiB of memory usable\n",
      sl__cpu_count(), (double)sl__memory_limit() / (1024.0 * 1024 * 1024));
  return t.len > INT_MAX ? INT_MAX : (int)t.len;
}
