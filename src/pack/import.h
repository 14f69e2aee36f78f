/*
 * import.h - packing foreign data into SLR files: idx (MNIST) and text
 * lines, into one file or K shards.  The `sluice pack` command and the tests
 * call the same functions, so what the tests check is what the tool does.
 */
#ifndef SLUICE_IMPORT_H
#define SLUICE_IMPORT_H

#include "core/internal.h"
#include "transport/output.h"

#include <signal.h>

/* --- what the SLR writer records about a file and its set (FORMAT.md) ---- */
#define SL__META_MAX_CHUNK_RAW "sluice.max_chunk_raw"
#define SL__META_SET_ID "sluice.set_id"       /* 32 lowercase hex digits */
#define SL__META_SET_SIZE "sluice.set_size"   /* K, decimal */
#define SL__META_SET_INDEX "sluice.set_index" /* 0..K-1, decimal */

/* A writer on `file`, an output of a set (output.h): the set keeps the
 * file, renames it at its commit and removes it at its abort; the writer
 * only writes (sl__slr_writer_finish, then free it with
 * sl_slr_writer_abort).  Checks as sl_slr_writer_open. */
int sl__slr_writer_open_on(sl__out_file *file, sl_schema *schema,
                           const sl_slr_writer_opts *opts, sl_slr_writer **out);

/* Makes `w` shard `index` of a set of `size` files named by `set_id` (a
 * writer opened alone is a set of one with an id of its own). */
void sl__slr_writer_set_member(sl_slr_writer *w, const char *set_id,
                               uint32_t size, uint32_t index);
/* While *flag is non-zero, compression stops between blocks (ZSTD's 128
 * KiB) with SL_EKILLED: signal handlers set it.  NULL: never. */
void sl__slr_writer_set_cancel(sl_slr_writer *w,
                               const volatile sig_atomic_t *flag);
/* Close, step 1: the last chunk, schema, index and footer written and
 * synced under the temporary name; nothing is renamed.  On failure the
 * temporary file is removed (abort the writer).  Idempotent. */
int sl__slr_writer_finish(sl_slr_writer *w);
/* Close, step 2 of a writer that owns its file (sl_slr_writer_open):
 * finishes if needed, renames to the final name, frees the writer (also on
 * failure).  sl_slr_writer_close is this. */
int sl__slr_writer_commit(sl_slr_writer *w);
/* Bytes written to the file so far (its size once finished). */
uint64_t sl__slr_writer_bytes(const sl_slr_writer *w);

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
/* Called once every file is complete and synced under its temporary name,
 * before any is renamed: records packed and the files' total size.  A
 * negative return fails the pack and removes every temporary file, so the
 * outputs under their final names are untouched (the CLI prints and
 * flushes its summary here: a stdout that cannot take it fails the pack). */
typedef int (*sl__commit_fn)(void *ud, uint64_t records, uint64_t file_bytes);

typedef struct sl__pack_opts {
  sl_slr_writer_opts writer;
  sl_slr_frame_opts frames; /* all zero: whole chunks (SLR 1.0) */
  uint32_t shards; /* 0: one file named `out`; K >= 1: K files
                      named by sl__shard_name */
  sl__shard_mode mode;
  sl__progress_fn progress;            /* may be NULL */
  void *progress_ud;                   /* for progress and before_commit */
  sl__commit_fn before_commit;         /* may be NULL */
  const volatile sig_atomic_t *cancel; /* non-zero: stop (SL_EKILLED)
                                          within one compression block */
  bool shuffle;  /* sl__pack_images: records in the seeded random order of
                    sl__pack_order instead of sorted by path (the CLI's
                    default; `--order sorted` clears it) */
  uint64_t seed; /* of that order */
} sl__pack_opts;

/* The order of n sorted files: order[k] is the one written k-th, the
 * identity unless o->shuffle, then sl__permute_u64(o->seed) (core/rng.h:
 * as the epoch plan's permutations, docs/DATA.md).  NULL: out of memory.
 * For sl__pack_images and sl__pack_images_wds (pack_images.c). */
