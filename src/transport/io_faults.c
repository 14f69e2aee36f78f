/*
 * io_faults.c - the I/O fault hook (io_faults.h).  Relaxed atomics: the
 * counts need no ordering with anything else; they only keep runs that read
 * from several threads (open_files, prefetch) free of data races.
 */
#include "transport/io_faults.h"
#include "core/internal.h"

typedef struct dir_state {
  atomic_long at;    /* the call number to fault; < 0: disarmed */
  atomic_long calls; /* calls counted since the last arm */
  atomic_int kind;
} dir_state;

static dir_state g_dirs[2] = {{-1, 0, SL__IO_OK}, {-1, 0, SL__IO_OK}};

long sl__io_fault_after(sl__io_dir dir, long n, sl__io_fault kind) {
  dir_state *d = &g_dirs[dir == SL__IO_WRITE];
  atomic_store_explicit(&d->at, -1, memory_order_relaxed);
  long made = atomic_exchange_explicit(&d->calls, 0, memory_order_relaxed);
  atomic_store_explicit(&d->kind, kind, memory_order_relaxed);
  atomic_store_explicit(&d->at, n, memory_order_relaxed);
  return made;
}

sl__io_fault sl__io_fault_next(sl__io_dir dir, size_t *len) {
  dir_state *d = &g_dirs[dir == SL__IO_WRITE];
  long at = atomic_load_explicit(&d->at, memory_order_relaxed);
  long k = atomic_fetch_add_explicit(&d->calls, 1, memory_order_relaxed);
  if (at < 0 || k < at) return SL__IO_OK;
  sl__io_fault kind = atomic_load_explicit(&d->kind, memory_order_relaxed);
  switch (kind) {
  case SL__IO_SHORT:
    if (*len > 1) *len = SL_MIN(*len - 1, (size_t)(1 + k % 7));
    return SL__IO_SHORT;
  case SL__IO_SHRINK:
    return dir == SL__IO_READ ? SL__IO_SHRINK : SL__IO_OK;
  case SL__IO_EIO:
  case SL__IO_ENOSPC:
    return k == at ? kind : SL__IO_OK;
  default:
    return SL__IO_OK;
  }
}

bool sl__io_fault_armed(sl__io_dir dir) {
  return atomic_load_explicit(&g_dirs[dir == SL__IO_WRITE].at,
                              memory_order_relaxed) >= 0;
}
