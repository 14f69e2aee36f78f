/*
 * sluice/open.h - files and formats: SLR, opening by name, open_files and
 * sharding, idx and text readers, parser plugins, NumPy, CSV, WebDataset,
 * TFRecord.  Part of sluice.h: include <sluice.h>, whose opening comment
 * states the conventions that hold here.
 */
#ifndef SLUICE_API_OPEN_H
#define SLUICE_API_OPEN_H

#include "reader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* SLR record files (format: docs/FORMAT.md)                                 */
/* ------------------------------------------------------------------------ */

typedef struct sl_slr_writer sl_slr_writer;

/* Dictionary of framed SLR files (sl_slr_frame_opts.dict). */
typedef enum sl_slr_dict {
  SL_SLR_DICT_NONE = 0,  /* frames compressed alone */
  SL_SLR_DICT_AUTO = 1,  /* trained (ZDICT_trainFromBuffer) on the records
                            buffered before the first chunk; when there are
                            too few to train on, frames go without one */
  SL_SLR_DICT_GIVEN = 2  /* dict_data / dict_size */
} sl_slr_dict;

/* The zstd level of a file written with a dictionary when
 * sl_slr_writer_opts.level is 0 (whole chunks and frames without one: 3).
 * Dictionary frames gain ~12 % of ratio from 3 to 15 (Debian package
 * descriptions: 0.87 -> 0.975 of whole 1 MiB chunks at level 3) and decode
 * no slower; compression takes ~7x the CPU time (docs/PERFORMANCE.md,
 * "Level 15 by default with a dictionary"). */
#define SL_SLR_DICT_LEVEL 15

typedef struct sl_slr_writer_opts {
  int level;                  /* zstd level, 1..19 (0 = default: 3, or
                                 SL_SLR_DICT_LEVEL for a file written with
                                 a dictionary) */
  size_t chunk_bytes;         /* target raw bytes per chunk, record table
                                 included (0 = 1 MiB, at most 1 GiB) */
  uint32_t records_per_chunk; /* if > 0, exactly this many per chunk
                                 (the last may have fewer); overrides
                                 chunk_bytes */
} sl_slr_writer_opts;

/* Framed chunks (SLR 1.1, docs/FORMAT.md "Framed chunks"): each chunk
 * holds independent zstd frames of frame_records records, so that
 * sl_slr_fetch decodes one frame, not the chunk.  Frames are written when
 * frame_records > 0, a dictionary or compact frames are asked for; such
 * files need a reader
 * of SLR 1.1 (older ones refuse them: unknown required feature bit 0x1).
 * All zero: whole chunks, SLR 1.0, as without the call. */
typedef struct sl_slr_frame_opts {
  uint32_t frame_records; /* records per frame; 0 with a dictionary: about
                             4 KiB of raw records per frame, at least 1 */
  sl_slr_dict dict;       /* SL_SLR_DICT_NONE, _AUTO or _GIVEN */
  const void *dict_data;  /* SL_SLR_DICT_GIVEN: a zstd dictionary (as
                             `zstd --train` writes) or raw content; copied */
  size_t dict_size;       /* 1 byte .. 16 MiB */
  size_t dict_max_bytes;  /* _AUTO: dictionary size (0 = 112640, zstd's
                             default; 256 B .. 16 MiB) */
  size_t dict_sample_bytes; /* _AUTO: records buffered to train on before
                               the first chunk is written (0 = 8 MiB, at
                               most 1 GiB) */
  int compact;            /* nonzero: compact framed chunks (codec 3,
                             required feature bit 0x8): a varint frame
                             table and frames without zstd's magic number,
                             about 8 bytes less a frame; readers older than
                             this version refuse such files at open;
                             implies frames.  0: codec 2, read by every
                             SLR 1.1 reader */
} sl_slr_frame_opts;

/* Starts writing `path` with `schema` (retained and frozen).  Data goes to a
 * new unique temporary file "PATH.tmp-PID-XXXXXX" (O_EXCL | O_NOFOLLOW) that
 * sl_slr_writer_close renames to `path` once the footer is written and
 * synced, so a crash never leaves a complete-looking file.  The file's
 * metadata gets the writer's own sluice.* entries (docs/FORMAT.md) in place
 * of any the schema holds.  `opts` may be NULL.  Returns SL_OK and *out,
 * SL_EINVAL (bad options, or a schema with no fields) or SL_EIO (with the OS
 * error).  One writer is used by one thread at a time. */
SL_API int sl_slr_writer_open(const char *path, sl_schema *schema,
                              const sl_slr_writer_opts *opts,
                              sl_slr_writer **out);
/* Makes the writer write framed chunks (sl_slr_frame_opts; `o` is
 * borrowed, the dictionary copied).  Call it before the first append:
 * SL_ESTATE after; SL_EINVAL for bad options (an unknown dict mode, a
 * given dictionary that is empty, above 16 MiB or that zstd cannot load,
 * sizes out of range); SL_ENOMEM.  A NULL `o` is all zero. */
SL_API int sl_slr_writer_set_frames(sl_slr_writer *w,
                                    const sl_slr_frame_opts *o);
/* Appends one record.  Borrows `s`.  A sample whose fields do not match the
 * schema is refused with SL_ESHAPE naming the field (nothing is written);
 * SL_EIO / SL_ENOMEM on failure (the writer is then unusable: abort it). */
