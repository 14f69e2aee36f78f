/*
 * import.h - packing foreign data into SLR files: idx (MNIST) and text
 * lines, into one file or K shards.  The `sluice pack` command and the tests
 * call the same functions, so what the tests check is what the tool does.
 */
#ifndef SLUICE_IMPORT_H
#define SLUICE_IMPORT_H

#include "core/internal.h"

/* How records are dealt to shards. */
typedef enum sl__shard_mode {
  SL__SHARD_ROUND_ROBIN = 0, /* record i goes to shard i mod K */
  SL__SHARD_CONTIGUOUS = 1   /* shard s gets one contiguous range; sizes
                                differ by at most 1, larger shards first */
} sl__shard_mode;

/* Progress callback: records and raw payload bytes written so far.  A
 * negative return stops the pack with that code (the callback sets the
 * message), e.g. on Ctrl-C. */
typedef int (*sl__progress_fn)(void *ud, uint64_t records, uint64_t bytes);

typedef struct sl__pack_opts {
  sl_slr_writer_opts writer;
  uint32_t shards; /* 0: one file named `out`; K >= 1: K files
                      named by sl__shard_name */
  sl__shard_mode mode;
  sl__progress_fn progress; /* may be NULL */
  void *progress_ud;
} sl__pack_opts;

/* Largest K accepted (the name has 5 digits). */
#define SL__MAX_SHARDS 99999u

/* The name of shard `shard` of `shards` for output `out`: a trailing ".slr"
 * is removed, then "-%05u-of-%05u.slr" appended ("data.slr", 1, 4 ->
 * "data-00001-of-00004.slr").  SL_EINVAL when it does not fit in `size`. */
SL_API int sl__shard_name(const char *out, uint32_t shard, uint32_t shards,
                          char *buf, size_t size);

/* The last path component of `path` (a pointer into it). */
const char *sl__basename(const char *path);

/* --- the sink: one writer, or K writers with records dealt among them ---- */
typedef struct sl__pack_sink sl__pack_sink;

/* Total unknown (round-robin and single files do not need it). */
#define SL__TOTAL_UNKNOWN UINT64_MAX

/* Opens the writer(s) for `out` (each writes to a temporary name until
 * close).  Contiguous sharding needs `total`, the number of records that will
 * be appended.  Retains `schema`. */
int sl__sink_open(const char *out, sl_schema *schema, uint64_t total,
                  const sl__pack_opts *o, sl__pack_sink **sink);
/* Appends one record to the shard whose turn it is (borrows `s`). */
int sl__sink_append(sl__pack_sink *sink, const sl_sample *s);
/* Records appended so far. */
uint64_t sl__sink_records(const sl__pack_sink *sink);
/* Finishes every file.  When any close fails, the files already finished are
 * removed too, so a failed pack leaves no complete-looking output.  Frees the
 * sink.  NULL-safe. */
int sl__sink_close(sl__pack_sink *sink);
/* Discards every file (temporary names removed) and frees the sink. */
void sl__sink_abort(sl__pack_sink *sink);

/* --- importers -------------------------------------------------------------
 */

/* idx images (u8, rank 3: N x rows x cols) and labels (u8, rank 1: N), plain
 * or gzip, into records {image: u8[rows, cols], label: i64[]} with schema
 * metadata source=idx, images=<basename>, labels=<basename>.  *records (may
 * be NULL) receives the count.  On any failure nothing is left under the
 * output name(s). */
SL_API int sl__pack_idx(const char *images, const char *labels, const char *out,
                        const sl__pack_opts *o, uint64_t *records);

/* Lines of the `n` text files, in order, into records {text: bytes[-1]}:
 * one record per line, the "\n" and one trailing "\r" removed; a last line
 * without "\n" counts, an empty line is an empty record.  Metadata
 * source=text, files=<basenames joined by ','>. */
SL_API int sl__pack_text(const char *const *files, size_t n, const char *out,
                         const sl__pack_opts *o, uint64_t *records);

#endif
