/* slr_file.h - internals of the SLR reader shared with the slr reader stage
 * and the tests. */
#ifndef SLUICE_SLR_FILE_H
#define SLUICE_SLR_FILE_H

#include "formats/slr_format.h"
#include "transport/source.h"

/* Opens an SLR file over any byte source (taken, also on failure). */
int sl__slr_open_source(sl__source *src, const sl_slr_open_opts *opts,
                        sl_slr_file **out);

/* The `slr` reader over records [first, first + count) of an open file
 * (taken, also on failure; count UINT64_MAX = to the end), as sl_slr_reader
 * makes over a path.  For readers over other byte sources: the fuzz targets
 * (memory) and the fault tests (failing sources).  SL_EINVAL when first is
 * beyond the records. */
int sl__slr_reader_from_file(sl_slr_file *f, uint64_t first, uint64_t count,
                             sl_reader **out);

/* A decoded chunk: the raw payload in a refcounted buffer and where its
 * records are.  Valid until the next load on the same file. */
typedef struct slr_chunk {
  uint64_t index; /* chunk number */
  uint32_t records;
  sl_buffer *raw;            /* retained by the file's cache */
  const unsigned char *ends; /* u32 end offsets (little-endian) */
  size_t body;               /* byte offset of the body in raw */
} slr_chunk;

/* Loads and fully checks chunk c (reusing the cached decode when it is the
 * last one loaded).  On success *out points into the file's cache. */
int sl__slr_load_chunk(sl_slr_file *f, uint64_t c, const slr_chunk **out);
/* Record r of a loaded chunk as a new sample. */
int sl__slr_chunk_record(sl_slr_file *f, const slr_chunk *ch, uint32_t r,
                         sl_sample **out);
/* Counts a skipped chunk; fails with SL_ECORRUPT once more than the cap
 * were skipped in this pass (the same bad chunks are met again every pass:
 * a cap over the file's life would fail epoch k of a run whose every pass
 * is within it). */
int sl__slr_count_bad(sl_slr_file *f);
/* Starts a pass: the cap counts from zero again. */
void sl__slr_pass_start(sl_slr_file *f);
/* Restoring a position (stages/state.h): the corrupt chunks this pass has
 * skipped so far, which the cap counts; and a fingerprint of the file's
 * contents (CRC32C of its index: every chunk's offset, records and header
 * CRC, which covers the payload's CRC), so a state names a rewritten file. */
void sl__slr_set_pass_bad(sl_slr_file *f, uint64_t n);
uint32_t sl__slr_fingerprint(const sl_slr_file *f);
/* The file's identity as opened (its source's: transport/source.h). */
const sl__file_id *sl__slr_file_id(const sl_slr_file *f);
sl_corrupt_policy sl__slr_policy(const sl_slr_file *f);
/* First record number and record count of chunk c (from the index). */
void sl__slr_chunk_span(const sl_slr_file *f, uint64_t c, uint64_t *first,
                        uint32_t *count);

#endif