SL_API int sl_slr_writer_append(sl_slr_writer *w, const sl_sample *s);
/* Records appended so far. */
SL_API uint64_t sl_slr_writer_records(const sl_slr_writer *w);
/* Flushes the last chunk, writes schema, index and footer, syncs, renames
 * the temporary file to its final name, and frees the writer (also on
 * failure, in which case the temporary file is removed).  NULL-safe. */
SL_API int sl_slr_writer_close(sl_slr_writer *w);
/* Discards everything: removes the temporary file and frees the writer.
 * NULL-safe. */
SL_API void sl_slr_writer_abort(sl_slr_writer *w);

typedef struct sl_slr_file sl_slr_file;

/* What happens when a chunk fails a check while reading sequentially. */
typedef enum sl_corrupt_policy {
  SL_CORRUPT_FAIL = 0,      /* SL_ECORRUPT naming file, chunk and offset */
  SL_CORRUPT_SKIP_CHUNK = 1 /* skip the chunk, count it; fail past the cap */
} sl_corrupt_policy;

typedef struct sl_slr_open_opts {
  sl_corrupt_policy policy;
  uint32_t max_bad_chunks;  /* skip_chunk: fail when more are skipped in
                               one pass (0 = 16) */
  uint64_t max_chunk_bytes; /* limit on a chunk's raw (decompressed) size;
                               its stored size may be zstd's bound of it.
                               0 = the largest chunk the writer recorded in
                               the file (metadata sluice.max_chunk_raw, at
                               most 1 GiB), or 256 MiB for files that record
                               none, which also may not claim more than
                               1024 times the stored size above 16 MiB.  A
                               chunk above the limit is SL_ECORRUPT, refused
                               before anything is allocated for it. */
} sl_slr_open_opts;

/* Opens an SLR file and validates header, footer, schema and index (not the
 * chunks: they are checked when read).  `opts` may be NULL.  Returns SL_OK,
 * SL_EIO (cannot open/read), SL_ECORRUPT (a check failed; the message names
 * the file, structure and offset) or SL_EUNSUPPORTED (newer major version or
 * unknown required feature).  A file is used by one thread at a time; open it
 * once per thread to read in parallel (sl_slr_fetch and sl_slr_chunk_frames
 * excepted: see sl_slr_fetch). */
SL_API int sl_slr_open(const char *path, const sl_slr_open_opts *opts,
                       sl_slr_file **out);
SL_API void sl_slr_close(sl_slr_file *f);
SL_API const char *sl_slr_path(const sl_slr_file *f);
/* The schema (borrowed, frozen), including the file's metadata. */
SL_API const sl_schema *sl_slr_schema(const sl_slr_file *f);
SL_API uint64_t sl_slr_records(const sl_slr_file *f);
SL_API uint64_t sl_slr_chunks(const sl_slr_file *f);
/* Chunks skipped under SL_CORRUPT_SKIP_CHUNK so far. */
SL_API uint64_t sl_slr_bad_chunks(const sl_slr_file *f);

typedef struct sl_slr_chunk_info {
  uint64_t offset;       /* of the chunk header */
  uint64_t first_record; /* number of the chunk's first record in the file */
  uint32_t records;
  uint64_t stored_size; /* compressed payload bytes (0 if not read yet) */
  uint64_t raw_size;    /* decompressed payload bytes (0 if not read yet) */
  uint32_t codec;       /* 1 one zstd frame, 2 framed, 3 compact framed
                           (docs/FORMAT.md; 0 if not read yet) */
} sl_slr_chunk_info;
/* Index entry of chunk `c` (from the index; stored/raw sizes come from the
 * chunk header, which this call reads and checks).  SL_EINVAL out of range,
 * SL_ECORRUPT/SL_EIO when the header fails. */
SL_API int sl_slr_chunk_info_get(sl_slr_file *f, uint64_t c,
                                 sl_slr_chunk_info *out);
/* The frame layout of chunk `c`: records per frame (the last frame may hold
 * fewer) and frames; a chunk written without frames is one frame of all
 * its records.  Reads and checks the chunk's header and frame table (not
 * the frames).  SL_EINVAL out of range, SL_ECORRUPT/SL_EIO.  Safe to call
 * alongside sl_slr_fetch. */
SL_API int sl_slr_chunk_frames(sl_slr_file *f, uint64_t c,
                               uint32_t *frame_records, uint32_t *frames);
/* Bytes of the file's zstd dictionary (docs/FORMAT.md, "Dictionary
 * block"; its block adds 12), 0 when it has none. */
SL_API uint64_t sl_slr_dict_size(const sl_slr_file *f);
/* The chunk holding record k (binary search of the index); k must be <
 * sl_slr_records. */
SL_API uint64_t sl_slr_chunk_of(const sl_slr_file *f, uint64_t k);

/* Random access: record k as a new sample (tensors are zero-copy views into
 * the decoded chunk, which stays alive while any of its samples does).
 * Decodes the chunk unless it is the one decoded last; in a framed file
 * (sl_slr_writer_set_frames) it is sl_slr_fetch, which decodes only
 * the record's frame.  SL_EINVAL when k is
 * out of range; SL_ECORRUPT/SL_EIO when its chunk fails a check (whatever
 * the policy). */
