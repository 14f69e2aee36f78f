/* tar.h - walking the members of a tar archive (POSIX ustar, GNU long
 * names, pax extended headers), for the wds: reader (wds_reader.c) and its
 * fuzz target.  The archive is either held in memory (a mapped local file:
 * members are zero-copy views) or read through a byte source (a URL:
 * source_http.c), where the walk reads only the 512-byte headers and the
 * long-name / pax records by read_at, and the caller reads member data. */
#ifndef SLUICE_IO_TAR_H
#define SLUICE_IO_TAR_H

#include "core/internal.h"
#include "transport/output.h"
#include "transport/source.h"

#include <stdio.h>

typedef struct sl__tar {
  const unsigned char *p;  /* the archive in memory, or NULL */
  sl__source *src;         /* or the archive's source (not owned) */
  uint64_t n;              /* its size */
  unsigned char hbuf[512]; /* a header read from src */
  unsigned char *scratch;  /* a long-name or pax record read from src */
  size_t scratch_cap;
  uint64_t off; /* the next header to read */
  /* The member found last: */
  char *name; /* full path, NUL-terminated (heap, reused) */
  size_t name_cap;
  uint64_t header; /* offset of its first header (long-name records too) */
  uint64_t data, size;
  /* The end-of-archive blocks, once checked: their offset. */
  bool end_ok;
  uint64_t end_at;
} sl__tar;

/* Starts walking p[0..n). */
void sl__tar_init(sl__tar *t, const void *p, size_t n);
/* Starts walking the archive read from `src` (not taken; it must outlive
 * the walk).  Read errors from src are forwarded (they name the source). */
void sl__tar_init_source(sl__tar *t, sl__source *src);
/* The next regular file member (directories, links and other entries are
 * passed over): SL_OK with name, header, data and size set; SL_EOF at the
 * end-of-archive blocks (two zero blocks, then only zeros to the end of the
 * file: the walk stays at them, so the next call is SL_EOF again);
 * SL_ECORRUPT naming `what` and the offset (a bad checksum, a member that
 * runs past the end, a malformed size or pax record, bytes that end without
 * the end-of-archive blocks - a cut, even at a member boundary - a single
 * zero block or data after the zero blocks - a zeroed hole; from a source,
 * a long-name or pax record over 1 MiB); SL_EIO (a source's read);
 * SL_ENOMEM. */
int sl__tar_next(sl__tar *t, const char *what);
void sl__tar_fini(sl__tar *t);
/* The bytes the walk holds: its long-name / pax scratch and name buffers
 * and, read from a source, the source's (sl__source_held: a URL's
 * read-ahead block); a mapped archive's pages are not counted.  For the
 * memory budget's resident charge of the reader walking it. */
uint64_t sl__tar_held(const sl__tar *t);

/* Writing (tar_writer.c) to an output file (output.h): a member `name` of
 * n bytes (a GNU long-name record first when the name exceeds 100 bytes),
 * then, once, the end of the archive.  SL_OK or SL_EIO (sl__out_write's,
 * naming the file). */
int sl__tar_write_member(sl__out_file *f, const char *name, const void *data,
                         size_t n);
int sl__tar_write_end(sl__out_file *f);

#endif
