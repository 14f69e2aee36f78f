/*
 * stats.c - the process-wide timing switch behind run statistics (see
 * core/stats.h).  In core because every layer that times work reads it
 * (the engine in sync/, the stages in stages/); the walk over a reader
 * chain is stages/stats.c.
 */
#include "core/internal.h"
#include "core/stats.h"

atomic_int sl__stats_on;

void sl_stats_enable(int on) {
  atomic_store_explicit(&sl__stats_on, on ? 1 : 0, memory_order_relaxed);
}

int sl_stats_enabled(void) {
  return sl__stats_timing() ? 1 : 0;
}