SL_API int sl_slr_read(sl_slr_file *f, uint64_t k, sl_sample **out);
/* Random access by frame: record k as a new sample, decoding only the
 * zstd frame that holds it (a chunk of a file written without frames is
 * one frame: the whole chunk is decoded), through a small cache of the last
 * decoded frames.  Samples are zero-copy views into the decoded frame,
 * which stays alive while any of them does (also after sl_slr_close).
 * Checks as sl_slr_read, per frame: the frame table's CRC, the frame's
 * CRC, sizes and records; SL_ECORRUPT names the file, chunk and frame.
 * SL_EINVAL when k is out of range, SL_EIO, SL_ENOMEM.
 * Thread safety: callable from several threads at once on one file, also
 * while one thread reads it by the other calls.  Each call borrows one of
 * the file's fetch contexts (a zstd decompression context, a read buffer
 * and a cache of SLR_FETCH_SLOTS = 4 decoded frames), made on first need and
 * freed by sl_slr_close: as many as calls ever ran at once.  A thread gets
 * back the context it used last unless another took it meanwhile, so the
 * cache behaves as a per-thread one; the file's dictionary is digested
 * once at open and shared. */
SL_API int sl_slr_fetch(sl_slr_file *f, uint64_t k, sl_sample **out);
/* Reads and checks every byte of the file: all chunks (CRCs, sizes, record
 * tables against the schema), contiguity, index agreement.  Returns SL_OK or
 * the first problem (SL_ECORRUPT with file, chunk and offset). */
SL_API int sl_slr_verify(sl_slr_file *f);

/* A reader over records [first, first + count) of `path` (count
 * UINT64_MAX = to the end), read sequentially chunk by chunk with the policy
 * of `opts`; its schema is the file's.  Each reset starts the range again. */
SL_API int sl_slr_reader(const char *path, const sl_slr_open_opts *opts,
                         uint64_t first, uint64_t count, sl_reader **out);
/* A reader over chunks [first_chunk, first_chunk + nchunks) of `path`: the
 * unit used to split a file among threads and ranks. */