uint64_t *sl__pack_order(size_t n, const sl__pack_opts *o);
/* An encoded image file, whole, into *buf (grown as needed; *buf and *cap
 * are the caller's, reused across files, freed by it); *len its size.
 * SL_EIO naming the file when it cannot be opened or read, SL_EINVAL when
 * it is larger than an encoded image may be (SL__IMAGE_MAX_BYTES),
 * SL_ENOMEM.  The image packers' one reader (folder -> SLR, -> tar). */
int sl__pack_slurp_image(const char *path, unsigned char **buf, size_t *cap,
                         size_t *len);

/* Largest K accepted (the name has 5 digits). */
#define SL__MAX_SHARDS 99999u

/* The name of shard `shard` of `shards` for output `out`: a trailing ".slr"
 * is removed, then "-%05u-of-%05u.slr" appended ("data.slr", 1, 4 ->
 * "data-00001-of-00004.slr").  SL_EINVAL when it does not fit in `size`. */
SL_API int sl__shard_name(const char *out, uint32_t shard, uint32_t shards,
                          char *buf, size_t size);


/* --- the sink: one writer, or K writers with records dealt among them ---- */
typedef struct sl__pack_sink sl__pack_sink;

/* Total unknown (round-robin and single files do not need it). */
#define SL__TOTAL_UNKNOWN UINT64_MAX

/* Opens the writer(s) for `out` (each writes to a unique temporary name
 * until close).  Contiguous sharding needs `total`, the number of records
 * that will be appended.  Retains `schema`.  An output name that is one of
 * the `n_inputs` files `inputs` (same device and inode, through links) is
 * refused before anything is written; missing folders of `out` are created
 * (and removed again when the pack fails). */
int sl__sink_open(const char *out, sl_schema *schema, uint64_t total,
                  const sl__pack_opts *o, const char *const *inputs,
                  size_t n_inputs, sl__pack_sink **sink);
/* Appends one record to the shard whose turn it is (borrows `s`). */
int sl__sink_append(sl__pack_sink *sink, const sl_sample *s);
/* Records appended so far. */
uint64_t sl__sink_records(const sl__pack_sink *sink);
/* Finishes every file under its temporary name (written and synced), calls
 * before_commit, then renames them all.  Until the first rename any failure
 * removes every temporary file and leaves the outputs as they were; a rename
 * that fails after others succeeded never removes the files already renamed
 * (they replaced the old ones): the set recorded in them (sluice.set_id)
 * tells readers it is mixed.  Frees the sink.  NULL-safe. */
int sl__sink_close(sl__pack_sink *sink);
/* Discards every file (temporary names removed) and frees the sink. */
void sl__sink_abort(sl__pack_sink *sink);
/* An importer's end: rc SL_OK closes the sink (*records, may be NULL, then
 * receives the count); any other rc aborts it and is returned. */
int sl__sink_finish(sl__pack_sink *sink, int rc, uint64_t *records);

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

/* --- token shards (import_tokens.c) ---------------------------------------
 */
typedef struct sl__tokens_pack_opts {
  bool ids;        /* files hold whitespace-separated token ids (a blank
                      line ends a document); else every byte is a token */
  int64_t eos;     /* >= 0: appended after every document; -1: none */
  uint32_t shards; /* K >= 1: 1 writes `out` itself, K > 1 OUT_%06u.bin */
  uint64_t val;    /* > 0: the first val tokens go to OUT_val.bin */
  sl__commit_fn before_commit; /* once every file is complete, before the
                                  renames (tokens, bytes); may be NULL */
  void *ud;                    /* for before_commit */
  const volatile sig_atomic_t *cancel; /* non-zero: stop (SL_EKILLED) */
} sl__tokens_pack_opts;

/* The tokens of the n files into llm.c token shards (tokens_set.h) that
 * record the run's set identity, written as one output set (output.h).
 * *count (may be NULL) receives the number of tokens.  On any failure
 * nothing is left under the output names. */
SL_API int sl__pack_tokens(const char *const *files, size_t n, const char *out,
                           const sl__tokens_pack_opts *o, uint64_t *count);
/* The name of token shard `shard` of `shards` (UINT32_MAX: the
 * validation shard) for output `out`: OUT itself for one shard, else OUT
 * without ".bin" + "_%06u.bin" (or "_val.bin"). */
SL_API int sl__tokens_shard_name(const char *out, uint32_t shard,
                                 uint32_t shards, char *buf, size_t size);

#endif
