/*
 * file_id.h - what tells one file from another, or from itself rewritten:
 * device, inode, size and modification time (a URL's validators stand in,
 * transport/http.h).  The byte sources record it at open (transport/source.h) and saved
 * states carry it (stages/state.h), so it lives below both.
 */
#ifndef SLUICE_CORE_FILE_ID_H
#define SLUICE_CORE_FILE_ID_H

#include <stdint.h>
#include <sys/stat.h>

/* What tells one file from another (or from itself rewritten): a file
 * source's fstat at open; all zero for sources that are not files. */
typedef struct sl__file_id {
  uint64_t dev, ino, size;
  int64_t mtime_s, mtime_ns;
} sl__file_id;

/* A file's identity from its fstat. */
static inline sl__file_id sl__file_id_of(const struct stat *st) {
  sl__file_id id = {(uint64_t)st->st_dev, (uint64_t)st->st_ino,
                    (uint64_t)st->st_size, (int64_t)st->st_mtim.tv_sec,
                    (int64_t)st->st_mtim.tv_nsec};
  return id;
}

/* Whether a and b are the same file, unchanged. */
static inline int sl__file_id_equal(const sl__file_id *a,
                                    const sl__file_id *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
         a->mtime_s == b->mtime_s && a->mtime_ns == b->mtime_ns;
}

#endif