SL_API int sl_slr_reader_chunks(const char *path, const sl_slr_open_opts *opts,
                                uint64_t first_chunk, uint64_t nchunks,
                                sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Opening files by name: the format registry (docs/DATA.md)                */
/* ------------------------------------------------------------------------ */

/* Names.  A file is named "TAG:PATH" or by a bare PATH.
 *  - TAG is a letter followed by up to 30 letters, digits, '_', '-' or '+';
 *    the text before the first ':' is a tag only if it has that form, so
 *    "/data/a:b.slr" is a bare path, while a relative path whose first
 *    component holds a ':' must be written "./a:b.slr" or "slr:a:b.slr".
 *  - A bare PATH takes the tag mapped to its extension: the longest
 *    registered suffix that ends it (".slr" -> "slr" is built in).
 *  - A PATH holding '*', '?' or '[' is a glob(3) pattern.  It expands to the
 *    matching files sorted in byte order (strcmp, not the locale's order, so
 *    every rank of a job sees the same list whatever its environment); each
 *    match is then tagged as above.  A pattern that matches nothing is
 *    SL_EINVAL naming the pattern.
 *  - Before globs, a PATH's brace patterns are expanded left to right, as
 *    WebDataset writes shard names: ranges "{000000..000127}" (zero-padded
 *    to the first bound's width) and lists "{a,b}", several per name, at
 *    most 100000 names; the results keep the name's order.  A URL takes
 *    braces but not globs.  A file named exactly like the pattern is that
 *    file (braces and globs alike).
 * Built-in tags: "slr" (sl_slr_reader over the whole file), "idx"
 * (sl_idx_reader: MNIST-style images with their labels; the suffixes
 * "-idx3-ubyte" and "-idx3-ubyte.gz" map to it), "text" (sl_text_reader:
 * one sample per line, with an optional parser plugin) and "image"
 * (sl_image_reader: a folder of JPEG/PNG files or one of them; the suffixes
 * ".jpg", ".jpeg" and ".png" map to it). */

/* Options for opening one file.  Extensible: `size` must be
 * sizeof(sl_open_opts) as the caller compiled it (SL_OPEN_OPTS_INIT sets it),
 * and the zero of every other field is its default.  A later library that
 * appends fields reads only `size` bytes and defaults the rest; a library
 * older than the caller's header refuses a larger struct whose extra bytes
 * are not all zero (SL_EUNSUPPORTED).  size 0 is SL_EINVAL. */
typedef struct sl_open_opts {
  size_t size;          /* sizeof(sl_open_opts) */
  sl_slr_open_opts slr; /* tag slr: corruption policy and limits */
  /* Appended with the idx and text readers (sl_idx_reader and
   * sl_text_reader below).  Strings are borrowed for the call. */
  /* tag idx: the labels file; NULL derives it from the images file's name */
  const char *labels;
  /* tag text: 1 maps the file with mmap(2); 0 reads it with read(2) */
  int text_mmap;
  /* tag text: path of a parser plugin (a shared object, docs/PLUGINS.md)
   * that turns each line into a sample; NULL: the line itself */
  const char *parser;
  /* tag text: the plugin's options, given to its init (NULL is "") */
  const char *parser_options;
  /* Appended with the image reader.  tag image: its options (channels,
   * size, threads, skip policy; see sl_image_reader); NULL: the defaults.
   * Borrowed for the call. */
  const struct sl_image_opts *image;
  /* Appended with the token reader.  tag tokens: its options (seq_len is
   * required); see sl_tokens_reader.  Borrowed for the call. */
  const struct sl_tokens_opts *tokens;
  /* Appended with the formats of docs/FORMATS.md: the options of tags npy,
   * csv and tfrecord (sl_npy_reader, sl_csv_reader, sl_tfrecord_reader);
   * NULL: their defaults.  Borrowed for the call. */
  const struct sl_npy_opts *npy;
  const struct sl_csv_opts *csv;
  const struct sl_tfrecord_opts *tfrecord;
  /* Appended with brace patterns in every name.  tag wds: when set, the
   * name's shards (one or many: braces, globs) are read by sl_wds_open with
   * these options (threads, shard shuffle, rank/world; world 0 takes both
   * from the launcher's environment); NULL: each shard is one sl_wds_reader,
   * several chained - unless the launcher's environment (sl_shard_env)
   * says world > 1: then sl_wds_open with SL_WDS_OPTS_INIT, so that each
   * rank reads its equal share.  Set for a name that is not all wds
   * shards, it is SL_EINVAL.  Borrowed for the call. */
  const struct sl_wds_opts *wds;
} sl_open_opts;
/* clang-format off */
#define SL_OPEN_OPTS_INIT                                                      \
  {sizeof(sl_open_opts), {SL_CORRUPT_FAIL, 0, 0},                              \
   NULL /* labels */, 0 /* text_mmap */, NULL /* parser */,                    \
   NULL /* parser_options */, NULL /* image */, NULL /* tokens */,             \
   NULL /* npy */, NULL /* csv */, NULL /* tfrecord */, NULL /* wds */}
/* clang-format on */

/* A format's constructor: opens `path` (the "TAG:" removed, globs already
 * expanded) as a reader.  `opts` is never NULL: the library passes a complete
 * sl_open_opts of its own version with the caller's options and the defaults
 * filled in.  Returns SL_OK and *out, or an error with its detail set (name
 * the path).  Called without any registry lock held, possibly from several
 * threads at once. */
typedef int (*sl_format_open_fn)(void *ud, const char *path,
                                 const sl_open_opts *opts, sl_reader **out);

/* Registers format `tag`: names "tag:..." are then opened by fn(ud, ...).
 * Registering a tag that exists (the built-in "slr" included) replaces its fn
 * and ud for the calls that start afterwards; calls already running finish
 * with the old ones.  fn NULL removes the tag.  The registry never frees or
 * copies what `ud` points to: it must stay valid while any sl_open may still
 * use it (for most programs, forever).  Borrows `tag` (copied).  Returns
 * SL_OK, SL_EINVAL (malformed tag, or removing a tag that is not registered)
 * or SL_ENOMEM (all 64 slots taken).  Thread-safe (one mutex). */
SL_API int sl_format_register(const char *tag, sl_format_open_fn fn, void *ud);

/* Maps the extension `ext` (a suffix such as ".slr" or "-ubyte": 1..31
 * bytes, no '/', compared case-sensitively with the end of a bare path) to
 * `tag`, replacing an earlier mapping of the same suffix; `tag` NULL removes
 * the mapping.  The tag need not be registered yet: it is looked up when a
 * name is opened.  Borrows both strings (copied).  Returns SL_OK, SL_EINVAL
 * (malformed ext or tag, or removing an unmapped ext) or SL_ENOMEM (all 64
 * slots taken).  Thread-safe. */
SL_API int sl_format_extension(const char *ext, const char *tag);

/* Opens the file or files named `name` (see "Names") as one reader, with
 * `opts` (NULL: defaults).  A pattern matching several files gives their
 * readers one after another (sl_chain: their schemas must be equal).  Borrows
 * `name` and `opts`.  Returns SL_OK and *out; SL_EINVAL for an unknown tag
 * (the message lists the registered tags), a bare path with no known
 * extension, an empty path, a pattern that matches nothing or bad options;
 * SL_EIO when a pattern cannot be read; SL_EUNSUPPORTED for options from a
 * newer header; otherwise the format's own error (for slr: SL_EIO naming a
 * missing file, SL_ECORRUPT, ...).  Thread-safe. */
SL_API int sl_open(const char *name, const sl_open_opts *opts, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Sharding and open_files: the epoch plan (docs/DATA.md)                    */
/* ------------------------------------------------------------------------ */

/* How the N records of an epoch's sequence are split among `world` ranks. */
typedef enum sl_shard_policy {
  SL_SHARD_PAD = 0,   /* every rank gets ceil(N/world): the sequence is
                         extended by repeating its first records, and rank r
                         takes positions [r*Q, (r+1)*Q) of the extension */
  SL_SHARD_DROP = 1,  /* every rank gets q = floor(N/world): rank r takes
                         [r*q, (r+1)*q); the last N mod world records of the
                         sequence are not read this epoch */
  SL_SHARD_UNEVEN = 2 /* rank r takes [floor(r*N/world),
                         floor((r+1)*N/world)): an exact cover, sizes
                         differing by at most one */
} sl_shard_policy;

/* In sl_open_files_opts.rank/world: take both from the environment. */
#define SL_RANK_FROM_ENV (-1)

/* This process's rank and world size from the environment of the common
 * launchers, the first pair of which either variable is set: RANK /
 * WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open
 * MPI's mpirun), PMI_RANK / PMI_SIZE (MPICH, Intel MPI), PADDLE_TRAINER_ID /
 * PADDLE_TRAINERS_NUM (Paddle); rank 0 of world 1 when none is set.  Returns
 * SL_OK, or SL_EINVAL naming the variable when one of a pair is missing, a
 * value is not a decimal integer (rank >= 0, 1 <= world <= INT32_MAX) or the
 * rank is not below the world size.  Thread-safe (reads the environment). */
SL_API int sl_shard_env(int *rank, int *world);

/* The number of records rank `rank` of `world` reads from an epoch of `n`
 * records under `policy`; 0 when world < 1 or rank is not in [0, world).
 * Thread-safe. */
SL_API uint64_t sl_shard_count(uint64_t n, int rank, int world,
                               sl_shard_policy policy);

/* Options of sl_open_files.  Extensible like sl_open_opts: `size` must be
 * sizeof(sl_open_files_opts) (SL_OPEN_FILES_OPTS_INIT sets it and the
 * defaults). */
typedef struct sl_open_files_opts {
  size_t size;          /* sizeof(sl_open_files_opts) */
  sl_slr_open_opts slr; /* how the files are opened; under
                           SL_CORRUPT_SKIP_CHUNK the cap counts bad chunks
                           over all files, per pass */
  uint32_t threads;     /* worker threads (0 = 1), at most the thread
                           limit: 1024, or SLUICE_MAX_THREADS (1..1024);
                           more than 4 x the usable CPUs (at least 8) is
                           accepted with a notice; SL_THREADS_AUTO: tuned
                           at run time (reader.h) */
  uint32_t buffer;      /* decoded samples each worker may hold ready ahead
                           of the consumer (0 = 1024); a chunk's records
                           travel together, so a larger chunk is still
                           admitted alone */
  int unordered;        /* 0: the plan's order, identical for any number of
                           threads; 1: samples as soon as they are ready */
  int shuffle;          /* 0: files, chunks and records in order; 1: the
                           epoch plan's permutations */
  uint64_t seed;        /* of the permutations */
  uint64_t epoch;       /* the epoch of the first pass; each reset adds 1 */
  uint32_t window;      /* with shuffle: records are permuted within windows
                           of this many consecutive (permuted) chunks
                           (0 = 32: mixes class-sorted files; holds up to
                           32 decoded chunks, docs/DATA.md) */
  int rank, world;      /* world <= 0 (SL_RANK_FROM_ENV): both from
                           sl_shard_env; else 0 <= rank < world */
  sl_shard_policy remainder;
} sl_open_files_opts;
/* clang-format off */
#define SL_OPEN_FILES_OPTS_INIT                                                \
  {sizeof(sl_open_files_opts), {SL_CORRUPT_FAIL, 0, 0},                        \
   0 /* threads */, 0 /* buffer */, 0 /* unordered */, 0 /* shuffle */,       \
   0 /* seed */, 0 /* epoch */, 0 /* window */,                                \
   SL_RANK_FROM_ENV, SL_RANK_FROM_ENV, SL_SHARD_PAD}
/* clang-format on */

/* One reader over the records of several files, read by `threads` worker
 * threads (each with its own file handles and decompression contexts) in the
 * order of the epoch plan (docs/DATA.md): with shuffle off and world 1, every
 * record of file 0, then of file 1, and so on.
 *
 * `names` (n >= 1, borrowed) are expanded as by sl_open (tags, extensions,
 * globs) into one list of files, in order.  Every file must be tagged "slr":
 * the plan needs each file's chunk and record counts, which only an index
 * gives without reading the file; another tag is SL_EUNSUPPORTED naming the
 * file.  Every file is opened once here to read its index: one that cannot
 * be opened fails the call with its own error (SL_EIO naming a missing file,
 * SL_ECORRUPT, ...), and their schemas must be equal (sl_schema_equal):
 * SL_ESHAPE naming the first file that differs.  The reader's schema is the
 * first file's.  `opts` NULL means SL_OPEN_FILES_OPTS_INIT.
 *
 * Pass p (the resets since creation, resets in mid-pass included) reads
 * epoch opts->epoch + p, its plan recomputed; to resume at another epoch,
 * open again with that epoch.  The workers start at once; reset and destroy
 * stop and join them first, and are safe at any moment.
 *
 * An error in a worker (a file that became unreadable, a corrupt chunk under
 * SL_CORRUPT_FAIL, SL_ENOMEM) reaches the consumer with its code and the
 * message "open_files: epoch E, sample S: " followed by the file's own
 * message (path, chunk and offset).  In ordered mode it arrives in order,
 * after the S samples before it (for a shuffle window of several chunks: at
 * the start of that window's samples).  Every worker is stopped and joined
 * before the error is returned.  Under SL_CORRUPT_SKIP_CHUNK a corrupt
 * chunk's records are left out and counted; past max_bad_chunks (0 = 16) in
 * one pass the pass fails with SL_ECORRUPT.
 *
 * Returns SL_OK and *out, or SL_EINVAL (no names, a NULL name, bad options,
 * a bad rank/world or environment variable, or any sl_open name error),
 * SL_EUNSUPPORTED, SL_EIO, SL_ECORRUPT, SL_ESHAPE or SL_ENOMEM.  The reader,
 * like any, is used by one thread at a time. */
SL_API int sl_open_files(const char *const *names, size_t n,
                         const sl_open_files_opts *opts, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* File readers: idx and text, and text parser plugins (docs/PLUGINS.md)     */
/* ------------------------------------------------------------------------ */

/* A reader over an idx image file (MNIST, Fashion-MNIST; plain or gzip) and
 * its labels: samples {image: <dtype>[d1, ..., dk], label: i64[]}, for
 * Fashion-MNIST {image: u8[28, 28], label: i64[]}, in file order; each reset
 * starts again.  The images file must have rank >= 2; the labels file rank 1
 * of an integer type (widened to i64 once, at open), with as many items.
 * `labels` NULL derives the labels file from the images file's name: the
 * last "images-idx3" or "images.idx3" in its base name becomes
 * "labels-idx1" / "labels.idx1" (so "t10k-images-idx3-ubyte.gz" pairs with
 * "t10k-labels-idx1-ubyte.gz"); when that file does not exist but the same
 * name with ".gz" added or removed does, that one is used.  Both files are
 * loaded whole at open; samples are zero-copy views into the two loaded
 * buffers, which live as long as the reader or any sample.  Borrows the
 * strings.  Returns SL_OK and *out; SL_EINVAL (a name with no labels
 * convention, a dtype/rank or count mismatch, naming both files); SL_EIO or
 * SL_ECORRUPT naming the file from the idx parser (missing, truncated,
 * corrupt gzip).  The reader, like any, is used by one thread at a time. */
SL_API int sl_idx_reader(const char *images, const char *labels,
                         sl_reader **out);

/* The version of the parser plugin ABI below; a plugin built against another
 * version is refused.  Bumped whenever sl_parser_api changes. */
#define SL_PARSER_ABI_VERSION 1u

/* What a parse callback returns to drop a line (a header, a comment): no
 * sample comes out of it, and reading goes on with the next line. */
#define SL_PARSER_SKIP 1

/* A text parser plugin: a shared object exporting
 *   const sl_parser_api *sl_parser_entry(void);
 * that returns a pointer to static storage.  libsluice loads it with
 * dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) - never unloaded, so samples
 * whose buffers were made by plugin code stay valid - and checks abi_version
 * before reading any other field.  The plugin calls the host's sl_* functions
 * (sl_schema_new, sl_sample_alloc, sl_set_error, ...): link it against the
 * shared libsluice, and load it into a process that uses that same libsluice
 * (or exports the same sl_* symbols), so both sides share one library. */
typedef struct sl_parser_api {
  uint32_t abi_version; /* SL_PARSER_ABI_VERSION, first in every version */
  const char *name;     /* short name for messages ("csv_floats") */
  /* Parses `options` (never NULL; "" when none) and builds the schema of
   * the samples it will make.  Returns SL_OK with *schema (a reference the
   * caller takes) and *state (opaque, may be NULL), or an error with
   * sl_set_error and nothing to free.  Called once per reader; several
   * readers may call it at the same time from different threads. */
  int (*init)(const char *options, sl_schema **schema, void **state);
  /* Turns one line (`len` bytes, not NUL-terminated, newline and a trailing
   * '\r' removed; may be empty) into a new sample of the schema, stored in
   * *out (the caller takes it).  Returns SL_OK, SL_PARSER_SKIP (no sample
   * for this line), or an error with sl_set_error saying what is wrong
   * (the host adds the file, line and plugin); after anything but SL_OK,
   * *out is ignored (leave it NULL, release what you made).  SL_EOF is not
   * an error code and is refused.  One state is used by one thread at a
   * time; `line` is valid only during the call. */
  int (*parse)(void *state, const char *line, size_t len, sl_sample **out);
  /* Frees the state (may be NULL: nothing to free). */
  void (*destroy)(void *state);
} sl_parser_api;

/* The symbol a plugin exports, and its type.  Define the entry point with
 * SL_PARSER_EXPORT so it stays visible when the plugin is compiled with
 * -fvisibility=hidden (as sluice's own build compiles everything):
 *   SL_PARSER_EXPORT const sl_parser_api *sl_parser_entry(void) { ... } */
#define SL_PARSER_ENTRY "sl_parser_entry"
typedef const sl_parser_api *(*sl_parser_entry_fn)(void);
#if defined(__GNUC__)
#define SL_PARSER_EXPORT __attribute__((visibility("default")))
#else
#define SL_PARSER_EXPORT
#endif
/* The plugin's entry point, declared here so that a plugin's definition is
 * checked against it (libsluice itself does not define it). */
SL_PARSER_EXPORT const sl_parser_api *sl_parser_entry(void);

/* A reader over the lines of the text file `path`: one sample per line
 * ("\n" ends a line and is removed, then one trailing "\r"; a last line
 * without "\n" counts; an empty file has no samples), in order; each reset
 * starts again.  use_mmap 1 maps the file (lines are zero-copy views into
 * the mapping, which lives while any sample does; a file truncated meanwhile
 * faults, as any mapping does); 0 reads it with read(2) in pieces into a
 * growing buffer and copies each line.  Both give identical samples.
 *
 * Without `parser` the schema is {line: bytes[-1]}.  With `parser` (the path
 * of a plugin, see sl_parser_api) each line goes to the plugin, started with
 * `parser_options` (NULL = ""), and the reader's schema is the one the
 * plugin declares; every sample it returns is checked against it.
 *
 * Errors name the file and, while reading, the 1-based line: SL_EIO
 * ("text: PATH: cannot open: ..."); a plugin that cannot be loaded (SL_EINVAL
 * with dlerror's text), lacks sl_parser_entry (SL_EINVAL) or has another ABI
 * version (SL_EUNSUPPORTED "... ABI version 2, this libsluice expects 1");
 * its init failing (its code, "text: PATH: parser NAME (SO): init: ...");
 * a line it rejects (its code, "text: PATH:17: parser NAME (SO): <its
 * message>"); a sample that does not fit the declared schema (SL_ESHAPE
 * "text: PATH:17: parser NAME (SO): field 'x': expected f32[4], got ...").
 * Borrows the strings (copied).  Returns SL_OK and *out or an error. */
SL_API int sl_text_reader(const char *path, int use_mmap, const char *parser,
                          const char *parser_options, sl_reader **out);

/* ------------------------------------------------------------------------ */
/* Other programs' formats: NumPy, CSV, WebDataset, TFRecord                 */
/* (docs/FORMATS.md)                                                         */
/* ------------------------------------------------------------------------ */

/* Options of sl_npy_reader.  Extensible like sl_open_opts: `size` is
 * sizeof(sl_npy_opts) (SL_NPY_OPTS_INIT sets it); zero fields are defaults. */
typedef struct sl_npy_opts {
  size_t size;
  const char *field; /* .npy: the field's name; NULL: the file's stem */
} sl_npy_opts;
#define SL_NPY_OPTS_INIT {sizeof(sl_npy_opts), NULL}

/* A reader of a NumPy file (tag `npy`, extensions .npy and .npz): a .npy
 * array (format 1.0 to 3.0, C order, little-endian, dtype bool, an integer
 * or f2/f4/f8) yields one sample per leading index, in one field named
 * after the file's stem ("x.npy" -> "x") or opts->field, of the array's
 * other dimensions (a 1-D array gives scalars).  An .npz (numpy.savez or
 * savez_compressed: stored or deflated members) yields one sample per
 * leading index with one field per member, named after it; every member
 * must have the same leading dimension.  The file is memory-mapped and
 * samples are views of it (deflated members are inflated once, at open).
 * Length known; saves its position.  Borrows `path` and `opts` (copied).
 * Returns SL_OK and *out, SL_EIO (cannot open or map, naming the file),
 * SL_ECORRUPT (a malformed header or archive, too few bytes, a CRC
 * mismatch), SL_EUNSUPPORTED (Fortran order, big-endian, a dtype sluice has
 * not, a compression method other than deflate), SL_EINVAL (a 0-d array,
 * members of different lengths) or SL_ENOMEM.  Thread-safe. */
SL_API int sl_npy_reader(const char *path, const sl_npy_opts *opts,
                         sl_reader **out);

/* Options of sl_csv_reader.  Extensible like sl_open_opts: `size` is
 * sizeof(sl_csv_opts) (SL_CSV_OPTS_INIT sets it); zero fields are defaults. */
typedef struct sl_csv_opts {
  size_t size;
  /* The fields, in order: "x:f32,y:i64,name:bytes" (a name without ":dtype"
   * has its dtype guessed); NULL: every column of the header, guessed.
   * Guessing looks at the first record: an integer is i64, another number
   * f32, anything else bytes. */
  const char *columns;
  char delimiter; /* 0: ',' */
  int no_header;  /* 1: the first line is data; columns then names every
                     column of the file, in order */
} sl_csv_opts;
#define SL_CSV_OPTS_INIT {sizeof(sl_csv_opts), NULL, 0, 0}

/* A reader of a CSV file (tag `csv`, extension .csv): RFC 4180 records
 * (quoted fields may hold the delimiter, line ends and doubled quotes;
 * "\n" or "\r\n" line ends; empty lines skipped), one sample per record,
 * one field per selected column: numbers (bool as 0/1/true/false, the
 * integer dtypes range-checked, f32, f64) are scalars, bytes are rank-1.
 * A record with another field count than the header, or a value that does
 * not parse as its column's dtype, fails the pass with SL_EINVAL naming
 * "FILE:LINE" and the column; a malformed quote is SL_ECORRUPT naming the
 * line.  The file is memory-mapped; samples own their values.  Length
 * unknown; saves its position (a byte offset).  Borrows `path` and `opts`
 * (copied).  Returns SL_OK and *out, SL_EIO (cannot open), SL_EINVAL (no
 * header, a column not in it, a bad columns option), SL_EUNSUPPORTED (f16
 * or bf16 columns) or SL_ENOMEM.  Thread-safe. */
SL_API int sl_csv_reader(const char *path, const sl_csv_opts *opts,
                         sl_reader **out);

/* A reader of one WebDataset tar shard (tag `wds`): a POSIX/ustar tar file
 * (GNU long names and pax headers read too) whose consecutive members
 * sharing a key (the name up to the first dot of its last component) form
 * one sample, one field per extension, named after it ("a/b.x.npy" is key
 * "a/b", field "x.npy"), plus a bytes field `__key__`.  Types: "cls" (an
 * integer written as text) -> i64 scalar; an extension ending in "npy" ->
 * the .npy array (dtype and rank fixed by the first sample, dimensions
 * variable); anything else ("txt", "json", "jpg", "png", ...) -> bytes,
 * which sl_decode_image decodes.  The fields are the shard's first
 * sample's (an image field, jpg, jpeg or png, takes any of the three); a
 * later sample missing one, or with another, fails the pass with
 * SL_EINVAL naming the shard and key.  The shard is memory-mapped; bytes
 * and npy fields are views of it.  Length: a local shard's samples,
 * counted once by walking its headers (unknown for a URL).  Saves its
 * position (a byte offset).  Borrows `path`.  Returns SL_OK and *out,
 * SL_EIO (cannot open), SL_ECORRUPT (a bad header checksum, a member past
 * the end, a shard that ends without its end-of-archive blocks or with
 * data after them), SL_EINVAL (no samples) or SL_ENOMEM.  Thread-safe. */
SL_API int sl_wds_reader(const char *path, sl_reader **out);

/* Options of sl_wds_open.  Extensible like sl_open_opts: `size` is
 * sizeof(sl_wds_opts) (SL_WDS_OPTS_INIT sets it); zero fields are
 * defaults. */
typedef struct sl_wds_opts {
  size_t size;
  uint32_t threads; /* shard-reading threads (0 = 1); not SL_THREADS_AUTO
                       (SL_EINVAL: the lane count decides the order) */
  int shuffle;      /* 1: the shard order of pass p is drawn from (seed, p),
                       the same on every rank */
  uint64_t seed;
  int rank, world;  /* world 0: from the launcher's environment
                       (sl_shard_env) */
  size_t buffer;    /* samples each thread reads ahead (0 = 64) */
  /* Appended with equal shares.  World > 1: what each rank reads of the
   * pass's samples (sl_shard_policy, as sl_open_files): SL_SHARD_PAD (0,
   * the default) and SL_SHARD_DROP give every rank the same count. */
  sl_shard_policy remainder;
  /* Appended with alternatives.  NULL: the fields are the first sample's
   * (an image field, jpg, jpeg or png, takes any of the three in later
   * samples).  Else the fields, comma-separated, each "EXT", "EXT;EXT..."
   * (alternatives: the sample's one member among them) or "NAME=EXT;..."
   * (the field named NAME); members of no field are passed over. */
  const char *fields;
  /* A sample without a member for every field: SL_WDS_MISSING_FAIL (0)
   * fails the pass naming the shard and key; SL_WDS_MISSING_SKIP passes
   * it over (it is not part of the pass: counts, shares and the length
   * leave it out too). */
  int missing;
} sl_wds_opts;
#define SL_WDS_MISSING_FAIL 0
#define SL_WDS_MISSING_SKIP 1
/* clang-format off */
#define SL_WDS_OPTS_INIT                                                       \
  {sizeof(sl_wds_opts), 0, 0, 0, 0, 0, 0, SL_SHARD_PAD, NULL,                  \
   SL_WDS_MISSING_FAIL}
/* clang-format on */

/* WebDataset shards `names[0..n)` read by opts->threads threads as one
 * reader.  A name may hold brace patterns ("train-{000000..000127}.tar",
 * "{a,b}"; ranges zero-padded to the first bound's width) and globs; a
 * name without a tag is "wds:".  Pass p takes the shards in the given
 * order (or shuffled by (seed, p)): the pass's sequence is their samples
 * one shard after another.  World 1 reads all of it; rank r of W > 1 reads
 * the positions opts->remainder gives it (sl_shard_count: by default
 * ceil(N/W), every rank as many, wrapping to the first samples), so a
 * shard may be split between ranks and a world larger than the shard count
 * still gives every rank samples; the sample counts of the shards come from
 * walking their tar headers at open (for URLs, ranged reads of the
 * headers).  The rank's part is cut into pieces at shard boundaries;
 * thread t of T reads pieces t, t + T, ..., and the output takes one
 * sample from each thread in turn, so it depends on T but not on timing.
 * Fields: as sl_wds_reader, fixed by the first shard's first sample, or
 * opts->fields.  Length: known for world > 1 and for local shards (their
 * headers walked once, on the first sl_reader_length); unknown for URLs
 * read by one rank.  Saves its position (per thread counts; a restore
 * walks tar headers to them).  Borrows `names` and `opts`.  Returns SL_OK
 * and *out, SL_EINVAL (no names, a name matching nothing, a bad brace
 * pattern, a tag other than wds, rank outside [0, world), too many
 * threads, bad fields), SL_EIO, SL_ECORRUPT or SL_ENOMEM. */
SL_API int sl_wds_open(const char *const *names, size_t n,
                       const sl_wds_opts *opts, sl_reader **out);

/* sl_tfrecord_opts.compression */
#define SL_TFRECORD_AUTO 0 /* GZIP when the file starts with its magic */
#define SL_TFRECORD_NONE 1
#define SL_TFRECORD_GZIP 2

/* Options of sl_tfrecord_reader.  Extensible like sl_open_opts: `size` is
 * sizeof(sl_tfrecord_opts) (SL_TFRECORD_OPTS_INIT sets it); zero fields are
 * defaults. */
typedef struct sl_tfrecord_opts {
  size_t size;
  /* The tf.train.Example features to take, in order:
   * "image:bytes,label:i64,x:f32[3],ids:i64[-1]": bytes from a bytes_list
   * (one value), integer dtypes from an int64_list (range-checked), f32 and
   * f64 from a float_list; no dimensions: one value, [d...]: exactly that
   * many, [-1]: any count (rank 1).  NULL: no decoding, samples are
   * {record: bytes}. */
  const char *features;
  int compression; /* SL_TFRECORD_AUTO (0), _NONE or _GZIP */
} sl_tfrecord_opts;
#define SL_TFRECORD_OPTS_INIT {sizeof(sl_tfrecord_opts), NULL, 0}

/* A reader of a TFRecord file (tag `tfrecord`, extension .tfrecord),
 * uncompressed or GZIP: each record's length and data are checked against
 * their masked CRC32Cs (a mismatch or a record cut short is SL_ECORRUPT
 * naming the file, record and offset).  With opts->features each record is
 * a tf.train.Example decoded by protobuf-c into the named fields (a
 * feature missing, of another list kind or with another value count fails
 * with SL_EINVAL naming the record); without, {record: bytes}.  A plain
 * file is memory-mapped, a GZIP one inflated at open.  Length unknown;
 * saves its position (a byte offset).  Borrows `path` and `opts` (copied).
 * Returns SL_OK and *out, SL_EIO, SL_ECORRUPT (a damaged GZIP stream),
 * SL_EINVAL (a bad features option), SL_EUNSUPPORTED (features asked of a
 * libsluice built without protobuf-c: the message says so) or SL_ENOMEM.
 * Thread-safe. */
SL_API int sl_tfrecord_reader(const char *path, const sl_tfrecord_opts *opts,
                              sl_reader **out);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_OPEN_H */
