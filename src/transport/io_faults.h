/*
 * io_faults.h - the I/O fault hook of the reliability tests: makes the N-th
 * read of the file sources (source_file.c) or the N-th write of any
 * output (output.c: SLR, token and tar files) misbehave the way disks and network file systems
 * do, so that every I/O path of "pack -> read" is exercised
 * (tests/test_faults.c).  Process-wide, like sl__alloc_fail_after; off
 * unless a test arms it, and then costs one relaxed atomic add per system
 * call.
 */
#ifndef SLUICE_IO_FAULTS_H
#define SLUICE_IO_FAULTS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum sl__io_dir { SL__IO_READ = 0, SL__IO_WRITE = 1 } sl__io_dir;

typedef enum sl__io_fault {
  SL__IO_OK = 0,
  SL__IO_EIO,    /* that one call fails with EIO */
  SL__IO_SHORT,  /* that call and every later one moves only 1..7 bytes:
                    short transfers a correct caller loops over */
  SL__IO_SHRINK, /* reads: from that call on the file ends (pread returns
                    0), as if it were truncated under the reader */
  SL__IO_ENOSPC  /* writes: that one call fails with ENOSPC */
} sl__io_fault;

/* Arms the hook for direction `dir`: call number `n` (0-based, counted
 * from now over the whole process) gets `kind`, see above; n < 0 disarms
 * it.  Returns the number of calls in that direction since the previous
 * arm/disarm, so a test loops n = 0, 1, ... until a run makes no more than
 * n calls (every call of the path has been faulted once). */
long sl__io_fault_after(sl__io_dir dir, long n, sl__io_fault kind);

/* For the I/O code: counts one call in `dir` and returns what it must do.
 * For SL__IO_SHORT, *len is lowered to the bytes to transfer. */
sl__io_fault sl__io_fault_next(sl__io_dir dir, size_t *len);

/* Whether the hook is armed for `dir` (a test runs): sources then read
 * through the system calls it counts, not through a memory map. */
bool sl__io_fault_armed(sl__io_dir dir);

#endif
