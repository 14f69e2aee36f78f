/*
 * source.h - byte sources: what the file readers read from.  A file source
 * uses pread; tests substitute sources that fail the N-th read, return short
 * reads or shrink, to check that every reader reports faults cleanly.
 */
#ifndef SLUICE_SOURCE_H
#define SLUICE_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "core/file_id.h"

/* sl__file_id, a file's identity: core/file_id.h. */

typedef struct sl__source sl__source;
struct sl__source {
  /* Reads exactly n bytes at off into buf: SL_OK, or SL_EIO with a message
   * naming the source and offset (a short read past the end is SL_EIO "file
   * shrank"). */
  int (*read_at)(sl__source *s, uint64_t off, void *buf, size_t n);
  void (*close)(sl__source *s);
  /* Optional (NULL: none): the source's `size` bytes as read-only memory,
   * a map made on the first call and kept until close, or NULL when there
   * is none (the map failed, the file is empty, the I/O fault hook is
   * armed: io_faults.h, or a ThreadSanitizer build: sigbus_guard.h); the
   * caller then uses read_at.  A file truncated
   * since open raises SIGBUS on the map's pages past its end: read the map
   * only through sl__sigbus_guard (sigbus_guard.h).  Thread-safe. */
  const unsigned char *(*view)(sl__source *s);
  /* Optional (NULL: none held): the bytes of memory the source holds for
   * itself now - a URL's read-ahead block (source_http.c) - so that the
   * format stage owning it can count them in its memory budget's resident
   * charge (sync/budget.h) at each refill; a map (view) is page cache and
   * not counted.  Thread-safe. */
  uint64_t (*held)(sl__source *s);
  uint64_t size; /* bytes, fixed at open */
  char *name;    /* for messages; owned by the source */
  sl__file_id id; /* fixed at open */
};

/* Opens `path` for reading.  SL_OK, SL_EIO (with strerror, or saying what
 * the path is when it is not a regular file: a directory, a device, a FIFO;
 * a FIFO is never waited on) or SL_ENOMEM. */
int sl__source_open_file(const char *path, sl__source **out);

static inline void sl__source_close(sl__source *s) {
  if (s) s->close(s);
}

/* The bytes s holds (its `held` entry; 0 without one, or for NULL). */
static inline uint64_t sl__source_held(sl__source *s) {
  return s && s->held ? s->held(s) : 0;
}

/* Test hook: wraps `inner` (taken) so that read number `fail_at` (0-based)
 * fails with SL_EIO, reads shorter than asked are split into `short_step`-
 * byte pieces when short_step > 0, and every read at or beyond `shrink_to`
 * fails as if the file had shrunk.  Used by the fault tests. */
int sl__source_faulty(sl__source *inner, long fail_at, size_t short_step,
                      uint64_t shrink_to, sl__source **out);

#endif
